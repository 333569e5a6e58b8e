/*
 * session_ws.c - Piston's interactive WebSocket protocol, and watchers.
 *
 * Theory of operation
 * -------------------
 * libh2o 2.2.5 upgrades an HTTP/1.1 request to a WebSocket and runs libwslay
 * on the socket; it cannot bootstrap a WebSocket over HTTP/2 (RFC 8441), so
 * both routes answer an HTTP/2 request with a 400 that says to use
 * HTTP/1.1.  Everything before the upgrade (authentication, the endpoint
 * allow-list, the rate limit, the tenant's session count, the decision
 * record of the connection) is the pipeline's.
 *
 * One struct gw_ws per upgraded connection, in one of two roles:
 *
 *   controller  the client of a session: its text messages are Piston's
 *               (`init`, `data` on stdin, `signal`; moat adds `stdin_close`
 *               and `watch`) and go to the session; the session's events
 *               come back as text messages (the sink below).  A message out
 *               of turn closes with Piston's code: 4000 a second init, 4003
 *               anything before init, 4004 data on another stream than
 *               stdin, 4005 a signal not on the list; a message that is not
 *               a JSON object with a known type gets an error and 4002.
 *               The client closing the connection ends the session at once
 *               (the backend kills the box).
 *   watcher     reads one session's transcript (session_registry.c) every
 *               GW_WATCH_POLL_MS from its own cursor, so a watcher on another
 *               worker thread needs no cross-thread wake-up; any message it
 *               sends closes it with 4006.  It sees stages, output and exits,
 *               never stdin or signals, and closes with the session's code.
 *
 * Sending.  Messages are queued into wslay (which copies them) and written
 * from a zero-delay timer, never from inside a session callback, so the
 * session is never re-entered from its own send.  libh2o writes one frame at
 * a time; the queued bytes are the sink's backlog, and every frame written
 * (h2o's send callback, wrapped) tells the session, which gives the backend
 * credit for more output only while the backlog is small.  A watcher reads
 * the transcript only while its own backlog is small.
 *
 * Closing.  A close frame with the code is queued once the messages before
 * it are written (wslay would send a control frame first); wslay ends the
 * connection when the peer answers it, and GW_WS_CLOSE_GRACE_MS later it is
 * closed regardless.  A client that stops reading before that is the
 * watchdog's (timeouts.send_ms, conn.c).  h2o calls the message callback with no message when the
 * connection is gone; the struct is freed there.
 */
#include "session_ws.h"
#include "common/gw_clock.h"

#include <stdlib.h>
#include <string.h>

#include <h2o/websocket.h>

#include "core/conn.h"
#include "core/http.h"
#include "log.h"

#define GW_WS_MAX_QUEUED (4u * 1024u * 1024u) /* queued for a client (pongs included) before it is dropped */
#define GW_WATCH_HIGH    (256u * 1024u)       /* a watcher's backlog above which it stops reading */

struct gw_ws {
    h2o_websocket_conn_t *conn;
    struct gw_worker *worker;
    struct wslay_event_callbacks cbs; /* h2o's, with send and recv wrapped */
    wslay_event_send_callback h2o_send;
    wslay_event_recv_callback h2o_recv;
    h2o_timeout_entry_t flush; /* on the loop's zero timeout */
    h2o_timeout_entry_t tick;  /* the worker's session tick (close grace) or watch tick (the poll) */
    uint64_t close_by_ms;      /* closing: the socket closes then at the latest */
    int closing;               /* no more messages: a close frame follows them */
    int close_code;            /* the close frame, queued once the messages before it are written */
    int close_queued;
    char request_id[GW_REQUEST_ID_LEN + 1];
    /* controller */
    struct gw_session *session; /* NULL once the session ended or let go */
    /* watcher */
    int watcher;
    struct gw_watch_grant grant;
    size_t cursor;
};

/* ------------------------------------------------------------ plumbing */

static void ws_free(struct gw_ws *ws)
{
    if (h2o_timeout_is_linked(&ws->flush))
        h2o_timeout_unlink(&ws->flush);
    if (h2o_timeout_is_linked(&ws->tick))
        h2o_timeout_unlink(&ws->tick);
    if (ws->watcher)
        gw_watch_leave(&ws->grant);
    free(ws);
}

/* wslay sends control frames before queued messages: the close frame is
 * queued only once every message before it has been written. */
static void queue_close(struct gw_ws *ws)
{
    const char *reason = gw_close_reason(ws->close_code);

    if (!ws->closing || ws->close_queued || wslay_event_get_queued_msg_count(ws->conn->ws_ctx) != 0)
        return;
    ws->close_queued = 1;
    ws->close_by_ms = gw_monotonic_ns() / 1000000 + GW_WS_CLOSE_GRACE_MS;
    if (!ws->watcher && !h2o_timeout_is_linked(&ws->tick))
        h2o_timeout_link(ws->worker->ctx.loop, &ws->worker->session_tick, &ws->tick); /* a watcher's poll tick checks it */
    (void)wslay_event_queue_close(ws->conn->ws_ctx, (uint16_t)ws->close_code, (const uint8_t *)reason, strlen(reason));
}

static void on_flush(h2o_timeout_entry_t *entry)
{
    struct gw_ws *ws = H2O_STRUCT_FROM_MEMBER(struct gw_ws, flush, entry);

    if (ws->conn->sock == NULL)
        return; /* the upgrade's 101 is still going out: h2o proceeds after it */
    queue_close(ws);
    h2o_websocket_proceed(ws->conn); /* may end in the message callback with no message */
}

/* Write what is queued, from the loop (never inside a callback). */
static void kick(struct gw_ws *ws)
{
    if (!h2o_timeout_is_linked(&ws->flush))
        h2o_timeout_link(ws->worker->ctx.loop, &ws->worker->ctx.zero_timeout, &ws->flush);
}

static size_t backlog(const struct gw_ws *ws)
{
    return wslay_event_get_queued_msg_length(ws->conn->ws_ctx);
}

static void send_text(struct gw_ws *ws, const char *text, size_t len)
{
    struct wslay_event_msg msg = {WSLAY_TEXT_FRAME, (const uint8_t *)text, len};

    if (ws->closing || wslay_event_queue_msg(ws->conn->ws_ctx, &msg) != 0)
        return;
    kick(ws);
}

static void close_with(struct gw_ws *ws, int code)
{
    if (ws->closing)
        return;
    ws->closing = 1;
    ws->close_code = code;
    kick(ws);
}

/* h2o's send callback, then the session hears that its backlog moved. */
static ssize_t send_wrapped(wslay_event_context_ptr ctx, const uint8_t *data, size_t len, int flags, void *user)
{
    h2o_websocket_conn_t *conn = user;
    struct gw_ws *ws = conn->data;
    ssize_t n = ws->h2o_send(ctx, data, len, flags, user);

    if (n > 0 && ws->session != NULL)
        gw_session_sink_progress(ws->session);
    if (n > 0 && ws->closing && !ws->close_queued)
        kick(ws); /* the close frame may go once the messages before it are out */
    return n;
}

/*
 * h2o's recv callback, unless too much waits to be sent: wslay answers
 * every ping with a pong, queued like any message, so a client that sends
 * pings and never reads would grow the queue without bound.  Our own
 * messages stay far below the cap (output waits for credit, a watcher
 * reads only below GW_WATCH_HIGH); past it the connection is dropped.
 */
static ssize_t recv_wrapped(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, int flags, void *user)
{
    h2o_websocket_conn_t *conn = user;
    struct gw_ws *ws = conn->data;

    if (wslay_event_get_queued_msg_length(ctx) > GW_WS_MAX_QUEUED) {
        log_warnx("websocket: id=%s: over %u bytes queued for a client that does not read: closing", ws->request_id,
                  (unsigned)GW_WS_MAX_QUEUED);
        wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
        return -1;
    }
    return ws->h2o_recv(ctx, buf, len, flags, user);
}

static struct gw_ws *ws_new(struct gw_request *r, const char *key, h2o_websocket_msg_callback cb)
{
    struct gw_ws *ws = calloc(1, sizeof(*ws));

    if (ws == NULL)
        return NULL;
    ws->worker = r->worker;
    memcpy(ws->request_id, r->request_id, sizeof(ws->request_id));
    ws->flush.cb = on_flush;
    gw_add_header(r, "x-request-id", r->request_id);
    ws->conn = h2o_upgrade_to_websocket(r->req, key, ws, cb);
    ws->cbs = ws->conn->ws_callbacks;
    ws->h2o_send = ws->cbs.send_callback;
    ws->cbs.send_callback = send_wrapped;
    ws->h2o_recv = ws->cbs.recv_callback;
    ws->cbs.recv_callback = recv_wrapped;
    wslay_event_config_set_callbacks(ws->conn->ws_ctx, &ws->cbs);
    wslay_event_config_set_max_recv_msg_length(ws->conn->ws_ctx, r->cfg->max_request_entity_size);
    if (r->conn != NULL)
        gw_conn_upgraded(r->conn);
    gw_log_request(r, 101);
    return ws;
}

/* ---------------------------------------------------------- controller */

static void sink_send(void *sink, const char *json, size_t len)
{
    send_text(sink, json, len);
}

static size_t sink_backlog(void *sink)
{
    return backlog(sink);
}

static void sink_end(void *sink, int code, const struct gw_session_end *how)
{
    struct gw_ws *ws = sink;

    (void)how;
    ws->session = NULL;
    close_with(ws, code);
}

static const struct gw_session_sink ws_sink = {sink_send, sink_backlog, sink_end};

/* The client ends the session (a close, a message out of turn). */
static void let_go(struct gw_ws *ws, int code)
{
    struct gw_session *s = ws->session;

    ws->session = NULL;
    if (s != NULL)
        gw_session_client_gone(s, code);
}

static void refuse_message(struct gw_ws *ws, const char *message)
{
    char *text;
    json_t *o = json_object();

    json_object_set_new(o, "type", json_string("error"));
    json_object_set_new(o, "message", json_string(message));
    json_object_set_new(o, "code", json_string("bad_message"));
    json_object_set_new(o, "request_id", json_string(ws->request_id));
    if ((text = json_dumps(o, JSON_COMPACT)) != NULL)
        send_text(ws, text, strlen(text));
    free(text);
    json_decref(o);
    let_go(ws, GW_CLOSE_ERROR);
    close_with(ws, GW_CLOSE_ERROR);
}

static void out_of_turn(struct gw_ws *ws, int code)
{
    let_go(ws, code);
    close_with(ws, code);
}

/* One of Piston's messages (or moat's two). */
static void on_controller_text(struct gw_ws *ws, const uint8_t *text, size_t len)
{
    struct gw_session *s = ws->session;
    json_error_t jerr;
    json_t *msg = json_loadb((const char *)text, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr), *type;
    const char *t;

    if (s == NULL) {
        json_decref(msg);
        return; /* the session is over: its close is on its way */
    }
    if (msg == NULL || !json_is_object(msg) || !json_is_string(type = json_object_get(msg, "type"))) {
        json_decref(msg);
        refuse_message(ws, "a message must be a JSON object with a string \"type\"");
        return;
    }
    t = json_string_value(type);
    if (strcmp(t, "init") == 0) {
        if (gw_session_initialised(s)) {
            out_of_turn(ws, GW_CLOSE_ALREADY_INIT);
        } else {
            json_object_del(msg, "type");
            gw_session_init(s, msg);
        }
    } else if (strcmp(t, "data") == 0 || strcmp(t, "signal") == 0 || strcmp(t, "stdin_close") == 0 || strcmp(t, "watch") == 0) {
        if (!gw_session_initialised(s)) {
            out_of_turn(ws, GW_CLOSE_NOT_INIT);
        } else if (t[0] == 'd') {
            json_t *stream = json_object_get(msg, "stream"), *data = json_object_get(msg, "data");
            if (!json_is_string(stream) || strcmp(json_string_value(stream), "stdin") != 0)
                out_of_turn(ws, GW_CLOSE_STDIN_ONLY);
            else if (!json_is_string(data))
                refuse_message(ws, "data must be a string");
            else
                gw_session_stdin(s, (const uint8_t *)json_string_value(data), json_string_length(data));
        } else if (t[0] == 's' && t[1] == 'i') {
            json_t *sig = json_object_get(msg, "signal");
            if (!json_is_string(sig) || gw_session_signal(s, json_string_value(sig)) != 0)
                out_of_turn(ws, GW_CLOSE_BAD_SIGNAL);
        } else if (t[0] == 's') {
            gw_session_stdin_close(s);
        } else {
            gw_session_watch(s);
        }
    } else {
        refuse_message(ws, "unknown message type");
    }
    json_decref(msg);
}

static void on_controller_message(h2o_websocket_conn_t *conn, const struct wslay_event_on_msg_recv_arg *arg)
{
    struct gw_ws *ws = conn->data;

    if (arg == NULL) {
        let_go(ws, 0); /* the connection is gone: the box goes too */
        h2o_websocket_close(conn);
        ws_free(ws);
        return;
    }
    switch (arg->opcode) {
    case WSLAY_TEXT_FRAME:
    case WSLAY_BINARY_FRAME:
        on_controller_text(ws, arg->msg, arg->msg_length);
        break;
    case WSLAY_CONNECTION_CLOSE:
        let_go(ws, 0);
        break;
    default:
        break; /* ping, pong: wslay answers */
    }
}

static void on_controller_tick(h2o_timeout_entry_t *entry)
{
    struct gw_ws *ws = H2O_STRUCT_FROM_MEMBER(struct gw_ws, tick, entry);

    if (gw_monotonic_ns() / 1000000 < ws->close_by_ms) {
        h2o_timeout_link(ws->worker->ctx.loop, &ws->worker->session_tick, &ws->tick);
        return;
    }
    /* the peer did not answer the close in time */
    let_go(ws, 0);
    h2o_websocket_close(ws->conn);
    ws_free(ws);
}

enum gw_flow gw_ws_connect(struct gw_request *r, const char *key)
{
    struct gw_session *s = gw_session_new(r, GW_SESSION_WEBSOCKET);
    struct gw_ws *ws;

    if (s == NULL)
        return gw_deny(r, 500, GW_REASON_BACKEND, "out of memory");
    if ((ws = ws_new(r, key, on_controller_message)) == NULL) {
        gw_session_client_gone(s, 0);
        return gw_deny(r, 500, GW_REASON_BACKEND, "out of memory");
    }
    ws->tick.cb = on_controller_tick;
    ws->session = s;
    gw_session_attach(s, &ws_sink, ws);
    return GW_TAKEN;
}

/* ------------------------------------------------------------- watcher */

static void watcher_read(struct gw_ws *ws)
{
    char **msgs;
    size_t *lens, n;
    int ended = 0, code = GW_CLOSE_JOB_COMPLETED;

    if (ws->closing || backlog(ws) > GW_WATCH_HIGH)
        return;
    if (gw_transcript_read(ws->grant.t, &ws->cursor, GW_WATCH_HIGH, &msgs, &lens, &n, &ended, &code) != 0)
        return; /* out of memory: the next tick tries again */
    for (size_t i = 0; i < n; i++) {
        send_text(ws, msgs[i], lens[i]);
        free(msgs[i]);
    }
    free(msgs);
    free(lens);
    if (ended)
        close_with(ws, code == GW_CLOSE_JOB_COMPLETED || code == GW_CLOSE_NORMAL ? code : GW_CLOSE_ERROR);
}

static void on_watcher_tick(h2o_timeout_entry_t *entry)
{
    struct gw_ws *ws = H2O_STRUCT_FROM_MEMBER(struct gw_ws, tick, entry);

    if (ws->closing) {
        if (ws->close_queued && gw_monotonic_ns() / 1000000 >= ws->close_by_ms) {
            h2o_websocket_close(ws->conn);
            ws_free(ws);
            return;
        }
    } else {
        watcher_read(ws);
    }
    h2o_timeout_link(ws->worker->ctx.loop, &ws->worker->watch_tick, &ws->tick);
}

static void on_watcher_message(h2o_websocket_conn_t *conn, const struct wslay_event_on_msg_recv_arg *arg)
{
    struct gw_ws *ws = conn->data;

    if (arg == NULL) {
        h2o_websocket_close(conn);
        ws_free(ws);
        return;
    }
    if (arg->opcode == WSLAY_TEXT_FRAME || arg->opcode == WSLAY_BINARY_FRAME) {
        log_info("watch: id=%s session=%s: the watcher wrote; closing it", ws->request_id, ws->grant.session_id);
        close_with(ws, GW_CLOSE_READ_ONLY);
    }
}

enum gw_flow gw_ws_watch(struct gw_request *r, const char *key, struct gw_watch_grant *grant)
{
    struct gw_ws *ws = ws_new(r, key, on_watcher_message);

    if (ws == NULL) {
        gw_watch_leave(grant);
        return gw_deny(r, 500, GW_REASON_BACKEND, "out of memory");
    }
    ws->watcher = 1;
    ws->grant = *grant;
    memset(grant, 0, sizeof(*grant));
    ws->tick.cb = on_watcher_tick;
    h2o_timeout_link(ws->worker->ctx.loop, &ws->worker->watch_tick, &ws->tick);
    return GW_TAKEN;
}

/* ------------------------------------------------------------ handshake */

enum gw_flow gw_ws_handshake(struct gw_request *r, const char **key)
{
    h2o_req_t *req = r->req;

    *key = NULL;
    if (req->version >= 0x200)
        return gw_deny(r, 400, GW_REASON_FILTER,
                       "WebSocket sessions need HTTP/1.1: this gateway cannot open a WebSocket over HTTP/2 (RFC 8441)");
    if (h2o_is_websocket_handshake(req, key) != 0 || *key == NULL)
        return gw_deny(
            r, 400, GW_REASON_FILTER,
            "expected a WebSocket handshake (Connection: Upgrade, Upgrade: websocket, a 24-character Sec-WebSocket-Key)");
    return GW_NEXT;
}
