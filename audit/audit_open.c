/*
 * audit_open.c - an audit log's life in the writer: open, the timed duties,
 * close.
 *
 * Theory of operation
 * -------------------
 * audit_log_open is a straight sequence of steps; the first that fails
 * gives back everything opened so far (release) and the writer refuses to
 * start, so no record is ever sealed by a log half set up:
 *
 *   1. buffers and the directory (its own, mode 0700; O_NOFOLLOW);
 *   2. the state file: the epoch and its MAC key (audit_keys.c);
 *   3. the Ed25519 signing key, and checkpoints.log opened for appending;
 *   4. the end of the log: seq and prev from the last record (audit_repair.c);
 *   5. the epoch caught up with the log's, never back (audit_keys.c);
 *   6. the MAC keyed, the newest log file opened (or the first one made);
 *   7. what a crash left at the end ended and repaired;
 *   8. a "start" record, made durable.
 *
 * audit_log_tick does what time asks: a ratchet after epoch_seconds, a
 * checkpoint after checkpoint_seconds when records came since the last,
 * or checkpoint_delay_ms after the first record no checkpoint covers yet
 * (so no record waits longer than that to be covered, whether the log
 * goes quiet or trickles on; nothing is signed while nothing is written),
 * and once an hour the packs past their retention removed.  Close writes a
 * final checkpoint, syncs, and erases the key.
 */
#include "audit_log_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/crypto.h>

#define EXPIRY_EVERY_S 3600 /* packs are checked against the retention this often */

void audit_config_defaults(struct audit_config *c)
{
    c->epoch_records = 1000;
    c->epoch_seconds = 300;
    c->checkpoint_records = 1000;
    c->checkpoint_seconds = 60;
    c->checkpoint_delay_ms = 1000;
    c->rotate_bytes = 64ull * 1024 * 1024;
    c->rotate_seconds = 86400;
    c->packets = 1;
    c->packet_max_bytes = 8ull * 1024 * 1024;
    c->packet_retention_s = 30ull * 86400;
    c->append_only = 1;
    c->reserve_bytes = 64ull * 1024 * 1024;
}

/* Everything an open log holds, given back; the key erased. */
static void release(struct audit_log *l)
{
    EVP_PKEY_free(l->signing); /* NULL is fine */
    int fds[] = {l->fd, l->ckpt_fd, l->pack_fd, l->state_fd, l->dirfd};
    for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
        if (fds[i] >= 0)
            close(fds[i]);
    free(l->wbuf);
    free(l->wmarks);
    audit_mac_free(&l->mac);
    OPENSSL_cleanse(l->key, sizeof(l->key));
}

/* ---- open, step by step -------------------------------------------------------------- */

/* 1. Nothing held yet but the batch's buffers and the directory. */
static int open_dir(struct audit_log *l, const char *dir, const struct audit_config *cfg, char *err, size_t errlen)
{
    memset(l, 0, sizeof(*l));
    l->before_seal = alog_seal_begin;
    l->cfg = *cfg;
    l->fd = l->ckpt_fd = l->pack_fd = l->state_fd = l->dirfd = -1;
    l->wcap = WBUF_CAP;
    if ((l->wbuf = malloc(l->wcap)) == NULL || (l->wmarks = calloc(WMARKS_MAX, sizeof(*l->wmarks))) == NULL)
        return alog_fail(err, errlen, "out of memory");
    l->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (l->dirfd < 0)
        return alog_fail(err, errlen, "open %s: %s", dir, strerror(errno));
    return 0;
}

/* 3. checkpoints.log, appended to at each checkpoint. */
static int open_checkpoints(struct audit_log *l, char *err, size_t errlen)
{
    l->ckpt_fd = openat(l->dirfd, CHECKPOINTS_FILE, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (l->ckpt_fd < 0)
        return alog_fail(err, errlen, "open %s: %s", CHECKPOINTS_FILE, strerror(errno));
    return 0;
}

/* 6. The epoch's MAC context, and the file records go to. */
static int open_current_file(struct audit_log *l, uint64_t newest, char *err, size_t errlen)
{
    if (audit_mac_set_key(&l->mac, l->key) != 0)
        return alog_fail(err, errlen, "cannot set up HMAC-SHA256");
    if (newest == 0) /* a new directory: the first file */
        return alog_open_file(l, 1, 1, err, errlen);
    return alog_open_file(l, newest, 0, err, errlen);
}

/* 8. The run's first record, durable before anything is acknowledged. */
static int seal_start(struct audit_log *l, char *err, size_t errlen)
{
    json_t *start = json_pack("{s:s, s:I}", "type", "start", "pid", (json_int_t)getpid());
    if (start == NULL)
        return alog_fail(err, errlen, "out of memory");
    uint64_t s = alog_seal(l, start, NULL, err, errlen);
    json_decref(start);
    if (s == 0 || audit_log_sync(l, err, errlen) != 0)
        return -1;
    return 0;
}

int audit_log_open(struct audit_log *l, const char *dir, const struct audit_config *cfg, char *err, size_t errlen)
{
    struct log_tail t;

    if (open_dir(l, dir, cfg, err, errlen) != 0 || alog_load_state(l, err, errlen) != 0 ||
        alog_load_signing_key(l, err, errlen) != 0 || open_checkpoints(l, err, errlen) != 0 ||
        alog_read_end(l, &t, err, errlen) != 0 || alog_catch_up_epoch(l, &t, err, errlen) != 0 ||
        open_current_file(l, t.newest, err, errlen) != 0)
        goto fail;
    l->last_checkpoint = time(NULL);
    if (alog_repair_at_open(l, &t, err, errlen) != 0 || seal_start(l, err, errlen) != 0)
        goto fail;
    return 0;
fail:
    release(l);
    return -1;
}

/* ---- the timed duties, and close ----------------------------------------------------------- */

static int ratchet_due(const struct audit_log *l, time_t now)
{
    return l->cfg.epoch_seconds && (uint64_t)(now - l->epoch_started) >= l->cfg.epoch_seconds;
}

static int checkpoint_due(const struct audit_log *l, time_t now)
{
    return l->since_checkpoint > 0 && l->cfg.checkpoint_seconds &&
           (uint64_t)(now - l->last_checkpoint) >= l->cfg.checkpoint_seconds;
}

int64_t audit_log_checkpoint_in(const struct audit_log *l)
{
    if (l->since_checkpoint == 0 || l->cfg.checkpoint_delay_ms == 0)
        return -1;
    uint64_t from = l->uncovered_ms > l->ckpt_tried_ms ? l->uncovered_ms : l->ckpt_tried_ms;
    uint64_t due = from + l->cfg.checkpoint_delay_ms, now = alog_now_ms();
    return now >= due ? 0 : (int64_t)(due - now);
}

/* The checkpoint, durable; one that fails is tried again a delay later. */
static int timed_checkpoint(struct audit_log *l, char *err, size_t errlen)
{
    l->ckpt_tried_ms = alog_now_ms();
    return alog_checkpoint(l, err, errlen) != 0 || alog_sync_files(l, err, errlen) != 0 ? -1 : 0;
}

int audit_log_tick(struct audit_log *l, time_t now, char *err, size_t errlen)
{
    if (ratchet_due(l, now) && alog_ratchet(l, err, errlen) != 0)
        return -1;
    if ((checkpoint_due(l, now) || audit_log_checkpoint_in(l) == 0) && timed_checkpoint(l, err, errlen) != 0)
        return -1;
    if (now - l->last_expiry >= EXPIRY_EVERY_S) {
        l->last_expiry = now;
        if (l->cfg.packet_retention_s)
            alog_expire_packs(l, now);
    }
    return 0;
}

void audit_log_close(struct audit_log *l)
{
    char err[256];
    if (l->since_checkpoint > 0)
        (void)alog_checkpoint(l, err, sizeof(err));
    (void)audit_log_sync(l, err, sizeof(err));
    release(l);
}
