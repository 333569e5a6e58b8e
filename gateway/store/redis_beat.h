/*
 * redis_beat.h - this gateway process's heartbeat in the shared Redis:
 * the key "<prefix>g:<name>" that tells the other gateways it is alive
 * (the shared queue's consumers, the results store's pending records and
 * the session counts are held in that name).  Theory of operation:
 * redis_beat.c.
 */
#ifndef GW_REDIS_BEAT_H
#define GW_REDIS_BEAT_H

#include <stddef.h>

#include "redis_client.h"

/* Called on the beat's thread after each beat Redis answered, with the
 * beat's connection: work that heals by being done again (the session
 * counts are republished).  At most REDIS_BEAT_MAX_HOOKS, added before
 * redis_beat_start. */
#define REDIS_BEAT_MAX_HOOKS 4
typedef void (*redis_beat_fn)(struct redis_conn *c);
int redis_beat_on_beat(redis_beat_fn fn);

/*
 * Start beating for rc (once, at start-up, after every user registered
 * its scripts, before the workers run): a thread with an event loop of
 * its own and its own connection of rc.  0, or -1 with err set.
 */
int redis_beat_start(struct redis_client *rc, char *err, size_t errlen);

/* This process's name in the shared state is redis_client_id(rc); its
 * key is redis_client_beat_prefix(rc) followed by it. */

#endif /* GW_REDIS_BEAT_H */
