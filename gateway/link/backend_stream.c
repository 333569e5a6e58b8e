/*
 * backend_stream.c - a session's connection to moat-backend.
 *
 * Theory of operation
 * -------------------
 * One Unix-socket connection per session, on the session's worker loop.
 * Frames to send are appended to `out`; one write is in flight at a time
 * (`flight`), and whatever gathered meanwhile goes in the next.  What the
 * peer sends is read as it comes: each complete frame is handed to the
 * frame callback and consumed, so the input buffer never holds more than
 * one frame, and a header is judged (version, type, that type's size cap)
 * as soon as its 16 bytes are in, before its payload is waited for.
 *
 * A write that fails stops the writing only: the backend closes its end
 * after its last frame, and a credit the gateway sent meanwhile must not
 * lose that frame; the read side ends the stream.
 *
 * Callbacks may close the stream.  `depth` counts the callbacks running;
 * gw_bstream_close only marks the stream closed and shuts the socket, and
 * the last callback out frees it, so no code touches freed memory after a
 * callback returns.
 */
#include "backend_stream.h"

#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include "log.h"

struct gw_bstream {
    h2o_socket_t *sock;
    int connected;
    int closed;       /* by gw_bstream_close or after on_end: no more callbacks */
    int write_failed; /* the peer takes nothing more: what it sent before is still read */
    int depth;        /* callbacks running */
    struct moat_buf out, flight;
    gw_bstream_frame_cb on_frame;
    gw_bstream_end_cb on_end;
    void *data;
};

static void stream_free(struct gw_bstream *b)
{
    if (b->sock != NULL) {
        b->sock->data = NULL;
        h2o_socket_close(b->sock);
        b->sock = NULL;
    }
    moat_buf_free(&b->out);
    moat_buf_free(&b->flight);
    free(b);
}

/* Leaves a callback: the last one out frees a closed stream.  1 if freed. */
static int leave(struct gw_bstream *b)
{
    if (--b->depth == 0 && b->closed) {
        stream_free(b);
        return 1;
    }
    return 0;
}

static void end(struct gw_bstream *b, const char *why)
{
    if (b->closed)
        return;
    b->closed = 1;
    b->depth++;
    b->on_end(b->data, why);
    leave(b);
}

static void on_write(h2o_socket_t *sock, const char *err);

static void flush(struct gw_bstream *b)
{
    h2o_iovec_t buf;

    if (!b->connected || b->closed || b->write_failed || b->flight.len != 0 || b->out.len == 0)
        return;
    /* the gathered frames become the write in flight */
    struct moat_buf t = b->flight;
    b->flight = b->out;
    b->out = t;
    b->out.len = 0;
    buf = h2o_iovec_init(b->flight.data, b->flight.len);
    h2o_socket_write(b->sock, &buf, 1, on_write);
}

static void on_write(h2o_socket_t *sock, const char *err)
{
    struct gw_bstream *b = sock->data;

    if (b == NULL)
        return;
    b->flight.len = 0;
    if (err != NULL) {
        /* the backend hung up after its last frame (it half-closes, then
         * closes): its frames are still to be read, and the read side ends
         * the stream; only the writing stops */
        b->write_failed = 1;
        b->out.len = 0;
        return;
    }
    flush(b);
}

static void on_read(h2o_socket_t *sock, const char *err)
{
    struct gw_bstream *b = sock->data;
    const char *why = NULL;

    if (b == NULL)
        return;
    b->depth++;
    while (!b->closed && sock->input->size >= MOAT_FRAME_HEADER_SIZE) {
        struct moat_frame_header h;
        if (moat_frame_parse_header((const uint8_t *)sock->input->bytes, sock->input->size, &h, &why) != 0) {
            log_warnx("%s: bad frame from the backend: %s", __func__, why);
            end(b, why);
            break;
        }
        if (sock->input->size - MOAT_FRAME_HEADER_SIZE < h.length)
            break; /* the rest of this frame is still to come */
        b->on_frame(b->data, &h, (const uint8_t *)sock->input->bytes + MOAT_FRAME_HEADER_SIZE);
        if (!b->closed)
            h2o_buffer_consume(&sock->input, MOAT_FRAME_HEADER_SIZE + h.length);
    }
    if (!b->closed && err != NULL)
        end(b, sock->input->size != 0 ? "the backend closed the connection inside a frame" : "closed");
    leave(b);
}

static void on_connect(h2o_socket_t *sock, const char *err)
{
    struct gw_bstream *b = sock->data;

    if (b == NULL)
        return;
    if (err != NULL) {
        log_warnx("%s: cannot connect to the backend: %s", __func__, err);
        end(b, err);
        return;
    }
    b->connected = 1;
    h2o_socket_read_start(sock, on_read);
    flush(b);
}

struct gw_bstream *gw_bstream_open(h2o_loop_t *loop, const char *socket_path, gw_bstream_frame_cb on_frame,
                                   gw_bstream_end_cb on_end, void *data)
{
    struct sockaddr_un sun;
    struct gw_bstream *b;
    size_t plen = strlen(socket_path);

    memset(&sun, 0, sizeof(sun));
    sun.sun_family = AF_UNIX;
    if (plen >= sizeof(sun.sun_path)) /* config.c refuses such paths */
        return NULL;
    memcpy(sun.sun_path, socket_path, plen + 1);
    if ((b = calloc(1, sizeof(*b))) == NULL)
        return NULL;
    b->on_frame = on_frame;
    b->on_end = on_end;
    b->data = data;
    if ((b->sock = h2o_socket_connect(loop, (struct sockaddr *)&sun, sizeof(sun), on_connect)) == NULL) {
        log_warn("%s: connect %s", __func__, socket_path);
        free(b);
        return NULL;
    }
    b->sock->data = b;
    return b;
}

int gw_bstream_send(struct gw_bstream *b, struct moat_buf *frame)
{
    int rc = b->closed ? 0 : moat_buf_append(&b->out, frame->data, frame->len);

    moat_buf_free(frame);
    if (rc != 0)
        return -1;
    flush(b);
    return 0;
}

size_t gw_bstream_queued(const struct gw_bstream *b)
{
    return b->out.len + b->flight.len;
}

void gw_bstream_close(struct gw_bstream *b)
{
    if (b == NULL)
        return;
    b->closed = 1;
    if (b->depth == 0)
        stream_free(b);
    else if (b->sock != NULL)
        h2o_socket_read_stop(b->sock);
}
