/*
 * test_proto.c - the gateway <-> backend codec (backend/protocol/moat_proto.c):
 * encode/decode round trips of every message, and the strict decoder's
 * rejections, each checked by its reason text.
 *
 * Malformed input is built by hand with the small TLV writer below (tag u16,
 * length u32, both big endian), so the tests do not trust the encoder to
 * produce the bytes they then feed to the decoder.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "moat_options.h"
#include "moat_path.h"
#include "moat_proto.h"
#include "moat_semver.h"

/* Tag numbers from PROTOCOL.md / moat_proto.c (private to the codec). */
enum {
    REQ_LANGUAGE = 1,
    REQ_VERSION = 2,
    REQ_FILE = 3,
    REQ_STDIN = 4,
    REQ_ARG = 5,
    REQ_RUN_TIMEOUT = 6,
    REQ_COMPILE_TIMEOUT = 7,
    REQ_RUN_MEMORY = 8,
    REQ_COMPILE_MEMORY = 9,
    REQ_RUN_CPU = 10,
    REQ_COMPILE_CPU = 11,
    REQ_TEST = 12,
    REQ_TESTS_WALL = 13,
    REQ_RUN_STACK = 14,
    REQ_RUN_PROCESSES = 15,
    REQ_RUN_FILE_SIZE = 16,
    REQ_COMPILER_OPTION = 17,
    REQ_ISOLATION = 18,
    TC_STDIN = 1,
    TC_ARG = 2,
    TC_RUN_TIMEOUT = 3,
    RES_TEST = 18,
    ST_CLOCK = 11,
    FILE_NAME = 1,
    FILE_CONTENT = 2,
    RES_LANGUAGE = 1,
    RES_VERSION = 2,
    RES_COMPILE = 16,
    RES_RUN = 17,
    ST_STDOUT = 1,
    ST_CODE = 4,
    ST_SIGNAL = 5,
    ST_STATUS = 6,
    ERR_CODE = 1,
    ERR_MESSAGE = 2,
    RT_RUNTIME = 1,
    RTE_LANGUAGE = 1,
    RTE_VERSION = 2,
    RTE_ALIAS = 3,
    RTE_COMPILED = 4,
    RTE_OPTION_PATTERN = 5,
    SIN_DATA = 1,
    SIG_SIGNAL = 1,
    OUT_STREAM = 1,
    OUT_OFFSET = 2,
    OUT_DATA = 3,
    SST_STAGE = 1,
    SST_OFFSET = 2,
    EX_STAGE = 1,
    EX_OFFSET = 2,
    EX_CLOCK = 3,
    EX_RESULT = 4,
    CR_BYTES = 1,
    SO_WALL = 20,
    SO_IDLE = 21,
    SO_CPU = 22,
    SO_STDIN = 23,
    SO_OUTPUT = 24,
    SR_LANGUAGE = 1,
    SR_VERSION = 2,
    SR_WALL = 3,
    SR_IDLE = 4,
    SR_CPU = 5,
    SR_STDIN = 6,
    SR_OUTPUT = 7,
};

/* ---- a hand-rolled TLV writer for malformed input ---------------------- */

struct raw {
    uint8_t *b;
    size_t n, cap;
};

static void raw_bytes(struct raw *r, const void *p, size_t len)
{
    if (r->n + len > r->cap) {
        size_t cap = r->cap ? r->cap : 256;
        while (cap < r->n + len)
            cap *= 2;
        r->b = realloc(r->b, cap);
        assert_non_null(r->b);
        r->cap = cap;
    }
    if (len)
        memcpy(r->b + r->n, p, len);
    r->n += len;
}

static void raw_free(struct raw *r)
{
    free(r->b);
    memset(r, 0, sizeof(*r));
}

static void be(uint8_t *p, uint64_t v, int width)
{
    for (int i = 0; i < width; i++)
        p[i] = (uint8_t)(v >> (8 * (width - 1 - i)));
}

static void raw_tlv_hdr(struct raw *r, uint16_t tag, uint32_t len)
{
    uint8_t h[6];
    be(h, tag, 2);
    be(h + 2, len, 4);
    raw_bytes(r, h, sizeof(h));
}

static void raw_tlv(struct raw *r, uint16_t tag, const void *val, size_t len)
{
    raw_tlv_hdr(r, tag, (uint32_t)len);
    raw_bytes(r, val, len);
}

static void raw_str(struct raw *r, uint16_t tag, const char *s)
{
    raw_tlv(r, tag, s, strlen(s));
}

static void raw_uint(struct raw *r, uint16_t tag, uint64_t v, int width)
{
    uint8_t p[8];
    be(p, v, width);
    raw_tlv(r, tag, p, (size_t)width);
}

/* Nested TLVs: begin writes a header with length 0, end patches it. */
static size_t raw_nest_begin(struct raw *r, uint16_t tag)
{
    size_t at = r->n;
    raw_tlv_hdr(r, tag, 0);
    return at;
}

static void raw_nest_end(struct raw *r, size_t at)
{
    be(r->b + at + 2, r->n - at - 6, 4);
}

static void raw_file(struct raw *r, const char *name, const char *content)
{
    size_t at = raw_nest_begin(r, REQ_FILE);
    raw_str(r, FILE_NAME, name);
    raw_str(r, FILE_CONTENT, content);
    raw_nest_end(r, at);
}

/* language "python", version "3", one file: the smallest valid request. */
static void raw_min_request(struct raw *r)
{
    raw_str(r, REQ_LANGUAGE, "python");
    raw_str(r, REQ_VERSION, "3");
    raw_file(r, "main.py", "print(1)");
}

static void raw_header(struct raw *r, uint8_t version, uint8_t type, uint16_t flags, uint32_t length, uint64_t job)
{
    uint8_t h[MOAT_FRAME_HEADER_SIZE];
    h[0] = version;
    h[1] = type;
    be(h + 2, flags, 2);
    be(h + 4, length, 4);
    be(h + 8, job, 8);
    raw_bytes(r, h, sizeof(h));
}

/* ---- rejection helpers: decode must fail with exactly this reason ------- */

static int is_zero(const void *p, size_t len)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < len; i++)
        if (b[i])
            return 0;
    return 1;
}

static void reject_request(const struct raw *r, const char *reason)
{
    struct moat_exec_request q;
    const char *why = NULL;
    assert_int_equal(moat_decode_exec_request(r->b, r->n, &q, &why), -1);
    assert_non_null(why);
    assert_string_equal(why, reason);
    assert_true(is_zero(&q, sizeof(q))); /* "*out left empty" */
}

static void reject_result(const struct raw *r, const char *reason)
{
    struct moat_exec_result q;
    const char *why = NULL;
    assert_int_equal(moat_decode_exec_result(r->b, r->n, &q, &why), -1);
    assert_non_null(why);
    assert_string_equal(why, reason);
    assert_true(is_zero(&q, sizeof(q)));
}

static void reject_error(const struct raw *r, const char *reason)
{
    struct moat_error q;
    const char *why = NULL;
    assert_int_equal(moat_decode_error(r->b, r->n, &q, &why), -1);
    assert_non_null(why);
    assert_string_equal(why, reason);
    assert_true(is_zero(&q, sizeof(q)));
}

static void reject_runtimes(const struct raw *r, const char *reason)
{
    struct moat_runtimes q;
    const char *why = NULL;
    assert_int_equal(moat_decode_runtimes(r->b, r->n, &q, &why), -1);
    assert_non_null(why);
    assert_string_equal(why, reason);
    assert_true(is_zero(&q, sizeof(q)));
}

static void reject_header(const struct raw *r, const char *reason)
{
    struct moat_frame_header h;
    const char *why = NULL;
    assert_int_equal(moat_frame_parse_header(r->b, r->n, &h, &why), -1);
    assert_non_null(why);
    assert_string_equal(why, reason);
}

/* Parses the frame at out->data + at and returns its payload. */
static const uint8_t *frame_payload(const struct moat_buf *out, size_t at, uint8_t type, uint64_t job, size_t *len)
{
    struct moat_frame_header h;
    const char *why = NULL;
    assert_true(out->len >= at + MOAT_FRAME_HEADER_SIZE);
    assert_int_equal(moat_frame_parse_header(out->data + at, out->len - at, &h, &why), 0);
    assert_int_equal(h.version, MOAT_PROTO_VERSION);
    assert_int_equal(h.type, type);
    assert_int_equal(h.flags, 0);
    assert_true(h.job_id == job);
    assert_true(at + MOAT_FRAME_HEADER_SIZE + h.length <= out->len);
    *len = h.length;
    return out->data + at + MOAT_FRAME_HEADER_SIZE;
}

/* Does a top-level TLV with this tag occur in the payload? */
static int has_tag(const uint8_t *p, size_t len, uint16_t tag)
{
    size_t off = 0;
    while (off + 6 <= len) {
        uint16_t t = (uint16_t)((p[off] << 8) | p[off + 1]);
        uint32_t l = ((uint32_t)p[off + 2] << 24) | ((uint32_t)p[off + 3] << 16) | ((uint32_t)p[off + 4] << 8) | p[off + 5];
        if (t == tag)
            return 1;
        off += 6 + (size_t)l;
    }
    return 0;
}

/* ==== exec request round trips ========================================== */

static void test_request_roundtrip_full(void **state)
{
    char n0[] = "main.py", n1[] = "data.bin", n2[] = "empty.txt";
    uint8_t c0[] = "import sys\nprint(sys.stdin.read())\n";
    uint8_t c1[] = {0x7f, 'E', 'L', 'F', 0x00, 0x00, 0xff, 0xfe, 0x00, 0xc0, 0x80, 0xed, 0xa0, 0x80, 0x00};
    struct moat_file files[] = {
        {n0, c0, sizeof(c0) - 1},
        {n1, c1, sizeof(c1)},
        {n2, NULL, 0},
    };
    char a0[] = "first line\nsecond line", a1[] = "", a2[] = "--name=Zo\xc3\xab \xe2\x82\xac \xf0\x9f\x98\x80", a3[] = "\t \r\n";
    char *args[] = {a0, a1, a2, a3};
    uint8_t in[] = {'a', 0x00, 'b', '\n', 0xff};
    char lang[] = "python", ver[] = "3.11.x";
    struct moat_exec_request req = {
        .language = lang,
        .version = ver,
        .files = files,
        .nfiles = 3,
        .args = args,
        .nargs = 4,
        .stdin_data = in,
        .stdin_len = sizeof(in),
        .run_timeout_ms = 3000,
        .compile_timeout_ms = 0,
        .run_memory_bytes = INT64_MAX,
        .compile_memory_bytes = 1024LL * 1024 * 1024,
        .run_cpu_ms = INT64_MAX,
        .compile_cpu_ms = 1,
    };
    struct moat_buf out = {0};
    const char *why = NULL;
    const uint64_t job = 0x0102030405060708ull;

    assert_int_equal(moat_encode_exec_request(&out, job, &req, &why), 0);
    size_t plen;
    const uint8_t *p = frame_payload(&out, 0, MOAT_MSG_EXEC_REQUEST, job, &plen);
    assert_int_equal(plen, out.len - MOAT_FRAME_HEADER_SIZE);

    struct moat_exec_request d;
    assert_int_equal(moat_decode_exec_request(p, plen, &d, &why), 0);
    assert_string_equal(d.language, "python");
    assert_string_equal(d.version, "3.11.x");
    assert_int_equal(d.nfiles, 3);
    for (size_t i = 0; i < 3; i++) {
        assert_string_equal(d.files[i].name, files[i].name);
        assert_int_equal(d.files[i].content_len, files[i].content_len);
        assert_non_null(d.files[i].content); /* even when empty */
        if (files[i].content_len)
            assert_memory_equal(d.files[i].content, files[i].content, files[i].content_len);
    }
    assert_int_equal(d.nargs, 4);
    for (size_t i = 0; i < 4; i++)
        assert_string_equal(d.args[i], args[i]);
    assert_int_equal(d.stdin_len, sizeof(in));
    assert_memory_equal(d.stdin_data, in, sizeof(in));
    assert_true(d.run_timeout_ms == 3000);
    assert_true(d.compile_timeout_ms == 0);
    assert_true(d.run_memory_bytes == INT64_MAX);
    assert_true(d.compile_memory_bytes == 1024LL * 1024 * 1024);
    assert_true(d.run_cpu_ms == INT64_MAX);
    assert_true(d.compile_cpu_ms == 1);

    moat_exec_request_free(&d);
    assert_null(d.language);
    assert_int_equal(d.nfiles, 0);
    moat_buf_free(&out);
    assert_null(out.data);
}

/* ==== run-stage rlimits and compiler options (issue 12) ================== */

static void test_request_rlimits_and_options_roundtrip(void **state)
{
    char name[] = "main.c", lang[] = "c", ver[] = "*", o0[] = "-O2", o1[] = "-DX=5";
    uint8_t content[] = "int main(void){return 0;}";
    struct moat_file f = {name, content, sizeof(content) - 1};
    char *opts[] = {o0, o1};
    struct moat_exec_request req = {.language = lang,
                                    .version = ver,
                                    .files = &f,
                                    .nfiles = 1,
                                    .run_timeout_ms = -1,
                                    .compile_timeout_ms = -1,
                                    .run_memory_bytes = -1,
                                    .compile_memory_bytes = -1,
                                    .run_stack_kib = 8192,
                                    .run_processes = 1,
                                    .run_file_size_kib = MOAT_MAX_FILE_SIZE_KIB,
                                    .compiler_options = opts,
                                    .ncompiler_options = 2};
    struct moat_buf out = {0}, none = {0};
    struct moat_exec_request d;
    const char *why = NULL;
    size_t plen;

    (void)state;
    assert_int_equal(moat_encode_exec_request(&out, 9, &req, &why), 0);
    const uint8_t *p = frame_payload(&out, 0, MOAT_MSG_EXEC_REQUEST, 9, &plen);
    assert_int_equal(moat_decode_exec_request(p, plen, &d, &why), 0);
    assert_true(d.run_stack_kib == 8192);
    assert_true(d.run_processes == 1);
    assert_true(d.run_file_size_kib == MOAT_MAX_FILE_SIZE_KIB);
    assert_int_equal(d.ncompiler_options, 2);
    assert_string_equal(d.compiler_options[0], "-O2");
    assert_string_equal(d.compiler_options[1], "-DX=5");
    moat_exec_request_free(&d);
    assert_null(d.compiler_options);
    moat_buf_free(&out);

    /* not asked (0 or -1): nothing on the wire, -1 decoded */
    req.run_stack_kib = 0;
    req.run_processes = -1;
    req.run_file_size_kib = 0;
    req.ncompiler_options = 0;
    assert_int_equal(moat_encode_exec_request(&none, 9, &req, &why), 0);
    p = frame_payload(&none, 0, MOAT_MSG_EXEC_REQUEST, 9, &plen);
    assert_false(has_tag(p, plen, REQ_RUN_STACK));
    assert_false(has_tag(p, plen, REQ_RUN_PROCESSES));
    assert_false(has_tag(p, plen, REQ_RUN_FILE_SIZE));
    assert_false(has_tag(p, plen, REQ_COMPILER_OPTION));
    assert_int_equal(moat_decode_exec_request(p, plen, &d, &why), 0);
    assert_true(d.run_stack_kib == -1 && d.run_processes == -1 && d.run_file_size_kib == -1);
    assert_int_equal(d.ncompiler_options, 0);
    moat_exec_request_free(&d);
    moat_buf_free(&none);

    /* the encoder refuses what the decoder would */
    char empty[] = "";
    char *bad[] = {empty};
    req.compiler_options = bad;
    req.ncompiler_options = 1;
    why = NULL;
    assert_int_equal(moat_encode_exec_request(&out, 9, &req, &why), -1);
    assert_string_equal(why, "an empty compiler option");
    assert_int_equal(out.len, 0);
    req.ncompiler_options = MOAT_MAX_COMPILER_OPTIONS + 1;
    req.compiler_options = NULL;
    assert_int_equal(moat_encode_exec_request(&out, 9, &req, &why), -1);
    assert_string_equal(why, "too many compiler options");
    moat_buf_free(&out);
}

/* Tag 18: the tenant's isolation.  Absent is namespaces (never sent); gVisor
 * round-trips; 0, an unknown value, a wrong width or a repeat is refused. */
static void test_request_isolation(void **state)
{
    struct raw r = {0};
    struct moat_exec_request d;
    const char *why = NULL;

    (void)state;
    raw_min_request(&r);
    assert_int_equal(moat_decode_exec_request(r.b, r.n, &d, &why), 0);
    assert_int_equal(d.isolation, MOAT_ISOLATION_NAMESPACES);
    moat_exec_request_free(&d);
    raw_uint(&r, REQ_ISOLATION, MOAT_ISOLATION_GVISOR, 1);
    assert_int_equal(moat_decode_exec_request(r.b, r.n, &d, &why), 0);
    assert_int_equal(d.isolation, MOAT_ISOLATION_GVISOR);
    moat_exec_request_free(&d);
    raw_uint(&r, REQ_ISOLATION, MOAT_ISOLATION_GVISOR, 1);
    reject_request(&r, "duplicate field");
    raw_free(&r);
    const uint64_t bad[] = {MOAT_ISOLATION_NAMESPACES, MOAT_ISOLATION_MAX + 1, 255};
    for (size_t i = 0; i < 3; i++) {
        raw_min_request(&r);
        raw_uint(&r, REQ_ISOLATION, bad[i], 1);
        reject_request(&r, "isolation out of range");
        raw_free(&r);
    }
    raw_min_request(&r);
    raw_uint(&r, REQ_ISOLATION, MOAT_ISOLATION_GVISOR, 2);
    assert_int_equal(moat_decode_exec_request(r.b, r.n, &d, &why), -1);
    raw_free(&r);

    /* the encoder sends gVisor, nothing for namespaces, refuses the unknown */
    char lang[] = "python", ver[] = "3", name[] = "a.py";
    uint8_t content[] = "1";
    struct moat_file f = {name, content, 1};
    struct moat_exec_request req = {.language = lang, .version = ver, .files = &f, .nfiles = 1, .isolation = MOAT_ISOLATION_GVISOR};
    struct moat_buf out = {0};
    size_t plen;
    assert_int_equal(moat_encode_exec_request(&out, 1, &req, &why), 0);
    const uint8_t *p = frame_payload(&out, 0, MOAT_MSG_EXEC_REQUEST, 1, &plen);
    assert_int_equal(moat_decode_exec_request(p, plen, &d, &why), 0);
    assert_int_equal(d.isolation, MOAT_ISOLATION_GVISOR);
    moat_exec_request_free(&d);
    moat_buf_free(&out);
    req.isolation = MOAT_ISOLATION_NAMESPACES;
    assert_int_equal(moat_encode_exec_request(&out, 1, &req, &why), 0);
    p = frame_payload(&out, 0, MOAT_MSG_EXEC_REQUEST, 1, &plen);
    assert_false(has_tag(p, plen, REQ_ISOLATION));
    moat_buf_free(&out);
    req.isolation = MOAT_ISOLATION_MAX + 1;
    assert_int_equal(moat_encode_exec_request(&out, 1, &req, &why), -1);
    assert_string_equal(why, "isolation out of range");
    moat_buf_free(&out);
    assert_string_equal(moat_isolation_name(MOAT_ISOLATION_GVISOR), "gvisor");
    assert_int_equal(moat_isolation_parse("namespaces"), MOAT_ISOLATION_NAMESPACES);
    assert_int_equal(moat_isolation_parse("none"), -1);
    assert_null(moat_isolation_name(MOAT_ISOLATION_MAX + 1));
}

static void test_request_rlimits_and_options_refusals(void **state)
{
    struct raw r = {0};
    const uint16_t tags[] = {REQ_RUN_STACK, REQ_RUN_PROCESSES, REQ_RUN_FILE_SIZE};
    const uint64_t max[] = {MOAT_MAX_STACK_KIB, MOAT_MAX_PROCESSES, MOAT_MAX_FILE_SIZE_KIB};

    (void)state;
    for (size_t i = 0; i < 3; i++) {
        /* present means asked: 0 is refused, as is anything above the wire's bound */
        raw_min_request(&r);
        raw_uint(&r, tags[i], 0, 8);
        reject_request(&r, "a stack, processes or file size limit is out of range");
        raw_free(&r);
        raw_min_request(&r);
        raw_uint(&r, tags[i], max[i] + 1, 8);
        reject_request(&r, "a stack, processes or file size limit is out of range");
        raw_free(&r);
        raw_min_request(&r);
        raw_uint(&r, tags[i], (uint64_t)INT64_MAX + 1, 8);
        reject_request(&r, "limit out of range");
        raw_free(&r);
        raw_min_request(&r);
        raw_uint(&r, tags[i], 5, 4);
        reject_request(&r, "integer field has the wrong width");
        raw_free(&r);
        raw_min_request(&r);
        raw_uint(&r, tags[i], 5, 8);
        raw_uint(&r, tags[i], 6, 8);
        reject_request(&r, "duplicate field");
        raw_free(&r);
    }
    /* options: never empty, at most MOAT_MAX_COMPILER_OPTION_LEN bytes, at most MOAT_MAX_COMPILER_OPTIONS */
    raw_min_request(&r);
    raw_str(&r, REQ_COMPILER_OPTION, "");
    reject_request(&r, "empty string field");
    raw_free(&r);
    char longopt[MOAT_MAX_COMPILER_OPTION_LEN + 2];
    memset(longopt, 'x', sizeof(longopt) - 1);
    longopt[sizeof(longopt) - 1] = '\0';
    raw_min_request(&r);
    raw_str(&r, REQ_COMPILER_OPTION, longopt);
    reject_request(&r, "string field too long");
    raw_free(&r);
    raw_min_request(&r);
    raw_tlv(&r, REQ_COMPILER_OPTION, "-O\0", 3);
    reject_request(&r, "NUL byte in string field");
    raw_free(&r);
    raw_min_request(&r);
    for (int i = 0; i < MOAT_MAX_COMPILER_OPTIONS + 1; i++)
        raw_str(&r, REQ_COMPILER_OPTION, "-O2");
    reject_request(&r, "too many compiler options");
    raw_free(&r);
    /* exactly the cap is fine, repeated */
    raw_min_request(&r);
    for (int i = 0; i < MOAT_MAX_COMPILER_OPTIONS; i++)
        raw_str(&r, REQ_COMPILER_OPTION, "-O2");
    struct moat_exec_request q;
    const char *why = NULL;
    assert_int_equal(moat_decode_exec_request(r.b, r.n, &q, &why), 0);
    assert_int_equal(q.ncompiler_options, MOAT_MAX_COMPILER_OPTIONS);
    moat_exec_request_free(&q);
    raw_free(&r);
}

static void test_runtime_option_patterns_refusals(void **state)
{
    struct raw r = {0};
    struct moat_runtimes d;
    const char *why = NULL;

    (void)state;
    size_t at = raw_nest_begin(&r, RT_RUNTIME);
    raw_str(&r, RTE_LANGUAGE, "c");
    raw_str(&r, RTE_VERSION, "12");
    for (int i = 0; i < MOAT_MAX_OPTION_PATTERNS + 1; i++)
        raw_str(&r, RTE_OPTION_PATTERN, "-O2");
    raw_nest_end(&r, at);
    assert_int_equal(moat_decode_runtimes(r.b, r.n, &d, &why), -1);
    assert_string_equal(why, "too many compiler option patterns");
    raw_free(&r);
    at = raw_nest_begin(&r, RT_RUNTIME);
    raw_str(&r, RTE_LANGUAGE, "c");
    raw_str(&r, RTE_VERSION, "12");
    raw_str(&r, RTE_OPTION_PATTERN, "");
    raw_nest_end(&r, at);
    assert_int_equal(moat_decode_runtimes(r.b, r.n, &d, &why), -1);
    assert_string_equal(why, "empty string field");
    raw_free(&r);
}

/* The allow-list matcher (moat_options.h): a table of patterns and options. */
static void test_options_allow_list(void **state)
{
    static const char *const pat_text[] = {"-O0", "-O2", "-g", "-std=c17", "-D{ident}", "-D{ident}={value}", "-C opt-level=3",
                                           "-lm"};
    const size_t np = sizeof(pat_text) / sizeof(pat_text[0]);
    char pat_buf[8][32], *pats[8];
    for (size_t i = 0; i < np; i++) {
        snprintf(pat_buf[i], sizeof(pat_buf[i]), "%s", pat_text[i]);
        pats[i] = pat_buf[i];
    }
    static const struct {
        const char *opts[4];
        int ok;
        size_t bad;
    } rows[] = {
        {{"-O2"}, 1, 0},
        {{"-O0", "-g", "-std=c17", "-lm"}, 1, 0},
        {{"-DX"}, 1, 0},
        {{"-DX=5"}, 1, 0},
        {{"-D_my_NAME1=a.b+c-1"}, 1, 0},
        {{"-C", "opt-level=3"}, 1, 0},
        {{"-O2", "-C", "opt-level=3", "-g"}, 1, 0},
        /* refused, and which one */
        {{"-O2", "-fplugin=/tmp/x.so"}, 0, 1},
        {{"-wrapper", "/bin/sh"}, 0, 0},
        {{"@/etc/passwd"}, 0, 0},
        {{"-o", "/tmp/x"}, 0, 0},
        {{"-B/tmp"}, 0, 0},
        {{"-specs=/tmp/s"}, 0, 0},
        {{";"}, 0, 0},
        {{"-O2;rm"}, 0, 0},
        {{"-D1X"}, 0, 0},
        {{"-DX=/etc/passwd"}, 0, 0},
        {{"-DX=a b"}, 0, 0},
        {{"-DX=\"a\""}, 0, 0},
        {{"-D"}, 0, 0},
        {{"-DX="}, 0, 0},
        {{"-C"}, 0, 0},
        {{"-C", "linker=/tmp/x"}, 0, 0},
        {{"-O"}, 0, 0},
        {{"-O2x"}, 0, 0},
        {{"-g", "-D{ident}"}, 0, 1},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        char opt_buf[4][32], *opts[4];
        size_t n = 0, bad = 99;
        for (; n < 4 && rows[i].opts[n] != NULL; n++) {
            snprintf(opt_buf[n], sizeof(opt_buf[n]), "%s", rows[i].opts[n]);
            opts[n] = opt_buf[n];
        }
        int rc = moat_options_check(pats, np, opts, n, &bad);
        if (rows[i].ok && rc != 0)
            fail_msg("row %zu (%s): refused option %zu", i, rows[i].opts[0], bad);
        if (!rows[i].ok && (rc == 0 || bad != rows[i].bad))
            fail_msg("row %zu (%s): rc %d, bad %zu (want refused at %zu)", i, rows[i].opts[0], rc, bad, rows[i].bad);
    }
    /* a long placeholder value: 64 characters taken, 65 not */
    char v64[80] = "-DX=", v65[80] = "-DX=";
    memset(v64 + 4, 'a', 64);
    memset(v65 + 4, 'a', 65);
    char *o64[] = {v64}, *o65[] = {v65};
    size_t bad;
    assert_int_equal(moat_options_check(pats, np, o64, 1, &bad), 0);
    assert_int_equal(moat_options_check(pats, np, o65, 1, &bad), -1);
    /* no patterns: nothing is accepted, no options: nothing to refuse */
    assert_int_equal(moat_options_check(NULL, 0, o64, 1, &bad), -1);
    assert_int_equal(moat_options_check(NULL, 0, NULL, 0, &bad), 0);

    /* patterns themselves */
    assert_true(moat_option_pattern_valid("-O2"));
    assert_true(moat_option_pattern_valid("-D{ident}={value}"));
    assert_true(moat_option_pattern_valid("-C opt-level=3"));
    assert_false(moat_option_pattern_valid(""));
    assert_false(moat_option_pattern_valid("O2"));
    assert_false(moat_option_pattern_valid("-C  opt-level=3"));
    assert_false(moat_option_pattern_valid("-C "));
    assert_false(moat_option_pattern_valid("-D{name}"));
    assert_false(moat_option_pattern_valid("-Dx}"));
    assert_false(moat_option_pattern_valid("-D\"x\""));
    assert_false(moat_option_pattern_valid("-D\tx"));
}

static void test_request_defaults_omitted(void **state)
{
    char name[] = "a.sh", lang[] = "bash", ver[] = "*";
    uint8_t content[] = "echo hi";
    struct moat_file f = {name, content, 7};
    struct moat_exec_request req = {
        .language = lang,
        .version = ver,
        .files = &f,
        .nfiles = 1,
        .run_timeout_ms = -1,
        .compile_timeout_ms = -1,
        .run_memory_bytes = -1,
        .compile_memory_bytes = -1,
        .run_cpu_ms = -1,
        .compile_cpu_ms = 0, /* 0 is "not asked" for a CPU limit, as -1 */
    };
    struct moat_buf dflt = {0}, set = {0};
    const char *why = NULL;

    assert_int_equal(moat_encode_exec_request(&dflt, 1, &req, &why), 0);
    size_t plen;
    const uint8_t *p = frame_payload(&dflt, 0, MOAT_MSG_EXEC_REQUEST, 1, &plen);
    /* no limit, stdin or arg fields on the wire */
    assert_false(has_tag(p, plen, REQ_RUN_TIMEOUT));
    assert_false(has_tag(p, plen, REQ_COMPILE_TIMEOUT));
    assert_false(has_tag(p, plen, REQ_RUN_MEMORY));
    assert_false(has_tag(p, plen, REQ_COMPILE_MEMORY));
    assert_false(has_tag(p, plen, REQ_RUN_CPU));
    assert_false(has_tag(p, plen, REQ_COMPILE_CPU));
    assert_false(has_tag(p, plen, REQ_STDIN));
    assert_false(has_tag(p, plen, REQ_ARG));
    assert_true(has_tag(p, plen, REQ_FILE));

    struct moat_exec_request d;
    assert_int_equal(moat_decode_exec_request(p, plen, &d, &why), 0);
    assert_true(d.run_timeout_ms == -1);
    assert_true(d.compile_timeout_ms == -1);
    assert_true(d.run_memory_bytes == -1);
    assert_true(d.compile_memory_bytes == -1);
    assert_true(d.run_cpu_ms == -1);
    assert_true(d.compile_cpu_ms == -1);
    assert_null(d.stdin_data);
    assert_int_equal(d.stdin_len, 0);
    assert_int_equal(d.nargs, 0);
    assert_null(d.args);
    moat_exec_request_free(&d);

    /* each limit that is set costs exactly one u64 TLV (6 + 8 bytes) */
    req.run_timeout_ms = req.compile_timeout_ms = req.run_memory_bytes = req.compile_memory_bytes = 7;
    req.run_cpu_ms = req.compile_cpu_ms = 7;
    assert_int_equal(moat_encode_exec_request(&set, 1, &req, &why), 0);
    assert_int_equal(set.len, dflt.len + 6 * 14);
    moat_buf_free(&dflt);
    moat_buf_free(&set);
}

static void test_request_caps_accepted_at_limit(void **state)
{
    /* exactly 32 files, 64 args, a 255 byte name and a 4096 byte arg */
    struct moat_file files[MOAT_MAX_FILES];
    char names[MOAT_MAX_FILES][16];
    char *args[MOAT_MAX_ARGS];
    char longname[MOAT_MAX_NAME_LEN + 1], longarg[MOAT_MAX_ARG_LEN + 1], lang[] = "c", ver[] = "1";
    uint8_t content[] = "x";

    memset(longname, 'n', MOAT_MAX_NAME_LEN);
    longname[MOAT_MAX_NAME_LEN] = '\0';
    memset(longarg, 'a', MOAT_MAX_ARG_LEN);
    longarg[MOAT_MAX_ARG_LEN] = '\0';
    for (int i = 0; i < MOAT_MAX_FILES; i++) {
        snprintf(names[i], sizeof(names[i]), "f%d.c", i);
        files[i] = (struct moat_file){names[i], content, 1};
    }
    files[0].name = longname;
    for (int i = 0; i < MOAT_MAX_ARGS; i++)
        args[i] = longarg;
    struct moat_exec_request req = {.language = lang,
                                    .version = ver,
                                    .files = files,
                                    .nfiles = MOAT_MAX_FILES,
                                    .args = args,
                                    .nargs = MOAT_MAX_ARGS,
                                    .run_timeout_ms = -1,
                                    .compile_timeout_ms = -1,
                                    .run_memory_bytes = -1,
                                    .compile_memory_bytes = -1};
    struct moat_buf out = {0};
    const char *why = NULL;
    assert_int_equal(moat_encode_exec_request(&out, 9, &req, &why), 0);
    size_t plen;
    const uint8_t *p = frame_payload(&out, 0, MOAT_MSG_EXEC_REQUEST, 9, &plen);
    struct moat_exec_request d;
    assert_int_equal(moat_decode_exec_request(p, plen, &d, &why), 0);
    assert_int_equal(d.nfiles, MOAT_MAX_FILES);
    assert_int_equal(d.nargs, MOAT_MAX_ARGS);
    assert_int_equal(strlen(d.files[0].name), MOAT_MAX_NAME_LEN);
    assert_string_equal(d.files[31].name, "f31.c");
    assert_int_equal(strlen(d.args[63]), MOAT_MAX_ARG_LEN);
    moat_exec_request_free(&d);
    moat_buf_free(&out);
}

/* ==== exec result round trips =========================================== */

static void assert_stage_equal(const struct moat_stage_result *a, const struct moat_stage_result *b)
{
    assert_int_equal(a->present, b->present);
    assert_int_equal(a->stdout_len, b->stdout_len);
    assert_int_equal(a->stderr_len, b->stderr_len);
    assert_int_equal(a->output_len, b->output_len);
    if (a->stdout_len)
        assert_memory_equal(a->stdout_data, b->stdout_data, a->stdout_len);
    if (a->stderr_len)
        assert_memory_equal(a->stderr_data, b->stderr_data, a->stderr_len);
    if (a->output_len)
        assert_memory_equal(a->output_data, b->output_data, a->output_len);
    assert_int_equal(a->has_code, b->has_code);
    if (a->has_code)
        assert_int_equal(a->code, b->code);
    assert_int_equal(a->has_signal, b->has_signal);
    if (a->has_signal)
        assert_int_equal(a->signal, b->signal);
    assert_int_equal(a->status, b->status);
    if (a->message == NULL)
        assert_null(b->message);
    else
        assert_string_equal(a->message, b->message);
    assert_true(a->cpu_ms == b->cpu_ms);
    assert_true(a->wall_ms == b->wall_ms);
    assert_true(a->memory_bytes == b->memory_bytes);
}

static void test_result_roundtrip_compile_and_run(void **state)
{
    char lang[] = "c", ver[] = "10.2.1", msg[] = "Killed: memory limit (\xe2\x89\x88 256 MiB)";
    uint8_t cout[] = "", cerr[] = "warning: unused variable\n";
    /* invalid UTF-8, NULs, a lone surrogate and an overlong '/' */
    uint8_t rout[] = {'h', 'i', 0xff, 0xfe, 0x00, 0xc0, 0xaf, 0xed, 0xa0, 0x80, 0x80, '\n', 0xf8};
    uint8_t rerr[] = {'e', 0x00, 0xc3};
    uint8_t both[] = {'h', 'i', 0xff, 'e', 0x00, 0xc3};
    struct moat_exec_result res = {
        .language = lang,
        .version = ver,
        .compile = {.present = 1,
                    .stdout_data = cout,
                    .stdout_len = 0,
                    .stderr_data = cerr,
                    .stderr_len = sizeof(cerr) - 1,
                    .output_data = cerr,
                    .output_len = sizeof(cerr) - 1,
                    .has_code = 1,
                    .code = 0,
                    .status = MOAT_STATUS_OK,
                    .cpu_ms = 120,
                    .wall_ms = 250,
                    .memory_bytes = 50u << 20},
        .run = {.present = 1,
                .stdout_data = rout,
                .stdout_len = sizeof(rout),
                .stderr_data = rerr,
                .stderr_len = sizeof(rerr),
                .output_data = both,
                .output_len = sizeof(both),
                .has_code = 0, /* null exit code: killed */
                .has_signal = 1,
                .signal = 9,
                .status = MOAT_STATUS_ML,
                .message = msg,
                .cpu_ms = UINT64_MAX,
                .wall_ms = 0,
                .memory_bytes = 268435456},
    };
    struct moat_buf out = {0};
    const char *why = NULL;

    assert_int_equal(moat_encode_exec_result(&out, 77, &res, &why), 0);
    size_t plen;
    const uint8_t *p = frame_payload(&out, 0, MOAT_MSG_EXEC_RESULT, 77, &plen);
    assert_true(has_tag(p, plen, RES_COMPILE));
    assert_true(has_tag(p, plen, RES_RUN));
    struct moat_exec_result d;
    assert_int_equal(moat_decode_exec_result(p, plen, &d, &why), 0);
    assert_string_equal(d.language, "c");
    assert_string_equal(d.version, "10.2.1");
    assert_stage_equal(&res.compile, &d.compile);
    assert_stage_equal(&res.run, &d.run);
    /* byte for byte, not re-encoded or replaced */
    assert_memory_equal(d.run.stdout_data, rout, sizeof(rout));
    assert_int_equal(d.run.has_code, 0);
    assert_int_equal(d.run.signal, 9);
    assert_null(d.compile.message);
    moat_exec_result_free(&d);
    assert_null(d.run.stdout_data);
    moat_buf_free(&out);
}

/* Tag 3: the walls that held the job; optional, names of [a-z] joined by '+'. */
static void test_result_walls(void **state)
{
    (void)state;
    char lang[] = "python", ver[] = "3.11.2", walls[] = "namespaces+seccomp+landlock";
    struct moat_exec_result res = {.language = lang, .version = ver, .walls = walls, .run = {.present = 1}};
    struct moat_buf out = {0};
    const char *why = NULL;
    struct moat_exec_result d;
    size_t plen;

    assert_int_equal(moat_encode_exec_result(&out, 5, &res, &why), 0);
    const uint8_t *p = frame_payload(&out, 0, MOAT_MSG_EXEC_RESULT, 5, &plen);
    assert_true(has_tag(p, plen, 3));
    assert_int_equal(moat_decode_exec_result(p, plen, &d, &why), 0);
    assert_string_equal(d.walls, walls);
    moat_exec_result_free(&d);
    moat_buf_free(&out);

    /* absent: NULL, as before walls existed */
    res.walls = NULL;
    assert_int_equal(moat_encode_exec_result(&out, 6, &res, &why), 0);
    p = frame_payload(&out, 0, MOAT_MSG_EXEC_RESULT, 6, &plen);
    assert_false(has_tag(p, plen, 3));
    assert_int_equal(moat_decode_exec_result(p, plen, &d, &why), 0);
    assert_null(d.walls);
    moat_exec_result_free(&d);
    moat_buf_free(&out);

    static const char *const good[] = {"seccomp", "a+b", "namespaces+seccomp+landlock+gvisor"};
    static const char *const bad[] = {"",         "+seccomp", "seccomp+", "a++b",       "Seccomp",
                                      "sec comp", "a+b\n",    "a,b",      "landlock-7", "x+\xc3\xa9"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        assert_true(moat_walls_valid(good[i]));
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct raw r = {0};
        assert_false(moat_walls_valid(bad[i]));
        raw_str(&r, RES_LANGUAGE, "c");
        raw_str(&r, RES_VERSION, "1");
        raw_str(&r, 3, bad[i]);
        size_t at = raw_nest_begin(&r, RES_RUN);
        raw_uint(&r, ST_STATUS, 0, 1);
        raw_nest_end(&r, at);
        reject_result(&r, bad[i][0] ? "walls: names of [a-z] joined by '+'" : "empty string field");
        raw_free(&r);
        char *w = (char *)(uintptr_t)bad[i];
        struct moat_exec_result e = {.language = lang, .version = ver, .walls = w, .run = {.present = 1}};
        assert_int_equal(moat_encode_exec_result(&out, 7, &e, &why), -1);
        moat_buf_free(&out);
    }
    /* 64 bytes, the cap, pass; 65 do not */
    char long_walls[MOAT_MAX_WALLS_LEN + 2];
    memset(long_walls, 'w', sizeof(long_walls) - 1);
    long_walls[MOAT_MAX_WALLS_LEN] = '\0';
    assert_true(moat_walls_valid(long_walls));
    long_walls[MOAT_MAX_WALLS_LEN] = 'w';
    long_walls[MOAT_MAX_WALLS_LEN + 1] = '\0';
    assert_false(moat_walls_valid(long_walls));
}

static void test_result_single_stages(void **state)
{
    char lang[] = "python", ver[] = "3.11.2";
    struct moat_buf out = {0};
    const char *why = NULL;
    size_t plen;
    const uint8_t *p;
    struct moat_exec_result d;

    /* run only (interpreted), negative exit code as a signed 32 bit value */
    struct moat_exec_result run_only = {
        .language = lang, .version = ver, .run = {.present = 1, .has_code = 1, .code = -2, .status = MOAT_STATUS_RE}};
    assert_int_equal(moat_encode_exec_result(&out, 1, &run_only, &why), 0);
    p = frame_payload(&out, 0, MOAT_MSG_EXEC_RESULT, 1, &plen);
    assert_false(has_tag(p, plen, RES_COMPILE));
    assert_int_equal(moat_decode_exec_result(p, plen, &d, &why), 0);
    assert_int_equal(d.compile.present, 0);
    assert_int_equal(d.run.present, 1);
    assert_int_equal(d.run.has_code, 1);
    assert_int_equal(d.run.code, -2);
    assert_int_equal(d.run.status, MOAT_STATUS_RE);
    moat_exec_result_free(&d);

    /* compile failed, so no run stage */
    size_t at = out.len;
    struct moat_exec_result compile_only = {
        .language = lang, .version = ver, .compile = {.present = 1, .has_code = 1, .code = 1, .status = MOAT_STATUS_RE}};
    assert_int_equal(moat_encode_exec_result(&out, 2, &compile_only, &why), 0);
    p = frame_payload(&out, at, MOAT_MSG_EXEC_RESULT, 2, &plen);
    assert_false(has_tag(p, plen, RES_RUN));
    assert_int_equal(moat_decode_exec_result(p, plen, &d, &why), 0);
    assert_int_equal(d.compile.present, 1);
    assert_int_equal(d.run.present, 0);
    assert_int_equal(d.compile.code, 1);
    moat_exec_result_free(&d);
    moat_buf_free(&out);
}

static void test_result_all_statuses(void **state)
{
    char lang[] = "bash", ver[] = "5.2.15";
    for (uint8_t s = 0; s <= MOAT_STATUS_MAX; s++) {
        struct moat_exec_result res = {.language = lang, .version = ver, .run = {.present = 1, .status = s}};
        struct moat_buf out = {0};
        const char *why = NULL;
        size_t plen;
        struct moat_exec_result d;
        assert_int_equal(moat_encode_exec_result(&out, s, &res, &why), 0);
        const uint8_t *p = frame_payload(&out, 0, MOAT_MSG_EXEC_RESULT, s, &plen);
        assert_int_equal(moat_decode_exec_result(p, plen, &d, &why), 0);
        assert_int_equal(d.run.status, s);
        assert_int_equal(d.run.has_code, 0);
        assert_int_equal(d.run.has_signal, 0);
        moat_exec_result_free(&d);
        moat_buf_free(&out);
    }
}

/* ==== error, runtimes, query ============================================ */

static void test_error_roundtrip(void **state)
{
    for (uint16_t code = 1; code <= MOAT_ERR_MAX; code++) {
        struct moat_buf out = {0};
        const char *why = NULL;
        size_t plen;
        struct moat_error d;
        char msg[64];
        snprintf(msg, sizeof(msg), "refused \xe2\x9c\x97 #%u", code);
        assert_int_equal(moat_encode_error(&out, 1000 + code, code, msg, &why), 0);
        const uint8_t *p = frame_payload(&out, 0, MOAT_MSG_ERROR, 1000 + code, &plen);
        assert_int_equal(moat_decode_error(p, plen, &d, &why), 0);
        assert_int_equal(d.code, code);
        assert_string_equal(d.message, msg);
        moat_error_free(&d);
        moat_buf_free(&out);
    }
    /* a NULL message travels as "" */
    struct moat_buf out = {0};
    const char *why = NULL;
    size_t plen;
    struct moat_error d;
    assert_int_equal(moat_encode_error(&out, 5, MOAT_ERR_BUSY, NULL, &why), 0);
    const uint8_t *p = frame_payload(&out, 0, MOAT_MSG_ERROR, 5, &plen);
    assert_int_equal(moat_decode_error(p, plen, &d, &why), 0);
    assert_int_equal(d.code, MOAT_ERR_BUSY);
    assert_string_equal(d.message, "");
    moat_error_free(&d);
    moat_buf_free(&out);
}

static void test_runtimes_roundtrip(void **state)
{
    char l0[] = "python", v0[] = "3.11.2", a0[] = "py", a1[] = "py3", a2[] = "python3";
    char l1[] = "c", v1[] = "10.2.1";
    char *al0[] = {a0, a1, a2};
    char p0[] = "-O2", p1[] = "-D{ident}={value}";
    char *pats[] = {p0, p1};
    struct moat_runtime items[] = {
        {l0, v0, al0, 3, 0, NULL, 0, 0},
        {l1, v1, NULL, 0, 1, pats, 2, 3},
    };
    char rtw[] = "namespaces+seccomp+landlock";
    struct moat_runtimes rt = {items, 2, {1, 8, 3, 32, 2, 4, 1}, rtw};
    struct moat_buf out = {0};
    const char *why = NULL;
    size_t plen;
    struct moat_runtimes d;

    assert_int_equal(moat_encode_runtimes(&out, 3, &rt, &why), 0);
    const uint8_t *p = frame_payload(&out, 0, MOAT_MSG_RUNTIMES, 3, &plen);
    assert_int_equal(moat_decode_runtimes(p, plen, &d, &why), 0);
    assert_int_equal(d.count, 2);
    assert_string_equal(d.items[0].language, "python");
    assert_string_equal(d.items[0].version, "3.11.2");
    assert_int_equal(d.items[0].naliases, 3);
    assert_string_equal(d.items[0].aliases[0], "py");
    assert_string_equal(d.items[0].aliases[2], "python3");
    assert_int_equal(d.items[0].compiled, 0);
    assert_string_equal(d.items[1].language, "c");
    assert_int_equal(d.items[1].naliases, 0);
    assert_int_equal(d.items[1].compiled, 1);
    assert_int_equal(d.items[0].noption_patterns, 0);
    assert_int_equal(d.items[1].noption_patterns, 2);
    assert_string_equal(d.items[1].option_patterns[0], "-O2");
    assert_string_equal(d.items[1].option_patterns[1], "-D{ident}={value}");
    /* isolations (tag 6): absent is namespaces only; sent as a bit set */
    assert_int_equal(d.items[0].isolations, 1u << MOAT_ISOLATION_NAMESPACES);
    assert_int_equal(d.items[1].isolations, (1u << MOAT_ISOLATION_NAMESPACES) | (1u << MOAT_ISOLATION_GVISOR));
    /* the backend's load (tag 2) */
    assert_int_equal(d.load.present, 1);
    assert_int_equal(d.load.slots, 8);
    assert_int_equal(d.load.busy, 3);
    assert_int_equal(d.load.queue_max, 32);
    assert_int_equal(d.load.queued, 2);
    assert_int_equal(d.load.session_slots, 4);
    assert_int_equal(d.load.sessions_busy, 1);
    /* the walls of the backend's boxes (tag 3) */
    assert_string_equal(d.walls, rtw);
    moat_runtimes_free(&d);
    moat_buf_free(&out);
    /* walls: once, and [a-z] names joined by '+' */
    for (int k = 0; k < 2; k++) {
        struct raw r = {0};
        if (k == 0)
            raw_str(&r, 3, "seccomp");
        raw_str(&r, 3, k == 0 ? "seccomp" : "");
        const char *want = k == 0 ? "duplicate field" : "empty string field";
        struct moat_runtimes q;
        assert_int_equal(moat_decode_runtimes(r.b, r.n, &q, &why), -1);
        assert_string_equal(why, want);
        raw_free(&r);
    }
    {
        struct raw r = {0};
        struct moat_runtimes q;
        raw_str(&r, 3, "seccomp+");
        assert_int_equal(moat_decode_runtimes(r.b, r.n, &q, &why), -1);
        assert_string_equal(why, "walls: names of [a-z] joined by '+'");
        assert_true(is_zero(&q, sizeof(q)));
        raw_free(&r);
    }

    /* a load that cannot be (more busy than there are slots) is refused */
    rt.load.busy = 9;
    assert_int_equal(moat_encode_runtimes(&out, 3, &rt, &why), 0);
    p = frame_payload(&out, 0, MOAT_MSG_RUNTIMES, 3, &plen);
    assert_int_equal(moat_decode_runtimes(p, plen, &d, &why), -1);
    assert_string_equal(why, "the backend's load is out of range");
    moat_buf_free(&out);

    /* no languages installed: an empty list */
    struct moat_runtimes none = {NULL, 0, {0}, NULL};
    assert_int_equal(moat_encode_runtimes(&out, 4, &none, &why), 0);
    p = frame_payload(&out, 0, MOAT_MSG_RUNTIMES, 4, &plen);
    assert_int_equal(plen, 0);
    assert_int_equal(moat_decode_runtimes(p, plen, &d, &why), 0);
    assert_int_equal(d.count, 0);
    assert_int_equal(d.load.present, 0); /* not sent: absent */
    moat_runtimes_free(&d);
    moat_buf_free(&out);
}

static void test_runtimes_query_and_frame_sequence(void **state)
{
    struct moat_buf out = {0};
    const char *why = NULL;
    size_t plen;

    /* two frames back to back in one buffer, as on the socket */
    assert_int_equal(moat_encode_runtimes_query(&out, 42, &why), 0);
    assert_int_equal(out.len, MOAT_FRAME_HEADER_SIZE);
    assert_int_equal(moat_encode_error(&out, 43, MOAT_ERR_INTERNAL, "boom", &why), 0);
    frame_payload(&out, 0, MOAT_MSG_RUNTIMES_QUERY, 42, &plen);
    assert_int_equal(plen, 0);
    const uint8_t *p = frame_payload(&out, MOAT_FRAME_HEADER_SIZE, MOAT_MSG_ERROR, 43, &plen);
    assert_int_equal(MOAT_FRAME_HEADER_SIZE * 2 + plen, out.len);
    struct moat_error d;
    assert_int_equal(moat_decode_error(p, plen, &d, &why), 0);
    assert_string_equal(d.message, "boom");
    moat_error_free(&d);
    moat_buf_free(&out);
}

/* ==== header rejections ================================================== */

static void test_header_rejections(void **state)
{
    struct raw r = {0};
    struct moat_frame_header h;
    const char *why = NULL;

    raw_header(&r, MOAT_PROTO_VERSION, MOAT_MSG_EXEC_REQUEST, 0, MOAT_FRAME_MAX_PAYLOAD, UINT64_MAX);
    assert_int_equal(moat_frame_parse_header(r.b, r.n, &h, &why), 0); /* the cap itself is fine */
    assert_int_equal(h.length, MOAT_FRAME_MAX_PAYLOAD);
    assert_true(h.job_id == UINT64_MAX);
    assert_int_equal(moat_frame_parse_header(r.b, r.n - 1, &h, &why), -1);
    assert_string_equal(why, "short frame header");
    raw_free(&r);

    raw_header(&r, 0, MOAT_MSG_EXEC_REQUEST, 0, 0, 1);
    reject_header(&r, "unsupported protocol version");
    raw_free(&r);
    raw_header(&r, 2, MOAT_MSG_EXEC_REQUEST, 0, 0, 1);
    reject_header(&r, "unsupported protocol version");
    raw_free(&r);
    raw_header(&r, MOAT_PROTO_VERSION, 0, 0, 0, 1);
    reject_header(&r, "unknown message type");
    raw_free(&r);
    raw_header(&r, MOAT_PROTO_VERSION, MOAT_MSG_MAX + 1, 0, 0, 1);
    reject_header(&r, "unknown message type");
    raw_free(&r);
    raw_header(&r, MOAT_PROTO_VERSION, MOAT_MSG_ERROR, 0x8000, 0, 1);
    reject_header(&r, "reserved flags set");
    raw_free(&r);
    raw_header(&r, MOAT_PROTO_VERSION, MOAT_MSG_ERROR, 1, 0, 1);
    reject_header(&r, "reserved flags set");
    raw_free(&r);
    raw_header(&r, MOAT_PROTO_VERSION, MOAT_MSG_EXEC_RESULT, 0, MOAT_FRAME_MAX_PAYLOAD + 1, 1);
    reject_header(&r, "frame exceeds the size cap");
    raw_free(&r);
    raw_header(&r, MOAT_PROTO_VERSION, MOAT_MSG_EXEC_RESULT, 0, UINT32_MAX, 1);
    reject_header(&r, "frame exceeds the size cap");
    raw_free(&r);
}

/* ==== TLV structure rejections ========================================== */

static void test_tlv_structure_rejections(void **state)
{
    struct raw r = {0};

    /* fewer than 6 bytes where a TLV header should start */
    raw_bytes(&r, "\x00\x01\x00\x00\x00", 5);
    reject_request(&r, "truncated field header");
    reject_result(&r, "truncated field header");
    reject_error(&r, "truncated field header");
    reject_runtimes(&r, "truncated field header");
    raw_free(&r);

    /* a length one past the end of the payload */
    raw_tlv_hdr(&r, REQ_LANGUAGE, 7);
    raw_bytes(&r, "python", 6);
    reject_request(&r, "field length exceeds message");
    raw_free(&r);

    /* a length of 0xffffffff must not wrap */
    raw_tlv_hdr(&r, REQ_LANGUAGE, UINT32_MAX);
    raw_bytes(&r, "python", 6);
    reject_request(&r, "field length exceeds message");
    raw_free(&r);

    /* a nested length beyond its parent (file) */
    size_t at = raw_nest_begin(&r, REQ_FILE);
    raw_tlv_hdr(&r, FILE_NAME, 100);
    raw_bytes(&r, "a.py", 4);
    raw_nest_end(&r, at);
    raw_str(&r, REQ_LANGUAGE, "python");
    raw_str(&r, REQ_VERSION, "3");
    reject_request(&r, "field length exceeds message");
    raw_free(&r);

    /* valid message, then a partial TLV: trailing garbage */
    raw_min_request(&r);
    raw_bytes(&r, "\x00\x01\x00", 3);
    reject_request(&r, "truncated field header");
    raw_free(&r);
    raw_min_request(&r);
    raw_tlv_hdr(&r, REQ_ARG, 10);
    raw_bytes(&r, "abc", 3);
    reject_request(&r, "field length exceeds message");
    raw_free(&r);
    raw_min_request(&r);
    raw_bytes(&r, "\x00", 1);
    reject_request(&r, "truncated field header");
    raw_free(&r);
}

/* moat_path.h: one row per rule, the gateway's and the backend's alike. */
static void test_path_rules(void **state)
{
    static const struct {
        const char *name;
        enum moat_path_problem want;
    } rows[] = {
        {"main.py", MOAT_PATH_OK},
        {"pkg/mod.py", MOAT_PATH_OK},
        {"a/b/c/d/e/f/g/h", MOAT_PATH_OK},
        {"...", MOAT_PATH_OK},
        {".hidden/x", MOAT_PATH_OK},
        {"a-b/c@d", MOAT_PATH_OK},
        {"", MOAT_PATH_LENGTH},
        {"a\nb", MOAT_PATH_CONTROL},
        {"a/\x7f", MOAT_PATH_CONTROL},
        {"/etc/x", MOAT_PATH_ABSOLUTE},
        {"/", MOAT_PATH_ABSOLUTE},
        {"a//b", MOAT_PATH_EMPTY_PART},
        {"a/", MOAT_PATH_EMPTY_PART},
        {".", MOAT_PATH_DOT_PART},
        {"..", MOAT_PATH_DOT_PART},
        {"../x", MOAT_PATH_DOT_PART},
        {"a/./b", MOAT_PATH_DOT_PART},
        {"a/..", MOAT_PATH_DOT_PART},
        {"a/b/c/d/e/f/g/h/i", MOAT_PATH_DEPTH},
        {"-o", MOAT_PATH_OPTION_LIKE},
        {"@o", MOAT_PATH_OPTION_LIKE},
        {"pkg/-o", MOAT_PATH_OPTION_LIKE},
        {"@d/x.c", MOAT_PATH_OPTION_LIKE},
    };
    char longest[MOAT_MAX_NAME_LEN + 2];

    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
        if (moat_path_check(rows[i].name, strlen(rows[i].name)) != rows[i].want)
            fail_msg("\"%s\": got %d, want %d", rows[i].name, moat_path_check(rows[i].name, strlen(rows[i].name)), rows[i].want);
    assert_int_equal(moat_path_check("a\0b", 3), MOAT_PATH_CONTROL);
    memset(longest, 'n', sizeof(longest));
    assert_int_equal(moat_path_check(longest, MOAT_MAX_NAME_LEN), MOAT_PATH_OK);
    assert_int_equal(moat_path_check(longest, MOAT_MAX_NAME_LEN + 1), MOAT_PATH_LENGTH);
    for (int p = MOAT_PATH_OK; p <= MOAT_PATH_OPTION_LIKE; p++)
        assert_true(strlen(moat_path_problem_text((enum moat_path_problem)p)) > 0);
    assert_true(moat_path_is_dir_of("pkg", "pkg/mod.py"));
    assert_true(moat_path_is_dir_of("a/b", "a/b/c"));
    assert_false(moat_path_is_dir_of("pkg", "pkg.py"));
    assert_false(moat_path_is_dir_of("pkg", "pkg"));
    assert_false(moat_path_is_dir_of("pkg/mod.py", "pkg"));
    assert_false(moat_path_is_dir_of("pk", "pkg/x"));
}

/* moat_semver.h: plain selectors keep their rule; ranges as node-semver's satisfies() reads them. */
static void test_semver_selectors(void **state)
{
    static const struct {
        const char *version, *selector;
        int want;
    } rows[] = {
        /* plain: whole components, a prefix selects below it */
        {"3.11.2", "*", 1},
        {"3.11.2", "3", 1},
        {"3.11.2", "3.11", 1},
        {"3.11.2", "3.x", 1},
        {"3.11.2", "3.1", 0},
        {"3.11.2", "3.11.2", 1},
        {"3.11.2", "4", 0},
        /* caret */
        {"3.11.2", "^3.10", 1},
        {"3.11.2", "^3.12", 0},
        {"4.0.0", "^3.10", 0},
        {"3.11.2", "^3", 1},
        {"0.2.5", "^0.2.3", 1},
        {"0.3.0", "^0.2.3", 0},
        {"0.0.3", "^0.0.3", 1},
        {"0.0.4", "^0.0.3", 0},
        {"0.1.0", "^0.0", 0},
        {"0.9.9", "^0.x", 1},
        /* tilde */
        {"3.11.2", "~3.11", 1},
        {"3.11.9", "~3.11.2", 1},
        {"3.12.0", "~3.11", 0},
        {"3.11.1", "~3.11.2", 0},
        {"3.99.0", "~3", 1},
        {"3.11.2", "~>3.11", 1},
        /* comparisons, partial versions read as node-semver reads them */
        {"3.11.2", ">=3", 1},
        {"2.9.9", ">=3", 0},
        {"3.11.2", ">3.11", 0},
        {"3.12.0", ">3.11", 1},
        {"3.11.2", "<=3.11", 1},
        {"3.12.0", "<=3.11", 0},
        {"3.11.2", "<3.11", 0},
        {"3.10.9", "<3.11", 1},
        {"3.11.2", "=3.11.2", 1},
        {"3.11.2", ">= 3.9 < 3.12", 1},
        {"3.11.2", ">=3.9 <3.12", 1},
        {"3.12.1", ">=3.9 <3.12", 0},
        {"3.8.0", ">=3.9 <3.12", 0},
        {"3.11.2", "v3.11.2", 0}, /* plain by its characters: "v3" is not "3" */
        {"3.11.2", "=v3.11.2", 1},
        {"3.11.2", "3.x || 4", 1},
        {"4.1.0", "3.x || 4", 1},
        {"5.0.0", "3.x || 4", 0},
        {"5.0.0", "3 || >=5", 1},
        {"3.11.2", "<*", 0},
        {"3.11.2", ">=*", 1},
        /* hyphen ranges: inclusive, a partial upper end covers its span */
        {"3.11.2", "3.10 - 3.11", 1},
        {"3.12.0", "3.10 - 3.11", 0},
        {"3.10.0", "3.10.0 - 3.10.0", 1},
        {"1.2.2", "1.2.3 - 2", 0},
        {"2.9.9", "1.2.3 - 2", 1},
        /* versions that are not three numbers are never in a range */
        {"3.11.2.1", ">=3", 0},
        {"3.11rc1", ">=3", 0},
        {"17", ">=16", 1},
        {"5.4", "^5.3", 1},
    };
    static const char *invalid[] = {">=",       "^",   ">=3 <", "3.11.2.1 || >", "^3.1x",
                                    "3.x.4 >1", ">=a", "<<3",   "3 - ",          "99999999999 >1"};
    static const char *valid[] = {"*", "3.x", "^3.10", ">=3 <4", "~3.11", "3 || 4", "1.2 - 3", "  ", ">= 3", "3.x.x || *"};

    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
        if (moat_version_selects(rows[i].version, rows[i].selector) != rows[i].want)
            fail_msg("moat_version_selects(\"%s\", \"%s\") != %d", rows[i].version, rows[i].selector, rows[i].want);
    for (size_t i = 0; i < sizeof(invalid) / sizeof(invalid[0]); i++) {
        if (moat_selector_valid(invalid[i]))
            fail_msg("\"%s\" taken for a selector", invalid[i]);
        assert_int_equal(moat_version_selects("3.11.2", invalid[i]), 0);
    }
    for (size_t i = 0; i < sizeof(valid) / sizeof(valid[0]); i++)
        if (!moat_selector_valid(valid[i]))
            fail_msg("\"%s\" refused", valid[i]);
    assert_true(moat_selector_is_plain("3.11.x") && moat_selector_is_plain("*"));
    assert_false(moat_selector_is_plain("^3") || moat_selector_is_plain("3 || 4") || moat_selector_is_plain(""));
    assert_true(moat_version_cmp("3.11.2", "3.9.0") > 0 && moat_version_cmp("3.9", "3.11") < 0);
    assert_int_equal(moat_version_cmp("1.19.8", "1.19.8"), 0);
}

static void test_unknown_and_duplicate_tags(void **state)
{
    struct raw r = {0};

    raw_min_request(&r);
    raw_str(&r, 19, "x"); /* 12 and 13 are the test cases', 14-17 the run rlimits and options, 18 the isolation */
    reject_request(&r, "unknown field in exec request");
    raw_free(&r);
    raw_min_request(&r);
    raw_str(&r, 0, "x");
    reject_request(&r, "unknown field in exec request");
    raw_free(&r);
    raw_min_request(&r);
    raw_str(&r, 0x1234, "x"); /* beyond the seen-bitmap range */
    reject_request(&r, "unknown field");
    raw_free(&r);

    /* unknown tag inside a file */
    raw_str(&r, REQ_LANGUAGE, "python");
    raw_str(&r, REQ_VERSION, "3");
    size_t at = raw_nest_begin(&r, REQ_FILE);
    raw_str(&r, FILE_NAME, "a.py");
    raw_str(&r, FILE_CONTENT, "");
    raw_str(&r, 3, "mode");
    raw_nest_end(&r, at);
    reject_request(&r, "unknown field in file");
    raw_free(&r);

    /* duplicates of non-repeatable fields */
    raw_min_request(&r);
    raw_str(&r, REQ_LANGUAGE, "ruby");
    reject_request(&r, "duplicate field");
    raw_free(&r);
    raw_min_request(&r);
    raw_uint(&r, REQ_RUN_TIMEOUT, 1, 8);
    raw_uint(&r, REQ_RUN_TIMEOUT, 2, 8);
    reject_request(&r, "duplicate field");
    raw_free(&r);
    raw_min_request(&r);
    raw_uint(&r, REQ_RUN_CPU, 1, 8);
    raw_uint(&r, REQ_RUN_CPU, 2, 8);
    reject_request(&r, "duplicate field");
    raw_free(&r);
    /* a CPU limit: u64, never 0 (the encoder sends none for "not asked"), fits int64 */
    raw_min_request(&r);
    raw_uint(&r, REQ_COMPILE_CPU, 0, 8);
    reject_request(&r, "cpu limit must be positive");
    raw_free(&r);
    raw_min_request(&r);
    raw_uint(&r, REQ_RUN_CPU, (uint64_t)INT64_MAX + 1, 8);
    reject_request(&r, "limit out of range");
    raw_free(&r);
    raw_min_request(&r);
    raw_uint(&r, REQ_RUN_CPU, 5, 4);
    reject_request(&r, "integer field has the wrong width");
    raw_free(&r);
    raw_min_request(&r);
    raw_str(&r, REQ_STDIN, "a");
    raw_str(&r, REQ_STDIN, "b");
    reject_request(&r, "duplicate field");
    raw_free(&r);
    raw_str(&r, REQ_LANGUAGE, "python");
    raw_str(&r, REQ_VERSION, "3");
    at = raw_nest_begin(&r, REQ_FILE);
    raw_str(&r, FILE_NAME, "a.py");
    raw_str(&r, FILE_NAME, "b.py");
    raw_str(&r, FILE_CONTENT, "");
    raw_nest_end(&r, at);
    reject_request(&r, "duplicate field");
    raw_free(&r);

    /* files and args repeat by design */
    struct moat_exec_request d;
    const char *why = NULL;
    raw_min_request(&r);
    raw_file(&r, "b.py", "");
    raw_str(&r, REQ_ARG, "x");
    raw_str(&r, REQ_ARG, "x");
    assert_int_equal(moat_decode_exec_request(r.b, r.n, &d, &why), 0);
    assert_int_equal(d.nfiles, 2);
    assert_int_equal(d.nargs, 2);
    moat_exec_request_free(&d);
    raw_free(&r);

    /* exec result: unknown top-level, unknown in stage, duplicate stage */
    raw_str(&r, RES_LANGUAGE, "c");
    raw_str(&r, RES_VERSION, "1");
    raw_str(&r, 4, "x"); /* 3 is the walls */
    reject_result(&r, "unknown field in exec result");
    raw_free(&r);
    raw_str(&r, RES_LANGUAGE, "c");
    raw_str(&r, RES_VERSION, "1");
    at = raw_nest_begin(&r, RES_RUN);
    raw_uint(&r, ST_STATUS, 0, 1);
    raw_uint(&r, 12, 0, 8); /* 11 is the clock */
    raw_nest_end(&r, at);
    reject_result(&r, "unknown field in stage result");
    raw_free(&r);
    raw_str(&r, RES_LANGUAGE, "c");
    raw_str(&r, RES_VERSION, "1");
    for (int i = 0; i < 2; i++) {
        at = raw_nest_begin(&r, RES_RUN);
        raw_uint(&r, ST_STATUS, 0, 1);
        raw_nest_end(&r, at);
    }
    reject_result(&r, "duplicate field");
    raw_free(&r);
    raw_str(&r, RES_LANGUAGE, "c");
    raw_str(&r, RES_VERSION, "1");
    at = raw_nest_begin(&r, RES_RUN);
    raw_uint(&r, ST_STATUS, 0, 1);
    raw_tlv(&r, ST_STDOUT, "a", 1);
    raw_tlv(&r, ST_STDOUT, "b", 1);
    raw_nest_end(&r, at);
    reject_result(&r, "duplicate field");
    raw_free(&r);

    /* error and runtimes */
    raw_uint(&r, ERR_CODE, 1, 2);
    raw_str(&r, ERR_MESSAGE, "m");
    raw_str(&r, 3, "m");
    reject_error(&r, "unknown field in error");
    raw_free(&r);
    raw_uint(&r, ERR_CODE, 1, 2);
    raw_uint(&r, ERR_CODE, 1, 2);
    raw_str(&r, ERR_MESSAGE, "m");
    reject_error(&r, "duplicate field");
    raw_free(&r);
    raw_str(&r, 4, "x"); /* tag 2 is the backend's load, 3 its walls */
    reject_runtimes(&r, "unknown field in runtimes");
    raw_free(&r);
    at = raw_nest_begin(&r, RT_RUNTIME);
    raw_str(&r, RTE_LANGUAGE, "c");
    raw_str(&r, RTE_VERSION, "1");
    raw_str(&r, 7, "x"); /* 5 is the compiler option patterns, 6 the isolations */
    raw_nest_end(&r, at);
    reject_runtimes(&r, "unknown field in runtime");
    raw_free(&r);
    at = raw_nest_begin(&r, RT_RUNTIME);
    raw_str(&r, RTE_LANGUAGE, "c");
    raw_str(&r, RTE_VERSION, "1");
    raw_str(&r, RTE_VERSION, "2");
    raw_nest_end(&r, at);
    reject_runtimes(&r, "duplicate field");
    raw_free(&r);
}

/* ==== required fields ==================================================== */

static void test_required_fields(void **state)
{
    struct raw r = {0};

    /* missing language */
    raw_str(&r, REQ_VERSION, "3");
    raw_file(&r, "a.py", "");
    reject_request(&r, "exec request needs language and version");
    raw_free(&r);
    /* missing version */
    raw_str(&r, REQ_LANGUAGE, "python");
    raw_file(&r, "a.py", "");
    reject_request(&r, "exec request needs language and version");
    raw_free(&r);
    /* no files */
    raw_str(&r, REQ_LANGUAGE, "python");
    raw_str(&r, REQ_VERSION, "3");
    raw_str(&r, REQ_ARG, "x");
    reject_request(&r, "exec request needs at least one file");
    raw_free(&r);
    /* an empty payload */
    reject_request(&r, "exec request needs language and version");
    /* a file without content, and one without name */
    raw_str(&r, REQ_LANGUAGE, "python");
    raw_str(&r, REQ_VERSION, "3");
    size_t at = raw_nest_begin(&r, REQ_FILE);
    raw_str(&r, FILE_NAME, "a.py");
    raw_nest_end(&r, at);
    reject_request(&r, "file needs a name and content");
    raw_free(&r);
    raw_str(&r, REQ_LANGUAGE, "python");
    raw_str(&r, REQ_VERSION, "3");
    at = raw_nest_begin(&r, REQ_FILE);
    raw_str(&r, FILE_CONTENT, "x");
    raw_nest_end(&r, at);
    reject_request(&r, "file needs a name and content");
    raw_free(&r);
    /* an empty language */
    raw_str(&r, REQ_LANGUAGE, "");
    raw_str(&r, REQ_VERSION, "3");
    raw_file(&r, "a.py", "");
    reject_request(&r, "empty string field");
    raw_free(&r);

    /* exec result without a stage, stage without status */
    raw_str(&r, RES_LANGUAGE, "c");
    raw_str(&r, RES_VERSION, "1");
    reject_result(&r, "exec result needs language, version and a stage");
    at = raw_nest_begin(&r, RES_COMPILE);
    raw_uint(&r, ST_CODE, 0, 4);
    raw_nest_end(&r, at);
    reject_result(&r, "stage result needs a status");
    raw_free(&r);

    /* error without message / without code */
    raw_uint(&r, ERR_CODE, 1, 2);
    reject_error(&r, "error needs a code and a message");
    raw_free(&r);
    raw_str(&r, ERR_MESSAGE, "m");
    reject_error(&r, "error needs a code and a message");
    raw_free(&r);

    /* runtime entry without version */
    at = raw_nest_begin(&r, RT_RUNTIME);
    raw_str(&r, RTE_LANGUAGE, "c");
    raw_nest_end(&r, at);
    reject_runtimes(&r, "runtime needs language and version");
    raw_free(&r);
}

/* ==== string rules ======================================================= */

static void request_with_language(struct raw *r, const void *lang, size_t len)
{
    raw_tlv(r, REQ_LANGUAGE, lang, len);
    raw_str(r, REQ_VERSION, "3");
    raw_file(r, "a.py", "");
}

static void test_string_rules(void **state)
{
    struct raw r = {0};
    struct moat_exec_request d;
    const char *why = NULL;

    request_with_language(&r, "py\0thon", 7);
    reject_request(&r, "NUL byte in string field");
    raw_free(&r);
    request_with_language(&r, "\0", 1);
    reject_request(&r, "NUL byte in string field");
    raw_free(&r);

    static const struct {
        const char *bytes;
        const char *what;
    } bad[] = {
        {"py\xff", "0xff"},
        {"\x80", "lone continuation byte"},
        {"\xc0\xaf", "overlong '/'"},
        {"\xe0\x80\xaf", "overlong 3-byte"},
        {"\xf0\x80\x80\xaf", "overlong 4-byte"},
        {"\xed\xa0\x80", "UTF-16 surrogate"},
        {"\xf4\x90\x80\x80", "above U+10FFFF"},
        {"\xe2\x82", "truncated sequence at the end"},
        {"\xe2\x82z", "truncated sequence mid-string"},
        {"\xc3", "lone lead byte"},
        {"\xf8\x88\x80\x80\x80", "5-byte form"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        print_message("invalid UTF-8: %s\n", bad[i].what);
        request_with_language(&r, bad[i].bytes, strlen(bad[i].bytes));
        reject_request(&r, "string field is not valid UTF-8");
        raw_free(&r);
    }

    /* valid multi-byte sequences up to U+10FFFF are accepted */
    static const char *const good[] = {"caf\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x90\x8d", "\xf4\x8f\xbf\xbf", "\xef\xbf\xbf"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        request_with_language(&r, good[i], strlen(good[i]));
        assert_int_equal(moat_decode_exec_request(r.b, r.n, &d, &why), 0);
        assert_string_equal(d.language, good[i]);
        moat_exec_request_free(&d);
        raw_free(&r);
    }

    /* invalid UTF-8 in a file name and an argument, too */
    raw_str(&r, REQ_LANGUAGE, "python");
    raw_str(&r, REQ_VERSION, "3");
    raw_file(&r, "a\xff.py", "");
    reject_request(&r, "string field is not valid UTF-8");
    raw_free(&r);
    raw_min_request(&r);
    raw_str(&r, REQ_ARG, "\xc0\x80");
    reject_request(&r, "string field is not valid UTF-8");
    raw_free(&r);

    /* length caps: 255 is fine, 256 is not */
    char name[MOAT_MAX_NAME_LEN + 2];
    memset(name, 'p', sizeof(name));
    request_with_language(&r, name, MOAT_MAX_NAME_LEN);
    assert_int_equal(moat_decode_exec_request(r.b, r.n, &d, &why), 0);
    assert_int_equal(strlen(d.language), MOAT_MAX_NAME_LEN);
    moat_exec_request_free(&d);
    raw_free(&r);
    request_with_language(&r, name, MOAT_MAX_NAME_LEN + 1);
    reject_request(&r, "string field too long");
    raw_free(&r);
    raw_str(&r, REQ_LANGUAGE, "python");
    raw_tlv(&r, REQ_VERSION, name, MOAT_MAX_NAME_LEN + 1);
    raw_file(&r, "a.py", "");
    reject_request(&r, "string field too long");
    raw_free(&r);
    raw_str(&r, REQ_LANGUAGE, "python");
    raw_str(&r, REQ_VERSION, "3");
    size_t at = raw_nest_begin(&r, REQ_FILE);
    raw_tlv(&r, FILE_NAME, name, MOAT_MAX_NAME_LEN + 1);
    raw_str(&r, FILE_CONTENT, "");
    raw_nest_end(&r, at);
    reject_request(&r, "string field too long");
    raw_free(&r);

    char *arg = malloc(MOAT_MAX_ARG_LEN + 1);
    assert_non_null(arg);
    memset(arg, 'a', MOAT_MAX_ARG_LEN + 1);
    raw_min_request(&r);
    raw_tlv(&r, REQ_ARG, arg, MOAT_MAX_ARG_LEN + 1);
    reject_request(&r, "string field too long");
    raw_free(&r);
    free(arg);

    /* stage and error messages: at most 1024 bytes */
    char msg[MOAT_MAX_MESSAGE_LEN + 1];
    memset(msg, 'm', sizeof(msg));
    raw_uint(&r, ERR_CODE, 1, 2);
    raw_tlv(&r, ERR_MESSAGE, msg, sizeof(msg));
    reject_error(&r, "string field too long");
    raw_free(&r);
}

/* ==== counts ============================================================= */

static void test_count_caps(void **state)
{
    struct raw r = {0};

    raw_str(&r, REQ_LANGUAGE, "python");
    raw_str(&r, REQ_VERSION, "3");
    for (int i = 0; i < MOAT_MAX_FILES + 1; i++)
        raw_file(&r, "f.py", "");
    reject_request(&r, "too many files");
    raw_free(&r);

    raw_min_request(&r);
    for (int i = 0; i < MOAT_MAX_ARGS + 1; i++)
        raw_str(&r, REQ_ARG, "a");
    reject_request(&r, "too many arguments");
    raw_free(&r);

    size_t at = raw_nest_begin(&r, RT_RUNTIME);
    raw_str(&r, RTE_LANGUAGE, "c");
    raw_str(&r, RTE_VERSION, "1");
    for (int i = 0; i < MOAT_MAX_ALIASES + 1; i++)
        raw_str(&r, RTE_ALIAS, "x");
    raw_nest_end(&r, at);
    reject_runtimes(&r, "too many aliases");
    raw_free(&r);

    for (int i = 0; i < MOAT_MAX_RUNTIMES + 1; i++) {
        at = raw_nest_begin(&r, RT_RUNTIME);
        raw_str(&r, RTE_LANGUAGE, "c");
        raw_str(&r, RTE_VERSION, "1");
        raw_nest_end(&r, at);
    }
    reject_runtimes(&r, "too many runtimes");
    raw_free(&r);
}

/* ==== integers =========================================================== */

static void test_integer_rules(void **state)
{
    struct raw r = {0};
    struct moat_exec_request d;
    const char *why = NULL;

    static const int widths[] = {0, 1, 4, 7, 9};
    for (size_t i = 0; i < sizeof(widths) / sizeof(widths[0]); i++) {
        uint8_t zero[16] = {0};
        raw_min_request(&r);
        raw_tlv(&r, REQ_RUN_MEMORY, zero, (size_t)widths[i]);
        reject_request(&r, "integer field has the wrong width");
        raw_free(&r);
    }

    raw_min_request(&r);
    raw_uint(&r, REQ_COMPILE_TIMEOUT, (uint64_t)INT64_MAX + 1, 8);
    reject_request(&r, "limit out of range");
    raw_free(&r);
    raw_min_request(&r);
    raw_uint(&r, REQ_RUN_TIMEOUT, UINT64_MAX, 8); /* would be -1 as int64 */
    reject_request(&r, "limit out of range");
    raw_free(&r);
    raw_min_request(&r);
    raw_uint(&r, REQ_RUN_TIMEOUT, INT64_MAX, 8);
    assert_int_equal(moat_decode_exec_request(r.b, r.n, &d, &why), 0);
    assert_true(d.run_timeout_ms == INT64_MAX);
    moat_exec_request_free(&d);
    raw_free(&r);

    /* stage: code is u32, status u8 within range, signal 1..64 */
    static const struct {
        uint16_t tag;
        uint64_t v;
        int width;
        const char *why;
    } st[] = {
        {ST_CODE, 0, 8, "integer field has the wrong width"},
        {ST_SIGNAL, 9, 2, "integer field has the wrong width"},
        {ST_SIGNAL, 0, 4, "signal out of range"},
        {ST_SIGNAL, 65, 4, "signal out of range"},
        {ST_STATUS, 0, 4, "integer field has the wrong width"},
        {ST_STATUS, MOAT_STATUS_MAX + 1, 1, "unknown status"},
        {ST_STATUS, 255, 1, "unknown status"},
    };
    for (size_t i = 0; i < sizeof(st) / sizeof(st[0]); i++) {
        raw_str(&r, RES_LANGUAGE, "c");
        raw_str(&r, RES_VERSION, "1");
        size_t at = raw_nest_begin(&r, RES_RUN);
        if (st[i].tag != ST_STATUS)
            raw_uint(&r, ST_STATUS, 0, 1);
        raw_uint(&r, st[i].tag, st[i].v, st[i].width);
        raw_nest_end(&r, at);
        reject_result(&r, st[i].why);
        raw_free(&r);
    }

    /* error codes: 0 and above MOAT_ERR_MAX are refused, width is u16 */
    raw_uint(&r, ERR_CODE, 0, 2);
    raw_str(&r, ERR_MESSAGE, "m");
    reject_error(&r, "unknown error code");
    raw_free(&r);
    raw_uint(&r, ERR_CODE, MOAT_ERR_MAX + 1, 2);
    raw_str(&r, ERR_MESSAGE, "m");
    reject_error(&r, "unknown error code");
    raw_free(&r);
    raw_uint(&r, ERR_CODE, 1, 4);
    raw_str(&r, ERR_MESSAGE, "m");
    reject_error(&r, "integer field has the wrong width");
    raw_free(&r);

    /* runtimes: compiled is a 0/1 byte */
    size_t at = raw_nest_begin(&r, RT_RUNTIME);
    raw_str(&r, RTE_LANGUAGE, "c");
    raw_str(&r, RTE_VERSION, "1");
    raw_uint(&r, RTE_COMPILED, 2, 1);
    raw_nest_end(&r, at);
    reject_runtimes(&r, "compiled flag out of range");
    raw_free(&r);
}

/* ==== encoder refusals =================================================== */

/* Encoding must fail with `reason` and leave `out` exactly as it was. */
static void refused_unchanged(struct moat_buf *out, const uint8_t *before, size_t before_len, int rc, const char *why,
                              const char *reason)
{
    assert_int_equal(rc, -1);
    assert_non_null(why);
    assert_string_equal(why, reason);
    assert_int_equal(out->len, before_len);
    assert_memory_equal(out->data, before, before_len);
}

static void test_encoder_refusals(void **state)
{
    struct moat_buf out = {0};
    const char *why = NULL;

    /* something already in the buffer that must survive each refusal */
    assert_int_equal(moat_encode_error(&out, 1, MOAT_ERR_BUSY, "first", &why), 0);
    size_t before_len = out.len;
    uint8_t before[256];
    assert_true(before_len <= sizeof(before));
    memcpy(before, out.data, before_len);

    char lang[] = "python", ver[] = "3", name[] = "a.py", longname[MOAT_MAX_NAME_LEN + 2];
    memset(longname, 'n', MOAT_MAX_NAME_LEN + 1);
    longname[MOAT_MAX_NAME_LEN + 1] = '\0';
    uint8_t content[] = "x";
    struct moat_file files[MOAT_MAX_FILES + 1];
    for (int i = 0; i < MOAT_MAX_FILES + 1; i++)
        files[i] = (struct moat_file){name, content, 1};
    char arg[] = "a";
    char *args[MOAT_MAX_ARGS + 1];
    for (int i = 0; i < MOAT_MAX_ARGS + 1; i++)
        args[i] = arg;
    struct moat_exec_request base = {.language = lang,
                                     .version = ver,
                                     .files = files,
                                     .nfiles = 1,
                                     .run_timeout_ms = -1,
                                     .compile_timeout_ms = -1,
                                     .run_memory_bytes = -1,
                                     .compile_memory_bytes = -1};
    struct moat_exec_request q;
    int rc;

    q = base;
    q.nfiles = 0;
    why = NULL;
    rc = moat_encode_exec_request(&out, 2, &q, &why);
    refused_unchanged(&out, before, before_len, rc, why, "file count out of range");

    q = base;
    q.nfiles = MOAT_MAX_FILES + 1;
    why = NULL;
    rc = moat_encode_exec_request(&out, 2, &q, &why);
    refused_unchanged(&out, before, before_len, rc, why, "file count out of range");

    q = base;
    q.args = args;
    q.nargs = MOAT_MAX_ARGS + 1;
    why = NULL;
    rc = moat_encode_exec_request(&out, 2, &q, &why);
    refused_unchanged(&out, before, before_len, rc, why, "too many arguments");

    q = base;
    q.language = longname;
    why = NULL;
    rc = moat_encode_exec_request(&out, 2, &q, &why);
    refused_unchanged(&out, before, before_len, rc, why, "string field too long");

    /* a too long file name fails after the frame was partly written */
    struct moat_file longfile[2] = {{name, content, 1}, {longname, content, 1}};
    q = base;
    q.files = longfile;
    q.nfiles = 2;
    why = NULL;
    rc = moat_encode_exec_request(&out, 2, &q, &why);
    refused_unchanged(&out, before, before_len, rc, why, "string field too long");

    struct moat_file noname = {NULL, content, 1};
    q = base;
    q.files = &noname;
    why = NULL;
    rc = moat_encode_exec_request(&out, 2, &q, &why);
    refused_unchanged(&out, before, before_len, rc, why, "file name missing");

    q = base;
    q.version = NULL;
    why = NULL;
    rc = moat_encode_exec_request(&out, 2, &q, &why);
    refused_unchanged(&out, before, before_len, rc, why, "language and version are required");

    /* exec result */
    struct moat_exec_result res = {.language = lang, .version = ver};
    why = NULL;
    rc = moat_encode_exec_result(&out, 3, &res, &why);
    refused_unchanged(&out, before, before_len, rc, why, "language, version and a stage are required");
    res.run.present = 1;
    res.run.status = MOAT_STATUS_MAX + 1;
    why = NULL;
    rc = moat_encode_exec_result(&out, 3, &res, &why);
    refused_unchanged(&out, before, before_len, rc, why, "bad status");

    /* error codes */
    why = NULL;
    rc = moat_encode_error(&out, 4, 0, "x", &why);
    refused_unchanged(&out, before, before_len, rc, why, "bad error code");
    why = NULL;
    rc = moat_encode_error(&out, 4, MOAT_ERR_MAX + 1, "x", &why);
    refused_unchanged(&out, before, before_len, rc, why, "bad error code");
    char longmsg[MOAT_MAX_MESSAGE_LEN + 2];
    memset(longmsg, 'm', MOAT_MAX_MESSAGE_LEN + 1);
    longmsg[MOAT_MAX_MESSAGE_LEN + 1] = '\0';
    why = NULL;
    rc = moat_encode_error(&out, 4, MOAT_ERR_LIMIT, longmsg, &why);
    refused_unchanged(&out, before, before_len, rc, why, "string field too long");

    /* runtimes */
    char *aliases[MOAT_MAX_ALIASES + 1];
    for (int i = 0; i < MOAT_MAX_ALIASES + 1; i++)
        aliases[i] = arg;
    struct moat_runtime item = {lang, ver, aliases, MOAT_MAX_ALIASES + 1, 0, NULL, 0, 0};
    struct moat_runtimes rt = {&item, 1, {0}, NULL};
    why = NULL;
    rc = moat_encode_runtimes(&out, 5, &rt, &why);
    refused_unchanged(&out, before, before_len, rc, why, "too many aliases");
    item.naliases = 0;
    item.version = NULL;
    why = NULL;
    rc = moat_encode_runtimes(&out, 5, &rt, &why);
    refused_unchanged(&out, before, before_len, rc, why, "runtime language and version are required");

    /* the surviving first frame still decodes */
    size_t plen;
    const uint8_t *p = frame_payload(&out, 0, MOAT_MSG_ERROR, 1, &plen);
    struct moat_error e;
    assert_int_equal(moat_decode_error(p, plen, &e, &why), 0);
    assert_string_equal(e.message, "first");
    moat_error_free(&e);
    moat_buf_free(&out);
}

static void test_encoder_refusal_on_empty_buffer(void **state)
{
    struct moat_buf out = {0};
    const char *why = NULL;
    char lang[] = "python", ver[] = "3";
    struct moat_exec_request q = {.language = lang, .version = ver, .nfiles = 0};

    assert_int_equal(moat_encode_exec_request(&out, 1, &q, &why), -1);
    assert_string_equal(why, "file count out of range");
    assert_int_equal(out.len, 0);
    moat_buf_free(&out);
}

/* ==== session messages =================================================== */

/* Decodes p as a session message of `type`; on failure the output must be
 * left empty, on success it is freed.  Returns the decoder's result. */
static int session_decode(uint8_t type, const uint8_t *p, size_t n, const char **why)
{
    union {
        struct moat_session_stdin in;
        struct moat_session_output out;
        struct moat_session_stage stage;
        struct moat_session_exit exit;
        int32_t signal;
        uint32_t credit;
    } u;
    size_t size;
    int rc;

    memset(&u, 0xa5, sizeof(u));
    switch (type) {
    case MOAT_MSG_SESSION_STDIN:
        rc = moat_decode_session_stdin(p, n, &u.in, why), size = sizeof(u.in);
        if (rc == 0)
            moat_session_stdin_free(&u.in);
        break;
    case MOAT_MSG_SESSION_STDIN_CLOSE:
        return moat_decode_session_stdin_close(p, n, why);
    case MOAT_MSG_SESSION_SIGNAL:
        rc = moat_decode_session_signal(p, n, &u.signal, why), size = sizeof(u.signal);
        break;
    case MOAT_MSG_SESSION_OUTPUT:
        rc = moat_decode_session_output(p, n, &u.out, why), size = sizeof(u.out);
        if (rc == 0)
            moat_session_output_free(&u.out);
        break;
    case MOAT_MSG_SESSION_STAGE:
        rc = moat_decode_session_stage(p, n, &u.stage, why), size = sizeof(u.stage);
        break;
    case MOAT_MSG_SESSION_EXIT:
        rc = moat_decode_session_exit(p, n, &u.exit, why), size = sizeof(u.exit);
        if (rc == 0)
            moat_session_exit_free(&u.exit);
        break;
    case MOAT_MSG_SESSION_CREDIT:
        rc = moat_decode_session_credit(p, n, &u.credit, why), size = sizeof(u.credit);
        break;
    default:
        fail_msg("not a session type: %u", type);
        return -1;
    }
    if (rc != 0)
        assert_true(is_zero(&u, size));
    return rc;
}

static void reject_session(uint8_t type, const struct raw *r, const char *reason)
{
    const char *why = NULL;
    assert_int_equal(session_decode(type, r->b, r->n, &why), -1);
    assert_non_null(why);
    assert_string_equal(why, reason);
}

static void accept_session(uint8_t type, const struct raw *r)
{
    const char *why = NULL;
    assert_int_equal(session_decode(type, r->b, r->n, &why), 0);
}

/* A stage result as SESSION_EXIT carries it: empty output, the given status. */
static void raw_exit_result(struct raw *r, uint8_t status)
{
    size_t at = raw_nest_begin(r, EX_RESULT);
    raw_uint(r, ST_STATUS, status, 1);
    raw_nest_end(r, at);
}

static void raw_min_exit(struct raw *r)
{
    raw_uint(r, EX_STAGE, MOAT_STAGE_RUN, 1);
    raw_uint(r, EX_OFFSET, 5, 8);
    raw_exit_result(r, MOAT_STATUS_OK);
}

static void raw_min_output(struct raw *r)
{
    raw_uint(r, OUT_STREAM, MOAT_STREAM_STDOUT, 1);
    raw_uint(r, OUT_OFFSET, 7, 8);
    raw_str(r, OUT_DATA, "hi\n");
}

static void test_session_roundtrips(void **state)
{
    struct moat_buf out = {0};
    const char *why = NULL;
    size_t plen;
    const uint8_t *p;

    /* stdin: arbitrary bytes, NULs and invalid UTF-8 included */
    const uint8_t in[] = {'a', 'd', 'a', '\n', 0, 0xff, 0xc0};
    struct moat_session_stdin si;
    assert_int_equal(moat_encode_session_stdin(&out, 11, in, sizeof(in), &why), 0);
    p = frame_payload(&out, 0, MOAT_MSG_SESSION_STDIN, 11, &plen);
    assert_int_equal(moat_decode_session_stdin(p, plen, &si, &why), 0);
    assert_int_equal(si.len, sizeof(in));
    assert_memory_equal(si.data, in, sizeof(in));
    moat_session_stdin_free(&si);
    assert_true(is_zero(&si, sizeof(si)));
    moat_buf_free(&out);

    /* stdin close: a bare header */
    assert_int_equal(moat_encode_session_stdin_close(&out, 11, &why), 0);
    assert_int_equal(out.len, MOAT_FRAME_HEADER_SIZE);
    p = frame_payload(&out, 0, MOAT_MSG_SESSION_STDIN_CLOSE, 11, &plen);
    assert_int_equal(moat_decode_session_stdin_close(p, plen, &why), 0);
    moat_buf_free(&out);

    /* every allowed signal */
    const int32_t sigs[] = {MOAT_SIG_HUP, MOAT_SIG_INT, MOAT_SIG_QUIT, MOAT_SIG_KILL, MOAT_SIG_USR1, MOAT_SIG_USR2, MOAT_SIG_TERM};
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
        int32_t sig = -1;
        assert_int_equal(moat_encode_session_signal(&out, 12, sigs[i], &why), 0);
        p = frame_payload(&out, 0, MOAT_MSG_SESSION_SIGNAL, 12, &plen);
        assert_int_equal(moat_decode_session_signal(p, plen, &sig, &why), 0);
        assert_int_equal(sig, sigs[i]);
        moat_buf_free(&out);
    }

    /* output on both streams, the largest offset */
    for (uint8_t stream = MOAT_STREAM_STDOUT; stream <= MOAT_STREAM_STDERR; stream++) {
        uint8_t data[] = {'h', 'e', 'l', 'l', 'o', 0, 0xfe};
        struct moat_session_output o = {stream, UINT64_MAX, data, sizeof(data)}, d;
        assert_int_equal(moat_encode_session_output(&out, 13, &o, &why), 0);
        p = frame_payload(&out, 0, MOAT_MSG_SESSION_OUTPUT, 13, &plen);
        assert_int_equal(moat_decode_session_output(p, plen, &d, &why), 0);
        assert_int_equal(d.stream, stream);
        assert_true(d.offset_ms == UINT64_MAX);
        assert_int_equal(d.len, sizeof(data));
        assert_memory_equal(d.data, data, sizeof(data));
        moat_session_output_free(&d);
        moat_buf_free(&out);
    }

    /* stage starts */
    for (uint8_t stage = MOAT_STAGE_COMPILE; stage <= MOAT_STAGE_RUN; stage++) {
        struct moat_session_stage s = {stage, 1000u * stage}, d;
        assert_int_equal(moat_encode_session_stage(&out, 14, &s, &why), 0);
        p = frame_payload(&out, 0, MOAT_MSG_SESSION_STAGE, 14, &plen);
        assert_int_equal(moat_decode_session_stage(p, plen, &d, &why), 0);
        assert_int_equal(d.stage, stage);
        assert_true(d.offset_ms == 1000u * stage);
        moat_buf_free(&out);
    }

    /* exits: a compile that failed, a run killed by each clock, a signal */
    char msg[] = "idle for 30 s";
    struct moat_session_exit exits[] = {
        {MOAT_STAGE_COMPILE,
         250,
         0,
         {.present = 1,
          .has_code = 1,
          .code = 1,
          .status = MOAT_STATUS_RE,
          .cpu_ms = 200,
          .wall_ms = 250,
          .memory_bytes = 1 << 20}},
        {MOAT_STAGE_RUN,
         30000,
         MOAT_CLOCK_IDLE,
         {.present = 1, .has_signal = 1, .signal = 9, .status = MOAT_STATUS_TO, .message = msg, .wall_ms = 29750}},
        {MOAT_STAGE_RUN, 60000, MOAT_CLOCK_WALL, {.present = 1, .has_signal = 1, .signal = 9, .status = MOAT_STATUS_TO}},
        {MOAT_STAGE_RUN, 9, MOAT_CLOCK_CPU, {.present = 1, .has_signal = 1, .signal = 9, .status = MOAT_STATUS_TO, .cpu_ms = 9}},
        {MOAT_STAGE_RUN, 40, 0, {.present = 1, .has_signal = 1, .signal = 2, .status = MOAT_STATUS_SG}},
    };
    for (size_t i = 0; i < sizeof(exits) / sizeof(exits[0]); i++) {
        struct moat_session_exit d;
        assert_int_equal(moat_encode_session_exit(&out, 15, &exits[i], &why), 0);
        assert_true(out.len - MOAT_FRAME_HEADER_SIZE <= MOAT_SESSION_CTRL_FRAME_MAX);
        p = frame_payload(&out, 0, MOAT_MSG_SESSION_EXIT, 15, &plen);
        assert_int_equal(moat_decode_session_exit(p, plen, &d, &why), 0);
        assert_int_equal(d.stage, exits[i].stage);
        assert_true(d.offset_ms == exits[i].offset_ms);
        assert_int_equal(d.clock, exits[i].clock);
        assert_stage_equal(&exits[i].result, &d.result);
        moat_session_exit_free(&d);
        assert_true(is_zero(&d, sizeof(d)));
        moat_buf_free(&out);
    }

    /* credit: the smallest and the whole window */
    const uint32_t credits[] = {1, MOAT_SESSION_CHUNK_MAX, MOAT_SESSION_WINDOW};
    for (size_t i = 0; i < sizeof(credits) / sizeof(credits[0]); i++) {
        uint32_t c = 0;
        assert_int_equal(moat_encode_session_credit(&out, 16, credits[i], &why), 0);
        p = frame_payload(&out, 0, MOAT_MSG_SESSION_CREDIT, 16, &plen);
        assert_int_equal(moat_decode_session_credit(p, plen, &c, &why), 0);
        assert_int_equal(c, credits[i]);
        moat_buf_free(&out);
    }
}

/* A chunk of exactly the cap is accepted by encoder, header and decoder; one
 * byte more is refused by each. */
static void test_session_chunk_caps(void **state)
{
    struct moat_buf out = {0};
    const char *why = NULL;
    size_t plen;
    uint8_t *big = malloc(MOAT_SESSION_CHUNK_MAX + 1);
    assert_non_null(big);
    memset(big, 'x', MOAT_SESSION_CHUNK_MAX + 1);

    struct moat_session_stdin si;
    assert_int_equal(moat_encode_session_stdin(&out, 1, big, MOAT_SESSION_CHUNK_MAX, &why), 0);
    const uint8_t *p = frame_payload(&out, 0, MOAT_MSG_SESSION_STDIN, 1, &plen);
    assert_int_equal(moat_decode_session_stdin(p, plen, &si, &why), 0);
    assert_int_equal(si.len, MOAT_SESSION_CHUNK_MAX);
    moat_session_stdin_free(&si);
    moat_buf_free(&out);

    struct moat_session_output o = {MOAT_STREAM_STDERR, UINT64_MAX, big, MOAT_SESSION_CHUNK_MAX}, d;
    assert_int_equal(moat_encode_session_output(&out, 2, &o, &why), 0);
    p = frame_payload(&out, 0, MOAT_MSG_SESSION_OUTPUT, 2, &plen);
    assert_true(plen <= MOAT_SESSION_DATA_FRAME_MAX);
    assert_int_equal(moat_decode_session_output(p, plen, &d, &why), 0);
    assert_int_equal(d.len, MOAT_SESSION_CHUNK_MAX);
    moat_session_output_free(&d);
    moat_buf_free(&out);

    /* one past: the encoders refuse and write nothing */
    assert_int_equal(moat_encode_session_stdin(&out, 1, big, MOAT_SESSION_CHUNK_MAX + 1, &why), -1);
    assert_string_equal(why, "data chunk over the cap");
    o.len = MOAT_SESSION_CHUNK_MAX + 1;
    assert_int_equal(moat_encode_session_output(&out, 2, &o, &why), -1);
    assert_string_equal(why, "data chunk over the cap");
    assert_int_equal(out.len, 0);

    /* and the decoders refuse a hand-made one */
    struct raw r = {0};
    raw_tlv(&r, SIN_DATA, big, MOAT_SESSION_CHUNK_MAX + 1);
    reject_session(MOAT_MSG_SESSION_STDIN, &r, "data chunk over the cap");
    raw_free(&r);
    raw_uint(&r, OUT_STREAM, MOAT_STREAM_STDOUT, 1);
    raw_uint(&r, OUT_OFFSET, 0, 8);
    raw_tlv(&r, OUT_DATA, big, MOAT_SESSION_CHUNK_MAX + 1);
    reject_session(MOAT_MSG_SESSION_OUTPUT, &r, "data chunk over the cap");
    raw_free(&r);
    free(big);
    moat_buf_free(&out);
}

/* Each session type's frame cap: the header at the cap parses, one past is
 * refused before any payload is read. */
static void test_session_frame_caps(void **state)
{
    static const struct {
        uint8_t type;
        uint32_t cap;
    } caps[] = {
        {MOAT_MSG_SESSION_STDIN, MOAT_SESSION_DATA_FRAME_MAX},  {MOAT_MSG_SESSION_STDIN_CLOSE, 0},
        {MOAT_MSG_SESSION_SIGNAL, MOAT_SESSION_CTRL_FRAME_MAX}, {MOAT_MSG_SESSION_OUTPUT, MOAT_SESSION_DATA_FRAME_MAX},
        {MOAT_MSG_SESSION_STAGE, MOAT_SESSION_CTRL_FRAME_MAX},  {MOAT_MSG_SESSION_EXIT, MOAT_SESSION_CTRL_FRAME_MAX},
        {MOAT_MSG_SESSION_CREDIT, MOAT_SESSION_CTRL_FRAME_MAX}, {MOAT_MSG_SESSION_OPEN, MOAT_FRAME_MAX_PAYLOAD},
        {MOAT_MSG_SESSION_READY, MOAT_SESSION_CTRL_FRAME_MAX},
    };
    assert_int_equal(sizeof(caps) / sizeof(caps[0]), MOAT_MSG_MAX - MOAT_MSG_RUNTIMES);
    for (size_t i = 0; i < sizeof(caps) / sizeof(caps[0]); i++) {
        struct raw r = {0};
        struct moat_frame_header h;
        const char *why = NULL;
        raw_header(&r, MOAT_PROTO_VERSION, caps[i].type, 0, caps[i].cap, 77);
        assert_int_equal(moat_frame_parse_header(r.b, r.n, &h, &why), 0);
        assert_int_equal(h.type, caps[i].type);
        assert_int_equal(h.length, caps[i].cap);
        raw_free(&r);
        raw_header(&r, MOAT_PROTO_VERSION, caps[i].type, 0, caps[i].cap + 1, 77);
        reject_header(&r, "frame exceeds the size cap");
        raw_free(&r);
        if (caps[i].cap < MOAT_FRAME_MAX_PAYLOAD) {
            raw_header(&r, MOAT_PROTO_VERSION, caps[i].type, 0, MOAT_FRAME_MAX_PAYLOAD, 77);
            reject_header(&r, "frame exceeds the size cap");
            raw_free(&r);
        }
    }
    /* a full chunk with its fields fits its frame cap */
    assert_true(6 + MOAT_SESSION_CHUNK_MAX <= MOAT_SESSION_DATA_FRAME_MAX);
    assert_true(7 + 14 + 6 + MOAT_SESSION_CHUNK_MAX <= MOAT_SESSION_DATA_FRAME_MAX);
}

/* The refusal classes, message by message: unknown tag, repeated tag,
 * missing field, wrong width, value out of range, trailing bytes. */
static void test_session_decode_refusals(void **state)
{
    struct raw r = {0};
    static const uint8_t session_types[] = {MOAT_MSG_SESSION_STDIN, MOAT_MSG_SESSION_SIGNAL, MOAT_MSG_SESSION_OUTPUT,
                                            MOAT_MSG_SESSION_STAGE, MOAT_MSG_SESSION_EXIT,   MOAT_MSG_SESSION_CREDIT};
    static const char *const unknown[] = {"unknown field in session stdin",  "unknown field in session signal",
                                          "unknown field in session output", "unknown field in session stage",
                                          "unknown field in session exit",   "unknown field in session credit"};
    static const char *const missing[] = {"session stdin needs data",
                                          "session signal needs a signal",
                                          "session output needs stream, offset and data",
                                          "session stage needs stage and offset",
                                          "session exit needs stage, offset and result",
                                          "session credit needs bytes"};
    for (size_t i = 0; i < sizeof(session_types); i++) {
        uint8_t t = session_types[i];
        /* empty payload: the required fields are missing */
        reject_session(t, &r, missing[i]);
        raw_str(&r, 9, "x");
        reject_session(t, &r, unknown[i]);
        raw_free(&r);
        raw_str(&r, 0, "x");
        reject_session(t, &r, unknown[i]);
        raw_free(&r);
        raw_str(&r, 40, "x");
        reject_session(t, &r, "unknown field");
        raw_free(&r);
        /* truncated TLV header, and a length past the end */
        raw_bytes(&r, "\x00\x01\x00\x00\x00", 5);
        reject_session(t, &r, "truncated field header");
        raw_free(&r);
        raw_tlv_hdr(&r, 1, 9);
        raw_bytes(&r, "\x01", 1);
        reject_session(t, &r, "field length exceeds message");
        raw_free(&r);
        raw_tlv_hdr(&r, 1, UINT32_MAX);
        reject_session(t, &r, "field length exceeds message");
        raw_free(&r);
    }

    /* stdin */
    raw_str(&r, SIN_DATA, "a");
    accept_session(MOAT_MSG_SESSION_STDIN, &r);
    raw_str(&r, SIN_DATA, "b");
    reject_session(MOAT_MSG_SESSION_STDIN, &r, "duplicate field");
    raw_free(&r);
    raw_str(&r, SIN_DATA, "a");
    raw_bytes(&r, "\x00", 1);
    reject_session(MOAT_MSG_SESSION_STDIN, &r, "truncated field header");
    raw_free(&r);
    raw_str(&r, SIN_DATA, "");
    reject_session(MOAT_MSG_SESSION_STDIN, &r, "empty data chunk");
    raw_free(&r);

    /* stdin close: empty, and refused with any byte at all */
    accept_session(MOAT_MSG_SESSION_STDIN_CLOSE, &r);
    raw_bytes(&r, "\x00", 1);
    reject_session(MOAT_MSG_SESSION_STDIN_CLOSE, &r, "session stdin close has no fields");
    raw_free(&r);

    /* signal: width, allow-list */
    raw_uint(&r, SIG_SIGNAL, MOAT_SIG_INT, 4);
    accept_session(MOAT_MSG_SESSION_SIGNAL, &r);
    raw_uint(&r, SIG_SIGNAL, MOAT_SIG_INT, 4);
    reject_session(MOAT_MSG_SESSION_SIGNAL, &r, "duplicate field");
    raw_free(&r);
    const int widths[] = {0, 1, 2, 8};
    for (size_t i = 0; i < sizeof(widths) / sizeof(widths[0]); i++) {
        raw_uint(&r, SIG_SIGNAL, MOAT_SIG_INT, widths[i]);
        reject_session(MOAT_MSG_SESSION_SIGNAL, &r, "integer field has the wrong width");
        raw_free(&r);
    }
    const uint32_t refused[] = {0, 4, 8, 11, 13, 14, 17, 18, 19, 20, 64, 65, 0x80000002u, UINT32_MAX};
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        raw_uint(&r, SIG_SIGNAL, refused[i], 4);
        reject_session(MOAT_MSG_SESSION_SIGNAL, &r, "signal not allowed");
        raw_free(&r);
    }

    /* output */
    raw_min_output(&r);
    accept_session(MOAT_MSG_SESSION_OUTPUT, &r);
    raw_uint(&r, OUT_OFFSET, 8, 8);
    reject_session(MOAT_MSG_SESSION_OUTPUT, &r, "duplicate field");
    raw_free(&r);
    raw_min_output(&r);
    raw_bytes(&r, "\x00\x03\x00", 3);
    reject_session(MOAT_MSG_SESSION_OUTPUT, &r, "truncated field header");
    raw_free(&r);
    const uint8_t streams[] = {0, 3, 255};
    for (size_t i = 0; i < sizeof(streams); i++) {
        raw_uint(&r, OUT_STREAM, streams[i], 1);
        raw_uint(&r, OUT_OFFSET, 0, 8);
        raw_str(&r, OUT_DATA, "x");
        reject_session(MOAT_MSG_SESSION_OUTPUT, &r, "unknown stream");
        raw_free(&r);
    }
    raw_uint(&r, OUT_STREAM, MOAT_STREAM_STDOUT, 2);
    reject_session(MOAT_MSG_SESSION_OUTPUT, &r, "integer field has the wrong width");
    raw_free(&r);
    raw_uint(&r, OUT_STREAM, MOAT_STREAM_STDOUT, 1);
    raw_uint(&r, OUT_OFFSET, 0, 4);
    reject_session(MOAT_MSG_SESSION_OUTPUT, &r, "integer field has the wrong width");
    raw_free(&r);
    raw_uint(&r, OUT_STREAM, MOAT_STREAM_STDOUT, 1);
    raw_uint(&r, OUT_OFFSET, 0, 8);
    raw_str(&r, OUT_DATA, "");
    reject_session(MOAT_MSG_SESSION_OUTPUT, &r, "empty data chunk");
    raw_free(&r);
    /* each of the three missing */
    raw_uint(&r, OUT_OFFSET, 0, 8);
    raw_str(&r, OUT_DATA, "x");
    reject_session(MOAT_MSG_SESSION_OUTPUT, &r, "session output needs stream, offset and data");
    raw_free(&r);
    raw_uint(&r, OUT_STREAM, MOAT_STREAM_STDOUT, 1);
    raw_str(&r, OUT_DATA, "x");
    reject_session(MOAT_MSG_SESSION_OUTPUT, &r, "session output needs stream, offset and data");
    raw_free(&r);
    raw_uint(&r, OUT_STREAM, MOAT_STREAM_STDOUT, 1);
    raw_uint(&r, OUT_OFFSET, 0, 8);
    reject_session(MOAT_MSG_SESSION_OUTPUT, &r, "session output needs stream, offset and data");
    raw_free(&r);

    /* stage */
    raw_uint(&r, SST_STAGE, MOAT_STAGE_RUN, 1);
    raw_uint(&r, SST_OFFSET, 0, 8);
    accept_session(MOAT_MSG_SESSION_STAGE, &r);
    raw_uint(&r, SST_STAGE, MOAT_STAGE_RUN, 1);
    reject_session(MOAT_MSG_SESSION_STAGE, &r, "duplicate field");
    raw_free(&r);
    raw_uint(&r, SST_STAGE, 3, 1);
    reject_session(MOAT_MSG_SESSION_STAGE, &r, "unknown stage");
    raw_free(&r);
    raw_uint(&r, SST_STAGE, 0, 1);
    reject_session(MOAT_MSG_SESSION_STAGE, &r, "unknown stage");
    raw_free(&r);
    raw_uint(&r, SST_STAGE, MOAT_STAGE_RUN, 1);
    reject_session(MOAT_MSG_SESSION_STAGE, &r, "session stage needs stage and offset");
    raw_free(&r);
    raw_uint(&r, SST_OFFSET, 0, 8);
    reject_session(MOAT_MSG_SESSION_STAGE, &r, "session stage needs stage and offset");
    raw_uint(&r, SST_STAGE, MOAT_STAGE_COMPILE, 8);
    reject_session(MOAT_MSG_SESSION_STAGE, &r, "integer field has the wrong width");
    raw_free(&r);

    /* exit */
    raw_min_exit(&r);
    accept_session(MOAT_MSG_SESSION_EXIT, &r);
    raw_uint(&r, EX_STAGE, MOAT_STAGE_RUN, 1);
    reject_session(MOAT_MSG_SESSION_EXIT, &r, "duplicate field");
    raw_free(&r);
    raw_min_exit(&r);
    raw_exit_result(&r, MOAT_STATUS_OK);
    reject_session(MOAT_MSG_SESSION_EXIT, &r, "duplicate field");
    raw_free(&r);
    raw_min_exit(&r);
    raw_bytes(&r, "\x00\x04", 2);
    reject_session(MOAT_MSG_SESSION_EXIT, &r, "truncated field header");
    raw_free(&r);
    raw_uint(&r, EX_STAGE, 7, 1);
    reject_session(MOAT_MSG_SESSION_EXIT, &r, "unknown stage");
    raw_free(&r);
    raw_uint(&r, EX_STAGE, MOAT_STAGE_RUN, 1);
    raw_uint(&r, EX_OFFSET, 5, 8);
    reject_session(MOAT_MSG_SESSION_EXIT, &r, "session exit needs stage, offset and result");
    raw_free(&r);
    raw_uint(&r, EX_STAGE, MOAT_STAGE_RUN, 1);
    raw_exit_result(&r, MOAT_STATUS_OK);
    reject_session(MOAT_MSG_SESSION_EXIT, &r, "session exit needs stage, offset and result");
    raw_free(&r);
    raw_uint(&r, EX_OFFSET, 5, 2);
    reject_session(MOAT_MSG_SESSION_EXIT, &r, "integer field has the wrong width");
    raw_free(&r);
    /* the result follows the stage result's rules */
    raw_uint(&r, EX_STAGE, MOAT_STAGE_RUN, 1);
    raw_uint(&r, EX_OFFSET, 5, 8);
    size_t at = raw_nest_begin(&r, EX_RESULT);
    raw_uint(&r, ST_CODE, 0, 4);
    raw_nest_end(&r, at);
    reject_session(MOAT_MSG_SESSION_EXIT, &r, "stage result needs a status");
    raw_free(&r);
    raw_uint(&r, EX_STAGE, MOAT_STAGE_RUN, 1);
    raw_uint(&r, EX_OFFSET, 5, 8);
    raw_exit_result(&r, MOAT_STATUS_MAX + 1);
    reject_session(MOAT_MSG_SESSION_EXIT, &r, "unknown status");
    raw_free(&r);
    /* ... without output: that went as SESSION_OUTPUT */
    raw_uint(&r, EX_STAGE, MOAT_STAGE_RUN, 1);
    raw_uint(&r, EX_OFFSET, 5, 8);
    at = raw_nest_begin(&r, EX_RESULT);
    raw_uint(&r, ST_STATUS, MOAT_STATUS_OK, 1);
    raw_str(&r, ST_STDOUT, "x");
    raw_nest_end(&r, at);
    reject_session(MOAT_MSG_SESSION_EXIT, &r, "session exit carries no output");
    raw_free(&r);
    /* the clock: exactly with a TO */
    for (uint8_t clock = 1; clock <= MOAT_CLOCK_MAX; clock++) {
        raw_uint(&r, EX_STAGE, MOAT_STAGE_RUN, 1);
        raw_uint(&r, EX_OFFSET, 5, 8);
        raw_uint(&r, EX_CLOCK, clock, 1);
        raw_exit_result(&r, MOAT_STATUS_TO);
        accept_session(MOAT_MSG_SESSION_EXIT, &r);
        raw_free(&r);
    }
    raw_uint(&r, EX_STAGE, MOAT_STAGE_RUN, 1);
    raw_uint(&r, EX_OFFSET, 5, 8);
    raw_exit_result(&r, MOAT_STATUS_TO);
    reject_session(MOAT_MSG_SESSION_EXIT, &r, "clock must name the clock of a TO, and only of a TO");
    raw_free(&r);
    raw_min_exit(&r);
    raw_uint(&r, EX_CLOCK, MOAT_CLOCK_WALL, 1);
    reject_session(MOAT_MSG_SESSION_EXIT, &r, "clock must name the clock of a TO, and only of a TO");
    raw_free(&r);
    const uint8_t clocks[] = {0, MOAT_CLOCK_MAX + 1};
    for (size_t i = 0; i < sizeof(clocks); i++) {
        raw_uint(&r, EX_CLOCK, clocks[i], 1);
        reject_session(MOAT_MSG_SESSION_EXIT, &r, "unknown clock");
        raw_free(&r);
    }

    /* credit */
    raw_uint(&r, CR_BYTES, MOAT_SESSION_WINDOW, 4);
    accept_session(MOAT_MSG_SESSION_CREDIT, &r);
    raw_uint(&r, CR_BYTES, 1, 4);
    reject_session(MOAT_MSG_SESSION_CREDIT, &r, "duplicate field");
    raw_free(&r);
    raw_uint(&r, CR_BYTES, 1, 8);
    reject_session(MOAT_MSG_SESSION_CREDIT, &r, "integer field has the wrong width");
    raw_free(&r);
    const uint32_t credits[] = {0, MOAT_SESSION_WINDOW + 1, UINT32_MAX};
    for (size_t i = 0; i < sizeof(credits) / sizeof(credits[0]); i++) {
        raw_uint(&r, CR_BYTES, credits[i], 4);
        reject_session(MOAT_MSG_SESSION_CREDIT, &r, "credit out of range");
        raw_free(&r);
    }
}

static void test_session_encoder_refusals(void **state)
{
    struct moat_buf out = {0};
    const char *why = NULL;
    int rc;

    assert_int_equal(moat_encode_session_stdin_close(&out, 1, &why), 0);
    size_t before_len = out.len;
    uint8_t before[MOAT_FRAME_HEADER_SIZE];
    memcpy(before, out.data, before_len);

    uint8_t x[] = "x";
    why = NULL;
    rc = moat_encode_session_stdin(&out, 2, x, 0, &why);
    refused_unchanged(&out, before, before_len, rc, why, "empty data chunk");

    const int32_t sigs[] = {0, -2, 4, 11, 19, 64, 65, INT32_MAX, INT32_MIN};
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
        assert_false(moat_session_signal_allowed(sigs[i]));
        why = NULL;
        rc = moat_encode_session_signal(&out, 3, sigs[i], &why);
        refused_unchanged(&out, before, before_len, rc, why, "signal not allowed");
    }

    struct moat_session_output o = {3, 0, x, 1};
    why = NULL;
    rc = moat_encode_session_output(&out, 4, &o, &why);
    refused_unchanged(&out, before, before_len, rc, why, "bad stream");
    o.stream = 0;
    why = NULL;
    rc = moat_encode_session_output(&out, 4, &o, &why);
    refused_unchanged(&out, before, before_len, rc, why, "bad stream");
    o.stream = MOAT_STREAM_STDOUT;
    o.len = 0;
    why = NULL;
    rc = moat_encode_session_output(&out, 4, &o, &why);
    refused_unchanged(&out, before, before_len, rc, why, "empty data chunk");

    struct moat_session_stage s = {0, 0};
    why = NULL;
    rc = moat_encode_session_stage(&out, 5, &s, &why);
    refused_unchanged(&out, before, before_len, rc, why, "bad stage");
    s.stage = 3;
    why = NULL;
    rc = moat_encode_session_stage(&out, 5, &s, &why);
    refused_unchanged(&out, before, before_len, rc, why, "bad stage");

    struct moat_session_exit e = {0, 0, 0, {.present = 1, .status = MOAT_STATUS_OK}};
    why = NULL;
    rc = moat_encode_session_exit(&out, 6, &e, &why);
    refused_unchanged(&out, before, before_len, rc, why, "bad stage");
    e.stage = MOAT_STAGE_RUN;
    e.result.stdout_data = x;
    e.result.stdout_len = 1;
    why = NULL;
    rc = moat_encode_session_exit(&out, 6, &e, &why);
    refused_unchanged(&out, before, before_len, rc, why, "session exit carries no output");
    e.result.stdout_len = 0;
    e.clock = MOAT_CLOCK_CPU; /* a clock without a TO */
    why = NULL;
    rc = moat_encode_session_exit(&out, 6, &e, &why);
    refused_unchanged(&out, before, before_len, rc, why, "clock must name the clock of a TO, and only of a TO");
    e.result.status = MOAT_STATUS_TO;
    e.clock = 0; /* a TO without a clock */
    why = NULL;
    rc = moat_encode_session_exit(&out, 6, &e, &why);
    refused_unchanged(&out, before, before_len, rc, why, "clock must name the clock of a TO, and only of a TO");
    e.clock = MOAT_CLOCK_MAX + 1;
    why = NULL;
    rc = moat_encode_session_exit(&out, 6, &e, &why);
    refused_unchanged(&out, before, before_len, rc, why, "clock must name the clock of a TO, and only of a TO");
    e.clock = 0;
    e.result.status = MOAT_STATUS_MAX + 1;
    why = NULL;
    rc = moat_encode_session_exit(&out, 6, &e, &why);
    refused_unchanged(&out, before, before_len, rc, why, "bad status");

    const uint32_t credits[] = {0, MOAT_SESSION_WINDOW + 1, UINT32_MAX};
    for (size_t i = 0; i < sizeof(credits) / sizeof(credits[0]); i++) {
        why = NULL;
        rc = moat_encode_session_credit(&out, 7, credits[i], &why);
        refused_unchanged(&out, before, before_len, rc, why, "credit out of range");
    }
    moat_buf_free(&out);
}

/* ==== session open and ready ============================================= */

/* The five ceilings SESSION_OPEN requires, each a u64. */
static void raw_ceilings(struct raw *r, int omit_tag)
{
    for (uint16_t tag = SO_WALL; tag <= SO_OUTPUT; tag++)
        if (tag != omit_tag)
            raw_uint(r, tag, 1000u * tag, 8);
}

static void reject_open(const struct raw *r, const char *reason)
{
    struct moat_session_open q;
    const char *why = NULL;
    assert_int_equal(moat_decode_session_open(r->b, r->n, &q, &why), -1);
    assert_non_null(why);
    assert_string_equal(why, reason);
    assert_true(is_zero(&q, sizeof(q)));
}

static void reject_ready(const struct raw *r, const char *reason)
{
    struct moat_session_ready q;
    const char *why = NULL;
    assert_int_equal(moat_decode_session_ready(r->b, r->n, &q, &why), -1);
    assert_non_null(why);
    assert_string_equal(why, reason);
    assert_true(is_zero(&q, sizeof(q)));
}

static void test_session_open_roundtrip(void **state)
{
    char n0[] = "main.py", n1[] = "data.bin", lang[] = "python", ver[] = "3.x", a0[] = "--flag", a1[] = "";
    uint8_t c0[] = "print(input())\n", c1[] = {0, 0xff, 0xc0};
    uint8_t in[] = {'a', 'd', 'a', '\n', 0};
    struct moat_file files[] = {{n0, c0, sizeof(c0) - 1}, {n1, c1, sizeof(c1)}};
    char *args[] = {a0, a1};
    struct moat_session_open o = {
        .req = {.language = lang,
                .version = ver,
                .files = files,
                .nfiles = 2,
                .args = args,
                .nargs = 2,
                .stdin_data = in,
                .stdin_len = sizeof(in),
                .run_timeout_ms = 60000,
                .compile_timeout_ms = -1,
                .run_memory_bytes = 1 << 28,
                .compile_memory_bytes = -1,
                .run_cpu_ms = 1500,
                .compile_cpu_ms = -1},
        .wall_ms = 900000,
        .idle_ms = 0,
        .cpu_ms = UINT64_MAX,
        .stdin_bytes = 1 << 20,
        .output_bytes = 1,
    };
    struct moat_buf out = {0};
    const char *why = NULL;
    size_t plen;

    assert_int_equal(moat_encode_session_open(&out, 41, &o, &why), 0);
    const uint8_t *p = frame_payload(&out, 0, MOAT_MSG_SESSION_OPEN, 41, &plen);
    struct moat_session_open d;
    assert_int_equal(moat_decode_session_open(p, plen, &d, &why), 0);
    assert_string_equal(d.req.language, "python");
    assert_string_equal(d.req.version, "3.x");
    assert_int_equal(d.req.nfiles, 2);
    assert_string_equal(d.req.files[1].name, "data.bin");
    assert_int_equal(d.req.files[1].content_len, sizeof(c1));
    assert_memory_equal(d.req.files[1].content, c1, sizeof(c1));
    assert_int_equal(d.req.nargs, 2);
    assert_string_equal(d.req.args[1], "");
    assert_int_equal(d.req.stdin_len, sizeof(in));
    assert_memory_equal(d.req.stdin_data, in, sizeof(in));
    assert_true(d.req.run_timeout_ms == 60000);
    assert_true(d.req.compile_timeout_ms == -1);
    assert_true(d.req.run_memory_bytes == 1 << 28);
    assert_true(d.req.compile_memory_bytes == -1);
    assert_true(d.req.run_cpu_ms == 1500);
    assert_true(d.req.compile_cpu_ms == -1);
    assert_true(d.wall_ms == 900000);
    assert_true(d.idle_ms == 0);
    assert_true(d.cpu_ms == UINT64_MAX);
    assert_true(d.stdin_bytes == 1 << 20);
    assert_true(d.output_bytes == 1);
    moat_session_open_free(&d);
    assert_true(is_zero(&d, sizeof(d)));

    /* the exec request's fields are encoded as EXEC_REQUEST encodes them, then the ceilings */
    struct moat_buf req = {0};
    assert_int_equal(moat_encode_exec_request(&req, 41, &o.req, &why), 0);
    assert_int_equal(out.len, req.len + 5 * 14);
    assert_memory_equal(out.data + MOAT_FRAME_HEADER_SIZE, req.data + MOAT_FRAME_HEADER_SIZE, req.len - MOAT_FRAME_HEADER_SIZE);
    moat_buf_free(&req);
    moat_buf_free(&out);
}

static void test_session_open_refusals(void **state)
{
    struct raw r = {0};
    struct moat_session_open d;
    const char *why = NULL;

    /* the smallest valid one */
    raw_min_request(&r);
    raw_ceilings(&r, 0);
    assert_int_equal(moat_decode_session_open(r.b, r.n, &d, &why), 0);
    assert_true(d.req.run_timeout_ms == -1 && d.req.stdin_data == NULL);
    assert_true(d.wall_ms == 20000 && d.output_bytes == 24000);
    moat_session_open_free(&d);
    raw_free(&r);

    /* every ceiling is required */
    for (uint16_t tag = SO_WALL; tag <= SO_OUTPUT; tag++) {
        raw_min_request(&r);
        raw_ceilings(&r, tag);
        reject_open(&r, "session open needs wall, idle, cpu, stdin and output limits");
        raw_free(&r);
    }
    /* the request's own required fields */
    reject_open(&r, "session open needs language and version");
    raw_str(&r, REQ_LANGUAGE, "python");
    raw_ceilings(&r, 0);
    raw_file(&r, "a.py", "");
    reject_open(&r, "session open needs language and version");
    raw_free(&r);
    raw_str(&r, REQ_LANGUAGE, "python");
    raw_str(&r, REQ_VERSION, "3");
    raw_ceilings(&r, 0);
    reject_open(&r, "session open needs at least one file");
    raw_free(&r);
    /* unknown tags: between the request's and the ceilings', past them, and past the bitmap */
    const uint16_t unknown[] = {0, 12, 19, 25, 31};
    for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
        raw_min_request(&r);
        raw_ceilings(&r, 0);
        raw_uint(&r, unknown[i], 1, 8);
        reject_open(&r, "unknown field in session open");
        raw_free(&r);
    }
    raw_min_request(&r);
    raw_ceilings(&r, 0);
    raw_uint(&r, 0x1234, 1, 8);
    reject_open(&r, "unknown field");
    raw_free(&r);
    /* a repeated ceiling, a repeated request field; files and args still repeat */
    raw_min_request(&r);
    raw_ceilings(&r, 0);
    raw_uint(&r, SO_IDLE, 1, 8);
    reject_open(&r, "duplicate field");
    raw_free(&r);
    raw_min_request(&r);
    raw_ceilings(&r, 0);
    raw_str(&r, REQ_VERSION, "3");
    reject_open(&r, "duplicate field");
    raw_free(&r);
    raw_min_request(&r);
    raw_file(&r, "b.py", "");
    raw_str(&r, REQ_ARG, "x");
    raw_str(&r, REQ_ARG, "x");
    raw_ceilings(&r, 0);
    assert_int_equal(moat_decode_session_open(r.b, r.n, &d, &why), 0);
    assert_int_equal(d.req.nfiles, 2);
    assert_int_equal(d.req.nargs, 2);
    moat_session_open_free(&d);
    raw_free(&r);
    /* widths: a ceiling is exactly 8 bytes */
    const size_t widths[] = {0, 1, 4, 7, 9, 16};
    const uint8_t zeros[16] = {0};
    for (size_t i = 0; i < sizeof(widths) / sizeof(widths[0]); i++) {
        raw_min_request(&r);
        raw_ceilings(&r, SO_CPU);
        raw_tlv(&r, SO_CPU, zeros, widths[i]);
        reject_open(&r, "integer field has the wrong width");
        raw_free(&r);
    }
    /* the request's rules hold inside a session open: a limit beyond int64, a NUL in a name, too many files */
    raw_min_request(&r);
    raw_uint(&r, REQ_RUN_TIMEOUT, (uint64_t)INT64_MAX + 1, 8);
    raw_ceilings(&r, 0);
    reject_open(&r, "limit out of range");
    raw_free(&r);
    raw_tlv(&r, REQ_LANGUAGE, "py\0", 3);
    raw_str(&r, REQ_VERSION, "3");
    raw_file(&r, "a.py", "");
    raw_ceilings(&r, 0);
    reject_open(&r, "NUL byte in string field");
    raw_free(&r);
    raw_str(&r, REQ_LANGUAGE, "python");
    raw_str(&r, REQ_VERSION, "3");
    for (int i = 0; i <= MOAT_MAX_FILES; i++)
        raw_file(&r, "f", "");
    raw_ceilings(&r, 0);
    reject_open(&r, "too many files");
    raw_free(&r);
    /* truncated */
    raw_min_request(&r);
    raw_ceilings(&r, 0);
    raw_bytes(&r, "\x00\x14\x00", 3);
    reject_open(&r, "truncated field header");
    raw_free(&r);

    /* an exec request knows nothing of ceilings */
    struct moat_exec_request q;
    raw_min_request(&r);
    raw_uint(&r, SO_WALL, 1, 8);
    assert_int_equal(moat_decode_exec_request(r.b, r.n, &q, &why), -1);
    assert_string_equal(why, "unknown field in exec request");
    raw_free(&r);
}

static void test_session_ready_roundtrip_and_refusals(void **state)
{
    char lang[] = "python", ver[] = "3.11.2";
    char walls[] = "namespaces+seccomp+landlock";
    struct moat_session_ready rd = {lang, ver, 900000, 60000, 30000, 1 << 20, UINT64_MAX, walls}, d;
    struct moat_buf out = {0};
    const char *why = NULL;
    size_t plen;

    assert_int_equal(moat_encode_session_ready(&out, 42, &rd, &why), 0);
    const uint8_t *p = frame_payload(&out, 0, MOAT_MSG_SESSION_READY, 42, &plen);
    assert_true(plen <= MOAT_SESSION_CTRL_FRAME_MAX);
    assert_int_equal(moat_decode_session_ready(p, plen, &d, &why), 0);
    assert_string_equal(d.language, "python");
    assert_string_equal(d.version, "3.11.2");
    assert_true(d.wall_ms == 900000 && d.idle_ms == 60000 && d.cpu_ms == 30000);
    assert_true(d.stdin_bytes == 1 << 20 && d.output_bytes == UINT64_MAX);
    assert_string_equal(d.walls, walls);
    moat_session_ready_free(&d);
    assert_true(is_zero(&d, sizeof(d)));
    /* the longest names still fit the control-frame cap */
    char longname[MOAT_MAX_NAME_LEN + 1];
    memset(longname, 'v', MOAT_MAX_NAME_LEN);
    longname[MOAT_MAX_NAME_LEN] = '\0';
    rd.language = rd.version = longname;
    out.len = 0;
    assert_int_equal(moat_encode_session_ready(&out, 42, &rd, &why), 0);
    assert_true(out.len - MOAT_FRAME_HEADER_SIZE <= MOAT_SESSION_CTRL_FRAME_MAX);
    moat_buf_free(&out);

    /* every field is required */
    for (uint16_t omit = SR_LANGUAGE; omit <= SR_OUTPUT; omit++) {
        struct raw r = {0};
        for (uint16_t tag = SR_LANGUAGE; tag <= SR_OUTPUT; tag++) {
            if (tag == omit)
                continue;
            if (tag <= SR_VERSION)
                raw_str(&r, tag, "x");
            else
                raw_uint(&r, tag, 1, 8);
        }
        reject_ready(&r, "session ready needs language, version and every limit");
        raw_free(&r);
    }
    struct raw r = {0};
    raw_str(&r, SR_LANGUAGE, "c");
    raw_str(&r, SR_VERSION, "1");
    for (uint16_t tag = SR_WALL; tag <= SR_OUTPUT; tag++)
        raw_uint(&r, tag, 1, 8);
    assert_int_equal(moat_decode_session_ready(r.b, r.n, &d, &why), 0);
    assert_null(d.walls); /* optional */
    moat_session_ready_free(&d);
    raw_uint(&r, SR_WALL, 1, 8);
    reject_ready(&r, "duplicate field");
    raw_free(&r);
    raw_str(&r, 9, "x"); /* 8 is the walls */
    reject_ready(&r, "unknown field in session ready");
    raw_free(&r);
    raw_str(&r, 8, "namespaces++seccomp");
    reject_ready(&r, "walls: names of [a-z] joined by '+'");
    raw_free(&r);
    raw_str(&r, SR_LANGUAGE, "");
    reject_ready(&r, "empty string field");
    raw_free(&r);
    raw_uint(&r, SR_IDLE, 1, 4);
    reject_ready(&r, "integer field has the wrong width");
    raw_free(&r);
}

static void test_session_open_ready_encoder_refusals(void **state)
{
    struct moat_buf out = {0};
    const char *why = NULL;
    int rc;

    assert_int_equal(moat_encode_session_stdin_close(&out, 1, &why), 0);
    size_t before_len = out.len;
    uint8_t before[MOAT_FRAME_HEADER_SIZE];
    memcpy(before, out.data, before_len);

    char lang[] = "python", ver[] = "3", name[] = "a.py";
    struct moat_file f = {name, NULL, 0};
    struct moat_session_open o = {.req = {.language = lang, .version = NULL, .files = &f, .nfiles = 1}};
    why = NULL;
    rc = moat_encode_session_open(&out, 2, &o, &why);
    refused_unchanged(&out, before, before_len, rc, why, "language and version are required");
    o.req.version = ver;
    o.req.nfiles = 0;
    why = NULL;
    rc = moat_encode_session_open(&out, 2, &o, &why);
    refused_unchanged(&out, before, before_len, rc, why, "file count out of range");

    struct moat_session_ready rd = {lang, NULL, 1, 1, 1, 1, 1, NULL};
    why = NULL;
    rc = moat_encode_session_ready(&out, 3, &rd, &why);
    refused_unchanged(&out, before, before_len, rc, why, "language and version are required");
    char badwalls[] = "Landlock";
    struct moat_session_ready rw = {lang, lang, 1, 1, 1, 1, 1, badwalls};
    why = NULL;
    rc = moat_encode_session_ready(&out, 3, &rw, &why);
    refused_unchanged(&out, before, before_len, rc, why, "walls: names of [a-z] joined by '+'");
    char toolong[MOAT_MAX_NAME_LEN + 2];
    memset(toolong, 'x', sizeof(toolong) - 1);
    toolong[sizeof(toolong) - 1] = '\0';
    rd.version = toolong;
    why = NULL;
    rc = moat_encode_session_ready(&out, 3, &rd, &why);
    refused_unchanged(&out, before, before_len, rc, why, "string field too long");
    moat_buf_free(&out);
}

/* ==== status names ======================================================= */

static void test_status_names(void **state)
{
    assert_null(moat_status_piston(MOAT_STATUS_OK));
    assert_string_equal(moat_status_piston(MOAT_STATUS_RE), "RE");
    assert_string_equal(moat_status_piston(MOAT_STATUS_SG), "SG");
    assert_string_equal(moat_status_piston(MOAT_STATUS_TO), "TO");
    assert_string_equal(moat_status_piston(MOAT_STATUS_OL), "OL");
    assert_string_equal(moat_status_piston(MOAT_STATUS_EL), "EL");
    assert_string_equal(moat_status_piston(MOAT_STATUS_XX), "XX");
    assert_string_equal(moat_status_piston(MOAT_STATUS_ML), "SG");
    assert_string_equal(moat_status_piston(MOAT_STATUS_MAX + 1), "XX");
    assert_string_equal(moat_status_piston(255), "XX");

    assert_string_equal(moat_status_name(MOAT_STATUS_OK), "OK");
    assert_string_equal(moat_status_name(MOAT_STATUS_SG), "SG");
    assert_string_equal(moat_status_name(MOAT_STATUS_XX), "XX");
    assert_string_equal(moat_status_name(MOAT_STATUS_ML), "ML");
    assert_string_equal(moat_status_name(MOAT_STATUS_MAX + 1), "??");
}

/* ---- test cases (issue 12 item 3) ------------------------------------------ */

static void test_request_tests_roundtrip(void **state)
{
    (void)state;
    char name[] = "main.c", lang[] = "c", ver[] = "*", a0[] = "sum", a1[] = "";
    uint8_t code[] = "int main(void){}", in0[] = "1 2\n", in1[] = {0x00, 0xff};
    struct moat_file file = {name, code, sizeof(code) - 1};
    char *args0[] = {a0, a1};
    struct moat_test_case cases[3] = {
        {in0, sizeof(in0) - 1, args0, 2, 500, -1, 0},
        {in1, sizeof(in1), NULL, 0, -1, 64 << 20, 200},
        {NULL, 0, NULL, 0, -1, -1, -1},
    };
    struct moat_exec_request req = {.language = lang,
                                    .version = ver,
                                    .files = &file,
                                    .nfiles = 1,
                                    .run_timeout_ms = -1,
                                    .compile_timeout_ms = -1,
                                    .run_memory_bytes = -1,
                                    .compile_memory_bytes = -1,
                                    .tests = cases,
                                    .ntests = 3,
                                    .tests_wall_ms = 9000};
    struct moat_buf out = {0};
    struct moat_exec_request d;
    const char *why = NULL;
    size_t plen;

    assert_int_equal(moat_encode_exec_request(&out, 7, &req, &why), 0);
    const uint8_t *p = frame_payload(&out, 0, MOAT_MSG_EXEC_REQUEST, 7, &plen);
    assert_int_equal(moat_decode_exec_request(p, plen, &d, &why), 0);
    assert_int_equal(d.ntests, 3);
    assert_true(d.tests_wall_ms == 9000);
    assert_int_equal(d.tests[0].stdin_len, 4);
    assert_memory_equal(d.tests[0].stdin_data, in0, 4);
    assert_int_equal(d.tests[0].nargs, 2);
    assert_string_equal(d.tests[0].args[0], "sum");
    assert_string_equal(d.tests[0].args[1], "");
    assert_true(d.tests[0].run_timeout_ms == 500);
    assert_true(d.tests[0].run_memory_bytes == -1);
    assert_true(d.tests[0].run_cpu_ms == -1); /* 0 is "not asked" */
    assert_int_equal(d.tests[1].stdin_len, 2);
    assert_memory_equal(d.tests[1].stdin_data, in1, 2);
    assert_true(d.tests[1].run_memory_bytes == 64 << 20);
    assert_true(d.tests[1].run_cpu_ms == 200);
    assert_int_equal(d.tests[2].nargs, 0);
    assert_null(d.tests[2].stdin_data);
    moat_exec_request_free(&d);
    assert_null(d.tests);
    moat_buf_free(&out);

    /* a request without cases sends neither tag, whatever tests_wall_ms says */
    req.ntests = 0;
    assert_int_equal(moat_encode_exec_request(&out, 7, &req, &why), 0);
    p = frame_payload(&out, 0, MOAT_MSG_EXEC_REQUEST, 7, &plen);
    assert_int_equal(moat_decode_exec_request(p, plen, &d, &why), 0);
    assert_int_equal(d.ntests, 0);
    assert_true(d.tests_wall_ms == -1);
    moat_exec_request_free(&d);
    moat_buf_free(&out);

    /* a session has none */
    struct moat_session_open o = {.req = req, .wall_ms = 1, .cpu_ms = 1};
    o.req.ntests = 1;
    assert_int_equal(moat_encode_session_open(&out, 7, &o, &why), -1);
    assert_string_equal(why, "a session has no test cases");
    assert_int_equal(out.len, 0);

    /* more than the cap */
    struct moat_test_case many[MOAT_MAX_TESTS + 1];
    memset(many, 0, sizeof(many));
    req.tests = many;
    req.ntests = MOAT_MAX_TESTS + 1;
    assert_int_equal(moat_encode_exec_request(&out, 7, &req, &why), -1);
    assert_string_equal(why, "too many test cases");
    req.ntests = MOAT_MAX_TESTS;
    assert_int_equal(moat_encode_exec_request(&out, 7, &req, &why), 0);
    moat_buf_free(&out);
}

static void test_request_tests_refusals(void **state)
{
    (void)state;
    struct raw r = {0};
    const char *why = NULL;
    size_t at;

    /* a case's limit of 0 */
    raw_min_request(&r);
    at = raw_nest_begin(&r, REQ_TEST);
    raw_uint(&r, TC_RUN_TIMEOUT, 0, 8);
    raw_nest_end(&r, at);
    reject_request(&r, "a test case's limit must be positive");
    raw_free(&r);
    /* an unknown field in a case */
    raw_min_request(&r);
    at = raw_nest_begin(&r, REQ_TEST);
    raw_str(&r, 9, "x");
    raw_nest_end(&r, at);
    reject_request(&r, "unknown field in test case");
    raw_free(&r);
    /* a case's stdin twice */
    raw_min_request(&r);
    at = raw_nest_begin(&r, REQ_TEST);
    raw_str(&r, TC_STDIN, "a");
    raw_str(&r, TC_STDIN, "b");
    raw_nest_end(&r, at);
    reject_request(&r, "duplicate field");
    raw_free(&r);
    /* more cases than the cap */
    raw_min_request(&r);
    for (int i = 0; i <= MOAT_MAX_TESTS; i++) {
        at = raw_nest_begin(&r, REQ_TEST);
        raw_str(&r, TC_ARG, "x");
        raw_nest_end(&r, at);
    }
    reject_request(&r, "too many test cases");
    raw_free(&r);
    /* a wall budget without cases, or of 0 */
    raw_min_request(&r);
    raw_uint(&r, REQ_TESTS_WALL, 1000, 8);
    reject_request(&r, "a tests wall limit without test cases");
    raw_free(&r);
    raw_min_request(&r);
    at = raw_nest_begin(&r, REQ_TEST);
    raw_nest_end(&r, at);
    raw_uint(&r, REQ_TESTS_WALL, 0, 8);
    reject_request(&r, "a test case's limit must be positive");
    raw_free(&r);
    /* a session open knows nothing of cases */
    struct moat_session_open o;
    raw_min_request(&r);
    at = raw_nest_begin(&r, REQ_TEST);
    raw_nest_end(&r, at);
    assert_int_equal(moat_decode_session_open(r.b, r.n, &o, &why), -1);
    assert_string_equal(why, "unknown field in session open");
    raw_free(&r);
}

static void test_result_tests_and_clock(void **state)
{
    (void)state;
    char lang[] = "c", ver[] = "12.2.0", msg[] = "cpu-time limit exceeded";
    uint8_t out0[] = "3\n";
    struct moat_stage_result cases[2] = {
        {.present = 1, .stdout_data = out0, .stdout_len = 2, .has_code = 1, .code = 0, .status = MOAT_STATUS_OK},
        {.present = 1,
         .has_signal = 1,
         .signal = 9,
         .status = MOAT_STATUS_TO,
         .message = msg,
         .clock = MOAT_CLOCK_CPU,
         .cpu_ms = 201},
    };
    struct moat_exec_result res = {.language = lang, .version = ver, .tests = cases, .ntests = 2};
    struct moat_buf out = {0};
    struct moat_exec_result d;
    const char *why = NULL;
    size_t plen;

    /* cases alone make a result (an interpreted language's) */
    assert_int_equal(moat_encode_exec_result(&out, 3, &res, &why), 0);
    const uint8_t *p = frame_payload(&out, 0, MOAT_MSG_EXEC_RESULT, 3, &plen);
    assert_int_equal(moat_decode_exec_result(p, plen, &d, &why), 0);
    assert_false(d.run.present);
    assert_int_equal(d.ntests, 2);
    assert_int_equal(d.tests[0].stdout_len, 2);
    assert_int_equal(d.tests[0].clock, 0);
    assert_int_equal(d.tests[1].status, MOAT_STATUS_TO);
    assert_int_equal(d.tests[1].clock, MOAT_CLOCK_CPU);
    assert_string_equal(d.tests[1].message, msg);
    moat_exec_result_free(&d);
    assert_null(d.tests);
    moat_buf_free(&out);

    /* a clock goes with a TO only, on both sides */
    cases[0].clock = MOAT_CLOCK_WALL;
    assert_int_equal(moat_encode_exec_result(&out, 3, &res, &why), -1);
    assert_string_equal(why, "a stage's clock names the clock of a TO, and only of a TO");
    moat_buf_free(&out); /* rewound, still allocated */
    cases[0].clock = 0;

    struct raw r = {0};
    size_t at;
    raw_str(&r, RES_LANGUAGE, "c");
    raw_str(&r, RES_VERSION, "1");
    at = raw_nest_begin(&r, RES_TEST);
    raw_uint(&r, ST_STATUS, MOAT_STATUS_OK, 1);
    raw_uint(&r, ST_CLOCK, MOAT_CLOCK_WALL, 1);
    raw_nest_end(&r, at);
    reject_result(&r, "a stage's clock goes with a TO only");
    raw_free(&r);
    raw_str(&r, RES_LANGUAGE, "c");
    raw_str(&r, RES_VERSION, "1");
    at = raw_nest_begin(&r, RES_TEST);
    raw_uint(&r, ST_STATUS, MOAT_STATUS_TO, 1);
    raw_uint(&r, ST_CLOCK, MOAT_CLOCK_MAX + 1, 1);
    raw_nest_end(&r, at);
    reject_result(&r, "unknown clock");
    raw_free(&r);
    /* more case results than cases can be */
    raw_str(&r, RES_LANGUAGE, "c");
    raw_str(&r, RES_VERSION, "1");
    for (int i = 0; i <= MOAT_MAX_TESTS; i++) {
        at = raw_nest_begin(&r, RES_TEST);
        raw_uint(&r, ST_STATUS, MOAT_STATUS_OK, 1);
        raw_nest_end(&r, at);
    }
    reject_result(&r, "too many test case results");
    raw_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_request_tests_roundtrip),
        cmocka_unit_test(test_request_tests_refusals),
        cmocka_unit_test(test_result_tests_and_clock),
        cmocka_unit_test(test_request_roundtrip_full),
        cmocka_unit_test(test_request_defaults_omitted),
        cmocka_unit_test(test_request_rlimits_and_options_roundtrip),
        cmocka_unit_test(test_request_rlimits_and_options_refusals),
        cmocka_unit_test(test_request_isolation),
        cmocka_unit_test(test_runtime_option_patterns_refusals),
        cmocka_unit_test(test_options_allow_list),
        cmocka_unit_test(test_request_caps_accepted_at_limit),
        cmocka_unit_test(test_result_roundtrip_compile_and_run),
        cmocka_unit_test(test_result_single_stages),
        cmocka_unit_test(test_result_walls),
        cmocka_unit_test(test_result_all_statuses),
        cmocka_unit_test(test_error_roundtrip),
        cmocka_unit_test(test_runtimes_roundtrip),
        cmocka_unit_test(test_runtimes_query_and_frame_sequence),
        cmocka_unit_test(test_header_rejections),
        cmocka_unit_test(test_tlv_structure_rejections),
        cmocka_unit_test(test_unknown_and_duplicate_tags),
        cmocka_unit_test(test_path_rules),
        cmocka_unit_test(test_semver_selectors),
        cmocka_unit_test(test_required_fields),
        cmocka_unit_test(test_string_rules),
        cmocka_unit_test(test_count_caps),
        cmocka_unit_test(test_integer_rules),
        cmocka_unit_test(test_encoder_refusals),
        cmocka_unit_test(test_encoder_refusal_on_empty_buffer),
        cmocka_unit_test(test_session_roundtrips),
        cmocka_unit_test(test_session_chunk_caps),
        cmocka_unit_test(test_session_frame_caps),
        cmocka_unit_test(test_session_decode_refusals),
        cmocka_unit_test(test_session_encoder_refusals),
        cmocka_unit_test(test_session_open_roundtrip),
        cmocka_unit_test(test_session_open_refusals),
        cmocka_unit_test(test_session_ready_roundtrip_and_refusals),
        cmocka_unit_test(test_session_open_ready_encoder_refusals),
        cmocka_unit_test(test_status_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
