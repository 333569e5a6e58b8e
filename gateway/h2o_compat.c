/*
 * h2o_compat.c - every read or write of libh2o 2.2.5's private state (see
 * h2o_compat.h).  Checked against Debian 12's libh2o-dev 2.2.5+dfsg2-7;
 * each access says what it relies on.
 */
#include "h2o_compat.h"

#include <string.h>

/* The HTTP/2 connection struct (needs klib's khash.h: from libhts-dev, see CMakeLists.txt). */
#include <h2o/http2.h>
#include <h2o/http2_internal.h>

h2o_iovec_t gw_h1_request_head(h2o_req_t *req)
{
    /* lib/core/http1.c (2.2.5) parses the head in place in sock->input and
     * consumes it only when the response is done (cleanup_connection), so
     * while a handler runs the head is still at the start of the buffer.
     * Checked: the buffer starts with the method h2o parsed, then a space. */
    h2o_socket_t *sock = req->conn->callbacks->get_socket != NULL ? req->conn->callbacks->get_socket(req->conn) : NULL;
    const h2o_iovec_t m = req->input.method;

    if (sock == NULL || sock->input == NULL || sock->input->size <= m.len || memcmp(sock->input->bytes, m.base, m.len) != 0 ||
        sock->input->bytes[m.len] != ' ')
        return h2o_iovec_init(NULL, 0);
    return h2o_iovec_init(sock->input->bytes, sock->input->size);
}

void gw_h2_view(h2o_conn_t *conn, struct gw_h2_view *v)
{
    /* struct st_h2o_http2_conn_t (http2_internal.h, 2.2.5): an HTTP/2
     * request's conn is the connection struct itself (super is its first
     * member); pull_stream_ids.max_open and num_streams.pull are updated by
     * h2o as streams open and close; state >= HALF_CLOSED once a GOAWAY
     * went either way. */
    const h2o_http2_conn_t *h2 = (const h2o_http2_conn_t *)conn;

    v->max_open = h2->pull_stream_ids.max_open;
    v->open = h2->num_streams.pull.open;
    v->half_closed = h2->num_streams.pull.half_closed;
    v->closing = h2->state >= H2O_HTTP2_CONN_STATE_HALF_CLOSED;
}

void gw_h2_goaway(h2o_conn_t *conn, int errnum, const char *why)
{
    /* 2.2.5 has no public call to send GOAWAY with an error code: encode it
     * into the connection's write buffer (_write.buf) and ask for a write,
     * as h2o's own goaway path does (lib/http2/connection.c,
     * enqueue_goaway); setting state HALF_CLOSED makes h2o ignore new
     * HEADERS without decoding them and close the connection once the
     * GOAWAY is written and the requests in flight are done. */
    h2o_http2_conn_t *h2 = (h2o_http2_conn_t *)conn;

    if (h2->state >= H2O_HTTP2_CONN_STATE_HALF_CLOSED)
        return;
    h2o_http2_encode_goaway_frame(&h2->_write.buf, h2->pull_stream_ids.max_open, errnum, h2o_iovec_init(why, strlen(why)));
    h2o_http2_conn_request_write(h2);
    h2->state = H2O_HTTP2_CONN_STATE_HALF_CLOSED;
}

void gw_h2_foreach(h2o_context_t *ctx, void (*fn)(h2o_conn_t *conn, h2o_socket_t *sock, void *arg), void *arg)
{
    /* ctx->http2._conns (h2o.h, 2.2.5): h2o links each HTTP/2 connection
     * there at creation and unlinks it when it frees it, so the list holds
     * only live connections.  fn must not free the connection. */
    h2o_linklist_t *node, *next;

    for (node = ctx->http2._conns.next; node != &ctx->http2._conns; node = next) {
        h2o_http2_conn_t *h2 = H2O_STRUCT_FROM_MEMBER(h2o_http2_conn_t, _conns, node);
        next = node->next;
        fn(&h2->super, h2->sock, arg);
    }
}
