/*
 * session_registry.h - what every worker of the gateway shares about live
 * sessions: how many each tenant holds (and all of them together), and the
 * watch tokens that let a read-only watcher follow one session.
 */
#ifndef GW_SESSION_REGISTRY_H
#define GW_SESSION_REGISTRY_H

#include <stddef.h>
#include <stdint.h>

#include <h2o.h>

#include "common/gw_limits.h"
#include "records/transcript.h"

#define GW_WATCH_TOKEN_PREFIX "mwt_"
#define GW_WATCH_TOKEN_LEN    (4 + 64) /* prefix + 32 random bytes in hex */

enum gw_session_refusal {
    GW_SESSIONS_OK = 0,
    GW_SESSIONS_TENANT_FULL, /* the tenant holds its max_concurrent */
    GW_SESSIONS_FULL,        /* the gateway holds sessions.max_sessions */
    GW_SESSIONS_NO_MEMORY,
    GW_SESSIONS_UNAVAILABLE, /* shared counts, and Redis could not be asked (fail closed) */
    GW_SESSIONS_ASKING,      /* shared counts: the answer comes later */
};

struct redis_client;
struct redis_conn;

/* Count each tenant's sessions across gateways too, in rc's Redis (at
 * start, before its first connection and redis_beat_start; a dead
 * gateway's sessions stop counting lease_ms after its last beat). */
void gw_sessions_share(struct redis_client *rc);

/* The answer to an acquire that asked Redis, on the loop it was made on,
 * exactly once: GW_SESSIONS_OK (counted), TENANT_FULL or UNAVAILABLE. */
typedef void (*gw_sessions_fn)(void *arg, enum gw_session_refusal r);

/* Count one more session of tenant, unless it or the gateway is full.
 * With shared counts an acquire that fits here asks Redis on loop's
 * connection: GW_SESSIONS_ASKING, counted meanwhile, and fn(arg, ...)
 * follows (a refusal gives the count back). */
enum gw_session_refusal gw_sessions_acquire(const char *tenant, unsigned tenant_max, unsigned total_max, h2o_loop_t *loop,
                                            gw_sessions_fn fn, void *arg);

/* Retry-After for GW_SESSIONS_UNAVAILABLE (>= 1000 ms). */
uint64_t gw_sessions_retry_after_ms(void);
void gw_sessions_release(const char *tenant);
/* Sessions open now (of tenant; NULL: all). */
unsigned gw_sessions_count(const char *tenant);

/* What a watch token grants: one session's transcript, read only. */
struct gw_watch_grant {
    struct gw_transcript *t; /* held: gw_watch_leave() releases it */
    char tenant[GW_MAX_TENANT_NAME + 1];
    char session_id[GW_REQUEST_ID_LEN + 1]; /* the session's request id */
    uint64_t expires_ms;                    /* the token's (monotonic clock) */
};

/*
 * A new token for session_id (replacing an earlier one of that session),
 * valid for ttl_s seconds and for at most max_watchers watchers at once.
 * token gets GW_WATCH_TOKEN_LEN characters and a NUL.  0, or -1 when the
 * table is full or memory ran out.
 */
int gw_watch_issue(struct gw_transcript *t, const char *tenant, const char *session_id, unsigned ttl_s, unsigned max_watchers,
                   char token[GW_WATCH_TOKEN_LEN + 1]);

/* A watcher presents token: 0 with g filled (one watcher counted), or -1
 * with *why (unknown or expired token, session over, too many watchers). */
int gw_watch_join(const char *token, size_t len, struct gw_watch_grant *g, const char **why);
/* The watcher is gone: uncount it and release the transcript. */
void gw_watch_leave(struct gw_watch_grant *g);

/* The session is over: its token stops working. */
void gw_watch_revoke(const char *session_id);

#endif /* GW_SESSION_REGISTRY_H */
