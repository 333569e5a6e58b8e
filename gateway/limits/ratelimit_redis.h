/*
 * ratelimit_redis.h - the rl_limiter backend whose state lives in Redis, so
 * that several gateways share each tenant's rate, in-flight count and CPU
 * budget (theory of operation: ratelimit_redis.c).
 */
#ifndef MOAT_RATELIMIT_REDIS_H
#define MOAT_RATELIMIT_REDIS_H

#include <stddef.h>
#include <stdint.h>

#include "ratelimit.h"
#include "store/redis_client.h"

/* What a decision does while Redis does not answer. */
enum rl_redis_unavailable {
    RL_REDIS_FAIL_CLOSED, /* RL_BACKEND_ERROR (the gateway answers 503 with Retry-After) */
    RL_REDIS_LOCAL,       /* an in-memory limiter at each limit / gateways */
};

struct rl_redis_options {
    struct redis_client_options redis; /* the connection (rl_redis_new only; timeout_ms: each decision's answer,
                                        * lease_ms: in-flight slots of a gateway that stops renewing expire after it) */
    enum rl_redis_unavailable on_unavailable;
    unsigned gateways; /* RL_REDIS_LOCAL: each limit is divided by this */
};

/*
 * The backend (rl_ops.deferred): copies what o points at; connects nothing
 * yet.  Each event loop that asks for a decision gets its own connection,
 * made on its first decision and remade after a loss.  NULL (err set) on a
 * bad option or out of memory.
 */
struct rl_limiter *rl_redis_new(const struct rl_redis_options *o, char *err, size_t errlen);

/* The same on a Redis client the caller made and shares with others (the
 * gateway's one client, store/redis_client.h; o->redis is not read): the
 * limiter registers its script on rc (before rc's first connection) and
 * never frees rc.  Free rc first (after the loops stopped: its pending
 * decisions are then answered as unavailable), then rl_destroy: the
 * limiter's script stays linked in rc until rc goes. */
struct rl_limiter *rl_redis_new_on(struct redis_client *rc, const struct rl_redis_options *o, char *err, size_t errlen);

#endif /* MOAT_RATELIMIT_REDIS_H */
