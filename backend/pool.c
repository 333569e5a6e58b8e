/*
 * pool.c - the slot pool.  Each slot has its own uid (the held range's
 * first + n), directory and clone stack, set up once; each holds one warm box, which
 * the maintenance thread replaces after every job so that cgroup creation,
 * clone and cgroup attachment are never on a request's path.
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

static void *maintainer_main(void *arg)
{
    struct slot_pool *p = arg;

    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->ndirty == 0 && !p->stopping)
            pthread_cond_wait(&p->dirty_cv, &p->mu);
        if (p->stopping)
            break;
        struct slot *s = &p->slots[p->dirty_list[--p->ndirty]];
        pthread_mutex_unlock(&p->mu);

        struct errbuf e;
        int rc = box_prepare(p->cg, p->seccomp, s, &e);
        if (rc != 0) {
            log_warnx("%s: slot %d: %s (retrying)", __func__, s->index, e.msg);
            struct timespec ts = {0, PREPARE_RETRY_MS * 1000000L};
            nanosleep(&ts, NULL);
        }

        pthread_mutex_lock(&p->mu);
        if (rc == 0) {
            p->free_list[p->nfree++] = s->index;
            pthread_cond_signal(&p->free_cv);
        } else {
            p->dirty_list[p->ndirty++] = s->index;
        }
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int pool_init_at(struct slot_pool *p, int nslots, int queue_max, const struct uid_range *uids, const char *run_dir,
                 const struct cg_system *cg, const struct seccomp_prog *seccomp, struct errbuf *e)
{
    memset(p, 0, sizeof(*p));
    if (nslots < 1 || nslots > MAX_SLOTS)
        return errf(e, "slot count %d out of range 1..%d", nslots, MAX_SLOTS);
    if (!uid_range_covers(uids, nslots))
        return errf(e, "%d slots need a locked range of as many box uids", nslots);
    p->slots = calloc((size_t)nslots, sizeof(*p->slots));
    p->free_list = calloc((size_t)nslots, sizeof(int));
    p->dirty_list = calloc((size_t)nslots, sizeof(int));
    if (p->slots == NULL || p->free_list == NULL || p->dirty_list == NULL)
        return errf(e, "out of memory");
    p->cg = cg;
    p->seccomp = seccomp;
    for (int i = 0; i < nslots; i++) {
        if (slot_init(&p->slots[i], i, run_dir, uids->first + (uid_t)i, e) != 0)
            return -1;
        if (box_prepare(cg, seccomp, &p->slots[i], e) != 0)
            return -1;
        p->free_list[i] = nslots - 1 - i;
    }
    p->nslots = p->nfree = nslots;
    p->queue_max = queue_max;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->free_cv, NULL);
    pthread_cond_init(&p->dirty_cv, NULL);
    int want = nslots < POOL_MAINTAINERS ? nslots : POOL_MAINTAINERS;
    for (; p->nmaintainers < want; p->nmaintainers++)
        if (pthread_create(&p->maintainers[p->nmaintainers], NULL, maintainer_main, p) != 0)
            return errf(e, "cannot start the slot maintenance threads");
    return 0;
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

struct slot *pool_acquire(struct slot_pool *p)
{
    struct slot *s = NULL;
    pthread_mutex_lock(&p->mu);
    if (p->nfree == 0 && p->waiting >= p->queue_max) {
        pthread_mutex_unlock(&p->mu);
        return NULL;
    }
    p->waiting++;
    while (p->nfree == 0)
        pthread_cond_wait(&p->free_cv, &p->mu);
    p->waiting--;
    s = &p->slots[p->free_list[--p->nfree]];
    pthread_mutex_unlock(&p->mu);
    return s;
}

void pool_release(struct slot_pool *p, struct slot *s)
{
    pthread_mutex_lock(&p->mu);
    p->dirty_list[p->ndirty++] = s->index;
    pthread_cond_signal(&p->dirty_cv);
    pthread_mutex_unlock(&p->mu);
}

void pool_shutdown(struct slot_pool *p)
{
    if (p->slots == NULL)
        return;
    pthread_mutex_lock(&p->mu);
    p->stopping = 1;
    pthread_cond_broadcast(&p->dirty_cv);
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
