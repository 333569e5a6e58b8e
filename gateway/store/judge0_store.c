/*
 * judge0_store.c - the in-memory store of finished submissions (see
 * judge0_store.h).
 *
 * Theory of operation
 * -------------------
 * Records sit on one list in the order they were put, which is also the
 * order they expire in (one TTL for all), and in a hash table of buckets
 * by token for the lookups, and on its tenant's own list (oldest first,
 * with its count: the tenant entries sit in a small hash table of their
 * own).  Putting a token again replaces its record (and its place in the
 * lists): an asynchronous run's "In Queue" and "Processing" records by its
 * result.  Every put first drops what has expired from the head of the
 * list, then makes room: past the tenant's cap its oldest record goes,
 * past the overall caps the oldest of anyone.  A lookup compares the
 * tenant as well as the token: another tenant's token is "not found",
 * exactly like a token that never existed.  One mutex guards everything;
 * records are small and the work under it is a bucket walk or an unlink,
 * never a walk of all the records (a put once counted the tenant's by
 * walking the whole list: a third of the gateway's CPU per submission with
 * 20000 records kept, bench_submissions.py).
 *
 * The directory store (judge0_store_open_dir) and the Redis store
 * (judge0_store_open_redis) are further down, each in its own section with
 * its own theory of operation; put, get, count and free dispatch on
 * s->dirfd and s->redis.
 */
#include "judge0_store.h"
#include "common/gw_limits.h"
#include "log.h"
#include "moat_hex.h"
#include "redis_client.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <openssl/sha.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define NBUCKETS        4096
#define NTENANT_BUCKETS 256

/* A tenant's records: its own list, oldest first, and their count. */
struct tenant_records {
    struct tenant_records *next_in_bucket;
    struct record *oldest, *newest;
    size_t count;
    char name[GW_MAX_TENANT_NAME + 1];
};

struct record {
    struct record *older, *newer;               /* the list, oldest first */
    struct record *tenant_older, *tenant_newer; /* the tenant's list */
    struct tenant_records *owner;
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
    struct tenant_records *tenants[NTENANT_BUCKETS];
    size_t count, bytes;
    /* the directory store: dirfd -1 for the memory one */
    int dirfd;
    char instance[33]; /* this process's mark in the records it puts */
    DIR *sweep_top;    /* the sweep's place: in the tenants' directories */
    DIR *sweep_tenant; /* and in one tenant's */
    int redis;         /* the Redis store (judge0_store_open_redis) */
    struct redis_client *rc;
    int queue_owned; /* its records are the shared queue's (judge0_store_owned_by_queue) */
};

static int dir_put(struct judge0_store *s, const char *tenant, const char *token, const char *text, size_t len, uint64_t now_ms);
static char *dir_get(struct judge0_store *s, const char *tenant, const char *token, uint64_t now_ms, size_t *len, int *orphaned);
static void dir_close(struct judge0_store *s);
static void redis_close(struct judge0_store *s);

static unsigned fnv1a(const char *s)
{
    unsigned h = 2166136261u;

    for (; *s != '\0'; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

static unsigned bucket_of(const char *token)
{
    return fnv1a(token) % NBUCKETS; /* tokens are random already */
}

/* The tenant's entry; with create, made if missing (NULL out of memory).
 * Lock held. */
static struct tenant_records *tenant_records(struct judge0_store *s, const char *tenant, int create)
{
    struct tenant_records **head = &s->tenants[fnv1a(tenant) % NTENANT_BUCKETS], *t;

    for (t = *head; t != NULL; t = t->next_in_bucket)
        if (strcmp(t->name, tenant) == 0)
            return t;
    if (!create || (t = calloc(1, sizeof(*t))) == NULL)
        return NULL;
    snprintf(t->name, sizeof(t->name), "%s", tenant); /* length checked by put */
    t->next_in_bucket = *head;
    *head = t;
    return t;
}

/* Unlink r from its tenant's list; the entry goes with its last record. */
static void tenant_unlink(struct judge0_store *s, struct record *r)
{
    struct tenant_records *t = r->owner, **pp;

    if (r->tenant_older != NULL)
        r->tenant_older->tenant_newer = r->tenant_newer;
    else
        t->oldest = r->tenant_newer;
    if (r->tenant_newer != NULL)
        r->tenant_newer->tenant_older = r->tenant_older;
    else
        t->newest = r->tenant_older;
    if (--t->count > 0)
        return;
    for (pp = &s->tenants[fnv1a(t->name) % NTENANT_BUCKETS]; *pp != t; pp = &(*pp)->next_in_bucket)
        ;
    *pp = t->next_in_bucket;
    free(t);
}

static void tenant_append(struct tenant_records *t, struct record *r)
{
    r->owner = t;
    r->tenant_older = t->newest;
    r->tenant_newer = NULL;
    if (t->newest != NULL)
        t->newest->tenant_newer = r;
    else
        t->oldest = r;
    t->newest = r;
    t->count++;
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
    s->dirfd = -1;
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
    tenant_unlink(s, r);
    s->count--;
    s->bytes -= r->len;
    free(r);
}

void judge0_store_free(struct judge0_store *s)
{
    if (s == NULL)
        return;
    dir_close(s);
    redis_close(s);
    while (s->oldest != NULL)
        drop(s, s->oldest);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

static struct judge0_store *default_store;

static void make_default(void)
{
    const struct judge0_store_limits lim = {GW_DEFAULT_JUDGE0_MAX_RECORDS, GW_DEFAULT_JUDGE0_MAX_PER_TENANT,
                                            GW_DEFAULT_JUDGE0_MAX_BYTES, GW_DEFAULT_JUDGE0_TTL_S * 1000ull};

    if (default_store == NULL)
        default_store = judge0_store_new(&lim);
}

void judge0_store_set_default(struct judge0_store *s)
{
    judge0_store_free(default_store);
    default_store = s;
}

uint64_t judge0_store_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
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
    struct tenant_records *t;

    while ((t = tenant_records(s, tenant, 0)) != NULL && t->count >= s->lim.max_records_per_tenant)
        drop(s, t->oldest); /* the last one frees t: looked up again */
    while (s->oldest != NULL && (s->count >= s->lim.max_records || s->bytes + len > s->lim.max_bytes))
        drop(s, s->oldest);
}

int judge0_store_put(struct judge0_store *s, const char *tenant, const char *token, const char *text, size_t len, uint64_t now_ms)
{
    return judge0_store_put_mode(s, tenant, token, text, len, now_ms, JUDGE0_PUT_REPLACE) < 0 ? -1 : 0;
}

void judge0_store_owned_by_queue(struct judge0_store *s)
{
    s->queue_owned = 1;
}

int judge0_store_put_mode(struct judge0_store *s, const char *tenant, const char *token, const char *text, size_t len,
                          uint64_t now_ms, enum judge0_put_mode mode)
{
    struct record *r;
    unsigned b;

    if (s->dirfd >= 0)
        return dir_put(s, tenant, token, text, len, now_ms);
    if (s->redis)
        return -1; /* answered on a loop: judge0_store_put_on */
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
    struct tenant_records *t = tenant_records(s, tenant, 1);
    if (t == NULL) {
        pthread_mutex_unlock(&s->lock);
        free(r);
        return -1;
    }
    tenant_append(t, r);
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

char *judge0_store_get(struct judge0_store *s, const char *tenant, const char *token, uint64_t now_ms, size_t *len, int *orphaned)
{
    char *copy = NULL;

    *orphaned = 0;
    if (s->dirfd >= 0)
        return dir_get(s, tenant, token, now_ms, len, orphaned);
    if (s->redis) {
        *orphaned = JUDGE0_STORE_DOWN; /* answered on a loop: judge0_store_get_on */
        return NULL;
    }
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

/* ------------------------------------------------------ the directory store */

/*
 * Theory of operation
 * -------------------
 * store_dir/<hex SHA-256 of the tenant>/<token>: one file per record, in a
 * directory per tenant, so a tenant's name never becomes a path and
 * another tenant's token is simply a file that is not there.  A token must
 * be a UUID's shape before it is used in a path.  A file is
 *
 *   "moat-judge0 1 <expires_ms> <instance>\n" and the record's text
 *
 * expires_ms by the wall clock (the life survives a restart), instance
 * the 32 hex digits of the putting process (a record kept as pending by
 * another process belongs to a gateway that died: judge0_store_get says
 * so and judge0_handlers.c turns it into an Internal Error).
 *
 * A put writes ".tmp-<token>" (O_CREAT|O_EXCL|O_NOFOLLOW, mode 0600),
 * fsyncs it, renames it over "<token>" and fsyncs the directory: a reader
 * sees the old record or the new one, never half of one, and a crash
 * leaves at most a temporary file, removed at the next open.  A get opens
 * with O_NOFOLLOW and reads only a regular file of this user's with one
 * link: a symlink or hard link planted in the directory is not followed.
 *
 * The caps: the counts and bytes of all records are tallied in memory
 * (counted at open, kept by put and by every removal); the tenant's own
 * count is a walk of its directory at put (at most its cap of entries),
 * and past it the tenant's oldest (by mtime) goes.  Past the overall caps
 * the put is refused: finding everyone's oldest would be a walk of all.
 * Expired records are removed when read, and by a sweep that each put and
 * get moves on by GW_JUDGE0_SWEEP_PER_TICK entries, round the directories.
 *
 * One mutex guards it all, file I/O included (the fsyncs too): simple,
 * and puts are one per submission's start and one per its end.  The cost:
 * a put holds its worker's event loop (and any other worker's put or get)
 * for two fsyncs, milliseconds on a local disk; a thread of its own for
 * the writes would lift that, and belongs with the fair queue.  The calls a worker needs for
 * this are confine.c's rows marked "judge0_store.c".
 */

#define HEADER_MAGIC "moat-judge0 1 "
#define HEADER_MAX   80 /* magic, 20 digits, a space, 32 hex digits, a newline */
#define TENANT_HEX   (2 * SHA256_DIGEST_LENGTH)

/* A token's shape: 8-4-4-4-12 lowercase hex digits (never "." or "/"). */
static int token_ok(const char *t)
{
    size_t i;

    for (i = 0; t[i] != '\0'; i++) {
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (t[i] != '-')
                return 0;
        } else if (!((t[i] >= '0' && t[i] <= '9') || (t[i] >= 'a' && t[i] <= 'f'))) {
            return 0;
        }
    }
    return i == 36;
}

static int hex_name_ok(const char *n)
{
    size_t i;

    for (i = 0; n[i] != '\0'; i++)
        if (!((n[i] >= '0' && n[i] <= '9') || (n[i] >= 'a' && n[i] <= 'f')))
            return 0;
    return i == TENANT_HEX;
}

static void tenant_dir_name(const char *tenant, char out[TENANT_HEX + 1])
{
    unsigned char md[SHA256_DIGEST_LENGTH];

    SHA256((const unsigned char *)tenant, strlen(tenant), md);
    for (int i = 0; i < SHA256_DIGEST_LENGTH; i++)
        snprintf(out + 2 * i, 3, "%02x", md[i]);
}

/* dir itself: a directory of ours that nobody else may write (fd kept in *fdp, or closed). */
static int check_dir(const char *dir, int *fdp, char *err, size_t errlen)
{
    struct stat st;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

    if (fd == -1) {
        snprintf(err, errlen, "%s: %s", dir, strerror(errno));
        return -1;
    }
    if (fstat(fd, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "%s: not a directory", dir);
    } else if (st.st_uid != geteuid()) {
        snprintf(err, errlen, "%s: owned by uid %u, not by the gateway's user (uid %u)", dir, (unsigned)st.st_uid,
                 (unsigned)geteuid());
    } else if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
        snprintf(err, errlen, "%s: group or others may write it (mode %04o): make it 0700", dir, (unsigned)(st.st_mode & 07777));
    } else {
        if (fdp != NULL)
            *fdp = fd;
        else
            close(fd);
        return 0;
    }
    close(fd);
    return -1;
}

int judge0_store_check_dir(const char *dir, char *err, size_t errlen)
{
    return check_dir(dir, NULL, err, errlen);
}

/* The tenant's directory (made when create and missing), or -1. */
static int open_tenant(struct judge0_store *s, const char *tenant, int create)
{
    char name[TENANT_HEX + 1];
    int fd;

    tenant_dir_name(tenant, name);
    fd = openat(s->dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd == -1 && errno == ENOENT && create) {
        if (mkdirat(s->dirfd, name, 0700) != 0 && errno != EEXIST)
            return -1;
        fd = openat(s->dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    }
    return fd;
}

/* name in tdir: a regular file of ours with one link (*st filled), else -1. */
static int entry_stat(int tdir, const char *name, struct stat *st)
{
    if (fstatat(tdir, name, st, AT_SYMLINK_NOFOLLOW) != 0)
        return -1;
    return S_ISREG(st->st_mode) && st->st_uid == geteuid() && st->st_nlink == 1 ? 0 : -1;
}

/* Remove tdir's record name of size bytes, and its tally (lock held). */
static void remove_record(struct judge0_store *s, int tdir, const char *name, off_t size)
{
    if (unlinkat(tdir, name, 0) != 0)
        return;
    s->count -= s->count > 0 ? 1 : 0;
    s->bytes -= s->bytes >= (size_t)size ? (size_t)size : s->bytes;
}

/* Parse a header at buf[0..n): its expiry, instance and length, or -1. */
static int parse_header(const char *buf, size_t n, uint64_t *expires, char instance[33], size_t *hlen)
{
    const char *nl = memchr(buf, '\n', n < HEADER_MAX ? n : HEADER_MAX), *p;
    char *end;

    if (nl == NULL || (size_t)(nl - buf) < sizeof(HEADER_MAGIC) - 1 || memcmp(buf, HEADER_MAGIC, sizeof(HEADER_MAGIC) - 1) != 0)
        return -1;
    p = buf + sizeof(HEADER_MAGIC) - 1;
    if (*p < '0' || *p > '9')
        return -1;
    errno = 0;
    *expires = strtoull(p, &end, 10);
    if (errno != 0 || *end != ' ' || nl - (end + 1) != 32)
        return -1;
    for (int i = 0; i < 32; i++) {
        char c = end[1 + i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return -1;
        instance[i] = c;
    }
    instance[32] = '\0';
    *hlen = (size_t)(nl - buf) + 1;
    return 0;
}

/* The whole of tdir's record name (malloc'ed, NUL added; *n its bytes), or NULL. */
static char *read_record(int tdir, const char *name, size_t *n)
{
    struct stat st;
    char *buf;
    size_t got = 0;
    int fd = openat(tdir, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);

    if (fd == -1)
        return NULL;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() || st.st_nlink != 1 ||
        st.st_size > (off_t)(GW_JUDGE0_RECORD_MAX_BYTES + HEADER_MAX) || (buf = malloc((size_t)st.st_size + 1)) == NULL) {
        close(fd);
        return NULL;
    }
    while (got < (size_t)st.st_size) {
        ssize_t k = read(fd, buf + got, (size_t)st.st_size - got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        got += (size_t)k;
    }
    close(fd);
    if (got != (size_t)st.st_size) {
        free(buf);
        return NULL;
    }
    buf[got] = '\0';
    *n = got;
    return buf;
}

/* tdir's entry name has expired (or is no record at all): remove it (lock held). */
static void sweep_entry(struct judge0_store *s, int tdir, const char *name, uint64_t now_ms)
{
    struct stat st;
    char buf[HEADER_MAX], instance[33];
    uint64_t expires;
    size_t hlen;
    ssize_t k;
    int fd;

    if (!token_ok(name) || entry_stat(tdir, name, &st) != 0)
        return; /* temporary files are the open's; strangers are left for a human */
    if ((fd = openat(tdir, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY)) == -1)
        return;
    k = read(fd, buf, sizeof(buf));
    close(fd);
    if (k > 0 && parse_header(buf, (size_t)k, &expires, instance, &hlen) == 0 && expires > now_ms)
        return;
    remove_record(s, tdir, name, st.st_size); /* expired, or corrupt: never readable */
}

/* Move the sweep on by up to GW_JUDGE0_SWEEP_PER_TICK entries (lock held). */
static void sweep_tick(struct judge0_store *s, uint64_t now_ms)
{
    struct dirent *de;

    if (s->sweep_top == NULL) {
        int fd = openat(s->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd == -1 || (s->sweep_top = fdopendir(fd)) == NULL) {
            if (fd != -1)
                close(fd);
            return;
        }
    }
    for (int n = 0; n < GW_JUDGE0_SWEEP_PER_TICK; n++) {
        if (s->sweep_tenant == NULL) {
            int fd;
            if ((de = readdir(s->sweep_top)) == NULL) {
                rewinddir(s->sweep_top); /* once round: the next tick starts again */
                return;
            }
            if (!hex_name_ok(de->d_name))
                continue;
            fd = openat(s->dirfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (fd != -1 && (s->sweep_tenant = fdopendir(fd)) == NULL)
                close(fd);
            continue;
        }
        if ((de = readdir(s->sweep_tenant)) == NULL) {
            closedir(s->sweep_tenant);
            s->sweep_tenant = NULL;
            continue;
        }
        sweep_entry(s, dirfd(s->sweep_tenant), de->d_name, now_ms);
    }
}

static void dir_close(struct judge0_store *s)
{
    if (s->sweep_tenant != NULL)
        closedir(s->sweep_tenant);
    if (s->sweep_top != NULL)
        closedir(s->sweep_top);
    if (s->dirfd >= 0)
        close(s->dirfd);
    s->sweep_tenant = s->sweep_top = NULL;
    s->dirfd = -1;
}

/* At open: tally one tenant directory's records, remove its temporary files. */
static void count_tenant(struct judge0_store *s, int tdir)
{
    DIR *d = fdopendir(tdir);
    struct dirent *de;
    struct stat st;

    if (d == NULL) {
        close(tdir);
        return;
    }
    while ((de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, ".tmp-", 5) == 0 && token_ok(de->d_name + 5))
            (void)unlinkat(dirfd(d), de->d_name, 0); /* a put that died before its rename */
        else if (token_ok(de->d_name) && entry_stat(dirfd(d), de->d_name, &st) == 0) {
            s->count++;
            s->bytes += (size_t)st.st_size;
        }
    }
    closedir(d);
}

struct judge0_store *judge0_store_open_dir(const char *dir, const struct judge0_store_limits *lim, char *err, size_t errlen)
{
    struct judge0_store *s;
    unsigned char rnd[16];
    struct dirent *de;
    DIR *top;
    int fd, tfd;

    if (check_dir(dir, &fd, err, errlen) != 0)
        return NULL;
    if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd) || (s = judge0_store_new(lim)) == NULL) {
        snprintf(err, errlen, "%s: out of memory or randomness", dir);
        close(fd);
        return NULL;
    }
    for (size_t i = 0; i < sizeof(rnd); i++)
        snprintf(s->instance + 2 * i, 3, "%02x", rnd[i]);
    s->dirfd = fd;
    if ((tfd = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) == -1 || (top = fdopendir(tfd)) == NULL) {
        snprintf(err, errlen, "%s: %s", dir, strerror(errno));
        if (tfd != -1)
            close(tfd);
        judge0_store_free(s);
        return NULL;
    }
    while ((de = readdir(top)) != NULL)
        if (hex_name_ok(de->d_name) && (tfd = openat(fd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) != -1)
            count_tenant(s, tfd);
    closedir(top);
    return s;
}

/* All of buf[0..n) to fd: 0 or -1. */
static int write_all(int fd, const char *buf, size_t n)
{
    while (n > 0) {
        ssize_t k = write(fd, buf, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        buf += k;
        n -= (size_t)k;
    }
    return 0;
}

/*
 * Make room for one more of the tenant's records in tdir: past its cap its
 * oldest (by mtime) goes.  The walk is at most the cap's entries (lock held).
 */
static void tenant_room(struct judge0_store *s, int tdir)
{
    int fd = openat(tdir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd != -1 ? fdopendir(fd) : NULL;
    struct dirent *de;
    struct stat st;
    char oldest[40] = "";
    struct timespec when = {0, 0};
    off_t oldest_size = 0;
    size_t mine = 0;

    if (d == NULL) {
        if (fd != -1)
            close(fd);
        return;
    }
    while ((de = readdir(d)) != NULL) {
        if (!token_ok(de->d_name) || entry_stat(tdir, de->d_name, &st) != 0)
            continue;
        mine++;
        if (oldest[0] == '\0' || st.st_mtim.tv_sec < when.tv_sec ||
            (st.st_mtim.tv_sec == when.tv_sec && st.st_mtim.tv_nsec < when.tv_nsec)) {
            memcpy(oldest, de->d_name, 37); /* a token's 36 bytes and the NUL */
            when = st.st_mtim;
            oldest_size = st.st_size;
        }
    }
    closedir(d);
    if (mine >= s->lim.max_records_per_tenant && oldest[0] != '\0')
        remove_record(s, tdir, oldest, oldest_size);
}

/* Write the record as ".tmp-<token>", fsync it, rename it over token, fsync tdir. */
static int write_record(int tdir, const char *token, const char *header, size_t hlen, const char *text, size_t len)
{
    char tmp[48];
    int fd;

    snprintf(tmp, sizeof(tmp), ".tmp-%s", token);
    if ((fd = openat(tdir, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, 0600)) == -1 && errno == EEXIST &&
        unlinkat(tdir, tmp, 0) == 0) /* left by a put that died: ours to replace */
        fd = openat(tdir, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, 0600);
    if (fd == -1)
        return -1;
    if (write_all(fd, header, hlen) != 0 || write_all(fd, text, len) != 0 || fsync(fd) != 0) {
        close(fd);
        (void)unlinkat(tdir, tmp, 0);
        return -1;
    }
    close(fd);
    if (renameat(tdir, tmp, tdir, token) != 0) {
        (void)unlinkat(tdir, tmp, 0);
        return -1;
    }
    return fsync(tdir); /* the rename itself durable */
}

static int dir_put(struct judge0_store *s, const char *tenant, const char *token, const char *text, size_t len, uint64_t now_ms)
{
    char header[HEADER_MAX];
    struct stat st;
    size_t hlen, size;
    int tdir, replacing, rc = -1;

    memset(&st, 0, sizeof(st));
    if (!token_ok(token) || len > GW_JUDGE0_RECORD_MAX_BYTES || s->lim.max_records == 0 || s->lim.max_records_per_tenant == 0)
        return -1;
    hlen = (size_t)snprintf(header, sizeof(header), HEADER_MAGIC "%" PRIu64 " %s\n", now_ms + s->lim.ttl_ms, s->instance);
    size = hlen + len;
    pthread_mutex_lock(&s->lock);
    sweep_tick(s, now_ms);
    if ((tdir = open_tenant(s, tenant, 1)) == -1)
        goto out;
    replacing = fstatat(tdir, token, &st, AT_SYMLINK_NOFOLLOW) == 0;
    if (replacing && entry_stat(tdir, token, &st) != 0)
        goto out; /* a link or a stranger where the record should be: not ours to replace */
    if (!replacing)
        tenant_room(s, tdir);
    if (s->count + (replacing ? 0 : 1) > s->lim.max_records ||
        s->bytes - (replacing ? (size_t)st.st_size : 0) + size > s->lim.max_bytes)
        goto out;
    if (write_record(tdir, token, header, hlen, text, len) != 0)
        goto out;
    if (replacing)
        s->bytes -= (size_t)st.st_size;
    else
        s->count++;
    s->bytes += size;
    rc = 0;
out:
    if (tdir != -1)
        close(tdir);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static char *dir_get(struct judge0_store *s, const char *tenant, const char *token, uint64_t now_ms, size_t *len, int *orphaned)
{
    char instance[33], *buf = NULL, *text = NULL;
    uint64_t expires;
    size_t n = 0, hlen;
    int tdir;

    if (!token_ok(token))
        return NULL;
    pthread_mutex_lock(&s->lock);
    sweep_tick(s, now_ms);
    if ((tdir = open_tenant(s, tenant, 0)) == -1 || (buf = read_record(tdir, token, &n)) == NULL)
        goto out;
    if (parse_header(buf, n, &expires, instance, &hlen) != 0)
        goto out; /* corrupt: not found (the sweep removes it) */
    if (expires <= now_ms) {
        remove_record(s, tdir, token, (off_t)n);
        goto out;
    }
    if ((text = malloc(n - hlen + 1)) != NULL) {
        memcpy(text, buf + hlen, n - hlen + 1);
        *len = n - hlen;
        *orphaned = strcmp(instance, s->instance) != 0;
    }
out:
    free(buf);
    if (tdir != -1)
        close(tdir);
    pthread_mutex_unlock(&s->lock);
    return text;
}

/* ---------------------------------------------------------- the Redis store */

/*
 * Theory of operation
 * -------------------
 * Several gateways share one Redis through the gateway's one asynchronous
 * client (store/redis_client.c: a connection per event loop, bounded by
 * timeouts; the limiter section's connection settings).  Nothing here
 * blocks: a get or a put is sent on the calling loop's connection and
 * answered on that loop, so a slow Redis delays the requests that need it
 * and no others (tests/bench/bench_redis_slow.py measures it).
 *
 *   P j:<tenant hex>:<token>  a hash {i: the putting gateway's name,
 *                             t: the record's text, f: 1 when final},
 *                             expiring ttl_ms after its put (PEXPIRE)
 *   P j:<tenant hex>          the tenant's tokens, a sorted set scored by
 *                             expiry (the put's wall clock + ttl_ms)
 *
 * The tenant is in every key, in hex (any byte of a name is safe and two
 * names never share a key), so another tenant's token is a key that does
 * not exist: "not found", exactly like a token that never existed.  A put
 * is one script (atomic across gateways): expired tokens leave the set;
 * a new token past the tenant's cap evicts the tenant's oldest (lowest
 * expiry) records; then the record and its set entry are written.  The
 * overall caps (max_records, max_bytes) are not counted here: Redis'
 * maxmemory bounds it (moat-gateway(8) says how to set it); a record is still
 * capped at GW_JUDGE0_RECORD_MAX_BYTES.
 *
 * A get is one script for all the tokens asked (GET /submissions/batch:
 * one round trip): per token the record's text, its owner, and whether
 * the owner's heartbeat key still exists.  A record kept by another
 * gateway whose heartbeat is gone is an orphan (if it is pending, its run
 * died with that gateway and judge0_handlers.c turns it into an Internal
 * Error, as with the directory store); one kept by a live gateway is not,
 * even if it is pending: its run is still going on over there.  Only a
 * settled connection judges (redis_conn_settled): after a Redis restart
 * without persistence every heartbeat key is gone for a moment.
 *
 * How a put meets what is kept is its mode (judge0_put_mode): a final
 * record (f = 1) is never replaced by a pending one or another final one,
 * "In Queue" is written only where nothing is.  So puts of one token from
 * different loops (connections), or one retried late, cannot undo an end.
 * With queue: redis (judge0_store_owned_by_queue) the records belong to
 * the shared queue: their owner is JUDGE0_QUEUE_OWNER and they are never
 * orphaned (a dead gateway's runs are taken over, and the queue ends each
 * one).
 *
 * Redis unreachable: a get is not sent (the handler: 503
 * store_unavailable with Retry-After); judge0_store_ready (the loop's
 * connection is up or being made: no round trip) lets a POST refuse before it runs
 * anything whose result it could not keep.  A put that fails anyway
 * (Redis went away during a run) is kept here, on a list of at most
 * GW_JUDGE0_REDIS_RETRY_MAX records (a newer put of the same token
 * replaces it; past the cap the oldest goes, logged), and written again,
 * oldest first and one at a time, from the loop of a put that failed,
 * every GW_JUDGE0_REDIS_RETRY_MS until Redis takes them: a finished run's
 * result is not lost to a short outage, and its "Processing" is not shown
 * for ever.
 */
#define RKEY_MAX (GW_REDIS_MAX_PREFIX + 2 + 2 * GW_MAX_TENANT_NAME + 1 + 40)

/* KEYS: record, tenant's set.  ARGV: token, owner, text, ttl_ms, now_ms,
 * cap, record keys' prefix (the tenant's set key and ":"), mode
 * (judge0_put_mode).  1 written, 2 not (the mode keeps what is there). */
static struct redis_script put_script = {
    "local token, ttl, now, cap = ARGV[1], tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])\n"
    "local mode = tonumber(ARGV[8])\n"
    "if mode == 1 and redis.call('EXISTS', KEYS[1]) == 1 then return 2 end\n"
    "if mode >= 2 and redis.call('HGET', KEYS[1], 'f') == '1' then return 2 end\n"
    "redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)\n"
    "if not redis.call('ZSCORE', KEYS[2], token) then\n"
    "  local n = redis.call('ZCARD', KEYS[2])\n"
    "  if n >= cap then\n"
    "    local old = redis.call('ZRANGE', KEYS[2], 0, n - cap)\n"
    "    for i = 1, #old do redis.call('DEL', ARGV[7] .. old[i]) end\n"
    "    redis.call('ZREMRANGEBYRANK', KEYS[2], 0, n - cap)\n"
    "  end\n"
    "end\n"
    "redis.call('HSET', KEYS[1], 'i', ARGV[2], 't', ARGV[3], 'f', mode == 3 and '1' or '0')\n"
    "redis.call('PEXPIRE', KEYS[1], ttl)\n"
    "redis.call('ZADD', KEYS[2], now + ttl, token)\n"
    "redis.call('PEXPIRE', KEYS[2], ttl)\n"
    "return 1\n",
    "", NULL};

/* KEYS: the records.  ARGV: the heartbeat keys' prefix.  Per key
 * {text, owner, alive}, or 0 (none). */
static struct redis_script get_script = {"local out = {}\n"
                                         "for i = 1, #KEYS do\n"
                                         "  local v = redis.call('HMGET', KEYS[i], 'i', 't')\n"
                                         "  if v[1] and v[2] then out[i] = {v[2], v[1], redis.call('EXISTS', ARGV[1] .. v[1])}\n"
                                         "  else out[i] = 0 end\n"
                                         "end\n"
                                         "return out\n",
                                         "", NULL};

/* A put on its way to Redis, or one Redis did not take, to be tried again. */
struct rput {
    struct rput *next; /* the retries, oldest first */
    struct judge0_store *s;
    h2o_loop_t *loop; /* whose connection it went on */
    judge0_put_fn fn;
    void *arg;
    uint64_t now_ms;
    size_t len;
    enum judge0_put_mode mode;
    char tenant[GW_MAX_TENANT_NAME + 1];
    char token[40];
    char text[]; /* len bytes and a NUL */
};

static pthread_mutex_t retry_mu = PTHREAD_MUTEX_INITIALIZER;
static struct rput *retries; /* oldest first */
static size_t nretries;
static int flushing;                     /* a retry is on its way */
static struct judge0_store *retry_store; /* the Redis store the retries are for */

/* The flush's timer, on the loop of each thread whose put failed. */
static __thread struct {
    h2o_loop_t *loop;
    h2o_timeout_t timeout;
    h2o_timeout_entry_t entry;
} flush_timer;

/* The tenant's set key, and the record's key (NULL: only the set's). */
static void redis_keys(const struct judge0_store *s, const char *tenant, const char *token, char set[RKEY_MAX], char rec[RKEY_MAX])
{
    char hex[2 * GW_MAX_TENANT_NAME + 1];

    moat_hex_encode(tenant, strlen(tenant), hex);
    snprintf(set, RKEY_MAX, "%sj:%s", redis_client_prefix(s->rc), hex);
    if (rec != NULL)
        snprintf(rec, RKEY_MAX, "%s:%s", set, token);
}

struct judge0_store *judge0_store_open_redis(struct redis_client *rc, const struct judge0_store_limits *lim, char *err,
                                             size_t errlen)
{
    struct judge0_store *s;

    if (retry_store != NULL) {
        snprintf(err, errlen, "one Redis store per process");
        return NULL;
    }
    if ((s = judge0_store_new(lim)) == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    redis_script_init(&put_script);
    redis_script_init(&get_script);
    redis_client_add_script(rc, &put_script);
    redis_client_add_script(rc, &get_script);
    s->redis = 1;
    s->rc = rc;
    retry_store = s;
    return s;
}

int judge0_store_remote(const struct judge0_store *s)
{
    return s->redis;
}

static struct rput *rput_new(struct judge0_store *s, const char *tenant, const char *token, const char *text, size_t len,
                             uint64_t now_ms, enum judge0_put_mode mode)
{
    struct rput *p = malloc(sizeof(*p) + len + 1);

    if (p == NULL)
        return NULL;
    memset(p, 0, sizeof(*p));
    p->s = s;
    snprintf(p->tenant, sizeof(p->tenant), "%s", tenant);
    snprintf(p->token, sizeof(p->token), "%s", token);
    memcpy(p->text, text, len);
    p->text[len] = '\0';
    p->len = len;
    p->now_ms = now_ms;
    p->mode = mode;
    return p;
}

/* Forget the retry of tenant's token, if any (retry_mu held). */
static void retry_forget(const char *tenant, const char *token)
{
    for (struct rput **pp = &retries, *q; (q = *pp) != NULL; pp = &q->next)
        if (strcmp(q->token, token) == 0 && strcmp(q->tenant, tenant) == 0) {
            *pp = q->next;
            free(q);
            nretries--;
            return;
        }
}

static void flush_arm(h2o_loop_t *loop);

/* Keep p to try again (taking it), replacing an older one of its token,
 * or ahead of every other (first: a retry that failed again). */
static void retry_keep(struct rput *p, h2o_loop_t *loop, int first)
{
    struct rput **pp;

    p->fn = NULL;
    pthread_mutex_lock(&retry_mu);
    if (!first)
        retry_forget(p->tenant, p->token);
    if (nretries >= GW_JUDGE0_REDIS_RETRY_MAX) {
        struct rput *old = retries;
        log_warnx("%s: token %s: more than %u puts wait for Redis: the oldest is lost", __func__, old->token,
                  GW_JUDGE0_REDIS_RETRY_MAX);
        retries = old->next;
        free(old);
        nretries--;
    }
    if (first) {
        p->next = retries;
        retries = p;
    } else {
        for (pp = &retries; *pp != NULL; pp = &(*pp)->next)
            ;
        p->next = NULL;
        *pp = p;
    }
    nretries++;
    pthread_mutex_unlock(&retry_mu);
    flush_arm(loop);
}

static int rput_send(struct rput *p, h2o_loop_t *loop, redis_reply_fn done);

/* A put's answer: 1 written, 2 kept what was there (0 or 1 to the
 * caller); anything else is "not taken": kept to try again (-1). */
static int put_answer(const redisReply *reply)
{
    if (reply == NULL || reply->type != REDIS_REPLY_INTEGER || (reply->integer != 1 && reply->integer != 2))
        return -1;
    return reply->integer == 1 ? 0 : 1;
}

static void flush_next(h2o_loop_t *loop);

static void on_retried(void *arg, const redisReply *reply)
{
    struct rput *p = arg;
    h2o_loop_t *loop = p->loop;

    if (put_answer(reply) < 0) {
        pthread_mutex_lock(&retry_mu);
        flushing = 0;
        pthread_mutex_unlock(&retry_mu);
        retry_keep(p, loop, 1);
        return;
    }
    log_info("judge0_store: token %s: kept in Redis after an outage", p->token);
    free(p);
    pthread_mutex_lock(&retry_mu);
    flushing = 0;
    pthread_mutex_unlock(&retry_mu);
    flush_next(loop);
}

/* Send the oldest retry, unless one is on its way already. */
static void flush_next(h2o_loop_t *loop)
{
    struct rput *p;

    pthread_mutex_lock(&retry_mu);
    if (flushing || (p = retries) == NULL || retry_store == NULL) {
        pthread_mutex_unlock(&retry_mu);
        return;
    }
    retries = p->next;
    nretries--;
    flushing = 1;
    pthread_mutex_unlock(&retry_mu);
    if (rput_send(p, loop, on_retried) != 0) {
        pthread_mutex_lock(&retry_mu);
        flushing = 0;
        pthread_mutex_unlock(&retry_mu);
        retry_keep(p, loop, 1);
    }
}

static void on_flush_tick(h2o_timeout_entry_t *entry)
{
    (void)entry;
    flush_next(flush_timer.loop);
    pthread_mutex_lock(&retry_mu);
    int more = retries != NULL;
    pthread_mutex_unlock(&retry_mu);
    if (more)
        flush_arm(flush_timer.loop);
}

/* Try the retries again in GW_JUDGE0_REDIS_RETRY_MS, on loop (this thread's). */
static void flush_arm(h2o_loop_t *loop)
{
    if (loop == NULL)
        return;
    if (flush_timer.loop == NULL) {
        flush_timer.loop = loop;
        h2o_timeout_init(loop, &flush_timer.timeout, GW_JUDGE0_REDIS_RETRY_MS);
        flush_timer.entry.cb = on_flush_tick;
    }
    if (!h2o_timeout_is_linked(&flush_timer.entry))
        h2o_timeout_link(flush_timer.loop, &flush_timer.timeout, &flush_timer.entry);
}

/* The put script for p on loop's connection: 0 sent (done hears it), -1 not. */
static int rput_send(struct rput *p, h2o_loop_t *loop, redis_reply_fn done)
{
    const struct judge0_store *s = p->s;
    char set[RKEY_MAX], rec[RKEY_MAX], prefix[RKEY_MAX + 1], ttl[24], now[24], cap[24], m[4];
    const char *argv[10];
    size_t lens[10];
    struct redis_conn *c = redis_client_conn(s->rc, loop);

    if (c == NULL)
        return -1;
    p->loop = loop;
    redis_keys(s, p->tenant, p->token, set, rec);
    snprintf(prefix, sizeof(prefix), "%s:", set);
    snprintf(ttl, sizeof(ttl), "%" PRIu64, s->lim.ttl_ms);
    snprintf(now, sizeof(now), "%" PRIu64, p->now_ms);
    snprintf(cap, sizeof(cap), "%zu", s->lim.max_records_per_tenant);
    snprintf(m, sizeof(m), "%d", (int)p->mode);
    argv[0] = rec;
    argv[1] = set;
    argv[2] = p->token;
    argv[3] = s->queue_owned ? JUDGE0_QUEUE_OWNER : redis_client_id(s->rc);
    argv[4] = p->text;
    argv[5] = ttl;
    argv[6] = now;
    argv[7] = cap;
    argv[8] = prefix;
    argv[9] = m;
    for (int i = 0; i < 10; i++)
        lens[i] = i == 4 ? p->len : strlen(argv[i]);
    return redis_conn_eval(c, &put_script, 2, 10, argv, lens, done, p);
}

static void on_put(void *arg, const redisReply *reply)
{
    struct rput *p = arg;
    int rc = put_answer(reply);
    judge0_put_fn fn = p->fn;
    void *fn_arg = p->arg;

    if (rc < 0) {
        if (p->s != retry_store) /* the store is gone (shutting down) */
            free(p);
        else
            retry_keep(p, p->loop, 0);
    } else {
        pthread_mutex_lock(&retry_mu);
        retry_forget(p->tenant, p->token); /* an older one still waiting would undo this */
        pthread_mutex_unlock(&retry_mu);
        free(p);
    }
    if (fn != NULL)
        fn(fn_arg, rc);
}

/* As judge0_store_put_on for the Redis store. */
static void redis_put_on(struct judge0_store *s, h2o_loop_t *loop, const char *tenant, const char *token, const char *text,
                         size_t len, uint64_t now_ms, enum judge0_put_mode mode, judge0_put_fn fn, void *arg)
{
    struct rput *p;

    if (len > GW_JUDGE0_RECORD_MAX_BYTES || strlen(tenant) > GW_MAX_TENANT_NAME || strlen(token) >= 40 ||
        s->lim.max_records_per_tenant == 0 || (p = rput_new(s, tenant, token, text, len, now_ms, mode)) == NULL) {
        if (fn != NULL)
            fn(arg, -1);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    if (rput_send(p, loop, on_put) != 0) {
        retry_keep(p, loop, 0);
        if (fn != NULL)
            fn(arg, -1);
    }
}

/* A get on its way. */
struct rget {
    struct judge0_store *s;
    judge0_get_fn fn;
    void *arg;
    size_t n;
    int settled; /* the connection could judge orphans when it asked */
};

static void on_got(void *arg, const redisReply *reply)
{
    struct rget *g = arg;
    struct judge0_got got[JUDGE0_GET_MAX];
    int ok = reply != NULL && reply->type == REDIS_REPLY_ARRAY && reply->elements == g->n;

    memset(got, 0, sizeof(got));
    for (size_t i = 0; ok && i < g->n; i++) {
        const redisReply *e = reply->element[i];
        if (e->type == REDIS_REPLY_INTEGER && e->integer == 0)
            continue; /* none */
        if (e->type != REDIS_REPLY_ARRAY || e->elements != 3 || e->element[0]->type != REDIS_REPLY_STRING ||
            e->element[1]->type != REDIS_REPLY_STRING || e->element[2]->type != REDIS_REPLY_INTEGER) {
            ok = 0;
            break;
        }
        got[i].text = e->element[0]->str;
        got[i].len = e->element[0]->len;
        got[i].orphaned = !g->s->queue_owned && strcmp(e->element[1]->str, redis_client_id(g->s->rc)) != 0 &&
                          e->element[2]->integer == 0 && g->settled;
    }
    if (!ok && reply != NULL)
        log_warnx("judge0_store: an answer to a get that is not the script's: taken as no answer");
    g->fn(g->arg, !ok, got, g->n);
    free(g);
}

int judge0_store_get_on(struct judge0_store *s, h2o_loop_t *loop, const char *tenant, const char *const *tokens, size_t n,
                        judge0_get_fn fn, void *arg)
{
    char keys[JUDGE0_GET_MAX][RKEY_MAX], set[RKEY_MAX];
    const char *argv[JUDGE0_GET_MAX + 1];
    struct redis_conn *c;
    struct rget *g;

    if (!s->redis || n == 0 || n > JUDGE0_GET_MAX || strlen(tenant) > GW_MAX_TENANT_NAME)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (strlen(tokens[i]) >= 40)
            return -1;
        redis_keys(s, tenant, tokens[i], set, keys[i]);
        argv[i] = keys[i];
    }
    argv[n] = redis_client_beat_prefix(s->rc);
    if ((c = redis_client_conn(s->rc, loop)) == NULL || (g = calloc(1, sizeof(*g))) == NULL)
        return -1;
    *g = (struct rget){s, fn, arg, n, redis_conn_settled(c)};
    if (redis_conn_eval(c, &get_script, (int)n, (int)n + 1, argv, NULL, on_got, g) != 0) {
        free(g);
        return -1;
    }
    return 0;
}

void judge0_store_put_on(struct judge0_store *s, h2o_loop_t *loop, const char *tenant, const char *token, const char *text,
                         size_t len, uint64_t now_ms, enum judge0_put_mode mode, judge0_put_fn fn, void *arg)
{
    int rc;

    if (s->redis) {
        redis_put_on(s, loop, tenant, token, text, len, now_ms, mode, fn, arg);
        return;
    }
    rc = judge0_store_put_mode(s, tenant, token, text, len, now_ms, mode);
    if (fn != NULL)
        fn(arg, rc);
}

static void redis_close(struct judge0_store *s)
{
    if (!s->redis || s != retry_store)
        return;
    pthread_mutex_lock(&retry_mu);
    while (retries != NULL) {
        struct rput *q = retries;
        retries = q->next;
        free(q);
    }
    nretries = 0;
    retry_store = NULL; /* a flush finds nothing to do */
    pthread_mutex_unlock(&retry_mu);
}

int judge0_store_ready(struct judge0_store *s, h2o_loop_t *loop, uint64_t *retry_after_ms)
{
    struct redis_conn *c;

    if (!s->redis)
        return 1;
    c = redis_client_conn(s->rc, loop);
    if (redis_conn_usable(c))
        return 1;
    *retry_after_ms = c != NULL ? redis_conn_retry_after_ms(c) : GW_REDIS_BACKOFF_MIN_MS;
    return 0;
}
