/*
 * test_gateway_judge0_queue.c - the fair, bounded submissions queue
 * (judge0_queue.c) with a fake start(): round robin across tenants, the
 * bound of one turn, the caps and reservations, a start that fails at once,
 * shutdown, and several threads.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <pthread.h>

#include "apis/judge0/judge0_queue.h"

/* A fake run: start() notes the order; the test ends runs by hand. */
struct fake {
    struct jq_item item; /* first: the item is the run */
    int id, started, discarded;
};

struct world {
    struct judge0_queue *q;
    struct fake *order[1024];
    size_t n;
    int fail_at_start; /* start() ends the run at once (a failure) */
    unsigned max_running;
};

static void fake_start(struct jq_item *it, void *ctx)
{
    struct world *w = ctx;
    struct fake *f = (struct fake *)it;

    f->started = 1;
    w->order[w->n++] = f;
    if (w->fail_at_start)
        judge0_queue_done(w->q, w, w->max_running);
}

static void fake_discard(struct jq_item *it)
{
    ((struct fake *)it)->discarded = 1;
}

static void fake_init(struct fake *f, const char *tenant, int id)
{
    memset(f, 0, sizeof(*f));
    snprintf(f->item.tenant, sizeof(f->item.tenant), "%s", tenant);
    f->item.start = fake_start;
    f->item.discard = fake_discard;
    f->id = id;
}

static const struct jq_caps BIG = {2, 10000, 10000};

/* Queue f as the handler does: a run at once if it may, else queued. */
static void submit(struct world *w, struct fake *f)
{
    if (judge0_queue_try_run(w->q, &f->item, w->max_running))
        fake_start(&f->item, w);
    else
        judge0_queue_push(w->q, &f->item, w, w->max_running);
}

/* A floods 200, then B submits 1: B starts after at most one more of A's. */
static void test_one_turn(void **state)
{
    static struct fake a[200], b;
    struct world w = {judge0_queue_new(), {0}, 0, 0, 2};
    struct jq_counts c;
    size_t i, pos_b = 0;

    assert_non_null(w.q);
    assert_int_equal(judge0_queue_reserve(w.q, "A", 200, &BIG), JQ_OK);
    for (i = 0; i < 200; i++) {
        fake_init(&a[i], "A", (int)i);
        submit(&w, &a[i]);
    }
    assert_int_equal(w.n, 2); /* max_running */
    judge0_queue_counts(w.q, &c);
    assert_int_equal(c.running, 2);
    assert_int_equal(c.queued, 198);
    assert_int_equal(c.reserved, 0);
    /* a few of A's end: A's next ones start in order */
    judge0_queue_done(w.q, &w, 2);
    judge0_queue_done(w.q, &w, 2);
    assert_int_equal(w.n, 4);
    assert_int_equal(judge0_queue_reserve(w.q, "B", 1, &BIG), JQ_OK);
    fake_init(&b, "B", 1000);
    submit(&w, &b);
    assert_false(b.started); /* both runs busy */
    /* the queued B: seq - ahead - 1 = runs started while it waited */
    while (!b.started)
        judge0_queue_done(w.q, &w, 2);
    for (i = 0; i < w.n; i++)
        if (w.order[i] == &b)
            pos_b = i;
    assert_true(pos_b <= 5); /* at most one of A's started in between */
    assert_true(b.item.seq - b.item.ahead - 1 <= 1);
    /* A's order is FIFO */
    for (i = 1; i < w.n; i++)
        if (w.order[i] != &b && w.order[i - 1] != &b)
            assert_int_equal(w.order[i]->id, w.order[i - 1]->id + 1);
    while (w.n < 201)
        judge0_queue_done(w.q, &w, 2);
    judge0_queue_counts(w.q, &c);
    assert_int_equal(c.queued, 0);
    assert_int_equal(c.tenants, 0); /* entries go once empty */
    judge0_queue_free(w.q);
}

/* Three tenants waiting: strict rotation, one item each turn. */
static void test_round_robin(void **state)
{
    static struct fake f[3][4];
    static const char *names[] = {"x", "y", "z"};
    struct world w = {judge0_queue_new(), {0}, 0, 0, 1};
    struct fake blocker;
    size_t i, t;

    assert_non_null(w.q);
    assert_int_equal(judge0_queue_reserve(w.q, "x", 1, &BIG), JQ_OK);
    fake_init(&blocker, "x", -1);
    submit(&w, &blocker); /* holds the one run */
    for (t = 0; t < 3; t++) {
        assert_int_equal(judge0_queue_reserve(w.q, names[t], 4, &BIG), JQ_OK);
        for (i = 0; i < 4; i++) {
            fake_init(&f[t][i], names[t], (int)(t * 10 + i));
            submit(&w, &f[t][i]);
        }
    }
    for (i = 0; i < 12; i++)
        judge0_queue_done(w.q, &w, 1);
    assert_int_equal(w.n, 13);
    for (i = 0; i < 12; i++)
        assert_int_equal(w.order[1 + i]->id, (int)((i % 3) * 10 + i / 3));
    judge0_queue_free(w.q);
}

/* The caps: all or none, 503 before 429, reservations given back. */
static void test_caps(void **state)
{
    struct judge0_queue *q = judge0_queue_new();
    const struct jq_caps caps = {1, 10, 4};
    struct jq_counts c;

    assert_non_null(q);
    assert_int_equal(judge0_queue_reserve(q, "a", 5, &caps), JQ_TENANT_FULL);
    assert_int_equal(judge0_queue_reserve(q, "a", 4, &caps), JQ_OK);
    assert_int_equal(judge0_queue_reserve(q, "a", 1, &caps), JQ_TENANT_FULL);
    assert_int_equal(judge0_queue_reserve(q, "b", 4, &caps), JQ_OK);
    assert_int_equal(judge0_queue_reserve(q, "c", 3, &caps), JQ_FULL); /* 11 > 10 */
    assert_int_equal(judge0_queue_reserve(q, "c", 2, &caps), JQ_OK);
    judge0_queue_counts(q, &c);
    assert_int_equal(c.reserved, 10);
    assert_int_equal(c.tenants, 3);
    judge0_queue_unreserve(q, "a", 4);
    judge0_queue_unreserve(q, "nobody", 4); /* ignored */
    assert_int_equal(judge0_queue_reserve(q, "c", 2, &caps), JQ_OK);
    judge0_queue_counts(q, &c);
    assert_int_equal(c.reserved, 8);
    assert_int_equal(c.tenants, 2);
    judge0_queue_free(q);
}

/* A start that ends its run at once: the rest still start, in order, and
 * the stack stays flat (the pump does not recurse). */
static void test_failing_starts(void **state)
{
    static struct fake f[500];
    struct world w = {judge0_queue_new(), {0}, 0, 0, 1};
    struct fake blocker;
    struct jq_counts c;
    size_t i;

    assert_non_null(w.q);
    assert_int_equal(judge0_queue_reserve(w.q, "t", 1, &BIG), JQ_OK);
    fake_init(&blocker, "t", -1);
    submit(&w, &blocker);
    assert_int_equal(judge0_queue_reserve(w.q, "t", 500, &BIG), JQ_OK);
    for (i = 0; i < 500; i++) {
        fake_init(&f[i], "t", (int)i);
        submit(&w, &f[i]);
    }
    w.fail_at_start = 1;
    judge0_queue_done(w.q, &w, 1); /* the blocker ends: everything else runs and fails */
    assert_int_equal(w.n, 501);
    for (i = 0; i < 500; i++)
        assert_int_equal(w.order[1 + i]->id, (int)i);
    judge0_queue_counts(w.q, &c);
    assert_int_equal(c.running, 0);
    assert_int_equal(c.queued, 0);
    judge0_queue_free(w.q);
}

/* Shutdown: what waits is discarded, nothing starts afterwards, a push
 * after it is discarded at once. */
static void test_stop(void **state)
{
    struct world w = {judge0_queue_new(), {0}, 0, 0, 1};
    struct fake f[3], late;

    assert_non_null(w.q);
    assert_int_equal(judge0_queue_reserve(w.q, "t", 4, &BIG), JQ_OK);
    for (int i = 0; i < 3; i++) {
        fake_init(&f[i], "t", i);
        submit(&w, &f[i]);
    }
    assert_true(f[0].started);
    judge0_queue_stop(w.q);
    assert_true(f[1].discarded && f[2].discarded);
    judge0_queue_done(w.q, &w, 1);
    assert_int_equal(w.n, 1);
    fake_init(&late, "t", 9);
    assert_int_equal(judge0_queue_try_run(w.q, &late.item, 1), 0);
    judge0_queue_push(w.q, &late.item, &w, 1);
    assert_true(late.discarded);
    judge0_queue_stop(w.q); /* idempotent */
    judge0_queue_free(w.q);
}

/* Threads: each submits and ends its own runs; every item starts once, and
 * never more than max_running at once. */
#define THREADS 4
#define PER     300

struct shared {
    struct judge0_queue *q;
    pthread_mutex_t mu;
    int running, peak, started;
};

struct tctx {
    struct shared *s;
    struct fake items[PER];
    struct fake *mine[PER]; /* started on this thread, not yet ended */
    size_t nmine;
};

static void thread_start(struct jq_item *it, void *ctx)
{
    struct tctx *t = ctx;

    pthread_mutex_lock(&t->s->mu);
    if (++t->s->running > t->s->peak)
        t->s->peak = t->s->running;
    t->s->started++;
    pthread_mutex_unlock(&t->s->mu);
    ((struct fake *)it)->started++;
    t->mine[t->nmine++] = (struct fake *)it;
}

static void end_one(struct tctx *t)
{
    t->nmine--;
    pthread_mutex_lock(&t->s->mu);
    t->s->running--;
    pthread_mutex_unlock(&t->s->mu);
    judge0_queue_done(t->s->q, t, 3);
}

static void *thread_main(void *arg)
{
    struct tctx *t = arg;
    char name[16];

    snprintf(name, sizeof(name), "t%p", (void *)t);
    for (size_t i = 0; i < PER; i++) {
        fake_init(&t->items[i], name, (int)i);
        t->items[i].item.start = thread_start;
        assert_int_equal(judge0_queue_reserve(t->s->q, name, 1, &BIG), JQ_OK);
        if (judge0_queue_try_run(t->s->q, &t->items[i].item, 3))
            thread_start(&t->items[i].item, t);
        else
            judge0_queue_push(t->s->q, &t->items[i].item, t, 3);
        if (t->nmine > 0 && (i % 2) == 0)
            end_one(t);
    }
    return NULL;
}

static void test_threads(void **state)
{
    static struct tctx t[THREADS];
    struct shared s = {judge0_queue_new(), PTHREAD_MUTEX_INITIALIZER, 0, 0, 0};
    pthread_t tid[THREADS];
    struct jq_counts c;
    int progress = 1;

    assert_non_null(s.q);
    for (int i = 0; i < THREADS; i++) {
        memset(&t[i], 0, sizeof(t[i]));
        t[i].s = &s;
        assert_int_equal(pthread_create(&tid[i], NULL, thread_main, &t[i]), 0);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(tid[i], NULL);
    /* end what runs, here, until everything ran */
    while (progress) {
        progress = 0;
        for (int i = 0; i < THREADS; i++)
            while (t[i].nmine > 0) {
                end_one(&t[i]);
                progress = 1;
            }
    }
    assert_int_equal(s.started, THREADS * PER);
    assert_true(s.peak <= 3);
    for (int i = 0; i < THREADS; i++)
        for (int j = 0; j < PER; j++)
            assert_int_equal(t[i].items[j].started, 1);
    judge0_queue_counts(s.q, &c);
    assert_int_equal(c.running + c.queued + c.reserved, 0);
    judge0_queue_free(s.q);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_turn),       cmocka_unit_test(test_round_robin), cmocka_unit_test(test_caps),
        cmocka_unit_test(test_failing_starts), cmocka_unit_test(test_stop),        cmocka_unit_test(test_threads),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
