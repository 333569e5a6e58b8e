/*
 * h2o_compat.h - the only door to libh2o 2.2.5's private state.
 *
 * The gateway needs a few things h2o 2.2.5 keeps in internal structs (the
 * HTTP/2 connection's stream counters, its write buffer for a GOAWAY, the
 * worker's list of HTTP/2 connections, the raw HTTP/1 request head, the
 * HTTP/2 frame reader, which the header block guard wraps, and a TLS
 * socket's OpenSSL object).  Every
 * such access is here, each with why and the version it was checked
 * against, so an h2o upgrade is one file to re-check.  Nothing else in the
 * gateway includes h2o/http2_internal.h.
 */
#ifndef GW_H2O_COMPAT_H
#define GW_H2O_COMPAT_H

#include <stdint.h>

#ifndef H2O_USE_LIBUV
#define H2O_USE_LIBUV 0
#endif
#include <h2o.h>

/* What the gateway reads of an HTTP/2 connection. */
struct gw_h2_view {
    uint32_t max_open;    /* the highest stream id the client opened */
    uint32_t open;        /* client streams open now */
    uint32_t half_closed; /* of those, fully received and being answered */
    uint32_t sending;     /* of those, with a response started and not all handed to the socket */
    int closing;          /* h2o sent or received GOAWAY: it will close by itself */
};

/* What one HTTP/2 header block may decode to. */
struct gw_h2_header_limits {
    size_t max_bytes;    /* names + values + 32 per field, as SETTINGS_MAX_HEADER_LIST_SIZE counts */
    unsigned max_fields; /* header fields, pseudo-headers included */
};

/* Asked for the limits of the connection's worker, on that worker's thread. */
typedef void (*gw_h2_limits_fn)(h2o_context_t *ctx, struct gw_h2_header_limits *out);

/*
 * Set up the HTTP/2 header block guard (once, before any worker runs):
 * limits is asked for the limits at each header block.
 */
void gw_h2_guard_init(gw_h2_limits_fn limits);

/*
 * h2o_accept() for a TLS listener, with the header block guard on every
 * HTTP/2 connection before h2o reads its first frame: a header block whose
 * encoded or decoded size, or whose field count, is over the limits ends
 * the connection with GOAWAY(ENHANCE_YOUR_CALM) before h2o decodes it.
 * HTTP/1.1 connections are h2o's own.  ctx->ssl_ctx must be set.
 */
void gw_accept(h2o_accept_ctx_t *ctx, h2o_socket_t *sock);

/* The HTTP/1 request head of req as received (request line to the empty
 * line, maybe more), or {NULL, 0} when h2o no longer holds it. */
h2o_iovec_t gw_h1_request_head(h2o_req_t *req);

/* Fill *v for an HTTP/2 connection (conn must be one: req->version >= 0x200). */
void gw_h2_view(h2o_conn_t *conn, struct gw_h2_view *v);

/* Send GOAWAY(errnum, why) and stop h2o from opening streams on conn;
 * h2o closes it once the requests in flight are done. */
void gw_h2_goaway(h2o_conn_t *conn, int errnum, const char *why);

/* The response body bytes h2o has handed to the socket for the streams
 * open on conn (an HTTP/2 connection): it grows while responses move. */
uint64_t gw_h2_body_bytes_sent(h2o_conn_t *conn);

/* Call fn for every HTTP/2 connection h2o has not freed on ctx's loop. */
void gw_h2_foreach(h2o_context_t *ctx, void (*fn)(h2o_conn_t *conn, h2o_socket_t *sock, void *arg), void *arg);

/* The TLS connection's OpenSSL read and write buffers (about 33 KB) go back
 * to the heap if they hold nothing (SSL_free_buffers; OpenSSL allocates
 * them again for the next record).  Only between requests, on the
 * socket's worker thread.  1 if released (or none held), 0 if not now. */
int gw_tls_release_buffers(h2o_socket_t *sock);

/* Find libh2o's HPACK response encoder, which the gateway's keeps request
 * ids out of the dynamic table around (see h2o_compat.c); before the
 * workers start.  0, or -1 when the library has none. */
int gw_h2_encoder_init(void);

#endif /* GW_H2O_COMPAT_H */
