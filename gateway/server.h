/*
 * server.h - listeners, worker threads and their h2o event loops.
 */
#ifndef GW_SERVER_H
#define GW_SERVER_H

#include <pthread.h>
#include <stddef.h>

#include <openssl/ssl.h>

#ifndef H2O_USE_LIBUV
#define H2O_USE_LIBUV 0
#endif
#include <h2o.h>

#include "config.h"
#include "ratelimit.h"

struct gw_server;

/*
 * One worker thread: its own evloop, listener (SO_REUSEPORT) and timers.
 * ctx comes first so a handler gets from req->conn->ctx to its worker.
 */
struct gw_worker {
    h2o_context_t ctx;
    h2o_accept_ctx_t accept_ctx;
    h2o_timeout_t backend_timeout; /* backend.timeout_ms, on this loop */
    struct gw_server *server;
    const struct gw_config *cfg;
    h2o_socket_t *listener;
    int listen_fd;
    size_t inflight; /* requests not yet disposed; touched by this thread only */
    unsigned index;
    pthread_t tid;
};

struct gw_server {
    const struct gw_config *cfg;
    h2o_globalconf_t h2o;
    SSL_CTX *ssl_ctx;
    struct rl_limiter *limiter; /* per-tenant rate, concurrency and CPU budget; shared by every worker */
    struct gw_worker *workers;
    unsigned nworkers;
    pthread_barrier_t drained; /* workers + main thread, after draining */
};

/* The worker that owns a request's connection. */
static inline struct gw_worker *gw_worker_of(h2o_context_t *ctx)
{
    return (struct gw_worker *)ctx;
}

/* Build the h2o configuration (routes, limits).  0 or -1. */
int gw_server_init(struct gw_server *srv, const struct gw_config *cfg, SSL_CTX *ssl_ctx);

/* Bind one listening socket per worker (call before dropping privileges).  0 or -1, err set. */
int gw_server_listen(struct gw_server *srv, char *err, size_t errlen);

/*
 * Start the workers and wait for SIGTERM or SIGINT; then stop accepting,
 * let requests in flight finish (bounded by GW_DRAIN_MS) and return 0.  The
 * workers stay parked: the caller must exit the process.
 */
int gw_server_run(struct gw_server *srv);

#endif /* GW_SERVER_H */
