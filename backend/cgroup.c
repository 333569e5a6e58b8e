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
        if (own_group(self_cgroup, "", own, sizeof(own), e) != 0)
            return -1;
        return path_join(cg->base[0], sizeof(cg->base[0]), fsroot, own, name, e);
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

/* ---- killing ---------------------------------------------------------- */

/* Sends SIGKILL to every pid listed in dir/cgroup.procs; returns how many
 * were listed, or -1.  The list is parsed as it streams in, so a group of
 * any size is read whole and no number is ever cut in two. */
static int kill_listed(const char *dir, struct errbuf *e)
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
                    pid = -1; /* not a pid: never signal it */
                digits++;
                continue;
            }
            if (i == n && n > 0)
                break; /* the number may go on in the next chunk */
            if (digits && pid > 1) {
                kill((pid_t)pid, SIGKILL);
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

static int kill_group(const struct cg_system *cg, char (*path)[PATH_MAX / 4], struct errbuf *e)
{
    const char *procs_dir = cg->version == CG_V2 ? path[0] : path[CG_FREEZER];
    struct errbuf ignored;
    int frozen = 0;

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

void cg_teardown_instance(struct cg_system *cg)
{
    struct errbuf e;
    int n = cg->version == CG_V2 ? 1 : CG_NCTRL;
    if (cleanup_stale(cg, &e) != 0)
        return;
    for (int i = 0; i < n; i++)
        (void)rmdir(cg->base[i]);
}

int cg_setup_instance(struct cg_system *cg, struct errbuf *e)
{
    if (cg->version == CG_V1) {
        for (int i = 0; i < CG_NCTRL; i++)
            if (mkdir_ok(cg->base[i], e) != 0)
                return -1;
        return cleanup_stale(cg, e);
    }

    /* v2: enable controllers in our own group, then in the instance group.
     * A group with processes cannot delegate controllers ("no internal
     * processes"), so the backend first moves itself into a leaf. */
    char own[PATH_MAX / 4], leaf[PATH_MAX / 4 + 32], pid[32];
    snprintf(own, sizeof(own), "%s", cg->base[0]);
    char *slash = strrchr(own, '/');
    if (slash == NULL || slash == own)
        return errf(e, "bad v2 base %s", cg->base[0]);
    *slash = '\0';
    struct errbuf busy;
    if (write_file(own, "cgroup.subtree_control", "+memory +pids +cpu", &busy) != 0) {
        if (errno != EBUSY)
            return errf(e, "%s", busy.msg);
        snprintf(leaf, sizeof(leaf), "%s.supervisor", cg->base[0]);
        snprintf(pid, sizeof(pid), "%ld", (long)getpid());
        if (mkdir_ok(leaf, e) != 0 || write_file(leaf, "cgroup.procs", pid, e) != 0 ||
            write_file(own, "cgroup.subtree_control", "+memory +pids +cpu", e) != 0)
            return -1;
    }
    if (mkdir_ok(cg->base[0], e) != 0 || write_file(cg->base[0], "cgroup.subtree_control", "+memory +pids +cpu", e) != 0)
        return -1;
    return cleanup_stale(cg, e);
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
