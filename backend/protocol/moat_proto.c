/*
 * moat_proto.c - encoder and strict decoder for the gateway <-> backend
 * messages.  Wire format: see PROTOCOL.md.
 *
 * The decoder is the first thing the privileged backend runs on bytes from
 * another process, so it is written as typed readers over a bounded cursor:
 * every length is checked against what is left, every tag is known for its
 * message, non-repeatable tags appear at most once, required tags must be
 * present, strings are NUL-free UTF-8 of bounded length and integers have
 * their exact width.  Anything else is an error with a reason.
 */
#include "moat_proto.h"

#include <stdlib.h>
#include <string.h>

/* ---- tags ------------------------------------------------------------- */

enum {
    /* exec request */
    TAG_REQ_LANGUAGE = 1,
    TAG_REQ_VERSION = 2,
    TAG_REQ_FILE = 3,
    TAG_REQ_STDIN = 4,
    TAG_REQ_ARG = 5,
    TAG_REQ_RUN_TIMEOUT = 6,
    TAG_REQ_COMPILE_TIMEOUT = 7,
    TAG_REQ_RUN_MEMORY = 8,
    TAG_REQ_COMPILE_MEMORY = 9,
    TAG_REQ_RUN_CPU = 10,
    TAG_REQ_COMPILE_CPU = 11,
    TAG_REQ_TEST = 12,       /* EXEC_REQUEST only */
    TAG_REQ_TESTS_WALL = 13, /* EXEC_REQUEST only */
    TAG_REQ_RUN_STACK = 14,
    TAG_REQ_RUN_PROCESSES = 15,
    TAG_REQ_RUN_FILE_SIZE = 16,
    TAG_REQ_COMPILER_OPTION = 17, /* repeated */
    TAG_REQ_ISOLATION = 18,       /* u8 enum moat_isolation; absent: namespaces */
    /* test case (nested in TAG_REQ_TEST) */
    TAG_TC_STDIN = 1,
    TAG_TC_ARG = 2,
    TAG_TC_RUN_TIMEOUT = 3,
    TAG_TC_RUN_MEMORY = 4,
    TAG_TC_RUN_CPU = 5,
    /* file (nested in TAG_REQ_FILE) */
    TAG_FILE_NAME = 1,
    TAG_FILE_CONTENT = 2,
    /* exec result */
    TAG_RES_LANGUAGE = 1,
    TAG_RES_VERSION = 2,
    TAG_RES_WALLS = 3,
    TAG_RES_COMPILE = 16,
    TAG_RES_RUN = 17,
    TAG_RES_TEST = 18, /* repeated */
    /* stage (nested in TAG_RES_COMPILE / TAG_RES_RUN) */
    TAG_ST_STDOUT = 1,
    TAG_ST_STDERR = 2,
    TAG_ST_OUTPUT = 3,
    TAG_ST_CODE = 4,
    TAG_ST_SIGNAL = 5,
    TAG_ST_STATUS = 6,
    TAG_ST_MESSAGE = 7,
    TAG_ST_CPU_MS = 8,
    TAG_ST_WALL_MS = 9,
    TAG_ST_MEMORY = 10,
    TAG_ST_CLOCK = 11,
    /* error */
    TAG_ERR_CODE = 1,
    TAG_ERR_MESSAGE = 2,
    /* runtimes */
    TAG_RT_RUNTIME = 1,
    TAG_RT_LOAD = 2,
    TAG_RT_WALLS = 3,
    TAG_LD_SLOTS = 1,
    TAG_LD_BUSY = 2,
    TAG_LD_QUEUE_MAX = 3,
    TAG_LD_QUEUED = 4,
    TAG_LD_SESSION_SLOTS = 5,
    TAG_LD_SESSIONS_BUSY = 6,
    TAG_RTE_LANGUAGE = 1,
    TAG_RTE_VERSION = 2,
    TAG_RTE_ALIAS = 3,
    TAG_RTE_COMPILED = 4,
    TAG_RTE_OPTION_PATTERN = 5, /* repeated */
    TAG_RTE_ISOLATIONS = 6,     /* u8: bit n set when isolation n can run; absent: namespaces only */
    /* session stdin */
    TAG_SIN_DATA = 1,
    /* session signal */
    TAG_SIG_SIGNAL = 1,
    /* session output */
    TAG_OUT_STREAM = 1,
    TAG_OUT_OFFSET = 2,
    TAG_OUT_DATA = 3,
    /* session stage */
    TAG_SST_STAGE = 1,
    TAG_SST_OFFSET = 2,
    /* session exit; the result is a stage (TAG_ST_*) */
    TAG_EX_STAGE = 1,
    TAG_EX_OFFSET = 2,
    TAG_EX_CLOCK = 3,
    TAG_EX_RESULT = 4,
    /* session credit */
    TAG_CR_BYTES = 1,
    /* session open: the exec request's tags (TAG_REQ_*), then the ceilings */
    TAG_SO_WALL = 20,
    TAG_SO_IDLE = 21,
    TAG_SO_CPU = 22,
    TAG_SO_STDIN = 23,
    TAG_SO_OUTPUT = 24,
    /* session ready */
    TAG_SR_LANGUAGE = 1,
    TAG_SR_VERSION = 2,
    TAG_SR_WALL = 3,
    TAG_SR_IDLE = 4,
    TAG_SR_CPU = 5,
    TAG_SR_STDIN = 6,
    TAG_SR_OUTPUT = 7,
    TAG_SR_WALLS = 8,
};

#define TLV_HEADER_SIZE 6 /* u16 tag, u32 length */

/* ---- byte order ------------------------------------------------------- */

static void put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (24 - 8 * i));
}

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (56 - 8 * i));
}

static uint16_t get_u16(const uint8_t *p)
{
    return (uint16_t)((p[0] << 8) | p[1]);
}

static uint32_t get_u32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return v;
}

/* ---- writers ---------------------------------------------------------- */

/* An encoder writes into *b; on any failure the caller rewinds b->len. */
struct writer {
    struct moat_buf *b;
    int failed;
    const char *why;
};

static void w_fail(struct writer *w, const char *why)
{
    if (!w->failed) {
        w->failed = 1;
        w->why = why;
    }
}

static void w_tlv(struct writer *w, uint16_t tag, const void *data, size_t len)
{
    uint8_t hdr[TLV_HEADER_SIZE];
    if (w->failed)
        return;
    if (len > MOAT_FRAME_MAX_PAYLOAD) {
        w_fail(w, "field too large");
        return;
    }
    put_u16(hdr, tag);
    put_u32(hdr + 2, (uint32_t)len);
    if (moat_buf_append(w->b, hdr, sizeof(hdr)) != 0 || moat_buf_append(w->b, data, len) != 0)
        w_fail(w, "out of memory");
}

static void w_str(struct writer *w, uint16_t tag, const char *s, size_t max)
{
    if (s == NULL)
        return;
    size_t len = strlen(s);
    if (len > max) {
        w_fail(w, "string field too long");
        return;
    }
    w_tlv(w, tag, s, len);
}

static void w_u64(struct writer *w, uint16_t tag, uint64_t v)
{
    uint8_t p[8];
    put_u64(p, v);
    w_tlv(w, tag, p, sizeof(p));
}

static void w_u32(struct writer *w, uint16_t tag, uint32_t v)
{
    uint8_t p[4];
    put_u32(p, v);
    w_tlv(w, tag, p, sizeof(p));
}

static void w_u16(struct writer *w, uint16_t tag, uint16_t v)
{
    uint8_t p[2];
    put_u16(p, v);
    w_tlv(w, tag, p, sizeof(p));
}

static void w_u8(struct writer *w, uint16_t tag, uint8_t v)
{
    w_tlv(w, tag, &v, 1);
}

/* Opens a nested TLV; returns the offset to patch in w_nest_end(). */
static size_t w_nest_begin(struct writer *w, uint16_t tag)
{
    size_t at = w->b->len;
    w_tlv(w, tag, NULL, 0);
    return at;
}

static void w_nest_end(struct writer *w, size_t at)
{
    if (w->failed)
        return;
    size_t len = w->b->len - at - TLV_HEADER_SIZE;
    if (len > MOAT_FRAME_MAX_PAYLOAD) {
        w_fail(w, "field too large");
        return;
    }
    put_u32(w->b->data + at + 2, (uint32_t)len);
}

static size_t frame_begin(struct writer *w, uint8_t type, uint64_t job_id)
{
    uint8_t hdr[MOAT_FRAME_HEADER_SIZE] = {0};
    size_t at = w->b->len;
    hdr[0] = MOAT_PROTO_VERSION;
    hdr[1] = type;
    put_u64(hdr + 8, job_id);
    if (moat_buf_append(w->b, hdr, sizeof(hdr)) != 0)
        w_fail(w, "out of memory");
    return at;
}

static int frame_end(struct writer *w, size_t at, const char **why)
{
    if (!w->failed) {
        size_t len = w->b->len - at - MOAT_FRAME_HEADER_SIZE;
        if (len > MOAT_FRAME_MAX_PAYLOAD)
            w_fail(w, "message exceeds the frame size cap");
        else
            put_u32(w->b->data + at + 4, (uint32_t)len);
    }
    if (w->failed) {
        w->b->len = at;
        if (why)
            *why = w->why;
        return -1;
    }
    return 0;
}

/* ---- encoders --------------------------------------------------------- */

/* An exec request's fields: the whole of EXEC_REQUEST, the start of SESSION_OPEN. */
static void encode_request_fields(struct writer *w, const struct moat_exec_request *req)
{
    if (req->language == NULL || req->version == NULL)
        w_fail(w, "language and version are required");
    if (req->nfiles < 1 || req->nfiles > MOAT_MAX_FILES)
        w_fail(w, "file count out of range");
    if (req->nargs > MOAT_MAX_ARGS)
        w_fail(w, "too many arguments");
    w_str(w, TAG_REQ_LANGUAGE, req->language, MOAT_MAX_NAME_LEN);
    w_str(w, TAG_REQ_VERSION, req->version, MOAT_MAX_NAME_LEN);
    for (size_t i = 0; i < req->nfiles && !w->failed; i++) {
        size_t f = w_nest_begin(w, TAG_REQ_FILE);
        if (req->files[i].name == NULL)
            w_fail(w, "file name missing");
        w_str(w, TAG_FILE_NAME, req->files[i].name, MOAT_MAX_NAME_LEN);
        w_tlv(w, TAG_FILE_CONTENT, req->files[i].content, req->files[i].content_len);
        w_nest_end(w, f);
    }
    if (req->stdin_len > 0)
        w_tlv(w, TAG_REQ_STDIN, req->stdin_data, req->stdin_len);
    for (size_t i = 0; i < req->nargs; i++)
        w_str(w, TAG_REQ_ARG, req->args[i], MOAT_MAX_ARG_LEN);
    if (req->run_timeout_ms >= 0)
        w_u64(w, TAG_REQ_RUN_TIMEOUT, (uint64_t)req->run_timeout_ms);
    if (req->compile_timeout_ms >= 0)
        w_u64(w, TAG_REQ_COMPILE_TIMEOUT, (uint64_t)req->compile_timeout_ms);
    if (req->run_memory_bytes >= 0)
        w_u64(w, TAG_REQ_RUN_MEMORY, (uint64_t)req->run_memory_bytes);
    if (req->compile_memory_bytes >= 0)
        w_u64(w, TAG_REQ_COMPILE_MEMORY, (uint64_t)req->compile_memory_bytes);
    /* CPU limits: 0 is "not asked" as well as -1 (see moat_proto.h) */
    if (req->run_cpu_ms > 0)
        w_u64(w, TAG_REQ_RUN_CPU, (uint64_t)req->run_cpu_ms);
    if (req->compile_cpu_ms > 0)
        w_u64(w, TAG_REQ_COMPILE_CPU, (uint64_t)req->compile_cpu_ms);
    /* the run stage's stack, processes and file size: likewise */
    if (req->run_stack_kib > 0)
        w_u64(w, TAG_REQ_RUN_STACK, (uint64_t)req->run_stack_kib);
    if (req->run_processes > 0)
        w_u64(w, TAG_REQ_RUN_PROCESSES, (uint64_t)req->run_processes);
    if (req->run_file_size_kib > 0)
        w_u64(w, TAG_REQ_RUN_FILE_SIZE, (uint64_t)req->run_file_size_kib);
    if (req->ncompiler_options > MOAT_MAX_COMPILER_OPTIONS)
        w_fail(w, "too many compiler options");
    for (size_t i = 0; i < req->ncompiler_options && !w->failed; i++) {
        if (req->compiler_options[i] == NULL || req->compiler_options[i][0] == '\0')
            w_fail(w, "an empty compiler option");
        else
            w_str(w, TAG_REQ_COMPILER_OPTION, req->compiler_options[i], MOAT_MAX_COMPILER_OPTION_LEN);
    }
    if (req->isolation > MOAT_ISOLATION_MAX)
        w_fail(w, "isolation out of range");
    else if (req->isolation != MOAT_ISOLATION_NAMESPACES)
        w_u8(w, TAG_REQ_ISOLATION, req->isolation);
}

/* The test cases and their wall budget: EXEC_REQUEST's alone. */
static void encode_tests(struct writer *w, const struct moat_exec_request *req)
{
    if (req->ntests > MOAT_MAX_TESTS)
        w_fail(w, "too many test cases");
    for (size_t i = 0; i < req->ntests && !w->failed; i++) {
        const struct moat_test_case *tc = &req->tests[i];
        size_t at = w_nest_begin(w, TAG_REQ_TEST);
        if (tc->nargs > MOAT_MAX_ARGS)
            w_fail(w, "too many arguments in a test case");
        if (tc->stdin_len > 0)
            w_tlv(w, TAG_TC_STDIN, tc->stdin_data, tc->stdin_len);
        for (size_t j = 0; j < tc->nargs && !w->failed; j++)
            w_str(w, TAG_TC_ARG, tc->args[j], MOAT_MAX_ARG_LEN);
        /* a case's limits: > 0 asked, 0 or -1 not (moat_proto.h) */
        if (tc->run_timeout_ms > 0)
            w_u64(w, TAG_TC_RUN_TIMEOUT, (uint64_t)tc->run_timeout_ms);
        if (tc->run_memory_bytes > 0)
            w_u64(w, TAG_TC_RUN_MEMORY, (uint64_t)tc->run_memory_bytes);
        if (tc->run_cpu_ms > 0)
            w_u64(w, TAG_TC_RUN_CPU, (uint64_t)tc->run_cpu_ms);
        w_nest_end(w, at);
    }
    if (req->ntests > 0 && req->tests_wall_ms > 0)
        w_u64(w, TAG_REQ_TESTS_WALL, (uint64_t)req->tests_wall_ms);
}

int moat_encode_exec_request(struct moat_buf *out, uint64_t job_id, const struct moat_exec_request *req, const char **why)
{
    struct writer w = {out, 0, NULL};
    size_t at = frame_begin(&w, MOAT_MSG_EXEC_REQUEST, job_id);
    encode_request_fields(&w, req);
    encode_tests(&w, req);
    return frame_end(&w, at, why);
}

static void encode_stage(struct writer *w, uint16_t tag, const struct moat_stage_result *st)
{
    size_t at = w_nest_begin(w, tag);
    w_tlv(w, TAG_ST_STDOUT, st->stdout_data, st->stdout_len);
    w_tlv(w, TAG_ST_STDERR, st->stderr_data, st->stderr_len);
    w_tlv(w, TAG_ST_OUTPUT, st->output_data, st->output_len);
    if (st->has_code)
        w_u32(w, TAG_ST_CODE, (uint32_t)st->code);
    if (st->has_signal)
        w_u32(w, TAG_ST_SIGNAL, (uint32_t)st->signal);
    if (st->status > MOAT_STATUS_MAX)
        w_fail(w, "bad status");
    w_u8(w, TAG_ST_STATUS, st->status);
    w_str(w, TAG_ST_MESSAGE, st->message, MOAT_MAX_MESSAGE_LEN);
    w_u64(w, TAG_ST_CPU_MS, st->cpu_ms);
    w_u64(w, TAG_ST_WALL_MS, st->wall_ms);
    w_u64(w, TAG_ST_MEMORY, st->memory_bytes);
    if (st->clock != 0 && (st->status != MOAT_STATUS_TO || st->clock > MOAT_CLOCK_MAX))
        w_fail(w, "a stage's clock names the clock of a TO, and only of a TO");
    if (st->clock != 0)
        w_u8(w, TAG_ST_CLOCK, st->clock);
    w_nest_end(w, at);
}

int moat_walls_valid(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > MOAT_MAX_WALLS_LEN || s[0] == '+' || s[n - 1] == '+')
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] == '+' && s[i + 1] != '+')))
            return 0;
    return 1;
}

int moat_encode_exec_result(struct moat_buf *out, uint64_t job_id, const struct moat_exec_result *res, const char **why)
{
    struct writer w = {out, 0, NULL};
    size_t at = frame_begin(&w, MOAT_MSG_EXEC_RESULT, job_id);

    if (res->language == NULL || res->version == NULL || !(res->run.present || res->compile.present || res->ntests > 0))
        w_fail(&w, "language, version and a stage are required");
    if (res->ntests > MOAT_MAX_TESTS)
        w_fail(&w, "too many test case results");
    w_str(&w, TAG_RES_LANGUAGE, res->language, MOAT_MAX_NAME_LEN);
    w_str(&w, TAG_RES_VERSION, res->version, MOAT_MAX_NAME_LEN);
    if (res->walls != NULL && !moat_walls_valid(res->walls))
        w_fail(&w, "walls: names of [a-z] joined by '+'");
    w_str(&w, TAG_RES_WALLS, res->walls, MOAT_MAX_WALLS_LEN);
    if (res->compile.present)
        encode_stage(&w, TAG_RES_COMPILE, &res->compile);
    if (res->run.present)
        encode_stage(&w, TAG_RES_RUN, &res->run);
    for (size_t i = 0; i < res->ntests && !w.failed; i++)
        encode_stage(&w, TAG_RES_TEST, &res->tests[i]);
    return frame_end(&w, at, why);
}

int moat_encode_error(struct moat_buf *out, uint64_t job_id, uint16_t code, const char *message, const char **why)
{
    struct writer w = {out, 0, NULL};
    size_t at = frame_begin(&w, MOAT_MSG_ERROR, job_id);

    if (code < 1 || code > MOAT_ERR_MAX)
        w_fail(&w, "bad error code");
    w_u16(&w, TAG_ERR_CODE, code);
    w_str(&w, TAG_ERR_MESSAGE, message ? message : "", MOAT_MAX_MESSAGE_LEN);
    return frame_end(&w, at, why);
}

int moat_encode_runtimes_query(struct moat_buf *out, uint64_t job_id, const char **why)
{
    struct writer w = {out, 0, NULL};
    size_t at = frame_begin(&w, MOAT_MSG_RUNTIMES_QUERY, job_id);
    return frame_end(&w, at, why);
}

int moat_encode_runtimes(struct moat_buf *out, uint64_t job_id, const struct moat_runtimes *rt, const char **why)
{
    struct writer w = {out, 0, NULL};
    size_t at = frame_begin(&w, MOAT_MSG_RUNTIMES, job_id);

    if (rt->count > MOAT_MAX_RUNTIMES)
        w_fail(&w, "too many runtimes");
    for (size_t i = 0; i < rt->count && !w.failed; i++) {
        const struct moat_runtime *r = &rt->items[i];
        size_t n = w_nest_begin(&w, TAG_RT_RUNTIME);
        if (r->language == NULL || r->version == NULL)
            w_fail(&w, "runtime language and version are required");
        if (r->naliases > MOAT_MAX_ALIASES)
            w_fail(&w, "too many aliases");
        w_str(&w, TAG_RTE_LANGUAGE, r->language, MOAT_MAX_NAME_LEN);
        w_str(&w, TAG_RTE_VERSION, r->version, MOAT_MAX_NAME_LEN);
        for (size_t j = 0; j < r->naliases && !w.failed; j++)
            w_str(&w, TAG_RTE_ALIAS, r->aliases[j], MOAT_MAX_NAME_LEN);
        w_u8(&w, TAG_RTE_COMPILED, r->compiled ? 1 : 0);
        if (r->noption_patterns > MOAT_MAX_OPTION_PATTERNS)
            w_fail(&w, "too many compiler option patterns");
        for (size_t j = 0; j < r->noption_patterns && !w.failed; j++)
            w_str(&w, TAG_RTE_OPTION_PATTERN, r->option_patterns[j], MOAT_MAX_COMPILER_OPTION_LEN);
        if (r->isolations & ~MOAT_ISOLATIONS_ALL)
            w_fail(&w, "unknown isolation in a runtime");
        if (r->isolations != 0 && r->isolations != 1u << MOAT_ISOLATION_NAMESPACES)
            w_u8(&w, TAG_RTE_ISOLATIONS, r->isolations);
        w_nest_end(&w, n);
    }
    if (rt->load.present && !w.failed) {
        const struct moat_backend_load *l = &rt->load;
        size_t n = w_nest_begin(&w, TAG_RT_LOAD);
        w_u64(&w, TAG_LD_SLOTS, l->slots);
        w_u64(&w, TAG_LD_BUSY, l->busy);
        w_u64(&w, TAG_LD_QUEUE_MAX, l->queue_max);
        w_u64(&w, TAG_LD_QUEUED, l->queued);
        w_u64(&w, TAG_LD_SESSION_SLOTS, l->session_slots);
        w_u64(&w, TAG_LD_SESSIONS_BUSY, l->sessions_busy);
        w_nest_end(&w, n);
    }
    if (rt->walls != NULL && !moat_walls_valid(rt->walls))
        w_fail(&w, "walls: names of [a-z] joined by '+'");
    w_str(&w, TAG_RT_WALLS, rt->walls, MOAT_MAX_WALLS_LEN);
    return frame_end(&w, at, why);
}

/* ---- session encoders ------------------------------------------------- */

int moat_session_signal_allowed(int32_t signal)
{
    switch (signal) {
    case MOAT_SIG_HUP:
    case MOAT_SIG_INT:
    case MOAT_SIG_QUIT:
    case MOAT_SIG_KILL:
    case MOAT_SIG_USR1:
    case MOAT_SIG_USR2:
    case MOAT_SIG_TERM:
        return 1;
    default:
        return 0;
    }
}

/* A stdin or output chunk: 1..MOAT_SESSION_CHUNK_MAX bytes. */
static void w_chunk(struct writer *w, uint16_t tag, const uint8_t *data, size_t len)
{
    if (len == 0)
        w_fail(w, "empty data chunk");
    else if (len > MOAT_SESSION_CHUNK_MAX)
        w_fail(w, "data chunk over the cap");
    w_tlv(w, tag, data, len);
}

int moat_encode_session_stdin(struct moat_buf *out, uint64_t job_id, const uint8_t *data, size_t len, const char **why)
{
    struct writer w = {out, 0, NULL};
    size_t at = frame_begin(&w, MOAT_MSG_SESSION_STDIN, job_id);
    w_chunk(&w, TAG_SIN_DATA, data, len);
    return frame_end(&w, at, why);
}

int moat_encode_session_stdin_close(struct moat_buf *out, uint64_t job_id, const char **why)
{
    struct writer w = {out, 0, NULL};
    size_t at = frame_begin(&w, MOAT_MSG_SESSION_STDIN_CLOSE, job_id);
    return frame_end(&w, at, why);
}

int moat_encode_session_signal(struct moat_buf *out, uint64_t job_id, int32_t signal, const char **why)
{
    struct writer w = {out, 0, NULL};
    size_t at = frame_begin(&w, MOAT_MSG_SESSION_SIGNAL, job_id);
    if (!moat_session_signal_allowed(signal))
        w_fail(&w, "signal not allowed");
    w_u32(&w, TAG_SIG_SIGNAL, (uint32_t)signal);
    return frame_end(&w, at, why);
}

int moat_encode_session_output(struct moat_buf *out, uint64_t job_id, const struct moat_session_output *o, const char **why)
{
    struct writer w = {out, 0, NULL};
    size_t at = frame_begin(&w, MOAT_MSG_SESSION_OUTPUT, job_id);
    if (o->stream != MOAT_STREAM_STDOUT && o->stream != MOAT_STREAM_STDERR)
        w_fail(&w, "bad stream");
    w_u8(&w, TAG_OUT_STREAM, o->stream);
    w_u64(&w, TAG_OUT_OFFSET, o->offset_ms);
    w_chunk(&w, TAG_OUT_DATA, o->data, o->len);
    return frame_end(&w, at, why);
}

static int stage_valid(uint8_t stage)
{
    return stage == MOAT_STAGE_COMPILE || stage == MOAT_STAGE_RUN;
}

int moat_encode_session_stage(struct moat_buf *out, uint64_t job_id, const struct moat_session_stage *s, const char **why)
{
    struct writer w = {out, 0, NULL};
    size_t at = frame_begin(&w, MOAT_MSG_SESSION_STAGE, job_id);
    if (!stage_valid(s->stage))
        w_fail(&w, "bad stage");
    w_u8(&w, TAG_SST_STAGE, s->stage);
    w_u64(&w, TAG_SST_OFFSET, s->offset_ms);
    return frame_end(&w, at, why);
}

int moat_encode_session_exit(struct moat_buf *out, uint64_t job_id, const struct moat_session_exit *e, const char **why)
{
    struct writer w = {out, 0, NULL};
    size_t at = frame_begin(&w, MOAT_MSG_SESSION_EXIT, job_id);
    const struct moat_stage_result *st = &e->result;
    if (!stage_valid(e->stage))
        w_fail(&w, "bad stage");
    if (st->stdout_len || st->stderr_len || st->output_len)
        w_fail(&w, "session exit carries no output");
    if ((e->clock != 0) != (st->status == MOAT_STATUS_TO) || e->clock > MOAT_CLOCK_MAX)
        w_fail(&w, "clock must name the clock of a TO, and only of a TO");
    w_u8(&w, TAG_EX_STAGE, e->stage);
    w_u64(&w, TAG_EX_OFFSET, e->offset_ms);
    if (e->clock != 0)
        w_u8(&w, TAG_EX_CLOCK, e->clock);
    encode_stage(&w, TAG_EX_RESULT, st);
    return frame_end(&w, at, why);
}

int moat_encode_session_credit(struct moat_buf *out, uint64_t job_id, uint32_t bytes, const char **why)
{
    struct writer w = {out, 0, NULL};
    size_t at = frame_begin(&w, MOAT_MSG_SESSION_CREDIT, job_id);
    if (bytes == 0 || bytes > MOAT_SESSION_WINDOW)
        w_fail(&w, "credit out of range");
    w_u32(&w, TAG_CR_BYTES, bytes);
    return frame_end(&w, at, why);
}

int moat_encode_session_open(struct moat_buf *out, uint64_t job_id, const struct moat_session_open *o, const char **why)
{
    struct writer w = {out, 0, NULL};
    size_t at = frame_begin(&w, MOAT_MSG_SESSION_OPEN, job_id);
    if (o->req.ntests > 0)
        w_fail(&w, "a session has no test cases");
    encode_request_fields(&w, &o->req);
    w_u64(&w, TAG_SO_WALL, o->wall_ms);
    w_u64(&w, TAG_SO_IDLE, o->idle_ms);
    w_u64(&w, TAG_SO_CPU, o->cpu_ms);
    w_u64(&w, TAG_SO_STDIN, o->stdin_bytes);
    w_u64(&w, TAG_SO_OUTPUT, o->output_bytes);
    return frame_end(&w, at, why);
}

int moat_encode_session_ready(struct moat_buf *out, uint64_t job_id, const struct moat_session_ready *r, const char **why)
{
    struct writer w = {out, 0, NULL};
    size_t at = frame_begin(&w, MOAT_MSG_SESSION_READY, job_id);
    if (r->language == NULL || r->version == NULL)
        w_fail(&w, "language and version are required");
    w_str(&w, TAG_SR_LANGUAGE, r->language, MOAT_MAX_NAME_LEN);
    w_str(&w, TAG_SR_VERSION, r->version, MOAT_MAX_NAME_LEN);
    w_u64(&w, TAG_SR_WALL, r->wall_ms);
    w_u64(&w, TAG_SR_IDLE, r->idle_ms);
    w_u64(&w, TAG_SR_CPU, r->cpu_ms);
    w_u64(&w, TAG_SR_STDIN, r->stdin_bytes);
    w_u64(&w, TAG_SR_OUTPUT, r->output_bytes);
    if (r->walls != NULL && !moat_walls_valid(r->walls))
        w_fail(&w, "walls: names of [a-z] joined by '+'");
    w_str(&w, TAG_SR_WALLS, r->walls, MOAT_MAX_WALLS_LEN);
    return frame_end(&w, at, why);
}

/* ---- typed readers ---------------------------------------------------- */

struct reader {
    const uint8_t *p;
    size_t len;
    size_t off;
};

struct field {
    uint16_t tag;
    const uint8_t *val;
    size_t len;
};

/* Returns 1 with *f filled, 0 at the end, -1 if the TLV is truncated. */
static int r_next(struct reader *r, struct field *f, const char **why)
{
    if (r->off == r->len)
        return 0;
    if (r->len - r->off < TLV_HEADER_SIZE) {
        *why = "truncated field header";
        return -1;
    }
    f->tag = get_u16(r->p + r->off);
    uint32_t len = get_u32(r->p + r->off + 2);
    r->off += TLV_HEADER_SIZE;
    if (len > r->len - r->off) {
        *why = "field length exceeds message";
        return -1;
    }
    f->val = r->p + r->off;
    f->len = len;
    r->off += len;
    return 1;
}

/* Marks tag as seen; fails on a second occurrence. */
static int once(uint32_t *seen, uint16_t tag, const char **why)
{
    if (tag >= 32) {
        *why = "unknown field";
        return -1;
    }
    if (*seen & (1u << tag)) {
        *why = "duplicate field";
        return -1;
    }
    *seen |= 1u << tag;
    return 0;
}

/* A NUL-free UTF-8 string of at most max bytes, copied and terminated. */
static int r_str(const struct field *f, size_t max, int allow_empty, char **out, const char **why)
{
    if (f->len > max) {
        *why = "string field too long";
        return -1;
    }
    if (!allow_empty && f->len == 0) {
        *why = "empty string field";
        return -1;
    }
    if (memchr(f->val, 0, f->len) != NULL) {
        *why = "NUL byte in string field";
        return -1;
    }
    if (!moat_utf8_valid(f->val, f->len)) {
        *why = "string field is not valid UTF-8";
        return -1;
    }
    char *s = malloc(f->len + 1);
    if (s == NULL) {
        *why = "out of memory";
        return -1;
    }
    memcpy(s, f->val, f->len);
    s[f->len] = '\0';
    *out = s;
    return 0;
}

static int r_bytes(const struct field *f, uint8_t **out, size_t *outlen, const char **why)
{
    uint8_t *b = malloc(f->len ? f->len : 1);
    if (b == NULL) {
        *why = "out of memory";
        return -1;
    }
    if (f->len)
        memcpy(b, f->val, f->len);
    *out = b;
    *outlen = f->len;
    return 0;
}

static int r_u64(const struct field *f, uint64_t *v, const char **why)
{
    if (f->len != 8) {
        *why = "integer field has the wrong width";
        return -1;
    }
    *v = get_u64(f->val);
    return 0;
}

/* A limit: a non-negative value that fits in int64_t. */
static int r_limit(const struct field *f, int64_t *v, const char **why)
{
    uint64_t u;
    if (r_u64(f, &u, why) != 0)
        return -1;
    if (u > (uint64_t)INT64_MAX) {
        *why = "limit out of range";
        return -1;
    }
    *v = (int64_t)u;
    return 0;
}

/* A CPU limit: as r_limit, and never 0 (which the encoder never sends). */
static int r_cpu_limit(const struct field *f, int64_t *v, const char **why)
{
    if (r_limit(f, v, why) != 0)
        return -1;
    if (*v == 0) {
        *why = "cpu limit must be positive";
        return -1;
    }
    return 0;
}

/* A run-stage rlimit (stack, processes, file size): present means asked, 1 .. max. */
static int r_bounded_limit(const struct field *f, uint64_t max, int64_t *v, const char **why)
{
    if (r_limit(f, v, why) != 0)
        return -1;
    if (*v == 0 || (uint64_t)*v > max) {
        *why = "a stack, processes or file size limit is out of range";
        return -1;
    }
    return 0;
}

/* One element of a repeated string field: 1 .. max_len bytes, at most max_count of them. */
/* A walls string (moat_walls_valid), copied. */
static int r_walls(const struct field *f, char **out, const char **why)
{
    if (r_str(f, MOAT_MAX_WALLS_LEN, 0, out, why) != 0)
        return -1;
    if (!moat_walls_valid(*out)) {
        free(*out);
        *out = NULL;
        *why = "walls: names of [a-z] joined by '+'";
        return -1;
    }
    return 0;
}

static int r_str_item(const struct field *f, char ***items, size_t *n, size_t max_count, size_t max_len, const char *too_many,
                      const char **why)
{
    if (*n >= max_count) {
        *why = too_many;
        return -1;
    }
    if (*items == NULL && (*items = calloc(max_count, sizeof(char *))) == NULL) {
        *why = "out of memory";
        return -1;
    }
    if (r_str(f, max_len, 0, &(*items)[*n], why) != 0)
        return -1;
    (*n)++;
    return 0;
}

static int r_u32(const struct field *f, uint32_t *v, const char **why)
{
    if (f->len != 4) {
        *why = "integer field has the wrong width";
        return -1;
    }
    *v = get_u32(f->val);
    return 0;
}

static int r_u16(const struct field *f, uint16_t *v, const char **why)
{
    if (f->len != 2) {
        *why = "integer field has the wrong width";
        return -1;
    }
    *v = get_u16(f->val);
    return 0;
}

static int r_u8(const struct field *f, uint8_t *v, const char **why)
{
    if (f->len != 1) {
        *why = "integer field has the wrong width";
        return -1;
    }
    *v = f->val[0];
    return 0;
}

/* ---- header ----------------------------------------------------------- */

/* The longest payload of each type: refused here, before a reader allocates
 * it.  A session frame is small, so a peer cannot make the other side buffer
 * 16 MiB for one keystroke. */
static const uint32_t frame_cap[MOAT_MSG_MAX + 1] = {
    [MOAT_MSG_EXEC_REQUEST] = MOAT_FRAME_MAX_PAYLOAD,
    [MOAT_MSG_EXEC_RESULT] = MOAT_FRAME_MAX_PAYLOAD,
    [MOAT_MSG_ERROR] = MOAT_FRAME_MAX_PAYLOAD,
    [MOAT_MSG_RUNTIMES_QUERY] = MOAT_FRAME_MAX_PAYLOAD,
    [MOAT_MSG_RUNTIMES] = MOAT_FRAME_MAX_PAYLOAD,
    [MOAT_MSG_SESSION_STDIN] = MOAT_SESSION_DATA_FRAME_MAX,
    [MOAT_MSG_SESSION_STDIN_CLOSE] = 0,
    [MOAT_MSG_SESSION_SIGNAL] = MOAT_SESSION_CTRL_FRAME_MAX,
    [MOAT_MSG_SESSION_OUTPUT] = MOAT_SESSION_DATA_FRAME_MAX,
    [MOAT_MSG_SESSION_STAGE] = MOAT_SESSION_CTRL_FRAME_MAX,
    [MOAT_MSG_SESSION_EXIT] = MOAT_SESSION_CTRL_FRAME_MAX,
    [MOAT_MSG_SESSION_CREDIT] = MOAT_SESSION_CTRL_FRAME_MAX,
    [MOAT_MSG_SESSION_OPEN] = MOAT_FRAME_MAX_PAYLOAD,
    [MOAT_MSG_SESSION_READY] = MOAT_SESSION_CTRL_FRAME_MAX,
};

int moat_frame_parse_header(const uint8_t *buf, size_t len, struct moat_frame_header *h, const char **why)
{
    if (len < MOAT_FRAME_HEADER_SIZE) {
        *why = "short frame header";
        return -1;
    }
    h->version = buf[0];
    h->type = buf[1];
    h->flags = get_u16(buf + 2);
    h->length = get_u32(buf + 4);
    h->job_id = get_u64(buf + 8);
    if (h->version != MOAT_PROTO_VERSION) {
        *why = "unsupported protocol version";
        return -1;
    }
    if (h->type < MOAT_MSG_EXEC_REQUEST || h->type > MOAT_MSG_MAX) {
        *why = "unknown message type";
        return -1;
    }
    if (h->flags != 0) {
        *why = "reserved flags set";
        return -1;
    }
    if (h->length > frame_cap[h->type]) {
        *why = "frame exceeds the size cap";
        return -1;
    }
    return 0;
}

/* ---- decoders --------------------------------------------------------- */

static int decode_file(const struct field *outer, struct moat_file *file, const char **why)
{
    struct reader r = {outer->val, outer->len, 0};
    struct field f;
    uint32_t seen = 0;
    int rc;

    while ((rc = r_next(&r, &f, why)) == 1) {
        if (once(&seen, f.tag, why) != 0)
            return -1;
        switch (f.tag) {
        case TAG_FILE_NAME:
            if (r_str(&f, MOAT_MAX_NAME_LEN, 0, &file->name, why) != 0)
                return -1;
            break;
        case TAG_FILE_CONTENT:
            if (r_bytes(&f, &file->content, &file->content_len, why) != 0)
                return -1;
            break;
        default:
            *why = "unknown field in file";
            return -1;
        }
    }
    if (rc < 0)
        return -1;
    if (file->name == NULL || file->content == NULL) {
        *why = "file needs a name and content";
        return -1;
    }
    return 0;
}

/* An exec request with nothing in it yet: every limit the server default. */
static void request_init(struct moat_exec_request *out)
{
    memset(out, 0, sizeof(*out));
    out->run_timeout_ms = out->compile_timeout_ms = -1;
    out->run_memory_bytes = out->compile_memory_bytes = -1;
    out->run_cpu_ms = out->compile_cpu_ms = -1;
    out->run_stack_kib = out->run_processes = out->run_file_size_kib = -1;
    out->tests_wall_ms = -1;
}

/* Files and args repeat; every other tag of a message appears at most once. */
static int request_once(uint32_t *seen, uint16_t tag, const char **why)
{
    return tag == TAG_REQ_FILE || tag == TAG_REQ_ARG || tag == TAG_REQ_COMPILER_OPTION ? 0 : once(seen, tag, why);
}

/*
 * One field of an exec request (EXEC_REQUEST, and SESSION_OPEN's first
 * fields) into *out, after request_once(): 0 when taken, 1 when the tag is
 * not an exec request's, -1 when refused.
 */
static int decode_request_field(const struct field *f, struct moat_exec_request *out, const char **why)
{
    switch (f->tag) {
    case TAG_REQ_LANGUAGE:
        return r_str(f, MOAT_MAX_NAME_LEN, 0, &out->language, why);
    case TAG_REQ_VERSION:
        return r_str(f, MOAT_MAX_NAME_LEN, 0, &out->version, why);
    case TAG_REQ_FILE:
        if (out->nfiles >= MOAT_MAX_FILES) {
            *why = "too many files";
            return -1;
        }
        if (out->files == NULL && (out->files = calloc(MOAT_MAX_FILES, sizeof(*out->files))) == NULL) {
            *why = "out of memory";
            return -1;
        }
        return decode_file(f, &out->files[out->nfiles++], why);
    case TAG_REQ_STDIN:
        return r_bytes(f, &out->stdin_data, &out->stdin_len, why);
    case TAG_REQ_ARG:
        if (out->nargs >= MOAT_MAX_ARGS) {
            *why = "too many arguments";
            return -1;
        }
        if (out->args == NULL && (out->args = calloc(MOAT_MAX_ARGS, sizeof(*out->args))) == NULL) {
            *why = "out of memory";
            return -1;
        }
        if (r_str(f, MOAT_MAX_ARG_LEN, 1, &out->args[out->nargs], why) != 0)
            return -1;
        out->nargs++;
        return 0;
    case TAG_REQ_RUN_TIMEOUT:
        return r_limit(f, &out->run_timeout_ms, why);
    case TAG_REQ_COMPILE_TIMEOUT:
        return r_limit(f, &out->compile_timeout_ms, why);
    case TAG_REQ_RUN_MEMORY:
        return r_limit(f, &out->run_memory_bytes, why);
    case TAG_REQ_COMPILE_MEMORY:
        return r_limit(f, &out->compile_memory_bytes, why);
    case TAG_REQ_RUN_CPU:
        return r_cpu_limit(f, &out->run_cpu_ms, why);
    case TAG_REQ_COMPILE_CPU:
        return r_cpu_limit(f, &out->compile_cpu_ms, why);
    case TAG_REQ_RUN_STACK:
        return r_bounded_limit(f, MOAT_MAX_STACK_KIB, &out->run_stack_kib, why);
    case TAG_REQ_RUN_PROCESSES:
        return r_bounded_limit(f, MOAT_MAX_PROCESSES, &out->run_processes, why);
    case TAG_REQ_RUN_FILE_SIZE:
        return r_bounded_limit(f, MOAT_MAX_FILE_SIZE_KIB, &out->run_file_size_kib, why);
    case TAG_REQ_COMPILER_OPTION:
        return r_str_item(f, &out->compiler_options, &out->ncompiler_options, MOAT_MAX_COMPILER_OPTIONS,
                          MOAT_MAX_COMPILER_OPTION_LEN, "too many compiler options", why);
    case TAG_REQ_ISOLATION:
        if (r_u8(f, &out->isolation, why) != 0)
            return -1;
        if (out->isolation == MOAT_ISOLATION_NAMESPACES || out->isolation > MOAT_ISOLATION_MAX) {
            *why = "isolation out of range"; /* namespaces is never sent: the tag's absence */
            return -1;
        }
        return 0;
    default:
        return 1;
    }
}

/* The exec request's required fields, once every field is read. */
static int request_complete(const struct moat_exec_request *out, const char *need_names, const char *need_file, const char **why)
{
    if (out->language == NULL || out->version == NULL) {
        *why = need_names;
        return -1;
    }
    if (out->nfiles == 0) {
        *why = need_file;
        return -1;
    }
    return 0;
}

/* A test case's limit: present means asked, so never 0. */
static int r_case_limit(const struct field *f, int64_t *v, const char **why)
{
    if (r_limit(f, v, why) != 0)
        return -1;
    if (*v == 0) {
        *why = "a test case's limit must be positive";
        return -1;
    }
    return 0;
}

static int decode_test_case(const struct field *outer, struct moat_test_case *tc, const char **why)
{
    struct reader r = {outer->val, outer->len, 0};
    struct field f;
    uint32_t seen = 0;
    int rc;

    tc->run_timeout_ms = tc->run_memory_bytes = tc->run_cpu_ms = -1;
    while ((rc = r_next(&r, &f, why)) == 1) {
        if (f.tag != TAG_TC_ARG && once(&seen, f.tag, why) != 0)
            return -1;
        switch (f.tag) {
        case TAG_TC_STDIN:
            rc = r_bytes(&f, &tc->stdin_data, &tc->stdin_len, why);
            break;
        case TAG_TC_ARG:
            if (tc->nargs >= MOAT_MAX_ARGS) {
                *why = "too many arguments in a test case";
                return -1;
            }
            if (tc->args == NULL && (tc->args = calloc(MOAT_MAX_ARGS, sizeof(*tc->args))) == NULL) {
                *why = "out of memory";
                return -1;
            }
            rc = r_str(&f, MOAT_MAX_ARG_LEN, 1, &tc->args[tc->nargs], why);
            if (rc == 0)
                tc->nargs++;
            break;
        case TAG_TC_RUN_TIMEOUT:
            rc = r_case_limit(&f, &tc->run_timeout_ms, why);
            break;
        case TAG_TC_RUN_MEMORY:
            rc = r_case_limit(&f, &tc->run_memory_bytes, why);
            break;
        case TAG_TC_RUN_CPU:
            rc = r_case_limit(&f, &tc->run_cpu_ms, why);
            break;
        default:
            *why = "unknown field in test case";
            return -1;
        }
        if (rc != 0)
            return -1;
    }
    return rc < 0 ? -1 : 0;
}

/* EXEC_REQUEST's own fields (tests): 0 taken, 1 not one of them, -1 refused. */
static int decode_tests_field(const struct field *f, struct moat_exec_request *out, const char **why)
{
    switch (f->tag) {
    case TAG_REQ_TEST:
        if (out->ntests >= MOAT_MAX_TESTS) {
            *why = "too many test cases";
            return -1;
        }
        if (out->tests == NULL && (out->tests = calloc(MOAT_MAX_TESTS, sizeof(*out->tests))) == NULL) {
            *why = "out of memory";
            return -1;
        }
        return decode_test_case(f, &out->tests[out->ntests++], why);
    case TAG_REQ_TESTS_WALL:
        return r_case_limit(f, &out->tests_wall_ms, why);
    default:
        return 1;
    }
}

int moat_decode_exec_request(const uint8_t *payload, size_t len, struct moat_exec_request *out, const char **why)
{
    struct reader r = {payload, len, 0};
    struct field f;
    uint32_t seen = 0;
    int rc;

    request_init(out);
    while ((rc = r_next(&r, &f, why)) == 1) {
        if (f.tag != TAG_REQ_TEST && request_once(&seen, f.tag, why) != 0)
            goto fail;
        int taken = decode_tests_field(&f, out, why);
        if (taken == 1)
            taken = decode_request_field(&f, out, why);
        if (taken == 1)
            *why = "unknown field in exec request";
        if (taken != 0)
            goto fail;
    }
    if (rc < 0 ||
        request_complete(out, "exec request needs language and version", "exec request needs at least one file", why) != 0)
        goto fail;
    if ((seen & (1u << TAG_REQ_TESTS_WALL)) && out->ntests == 0) {
        *why = "a tests wall limit without test cases";
        goto fail;
    }
    return 0;
fail:
    moat_exec_request_free(out);
    return -1;
}

static int decode_stage(const struct field *outer, struct moat_stage_result *st, const char **why)
{
    struct reader r = {outer->val, outer->len, 0};
    struct field f;
    uint32_t seen = 0, u32;
    int rc;

    st->present = 1;
    while ((rc = r_next(&r, &f, why)) == 1) {
        if (once(&seen, f.tag, why) != 0)
            return -1;
        switch (f.tag) {
        case TAG_ST_STDOUT:
            if (r_bytes(&f, &st->stdout_data, &st->stdout_len, why) != 0)
                return -1;
            break;
        case TAG_ST_STDERR:
            if (r_bytes(&f, &st->stderr_data, &st->stderr_len, why) != 0)
                return -1;
            break;
        case TAG_ST_OUTPUT:
            if (r_bytes(&f, &st->output_data, &st->output_len, why) != 0)
                return -1;
            break;
        case TAG_ST_CODE:
            if (r_u32(&f, &u32, why) != 0)
                return -1;
            st->has_code = 1;
            st->code = (int32_t)u32;
            break;
        case TAG_ST_SIGNAL:
            if (r_u32(&f, &u32, why) != 0)
                return -1;
            if (u32 == 0 || u32 > 64) {
                *why = "signal out of range";
                return -1;
            }
            st->has_signal = 1;
            st->signal = (int32_t)u32;
            break;
        case TAG_ST_STATUS:
            if (r_u8(&f, &st->status, why) != 0)
                return -1;
            if (st->status > MOAT_STATUS_MAX) {
                *why = "unknown status";
                return -1;
            }
            break;
        case TAG_ST_MESSAGE:
            if (r_str(&f, MOAT_MAX_MESSAGE_LEN, 1, &st->message, why) != 0)
                return -1;
            break;
        case TAG_ST_CPU_MS:
            if (r_u64(&f, &st->cpu_ms, why) != 0)
                return -1;
            break;
        case TAG_ST_WALL_MS:
            if (r_u64(&f, &st->wall_ms, why) != 0)
                return -1;
            break;
        case TAG_ST_MEMORY:
            if (r_u64(&f, &st->memory_bytes, why) != 0)
                return -1;
            break;
        case TAG_ST_CLOCK:
            if (r_u8(&f, &st->clock, why) != 0)
                return -1;
            if (st->clock == 0 || st->clock > MOAT_CLOCK_MAX) {
                *why = "unknown clock";
                return -1;
            }
            break;
        default:
            *why = "unknown field in stage result";
            return -1;
        }
    }
    if (rc < 0)
        return -1;
    if (!(seen & (1u << TAG_ST_STATUS))) {
        *why = "stage result needs a status";
        return -1;
    }
    if (st->clock != 0 && st->status != MOAT_STATUS_TO) {
        *why = "a stage's clock goes with a TO only";
        return -1;
    }
    return 0;
}

int moat_decode_exec_result(const uint8_t *payload, size_t len, struct moat_exec_result *out, const char **why)
{
    struct reader r = {payload, len, 0};
    struct field f;
    uint32_t seen = 0;
    int rc;

    memset(out, 0, sizeof(*out));
    while ((rc = r_next(&r, &f, why)) == 1) {
        if (f.tag != TAG_RES_TEST && once(&seen, f.tag, why) != 0)
            goto fail;
        switch (f.tag) {
        case TAG_RES_TEST:
            if (out->ntests >= MOAT_MAX_TESTS) {
                *why = "too many test case results";
                goto fail;
            }
            if (out->tests == NULL && (out->tests = calloc(MOAT_MAX_TESTS, sizeof(*out->tests))) == NULL) {
                *why = "out of memory";
                goto fail;
            }
            if (decode_stage(&f, &out->tests[out->ntests++], why) != 0)
                goto fail;
            break;
        case TAG_RES_LANGUAGE:
            if (r_str(&f, MOAT_MAX_NAME_LEN, 0, &out->language, why) != 0)
                goto fail;
            break;
        case TAG_RES_VERSION:
            if (r_str(&f, MOAT_MAX_NAME_LEN, 0, &out->version, why) != 0)
                goto fail;
            break;
        case TAG_RES_WALLS:
            if (r_walls(&f, &out->walls, why) != 0)
                goto fail;
            break;
        case TAG_RES_COMPILE:
            if (decode_stage(&f, &out->compile, why) != 0)
                goto fail;
            break;
        case TAG_RES_RUN:
            if (decode_stage(&f, &out->run, why) != 0)
                goto fail;
            break;
        default:
            *why = "unknown field in exec result";
            goto fail;
        }
    }
    if (rc < 0)
        goto fail;
    if (out->language == NULL || out->version == NULL || !(out->run.present || out->compile.present || out->ntests > 0)) {
        *why = "exec result needs language, version and a stage";
        goto fail;
    }
    return 0;
fail:
    moat_exec_result_free(out);
    return -1;
}

int moat_decode_error(const uint8_t *payload, size_t len, struct moat_error *out, const char **why)
{
    struct reader r = {payload, len, 0};
    struct field f;
    uint32_t seen = 0;
    int rc;

    memset(out, 0, sizeof(*out));
    while ((rc = r_next(&r, &f, why)) == 1) {
        if (once(&seen, f.tag, why) != 0)
            goto fail;
        switch (f.tag) {
        case TAG_ERR_CODE:
            if (r_u16(&f, &out->code, why) != 0)
                goto fail;
            if (out->code < 1 || out->code > MOAT_ERR_MAX) {
                *why = "unknown error code";
                goto fail;
            }
            break;
        case TAG_ERR_MESSAGE:
            if (r_str(&f, MOAT_MAX_MESSAGE_LEN, 1, &out->message, why) != 0)
                goto fail;
            break;
        default:
            *why = "unknown field in error";
            goto fail;
        }
    }
    if (rc < 0)
        goto fail;
    if (out->code == 0 || out->message == NULL) {
        *why = "error needs a code and a message";
        goto fail;
    }
    return 0;
fail:
    moat_error_free(out);
    return -1;
}

static int decode_runtime(const struct field *outer, struct moat_runtime *rt, const char **why)
{
    struct reader r = {outer->val, outer->len, 0};
    struct field f;
    uint32_t seen = 0;
    uint8_t compiled;
    int rc;

    rt->isolations = 1u << MOAT_ISOLATION_NAMESPACES;
    while ((rc = r_next(&r, &f, why)) == 1) {
        if (f.tag != TAG_RTE_ALIAS && f.tag != TAG_RTE_OPTION_PATTERN && once(&seen, f.tag, why) != 0)
            return -1;
        switch (f.tag) {
        case TAG_RTE_LANGUAGE:
            if (r_str(&f, MOAT_MAX_NAME_LEN, 0, &rt->language, why) != 0)
                return -1;
            break;
        case TAG_RTE_VERSION:
            if (r_str(&f, MOAT_MAX_NAME_LEN, 0, &rt->version, why) != 0)
                return -1;
            break;
        case TAG_RTE_ALIAS:
            if (rt->naliases >= MOAT_MAX_ALIASES) {
                *why = "too many aliases";
                return -1;
            }
            if (rt->aliases == NULL && (rt->aliases = calloc(MOAT_MAX_ALIASES, sizeof(char *))) == NULL) {
                *why = "out of memory";
                return -1;
            }
            if (r_str(&f, MOAT_MAX_NAME_LEN, 0, &rt->aliases[rt->naliases], why) != 0)
                return -1;
            rt->naliases++;
            break;
        case TAG_RTE_COMPILED:
            if (r_u8(&f, &compiled, why) != 0)
                return -1;
            if (compiled > 1) {
                *why = "compiled flag out of range";
                return -1;
            }
            rt->compiled = compiled;
            break;
        case TAG_RTE_OPTION_PATTERN:
            if (r_str_item(&f, &rt->option_patterns, &rt->noption_patterns, MOAT_MAX_OPTION_PATTERNS, MOAT_MAX_COMPILER_OPTION_LEN,
                           "too many compiler option patterns", why) != 0)
                return -1;
            break;
        case TAG_RTE_ISOLATIONS:
            if (r_u8(&f, &rt->isolations, why) != 0)
                return -1;
            if (rt->isolations == 0 || (rt->isolations & ~MOAT_ISOLATIONS_ALL) != 0) {
                *why = "runtime isolations out of range";
                return -1;
            }
            break;
        default:
            *why = "unknown field in runtime";
            return -1;
        }
    }
    if (rc < 0)
        return -1;
    if (rt->language == NULL || rt->version == NULL) {
        *why = "runtime needs language and version";
        return -1;
    }
    return 0;
}

/* RUNTIMES tag 2: every field once, none above its total. */
static int decode_load(const struct field *outer, struct moat_backend_load *l, const char **why)
{
    struct reader r = {outer->val, outer->len, 0};
    struct field f;
    uint64_t *const dst[] = {NULL, &l->slots, &l->busy, &l->queue_max, &l->queued, &l->session_slots, &l->sessions_busy};
    uint32_t seen = 0;
    int rc;

    while ((rc = r_next(&r, &f, why)) == 1) {
        if (f.tag == 0 || f.tag > TAG_LD_SESSIONS_BUSY) {
            *why = "unknown field in the backend's load";
            return -1;
        }
        if (once(&seen, f.tag, why) != 0 || r_u64(&f, dst[f.tag], why) != 0)
            return -1;
    }
    if (rc < 0)
        return -1;
    if (seen != 0x7eu) {
        *why = "the backend's load is missing a field";
        return -1;
    }
    if (l->busy > l->slots || l->queued > l->queue_max || l->sessions_busy > l->session_slots) {
        *why = "the backend's load is out of range";
        return -1;
    }
    l->present = 1;
    return 0;
}

int moat_decode_runtimes(const uint8_t *payload, size_t len, struct moat_runtimes *out, const char **why)
{
    struct reader r = {payload, len, 0};
    struct field f;
    int rc;

    memset(out, 0, sizeof(*out));
    while ((rc = r_next(&r, &f, why)) == 1) {
        if (f.tag == TAG_RT_LOAD) {
            if (out->load.present) {
                *why = "duplicate field";
                goto fail;
            }
            if (decode_load(&f, &out->load, why) != 0)
                goto fail;
            continue;
        }
        if (f.tag == TAG_RT_WALLS) {
            if (out->walls != NULL) {
                *why = "duplicate field";
                goto fail;
            }
            if (r_walls(&f, &out->walls, why) != 0)
                goto fail;
            continue;
        }
        if (f.tag != TAG_RT_RUNTIME) {
            *why = "unknown field in runtimes";
            goto fail;
        }
        if (out->count >= MOAT_MAX_RUNTIMES) {
            *why = "too many runtimes";
            goto fail;
        }
        if (out->items == NULL && (out->items = calloc(MOAT_MAX_RUNTIMES, sizeof(*out->items))) == NULL) {
            *why = "out of memory";
            goto fail;
        }
        if (decode_runtime(&f, &out->items[out->count++], why) != 0)
            goto fail;
    }
    if (rc < 0)
        goto fail;
    return 0;
fail:
    moat_runtimes_free(out);
    return -1;
}

/* ---- session decoders ------------------------------------------------- */

/* A message of exactly one field: *f is it, with the usual refusals. */
static int r_only(const uint8_t *payload, size_t len, uint16_t tag, struct field *f, const char *unknown, const char *missing,
                  const char **why)
{
    struct reader r = {payload, len, 0};
    struct field g;
    uint32_t seen = 0;
    int rc;

    while ((rc = r_next(&r, &g, why)) == 1) {
        if (once(&seen, g.tag, why) != 0)
            return -1;
        if (g.tag != tag) {
            *why = unknown;
            return -1;
        }
        *f = g;
    }
    if (rc < 0)
        return -1;
    if (seen == 0) {
        *why = missing;
        return -1;
    }
    return 0;
}

/* A stdin or output chunk: 1..MOAT_SESSION_CHUNK_MAX bytes, copied. */
static int r_chunk(const struct field *f, uint8_t **out, size_t *outlen, const char **why)
{
    if (f->len == 0) {
        *why = "empty data chunk";
        return -1;
    }
    if (f->len > MOAT_SESSION_CHUNK_MAX) {
        *why = "data chunk over the cap";
        return -1;
    }
    return r_bytes(f, out, outlen, why);
}

static int r_stage(const struct field *f, uint8_t *stage, const char **why)
{
    if (r_u8(f, stage, why) != 0)
        return -1;
    if (!stage_valid(*stage)) {
        *why = "unknown stage";
        return -1;
    }
    return 0;
}

int moat_decode_session_stdin(const uint8_t *payload, size_t len, struct moat_session_stdin *out, const char **why)
{
    struct field f;

    memset(out, 0, sizeof(*out));
    if (r_only(payload, len, TAG_SIN_DATA, &f, "unknown field in session stdin", "session stdin needs data", why) != 0)
        return -1;
    return r_chunk(&f, &out->data, &out->len, why);
}

int moat_decode_session_stdin_close(const uint8_t *payload, size_t len, const char **why)
{
    (void)payload;
    if (len != 0) {
        *why = "session stdin close has no fields";
        return -1;
    }
    return 0;
}

int moat_decode_session_signal(const uint8_t *payload, size_t len, int32_t *signal, const char **why)
{
    struct field f;
    uint32_t u32;

    *signal = 0;
    if (r_only(payload, len, TAG_SIG_SIGNAL, &f, "unknown field in session signal", "session signal needs a signal", why) != 0 ||
        r_u32(&f, &u32, why) != 0)
        return -1;
    if (u32 > INT32_MAX || !moat_session_signal_allowed((int32_t)u32)) {
        *why = "signal not allowed";
        return -1;
    }
    *signal = (int32_t)u32;
    return 0;
}

int moat_decode_session_credit(const uint8_t *payload, size_t len, uint32_t *bytes, const char **why)
{
    struct field f;
    uint32_t u32;

    *bytes = 0;
    if (r_only(payload, len, TAG_CR_BYTES, &f, "unknown field in session credit", "session credit needs bytes", why) != 0 ||
        r_u32(&f, &u32, why) != 0)
        return -1;
    if (u32 == 0 || u32 > MOAT_SESSION_WINDOW) {
        *why = "credit out of range";
        return -1;
    }
    *bytes = u32;
    return 0;
}

int moat_decode_session_output(const uint8_t *payload, size_t len, struct moat_session_output *out, const char **why)
{
    struct reader r = {payload, len, 0};
    struct field f;
    uint32_t seen = 0;
    int rc;

    memset(out, 0, sizeof(*out));
    while ((rc = r_next(&r, &f, why)) == 1) {
        if (once(&seen, f.tag, why) != 0)
            goto fail;
        switch (f.tag) {
        case TAG_OUT_STREAM:
            if (r_u8(&f, &out->stream, why) != 0)
                goto fail;
            if (out->stream != MOAT_STREAM_STDOUT && out->stream != MOAT_STREAM_STDERR) {
                *why = "unknown stream";
                goto fail;
            }
            break;
        case TAG_OUT_OFFSET:
            if (r_u64(&f, &out->offset_ms, why) != 0)
                goto fail;
            break;
        case TAG_OUT_DATA:
            if (r_chunk(&f, &out->data, &out->len, why) != 0)
                goto fail;
            break;
        default:
            *why = "unknown field in session output";
            goto fail;
        }
    }
    if (rc < 0)
        goto fail;
    if (out->stream == 0 || !(seen & (1u << TAG_OUT_OFFSET)) || out->data == NULL) {
        *why = "session output needs stream, offset and data";
        goto fail;
    }
    return 0;
fail:
    moat_session_output_free(out);
    return -1;
}

int moat_decode_session_stage(const uint8_t *payload, size_t len, struct moat_session_stage *out, const char **why)
{
    struct reader r = {payload, len, 0};
    struct field f;
    uint32_t seen = 0;
    int rc;

    memset(out, 0, sizeof(*out));
    while ((rc = r_next(&r, &f, why)) == 1) {
        if (once(&seen, f.tag, why) != 0)
            goto fail;
        switch (f.tag) {
        case TAG_SST_STAGE:
            if (r_stage(&f, &out->stage, why) != 0)
                goto fail;
            break;
        case TAG_SST_OFFSET:
            if (r_u64(&f, &out->offset_ms, why) != 0)
                goto fail;
            break;
        default:
            *why = "unknown field in session stage";
            goto fail;
        }
    }
    if (rc < 0)
        goto fail;
    if (out->stage == 0 || !(seen & (1u << TAG_SST_OFFSET))) {
        *why = "session stage needs stage and offset";
        goto fail;
    }
    return 0;
fail:
    memset(out, 0, sizeof(*out));
    return -1;
}

int moat_decode_session_exit(const uint8_t *payload, size_t len, struct moat_session_exit *out, const char **why)
{
    struct reader r = {payload, len, 0};
    struct field f;
    uint32_t seen = 0;
    int rc;

    memset(out, 0, sizeof(*out));
    while ((rc = r_next(&r, &f, why)) == 1) {
        if (once(&seen, f.tag, why) != 0)
            goto fail;
        switch (f.tag) {
        case TAG_EX_STAGE:
            if (r_stage(&f, &out->stage, why) != 0)
                goto fail;
            break;
        case TAG_EX_OFFSET:
            if (r_u64(&f, &out->offset_ms, why) != 0)
                goto fail;
            break;
        case TAG_EX_CLOCK:
            if (r_u8(&f, &out->clock, why) != 0)
                goto fail;
            if (out->clock == 0 || out->clock > MOAT_CLOCK_MAX) {
                *why = "unknown clock";
                goto fail;
            }
            break;
        case TAG_EX_RESULT:
            if (decode_stage(&f, &out->result, why) != 0)
                goto fail;
            break;
        default:
            *why = "unknown field in session exit";
            goto fail;
        }
    }
    if (rc < 0)
        goto fail;
    if (out->stage == 0 || !(seen & (1u << TAG_EX_OFFSET)) || !out->result.present) {
        *why = "session exit needs stage, offset and result";
        goto fail;
    }
    if (out->result.stdout_len || out->result.stderr_len || out->result.output_len) {
        *why = "session exit carries no output";
        goto fail;
    }
    if ((out->clock != 0) != (out->result.status == MOAT_STATUS_TO)) {
        *why = "clock must name the clock of a TO, and only of a TO";
        goto fail;
    }
    return 0;
fail:
    moat_session_exit_free(out);
    return -1;
}

/* A u64 ceiling or effective limit of SESSION_OPEN / SESSION_READY. */
static int r_session_limit(const struct field *f, uint64_t *v, uint32_t *limits, const char **why)
{
    *limits += 1;
    return r_u64(f, v, why);
}

#define SESSION_LIMITS 5 /* wall, idle, cpu, stdin, output */

int moat_decode_session_open(const uint8_t *payload, size_t len, struct moat_session_open *out, const char **why)
{
    struct reader r = {payload, len, 0};
    struct field f;
    uint32_t seen = 0, limits = 0;
    int rc;

    memset(out, 0, sizeof(*out));
    request_init(&out->req);
    while ((rc = r_next(&r, &f, why)) == 1) {
        if (request_once(&seen, f.tag, why) != 0)
            goto fail;
        switch (f.tag) {
        case TAG_SO_WALL:
            rc = r_session_limit(&f, &out->wall_ms, &limits, why);
            break;
        case TAG_SO_IDLE:
            rc = r_session_limit(&f, &out->idle_ms, &limits, why);
            break;
        case TAG_SO_CPU:
            rc = r_session_limit(&f, &out->cpu_ms, &limits, why);
            break;
        case TAG_SO_STDIN:
            rc = r_session_limit(&f, &out->stdin_bytes, &limits, why);
            break;
        case TAG_SO_OUTPUT:
            rc = r_session_limit(&f, &out->output_bytes, &limits, why);
            break;
        default:
            rc = decode_request_field(&f, &out->req, why);
            if (rc == 1)
                *why = "unknown field in session open";
        }
        if (rc != 0)
            goto fail;
    }
    if (rc < 0 ||
        request_complete(&out->req, "session open needs language and version", "session open needs at least one file", why) != 0)
        goto fail;
    if (limits != SESSION_LIMITS) {
        *why = "session open needs wall, idle, cpu, stdin and output limits";
        goto fail;
    }
    return 0;
fail:
    moat_session_open_free(out);
    return -1;
}

int moat_decode_session_ready(const uint8_t *payload, size_t len, struct moat_session_ready *out, const char **why)
{
    struct reader r = {payload, len, 0};
    struct field f;
    uint32_t seen = 0, limits = 0;
    int rc;

    memset(out, 0, sizeof(*out));
    while ((rc = r_next(&r, &f, why)) == 1) {
        if (once(&seen, f.tag, why) != 0)
            goto fail;
        switch (f.tag) {
        case TAG_SR_LANGUAGE:
            rc = r_str(&f, MOAT_MAX_NAME_LEN, 0, &out->language, why);
            break;
        case TAG_SR_VERSION:
            rc = r_str(&f, MOAT_MAX_NAME_LEN, 0, &out->version, why);
            break;
        case TAG_SR_WALL:
            rc = r_session_limit(&f, &out->wall_ms, &limits, why);
            break;
        case TAG_SR_IDLE:
            rc = r_session_limit(&f, &out->idle_ms, &limits, why);
            break;
        case TAG_SR_CPU:
            rc = r_session_limit(&f, &out->cpu_ms, &limits, why);
            break;
        case TAG_SR_STDIN:
            rc = r_session_limit(&f, &out->stdin_bytes, &limits, why);
            break;
        case TAG_SR_OUTPUT:
            rc = r_session_limit(&f, &out->output_bytes, &limits, why);
            break;
        case TAG_SR_WALLS:
            rc = r_walls(&f, &out->walls, why);
            break;
        default:
            *why = "unknown field in session ready";
            rc = -1;
        }
        if (rc != 0)
            goto fail;
    }
    if (rc < 0)
        goto fail;
    if (out->language == NULL || out->version == NULL || limits != SESSION_LIMITS) {
        *why = "session ready needs language, version and every limit";
        goto fail;
    }
    return 0;
fail:
    moat_session_ready_free(out);
    return -1;
}

/* ---- release ---------------------------------------------------------- */

uint64_t moat_exec_result_cpu_ms(const struct moat_exec_result *res)
{
    uint64_t ms = (res->compile.present ? res->compile.cpu_ms : 0) + (res->run.present ? res->run.cpu_ms : 0);

    for (size_t i = 0; i < res->ntests; i++)
        ms += res->tests[i].cpu_ms;
    return ms;
}

void moat_exec_request_free(struct moat_exec_request *r)
{
    free(r->language);
    free(r->version);
    for (size_t i = 0; r->files && i < r->nfiles; i++) {
        free(r->files[i].name);
        free(r->files[i].content);
    }
    free(r->files);
    for (size_t i = 0; r->args && i < r->nargs; i++)
        free(r->args[i]);
    free(r->args);
    free(r->stdin_data);
    for (size_t i = 0; r->compiler_options && i < r->ncompiler_options; i++)
        free(r->compiler_options[i]);
    free(r->compiler_options);
    for (size_t i = 0; r->tests && i < r->ntests; i++) {
        for (size_t j = 0; r->tests[i].args && j < r->tests[i].nargs; j++)
            free(r->tests[i].args[j]);
        free(r->tests[i].args);
        free(r->tests[i].stdin_data);
    }
    free(r->tests);
    memset(r, 0, sizeof(*r));
}

static void stage_free(struct moat_stage_result *st)
{
    free(st->stdout_data);
    free(st->stderr_data);
    free(st->output_data);
    free(st->message);
    memset(st, 0, sizeof(*st));
}

void moat_exec_result_free(struct moat_exec_result *r)
{
    free(r->language);
    free(r->version);
    free(r->walls);
    stage_free(&r->compile);
    stage_free(&r->run);
    for (size_t i = 0; r->tests && i < r->ntests; i++)
        stage_free(&r->tests[i]);
    free(r->tests);
    memset(r, 0, sizeof(*r));
}

void moat_error_free(struct moat_error *e)
{
    free(e->message);
    memset(e, 0, sizeof(*e));
}

void moat_runtimes_free(struct moat_runtimes *rt)
{
    for (size_t i = 0; rt->items && i < rt->count; i++) {
        struct moat_runtime *r = &rt->items[i];
        free(r->language);
        free(r->version);
        for (size_t j = 0; r->aliases && j < r->naliases; j++)
            free(r->aliases[j]);
        free(r->aliases);
        for (size_t j = 0; r->option_patterns && j < r->noption_patterns; j++)
            free(r->option_patterns[j]);
        free(r->option_patterns);
    }
    free(rt->items);
    free(rt->walls);
    memset(rt, 0, sizeof(*rt));
}

void moat_session_stdin_free(struct moat_session_stdin *s)
{
    free(s->data);
    memset(s, 0, sizeof(*s));
}

void moat_session_output_free(struct moat_session_output *o)
{
    free(o->data);
    memset(o, 0, sizeof(*o));
}

void moat_session_exit_free(struct moat_session_exit *e)
{
    stage_free(&e->result);
    memset(e, 0, sizeof(*e));
}

void moat_session_open_free(struct moat_session_open *o)
{
    moat_exec_request_free(&o->req);
    memset(o, 0, sizeof(*o));
}

void moat_session_ready_free(struct moat_session_ready *r)
{
    free(r->language);
    free(r->version);
    free(r->walls);
    memset(r, 0, sizeof(*r));
}

/* ---- status names ----------------------------------------------------- */

const char *moat_status_piston(uint8_t status)
{
    static const char *const names[] = {NULL, "RE", "SG", "TO", "OL", "EL", "XX", "SG"};
    return status <= MOAT_STATUS_MAX ? names[status] : "XX";
}

const char *moat_status_name(uint8_t status)
{
    static const char *const names[] = {"OK", "RE", "SG", "TO", "OL", "EL", "XX", "ML"};
    return status <= MOAT_STATUS_MAX ? names[status] : "??";
}

const char *moat_clock_name(uint8_t clock)
{
    static const char *const names[] = {NULL, "wall", "idle", "cpu"};
    return clock <= MOAT_CLOCK_MAX ? names[clock] : NULL;
}

static const char *const isolation_names[] = {"namespaces", "gvisor"};
_Static_assert(sizeof(isolation_names) / sizeof(isolation_names[0]) == MOAT_ISOLATION_MAX + 1, "a name per isolation");

const char *moat_isolation_name(uint8_t isolation)
{
    return isolation <= MOAT_ISOLATION_MAX ? isolation_names[isolation] : NULL;
}

int moat_isolation_parse(const char *name)
{
    for (int i = 0; i <= MOAT_ISOLATION_MAX; i++)
        if (strcmp(name, isolation_names[i]) == 0)
            return i;
    return -1;
}
