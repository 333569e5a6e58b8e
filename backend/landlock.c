/*
 * landlock.c - the box's Landlock wall: what a box's programs may open,
 * execute and connect to, whatever the mounts would allow.
 *
 * Theory of operation
 * -------------------
 * The mounts already decide what a box can see: a tmpfs root, read-only
 * binds of the runtime, /box, /tmp, a fresh /proc and four /dev nodes.
 * Landlock is a second, independent wall on the same question, kept by a
 * different part of the kernel: if a mount is ever wrong (a bind left
 * writable, a path a runtime dir drags in), the ruleset still allows only
 * what the table below names.  And it closes what the mounts leave open:
 * the box's own /proc is writable by its uid (/proc/self/mem writes into
 * the program's read-only code, /proc/self/attr, oom_score_adj).  TCP is
 * left to the box's network namespace, the network wall (box_init.c): a
 * program may serve and call itself on its own loopback, as it may on a
 * machine with no network, and every other address is unreachable.
 *
 * Three steps, three system calls, no library:
 *   landlock_setup    at start-up: the kernel's ABI (create_ruleset with
 *                     the VERSION flag), kept for every box; 0 = missing.
 *   landlock_build    in a box's init after the pivot, once per job: one
 *                     ruleset (create_ruleset), one rule per path
 *                     (add_rule, the path opened O_PATH), the descriptor
 *                     kept for the job's stages.  Raw system calls and no
 *                     allocation: init runs in a copy of a threaded
 *                     process (see box_init.c).
 *   landlock_enforce  in each stage program, after no_new_privs and before
 *                     the seccomp filter (which denies the three calls to
 *                     the program: it could only restrict itself further,
 *                     but the allow-list holds nothing a program does not
 *                     need): restrict_self, then close the ruleset.
 *
 * What each ABI adds, and so what a box gets on an older kernel:
 *   1  files: execute, read, write, list, make and remove; a rename or link
 *      across directories is always refused (EXDEV) on ABI 1
 *   2  REFER: such renames and links, allowed in /box and /tmp
 *   3  TRUNCATE: truncate(2), ftruncate(2), O_TRUNC
 *   4  TCP bind and connect: not handled (the network namespace is the
 *      wall; a refusal here would give EACCES for an unreachable address
 *      and forbid the box its own loopback)
 *   5  IOCTL_DEV: ioctl on device files, allowed on the /dev nodes only
 *   6  scopes: abstract Unix sockets and signals only within the box's
 *      own Landlock domain (its program and what it starts)
 * A kernel without Landlock runs boxes without this wall; the backend logs
 * it once and the walls string (box_walls) leaves "landlock" out.
 *
 * /proc cannot be ruled per process path (/proc/self is a different
 * directory for each process), so it is one rule: read and list.
 */
#include "landlock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define FS_ABI1                                                                                                                    \
    (LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR |     \
     LANDLOCK_ACCESS_FS_REMOVE_DIR | LANDLOCK_ACCESS_FS_REMOVE_FILE | LANDLOCK_ACCESS_FS_MAKE_CHAR | LANDLOCK_ACCESS_FS_MAKE_DIR | \
     LANDLOCK_ACCESS_FS_MAKE_REG | LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_MAKE_FIFO | LANDLOCK_ACCESS_FS_MAKE_BLOCK |   \
     LANDLOCK_ACCESS_FS_MAKE_SYM)

/* What a rule on a file (not a directory) may hold. */
#define FILE_RIGHTS                                                                                                                \
    (LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_TRUNCATE |     \
     LANDLOCK_ACCESS_FS_IOCTL_DEV)

/* Access sets the rules use. */
#define RUNTIME (LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR)
#define READ    (LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR)
#define DEVICES (READ | LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_TRUNCATE | LANDLOCK_ACCESS_FS_IOCTL_DEV)
#define SCRATCH                                                                                                                    \
    ((FS_ABI1 & ~(LANDLOCK_ACCESS_FS_MAKE_CHAR | LANDLOCK_ACCESS_FS_MAKE_BLOCK)) | LANDLOCK_ACCESS_FS_REFER |                      \
     LANDLOCK_ACCESS_FS_TRUNCATE)

/* The box's fixed rules, besides one RUNTIME rule per runtime path of the
 * job's language (its manifest's "runtime" list). */
static const struct {
    const char *path;
    uint64_t access;
} fixed_rules[] = {
    /* listing only, of every directory (a rule holds for all below it):
     * the box's layout is no secret (S24 walks it), reading is */
    {"/", LANDLOCK_ACCESS_FS_READ_DIR},
    /* the job's files and its programs' output: everything but device nodes
     * (compiled programs run from here) */
    {"/box", SCRATCH},
    /* scratch space (compilers' temporary files, the JVM's perf data, a
     * Go build's binary): as /box */
    {"/tmp", SCRATCH},
    /* null, zero, random, urandom: read, write, their ioctls; the
     * directory is read-only and nodev anyway */
    {"/dev", DEVICES},
    /* the box's own /proc: read and list only; no write to /proc/self/mem,
     * attr, oom_score_adj, comm of another thread */
    {"/proc", READ},
    /* the accounts init writes (getpwuid, whoami); not the rest of /etc,
     * which holds only the runtime binds (ruled by their own path) */
    {"/etc/passwd", LANDLOCK_ACCESS_FS_READ_FILE},
    {"/etc/group", LANDLOCK_ACCESS_FS_READ_FILE},
};

/* The ABI 6 attribute; older kernels take a prefix (size by ABI). */
struct ruleset_attr {
    uint64_t handled_access_fs;
    uint64_t handled_access_net;
    uint64_t scoped;
};

struct path_beneath {
    uint64_t allowed_access;
    int32_t parent_fd;
} __attribute__((packed));

static int kernel_abi = 0; /* set once by landlock_setup, before any thread */

static uint64_t handled_fs(int abi)
{
    uint64_t fs = FS_ABI1;
    if (abi >= 2)
        fs |= LANDLOCK_ACCESS_FS_REFER;
    if (abi >= 3)
        fs |= LANDLOCK_ACCESS_FS_TRUNCATE;
    if (abi >= 5)
        fs |= LANDLOCK_ACCESS_FS_IOCTL_DEV;
    return fs;
}

int landlock_setup(int enabled, char *why, size_t whylen)
{
    kernel_abi = 0;
    if (!enabled) {
        snprintf(why, whylen, "switched off by --no-landlock");
        return 0;
    }
    long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
    if (abi < 1) {
        snprintf(why, whylen, "%s",
                 errno == ENOSYS       ? "this kernel has no Landlock"
                 : errno == EOPNOTSUPP ? "Landlock is not enabled at boot (lsm=)"
                                       : strerror(errno));
        return 0;
    }
    kernel_abi = (int)abi;
    return kernel_abi;
}

int landlock_abi(void)
{
    return kernel_abi;
}

/* One path's rule; a path the box lacks (a runtime dir this host has not)
 * has nothing to allow.  A file (a runtime path may name one) takes only
 * the rights that apply to files. */
static int add_path(int rfd, const char *path, uint64_t access)
{
    struct path_beneath pb;
    struct stat st;
    int fd = open(path, O_PATH | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : -1;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return -1;
    }
    if (!S_ISDIR(st.st_mode))
        access &= FILE_RIGHTS;
    pb.allowed_access = access;
    pb.parent_fd = fd;
    long rc = syscall(SYS_landlock_add_rule, rfd, LANDLOCK_RULE_PATH_BENEATH, &pb, 0);
    int saved = errno;
    close(fd);
    errno = saved;
    return rc == 0 ? 0 : -1;
}

int landlock_build(int abi, char *const *ro, uint32_t nro, const char **what)
{
    struct ruleset_attr attr;
    uint64_t fs = handled_fs(abi);

    memset(&attr, 0, sizeof(attr));
    attr.handled_access_fs = fs;
    if (abi >= 6) /* abstract sockets and signals stay within the box's domain */
        attr.scoped = LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | LANDLOCK_SCOPE_SIGNAL;
    size_t size = abi >= 6 ? sizeof(attr) : abi >= 4 ? 2 * sizeof(uint64_t) : sizeof(uint64_t);
    int rfd = (int)syscall(SYS_landlock_create_ruleset, &attr, size, 0);
    if (rfd < 0) {
        *what = "landlock_create_ruleset";
        return -1;
    }
    /* the language's runtime (its manifest's "runtime" paths): read and execute */
    for (uint32_t i = 0; i < nro; i++)
        if (add_path(rfd, ro[i], RUNTIME & fs) != 0) {
            *what = "landlock rule for a runtime path";
            goto fail;
        }
    for (size_t i = 0; i < sizeof(fixed_rules) / sizeof(fixed_rules[0]); i++)
        if (add_path(rfd, fixed_rules[i].path, fixed_rules[i].access & fs) != 0) {
            *what = "landlock rule";
            goto fail;
        }
    return rfd;
fail:;
    int saved = errno;
    close(rfd);
    errno = saved;
    return -1;
}

int landlock_enforce(int ruleset_fd)
{
    long rc = syscall(SYS_landlock_restrict_self, ruleset_fd, 0);
    int saved = errno;
    close(ruleset_fd);
    errno = saved;
    return rc == 0 ? 0 : -1;
}
