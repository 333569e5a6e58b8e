/*
 * box.c - the box: namespaces, a read-only root, one uid per slot, a cgroup,
 * rlimits, clocks and capped output.
 *
 * Theory of operation
 * -------------------
 * box_run() (host side, a backend worker thread) prepares everything that
 * needs memory before it clones: pipes, the cgroup, and a plan of paths.  It
 * then clone()s a child into new mount, pid, net, ipc and uts namespaces.
 * That child is "init" (pid 1 of the box); it waits for the host to put it
 * into the box cgroup and say "go", then:
 *
 *   setup_fds -> setup_mounts (private propagation, tmpfs root, read-only
 *   runtime binds, /box, /tmp, /proc, /dev, /etc) -> setup_pivot ->
 *   setup_uts -> fork the program
 *
 * and the program child does setup_session -> setup_rlimits ->
 * setup_credentials -> setup_fds -> no_new_privs -> seccomp -> execve.  Init reaps
 * everything, reports the program's wait status on the status pipe and
 * exits; the kernel then kills whatever is left in the pid namespace.  The
 * child never allocates (the parent is multi-threaded): it only reads the
 * plan and makes system calls.
 *
 * The host reads stdout and stderr from its own pipes, enforcing the caps as
 * it reads, writes stdin, and watches three clocks: wall (timerfd), CPU
 * (cgroup usage, polled) and idle (no output read and no input written).  The first limit to trip kills the box through its
 * cgroup.  The host never looks inside the box's files after the run.
 */
#include "box.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

#define BOX_STACK_SIZE      (256 * 1024)
#define BOX_ROOT_TMPFS_OPTS "size=1m,nr_inodes=1024,mode=0755"
#define BOX_DEV_TMPFS_OPTS  "size=64k,nr_inodes=64,mode=0755"
#define BOX_HOSTNAME        "box"
#define CPU_POLL_MS         20
#define DRAIN_GRACE_MS      200
#define READ_CHUNK          65536

/* What init tells the host on the status pipe: one atomic write. */
enum report_kind { REPORT_EXITED = 1, REPORT_SETUP_FAILED = 2, REPORT_EXEC_FAILED = 3 };

struct report {
    int32_t kind;
    int32_t wait_status;
    int32_t err;
    char what[116];
};

/* Everything the child needs, prepared by the host before clone(). */
struct plan {
    const struct slot *slot;
    const struct box_spec *spec;
    int in_rd, out_wr, err_wr, status_wr, go_rd;
    char etc_passwd[256];
    char etc_group[128];
};

/* Fixed descriptor numbers inside init. */
enum { FD_IN = 0, FD_OUT = 1, FD_ERR = 2, FD_STATUS = 3, FD_GO = 4, FD_FIRST_FREE = 5 };

/* ==== child side (no allocation, no locks) ============================== */

static void report_send(int kind, int wait_status, int err, const char *what)
{
    struct report r;
    memset(&r, 0, sizeof(r));
    r.kind = kind;
    r.wait_status = wait_status;
    r.err = err;
    if (what) {
        size_t n = strlen(what);
        if (n >= sizeof(r.what))
            n = sizeof(r.what) - 1;
        memcpy(r.what, what, n);
    }
    ssize_t w = write(FD_STATUS, &r, sizeof(r));
    (void)w;
}

static __attribute__((noreturn)) void child_die(const char *what)
{
    report_send(REPORT_SETUP_FAILED, 0, errno, what);
    _exit(126);
}

/* Builds root + path into buf; the plan's paths are all short. */
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

/* Moves the descriptors init needs to fixed numbers and closes the rest,
 * including every descriptor of the (multi-threaded) backend. */
static void setup_fds(const struct plan *p)
{
    int src[5] = {p->in_rd, p->out_wr, p->err_wr, p->status_wr, p->go_rd};
    int high[5];
    for (int i = 0; i < 5; i++)
        if ((high[i] = fcntl(src[i], F_DUPFD, 1000)) < 0)
            _exit(125);
    for (int i = 0; i < 5; i++)
        if (dup2(high[i], i) != i)
            _exit(125);
    if (syscall(SYS_close_range, FD_FIRST_FREE, ~0U, 0) != 0)
        for (int fd = FD_FIRST_FREE; fd < 65536; fd++)
            close(fd);
}

static void bind_ro(const struct slot *s, const char *path)
{
    char dst[PATH_MAX], target[PATH_MAX];
    struct stat st;

    if (lstat(path, &st) != 0) {
        if (errno == ENOENT)
            return; /* a runtime dir this host does not have */
        child_die("lstat runtime path");
    }
    if (S_ISLNK(st.st_mode)) {
        /* merged-/usr symlinks such as /bin -> usr/bin are recreated */
        ssize_t n = readlink(path, target, sizeof(target) - 1);
        if (n < 0)
            child_die("readlink runtime path");
        target[n] = '\0';
        char *slash = strrchr(path, '/');
        if (slash && slash != path) {
            char parent[PATH_MAX];
            size_t plen = (size_t)(slash - path);
            if (plen >= sizeof(parent))
                child_die("path too long");
            memcpy(parent, path, plen);
            parent[plen] = '\0';
            mkdir_below_root(s, parent);
        }
        if (symlink(target, in_root(dst, sizeof(dst), s, path)) != 0 && errno != EEXIST)
            child_die("symlink in box root");
        return;
    }
    if (S_ISDIR(st.st_mode)) {
        mkdir_below_root(s, path);
    } else {
        char *slash = strrchr(path, '/');
        if (slash && slash != path) {
            char parent[PATH_MAX];
            size_t plen = (size_t)(slash - path);
            memcpy(parent, path, plen);
            parent[plen] = '\0';
            mkdir_below_root(s, parent);
        }
        int fd = open(in_root(dst, sizeof(dst), s, path), O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0)
            child_die("create bind target");
        close(fd);
    }
    in_root(dst, sizeof(dst), s, path);
    /* Not MS_REC: submounts of a runtime dir stay hidden rather than
     * appearing writable. */
    if (mount(path, dst, NULL, MS_BIND, NULL) != 0)
        child_die("bind runtime path");
    if (mount(NULL, dst, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) != 0)
        child_die("remount runtime path read-only");
}

static void setup_dev(const struct slot *s)
{
    static const char *const nodes[] = {"null", "zero", "random", "urandom"};
    char dst[PATH_MAX], src[32];

    mkdir_below_root(s, "/dev");
    if (mount("tmpfs", in_root(dst, sizeof(dst), s, "/dev"), "tmpfs", MS_NOSUID | MS_NOEXEC, BOX_DEV_TMPFS_OPTS) != 0)
        child_die("mount /dev tmpfs");
    for (size_t i = 0; i < sizeof(nodes) / sizeof(nodes[0]); i++) {
        char rel[32];
        snprintf(rel, sizeof(rel), "/dev/%s", nodes[i]);
        snprintf(src, sizeof(src), "/dev/%s", nodes[i]);
        int fd = open(in_root(dst, sizeof(dst), s, rel), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
        if (fd < 0)
            child_die("create /dev node");
        close(fd);
        if (mount(src, dst, NULL, MS_BIND, NULL) != 0)
            child_die("bind /dev node");
        if (mount(NULL, dst, NULL, MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NOEXEC, NULL) != 0)
            child_die("remount /dev node");
    }
    static const char *const links[][2] = {
        {"/proc/self/fd", "/dev/fd"},
        {"/proc/self/fd/0", "/dev/stdin"},
        {"/proc/self/fd/1", "/dev/stdout"},
        {"/proc/self/fd/2", "/dev/stderr"},
    };
    for (size_t i = 0; i < sizeof(links) / sizeof(links[0]); i++)
        if (symlink(links[i][0], in_root(dst, sizeof(dst), s, links[i][1])) != 0)
            child_die("symlink in /dev");
    if (mount(NULL, in_root(dst, sizeof(dst), s, "/dev"), NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC, NULL) !=
        0)
        child_die("remount /dev read-only");
}

static void setup_mounts(const struct plan *p)
{
    const struct slot *s = p->slot;
    const struct box_spec *spec = p->spec;
    char dst[PATH_MAX], opts[128];

    /* nothing we mount may propagate back to the host */
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
        child_die("make mounts private");
    if (mount("tmpfs", s->root, "tmpfs", MS_NOSUID | MS_NODEV, BOX_ROOT_TMPFS_OPTS) != 0)
        child_die("mount root tmpfs");

    for (size_t i = 0; i < spec->nro; i++)
        bind_ro(s, spec->ro[i].path);

    /* /box: the job's tmpfs, shared by its stages */
    mkdir_below_root(s, "/box");
    if (mount(s->box, in_root(dst, sizeof(dst), s, "/box"), NULL, MS_BIND, NULL) != 0)
        child_die("bind /box");
    if (mount(NULL, dst, NULL, MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV, NULL) != 0)
        child_die("remount /box nosuid,nodev");

    /* /tmp: private to this stage, size-capped */
    mkdir_below_root(s, "/tmp");
    snprintf(opts, sizeof(opts), "size=%llu,nr_inodes=4096,mode=1777", (unsigned long long)spec->lim.tmp_bytes);
    if (mount("tmpfs", in_root(dst, sizeof(dst), s, "/tmp"), "tmpfs", MS_NOSUID | MS_NODEV, opts) != 0)
        child_die("mount /tmp");

    /* /proc of our own pid namespace; other users' processes hidden */
    mkdir_below_root(s, "/proc");
    if (mount("proc", in_root(dst, sizeof(dst), s, "/proc"), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=2") != 0)
        child_die("mount /proc");

    setup_dev(s);

    mkdir_below_root(s, "/etc");
    write_small_file(s, "/etc/passwd", p->etc_passwd);
    write_small_file(s, "/etc/group", p->etc_group);
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

static void setup_uts(void)
{
    if (sethostname(BOX_HOSTNAME, strlen(BOX_HOSTNAME)) != 0 || setdomainname(BOX_HOSTNAME, strlen(BOX_HOSTNAME)) != 0)
        child_die("set hostname");
}

#define RLIM(res, val)                                                                                                             \
    do {                                                                                                                           \
        struct rlimit rl_ = {(rlim_t)(val), (rlim_t)(val)};                                                                        \
        if (setrlimit(res, &rl_) != 0)                                                                                             \
            exec_die(errfd, "setrlimit " #res);                                                                                    \
    } while (0)

static __attribute__((noreturn)) void exec_die(int errfd, const char *what)
{
    struct report r;
    memset(&r, 0, sizeof(r));
    r.kind = REPORT_EXEC_FAILED;
    r.err = errno;
    snprintf(r.what, sizeof(r.what), "%s", what);
    ssize_t w = write(errfd, &r, sizeof(r));
    (void)w;
    _exit(127);
}

static void setup_rlimits(const struct box_limits *lim, int errfd)
{
    uint64_t cpu_s = (lim->cpu_ms + 999) / 1000 + 1; /* backstop: the cgroup clock fires first */
    RLIM(RLIMIT_CORE, 0);
    RLIM(RLIMIT_FSIZE, lim->fsize_bytes);
    RLIM(RLIMIT_NOFILE, lim->nofile);
    RLIM(RLIMIT_STACK, 64ull * 1024 * 1024);
    RLIM(RLIMIT_MEMLOCK, 0);
    RLIM(RLIMIT_MSGQUEUE, 0);
    RLIM(RLIMIT_CPU, cpu_s);
    /* the slot's uid is its own, so this counts only this box */
    RLIM(RLIMIT_NPROC, lim->pids);
}

static void setup_credentials(const struct slot *s, int errfd)
{
    if (setgroups(0, NULL) != 0)
        exec_die(errfd, "setgroups");
    if (setresgid(s->gid, s->gid, s->gid) != 0)
        exec_die(errfd, "setresgid");
    if (setresuid(s->uid, s->uid, s->uid) != 0)
        exec_die(errfd, "setresuid");
    /* make sure the drop cannot be undone */
    if (setresuid(0, 0, 0) == 0)
        exec_die(errfd, "privileges could be regained");
}

static __attribute__((noreturn)) void run_program(const struct plan *p, int errfd)
{
    const struct box_spec *spec = p->spec;

    if (setsid() < 0) /* new session: no controlling terminal */
        exec_die(errfd, "setsid");
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
        exec_die(errfd, "PR_SET_PDEATHSIG");
    setup_rlimits(&spec->lim, errfd);
    setup_credentials(p->slot, errfd);
    if (chdir("/box") != 0)
        exec_die(errfd, "chdir /box");
    /* keep 0-2 and the close-on-exec error pipe only */
    if (errfd > 3)
        syscall(SYS_close_range, 3, errfd - 1, 0);
    syscall(SYS_close_range, errfd + 1, ~0U, 0);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        exec_die(errfd, "PR_SET_NO_NEW_PRIVS");
    if (spec->seccomp && seccomp_policy_install(spec->seccomp) != 0)
        exec_die(errfd, "install seccomp filter");
    execve(spec->argv[0], spec->argv, spec->envp);
    exec_die(errfd, "execve");
}

/* pid 1 of the box. */
static int box_init(void *arg)
{
    const struct plan *p = arg;
    char go;

    setup_fds(p);
    if (read(FD_GO, &go, 1) != 1)
        _exit(125); /* the host gave up on us */
    close(FD_GO);
    if (unshare(CLONE_NEWCGROUP) != 0) /* the box's cgroup becomes its root */
        child_die("unshare cgroup namespace");
    setup_mounts(p);
    setup_pivot(p->slot);
    setup_uts();

    int errpipe[2];
    if (pipe2(errpipe, O_CLOEXEC) != 0)
        child_die("pipe");
    pid_t prog = fork();
    if (prog < 0)
        child_die("fork program");
    if (prog == 0) {
        close(errpipe[0]);
        close(FD_STATUS);
        run_program(p, errpipe[1]);
    }
    close(errpipe[1]);
    close(FD_IN);
    close(FD_OUT);
    close(FD_ERR);

    struct report r;
    ssize_t n;
    while ((n = read(errpipe[0], &r, sizeof(r))) < 0 && errno == EINTR)
        ;
    if (n == (ssize_t)sizeof(r)) {
        ssize_t w = write(FD_STATUS, &r, sizeof(r));
        (void)w;
        _exit(127);
    }
    close(errpipe[0]);

    /* reap orphans too, until the program itself has ended */
    for (;;) {
        int st;
        pid_t w = wait(&st);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            child_die("wait");
        }
        if (w == prog) {
            report_send(REPORT_EXITED, st, 0, NULL);
            _exit(0);
        }
    }
}

/* ==== host side ========================================================== */

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int slot_init(struct slot *s, int index, const char *run_dir, uid_t uid, struct errbuf *e)
{
    memset(s, 0, sizeof(*s));
    s->index = index;
    s->uid = uid;
    s->gid = (gid_t)uid;
    if ((size_t)snprintf(s->dir, sizeof(s->dir), "%s/slots/%d", run_dir, index) >= sizeof(s->dir) ||
        (size_t)snprintf(s->root, sizeof(s->root), "%s/root", s->dir) >= sizeof(s->root) ||
        (size_t)snprintf(s->box, sizeof(s->box), "%s/box", s->dir) >= sizeof(s->box))
        return errf(e, "run dir path too long");
    snprintf(s->cg_name, sizeof(s->cg_name), "slot%d", index);
    char slots[PATH_MAX];
    snprintf(slots, sizeof(slots), "%s/slots", run_dir);
    if (mkdir(slots, 0700) != 0 && errno != EEXIST)
        return errf_errno(e, "mkdir %s", slots);
    const char *dirs[] = {s->dir, s->root, s->box};
    for (int i = 0; i < 3; i++) {
        struct stat st;
        if (mkdir(dirs[i], 0700) != 0 && errno != EEXIST)
            return errf_errno(e, "mkdir %s", dirs[i]);
        /* refuse anything but our own root-owned directory */
        if (lstat(dirs[i], &st) != 0)
            return errf_errno(e, "lstat %s", dirs[i]);
        if (!S_ISDIR(st.st_mode) || st.st_uid != 0)
            return errf(e, "%s: not a root-owned directory", dirs[i]);
    }
    s->stack_size = BOX_STACK_SIZE;
    s->stack = mmap(NULL, s->stack_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (s->stack == MAP_FAILED) {
        s->stack = NULL;
        return errf_errno(e, "mmap box stack");
    }
    return 0;
}

void slot_cleanup_stale(struct slot *s)
{
    /* lazy unmounts of anything a crashed backend left mounted here */
    while (umount2(s->box, MNT_DETACH) == 0)
        ;
    while (umount2(s->root, MNT_DETACH) == 0)
        ;
}

int slot_job_begin(struct slot *s, uint64_t box_bytes, const struct moat_file *files, size_t nfiles, struct errbuf *e)
{
    char opts[128];
    snprintf(opts, sizeof(opts), "size=%llu,nr_inodes=4096,mode=0700,uid=%u,gid=%u", (unsigned long long)box_bytes,
             (unsigned)s->uid, (unsigned)s->gid);
    if (mount("tmpfs", s->box, "tmpfs", MS_NOSUID | MS_NODEV, opts) != 0)
        return errf_errno(e, "mount job tmpfs on %s", s->box);
    s->job_mounted = 1;

    /* The tmpfs is new and nothing untrusted has run in it yet; still,
     * create with O_EXCL|O_NOFOLLOW relative to a directory fd. */
    int dfd = open(s->box, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0) {
        errf_errno(e, "open %s", s->box);
        goto fail;
    }
    for (size_t i = 0; i < nfiles; i++) {
        int fd = openat(dfd, files[i].name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0) {
            errf_errno(e, "create box file");
            close(dfd);
            goto fail;
        }
        size_t off = 0;
        while (off < files[i].content_len) {
            ssize_t n = write(fd, files[i].content + off, files[i].content_len - off);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0) {
                errf_errno(e, "write box file (files larger than the box?)");
                close(fd);
                close(dfd);
                goto fail;
            }
            off += (size_t)n;
        }
        close(fd);
    }
    close(dfd);
    return 0;
fail:
    slot_job_end(s);
    return -1;
}

void slot_job_end(struct slot *s)
{
    if (s->job_mounted) {
        if (umount2(s->box, MNT_DETACH) != 0)
            log_warn("%s: umount %s", __func__, s->box);
        s->job_mounted = 0;
    }
}

static int stream_init(struct box_stream *st, size_t cap, struct errbuf *e)
{
    st->len = 0;
    st->cap = cap;
    st->data = malloc(cap ? cap : 1);
    if (st->data == NULL)
        return errf(e, "out of memory for output buffer");
    return 0;
}

void box_result_free(struct box_result *res)
{
    free(res->out.data);
    free(res->err.data);
    free(res->both.data);
    memset(res, 0, sizeof(*res));
}

/* Appends up to the cap; returns 1 if bytes had to be dropped. */
static int stream_append(struct box_stream *st, const uint8_t *data, size_t len)
{
    size_t room = st->cap - st->len;
    size_t take = len < room ? len : room;
    memcpy(st->data + st->len, data, take);
    st->len += take;
    return take < len;
}

struct host_state {
    int out_rd, err_rd, status_rd, in_wr, timer;
    int out_open, err_open, status_open;
    size_t in_off;
    int killed; /* a limit killed the box */
    uint8_t kill_status;
    const char *kill_message;
    int have_report;
    struct report report;
    uint64_t last_activity_ms; /* for the idle clock */
};

static void kill_now(pid_t init_pid, struct cg_box *cgb)
{
    struct errbuf e;
    kill(init_pid, SIGKILL);
    if (cg_box_kill(cgb, &e) != 0)
        log_warnx("%s: %s", __func__, e.msg);
}

/* Kills the box for a limit; the first limit to trip names the status. */
static void kill_box(pid_t init_pid, struct cg_box *cgb, struct host_state *h, uint8_t status, const char *message)
{
    if (!h->killed) {
        h->killed = 1;
        h->kill_status = status;
        h->kill_message = message;
    }
    kill_now(init_pid, cgb);
}

static void close_fd(int *fd)
{
    if (*fd >= 0) {
        close(*fd);
        *fd = -1;
    }
}

/* Reads what one pipe has; enforces the stream's cap while reading. */
static void drain_pipe(int *fd, int *open_flag, struct box_stream *st, struct box_stream *both, pid_t init_pid, struct cg_box *cgb,
                       struct host_state *h, uint8_t over_status, const char *over_message)
{
    uint8_t buf[READ_CHUNK];
    ssize_t n = read(*fd, buf, sizeof(buf));
    if (n < 0) {
        if (errno == EINTR || errno == EAGAIN)
            return;
        n = 0;
    }
    if (n == 0) {
        close_fd(fd);
        *open_flag = 0;
        return;
    }
    h->last_activity_ms = now_ms();
    int over = stream_append(st, buf, (size_t)n);
    stream_append(both, buf, (size_t)n);
    if (over)
        kill_box(init_pid, cgb, h, over_status, over_message);
}

static void feed_stdin(const struct box_spec *spec, struct host_state *h)
{
    if (h->in_wr < 0)
        return;
    if (h->in_off < spec->stdin_len) {
        ssize_t n = write(h->in_wr, spec->stdin_data + h->in_off, spec->stdin_len - h->in_off);
        if (n > 0) {
            h->in_off += (size_t)n;
            h->last_activity_ms = now_ms();
        }
        else if (n < 0 && errno != EAGAIN && errno != EINTR)
            h->in_off = spec->stdin_len; /* EPIPE: the program stopped reading */
    }
    if (h->in_off >= spec->stdin_len)
        close_fd(&h->in_wr);
}

static void read_report(struct host_state *h)
{
    ssize_t n = read(h->status_rd, &h->report, sizeof(h->report));
    if (n == (ssize_t)sizeof(h->report))
        h->have_report = 1;
    if (n <= 0 || n == (ssize_t)sizeof(h->report)) {
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            return;
        close_fd(&h->status_rd);
        h->status_open = 0;
    }
}

static void supervise(const struct box_spec *spec, pid_t init_pid, struct cg_box *cgb, struct host_state *h, struct box_result *res,
                      uint64_t start_ms)
{
    uint64_t drain_deadline = 0;
    uint64_t cpu_limit_ns = spec->lim.cpu_ms * 1000000ull;

    while (h->out_open || h->err_open || h->status_open) {
        struct pollfd pfd[5];
        int nfds = 0, i_out = -1, i_err = -1, i_st = -1, i_in = -1, i_tm = -1;
        if (h->out_open) {
            i_out = nfds;
            pfd[nfds++] = (struct pollfd){h->out_rd, POLLIN, 0};
        }
        if (h->err_open) {
            i_err = nfds;
            pfd[nfds++] = (struct pollfd){h->err_rd, POLLIN, 0};
        }
        if (h->status_open) {
            i_st = nfds;
            pfd[nfds++] = (struct pollfd){h->status_rd, POLLIN, 0};
        }
        if (h->in_wr >= 0) {
            i_in = nfds;
            pfd[nfds++] = (struct pollfd){h->in_wr, POLLOUT, 0};
        }
        i_tm = nfds;
        pfd[nfds++] = (struct pollfd){h->timer, POLLIN, 0};

        int timeout = CPU_POLL_MS;
        if (drain_deadline) {
            uint64_t now = now_ms();
            if (now >= drain_deadline) {
                /* the program ended but something still holds a pipe */
                kill_now(init_pid, cgb);
                drain_deadline = 0;
            }
        }
        int n = poll(pfd, (nfds_t)nfds, timeout);
        if (n < 0 && errno != EINTR) {
            log_warn("%s: poll", __func__);
            kill_box(init_pid, cgb, h, MOAT_STATUS_XX, "internal error: poll failed");
            break;
        }
        if (n > 0) {
            if (i_out >= 0 && pfd[i_out].revents)
                drain_pipe(&h->out_rd, &h->out_open, &res->out, &res->both, init_pid, cgb, h, MOAT_STATUS_OL,
                           "stdout length exceeded");
            if (i_err >= 0 && pfd[i_err].revents)
                drain_pipe(&h->err_rd, &h->err_open, &res->err, &res->both, init_pid, cgb, h, MOAT_STATUS_EL,
                           "stderr length exceeded");
            if (i_st >= 0 && pfd[i_st].revents)
                read_report(h);
            if (i_in >= 0 && pfd[i_in].revents)
                feed_stdin(spec, h);
            if (pfd[i_tm].revents & POLLIN) {
                uint64_t ticks;
                ssize_t r = read(h->timer, &ticks, sizeof(ticks));
                (void)r;
                kill_box(init_pid, cgb, h, MOAT_STATUS_TO, "wall-time limit exceeded");
            }
        }
        if (!h->killed && spec->lim.idle_ms && h->status_open && now_ms() - h->last_activity_ms > spec->lim.idle_ms)
            kill_box(init_pid, cgb, h, MOAT_STATUS_TO, "idle-time limit exceeded");
        if (!h->killed && cpu_limit_ns) {
            struct cg_usage u;
            struct errbuf e;
            if (cg_box_usage(cgb, &u, &e) == 0 && u.cpu_ns > cpu_limit_ns)
                kill_box(init_pid, cgb, h, MOAT_STATUS_TO, "cpu-time limit exceeded");
        }
        if (!h->status_open && !drain_deadline && (h->out_open || h->err_open))
            drain_deadline = now_ms() + DRAIN_GRACE_MS;
    }
    res->wall_ms = now_ms() - start_ms;
}

static void classify(const struct host_state *h, const struct cg_usage *u, struct box_result *res)
{
    if (h->have_report && h->report.kind == REPORT_EXITED) {
        int st = h->report.wait_status;
        if (WIFEXITED(st)) {
            res->has_code = 1;
            res->code = WEXITSTATUS(st);
            res->status = res->code ? MOAT_STATUS_RE : MOAT_STATUS_OK;
        } else if (WIFSIGNALED(st)) {
            res->has_signal = 1;
            res->signal = WTERMSIG(st);
            res->status = MOAT_STATUS_SG;
        }
    }
    if (h->killed) {
        res->status = h->kill_status;
        snprintf(res->message, sizeof(res->message), "%s", h->kill_message ? h->kill_message : "killed");
        if (!res->has_signal && !res->has_code) {
            res->has_signal = 1;
            res->signal = SIGKILL;
        }
    } else if (u->oom_kills > 0 && (res->has_signal || !h->have_report)) {
        res->status = MOAT_STATUS_ML;
        snprintf(res->message, sizeof(res->message), "memory limit exceeded");
        if (!res->has_signal) {
            res->has_signal = 1;
            res->signal = SIGKILL;
        }
    } else if (res->status == MOAT_STATUS_SG && res->signal == SIGXCPU) {
        res->status = MOAT_STATUS_TO;
        snprintf(res->message, sizeof(res->message), "cpu-time limit exceeded");
    } else if (res->status == MOAT_STATUS_SG) {
        const char *abbrev = sigabbrev_np(res->signal);
        snprintf(res->message, sizeof(res->message), "killed by signal SIG%s", abbrev ? abbrev : "?");
    } else if (res->status == MOAT_STATUS_RE) {
        snprintf(res->message, sizeof(res->message), "exited with code %d", res->code);
    } else if (!h->have_report) {
        res->status = MOAT_STATUS_XX;
        snprintf(res->message, sizeof(res->message), "internal error: box ended without a report");
    } else if (h->report.kind == REPORT_SETUP_FAILED) {
        res->status = MOAT_STATUS_XX;
        snprintf(res->message, sizeof(res->message), "internal error: box setup failed: %.100s: %s", h->report.what,
                 strerror(h->report.err));
    } else if (h->report.kind == REPORT_EXEC_FAILED) {
        res->status = MOAT_STATUS_XX;
        snprintf(res->message, sizeof(res->message), "internal error: could not start program: %.100s: %s", h->report.what,
                 strerror(h->report.err));
    }
}

int box_run(const struct cg_system *cg, struct slot *s, const struct box_spec *spec, struct box_result *res, struct errbuf *e)
{
    int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1}, status[2] = {-1, -1}, go[2] = {-1, -1};
    struct host_state h;
    struct cg_box cgb;
    struct plan plan;
    pid_t pid = -1;
    int rc = -1;

    memset(res, 0, sizeof(*res));
    memset(&h, 0, sizeof(h));
    memset(&cgb, 0, sizeof(cgb));
    h.out_rd = h.err_rd = h.status_rd = h.in_wr = h.timer = -1;

    if (stream_init(&res->out, spec->lim.output_cap, e) != 0 || stream_init(&res->err, spec->lim.output_cap, e) != 0 ||
        stream_init(&res->both, spec->lim.output_cap * 2, e) != 0)
        goto out;
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0 || pipe2(status, O_CLOEXEC) != 0 ||
        pipe2(go, O_CLOEXEC) != 0) {
        errf_errno(e, "pipe");
        goto out;
    }
    if ((h.timer = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK)) < 0) {
        errf_errno(e, "timerfd_create");
        goto out;
    }
    if (cg_box_create(cg, &cgb, s->cg_name, e) != 0 || cg_box_set_limits(&cgb, spec->lim.memory_bytes, spec->lim.pids, e) != 0)
        goto out;

    memset(&plan, 0, sizeof(plan));
    plan.slot = s;
    plan.spec = spec;
    plan.in_rd = in[0];
    plan.out_wr = out[1];
    plan.err_wr = err[1];
    plan.status_wr = status[1];
    plan.go_rd = go[0];
    snprintf(plan.etc_passwd, sizeof(plan.etc_passwd), "root:x:0:0:root:/:/usr/sbin/nologin\nbox:x:%u:%u:box:/box:/bin/sh\n",
             (unsigned)s->uid, (unsigned)s->gid);
    snprintf(plan.etc_group, sizeof(plan.etc_group), "root:x:0:\nbox:x:%u:\n", (unsigned)s->gid);

    pid = clone(box_init, (char *)s->stack + s->stack_size,
                CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | SIGCHLD, &plan);
    if (pid < 0) {
        errf_errno(e, "clone box");
        goto out;
    }
    close_fd(&in[0]);
    close_fd(&out[1]);
    close_fd(&err[1]);
    close_fd(&status[1]);
    close_fd(&go[0]);

    if (cg_box_attach(&cgb, pid, e) != 0) {
        kill(pid, SIGKILL);
        goto out;
    }
    struct itimerspec its = {{0, 0}, {(time_t)(spec->lim.wall_ms / 1000), (long)(spec->lim.wall_ms % 1000) * 1000000L}};
    if (timerfd_settime(h.timer, 0, &its, NULL) != 0) {
        errf_errno(e, "timerfd_settime");
        kill(pid, SIGKILL);
        goto out;
    }
    uint64_t start = now_ms();
    h.last_activity_ms = start;
    if (write(go[1], "g", 1) != 1) {
        errf_errno(e, "start box");
        kill(pid, SIGKILL);
        goto out;
    }
    close_fd(&go[1]);

    h.out_rd = out[0];
    h.err_rd = err[0];
    h.status_rd = status[0];
    h.in_wr = in[1];
    out[0] = err[0] = status[0] = in[1] = -1;
    h.out_open = h.err_open = h.status_open = 1;
    fcntl(h.in_wr, F_SETFL, O_NONBLOCK);
    if (spec->stdin_len == 0)
        close_fd(&h.in_wr);

    supervise(spec, pid, &cgb, &h, res, start);

    /* init is gone or going; waitpid returns once the whole pid namespace
     * has been torn down */
    kill(pid, SIGKILL);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
        ;
    pid = -1;

    struct cg_usage u;
    struct errbuf ue;
    if (cg_box_usage(&cgb, &u, &ue) != 0) {
        log_warnx("%s: %s", __func__, ue.msg);
        memset(&u, 0, sizeof(u));
    }
    res->cpu_ms = u.cpu_ns / 1000000;
    res->memory_bytes = u.memory_peak;
    classify(&h, &u, res);
    rc = 0;
out:
    if (pid > 0) {
        kill(pid, SIGKILL);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
    }
    if (cgb.path[0][0]) {
        struct errbuf de;
        if (cg_box_destroy(&cgb, &de) != 0) {
            log_warnx("%s: %s", __func__, de.msg);
            if (rc == 0) {
                rc = -1;
                snprintf(e->msg, sizeof(e->msg), "%s", de.msg);
            }
        }
    }
    int *fds[] = {&in[0], &in[1], &out[0],   &out[1],   &err[0],      &err[1],  &status[0], &status[1],
                  &go[0], &go[1], &h.out_rd, &h.err_rd, &h.status_rd, &h.in_wr, &h.timer};
    for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
        close_fd(fds[i]);
    if (rc != 0)
        box_result_free(res);
    s->runs++;
    return rc;
}
