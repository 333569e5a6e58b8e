/*
 * server.h - the server: listeners, worker threads and their h2o event
 * loops started, SIGHUP's reloads, the drain (server.c); the types a
 * worker and a generation are made of live below it, in worker.h.
 */
#ifndef GW_SERVER_H
#define GW_SERVER_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <openssl/ssl.h>

#ifndef H2O_USE_LIBUV
#define H2O_USE_LIBUV 0
#endif
#include <h2o.h>

#include "core/worker.h"

/*
 * Set up the server around the first configuration: takes over *cfg (left
 * zeroed) and ssl_ctx.  config_path is kept for SIGHUP.  0 or -1.
 */
int gw_server_init(struct gw_server *srv, struct gw_config *cfg, SSL_CTX *ssl_ctx, const char *config_path);

/* Bind one listening socket per worker (call before dropping privileges).  0 or -1, err set. */
int gw_server_listen(struct gw_server *srv, char *err, size_t errlen);

/*
 * Start the workers and wait for signals: SIGHUP reloads the configuration
 * (gw_server_reload); SIGTERM or SIGINT stops accepting, lets requests in
 * flight finish (bounded by GW_DRAIN_MS) and returns 0.  The workers stay
 * parked: the caller must exit the process.
 */
int gw_server_run(struct gw_server *srv);

/*
 * Read the configuration file again, build a new TLS context and publish
 * both as the next generation.  On any error the running generation stays
 * and "reload failed: FILE:LINE: reason" is logged.  0 (err: "generation
 * N") or -1 (err: the reason).
 */
int gw_server_reload(struct gw_server *srv, char *err, size_t errlen);

#endif /* GW_SERVER_H */
