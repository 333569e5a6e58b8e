/*
 * test_ratelimit.c - the per-tenant limiter on synthetic time: GCRA burst and
 * steady rate, RateLimit-* values, tenant isolation, concurrency cap, CPU
 * quota window, exactness under threads, stray releases, zero limits, bad
 * arguments, saturation, and a deferred (Redis-like) backend behind the same
 * interface.
 */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "limits/ratelimit.h"

struct capture {
    int calls;
    struct rl_decision d;
};

static void capture_cb(void *arg, const struct rl_decision *d)
{
    struct capture *c = arg;

    c->calls++;
    c->d = *d;
}

/* Admit (execute) and return the decision; the callback must have run once. */
static struct rl_decision admit(struct rl_limiter *l, const char *tenant, const struct rl_params *p, uint64_t now)
{
    struct capture c = {0};

    rl_admit(l, tenant, p, now, capture_cb, &c);
    assert_int_equal(c.calls, 1);
    return c.d;
}

static struct rl_decision admit_rate(struct rl_limiter *l, const char *tenant, const struct rl_params *p, uint64_t now)
{
    struct capture c = {0};

    rl_admit_rate_only(l, tenant, p, now, capture_cb, &c);
    assert_int_equal(c.calls, 1);
    return c.d;
}

static struct rl_params rate_params(double r, uint32_t b)
{
    struct rl_params p = {r, b, RL_UNLIMITED_IN_FLIGHT, RL_UNLIMITED_CPU_MS};

    return p;
}

static void assert_refused(const struct rl_decision *d, enum rl_reason why)
{
    assert_int_equal(d->allowed, 0);
    assert_int_equal(d->reason, why);
}

static void assert_allowed(const struct rl_decision *d)
{
    assert_int_equal(d->allowed, 1);
    assert_int_equal(d->reason, RL_OK);
    assert_int_equal(d->retry_after_ms, 0);
}

/* b at t=0, then the (b+1)th refused with retry = T; headers at each step. */
static void test_burst_then_refused(void **state)
{
    struct rl_limiter *l = rl_memory_new();
    struct rl_params p = rate_params(10.0, 5); /* T = 100 ms */
    struct rl_decision d;
    uint32_t i;

    assert_non_null(l);
    for (i = 0; i < 5; i++) {
        d = admit(l, "acme", &p, 0);
        assert_allowed(&d);
        assert_int_equal(d.limit, 5);
        assert_int_equal(d.remaining, 4 - i);
        assert_int_equal(d.reset_ms, (i + 1) * 100);
    }
    d = admit(l, "acme", &p, 0);
    assert_refused(&d, RL_RATE);
    assert_int_equal(d.retry_after_ms, 100);
    assert_int_equal(d.limit, 5);
    assert_int_equal(d.remaining, 0);
    assert_int_equal(d.reset_ms, 500);

    /* Refusals take nothing: the wait shrinks with time only. */
    d = admit(l, "acme", &p, 99);
    assert_refused(&d, RL_RATE);
    assert_int_equal(d.retry_after_ms, 1);
    assert_int_equal(d.reset_ms, 401);

    d = admit(l, "acme", &p, 100);
    assert_allowed(&d);
    assert_int_equal(d.remaining, 0);
    assert_int_equal(d.reset_ms, 500); /* TAT 600 */

    d = admit(l, "acme", &p, 150);
    assert_refused(&d, RL_RATE);
    assert_int_equal(d.retry_after_ms, 50);

    /* Partly refilled. */
    d = admit(l, "acme", &p, 350);
    assert_allowed(&d);
    assert_int_equal(d.remaining, 1); /* TAT 700: 350 of the 500 ms bucket in use */
    assert_int_equal(d.reset_ms, 350);

    /* Full again long after: as if new. */
    d = admit(l, "acme", &p, 10000);
    assert_allowed(&d);
    assert_int_equal(d.remaining, 4);
    assert_int_equal(d.reset_ms, 100);
    rl_destroy(l);
}

/* Poll every ms over [0, 10 s] inclusive: exactly b + r*10 admitted. */
static unsigned steady(double r, uint32_t b, uint64_t step_ms)
{
    struct rl_limiter *l = rl_memory_new();
    struct rl_params p = rate_params(r, b);
    struct rl_decision d;
    unsigned n = 0;
    uint64_t t;

    assert_non_null(l);
    for (t = 0; t <= 10000; t += step_ms) {
        d = admit_rate(l, "steady", &p, t);
        if (d.allowed)
            n++;
        else
            assert_true(d.retry_after_ms >= 1);
    }
    rl_destroy(l);
    return n;
}

static void test_steady_rate(void **state)
{
    assert_int_equal(steady(10.0, 5, 1), 100 + 5);
    assert_int_equal(steady(10.0, 1, 1), 100 + 1);
    assert_int_equal(steady(3.0, 2, 1), 30 + 2); /* T = 333333333 ns, rounded down */
    assert_int_equal(steady(1000.0, 1, 1), 10000 + 1);
    assert_int_equal(steady(0.5, 1, 1), 5 + 1);
    assert_int_equal(steady(7.0, 4, 1), 70 + 4);
    assert_int_equal(steady(7.0, 4, 4), 70 + 4); /* coarse polling: late arrivals lose no tokens */
    assert_int_equal(steady(1.0, 10, 8), 10 + 10);
}

/* Retry-After is exact: waiting exactly retry_after_ms always passes. */
static void test_retry_after_is_exact(void **state)
{
    struct rl_limiter *l = rl_memory_new();
    struct rl_params p = rate_params(3.0, 2);
    struct rl_decision d;
    uint64_t t = 0;
    int i;

    assert_non_null(l);
    for (i = 0; i < 200; i++) {
        d = admit(l, "x", &p, t);
        if (!d.allowed) {
            assert_true(d.retry_after_ms > 0);
            if (d.retry_after_ms > 1) {
                struct rl_decision e = admit(l, "x", &p, t + d.retry_after_ms - 1);
                assert_refused(&e, RL_RATE);
            }
            t += d.retry_after_ms;
            d = admit(l, "x", &p, t);
            assert_allowed(&d);
        }
    }
    rl_destroy(l);
}

static void test_tenants_isolated(void **state)
{
    struct rl_limiter *l = rl_memory_new();
    struct rl_params p = rate_params(1.0, 3);
    struct rl_decision d;
    int i;

    assert_non_null(l);
    for (i = 0; i < 3; i++) {
        d = admit(l, "tenant-a", &p, 1000);
        assert_allowed(&d);
    }
    d = admit(l, "tenant-a", &p, 1000);
    assert_refused(&d, RL_RATE);
    for (i = 0; i < 3; i++) {
        d = admit(l, "tenant-b", &p, 1000);
        assert_allowed(&d);
        assert_int_equal(d.remaining, 2 - i);
    }
    d = admit(l, "tenant-b", &p, 1000);
    assert_refused(&d, RL_RATE);
    /* prefix and case are different tenants */
    d = admit(l, "tenant-", &p, 1000);
    assert_allowed(&d);
    d = admit(l, "Tenant-a", &p, 1000);
    assert_allowed(&d);
    rl_destroy(l);
}

static void test_concurrency_cap(void **state)
{
    struct rl_limiter *l = rl_memory_new();
    struct rl_params p = {1.0, 4, 2, RL_UNLIMITED_CPU_MS};
    struct rl_decision d;

    assert_non_null(l);
    d = admit(l, "c", &p, 0);
    assert_allowed(&d);
    d = admit(l, "c", &p, 0);
    assert_allowed(&d);
    assert_int_equal(d.remaining, 2);
    d = admit(l, "c", &p, 0);
    assert_refused(&d, RL_CONCURRENCY);
    assert_int_equal(d.retry_after_ms, RL_CONCURRENCY_RETRY_MS);
    assert_int_equal(d.remaining, 2); /* the refusal took no rate token */
    d = admit(l, "c", &p, 10);
    assert_refused(&d, RL_CONCURRENCY);

    /* rate-only requests do not need a slot */
    d = admit_rate(l, "c", &p, 10);
    assert_allowed(&d);
    assert_int_equal(d.remaining, 1);

    rl_release(l, "c", 0, 20);
    d = admit(l, "c", &p, 20);
    assert_allowed(&d);
    assert_int_equal(d.remaining, 0);
    d = admit(l, "c", &p, 20);
    assert_refused(&d, RL_RATE); /* both refuse: rate is reported first */
    rl_destroy(l);
}

/* When several controls refuse: QUOTA over RATE over CONCURRENCY; longest wait. */
static void test_reason_priority(void **state)
{
    struct rl_limiter *l = rl_memory_new();
    struct rl_params p = {1.0, 1, 1, 100};
    struct rl_decision d;

    assert_non_null(l);
    d = admit(l, "p", &p, 0);
    assert_allowed(&d);
    d = admit(l, "p", &p, 0); /* rate (1000 ms) and concurrency (hint 1000 ms) */
    assert_refused(&d, RL_RATE);
    assert_int_equal(d.retry_after_ms, 1000);
    rl_release(l, "p", 150, 500);
    d = admit(l, "p", &p, 500); /* quota (59500 ms) and rate (500 ms) */
    assert_refused(&d, RL_QUOTA);
    assert_int_equal(d.retry_after_ms, 59500);
    rl_destroy(l);
}

static void test_cpu_quota(void **state)
{
    struct rl_limiter *l = rl_memory_new();
    struct rl_params p = {100.0, 100, 10, 1000};
    struct rl_decision d;

    assert_non_null(l);
    d = admit(l, "q", &p, 0);
    assert_allowed(&d);
    rl_release(l, "q", 600, 0);
    d = admit(l, "q", &p, 1000);
    assert_allowed(&d); /* 600 < 1000 */
    rl_release(l, "q", 500, 1000);

    d = admit(l, "q", &p, 2000); /* 1100 >= 1000 */
    assert_refused(&d, RL_QUOTA);
    assert_int_equal(d.retry_after_ms, 58000); /* the 600 ages out at 60 s */
    d = admit(l, "q", &p, 59999);
    assert_refused(&d, RL_QUOTA);
    assert_int_equal(d.retry_after_ms, 1);

    /* rate-only requests ignore the CPU budget */
    d = admit_rate(l, "q", &p, 30000);
    assert_allowed(&d);

    d = admit(l, "q", &p, 60000); /* 500 left in the window */
    assert_allowed(&d);
    rl_release(l, "q", 0, 60000);

    /* exactly at the budget is refused; the wait walks oldest-first */
    d = admit(l, "q", &p, 60500);
    assert_allowed(&d);
    rl_release(l, "q", 500, 60500); /* window: 500 @1 s + 500 @60 s = 1000 */
    d = admit(l, "q", &p, 60600);
    assert_refused(&d, RL_QUOTA);
    assert_int_equal(d.retry_after_ms, 400); /* at 61 s only 500 remain */
    d = admit(l, "q", &p, 61000);
    assert_allowed(&d);
    rl_release(l, "q", 0, 61000);

    /* a single run may overshoot; the wait is then the full window */
    d = admit(l, "q", &p, 200000);
    assert_allowed(&d);
    rl_release(l, "q", 5000, 200250);
    d = admit(l, "q", &p, 200300);
    assert_refused(&d, RL_QUOTA);
    assert_int_equal(d.retry_after_ms, 260000 - 200300);
    d = admit(l, "q", &p, 260000);
    assert_allowed(&d);
    rl_destroy(l);
}

/* ----------------------------------------------------------- threads */

#define NTHREADS 8

struct hammer {
    struct rl_limiter *l;
    const struct rl_params *p;
    const char *tenant;
    int iterations;
    int mode; /* 0: admit and keep; 1: admit, hold, release; 2: many tenants */
    atomic_int *allowed;
    atomic_int *inside;
    atomic_int *max_inside;
    atomic_int *backend_errors;
};

static void *hammer_main(void *arg)
{
    struct hammer *h = arg;
    struct capture c;
    char name[16];
    int i, now, m;

    for (i = 0; i < h->iterations; i++) {
        memset(&c, 0, sizeof(c));
        if (h->mode == 2) {
            snprintf(name, sizeof(name), "t%d", i % 50);
            rl_admit(h->l, name, h->p, 5000, capture_cb, &c);
        } else {
            rl_admit(h->l, h->tenant, h->p, 5000, capture_cb, &c);
        }
        if (c.calls != 1)
            abort();
        if (c.d.reason == RL_BACKEND_ERROR)
            atomic_fetch_add(h->backend_errors, 1);
        if (!c.d.allowed)
            continue;
        atomic_fetch_add(h->allowed, 1);
        if (h->mode == 1) {
            now = atomic_fetch_add(h->inside, 1) + 1;
            m = atomic_load(h->max_inside);
            while (now > m && !atomic_compare_exchange_weak(h->max_inside, &m, now))
                ;
            atomic_fetch_sub(h->inside, 1);
            rl_release(h->l, h->tenant, 0, 5000);
        }
    }
    return NULL;
}

static void run_hammers(struct hammer *tmpl)
{
    pthread_t th[NTHREADS];
    struct hammer h[NTHREADS];
    int i;

    for (i = 0; i < NTHREADS; i++) {
        h[i] = *tmpl;
        assert_int_equal(pthread_create(&th[i], NULL, hammer_main, &h[i]), 0);
    }
    for (i = 0; i < NTHREADS; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
}

/* 8 threads, clock frozen: exactly `burst` admits in total. */
static void test_threads_exact_burst(void **state)
{
    struct rl_limiter *l = rl_memory_new();
    struct rl_params p = rate_params(1.0, 137);
    atomic_int allowed = 0, inside = 0, max_inside = 0, errs = 0;
    struct hammer h = {l, &p, "hot", 5000, 0, &allowed, &inside, &max_inside, &errs};

    assert_non_null(l);
    run_hammers(&h);
    assert_int_equal(atomic_load(&allowed), 137);
    assert_int_equal(atomic_load(&errs), 0);
    rl_destroy(l);
}

/* 8 threads admit/release against max_in_flight 3: never more than 3 inside, none leaked. */
static void test_threads_concurrency(void **state)
{
    struct rl_limiter *l = rl_memory_new();
    struct rl_params p = {INFINITY, UINT32_MAX, 3, RL_UNLIMITED_CPU_MS}; /* rate no object */
    atomic_int allowed = 0, inside = 0, max_inside = 0, errs = 0;
    struct hammer h = {l, &p, "conc", 20000, 1, &allowed, &inside, &max_inside, &errs};
    struct rl_decision d;
    int i;

    assert_non_null(l);
    run_hammers(&h);
    assert_true(atomic_load(&max_inside) <= 3);
    assert_true(atomic_load(&allowed) > 0);
    for (i = 0; i < 3; i++) {
        d = admit(l, "conc", &p, 5000);
        assert_allowed(&d);
    }
    d = admit(l, "conc", &p, 5000);
    assert_refused(&d, RL_CONCURRENCY);
    rl_destroy(l);
}

/* The tenant cap holds under concurrent creation. */
static void test_threads_tenant_cap(void **state)
{
    struct rl_limiter *l = rl_memory_new_capped(10);
    struct rl_params p = rate_params(1e6, 1000000);
    atomic_int allowed = 0, inside = 0, max_inside = 0, errs = 0;
    struct hammer h = {l, &p, NULL, 500, 2, &allowed, &inside, &max_inside, &errs};
    struct rl_decision d;
    char name[16];
    int i, created = 0;

    assert_non_null(l);
    run_hammers(&h);
    assert_true(atomic_load(&errs) > 0);
    for (i = 0; i < 50; i++) {
        snprintf(name, sizeof(name), "t%d", i);
        d = admit(l, name, &p, 5000);
        if (d.allowed)
            created++;
        else
            assert_refused(&d, RL_BACKEND_ERROR);
    }
    assert_int_equal(created, 10);
    rl_destroy(l);
}

/* ------------------------------------------------------------ edges */

static void test_stray_release(void **state)
{
    struct rl_limiter *l = rl_memory_new_capped(1);
    struct rl_params p = {1.0, 10, 2, 1000};
    struct rl_decision d;

    assert_non_null(l);
    rl_release(l, "ghost", 5000, 0); /* unknown: ignored, creates nothing */
    rl_release(l, NULL, 5000, 0);
    rl_release(l, "", 5000, 0);
    d = admit(l, "real", &p, 0); /* the single table entry is still free */
    assert_allowed(&d);
    rl_release(l, "real", 0, 0);
    rl_release(l, "real", 999999, 0); /* nothing in flight: no underflow, no charge */
    rl_release(l, "real", 999999, 0);
    d = admit(l, "real", &p, 0);
    assert_allowed(&d);
    d = admit(l, "real", &p, 0);
    assert_allowed(&d);
    d = admit(l, "real", &p, 0);
    assert_refused(&d, RL_CONCURRENCY);
    d = admit(l, "ghost", &p, 0);
    assert_refused(&d, RL_BACKEND_ERROR); /* table full (cap 1) */
    rl_destroy(l);
}

/* Zero limits refuse everything, for good (documented: 0 is never "unlimited"). */
static void test_zero_limits(void **state)
{
    struct rl_limiter *l = rl_memory_new();
    struct rl_params bad[] = {
        {0.0, 5, 10, 1000},
        {-1.0, 5, 10, 1000},
        {NAN, 5, 10, 1000},
        {10.0, 0, 10, 1000},
    };
    struct rl_params noconc = {10.0, 5, 0, 1000}, nocpu = {10.0, 5, 10, 0};
    struct rl_decision d;
    uint64_t t;
    size_t i;

    assert_non_null(l);
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        for (t = 0; t <= 100000; t += 25000) {
            d = admit(l, "z", &bad[i], t);
            assert_refused(&d, RL_RATE);
            assert_true(d.retry_after_ms == RL_RETRY_NEVER);
            assert_int_equal(d.remaining, 0);
            assert_int_equal(d.limit, bad[i].burst);
            d = admit_rate(l, "z", &bad[i], t);
            assert_refused(&d, RL_RATE);
        }
    }
    d = admit(l, "z0", &noconc, 0);
    assert_refused(&d, RL_CONCURRENCY);
    assert_true(d.retry_after_ms == RL_RETRY_NEVER);
    d = admit_rate(l, "z0", &noconc, 0); /* rate-only needs no slot */
    assert_allowed(&d);
    d = admit(l, "z1", &nocpu, 0);
    assert_refused(&d, RL_QUOTA);
    assert_true(d.retry_after_ms == RL_RETRY_NEVER);
    rl_destroy(l);
}

static void test_bad_arguments(void **state)
{
    struct rl_limiter *l = rl_memory_new();
    struct rl_params p = rate_params(1.0, 2);
    char name[RL_MAX_TENANT_NAME + 2];
    struct rl_decision d;
    struct capture c = {0};

    assert_non_null(l);
    assert_null(rl_memory_new_capped(0));
    d = admit(l, NULL, &p, 0);
    assert_refused(&d, RL_BACKEND_ERROR);
    d = admit(l, "", &p, 0);
    assert_refused(&d, RL_BACKEND_ERROR);
    rl_admit(l, "x", NULL, 0, capture_cb, &c);
    assert_int_equal(c.calls, 1);
    assert_refused(&c.d, RL_BACKEND_ERROR);
    rl_admit(l, "x", &p, 0, NULL, NULL); /* no callback: nothing taken */
    memset(name, 'n', sizeof(name));
    name[RL_MAX_TENANT_NAME + 1] = '\0';
    d = admit(l, name, &p, 0); /* 65 bytes */
    assert_refused(&d, RL_BACKEND_ERROR);
    name[RL_MAX_TENANT_NAME] = '\0';
    d = admit(l, name, &p, 0); /* 64 bytes */
    assert_allowed(&d);
    d = admit(l, "x", &p, 0);
    assert_allowed(&d);
    assert_int_equal(d.remaining, 1); /* the NULL-callback admit took nothing */
    rl_destroy(l);
    rl_destroy(NULL);
}

/* Extremes saturate instead of wrapping (UBSan watches this test). */
static void test_saturation(void **state)
{
    struct rl_limiter *l = rl_memory_new();
    struct rl_params tiny = rate_params(1e-30, UINT32_MAX), huge = rate_params(INFINITY, UINT32_MAX);
    struct rl_params fast = rate_params(1e12, 3), cpu = {1.0, 1, 1, 10};
    struct rl_decision d;
    int i;

    assert_non_null(l);
    d = admit(l, "tiny", &tiny, UINT64_MAX);
    assert_allowed(&d);
    assert_true(d.remaining <= UINT32_MAX);
    d = admit(l, "tiny", &tiny, UINT64_MAX);
    assert_allowed(&d);
    for (i = 0; i < 1000; i++) {
        d = admit(l, "huge", &huge, 0);
        assert_allowed(&d);
    }
    for (i = 0; i < 3; i++) {
        d = admit(l, "fast", &fast, 0);
        assert_allowed(&d);
    }
    d = admit(l, "fast", &fast, 0); /* T clamps to 1 ns: wait rounds up to 1 ms */
    assert_refused(&d, RL_RATE);
    assert_int_equal(d.retry_after_ms, 1);
    d = admit(l, "cpu", &cpu, UINT64_MAX - 5);
    assert_allowed(&d);
    rl_release(l, "cpu", UINT64_MAX, UINT64_MAX - 5);
    d = admit(l, "cpu", &cpu, UINT64_MAX - 4);
    assert_refused(&d, RL_QUOTA);
    rl_destroy(l);
}

/* Clocks read on different threads may reach the lock out of order. */
static void test_time_backwards(void **state)
{
    struct rl_limiter *l = rl_memory_new();
    struct rl_params p = {10.0, 3, 5, 100};
    struct rl_decision d;

    assert_non_null(l);
    d = admit(l, "b", &p, 100000);
    assert_allowed(&d);
    d = admit(l, "b", &p, 99990);
    assert_allowed(&d);
    assert_int_equal(d.remaining, 0);
    d = admit(l, "b", &p, 99980);
    assert_refused(&d, RL_RATE);
    assert_int_equal(d.retry_after_ms, 20);
    rl_release(l, "b", 60, 100999);
    rl_release(l, "b", 60, 100500); /* same second bucket, earlier clock */
    d = admit(l, "b", &p, 100400);
    assert_refused(&d, RL_QUOTA);
    assert_int_equal(d.retry_after_ms, 160000 - 100400);
    rl_destroy(l);
}

/* rl_charge: a queued submission's run held no slot; its CPU still counts,
 * and the slots of the runs that hold one are untouched. */
static void test_charge_without_slot(void **state)
{
    struct rl_limiter *l = rl_memory_new();
    struct rl_params p = {100.0, 100, 1, 1000};
    struct rl_decision d;

    assert_non_null(l);
    rl_charge(l, "never-seen", 5000, 0); /* ignored */
    d = admit(l, "c", &p, 0);
    assert_allowed(&d); /* the one slot, held */
    rl_charge(l, "c", 1200, 0);
    d = admit(l, "c", &p, 100);
    assert_refused(&d, RL_QUOTA); /* over budget, and the slot still held */
    rl_release(l, "c", 0, 200);
    d = admit(l, "c", &p, 300);
    assert_refused(&d, RL_QUOTA); /* the slot is back; the charge stays */
    assert_int_equal(d.retry_after_ms, 60000 - 300);
    d = admit(l, "c", &p, 60000);
    assert_allowed(&d);
    rl_destroy(l);
}

/* RL_ADMIT_QUEUED: the rate and the CPU budget apply, the in-flight cap
 * does not, and nothing is taken from it. */
static void test_queued_admission(void **state)
{
    struct rl_limiter *l = rl_memory_new();
    struct rl_params p = {1000.0, 3, 1, 1000};
    struct rl_decision d;
    struct capture c = {0};

    assert_non_null(l);
    d = admit(l, "q", &p, 0);
    assert_allowed(&d); /* the one slot, held */
    assert_null(rl_admit_on(l, NULL, RL_ADMIT_QUEUED, "q", &p, 0, capture_cb, &c));
    assert_allowed(&c.d); /* past the in-flight cap: still allowed */
    d = admit(l, "q", &p, 0);
    assert_refused(&d, RL_CONCURRENCY); /* and it took no slot: still one held */
    rl_release(l, "q", 0, 0);
    assert_null(rl_admit_on(l, NULL, RL_ADMIT_QUEUED, "q", &p, 0, capture_cb, &c));
    assert_allowed(&c.d); /* the burst's third */
    assert_null(rl_admit_on(l, NULL, RL_ADMIT_QUEUED, "q", &p, 0, capture_cb, &c));
    assert_refused(&c.d, RL_RATE); /* the burst of 3 is used: the rate counts */
    rl_charge(l, "q", 1000, 10);
    assert_null(rl_admit_on(l, NULL, RL_ADMIT_QUEUED, "q", &p, 5000, capture_cb, &c));
    assert_refused(&c.d, RL_QUOTA); /* the CPU budget counts */
    rl_destroy(l);
}

/* ------------------------------------------- a deferred backend (Redis shape) */

struct deferred {
    rl_cb cb;
    void *arg;
    int pending, released, destroyed;
    uint64_t charged;
};

static void def_admit(struct rl_limiter *l, struct st_h2o_evloop_t *loop, const char *tenant, const struct rl_params *p,
                      uint64_t now_ms, rl_cb cb, void *arg)
{
    struct deferred *d = rl_impl(l);

    d->cb = cb;
    d->arg = arg;
    d->pending = 1;
}

static void def_release(struct rl_limiter *l, const char *tenant, uint64_t cpu_ms, uint64_t now_ms)
{
    struct deferred *d = rl_impl(l);

    d->released++;
}

static void def_destroy(struct rl_limiter *l)
{
    struct deferred *d = rl_impl(l);

    d->destroyed = 1;
}

static void def_charge(struct rl_limiter *l, const char *tenant, uint64_t cpu_ms, uint64_t now_ms)
{
    struct deferred *d = rl_impl(l);

    d->charged += cpu_ms;
}

static const struct rl_ops def_ops = {def_admit, def_admit, def_admit, def_release, def_charge, def_destroy, 1, NULL};

static void test_deferred_backend(void **state)
{
    struct deferred impl = {0};
    struct rl_limiter *l = rl_new(&def_ops, &impl);
    struct rl_params p = rate_params(1.0, 1);
    struct rl_decision err = {0, RL_BACKEND_ERROR, 0, 1, 0, 0};
    struct capture c = {0};
    static const struct rl_ops incomplete = {def_admit, NULL, def_admit, def_release, def_charge, def_destroy, 1, NULL};

    assert_non_null(l);
    assert_null(rl_new(&incomplete, &impl));
    assert_null(rl_new(NULL, &impl));
    rl_admit(l, "t", &p, 0, capture_cb, &c);
    assert_int_equal(c.calls, 0); /* the answer comes later, from the loop */
    assert_int_equal(impl.pending, 1);
    impl.cb(impl.arg, &err);
    assert_int_equal(c.calls, 1);
    assert_refused(&c.d, RL_BACKEND_ERROR);
    rl_release(l, "t", 5, 0);
    assert_int_equal(impl.released, 1);
    rl_charge(l, "t", 7, 0);
    assert_int_equal(impl.charged, 7);
    assert_int_equal(impl.released, 1);
    rl_destroy(l);
    assert_int_equal(impl.destroyed, 1);
}

/* A caller that goes away while the answer is pending (the client
 * disconnected): its callback never runs, and an allowed answer that comes
 * afterwards gives the in-flight slot back by itself. */
static void test_deferred_cancel(void **state)
{
    struct deferred impl = {0};
    struct rl_limiter *l = rl_new(&def_ops, &impl);
    struct rl_params p = rate_params(1.0, 1);
    struct rl_decision ok = {1, RL_OK, 0, 1, 0, 0};
    struct capture c = {0};
    struct rl_pending *h;

    assert_non_null(l);
    h = rl_admit_on(l, NULL, RL_ADMIT_EXECUTION, "t", &p, 0, capture_cb, &c);
    assert_non_null(h); /* pending: a handle to cancel */
    rl_cancel(h);
    impl.cb(impl.arg, &ok); /* the store answers: allowed */
    assert_int_equal(c.calls, 0);
    assert_int_equal(impl.released, 1); /* the slot went back */
    /* rate-only and queued admissions hold no slot: nothing to give back */
    for (int kind = RL_ADMIT_RATE; kind <= RL_ADMIT_QUEUED; kind += RL_ADMIT_QUEUED - RL_ADMIT_RATE) {
        h = rl_admit_on(l, NULL, (enum rl_admission)kind, "t", &p, 0, capture_cb, &c);
        assert_non_null(h);
        rl_cancel(h);
        impl.cb(impl.arg, &ok);
        assert_int_equal(c.calls, 0);
        assert_int_equal(impl.released, 1);
    }
    /* not cancelled: answered once, no release */
    h = rl_admit_on(l, NULL, RL_ADMIT_EXECUTION, "t", &p, 0, capture_cb, &c);
    assert_non_null(h);
    impl.cb(impl.arg, &ok);
    assert_int_equal(c.calls, 1);
    assert_int_equal(impl.released, 1);
    rl_destroy(l);
}

static void test_memory_answers_at_once(void **state)
{
    struct rl_limiter *l = rl_memory_new();
    struct rl_params p = rate_params(1.0, 1);
    struct capture c = {0};

    assert_null(rl_admit_on(l, NULL, RL_ADMIT_EXECUTION, "m", &p, 0, capture_cb, &c)); /* no handle, nothing allocated */
    assert_int_equal(c.calls, 1);
    rl_destroy(l);
}

static void test_misc(void **state)
{
    uint64_t a = rl_monotonic_ms(), b = rl_monotonic_ms();

    assert_true(a > 0);
    assert_true(b >= a);
    assert_string_equal(rl_reason_str(RL_OK), "ok");
    assert_non_null(strstr(rl_reason_str(RL_QUOTA), "CPU"));
    assert_string_equal(rl_reason_str((enum rl_reason)99), "unknown");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_burst_then_refused),
        cmocka_unit_test(test_deferred_cancel),
        cmocka_unit_test(test_memory_answers_at_once),
        cmocka_unit_test(test_steady_rate),
        cmocka_unit_test(test_retry_after_is_exact),
        cmocka_unit_test(test_tenants_isolated),
        cmocka_unit_test(test_concurrency_cap),
        cmocka_unit_test(test_reason_priority),
        cmocka_unit_test(test_cpu_quota),
        cmocka_unit_test(test_charge_without_slot),
        cmocka_unit_test(test_queued_admission),
        cmocka_unit_test(test_threads_exact_burst),
        cmocka_unit_test(test_threads_concurrency),
        cmocka_unit_test(test_threads_tenant_cap),
        cmocka_unit_test(test_stray_release),
        cmocka_unit_test(test_zero_limits),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_saturation),
        cmocka_unit_test(test_time_backwards),
        cmocka_unit_test(test_deferred_backend),
        cmocka_unit_test(test_misc),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
