/*
 * privsep.c - the gateway's process table when the audit trail is on.
 *
 *   process       user         does
 *   supervisor    root         starts and restarts the audit writer; hands
 *                              the gateway fresh sockets to it; forwards
 *                              signals; exits with the gateway
 *   gateway       moat         TLS, HTTP, policy, backend calls (workers)
 *   audit writer  moat-audit   owns the log (audit/writer_main.c, exec'd)
 *
 * Only the supervisor keeps root, and it does nothing but the above: it
 * reads no network input.  Each gateway worker has its own socketpair to
 * the writer.  When the writer dies, the supervisor starts a new one with
 * new socketpairs and sends the gateway's ends over the control socket
 * (SCM_RIGHTS); until then records fail and the gateway refuses requests
 * (fail closed), and afterwards it recovers by itself.
 */
#include "privsep.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "moat_io.h"

#define RESTART_BACKOFF_MS 500

_Static_assert(GW_PRIVSEP_MAX_FDS <= MOAT_IO_MAX_FDS, "one moat_send_fds carries every worker's socket");

const struct gw_audit_tuning_spec gw_audit_tuning_specs[GW_AUDIT_NTUNING] = {
    [GW_AUDIT_CHECKPOINT_RECORDS] = {"checkpoint_records", "--checkpoint-records", 1, 10000000},
    [GW_AUDIT_CHECKPOINT_SECONDS] = {"checkpoint_seconds", "--checkpoint-seconds", 1, 86400},
    [GW_AUDIT_CHECKPOINT_DELAY_MS] = {"checkpoint_delay_ms", "--checkpoint-delay-ms", 10, 3600000},
    [GW_AUDIT_EPOCH_RECORDS] = {"epoch_records", "--epoch-records", 1, 10000000},
    [GW_AUDIT_EPOCH_SECONDS] = {"epoch_seconds", "--epoch-seconds", 1, 30 * 86400},
    [GW_AUDIT_ROTATE_BYTES] = {"rotate_bytes", "--rotate-bytes", 65536, 1ull << 40},
    [GW_AUDIT_ROTATE_SECONDS] = {"rotate_seconds", "--rotate-seconds", 60, 366 * 86400},
    [GW_AUDIT_PACKET_RETENTION_DAYS] = {"packet_retention_days", "--packet-retention-days", 0, 3650},
    [GW_AUDIT_RESERVE_BYTES] = {"reserve_bytes", "--reserve-bytes", 0, 1ull << 40},
};

static pid_t spawn_writer(const struct gw_audit_config *ac, int nfds, int *gateway_ends)
{
    int pairs[GW_PRIVSEP_MAX_FDS][2];
    for (int i = 0; i < nfds; i++) {
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pairs[i]) != 0) {
            log_warn("%s: socketpair", __func__);
            for (int j = 0; j < i; j++) {
                close(pairs[j][0]);
                close(pairs[j][1]);
            }
            return -1;
        }
    }
    pid_t pid = fork();
    if (pid < 0) {
        log_warn("%s: fork", __func__);
        for (int i = 0; i < nfds; i++) {
            close(pairs[i][0]);
            close(pairs[i][1]);
        }
        return -1;
    }
    if (pid == 0) {
        /* the writer's ends become descriptors 3 .. 3+n-1; nothing else survives exec */
        int high[GW_PRIVSEP_MAX_FDS];
        for (int i = 0; i < nfds; i++)
            high[i] = fcntl(pairs[i][1], F_DUPFD, 3 + nfds + 16);
        for (int i = 0; i < nfds; i++)
            if (high[i] < 0 || dup2(high[i], 3 + i) != 3 + i)
                _exit(126);
        char clients[16];
        snprintf(clients, sizeof(clients), "%d", nfds);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        char *argv[8 + 2 * GW_AUDIT_NTUNING + 1], values[GW_AUDIT_NTUNING][24];
        int argc = 0;
        argv[argc++] = (char *)(uintptr_t)ac->writer;
        argv[argc++] = (char *)(uintptr_t) "--dir";
        argv[argc++] = (char *)(uintptr_t)ac->dir;
        argv[argc++] = (char *)(uintptr_t) "--clients";
        argv[argc++] = clients;
        argv[argc++] = (char *)(uintptr_t) "--user";
        argv[argc++] = (char *)(uintptr_t)ac->user;
        if (!ac->packets)
            argv[argc++] = (char *)(uintptr_t) "--no-packets";
        for (int t = 0; t < GW_AUDIT_NTUNING; t++) {
            if (!(ac->tuning_set & (1u << t)))
                continue;
            snprintf(values[t], sizeof(values[t]), "%llu", (unsigned long long)ac->tuning[t]);
            argv[argc++] = (char *)(uintptr_t)gw_audit_tuning_specs[t].flag;
            argv[argc++] = values[t];
        }
        argv[argc] = NULL;
        execv(ac->writer, argv);
        _exit(127);
    }
    for (int i = 0; i < nfds; i++) {
        close(pairs[i][1]);
        gateway_ends[i] = pairs[i][0];
    }
    return pid;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* The supervisor's loop: never returns. */
static __attribute__((noreturn)) void supervise(const struct gw_audit_config *ac, int nfds, pid_t gateway, pid_t writer, int ctl)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    sigprocmask(SIG_BLOCK, &set, NULL);
    int sfd = signalfd(-1, &set, SFD_CLOEXEC);
    if (sfd < 0)
        fatal("signalfd");
    for (;;) {
        struct signalfd_siginfo si;
        struct pollfd pfd = {sfd, POLLIN, 0};
        if (poll(&pfd, 1, -1) < 0 && errno != EINTR)
            fatal("poll");
        if (read(sfd, &si, sizeof(si)) != (ssize_t)sizeof(si))
            continue;
        if (si.ssi_signo != SIGCHLD) {
            /* signals for the gateway (stop, reload) go to it */
            kill(gateway, (int)si.ssi_signo);
            continue;
        }
        int st;
        pid_t p;
        while ((p = waitpid(-1, &st, WNOHANG)) > 0) {
            if (p == gateway) {
                /* the writer sees its sockets close, checkpoints and exits */
                close(ctl);
                if (writer > 0)
                    waitpid(writer, NULL, 0);
                exit(WIFEXITED(st) ? WEXITSTATUS(st) : 1);
            }
            if (p == writer) {
                log_warnx("supervisor: audit writer exited (%s %d): restarting it", WIFEXITED(st) ? "status" : "signal",
                          WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
                writer = -1;
                int ends[GW_PRIVSEP_MAX_FDS];
                while (writer < 0) {
                    sleep_ms(RESTART_BACKOFF_MS);
                    writer = spawn_writer(ac, nfds, ends);
                }
                if (moat_send_fds(ctl, ends, (size_t)nfds) != 0)
                    log_warn("supervisor: cannot hand the new audit sockets to the gateway");
                for (int i = 0; i < nfds; i++)
                    close(ends[i]);
            }
        }
    }
}

int gw_privsep_start(const struct gw_audit_config *ac, int nfds, int *audit_fds, int *ctl_fd, char *err, size_t errlen)
{
    int ctl[2];
    if (nfds < 1 || nfds > GW_PRIVSEP_MAX_FDS) {
        snprintf(err, errlen, "audit: %d workers is more than %d", nfds, GW_PRIVSEP_MAX_FDS);
        return -1;
    }
    if (access(ac->writer, X_OK) != 0) {
        snprintf(err, errlen, "audit.writer %s: %s", ac->writer, strerror(errno));
        return -1;
    }
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ctl) != 0) {
        snprintf(err, errlen, "socketpair: %s", strerror(errno));
        return -1;
    }
    pid_t writer = spawn_writer(ac, nfds, audit_fds);
    if (writer < 0) {
        snprintf(err, errlen, "cannot start the audit writer");
        return -1;
    }
    pid_t gateway = fork();
    if (gateway < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        return -1;
    }
    if (gateway == 0) {
        close(ctl[0]);
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        *ctl_fd = ctl[1];
        return 0; /* the gateway continues: drop privileges, run workers */
    }
    /* the supervisor keeps its control socket and nothing else: above all
     * not the listening sockets, or connections would queue on them after
     * the gateway stopped accepting */
    int keep = ctl[0] == 3 ? 3 : dup2(ctl[0], 3);
    if (keep != 3)
        fatal("%s: dup2", __func__);
    if (syscall(SYS_close_range, 4, ~0U, 0) != 0)
        for (int fd = 4; fd < 65536; fd++)
            close(fd);
    supervise(ac, nfds, gateway, writer, 3);
}
