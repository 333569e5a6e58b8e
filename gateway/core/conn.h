/*
 * conn.h - per-connection state: limits counted at accept, the clocks that
 * close slow or idle clients and those that do not take their responses,
 * and HTTP/2 stream accounting against rapid reset (CVE-2023-44487), which
 * libh2o 2.2.5 does not defend against.
 */
#ifndef GW_CONN_H
#define GW_CONN_H

#include <stdint.h>

#include "net/proxies.h"
#include "worker.h"

struct gw_conn;

/* The table of connections per client address, shared by every worker.  NULL if out of memory. */
struct gw_conn_table *gw_conn_table_new(void);

/*
 * A socket the worker just accepted: count it against max_connections and
 * max_connections_per_address and attach its state (freed when h2o closes
 * the socket).  Returns 0 and calls on_ready (now, or once a trusted
 * proxy's PROXY v2 header has named the client: proxies.c) to go on with
 * the TLS handshake, or -1 after closing a socket over a limit.
 */
typedef void (*gw_conn_ready_cb)(struct gw_worker *w, h2o_socket_t *sock);
int gw_conn_accept(struct gw_worker *w, h2o_socket_t *sock, gw_conn_ready_cb on_ready);

/* The state of req's connection, or NULL (not one of ours). */
struct gw_conn *gw_conn_of(h2o_req_t *req);

/* The connection became a WebSocket (session_ws.c): from now on only the
 * send clock applies to it. */
void gw_conn_upgraded(struct gw_conn *gc);

/* The client's address as text, taken at accept ("?" if unknown). */
const char *gw_conn_peer(const struct gw_conn *gc);
/* The client's address as text and its per-address key (proxies.h
 * gw_addr_text, gw_addr_key), made once at accept: copied, not formatted. */
void gw_conn_client(const struct gw_conn *gc, char *text, size_t textlen, uint8_t key[16]);
/* The client's address, and whether it is a trusted proxy (whose
 * X-Forwarded-For names the client of each request). */
const struct gw_addr *gw_conn_addr(const struct gw_conn *gc, int *trusted);

/* The key entry this connection last authenticated with, if the token and
 * the config generation's serial (the request's own) are the same as then;
 * else NULL. */
const void *gw_conn_cached_key(struct gw_conn *gc, unsigned serial, const char *token, size_t len);
/* Remembers a successful API key authentication for the connection. */
void gw_conn_cache_key(struct gw_conn *gc, unsigned serial, const char *token, size_t len, const void *key);

/*
 * A request on gc has reached the handlers.  Returns NULL to go on, or the
 * reason to refuse it: the connection is being closed for abuse (for
 * HTTP/2, a connection over its reset budget is closed here, with GOAWAY).
 */
const char *gw_conn_request_start(struct gw_conn *gc, h2o_req_t *req);

/*
 * The request is being freed; completed says whether its whole response was
 * sent.  Never closes anything (h2o may be tearing the connection down).
 */
void gw_conn_request_end(struct gw_conn *gc, int completed);

/* Start the worker's watchdog timer (on the worker's thread, after h2o_context_init). */
void gw_conn_watchdog_start(struct gw_worker *w);

#endif /* GW_CONN_H */
