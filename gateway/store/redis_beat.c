/*
 * redis_beat.c - this gateway process's heartbeat (see redis_beat.h).
 *
 * Theory of operation
 * -------------------
 * Each process is named by its Redis client's random id, and keeps
 * "<prefix>g:<id>" alive with a TTL of lease_ms, renewed every lease_ms /
 * 3 (every GW_REDIS_BACKOFF_MIN_MS while that fails: a Redis restarted
 * without persistence has lost every key).  Other gateways read it to tell
 * a live owner from a dead one: a consumer of the shared queue whose key
 * is gone has its entries taken over (queue_redis.c), a results record
 * kept as pending by such a process reads as an orphan (judge0_store.c),
 * and its session counts stop counting (session_registry.c).  So a gateway
 * killed (SIGKILL, a lost host) gives its state back lease_ms after its
 * last beat.  A missing key means "dead" only to a connection that has
 * been up for lease_ms (redis_conn_settled): right after Redis (re)starts,
 * a live gateway may not have beaten yet.
 *
 * Each beat also notes Redis' time in "<prefix>g:~last"; a beat that finds
 * it older than 2/3 of the lease (Redis was frozen or restarted: every key
 * may have expired at once) sets "<prefix>g:~grace" for a lease, in which
 * the shared queue takes no entry over.
 *
 * Why a thread.  The beat must not depend on a worker's loop being free,
 * and must not be one more thing each worker does; a thread of its own
 * runs an event loop with one connection of the same asynchronous client
 * (redis_client.c: its timeouts, backoff and reconnection), so there is
 * one Redis layer in the gateway.  After each beat Redis answered, the
 * hooks run on that loop with its connection (the session counts are
 * written again there: what a lost connection failed to write heals).
 */
#include "redis_beat.h"
#include "common/gw_limits.h"
#include "log.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#define BEAT_KEY_MAX (GW_REDIS_MAX_PREFIX + 3 + 24)

struct beat {
    struct redis_client *rc;
    h2o_evloop_t *loop;
    struct redis_conn *c;
    h2o_timeout_t soon, later; /* GW_REDIS_BACKOFF_MIN_MS, lease_ms / 3 */
    h2o_timeout_entry_t timer;
    char key[BEAT_KEY_MAX], last[BEAT_KEY_MAX], grace[BEAT_KEY_MAX], lease[24];
    int failing; /* the last beat went unanswered: log the recovery */
};

static redis_beat_fn hooks[REDIS_BEAT_MAX_HOOKS];
static unsigned nhooks;

/* KEYS: this process's key, the last beat's time, the grace.  ARGV:
 * lease_ms.  A gap since any process's last beat longer than 2/3 of the
 * lease (they beat every third) means Redis itself was away (stopped,
 * frozen, restarted): a lease of grace, in which no heartbeat's absence
 * means death (the shared queue's sweep, queue_redis.c, reads both). */
static struct redis_script beat_script = {
    "local lease = tonumber(ARGV[1])\n"
    "redis.call('SET', KEYS[1], '1', 'PX', lease)\n"
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "local last = tonumber(redis.call('GET', KEYS[2]) or '0')\n"
    "if last > 0 and now - last > lease * 2 / 3 then redis.call('SET', KEYS[3], '1', 'PX', lease) end\n"
    "redis.call('SET', KEYS[2], now)\n"
    "return 1\n",
    "", NULL};

int redis_beat_on_beat(redis_beat_fn fn)
{
    if (nhooks == REDIS_BEAT_MAX_HOOKS)
        return -1;
    hooks[nhooks++] = fn;
    return 0;
}

static void beat_again(struct beat *b, int ok)
{
    h2o_timeout_link(b->loop, ok ? &b->later : &b->soon, &b->timer);
}

static void on_beaten(void *arg, const redisReply *reply)
{
    struct beat *b = arg;
    int ok = reply != NULL && reply->type == REDIS_REPLY_INTEGER;

    if (!ok && !b->failing)
        log_warnx("%s: redis: the heartbeat went unanswered: other gateways take this one for dead after %s ms", __func__,
                  b->lease);
    else if (ok && b->failing)
        log_info("%s: redis: beating again", __func__);
    b->failing = !ok;
    if (ok)
        for (unsigned i = 0; i < nhooks; i++)
            hooks[i](b->c);
    beat_again(b, ok);
}

static void on_timer(h2o_timeout_entry_t *entry)
{
    struct beat *b = H2O_STRUCT_FROM_MEMBER(struct beat, timer, entry);
    const char *argv[4] = {b->key, b->last, b->grace, b->lease};

    if (redis_conn_eval(b->c, &beat_script, 3, 4, argv, NULL, on_beaten, b) != 0)
        on_beaten(b, NULL); /* down: the client reconnects on its tick */
}

static void *beat_main(void *arg)
{
    struct beat *b = arg;

    if ((b->c = redis_client_conn(b->rc, b->loop)) == NULL) {
        log_warnx("%s: redis: out of memory: no heartbeat (other gateways take this one for dead)", __func__);
        return NULL;
    }
    b->timer.cb = on_timer;
    on_timer(&b->timer);
    for (;;)
        h2o_evloop_run(b->loop, INT32_MAX);
    return NULL;
}

int redis_beat_start(struct redis_client *rc, char *err, size_t errlen)
{
    static struct beat b; /* one per process, for its life */
    uint64_t lease = redis_client_lease_ms(rc);
    sigset_t all, old;
    pthread_attr_t attr;
    pthread_t t;
    int e;

    if (b.rc != NULL) {
        snprintf(err, errlen, "redis: the heartbeat runs already");
        return -1;
    }
    redis_client_add_script(rc, &beat_script);
    b.rc = rc;
    snprintf(b.key, sizeof(b.key), "%s%s", redis_client_beat_prefix(rc), redis_client_id(rc));
    snprintf(b.last, sizeof(b.last), "%s" GW_REDIS_BEAT_LAST, redis_client_beat_prefix(rc));
    snprintf(b.grace, sizeof(b.grace), "%s" GW_REDIS_BEAT_GRACE, redis_client_beat_prefix(rc));
    snprintf(b.lease, sizeof(b.lease), "%llu", (unsigned long long)lease);
    if ((b.loop = h2o_evloop_create()) == NULL) {
        snprintf(err, errlen, "redis: out of memory for the heartbeat");
        return -1;
    }
    h2o_timeout_init(b.loop, &b.soon, GW_REDIS_BACKOFF_MIN_MS);
    h2o_timeout_init(b.loop, &b.later, lease / 3);
    /* the thread takes no signal: SIGHUP and SIGTERM are the main thread's */
    sigfillset(&all);
    if ((e = pthread_attr_init(&attr)) != 0 || (e = pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED)) != 0 ||
        (e = pthread_sigmask(SIG_SETMASK, &all, &old)) != 0) {
        snprintf(err, errlen, "redis: cannot start the heartbeat thread: %s", strerror(e));
        return -1;
    }
    e = pthread_create(&t, &attr, beat_main, &b);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (e != 0) {
        snprintf(err, errlen, "redis: cannot start the heartbeat thread: %s", strerror(e));
        return -1;
    }
    return 0;
}
