/*
 * server.c - one listener and one h2o evloop per worker thread, and the
 * configuration generations that SIGHUP swaps under them.
 *
 * Every worker binds its own socket to the same address with SO_REUSEPORT,
 * so the kernel spreads connections and the workers share nothing but the
 * current configuration generation, the rate limiter and the per-address
 * connection table.  The main thread binds all sockets (before the
 * privilege drop), starts the workers and then only waits for signals.
 *
 * Reload (SIGHUP, main thread): parse the whole file and build a new TLS
 * context first; on any error keep the running generation.  Otherwise the
 * new generation becomes current under gen_lock.  Each worker notices on its
 * own thread (next request, accept or watchdog tick), takes a reference on
 * the new generation, applies its timeouts and limits to its h2o context and
 * drops its reference on the old one.  Requests hold a reference on the
 * generation they started with, so the old configuration and TLS context
 * are freed only when the last of them ends.  Connections already
 * established keep their TLS session (an SSL holds its own reference on its
 * SSL_CTX); new handshakes use the new certificate.
 *
 * With the audit trail on, the main thread also serves the supervisor's
 * ctl socketpair (privsep.h): new audit writer sockets, and moatctl's
 * reload and status requests, each answered on the same socket (a reload
 * once the new generation is published, so a change is live when moatctl
 * returns).
 *
 * Under systemd (Type=notify, gateway/systemd/moat-gateway.service) the
 * main thread says READY=1 once every worker's listener is on its loop
 * (the workers and the main thread meet at the `started` barrier),
 * RELOADING=1 ... READY=1 around a SIGHUP reload, and STOPPING=1 when a
 * signal stops it (moat_notify.h; with the audit trail this is the
 * supervisor's child, hence the unit's NotifyAccess=all).
 *
 * On shutdown the workers stop the Judge0 submissions queue (nothing
 * waiting starts any more), stop accepting, ask h2o to wind down (GOAWAY on
 * HTTP/2, no more keep-alive on HTTP/1), drain, meet the main thread at a
 * barrier and park; the main thread returns from main() and exit() ends
 * them.
 */
#include "server.h"
#include "admin/control.h"
#include "process/privsep.h"
#include "core/conn.h"
#include "common/gw_limits.h"
#include "core/h2o_compat.h"
#include "apis/judge0/judge0_dispatch.h"
#include "apis/judge0/judge0_queue.h"
#include "log.h"
#include "observe/metrics_serve.h"
#include "moat_io.h"
#include "moat_notify.h"
#include "core/pipeline.h"
#include "core/fallback.h"
#include "limits/ratelimit_redis.h"
#include "core/routes.h"
#include "store/redis_client.h"
#include "store/redis_options.h"
#include "core/tls.h"

#include <jansson.h>

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <sys/signalfd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

static int gw_stopping; /* set once by the main thread, read by workers */

/* ---------------------------------------------------------------- generations */

/* Takes over *cfg (left zeroed) and ssl_ctx.  NULL if out of memory (nothing taken). */
static struct gw_generation *generation_new(struct gw_config *cfg, SSL_CTX *ssl_ctx, unsigned serial)
{
    struct gw_generation *gen = calloc(1, sizeof(*gen));

    if (gen == NULL)
        return NULL;
    gen->cfg = *cfg;
    memset(cfg, 0, sizeof(*cfg));
    gen->ssl_ctx = ssl_ctx;
    gen->refs = 1; /* the server's, while current */
    gen->serial = serial;
    return gen;
}

/* Make gen current (taking over its initial reference) and drop the server's reference on the old one. */
static void generation_publish(struct gw_server *srv, struct gw_generation *gen)
{
    struct gw_generation *old;

    pthread_mutex_lock(&srv->gen_lock);
    old = srv->gen;
    __atomic_store_n(&srv->gen, gen, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&srv->gen_lock);
    if (old != NULL)
        gw_generation_release(old);
}

/* ---------------------------------------------------------------- workers */

/* This worker's h2o configuration: one host, the guard, then the router. */
static void worker_h2o_config(struct gw_worker *w)
{
    h2o_hostconf_t *hostconf;
    h2o_pathconf_t *pathconf;

    h2o_config_init(&w->h2o);
    w->h2o.server_name = h2o_iovec_init(H2O_STRLIT("moat"));
    /* HTTP/2 only through ALPN, where gw_accept puts the header block
     * guard in: h2o would otherwise take "PRI * HTTP/2.0" on an HTTP/1.1
     * connection as HTTP/2 (lib/http1.c) without it */
    w->h2o.http1.upgrade_to_http2 = 0;
    hostconf = h2o_config_register_host(&w->h2o, h2o_iovec_init(H2O_STRLIT("default")), 65535);
    pathconf = h2o_config_register_path(hostconf, "/", 0);
    gw_pipeline_register(pathconf);
    gw_fallback_register(hostconf); /* what h2o answers itself gets an id, a log line and a record */
}

/* The header block limits of the worker's current configuration (h2o_compat.c asks, on the worker's thread). */
static void h2_header_limits(h2o_context_t *ctx, struct gw_h2_header_limits *out)
{
    const struct gw_config *cfg = gw_worker_of(ctx)->cfg;

    out->max_bytes = cfg->http2_max_header_list_bytes;
    out->max_fields = cfg->http2_max_headers;
}

/* The limiter section's store: this process's memory, or a Redis the
 * gateways share, on the gateway's one asynchronous Redis client (the
 * section's connection settings: one place for them; srv->redis, which
 * the shared submissions queue uses too). */
static struct rl_limiter *limiter_new(struct gw_server *srv, const struct gw_limiter_config *c)
{
    struct redis_sentinel_addr sentinels[GW_REDIS_MAX_SENTINELS];
    struct rl_redis_options o = {.on_unavailable = c->local_fallback ? RL_REDIS_LOCAL : RL_REDIS_FAIL_CLOSED,
                                 .gateways = c->gateways};
    struct rl_limiter *l;
    char err[256];

    if (!c->redis)
        return rl_memory_new();
    gw_redis_options(c, "decisions and queued submissions", sentinels, &o.redis);
    if (srv->redis == NULL && (srv->redis = redis_client_new(&o.redis, err, sizeof(err))) == NULL) {
        log_warnx("%s: %s", __func__, err);
        return NULL;
    }
    if ((l = rl_redis_new_on(srv->redis, &o, err, sizeof(err))) == NULL)
        log_warnx("%s: %s", __func__, err);
    return l;
}

/* Each watchdog tick (conn.c): queued submissions start where a run ends or
 * one is queued; this catches a reload that raised max_running while all
 * is quiet. */
static void on_tick(struct gw_worker *w)
{
    judge0_queue_pump(judge0_queue_default(), w, (unsigned)w->cfg->submissions.max_running);
}

int gw_server_init(struct gw_server *srv, struct gw_config *cfg, SSL_CTX *ssl_ctx, const char *config_path)
{
    struct gw_generation *gen;

    memset(srv, 0, sizeof(*srv));
    gw_h2_guard_init(h2_header_limits);
    if (gw_h2_encoder_init() != 0) {
        log_warnx("%s: libh2o has no h2o_hpack_flatten_response", __func__);
        return -1;
    }
    srv->audit_ctl = -1;
    srv->on_tick = on_tick;
    srv->audit_enabled = cfg->audit_enabled;
    srv->config_path = config_path;
    srv->nworkers = cfg->workers;
    srv->listen_port = cfg->listen_port;
    if ((srv->listen_address = strdup(cfg->listen_address)) == NULL || (srv->user = strdup(cfg->user)) == NULL)
        return -1;
    if (pthread_mutex_init(&srv->gen_lock, NULL) != 0)
        return -1;
    if ((srv->workers = calloc(srv->nworkers, sizeof(*srv->workers))) == NULL || gw_metrics_init(srv->nworkers) != 0)
        return -1;
    for (unsigned i = 0; i < srv->nworkers; i++)
        worker_h2o_config(&srv->workers[i]);
    if ((srv->limiter = limiter_new(srv, &cfg->limiter)) == NULL || (srv->conns = gw_conn_table_new()) == NULL)
        return -1;
    if ((gen = generation_new(cfg, ssl_ctx, 1)) == NULL)
        return -1;
    generation_publish(srv, gen);
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

/*
 * The workers share the address through SO_REUSEPORT, which the kernel
 * also grants to any other process of the same user (root, at this point):
 * a second gateway started on the same port would silently take a share of
 * the connections.  So first a socket without SO_REUSEPORT must be able to
 * bind the address: it cannot while anything listens there.
 */
static int address_free(const struct addrinfo *ai, char *err, size_t errlen)
{
    int fd, on = 1, rc = 0;

    if ((fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol)) == -1) {
        snprintf(err, errlen, "socket: %s", strerror(errno));
        return -1;
    }
    /* SO_REUSEADDR: a connection of an earlier run in TIME_WAIT is no owner */
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)) == -1) {
        snprintf(err, errlen, "setsockopt: %s", strerror(errno));
        rc = -1;
    } else if (bind(fd, ai->ai_addr, ai->ai_addrlen) == -1) {
        snprintf(err, errlen, "%s",
                 errno == EADDRINUSE ? "address already in use by another process (another moat-gateway?)" : strerror(errno));
        rc = -1;
    }
    close(fd);
    return rc;
}

int gw_server_listen(struct gw_server *srv, char *err, size_t errlen)
{
    struct addrinfo hints, *ai = NULL;
    char port[8], why[128];
    unsigned i;
    int rc;

    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE;
    snprintf(port, sizeof(port), "%u", (unsigned)srv->listen_port);
    if ((rc = getaddrinfo(srv->listen_address, port, &hints, &ai)) != 0) {
        snprintf(err, errlen, "%s: %s", srv->listen_address, gai_strerror(rc));
        return -1;
    }
    if (address_free(ai, why, sizeof(why)) != 0) {
        snprintf(err, errlen, "listen on %s port %s: %s", srv->listen_address, port, why);
        freeaddrinfo(ai);
        return -1;
    }
    for (i = 0; i < srv->nworkers; i++) {
        if ((srv->workers[i].listen_fd = bind_one(ai, why, sizeof(why))) == -1) {
            snprintf(err, errlen, "listen on %s port %s: %s", srv->listen_address, port, why);
            while (i-- > 0)
                close(srv->workers[i].listen_fd);
            freeaddrinfo(ai);
            return -1;
        }
    }
    freeaddrinfo(ai);
    return gw_metrics_listen(&srv->gen->cfg, err, errlen);
}

/* The connection's client is known (a trusted proxy's PROXY header read): TLS. */
static void on_client_known(struct gw_worker *w, h2o_socket_t *sock)
{
    gw_accept(&w->accept_ctx, sock); /* h2o_accept, with the HTTP/2 header block guard */
}

static void on_accept(h2o_socket_t *listener, const char *err)
{
    struct gw_worker *w = listener->data;
    h2o_socket_t *sock;

    if (err != NULL)
        return;
    if ((sock = h2o_evloop_socket_accept(listener)) == NULL)
        return;
    gw_worker_refresh(w); /* the current certificate and limits */
    (void)gw_conn_accept(w, sock, on_client_known);
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

    gw_metrics_attach(w->index);
    w->gen = gw_generation_current(w->server);
    h2o_context_init(&w->ctx, loop, &w->h2o);
    h2o_timeout_init(loop, &w->backend_timeout, w->gen->cfg.backend_timeout_ms);
    h2o_timeout_init(loop, &w->metrics_timeout, w->gen->cfg.metrics.backend_timeout_ms);
    h2o_timeout_init(loop, &w->group_timeout, w->gen->cfg.backend_timeout_ms + MOAT_MAX_TESTS_WALL_MS);
    h2o_timeout_init(loop, &w->session_tick, GW_SESSION_TICK_MS);
    h2o_timeout_init(loop, &w->watch_tick, GW_WATCH_POLL_MS);
    h2o_linklist_init_anchor(&w->conns);
    gw_worker_apply_generation(w);
    gw_conn_watchdog_start(w);
    gw_audit_init(&w->audit, loop);
    /* enabled whether or not the socket works: without one every audited
     * request is refused (fail closed), never run unaudited */
    w->audit.enabled = w->server->audit_enabled;
    if (w->server->audit_enabled && gw_audit_attach(&w->audit, w->server->audit_fds[w->index]) != 0)
        log_warnx("%s: worker %u: cannot use the audit writer socket: audited requests are refused", __func__, w->index);
    w->accept_ctx.ctx = &w->ctx;
    w->accept_ctx.hosts = w->h2o.hosts;
    w->listener = h2o_evloop_socket_create(loop, w->listen_fd, H2O_SOCKET_FLAG_DONT_READ);
    w->listener->data = w;
    h2o_socket_read_start(w->listener, on_accept);
    if (w->index == 0)
        gw_metrics_serve(w); /* the metrics listener, when configured */
    if (w->index == 0 && w->server->queue != NULL && gw_dispatch_start(w, w->server->queue, gw_judge0_run_claim) != 0)
        log_warnx("%s: out of memory: this gateway runs no submission of the shared queue", __func__);
    log_debug("%s: worker %u running", __func__, w->index);
    pthread_barrier_wait(&w->server->started);

    log_buffer_thread();
    while (!stopping()) {
        h2o_evloop_run(loop, GW_LOOP_WAKE_MS);
        gw_audit_flush(&w->audit);
        log_flush();
        int fd = __atomic_exchange_n(&w->audit_pending_fd, -1, __ATOMIC_ACQ_REL);
        if (fd >= 0) {
            /* the supervisor restarted the audit writer */
            if (gw_audit_attach(&w->audit, fd) != 0)
                close(fd);
            else
                log_info("%s: worker %u: audit writer reconnected", __func__, w->index);
        }
    }

    /* No queued submission starts any more: those waiting stay "In Queue"
     * in the store (a restart shows them as lost), and so do runs still
     * going when the process exits (the drain waits for requests only). */
    judge0_queue_stop(judge0_queue_default());
    /* Stop accepting; ask h2o to wind down; give requests in flight a bounded time to finish. */
    h2o_socket_read_stop(w->listener);
    h2o_socket_close(w->listener);
    w->listener = NULL;
    if (w->index == 0)
        gw_metrics_stop(w);
    h2o_context_request_shutdown(&w->ctx);
    deadline = h2o_now(loop) + GW_DRAIN_MS;
    while (w->inflight > 0 && h2o_now(loop) < deadline)
        h2o_evloop_run(loop, 100), gw_audit_flush(&w->audit), log_flush();
    if (w->inflight > 0)
        log_warnx("%s: worker %u: %zu requests still in flight at exit", __func__, w->index, w->inflight);
    /* denial records held back to go out together go out now, and the
     * summaries of refusals past their address's rate */
    gw_denials_flush(w);
    gw_audit_flush_all(&w->audit);
    while (gw_audit_sending(&w->audit) && h2o_now(loop) < deadline + GW_DRAIN_MS) {
        h2o_evloop_run(loop, 10);
        gw_audit_flush_all(&w->audit); /* what the last requests added */
    }

    /*
     * Report done and park instead of returning: h2o keeps per-thread
     * caches that a returning thread would orphan, and exit() reclaims all
     * of it anyway.  (Keeps leak checkers focused on real leaks.)
     */
    log_flush();
    pthread_barrier_wait(&w->server->drained);
    for (;;)
        pause();
    return NULL;
}

/* ---------------------------------------------------------------- reload */

static int same_string(const char *a, const char *b)
{
    return (a == NULL && b == NULL) || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

/* Settings that only a restart can change: warn, and keep what runs. */
static int keep_fixed_settings(struct gw_server *srv, struct gw_config *cfg, const struct gw_config *running)
{
    const char *path = srv->config_path;
    char *s;

    if (!same_string(cfg->listen_address, srv->listen_address) || cfg->listen_port != srv->listen_port) {
        log_warnx("%s: %s: listen changed; still listening on %s port %u until a restart", __func__, path, srv->listen_address,
                  (unsigned)srv->listen_port);
        if ((s = strdup(srv->listen_address)) == NULL)
            return -1;
        free(cfg->listen_address);
        cfg->listen_address = s;
        cfg->listen_port = srv->listen_port;
    }
    if (!same_string(cfg->user, srv->user)) {
        log_warnx("%s: %s: user changed; still running as %s until a restart", __func__, path, srv->user);
        if ((s = strdup(srv->user)) == NULL)
            return -1;
        free(cfg->user);
        cfg->user = s;
    }
    if (!same_string(cfg->metrics.address, running->metrics.address) || cfg->metrics.port != running->metrics.port ||
        cfg->metrics.allow_non_loopback != running->metrics.allow_non_loopback) {
        uint64_t scrape_wait = cfg->metrics.backend_timeout_ms; /* not the listener's: applied */
        log_warnx("%s: %s: the metrics section changed; the running metrics listener stays until a restart", __func__, path);
        free(cfg->metrics.address);
        cfg->metrics = running->metrics;
        cfg->metrics.backend_timeout_ms = scrape_wait;
        if (running->metrics.address != NULL && (cfg->metrics.address = strdup(running->metrics.address)) == NULL)
            return -1;
    }
    if (cfg->workers != srv->nworkers) {
        log_warnx("%s: %s: workers changed; still %u workers until a restart", __func__, path, srv->nworkers);
        cfg->workers = srv->nworkers;
    }
    return 0;
}

static int same_limiter(const struct gw_limiter_config *a, const struct gw_limiter_config *b)
{
    return a->redis == b->redis && same_string(a->socket, b->socket) && same_string(a->host, b->host) && a->port == b->port &&
           same_string(a->password, b->password) && a->db == b->db && same_string(a->prefix, b->prefix) &&
           a->connect_timeout_ms == b->connect_timeout_ms && a->timeout_ms == b->timeout_ms && a->lease_ms == b->lease_ms &&
           a->local_fallback == b->local_fallback && a->gateways == b->gateways;
}

/*
 * The limiter is made once, at start (its connections, the seccomp rows a
 * TCP Redis needs): a reload that changes the section keeps the running
 * one, and its section stays in the new generation so the next reload
 * compares with what runs.
 */
static void keep_limiter(const char *path, struct gw_config *cfg, struct gw_config *running)
{
    struct gw_limiter_config tmp;

    if (same_limiter(&cfg->limiter, &running->limiter))
        return;
    log_warnx("%s: %s: the limiter section changed; the running limiter (%s) stays until a restart", __func__, path,
              running->limiter.redis ? "redis" : "memory");
    /* the running generation never reads its section again: hand it over */
    tmp = cfg->limiter;
    cfg->limiter = running->limiter;
    running->limiter = tmp;
}

static int same_tls(const struct gw_config *a, const struct gw_config *b)
{
    return same_string(a->tls_certificate, b->tls_certificate) && same_string(a->tls_key, b->tls_key) &&
           same_string(a->tls_client_ca, b->tls_client_ca) && a->tls_require_client_cert == b->tls_require_client_cert;
}

int gw_server_reload(struct gw_server *srv, char *err, size_t errlen)
{
    struct gw_config cfg;
    struct gw_generation *cur, *gen;
    SSL_CTX *ssl_ctx;

    if (gw_config_load(srv->config_path, &cfg, err, errlen) != 0) {
        /* after the privilege drop the file is read as the gateway's user */
        log_warnx("reload failed: %s; keeping the running configuration%s", err,
                  strstr(err, strerror(EACCES)) != NULL ? " (the file must be readable by the gateway's user)" : "");
        return -1;
    }
    cur = gw_generation_current(srv);
    if (keep_fixed_settings(srv, &cfg, &cur->cfg) != 0) {
        snprintf(err, errlen, "%s: out of memory", srv->config_path);
        log_warnx("reload failed: %s; keeping the running configuration", err);
        gw_config_free(&cfg);
        gw_generation_release(cur);
        return -1;
    }
    if ((ssl_ctx = gw_tls_create(&cfg, err, errlen)) == NULL) {
        if (!same_tls(&cfg, &cur->cfg)) {
            log_warnx("reload failed: %s; keeping the running configuration", err);
            gw_config_free(&cfg);
            gw_generation_release(cur);
            return -1;
        }
        /* Same files, unreadable now (the key usually is, after the privilege drop): keep serving the loaded ones. */
        log_warnx("%s: certificate and key not reloaded (%s); the key file must be readable by user %s for that", __func__, err,
                  srv->user);
        SSL_CTX_up_ref(cur->ssl_ctx);
        ssl_ctx = cur->ssl_ctx;
    }
    if ((gen = generation_new(&cfg, ssl_ctx, cur->serial + 1)) == NULL) {
        snprintf(err, errlen, "%s: out of memory", srv->config_path);
        log_warnx("reload failed: %s; keeping the running configuration", err);
        SSL_CTX_free(ssl_ctx);
        gw_config_free(&cfg);
        gw_generation_release(cur);
        return -1;
    }
    keep_limiter(srv->config_path, &gen->cfg, &cur->cfg);
    gw_generation_release(cur);
    if (gen->cfg.ntenants == 0 || gen->cfg.nkeys == 0)
        log_warnx("%s: %s: no API keys configured: every /api/v2/ request will get 401", __func__, srv->config_path);
    generation_publish(srv, gen);
    log_set_json(gen->cfg.log_json);
    log_info("%s: %s: configuration reloaded (generation %u: %zu tenants, %zu keys)", __func__, srv->config_path, gen->serial,
             gen->cfg.ntenants, gen->cfg.nkeys);
    snprintf(err, errlen, "generation %u", gen->serial);
    return 0;
}

/* ---------------------------------------------------------------- the supervisor's ctl socket */

/* The workers whose watchdog ran within GW_WORKER_ALIVE_MS. */
static unsigned workers_alive(const struct gw_server *srv)
{
    struct timeval tv;
    uint64_t now;
    unsigned n = 0;

    gettimeofday(&tv, NULL);
    now = (uint64_t)tv.tv_sec * 1000 + (uint64_t)tv.tv_usec / 1000;
    for (unsigned i = 0; i < srv->nworkers; i++) {
        uint64_t beat = __atomic_load_n(&srv->workers[i].beat_ms, __ATOMIC_RELAXED);
        if (beat != 0 && beat + GW_WORKER_ALIVE_MS >= now)
            n++;
    }
    return n;
}

/* Does the backend's socket accept a connection now?  (A Unix socket's connect does not wait.) */
static const char *backend_reachable(const struct gw_config *cfg, char *buf, size_t buflen)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

    if (strlen(cfg->backend_socket) >= sizeof(sa.sun_path))
        snprintf(buf, buflen, "unreachable: socket path too long");
    else if (fd < 0)
        snprintf(buf, buflen, "unreachable: socket: %s", strerror(errno));
    else if (memcpy(sa.sun_path, cfg->backend_socket, strlen(cfg->backend_socket) + 1),
             connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 && errno != EINPROGRESS && errno != EAGAIN)
        snprintf(buf, buflen, "unreachable: %s: %s", cfg->backend_socket, strerror(errno));
    else
        snprintf(buf, buflen, "ok");
    if (fd >= 0)
        close(fd);
    return buf;
}

/* The shared queue as this gateway's dispatcher sees it (moatctl queue). */
static json_t *queue_status(void)
{
    struct gw_dispatch_state st;
    struct qr_counts c;
    int counted;
    json_t *detail = gw_dispatch_queue_view(&c, &counted), *o;

    gw_dispatch_state(&st);
    o = json_pack("{s:b, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:b}", "dispatching", st.running, "backend_slots", (json_int_t)st.slots,
                  "backend_busy", (json_int_t)st.busy, "running_here", (json_int_t)st.claimed_running, "claims",
                  (json_int_t)st.claims, "reclaims", (json_int_t)st.reclaims, "dead_here", (json_int_t)st.dead, "exhausted_here",
                  (json_int_t)st.exhausted, "redis_down", st.redis_down);
    if (o != NULL && detail != NULL)
        json_object_set(o, "counts", detail);
    json_decref(detail);
    return o;
}

/* GW_CTL_STATUS: the gateway's side of moatctl status, as JSON. */
static int ctl_status(struct gw_server *srv, char *out, size_t outlen)
{
    struct gw_generation *gen = gw_generation_current(srv);
    char backend[512];
    int audit_ok = 1;
    json_t *o;
    char *text;

    for (unsigned i = 0; i < srv->nworkers; i++)
        audit_ok &= __atomic_load_n(&srv->workers[i].audit.sock, __ATOMIC_RELAXED) != NULL;
    o = json_pack("{s:i, s:i, s:i, s:s, s:b, s:I}", "generation", (int)gen->serial, "workers", (int)srv->nworkers, "workers_alive",
                  (int)workers_alive(srv), "backend", backend_reachable(&gen->cfg, backend, sizeof(backend)), "audit_connected",
                  audit_ok, "keys", (json_int_t)gen->cfg.nkeys);
    gw_generation_release(gen);
    if (o != NULL && srv->queue != NULL)
        json_object_set_new(o, "queue", queue_status());
    text = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (text == NULL || strlen(text) >= outlen) {
        free(text);
        snprintf(out, outlen, "out of memory");
        return -1;
    }
    snprintf(out, outlen, "%s", text);
    free(text);
    return 0;
}

/* A request from the supervisor: do it, answer with the same type and seq. */
static void ctl_request(struct gw_server *srv, const struct gw_ctl_msg *m)
{
    char msg[GW_CONTROL_MSG_MAX];
    struct gw_ctl_msg *r = (struct gw_ctl_msg *)(void *)msg;
    char *text = msg + sizeof(*r);
    size_t room = sizeof(msg) - sizeof(*r);

    memset(r, 0, sizeof(*r));
    r->magic = GW_CTL_MAGIC;
    r->type = m->type;
    r->seq = m->seq;
    if (m->type == GW_CTL_RELOAD) {
        log_info("%s: the supervisor asks for a reload of %s (moatctl, or the admin store in Redis)", __func__, srv->config_path);
        r->status = gw_server_reload(srv, text, room);
    } else if (m->type == GW_CTL_STATUS) {
        r->status = ctl_status(srv, text, room);
    } else {
        r->status = -1;
        snprintf(text, room, "unknown request type %u", (unsigned)m->type);
    }
    r->len = (uint32_t)strnlen(text, room - 1);
    if (write(srv->audit_ctl, msg, sizeof(*r) + r->len) < 0)
        log_warn("%s: cannot answer the supervisor", __func__);
}

/*
 * The ctl socket is readable: writer sockets (one byte with descriptors)
 * or a request (struct gw_ctl_msg).  Peek first: moat_recv_fds consumes
 * whatever it is given.
 */
static void ctl_readable(struct gw_server *srv, short revents)
{
    union {
        struct gw_ctl_msg m;
        char bytes[GW_CONTROL_MSG_MAX];
    } buf;
    struct iovec iov = {buf.bytes, sizeof(buf.bytes)};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    ssize_t n = recvmsg(srv->audit_ctl, &mh, MSG_PEEK | MSG_DONTWAIT);

    if (n == 1) {
        int fds[GW_PRIVSEP_MAX_FDS];
        if (moat_recv_fds(srv->audit_ctl, fds, srv->nworkers) == 0) {
            for (unsigned i = 0; i < srv->nworkers; i++) {
                int old = __atomic_exchange_n(&srv->workers[i].audit_pending_fd, fds[i], __ATOMIC_ACQ_REL);
                if (old >= 0)
                    close(old);
            }
        }
        return;
    }
    if (n > 1) {
        n = recvmsg(srv->audit_ctl, &mh, MSG_DONTWAIT);
        if (n == (ssize_t)sizeof(buf.m) && buf.m.magic == GW_CTL_MAGIC && buf.m.len == 0)
            ctl_request(srv, &buf.m);
        else
            log_warnx("%s: a malformed message from the supervisor (%zd bytes): ignored", __func__, n);
        return;
    }
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR) || (revents & POLLHUP)) {
        log_warnx("%s: the supervisor went away", __func__);
        close(srv->audit_ctl);
        srv->audit_ctl = -1;
    }
}

/* ---------------------------------------------------------------- main thread */

int gw_server_run(struct gw_server *srv)
{
    sigset_t set;
    unsigned i;
    int sig = 0, rc;

    /* Workers inherit this mask: only the main thread ever sees SIGTERM/SIGINT/SIGHUP. */
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    if ((rc = pthread_sigmask(SIG_BLOCK, &set, NULL)) != 0) {
        errno = rc;
        fatal("%s: pthread_sigmask", __func__);
    }
    if ((rc = pthread_barrier_init(&srv->started, NULL, srv->nworkers + 1)) != 0 ||
        (rc = pthread_barrier_init(&srv->drained, NULL, srv->nworkers + 1)) != 0) {
        errno = rc;
        fatal("%s: pthread_barrier_init", __func__);
    }
    for (i = 0; i < srv->nworkers; i++) {
        struct gw_worker *w = &srv->workers[i];
        w->server = srv;
        w->index = i;
        w->audit_pending_fd = -1;
        if ((rc = pthread_create(&w->tid, NULL, worker_main, w)) != 0) {
            errno = rc;
            fatal("%s: pthread_create", __func__);
        }
    }
    pthread_barrier_wait(&srv->started);
    log_info("%s: listening on %s port %u with %u workers", __func__, srv->listen_address, (unsigned)srv->listen_port,
             srv->nworkers);
    moat_notify("READY=1");
    int sfd = signalfd(-1, &set, SFD_CLOEXEC);
    if (sfd < 0)
        fatal("%s: signalfd", __func__);
    for (;;) {
        struct pollfd pfd[2] = {{sfd, POLLIN, 0}, {srv->audit_ctl, POLLIN, 0}};
        if (poll(pfd, srv->audit_ctl >= 0 ? 2 : 1, -1) < 0) {
            if (errno == EINTR)
                continue;
            fatal("%s: poll", __func__);
        }
        if (srv->audit_ctl >= 0 && (pfd[1].revents & (POLLIN | POLLHUP)))
            ctl_readable(srv, pfd[1].revents);
        if (!(pfd[0].revents & POLLIN))
            continue;
        struct signalfd_siginfo si;
        if (read(sfd, &si, sizeof(si)) != (ssize_t)sizeof(si))
            continue;
        sig = (int)si.ssi_signo;
        if (sig != SIGHUP)
            break;
        log_info("%s: SIGHUP received, reloading %s", __func__, srv->config_path);
        char err[1024];
        moat_notify_reloading();
        gw_server_reload(srv, err, sizeof(err));
        moat_notify("READY=1"); /* the new generation, or the running one if the reload failed */
    }
    log_info("%s: %s received, shutting down", __func__, sig == SIGTERM ? "SIGTERM" : "SIGINT");
    moat_notify("STOPPING=1");
    __atomic_store_n(&gw_stopping, 1, __ATOMIC_RELEASE);
    pthread_barrier_wait(&srv->drained);
    log_info("%s: stopped", __func__);
    return 0;
}
