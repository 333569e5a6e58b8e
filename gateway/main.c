/*
 * moat-gateway - the unprivileged, internet-facing half of moat.
 *
 * Theory of operation
 * -------------------
 * Start-up runs once, in the main thread, as a straight sequence:
 *
 *   parse and check the configuration
 *   -> build the TLS context (reads the private key, so still privileged)
 *   -> try what a SIGHUP reload will do (check_reload: a child process
 *      drops to the configured user, confines itself, and loads the
 *      configuration and the TLS context again; -n fails if that fails,
 *      a start only warns), then -n stops here: "configuration OK"
 *   -> bind one listening socket per worker (SO_REUSEPORT), and the
 *      metrics listener when the configuration has one (metrics.c)
 *   -> with the audit trail: the control socket (control.c) and the
 *      supervisor (privsep.c), which keeps root for the audit writer and
 *      moatctl while this process goes on
 *   -> drop to the configured user (fatal on any failure)
 *   -> confine every thread to the gateway's system calls (confine.c:
 *      no_new_privs and a seccomp allow-list; fatal on any failure)
 *   -> start the worker threads and wait for SIGTERM/SIGINT.
 *
 * Each worker thread owns one h2o event loop, its listener, and its timers;
 * nothing on a loop ever blocks.  A request is driven by pipeline.c through
 * moat-gateway(8)'s numbered steps (caps, framing, route, authenticate,
 * authorize, admit, prepare, decision record, backend, result record,
 * respond); routes.c is the table of routes, and each route's handler only
 * translates the validated request into a typed moat_proto frame (never
 * forwarding client bytes as they came) and the reply into a body.
 * backend_client.c talks to moat-backend's Unix socket on the same loop.
 *
 * Every piece of per-request state lives in the request's memory pool, so
 * a client that disappears mid-call frees the call too: its dispose
 * callback closes the backend socket and stops the timer before anything
 * could call back into a freed request.
 *
 * Each worker's watchdog (conn.c) closes connections that are idle or send
 * their request too slowly, and HTTP/2 connections that cancel too many
 * streams (rapid reset).
 *
 * On SIGTERM/SIGINT the workers close their listeners, wait (bounded) for
 * requests in flight, and the process exits 0.
 *
 * Memory.  glibc's malloc serves a block of 128 KiB or more with its own
 * mmap and gives it back on free, but after the first such free it raises
 * that threshold to the freed size, so an output's temporaries (the
 * result's text, a packet, a response body) come from the heap afterwards
 * and their pages stay with the process once freed, behind whatever was
 * kept (bench_scale: a stored 1 MiB submission held 2.3 MiB of RSS, a
 * finished 4 MiB session 4.5 MiB).  The threshold is fixed at start
 * (pin_large_allocations), which keeps the kept memory near what is kept.
 */
#include "config/config.h"
#include "process/confine.h"
#include "apis/judge0/judge0_callback.h"
#include "admin/control.h"
#include "auth/keyuse.h"
#include "store/judge0_store.h"
#include "store/redis_beat.h"
#include "sessions/session_registry.h"
#include "store/queue_redis.h"
#include "process/privsep.h"
#include "log.h"
#include "moat_errf.h"
#include "common/metrics.h"
#include "apis/judge0/judge0_dispatch.h"
#include "moat_notify.h"
#include "common/privdrop.h"
#include "route_table.h"
#include "server.h"
#include "core/tls.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <malloc.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Static so everything the workers use stays reachable until exit. */
static struct gw_server server;

static void usage(FILE *fp)
{
    fprintf(fp, "usage: moat-gateway -c CONFIG [-n] [-d]\n"
                "  -c, --config CONFIG  configuration file (YAML)\n"
                "  -n, --check          check the configuration and exit\n"
                "  -d, --debug          verbose logging\n"
                "  -h, --help           this text\n"
                "environment: MOAT_PORT overrides listen.port\n"
                "signals: SIGHUP reloads CONFIG, SIGTERM/SIGINT stop gracefully\n"
                "see moat-gateway(8) and gateway.conf(5)\n");
}

/* The configuration's path as a reload will open it: after the drop the working directory is "/". */
static const char *absolute_path(const char *path)
{
    static char abs[PATH_MAX];
    char cwd[PATH_MAX];

    if (path[0] == '/')
        return path;
    if (getcwd(cwd, sizeof(cwd)) == NULL || (size_t)snprintf(abs, sizeof(abs), "%s/%s", cwd, path) >= sizeof(abs))
        fatal("%s: %s: cannot make the path absolute", __func__, path);
    return abs;
}

/* -n reports plainly, like the configuration's own errors; a start logs a warning. */
__attribute__((format(printf, 2, 3))) static void report(int check_only, const char *fmt, ...)
{
    char msg[MOAT_LOG_LINE_MAX];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (check_only)
        fprintf(stderr, "%s\n", msg);
    else
        log_warnx("%s", msg);
}

/* What check_reload's child found: its exit status. */
enum reload_check {
    RELOAD_OK,        /* configuration and TLS context load as the user */
    RELOAD_FAILS,     /* the configuration does not: a reload would fail */
    RELOAD_KEEPS_TLS, /* the certificate or key does not: a reload keeps the running ones */
    RELOAD_UNTRIED,   /* the drop or the confinement failed */
};

/* In the child: become what the gateway is after the drop, then do what gw_server_reload() does. */
static enum reload_check reload_child(const char *path, const char *user, int tcp_client, int check_only)
{
    struct gw_config cfg;
    SSL_CTX *ssl_ctx;
    char err[1024];

    if (gw_drop_privileges(user, err, sizeof(err)) != 0 || gw_confine(tcp_client, err, sizeof(err)) != 0) {
        report(check_only, "%s: cannot try a reload as user %s: %s", path, user, err);
        return RELOAD_UNTRIED;
    }
    if (gw_config_load(path, &cfg, err, sizeof(err)) != 0) {
        report(check_only,
               "%s; a SIGHUP reload would fail: after the privilege drop the gateway reads the configuration and its "
               "key files as user %s (make them readable by it, e.g. owner root, its group, mode 0640, in directories "
               "it may search)",
               err, user);
        return RELOAD_FAILS;
    }
    if (cfg.submissions.store_dir != NULL && judge0_store_check_dir(cfg.submissions.store_dir, err, sizeof(err)) != 0) {
        report(check_only, "%s: submissions.store_dir as user %s: %s", path, user, err);
        gw_config_free(&cfg);
        return RELOAD_FAILS;
    }
    if ((ssl_ctx = gw_tls_create(&cfg, err, sizeof(err))) == NULL) {
        report(check_only, "%s: a SIGHUP reload would keep the running certificate and key (as user %s: %s)", path, user, err);
        gw_config_free(&cfg);
        return RELOAD_KEEPS_TLS;
    }
    SSL_CTX_free(ssl_ctx);
    gw_config_free(&cfg);
    return RELOAD_OK;
}

/*
 * Tried once, as root, before anything starts: -n must not say OK about a
 * configuration that SIGHUP cannot load (a key revoked in the file would
 * stay valid).  The child is forked before any thread exists.
 */
static enum reload_check check_reload(const char *path, const char *user, int tcp_client, int check_only)
{
    pid_t pid;
    int st;

    fflush(NULL);
    if ((pid = fork()) == -1) {
        report(check_only, "%s: cannot try a reload: fork: %s", path, strerror(errno));
        return RELOAD_UNTRIED;
    }
    if (pid == 0) {
        enum reload_check rc = reload_child(path, user, tcp_client, check_only);
        fflush(NULL);
        _exit((int)rc);
    }
    while (waitpid(pid, &st, 0) == -1)
        if (errno != EINTR)
            return RELOAD_UNTRIED;
    if (WIFEXITED(st) && WEXITSTATUS(st) <= RELOAD_UNTRIED)
        return (enum reload_check)WEXITSTATUS(st);
    report(check_only, "%s: the reload check as user %s ended by signal %d", path, user, WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    return RELOAD_UNTRIED;
}

/*
 * submissions.queue redis: the shared queue on the server's Redis client,
 * this process its consumer under its client's name, alive while its
 * heartbeat key is (before the workers run, so the scripts are loaded on
 * every connection).
 */
static int start_queue(struct gw_server *srv, const struct gw_config *cfg, char *err, size_t errlen)
{
    /* durability replicated: WAIT for one replica, for half of a command's timeout (the rest is the client's) */
    struct qr_options o = {NULL,
                           NULL,
                           cfg->limiter.lease_ms,
                           (unsigned)cfg->submissions.max_attempts,
                           cfg->submissions.replicated ? 1u : 0u,
                           cfg->limiter.timeout_ms / 2 > 0 ? cfg->limiter.timeout_ms / 2 : 1};

    if (!cfg->submissions.queue_redis)
        return 0;
    if (srv->redis == NULL) {
        snprintf(err, errlen, "queue redis: no Redis client");
        return -1;
    }
    o.consumer = redis_client_id(srv->redis);
    o.heartbeat_prefix = redis_client_beat_prefix(srv->redis);
    if ((srv->queue = queue_redis_new(srv->redis, &o, err, errlen)) == NULL)
        return -1;
    return gw_metrics_add_collector(gw_dispatch_metrics) == 0 ? 0 : moat_errf(err, errlen, "metrics: too many collectors");
}

/*
 * With limiter.store redis, the state other gateways share besides the
 * limits (Judge0 results when submissions.store is redis, the queue,
 * session counts) is held in this process's name, alive while its
 * heartbeat beats (redis_beat.c): started last, once every user of the
 * client registered its scripts.
 */
static int start_shared(struct gw_server *srv, char *err, size_t errlen)
{
    if (srv->redis == NULL)
        return 0;
    gw_sessions_share(srv->redis);
    return redis_beat_start(srv->redis, err, errlen);
}

/*
 * Judge0 results' store, opened as the gateway's user (the directory must
 * be its own): the submissions section's store, memory by default.  Read
 * at start only: a reload keeps the running store.
 */
static int start_store(struct gw_server *srv, const struct gw_submissions_config *c, char *err, size_t errlen)
{
    const struct judge0_store_limits lim = {c->max_records, c->max_per_tenant, c->max_bytes, c->ttl_s * 1000u};
    struct judge0_store *s;

    switch (c->store) {
    case GW_SUBMISSIONS_DIR:
        s = judge0_store_open_dir(c->store_dir, &lim, err, errlen);
        break;
    case GW_SUBMISSIONS_REDIS:
        if (srv->redis == NULL) {
            snprintf(err, errlen, "submissions store redis: no Redis client");
            return -1;
        }
        s = judge0_store_open_redis(srv->redis, &lim, err, errlen);
        break;
    default:
        if ((s = judge0_store_new(&lim)) == NULL)
            snprintf(err, errlen, "out of memory");
        break;
    }
    if (s == NULL)
        return -1;
    if (c->queue_redis)
        judge0_store_owned_by_queue(s);
    judge0_store_set_default(s);
    return 0;
}

/* Blocks of GW_MMAP_THRESHOLD bytes or more are mmap'ed and unmapped on
 * free, always: setting the threshold turns its growth off (see the theory
 * above).  Small blocks, a request's usual, are not affected. */
#define GW_MMAP_THRESHOLD (128 * 1024)

static void pin_large_allocations(void)
{
    if (mallopt(M_MMAP_THRESHOLD, GW_MMAP_THRESHOLD) != 1)
        log_warnx("%s: mallopt(M_MMAP_THRESHOLD) failed: freed large blocks may stay in the heap", __func__);
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {{"config", required_argument, NULL, 'c'},
                                             {"check", no_argument, NULL, 'n'},
                                             {"debug", no_argument, NULL, 'd'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    const char *path = NULL;
    int ch, check_only = 0, debug = 0;
    char err[1024];
    struct gw_config config;
    SSL_CTX *ssl_ctx;

    while ((ch = getopt_long(argc, argv, "c:ndh", longopts, NULL)) != -1) {
        switch (ch) {
        case 'c':
            path = optarg;
            break;
        case 'n':
            check_only = 1;
            break;
        case 'd':
            debug = 1;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 1;
        }
    }
    if (path == NULL || optind != argc) {
        usage(stderr);
        return 1;
    }
    log_init("moat-gateway", debug);
    pin_large_allocations();
    signal(SIGPIPE, SIG_IGN);
    path = absolute_path(path);

    if (gw_config_load(path, &config, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    log_set_json(config.log_json);
    if ((ssl_ctx = gw_tls_create(&config, err, sizeof(err))) == NULL) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    if (config.callbacks.enabled && access(config.callbacks.sender, X_OK) != 0) {
        fprintf(stderr, "%s: callbacks.sender %s: %s\n", path, config.callbacks.sender, strerror(errno));
        SSL_CTX_free(ssl_ctx);
        gw_config_free(&config);
        return 1;
    }
    if ((geteuid() == 0 || getuid() == 0) && gw_check_user(config.user, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s: %s\n", path, err);
        return 1;
    }
    if (gw_control_check(&config, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s: %s\n", path, err);
        SSL_CTX_free(ssl_ctx);
        gw_config_free(&config);
        return 1;
    }
    if (config.ntenants == 0 || config.nkeys == 0)
        log_warnx("%s: no API keys configured: every /api/v2/ request will get 401", path);
    if (geteuid() == 0 || getuid() == 0) {
        enum reload_check rc =
            check_reload(path, config.user, config.limiter.host != NULL || config.limiter.nsentinels > 0, check_only);
        if (check_only && (rc == RELOAD_FAILS || rc == RELOAD_UNTRIED)) {
            SSL_CTX_free(ssl_ctx);
            gw_config_free(&config);
            return 1;
        }
    }
    if (check_only) {
        printf("configuration OK\n");
        SSL_CTX_free(ssl_ctx);
        gw_config_free(&config);
        return 0;
    }

    /* systemd's readiness socket, connected while root and before any
     * fork or thread (server.c sends READY=1 once the workers listen) */
    if (moat_notify_open(err, sizeof(err)) != 0)
        fatalx("%s: %s", __func__, err);
    gw_route_table_install(); /* the routes the pipeline finds (route_table.c) */
    /* the server takes over config and ssl_ctx; path is kept for SIGHUP */
    if (gw_server_init(&server, &config, ssl_ctx, path) != 0)
        fatalx("%s: out of memory", __func__);
    if (gw_server_listen(&server, err, sizeof(err)) != 0)
        fatalx("%s: %s", __func__, err);
    if (gw_keyuse_init() != 0)
        fatal("%s: the last-used table", __func__);
    if (server.audit_enabled) {
        /* the supervisor keeps root to restart the writer; the gateway
         * process continues below (privsep.c) */
        static int audit_fds[GW_PRIVSEP_MAX_FDS];
        static struct gw_control control;
        const struct gw_config *cfg = &server.gen->cfg;
        /* the callback sender reads the same file; a reload of the
         * section's settings reaches it, its program and user need a restart */
        const struct gw_sender_spec sender = {cfg->callbacks.sender, path,
                                              cfg->callbacks.user != NULL ? cfg->callbacks.user : cfg->user};
        int callback_fd = -1;
        if (geteuid() != 0)
            fatalx("%s: the audit trail needs moat-gateway to start as root", __func__);
        if (gw_control_open(&control, cfg, path, err, sizeof(err)) != 0)
            fatalx("%s: control: %s", __func__, err);
        if (gw_privsep_start(&cfg->audit, cfg->callbacks.enabled ? &sender : NULL, (int)server.nworkers, audit_fds,
                             &server.audit_ctl, &callback_fd, &control, err, sizeof(err)) != 0)
            fatalx("%s: audit: %s", __func__, err);
        server.audit_fds = audit_fds;
        judge0_callback_init(callback_fd);
    } else {
        log_warnx("%s: no audit section in %s: requests are not audited", __func__, path);
    }
    if (gw_drop_privileges(server.user, err, sizeof(err)) != 0)
        fatalx("%s: privilege drop: %s", __func__, err);
    if (start_store(&server, &server.gen->cfg.submissions, err, sizeof(err)) != 0 ||
        start_queue(&server, &server.gen->cfg, err, sizeof(err)) != 0 || start_shared(&server, err, sizeof(err)) != 0)
        fatalx("%s: submissions: %s", __func__, err);
    if (gw_confine(server.gen->cfg.limiter.host != NULL || server.gen->cfg.limiter.nsentinels > 0, err, sizeof(err)) != 0)
        fatalx("%s: confinement: %s", __func__, err);
    if (geteuid() != 0)
        log_debug("%s: running as uid %u", __func__, (unsigned)geteuid());

    return gw_server_run(&server);
}
