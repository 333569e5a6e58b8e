/*
 * audit_verify.c - checks an audit directory against the reviewer's keys
 * (K0 and the checkpoint public key) and reports the first bad record and
 * why: edited, missing, inserted, reordered, truncated, wrong epoch key,
 * torn last line.  Reads only; never modifies the log.
 */
#include "audit_verify.h"

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

static int check_line(struct chain *c, const char *line, size_t len, const uint8_t pub[AUDIT_PUB_LEN], const char *where,
                      struct audit_verify_result *r, audit_record_cb cb, void *arg)
{
    static const char macsep[] = ",\"mac\":\"";
    json_error_t jerr;
    uint8_t mac[AUDIT_HASH_LEN], want[AUDIT_HASH_LEN], h[AUDIT_HASH_LEN];

    /* the MAC is the last field: ,"mac":"<64 hex>"} */
    if (len < sizeof(macsep) - 1 + AUDIT_HEX_LEN + 2 || line[len - 1] != '}' || line[len - 2] != '"' ||
        memcmp(line + len - 2 - AUDIT_HEX_LEN - (sizeof(macsep) - 1), macsep, sizeof(macsep) - 1) != 0 ||
        audit_unhex(line + len - 2 - AUDIT_HEX_LEN, AUDIT_HEX_LEN, want, sizeof(want)) != 0)
        return bad(r, "%s: record after seq %llu is malformed or edited (no valid mac field)", where, (unsigned long long)c->seq);
    size_t prefix_len = len - 2 - AUDIT_HEX_LEN - (sizeof(macsep) - 1);
    json_t *j = json_loadb(line, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
    if (j == NULL || !json_is_object(j)) {
        json_decref(j);
        return bad(r, "%s: record after seq %llu is not valid JSON (edited): %s", where, (unsigned long long)c->seq, jerr.text);
    }
    json_int_t seq = json_integer_value(json_object_get(j, "seq"));
    json_int_t epoch = json_integer_value(json_object_get(j, "epoch"));
    const char *prev = json_string_value(json_object_get(j, "prev"));
    const char *type = json_string_value(json_object_get(j, "type"));
    uint8_t prevb[AUDIT_HASH_LEN];
    int rc = -1;

    if (!json_is_integer(json_object_get(j, "seq")) || !json_is_integer(json_object_get(j, "epoch")) || prev == NULL ||
        audit_unhex(prev, strlen(prev), prevb, sizeof(prevb)) != 0) {
        bad(r, "%s: record after seq %llu lacks seq, epoch or prev (edited)", where, (unsigned long long)c->seq);
        goto out;
    }
    r->bad_seq = (uint64_t)seq;
    if (c->pending_torn && (type == NULL || strcmp(type, "repair") != 0)) {
        bad(r, "%s: not a valid record, and seq %lld after it is not a repair record naming it (edited, not torn): %s",
            r->torn_where, (long long)seq, r->pending_problem);
        r->bad_seq = c->seq + 1;
        r->bad_line = c->torn_line;
        goto out;
    }
    if ((uint64_t)seq != c->seq + 1) {
        if ((uint64_t)seq <= c->seq)
            bad(r, "%s: seq %lld follows seq %llu: a record was inserted, repeated or reordered", where, (long long)seq,
                (unsigned long long)c->seq);
        else
            bad(r, "%s: seq %lld follows seq %llu: %llu record(s) missing here (deleted or moved)", where, (long long)seq,
                (unsigned long long)c->seq, (unsigned long long)((uint64_t)seq - c->seq - 1));
        goto out;
    }
    if (CRYPTO_memcmp(prevb, c->prev, sizeof(prevb)) != 0) {
        bad(r, "%s: seq %lld does not chain to the record before it (a record before it was edited, removed or inserted)", where,
            (long long)seq);
        goto out;
    }
    if (epoch < 0 || (uint64_t)epoch < c->epoch) {
        bad(r, "%s: seq %lld goes back to epoch %lld from %llu", where, (long long)seq, (long long)epoch,
            (unsigned long long)c->epoch);
        goto out;
    }
    if ((uint64_t)epoch - c->epoch > MAX_EPOCH_SKIP) {
        bad(r, "%s: seq %lld jumps to an implausible epoch %lld", where, (long long)seq, (long long)epoch);
        goto out;
    }
    /* the key is advanced on a copy: a record that fails leaves the chain as it was */
    struct chain next = *c;
    while (next.epoch < (uint64_t)epoch) {
        audit_ratchet(next.key);
        next.epoch++;
    }
    if (audit_hmac(next.key, line, prefix_len, mac) != 0 || CRYPTO_memcmp(mac, want, sizeof(mac)) != 0) {
        OPENSSL_cleanse(&next, sizeof(next));
        uint64_t later = later_key_made(c, line, prefix_len, want);
        if (later)
            bad(r,
                "%s: seq %lld (epoch %lld) carries a MAC made with the later epoch %llu's key: rewritten after that key "
                "was taken",
                where, (long long)seq, (long long)epoch, (unsigned long long)later);
        else
            bad(r, "%s: seq %lld fails its MAC under epoch %lld's key (edited)", where, (long long)seq, (long long)epoch);
        goto out;
    }
    if (c->pending_torn) {
        const char *th = json_string_value(json_object_get(j, "torn_sha256"));
        uint8_t thb[AUDIT_HASH_LEN];
        if (type == NULL || strcmp(type, "repair") != 0 || th == NULL || audit_unhex(th, strlen(th), thb, sizeof(thb)) != 0 ||
            CRYPTO_memcmp(thb, c->torn_hash, sizeof(thb)) != 0 ||
            json_integer_value(json_object_get(j, "torn_bytes")) != (json_int_t)c->torn_len) {
            bad(r, "%s: not a valid record, and seq %lld after it is not a repair record naming it (edited, not torn): %s",
                r->torn_where, (long long)seq, r->pending_problem);
            r->bad_seq = c->seq + 1;
            r->bad_line = c->torn_line;
            goto out;
        }
        c->pending_torn = 0;
        r->repairs++;
    }
    if (type != NULL && strcmp(type, "checkpoint") == 0) {
        const char *head = json_string_value(json_object_get(j, "head"));
        const char *sig = json_string_value(json_object_get(j, "sig"));
        json_int_t head_seq = json_integer_value(json_object_get(j, "head_seq"));
        uint8_t sigb[AUDIT_SIG_LEN];
        char text[160], prevhex[AUDIT_HEX_LEN + 1];
        audit_hex(c->prev, sizeof(c->prev), prevhex);
        if (head == NULL || sig == NULL || (uint64_t)head_seq != c->seq || strcmp(head, prevhex) != 0 ||
            audit_unhex(sig, strlen(sig), sigb, sizeof(sigb)) != 0 ||
            audit_checkpoint_text(text, sizeof(text), (uint64_t)head_seq, head) != 0 || audit_verify_sig(pub, text, sigb) != 0) {
            bad(r, "%s: checkpoint seq %lld has a bad signature or head", where, (long long)seq);
            goto out;
        }
        r->checkpoints++;
        r->last_checkpoint_seq = (uint64_t)head_seq;
    }
    audit_sha256(line, len, h);
    /* a signed checkpoint (checkpoints.log or its copy) names this head */
    while (c->next_ckpt < c->nckpt && c->ckpt_seqs[c->next_ckpt] < (uint64_t)seq)
        c->next_ckpt++;
    while (c->next_ckpt < c->nckpt && c->ckpt_seqs[c->next_ckpt] == (uint64_t)seq) {
        if (CRYPTO_memcmp(c->ckpt_heads[c->next_ckpt], h, sizeof(h)) != 0) {
            OPENSSL_cleanse(&next, sizeof(next));
            bad(r, "%s: seq %lld is not the record the signed checkpoint of seq %lld names (rewritten)", where, (long long)seq,
                (long long)seq);
            goto out;
        }
        c->next_ckpt++;
    }
    memcpy(c->key, next.key, sizeof(c->key));
    c->epoch = next.epoch;
    OPENSSL_cleanse(&next, sizeof(next));
    memcpy(c->prev, h, sizeof(h));
    c->seq = (uint64_t)seq;
    r->records++;
    r->last_seq = c->seq;
    r->bad_seq = 0;
    if (cb)
        cb(arg, j, line, len);
    rc = 0;
out:
    json_decref(j);
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
    free(entries);
    return 0;
fail:
    fclose(f);
    free(entries);
    return -1;
}

int audit_verify_dir(const char *dir, const uint8_t k0[AUDIT_KEY_LEN], const uint8_t pub[AUDIT_PUB_LEN], const char *checkpoints,
                     struct audit_verify_result *r, audit_record_cb cb, void *arg)
{
    struct chain c;
    uint64_t *files = NULL, max_ckpt = 0;
    size_t nfiles = 0;
    char path[4096], where[4200], cpath[4096];
    char *buf = NULL;
    size_t cap = 0; /* buf's size, kept across files for getline */

    memset(r, 0, sizeof(*r));
    memset(&c, 0, sizeof(c));
    r->ok = 1;
    memcpy(c.key, k0, AUDIT_KEY_LEN);
    if (checkpoints != NULL)
        snprintf(cpath, sizeof(cpath), "%s", checkpoints);
    else
        snprintf(cpath, sizeof(cpath), "%s/checkpoints.log", dir);
    if (read_checkpoints(cpath, pub, &max_ckpt, &c, r) != 0)
        goto out;
    if (list_logs(dir, &files, &nfiles) != 0) {
        bad(r, "%s: cannot list the audit directory: %s", dir, strerror(errno));
        goto out;
    }
    if (nfiles == 0) {
        bad(r, "%s: no audit log files", dir);
        goto out;
    }
    for (size_t fi = 0; fi < nfiles && r->ok; fi++) {
        snprintf(path, sizeof(path), "%s/audit-%016llu.log", dir, (unsigned long long)files[fi]);
        FILE *f = fopen(path, "re");
        if (f == NULL) {
            bad(r, "%s: %s", path, strerror(errno));
            break;
        }
        if (files[fi] != c.seq + 1 && !(c.seq == 0 && files[fi] == 1)) {
            snprintf(r->bad_file, sizeof(r->bad_file), "%s", path);
            r->bad_line = 0;
            r->bad_seq = c.seq + 1;
            bad(r, "%s: starts at seq %llu but the log before ends at %llu (a file is missing: records %llu-%llu)", path,
                (unsigned long long)files[fi], (unsigned long long)c.seq, (unsigned long long)c.seq + 1,
                (unsigned long long)files[fi] - 1);
            fclose(f);
            break;
        }
        size_t lineno = 0;
        ssize_t n;
        while (r->ok && (n = getline(&buf, &cap, f)) >= 0) {
            lineno++;
            snprintf(where, sizeof(where), "%s:%zu", path, lineno);
            r->bad_line = lineno;
            snprintf(r->bad_file, sizeof(r->bad_file), "%s", path);
            int ended = n > 0 && buf[n - 1] == '\n';
            if (ended)
                buf[--n] = '\0';
            if (c.pending_torn) {
                /* only a repair record naming the fragment may follow it */
                if (check_line(&c, buf, (size_t)n, pub, where, r, cb, arg) != 0)
                    break;
                continue;
            }
            if (ended && check_line(&c, buf, (size_t)n, pub, where, r, cb, arg) == 0)
                continue;
            if (!r->ok && strstr(r->problem, "malformed") == NULL && strstr(r->problem, "not valid JSON") == NULL)
                break; /* a well-formed record that is wrong: report it */
            /* not a record: a fragment torn by a crash or a full disk.  It
             * is acceptable only if the next line is a repair record that
             * names it; at the end of the log it is a torn tail. */
            snprintf(r->pending_problem, sizeof(r->pending_problem), "%s", r->problem[0] ? r->problem : "torn line");
            r->problem[0] = '\0';
            r->ok = 1;
            r->bad_seq = 0;
            c.pending_torn = 1;
            c.torn_len = (size_t)n;
            c.torn_line = lineno;
            audit_sha256(buf, (size_t)n, c.torn_hash);
            snprintf(r->torn_where, sizeof(r->torn_where), "%s", where);
            r->torn = 1;
        }
        fclose(f);
    }
    if (r->ok && c.pending_torn) {
        r->bad_seq = c.seq + 1;
        bad(r, "%s: the last line is torn (%zu bytes, not a complete record; the writer repairs it on restart)", r->torn_where,
            c.torn_len);
        r->torn_tail = 1;
    }
    if (r->ok && max_ckpt > c.seq) {
        r->bad_seq = c.seq + 1;
        bad(r, "log ends at seq %llu but the signed checkpoint in %s covers seq %llu: the tail was truncated",
            (unsigned long long)c.seq, cpath, (unsigned long long)max_ckpt);
    } else if (r->ok && max_ckpt > r->last_checkpoint_seq) {
        r->bad_seq = c.seq + 1;
        bad(r,
            "log ends at seq %llu without the checkpoint record of seq %llu that %s lists: the tail was truncated "
            "(the last signed checkpoint in the log covers seq %llu)",
            (unsigned long long)c.seq, (unsigned long long)max_ckpt, cpath, (unsigned long long)r->last_checkpoint_seq);
    }
out:
    free(buf);
    free(files);
    free(c.ckpt_seqs);
    free(c.ckpt_heads);
    OPENSSL_cleanse(&c, sizeof(c));
    return r->ok ? 0 : -1;
}
