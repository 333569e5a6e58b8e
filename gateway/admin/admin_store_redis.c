/*
 * admin_store_redis.c - the admin store in Redis, shared by every gateway
 * configured with the same Redis and prefix (control.store_backend: redis).
 *
 * Theory of operation
 * -------------------
 * Redis holds the store; each gateway's supervisor keeps a copy of it in
 * the store file (control.store), which its gateway loads at start and on
 * every reload exactly as with the file store (config_store.c).  In Redis,
 * P being the limiter section's prefix:
 *
 *   P admin:store     a hash: version (1, 2, ...) and doc (the JSON text)
 *   P admin:lock      a supervisor's token while it changes the store
 *   P admin:changed   the channel each new version is published on
 *   P admin:used      a hash: key id -> when it last authenticated a
 *                     request (unix seconds, to the minute), any gateway
 *                     (note_used: a script keeps the later time)
 *
 * A change (control.c's steps, through admin_store.h's operations):
 *
 *   lock     a script: SET P admin:lock TOKEN NX PX GW_ADMIN_REDIS_LOCK_MS,
 *            or, if the lock already holds TOKEN, extend it.  TOKEN is
 *            random, one per supervisor for its life (it makes one change
 *            at a time): a lock whose answer was lost (a timeout after
 *            Redis took the SET) is retaken by this supervisor's next
 *            change instead of shutting everyone out until it expires.
 *            Asked again every GW_ADMIN_REDIS_LOCK_POLL_MS for at most
 *            GW_ADMIN_REDIS_LOCK_WAIT_MS (another gateway's change in
 *            progress); then the copy's file lock
 *   read     HMGET version doc: the document and the version it has
 *   stage    the candidate in the copy's candidate file (the parser checks
 *            it there, as with the file store)
 *   commit   one script: if the version is still the one read, SET the
 *            new document with version + 1 and PUBLISH the new version;
 *            else refuse (nothing lost: moatctl says try again).  Then the
 *            candidate becomes the copy (rename)
 *   unlock   the token deleted only if it is still ours (a script: a lock
 *            that expired and was taken by another is not ours to drop)
 * The version check, not the lock, is what guarantees no change is lost:
 * the lock only makes concurrent moatctl runs wait instead of fail.
 *
 * Following (admin_store_redis_follow, from the supervisor's poll loop):
 * a second connection is SUBSCRIBEd to P admin:changed and its descriptor
 * polled; a message, or every GW_ADMIN_REDIS_RESYNC_MS regardless (a
 * message lost while disconnected, a change made in Redis by hand), makes
 * the supervisor compare Redis' version with its copy's (HGET, cheap) and
 * fetch the document when they differ.  control.c then checks it with
 * the configuration parser, writes the copy and reloads the gateway; a
 * document the parser refuses is logged and skipped (the gateway keeps
 * its running state) until another version comes.  At start the copy's
 * version is unknown: the first document fetched is compared with the
 * copy and applied only if they differ.
 *
 * An empty Redis (a new deployment, or a Redis that lost its data) is
 * seeded from the copy when the copy holds anything, by the same script
 * (expected version 0: of several gateways seeding at once one wins and
 * the others follow it).  So switching a gateway from the file store to
 * Redis keeps its store; a Redis that lost its data gets the first
 * reconnecting gateway's copy, which may be older than what was lost
 * (give Redis persistence: moatctl(8)).
 *
 * Unreachable Redis.  The supervisor's calls go through the gateway's
 * one Redis client (store/redis_client.c: its timeouts, backoff,
 * reconnection and Sentinels), on a thread of the supervisor's own that
 * runs an event loop with two connections: commands, and the
 * subscription.  The supervisor stays single-threaded in what it does: a
 * call is posted to the thread and waited for (a condition variable,
 * bounded by the section's connect_timeout_ms + timeout_ms and a slack),
 * and the thread turns each published message, and each (re)subscription,
 * into a byte on a pipe the poll loop watches.  So no call stalls the
 * control socket longer than those timeouts, and a store named through
 * limiter.redis.sentinels follows a failover as every other use of Redis
 * does.  While Redis is down a call fails at once with why (the client's
 * last failure: a refused AUTH, the server gone, no answer in time); the
 * connections come back on the client's schedule (backoff doubling to
 * GW_REDIS_BACKOFF_MAX_MS); the resubscription wakes the supervisor,
 * which resyncs.  Meanwhile the gateway keeps the copy it has (its last
 * state) and moatctl's changes fail with a message naming Redis.  Logged
 * once per outage.
 *
 * The thread is started on first use, in the supervisor (after the
 * gateway was forked: no thread crosses a fork), and lives as long as it.
 */
#include "admin_store_redis.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <h2o.h>
#include <h2o/multithread.h>
#include <hiredis/hiredis.h>
#include <openssl/rand.h>

#include "admin.h"
#include "common/gw_limits.h"
#include "log.h"
#include "moat_errf.h"
#include "moat_hex.h"
#include "limits/ratelimit.h"
#include "store/redis_client.h"
#include "store/redis_options.h"

#define AR_KEY_MAX     (GW_REDIS_MAX_PREFIX + 16)
#define AR_TOKEN_LEN   32   /* hex digits of the lock's random token */
#define AR_MAX_ARGS    8    /* of one call */
#define AR_SLACK_MS    1000 /* a call's wait beyond the client's own timeouts (which answer it first) */
#define AR_WHERE_MAX   (GW_MAX_PATH_LEN + 96)
#define AR_REPLY_DEPTH 2 /* arrays of values: all the store's answers are */
/* A call's argc and argv from its words: the count cannot disagree with the list. */
#define AR_ARGS(...)                                                                                                               \
    (int)(sizeof((const char *[]){__VA_ARGS__}) / sizeof(const char *)), (const char *[])                                          \
    {                                                                                                                              \
        __VA_ARGS__                                                                                                                \
    }

/* KEYS: the store hash.  ARGV: the version read, the new document, the channel. */
static struct redis_script commit_script = {"local v = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')\n"
                                            "if v ~= tonumber(ARGV[1]) then return {0, v} end\n"
                                            "v = tostring(v + 1)\n"
                                            "redis.call('HSET', KEYS[1], 'version', v, 'doc', ARGV[2])\n"
                                            "redis.call('PUBLISH', ARGV[3], v)\n"
                                            "return {1, v}\n",
                                            "", NULL};

/* KEYS: the lock.  ARGV: our token, its life in ms.  1: ours now. */
static struct redis_script lock_script = {
    "if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end\n"
    "if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1 end\n"
    "return 0\n",
    "", NULL};

/* KEYS: the last-use hash.  ARGV: a JSON object of key id -> unix seconds
 * (checked before it is sent).  Each field keeps the later time. */
static struct redis_script used_script = {"for id, t in pairs(cjson.decode(ARGV[1])) do\n"
                                          "  if tonumber(redis.call('HGET', KEYS[1], id) or '-1') < t then\n"
                                          "    redis.call('HSET', KEYS[1], id, string.format('%d', t))\n"
                                          "  end\n"
                                          "end\n"
                                          "return 1\n",
                                          "", NULL};

/* KEYS: the lock.  ARGV: our token. */
static struct redis_script unlock_script = {"if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end\n"
                                            "return 0\n",
                                            "", NULL};

/* A reply, copied off the Redis thread (hiredis' is valid during its callback only). */
struct ar_reply {
    int type; /* REDIS_REPLY_* */
    long long integer;
    char *str; /* STRING, STATUS, ERROR: NUL-terminated */
    size_t len;
    size_t elements;
    struct ar_reply **element;
};

/* One call, from the supervisor to the Redis thread and back. */
struct ar_call {
    h2o_multithread_message_t super;
    struct admin_redis *r;
    struct redis_script *script; /* NULL: a command */
    int nkeys;                   /* a script's */
    int argc;
    char *copy[AR_MAX_ARGS];       /* the arguments, owned */
    const char *argv[AR_MAX_ARGS]; /* the same, as the client takes them */
    /* the answer, under r->mu */
    int done, abandoned;
    struct ar_reply *reply;         /* NULL: none came */
    char why[REDIS_CLIENT_WHY_MAX]; /* why none came */
};

struct admin_redis {
    struct redis_client *rc;
    char where[AR_WHERE_MAX];
    char key[AR_KEY_MAX], lock_key[AR_KEY_MAX], channel[AR_KEY_MAX], used_key[AR_KEY_MAX];
    uint64_t call_wait_ms; /* a call's bound: connect_timeout_ms + timeout_ms + AR_SLACK_MS */
    /* the Redis thread (started: on first use) */
    int started, subscribed;
    h2o_evloop_t *loop;
    h2o_multithread_queue_t *queue;
    h2o_multithread_receiver_t receiver;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int wake[2];   /* the thread's wake-ups: published, (re)subscribed */
    int connected; /* the last call was answered (__atomic: the thread writes it) */
    /* the supervisor's */
    int lost; /* an outage is being logged */
    uint64_t resync_at;
    int known;                    /* applied is the copy's version */
    uint64_t applied;             /* the version the copy holds */
    uint64_t refused;             /* a version the parser refused here (0: none) */
    uint64_t version;             /* what read saw: what commit expects */
    char *staged_text;            /* stage's document, for commit */
    char token[AR_TOKEN_LEN + 1]; /* this supervisor's value of the lock */
    int locked;                   /* we hold the lock (as far as we know) */
};

/* ---------------------------------------------------------------- replies */

static void reply_free(struct ar_reply *x)
{
    if (x == NULL)
        return;
    for (size_t i = 0; i < x->elements; i++)
        reply_free(x->element[i]);
    free(x->element);
    free(x->str);
    free(x);
}

/* A copy of rep, or NULL out of memory (or nested deeper than the store's answers are). */
static struct ar_reply *reply_copy(const redisReply *rep, int depth)
{
    struct ar_reply *x = calloc(1, sizeof(*x));

    if (x == NULL || depth > AR_REPLY_DEPTH)
        goto fail;
    x->type = rep->type;
    x->integer = rep->integer;
    if (rep->type == REDIS_REPLY_STRING || rep->type == REDIS_REPLY_STATUS || rep->type == REDIS_REPLY_ERROR) {
        if ((x->str = malloc(rep->len + 1)) == NULL)
            goto fail;
        memcpy(x->str, rep->str, rep->len);
        x->str[rep->len] = '\0';
        x->len = rep->len;
    }
    if (rep->type == REDIS_REPLY_ARRAY && rep->elements > 0) {
        if ((x->element = calloc(rep->elements, sizeof(*x->element))) == NULL)
            goto fail;
        for (; x->elements < rep->elements; x->elements++)
            if ((x->element[x->elements] = reply_copy(rep->element[x->elements], depth + 1)) == NULL)
                goto fail;
    }
    return x;
fail:
    reply_free(x);
    return NULL;
}

/* ---------------------------------------------------------------- the Redis thread */

static void call_free(struct ar_call *k)
{
    for (int i = 0; i < k->argc; i++)
        free(k->copy[i]);
    reply_free(k->reply);
    free(k);
}

/* On the thread: k's answer (rep NULL: none, why says why) to the supervisor waiting for it, or to nobody. */
static void call_done(struct ar_call *k, const redisReply *rep, const char *why)
{
    struct admin_redis *r = k->r;

    __atomic_store_n(&r->connected, rep != NULL, __ATOMIC_RELAXED);
    pthread_mutex_lock(&r->mu);
    if (k->abandoned) {
        pthread_mutex_unlock(&r->mu);
        call_free(k);
        return;
    }
    if (rep != NULL && (k->reply = reply_copy(rep, 0)) == NULL)
        why = "out of memory for the answer";
    if (k->reply == NULL)
        snprintf(k->why, sizeof(k->why), "%s", why != NULL && why[0] != '\0' ? why : "no answer");
    k->done = 1;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

static void on_answer(void *arg, const redisReply *reply)
{
    struct ar_call *k = arg;
    const struct redis_conn *c = redis_client_thread_conn(k->r->rc);

    call_done(k, reply, reply == NULL && c != NULL ? redis_conn_why(c) : NULL);
}

static void call_send(struct ar_call *k)
{
    struct admin_redis *r = k->r;
    struct redis_conn *c = redis_client_conn(r->rc, r->loop);
    int sent;

    if (c == NULL) {
        call_done(k, NULL, "out of memory");
        return;
    }
    if (k->script != NULL)
        sent = redis_conn_eval(c, k->script, k->nkeys, k->argc, k->argv, NULL, on_answer, k);
    else
        sent = redis_conn_command(c, k->argc, k->argv, NULL, on_answer, k);
    if (sent != 0)
        call_done(k, NULL, redis_conn_why(c)[0] != '\0' ? redis_conn_why(c) : "not connected yet (finding the primary)");
}

/* The supervisor's calls, posted to the thread's loop. */
static void on_calls(h2o_multithread_receiver_t *receiver, h2o_linklist_t *messages)
{
    (void)receiver;
    while (!h2o_linklist_is_empty(messages)) {
        struct ar_call *k = H2O_STRUCT_FROM_MEMBER(struct ar_call, super.link, messages->next);
        h2o_linklist_unlink(&k->super.link);
        call_send(k);
    }
}

/* The subscription: a change was published (payload), or the
 * subscription was made again (NULL: messages may have been missed).
 * Either way the supervisor compares versions now. */
static void on_published(void *arg, const char *payload, size_t len)
{
    struct admin_redis *r = arg;
    ssize_t n;

    (void)len;
    if (payload == NULL)
        __atomic_store_n(&r->connected, 1, __ATOMIC_RELAXED);
    n = write(r->wake[1], "", 1); /* full pipe: a wake-up is pending already */
    (void)n;
}

static void *thread_main(void *arg)
{
    struct admin_redis *r = arg;

    for (;;)
        h2o_evloop_run(r->loop, INT32_MAX);
    return NULL;
}

/* The thread, its loop and the subscription; on first use.  0 or -1 with err. */
static int thread_start(struct admin_redis *r, char *err, size_t errlen)
{
    sigset_t all, old;
    pthread_attr_t attr;
    pthread_t t;
    int e;

    if (r->started)
        return 0;
    if (r->wake[0] < 0 && pipe2(r->wake, O_CLOEXEC | O_NONBLOCK) != 0)
        return moat_errf(err, errlen, "the admin store in Redis: pipe: %s", strerror(errno));
    if (r->loop == NULL && (r->loop = h2o_evloop_create()) == NULL)
        return moat_errf(err, errlen, "the admin store in Redis: out of memory");
    if (r->queue == NULL) {
        if ((r->queue = h2o_multithread_create_queue(r->loop)) == NULL)
            return moat_errf(err, errlen, "the admin store in Redis: out of memory");
        h2o_multithread_register_receiver(r->queue, &r->receiver, on_calls);
    }
    if (!r->subscribed) {
        if (redis_client_subscribe(r->rc, r->loop, r->channel, on_published, r) != 0)
            return moat_errf(err, errlen, "the admin store in Redis: out of memory");
        r->subscribed = 1;
    }
    /* the thread takes no signal: the supervisor's signalfd has them all */
    sigfillset(&all);
    if ((e = pthread_attr_init(&attr)) != 0)
        return moat_errf(err, errlen, "the admin store in Redis: cannot start its thread: %s", strerror(e));
    if ((e = pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED)) == 0 &&
        (e = pthread_sigmask(SIG_SETMASK, &all, &old)) == 0) {
        e = pthread_create(&t, &attr, thread_main, r);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    }
    pthread_attr_destroy(&attr);
    if (e != 0)
        return moat_errf(err, errlen, "the admin store in Redis: cannot start its thread: %s", strerror(e));
    r->started = 1;
    return 0;
}

/* ---------------------------------------------------------------- calls */

/* Wait for k until the bound; 1 answered, 0 not (k is then the thread's to free). */
static int call_wait(struct admin_redis *r, struct ar_call *k)
{
    struct timespec until;
    int done;

    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += (time_t)(r->call_wait_ms / 1000);
    until.tv_nsec += (long)(r->call_wait_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&r->mu);
    while (!k->done && pthread_cond_timedwait(&r->cv, &r->mu, &until) != ETIMEDOUT)
        ;
    done = k->done;
    if (!done)
        k->abandoned = 1;
    pthread_mutex_unlock(&r->mu);
    return done;
}

/* Redis did not answer (why): logged once per outage. */
static void store_unreachable(struct admin_redis *r, const char *why)
{
    __atomic_store_n(&r->connected, 0, __ATOMIC_RELAXED);
    if (!r->lost)
        log_warnx("%s: the admin store in Redis at %s: %s; the gateway keeps its copy, moatctl changes fail until it answers",
                  __func__, r->where, why);
    r->lost = 1;
}

static void store_answers(struct admin_redis *r)
{
    if (r->lost) {
        log_info("%s: the admin store in Redis at %s answers again: resyncing", __func__, r->where);
        r->resync_at = rl_monotonic_ms();
    }
    r->lost = 0;
}

/*
 * One call (script NULL: argv is a command; else script's nkeys keys then
 * its arguments) on the Redis thread, waited for.  The reply (the
 * caller's to reply_free), or NULL with err: Redis unreachable (naming
 * it), or its error reply.
 */
static struct ar_reply *call(struct admin_redis *r, struct redis_script *script, int nkeys, int argc, const char **argv, char *err,
                             size_t errlen)
{
    struct ar_call *k;
    struct ar_reply *rep;
    char why[REDIS_CLIENT_WHY_MAX + 64];

    if (thread_start(r, err, errlen) != 0)
        return NULL;
    if (argc > AR_MAX_ARGS || (k = calloc(1, sizeof(*k))) == NULL) {
        moat_errf(err, errlen, "the admin store in Redis: out of memory");
        return NULL;
    }
    k->r = r;
    k->script = script;
    k->nkeys = nkeys;
    for (; k->argc < argc; k->argc++)
        if ((k->argv[k->argc] = k->copy[k->argc] = strdup(argv[k->argc])) == NULL) {
            call_free(k);
            moat_errf(err, errlen, "the admin store in Redis: out of memory");
            return NULL;
        }
    h2o_multithread_send_message(&r->receiver, &k->super);
    if (!call_wait(r, k)) {
        snprintf(why, sizeof(why), "no answer within %llu ms", (unsigned long long)r->call_wait_ms);
        store_unreachable(r, why);
        moat_errf(err, errlen, "the admin store in Redis at %s is unreachable: %s", r->where, why);
        return NULL;
    }
    rep = k->reply;
    k->reply = NULL;
    snprintf(why, sizeof(why), "%s", k->why);
    call_free(k);
    if (rep == NULL) {
        store_unreachable(r, why);
        moat_errf(err, errlen, "the admin store in Redis at %s is unreachable: %s", r->where, why);
        return NULL;
    }
    store_answers(r);
    if (rep->type == REDIS_REPLY_ERROR) {
        moat_errf(err, errlen, "the admin store in Redis at %s: %s refused: %.*s", r->where, script != NULL ? "a script" : argv[0],
                  (int)(rep->len > 160 ? 160 : rep->len), rep->str);
        reply_free(rep);
        return NULL;
    }
    return rep;
}

/* ---------------------------------------------------------------- the document */

/* Redis' text of a store: JSON, no duplicate names, the right shape.  The document, or NULL with err. */
static json_t *doc_parse(const char *text, size_t len, uint64_t version, char *err, size_t errlen)
{
    json_error_t je;
    json_t *doc;
    char why[256];

    if (len > GW_STORE_MAX_BYTES) {
        moat_errf(err, errlen, "version %llu in Redis is larger than %u bytes", (unsigned long long)version, GW_STORE_MAX_BYTES);
        return NULL;
    }
    if ((doc = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je)) == NULL) {
        moat_errf(err, errlen, "version %llu in Redis is not valid JSON (%s)", (unsigned long long)version, je.text);
        return NULL;
    }
    if (admin_store_check(doc, why, sizeof(why)) != 0) {
        json_decref(doc);
        moat_errf(err, errlen, "version %llu in Redis: %s", (unsigned long long)version, why);
        return NULL;
    }
    return doc;
}

/* A reply's integer (an integer reply, or a string of digits); 0 for nil. */
static int reply_u64(const struct ar_reply *rep, uint64_t *out)
{
    char *end;

    if (rep->type == REDIS_REPLY_NIL) {
        *out = 0;
        return 0;
    }
    if (rep->type == REDIS_REPLY_INTEGER && rep->integer >= 0) {
        *out = (uint64_t)rep->integer;
        return 0;
    }
    if (rep->type != REDIS_REPLY_STRING || rep->len == 0 || rep->str[0] < '0' || rep->str[0] > '9')
        return -1;
    errno = 0;
    *out = strtoull(rep->str, &end, 10);
    return errno == 0 && end == rep->str + rep->len ? 0 : -1;
}

/* The commit script: 1 with *version the new one, 0 when Redis had another version (*version), -1 with err. */
static int run_commit(struct admin_redis *r, uint64_t expect, const char *text, uint64_t *version, char *err, size_t errlen)
{
    char exp[24];
    struct ar_reply *rep;
    uint64_t done = 0;
    int rc = -1;

    snprintf(exp, sizeof(exp), "%llu", (unsigned long long)expect);
    if ((rep = call(r, &commit_script, 1, AR_ARGS(r->key, exp, text, r->channel), err, errlen)) == NULL)
        return -1;
    if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 && reply_u64(rep->element[0], &done) == 0 &&
        reply_u64(rep->element[1], version) == 0)
        rc = done == 1;
    else
        moat_errf(err, errlen, "the admin store in Redis: an unexpected answer to the commit");
    reply_free(rep);
    return rc;
}

static int doc_has_entries(const json_t *doc)
{
    return json_array_size(json_object_get(doc, "tenants")) + json_array_size(json_object_get(doc, "jwt_issuers")) +
               json_array_size(json_object_get(doc, "keys")) >
           0;
}

/* Redis holds no store: the copy becomes version 1 if it holds anything (moatctl(8): a new deployment, a lost Redis). */
static int seed(struct admin_store *s, char *err, size_t errlen)
{
    struct admin_redis *r = s->redis;
    json_t *copy = admin_store_file_ops.read(s, err, errlen);
    char *text;
    uint64_t v = 0;
    int rc;

    if (copy == NULL)
        return -1;
    if (!doc_has_entries(copy)) {
        json_decref(copy);
        return 0;
    }
    text = json_dumps(copy, JSON_COMPACT | JSON_ENSURE_ASCII | JSON_PRESERVE_ORDER);
    json_decref(copy);
    if (text == NULL)
        return moat_errf(err, errlen, "out of memory");
    if ((rc = run_commit(r, 0, text, &v, err, errlen)) == 1)
        log_info("%s: Redis held no admin store: seeded it with this gateway's copy %s (version %llu)", __func__, s->path,
                 (unsigned long long)v);
    free(text);
    return rc < 0 ? -1 : 0; /* 0: another gateway seeded it first */
}

/* The document in Redis and its version (0 with an empty store: none yet, nothing to seed).  0 or -1 with err. */
static int fetch(struct admin_store *s, uint64_t *version, json_t **doc, char *err, size_t errlen)
{
    struct admin_redis *r = s->redis;
    struct ar_reply *rep = NULL;

    *version = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        if ((rep = call(r, NULL, 0, AR_ARGS("HMGET", r->key, "version", "doc"), err, errlen)) == NULL)
            return -1;
        if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 || reply_u64(rep->element[0], version) != 0 ||
            (*version != 0 && rep->element[1]->type != REDIS_REPLY_STRING)) {
            reply_free(rep);
            return moat_errf(err, errlen, "the admin store in Redis (%s) is not a version and a document", r->key);
        }
        if (*version != 0)
            break;
        reply_free(rep);
        rep = NULL;
        if (attempt == 0 && seed(s, err, errlen) != 0)
            return -1;
    }
    if (*version == 0) {
        *doc = admin_store_empty();
        return *doc != NULL ? 0 : moat_errf(err, errlen, "out of memory");
    }
    *doc = doc_parse(rep->element[1]->str, rep->element[1]->len, *version, err, errlen);
    reply_free(rep);
    return *doc != NULL ? 0 : -1;
}

/* ---------------------------------------------------------------- the store's operations */

static int redis_lock(struct admin_store *s, char *err, size_t errlen)
{
    struct admin_redis *r = s->redis;
    char px[24];
    uint64_t deadline = rl_monotonic_ms() + GW_ADMIN_REDIS_LOCK_WAIT_MS;
    struct timespec pause = {0, GW_ADMIN_REDIS_LOCK_POLL_MS * 1000 * 1000};

    snprintf(px, sizeof(px), "%d", GW_ADMIN_REDIS_LOCK_MS);
    for (;;) {
        struct ar_reply *rep = call(r, &lock_script, 1, AR_ARGS(r->lock_key, r->token, px), err, errlen);
        int got = rep != NULL && rep->type == REDIS_REPLY_INTEGER && rep->integer == 1;
        if (rep == NULL)
            return -1;
        reply_free(rep);
        if (got)
            break;
        if (rl_monotonic_ms() >= deadline)
            return moat_errf(err, errlen, "another gateway's change held the admin store in Redis for more than %d ms: try again",
                             GW_ADMIN_REDIS_LOCK_WAIT_MS);
        nanosleep(&pause, NULL);
    }
    r->locked = 1;
    if (admin_store_file_ops.lock(s, err, errlen) != 0) {
        s->ops->unlock(s);
        return -1;
    }
    return 0;
}

static json_t *redis_read(struct admin_store *s, char *err, size_t errlen)
{
    json_t *doc = NULL;

    return fetch(s, &s->redis->version, &doc, err, errlen) == 0 ? doc : NULL;
}

static int redis_stage(struct admin_store *s, const json_t *doc, char *err, size_t errlen)
{
    struct admin_redis *r = s->redis;

    free(r->staged_text);
    if ((r->staged_text = json_dumps(doc, JSON_COMPACT | JSON_ENSURE_ASCII | JSON_PRESERVE_ORDER)) == NULL)
        return moat_errf(err, errlen, "out of memory");
    return admin_store_file_ops.stage(s, doc, err, errlen);
}

static int redis_commit(struct admin_store *s, char *err, size_t errlen)
{
    struct admin_redis *r = s->redis;
    uint64_t v = 0;
    int rc;

    if (r->staged_text == NULL)
        return moat_errf(err, errlen, "nothing staged");
    if ((rc = run_commit(r, r->version, r->staged_text, &v, err, errlen)) < 0)
        return -1;
    if (rc == 0)
        return moat_errf(err, errlen, "the admin store in Redis changed meanwhile (version %llu, read %llu): try again",
                         (unsigned long long)v, (unsigned long long)r->version);
    log_info("%s: the admin store in Redis is at version %llu", __func__, (unsigned long long)v);
    if (admin_store_file_ops.commit(s, err, errlen) != 0) {
        r->known = 0; /* the copy is behind: the next resync writes it */
        return -1;
    }
    admin_store_redis_applied(s, v, 1);
    return 0;
}

static void redis_unlock(struct admin_store *s)
{
    struct admin_redis *r = s->redis;
    char err[512];
    struct ar_reply *rep;

    admin_store_file_ops.unlock(s);
    free(r->staged_text);
    r->staged_text = NULL;
    if (!r->locked)
        return;
    /* unreachable now: this supervisor's next change retakes it, or it expires */
    if ((rep = call(r, &unlock_script, 1, AR_ARGS(r->lock_key, r->token), err, sizeof(err))) != NULL)
        reply_free(rep);
    r->locked = 0;
}

static int redis_note_used(struct admin_store *s, json_t *used, char *err, size_t errlen)
{
    struct admin_redis *r = s->redis;
    struct ar_reply *rep;
    char *text;

    if (admin_used_check(used, err, errlen) != 0)
        return -1;
    if ((text = json_dumps(used, JSON_COMPACT)) == NULL)
        return moat_errf(err, errlen, "out of memory");
    rep = call(r, &used_script, 1, AR_ARGS(r->used_key, text), err, errlen);
    free(text);
    if (rep == NULL)
        return -1;
    reply_free(rep);
    return 0;
}

/* HGETALL's fields and values, each checked (a hash edited by hand that
 * holds something else is named, not believed). */
static json_t *redis_read_used(struct admin_store *s, char *err, size_t errlen)
{
    struct admin_redis *r = s->redis;
    struct ar_reply *rep;
    json_t *used = json_object();
    uint64_t t;
    int bad;

    if (used == NULL)
        return moat_errf(err, errlen, "out of memory"), NULL;
    if ((rep = call(r, NULL, 0, AR_ARGS("HGETALL", r->used_key), err, errlen)) == NULL) {
        json_decref(used);
        return NULL;
    }
    bad = rep->type != REDIS_REPLY_ARRAY || rep->elements % 2 != 0;
    for (size_t i = 0; !bad && i + 1 < rep->elements; i += 2)
        bad = rep->element[i]->type != REDIS_REPLY_STRING || reply_u64(rep->element[i + 1], &t) != 0 ||
              json_object_set_new(used, rep->element[i]->str, json_integer((json_int_t)t)) != 0;
    reply_free(rep);
    if (bad) {
        json_decref(used);
        return moat_errf(err, errlen, "the admin store in Redis: %s holds something that is not keys' last use", r->used_key), NULL;
    }
    if (admin_used_check(used, err, errlen) != 0) {
        char why[256];
        snprintf(why, sizeof(why), "%s", err);
        moat_errf(err, errlen, "the admin store in Redis: %s: %s", r->used_key, why);
        json_decref(used);
        return NULL;
    }
    return used;
}

static const struct admin_store_ops redis_ops = {redis_lock,   redis_read,      redis_stage,    redis_commit,
                                                 redis_unlock, redis_note_used, redis_read_used};

/* Where the store is, for messages and moatctl status. */
static void name_where(struct admin_redis *r, const struct gw_limiter_config *l)
{
    if (l->socket != NULL)
        snprintf(r->where, sizeof(r->where), "unix:%s", l->socket);
    else if (l->nsentinels == 0)
        snprintf(r->where, sizeof(r->where), "%s:%u", l->host, l->port);
    else
        snprintf(r->where, sizeof(r->where), "the primary of %s (%zu Sentinels)", l->master, l->nsentinels);
}

static int redis_state_init(struct admin_redis *r, const struct gw_limiter_config *l)
{
    struct redis_sentinel_addr sentinels[GW_REDIS_MAX_SENTINELS];
    struct redis_client_options o;
    unsigned char raw[AR_TOKEN_LEN / 2];
    pthread_condattr_t ca;
    char err[256];

    r->wake[0] = r->wake[1] = -1;
    if (RAND_bytes(raw, sizeof(raw)) != 1)
        return -1;
    moat_hex_encode(raw, sizeof(raw), r->token);
    name_where(r, l);
    r->call_wait_ms = l->connect_timeout_ms + l->timeout_ms + AR_SLACK_MS;
    snprintf(r->key, sizeof(r->key), "%sadmin:store", l->prefix);
    snprintf(r->lock_key, sizeof(r->lock_key), "%sadmin:lock", l->prefix);
    snprintf(r->channel, sizeof(r->channel), "%sadmin:changed", l->prefix);
    snprintf(r->used_key, sizeof(r->used_key), "%sadmin:used", l->prefix);
    if (pthread_mutex_init(&r->mu, NULL) != 0)
        return -1;
    if (pthread_condattr_init(&ca) != 0 || pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) != 0 ||
        pthread_cond_init(&r->cv, &ca) != 0)
        return -1;
    pthread_condattr_destroy(&ca);
    gw_redis_options(l, "the admin store's changes", sentinels, &o);
    if ((r->rc = redis_client_new(&o, err, sizeof(err))) == NULL) {
        log_warnx("%s: the admin store in Redis: %s", __func__, err);
        return -1;
    }
    redis_client_add_script(r->rc, &commit_script);
    redis_client_add_script(r->rc, &lock_script);
    redis_client_add_script(r->rc, &unlock_script);
    redis_client_add_script(r->rc, &used_script);
    return 0;
}

int admin_store_redis_init(struct admin_store *s, const char *path, uid_t owner, gid_t group, const struct gw_limiter_config *l)
{
    struct admin_redis *r;

    if (admin_store_file_init(s, path, owner, group) != 0)
        return -1;
    if ((r = calloc(1, sizeof(*r))) == NULL) {
        admin_store_file_free(s);
        return -1;
    }
    s->redis = r;
    s->ops = &redis_ops;
    if (redis_state_init(r, l) != 0) {
        admin_store_free(s);
        return -1;
    }
    return 0;
}

void admin_store_free(struct admin_store *s)
{
    struct admin_redis *r = s->redis;

    /* the thread, once started, lives as long as the supervisor: only a store never used is freed */
    if (r != NULL && !r->started) {
        redis_client_free(r->rc);
        free(r->staged_text);
        free(r);
        s->redis = NULL;
    }
    admin_store_file_free(s);
}

/* ---------------------------------------------------------------- following */

int admin_store_redis_pollfd(const struct admin_store *s, struct pollfd *p)
{
    if (s->redis == NULL || !s->redis->started)
        return 0;
    p->fd = s->redis->wake[0];
    p->events = POLLIN;
    p->revents = 0;
    return 1;
}

int admin_store_redis_timeout(const struct admin_store *s)
{
    const struct admin_redis *r = s->redis;
    uint64_t now = rl_monotonic_ms();

    if (r == NULL)
        return -1;
    return !r->started || r->resync_at <= now ? 0 : (int)(r->resync_at - now);
}

/* The thread's wake-ups, all read: 1 if there was any. */
static int drain(struct admin_redis *r)
{
    char buf[64];
    int any = 0;

    while (read(r->wake[0], buf, sizeof(buf)) > 0)
        any = 1;
    return any;
}

/* Redis' version against the copy's: 1 with the document when they differ.  Failures are logged (once per outage). */
static int compare(struct admin_store *s, json_t **doc, uint64_t *version)
{
    struct admin_redis *r = s->redis;
    char err[1024];
    struct ar_reply *rep;
    uint64_t v = 0;
    json_t *copy;
    int same;

    if ((rep = call(r, NULL, 0, AR_ARGS("HGET", r->key, "version"), err, sizeof(err))) == NULL) {
        /* logged (once per outage), or Redis refused: tried again soon */
        r->resync_at = rl_monotonic_ms() + GW_REDIS_BACKOFF_MAX_MS;
        return 0;
    }
    if (reply_u64(rep, &v) != 0)
        v = UINT64_MAX; /* not a version: fetch says what is wrong */
    reply_free(rep);
    if ((r->known && v == r->applied) || (v != 0 && v == r->refused))
        return 0;
    if (fetch(s, version, doc, err, sizeof(err)) != 0) {
        if (!r->lost && *version != r->refused)
            log_warnx("%s: %s; the gateway keeps its copy", __func__, err);
        r->refused = *version;
        return 0;
    }
    if (r->known && *version == r->applied) {
        json_decref(*doc);
        return 0;
    }
    if (!r->known && (copy = admin_store_file_ops.read(s, err, sizeof(err))) != NULL) {
        /* at start: the copy may hold this version already */
        same = json_equal(copy, *doc);
        json_decref(copy);
        if (same) {
            log_info("%s: this gateway's copy %s holds version %llu of the admin store in Redis", __func__, s->path,
                     (unsigned long long)*version);
            admin_store_redis_applied(s, *version, 1);
            json_decref(*doc);
            return 0;
        }
    }
    return 1;
}

int admin_store_redis_follow(struct admin_store *s, short revents, json_t **doc, uint64_t *version)
{
    struct admin_redis *r = s->redis;
    uint64_t now = rl_monotonic_ms();
    char err[512];

    if (r == NULL)
        return 0;
    if (!r->started) {
        if (thread_start(r, err, sizeof(err)) != 0) {
            log_warnx("%s: %s; the gateway keeps its copy", __func__, err);
            r->resync_at = now + GW_ADMIN_REDIS_RESYNC_MS;
            return 0;
        }
        r->resync_at = now;
    }
    if ((revents & POLLIN) && drain(r))
        r->resync_at = now; /* published, or subscribed again */
    if (now < r->resync_at)
        return 0;
    r->resync_at = now + GW_ADMIN_REDIS_RESYNC_MS;
    return compare(s, doc, version);
}

void admin_store_redis_applied(struct admin_store *s, uint64_t version, int ok)
{
    struct admin_redis *r = s->redis;

    if (r == NULL)
        return;
    if (ok) {
        r->applied = version;
        r->known = 1;
        r->refused = 0;
    } else {
        r->refused = version;
    }
}

json_t *admin_store_redis_status(const struct admin_store *s)
{
    const struct admin_redis *r = s->redis;

    if (r == NULL)
        return json_string("not configured");
    return json_pack("{s:s, s:s, s:b, s:o}", "admin_store", r->where, "key", r->key, "connected",
                     r->started && __atomic_load_n(&r->connected, __ATOMIC_RELAXED), "version",
                     r->known ? json_integer((json_int_t)r->applied) : json_null());
}
