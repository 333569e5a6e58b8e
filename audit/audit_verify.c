/*
 * audit_verify.c - checks an audit directory against the reviewer's keys
 * (K0 and the checkpoint public key) and reports the first bad record and
 * why: edited, missing, inserted, reordered, truncated, wrong epoch key,
 * torn last line.  Reads only; never modifies the log.
 *
 * Theory of operation
 * -------------------
 * The walk trusts nothing in the directory but what the keys prove:
 *
 *   1. checkpoints.log (or a copy kept off the host): every line's
 *      signature verified; the heads it lists, by seq;
 *   2. the log files in seq order, each starting where the one before
 *      ended;
 *   3. each line (check_line): the MAC field, JSON, seq/prev/epoch in their
 *      place, the MAC under the epoch's key (K0 ratcheted forward; a MAC a
 *      later key made is named as such), a repair record's match with the
 *      torn line before it, a checkpoint record's signature, and the head
 *      a signed checkpoint lists for this seq;
 *   4. the end: not a torn line, not short of a signed checkpoint, not
 *      empty; and how many records at the end no listed checkpoint covers
 *      yet (their removal alone could not be told from a log that ended
 *      there).
 *
 * A line that is not a record may be a torn line, but only if a repair
 * record naming it follows.
 *
 * Speed (tests/bench/bench_scale.py: at least 200k records/s, linear in
 * the trail's length): a line that json_scan.h's strict scanner accepts
 * (what the writer writes) gives seq, epoch, prev and type from its raw
 * member text, without building the record in jansson; anything it
 * declines (whitespace, escaped keys or values, bytes past ASCII, huge
 * numbers) is parsed with jansson as before.  The scanner accepts only
 * what jansson accepts, with the same values, and a raw value holding an
 * escape is always left to jansson, so both read a line alike.  The
 * record is built in jansson anyway for a checkpoint or repair record
 * (their fields are checked) and when a caller's callback wants it.  The
 * MAC context is keyed once per epoch, not once per line.  Each good record goes to the caller's
 * callback, in order; the first bad one stops the walk.  An export (the
 * lines as stored, in one file) is walked the same way, but may start
 * after seq 1: its first record's place is then taken as given.
 */
#include "audit_verify.h"
#include "json_scan.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <openssl/crypto.h>

#define MAX_EPOCH_SKIP 1000000 /* keys derived ahead to recognise a later key's MAC */

__attribute__((format(printf, 2, 3))) static int bad(struct audit_verify_result *r, const char *fmt, ...)
{
    va_list ap;
    if (r->problem[0] == '\0') {
        va_start(ap, fmt);
        vsnprintf(r->problem, sizeof(r->problem), fmt, ap);
        va_end(ap);
    }
    r->ok = 0;
    return -1;
}

int audit_read_verifier_key(const char *path, uint8_t k0[AUDIT_KEY_LEN], uint8_t pub[AUDIT_PUB_LEN], char *err, size_t errlen)
{
    char text[512], k0hex[80], pubhex[80];
    FILE *f = fopen(path, "re");
    if (f == NULL) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[n] = '\0';
    int rc = sscanf(text, "moat-audit verifier v1\nk0 %79s\npublic %79s", k0hex, pubhex);
    OPENSSL_cleanse(text, sizeof(text));
    if (rc != 2 || audit_unhex(k0hex, strlen(k0hex), k0, AUDIT_KEY_LEN) != 0 ||
        audit_unhex(pubhex, strlen(pubhex), pub, AUDIT_PUB_LEN) != 0) {
        OPENSSL_cleanse(k0hex, sizeof(k0hex));
        snprintf(err, errlen, "%s: not a moat-audit verifier key", path);
        return -1;
    }
    OPENSSL_cleanse(k0hex, sizeof(k0hex));
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The log files' first seqs, ascending. */
static int list_logs(const char *dir, uint64_t **out, size_t *n)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    size_t cap = 0;
    *out = NULL;
    *n = 0;
    if (d == NULL)
        return -1;
    while ((de = readdir(d)) != NULL) {
        unsigned long long s;
        char tail[8];
        if (sscanf(de->d_name, "audit-%16llu.%4s", &s, tail) != 2 || strcmp(tail, "log") != 0)
            continue;
        if (*n == cap) {
            uint64_t *g = realloc(*out, (cap = cap ? cap * 2 : 16) * sizeof(uint64_t));
            if (g == NULL) {
                closedir(d);
                return -1;
            }
            *out = g;
        }
        (*out)[(*n)++] = s;
    }
    closedir(d);
    if (*n)
        qsort(*out, *n, sizeof(uint64_t), cmp_u64);
    return 0;
}

struct chain {
    uint64_t seq;
    uint8_t prev[AUDIT_HASH_LEN];
    uint64_t epoch;
    uint8_t key[AUDIT_KEY_LEN]; /* K(epoch) */
    int pending_torn;           /* a torn line awaits its repair record */
    size_t torn_len;
    size_t torn_line;
    uint64_t *ckpt_seqs; /* checkpoints.log: head seqs, ascending, and their heads */
    uint8_t (*ckpt_heads)[AUDIT_HASH_LEN];
    size_t nckpt, next_ckpt;
    uint8_t torn_hash[AUDIT_HASH_LEN];
};

/* One walk over a directory: the chain so far, the keys, what to report. */
struct walk {
    struct chain c;
    uint64_t max_ckpt;  /* the highest head the checkpoints list signs */
    int mid_start;      /* an export: the first record may come after seq 1 */
    const uint8_t *pub; /* AUDIT_PUB_LEN bytes */
    struct audit_verify_result *r;
    audit_record_cb cb;
    void *arg;
    struct audit_mac mac; /* keyed with K(mac_epoch) once mac_keyed */
    uint64_t mac_epoch;
    int mac_keyed;
    char where[4200]; /* "<file>:<line>" of the line being checked */
};

/* A line taken apart: its MAC, and the fields the chain is checked by.
 * j is NULL when the scanner read the fields and nobody needs more. */
struct record {
    json_t *j;
    size_t prefix_len; /* the bytes the MAC covers */
    uint8_t want[AUDIT_HASH_LEN];
    json_int_t seq, epoch;
    uint8_t prev[AUDIT_HASH_LEN];
    const char *type;
};

/* Would a later epoch's key have made this MAC (a rewrite after the writer's
 * key was stolen)?  Returns that epoch, or 0. */
static uint64_t later_key_made(const struct chain *c, const char *line, size_t prefix_len, const uint8_t want[AUDIT_HASH_LEN])
{
    uint8_t k[AUDIT_KEY_LEN], mac[AUDIT_HASH_LEN];
    memcpy(k, c->key, sizeof(k));
    for (uint64_t e = c->epoch + 1; e < c->epoch + 4096; e++) {
        audit_ratchet(k);
        if (audit_hmac(k, line, prefix_len, mac) == 0 && CRYPTO_memcmp(mac, want, sizeof(mac)) == 0) {
            OPENSSL_cleanse(k, sizeof(k));
            return e;
        }
    }
    OPENSSL_cleanse(k, sizeof(k));
    return 0;
}

/* ---- one line ------------------------------------------------------------------------ */

static int is_type(const struct record *rec, const char *type)
{
    return rec->type != NULL && strcmp(rec->type, type) == 0;
}

/* The fields the chain needs, as the scanner found them: raw member text
 * (a string keeps its quotes), NULL when absent. */
struct raw_fields {
    const char *seq, *epoch, *prev, *type;
    size_t seq_len, epoch_len, prev_len, type_len;
    char type_buf[16]; /* type's text, when it is short and has no escape */
};

static int raw_member(void *arg, const char *key, size_t key_len, const char *value, size_t value_len)
{
    struct raw_fields *f = arg;
    const char **slot = NULL;
    size_t *slot_len = NULL;
    if (key_len == 3 && memcmp(key, "seq", 3) == 0)
        slot = &f->seq, slot_len = &f->seq_len;
    else if (key_len == 5 && memcmp(key, "epoch", 5) == 0)
        slot = &f->epoch, slot_len = &f->epoch_len;
    else if (key_len == 4 && memcmp(key, "prev", 4) == 0)
        slot = &f->prev, slot_len = &f->prev_len;
    else if (key_len == 4 && memcmp(key, "type", 4) == 0)
        slot = &f->type, slot_len = &f->type_len;
    if (slot != NULL) {
        *slot = value;
        *slot_len = value_len;
    }
    return 0;
}

/* A raw JSON integer (the scanner allows at most 18 digits: no overflow);
 * 0, or -1 for any other value (as json_is_integer would say). */
static int raw_integer(const char *v, size_t len, json_int_t *out)
{
    size_t i = len > 0 && v[0] == '-';
    json_int_t n = 0;
    if (v == NULL || i == len)
        return -1;
    for (; i < len; i++) {
        if (v[i] < '0' || v[i] > '9')
            return -1;
        n = n * 10 + (v[i] - '0');
    }
    *out = v[0] == '-' ? -n : n;
    return 0;
}

/* 1 when a raw value is a string without escapes (its text is then
 * exactly what jansson would decode). */
static int raw_plain_string(const char *v, size_t len)
{
    return v != NULL && len >= 2 && v[0] == '"' && memchr(v, '\\', len) == NULL;
}

/* The fields from the scanner: 0, 1 when the line is left to jansson (the
 * scanner declined it, or a value holds an escape), -1 when a field is
 * missing or of the wrong kind. */
static int fields_from_scan(const char *line, size_t len, struct record *rec, struct raw_fields *f)
{
    memset(f, 0, sizeof(*f));
    if (audit_json_scan(line, len, raw_member, f) != 0 || (f->prev != NULL && !raw_plain_string(f->prev, f->prev_len)) ||
        (f->type != NULL && !raw_plain_string(f->type, f->type_len)))
        return 1;
    if (f->type != NULL) {
        if (f->type_len - 2 >= sizeof(f->type_buf))
            return 1;
        memcpy(f->type_buf, f->type + 1, f->type_len - 2);
        f->type_buf[f->type_len - 2] = '\0';
        rec->type = f->type_buf;
    }
    if (raw_integer(f->seq, f->seq_len, &rec->seq) != 0 || raw_integer(f->epoch, f->epoch_len, &rec->epoch) != 0 ||
        f->prev == NULL || audit_unhex(f->prev + 1, f->prev_len - 2, rec->prev, sizeof(rec->prev)) != 0)
        return -1;
    return 0;
}

/* The same fields from jansson's record in rec->j. */
static int fields_from_json(struct record *rec)
{
    json_t *j = rec->j;
    const char *prev = json_string_value(json_object_get(j, "prev"));
    rec->seq = json_integer_value(json_object_get(j, "seq"));
    rec->epoch = json_integer_value(json_object_get(j, "epoch"));
    rec->type = json_string_value(json_object_get(j, "type"));
    if (!json_is_integer(json_object_get(j, "seq")) || !json_is_integer(json_object_get(j, "epoch")) || prev == NULL ||
        audit_unhex(prev, strlen(prev), rec->prev, sizeof(rec->prev)) != 0)
        return -1;
    return 0;
}

/* The line as a jansson record in rec->j (to free); 0 or -1. */
static int load_json(struct walk *w, const char *line, size_t len, struct record *rec)
{
    json_error_t jerr;
    rec->j = json_loadb(line, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
    if (rec->j == NULL || !json_is_object(rec->j))
        return bad(w->r, "%s: record after seq %llu is not valid JSON (edited): %s", w->where, (unsigned long long)w->c.seq,
                   jerr.text);
    return 0;
}

/* The MAC is the last field: ,"mac":"<64 hex>"}.  Then the line must be a
 * JSON object with seq, epoch and prev.  rec->j is set (to free) when the
 * line went through jansson.  rec->type may point into f. */
static int parse_record(struct walk *w, const char *line, size_t len, struct record *rec, struct raw_fields *f)
{
    static const char macsep[] = ",\"mac\":\"";
    const struct chain *c = &w->c;

    memset(rec, 0, sizeof(*rec));
    if (len < sizeof(macsep) - 1 + AUDIT_HEX_LEN + 2 || line[len - 1] != '}' || line[len - 2] != '"' ||
        memcmp(line + len - 2 - AUDIT_HEX_LEN - (sizeof(macsep) - 1), macsep, sizeof(macsep) - 1) != 0 ||
        audit_unhex(line + len - 2 - AUDIT_HEX_LEN, AUDIT_HEX_LEN, rec->want, sizeof(rec->want)) != 0)
        return bad(w->r, "%s: record after seq %llu is malformed or edited (no valid mac field)", w->where,
                   (unsigned long long)c->seq);
    rec->prefix_len = len - 2 - AUDIT_HEX_LEN - (sizeof(macsep) - 1);
    int rc = fields_from_scan(line, len, rec, f);
    if (rc == 1) {
        if (load_json(w, line, len, rec) != 0)
            return -1;
        rc = fields_from_json(rec);
    }
    if (rc != 0)
        return bad(w->r, "%s: record after seq %llu lacks seq, epoch or prev (edited)", w->where, (unsigned long long)c->seq);
    /* checkpoint and repair records have fields of their own to check; a
     * callback gets the whole record */
    if (rec->j == NULL && (w->cb != NULL || is_type(rec, "checkpoint") || is_type(rec, "repair")) &&
        load_json(w, line, len, rec) != 0)
        return -1;
    w->r->bad_seq = (uint64_t)rec->seq;
    return 0;
}

/* After a torn line, only a repair record naming it may follow: anything
 * else makes the torn line an edit, reported where it is. */
static int torn_not_repaired(struct walk *w, const struct record *rec)
{
    struct audit_verify_result *r = w->r;
    bad(r, "%s: not a valid record, and seq %lld after it is not a repair record naming it (edited, not torn): %s", r->torn_where,
        (long long)rec->seq, r->pending_problem);
    r->bad_seq = w->c.seq + 1;
    r->bad_line = w->c.torn_line;
    return -1;
}

/* seq follows, prev chains, epoch goes forward by a plausible step. */
static int check_place(struct walk *w, const struct record *rec)
{
    const struct chain *c = &w->c;
    long long seq = (long long)rec->seq, epoch = (long long)rec->epoch;
    if ((uint64_t)rec->seq != c->seq + 1) {
        if ((uint64_t)rec->seq <= c->seq)
            return bad(w->r, "%s: seq %lld follows seq %llu: a record was inserted, repeated or reordered", w->where, seq,
                       (unsigned long long)c->seq);
        return bad(w->r, "%s: seq %lld follows seq %llu: %llu record(s) missing here (deleted or moved)", w->where, seq,
                   (unsigned long long)c->seq, (unsigned long long)((uint64_t)rec->seq - c->seq - 1));
    }
    if (CRYPTO_memcmp(rec->prev, c->prev, sizeof(rec->prev)) != 0)
        return bad(w->r, "%s: seq %lld does not chain to the record before it (a record before it was edited, removed or inserted)",
                   w->where, seq);
    if (rec->epoch < 0 || (uint64_t)rec->epoch < c->epoch)
        return bad(w->r, "%s: seq %lld goes back to epoch %lld from %llu", w->where, seq, epoch, (unsigned long long)c->epoch);
    if ((uint64_t)rec->epoch - c->epoch > MAX_EPOCH_SKIP)
        return bad(w->r, "%s: seq %lld jumps to an implausible epoch %lld", w->where, seq, epoch);
    return 0;
}

/* The MAC under the record's epoch key, derived into *next (a copy of the
 * chain: a record that fails leaves the chain as it was). */
static int check_mac(struct walk *w, const char *line, const struct record *rec, struct chain *next)
{
    uint8_t mac[AUDIT_HASH_LEN];
    *next = w->c;
    while (next->epoch < (uint64_t)rec->epoch) {
        audit_ratchet(next->key);
        next->epoch++;
    }
    if (!w->mac_keyed || w->mac_epoch != next->epoch) {
        w->mac_keyed = audit_mac_set_key(&w->mac, next->key) == 0;
        w->mac_epoch = next->epoch;
    }
    if (w->mac_keyed && audit_mac_compute(&w->mac, line, rec->prefix_len, mac) == 0 &&
        CRYPTO_memcmp(mac, rec->want, sizeof(mac)) == 0)
        return 0;
    uint64_t later = later_key_made(&w->c, line, rec->prefix_len, rec->want);
    if (later)
        return bad(w->r,
                   "%s: seq %lld (epoch %lld) carries a MAC made with the later epoch %llu's key: rewritten after that key "
                   "was taken",
                   w->where, (long long)rec->seq, (long long)rec->epoch, (unsigned long long)later);
    return bad(w->r, "%s: seq %lld fails its MAC under epoch %lld's key (edited)", w->where, (long long)rec->seq,
               (long long)rec->epoch);
}

/* The repair record after a torn line names its length and hash exactly. */
static int check_repair(struct walk *w, const struct record *rec)
{
    struct chain *c = &w->c;
    const char *th = json_string_value(json_object_get(rec->j, "torn_sha256"));
    uint8_t thb[AUDIT_HASH_LEN];
    if (!is_type(rec, "repair") || th == NULL || audit_unhex(th, strlen(th), thb, sizeof(thb)) != 0 ||
        CRYPTO_memcmp(thb, c->torn_hash, sizeof(thb)) != 0 ||
        json_integer_value(json_object_get(rec->j, "torn_bytes")) != (json_int_t)c->torn_len)
        return torn_not_repaired(w, rec);
    c->pending_torn = 0;
    w->r->repairs++;
    return 0;
}

/* A checkpoint record: signed over the head it names, which is the chain's. */
static int check_checkpoint_record(struct walk *w, const struct record *rec)
{
    const char *head = json_string_value(json_object_get(rec->j, "head"));
    const char *sig = json_string_value(json_object_get(rec->j, "sig"));
    json_int_t head_seq = json_integer_value(json_object_get(rec->j, "head_seq"));
    uint8_t sigb[AUDIT_SIG_LEN];
    char text[160], prevhex[AUDIT_HEX_LEN + 1];
    moat_hex_encode(w->c.prev, sizeof(w->c.prev), prevhex);
    if (head == NULL || sig == NULL || (uint64_t)head_seq != w->c.seq || strcmp(head, prevhex) != 0 ||
        audit_unhex(sig, strlen(sig), sigb, sizeof(sigb)) != 0 ||
        audit_checkpoint_text(text, sizeof(text), (uint64_t)head_seq, head) != 0 || audit_verify_sig(w->pub, text, sigb) != 0)
        return bad(w->r, "%s: checkpoint seq %lld has a bad signature or head", w->where, (long long)rec->seq);
    w->r->checkpoints++;
    w->r->last_checkpoint_seq = (uint64_t)head_seq;
    if ((uint64_t)head_seq == w->max_ckpt) /* the list's last: covered up to this record */
        w->r->covered_seq = (uint64_t)rec->seq;
    return 0;
}

/* A signed checkpoint (checkpoints.log or its copy) that names this seq
 * names this line's hash h. */
static int check_signed_heads(struct walk *w, const struct record *rec, const uint8_t h[AUDIT_HASH_LEN])
{
    struct chain *c = &w->c;
    uint64_t seq = (uint64_t)rec->seq;
    while (c->next_ckpt < c->nckpt && c->ckpt_seqs[c->next_ckpt] < seq)
        c->next_ckpt++;
    while (c->next_ckpt < c->nckpt && c->ckpt_seqs[c->next_ckpt] == seq) {
        if (CRYPTO_memcmp(c->ckpt_heads[c->next_ckpt], h, AUDIT_HASH_LEN) != 0)
            return bad(w->r, "%s: seq %lld is not the record the signed checkpoint of seq %lld names (rewritten)", w->where,
                       (long long)rec->seq, (long long)rec->seq);
        c->next_ckpt++;
    }
    return 0;
}

/* The record verified: the chain moves to it (next: its epoch and key). */
static void advance(struct walk *w, const struct record *rec, const struct chain *next, const uint8_t h[AUDIT_HASH_LEN])
{
    struct chain *c = &w->c;
    memcpy(c->key, next->key, sizeof(c->key));
    c->epoch = next->epoch;
    memcpy(c->prev, h, AUDIT_HASH_LEN);
    c->seq = (uint64_t)rec->seq;
    if (w->r->records++ == 0)
        w->r->first_seq = c->seq;
    w->r->last_seq = c->seq;
    w->r->bad_seq = 0;
}

/* Checks one complete line (without its '\n') against the chain, in the
 * order an attack would first show: form, place, MAC, repair, signatures. */
static int check_line(struct walk *w, const char *line, size_t len)
{
    struct record rec;
    struct raw_fields f;
    struct chain next;
    uint8_t h[AUDIT_HASH_LEN];
    int rc = parse_record(w, line, len, &rec, &f);

    memset(&next, 0, sizeof(next));
    if (rc == 0 && w->c.pending_torn && !is_type(&rec, "repair"))
        rc = torn_not_repaired(w, &rec);
    if (rc == 0)
        rc = check_place(w, &rec);
    if (rc == 0)
        rc = check_mac(w, line, &rec, &next);
    if (rc == 0 && w->c.pending_torn)
        rc = check_repair(w, &rec);
    if (rc == 0 && is_type(&rec, "checkpoint"))
        rc = check_checkpoint_record(w, &rec);
    if (rc == 0) {
        audit_sha256(line, len, h);
        rc = check_signed_heads(w, &rec, h);
    }
    if (rc == 0)
        advance(w, &rec, &next, h);
    OPENSSL_cleanse(&next, sizeof(next));
    if (rc == 0 && w->cb)
        w->cb(w->arg, rec.j, line, len);
    json_decref(rec.j);
    return rc;
}

static int cmp_ckpt(const void *a, const void *b)
{
    const uint8_t *x = a, *y = b;
    uint64_t u, v;
    memcpy(&u, x, sizeof(u));
    memcpy(&v, y, sizeof(v));
    return u < v ? -1 : u > v;
}

/* Reads checkpoints.log: every signed (head_seq, head), sorted, into c; the
 * highest head_seq into *max_seq.  A line whose signature does not verify
 * is reported. */
static int read_checkpoints(const char *path, const uint8_t pub[AUDIT_PUB_LEN], uint64_t *max_seq, struct chain *c,
                            struct audit_verify_result *r)
{
    enum { ENTRY = sizeof(uint64_t) + AUDIT_HASH_LEN };
    FILE *f = fopen(path, "re");
    char line[512];
    uint8_t *entries = NULL;
    size_t n = 0, cap = 0, lineno = 0;
    *max_seq = 0;
    if (f == NULL) {
        if (errno == ENOENT)
            return 0;
        return bad(r, "%s: %s", path, strerror(errno));
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        unsigned long long s;
        char h[80], sig[160], text[160];
        uint8_t sigb[AUDIT_SIG_LEN], hb[AUDIT_HASH_LEN];
        lineno++;
        if (sscanf(line, "%llu %79s %159s", &s, h, sig) != 3 || audit_unhex(h, strlen(h), hb, sizeof(hb)) != 0 ||
            audit_unhex(sig, strlen(sig), sigb, sizeof(sigb)) != 0 || audit_checkpoint_text(text, sizeof(text), s, h) != 0 ||
            audit_verify_sig(pub, text, sigb) != 0) {
            bad(r, "%s:%zu: a checkpoint line is malformed or has a bad signature", path, lineno);
            goto fail;
        }
        if (n == cap) {
            uint8_t *g = realloc(entries, (cap = cap ? cap * 2 : 64) * ENTRY);
            if (g == NULL) {
                bad(r, "out of memory");
                goto fail;
            }
            entries = g;
        }
        uint64_t s64 = s;
        memcpy(entries + n * ENTRY, &s64, sizeof(s64));
        memcpy(entries + n * ENTRY + sizeof(s64), hb, sizeof(hb));
        n++;
        if (s64 > *max_seq)
            *max_seq = s64;
    }
    fclose(f);
    if (n)
        qsort(entries, n, ENTRY, cmp_ckpt);
    c->ckpt_seqs = n ? malloc(n * sizeof(uint64_t)) : NULL;
    c->ckpt_heads = n ? malloc(n * AUDIT_HASH_LEN) : NULL;
    if (n && (c->ckpt_seqs == NULL || c->ckpt_heads == NULL)) {
        free(entries);
        return bad(r, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        memcpy(&c->ckpt_seqs[i], entries + i * ENTRY, sizeof(uint64_t));
        memcpy(c->ckpt_heads[i], entries + i * ENTRY + sizeof(uint64_t), AUDIT_HASH_LEN);
    }
    c->nckpt = n;
    r->listed = n;
    free(entries);
    return 0;
fail:
    fclose(f);
    free(entries);
    return -1;
}

/* ---- the directory ------------------------------------------------------------------------ */

/* The log files' first seqs, ascending; none is a failure. */
static int find_logs(const char *dir, uint64_t **files, size_t *nfiles, struct audit_verify_result *r)
{
    if (list_logs(dir, files, nfiles) != 0)
        return bad(r, "%s: cannot list the audit directory: %s", dir, strerror(errno));
    if (*nfiles == 0)
        return bad(r, "%s: no audit log files", dir);
    return 0;
}

/* A file starts where the one before it ended: one missing between them
 * shows as a gap in the file names. */
static int check_file_start(struct walk *w, const char *path, uint64_t first)
{
    const struct chain *c = &w->c;
    struct audit_verify_result *r = w->r;
    if (first == c->seq + 1 || (c->seq == 0 && first == 1))
        return 0;
    snprintf(r->bad_file, sizeof(r->bad_file), "%s", path);
    r->bad_line = 0;
    r->bad_seq = c->seq + 1;
    return bad(r, "%s: starts at seq %llu but the log before ends at %llu (a file is missing: records %llu-%llu)", path,
               (unsigned long long)first, (unsigned long long)c->seq, (unsigned long long)c->seq + 1,
               (unsigned long long)first - 1);
}

/* Not a record: a fragment torn by a crash or a full disk.  It is
 * acceptable only if the next line is a repair record that names it; at
 * the end of the log it is a torn tail. */
static void note_torn(struct walk *w, const char *line, size_t len, size_t lineno)
{
    struct audit_verify_result *r = w->r;
    snprintf(r->pending_problem, sizeof(r->pending_problem), "%s", r->problem[0] ? r->problem : "torn line");
    r->problem[0] = '\0';
    r->ok = 1;
    r->bad_seq = 0;
    w->c.pending_torn = 1;
    w->c.torn_len = len;
    w->c.torn_line = lineno;
    audit_sha256(line, len, w->c.torn_hash);
    snprintf(r->torn_where, sizeof(r->torn_where), "%s", w->where);
    r->torn = 1;
}

/* An export's first line: the chain starts right before it (its seq and
 * prev taken as given; the epoch keys are still derived from K0).  A line
 * that is no record is left to check_line to report. */
static void start_mid_chain(struct walk *w, const char *line, size_t len)
{
    json_error_t jerr;
    json_t *j = json_loadb(line, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
    json_t *seq = json_object_get(j, "seq");
    const char *prev = json_string_value(json_object_get(j, "prev"));
    uint8_t p[AUDIT_HASH_LEN];
    if (json_is_integer(seq) && json_integer_value(seq) > 1 && prev != NULL && audit_unhex(prev, strlen(prev), p, sizeof(p)) == 0) {
        w->c.seq = (uint64_t)json_integer_value(seq) - 1;
        memcpy(w->c.prev, p, sizeof(p));
    }
    json_decref(j);
}

/* One line as getline gave it (n bytes in buf).  0 to go on, -1 to stop. */
static int walk_line(struct walk *w, char *buf, size_t n, const char *path, size_t lineno)
{
    struct audit_verify_result *r = w->r;
    snprintf(w->where, sizeof(w->where), "%s:%zu", path, lineno);
    r->bad_line = lineno;
    snprintf(r->bad_file, sizeof(r->bad_file), "%s", path);
    int ended = n > 0 && buf[n - 1] == '\n';
    if (ended)
        buf[--n] = '\0';
    if (w->mid_start && r->records == 0 && !w->c.pending_torn)
        start_mid_chain(w, buf, n);
    if (w->c.pending_torn) /* only a repair record naming the fragment may follow it */
        return check_line(w, buf, n);
    if (ended && check_line(w, buf, n) == 0)
        return 0;
    if (!r->ok && strstr(r->problem, "malformed") == NULL && strstr(r->problem, "not valid JSON") == NULL)
        return -1; /* a well-formed record that is wrong: report it */
    note_torn(w, buf, n, lineno);
    return 0;
}

/* Every line of f (named path); buf and cap are getline's, kept across
 * files.  0 while the trail verifies. */
static int walk_stream(struct walk *w, FILE *f, const char *path, char **buf, size_t *cap)
{
    size_t lineno = 0;
    ssize_t n;
    while (w->r->ok && (n = getline(buf, cap, f)) >= 0)
        if (walk_line(w, *buf, (size_t)n, path, ++lineno) != 0)
            break;
    if (w->r->ok && ferror(f))
        return bad(w->r, "%s: read error", path);
    return w->r->ok ? 0 : -1;
}

/* Every line of audit-<first>.log. */
static int walk_file(struct walk *w, const char *dir, uint64_t first, char **buf, size_t *cap)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/audit-%016llu.log", dir, (unsigned long long)first);
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return bad(w->r, "%s: %s", path, strerror(errno));
    snprintf(w->where, sizeof(w->where), "%s", path);
    int rc = check_file_start(w, path, first) != 0 ? -1 : walk_stream(w, f, path, buf, cap);
    fclose(f);
    return rc;
}

/* The end of the log: not a torn line, not short of a signed checkpoint
 * that checkpoints.log (cpath) lists, not empty (the writer's first record
 * is always "start"); and the records no listed checkpoint covers. */
static void check_end(struct walk *w, uint64_t max_ckpt, const char *cpath)
{
    const struct chain *c = &w->c;
    struct audit_verify_result *r = w->r;
    if (r->ok && c->pending_torn) {
        r->bad_seq = c->seq + 1;
        bad(r, "%s: the last line is torn (%zu bytes, not a complete record; the writer repairs it on restart)", r->torn_where,
            c->torn_len);
        r->torn_tail = 1;
    }
    if (r->ok && max_ckpt > c->seq) {
        r->bad_seq = c->seq + 1;
        bad(r, "log ends at seq %llu but the signed checkpoint in %s covers seq %llu: the tail was truncated",
            (unsigned long long)c->seq, cpath, (unsigned long long)max_ckpt);
    } else if (r->ok && max_ckpt > r->last_checkpoint_seq) {
        r->bad_seq = c->seq + 1;
        bad(r,
            "log ends at seq %llu without the checkpoint record of seq %llu that %s lists: the tail was truncated "
            "(the last signed checkpoint in the log covers seq %llu)",
            (unsigned long long)c->seq, (unsigned long long)max_ckpt, cpath, (unsigned long long)r->last_checkpoint_seq);
    } else if (r->ok && r->records == 0) {
        bad(r, "%s: holds no record at all, but a writer's log always starts with a \"start\" record: emptied", w->where);
    }
    if (r->covered_seq < max_ckpt)
        r->covered_seq = max_ckpt;
    r->uncovered = r->last_seq > r->covered_seq ? r->last_seq - r->covered_seq : 0;
}

/* A walk's start: nothing verified yet, the chain at K0. */
static void walk_begin(struct walk *w, const uint8_t k0[AUDIT_KEY_LEN], const uint8_t pub[AUDIT_PUB_LEN],
                       struct audit_verify_result *r, audit_record_cb cb, void *arg)
{
    memset(r, 0, sizeof(*r));
    memset(w, 0, sizeof(*w));
    r->ok = 1;
    w->pub = pub;
    w->r = r;
    w->cb = cb;
    w->arg = arg;
    memcpy(w->c.key, k0, AUDIT_KEY_LEN);
}

/* A walk's end: what it held given back, the key erased. */
static int walk_done(struct walk *w)
{
    free(w->c.ckpt_seqs);
    free(w->c.ckpt_heads);
    audit_mac_free(&w->mac);
    OPENSSL_cleanse(&w->c, sizeof(w->c));
    return w->r->ok ? 0 : -1;
}

int audit_verify_dir(const char *dir, const uint8_t k0[AUDIT_KEY_LEN], const uint8_t pub[AUDIT_PUB_LEN], const char *checkpoints,
                     struct audit_verify_result *r, audit_record_cb cb, void *arg)
{
    struct walk w;
    uint64_t *files = NULL;
    size_t nfiles = 0, cap = 0; /* cap: buf's size, kept across files for getline */
    char cpath[4096], *buf = NULL;

    walk_begin(&w, k0, pub, r, cb, arg);
    if (checkpoints != NULL)
        snprintf(cpath, sizeof(cpath), "%s", checkpoints);
    else
        snprintf(cpath, sizeof(cpath), "%s/checkpoints.log", dir);
    if (read_checkpoints(cpath, pub, &w.max_ckpt, &w.c, r) == 0 && find_logs(dir, &files, &nfiles, r) == 0) {
        for (size_t fi = 0; fi < nfiles && walk_file(&w, dir, files[fi], &buf, &cap) == 0; fi++)
            continue;
        check_end(&w, w.max_ckpt, cpath);
    }
    free(buf);
    free(files);
    return walk_done(&w);
}

int audit_verify_export(const char *path, const uint8_t k0[AUDIT_KEY_LEN], const uint8_t pub[AUDIT_PUB_LEN],
                        const char *checkpoints, struct audit_verify_result *r, audit_record_cb cb, void *arg)
{
    struct walk w;
    size_t cap = 0;
    char *buf = NULL;
    int is_stdin = strcmp(path, "-") == 0;

    walk_begin(&w, k0, pub, r, cb, arg);
    w.mid_start = 1;
    snprintf(w.where, sizeof(w.where), "%s", path);
    if (checkpoints != NULL && read_checkpoints(checkpoints, pub, &w.max_ckpt, &w.c, r) != 0)
        return walk_done(&w);
    FILE *f = is_stdin ? stdin : fopen(path, "re");
    if (f == NULL) {
        bad(r, "%s: %s", path, strerror(errno));
        return walk_done(&w);
    }
    (void)walk_stream(&w, f, is_stdin ? "(stdin)" : path, &buf, &cap);
    if (!is_stdin)
        fclose(f);
    check_end(&w, w.max_ckpt, checkpoints != NULL ? checkpoints : "");
    free(buf);
    return walk_done(&w);
}
