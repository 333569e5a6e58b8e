/*
 * judge0_dispatch.c - one gateway's dispatcher of the shared submissions
 * queue (see judge0_dispatch.h).
 *
 * Theory of operation
 * -------------------
 * A round is: ask the backend its load (a RUNTIMES query on the backend
 * socket: slots and slots busy, and the runtime table, kept as worker 0's
 * so that a claimed entry is judged against what this backend runs); if a
 * slot is free, claim one entry; if one came, start it and begin another
 * round; if none came, stop until something happens.  A slot is free when
 * slots > max(busy, claimed_running): busy is the backend's own count
 * (every job on it, this gateway's execute traffic included), and
 * claimed_running covers the runs claimed since it last counted.  So the
 * gateway never has to be told -j: max_running is the backend's word.
 *
 * What starts a round:
 *   - a wake-up: every enqueue publishes one (queue_redis_subscribe); on an
 *     idle host the claim follows the accepting POST by one pub/sub hop;
 *   - a run's end (gw_dispatch_done): its slot is free;
 *   - the poll, every GW_QUEUE_POLL_MS: a wake-up may be lost (publish is
 *     fire and forget, the subscriber may be reconnecting);
 *   - every GW_QUEUE_SWEEP_MS a round's claim also sweeps: it takes over an
 *     entry of a gateway whose heartbeat is gone (queue_redis.c).
 * Every GW_QUEUE_STATS_MS the poll also counts the whole queue (depth per
 * tenant, pending per gateway, the oldest entry, dead letters), kept for
 * moatctl queue and the metrics: a scrape never waits for Redis.
 * One round at a time; whatever asks for one meanwhile sets `again`, and
 * the round that ends runs once more.
 *
 * A backend that does not answer, or Redis that does not: the round ends
 * and the poll tries again; nothing is claimed that could not be run.
 * Claims run on this loop, so a claim's run and its end never race with
 * the next round.
 */
#include "judge0_dispatch.h"
#include "common/metrics.h"
#include "link/backend_client.h"
#include "log.h"
#include "exec/runtime_table.h"
#include "core/worker.h"

#include <pthread.h>
#include <string.h>
#include <time.h>

struct dispatcher {
    struct gw_worker *w;
    struct queue_redis *q;
    gw_dispatch_run_fn run;
    int in_round, again;
    uint64_t last_sweep_ms, last_count_ms;
    int counting;
    h2o_timeout_t poll_timeout;
    h2o_timeout_entry_t poll;
    pthread_mutex_t mu; /* state, for readers on other threads */
    struct gw_dispatch_state st;
    struct qr_counts counts; /* the last count of the whole queue */
    int counted;
    char *detail; /* its JSON text (malloc), or NULL */
};

static struct dispatcher D = {.mu = PTHREAD_MUTEX_INITIALIZER};

static uint64_t mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void round_start(void);

/* The round is over: another if one was asked for meanwhile. */
static void round_end(void)
{
    D.in_round = 0;
    if (D.again) {
        D.again = 0;
        round_start();
    }
}

static void on_claim(void *arg, const struct qr_claim *c, int down)
{
    (void)arg;
    pthread_mutex_lock(&D.mu);
    D.st.redis_down = down;
    if (c != NULL) {
        D.st.claimed_running++;
        D.st.claims++;
        D.st.reclaims += c->attempt > 1;
    }
    pthread_mutex_unlock(&D.mu);
    if (c == NULL) {
        round_end();
        return;
    }
    D.run(D.w, c); /* may end at once: gw_dispatch_done asks for another round */
    D.in_round = 0;
    round_start(); /* the next slot, if there is one */
}

static int free_slot(void)
{
    uint64_t used = D.st.busy > D.st.claimed_running ? D.st.busy : D.st.claimed_running;

    return D.st.slots > used;
}

static void on_load(void *data, enum backend_status status, const struct backend_reply *reply)
{
    uint64_t now = mono_ms();
    int sweep, ok;

    (void)data;
    if (status != BACKEND_OK || reply->hdr.type != MOAT_MSG_RUNTIMES || !reply->u.runtimes.load.present) {
        round_end(); /* the poll asks again */
        return;
    }
    gw_runtime_table_store(D.w, &reply->u.runtimes);
    pthread_mutex_lock(&D.mu);
    D.st.slots = reply->u.runtimes.load.slots;
    D.st.busy = reply->u.runtimes.load.busy;
    ok = free_slot();
    pthread_mutex_unlock(&D.mu);
    if (!ok) {
        round_end();
        return;
    }
    sweep = now - D.last_sweep_ms >= GW_QUEUE_SWEEP_MS;
    if (sweep)
        D.last_sweep_ms = now;
    if (queue_redis_claim(D.q, D.w->ctx.loop, sweep, on_claim, NULL) != 0) {
        pthread_mutex_lock(&D.mu);
        D.st.redis_down = 1;
        pthread_mutex_unlock(&D.mu);
        round_end();
    }
}

static void round_start(void)
{
    struct moat_buf frame = {NULL, 0, 0};
    uint64_t job = backend_next_job_id();
    const char *why = NULL;

    if (D.in_round) {
        D.again = 1;
        return;
    }
    D.in_round = 1;
    if (moat_encode_runtimes_query(&frame, job, &why) != 0) {
        moat_buf_free(&frame);
        round_end();
        return;
    }
    backend_call(NULL, D.w->ctx.loop, &D.w->metrics_timeout, D.w->cfg->backend_socket, &frame, job, on_load, NULL);
}

static void on_counts(void *arg, const struct qr_counts *c, json_t *detail)
{
    char *text = detail != NULL ? json_dumps(detail, JSON_COMPACT) : NULL;

    (void)arg;
    D.counting = 0;
    if (c == NULL) {
        free(text);
        return;
    }
    pthread_mutex_lock(&D.mu);
    D.counts = *c;
    D.counted = 1;
    free(D.detail);
    D.detail = text;
    pthread_mutex_unlock(&D.mu);
}

static void on_poll(h2o_timeout_entry_t *entry)
{
    uint64_t now = mono_ms();

    (void)entry;
    round_start();
    if (!D.counting && now - D.last_count_ms >= GW_QUEUE_STATS_MS) {
        D.last_count_ms = now;
        D.counting = queue_redis_counts(D.q, D.w->ctx.loop, on_counts, NULL) == 0;
    }
    h2o_timeout_link(D.w->ctx.loop, &D.poll_timeout, &D.poll);
}

static void on_wake(void *arg)
{
    (void)arg;
    round_start();
}

void gw_dispatch_done(void)
{
    pthread_mutex_lock(&D.mu);
    if (D.st.claimed_running > 0)
        D.st.claimed_running--;
    pthread_mutex_unlock(&D.mu);
    round_start();
}

int gw_dispatch_start(struct gw_worker *w, struct queue_redis *q, gw_dispatch_run_fn run)
{
    D.w = w;
    D.q = q;
    D.run = run;
    D.last_sweep_ms = 0;
    if (queue_redis_subscribe(q, w->ctx.loop, on_wake, NULL) != 0)
        return -1;
    h2o_timeout_init(w->ctx.loop, &D.poll_timeout, GW_QUEUE_POLL_MS);
    D.poll.cb = on_poll;
    h2o_timeout_link(w->ctx.loop, &D.poll_timeout, &D.poll);
    pthread_mutex_lock(&D.mu);
    D.st.running = 1;
    pthread_mutex_unlock(&D.mu);
    return 0;
}

struct queue_redis *gw_dispatch_queue(void)
{
    return D.q;
}

void gw_dispatch_state(struct gw_dispatch_state *out)
{
    pthread_mutex_lock(&D.mu);
    *out = D.st;
    pthread_mutex_unlock(&D.mu);
}

json_t *gw_dispatch_queue_view(struct qr_counts *counts, int *counted)
{
    json_t *o = NULL;

    pthread_mutex_lock(&D.mu);
    *counts = D.counts;
    *counted = D.counted;
    if (D.detail != NULL)
        o = json_loads(D.detail, 0, NULL);
    pthread_mutex_unlock(&D.mu);
    return o;
}

void gw_dispatch_note_dead(void)
{
    pthread_mutex_lock(&D.mu);
    D.st.dead++;
    pthread_mutex_unlock(&D.mu);
}

void gw_dispatch_note_exhausted(void)
{
    pthread_mutex_lock(&D.mu);
    D.st.exhausted++;
    pthread_mutex_unlock(&D.mu);
}

/* submissions.queue redis: the shared queue as this gateway's dispatcher
 * last counted it (GW_QUEUE_STATS_MS), and its own claims. */
void gw_dispatch_metrics(struct gw_metrics_text *t)
{
    struct gw_dispatch_state st;
    struct qr_counts c;
    int counted;

    json_decref(gw_dispatch_queue_view(&c, &counted)); /* the counts only */
    gw_dispatch_state(&st);
    if (counted) {
        gw_metrics_gauge(t, "moat_queue_depth", "Submissions waiting in the shared queue (Redis), all tenants.", c.waiting);
        gw_metrics_gauge(t, "moat_queue_pending", "Entries of the shared queue claimed by a gateway and not yet ended.", c.pending);
        gw_metrics_gauge(t, "moat_queue_pending_dead",
                         "Of those, entries held by a gateway whose heartbeat is gone (to be taken over).", c.pending_dead);
        gw_metrics_gauge(t, "moat_queue_oldest_seconds", "Age of the oldest entry in the shared queue, waiting or running.",
                         c.oldest_ms / 1000);
        gw_metrics_gauge(t, "moat_queue_dead_letters", "Entries in the shared queue's dead letter list.", c.dead);
    }
    gw_metrics_counter(t, "moat_queue_claims_total", "Entries this gateway claimed from the shared queue.", st.claims);
    gw_metrics_counter(t, "moat_queue_reclaims_total", "Of those, entries taken over from a gateway that died.", st.reclaims);
    gw_metrics_counter(t, "moat_queue_dead_total", "Entries this gateway moved to the dead letter list (never run).", st.dead);
    gw_metrics_counter(t, "moat_queue_exhausted_total", "Entries this gateway ended past max_attempts, without running them.",
                       st.exhausted);
    gw_metrics_gauge(t, "moat_queue_running", "Claimed entries running on this gateway's backend.", st.claimed_running);
}
