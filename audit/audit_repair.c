/*
 * audit_repair.c - the end of the log: where the chain stands on open, and
 * torn lines (FORMAT.md, "Torn tails").
 *
 * Theory of operation
 * -------------------
 * seq and prev come from the log itself, never from a file of their own:
 * on open, the last complete line of the newest log file (or of the one
 * before it, when a crash left the newest with none) is the last record.
 * What may follow it in the newest file:
 *
 *   nothing:        the usual case;
 *   a whole record but for its '\n' (a crash or a full disk took only the
 *                   newline): it is adopted as the last record and ended
 *                   with '\n' before the next one, with no repair record;
 *   a fragment:     it is ended with '\n' and a "repair" record naming its
 *                   length and SHA-256 follows it, chained to the last
 *                   complete line, so the verifier can tell it from an edit.
 *
 * A write that fails part-way while the writer runs (disk full) leaves the
 * same shapes behind (audit_log.c rolls back to them); they are ended and
 * repaired the same way, before the next record and in the file they are
 * in (before a rotation too).
 */
#include "audit_log_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "moat_io.h"

/* ---- reading the end of a log file ---------------------------------------------------- */

/* The last bytes of a log file, enough for a whole line and a torn one after
 * it: malloc'd into *buf, their count in *len.  0 or -1. */
static int read_last_bytes(int dirfd, uint64_t first_seq, char **buf, size_t *len)
{
    char name[64];
    struct stat st;
    alog_log_name(name, sizeof(name), first_seq);
    int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -1;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return -1;
    }
    size_t want = (size_t)st.st_size < 2 * AUDIT_MAX_LINE + 2 ? (size_t)st.st_size : 2 * AUDIT_MAX_LINE + 2;
    char *b = malloc(want + 1);
    if (b == NULL || pread(fd, b, want, st.st_size - (off_t)want) != (ssize_t)want) {
        free(b);
        close(fd);
        return -1;
    }
    close(fd);
    *buf = b;
    *len = want;
    return 0;
}

/* What follows the last '\n' (len bytes at p): its length, its hash, and a
 * copy in frag when it fits in fragsize. */
static void keep_fragment(const char *p, size_t len, size_t *torn, uint8_t torn_hash[AUDIT_HASH_LEN], char *frag, size_t fragsize)
{
    *torn = len;
    if (len)
        audit_sha256(p, len, torn_hash);
    if (len < fragsize) {
        memcpy(frag, p, len);
        frag[len] = '\0';
    }
}

/*
 * Reads the end of a log file: the last complete line (without '\n') into
 * line, and the length of a torn fragment after it.  Returns 1 when a
 * complete line was found, 0 when none, -1 on error.
 */
static int read_tail(int dirfd, uint64_t first_seq, char *line, size_t size, size_t *line_len, size_t *torn,
                     uint8_t torn_hash[AUDIT_HASH_LEN], char *frag, size_t fragsize)
{
    char *buf;
    size_t end;
    if (read_last_bytes(dirfd, first_seq, &buf, &end) != 0)
        return -1;
    char *nl = memrchr(buf, '\n', end);
    size_t after = nl ? (size_t)(nl - buf) + 1 : 0;
    keep_fragment(buf + after, end - after, torn, torn_hash, frag, fragsize);
    int rc = 0;
    if (nl != NULL) {
        char *start = memrchr(buf, '\n', (size_t)(nl - buf));
        start = start ? start + 1 : buf;
        size_t len = (size_t)(nl - start);
        rc = len < size ? 1 : -1;
        if (rc == 1) {
            memcpy(line, start, len);
            line[len] = '\0';
            *line_len = len;
        }
    }
    free(buf);
    return rc;
}

static int line_seq(const char *line, uint64_t *seq)
{
    unsigned long long s;
    if (sscanf(line, "{\"seq\":%llu,", &s) != 1)
        return -1;
    *seq = s;
    return 0;
}

/* The epoch of a sealed line, or -1. */
static int line_epoch(const char *line, uint64_t *epoch)
{
    const char *p = strstr(line, ",\"epoch\":");
    unsigned long long e;
    if (p == NULL || sscanf(p, ",\"epoch\":%llu,", &e) != 1)
        return -1;
    *epoch = e;
    return 0;
}

/* Is a fragment with no newline after it a whole record that follows the
 * last complete line (a crash or a full disk took only its newline)?  Its
 * MAC is left to the verifier: adopting it changes nothing it checks. */
static int fragment_is_next_record(const char *frag, size_t len, uint64_t seq, const uint8_t prev[AUDIT_HASH_LEN])
{
    char want[AUDIT_HEX_LEN + 16], hex[AUDIT_HEX_LEN + 1];
    uint64_t s;
    json_error_t jerr;
    if (len < 2 || frag[0] != '{' || frag[len - 1] != '}' || strlen(frag) != len || line_seq(frag, &s) != 0 || s != seq + 1)
        return 0;
    moat_hex_encode(prev, AUDIT_HASH_LEN, hex);
    snprintf(want, sizeof(want), ",\"prev\":\"%s\"", hex);
    if (strstr(frag, want) == NULL || strstr(frag, ",\"mac\":\"") == NULL)
        return 0;
    json_t *j = json_loadb(frag, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
    int ok = json_is_object(j);
    json_decref(j);
    return ok;
}

/* ---- on open: where the chain stands ---------------------------------------------------- */

/* The last complete line, newest file first, into line; what follows it in
 * the newest file into frag and t.  *found: 1 when there was one. */
static int find_last_line(struct audit_log *l, struct log_tail *t, char *line, size_t *line_len, char *frag, int *found, char *err,
                          size_t errlen)
{
    uint64_t first = t->newest;
    *found = 0;
    while (first > 0 && !*found) {
        size_t torn = 0;
        uint8_t th[AUDIT_HASH_LEN];
        int newest = first == t->newest;
        int rc = read_tail(l->dirfd, first, line, AUDIT_MAX_LINE + 1, line_len, &torn, th, newest ? frag : line,
                           newest ? AUDIT_MAX_LINE + 1 : 0);
        if (rc < 0)
            return alog_fail(err, errlen, "cannot read the tail of audit-%016llu.log", (unsigned long long)first);
        if (newest) {
            t->torn = torn;
            memcpy(t->torn_hash, th, sizeof(th));
        }
        *found = rc == 1;
        if (!*found)
            first = alog_newest_log(l->dirfd, first);
    }
    return 0;
}

int alog_read_end(struct audit_log *l, struct log_tail *t, char *err, size_t errlen)
{
    char *line = malloc(AUDIT_MAX_LINE + 1), *frag = malloc(AUDIT_MAX_LINE + 1);
    size_t line_len = 0;
    int found = 0, rc = -1;

    memset(t, 0, sizeof(*t));
    if (line == NULL || frag == NULL) {
        alog_fail(err, errlen, "out of memory");
        goto out;
    }
    t->newest = alog_newest_log(l->dirfd, UINT64_MAX);
    if (find_last_line(l, t, line, &line_len, frag, &found, err, errlen) != 0)
        goto out;
    if (found) {
        if (line_seq(line, &l->seq) != 0) {
            alog_fail(err, errlen, "the last audit record is not a record");
            goto out;
        }
        audit_sha256(line, line_len, l->prev);
    }
    if (t->torn > 0 && fragment_is_next_record(frag, t->torn, l->seq, l->prev)) {
        /* whole but for its newline: it is the last record */
        t->adopt = 1;
        memcpy(line, frag, t->torn + 1);
        line_len = t->torn;
        l->seq++;
        audit_sha256(line, line_len, l->prev);
        found = 1;
        t->torn = 0;
    }
    t->has_epoch = found && line_epoch(line, &t->epoch) == 0;
    rc = 0;
out:
    free(line);
    free(frag);
    return rc;
}

/* ---- ending and repairing torn lines ------------------------------------------------------ */

/* The '\n' a line still lacks, straight into the file. */
static int end_line(struct audit_log *l, const char *what, char *err, size_t errlen)
{
    char nl = '\n';
    if (moat_write_full(l->fd, &nl, 1, NULL) != 0)
        return alog_fail(err, errlen, "end %s: %s", what, strerror(errno));
    l->torn_newline = 0;
    l->file_bytes++;
    return 0;
}

/* A fragment of a line that failed part-way (disk full) is on disk: end it
 * and record a repair, before anything else is appended. */
static int finish_torn(struct audit_log *l, char *err, size_t errlen)
{
    char hex[AUDIT_HEX_LEN + 1];
    if (l->torn_newline && end_line(l, "a torn audit line", err, errlen) != 0)
        return -1;
    moat_hex_encode(l->torn_hash, sizeof(l->torn_hash), hex);
    json_t *b = json_pack("{s:s, s:I, s:s}", "type", "repair", "torn_bytes", (json_int_t)l->torn_pending, "torn_sha256", hex);
    if (b == NULL)
        return alog_fail(err, errlen, "out of memory");
    size_t pending = l->torn_pending;
    l->torn_pending = 0; /* alog_seal() must not recurse into here */
    uint64_t s = alog_seal(l, b, NULL, err, errlen);
    json_decref(b);
    if (s == 0 && l->torn_pending == 0) {
        l->torn_pending = pending; /* try again with the next record */
        return -1;
    }
    return s ? 0 : -1;
}

int alog_end_torn(struct audit_log *l, char *err, size_t errlen)
{
    if (!l->torn_pending && !l->torn_newline)
        return 0;
    /* ended straight in the file, which the batch would otherwise pass (it
     * is empty then: a failed write empties it) */
    if (alog_flush(l, err, errlen) != 0)
        return -1;
    if (l->torn_pending)
        return finish_torn(l, err, errlen);
    /* the last record is whole but still lacks its newline */
    return end_line(l, "the last audit line", err, errlen);
}

int alog_repair_at_open(struct audit_log *l, const struct log_tail *t, char *err, size_t errlen)
{
    if (t->adopt) {
        l->torn_newline = 1; /* the next seal ends it first */
        l->dirty = 1;
    }
    if (t->torn == 0)
        return 0;
    /* a crash left a torn line: end it and say so in the chain */
    l->torn_pending = t->torn;
    l->torn_newline = 1;
    memcpy(l->torn_hash, t->torn_hash, sizeof(l->torn_hash));
    return finish_torn(l, err, errlen);
}
