/*
 * judge0_queue.c - the fair, bounded queue of Judge0 submissions waiting
 * for a run (see judge0_queue.h).
 *
 * Theory of operation
 * -------------------
 * Each tenant with something waiting or reserved has an entry: its FIFO
 * of items and its counts.  The tenants that have items waiting form a
 * ring, served round robin one item at a time (deficit round robin with a
 * quantum of one submission, every submission costing one): the ring's
 * head gives its oldest item, and goes to the tail if it has more.  A
 * tenant that starts waiting joins at the tail.  So when tenant B queues
 * one submission behind tenant A's flood of 200, at most one of A's runs
 * starts before B's (one per other tenant waiting, in general): one turn.
 *
 * A run starts when a place among max_running is free, on the thread that
 * freed or asked for it: the worker whose request queued the item (push,
 * try_run) or whose run just ended (done).  Every change of the counts
 * that can free a place is followed, on the same thread, by a pump, so no
 * item waits for a worker that has nothing to do; no loop needs waking
 * from another thread.  The workers also pump on each turn of their loop
 * (server.c, at most GW_LOOP_WAKE_MS apart), which only matters when a
 * reload raises max_running while everything is quiet.
 *
 * start() runs outside the lock; it may end its run at once (a failure)
 * and call done, which pumps again: a thread already pumping leaves the
 * next start to its own loop, so the stack stays flat.
 *
 * Reservations make the caps exact: a request reserves room for all of its
 * submissions before its decision record is made (a batch fits whole or is
 * refused whole), and turns each into an item after it; a request that
 * ends first gives the rest back.  Waiting and reserved submissions count
 * against queue_max and queue_max_per_tenant; running ones against
 * max_running only.
 */
#include "judge0_queue.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct jq_tenant {
    struct jq_tenant *next;      /* every entry */
    struct jq_tenant *ring_next; /* the ring of tenants with items waiting */
    struct jq_item *head, *tail;
    size_t queued, reserved;
    int in_ring;
    char name[GW_MAX_TENANT_NAME + 1];
};

struct judge0_queue {
    pthread_mutex_t lock;
    struct jq_tenant *tenants;
    struct jq_tenant *ring_head, *ring_tail;
    size_t queued, reserved, running, ntenants; /* queued is also read without the lock (pump) */
    uint64_t started;
    int stopped;
};

static struct judge0_queue default_queue = {.lock = PTHREAD_MUTEX_INITIALIZER};

static __thread int pumping; /* this thread is inside judge0_queue_pump */

struct judge0_queue *judge0_queue_default(void)
{
    return &default_queue;
}

struct judge0_queue *judge0_queue_new(void)
{
    struct judge0_queue *q = calloc(1, sizeof(*q));

    if (q != NULL && pthread_mutex_init(&q->lock, NULL) != 0) {
        free(q);
        return NULL;
    }
    return q;
}

/* ------------------------------------------------------------- tenants */

/* Call with the lock held. */
static struct jq_tenant *tenant_find(struct judge0_queue *q, const char *name, int create)
{
    struct jq_tenant *t;

    for (t = q->tenants; t != NULL; t = t->next)
        if (strcmp(t->name, name) == 0)
            return t;
    if (!create || strlen(name) > GW_MAX_TENANT_NAME || (t = calloc(1, sizeof(*t))) == NULL)
        return NULL;
    strcpy(t->name, name); /* length checked */
    t->next = q->tenants;
    q->tenants = t;
    q->ntenants++;
    return t;
}

/* Drop t's entry once it holds nothing.  Call with the lock held. */
static void tenant_maybe_drop(struct judge0_queue *q, struct jq_tenant *t)
{
    struct jq_tenant **p;

    if (t->queued != 0 || t->reserved != 0 || t->in_ring)
        return;
    for (p = &q->tenants; *p != NULL; p = &(*p)->next)
        if (*p == t) {
            *p = t->next;
            q->ntenants--;
            free(t);
            return;
        }
}

static void ring_append(struct judge0_queue *q, struct jq_tenant *t)
{
    t->ring_next = NULL;
    t->in_ring = 1;
    if (q->ring_tail != NULL)
        q->ring_tail->ring_next = t;
    else
        q->ring_head = t;
    q->ring_tail = t;
}

static struct jq_tenant *ring_pop(struct judge0_queue *q)
{
    struct jq_tenant *t = q->ring_head;

    if (t == NULL)
        return NULL;
    q->ring_head = t->ring_next;
    if (q->ring_head == NULL)
        q->ring_tail = NULL;
    t->ring_next = NULL;
    t->in_ring = 0;
    return t;
}

/* One of t's reservations is used (or given back).  Lock held. */
static void reservation_used(struct judge0_queue *q, struct jq_tenant *t)
{
    if (t != NULL && t->reserved > 0) {
        t->reserved--;
        q->reserved--;
    }
}

/* ---------------------------------------------------------------- caps */

enum jq_verdict judge0_queue_reserve(struct judge0_queue *q, const char *tenant, size_t n, const struct jq_caps *caps)
{
    enum jq_verdict v = JQ_OK;
    struct jq_tenant *t;

    pthread_mutex_lock(&q->lock);
    if ((t = tenant_find(q, tenant, 1)) == NULL)
        v = JQ_NO_MEMORY;
    else if (q->queued + q->reserved + n > caps->queue_max)
        v = JQ_FULL;
    else if (t->queued + t->reserved + n > caps->queue_max_per_tenant)
        v = JQ_TENANT_FULL;
    if (v == JQ_OK) {
        t->reserved += n;
        q->reserved += n;
    } else if (t != NULL) {
        tenant_maybe_drop(q, t);
    }
    pthread_mutex_unlock(&q->lock);
    return v;
}

void judge0_queue_unreserve(struct judge0_queue *q, const char *tenant, size_t n)
{
    struct jq_tenant *t;

    pthread_mutex_lock(&q->lock);
    if ((t = tenant_find(q, tenant, 0)) != NULL) {
        while (n-- > 0)
            reservation_used(q, t);
        tenant_maybe_drop(q, t);
    }
    pthread_mutex_unlock(&q->lock);
}

/* ------------------------------------------------------------ the runs */

/* The next item whose turn it is, counted as running; NULL: none may
 * start.  Lock held. */
static struct jq_item *take(struct judge0_queue *q, unsigned max_running)
{
    struct jq_tenant *t;
    struct jq_item *it;

    if (q->stopped || q->running >= max_running || (t = ring_pop(q)) == NULL)
        return NULL;
    it = t->head;
    t->head = it->next;
    if (t->head == NULL)
        t->tail = NULL;
    it->next = NULL;
    t->queued--;
    __atomic_store_n(&q->queued, q->queued - 1, __ATOMIC_RELAXED);
    if (t->queued > 0)
        ring_append(q, t); /* its next item: after every other tenant's */
    else
        tenant_maybe_drop(q, t);
    q->running++;
    it->seq = ++q->started;
    return it;
}

int judge0_queue_try_run(struct judge0_queue *q, struct jq_item *it, unsigned max_running)
{
    int now = 0;

    pthread_mutex_lock(&q->lock);
    if (!q->stopped && q->queued == 0 && q->running < max_running) {
        struct jq_tenant *t = tenant_find(q, it->tenant, 0);
        reservation_used(q, t);
        if (t != NULL)
            tenant_maybe_drop(q, t);
        q->running++;
        it->ahead = q->started;
        it->seq = ++q->started;
        now = 1;
    }
    pthread_mutex_unlock(&q->lock);
    return now;
}

void judge0_queue_pump(struct judge0_queue *q, void *ctx, unsigned max_running)
{
    struct jq_item *it;

    if (pumping || __atomic_load_n(&q->queued, __ATOMIC_RELAXED) == 0)
        return; /* the pump already running on this thread goes on */
    pumping = 1;
    for (;;) {
        pthread_mutex_lock(&q->lock);
        it = take(q, max_running);
        pthread_mutex_unlock(&q->lock);
        if (it == NULL)
            break;
        it->start(it, ctx);
    }
    pumping = 0;
}

void judge0_queue_push(struct judge0_queue *q, struct jq_item *it, void *ctx, unsigned max_running)
{
    struct jq_tenant *t;

    pthread_mutex_lock(&q->lock);
    t = tenant_find(q, it->tenant, 1);
    if (q->stopped || t == NULL) {
        if (t != NULL) {
            reservation_used(q, t);
            tenant_maybe_drop(q, t);
        }
        pthread_mutex_unlock(&q->lock);
        it->discard(it);
        return;
    }
    reservation_used(q, t);
    it->next = NULL;
    it->ahead = q->started;
    if (t->tail != NULL)
        t->tail->next = it;
    else
        t->head = it;
    t->tail = it;
    t->queued++;
    __atomic_store_n(&q->queued, q->queued + 1, __ATOMIC_RELAXED);
    if (!t->in_ring)
        ring_append(q, t);
    pthread_mutex_unlock(&q->lock);
    judge0_queue_pump(q, ctx, max_running);
}

void judge0_queue_done(struct judge0_queue *q, void *ctx, unsigned max_running)
{
    pthread_mutex_lock(&q->lock);
    if (q->running > 0)
        q->running--;
    pthread_mutex_unlock(&q->lock);
    judge0_queue_pump(q, ctx, max_running);
}

/* ------------------------------------------------------------ shutdown */

/* Unhook every waiting item (lock held); the caller discards them. */
static struct jq_item *unhook_all(struct judge0_queue *q)
{
    struct jq_item *all = NULL, **end = &all;
    struct jq_tenant *t;

    while ((t = ring_pop(q)) != NULL) {
        *end = t->head;
        end = &t->tail->next;
        t->head = t->tail = NULL;
        t->queued = 0;
        tenant_maybe_drop(q, t);
    }
    __atomic_store_n(&q->queued, 0, __ATOMIC_RELAXED);
    return all;
}

static void discard_all(struct jq_item *it)
{
    while (it != NULL) {
        struct jq_item *next = it->next;
        it->discard(it);
        it = next;
    }
}

void judge0_queue_stop(struct judge0_queue *q)
{
    struct jq_item *all;

    pthread_mutex_lock(&q->lock);
    q->stopped = 1;
    all = unhook_all(q);
    pthread_mutex_unlock(&q->lock);
    discard_all(all);
}

void judge0_queue_free(struct judge0_queue *q)
{
    struct jq_tenant *t;

    if (q == NULL)
        return;
    judge0_queue_stop(q);
    while ((t = q->tenants) != NULL) {
        q->tenants = t->next;
        free(t);
    }
    pthread_mutex_destroy(&q->lock);
    free(q);
}

void judge0_queue_counts(struct judge0_queue *q, struct jq_counts *c)
{
    pthread_mutex_lock(&q->lock);
    *c = (struct jq_counts){q->running, q->queued, q->reserved, q->ntenants, q->started};
    pthread_mutex_unlock(&q->lock);
}
