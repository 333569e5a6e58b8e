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
 * its redis_sync name), and an acquire is one script that adds the other
 * live gateways' fields to this one's count plus one and writes it only if
 * the sum stays within the max.  Counts are written as absolute values,
 * never incremented, so a write that a lost connection failed is repaired
 * by the next one: the heartbeat thread (redis_sync.c) writes every count
 * again after each beat (lease_ms / 3).  A gateway that dies stops beating:
 * lease_ms later the others stop counting its fields (and the scripts
 * delete them): the limiter's lease pattern (ratelimit_redis.c).  The
 * Redis calls run under the registry's mutex, so a count written is always
 * the count held (sessions open at a WebSocket's pace, not a request's;
 * the cost is a round trip per open and close).  Redis unreachable: an
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
#include "redis_sync.h"

#define GW_WATCH_MAX_TOKENS 4096

struct tenant_count {
    struct tenant_count *next;
    unsigned count;
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
 * the tenant's max (-1: publish without a check), the heartbeat keys'
 * prefix, the hash's life (ms).  1: written; 0: over the max (nothing
 * written).  Dead gateways' fields go on the way. */
static struct redis_sync_script count_script = {
    "local mine, max = tonumber(ARGV[2]), tonumber(ARGV[3])\n"
    "local h = redis.call('HGETALL', KEYS[1])\n"
    "local n = mine\n"
    "for i = 1, #h, 2 do\n"
    "  if h[i] ~= ARGV[1] then\n"
    "    if redis.call('EXISTS', ARGV[4] .. h[i]) == 1 then n = n + tonumber(h[i + 1])\n"
    "    else redis.call('HDEL', KEYS[1], h[i]) end\n"
    "  end\n"
    "end\n"
    "if max >= 0 and n > max then return 0 end\n"
    "if mine > 0 then\n"
    "  redis.call('HSET', KEYS[1], ARGV[1], mine)\n"
    "  redis.call('PEXPIRE', KEYS[1], ARGV[5])\n"
    "else redis.call('HDEL', KEYS[1], ARGV[1]) end\n"
    "return 1\n",
    ""};

static int shared;        /* gw_sessions_share: counts go to Redis too */
static uint64_t lease_ms; /* the limiter's lease: the hashes live twice that */

/* Publish tenant's count here as mine, checked against max (-1: not
 * checked): 1 written, 0 over the max, -1 Redis could not be asked (mu held). */
static int publish(const char *tenant, unsigned mine, long long max)
{
    char hex[2 * GW_MAX_TENANT_NAME + 1], key[GW_REDIS_MAX_PREFIX + 3 + 2 * GW_MAX_TENANT_NAME], n[16], m[24], life[24];
    const char *argv[6] = {key, redis_sync_instance(), n, m, redis_sync_heartbeat_prefix(), life};
    redisReply *rep;
    int rc;

    moat_hex_encode(tenant, strlen(tenant), hex);
    snprintf(key, sizeof(key), "%ss:%s", redis_sync_prefix(), hex);
    snprintf(n, sizeof(n), "%u", mine);
    snprintf(m, sizeof(m), "%lld", max);
    snprintf(life, sizeof(life), "%llu", (unsigned long long)(2 * lease_ms));
    if ((rep = redis_sync_eval(&count_script, 1, 6, argv, NULL)) == NULL)
        return -1;
    rc = rep->type == REDIS_REPLY_INTEGER && (rep->integer == 0 || rep->integer == 1) ? (int)rep->integer : -1;
    freeReplyObject(rep);
    return rc;
}

/* The heartbeat thread, after each beat: every count again, so that one a
 * lost connection failed to write heals; tenants at zero go once written. */
static void republish(void)
{
    struct tenant_count *c, *next;

    pthread_mutex_lock(&mu);
    for (c = tenants; c != NULL; c = next) {
        next = c->next;
        if (publish(c->name, c->count, -1) == 1 && c->count == 0)
            drop_tenant(c);
    }
    pthread_mutex_unlock(&mu);
}

void gw_sessions_share(uint64_t lease)
{
    redis_sync_script_init(&count_script);
    lease_ms = lease;
    shared = 1;
    (void)redis_sync_on_beat(republish); /* the first hook: there is room */
}

/* ---------------------------------------------------------------- counting */

enum gw_session_refusal gw_sessions_acquire(const char *tenant, unsigned tenant_max, unsigned total_max)
{
    enum gw_session_refusal r = GW_SESSIONS_OK;
    struct tenant_count *c;

    pthread_mutex_lock(&mu);
    c = find_tenant(tenant);
    if (total >= total_max) {
        r = GW_SESSIONS_FULL;
    } else if ((c != NULL ? c->count : 0) >= tenant_max) {
        r = GW_SESSIONS_TENANT_FULL;
    } else if (c == NULL) {
        if ((c = calloc(1, sizeof(*c))) == NULL) {
            r = GW_SESSIONS_NO_MEMORY;
        } else {
            snprintf(c->name, sizeof(c->name), "%s", tenant);
            c->next = tenants;
            tenants = c;
        }
    }
    if (r == GW_SESSIONS_OK && shared) {
        switch (publish(tenant, c->count + 1, tenant_max)) {
        case 1:
            break;
        case 0:
            r = GW_SESSIONS_TENANT_FULL; /* the other gateways hold the rest */
            break;
        default:
            r = GW_SESSIONS_UNAVAILABLE;
            break;
        }
        if (r != GW_SESSIONS_OK && c->count == 0)
            drop_tenant(c);
    }
    if (r == GW_SESSIONS_OK) {
        c->count++;
        total++;
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
        if (c->count == 0 && (!shared || publish(tenant, 0, -1) == 1))
            drop_tenant(c);
        else if (c->count > 0 && shared)
            (void)publish(tenant, c->count, -1);
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
