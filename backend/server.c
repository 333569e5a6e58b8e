/*
 * server.c - the backend's Unix socket: peer credentials checked on accept,
 * then framed typed messages, one worker thread per connection.
 *
 * A connection carries batch requests one after another, or one session
 * (SESSION_OPEN: session.c runs it on the connection's thread, and the
 * connection closes after it).  Any malformed frame is answered with an
 * error message and the connection is closed; nothing a peer sends can make
 * the backend exit.  On a stop, server_stop_reading() ends the reading side
 * of every connection: batch jobs in flight still finish and answer, a
 * session sees its gateway gone and kills its box.
 */
#include "server.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "job.h"
#include "log.h"
#include "moat_io.h"
#include "session.h"

struct conn {
    struct server *srv;
    int fd;
    uid_t uid;
    pid_t pid;
    struct conn *next; /* srv->conns */
};

static int send_error(int fd, uint64_t job_id, uint16_t code, const char *message)
{
    struct moat_buf out = {0};
    const char *why;
    int rc = -1;
    if (moat_encode_error(&out, job_id, code, message, &why) == 0)
        rc = moat_send_full(fd, out.data, out.len);
    else
        log_warnx("%s: %s", __func__, why);
    moat_buf_free(&out);
    return rc;
}

static int handle_exec(struct conn *c, const struct moat_frame_header *h, const uint8_t *payload)
{
    struct moat_exec_request req;
    struct moat_exec_result res;
    struct job_error je;
    struct moat_buf out = {0};
    const char *why;
    char msg[MOAT_MAX_MESSAGE_LEN / 2];

    if (moat_decode_exec_request(payload, h->length, &req, &why) != 0) {
        snprintf(msg, sizeof(msg), "malformed exec request: %s", why);
        log_warnx("%s: peer pid %ld: %s", __func__, (long)c->pid, msg);
        send_error(c->fd, h->job_id, MOAT_ERR_BAD_REQUEST, msg);
        return -1; /* close: the peer is confused */
    }
    int rc = job_run(c->srv->b, &req, &res, &je);
    if (rc != 0) {
        log_info("job %llu: %s %s refused: %s", (unsigned long long)h->job_id, req.language, req.version, je.message);
        moat_exec_request_free(&req);
        return send_error(c->fd, h->job_id, je.code, je.message);
    }
    log_info("job %llu: %s %s: run %s", (unsigned long long)h->job_id, res.language, res.version,
             res.run.present ? moat_status_name(res.run.status) : "skipped");
    moat_exec_request_free(&req);
    if (moat_encode_exec_result(&out, h->job_id, &res, &why) != 0) {
        moat_exec_result_free(&res);
        log_warnx("%s: encode result: %s", __func__, why);
        return send_error(c->fd, h->job_id, MOAT_ERR_INTERNAL, "result could not be encoded");
    }
    moat_exec_result_free(&res);
    rc = moat_send_full(c->fd, out.data, out.len);
    moat_buf_free(&out);
    return rc;
}

static int handle_runtimes(struct conn *c, const struct moat_frame_header *h)
{
    struct moat_runtimes rt;
    struct moat_buf out = {0};
    const char *why;
    int rc;

    if (h->length != 0) {
        send_error(c->fd, h->job_id, MOAT_ERR_BAD_REQUEST, "runtimes query carries no payload");
        return -1;
    }
    if (job_runtimes(c->srv->b, &rt) != 0)
        return send_error(c->fd, h->job_id, MOAT_ERR_INTERNAL, "out of memory");
    rc = moat_encode_runtimes(&out, h->job_id, &rt, &why);
    free(rt.items); /* strings are borrowed */
    if (rc != 0) {
        log_warnx("%s: %s", __func__, why);
        return send_error(c->fd, h->job_id, MOAT_ERR_INTERNAL, "runtimes could not be encoded");
    }
    rc = moat_send_full(c->fd, out.data, out.len);
    moat_buf_free(&out);
    return rc;
}

/* The connections being served, so that a stop can end their reading. */
static void conn_remember(struct conn *c)
{
    pthread_mutex_lock(&c->srv->mu);
    c->next = c->srv->conns;
    c->srv->conns = c;
    pthread_mutex_unlock(&c->srv->mu);
}

static void conn_forget(struct conn *c)
{
    pthread_mutex_lock(&c->srv->mu);
    for (struct conn **p = &c->srv->conns; *p != NULL; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            break;
        }
    pthread_mutex_unlock(&c->srv->mu);
}

void server_stop_reading(struct server *srv)
{
    pthread_mutex_lock(&srv->mu);
    for (struct conn *c = srv->conns; c != NULL; c = c->next)
        (void)shutdown(c->fd, SHUT_RD);
    pthread_mutex_unlock(&srv->mu);
}

/*
 * A box's init is cloned from this process (box.c), and clone copies the
 * memory map: with hundreds of sessions open, their threads' stacks (a
 * mapping and a guard each, and the page tables of what they touched) were
 * most of it, copied again when init forks the program, and made every box
 * twice as dear to start.  So each connection thread keeps its whole stack,
 * guard and TLS included, out of every clone (MADV_DONTFORK).  That is sound
 * only because no connection thread ever clones: a child needs the cloning
 * thread's TLS (errno, the stack protector's canary), and the slot pools
 * make every box on their maintenance thread (pool.c), cold session slots
 * included.  A clone from a connection thread would die at once in the
 * child (its box fails to start), never run on.  Best effort: a failure
 * here only costs time.
 */
static void stack_not_inherited(void)
{
    pthread_attr_t a;
    void *addr;
    size_t size, guard = 0;

    if (pthread_getattr_np(pthread_self(), &a) != 0)
        return;
    if (pthread_attr_getstack(&a, &addr, &size) == 0) {
        uintptr_t low = (uintptr_t)addr;
        (void)pthread_attr_getguardsize(&a, &guard);
        if (low < guard || madvise((void *)(low - guard), size + guard, MADV_DONTFORK) != 0)
            (void)madvise(addr, size, MADV_DONTFORK);
    }
    pthread_attr_destroy(&a);
}

static void *conn_main(void *arg)
{
    struct conn *c = arg;
    uint8_t hdr[MOAT_FRAME_HEADER_SIZE];

    stack_not_inherited();

    for (;;) {
        struct moat_frame_header h;
        const char *why;
        /* end of file (between frames or inside a header) or an error */
        if (moat_read_full(c->fd, hdr, sizeof(hdr)) != (ssize_t)sizeof(hdr))
            break;
        if (moat_frame_parse_header(hdr, sizeof(hdr), &h, &why) != 0) {
            log_warnx("%s: peer pid %ld: bad frame: %s", __func__, (long)c->pid, why);
            send_error(c->fd, 0, MOAT_ERR_BAD_REQUEST, why);
            break;
        }
        uint8_t *payload = malloc(h.length ? h.length : 1);
        if (payload == NULL) {
            send_error(c->fd, h.job_id, MOAT_ERR_INTERNAL, "out of memory");
            break;
        }
        if (h.length && moat_read_full(c->fd, payload, h.length) != (ssize_t)h.length) {
            log_warnx("%s: peer pid %ld: truncated frame", __func__, (long)c->pid);
            free(payload);
            break;
        }
        int rc;
        switch (h.type) {
        case MOAT_MSG_EXEC_REQUEST:
            rc = handle_exec(c, &h, payload);
            break;
        case MOAT_MSG_SESSION_OPEN:
            /* a session is the last thing on its connection */
            session_run(c->srv->b, c->fd, &h, payload);
            rc = -1;
            break;
        case MOAT_MSG_RUNTIMES_QUERY:
            rc = handle_runtimes(c, &h);
            break;
        default:
            log_warnx("%s: peer pid %ld: unexpected message type %u", __func__, (long)c->pid, h.type);
            send_error(c->fd, h.job_id, MOAT_ERR_BAD_REQUEST, "unexpected message type");
            rc = -1;
        }
        free(payload);
        if (rc != 0)
            break;
    }
    conn_forget(c);
    close(c->fd);
    __atomic_sub_fetch(&c->srv->active, 1, __ATOMIC_SEQ_CST);
    free(c);
    return NULL;
}

static int peer_allowed(const struct server *srv, uid_t uid)
{
    if (uid == 0)
        return 1;
    for (size_t i = 0; i < srv->nallowed; i++)
        if (srv->allowed[i] == uid)
            return 1;
    return 0;
}

static void accept_one(struct server *srv)
{
    struct ucred cred;
    socklen_t len = sizeof(cred);
    int fd = accept4(srv->listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) {
        if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED)
            log_warn("%s: accept", __func__);
        return;
    }
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || len != sizeof(cred)) {
        log_warn("%s: SO_PEERCRED", __func__);
        close(fd);
        return;
    }
    if (!peer_allowed(srv, cred.uid)) {
        log_warnx("%s: refused peer uid %u pid %ld: not in the allowed list", __func__, (unsigned)cred.uid, (long)cred.pid);
        send_error(fd, 0, MOAT_ERR_BAD_REQUEST, "peer not allowed");
        close(fd);
        return;
    }
    if (__atomic_load_n(&srv->active, __ATOMIC_SEQ_CST) >= MAX_CONNECTIONS) {
        send_error(fd, 0, MOAT_ERR_BUSY, "server busy: too many connections");
        close(fd);
        return;
    }
    /* bounded waits on a stalled peer; a job's own run time is not counted
     * because the socket is idle while the box runs */
    struct timeval tv = {SOCKET_IO_TIMEOUT_MS / 1000, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));

    struct conn *c = calloc(1, sizeof(*c));
    pthread_t tid;
    pthread_attr_t attr;
    if (c == NULL) {
        close(fd);
        return;
    }
    c->srv = srv;
    c->fd = fd;
    c->uid = cred.uid;
    c->pid = cred.pid;
    __atomic_add_fetch(&srv->active, 1, __ATOMIC_SEQ_CST);
    conn_remember(c);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&tid, &attr, conn_main, c) != 0) {
        log_warnx("%s: pthread_create failed", __func__);
        conn_forget(c);
        __atomic_sub_fetch(&srv->active, 1, __ATOMIC_SEQ_CST);
        close(fd);
        free(c);
    }
    pthread_attr_destroy(&attr);
}

int server_listen(struct server *srv, const char *path, gid_t group, struct errbuf *e)
{
    struct sockaddr_un sun;
    struct stat st;

    memset(&sun, 0, sizeof(sun));
    sun.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof(sun.sun_path))
        return errf(e, "socket path too long: %s", path);
    memcpy(sun.sun_path, path, strlen(path) + 1);
    /* only ever remove a stale socket, never another kind of file */
    if (lstat(path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode))
            return errf(e, "%s exists and is not a socket", path);
        if (unlink(path) != 0)
            return errf_errno(e, "unlink stale %s", path);
    }
    pthread_mutex_init(&srv->mu, NULL);
    srv->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (srv->listen_fd < 0)
        return errf_errno(e, "socket");
    mode_t old = umask(0177);
    int rc = bind(srv->listen_fd, (struct sockaddr *)&sun, sizeof(sun));
    umask(old);
    if (rc != 0)
        return errf_errno(e, "bind %s", path);
    if (chown(path, 0, group) != 0 || chmod(path, 0660) != 0)
        return errf_errno(e, "set owner and mode of %s", path);
    if (listen(srv->listen_fd, 128) != 0)
        return errf_errno(e, "listen %s", path);
    return 0;
}

void server_serve(struct server *srv, int sig_fd)
{
    for (;;) {
        struct pollfd pfd[2] = {{srv->listen_fd, POLLIN, 0}, {sig_fd, POLLIN, 0}};
        if (poll(pfd, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            log_warn("%s: poll", __func__);
            return;
        }
        if (pfd[1].revents & POLLIN) {
            struct signalfd_siginfo si;
            if (read(sig_fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
                log_info("received signal %u, shutting down", si.ssi_signo);
                return;
            }
        }
        if (pfd[0].revents & POLLIN)
            accept_one(srv);
    }
}
