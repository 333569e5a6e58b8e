/*
 * backend_client.c - one non-blocking request/response exchange with
 * moat-backend per call.
 *
 * Ownership: struct backend_call lives in the HTTP request's memory pool as a
 * shared object whose dispose callback closes the socket and unlinks the
 * timer.  finish() tears the same things down before running the user
 * callback, so no event can reach a call after either path, and the user
 * callback may free the request (by responding) without leaving anything
 * behind that still points at it.  A detached call (no request: an
 * asynchronous Judge0 submission that outlives its HTTP request) is
 * malloc'ed instead, cannot be abandoned, and is freed after its callback.
 */
#include "backend_client.h"
#include "log.h"
#include "common/metrics.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

struct backend_call {
    int detached; /* malloc'ed (no request): freed after its callback */
    h2o_socket_t *sock;
    h2o_timeout_entry_t timer;
    struct moat_buf frame;
    uint64_t job_id;
    backend_done_cb cb;
    void *data;
    int counted; /* in moat_backend_calls_in_flight (metrics.h) until torn down */
};

static uint64_t backend_job_counter;

uint64_t backend_next_job_id(void)
{
    return __atomic_add_fetch(&backend_job_counter, 1, __ATOMIC_RELAXED);
}

/* Close the socket and stop the timer; safe to call more than once. */
static void teardown(struct backend_call *call)
{
    if (call->sock != NULL) {
        call->sock->data = NULL;
        h2o_socket_close(call->sock);
        call->sock = NULL;
    }
    h2o_timeout_unlink(&call->timer);
    moat_buf_free(&call->frame);
    if (call->counted) {
        call->counted = 0;
        gw_metric_add(&gw_metrics_here()->backend_in_flight, -1);
    }
}

static void on_call_dispose(void *p)
{
    struct backend_call *call = p;

    if (call->cb != NULL)
        log_debug("%s: request went away, abandoning job %llu", __func__, (unsigned long long)call->job_id);
    teardown(call);
}

/* Tear down, then report.  The call may be freed by the callback. */
static void finish(struct backend_call *call, enum backend_status status, const struct backend_reply *reply)
{
    backend_done_cb cb = call->cb;
    void *data = call->data;
    int detached = call->detached; /* read before cb: a request's call may go with it */

    teardown(call);
    call->cb = NULL;
    cb(data, status, reply);
    if (detached)
        free(call);
}

static void on_timeout(h2o_timeout_entry_t *entry)
{
    struct backend_call *call = H2O_STRUCT_FROM_MEMBER(struct backend_call, timer, entry);

    log_warnx("%s: job %llu: no reply from the backend in time", __func__, (unsigned long long)call->job_id);
    finish(call, BACKEND_TIMEOUT, NULL);
}

static void reply_free(struct backend_reply *reply)
{
    switch (reply->hdr.type) {
    case MOAT_MSG_EXEC_RESULT:
        moat_exec_result_free(&reply->u.result);
        break;
    case MOAT_MSG_ERROR:
        moat_error_free(&reply->u.error);
        break;
    case MOAT_MSG_RUNTIMES:
        moat_runtimes_free(&reply->u.runtimes);
        break;
    default:
        break;
    }
}

static int reply_decode(struct backend_reply *reply, const uint8_t *payload, const char **why)
{
    size_t len = reply->hdr.length;

    switch (reply->hdr.type) {
    case MOAT_MSG_EXEC_RESULT:
        return moat_decode_exec_result(payload, len, &reply->u.result, why);
    case MOAT_MSG_ERROR:
        return moat_decode_error(payload, len, &reply->u.error, why);
    case MOAT_MSG_RUNTIMES:
        return moat_decode_runtimes(payload, len, &reply->u.runtimes, why);
    default:
        *why = "unexpected message type";
        return -1;
    }
}

static void on_read(h2o_socket_t *sock, const char *err)
{
    struct backend_call *call = sock->data;
    struct backend_reply reply;
    const char *why = NULL;
    size_t have;

    if (call == NULL)
        return;
    have = sock->input->size;
    if (have >= MOAT_FRAME_HEADER_SIZE) {
        memset(&reply, 0, sizeof(reply));
        if (moat_frame_parse_header((const uint8_t *)sock->input->bytes, have, &reply.hdr, &why) != 0 ||
            reply.hdr.length > MOAT_FRAME_MAX_PAYLOAD) {
            log_warnx("%s: job %llu: bad frame header: %s", __func__, (unsigned long long)call->job_id,
                      why != NULL ? why : "payload too large");
            finish(call, BACKEND_BAD_REPLY, NULL);
            return;
        }
        if (reply.hdr.job_id != call->job_id) {
            log_warnx("%s: job %llu: reply is for job %llu", __func__, (unsigned long long)call->job_id,
                      (unsigned long long)reply.hdr.job_id);
            finish(call, BACKEND_BAD_REPLY, NULL);
            return;
        }
        if (have > MOAT_FRAME_HEADER_SIZE + (size_t)reply.hdr.length) {
            log_warnx("%s: job %llu: bytes after the reply frame", __func__, (unsigned long long)call->job_id);
            finish(call, BACKEND_BAD_REPLY, NULL);
            return;
        }
        if (have == MOAT_FRAME_HEADER_SIZE + (size_t)reply.hdr.length) {
            if (reply_decode(&reply, (const uint8_t *)sock->input->bytes + MOAT_FRAME_HEADER_SIZE, &why) != 0) {
                log_warnx("%s: job %llu: undecodable reply: %s", __func__, (unsigned long long)call->job_id, why);
                finish(call, BACKEND_BAD_REPLY, NULL);
                return;
            }
            finish(call, BACKEND_OK, &reply);
            reply_free(&reply);
            return;
        }
    }
    if (err != NULL) {
        log_warnx("%s: job %llu: backend closed the connection after %zu bytes: %s", __func__, (unsigned long long)call->job_id,
                  have, err);
        finish(call, BACKEND_UNAVAILABLE, NULL);
    }
}

static void on_write(h2o_socket_t *sock, const char *err)
{
    struct backend_call *call = sock->data;

    if (call == NULL)
        return;
    if (err != NULL) {
        log_warnx("%s: job %llu: write to backend failed: %s", __func__, (unsigned long long)call->job_id, err);
        finish(call, BACKEND_UNAVAILABLE, NULL);
        return;
    }
    moat_buf_free(&call->frame);
}

static void on_connect(h2o_socket_t *sock, const char *err)
{
    struct backend_call *call = sock->data;
    h2o_iovec_t buf;

    if (call == NULL)
        return;
    if (err != NULL) {
        log_warnx("%s: job %llu: cannot connect to the backend: %s", __func__, (unsigned long long)call->job_id, err);
        finish(call, BACKEND_UNAVAILABLE, NULL);
        return;
    }
    buf = h2o_iovec_init(call->frame.data, call->frame.len);
    h2o_socket_write(sock, &buf, 1, on_write);
    h2o_socket_read_start(sock, on_read);
}

void backend_call(h2o_req_t *req, h2o_loop_t *loop, h2o_timeout_t *timeout, const char *socket_path, struct moat_buf *frame,
                  uint64_t job_id, backend_done_cb cb, void *data)
{
    struct backend_call *call;
    struct sockaddr_un sun;
    size_t plen = strlen(socket_path);

    memset(&sun, 0, sizeof(sun));
    sun.sun_family = AF_UNIX;
    if (plen >= sizeof(sun.sun_path)) {
        /* config.c refuses such paths; keep the check next to the copy anyway */
        moat_buf_free(frame);
        cb(data, BACKEND_UNAVAILABLE, NULL);
        return;
    }
    memcpy(sun.sun_path, socket_path, plen + 1);

    call = req != NULL ? h2o_mem_alloc_shared(&req->pool, sizeof(*call), on_call_dispose) : malloc(sizeof(*call));
    if (call == NULL) {
        moat_buf_free(frame);
        cb(data, BACKEND_UNAVAILABLE, NULL);
        return;
    }
    memset(call, 0, sizeof(*call));
    call->detached = req == NULL;
    call->frame = *frame;
    memset(frame, 0, sizeof(*frame));
    call->job_id = job_id;
    call->cb = cb;
    call->data = data;
    call->timer.cb = on_timeout;
    call->counted = 1;
    gw_metric_add(&gw_metrics_here()->backend_in_flight, 1);

    call->sock = h2o_socket_connect(loop, (struct sockaddr *)&sun, sizeof(sun), on_connect);
    if (call->sock == NULL) {
        log_warn("%s: job %llu: connect %s", __func__, (unsigned long long)job_id, socket_path);
        finish(call, BACKEND_UNAVAILABLE, NULL);
        return;
    }
    call->sock->data = call;
    h2o_timeout_link(loop, timeout, &call->timer);
}
