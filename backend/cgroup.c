/*
 * cgroup.c - box control groups on cgroup v1 (one hierarchy per controller:
 * memory, pids, cpuacct, freezer) and v2 (unified), behind cgroup.h.
 *
 * Every path is built from the detected base and a box name the backend
 * chose itself; nothing here follows a path a box could influence.
 */
#include "cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "moat_io.h"

static const char *const v1_names[CG_NCTRL] = {"memory", "pids", "cpuacct", "freezer"};

/* ---- small file helpers ---------------------------------------------- */

static int write_file(const char *dir, const char *file, const char *value, struct errbuf *e)
{
    char path[PATH_MAX];
    if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, file) >= sizeof(path))
        return errf(e, "cgroup path too long: %s/%s", dir, file);
    int fd = open(path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return errf_errno(e, "open %s", path);
    size_t len = strlen(value);
    ssize_t n = write(fd, value, len);
    if (n < 0 || (size_t)n != len) {
        errf_errno(e, "write %s to %s", value, path);
        close(fd);
        return -1;
    }
    close(fd);
    return 0;
}

/* Reads a small file into buf (NUL-terminated); returns its length or -1. */
static ssize_t read_file(const char *dir, const char *file, char *buf, size_t size, struct errbuf *e)
{
    char path[PATH_MAX];
    if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, file) >= sizeof(path))
        return errf(e, "cgroup path too long: %s/%s", dir, file);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return errf_errno(e, "open %s", path);
    ssize_t n = moat_read_full(fd, buf, size - 1);
    if (n < 0) {
        errf_errno(e, "read %s", path);
        close(fd);
        return -1;
    }
    buf[n] = '\0';
    close(fd);
    return n;
}

static int read_u64(const char *dir, const char *file, uint64_t *v, struct errbuf *e)
{
    char buf[64];
    if (read_file(dir, file, buf, sizeof(buf), e) < 0)
        return -1;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(buf, &end, 10);
    if (errno != 0 || end == buf)
        return errf(e, "%s/%s: not a number", dir, file);
    *v = x;
    return 0;
}

/* Finds "key N" in a flat-keyed file such as memory.events or cpu.stat; a
 * missing key reads as 0 (and *found, if given, says whether it was there). */
static int read_keyed_found(const char *dir, const char *file, const char *key, uint64_t *v, int *found, struct errbuf *e)
{
    char buf[4096];
    if (found)
        *found = 0;
    if (read_file(dir, file, buf, sizeof(buf), e) < 0)
        return -1;
    size_t klen = strlen(key);
    for (char *line = buf; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        if (strncmp(line, key, klen) == 0 && line[klen] == ' ') {
            *v = strtoull(line + klen + 1, NULL, 10);
            if (found)
                *found = 1;
            return 0;
        }
    }
    *v = 0;
    return 0;
}

static int read_keyed(const char *dir, const char *file, const char *key, uint64_t *v, struct errbuf *e)
{
    return read_keyed_found(dir, file, key, v, NULL, e);
}

static int path_join(char *out, size_t size, const char *a, const char *b, const char *c, struct errbuf *e)
{
    int n = snprintf(out, size, "%s%s%s%s%s", a, (b[0] == '/' || b[0] == '\0') ? "" : "/", b, c[0] ? "/" : "", c);
    if (n < 0 || (size_t)n >= size)
        return errf(e, "cgroup path too long");
    /* collapse a "//" left by an own group of "/" */
    for (char *p = out; (p = strstr(p, "//")) != NULL;)
        memmove(p, p + 1, strlen(p));
    return 0;
}

static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* ---- detection -------------------------------------------------------- */

/* Finds the group of `want` (a v1 controller name, or "" for v2) in a
 * /proc/<pid>/cgroup file. */
static int own_group(const char *self_cgroup, const char *want, char *out, size_t size, struct errbuf *e)
{
    FILE *f = fopen(self_cgroup, "re");
    if (f == NULL)
        return errf_errno(e, "open %s", self_cgroup);
    char line[1024];
    int found = 0;
    while (!found && fgets(line, sizeof(line), f) != NULL) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (c2 == NULL)
            continue;
        *c2 = '\0';
        const char *ctrls = c1 + 1, *path = c2 + 1;
        if (want[0] == '\0') {
            found = ctrls[0] == '\0' && strncmp(line, "0:", 2) == 0;
        } else {
            char list[256];
            snprintf(list, sizeof(list), "%s", ctrls);
            for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
                if (strcmp(tok, want) == 0)
                    found = 1;
        }
        if (found && (size_t)snprintf(out, size, "%s", path) >= size) {
            fclose(f);
            return errf(e, "own cgroup path too long");
        }
    }
    fclose(f);
    if (!found)
        return errf(e, "%s: no %s cgroup", self_cgroup, want[0] ? want : "v2");
    return 0;
}

static int valid_name(const char *name)
{
    if (name[0] == '\0' || strlen(name) > 64 || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
        return 0;
    for (const char *p = name; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '_' ||
              *p == '.'))
            return 0;
    return 1;
}

/*
 * v2: the own group's path (no trailing "/"), the leaf the own group's
 * processes go to and the instance group.  Started inside the leaf a killed
 * run of this instance left (its shell was moved there), the backend adopts
 * it: the own group is the leaf's parent, as it was for that run.
 */
static int v2_find_leaf(struct cg_system *cg, const char *name, struct errbuf *e)
{
    char leaf_name[96];
    size_t len = strlen(cg->own);

    while (len > 1 && cg->own[len - 1] == '/')
        cg->own[--len] = '\0';
    snprintf(leaf_name, sizeof(leaf_name), "%s.supervisor", name);
    const char *last = strrchr(cg->own, '/');
    /* never at the hierarchy root, where no leaf is ever made */
    if (last != NULL && strcmp(last + 1, leaf_name) == 0 && (size_t)(last - cg->own) > strlen(cg->fsroot)) {
        cg->adopted = 1;
        cg->leaf_used = 1;
        snprintf(cg->leaf, sizeof(cg->leaf), "%s", cg->own);
        cg->own[last - cg->own] = '\0';
    } else if (path_join(cg->leaf, sizeof(cg->leaf), cg->own, leaf_name, "", e) != 0) {
        return -1;
    }
    return path_join(cg->base[0], sizeof(cg->base[0]), cg->own, name, "", e);
}

int cg_detect(struct cg_system *cg, const char *fsroot, const char *self_cgroup, const char *name, struct errbuf *e)
{
    char probe[PATH_MAX], own[PATH_MAX / 4];

    memset(cg, 0, sizeof(*cg));
    if (!valid_name(name))
        return errf(e, "bad cgroup instance name \"%s\"", name);
    if ((size_t)snprintf(cg->fsroot, sizeof(cg->fsroot), "%s", fsroot) >= sizeof(cg->fsroot))
        return errf(e, "cgroup root path too long");

    snprintf(probe, sizeof(probe), "%s/cgroup.controllers", fsroot);
    if (exists(probe)) {
        cg->version = CG_V2;
        if (own_group(self_cgroup, "", own, sizeof(own), e) != 0 || path_join(cg->own, sizeof(cg->own), fsroot, own, "", e) != 0)
            return -1;
        return v2_find_leaf(cg, name, e);
    }

    cg->version = CG_V1;
    for (int i = 0; i < CG_NCTRL; i++) {
        char mnt[PATH_MAX / 4];
        snprintf(probe, sizeof(probe), "%s/%s", fsroot, v1_names[i]);
        if (!exists(probe))
            return errf(e, "cgroup v1 controller %s not mounted at %s", v1_names[i], probe);
        if (own_group(self_cgroup, v1_names[i], own, sizeof(own), e) != 0)
            return -1;
        if (path_join(mnt, sizeof(mnt), fsroot, v1_names[i], "", e) != 0 ||
            path_join(cg->base[i], sizeof(cg->base[i]), mnt, own, name, e) != 0)
            return -1;
    }
    snprintf(probe, sizeof(probe), "%s/memory/memory.memsw.limit_in_bytes", fsroot);
    cg->memsw = exists(probe);
    return 0;
}

/* ---- listed processes -------------------------------------------------- */

/* Calls fn(pid, ctx) for every pid listed in dir/cgroup.procs; returns how
 * many were listed, or -1 (fn's -1 stops the walk).  The list is parsed as
 * it streams in, so a group of any size is read whole and no number is ever
 * cut in two. */
static int each_listed(const char *dir, int (*fn)(pid_t, const void *, struct errbuf *), const void *ctx, struct errbuf *e)
{
    char path[PATH_MAX], buf[4096];
    long pid = 0;
    int digits = 0, count = 0;

    if ((size_t)snprintf(path, sizeof(path), "%s/cgroup.procs", dir) >= sizeof(path))
        return errf(e, "cgroup path too long: %s", dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        if (errno == ENOENT)
            return 0; /* a group half made or half removed */
        return errf_errno(e, "open %s", path);
    }
    for (;;) {
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            errf_errno(e, "read %s", path);
            close(fd);
            return -1;
        }
        /* a zero-length read ends the list: flush the last number */
        for (ssize_t i = 0; i <= n; i++) {
            if (i < n && buf[i] >= '0' && buf[i] <= '9') {
                if (pid < 100000000L)
                    pid = pid * 10 + (buf[i] - '0');
                else
                    pid = -1; /* not a pid: never act on it */
                digits++;
                continue;
            }
            if (i == n && n > 0)
                break; /* the number may go on in the next chunk */
            if (digits && pid > 0) {
                if (fn((pid_t)pid, ctx, e) != 0) {
                    close(fd);
                    return -1;
                }
                count++;
            }
            pid = 0;
            digits = 0;
        }
        if (n == 0)
            break;
    }
    close(fd);
    return count;
}

/* ---- killing ---------------------------------------------------------- */

static int kill_one(pid_t pid, const void *ctx, struct errbuf *e)
{
    (void)ctx;
    (void)e;
    if (pid > 1)
        kill(pid, SIGKILL);
    return 0;
}

/* Sends SIGKILL to every pid listed in dir/cgroup.procs; returns how many
 * were listed, or -1. */
static int kill_listed(const char *dir, struct errbuf *e)
{
    return each_listed(dir, kill_one, NULL, e);
}

static int count_one(pid_t pid, const void *ctx, struct errbuf *e)
{
    (void)pid;
    (void)ctx;
    (void)e;
    return 0;
}

static int kill_group(const struct cg_system *cg, char (*path)[PATH_MAX / 4], struct errbuf *e)
{
    const char *procs_dir = cg->version == CG_V2 ? path[0] : path[CG_FREEZER];
    struct errbuf ignored;
    int frozen = 0;

    /* An empty group stays empty: a process enters it only by a fork of a
     * member or by root's attach, and we are the only one that attaches.  So
     * an empty list needs no freezing (box_discard: the pid namespace, and
     * with it every process of the box, is gone with its init). */
    int listed = each_listed(procs_dir, count_one, NULL, e);
    if (listed <= 0)
        return listed;
    if (cg->version == CG_V2) {
        /* cgroup.kill (5.14+) kills the whole subtree atomically */
        (void)write_file(path[0], "cgroup.kill", "1", &ignored);
    } else {
        /* freeze first so nothing forks while we kill */
        frozen = write_file(path[CG_FREEZER], "freezer.state", "FROZEN", &ignored) == 0;
    }
    long wait = 1;
    for (int round = 0; round < 200; round++) {
        int n = kill_listed(procs_dir, e);
        if (n < 0)
            return -1;
        if (frozen && round == 0) {
            (void)write_file(path[CG_FREEZER], "freezer.state", "THAWED", &ignored);
            frozen = 0;
            continue;
        }
        if (n == 0)
            return 0;
        sleep_ms(wait);
        if (wait < 20)
            wait *= 2;
    }
    return errf(e, "processes remain in %s after kill", procs_dir);
}

static int remove_group(const struct cg_system *cg, char (*path)[PATH_MAX / 4], struct errbuf *e)
{
    int n = cg->version == CG_V2 ? 1 : CG_NCTRL;
    if (kill_group(cg, path, e) != 0)
        return -1;
    for (int i = 0; i < n; i++) {
        int tries = 0;
        while (rmdir(path[i]) != 0) {
            if (errno == ENOENT)
                break;
            if (errno != EBUSY || ++tries > 100)
                return errf_errno(e, "rmdir %s", path[i]);
            sleep_ms(2);
        }
    }
    return 0;
}

/* ---- instance set-up --------------------------------------------------- */

static int mkdir_ok(const char *path, struct errbuf *e)
{
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
        return errf_errno(e, "mkdir %s", path);
    return 0;
}

/* Removes every child group of base left by an earlier, crashed backend. */
static int cleanup_stale(struct cg_system *cg, struct errbuf *e)
{
    DIR *d = opendir(cg->base[0]);
    if (d == NULL)
        return errf_errno(e, "opendir %s", cg->base[0]);
    struct dirent *de;
    int rc = 0;
    while ((de = readdir(d)) != NULL) {
        if (de->d_type != DT_DIR || de->d_name[0] == '.')
            continue;
        struct cg_box stale;
        memset(&stale, 0, sizeof(stale));
        stale.cg = cg;
        int n = cg->version == CG_V2 ? 1 : CG_NCTRL;
        for (int i = 0; i < n; i++)
            if ((size_t)snprintf(stale.path[i], sizeof(stale.path[i]), "%s/%s", cg->base[i], de->d_name) >= sizeof(stale.path[i]))
                rc = errf(e, "stale group path too long");
        if (rc == 0 && remove_group(cg, stale.path, e) != 0)
            rc = -1;
        if (rc != 0)
            break;
    }
    closedir(d);
    return rc;
}

/* ---- v2: the own group -------------------------------------------------- */

/*
 * v2 lets a group hand controllers to its children only while it holds no
 * processes itself (the "no internal processes" rule; the root group is
 * exempt).  The own group holds the backend, and, when it was started from a
 * login shell or a unit that also runs a shell, other processes too.  So, as
 * systemd documents for a delegated subtree (Delegate=yes: processes in
 * leaves, controllers enabled above them), the backend moves every process
 * of the own group into a leaf and then enables the controllers:
 *
 *   <own>                     subtree_control gains what was missing of
 *                             memory, pids and cpu (remembered in cg->added)
 *   <own>/<name>.supervisor   the backend and whatever shared its group
 *   <own>/<name>              the instance group, +memory +pids +cpu
 *   <own>/<name>/slotN        one box
 *
 * The processes stay below the own group, so every limit set on it still
 * holds them.  A controller the own group's parent does not give it, or a
 * process that cannot be moved, is refused with a message that says what to
 * do.  v2_teardown undoes it all in reverse, leaving the own group's
 * subtree_control and processes as they were found.
 */

static const char *const v2_names[] = {"memory", "pids", "cpu"};
#define V2_NCTRL 3
#define V2_ALL   ((1 << V2_NCTRL) - 1)
#define V2_HINT  "run moat-backend in a group delegated to it, e.g. a systemd service with Delegate=yes"

/* The controllers of v2_names (a bit each) listed in dir/file. */
static int v2_listed(const char *dir, const char *file, int *bits, struct errbuf *e)
{
    char buf[512];
    *bits = 0;
    if (read_file(dir, file, buf, sizeof(buf), e) < 0)
        return -1;
    for (char *save = NULL, *tok = strtok_r(buf, " \n", &save); tok; tok = strtok_r(NULL, " \n", &save))
        for (int i = 0; i < V2_NCTRL; i++)
            if (strcmp(tok, v2_names[i]) == 0)
                *bits |= 1 << i;
    return 0;
}

/* Writes "+memory +pids" (sign '+') or "-memory -pids" to dir's
 * subtree_control for the controllers in bits; errno says why it failed. */
static int v2_switch(const char *dir, int bits, char sign, struct errbuf *e)
{
    char value[64] = "";
    size_t n = 0;
    for (int i = 0; i < V2_NCTRL; i++)
        if (bits & (1 << i))
            n += (size_t)snprintf(value + n, sizeof(value) - n, "%s%c%s", n ? " " : "", sign, v2_names[i]);
    return write_file(dir, "cgroup.subtree_control", value, e);
}

static void v2_names_of(int bits, char *out, size_t size)
{
    size_t n = 0;
    out[0] = '\0';
    for (int i = 0; i < V2_NCTRL && n < size; i++)
        if (bits & (1 << i))
            n += (size_t)snprintf(out + n, size - n, "%s%s", n ? " " : "", v2_names[i]);
}

static int move_one(pid_t pid, const void *ctx, struct errbuf *e)
{
    char value[32];
    snprintf(value, sizeof(value), "%ld", (long)pid);
    if (write_file(ctx, "cgroup.procs", value, e) == 0 || errno == ESRCH)
        return 0; /* ESRCH: it exited meanwhile */
    return -1;
}

/* Moves every process of group `from` into group `to`, again until none is
 * left (a process may fork while it is being moved); bounded. */
static int move_all(const char *from, const char *to, struct errbuf *e)
{
    for (int round = 0; round < 50; round++) {
        int n = each_listed(from, move_one, to, e);
        if (n <= 0)
            return n;
        sleep_ms(round < 5 ? 0 : 2);
    }
    return errf(e, "processes keep appearing in %s", from);
}

/* Enables what is missing of memory, pids and cpu in the own group, moving
 * its processes into the leaf first when v2 requires it. */
static int v2_enable_own(struct cg_system *cg, struct errbuf *e)
{
    int enabled, available;
    char names[32];
    struct errbuf busy;

    if (v2_listed(cg->own, "cgroup.subtree_control", &enabled, e) != 0)
        return -1;
    if (cg->adopted)
        cg->added = enabled; /* the killed run enabled them: its own group held processes */
    int missing = V2_ALL & ~enabled;
    if (missing == 0)
        return 0;
    if (v2_listed(cg->own, "cgroup.controllers", &available, e) != 0)
        return -1;
    if (missing & ~available) {
        v2_names_of(missing & ~available, names, sizeof(names));
        return errf(e, "cgroup v2: %s: controller %s not available (the parent group does not delegate it): " V2_HINT, cg->own,
                    names);
    }
    for (int round = 0; round < 10; round++) {
        if (v2_switch(cg->own, missing, '+', &busy) == 0) {
            cg->added |= missing;
            return 0;
        }
        if (errno != EBUSY)
            return errf(e, "%s", busy.msg);
        /* the own group holds processes: into the leaf with them */
        if (mkdir_ok(cg->leaf, e) != 0)
            return -1;
        cg->leaf_used = 1;
        if (move_all(cg->own, cg->leaf, &busy) != 0)
            return errf(e, "cgroup v2: %s holds processes that cannot be moved into a leaf (%s): " V2_HINT, cg->own, busy.msg);
    }
    return errf(e, "cgroup v2: %s keeps holding processes, so it cannot enable controllers: " V2_HINT, cg->own);
}

/* Undoes v2_enable_own: the controllers we enabled off, the leaf's
 * processes back in the own group, the leaf removed. */
static int v2_restore_own(struct cg_system *cg, struct errbuf *e)
{
    if (cg->added != 0) {
        if (v2_switch(cg->own, cg->added, '-', e) != 0)
            return -1; /* e.g. another group below own still uses them */
        cg->added = 0;
    }
    if (!cg->leaf_used)
        return 0;
    if (move_all(cg->leaf, cg->own, e) != 0)
        return -1;
    if (rmdir(cg->leaf) != 0 && errno != ENOENT)
        return errf_errno(e, "rmdir %s", cg->leaf);
    cg->leaf_used = 0;
    return 0;
}

/* ---- instance set-up and teardown --------------------------------------- */

int cg_teardown_instance(struct cg_system *cg, struct errbuf *e)
{
    int n = cg->version == CG_V2 ? 1 : CG_NCTRL;
    if (!cg->ready)
        return 0;
    if (exists(cg->base[0]) && cleanup_stale(cg, e) != 0)
        return -1;
    for (int i = 0; i < n; i++)
        if (rmdir(cg->base[i]) != 0 && errno != ENOENT)
            return errf_errno(e, "rmdir %s", cg->base[i]);
    if (cg->version == CG_V2 && v2_restore_own(cg, e) != 0)
        return -1;
    cg->ready = 0;
    return 0;
}

/* On a failed set-up: undo what was done, keep the first error. */
static int setup_failed(struct cg_system *cg)
{
    struct errbuf ignored;
    (void)cg_teardown_instance(cg, &ignored);
    return -1;
}

int cg_setup_instance(struct cg_system *cg, struct errbuf *e)
{
    cg->ready = 1;
    if (cg->version == CG_V1) {
        for (int i = 0; i < CG_NCTRL; i++)
            if (mkdir_ok(cg->base[i], e) != 0)
                return setup_failed(cg);
        return cleanup_stale(cg, e) == 0 ? 0 : setup_failed(cg);
    }
    if (v2_enable_own(cg, e) != 0 || mkdir_ok(cg->base[0], e) != 0 ||
        write_file(cg->base[0], "cgroup.subtree_control", "+memory +pids +cpu", e) != 0 || cleanup_stale(cg, e) != 0)
        return setup_failed(cg);
    return 0;
}

/* ---- per box ---------------------------------------------------------- */

int cg_box_create(const struct cg_system *cg, struct cg_box *box, const char *box_name, struct errbuf *e)
{
    int n = cg->version == CG_V2 ? 1 : CG_NCTRL;

    memset(box, 0, sizeof(*box));
    box->cg = cg;
    if (!valid_name(box_name))
        return errf(e, "bad box group name \"%s\"", box_name);
    for (int i = 0; i < n; i++) {
        if ((size_t)snprintf(box->path[i], sizeof(box->path[i]), "%s/%s", cg->base[i], box_name) >= sizeof(box->path[i]))
            return errf(e, "box group path too long");
    }
    for (int i = 0; i < n; i++) {
        if (mkdir(box->path[i], 0755) != 0) {
            if (errno != EEXIST)
                return errf_errno(e, "mkdir %s", box->path[i]);
            /* left over from an interrupted run: start clean */
            if (remove_group(cg, box->path, e) != 0)
                return -1;
            return cg_box_create(cg, box, box_name, e);
        }
    }
    return 0;
}

/* The OOM events of a v2 box so far ("oom" + "oom_kill"); 0 when unreadable. */
static uint64_t v2_oom_events(struct cg_box *box)
{
    struct errbuf ignored;
    uint64_t oom = 0, kills = 0;
    (void)read_keyed(box->path[0], "memory.events", "oom", &oom, &ignored);
    (void)read_keyed(box->path[0], "memory.events", "oom_kill", &kills, &ignored);
    return oom + kills;
}

/*
 * v2: lowering memory.max below what the box holds makes the kernel reclaim
 * and, failing that, OOM-kill in the box (init too) or give up with usage
 * above the limit; the write itself succeeds.  Either is CG_OVER_LIMIT.
 */
static int v2_set_memory(struct cg_box *box, uint64_t memory_bytes, const char *mem, struct errbuf *e)
{
    uint64_t before = v2_oom_events(box), current = 0;
    struct errbuf ignored;

    if (write_file(box->path[0], "memory.max", mem, e) != 0)
        return -1;
    if (v2_oom_events(box) > before ||
        (read_u64(box->path[0], "memory.current", &current, &ignored) == 0 && current > memory_bytes)) {
        errf(e, "%s: the box holds more than memory.max %s", box->path[0], mem);
        return CG_OVER_LIMIT;
    }
    return 0;
}

/* v1: a limit below what the kernel cannot reclaim is refused with EBUSY. */
static int v1_write_memory(struct cg_box *box, const char *file, const char *mem, struct errbuf *e)
{
    if (write_file(box->path[CG_MEMORY], file, mem, e) == 0)
        return 0;
    return errno == EBUSY ? CG_OVER_LIMIT : -1;
}

static int v1_set_memory(struct cg_box *box, const char *mem, struct errbuf *e)
{
    int rc;

    if (!box->cg->memsw)
        return v1_write_memory(box, "memory.limit_in_bytes", mem, e);
    /* memsw must stay >= memory: raise memsw first, lower it last */
    struct errbuf ignored;
    int raised = write_file(box->path[CG_MEMORY], "memory.memsw.limit_in_bytes", mem, &ignored) == 0;
    if ((rc = v1_write_memory(box, "memory.limit_in_bytes", mem, e)) != 0)
        return rc;
    return raised ? 0 : v1_write_memory(box, "memory.memsw.limit_in_bytes", mem, e);
}

int cg_box_set_limits(struct cg_box *box, uint64_t memory_bytes, uint32_t pids, struct errbuf *e)
{
    char mem[32], npids[16];
    int rc;
    snprintf(mem, sizeof(mem), "%llu", (unsigned long long)memory_bytes);
    snprintf(npids, sizeof(npids), "%u", pids);

    if (box->cg->version == CG_V2) {
        struct errbuf ignored;
        if ((rc = v2_set_memory(box, memory_bytes, mem, e)) != 0)
            return rc;
        (void)write_file(box->path[0], "memory.swap.max", "0", &ignored); /* absent without swap accounting */
        return write_file(box->path[0], "pids.max", npids, e);
    }
    if ((rc = v1_set_memory(box, mem, e)) != 0)
        return rc;
    return write_file(box->path[CG_PIDS], "pids.max", npids, e);
}

int cg_box_memory_current(struct cg_box *box, uint64_t *bytes, struct errbuf *e)
{
    if (box->cg->version == CG_V2)
        return read_u64(box->path[0], "memory.current", bytes, e);
    return read_u64(box->path[CG_MEMORY], "memory.usage_in_bytes", bytes, e);
}

int cg_box_attach(struct cg_box *box, pid_t pid, struct errbuf *e)
{
    char value[32];
    int n = box->cg->version == CG_V2 ? 1 : CG_NCTRL;
    snprintf(value, sizeof(value), "%ld", (long)pid);
    for (int i = 0; i < n; i++)
        if (write_file(box->path[i], "cgroup.procs", value, e) != 0)
            return -1;
    return 0;
}

int cg_box_usage(struct cg_box *box, struct cg_usage *u, struct errbuf *e)
{
    memset(u, 0, sizeof(*u));
    if (box->cg->version == CG_V2) {
        uint64_t usec;
        struct errbuf ignored;
        if (read_keyed(box->path[0], "cpu.stat", "usage_usec", &usec, e) != 0)
            return -1;
        u->cpu_ns = usec * 1000;
        /* memory.peak exists from 5.19; fall back to the current usage */
        if (read_u64(box->path[0], "memory.peak", &u->memory_peak, &ignored) != 0 &&
            read_u64(box->path[0], "memory.current", &u->memory_peak, e) != 0)
            return -1;
        if (read_keyed_found(box->path[0], "memory.events", "oom_kill", &u->oom_kills, &u->oom_exact, e) != 0)
            return -1;
        return read_keyed(box->path[0], "memory.events", "max", &u->limit_hits, e);
    }
    if (read_u64(box->path[CG_CPUACCT], "cpuacct.usage", &u->cpu_ns, e) != 0 ||
        read_u64(box->path[CG_MEMORY], "memory.max_usage_in_bytes", &u->memory_peak, e) != 0)
        return -1;
    if (read_keyed_found(box->path[CG_MEMORY], "memory.oom_control", "oom_kill", &u->oom_kills, &u->oom_exact, e) != 0)
        return -1;
    struct errbuf ignored;
    if (!u->oom_exact) {
        /* kernels before 4.13 have no oom_kill line: a group stuck in OOM counts */
        uint64_t under = 0;
        if (read_keyed(box->path[CG_MEMORY], "memory.oom_control", "under_oom", &under, &ignored) == 0 && under)
            u->oom_kills = 1;
    }
    /* times the limit was reached, reclaimed or not: box.c's guess where kills are not counted */
    (void)read_u64(box->path[CG_MEMORY], "memory.failcnt", &u->limit_hits, &ignored);
    return 0;
}

int cg_box_reset_peak(struct cg_box *box)
{
    struct errbuf ignored;
    if (box->cg->version == CG_V2)
        return -1; /* memory.peak resets only per open file from 6.12 on */
    return write_file(box->path[CG_MEMORY], "memory.max_usage_in_bytes", "0", &ignored);
}

int cg_box_kill(struct cg_box *box, struct errbuf *e)
{
    return kill_group(box->cg, box->path, e);
}

int cg_box_destroy(struct cg_box *box, struct errbuf *e)
{
    if (box->path[0][0] == '\0')
        return 0;
    int rc = remove_group(box->cg, box->path, e);
    if (rc == 0)
        memset(box->path, 0, sizeof(box->path));
    return rc;
}
