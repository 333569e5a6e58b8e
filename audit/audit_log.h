/*
 * audit_log.h - the writer's side of the audit trail: sealing records into
 * the hash chain with the epoch's MAC key, group commit, key ratchet,
 * signed checkpoints, rotation, torn-tail repair, packets.  See FORMAT.md;
 * audit_log_internal.h lists the files that implement it.
 *
 * Single-threaded: only the audit writer process uses it.
 */
#ifndef MOAT_AUDIT_LOG_H
#define MOAT_AUDIT_LOG_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <jansson.h>
#include <openssl/evp.h>

#include "audit_crypto.h"

#define AUDIT_MAX_LINE   (64 * 1024)
#define AUDIT_LINE_SLACK 512 /* the line buffer's room past AUDIT_MAX_LINE */

struct audit_config {
    uint64_t epoch_records;       /* ratchet after this many records (default 1000) */
    uint64_t epoch_seconds;       /* ... or this many seconds (default 300) */
    uint64_t checkpoint_records;  /* signed checkpoint every N records (default 1000) */
    uint64_t checkpoint_seconds;  /* ... or seconds (default 60) */
    uint64_t checkpoint_delay_ms; /* ... and no record waits longer than this for one (default 1000) */
    uint64_t rotate_bytes;        /* new log file past this size (default 64 MiB) */
    uint64_t rotate_seconds;      /* ... or age (default 86400) */
    int packets;                  /* store full request/result packets (default on) */
    uint64_t packet_max_bytes;    /* packets larger than this are not stored (default 8 MiB) */
    uint64_t packet_retention_s;  /* packets older than this are removed (default 30 days; 0 = keep) */
    int append_only;              /* try chattr +a on log files (default on; "where permitted") */
    uint64_t reserve_bytes;       /* free space kept for records somebody waits for (default 64 MiB; 0: off) */
};

/* Where a sealed line is: its log file, offset, length (without its '\n'),
 * seq and SHA-256.  The writer's index of executions keeps these
 * (audit_index.h). */
struct audit_line_ref {
    uint64_t file_first_seq;
    uint64_t offset;
    uint32_t len;
    uint64_t seq;
    uint8_t hash[AUDIT_HASH_LEN];
};

struct audit_wmark {
    size_t end;   /* the line's end in wbuf, past its '\n' */
    uint64_t seq; /* its seq */
    uint8_t hash[AUDIT_HASH_LEN];
};

struct audit_log {
    struct audit_config cfg;
    int dirfd;
    int fd;       /* current log file, O_APPEND */
    int ckpt_fd;  /* checkpoints.log, O_APPEND */
    int state_fd; /* state, rewritten in place at each ratchet; -1 */
    uint64_t seq;
    uint8_t prev[AUDIT_HASH_LEN];
    uint64_t epoch;
    uint8_t key[AUDIT_KEY_LEN];
    struct audit_mac mac; /* keyed with key; freed (cleansed) when key is erased */
    uint64_t epoch_records;
    time_t epoch_started;
    uint64_t file_bytes;
    time_t file_started;
    uint64_t file_first_seq; /* the current log file's name: audit-<this>.log */
    int pack_fd;             /* audit-<file_first_seq>.pack, opened at the first packet; -1 */
    uint64_t pack_bytes;     /* its size: where the next packet goes */
    int pack_dirty;          /* written since the last sync */
    time_t last_expiry;      /* when the packs were last checked against the retention */
    uint64_t since_checkpoint;
    time_t last_checkpoint;
    uint64_t uncovered_ms;  /* CLOCK_MONOTONIC ms: when the first record after the last checkpoint was sealed */
    uint64_t ckpt_tried_ms; /* ... and when a checkpoint was last tried (a failed one waits a delay) */
    EVP_PKEY *signing;
    int dirty;           /* appended since the last sync */
    int ckpt_dirty;      /* checkpoints.log written since the last sync */
    int appended_ok;     /* chattr +a worked on the current file */
    size_t torn_pending; /* a write failed part-way: bytes of the fragment on disk */
    int torn_newline;    /* ... and its line still lacks the '\n' */
    uint8_t torn_hash[AUDIT_HASH_LEN];
    time_t clock_sec;                             /* the second clock_text shows */
    size_t clock_len;                             /* 0: clock_text not set */
    char clock_text[32];                          /* "YYYY-MM-DDTHH:MM:SS" of clock_sec, UTC */
    char line[AUDIT_MAX_LINE + AUDIT_LINE_SLACK]; /* the line being sealed */
    /* Sealed lines not yet written: a batch goes out with one write(2), at
     * audit_log_sync or before anything that must follow it on disk (a
     * ratchet, a checkpoints.log line, rotation).  seq/prev/file_bytes run
     * ahead of the file by these lines; a failed write takes them back to
     * the last whole line written (see flush_lines). */
    char *wbuf;
    size_t wlen, wcap;
    struct audit_wmark *wmarks; /* one per buffered line */
    size_t nmarks;
    uint64_t wbase_seq, wbase_file_bytes; /* the state before the first buffered line */
    uint8_t wbase_prev[AUDIT_HASH_LEN];
    int write_failed;                  /* errno of a write that failed since the last audit_log_sync */
    struct audit_line_ref last_line;   /* the line sealed last (a checkpoint's too) */
    struct audit_line_ref record_line; /* the line of the body appended last (audit_log_append*) */
    /* what comes before every seal (the core's layer above the line's
     * installs it at open: audit_log_internal.h) */
    int (*before_seal)(struct audit_log *l, char *err, size_t errlen);
};

void audit_config_defaults(struct audit_config *c);

/*
 * Creates a new audit directory: K0, the state file, the Ed25519 signing key
 * and verifier.key (owned by uid/gid, mode 0600, directory 0700).
 */
int audit_init_dir(const char *dir, uid_t uid, gid_t gid, char *err, size_t errlen);

/*
 * Opens the directory's newest log, recovers seq and prev from it, repairs
 * a torn last line (appends "\n" and a repair record), and loads the epoch
 * key and signing key.  Appends a "start" record.
 */
int audit_log_open(struct audit_log *l, const char *dir, const struct audit_config *cfg, char *err, size_t errlen);

/*
 * Seals body (a JSON object; reserved names refused) as the next record and
 * writes it (not yet durable).  If packet is non-NULL it is stored first and
 * its hash added as "packet".  Returns the record's seq, or 0 with err set.
 */
uint64_t audit_log_append(struct audit_log *l, json_t *body, const void *packet, size_t packet_len, char *err, size_t errlen);

/*
 * The same for a body as received (body_len bytes of JSON text, not
 * NUL-terminated).  A body that json_scan.h accepts is spliced into the line
 * as is; any other goes through json_loadb(JSON_REJECT_DUPLICATES |
 * JSON_ALLOW_NUL) and audit_log_append().  Returns the record's seq, or 0
 * with err set; errno is EINVAL when the body itself is refused (not JSON,
 * not an object, a reserved name or type, too large).
 */
uint64_t audit_log_append_text(struct audit_log *l, const char *body, size_t body_len, const void *packet, size_t packet_len,
                               char *err, size_t errlen);

/* Writes what was appended so far, without making it durable: it survives
 * the process, not the machine.  0 or -1 (audit_log_sync then fails too). */
int audit_log_write(struct audit_log *l, char *err, size_t errlen);

/* Makes everything appended so far durable (fdatasync) and records the
 * state.  0 or -1: nothing appended since the last successful sync may be
 * acknowledged then. */
int audit_log_sync(struct audit_log *l, char *err, size_t errlen);

/* Time-based duties: ratchet, checkpoint, rotation, packet retention.  The
 * checkpoint after checkpoint_delay_ms goes by the monotonic clock, not
 * now. */
int audit_log_tick(struct audit_log *l, time_t now, char *err, size_t errlen);

/* Milliseconds until a checkpoint is due by checkpoint_delay_ms (0: now),
 * or -1 when every record is covered by one already: how long the writer
 * may sleep. */
int64_t audit_log_checkpoint_in(const struct audit_log *l);

/* Bytes free to the writer on the audit filesystem (statvfs f_bavail);
 * 0 or -1. */
int audit_log_free_bytes(const struct audit_log *l, uint64_t *free_bytes);

/* Seals a "dropped" record: count records nobody waited for were not
 * written (the disk reserve), the first at since and the last at until
 * (CLOCK_REALTIME).  Its seq, or 0 with err set. */
uint64_t audit_log_dropped(struct audit_log *l, uint64_t count, const struct timespec *since, const struct timespec *until,
                           char *err, size_t errlen);

/* Writes a final checkpoint, syncs and closes. */
void audit_log_close(struct audit_log *l);

#endif
