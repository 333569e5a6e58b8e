/*
 * seccomp_policy.c - the box's system call allow-list.
 *
 * Built once at start-up with libseccomp and exported to a plain BPF
 * program; a box's program child installs it with one prctl() right before
 * execve, so no library call (and no allocation) happens in the child.
 *
 * Policy: default deny (EPERM).  Only native x86-64 calls exist: 32-bit
 * (int 0x80) and x32 calls kill the process.  A few calls are allowed only
 * with harmless arguments: clone without namespace flags, socket for
 * AF_UNIX/AF_INET/AF_INET6, ioctl except TIOCSTI/TIOCLINUX, personality
 * queries and PER_LINUX.  clone3 answers ENOSYS so libc falls back to
 * clone, whose flags we can inspect.  Everything Docker's default profile
 * denies is absent from the list, and so are the new mount API, io_uring,
 * namespaces, ptrace-like calls, keyrings, BPF and perf.
 */
#include "seccomp_policy.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <seccomp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Allowed with any arguments. */
static const char *const allowed[] = {
    /* files and descriptors */
    "read",
    "write",
    "open",
    "openat",
    "close",
    "close_range",
    "stat",
    "fstat",
    "lstat",
    "newfstatat",
    "statx",
    "lseek",
    "pread64",
    "pwrite64",
    "readv",
    "writev",
    "preadv",
    "pwritev",
    "preadv2",
    "pwritev2",
    "access",
    "faccessat",
    "faccessat2",
    "pipe",
    "pipe2",
    "dup",
    "dup2",
    "dup3",
    "fcntl",
    "flock",
    "fsync",
    "fdatasync",
    "sync",
    "syncfs",
    "truncate",
    "ftruncate",
    "getdents",
    "getdents64",
    "getcwd",
    "chdir",
    "fchdir",
    "rename",
    "renameat",
    "renameat2",
    "mkdir",
    "mkdirat",
    "rmdir",
    "creat",
    "link",
    "linkat",
    "unlink",
    "unlinkat",
    "symlink",
    "symlinkat",
    "readlink",
    "readlinkat",
    "chmod",
    "fchmod",
    "fchmodat",
    "chown",
    "fchown",
    "lchown",
    "fchownat",
    "umask",
    "utime",
    "utimes",
    "utimensat",
    "futimesat",
    "statfs",
    "fstatfs",
    "fadvise64",
    "fallocate",
    "readahead",
    "sendfile",
    "copy_file_range",
    "splice",
    "tee",
    "memfd_create",
    "mknod",
    "mknodat",
    "inotify_init",
    "inotify_init1",
    "inotify_add_watch",
    "inotify_rm_watch",
    "getxattr",
    "lgetxattr",
    "fgetxattr",
    "listxattr",
    "llistxattr",
    "flistxattr",
    /* polling and events */
    "poll",
    "ppoll",
    "select",
    "pselect6",
    "epoll_create",
    "epoll_create1",
    "epoll_ctl",
    "epoll_wait",
    "epoll_pwait",
    "epoll_pwait2",
    "eventfd",
    "eventfd2",
    "signalfd",
    "signalfd4",
    "timerfd_create",
    "timerfd_settime",
    "timerfd_gettime",
    /* memory */
    "mmap",
    "mprotect",
    "munmap",
    "brk",
    "mremap",
    "msync",
    "mincore",
    "madvise",
    "mlock",
    "mlock2",
    "munlock",
    "mlockall",
    "munlockall",
    "membarrier",
    "get_mempolicy",
    "set_mempolicy",
    /* processes and threads */
    "fork",
    "vfork",
    "execve",
    "execveat",
    "exit",
    "exit_group",
    "wait4",
    "waitid",
    "kill",
    "tgkill",
    "tkill",
    "getpid",
    "getppid",
    "gettid",
    "getpgrp",
    "getpgid",
    "setpgid",
    "getsid",
    "setsid",
    "set_tid_address",
    "set_robust_list",
    "get_robust_list",
    "futex",
    "futex_waitv",
    "rseq",
    "arch_prctl",
    "prctl",
    "restart_syscall",
    "pidfd_open",
    "pidfd_send_signal",
    "sched_yield",
    "sched_getparam",
    "sched_setparam",
    "sched_getscheduler",
    "sched_setscheduler",
    "sched_get_priority_max",
    "sched_get_priority_min",
    "sched_rr_get_interval",
    "sched_getaffinity",
    "sched_setaffinity",
    "sched_getattr",
    "sched_setattr",
    "getpriority",
    "setpriority",
    "capget",
    "getrlimit",
    "setrlimit",
    "prlimit64",
    "getrusage",
    "getuid",
    "getgid",
    "geteuid",
    "getegid",
    "getresuid",
    "getresgid",
    "getgroups",
    "setuid",
    "setgid",
    "setreuid",
    "setregid",
    "setresuid",
    "setresgid",
    "setfsuid",
    "setfsgid",
    /* signals */
    "rt_sigaction",
    "rt_sigprocmask",
    "rt_sigreturn",
    "rt_sigpending",
    "rt_sigtimedwait",
    "rt_sigsuspend",
    "rt_sigqueueinfo",
    "rt_tgsigqueueinfo",
    "sigaltstack",
    "pause",
    "alarm",
    /* time */
    "nanosleep",
    "clock_nanosleep",
    "clock_gettime",
    "clock_getres",
    "gettimeofday",
    "time",
    "times",
    "getitimer",
    "setitimer",
    "timer_create",
    "timer_settime",
    "timer_gettime",
    "timer_getoverrun",
    "timer_delete",
    /* sockets (socket itself is filtered below; the namespace has no interface up) */
    "connect",
    "accept",
    "accept4",
    "bind",
    "listen",
    "sendto",
    "recvfrom",
    "sendmsg",
    "recvmsg",
    "sendmmsg",
    "recvmmsg",
    "shutdown",
    "getsockname",
    "getpeername",
    "socketpair",
    "setsockopt",
    "getsockopt",
    /* system information */
    "uname",
    "sysinfo",
    "getrandom",
    "getcpu",
};

struct errno_rule {
    const char *name;
    int err;
};

/* Denied with a specific errno so runtimes fall back gracefully. */
static const struct errno_rule errno_rules[] = {
    {"clone3", ENOSYS}, /* glibc falls back to clone, whose flags we check */
    {"io_uring_setup", ENOSYS},
    {"statmount", ENOSYS},
};

static int add_rule(scmp_filter_ctx ctx, uint32_t action, const char *name, unsigned n, const struct scmp_arg_cmp *cmp,
                    struct errbuf *e)
{
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR)
        return 0; /* not a system call on this architecture */
    int rc = seccomp_rule_add_array(ctx, action, nr, n, cmp);
    if (rc != 0)
        return errf(e, "seccomp rule for %s: %s", name, strerror(-rc));
    return 0;
}

static int add_filtered_rules(scmp_filter_ctx ctx, struct errbuf *e)
{
    /* clone: no namespace flags (S10, S20) */
    const uint64_t ns_flags = CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET |
                              CLONE_NEWCGROUP | 0x00000080ULL /* CLONE_NEWTIME */;
    struct scmp_arg_cmp clone_cmp = SCMP_A0(SCMP_CMP_MASKED_EQ, ns_flags, 0);
    if (add_rule(ctx, SCMP_ACT_ALLOW, "clone", 1, &clone_cmp, e) != 0)
        return -1;

    /* socket: unix, inet and inet6 only (S22) */
    static const int families[] = {AF_UNIX, AF_INET, AF_INET6};
    for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++) {
        struct scmp_arg_cmp c = SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)families[i]);
        if (add_rule(ctx, SCMP_ACT_ALLOW, "socket", 1, &c, e) != 0)
            return -1;
    }

    /* ioctl is filtered by the hand-written prefix (tty_ioctl_prefix) */
    if (add_rule(ctx, SCMP_ACT_ALLOW, "ioctl", 0, NULL, e) != 0)
        return -1;

    /* personality: query and PER_LINUX only (S21) */
    static const uint64_t personas[] = {0x0 /* PER_LINUX */, 0xffffffffULL /* query */};
    for (size_t i = 0; i < sizeof(personas) / sizeof(personas[0]); i++) {
        struct scmp_arg_cmp c = SCMP_A0(SCMP_CMP_EQ, personas[i]);
        if (add_rule(ctx, SCMP_ACT_ALLOW, "personality", 1, &c, e) != 0)
            return -1;
    }
    return 0;
}

/*
 * ioctl(TIOCSTI) and ioctl(TIOCLINUX) are refused by a few BPF instructions
 * run before libseccomp's program.  The kernel truncates the request to 32
 * bits, so the comparison must look only at the low word of args[1]; a
 * libseccomp 2.5 rule cannot express "low word differs" (one comparison per
 * argument), hence the prefix.  Jumps in BPF are relative, so prepending
 * leaves the libseccomp program valid.
 */
#define SECCOMP_DATA_NR         0
#define SECCOMP_DATA_ARCH       4
#define SECCOMP_DATA_ARG1_LO    24 /* little-endian low word of args[1] */
#define AUDIT_ARCH_X86_64_VALUE 0xc000003eU

static const struct sock_filter tty_ioctl_prefix[] = {
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, SECCOMP_DATA_ARCH),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64_VALUE, 0, 6),
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, SECCOMP_DATA_NR),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_ioctl, 0, 4),
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, SECCOMP_DATA_ARG1_LO),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, TIOCSTI, 1, 0),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, TIOCLINUX, 0, 1),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
    /* fall through into libseccomp's program */
};
#define PREFIX_LEN (sizeof(tty_ioctl_prefix) / sizeof(tty_ioctl_prefix[0]))

int seccomp_policy_build(struct seccomp_prog *out, struct errbuf *e)
{
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ERRNO(EPERM));
    int fd = -1, rc = -1;

    memset(out, 0, sizeof(*out));
    if (ctx == NULL)
        return errf(e, "seccomp_init failed");
    if (seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS) != 0) {
        errf(e, "seccomp: cannot set the bad-architecture action");
        goto out;
    }
    /* a binary search over syscall numbers instead of a linear list: a few
     * comparisons per call rather than up to ~200 */
    if (seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2) != 0) {
        errf(e, "seccomp: cannot enable binary-tree optimisation");
        goto out;
    }
    for (size_t i = 0; i < sizeof(allowed) / sizeof(allowed[0]); i++)
        if (add_rule(ctx, SCMP_ACT_ALLOW, allowed[i], 0, NULL, e) != 0)
            goto out;
    for (size_t i = 0; i < sizeof(errno_rules) / sizeof(errno_rules[0]); i++)
        if (add_rule(ctx, SCMP_ACT_ERRNO((uint32_t)errno_rules[i].err), errno_rules[i].name, 0, NULL, e) != 0)
            goto out;
    if (add_filtered_rules(ctx, e) != 0)
        goto out;

    /* libseccomp 2.5 exports only to a descriptor: use a memfd */
    fd = memfd_create("moat-seccomp", MFD_CLOEXEC);
    if (fd < 0) {
        errf_errno(e, "memfd_create");
        goto out;
    }
    if (seccomp_export_bpf(ctx, fd) != 0) {
        errf(e, "seccomp_export_bpf failed");
        goto out;
    }
    off_t size = lseek(fd, 0, SEEK_END);
    if (size <= 0 || size % (off_t)sizeof(struct sock_filter) != 0 ||
        (size_t)size / sizeof(struct sock_filter) + PREFIX_LEN > BPF_MAXINSNS) {
        errf(e, "seccomp: exported program has a bad size");
        goto out;
    }
    out->insns = malloc(sizeof(tty_ioctl_prefix) + (size_t)size);
    if (out->insns == NULL) {
        errf(e, "out of memory");
        goto out;
    }
    memcpy(out->insns, tty_ioctl_prefix, sizeof(tty_ioctl_prefix));
    if (pread(fd, out->insns + PREFIX_LEN, (size_t)size, 0) != size) {
        errf_errno(e, "read seccomp program");
        free(out->insns);
        out->insns = NULL;
        goto out;
    }
    out->len = (unsigned short)(PREFIX_LEN + (size_t)size / sizeof(struct sock_filter));
    rc = 0;
out:
    if (fd >= 0)
        close(fd);
    seccomp_release(ctx);
    return rc;
}

int seccomp_policy_install(const struct seccomp_prog *p)
{
    struct sock_fprog prog = {p->len, p->insns};
    return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0);
}

void seccomp_policy_free(struct seccomp_prog *p)
{
    free(p->insns);
    memset(p, 0, sizeof(*p));
}
