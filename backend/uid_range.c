/*
 * uid_range.c - holding this instance's box uids (see uid_range.h).
 *
 * The lock step: UID_LOCK_DIR must be a root-owned directory that only root
 * can write (it is made 0755 if missing), opened once without following a
 * symlink; each "<uid>.lock" below it is opened relative to it, must be a
 * root-owned regular file, and is locked with flock(LOCK_EX|LOCK_NB).  The
 * locks are taken in ascending order, so of two instances starting at the
 * same moment with overlapping ranges at least one gets all of its own.
 * The holder writes its pid into each file, for the refusal message, and
 * removes the files when it lets go, before it drops the locks; a lock won
 * on a file that its name no longer points to is therefore dropped and the
 * name opened again.  A crashed holder leaves its files behind, harmlessly:
 * the kernel has dropped its locks.
 *
 * The check step: getpwuid_r/getgrgid_r for every id of the range, then every
 * task on the host: /proc/<pid>/status, and /proc/<pid>/task/<tid>/status when
 * the process has more than one thread (a thread may change its ids alone).
 * Real, effective, saved and filesystem uids and gids count, and so do
 * supplementary groups.  This sees the backend's pid namespace, so a backend
 * run inside a container sees only that container's processes.  It is a
 * start-up check: a process that takes a uid of the range later is not
 * noticed (root can always do that); the locks are what keep backends apart.
 */
#include "uid_range.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "moat_io.h"

#define STATUS_MAX    65536 /* /proc/<pid>/status read at most this far (Groups can be long) */
#define NSS_BUF_INIT  16384
#define LOCK_ATTEMPTS 8 /* a lock file replaced under us this often: give up */

static char status_buf[STATUS_MAX + 1]; /* start-up only: one thread */

static int in_range(const struct uid_range *r, unsigned long id)
{
    return id >= r->first && id - r->first < (unsigned long)r->count;
}

static unsigned last_id(const struct uid_range *r)
{
    return (unsigned)r->first + (unsigned)r->count - 1;
}

/* ---- the lock step --------------------------------------------------------- */

/* The lock directory, opened; -1 if it is anything but root's own. */
static int open_lock_dir(struct errbuf *e)
{
    struct stat st;
    int dfd;

    if (mkdir(UID_LOCK_DIR, 0755) != 0 && errno != EEXIST)
        return errf_errno(e, "mkdir %s", UID_LOCK_DIR);
    dfd = open(UID_LOCK_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0)
        return errf_errno(e, "open %s", UID_LOCK_DIR);
    if (fstat(dfd, &st) != 0 || st.st_uid != 0 || (st.st_mode & 022) != 0) {
        close(dfd);
        return errf(e, "%s: not a directory that only root can write", UID_LOCK_DIR);
    }
    return dfd;
}

/* The pid a lock file names, as text ("unknown" if none yet). */
static void holder_pid(int fd, char *out, size_t size)
{
    char buf[16];
    ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
    size_t len = 0;

    while (n > 0 && len < (size_t)n && isdigit((unsigned char)buf[len]))
        len++;
    if (len == 0)
        snprintf(out, size, "unknown");
    else
        snprintf(out, size, "%.*s", (int)len, buf);
}

/* uid's lock file, opened (created if need be): a root-owned regular file, or -1. */
static int open_lock_file(int dfd, const char *name, struct stat *st, struct errbuf *e)
{
    int fd = openat(dfd, name, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0)
        return errf_errno(e, "open %s/%s", UID_LOCK_DIR, name);
    if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode) || st->st_uid != 0) {
        close(fd);
        return errf(e, "%s/%s: not a root-owned regular file", UID_LOCK_DIR, name);
    }
    return fd;
}

/*
 * Locks uid's file into *fd: 0, or -1 saying who holds it or what failed.
 * A holder removes its files when it lets go (uid_range_unlock), still
 * holding the lock; so a lock won on a file the name no longer points to is
 * worthless, and the name is opened again.
 */
static int lock_one(const struct uid_range *r, int dfd, uid_t uid, int *fd, struct errbuf *e)
{
    char name[32], pid[16];
    struct stat st, now;

    snprintf(name, sizeof(name), "%u.lock", (unsigned)uid);
    for (int attempt = 0; attempt < LOCK_ATTEMPTS; attempt++) {
        if ((*fd = open_lock_file(dfd, name, &st, e)) < 0)
            return -1;
        if (flock(*fd, LOCK_EX | LOCK_NB) != 0) {
            if (errno == EWOULDBLOCK) {
                holder_pid(*fd, pid, sizeof(pid));
                errf(e,
                     "box uids %u..%u: uid %u is held by another moat-backend (pid %s, %s/%s); give each backend a disjoint "
                     "--uid-base range",
                     (unsigned)r->first, last_id(r), (unsigned)uid, pid, UID_LOCK_DIR, name);
            } else {
                errf_errno(e, "flock %s/%s", UID_LOCK_DIR, name);
            }
            close(*fd);
            return -1;
        }
        if (fstatat(dfd, name, &now, AT_SYMLINK_NOFOLLOW) == 0 && now.st_dev == st.st_dev && now.st_ino == st.st_ino)
            break;
        close(*fd); /* removed by its last holder meanwhile */
        *fd = -1;
    }
    if (*fd < 0)
        return errf(e, "%s/%s: replaced %d times while being locked", UID_LOCK_DIR, name, LOCK_ATTEMPTS);
    snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
    if (ftruncate(*fd, 0) != 0 || pwrite(*fd, pid, strlen(pid), 0) != (ssize_t)strlen(pid)) {
        errf_errno(e, "write %s/%s", UID_LOCK_DIR, name);
        close(*fd);
        return -1;
    }
    return 0;
}

int uid_range_lock(struct uid_range *r, uid_t first, int count, struct errbuf *e)
{
    memset(r, 0, sizeof(*r));
    r->first = first;
    r->count = count;
    if (count < 1 || count > MAX_SLOTS)
        return errf(e, "box uid range of %d uids: expected 1..%d", count, MAX_SLOTS);
    if (first == 0 || (uint64_t)first + (uint64_t)count - 1 > UID_RANGE_LAST_OK)
        return errf(e, "box uids %lu..%llu: must lie within 1..%u", (unsigned long)first,
                    (unsigned long long)first + (unsigned long long)count - 1, UID_RANGE_LAST_OK);

    int dfd = open_lock_dir(e);
    if (dfd < 0)
        return -1;
    for (int i = 0; i < count; i++) {
        if (lock_one(r, dfd, first + (uid_t)i, &r->fds[i], e) != 0) {
            close(dfd);
            uid_range_unlock(r);
            return -1;
        }
        r->nlocked = i + 1;
    }
    close(dfd);
    return 0;
}

void uid_range_unlock(struct uid_range *r)
{
    char path[64];

    /* removed while still locked, so that lock files do not pile up in
     * /run; lock_one copes with a file removed under it */
    for (int i = 0; i < r->nlocked; i++) {
        snprintf(path, sizeof(path), "%s/%u.lock", UID_LOCK_DIR, (unsigned)(r->first + (uid_t)i));
        (void)unlink(path);
        close(r->fds[i]);
    }
    r->nlocked = 0;
}

int uid_range_covers(const struct uid_range *r, int nslots)
{
    return r != NULL && r->count >= nslots && r->nlocked == r->count;
}

/* ---- the check step: accounts ------------------------------------------------- */

/* Grows *buf on ERANGE; rc otherwise. */
static int nss_retry(int rc, char **buf, size_t *size)
{
    char *bigger;
    if (rc != ERANGE || *size > (1u << 24))
        return rc;
    if ((bigger = realloc(*buf, *size * 2)) == NULL)
        return ENOMEM;
    *buf = bigger;
    *size *= 2;
    return -1; /* try again */
}

/* One lookup's verdict: rc from getpwuid_r/getgrgid_r, owner the name it found or NULL. */
static int lookup_verdict(const struct uid_range *r, const char *kind, const char *owner_kind, uid_t id, int rc, const char *owner,
                          struct errbuf *e)
{
    if (rc == 0 && owner != NULL)
        return errf(e, "box %ss %u..%u: %s %u is the %s %.32s; choose another --uid-base", kind, (unsigned)r->first, last_id(r),
                    kind, (unsigned)id, owner_kind, owner);
    if (rc != 0 && rc != ENOENT) {
        errno = rc;
        return errf_errno(e, "box %ss %u..%u: cannot look up %s %u", kind, (unsigned)r->first, last_id(r), kind, (unsigned)id);
    }
    return 0;
}

/* 0 if no user has uid id and no group has gid id; -1 naming the one that does. */
static int check_account(const struct uid_range *r, uid_t id, char **buf, size_t *size, struct errbuf *e)
{
    struct passwd pw, *pwr = NULL;
    struct group gr, *grr = NULL;
    int rc;

    while ((rc = nss_retry(getpwuid_r(id, &pw, *buf, *size, &pwr), buf, size)) == -1)
        ;
    if (lookup_verdict(r, "uid", "account", id, rc, pwr ? pw.pw_name : NULL, e) != 0)
        return -1;
    while ((rc = nss_retry(getgrgid_r((gid_t)id, &gr, *buf, *size, &grr), buf, size)) == -1)
        ;
    return lookup_verdict(r, "gid", "group", id, rc, grr ? gr.gr_name : NULL, e);
}

static int check_accounts(const struct uid_range *r, struct errbuf *e)
{
    size_t size = NSS_BUF_INIT;
    char *buf = malloc(size);
    int rc = 0;

    if (buf == NULL)
        return errf(e, "out of memory");
    for (int i = 0; i < r->count && rc == 0; i++)
        rc = check_account(r, r->first + (uid_t)i, &buf, &size, e);
    free(buf);
    return rc;
}

/* ---- the check step: tasks ------------------------------------------------------ */

/* The value of a "Tag:\t..." line of a status file, or NULL. */
static const char *status_field(const char *status, const char *tag)
{
    size_t n = strlen(tag);
    for (const char *p = status; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (strncmp(p, tag, n) == 0 && p[n] == ':')
            return p + n + 1;
    return NULL;
}

/* The first id of a status line (a list of decimal ids) within r: 1 with *id, else 0. */
static int ids_in_range(const struct uid_range *r, const char *field, unsigned long *id)
{
    const char *p = field;
    while (p && *p && *p != '\n') {
        char *end;
        if (!isdigit((unsigned char)*p)) {
            p++;
            continue;
        }
        unsigned long v = strtoul(p, &end, 10);
        if (in_range(r, v)) {
            *id = v;
            return 1;
        }
        p = end;
    }
    return 0;
}

/*
 * One task's status file: 0 if none of its ids is in r (or it is gone),
 * -1 naming it; *threads gets its Threads count (0 if none shown).
 */
static int check_status(const struct uid_range *r, const char *path, long pid, long tid, int *threads, struct errbuf *e)
{
    static const char *const fields[] = {"Uid", "Gid", "Groups"};
    unsigned long id;
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    *threads = 0;
    if (fd < 0)
        return 0; /* exited meanwhile */
    ssize_t n = moat_read_full(fd, status_buf, STATUS_MAX);
    close(fd);
    if (n <= 0)
        return 0;
    status_buf[n] = '\0';
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
        if (ids_in_range(r, status_field(status_buf, fields[i]), &id)) {
            char task[32] = "";
            if (tid != pid)
                snprintf(task, sizeof(task), " (thread %ld)", tid);
            return errf(e, "box uids %u..%u are in use: pid %ld%s runs with %s %lu; stop it or choose another --uid-base",
                        (unsigned)r->first, last_id(r), pid, task, i == 0 ? "uid" : "gid", id);
        }
    }
    const char *t = status_field(status_buf, "Threads");
    if (t != NULL)
        *threads = atoi(t);
    return 0;
}

static long numeric_name(const char *s)
{
    char *end;
    if (!isdigit((unsigned char)s[0]))
        return -1;
    long v = strtol(s, &end, 10);
    return *end == '\0' ? v : -1;
}

/* A process's other threads. */
static int check_threads(const struct uid_range *r, long pid, struct errbuf *e)
{
    char path[64];
    int threads, rc = 0;
    struct dirent *de;

    snprintf(path, sizeof(path), "/proc/%ld/task", pid);
    DIR *d = opendir(path);
    if (d == NULL)
        return 0; /* exited meanwhile */
    while (rc == 0 && (de = readdir(d)) != NULL) {
        long tid = numeric_name(de->d_name);
        if (tid < 0 || tid == pid)
            continue;
        snprintf(path, sizeof(path), "/proc/%ld/task/%ld/status", pid, tid);
        rc = check_status(r, path, pid, tid, &threads, e);
    }
    closedir(d);
    return rc;
}

static int check_tasks(const struct uid_range *r, struct errbuf *e)
{
    char path[64];
    int threads, rc = 0;
    struct dirent *de;
    DIR *d = opendir("/proc");

    if (d == NULL)
        return errf_errno(e, "opendir /proc");
    while (rc == 0 && (de = readdir(d)) != NULL) {
        long pid = numeric_name(de->d_name);
        if (pid < 0)
            continue;
        snprintf(path, sizeof(path), "/proc/%ld/status", pid);
        rc = check_status(r, path, pid, pid, &threads, e);
        if (rc == 0 && threads > 1)
            rc = check_threads(r, pid, e);
    }
    closedir(d);
    return rc;
}

int uid_range_check_unused(const struct uid_range *r, struct errbuf *e)
{
    if (!uid_range_covers(r, r->count))
        return errf(e, "box uids %u..%u are not locked", (unsigned)r->first, last_id(r));
    if (check_accounts(r, e) != 0)
        return -1;
    return check_tasks(r, e);
}
