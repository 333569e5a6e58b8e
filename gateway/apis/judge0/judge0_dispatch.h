/*
 * judge0_dispatch.h - with submissions.queue: redis every gateway is also
 * a dispatcher for its own backend: it claims queued entries from Redis
 * (store/queue_redis.c) only while that backend has a free slot, as the
 * backend itself counts them (RUNTIMES' load), and hands each claim to the
 * Judge0 handlers to run (theory of operation: judge0_dispatch.c).
 *
 * Everything here runs on one worker's loop (worker 0): the claims, the
 * runs they start and their ends.
 */
#ifndef GW_JUDGE0_DISPATCH_H
#define GW_JUDGE0_DISPATCH_H

#include <jansson.h>
#include <stdint.h>

#include "store/queue_redis.h"

struct gw_worker;

/* What the dispatcher knows (moatctl queue, metrics, /readyz). */
struct gw_dispatch_state {
    int running;              /* 1 once started */
    uint64_t slots, busy;     /* the backend's, as it last said */
    uint64_t claimed_running; /* claims of this gateway whose run has not ended */
    uint64_t claims, reclaims, dead, exhausted;
    int redis_down; /* the last claim got no answer */
};

/* Run claim c on w (its loop is the dispatcher's); the run calls
 * gw_dispatch_done once its backend call has answered (or never started). */
typedef void (*gw_dispatch_run_fn)(struct gw_worker *w, const struct qr_claim *c);

/* Start dispatching on w (worker 0, on its thread, before its loop runs). */
int gw_dispatch_start(struct gw_worker *w, struct queue_redis *q, gw_dispatch_run_fn run);

/* A claimed run's backend slot is free again (on the dispatcher's thread). */
void gw_dispatch_done(void);

/* The queue (for the handlers' ack and dead letters), NULL when not started. */
struct queue_redis *gw_dispatch_queue(void);

/* A copy of the state (any thread). */
void gw_dispatch_state(struct gw_dispatch_state *out);

/* The shared queue as this dispatcher last counted it (every
 * GW_QUEUE_STATS_MS): *counts (0: never counted), and its detail as JSON
 * (new reference, or NULL): moatctl queue, metrics (any thread). */
json_t *gw_dispatch_queue_view(struct qr_counts *counts, int *counted);

/* This gateway dead-lettered an entry, or ended one past max_attempts. */
void gw_dispatch_note_dead(void);
void gw_dispatch_note_exhausted(void);

/* The shared queue's gauges and this gateway's claims, for /metrics
 * (registered with gw_metrics_add_collector when the queue is redis). */
struct gw_metrics_text;
void gw_dispatch_metrics(struct gw_metrics_text *t);

/* queue: redis: run an entry this gateway's dispatcher claimed from the
 * shared queue (gw_dispatch_start), on w's loop: judged again by this
 * gateway's policy, recorded in its trail, its results kept once. */
void gw_judge0_run_claim(struct gw_worker *w, const struct qr_claim *c);

#endif /* GW_JUDGE0_DISPATCH_H */
