/*
 * guard.c - the first handler: what must hold for any request before the
 * router sees it.
 *
 *   1. The worker picks up a reloaded configuration, and the request takes a
 *      reference on the generation it starts with: everything it reads
 *      through r->cfg (tenants, keys, limits) stays valid until it is freed,
 *      whatever SIGHUP does meanwhile.
 *   2. The connection's accounting (conn.c): a connection being closed for
 *      abuse, or over its HTTP/2 reset budget, gets no more requests.
 *   3. Message framing (G14/G15).  HTTP/1: h2o 2.2.5 takes the first of
 *      duplicate Content-Length headers, lets Transfer-Encoding win over
 *      Content-Length, and keeps neither header in req->headers, so the
 *      request head is read again from the socket's input buffer (where h2o
 *      leaves it until the response is done).  HTTP/2: content-length must
 *      match the DATA received, and no header value may hold CR, LF or NUL.
 *      A failure is a JSON 400, and on HTTP/1 the connection is closed.
 *
 * Then it declines (returns -1) and h2o calls the router.
 *
 * The per-request state is a shared allocation in req->pool.  h2o frees
 * those last-allocated-first, so the guard's (allocated before the router's
 * gw_request) is released after every handler's state: the configuration
 * reference outlives everything that might still read the configuration.
 */
#include "guard.h"
#include "conn.h"
#include "http.h"
#include "log.h"

#include <string.h>
#include <strings.h>

struct guard_req {
    h2o_req_t *req;
    struct gw_generation *gen;
    struct gw_conn *conn; /* NULL if not one of ours */
};

static int is_ows(char c)
{
    return c == ' ' || c == '\t';
}

const char *gw_http1_check_framing(const char *buf, size_t len)
{
    size_t pos = 0, ncl = 0, nte = 0;
    int first = 1;

    for (;;) {
        const char *line = buf + pos, *nl, *colon, *v, *vend;
        size_t n;

        if (pos >= len || (nl = memchr(line, '\n', len - pos)) == NULL)
            return "incomplete request head";
        n = (size_t)(nl - line);
        pos += n + 1;
        if (n > 0 && line[n - 1] == '\r')
            n--;
        if (first) {
            first = 0;
            continue;
        }
        if (n == 0)
            break; /* end of the head */
        if (is_ows(line[0]))
            return "obsolete line folding in a header";
        if ((colon = memchr(line, ':', n)) == NULL)
            return "malformed header line";
        for (const char *p = line; p < colon; p++)
            if (is_ows(*p))
                return "white space in a header name";
        for (v = colon + 1, vend = line + n; v < vend && is_ows(*v); v++)
            ;
        while (vend > v && is_ows(vend[-1]))
            vend--;
        if (colon - line == 14 && strncasecmp(line, "content-length", 14) == 0) {
            if (++ncl > 1)
                return "more than one Content-Length";
            if (vend == v || vend - v > 18)
                return "malformed Content-Length";
            for (const char *p = v; p < vend; p++)
                if (*p < '0' || *p > '9')
                    return "malformed Content-Length";
        } else if (colon - line == 17 && strncasecmp(line, "transfer-encoding", 17) == 0) {
            if (++nte > 1)
                return "more than one Transfer-Encoding";
            if (vend - v != 7 || strncasecmp(v, "chunked", 7) != 0)
                return "Transfer-Encoding other than chunked";
        }
    }
    if (ncl != 0 && nte != 0)
        return "both Content-Length and Transfer-Encoding";
    return NULL;
}

/* HTTP/1: the raw head is at the start of the socket's input buffer. */
static const char *check_http1(h2o_req_t *req)
{
    h2o_socket_t *sock = req->conn->callbacks->get_socket != NULL ? req->conn->callbacks->get_socket(req->conn) : NULL;
    const h2o_iovec_t m = req->input.method;

    if (sock == NULL || sock->input == NULL || sock->input->size <= m.len || memcmp(sock->input->bytes, m.base, m.len) != 0 ||
        sock->input->bytes[m.len] != ' ') {
        log_warnx("%s: cannot find the request head in the input buffer", __func__);
        return "cannot verify the request framing";
    }
    return gw_http1_check_framing(sock->input->bytes, sock->input->size);
}

/* HTTP/2: content-length against the DATA received; no CR, LF or NUL in a value. */
static const char *check_h2(h2o_req_t *req)
{
    ssize_t i = h2o_find_header(&req->headers, H2O_TOKEN_CONTENT_LENGTH, -1);

    if (i != -1) {
        h2o_iovec_t v = req->headers.entries[i].value;
        size_t cl = h2o_strtosize(v.base, v.len);
        if (h2o_find_header(&req->headers, H2O_TOKEN_CONTENT_LENGTH, i) != -1)
            return "more than one content-length";
        if (cl == SIZE_MAX || cl != req->entity.len)
            return "content-length does not match the request body";
    }
    for (size_t k = 0; k < req->headers.size; k++) {
        h2o_iovec_t v = req->headers.entries[k].value;
        for (size_t j = 0; j < v.len; j++)
            if (v.base[j] == '\r' || v.base[j] == '\n' || v.base[j] == '\0')
                return "control character in a header value";
    }
    return NULL;
}

static void on_dispose(void *p)
{
    struct guard_req *g = p;
    const h2o_req_t *req = g->req;
    int completed = req->res.status != 0 && (req->res.content_length == SIZE_MAX || req->bytes_sent >= req->res.content_length);

    if (g->conn != NULL)
        gw_conn_request_end(g->conn, completed);
    gw_generation_release(g->gen);
}

static int refuse(h2o_req_t *req, int status, const char *why)
{
    struct gw_request *r;

    req->http1_is_persistent = 0; /* HTTP/1: close after the answer */
    if ((r = gw_request_new(req)) == NULL)
        return -1;
    r->reason = "filter";
    r->note = why;
    gw_respond_error(r, status, why);
    return 0;
}

static int on_req(h2o_handler_t *self, h2o_req_t *req)
{
    struct gw_worker *w = gw_worker_of(req->conn->ctx);
    struct guard_req *g;
    const char *why;

    gw_worker_refresh(w);
    if ((g = h2o_mem_alloc_shared(&req->pool, sizeof(*g), on_dispose)) == NULL)
        return -1;
    g->req = req;
    g->gen = w->gen;
    gw_generation_hold(g->gen);
    g->conn = gw_conn_of(req);
    if (g->conn != NULL && (why = gw_conn_request_start(g->conn, req)) != NULL)
        return refuse(req, 429, why);
    if ((why = req->version < 0x200 ? check_http1(req) : check_h2(req)) != NULL)
        return refuse(req, 400, why);
    return -1;
}

void gw_guard_register(h2o_pathconf_t *pathconf)
{
    h2o_handler_t *h = h2o_create_handler(pathconf, sizeof(*h));

    h->on_req = on_req;
}
