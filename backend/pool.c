/*
 * pool.c - the slot pools (batch and session; see pool.h).  Each slot has
 * its own uid (the held range's first + n), directory and clone stack, set
 * up once.  A warm slot holds one prepared box; a maintenance thread
 * replaces a used box after every job, or, beyond the pool's warm count,
 * only discards it and leaves the slot cold, so that cgroup creation, clone
 * and cgroup attachment are off a request's path wherever a warm slot is
 * kept.
 *
 * Several maintenance threads (POOL_MAINTAINERS) serve one pool, because
 * replacing a box is mostly waiting on the kernel (pool.h): while one waits
 * for a pid namespace to go or an attach's grace period, another replaces
 * the next slot.  A slot is always in exactly one place: a list (free,
 * cold, dirty), a pending order, a taker's hands or one maintainer's, each
 * move made under p->mu; so two threads never touch the same slot, its
 * init_args copy or its clone stack.  The counters (preparing, nfree) are
 * read and changed under p->mu too, so the warm count holds with any
 * number of threads.  -v logs each replacement's two halves and each
 * queued taker's wait (log_debug).
 *
 * A cold slot's box is made when somebody takes it, and made by a
 * maintenance thread too (an order the taker waits for), never on the
 * taker's thread: a box's init is a clone of this process and needs the
 * cloning thread's TLS, and connection threads keep their whole stack,
 * TLS included, out of every clone (server.c), so that hundreds of session
 * threads cost a new box nothing.
 */
#include "pool.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "moat_limits.h"

#define PREPARE_RETRY_MS 200

/* s's place in p's lists (its index counts from the pool's first). */
static int slot_number(const struct slot_pool *p, const struct slot *s)
{
    return (int)(s - p->slots);
}

/* A cold slot's box, ordered by its taker (pool_acquire). */
struct pool_order {
    struct pool_order *next;
    struct slot *s;
    struct errbuf *e;
    int done, rc;
};

/* Carries out the first order, with p->mu held (dropped meanwhile). */
static void carry_out_order(struct slot_pool *p)
{
    struct pool_order *o = p->orders;

    p->orders = o->next;
    pthread_mutex_unlock(&p->mu);
    int rc = box_prepare(p->cg, p->seccomp, o->s, o->e);
    pthread_mutex_lock(&p->mu);
    o->rc = rc;
    o->done = 1;
    pthread_cond_broadcast(&p->order_cv);
}

static void *maintainer_main(void *arg)
{
    struct slot_pool *p = arg;

    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->ndirty == 0 && p->orders == NULL && !p->stopping)
            pthread_cond_wait(&p->dirty_cv, &p->mu);
        if (p->stopping)
            break;
        if (p->orders != NULL) {
            carry_out_order(p); /* a taker waits: before any used slot */
            continue;
        }
        struct slot *s = &p->slots[p->dirty_list[--p->ndirty]];
        int warm = p->nfree + p->preparing < p->warm_max;
        p->preparing += warm;
        pthread_mutex_unlock(&p->mu);

        struct errbuf e;
        int rc = 0;
        uint64_t t0 = box_now_ms();
        box_discard(s);
        uint64_t t1 = box_now_ms();
        if (warm && (rc = box_prepare(p->cg, p->seccomp, s, &e)) != 0) {
            log_warnx("%s: slot %d: %s (retrying)", __func__, s->index, e.msg);
            struct timespec ts = {0, PREPARE_RETRY_MS * 1000000L};
            nanosleep(&ts, NULL);
        }
        log_debug("%s: slot %d: discarded in %llu ms, %s in %llu ms", __func__, s->index, (unsigned long long)(t1 - t0),
                  warm ? "prepared" : "left cold", (unsigned long long)(box_now_ms() - t1));

        pthread_mutex_lock(&p->mu);
        p->preparing -= warm;
        if (rc != 0) {
            p->dirty_list[p->ndirty++] = slot_number(p, s);
        } else if (warm) {
            p->free_list[p->nfree++] = slot_number(p, s);
            pthread_cond_signal(&p->free_cv);
        } else {
            p->cold_list[p->ncold++] = slot_number(p, s);
        }
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* What tells one pool from the other. */
struct pool_shape {
    int nslots, min_slots, max_slots;
    int warm;        /* slots prepared now and kept warm */
    int queue_max;   /* requests that may wait for a slot */
    int first_index; /* slot n has index first_index + n */
    const char *cg_prefix;
};

static int pool_setup(struct slot_pool *p, const struct pool_shape *shape, const struct uid_range *uids, const char *run_dir,
                      const struct cg_system *cg, const struct seccomp_prog *seccomp, struct errbuf *e)
{
    int n = shape->nslots;

    memset(p, 0, sizeof(*p));
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->free_cv, NULL);
    pthread_cond_init(&p->dirty_cv, NULL);
    pthread_cond_init(&p->order_cv, NULL);
    if (n < shape->min_slots || n > shape->max_slots)
        return errf(e, "slot count %d out of range %d..%d", n, shape->min_slots, shape->max_slots);
    if (n > 0 && !uid_range_covers(uids, n))
        return errf(e, "%d slots need a locked range of as many box uids", n);
    size_t alloc = n > 0 ? (size_t)n : 1;
    p->slots = calloc(alloc, sizeof(*p->slots));
    p->free_list = calloc(alloc, sizeof(int));
    p->cold_list = calloc(alloc, sizeof(int));
    p->dirty_list = calloc(alloc, sizeof(int));
    if (p->slots == NULL || p->free_list == NULL || p->cold_list == NULL || p->dirty_list == NULL)
        return errf(e, "out of memory");
    p->cg = cg;
    p->seccomp = seccomp;
    p->warm_max = shape->warm < n ? shape->warm : n;
    for (int i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof(name), "%s%d", shape->cg_prefix, i);
        if (slot_init(&p->slots[i], shape->first_index + i, name, run_dir, uids->first + (uid_t)i, e) != 0)
            return -1;
    }
    /* warm slots taken from the end of the list first: slot 0 is used first */
    for (int i = p->warm_max - 1; i >= 0; i--) {
        if (box_prepare(cg, seccomp, &p->slots[i], e) != 0)
            return -1;
        p->free_list[p->nfree++] = i;
    }
    for (int i = n - 1; i >= p->warm_max; i--)
        p->cold_list[p->ncold++] = i;
    p->nslots = n;
    p->queue_max = shape->queue_max;
    int want = n < POOL_MAINTAINERS ? n : POOL_MAINTAINERS;
    for (; p->nmaintainers < want; p->nmaintainers++)
        if (pthread_create(&p->maintainers[p->nmaintainers], NULL, maintainer_main, p) != 0)
            return errf(e, "cannot start the slot maintenance threads");
    return 0;
}

int pool_init_at(struct slot_pool *p, int nslots, int queue_max, const struct uid_range *uids, const char *run_dir,
                 const struct cg_system *cg, const struct seccomp_prog *seccomp, struct errbuf *e)
{
    const struct pool_shape batch = {nslots, 1, MAX_SLOTS, nslots, queue_max, 0, "slot"};
    return pool_setup(p, &batch, uids, run_dir, cg, seccomp, e);
}

int pool_init_sessions(struct slot_pool *p, int nslots, int warm, const struct uid_range *uids, const char *run_dir,
                       const struct cg_system *cg, const struct seccomp_prog *seccomp, struct errbuf *e)
{
    const struct pool_shape sessions = {nslots, 0, MAX_SESSIONS, warm, 0, MAX_SLOTS, "session"};
    return pool_setup(p, &sessions, uids, run_dir, cg, seccomp, e);
}

int pool_init(struct slot_pool *p, int nslots, int queue_max, const char *run_dir, const struct cg_system *cg,
              const struct seccomp_prog *seccomp, struct errbuf *e)
{
    struct uid_range uids;

    if (uid_range_lock(&uids, SLOT_UID_BASE, nslots, e) != 0)
        return -1;
    if (uid_range_check_unused(&uids, e) != 0 || pool_init_at(p, nslots, queue_max, &uids, run_dir, cg, seccomp, e) != 0) {
        uid_range_unlock(&uids);
        return -1;
    }
    p->own_uids = uids;
    return 0;
}

int pool_acquire(struct slot_pool *p, struct slot **out, struct errbuf *e)
{
    struct slot *s;

    *out = NULL;
    pthread_mutex_lock(&p->mu);
    if (p->nfree == 0 && p->ncold == 0 && p->waiting >= p->queue_max) {
        pthread_mutex_unlock(&p->mu);
        return POOL_BUSY;
    }
    if (p->nfree == 0 && p->ncold > 0) {
        /* a cold slot: its box is made now, on the taker's path, by the
         * maintenance thread (see the top of this file) */
        struct pool_order o = {NULL, &p->slots[p->cold_list[--p->ncold]], e, 0, 0};
        struct pool_order **tail = &p->orders;
        while (*tail != NULL)
            tail = &(*tail)->next;
        *tail = &o;
        pthread_cond_signal(&p->dirty_cv);
        while (!o.done && !p->stopping)
            pthread_cond_wait(&p->order_cv, &p->mu);
        p->busy += o.done; /* a failed order goes back through pool_release */
        if (!o.done) {     /* shutting down: the order is void */
            for (tail = &p->orders; *tail != NULL && *tail != &o; tail = &(*tail)->next)
                ;
            if (*tail == &o)
                *tail = o.next;
            p->cold_list[p->ncold++] = slot_number(p, o.s);
            pthread_mutex_unlock(&p->mu);
            return errf(e, "the backend is stopping");
        }
        pthread_mutex_unlock(&p->mu);
        if (o.rc != 0) {
            log_warnx("%s: slot %d: %s", __func__, o.s->index, e->msg);
            pool_release(p, o.s);
            return -1;
        }
        *out = o.s;
        return 0;
    }
    p->waiting++;
    uint64_t t0 = box_now_ms();
    while (p->nfree == 0)
        pthread_cond_wait(&p->free_cv, &p->mu);
    p->waiting--;
    p->busy++;
    s = &p->slots[p->free_list[--p->nfree]];
    pthread_mutex_unlock(&p->mu);
    log_debug("%s: slot %d after %llu ms in the queue", __func__, s->index, (unsigned long long)(box_now_ms() - t0));
    *out = s;
    return 0;
}

void pool_release(struct slot_pool *p, struct slot *s)
{
    pthread_mutex_lock(&p->mu);
    p->busy--;
    p->dirty_list[p->ndirty++] = slot_number(p, s);
    pthread_cond_signal(&p->dirty_cv);
    pthread_mutex_unlock(&p->mu);
}

void pool_load(struct slot_pool *p, int *nslots, int *busy, int *queue_max, int *waiting)
{
    *nslots = *busy = *queue_max = *waiting = 0;
    if (p->slots == NULL)
        return; /* not set up (--sessions 0) */
    pthread_mutex_lock(&p->mu);
    *nslots = p->nslots;
    *busy = p->busy;
    *queue_max = p->queue_max;
    *waiting = p->waiting;
    pthread_mutex_unlock(&p->mu);
}

void pool_shutdown(struct slot_pool *p)
{
    if (p->slots == NULL)
        return;
    pthread_mutex_lock(&p->mu);
    p->stopping = 1;
    pthread_cond_broadcast(&p->dirty_cv);
    pthread_cond_broadcast(&p->order_cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->nmaintainers; i++)
        pthread_join(p->maintainers[i], NULL);
    for (int i = 0; i < p->nslots; i++) {
        box_discard(&p->slots[i]);
        (void)rmdir(p->slots[i].root);
        (void)rmdir(p->slots[i].dir);
    }
    if (p->nslots > 0) {
        char slots[sizeof(p->slots[0].dir)];
        snprintf(slots, sizeof(slots), "%s", p->slots[0].dir);
        char *slash = strrchr(slots, '/');
        if (slash != NULL) {
            *slash = '\0';
            (void)rmdir(slots); /* <run>/slots */
            if ((slash = strrchr(slots, '/')) != NULL) {
                *slash = '\0';
                (void)rmdir(slots); /* the run dir, if nothing else is in it */
            }
        }
    }
    uid_range_unlock(&p->own_uids); /* every box is gone: the uids are free */
}
