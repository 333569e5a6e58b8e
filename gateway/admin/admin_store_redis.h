/*
 * admin_store_redis.h - the admin store kept in Redis, shared by several
 * gateways (control.store_backend: redis), and each supervisor's copy of
 * it kept in step (admin_store_redis.c).
 */
#ifndef GW_ADMIN_STORE_REDIS_H
#define GW_ADMIN_STORE_REDIS_H

#include <poll.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

#include "admin_store.h"
#include "config/config.h"

/*
 * The store in Redis at the limiter section's connection, with the file
 * at path (owned by owner:group, mode 0600) as this gateway's copy: the
 * store's operations work on Redis and keep the copy.  Connects on first
 * use.  0 or -1 (out of memory, no randomness for its lock token).
 */
int admin_store_redis_init(struct admin_store *s, const char *path, uid_t owner, gid_t group, const struct gw_limiter_config *l);

/* Either store's memory (the file store's too); the connections close. */
void admin_store_free(struct admin_store *s);

/* Keeping the copy in step, from the supervisor's poll loop (control.c):
 * the descriptor the store's Redis thread wakes it on (a change was
 * published, the subscription was made again; 1 once the thread runs,
 * else 0) and the milliseconds until the next resync (-1: never; not a
 * Redis store). */
int admin_store_redis_pollfd(const struct admin_store *s, struct pollfd *p);
int admin_store_redis_timeout(const struct admin_store *s);

/*
 * After poll (revents: the subscription's, or 0): read what was published,
 * reconnect when it is time, compare versions when a message came or the
 * resync period ran out.  1 when Redis holds a version the copy does not:
 * *doc (checked for shape, the caller's reference) and *version to apply;
 * 0 otherwise.  Every Redis call is bounded by the section's timeouts.
 */
int admin_store_redis_follow(struct admin_store *s, short revents, json_t **doc, uint64_t *version);

/* The caller applied version (ok 1: the copy holds it now) or refused it
 * (ok 0: not offered again until another version comes). */
void admin_store_redis_applied(struct admin_store *s, uint64_t version, int ok);

/* For moatctl status: where, connected or not, the version the copy holds. */
json_t *admin_store_redis_status(const struct admin_store *s);

#endif
