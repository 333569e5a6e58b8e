/*
 * fuzz_proto_decode.c - libFuzzer target for the gateway <-> backend codec
 * (backend/protocol/moat_proto.c), the first code the privileged backend
 * runs on bytes from another process.
 *
 * Every input goes through moat_frame_parse_header(); a valid header's
 * payload is decoded as its type says (what the daemons do), and the bytes
 * after the header are also fed to every decoder regardless of the header.
 * A successful decode must re-encode, and the re-encoded frame must decode
 * again to the same message and re-encode to the very same bytes.  A failed
 * decode must give a reason and leave its output empty.
 *
 * Seeds: a frame of every message type (SESSION_OPEN and SESSION_READY
 * too), full and minimal, made with the real encoders.  Random inputs:
 * mostly a valid header of a random type with small tags (up to the
 * ceilings' 20..24) in a random payload, so the decoders get past the first
 * field.
 *
 * Built as the real fuzzer with -DMOAT_FUZZ=ON, and always as part of
 * fuzz_proto_replay (see replay.c).  Violations abort().
 */
#include "fuzz_target.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moat_proto.h"

/* Re-encoding may grow a message a little (absent optional stage fields are
 * written out); only near the frame cap may that make the encoder refuse. */
#define REENCODE_SLACK 65536

static int is_zero(const void *p, size_t len)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < len; i++)
        if (b[i])
            return 0;
    return 1;
}

static int str_eq(const char *a, const char *b)
{
    if (a == NULL || b == NULL)
        return a == b;
    return strcmp(a, b) == 0;
}

static int bytes_eq(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen)
{
    return alen == blen && (alen == 0 || memcmp(a, b, alen) == 0);
}

/* The frame an encoder just wrote: header sane, payload returned. */
static const uint8_t *reparse(const struct moat_buf *out, uint8_t type, uint64_t job, size_t *len)
{
    struct moat_frame_header h;
    const char *why = NULL;
    CHECK(moat_frame_parse_header(out->data, out->len, &h, &why) == 0);
    CHECK(h.version == MOAT_PROTO_VERSION);
    CHECK(h.type == type);
    CHECK(h.flags == 0);
    CHECK(h.job_id == job);
    CHECK((size_t)h.length + MOAT_FRAME_HEADER_SIZE == out->len);
    *len = h.length;
    return out->data + MOAT_FRAME_HEADER_SIZE;
}

/* Encoding failed: allowed only near the size cap, and must leave nothing. */
static void encode_failed(const struct moat_buf *out, size_t in_len, const char *why)
{
    CHECK(why != NULL);
    CHECK(out->len == 0);
    CHECK(in_len > MOAT_FRAME_MAX_PAYLOAD - REENCODE_SLACK);
}

static void same_bytes(const struct moat_buf *a, const struct moat_buf *b)
{
    CHECK(a->len == b->len);
    CHECK(memcmp(a->data, b->data, a->len) == 0);
}

/* ---- exec request --------------------------------------------------------- */

static void request_equal(const struct moat_exec_request *a, const struct moat_exec_request *b)
{
    CHECK(str_eq(a->language, b->language));
    CHECK(str_eq(a->version, b->version));
    CHECK(a->nfiles == b->nfiles);
    for (size_t i = 0; i < a->nfiles; i++) {
        CHECK(str_eq(a->files[i].name, b->files[i].name));
        CHECK(bytes_eq(a->files[i].content, a->files[i].content_len, b->files[i].content, b->files[i].content_len));
    }
    CHECK(a->nargs == b->nargs);
    for (size_t i = 0; i < a->nargs; i++)
        CHECK(str_eq(a->args[i], b->args[i]));
    CHECK(bytes_eq(a->stdin_data, a->stdin_len, b->stdin_data, b->stdin_len));
    CHECK(a->run_timeout_ms == b->run_timeout_ms);
    CHECK(a->compile_timeout_ms == b->compile_timeout_ms);
    CHECK(a->run_memory_bytes == b->run_memory_bytes);
    CHECK(a->compile_memory_bytes == b->compile_memory_bytes);
    CHECK(a->run_cpu_ms == b->run_cpu_ms);
    CHECK(a->compile_cpu_ms == b->compile_cpu_ms);
    CHECK(a->run_stack_kib == b->run_stack_kib && a->run_processes == b->run_processes &&
          a->run_file_size_kib == b->run_file_size_kib);
    CHECK(a->ncompiler_options == b->ncompiler_options);
    for (size_t i = 0; i < a->ncompiler_options; i++)
        CHECK(str_eq(a->compiler_options[i], b->compiler_options[i]));
    CHECK(a->ntests == b->ntests);
    CHECK(a->tests_wall_ms == b->tests_wall_ms);
    for (size_t i = 0; i < a->ntests; i++) {
        const struct moat_test_case *x = &a->tests[i], *y = &b->tests[i];
        CHECK(bytes_eq(x->stdin_data, x->stdin_len, y->stdin_data, y->stdin_len));
        CHECK(x->nargs == y->nargs);
        for (size_t j = 0; j < x->nargs; j++)
            CHECK(str_eq(x->args[j], y->args[j]));
        CHECK(x->run_timeout_ms == y->run_timeout_ms && x->run_memory_bytes == y->run_memory_bytes &&
              x->run_cpu_ms == y->run_cpu_ms);
    }
}

static void request_invariants(const struct moat_exec_request *r)
{
    CHECK(r->language != NULL && r->version != NULL);
    CHECK(r->nfiles >= 1 && r->nfiles <= MOAT_MAX_FILES);
    CHECK(r->nargs <= MOAT_MAX_ARGS);
    CHECK(strlen(r->language) <= MOAT_MAX_NAME_LEN && strlen(r->version) <= MOAT_MAX_NAME_LEN);
    for (size_t i = 0; i < r->nfiles; i++)
        CHECK(r->files[i].name != NULL && r->files[i].content != NULL && strlen(r->files[i].name) <= MOAT_MAX_NAME_LEN);
    for (size_t i = 0; i < r->nargs; i++)
        CHECK(r->args[i] != NULL && strlen(r->args[i]) <= MOAT_MAX_ARG_LEN);
    CHECK(r->run_timeout_ms >= -1 && r->compile_timeout_ms >= -1);
    CHECK(r->run_memory_bytes >= -1 && r->compile_memory_bytes >= -1);
    /* a CPU limit is -1 (not asked) or positive: a decoded 0 would be lost on re-encoding */
    CHECK((r->run_cpu_ms == -1 || r->run_cpu_ms > 0) && (r->compile_cpu_ms == -1 || r->compile_cpu_ms > 0));
    /* the run stage's rlimits: -1 or 1 .. the wire's bound; options: non-empty, within the caps */
    CHECK(r->run_stack_kib == -1 || (r->run_stack_kib > 0 && r->run_stack_kib <= (int64_t)MOAT_MAX_STACK_KIB));
    CHECK(r->run_processes == -1 || (r->run_processes > 0 && r->run_processes <= (int64_t)MOAT_MAX_PROCESSES));
    CHECK(r->run_file_size_kib == -1 || (r->run_file_size_kib > 0 && r->run_file_size_kib <= (int64_t)MOAT_MAX_FILE_SIZE_KIB));
    CHECK(r->ncompiler_options <= MOAT_MAX_COMPILER_OPTIONS);
    for (size_t i = 0; i < r->ncompiler_options; i++)
        CHECK(r->compiler_options[i] != NULL && r->compiler_options[i][0] != '\0' &&
              strlen(r->compiler_options[i]) <= MOAT_MAX_COMPILER_OPTION_LEN);
    /* test cases: within the cap; every limit -1 (the request's) or positive; a wall budget only with cases */
    CHECK(r->ntests <= MOAT_MAX_TESTS);
    CHECK(r->tests_wall_ms == -1 || (r->tests_wall_ms > 0 && r->ntests > 0));
    for (size_t i = 0; i < r->ntests; i++) {
        const struct moat_test_case *t = &r->tests[i];
        CHECK(t->nargs <= MOAT_MAX_ARGS);
        for (size_t j = 0; j < t->nargs; j++)
            CHECK(t->args[j] != NULL && strlen(t->args[j]) <= MOAT_MAX_ARG_LEN);
        CHECK(t->run_timeout_ms == -1 || t->run_timeout_ms > 0);
        CHECK(t->run_memory_bytes == -1 || t->run_memory_bytes > 0);
        CHECK(t->run_cpu_ms == -1 || t->run_cpu_ms > 0);
    }
}

static void do_request(const uint8_t *p, size_t len, uint64_t job)
{
    struct moat_exec_request a, b;
    struct moat_buf e1 = {0}, e2 = {0};
    const char *why = NULL;
    size_t len1, len2;

    if (moat_decode_exec_request(p, len, &a, &why) != 0) {
        CHECK(why != NULL);
        CHECK(is_zero(&a, sizeof(a)));
        return;
    }
    request_invariants(&a);
    why = NULL;
    if (moat_encode_exec_request(&e1, job, &a, &why) != 0) {
        encode_failed(&e1, len, why);
        goto out;
    }
    const uint8_t *p1 = reparse(&e1, MOAT_MSG_EXEC_REQUEST, job, &len1);
    CHECK(len1 <= len); /* nothing is added to a request */
    CHECK(moat_decode_exec_request(p1, len1, &b, &why) == 0);
    request_equal(&a, &b);
    CHECK(moat_encode_exec_request(&e2, job, &b, &why) == 0);
    reparse(&e2, MOAT_MSG_EXEC_REQUEST, job, &len2);
    same_bytes(&e1, &e2);
    moat_exec_request_free(&b);
out:
    moat_exec_request_free(&a);
    CHECK(is_zero(&a, sizeof(a)));
    moat_buf_free(&e1);
    moat_buf_free(&e2);
}

/* ---- exec result ---------------------------------------------------------- */

static void stage_equal(const struct moat_stage_result *a, const struct moat_stage_result *b)
{
    CHECK(a->present == b->present);
    if (!a->present)
        return;
    CHECK(bytes_eq(a->stdout_data, a->stdout_len, b->stdout_data, b->stdout_len));
    CHECK(bytes_eq(a->stderr_data, a->stderr_len, b->stderr_data, b->stderr_len));
    CHECK(bytes_eq(a->output_data, a->output_len, b->output_data, b->output_len));
    CHECK(a->has_code == b->has_code);
    CHECK(!a->has_code || a->code == b->code);
    CHECK(a->has_signal == b->has_signal);
    CHECK(!a->has_signal || a->signal == b->signal);
    CHECK(a->status == b->status);
    CHECK(str_eq(a->message, b->message));
    CHECK(a->cpu_ms == b->cpu_ms);
    CHECK(a->wall_ms == b->wall_ms);
    CHECK(a->memory_bytes == b->memory_bytes);
    CHECK(a->clock == b->clock);
}

static void stage_invariants(const struct moat_stage_result *st)
{
    if (!st->present)
        return;
    CHECK(st->status <= MOAT_STATUS_MAX);
    CHECK(moat_status_name(st->status) != NULL);
    CHECK(!st->has_signal || (st->signal >= 1 && st->signal <= 64));
    CHECK(st->message == NULL || strlen(st->message) <= MOAT_MAX_MESSAGE_LEN);
    CHECK(st->clock == 0 || (st->status == MOAT_STATUS_TO && st->clock <= MOAT_CLOCK_MAX));
}

static void do_result(const uint8_t *p, size_t len, uint64_t job)
{
    struct moat_exec_result a, b;
    struct moat_buf e1 = {0}, e2 = {0};
    const char *why = NULL;
    size_t len1, len2;

    if (moat_decode_exec_result(p, len, &a, &why) != 0) {
        CHECK(why != NULL);
        CHECK(is_zero(&a, sizeof(a)));
        return;
    }
    CHECK(a.language != NULL && a.version != NULL);
    CHECK(a.walls == NULL || moat_walls_valid(a.walls));
    CHECK(a.run.present || a.compile.present || a.ntests > 0);
    CHECK(a.ntests <= MOAT_MAX_TESTS);
    stage_invariants(&a.compile);
    stage_invariants(&a.run);
    for (size_t i = 0; i < a.ntests; i++) {
        CHECK(a.tests[i].present);
        stage_invariants(&a.tests[i]);
    }
    why = NULL;
    if (moat_encode_exec_result(&e1, job, &a, &why) != 0) {
        encode_failed(&e1, len, why);
        goto out;
    }
    const uint8_t *p1 = reparse(&e1, MOAT_MSG_EXEC_RESULT, job, &len1);
    CHECK(moat_decode_exec_result(p1, len1, &b, &why) == 0);
    CHECK(str_eq(a.language, b.language));
    CHECK(str_eq(a.version, b.version));
    CHECK(str_eq(a.walls, b.walls));
    stage_equal(&a.compile, &b.compile);
    stage_equal(&a.run, &b.run);
    CHECK(a.ntests == b.ntests);
    for (size_t i = 0; i < a.ntests; i++)
        stage_equal(&a.tests[i], &b.tests[i]);
    CHECK(moat_encode_exec_result(&e2, job, &b, &why) == 0);
    reparse(&e2, MOAT_MSG_EXEC_RESULT, job, &len2);
    same_bytes(&e1, &e2);
    moat_exec_result_free(&b);
out:
    moat_exec_result_free(&a);
    moat_buf_free(&e1);
    moat_buf_free(&e2);
}

/* ---- error ---------------------------------------------------------------- */

static void do_error(const uint8_t *p, size_t len, uint64_t job)
{
    struct moat_error a, b;
    struct moat_buf e1 = {0}, e2 = {0};
    const char *why = NULL;
    size_t len1;

    if (moat_decode_error(p, len, &a, &why) != 0) {
        CHECK(why != NULL);
        CHECK(is_zero(&a, sizeof(a)));
        return;
    }
    CHECK(a.code >= 1 && a.code <= MOAT_ERR_MAX);
    CHECK(a.message != NULL && strlen(a.message) <= MOAT_MAX_MESSAGE_LEN);
    CHECK(moat_encode_error(&e1, job, a.code, a.message, &why) == 0);
    const uint8_t *p1 = reparse(&e1, MOAT_MSG_ERROR, job, &len1);
    CHECK(len1 <= len);
    CHECK(moat_decode_error(p1, len1, &b, &why) == 0);
    CHECK(a.code == b.code);
    CHECK(str_eq(a.message, b.message));
    CHECK(moat_encode_error(&e2, job, b.code, b.message, &why) == 0);
    same_bytes(&e1, &e2);
    moat_error_free(&b);
    moat_error_free(&a);
    moat_buf_free(&e1);
    moat_buf_free(&e2);
}

/* ---- runtimes ------------------------------------------------------------- */

static void do_runtimes(const uint8_t *p, size_t len, uint64_t job)
{
    struct moat_runtimes a, b;
    struct moat_buf e1 = {0}, e2 = {0};
    const char *why = NULL;
    size_t len1;

    if (moat_decode_runtimes(p, len, &a, &why) != 0) {
        CHECK(why != NULL);
        CHECK(is_zero(&a, sizeof(a)));
        return;
    }
    CHECK(a.count <= MOAT_MAX_RUNTIMES);
    for (size_t i = 0; i < a.count; i++) {
        CHECK(a.items[i].language != NULL && a.items[i].version != NULL);
        CHECK(a.items[i].naliases <= MOAT_MAX_ALIASES);
        CHECK(a.items[i].compiled == 0 || a.items[i].compiled == 1);
    }
    CHECK(a.load.busy <= a.load.slots && a.load.queued <= a.load.queue_max && a.load.sessions_busy <= a.load.session_slots);
    why = NULL;
    if (moat_encode_runtimes(&e1, job, &a, &why) != 0) {
        encode_failed(&e1, len, why);
        goto out;
    }
    const uint8_t *p1 = reparse(&e1, MOAT_MSG_RUNTIMES, job, &len1);
    CHECK(moat_decode_runtimes(p1, len1, &b, &why) == 0);
    CHECK(a.count == b.count);
    CHECK(memcmp(&a.load, &b.load, sizeof(a.load)) == 0);
    CHECK(a.walls == NULL || moat_walls_valid(a.walls));
    CHECK(str_eq(a.walls, b.walls));
    for (size_t i = 0; i < a.count; i++) {
        const struct moat_runtime *x = &a.items[i], *y = &b.items[i];
        CHECK(str_eq(x->language, y->language));
        CHECK(str_eq(x->version, y->version));
        CHECK(x->naliases == y->naliases);
        for (size_t j = 0; j < x->naliases; j++)
            CHECK(str_eq(x->aliases[j], y->aliases[j]));
        CHECK(x->compiled == y->compiled);
        CHECK(x->noption_patterns == y->noption_patterns);
        for (size_t j = 0; j < x->noption_patterns; j++)
            CHECK(str_eq(x->option_patterns[j], y->option_patterns[j]));
    }
    CHECK(moat_encode_runtimes(&e2, job, &b, &why) == 0);
    same_bytes(&e1, &e2);
    moat_runtimes_free(&b);
out:
    moat_runtimes_free(&a);
    moat_buf_free(&e1);
    moat_buf_free(&e2);
}

/* ---- session messages ---------------------------------------------------- */

/* Encodes a, decodes it back into b and encodes b: the same bytes, or abort.
 * The expressions use the caller's why and the macro's e1, e2, p1, len1. */
#define SESSION_ROUNDTRIP(type, job, encode_a, decode_b, encode_b, equal)                                                          \
    do {                                                                                                                           \
        struct moat_buf e1 = {0}, e2 = {0};                                                                                        \
        size_t len1;                                                                                                               \
        CHECK((encode_a) == 0);                                                                                                    \
        const uint8_t *p1 = reparse(&e1, (type), (job), &len1);                                                                    \
        CHECK((decode_b) == 0);                                                                                                    \
        CHECK(equal);                                                                                                              \
        CHECK((encode_b) == 0);                                                                                                    \
        same_bytes(&e1, &e2);                                                                                                      \
        moat_buf_free(&e1);                                                                                                        \
        moat_buf_free(&e2);                                                                                                        \
    } while (0)

static void do_session_stdin(const uint8_t *p, size_t len, uint64_t job)
{
    struct moat_session_stdin a, b;
    const char *why = NULL;

    if (moat_decode_session_stdin(p, len, &a, &why) != 0) {
        CHECK(why != NULL);
        CHECK(is_zero(&a, sizeof(a)));
        return;
    }
    CHECK(a.len >= 1 && a.len <= MOAT_SESSION_CHUNK_MAX);
    SESSION_ROUNDTRIP(MOAT_MSG_SESSION_STDIN, job, moat_encode_session_stdin(&e1, job, a.data, a.len, &why),
                      moat_decode_session_stdin(p1, len1, &b, &why), moat_encode_session_stdin(&e2, job, b.data, b.len, &why),
                      bytes_eq(a.data, a.len, b.data, b.len));
    moat_session_stdin_free(&b);
    moat_session_stdin_free(&a);
}

static void do_session_stdin_close(const uint8_t *p, size_t len, uint64_t job)
{
    const char *why = NULL;

    if (moat_decode_session_stdin_close(p, len, &why) != 0) {
        CHECK(why != NULL && len > 0);
        return;
    }
    CHECK(len == 0);
    SESSION_ROUNDTRIP(MOAT_MSG_SESSION_STDIN_CLOSE, job, moat_encode_session_stdin_close(&e1, job, &why),
                      moat_decode_session_stdin_close(p1, len1, &why), moat_encode_session_stdin_close(&e2, job, &why), len1 == 0);
}

static void do_session_signal(const uint8_t *p, size_t len, uint64_t job)
{
    int32_t a, b;
    const char *why = NULL;

    if (moat_decode_session_signal(p, len, &a, &why) != 0) {
        CHECK(why != NULL && a == 0);
        return;
    }
    CHECK(moat_session_signal_allowed(a));
    SESSION_ROUNDTRIP(MOAT_MSG_SESSION_SIGNAL, job, moat_encode_session_signal(&e1, job, a, &why),
                      moat_decode_session_signal(p1, len1, &b, &why), moat_encode_session_signal(&e2, job, b, &why), a == b);
}

static void do_session_output(const uint8_t *p, size_t len, uint64_t job)
{
    struct moat_session_output a, b;
    const char *why = NULL;

    if (moat_decode_session_output(p, len, &a, &why) != 0) {
        CHECK(why != NULL);
        CHECK(is_zero(&a, sizeof(a)));
        return;
    }
    CHECK(a.stream == MOAT_STREAM_STDOUT || a.stream == MOAT_STREAM_STDERR);
    CHECK(a.len >= 1 && a.len <= MOAT_SESSION_CHUNK_MAX);
    SESSION_ROUNDTRIP(MOAT_MSG_SESSION_OUTPUT, job, moat_encode_session_output(&e1, job, &a, &why),
                      moat_decode_session_output(p1, len1, &b, &why), moat_encode_session_output(&e2, job, &b, &why),
                      a.stream == b.stream && a.offset_ms == b.offset_ms && bytes_eq(a.data, a.len, b.data, b.len));
    moat_session_output_free(&b);
    moat_session_output_free(&a);
}

static void do_session_stage(const uint8_t *p, size_t len, uint64_t job)
{
    struct moat_session_stage a, b;
    const char *why = NULL;

    if (moat_decode_session_stage(p, len, &a, &why) != 0) {
        CHECK(why != NULL);
        CHECK(is_zero(&a, sizeof(a)));
        return;
    }
    CHECK(a.stage == MOAT_STAGE_COMPILE || a.stage == MOAT_STAGE_RUN);
    SESSION_ROUNDTRIP(MOAT_MSG_SESSION_STAGE, job, moat_encode_session_stage(&e1, job, &a, &why),
                      moat_decode_session_stage(p1, len1, &b, &why), moat_encode_session_stage(&e2, job, &b, &why),
                      a.stage == b.stage && a.offset_ms == b.offset_ms);
}

static void do_session_exit(const uint8_t *p, size_t len, uint64_t job)
{
    struct moat_session_exit a, b;
    const char *why = NULL;

    if (moat_decode_session_exit(p, len, &a, &why) != 0) {
        CHECK(why != NULL);
        CHECK(is_zero(&a, sizeof(a)));
        return;
    }
    CHECK(a.stage == MOAT_STAGE_COMPILE || a.stage == MOAT_STAGE_RUN);
    CHECK(a.result.present);
    stage_invariants(&a.result);
    CHECK(a.result.stdout_len == 0 && a.result.stderr_len == 0 && a.result.output_len == 0);
    CHECK((a.clock != 0) == (a.result.status == MOAT_STATUS_TO) && a.clock <= MOAT_CLOCK_MAX);
    SESSION_ROUNDTRIP(MOAT_MSG_SESSION_EXIT, job, moat_encode_session_exit(&e1, job, &a, &why),
                      moat_decode_session_exit(p1, len1, &b, &why), moat_encode_session_exit(&e2, job, &b, &why),
                      a.stage == b.stage && a.offset_ms == b.offset_ms && a.clock == b.clock);
    stage_equal(&a.result, &b.result);
    moat_session_exit_free(&b);
    moat_session_exit_free(&a);
}

static void do_session_credit(const uint8_t *p, size_t len, uint64_t job)
{
    uint32_t a, b;
    const char *why = NULL;

    if (moat_decode_session_credit(p, len, &a, &why) != 0) {
        CHECK(why != NULL && a == 0);
        return;
    }
    CHECK(a >= 1 && a <= MOAT_SESSION_WINDOW);
    SESSION_ROUNDTRIP(MOAT_MSG_SESSION_CREDIT, job, moat_encode_session_credit(&e1, job, a, &why),
                      moat_decode_session_credit(p1, len1, &b, &why), moat_encode_session_credit(&e2, job, b, &why), a == b);
}

static void do_session_open(const uint8_t *p, size_t len, uint64_t job)
{
    struct moat_session_open a, b;
    struct moat_buf e1 = {0}, e2 = {0};
    const char *why = NULL;
    size_t len1, len2;

    if (moat_decode_session_open(p, len, &a, &why) != 0) {
        CHECK(why != NULL);
        CHECK(is_zero(&a, sizeof(a)));
        return;
    }
    request_invariants(&a.req);
    why = NULL;
    if (moat_encode_session_open(&e1, job, &a, &why) != 0) {
        encode_failed(&e1, len, why);
        goto out;
    }
    const uint8_t *p1 = reparse(&e1, MOAT_MSG_SESSION_OPEN, job, &len1);
    CHECK(len1 <= len); /* nothing is added to an open */
    CHECK(moat_decode_session_open(p1, len1, &b, &why) == 0);
    request_equal(&a.req, &b.req);
    CHECK(a.wall_ms == b.wall_ms && a.idle_ms == b.idle_ms && a.cpu_ms == b.cpu_ms);
    CHECK(a.stdin_bytes == b.stdin_bytes && a.output_bytes == b.output_bytes);
    CHECK(moat_encode_session_open(&e2, job, &b, &why) == 0);
    reparse(&e2, MOAT_MSG_SESSION_OPEN, job, &len2);
    same_bytes(&e1, &e2);
    moat_session_open_free(&b);
out:
    moat_session_open_free(&a);
    CHECK(is_zero(&a, sizeof(a)));
    moat_buf_free(&e1);
    moat_buf_free(&e2);
}

static int ready_equal(const struct moat_session_ready *a, const struct moat_session_ready *b)
{
    return str_eq(a->language, b->language) && str_eq(a->version, b->version) && a->wall_ms == b->wall_ms &&
           a->idle_ms == b->idle_ms && a->cpu_ms == b->cpu_ms && a->stdin_bytes == b->stdin_bytes &&
           a->output_bytes == b->output_bytes && str_eq(a->walls, b->walls);
}

static void do_session_ready(const uint8_t *p, size_t len, uint64_t job)
{
    struct moat_session_ready a, b;
    const char *why = NULL;

    if (moat_decode_session_ready(p, len, &a, &why) != 0) {
        CHECK(why != NULL);
        CHECK(is_zero(&a, sizeof(a)));
        return;
    }
    CHECK(a.language != NULL && a.version != NULL);
    CHECK(strlen(a.language) <= MOAT_MAX_NAME_LEN && strlen(a.version) <= MOAT_MAX_NAME_LEN);
    CHECK(a.walls == NULL || moat_walls_valid(a.walls));
    SESSION_ROUNDTRIP(MOAT_MSG_SESSION_READY, job, moat_encode_session_ready(&e1, job, &a, &why),
                      moat_decode_session_ready(p1, len1, &b, &why), moat_encode_session_ready(&e2, job, &b, &why),
                      ready_equal(&a, &b));
    moat_session_ready_free(&b);
    moat_session_ready_free(&a);
}

static void decode_as(uint8_t type, const uint8_t *p, size_t len, uint64_t job)
{
    switch (type) {
    case MOAT_MSG_EXEC_REQUEST:
        do_request(p, len, job);
        break;
    case MOAT_MSG_EXEC_RESULT:
        do_result(p, len, job);
        break;
    case MOAT_MSG_ERROR:
        do_error(p, len, job);
        break;
    case MOAT_MSG_RUNTIMES:
        do_runtimes(p, len, job);
        break;
    case MOAT_MSG_SESSION_STDIN:
        do_session_stdin(p, len, job);
        break;
    case MOAT_MSG_SESSION_STDIN_CLOSE:
        do_session_stdin_close(p, len, job);
        break;
    case MOAT_MSG_SESSION_SIGNAL:
        do_session_signal(p, len, job);
        break;
    case MOAT_MSG_SESSION_OUTPUT:
        do_session_output(p, len, job);
        break;
    case MOAT_MSG_SESSION_STAGE:
        do_session_stage(p, len, job);
        break;
    case MOAT_MSG_SESSION_EXIT:
        do_session_exit(p, len, job);
        break;
    case MOAT_MSG_SESSION_CREDIT:
        do_session_credit(p, len, job);
        break;
    case MOAT_MSG_SESSION_OPEN:
        do_session_open(p, len, job);
        break;
    case MOAT_MSG_SESSION_READY:
        do_session_ready(p, len, job);
        break;
    default: /* MOAT_MSG_RUNTIMES_QUERY has no payload to decode */
        break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct moat_frame_header h;
    const char *why = NULL;

    if (moat_frame_parse_header(data, size, &h, &why) == 0) {
        CHECK(size >= MOAT_FRAME_HEADER_SIZE);
        CHECK(h.version == MOAT_PROTO_VERSION);
        CHECK(h.type >= MOAT_MSG_EXEC_REQUEST && h.type <= MOAT_MSG_MAX);
        CHECK(h.flags == 0);
        CHECK(h.length <= MOAT_FRAME_MAX_PAYLOAD);
        /* as the daemons do: the payload is exactly h.length bytes */
        if (h.length <= size - MOAT_FRAME_HEADER_SIZE)
            decode_as(h.type, data + MOAT_FRAME_HEADER_SIZE, h.length, h.job_id);
    } else {
        CHECK(why != NULL);
    }

    /* every decoder on whatever follows the header */
    const uint8_t *p = size >= MOAT_FRAME_HEADER_SIZE ? data + MOAT_FRAME_HEADER_SIZE : data;
    size_t n = size >= MOAT_FRAME_HEADER_SIZE ? size - MOAT_FRAME_HEADER_SIZE : size;
    for (uint8_t t = MOAT_MSG_EXEC_REQUEST; t <= MOAT_MSG_MAX; t++)
        decode_as(t, p, n, 0x0123456789abcdefull);
    return 0;
}

/* ===========================================================================
 * Seeds and random frames for the replay driver
 * ======================================================================== */

/* Hands the buffer's frame over as a seed and frees it; a seed that did not encode is the harness's bug. */
static void add_frame(fuzz_add_seed_fn *add, struct moat_buf *b, int rc, const char *why)
{
    if (rc != 0) {
        fprintf(stderr, "fuzz_proto_decode: a seed did not encode: %s\n", why ? why : "?");
        abort();
    }
    add(b->data, b->len, 0);
    moat_buf_free(b);
}

static void make_seeds(fuzz_add_seed_fn *add)
{
    struct moat_buf b = {0};
    const char *why = NULL;
    int rc;

    /* exec request: every field */
    char n0[] = "main.py", n1[] = "blob.bin", lang[] = "python", ver[] = "3.11.x";
    uint8_t c0[] = "print(input())\n", c1[] = {0, 1, 2, 0xff, 0xc0, 0x80, 0};
    struct moat_file files[] = {{n0, c0, sizeof(c0) - 1}, {n1, c1, sizeof(c1)}};
    char a0[] = "x\ny", a1[] = "", a2[] = "\xc3\xa9";
    char *args[] = {a0, a1, a2};
    char opt0[] = "-O2", opt1[] = "-DX=5";
    char *opts[] = {opt0, opt1};
    uint8_t in[] = {'4', '2', '\n', 0};
    struct moat_exec_request req = {.language = lang,
                                    .version = ver,
                                    .files = files,
                                    .nfiles = 2,
                                    .args = args,
                                    .nargs = 3,
                                    .stdin_data = in,
                                    .stdin_len = sizeof(in),
                                    .run_timeout_ms = 3000,
                                    .compile_timeout_ms = 10000,
                                    .run_memory_bytes = 268435456,
                                    .compile_memory_bytes = 0,
                                    .run_cpu_ms = 1500,
                                    .compile_cpu_ms = 8000,
                                    .run_stack_kib = 8192,
                                    .run_processes = 16,
                                    .run_file_size_kib = 1024,
                                    .compiler_options = opts,
                                    .ncompiler_options = 2};
    rc = moat_encode_exec_request(&b, 1, &req, &why);
    add_frame(add, &b, rc, why);

    /* exec request: defaults, one empty file */
    struct moat_file empty = {n0, NULL, 0};
    struct moat_exec_request min = {.language = lang,
                                    .version = ver,
                                    .files = &empty,
                                    .nfiles = 1,
                                    .run_timeout_ms = -1,
                                    .compile_timeout_ms = -1,
                                    .run_memory_bytes = -1,
                                    .compile_memory_bytes = -1};
    rc = moat_encode_exec_request(&b, 2, &min, &why);
    add_frame(add, &b, rc, why);

    /* exec result: both stages */
    char rl[] = "c", rv[] = "10.2.1", msg[] = "memory limit", rw[] = "namespaces+seccomp";
    uint8_t out[] = {'o', 'k', 0xff, 0}, err[] = "warn\n";
    struct moat_exec_result res = {
        .language = rl,
        .version = rv,
        .walls = rw,
        .compile = {.present = 1,
                    .stderr_data = err,
                    .stderr_len = 5,
                    .output_data = err,
                    .output_len = 5,
                    .has_code = 1,
                    .code = 0,
                    .status = MOAT_STATUS_OK,
                    .cpu_ms = 10,
                    .wall_ms = 20,
                    .memory_bytes = 1 << 20},
        .run = {.present = 1,
                .stdout_data = out,
                .stdout_len = sizeof(out),
                .output_data = out,
                .output_len = sizeof(out),
                .has_signal = 1,
                .signal = 9,
                .status = MOAT_STATUS_ML,
                .message = msg,
                .cpu_ms = 3000,
                .wall_ms = 3100,
                .memory_bytes = 268435456},
    };
    rc = moat_encode_exec_result(&b, 3, &res, &why);
    add_frame(add, &b, rc, why);

    /* exec result: run only, negative exit code */
    struct moat_exec_result run_only = {
        .language = rl, .version = rv, .run = {.present = 1, .has_code = 1, .code = -1, .status = MOAT_STATUS_RE}};
    rc = moat_encode_exec_result(&b, 4, &run_only, &why);
    add_frame(add, &b, rc, why);

    /* exec request and result with test cases (a clock on a TO) */
    char ta0[] = "sum", ta1[] = "";
    char *targs[] = {ta0, ta1};
    uint8_t tin[] = "1 2\n";
    struct moat_test_case cases[] = {{tin, sizeof(tin) - 1, targs, 2, 500, 1 << 26, 200}, {NULL, 0, NULL, 0, -1, -1, -1}};
    struct moat_exec_request treq = min;
    treq.tests = cases;
    treq.ntests = 2;
    treq.tests_wall_ms = 20000;
    rc = moat_encode_exec_request(&b, 8, &treq, &why);
    add_frame(add, &b, rc, why);
    struct moat_stage_result tres[] = {
        {.present = 1, .stdout_data = out, .stdout_len = 2, .has_code = 1, .status = MOAT_STATUS_OK},
        {.present = 1, .has_signal = 1, .signal = 9, .status = MOAT_STATUS_TO, .clock = MOAT_CLOCK_CPU, .message = msg}};
    struct moat_exec_result tests_only = {.language = rl, .version = rv, .tests = tres, .ntests = 2};
    rc = moat_encode_exec_result(&b, 9, &tests_only, &why);
    add_frame(add, &b, rc, why);

    /* error */
    rc = moat_encode_error(&b, 5, MOAT_ERR_UNKNOWN_LANGUAGE, "no such language: cobol", &why);
    add_frame(add, &b, rc, why);

    /* runtimes */
    char a_py[] = "py", a_py3[] = "py3", bash[] = "bash", bv[] = "5.2.15", a_sh[] = "sh";
    char *pyal[] = {a_py, a_py3}, *shal[] = {a_sh};
    char pat0[] = "-O2", pat1[] = "-D{ident}={value}";
    char *pats[] = {pat0, pat1};
    struct moat_runtime items[] = {{lang, ver, pyal, 2, 0, NULL, 0, 0}, {bash, bv, shal, 1, 1, pats, 2, 3}};
    char rtw[] = "namespaces+seccomp+landlock";
    struct moat_runtimes rt = {items, 2, {1, 8, 3, 32, 2, 4, 1}, rtw};
    rc = moat_encode_runtimes(&b, 6, &rt, &why);
    add_frame(add, &b, rc, why);

    /* runtimes query: a bare header */
    rc = moat_encode_runtimes_query(&b, 7, &why);
    add_frame(add, &b, rc, why);

    /* a session, in both directions: stdin, a signal, stages, output, exits, credit */
    uint8_t line[] = {'a', 'd', 'a', '\n', 0, 0xff};
    rc = moat_encode_session_stdin(&b, 8, line, sizeof(line), &why);
    add_frame(add, &b, rc, why);
    rc = moat_encode_session_stdin_close(&b, 8, &why);
    add_frame(add, &b, rc, why);
    rc = moat_encode_session_signal(&b, 8, MOAT_SIG_INT, &why);
    add_frame(add, &b, rc, why);
    struct moat_session_stage st = {MOAT_STAGE_RUN, 12};
    rc = moat_encode_session_stage(&b, 8, &st, &why);
    add_frame(add, &b, rc, why);
    struct moat_session_output so = {MOAT_STREAM_STDOUT, 15, out, sizeof(out)};
    rc = moat_encode_session_output(&b, 8, &so, &why);
    add_frame(add, &b, rc, why);
    so.stream = MOAT_STREAM_STDERR;
    so.data = err;
    so.len = 5;
    rc = moat_encode_session_output(&b, 8, &so, &why);
    add_frame(add, &b, rc, why);
    struct moat_session_exit ex = {MOAT_STAGE_RUN,
                                   30000,
                                   MOAT_CLOCK_IDLE,
                                   {.present = 1, .has_signal = 1, .signal = 9, .status = MOAT_STATUS_TO, .message = msg}};
    rc = moat_encode_session_exit(&b, 8, &ex, &why);
    add_frame(add, &b, rc, why);
    struct moat_session_exit ok = {MOAT_STAGE_COMPILE, 400, 0, {.present = 1, .has_code = 1, .code = 0, .cpu_ms = 300}};
    rc = moat_encode_session_exit(&b, 8, &ok, &why);
    add_frame(add, &b, rc, why);
    rc = moat_encode_session_credit(&b, 8, MOAT_SESSION_CHUNK_MAX, &why);
    add_frame(add, &b, rc, why);

    /* session open: the full request above with ceilings; the minimal one */
    struct moat_session_open so_full = {req, 900000, 0, 30000, 1 << 20, UINT64_MAX};
    rc = moat_encode_session_open(&b, 9, &so_full, &why);
    add_frame(add, &b, rc, why);
    struct moat_session_open so_min = {min, 1, 1, 1, 0, 0};
    rc = moat_encode_session_open(&b, 10, &so_min, &why);
    add_frame(add, &b, rc, why);
    /* session ready */
    char walls[] = "namespaces+seccomp+landlock";
    struct moat_session_ready ready = {lang, ver, 900000, 60000, 30000, 1 << 20, 1 << 20, walls};
    rc = moat_encode_session_ready(&b, 9, &ready, &why);
    add_frame(add, &b, rc, why);
}

/* Mostly a valid header of a random type before random bytes with small tags; sometimes bytes alone. */
static size_t random_frame(uint8_t *buf, size_t cap, uint32_t (*rng)(void))
{
    size_t len = rng() % 512;

    if (len > cap)
        len = cap;
    for (size_t k = 0; k < len; k++)
        buf[k] = (uint8_t)rng();
    if (len >= MOAT_FRAME_HEADER_SIZE && rng() % 4 != 0) {
        size_t plen = len - MOAT_FRAME_HEADER_SIZE;
        buf[0] = MOAT_PROTO_VERSION;
        buf[1] = (uint8_t)(1 + rng() % MOAT_MSG_MAX);
        buf[2] = buf[3] = 0;
        buf[4] = buf[5] = 0;
        buf[6] = (uint8_t)(plen >> 8);
        buf[7] = (uint8_t)plen;
        for (size_t k = MOAT_FRAME_HEADER_SIZE; k + 1 < len; k += 1 + rng() % 16)
            buf[k] = 0, buf[k + 1] = (uint8_t)(rng() % 26); /* up to SESSION_OPEN's ceilings, 20..24 */
    }
    return len;
}

const struct fuzz_target fuzz_target = {.make_seeds = make_seeds, .random_input = random_frame};
