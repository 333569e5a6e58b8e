/*
 * test_ratelimit_redis.c - the Redis limiter (ratelimit_redis.c) and its h2o
 * evloop adapter (redis_h2o.c) against a real redis-server, started here on
 * a Unix socket in a temporary directory (skipped when redis-server is not
 * installed).  One h2o loop stands for a worker; the tests run it until the
 * answers come.
 *
 * What is checked: the script's GCRA, in-flight and CPU budget answers
 * (the in-memory backend's semantics and RateLimit values), a release
 * giving a slot back, EVAL after NOSCRIPT (SCRIPT FLUSH), rl_cancel of an
 * answer still in Redis (its slot goes back, its callback never runs), a
 * command timeout (redis-server stopped: RL_BACKEND_ERROR within the
 * timeout, with a Retry-After, then recovery), a Redis that is not there
 * (fail closed at once; local mode at limit / gateways), and two
 * connections (two loops) sharing one tenant.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include <h2o.h>
#include <hiredis/hiredis.h>

#include "limits/ratelimit_redis.h"

#define TIMEOUT_MS 300
#define WAIT_MS    60000 /* readiness only: how long a test waits for an answer at most */

static char dir[256], sock_path[300];
static pid_t redis_pid = -1;

/* ------------------------------------------------------------ redis-server */

static const char *redis_server(void)
{
    return access("/usr/bin/redis-server", X_OK) == 0 ? "/usr/bin/redis-server" : NULL;
}

static int redis_ping(void)
{
    redisContext *c = redisConnectUnix(sock_path);
    redisReply *r;
    int ok = 0;

    if (c != NULL && !c->err && (r = redisCommand(c, "PING")) != NULL) {
        ok = r->type == REDIS_REPLY_STATUS;
        freeReplyObject(r);
    }
    if (c != NULL)
        redisFree(c);
    return ok;
}

static void redis_do(const char *cmd)
{
    redisContext *c = redisConnectUnix(sock_path);
    redisReply *r;

    assert_true(c != NULL && !c->err);
    assert_non_null(r = redisCommand(c, cmd));
    assert_int_not_equal(r->type, REDIS_REPLY_ERROR);
    freeReplyObject(r);
    redisFree(c);
}

static int start_redis(void **state)
{
    const char *server = redis_server();
    const char *tmp = getenv("TMPDIR");

    (void)state;
    if (server == NULL)
        return 0;
    snprintf(dir, sizeof(dir), "%s/moat-redis-XXXXXX", tmp != NULL ? tmp : "/tmp");
    if (mkdtemp(dir) == NULL)
        return -1;
    snprintf(sock_path, sizeof(sock_path), "%s/redis.sock", dir);
    if ((redis_pid = fork()) == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        execl(server, server, "--port", "0", "--unixsocket", sock_path, "--save", "", "--appendonly", "no", "--dir", dir,
              (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < WAIT_MS / 10 && !redis_ping(); i++)
        usleep(10000);
    return redis_ping() ? 0 : -1;
}

static int stop_redis(void **state)
{
    (void)state;
    if (redis_pid > 0) {
        kill(redis_pid, SIGKILL);
        waitpid(redis_pid, NULL, 0);
        unlink(sock_path);
        rmdir(dir);
    }
    return 0;
}

/* ------------------------------------------------------------ the loop */

struct answer {
    int calls;
    struct rl_decision d;
};

static void on_answer(void *arg, const struct rl_decision *d)
{
    struct answer *a = arg;

    a->calls++;
    a->d = *d;
}

static uint64_t now_ms(void)
{
    return rl_monotonic_ms();
}

/* Turn loop until *calls is non-zero (or WAIT_MS). */
static void run_until(h2o_loop_t *loop, const int *calls)
{
    uint64_t end = now_ms() + WAIT_MS;

    while (*calls == 0 && now_ms() < end)
        h2o_evloop_run(loop, 10);
    assert_int_not_equal(*calls, 0);
}

/* Turn loop for ms. */
static void run_for(h2o_loop_t *loop, uint64_t ms)
{
    uint64_t end = now_ms() + ms;

    while (now_ms() < end)
        h2o_evloop_run(loop, 10);
}

/* The limiter goes (its connections close through h2o), then the loop. */
static void finish(struct rl_limiter *l, h2o_loop_t *loop)
{
    rl_destroy(l);
    h2o_evloop_run(loop, 0); /* h2o frees closed sockets on a turn of the loop */
    h2o_evloop_destroy(loop);
}

static struct rl_decision decide(struct rl_limiter *l, h2o_loop_t *loop, enum rl_admission kind, const char *tenant,
                                 const struct rl_params *p)
{
    struct answer a = {0};

    (void)rl_admit_on(l, loop, kind, tenant, p, now_ms(), on_answer, &a);
    run_until(loop, &a.calls);
    assert_int_equal(a.calls, 1);
    return a.d;
}

static struct rl_limiter *limiter(const char *path, enum rl_redis_unavailable mode)
{
    struct rl_redis_options o = {
        {path, NULL, 0, NULL, 0, "moat-unit:", 1000, TIMEOUT_MS, 3000, "decisions", NULL, 0, NULL, NULL}, mode, 2};
    char err[128];
    struct rl_limiter *l = rl_redis_new(&o, err, sizeof(err));

    assert_non_null(l);
    return l;
}

#define NEED_REDIS()                                                                                                               \
    do {                                                                                                                           \
        if (redis_pid <= 0)                                                                                                        \
            skip();                                                                                                                \
        redis_do("FLUSHALL");                                                                                                      \
    } while (0)

/* ------------------------------------------------------------ tests */

static void test_rate_burst_then_refused(void **state)
{
    struct rl_params p = {1.0, 3, RL_UNLIMITED_IN_FLIGHT, RL_UNLIMITED_CPU_MS};
    h2o_loop_t *loop = h2o_evloop_create();
    struct rl_limiter *l;
    struct rl_decision d;

    (void)state;
    NEED_REDIS();
    l = limiter(sock_path, RL_REDIS_FAIL_CLOSED);
    for (uint32_t i = 0; i < 3; i++) {
        d = decide(l, loop, 0, "alpha", &p);
        assert_true(d.allowed);
        assert_int_equal(d.limit, 3);
        assert_int_equal(d.remaining, 2 - i); /* as in memory: what the rate passes now, after this */
        assert_in_range(d.reset_ms, 1, 3000);
    }
    d = decide(l, loop, 0, "alpha", &p);
    assert_false(d.allowed);
    assert_int_equal(d.reason, RL_RATE);
    assert_in_range(d.retry_after_ms, 1, 1000);
    assert_int_equal(d.remaining, 0);
    /* another tenant has its own bucket; a name with any bytes is a safe key */
    assert_true(decide(l, loop, 0, "beta gamma:{x}*", &p).allowed);
    /* zero rate: refused for ever */
    p.rate_per_second = 0;
    d = decide(l, loop, 0, "zero", &p);
    assert_int_equal(d.reason, RL_RATE);
    assert_int_equal(d.retry_after_ms, RL_RETRY_NEVER);
    finish(l, loop);
}

static void test_in_flight_release_and_quota(void **state)
{
    struct rl_params p = {1000.0, 1000, 2, 1000};
    h2o_loop_t *loop = h2o_evloop_create();
    struct rl_limiter *l;
    struct rl_decision d;

    (void)state;
    NEED_REDIS();
    l = limiter(sock_path, RL_REDIS_FAIL_CLOSED);
    assert_true(decide(l, loop, 1, "t", &p).allowed);
    assert_true(decide(l, loop, 1, "t", &p).allowed);
    d = decide(l, loop, 1, "t", &p);
    assert_int_equal(d.reason, RL_CONCURRENCY);
    assert_int_equal(d.retry_after_ms, RL_CONCURRENCY_RETRY_MS);
    /* rate-only decisions take no slot */
    assert_true(decide(l, loop, 0, "t", &p).allowed);
    /* a release gives one back and charges its CPU: over the budget, the quota refuses first */
    rl_release(l, "t", 1500, now_ms());
    d = decide(l, loop, 1, "t", &p);
    assert_false(d.allowed);
    assert_int_equal(d.reason, RL_QUOTA);
    assert_in_range(d.retry_after_ms, 59000, 60000);
    finish(l, loop);
}

/* rl_charge (a queued run that held no slot): the budget, not the count;
 * and the admission of a queued submission. */
static void test_charge_takes_no_slot(void **state)
{
    struct rl_params p = {1000.0, 1000, 1, 1000};
    h2o_loop_t *loop = h2o_evloop_create();
    struct rl_limiter *l;

    (void)state;
    NEED_REDIS();
    l = limiter(sock_path, RL_REDIS_FAIL_CLOSED);
    assert_true(decide(l, loop, 1, "t", &p).allowed); /* the one slot, held */
    rl_charge(l, "t", 400, now_ms());
    assert_int_equal(decide(l, loop, 1, "t", &p).reason, RL_CONCURRENCY); /* still held */
    rl_charge(l, "t", 700, now_ms());
    assert_int_equal(decide(l, loop, 1, "t", &p).reason, RL_QUOTA); /* 1100 ms of 1000 */
    /* RL_ADMIT_QUEUED (a queued submission's POST): the rate and the budget,
     * never the in-flight cap, and no slot taken */
    assert_true(decide(l, loop, RL_ADMIT_EXECUTION, "q", &p).allowed);                     /* q's one slot, held */
    assert_true(decide(l, loop, RL_ADMIT_QUEUED, "q", &p).allowed);                        /* past the cap: allowed */
    assert_int_equal(decide(l, loop, RL_ADMIT_EXECUTION, "q", &p).reason, RL_CONCURRENCY); /* it took none */
    assert_int_equal(decide(l, loop, RL_ADMIT_QUEUED, "t", &p).reason, RL_QUOTA);          /* t's budget counts */
    p.rate_per_second = 0;
    assert_int_equal(decide(l, loop, RL_ADMIT_QUEUED, "u", &p).reason, RL_RATE); /* and the rate */
    finish(l, loop);
}

static void test_two_loops_share_a_tenant(void **state)
{
    struct rl_params p = {0.001, 4, 1, RL_UNLIMITED_CPU_MS};
    h2o_loop_t *a = h2o_evloop_create(), *b = h2o_evloop_create();
    struct rl_limiter *l;
    int allowed = 0;

    (void)state;
    NEED_REDIS();
    l = limiter(sock_path, RL_REDIS_FAIL_CLOSED);
    /* two connections (one per loop), one bucket: 4 of 8 */
    for (int i = 0; i < 8; i++)
        allowed += decide(l, i % 2 ? a : b, 0, "shared", &p).allowed;
    assert_int_equal(allowed, 4);
    rl_destroy(l);
    h2o_evloop_run(a, 0);
    h2o_evloop_run(b, 0);
    h2o_evloop_destroy(a);
    h2o_evloop_destroy(b);
}

static void test_noscript_falls_back_to_eval(void **state)
{
    struct rl_params p = {1000.0, 1000, RL_UNLIMITED_IN_FLIGHT, RL_UNLIMITED_CPU_MS};
    h2o_loop_t *loop = h2o_evloop_create();
    struct rl_limiter *l;

    (void)state;
    NEED_REDIS();
    l = limiter(sock_path, RL_REDIS_FAIL_CLOSED);
    assert_true(decide(l, loop, 0, "t", &p).allowed);
    redis_do("SCRIPT FLUSH");
    assert_true(decide(l, loop, 0, "t", &p).allowed);
    assert_true(decide(l, loop, 0, "t", &p).allowed); /* and EVAL loaded it again */
    finish(l, loop);
}

static void test_cancelled_admit_gives_its_slot_back(void **state)
{
    struct rl_params p = {1000.0, 1000, 1, RL_UNLIMITED_CPU_MS};
    h2o_loop_t *loop = h2o_evloop_create();
    struct answer gone = {0};
    struct rl_pending *pending;
    struct rl_limiter *l;

    (void)state;
    NEED_REDIS();
    l = limiter(sock_path, RL_REDIS_FAIL_CLOSED);
    pending = rl_admit_on(l, loop, 1, "t", &p, now_ms(), on_answer, &gone);
    assert_non_null(pending); /* Redis answers later */
    rl_cancel(pending);
    /* answers come in order: once this one is in, the cancelled one has been
     * answered (allowed, for nobody) and its release sent */
    assert_true(decide(l, loop, 0, "t", &p).allowed);
    /* so the one slot is free again */
    assert_true(decide(l, loop, 1, "t", &p).allowed);
    assert_int_equal(gone.calls, 0);
    finish(l, loop);
}

static void test_timeout_fails_closed_then_recovers(void **state)
{
    struct rl_params p = {1000.0, 1000, RL_UNLIMITED_IN_FLIGHT, RL_UNLIMITED_CPU_MS};
    h2o_loop_t *loop = h2o_evloop_create();
    struct rl_limiter *l;
    struct rl_decision d;
    uint64_t t0;

    (void)state;
    NEED_REDIS();
    l = limiter(sock_path, RL_REDIS_FAIL_CLOSED);
    assert_true(decide(l, loop, 0, "t", &p).allowed);
    kill(redis_pid, SIGSTOP);
    t0 = now_ms();
    d = decide(l, loop, 0, "t", &p);
    kill(redis_pid, SIGCONT);
    assert_int_equal(d.reason, RL_BACKEND_ERROR);
    /* the timeout, not much sooner (h2o's timers count from the loop's last wake-up) */
    assert_true(now_ms() - t0 >= TIMEOUT_MS / 2);
    assert_in_range(d.retry_after_ms, 1000, 60000);
    /* right after, the connection is down: answered at once */
    d = decide(l, loop, 0, "t", &p);
    assert_int_equal(d.reason, RL_BACKEND_ERROR);
    /* then it reconnects by itself */
    for (t0 = now_ms(); now_ms() - t0 < WAIT_MS && !decide(l, loop, 0, "t", &p).allowed;)
        run_for(loop, 50);
    assert_true(decide(l, loop, 0, "t", &p).allowed);
    finish(l, loop);
}

static void test_absent_redis_fail_closed_or_local(void **state)
{
    struct rl_params p = {0.001, 10, 4, RL_UNLIMITED_CPU_MS};
    h2o_loop_t *loop = h2o_evloop_create();
    struct rl_limiter *l;
    struct rl_decision d;
    char nowhere[320];
    int allowed = 0;

    (void)state;
    snprintf(nowhere, sizeof(nowhere), "%s/nowhere.sock", redis_pid > 0 ? dir : "/nonexistent");
    l = limiter(nowhere, RL_REDIS_FAIL_CLOSED);
    d = decide(l, loop, 1, "t", &p);
    assert_int_equal(d.reason, RL_BACKEND_ERROR);
    assert_true(d.retry_after_ms >= 1000 && d.retry_after_ms != RL_RETRY_NEVER);
    assert_int_equal(d.limit, 10);
    rl_destroy(l);

    /* local: limit / gateways (2) - a burst of 5, 2 in flight, released locally */
    l = limiter(nowhere, RL_REDIS_LOCAL);
    for (int i = 0; i < 10; i++)
        allowed += decide(l, loop, 0, "t", &p).allowed;
    assert_int_equal(allowed, 5);
    p.rate_per_second = 1000;
    p.burst = 1000;
    assert_true(decide(l, loop, 1, "u", &p).allowed);
    assert_true(decide(l, loop, 1, "u", &p).allowed);
    assert_int_equal(decide(l, loop, 1, "u", &p).reason, RL_CONCURRENCY);
    rl_release(l, "u", 0, now_ms());
    assert_true(decide(l, loop, 1, "u", &p).allowed);
    finish(l, loop);
}

/*
 * The same steps through the in-memory limiter and the Redis one give the
 * same answers (allowed, reason, whether a wait is "never", remaining).
 * Rates are slow enough that the few milliseconds between the two runs
 * change nothing.
 */
static void test_same_answers_as_memory(void **state)
{
    static const struct step {
        const char *tenant;
        int execution;      /* 1: admit, 0: rate only, -1: release */
        struct rl_params p; /* rate, burst, in flight, cpu ms */
    } steps[] = {
        {"a", 1, {0.001, 2, 1, 60000}},  /* allowed */
        {"a", 1, {0.001, 2, 1, 60000}},  /* in flight */
        {"a", 0, {0.001, 2, 1, 60000}},  /* the last token */
        {"a", 1, {0.001, 2, 1, 60000}},  /* rate and in flight: the rate is the reason */
        {"a", -1, {0.001, 2, 1, 60000}}, /* release */
        {"a", 1, {0.001, 2, 1, 60000}},  /* rate */
        {"b", 1, {0.001, 2, 0, 60000}},  /* in flight 0: never */
        {"b", 0, {0.001, 1, 0, 60000}},  /* the one token */
        {"b", 1, {0.001, 1, 0, 60000}},  /* in flight 0 and the rate refuses: rate, never */
        {"c", 1, {0.001, 2, 4, 0}},      /* budget 0: quota, never */
        {"d", 1, {0.001, 0, 4, 60000}},  /* burst 0: rate, never */
        {"e", 0, {0.0, 5, 4, 60000}},    /* rate 0: rate, never */
        {"f", 1, {1e9, 3, RL_UNLIMITED_IN_FLIGHT, RL_UNLIMITED_CPU_MS}},
    };
    struct rl_limiter *mem = rl_memory_new(), *l;
    h2o_loop_t *loop = h2o_evloop_create();
    struct rl_decision m, r;
    struct answer a;

    (void)state;
    NEED_REDIS();
    l = limiter(sock_path, RL_REDIS_FAIL_CLOSED);
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        const struct step *st = &steps[i];
        if (st->execution < 0) {
            rl_release(mem, st->tenant, 0, now_ms());
            rl_release(l, st->tenant, 0, now_ms());
            continue;
        }
        memset(&a, 0, sizeof(a));
        (void)rl_admit_on(mem, NULL, st->execution, st->tenant, &st->p, now_ms(), on_answer, &a);
        assert_int_equal(a.calls, 1);
        m = a.d;
        r = decide(l, loop, st->execution, st->tenant, &st->p);
        if (r.allowed != m.allowed || r.reason != m.reason || r.remaining != m.remaining)
            printf("step %zu: memory %d/%d/%llu/%u, redis %d/%d/%llu/%u\n", i, m.allowed, m.reason,
                   (unsigned long long)m.retry_after_ms, m.remaining, r.allowed, r.reason, (unsigned long long)r.retry_after_ms,
                   r.remaining);
        assert_int_equal(r.allowed, m.allowed);
        assert_int_equal(r.reason, m.reason);
        assert_int_equal(r.retry_after_ms == RL_RETRY_NEVER, m.retry_after_ms == RL_RETRY_NEVER);
        assert_int_equal(r.retry_after_ms == 0, m.retry_after_ms == 0);
        assert_int_equal(r.remaining, m.remaining);
        assert_int_equal(r.limit, m.limit);
    }
    rl_destroy(mem);
    finish(l, loop);
}

static void test_bad_options(void **state)
{
    struct rl_redis_options o = {
        {NULL, NULL, 0, NULL, 0, "p:", 1000, 100, 3000, "decisions", NULL, 0, NULL, NULL}, RL_REDIS_FAIL_CLOSED, 1};
    char err[128];

    (void)state;
    assert_null(rl_redis_new(&o, err, sizeof(err))); /* neither socket nor host */
    assert_non_null(strstr(err, "either"));
    o.redis.socket_path = "/x";
    o.gateways = 0;
    assert_null(rl_redis_new(&o, err, sizeof(err)));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rate_burst_then_refused),
        cmocka_unit_test(test_in_flight_release_and_quota),
        cmocka_unit_test(test_charge_takes_no_slot),
        cmocka_unit_test(test_two_loops_share_a_tenant),
        cmocka_unit_test(test_noscript_falls_back_to_eval),
        cmocka_unit_test(test_cancelled_admit_gives_its_slot_back),
        cmocka_unit_test(test_timeout_fails_closed_then_recovers),
        cmocka_unit_test(test_absent_redis_fail_closed_or_local),
        cmocka_unit_test(test_same_answers_as_memory),
        cmocka_unit_test(test_bad_options),
    };

    if (redis_server() == NULL)
        fprintf(stderr, "test_ratelimit_redis: redis-server is not installed: the tests that need it are skipped\n");
    return cmocka_run_group_tests(tests, start_redis, stop_redis);
}
