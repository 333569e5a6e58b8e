/*
 * audit_log.c - sealing, durability and upkeep of the audit log (FORMAT.md).
 *
 * Every line is built here, from a body the writer re-encodes itself or, on
 * the fast path, from the body as sent when json_scan.c finds it already
 * strict compact printable-ASCII JSON with no duplicate keys, so a line is
 * always one line of ASCII JSON whatever the gateway sent.  seq and
 * prev are recovered from the log itself on open (the log is the truth);
 * the state file holds only the epoch and its key, and is rewritten before
 * a new key is used, so the old key is gone from it once the new one is in
 * force.
 */
#include "audit_log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/pem.h>
#include <openssl/rand.h>

#include "json_scan.h"

#define STATE_FILE       "state"
#define STATE_TMP        "state.tmp"
#define SIGNING_FILE     "signing.key"
#define VERIFIER_FILE    "verifier.key"
#define CHECKPOINTS_FILE "checkpoints.log"
#define PACKETS_DIR      "packets" /* packets of earlier versions, one file each */

/* Where a record's packet is: its SHA-256, and "<pack>:<offset>:<length>". */
struct packet_ref {
    char hex[AUDIT_HEX_LEN + 1];
    char at[96];
};

__attribute__((format(printf, 3, 4))) static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

/* A body refused for what it is: err set, errno EINVAL. */
__attribute__((format(printf, 3, 4))) static int refuse(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    errno = EINVAL;
    return -1;
}

void audit_config_defaults(struct audit_config *c)
{
    c->epoch_records = 1000;
    c->epoch_seconds = 300;
    c->checkpoint_records = 1000;
    c->checkpoint_seconds = 60;
    c->rotate_bytes = 64ull * 1024 * 1024;
    c->rotate_seconds = 86400;
    c->packets = 1;
    c->packet_max_bytes = 8ull * 1024 * 1024;
    c->packet_retention_s = 30ull * 86400;
    c->append_only = 1;
}

static int write_all(int fd, const void *buf, size_t len, size_t *done)
{
    size_t off = 0;
    while (off < len) {
        ssize_t n = write(fd, (const char *)buf + off, len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (n == 0)
                errno = ENOSPC;
            if (done)
                *done = off;
            return -1;
        }
        off += (size_t)n;
    }
    if (done)
        *done = off;
    return 0;
}

/* Creates dir-relative file name with content, mode 0600, durably. */
static int write_file_at(int dirfd, const char *name, const void *data, size_t len, char *err, size_t errlen)
{
    int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return fail(err, errlen, "create %s: %s", name, strerror(errno));
    if (write_all(fd, data, len, NULL) != 0 || fsync(fd) != 0) {
        int saved = errno;
        close(fd);
        return fail(err, errlen, "write %s: %s", name, strerror(saved));
    }
    close(fd);
    return 0;
}

/* ---- state ------------------------------------------------------------------ */

/* The state is one block of STATE_SIZE bytes (the text, padded with
 * newlines): the writer overwrites it in place with a single pwrite of less
 * than a sector, which a device writes whole or not at all, then
 * fdatasync.  The old key's bytes are overwritten where they were. */
#define STATE_SIZE 256

static int save_state(struct audit_log *l, char *err, size_t errlen)
{
    char text[STATE_SIZE], hex[AUDIT_HEX_LEN + 1];
    audit_hex(l->key, AUDIT_KEY_LEN, hex);
    int n = snprintf(text, sizeof(text), "moat-audit-state v1\nepoch %llu\nkey %s\nepoch_started %lld\n",
                     (unsigned long long)l->epoch, hex, (long long)l->epoch_started);
    OPENSSL_cleanse(hex, sizeof(hex));
    if (n < 0 || (size_t)n >= sizeof(text)) {
        OPENSSL_cleanse(text, sizeof(text));
        return fail(err, errlen, "state too long");
    }
    memset(text + n, '\n', sizeof(text) - (size_t)n);
    int rc;
    if (l->state_fd < 0) {
        /* a new directory (moat-audit init): a new file, put in place whole */
        rc = write_file_at(l->dirfd, STATE_TMP, text, sizeof(text), err, errlen);
        if (rc == 0 && (renameat(l->dirfd, STATE_TMP, l->dirfd, STATE_FILE) != 0 || fsync(l->dirfd) != 0))
            rc = fail(err, errlen, "replace state: %s", strerror(errno));
    } else {
        struct stat st;
        int resized = fstat(l->state_fd, &st) != 0 || st.st_size != STATE_SIZE;
        ssize_t w = pwrite(l->state_fd, text, sizeof(text), 0);
        if (w != (ssize_t)sizeof(text) || (resized && ftruncate(l->state_fd, STATE_SIZE) != 0) ||
            (resized ? fsync(l->state_fd) : fdatasync(l->state_fd)) != 0)
            rc = fail(err, errlen, "write state: %s", w < 0 || w == (ssize_t)sizeof(text) ? strerror(errno) : "short write");
        else
            rc = 0;
    }
    OPENSSL_cleanse(text, sizeof(text));
    return rc;
}

static int load_state(struct audit_log *l, char *err, size_t errlen)
{
    char text[512], hex[AUDIT_HEX_LEN + 1];
    unsigned long long epoch;
    long long started;
    /* kept open: the writer rewrites it in place at every ratchet */
    int fd = openat(l->dirfd, STATE_FILE, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return fail(err, errlen, "open state: %s (run moat-audit init first)", strerror(errno));
    ssize_t n = pread(fd, text, sizeof(text) - 1, 0);
    l->state_fd = fd;
    if (n <= 0)
        return fail(err, errlen, "state file is empty or unreadable");
    text[n] = '\0';
    int rc = sscanf(text, "moat-audit-state v1\nepoch %llu\nkey %64s\nepoch_started %lld\n", &epoch, hex, &started);
    OPENSSL_cleanse(text, sizeof(text));
    if (rc != 3 || audit_unhex(hex, strlen(hex), l->key, AUDIT_KEY_LEN) != 0) {
        OPENSSL_cleanse(hex, sizeof(hex));
        return fail(err, errlen, "state file is malformed");
    }
    OPENSSL_cleanse(hex, sizeof(hex));
    l->epoch = epoch;
    l->epoch_started = (time_t)started;
    return 0;
}

/* ---- init -------------------------------------------------------------------- */

int audit_init_dir(const char *dir, uid_t uid, gid_t gid, char *err, size_t errlen)
{
    struct audit_log l;
    uint8_t k0[AUDIT_KEY_LEN], pub[AUDIT_PUB_LEN];
    char k0hex[AUDIT_HEX_LEN + 1], pubhex[2 * AUDIT_PUB_LEN + 1], text[512];
    size_t publen = sizeof(pub);
    EVP_PKEY *pkey = NULL;
    int rc = -1;

    memset(&l, 0, sizeof(l));
    l.state_fd = -1;
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return fail(err, errlen, "mkdir %s: %s", dir, strerror(errno));
    l.dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (l.dirfd < 0)
        return fail(err, errlen, "open %s: %s", dir, strerror(errno));
    if (faccessat(l.dirfd, STATE_FILE, F_OK, 0) == 0) {
        fail(err, errlen, "%s already holds an audit trail; refusing to overwrite its keys", dir);
        goto out;
    }
    if (RAND_bytes(k0, sizeof(k0)) != 1) {
        fail(err, errlen, "no randomness");
        goto out;
    }
    memcpy(l.key, k0, sizeof(k0));
    l.epoch = 0;
    l.epoch_started = time(NULL);
    if (save_state(&l, err, errlen) != 0)
        goto out;
    pkey = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
    if (pkey == NULL || EVP_PKEY_get_raw_public_key(pkey, pub, &publen) != 1 || publen != AUDIT_PUB_LEN) {
        fail(err, errlen, "cannot make an Ed25519 key");
        goto out;
    }
    {
        int fd = openat(l.dirfd, SIGNING_FILE, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
        if (f == NULL || PEM_write_PrivateKey(f, pkey, NULL, NULL, 0, NULL, NULL) != 1 || fflush(f) != 0 || fsync(fileno(f)) != 0) {
            fail(err, errlen, "write %s: %s", SIGNING_FILE, strerror(errno));
            if (f)
                fclose(f);
            else if (fd >= 0)
                close(fd);
            goto out;
        }
        fclose(f);
    }
    audit_hex(k0, sizeof(k0), k0hex);
    audit_hex(pub, sizeof(pub), pubhex);
    int n = snprintf(text, sizeof(text), "moat-audit verifier v1\nk0 %s\npublic %s\n", k0hex, pubhex);
    if (write_file_at(l.dirfd, VERIFIER_FILE, text, (size_t)n, err, errlen) != 0)
        goto out;
    if (mkdirat(l.dirfd, PACKETS_DIR, 0700) != 0 && errno != EEXIST) {
        fail(err, errlen, "mkdir packets: %s", strerror(errno));
        goto out;
    }
    /* the writer's user owns everything; the verifier copy is for reviewers */
    const char *names[] = {".", STATE_FILE, SIGNING_FILE, VERIFIER_FILE, PACKETS_DIR};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (fchownat(l.dirfd, names[i], uid, gid, AT_SYMLINK_NOFOLLOW) != 0) {
            fail(err, errlen, "chown %s: %s", names[i], strerror(errno));
            goto out;
        }
    rc = 0;
out:
    OPENSSL_cleanse(k0, sizeof(k0));
    OPENSSL_cleanse(k0hex, sizeof(k0hex));
    OPENSSL_cleanse(text, sizeof(text));
    OPENSSL_cleanse(l.key, sizeof(l.key));
    EVP_PKEY_free(pkey);
    close(l.dirfd);
    return rc;
}

/* ---- log files ------------------------------------------------------------------- */

static int log_name(char *buf, size_t size, uint64_t first_seq)
{
    int n = snprintf(buf, size, "audit-%016llu.log", (unsigned long long)first_seq);
    return n > 0 && (size_t)n < size ? 0 : -1;
}

/* The largest first seq of a log file below `below`, or 0 when none. */
static uint64_t newest_log(int dirfd, uint64_t below)
{
    int fd = dup(dirfd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    struct dirent *de;
    uint64_t best = 0;
    if (d == NULL) {
        if (fd >= 0)
            close(fd);
        return 0;
    }
    /* the dup shares dirfd's position, which an earlier call left at the end */
    rewinddir(d);
    while ((de = readdir(d)) != NULL) {
        unsigned long long s;
        char tail[8];
        if (sscanf(de->d_name, "audit-%16llu.%4s", &s, tail) == 2 && strcmp(tail, "log") == 0 && s > best && s < below)
            best = s;
    }
    closedir(d);
    return best;
}

/* chattr +a on fd where permitted; 1 if it worked. */
static int mark_append_only(const struct audit_log *l, int fd)
{
    int flags = 0;
    if (!l->cfg.append_only || ioctl(fd, FS_IOC_GETFLAGS, &flags) != 0)
        return 0;
    flags |= FS_APPEND_FL;
    return ioctl(fd, FS_IOC_SETFLAGS, &flags) == 0;
}

static void set_append_only(struct audit_log *l)
{
    l->appended_ok = mark_append_only(l, l->fd);
}

static int open_log_file(struct audit_log *l, uint64_t first_seq, int create, char *err, size_t errlen)
{
    char name[64];
    if (log_name(name, sizeof(name), first_seq) != 0)
        return fail(err, errlen, "log name");
    int flags = O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC | (create ? O_CREAT | O_EXCL : 0);
    int fd = openat(l->dirfd, name, flags, 0600);
    if (fd < 0)
        return fail(err, errlen, "open %s: %s", name, strerror(errno));
    if (l->fd >= 0)
        close(l->fd);
    l->fd = fd;
    l->file_first_seq = first_seq;
    if (l->pack_fd >= 0) { /* synced before a rotation: the next packet opens this file's pack */
        close(l->pack_fd);
        l->pack_fd = -1;
        l->pack_dirty = 0;
    }
    struct stat st;
    l->file_bytes = fstat(fd, &st) == 0 ? (uint64_t)st.st_size : 0;
    l->file_started = time(NULL);
    if (create && fsync(l->dirfd) != 0)
        return fail(err, errlen, "fsync directory: %s", strerror(errno));
    set_append_only(l);
    return 0;
}

/*
 * Reads the end of a log file: the last complete line (without '\n') into
 * line, and the length of a torn fragment after it.  Returns 1 when a
 * complete line was found, 0 when none, -1 on error.
 */
static int read_tail(int dirfd, uint64_t first_seq, char *line, size_t size, size_t *line_len, size_t *torn,
                     uint8_t torn_hash[AUDIT_HASH_LEN], char *frag, size_t fragsize)
{
    char name[64];
    log_name(name, sizeof(name), first_seq);
    int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -1;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return -1;
    }
    size_t want = (size_t)st.st_size < 2 * AUDIT_MAX_LINE + 2 ? (size_t)st.st_size : 2 * AUDIT_MAX_LINE + 2;
    char *buf = malloc(want + 1);
    if (buf == NULL || pread(fd, buf, want, st.st_size - (off_t)want) != (ssize_t)want) {
        free(buf);
        close(fd);
        return -1;
    }
    close(fd);
    size_t end = want;
    *torn = 0;
    char *nl = memrchr(buf, '\n', end);
    frag[0] = '\0';
    if (nl == NULL) {
        *torn = end;
        if (end)
            audit_sha256(buf, end, torn_hash);
        if (end < fragsize) {
            memcpy(frag, buf, end);
            frag[end] = '\0';
        }
        free(buf);
        return 0;
    }
    if ((size_t)(nl - buf) + 1 < end) {
        *torn = end - (size_t)(nl - buf) - 1;
        audit_sha256(nl + 1, *torn, torn_hash);
        if (*torn < fragsize) {
            memcpy(frag, nl + 1, *torn);
            frag[*torn] = '\0';
        }
    }
    char *start = memrchr(buf, '\n', (size_t)(nl - buf));
    start = start ? start + 1 : buf;
    size_t len = (size_t)(nl - start);
    if (len >= size) {
        free(buf);
        return -1;
    }
    memcpy(line, start, len);
    line[len] = '\0';
    *line_len = len;
    free(buf);
    return 1;
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
    audit_hex(prev, AUDIT_HASH_LEN, hex);
    snprintf(want, sizeof(want), ",\"prev\":\"%s\"", hex);
    if (strstr(frag, want) == NULL || strstr(frag, ",\"mac\":\"") == NULL)
        return 0;
    json_t *j = json_loadb(frag, len, JSON_REJECT_DUPLICATES, &jerr);
    int ok = json_is_object(j);
    json_decref(j);
    return ok;
}

/* ---- sealing ----------------------------------------------------------------------- */

static const char *const reserved[] = {"seq", "time", "epoch", "prev", "mac", "packet", "packet_at"};
static const char *const own_types[] = {"checkpoint", "repair", "start"};

/* The most a body may take of a line, as jansson encodes it (packet included). */
#define MAX_BODY (AUDIT_MAX_LINE - 256)

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
    audit_hex(in, len, p); /* its '\0' is overwritten next */
    return p + 2 * len;
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

static int flush_lines(struct audit_log *l, char *err, size_t errlen);
static int sync_files(struct audit_log *l, char *err, size_t errlen);

static int ratchet(struct audit_log *l, char *err, size_t errlen)
{
    uint8_t old[AUDIT_KEY_LEN];
    /* the old epoch's lines are on disk before its key is gone */
    if (flush_lines(l, err, errlen) != 0)
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

/* The pack beside the current log file: audit-<its first seq>.pack. */
static int pack_name(char *buf, size_t size, uint64_t first_seq)
{
    int n = snprintf(buf, size, "audit-%016llu.pack", (unsigned long long)first_seq);
    return n > 0 && (size_t)n < size ? 0 : -1;
}

/*
 * Appends a packet to the current log file's pack (one file per log file,
 * O_APPEND, mode 0600, chattr +a where permitted: no file, inode or
 * directory entry per packet) and fills ref: its SHA-256, and where it is
 * ("<pack>:<offset>:<length>").  It is made durable with the batch
 * (audit_log_sync), before the record naming it is acknowledged.  A write
 * that fails part-way leaves bytes no record names; the next packet goes
 * after them.
 */
static int store_packet(struct audit_log *l, const void *packet, size_t len, struct packet_ref *ref, char *err, size_t errlen)
{
    uint8_t h[AUDIT_HASH_LEN];
    char name[40];
    size_t done = 0;

    if (pack_name(name, sizeof(name), l->file_first_seq) != 0)
        return fail(err, errlen, "pack name");
    if (l->pack_fd < 0) {
        struct stat st;
        int fd = openat(l->dirfd, name, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
            return fail(err, errlen, "open %s: %s", name, strerror(errno));
        if (fstat(fd, &st) != 0) {
            int saved = errno;
            close(fd);
            return fail(err, errlen, "stat %s: %s", name, strerror(saved));
        }
        /* the pack's directory entry is durable before a record names it */
        if (st.st_size == 0 && fsync(l->dirfd) != 0) {
            int saved = errno;
            close(fd);
            return fail(err, errlen, "fsync directory: %s", strerror(saved));
        }
        (void)mark_append_only(l, fd);
        l->pack_fd = fd;
        l->pack_bytes = (uint64_t)st.st_size;
    }
    audit_sha256(packet, len, h);
    audit_hex(h, sizeof(h), ref->hex);
    snprintf(ref->at, sizeof(ref->at), "%s:%llu:%zu", name, (unsigned long long)l->pack_bytes, len);
    int rc = write_all(l->pack_fd, packet, len, &done);
    l->pack_bytes += done;
    l->pack_dirty |= done > 0;
    if (rc != 0)
        return fail(err, errlen, "write %s: %s", name, strerror(errno));
    return 0;
}

static uint64_t seal(struct audit_log *l, json_t *body, const struct packet_ref *pk, char *err, size_t errlen);

static int checkpoint(struct audit_log *l, char *err, size_t errlen)
{
    char head[AUDIT_HEX_LEN + 1], text[160], sighex[2 * AUDIT_SIG_LEN + 1], line[320];
    uint8_t sig[AUDIT_SIG_LEN];
    uint64_t head_seq = l->seq;

    audit_hex(l->prev, sizeof(l->prev), head);
    if (audit_checkpoint_text(text, sizeof(text), head_seq, head) != 0 || audit_sign(l->signing, text, sig) != 0)
        return fail(err, errlen, "cannot sign a checkpoint");
    audit_hex(sig, sizeof(sig), sighex);
    json_t *body =
        json_pack("{s:s, s:I, s:s, s:s}", "type", "checkpoint", "head_seq", (json_int_t)head_seq, "head", head, "sig", sighex);
    if (body == NULL)
        return fail(err, errlen, "out of memory");
    uint64_t seq = seal(l, body, NULL, err, errlen);
    json_decref(body);
    /* checkpoints.log never names a record that is not written */
    if (seq == 0 || flush_lines(l, err, errlen) != 0)
        return -1;
    int n = snprintf(line, sizeof(line), "%llu %s %s\n", (unsigned long long)head_seq, head, sighex);
    struct stat st;
    size_t done = 0;
    if (fstat(l->ckpt_fd, &st) != 0)
        return fail(err, errlen, "stat checkpoints.log: %s", strerror(errno));
    l->ckpt_dirty = 1;
    if (write_all(l->ckpt_fd, line, (size_t)n, &done) != 0) {
        int saved = errno;
        /* no partial line may stay in checkpoints.log (the verifier would
         * take it for a forged checkpoint); the checkpoint record itself is
         * in the log, and the next checkpoint covers more */
        if (done > 0 && ftruncate(l->ckpt_fd, st.st_size) != 0)
            fprintf(stderr, "moat-audit: cannot remove a partial line from checkpoints.log: %s\n", strerror(errno));
        return fail(err, errlen, "write checkpoints.log: %s", strerror(saved));
    }
    l->since_checkpoint = 0;
    l->last_checkpoint = time(NULL);
    return 0;
}

/* A fragment of a line that failed part-way (disk full) is on disk: end it
 * and record a repair, before anything else is appended. */
static int finish_torn(struct audit_log *l, char *err, size_t errlen)
{
    char hex[AUDIT_HEX_LEN + 1];
    if (l->torn_newline) {
        char nl = '\n';
        if (write_all(l->fd, &nl, 1, NULL) != 0)
            return fail(err, errlen, "end a torn audit line: %s", strerror(errno));
        l->torn_newline = 0;
        l->file_bytes++;
    }
    audit_hex(l->torn_hash, sizeof(l->torn_hash), hex);
    json_t *b = json_pack("{s:s, s:I, s:s}", "type", "repair", "torn_bytes", (json_int_t)l->torn_pending, "torn_sha256", hex);
    if (b == NULL)
        return fail(err, errlen, "out of memory");
    size_t pending = l->torn_pending;
    l->torn_pending = 0; /* seal() must not recurse into here */
    uint64_t s = seal(l, b, NULL, err, errlen);
    json_decref(b);
    if (s == 0 && l->torn_pending == 0) {
        l->torn_pending = pending; /* try again with the next record */
        return -1;
    }
    return s ? 0 : -1;
}

/* A torn line (a write that failed part-way) is ended, and a fragment
 * repaired, before anything else: in the file it is in. */
static int end_torn(struct audit_log *l, char *err, size_t errlen)
{
    if (!l->torn_pending && !l->torn_newline)
        return 0;
    /* ended straight in the file, which the batch would otherwise pass (it
     * is empty then: a failed write empties it) */
    if (flush_lines(l, err, errlen) != 0)
        return -1;
    if (l->torn_pending) {
        if (finish_torn(l, err, errlen) != 0)
            return -1;
    } else if (l->torn_newline) {
        /* the last record is whole but still lacks its newline */
        char nl = '\n';
        if (write_all(l->fd, &nl, 1, NULL) != 0)
            return fail(err, errlen, "end the last audit line: %s", strerror(errno));
        l->torn_newline = 0;
        l->file_bytes++;
    }
    return 0;
}

/* What comes before any record: a torn line is ended (and repaired), and
 * the epoch ratchets when it is full. */
static int seal_begin(struct audit_log *l, char *err, size_t errlen)
{
    if (end_torn(l, err, errlen) != 0)
        return -1;
    if (l->cfg.epoch_records && l->epoch_records >= l->cfg.epoch_records && ratchet(l, err, errlen) != 0)
        return -1;
    return 0;
}

/* The size of a body of ilen bytes as jansson would encode it with the
 * "packet" and "packet_at" members added. */
static size_t body_size(size_t ilen, int with_packet)
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

#define WBUF_CAP   (1024 * 1024)
#define WMARKS_MAX 8192

/*
 * Writes the buffered lines with one write(2).  If the write stops short
 * (disk full), the lines wholly written are records and the rest are not:
 * seq/prev go back to the last whole one; a line written but for its '\n'
 * is a record too (ended before the next one, as a restart would adopt
 * it); a fragment is ended and marked by a repair record before the next
 * record (finish_torn).  The failure is remembered until audit_log_sync,
 * which then fails, so that nothing of the batch is acknowledged.
 */
static int flush_lines(struct audit_log *l, char *err, size_t errlen)
{
    size_t done = 0, k = 0, start, lost;

    if (l->wlen == 0)
        return 0;
    if (write_all(l->fd, l->wbuf, l->wlen, &done) == 0) {
        l->wlen = l->nmarks = 0;
        return 0;
    }
    int saved = errno;
    while (k < l->nmarks && l->wmarks[k].end <= done)
        k++;
    start = k ? l->wmarks[k - 1].end : 0;
    lost = l->nmarks - k;
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
    l->wlen = l->nmarks = 0;
    l->write_failed = saved;
    fail(err, errlen, "append to the audit log: %s", strerror(saved));
    errno = saved;
    return -1;
}

/* Seals a line of len bytes (its '\n' at line[len]) into the batch and
 * advances seq/prev; it is written by flush_lines. */
static uint64_t append_line(struct audit_log *l, const char *line, size_t len, char *err, size_t errlen)
{
    struct audit_wmark *m;

    if ((l->nmarks == WMARKS_MAX || l->wlen + len + 1 > l->wcap) && flush_lines(l, err, errlen) != 0)
        return 0;
    if (l->nmarks == 0) {
        l->wbase_seq = l->seq;
        l->wbase_file_bytes = l->file_bytes;
        memcpy(l->wbase_prev, l->prev, AUDIT_HASH_LEN);
    }
    m = &l->wmarks[l->nmarks++];
    audit_sha256(line, len, m->hash);
    memcpy(l->wbuf + l->wlen, line, len + 1);
    l->wlen += len + 1;
    m->end = l->wlen;
    m->seq = ++l->seq;
    memcpy(l->prev, m->hash, AUDIT_HASH_LEN);
    l->file_bytes += len + 1;
    l->epoch_records++;
    l->since_checkpoint++;
    l->dirty = 1;
    return l->seq;
}

/*
 * Builds the next line from inner, a JSON object's text with its braces
 * (only what is between them is used), adding ,"packet":"<hex>" and
 * ,"packet_at":"<where>" after its members when pk is set, and appends it.  The line is
 *   {"seq":N,"time":"...","epoch":E,"prev":"<hex>",<members>,"mac":"<hex>"}
 * in l->line: at most 176 bytes before the members and 76 after them, well
 * within AUDIT_LINE_SLACK + 256 bytes past MAX_BODY.
 */
static uint64_t seal_line(struct audit_log *l, const char *inner, size_t ilen, const struct packet_ref *pk, char *err,
                          size_t errlen)
{
    uint8_t mac[AUDIT_HASH_LEN];
    char *line = l->line, *p = line;

    if (ilen < 2 || body_size(ilen, pk != NULL) > MAX_BODY) {
        refuse(err, errlen, "record too large");
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
        fail(err, errlen, "HMAC failed");
        return 0;
    }
    p = PUT_LIT(p, ",\"mac\":\"");
    p = put_hex(p, mac, sizeof(mac));
    p = PUT_LIT(p, "\"}");
    *p = '\n';
    return append_line(l, line, (size_t)(p - line), err, errlen);
}

/* jansson's compact ASCII text of body, DEL escaped too; NULL with err set. */
static char *encode_body(json_t *body, size_t *len, char *err, size_t errlen)
{
    char *inner = json_dumps(body, JSON_COMPACT | JSON_ENSURE_ASCII | JSON_PRESERVE_ORDER);
    if (inner == NULL) {
        fail(err, errlen, "body cannot be encoded");
        return NULL;
    }
    size_t ilen = strlen(inner);
    if (memchr(inner, 0x7f, ilen) != NULL) {
        /* jansson leaves DEL raw; a record holds no control character.  A
         * DEL can only be inside a string, where \u007f means the same. */
        char *esc = malloc(ilen * 6 + 1);
        size_t o = 0;
        if (esc == NULL) {
            free(inner);
            fail(err, errlen, "out of memory");
            return NULL;
        }
        for (size_t i = 0; i < ilen; i++) {
            if (inner[i] == 0x7f) {
                memcpy(esc + o, "\\u007f", 6);
                o += 6;
            } else {
                esc[o++] = inner[i];
            }
        }
        esc[o] = '\0';
        free(inner);
        inner = esc;
        ilen = o;
    }
    *len = ilen;
    return inner;
}

/* Seals body (jansson's encoding of it) as the next record. */
static uint64_t seal(struct audit_log *l, json_t *body, const struct packet_ref *pk, char *err, size_t errlen)
{
    size_t ilen = 0;
    if (seal_begin(l, err, errlen) != 0)
        return 0;
    if (pk != NULL && (json_object_set_new(body, "packet", json_string(pk->hex)) != 0 ||
                       json_object_set_new(body, "packet_at", json_string(pk->at)) != 0)) {
        fail(err, errlen, "out of memory");
        return 0;
    }
    char *inner = encode_body(body, &ilen, err, errlen);
    if (inner == NULL)
        return 0;
    uint64_t seq = seal_line(l, inner, ilen, NULL, err, errlen);
    int saved = errno;
    free(inner);
    errno = saved;
    return seq;
}

/* The checks of a parsed body: an object, none of the writer's names or types. */
static int admit_body(json_t *body, char *err, size_t errlen)
{
    if (!json_is_object(body))
        return refuse(err, errlen, "a record body must be a JSON object");
    for (size_t i = 0; i < sizeof(reserved) / sizeof(reserved[0]); i++)
        if (json_object_get(body, reserved[i]) != NULL)
            return refuse(err, errlen, "a record body may not set \"%s\"", reserved[i]);
    const char *type = json_string_value(json_object_get(body, "type"));
    for (size_t i = 0; type != NULL && i < sizeof(own_types) / sizeof(own_types[0]); i++)
        if (strcmp(type, own_types[i]) == 0)
            return refuse(err, errlen, "record type \"%s\" is the writer's own", type);
    return 0;
}

static int packet_stored(const struct audit_log *l, const void *packet, size_t packet_len)
{
    return packet != NULL && l->cfg.packets && packet_len <= l->cfg.packet_max_bytes;
}

/* Before a record: rotation, and the packet stored (*pk = ref) or not
 * (NULL). */
static int before_record(struct audit_log *l, const void *packet, size_t packet_len, struct packet_ref *ref,
                         const struct packet_ref **pk, char *err, size_t errlen)
{
    *pk = NULL;
    if ((l->file_bytes >= l->cfg.rotate_bytes ||
         (l->cfg.rotate_seconds && (uint64_t)(time(NULL) - l->file_started) >= l->cfg.rotate_seconds)) &&
        l->file_bytes > 0) {
        /* a torn line is ended, and repaired, in the file it is in */
        if (end_torn(l, err, errlen) != 0 || sync_files(l, err, errlen) != 0 || open_log_file(l, l->seq + 1, 1, err, errlen) != 0)
            return -1;
    }
    if (packet_stored(l, packet, packet_len)) {
        if (store_packet(l, packet, packet_len, ref, err, errlen) != 0)
            return -1;
        *pk = ref;
    }
    return 0;
}

/* After a record: a checkpoint when one is due.  One that fails is tried
 * again after the next record; the record itself is written either way. */
static uint64_t after_record(struct audit_log *l, uint64_t seq)
{
    if (seq && l->cfg.checkpoint_records && l->since_checkpoint >= l->cfg.checkpoint_records) {
        char cerr[256];
        (void)checkpoint(l, cerr, sizeof(cerr));
    }
    return seq;
}

uint64_t audit_log_append(struct audit_log *l, json_t *body, const void *packet, size_t packet_len, char *err, size_t errlen)
{
    struct packet_ref ref;
    const struct packet_ref *pk;

    if (admit_body(body, err, errlen) != 0 || before_record(l, packet, packet_len, &ref, &pk, err, errlen) != 0)
        return 0;
    return after_record(l, seal(l, body, pk, err, errlen));
}

/* json_scan's check of each top-level member: bodies with the writer's
 * names or types take the slow path, which refuses them. */
static int fast_member(void *arg, const char *key, size_t key_len, const char *value, size_t value_len)
{
    (void)arg;
    if (key_len < 3 || key_len > 9)
        return 0; /* no name of the writer's is shorter or longer */
    for (size_t i = 0; i < sizeof(reserved) / sizeof(reserved[0]); i++)
        if (reserved[i][0] == key[0] && strlen(reserved[i]) == key_len && memcmp(reserved[i], key, key_len) == 0)
            return -1;
    if (key_len != 4 || memcmp(key, "type", 4) != 0 || value[0] != '"')
        return 0;
    if (memchr(value, '\\', value_len) != NULL)
        return -1; /* jansson decodes it and compares */
    for (size_t i = 0; i < sizeof(own_types) / sizeof(own_types[0]); i++)
        if (strlen(own_types[i]) == value_len - 2 && memcmp(own_types[i], value + 1, value_len - 2) == 0)
            return -1;
    return 0;
}

static uint64_t append_fast(struct audit_log *l, const char *body, size_t body_len, const void *packet, size_t packet_len,
                            char *err, size_t errlen)
{
    struct packet_ref ref;
    const struct packet_ref *pk;

    if (before_record(l, packet, packet_len, &ref, &pk, err, errlen) != 0 || seal_begin(l, err, errlen) != 0)
        return 0;
    return after_record(l, seal_line(l, body, body_len, pk, err, errlen));
}

static uint64_t append_slow(struct audit_log *l, const char *body, size_t body_len, const void *packet, size_t packet_len,
                            char *err, size_t errlen)
{
    json_error_t jerr;
    json_t *j = json_loadb(body, body_len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
    if (j == NULL) {
        refuse(err, errlen, "body is not JSON: %s", jerr.text);
        return 0;
    }
    uint64_t seq = audit_log_append(l, j, packet, packet_len, err, errlen);
    int saved = errno;
    json_decref(j);
    errno = saved;
    return seq;
}

uint64_t audit_log_append_text(struct audit_log *l, const char *body, size_t body_len, const void *packet, size_t packet_len,
                               char *err, size_t errlen)
{
    if (body_size(body_len, packet_stored(l, packet, packet_len)) <= MAX_BODY &&
        audit_json_scan(body, body_len, fast_member, NULL) == 0)
        return append_fast(l, body, body_len, packet, packet_len, err, errlen);
    return append_slow(l, body, body_len, packet, packet_len, err, errlen);
}

int audit_log_write(struct audit_log *l, char *err, size_t errlen)
{
    return flush_lines(l, err, errlen);
}

/*
 * Writes and syncs what was appended.  A write that failed since the last
 * audit_log_sync makes it fail, and stays remembered: only audit_log_sync,
 * the writer's commit of a batch, forgets it (a rotation or a checkpoint in
 * the middle of a batch must not, or the batch's rolled-back records would
 * be acknowledged).
 */
static int sync_files(struct audit_log *l, char *err, size_t errlen)
{
    if (flush_lines(l, err, errlen) != 0)
        return -1;
    if (l->write_failed)
        return fail(err, errlen, "append to the audit log: %s", strerror(l->write_failed));
    /* the packets first: a record is acknowledged only with its packet durable */
    if (l->pack_dirty) {
        if (fdatasync(l->pack_fd) != 0)
            return fail(err, errlen, "sync the packets: %s", strerror(errno));
        l->pack_dirty = 0;
    }
    if (!l->dirty)
        return 0;
    /* checkpoints.log only changes with a checkpoint: sync it only then */
    if (fdatasync(l->fd) != 0 || (l->ckpt_dirty && fdatasync(l->ckpt_fd) != 0))
        return fail(err, errlen, "fdatasync the audit log: %s", strerror(errno));
    l->dirty = 0;
    l->ckpt_dirty = 0;
    return 0;
}

int audit_log_sync(struct audit_log *l, char *err, size_t errlen)
{
    int rc = sync_files(l, err, errlen);
    /* the batch is committed, or reported failed as a whole: either way
     * the failure has been told */
    l->write_failed = 0;
    return rc;
}

/* Packs whose last packet is older than the retention go whole (never the
 * current log file's). */
static void expire_packs(struct audit_log *l, time_t now)
{
    char current[40];
    int fd = openat(l->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    struct dirent *de;
    if (d == NULL) {
        if (fd >= 0)
            close(fd);
        return;
    }
    if (pack_name(current, sizeof(current), l->file_first_seq) != 0)
        current[0] = '\0';
    while ((de = readdir(d)) != NULL) {
        struct stat st;
        size_t n = strlen(de->d_name);
        if (n < 6 || strncmp(de->d_name, "audit-", 6) != 0 || strcmp(de->d_name + n - 5, ".pack") != 0 ||
            strcmp(de->d_name, current) == 0)
            continue;
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
            (uint64_t)(now - st.st_mtime) > l->cfg.packet_retention_s) {
            int pfd = openat(dirfd(d), de->d_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
            if (pfd >= 0) { /* chattr -a first, where it was set */
                int flags = 0;
                if (ioctl(pfd, FS_IOC_GETFLAGS, &flags) == 0 && (flags & FS_APPEND_FL)) {
                    flags &= ~FS_APPEND_FL;
                    (void)ioctl(pfd, FS_IOC_SETFLAGS, &flags);
                }
                close(pfd);
            }
            unlinkat(dirfd(d), de->d_name, 0);
        }
    }
    closedir(d);
}

static void expire_packets(struct audit_log *l, time_t now)
{
    if (!l->cfg.packet_retention_s)
        return;
    expire_packs(l, now);
    int pfd = openat(l->dirfd, PACKETS_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = pfd >= 0 ? fdopendir(pfd) : NULL;
    struct dirent *de;
    if (d == NULL) {
        if (pfd >= 0)
            close(pfd);
        return;
    }
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.' || strlen(de->d_name) != 2)
            continue;
        int sfd = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        DIR *sd = sfd >= 0 ? fdopendir(sfd) : NULL;
        struct dirent *pe;
        if (sd == NULL) {
            if (sfd >= 0)
                close(sfd);
            continue;
        }
        while ((pe = readdir(sd)) != NULL) {
            struct stat st;
            if (pe->d_name[0] != '.' && fstatat(dirfd(sd), pe->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
                (uint64_t)(now - st.st_mtime) > l->cfg.packet_retention_s)
                unlinkat(dirfd(sd), pe->d_name, 0);
        }
        closedir(sd);
    }
    closedir(d);
}

int audit_log_tick(struct audit_log *l, time_t now, char *err, size_t errlen)
{
    static time_t last_expiry;
    if (l->cfg.epoch_seconds && (uint64_t)(now - l->epoch_started) >= l->cfg.epoch_seconds && ratchet(l, err, errlen) != 0)
        return -1;
    if (l->since_checkpoint > 0 && l->cfg.checkpoint_seconds && (uint64_t)(now - l->last_checkpoint) >= l->cfg.checkpoint_seconds) {
        if (checkpoint(l, err, errlen) != 0 || sync_files(l, err, errlen) != 0)
            return -1;
    }
    if (now - last_expiry >= 3600) {
        last_expiry = now;
        expire_packets(l, now);
    }
    return 0;
}

/* ---- open / close --------------------------------------------------------------------- */

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

int audit_log_open(struct audit_log *l, const char *dir, const struct audit_config *cfg, char *err, size_t errlen)
{
    char *line = NULL, *frag = NULL;
    size_t line_len = 0, torn = 0;
    uint8_t torn_hash[AUDIT_HASH_LEN];
    int adopt = 0;

    memset(l, 0, sizeof(*l));
    l->cfg = *cfg;
    l->fd = l->ckpt_fd = l->pack_fd = l->state_fd = -1;
    l->wcap = WBUF_CAP;
    if ((l->wbuf = malloc(l->wcap)) == NULL || (l->wmarks = calloc(WMARKS_MAX, sizeof(*l->wmarks))) == NULL) {
        free(l->wbuf);
        return fail(err, errlen, "out of memory");
    }
    l->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (l->dirfd < 0) {
        free(l->wbuf);
        free(l->wmarks);
        return fail(err, errlen, "open %s: %s", dir, strerror(errno));
    }
    if (load_state(l, err, errlen) != 0)
        goto fail;
    {
        int fd = openat(l->dirfd, SIGNING_FILE, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;
        l->signing = f ? PEM_read_PrivateKey(f, NULL, NULL, NULL) : NULL;
        if (f)
            fclose(f);
        else if (fd >= 0)
            close(fd);
        if (l->signing == NULL || EVP_PKEY_get_id(l->signing) != EVP_PKEY_ED25519) {
            fail(err, errlen, "cannot read the Ed25519 key %s", SIGNING_FILE);
            goto fail;
        }
    }
    l->ckpt_fd = openat(l->dirfd, CHECKPOINTS_FILE, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (l->ckpt_fd < 0) {
        fail(err, errlen, "open %s: %s", CHECKPOINTS_FILE, strerror(errno));
        goto fail;
    }
    if ((line = malloc(AUDIT_MAX_LINE + 1)) == NULL || (frag = malloc(AUDIT_MAX_LINE + 1)) == NULL) {
        fail(err, errlen, "out of memory");
        goto fail;
    }

    /* seq and prev come from the log itself: the last complete line of the
     * newest file, or of the one before it when a crash left the newest
     * with none */
    uint64_t newest = newest_log(l->dirfd, UINT64_MAX), first = newest;
    int found = 0;
    while (first > 0 && !found) {
        size_t t = 0;
        uint8_t th[AUDIT_HASH_LEN];
        int rc = read_tail(l->dirfd, first, line, AUDIT_MAX_LINE + 1, &line_len, &t, th, first == newest ? frag : line,
                           first == newest ? AUDIT_MAX_LINE + 1 : 0);
        if (rc < 0) {
            fail(err, errlen, "cannot read the tail of audit-%016llu.log", (unsigned long long)first);
            goto fail;
        }
        if (first == newest) {
            torn = t;
            memcpy(torn_hash, th, sizeof(th));
        }
        found = rc == 1;
        if (!found)
            first = newest_log(l->dirfd, first);
    }
    if (found) {
        if (line_seq(line, &l->seq) != 0) {
            fail(err, errlen, "the last audit record is not a record");
            goto fail;
        }
        audit_sha256(line, line_len, l->prev);
    }
    if (torn > 0 && fragment_is_next_record(frag, torn, l->seq, l->prev)) {
        /* whole but for its newline: it is the last record */
        adopt = 1;
        memcpy(line, frag, torn + 1);
        line_len = torn;
        l->seq++;
        audit_sha256(line, line_len, l->prev);
        found = 1;
        torn = 0;
    }
    /* the epoch the log is in: normally the state file's, which is saved
     * before a new key is used; never go back to an earlier one */
    uint64_t log_epoch = 0;
    if (found && line_epoch(line, &log_epoch) == 0 && log_epoch > l->epoch) {
        if (log_epoch - l->epoch > 1000000) {
            fail(err, errlen, "the log is at epoch %llu, the state file at %llu", (unsigned long long)log_epoch,
                 (unsigned long long)l->epoch);
            goto fail;
        }
        while (l->epoch < log_epoch) {
            audit_ratchet(l->key);
            l->epoch++;
        }
        if (save_state(l, err, errlen) != 0)
            goto fail;
    }
    if (audit_mac_set_key(&l->mac, l->key) != 0) {
        fail(err, errlen, "cannot set up HMAC-SHA256");
        goto fail;
    }
    if (newest == 0) {
        if (open_log_file(l, 1, 1, err, errlen) != 0)
            goto fail;
    } else if (open_log_file(l, newest, 0, err, errlen) != 0) {
        goto fail;
    }
    l->last_checkpoint = time(NULL);
    if (adopt) {
        l->torn_newline = 1; /* seal() ends it first */
        l->dirty = 1;
    }
    if (torn > 0) {
        /* a crash left a torn line: end it and say so in the chain */
        l->torn_pending = torn;
        l->torn_newline = 1;
        memcpy(l->torn_hash, torn_hash, sizeof(torn_hash));
        if (finish_torn(l, err, errlen) != 0)
            goto fail;
    }
    json_t *start = json_pack("{s:s, s:I}", "type", "start", "pid", (json_int_t)getpid());
    uint64_t s = start ? seal(l, start, NULL, err, errlen) : 0;
    json_decref(start);
    if (s == 0 || audit_log_sync(l, err, errlen) != 0)
        goto fail;
    free(line);
    free(frag);
    return 0;
fail:
    free(line);
    free(frag);
    release(l);
    return -1;
}

void audit_log_close(struct audit_log *l)
{
    char err[256];
    if (l->since_checkpoint > 0)
        (void)checkpoint(l, err, sizeof(err));
    (void)audit_log_sync(l, err, sizeof(err));
    release(l);
}
