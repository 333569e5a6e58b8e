/*
 * h2o_compat.c - every read or write of libh2o 2.2.5's private state (see
 * h2o_compat.h).  Checked against Debian 12's libh2o-dev 2.2.5+dfsg2-7;
 * each access says what it relies on.
 *
 * The header block guard (HPACK CPU amplification)
 * -------------------------------------------------
 * h2o 2.2.5 decodes a request's whole header block before any handler
 * runs (lib/http2/connection.c, handle_incoming_request ->
 * h2o_hpack_parse_headers) and bounds it only by its encoded size
 * (H2O_MAX_REQLEN, 417,792 octets): a 4 KiB literal added to the dynamic
 * table and referenced 16,000 times, 20 KB on the wire, decodes to 64 MB
 * of header values that every later step may read.  h2o does not honour
 * SETTINGS_MAX_HEADER_LIST_SIZE.  So every HTTP/2 connection is accepted
 * here (gw_accept, h2o_accept's TLS path) and its frame reader wrapped
 * before h2o reads its first frame:
 *
 *   1. h2o reads frames one at a time through the connection's
 *      _read_expect pointer, one of three functions static in
 *      connection.c (the preface, any frame, the CONTINUATION of a header
 *      block), and moves it from one to the next.  Each has a guard
 *      (guard_preface, guard_default, guard_continuation) that checks the
 *      frame, calls h2o's function, and puts the guard of whatever h2o
 *      moved to in its place.  h2o's functions are learned as h2o installs
 *      them; a transition to one not seen in that place fails closed (the
 *      connection ends).
 *   2. A HEADERS or CONTINUATION frame is checked whole, before h2o keeps
 *      or decodes it: the block's encoded size so far (h2o's buffer of
 *      earlier fragments, _headers_unparsed, plus this frame) must stay
 *      within max_bytes, an empty CONTINUATION must end the block (else a
 *      stream of them would never reach that bound: the CONTINUATION
 *      flood, so a block takes at most max_bytes frames), and at END_HEADERS hpack_scan.c reads what the
 *      block decodes to against the sizes of h2o's dynamic table as it is
 *      now (all earlier frames are processed): more fields or bytes than
 *      allowed, and the frame reader returns ENHANCE_YOUR_CALM, so h2o's
 *      own error path sends GOAWAY and closes the connection.  No stream
 *      error is possible: a block that is not decoded leaves the peer's
 *      and h2o's dynamic tables apart (RFC 7540 4.3).
 *   3. With the preface, the limit is also advertised
 *      (SETTINGS_MAX_HEADER_LIST_SIZE), so a well-behaved client fails
 *      before sending.
 *
 * The work per header block is then linear in its encoded size, which is
 * bounded, and what reaches the pipeline is bounded by the limits.
 */
#include "h2o_compat.h"
#include "common/gw_limits.h"
#include "hpack_scan.h"
#include "log.h"
#include "common/metrics.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* The HTTP/2 connection struct (needs klib's khash.h: from libhts-dev, see CMakeLists.txt). */
#include <h2o/http1.h>
#include <h2o/http2.h>
#include <h2o/http2_internal.h>

#include <openssl/ssl.h>

#if H2O_VERSION_MAJOR != 2 || H2O_VERSION_MINOR != 2 || H2O_VERSION_PATCH != 5
#error "h2o_compat.c was checked against libh2o 2.2.5's private state: check it against this version"
#endif

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
    /* num_streams.pull.send_body counts the streams in SEND_BODY and
     * SEND_BODY_IS_FINAL (h2o_http2_stream_set_state): a response started
     * whose last DATA frame h2o has not yet written into its buffer. */
    v->sending = h2->num_streams.pull.send_body;
    v->closing = h2->state >= H2O_HTTP2_CONN_STATE_HALF_CLOSED;
}

uint64_t gw_h2_body_bytes_sent(h2o_conn_t *conn)
{
    /* conn->streams (khash, 2.2.5): every stream h2o has not closed; each
     * stream's req.bytes_sent grows as h2o puts its DATA frames into the
     * connection's write buffer (lib/http2/stream.c, send_data). */
    const h2o_http2_conn_t *h2 = (const h2o_http2_conn_t *)conn;
    h2o_http2_stream_t *stream;
    uint64_t sum = 0;

    kh_foreach_value(h2->streams, stream, { sum += stream->req.bytes_sent; });
    return sum;
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

/* ---------------------------------------------------------------- accept */

/* h2o_accept's state during the TLS handshake (lib/core/util.c, struct st_h2o_accept_data_t). */
struct accept_data {
    h2o_accept_ctx_t *ctx;
    h2o_socket_t *sock;
    h2o_timeout_entry_t timeout;
    struct timeval connected_at;
};

static void guard_install(h2o_socket_t *sock);

static void accept_data_free(struct accept_data *data)
{
    h2o_timeout_unlink(&data->timeout);
    free(data);
}

/* The handshake took longer than the context's handshake timeout (h2o's on_accept_timeout). */
static void on_handshake_timeout(h2o_timeout_entry_t *entry)
{
    struct accept_data *data = H2O_STRUCT_FROM_MEMBER(struct accept_data, timeout, entry);
    h2o_socket_t *sock = data->sock;

    accept_data_free(data);
    gw_metric_add(&gw_metrics_here()->tls_failed[GW_TLS_FAIL_TIMEOUT], 1);
    h2o_socket_close(sock);
}

static int alpn_is_h2(h2o_socket_t *sock)
{
    h2o_iovec_t proto = h2o_socket_ssl_get_selected_protocol(sock);

    for (const h2o_iovec_t *id = h2o_http2_alpn_protocols; id->len != 0; id++)
        if (proto.len == id->len && memcmp(proto.base, id->base, proto.len) == 0)
            return 1;
    return 0;
}

/*
 * HTTP/2 with the guard in place before h2o reads a frame.  Like h2o's
 * on_ssl_handshake_complete, except that what arrived with the handshake
 * (sock->input: h2o's socket layer decodes it before calling back) is held
 * back while h2o_http2_accept runs, which would otherwise parse it at once,
 * and handed to h2o's reader (sock->_cb.read, set by h2o_http2_accept's
 * h2o_socket_read_start) once the guard is in.
 */
static void accept_h2(h2o_accept_ctx_t *ctx, h2o_socket_t *sock, struct timeval connected_at)
{
    h2o_buffer_t *early = sock->input;

    h2o_buffer_init(&sock->input, &h2o_socket_buffer_prototype);
    h2o_http2_accept(ctx, sock, connected_at);
    guard_install(sock);
    h2o_buffer_dispose(&sock->input);
    sock->input = early;
    if (sock->input->size != 0 && sock->_cb.read != NULL)
        sock->_cb.read(sock, NULL); /* may close the connection: nothing after this */
}

static void on_handshake_complete(h2o_socket_t *sock, const char *err)
{
    struct accept_data *data = sock->data;
    h2o_accept_ctx_t *ctx = data->ctx;
    struct timeval connected_at = data->connected_at;

    sock->data = NULL;
    accept_data_free(data);
    if (err != NULL) {
        gw_metric_add(&gw_metrics_here()->tls_failed[GW_TLS_FAIL_ERROR], 1);
        h2o_socket_close(sock);
    } else if (alpn_is_h2(sock)) {
        accept_h2(ctx, sock, connected_at);
    } else {
        h2o_http1_accept(ctx, sock, connected_at);
    }
}

void gw_accept(h2o_accept_ctx_t *ctx, h2o_socket_t *sock)
{
    struct accept_data *data = malloc(sizeof(*data));

    if (data == NULL) {
        log_warnx("%s: out of memory", __func__);
        h2o_socket_close(sock);
        return;
    }
    *data = (struct accept_data){.ctx = ctx, .sock = sock, .connected_at = *h2o_get_timestamp(ctx->ctx, NULL, NULL)};
    data->timeout.cb = on_handshake_timeout;
    h2o_timeout_link(ctx->ctx->loop, &ctx->ctx->handshake_timeout, &data->timeout);
    sock->data = data;
    h2o_socket_ssl_handshake(sock, ctx->ssl_ctx, NULL, on_handshake_complete);
}

/* ---------------------------------------------------------------- the header block guard */

typedef ssize_t (*read_expect_fn)(h2o_http2_conn_t *conn, const uint8_t *src, size_t len, const char **err_desc);

/* h2o's frame reader states (lib/http2/connection.c, 2.2.5) and what follows each. */
enum expect { EXPECT_PREFACE, EXPECT_DEFAULT, EXPECT_CONTINUATION, EXPECT_N };
static const enum expect expect_next[EXPECT_N] = {
    [EXPECT_PREFACE] = EXPECT_DEFAULT,      /* expect_preface -> expect_default */
    [EXPECT_DEFAULT] = EXPECT_CONTINUATION, /* handle_headers_frame without END_HEADERS */
    [EXPECT_CONTINUATION] = EXPECT_DEFAULT, /* the block's END_HEADERS */
};

static read_expect_fn h2o_expect[EXPECT_N]; /* h2o's own functions, learned (written with __atomic) */
static gw_h2_limits_fn guard_limits;        /* set once before the workers start */

static ssize_t guard_preface(h2o_http2_conn_t *conn, const uint8_t *src, size_t len, const char **err_desc);
static ssize_t guard_default(h2o_http2_conn_t *conn, const uint8_t *src, size_t len, const char **err_desc);
static ssize_t guard_continuation(h2o_http2_conn_t *conn, const uint8_t *src, size_t len, const char **err_desc);
static const read_expect_fn guards[EXPECT_N] = {guard_preface, guard_default, guard_continuation};

void gw_h2_guard_init(gw_h2_limits_fn limits)
{
    guard_limits = limits;
}

/* h2o's function for state e is fn: learned the first time, then checked.  0 or -1. */
static int learn(enum expect e, read_expect_fn fn)
{
    read_expect_fn known = NULL;

    if (__atomic_compare_exchange_n(&h2o_expect[e], &known, fn, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        return 0;
    return known == fn ? 0 : -1;
}

static void guard_install(h2o_socket_t *sock)
{
    /* h2o_http2_accept sets sock->data to the connection, whose reader
     * starts at expect_preface (create_conn). */
    h2o_http2_conn_t *conn = sock->data;

    if (learn(EXPECT_PREFACE, conn->_read_expect) != 0) {
        log_warnx("%s: unexpected HTTP/2 frame reader: connection refused", __func__);
        shutdown(h2o_socket_get_fd(sock), SHUT_RDWR); /* h2o's next read fails and it closes the connection */
        return;
    }
    conn->_read_expect = guard_preface;
}

/* Call h2o's reader for state e, then guard whatever state h2o moved to. */
static ssize_t call_h2o(enum expect e, h2o_http2_conn_t *conn, const uint8_t *src, size_t len, const char **err_desc)
{
    ssize_t ret = __atomic_load_n(&h2o_expect[e], __ATOMIC_RELAXED)(conn, src, len, err_desc);
    read_expect_fn now = conn->_read_expect;

    if (now == guards[e])
        return ret; /* h2o stays in state e */
    if (learn(expect_next[e], now) != 0) {
        log_warnx("%s: unexpected HTTP/2 frame reader transition: connection closed", __func__);
        *err_desc = "internal error";
        return H2O_HTTP2_ERROR_INTERNAL; /* h2o's error path closes the connection */
    }
    conn->_read_expect = guards[expect_next[e]];
    return ret;
}

static void peer_text(h2o_http2_conn_t *conn, char *buf, size_t len)
{
    struct sockaddr_storage ss;
    socklen_t sl;

    memset(&ss, 0, sizeof(ss));
    snprintf(buf, len, "?");
    sl = h2o_socket_getpeername(conn->sock, (struct sockaddr *)&ss);
    if (ss.ss_family == AF_INET && sl >= sizeof(struct sockaddr_in))
        inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, buf, len);
    else if (ss.ss_family == AF_INET6 && sl >= sizeof(struct sockaddr_in6))
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, buf, len);
}

/* A header block refused: the reader's error for h2o to send GOAWAY with and close. */
static ssize_t refuse(h2o_http2_conn_t *conn, ssize_t error, const char *why, const struct hpack_scan_result *seen)
{
    char peer[INET6_ADDRSTRLEN];

    peer_text(conn, peer, sizeof(peer));
    gw_metric_add(&gw_metrics_here()->goaway[GW_GOAWAY_HEADER_BLOCK], 1);
    if (seen != NULL)
        log_info("connection: closing HTTP/2 connection from %s: %s (%zu fields, %zu bytes read so far)", peer, why, seen->fields,
                 seen->bytes);
    else
        log_info("connection: closing HTTP/2 connection from %s: %s", peer, why);
    return error;
}

/* The sizes of h2o's dynamic table for the next block (lib/http2/hpack.c's
 * header table: entry i, newest first, is h2o_hpack_header_table_get(i)). */
static int seed_table(h2o_http2_conn_t *conn, struct hpack_sizes *t)
{
    h2o_hpack_header_table_t *h = &conn->_input_header_table;

    if (hpack_sizes_reset(t, h->hpack_capacity, h->hpack_max_capacity) != 0)
        return -1;
    for (size_t i = 0; i < h->num_entries; i++) {
        const h2o_hpack_header_table_entry_t *e = h2o_hpack_header_table_get(h, i);
        if (hpack_sizes_add_oldest(t, e->name->len, e->value->len) != 0)
            return -1;
    }
    return t->size == h->hpack_size ? 0 : -1;
}

/*
 * A fragment of a header block: prev (h2o's buffer of the earlier
 * fragments, or NULL) then frag.  0 to let h2o have it, or the reader's
 * error refusing it.
 */
static ssize_t check_fragment(h2o_http2_conn_t *conn, const h2o_buffer_t *prev, const uint8_t *frag, size_t len, int end_headers,
                              const char **err_desc)
{
    struct gw_h2_header_limits lim = {GW_DEFAULT_H2_MAX_HEADER_LIST, GW_DEFAULT_H2_MAX_HEADERS};
    struct hpack_sizes table;
    struct hpack_scan_result seen;
    size_t before = prev != NULL ? prev->size : 0;

    if (guard_limits != NULL)
        guard_limits(conn->super.ctx, &lim);
    if (before + len > lim.max_bytes) {
        *err_desc = "header block too large (max_header_list_bytes)";
        return refuse(conn, H2O_HTTP2_ERROR_ENHANCE_YOUR_CALM, "header block over http2.max_header_list_bytes on the wire", NULL);
    }
    if (!end_headers)
        return 0;
    if (seed_table(conn, &table) != 0) {
        *err_desc = "internal error";
        return refuse(conn, H2O_HTTP2_ERROR_INTERNAL, "cannot follow the HPACK dynamic table", NULL);
    }
    switch (prev != NULL ? hpack_scan(&table, (const uint8_t *)prev->bytes, before, frag, len, lim.max_bytes, lim.max_fields, &seen)
                         : hpack_scan(&table, frag, len, NULL, 0, lim.max_bytes, lim.max_fields, &seen)) {
    case HPACK_OK:
        return 0;
    case HPACK_TOO_MANY_FIELDS:
        *err_desc = "too many header fields (max_headers)";
        return refuse(conn, H2O_HTTP2_ERROR_ENHANCE_YOUR_CALM, "header block over http2.max_headers", &seen);
    case HPACK_TOO_LARGE:
        *err_desc = "header list too large (max_header_list_bytes)";
        return refuse(conn, H2O_HTTP2_ERROR_ENHANCE_YOUR_CALM, "header block over http2.max_header_list_bytes decoded", &seen);
    case HPACK_MALFORMED:
    default:
        *err_desc = "malformed header block";
        return refuse(conn, H2O_HTTP2_ERROR_COMPRESSION, "malformed header block", &seen);
    }
}

/* After h2o sent its SETTINGS for the preface: one more with the header list limit (RFC 7540 6.5.2). */
static void advertise_limit(h2o_http2_conn_t *conn)
{
    struct gw_h2_header_limits lim = {GW_DEFAULT_H2_MAX_HEADER_LIST, GW_DEFAULT_H2_MAX_HEADERS};
    uint32_t v;
    uint8_t *p;

    if (guard_limits != NULL)
        guard_limits(conn->super.ctx, &lim);
    v = lim.max_bytes > UINT32_MAX ? UINT32_MAX : (uint32_t)lim.max_bytes;
    /* _write.buf is where expect_preface put h2o's SETTINGS (2.2.5); h2o
     * ignores the client's second SETTINGS ACK (handle_settings_frame). */
    p = (uint8_t *)h2o_buffer_reserve(&conn->_write.buf, H2O_HTTP2_FRAME_HEADER_SIZE + 6).base;
    p = h2o_http2_encode_frame_header(p, 6, H2O_HTTP2_FRAME_TYPE_SETTINGS, 0, 0);
    *p++ = 0;
    *p++ = H2O_HTTP2_SETTINGS_MAX_HEADER_LIST_SIZE;
    for (int shift = 24; shift >= 0; shift -= 8)
        *p++ = (uint8_t)(v >> shift);
    conn->_write.buf->size += H2O_HTTP2_FRAME_HEADER_SIZE + 6;
    h2o_http2_conn_request_write(conn);
}

static ssize_t guard_preface(h2o_http2_conn_t *conn, const uint8_t *src, size_t len, const char **err_desc)
{
    ssize_t ret = call_h2o(EXPECT_PREFACE, conn, src, len, err_desc);

    if (ret > 0)
        advertise_limit(conn);
    return ret;
}

static ssize_t guard_default(h2o_http2_conn_t *conn, const uint8_t *src, size_t len, const char **err_desc)
{
    h2o_http2_frame_t frame;
    h2o_http2_headers_payload_t payload;
    const char *ignored = NULL;
    ssize_t refused;

    /* a whole HEADERS frame h2o would take (its own errors are left to it) */
    if (len > 3 && src[3] == H2O_HTTP2_FRAME_TYPE_HEADERS &&
        h2o_http2_decode_frame(&frame, src, len, &H2O_HTTP2_SETTINGS_HOST, &ignored) > 0 &&
        h2o_http2_decode_headers_payload(&payload, &frame, &ignored) == 0 &&
        (refused = check_fragment(conn, NULL, payload.headers, payload.headers_len,
                                  (frame.flags & H2O_HTTP2_FRAME_FLAG_END_HEADERS) != 0, err_desc)) != 0)
        return refused;
    return call_h2o(EXPECT_DEFAULT, conn, src, len, err_desc);
}

static ssize_t guard_continuation(h2o_http2_conn_t *conn, const uint8_t *src, size_t len, const char **err_desc)
{
    h2o_http2_frame_t frame;
    const char *ignored = NULL;
    ssize_t refused;

    if (h2o_http2_decode_frame(&frame, src, len, &H2O_HTTP2_SETTINGS_HOST, &ignored) <= 0 ||
        frame.type != H2O_HTTP2_FRAME_TYPE_CONTINUATION)
        return call_h2o(EXPECT_CONTINUATION, conn, src, len, err_desc); /* h2o's own errors are left to it */
    /* an empty fragment that does not end the block adds nothing to it, so
     * the size bound never ends a stream of them (a CONTINUATION flood) */
    if (frame.length == 0 && (frame.flags & H2O_HTTP2_FRAME_FLAG_END_HEADERS) == 0) {
        *err_desc = "empty CONTINUATION frame";
        return refuse(conn, H2O_HTTP2_ERROR_ENHANCE_YOUR_CALM, "empty CONTINUATION frame inside a header block", NULL);
    }
    /* conn->_headers_unparsed: the block's earlier fragments, kept by h2o
     * until END_HEADERS (NULL only if h2o ignores the block) */
    if (conn->_headers_unparsed != NULL &&
        (refused = check_fragment(conn, conn->_headers_unparsed, frame.payload, frame.length,
                                  (frame.flags & H2O_HTTP2_FRAME_FLAG_END_HEADERS) != 0, err_desc)) != 0)
        return refused;
    return call_h2o(EXPECT_CONTINUATION, conn, src, len, err_desc);
}

/* ---------------------------------------------------------------- idle TLS buffers */

/*
 * h2o 2.2.5's struct st_h2o_socket_ssl_t (lib/common/socket.c) starts with
 * the SSL_CTX and the SSL, in every build (picotls' field comes after):
 * h2o has no accessor for the SSL.  h2o hands OpenSSL whole records through
 * its own BIO and reads until SSL_read wants more, so between requests both
 * buffers are normally empty; SSL_free_buffers refuses when either holds
 * bytes, and SSL_pending() == 0 also keeps it away from a record read but
 * not yet taken (OpenSSL before 3.0.14 freed that one too: CVE-2024-4741).
 */
struct h2o_socket_ssl_head {
    SSL_CTX *ssl_ctx;
    SSL *ossl;
};

int gw_tls_release_buffers(h2o_socket_t *sock)
{
    const struct h2o_socket_ssl_head *tls = (const struct h2o_socket_ssl_head *)sock->ssl;

    if (tls == NULL || tls->ossl == NULL || !SSL_is_init_finished(tls->ossl) || SSL_pending(tls->ossl) != 0)
        return 0;
    return SSL_free_buffers(tls->ossl);
}

/* ------------------------------------------------- response header blocks */

/*
 * Every response carries its own x-request-id, and h2o 2.2.5's HPACK
 * encoder (lib/http2/hpack.c, encode_header) inserts every header that is
 * not a token with dont_compress (only cookie and set-cookie are) into the
 * connection's output table.  A value that never repeats fills the table's
 * 32 entries with request ids, so each response's header is looked up by a
 * linear scan of 32 entries (a memcmp for each id), allocates and frees two
 * entries, and pushes the headers that do repeat (content-type,
 * cache-control, www-authenticate) out to be sent and inserted again: about
 * 4,000 instructions per HTTP/2 response, a fifth of a 401's.
 *
 * So the gateway's definition of h2o_hpack_flatten_response takes the place
 * of libh2o's: the shared library calls it through its PLT (checked in
 * Debian 12's libh2o-evloop.so.0.13.5: stream.c's one call site), and the
 * dynamic linker binds that to the executable's symbol first.  It calls
 * libh2o's own (dlsym RTLD_NEXT) with the x-request-id fields left out, so
 * h2o encodes and indexes everything else as before, then appends each
 * x-request-id as a literal without indexing (RFC 7541 6.2.2: new name, raw
 * strings), which leaves the dynamic table, and so the peer's copy of it,
 * untouched.  The block stays one HEADERS frame when the field fits in its
 * last frame (always, below 16 KB of headers); else it gets a CONTINUATION
 * of its own.  A libh2o built so that it does not call through the PLT
 * never calls this, and encodes as it always did.
 *
 * A status without an entry in HPACK's static table (401, 429, 503: most of
 * the gateway's refusals) h2o writes with sprintf, 680 instructions.  When
 * the block surely fits one frame, h2o encodes it as a 200 (one octet,
 * static index 8) and that octet becomes the same literal h2o would have
 * written: without indexing, name index 8, three digits.
 */
typedef void (*flatten_response_fn)(h2o_buffer_t **buf, h2o_hpack_header_table_t *header_table, uint32_t stream_id,
                                    size_t max_frame_size, h2o_res_t *res, h2o_timestamp_t *ts, const h2o_iovec_t *server_name,
                                    size_t content_length);

#define REQUEST_ID_NAME      "x-request-id"
#define FLATTEN_MAX_HEADERS  64   /* more than that, and h2o encodes the response as it is */
#define FLATTEN_MAX_APPENDED 1024 /* octets of appended fields at most (request ids are 16) */

static flatten_response_fn h2o_flatten_response;
static pthread_once_t flatten_once = PTHREAD_ONCE_INIT;

static void flatten_resolve(void)
{
    h2o_flatten_response = (flatten_response_fn)dlsym(RTLD_NEXT, "h2o_hpack_flatten_response");
}

int gw_h2_encoder_init(void)
{
    pthread_once(&flatten_once, flatten_resolve);
    return h2o_flatten_response != NULL ? 0 : -1;
}

/* An HPACK integer with a 7-bit prefix (a string's length, not Huffman-coded). */
static size_t hpack_length(uint8_t *dst, size_t v)
{
    size_t n = 0;

    if (v < 127) {
        dst[n++] = (uint8_t)v;
        return n;
    }
    dst[n++] = 127;
    for (v -= 127; v >= 128; v >>= 7)
        dst[n++] = (uint8_t)(0x80 | (v & 0x7f));
    dst[n++] = (uint8_t)v;
    return n;
}

/* The field as a literal without indexing, new name: its size (dst NULL) or its bytes. */
static size_t literal_field(uint8_t *dst, const h2o_iovec_t *value)
{
    uint8_t len[2 * 10]; /* two lengths: up to 10 bytes each for a size_t */
    size_t nl = hpack_length(len, sizeof(REQUEST_ID_NAME) - 1), vl = hpack_length(len + nl, value->len);
    size_t total = 1 + nl + sizeof(REQUEST_ID_NAME) - 1 + vl + value->len;

    if (dst == NULL)
        return total;
    *dst++ = 0x00;
    memcpy(dst, len, nl);
    dst += nl;
    memcpy(dst, REQUEST_ID_NAME, sizeof(REQUEST_ID_NAME) - 1);
    dst += sizeof(REQUEST_ID_NAME) - 1;
    memcpy(dst, len + nl, vl);
    dst += vl;
    memcpy(dst, value->base, value->len);
    return total;
}

static int is_request_id(const h2o_header_t *h)
{
    return h2o_memis(h->name->base, h->name->len, H2O_STRLIT(REQUEST_ID_NAME));
}

/* Append the fields to the header block h2o wrote from start_at (frames of
 * at most max_frame_size; the last one has END_HEADERS and ends the buffer). */
static void append_fields(h2o_buffer_t **buf, size_t start_at, uint32_t stream_id, size_t max_frame_size, const h2o_header_t *ids,
                          size_t nids, size_t extra)
{
    size_t last = start_at, len;
    uint8_t *dst;

    for (;;) {
        const uint8_t *f = (const uint8_t *)(*buf)->bytes + last;
        len = (size_t)f[0] << 16 | (size_t)f[1] << 8 | f[2];
        if ((f[4] & H2O_HTTP2_FRAME_FLAG_END_HEADERS) != 0 || last + H2O_HTTP2_FRAME_HEADER_SIZE + len >= (*buf)->size)
            break;
        last += H2O_HTTP2_FRAME_HEADER_SIZE + len;
    }
    if (len + extra <= max_frame_size) {
        dst = (uint8_t *)h2o_buffer_reserve(buf, extra).base;
        uint8_t *f = (uint8_t *)(*buf)->bytes + last;
        len += extra;
        f[0] = (uint8_t)(len >> 16);
        f[1] = (uint8_t)(len >> 8);
        f[2] = (uint8_t)len;
    } else {
        dst = (uint8_t *)h2o_buffer_reserve(buf, H2O_HTTP2_FRAME_HEADER_SIZE + extra).base;
        ((uint8_t *)(*buf)->bytes)[last + 4] &= (uint8_t)~H2O_HTTP2_FRAME_FLAG_END_HEADERS;
        dst = h2o_http2_encode_frame_header(dst, extra, H2O_HTTP2_FRAME_TYPE_CONTINUATION, H2O_HTTP2_FRAME_FLAG_END_HEADERS,
                                            (int32_t)stream_id);
        (*buf)->size += H2O_HTTP2_FRAME_HEADER_SIZE;
    }
    for (size_t i = 0; i < nids; i++)
        dst += literal_field(dst, &ids[i].value);
    (*buf)->size += extra;
}

/* h2o's encode_status writes these as one indexed octet (lib/http2/hpack.c). */
static int status_is_static(int status)
{
    switch (status) {
    case 200:
    case 204:
    case 206:
    case 304:
    case 400:
    case 404:
    case 500:
        return 1;
    default:
        return 0;
    }
}

/* An upper bound of the block h2o writes for res (its own estimate, calc_capacity, is smaller). */
static size_t block_bound(const h2o_res_t *res, const h2o_iovec_t *server_name)
{
    size_t n = 64 + server_name->len + 64 + 64; /* status, server, date, content-length */

    for (size_t i = 0; i < res->headers.size; i++)
        n += res->headers.entries[i].name->len + res->headers.entries[i].value.len + 24;
    return n;
}

/* Replace the indexed :status 200 that starts the one frame at start_at by status as a literal. */
static void put_status(h2o_buffer_t **buf, size_t start_at, int status)
{
    uint8_t *f, *payload;
    size_t len;

    h2o_buffer_reserve(buf, 4);
    f = (uint8_t *)(*buf)->bytes + start_at;
    payload = f + H2O_HTTP2_FRAME_HEADER_SIZE;
    len = (size_t)f[0] << 16 | (size_t)f[1] << 8 | f[2];
    if (payload[0] != 0x88)
        abort(); /* h2o writes :status first: checked in the unit test */
    memmove(payload + 5, payload + 1, len - 1);
    payload[0] = 0x08; /* literal without indexing, name :status (static index 8) */
    payload[1] = 3;
    payload[2] = (uint8_t)('0' + status / 100);
    payload[3] = (uint8_t)('0' + status / 10 % 10);
    payload[4] = (uint8_t)('0' + status % 10);
    len += 4;
    f[0] = (uint8_t)(len >> 16);
    f[1] = (uint8_t)(len >> 8);
    f[2] = (uint8_t)len;
    (*buf)->size += 4;
}

void h2o_hpack_flatten_response(h2o_buffer_t **buf, h2o_hpack_header_table_t *header_table, uint32_t stream_id,
                                size_t max_frame_size, h2o_res_t *res, h2o_timestamp_t *ts, const h2o_iovec_t *server_name,
                                size_t content_length)
{
    h2o_header_t kept[FLATTEN_MAX_HEADERS], ids[FLATTEN_MAX_HEADERS];
    size_t nkept = 0, nids = 0, extra = 0, start_at;
    h2o_headers_t all = res->headers;
    int status = res->status, own_status;

    if (gw_h2_encoder_init() != 0)
        abort(); /* cannot happen: the gateway checks at start (server.c) */
    if (all.size > FLATTEN_MAX_HEADERS) {
        h2o_flatten_response(buf, header_table, stream_id, max_frame_size, res, ts, server_name, content_length);
        return;
    }
    for (size_t i = 0; i < all.size; i++) {
        if (is_request_id(&all.entries[i])) {
            size_t n = literal_field(NULL, &all.entries[i].value);
            if (extra + n <= FLATTEN_MAX_APPENDED) {
                ids[nids++] = all.entries[i];
                extra += n;
                continue;
            }
        }
        kept[nkept++] = all.entries[i];
    }
    start_at = (*buf)->size;
    res->headers.entries = kept;
    res->headers.size = nkept;
    own_status =
        status >= 100 && status <= 999 && !status_is_static(status) && block_bound(res, server_name) + 4 + extra <= max_frame_size;
    if (own_status)
        res->status = 200;
    h2o_flatten_response(buf, header_table, stream_id, max_frame_size, res, ts, server_name, content_length);
    res->headers = all;
    res->status = status;
    if (own_status)
        put_status(buf, start_at, status);
    if (nids != 0)
        append_fields(buf, start_at, stream_id, max_frame_size, ids, nids, extra);
}
