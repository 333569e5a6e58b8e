/*
 * moat-gateway - the unprivileged, internet-facing half of moat.
 *
 * Theory of operation
 * -------------------
 * Start-up runs once, in the main thread, as a straight sequence:
 *
 *   parse and check the configuration (-n stops here: "configuration OK")
 *   -> build the TLS context (reads the private key, so still privileged)
 *   -> bind one listening socket per worker (SO_REUSEPORT)
 *   -> drop to the configured user (fatal on any failure)
 *   -> confine every thread to the gateway's system calls (confine.c:
 *      no_new_privs and a seccomp allow-list; fatal on any failure)
 *   -> start the worker threads and wait for SIGTERM/SIGINT.
 *
 * Each worker thread owns one h2o event loop, its listener, and its timers;
 * nothing on a loop ever blocks.  A request is driven by pipeline.c through
 * the README's numbered steps (caps, framing, route, authenticate,
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
 */
#include "config.h"
#include "confine.h"
#include "privsep.h"
#include "log.h"
#include "privdrop.h"
#include "server.h"
#include "tls.h"

#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
                "signals: SIGHUP reloads CONFIG, SIGTERM/SIGINT stop gracefully\n");
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
    signal(SIGPIPE, SIG_IGN);

    if (gw_config_load(path, &config, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    if ((ssl_ctx = gw_tls_create(&config, err, sizeof(err))) == NULL) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    if ((geteuid() == 0 || getuid() == 0) && gw_check_user(config.user, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s: %s\n", path, err);
        return 1;
    }
    if (config.ntenants == 0 || config.nkeys == 0)
        log_warnx("%s: no API keys configured: every /api/v2/ request will get 401", path);
    if (check_only) {
        printf("configuration OK\n");
        SSL_CTX_free(ssl_ctx);
        gw_config_free(&config);
        return 0;
    }

    /* the server takes over config and ssl_ctx; path is kept for SIGHUP */
    if (gw_server_init(&server, &config, ssl_ctx, path) != 0)
        fatalx("%s: out of memory", __func__);
    if (gw_server_listen(&server, err, sizeof(err)) != 0)
        fatalx("%s: %s", __func__, err);
    if (server.audit_enabled) {
        /* the supervisor keeps root to restart the writer; the gateway
         * process continues below (privsep.c) */
        static int audit_fds[GW_PRIVSEP_MAX_FDS];
        const struct gw_config *cfg = &server.gen->cfg;
        if (geteuid() != 0)
            fatalx("%s: the audit trail needs moat-gateway to start as root", __func__);
        if (gw_privsep_start(&cfg->audit, (int)server.nworkers, audit_fds, &server.audit_ctl, err, sizeof(err)) != 0)
            fatalx("%s: audit: %s", __func__, err);
        server.audit_fds = audit_fds;
    } else {
        log_warnx("%s: no audit section in %s: requests are not audited", __func__, path);
    }
    if (gw_drop_privileges(server.user, err, sizeof(err)) != 0)
        fatalx("%s: privilege drop: %s", __func__, err);
    if (gw_confine(err, sizeof(err)) != 0)
        fatalx("%s: confinement: %s", __func__, err);
    if (geteuid() != 0)
        log_debug("%s: running as uid %u", __func__, (unsigned)geteuid());

    return gw_server_run(&server);
}
