/*
 * box_gvisor.c - a stage under gVisor: what a box's init does differently
 * when the job's isolation is MOAT_ISOLATION_GVISOR.
 *
 * Theory of operation
 * -------------------
 * A gVisor box is an ordinary box first: the same namespaces, cgroup,
 * read-only runtime binds, /box tmpfs and pivot (box_init.c).  Only the
 * stage program differs.  Init's stage child empties its bounding and
 * inheritable sets, becomes the slot's uid and gid (no_new_privs) and
 * execs runsc, Debian's gVisor runtime, rootless (S37):
 *
 *   runsc --rootless --root=<GVISOR_DIR>/state --network=none --platform=P
 *         --ignore-cgroups --debug --debug-log=<GVISOR_DIR>/run.log
 *         --debug-command=run run --bundle <GVISOR_DIR>/bundle stageN
 *
 * runsc makes a user namespace of its own whose one uid, 0, is the slot's
 * uid: what it needs (namespaces, mounts, chroot, ptrace of its stubs) it
 * holds there, and nothing in the host's.  Two things of the box make that
 * possible: a proc mount without masks in the runsc-only GVISOR_DIR (the
 * kernel lets a user namespace mount proc only where one is fully visible),
 * and a bundle root runsc does not remount read-only (it could not keep the
 * box's locked nosuid and nodev; the root stays read-only anyway: the
 * runtime's binds are, and the box's own root is root's, not the slot's).
 * The OCI config.json is written here (gvisor_write_bundle): root "/" (the
 * box's own root: the runtime), /box bound read-write, a fresh tmpfs /tmp
 * and gVisor's own /proc, the process as uid and gid 0 of runsc's
 * namespace (the one uid mapped: the slot's) with no capability at all,
 * noNewPrivileges, the stage's argv, env and rlimits (RLIMIT_NPROC is
 * enforced by gVisor's kernel, so a fork bomb stops at the stage's process
 * count), no network namespace path (runsc makes its own, and
 * --network=none leaves it with loopback only).  A signal from the host
 * (a session's SESSION_SIGNAL) goes in through `runsc kill` (init's
 * messenger, the slot's uid too): rootless runsc run would die of it
 * itself, not pass it on.
 *
 * What holds as for a plain box, and why:
 * - memory, pids and CPU: runsc, its gofer and its sentry are all processes
 *   of the box, so of the slot's cgroup (--ignore-cgroups: runsc makes none
 *   of its own); what the program does is done by the sentry, so charged
 *   there.  The sentry's own memory and threads are charged too: the
 *   backend gives a gVisor stage GVISOR_PIDS_HEADROOM more pids (the
 *   program's own count is its RLIMIT_NPROC inside gVisor); memory has no
 *   headroom: the sentry's footprint counts against the stage's limit.
 * - the three clocks and the output caps: the program's stdin, stdout and
 *   stderr are the stage's pipes (runsc passes its own descriptors 0-2
 *   through, terminal false), so box.c's supervision loop is unchanged.
 * - statuses: runsc run exits with the program's code, or 128+N when a
 *   signal N ended it, which a program's own exit 128+N looks like; so
 *   gvisor_wait_status takes the raw wait status from runsc run's own log
 *   (its final line), else the exit code as it is (S36).  ML is the
 *   cgroup's OOM count, as for any box.
 * - the runsc state dir and bundle live in the box's /tmp (the slot uid's,
 *   0700: runsc's), which the sandboxed program never sees: its /tmp is
 *   gVisor's.
 *
 * What does not apply: the backend's seccomp allow-list and Landlock cannot
 * wrap runsc (it mounts, ptraces and sets up its own sandbox); the
 * sentry's own seccomp filter replaces them and the program talks to
 * gVisor's kernel, not the host's.
 *
 * Runs in init's forked child (no malloc: the buffer is mmap'ed; see
 * box_init.c).
 */
#include <errno.h>
#include <linux/capability.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "box_internal.h"

/* ---- a JSON writer into a fixed buffer ----------------------------------------- */

struct jbuf {
    char *p;
    size_t len, cap;
    int overflow;
};

static void jput(struct jbuf *b, const char *s, size_t n)
{
    if (b->overflow || n > b->cap - b->len) {
        b->overflow = 1;
        return;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

static void jraw(struct jbuf *b, const char *s)
{
    jput(b, s, strlen(s));
}

/* key (raw JSON, e.g. ",\"gid\":"), then v in decimal */
static void jnum(struct jbuf *b, const char *key, unsigned long long v)
{
    char tmp[24];
    int n = snprintf(tmp, sizeof(tmp), "%llu", v);
    jraw(b, key);
    jput(b, tmp, (size_t)n);
}

/* A JSON string: quote, backslash and control bytes escaped; other bytes as
 * they are (the backend took them from UTF-8-checked request fields). */
static void jstr(struct jbuf *b, const char *s)
{
    jput(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            char esc[2] = {'\\', (char)c};
            jput(b, esc, 2);
        } else if (c < 0x20 || c == 0x7f) {
            static const char hex[] = "0123456789abcdef";
            char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            jput(b, esc, sizeof(esc));
        } else {
            jput(b, (const char *)&c, 1);
        }
    }
    jput(b, "\"", 1);
}

static void jstrv(struct jbuf *b, char *const *v)
{
    jput(b, "[", 1);
    for (size_t i = 0; v[i]; i++) {
        if (i)
            jput(b, ",", 1);
        jstr(b, v[i]);
    }
    jput(b, "]", 1);
}

static void jrlimit(struct jbuf *b, const char *type, unsigned long long v, int last)
{
    jraw(b, "{\"type\":\"");
    jraw(b, type);
    jnum(b, "\",\"hard\":", v);
    jnum(b, ",\"soft\":", v);
    jraw(b, "}");
    if (!last)
        jput(b, ",", 1);
}

static size_t strv_bytes(char *const *v)
{
    size_t n = 0;
    for (size_t i = 0; v[i]; i++)
        n += strlen(v[i]) + 3;
    return n;
}

/* ---- the bundle -------------------------------------------------------------------- */

static void write_config(struct jbuf *b, const struct gvisor_stage *g)
{
    jraw(b, "{\"ociVersion\":\"1.0.0\",\"process\":{\"terminal\":false,");
    jnum(b, "\"user\":{\"uid\":", g->uid);
    jnum(b, ",\"gid\":", g->gid);
    jraw(b, "},\"args\":");
    jstrv(b, g->argv);
    jraw(b, ",\"env\":");
    jstrv(b, g->envp);
    jraw(b, g->box ? ",\"cwd\":\"/box\"" : ",\"cwd\":\"/\"");
    jraw(b, ",\"noNewPrivileges\":true,"
            "\"capabilities\":{\"bounding\":[],\"effective\":[],\"inheritable\":[],\"permitted\":[],\"ambient\":[]},"
            "\"rlimits\":[");
    jrlimit(b, "RLIMIT_CORE", 0, 0);
    jrlimit(b, "RLIMIT_FSIZE", g->fsize, 0);
    jrlimit(b, "RLIMIT_NOFILE", g->nofile, 0);
    jrlimit(b, "RLIMIT_STACK", g->stack, 0);
    jrlimit(b, "RLIMIT_MEMLOCK", 0, 0);
    jrlimit(b, "RLIMIT_MSGQUEUE", 0, 0);
    jrlimit(b, "RLIMIT_CPU", g->cpu_s, 0);
    jrlimit(b, "RLIMIT_NPROC", g->pids, 1);
    jraw(b, "]},\"root\":{\"path\":\"/\",\"readonly\":false},\"hostname\":\"box\","
            "\"mounts\":["
            "{\"destination\":\"/proc\",\"type\":\"proc\",\"source\":\"proc\"},"
            "{\"destination\":\"/tmp\",\"type\":\"tmpfs\",\"source\":\"tmpfs\",\"options\":[\"nosuid\",\"nodev\",\"mode=1777\"]}");
    if (g->box) {
        jraw(b, ",{\"destination\":\"/box\",\"type\":\"bind\",\"source\":");
        jstr(b, g->box);
        jraw(b, ",\"options\":[\"rbind\",\"rw\",\"nosuid\",\"nodev\"]}");
    }
    jraw(b, "],\"linux\":{\"namespaces\":[{\"type\":\"pid\"},{\"type\":\"network\"},{\"type\":\"ipc\"},{\"type\":\"uts\"},"
            "{\"type\":\"mount\"}]}}\n");
}

int gvisor_write_bundle(const char *path, const struct gvisor_stage *g, const char **what)
{
    size_t cap = 8192 + 6 * (strv_bytes(g->argv) + strv_bytes(g->envp) + (g->box ? strlen(g->box) : 0));
    struct jbuf b = {NULL, 0, cap, 0};
    int rc = -1;

    *what = "gVisor bundle: mmap";
    b.p = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (b.p == MAP_FAILED)
        return -1;
    write_config(&b, g);
    *what = "gVisor bundle: config too large";
    if (b.overflow) {
        errno = E2BIG;
        goto out;
    }
    *what = "gVisor bundle: create config.json";
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        goto out;
    size_t off = 0;
    while (off < b.len) {
        ssize_t n = write(fd, b.p + off, b.len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            *what = "gVisor bundle: write config.json";
            close(fd);
            goto out;
        }
        off += (size_t)n;
    }
    close(fd);
    rc = 0;
out:
    munmap(b.p, cap);
    return rc;
}

void gvisor_runsc_cmd(struct runsc_cmd *c, const char *runsc, const char *platform, const char *dir, const char *id)
{
    size_t n = 0;

    snprintf(c->root, sizeof(c->root), "--root=%s/state", dir);
    snprintf(c->platform, sizeof(c->platform), "--platform=%s", platform);
    snprintf(c->bundle, sizeof(c->bundle), "%s/bundle", dir);
    snprintf(c->log, sizeof(c->log), "--debug-log=%s/" GVISOR_LOG, dir);
    snprintf(c->id, sizeof(c->id), "%s", id);
    c->argv[n++] = (char *)(uintptr_t)runsc;
    c->argv[n++] = (char *)(uintptr_t) "--rootless";
    c->argv[n++] = c->root;
    c->argv[n++] = (char *)(uintptr_t) "--network=none";
    c->argv[n++] = c->platform;
    c->argv[n++] = (char *)(uintptr_t) "--ignore-cgroups";
    /* runsc run's own log, for the program's real wait status (gvisor_wait_status) */
    c->argv[n++] = (char *)(uintptr_t) "--debug";
    c->argv[n++] = c->log;
    c->argv[n++] = (char *)(uintptr_t) "--debug-command=run";
    c->argv[n++] = (char *)(uintptr_t) "run";
    c->argv[n++] = (char *)(uintptr_t) "--bundle";
    c->argv[n++] = c->bundle;
    c->argv[n++] = c->id;
    c->argv[n] = NULL;
}

void gvisor_kill_cmd(struct runsc_cmd *c, const char *runsc, const char *dir, const char *id, int sig)
{
    size_t n = 0;

    snprintf(c->root, sizeof(c->root), "--root=%s/state", dir);
    snprintf(c->id, sizeof(c->id), "%s", id);
    snprintf(c->sig, sizeof(c->sig), "%d", sig);
    c->argv[n++] = (char *)(uintptr_t)runsc;
    c->argv[n++] = (char *)(uintptr_t) "--rootless";
    c->argv[n++] = c->root;
    c->argv[n++] = (char *)(uintptr_t) "kill";
    c->argv[n++] = c->id;
    c->argv[n++] = c->sig;
    c->argv[n] = NULL;
}

int gvisor_make_dirs(uid_t uid, gid_t gid)
{
    static const char *const dirs[] = {GVISOR_DIR, GVISOR_DIR "/state", GVISOR_DIR "/bundle"};
    for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
        if (mkdir(dirs[i], 0700) != 0 || chown(dirs[i], uid, gid) != 0)
            return -1;
    }
    return 0;
}

/*
 * runsc runs rootless, as the slot's uid (S37): the bounding set goes
 * whole and the inheritable set is emptied before the drop, so nothing the
 * kernel adds later and no file capability comes back.  What runsc needs
 * (namespaces, mounts, chroot, ptrace of its stubs) it holds only in the
 * user namespace it makes for itself, never in the host's.
 */
int gvisor_drop_caps(void)
{
    struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];

    for (int cap = 0; cap < 64; cap++) {
        if (prctl(PR_CAPBSET_READ, cap, 0, 0, 0) != 1)
            continue; /* no such capability on this kernel */
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0)
            return -1;
    }
    if (syscall(SYS_capget, &hdr, data) != 0)
        return -1;
    for (int i = 0; i < _LINUX_CAPABILITY_U32S_3; i++)
        data[i].inheritable = 0;
    return syscall(SYS_capset, &hdr, data) == 0 ? 0 : -1;
}

/*
 * runsc run exits 128+N when a signal N ended the program, and so does a
 * program that exits 128+N itself; `runsc wait` answers the same.  What
 * tells them apart is runsc run's last log line, "Exiting with status: W"
 * with W the raw wait status (--debug for the run command only: the
 * sandbox and gofer log nothing).  Only the file's final line counts (past
 * the outer rootless process's warnings that it could not forward a
 * signal, which may follow it): the start of the log quotes the job's
 * argv and env, which may hold anything.
 */
/* Is buf[start, end) rootless runsc's outer process saying it could not pass a signal on to the
 * runsc it re-executed in its user namespace ("W... namespace.go:NNN] Error forwarding signal
 * <name> to child (PID N)")?  It may come after the inner run's last line: the outer process
 * exits a moment later, and a SIGCHLD or SIGURG of its own finds no child to go to. */
static int forwarding_warning(const char *buf, size_t start, size_t end)
{
    static const char mid[] = " namespace.go:", key[] = "] Error forwarding signal ", tail[] = " to child (PID ";
    const char *line = buf + start, *p;
    size_t n = end - start;

    if (n < 40 || line[0] != 'W' || line[n - 1] != ')')
        return 0;
    if ((p = memmem(line, n, mid, sizeof(mid) - 1)) == NULL ||
        (p = memmem(p, n - (size_t)(p - line), key, sizeof(key) - 1)) == NULL)
        return 0;
    return memmem(p, n - (size_t)(p - line), tail, sizeof(tail) - 1) != NULL;
}

int gvisor_status_from_log(const char *buf, size_t len, int *out)
{
    static const char key[] = "] Exiting with status: ";
    size_t end = len, start, k = sizeof(key) - 1;
    unsigned long w = 0;

    /* the final line, past at most GVISOR_LOG_TRAILERS of the outer process's warnings */
    for (int skipped = 0;; skipped++) {
        while (end > 0 && buf[end - 1] == '\n')
            end--;
        start = end;
        while (start > 0 && buf[start - 1] != '\n')
            start--;
        if (skipped == GVISOR_LOG_TRAILERS || !forwarding_warning(buf, start, end))
            break;
        end = start;
    }
    for (size_t i = start; i + k <= end; i++) {
        if (memcmp(buf + i, key, k) != 0)
            continue;
        size_t d = i + k;
        if (d == end || end - d > 5)
            return -1;
        for (; d < end; d++) {
            if (buf[d] < '0' || buf[d] > '9')
                return -1;
            w = w * 10 + (unsigned long)(buf[d] - '0');
        }
        /* an exit (code << 8) or a signal death (1..64, maybe with the core bit) */
        unsigned long sig = w & 0x7f;
        if (w > 0xffff || (sig == 0 && (w & 0x80)) || (sig != 0 && (sig > 64 || (w >> 8) != 0)))
            return -1;
        *out = (int)w;
        return 0;
    }
    return -1;
}

int gvisor_wait_status(int status, const char *log_path)
{
    char buf[2048]; /* the final line and GVISOR_LOG_TRAILERS warnings after it */
    struct stat st;
    int w, fd;

    if (!WIFEXITED(status))
        return status; /* runsc itself was killed (a limit, the host) */
    if ((fd = open(log_path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) < 0)
        return status;
    ssize_t n = -1;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
        off_t off = st.st_size > (off_t)sizeof(buf) ? st.st_size - (off_t)sizeof(buf) : 0;
        n = pread(fd, buf, sizeof(buf), off);
    }
    close(fd);
    if (n > 0 && gvisor_status_from_log(buf, (size_t)n, &w) == 0)
        return w;
    return status; /* runsc's own failure, or no log: its exit code as it is */
}
