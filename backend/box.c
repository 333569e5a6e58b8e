/*
 * box.c - the host side of a box: warm preparation, the plan, supervision of
 * each stage, and disposal.
 *
 * Theory of operation
 * -------------------
 * Everything slow about a box happens before a request needs it.
 * box_prepare() creates a fresh cgroup for the slot, makes the control
 * socket and the stage pipes (given to the slot's uid, so that the program
 * can reopen its stdin, stdout and stderr as /dev/stdin etc.:
 * give_pipe_to_slot), and clone()s init (box_init.c) into new
 * mount, pid, net, ipc and uts namespaces, then attaches it to the cgroup
 * (on cgroup v1 a migration waits for an RCU grace period, ~10 ms, which is
 * why it is done here).  Init mounts the generic parts of the root and
 * waits.
 *
 * On a request, box_start() sends the plan (runtime paths, files, each
 * stage's argv, environment and rlimits).  Init binds the runtime read-only,
 * writes the files into a fresh /box tmpfs, pivots and waits for "go".
 * box_run_stage_io() sets the stage's cgroup limits (a box that already
 * holds more than the stage's memory limit, files left in its tmpfs by the
 * compile stage, ends that stage ML without running it), sends "go", and
 * supervises, in the one loop batch and sessions share (supervise): it
 * reads stdout and stderr from pipes it made itself, as far as its sink
 * (struct box_io) has room, writes stdin as its source has it, polls one
 * more descriptor for the sink (a session's connection), and watches three
 * clocks: wall (an absolute timerfd: the stage's own limit or the io's
 * deadline, whichever comes first), CPU (the stage's cgroup usage, polled no
 * sooner than the rest of the budget could be spent) and idle (no output
 * read and no input written or received; output the sink holds back while
 * the program has more in the pipe is not idleness).  The first limit to
 * trip kills the box through its cgroup.  The batch sink (box_run_stage)
 * has room for everything, keeps each stream up to its cap and kills the
 * box for the first byte past it; session.c's sends frames while the
 * gateway's credit lasts.  Init reports the program's wait status after
 * reaping it and everything it started; during a stage it also relays
 * signals (box_signal).  An OOM kill of any process of the stage makes the
 * stage ML, whatever the program's own exit (cc1 killed, gcc exits 1).
 *
 * box_discard() runs after the reply has been sent: kill init (the kernel
 * tears the pid namespace down), kill anything left in the cgroup, remove
 * it.  The host never opens, reads or follows anything inside the box.
 */
#include "box.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "box_internal.h"
#include "landlock.h"
#include "log.h"
#include "moat_buf.h"
#include "moat_io.h"
#include "moat_limits.h"
#include "moat_path.h"

#define MOAT_STR_(x) #x
#define MOAT_STR(x)  MOAT_STR_(x)

#define BOX_STACK_SIZE  (256 * 1024)
#define CPU_POLL_MS     20
#define CPU_POLL_MAX_MS 1000
#define DRAIN_GRACE_MS  200
#define READ_CHUNK      65536

uint64_t box_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void close_fd(int *fd)
{
    if (*fd >= 0) {
        close(*fd);
        *fd = -1;
    }
}

/* ---- slots ------------------------------------------------------------- */

static void warm_reset(struct warm_box *w)
{
    memset(w, 0, sizeof(*w));
    w->init_pid = -1;
    w->ctl = w->in_wr = -1;
    for (int k = 0; k < BOX_NSTAGES; k++)
        w->out_rd[k] = w->err_rd[k] = -1;
}

int slot_init(struct slot *s, int index, const char *cg_name, const char *run_dir, uid_t uid, struct errbuf *e)
{
    memset(s, 0, sizeof(*s));
    warm_reset(&s->warm);
    s->index = index;
    s->uid = uid;
    s->gid = (gid_t)uid;
    if ((size_t)snprintf(s->dir, sizeof(s->dir), "%s/slots/%d", run_dir, index) >= sizeof(s->dir) ||
        (size_t)snprintf(s->root, sizeof(s->root), "%s/root", s->dir) >= sizeof(s->root))
        return errf(e, "run dir path too long");
    if ((size_t)snprintf(s->cg_name, sizeof(s->cg_name), "%s", cg_name) >= sizeof(s->cg_name))
        return errf(e, "cgroup name too long: %s", cg_name);
    char slots[PATH_MAX];
    snprintf(slots, sizeof(slots), "%s/slots", run_dir);
    if (mkdir(slots, 0700) != 0 && errno != EEXIST)
        return errf_errno(e, "mkdir %s", slots);
    const char *dirs[] = {s->dir, s->root};
    for (int i = 0; i < 2; i++) {
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

/* ---- preparation ---------------------------------------------------------- */

void box_discard(struct slot *s)
{
    struct warm_box *w = &s->warm;
    struct errbuf e;

    if (w->init_pid > 0) {
        kill(w->init_pid, SIGKILL);
        /* returns once the whole pid namespace has been torn down */
        while (waitpid(w->init_pid, NULL, 0) < 0 && errno == EINTR)
            ;
    }
    if (w->cgb.path[0][0] && cg_box_destroy(&w->cgb, &e) != 0)
        log_warnx("%s: slot %d: %s", __func__, s->index, e.msg);
    close_fd(&w->ctl);
    close_fd(&w->in_wr);
    for (int k = 0; k < BOX_NSTAGES; k++) {
        close_fd(&w->out_rd[k]);
        close_fd(&w->err_rd[k]);
    }
    warm_reset(w);
}

/*
 * Slot s's init_args, cleared and filled but for the descriptors: a static
 * copy per slot, because init reads it after clone() (no malloc there) and a
 * slot prepares one box at a time.  The pools keep slot indexes below
 * MAX_BOXES (batch slots first, then session slots; -j and --sessions are
 * capped too); checked again here rather than masked, so a bad index fails
 * instead of sharing another slot's copy.
 */
static struct init_args *slot_init_args(const struct slot *s, const struct seccomp_prog *seccomp, struct errbuf *e)
{
    static struct init_args args[MAX_BOXES];
    struct init_args *a;

    if (s->index < 0 || s->index >= MAX_BOXES) {
        errf(e, "slot index %d out of range 0..%d", s->index, MAX_BOXES - 1);
        return NULL;
    }
    a = &args[s->index];
    memset(a, 0, sizeof(*a));
    a->slot = s;
    a->seccomp = seccomp;
    a->landlock_abi = landlock_abi();
    snprintf(a->etc_passwd, sizeof(a->etc_passwd), "root:x:0:0:root:/:/usr/sbin/nologin\nbox:x:%u:%u:box:/box:/bin/sh\n",
             (unsigned)s->uid, (unsigned)s->gid);
    snprintf(a->etc_group, sizeof(a->etc_group), "root:x:0:\nbox:x:%u:\n", (unsigned)s->gid);
    return a;
}

const char *box_walls(uint8_t isolation)
{
    if (isolation == MOAT_ISOLATION_GVISOR) /* runsc brings its own filter in place of ours (box_init.c exec_runsc) */
        return "namespaces+gvisor";
    return landlock_abi() > 0 ? "namespaces+seccomp+landlock" : "namespaces+seccomp";
}

/* The stage pipes belong to the slot's uid, as a terminal belongs to its
 * user: a program reopens its own stdin, stdout or stderr through
 * /dev/stdin etc. (symlinks to /proc/self/fd/N, box_init.c), and the open
 * checks the pipe's owner and mode (0600), not the descriptor's.  Only the
 * slot's own box runs as that uid, and /proc/<pid>/fd/N of another holder
 * is closed to anyone who cannot ptrace it (the backend is root, other
 * boxes are other uids in other pid namespaces), so no one else gains a
 * way in.  One fchown per pipe: both ends share the inode.  Landlock does
 * not stand in the way: a pipe's inode is on the kernel's internal pipefs
 * (SB_NOUSER), which Landlock's file-open check skips, so the reopen is not
 * held to landlock.c's rules for /proc; gVisor reopens through its own /proc. */
static int give_pipe_to_slot(const struct slot *s, int fd, struct errbuf *e)
{
    if (fchown(fd, s->uid, s->gid) != 0)
        return errf_errno(e, "fchown stage pipe");
    return 0;
}

int box_prepare(const struct cg_system *cg, const struct seccomp_prog *seccomp, struct slot *s, struct errbuf *e)
{
    struct warm_box *w = &s->warm;
    int ctl[2] = {-1, -1}, in[2] = {-1, -1}, out[BOX_NSTAGES][2], err[BOX_NSTAGES][2];
    char name[48];
    int rc = -1;

    box_discard(s);
    for (int k = 0; k < BOX_NSTAGES; k++)
        out[k][0] = out[k][1] = err[k][0] = err[k][1] = -1;

    snprintf(name, sizeof(name), "%s", s->cg_name);
    if (cg_box_create(cg, &w->cgb, name, e) != 0)
        goto out;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ctl) != 0 || pipe2(in, O_CLOEXEC) != 0) {
        errf_errno(e, "socketpair/pipe");
        goto out;
    }
    for (int k = 0; k < BOX_NSTAGES; k++)
        if (pipe2(out[k], O_CLOEXEC) != 0 || pipe2(err[k], O_CLOEXEC) != 0) {
            errf_errno(e, "pipe");
            goto out;
        }
    if (give_pipe_to_slot(s, in[0], e) != 0)
        goto out;
    for (int k = 0; k < BOX_NSTAGES; k++)
        if (give_pipe_to_slot(s, out[k][1], e) != 0 || give_pipe_to_slot(s, err[k][1], e) != 0)
            goto out;

    struct init_args *a = slot_init_args(s, seccomp, e);
    if (a == NULL)
        goto out;
    a->fds[FD_RUN_IN] = in[0];
    a->fds[FD_RUN_OUT] = out[BOX_STAGE_RUN][1];
    a->fds[FD_RUN_ERR] = err[BOX_STAGE_RUN][1];
    a->fds[FD_CTL] = ctl[1];
    a->fds[FD_COMPILE_OUT] = out[BOX_STAGE_COMPILE][1];
    a->fds[FD_COMPILE_ERR] = err[BOX_STAGE_COMPILE][1];

    pid_t pid = clone(box_init_main, (char *)s->stack + s->stack_size,
                      CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | SIGCHLD, a);
    if (pid < 0) {
        errf_errno(e, "clone box");
        goto out;
    }
    w->init_pid = pid;
    if (cg_box_attach(&w->cgb, pid, e) != 0)
        goto out;

    w->ctl = ctl[0];
    w->in_wr = in[1];
    ctl[0] = in[1] = -1;
    for (int k = 0; k < BOX_NSTAGES; k++) {
        w->out_rd[k] = out[k][0];
        w->err_rd[k] = err[k][0];
        out[k][0] = err[k][0] = -1;
    }
    w->ready = 1;
    s->generation++;
    rc = 0;
out:
    close_fd(&ctl[0]);
    close_fd(&ctl[1]);
    close_fd(&in[0]);
    close_fd(&in[1]);
    for (int k = 0; k < BOX_NSTAGES; k++) {
        close_fd(&out[k][0]);
        close_fd(&out[k][1]);
        close_fd(&err[k][0]);
        close_fd(&err[k][1]);
    }
    if (rc != 0)
        box_discard(s);
    return rc;
}

/* ---- the plan --------------------------------------------------------------- */

/* The plan under construction: the first failure (too large, out of
 * memory) sticks, so box_start checks once at the end. */
struct plan_buf {
    struct moat_buf buf;
    int failed;
};

static void put(struct plan_buf *b, const void *p, size_t n)
{
    if (b->failed)
        return;
    if (n > PLAN_MAX_BYTES - b->buf.len || moat_buf_append(&b->buf, p, n) != 0)
        b->failed = 1;
}

static void put_u32(struct plan_buf *b, uint32_t v)
{
    put(b, &v, sizeof(v));
}

static void put_u64(struct plan_buf *b, uint64_t v)
{
    put(b, &v, sizeof(v));
}

static void put_blob(struct plan_buf *b, const void *p, size_t n)
{
    if (n > UINT32_MAX) {
        b->failed = 1;
        return;
    }
    put_u32(b, (uint32_t)n);
    put(b, p, n);
}

static void put_str(struct plan_buf *b, const char *s)
{
    put_blob(b, s, strlen(s) + 1);
}

static void put_strv(struct plan_buf *b, char *const *v)
{
    for (size_t i = 0; v && v[i]; i++)
        put_str(b, v[i]);
}

static uint32_t count_strv(char *const *v)
{
    uint32_t n = 0;
    while (v && v[n])
        n++;
    return n;
}

int box_start(struct slot *s, const struct box_job *job, struct errbuf *e)
{
    struct warm_box *w = &s->warm;
    struct plan_buf b = {{NULL, 0, 0}, 0};
    uint32_t mask = 0;

    if (!w->ready)
        return errf(e, "slot %d has no warm box", s->index);
    w->ready = 0;
    w->isolation = job->isolation;
    for (int k = 0; k < BOX_NSTAGES; k++)
        if (job->stages[k].present)
            mask |= 1u << k;

    put_u32(&b, PLAN_MAGIC);
    put_u32(&b, 0); /* body length, patched below */
    put_u64(&b, job->box_bytes);
    put_u32(&b, (uint32_t)job->nro);
    put_u32(&b, (uint32_t)job->nfiles);
    put_u32(&b, mask);
    put_u32(&b, job->isolation);
    if (job->isolation == MOAT_ISOLATION_GVISOR) {
        if (job->runsc == NULL || job->runsc[0] != '/' || job->platform == NULL) {
            moat_buf_free(&b.buf);
            return errf(e, "gVisor job without runsc");
        }
        put_str(&b, job->runsc);
        put_str(&b, job->platform);
    }
    for (size_t i = 0; i < job->nro; i++)
        put_str(&b, job->ro[i].path);
    for (size_t i = 0; i < job->nfiles; i++) {
        put_str(&b, job->files[i].name);
        put_u32(&b, job->file_exec != NULL && job->file_exec[i] ? 1 : 0);
        put_blob(&b, job->files[i].content, job->files[i].content_len);
    }
    for (int k = 0; k < BOX_NSTAGES; k++) {
        const struct box_stage *st = &job->stages[k];
        if (!st->present)
            continue;
        put_u64(&b, st->lim.fsize_bytes);
        put_u64(&b, st->lim.stack_bytes);
        put_u64(&b, st->lim.cpu_ms);
        put_u32(&b, st->lim.nofile);
        put_u32(&b, st->lim.pids);
        put_u32(&b, count_strv(st->argv));
        put_u32(&b, count_strv(st->envp));
        put_strv(&b, st->argv);
        put_strv(&b, st->envp);
    }
    if (b.failed) {
        moat_buf_free(&b.buf);
        return errf(e, "plan too large or out of memory");
    }
    uint32_t body = (uint32_t)(b.buf.len - 8);
    memcpy(b.buf.data + 4, &body, sizeof(body));
    int rc = moat_send_full(w->ctl, b.buf.data, b.buf.len);
    moat_buf_free(&b.buf);
    if (rc != 0)
        return errf_errno(e, "send plan to slot %d", s->index);
    return 0;
}

/* ---- supervision -------------------------------------------------------------- */

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

/* One stage under supervision: what the loop knows, and what the io's
 * callbacks reach through box_run_kill / box_run_active. */
struct box_run {
    struct warm_box *w;
    int stage;
    const struct box_io *io;
    int out_open, err_open, ctl_open, extra_open;
    int timer;
    int killed; /* a limit killed the box */
    uint8_t kill_status;
    uint8_t kill_clock;
    const char *kill_message;
    int have_report;
    struct box_report report;
    size_t report_got;
    uint64_t last_activity_ms; /* for the idle clock */
    uint64_t cpu_base_ns;      /* the box's CPU time before this stage */
};

static void kill_now(struct warm_box *w)
{
    struct errbuf e;
    if (w->init_pid > 0)
        kill(w->init_pid, SIGKILL);
    if (cg_box_kill(&w->cgb, &e) != 0)
        log_warnx("%s: %s", __func__, e.msg);
    w->broken = 1;
}

void box_run_kill(struct box_run *h, uint8_t status, uint8_t clock, const char *message)
{
    if (!h->killed) {
        h->killed = 1;
        h->kill_status = status;
        h->kill_clock = clock;
        h->kill_message = message;
    }
    kill_now(h->w);
}

void box_run_active(struct box_run *h)
{
    h->last_activity_ms = box_now_ms();
}

/* The descriptor and open flag of one of the stage's output streams. */
static int stream_fd(const struct box_run *h, int stream)
{
    return stream == BOX_STDOUT ? h->w->out_rd[h->stage] : h->w->err_rd[h->stage];
}

static int *stream_open(struct box_run *h, int stream)
{
    return stream == BOX_STDOUT ? &h->out_open : &h->err_open;
}

/* Whether the loop reads a stream now: while the sink has room, and always
 * once the box is killed (nothing is held back for a dead program: what the
 * sink has no room for is dropped). */
static int stream_wanted(struct box_run *h, int stream)
{
    return *stream_open(h, stream) && (h->killed || h->io->room(h->io->ctx, stream) > 0);
}

/* Reads what one pipe has, at most what the sink has room for, and hands it over. */
static void drain_pipe(struct box_run *h, int stream)
{
    uint8_t buf[READ_CHUNK];
    size_t room = h->io->room(h->io->ctx, stream);
    size_t want = h->killed || room > sizeof(buf) ? sizeof(buf) : room;
    ssize_t n = read(stream_fd(h, stream), buf, want);
    if (n < 0) {
        if (errno == EINTR || errno == EAGAIN)
            return;
        n = 0;
    }
    if (n == 0) {
        *stream_open(h, stream) = 0;
        return;
    }
    h->last_activity_ms = box_now_ms();
    size_t give = (size_t)n < room ? (size_t)n : room;
    if (give > 0)
        h->io->output(h->io->ctx, h, stream, buf, give);
}

/* Output the sink holds back (no room) while the program has more in the
 * pipe: the program is blocked in write(), which is not idleness. */
static int output_held_back(struct box_run *h)
{
    for (int stream = BOX_STDOUT; stream <= BOX_STDERR; stream++) {
        int pending = 0;
        if (*stream_open(h, stream) && h->io->room(h->io->ctx, stream) == 0 &&
            ioctl(stream_fd(h, stream), FIONREAD, &pending) == 0 && pending > 0)
            return 1;
    }
    return 0;
}

/* The run stage's stdin, before each poll: the pipe closes once the source
 * has ended and nothing is pending; once it is closed (that, or EPIPE: the
 * program stopped reading) whatever is pending is dropped. */
static void tend_stdin(struct box_run *h)
{
    struct warm_box *w = h->w;
    const struct box_io *io = h->io;
    const uint8_t *data;
    size_t len;

    if (w->in_wr >= 0 && io->stdin_pending(io->ctx, &data) == 0 && io->stdin_ended(io->ctx))
        close_fd(&w->in_wr);
    if (w->in_wr < 0)
        while ((len = io->stdin_pending(io->ctx, &data)) > 0)
            io->stdin_consumed(io->ctx, len);
}

static void feed_stdin(struct box_run *h)
{
    struct warm_box *w = h->w;
    const struct box_io *io = h->io;
    const uint8_t *data;
    size_t len = io->stdin_pending(io->ctx, &data);

    if (w->in_wr < 0 || len == 0)
        return;
    ssize_t n = write(w->in_wr, data, len);
    if (n > 0) {
        io->stdin_consumed(io->ctx, (size_t)n);
        h->last_activity_ms = box_now_ms();
    } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
        close_fd(&w->in_wr); /* EPIPE: the program stopped reading */
    }
}

static void read_report(struct box_run *h)
{
    ssize_t n = read(h->w->ctl, (uint8_t *)&h->report + h->report_got, sizeof(h->report) - h->report_got);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return;
    if (n <= 0) {
        h->ctl_open = 0; /* init is gone */
        return;
    }
    h->report_got += (size_t)n;
    if (h->report_got == sizeof(h->report)) {
        h->have_report = 1;
        h->ctl_open = 0;
    }
}

/* CPUs the box could use at once: how fast its CPU time can grow. */
static uint64_t cpus_configured(void)
{
    static long cached;
    long n = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (n <= 0) {
        n = sysconf(_SC_NPROCESSORS_CONF);
        if (n <= 0)
            n = 1;
        __atomic_store_n(&cached, n, __ATOMIC_RELAXED);
    }
    return (uint64_t)n;
}

/*
 * The CPU clock: the stage's cgroup usage against its limit.  Returns when
 * to look again: no sooner than the remaining budget could be spent with
 * every CPU busy (so an idle session costs a read now and then, not fifty a
 * second), never later than CPU_POLL_MAX_MS, never sooner than CPU_POLL_MS.
 */
static uint64_t check_cpu(struct box_run *h, uint64_t limit_ns, uint64_t now)
{
    struct cg_usage u;
    struct errbuf e;
    uint64_t wait_ms = CPU_POLL_MS;

    if (cg_box_usage(&h->w->cgb, &u, &e) == 0) {
        uint64_t used = u.cpu_ns > h->cpu_base_ns ? u.cpu_ns - h->cpu_base_ns : 0;
        if (used > limit_ns) {
            box_run_kill(h, MOAT_STATUS_TO, MOAT_CLOCK_CPU, "cpu-time limit exceeded");
            return now + CPU_POLL_MAX_MS;
        }
        wait_ms = (limit_ns - used) / 1000000u / cpus_configured();
    }
    if (wait_ms < CPU_POLL_MS)
        wait_ms = CPU_POLL_MS;
    if (wait_ms > CPU_POLL_MAX_MS)
        wait_ms = CPU_POLL_MAX_MS;
    return now + wait_ms;
}

/* The idle clock: no output read, no input written or received for idle_ms. */
static uint64_t idle_deadline(const struct box_run *h, const struct box_stage *st)
{
    return st->lim.idle_ms && h->ctl_open && !h->killed ? h->last_activity_ms + st->lim.idle_ms : 0;
}

static void check_idle(struct box_run *h, const struct box_stage *st, uint64_t now)
{
    uint64_t due = idle_deadline(h, st);
    if (due == 0 || now <= due)
        return;
    if (output_held_back(h))
        h->last_activity_ms = now;
    else
        box_run_kill(h, MOAT_STATUS_TO, MOAT_CLOCK_IDLE, "idle-time limit exceeded");
}

/* How long poll may sleep: until the next clock check that is not a descriptor. */
static int poll_wait_ms(uint64_t now, uint64_t next_cpu, uint64_t idle_due, uint64_t drain_due)
{
    uint64_t until = now + CPU_POLL_MAX_MS;
    if (next_cpu && next_cpu < until)
        until = next_cpu;
    if (idle_due && idle_due + 1 < until)
        until = idle_due + 1;
    if (drain_due && drain_due < until)
        until = drain_due;
    return until > now ? (int)(until - now) : 0;
}

/* A descriptor to poll; its index in pfd, or -1 when not wanted. */
static int poll_add(struct pollfd *pfd, int *nfds, int want, int fd, short events)
{
    if (!want)
        return -1;
    pfd[*nfds] = (struct pollfd){fd, events, 0};
    return (*nfds)++;
}

/*
 * The one supervision loop, for batch and session alike: read the stage's
 * output while the sink has room, write its stdin as the source has it,
 * watch the extra descriptor (a session's connection), and the clocks.
 * Runs until init has reported and both pipes are closed.
 */
static void supervise(const struct box_stage *st, struct box_run *h, struct box_result *res, uint64_t start_ms)
{
    struct warm_box *w = h->w;
    const struct box_io *io = h->io;
    uint64_t drain_deadline = 0, next_cpu = 0;
    uint64_t cpu_limit_ns = st->lim.cpu_ms * 1000000ull;
    int k = h->stage;

    if (cpu_limit_ns)
        next_cpu = start_ms + CPU_POLL_MS;
    while (h->out_open || h->err_open || h->ctl_open) {
        struct pollfd pfd[6];
        const uint8_t *data;
        int nfds = 0;

        if (k == BOX_STAGE_RUN)
            tend_stdin(h);
        int i_out = poll_add(pfd, &nfds, stream_wanted(h, BOX_STDOUT), w->out_rd[k], POLLIN);
        int i_err = poll_add(pfd, &nfds, stream_wanted(h, BOX_STDERR), w->err_rd[k], POLLIN);
        int i_ctl = poll_add(pfd, &nfds, h->ctl_open, w->ctl, POLLIN);
        int i_in =
            poll_add(pfd, &nfds, k == BOX_STAGE_RUN && w->in_wr >= 0 && io->stdin_pending(io->ctx, &data) > 0, w->in_wr, POLLOUT);
        int i_x = poll_add(pfd, &nfds, h->extra_open, io->extra_fd, POLLIN);
        int i_tm = poll_add(pfd, &nfds, 1, h->timer, POLLIN);

        uint64_t now = box_now_ms();
        if (drain_deadline && now >= drain_deadline) {
            /* the program ended but something still holds a pipe */
            kill_now(w);
            drain_deadline = 0;
        }
        int n = poll(pfd, (nfds_t)nfds, poll_wait_ms(now, next_cpu, idle_deadline(h, st), drain_deadline));
        if (n < 0 && errno != EINTR) {
            log_warn("%s: poll", __func__);
            box_run_kill(h, MOAT_STATUS_XX, 0, "internal error: poll failed");
            break;
        }
        if (n > 0) {
            if (i_out >= 0 && pfd[i_out].revents)
                drain_pipe(h, BOX_STDOUT);
            if (i_err >= 0 && pfd[i_err].revents)
                drain_pipe(h, BOX_STDERR);
            if (i_ctl >= 0 && pfd[i_ctl].revents)
                read_report(h);
            if (i_in >= 0 && pfd[i_in].revents)
                feed_stdin(h);
            if (i_x >= 0 && pfd[i_x].revents && io->extra(io->ctx, h) != 0)
                h->extra_open = 0;
            if (pfd[i_tm].revents & POLLIN) {
                uint64_t ticks;
                ssize_t r = read(h->timer, &ticks, sizeof(ticks));
                (void)r;
                box_run_kill(h, MOAT_STATUS_TO, MOAT_CLOCK_WALL, "wall-time limit exceeded");
            }
        }
        now = box_now_ms();
        if (!h->killed)
            check_idle(h, st, now);
        if (!h->killed && next_cpu && now >= next_cpu)
            next_cpu = check_cpu(h, cpu_limit_ns, now);
        if (!h->ctl_open && !drain_deadline && (h->out_open || h->err_open))
            drain_deadline = now + DRAIN_GRACE_MS;
    }
    res->wall_ms = box_now_ms() - start_ms;
}

/*
 * Whether memory killed something in the stage (S29): any process of the
 * box, not only the stage's own (cc1 under gcc, a forked child), counts.
 * Where the kernel does not count OOM kills (v1 before 4.13), a stage that
 * failed after reaching its limit is taken as killed for memory.
 */
static int killed_for_memory(const struct box_run *h, const struct cg_usage *u, const struct box_result *res)
{
    if (u->oom_kills > 0)
        return 1;
    return !u->oom_exact && u->limit_hits > 0 && (!h->have_report || res->status != MOAT_STATUS_OK);
}

/*
 * SIGXCPU is TO only when the stage's CPU time, as the cgroup measured it,
 * passed its limit: RLIMIT_CPU (a backstop above the limit) sends it then.
 * A program can send it to itself, and under gVisor an exit code of 152
 * reads as it (gvisor_wait_status): neither may forge a CPU verdict (S36).
 */
static int cpu_limit_reached(const struct cg_usage *u, uint64_t cpu_limit_ns)
{
    return cpu_limit_ns > 0 && u->cpu_ns >= cpu_limit_ns;
}

static void classify(const struct box_run *h, const struct cg_usage *u, uint64_t cpu_limit_ns, struct box_result *res)
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
        res->clock = h->kill_clock;
        snprintf(res->message, sizeof(res->message), "%s", h->kill_message ? h->kill_message : "killed");
        if (!res->has_signal && !res->has_code) {
            res->has_signal = 1;
            res->signal = SIGKILL;
        }
    } else if (killed_for_memory(h, u, res)) {
        res->status = MOAT_STATUS_ML;
        snprintf(res->message, sizeof(res->message), "memory limit exceeded");
        if (!res->has_signal) {
            res->has_signal = 1;
            res->signal = SIGKILL;
        }
    } else if (res->status == MOAT_STATUS_SG && res->signal == SIGXCPU && cpu_limit_reached(u, cpu_limit_ns)) {
        res->status = MOAT_STATUS_TO;
        res->clock = MOAT_CLOCK_CPU;
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

/*
 * The box already holds more than the stage's memory limit before the stage
 * starts: files in /box and /tmp (tmpfs, not reclaimable without swap) left
 * by the compile stage or written from the request.  Not a failure of the
 * box but the job's memory: the stage ends ML without running (never an
 * internal error), and no later stage runs.
 */
static void over_limit_before_start(struct warm_box *w, int stage, const struct box_stage *st, struct box_result *res)
{
    struct errbuf ignored;
    uint64_t held = 0;

    (void)cg_box_memory_current(&w->cgb, &held, &ignored);
    res->status = MOAT_STATUS_ML;
    res->memory_bytes = held;
    snprintf(res->message, sizeof(res->message),
             "files in /box and /tmp exceed the %s memory limit (the box holds %llu bytes, the limit is %llu)",
             stage == BOX_STAGE_COMPILE ? "compile" : "run", (unsigned long long)held, (unsigned long long)st->lim.memory_bytes);
    w->broken = 1;
}

/* Resets the counters a stage reports, so each stage's usage is its own. */
static void stage_usage_baseline(struct warm_box *w, struct cg_usage *base)
{
    struct errbuf e;
    if (cg_box_usage(&w->cgb, base, &e) != 0)
        memset(base, 0, sizeof(*base));
}

/* The stage's wall clock as an absolute timer: its own wall_ms from now, or
 * the io's deadline (a session's whole lifetime) if that comes first. */
static int arm_wall_clock(int timer, uint64_t start, const struct box_stage *st, const struct box_io *io, struct errbuf *e)
{
    uint64_t end = start + st->lim.wall_ms;
    if (io->deadline_ms && io->deadline_ms < end)
        end = io->deadline_ms;
    struct itimerspec its = {{0, 0}, {(time_t)(end / 1000), (long)(end % 1000) * 1000000L}};
    if (timerfd_settime(timer, TFD_TIMER_ABSTIME, &its, NULL) != 0)
        return errf_errno(e, "timerfd_settime");
    return 0;
}

int box_run_stage_io(struct slot *s, int stage, const struct box_stage *st, const struct box_io *io, struct box_result *res,
                     struct errbuf *e)
{
    struct warm_box *w = &s->warm;
    struct box_run h;
    struct cg_usage base, u;
    int rc = -1;

    memset(&h, 0, sizeof(h));
    h.w = w;
    h.stage = stage;
    h.io = io;
    h.timer = -1;
    h.extra_open = io->extra_fd >= 0;

    if (w->init_pid <= 0 || w->broken)
        return errf(e, "slot %d: box is not usable", s->index);
    if ((h.timer = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK)) < 0) {
        errf_errno(e, "timerfd_create");
        goto out;
    }
    uint32_t pids = st->lim.pids + (w->isolation == MOAT_ISOLATION_GVISOR ? GVISOR_PIDS_HEADROOM : 0);
    int set = cg_box_set_limits(&w->cgb, st->lim.memory_bytes, pids, e);
    if (set == CG_OVER_LIMIT) {
        over_limit_before_start(w, stage, st, res);
        rc = 0;
        goto out;
    }
    if (set != 0) {
        kill_now(w);
        goto out;
    }
    (void)cg_box_reset_peak(&w->cgb); /* best effort: v2 reports the box's peak */
    stage_usage_baseline(w, &base);
    h.cpu_base_ns = base.cpu_ns;

    uint64_t start = box_now_ms();
    if (arm_wall_clock(h.timer, start, st, io, e) != 0)
        goto out;
    h.last_activity_ms = start;
    char go = (char)('0' + stage);
    if (moat_send_full(w->ctl, &go, 1) != 0) {
        errf_errno(e, "start stage in slot %d", s->index);
        kill_now(w);
        goto out;
    }
    h.out_open = h.err_open = h.ctl_open = 1;
    if (stage == BOX_STAGE_RUN)
        fcntl(w->in_wr, F_SETFL, O_NONBLOCK);
    if (io->started != NULL)
        io->started(io->ctx, &h);

    supervise(st, &h, res, start);

    struct errbuf ue;
    if (cg_box_usage(&w->cgb, &u, &ue) != 0) {
        log_warnx("%s: %s", __func__, ue.msg);
        memset(&u, 0, sizeof(u));
    }
    /* each stage reports its own CPU time, OOM kills and limit hits */
    u.cpu_ns = u.cpu_ns > base.cpu_ns ? u.cpu_ns - base.cpu_ns : 0;
    u.oom_kills = u.oom_kills > base.oom_kills ? u.oom_kills - base.oom_kills : 0;
    u.limit_hits = u.limit_hits > base.limit_hits ? u.limit_hits - base.limit_hits : 0;
    res->cpu_ms = u.cpu_ns / 1000000;
    res->memory_bytes = u.memory_peak;
    classify(&h, &u, st->lim.cpu_ms * 1000000ull, res);
    if (res->status != MOAT_STATUS_OK)
        w->broken = 1; /* later stages of this job do not run */
    rc = 0;
out:
    close_fd(&h.timer);
    close_fd(&w->out_rd[stage]);
    close_fd(&w->err_rd[stage]);
    if (rc != 0)
        w->broken = 1;
    return rc;
}

/* ---- the pack: what the compile stage left, for the test cases' boxes ---------- */

#define PACK_READ_TIMEOUT_MS 10000

/* Reads exactly len bytes from the control socket, giving init at most
 * PACK_READ_TIMEOUT_MS in all. */
static int ctl_read(int fd, void *buf, size_t len, uint64_t deadline, struct errbuf *e)
{
    size_t got = 0;
    while (got < len) {
        uint64_t now = box_now_ms();
        if (now >= deadline)
            return errf(e, "box pack: init took too long");
        struct pollfd p = {fd, POLLIN, 0};
        int n = poll(&p, 1, (int)(deadline - now));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return errf_errno(e, "box pack: poll");
        if (n == 0)
            continue;
        ssize_t r = read(fd, (uint8_t *)buf + got, len - got);
        if (r < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (r <= 0)
            return errf(e, "box pack: init closed the control socket");
        got += (size_t)r;
    }
    return 0;
}

void box_pack_free(struct box_pack *pack)
{
    free(pack->buf);
    free(pack->files);
    free(pack->exec);
    memset(pack, 0, sizeof(*pack));
}

struct pack_cursor {
    uint8_t *p;
    size_t len, off;
};

static int pack_u32(struct pack_cursor *c, uint32_t *v)
{
    if (c->len - c->off < sizeof(*v))
        return -1;
    memcpy(v, c->p + c->off, sizeof(*v));
    c->off += sizeof(*v);
    return 0;
}

static uint8_t *pack_blob(struct pack_cursor *c, uint32_t *len)
{
    if (pack_u32(c, len) != 0 || *len > c->len - c->off)
        return NULL;
    uint8_t *p = c->p + c->off;
    c->off += *len;
    return p;
}

static const char *pack_outcome_text(uint32_t outcome)
{
    switch (outcome) {
    case PACK_TOO_MANY:
        return "more than " MOAT_STR(BOX_PACK_MAX_FILES) " files";
    case PACK_TOO_LARGE:
        return "more than 16 MiB";
    case PACK_TOO_DEEP:
        return "a directory deeper than the path depth limit";
    case PACK_BAD_NAME:
        return "a path longer than 255 bytes";
    default:
        return NULL;
    }
}

/*
 * The pack's body, untrusted: every length against what is left, the count
 * against the cap, every name by the request files' rule (moat_path.h), no
 * repeat, no name a directory of another, nothing left over.  The names
 * and contents stay in pack->buf.
 */
int box_pack_parse(struct box_pack *pack, uint8_t *buf, size_t len, struct errbuf *e)
{
    struct pack_cursor c = {buf, len, 0};
    uint32_t outcome, count;
    const char *text;

    memset(pack, 0, sizeof(*pack));
    pack->buf = buf;
    if (pack_u32(&c, &outcome) != 0 || pack_u32(&c, &count) != 0)
        return errf(e, "box pack: truncated");
    if (outcome != PACK_OK && (text = pack_outcome_text(outcome)) != NULL) {
        errf(e, "the compile stage left %s in /box: the test cases cannot be given its files", text);
        return BOX_PACK_REFUSED;
    }
    if (outcome != PACK_OK)
        return errf(e, "box pack: init could not read /box (outcome %u)", outcome);
    if (count > BOX_PACK_MAX_FILES)
        return errf(e, "box pack: %u files", count);
    pack->files = calloc(count ? count : 1, sizeof(*pack->files));
    pack->exec = calloc(count ? count : 1, 1);
    if (pack->files == NULL || pack->exec == NULL)
        return errf(e, "out of memory");
    for (uint32_t i = 0; i < count; i++) {
        uint32_t nlen, exec, clen;
        char *name = (char *)pack_blob(&c, &nlen);
        if (name == NULL || nlen == 0 || name[nlen - 1] != '\0' || pack_u32(&c, &exec) != 0 || exec > 1)
            return errf(e, "box pack: bad entry %u", i);
        uint8_t *content = pack_blob(&c, &clen);
        if (content == NULL)
            return errf(e, "box pack: bad entry %u", i);
        enum moat_path_problem p = moat_path_check(name, nlen - 1);
        if (p != MOAT_PATH_OK) {
            errf(e, "the compile stage left a file whose name %s (\"%.64s\"): the test cases cannot be given it",
                 moat_path_problem_text(p), p == MOAT_PATH_CONTROL ? "?" : name);
            return BOX_PACK_REFUSED;
        }
        for (uint32_t j = 0; j < i; j++)
            if (strcmp(name, pack->files[j].name) == 0 || moat_path_is_dir_of(name, pack->files[j].name) ||
                moat_path_is_dir_of(pack->files[j].name, name))
                return errf(e, "box pack: entry %u repeats or nests in entry %u", i, j);
        pack->files[i] = (struct moat_file){name, content, clen};
        pack->exec[i] = (uint8_t)exec;
        pack->nfiles = i + 1;
    }
    if (c.off != c.len)
        return errf(e, "box pack: trailing bytes");
    return 0;
}

int box_pack(struct slot *s, struct box_pack *pack, struct errbuf *e)
{
    struct warm_box *w = &s->warm;
    uint64_t deadline = box_now_ms() + PACK_READ_TIMEOUT_MS;
    uint32_t hdr[2];
    char op = CTL_PACK;
    int rc;

    memset(pack, 0, sizeof(*pack));
    if (w->init_pid <= 0 || w->broken || w->ctl < 0)
        return errf(e, "slot %d: box is not usable", s->index);
    if (moat_send_full(w->ctl, &op, 1) != 0) {
        rc = errf_errno(e, "ask slot %d for its pack", s->index);
        goto fail;
    }
    if ((rc = ctl_read(w->ctl, hdr, sizeof(hdr), deadline, e)) != 0)
        goto fail;
    /* names, lengths and exec flags on top of the content: twice the cap is never reached by a valid pack */
    if (hdr[0] != PACK_MAGIC || hdr[1] < 8 || hdr[1] > 2 * BOX_PACK_MAX_BYTES) {
        rc = errf(e, "box pack: bad header from slot %d", s->index);
        goto fail;
    }
    uint8_t *buf = malloc(hdr[1]);
    if (buf == NULL) {
        rc = errf(e, "out of memory");
        goto fail;
    }
    if ((rc = ctl_read(w->ctl, buf, hdr[1], deadline, e)) != 0) {
        free(buf);
        goto fail;
    }
    if ((rc = box_pack_parse(pack, buf, hdr[1], e)) != 0)
        goto fail;
    return 0;
fail:
    w->broken = 1;
    kill_now(w);
    box_pack_free(pack);
    return rc;
}

int box_signal(struct slot *s, int sig, struct errbuf *e)
{
    uint8_t msg[2] = {CTL_SIGNAL, (uint8_t)sig};

    if (s->warm.ctl < 0 || sig < 1 || sig > 64)
        return errf(e, "slot %d: no stage to signal", s->index);
    if (moat_send_full(s->warm.ctl, msg, sizeof(msg)) != 0)
        return errf_errno(e, "signal to slot %d", s->index);
    return 0;
}

/* ---- batch: output into capped buffers, stdin from the request ------------------ */

struct batch_io {
    struct box_result *res;
    const uint8_t *in;
    size_t in_len, in_off;
};

static size_t batch_room(void *ctx, int stream)
{
    (void)ctx;
    (void)stream;
    return SIZE_MAX; /* always read: bytes over the cap kill the box */
}

static void batch_output(void *ctx, struct box_run *run, int stream, const uint8_t *data, size_t len)
{
    struct batch_io *b = ctx;
    int over = stream_append(stream == BOX_STDOUT ? &b->res->out : &b->res->err, data, len);
    stream_append(&b->res->both, data, len);
    if (over && stream == BOX_STDOUT)
        box_run_kill(run, MOAT_STATUS_OL, 0, "stdout length exceeded");
    else if (over)
        box_run_kill(run, MOAT_STATUS_EL, 0, "stderr length exceeded");
}

static size_t batch_stdin_pending(void *ctx, const uint8_t **data)
{
    struct batch_io *b = ctx;
    *data = b->in + b->in_off;
    return b->in_len - b->in_off;
}

static void batch_stdin_consumed(void *ctx, size_t n)
{
    struct batch_io *b = ctx;
    b->in_off += n;
}

static int batch_stdin_ended(void *ctx)
{
    (void)ctx;
    return 1; /* the request's stdin is all there is */
}

int box_run_stage(struct slot *s, int stage, const struct box_stage *st, const uint8_t *stdin_data, size_t stdin_len,
                  struct box_result *res, struct errbuf *e)
{
    struct batch_io b = {res, stdin_data, stdin_len, 0};
    const struct box_io io = {.ctx = &b,
                              .room = batch_room,
                              .output = batch_output,
                              .stdin_pending = batch_stdin_pending,
                              .stdin_consumed = batch_stdin_consumed,
                              .stdin_ended = batch_stdin_ended,
                              .extra_fd = -1};

    memset(res, 0, sizeof(*res));
    if (stream_init(&res->out, st->lim.output_cap, e) != 0 || stream_init(&res->err, st->lim.output_cap, e) != 0 ||
        stream_init(&res->both, st->lim.output_cap * 2, e) != 0 || box_run_stage_io(s, stage, st, &io, res, e) != 0) {
        s->warm.broken = 1;
        box_result_free(res);
        return -1;
    }
    return 0;
}
