/*
 * test_audit_log.c - the audit writer's core (audit/audit_log.c and the
 * files beside it) driven directly, and the verifier (audit_verify.c)
 * against the attacks of tests/SECURITY-CHECKS.md A1-A8, each checked by the
 * exact record it reports and the reason text.
 *
 * Every test makes its own directory under $TMPDIR (or /tmp) with small
 * epoch, checkpoint and rotation settings.  The log files get chattr +a
 * (we run as root, so it works where the filesystem supports it); the
 * tests clear the flag with FS_IOC_SETFLAGS before they tamper or delete.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <linux/fs.h>
#include <pwd.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "audit_crypto.h"
#include "audit_index.h"
#include "audit_log.h"
#include "audit_verify.h"
#include "json_scan.h"
#include "moat_hex.h"

struct fixture {
    char root[256]; /* mkdtemp, mode 0755 */
    char dir[300];  /* root/audit */
    uint8_t k0[AUDIT_KEY_LEN], pub[AUDIT_PUB_LEN];
    struct audit_config cfg;
    struct audit_log log;
    int open;
    struct audit_verify_result r;
};

/* ---- helpers ------------------------------------------------------------------ */

static int clear_flags_cb(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    if (type == FTW_F) {
        int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        int flags = 0;
        if (fd >= 0) {
            if (ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0 && (flags & (FS_APPEND_FL | FS_IMMUTABLE_FL))) {
                flags &= ~(FS_APPEND_FL | FS_IMMUTABLE_FL);
                (void)ioctl(fd, FS_IOC_SETFLAGS, &flags);
            }
            close(fd);
        }
    }
    return 0;
}

static int rm_cb(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    return type == FTW_DP ? rmdir(path) : unlink(path);
}

static void clear_append(const char *path)
{
    clear_flags_cb(path, NULL, FTW_F, NULL);
}

static int file_flags(const char *path, int *flags)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = ioctl(fd, FS_IOC_GETFLAGS, flags);
    close(fd);
    return rc;
}

static void test_config(struct audit_config *c)
{
    audit_config_defaults(c);
    c->epoch_records = 5;
    c->epoch_seconds = 100000;
    c->checkpoint_records = 10;
    c->checkpoint_seconds = 100000;
    c->checkpoint_delay_ms = 3600000; /* no checkpoint by the clock, but where a test asks */
    c->rotate_bytes = 1ull << 30;
    c->rotate_seconds = 0;
    c->packet_retention_s = 0;
}

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    const char *tmp = getenv("TMPDIR");
    char err[512];
    snprintf(f->root, sizeof(f->root), "%s/moat-audit-test-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    assert_non_null(mkdtemp(f->root));
    chmod(f->root, 0755);
    snprintf(f->dir, sizeof(f->dir), "%s/audit", f->root);
    struct passwd *pw = getpwnam("moat-audit");
    assert_int_equal(audit_init_dir(f->dir, pw ? pw->pw_uid : 0, pw ? pw->pw_gid : 0, err, sizeof(err)), 0);
    char key[400];
    snprintf(key, sizeof(key), "%s/verifier.key", f->dir);
    assert_int_equal(audit_read_verifier_key(key, f->k0, f->pub, err, sizeof(err)), 0);
    test_config(&f->cfg);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    if (f->open)
        audit_log_close(&f->log);
    if (getenv("MOAT_AUDIT_KEEP") != NULL) { /* for debugging a failure */
        print_message("    kept %s\n", f->root);
    } else {
        nftw(f->root, clear_flags_cb, 16, FTW_PHYS);
        nftw(f->root, rm_cb, 16, FTW_PHYS | FTW_DEPTH);
    }
    free(f);
    return 0;
}

static void log_open(struct fixture *f)
{
    char err[512] = "";
    int rc = audit_log_open(&f->log, f->dir, &f->cfg, err, sizeof(err));
    if (rc != 0)
        fail_msg("audit_log_open: %s", err);
    f->open = 1;
}

static void log_close(struct fixture *f)
{
    audit_log_close(&f->log);
    f->open = 0;
}

/* What a kill -9 leaves: no final checkpoint, nothing more written. */
static void log_crash(struct fixture *f)
{
    EVP_PKEY_free(f->log.signing);
    audit_mac_free(&f->log.mac);
    free(f->log.wbuf); /* lines sealed but not yet written are lost, as in a crash */
    free(f->log.wmarks);
    close(f->log.fd);
    close(f->log.ckpt_fd);
    if (f->log.pack_fd >= 0)
        close(f->log.pack_fd);
    if (f->log.state_fd >= 0)
        close(f->log.state_fd);
    close(f->log.dirfd);
    f->open = 0;
}

static uint64_t append_req(struct fixture *f, int i, const char *tenant)
{
    char rid[32], err[512] = "";
    snprintf(rid, sizeof(rid), "req-%d", i);
    json_t *b = json_pack("{s:s, s:s, s:s, s:s, s:s, s:i}", "type", "request", "request_id", rid, "tenant", tenant, "decision",
                          i % 3 ? "allowed" : "denied", "endpoint", "execute", "status", i % 3 ? 200 : 429);
    uint64_t seq = audit_log_append(&f->log, b, NULL, 0, err, sizeof(err));
    json_decref(b);
    if (seq == 0)
        fail_msg("audit_log_append: %s", err);
    return seq;
}

static void append_many(struct fixture *f, int n)
{
    char err[512];
    for (int i = 0; i < n; i++)
        append_req(f, i, "acme");
    assert_int_equal(audit_log_sync(&f->log, err, sizeof(err)), 0);
}

static int verify(struct fixture *f, const char *checkpoints)
{
    return audit_verify_dir(f->dir, f->k0, f->pub, checkpoints, &f->r, NULL, NULL);
}

static void expect_ok(struct fixture *f)
{
    if (verify(f, NULL) != 0)
        fail_msg("verify failed: %s", f->r.problem);
}

static void expect_bad(struct fixture *f, const char *checkpoints, uint64_t bad_seq, size_t bad_line, const char *needle)
{
    assert_int_not_equal(verify(f, checkpoints), 0);
    print_message("    verify: %s (bad_seq %llu, line %zu)\n", f->r.problem, (unsigned long long)f->r.bad_seq, f->r.bad_line);
    if (strstr(f->r.problem, needle) == NULL)
        fail_msg("problem \"%s\" lacks \"%s\"", f->r.problem, needle);
    if (bad_seq != (uint64_t)-1)
        assert_int_equal(f->r.bad_seq, bad_seq);
    if (bad_line != (size_t)-1)
        assert_int_equal(f->r.bad_line, bad_line);
}

static void first_log(struct fixture *f, char *path, size_t size)
{
    snprintf(path, size, "%s/audit-%016llu.log", f->dir, 1ull);
}

/* The lines of a file (without newlines); *n of them.  A last line without
 * a newline is kept. */
static char **read_lines(const char *path, size_t *n)
{
    FILE *fp = fopen(path, "re");
    char **lines = NULL, *buf = NULL;
    size_t cap = 0;
    ssize_t len;
    *n = 0;
    assert_non_null(fp);
    while ((len = getline(&buf, &cap, fp)) >= 0) {
        if (len > 0 && buf[len - 1] == '\n')
            buf[len - 1] = '\0';
        char **g = realloc(lines, (*n + 1) * sizeof(char *));
        assert_non_null(g);
        lines = g;
        lines[(*n)++] = strdup(buf);
    }
    free(buf);
    fclose(fp);
    return lines;
}

static void write_lines(const char *path, char **lines, size_t n)
{
    clear_append(path);
    FILE *fp = fopen(path, "we");
    assert_non_null(fp);
    for (size_t i = 0; i < n; i++)
        fprintf(fp, "%s\n", lines[i]);
    assert_int_equal(fclose(fp), 0);
}

static void free_lines(char **lines, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(lines[i]);
    free(lines);
}

/* K(epoch) from K0, as the verifier (or an attacker holding K0) derives it. */
static void key_of(const uint8_t k0[AUDIT_KEY_LEN], uint64_t epoch, uint8_t out[AUDIT_KEY_LEN])
{
    memcpy(out, k0, AUDIT_KEY_LEN);
    for (uint64_t e = 0; e < epoch; e++)
        audit_ratchet(out);
}

/* Re-seals a line: new prev (if prev != NULL) and a MAC under key, as an
 * attacker holding key would. */
static char *reseal(const char *line, const uint8_t *prev, const uint8_t key[AUDIT_KEY_LEN])
{
    char *s = strdup(line), hex[AUDIT_HEX_LEN + 1], *p;
    uint8_t mac[AUDIT_HASH_LEN];
    if (prev != NULL) {
        p = strstr(s, ",\"prev\":\"");
        assert_non_null(p);
        moat_hex_encode(prev, AUDIT_HASH_LEN, hex);
        memcpy(p + 9, hex, AUDIT_HEX_LEN);
    }
    p = strstr(s, ",\"mac\":\"");
    assert_non_null(p);
    assert_int_equal(audit_hmac(key, s, (size_t)(p - s), mac), 0);
    moat_hex_encode(mac, sizeof(mac), hex);
    memcpy(p + 8, hex, AUDIT_HEX_LEN);
    return s;
}

/* The state file's bytes, NUL-terminated; their count. */
static size_t read_state_text(struct fixture *f, char *text, size_t size)
{
    char path[400];
    snprintf(path, sizeof(path), "%s/state", f->dir);
    FILE *fp = fopen(path, "re");
    assert_non_null(fp);
    size_t n = fread(text, 1, size - 1, fp);
    fclose(fp);
    text[n] = '\0';
    return n;
}

static uint64_t read_state(struct fixture *f, uint8_t key[AUDIT_KEY_LEN])
{
    char text[512], hex[80];
    unsigned long long epoch;
    long long started;
    read_state_text(f, text, sizeof(text));
    assert_int_equal(sscanf(text, "moat-audit-state v1\nepoch %llu\nkey %79s\nepoch_started %lld\n", &epoch, hex, &started), 3);
    assert_int_equal(audit_unhex(hex, strlen(hex), key, AUDIT_KEY_LEN), 0);
    return epoch;
}

/* A trail of 30 records in one file: seq 1 is "start", checkpoints every 10. */
static void build_trail(struct fixture *f, int n)
{
    log_open(f);
    append_many(f, n);
    log_close(f);
    expect_ok(f);
}

/* ---- A1: edits, deletions, insertions, reordering --------------------------------- */

static void test_a1_flip_byte(void **state)
{
    struct fixture *f = *state;
    char path[400];
    size_t n;
    build_trail(f, 30);
    first_log(f, path, sizeof(path));
    char **orig = read_lines(path, &n);

    /* in a value: the MAC fails at exactly that record */
    char **l = read_lines(path, &n);
    char *p = strstr(l[11], "\"acme\"");
    assert_non_null(p);
    p[1] ^= 0x01;
    write_lines(path, l, n);
    expect_bad(f, NULL, 12, 12, "fails its MAC");
    free_lines(l, n);

    /* in the JSON structure: not a record, and not a torn line either */
    write_lines(path, orig, n);
    expect_ok(f);
    l = read_lines(path, &n);
    l[11][0] = '[';
    write_lines(path, l, n);
    expect_bad(f, NULL, 12, 12, "not a valid record");
    free_lines(l, n);

    /* in the MAC itself */
    write_lines(path, orig, n);
    l = read_lines(path, &n);
    p = strstr(l[11], ",\"mac\":\"") + 8;
    *p = *p == '0' ? '1' : '0';
    write_lines(path, l, n);
    expect_bad(f, NULL, 12, 12, "fails its MAC");
    free_lines(l, n);

    /* in the seq number: it no longer follows */
    write_lines(path, orig, n);
    l = read_lines(path, &n);
    assert_int_equal(strncmp(l[11], "{\"seq\":12,", 10), 0);
    l[11][8] = '3';
    write_lines(path, l, n);
    expect_bad(f, NULL, 13, 12, "missing");
    free_lines(l, n);
    free_lines(orig, n);
}

static void test_a1_delete_insert_reorder(void **state)
{
    struct fixture *f = *state;
    char path[400];
    size_t n;
    build_trail(f, 30);
    first_log(f, path, sizeof(path));
    char **orig = read_lines(path, &n);
    char **l = malloc((n + 1) * sizeof(char *));

    /* delete line 12 (seq 12): seq 13 arrives where 12 belongs */
    memcpy(l, orig, 11 * sizeof(char *));
    memcpy(l + 11, orig + 12, (n - 12) * sizeof(char *));
    write_lines(path, l, n - 1);
    expect_bad(f, NULL, 13, 12, "1 record(s) missing");

    /* insert a copy of seq 5 after seq 12 */
    memcpy(l, orig, 12 * sizeof(char *));
    l[12] = orig[4];
    memcpy(l + 13, orig + 12, (n - 12) * sizeof(char *));
    write_lines(path, l, n + 1);
    expect_bad(f, NULL, 5, 13, "inserted, repeated or reordered");

    /* insert a copy of the record right before: the same seq again */
    l[12] = orig[11];
    write_lines(path, l, n + 1);
    expect_bad(f, NULL, 12, 13, "inserted, repeated or reordered");

    /* reorder seq 12 and 13 */
    memcpy(l, orig, n * sizeof(char *));
    l[11] = orig[12];
    l[12] = orig[11];
    write_lines(path, l, n);
    expect_bad(f, NULL, 13, 12, "deleted or moved");

    /* put the original back: it verifies again */
    write_lines(path, orig, n);
    expect_ok(f);
    free(l);
    free_lines(orig, n);
}

/* ---- A2: truncation against signed checkpoints ------------------------------------- */

static void test_a2_truncate_tail(void **state)
{
    struct fixture *f = *state;
    char path[400], ckpt[400], copy[400];
    size_t n, cn;
    build_trail(f, 30);
    first_log(f, path, sizeof(path));
    snprintf(ckpt, sizeof(ckpt), "%s/checkpoints.log", f->dir);
    snprintf(copy, sizeof(copy), "%s/checkpoints-offhost.log", f->root);
    char **orig = read_lines(path, &n);
    char **corig = read_lines(ckpt, &cn);
    write_lines(copy, corig, cn);
    assert_true(cn >= 3);
    print_message("    %zu lines, %zu signed checkpoints\n", n, cn);

    /* the last 5 records gone */
    write_lines(path, orig, n - 5);
    expect_bad(f, NULL, n - 5 + 1, (size_t)-1, "the tail was truncated");
    assert_non_null(strstr(f->r.problem, "signed checkpoint"));

    /* only the final checkpoint record gone */
    write_lines(path, orig, n - 1);
    expect_bad(f, NULL, n, (size_t)-1, "without the checkpoint record");

    /* the attacker also cuts checkpoints.log to match: the local copy is
     * fooled, the copy kept elsewhere is not */
    write_lines(path, orig, 15);
    size_t keep = 0;
    for (size_t i = 0; i < cn; i++)
        if (strtoull(corig[i], NULL, 10) < 15)
            keep = i + 1;
    write_lines(ckpt, corig, keep);
    expect_ok(f);
    expect_bad(f, copy, 16, (size_t)-1, "the tail was truncated");
    assert_non_null(strstr(f->r.problem, copy));

    /* an attacker holding the writer's current key cuts the log at seq 15
     * and appends a forged tail up to the old length (MACs valid: epochs
     * may jump to the current one; no checkpoint records, as those need the
     * signing key): only the signed heads of the copy kept elsewhere show it */
    uint8_t cur[AUDIT_KEY_LEN], prev[AUDIT_HASH_LEN];
    uint64_t j = read_state(f, cur);
    char **forged = calloc(n, sizeof(char *));
    for (size_t i = 0; i < n; i++) {
        if (i < 15) {
            forged[i] = strdup(orig[i]);
        } else {
            char line[600];
            snprintf(line, sizeof(line),
                     "{\"seq\":%zu,\"time\":\"2026-11-29T16:40:45.123Z\",\"epoch\":%llu,\"prev\":\"%064d\",\"type\":\"request\","
                     "\"tenant\":\"forged\",\"decision\":\"allowed\",\"mac\":\"%064d\"}",
                     i + 1, (unsigned long long)j, 0, 0);
            forged[i] = reseal(line, prev, cur);
        }
        audit_sha256(forged[i], strlen(forged[i]), prev);
    }
    write_lines(path, forged, n);
    expect_ok(f); /* the local checkpoints.log was cut too */
    uint64_t first_ckpt_after = 0;
    for (size_t i = 0; i < cn && !first_ckpt_after; i++)
        if (strtoull(corig[i], NULL, 10) >= 16)
            first_ckpt_after = strtoull(corig[i], NULL, 10);
    expect_bad(f, copy, first_ckpt_after, first_ckpt_after, "not the record the signed checkpoint");
    free_lines(forged, n);

    write_lines(path, orig, n);
    write_lines(ckpt, corig, cn);
    expect_ok(f);
    free_lines(orig, n);
    free_lines(corig, cn);
}

static void test_a2_forged_checkpoint_line(void **state)
{
    /* a line added to checkpoints.log without the signing key is refused */
    struct fixture *f = *state;
    char ckpt[400];
    build_trail(f, 25);
    snprintf(ckpt, sizeof(ckpt), "%s/checkpoints.log", f->dir);
    size_t cn;
    char **c = read_lines(ckpt, &cn);
    /* a forged line with a bad signature */
    char forged[400];
    snprintf(forged, sizeof(forged), "%s", c[0]);
    char *sp = strrchr(forged, ' ');
    sp[1] = sp[1] == 'a' ? 'b' : 'a';
    char **l = malloc((cn + 1) * sizeof(char *));
    memcpy(l, c, cn * sizeof(char *));
    l[cn] = forged;
    write_lines(ckpt, l, cn + 1);
    expect_bad(f, NULL, (uint64_t)-1, (size_t)-1, "bad signature");
    write_lines(ckpt, c, cn);
    expect_ok(f);
    free(l);
    free_lines(c, cn);
}

/* ---- A3: re-MAC with the current epoch key --------------------------------------------- */

static void test_a3_remac_with_current_key(void **state)
{
    struct fixture *f = *state;
    char path[400];
    size_t n;
    uint8_t cur[AUDIT_KEY_LEN], derived[AUDIT_KEY_LEN], prev[AUDIT_HASH_LEN];
    build_trail(f, 40); /* epoch_records 5: about 9 epochs */
    first_log(f, path, sizeof(path));
    uint64_t j = read_state(f, cur);
    key_of(f->k0, j, derived);
    assert_memory_equal(cur, derived, AUDIT_KEY_LEN); /* the attacker's key is K(j) */
    assert_true(j >= 5);
    char **orig = read_lines(path, &n);

    /* rewrite everything: edit seq 3, re-chain, re-MAC every line with K(j) */
    char **l = calloc(n, sizeof(char *));
    memset(prev, 0, sizeof(prev));
    for (size_t i = 0; i < n; i++) {
        char *line = strdup(orig[i]);
        if (i == 2) {
            char *p = strstr(line, "\"acme\"");
            assert_non_null(p);
            memcpy(p + 1, "evil", 4);
        }
        l[i] = reseal(line, prev, cur);
        free(line);
        audit_sha256(l[i], strlen(l[i]), prev);
    }
    write_lines(path, l, n);
    char want[64];
    snprintf(want, sizeof(want), "later epoch %llu's key", (unsigned long long)j);
    expect_bad(f, NULL, 1, 1, want);
    free_lines(l, n);

    /* rewrite only from the edited record on: the first rewritten record of
     * an earlier epoch is caught */
    l = calloc(n, sizeof(char *));
    for (size_t i = 0; i < n; i++) {
        if (i < 2) {
            l[i] = strdup(orig[i]);
        } else {
            char *line = strdup(orig[i]);
            if (i == 2)
                memcpy(strstr(line, "\"acme\"") + 1, "evil", 4);
            l[i] = reseal(line, prev, cur);
            free(line);
        }
        audit_sha256(l[i], strlen(l[i]), prev);
    }
    write_lines(path, l, n);
    expect_bad(f, NULL, 3, 3, want);
    free_lines(l, n);
    free_lines(orig, n);
}

/* ---- A4: torn last line ------------------------------------------------------------------ */

static void append_raw(const char *path, const char *data)
{
    int fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC); /* +a permits appending */
    assert_true(fd >= 0);
    assert_int_equal(write(fd, data, strlen(data)), (ssize_t)strlen(data));
    close(fd);
}

static void test_a4_torn_tail_repaired(void **state)
{
    struct fixture *f = *state;
    char path[400];
    size_t n;
    log_open(f);
    append_many(f, 12);
    log_crash(f);
    expect_ok(f);
    uint64_t last = f->r.last_seq;
    first_log(f, path, sizeof(path));

    /* the crash tore the next line */
    append_raw(path, "{\"seq\":14,\"time\":\"2026-11-29T16:4");
    assert_int_not_equal(verify(f, NULL), 0);
    print_message("    verify: %s\n", f->r.problem);
    assert_true(f->r.torn_tail);
    assert_non_null(strstr(f->r.problem, "torn"));
    assert_int_equal(f->r.records, last); /* every earlier record verified */
    assert_int_equal(f->r.bad_seq, last + 1);

    /* restart: "\n" and a repair record naming it, then the chain goes on */
    log_open(f);
    append_many(f, 5);
    log_close(f);
    expect_ok(f);
    assert_int_equal(f->r.repairs, 1);
    assert_true(f->r.torn);
    assert_false(f->r.torn_tail);
    char **l = read_lines(path, &n);
    size_t k = 0;
    while (k < n && strncmp(l[k], "{\"seq\":14,\"time\":\"2026-11-29T16:4", 33) != 0)
        k++;
    assert_true(k + 1 < n);
    assert_int_equal(strlen(l[k]), 33);
    assert_non_null(strstr(l[k + 1], "\"type\":\"repair\",\"torn_bytes\":33,"));
    char expect_seq[32];
    snprintf(expect_seq, sizeof(expect_seq), "{\"seq\":%llu,", (unsigned long long)last + 1);
    assert_int_equal(strncmp(l[k + 1], expect_seq, strlen(expect_seq)), 0);
    free_lines(l, n);

    /* the torn fragment edited after the repair: the repair no longer names it */
    l = read_lines(path, &n);
    l[k][20] = 'X';
    write_lines(path, l, n);
    expect_bad(f, NULL, last + 1, k + 1, "not a repair record naming it");
    free_lines(l, n);
}

/* The newest log file's path. */
static void newest_log(struct fixture *f, char *path, size_t size)
{
    DIR *d = opendir(f->dir);
    struct dirent *de;
    unsigned long long best = 0;
    assert_non_null(d);
    while ((de = readdir(d)) != NULL) {
        unsigned long long s;
        if (sscanf(de->d_name, "audit-%16llu.log", &s) == 1 && s > best)
            best = s;
    }
    closedir(d);
    snprintf(path, size, "%s/audit-%016llu.log", f->dir, best);
}

static void test_a4_torn_tail_twice_and_new_file(void **state)
{
    /* a tear right after a rotation (the new file holds only a fragment),
     * repaired; then another tear in the newest file, repaired too */
    struct fixture *f = *state;
    char path[400];
    f->cfg.rotate_bytes = 1500;
    log_open(f);
    append_many(f, 20);
    log_crash(f);
    expect_ok(f);
    snprintf(path, sizeof(path), "%s/audit-%016llu.log", f->dir, (unsigned long long)f->r.last_seq + 1);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "{\"se", 4), 4);
    close(fd);
    assert_int_not_equal(verify(f, NULL), 0);
    assert_true(f->r.torn_tail);
    log_open(f);
    append_many(f, 3);
    log_crash(f);
    expect_ok(f);
    assert_int_equal(f->r.repairs, 1);
    newest_log(f, path, sizeof(path));
    append_raw(path, "{\"seq\":1");
    assert_int_not_equal(verify(f, NULL), 0);
    assert_true(f->r.torn_tail);
    log_open(f);
    append_many(f, 30);
    log_close(f);
    expect_ok(f);
    assert_int_equal(f->r.repairs, 2);
}

static void test_a4_whole_record_without_newline_adopted(void **state)
{
    /* the crash took only the newline: the record is whole; it is adopted
     * (no repair), and the chain goes on after it */
    struct fixture *f = *state;
    char path[400];
    log_open(f);
    append_many(f, 7);
    log_crash(f);
    first_log(f, path, sizeof(path));
    clear_append(path);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(truncate(path, st.st_size - 1), 0);
    assert_int_not_equal(verify(f, NULL), 0);
    assert_true(f->r.torn_tail);
    log_open(f);
    append_many(f, 3);
    log_close(f);
    expect_ok(f);
    assert_int_equal(f->r.repairs, 0);
    assert_int_equal(f->r.last_seq, 1 + 7 + 1 + 3 + 1); /* start, 7, start, 3, checkpoint */
}

/* ---- A5: strings cannot split or forge records --------------------------------------------- */

static void test_a5_hostile_strings(void **state)
{
    struct fixture *f = *state;
    static const char nasty[] = "a\r\nb\"c\\d\xe2\x80\xa8"
                                "e}\n{\"seq\":99,\"mac\":\"00\"}\x1b[2J\x7f\xc2\x85";
    char path[400], err[256];
    size_t n;
    log_open(f);
    json_t *b = json_pack("{s:s, s:s%}", "type", "request", "tenant", nasty, sizeof(nasty) - 1);
    json_object_set_new(b, "with_nul", json_stringn("x\0y", 3));
    assert_int_not_equal(audit_log_append(&f->log, b, NULL, 0, err, sizeof(err)), 0);
    json_decref(b);
    /* names the writer owns are refused */
    b = json_pack("{s:s, s:i}", "type", "request", "seq", 5);
    assert_int_equal(audit_log_append(&f->log, b, NULL, 0, err, sizeof(err)), 0);
    assert_non_null(strstr(err, "\"seq\""));
    json_decref(b);
    b = json_pack("{s:s, s:I, s:s, s:s}", "type", "checkpoint", "head_seq", (json_int_t)1, "head", "00", "sig", "00");
    assert_int_equal(audit_log_append(&f->log, b, NULL, 0, err, sizeof(err)), 0);
    assert_non_null(strstr(err, "writer's own"));
    json_decref(b);
    log_close(f);
    expect_ok(f);
    first_log(f, path, sizeof(path));
    char **l = read_lines(path, &n);
    assert_int_equal(n, 3); /* start, the record, the final checkpoint */
    for (size_t i = 0; i < n; i++)
        for (const unsigned char *p = (const unsigned char *)l[i]; *p; p++)
            assert_true(*p >= 0x20 && *p < 0x7f);
    json_error_t jerr;
    json_t *rec = json_loads(l[1], JSON_ALLOW_NUL, &jerr);
    assert_non_null(rec);
    json_t *t = json_object_get(rec, "tenant");
    assert_int_equal(json_string_length(t), sizeof(nasty) - 1);
    assert_memory_equal(json_string_value(t), nasty, sizeof(nasty) - 1);
    assert_int_equal(json_string_length(json_object_get(rec, "with_nul")), 3);
    json_decref(rec);
    free_lines(l, n);
}

/* ---- A6: the request-handling user cannot rewrite the log ------------------------------------ */

static void test_a6_moat_cannot_rewrite(void **state)
{
    struct fixture *f = *state;
    char path[400], ckpt[400], st[400];
    struct passwd *pw = getpwnam("moat");
    if (pw == NULL) {
        print_message("    SKIP: no user moat\n");
        skip();
    }
    log_open(f);
    append_many(f, 5);
    assert_int_equal(audit_log_sync(&f->log, st, sizeof(st)), 0);
    first_log(f, path, sizeof(path));
    snprintf(ckpt, sizeof(ckpt), "%s/checkpoints.log", f->dir);
    snprintf(st, sizeof(st), "%s/state", f->dir);

    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int got = 0;
        if (setgroups(0, NULL) != 0 || setgid(pw->pw_gid) != 0 || setuid(pw->pw_uid) != 0)
            _exit(100);
        int fd;
        if ((fd = open(path, O_WRONLY)) >= 0 || errno != EACCES)
            got |= 1;
        if ((fd = open(path, O_WRONLY | O_APPEND)) >= 0)
            got |= 2;
        if (truncate(path, 0) == 0)
            got |= 4;
        if (unlink(path) == 0)
            got |= 8;
        if (open(ckpt, O_WRONLY | O_APPEND) >= 0 || open(st, O_RDONLY) >= 0)
            got |= 16;
        if (rename(path, ckpt) == 0)
            got |= 32;
        if (open(path, O_RDONLY) >= 0) /* no reading the records either */
            got |= 64;
        (void)fd;
        _exit(got);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    if (WEXITSTATUS(status) != 0)
        fail_msg("user moat could rewrite the log (mask %d)", WEXITSTATUS(status));

    /* the owner's mode and the append-only flag */
    struct stat sb;
    assert_int_equal(stat(f->dir, &sb), 0);
    assert_int_equal(sb.st_mode & 07777, 0700);
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_mode & 07777, 0600);
    int flags = 0;
    if (file_flags(path, &flags) != 0) {
        print_message("    note: FS_IOC_GETFLAGS unsupported here (%s): append-only flag not checked\n", strerror(errno));
    } else if (!f->log.appended_ok) {
        print_message("    note: chattr +a not permitted on this filesystem: flag not checked\n");
    } else {
        assert_true(flags & FS_APPEND_FL);
        /* even root cannot rewrite it while the flag is set */
        assert_int_equal(open(path, O_WRONLY), -1);
        assert_int_equal(errno, EPERM);
        assert_int_equal(truncate(path, 0), -1);
        assert_int_equal(unlink(path), -1);
    }
    log_close(f);
    expect_ok(f);
}

/* ---- A7: key ratchet across epochs and files ---------------------------------------------------- */

static void test_a7_ratchet_and_rotation(void **state)
{
    struct fixture *f = *state;
    uint8_t key[AUDIT_KEY_LEN], k[AUDIT_KEY_LEN];
    char err[256];
    f->cfg.epoch_records = 3;
    f->cfg.checkpoint_records = 7;
    f->cfg.rotate_bytes = 2000;
    log_open(f);
    uint64_t seen_epoch = 0;
    for (int i = 0; i < 200; i++) {
        append_req(f, i, i % 2 ? "acme" : "globex");
        if (f->log.epoch != seen_epoch) {
            /* a ratchet: the state file holds the new key and no old one */
            seen_epoch = f->log.epoch;
            assert_int_equal(read_state(f, key), seen_epoch);
            memcpy(k, f->k0, sizeof(k));
            for (uint64_t e = 0; e < seen_epoch; e++) {
                assert_memory_not_equal(key, k, AUDIT_KEY_LEN);
                audit_ratchet(k);
            }
            assert_memory_equal(key, k, AUDIT_KEY_LEN);
            assert_memory_equal(f->log.key, k, AUDIT_KEY_LEN);
            /* rewritten in place: one block, and the previous key's text is gone */
            char raw[512], prevhex[AUDIT_HEX_LEN + 1];
            uint8_t prevk[AUDIT_KEY_LEN];
            memcpy(prevk, f->k0, sizeof(prevk));
            for (uint64_t e = 0; e + 1 < seen_epoch; e++)
                audit_ratchet(prevk);
            moat_hex_encode(prevk, sizeof(prevk), prevhex);
            assert_int_equal(read_state_text(f, raw, sizeof(raw)), 256);
            assert_null(strstr(raw, prevhex));
        }
    }
    assert_int_equal(audit_log_sync(&f->log, err, sizeof(err)), 0);
    /* idle: time alone moves the epoch */
    f->log.cfg.epoch_seconds = 60;
    uint64_t before = f->log.epoch;
    assert_int_equal(audit_log_tick(&f->log, time(NULL) + 120, err, sizeof(err)), 0);
    assert_int_equal(f->log.epoch, before + 1);
    assert_int_equal(read_state(f, key), before + 1);
    append_req(f, 1000, "acme");
    log_close(f);
    char st2[400];
    snprintf(st2, sizeof(st2), "%s/state.tmp", f->dir);
    assert_int_not_equal(access(st2, F_OK), 0);

    expect_ok(f);
    print_message("    %llu records, epoch %llu, %llu checkpoints\n", (unsigned long long)f->r.records,
                  (unsigned long long)before + 1, (unsigned long long)f->r.checkpoints);
    assert_true(before >= 60);

    /* files: many; delete one in the middle */
    DIR *d = opendir(f->dir);
    struct dirent *de;
    uint64_t firsts[256] = {0};
    size_t nf = 0;
    while ((de = readdir(d)) != NULL) {
        unsigned long long s;
        if (sscanf(de->d_name, "audit-%16llu.log", &s) == 1 && nf < 256)
            firsts[nf++] = s;
    }
    closedir(d);
    print_message("    %zu log files\n", nf);
    assert_true(nf >= 6);
    uint64_t mid = 0, next = UINT64_MAX;
    for (size_t i = 0; i < nf; i++)
        if (firsts[i] > mid && firsts[i] != 1 && firsts[i] < 150)
            mid = firsts[i];
    for (size_t i = 0; i < nf; i++)
        if (firsts[i] > mid && firsts[i] < next)
            next = firsts[i];
    char path[400];
    snprintf(path, sizeof(path), "%s/audit-%016llu.log", f->dir, (unsigned long long)mid);
    clear_append(path);
    assert_int_equal(unlink(path), 0);
    char want[128];
    snprintf(want, sizeof(want), "a file is missing: records %llu-%llu", (unsigned long long)mid, (unsigned long long)next - 1);
    expect_bad(f, NULL, mid, (size_t)-1, want);
}

static void test_a7_state_behind_log(void **state)
{
    /* the state file lags the log (a ratchet whose state could not be
     * written): the writer goes forward to the log's epoch, never back */
    struct fixture *f = *state;
    char st[400], saved[400];
    f->cfg.epoch_records = 4;
    snprintf(st, sizeof(st), "%s/state", f->dir);
    snprintf(saved, sizeof(saved), "%s/state.old", f->root);
    log_open(f);
    append_many(f, 2);
    assert_int_equal(f->log.epoch, 0);
    char cmd[1000];
    snprintf(cmd, sizeof(cmd), "cp -p %s %s", st, saved);
    assert_int_equal(system(cmd), 0);
    append_many(f, 10);
    assert_true(f->log.epoch >= 2);
    log_crash(f);
    assert_int_equal(rename(saved, st), 0);
    log_open(f);
    append_many(f, 3);
    log_close(f);
    expect_ok(f);
}

/* ---- packets ---------------------------------------------------------------------------------- */

static char *line_of(struct fixture *f, uint64_t seq);

/* Packs go whole once their last packet is past the retention, but never
 * the pack of the file being written. */
static void test_pack_retention(void **state)
{
    struct fixture *f = *state;
    char err[256], old_pack[600], new_pack[600];
    struct stat st;
    f->cfg.packet_retention_s = 86400;
    log_open(f);
    json_t *b = json_pack("{s:s, s:s}", "type", "result", "request_id", "rq-old");
    assert_int_not_equal(audit_log_append(&f->log, b, "old", 3, err, sizeof(err)), 0);
    json_decref(b);
    uint64_t first = f->log.file_first_seq;
    f->log.cfg.rotate_bytes = 1; /* the next record starts a new file */
    append_req(f, 1, "acme");
    f->log.cfg.rotate_bytes = 1ull << 30;
    assert_int_not_equal(f->log.file_first_seq, first);
    b = json_pack("{s:s, s:s}", "type", "result", "request_id", "rq-new");
    assert_int_not_equal(audit_log_append(&f->log, b, "new", 3, err, sizeof(err)), 0);
    json_decref(b);
    assert_int_equal(audit_log_sync(&f->log, err, sizeof(err)), 0);
    snprintf(old_pack, sizeof(old_pack), "%s/audit-%016llu.pack", f->dir, (unsigned long long)first);
    snprintf(new_pack, sizeof(new_pack), "%s/audit-%016llu.pack", f->dir, (unsigned long long)f->log.file_first_seq);
    assert_int_equal(stat(old_pack, &st), 0);
    assert_int_equal(stat(new_pack, &st), 0);
    /* a day and more later, by the writer's clock */
    assert_int_equal(audit_log_tick(&f->log, time(NULL) + 10000000, err, sizeof(err)), 0);
    assert_int_not_equal(stat(old_pack, &st), 0);
    assert_int_equal(stat(new_pack, &st), 0);
    log_close(f);
    expect_ok(f);
}

/* A record's packet: read from where its line says it is, and checked. */
static void read_packet_of_line(struct fixture *f, const char *line, uint8_t *out, size_t cap, size_t *len)
{
    json_t *j = json_loads(line, 0, NULL);
    assert_non_null(j);
    const char *at = json_string_value(json_object_get(j, "packet_at"));
    char name[64], path[600];
    unsigned long long off, n;
    assert_non_null(at);
    assert_int_equal(sscanf(at, "%63[^:]:%llu:%llu", name, &off, &n), 3);
    snprintf(path, sizeof(path), "%s/%s", f->dir, name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    assert_true(n <= cap);
    assert_int_equal(pread(fd, out, n, (off_t)off), (ssize_t)n);
    close(fd);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0600);
    *len = n;
    json_decref(j);
}

static void test_packets_stored_exactly(void **state)
{
    struct fixture *f = *state;
    uint8_t bin[4096], h[AUDIT_HASH_LEN], back[5000];
    char hex[AUDIT_HEX_LEN + 1], err[256];
    size_t n;
    for (size_t i = 0; i < sizeof(bin); i++)
        bin[i] = (uint8_t)(i * 7 + (i >> 8));
    audit_sha256(bin, sizeof(bin), h);
    moat_hex_encode(h, sizeof(h), hex);
    log_open(f);
    uint64_t seq[3];
    for (int i = 0; i < 3; i++) { /* binary, then text, then the binary again */
        json_t *b = json_pack("{s:s, s:s}", "type", "result", "request_id", i == 1 ? "rq-text" : "rq-bin");
        static const char text[] = "{\"a\":\"caf\xc3\xa9\"}"; /* UTF-8 */
        seq[i] = i == 1 ? audit_log_append(&f->log, b, text, sizeof(text) - 1, err, sizeof(err))
                        : audit_log_append(&f->log, b, bin, sizeof(bin), err, sizeof(err));
        assert_int_not_equal(seq[i], 0);
        json_decref(b);
    }
    char *l0 = line_of(f, seq[0]), *l2 = line_of(f, seq[2]);
    assert_non_null(l0);
    assert_non_null(l2);
    log_close(f);
    expect_ok(f);
    for (int i = 0; i < 2; i++) {
        read_packet_of_line(f, i ? l2 : l0, back, sizeof(back), &n);
        assert_int_equal(n, sizeof(bin));
        assert_memory_equal(back, bin, sizeof(bin));
        assert_non_null(strstr(i ? l2 : l0, hex));
    }
    free(l0);
    free(l2);
}

/* ---- the verifier's callback sees verified records only --------------------------------------- */

static void count_cb(void *arg, json_t *rec, const char *line, size_t len)
{
    uint64_t *n = arg;
    (void)line;
    (void)len;
    assert_int_equal(json_integer_value(json_object_get(rec, "seq")), (json_int_t)(*n + 1));
    (*n)++;
}

static void test_verify_callback_stops_at_failure(void **state)
{
    struct fixture *f = *state;
    char path[400];
    size_t n;
    uint64_t seen = 0;
    build_trail(f, 20);
    first_log(f, path, sizeof(path));
    char **l = read_lines(path, &n);
    char *p = strstr(l[9], "\"acme\"");
    p[1] = 'X';
    write_lines(path, l, n);
    assert_int_not_equal(audit_verify_dir(f->dir, f->k0, f->pub, NULL, &f->r, count_cb, &seen), 0);
    assert_int_equal(seen, 9);
    assert_int_equal(f->r.bad_seq, 10);
    free_lines(l, n);
}

/* ---- audit_log_append_text: the fast path and the jansson path ----------------------------------- */

struct text_case {
    const char *body;
    size_t len; /* 0: strlen(body) */
    int fast;   /* json_scan accepts it (-1: not checked) */
};

static size_t case_len(const struct text_case *c)
{
    return c->len ? c->len : strlen(c->body);
}

/* The line of record seq in the first log file (a copy), or NULL. */
static char *line_of(struct fixture *f, uint64_t seq)
{
    char path[400], want[40];
    size_t n;
    char *found = NULL, err[256];
    if (f->open) /* sealed lines are written in batches */
        assert_int_equal(audit_log_sync(&f->log, err, sizeof(err)), 0);
    first_log(f, path, sizeof(path));
    snprintf(want, sizeof(want), "{\"seq\":%llu,", (unsigned long long)seq);
    char **l = read_lines(path, &n);
    for (size_t i = 0; i < n && found == NULL; i++)
        if (strncmp(l[i], want, strlen(want)) == 0)
            found = strdup(l[i]);
    free_lines(l, n);
    return found;
}

/* A record's body fields: the line parsed, without the writer's fields
 * (but "packet"). */
static json_t *body_of_line(const char *line)
{
    json_error_t jerr;
    json_t *j = json_loads(line, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
    if (j == NULL)
        fail_msg("line is not JSON (%s): %s", jerr.text, line);
    static const char *const writer[] = {"seq", "time", "epoch", "prev", "mac"};
    for (size_t i = 0; i < sizeof(writer) / sizeof(writer[0]); i++) {
        assert_non_null(json_object_get(j, writer[i]));
        json_object_del(j, writer[i]);
    }
    return j;
}

static void assert_printable_line(const char *line)
{
    for (const unsigned char *p = (const unsigned char *)line; *p; p++)
        if (*p < 0x20 || *p > 0x7e)
            fail_msg("byte 0x%02x at %zu of %s", *p, (size_t)(p - (const unsigned char *)line), line);
}

/* Would the jansson path take this body?  (json_loadb and audit_log_append's checks.) */
static int jansson_takes(const char *body, size_t len)
{
    static const char *const names[] = {"seq", "time", "epoch", "prev", "mac", "packet", "packet_at"};
    json_error_t jerr;
    json_t *j = json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
    int ok = json_is_object(j);
    for (size_t i = 0; ok && i < sizeof(names) / sizeof(names[0]); i++)
        ok = json_object_get(j, names[i]) == NULL;
    const char *type = ok ? json_string_value(json_object_get(j, "type")) : NULL;
    if (type != NULL && (strcmp(type, "checkpoint") == 0 || strcmp(type, "repair") == 0 || strcmp(type, "start") == 0 ||
                         strcmp(type, "dropped") == 0))
        ok = 0;
    json_decref(j);
    return ok;
}

/* Each body through audit_log_append_text and through json_loadb +
 * audit_log_append (with and without a packet): the lines verify, are
 * printable ASCII, and hold the same values. */
static void test_text_fast_and_slow_agree(void **state)
{
    struct fixture *f = *state;
    static const struct text_case cases[] = {
        {"{\"type\":\"request\",\"request_id\":\"r-1\",\"tenant\":\"acme\",\"decision\":\"allowed\",\"status\":200}", 0, 1},
        {"{\"type\":\"result\",\"run\":{\"code\":0,\"cpu_ms\":12,\"signal\":null,\"ok\":true,\"bad\":false,\"x\":-1.5e3,"
         "\"y\":0.25,\"z\":-0},\"files\":[{\"name\":\"a.py\",\"bytes\":3},{\"name\":\"b\",\"bytes\":123456789012345678}],"
         "\"e\":[],\"o\":{},\"n\":[[[1]],[2]]}",
         0, 1},
        {"{\"msg\":\"a\\nb\\\"c\\\\d\\u0041\\/e\\t\\b\\f\\r\\u00e9\\u2028\\u0000\\u007f\\u001b\"}", 0, 1},
        {"{}", 0, 1},
        {"{\"tenant\":\"caf\xc3\xa9 \xe2\x80\xa8 \xf0\x9f\x98\x80\"}", 0, 0}, /* UTF-8 */
        {"{\"tenant\":\"a\x7f"
         "b\"}",
         0, 0},                                                   /* DEL */
        {"{ \"type\" : \"request\",\n\t\"n\": [1, 2] }\n", 0, 0}, /* whitespace */
        {"{\"e\":\"\\ud83d\\ude00\"}", 0, 0},                     /* a surrogate pair */
        {"{\"k\\u0041\":1}", 0, 0},                               /* an escaped key */
        {"{\"big\":12345678901234567890}", 0, 0},                 /* too big for json_int_t: refused below */
        /* the gateway's summary of coalesced denials (FORMAT.md): spliced as sent */
        {"{\"type\":\"denials\",\"client\":\"2001:db8:1:2::/64\",\"reason\":\"auth\",\"count\":57,"
         "\"since\":\"2026-11-29T16:40:45.123Z\",\"until\":\"2026-11-29T16:40:55.001Z\",\"statuses\":{\"401\":50,\"429\":7}}",
         0, 1},
    };
    uint8_t pkt[100];
    char err[256];
    memset(pkt, 'p', sizeof(pkt));
    log_open(f);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct text_case *c = &cases[i];
        size_t len = case_len(c);
        assert_int_equal(audit_json_scan(c->body, len, NULL, NULL) == 0, c->fast);
        int takes = jansson_takes(c->body, len);
        for (int with_packet = 0; with_packet < 2; with_packet++) {
            const void *packet = with_packet ? pkt : NULL;
            size_t plen = with_packet ? sizeof(pkt) - i : 0;
            errno = 0;
            uint64_t a = audit_log_append_text(&f->log, c->body, len, packet, plen, err, sizeof(err));
            if (!takes) {
                assert_int_equal(a, 0);
                assert_int_equal(errno, EINVAL);
                continue;
            }
            if (a == 0)
                fail_msg("case %zu: %s", i, err);
            json_error_t jerr;
            json_t *j = json_loadb(c->body, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
            assert_non_null(j);
            uint64_t b = audit_log_append(&f->log, j, packet, plen, err, sizeof(err));
            json_decref(j);
            assert_true(b > a); /* a checkpoint may come between */
            char *la = line_of(f, a), *lb = line_of(f, b);
            assert_non_null(la);
            assert_non_null(lb);
            assert_printable_line(la);
            assert_printable_line(lb);
            if (c->fast && len > 2) { /* spliced as sent */
                char *inner = strndup(c->body + 1, len - 2);
                assert_non_null(strstr(la, inner));
                free(inner);
            }
            if (with_packet) { /* the packet's hash and place are the last body fields */
                const char *pk = strstr(la, ",\"packet\":\"");
                assert_non_null(pk);
                assert_int_equal(strncmp(pk + 11 + AUDIT_HEX_LEN, "\",\"packet_at\":\"audit-0000000000000001.pack:", 41), 0);
                assert_non_null(strstr(pk, "\",\"mac\":\""));
            }
            if (i == 4) /* the slow path made ASCII of the UTF-8 */
                assert_non_null(strstr(la, "caf\\u00E9 \\u2028 \\uD83D\\uDE00"));
            if (i == 5) /* ... and escaped the DEL */
                assert_non_null(strstr(la, "a\\u007fb"));
            json_t *ja = body_of_line(la), *jb = body_of_line(lb);
            /* the same packet twice: two places in the pack */
            assert_int_equal(json_object_del(ja, "packet_at") == 0, with_packet);
            assert_int_equal(json_object_del(jb, "packet_at") == 0, with_packet);
            if (!json_equal(ja, jb))
                fail_msg("case %zu differs:\n  %s\n  %s", i, la, lb);
            assert_int_equal(json_object_get(ja, "packet") != NULL, with_packet);
            json_decref(ja);
            json_decref(jb);
            free(la);
            free(lb);
        }
    }
    log_close(f);
    expect_ok(f);
}

/* 40 arrays deep: deeper than json_scan goes. */
#define OPEN10  "[[[[[[[[[["
#define CLOSE10 "]]]]]]]]]]"
#define DEEP    "{\"d\":" OPEN10 OPEN10 OPEN10 OPEN10 CLOSE10 CLOSE10 CLOSE10 CLOSE10 "}"

/* Bodies the fast path must refuse or take exactly as jansson does. */
static const struct text_case rejection_cases[] = {
    /* duplicates, at the top and nested */
    {"{\"a\":1,\"a\":2}", 0, 0},
    {"{\"a\":1,\"b\":2,\"a\":1}", 0, 0},
    {"{\"x\":{\"a\":1,\"a\":1}}", 0, 0},
    {"{\"x\":[1,{\"y\":{\"b\":[],\"b\":[]}}]}", 0, 0},
    {"{\"x\":[{\"a\":1},{\"a\":2}],\"a\":3}", 0, 1}, /* the same key in other objects */
    {"{\"a\":{\"b\":1},\"b\":{\"a\":2}}", 0, 1},
    {"{\"a\":1,\"\\u0061\":2}", 0, 0}, /* a duplicate only once decoded */
    /* the writer's names and types */
    {"{\"seq\":5}", 0, 0},
    {"{\"type\":\"request\",\"mac\":\"00\"}", 0, 0},
    {"{\"packet\":\"00\"}", 0, 0},
    {"{\"type\":\"result\",\"packet_at\":\"audit-0000000000000001.pack:0:1\"}", 0, 0},
    {"{\"time\":1,\"x\":2}", 0, 0},
    {"{\"se\\u0071\":5}", 0, 0},
    {"{\"type\":\"checkpoint\",\"head_seq\":1}", 0, 0},
    {"{\"type\":\"repair\"}", 0, 0},
    {"{\"type\":\"start\"}", 0, 0},
    {"{\"type\":\"dropped\",\"count\":0}", 0, 0},
    {"{\"type\":\"star\\u0074\"}", 0, 0},
    {"{\"type\":\"start\\u0000x\"}", 0, 0},
    {"{\"type\":\"started\"}", 0, 1},
    {"{\"type\":1}", 0, 1},
    {"{\"x\":{\"seq\":1,\"mac\":2,\"type\":\"checkpoint\"}}", 0, 1}, /* nested: fine */
    {"{\"sequence\":1,\"pack\":2}", 0, 1},
    /* not JSON, or not an object */
    {"", 0, 0},
    {"{", 0, 0},
    {"{\"a\":1", 0, 0},
    {"{\"a\":\"x", 0, 0},
    {"{\"a\":1}x", 0, 0},
    {"{\"a\":1}{}", 0, 0},
    {"{\"a\":1} ", 0, 0}, /* trailing space: jansson takes it */
    {"[1,2]", 0, 0},
    {"\"s\"", 0, 0},
    {"{\"a\":\"b\x01"
     "c\"}",
     0, 0},
    {"{\"a\":\"b\nc\"}", 0, 0},
    {"{\"a\":\"b\x00"
     "c\"}",
     11, 0},
    {"{\"a\":\"\\x\"}", 0, 0},
    {"{\"a\":\"\\u12\"}", 0, 0},
    {"{\"a\":\"\\u12g4\"}", 0, 0},
    {"{\"a\":\"\\ud800\"}", 0, 0},
    {"{\"a\":\"\\udc00x\"}", 0, 0},
    {"{\"a\":\"\\ud800\\u0041\"}", 0, 0},
    {"{\"a\":\"\\u0000\"}", 0, 1},
    {"{\"a\":\"\\u00FF\\uFFFF\"}", 0, 1},
    {"{\"a\":\"\xff\"}", 0, 0},
    {"{\"a\":01}", 0, 0},
    {"{\"a\":-}", 0, 0},
    {"{\"a\":1.}", 0, 0},
    {"{\"a\":.5}", 0, 0},
    {"{\"a\":1e}", 0, 0},
    {"{\"a\":+1}", 0, 0},
    {"{\"a\":1E+99,\"b\":-0.0e-01}", 0, 1},
    {"{\"a\":1e999}", 0, 0},
    {"{\"a\":99999999999999999999}", 0, 0},
    {"{\"a\":-9223372036854775808}", 0, 0}, /* fits, but 19 digits: jansson decides */
    {"{\"a\":tru}", 0, 0},
    {"{\"a\":truex}", 0, 0},
    {"{\"a\":nul}", 0, 0},
    {"{\"a\":True}", 0, 0},
    {"{\"a\":1,}", 0, 0},
    {"{,}", 0, 0},
    {"{\"a\"}", 0, 0},
    {"{\"a\":1\"b\":2}", 0, 0},
    {"{\"a\":[1,]}", 0, 0},
    {"{\"a\":[1 2]}", 0, 0},
    {"{\"a\":}", 0, 0},
    {"{1:2}", 0, 0},
    {"{\"a\":1]", 0, 0},
    {"{\"a\":[}", 0, 0},
    {DEEP, 0, 0}, /* deeper than the scanner goes: jansson takes it */
    {"{\"caf\xc3\xa9\":1}", 0, 0},
    {"{\"a\":\"\xc3\"}", 0, 0},
};

/* One case: refused or taken as json_loadb + audit_log_append would; a
 * refusal leaves the log as it was. */
static void check_rejection_case(struct fixture *f, size_t i, const struct text_case *c)
{
    char err[256];
    size_t len = case_len(c);
    int scanned = audit_json_scan(c->body, len, NULL, NULL) == 0;
    int takes = jansson_takes(c->body, len);
    json_error_t jerr;
    json_t *j = json_loadb(c->body, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
    /* what the fast path rests on: the scanner accepts only what jansson does */
    if (scanned && !json_is_object(j))
        fail_msg("case %zu: the scanner accepts what jansson refuses: %s", i, c->body);
    json_decref(j);
    if (c->fast)
        assert_true(scanned);
    uint64_t before = f->log.seq;
    errno = 0;
    uint64_t seq = audit_log_append_text(&f->log, c->body, len, NULL, 0, err, sizeof(err));
    if ((seq != 0) != takes)
        fail_msg("case %zu (%s): seq %llu, the jansson path %s: %s", i, c->body, (unsigned long long)seq,
                 takes ? "takes it" : "refuses it", err);
    if (seq == 0) {
        assert_int_equal(errno, EINVAL);
        assert_int_equal(f->log.seq, before);
        print_message("    case %zu refused: %s\n", i, err);
    } else {
        char *line = line_of(f, seq);
        assert_printable_line(line);
        free(line);
    }
}

/* Refused or taken exactly as json_loadb + audit_log_append would; a
 * refusal leaves the log as it was. */
static void test_text_rejections(void **state)
{
    struct fixture *f = *state;
    char err[256];
    log_open(f);
    for (size_t i = 0; i < sizeof(rejection_cases) / sizeof(rejection_cases[0]); i++)
        check_rejection_case(f, i, &rejection_cases[i]);
    /* the messages the writer logs */
    assert_int_equal(audit_log_append_text(&f->log, "{\"a\":", 5, NULL, 0, err, sizeof(err)), 0);
    assert_non_null(strstr(err, "body is not JSON: "));
    assert_int_equal(audit_log_append_text(&f->log, "{\"seq\":1}", 9, NULL, 0, err, sizeof(err)), 0);
    assert_non_null(strstr(err, "\"seq\""));
    assert_int_equal(audit_log_append_text(&f->log, "{\"type\":\"start\"}", 16, NULL, 0, err, sizeof(err)), 0);
    assert_non_null(strstr(err, "writer's own"));
    log_close(f);
    expect_ok(f);
}

/* Hostile text cannot put a byte outside 0x20-0x7e into a line, split one,
 * or forge the fields after it. */
static void test_text_hostile_bytes(void **state)
{
    struct fixture *f = *state;
    static const char *const bodies[] = {
        "{\"a\":\"\\u000a{\\\"seq\\\":99}\\u000d\\u0000\"}",
        "{\"a\":\"x\ny\"}",
        "{\"a\":\"x\ry\"}",
        "{\"a\":\"}\\n{\\\"seq\\\":9,\\\"mac\\\":\\\"00\\\"}\"}",
        "{\"a\":\"\x1b[2J\"}",
        "{\"a\":\"\xc2\x85\xe2\x80\xa8\"}",
        "{\"a\":\"\x7f\"}",
        "{\"a\":\"\x80\"}",
        "{\"a\":\"b\"}\n{\"seq\":7}",
        "{\"a\":1,\"mac\":\"0000\"}",
    };
    char err[256], path[400];
    size_t n, taken = 0;
    log_open(f);
    for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++)
        if (audit_log_append_text(&f->log, bodies[i], strlen(bodies[i]), NULL, 0, err, sizeof(err)) != 0)
            taken++;
    assert_int_equal(taken, 4);
    log_close(f);
    expect_ok(f);
    first_log(f, path, sizeof(path));
    char **l = read_lines(path, &n);
    assert_int_equal(n, 2 + taken);
    for (size_t i = 0; i < n; i++)
        assert_printable_line(l[i]);
    json_t *rec = body_of_line(l[1]);
    assert_int_equal(json_string_length(json_object_get(rec, "a")), 13);
    assert_memory_equal(json_string_value(json_object_get(rec, "a")), "\n{\"seq\":99}\r\0", 13);
    json_decref(rec);
    free_lines(l, n);
}

/* The keyed context gives audit_hmac's bytes, key after key. */
static void test_mac_context_matches_hmac(void **state)
{
    (void)state;
    struct audit_mac m = {NULL};
    uint8_t key[AUDIT_KEY_LEN], a[AUDIT_HASH_LEN], b[AUDIT_HASH_LEN];
    char data[300];
    memset(key, 0x5a, sizeof(key));
    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (char)('!' + i % 90);
    assert_int_equal(audit_mac_compute(&m, data, 1, a), -1); /* no key */
    for (int k = 0; k < 4; k++) {
        assert_int_equal(audit_mac_set_key(&m, key), 0);
        for (size_t len = 0; len < sizeof(data); len += 37) {
            assert_int_equal(audit_mac_compute(&m, data, len, a), 0);
            assert_int_equal(audit_hmac(key, data, len, b), 0);
            assert_memory_equal(a, b, sizeof(a));
        }
        audit_ratchet(key);
    }
    audit_mac_free(&m);
    assert_null(m.ctx);
    audit_mac_free(&m);
}

/* Many epochs and files through audit_log_append_text, both paths, with
 * packets: the trail verifies, and each ratchet keys a new context. */
static void test_text_ratchet_epochs(void **state)
{
    struct fixture *f = *state;
    char body[256], err[256];
    uint8_t pkt[64], mac[AUDIT_HASH_LEN], want[AUDIT_HASH_LEN];
    f->cfg.epoch_records = 3;
    f->cfg.checkpoint_records = 7;
    log_open(f);
    uint64_t epoch = f->log.epoch;
    for (int i = 0; i < 120; i++) {
        int n = snprintf(body, sizeof(body), "{\"type\":\"request\",\"request_id\":\"r-%d\",\"tenant\":\"%s\",\"n\":%d}", i,
                         i % 3 ? "acme" : "caf\xc3\xa9", i);
        memset(pkt, i, sizeof(pkt));
        if (audit_log_append_text(&f->log, body, (size_t)n, i % 4 ? NULL : pkt, sizeof(pkt), err, sizeof(err)) == 0)
            fail_msg("record %d: %s", i, err);
        if (f->log.epoch != epoch) {
            epoch = f->log.epoch;
            assert_non_null(f->log.mac.ctx);
            assert_int_equal(audit_mac_compute(&f->log.mac, body, (size_t)n, mac), 0);
            assert_int_equal(audit_hmac(f->log.key, body, (size_t)n, want), 0);
            assert_memory_equal(mac, want, sizeof(mac));
        }
    }
    assert_true(f->log.epoch >= 40);
    /* a time ratchet too */
    f->log.cfg.epoch_seconds = 60;
    assert_int_equal(audit_log_tick(&f->log, time(NULL) + 120, err, sizeof(err)), 0);
    assert_int_not_equal(audit_log_append_text(&f->log, "{\"a\":1}", 7, NULL, 0, err, sizeof(err)), 0);
    log_close(f);
    assert_null(f->log.mac.ctx);
    expect_ok(f);
    print_message("    %llu records, %llu checkpoints\n", (unsigned long long)f->r.records, (unsigned long long)f->r.checkpoints);
}

/* Not a timing assert: how the two paths compare here, for the record. */
static off_t file_size(const char *path)
{
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return st.st_size;
}

/*
 * A batch whose one write stops short (RLIMIT_FSIZE stands in for a full
 * disk): the sync fails, so nothing of the batch is acknowledged; the lines
 * wholly written stay records; a fragment is ended and repaired; a line
 * written but for its newline is adopted; the chain goes on and verifies.
 */
static void test_batch_short_write(void **state)
{
    struct fixture *f = *state;
    char err[512], path[400];
    struct rlimit old, lim;
    size_t n;

    f->cfg.checkpoint_records = 1000;
    f->cfg.epoch_records = 1000;
    log_open(f);
    append_many(f, 12); /* two-digit seqs from here on */
    first_log(f, path, sizeof(path));
    off_t s0 = file_size(path);
    append_req(f, 298, "acme"); /* i % 3 == 1: every line below is as long */
    assert_int_equal(audit_log_sync(&f->log, err, sizeof(err)), 0);
    off_t line = file_size(path) - s0; /* '\n' included */
    signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    for (int round = 0; round < 2; round++) {
        uint64_t before = f->log.seq;
        lim = old;
        lim.rlim_cur = (rlim_t)(file_size(path) + (round == 0 ? 2 * line + 10 : 3 * line - 1));
        assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
        for (int j = 0; j < 5; j++)
            assert_int_equal(append_req(f, 301 + 3 * j, "acme"), before + 1 + (uint64_t)j);
        assert_int_not_equal(audit_log_sync(&f->log, err, sizeof(err)), 0);
        print_message("    round %d: %s\n", round, err);
        assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
        if (round == 0) { /* two lines, then 10 bytes of the third */
            assert_int_equal(f->log.seq, before + 2);
            assert_int_equal(f->log.torn_pending, 10);
        } else { /* three lines, the third without its newline */
            assert_int_equal(f->log.seq, before + 3);
            assert_int_equal(f->log.torn_pending, 0);
            assert_int_equal(f->log.torn_newline, 1);
        }
        append_many(f, 3); /* the disk has room again */
    }
    log_close(f);
    expect_ok(f);
    char **l = read_lines(path, &n);
    int repairs = 0;
    for (size_t i = 0; i < n; i++)
        repairs += strstr(l[i], "\"type\":\"repair\",\"torn_bytes\":10,") != NULL;
    free_lines(l, n);
    assert_int_equal(repairs, 1);
}

/*
 * A write that failed in the middle of a batch is told by the batch's
 * commit (audit_log_sync), even when a checkpoint by time (audit_log_tick)
 * or a rotation synced in between: otherwise the batch's rolled-back
 * records, whose seqs went to later records, would be acknowledged.
 */
static void test_batch_failure_outlives_inner_syncs(void **state)
{
    struct fixture *f = *state;
    char err[512], path[400];
    struct rlimit old, lim;

    f->cfg.checkpoint_records = 3;
    f->cfg.checkpoint_seconds = 60;
    log_open(f);
    append_many(f, 1);
    first_log(f, path, sizeof(path));
    signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    for (int how = 0; how < 2; how++) {
        lim = old;
        lim.rlim_cur = (rlim_t)file_size(path); /* the disk is full */
        assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
        append_req(f, 10, "acme");
        append_req(f, 11, "acme"); /* due a checkpoint, whose write fails */
        assert_int_not_equal(f->log.write_failed, 0);
        assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0); /* room again */
        if (how == 0) {
            (void)audit_log_tick(&f->log, time(NULL) + 120, err, sizeof(err));
        } else {
            /* a rotation is due: it syncs first, which fails, so this
             * record is refused too */
            json_t *b = json_pack("{s:s, s:s}", "type", "request", "request_id", "rq-rot");
            f->log.cfg.rotate_bytes = 1;
            assert_int_equal(audit_log_append(&f->log, b, NULL, 0, err, sizeof(err)), 0);
            f->log.cfg.rotate_bytes = 1ull << 30;
            json_decref(b);
        }
        assert_int_not_equal(audit_log_sync(&f->log, err, sizeof(err)), 0);
        append_many(f, 2); /* and the next batch is fine */
    }
    log_close(f);
    expect_ok(f);
}

/* A line torn by a full disk is ended (and a fragment repaired) in the file
 * it is in, also when the next record starts a new file. */
static void test_rotation_ends_torn_line_first(void **state)
{
    struct fixture *f = *state;
    char err[512], path[400];
    struct rlimit old, lim;

    log_open(f);
    append_many(f, 1);
    signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    for (int whole = 0; whole < 2; whole++) {
        snprintf(path, sizeof(path), "%s/audit-%016llu.log", f->dir, (unsigned long long)f->log.file_first_seq);
        append_req(f, 20 + whole, "acme");
        size_t line = f->log.wlen - 1;
        lim = old;
        lim.rlim_cur = (rlim_t)(file_size(path) + (off_t)(whole ? line : 20));
        assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
        assert_int_not_equal(audit_log_sync(&f->log, err, sizeof(err)), 0);
        assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
        assert_true(whole ? f->log.torn_newline && !f->log.torn_pending : f->log.torn_pending == 20);
        uint64_t before = f->log.file_first_seq;
        f->log.cfg.rotate_bytes = 1; /* a rotation is due */
        append_req(f, 30 + whole, "acme");
        f->log.cfg.rotate_bytes = 1ull << 30;
        assert_int_not_equal(f->log.file_first_seq, before);
        assert_int_equal(audit_log_sync(&f->log, err, sizeof(err)), 0);
    }
    append_many(f, 2);
    log_close(f);
    expect_ok(f);
}

static void test_text_cost(void **state)
{
    struct fixture *f = *state;
    static const char body[] =
        "{\"type\":\"result\",\"request_id\":\"0123456789abcdef\",\"tenant\":\"acme\",\"key_id\":\"k1\",\"client\":\"10.0.0.1\","
        "\"endpoint\":\"/api/v2/execute\",\"method\":\"POST\",\"decision\":\"allowed\",\"language\":\"python\",\"version\":\"3\","
        "\"run\":{\"status\":null,\"code\":0,\"signal\":null,\"cpu_ms\":12,\"wall_ms\":30,\"memory_bytes\":8192000}}";
    char err[256];
    struct timespec t0, t1, t2;
    f->cfg.epoch_records = 1000;
    f->cfg.checkpoint_records = 100;
    log_open(f);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < 3000; i++)
        assert_int_not_equal(audit_log_append_text(&f->log, body, sizeof(body) - 1, NULL, 0, err, sizeof(err)), 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    for (int i = 0; i < 3000; i++) {
        json_error_t jerr;
        json_t *j = json_loadb(body, sizeof(body) - 1, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
        assert_int_not_equal(audit_log_append(&f->log, j, NULL, 0, err, sizeof(err)), 0);
        json_decref(j);
    }
    clock_gettime(CLOCK_MONOTONIC, &t2);
    double fast = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    double slow = (double)(t2.tv_sec - t1.tv_sec) + (double)(t2.tv_nsec - t1.tv_nsec) / 1e9;
    print_message("    3000 records: text %.1f us each, jansson %.1f us each\n", fast / 3000 * 1e6, slow / 3000 * 1e6);
    log_close(f);
    expect_ok(f);
}

/* ---- A8: the window a cut tail goes unnoticed in ------------------------------------------ */

/* Waits until the log says a checkpoint is due by checkpoint_delay_ms: on
 * the monotonic clock, for as long as it says, so load only makes it later. */
static void wait_checkpoint_due(struct fixture *f)
{
    int64_t in;
    while ((in = audit_log_checkpoint_in(&f->log)) > 0) {
        struct timespec ts = {0, (long)in * 1000000L};
        nanosleep(&ts, NULL);
    }
    assert_int_equal(in, 0);
}

/* A cut of the log to its first keep lines, as an intruder would make it. */
static void cut_log(struct fixture *f, char **orig, size_t keep)
{
    char path[400];
    first_log(f, path, sizeof(path));
    write_lines(path, orig, keep);
}

/*
 * A signed checkpoint follows every record within checkpoint_delay_ms, by
 * the clock, with no more records or seconds needed; none while nothing is
 * written.  verify counts what no checkpoint covers yet, and what a cut
 * takes is detected exactly when it takes a covered record.
 */
static void test_a8_checkpoint_delay(void **state)
{
    struct fixture *f = *state;
    char err[512], path[400];
    size_t n;

    f->cfg.checkpoint_records = 1000;
    f->cfg.checkpoint_delay_ms = 20;
    log_open(f); /* the start record: a checkpoint is due 20 ms from it */
    int64_t in = audit_log_checkpoint_in(&f->log);
    assert_true(in >= 0 && in <= 20);
    append_many(f, 3);
    expect_ok(f); /* nothing covers the four records yet */
    assert_int_equal(f->r.uncovered, 4);
    assert_int_equal(f->r.covered_seq, 0);

    wait_checkpoint_due(f);
    assert_int_equal(audit_log_tick(&f->log, time(NULL), err, sizeof(err)), 0);
    assert_int_equal(audit_log_checkpoint_in(&f->log), -1); /* all covered */
    expect_ok(f);
    assert_int_equal(f->r.checkpoints, 1);
    assert_int_equal(f->r.listed, 1);
    assert_int_equal(f->r.uncovered, 0);
    assert_int_equal(f->r.covered_seq, 5); /* the checkpoint record, over seq 4 */
    assert_int_equal(f->r.last_seq, 5);

    /* idle: nothing is signed, however often the writer ticks */
    for (int i = 0; i < 3; i++)
        assert_int_equal(audit_log_tick(&f->log, time(NULL), err, sizeof(err)), 0);
    assert_int_equal(f->log.seq, 5);

    /* a trickle that never leaves the log quiet for 20 ms is covered all the
     * same: the delay runs from the first record no checkpoint covers */
    int trickled = 0;
    while (f->log.since_checkpoint > 0 || trickled == 0) {
        struct timespec ts = {0, 5 * 1000000L};
        append_req(f, 200 + trickled++, "acme");
        assert_int_equal(audit_log_tick(&f->log, time(NULL), err, sizeof(err)), 0);
        nanosleep(&ts, NULL);
        assert_true(trickled < 100000);
    }
    print_message("    a checkpoint after %d records of a trickle, 5 ms apart\n", trickled);
    assert_int_equal(audit_log_sync(&f->log, err, sizeof(err)), 0);
    expect_ok(f);
    assert_int_equal(f->r.uncovered, 0);

    /* two records that no checkpoint covers yet (the writer dies before one) */
    f->log.cfg.checkpoint_delay_ms = 3600000;
    uint64_t covered = f->log.seq;
    append_many(f, 2);
    log_crash(f);
    expect_ok(f);
    assert_int_equal(f->r.uncovered, 2);
    assert_int_equal(f->r.covered_seq, covered);
    first_log(f, path, sizeof(path));
    char **orig = read_lines(path, &n);
    assert_int_equal(n, covered + 2);
    /* removing only those is not detected: that is the window verify names */
    cut_log(f, orig, covered);
    expect_ok(f);
    assert_int_equal(f->r.uncovered, 0);
    /* the checkpoint record too: checkpoints.log names it */
    cut_log(f, orig, covered - 1);
    expect_bad(f, NULL, covered, (size_t)-1, "without the checkpoint record");
    /* a covered record */
    cut_log(f, orig, covered - 2);
    expect_bad(f, NULL, covered - 1, (size_t)-1, "the tail was truncated");
    cut_log(f, orig, n);
    expect_ok(f);
    free_lines(orig, n);
}

/* A log emptied of every record, checkpoints.log with it, does not verify
 * as an empty trail. */
static void test_a8_emptied_log(void **state)
{
    struct fixture *f = *state;
    char path[400], ckpt[400];
    size_t n, cn;
    build_trail(f, 3);
    first_log(f, path, sizeof(path));
    snprintf(ckpt, sizeof(ckpt), "%s/checkpoints.log", f->dir);
    char **orig = read_lines(path, &n), **corig = read_lines(ckpt, &cn);
    assert_true(cn >= 1);
    cut_log(f, orig, 0);
    expect_bad(f, NULL, 1, (size_t)-1, "the tail was truncated");
    write_lines(ckpt, corig, 0);
    expect_bad(f, NULL, (uint64_t)-1, (size_t)-1, "holds no record at all");
    cut_log(f, orig, n);
    write_lines(ckpt, corig, cn);
    expect_ok(f);
    free_lines(orig, n);
    free_lines(corig, cn);
}

/* A checkpoint due while a line torn by a full disk waits for its repair
 * record signs the head right before it: the repair's, not the one before. */
static void test_a2_checkpoint_after_torn_line(void **state)
{
    struct fixture *f = *state;
    char err[512], path[400];
    struct rlimit old, lim;

    f->cfg.checkpoint_seconds = 60;
    log_open(f);
    append_many(f, 1);
    first_log(f, path, sizeof(path));
    append_req(f, 20, "acme");
    signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = (rlim_t)(file_size(path) + 20);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    assert_int_not_equal(audit_log_sync(&f->log, err, sizeof(err)), 0);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    assert_int_equal(f->log.torn_pending, 20);
    uint64_t before = f->log.seq;
    assert_int_equal(audit_log_tick(&f->log, time(NULL) + 120, err, sizeof(err)), 0);
    assert_int_equal(f->log.seq, before + 2); /* the repair, then the checkpoint */
    log_crash(f);
    expect_ok(f);
    assert_int_equal(f->r.repairs, 1);
    assert_int_equal(f->r.last_checkpoint_seq, before + 1);
    assert_int_equal(f->r.uncovered, 0);
}

/* ---- an export, verified on its own ------------------------------------------------------------ */

/* ---- the verifier's scanner and jansson read a line alike ---------------------------------- */

/* line with the first `from` replaced by `to` (malloc'd). */
static char *replaced(const char *line, const char *from, const char *to)
{
    const char *p = strstr(line, from);
    assert_non_null(p);
    size_t head = (size_t)(p - line), fl = strlen(from), tl = strlen(to), rest = strlen(p + fl);
    char *s = malloc(head + tl + rest + 1);
    assert_non_null(s);
    memcpy(s, line, head);
    memcpy(s + head, to, tl);
    memcpy(s + head + tl, p + fl, rest + 1);
    return s;
}

static void seq_cb(void *arg, json_t *rec, const char *line, size_t len)
{
    json_int_t *last = arg;
    (void)line;
    (void)len;
    *last = json_integer_value(json_object_get(rec, "seq"));
}

/* The first 7 lines, the 7th replaced by variant re-MACed with its
 * epoch's key, as an export; verified without a callback (the scanner's
 * fields) and with one (the record in jansson too): both must agree with
 * want_ok, and a problem must name needle. */
static void check_variant(struct fixture *f, char **orig, const char *variant, int want_ok, const char *needle)
{
    char exp[400];
    uint8_t key[AUDIT_KEY_LEN];
    json_int_t last = 0;
    json_t *j = json_loads(orig[6], 0, NULL);
    assert_non_null(j);
    key_of(f->k0, (uint64_t)json_integer_value(json_object_get(j, "epoch")), key);
    json_decref(j);
    char *sealed = reseal(variant, NULL, key);
    char *lines[7];
    memcpy(lines, orig, 6 * sizeof(char *));
    lines[6] = sealed;
    snprintf(exp, sizeof(exp), "%s/variant.jsonl", f->root);
    write_lines(exp, lines, 7);
    for (int with_cb = 0; with_cb < 2; with_cb++) {
        int rc = audit_verify_export(exp, f->k0, f->pub, NULL, &f->r, with_cb ? seq_cb : NULL, &last);
        print_message("    %s\n", rc == 0 ? "verifies" : f->r.problem);
        assert_int_equal(rc == 0, want_ok);
        if (want_ok)
            assert_int_equal(f->r.last_seq, 7);
        else if (strstr(f->r.problem, needle) == NULL)
            fail_msg("problem \"%s\" lacks \"%s\"", f->r.problem, needle);
    }
    if (want_ok)
        assert_int_equal(last, 7);
    free(sealed);
}

static void test_verify_scan_and_jansson_agree(void **state)
{
    struct fixture *f = *state;
    char path[400], esc[8];
    size_t n;
    build_trail(f, 8); /* seq 7 is a request record in epoch 1 */
    first_log(f, path, sizeof(path));
    char **orig = read_lines(path, &n);
    assert_true(n >= 7);
    assert_non_null(strstr(orig[6], "\"seq\":7,"));

    /* what the scanner declines, jansson reads with the same values */
    const char *prev = strstr(orig[6], "\"prev\":\"") + 8;
    snprintf(esc, sizeof(esc), "\\u00%02x", (unsigned char)prev[0]);
    char prev_from[12] = "\"prev\":\"", prev_to[20];
    prev_from[8] = prev[0];
    prev_from[9] = '\0';
    snprintf(prev_to, sizeof(prev_to), "\"prev\":\"%s", esc);
    char *v[] = {
        replaced(orig[6], "\"seq\":7", "\"seq\": 7"),                            /* whitespace */
        replaced(orig[6], "\"seq\":7", "\"\\u0073eq\":7"),                       /* an escaped key */
        replaced(orig[6], prev_from, prev_to),                                   /* an escape in prev */
        replaced(orig[6], "\"type\":\"request\"", "\"type\":\"req\\u0075est\""), /* ... in type */
    };
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
        check_variant(f, orig, v[i], 1, NULL);

    /* and what jansson refuses, or reads as something else, fails alike */
    char *b[] = {
        replaced(orig[6], "\"seq\":7,", "\"seq\":7,\"seq\":7,"),                    /* a duplicate key */
        replaced(orig[6], "\"seq\":7", "\"seq\":7.0"),                              /* not an integer */
        replaced(orig[6], "\"seq\":7", "\"seq\":\"7\""),                            /* a string */
        replaced(orig[6], "\"epoch\":", "\"epoch\":-"),                             /* goes back */
        replaced(orig[6], "\"type\":\"request\"", "\"type\":\"\\u0063heckpoint\""), /* a checkpoint in disguise */
    };
    const char *why[] = {"torn", "lacks seq", "lacks seq", "goes back", "bad signature or head"};
    for (size_t i = 0; i < sizeof(b) / sizeof(b[0]); i++)
        check_variant(f, orig, b[i], 0, why[i]);
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
        free(v[i]);
    for (size_t i = 0; i < sizeof(b) / sizeof(b[0]); i++)
        free(b[i]);
    free_lines(orig, n);
}

static int verify_export(struct fixture *f, const char *path, const char *checkpoints)
{
    return audit_verify_export(path, f->k0, f->pub, checkpoints, &f->r, NULL, NULL);
}

static void expect_export_bad(struct fixture *f, const char *path, const char *checkpoints, const char *needle)
{
    assert_int_not_equal(verify_export(f, path, checkpoints), 0);
    print_message("    verify --export: %s\n", f->r.problem);
    if (strstr(f->r.problem, needle) == NULL)
        fail_msg("problem \"%s\" lacks \"%s\"", f->r.problem, needle);
}

/* The lines as stored (moat-audit export), in a file of their own: the
 * chain, the MACs and the signatures check as in the directory; a part cut
 * by time starts later; an edit, a gap or a cut tail is found. */
static void test_export_verified_on_its_own(void **state)
{
    struct fixture *f = *state;
    char path[400], exp[400], ckpt[400];
    size_t n;
    build_trail(f, 30);
    first_log(f, path, sizeof(path));
    snprintf(exp, sizeof(exp), "%s/export.jsonl", f->root);
    snprintf(ckpt, sizeof(ckpt), "%s/checkpoints.log", f->dir);
    char **orig = read_lines(path, &n);

    write_lines(exp, orig, n);
    assert_int_equal(verify_export(f, exp, NULL), 0);
    assert_int_equal(f->r.records, n);
    assert_int_equal(f->r.first_seq, 1);
    assert_int_equal(f->r.uncovered, n); /* no checkpoints list: nothing proves the end */
    assert_int_equal(verify_export(f, exp, ckpt), 0);
    assert_int_equal(f->r.uncovered, 0);

    /* from seq 12 on (export --since) */
    write_lines(exp, orig + 11, n - 11);
    assert_int_equal(verify_export(f, exp, ckpt), 0);
    assert_int_equal(f->r.first_seq, 12);
    assert_int_equal(f->r.records, n - 11);

    /* a record edited */
    char **l = read_lines(path, &n);
    char *p = strstr(l[14], "\"acme\"");
    assert_non_null(p);
    p[1] ^= 0x01;
    write_lines(exp, l, n);
    expect_export_bad(f, exp, NULL, "seq 15 fails its MAC");
    free_lines(l, n);

    /* a record left out */
    l = malloc(n * sizeof(char *));
    memcpy(l, orig, 20 * sizeof(char *));
    memcpy(l + 20, orig + 21, (n - 21) * sizeof(char *));
    write_lines(exp, l, n - 1);
    expect_export_bad(f, exp, NULL, "1 record(s) missing");
    free(l);

    /* the tail cut: only a checkpoints list shows it */
    write_lines(exp, orig, n - 3);
    assert_int_equal(verify_export(f, exp, NULL), 0);
    expect_export_bad(f, exp, ckpt, "the tail was truncated");

    /* empty */
    write_lines(exp, orig, 0);
    expect_export_bad(f, exp, NULL, "holds no record at all");
    free_lines(orig, n);
}

/* The disk reserve's account: a "dropped" record of the writer's own. */
static void test_dropped_record(void **state)
{
    struct fixture *f = *state;
    char err[512];
    struct timespec since = {1764434445, 123000000}, until = {1764434455, 1000000};
    log_open(f);
    append_many(f, 2);
    uint64_t seq = audit_log_dropped(&f->log, 4242, &since, &until, err, sizeof(err));
    assert_int_not_equal(seq, 0);
    assert_int_equal(audit_log_sync(&f->log, err, sizeof(err)), 0);
    char *line = line_of(f, seq);
    assert_non_null(strstr(line, "\"type\":\"dropped\",\"count\":4242,\"since\":\"2025-11-29T16:40:45.123Z\","
                                 "\"until\":\"2025-11-29T16:40:55.001Z\""));
    free(line);
    log_close(f);
    expect_ok(f);
}

/* The writer's index of executions (audit_index.c): a record is found only
 * under its own tenant, a review must name its result exactly, and the
 * oldest entries go once the ring is full (bounded memory). */
static void index_result(struct audit_index *ix, const char *tenant, unsigned i, uint64_t seq)
{
    char body[256];
    struct audit_index_fields f;
    struct audit_line_ref ref = {1, seq * 100, 99, seq, {0}};
    int n = snprintf(body, sizeof(body), "{\"type\":\"result\",\"request_id\":\"r%u\",\"tenant\":\"%s\"}", i, tenant);
    assert_int_equal(audit_index_fields(body, (size_t)n, &f), 0);
    memcpy(ref.hash, &seq, sizeof(seq));
    audit_index_note(ix, &f, &ref);
}

static int index_review(struct audit_index *ix, const char *tenant, unsigned i, uint64_t seq)
{
    char body[512], hex[AUDIT_HEX_LEN + 1];
    uint8_t h[AUDIT_HASH_LEN] = {0};
    memcpy(h, &seq, sizeof(seq));
    moat_hex_encode(h, sizeof(h), hex);
    int n = snprintf(body, sizeof(body),
                     "{\"type\":\"review\",\"request_id\":\"r%u\",\"tenant\":\"%s\",\"key_id\":\"k\","
                     "\"verdict\":\"approved\",\"note\":\"\",\"result_seq\":%llu,\"result_sha256\":\"%s\"}",
                     i, tenant, (unsigned long long)seq, hex);
    char err[256];
    errno = 0;
    return audit_index_check_review(ix, body, (size_t)n, err, sizeof(err)) == 0 ? 0 : errno;
}

static void test_index_tenant_and_ring(void **state)
{
    (void)state;
    struct audit_index *ix = audit_index_new();
    assert_non_null(ix);
    index_result(ix, "acme", 1, 10);
    assert_int_equal(index_review(ix, "acme", 1, 10), 0);
    assert_int_equal(index_review(ix, "other", 1, 10), ENOENT); /* not another tenant's */
    assert_int_equal(index_review(ix, "acme", 1, 11), ENOENT);  /* not another line */
    assert_int_equal(index_review(ix, "acme", 2, 10), ENOENT);
    /* a denial is not indexed */
    struct audit_index_fields f;
    const char *denied = "{\"type\":\"request\",\"request_id\":\"r3\",\"tenant\":\"acme\",\"decision\":\"denied\"}";
    assert_int_equal(audit_index_fields(denied, strlen(denied), &f), 0);
    assert_int_equal(f.allowed, 0);
    assert_string_equal(f.request_id, "r3");
    /* escaped strings are decoded (the slow path's encoding finds the same entry) */
    const char *esc = "{\"type\":\"result\",\"request_id\":\"r\\u0031\",\"tenant\":\"acme\"}";
    assert_int_equal(audit_index_fields(esc, strlen(esc), &f), 0);
    assert_string_equal(f.request_id, "r1");
    /* a full ring drops the oldest */
    for (unsigned i = 100; i < 100 + AUDIT_INDEX_RECORDS; i++)
        index_result(ix, "acme", i, i + 1000);
    assert_int_equal(index_review(ix, "acme", 1, 10), ENOENT);
    assert_int_equal(index_review(ix, "acme", 100, 1100), 0);
    assert_int_equal(index_review(ix, "acme", 99 + AUDIT_INDEX_RECORDS, 1099 + AUDIT_INDEX_RECORDS), 0);
    audit_index_free(ix);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_a1_flip_byte, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a1_delete_insert_reorder, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a2_truncate_tail, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a2_forged_checkpoint_line, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a3_remac_with_current_key, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a4_torn_tail_repaired, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a4_torn_tail_twice_and_new_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a4_whole_record_without_newline_adopted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a5_hostile_strings, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a6_moat_cannot_rewrite, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a7_ratchet_and_rotation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a7_state_behind_log, setup, teardown),
        cmocka_unit_test_setup_teardown(test_packets_stored_exactly, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pack_retention, setup, teardown),
        cmocka_unit_test_setup_teardown(test_verify_callback_stops_at_failure, setup, teardown),
        cmocka_unit_test_setup_teardown(test_text_fast_and_slow_agree, setup, teardown),
        cmocka_unit_test_setup_teardown(test_text_rejections, setup, teardown),
        cmocka_unit_test_setup_teardown(test_text_hostile_bytes, setup, teardown),
        cmocka_unit_test(test_mac_context_matches_hmac),
        cmocka_unit_test_setup_teardown(test_text_ratchet_epochs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_batch_short_write, setup, teardown),
        cmocka_unit_test_setup_teardown(test_batch_failure_outlives_inner_syncs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rotation_ends_torn_line_first, setup, teardown),
        cmocka_unit_test_setup_teardown(test_text_cost, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a8_checkpoint_delay, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a8_emptied_log, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a2_checkpoint_after_torn_line, setup, teardown),
        cmocka_unit_test_setup_teardown(test_export_verified_on_its_own, setup, teardown),
        cmocka_unit_test_setup_teardown(test_verify_scan_and_jansson_agree, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dropped_record, setup, teardown),
        cmocka_unit_test(test_index_tenant_and_ring),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
