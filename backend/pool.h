/*
 * pool.h - N box slots shared by the worker threads, with a bounded queue:
 * a request waits for a warm slot while fewer than queue_max others wait,
 * and is refused as busy otherwise.  A maintenance thread discards used
 * boxes and prepares the next warm box of each slot off the request path.
 * Slot n runs as uid and gid first + n of a range the instance holds
 * (uid_range.h).
 */
#ifndef MOAT_POOL_H
#define MOAT_POOL_H

#include <pthread.h>

#include "box.h"
#include "uid_range.h"

/* Preparing a box waits on the kernel (a cgroup attach waits for an RCU
 * grace period on v1); several threads let those waits overlap. */
#define POOL_MAINTAINERS 1

struct slot_pool {
    pthread_mutex_t mu;
    pthread_cond_t free_cv;  /* a warm slot was added */
    pthread_cond_t dirty_cv; /* a used slot needs preparing */
    struct slot *slots;
    int nslots;
    int *free_list; /* warm slots */
    int nfree;
    int *dirty_list; /* used slots, to discard and prepare */
    int ndirty;
    int waiting;
    int queue_max;
    int stopping;
    const struct cg_system *cg;
    const struct seccomp_prog *seccomp;
    pthread_t maintainers[POOL_MAINTAINERS];
    int nmaintainers;
    struct uid_range own_uids; /* the range pool_init took itself, if any */
};

/* Called at start-up: every slot is prepared before this returns.  Slot n
 * runs as uids->first + n; uids must be locked and hold nslots uids. */
int pool_init_at(struct slot_pool *p, int nslots, int queue_max, const struct uid_range *uids, const char *run_dir,
                 const struct cg_system *cg, const struct seccomp_prog *seccomp, struct errbuf *e);
/* pool_init_at on the default range (SLOT_UID_BASE), which it locks and
 * checks itself and holds until pool_shutdown: for tools (bench_box). */
int pool_init(struct slot_pool *p, int nslots, int queue_max, const char *run_dir, const struct cg_system *cg,
              const struct seccomp_prog *seccomp, struct errbuf *e);
/* Returns a slot with a warm box, or NULL when the queue is full. */
struct slot *pool_acquire(struct slot_pool *p);
/* Hands a used slot to the maintenance thread. */
void pool_release(struct slot_pool *p, struct slot *s);
/* Stops the maintenance thread, discards every box and removes the slots'
 * directories (and drops the range pool_init took). */
void pool_shutdown(struct slot_pool *p);

#endif
