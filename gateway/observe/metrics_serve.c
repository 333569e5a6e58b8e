/*
 * metrics_serve.c - the metrics section's listener: /metrics over plain
 * HTTP/1.1 on worker 0's loop (see metrics.c's theory: "Scraping").  Each
 * scrape asks moat-backend for its load first (backend_client.c), then
 * renders (gw_metrics_render).  Above the counters: metrics.c calls
 * nothing of this file or of the backend link.
 */
#include "metrics_serve.h"
#include "link/backend_client.h"
#include "config/config.h"
#include "log.h"
#include "core/pipeline.h"
#include "core/worker.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---------------------------------------------------------------- the listener */

static int metrics_fd = -1;
static h2o_globalconf_t mconf;
static h2o_accept_ctx_t maccept;
static h2o_socket_t *msock;
static struct gw_server *msrv;

int gw_metrics_listen(const struct gw_config *cfg, char *err, size_t errlen)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV}, *ai;
    char port[8];
    int rc, on = 1;

    if (cfg->metrics.address == NULL)
        return 0;
    snprintf(port, sizeof(port), "%u", (unsigned)cfg->metrics.port);
    if ((rc = getaddrinfo(cfg->metrics.address, port, &hints, &ai)) != 0) {
        snprintf(err, errlen, "metrics listener %s: %s", cfg->metrics.address, gai_strerror(rc));
        return -1;
    }
    metrics_fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (metrics_fd == -1 || setsockopt(metrics_fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)) != 0 ||
        bind(metrics_fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(metrics_fd, 64) != 0) {
        snprintf(err, errlen, "metrics listener on %s port %s: %s", cfg->metrics.address, port, strerror(errno));
        if (metrics_fd != -1)
            close(metrics_fd);
        metrics_fd = -1;
        freeaddrinfo(ai);
        return -1;
    }
    freeaddrinfo(ai);
    log_info("%s: metrics on http://%s%s%s:%s/metrics", __func__, strchr(cfg->metrics.address, ':') ? "[" : "",
             cfg->metrics.address, strchr(cfg->metrics.address, ':') ? "]" : "", port);
    return 0;
}

static void respond(h2o_req_t *req, const struct moat_backend_load *backend);
static void on_backend_load(void *data, enum backend_status status, const struct backend_reply *reply);

/* GET /metrics (after a RUNTIMES query to the backend for its load);
 * anything else is a 404 (405 for another method). */
static int on_metrics_req(h2o_handler_t *self, h2o_req_t *req)
{
    (void)self;
    if (!h2o_memis(req->path_normalized.base, req->path_normalized.len, H2O_STRLIT("/metrics"))) {
        h2o_send_error_generic(req, 404, "Not Found", "not found\n", 0);
        return 0;
    }
    if (!h2o_memis(req->method.base, req->method.len, H2O_STRLIT("GET"))) {
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_ALLOW, NULL, H2O_STRLIT("GET"));
        h2o_send_error_generic(req, 405, "Method Not Allowed", "method not allowed\n", 0);
        return 0;
    }
    struct gw_worker *w = gw_worker_of(req->conn->ctx);
    struct moat_buf frame = {NULL, 0, 0};
    uint64_t job = backend_next_job_id();
    const char *why = NULL;

    if (moat_encode_runtimes_query(&frame, job, &why) != 0) {
        static const struct moat_backend_load none;
        moat_buf_free(&frame);
        respond(req, &none);
        return 0;
    }
    /* the readiness probe's query; its reply (or its failure) answers the scrape */
    backend_call(req, w->ctx.loop, &w->metrics_timeout, w->cfg->backend_socket, &frame, job, on_backend_load, req);
    return 0;
}

/* The scrape's answer, with the backend's load when it answered. */
static void on_backend_load(void *data, enum backend_status status, const struct backend_reply *reply)
{
    struct moat_backend_load none = {0};

    respond(data, status == BACKEND_OK && reply->hdr.type == MOAT_MSG_RUNTIMES ? &reply->u.runtimes.load : &none);
}

static void respond(h2o_req_t *req, const struct moat_backend_load *backend)
{
    char *body;
    size_t len = 0;

    if ((body = gw_metrics_render(msrv, backend, &len)) == NULL) {
        h2o_send_error_generic(req, 500, "Internal Server Error", "out of memory\n", 0);
        return;
    }
    req->res.status = 200;
    req->res.reason = "OK";
    req->res.content_length = len;
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL,
                   H2O_STRLIT("text/plain; version=0.0.4; charset=utf-8"));
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CACHE_CONTROL, NULL, H2O_STRLIT("no-store"));
    h2o_send_inline(req, body, len); /* copies */
    free(body);
}

static void on_metrics_accept(h2o_socket_t *listener, const char *err)
{
    h2o_socket_t *sock;

    if (err != NULL || (sock = h2o_evloop_socket_accept(listener)) == NULL)
        return;
    h2o_accept(&maccept, sock); /* no ssl_ctx: plain HTTP/1.1 */
}

void gw_metrics_serve(struct gw_worker *w)
{
    h2o_hostconf_t *host;
    h2o_handler_t *h;

    if (metrics_fd == -1)
        return;
    msrv = w->server;
    h2o_config_init(&mconf);
    mconf.server_name = h2o_iovec_init(H2O_STRLIT("moat"));
    host = h2o_config_register_host(&mconf, h2o_iovec_init(H2O_STRLIT("default")), 65535);
    h = h2o_create_handler(h2o_config_register_path(host, "/", 0), sizeof(*h));
    h->on_req = on_metrics_req;
    maccept.ctx = &w->ctx;
    maccept.hosts = mconf.hosts;
    msock = h2o_evloop_socket_create(w->ctx.loop, metrics_fd, H2O_SOCKET_FLAG_DONT_READ);
    h2o_socket_read_start(msock, on_metrics_accept);
}

void gw_metrics_stop(struct gw_worker *w)
{
    (void)w;
    if (msock == NULL)
        return;
    h2o_socket_read_stop(msock);
    h2o_socket_close(msock);
    msock = NULL;
}
