/*
 * admin_store.h - where moatctl's tenants, keys and issuers are kept: one
 * small interface (lock, read, stage, commit, unlock) and two
 * implementations: a file beside the configuration (admin_store.c), and
 * Redis shared by several gateways, each keeping a file copy in step
 * (admin_store_redis.c).
 */
#ifndef GW_ADMIN_STORE_H
#define GW_ADMIN_STORE_H

#include <stddef.h>
#include <sys/types.h>

#include <jansson.h>

struct admin_store;

struct admin_store_ops {
    /* Exclusive access until unlock (other moatctl runs, other supervisors on the same store).  0 or -1. */
    int (*lock)(struct admin_store *s, char *err, size_t errlen);
    /* The current document (an empty store if there is none yet), checked (admin_store_check); NULL with err. */
    json_t *(*read)(struct admin_store *s, char *err, size_t errlen);
    /* Write doc as the candidate, durable, at s->staged (the path the configuration parser checks).  0 or -1. */
    int (*stage)(struct admin_store *s, const json_t *doc, char *err, size_t errlen);
    /* The candidate becomes the store, atomically.  0 or -1 (the store is then unchanged). */
    int (*commit)(struct admin_store *s, char *err, size_t errlen);
    /* Drop a candidate not committed and release the lock. */
    void (*unlock)(struct admin_store *s);
    /* Merge keys' last use (an object: key id -> unix seconds) into the
     * store's record of it, the later of each kept.  Outside lock/unlock
     * (it takes what it needs).  0 or -1 with err. */
    int (*note_used)(struct admin_store *s, json_t *used, char *err, size_t errlen);
    /* The store's record of keys' last use, as note_used takes it (an empty
     * object when there is none yet); NULL with err. */
    json_t *(*read_used)(struct admin_store *s, char *err, size_t errlen);
};

struct admin_redis;

struct admin_store {
    const struct admin_store_ops *ops;
    struct admin_redis *redis; /* the Redis store's state; NULL: the file store */
    char *path;                /* the store */
    char *staged;              /* the candidate, while one is staged; NULL otherwise */
    char *temp;                /* where the candidate is written */
    char *lock_path;
    char *used_path; /* keys' last use (note_used): PATH.used */
    int lock_fd;
    uid_t owner; /* the gateway's user reads the store after its privilege drop */
    gid_t group;
};

/* The store in the file path, owned by owner:group (mode 0600).  0 or -1 (out of memory). */
int admin_store_file_init(struct admin_store *s, const char *path, uid_t owner, gid_t group);
void admin_store_file_free(struct admin_store *s);

/* The file implementation's operations: the Redis store keeps its copy with them. */
extern const struct admin_store_ops admin_store_file_ops;

/* A record of keys' last use as note_used takes it and read_used returns
 * it: an object of key ids, each a time in unix seconds (0 .. 2^53).  0, or
 * -1 with err naming what is wrong. */
int admin_used_check(json_t *used, char *err, size_t errlen);

#endif
