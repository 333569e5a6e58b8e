/*
 * backend_client.h - asynchronous calls to moat-backend over its Unix
 * socket, on the calling worker's h2o event loop.
 *
 * One connection per call: connect, write one frame, read one frame, close.
 * The frame's job id is checked on the reply so the same code can later
 * multiplex calls over a long-lived connection.
 */
#ifndef GW_BACKEND_CLIENT_H
#define GW_BACKEND_CLIENT_H

#include <stdint.h>

#ifndef H2O_USE_LIBUV
#define H2O_USE_LIBUV 0
#endif
#include <h2o.h>

#include "moat_proto.h"

enum backend_status {
    BACKEND_OK,          /* reply holds a decoded message */
    BACKEND_UNAVAILABLE, /* connect failed or the backend closed early */
    BACKEND_TIMEOUT,     /* no complete reply within backend.timeout_ms */
    BACKEND_BAD_REPLY,   /* the reply broke the protocol */
};

struct backend_reply {
    struct moat_frame_header hdr; /* hdr.type says which member is set */
    union {
        struct moat_exec_result result;
        struct moat_error error;
        struct moat_runtimes runtimes;
    } u;
};

/*
 * Called exactly once per backend_call, unless the request goes away first
 * (then never).  reply is non-NULL only for BACKEND_OK and is freed by the
 * client when the callback returns.  The callback normally sends the HTTP
 * response, after which the request (and the call) may already be gone.
 */
typedef void (*backend_done_cb)(void *data, enum backend_status status, const struct backend_reply *reply);

/* A fresh job id, unique within this process. */
uint64_t backend_next_job_id(void);

/*
 * Send frame (taking ownership of its buffer) to the backend at socket_path.
 * The call's state is allocated in req->pool, so when the request is freed
 * (for example because the client went away) the backend socket is closed
 * and the timer stopped, and cb never runs.  If the connection cannot even
 * be started, cb runs before backend_call returns.  req NULL: a detached
 * call, on the heap, that no request's end cancels: cb always runs, once.
 */
void backend_call(h2o_req_t *req, h2o_loop_t *loop, h2o_timeout_t *timeout, const char *socket_path, struct moat_buf *frame,
                  uint64_t job_id, backend_done_cb cb, void *data);

#endif /* GW_BACKEND_CLIENT_H */
