/*
 * handler_backend.c - what the backend-calling handlers share: starting a
 * call on the request's own loop and mapping failures to HTTP statuses.
 */
#include "handlers.h"
#include "log.h"

void gw_backend_call(struct gw_request *r, struct moat_buf *frame, uint64_t job_id, backend_done_cb cb)
{
    gw_backend_call_with(r, frame, job_id, cb, r);
}

void gw_backend_call_with(struct gw_request *r, struct moat_buf *frame, uint64_t job_id, backend_done_cb cb, void *data)
{
    struct gw_worker *w = r->worker;

    backend_call(r->req, w->ctx.loop, &w->backend_timeout, r->cfg->backend_socket, frame, job_id, cb, data);
}

static int error_status(uint16_t code)
{
    switch (code) {
    case MOAT_ERR_BAD_REQUEST:
    case MOAT_ERR_UNKNOWN_LANGUAGE:
    case MOAT_ERR_LIMIT:
        return 400;
    case MOAT_ERR_BUSY:
        return 503;
    case MOAT_ERR_INTERNAL:
        return 500;
    default:
        return 502;
    }
}

int handle_backend_failure(struct gw_request *r, enum backend_status status, const struct backend_reply *reply)
{
    switch (status) {
    case BACKEND_OK:
        break;
    case BACKEND_UNAVAILABLE:
        gw_respond_error(r, 503, "backend unavailable");
        return 1;
    case BACKEND_TIMEOUT:
        gw_respond_error(r, 504, "backend timed out");
        return 1;
    case BACKEND_BAD_REPLY:
    default:
        gw_respond_error(r, 502, "bad reply from backend");
        return 1;
    }
    if (reply->hdr.type == MOAT_MSG_ERROR) {
        int st = error_status(reply->u.error.code);
        const char *msg = reply->u.error.message;
        if (st == 502)
            log_warnx("%s: id=%s: backend error code %u unknown", __func__, r->request_id, reply->u.error.code);
        gw_respond_error(r, st, msg != NULL && msg[0] != '\0' ? msg : "backend refused the request");
        return 1;
    }
    return 0;
}
