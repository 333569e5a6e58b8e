/*
 * judge0_queue.h - the gateway's queue of Judge0 submissions waiting for a
 * run (wait=false and batches), fair across tenants.
 *
 * One per gateway process, shared by every worker thread under one mutex
 * (judge0_queue_default).  A submission is an item the caller embeds in its
 * own run: the queue only orders items and counts runs, and calls the
 * item's start() when its turn comes, on the thread (and so the event loop)
 * of whoever made room: the worker that queued it or the worker whose run
 * just ended (theory of operation in judge0_queue.c).
 *
 * The caps, all counted here: runs at once (max_running, all tenants), and
 * submissions waiting (queue_max all tenants, queue_max_per_tenant each).  A
 * request reserves room for all of its submissions before its decision
 * record (a batch fits whole or not at all), then turns each reservation
 * into a queued item (or a run at once) after it, or gives it back.
 *
 * No clock and no I/O: the unit test drives it with a fake start().
 */
#ifndef GW_JUDGE0_QUEUE_H
#define GW_JUDGE0_QUEUE_H

#include <stddef.h>
#include <stdint.h>

#include "common/gw_limits.h"

struct jq_item;

/* The item's turn: called outside the queue's lock on the thread of ctx,
 * the context judge0_queue_push, _pump or _done was given.  The run now
 * counts against max_running until judge0_queue_done. */
typedef void (*jq_start_fn)(struct jq_item *it, void *ctx);
/* The item will never start (the queue stopped): free it. */
typedef void (*jq_discard_fn)(struct jq_item *it);

/* Embedded in the caller's run; the caller sets tenant, start and discard. */
struct jq_item {
    struct jq_item *next; /* the queue's */
    jq_start_fn start;
    jq_discard_fn discard;
    uint64_t ahead; /* runs started (all tenants) when it was queued */
    uint64_t seq;   /* its own start's number: seq - ahead - 1 runs started while it waited */
    char tenant[GW_MAX_TENANT_NAME + 1];
};

struct jq_caps {
    unsigned max_running;          /* runs at once, all tenants */
    uint64_t queue_max;            /* submissions waiting, all tenants */
    uint64_t queue_max_per_tenant; /* submissions waiting, one tenant */
};

enum jq_verdict {
    JQ_OK,
    JQ_FULL,        /* queue_max: 503 */
    JQ_TENANT_FULL, /* the tenant's queue_max_per_tenant: 429 */
    JQ_NO_MEMORY,
};

struct judge0_queue;

struct judge0_queue *judge0_queue_new(void);
void judge0_queue_free(struct judge0_queue *q); /* discards what waits */

/* The gateway's one queue (static: never NULL). */
struct judge0_queue *judge0_queue_default(void);

/* Room for n more of tenant's submissions, all or none.  A stopped queue
 * still reserves (its items are then discarded at push). */
enum jq_verdict judge0_queue_reserve(struct judge0_queue *q, const char *tenant, size_t n, const struct jq_caps *caps);

/* Give back n reservations tenant did not use. */
void judge0_queue_unreserve(struct judge0_queue *q, const char *tenant, size_t n);

/*
 * One of it->tenant's reservations becomes it: if nobody waits and a run
 * is free, it starts at once (1: the caller calls it->start itself, or
 * whatever that would do) and nothing is queued; else 0 and nothing
 * happened: the caller shows it as queued, then judge0_queue_push.
 */
int judge0_queue_try_run(struct judge0_queue *q, struct jq_item *it, unsigned max_running);

/* Queue it (one of its tenant's reservations becomes it), then start what
 * may start, on ctx's thread.  A stopped queue discards it. */
void judge0_queue_push(struct judge0_queue *q, struct jq_item *it, void *ctx, unsigned max_running);

/* Start waiting items while runs are free (round robin across tenants),
 * on ctx's thread.  Cheap when nothing waits (no lock taken). */
void judge0_queue_pump(struct judge0_queue *q, void *ctx, unsigned max_running);

/* A run that started is over: its place goes to the next item. */
void judge0_queue_done(struct judge0_queue *q, void *ctx, unsigned max_running);

/* Shutdown: nothing starts from now on; what waits is discarded (its
 * caller's store keeps showing it "In Queue").  Idempotent. */
void judge0_queue_stop(struct judge0_queue *q);

struct jq_counts {
    size_t running, queued, reserved, tenants;
    uint64_t started;
};

void judge0_queue_counts(struct judge0_queue *q, struct jq_counts *c);

#endif /* GW_JUDGE0_QUEUE_H */
