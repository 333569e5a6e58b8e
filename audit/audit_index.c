/*
 * audit_index.c - the writer's index of executions (audit_index.h).
 *
 * Theory of operation
 * -------------------
 * A worker may ask the writer for one execution's records and packet (the
 * result packet a reviewer reads), and may send a review of it.  Neither
 * may cost a scan of the log, and neither may show one tenant another's
 * records.  So the writer keeps, in memory, where the records of the
 * newest executions are:
 *
 *   key:    SHA-256 of tenant, a NUL and request id, so a record is found
 *           only under its own tenant: asked with another tenant, the same
 *           request id finds nothing (not found, never "forbidden");
 *   entry:  the line's file, offset, length, seq and SHA-256, as the
 *           writer wrote it (audit_line_ref), and its kind (request,
 *           result, review);
 *   ring:   AUDIT_INDEX_RECORDS entries, the newest; a new one takes the
 *           oldest's slot.  Each entry is numbered (1, 2, ...); buckets and
 *           the chains through them name entries by number, newest first,
 *           so a chain ends at the first number whose slot now holds a
 *           newer one (everything after it is older still).  Nothing is
 *           ever unlinked and memory is fixed.
 *
 * What is indexed: the durable lines (noted after the batch's fdatasync)
 * of allowed requests, results and reviews that name a tenant and a
 * request id; and at open, the newest AUDIT_INDEX_SCAN_BYTES of log files,
 * whole files oldest first, each line's prev checked against the line
 * before it.  Denials are not indexed (they are no execution, and a flood
 * of them must not push executions out).  What is older than the ring or
 * than the scan is not found here; `moat-audit show` still finds it.
 *
 * Reading back (audit_index_find): each line is read from its file and
 * must hash to what the writer wrote, and name the tenant and request id
 * asked for; the packet of the execution's last result record is read
 * from its pack and must hash to the record's "packet".  Any mismatch is
 * an error and nothing is served.  A pack removed by the retention leaves
 * the records without their packet.
 *
 * Reviews (audit_index_check_review): a review must name the result record
 * of an execution of its own tenant by seq and by the SHA-256 of its line,
 * so it says exactly what was reviewed; the writer refuses it otherwise.
 */
#include "audit_index.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "audit_log_internal.h"
#include "json_scan.h"
#include "moat_hex.h"

#define NBUCKETS          (2 * AUDIT_INDEX_RECORDS) /* a power of two */
#define FOUND_MAX_PACKET  (16u * 1024u * 1024u)
#define MAX_SCANNED_FILES 4096

enum kind { KIND_REQUEST = 1, KIND_RESULT, KIND_REVIEW };

struct entry {
    uint64_t number; /* 0: empty */
    uint64_t older;  /* the next entry of the bucket's chain, by number; 0: none */
    uint8_t key[AUDIT_HASH_LEN];
    struct audit_line_ref ref;
    uint8_t kind;
};

struct audit_index {
    uint64_t count; /* entries ever noted: the newest's number */
    uint64_t heads[NBUCKETS];
    struct entry ring[AUDIT_INDEX_RECORDS];
};

struct audit_index *audit_index_new(void)
{
    return calloc(1, sizeof(struct audit_index));
}

void audit_index_free(struct audit_index *ix)
{
    free(ix);
}

void audit_found_free(struct audit_found *f)
{
    free(f->records);
    free(f->packet);
    memset(f, 0, sizeof(*f));
}

/* A SHA-256 in canonical hex (64 lowercase digits) into out; 0 or -1. */
static int hash_of_hex(const char *hex, uint8_t out[AUDIT_HASH_LEN])
{
    return hex != NULL && strlen(hex) == AUDIT_HEX_LEN && moat_hex_decode(hex, AUDIT_HEX_LEN, out, MOAT_HEX_LOWER) == 0 ? 0 : -1;
}

/* ---- a record's fields ------------------------------------------------------------------ */

/* A JSON string's value (raw text with its quotes) into out (size bytes);
 * 0, or -1 when it is not a string or does not fit. */
static int string_value(const char *raw, size_t len, char *out, size_t size)
{
    if (len < 2 || raw[0] != '"')
        return -1;
    if (memchr(raw, '\\', len) == NULL) {
        if (len - 2 >= size)
            return -1;
        memcpy(out, raw + 1, len - 2);
        out[len - 2] = '\0';
        return 0;
    }
    json_t *j = json_loadb(raw, len, JSON_DECODE_ANY, NULL);
    int rc = -1;
    if (json_is_string(j) && json_string_length(j) < size && strlen(json_string_value(j)) == json_string_length(j)) {
        memcpy(out, json_string_value(j), json_string_length(j) + 1);
        rc = 0;
    }
    json_decref(j);
    return rc;
}

static int member(void *arg, const char *key, size_t key_len, const char *value, size_t value_len)
{
    struct audit_index_fields *f = arg;
    char decision[16];
#define IS(name) (key_len == sizeof(name) - 1 && memcmp(key, name, key_len) == 0)
    if (IS("type"))
        (void)string_value(value, value_len, f->type, sizeof(f->type));
    else if (IS("request_id"))
        (void)string_value(value, value_len, f->request_id, sizeof(f->request_id));
    else if (IS("tenant"))
        (void)string_value(value, value_len, f->tenant, sizeof(f->tenant));
    else if (IS("decision"))
        f->allowed = string_value(value, value_len, decision, sizeof(decision)) == 0 && strcmp(decision, "allowed") == 0;
    else if (IS("prev"))
        (void)string_value(value, value_len, f->prev, sizeof(f->prev));
    else if (IS("seq") && value_len < 20 && value[0] >= '1' && value[0] <= '9')
        f->seq = strtoull(value, NULL, 10); /* digits only (json_scan or jansson checked them), then a delimiter */
#undef IS
    return 0;
}

/* The slow way, for what json_scan declines: jansson. */
static int fields_by_jansson(const char *json, size_t len, struct audit_index_fields *f)
{
    json_t *j = json_loadb(json, len, JSON_REJECT_DUPLICATES, NULL);
    const char *k;
    json_t *v;
    if (!json_is_object(j)) {
        json_decref(j);
        return -1;
    }
    json_object_foreach(j, k, v)
    {
        if (!json_is_string(v) && !json_is_integer(v))
            continue;
        char *raw = json_dumps(v, JSON_ENCODE_ANY | JSON_ENSURE_ASCII);
        if (raw != NULL)
            (void)member(f, k, strlen(k), raw, strlen(raw));
        free(raw);
    }
    json_decref(j);
    return 0;
}

int audit_index_fields(const char *json, size_t len, struct audit_index_fields *f)
{
    memset(f, 0, sizeof(*f));
    if (audit_json_scan(json, len, member, f) == 0)
        return 0;
    memset(f, 0, sizeof(*f));
    return fields_by_jansson(json, len, f);
}

/* ---- the ring and its buckets ----------------------------------------------------------- */

static void key_of(const char *tenant, const char *request_id, uint8_t key[AUDIT_HASH_LEN])
{
    size_t tl = strlen(tenant), rl = strlen(request_id);
    char buf[2 * AUDIT_INDEX_MAX_ID + 2];
    memcpy(buf, tenant, tl);
    buf[tl] = '\0';
    memcpy(buf + tl + 1, request_id, rl);
    audit_sha256(buf, tl + 1 + rl, key);
}

static size_t bucket(const uint8_t key[AUDIT_HASH_LEN])
{
    uint32_t b;
    memcpy(&b, key, sizeof(b));
    return b & (NBUCKETS - 1);
}

/* The entry numbered n, or NULL when its slot went to a newer one. */
static const struct entry *entry_at(const struct audit_index *ix, uint64_t n)
{
    const struct entry *e = &ix->ring[n % AUDIT_INDEX_RECORDS];
    return n != 0 && e->number == n ? e : NULL;
}

static enum kind kind_of(const struct audit_index_fields *f)
{
    if (f->tenant[0] == '\0' || f->request_id[0] == '\0')
        return 0;
    if (strcmp(f->type, "request") == 0)
        return f->allowed ? KIND_REQUEST : 0;
    if (strcmp(f->type, "result") == 0)
        return KIND_RESULT;
    if (strcmp(f->type, "review") == 0)
        return KIND_REVIEW;
    return 0;
}

void audit_index_note(struct audit_index *ix, const struct audit_index_fields *f, const struct audit_line_ref *ref)
{
    enum kind k = kind_of(f);
    if (k == 0)
        return;
    uint64_t n = ++ix->count;
    struct entry *e = &ix->ring[n % AUDIT_INDEX_RECORDS];
    key_of(f->tenant, f->request_id, e->key);
    uint64_t *head = &ix->heads[bucket(e->key)];
    e->number = n;
    e->older = *head;
    e->ref = *ref;
    e->kind = (uint8_t)k;
    *head = n;
}

/* The entries under key, oldest first, up to max; how many. */
static size_t lookup(const struct audit_index *ix, const char *tenant, const char *request_id, const struct entry **out, size_t max)
{
    uint8_t key[AUDIT_HASH_LEN];
    size_t n = 0;
    if (strlen(tenant) > AUDIT_INDEX_MAX_ID || strlen(request_id) > AUDIT_INDEX_MAX_ID || !tenant[0] || !request_id[0])
        return 0;
    key_of(tenant, request_id, key);
    const struct entry *e = entry_at(ix, ix->heads[bucket(key)]);
    for (; e != NULL && n < max; e = entry_at(ix, e->older))
        if (memcmp(e->key, key, sizeof(key)) == 0)
            out[n++] = e;
    for (size_t i = 0; i < n / 2; i++) { /* newest first -> oldest first */
        const struct entry *t = out[i];
        out[i] = out[n - 1 - i];
        out[n - 1 - i] = t;
    }
    return n;
}

/* ---- at open: the newest log files ------------------------------------------------------ */

static int by_seq(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The log files' first seqs, oldest first; how many (at most max). */
static size_t list_logs(int dirfd, uint64_t *seqs, size_t max)
{
    int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    struct dirent *de;
    size_t n = 0;
    if (d == NULL) {
        if (fd >= 0)
            close(fd);
        return 0;
    }
    while ((de = readdir(d)) != NULL && n < max) {
        unsigned long long s;
        char name[64];
        if (sscanf(de->d_name, "audit-%16llu.log", &s) == 1 && alog_log_name(name, sizeof(name), s) == 0 &&
            strcmp(name, de->d_name) == 0)
            seqs[n++] = s;
    }
    closedir(d);
    qsort(seqs, n, sizeof(seqs[0]), by_seq);
    return n;
}

/* Indexes one file; prev carries the chain from the file before. */
static int load_file(struct audit_index *ix, int dirfd, uint64_t first_seq, uint8_t prev[AUDIT_HASH_LEN], int *have_prev, char *err,
                     size_t errlen)
{
    char name[64];
    (void)alog_log_name(name, sizeof(name), first_seq);
    int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;
    char *line = NULL;
    size_t cap = 0;
    uint64_t off = 0;
    ssize_t n;
    int rc = 0;
    if (f == NULL) {
        if (fd >= 0)
            close(fd);
        return alog_fail(err, errlen, "open %s: %s", name, strerror(errno));
    }
    while ((n = getline(&line, &cap, f)) > 0) {
        size_t len = (size_t)n - (line[n - 1] == '\n');
        struct audit_index_fields fl;
        uint8_t h[AUDIT_HASH_LEN], want[AUDIT_HASH_LEN];
        uint64_t at = off;
        off += (uint64_t)n;
        if (line[n - 1] != '\n' || len > AUDIT_MAX_LINE || audit_index_fields(line, len, &fl) != 0 ||
            hash_of_hex(fl.prev, want) != 0)
            continue; /* a torn fragment: its repair record chains to the line before it */
        if (*have_prev && memcmp(want, prev, AUDIT_HASH_LEN) != 0) {
            rc = alog_fail(err, errlen, "%s at offset %llu: prev is not the line before it", name, (unsigned long long)at);
            break;
        }
        audit_sha256(line, len, h);
        memcpy(prev, h, AUDIT_HASH_LEN);
        *have_prev = 1;
        struct audit_line_ref ref = {first_seq, at, (uint32_t)len, fl.seq, {0}};
        memcpy(ref.hash, h, sizeof(h));
        if (kind_of(&fl) != 0)
            audit_index_note(ix, &fl, &ref);
    }
    free(line);
    fclose(f);
    return rc;
}

int audit_index_load(struct audit_index *ix, int dirfd, char *err, size_t errlen)
{
    static uint64_t seqs[MAX_SCANNED_FILES];
    uint8_t prev[AUDIT_HASH_LEN];
    int have_prev = 0;
    uint64_t bytes = 0;
    size_t n = list_logs(dirfd, seqs, MAX_SCANNED_FILES), from = n;
    /* the newest files, as long as they fit the scan (the newest always) */
    while (from > 0) {
        char name[64];
        struct stat st;
        (void)alog_log_name(name, sizeof(name), seqs[from - 1]);
        if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
            break;
        if (from < n && bytes + (uint64_t)st.st_size > AUDIT_INDEX_SCAN_BYTES)
            break;
        bytes += (uint64_t)st.st_size;
        from--;
    }
    for (size_t i = from; i < n; i++)
        if (load_file(ix, dirfd, seqs[i], prev, &have_prev, err, errlen) != 0) {
            memset(ix, 0, sizeof(*ix));
            return -1;
        }
    return 0;
}

/* ---- reading an execution back ---------------------------------------------------------- */

/* Reads one line at ref into buf (ref->len bytes), checking its hash. */
static int read_line(int dirfd, const struct audit_line_ref *ref, char *buf, char *err, size_t errlen)
{
    char name[64];
    uint8_t h[AUDIT_HASH_LEN];
    (void)alog_log_name(name, sizeof(name), ref->file_first_seq);
    int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return alog_fail(err, errlen, "open %s: %s", name, strerror(errno));
    ssize_t n = pread(fd, buf, ref->len, (off_t)ref->offset);
    close(fd);
    if (n != (ssize_t)ref->len)
        return alog_fail(err, errlen, "%s: record %llu cannot be read", name, (unsigned long long)ref->seq);
    audit_sha256(buf, ref->len, h);
    if (memcmp(h, ref->hash, sizeof(h)) != 0)
        return alog_fail(err, errlen, "%s: record %llu is not what was written", name, (unsigned long long)ref->seq);
    return 0;
}

/* The packet a result record names: read from its pack and checked against
 * its "packet".  0 (*out set; NULL when the pack is gone), or -1. */
static int read_packet(int dirfd, json_t *rec, struct audit_found *out, char *err, size_t errlen)
{
    const char *hex = json_string_value(json_object_get(rec, "packet"));
    const char *at = json_string_value(json_object_get(rec, "packet_at"));
    unsigned long long first, off;
    size_t len;
    char name[64], again[96];
    uint8_t want[AUDIT_HASH_LEN], h[AUDIT_HASH_LEN];
    if (hex == NULL)
        return 0;
    if (at == NULL || hash_of_hex(hex, want) != 0 || sscanf(at, "audit-%16llu.pack:%llu:%zu", &first, &off, &len) != 3 ||
        snprintf(again, sizeof(again), "audit-%016llu.pack:%llu:%zu", first, off, len) >= (int)sizeof(again) ||
        strcmp(again, at) != 0 || len > FOUND_MAX_PACKET)
        return alog_fail(err, errlen, "a result record names its packet wrongly");
    snprintf(name, sizeof(name), "audit-%016llu.pack", first);
    int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT)
        return 0; /* removed by the retention */
    if (fd < 0)
        return alog_fail(err, errlen, "open %s: %s", name, strerror(errno));
    if ((out->packet = malloc(len ? len : 1)) == NULL) {
        close(fd);
        return alog_fail(err, errlen, "out of memory");
    }
    ssize_t n = pread(fd, out->packet, len, (off_t)off);
    close(fd);
    audit_sha256(out->packet, len, h);
    if (n != (ssize_t)len || memcmp(h, want, sizeof(h)) != 0) {
        free(out->packet);
        out->packet = NULL;
        return alog_fail(err, errlen, "%s: the packet at %llu is not the one its record names", name, off);
    }
    out->packet_len = len;
    return 0;
}

/* One indexed line, read, checked and appended to out; *result set to the
 * parsed record when it is a result (the caller frees it). */
static int serve_line(int dirfd, const struct entry *e, const char *tenant, const char *request_id, struct audit_found *out,
                      json_t **result, char *err, size_t errlen)
{
    char *p = out->records + out->records_len;
    if (out->records_len + e->ref.len + 1 > AUDIT_FOUND_MAX_RECORDS)
        return alog_fail(err, errlen, "the execution's records are too large to serve");
    if (read_line(dirfd, &e->ref, p, err, errlen) != 0)
        return -1;
    json_t *j = json_loadb(p, e->ref.len, JSON_REJECT_DUPLICATES, NULL);
    const char *t = json_string_value(json_object_get(j, "tenant"));
    const char *r = json_string_value(json_object_get(j, "request_id"));
    if (t == NULL || r == NULL || strcmp(t, tenant) != 0 || strcmp(r, request_id) != 0) {
        json_decref(j);
        return alog_fail(err, errlen, "record %llu is not the one indexed", (unsigned long long)e->ref.seq);
    }
    p[e->ref.len] = '\n';
    out->records_len += e->ref.len + 1;
    if (e->kind == KIND_RESULT) {
        json_decref(*result);
        *result = j;
    } else {
        json_decref(j);
    }
    return 0;
}

int audit_index_find(const struct audit_index *ix, int dirfd, const char *tenant, const char *request_id, struct audit_found *out,
                     char *err, size_t errlen)
{
    const struct entry *es[AUDIT_INDEX_MAX_RECORDS];
    json_t *result = NULL;
    size_t n = lookup(ix, tenant, request_id, es, AUDIT_INDEX_MAX_RECORDS), total = 0;
    memset(out, 0, sizeof(*out));
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        total += es[i]->ref.len + 1;
    if (total > AUDIT_FOUND_MAX_RECORDS)
        return alog_fail(err, errlen, "the execution's records are too large to serve");
    if ((out->records = malloc(total)) == NULL)
        return alog_fail(err, errlen, "out of memory");
    for (size_t i = 0; i < n; i++)
        if (serve_line(dirfd, es[i], tenant, request_id, out, &result, err, errlen) != 0)
            goto fail;
    if (result != NULL && read_packet(dirfd, result, out, err, errlen) != 0)
        goto fail;
    json_decref(result);
    return 1;
fail:
    json_decref(result);
    audit_found_free(out);
    return -1;
}

/* ---- reviews ---------------------------------------------------------------------------- */

static const char *const verdicts[] = {"approved", "rejected", "needs_changes"};
static const char *const review_required[] = {"type",    "request_id", "tenant",     "key_id",
                                              "verdict", "note",       "result_seq", "result_sha256"};
static const char *const review_optional[] = {"client", "review_request_id"};

static int listed(const char *k, const char *const *set, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(k, set[i]) == 0)
            return 1;
    return 0;
}

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

/* The review's shape: its members, and nothing else. */
static int review_shape(json_t *b, char *err, size_t errlen)
{
    const char *k;
    json_t *v;
    json_object_foreach(b, k, v)
    {
        if (!listed(k, review_required, NELEM(review_required)) && !listed(k, review_optional, NELEM(review_optional)))
            return alog_fail(err, errlen, "a review may not have \"%s\"", k);
        if (strcmp(k, "result_seq") == 0 ? !json_is_integer(v) || json_integer_value(v) < 1 : !json_is_string(v))
            return alog_fail(err, errlen, "a review's \"%s\" has the wrong type", k);
    }
    for (size_t i = 0; i < NELEM(review_required); i++)
        if (json_object_get(b, review_required[i]) == NULL)
            return alog_fail(err, errlen, "a review needs \"%s\"", review_required[i]);
    const char *sha = json_string_value(json_object_get(b, "result_sha256"));
    uint8_t h[AUDIT_HASH_LEN];
    if (hash_of_hex(sha, h) != 0)
        return alog_fail(err, errlen, "a review's result_sha256 is not 64 lowercase hex digits");
    if (!listed(json_string_value(json_object_get(b, "verdict")), verdicts, NELEM(verdicts)))
        return alog_fail(err, errlen, "a review's verdict is approved, rejected or needs_changes");
    if (json_string_length(json_object_get(b, "note")) > AUDIT_REVIEW_MAX_NOTE)
        return alog_fail(err, errlen, "a review's note is longer than %d bytes", AUDIT_REVIEW_MAX_NOTE);
    return 0;
}

/* Does the execution have the result the review names, and room for it? */
static int review_target(const struct audit_index *ix, json_t *b, char *err, size_t errlen)
{
    const struct entry *es[AUDIT_INDEX_MAX_RECORDS];
    uint8_t want[AUDIT_HASH_LEN];
    const char *tenant = json_string_value(json_object_get(b, "tenant"));
    const char *rid = json_string_value(json_object_get(b, "request_id"));
    uint64_t seq = (uint64_t)json_integer_value(json_object_get(b, "result_seq"));
    const char *sha = json_string_value(json_object_get(b, "result_sha256"));
    size_t n = lookup(ix, tenant, rid, es, AUDIT_INDEX_MAX_RECORDS), reviews = 0, named = 0;
    (void)hash_of_hex(sha, want); /* checked by review_shape */
    for (size_t i = 0; i < n; i++) {
        reviews += es[i]->kind == KIND_REVIEW;
        named |= es[i]->kind == KIND_RESULT && es[i]->ref.seq == seq && memcmp(es[i]->ref.hash, want, sizeof(want)) == 0;
    }
    if (!named) {
        alog_fail(err, errlen, "no result record %llu of that request id and tenant with that SHA-256", (unsigned long long)seq);
        errno = ENOENT;
        return -1;
    }
    if (reviews >= AUDIT_INDEX_MAX_REVIEWS || n >= AUDIT_INDEX_MAX_RECORDS) {
        alog_fail(err, errlen, "the execution has %d reviews already", AUDIT_INDEX_MAX_REVIEWS);
        errno = EMLINK;
        return -1;
    }
    return 0;
}

int audit_index_check_review(const struct audit_index *ix, const char *body, size_t len, char *err, size_t errlen)
{
    json_error_t jerr;
    json_t *b = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    int rc;
    if (!json_is_object(b)) {
        json_decref(b);
        alog_fail(err, errlen, "a review is not a JSON object");
        errno = EINVAL;
        return -1;
    }
    if ((rc = review_shape(b, err, errlen)) != 0)
        errno = EINVAL;
    else
        rc = review_target(ix, b, err, errlen);
    int saved = errno;
    json_decref(b);
    errno = saved;
    return rc;
}
