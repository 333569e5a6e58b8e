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
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include "moat_hex.h"

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
    if (r == GW_SESSIONS_OK && c != NULL) {
        c->count++;
        total++;
    }
    pthread_mutex_unlock(&mu);
    return r;
}

void gw_sessions_release(const char *tenant)
{
    struct tenant_count **pp, *c;

    pthread_mutex_lock(&mu);
    for (pp = &tenants; (c = *pp) != NULL; pp = &c->next) {
        if (strcmp(c->name, tenant) != 0)
            continue;
        total--;
        if (--c->count == 0) {
            *pp = c->next;
            free(c);
        }
        break;
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
