/*
 * pool.h - N box slots shared by the worker threads, with a bounded queue:
 * a request waits for a free slot while fewer than queue_max others wait,
 * and is refused as busy otherwise.
 */
#ifndef MOAT_POOL_H
#define MOAT_POOL_H

#include <pthread.h>

#include "box.h"

struct slot_pool {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct slot *slots;
    int nslots;
    int *free_list;
    int nfree;
    int waiting;
    int queue_max;
};

int pool_init(struct slot_pool *p, int nslots, int queue_max, const char *run_dir, struct errbuf *e);
/* Returns a slot, or NULL when the queue is full. */
struct slot *pool_acquire(struct slot_pool *p);
void pool_release(struct slot_pool *p, struct slot *s);

#endif
