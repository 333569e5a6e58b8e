/*
 * transcript.h - what one live session said and heard, in order: the
 * audit packet's source, and what its watchers read.
 *
 * The session (on its worker's thread) appends; watchers (on any worker's
 * thread) read the events a watcher may see from a cursor on.  One mutex
 * guards the list; the transcript is reference counted, so a watcher that
 * outlives its session still reads a valid (ended) transcript.
 *
 * Each chunk of data is held once, as its raw bytes: the message a watcher
 * (and the session's client) is sent for it is made from them when it is
 * sent (gw_transcript_message), never kept.
 */
#ifndef GW_TRANSCRIPT_H
#define GW_TRANSCRIPT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "moat_proto.h"

enum gw_tr_kind {
    GW_TR_STAGE = 1,       /* a stage started */
    GW_TR_DATA = 2,        /* bytes on stdin (from the client), stdout or stderr */
    GW_TR_EXIT = 3,        /* a stage ended */
    GW_TR_SIGNAL = 4,      /* the client signalled the program */
    GW_TR_STDIN_CLOSE = 5, /* the client closed stdin */
};

enum gw_tr_stream {
    GW_TR_STDIN = 0,
    GW_TR_STDOUT = 1,
    GW_TR_STDERR = 2,
};

struct gw_tr_event {
    uint8_t kind;   /* enum gw_tr_kind */
    uint8_t stream; /* DATA: enum gw_tr_stream */
    uint8_t stage;  /* STAGE, EXIT: enum moat_stage */
    uint8_t clock;  /* EXIT: enum moat_clock or 0 */
    int32_t signal; /* SIGNAL: the signal number */
    uint64_t at_ms; /* since the session started (the gateway's clock) */
    uint8_t *data;  /* DATA: the bytes */
    size_t len;
    /* DATA: its message carries the first msg_len bytes of pre (the end of
     * a character an earlier chunk of the stream split) then data; 0: no
     * message (stdin, or every byte waits for the rest of a character) */
    uint8_t pre[3];
    uint8_t pre_len;
    size_t msg_len;
    struct moat_stage_result exit; /* EXIT: the status (no output) */
    char *message;                 /* not DATA: what a watcher is sent (JSON), or NULL: not for watchers */
    size_t message_len;
};

struct gw_transcript {
    pthread_mutex_t mu;
    unsigned refs;
    struct gw_tr_event *ev;
    size_t n, cap;
    size_t data_bytes; /* DATA bytes held */
    int ended;         /* no event follows */
    int end_code;      /* the close code the session ended with */
};

struct gw_transcript *gw_transcript_new(void);
void gw_transcript_hold(struct gw_transcript *t);
void gw_transcript_release(struct gw_transcript *t);

/* Appends ev, taking its data, message and exit.message (freed on
 * failure too).  0, or -1 when memory ran out. */
int gw_transcript_append(struct gw_transcript *t, struct gw_tr_event *ev);

/* The message e is sent as, malloc'ed, its length in *len: a DATA event's
 * {"type":"data","stream","data"} (the bytes as UTF-8 text), made here; any
 * other's the one it holds.  NULL when e has none (*len 0) or memory ran
 * out (*len 1). */
char *gw_transcript_message(const struct gw_tr_event *e, size_t *len);

/* No more events; watchers close with code. */
void gw_transcript_end(struct gw_transcript *t, int code);

/*
 * Copies of the watcher messages after *cursor, at most max_bytes of them
 * (at least one when any is there), in *out as one malloc'ed array of
 * malloc'ed strings (*nout of them); *cursor moves past what was read.
 * *ended is set once every event has been read and the session is over
 * (*end_code then says how).  0, or -1 when memory ran out.
 */
int gw_transcript_read(struct gw_transcript *t, size_t *cursor, size_t max_bytes, char ***out, size_t **lens, size_t *nout,
                       int *ended, int *end_code);

#endif /* GW_TRANSCRIPT_H */
