/*
 * judge0_store.c - the in-memory store of finished submissions (see
 * judge0_store.h).
 *
 * Theory of operation
 * -------------------
 * Records sit on one list in the order they were put, which is also the
 * order they expire in (one TTL for all), and in a hash table of buckets
 * by token for the lookups.  Putting a token again replaces its record
 * (and its place in the list): an asynchronous run's "Processing" record
 * by its result.  Every put first drops what has expired from
 * the head of the list, then makes room: past the tenant's cap its oldest
 * record goes, past the overall caps the oldest of anyone.  A lookup
 * compares the tenant as well as the token: another tenant's token is
 * "not found", exactly like a token that never existed.  One mutex guards
 * everything; records are small and the work under it is a bucket walk or
 * an unlink, apart from the per-tenant count, a walk of the list, at put.
 */
#include "judge0_store.h"
#include "gw_limits.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define NBUCKETS 4096

struct record {
    struct record *older, *newer; /* the list, oldest first */
    struct record *next_in_bucket;
    uint64_t expires_ms;
    size_t len;
    char token[40];
    char tenant[GW_MAX_TENANT_NAME + 1];
    char text[]; /* len bytes and a NUL */
};

struct judge0_store {
    pthread_mutex_t lock;
    struct judge0_store_limits lim;
    struct record *oldest, *newest;
    struct record *buckets[NBUCKETS];
    size_t count, bytes;
};

static unsigned bucket_of(const char *token)
{
    unsigned h = 2166136261u; /* FNV-1a: tokens are random already */

    for (; *token != '\0'; token++)
        h = (h ^ (unsigned char)*token) * 16777619u;
    return h % NBUCKETS;
}

struct judge0_store *judge0_store_new(const struct judge0_store_limits *lim)
{
    struct judge0_store *s = calloc(1, sizeof(*s));

    if (s == NULL)
        return NULL;
    if (pthread_mutex_init(&s->lock, NULL) != 0) {
        free(s);
        return NULL;
    }
    s->lim = *lim;
    return s;
}

/* Unlink and free one record (lock held). */
static void drop(struct judge0_store *s, struct record *r)
{
    struct record **pp = &s->buckets[bucket_of(r->token)];

    while (*pp != r)
        pp = &(*pp)->next_in_bucket;
    *pp = r->next_in_bucket;
    if (r->older != NULL)
        r->older->newer = r->newer;
    else
        s->oldest = r->newer;
    if (r->newer != NULL)
        r->newer->older = r->older;
    else
        s->newest = r->older;
    s->count--;
    s->bytes -= r->len;
    free(r);
}

void judge0_store_free(struct judge0_store *s)
{
    if (s == NULL)
        return;
    while (s->oldest != NULL)
        drop(s, s->oldest);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

static struct judge0_store *default_store;

static void make_default(void)
{
    const struct judge0_store_limits lim = {GW_JUDGE0_STORE_MAX_RECORDS, GW_JUDGE0_STORE_MAX_PER_TENANT, GW_JUDGE0_STORE_MAX_BYTES,
                                            GW_JUDGE0_STORE_TTL_MS};

    default_store = judge0_store_new(&lim);
}

struct judge0_store *judge0_store_default(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;

    pthread_once(&once, make_default);
    return default_store;
}

/* Step 1 of a put: what has expired goes (lock held). */
static void expire(struct judge0_store *s, uint64_t now_ms)
{
    while (s->oldest != NULL && s->oldest->expires_ms <= now_ms)
        drop(s, s->oldest);
}

/* Step 2: the tenant's oldest past its cap, then anyone's oldest past the
 * overall caps (lock held). */
static void make_room(struct judge0_store *s, const char *tenant, size_t len)
{
    size_t mine = 0;
    struct record *first_mine = NULL;

    for (struct record *r = s->oldest; r != NULL; r = r->newer)
        if (strcmp(r->tenant, tenant) == 0 && mine++ == 0)
            first_mine = r;
    while (mine >= s->lim.max_records_per_tenant && first_mine != NULL) {
        struct record *next = first_mine->newer;
        drop(s, first_mine);
        mine--;
        while (next != NULL && strcmp(next->tenant, tenant) != 0)
            next = next->newer;
        first_mine = next;
    }
    while (s->oldest != NULL && (s->count >= s->lim.max_records || s->bytes + len > s->lim.max_bytes))
        drop(s, s->oldest);
}

int judge0_store_put(struct judge0_store *s, const char *tenant, const char *token, const char *text, size_t len, uint64_t now_ms)
{
    struct record *r;
    unsigned b;

    if (len > s->lim.max_bytes || strlen(tenant) > GW_MAX_TENANT_NAME || strlen(token) >= sizeof(r->token) ||
        s->lim.max_records == 0 || s->lim.max_records_per_tenant == 0)
        return -1;
    if ((r = malloc(sizeof(*r) + len + 1)) == NULL)
        return -1;
    memset(r, 0, sizeof(*r));
    strcpy(r->token, token);
    strcpy(r->tenant, tenant);
    memcpy(r->text, text, len);
    r->text[len] = '\0';
    r->len = len;
    r->expires_ms = now_ms + s->lim.ttl_ms;
    b = bucket_of(token);
    pthread_mutex_lock(&s->lock);
    for (struct record *old = s->buckets[b]; old != NULL; old = old->next_in_bucket)
        if (strcmp(old->token, token) == 0 && strcmp(old->tenant, tenant) == 0) {
            drop(s, old); /* replaced: a finished run after its "Processing" */
            break;
        }
    expire(s, now_ms);
    make_room(s, tenant, len);
    r->next_in_bucket = s->buckets[b];
    s->buckets[b] = r;
    r->older = s->newest;
    if (s->newest != NULL)
        s->newest->newer = r;
    else
        s->oldest = r;
    s->newest = r;
    s->count++;
    s->bytes += len;
    pthread_mutex_unlock(&s->lock);
    return 0;
}

char *judge0_store_get(struct judge0_store *s, const char *tenant, const char *token, uint64_t now_ms, size_t *len)
{
    char *copy = NULL;

    pthread_mutex_lock(&s->lock);
    for (struct record *r = s->buckets[bucket_of(token)]; r != NULL; r = r->next_in_bucket) {
        if (strcmp(r->token, token) != 0 || strcmp(r->tenant, tenant) != 0 || r->expires_ms <= now_ms)
            continue;
        if ((copy = malloc(r->len + 1)) != NULL) {
            memcpy(copy, r->text, r->len + 1);
            *len = r->len;
        }
        break;
    }
    pthread_mutex_unlock(&s->lock);
    return copy;
}

size_t judge0_store_count(struct judge0_store *s)
{
    size_t n;

    pthread_mutex_lock(&s->lock);
    n = s->count;
    pthread_mutex_unlock(&s->lock);
    return n;
}
