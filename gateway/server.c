/*
 * server.c - one listener and one h2o evloop per worker thread.
 *
 * Every worker binds its own socket to the same address with SO_REUSEPORT,
 * so the kernel spreads connections and the workers share nothing but the
 * read-only configuration.  The main thread binds all sockets (before the
 * privilege drop), starts the workers and then only waits for signals.
 * On shutdown the workers drain, meet the main thread at a barrier and
 * park; the main thread returns from main() and exit() ends them.
 */
#include "server.h"
#include "gw_limits.h"
#include "log.h"
#include "router.h"

#include <errno.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int gw_stopping; /* set once by the main thread, read by workers */

int gw_server_init(struct gw_server *srv, const struct gw_config *cfg, SSL_CTX *ssl_ctx)
{
    h2o_hostconf_t *hostconf;

    memset(srv, 0, sizeof(*srv));
    srv->cfg = cfg;
    srv->ssl_ctx = ssl_ctx;
    srv->nworkers = cfg->workers;
    h2o_config_init(&srv->h2o);
    /*
     * h2o enforces a hard cap with a bare 413 (HTTP/1) or REFUSED_STREAM
     * (HTTP/2, which clients retry).  Set it above the configured limit so
     * that moderately oversized bodies reach handle_execute and get a JSON
     * 413 with a request id; the hard cap still bounds memory.
     */
    srv->h2o.max_request_entity_size = cfg->max_request_entity_size * GW_ENTITY_HARD_CAP_FACTOR;
    srv->h2o.server_name = h2o_iovec_init(H2O_STRLIT("moat"));
    hostconf = h2o_config_register_host(&srv->h2o, h2o_iovec_init(H2O_STRLIT("default")), 65535);
    gw_router_register(h2o_config_register_path(hostconf, "/", 0));
    if ((srv->workers = calloc(srv->nworkers, sizeof(*srv->workers))) == NULL)
        return -1;
    if ((srv->limiter = rl_memory_new()) == NULL)
        return -1;
    return 0;
}

static int bind_one(const struct addrinfo *ai, char *err, size_t errlen)
{
    int fd, on = 1;

    if ((fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol)) == -1) {
        snprintf(err, errlen, "socket: %s", strerror(errno));
        return -1;
    }
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)) == -1 ||
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &on, sizeof(on)) == -1) {
        snprintf(err, errlen, "setsockopt: %s", strerror(errno));
        close(fd);
        return -1;
    }
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) == -1 || listen(fd, SOMAXCONN) == -1) {
        snprintf(err, errlen, "bind/listen: %s", strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

int gw_server_listen(struct gw_server *srv, char *err, size_t errlen)
{
    struct addrinfo hints, *ai = NULL;
    char port[8];
    unsigned i;
    int rc;

    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE;
    snprintf(port, sizeof(port), "%u", (unsigned)srv->cfg->listen_port);
    if ((rc = getaddrinfo(srv->cfg->listen_address, port, &hints, &ai)) != 0) {
        snprintf(err, errlen, "%s: %s", srv->cfg->listen_address, gai_strerror(rc));
        return -1;
    }
    for (i = 0; i < srv->nworkers; i++) {
        char why[128];
        if ((srv->workers[i].listen_fd = bind_one(ai, why, sizeof(why))) == -1) {
            snprintf(err, errlen, "listen on %s port %s: %s", srv->cfg->listen_address, port, why);
            while (i-- > 0)
                close(srv->workers[i].listen_fd);
            freeaddrinfo(ai);
            return -1;
        }
    }
    freeaddrinfo(ai);
    return 0;
}

static void on_accept(h2o_socket_t *listener, const char *err)
{
    struct gw_worker *w = listener->data;
    h2o_socket_t *sock;

    if (err != NULL)
        return;
    if ((sock = h2o_evloop_socket_accept(listener)) == NULL)
        return;
    h2o_accept(&w->accept_ctx, sock);
}

static int stopping(void)
{
    return __atomic_load_n(&gw_stopping, __ATOMIC_ACQUIRE);
}

static void *worker_main(void *arg)
{
    struct gw_worker *w = arg;
    h2o_evloop_t *loop = h2o_evloop_create();
    uint64_t deadline;

    h2o_context_init(&w->ctx, loop, &w->server->h2o);
    h2o_timeout_init(loop, &w->backend_timeout, w->cfg->backend_timeout_ms);
    w->accept_ctx.ctx = &w->ctx;
    w->accept_ctx.hosts = w->server->h2o.hosts;
    w->accept_ctx.ssl_ctx = w->server->ssl_ctx;
    w->listener = h2o_evloop_socket_create(loop, w->listen_fd, H2O_SOCKET_FLAG_DONT_READ);
    w->listener->data = w;
    h2o_socket_read_start(w->listener, on_accept);
    log_debug("%s: worker %u running", __func__, w->index);

    while (!stopping())
        h2o_evloop_run(loop, GW_LOOP_WAKE_MS);

    /* Stop accepting; give requests in flight a bounded time to finish. */
    h2o_socket_read_stop(w->listener);
    h2o_socket_close(w->listener);
    w->listener = NULL;
    deadline = h2o_now(loop) + GW_DRAIN_MS;
    while (w->inflight > 0 && h2o_now(loop) < deadline)
        h2o_evloop_run(loop, 100);
    if (w->inflight > 0)
        log_warnx("%s: worker %u: %zu requests still in flight at exit", __func__, w->index, w->inflight);

    /*
     * Report done and park instead of returning: h2o keeps per-thread
     * caches that a returning thread would orphan, and exit() reclaims all
     * of it anyway.  (Keeps leak checkers focused on real leaks.)
     */
    pthread_barrier_wait(&w->server->drained);
    for (;;)
        pause();
    return NULL;
}

int gw_server_run(struct gw_server *srv)
{
    sigset_t set;
    unsigned i;
    int sig = 0, rc;

    /* Workers inherit this mask: only the main thread ever sees SIGTERM/SIGINT. */
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    if ((rc = pthread_sigmask(SIG_BLOCK, &set, NULL)) != 0) {
        errno = rc;
        fatal("%s: pthread_sigmask", __func__);
    }
    if ((rc = pthread_barrier_init(&srv->drained, NULL, srv->nworkers + 1)) != 0) {
        errno = rc;
        fatal("%s: pthread_barrier_init", __func__);
    }
    for (i = 0; i < srv->nworkers; i++) {
        struct gw_worker *w = &srv->workers[i];
        w->server = srv;
        w->cfg = srv->cfg;
        w->index = i;
        if ((rc = pthread_create(&w->tid, NULL, worker_main, w)) != 0) {
            errno = rc;
            fatal("%s: pthread_create", __func__);
        }
    }
    log_info("%s: listening on %s port %u with %u workers", __func__, srv->cfg->listen_address, (unsigned)srv->cfg->listen_port,
             srv->nworkers);
    do {
        rc = sigwait(&set, &sig);
    } while (rc == EINTR);
    if (rc != 0) {
        errno = rc;
        fatal("%s: sigwait", __func__);
    }
    log_info("%s: %s received, shutting down", __func__, sig == SIGTERM ? "SIGTERM" : "SIGINT");
    __atomic_store_n(&gw_stopping, 1, __ATOMIC_RELEASE);
    pthread_barrier_wait(&srv->drained);
    log_info("%s: stopped", __func__);
    return 0;
}
