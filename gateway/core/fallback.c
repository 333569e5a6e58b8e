/*
 * fallback.c - the answers h2o sends itself, made accountable.
 *
 * Some requests never reach the pipeline: h2o refuses them while reading
 * (a non-numeric Content-Length, a Transfer-Encoding other than chunked, a
 * body over twice the cap, broken chunked encoding, an unknown Expect, a
 * forbidden character in an HTTP/2 header value) with h2o_send_error_*(),
 * which binds the request to the host's fallback path (lib/core/request.c,
 * h2o_send_error_generic, 2.2.5).  A filter there sees each such answer
 * before it leaves, and gives it what every response of the gateway has:
 *
 *   - an X-Request-Id (and Cache-Control: no-store);
 *   - the request's one log line (reason filter);
 *   - a denial record in the audit trail, charged to the client's address
 *     like any refusal nobody authenticated for (denials.c): past the
 *     address's rate it is counted in a summary instead.
 *
 * What stays h2o's: the status it chose (400 or 413) and its short
 * text/plain body; the connection is closed after it.  Requests h2o cannot
 * parse at all (a garbage request line, an HTTP version other than 1.x,
 * too many header fields, an oversized head) are answered by its parser
 * straight on the socket, with no request and so no filter: moat-gateway(8)
 * lists them.
 */
#include "fallback.h"
#include "common/gw_clock.h"
#include "conn.h"
#include "denials.h"
#include "http.h"
#include "pipeline.h"

#include <string.h>

static void on_setup_ostream(h2o_filter_t *self, h2o_req_t *req, h2o_ostream_t **slot)
{
    struct gw_worker *w = gw_worker_of(req->conn->ctx);
    struct gw_request r;

    memset(&r, 0, sizeof(r));
    r.req = req;
    r.worker = w;
    r.gen = w->gen;
    r.cfg = w->cfg;
    r.conn = gw_conn_of(req);
    r.started_ns = gw_monotonic_ns();
    r.status = req->res.status;
    r.reason = GW_REASON_FILTER;
    r.message = req->res.reason != NULL ? req->res.reason : "refused by the HTTP library";
    r.note = "refused by the HTTP library (h2o)";
    gw_new_request_id(r.request_id);
    gw_request_client(&r);
    h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("x-request-id"), 0, NULL,
                          h2o_strdup(&req->pool, r.request_id, SIZE_MAX).base, GW_REQUEST_ID_LEN);
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CACHE_CONTROL, NULL, H2O_STRLIT("no-store"));
    if (!gw_denials_over(&r, r.status) && w->audit.enabled)
        gw_record_refusal(&r, "request", "denied");
    gw_log_request(&r, r.status);
    h2o_setup_next_ostream(req, slot);
}

void gw_fallback_register(h2o_hostconf_t *hostconf)
{
    h2o_filter_t *f = h2o_create_filter(&hostconf->fallback_path, sizeof(*f));

    f->on_setup_ostream = on_setup_ostream;
}
