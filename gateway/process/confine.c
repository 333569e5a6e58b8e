/*
 * confine.c - what the internet-facing process may still ask of the kernel.
 *
 * After the privilege drop the gateway only serves: h2o event loops on
 * epoll, TLS in memory, connections it accepts on listeners bound before
 * the drop, Unix sockets it connects to the backend, audit writer sockets
 * that arrive by SCM_RIGHTS, on SIGHUP the configuration, certificate
 * and key files read again, and the files of Judge0 results' store
 * directory (judge0_store.c) when one is configured.  A
 * process that does only that never needs to start a program, trace or
 * read another process, create a process, mount, enter or make namespaces,
 * load modules or BPF, or use keyrings, so an attacker who takes over a
 * worker cannot either.
 *
 * Three kinds of answer:
 *   - allowed: the calls the gateway and its libraries (glibc, OpenSSL,
 *     libh2o, jansson, libyaml, libjwt) were seen to make after the drop,
 *     running the whole test suite, plus a few for paths the tests rarely
 *     or never reach (h2o's file-backed buffers, abort, signal handlers,
 *     large reallocs);
 *   - killed (SIGSYS): calls that only an attacker would make from here;
 *     the process dies at once and the kernel logs the call;
 *   - EPERM for everything else, logged by the kernel too (the filter's
 *     log flag): a library that starts using a new call gets an error it
 *     can handle instead of taking the service down, and the log names
 *     the call to add.
 * clone3 answers ENOSYS: its flags are in memory where the filter cannot
 * look, and glibc then falls back to clone, whose flags it can.
 *
 * The callback sender (callback_sender_main.c) is the one process with
 * outbound network: the gateway's filter plus what libcurl, GnuTLS and
 * glibc's resolver need to reach a receiver (sender_extra below: IPv4 and
 * IPv6 sockets, a netlink socket for getaddrinfo's address configuration,
 * datagrams to the name servers).  It still may not start programs or
 * processes, nor anything else on the killed list.
 */
#include "confine.h"

#include <errno.h>
#include <linux/sched.h>
#include <seccomp.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>

#include "seccomp_build.h"

/*
 * Allowed with any arguments.  Each call was seen after the drop, by
 * strace -f over the e2e suite and the benchmarks (requests on both HTTP
 * versions, reloads with new certificates, audit writer restarts), unless
 * its comment gives another reason.
 */
static const char *const allowed[] = {
    /* descriptors and files (SIGHUP reads config, certificate and key again);
     * fstat: what newfstatat(fd, "", AT_EMPTY_PATH) does, for other libc builds */
    "read",
    "write",
    "writev",
    "openat",
    "close",
    "newfstatat",
    "fstat",
    "lseek",
    "fcntl",
    "pipe2",
    /* h2o's buffers past 32 MiB go into a file: mkstemp (openat), unlink,
     * posix_fallocate (fallocate, or ftruncate), mmap; dup: perror().  Seen
     * refused in the kernel log once; test_h2o_large_buffer_works since */
    "unlink",
    "fallocate",
    "ftruncate",
    "dup",
    /* judge0_store.c's directory store (submissions.store_dir): a record is
     * written to a temporary file, fsync'ed, renamed over its token and the
     * directory fsync'ed (renameat2 where libc or the architecture has no
     * plain renameat); mkdirat: a tenant's first record makes its
     * directory; unlinkat: expired or evicted records, temporary files;
     * getdents64: the sweep and a tenant's count (readdir) */
    "fsync",
    "renameat",
    "renameat2",
    "mkdirat",
    "unlinkat",
    "getdents64",
    /* event loops and the main thread's signal wait; restart_syscall: a poll
     * or sleep resumed after SIGSTOP/SIGCONT */
    "epoll_create",
    "epoll_ctl",
    "epoll_wait",
    "poll",
    "signalfd4",
    "pause",
    "restart_syscall",
    /* memory; mremap: realloc of a large (mmapped) buffer */
    "mmap",
    "munmap",
    "mprotect",
    "madvise",
    "brk",
    "mremap",
    /* threads (clone itself is below); exit: a thread's end */
    "futex",
    "set_robust_list",
    "rseq",
    "exit",
    "exit_group",
    /* signals, and abort() raising SIGABRT; rt_sigreturn: the end of any signal
     * handler; sigaltstack: AddressSanitizer sets one up in each new thread */
    "rt_sigaction",
    "rt_sigprocmask",
    "rt_sigreturn",
    "sigaltstack",
    "getpid",
    "gettid",
    "tgkill",
    "geteuid",
    /* sockets (socket itself is below); recvmsg takes the audit writer's new
     * sockets from the supervisor */
    "accept4",
    "connect",
    "recvmsg",
    "shutdown",
    "getsockopt",
    "setsockopt",
    "getpeername",
    /* time and randomness; clock_gettime and gettimeofday are the vDSO's
     * fallback when the clock source has no vDSO read */
    "clock_gettime",
    "gettimeofday",
    "getrandom",
    /* system facts, asked on reload: sysinfo by qsort() of a large array (OpenSSL
     * sorts), sched_getaffinity by sysconf(_SC_NPROCESSORS_ONLN) when /sys is
     * not readable */
    "sysinfo",
    "sched_getaffinity",
};

/* Calls with their own action, or allowed only with some arguments. */
static const struct seccomp_rule rules[] = {
    /* threads, never processes: clone with CLONE_THREAD and no namespace */
    {"clone", SCMP_ACT_ALLOW, SECCOMP_ARG(0, SCMP_CMP_MASKED_EQ, CLONE_THREAD | SECCOMP_CLONE_NS_FLAGS, CLONE_THREAD)},
    {"clone", SCMP_ACT_KILL_PROCESS, SECCOMP_ARG(0, SCMP_CMP_MASKED_EQ, CLONE_THREAD, 0)},
    {"clone3", SCMP_ACT_ERRNO(ENOSYS), {0}},
    /* sockets: unix only (the backend, a Redis on a Unix socket); the
     * listeners were made before the drop, so a worker cannot open a
     * connection into the network - unless the configuration names a Redis
     * reached over TCP (limiter.redis.host, numeric: nothing is resolved),
     * and then only AF_INET and AF_INET6 are added (redis_families below);
     * the callback sender, a process of its own, adds its own. */
    {"socket", SCMP_ACT_ALLOW, SECCOMP_ARG(0, SCMP_CMP_EQ, AF_UNIX, 0)},
};

/* Calls that only an attacker would make from here: the process is killed. */
static const char *const killed[] = {
    /* new programs and processes (clone without CLONE_THREAD is above) */
    "execve",
    "execveat",
    "fork",
    "vfork",
    /* other processes' memory */
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "pidfd_getfd",
    "kcmp",
    /* mounts, roots and namespaces */
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "unshare",
    "setns",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    /* the kernel itself */
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "keyctl",
    "add_key",
    "request_key",
    "iopl",
    "ioperm",
    "reboot",
    "open_by_handle_at",
};

static const struct seccomp_spec gateway_spec = {
    .default_action = SCMP_ACT_ERRNO(EPERM),
    .allow = allowed,
    .nallow = sizeof(allowed) / sizeof(allowed[0]),
    .kill = killed,
    .nkill = sizeof(killed) / sizeof(killed[0]),
    .rules = rules,
    .nrules = sizeof(rules) / sizeof(rules[0]),
};

/* What the callback sender adds to the gateway's calls.  Seen by strace -f
 * over e2e_judge0_callback: socketpair (libcurl's threaded resolver wakes
 * its caller through one), uname (glibc's getaddrinfo), sendto/recvfrom
 * and getsockname (the connections), an AF_INET6 datagram socket
 * (libcurl's IPv6 probe).  Not reached there, since /etc/hosts answered:
 * glibc's stub resolver's queries to a name server (bind, sendmmsg,
 * sendmsg, ioctl FIONREAD) and getaddrinfo's netlink socket. */
static const char *const sender_extra[] = {
    "sendto", "recvfrom", "sendmsg", "sendmmsg", "bind", "getsockname", "ioctl", "uname", "socketpair",
};
static const int sender_families[] = {AF_INET, AF_INET6, AF_NETLINK};

/* Allow extra calls, and sockets of the families given, on top of ctx. */
static int add_extra(scmp_filter_ctx ctx, const char *const *extra, size_t n, const int *families, size_t nf, char *err,
                     size_t errlen)
{
    for (size_t i = 0; i < n; i++) {
        int nr = seccomp_syscall_resolve_name(extra[i]);
        if (nr != __NR_SCMP_ERROR && seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 0) != 0) {
            snprintf(err, errlen, "seccomp: cannot allow %s", extra[i]);
            return -1;
        }
    }
    for (size_t i = 0; i < nf; i++) {
        const struct scmp_arg_cmp family = {.arg = 0, .op = SCMP_CMP_EQ, .datum_a = (scmp_datum_t)families[i], .datum_b = 0};
        if (seccomp_rule_add_array(ctx, SCMP_ACT_ALLOW, SCMP_SYS(socket), 1, &family) != 0) {
            snprintf(err, errlen, "seccomp: cannot allow sockets of family %d", families[i]);
            return -1;
        }
    }
    return 0;
}

/* Build the gateway's filter (plus extra), and load it on every thread. */
static int confine(const char *const *extra, size_t n, const int *families, size_t nf, char *err, size_t errlen)
{
    scmp_filter_ctx ctx;
    int rc;

    /* no_new_privs first (bubblewrap's order): the filter needs it without
     * CAP_SYS_ADMIN, and no exec could gain privileges afterwards anyway */
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 1) {
        snprintf(err, errlen, "no_new_privs: %s", strerror(errno));
        return -1;
    }
    if ((ctx = seccomp_build(&gateway_spec, err, errlen)) == NULL)
        return -1;
    if (add_extra(ctx, extra, n, families, nf, err, errlen) != 0) {
        seccomp_release(ctx);
        return -1;
    }
    /* every thread, not only this one; no_new_privs is already set */
    if (seccomp_attr_set(ctx, SCMP_FLTATR_CTL_TSYNC, 1) != 0 || seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0) != 0) {
        snprintf(err, errlen, "seccomp: cannot set the thread-sync attribute");
        seccomp_release(ctx);
        return -1;
    }
    /* log denials too, where the kernel can (4.14 and later): the kills are logged regardless */
    (void)seccomp_attr_set(ctx, SCMP_FLTATR_CTL_LOG, 1);
    rc = seccomp_load(ctx);
    seccomp_release(ctx);
    if (rc != 0) {
        snprintf(err, errlen, "seccomp: cannot load the filter: %s", strerror(-rc));
        return -1;
    }
    return 0;
}

/* What a Redis reached over TCP adds (limiter.redis.host): hiredis makes a
 * TCP socket and connects it on the worker's loop; no resolver runs (the
 * host is a numeric address).  A worker taken over could then reach other
 * hosts too, which is why a Unix socket is moat-gateway(8)'s first choice. */
static const int redis_families[] = {AF_INET, AF_INET6};

int gw_confine(int tcp_client, char *err, size_t errlen)
{
    return confine(NULL, 0, tcp_client ? redis_families : NULL, tcp_client ? sizeof(redis_families) / sizeof(redis_families[0]) : 0,
                   err, errlen);
}

int gw_confine_callback_sender(char *err, size_t errlen)
{
    return confine(sender_extra, sizeof(sender_extra) / sizeof(sender_extra[0]), sender_families,
                   sizeof(sender_families) / sizeof(sender_families[0]), err, errlen);
}
