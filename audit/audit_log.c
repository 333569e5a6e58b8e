/*
 * audit_log.c - sealing, durability and upkeep of the audit log (FORMAT.md).
 *
 * Every line is built here from a body the writer re-encodes itself, so a
 * line is always one line of ASCII JSON whatever the gateway sent.  seq and
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

#define STATE_FILE          "state"
#define STATE_TMP           "state.tmp"
#define SIGNING_FILE        "signing.key"
#define VERIFIER_FILE       "verifier.key"
#define CHECKPOINTS_FILE    "checkpoints.log"
#define PACKETS_DIR         "packets"
#define MAX_PENDING_PACKETS 1024

static int pending_packets[MAX_PENDING_PACKETS];
static size_t npending_packets;

__attribute__((format(printf, 3, 4))) static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

void audit_config_defaults(struct audit_config *c)
{
    c->epoch_records = 1000;
    c->epoch_seconds = 300;
    c->checkpoint_records = 100;
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

static int save_state(struct audit_log *l, char *err, size_t errlen)
{
    char text[256], hex[AUDIT_HEX_LEN + 1];
    audit_hex(l->key, AUDIT_KEY_LEN, hex);
    int n = snprintf(text, sizeof(text), "moat-audit-state v1\nepoch %llu\nkey %s\nepoch_started %lld\n",
                     (unsigned long long)l->epoch, hex, (long long)l->epoch_started);
    OPENSSL_cleanse(hex, sizeof(hex));
    int rc = write_file_at(l->dirfd, STATE_TMP, text, (size_t)n, err, errlen);
    OPENSSL_cleanse(text, sizeof(text));
    if (rc != 0)
        return -1;
    if (renameat(l->dirfd, STATE_TMP, l->dirfd, STATE_FILE) != 0 || fsync(l->dirfd) != 0)
        return fail(err, errlen, "replace state: %s", strerror(errno));
    return 0;
}

static int load_state(struct audit_log *l, char *err, size_t errlen)
{
    char text[512], hex[AUDIT_HEX_LEN + 1];
    unsigned long long epoch;
    long long started;
    int fd = openat(l->dirfd, STATE_FILE, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return fail(err, errlen, "open state: %s (run moat-audit init first)", strerror(errno));
    ssize_t n = read(fd, text, sizeof(text) - 1);
    close(fd);
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

static void set_append_only(struct audit_log *l)
{
    int flags = 0;
    l->appended_ok = 0;
    if (!l->cfg.append_only)
        return;
    if (ioctl(l->fd, FS_IOC_GETFLAGS, &flags) == 0) {
        flags |= FS_APPEND_FL;
        l->appended_ok = ioctl(l->fd, FS_IOC_SETFLAGS, &flags) == 0;
    }
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

static const char *const reserved[] = {"seq", "time", "epoch", "prev", "mac", "packet"};

static void now_iso(char *buf, size_t size)
{
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(buf, size, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + n, size - n, ".%03ldZ", ts.tv_nsec / 1000000);
}

static int ratchet(struct audit_log *l, char *err, size_t errlen)
{
    uint8_t old[AUDIT_KEY_LEN];
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
    OPENSSL_cleanse(old, sizeof(old));
    return 0;
}

static int store_packet(struct audit_log *l, const void *packet, size_t len, char hex[AUDIT_HEX_LEN + 1], char *err, size_t errlen)
{
    uint8_t h[AUDIT_HASH_LEN];
    char sub[32], path[160];
    audit_sha256(packet, len, h);
    audit_hex(h, sizeof(h), hex);
    snprintf(sub, sizeof(sub), PACKETS_DIR "/%.2s", hex);
    snprintf(path, sizeof(path), "%s/%s.json", sub, hex);
    int fd = openat(l->dirfd, path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 && errno == ENOENT) {
        /* the fan-out directories are made on first use only */
        if (mkdirat(l->dirfd, PACKETS_DIR, 0700) != 0 && errno != EEXIST)
            return fail(err, errlen, "mkdir packets: %s", strerror(errno));
        if (mkdirat(l->dirfd, sub, 0700) != 0 && errno != EEXIST)
            return fail(err, errlen, "mkdir %s: %s", sub, strerror(errno));
        fd = openat(l->dirfd, path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    }
    if (fd < 0) {
        if (errno == EEXIST)
            return 0; /* same content, already stored */
        return fail(err, errlen, "create packet: %s", strerror(errno));
    }
    if (write_all(fd, packet, len, NULL) != 0) {
        int saved = errno;
        close(fd);
        unlinkat(l->dirfd, path, 0);
        return fail(err, errlen, "write packet: %s", strerror(saved));
    }
    if (npending_packets < MAX_PENDING_PACKETS) {
        pending_packets[npending_packets++] = fd; /* made durable with the batch */
    } else if (fdatasync(fd) != 0) {
        int saved = errno;
        close(fd);
        return fail(err, errlen, "sync packet: %s", strerror(saved));
    } else {
        close(fd);
    }
    return 0;
}

static uint64_t seal(struct audit_log *l, json_t *body, const char *packet_hex, char *err, size_t errlen);

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
    if (seq == 0)
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

/* Builds and appends one line; advances seq/prev only when all of it is written. */
static uint64_t seal(struct audit_log *l, json_t *body, const char *packet_hex, char *err, size_t errlen)
{
    char when[40], prevhex[AUDIT_HEX_LEN + 1], machex[AUDIT_HEX_LEN + 1];
    uint8_t mac[AUDIT_HASH_LEN];

    if (l->torn_pending) {
        if (finish_torn(l, err, errlen) != 0)
            return 0;
    } else if (l->torn_newline) {
        /* the last record is whole but still lacks its newline */
        char nl = '\n';
        if (write_all(l->fd, &nl, 1, NULL) != 0) {
            fail(err, errlen, "end the last audit line: %s", strerror(errno));
            return 0;
        }
        l->torn_newline = 0;
        l->file_bytes++;
    }

    if (l->cfg.epoch_records && l->epoch_records >= l->cfg.epoch_records && ratchet(l, err, errlen) != 0)
        return 0;
    if (packet_hex != NULL && json_object_set_new(body, "packet", json_string(packet_hex)) != 0) {
        fail(err, errlen, "out of memory");
        return 0;
    }
    char *inner = json_dumps(body, JSON_COMPACT | JSON_ENSURE_ASCII | JSON_PRESERVE_ORDER);
    if (inner == NULL) {
        fail(err, errlen, "body cannot be encoded");
        return 0;
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
            return 0;
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
    now_iso(when, sizeof(when));
    audit_hex(l->prev, sizeof(l->prev), prevhex);
    size_t cap = ilen + 256;
    char *line = malloc(cap);
    if (line == NULL || ilen < 2 || ilen > AUDIT_MAX_LINE - 256) {
        free(line);
        free(inner);
        fail(err, errlen, "record too large");
        return 0;
    }
    int n =
        snprintf(line, cap, "{\"seq\":%llu,\"time\":\"%s\",\"epoch\":%llu,\"prev\":\"%s\"%s%.*s", (unsigned long long)(l->seq + 1),
                 when, (unsigned long long)l->epoch, prevhex, ilen > 2 ? "," : "", (int)(ilen - 2), inner + 1);
    free(inner);
    if (audit_hmac(l->key, line, (size_t)n, mac) != 0) {
        free(line);
        fail(err, errlen, "HMAC failed");
        return 0;
    }
    audit_hex(mac, sizeof(mac), machex);
    n += snprintf(line + n, cap - (size_t)n, ",\"mac\":\"%s\"}", machex);
    uint8_t h[AUDIT_HASH_LEN];
    audit_sha256(line, (size_t)n, h);
    line[n] = '\n';

    size_t done = 0;
    if (write_all(l->fd, line, (size_t)n + 1, &done) != 0) {
        int saved = errno;
        if (done == (size_t)n) {
            /* the whole record but its newline made it: it is a record (a
             * restart adopts it too), ended before the next one; it is not
             * acknowledged, as it was not made durable */
            l->torn_newline = 1;
            l->seq++;
            memcpy(l->prev, h, sizeof(h));
            l->file_bytes += done;
            l->epoch_records++;
            l->since_checkpoint++;
            l->dirty = 1;
        } else if (done > 0) {
            /* a fragment is on disk: it is ended and marked by a repair
             * record before the next record (finish_torn) */
            audit_sha256(line, done, l->torn_hash);
            l->torn_pending = done;
            l->torn_newline = 1;
            l->file_bytes += done;
        }
        free(line);
        fail(err, errlen, "append to the audit log: %s", strerror(saved));
        return 0;
    }
    free(line);
    l->seq++;
    memcpy(l->prev, h, sizeof(h));
    l->file_bytes += (size_t)n + 1;
    l->epoch_records++;
    l->since_checkpoint++;
    l->dirty = 1;
    return l->seq;
}

uint64_t audit_log_append(struct audit_log *l, json_t *body, const void *packet, size_t packet_len, char *err, size_t errlen)
{
    char packet_hex[AUDIT_HEX_LEN + 1];

    if (!json_is_object(body)) {
        fail(err, errlen, "a record body must be a JSON object");
        return 0;
    }
    for (size_t i = 0; i < sizeof(reserved) / sizeof(reserved[0]); i++)
        if (json_object_get(body, reserved[i]) != NULL) {
            fail(err, errlen, "a record body may not set \"%s\"", reserved[i]);
            return 0;
        }
    const char *type = json_string_value(json_object_get(body, "type"));
    if (type != NULL && (strcmp(type, "checkpoint") == 0 || strcmp(type, "repair") == 0 || strcmp(type, "start") == 0)) {
        fail(err, errlen, "record type \"%s\" is the writer's own", type);
        return 0;
    }
    if ((l->file_bytes >= l->cfg.rotate_bytes ||
         (l->cfg.rotate_seconds && (uint64_t)(time(NULL) - l->file_started) >= l->cfg.rotate_seconds)) &&
        l->file_bytes > 0) {
        if (audit_log_sync(l, err, errlen) != 0 || open_log_file(l, l->seq + 1, 1, err, errlen) != 0)
            return 0;
    }
    int with_packet = packet != NULL && l->cfg.packets && packet_len <= l->cfg.packet_max_bytes;
    if (with_packet && store_packet(l, packet, packet_len, packet_hex, err, errlen) != 0)
        return 0;
    uint64_t seq = seal(l, body, with_packet ? packet_hex : NULL, err, errlen);
    /* a checkpoint that fails is tried again after the next record; the
     * record itself is written either way */
    if (seq && l->cfg.checkpoint_records && l->since_checkpoint >= l->cfg.checkpoint_records) {
        char cerr[256];
        (void)checkpoint(l, cerr, sizeof(cerr));
    }
    return seq;
}

int audit_log_sync(struct audit_log *l, char *err, size_t errlen)
{
    int rc = 0;
    for (size_t i = 0; i < npending_packets; i++) {
        if (fdatasync(pending_packets[i]) != 0 && rc == 0)
            rc = fail(err, errlen, "sync packet: %s", strerror(errno));
        close(pending_packets[i]);
    }
    npending_packets = 0;
    if (rc != 0)
        return -1;
    if (!l->dirty)
        return 0;
    /* checkpoints.log only changes with a checkpoint: sync it only then */
    if (fdatasync(l->fd) != 0 || (l->ckpt_dirty && fdatasync(l->ckpt_fd) != 0))
        return fail(err, errlen, "fdatasync the audit log: %s", strerror(errno));
    l->dirty = 0;
    l->ckpt_dirty = 0;
    return 0;
}

static void expire_packets(struct audit_log *l, time_t now)
{
    if (!l->cfg.packet_retention_s)
        return;
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
        if (checkpoint(l, err, errlen) != 0 || audit_log_sync(l, err, errlen) != 0)
            return -1;
    }
    if (now - last_expiry >= 3600) {
        last_expiry = now;
        expire_packets(l, now);
    }
    return 0;
}

/* ---- open / close --------------------------------------------------------------------- */

int audit_log_open(struct audit_log *l, const char *dir, const struct audit_config *cfg, char *err, size_t errlen)
{
    char *line = NULL, *frag = NULL;
    size_t line_len = 0, torn = 0;
    uint8_t torn_hash[AUDIT_HASH_LEN];
    int adopt = 0;

    memset(l, 0, sizeof(*l));
    l->cfg = *cfg;
    l->fd = l->ckpt_fd = -1;
    l->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (l->dirfd < 0)
        return fail(err, errlen, "open %s: %s", dir, strerror(errno));
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
    if (l->signing)
        EVP_PKEY_free(l->signing);
    if (l->fd >= 0)
        close(l->fd);
    if (l->ckpt_fd >= 0)
        close(l->ckpt_fd);
    close(l->dirfd);
    OPENSSL_cleanse(l->key, sizeof(l->key));
    return -1;
}

void audit_log_close(struct audit_log *l)
{
    char err[256];
    if (l->since_checkpoint > 0)
        (void)checkpoint(l, err, sizeof(err));
    (void)audit_log_sync(l, err, sizeof(err));
    EVP_PKEY_free(l->signing);
    close(l->fd);
    close(l->ckpt_fd);
    close(l->dirfd);
    OPENSSL_cleanse(l->key, sizeof(l->key));
}
