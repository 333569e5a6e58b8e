/*
 * redis_sync.c - bounded blocking calls to the shared Redis (see
 * redis_sync.h), for Judge0 results and session counts.
 *
 * Theory of operation
 * -------------------
 * Why blocking.  The limiter (ratelimit_redis.c) asks Redis from the
 * worker's event loop through hiredis' async client, and the pipeline waits.
 * The Judge0 store and the session registry are synchronous interfaces
 * used from many places (the GET handlers, the queue's dispatch, the end of
 * a detached run, the orphan check, a WebSocket's upgrade); making every
 * caller wait asynchronously is a rewrite of all of them.  Instead each
 * thread (a worker, the heartbeat) has its own blocking redisContext whose
 * every read and write is bounded by timeout_ms (SO_RCVTIMEO/SO_SNDTIMEO,
 * redisSetTimeout), and whose connect is bounded by the smaller of
 * connect_timeout_ms and timeout_ms.  What that costs the loop, measured
 * (tests/bench/bench_judge0_redis.py, RESULTS.md): one GET alone pays
 * about 30 us more (a Unix socket round trip; p99 0.5 ms); under load a
 * worker waiting on Redis serves nothing else, and GETs/s fall to about
 * 0.46x of the same gateway with the store in memory.  Accepted for now
 * (puts are a few per run; GETs are polls); an asynchronous GET on the
 * loop's hiredis connection is the way to win it back.  The worst case is a Redis that accepts but
 * does not answer: one call holds its loop for timeout_ms (default 200),
 * and then the connection is dropped and the thread backs off (below), so
 * a dead Redis stalls a loop for at most timeout_ms once per backoff
 * period, never per request.
 *
 * Failures.  Any error (connect refused, timeout, a lost connection, a
 * reply of the wrong shape is the caller's) frees the thread's context and
 * sets its next attempt GW_REDIS_BACKOFF_MIN_MS later, doubling up to
 * GW_REDIS_BACKOFF_MAX_MS; until then every call fails at once (the caller
 * answers 503 with Retry-After: redis_sync_retry_after_ms).  The first call
 * after the backoff reconnects (AUTH, SELECT): recovery needs no restart.
 * An error reply from Redis (OOM, a script error) fails the call but keeps
 * the connection.
 *
 * Heartbeat.  Each process names itself with 16 random bytes (hex) and a
 * thread keeps "<prefix>g:<name>" alive with a TTL of lease_ms, renewed
 * every lease_ms / 3 (every GW_REDIS_BACKOFF_MIN_MS while that fails: a
 * Redis restarted without persistence has lost every key).  Other gateways read it to tell a live owner from a
 * dead one: a Judge0 record kept as pending by a process whose key is gone
 * is an orphan (its run died with it); a dead process's session counts stop
 * counting.  So a gateway killed (SIGKILL, a lost host) gives its state
 * back lease_ms after its last beat.  A missing key means "dead" only to a
 * thread whose own connection has been up for lease_ms
 * (redis_sync_settled): right after Redis (re)starts, a live gateway may
 * not have beaten yet.  Each beat also notes the time in "<prefix>g:~last";
 * a beat that finds it older than 2/3 of the lease (Redis was frozen or
 * restarted: every key may have expired at once) sets "<prefix>g:~grace"
 * for a lease, in which the shared queue takes no entry over.  A gateway
 * cut off from Redis longer
 * than lease_ms is taken for dead by the others (its pending records show
 * Internal Error, its sessions stop counting): both err briefly towards
 * the client, and heal when its beats resume (the session counts are
 * republished after each beat: redis_sync_on_beat).
 *
 * Scripts go as EVALSHA, and as EVAL once when Redis answers NOSCRIPT.
 */
#include "redis_sync.h"
#include "gw_limits.h"
#include "log.h"
#include "moat_hex.h"

#include <openssl/rand.h>
#include <openssl/sha.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>

#define RS_MAX_ARGS 16

struct rs {
    char *socket_path, *host, *password, *prefix;
    unsigned port, db;
    uint64_t connect_timeout_ms, timeout_ms, lease_ms;
    char instance[REDIS_SYNC_INSTANCE_LEN + 1];
    char heartbeat_prefix[GW_REDIS_MAX_PREFIX + 3];
    char heartbeat[GW_REDIS_MAX_PREFIX + 3 + REDIS_SYNC_INSTANCE_LEN + 1];
};

static struct rs *the_rs;
static void (*beat_hooks[REDIS_SYNC_MAX_HOOKS])(void);
static unsigned nhooks;

/* This thread's connection and its backoff. */
static __thread redisContext *tls_ctx;
static __thread uint64_t tls_next_attempt, tls_backoff_ms, tls_connected_at;
static __thread int tls_lost;

static uint64_t mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static struct timeval tv_of(uint64_t ms)
{
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};

    return tv;
}

int redis_sync_enabled(void)
{
    return the_rs != NULL;
}

const char *redis_sync_prefix(void)
{
    return the_rs != NULL ? the_rs->prefix : "";
}

const char *redis_sync_instance(void)
{
    return the_rs != NULL ? the_rs->instance : "";
}

const char *redis_sync_heartbeat_prefix(void)
{
    return the_rs != NULL ? the_rs->heartbeat_prefix : "";
}

int redis_sync_on_beat(void (*fn)(void))
{
    if (nhooks == REDIS_SYNC_MAX_HOOKS)
        return -1;
    beat_hooks[nhooks++] = fn;
    return 0;
}

/* Drop this thread's connection and wait before the next attempt. */
static void fail(const char *why)
{
    uint64_t now = mono_ms();

    if (!tls_lost)
        log_warnx("%s: redis: %s: answering \"unavailable\" until it is back", __func__, why);
    tls_lost = 1;
    if (tls_ctx != NULL)
        redisFree(tls_ctx);
    tls_ctx = NULL;
    tls_backoff_ms = tls_backoff_ms == 0 ? GW_REDIS_BACKOFF_MIN_MS : tls_backoff_ms * 2;
    if (tls_backoff_ms > GW_REDIS_BACKOFF_MAX_MS)
        tls_backoff_ms = GW_REDIS_BACKOFF_MAX_MS;
    tls_next_attempt = now + tls_backoff_ms;
}

/* One command on c whose answer must not be an error: 0 or -1. */
static int simple(redisContext *c, const char *fmt, const char *arg)
{
    redisReply *rep = redisCommand(c, fmt, arg);
    int ok = rep != NULL && rep->type != REDIS_REPLY_ERROR;

    if (rep != NULL)
        freeReplyObject(rep);
    return ok ? 0 : -1;
}

/* Connect this thread (AUTH, SELECT): 0, or -1 after fail(). */
static int connect_thread(const struct rs *r)
{
    uint64_t ms = r->connect_timeout_ms < r->timeout_ms ? r->connect_timeout_ms : r->timeout_ms;
    redisContext *c = r->socket_path != NULL ? redisConnectUnixWithTimeout(r->socket_path, tv_of(ms))
                                             : redisConnectWithTimeout(r->host, (int)r->port, tv_of(ms));
    char db[16];

    tls_ctx = c;
    if (c == NULL || c->err != 0) {
        fail(c != NULL ? c->errstr : "out of memory");
        return -1;
    }
    snprintf(db, sizeof(db), "%u", r->db);
    if (redisSetTimeout(c, tv_of(r->timeout_ms)) != REDIS_OK || (r->password != NULL && simple(c, "AUTH %s", r->password) != 0) ||
        (r->db != 0 && simple(c, "SELECT %s", db) != 0)) {
        fail("AUTH or SELECT refused, or no answer");
        return -1;
    }
    if (tls_lost)
        log_info("%s: redis: connected again", __func__);
    tls_connected_at = mono_ms();
    tls_lost = 0;
    tls_backoff_ms = 0;
    return 0;
}

int redis_sync_settled(void)
{
    return tls_ctx != NULL && mono_ms() - tls_connected_at >= the_rs->lease_ms;
}

int redis_sync_ready(void)
{
    if (the_rs == NULL)
        return 0;
    if (tls_ctx != NULL)
        return 1;
    if (mono_ms() < tls_next_attempt)
        return 0;
    return connect_thread(the_rs) == 0;
}

uint64_t redis_sync_retry_after_ms(void)
{
    uint64_t now = mono_ms();

    return tls_next_attempt > now + 1000 ? tls_next_attempt - now : 1000;
}

/* One command: the reply, or NULL (connection failures dropped it). */
static redisReply *command(int argc, const char **argv, const size_t *lens)
{
    redisReply *rep;

    if (!redis_sync_ready())
        return NULL;
    rep = redisCommandArgv(tls_ctx, argc, argv, lens);
    if (rep == NULL) {
        fail(tls_ctx->errstr[0] != '\0' ? tls_ctx->errstr : "no answer");
        return NULL;
    }
    return rep;
}

int redis_sync_ping(void)
{
    const char *av[1] = {"PING"};
    redisReply *rep = command(1, av, NULL);
    int ok = rep != NULL && rep->type == REDIS_REPLY_STATUS && strcmp(rep->str, "PONG") == 0;

    if (rep != NULL)
        freeReplyObject(rep);
    return ok;
}

redisReply *redis_sync_eval(struct redis_sync_script *sc, int nkeys, int nargs, const char *const *argv, const size_t *lens)
{
    const char *av[RS_MAX_ARGS + 3];
    size_t al[RS_MAX_ARGS + 3];
    char nk[12];
    redisReply *rep;

    if (nargs > RS_MAX_ARGS || nkeys > nargs)
        return NULL;
    if (sc->sha[0] == '\0')
        return NULL; /* redis_sync_script_init was not called at start */
    snprintf(nk, sizeof(nk), "%d", nkeys);
    av[0] = "EVALSHA";
    av[1] = sc->sha;
    av[2] = nk;
    for (int i = 0; i < nargs; i++) {
        av[3 + i] = argv[i];
        al[3 + i] = lens != NULL ? lens[i] : strlen(argv[i]);
    }
    al[0] = 7;
    al[1] = strlen(sc->sha);
    al[2] = strlen(nk);
    if ((rep = command(3 + nargs, av, al)) != NULL && rep->type == REDIS_REPLY_ERROR && strncmp(rep->str, "NOSCRIPT", 8) == 0) {
        freeReplyObject(rep);
        av[0] = "EVAL";
        al[0] = 4;
        av[1] = sc->body;
        al[1] = strlen(sc->body);
        rep = command(3 + nargs, av, al);
    }
    if (rep != NULL && rep->type == REDIS_REPLY_ERROR) {
        log_warnx("%s: %s", __func__, rep->str);
        freeReplyObject(rep);
        return NULL;
    }
    return rep;
}

void redis_sync_script_init(struct redis_sync_script *sc)
{
    unsigned char d[SHA_DIGEST_LENGTH];

    SHA1((const unsigned char *)sc->body, strlen(sc->body), d);
    moat_hex_encode(d, sizeof(d), sc->sha);
}

/* ------------------------------------------------------------ heartbeat */

/* KEYS: this process's key, the last beat's time, the grace.  ARGV:
 * lease_ms.  A gap since any process's last beat longer than 2/3 of the
 * lease (they beat every third) means Redis itself was away (stopped,
 * frozen, restarted): a lease of grace, in which no heartbeat's absence
 * means death (the shared queue's sweep, queue_redis.c, reads both). */
static const char beat_script[] =
    "local lease = tonumber(ARGV[1])\n"
    "redis.call('SET', KEYS[1], '1', 'PX', lease)\n"
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "local last = tonumber(redis.call('GET', KEYS[2]) or '0')\n"
    "if last > 0 and now - last > lease * 2 / 3 then redis.call('SET', KEYS[3], '1', 'PX', lease) end\n"
    "redis.call('SET', KEYS[2], now)\n"
    "return 1\n";

/* This process's key, lease_ms more: 0, or -1.  The beat thread has no
 * requests to protect: it skips the backoff and tries at once. */
static int beat(const struct rs *r)
{
    char lease[24], last[sizeof(r->heartbeat_prefix) + 8], grace[sizeof(r->heartbeat_prefix) + 8];
    const char *av[7] = {"EVAL", beat_script, "3", r->heartbeat, last, grace, lease};
    redisReply *rep;
    int ok;

    snprintf(lease, sizeof(lease), "%llu", (unsigned long long)r->lease_ms);
    snprintf(last, sizeof(last), "%s" GW_REDIS_BEAT_LAST, r->heartbeat_prefix);
    snprintf(grace, sizeof(grace), "%s" GW_REDIS_BEAT_GRACE, r->heartbeat_prefix);
    tls_next_attempt = 0;
    if ((rep = command(7, av, NULL)) == NULL)
        return -1;
    ok = rep->type == REDIS_REPLY_INTEGER;
    freeReplyObject(rep);
    return ok ? 0 : -1;
}

static void *heartbeat_main(void *arg)
{
    const struct rs *r = arg;
    uint64_t wait_ms;

    for (;;) {
        wait_ms = r->lease_ms / 3;
        if (beat(r) != 0 && wait_ms > GW_REDIS_BACKOFF_MIN_MS)
            wait_ms = GW_REDIS_BACKOFF_MIN_MS; /* a Redis back from a restart has lost the key: soon */
        else
            for (unsigned i = 0; i < nhooks; i++)
                beat_hooks[i]();
        (void)poll(NULL, 0, (int)wait_ms);
    }
    return NULL;
}

/* ------------------------------------------------------------ start */

static int copy_opt(const char *s, char **out)
{
    return s == NULL || (*out = strdup(s)) != NULL ? 0 : -1;
}

static void rs_free(struct rs *r)
{
    if (r == NULL)
        return;
    free(r->socket_path);
    free(r->host);
    free(r->password);
    free(r->prefix);
    free(r);
}

int redis_sync_start(const struct redis_sync_options *o, char *err, size_t errlen)
{
    unsigned char id[REDIS_SYNC_INSTANCE_LEN / 2];
    sigset_t all, old;
    pthread_attr_t attr;
    pthread_t t;
    struct rs *r;
    int rc;

    if ((o->socket_path == NULL) == (o->host == NULL) || o->prefix == NULL || strlen(o->prefix) > GW_REDIS_MAX_PREFIX ||
        o->timeout_ms == 0 || o->lease_ms < 3) {
        snprintf(err, errlen, "redis: bad options");
        return -1;
    }
    if ((r = calloc(1, sizeof(*r))) == NULL || copy_opt(o->socket_path, &r->socket_path) != 0 || copy_opt(o->host, &r->host) != 0 ||
        copy_opt(o->password, &r->password) != 0 || copy_opt(o->prefix, &r->prefix) != 0 || RAND_bytes(id, sizeof(id)) != 1) {
        rs_free(r);
        snprintf(err, errlen, "redis: out of memory or randomness");
        return -1;
    }
    r->port = o->port;
    r->db = o->db;
    r->connect_timeout_ms = o->connect_timeout_ms != 0 ? o->connect_timeout_ms : o->timeout_ms;
    r->timeout_ms = o->timeout_ms;
    r->lease_ms = o->lease_ms;
    moat_hex_encode(id, sizeof(id), r->instance);
    snprintf(r->heartbeat_prefix, sizeof(r->heartbeat_prefix), "%sg:", r->prefix);
    snprintf(r->heartbeat, sizeof(r->heartbeat), "%s%s", r->heartbeat_prefix, r->instance);
    the_rs = r;
    /* the thread takes no signal: SIGHUP and SIGTERM are the main thread's
     * (server.c blocks them later, for itself and the workers it starts) */
    sigfillset(&all);
    if (pthread_attr_init(&attr) != 0 || pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED) != 0 ||
        pthread_sigmask(SIG_SETMASK, &all, &old) != 0) {
        rc = -1;
    } else {
        rc = pthread_create(&t, &attr, heartbeat_main, r);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    }
    if (rc != 0) {
        the_rs = NULL;
        rs_free(r);
        snprintf(err, errlen, "redis: cannot start the heartbeat thread");
        return -1;
    }
    pthread_attr_destroy(&attr);
    return 0;
}
