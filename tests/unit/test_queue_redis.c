/*
 * test_queue_redis.c - the shared submissions queue (store/queue_redis.c)
 * on the gateway's Redis client (store/redis_client.c) against a real
 * redis-server, started here on a Unix socket in a temporary directory
 * (skipped when redis-server is not installed).  One h2o loop stands for
 * a worker; the tests run it until the answers come.
 *
 * What is checked: the caps (queue_max, per tenant, bytes per tenant; a
 * batch fits whole or not at all, and a refusal queues nothing); claims
 * round robin across tenants; a dead consumer's entry taken over by the
 * sweep with its attempt counted, a live one's never; past max_attempts
 * the claim says so; ack removes the entry; a foreign entry is flagged
 * and dead-lettered; the counts; Redis away: nothing sent, no hang.
 */
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include <h2o.h>
#include <hiredis/hiredis.h>

#include "store/queue_redis.h"
#include "store/redis_client.h"

#define WAIT_MS 60000 /* readiness only: how long a test waits for an answer at most */
#define PREFIX  "qt:"
#define HB      "qt:hb:"

static char dir[256], sock_path[300];
static pid_t redis_pid = -1;

/* ------------------------------------------------------------ redis-server */

static redisReply *redis_cmd(const char *fmt, ...)
{
    redisContext *c = redisConnectUnix(sock_path);
    redisReply *r = NULL;
    va_list ap;

    if (c != NULL && !c->err) {
        va_start(ap, fmt);
        r = redisvCommand(c, fmt, ap);
        va_end(ap);
    }
    if (c != NULL)
        redisFree(c);
    return r;
}

static long long redis_int(const char *fmt, const char *arg)
{
    redisReply *r = redis_cmd(fmt, arg);
    long long v = -1;

    if (r != NULL && r->type == REDIS_REPLY_INTEGER)
        v = r->integer;
    else if (r != NULL && r->type == REDIS_REPLY_STRING)
        v = atoll(r->str);
    else if (r != NULL && r->type == REDIS_REPLY_NIL)
        v = 0;
    freeReplyObject(r);
    return v;
}

static int redis_ping(void)
{
    redisReply *r = redis_cmd("PING");
    int ok = r != NULL && r->type == REDIS_REPLY_STATUS;

    freeReplyObject(r);
    return ok;
}

static int start_redis(void **state)
{
    const char *tmp = getenv("TMPDIR");

    (void)state;
    if (access("/usr/bin/redis-server", X_OK) != 0)
        return 0;
    snprintf(dir, sizeof(dir), "%s/moat-qredis-XXXXXX", tmp != NULL ? tmp : "/tmp");
    if (mkdtemp(dir) == NULL)
        return -1;
    snprintf(sock_path, sizeof(sock_path), "%s/redis.sock", dir);
    if ((redis_pid = fork()) == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        execl("/usr/bin/redis-server", "redis-server", "--port", "0", "--unixsocket", sock_path, "--save", "", "--appendonly", "no",
              "--dir", dir, (char *)NULL);
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

static void skip_without_redis(void)
{
    if (redis_pid <= 0)
        skip();
    freeReplyObject(redis_cmd("FLUSHALL"));
}

/* ------------------------------------------------------------ the loop */

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void run_until(h2o_loop_t *loop, const int *calls)
{
    uint64_t end = now_ms() + WAIT_MS;

    while (*calls == 0 && now_ms() < end)
        h2o_evloop_run(loop, 10);
    assert_int_not_equal(*calls, 0);
}

struct fixture {
    h2o_loop_t *loop;
    struct redis_client *rc;
    struct queue_redis *q;
};

static void fixture_open(struct fixture *f, const char *consumer, uint64_t lease_ms, unsigned max_attempts)
{
    const struct redis_client_options o = {sock_path, NULL, 0, NULL, 0, PREFIX, 1000, 1000, lease_ms, "tests", NULL, 0, NULL, NULL};
    const struct qr_options qo = {consumer, HB, lease_ms, max_attempts, 0, 0};
    char err[256];

    f->loop = h2o_evloop_create();
    assert_non_null(f->rc = redis_client_new(&o, err, sizeof(err)));
    assert_non_null(f->q = queue_redis_new(f->rc, &qo, err, sizeof(err)));
    (void)redis_client_conn(f->rc, f->loop);
}

static void fixture_close(struct fixture *f)
{
    queue_redis_free(f->q);
    redis_client_free(f->rc);
    h2o_evloop_destroy(f->loop);
}

/* --- enqueue */

struct enq {
    int calls;
    enum qr_verdict v;
    size_t n;
};

static void on_enq(void *arg, enum qr_verdict v, char (*ids)[QR_ID_MAX], size_t n)
{
    struct enq *e = arg;

    e->calls++;
    e->v = v;
    e->n = n;
    for (size_t i = 0; i < n; i++)
        assert_non_null(strchr(ids[i], '-'));
}

static enum qr_verdict enqueue(struct fixture *f, const char *tenant, const struct qr_caps *caps, size_t n, const char *blob,
                               uint32_t count)
{
    struct qr_entry_in in[8];
    struct enq e = {0};

    for (size_t i = 0; i < n; i++)
        in[i] = (struct qr_entry_in){count, blob, strlen(blob)};
    assert_int_equal(queue_redis_enqueue(f->q, f->loop, tenant, caps, in, n, on_enq, &e), 0);
    run_until(f->loop, &e.calls);
    assert_int_equal(e.calls, 1);
    return e.v;
}

/* --- claim */

struct got {
    int calls, down, none;
    struct qr_claim c;
    char blob[256];
    char gateway[64];
};

static void on_claim(void *arg, const struct qr_claim *c, int down)
{
    struct got *g = arg;

    g->calls++;
    g->down = down;
    g->none = c == NULL;
    if (c != NULL) {
        g->c = *c;
        snprintf(g->blob, sizeof(g->blob), "%.*s", (int)c->len, c->blob != NULL ? c->blob : "");
        snprintf(g->gateway, sizeof(g->gateway), "%.*s", (int)c->gateway_len, c->gateway != NULL ? c->gateway : "");
    }
}

static struct got claim(struct fixture *f, int sweep)
{
    struct got g;

    memset(&g, 0, sizeof(g));
    assert_int_equal(queue_redis_claim(f->q, f->loop, sweep, on_claim, &g), 0);
    run_until(f->loop, &g.calls);
    assert_int_equal(g.down, 0);
    return g;
}

struct done {
    int calls, ok;
};

static void on_done(void *arg, int ok)
{
    struct done *d = arg;

    d->calls++;
    d->ok = ok;
}

static void ack(struct fixture *f, const struct got *g)
{
    struct done d = {0, 0};

    assert_int_equal(queue_redis_ack(f->q, f->loop, g->c.tenant, g->c.id, on_done, &d), 0);
    run_until(f->loop, &d.calls);
    assert_int_equal(d.ok, 1);
}

static const struct qr_caps roomy = {1000, 1000, 1 << 20};

/* ------------------------------------------------------------ tests */

static void test_caps_hold_and_refuse_whole(void **state)
{
    struct fixture f;
    const struct qr_caps per_tenant = {10, 3, 1 << 20}, bytes = {10, 10, 20}, all = {4, 10, 1 << 20};

    (void)state;
    skip_without_redis();
    fixture_open(&f, "gw1", 3000, 3);
    assert_int_equal(enqueue(&f, "alpha", &per_tenant, 2, "x", 1), QR_OK);
    /* two more do not fit: the batch is refused whole, nothing of it is queued */
    assert_int_equal(enqueue(&f, "alpha", &per_tenant, 2, "x", 1), QR_TENANT_FULL);
    assert_int_equal(redis_int("XLEN %s", PREFIX "q:s:616c706861"), 2);
    assert_int_equal(enqueue(&f, "alpha", &per_tenant, 1, "x", 1), QR_OK);
    /* a group of two counts two */
    assert_int_equal(enqueue(&f, "beta", &per_tenant, 1, "x", 4), QR_TENANT_FULL);
    /* bytes: 20 per tenant */
    assert_int_equal(enqueue(&f, "gamma", &bytes, 1, "0123456789abcdef", 1), QR_OK);
    assert_int_equal(enqueue(&f, "gamma", &bytes, 1, "0123456789", 1), QR_TENANT_BYTES);
    /* all tenants: 4 waiting of 4 */
    assert_int_equal(enqueue(&f, "delta", &all, 1, "x", 1), QR_FULL);
    assert_int_equal(redis_int("HGET %s *", PREFIX "q:w"), 4);
    fixture_close(&f);
}

static void test_claims_round_robin_across_tenants(void **state)
{
    struct fixture f;
    const char *order[6];
    char blobs[6][16];

    (void)state;
    skip_without_redis();
    fixture_open(&f, "gw1", 3000, 3);
    for (int i = 0; i < 4; i++) {
        char b[8];
        snprintf(b, sizeof(b), "a%d", i);
        assert_int_equal(enqueue(&f, "alpha", &roomy, 1, b, 1), QR_OK);
    }
    assert_int_equal(enqueue(&f, "beta", &roomy, 1, "b0", 1), QR_OK);
    assert_int_equal(enqueue(&f, "gamma", &roomy, 1, "c0", 1), QR_OK);
    for (int i = 0; i < 6; i++) {
        struct got g = claim(&f, 0);
        assert_false(g.none);
        assert_int_equal(g.c.kind, QR_RUN);
        assert_int_equal(g.c.attempt, 1);
        assert_false(g.c.malformed);
        assert_string_equal(g.gateway, "gw1");
        snprintf(blobs[i], sizeof(blobs[i]), "%.15s", g.blob);
        order[i] = blobs[i];
        ack(&f, &g);
    }
    /* alpha's burst yields a turn to each tenant that joined behind it */
    assert_string_equal(order[0], "a0");
    assert_string_equal(order[1], "b0");
    assert_string_equal(order[2], "c0");
    assert_string_equal(order[3], "a1");
    assert_string_equal(order[5], "a3");
    assert_true(claim(&f, 1).none);
    assert_int_equal(redis_int("HGET %s *", PREFIX "q:w"), 0);
    assert_int_equal(redis_int("LLEN %s", PREFIX "q:ring"), 0);
    fixture_close(&f);
}

static void test_dead_consumer_taken_over_live_one_never(void **state)
{
    struct fixture dead, live;
    struct got g;

    (void)state;
    skip_without_redis();
    fixture_open(&dead, "dead", 300, 2);
    fixture_open(&live, "live", 300, 2);
    assert_int_equal(enqueue(&dead, "alpha", &roomy, 1, "job", 1), QR_OK);
    g = claim(&dead, 0);
    assert_false(g.none);
    /* its heartbeat is alive: never taken over, however long it runs */
    freeReplyObject(redis_cmd("SET %s 1", HB "dead"));
    usleep(400 * 1000);
    assert_true(claim(&live, 1).none);
    /* its heartbeat gone and the lease over: taken over, attempt 2 */
    freeReplyObject(redis_cmd("DEL %s", HB "dead"));
    assert_true(claim(&live, 0).none); /* only a sweep takes over */
    g = claim(&live, 1);
    assert_false(g.none);
    assert_int_equal(g.c.kind, QR_RUN);
    assert_int_equal(g.c.attempt, 2);
    assert_string_equal(g.blob, "job");
    /* "live" dies too: past max_attempts (2) the next claim ends it */
    usleep(400 * 1000);
    g = claim(&dead, 1);
    assert_false(g.none);
    assert_int_equal(g.c.kind, QR_EXHAUSTED);
    assert_int_equal(g.c.attempt, 3);
    ack(&dead, &g);
    assert_int_equal(redis_int("XLEN %s", PREFIX "q:s:616c706861"), 0);
    usleep(400 * 1000);
    assert_true(claim(&live, 1).none);
    fixture_close(&dead);
    fixture_close(&live);
}

/* A claim whose answer never reached this consumer (it does not hold
 * the entry) is taken back by its own sweep a lease later, at the same
 * attempt: it never ran.  What it holds it never takes back. */
static void test_own_lost_claim_retaken_same_attempt(void **state)
{
    struct fixture f;
    struct got g, again;

    (void)state;
    skip_without_redis();
    fixture_open(&f, "gw1", 300, 3);
    assert_int_equal(enqueue(&f, "alpha", &roomy, 1, "job", 1), QR_OK);
    g = claim(&f, 0);
    assert_false(g.none);
    assert_int_equal(queue_redis_held(f.q), 1);
    usleep(400 * 1000);
    assert_true(claim(&f, 1).none); /* held: running here, not lost */
    queue_redis_forget(f.q, g.c.tenant, g.c.id);
    assert_int_equal(queue_redis_held(f.q), 0);
    again = claim(&f, 1);
    assert_false(again.none);
    assert_int_equal(again.c.kind, QR_RUN);
    assert_string_equal(again.c.id, g.c.id);
    assert_int_equal(again.c.attempt, 1);
    assert_string_equal(again.blob, "job");
    assert_int_equal(queue_redis_held(f.q), 1);
    ack(&f, &again);
    assert_int_equal(queue_redis_held(f.q), 0);
    fixture_close(&f);
}

static void release(struct fixture *f, const struct got *g, unsigned attempts)
{
    struct done d = {0, 0};

    assert_int_equal(queue_redis_release(f->q, f->loop, g->c.tenant, g->c.id, attempts, on_done, &d), 0);
    run_until(f->loop, &d.calls);
    assert_int_equal(d.ok, 1);
}

/* A run lost mid-way is given back: any consumer claims it next, at the
 * next attempt, and past max_attempts it ends without running. */
static void test_given_back_counts_attempts(void **state)
{
    struct fixture a, b;
    struct got g;

    (void)state;
    skip_without_redis();
    fixture_open(&a, "gwa", 3000, 2);
    fixture_open(&b, "gwb", 3000, 2);
    assert_int_equal(enqueue(&a, "alpha", &roomy, 1, "job", 2), QR_OK);
    g = claim(&a, 0);
    assert_int_equal(g.c.attempt, 1);
    release(&a, &g, g.c.attempt);
    assert_int_equal(queue_redis_held(a.q), 0);
    assert_int_equal(redis_int("HGET %s *", PREFIX "q:w"), 2);
    g = claim(&b, 0);
    assert_false(g.none);
    assert_int_equal(g.c.kind, QR_RUN);
    assert_int_equal(g.c.attempt, 2);
    assert_string_equal(g.blob, "job");
    assert_string_equal(g.gateway, "gwa"); /* still the accepting gateway's */
    release(&b, &g, g.c.attempt);
    g = claim(&a, 0);
    assert_int_equal(g.c.kind, QR_EXHAUSTED);
    assert_int_equal(g.c.attempt, 3);
    ack(&a, &g);
    /* a release of what is no longer held is answered, and changes nothing */
    release(&b, &g, 5);
    assert_int_equal(redis_int("HGET %s *", PREFIX "q:w"), 0);
    assert_int_equal(redis_int("XLEN %s", PREFIX "q:s:616c706861"), 0);
    fixture_close(&a);
    fixture_close(&b);
}

/* After Redis itself was away (frozen, restarted) every heartbeat may
 * have expired at once: no gateway's entries are taken over while the
 * grace key stands, nor while the newest beat is older than the lease
 * allows (the sweep ran before any beat did). */
static void test_no_takeover_while_redis_was_away(void **state)
{
    struct fixture dead, live;
    struct got g;

    (void)state;
    skip_without_redis();
    fixture_open(&dead, "dead", 300, 3);
    fixture_open(&live, "live", 300, 3);
    assert_int_equal(enqueue(&dead, "alpha", &roomy, 1, "job", 1), QR_OK);
    g = claim(&dead, 0);
    assert_false(g.none);
    usleep(400 * 1000);
    freeReplyObject(redis_cmd("SET %s 1 PX 5000", HB GW_REDIS_BEAT_GRACE));
    assert_true(claim(&live, 1).none);
    freeReplyObject(redis_cmd("DEL %s", HB GW_REDIS_BEAT_GRACE));
    freeReplyObject(redis_cmd("SET %s 1000", HB GW_REDIS_BEAT_LAST)); /* 1970: long ago */
    assert_true(claim(&live, 1).none);
    freeReplyObject(redis_cmd("DEL %s", HB GW_REDIS_BEAT_LAST));
    g = claim(&live, 1);
    assert_false(g.none);
    assert_int_equal(g.c.attempt, 2);
    ack(&live, &g);
    fixture_close(&dead);
    fixture_close(&live);
}

static void test_foreign_entry_is_flagged_and_dead_lettered(void **state)
{
    struct fixture f;
    struct done d = {0, 0};
    struct got g;
    redisReply *r;

    (void)state;
    skip_without_redis();
    fixture_open(&f, "gw1", 3000, 3);
    assert_int_equal(enqueue(&f, "alpha", &roomy, 1, "real", 1), QR_OK);
    g = claim(&f, 0);
    ack(&f, &g);
    /* an entry someone else wrote into the stream, put in turn by hand */
    freeReplyObject(redis_cmd("XADD %s * x y", PREFIX "q:s:616c706861"));
    freeReplyObject(redis_cmd("HINCRBY %s 616c706861 1", PREFIX "q:w"));
    freeReplyObject(redis_cmd("RPUSH %s 616c706861", PREFIX "q:ring"));
    g = claim(&f, 0);
    assert_false(g.none);
    assert_true(g.c.malformed);
    assert_null(g.c.blob);
    assert_int_equal(queue_redis_dead(f.q, f.loop, &g.c, "not ours", on_done, &d), 0);
    run_until(f.loop, &d.calls);
    assert_int_equal(d.ok, 1);
    assert_int_equal(redis_int("LLEN %s", PREFIX "q:dead"), 1);
    assert_int_equal(redis_int("XLEN %s", PREFIX "q:s:616c706861"), 0);
    r = redis_cmd("LINDEX %s 0", PREFIX "q:dead");
    assert_non_null(r);
    assert_non_null(strstr(r->str, "\"why\":\"not ours\""));
    freeReplyObject(r);
    fixture_close(&f);
}

struct cnt {
    int calls, ok, tenants;
    struct qr_counts c;
};

static void on_counts(void *arg, const struct qr_counts *c, json_t *detail)
{
    struct cnt *k = arg;
    json_t *t;
    size_t i;

    k->calls++;
    k->ok = c != NULL && detail != NULL;
    if (c == NULL)
        return;
    k->c = *c;
    /* by tenant, by name: alpha 1 waiting 1 pending, beta 3 waiting */
    json_array_foreach(json_object_get(detail, "tenants"), i, t)
    {
        const char *name = json_string_value(json_object_get(t, "tenant"));
        assert_non_null(name);
        if (strcmp(name, "alpha") == 0) {
            assert_int_equal(json_integer_value(json_object_get(t, "waiting")), 1);
            assert_int_equal(json_integer_value(json_object_get(t, "pending")), 1);
            k->tenants++;
        } else if (strcmp(name, "beta") == 0) {
            assert_int_equal(json_integer_value(json_object_get(t, "waiting")), 3);
            k->tenants++;
        }
    }
    t = json_array_get(json_object_get(detail, "consumers"), 0);
    assert_string_equal(json_string_value(json_object_get(t, "name")), "gw1");
    assert_false(json_is_true(json_object_get(t, "alive")));
}

static void test_counts(void **state)
{
    struct fixture f;
    struct cnt k = {0};

    (void)state;
    skip_without_redis();
    fixture_open(&f, "gw1", 3000, 3);
    assert_int_equal(enqueue(&f, "alpha", &roomy, 2, "x", 1), QR_OK);
    assert_int_equal(enqueue(&f, "beta", &roomy, 1, "x", 3), QR_OK);
    (void)claim(&f, 0); /* pending at gw1, whose heartbeat key does not exist */
    usleep(20 * 1000);
    assert_int_equal(queue_redis_counts(f.q, f.loop, on_counts, &k), 0);
    run_until(f.loop, &k.calls);
    assert_true(k.ok);
    assert_int_equal(k.c.waiting, 4); /* 5 submissions, the claimed alpha one out */
    assert_int_equal(k.c.pending, 1);
    assert_int_equal(k.c.pending_dead, 1);
    assert_true(k.c.oldest_ms >= 20);
    assert_int_equal(k.c.dead, 0);
    assert_int_equal(k.tenants, 2);
    fixture_close(&f);
}

static void test_redis_away_nothing_sent(void **state)
{
    const struct redis_client_options o = {
        "/nonexistent/redis.sock", NULL, 0, NULL, 0, PREFIX, 200, 200, 3000, "tests", NULL, 0, NULL, NULL};
    const struct qr_options qo = {"gw1", HB, 3000, 3, 0, 0};
    struct qr_entry_in in = {1, "x", 1};
    struct redis_client *rc;
    struct queue_redis *q;
    h2o_loop_t *loop = h2o_evloop_create();
    struct enq e = {0};
    char err[256];
    uint64_t t0 = now_ms();

    (void)state;
    assert_non_null(rc = redis_client_new(&o, err, sizeof(err)));
    assert_non_null(q = queue_redis_new(rc, &qo, err, sizeof(err)));
    /* the first call finds the connection failed at once, or is answered QR_DOWN */
    if (queue_redis_enqueue(q, loop, "alpha", &roomy, &in, 1, on_enq, &e) == 0) {
        run_until(loop, &e.calls);
        assert_int_equal(e.v, QR_DOWN);
    }
    assert_int_equal(queue_redis_enqueue(q, loop, "alpha", &roomy, &in, 1, on_enq, &e), -1);
    assert_true(now_ms() - t0 < WAIT_MS);
    queue_redis_free(q);
    redis_client_free(rc);
    h2o_evloop_destroy(loop);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_caps_hold_and_refuse_whole),
        cmocka_unit_test(test_claims_round_robin_across_tenants),
        cmocka_unit_test(test_dead_consumer_taken_over_live_one_never),
        cmocka_unit_test(test_own_lost_claim_retaken_same_attempt),
        cmocka_unit_test(test_given_back_counts_attempts),
        cmocka_unit_test(test_no_takeover_while_redis_was_away),
        cmocka_unit_test(test_foreign_entry_is_flagged_and_dead_lettered),
        cmocka_unit_test(test_counts),
        cmocka_unit_test(test_redis_away_nothing_sent),
    };

    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, start_redis, stop_redis);
}
