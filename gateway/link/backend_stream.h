/*
 * backend_stream.h - a long-lived framed connection to moat-backend, on a
 * worker's event loop: what a live session speaks (backend_client.h is the
 * one-frame call of a batch request).
 */
#ifndef GW_BACKEND_STREAM_H
#define GW_BACKEND_STREAM_H

#include <stddef.h>
#include <stdint.h>

#ifndef H2O_USE_LIBUV
#define H2O_USE_LIBUV 0
#endif
#include <h2o.h>

#include "moat_proto.h"

struct gw_bstream;

/* One complete frame whose header passed moat_frame_parse_header (type and
 * per-type size cap).  The payload is valid only during the call.  The
 * callback may call gw_bstream_close. */
typedef void (*gw_bstream_frame_cb)(void *data, const struct moat_frame_header *h, const uint8_t *payload);
/* The connection ended: the backend closed it (why "closed"), a write or
 * read failed, the connect failed, or a header was malformed (why says).
 * Called at most once, never after gw_bstream_close; the stream is freed
 * after it returns. */
typedef void (*gw_bstream_end_cb)(void *data, const char *why);

/* Connect to socket_path; NULL if the connection cannot even be started. */
struct gw_bstream *gw_bstream_open(h2o_loop_t *loop, const char *socket_path, gw_bstream_frame_cb on_frame,
                                   gw_bstream_end_cb on_end, void *data);
/* Queue a complete frame (its bytes are copied; frame is emptied).  0, or
 * -1 when memory ran out. */
int gw_bstream_send(struct gw_bstream *b, struct moat_buf *frame);
/* Bytes queued and not yet written. */
size_t gw_bstream_queued(const struct gw_bstream *b);
/* Close now (the backend sees end of file and kills the session's box);
 * no callback runs afterwards. */
void gw_bstream_close(struct gw_bstream *b);

#endif /* GW_BACKEND_STREAM_H */
