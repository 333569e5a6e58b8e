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
 * (give Redis persistence: README).
 *
 * Unreachable Redis.  The supervisor talks to Redis synchronously (hiredis
 * blocking contexts with the section's connect_timeout_ms and timeout_ms
 * on every call), so no call stalls the control socket longer than those.
 * A failed call drops both connections; they come back on the follower's
 * schedule (backoff doubling GW_REDIS_BACKOFF_MIN_MS to _MAX_MS) or at
 * once when moatctl asks for something.  Meanwhile the gateway keeps the
 * copy it has (its last state) and moatctl's changes fail with a message
 * naming Redis; on reconnection the supervisor resyncs at once.  Logged
 * once per outage.
 */
#include "admin_store_redis.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hiredis/hiredis.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>

#include "admin.h"
#include "gw_limits.h"
#include "log.h"
#include "moat_errf.h"
#include "moat_hex.h"
#include "ratelimit.h"

#define AR_KEY_MAX   (GW_REDIS_MAX_PREFIX + 16)
#define AR_TOKEN_LEN 32 /* hex digits of the lock's random token */
/* A command's argc and argv from its words: the count cannot disagree with the list. */
#define AR_ARGS(...)                                                                                                               \
    (int)(sizeof((const char *[]){__VA_ARGS__}) / sizeof(const char *)), (const char *[])                                          \
    {                                                                                                                              \
        __VA_ARGS__                                                                                                                \
    }

/* KEYS: the store hash.  ARGV: the version read, the new document, the channel. */
static const char commit_script[] = "local v = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')\n"
                                    "if v ~= tonumber(ARGV[1]) then return {0, v} end\n"
                                    "v = tostring(v + 1)\n"
                                    "redis.call('HSET', KEYS[1], 'version', v, 'doc', ARGV[2])\n"
                                    "redis.call('PUBLISH', ARGV[3], v)\n"
                                    "return {1, v}\n";

/* KEYS: the lock.  ARGV: our token, its life in ms.  1: ours now. */
static const char lock_script[] =
    "if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end\n"
    "if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1 end\n"
    "return 0\n";

/* KEYS: the lock.  ARGV: our token. */
static const char unlock_script[] = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end\n"
                                    "return 0\n";

struct admin_redis {
    /* the limiter section's connection */
    char *socket_path, *host, *password;
    unsigned port, db;
    uint64_t connect_timeout_ms, timeout_ms;
    char key[AR_KEY_MAX], lock_key[AR_KEY_MAX], channel[AR_KEY_MAX];
    redisContext *cmd; /* commands; NULL while disconnected */
    redisContext *sub; /* the subscription; NULL while disconnected */
    int lost;          /* an outage is being logged */
    uint64_t backoff_ms, retry_at, resync_at;
    int known;                    /* applied is the copy's version */
    uint64_t applied;             /* the version the copy holds */
    uint64_t refused;             /* a version the parser refused here (0: none) */
    uint64_t version;             /* what read saw: what commit expects */
    char *staged_text;            /* stage's document, for commit */
    char token[AR_TOKEN_LEN + 1]; /* this supervisor's value of the lock */
    int locked;                   /* we hold the lock (as far as we know) */
};

/* ---------------------------------------------------------------- connections */

static const char *redis_where(const struct admin_redis *r, char *buf, size_t len)
{
    if (r->socket_path != NULL)
        snprintf(buf, len, "unix:%s", r->socket_path);
    else
        snprintf(buf, len, "%s:%u", r->host, r->port);
    return buf;
}

static struct timeval ms_tv(uint64_t ms)
{
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};

    return tv;
}

/* Both connections go; the next attempt after the backoff.  why: logged once per outage. */
static void conn_lost(struct admin_redis *r, const char *why)
{
    char where[GW_MAX_PATH_LEN + 8];

    if (r->cmd != NULL)
        redisFree(r->cmd);
    if (r->sub != NULL)
        redisFree(r->sub);
    r->cmd = r->sub = NULL;
    if (!r->lost)
        log_warnx("%s: the admin store in Redis at %s: %s; the gateway keeps its copy, moatctl changes fail until it answers",
                  __func__, redis_where(r, where, sizeof(where)), why);
    r->lost = 1;
    r->retry_at = rl_monotonic_ms() + r->backoff_ms;
    r->backoff_ms = r->backoff_ms * 2 > GW_REDIS_BACKOFF_MAX_MS ? GW_REDIS_BACKOFF_MAX_MS : r->backoff_ms * 2;
}

/* One command on c; an error reply is an error too.  The reply, or NULL with err. */
static redisReply *command(redisContext *c, int argc, const char **argv, char *err, size_t errlen)
{
    redisReply *rep = redisCommandArgv(c, argc, argv, NULL);

    if (rep == NULL) {
        moat_errf(err, errlen, "%s", c->err ? c->errstr : "no answer");
        return NULL;
    }
    if (rep->type == REDIS_REPLY_ERROR) {
        moat_errf(err, errlen, "%s refused: %.*s", argv[0], (int)(rep->len > 160 ? 160 : rep->len), rep->str);
        freeReplyObject(rep);
        return NULL;
    }
    return rep;
}

/* AUTH when there is a password, SELECT when the database is not 0.  0 or -1 with err. */
static int conn_setup(const struct admin_redis *r, redisContext *c, char *err, size_t errlen)
{
    redisReply *rep;
    char db[16];

    if (r->password != NULL) {
        if ((rep = command(c, AR_ARGS("AUTH", r->password), err, errlen)) == NULL)
            return -1;
        freeReplyObject(rep);
    }
    if (r->db != 0) {
        snprintf(db, sizeof(db), "%u", r->db);
        if ((rep = command(c, AR_ARGS("SELECT", db), err, errlen)) == NULL)
            return -1;
        freeReplyObject(rep);
    }
    return 0;
}

/* A connection with its timeouts, authenticated, on the section's database; NULL with err. */
static redisContext *conn_open(const struct admin_redis *r, char *err, size_t errlen)
{
    struct timeval ctv = ms_tv(r->connect_timeout_ms);
    redisContext *c = r->socket_path != NULL ? redisConnectUnixWithTimeout(r->socket_path, ctv)
                                             : redisConnectWithTimeout(r->host, (int)r->port, ctv);

    if (c == NULL || c->err) {
        moat_errf(err, errlen, "%s", c != NULL ? c->errstr : "out of memory");
    } else if (redisSetTimeout(c, ms_tv(r->timeout_ms)) != REDIS_OK) {
        moat_errf(err, errlen, "cannot set the timeout: %s", c->errstr);
    } else if (conn_setup(r, c, err, errlen) == 0) {
        return c;
    }
    if (c != NULL)
        redisFree(c);
    return NULL;
}

/* Both connections, the second subscribed; then a resync at once. */
static int conn_up(struct admin_redis *r, char *err, size_t errlen)
{
    redisReply *rep;
    char where[GW_MAX_PATH_LEN + 8];

    if ((r->cmd = conn_open(r, err, errlen)) == NULL || (r->sub = conn_open(r, err, errlen)) == NULL ||
        (rep = command(r->sub, AR_ARGS("SUBSCRIBE", r->channel), err, errlen)) == NULL) {
        char why[512];
        snprintf(why, sizeof(why), "%s", err);
        conn_lost(r, why);
        return -1;
    }
    freeReplyObject(rep);
    if (r->lost)
        log_info("%s: the admin store in Redis at %s answers again: resyncing", __func__, redis_where(r, where, sizeof(where)));
    r->lost = 0;
    r->backoff_ms = GW_REDIS_BACKOFF_MIN_MS;
    r->resync_at = rl_monotonic_ms();
    return 0;
}

/* Connected, or connected now (moatctl waits for no backoff).  0, or -1 with err naming Redis. */
static int conn_ready(struct admin_redis *r, char *err, size_t errlen)
{
    char why[512], where[GW_MAX_PATH_LEN + 8];

    if (r->cmd != NULL)
        return 0;
    if (conn_up(r, why, sizeof(why)) == 0)
        return 0;
    return moat_errf(err, errlen, "the admin store in Redis at %s is unreachable: %s", redis_where(r, where, sizeof(where)), why);
}

/* A command on the command connection; a failure that is not Redis' answer drops the connections.  Reply or NULL with err. */
static redisReply *call(struct admin_redis *r, int argc, const char **argv, char *err, size_t errlen)
{
    redisReply *rep;
    char why[512], where[GW_MAX_PATH_LEN + 8];

    if (conn_ready(r, err, errlen) != 0)
        return NULL;
    if ((rep = command(r->cmd, argc, argv, why, sizeof(why))) != NULL)
        return rep;
    if (r->cmd->err)
        conn_lost(r, why);
    moat_errf(err, errlen, "the admin store in Redis at %s: %s", redis_where(r, where, sizeof(where)), why);
    return NULL;
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
static int reply_u64(const redisReply *rep, uint64_t *out)
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
    redisReply *rep;
    uint64_t done = 0;
    int rc = -1;

    snprintf(exp, sizeof(exp), "%llu", (unsigned long long)expect);
    if ((rep = call(r, AR_ARGS("EVAL", commit_script, "1", r->key, exp, text, r->channel), err, errlen)) == NULL)
        return -1;
    if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 && reply_u64(rep->element[0], &done) == 0 &&
        reply_u64(rep->element[1], version) == 0)
        rc = done == 1;
    else
        moat_errf(err, errlen, "the admin store in Redis: an unexpected answer to the commit");
    freeReplyObject(rep);
    return rc;
}

static int doc_has_entries(const json_t *doc)
{
    return json_array_size(json_object_get(doc, "tenants")) + json_array_size(json_object_get(doc, "jwt_issuers")) +
               json_array_size(json_object_get(doc, "keys")) >
           0;
}

/* Redis holds no store: the copy becomes version 1 if it holds anything (README: a new deployment, a Redis that lost its data). */
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
    redisReply *rep = NULL;

    *version = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        if ((rep = call(r, AR_ARGS("HMGET", r->key, "version", "doc"), err, errlen)) == NULL)
            return -1;
        if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 || reply_u64(rep->element[0], version) != 0 ||
            (*version != 0 && rep->element[1]->type != REDIS_REPLY_STRING)) {
            freeReplyObject(rep);
            return moat_errf(err, errlen, "the admin store in Redis (%s) is not a version and a document", r->key);
        }
        if (*version != 0)
            break;
        freeReplyObject(rep);
        rep = NULL;
        if (attempt == 0 && seed(s, err, errlen) != 0)
            return -1;
    }
    if (*version == 0) {
        *doc = admin_store_empty();
        return *doc != NULL ? 0 : moat_errf(err, errlen, "out of memory");
    }
    *doc = doc_parse(rep->element[1]->str, rep->element[1]->len, *version, err, errlen);
    freeReplyObject(rep);
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
        redisReply *rep = call(r, AR_ARGS("EVAL", lock_script, "1", r->lock_key, r->token, px), err, errlen);
        int got = rep != NULL && rep->type == REDIS_REPLY_INTEGER && rep->integer == 1;
        if (rep == NULL)
            return -1;
        freeReplyObject(rep);
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
    redisReply *rep;

    admin_store_file_ops.unlock(s);
    free(r->staged_text);
    r->staged_text = NULL;
    if (!r->locked)
        return;
    /* unreachable now: this supervisor's next change retakes it, or it expires */
    if ((rep = call(r, AR_ARGS("EVAL", unlock_script, "1", r->lock_key, r->token), err, sizeof(err))) != NULL)
        freeReplyObject(rep);
    r->locked = 0;
}

static const struct admin_store_ops redis_ops = {redis_lock, redis_read, redis_stage, redis_commit, redis_unlock};

static int copy_opt(const char *from, char **to)
{
    *to = NULL;
    return from == NULL || (*to = strdup(from)) != NULL ? 0 : -1;
}

int admin_store_redis_init(struct admin_store *s, const char *path, uid_t owner, gid_t group, const struct gw_limiter_config *l)
{
    unsigned char raw[AR_TOKEN_LEN / 2];
    struct admin_redis *r;

    if (admin_store_file_init(s, path, owner, group) != 0)
        return -1;
    if ((r = calloc(1, sizeof(*r))) == NULL) {
        admin_store_file_free(s);
        return -1;
    }
    s->redis = r;
    s->ops = &redis_ops;
    if (RAND_bytes(raw, sizeof(raw)) != 1) {
        admin_store_free(s);
        return -1;
    }
    moat_hex_encode(raw, sizeof(raw), r->token);
    r->port = l->port;
    r->db = l->db;
    r->connect_timeout_ms = l->connect_timeout_ms;
    r->timeout_ms = l->timeout_ms;
    r->backoff_ms = GW_REDIS_BACKOFF_MIN_MS;
    snprintf(r->key, sizeof(r->key), "%sadmin:store", l->prefix);
    snprintf(r->lock_key, sizeof(r->lock_key), "%sadmin:lock", l->prefix);
    snprintf(r->channel, sizeof(r->channel), "%sadmin:changed", l->prefix);
    if (copy_opt(l->socket, &r->socket_path) != 0 || copy_opt(l->host, &r->host) != 0 || copy_opt(l->password, &r->password) != 0) {
        admin_store_free(s);
        return -1;
    }
    return 0;
}

void admin_store_free(struct admin_store *s)
{
    struct admin_redis *r = s->redis;

    if (r != NULL) {
        if (r->cmd != NULL)
            redisFree(r->cmd);
        if (r->sub != NULL)
            redisFree(r->sub);
        if (r->password != NULL)
            OPENSSL_cleanse(r->password, strlen(r->password));
        free(r->password);
        free(r->socket_path);
        free(r->host);
        free(r->staged_text);
        free(r);
    }
    admin_store_file_free(s);
}

/* ---------------------------------------------------------------- following */

int admin_store_redis_pollfd(const struct admin_store *s, struct pollfd *p)
{
    if (s->redis == NULL || s->redis->sub == NULL)
        return 0;
    p->fd = s->redis->sub->fd;
    p->events = POLLIN;
    p->revents = 0;
    return 1;
}

int admin_store_redis_timeout(const struct admin_store *s)
{
    const struct admin_redis *r = s->redis;
    uint64_t now = rl_monotonic_ms(), at;

    if (r == NULL)
        return -1;
    at = r->cmd != NULL ? r->resync_at : r->retry_at;
    return at <= now ? 0 : (int)(at - now);
}

/* Whatever the subscription delivered: 1 if a change was published, 0 if not, -1 when the connection failed (dropped). */
static int drain(struct admin_redis *r)
{
    void *rep;
    int changed = 0;

    if (redisBufferRead(r->sub) != REDIS_OK) {
        char why[256];
        snprintf(why, sizeof(why), "the subscription: %s", r->sub->errstr[0] != '\0' ? r->sub->errstr : "closed");
        conn_lost(r, why);
        return -1;
    }
    for (;;) {
        const redisReply *m;
        if (redisGetReplyFromReader(r->sub, &rep) != REDIS_OK) {
            conn_lost(r, "the subscription: a malformed message");
            return -1;
        }
        if (rep == NULL)
            return changed;
        m = rep;
        if (m->type == REDIS_REPLY_ARRAY && m->elements == 3 && m->element[0]->type == REDIS_REPLY_STRING &&
            strcmp(m->element[0]->str, "message") == 0)
            changed = 1;
        freeReplyObject(rep);
    }
}

/* Redis' version against the copy's: 1 with the document when they differ.  Failures are logged (once per outage). */
static int compare(struct admin_store *s, json_t **doc, uint64_t *version)
{
    struct admin_redis *r = s->redis;
    char err[1024];
    redisReply *rep;
    uint64_t v = 0;
    json_t *copy;
    int same;

    if ((rep = call(r, AR_ARGS("HGET", r->key, "version"), err, sizeof(err))) == NULL)
        return 0; /* logged by conn_lost, or Redis refused: tried again at the next resync */
    if (reply_u64(rep, &v) != 0)
        v = UINT64_MAX; /* not a version: fetch says what is wrong */
    freeReplyObject(rep);
    if ((r->known && v == r->applied) || (v != 0 && v == r->refused))
        return 0;
    if (fetch(s, version, doc, err, sizeof(err)) != 0) {
        if (r->cmd != NULL && *version != r->refused)
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
    if (r->sub != NULL && (revents & (POLLIN | POLLHUP | POLLERR)) && drain(r) == 1)
        r->resync_at = now;
    if (r->cmd == NULL) {
        if (now < r->retry_at || conn_up(r, err, sizeof(err)) != 0)
            return 0;
    }
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
    char where[GW_MAX_PATH_LEN + 8];

    if (r == NULL)
        return json_string("not configured");
    return json_pack("{s:s, s:s, s:b, s:o}", "admin_store", redis_where(r, where, sizeof(where)), "key", r->key, "connected",
                     r->cmd != NULL, "version", r->known ? json_integer((json_int_t)r->applied) : json_null());
}
