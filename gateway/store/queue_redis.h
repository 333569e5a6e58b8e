/*
 * queue_redis.h - accepted work in Redis Streams, shared by every gateway
 * of a deployment: a stream per tenant in one consumer group, claimed
 * round robin across tenants, taken over from a dead gateway, ended at
 * most max_attempts times (theory of operation: queue_redis.c).
 *
 * An entry is an opaque blob its user wrote (the Judge0 handlers: the
 * typed execution requests and what their records need) and a count (the
 * submissions it holds: a batch's group compiled once is one entry).  The
 * calls are asynchronous, on the caller's event loop, through the
 * gateway's Redis client (redis_client.h).  No Judge0 here.
 */
#ifndef GW_QUEUE_REDIS_H
#define GW_QUEUE_REDIS_H

#include <h2o.h>
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/gw_limits.h"

struct redis_client;
struct queue_redis;

#define QR_ID_MAX 48 /* a stream entry id: "<ms>-<seq>" */

struct qr_options {
    const char *consumer;         /* this gateway's name in the group (its heartbeat key is heartbeat_prefix + it) */
    const char *heartbeat_prefix; /* a consumer whose key is gone is dead: its entries are taken over */
    uint64_t lease_ms;            /* an entry of a dead consumer idle this long is taken over */
    unsigned max_attempts;        /* runs of one entry; the next claim past it ends it (QR_EXHAUSTED) */
    unsigned wait_replicas;       /* durability replicated: an enqueue is QR_OK once this many replicas have it (WAIT) */
    uint64_t wait_ms;             /* and waits this long for them (less than the client's timeout_ms) */
};

/* The caps an enqueue checks, atomically across every gateway. */
struct qr_caps {
    uint64_t queue_max;                  /* submissions waiting, all tenants */
    uint64_t queue_max_per_tenant;       /* submissions waiting, one tenant */
    uint64_t queue_max_bytes_per_tenant; /* bytes of entries waiting, one tenant */
};

enum qr_verdict {
    QR_OK,
    QR_FULL,         /* queue_max */
    QR_TENANT_FULL,  /* queue_max_per_tenant */
    QR_TENANT_BYTES, /* queue_max_bytes_per_tenant */
    QR_DOWN,         /* Redis did not answer (nothing was queued, or it is not known: the caller refuses) */
    QR_UNREPLICATED, /* queued on the primary, but no replica said it has the entries within wait_ms */
};

/* One entry to queue. */
struct qr_entry_in {
    uint32_t count; /* submissions it holds (>= 1) */
    const char *blob;
    size_t len;
};

/* What a claim took. */
enum qr_claim_kind {
    QR_RUN,       /* run it (attempt 1, or a dead gateway's taken over) */
    QR_EXHAUSTED, /* taken over past max_attempts: end it without running */
};

struct qr_claim {
    enum qr_claim_kind kind;
    char tenant[GW_MAX_TENANT_NAME + 1]; /* the stream's tenant */
    char id[QR_ID_MAX];
    unsigned attempt;    /* 1 for the first run */
    const char *gateway; /* the accepting gateway's name, as it wrote it */
    size_t gateway_len;
    const char *blob; /* valid during the callback only */
    size_t len;
    int malformed; /* the entry's fields are not the ones enqueue writes (foreign): dead-letter it */
};

struct qr_counts {
    uint64_t waiting;      /* submissions not yet claimed, all tenants */
    uint64_t dead;         /* entries in the dead letter list */
    uint64_t oldest_ms;    /* age of the oldest entry (waiting or running), 0: none */
    uint64_t pending;      /* entries claimed and not yet ended, all gateways */
    uint64_t pending_dead; /* of those, held by a consumer whose heartbeat is gone */
};

/* The queue on rc (its scripts registered: before rc's first connection). */
struct queue_redis *queue_redis_new(struct redis_client *rc, const struct qr_options *o, char *err, size_t errlen);
void queue_redis_free(struct queue_redis *q);

/* The enqueue's answer; ids[i] the entries' ids when QR_OK. */
typedef void (*qr_enqueue_fn)(void *arg, enum qr_verdict v, char (*ids)[QR_ID_MAX], size_t n);

/* Queue n entries of tenant, all or none, against caps (1 <= n <= 64):
 * fn answers on loop.  -1: Redis cannot be asked now (fn not called). */
int queue_redis_enqueue(struct queue_redis *q, h2o_loop_t *loop, const char *tenant, const struct qr_caps *caps,
                        const struct qr_entry_in *e, size_t n, qr_enqueue_fn fn, void *arg);

/* c NULL: nothing to claim (or Redis did not answer: down 1). */
typedef void (*qr_claim_fn)(void *arg, const struct qr_claim *c, int down);

/* Claim one entry for this consumer: first (sweep 1) one a dead consumer
 * held (none in the lease after Redis itself was away: the heartbeats'
 * grace, redis_beat.c), or one pending at this consumer that it does not
 * hold (a claim whose answer was lost: it never ran, its attempt stays),
 * else the next tenant's in turn.  The claim, the ack, the release and
 * the dead letter run on one loop (the dispatcher's): they keep what
 * this consumer holds.  -1: not sent. */
int queue_redis_claim(struct queue_redis *q, h2o_loop_t *loop, int sweep, qr_claim_fn fn, void *arg);

/* The entry is over (its result kept): acknowledged and deleted.  fn (may
 * be NULL) hears 1 done, 0 not (Redis did not answer: the entry stays
 * pending, and is taken over if this gateway dies).  -1: not sent. */
typedef void (*qr_done_fn)(void *arg, int ok);
int queue_redis_ack(struct queue_redis *q, h2o_loop_t *loop, const char *tenant, const char *id, qr_done_fn fn, void *arg);

/* The run of the entry was lost before it ended (its backend went away
 * mid-run): given back to the queue, a new entry with the same contents
 * at its tenant's tail that any gateway may claim, carrying the attempts
 * so far (the next claim's attempt is attempts + 1; past max_attempts it
 * is QR_EXHAUSTED).  fn hears 1 when Redis answered (given back, or no
 * longer this consumer's: taken over meanwhile), 0 not (still held: try
 * again).  -1: not sent. */
int queue_redis_release(struct queue_redis *q, h2o_loop_t *loop, const char *tenant, const char *id, unsigned attempts,
                        qr_done_fn fn, void *arg);

/* The entry is never to run (corrupt, foreign): moved to the dead letter
 * list with why, acknowledged and deleted.  As ack. */
int queue_redis_dead(struct queue_redis *q, h2o_loop_t *loop, const struct qr_claim *c, const char *why, qr_done_fn fn, void *arg);

/* The caller drops a claim it cannot keep (out of memory): no longer
 * held, so this consumer's sweep takes it back lease_ms after its
 * delivery, at the same attempt (it never ran). */
void queue_redis_forget(struct queue_redis *q, const char *tenant, const char *id);

/* Entries this consumer holds (claimed, not yet acknowledged, given back
 * or dead-lettered). */
size_t queue_redis_held(const struct queue_redis *q);

/* Wake-ups: fn(arg) on loop whenever any gateway queued something (and
 * once after each (re)subscription).  0 or -1. */
int queue_redis_subscribe(struct queue_redis *q, h2o_loop_t *loop, void (*fn)(void *arg), void *arg);

/* The counts (moatctl queue, metrics): fn hears them and the detail
 * (borrowed: {waiting, dead, oldest_ms, now_ms, tenants: [{tenant,
 * waiting, bytes, pending, oldest_s}], consumers: [{name, pending,
 * alive}], dead_recent: [texts]}), or NULL and NULL. */
typedef void (*qr_counts_fn)(void *arg, const struct qr_counts *c, json_t *detail);
int queue_redis_counts(struct queue_redis *q, h2o_loop_t *loop, qr_counts_fn fn, void *arg);

#endif /* GW_QUEUE_REDIS_H */
