/*
 * moat-audit-writer - the audit writer process.
 *
 * Theory of operation
 * -------------------
 * moat-gateway's privileged parent starts this program with one end of a
 * socketpair per gateway worker on descriptors 3, 4, ... (--clients N).  If
 * started as root it drops to the audit user (--user, default moat-audit),
 * keeping only CAP_LINUX_IMMUTABLE so it can mark new log files append-only
 * (chattr +a) where the filesystem permits.  It then opens the audit
 * directory (its own, mode 0700), repairs a torn tail left by a crash,
 * and serves the sockets with group commit until they all close, then
 * writes a final signed checkpoint.  The request handlers never hold the
 * log's descriptor or its keys.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <linux/capability.h>
#include <pwd.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "audit_writer.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: moat-audit-writer --dir DIR --clients N [--user USER] [--no-packets]\n"
               "           [--checkpoint-records N] [--checkpoint-seconds N] [--checkpoint-delay-ms N]\n"
               "           [--epoch-records N] [--epoch-seconds N] [--rotate-bytes N] [--rotate-seconds N]\n"
               "           [--packet-retention-days N] [--reserve-bytes N]\n"
               "  the client sockets are descriptors 3 .. 3+N-1 (started by moat-gateway)\n"
               "  --checkpoint-records N, --checkpoint-seconds N\n"
               "        a signed checkpoint after N records or N seconds, whichever first (1000, 60)\n"
               "  --checkpoint-delay-ms N\n"
               "        ... and at most N ms after the first record no checkpoint covers yet (1000)\n"
               "  --epoch-records N, --epoch-seconds N\n"
               "        the MAC key ratchets after N records or N seconds (1000, 300)\n"
               "  --rotate-bytes N, --rotate-seconds N\n"
               "        a new log file past N bytes or N seconds (67108864, 86400)\n"
               "  --packet-retention-days N\n"
               "        packets older than N days are removed; 0 keeps them (30)\n"
               "  --reserve-bytes N\n"
               "        with less than N bytes free, records nobody waits for (denials) are counted,\n"
               "        not written; 0 turns the reserve off (67108864)\n"
               "see moat-audit-writer(8)\n");
}

/* A whole decimal number in [min, max], or -1 with one line on stderr. */
static int parse_number(const char *opt, const char *text, uint64_t min, uint64_t max, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (text[0] < '0' || text[0] > '9' || *end != '\0' || errno != 0 || v < min || v > max) {
        fprintf(stderr, "moat-audit-writer: --%s: want a whole number from %llu to %llu, not \"%s\"\n", opt,
                (unsigned long long)min, (unsigned long long)max, text);
        return -1;
    }
    *out = v;
    return 0;
}

/* Drops to user, keeping CAP_LINUX_IMMUTABLE only. */
static int drop_privileges(const char *user)
{
    struct passwd *pw = getpwnam(user);
    if (pw == NULL) {
        fprintf(stderr, "moat-audit-writer: unknown user %s\n", user);
        return -1;
    }
    if (pw->pw_uid == 0) {
        fprintf(stderr, "moat-audit-writer: refusing to run as uid 0\n");
        return -1;
    }
    if (prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) != 0 || setgroups(0, NULL) != 0 || setresgid(pw->pw_gid, pw->pw_gid, pw->pw_gid) != 0 ||
        setresuid(pw->pw_uid, pw->pw_uid, pw->pw_uid) != 0) {
        fprintf(stderr, "moat-audit-writer: cannot drop to %s: %s\n", user, strerror(errno));
        return -1;
    }
    struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2];
    memset(data, 0, sizeof(data));
    data[CAP_LINUX_IMMUTABLE / 32].permitted = data[CAP_LINUX_IMMUTABLE / 32].effective = 1u << (CAP_LINUX_IMMUTABLE % 32);
    if (syscall(SYS_capset, &hdr, data) != 0) /* not fatal: append-only is "where permitted" */
        fprintf(stderr, "moat-audit-writer: keeping CAP_LINUX_IMMUTABLE failed: %s\n", strerror(errno));
    prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0);
    if (setresuid(0, 0, 0) == 0) {
        fprintf(stderr, "moat-audit-writer: could regain root, refusing to run\n");
        return -1;
    }
    return 0;
}

/* What the command line asks for. */
struct args {
    const char *dir, *user;
    int nclients;
    struct audit_config cfg;
};

/* The cadences: option, its range, its scale and where it goes (audit_log.h). */
struct tuning {
    const char *name;
    uint64_t min, max, scale;
    size_t field; /* offsetof(struct audit_config, ...) */
};

#define TUNE(field) offsetof(struct audit_config, field)

static const struct tuning tuning[] = {
    {"checkpoint-records", 1, 10000000, 1, TUNE(checkpoint_records)},
    {"checkpoint-seconds", 1, 86400, 1, TUNE(checkpoint_seconds)},
    {"checkpoint-delay-ms", 10, 3600000, 1, TUNE(checkpoint_delay_ms)},
    {"epoch-records", 1, 10000000, 1, TUNE(epoch_records)},
    {"epoch-seconds", 1, 30 * 86400, 1, TUNE(epoch_seconds)},
    {"rotate-bytes", 65536, 1ull << 40, 1, TUNE(rotate_bytes)},
    {"rotate-seconds", 60, 366 * 86400, 1, TUNE(rotate_seconds)},
    {"packet-retention-days", 0, 3650, 86400, TUNE(packet_retention_s)},
    {"reserve-bytes", 0, 1ull << 40, 1, TUNE(reserve_bytes)},
};

enum { NTUNING = sizeof(tuning) / sizeof(tuning[0]), OPT_TUNING = 1000 };

/* A cadence option (ch from getopt_long): 0, or -1 after saying why. */
static int set_tuning(struct args *a, int ch, const char *text)
{
    const struct tuning *t = &tuning[ch - OPT_TUNING];
    uint64_t n;
    if (parse_number(t->name, text, t->min, t->max, &n) != 0)
        return -1;
    *(uint64_t *)((char *)&a->cfg + t->field) = n * t->scale;
    return 0;
}

/* 0 to run, else the exit status (0 after --help). */
static int parse_args(int argc, char **argv, struct args *a, int *exit_code)
{
    struct option opts[5 + NTUNING + 1] = {{"dir", required_argument, NULL, 'd'},
                                           {"clients", required_argument, NULL, 'c'},
                                           {"user", required_argument, NULL, 'u'},
                                           {"no-packets", no_argument, NULL, 'P'},
                                           {"help", no_argument, NULL, 'h'}};
    int ch, idx;
    uint64_t n;

    memset(a, 0, sizeof(*a));
    a->user = "moat-audit";
    audit_config_defaults(&a->cfg);
    for (int t = 0; t < NTUNING; t++)
        opts[5 + t] = (struct option){tuning[t].name, required_argument, NULL, OPT_TUNING + t};
    *exit_code = 2;
    while ((ch = getopt_long(argc, argv, "d:c:u:Ph", opts, &idx)) != -1) {
        switch (ch) {
        case 'd':
            a->dir = optarg;
            break;
        case 'c':
            if (parse_number("clients", optarg, 1, 512, &n) != 0)
                return -1;
            a->nclients = (int)n;
            break;
        case 'u':
            a->user = optarg;
            break;
        case 'P':
            a->cfg.packets = 0;
            break;
        case 'h':
            usage(stdout);
            *exit_code = 0;
            return -1;
        default:
            if (ch >= OPT_TUNING && ch < OPT_TUNING + NTUNING) {
                if (set_tuning(a, ch, optarg) != 0)
                    return -1;
                break;
            }
            usage(stderr);
            return -1;
        }
    }
    if (a->dir == NULL || a->nclients < 1 || a->nclients > 512) {
        usage(stderr);
        return -1;
    }
    return 0;
}

/* The tests' overrides (MOAT_AUDIT_*): they win over the options. */
static void env_overrides(struct audit_config *cfg)
{
    const char *env;
    if ((env = getenv("MOAT_AUDIT_CHECKPOINT_RECORDS")) != NULL)
        cfg->checkpoint_records = strtoull(env, NULL, 10);
    if ((env = getenv("MOAT_AUDIT_EPOCH_RECORDS")) != NULL)
        cfg->epoch_records = strtoull(env, NULL, 10);
    if ((env = getenv("MOAT_AUDIT_ROTATE_BYTES")) != NULL)
        cfg->rotate_bytes = strtoull(env, NULL, 10);
}

/* Opens the log and serves the sockets 3 .. 3+nclients-1 until they close. */
static int serve(const struct args *a)
{
    struct audit_log log;
    char err[512];
    int fds[512];
    if (audit_log_open(&log, a->dir, &a->cfg, err, sizeof(err)) != 0) {
        fprintf(stderr, "moat-audit-writer: %s\n", err);
        return 1;
    }
    if (!log.appended_ok && a->cfg.append_only)
        fprintf(stderr, "moat-audit-writer: note: chattr +a not permitted here; the log relies on its owner and mode\n");
    int vfd = openat(log.dirfd, "verifier.key", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (vfd >= 0) { /* a directory made before init kept it from the writer */
        close(vfd);
        fprintf(stderr, "moat-audit-writer: WARNING: this user can read verifier.key (K0: every epoch's MAC key derives from "
                        "it); chown it to root, mode 0600, or keep it off this host\n");
    }
    for (int i = 0; i < a->nclients; i++)
        fds[i] = 3 + i;
    int rc = audit_writer_run(&log, fds, a->nclients);
    audit_log_close(&log);
    return rc == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    struct args a;
    int code;
    if (parse_args(argc, argv, &a, &code) != 0)
        return code;
    signal(SIGPIPE, SIG_IGN);
    signal(SIGINT, SIG_IGN); /* ends when the gateway closes the sockets */
    if (geteuid() == 0 && drop_privileges(a.user) != 0)
        return 1;
    env_overrides(&a.cfg);
    return serve(&a);
}
