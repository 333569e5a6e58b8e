/*
 * pool.h - box slots shared by the worker threads.
 *
 * Two pools use this code.  The batch pool (-j N, pool_init_at): every slot
 * kept warm, and a bounded queue: a request waits for a warm slot while
 * fewer than queue_max others wait, and is refused as busy otherwise.  The
 * session pool (--sessions N, pool_init_sessions): no queue (busy at once),
 * and only `warm` slots kept warm; the others are cold (no cgroup, no init)
 * until a session takes one and prepares it on its own path, because a
 * session waits on stdin most of its life and hundreds of warm inits would
 * be memory spent on nothing.  In both, maintenance threads discard used
 * boxes and prepare warm ones off the request path.  Slot n of a pool runs
 * as uid and gid first + n of a range the instance holds (uid_range.h).
 */
#ifndef MOAT_POOL_H
#define MOAT_POOL_H

#include <pthread.h>

#include "box.h"
#include "uid_range.h"

/* Maintenance threads per pool (at most one a slot).  Replacing a box is
 * mostly waiting on the kernel, not CPU: the pid namespace's teardown when
 * init is killed, the mount namespace's RCU wait, and on cgroup v1 the
 * attach's RCU grace period.  Measured on a busy 2-vCPU machine (cgroup
 * v1): discard ~8 ms and prepare ~13 ms a slot, one slot at a time per
 * thread.  Several threads overlap those waits (each works on a slot of its
 * own, so nothing else is shared between them): with 16 clients of a cheap
 * job, four did 1.47x the jobs/s of one (tests/bench/RESULTS.md). */
#define POOL_MAINTAINERS 4

/* pool_acquire's refusal when every slot (and queue place) is taken. */
#define POOL_BUSY 1

struct slot_pool {
    pthread_mutex_t mu;
    pthread_cond_t free_cv;  /* a warm slot was added */
    pthread_cond_t dirty_cv; /* a used slot needs preparing, or an order came */
    struct slot *slots;
    int nslots;
    int *free_list; /* warm slots */
    int nfree;
    int *cold_list; /* slots with no box: the maintainer prepares one for its taker */
    int ncold;
    struct pool_order *orders; /* cold slots takers wait for, first come first */
    pthread_cond_t order_cv;   /* an order was carried out */
    int *dirty_list;           /* used slots, to discard and prepare */
    int ndirty;
    int preparing; /* dirty slots the maintainers are making warm now */
    int warm_max;  /* slots kept warm; released slots beyond go cold */
    int waiting;
    int queue_max;
    int busy; /* slots handed out and not yet released (pool_load) */
    int stopping;
    const struct cg_system *cg;
    const struct seccomp_prog *seccomp;
    pthread_t maintainers[POOL_MAINTAINERS];
    int nmaintainers;
    struct uid_range own_uids; /* the range pool_init took itself, if any */
};

/* Called at start-up: the batch pool, every slot prepared before this
 * returns.  Slot n runs as uids->first + n; uids must be locked and hold
 * nslots uids. */
int pool_init_at(struct slot_pool *p, int nslots, int queue_max, const struct uid_range *uids, const char *run_dir,
                 const struct cg_system *cg, const struct seccomp_prog *seccomp, struct errbuf *e);
/* pool_init_at on the default range (SLOT_UID_BASE), which it locks and
 * checks itself and holds until pool_shutdown: for tools (bench_box). */
int pool_init(struct slot_pool *p, int nslots, int queue_max, const char *run_dir, const struct cg_system *cg,
              const struct seccomp_prog *seccomp, struct errbuf *e);
/* Called at start-up: the session pool, 0..MAX_SESSIONS slots (0: every
 * session is refused as busy), `warm` of them prepared before this returns
 * and kept warm, the rest cold.  Session slot n has index MAX_SLOTS + n
 * (its directory and init_args apart from any batch slot's), cgroup
 * "session<n>", uid uids->first + n. */
int pool_init_sessions(struct slot_pool *p, int nslots, int warm, const struct uid_range *uids, const char *run_dir,
                       const struct cg_system *cg, const struct seccomp_prog *seccomp, struct errbuf *e);
/* A slot with a warm box in *out: 0; POOL_BUSY when every slot is taken and
 * the queue is full; -1 (e says why) when a cold slot could not be
 * prepared.  Waits in the queue otherwise. */
int pool_acquire(struct slot_pool *p, struct slot **out, struct errbuf *e);
/* Hands a used slot to the maintenance threads. */
void pool_release(struct slot_pool *p, struct slot *s);

/* The pool's load now: its slots, those taken, its queue places and the
 * requests waiting in them (RUNTIMES' load, for the gateway's metrics). */
void pool_load(struct slot_pool *p, int *nslots, int *busy, int *queue_max, int *waiting);
/* Stops the maintenance threads, discards every box and removes the slots'
 * directories (and drops the range pool_init took). */
void pool_shutdown(struct slot_pool *p);

#endif
