/*
 * audit_log_internal.h - what the files of the writer's core share among
 * themselves and with nobody else (audit_log.h is the public side).
 *
 * Its files, top down; each calls only those below it (no circles:
 * .ci/layers objects), and audit_log.c reaches down into audit_line.c's
 * seal through a hook it installs at open (before_seal):
 *   audit_open.c    open (its steps in order), the timed duties, close
 *   audit_log.c     a record: its body checked, the steps around its seal
 *                   (rotation, packet, torn line, ratchet, checkpoint)
 *   audit_keys.c    the keys: the state file (the epoch and its MAC key), the
 *                   ratchet, the signing key and the checkpoints it signs, and
 *                   a new directory's keys (moat-audit init)
 *   audit_repair.c  the log's end: the last record found on open, a torn line
 *                   ended and repaired
 *   audit_files.c   log files and packs: names, opening, rotation, packets,
 *                   retention
 *   audit_line.c    a line sealed, batched, written with one write(2); the
 *                   files made durable (sync)
 *
 * Errors are values, as in the public functions: 0, or -1 with err set (a
 * seq, or 0 with err set).
 */
#ifndef MOAT_AUDIT_LOG_INTERNAL_H
#define MOAT_AUDIT_LOG_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <jansson.h>

#include "audit_log.h"

#define STATE_FILE       "state"
#define STATE_TMP        "state.tmp"
#define SIGNING_FILE     "signing.key"
#define VERIFIER_FILE    "verifier.key"
#define CHECKPOINTS_FILE "checkpoints.log"

#define WBUF_CAP   (1024 * 1024) /* the batch's bytes */
#define WMARKS_MAX 8192          /* the batch's lines */

/* Where a record's packet is: its SHA-256, and "<pack>:<offset>:<length>". */
struct packet_ref {
    char hex[AUDIT_HEX_LEN + 1];
    char at[96];
};

/* What the end of the log says on open (alog_read_end). */
struct log_tail {
    uint64_t newest; /* the newest log file's first seq; 0: none yet */
    int has_epoch;   /* a last record was found, and its epoch: */
    uint64_t epoch;  /* ... this */
    int adopt;       /* the newest file ends in a whole record but for its '\n' */
    size_t torn;     /* ... or in a torn fragment of this many bytes (0: none) */
    uint8_t torn_hash[AUDIT_HASH_LEN];
};

/* The most a body may take of a line, as jansson encodes it (packet included). */
#define MAX_BODY (AUDIT_MAX_LINE - 256)

/* ---- audit_line.c ---- */
__attribute__((format(printf, 3, 4))) int alog_fail(char *err, size_t errlen, const char *fmt, ...); /* returns -1 */
/* A body refused for what it is: err set, errno EINVAL; returns -1. */
__attribute__((format(printf, 3, 4))) int alog_refuse(char *err, size_t errlen, const char *fmt, ...);
/* What a body of ilen bytes takes of a line (with a packet's members or not). */
size_t alog_body_size(size_t ilen, int with_packet);
/* Seals inner (a JSON object's text; the members between its braces) and
 * pk's members as the next line of the batch: its seq, or 0 with err. */
uint64_t alog_seal_line(struct audit_log *l, const char *inner, size_t ilen, const struct packet_ref *pk, char *err, size_t errlen);
/* CLOCK_MONOTONIC in milliseconds. */
uint64_t alog_now_ms(void);
/* "YYYY-MM-DDTHH:MM:SS.mmmZ" (RFC 3339, UTC) of a CLOCK_REALTIME time. */
void alog_format_time(const struct timespec *ts, char out[32]);
/* Seals body (jansson's encoding of it, plus pk's members) as the next
 * record, after l->before_seal. */
uint64_t alog_seal(struct audit_log *l, json_t *body, const struct packet_ref *pk, char *err, size_t errlen);
/* Writes the batch with one write(2); after a short one, seq and prev are
 * back at the last whole line (audit_log.c). */
int alog_flush(struct audit_log *l, char *err, size_t errlen);
/* Writes and syncs the batch, packs and checkpoints.log; fails while a
 * failed write is remembered (only audit_log_sync forgets it). */
int alog_sync_files(struct audit_log *l, char *err, size_t errlen);

/* ---- audit_log.c ---- */
/* What comes before any record (l->before_seal, installed at open): a torn
 * line ended and repaired, the epoch ratcheted when it is full. */
int alog_seal_begin(struct audit_log *l, char *err, size_t errlen);

/* ---- audit_keys.c ---- */
int alog_load_state(struct audit_log *l, char *err, size_t errlen);
int alog_ratchet(struct audit_log *l, char *err, size_t errlen);
/* Ratchets forward to the last record's epoch (t) when the state file is
 * behind it; never back. */
int alog_catch_up_epoch(struct audit_log *l, const struct log_tail *t, char *err, size_t errlen);
int alog_load_signing_key(struct audit_log *l, char *err, size_t errlen);
/* Seals a signed checkpoint record and appends it to checkpoints.log. */
int alog_checkpoint(struct audit_log *l, char *err, size_t errlen);

/* ---- audit_files.c ---- */
int alog_log_name(char *buf, size_t size, uint64_t first_seq);
/* The largest first seq of a log file below `below`, or 0 when none. */
uint64_t alog_newest_log(int dirfd, uint64_t below);
/* Makes audit-<first_seq>.log the current file (create: a new one). */
int alog_open_file(struct audit_log *l, uint64_t first_seq, int create, char *err, size_t errlen);
/* Is the current log file too large or too old? */
int alog_rotation_due(const struct audit_log *l);
/* A new log file (after a torn line in the current one was ended: the caller's). */
int alog_rotate(struct audit_log *l, char *err, size_t errlen);
int alog_store_packet(struct audit_log *l, const void *packet, size_t len, struct packet_ref *ref, char *err, size_t errlen);
/* Removes packs past the retention (never the current one). */
void alog_expire_packs(struct audit_log *l, time_t now);

/* ---- audit_repair.c ---- */
/* Finds the last record (l->seq and l->prev become its) and what follows it. */
int alog_read_end(struct audit_log *l, struct log_tail *t, char *err, size_t errlen);
/* On open, with the newest file current: ends what the crash left (t). */
int alog_repair_at_open(struct audit_log *l, const struct log_tail *t, char *err, size_t errlen);
/* Ends a torn line, and repairs a fragment, before anything else is appended. */
int alog_end_torn(struct audit_log *l, char *err, size_t errlen);

#endif
