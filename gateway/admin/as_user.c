/*
 * as_user.c - what the supervisor asks of the configuration parser, done
 * by a child that is the gateway's user first.
 *
 * Theory of operation
 * -------------------
 * The supervisor keeps root (it starts the audit writer and the callback
 * sender, and changes the admin store for moatctl), but the configuration
 * and the store are files others write: gateway.conf, its key files, the
 * store's candidate.  Reading them means libyaml, jansson and the key
 * parsers running over those bytes, so the supervisor never does that as
 * root.  Each question (moatctl's listing, a change's new document, "does
 * the candidate load?") is a function run in a fork:
 *
 *   1. a pipe; fork
 *   2. the child: the pipe's write end becomes fd 3 and every other
 *      descriptor past stderr is closed (the control socket, the ctl
 *      socketpair, the audit writer's socket, Redis' connections: nothing
 *      of the supervisor's is left to a parser that was taken over), then
 *      no_new_privs, then the drop to the gateway's user and group (every
 *      id, no supplementary groups, root proven gone: common/privdrop.c)
 *   3. the child runs the function and writes one JSON object to the pipe:
 *      {"ok": true, "out": ...} or {"ok": false, "error": "..."}; _exit
 *   4. the supervisor reads it, at most GW_CONTROL_MAX_REPLY bytes, within
 *      GW_CONTROL_RELOAD_MS (a child that takes longer is killed), reaps
 *      the child, and takes the answer only from a child that exited 0
 *      with one object of that shape (duplicate names refused).
 *
 * The gateway reads the same files as the same user at every reload, so
 * nothing here needs more than a reload does.  The supervisor still parses
 * the configuration once as root at start, before the fork that makes it
 * the supervisor (main.c: the listener, the TLS key and the users are
 * root's business there, as in relayd's parent).
 */
#include "as_user.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/gw_limits.h"
#include "common/privdrop.h"
#include "limits/ratelimit.h"
#include "moat_buf.h"
#include "moat_errf.h"
#include "moat_io.h"

#define AS_USER_FD 3 /* the pipe, in the child */

/* Steps 2 and 3, in the child.  Never returns. */
static __attribute__((noreturn)) void child(int wfd, uid_t uid, gid_t gid, gw_as_user_fn fn, void *arg)
{
    char err[1024] = "";
    json_t *out = NULL, *answer;
    char *text;

    if ((wfd != AS_USER_FD && dup2(wfd, AS_USER_FD) != AS_USER_FD) || syscall(SYS_close_range, AS_USER_FD + 1, ~0U, 0) != 0)
        _exit(2);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || gw_drop_to(uid, gid, err, sizeof(err)) != 0) {
        answer = json_pack("{s:b, s:s}", "ok", 0, "error", err[0] != '\0' ? err : "cannot become the gateway's user");
    } else if ((out = fn(arg, err, sizeof(err))) == NULL) {
        answer = json_pack("{s:b, s:s}", "ok", 0, "error", err);
    } else {
        answer = json_pack("{s:b, s:o}", "ok", 1, "out", out);
    }
    if (answer == NULL || (text = json_dumps(answer, JSON_COMPACT)) == NULL)
        _exit(3);
    if (moat_write_full(AS_USER_FD, text, strlen(text), NULL) != 0)
        _exit(4);
    _exit(0);
}

/* Step 4's read: everything until the child closes the pipe, bounded in size and time. */
static int read_answer(int fd, pid_t pid, struct moat_buf *b, char *err, size_t errlen)
{
    uint64_t deadline = rl_monotonic_ms() + GW_CONTROL_RELOAD_MS;

    for (;;) {
        uint64_t now = rl_monotonic_ms();
        struct pollfd p = {fd, POLLIN, 0};
        ssize_t n;

        if (now >= deadline)
            return moat_errf(err, errlen, "the configuration check (pid %d, as the gateway's user) took over %d ms", (int)pid,
                             GW_CONTROL_RELOAD_MS);
        if (poll(&p, 1, (int)(deadline - now)) < 0 && errno != EINTR)
            return moat_errf(err, errlen, "poll: %s", strerror(errno));
        if (p.revents == 0)
            continue;
        if (moat_buf_reserve(b, 65536) != 0)
            return moat_errf(err, errlen, "out of memory");
        if ((n = read(fd, b->data + b->len, 65536)) < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            return moat_errf(err, errlen, "read: %s", strerror(errno));
        }
        if (n == 0)
            return 0;
        b->len += (size_t)n;
        if (b->len > GW_CONTROL_MAX_REPLY)
            return moat_errf(err, errlen, "the configuration check said more than %u bytes", GW_CONTROL_MAX_REPLY);
    }
}

/* Step 4's judgment: one object {"ok": true, "out": X} (X, a new reference) or {"ok": false, "error": S}. */
static json_t *take_answer(const struct moat_buf *b, char *err, size_t errlen)
{
    json_error_t je;
    json_t *a = json_loadb((const char *)b->data, b->len, JSON_REJECT_DUPLICATES, &je), *ok, *out, *why;

    if (a == NULL || !json_is_object(a) || !json_is_boolean(ok = json_object_get(a, "ok"))) {
        json_decref(a);
        return moat_errf(err, errlen, "the configuration check's answer is not what it writes"), NULL;
    }
    if (json_is_true(ok) && json_object_size(a) == 2 && (out = json_object_get(a, "out")) != NULL) {
        json_incref(out);
        json_decref(a);
        return out;
    }
    if (json_is_false(ok) && json_object_size(a) == 2 && json_is_string(why = json_object_get(a, "error")))
        moat_errf(err, errlen, "%s", json_string_value(why));
    else
        moat_errf(err, errlen, "the configuration check's answer is not what it writes");
    json_decref(a);
    return NULL;
}

json_t *gw_as_user(uid_t uid, gid_t gid, gw_as_user_fn fn, void *arg, char *err, size_t errlen)
{
    struct moat_buf b = {0};
    json_t *out = NULL;
    int fds[2], st = 0, rc;
    pid_t pid;

    if (pipe2(fds, O_CLOEXEC) != 0)
        return moat_errf(err, errlen, "pipe: %s", strerror(errno)), NULL;
    if ((pid = fork()) < 0) {
        close(fds[0]);
        close(fds[1]);
        return moat_errf(err, errlen, "fork: %s", strerror(errno)), NULL;
    }
    if (pid == 0) {
        close(fds[0]);
        child(fds[1], uid, gid, fn, arg);
    }
    close(fds[1]);
    rc = read_answer(fds[0], pid, &b, err, errlen);
    close(fds[0]);
    if (rc != 0)
        kill(pid, SIGKILL);
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (rc == 0 && !(WIFEXITED(st) && WEXITSTATUS(st) == 0))
        rc = moat_errf(err, errlen, "the configuration check (as the gateway's user) %s %d",
                       WIFEXITED(st) ? "exited" : "died of signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
    if (rc == 0)
        out = take_answer(&b, err, errlen);
    moat_buf_free(&b);
    return out;
}
