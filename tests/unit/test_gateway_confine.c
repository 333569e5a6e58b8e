/*
 * test_gateway_confine.c - the gateway's seccomp allow-list (confine.c), as
 * the gateway installs it: gw_confine() in a process with a second thread,
 * then a probe on that thread.
 *
 * Each case runs in a forked child, since confinement cannot be undone:
 * the child starts a thread (before gw_confine, so TSYNC must reach it, or
 * after, so it must inherit the filter and clone must still make threads),
 * and the thread makes the probe's calls and ends the process with their
 * verdict.  The parent reads the wait status: SIGSYS for a killed call, an
 * exit code otherwise.  Without the filter every denied probe succeeds (the
 * tests run as root or not) and its test fails.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ptrace.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#ifndef H2O_USE_LIBUV
#define H2O_USE_LIBUV 0
#endif
#include <h2o.h>

#include "process/confine.h"

/* A probe's verdicts, as exit codes of the child. */
#define PROBE_OK       0  /* allowed calls worked, or a denied one said EPERM */
#define PROBE_RETURNED 10 /* a call that should have killed the process came back */
#define PROBE_ALLOWED  11 /* a call that should have been refused worked */
#define PROBE_BROKEN   12 /* an allowed call failed */
#define PROBE_SETUP    13 /* the test itself could not start (confinement failed, ...) */

enum when { THREAD_BEFORE, THREAD_AFTER };

typedef int (*probe_fn)(void);

struct probe {
    probe_fn fn;
    int go[2]; /* the thread waits for the confinement to be in place */
};

static void *probe_thread(void *arg)
{
    struct probe *p = arg;
    char c;

    if (read(p->go[0], &c, 1) != 1)
        _exit(PROBE_SETUP);
    _exit(p->fn()); /* ends the whole process, without exit handlers */
}

static int tcp_client; /* gw_confine's argument in the next child */

/* The wait status of a child that confines itself and runs fn on a second thread. */
static int confined_status(probe_fn fn, enum when when)
{
    int status;
    pid_t pid = fork();

    assert_true(pid >= 0);
    if (pid == 0) {
        struct probe p = {.fn = fn};
        pthread_t t;
        char err[256];
        if (pipe(p.go) != 0)
            _exit(PROBE_SETUP);
        if (when == THREAD_BEFORE && pthread_create(&t, NULL, probe_thread, &p) != 0)
            _exit(PROBE_SETUP);
        if (gw_confine(tcp_client, err, sizeof(err)) != 0) {
            fprintf(stderr, "gw_confine: %s\n", err);
            _exit(PROBE_SETUP);
        }
        if (when == THREAD_AFTER && pthread_create(&t, NULL, probe_thread, &p) != 0)
            _exit(PROBE_SETUP);
        if (write(p.go[1], "g", 1) != 1)
            _exit(PROBE_SETUP);
        pthread_join(t, NULL); /* the thread ends the process */
        _exit(PROBE_SETUP);
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return status;
}

static void assert_killed(int status)
{
    if (WIFEXITED(status))
        fail_msg("the process exited with %d instead of being killed by SIGSYS", WEXITSTATUS(status));
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGSYS);
}

static void assert_exited_ok(int status)
{
    if (WIFSIGNALED(status))
        fail_msg("the process was killed by signal %d", WTERMSIG(status));
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), PROBE_OK);
}

/* ---------------------------------------------------------------- probes */

static int probe_execve(void)
{
    char *const argv[] = {(char *)(uintptr_t) "/bin/true", NULL};
    char *const envp[] = {NULL};

    execve(argv[0], argv, envp); /* /bin/true would exit 0: PROBE_OK, and the test fails */
    return PROBE_RETURNED;
}

static int probe_ptrace(void)
{
    /* harmless unconfined too: a thread group cannot attach to itself (EPERM) */
    ptrace(PTRACE_ATTACH, getpid(), NULL, NULL);
    return PROBE_RETURNED;
}

static int probe_fork(void)
{
    pid_t pid = fork(); /* glibc: clone without CLONE_THREAD */

    if (pid == 0)
        _exit(PROBE_OK);
    return PROBE_RETURNED;
}

/* Not on the list, not hostile: EPERM.  The gateway never makes a
 * directory, and never opens a network socket after the drop. */
static int probe_unlisted(void)
{
    const char *tmp = getenv("TMPDIR");
    char dir[512];
    int fd;

    snprintf(dir, sizeof(dir), "%s/moat-confine-%ld", tmp != NULL ? tmp : "/tmp", (long)getpid());
    if (mkdir(dir, 0700) == 0) {
        rmdir(dir);
        return PROBE_ALLOWED;
    }
    if (errno != EPERM)
        return PROBE_BROKEN;
    if ((fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) >= 0) {
        close(fd);
        return PROBE_ALLOWED;
    }
    return errno == EPERM ? PROBE_OK : PROBE_BROKEN;
}

/* With a TCP Redis configured: inet sockets work, other families are
 * still refused (a raw packet socket, netlink), and an exec still kills. */
static int probe_tcp_client(void)
{
    int fd;

    if ((fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0 || close(fd) != 0)
        return PROBE_BROKEN;
    if ((fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0 && errno != EAFNOSUPPORT)
        return PROBE_BROKEN;
    if (fd >= 0)
        close(fd);
    if ((fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, 0)) >= 0) {
        close(fd);
        return PROBE_ALLOWED;
    }
    if (errno != EPERM)
        return PROBE_BROKEN;
    if ((fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0)) >= 0) {
        close(fd);
        return PROBE_ALLOWED;
    }
    return errno == EPERM ? PROBE_OK : PROBE_BROKEN;
}

static void *nothing(void *arg)
{
    return arg;
}

/* A few of the calls a worker makes all day. */
static int probe_allowed(void)
{
    char buf[16];
    struct timespec ts;
    pthread_t t;
    int fd;

    if ((fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0 || read(fd, buf, sizeof(buf)) != 0 || close(fd) != 0)
        return PROBE_BROKEN;
    if (getrandom(buf, sizeof(buf), 0) != (ssize_t)sizeof(buf) || clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
        return PROBE_BROKEN;
    if ((fd = epoll_create(1)) < 0 || close(fd) != 0) /* h2o 2.2.5's call */
        return PROBE_BROKEN;
    if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)) < 0 || close(fd) != 0)
        return PROBE_BROKEN;
    /* another thread, from a confined thread */
    if (pthread_create(&t, NULL, nothing, NULL) != 0 || pthread_join(t, NULL) != 0)
        return PROBE_BROKEN;
    return PROBE_OK;
}

/*
 * h2o's buffers past a threshold (32 MiB for sockets) move into a file:
 * mkstemp, unlink, posix_fallocate, mmap (lib/common/memory.c).  Here the
 * threshold is 64 KiB and the file goes into a directory of the test's.
 */
static char h2o_tmpdir[512];

static int probe_h2o_large_buffer(void)
{
    static h2o_buffer_mmap_settings_t settings = {.threshold = 64 * 1024};
    static h2o_buffer_prototype_t prototype = {
        .allocator = {.max = 16}, ._initial_buf = {.capacity = 4096}, .mmap_settings = &settings};
    h2o_buffer_t *buf;
    h2o_iovec_t room;

    snprintf(settings.fn_template, sizeof(settings.fn_template), "%s/h2o.b.XXXXXX", h2o_tmpdir);
    h2o_buffer_init(&buf, &prototype);
    room = h2o_buffer_reserve(&buf, 4096);
    if (room.base == NULL)
        return PROBE_BROKEN;
    memset(room.base, 'a', 4096);
    buf->size += 4096;
    room = h2o_buffer_reserve(&buf, 256 * 1024); /* past the threshold: into a file */
    if (room.base == NULL || buf->_fd < 0)
        return PROBE_BROKEN;
    memset(room.base, 'b', 256 * 1024);
    buf->size += 256 * 1024;
    h2o_buffer_dispose(&buf);
    return PROBE_OK;
}

/* ---------------------------------------------------------------- tests */

static void test_execve_is_killed(void **state)
{
    assert_killed(confined_status(probe_execve, THREAD_BEFORE));
    assert_killed(confined_status(probe_execve, THREAD_AFTER));
}

static void test_ptrace_is_killed(void **state)
{
    assert_killed(confined_status(probe_ptrace, THREAD_BEFORE));
}

static void test_fork_is_killed(void **state)
{
    assert_killed(confined_status(probe_fork, THREAD_AFTER));
}

static void test_unlisted_call_gets_eperm(void **state)
{
    assert_exited_ok(confined_status(probe_unlisted, THREAD_BEFORE));
}

static void test_h2o_large_buffer_works(void **state)
{
    const char *tmp = getenv("TMPDIR");
    DIR *d;
    struct dirent *de;
    int status, left = 0;

    snprintf(h2o_tmpdir, sizeof(h2o_tmpdir), "%s/moat-confine-XXXXXX", tmp != NULL ? tmp : "/tmp");
    assert_non_null(mkdtemp(h2o_tmpdir));
    status = confined_status(probe_h2o_large_buffer, THREAD_AFTER);
    /* the file must be gone: a refused unlink would leave one per buffer */
    assert_non_null(d = opendir(h2o_tmpdir));
    while ((de = readdir(d)) != NULL) {
        char path[1024];
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof(path), "%s/%s", h2o_tmpdir, de->d_name);
        unlink(path);
        left++;
    }
    closedir(d);
    rmdir(h2o_tmpdir);
    assert_exited_ok(status);
    assert_int_equal(left, 0);
}

static void test_tcp_client_adds_inet_only(void **state)
{
    tcp_client = 1;
    assert_exited_ok(confined_status(probe_tcp_client, THREAD_BEFORE));
    assert_killed(confined_status(probe_execve, THREAD_AFTER));
    tcp_client = 0;
    assert_exited_ok(confined_status(probe_unlisted, THREAD_AFTER)); /* inet refused again without it */
}

static void test_allowed_calls_work(void **state)
{
    assert_exited_ok(confined_status(probe_allowed, THREAD_BEFORE));
    assert_exited_ok(confined_status(probe_allowed, THREAD_AFTER));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_execve_is_killed),
        cmocka_unit_test(test_ptrace_is_killed),
        cmocka_unit_test(test_fork_is_killed),
        cmocka_unit_test(test_unlisted_call_gets_eperm),
        cmocka_unit_test(test_allowed_calls_work),
        cmocka_unit_test(test_h2o_large_buffer_works),
        cmocka_unit_test(test_tcp_client_adds_inet_only),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
