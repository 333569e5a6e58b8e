/*
 * moat_proto.c - the gateway <-> backend messages as field tables, and the
 * thin public functions of moat_proto.h over the one codec (moat_codec.c).
 * Wire format: PROTOCOL.md; a unit test holds its field tables against
 * these (tests/unit/test_proto_doc.c).
 *
 * Theory of operation:
 *   1. A table per message and per nested group: a row per field, with its
 *      tag, kind, place in the C struct, bounds, default and reasons.
 *   2. What a row cannot say is a hook next to the table: a check the
 *      encoder makes before the fields (pre) or after them (post), or the
 *      decoder once every field is in (done), e.g. a stage's clock only
 *      with a TO, the load's busy never above its slots.
 *   3. The public encoders, decoders and frees are the codec run on a
 *      table (CODEC_ENCODE, CODEC_DECODE, CODEC_FREE below each table).
 *   4. The header: every type has a payload cap, checked before anything
 *      reads or allocates the payload.
 *
 * Strict and fail-closed: what a table does not name is refused, reasons
 * are values the callers pass on (the backend answers ERROR 1 with them).
 * Adding a message: its struct, its table, its three lines of wrappers.
 */
#include "moat_proto.h"

#include <stdlib.h>
#include <string.h>

#include "moat_codec.h"

#define MISSING(...)   .missing = {__VA_ARGS__}
#define FIELDS(a)      .fields = (a), .nfields = sizeof(a) / sizeof((a)[0])
#define ARRAY(S, n, m) .flags = MOAT_F_REPEATED, .aux = offsetof(S, n), .count_max = (m)
#define NAME           .min = 1, .max = MOAT_MAX_NAME_LEN
#define WALLS          .min = 1, .max = MOAT_MAX_WALLS_LEN, .check = check_walls
#define RANGE(lo, hi)  .min = (lo), .max = (hi)
#define NOT_ASKED(o)   .omit = (o), .dflt = -1 /* a limit: -1 "not asked", never sent */

/* A message's table: its name, fields, C struct S, and what else it says. */
#define MESSAGE(name, fields, S, ...)                                                                                              \
    {                                                                                                                              \
        name, FIELDS(fields), .size = sizeof(S), __VA_ARGS__                                                                       \
    }

/* The public functions of a message whose C struct is S, over table msg. */
#define CODEC_ENCODE(name, type, S, msg)                                                                                           \
    int moat_encode_##name(struct moat_buf *out, uint64_t job_id, const S *m, const char **why)                                    \
    {                                                                                                                              \
        return moat_codec_encode(out, type, job_id, &(msg), m, why);                                                               \
    }
#define CODEC_DECODE(name, S, msg)                                                                                                 \
    int moat_decode_##name(const uint8_t *payload, size_t len, S *out, const char **why)                                           \
    {                                                                                                                              \
        return moat_codec_decode(&(msg), payload, len, out, why);                                                                  \
    }
#define CODEC_FREE(name, S, msg)                                                                                                   \
    void moat_##name##_free(S *m)                                                                                                  \
    {                                                                                                                              \
        moat_codec_free(&(msg), m);                                                                                                \
    }

/* ---- checks a row points at --------------------------------------------- */

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

static const char *check_walls(uint64_t len, const void *s, int enc)
{
    return s == NULL || moat_walls_valid(s) ? NULL : "walls: names of [a-z] joined by '+'";
}

/* A stdin or output chunk: 1..MOAT_SESSION_CHUNK_MAX bytes. */
static const char *check_chunk(uint64_t len, const void *data, int enc)
{
    return len == 0 ? "empty data chunk" : len > MOAT_SESSION_CHUNK_MAX ? "data chunk over the cap" : NULL;
}

/* The decoder refuses an empty one as any empty string; the encoder says which. */
static const char *check_option(uint64_t len, const void *s, int enc)
{
    return enc && (s == NULL || len == 0) ? "an empty compiler option" : NULL;
}

static const char *check_signal(uint64_t v, const void *p, int enc)
{
    return v > INT32_MAX || !moat_session_signal_allowed((int32_t)v) ? "signal not allowed" : NULL;
}

/* A runtime's isolations: known bits; a decoded one has one at least (0 from a caller: namespaces). */
static const char *check_isolations(uint64_t v, const void *p, int enc)
{
    if (enc)
        return v & ~(uint64_t)MOAT_ISOLATIONS_ALL ? "unknown isolation in a runtime" : NULL;
    return v == 0 || (v & ~(uint64_t)MOAT_ISOLATIONS_ALL) ? "runtime isolations out of range" : NULL;
}

/* ---- exec request ------------------------------------------------------- */

static const char *file_pre(const void *m)
{
    return ((const struct moat_file *)m)->name == NULL ? "file name missing" : NULL;
}

static const struct moat_field file_fields[] = {
    {1, "name", MOAT_K_STR, offsetof(struct moat_file, name), NAME, .need = 1},
    {2, "content", MOAT_K_BYTES, offsetof(struct moat_file, content), .aux = offsetof(struct moat_file, content_len), .need = 1},
};
static const struct moat_msg file_msg = MESSAGE("file", file_fields, struct moat_file, .unknown = "unknown field in file",
                                                MISSING("file needs a name and content"), .pre = file_pre);

#define TC         struct moat_test_case
#define CASE_LIMIT NOT_ASKED(MOAT_O_POSITIVE), RANGE(1, INT64_MAX), .bad = "a test case's limit must be positive"
static const struct moat_field test_case_fields[] = {
    {1, "stdin", MOAT_K_BYTES, offsetof(TC, stdin_data), .aux = offsetof(TC, stdin_len), .omit = MOAT_O_EMPTY},
    {2, "arg", MOAT_K_STR, offsetof(TC, args), ARRAY(TC, nargs, MOAT_MAX_ARGS), RANGE(0, MOAT_MAX_ARG_LEN),
     .too_many = "too many arguments in a test case"},
    {3, "run_timeout_ms", MOAT_K_LIMIT, offsetof(TC, run_timeout_ms), CASE_LIMIT},
    {4, "run_memory", MOAT_K_LIMIT, offsetof(TC, run_memory_bytes), CASE_LIMIT},
    {5, "run_cpu_ms", MOAT_K_LIMIT, offsetof(TC, run_cpu_ms), CASE_LIMIT},
};
static const struct moat_msg test_case_msg = MESSAGE("test case", test_case_fields, TC, .unknown = "unknown field in test case");

/* The fields EXEC_REQUEST and SESSION_OPEN share: the request's checks first. */
static const char *request_pre(const void *m)
{
    const struct moat_exec_request *r = m;
    if (r->language == NULL || r->version == NULL)
        return "language and version are required";
    if (r->nfiles < 1 || r->nfiles > MOAT_MAX_FILES)
        return "file count out of range";
    return r->nargs > MOAT_MAX_ARGS ? "too many arguments" : NULL;
}

#define REQ         struct moat_exec_request
#define CPU_LIMIT   NOT_ASKED(MOAT_O_POSITIVE), RANGE(1, INT64_MAX), .bad = "cpu limit must be positive"
#define RLIMIT(max) NOT_ASKED(MOAT_O_POSITIVE), RANGE(1, max), .bad = "a stack, processes or file size limit is out of range"
static const struct moat_field request_fields[] = {
    {1, "language", MOAT_K_STR, offsetof(REQ, language), NAME, .need = 1},
    {2, "version", MOAT_K_STR, offsetof(REQ, version), NAME, .need = 1},
    {3, "file", MOAT_K_NEST, offsetof(REQ, files), ARRAY(REQ, nfiles, MOAT_MAX_FILES), .sub = &file_msg, .need = 2,
     .too_many = "too many files"},
    {4, "stdin", MOAT_K_BYTES, offsetof(REQ, stdin_data), .aux = offsetof(REQ, stdin_len), .omit = MOAT_O_EMPTY},
    {5, "arg", MOAT_K_STR, offsetof(REQ, args), ARRAY(REQ, nargs, MOAT_MAX_ARGS), RANGE(0, MOAT_MAX_ARG_LEN),
     .too_many = "too many arguments"},
    {6, "run_timeout_ms", MOAT_K_LIMIT, offsetof(REQ, run_timeout_ms), NOT_ASKED(MOAT_O_NEGATIVE)},
    {7, "compile_timeout_ms", MOAT_K_LIMIT, offsetof(REQ, compile_timeout_ms), NOT_ASKED(MOAT_O_NEGATIVE)},
    {8, "run_memory", MOAT_K_LIMIT, offsetof(REQ, run_memory_bytes), NOT_ASKED(MOAT_O_NEGATIVE)},
    {9, "compile_memory", MOAT_K_LIMIT, offsetof(REQ, compile_memory_bytes), NOT_ASKED(MOAT_O_NEGATIVE)},
    /* CPU limits, and the run stage's stack, processes and file size: 0 is "not asked" too */
    {10, "run_cpu_ms", MOAT_K_LIMIT, offsetof(REQ, run_cpu_ms), CPU_LIMIT},
    {11, "compile_cpu_ms", MOAT_K_LIMIT, offsetof(REQ, compile_cpu_ms), CPU_LIMIT},
    {14, "run_stack_kib", MOAT_K_LIMIT, offsetof(REQ, run_stack_kib), RLIMIT(MOAT_MAX_STACK_KIB)},
    {15, "run_processes", MOAT_K_LIMIT, offsetof(REQ, run_processes), RLIMIT(MOAT_MAX_PROCESSES)},
    {16, "run_file_size_kib", MOAT_K_LIMIT, offsetof(REQ, run_file_size_kib), RLIMIT(MOAT_MAX_FILE_SIZE_KIB)},
    {17, "compiler_option", MOAT_K_STR, offsetof(REQ, compiler_options), ARRAY(REQ, ncompiler_options, MOAT_MAX_COMPILER_OPTIONS),
     RANGE(1, MOAT_MAX_COMPILER_OPTION_LEN), .too_many = "too many compiler options", .check = check_option},
    /* namespaces (0) is never sent: the tag's absence */
    {18, "isolation", MOAT_K_U8, offsetof(REQ, isolation), .omit = MOAT_O_DEFAULT, RANGE(1, MOAT_ISOLATION_MAX),
     .bad = "isolation out of range", .enc_bad = "isolation out of range"},
};
static const struct moat_msg request_msg = MESSAGE("exec request", request_fields, REQ, .pre = request_pre);

static const char *exec_request_done(const void *m)
{
    const struct moat_exec_request *r = m;
    return r->tests_wall_ms != -1 && r->ntests == 0 ? "a tests wall limit without test cases" : NULL;
}

/* EXEC_REQUEST's own: the test cases and their wall budget. */
static const struct moat_field exec_request_fields[] = {
    {12, "test", MOAT_K_NEST, offsetof(REQ, tests), ARRAY(REQ, ntests, MOAT_MAX_TESTS), .sub = &test_case_msg,
     .too_many = "too many test cases"},
    {13, "tests_wall_ms", MOAT_K_LIMIT, offsetof(REQ, tests_wall_ms), NOT_ASKED(MOAT_O_WITH), .aux = offsetof(REQ, ntests),
     RANGE(1, INT64_MAX), .bad = "a test case's limit must be positive"},
};
static const struct moat_msg exec_request_msg =
    MESSAGE("EXEC_REQUEST", exec_request_fields, REQ, .base = &request_msg, .unknown = "unknown field in exec request",
            MISSING("exec request needs language and version", "exec request needs at least one file"), .done = exec_request_done);
CODEC_ENCODE(exec_request, MOAT_MSG_EXEC_REQUEST, REQ, exec_request_msg)
CODEC_DECODE(exec_request, REQ, exec_request_msg)
CODEC_FREE(exec_request, REQ, exec_request_msg)

/* ---- exec result -------------------------------------------------------- */

static const char *stage_post(const void *m)
{
    const struct moat_stage_result *st = m;
    if (st->clock != 0 && (st->status != MOAT_STATUS_TO || st->clock > MOAT_CLOCK_MAX))
        return "a stage's clock names the clock of a TO, and only of a TO";
    return NULL;
}

static const char *stage_done(const void *m)
{
    const struct moat_stage_result *st = m;
    return st->clock != 0 && st->status != MOAT_STATUS_TO ? "a stage's clock goes with a TO only" : NULL;
}

#define ST struct moat_stage_result
static const struct moat_field stage_fields[] = {
    {1, "stdout", MOAT_K_BYTES, offsetof(ST, stdout_data), .aux = offsetof(ST, stdout_len)},
    {2, "stderr", MOAT_K_BYTES, offsetof(ST, stderr_data), .aux = offsetof(ST, stderr_len)},
    {3, "output", MOAT_K_BYTES, offsetof(ST, output_data), .aux = offsetof(ST, output_len)},
    {4, "code", MOAT_K_I32, offsetof(ST, code), .omit = MOAT_O_FLAG, .aux = offsetof(ST, has_code)},
    {5, "signal", MOAT_K_I32, offsetof(ST, signal), .omit = MOAT_O_FLAG, .aux = offsetof(ST, has_signal), RANGE(1, 64),
     .bad = "signal out of range"},
    {6, "status", MOAT_K_U8, offsetof(ST, status), RANGE(0, MOAT_STATUS_MAX), .bad = "unknown status", .enc_bad = "bad status",
     .need = 1},
    {7, "message", MOAT_K_STR, offsetof(ST, message), RANGE(0, MOAT_MAX_MESSAGE_LEN)},
    {8, "cpu_ms", MOAT_K_U64, offsetof(ST, cpu_ms), .omit = MOAT_O_ALWAYS},
    {9, "wall_ms", MOAT_K_U64, offsetof(ST, wall_ms), .omit = MOAT_O_ALWAYS},
    {10, "memory", MOAT_K_U64, offsetof(ST, memory_bytes), .omit = MOAT_O_ALWAYS},
    {11, "clock", MOAT_K_U8, offsetof(ST, clock), .omit = MOAT_O_DEFAULT, RANGE(1, MOAT_CLOCK_MAX), .bad = "unknown clock"},
};
static const struct moat_msg stage_msg = MESSAGE("stage", stage_fields, ST, .flags = MOAT_M_PRESENT,
                                                 .present = offsetof(ST, present), .unknown = "unknown field in stage result",
                                                 MISSING("stage result needs a status"), .post = stage_post, .done = stage_done);

static int result_has_stage(const struct moat_exec_result *r)
{
    return r->run.present || r->compile.present || r->ntests > 0;
}

static const char *exec_result_pre(const void *m)
{
    const struct moat_exec_result *r = m;
    if (r->language == NULL || r->version == NULL || !result_has_stage(r))
        return "language, version and a stage are required";
    return r->ntests > MOAT_MAX_TESTS ? "too many test case results" : NULL;
}

static const char *exec_result_done(const void *m)
{
    return result_has_stage(m) ? NULL : "exec result needs language, version and a stage";
}

#define RES struct moat_exec_result
static const struct moat_field exec_result_fields[] = {
    {1, "language", MOAT_K_STR, offsetof(RES, language), NAME, .need = 1},
    {2, "version", MOAT_K_STR, offsetof(RES, version), NAME, .need = 1},
    {3, "walls", MOAT_K_STR, offsetof(RES, walls), WALLS},
    {16, "compile", MOAT_K_NEST, offsetof(RES, compile), .sub = &stage_msg, .omit = MOAT_O_FLAG,
     .aux = offsetof(RES, compile.present)},
    {17, "run", MOAT_K_NEST, offsetof(RES, run), .sub = &stage_msg, .omit = MOAT_O_FLAG, .aux = offsetof(RES, run.present)},
    {18, "test", MOAT_K_NEST, offsetof(RES, tests), ARRAY(RES, ntests, MOAT_MAX_TESTS), .sub = &stage_msg,
     .too_many = "too many test case results"},
};
static const struct moat_msg exec_result_msg =
    MESSAGE("EXEC_RESULT", exec_result_fields, RES, .unknown = "unknown field in exec result",
            MISSING("exec result needs language, version and a stage"), .pre = exec_result_pre, .done = exec_result_done);
CODEC_ENCODE(exec_result, MOAT_MSG_EXEC_RESULT, RES, exec_result_msg)
CODEC_DECODE(exec_result, RES, exec_result_msg)
CODEC_FREE(exec_result, RES, exec_result_msg)

uint64_t moat_exec_result_cpu_ms(const struct moat_exec_result *res)
{
    uint64_t ms = (res->compile.present ? res->compile.cpu_ms : 0) + (res->run.present ? res->run.cpu_ms : 0);

    for (size_t i = 0; i < res->ntests; i++)
        ms += res->tests[i].cpu_ms;
    return ms;
}

/* ---- error -------------------------------------------------------------- */

static const struct moat_field error_fields[] = {
    {1, "code", MOAT_K_U16, offsetof(struct moat_error, code), RANGE(1, MOAT_ERR_MAX), .bad = "unknown error code",
     .enc_bad = "bad error code", .need = 1},
    {2, "message", MOAT_K_STR, offsetof(struct moat_error, message), RANGE(0, MOAT_MAX_MESSAGE_LEN), .need = 1},
};
static const struct moat_msg error_msg = MESSAGE("ERROR", error_fields, struct moat_error, .unknown = "unknown field in error",
                                                 MISSING("error needs a code and a message"));

int moat_encode_error(struct moat_buf *out, uint64_t job_id, uint16_t code, const char *message, const char **why)
{
    struct moat_error e = {code, NULL};
    const char *text = message ? message : "";
    memcpy(&e.message, &text, sizeof(text)); /* the encoder only reads it */
    return moat_codec_encode(out, MOAT_MSG_ERROR, job_id, &error_msg, &e, why);
}
CODEC_DECODE(error, struct moat_error, error_msg)
CODEC_FREE(error, struct moat_error, error_msg)

/* ---- runtimes ----------------------------------------------------------- */

static const char *runtime_pre(const void *m)
{
    const struct moat_runtime *r = m;
    if (r->language == NULL || r->version == NULL)
        return "runtime language and version are required";
    return r->naliases > MOAT_MAX_ALIASES ? "too many aliases" : NULL;
}

#define RT struct moat_runtime
static const struct moat_field runtime_fields[] = {
    {1, "language", MOAT_K_STR, offsetof(RT, language), NAME, .need = 1},
    {2, "version", MOAT_K_STR, offsetof(RT, version), NAME, .need = 1},
    {3, "alias", MOAT_K_STR, offsetof(RT, aliases), ARRAY(RT, naliases, MOAT_MAX_ALIASES), NAME, .too_many = "too many aliases"},
    {4, "compiled", MOAT_K_BOOL, offsetof(RT, compiled), RANGE(0, 1), .bad = "compiled flag out of range"},
    {5, "compiler_option_pattern", MOAT_K_STR, offsetof(RT, option_patterns), ARRAY(RT, noption_patterns, MOAT_MAX_OPTION_PATTERNS),
     RANGE(1, MOAT_MAX_COMPILER_OPTION_LEN), .too_many = "too many compiler option patterns"},
    /* bit n: isolation n can run; absent (and never sent): namespaces only */
    {6, "isolations", MOAT_K_U8, offsetof(RT, isolations), .omit = MOAT_O_DEFAULT, .dflt = 1u << MOAT_ISOLATION_NAMESPACES,
     .check = check_isolations},
};
static const struct moat_msg runtime_msg = MESSAGE("runtime", runtime_fields, RT, .unknown = "unknown field in runtime",
                                                   MISSING("runtime needs language and version"), .pre = runtime_pre);

static const char *load_done(const void *m)
{
    const struct moat_backend_load *l = m;
    if (l->busy > l->slots || l->queued > l->queue_max || l->sessions_busy > l->session_slots)
        return "the backend's load is out of range";
    return NULL;
}

#define LD struct moat_backend_load
static const struct moat_field load_fields[] = {
    {1, "slots", MOAT_K_U64, offsetof(LD, slots), .need = 1},
    {2, "busy", MOAT_K_U64, offsetof(LD, busy), .need = 1},
    {3, "queue_max", MOAT_K_U64, offsetof(LD, queue_max), .need = 1},
    {4, "queued", MOAT_K_U64, offsetof(LD, queued), .need = 1},
    {5, "session_slots", MOAT_K_U64, offsetof(LD, session_slots), .need = 1},
    {6, "sessions_busy", MOAT_K_U64, offsetof(LD, sessions_busy), .need = 1},
};
static const struct moat_msg load_msg =
    MESSAGE("load", load_fields, LD, .flags = MOAT_M_ANY_UNKNOWN, .unknown = "unknown field in the backend's load",
            MISSING("the backend's load is missing a field"), .done = load_done);

#define RTS struct moat_runtimes
static const struct moat_field runtimes_fields[] = {
    {1, "runtime", MOAT_K_NEST, offsetof(RTS, items), ARRAY(RTS, count, MOAT_MAX_RUNTIMES), .sub = &runtime_msg,
     .too_many = "too many runtimes"},
    {2, "load", MOAT_K_NEST, offsetof(RTS, load), .sub = &load_msg, .omit = MOAT_O_FLAG, .aux = offsetof(RTS, load.present)},
    {3, "walls", MOAT_K_STR, offsetof(RTS, walls), WALLS},
};
static const struct moat_msg runtimes_msg =
    MESSAGE("RUNTIMES", runtimes_fields, RTS, .flags = MOAT_M_ANY_UNKNOWN, .unknown = "unknown field in runtimes");
CODEC_ENCODE(runtimes, MOAT_MSG_RUNTIMES, RTS, runtimes_msg)
CODEC_DECODE(runtimes, RTS, runtimes_msg)
CODEC_FREE(runtimes, RTS, runtimes_msg)

int moat_encode_runtimes_query(struct moat_buf *out, uint64_t job_id, const char **why)
{
    return moat_codec_encode(out, MOAT_MSG_RUNTIMES_QUERY, job_id, NULL, NULL, why);
}

/* ---- session frames, gateway -> backend ----------------------------------- */

static const struct moat_field stdin_fields[] = {
    {1, "data", MOAT_K_BYTES, offsetof(struct moat_session_stdin, data), .aux = offsetof(struct moat_session_stdin, len),
     .check = check_chunk, .need = 1},
};
static const struct moat_msg stdin_msg =
    MESSAGE("SESSION_STDIN", stdin_fields, struct moat_session_stdin, .flags = MOAT_M_ONE_FIELD,
            .unknown = "unknown field in session stdin", MISSING("session stdin needs data"));

int moat_encode_session_stdin(struct moat_buf *out, uint64_t job_id, const uint8_t *data, size_t len, const char **why)
{
    struct moat_session_stdin s = {NULL, len};
    memcpy(&s.data, &data, sizeof(data)); /* the encoder only reads it */
    return moat_codec_encode(out, MOAT_MSG_SESSION_STDIN, job_id, &stdin_msg, &s, why);
}
CODEC_DECODE(session_stdin, struct moat_session_stdin, stdin_msg)
CODEC_FREE(session_stdin, struct moat_session_stdin, stdin_msg)

int moat_encode_session_stdin_close(struct moat_buf *out, uint64_t job_id, const char **why)
{
    return moat_codec_encode(out, MOAT_MSG_SESSION_STDIN_CLOSE, job_id, NULL, NULL, why);
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

/* SESSION_SIGNAL and SESSION_CREDIT: the message is the one integer itself. */
static const struct moat_field signal_fields[] = {{1, "signal", MOAT_K_I32, 0, .check = check_signal, .need = 1}};
static const struct moat_msg signal_msg =
    MESSAGE("SESSION_SIGNAL", signal_fields, int32_t, .flags = MOAT_M_ONE_FIELD, .unknown = "unknown field in session signal",
            MISSING("session signal needs a signal"));

int moat_encode_session_signal(struct moat_buf *out, uint64_t job_id, int32_t signal, const char **why)
{
    return moat_codec_encode(out, MOAT_MSG_SESSION_SIGNAL, job_id, &signal_msg, &signal, why);
}
CODEC_DECODE(session_signal, int32_t, signal_msg)

static const struct moat_field credit_fields[] = {
    {1, "bytes", MOAT_K_U32, 0, RANGE(1, MOAT_SESSION_WINDOW), .bad = "credit out of range", .enc_bad = "credit out of range",
     .need = 1},
};
static const struct moat_msg credit_msg =
    MESSAGE("SESSION_CREDIT", credit_fields, uint32_t, .flags = MOAT_M_ONE_FIELD, .unknown = "unknown field in session credit",
            MISSING("session credit needs bytes"));

int moat_encode_session_credit(struct moat_buf *out, uint64_t job_id, uint32_t bytes, const char **why)
{
    return moat_codec_encode(out, MOAT_MSG_SESSION_CREDIT, job_id, &credit_msg, &bytes, why);
}
CODEC_DECODE(session_credit, uint32_t, credit_msg)

/* SESSION_OPEN: every exec request field but the test cases, then the ceilings. */
static const char *open_pre(const void *m)
{
    return ((const struct moat_session_open *)m)->req.ntests > 0 ? "a session has no test cases" : NULL;
}

/* EXEC_REQUEST's own row holds it there: a session's request is "not asked" too. */
static void open_init(void *m)
{
    ((struct moat_session_open *)m)->req.tests_wall_ms = -1;
}

#define SO struct moat_session_open
static const struct moat_field open_fields[] = {
    {20, "wall_ms", MOAT_K_U64, offsetof(SO, wall_ms), .need = 3},
    {21, "idle_ms", MOAT_K_U64, offsetof(SO, idle_ms), .need = 3},
    {22, "cpu_ms", MOAT_K_U64, offsetof(SO, cpu_ms), .need = 3},
    {23, "stdin_bytes", MOAT_K_U64, offsetof(SO, stdin_bytes), .need = 3},
    {24, "output_bytes", MOAT_K_U64, offsetof(SO, output_bytes), .need = 3},
};
static const struct moat_msg open_msg =
    MESSAGE("SESSION_OPEN", open_fields, SO, .base = &request_msg, .base_off = offsetof(SO, req),
            .unknown = "unknown field in session open",
            MISSING("session open needs language and version", "session open needs at least one file",
                    "session open needs wall, idle, cpu, stdin and output limits"),
            .pre = open_pre, .init = open_init);
CODEC_ENCODE(session_open, MOAT_MSG_SESSION_OPEN, SO, open_msg)
CODEC_DECODE(session_open, SO, open_msg)
CODEC_FREE(session_open, SO, open_msg)

/* ---- session frames, backend -> gateway ----------------------------------- */

static const char *ready_pre(const void *m)
{
    const struct moat_session_ready *r = m;
    return r->language == NULL || r->version == NULL ? "language and version are required" : NULL;
}

#define SR struct moat_session_ready
static const struct moat_field ready_fields[] = {
    {1, "language", MOAT_K_STR, offsetof(SR, language), NAME, .need = 1},
    {2, "version", MOAT_K_STR, offsetof(SR, version), NAME, .need = 1},
    {3, "wall_ms", MOAT_K_U64, offsetof(SR, wall_ms), .need = 1},
    {4, "idle_ms", MOAT_K_U64, offsetof(SR, idle_ms), .need = 1},
    {5, "cpu_ms", MOAT_K_U64, offsetof(SR, cpu_ms), .need = 1},
    {6, "stdin_bytes", MOAT_K_U64, offsetof(SR, stdin_bytes), .need = 1},
    {7, "output_bytes", MOAT_K_U64, offsetof(SR, output_bytes), .need = 1},
    {8, "walls", MOAT_K_STR, offsetof(SR, walls), WALLS},
};
static const struct moat_msg ready_msg =
    MESSAGE("SESSION_READY", ready_fields, SR, .unknown = "unknown field in session ready",
            MISSING("session ready needs language, version and every limit"), .pre = ready_pre);
CODEC_ENCODE(session_ready, MOAT_MSG_SESSION_READY, SR, ready_msg)
CODEC_DECODE(session_ready, SR, ready_msg)
CODEC_FREE(session_ready, SR, ready_msg)

#define OUT struct moat_session_output
static const struct moat_field output_fields[] = {
    {1, "stream", MOAT_K_U8, offsetof(OUT, stream), RANGE(MOAT_STREAM_STDOUT, MOAT_STREAM_STDERR), .bad = "unknown stream",
     .enc_bad = "bad stream", .need = 1},
    {2, "offset", MOAT_K_U64, offsetof(OUT, offset_ms), .need = 1},
    {3, "data", MOAT_K_BYTES, offsetof(OUT, data), .aux = offsetof(OUT, len), .check = check_chunk, .need = 1},
};
static const struct moat_msg output_msg =
    MESSAGE("SESSION_OUTPUT", output_fields, OUT, .unknown = "unknown field in session output",
            MISSING("session output needs stream, offset and data"));
CODEC_ENCODE(session_output, MOAT_MSG_SESSION_OUTPUT, OUT, output_msg)
CODEC_DECODE(session_output, OUT, output_msg)
CODEC_FREE(session_output, OUT, output_msg)

#define STAGE_NUMBER RANGE(MOAT_STAGE_COMPILE, MOAT_STAGE_RUN), .bad = "unknown stage", .enc_bad = "bad stage", .need = 1
static const struct moat_field sstage_fields[] = {
    {1, "stage", MOAT_K_U8, offsetof(struct moat_session_stage, stage), STAGE_NUMBER},
    {2, "offset", MOAT_K_U64, offsetof(struct moat_session_stage, offset_ms), .need = 1},
};
static const struct moat_msg sstage_msg =
    MESSAGE("SESSION_STAGE", sstage_fields, struct moat_session_stage, .unknown = "unknown field in session stage",
            MISSING("session stage needs stage and offset"));
CODEC_ENCODE(session_stage, MOAT_MSG_SESSION_STAGE, struct moat_session_stage, sstage_msg)
CODEC_DECODE(session_stage, struct moat_session_stage, sstage_msg)

/* SESSION_EXIT: a stage result without output (that went as SESSION_OUTPUT),
 * and the clock exactly when its status is TO. */
static const char *exit_check(const struct moat_session_exit *e)
{
    const struct moat_stage_result *st = &e->result;
    if (st->stdout_len || st->stderr_len || st->output_len)
        return "session exit carries no output";
    if ((e->clock != 0) != (st->status == MOAT_STATUS_TO) || e->clock > MOAT_CLOCK_MAX)
        return "clock must name the clock of a TO, and only of a TO";
    return NULL;
}

static const char *exit_pre(const void *m)
{
    const struct moat_session_exit *e = m;
    return e->stage != MOAT_STAGE_COMPILE && e->stage != MOAT_STAGE_RUN ? "bad stage" : exit_check(e);
}

static const char *exit_done(const void *m)
{
    return exit_check(m);
}

#define EX struct moat_session_exit
static const struct moat_field exit_fields[] = {
    {1, "stage", MOAT_K_U8, offsetof(EX, stage), STAGE_NUMBER},
    {2, "offset", MOAT_K_U64, offsetof(EX, offset_ms), .need = 1},
    {3, "clock", MOAT_K_U8, offsetof(EX, clock), .omit = MOAT_O_DEFAULT, RANGE(1, MOAT_CLOCK_MAX), .bad = "unknown clock"},
    {4, "result", MOAT_K_NEST, offsetof(EX, result), .sub = &stage_msg, .need = 1},
};
static const struct moat_msg exit_msg =
    MESSAGE("SESSION_EXIT", exit_fields, EX, .unknown = "unknown field in session exit",
            MISSING("session exit needs stage, offset and result"), .pre = exit_pre, .done = exit_done);
CODEC_ENCODE(session_exit, MOAT_MSG_SESSION_EXIT, EX, exit_msg)
CODEC_DECODE(session_exit, EX, exit_msg)
CODEC_FREE(session_exit, EX, exit_msg)

/* ---- introspection ------------------------------------------------------ */

/* Every table PROTOCOL.md documents, in its order. */
static const struct moat_msg *const documented[] = {
    &exec_request_msg, &file_msg,    &test_case_msg, &exec_result_msg, &stage_msg,  &error_msg,
    &runtimes_msg,     &runtime_msg, &load_msg,      &open_msg,        &ready_msg,  &stdin_msg,
    &signal_msg,       &output_msg,  &sstage_msg,    &exit_msg,        &credit_msg,
};

int moat_proto_describe(size_t i, struct moat_proto_field_info *info)
{
    for (size_t k = 0; k < sizeof(documented) / sizeof(documented[0]); k++) {
        const struct moat_msg *m = documented[k];
        size_t n = m->nfields + (m->base ? m->base->nfields : 0);
        if (i < n)
            return moat_codec_describe(m, i, info);
        i -= n;
    }
    return 0;
}

/* ---- header ------------------------------------------------------------- */

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
    h->flags = (uint16_t)moat_codec_get(buf + 2, 2);
    h->length = (uint32_t)moat_codec_get(buf + 4, 4);
    h->job_id = moat_codec_get(buf + 8, 8);
    if (h->version != MOAT_PROTO_VERSION)
        *why = "unsupported protocol version";
    else if (h->type < MOAT_MSG_EXEC_REQUEST || h->type > MOAT_MSG_MAX)
        *why = "unknown message type";
    else if (h->flags != 0)
        *why = "reserved flags set";
    else if (h->length > frame_cap[h->type])
        *why = "frame exceeds the size cap";
    else
        return 0;
    return -1;
}

/* ---- names -------------------------------------------------------------- */

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
