/*
 * audit_keys.c - the audit trail's keys on disk and in use: the state file
 * (the epoch and its MAC key), the ratchet, the Ed25519 signing key and the
 * checkpoints it signs, and a new directory's keys (moat-audit init).
 *
 * Theory of operation
 * -------------------
 * The state file holds only the epoch and its key.  It is rewritten before
 * a new key is used, so the old key is gone from it once the new one is in
 * force, and a restart never finds the log in an epoch whose key it lacks:
 *
 *   ratchet:   old lines written (the batch flushed), K(i+1) derived, the
 *              state rewritten in place; only then is the old key erased.
 *              A state that cannot be written (disk full) keeps the old key.
 *   catch up:  on open, a log already in a later epoch than the state (a
 *              ratchet whose state was lost) ratchets forward to it, never
 *              back.
 *   checkpoint: a torn line ended and repaired, the head signed with the
 *              signing key, sealed as a record, the record written, then
 *              one line appended to checkpoints.log (never a partial one:
 *              cut back on failure).
 *   init:      K0, the state, the signing key and verifier.key; the writer's
 *              user gets all but verifier.key (K0 would let it re-MAC every
 *              epoch).
 *
 * seq and prev are not kept here: the log itself is the truth for them
 * (audit_repair.c).
 */
#include "audit_log_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/pem.h>
#include <openssl/rand.h>

#include "moat_io.h"

/* The state is one block of STATE_SIZE bytes (the text, padded with
 * newlines): the writer overwrites it in place with a single pwrite of less
 * than a sector, which a device writes whole or not at all, then
 * fdatasync.  The old key's bytes are overwritten where they were. */
#define STATE_SIZE 256

/* Ratchets the log may be ahead of its state file before open refuses it. */
#define MAX_EPOCH_CATCH_UP 1000000

/* Creates dir-relative file name with content, mode 0600, durably. */
static int write_file_at(int dirfd, const char *name, const void *data, size_t len, char *err, size_t errlen)
{
    int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return alog_fail(err, errlen, "create %s: %s", name, strerror(errno));
    if (moat_write_full(fd, data, len, NULL) != 0 || fsync(fd) != 0) {
        int saved = errno;
        close(fd);
        return alog_fail(err, errlen, "write %s: %s", name, strerror(saved));
    }
    close(fd);
    return 0;
}

/* ---- the state file ----------------------------------------------------------- */

/* The state's text, padded with newlines to the block. */
static int format_state(const struct audit_log *l, char text[STATE_SIZE], char *err, size_t errlen)
{
    char hex[AUDIT_HEX_LEN + 1];
    moat_hex_encode(l->key, AUDIT_KEY_LEN, hex);
    int n = snprintf(text, STATE_SIZE, "moat-audit-state v1\nepoch %llu\nkey %s\nepoch_started %lld\n",
                     (unsigned long long)l->epoch, hex, (long long)l->epoch_started);
    OPENSSL_cleanse(hex, sizeof(hex));
    if (n < 0 || (size_t)n >= STATE_SIZE)
        return alog_fail(err, errlen, "state too long");
    memset(text + n, '\n', STATE_SIZE - (size_t)n);
    return 0;
}

/* A new directory (moat-audit init): a new file, put in place whole. */
static int create_state(const struct audit_log *l, const char text[STATE_SIZE], char *err, size_t errlen)
{
    if (write_file_at(l->dirfd, STATE_TMP, text, STATE_SIZE, err, errlen) != 0)
        return -1;
    if (renameat(l->dirfd, STATE_TMP, l->dirfd, STATE_FILE) != 0 || fsync(l->dirfd) != 0)
        return alog_fail(err, errlen, "replace state: %s", strerror(errno));
    return 0;
}

/* The writer's open state file, overwritten in place (one block). */
static int rewrite_state(const struct audit_log *l, const char text[STATE_SIZE], char *err, size_t errlen)
{
    struct stat st;
    int resized = fstat(l->state_fd, &st) != 0 || st.st_size != STATE_SIZE;
    ssize_t w = pwrite(l->state_fd, text, STATE_SIZE, 0);
    if (w != (ssize_t)STATE_SIZE || (resized && ftruncate(l->state_fd, STATE_SIZE) != 0) ||
        (resized ? fsync(l->state_fd) : fdatasync(l->state_fd)) != 0)
        return alog_fail(err, errlen, "write state: %s", w < 0 || w == (ssize_t)STATE_SIZE ? strerror(errno) : "short write");
    return 0;
}

static int save_state(struct audit_log *l, char *err, size_t errlen)
{
    char text[STATE_SIZE];
    int rc = format_state(l, text, err, errlen);
    if (rc == 0)
        rc = l->state_fd < 0 ? create_state(l, text, err, errlen) : rewrite_state(l, text, err, errlen);
    OPENSSL_cleanse(text, sizeof(text));
    return rc;
}

int alog_load_state(struct audit_log *l, char *err, size_t errlen)
{
    char text[512], hex[AUDIT_HEX_LEN + 1];
    unsigned long long epoch;
    long long started;
    /* kept open: the writer rewrites it in place at every ratchet */
    int fd = openat(l->dirfd, STATE_FILE, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return alog_fail(err, errlen, "open state: %s (run moat-audit init first)", strerror(errno));
    ssize_t n = pread(fd, text, sizeof(text) - 1, 0);
    l->state_fd = fd;
    if (n <= 0)
        return alog_fail(err, errlen, "state file is empty or unreadable");
    text[n] = '\0';
    int rc = sscanf(text, "moat-audit-state v1\nepoch %llu\nkey %64s\nepoch_started %lld\n", &epoch, hex, &started);
    OPENSSL_cleanse(text, sizeof(text));
    if (rc != 3 || audit_unhex(hex, strlen(hex), l->key, AUDIT_KEY_LEN) != 0) {
        OPENSSL_cleanse(hex, sizeof(hex));
        return alog_fail(err, errlen, "state file is malformed");
    }
    OPENSSL_cleanse(hex, sizeof(hex));
    l->epoch = epoch;
    l->epoch_started = (time_t)started;
    return 0;
}

/* ---- the ratchet ----------------------------------------------------------------- */

int alog_ratchet(struct audit_log *l, char *err, size_t errlen)
{
    uint8_t old[AUDIT_KEY_LEN];
    /* the old epoch's lines are on disk before its key is gone */
    if (alog_flush(l, err, errlen) != 0)
        return -1;
    uint64_t old_records = l->epoch_records;
    time_t old_started = l->epoch_started;
    memcpy(old, l->key, sizeof(old));
    audit_ratchet(l->key);
    l->epoch++;
    l->epoch_records = 0;
    l->epoch_started = time(NULL);
    /* the state file holds only the new key from here on.  If it cannot be
     * written (disk full), the new key is not used: the state file still
     * holds the old one, and a restart must find the epoch the log is in. */
    if (save_state(l, err, errlen) != 0) {
        memcpy(l->key, old, sizeof(old));
        l->epoch--;
        l->epoch_records = old_records;
        l->epoch_started = old_started;
        OPENSSL_cleanse(old, sizeof(old));
        return -1;
    }
    /* the old key's MAC context goes with the old key; one for the new key
     * that cannot be made now is made by the next seal */
    audit_mac_free(&l->mac);
    OPENSSL_cleanse(old, sizeof(old));
    (void)audit_mac_set_key(&l->mac, l->key);
    return 0;
}

int alog_catch_up_epoch(struct audit_log *l, const struct log_tail *t, char *err, size_t errlen)
{
    uint64_t log_epoch = t->epoch;
    if (!t->has_epoch || log_epoch <= l->epoch)
        return 0;
    if (log_epoch - l->epoch > MAX_EPOCH_CATCH_UP)
        return alog_fail(err, errlen, "the log is at epoch %llu, the state file at %llu", (unsigned long long)log_epoch,
                         (unsigned long long)l->epoch);
    while (l->epoch < log_epoch) {
        audit_ratchet(l->key);
        l->epoch++;
    }
    return save_state(l, err, errlen);
}

/* ---- the signing key and checkpoints ---------------------------------------------------- */

int alog_load_signing_key(struct audit_log *l, char *err, size_t errlen)
{
    int fd = openat(l->dirfd, SIGNING_FILE, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;
    l->signing = f ? PEM_read_PrivateKey(f, NULL, NULL, NULL) : NULL;
    if (f)
        fclose(f);
    else if (fd >= 0)
        close(fd);
    if (l->signing == NULL || EVP_PKEY_get_id(l->signing) != EVP_PKEY_ED25519)
        return alog_fail(err, errlen, "cannot read the Ed25519 key %s", SIGNING_FILE);
    return 0;
}

/* Appends "<seq> <head> <sig>" to checkpoints.log; a line written part-way
 * is cut back off. */
static int append_checkpoint_line(struct audit_log *l, uint64_t head_seq, const char *head, const char *sighex, char *err,
                                  size_t errlen)
{
    char line[320];
    struct stat st;
    size_t done = 0;
    int n = snprintf(line, sizeof(line), "%llu %s %s\n", (unsigned long long)head_seq, head, sighex);
    if (fstat(l->ckpt_fd, &st) != 0)
        return alog_fail(err, errlen, "stat checkpoints.log: %s", strerror(errno));
    l->ckpt_dirty = 1;
    if (moat_write_full(l->ckpt_fd, line, (size_t)n, &done) != 0) {
        int saved = errno;
        /* no partial line may stay in checkpoints.log (the verifier would
         * take it for a forged checkpoint); the checkpoint record itself is
         * in the log, and the next checkpoint covers more */
        if (done > 0 && ftruncate(l->ckpt_fd, st.st_size) != 0)
            fprintf(stderr, "moat-audit: cannot remove a partial line from checkpoints.log: %s\n", strerror(errno));
        return alog_fail(err, errlen, "write checkpoints.log: %s", strerror(saved));
    }
    return 0;
}

int alog_checkpoint(struct audit_log *l, char *err, size_t errlen)
{
    char head[AUDIT_HEX_LEN + 1], text[160], sighex[2 * AUDIT_SIG_LEN + 1];
    uint8_t sig[AUDIT_SIG_LEN];

    /* a torn line is ended and repaired first: the head signed is the
     * record right before the checkpoint's, as the verifier checks */
    if (alog_end_torn(l, err, errlen) != 0)
        return -1;
    uint64_t head_seq = l->seq;
    moat_hex_encode(l->prev, sizeof(l->prev), head);
    if (audit_checkpoint_text(text, sizeof(text), head_seq, head) != 0 || audit_sign(l->signing, text, sig) != 0)
        return alog_fail(err, errlen, "cannot sign a checkpoint");
    moat_hex_encode(sig, sizeof(sig), sighex);
    json_t *body =
        json_pack("{s:s, s:I, s:s, s:s}", "type", "checkpoint", "head_seq", (json_int_t)head_seq, "head", head, "sig", sighex);
    if (body == NULL)
        return alog_fail(err, errlen, "out of memory");
    uint64_t seq = alog_seal(l, body, NULL, err, errlen);
    json_decref(body);
    /* checkpoints.log never names a record that is not written */
    if (seq == 0 || alog_flush(l, err, errlen) != 0 || append_checkpoint_line(l, head_seq, head, sighex, err, errlen) != 0)
        return -1;
    l->since_checkpoint = 0;
    l->last_checkpoint = time(NULL);
    return 0;
}

/* ---- a new directory (moat-audit init) ---------------------------------------------------- */

/* What init makes, erased when it is done. */
struct new_keys {
    uint8_t k0[AUDIT_KEY_LEN];
    uint8_t pub[AUDIT_PUB_LEN];
    EVP_PKEY *signing;
};

/* The directory, mode 0700; one that holds a trail already is refused. */
static int open_new_dir(struct audit_log *l, const char *dir, char *err, size_t errlen)
{
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return alog_fail(err, errlen, "mkdir %s: %s", dir, strerror(errno));
    l->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (l->dirfd < 0)
        return alog_fail(err, errlen, "open %s: %s", dir, strerror(errno));
    if (faccessat(l->dirfd, STATE_FILE, F_OK, 0) == 0)
        return alog_fail(err, errlen, "%s already holds an audit trail; refusing to overwrite its keys", dir);
    return 0;
}

/* K0, random, in force from epoch 0: the state file. */
static int make_k0(struct audit_log *l, struct new_keys *k, char *err, size_t errlen)
{
    if (RAND_bytes(k->k0, sizeof(k->k0)) != 1)
        return alog_fail(err, errlen, "no randomness");
    memcpy(l->key, k->k0, sizeof(k->k0));
    l->epoch = 0;
    l->epoch_started = time(NULL);
    return save_state(l, err, errlen);
}

/* The Ed25519 signing key, as PEM in signing.key (a new file). */
static int make_signing_key(struct audit_log *l, struct new_keys *k, char *err, size_t errlen)
{
    size_t publen = sizeof(k->pub);
    k->signing = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
    if (k->signing == NULL || EVP_PKEY_get_raw_public_key(k->signing, k->pub, &publen) != 1 || publen != AUDIT_PUB_LEN)
        return alog_fail(err, errlen, "cannot make an Ed25519 key");
    int fd = openat(l->dirfd, SIGNING_FILE, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (f == NULL || PEM_write_PrivateKey(f, k->signing, NULL, NULL, 0, NULL, NULL) != 1 || fflush(f) != 0 ||
        fsync(fileno(f)) != 0) {
        alog_fail(err, errlen, "write %s: %s", SIGNING_FILE, strerror(errno));
        if (f)
            fclose(f);
        else if (fd >= 0)
            close(fd);
        return -1;
    }
    fclose(f);
    return 0;
}

/* verifier.key: K0 and the public key, for reviewers. */
static int write_verifier_key(struct audit_log *l, const struct new_keys *k, char *err, size_t errlen)
{
    char text[512];
    int n = audit_verifier_text(text, sizeof(text), k->k0, k->pub);
    int rc =
        n < 0 ? alog_fail(err, errlen, "verifier key text") : write_file_at(l->dirfd, VERIFIER_FILE, text, (size_t)n, err, errlen);
    OPENSSL_cleanse(text, sizeof(text));
    return rc;
}

/* The writer's user owns the directory and what the writer uses.  Not
 * verifier.key: it holds K0, from which every epoch's key derives, so a
 * writer that could read it could re-MAC the whole log; it stays with
 * whoever ran init (root), for reviewers to copy off the host. */
static int give_to_writer(struct audit_log *l, uid_t uid, gid_t gid, char *err, size_t errlen)
{
    static const char *const names[] = {".", STATE_FILE, SIGNING_FILE};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (fchownat(l->dirfd, names[i], uid, gid, AT_SYMLINK_NOFOLLOW) != 0)
            return alog_fail(err, errlen, "chown %s: %s", names[i], strerror(errno));
    return 0;
}

int audit_init_dir(const char *dir, uid_t uid, gid_t gid, char *err, size_t errlen)
{
    struct audit_log l;
    struct new_keys k;

    memset(&l, 0, sizeof(l));
    memset(&k, 0, sizeof(k));
    l.state_fd = -1;
    l.dirfd = -1;
    int rc = open_new_dir(&l, dir, err, errlen);
    if (rc == 0)
        rc = make_k0(&l, &k, err, errlen);
    if (rc == 0)
        rc = make_signing_key(&l, &k, err, errlen);
    if (rc == 0)
        rc = write_verifier_key(&l, &k, err, errlen);
    if (rc == 0)
        rc = give_to_writer(&l, uid, gid, err, errlen);
    OPENSSL_cleanse(k.k0, sizeof(k.k0));
    OPENSSL_cleanse(l.key, sizeof(l.key));
    EVP_PKEY_free(k.signing);
    if (l.dirfd >= 0)
        close(l.dirfd);
    return rc;
}
