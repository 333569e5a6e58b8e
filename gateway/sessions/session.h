/*
 * session.h - a live session: a program that keeps running while its
 * client writes to its stdin, and whose output reaches the client as it is
 * written (see session.c for the theory of operation).
 *
 * The session itself does not know its client's protocol: a sink turns
 * its events (Piston's JSON messages) into WebSocket messages
 * (session_ws.c) or lines of a streamed response (handler_execute.c).
 */
#ifndef GW_SESSION_H
#define GW_SESSION_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "core/pipeline.h"
#include "session_registry.h"

/* Piston's WebSocket close codes, and moat's own. */
enum gw_close_code {
    GW_CLOSE_NORMAL = 1000,        /* the client left (a watcher hears it so) */
    GW_CLOSE_ALREADY_INIT = 4000,  /* "Already Initialized" */
    GW_CLOSE_INIT_TIMEOUT = 4001,  /* "Initialization Timeout" */
    GW_CLOSE_ERROR = 4002,         /* "Notified Error": an error message came first */
    GW_CLOSE_NOT_INIT = 4003,      /* "Not yet Initialized" */
    GW_CLOSE_STDIN_ONLY = 4004,    /* "Can only write to stdin" */
    GW_CLOSE_BAD_SIGNAL = 4005,    /* "Invalid signal" */
    GW_CLOSE_READ_ONLY = 4006,     /* moat: a watcher wrote or signalled */
    GW_CLOSE_BAD_MESSAGE = 4007,   /* moat: not a JSON object with a known type */
    GW_CLOSE_JOB_COMPLETED = 4999, /* "Job Completed" */
};

const char *gw_close_reason(int code);

struct gw_session;

/* How a session ended, for its sink. */
struct gw_session_end {
    const char *reason; /* gw_close_reason(code) */
    int status;         /* 0 when it completed; else the refusal's HTTP status */
    const char *code;   /* the error's `code` */
    const char *message;
    int started;     /* the backend accepted it (a `runtime` event went out) */
    uint64_t cpu_ms; /* CPU time the stages used */
};

/* Where a session's events go. */
struct gw_session_sink {
    /* one event: a JSON object, without a newline */
    void (*send)(void *sink, const char *json, size_t len);
    /* bytes handed to send and not yet written to the client */
    size_t (*backlog)(void *sink);
    /* the session is over: no event follows; code is a gw_close_code */
    void (*end)(void *sink, int code, const struct gw_session_end *how);
};

/* What kind of client: a WebSocket gets `init` later; a streamed execute
 * brings its request and has its stdin closed at once. */
enum gw_session_kind {
    GW_SESSION_WEBSOCKET,
    GW_SESSION_STREAM,
};

/*
 * A session for request r, which passed the pipeline's steps 1-7 (and for
 * a stream, its decision record).  It copies what it needs of r (who
 * asked, the configuration generation, the tenant) and outlives it.  The
 * caller has counted a WebSocket session in the registry
 * (gw_sessions_acquire); the session releases that count when it is freed.
 * A stream is an execute: the limiter's in-flight slot bounds it.  NULL: out of memory.
 */
struct gw_session *gw_session_new(struct gw_request *r, enum gw_session_kind kind);

/* Connect the sink.  Until then nothing is sent. */
void gw_session_attach(struct gw_session *s, const struct gw_session_sink *sink, void *sink_data);

/* WebSocket: the `init` message (type member removed), with the
 * init timer stopped.  A refusal is sent as an error event and ends the
 * session. */
void gw_session_init(struct gw_session *s, json_t *init);
/* A stream: the request parsed, judged and recorded; ereq is taken, and
 * metadata (NULL: none) is held for the packet. */
void gw_session_start(struct gw_session *s, struct moat_exec_request *ereq, json_t *metadata);
/* Has `init` been received? */
int gw_session_initialised(const struct gw_session *s);

/* The client's input. */
void gw_session_stdin(struct gw_session *s, const uint8_t *data, size_t len);
void gw_session_stdin_close(struct gw_session *s);
/* A signal by name ("SIGINT"); -1 if it is not one a client may send. */
int gw_session_signal(struct gw_session *s, const char *name);
/* The controlling client asks for a watch token. */
void gw_session_watch(struct gw_session *s);

/* The sink wrote some of its backlog to the client. */
void gw_session_sink_progress(struct gw_session *s);
/* The client is gone (or a protocol error ended it with code): the box is
 * killed and the session records its end; the sink is not used again. */
void gw_session_client_gone(struct gw_session *s, int code);

#endif /* GW_SESSION_H */
