/*
 * ratelimit.c - the rl_limiter front (thin wrappers over a backend's ops) and
 * the in-memory backend.
 *
 * In-memory layout: a fixed array of hash buckets (a power of two >= the
 * tenant cap, never resized), each a chain of tenant entries; bucket i is
 * guarded by stripe lock i % RL_STRIPES.  Every read and write of a tenant's
 * state happens under its stripe lock, so decisions for one tenant are
 * serialised and exact no matter how many worker threads ask; different
 * tenants mostly take different locks.  Entries are created on first admit
 * (up to the cap, counted atomically) and live until rl_destroy: the tenant
 * set is bounded by configuration.  The critical section is a few hundred
 * instructions (one malloc the first time a tenant is seen); the callback
 * runs after the lock is dropped, so it may call back into the limiter.
 *
 * Arithmetic: rate state in integer nanoseconds (uint64: ~584 years of
 * monotonic time), quota in integer ms per whole second.  Every add and
 * multiply that could overflow saturates.
 *
 * Rate (GCRA): T = floor(1e9 / rate) ns (clamped to [1 ns, 1e18 ns]).  Over
 * any span [t0, t0 + D] a tenant whose bucket starts full gets exactly
 * b + floor(D / T) requests.  Rounding T down never passes fewer than
 * b + floor(r * D); it passes one more only once r * D * (1 ns / T) >= 1, i.e.
 * the long-run rate is at most r * (1 + r * 1e-9): for r <= 10^4/s that is
 * exact to the request over 10 s, and a relative 1e-6 at 1000/s.
 *
 * Quota: a 60-slot ring of per-second buckets {second, ms}.  A charge made at
 * time t lands in second floor(t / 1000 s) and counts while now's second is
 * below that second + 60, i.e. it ages out at the first whole second boundary
 * at least 59 s (and at most 60 s) after it was made.  The window is thus
 * "the current second plus the 59 before it": usage is never over-counted and
 * under-counted only by charges 59..60 s old.  Checking costs a 60-entry scan.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ratelimit.h"

#define RL_STRIPES         64                     /* power of two */
#define RL_MAX_T_NS        1000000000000000000ull /* 1e18 ns: rates below 1e-9/s clamp here */
#define RL_MAX_SLOT_MS     (1ull << 56)           /* 60 slots sum without overflow */
#define RL_MAX_TENANTS_CAP (1u << 24)
#define NS_PER_MS          1000000ull

struct rl_limiter {
    const struct rl_ops *ops;
    void *impl;
};

/* ---------------------------------------------------------------- front */

struct rl_limiter *rl_new(const struct rl_ops *ops, void *impl)
{
    struct rl_limiter *l;

    if (ops == NULL || ops->admit == NULL || ops->admit_rate == NULL || ops->admit_queued == NULL || ops->release == NULL ||
        ops->charge == NULL || ops->destroy == NULL)
        return NULL;
    if ((l = calloc(1, sizeof(*l))) == NULL)
        return NULL;
    l->ops = ops;
    l->impl = impl;
    return l;
}

void *rl_impl(struct rl_limiter *l)
{
    return l->impl;
}

/* What the front keeps for an admission a deferred backend answers later. */
struct rl_pending {
    struct rl_limiter *l;
    rl_cb cb;
    void *arg;
    enum rl_admission kind;
    int in_admit;  /* the backend's admit has not returned yet */
    int answered;  /* the answer came while in_admit */
    int cancelled; /* the caller went away */
    char tenant[RL_MAX_TENANT_NAME + 1];
};

/* A deferred backend's answer.  Frees the handle, unless rl_admit_on is
 * still inside the backend's admit (then it frees it on return). */
static void deliver(void *arg, const struct rl_decision *d)
{
    struct rl_pending *t = arg;

    if (t->cancelled) {
        /* nobody waits: an in-flight slot taken for a vanished caller goes back */
        if (d->allowed && t->kind == RL_ADMIT_EXECUTION)
            t->l->ops->release(t->l, t->tenant, 0, rl_monotonic_ms());
        free(t);
        return;
    }
    t->cb(t->arg, d);
    if (t->in_admit)
        t->answered = 1;
    else
        free(t);
}

struct rl_pending *rl_admit_on(struct rl_limiter *l, struct st_h2o_evloop_t *loop, enum rl_admission kind, const char *tenant,
                               const struct rl_params *p, uint64_t now_ms, rl_cb cb, void *arg)
{
    void (*admit)(struct rl_limiter *, struct st_h2o_evloop_t *, const char *, const struct rl_params *, uint64_t, rl_cb, void *) =
        kind == RL_ADMIT_EXECUTION ? l->ops->admit
        : kind == RL_ADMIT_QUEUED  ? l->ops->admit_queued
                                   : l->ops->admit_rate;
    struct rl_pending *t;
    size_t n = tenant != NULL ? strlen(tenant) : 0;

    if (!l->ops->deferred) {
        admit(l, loop, tenant, p, now_ms, cb, arg); /* answered before it returns */
        return NULL;
    }
    if ((t = calloc(1, sizeof(*t))) == NULL || n > RL_MAX_TENANT_NAME) {
        struct rl_decision d = {0, RL_BACKEND_ERROR, RL_RETRY_NEVER, 0, 0, 0};
        free(t);
        if (cb != NULL)
            cb(arg, &d);
        return NULL;
    }
    t->l = l;
    t->cb = cb;
    t->arg = arg;
    t->kind = kind;
    memcpy(t->tenant, tenant, n);
    t->in_admit = 1;
    admit(l, loop, tenant, p, now_ms, deliver, t);
    t->in_admit = 0;
    if (t->answered) {
        free(t);
        return NULL;
    }
    return t;
}

void rl_cancel(struct rl_pending *pending)
{
    if (pending != NULL)
        pending->cancelled = 1; /* freed when the answer comes */
}

void rl_admit(struct rl_limiter *l, const char *tenant, const struct rl_params *p, uint64_t now_ms, rl_cb cb, void *arg)
{
    (void)rl_admit_on(l, NULL, RL_ADMIT_EXECUTION, tenant, p, now_ms, cb, arg);
}

void rl_admit_rate_only(struct rl_limiter *l, const char *tenant, const struct rl_params *p, uint64_t now_ms, rl_cb cb, void *arg)
{
    (void)rl_admit_on(l, NULL, RL_ADMIT_RATE, tenant, p, now_ms, cb, arg);
}

void rl_release(struct rl_limiter *l, const char *tenant, uint64_t cpu_ms, uint64_t now_ms)
{
    l->ops->release(l, tenant, cpu_ms, now_ms);
}

void rl_charge(struct rl_limiter *l, const char *tenant, uint64_t cpu_ms, uint64_t now_ms)
{
    l->ops->charge(l, tenant, cpu_ms, now_ms);
}

void rl_destroy(struct rl_limiter *l)
{
    if (l == NULL)
        return;
    l->ops->destroy(l);
    free(l);
}

enum rl_store_state rl_store_state(struct rl_limiter *l)
{
    return l != NULL && l->ops->state != NULL ? l->ops->state(l) : RL_STORE_UP;
}

uint64_t rl_monotonic_ms(void)
{
    struct timespec ts;

    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
        return 0;
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / NS_PER_MS;
}

const char *rl_reason_str(enum rl_reason r)
{
    switch (r) {
    case RL_OK:
        return "ok";
    case RL_RATE:
        return "request rate limit exceeded";
    case RL_CONCURRENCY:
        return "too many executions in flight";
    case RL_QUOTA:
        return "CPU time budget exhausted";
    case RL_BACKEND_ERROR:
        return "rate limit store unavailable";
    }
    return "unknown";
}

/* ----------------------------------------------------------- arithmetic */

static uint64_t sat_add(uint64_t a, uint64_t b)
{
    uint64_t r;

    return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
}

static uint64_t sat_mul(uint64_t a, uint64_t b)
{
    uint64_t r;

    return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

static uint64_t ns_to_ms_ceil(uint64_t ns)
{
    return ns / NS_PER_MS + (ns % NS_PER_MS != 0);
}

/* ------------------------------------------------------- in-memory store */

struct quota_slot {
    uint64_t sec; /* which second this slot holds */
    uint64_t ms;  /* CPU ms charged in that second */
};

struct tenant {
    struct tenant *next;
    uint64_t tat_ns; /* GCRA theoretical arrival time */
    uint32_t in_flight;
    struct quota_slot ring[RL_QUOTA_WINDOW_S];
    char name[RL_MAX_TENANT_NAME + 1];
};

struct stripe {
    pthread_mutex_t mu;
} __attribute__((aligned(64)));

struct mem {
    struct stripe stripes[RL_STRIPES];
    struct tenant **buckets;
    size_t mask; /* nbuckets - 1 */
    size_t max_tenants;
    atomic_size_t ntenants;
};

enum lookup_err { LK_OK, LK_ABSENT, LK_FULL, LK_NOMEM };

static uint64_t hash_name(const char *s, size_t len)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    size_t i;

    for (i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    return h;
}

/* 0 and the length if the name is usable, -1 if not. */
static int name_len(const char *tenant, size_t *len)
{
    if (tenant == NULL)
        return -1;
    *len = strnlen(tenant, RL_MAX_TENANT_NAME + 1);
    return (*len == 0 || *len > RL_MAX_TENANT_NAME) ? -1 : 0;
}

/*
 * Find (or, with create, add) a tenant.  Returns with *mu locked whatever the
 * outcome; the caller unlocks it.
 */
static struct tenant *lookup(struct mem *m, const char *name, size_t len, int create, pthread_mutex_t **mu, enum lookup_err *err)
{
    size_t b = (size_t)hash_name(name, len) & m->mask;
    struct tenant *t;

    *mu = &m->stripes[b % RL_STRIPES].mu;
    pthread_mutex_lock(*mu);
    for (t = m->buckets[b]; t != NULL; t = t->next) {
        if (memcmp(t->name, name, len) == 0 && t->name[len] == '\0') {
            *err = LK_OK;
            return t;
        }
    }
    if (!create) {
        *err = LK_ABSENT;
        return NULL;
    }
    if (atomic_fetch_add(&m->ntenants, 1) >= m->max_tenants) {
        atomic_fetch_sub(&m->ntenants, 1);
        *err = LK_FULL;
        return NULL;
    }
    if ((t = calloc(1, sizeof(*t))) == NULL) {
        atomic_fetch_sub(&m->ntenants, 1);
        *err = LK_NOMEM;
        return NULL;
    }
    memcpy(t->name, name, len);
    t->name[len] = '\0';
    t->next = m->buckets[b];
    m->buckets[b] = t;
    *err = LK_OK;
    return t;
}

/* ---------------------------------------------------------------- GCRA */

struct gcra {
    int never; /* rate <= 0, NaN, or burst 0 */
    uint64_t T, tau, bT;
};

static void gcra_setup(const struct rl_params *p, struct gcra *g)
{
    double t;

    memset(g, 0, sizeof(*g));
    if (!(p->rate_per_second > 0.0) || p->burst == 0) {
        g->never = 1;
        return;
    }
    t = 1e9 / p->rate_per_second;
    if (!(t >= 1.0))
        g->T = 1;
    else if (t >= (double)RL_MAX_T_NS)
        g->T = RL_MAX_T_NS;
    else
        g->T = (uint64_t)t; /* floor; 1 <= t < 1e18 */
    g->tau = sat_mul((uint64_t)p->burst - 1, g->T);
    g->bT = sat_add(g->tau, g->T);
}

/* Fills limit/remaining/reset from the TAT in force after the decision. */
static void gcra_headers(const struct gcra *g, uint32_t burst, uint64_t tat, uint64_t now, struct rl_decision *d)
{
    uint64_t ahead = tat > now ? tat - now : 0, rem;

    d->limit = burst;
    if (g->never) {
        d->remaining = 0;
        d->reset_ms = 0;
        return;
    }
    rem = ahead < g->bT ? (g->bT - ahead) / g->T : 0;
    d->remaining = rem > burst ? burst : (uint32_t)rem;
    d->reset_ms = ns_to_ms_ceil(ahead);
}

/*
 * The rate check.  Returns 1 and the TAT to store if allowed; 0 and the wait
 * in ms (RL_RETRY_NEVER for a never-limit) if not.
 */
static int gcra_check(const struct gcra *g, uint64_t stored_tat, uint64_t now, uint64_t *new_tat, uint64_t *retry_ms)
{
    uint64_t tat = stored_tat > now ? stored_tat : now, ahead = tat - now;

    if (g->never) {
        *retry_ms = RL_RETRY_NEVER;
        return 0;
    }
    if (ahead > g->tau) {
        *retry_ms = ns_to_ms_ceil(ahead - g->tau);
        return 0;
    }
    *new_tat = sat_add(tat, g->T);
    return 1;
}

/* --------------------------------------------------------------- quota */

/*
 * The quota check: 1 if the tenant used < budget in the window, else 0 and
 * the ms until enough charges age out (RL_RETRY_NEVER for a zero budget).
 */
static int quota_check(const struct tenant *t, uint64_t budget, uint64_t now_ms, uint64_t *retry_ms)
{
    struct quota_slot live[RL_QUOTA_WINDOW_S], tmp;
    uint64_t now_s = now_ms / 1000u, used = 0;
    size_t n = 0, i, j;

    if (budget == RL_UNLIMITED_CPU_MS)
        return 1;
    if (budget == 0) {
        *retry_ms = RL_RETRY_NEVER;
        return 0;
    }
    for (i = 0; i < RL_QUOTA_WINDOW_S; i++) {
        if (t->ring[i].ms != 0 && t->ring[i].sec + RL_QUOTA_WINDOW_S > now_s) {
            live[n++] = t->ring[i];
            used += t->ring[i].ms; /* <= 60 * 2^56: cannot overflow */
        }
    }
    if (used < budget)
        return 1;
    /* Oldest first: when does the sum drop below the budget? */
    for (i = 1; i < n; i++) {
        tmp = live[i];
        for (j = i; j > 0 && live[j - 1].sec > tmp.sec; j--)
            live[j] = live[j - 1];
        live[j] = tmp;
    }
    for (i = 0; i < n; i++) {
        used -= live[i].ms;
        if (used < budget)
            break;
    }
    /* i < n always (budget > 0 and the sum reaches 0); sec + 60 > now_s */
    *retry_ms = sat_mul(live[i < n ? i : n - 1].sec + RL_QUOTA_WINDOW_S, 1000u) - now_ms;
    return 0;
}

static void quota_charge(struct tenant *t, uint64_t cpu_ms, uint64_t now_ms)
{
    uint64_t now_s = now_ms / 1000u;
    struct quota_slot *s = &t->ring[now_s % RL_QUOTA_WINDOW_S];

    if (cpu_ms == 0)
        return;
    /*
     * A slot holding an older second is recycled.  One holding a later second
     * (possible only if the clock went back by 60 s or more) keeps it: the
     * charge then counts longer, never shorter.  A clock read a little late by
     * another thread lands in its own second's slot and counts normally.
     */
    if (s->sec < now_s) {
        s->sec = now_s;
        s->ms = 0;
    }
    s->ms = sat_add(s->ms, cpu_ms);
    if (s->ms > RL_MAX_SLOT_MS)
        s->ms = RL_MAX_SLOT_MS;
}

/* ------------------------------------------------------------ decisions */

static void backend_error(const struct rl_params *p, rl_cb cb, void *arg)
{
    struct rl_decision d;

    memset(&d, 0, sizeof(d));
    d.reason = RL_BACKEND_ERROR;
    d.limit = p != NULL ? p->burst : 0;
    cb(arg, &d);
}

static uint64_t max_u64(uint64_t a, uint64_t b)
{
    return a > b ? a : b;
}

static void mem_decide(struct rl_limiter *l, const char *tenant, const struct rl_params *p, uint64_t now_ms, rl_cb cb, void *arg,
                       enum rl_admission kind)
{
    struct mem *m = rl_impl(l);
    struct rl_decision d;
    struct gcra g;
    struct tenant *t;
    pthread_mutex_t *mu;
    enum lookup_err err;
    uint64_t now_ns = sat_mul(now_ms, NS_PER_MS), new_tat = 0, wait, retry = 0;
    int rate_ok, conc_ok = 1, quota_ok = 1;
    size_t len;

    if (cb == NULL)
        return; /* nobody to tell: take nothing */
    if (p == NULL || name_len(tenant, &len) != 0) {
        backend_error(p, cb, arg);
        return;
    }
    gcra_setup(p, &g);
    memset(&d, 0, sizeof(d));

    t = lookup(m, tenant, len, 1, &mu, &err);
    if (t == NULL) {
        pthread_mutex_unlock(mu);
        backend_error(p, cb, arg);
        return;
    }
    if (kind != RL_ADMIT_RATE && quota_check(t, p->cpu_ms_per_minute, now_ms, &wait) == 0) {
        quota_ok = 0;
        retry = max_u64(retry, wait);
    }
    if (kind == RL_ADMIT_EXECUTION) {
        if (t->in_flight >= p->max_in_flight) {
            conc_ok = 0;
            retry = max_u64(retry, p->max_in_flight == 0 ? RL_RETRY_NEVER : RL_CONCURRENCY_RETRY_MS);
        }
    }
    rate_ok = gcra_check(&g, t->tat_ns, now_ns, &new_tat, &wait);
    if (!rate_ok)
        retry = max_u64(retry, wait);

    if (quota_ok && conc_ok && rate_ok) {
        t->tat_ns = new_tat;
        if (kind == RL_ADMIT_EXECUTION)
            t->in_flight++;
        d.allowed = 1;
        d.reason = RL_OK;
        d.retry_after_ms = 0;
    } else {
        d.allowed = 0;
        d.reason = !quota_ok ? RL_QUOTA : !rate_ok ? RL_RATE : RL_CONCURRENCY;
        d.retry_after_ms = retry;
    }
    gcra_headers(&g, p->burst, t->tat_ns, now_ns, &d);
    pthread_mutex_unlock(mu);
    cb(arg, &d);
}

static void mem_admit(struct rl_limiter *l, struct st_h2o_evloop_t *loop, const char *tenant, const struct rl_params *p,
                      uint64_t now_ms, rl_cb cb, void *arg)
{
    mem_decide(l, tenant, p, now_ms, cb, arg, RL_ADMIT_EXECUTION);
}

static void mem_admit_rate(struct rl_limiter *l, struct st_h2o_evloop_t *loop, const char *tenant, const struct rl_params *p,
                           uint64_t now_ms, rl_cb cb, void *arg)
{
    mem_decide(l, tenant, p, now_ms, cb, arg, RL_ADMIT_RATE);
}

static void mem_admit_queued(struct rl_limiter *l, struct st_h2o_evloop_t *loop, const char *tenant, const struct rl_params *p,
                             uint64_t now_ms, rl_cb cb, void *arg)
{
    mem_decide(l, tenant, p, now_ms, cb, arg, RL_ADMIT_QUEUED);
}

/* A run is over: its slot (slot: 1) goes back and its cpu_ms is charged;
 * a queued submission's run (slot: 0) held none and is only charged.
 * 1 when something was done, 0 for a stray call. */
static int mem_end(struct rl_limiter *l, const char *tenant, uint64_t cpu_ms, uint64_t now_ms, int slot)
{
    struct mem *m = rl_impl(l);
    struct tenant *t;
    pthread_mutex_t *mu;
    enum lookup_err err;
    size_t len;
    int done = 0;

    if (name_len(tenant, &len) != 0)
        return 0;
    t = lookup(m, tenant, len, 0, &mu, &err);
    /* Unknown tenant, or (slot) nothing in flight: a stray release is ignored whole. */
    if (t != NULL && (!slot || t->in_flight > 0)) {
        if (slot)
            t->in_flight--;
        quota_charge(t, cpu_ms, now_ms);
        done = 1;
    }
    pthread_mutex_unlock(mu);
    return done;
}

int rl_memory_release_held(struct rl_limiter *l, const char *tenant, uint64_t cpu_ms, uint64_t now_ms)
{
    return mem_end(l, tenant, cpu_ms, now_ms, 1);
}

static void mem_release(struct rl_limiter *l, const char *tenant, uint64_t cpu_ms, uint64_t now_ms)
{
    (void)mem_end(l, tenant, cpu_ms, now_ms, 1);
}

static void mem_charge(struct rl_limiter *l, const char *tenant, uint64_t cpu_ms, uint64_t now_ms)
{
    (void)mem_end(l, tenant, cpu_ms, now_ms, 0);
}

static void mem_free(struct mem *m, size_t nstripes)
{
    struct tenant *t, *next;
    size_t i;

    if (m->buckets != NULL) {
        for (i = 0; i <= m->mask; i++) {
            for (t = m->buckets[i]; t != NULL; t = next) {
                next = t->next;
                free(t);
            }
        }
    }
    free(m->buckets);
    for (i = 0; i < nstripes; i++)
        pthread_mutex_destroy(&m->stripes[i].mu);
    free(m);
}

static void mem_destroy(struct rl_limiter *l)
{
    mem_free(rl_impl(l), RL_STRIPES);
}

static const struct rl_ops mem_ops = {
    .admit = mem_admit,
    .admit_rate = mem_admit_rate,
    .admit_queued = mem_admit_queued,
    .release = mem_release,
    .charge = mem_charge,
    .destroy = mem_destroy,
};

struct rl_limiter *rl_memory_new_capped(size_t max_tenants)
{
    struct rl_limiter *l;
    struct mem *m;
    void *mp;
    size_t nb = 64, i;

    if (max_tenants == 0 || max_tenants > RL_MAX_TENANTS_CAP)
        return NULL;
    /* aligned(64) members: plain calloc only guarantees 16 on glibc */
    if (posix_memalign(&mp, 64, sizeof(*m)) != 0)
        return NULL;
    m = mp;
    memset(m, 0, sizeof(*m));
    for (i = 0; i < RL_STRIPES; i++) {
        if (pthread_mutex_init(&m->stripes[i].mu, NULL) != 0) {
            mem_free(m, i);
            return NULL;
        }
    }
    while (nb < max_tenants)
        nb <<= 1;
    m->mask = nb - 1;
    m->max_tenants = max_tenants;
    atomic_init(&m->ntenants, 0);
    if ((m->buckets = calloc(nb, sizeof(*m->buckets))) == NULL) {
        mem_free(m, RL_STRIPES);
        return NULL;
    }
    if ((l = rl_new(&mem_ops, m)) == NULL) {
        mem_free(m, RL_STRIPES);
        return NULL;
    }
    return l;
}

struct rl_limiter *rl_memory_new(void)
{
    return rl_memory_new_capped(RL_DEFAULT_MAX_TENANTS);
}
