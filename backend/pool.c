/*
 * pool.c - the slot pool.  Each slot has its own uid (SLOT_UID_BASE + n),
 * directories and clone stack, prepared here at start-up so none of that
 * work is on a request's path.
 */
#include "pool.h"

#include <stdlib.h>
#include <string.h>

#include "moat_limits.h"

int pool_init(struct slot_pool *p, int nslots, int queue_max, const char *run_dir, struct errbuf *e)
{
    memset(p, 0, sizeof(*p));
    if (nslots < 1 || nslots > MAX_SLOTS)
        return errf(e, "slot count %d out of range 1..%d", nslots, MAX_SLOTS);
    p->slots = calloc((size_t)nslots, sizeof(*p->slots));
    p->free_list = calloc((size_t)nslots, sizeof(int));
    if (p->slots == NULL || p->free_list == NULL)
        return errf(e, "out of memory");
    for (int i = 0; i < nslots; i++) {
        if (slot_init(&p->slots[i], i, run_dir, (uid_t)(SLOT_UID_BASE + i), e) != 0)
            return -1;
        slot_cleanup_stale(&p->slots[i]);
        p->free_list[i] = nslots - 1 - i;
    }
    p->nslots = p->nfree = nslots;
    p->queue_max = queue_max;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
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
        pthread_cond_wait(&p->cv, &p->mu);
    p->waiting--;
    s = &p->slots[p->free_list[--p->nfree]];
    pthread_mutex_unlock(&p->mu);
    return s;
}

void pool_release(struct slot_pool *p, struct slot *s)
{
    pthread_mutex_lock(&p->mu);
    p->free_list[p->nfree++] = s->index;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}
