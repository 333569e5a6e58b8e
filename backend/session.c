/*
 * session.c - a live session on the connection that opened it.
 *
 * Theory of operation
 * -------------------
 * The gateway opens one connection per session and sends SESSION_OPEN: an
 * exec request and the session's ceilings.  server.c hands it here, on the
 * connection's own thread, and closes the connection when the session is
 * over.  In order:
 *
 *   session_accept   decode it strictly and check it as job.c checks a batch
 *                    request (job_plan_init: the same validation and limit
 *                    code); the session's clocks and caps are the language's
 *                    lowered by the ceilings, then by run_timeout.  A
 *                    refusal is an ERROR with the session's job id.
 *   session_take_slot  a session slot (pool.c's session pool, never a batch
 *                    slot): busy at once when every one is taken.
 *   session_start    the clocks start; the box gets its plan (box_start);
 *                    SESSION_READY says so, with the limits in force.
 *   session_stage    per stage (compile for compiled languages, run unless
 *                    the compile failed): SESSION_STAGE, the stage under the
 *                    one supervision loop of box.c with this session as its
 *                    struct box_io, SESSION_EXIT.
 *   session_finish   an ERROR if the session was refused while it ran (a bad
 *                    frame, stdin over its cap), the slot back to the pool.
 *
 * While a stage runs, box.c's loop polls the box's pipes and this
 * connection.  Output read from a pipe goes out at once as SESSION_OUTPUT,
 * with its offset in ms since the session started; the loop reads a pipe
 * only while the gateway's credit (MOAT_SESSION_WINDOW) and the stream's
 * output cap leave room, so a gateway that does not grant credit stalls the
 * program in write() and nothing here grows.  The connection is read without
 * blocking into a buffer of one frame, whatever the program does, so a
 * signal, a credit or the gateway's going away always gets through; stdin
 * is kept in a buffer bounded by the window granted (more is a bad
 * request) and credited back once written into the box's pipe (or dropped
 * because the program closed its stdin).  Frames to the gateway are sent
 * blocking: they are small, at most a window of output is outstanding, and
 * the gateway always reads (a send that fails or times out means it is
 * gone).
 *
 * Clocks (box.c keeps them): wall, the session's whole lifetime, as an
 * absolute deadline for every stage (the compile stage keeps its batch
 * limit within it); idle, for the run stage: no output read and no stdin
 * received or written (output held back for credit is not idleness); CPU,
 * the run stage's cgroup usage.  The first to fire kills the box; the stage
 * ends TO with that clock.
 *
 * Signals go to the run stage's program group through the box's init, inside
 * its pid namespace (box_signal, box_init.c): no host process can be hit and
 * no pid can have been reused.  A signal that arrives before the run stage
 * has started is held (at most once per signal, like a pending signal) and
 * delivered, in signal-number order, as the run stage starts; if no run
 * stage starts it is dropped.  The gateway closing the connection kills the
 * box at once.
 */
#include "session.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "log.h"
#include "moat_io.h"

#define CONN_IN_MAX   (MOAT_FRAME_HEADER_SIZE + MOAT_SESSION_DATA_FRAME_MAX) /* one frame the gateway may send */
#define HANG_UP_READS 8 /* what the gateway sent after the end: a window and its frames at most */

struct session {
    struct backend *b;
    int fd;
    uint64_t job;
    struct moat_session_open open;
    struct job_plan plan;
    struct slot *slot;
    uint64_t start_ms;    /* offsets count from here */
    uint64_t deadline_ms; /* the wall clock */
    int stage;            /* BOX_STAGE_* running now */
    struct moat_buf out;  /* the frame being sent */

    /* the connection: one frame's worth read ahead, without blocking */
    uint8_t *in;
    size_t in_len;
    int peer_gone;
    uint16_t err_code; /* a refusal while running, sent once the box is gone */
    char err_msg[MOAT_MAX_MESSAGE_LEN / 2];

    /* output: the gateway's credit, what each stream has sent */
    uint32_t out_window;
    uint64_t out_sent[2];

    /* stdin: the request's own first (not windowed), then SESSION_STDIN's */
    size_t first_off;
    struct moat_buf in_data;
    size_t in_data_off;
    uint64_t stdin_total;
    int stdin_closed;

    /* signals */
    int run_started;
    uint32_t held_signals; /* bit n: wire signal n */
};

static uint64_t offset_ms(const struct session *ss)
{
    uint64_t now = box_now_ms();
    return now > ss->start_ms ? now - ss->start_ms : 0;
}

/* ---- frames to the gateway --------------------------------------------------- */

/* Sends the frame an encoder just wrote into ss->out (rc its result; *why
 * its reason, read here, after the encoder set it: an argument `why`
 * would be read in an unspecified order with the call that sets it).  A
 * send that fails means the gateway is gone: nothing more is sent. */
static void send_encoded(struct session *ss, int rc, const char *const *why)
{
    if (rc != 0)
        log_warnx("%s: session %llu: encode: %s", __func__, (unsigned long long)ss->job, *why != NULL ? *why : "?");
    else if (!ss->peer_gone && moat_send_full(ss->fd, ss->out.data, ss->out.len) != 0)
        ss->peer_gone = 1;
    ss->out.len = 0;
}

static void send_error(struct session *ss, uint16_t code, const char *message)
{
    const char *why = NULL;
    send_encoded(ss, moat_encode_error(&ss->out, ss->job, code, message, &why), &why);
}

/* A refusal while the session runs: the first one counts; the box is
 * killed by the caller and the ERROR sent once it is gone. */
static void session_refuse(struct session *ss, uint16_t code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void session_refuse(struct session *ss, uint16_t code, const char *fmt, ...)
{
    va_list ap;
    if (ss->err_code)
        return;
    ss->err_code = code;
    va_start(ap, fmt);
    vsnprintf(ss->err_msg, sizeof(ss->err_msg), fmt, ap);
    va_end(ap);
}

/* ---- the box's output (struct box_io) ---------------------------------------- */

/* Done with the gateway: output is read and dropped, the box dies. */
static int session_over(const struct session *ss)
{
    return ss->peer_gone || ss->err_code;
}

/* What stream may still send before its output cap. */
static uint64_t cap_left(const struct session *ss, int stream)
{
    uint64_t cap = ss->plan.session.output_bytes;
    return cap > ss->out_sent[stream] ? cap - ss->out_sent[stream] : 0;
}

static size_t session_room(void *ctx, int stream)
{
    const struct session *ss = ctx;
    if (session_over(ss))
        return SIZE_MAX;
    /* one byte past the cap, so that going over it shows */
    uint64_t left = cap_left(ss, stream);
    uint64_t room = left < MOAT_SESSION_CHUNK_MAX ? left + 1 : MOAT_SESSION_CHUNK_MAX;
    return ss->out_window < room ? ss->out_window : (size_t)room;
}

static void session_output(void *ctx, struct box_run *run, int stream, const uint8_t *data, size_t len)
{
    struct session *ss = ctx;
    const char *why = NULL;

    if (session_over(ss))
        return;
    uint64_t left = cap_left(ss, stream);
    size_t give = len <= left ? len : (size_t)left;
    if (give > 0) {
        struct moat_session_output o = {stream == BOX_STDOUT ? MOAT_STREAM_STDOUT : MOAT_STREAM_STDERR, offset_ms(ss),
                                        (uint8_t *)(uintptr_t)data, give};
        send_encoded(ss, moat_encode_session_output(&ss->out, ss->job, &o, &why), &why);
        ss->out_window -= (uint32_t)give;
        ss->out_sent[stream] += give;
    }
    if (give < len && stream == BOX_STDOUT)
        box_run_kill(run, MOAT_STATUS_OL, 0, "stdout length exceeded");
    else if (give < len)
        box_run_kill(run, MOAT_STATUS_EL, 0, "stderr length exceeded");
    if (ss->peer_gone)
        box_run_kill(run, MOAT_STATUS_XX, 0, "the gateway went away");
}

/* ---- the box's stdin (struct box_io) ------------------------------------------- */

static size_t session_stdin_pending(void *ctx, const uint8_t **data)
{
    struct session *ss = ctx;
    const struct moat_exec_request *req = &ss->plan.view;

    if (ss->first_off < req->stdin_len) {
        *data = req->stdin_data + ss->first_off;
        return req->stdin_len - ss->first_off;
    }
    *data = ss->in_data.data + ss->in_data_off;
    return ss->in_data.len - ss->in_data_off;
}

/* Written into the pipe or dropped: SESSION_STDIN's bytes go back to the
 * gateway as credit (the request's own stdin was never windowed). */
static void session_stdin_consumed(void *ctx, size_t n)
{
    struct session *ss = ctx;
    const char *why = NULL;

    if (ss->first_off < ss->plan.view.stdin_len) {
        ss->first_off += n;
        return;
    }
    ss->in_data_off += n;
    if (ss->in_data_off == ss->in_data.len)
        ss->in_data.len = ss->in_data_off = 0;
    send_encoded(ss, moat_encode_session_credit(&ss->out, ss->job, (uint32_t)n, &why), &why);
}

static int session_stdin_ended(void *ctx)
{
    const struct session *ss = ctx;
    return ss->stdin_closed;
}

/* ---- frames from the gateway ----------------------------------------------------- */

static int host_signal(int32_t wire)
{
    switch (wire) {
    case MOAT_SIG_HUP:
        return SIGHUP;
    case MOAT_SIG_INT:
        return SIGINT;
    case MOAT_SIG_QUIT:
        return SIGQUIT;
    case MOAT_SIG_KILL:
        return SIGKILL;
    case MOAT_SIG_USR1:
        return SIGUSR1;
    case MOAT_SIG_USR2:
        return SIGUSR2;
    case MOAT_SIG_TERM:
        return SIGTERM;
    default:
        return 0;
    }
}

static void deliver_signal(struct session *ss, int32_t wire)
{
    struct errbuf e;
    if (box_signal(ss->slot, host_signal(wire), &e) != 0)
        log_warnx("%s: session %llu: %s", __func__, (unsigned long long)ss->job, e.msg);
}

/* The run stage was told to start: held signals go now, in number order. */
static void session_started(void *ctx, struct box_run *run)
{
    struct session *ss = ctx;
    (void)run;
    if (ss->stage != BOX_STAGE_RUN)
        return;
    ss->run_started = 1;
    for (int32_t sig = 1; sig < 32; sig++)
        if (ss->held_signals & (1u << sig))
            deliver_signal(ss, sig);
    ss->held_signals = 0;
}

static void on_stdin(struct session *ss, struct box_run *run, const uint8_t *payload, size_t len)
{
    struct moat_session_stdin in;
    const char *why = NULL;

    if (ss->stdin_closed) {
        session_refuse(ss, MOAT_ERR_BAD_REQUEST, "SESSION_STDIN after SESSION_STDIN_CLOSE");
        return;
    }
    if (moat_decode_session_stdin(payload, len, &in, &why) != 0) {
        session_refuse(ss, MOAT_ERR_BAD_REQUEST, "malformed session stdin: %s", why);
        return;
    }
    if (ss->stdin_total + in.len > ss->plan.session.stdin_bytes) {
        session_refuse(ss, MOAT_ERR_LIMIT, "stdin exceeds the session's limit of %llu bytes",
                       (unsigned long long)ss->plan.session.stdin_bytes);
    } else if (ss->in_data.len - ss->in_data_off + in.len > MOAT_SESSION_WINDOW) {
        session_refuse(ss, MOAT_ERR_BAD_REQUEST, "SESSION_STDIN beyond the %u-byte window", MOAT_SESSION_WINDOW);
    } else {
        /* keep the buffer within the window: what was written goes first */
        if (ss->in_data_off > 0) {
            memmove(ss->in_data.data, ss->in_data.data + ss->in_data_off, ss->in_data.len - ss->in_data_off);
            ss->in_data.len -= ss->in_data_off;
            ss->in_data_off = 0;
        }
        if (moat_buf_append(&ss->in_data, in.data, in.len) != 0)
            session_refuse(ss, MOAT_ERR_INTERNAL, "out of memory");
        ss->stdin_total += in.len;
        box_run_active(run);
    }
    moat_session_stdin_free(&in);
}

static void on_stdin_close(struct session *ss, const uint8_t *payload, size_t len)
{
    const char *why = NULL;
    if (moat_decode_session_stdin_close(payload, len, &why) != 0)
        session_refuse(ss, MOAT_ERR_BAD_REQUEST, "malformed session stdin close: %s", why);
    else if (ss->stdin_closed)
        session_refuse(ss, MOAT_ERR_BAD_REQUEST, "SESSION_STDIN_CLOSE sent twice");
    ss->stdin_closed = 1;
}

static void on_signal(struct session *ss, const uint8_t *payload, size_t len)
{
    const char *why = NULL;
    int32_t sig;
    if (moat_decode_session_signal(payload, len, &sig, &why) != 0)
        session_refuse(ss, MOAT_ERR_BAD_REQUEST, "malformed session signal: %s", why);
    else if (ss->run_started)
        deliver_signal(ss, sig);
    else
        ss->held_signals |= 1u << sig;
}

static void on_credit(struct session *ss, const uint8_t *payload, size_t len)
{
    const char *why = NULL;
    uint32_t bytes;
    if (moat_decode_session_credit(payload, len, &bytes, &why) != 0)
        session_refuse(ss, MOAT_ERR_BAD_REQUEST, "malformed session credit: %s", why);
    else if (bytes > MOAT_SESSION_WINDOW - ss->out_window)
        session_refuse(ss, MOAT_ERR_BAD_REQUEST, "SESSION_CREDIT beyond the %u-byte window", MOAT_SESSION_WINDOW);
    else
        ss->out_window += bytes;
}

/* One whole frame from the gateway. */
static void on_frame(struct session *ss, struct box_run *run, const struct moat_frame_header *h, const uint8_t *payload)
{
    switch (h->type) {
    case MOAT_MSG_SESSION_STDIN:
        on_stdin(ss, run, payload, h->length);
        break;
    case MOAT_MSG_SESSION_STDIN_CLOSE:
        on_stdin_close(ss, payload, h->length);
        break;
    case MOAT_MSG_SESSION_SIGNAL:
        on_signal(ss, payload, h->length);
        break;
    case MOAT_MSG_SESSION_CREDIT:
        on_credit(ss, payload, h->length);
        break;
    default: /* frame_wanted() let no other type through */
        session_refuse(ss, MOAT_ERR_INTERNAL, "unexpected frame");
    }
}

/* A header the session accepts, checked before its payload is waited for. */
static int frame_wanted(struct session *ss, const struct moat_frame_header *h)
{
    switch (h->type) {
    case MOAT_MSG_SESSION_STDIN:
    case MOAT_MSG_SESSION_STDIN_CLOSE:
    case MOAT_MSG_SESSION_SIGNAL:
    case MOAT_MSG_SESSION_CREDIT:
        break;
    default:
        session_refuse(ss, MOAT_ERR_BAD_REQUEST, "unexpected message type %u in a session", h->type);
        return 0;
    }
    if (h->job_id != ss->job) {
        session_refuse(ss, MOAT_ERR_BAD_REQUEST, "session frame for an unknown job id");
        return 0;
    }
    return 1;
}

/* Reads what the connection has (never blocking) and acts on every whole
 * frame; a partial one waits in the buffer, which holds the largest. */
static void read_connection(struct session *ss, struct box_run *run)
{
    ssize_t n = recv(ss->fd, ss->in + ss->in_len, CONN_IN_MAX - ss->in_len, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n <= 0) {
        ss->peer_gone = 1; /* closed, or an error: either way it is gone */
        return;
    }
    ss->in_len += (size_t)n;
    size_t off = 0;
    while (!session_over(ss) && ss->in_len - off >= MOAT_FRAME_HEADER_SIZE) {
        struct moat_frame_header h;
        const char *why = NULL;
        if (moat_frame_parse_header(ss->in + off, ss->in_len - off, &h, &why) != 0) {
            session_refuse(ss, MOAT_ERR_BAD_REQUEST, "%s", why);
            break;
        }
        if (!frame_wanted(ss, &h) || ss->in_len - off - MOAT_FRAME_HEADER_SIZE < h.length)
            break;
        on_frame(ss, run, &h, ss->in + off + MOAT_FRAME_HEADER_SIZE);
        off += MOAT_FRAME_HEADER_SIZE + h.length;
    }
    memmove(ss->in, ss->in + off, ss->in_len - off);
    ss->in_len -= off;
}

/* struct box_io's extra descriptor: the connection became readable. */
static int session_connection(void *ctx, struct box_run *run)
{
    struct session *ss = ctx;

    read_connection(ss, run);
    if (!session_over(ss))
        return 0;
    box_run_kill(run, MOAT_STATUS_XX, 0, ss->peer_gone ? "the gateway went away" : "the session was refused");
    return 1; /* nothing more is read */
}

/* ---- the steps ---------------------------------------------------------------- */

/* Decodes and checks SESSION_OPEN, and plans the box: 0, or -1 after an ERROR. */
static int session_accept(struct session *ss, const struct moat_frame_header *h, const uint8_t *payload)
{
    const char *why = NULL;
    struct job_error je;
    char msg[MOAT_MAX_MESSAGE_LEN / 2];

    if (moat_decode_session_open(payload, h->length, &ss->open, &why) != 0) {
        snprintf(msg, sizeof(msg), "malformed session open: %s", why);
        log_warnx("%s: session %llu: %s", __func__, (unsigned long long)ss->job, msg);
        send_error(ss, MOAT_ERR_BAD_REQUEST, msg);
        return -1;
    }
    const struct session_limits ceilings = {ss->open.wall_ms, ss->open.idle_ms, ss->open.cpu_ms, ss->open.stdin_bytes,
                                            ss->open.output_bytes};
    if (job_plan_init(ss->b, &ss->open.req, &ceilings, &ss->plan, &je) != 0) {
        char lang[64];
        log_escape(lang, sizeof(lang), ss->open.req.language, strlen(ss->open.req.language), 32);
        log_info("session %llu: %s refused: %s", (unsigned long long)ss->job, lang, je.message);
        send_error(ss, je.code, je.message);
        return -1;
    }
    return 0;
}

static int session_take_slot(struct session *ss)
{
    struct errbuf e;
    int got = pool_acquire(&ss->b->sessions, &ss->slot, &e);

    if (got == 0)
        return 0;
    if (got == POOL_BUSY && ss->b->sessions.nslots == 0)
        send_error(ss, MOAT_ERR_BUSY, "sessions are disabled on this backend (--sessions 0)");
    else if (got == POOL_BUSY)
        send_error(ss, MOAT_ERR_BUSY, "server busy: every session slot is taken, try again later");
    else
        send_error(ss, MOAT_ERR_INTERNAL, "no box could be prepared for the session");
    return -1;
}

/* The clocks start; the box gets its plan; SESSION_READY. */
static int session_start(struct session *ss)
{
    const struct session_limits *lim = &ss->plan.session;
    struct moat_session_ready ready = {
        ss->plan.lang->name, ss->plan.lang->version, lim->wall_ms,      lim->idle_ms,
        lim->cpu_ms,         lim->stdin_bytes,       lim->output_bytes, (char *)(uintptr_t)box_walls(ss->plan.job.isolation)};
    const char *why = NULL;
    struct errbuf e;

    ss->start_ms = box_now_ms();
    ss->deadline_ms = ss->start_ms + lim->wall_ms;
    ss->out_window = MOAT_SESSION_WINDOW;
    if (box_start(ss->slot, &ss->plan.job, &e) != 0) {
        log_warnx("%s: session %llu: slot %d: %s", __func__, (unsigned long long)ss->job, ss->slot->index, e.msg);
        send_error(ss, MOAT_ERR_INTERNAL, "the box could not be prepared");
        return -1;
    }
    send_encoded(ss, moat_encode_session_ready(&ss->out, ss->job, &ready, &why), &why);
    return ss->peer_gone ? -1 : 0;
}

static void send_exit(struct session *ss, int stage, const struct box_result *br)
{
    uint8_t clock = br->status != MOAT_STATUS_TO ? 0 : br->clock ? br->clock : MOAT_CLOCK_WALL;
    struct moat_session_exit ex = {stage == BOX_STAGE_COMPILE ? MOAT_STAGE_COMPILE : MOAT_STAGE_RUN,
                                   offset_ms(ss),
                                   clock,
                                   {.present = 1,
                                    .has_code = br->has_code,
                                    .code = br->code,
                                    .has_signal = br->has_signal,
                                    .signal = br->signal,
                                    .status = br->status,
                                    .message = br->message[0] ? (char *)(uintptr_t)br->message : NULL,
                                    .cpu_ms = br->cpu_ms,
                                    .wall_ms = br->wall_ms,
                                    .memory_bytes = br->memory_bytes}};
    const char *why = NULL;
    send_encoded(ss, moat_encode_session_exit(&ss->out, ss->job, &ex, &why), &why);
}

/* One stage: SESSION_STAGE, the stage under supervision, SESSION_EXIT.
 * Returns the stage's status, or -1 when the session ends here (the box
 * failed, the session was refused or the gateway went away). */
static int session_stage(struct session *ss, int stage)
{
    const struct box_io io = {.ctx = ss,
                              .room = session_room,
                              .output = session_output,
                              .stdin_pending = session_stdin_pending,
                              .stdin_consumed = session_stdin_consumed,
                              .stdin_ended = session_stdin_ended,
                              .extra_fd = ss->fd,
                              .extra = session_connection,
                              .deadline_ms = ss->deadline_ms,
                              .started = session_started};
    struct moat_session_stage st = {stage == BOX_STAGE_COMPILE ? MOAT_STAGE_COMPILE : MOAT_STAGE_RUN, offset_ms(ss)};
    struct box_result br;
    const char *why = NULL;
    struct errbuf e;

    ss->stage = stage;
    send_encoded(ss, moat_encode_session_stage(&ss->out, ss->job, &st, &why), &why);
    if (session_over(ss))
        return -1;
    memset(&br, 0, sizeof(br));
    if (box_run_stage_io(ss->slot, stage, &ss->plan.job.stages[stage], &io, &br, &e) != 0) {
        log_warnx("%s: session %llu: slot %d: %s", __func__, (unsigned long long)ss->job, ss->slot->index, e.msg);
        session_refuse(ss, MOAT_ERR_INTERNAL, "the box could not be run");
        return -1;
    }
    if (session_over(ss))
        return -1;
    send_exit(ss, stage, &br);
    return br.status;
}

/*
 * After the last frame: the gateway reads end-of-file at once (SHUT_WR),
 * and what it sent meanwhile (credit for the last output, say) is read and
 * dropped, so that the close does not turn into a reset on its side.
 */
static void hang_up(struct session *ss)
{
    if (ss->peer_gone)
        return;
    (void)shutdown(ss->fd, SHUT_WR);
    for (int i = 0; i < HANG_UP_READS; i++)
        if (recv(ss->fd, ss->in, CONN_IN_MAX, MSG_DONTWAIT) <= 0)
            break;
}

/* The refusal, if any; the slot back to its pool (the box is discarded off
 * this path); everything freed. */
static void session_finish(struct session *ss)
{
    if (ss->err_code && !ss->peer_gone) {
        log_info("session %llu: refused while running: %s", (unsigned long long)ss->job, ss->err_msg);
        send_error(ss, ss->err_code, ss->err_msg);
    }
    hang_up(ss);
    if (ss->slot != NULL)
        pool_release(&ss->b->sessions, ss->slot);
    job_plan_free(&ss->plan);
    moat_session_open_free(&ss->open);
    moat_buf_free(&ss->out);
    moat_buf_free(&ss->in_data);
    free(ss->in);
    free(ss);
}

void session_run(struct backend *b, int fd, const struct moat_frame_header *h, const uint8_t *payload)
{
    struct session *ss = calloc(1, sizeof(*ss));
    int status = -1;

    if (ss == NULL || (ss->in = malloc(CONN_IN_MAX)) == NULL) {
        struct moat_buf out = {0};
        const char *why = NULL;
        if (moat_encode_error(&out, h->job_id, MOAT_ERR_INTERNAL, "out of memory", &why) == 0)
            (void)moat_send_full(fd, out.data, out.len);
        moat_buf_free(&out);
        free(ss);
        return;
    }
    ss->b = b;
    ss->fd = fd;
    ss->job = h->job_id;
    if (session_accept(ss, h, payload) != 0 || session_take_slot(ss) != 0 || session_start(ss) != 0) {
        session_finish(ss);
        return;
    }
    if (ss->plan.job.stages[BOX_STAGE_COMPILE].present)
        status = session_stage(ss, BOX_STAGE_COMPILE);
    if (!ss->plan.job.stages[BOX_STAGE_COMPILE].present || status == MOAT_STATUS_OK)
        status = session_stage(ss, BOX_STAGE_RUN);
    log_info("session %llu: %s %s: %s", (unsigned long long)ss->job, ss->plan.lang->name, ss->plan.lang->version,
             ss->peer_gone  ? "the gateway went away"
             : ss->err_code ? ss->err_msg
             : status >= 0  ? moat_status_name((uint8_t)status)
                            : "ended");
    session_finish(ss);
}
