/*
 * ratelimit.h - per-tenant admission control for moat-gateway.
 *
 * Three controls per tenant, decided together by one call:
 *
 *   rate         GCRA (generic cell rate algorithm): rate r per second, burst b.
 *                Emission interval T = 1/r, tolerance tau = (b-1)*T.  A request
 *                at time now is allowed when TAT - now <= tau, where TAT is
 *                max(stored TAT, now); on allow, stored TAT = TAT + T.
 *   concurrency  executions in flight; rl_admit takes a slot, rl_release frees it.
 *                (A queued execution, RL_ADMIT_QUEUED, takes none: its queue
 *                bounds it.)
 *   cpu quota    ms of box CPU per rolling minute, charged by rl_release (or
 *                rl_charge, for a queued execution) with the run's cpu time.  An admit is refused while the tenant has
 *                already used >= its budget in the last 60 s (a run may
 *                overshoot: it is charged after it ran).
 *
 * Decisions are asynchronous: the result arrives through a callback, so a
 * Redis backend (hiredis async on the worker's own loop, one Lua script per
 * decision) can replace the in-memory one without changing callers.  The
 * in-memory backend calls the callback before rl_admit returns; a Redis one
 * calls it later, on the same thread, from the caller's event loop (which
 * rl_admit_on passes down).  Callers must handle both.  The tenant string
 * and params need only live for the call.
 *
 * Cancelling: a caller that goes away while an answer is pending (an HTTP
 * client that disconnects) calls rl_cancel() on the handle rl_admit_on()
 * returned; its callback is then never called, and an allowed answer that
 * arrives afterwards gives its in-flight slot back by itself.  Handles exist
 * only for backends that answer later (rl_ops.deferred): the in-memory one
 * allocates nothing per decision.
 *
 * Nothing here blocks beyond a short critical section, and nothing reads a
 * clock: callers pass a monotonic time in milliseconds (rl_monotonic_ms()),
 * so tests run on synthetic time.
 *
 * Parameter semantics (fail closed: a zero never means "unlimited"):
 *   rate_per_second <= 0 or NaN  every request refused, RL_RATE, retry never
 *   burst == 0                   every request refused, RL_RATE, retry never
 *   max_in_flight == 0           every admit refused, RL_CONCURRENCY, retry never
 *   cpu_ms_per_minute == 0       every admit refused, RL_QUOTA, retry never
 * "Effectively unlimited" is spelled RL_UNLIMITED_* (or rate = INFINITY).
 * "Retry never" is retry_after_ms == RL_RETRY_NEVER: send no Retry-After.
 */
#ifndef MOAT_RATELIMIT_H
#define MOAT_RATELIMIT_H

#include <stddef.h>
#include <stdint.h>

#define RL_MAX_TENANT_NAME      64 /* bytes, without the NUL (= GW_MAX_TENANT_NAME) */
#define RL_DEFAULT_MAX_TENANTS  4096
#define RL_RETRY_NEVER          UINT64_MAX /* the refusal cannot clear by waiting */
#define RL_CONCURRENCY_RETRY_MS 1000       /* hint: a slot frees when a run ends */
#define RL_QUOTA_WINDOW_S       60
#define RL_UNLIMITED_IN_FLIGHT  UINT32_MAX
#define RL_UNLIMITED_CPU_MS     UINT64_MAX

struct rl_params {
    double rate_per_second;
    uint32_t burst;
    uint32_t max_in_flight;
    uint64_t cpu_ms_per_minute;
};

struct rl_decision {
    int allowed;
    /*
     * Why not (RL_OK when allowed).  When several controls refuse, the reason
     * is the first of RL_QUOTA, RL_RATE, RL_CONCURRENCY that does, and
     * retry_after_ms is the longest of their waits.
     * RL_BACKEND_ERROR: the store could not decide (Redis unreachable or timed
     * out; in memory: tenant table full, out of memory, bad arguments).  The
     * caller applies its fail-open/closed setting; nothing was taken.
     */
    enum rl_reason { RL_OK, RL_RATE, RL_CONCURRENCY, RL_QUOTA, RL_BACKEND_ERROR } reason;
    uint64_t retry_after_ms; /* 0 when allowed; Retry-After = ceil(ms / 1000) s, none if RL_RETRY_NEVER */
    uint32_t limit;          /* RateLimit-Limit: the burst */
    uint32_t remaining;      /* RateLimit-Remaining: requests the rate would pass now, after this decision */
    uint64_t reset_ms;       /* RateLimit-Reset: ms until the rate bucket is full again (ceil) */
};

typedef void (*rl_cb)(void *arg, const struct rl_decision *d);

struct rl_limiter;      /* opaque */
struct rl_pending;      /* an admission whose answer has not come yet */
struct st_h2o_evloop_t; /* h2o_loop_t: the caller's event loop */

/* The vtable a backend implements.  Its state is reached with rl_impl(l). */
/* Can the store decide?  (A shared store: down, or deciding locally meanwhile.) */
enum rl_store_state { RL_STORE_UP, RL_STORE_DOWN, RL_STORE_FALLBACK };

struct rl_ops {
    /* rate + concurrency + quota; on allow, takes one in-flight slot and one rate token.
     * loop: the caller's event loop, on which a deferred backend answers (may be NULL
     * for a backend that answers at once).  Every admit must be answered exactly once,
     * also at destroy (RL_BACKEND_ERROR). */
    void (*admit)(struct rl_limiter *l, struct st_h2o_evloop_t *loop, const char *tenant, const struct rl_params *p,
                  uint64_t now_ms, rl_cb cb, void *arg);
    /* rate only (non-execute endpoints): no slot taken, quota not consulted */
    void (*admit_rate)(struct rl_limiter *l, struct st_h2o_evloop_t *loop, const char *tenant, const struct rl_params *p,
                       uint64_t now_ms, rl_cb cb, void *arg);
    /* rate + quota, no slot taken (an execution that waits in a queue of its
     * own instead of holding a slot: Judge0's wait=false) */
    void (*admit_queued)(struct rl_limiter *l, struct st_h2o_evloop_t *loop, const char *tenant, const struct rl_params *p,
                         uint64_t now_ms, rl_cb cb, void *arg);
    /* ends an execution: frees the in-flight slot and charges cpu_ms */
    void (*release)(struct rl_limiter *l, const char *tenant, uint64_t cpu_ms, uint64_t now_ms);
    /* charges cpu_ms of a run that held no slot (a queued submission's) */
    void (*charge)(struct rl_limiter *l, const char *tenant, uint64_t cpu_ms, uint64_t now_ms);
    /* frees the backend's state (not the rl_limiter itself) */
    void (*destroy)(struct rl_limiter *l);
    /* 1: may answer after admit returns (a shared store); the front then keeps a
     * cancellable handle per pending admission */
    int deferred;
    /* the store's state now (any thread; metrics.c); NULL: always RL_STORE_UP */
    enum rl_store_state (*state)(struct rl_limiter *l);
};

/*
 * The in-memory backend: one process, thread-safe and exact across worker
 * threads (each tenant's state is updated under a lock, so N threads see the
 * same sequence of decisions one thread would).  rl_memory_new() caps the
 * table at RL_DEFAULT_MAX_TENANTS tenants; rl_memory_new_capped() at
 * max_tenants (>= 1).  Returns NULL on failure.
 */
struct rl_limiter *rl_memory_new(void);
struct rl_limiter *rl_memory_new_capped(size_t max_tenants);
/* rl_release on an in-memory limiter, saying whether a slot went back (1)
 * or the tenant held none (0: nothing charged either).  Only for a limiter
 * rl_memory_new* made (the Redis backend's local fallback asks it). */
int rl_memory_release_held(struct rl_limiter *l, const char *tenant, uint64_t cpu_ms, uint64_t now_ms);

/*
 * Callers.  Call rl_release exactly once per admit that was allowed (never
 * after a refusal or a fail-open RL_BACKEND_ERROR: a release the limiter did
 * not see admitted would free another run's slot; with none in flight it is
 * ignored and the count never goes below zero).  A release for a tenant the
 * limiter has never seen is ignored.
 */
void rl_admit(struct rl_limiter *l, const char *tenant, const struct rl_params *p, uint64_t now_ms, rl_cb cb, void *arg);
void rl_admit_rate_only(struct rl_limiter *l, const char *tenant, const struct rl_params *p, uint64_t now_ms, rl_cb cb, void *arg);
void rl_release(struct rl_limiter *l, const char *tenant, uint64_t cpu_ms, uint64_t now_ms);
/* Charge cpu_ms to the tenant's CPU budget without touching its in-flight
 * count: the end of a run that waited in the submissions queue instead of
 * holding a slot (judge0_queue.c).  An unknown tenant is ignored. */
void rl_charge(struct rl_limiter *l, const char *tenant, uint64_t cpu_ms, uint64_t now_ms);
/* What an admission checks and takes. */
enum rl_admission {
    RL_ADMIT_RATE,      /* the rate only: rl_admit_rate_only */
    RL_ADMIT_EXECUTION, /* rate, quota and concurrency; takes a slot: rl_admit */
    RL_ADMIT_QUEUED,    /* rate and quota, no slot: an execution whose run waits in
                         * a queue bounded elsewhere (rl_charge when it ends) */
};

/*
 * The gateway's form: an admission of the given kind on the worker's loop.
 * Returns NULL when cb has already been called, else a handle for
 * rl_cancel, valid until cb runs.  Out of memory: cb is called at once
 * with RL_BACKEND_ERROR (the caller fails closed).
 */
struct rl_pending *rl_admit_on(struct rl_limiter *l, struct st_h2o_evloop_t *loop, enum rl_admission kind, const char *tenant,
                               const struct rl_params *p, uint64_t now_ms, rl_cb cb, void *arg);
/* The caller went away: cb will not be called for this admission. */
void rl_cancel(struct rl_pending *pending);
void rl_destroy(struct rl_limiter *l);
/* The store's state now, from any thread (metrics.c). */
enum rl_store_state rl_store_state(struct rl_limiter *l);

/* Backends.  rl_new wraps ops + impl in a limiter (NULL on failure). */
struct rl_limiter *rl_new(const struct rl_ops *ops, void *impl);
void *rl_impl(struct rl_limiter *l);

/* CLOCK_MONOTONIC in milliseconds: the clock callers should pass. */
uint64_t rl_monotonic_ms(void);

/* Static text for logs and error bodies. */
const char *rl_reason_str(enum rl_reason r);

#endif /* MOAT_RATELIMIT_H */
