/*
 * fuzz_piston_request.c - libFuzzer target for the gateway's request filter
 * (piston_parse_exec_request in gateway/json/piston_json.c), which turns a
 * client's POST /api/v2/execute body into the typed message sent to the
 * backend (F4 of tests/SECURITY-CHECKS.md).
 *
 * For every input:
 *
 *   - a refused body gives a non-empty message, leaves nothing allocated,
 *     and that message makes a valid JSON error body (piston_error_json);
 *   - an accepted body satisfies every rule the filter promises (labels,
 *     file names, counts, argument sizes, limits >= -1), and round-trips:
 *       * moat_encode_exec_request must succeed, and moat_decode_exec_request
 *         of the frame must give back every field unchanged;
 *       * written back as Piston JSON (file contents as hex) and parsed
 *         again, it must give the same request (the filter is idempotent);
 *   - piston_utf8_sanitize of the raw bytes gives valid UTF-8, leaves valid
 *     UTF-8 unchanged, and is idempotent.
 *
 * Built as the real fuzzer with -DMOAT_FUZZ=ON, and always as part of
 * fuzz_piston_replay (see replay.c).  Violations abort().
 */
#include "fuzz_target.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/gw_limits.h"
#include "moat_proto.h"
#include "json/piston_json.h"
#include "apis/piston/piston_tests.h"

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

/* Strict UTF-8 (RFC 3629): no overlongs, no surrogates, nothing above U+10FFFF. */
static int utf8_valid(const uint8_t *s, size_t len)
{
    size_t i = 0;

    while (i < len) {
        uint8_t c = s[i];
        size_t need;
        uint32_t cp;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xe0) == 0xc0) {
            need = 1, cp = c & 0x1f;
        } else if ((c & 0xf0) == 0xe0) {
            need = 2, cp = c & 0x0f;
        } else if ((c & 0xf8) == 0xf0) {
            need = 3, cp = c & 0x07;
        } else {
            return 0;
        }
        if (len - i <= need)
            return 0;
        for (size_t k = 1; k <= need; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return 0;
            cp = cp << 6 | (s[i + k] & 0x3f);
        }
        if ((need == 1 && cp < 0x80) || (need == 2 && cp < 0x800) || (need == 3 && cp < 0x10000) || cp > 0x10ffff ||
            (cp >= 0xd800 && cp <= 0xdfff))
            return 0;
        i += need + 1;
    }
    return 1;
}

static int label_ok(const char *s)
{
    size_t len = strlen(s);

    if (len == 0 || len > MOAT_MAX_NAME_LEN)
        return 0;
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            return 0;
    return utf8_valid((const uint8_t *)s, len);
}

/* A relative path of 1..8 components, none empty, "." or "..", none
 * beginning with '-' or '@' (S26): moat_path.h's rule, written out again. */
static int path_ok(const char *n)
{
    size_t parts = 0;

    for (const char *p = n;;) {
        const char *e = strchr(p, '/');
        size_t len = e != NULL ? (size_t)(e - p) : strlen(p);
        if (len == 0 || (len == 1 && p[0] == '.') || (len == 2 && p[0] == '.' && p[1] == '.') || p[0] == '-' || p[0] == '@')
            return 0;
        if (++parts > 8)
            return 0;
        if (e == NULL)
            return 1;
        p = e + 1;
    }
}

/* 1 when a names a directory of b ("pkg" of "pkg/mod.py"). */
static int dir_of(const char *a, const char *b)
{
    return strncmp(a, b, strlen(a)) == 0 && b[strlen(a)] == '/';
}

static void request_invariants(const struct moat_exec_request *r)
{
    CHECK(r->language != NULL && label_ok(r->language));
    CHECK(r->version != NULL && label_ok(r->version));
    CHECK(r->nfiles >= 1 && r->nfiles <= MOAT_MAX_FILES && r->files != NULL);
    for (size_t i = 0; i < r->nfiles; i++) {
        const char *n = r->files[i].name;
        CHECK(n != NULL && label_ok(n));
        CHECK(path_ok(n));
        CHECK(r->files[i].content != NULL || r->files[i].content_len == 0);
        for (size_t j = 0; j < i; j++)
            CHECK(strcmp(r->files[j].name, n) != 0 && !dir_of(r->files[j].name, n) && !dir_of(n, r->files[j].name));
    }
    CHECK(r->nargs <= MOAT_MAX_ARGS);
    CHECK(r->nargs == 0 || r->args != NULL);
    for (size_t i = 0; i < r->nargs; i++)
        CHECK(r->args[i] != NULL && strlen(r->args[i]) <= MOAT_MAX_ARG_LEN &&
              utf8_valid((const uint8_t *)r->args[i], strlen(r->args[i])));
    CHECK(r->stdin_data != NULL || r->stdin_len == 0);
    CHECK(utf8_valid(r->stdin_data, r->stdin_len));
    CHECK(r->run_timeout_ms >= -1 && r->compile_timeout_ms >= -1);
    CHECK(r->run_memory_bytes >= -1 && r->compile_memory_bytes >= -1);
    CHECK((r->run_cpu_ms == -1 || r->run_cpu_ms > 0) && (r->compile_cpu_ms == -1 || r->compile_cpu_ms > 0));
    CHECK(r->ntests <= MOAT_MAX_TESTS);
    CHECK(r->tests_wall_ms == -1 || (r->tests_wall_ms > 0 && r->ntests > 0));
    for (size_t i = 0; i < r->ntests; i++) {
        const struct moat_test_case *t = &r->tests[i];
        CHECK(t->nargs <= MOAT_MAX_ARGS && (t->nargs == 0 || t->args != NULL));
        for (size_t j = 0; j < t->nargs; j++)
            CHECK(t->args[j] != NULL && strlen(t->args[j]) <= MOAT_MAX_ARG_LEN);
        CHECK(t->stdin_data != NULL || t->stdin_len == 0);
        CHECK(t->run_timeout_ms == -1 || t->run_timeout_ms > 0);
        CHECK(t->run_memory_bytes == -1 || t->run_memory_bytes > 0);
        CHECK(t->run_cpu_ms == -1 || t->run_cpu_ms > 0);
    }
}

/* What judges each case: one per wire case, a name, a known mode, a tolerance. */
static void tests_invariants(const struct moat_exec_request *r, const struct piston_tests *t)
{
    CHECK(t->count == r->ntests);
    for (size_t i = 0; i < t->count; i++) {
        const struct piston_test *x = &t->items[i];
        CHECK(x->name != NULL && label_ok(x->name) && strlen(x->name) <= PISTON_TEST_NAME_MAX);
        CHECK(x->compare <= PISTON_CMP_FLOAT);
        CHECK(x->tolerance >= 0);
        CHECK(x->expected != NULL || x->expected_len == 0);
        CHECK(x->expected_len <= PISTON_EXPECTED_MAX);
    }
}

/* The comparisons on the input cut in two: each mode is reflexive, and a
 * difference points into the two outputs. */
static void check_compare(const uint8_t *data, size_t size)
{
    size_t half = size / 2;
    const uint8_t *a = data, *b = data + half;
    size_t alen = half, blen = size - half;

    for (int mode = PISTON_CMP_EXACT; mode <= PISTON_CMP_FLOAT; mode++) {
        struct piston_diff d;
        double tol = size ? (double)data[0] / 255.0 : 0;
        CHECK(piston_compare((enum piston_compare)mode, tol, a, alen, a, alen, &d) == 1);
        if (piston_compare((enum piston_compare)mode, tol, a, alen, b, blen, &d) == 0) {
            CHECK(d.line >= 1);
            CHECK(d.exp >= a && d.exp + d.exp_len <= a + alen);
            CHECK(d.got_len == 0 || (d.got >= b && d.got + d.got_len <= b + blen));
        }
    }
}

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
    CHECK(a->ntests == b->ntests);
    CHECK(a->ntests == 0 || a->tests_wall_ms == b->tests_wall_ms);
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

/* The typed message the gateway sends, decoded as the backend does. */
static void codec_round_trip(const struct moat_exec_request *a)
{
    struct moat_buf frame = {0};
    struct moat_frame_header h;
    struct moat_exec_request b;
    const char *why = NULL;

    CHECK(moat_encode_exec_request(&frame, 42, a, &why) == 0);
    CHECK(moat_frame_parse_header(frame.data, frame.len, &h, &why) == 0);
    CHECK(h.type == MOAT_MSG_EXEC_REQUEST && h.job_id == 42);
    CHECK((size_t)h.length + MOAT_FRAME_HEADER_SIZE == frame.len);
    if (moat_decode_exec_request(frame.data + MOAT_FRAME_HEADER_SIZE, h.length, &b, &why) != 0) {
        fprintf(stderr, "the backend's decoder refuses what the gateway accepted: %s\n", why ? why : "?");
        abort();
    }
    request_equal(a, &b);
    moat_exec_request_free(&b);
    moat_buf_free(&frame);
}

static json_t *hex_string(const uint8_t *p, size_t len)
{
    static const char digits[] = "0123456789abcdef";
    char *s = malloc(2 * len + 1);
    json_t *j;

    CHECK(s != NULL);
    for (size_t i = 0; i < len; i++) {
        s[2 * i] = digits[p[i] >> 4];
        s[2 * i + 1] = digits[p[i] & 0xf];
    }
    j = json_stringn(s, 2 * len);
    free(s);
    return j;
}

static void set(json_t *o, const char *key, json_t *v)
{
    CHECK(v != NULL);
    CHECK(json_object_set_new(o, key, v) == 0);
}

/* The accepted request written back as a Piston body, parsed again. */
static void filter_idempotent(const struct moat_exec_request *a)
{
    json_t *o = json_object(), *files = json_array(), *args = json_array();
    struct moat_exec_request b;
    char err[256];
    char *text;

    CHECK(o != NULL && files != NULL && args != NULL);
    set(o, "language", json_string(a->language));
    set(o, "version", json_string(a->version));
    for (size_t i = 0; i < a->nfiles; i++) {
        json_t *f = json_object();
        CHECK(f != NULL);
        set(f, "name", json_string(a->files[i].name));
        set(f, "encoding", json_string("hex"));
        set(f, "content", hex_string(a->files[i].content, a->files[i].content_len));
        CHECK(json_array_append_new(files, f) == 0);
    }
    set(o, "files", files);
    for (size_t i = 0; i < a->nargs; i++)
        CHECK(json_array_append_new(args, json_string(a->args[i])) == 0);
    set(o, "args", args);
    set(o, "stdin", json_stringn((const char *)(a->stdin_data ? a->stdin_data : (const uint8_t *)""), a->stdin_len));
    set(o, "run_timeout", json_integer(a->run_timeout_ms));
    set(o, "compile_timeout", json_integer(a->compile_timeout_ms));
    set(o, "run_memory_limit", json_integer(a->run_memory_bytes));
    set(o, "compile_memory_limit", json_integer(a->compile_memory_bytes));
    set(o, "run_cpu_time", json_integer(a->run_cpu_ms));
    set(o, "compile_cpu_time", json_integer(a->compile_cpu_ms));
    text = json_dumps(o, JSON_COMPACT);
    CHECK(text != NULL);
    json_decref(o);
    if (piston_parse_exec_request(text, strlen(text), &b, err, sizeof(err)) != 0) {
        fprintf(stderr, "the filter refuses its own canonical form: %s\n", err);
        abort();
    }
    request_equal(a, &b);
    piston_exec_request_free(&b);
    free(text);
}

/* A refusal's message is sent as {"message": ..., "code": ..., "request_id": ...}. */
static void error_body(const char *err)
{
    char *body = piston_error_json(err, "invalid_request", "0123456789abcdef");
    json_error_t jerr;
    json_t *o, *m;
    size_t n;
    char *clean;

    CHECK(body != NULL);
    o = json_loads(body, JSON_REJECT_DUPLICATES, &jerr);
    CHECK(o != NULL && json_is_object(o) && json_object_size(o) == 3);
    CHECK(str_eq(json_string_value(json_object_get(o, "code")), "invalid_request"));
    m = json_object_get(o, "message");
    CHECK(json_is_string(m));
    clean = piston_utf8_sanitize((const uint8_t *)err, strlen(err), &n);
    CHECK(clean != NULL);
    CHECK(json_string_length(m) == n && memcmp(json_string_value(m), clean, n) == 0);
    CHECK(str_eq(json_string_value(json_object_get(o, "request_id")), "0123456789abcdef"));
    free(clean);
    json_decref(o);
    free(body);
}

static void check_sanitize(const uint8_t *data, size_t size)
{
    size_t n, n2;
    char *s = piston_utf8_sanitize(data, size, &n), *s2;

    CHECK(s != NULL);
    CHECK(s[n] == '\0');
    CHECK(utf8_valid((const uint8_t *)s, n));
    if (utf8_valid(data, size))
        CHECK(bytes_eq((const uint8_t *)s, n, data, size));
    s2 = piston_utf8_sanitize((const uint8_t *)s, n, &n2);
    CHECK(s2 != NULL && bytes_eq((const uint8_t *)s, n, (const uint8_t *)s2, n2));
    free(s2);
    free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct moat_exec_request r;
    char err[256];

    memset(err, 0, sizeof(err));
    if (piston_parse_exec_request((const char *)data, size, &r, err, sizeof(err)) == 0) {
        request_invariants(&r);
        codec_round_trip(&r);
        filter_idempotent(&r);
        piston_exec_request_free(&r);
        const uint8_t *p = (const uint8_t *)&r;
        for (size_t i = 0; i < sizeof(r); i++)
            CHECK(p[i] == 0);
    } else {
        CHECK(err[0] != '\0' && strlen(err) < sizeof(err));
        /* nothing left allocated */
        CHECK(r.language == NULL && r.version == NULL && r.files == NULL && r.nfiles == 0);
        CHECK(r.args == NULL && r.nargs == 0 && r.stdin_data == NULL && r.stdin_len == 0);
        error_body(err);
    }
    /* the same body with the `tests` extension allowed */
    struct piston_tests t;
    json_t *meta;
    memset(err, 0, sizeof(err));
    if (piston_parse_exec_request_tests((const char *)data, size, &r, &t, &meta, err, sizeof(err)) == 0) {
        request_invariants(&r);
        tests_invariants(&r, &t);
        codec_round_trip(&r);
        /* metadata as the packet keeps it: an object within its cap */
        CHECK(meta == NULL || (json_is_object(meta) && json_dumpb(meta, NULL, 0, JSON_COMPACT) <= GW_METADATA_MAX_BYTES));
        json_decref(meta);
        piston_exec_request_free(&r);
        piston_tests_free(&t);
    } else {
        CHECK(err[0] != '\0' && strlen(err) < sizeof(err));
        CHECK(r.tests == NULL && r.ntests == 0 && t.items == NULL && t.count == 0 && meta == NULL);
        error_body(err);
    }
    check_sanitize(data, size);
    check_compare(data, size);
    return 0;
}

static void make_seeds(fuzz_add_seed_fn *add)
{
    static const char *const seeds[] = {
        "{\"language\":\"python\",\"version\":\"*\",\"files\":[{\"content\":\"print(1)\"}]}",
        "{\"language\":\"python\",\"version\":\"3.11\",\"files\":[{\"name\":\"main.py\",\"content\":\"print(input())\\n\"},"
        "{\"name\":\"data.bin\",\"encoding\":\"base64\",\"content\":\"AAEC/w==\"},"
        "{\"name\":\"x.hex\",\"encoding\":\"hex\",\"content\":\"00fFaB\"},"
        "{\"name\":\"u.txt\",\"encoding\":\"utf8\",\"content\":\"\\u00e9\\u0000\\ud83d\\ude00\"}],"
        "\"stdin\":\"42\\n\\u0000\",\"args\":[\"a\",\"\",\"\\u00e9 b\"],"
        "\"run_timeout\":3000,\"compile_timeout\":-1,\"run_memory_limit\":268435456,\"compile_memory_limit\":0}",
        "{\"language\":\"c\",\"version\":\"12\",\"files\":[{\"name\":\"main.c\",\"content\":\"int main(void){return 0;}\"}],"
        "\"args\":[],\"stdin\":\"\"}",
        /* nested paths, a semver range, the CPU clocks */
        "{\"language\":\"python\",\"version\":\">=3.9 <4 || ^5\",\"files\":[{\"name\":\"main.py\",\"content\":\"import pkg.m\"},"
        "{\"name\":\"pkg/m.py\",\"content\":\"\"},{\"name\":\"pkg/sub/n.py\",\"content\":\"\"}],"
        "\"run_cpu_time\":1500,\"compile_cpu_time\":-1}",
        /* refusals */
        "{\"language\":\"python\",\"language\":\"py\",\"version\":\"*\",\"files\":[{\"content\":\"\"}]}",
        "{\"language\":\"python\",\"version\":\"*\",\"files\":[{\"content\":\"\"}],\"extra\":1}",
        "{\"language\":\"python\",\"version\":\"*\",\"files\":[{\"name\":\"..\",\"content\":\"\"}]}",
        "{\"language\":\"python\",\"version\":\"*\",\"files\":[{\"name\":\"a/../b\",\"content\":\"\"}]}",
        "{\"language\":\"python\",\"version\":\"*\",\"files\":[{\"name\":\"/etc/x\",\"content\":\"\"}]}",
        "{\"language\":\"python\",\"version\":\"*\",\"files\":[{\"name\":\"a//b\",\"content\":\"\"}]}",
        "{\"language\":\"python\",\"version\":\"*\",\"files\":[{\"name\":\"a\",\"content\":\"\"},{\"name\":\"a/"
        "b\",\"content\":\"\"}]}",
        "{\"language\":\"python\",\"version\":\">=\",\"files\":[{\"content\":\"\"}],\"run_cpu_time\":0}",
        "{\"language\":\"python\",\"version\":\"*\",\"files\":[{\"name\":\"a\",\"content\":\"\"},{\"name\":\"a\",\"content\":\"\"}]"
        "}",
        "{\"language\":\"python\",\"version\":\"*\",\"files\":[{\"encoding\":\"base64\",\"content\":\"AAE=\"}]}",
        "{\"language\":\"python\",\"version\":\"*\",\"files\":[{\"encoding\":\"hex\",\"content\":\"0g\"}]}",
        "{\"language\":\"py\\u0001\",\"version\":\"*\",\"files\":[{\"content\":\"\"}]}",
        "{\"language\":\"python\",\"version\":\"*\",\"files\":[],\"run_timeout\":-2}",
        "{\"language\":\"python\",\"version\":\"*\",\"files\":[{\"content\":\"\"}],\"args\":[\"\\u0000\"]}",
        "{\"language\":\"python\",\"version\":\"*\",\"files\":[{\"content\":\"\"}],\"run_memory_limit\":1e3}",
        /* test cases */
        "{\"language\":\"c\",\"version\":\"*\",\"files\":[{\"content\":\"x\"}],\"stdin\":\"d\",\"args\":[\"a\"],"
        "\"tests_timeout\":5000,\"tests\":[{\"name\":\"one\",\"stdin\":\"1 2\",\"args\":[],\"expected_output\":\"3\","
        "\"compare\":\"float\",\"tolerance\":0.001,\"run_timeout\":100,\"run_cpu_time\":50,\"run_memory_limit\":-1},{},"
        "{\"compare\":\"tokens\",\"expected_output\":\" 1\\r\\n2 \"}]}",
        "{\"language\":\"c\",\"version\":\"*\",\"files\":[{\"content\":\"x\"}],\"tests\":[{\"tolerance\":1}]}",
        "{\"language\":\"c\",\"version\":\"*\",\"files\":[{\"content\":\"x\"}],\"tests_timeout\":1}",
        "0.5 nan inf 1e300 -0 0x1p3 0.49999 NaN -inf 1e-300 x",
        "[1,2,3]",
        "{\"language\":\"python\",\"version\":\"*\",\"files\":[{\"content\":\"",
        "",
    };

    for (size_t i = 0; i < sizeof(seeds) / sizeof(seeds[0]); i++)
        add(seeds[i], strlen(seeds[i]), 0);
}

const struct fuzz_target fuzz_target = {.make_seeds = make_seeds};
