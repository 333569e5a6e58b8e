/*
 * session.c - a live session, from its `init` to its result record.
 *
 * Theory of operation
 * -------------------
 * A session is made by the pipeline for a request that passed steps 1-7
 * (authenticated, authorized, admitted, counted against the tenant's
 * max_concurrent): a WebSocket on GET /api/v2/connect after its upgrade,
 * or POST /api/v2/execute asking for application/x-ndjson.  It copies who
 * asked and holds the configuration generation, so it outlives the request.
 * It runs on its worker's thread only; its steps, in order:
 *
 *   1 init       (WebSocket) the `init` message within
 *                sessions.init_timeout_ms: parsed strictly like an
 *                execute body, judged by the tenant's policy (endpoint
 *                "connect"), encoded as SESSION_OPEN with the tenant's
 *                session ceilings.  A stream arrives here judged.
 *   2 decision   the allowed decision record, durable before the box
 *                starts (fail closed); a stream's was written by the
 *                pipeline.
 *   3 open       a connection of its own to the backend, SESSION_OPEN,
 *                then SESSION_READY with the effective clocks and caps:
 *                the `runtime` event.
 *   4 relay      stages, output and exits become events for the sink;
 *                stdin, stdin close and signals from the client become
 *                frames.  Every event goes into the transcript.
 *   5 end        the backend closes after the last stage's exit (or sent
 *                an ERROR, or broke the protocol); or the client went away,
 *                which closes the backend connection: the backend kills
 *                the box at once.
 *   6 result     one result record whose packet holds the whole
 *                transcript (the record's stdout_bytes, stdout_sha256 and
 *                stderr's are each stage's chunks, hashed where the
 *                transcript holds them), durable before the client hears "Job
 *                Completed" (4999); when the trail cannot take it the
 *                client gets an error and 4002 instead.
 *
 * Back-pressure.  Output: the backend may have MOAT_SESSION_WINDOW bytes of
 * output unacknowledged; the session gives them back (SESSION_CREDIT) only
 * while its sink's backlog is under GW_SESSION_SINK_HIGH, so a client that
 * reads slowly stalls the program's pipe, not the gateway's memory.
 * Stdin: the session sends at most the window the backend granted; what
 * the client sends beyond it waits here, bounded by the session's
 * stdin_bytes (past it the session ends with an error).
 *
 * Output is forwarded as UTF-8 text (Piston's protocol is JSON); a chunk
 * that ends inside a multi-byte character keeps those bytes for the next
 * chunk of its stream, so a character split by the pipe is not mangled.
 * The transcript keeps the exact bytes.
 */
#include "session.h"
#include "common/gw_clock.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "records/audit_records.h"
#include "link/backend_stream.h"
#include "core/conn.h"
#include "exec/judge.h"
#include "log.h"
#include "json/piston_json.h"

#define GW_SESSION_SINK_HIGH (256u * 1024u) /* sink backlog above which output credit waits */

enum session_state {
    S_WAIT_INIT, /* 1 */
    S_RECORDING, /* 2 */
    S_RUNNING,   /* 3, 4 */
    S_RESULT,    /* 5, 6: waiting for the result record */
    S_DONE,      /* the sink has heard the end; freed when nothing waits */
};

enum session_outcome {
    OUT_COMPLETED,   /* every stage ran and exited */
    OUT_REFUSED,     /* the backend refused or failed (an ERROR frame) */
    OUT_BROKEN,      /* the backend broke the protocol or went away */
    OUT_CLIENT_GONE, /* the client closed the connection */
    OUT_LIMIT,       /* the client passed stdin_bytes */
};

struct gw_session {
    struct gw_worker *worker;
    struct gw_generation *gen; /* held: tenant_cfg and cfg point into it */
    const struct gw_config *cfg;
    const struct gw_tenant *tenant_cfg;
    enum gw_session_kind kind;
    enum session_state state;
    /* who asked, copied from the request */
    char request_id[GW_REQUEST_ID_LEN + 1];
    char tenant[GW_MAX_TENANT_NAME + 1];
    char key_id[80];
    char client[64];
    char path[64];
    char method[8];
    /* the client */
    const struct gw_session_sink *sink;
    void *sink_data;
    h2o_timeout_entry_t init_timer; /* on the worker's session tick: init, then SESSION_READY */
    uint64_t init_deadline_ms;
    /* the request, once known */
    int have_request;
    struct moat_exec_request ereq;
    json_t *metadata; /* the request's metadata (metadata.c), for the packet; NULL: none */
    struct moat_session_open open;
    uint64_t job_id;
    uint64_t t0_ms; /* when the box was asked for (transcript offsets) */
    /* the backend */
    struct gw_bstream *bs;
    int ready;
    char *language, *version; /* from SESSION_READY */
    char *walls;              /* from SESSION_READY; NULL if the backend did not say */
    uint64_t lim_wall_ms, lim_idle_ms, lim_cpu_ms, lim_stdin_bytes, lim_output_bytes;
    uint8_t stage;        /* the stage running (enum moat_stage), 0 between stages */
    unsigned exits;       /* SESSION_EXITs received */
    int run_exited;       /* the run stage's exit came */
    int compile_failed;   /* no run stage follows */
    uint32_t out_unacked; /* output received and not yet credited */
    uint64_t out_total[3];
    uint32_t stdin_credit; /* stdin bytes the backend will take now */
    struct moat_buf stdin_q;
    size_t stdin_off;
    uint64_t stdin_total;
    int stdin_close_wanted, stdin_close_sent;
    uint8_t carry[3][4]; /* the start of a character split by a chunk, per stream */
    size_t carry_len[3];
    /* the end */
    struct gw_transcript *tr;
    struct gw_audit_entry *audit_entry;
    int decision_recorded;
    enum session_outcome outcome;
    int error_status;        /* the HTTP-like status of a refusal, for the record */
    char error_code[32];     /* the `code` of the error event */
    char error_message[512]; /* the error event's message */
    int error_sent;          /* the client has had the error event */
    uint64_t cpu_ms;
};

static const struct {
    const char *name;
    int32_t number;
} signals[] = {
    {"SIGHUP", MOAT_SIG_HUP},   {"SIGINT", MOAT_SIG_INT},   {"SIGQUIT", MOAT_SIG_QUIT}, {"SIGKILL", MOAT_SIG_KILL},
    {"SIGUSR1", MOAT_SIG_USR1}, {"SIGUSR2", MOAT_SIG_USR2}, {"SIGTERM", MOAT_SIG_TERM},
};

const char *gw_close_reason(int code)
{
    switch (code) {
    case GW_CLOSE_ALREADY_INIT:
        return "Already Initialized";
    case GW_CLOSE_INIT_TIMEOUT:
        return "Initialization Timeout";
    case GW_CLOSE_ERROR:
        return "Notified Error";
    case GW_CLOSE_NOT_INIT:
        return "Not yet Initialized";
    case GW_CLOSE_STDIN_ONLY:
        return "Can only write to stdin";
    case GW_CLOSE_BAD_SIGNAL:
        return "Invalid signal";
    case GW_CLOSE_READ_ONLY:
        return "Watchers cannot write";
    case GW_CLOSE_BAD_MESSAGE:
        return "Invalid message";
    case GW_CLOSE_JOB_COMPLETED:
        return "Job Completed";
    default:
        return "Closed";
    }
}

static uint64_t now_ms(void)
{
    return gw_monotonic_ns() / 1000000;
}

/* ------------------------------------------------------------ lifetime */

static void session_free(struct gw_session *s)
{
    if (h2o_timeout_is_linked(&s->init_timer))
        h2o_timeout_unlink(&s->init_timer);
    gw_bstream_close(s->bs);
    gw_watch_revoke(s->request_id);
    if (s->tr != NULL) {
        gw_transcript_end(s->tr, GW_CLOSE_JOB_COMPLETED);
        gw_transcript_release(s->tr);
    }
    if (s->kind == GW_SESSION_WEBSOCKET)
        gw_sessions_release(s->tenant);
    moat_buf_free(&s->stdin_q);
    if (s->have_request)
        piston_exec_request_free(&s->ereq);
    json_decref(s->metadata);
    free(s->language);
    free(s->version);
    free(s->walls);
    gw_generation_release(s->gen);
    free(s);
}

/* Freed once the sink has heard the end and no record is waited for. */
static void maybe_free(struct gw_session *s)
{
    if (s->state == S_DONE && s->audit_entry == NULL && s->sink == NULL)
        session_free(s);
}

static void audit_who(const struct gw_session *s, struct gw_audit_who *who)
{
    who->request_id = s->request_id;
    who->tenant = s->tenant;
    who->key_id = s->key_id;
    who->client = s->client;
    who->method = s->method;
    who->method_len = strlen(s->method);
    who->path = s->path;
    who->path_len = strlen(s->path);
}

static int audited(const struct gw_session *s)
{
    return s->worker->audit.enabled;
}

/* --------------------------------------------------------------- events */

static void emit(struct gw_session *s, json_t *o, int for_watchers, struct gw_tr_event *ev)
{
    char *text = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;
    size_t len = text != NULL ? strlen(text) : 0;

    json_decref(o);
    if (text != NULL && s->sink != NULL)
        s->sink->send(s->sink_data, text, len);
    if (ev != NULL) {
        if (for_watchers && text != NULL) {
            ev->message = text;
            ev->message_len = len;
            text = NULL;
        }
        ev->at_ms = s->t0_ms != 0 ? now_ms() - s->t0_ms : 0;
        if (gw_transcript_append(s->tr, ev) != 0)
            log_warnx("%s: id=%s: out of memory for the transcript", __func__, s->request_id);
    }
    free(text);
}

static json_t *event(const char *type)
{
    json_t *o = json_object();

    if (o != NULL)
        json_object_set_new(o, "type", json_string(type));
    return o;
}

static const char *stage_name(uint8_t stage)
{
    return stage == MOAT_STAGE_COMPILE ? "compile" : "run";
}

/* The error event, once: {"type":"error","message","code","request_id"}. */
static void emit_error(struct gw_session *s)
{
    json_t *o = event("error");

    if (s->error_sent || o == NULL || (s->kind == GW_SESSION_STREAM && !s->ready)) {
        /* a stream refused before it started is answered with an HTTP error instead */
        json_decref(o);
        return;
    }
    s->error_sent = 1;
    json_object_set_new(o, "message", piston_json_bytes(s->error_message, strlen(s->error_message)));
    json_object_set_new(o, "code", json_string(s->error_code[0] ? s->error_code : "session_failed"));
    json_object_set_new(o, "request_id", json_string(s->request_id));
    emit(s, o, 0, NULL);
}

static void set_error(struct gw_session *s, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void set_error(struct gw_session *s, int status, const char *code, const char *fmt, ...)
{
    va_list ap;

    if (s->error_status != 0)
        return; /* the first reason stands */
    s->error_status = status;
    snprintf(s->error_code, sizeof(s->error_code), "%s", code);
    va_start(ap, fmt);
    vsnprintf(s->error_message, sizeof(s->error_message), fmt, ap);
    va_end(ap);
}

/*
 * The part of a stream's bytes that ends on a character boundary: a
 * trailing incomplete UTF-8 sequence (a lead byte whose continuation bytes
 * have not come yet) is left for the next chunk.  Invalid bytes are not
 * held: they are replaced when the text is made.
 */
static size_t complete_prefix(const uint8_t *p, size_t len)
{
    for (size_t back = 1; back <= 3 && back <= len; back++) {
        uint8_t c = p[len - back];
        size_t need;
        if ((c & 0xC0) == 0x80)
            continue; /* a continuation byte: look further back */
        need = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
        return need > back ? len - back : len;
    }
    return len;
}

/* Byte i of a data event's pre then data. */
static uint8_t joined_byte(const struct gw_tr_event *ev, size_t i)
{
    return i < ev->pre_len ? ev->pre[i] : ev->data[i - ev->pre_len];
}

/*
 * Which of stream's bytes a data event's message carries (ev->pre: what the
 * stream's carry held, then ev->data), and what waits in the carry for
 * the rest of its character; flush: nothing waits.  The message is made
 * from these bytes when it is sent (gw_transcript_message), so the event
 * holds the chunk once.
 */
static void split_carry(struct gw_session *s, int stream, struct gw_tr_event *ev, int flush)
{
    uint8_t tail[3] = {0};
    size_t n, t, keep;

    memcpy(ev->pre, s->carry[stream], s->carry_len[stream]);
    ev->pre_len = (uint8_t)s->carry_len[stream];
    n = ev->pre_len + ev->len;
    t = n < sizeof(tail) ? n : sizeof(tail); /* complete_prefix looks at the last 3 bytes only */
    for (size_t i = 0; i < t; i++)
        tail[i] = joined_byte(ev, n - t + i);
    keep = flush ? n : n - t + complete_prefix(tail, t);
    s->carry_len[stream] = n - keep;
    for (size_t i = keep; i < n; i++)
        s->carry[stream][i - keep] = joined_byte(ev, i);
    ev->msg_len = keep;
}

/* Output to the client, then into the transcript (which takes ev's bytes):
 * the client's message is made as its watchers' will be. */
static void emit_output(struct gw_session *s, struct gw_tr_event *ev)
{
    size_t len;
    char *text = gw_transcript_message(ev, &len);

    if (text != NULL && s->sink != NULL)
        s->sink->send(s->sink_data, text, len);
    else if (text == NULL && len != 0)
        log_warnx("%s: id=%s: out of memory for an output message", __func__, s->request_id);
    free(text);
    emit(s, NULL, 0, ev);
}

/* What a stage left in the carry goes out (as replacement characters). */
static void flush_carry(struct gw_session *s)
{
    for (int k = GW_TR_STDOUT; k <= GW_TR_STDERR; k++) {
        struct gw_tr_event ev = {.kind = GW_TR_DATA, .stream = (uint8_t)k};
        size_t len;
        char *text;
        if (s->carry_len[k] == 0)
            continue;
        /* the bytes are in the transcript already: the client's copy only */
        split_carry(s, k, &ev, 1);
        if ((text = gw_transcript_message(&ev, &len)) != NULL && s->sink != NULL)
            s->sink->send(s->sink_data, text, len);
        free(text);
    }
}

/* ------------------------------------------------------------ the result */

struct stage_acc {
    struct moat_buf out, err, both;
};

/* The run's result as execute gives it, from the transcript; its output
 * only with acc (a stream's last line needs it, the packet does not). */
static void build_result(struct gw_session *s, struct moat_exec_result *res, struct stage_acc *acc)
{
    uint8_t stage = 0;

    memset(res, 0, sizeof(*res));
    res->language = s->language;
    res->version = s->version;
    res->walls = s->walls;
    for (size_t i = 0; i < s->tr->n; i++) {
        const struct gw_tr_event *e = &s->tr->ev[i];
        int k = stage == MOAT_STAGE_COMPILE ? 0 : 1;
        struct moat_stage_result *st = k == 0 ? &res->compile : &res->run;
        switch (e->kind) {
        case GW_TR_STAGE:
            stage = e->stage;
            (stage == MOAT_STAGE_COMPILE ? &res->compile : &res->run)->present = 1;
            break;
        case GW_TR_DATA:
            if (acc == NULL || e->stream == GW_TR_STDIN || stage == 0)
                break;
            (void)moat_buf_append(e->stream == GW_TR_STDOUT ? &acc[k].out : &acc[k].err, e->data, e->len);
            (void)moat_buf_append(&acc[k].both, e->data, e->len);
            break;
        case GW_TR_EXIT:
            st->present = 1;
            st->status = e->exit.status;
            st->has_code = e->exit.has_code;
            st->code = e->exit.code;
            st->has_signal = e->exit.has_signal;
            st->signal = e->exit.signal;
            st->message = e->exit.message;
            st->cpu_ms = e->exit.cpu_ms;
            st->wall_ms = e->exit.wall_ms;
            st->memory_bytes = e->exit.memory_bytes;
            break;
        default:
            break;
        }
    }
    for (int k = 0; acc != NULL && k < 2; k++) {
        struct moat_stage_result *st = k == 0 ? &res->compile : &res->run;
        st->stdout_data = acc[k].out.data;
        st->stdout_len = acc[k].out.len;
        st->stderr_data = acc[k].err.data;
        st->stderr_len = acc[k].err.len;
        st->output_data = acc[k].both.data;
        st->output_len = acc[k].both.len;
    }
}

static json_t *limits_json(const struct gw_session *s)
{
    json_t *o = json_object();

    if (o == NULL)
        return NULL;
    json_object_set_new(o, "wall_ms", json_integer((json_int_t)s->lim_wall_ms));
    json_object_set_new(o, "idle_ms", json_integer((json_int_t)s->lim_idle_ms));
    json_object_set_new(o, "cpu_ms", json_integer((json_int_t)s->lim_cpu_ms));
    json_object_set_new(o, "stdin_bytes", json_integer((json_int_t)s->lim_stdin_bytes));
    json_object_set_new(o, "output_bytes", json_integer((json_int_t)s->lim_output_bytes));
    return o;
}

/* The end, told once to the sink (which never calls back afterwards) and
 * to the watchers; the session is freed unless a record is waited for. */
static void tell_end(struct gw_session *s, int code)
{
    const struct gw_session_sink *sink = s->sink;

    log_info("session: id=%s tenant=%s job=%llu ended: %s close=%d stdin=%llu stdout=%llu stderr=%llu", s->request_id, s->tenant,
             (unsigned long long)s->job_id,
             s->outcome == OUT_COMPLETED     ? "completed"
             : s->outcome == OUT_CLIENT_GONE ? "client closed"
             : s->outcome == OUT_LIMIT       ? "stdin limit"
                                             : s->error_message,
             code, (unsigned long long)s->out_total[GW_TR_STDIN], (unsigned long long)s->out_total[GW_TR_STDOUT],
             (unsigned long long)s->out_total[GW_TR_STDERR]);
    s->state = S_DONE;
    gw_transcript_end(s->tr, code);
    gw_watch_revoke(s->request_id);
    s->sink = NULL;
    if (sink != NULL) {
        struct gw_session_end how = {gw_close_reason(code),
                                     s->outcome == OUT_COMPLETED ? 0 : (s->error_status ? s->error_status : 500),
                                     s->error_code,
                                     s->error_message,
                                     s->ready,
                                     s->cpu_ms};
        sink->end(s->sink_data, code, &how);
    }
    maybe_free(s);
}

/* How the session's end reads (the client's close code, and its
 * watchers'): 4999 when the program ended, 1000 when the client left,
 * 4002 after an error. */
static int end_code(const struct gw_session *s)
{
    switch (s->outcome) {
    case OUT_COMPLETED:
        return GW_CLOSE_JOB_COMPLETED;
    case OUT_CLIENT_GONE:
        return GW_CLOSE_NORMAL;
    default:
        return GW_CLOSE_ERROR;
    }
}

static void on_result_durable(void *arg, int ok, uint64_t seq)
{
    struct gw_session *s = arg;

    (void)seq;
    s->audit_entry = NULL;
    if (!ok) {
        log_warnx("%s: id=%s: the session's result record could not be made durable", __func__, s->request_id);
        set_error(s, 503, "audit_unavailable", "audit log unavailable: the session's transcript could not be recorded");
        if (s->outcome == OUT_COMPLETED)
            s->outcome = OUT_BROKEN;
        emit_error(s);
    }
    tell_end(s, end_code(s));
}

/* The result without its output (acc's, freed). */
static void drop_output(struct moat_exec_result *res, struct stage_acc acc[2])
{
    for (int k = 0; k < 2; k++) {
        struct moat_stage_result *st = k == 0 ? &res->compile : &res->run;
        st->stdout_data = st->stderr_data = st->output_data = NULL;
        st->stdout_len = st->stderr_len = st->output_len = 0;
        moat_buf_free(&acc[k].out);
        moat_buf_free(&acc[k].err);
        moat_buf_free(&acc[k].both);
    }
}

/* A stream's last line: the whole result, as execute answers, with
 * "type":"result" first.  The result's text is made once and turned into
 * the line in place. */
static void send_stream_result(struct gw_session *s, struct moat_exec_result *res, struct stage_acc acc[2])
{
    static const char head[] = "{\"type\":\"result\",";
    char *text = piston_exec_result_json(res), *line;
    size_t n;

    drop_output(res, acc);
    if (text == NULL || (n = strlen(text)) < 3 || text[0] != '{' || (line = realloc(text, n + sizeof(head))) == NULL) {
        free(text);
        log_warnx("%s: id=%s: out of memory for the result line", __func__, s->request_id);
        return;
    }
    memmove(line + sizeof(head) - 1, line + 1, n); /* the members and the NUL */
    memcpy(line, head, sizeof(head) - 1);
    s->sink->send(s->sink_data, line, n + sizeof(head) - 2);
    free(line);
}

/* 6. One result record, with the transcript as its packet. */
static void record_result(struct gw_session *s)
{
    struct moat_exec_result res;
    struct stage_acc acc[2];
    struct gw_audit_output output[2];
    struct gw_audit_who who;
    struct gw_session_packet packet;
    struct gw_audit_filler fill = {0, gw_audit_session_packet_write, &packet};
    struct gw_audit_entry *entry;
    char *result_json, *text = NULL;
    size_t len = 0;
    json_t *b, *limits, *extra;
    int line = s->kind == GW_SESSION_STREAM && s->sink != NULL && s->outcome == OUT_COMPLETED, have_packet;

    memset(acc, 0, sizeof(acc));
    build_result(s, &res, line ? acc : NULL);
    s->cpu_ms = res.compile.cpu_ms + res.run.cpu_ms;
    if (line)
        send_stream_result(s, &res, acc);
    drop_output(&res, acc);
    if (!audited(s) || !s->decision_recorded) {
        tell_end(s, end_code(s));
        return;
    }
    audit_who(s, &who);
    limits = limits_json(s);
    /* the packet's result without the output: the transcript holds every
     * byte of it once, which keeps a session's packet near 4/3 of its
     * stdin and output (the writer's fixed 8 MiB packet cap, moat-api(7)) */
    result_json = piston_exec_result_json(&res);
    have_packet = gw_audit_session_packet(&packet, &who, &s->ereq, s->metadata, limits, s->tr, result_json) == 0;
    fill.len = packet.len;
    free(result_json);
    if ((b = gw_audit_base(&who, "result")) != NULL) {
        if (s->outcome == OUT_COMPLETED)
            gw_audit_add_decision(b, "allowed", NULL, NULL, 200, NULL);
        else
            gw_audit_add_decision(b, "failed",
                                  s->outcome == OUT_CLIENT_GONE ? "client_closed"
                                  : s->outcome == OUT_LIMIT     ? "limit"
                                                                : "backend",
                                  NULL, s->error_status ? s->error_status : 499,
                                  s->error_message[0] ? s->error_message : "the client closed the session");
        /* the output is in the transcript only: counted and hashed there */
        gw_audit_transcript_output(s->tr, output);
        gw_audit_add_session_result(b, &s->ereq, &res, output);
        if ((extra = json_object()) != NULL) {
            json_object_set_new(extra, "transcript_events", json_integer((json_int_t)s->tr->n));
            json_object_set_new(extra, "stdin_bytes", json_integer((json_int_t)s->out_total[GW_TR_STDIN]));
            json_object_set(extra, "limits", limits != NULL ? limits : json_null());
            json_object_set_new(b, "session", extra);
        }
        text = gw_audit_dump(b, &len);
        json_decref(b);
    }
    json_decref(limits);
    s->state = S_RESULT;
    if (text == NULL) {
        gw_audit_session_packet_free(&packet);
        on_result_durable(s, 0, 0);
        return;
    }
    /* the packet is written into the queue here; a failure calls back now
     * (and may free s) */
    entry = gw_audit_submit_filled(&s->worker->audit, text, len, have_packet ? &fill : NULL, on_result_durable, s);
    free(text);
    gw_audit_session_packet_free(&packet);
    if (entry != NULL)
        s->audit_entry = entry;
}

/* 5. The session is over; records its result once. */
static void finish(struct gw_session *s, enum session_outcome outcome)
{
    if (s->state >= S_RESULT)
        return;
    s->outcome = outcome;
    gw_bstream_close(s->bs); /* the backend kills the box if it still runs */
    s->bs = NULL;
    if (outcome != OUT_COMPLETED && outcome != OUT_CLIENT_GONE)
        emit_error(s);
    record_result(s);
}

/* A refusal before anything ran: the error event and the end. */
static void refuse(struct gw_session *s, int status, const char *code, const char *message)
{
    set_error(s, status, code, "%s", message);
    finish(s, OUT_REFUSED);
}

/* ---------------------------------------------------------- the backend */

static int send_frame(struct gw_session *s, struct moat_buf *frame)
{
    if (s->bs == NULL || gw_bstream_send(s->bs, frame) != 0) {
        moat_buf_free(frame);
        return -1;
    }
    return 0;
}

static void send_credit(struct gw_session *s)
{
    struct moat_buf f = {0};
    const char *why;

    if (s->out_unacked == 0 || s->bs == NULL || s->state != S_RUNNING)
        return;
    if (s->sink != NULL && s->sink->backlog(s->sink_data) > GW_SESSION_SINK_HIGH)
        return; /* gw_session_sink_progress tries again */
    if (moat_encode_session_credit(&f, s->job_id, s->out_unacked, &why) == 0 && send_frame(s, &f) == 0)
        s->out_unacked = 0;
}

/* Stdin the backend has room for, then stdin's close once all of it went. */
static void pump_stdin(struct gw_session *s)
{
    const char *why;

    while (s->bs != NULL && s->ready && s->stdin_off < s->stdin_q.len && s->stdin_credit > 0) {
        size_t n = s->stdin_q.len - s->stdin_off;
        struct moat_buf f = {0};
        if (n > MOAT_SESSION_CHUNK_MAX)
            n = MOAT_SESSION_CHUNK_MAX;
        if (n > s->stdin_credit)
            n = s->stdin_credit;
        if (moat_encode_session_stdin(&f, s->job_id, s->stdin_q.data + s->stdin_off, n, &why) != 0 || send_frame(s, &f) != 0)
            return;
        s->stdin_off += n;
        s->stdin_credit -= (uint32_t)n;
    }
    if (s->stdin_off == s->stdin_q.len) {
        s->stdin_q.len = 0;
        s->stdin_off = 0;
    }
    if (s->bs != NULL && s->ready && s->stdin_close_wanted && !s->stdin_close_sent && s->stdin_q.len == 0) {
        struct moat_buf f = {0};
        if (moat_encode_session_stdin_close(&f, s->job_id, &why) == 0 && send_frame(s, &f) == 0)
            s->stdin_close_sent = 1;
    }
}

static void broken(struct gw_session *s, const char *what)
{
    log_warnx("session: id=%s job=%llu: the backend broke the session protocol: %s", s->request_id, (unsigned long long)s->job_id,
              what);
    set_error(s, 502, "backend_failed", "bad reply from backend");
    finish(s, OUT_BROKEN);
}

static void on_ready(struct gw_session *s, const uint8_t *payload, size_t len)
{
    struct moat_session_ready r;
    const char *why;
    json_t *o, *limits;

    if (s->ready || moat_decode_session_ready(payload, len, &r, &why) != 0) {
        broken(s, s->ready ? "a second SESSION_READY" : why);
        return;
    }
    s->ready = 1;
    if (h2o_timeout_is_linked(&s->init_timer))
        h2o_timeout_unlink(&s->init_timer);
    s->language = r.language;
    s->version = r.version;
    s->walls = r.walls;
    r.language = r.version = r.walls = NULL;
    s->lim_wall_ms = r.wall_ms;
    s->lim_idle_ms = r.idle_ms;
    s->lim_cpu_ms = r.cpu_ms;
    s->lim_stdin_bytes = r.stdin_bytes;
    s->lim_output_bytes = r.output_bytes;
    moat_session_ready_free(&r);
    if ((o = event("runtime")) != NULL) {
        json_object_set_new(o, "language", json_string(s->language));
        json_object_set_new(o, "version", json_string(s->version));
        if (s->walls != NULL)
            json_object_set_new(o, "walls", json_string(s->walls));
        json_object_set_new(o, "request_id", json_string(s->request_id));
        if ((limits = limits_json(s)) != NULL)
            json_object_set_new(o, "limits", limits);
    }
    emit(s, o, 0, NULL);
    if (s->stdin_total > s->lim_stdin_bytes) {
        set_error(s, 413, "stdin_limit", "stdin exceeds the session's limit of %llu bytes", (unsigned long long)s->lim_stdin_bytes);
        finish(s, OUT_LIMIT);
        return;
    }
    pump_stdin(s);
}

static void on_stage(struct gw_session *s, const uint8_t *payload, size_t len)
{
    struct moat_session_stage st;
    const char *why;
    json_t *o;

    if (moat_decode_session_stage(payload, len, &st, &why) != 0) {
        broken(s, why);
        return;
    }
    if (!s->ready || s->stage != 0 || (st.stage == MOAT_STAGE_COMPILE && s->exits > 0) || s->run_exited || s->compile_failed) {
        broken(s, "a stage out of order");
        return;
    }
    s->stage = st.stage;
    if ((o = event("stage")) != NULL)
        json_object_set_new(o, "stage", json_string(stage_name(st.stage)));
    struct gw_tr_event ev = {.kind = GW_TR_STAGE, .stage = st.stage};
    emit(s, o, 1, &ev);
}

static void on_output(struct gw_session *s, const uint8_t *payload, size_t len)
{
    struct moat_session_output out;
    const char *why;
    int stream;

    if (moat_decode_session_output(payload, len, &out, &why) != 0) {
        broken(s, why);
        return;
    }
    stream = out.stream == MOAT_STREAM_STDERR ? GW_TR_STDERR : GW_TR_STDOUT;
    if (s->stage == 0 || out.len > MOAT_SESSION_WINDOW - s->out_unacked ||
        out.len > s->lim_output_bytes + MOAT_SESSION_CHUNK_MAX - s->out_total[stream]) {
        moat_session_output_free(&out);
        broken(s, s->stage == 0 ? "output outside a stage" : "output beyond the window or the output cap");
        return;
    }
    s->out_unacked += (uint32_t)out.len;
    s->out_total[stream] += out.len;
    struct gw_tr_event ev = {.kind = GW_TR_DATA, .stream = (uint8_t)stream, .data = out.data, .len = out.len};
    out.data = NULL; /* the transcript takes the bytes */
    split_carry(s, stream, &ev, 0);
    emit_output(s, &ev);
    moat_session_output_free(&out);
    send_credit(s);
}

static void on_exit_frame(struct gw_session *s, const uint8_t *payload, size_t len)
{
    struct moat_session_exit x;
    const char *why, *clock;
    json_t *o;

    if (moat_decode_session_exit(payload, len, &x, &why) != 0) {
        broken(s, why);
        return;
    }
    if (s->stage == 0 || x.stage != s->stage) {
        moat_session_exit_free(&x);
        broken(s, "an exit of a stage that is not running");
        return;
    }
    flush_carry(s);
    s->stage = 0;
    s->exits++;
    if (x.stage == MOAT_STAGE_RUN)
        s->run_exited = 1;
    else if (x.result.status != MOAT_STATUS_OK)
        s->compile_failed = 1;
    clock = moat_clock_name(x.clock);
    if ((o = event("exit")) != NULL) {
        json_object_set_new(o, "stage", json_string(stage_name(x.stage)));
        if (piston_stage_status_fields(o, &x.result) != 0) {
            json_decref(o);
            o = NULL;
        } else {
            json_object_set_new(o, "clock", clock != NULL ? json_string(clock) : json_null());
        }
    }
    struct gw_tr_event ev = {.kind = GW_TR_EXIT, .stage = x.stage, .clock = x.clock, .exit = x.result};
    memset(&x.result, 0, sizeof(x.result)); /* the transcript takes the message */
    emit(s, o, 1, &ev);
    moat_session_exit_free(&x);
}

static void on_error_frame(struct gw_session *s, const uint8_t *payload, size_t len)
{
    struct moat_error e;
    const char *why;
    int status = 502;
    const char *code = gw_code(GW_CODE_SESSION_BACKEND_FAILED);

    if (moat_decode_error(payload, len, &e, &why) != 0) {
        broken(s, why);
        return;
    }
    switch (e.code) {
    case MOAT_ERR_BAD_REQUEST:
    case MOAT_ERR_UNKNOWN_LANGUAGE:
    case MOAT_ERR_LIMIT:
        status = 400;
        code = gw_code(GW_CODE_SESSION_BAD_REQUEST);
        break;
    case MOAT_ERR_BUSY:
        status = 503;
        code = gw_code(GW_CODE_BACKEND_BUSY);
        break;
    case MOAT_ERR_INTERNAL:
        status = 500;
        code = gw_code(GW_CODE_SESSION_BACKEND_FAILED);
        break;
    case MOAT_ERR_UNAVAILABLE:
        status = 503;
        code = gw_code(GW_CODE_ISOLATION_UNAVAILABLE);
        break;
    default:
        break;
    }
    set_error(s, status, code, "%s", e.message != NULL && e.message[0] ? e.message : "backend refused the session");
    moat_error_free(&e);
    finish(s, OUT_REFUSED);
}

static void on_backend_frame(void *data, const struct moat_frame_header *h, const uint8_t *payload)
{
    struct gw_session *s = data;

    if (s->state != S_RUNNING)
        return;
    if (h->job_id != s->job_id) {
        broken(s, "a frame of another job");
        return;
    }
    if (!s->ready && h->type != MOAT_MSG_SESSION_READY && h->type != MOAT_MSG_ERROR) {
        broken(s, "a frame before SESSION_READY");
        return;
    }
    switch (h->type) {
    case MOAT_MSG_SESSION_READY:
        on_ready(s, payload, h->length);
        break;
    case MOAT_MSG_SESSION_STAGE:
        on_stage(s, payload, h->length);
        break;
    case MOAT_MSG_SESSION_OUTPUT:
        on_output(s, payload, h->length);
        break;
    case MOAT_MSG_SESSION_EXIT:
        on_exit_frame(s, payload, h->length);
        break;
    case MOAT_MSG_SESSION_CREDIT: {
        uint32_t n;
        const char *why;
        if (moat_decode_session_credit(payload, h->length, &n, &why) != 0 || n > MOAT_SESSION_WINDOW - s->stdin_credit) {
            broken(s, "a bad stdin credit");
            return;
        }
        s->stdin_credit += n;
        pump_stdin(s);
        break;
    }
    case MOAT_MSG_ERROR:
        on_error_frame(s, payload, h->length);
        break;
    default:
        broken(s, "a message a session does not carry");
        break;
    }
}

static void on_backend_end(void *data, const char *why)
{
    struct gw_session *s = data;

    s->bs = NULL; /* freed by the stream after this returns */
    if (s->state != S_RUNNING)
        return;
    if (s->stage == 0 && (s->run_exited || s->compile_failed)) {
        finish(s, OUT_COMPLETED);
        return;
    }
    log_warnx("session: id=%s job=%llu: the backend connection ended early: %s", s->request_id, (unsigned long long)s->job_id, why);
    set_error(s, 503, "backend_unavailable", "backend unavailable");
    finish(s, OUT_BROKEN);
}

/* 3. Connect and open. */
static void open_backend(struct gw_session *s)
{
    struct moat_buf f = {0};
    const char *why;

    s->state = S_RUNNING;
    s->t0_ms = now_ms();
    s->init_deadline_ms = s->t0_ms + s->cfg->backend_timeout_ms;
    if (!h2o_timeout_is_linked(&s->init_timer))
        h2o_timeout_link(s->worker->ctx.loop, &s->worker->session_tick, &s->init_timer);
    if ((s->bs = gw_bstream_open(s->worker->ctx.loop, s->cfg->backend_socket, on_backend_frame, on_backend_end, s)) == NULL) {
        set_error(s, 503, "backend_unavailable", "backend unavailable");
        finish(s, OUT_BROKEN);
        return;
    }
    s->stdin_credit = MOAT_SESSION_WINDOW;
    if (moat_encode_session_open(&f, s->job_id, &s->open, &why) != 0 || send_frame(s, &f) != 0) {
        set_error(s, 500, "internal", "the session could not be opened");
        finish(s, OUT_BROKEN);
        return;
    }
    /* the initial stdin went in SESSION_OPEN; the window is the backend's */
}

/* ------------------------------------------------------------- init */

static void on_decision_durable(void *arg, int ok, uint64_t seq)
{
    struct gw_session *s = arg;

    (void)seq;
    s->audit_entry = NULL;
    if (!ok) {
        s->decision_recorded = 0;
        refuse(s, 503, "audit_unavailable", "audit log unavailable: request refused");
        return;
    }
    if (s->sink == NULL) {
        /* the client left while the decision was being recorded: its
         * result says so, and no box starts */
        finish(s, OUT_CLIENT_GONE);
        return;
    }
    open_backend(s);
}

/* 2. The allowed decision record, durable before the box starts. */
static void record_decision(struct gw_session *s, const struct moat_buf *canonical)
{
    struct gw_audit_who who;
    struct gw_audit_entry *entry;
    json_t *b;
    char *text = NULL;
    size_t len = 0;

    if (!audited(s)) {
        open_backend(s);
        return;
    }
    s->state = S_RECORDING;
    audit_who(s, &who);
    if ((b = gw_audit_base(&who, "request")) != NULL) {
        gw_audit_add_decision(b, "allowed", NULL, NULL, 200, NULL);
        gw_audit_add_request(b, &s->ereq, canonical->data + MOAT_FRAME_HEADER_SIZE, canonical->len - MOAT_FRAME_HEADER_SIZE);
        json_object_set_new(b, "session", json_true());
        text = gw_audit_dump(b, &len);
        json_decref(b);
    }
    if (text == NULL) {
        refuse(s, 500, "internal", "out of memory");
        return;
    }
    s->decision_recorded = 1;
    entry = gw_audit_submit(&s->worker->audit, text, len, NULL, 0, on_decision_durable, s);
    free(text);
    if (entry != NULL) /* NULL: it failed, and its callback ran (and may have freed s) */
        s->audit_entry = entry;
}

/* The SESSION_OPEN of the request: its ceilings are the tenant's, a
 * stream's clocks those of an execute. */
static int encode_open(struct gw_session *s, struct moat_buf *frame)
{
    const struct policy_session_limits *sl = &s->tenant_cfg->policy.sessions;
    const char *why;

    memset(&s->open, 0, sizeof(s->open));
    s->open.req = s->ereq;
    s->open.wall_ms = sl->wall_ms;
    s->open.idle_ms = sl->idle_ms;
    s->open.cpu_ms = sl->cpu_ms;
    s->open.stdin_bytes = sl->stdin_bytes;
    s->open.output_bytes = sl->output_bytes;
    if (s->kind == GW_SESSION_STREAM) {
        /* an execute's clocks: its run and compile timeouts bound the wall
         * clock, its run timeout the CPU clock */
        uint64_t wall =
            (uint64_t)s->ereq.run_timeout_ms + (uint64_t)(s->ereq.compile_timeout_ms > 0 ? s->ereq.compile_timeout_ms : 0);
        if (wall < s->open.wall_ms)
            s->open.wall_ms = wall;
        if ((uint64_t)s->ereq.run_timeout_ms < s->open.cpu_ms)
            s->open.cpu_ms = (uint64_t)s->ereq.run_timeout_ms;
        s->open.req.run_timeout_ms = -1;
    }
    s->job_id = backend_next_job_id();
    if (moat_encode_session_open(frame, s->job_id, &s->open, &why) != 0) {
        set_error(s, 400, "bad_request", "request rejected: %s", why != NULL ? why : "cannot encode");
        return -1;
    }
    return 0;
}

static void begin(struct gw_session *s, int record)
{
    struct moat_buf frame = {0};

    s->stdin_total = s->ereq.stdin_len;
    s->out_total[GW_TR_STDIN] = s->ereq.stdin_len;
    if (encode_open(s, &frame) != 0) {
        finish(s, OUT_REFUSED);
        return;
    }
    if (record)
        record_decision(s, &frame);
    else
        open_backend(s);
    moat_buf_free(&frame);
}

void gw_session_init(struct gw_session *s, json_t *init)
{
    struct policy_verdict v;
    char err[GW_ERR_MSG_MAX];

    if (h2o_timeout_is_linked(&s->init_timer))
        h2o_timeout_unlink(&s->init_timer);
    if (piston_parse_exec_object(init, &s->ereq, &s->metadata, err, sizeof(err)) != 0) {
        refuse(s, 400, "bad_request", err);
        return;
    }
    s->have_request = 1;
    if (gw_judge_exec(s->worker, &s->tenant_cfg->policy, POLICY_EP_CONNECT, &s->ereq, &v) != 0) {
        struct gw_audit_who who;
        /* a denial, recorded like the pipeline's */
        if (audited(s)) {
            json_t *b;
            audit_who(s, &who);
            if ((b = gw_audit_base(&who, "request")) != NULL) {
                size_t len;
                char *text;
                gw_audit_add_decision(b, "denied", gw_reason_name(gw_reason_of_policy(v.reason)), v.rule, v.http_status, v.message);
                if ((text = gw_audit_dump(b, &len)) != NULL)
                    gw_audit_submit(&s->worker->audit, text, len, NULL, 0, NULL, NULL);
                free(text);
                json_decref(b);
            }
        }
        refuse(s, v.http_status, gw_error_code(gw_reason_of_policy(v.reason), v.http_status), v.message);
        return;
    }
    begin(s, 1);
}

void gw_session_start(struct gw_session *s, struct moat_exec_request *ereq, json_t *metadata)
{
    s->ereq = *ereq;
    s->metadata = json_incref(metadata);
    memset(ereq, 0, sizeof(*ereq));
    s->have_request = 1;
    s->decision_recorded = audited(s); /* the pipeline's step 8 */
    s->stdin_close_wanted = 1;         /* its stdin is the request's */
    begin(s, 0);
}

int gw_session_initialised(const struct gw_session *s)
{
    return s->have_request;
}

/* The two deadlines before a session runs: its `init` (a WebSocket's), and
 * the backend's SESSION_READY (backend.timeout_ms, as for an execute's reply). */
static void on_init_timeout(h2o_timeout_entry_t *entry)
{
    struct gw_session *s = H2O_STRUCT_FROM_MEMBER(struct gw_session, init_timer, entry);

    if (s->state != S_WAIT_INIT && (s->state != S_RUNNING || s->ready))
        return;
    if (now_ms() < s->init_deadline_ms) {
        h2o_timeout_link(s->worker->ctx.loop, &s->worker->session_tick, &s->init_timer);
        return;
    }
    if (s->state == S_RUNNING) {
        log_warnx("session: id=%s job=%llu: no SESSION_READY from the backend in time", s->request_id,
                  (unsigned long long)s->job_id);
        set_error(s, 504, "backend_timeout", "backend timed out");
        finish(s, OUT_BROKEN);
        return;
    }
    log_info("session: id=%s tenant=%s: no init within %llu ms", s->request_id, s->tenant,
             (unsigned long long)s->cfg->sessions.init_timeout_ms);
    s->outcome = OUT_CLIENT_GONE;
    tell_end(s, GW_CLOSE_INIT_TIMEOUT);
}

/* ------------------------------------------------------------- the client */

void gw_session_stdin(struct gw_session *s, const uint8_t *data, size_t len)
{
    uint64_t cap = s->ready ? s->lim_stdin_bytes : s->tenant_cfg->policy.sessions.stdin_bytes;

    if (s->state >= S_RESULT || len == 0)
        return;
    if (len > cap - (s->stdin_total < cap ? s->stdin_total : cap) || s->stdin_close_wanted) {
        if (s->stdin_close_wanted)
            set_error(s, 400, "bad_request", "stdin was closed");
        else
            set_error(s, 413, "stdin_limit", "stdin exceeds the session's limit of %llu bytes", (unsigned long long)cap);
        finish(s, OUT_LIMIT);
        return;
    }
    if (moat_buf_append(&s->stdin_q, data, len) != 0) {
        set_error(s, 500, "internal", "out of memory");
        finish(s, OUT_BROKEN);
        return;
    }
    s->stdin_total += len;
    s->out_total[GW_TR_STDIN] += len;
    uint8_t *copy = malloc(len);
    if (copy != NULL) {
        memcpy(copy, data, len);
        struct gw_tr_event ev = {.kind = GW_TR_DATA, .stream = GW_TR_STDIN, .data = copy, .len = len};
        emit(s, NULL, 0, &ev);
    }
    pump_stdin(s);
}

void gw_session_stdin_close(struct gw_session *s)
{
    if (s->state >= S_RESULT || s->stdin_close_wanted)
        return;
    s->stdin_close_wanted = 1;
    struct gw_tr_event ev = {.kind = GW_TR_STDIN_CLOSE};
    emit(s, NULL, 0, &ev);
    pump_stdin(s);
}

int gw_session_signal(struct gw_session *s, const char *name)
{
    struct moat_buf f = {0};
    const char *why;

    for (size_t i = 0; i < sizeof(signals) / sizeof(signals[0]); i++) {
        if (strcmp(signals[i].name, name) != 0)
            continue;
        if (s->state != S_RUNNING || s->bs == NULL)
            return 0; /* over, or not started: nothing to signal */
        if (moat_encode_session_signal(&f, s->job_id, signals[i].number, &why) == 0)
            (void)send_frame(s, &f);
        struct gw_tr_event ev = {.kind = GW_TR_SIGNAL, .signal = signals[i].number};
        emit(s, NULL, 0, &ev);
        return 0;
    }
    return -1;
}

void gw_session_watch(struct gw_session *s)
{
    char token[GW_WATCH_TOKEN_LEN + 1];
    const struct gw_session_config *sc = &s->cfg->sessions;
    json_t *o;

    if (s->state >= S_RESULT)
        return;
    if (sc->max_watchers == 0 ||
        gw_watch_issue(s->tr, s->tenant, s->request_id, sc->watch_token_ttl_s, sc->max_watchers, token) != 0) {
        o = event("error");
        json_object_set_new(
            o, "message",
            json_string(sc->max_watchers == 0 ? "watching is disabled on this gateway" : "no watch token could be issued"));
        json_object_set_new(o, "code", json_string("watch_unavailable"));
        json_object_set_new(o, "request_id", json_string(s->request_id));
        emit(s, o, 0, NULL);
        return;
    }
    o = event("watch");
    json_object_set_new(o, "token", json_string(token));
    json_object_set_new(o, "path", json_string("/api/v2/watch"));
    json_object_set_new(o, "expires_in", json_integer((json_int_t)sc->watch_token_ttl_s));
    emit(s, o, 0, NULL);
    OPENSSL_cleanse(token, sizeof(token));
    log_info("session: id=%s tenant=%s: watch token issued (%u s)", s->request_id, s->tenant, sc->watch_token_ttl_s);
}

void gw_session_sink_progress(struct gw_session *s)
{
    send_credit(s);
}

void gw_session_client_gone(struct gw_session *s, int code)
{
    s->sink = NULL; /* never called again */
    switch (s->state) {
    case S_WAIT_INIT:
        s->state = S_DONE;
        break;
    case S_RECORDING:
        return; /* on_decision_durable ends it */
    case S_RUNNING:
        if (code != 0 && code != GW_CLOSE_JOB_COMPLETED && s->error_status == 0)
            set_error(s, 400, "bad_request", "the session was closed: %s", gw_close_reason(code));
        finish(s, code != 0 ? OUT_REFUSED : OUT_CLIENT_GONE); /* may free s (no record to wait for) */
        return;
    default:
        break; /* S_RESULT: the result record's callback ends it */
    }
    maybe_free(s);
}

/* ------------------------------------------------------------- creation */

struct gw_session *gw_session_new(struct gw_request *r, enum gw_session_kind kind)
{
    struct gw_session *s = calloc(1, sizeof(*s));
    h2o_req_t *req = r->req;

    if (s == NULL || (s->tr = gw_transcript_new()) == NULL) {
        free(s);
        return NULL;
    }
    s->worker = r->worker;
    s->gen = r->gen;
    gw_generation_hold(s->gen);
    s->cfg = r->cfg;
    s->tenant_cfg = r->tenant_cfg;
    s->kind = kind;
    s->state = S_WAIT_INIT;
    memcpy(s->request_id, r->request_id, sizeof(s->request_id));
    snprintf(s->tenant, sizeof(s->tenant), "%s", r->tenant);
    snprintf(s->key_id, sizeof(s->key_id), "%s", r->key_id);
    snprintf(s->client, sizeof(s->client), "%s", r->client);
    snprintf(s->method, sizeof(s->method), "%.*s", (int)(req->method.len < 7 ? req->method.len : 7), req->method.base);
    snprintf(s->path, sizeof(s->path), "%.*s", (int)(req->path_normalized.len < 63 ? req->path_normalized.len : 63),
             req->path_normalized.base);
    s->init_timer.cb = on_init_timeout;
    return s;
}

void gw_session_attach(struct gw_session *s, const struct gw_session_sink *sink, void *sink_data)
{
    s->sink = sink;
    s->sink_data = sink_data;
    if (s->kind == GW_SESSION_WEBSOCKET && s->state == S_WAIT_INIT) {
        s->init_deadline_ms = now_ms() + s->cfg->sessions.init_timeout_ms;
        h2o_timeout_link(s->worker->ctx.loop, &s->worker->session_tick, &s->init_timer);
    }
}
