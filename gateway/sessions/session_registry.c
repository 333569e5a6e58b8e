/*
 * session_registry.c - process-wide session counts and watch tokens.
 *
 * Theory of operation
 * -------------------
 * A session lives on the worker thread that accepted its WebSocket, but its
 * tenant's max_concurrent and the gateway's max_sessions hold across all
 * workers, so the counts are one small table under one mutex (a tenant's
 * entry goes when its count reaches zero).  Counted per gateway process: a
 * session is pinned to the gateway that holds its connection.
 *
 * Several gateways (limiter.store redis: gw_sessions_share): a tenant's
 * max_concurrent holds across all of them.  Each gateway writes its own
 * count of the tenant's sessions into the hash P s:<tenant hex> (field:
 * its name, redis_beat.c; value "<count>:<seq>"), and an acquire is one
 * script that adds the other live gateways' counts to this one's and
 * writes it only if the sum stays within the max.  Nothing waits for
 * Redis under the mutex, and no loop waits at all: an acquire reserves
 * its count here at once (counted, and `asking`) and the WebSocket's
 * upgrade waits for the script's answer on its worker's connection
 * (redis_client.c); a release is told as it happens, answered by nobody.
 *
 * Writes from different workers travel on different connections, so they
 * may reach Redis out of order; each carries a sequence number taken
 * under the mutex, and the script keeps only the newest (an older one is
 * answered "superseded").  That is safe because of one rule: while any
 * acquire of the tenant is still asking, every write of its count is
 * checked against the max.  So a newer write that was kept while this
 * acquire was asking counted it, and was within the max: a superseded
 * acquire holds.  A refused one gives its count back here and writes the
 * count again (a newer write may have carried it).  Counts are absolute
 * values, never increments, so a write a lost connection failed is
 * repaired by the next one: the heartbeat (redis_beat.c) writes every
 * count again after each beat (lease_ms / 3).  A gateway that dies stops
 * beating: lease_ms later the others stop counting its fields (and the
 * scripts delete them): the limiter's lease pattern (ratelimit_redis.c).
 * A count of zero stays written as "0:<seq>" (an older write arriving
 * later must still lose) until the hash expires.  Redis unreachable: an
 * acquire is refused (GW_SESSIONS_UNAVAILABLE: 503, fail closed); a
 * release is counted here and told to Redis by the next beat that reaches
 * it; until then the other gateways see the old count (erring towards
 * refusing, briefly).
 *
 * Watch tokens: at most one per session, GW_WATCH_TOKEN_LEN characters of
 * which 32 bytes are random.  A token is kept as its SHA-256 and compared in
 * constant time, so the table holds nothing a reader of memory could replay
 * and the lookup does not leak a prefix through timing.  A token works until
 * it expires or its session ends (gw_watch_revoke), whichever is first; each
 * join counts a watcher against the session's max_watchers.  The table is
 * bounded (GW_WATCH_MAX_TOKENS): an expired or revoked entry is reused.
 */
#include "session_registry.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include "moat_hex.h"
#include "store/redis_beat.h"

#define GW_WATCH_MAX_TOKENS 4096

struct tenant_count {
    struct tenant_count *next;
    unsigned count;    /* sessions held, and asked for */
    unsigned asking;   /* acquires whose answer from Redis has not come */
    long long max;     /* the max_concurrent the asking acquires are checked against */
    uint64_t last_seq; /* of the last write of this count */
    char name[GW_MAX_TENANT_NAME + 1];
};

struct watch_entry {
    int used;
    uint8_t digest[SHA256_DIGEST_LENGTH];
    struct gw_transcript *t; /* held while the entry is used */
    char tenant[GW_MAX_TENANT_NAME + 1];
    char session_id[GW_REQUEST_ID_LEN + 1];
    uint64_t expires_ms;
    unsigned watchers, max_watchers;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct tenant_count *tenants;
static unsigned total;
static struct watch_entry watches[GW_WATCH_MAX_TOKENS];

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ---------------------------------------------------------------- counts */

static struct tenant_count *find_tenant(const char *name)
{
    for (struct tenant_count *c = tenants; c != NULL; c = c->next)
        if (strcmp(c->name, name) == 0)
            return c;
    return NULL;
}

/* Unlink and free c (mu held). */
static void drop_tenant(struct tenant_count *c)
{
    struct tenant_count **pp = &tenants;

    while (*pp != c)
        pp = &(*pp)->next;
    *pp = c->next;
    free(c);
}

/* ---------------------------------------------------- counts in Redis */

/* KEYS: the tenant's hash.  ARGV: this gateway's name, its count now,
 * the max to check against (-1: none), the heartbeat keys' prefix, the
 * hash's life (ms), the write's sequence number.  1: written; 0: over the
 * max (nothing written); 2: superseded (a newer write of this gateway is
 * there).  Dead gateways' fields go on the way. */
static struct redis_script count_script = {
    "local mine, max, seq = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[6])\n"
    "local h = redis.call('HGETALL', KEYS[1])\n"
    "local n, held = mine, -1\n"
    "for i = 1, #h, 2 do\n"
    "  if h[i] == ARGV[1] then held = tonumber(string.match(h[i + 1], ':(%d+)$') or '-1')\n"
    "  elseif redis.call('EXISTS', ARGV[4] .. h[i]) == 1 then n = n + tonumber(string.match(h[i + 1], '^%d+') or '0')\n"
    "  else redis.call('HDEL', KEYS[1], h[i]) end\n"
    "end\n"
    "if seq <= held then return 2 end\n"
    "if max >= 0 and n > max then return 0 end\n"
    "redis.call('HSET', KEYS[1], ARGV[1], mine .. ':' .. seq)\n"
    "redis.call('PEXPIRE', KEYS[1], ARGV[5])\n"
    "return 1\n",
    "", NULL};

static struct redis_client *shared; /* gw_sessions_share: counts go to Redis too */
static uint64_t next_seq;           /* under mu */

/* One write in flight: whose, which, and what waits for it. */
struct publish {
    char tenant[GW_MAX_TENANT_NAME + 1];
    uint64_t seq;
    int acquire; /* an acquire's own write: fn answers it */
    gw_sessions_fn fn;
    void *arg;
};

static void on_published(void *arg, const redisReply *reply);

/* Write c's count on conn (mu held): checked while an acquire asks.
 * acquire/fn/arg: an acquire's own write.  0 sent, -1 not. */
static int publish(struct redis_conn *conn, struct tenant_count *c, int acquire, gw_sessions_fn fn, void *arg)
{
    char hex[2 * GW_MAX_TENANT_NAME + 1], key[GW_REDIS_MAX_PREFIX + 3 + 2 * GW_MAX_TENANT_NAME], n[16], m[24], life[24], seq[24];
    const char *argv[7] = {key, redis_client_id(shared), n, m, redis_client_beat_prefix(shared), life, seq};
    struct publish *p;

    if (conn == NULL || (p = calloc(1, sizeof(*p))) == NULL)
        return -1;
    moat_hex_encode(c->name, strlen(c->name), hex);
    snprintf(key, sizeof(key), "%ss:%s", redis_client_prefix(shared), hex);
    snprintf(n, sizeof(n), "%u", c->count);
    snprintf(m, sizeof(m), "%lld", c->asking > 0 ? c->max : -1);
    snprintf(life, sizeof(life), "%llu", (unsigned long long)(2 * redis_client_lease_ms(shared)));
    c->last_seq = ++next_seq;
    snprintf(seq, sizeof(seq), "%llu", (unsigned long long)c->last_seq);
    snprintf(p->tenant, sizeof(p->tenant), "%s", c->name);
    p->seq = c->last_seq;
    p->acquire = acquire;
    p->fn = fn;
    p->arg = arg;
    if (redis_conn_eval(conn, &count_script, 1, 7, argv, NULL, on_published, p) != 0) {
        free(p);
        return -1;
    }
    return 0;
}

/* Is c at zero, nothing asking, and its zero written?  Then it goes (mu held). */
static void drop_if_told(struct tenant_count *c, uint64_t seq)
{
    if (c->count == 0 && c->asking == 0 && c->last_seq == seq)
        drop_tenant(c);
}

/* An acquire's answer came (mu held): 1 or 2 holds, 0 or none gives the
 * count back and writes it again (a newer write may have carried it). */
static enum gw_session_refusal acquire_answered(struct tenant_count *c, long long verdict)
{
    c->asking--;
    if (verdict == 1 || verdict == 2)
        return GW_SESSIONS_OK;
    c->count--;
    total--;
    if (verdict == 0)
        (void)publish(redis_client_thread_conn(shared), c, 0, NULL, NULL);
    return verdict == 0 ? GW_SESSIONS_TENANT_FULL : GW_SESSIONS_UNAVAILABLE;
}

static void on_published(void *arg, const redisReply *reply)
{
    struct publish *p = arg;
    long long verdict = reply != NULL && reply->type == REDIS_REPLY_INTEGER ? reply->integer : -1;
    enum gw_session_refusal r = GW_SESSIONS_UNAVAILABLE;
    struct tenant_count *c;

    pthread_mutex_lock(&mu);
    if ((c = find_tenant(p->tenant)) != NULL) {
        if (p->acquire)
            r = acquire_answered(c, verdict);
        if (verdict == 1 || verdict == 2)
            drop_if_told(c, p->seq);
    }
    pthread_mutex_unlock(&mu);
    if (p->fn != NULL)
        p->fn(p->arg, r);
    free(p);
}

/* After each beat, on the beat's connection: every count again, so that
 * one a lost connection failed to write heals; tenants at zero go once
 * written. */
static void republish(struct redis_conn *conn)
{
    pthread_mutex_lock(&mu);
    for (struct tenant_count *c = tenants; c != NULL; c = c->next)
        (void)publish(conn, c, 0, NULL, NULL);
    pthread_mutex_unlock(&mu);
}

void gw_sessions_share(struct redis_client *rc)
{
    redis_client_add_script(rc, &count_script);
    shared = rc;
    (void)redis_beat_on_beat(republish); /* the first hook: there is room */
}

uint64_t gw_sessions_retry_after_ms(void)
{
    return shared != NULL ? redis_conn_retry_after_ms(redis_client_thread_conn(shared)) : 1000;
}

/* ---------------------------------------------------------------- counting */

/* Count one more session of tenant here, unless it or the gateway is
 * full: its entry, or NULL with *r set (mu held). */
static struct tenant_count *count_here(const char *tenant, unsigned tenant_max, unsigned total_max, enum gw_session_refusal *r)
{
    struct tenant_count *c = find_tenant(tenant);

    if (total >= total_max) {
        *r = GW_SESSIONS_FULL;
        return NULL;
    }
    if ((c != NULL ? c->count : 0) >= tenant_max) {
        *r = GW_SESSIONS_TENANT_FULL;
        return NULL;
    }
    if (c == NULL) {
        if ((c = calloc(1, sizeof(*c))) == NULL) {
            *r = GW_SESSIONS_NO_MEMORY;
            return NULL;
        }
        snprintf(c->name, sizeof(c->name), "%s", tenant);
        c->next = tenants;
        tenants = c;
    }
    c->count++;
    total++;
    *r = GW_SESSIONS_OK;
    return c;
}

enum gw_session_refusal gw_sessions_acquire(const char *tenant, unsigned tenant_max, unsigned total_max, h2o_loop_t *loop,
                                            gw_sessions_fn fn, void *arg)
{
    enum gw_session_refusal r;
    struct tenant_count *c;

    pthread_mutex_lock(&mu);
    if ((c = count_here(tenant, tenant_max, total_max, &r)) != NULL && shared != NULL) {
        c->asking++;
        c->max = tenant_max;
        if (loop != NULL && fn != NULL && publish(redis_client_conn(shared, loop), c, 1, fn, arg) == 0) {
            r = GW_SESSIONS_ASKING;
        } else {
            c->asking--;
            c->count--;
            total--;
            r = GW_SESSIONS_UNAVAILABLE;
            if (c->count == 0 && c->asking == 0 && c->last_seq == 0)
                drop_tenant(c); /* never written: nothing to tell */
        }
    }
    pthread_mutex_unlock(&mu);
    return r;
}

void gw_sessions_release(const char *tenant)
{
    struct tenant_count *c;

    pthread_mutex_lock(&mu);
    if ((c = find_tenant(tenant)) != NULL && c->count > 0) {
        total--;
        c->count--;
        /* in Redis too; if it cannot be told now, the next beat tells it
         * (the entry stays until then, even at zero) */
        if (shared != NULL)
            (void)publish(redis_client_thread_conn(shared), c, 0, NULL, NULL);
        else if (c->count == 0)
            drop_tenant(c);
    }
    pthread_mutex_unlock(&mu);
}

unsigned gw_sessions_count(const char *tenant)
{
    unsigned n;

    pthread_mutex_lock(&mu);
    if (tenant == NULL) {
        n = total;
    } else {
        const struct tenant_count *c = find_tenant(tenant);
        n = c != NULL ? c->count : 0;
    }
    pthread_mutex_unlock(&mu);
    return n;
}

/* ---------------------------------------------------------------- watch tokens */

/* An entry's transcript goes once its token can no longer be used and no
 * watcher holds it through the entry (watchers hold their own reference). */
static void entry_clear(struct watch_entry *e)
{
    struct gw_transcript *t = e->t;

    memset(e, 0, sizeof(*e));
    gw_transcript_release(t);
}

static struct watch_entry *entry_of_session(const char *session_id)
{
    for (size_t i = 0; i < GW_WATCH_MAX_TOKENS; i++)
        if (watches[i].used && strcmp(watches[i].session_id, session_id) == 0)
            return &watches[i];
    return NULL;
}

int gw_watch_issue(struct gw_transcript *t, const char *tenant, const char *session_id, unsigned ttl_s, unsigned max_watchers,
                   char token[GW_WATCH_TOKEN_LEN + 1])
{
    uint8_t rnd[32];
    struct watch_entry *e;
    uint64_t now = now_ms();
    unsigned watchers = 0;

    if (RAND_bytes(rnd, sizeof(rnd)) != 1)
        return -1;
    memcpy(token, GW_WATCH_TOKEN_PREFIX, 4);
    moat_hex_encode(rnd, sizeof(rnd), token + 4);
    OPENSSL_cleanse(rnd, sizeof(rnd));
    pthread_mutex_lock(&mu);
    if ((e = entry_of_session(session_id)) != NULL) {
        watchers = e->watchers; /* watchers of the old token stay counted */
        entry_clear(e);
    } else {
        for (size_t i = 0; i < GW_WATCH_MAX_TOKENS && e == NULL; i++)
            if (!watches[i].used || (watches[i].expires_ms <= now && watches[i].watchers == 0)) {
                e = &watches[i];
                if (e->used)
                    entry_clear(e);
            }
    }
    if (e != NULL) {
        e->used = 1;
        SHA256((const uint8_t *)token, GW_WATCH_TOKEN_LEN, e->digest);
        gw_transcript_hold(t);
        e->t = t;
        snprintf(e->tenant, sizeof(e->tenant), "%s", tenant);
        snprintf(e->session_id, sizeof(e->session_id), "%s", session_id);
        e->expires_ms = now + (uint64_t)ttl_s * 1000;
        e->watchers = watchers;
        e->max_watchers = max_watchers;
    }
    pthread_mutex_unlock(&mu);
    return e != NULL ? 0 : -1;
}

int gw_watch_join(const char *token, size_t len, struct gw_watch_grant *g, const char **why)
{
    uint8_t digest[SHA256_DIGEST_LENGTH];
    struct watch_entry *found = NULL;
    uint64_t now = now_ms();

    memset(g, 0, sizeof(*g));
    if (len != GW_WATCH_TOKEN_LEN || memcmp(token, GW_WATCH_TOKEN_PREFIX, 4) != 0) {
        *why = "not a watch token";
        return -1;
    }
    SHA256((const uint8_t *)token, len, digest);
    pthread_mutex_lock(&mu);
    for (size_t i = 0; i < GW_WATCH_MAX_TOKENS; i++)
        if (watches[i].used && CRYPTO_memcmp(watches[i].digest, digest, sizeof(digest)) == 0)
            found = &watches[i];
    if (found == NULL) {
        *why = "unknown watch token (or its session is over)";
    } else if (found->expires_ms <= now) {
        *why = "watch token expired";
        found = NULL;
    } else if (found->watchers >= found->max_watchers) {
        *why = "this session has as many watchers as it may";
        found = NULL;
    } else {
        found->watchers++;
        gw_transcript_hold(found->t);
        g->t = found->t;
        memcpy(g->tenant, found->tenant, sizeof(g->tenant));
        memcpy(g->session_id, found->session_id, sizeof(g->session_id));
        g->expires_ms = found->expires_ms;
    }
    pthread_mutex_unlock(&mu);
    return found != NULL ? 0 : -1;
}

void gw_watch_leave(struct gw_watch_grant *g)
{
    struct watch_entry *e;

    if (g->t == NULL)
        return;
    pthread_mutex_lock(&mu);
    if ((e = entry_of_session(g->session_id)) != NULL && e->watchers > 0)
        e->watchers--;
    pthread_mutex_unlock(&mu);
    gw_transcript_release(g->t);
    g->t = NULL;
}

void gw_watch_revoke(const char *session_id)
{
    struct watch_entry *e;

    pthread_mutex_lock(&mu);
    if ((e = entry_of_session(session_id)) != NULL)
        entry_clear(e);
    pthread_mutex_unlock(&mu);
}
