/*
 * box_init.c - pid 1 of a box, and the program it starts for each stage.
 *
 * Runs in the child that box_prepare() cloned into new mount, pid, net, ipc
 * and uts namespaces.  The parent (moat-backend) is multi-threaded, and this
 * child holds a copy of its memory, including any glibc lock another thread
 * held at that moment.  So nothing here may take one: no malloc (memory
 * comes from mmap), no fork() (it takes the malloc locks; a raw clone
 * instead), no set*id() wrappers (they signal the parent's other threads;
 * raw system calls instead).
 *
 * Warm, before any request:  setup_fds -> setup_generic_mounts (private
 *   propagation, tmpfs root, /tmp, /proc, /dev, /etc) -> setup_proc_masks
 *   -> setup_loopback (the namespace's lo up: see below), then block on
 *   the control socket.
 * On the plan:  read_plan -> unshare the cgroup namespace (the host has
 *   attached us by now) -> setup_job_mounts (read-only runtime binds, /box
 *   with the job's files; a nested name's directories are made below /box's
 *   descriptor one component at a time, never following a link:
 *   open_parent_dir) -> setup_pivot -> setup_uts -> setup_landlock (the
 *   job's Landlock ruleset, built once from the box's own paths and kept
 *   for its stages; landlock.c).
 * Per "go" byte:  run_stage starts the program (spawn_program: a clone
 *   that shares init's memory until execve, as posix_spawn's does), which
 *   does setup_session -> setup_signals -> setup_rlimits ->
 *   setup_credentials -> close fds -> no_new_privs -> Landlock -> seccomp ->
 *   execve; init waits for it (wait_stage),
 *   reaps it, kills whatever it left behind, closes the stage's output pipes
 *   and reports the wait status.
 *
 * Signals from the host (a session's SESSION_SIGNAL, box_signal()): while a
 *   stage runs, init reads CTL_SIGNAL messages and sends the signal to the
 *   stage program's process group (the program is a session and group
 *   leader: setsid), from inside the box's pid namespace.  That is free of
 *   pid reuse by construction: the program is init's own child, and until
 *   init reaps it (it stops reading signals first) its pid and so its group
 *   id cannot be taken by another process; nor can any pid the kill reaches
 *   be a host process, since the namespace holds only the box.  Init learns
 *   of its children's exits from a signalfd (SIGCHLD is blocked in init, and
 *   unblocked again in the program with every other signal).
 *
 * Init dies with the backend (PR_SET_PDEATHSIG, its first step): a
 *   backend killed outright (SIGKILL, a crash, `moat-backend run`'s keeper
 *   ending its worker) must not leave a box running with no clocks.  The
 *   signal fires when the *thread* that cloned init exits, not the process,
 *   so this is only right because of who clones: the main thread (the warm
 *   boxes of pool_setup; it lives as long as the backend) and the pools'
 *   maintainer threads, which exit only in pool_shutdown, right before it
 *   discards every box anyway.  A new caller of box_prepare from a thread
 *   that ends sooner (a connection's worker) would have its boxes killed
 *   under it: keep box_prepare on those threads.  A backend that dies
 *   between clone and the prctl is caught too: its end of the control
 *   socket closes, and init exits on the end of file (read_plan, the loop
 *   for "go").
 *
 * The network wall is the box's own network namespace (S33): it holds
 *   only lo, which init brings up, so a program may serve and call itself
 *   on 127.0.0.1 and ::1 (test programs do; Piston's and Isolate's boxes
 *   allow it), and every other address has no route: ENETUNREACH, what a
 *   machine without a network answers.  When the backend lacks
 *   CAP_NET_ADMIN lo stays down (the box as walled, only without its
 *   loopback; the backend warns at start).  No namespace is shared: each
 *   box gets a fresh one at its clone and it goes with the box.
 *
 * What a box must not learn from the host (S28, S30): /dev holds device
 *   nodes made here (mknod), not binds of the host's devtmpfs, so the
 *   box's mountinfo names no host device but the runtime's own filesystem
 *   (a bind mount shares its superblock: see moat-backend(8)); /proc paths that
 *   show how the kernel was built and booted, its symbols, keys, devices
 *   and host-wide activity (pressure, I/O, interrupts, locks) are masked
 *   with /dev/null or an empty read-only tmpfs, as runc does, and runc's
 *   read-only paths are remounted read-only; runtime binds are noatime, so
 *   one box reading a shared file leaves no access time for another to see.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/seccomp.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "box_internal.h"
#include "landlock.h"
#include "moat_io.h"
#include "moat_limits.h"
#include "moat_path.h"

#define BOX_ROOT_TMPFS_OPTS "size=1m,nr_inodes=1024,mode=0755"
#define BOX_DEV_TMPFS_OPTS  "size=64k,nr_inodes=64,mode=0755"
#define BOX_MASK_TMPFS_OPTS "size=4k,nr_inodes=2,mode=0555"
#define BOX_HOSTNAME        "box"

struct stage_plan {
    int present;
    uint64_t fsize, stack, cpu_ms;
    uint32_t nofile, pids;
    char **argv;
    char **envp;
};

struct parsed_plan {
    uint64_t box_bytes;
    uint32_t nro, nfiles;
    uint32_t isolation;     /* enum moat_isolation */
    char *runsc, *platform; /* MOAT_ISOLATION_GVISOR */
    char **ro;
    char **file_names;
    const uint8_t **file_data;
    uint32_t *file_len;
    uint32_t *file_exec;
    struct stage_plan stages[BOX_NSTAGES];
    int landlock_fd; /* the job's ruleset (setup_landlock); -1 without the wall */
};

/* ---- reporting --------------------------------------------------------- */

static void report_send(int fd, int kind, int stage, int wait_status, int err, const char *what)
{
    struct box_report r;
    memset(&r, 0, sizeof(r));
    r.kind = kind;
    r.stage = stage;
    r.wait_status = wait_status;
    r.err = err;
    if (what) {
        size_t n = strlen(what);
        if (n >= sizeof(r.what))
            n = sizeof(r.what) - 1;
        memcpy(r.what, what, n);
    }
    ssize_t w = write(fd, &r, sizeof(r));
    (void)w;
}

static __attribute__((noreturn)) void child_die(const char *what)
{
    report_send(FD_CTL, REPORT_SETUP_FAILED, -1, 0, errno, what);
    _exit(126);
}

/* ---- paths below the new root ----------------------------------------- */

static const char *in_root(char *buf, size_t size, const struct slot *s, const char *path)
{
    size_t a = strlen(s->root), b = strlen(path);
    if (a + b + 1 > size) {
        errno = ENAMETOOLONG;
        child_die("path too long");
    }
    memcpy(buf, s->root, a);
    memcpy(buf + a, path, b + 1);
    return buf;
}

/* mkdir -p below the box root; every component is in our fresh tmpfs. */
static void mkdir_below_root(const struct slot *s, const char *path)
{
    char buf[PATH_MAX];
    in_root(buf, sizeof(buf), s, path);
    for (char *p = buf + strlen(s->root) + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            child_die("mkdir in box root");
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST)
        child_die("mkdir in box root");
}

static void mkdir_parent_below_root(const struct slot *s, const char *path)
{
    char parent[PATH_MAX];
    const char *slash = strrchr(path, '/');
    size_t plen = slash ? (size_t)(slash - path) : 0;
    if (plen == 0)
        return;
    if (plen >= sizeof(parent)) {
        errno = ENAMETOOLONG;
        child_die("path too long");
    }
    memcpy(parent, path, plen);
    parent[plen] = '\0';
    mkdir_below_root(s, parent);
}

static void write_small_file(const struct slot *s, const char *path, const char *content)
{
    char buf[PATH_MAX];
    int fd = open(in_root(buf, sizeof(buf), s, path), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0)
        child_die("create file in box root");
    size_t len = strlen(content);
    if (write(fd, content, len) != (ssize_t)len)
        child_die("write file in box root");
    close(fd);
}

/* ---- warm set-up -------------------------------------------------------- */

/* Moves the descriptors init needs to fixed numbers and closes the rest,
 * including every descriptor of the (multi-threaded) backend. */
static void setup_fds(const struct init_args *a)
{
    int high[FD_FIRST_FREE];
    for (int i = 0; i < FD_FIRST_FREE; i++)
        if ((high[i] = fcntl(a->fds[i], F_DUPFD, 1000)) < 0)
            _exit(125);
    for (int i = 0; i < FD_FIRST_FREE; i++)
        if (dup2(high[i], i) != i)
            _exit(125);
    if (syscall(SYS_close_range, FD_FIRST_FREE, ~0U, 0) != 0)
        for (int fd = FD_FIRST_FREE; fd < 65536; fd++)
            close(fd);
}

/* The host's device node bound at dst: for a host whose device cgroup
 * refuses mknod (the box's mountinfo then shows the host's devtmpfs). */
static int bind_host_node(const char *src, const char *dst)
{
    int fd = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0)
        return -1;
    close(fd);
    if (mount(src, dst, NULL, MS_BIND, NULL) != 0)
        return -1;
    return mount(NULL, dst, NULL, MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NOEXEC, NULL);
}

/* 1 if every node is made here, on /dev's own mount (read-only, nosuid,
 * noexec once done); 0 if some are binds of the host's (bind_host_node). */
static int setup_dev(const struct slot *s)
{
    static const struct {
        const char *name;
        unsigned major, minor;
    } nodes[] = {{"null", 1, 3}, {"zero", 1, 5}, {"random", 1, 8}, {"urandom", 1, 9}};
    static const char *const links[][2] = {
        {"/proc/self/fd", "/dev/fd"},
        {"/proc/self/fd/0", "/dev/stdin"},
        {"/proc/self/fd/1", "/dev/stdout"},
        {"/proc/self/fd/2", "/dev/stderr"},
    };
    char dst[PATH_MAX], src[32], rel[32];
    int own = 1;

    mkdir_below_root(s, "/dev");
    if (mount("tmpfs", in_root(dst, sizeof(dst), s, "/dev"), "tmpfs", MS_NOSUID | MS_NOEXEC, BOX_DEV_TMPFS_OPTS) != 0)
        child_die("mount /dev tmpfs");
    for (size_t i = 0; i < sizeof(nodes) / sizeof(nodes[0]); i++) {
        snprintf(rel, sizeof(rel), "/dev/%s", nodes[i].name);
        snprintf(src, sizeof(src), "/dev/%s", nodes[i].name);
        in_root(dst, sizeof(dst), s, rel);
        if (mknod(dst, S_IFCHR | 0666, makedev(nodes[i].major, nodes[i].minor)) == 0) {
            if (chmod(dst, 0666) != 0) /* mknod obeys the umask */
                child_die("chmod /dev node");
        } else if (errno != EPERM || bind_host_node(src, dst) != 0) {
            child_die("create /dev node");
        } else {
            own = 0;
        }
    }
    for (size_t i = 0; i < sizeof(links) / sizeof(links[0]); i++)
        if (symlink(links[i][0], in_root(dst, sizeof(dst), s, links[i][1])) != 0)
            child_die("symlink in /dev");
    if (mount(NULL, in_root(dst, sizeof(dst), s, "/dev"), NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC, NULL) !=
        0)
        child_die("remount /dev read-only");
    return own;
}

/* Returns setup_dev's answer: whether /dev's nodes are on its read-only mount. */
static int setup_generic_mounts(const struct init_args *a)
{
    const struct slot *s = a->slot;
    char dst[PATH_MAX], opts[128];

    /* nothing we mount may propagate back to the host */
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
        child_die("make mounts private");
    if (mount("tmpfs", s->root, "tmpfs", MS_NOSUID | MS_NODEV, BOX_ROOT_TMPFS_OPTS) != 0)
        child_die("mount root tmpfs");

    mkdir_below_root(s, "/tmp");
    snprintf(opts, sizeof(opts), "size=%llu,nr_inodes=4096,mode=1777", (unsigned long long)DEFAULT_TMP_BYTES);
    if (mount("tmpfs", in_root(dst, sizeof(dst), s, "/tmp"), "tmpfs", MS_NOSUID | MS_NODEV, opts) != 0)
        child_die("mount /tmp");

    /* /proc of our own pid namespace; other users' processes hidden */
    mkdir_below_root(s, "/proc");
    if (mount("proc", in_root(dst, sizeof(dst), s, "/proc"), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=2") != 0)
        child_die("mount /proc");

    int dev_own = setup_dev(s);

    mkdir_below_root(s, "/etc");
    write_small_file(s, "/etc/passwd", a->etc_passwd);
    write_small_file(s, "/etc/group", a->etc_group);
    return dev_own;
}

/*
 * /proc paths a program has no need for, below the box's /proc: runc's and
 * Docker's masked paths, then how the kernel was built and booted, then
 * host-wide devices and activity, which show other jobs and the host at
 * work.  Kept because runtimes read them: self, thread-self, cpuinfo,
 * meminfo, stat (glibc counts CPUs there without /sys), uptime, loadavg
 * (sysinfo(2) gives the box the same figures anyway), cgroups and mounts
 * (the JVM's container support), filesystems, net and sysvipc (the box's
 * own namespaces).  A path this kernel lacks is skipped.
 */
static const char *const proc_masked[] = {
    /* runc and Docker */
    "acpi", "asound", "kcore", "keys", "latency_stats", "timer_list", "timer_stats", "sched_debug", "scsi",
    /* the kernel's build, boot and symbols */
    "cmdline", "config.gz", "bootconfig", "kallsyms", "modules", "sys/kernel/random/boot_id",
    /* host devices and host-wide activity */
    "pressure", "diskstats", "partitions", "swaps", "mdstat", "interrupts", "softirqs", "schedstat", "lock_stat", "locks",
    "key-users", "vmstat", "zoneinfo", "buddyinfo", "pagetypeinfo", "slabinfo", "vmallocinfo", "iomem", "ioports", "kmsg",
    "kpagecgroup", "kpagecount", "kpageflags", "sys/fs/file-nr", "sys/fs/inode-nr", "sys/fs/inode-state", "sys/fs/dentry-state"};

/* runc's read-only paths: remounted read-only before the masks go on top. */
static const char *const proc_read_only[] = {"bus", "fs", "irq", "sys", "sysrq-trigger"};

static void proc_path(const struct slot *s, char *buf, size_t size, const char *rel)
{
    char abs[PATH_MAX / 4];
    if ((size_t)snprintf(abs, sizeof(abs), "/proc/%s", rel) >= sizeof(abs)) {
        errno = ENAMETOOLONG;
        child_die("proc path too long");
    }
    in_root(buf, size, s, abs);
}

/* 1 if dst exists (its type in *st), 0 if this kernel lacks it. */
static int proc_exists(const char *dst, struct stat *st)
{
    if (lstat(dst, st) == 0)
        return 1;
    if (errno != ENOENT)
        child_die("lstat /proc path");
    return 0;
}

/*
 * A file is masked with a bind of the box's /dev/null.  A bind mount takes
 * the flags of the mount it comes from: from /dev's own (read-only, nosuid,
 * noexec: setup_dev) the mask is read-only, nosuid and noexec as it is made,
 * and needs no remount (some thirty mount calls a box saved).  A host node
 * (dev_own 0) sits on a writable mount: its masks are remounted.
 */
static void mask_proc_path(const struct slot *s, const char *rel, int dev_own)
{
    char dst[PATH_MAX], null[PATH_MAX];
    struct stat st;

    proc_path(s, dst, sizeof(dst), rel);
    /* The box's uid owns nothing in /proc and has no group but its own, so
     * what others may not read (kcore, kmsg, slabinfo on most kernels) it
     * cannot read either: a mount there would only cost time. */
    if (!proc_exists(dst, &st) || (st.st_mode & S_IROTH) == 0)
        return;
    if (S_ISDIR(st.st_mode)) {
        if (mount("tmpfs", dst, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, BOX_MASK_TMPFS_OPTS) != 0)
            child_die("mask /proc directory");
        return;
    }
    if (mount(in_root(null, sizeof(null), s, "/dev/null"), dst, NULL, MS_BIND, NULL) != 0)
        child_die("mask /proc file");
    if (!dev_own && mount(NULL, dst, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC, NULL) != 0)
        child_die("remount /proc mask");
}

static void setup_proc_masks(const struct slot *s, int dev_own)
{
    char dst[PATH_MAX];
    struct stat st;

    for (size_t i = 0; i < sizeof(proc_read_only) / sizeof(proc_read_only[0]); i++) {
        proc_path(s, dst, sizeof(dst), proc_read_only[i]);
        if (!proc_exists(dst, &st))
            continue;
        if (mount(dst, dst, NULL, MS_BIND, NULL) != 0 ||
            mount(NULL, dst, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0)
            child_die("remount /proc path read-only");
    }
    for (size_t i = 0; i < sizeof(proc_masked) / sizeof(proc_masked[0]); i++)
        mask_proc_path(s, proc_masked[i], dev_own);
}

/* ---- the plan ------------------------------------------------------------- */

struct cursor {
    const uint8_t *p;
    size_t len, off;
};

static int take(struct cursor *c, void *out, size_t n)
{
    if (n > c->len - c->off)
        return -1;
    memcpy(out, c->p + c->off, n);
    c->off += n;
    return 0;
}

static const uint8_t *take_blob(struct cursor *c, uint32_t *len)
{
    if (take(c, len, sizeof(*len)) != 0 || *len > c->len - c->off)
        return NULL;
    const uint8_t *p = c->p + c->off;
    c->off += *len;
    return p;
}

static char *take_str(struct cursor *c)
{
    uint32_t len;
    const uint8_t *p = take_blob(c, &len);
    if (p == NULL || len == 0 || p[len - 1] != '\0' || memchr(p, 0, len) != p + len - 1)
        return NULL;
    return (char *)(uintptr_t)p;
}

static void *map_or_die(size_t size)
{
    void *p = mmap(NULL, size ? size : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        child_die("mmap");
    return p;
}

static char **take_strv(struct cursor *c, uint32_t n)
{
    if (n > 1u << 16) {
        errno = E2BIG;
        child_die("plan: vector too long");
    }
    char **v = map_or_die((n + 1) * sizeof(char *));
    for (uint32_t i = 0; i < n; i++)
        if ((v[i] = take_str(c)) == NULL) {
            errno = EINVAL;
            child_die("plan: bad string");
        }
    v[n] = NULL;
    return v;
}

static void read_plan(struct parsed_plan *pp)
{
    uint32_t hdr[2], stage_mask;
    if (moat_read_full(FD_CTL, hdr, sizeof(hdr)) != (ssize_t)sizeof(hdr))
        _exit(0); /* the host discarded this box before using it */
    if (hdr[0] != PLAN_MAGIC || hdr[1] > PLAN_MAX_BYTES) {
        errno = EINVAL;
        child_die("plan: bad header");
    }
    uint8_t *body = map_or_die(hdr[1]);
    if (moat_read_full(FD_CTL, body, hdr[1]) != (ssize_t)hdr[1])
        child_die("plan: short read");
    struct cursor c = {body, hdr[1], 0};

    memset(pp, 0, sizeof(*pp));
    if (take(&c, &pp->box_bytes, 8) || take(&c, &pp->nro, 4) || take(&c, &pp->nfiles, 4) || take(&c, &stage_mask, 4) ||
        take(&c, &pp->isolation, 4) || pp->isolation > MOAT_ISOLATION_MAX) {
        errno = EINVAL;
        child_die("plan: truncated");
    }
    if (pp->isolation == MOAT_ISOLATION_GVISOR &&
        ((pp->runsc = take_str(&c)) == NULL || pp->runsc[0] != '/' || (pp->platform = take_str(&c)) == NULL)) {
        errno = EINVAL;
        child_die("plan: bad gVisor set-up");
    }
    pp->ro = take_strv(&c, pp->nro);
    /* a request's files, or a test case's: what a compile stage left (box_pack) */
    if (pp->nfiles > BOX_PACK_MAX_FILES) {
        errno = E2BIG;
        child_die("plan: too many files");
    }
    pp->file_names = map_or_die((pp->nfiles + 1) * sizeof(char *));
    pp->file_data = map_or_die((pp->nfiles + 1) * sizeof(uint8_t *));
    pp->file_len = map_or_die((pp->nfiles + 1) * sizeof(uint32_t));
    pp->file_exec = map_or_die((pp->nfiles + 1) * sizeof(uint32_t));
    for (uint32_t i = 0; i < pp->nfiles; i++) {
        if ((pp->file_names[i] = take_str(&c)) == NULL || take(&c, &pp->file_exec[i], 4) != 0 || pp->file_exec[i] > 1 ||
            (pp->file_data[i] = take_blob(&c, &pp->file_len[i])) == NULL) {
            errno = EINVAL;
            child_die("plan: bad file");
        }
    }
    for (int k = 0; k < BOX_NSTAGES; k++) {
        struct stage_plan *st = &pp->stages[k];
        uint32_t argc, envc;
        if (!(stage_mask & (1u << k)))
            continue;
        st->present = 1;
        if (take(&c, &st->fsize, 8) || take(&c, &st->stack, 8) || take(&c, &st->cpu_ms, 8) || take(&c, &st->nofile, 4) ||
            take(&c, &st->pids, 4) || take(&c, &argc, 4) || take(&c, &envc, 4) || argc == 0) {
            errno = EINVAL;
            child_die("plan: bad stage");
        }
        st->argv = take_strv(&c, argc);
        st->envp = take_strv(&c, envc);
    }
    if (c.off != c.len) {
        errno = EINVAL;
        child_die("plan: trailing bytes");
    }
}

/* ---- job set-up -------------------------------------------------------------- */

static void bind_ro(const struct slot *s, const char *path)
{
    char dst[PATH_MAX], target[PATH_MAX];
    struct stat st;

    if (lstat(path, &st) != 0) {
        if (errno == ENOENT)
            return; /* a runtime dir this host does not have */
        child_die("lstat runtime path");
    }
    mkdir_parent_below_root(s, path);
    if (S_ISLNK(st.st_mode)) {
        /* merged-/usr symlinks such as /bin -> usr/bin are recreated */
        ssize_t n = readlink(path, target, sizeof(target) - 1);
        if (n < 0)
            child_die("readlink runtime path");
        target[n] = '\0';
        if (symlink(target, in_root(dst, sizeof(dst), s, path)) != 0 && errno != EEXIST)
            child_die("symlink in box root");
        return;
    }
    if (S_ISDIR(st.st_mode)) {
        mkdir_below_root(s, path);
    } else {
        int fd = open(in_root(dst, sizeof(dst), s, path), O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0)
            child_die("create bind target");
        close(fd);
    }
    in_root(dst, sizeof(dst), s, path);
    /* Not MS_REC: submounts of a runtime dir stay hidden rather than
     * appearing writable.  noatime: the files are shared with every other
     * box, and an access time is what one box reading them would leave for
     * the next to see. */
    if (mount(path, dst, NULL, MS_BIND, NULL) != 0)
        child_die("bind runtime path");
    if (mount(NULL, dst, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOATIME | MS_NODIRATIME, NULL) != 0)
        child_die("remount runtime path read-only");
}

/*
 * The directory that holds a file named "a/b/c" (validated by the backend:
 * relative, no empty, "." or ".." component; moat_path.h), made and opened
 * one component at a time below /box's descriptor: mkdirat never follows a
 * link, and each openat has O_NOFOLLOW | O_DIRECTORY, so a path can only
 * ever lead into directories made here, inside the box's own tmpfs.  (Before
 * any program has run the tmpfs holds only the job's regular files: there
 * is no link to follow; this holds even if there were.)  Directories belong
 * to the slot's uid, as /box does, so the program may write in them.  Returns
 * a descriptor of the directory and the file's last component in *leaf.
 */
static int open_parent_dir(const struct slot *s, int boxfd, const char *name, const char **leaf)
{
    char part[MOAT_MAX_NAME_LEN + 1];
    int dfd = dup(boxfd);
    const char *slash;

    if (dfd < 0)
        child_die("dup /box");
    while ((slash = strchr(name, '/')) != NULL) {
        size_t n = (size_t)(slash - name);
        if (n == 0 || n >= sizeof(part) || (n == 1 && name[0] == '.') || (n == 2 && name[0] == '.' && name[1] == '.'))
            child_die("box file path"); /* the backend refused these already */
        memcpy(part, name, n);
        part[n] = '\0';
        if (mkdirat(dfd, part, 0755) == 0) {
            if (fchownat(dfd, part, s->uid, s->gid, AT_SYMLINK_NOFOLLOW) != 0)
                child_die("chown box directory");
        } else if (errno != EEXIST) {
            child_die("create box directory");
        }
        int next = openat(dfd, part, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (next < 0)
            child_die("open box directory");
        close(dfd);
        dfd = next;
        name = slash + 1;
    }
    *leaf = name;
    return dfd;
}

static void write_box_files(const struct slot *s, const struct parsed_plan *pp)
{
    char dst[PATH_MAX];
    int boxfd = open(in_root(dst, sizeof(dst), s, "/box"), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (boxfd < 0)
        child_die("open /box");
    for (uint32_t i = 0; i < pp->nfiles; i++) {
        const char *leaf;
        int dfd = open_parent_dir(s, boxfd, pp->file_names[i], &leaf);
        int fd = openat(dfd, leaf, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, pp->file_exec[i] ? 0755 : 0644);
        close(dfd);
        if (fd < 0)
            child_die("create box file");
        if (pp->file_exec[i] && fchmod(fd, 0755) != 0) /* open obeys the umask */
            child_die("chmod box file");
        size_t off = 0;
        while (off < pp->file_len[i]) {
            ssize_t n = write(fd, pp->file_data[i] + off, pp->file_len[i] - off);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                child_die("write box file (files larger than the box?)");
            off += (size_t)n;
        }
        close(fd);
    }
    close(boxfd);
}

/* A gVisor box: runsc itself, where the runtime binds have not put it. */
static void bind_runsc(const struct slot *s, const char *runsc)
{
    char dst[PATH_MAX];
    struct stat st;

    if (lstat(in_root(dst, sizeof(dst), s, runsc), &st) == 0)
        return;
    bind_ro(s, runsc);
}

/* runsc on the kvm platform opens /dev/kvm in the box: the node, the slot
 * uid's only (0600: runsc runs as it; the program inside gVisor sees
 * gVisor's /dev, not this one), made on /dev's mount for this job alone (a
 * plain box has none). */
static void add_kvm_node(const struct slot *s)
{
    char dev[PATH_MAX], kvm[PATH_MAX];

    in_root(dev, sizeof(dev), s, "/dev");
    in_root(kvm, sizeof(kvm), s, "/dev/kvm");
    if (mount(NULL, dev, NULL, MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NOEXEC, NULL) != 0)
        child_die("remount /dev writable for /dev/kvm");
    if (mknod(kvm, S_IFCHR | 0600, makedev(10, 232)) == 0) {
        if (chown(kvm, s->uid, s->gid) != 0) /* runsc is the slot's uid (rootless) */
            child_die("chown /dev/kvm");
    } else if (errno != EPERM || bind_host_node("/dev/kvm", kvm) != 0) {
        /* the host's node, bound: never chowned (it is the host's); runsc reaches it only if the
         * host's mode lets the slot's uid in */
        child_die("create /dev/kvm");
    }
    if (mount(NULL, dev, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC, NULL) != 0)
        child_die("remount /dev read-only");
}

static void setup_job_mounts(const struct slot *s, const struct parsed_plan *pp)
{
    char dst[PATH_MAX], opts[128];

    for (uint32_t i = 0; i < pp->nro; i++)
        bind_ro(s, pp->ro[i]);
    if (pp->isolation == MOAT_ISOLATION_GVISOR)
        bind_runsc(s, pp->runsc);
    if (pp->isolation == MOAT_ISOLATION_GVISOR && strcmp(pp->platform, "kvm") == 0)
        add_kvm_node(s);

    /* /box: the job's files, shared by its stages, owned by the slot's uid */
    mkdir_below_root(s, "/box");
    snprintf(opts, sizeof(opts), "size=%llu,nr_inodes=4096,mode=0700,uid=%u,gid=%u", (unsigned long long)pp->box_bytes,
             (unsigned)s->uid, (unsigned)s->gid);
    if (mount("tmpfs", in_root(dst, sizeof(dst), s, "/box"), "tmpfs", MS_NOSUID | MS_NODEV, opts) != 0)
        child_die("mount /box");
    write_box_files(s, pp);
}

static void setup_pivot(const struct slot *s)
{
    if (chdir(s->root) != 0)
        child_die("chdir to box root");
    /* pivot_root(".", ".") stacks the old root on top of the new one;
     * detaching "." then removes the old root from this namespace. */
    if (syscall(SYS_pivot_root, ".", ".") != 0)
        child_die("pivot_root");
    if (umount2(".", MNT_DETACH) != 0)
        child_die("detach old root");
    if (chdir("/") != 0)
        child_die("chdir /");
    if (mount(NULL, "/", NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) != 0)
        child_die("remount root read-only");
}

/* lo up in the box's fresh network namespace (init holds CAP_NET_ADMIN
 * there when the backend has it): loopback works, nothing else is
 * reachable.  Without the capability (a service manager's bounding set
 * that leaves it out) lo stays down: the box is as walled, only without
 * its own loopback, and the backend said so at start (main.c). */
static void setup_loopback(void)
{
    struct ifreq ifr;
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

    if (fd < 0)
        return;
    memset(&ifr, 0, sizeof(ifr));
    memcpy(ifr.ifr_name, "lo", 3);
    if (ioctl(fd, SIOCGIFFLAGS, &ifr) == 0) {
        ifr.ifr_flags |= IFF_UP;
        (void)ioctl(fd, SIOCSIFFLAGS, &ifr);
    }
    close(fd);
}

static void setup_uts(void)
{
    if (sethostname(BOX_HOSTNAME, strlen(BOX_HOSTNAME)) != 0 || setdomainname(BOX_HOSTNAME, strlen(BOX_HOSTNAME)) != 0)
        child_die("set hostname");
}

/* After the pivot, so each rule holds the box's own inode (its /box, its
 * /tmp, its runtime binds).  A box the host made without the wall (ABI 0:
 * the kernel lacks it, or --no-landlock) has none, nor has a gVisor job
 * (runsc sets up its own sandbox: exec_runsc). */
static void setup_landlock(const struct init_args *a, struct parsed_plan *pp)
{
    const char *what = NULL;
    pp->landlock_fd = -1;
    if (a->landlock_abi <= 0 || pp->isolation == MOAT_ISOLATION_GVISOR)
        return;
    if ((pp->landlock_fd = landlock_build(a->landlock_abi, pp->ro, pp->nro, &what)) < 0)
        child_die(what);
}

/* Every descriptor from 3 up but keep1 and keep2 (-1: none). */
static void close_all_but(int keep1, int keep2)
{
    int lo = keep1 < keep2 ? keep1 : keep2, hi = keep1 < keep2 ? keep2 : keep1;
    int from = 3;
    if (lo >= 3) {
        if (lo > from)
            syscall(SYS_close_range, from, lo - 1, 0);
        from = lo + 1;
    }
    if (hi >= 3 && hi != lo) {
        if (hi > from)
            syscall(SYS_close_range, from, hi - 1, 0);
        from = hi + 1;
    }
    syscall(SYS_close_range, from, ~0U, 0);
}

/* ---- the program ------------------------------------------------------------ */

static __attribute__((noreturn)) void exec_die(int errfd, int stage, const char *what)
{
    report_send(errfd, REPORT_EXEC_FAILED, stage, 0, errno, what);
    _exit(127);
}

#define RLIM(res, val)                                                                                                             \
    do {                                                                                                                           \
        struct rlimit rl_ = {(rlim_t)(val), (rlim_t)(val)};                                                                        \
        if (setrlimit(res, &rl_) != 0)                                                                                             \
            exec_die(errfd, stage, "setrlimit " #res);                                                                             \
    } while (0)

static void setup_rlimits(const struct stage_plan *st, int errfd, int stage)
{
    uint64_t cpu_s = (st->cpu_ms + 999) / 1000 + 1; /* backstop: the cgroup clock fires first */
    RLIM(RLIMIT_CORE, 0);
    RLIM(RLIMIT_FSIZE, st->fsize);
    RLIM(RLIMIT_NOFILE, st->nofile);
    RLIM(RLIMIT_STACK, st->stack);
    RLIM(RLIMIT_MEMLOCK, 0);
    RLIM(RLIMIT_MSGQUEUE, 0);
    RLIM(RLIMIT_CPU, cpu_s);
    /* the slot's uid is its own, so this counts only this box */
    RLIM(RLIMIT_NPROC, st->pids);
}

/* Become the slot's uid and gid for good.  0, or -1 with *what the step that failed. */
static int drop_to_slot(const struct slot *s, const char **what)
{
    /* raw system calls: glibc's wrappers would try to change the uid of
     * threads that exist only in the parent */
    if (syscall(SYS_setgroups, 0, NULL) != 0)
        return *what = "setgroups", -1;
    if (syscall(SYS_setresgid, s->gid, s->gid, s->gid) != 0)
        return *what = "setresgid", -1;
    if (syscall(SYS_setresuid, s->uid, s->uid, s->uid) != 0)
        return *what = "setresuid", -1;
    /* make sure the drop cannot be undone */
    if (syscall(SYS_setresuid, 0, 0, 0) == 0)
        return *what = "privileges could be regained", -1;
    return 0;
}

static void setup_credentials(const struct slot *s, int errfd, int stage)
{
    const char *what;

    if (drop_to_slot(s, &what) != 0)
        exec_die(errfd, stage, what);
}

/* The program starts with no signal blocked or ignored: it would otherwise
 * inherit init's blocked SIGCHLD, the backend's blocked SIGTERM, SIGINT and
 * SIGHUP (kept for its signalfd) and its ignored SIGPIPE. */
static void setup_signals(int errfd, int stage)
{
    struct sigaction dfl;
    sigset_t none;

    memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; sig++)
        (void)sigaction(sig, &dfl, NULL); /* SIGKILL, SIGSTOP and glibc's own refuse: no matter */
    sigemptyset(&none);
    if (sigprocmask(SIG_SETMASK, &none, NULL) != 0)
        exec_die(errfd, stage, "sigprocmask");
}

/*
 * A gVisor stage (box_gvisor.c): runsc, rootless, as the slot's uid with
 * no capability (S37), the stage's limits in its bundle for the program
 * inside.
 * runsc keeps no rlimit but RLIMIT_CORE (its sentry's memory file is a
 * large sparse file: RLIMIT_FSIZE would kill it), and no seccomp or
 * Landlock of ours: it sets up its own sandbox, whose sentry filter takes
 * their place.  The stage's pipes are its 0-2 and the program's.
 */
static __attribute__((noreturn)) void exec_runsc(const struct init_args *a, const struct parsed_plan *pp, int stage, int errfd)
{
    const struct stage_plan *st = &pp->stages[stage];
    /* uid 0 of the user namespace runsc makes, which is the slot's uid on the host and
     * holds no capability (the bundle's): rootless runsc maps that one uid only */
    struct gvisor_stage g = {"/box",     st->argv, st->envp, 0, 0, st->fsize, st->stack, (st->cpu_ms + 999) / 1000 + 1,
                             st->nofile, st->pids};
    struct runsc_cmd cmd;
    const char *what;

    RLIM(RLIMIT_CORE, 0);
    if (gvisor_drop_caps() != 0)
        exec_die(errfd, stage, "gVisor: drop every capability");
    setup_credentials(a->slot, errfd, stage);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        exec_die(errfd, stage, "PR_SET_NO_NEW_PRIVS");
    if (unlink(GVISOR_DIR "/" GVISOR_LOG) != 0 && errno != ENOENT) /* the last stage's */
        exec_die(errfd, stage, "gVisor: remove the last stage's runsc log");
    if (gvisor_write_bundle(GVISOR_DIR "/bundle/config.json", &g, &what) != 0)
        exec_die(errfd, stage, what);
    if (chdir(GVISOR_DIR) != 0)
        exec_die(errfd, stage, "chdir " GVISOR_DIR);
    /* keep 0-2 and the close-on-exec error pipe only */
    if (errfd > 3)
        syscall(SYS_close_range, 3, errfd - 1, 0);
    syscall(SYS_close_range, errfd + 1, ~0U, 0);
    gvisor_runsc_cmd(&cmd, pp->runsc, pp->platform, GVISOR_DIR, stage == BOX_STAGE_COMPILE ? "compile" : "run");
    static char path_env[] = "PATH=/usr/bin:/bin";
    char *const env[] = {path_env, NULL};
    execve(cmd.argv[0], cmd.argv, env);
    exec_die(errfd, stage, "execve runsc");
}

static __attribute__((noreturn)) void run_program(const struct init_args *a, const struct parsed_plan *pp, int stage, int errfd)
{
    const struct stage_plan *st = &pp->stages[stage];
    if (stage == BOX_STAGE_COMPILE) {
        int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (null < 0 || dup2(null, 0) != 0 || dup2(FD_COMPILE_OUT, 1) != 1 || dup2(FD_COMPILE_ERR, 2) != 2)
            exec_die(errfd, stage, "compile stage descriptors");
    }
    if (setsid() < 0) /* new session: no controlling terminal */
        exec_die(errfd, stage, "setsid");
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
        exec_die(errfd, stage, "PR_SET_PDEATHSIG");
    setup_signals(errfd, stage);
    if (pp->isolation == MOAT_ISOLATION_GVISOR)
        exec_runsc(a, pp, stage, errfd);
    setup_rlimits(st, errfd, stage);
    setup_credentials(a->slot, errfd, stage);
    if (chdir("/box") != 0)
        exec_die(errfd, stage, "chdir /box");
    /* keep 0-2, the close-on-exec error pipe and the ruleset only */
    close_all_but(errfd, pp->landlock_fd);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        exec_die(errfd, stage, "PR_SET_NO_NEW_PRIVS");
    /* needs no_new_privs (the uid is dropped: no CAP_SYS_ADMIN); before
     * the filter, which denies the Landlock calls */
    if (pp->landlock_fd >= 0 && landlock_enforce(pp->landlock_fd) != 0)
        exec_die(errfd, stage, "landlock_restrict_self");
    if (a->seccomp && a->seccomp->len) {
        struct sock_fprog prog = {a->seccomp->len, a->seccomp->insns};
        if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) != 0)
            exec_die(errfd, stage, "install seccomp filter");
    }
    execve(st->argv[0], st->argv, st->envp);
    exec_die(errfd, stage, "execve");
}

/* Reaps every child that has ended; 1 with *status once prog is among them. */
static int reap_children(pid_t prog, int *status)
{
    int found = 0;
    for (;;) {
        int st;
        pid_t w = waitpid(-1, &st, WNOHANG);
        if (w > 0) {
            if (w == prog) {
                *status = st;
                found = 1;
            }
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno != ECHILD)
            child_die("wait");
        return found;
    }
}

#define PROGRAM_STACK_SIZE (256 * 1024) /* the stage program's clone stack, and the messenger's */

/* What the signal's messenger under gVisor starts with (relay_signal). */
struct kill_args {
    const struct init_args *a;
    const struct parsed_plan *pp;
    int stage, sig;
};

/* runsc kill, as the slot's uid (runsc's own), no capability, nothing of init's but /dev/null:
 * reaped by wait_stage as any other child.  Never returns. */
static int gvisor_messenger(void *arg)
{
    const struct kill_args *k = arg;
    static char path_env[] = "PATH=/usr/bin:/bin";
    char *const env[] = {path_env, NULL};
    struct runsc_cmd cmd;
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);

    if (null < 0 || dup2(null, 0) != 0 || dup2(null, 1) != 1 || dup2(null, 2) != 2)
        _exit(127);
    syscall(SYS_close_range, 3, ~0U, 0);
    const char *what;

    if (gvisor_drop_caps() != 0 || drop_to_slot(k->a->slot, &what) != 0 || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        _exit(127);
    gvisor_kill_cmd(&cmd, k->pp->runsc, GVISOR_DIR, k->stage == BOX_STAGE_COMPILE ? "compile" : "run", k->sig);
    execve(cmd.argv[0], cmd.argv, env);
    _exit(127);
}

/* The host asked for a signal: CTL_SIGNAL and its number.  0, or -1 once
 * the host is gone (the stage goes on; box_discard will end it). */
static int relay_signal(const struct init_args *a, const struct parsed_plan *pp, int stage, pid_t prog)
{
    uint8_t msg[2];
    if (moat_read_full(FD_CTL, msg, sizeof(msg)) != (ssize_t)sizeof(msg))
        return -1;
    if (msg[0] != CTL_SIGNAL || msg[1] < 1 || msg[1] >= NSIG) {
        errno = EINVAL;
        child_die("bad control message during a stage");
    }
    if (pp->isolation == MOAT_ISOLATION_GVISOR) {
        /* the program is gVisor's: runsc, rootless, passes the signal in (its own run
         * process would only die of it); the messenger shares init's memory until execve */
        static void *stack;
        struct kill_args k = {a, pp, stage, msg[1]};
        if (stack == NULL)
            stack = map_or_die(PROGRAM_STACK_SIZE);
        if (clone(gvisor_messenger, (char *)stack + PROGRAM_STACK_SIZE, CLONE_VM | CLONE_VFORK | SIGCHLD, &k) < 0)
            kill(-prog, msg[1]); /* no messenger: at least the stage ends */
        return 0;
    }
    /* the program's group: init's unreaped child, so the id is still its */
    kill(-prog, msg[1]);
    return 0;
}

/* Until the stage's program ends: its status.  Other children are reaped as
 * they end (orphans come to pid 1); signals from the host are relayed. */
static int wait_stage(const struct init_args *a, const struct parsed_plan *pp, int stage, int sig_fd, pid_t prog)
{
    int status = 0, ctl_open = 1;

    while (!reap_children(prog, &status)) {
        struct pollfd pfd[2] = {{sig_fd, POLLIN, 0}, {ctl_open ? FD_CTL : -1, POLLIN, 0}};
        if (poll(pfd, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            child_die("poll");
        }
        if (pfd[0].revents) {
            struct signalfd_siginfo si;
            while (read(sig_fd, &si, sizeof(si)) == (ssize_t)sizeof(si))
                ; /* which child does not matter: reap_children looks at all */
        }
        if (pfd[1].revents && relay_signal(a, pp, stage, prog) != 0)
            ctl_open = 0;
    }
    return status;
}

/* What the stage program's clone starts with (spawn_program). */
struct spawn_args {
    const struct init_args *a;
    const struct parsed_plan *pp;
    int stage;
    int errfd;
};

static int program_main(void *arg)
{
    const struct spawn_args *sa = arg;
    run_program(sa->a, sa->pp, sa->stage, sa->errfd);
}

/*
 * The stage's program, started the way posix_spawn starts one: a clone that
 * shares init's memory (CLONE_VM) on a stack of its own, while init waits
 * (CLONE_VFORK) until it has called execve or died.  Init's memory is a
 * copy of the whole multi-threaded backend's: a plain fork would copy its
 * page tables once more and tear them down again at execve, on the
 * request's path, for nothing.  The program gets its own descriptor table,
 * cwd, signal handlers, credentials, Landlock domain and seccomp filter
 * (none of CLONE_FILES, CLONE_FS, CLONE_SIGHAND, CLONE_THREAD), so
 * everything run_program changes stays its own; of the memory it shares it
 * writes only its stack, errno and, under gVisor, a buffer it maps and
 * unmaps itself (gvisor_write_bundle), none of them used by init meanwhile.
 * Nothing in run_program blocks before execve.  The stack is mapped once
 * (no malloc here) and serves every stage: they run one at a time.
 */
static pid_t spawn_program(const struct init_args *a, const struct parsed_plan *pp, int stage, int errfd)
{
    static void *stack;
    struct spawn_args sa = {a, pp, stage, errfd};

    if (stack == NULL)
        stack = map_or_die(PROGRAM_STACK_SIZE);
    return clone(program_main, (char *)stack + PROGRAM_STACK_SIZE, CLONE_VM | CLONE_VFORK | SIGCHLD, &sa);
}

static void run_stage(const struct init_args *a, const struct parsed_plan *pp, int sig_fd, int stage)
{
    int errpipe[2];

    if (pipe2(errpipe, O_CLOEXEC) != 0)
        child_die("pipe");
    /* returns once the program has called execve (or failed to) */
    pid_t prog = spawn_program(a, pp, stage, errpipe[1]);
    if (prog < 0)
        child_die("start program");
    close(errpipe[1]);
    /* this stage's pipes now belong to the program alone */
    if (stage == BOX_STAGE_COMPILE) {
        close(FD_COMPILE_OUT);
        close(FD_COMPILE_ERR);
    } else {
        close(FD_RUN_IN);
        close(FD_RUN_OUT);
        close(FD_RUN_ERR);
    }

    struct box_report r;
    ssize_t n;
    while ((n = read(errpipe[0], &r, sizeof(r))) < 0 && errno == EINTR)
        ;
    close(errpipe[0]);
    if (n == (ssize_t)sizeof(r)) {
        ssize_t w = write(FD_CTL, &r, sizeof(r));
        (void)w;
        _exit(127);
    }

    int status = wait_stage(a, pp, stage, sig_fd, prog);
    if (pp->isolation == MOAT_ISOLATION_GVISOR)
        status = gvisor_wait_status(status, GVISOR_DIR "/" GVISOR_LOG);
    /* nothing a stage started outlives it: pid 1 may signal every other
     * process of its namespace */
    kill(-1, SIGKILL);
    while (wait(NULL) > 0 || errno == EINTR)
        ;
    report_send(FD_CTL, REPORT_EXITED, stage, status, 0, NULL);
}

/* ---- the pack: /box after a stage, for other boxes ------------------------------ */

/*
 * CTL_PACK (box_pack on the host, a job with test cases): after the compile
 * stage, every regular file below /box goes to the host as bytes, for the
 * test cases' fresh boxes.  What is in /box now was written by the box's
 * own programs: all of them are dead (run_stage killed the namespace's
 * every other process), but their files may be anything.  So: each entry
 * is opened relative to its directory's descriptor with O_NOFOLLOW (a link
 * is ELOOP and left out, never followed), O_NONBLOCK (a fifo does not block
 * us) and checked with fstat on the open descriptor: regular files are
 * read, directories walked (at most MOAT_MAX_PATH_DEPTH deep), anything
 * else left out.  Sizes and counts are capped before anything is read; the
 * host checks all of it again.  No malloc: the buffer is mmap'ed, directory
 * entries come from getdents64.
 */
struct packer {
    uint8_t *buf;
    size_t len, cap;
    uint32_t count;
    uint32_t outcome;
    char path[MOAT_MAX_NAME_LEN + 2];
};

struct dirent64_raw {
    uint64_t d_ino;
    int64_t d_off;
    unsigned short d_reclen;
    unsigned char d_type;
    char d_name[];
};

static int pack_put(struct packer *pk, const void *p, size_t n)
{
    if (n > pk->cap - pk->len) {
        pk->outcome = PACK_TOO_LARGE;
        return -1;
    }
    memcpy(pk->buf + pk->len, p, n);
    pk->len += n;
    return 0;
}

static int pack_file(struct packer *pk, int fd, const struct stat *st)
{
    uint32_t nlen = (uint32_t)strlen(pk->path) + 1, exec = (st->st_mode & 0111) ? 1 : 0, clen;

    if (pk->count >= BOX_PACK_MAX_FILES) {
        pk->outcome = PACK_TOO_MANY;
        return -1;
    }
    if ((uint64_t)st->st_size > BOX_PACK_MAX_BYTES) {
        pk->outcome = PACK_TOO_LARGE;
        return -1;
    }
    clen = (uint32_t)st->st_size;
    if (pack_put(pk, &nlen, 4) || pack_put(pk, pk->path, nlen) || pack_put(pk, &exec, 4) || pack_put(pk, &clen, 4))
        return -1;
    if (clen > pk->cap - pk->len) {
        pk->outcome = PACK_TOO_LARGE;
        return -1;
    }
    size_t off = 0;
    while (off < clen) {
        ssize_t n = read(fd, pk->buf + pk->len + off, clen - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) { /* nothing else runs: the size cannot change under us */
            pk->outcome = PACK_IO;
            return -1;
        }
        off += (size_t)n;
    }
    pk->len += clen;
    pk->count++;
    return 0;
}

/* The entries of directory dfd, whose path below /box is pk->path[0..plen). */
static int pack_dir(struct packer *pk, int dfd, size_t plen, int depth)
{
    char dents[4096] __attribute__((aligned(8)));

    for (;;) {
        long n = syscall(SYS_getdents64, dfd, dents, sizeof(dents));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            pk->outcome = PACK_IO;
            return -1;
        }
        if (n == 0)
            return 0;
        for (long off = 0; off < n;) {
            const struct dirent64_raw *d = (const void *)(dents + off);
            off += d->d_reclen;
            const char *name = d->d_name;
            if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
                continue;
            size_t nl = strlen(name);
            if (plen + (plen ? 1 : 0) + nl > MOAT_MAX_NAME_LEN) {
                pk->outcome = PACK_BAD_NAME;
                return -1;
            }
            size_t at = plen;
            if (plen)
                pk->path[at++] = '/';
            memcpy(pk->path + at, name, nl + 1);
            int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
            struct stat st;
            int rc = 0;
            if (fd < 0) {
                pk->path[plen] = '\0';
                continue; /* a link (ELOOP), or what the box made unreadable: left out */
            }
            if (fstat(fd, &st) != 0) {
                pk->outcome = PACK_IO;
                rc = -1;
            } else if (S_ISREG(st.st_mode)) {
                rc = pack_file(pk, fd, &st);
            } else if (S_ISDIR(st.st_mode)) {
                if (depth + 1 >= MOAT_MAX_PATH_DEPTH) {
                    pk->outcome = PACK_TOO_DEEP;
                    rc = -1;
                } else {
                    rc = pack_dir(pk, fd, at + nl, depth + 1);
                }
            }
            close(fd);
            pk->path[plen] = '\0';
            if (rc != 0)
                return -1;
        }
    }
}

static void pack_box(void)
{
    /* content and names up to the caps, with room for every entry's lengths */
    size_t cap = BOX_PACK_MAX_BYTES + (size_t)BOX_PACK_MAX_FILES * (MOAT_MAX_NAME_LEN + 16) + 16;
    struct packer pk;
    uint32_t hdr[4];

    memset(&pk, 0, sizeof(pk));
    pk.buf = map_or_die(cap);
    pk.cap = cap;
    pk.len = sizeof(hdr);
    int boxfd = open("/box", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (boxfd < 0)
        pk.outcome = PACK_IO;
    else if (pack_dir(&pk, boxfd, 0, 0) != 0 && pk.outcome == PACK_OK)
        pk.outcome = PACK_IO;
    if (boxfd >= 0)
        close(boxfd);
    if (pk.outcome != PACK_OK) {
        pk.len = sizeof(hdr);
        pk.count = 0;
    }
    hdr[0] = PACK_MAGIC;
    hdr[1] = (uint32_t)(pk.len - 8);
    hdr[2] = pk.outcome;
    hdr[3] = pk.count;
    memcpy(pk.buf, hdr, sizeof(hdr));
    if (moat_send_full(FD_CTL, pk.buf, pk.len) != 0)
        _exit(0); /* the host is gone */
    munmap(pk.buf, cap);
}

/* SIGCHLD blocked and read from a signalfd: wait_stage polls it with the
 * control socket.  Made after setup_fds, which closes everything else. */
static int setup_child_signals(void)
{
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    if (sigprocmask(SIG_BLOCK, &chld, NULL) != 0)
        child_die("block SIGCHLD");
    int fd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
    if (fd < 0)
        child_die("signalfd");
    return fd;
}

int box_init_main(void *arg)
{
    const struct init_args *a = arg;
    struct parsed_plan pp;

    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) /* see the theory: dies with the backend */
        _exit(125);
    setup_fds(a);
    int sig_fd = setup_child_signals();
    int dev_own = setup_generic_mounts(a);
    setup_proc_masks(a->slot, dev_own);
    setup_loopback();
    read_plan(&pp);
    if (unshare(CLONE_NEWCGROUP) != 0) /* the box's cgroup becomes its root */
        child_die("unshare cgroup namespace");
    setup_job_mounts(a->slot, &pp);
    setup_pivot(a->slot);
    setup_uts();
    if (pp.isolation == MOAT_ISOLATION_GVISOR && gvisor_make_dirs(a->slot->uid, a->slot->gid) != 0)
        child_die("gVisor: make " GVISOR_DIR);
    /* rootless runsc mounts a proc of its own in its user namespace, which the kernel allows only
     * while a proc of this mount namespace is fully visible; the box's is masked (setup_proc_masks).
     * So one unmasked, hidepid=2, in the dir only runsc reaches (the program's /tmp is gVisor's) */
    if (pp.isolation == MOAT_ISOLATION_GVISOR &&
        (mkdir(GVISOR_DIR "/proc", 0500) != 0 || mount("proc", GVISOR_DIR "/proc", "proc", 0, "hidepid=2") != 0))
        child_die("gVisor: a visible proc for runsc");
    setup_landlock(a, &pp);

    for (;;) {
        char go;
        ssize_t n = read(FD_CTL, &go, 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n != 1)
            _exit(0); /* the host is done with this box */
        if (go == CTL_SIGNAL) {
            uint8_t late;
            if (moat_read_full(FD_CTL, &late, 1) != 1)
                _exit(0);
            continue; /* for a stage that has ended */
        }
        if (go == CTL_PACK) {
            pack_box();
            continue;
        }
        int stage = go - '0';
        if (stage < 0 || stage >= BOX_NSTAGES || !pp.stages[stage].present) {
            errno = EINVAL;
            child_die("bad stage request");
        }
        run_stage(a, &pp, sig_fd, stage);
    }
}
