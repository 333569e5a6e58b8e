/*
 * privsep.c - the gateway's process table when the audit trail is on.
 *
 *   process       user         does
 *   supervisor    root         starts and restarts the audit writer; hands
 *                              the gateway fresh sockets to it; forwards
 *                              signals; exits with the gateway
 *   gateway       moat         TLS, HTTP, policy, backend calls (workers)
 *   audit writer  moat-audit   owns the log (audit/writer_main.c, exec'd)
 *   callback      moat, or     sends Judge0 callbacks (callback_sender_main.c,
 *   sender        callbacks.   exec'd; only with a callbacks section): the
 *                 user         one process with outbound network
 *
 * Only the supervisor keeps root, and it does nothing but the above and,
 * with a control section, serve moatctl on the control socket (control.c:
 * peers checked by uid, every request bounded in size and time) and, with
 * the admin store in Redis, keep this gateway's copy of it in step (its
 * only network input: Redis, every call bounded by the limiter section's
 * timeouts).  Each gateway worker has its own socketpair to
 * the writer.  When the writer dies, the supervisor starts a new one with
 * new socketpairs and sends the gateway's ends over the control socket
 * (SCM_RIGHTS); until then records fail and the gateway refuses requests
 * (fail closed), and afterwards it recovers by itself.
 *
 * The callback sender reads one SOCK_SEQPACKET socket whose other end all
 * the gateway's workers share (judge0_callback.c).  The supervisor keeps
 * the sender's end: when the sender dies it starts a new one on the same
 * end, so the gateway never needs a new socket and what the workers wrote
 * meanwhile waits in it.  The gateway's end gets a large send buffer
 * (SO_SNDBUFFORCE, only root may) so that bursts queue instead of being
 * dropped.  SIGHUP goes to the sender as well (it reloads the
 * configuration); it stops by itself when the gateway's end closes.
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

#include "common/gw_limits.h"
#include "log.h"
#include "moat_io.h"
#include "admin/control.h"

#define RESTART_BACKOFF_MS 500

_Static_assert(GW_PRIVSEP_MAX_FDS <= MOAT_IO_MAX_FDS, "one moat_send_fds carries every worker's socket");

/* The writer with nfds client sockets (the workers', and the supervisor's own
 * last when there is a control socket); their other ends in gateway_ends. */
static pid_t spawn_writer(const struct gw_audit_config *ac, int nfds, int *gateway_ends)
{
    int pairs[GW_PRIVSEP_MAX_FDS + 1][2];
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
        int high[GW_PRIVSEP_MAX_FDS + 1];
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

/* The callback sender on its socket end (which stays ours): descriptor 3 in the new program. */
static pid_t spawn_sender(const struct gw_sender_spec *cs, int end)
{
    pid_t pid = fork();

    if (pid < 0) {
        log_warn("%s: fork", __func__);
        return -1;
    }
    if (pid == 0) {
        int high = fcntl(end, F_DUPFD, 16);
        if (high < 0 || dup2(high, 3) != 3)
            _exit(126);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        char *argv[] = {(char *)(uintptr_t)cs->program, (char *)(uintptr_t) "--config",
                        (char *)(uintptr_t)cs->config,  (char *)(uintptr_t) "--user",
                        (char *)(uintptr_t)cs->user,    (char *)(uintptr_t) "--fd",
                        (char *)(uintptr_t) "3",        NULL};
        execv(cs->program, argv);
        _exit(127);
    }
    return pid;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* What the supervisor watches. */
struct supervised {
    const struct gw_audit_config *ac;
    const struct gw_sender_spec *cs; /* NULL: no sender */
    int nfds;
    pid_t gateway, writer, sender;
    int ctl;                    /* the control socket to the gateway */
    int sender_end;             /* the sender's end of its socket; -1 without one */
    struct gw_control *control; /* moatctl's socket (listen_fd -1: none) and the supervisor's own writer socket */
};

/* The writer exited: a new one, and its sockets to the gateway. */
static void restart_writer(struct supervised *sv, int st)
{
    int ends[GW_PRIVSEP_MAX_FDS + 1], own = sv->control->listen_fd >= 0;

    log_warnx("supervisor: audit writer exited (%s %d): restarting it", WIFEXITED(st) ? "status" : "signal",
              WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
    sv->writer = -1;
    gw_control_set_writer(sv->control, -1, -1);
    while (sv->writer < 0) {
        sleep_ms(RESTART_BACKOFF_MS);
        sv->writer = spawn_writer(sv->ac, sv->nfds + own, ends);
    }
    if (moat_send_fds(sv->ctl, ends, (size_t)sv->nfds) != 0)
        log_warn("supervisor: cannot hand the new audit sockets to the gateway");
    for (int i = 0; i < sv->nfds; i++)
        close(ends[i]);
    gw_control_set_writer(sv->control, sv->writer, own ? ends[sv->nfds] : -1);
}

/* The sender exited: a new one on the same socket end. */
static void restart_sender(struct supervised *sv, int st)
{
    log_warnx("supervisor: callback sender exited (%s %d): restarting it", WIFEXITED(st) ? "status" : "signal",
              WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
    sv->sender = -1;
    while (sv->sender < 0) {
        sleep_ms(GW_CALLBACK_RESTART_BACKOFF_MS);
        sv->sender = spawn_sender(sv->cs, sv->sender_end);
    }
}

/* The gateway is gone: the writer and the sender see their sockets close,
 * finish and exit; so does the supervisor, with the gateway's status. */
static __attribute__((noreturn)) void gateway_exited(struct supervised *sv, int st)
{
    gw_control_flush_used(sv->control); /* the last minutes' keys' use, which the next start lists */
    gw_control_close(sv->control);
    gw_control_set_writer(sv->control, -1, -1);
    close(sv->ctl);
    if (sv->sender_end >= 0)
        close(sv->sender_end);
    if (sv->writer > 0)
        waitpid(sv->writer, NULL, 0);
    if (sv->sender > 0)
        waitpid(sv->sender, NULL, 0);
    exit(WIFEXITED(st) ? WEXITSTATUS(st) : 1);
}

/* The supervisor's loop: signals (SIGCHLD: the writer, the sender or the
 * gateway) and the control socket's clients.  Never returns. */
static __attribute__((noreturn)) void supervise(struct supervised *sv)
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
    sv->control->ctl = sv->ctl;
    sv->control->gateway = sv->gateway;
    for (;;) {
        struct signalfd_siginfo si;
        struct pollfd pfd[1 + GW_CONTROL_MAX_POLLFDS];
        pfd[0] = (struct pollfd){sfd, POLLIN, 0};
        int n = 1 + gw_control_pollfds(sv->control, pfd + 1, GW_CONTROL_MAX_POLLFDS);
        if (poll(pfd, (nfds_t)n, gw_control_timeout(sv->control)) < 0 && errno != EINTR)
            fatal("poll");
        gw_control_serve(sv->control, pfd + 1, n - 1);
        if (!(pfd[0].revents & POLLIN) || read(sfd, &si, sizeof(si)) != (ssize_t)sizeof(si))
            continue;
        if (si.ssi_signo != SIGCHLD) {
            /* signals for the gateway (stop, reload) go to it; a reload to the sender too */
            kill(sv->gateway, (int)si.ssi_signo);
            if (si.ssi_signo == SIGHUP && sv->sender > 0)
                kill(sv->sender, SIGHUP);
            continue;
        }
        int st;
        pid_t p;
        while ((p = waitpid(-1, &st, WNOHANG)) > 0) {
            if (p == sv->gateway)
                gateway_exited(sv, st);
            if (p == sv->writer)
                restart_writer(sv, st);
            else if (p == sv->sender)
                restart_sender(sv, st);
        }
    }
}

/* The sender's socket: [0] the gateway's end (a large send buffer), [1] the sender's. */
static int sender_socket(const struct gw_sender_spec *cs, int sv[2], char *err, size_t errlen)
{
    int bytes = GW_CALLBACK_SOCKET_BYTES;

    if (access(cs->program, X_OK) != 0) {
        snprintf(err, errlen, "callbacks.sender %s: %s", cs->program, strerror(errno));
        return -1;
    }
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
        snprintf(err, errlen, "socketpair: %s", strerror(errno));
        return -1;
    }
    if (setsockopt(sv[0], SOL_SOCKET, SO_SNDBUFFORCE, &bytes, sizeof(bytes)) != 0)
        log_warn("%s: SO_SNDBUFFORCE: callbacks queue in the default socket buffer", __func__);
    return 0;
}

/* The supervisor keeps only what it uses, renumbered from 3 and
 * close-on-exec (a restarted writer or sender inherits none of them); above
 * all not the listening sockets, or connections would queue on them after
 * the gateway stopped accepting.  fds[i] < 0 stays so. */
static void keep_only(int *fds, int n)
{
    int high[8], next = 3;

    for (int i = 0; i < n; i++)
        if (fds[i] >= 0 && (high[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 1024)) < 0)
            fatal("%s: fcntl", __func__);
    for (int i = 0; i < n; i++) {
        if (fds[i] < 0)
            continue;
        if (dup3(high[i], next, O_CLOEXEC) != next)
            fatal("%s: dup3", __func__);
        fds[i] = next++;
    }
    if (syscall(SYS_close_range, (unsigned)next, ~0U, 0) != 0)
        for (int fd = next; fd < 65536; fd++)
            close(fd);
}

int gw_privsep_start(const struct gw_audit_config *ac, const struct gw_sender_spec *cs, int nfds, int *audit_fds, int *ctl_fd,
                     int *callback_fd, struct gw_control *control, char *err, size_t errlen)
{
    int ctl[2], cb[2] = {-1, -1}, ends[GW_PRIVSEP_MAX_FDS + 1], own = control->listen_fd >= 0;
    struct supervised sv = {ac, cs, nfds, -1, -1, -1, -1, -1, control};
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
    if (cs != NULL && sender_socket(cs, cb, err, errlen) != 0)
        return -1;
    if ((sv.writer = spawn_writer(ac, nfds + own, ends)) < 0) {
        snprintf(err, errlen, "cannot start the audit writer");
        return -1;
    }
    memcpy(audit_fds, ends, sizeof(int) * (size_t)nfds);
    if (cs != NULL && (sv.sender = spawn_sender(cs, cb[1])) < 0) {
        snprintf(err, errlen, "cannot start the callback sender");
        return -1;
    }
    if ((sv.gateway = fork()) < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        return -1;
    }
    if (sv.gateway == 0) {
        close(ctl[0]);
        if (cb[1] >= 0)
            close(cb[1]);
        if (own)
            close(ends[nfds]);
        gw_control_forget(control);
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        *ctl_fd = ctl[1];
        *callback_fd = cb[0];
        return 0; /* the gateway continues: drop privileges, run workers */
    }
    if (cb[0] >= 0)
        close(cb[0]);
    /* the ctl socket, the sender's end (kept for its restarts), moatctl's socket, the supervisor's writer socket */
    int keep[4] = {ctl[0], cb[1], control->listen_fd, own ? ends[nfds] : -1};
    keep_only(keep, 4);
    sv.ctl = keep[0];
    sv.sender_end = keep[1];
    control->listen_fd = keep[2];
    gw_control_set_writer(control, sv.writer, keep[3]);
    supervise(&sv);
}
