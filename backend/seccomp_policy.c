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
 * AF_UNIX/AF_INET/AF_INET6 (inet: TCP or UDP only), ioctl except
 * TIOCSTI/TIOCLINUX, personality queries and PER_LINUX.  clone3 answers ENOSYS so libc falls back to
 * clone, whose flags we can inspect.  Everything Docker's default profile
 * denies is absent from the list, and so are the new mount API, io_uring,
 * namespaces, ptrace-like calls, keyrings, BPF and perf.
 *
 * Boxes share the runtime's files (read-only binds of the same inodes) and
 * the page cache, so calls that watch or probe a file for what others do
 * with it are absent too (S28): inotify and fanotify (a watch on
 * /usr/lib/python3.11 shows which modules a concurrent job imports),
 * cachestat (page-cache residency), and preadv2 with RWF_NOWAIT (a read
 * that fails unless the page is cached).  mincore on a file the caller
 * cannot write reports every page resident since Linux 5.0.
 */
#include "seccomp_policy.h"
#include "seccomp_build.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <seccomp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
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

/* Calls with their own action, or allowed only with harmless arguments. */
static const struct seccomp_rule rules[] = {
    /* denied with a specific errno so runtimes fall back gracefully */
    {"clone3", SCMP_ACT_ERRNO(ENOSYS), {0}}, /* glibc falls back to clone, whose flags we check */
    {"io_uring_setup", SCMP_ACT_ERRNO(ENOSYS), {0}},
    {"statmount", SCMP_ACT_ERRNO(ENOSYS), {0}},
    /* clone: no namespace flags (S10, S20) */
    {"clone", SCMP_ACT_ALLOW, SECCOMP_ARG(0, SCMP_CMP_MASKED_EQ, SECCOMP_CLONE_NS_FLAGS, 0)},
    /* socket: unix, inet and inet6 only (S22); inet's type and protocol: arg_prefix (S35) */
    {"socket", SCMP_ACT_ALLOW, SECCOMP_ARG(0, SCMP_CMP_EQ, AF_UNIX, 0)},
    {"socket", SCMP_ACT_ALLOW, SECCOMP_ARG(0, SCMP_CMP_EQ, AF_INET, 0)},
    {"socket", SCMP_ACT_ALLOW, SECCOMP_ARG(0, SCMP_CMP_EQ, AF_INET6, 0)},
    /* ioctl is filtered by the hand-written prefix (arg_prefix) */
    {"ioctl", SCMP_ACT_ALLOW, {0}},
    /* preadv2: not RWF_NOWAIT, which probes the shared page cache (S28) */
    {"preadv2", SCMP_ACT_ALLOW, SECCOMP_ARG(5, SCMP_CMP_MASKED_EQ, RWF_NOWAIT, 0)},
    /* personality: PER_LINUX and the query only (S21) */
    {"personality", SCMP_ACT_ALLOW, SECCOMP_ARG(0, SCMP_CMP_EQ, 0x0 /* PER_LINUX */, 0)},
    {"personality", SCMP_ACT_ALLOW, SECCOMP_ARG(0, SCMP_CMP_EQ, 0xffffffffULL /* query */, 0)},
};

static const struct seccomp_spec box_spec = {
    .default_action = SCMP_ACT_ERRNO(EPERM),
    .allow = allowed,
    .nallow = sizeof(allowed) / sizeof(allowed[0]),
    .rules = rules,
    .nrules = sizeof(rules) / sizeof(rules[0]),
};

/*
 * Two argument checks libseccomp 2.5 cannot express are a few BPF
 * instructions run before libseccomp's program.  Jumps in BPF are relative,
 * so prepending leaves the libseccomp program valid.
 *
 * ioctl(TIOCSTI) and ioctl(TIOCLINUX) are refused.  The kernel truncates the
 * request to 32 bits, so the comparison must look only at the low word of
 * args[1]; a libseccomp rule cannot express "low word differs" (one
 * comparison per argument).
 *
 * An inet socket only as TCP or UDP (S35): SOCK_STREAM with protocol 0 or
 * IPPROTO_TCP, SOCK_DGRAM with 0 or IPPROTO_UDP (the type's low four bits;
 * the rest are SOCK_NONBLOCK and SOCK_CLOEXEC).  The rules on the family
 * (below) cannot also look at the type and protocol.  Every other inet
 * protocol is kernel code a program has no need of (MPTCP, SMC, SCTP --
 * SOCK_SEQPACKET with protocol 0 is SCTP -- or DCCP where the kernel has
 * them; an inet socket() loads a missing protocol's module), and when
 * Landlock's TCP rules were used (ABI 4: IPPROTO_TCP alone) MPTCP walked
 * around them.  AF_UNIX sockets pass to the family rule.  The kernel
 * reads all three arguments as ints: the low words.
 */
#define SECCOMP_DATA_NR         0
#define SECCOMP_DATA_ARCH       4
#define SECCOMP_DATA_ARG0_LO    16 /* little-endian low word of args[0] */
#define SECCOMP_DATA_ARG1_LO    24 /* and of args[1] */
#define SECCOMP_DATA_ARG2_LO    32 /* and of args[2] */
#define AUDIT_ARCH_X86_64_VALUE 0xc000003eU

static const struct sock_filter arg_prefix[] = {
    /* 0 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, SECCOMP_DATA_ARCH),
    /* 1 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64_VALUE, 0, 19), /* else to 21 */
    /* 2 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, SECCOMP_DATA_NR),
    /* 3 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_ioctl, 0, 3), /* else to 7 */
    /* 4 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, SECCOMP_DATA_ARG1_LO),
    /* 5 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, TIOCSTI, 14, 0),     /* to 20 */
    /* 6 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, TIOCLINUX, 13, 14),  /* to 20, else to 21 */
    /* 7 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_socket, 0, 13), /* else to 21 */
    /* 8 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, SECCOMP_DATA_ARG0_LO),
    /* 9 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_UNIX, 11, 0), /* to 21 */
    /* 10 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, SECCOMP_DATA_ARG1_LO),
    /* 11 */ BPF_STMT(BPF_ALU | BPF_AND | BPF_K, 0xf),
    /* 12 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SOCK_STREAM, 0, 3), /* else to 16 */
    /* 13 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, SECCOMP_DATA_ARG2_LO),
    /* 14 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 6, 0),           /* to 21 */
    /* 15 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, IPPROTO_TCP, 5, 4), /* to 21, else to 20 */
    /* 16 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SOCK_DGRAM, 0, 3),  /* else to 20 */
    /* 17 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, SECCOMP_DATA_ARG2_LO),
    /* 18 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 2, 0),           /* to 21 */
    /* 19 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, IPPROTO_UDP, 1, 0), /* to 21, else to 20 */
    /* 20 */ BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
    /* 21: fall through into libseccomp's program */
};
#define PREFIX_LEN (sizeof(arg_prefix) / sizeof(arg_prefix[0]))

int seccomp_policy_build(struct seccomp_prog *out, struct errbuf *e)
{
    scmp_filter_ctx ctx;
    int fd = -1, rc = -1;

    memset(out, 0, sizeof(*out));
    if ((ctx = seccomp_build(&box_spec, e->msg, sizeof(e->msg))) == NULL)
        return -1;

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
    out->insns = malloc(sizeof(arg_prefix) + (size_t)size);
    if (out->insns == NULL) {
        errf(e, "out of memory");
        goto out;
    }
    memcpy(out->insns, arg_prefix, sizeof(arg_prefix));
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
