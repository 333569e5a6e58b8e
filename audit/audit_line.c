/*
 * audit_line.c - the bottom of the writer's core (FORMAT.md): a body
 * sealed into the next line of the hash chain, batched, written with one
 * write(2), and the log's files made durable.
 *
 * Theory of operation
 * -------------------
 * alog_seal_line builds {"seq","time","epoch","prev",<body>,"mac"}, MACs
 * it with the epoch's key and appends it to the batch (seq and prev run
 * ahead of the file); alog_seal does the same from a jansson body, after
 * what must come before any record (l->before_seal: a torn line ended, the
 * epoch ratcheted; audit_log.c installs it at open, since ending a torn
 * line and ratcheting are the layers above this one: audit_repair.c,
 * audit_keys.c).  alog_flush writes the batch with one write(2); a write
 * cut short takes seq and prev back to the last whole line written and is
 * remembered until audit_log_sync, so nothing of a failed batch is ever
 * acknowledged.  alog_sync_files makes the log, the packs and
 * checkpoints.log durable.
 *
 * Calls nothing of the core above it: the layers, bottom up, are this
 * file, audit_files.c, audit_repair.c, audit_keys.c, audit_log.c and
 * audit_open.c (audit_log_internal.h).
 */
#include "audit_log_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "moat_io.h"

int alog_fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

int alog_refuse(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    errno = EINVAL;
    return -1;
}

/* ---- building a line ---------------------------------------------------------------- */

static char *put(char *p, const char *s, size_t n)
{
    memcpy(p, s, n);
    return p + n;
}

#define PUT_LIT(p, s) put(p, s, sizeof(s) - 1)

static char *put_u64(char *p, uint64_t v)
{
    char digits[20];
    size_t n = 0;
    do {
        digits[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    while (n > 0)
        *p++ = digits[--n];
    return p;
}

static char *put_hex(char *p, const uint8_t *in, size_t len)
{
    moat_hex_encode(in, len, p); /* its '\0' is overwritten next */
    return p + 2 * len;
}

uint64_t alog_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void alog_format_time(const struct timespec *ts, char out[32])
{
    struct tm tm = {0};
    gmtime_r(&ts->tv_sec, &tm);
    size_t n = strftime(out, 32, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + n, 32 - n, ".%03dZ", (int)(ts->tv_nsec / 1000000));
}

/* "YYYY-MM-DDTHH:MM:SS.mmmZ", UTC; the part up to the second is formatted
 * once per second. */
static char *put_time(struct audit_log *l, char *p)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (l->clock_len == 0 || ts.tv_sec != l->clock_sec) {
        struct tm tm = {0};
        gmtime_r(&ts.tv_sec, &tm);
        l->clock_len = strftime(l->clock_text, sizeof(l->clock_text), "%Y-%m-%dT%H:%M:%S", &tm);
        l->clock_sec = ts.tv_sec;
    }
    int ms = (int)(ts.tv_nsec / 1000000);
    p = put(p, l->clock_text, l->clock_len);
    *p++ = '.';
    *p++ = (char)('0' + ms / 100);
    *p++ = (char)('0' + ms / 10 % 10);
    *p++ = (char)('0' + ms % 10);
    *p++ = 'Z';
    return p;
}

/* The size of a body of ilen bytes as jansson would encode it with the
 * "packet" and "packet_at" members added. */
size_t alog_body_size(size_t ilen, int with_packet)
{
    static const size_t packet_members =
        sizeof("\"packet\":\"\",\"packet_at\":\"\"") - 1 + AUDIT_HEX_LEN + sizeof(((struct packet_ref *)0)->at) - 1;
    return with_packet ? ilen + (ilen > 2) + packet_members : ilen;
}

static int line_mac(struct audit_log *l, const char *line, size_t len, uint8_t mac[AUDIT_HASH_LEN])
{
    if (l->mac.ctx == NULL && audit_mac_set_key(&l->mac, l->key) != 0)
        return -1;
    return audit_mac_compute(&l->mac, line, len, mac);
}

/* ---- the batch ------------------------------------------------------------------------ */

/* After a write that stopped at done bytes: seq/prev/counters go back to
 * the last line wholly written; a line written but for its '\n' is a record
 * too, a fragment is to be repaired (torn_pending). */
static void roll_back_to(struct audit_log *l, size_t done)
{
    size_t k = 0;
    while (k < l->nmarks && l->wmarks[k].end <= done)
        k++;
    size_t start = k ? l->wmarks[k - 1].end : 0, lost = l->nmarks - k;
    l->seq = k ? l->wmarks[k - 1].seq : l->wbase_seq;
    memcpy(l->prev, k ? l->wmarks[k - 1].hash : l->wbase_prev, AUDIT_HASH_LEN);
    l->epoch_records -= lost < l->epoch_records ? lost : l->epoch_records;
    l->since_checkpoint -= lost < l->since_checkpoint ? lost : l->since_checkpoint;
    l->file_bytes = l->wbase_file_bytes + done;
    if (k < l->nmarks && done > start) {
        size_t part = done - start, line_len = l->wmarks[k].end - start - 1;
        if (part == line_len) {
            l->seq = l->wmarks[k].seq;
            memcpy(l->prev, l->wmarks[k].hash, AUDIT_HASH_LEN);
            l->epoch_records++;
            l->since_checkpoint++;
        } else {
            audit_sha256(l->wbuf + start, part, l->torn_hash);
            l->torn_pending = part;
        }
        l->torn_newline = 1;
    }
}

/*
 * Writes the buffered lines with one write(2).  If the write stops short
 * (disk full), the lines wholly written are records and the rest are not:
 * seq/prev go back to the last whole one; a line written but for its '\n'
 * is a record too (ended before the next one, as a restart would adopt
 * it); a fragment is ended and marked by a repair record before the next
 * record (audit_repair.c).  The failure is remembered until audit_log_sync,
 * which then fails, so that nothing of the batch is acknowledged.
 */
int alog_flush(struct audit_log *l, char *err, size_t errlen)
{
    size_t done = 0;

    if (l->wlen == 0)
        return 0;
    if (moat_write_full(l->fd, l->wbuf, l->wlen, &done) == 0) {
        l->wlen = l->nmarks = 0;
        return 0;
    }
    int saved = errno;
    roll_back_to(l, done);
    l->wlen = l->nmarks = 0;
    l->write_failed = saved;
    alog_fail(err, errlen, "append to the audit log: %s", strerror(saved));
    errno = saved;
    return -1;
}

/* Seals a line of len bytes (its '\n' at line[len]) into the batch and
 * advances seq/prev; it is written by alog_flush. */
static uint64_t append_line(struct audit_log *l, const char *line, size_t len, char *err, size_t errlen)
{
    struct audit_wmark *m;

    if ((l->nmarks == WMARKS_MAX || l->wlen + len + 1 > l->wcap) && alog_flush(l, err, errlen) != 0)
        return 0;
    if (l->nmarks == 0) {
        l->wbase_seq = l->seq;
        l->wbase_file_bytes = l->file_bytes;
        memcpy(l->wbase_prev, l->prev, AUDIT_HASH_LEN);
    }
    m = &l->wmarks[l->nmarks++];
    audit_sha256(line, len, m->hash);
    l->last_line = (struct audit_line_ref){l->file_first_seq, l->file_bytes, (uint32_t)len, l->seq + 1, {0}};
    memcpy(l->last_line.hash, m->hash, AUDIT_HASH_LEN);
    memcpy(l->wbuf + l->wlen, line, len + 1);
    l->wlen += len + 1;
    m->end = l->wlen;
    m->seq = ++l->seq;
    memcpy(l->prev, m->hash, AUDIT_HASH_LEN);
    l->file_bytes += len + 1;
    l->epoch_records++;
    if (l->since_checkpoint++ == 0)
        l->uncovered_ms = alog_now_ms(); /* a checkpoint is due checkpoint_delay_ms from here */
    l->dirty = 1;
    return l->seq;
}

/* ---- sealing ------------------------------------------------------------------------------ */

/*
 * Builds the next line from inner, a JSON object's text with its braces
 * (only what is between them is used), adding ,"packet":"<hex>" and
 * ,"packet_at":"<where>" after its members when pk is set, and appends it.  The line is
 *   {"seq":N,"time":"...","epoch":E,"prev":"<hex>",<members>,"mac":"<hex>"}
 * in l->line: at most 176 bytes before the members and 76 after them, well
 * within AUDIT_LINE_SLACK + 256 bytes past MAX_BODY.
 */
uint64_t alog_seal_line(struct audit_log *l, const char *inner, size_t ilen, const struct packet_ref *pk, char *err, size_t errlen)
{
    uint8_t mac[AUDIT_HASH_LEN];
    char *line = l->line, *p = line;

    if (ilen < 2 || alog_body_size(ilen, pk != NULL) > MAX_BODY) {
        alog_refuse(err, errlen, "record too large");
        return 0;
    }
    p = PUT_LIT(p, "{\"seq\":");
    p = put_u64(p, l->seq + 1);
    p = PUT_LIT(p, ",\"time\":\"");
    p = put_time(l, p);
    p = PUT_LIT(p, "\",\"epoch\":");
    p = put_u64(p, l->epoch);
    p = PUT_LIT(p, ",\"prev\":\"");
    p = put_hex(p, l->prev, sizeof(l->prev));
    *p++ = '"';
    if (ilen > 2) {
        *p++ = ',';
        p = put(p, inner + 1, ilen - 2);
    }
    if (pk != NULL) {
        p = PUT_LIT(p, ",\"packet\":\"");
        p = put(p, pk->hex, AUDIT_HEX_LEN);
        p = PUT_LIT(p, "\",\"packet_at\":\"");
        p = put(p, pk->at, strlen(pk->at));
        *p++ = '"';
    }
    if (line_mac(l, line, (size_t)(p - line), mac) != 0) {
        alog_fail(err, errlen, "HMAC failed");
        return 0;
    }
    p = PUT_LIT(p, ",\"mac\":\"");
    p = put_hex(p, mac, sizeof(mac));
    p = PUT_LIT(p, "\"}");
    *p = '\n';
    return append_line(l, line, (size_t)(p - line), err, errlen);
}

/* jansson leaves DEL raw; a record holds no control character.  A DEL can
 * only be inside a string, where \u007f means the same.  Takes inner (from
 * jansson); gives it back, or its escaped copy, or NULL. */
static char *escape_del(char *inner, size_t *len)
{
    size_t ilen = *len, o = 0;
    if (memchr(inner, 0x7f, ilen) == NULL)
        return inner;
    char *esc = malloc(ilen * 6 + 1);
    if (esc != NULL) {
        for (size_t i = 0; i < ilen; i++) {
            if (inner[i] == 0x7f) {
                memcpy(esc + o, "\\u007f", 6);
                o += 6;
            } else {
                esc[o++] = inner[i];
            }
        }
        esc[o] = '\0';
        *len = o;
    }
    free(inner);
    return esc;
}

/* jansson's compact ASCII text of body, DEL escaped too; NULL with err set. */
static char *encode_body(json_t *body, size_t *len, char *err, size_t errlen)
{
    char *inner = json_dumps(body, JSON_COMPACT | JSON_ENSURE_ASCII | JSON_PRESERVE_ORDER);
    if (inner == NULL) {
        alog_fail(err, errlen, "body cannot be encoded");
        return NULL;
    }
    *len = strlen(inner);
    inner = escape_del(inner, len);
    if (inner == NULL)
        alog_fail(err, errlen, "out of memory");
    return inner;
}

uint64_t alog_seal(struct audit_log *l, json_t *body, const struct packet_ref *pk, char *err, size_t errlen)
{
    size_t ilen = 0;
    if (l->before_seal != NULL && l->before_seal(l, err, errlen) != 0)
        return 0;
    if (pk != NULL && (json_object_set_new(body, "packet", json_string(pk->hex)) != 0 ||
                       json_object_set_new(body, "packet_at", json_string(pk->at)) != 0)) {
        alog_fail(err, errlen, "out of memory");
        return 0;
    }
    char *inner = encode_body(body, &ilen, err, errlen);
    if (inner == NULL)
        return 0;
    uint64_t seq = alog_seal_line(l, inner, ilen, NULL, err, errlen);
    int saved = errno;
    free(inner);
    errno = saved;
    return seq;
}

/* ---- durability ------------------------------------------------------------------------------ */

/*
 * Writes and syncs what was appended.  A write that failed since the last
 * audit_log_sync makes it fail, and stays remembered: only audit_log_sync,
 * the writer's commit of a batch, forgets it (a rotation or a checkpoint in
 * the middle of a batch must not, or the batch's rolled-back records would
 * be acknowledged).
 */
int alog_sync_files(struct audit_log *l, char *err, size_t errlen)
{
    if (alog_flush(l, err, errlen) != 0)
        return -1;
    if (l->write_failed)
        return alog_fail(err, errlen, "append to the audit log: %s", strerror(l->write_failed));
    /* the packets first: a record is acknowledged only with its packet durable */
    if (l->pack_dirty) {
        if (fdatasync(l->pack_fd) != 0)
            return alog_fail(err, errlen, "sync the packets: %s", strerror(errno));
        l->pack_dirty = 0;
    }
    if (!l->dirty)
        return 0;
    /* checkpoints.log only changes with a checkpoint: sync it only then */
    if (fdatasync(l->fd) != 0 || (l->ckpt_dirty && fdatasync(l->ckpt_fd) != 0))
        return alog_fail(err, errlen, "fdatasync the audit log: %s", strerror(errno));
    l->dirty = 0;
    l->ckpt_dirty = 0;
    return 0;
}
