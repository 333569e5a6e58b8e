/*
 * judge0_store.h - where finished Judge0 submissions are kept until their
 * owner asks for them (GET /submissions/{token}).
 *
 * The interface is a record's text by (tenant, token): put and get, nothing
 * about its shape, so a durable or shared store (issue 12 item 2: restart-
 * safe, several gateways) can replace the in-memory one behind the same
 * calls.  Two live here, both bounded in records per tenant, in records and
 * bytes overall, each record expiring ttl_ms after it was put (by the wall
 * clock, judge0_store_now_ms), thread-safe (every worker shares one):
 *   - in memory (judge0_store_new): lost when the gateway stops;
 *   - in a directory (judge0_store_open_dir, the submissions section's
 *     store_dir): one file per record, written atomically, so results
 *     survive a restart.  Its theory of operation is in judge0_store.c;
 *   - in Redis (judge0_store_open_redis, submissions.store: redis): shared
 *     by several gateways, kept across restarts of all of them; answered
 *     on the caller's event loop (judge0_store_get_on, _put_on): never a
 *     blocking round trip.
 */
#ifndef GW_JUDGE0_STORE_H
#define GW_JUDGE0_STORE_H

#include <h2o.h>
#include <stddef.h>
#include <stdint.h>

struct redis_client;

struct judge0_store_limits {
    size_t max_records;            /* all tenants together */
    size_t max_records_per_tenant; /* one tenant's newest records */
    size_t max_bytes;              /* of record texts, all tenants together */
    uint64_t ttl_ms;               /* a record's life */
};

struct judge0_store;

/* A new empty store, or NULL out of memory. */
struct judge0_store *judge0_store_new(const struct judge0_store_limits *lim);
void judge0_store_free(struct judge0_store *s);

/*
 * A store of one file per record in dir, which must be a directory (not a
 * link) owned by this process's effective user that group and others may
 * not write.  Counts what the directory holds and removes the temporary
 * files a put that died left.  NULL with err set.
 */
struct judge0_store *judge0_store_open_dir(const char *dir, const struct judge0_store_limits *lim, char *err, size_t errlen);

/*
 * A store in the Redis of rc (the gateway's one asynchronous client, on
 * the limiter section's settings; before rc's first connection: its
 * scripts are registered), answering on the caller's loop
 * (judge0_store_get_on, judge0_store_put_on): records per tenant capped,
 * each expiring ttl_ms after its put; the overall caps are Redis'
 * maxmemory.  NULL with err set.
 */
struct judge0_store *judge0_store_open_redis(struct redis_client *rc, const struct judge0_store_limits *lim, char *err,
                                             size_t errlen);

/* 1: s answers on an event loop, later (the Redis store): gets go through
 * judge0_store_get_on.  0: judge0_store_get answers at once. */
int judge0_store_remote(const struct judge0_store *s);

/* Can s keep a result now (Redis: loop's connection is up or being made,
 * no round trip)?  1; or 0 with *retry_after_ms (Redis is unreachable: a
 * POST is refused rather than run and its result lost). */
int judge0_store_ready(struct judge0_store *s, h2o_loop_t *loop, uint64_t *retry_after_ms);

/* Only the checks of judge0_store_open_dir on dir (moat-gateway -n, as the
 * gateway's user): 0, or -1 with err set. */
int judge0_store_check_dir(const char *dir, char *err, size_t errlen);

/* The gateway's one store: the one set_default was given at start, else
 * one in memory with gw_limits.h's figures, made on first use (NULL out of
 * memory). */
struct judge0_store *judge0_store_default(void);

/* Make s the gateway's store (start-up, before any worker runs; takes s). */
void judge0_store_set_default(struct judge0_store *s);

/* The clock put and get take: CLOCK_REALTIME in ms, so that a record's
 * expiry means the same after a restart. */
uint64_t judge0_store_now_ms(void);

/*
 * Keep text[0..len) as tenant's record `token` (now_ms: judge0_store_now_ms),
 * replacing the one it had, if any.  Makes room first: expired records,
 * then the tenant's oldest past its cap, then (in memory) the oldest of
 * anyone past the overall caps; a directory store refuses a record past
 * its overall caps instead.  0, or -1 (too large for the store, a token
 * that is not a UUID (directory store), an I/O error, or out of memory).
 */
int judge0_store_put(struct judge0_store *s, const char *tenant, const char *token, const char *text, size_t len, uint64_t now_ms);

/*
 * How a put meets a record already kept for its token (the Redis store;
 * the memory and directory stores, which only ever serve one gateway's
 * queue, replace always).  With queue: redis several gateways may put the
 * same token, a later attempt after an earlier one's result, so:
 *   REPLACE    replace whatever is there (judge0_store_put);
 *   IF_ABSENT  only if nothing is kept ("In Queue" after the enqueue: the
 *              claimer's "Processing" may already be there);
 *   PENDING    replace unless a final record is kept ("Processing");
 *   FINAL      the same, and mark it final: never replaced again, so a run
 *              taken over from a gateway that died ends once.
 */
#define JUDGE0_QUEUE_OWNER "queue" /* the owner of the records of queue: redis */
enum judge0_put_mode { JUDGE0_PUT_REPLACE, JUDGE0_PUT_IF_ABSENT, JUDGE0_PUT_PENDING, JUDGE0_PUT_FINAL };

/* judge0_store_put with a mode: 0 written, 1 not written (the record kept
 * is what the mode keeps), -1 as judge0_store_put. */
int judge0_store_put_mode(struct judge0_store *s, const char *tenant, const char *token, const char *text, size_t len,
                          uint64_t now_ms, enum judge0_put_mode mode);

/*
 * The put for every store, on loop: fn (may be NULL) hears
 * judge0_store_put_mode's answer exactly once: before this returns for
 * the memory and directory stores, or when Redis cannot be asked; else
 * later, on loop.  A put Redis did not take (-1) is also kept and tried
 * again until it does (at most GW_JUDGE0_REDIS_RETRY_MAX of them).  Puts
 * of one token sent on one loop reach Redis in order.
 */
typedef void (*judge0_put_fn)(void *arg, int rc);
void judge0_store_put_on(struct judge0_store *s, h2o_loop_t *loop, const char *tenant, const char *token, const char *text,
                         size_t len, uint64_t now_ms, enum judge0_put_mode mode, judge0_put_fn fn, void *arg);

/* queue: redis: the Redis store's records belong to the shared queue, not
 * to the gateway that put them: never orphaned when it stops (another
 * gateway takes its runs over).  At start-up. */
void judge0_store_owned_by_queue(struct judge0_store *s);

/*
 * A malloc'ed, NUL-terminated copy of tenant's record `token` (*len its
 * bytes), or NULL: no such record, another tenant's (indistinguishable on
 * purpose), expired, unreadable (not a regular file of ours, corrupt), or
 * out of memory.  *orphaned: 1 when another gateway process put it (one
 * that has stopped since: a run it kept as pending will never finish);
 * JUDGE0_STORE_DOWN with NULL: the store could not be asked (Redis
 * unreachable): the record may exist.
 */
#define JUDGE0_STORE_DOWN 2
char *judge0_store_get(struct judge0_store *s, const char *tenant, const char *token, uint64_t now_ms, size_t *len, int *orphaned);

/*
 * The Redis store's get: tenant's records of n tokens (1 <= n <=
 * JUDGE0_GET_MAX) in one round trip, on loop.  0: fn is called exactly
 * once, later, on loop, with got[i] for tokens[i] (text NULL: none, as
 * judge0_store_get's NULL; valid during the call only) or down 1 (Redis
 * did not answer: the records may exist).  -1: not sent (Redis is
 * unreachable, or not the Redis store): fn is not called.
 */
#define JUDGE0_GET_MAX 20
struct judge0_got {
    const char *text;
    size_t len;
    int orphaned; /* as judge0_store_get's */
};
typedef void (*judge0_get_fn)(void *arg, int down, const struct judge0_got *got, size_t n);
int judge0_store_get_on(struct judge0_store *s, h2o_loop_t *loop, const char *tenant, const char *const *tokens, size_t n,
                        judge0_get_fn fn, void *arg);

/* Records held (tests, /config_info). */
size_t judge0_store_count(struct judge0_store *s);

#endif /* GW_JUDGE0_STORE_H */
