/*
 * test_gateway_piston.c - Piston v2 JSON <-> moat_proto messages, through the
 * real piston_json.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "common/gw_limits.h"
#include "json/piston_json.h"
#include "apis/piston/piston_tests.h"

static int parse(const char *body, struct moat_exec_request *r, char *err, size_t errlen)
{
    err[0] = '\0';
    return piston_parse_exec_request(body, strlen(body), r, err, errlen);
}

static void test_valid_request(void **state)
{
    const char *body =
        "{\"language\":\"python\",\"version\":\"3.11.0\","
        "\"files\":[{\"name\":\"main.py\",\"content\":\"print(1)\"},"
        "{\"content\":\"aGk=\",\"encoding\":\"base64\"},{\"name\":\"x.bin\",\"content\":\"00fF\",\"encoding\":\"hex\"}],"
        "\"stdin\":\"in\",\"args\":[\"a\",\"b c\"],\"run_timeout\":3000,\"compile_memory_limit\":-1,"
        "\"run_cpu_time\":1500,\"compile_cpu_time\":-1}";
    struct moat_exec_request r;
    char err[256];

    assert_int_equal(parse(body, &r, err, sizeof(err)), 0);
    assert_string_equal(r.language, "python");
    assert_string_equal(r.version, "3.11.0");
    assert_int_equal(r.nfiles, 3);
    assert_string_equal(r.files[0].name, "main.py");
    assert_int_equal(r.files[0].content_len, 8);
    assert_memory_equal(r.files[0].content, "print(1)", 8);
    assert_string_equal(r.files[1].name, "file1.code");
    assert_int_equal(r.files[1].content_len, 2);
    assert_memory_equal(r.files[1].content, "hi", 2);
    assert_int_equal(r.files[2].content_len, 2);
    assert_int_equal(r.files[2].content[0], 0x00);
    assert_int_equal(r.files[2].content[1], 0xff);
    assert_int_equal(r.stdin_len, 2);
    assert_memory_equal(r.stdin_data, "in", 2);
    assert_int_equal(r.nargs, 2);
    assert_string_equal(r.args[1], "b c");
    assert_int_equal(r.run_timeout_ms, 3000);
    assert_int_equal(r.compile_timeout_ms, -1);
    assert_int_equal(r.run_memory_bytes, -1);
    assert_int_equal(r.compile_memory_bytes, -1);
    assert_int_equal(r.run_cpu_ms, 1500);
    assert_int_equal(r.compile_cpu_ms, -1);
    piston_exec_request_free(&r);
}

static void test_minimal_defaults(void **state)
{
    struct moat_exec_request r;
    char err[256];

    assert_int_equal(parse("{\"language\":\"c\",\"version\":\"*\",\"files\":[{\"content\":\"\"}]}", &r, err, sizeof(err)), 0);
    assert_string_equal(r.version, "*");
    assert_string_equal(r.files[0].name, "file0.code");
    assert_int_equal(r.files[0].content_len, 0);
    assert_int_equal(r.nargs, 0);
    assert_null(r.stdin_data);
    assert_int_equal(r.run_timeout_ms, -1);
    assert_int_equal(r.compile_timeout_ms, -1);
    assert_int_equal(r.run_memory_bytes, -1);
    assert_int_equal(r.compile_memory_bytes, -1);
    assert_int_equal(r.run_cpu_ms, -1);
    assert_int_equal(r.compile_cpu_ms, -1);
    piston_exec_request_free(&r);
}

/* Each bad body is refused and the message mentions the expected text. */
static void expect_bad(const char *body, const char *needle)
{
    struct moat_exec_request r;
    char err[256];

    assert_int_equal(parse(body, &r, err, sizeof(err)), -1);
    if (strstr(err, needle) == NULL)
        fail_msg("body %s: message \"%s\" does not mention \"%s\"", body, err, needle);
    assert_null(r.language);
    assert_null(r.files);
}

#define F "\"files\":[{\"content\":\"x\"}]"

static void test_rejections(void **state)
{
    expect_bad("", "JSON object");
    expect_bad("[]", "JSON object");
    expect_bad("{\"language\":\"c\",", "invalid JSON");
    expect_bad("{\"language\":\"c\",\"language\":\"d\",\"version\":\"1\"," F "}", "invalid JSON"); /* duplicate key */
    expect_bad("{\"language\":\"c\",\"version\":\"1\"," F ",\"colour\":1}", "unknown field 'colour'");
    expect_bad("{\"version\":\"1\"," F "}", "language is required");
    expect_bad("{\"language\":7,\"version\":\"1\"," F "}", "language must be a string");
    expect_bad("{\"language\":\"\",\"version\":\"1\"," F "}", "language must be 1 to");
    expect_bad("{\"language\":\"c\"," F "}", "version is required");
    expect_bad("{\"language\":\"c\",\"version\":\"1\"}", "files is required");
    expect_bad("{\"language\":\"c\",\"version\":\">=\"," F "}", "version \">=\" is neither a version nor a semver range");
    expect_bad("{\"language\":\"c\",\"version\":\"^3 || <\"," F "}", "is neither a version nor a semver range");
    expect_bad("{\"language\":\"c\",\"version\":\"1\",\"files\":{}}", "files must be an array");
    expect_bad("{\"language\":\"c\",\"version\":\"1\",\"files\":[]}", "files must hold between 1 and");
    expect_bad("{\"language\":\"c\",\"version\":\"1\",\"files\":[1]}", "files[0] must be an object");
    expect_bad("{\"language\":\"c\",\"version\":\"1\",\"files\":[{\"content\":5}]}", "files[0].content must be a string");
    expect_bad("{\"language\":\"c\",\"version\":\"1\",\"files\":[{\"name\":\"a\"}]}", "files[0].content is required");
    expect_bad("{\"language\":\"c\",\"version\":\"1\",\"files\":[{\"content\":\"x\",\"mode\":1}]}",
               "files[0]: unknown field 'mode'");
    expect_bad("{\"language\":\"c\",\"version\":\"1\",\"files\":[{\"content\":\"x\",\"encoding\":\"rot13\"}]}",
               "files[0].encoding must be one of");
    expect_bad("{\"language\":\"c\",\"version\":\"1\",\"stdin\":null," F "}", "stdin must be a string");
    expect_bad("{\"language\":\"c\",\"version\":\"1\",\"args\":[\"a\",2]," F "}", "args[1] must be a string");
    expect_bad("{\"language\":\"c\",\"version\":\"1\",\"args\":\"a\"," F "}", "args must be an array");
    expect_bad("{\"language\":\"c\",\"version\":\"1\",\"run_timeout\":\"5\"," F "}", "run_timeout must be an integer");
    expect_bad("{\"language\":\"c\",\"version\":\"1\",\"run_timeout\":1.5," F "}", "run_timeout must be an integer");
    expect_bad("{\"language\":\"c\",\"version\":\"1\",\"run_memory_limit\":-2," F "}", "run_memory_limit must be -1");
    expect_bad("{\"language\":\"c\",\"version\":\"1\",\"run_cpu_time\":0," F "}", "run_cpu_time must be -1 or a positive");
    expect_bad("{\"language\":\"c\",\"version\":\"1\",\"compile_cpu_time\":-2," F "}", "compile_cpu_time must be -1");
    expect_bad("{\"language\":\"c\",\"version\":\"1\",\"run_cpu_time\":\"9\"," F "}", "run_cpu_time must be an integer");
    expect_bad("{\"language\":\"c\",\"version\":\"1\",\"run_cpu_time\":1,\"run_cpu_time\":2," F "}", "invalid JSON");
}

static void test_bad_file_names(void **state)
{
    static const char *names[] = {"\".\"", "\"..\"", "\"\"", "\"a\\u0000b\"", "\"a\\nb\"", "\"a\\u007fb\"", "7", "\"pkg/a\\nb\""};
    char body[512];
    size_t i;

    for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        snprintf(body, sizeof(body), "{\"language\":\"c\",\"version\":\"1\",\"files\":[{\"name\":%s,\"content\":\"x\"}]}",
                 names[i]);
        expect_bad(body, "files[0].name");
    }
    /* 256 bytes is one too many */
    {
        char name[257];
        memset(name, 'a', 256);
        name[256] = '\0';
        snprintf(body, sizeof(body), "{\"language\":\"c\",\"version\":\"1\",\"files\":[{\"name\":\"%s\",\"content\":\"x\"}]}",
                 name);
        expect_bad(body, "files[0].name");
    }
    expect_bad(
        "{\"language\":\"c\",\"version\":\"1\",\"files\":[{\"name\":\"a\",\"content\":\"x\"},{\"name\":\"a\",\"content\":\"y\"}]}",
        "files[1].name duplicates files[0].name");
}

/* Nested paths: relative, no empty, '.' or '..' component, at most 8 deep,
 * S26 for every component; each refusal names the rule and the file. */
static void test_path_tricks(void **state)
{
    static const struct {
        const char *name, *needle;
    } bad[] = {
        {"../x", "files[0].name must not have a '.' or '..' component (\"../x\")"},
        {"a/../../x", "must not have a '.' or '..' component"},
        {"a/./b", "must not have a '.' or '..' component (\"a/./b\")"},
        {"./a", "must not have a '.' or '..' component"},
        {"a/..", "must not have a '.' or '..' component"},
        {"/etc/x", "files[0].name must be a relative path (no leading '/') (\"/etc/x\")"},
        {"/", "must be a relative path"},
        {"a//b", "files[0].name must not have an empty component ('//' or a trailing '/') (\"a//b\")"},
        {"a/", "must not have an empty component"},
        {"1/2/3/4/5/6/7/8/9", "files[0].name must not have more than 8 components"},
        {"pkg/-o", "files[0].name must not begin with '-' or '@', nor may any of its directories (\"pkg/-o\")"},
        {"@d/main.c", "must not begin with '-' or '@'"},
        {"src/--help/x.c", "must not begin with '-' or '@'"},
    };
    static const char *fine[] = {"pkg/mod.py", "src/util.h", "1/2/3/4/5/6/7/8", "a.b/c..d/.e", "a-b/c@d", "..a/b.."};
    struct moat_exec_request r;
    char body[512], err[256];

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(body, sizeof(body), "{\"language\":\"c\",\"version\":\"1\",\"files\":[{\"name\":\"%s\",\"content\":\"x\"}]}",
                 bad[i].name);
        expect_bad(body, bad[i].needle);
    }
    for (size_t i = 0; i < sizeof(fine) / sizeof(fine[0]); i++) {
        snprintf(body, sizeof(body), "{\"language\":\"c\",\"version\":\"1\",\"files\":[{\"name\":\"%s\",\"content\":\"x\"}]}",
                 fine[i]);
        if (parse(body, &r, err, sizeof(err)) != 0)
            fail_msg("name \"%s\" refused: %s", fine[i], err);
        assert_string_equal(r.files[0].name, fine[i]);
        piston_exec_request_free(&r);
    }
    /* two files may share a directory; a name may not be a file and a directory at once */
    assert_int_equal(parse("{\"language\":\"c\",\"version\":\"1\",\"files\":[{\"name\":\"pkg/a.py\",\"content\":\"x\"},"
                           "{\"name\":\"pkg/b.py\",\"content\":\"y\"},{\"name\":\"pkg.py\",\"content\":\"z\"}]}",
                           &r, err, sizeof(err)),
                     0);
    assert_int_equal(r.nfiles, 3);
    piston_exec_request_free(&r);
    expect_bad("{\"language\":\"c\",\"version\":\"1\",\"files\":[{\"name\":\"pkg\",\"content\":\"x\"},"
               "{\"name\":\"pkg/mod.py\",\"content\":\"y\"}]}",
               "files[0].name \"pkg\" is a file, and a directory of files[1].name \"pkg/mod.py\"");
    expect_bad("{\"language\":\"c\",\"version\":\"1\",\"files\":[{\"name\":\"a/b/c\",\"content\":\"x\"},"
               "{\"name\":\"a/b\",\"content\":\"y\"}]}",
               "files[1].name \"a/b\" is a file, and a directory of files[0].name \"a/b/c\"");
}

/* S26: a name a tool could take for an option or an @-file is refused with a
 * message that says so, in any place of the list; '-' and '@' elsewhere in a
 * name, and option-like arguments (the program's), are accepted. */
static void test_option_like_file_names(void **state)
{
    static const char *names[] = {"-o", "--version", "-", "@o", "@", "-x.c", "@main.rs"};
    static const char *fine[] = {"a-b", "a@b", "main.c-", "x@", "o"};
    struct moat_exec_request r;
    char body[512], err[256];
    size_t i;

    for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        snprintf(body, sizeof(body), "{\"language\":\"c\",\"version\":\"1\",\"files\":[{\"name\":\"%s\",\"content\":\"x\"}]}",
                 names[i]);
        expect_bad(body, "files[0].name must not begin with '-' or '@'");
        snprintf(body, sizeof(body),
                 "{\"language\":\"c\",\"version\":\"1\",\"files\":[{\"name\":\"main.c\",\"content\":\"x\"},"
                 "{\"name\":\"%s\",\"content\":\"y\"}]}",
                 names[i]);
        expect_bad(body, "files[1].name must not begin with '-' or '@'");
    }
    for (i = 0; i < sizeof(fine) / sizeof(fine[0]); i++) {
        snprintf(body, sizeof(body),
                 "{\"language\":\"c\",\"version\":\"1\",\"files\":[{\"name\":\"%s\",\"content\":\"x\"}],"
                 "\"args\":[\"-e\",\"@x\",\"--\"]}",
                 fine[i]);
        if (parse(body, &r, err, sizeof(err)) != 0)
            fail_msg("name \"%s\" refused: %s", fine[i], err);
        assert_string_equal(r.files[0].name, fine[i]);
        assert_int_equal(r.nargs, 3);
        assert_string_equal(r.args[1], "@x");
        piston_exec_request_free(&r);
    }
}

static void test_bad_encodings(void **state)
{
    static const char *b64[] = {"aGk", "aGk==", "a=Gk", "aG k", "aGl=", "!!!!"};
    char body[256];
    size_t i;

    for (i = 0; i < sizeof(b64) / sizeof(b64[0]); i++) {
        snprintf(body, sizeof(body),
                 "{\"language\":\"c\",\"version\":\"1\",\"files\":[{\"content\":\"%s\",\"encoding\":\"base64\"}]}", b64[i]);
        expect_bad(body, "files[0].content is not valid base64");
    }
    expect_bad("{\"language\":\"c\",\"version\":\"1\",\"files\":[{\"content\":\"abc\",\"encoding\":\"hex\"}]}",
               "files[0].content is not valid hex");
    expect_bad("{\"language\":\"c\",\"version\":\"1\",\"files\":[{\"content\":\"zz\",\"encoding\":\"hex\"}]}",
               "files[0].content is not valid hex");
}

static void test_too_many(void **state)
{
    char body[8192];
    size_t off, i;

    off = (size_t)snprintf(body, sizeof(body), "{\"language\":\"c\",\"version\":\"1\",\"files\":[");
    for (i = 0; i < MOAT_MAX_FILES + 1; i++)
        off += (size_t)snprintf(body + off, sizeof(body) - off, "%s{\"content\":\"x\"}", i ? "," : "");
    snprintf(body + off, sizeof(body) - off, "]}");
    expect_bad(body, "files must hold between 1 and 32");

    off = (size_t)snprintf(body, sizeof(body), "{\"language\":\"c\",\"version\":\"1\"," F ",\"args\":[");
    for (i = 0; i < MOAT_MAX_ARGS + 1; i++)
        off += (size_t)snprintf(body + off, sizeof(body) - off, "%s\"a\"", i ? "," : "");
    snprintf(body + off, sizeof(body) - off, "]}");
    expect_bad(body, "args must hold at most 64");
}

static void test_utf8_sanitize(void **state)
{
    /* valid 2/3/4-byte sequences survive; stray continuation, overlong, surrogate and truncated ones become U+FFFD */
    static const uint8_t in[] = {'a',  0xc3, 0xa9, 0xe2, 0x82, 0xac, 0xf0, 0x9f, 0x98,
                                 0x80, 0x80, 0xc0, 0xaf, 0xed, 0xa0, 0x80, 0xe2, 0x82};
    static const char want[] = "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"
                               "\xef\xbf\xbd"                         /* 0x80 */
                               "\xef\xbf\xbd\xef\xbf\xbd"             /* c0 af: two */
                               "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" /* ed a0 80: three */
                               "\xef\xbf\xbd";                        /* truncated e2 82: one */
    size_t n = 0;
    char *out = piston_utf8_sanitize(in, sizeof(in), &n);

    assert_non_null(out);
    assert_int_equal(n, strlen(want));
    assert_memory_equal(out, want, n);
    free(out);
}

static void test_result_json(void **state)
{
    static uint8_t out[] = {'h', 'i', 0xff, '\n'};
    static uint8_t err[] = "oops";
    struct moat_exec_result res;
    json_t *root, *run;
    json_error_t jerr;
    char *text;

    memset(&res, 0, sizeof(res));
    res.language = (char *)(uintptr_t) "python";
    res.version = (char *)(uintptr_t) "3.11.0";
    res.run.present = 1;
    res.run.stdout_data = out;
    res.run.stdout_len = sizeof(out);
    res.run.stderr_data = err;
    res.run.stderr_len = 4;
    res.run.output_data = out;
    res.run.output_len = sizeof(out);
    res.run.has_code = 0;
    res.run.has_signal = 1;
    res.run.signal = 9;
    res.run.status = MOAT_STATUS_SG;
    res.run.cpu_ms = 12;
    res.run.wall_ms = 34;
    res.run.memory_bytes = 1048576;

    text = piston_exec_result_json(&res);
    assert_non_null(text);
    root = json_loads(text, 0, &jerr);
    assert_non_null(root);
    assert_string_equal(json_string_value(json_object_get(root, "language")), "python");
    assert_string_equal(json_string_value(json_object_get(root, "version")), "3.11.0");
    assert_null(json_object_get(root, "compile"));
    run = json_object_get(root, "run");
    assert_non_null(run);
    assert_string_equal(json_string_value(json_object_get(run, "stdout")), "hi\xef\xbf\xbd\n");
    assert_string_equal(json_string_value(json_object_get(run, "stderr")), "oops");
    assert_true(json_is_null(json_object_get(run, "code")));
    assert_string_equal(json_string_value(json_object_get(run, "signal")), "SIGKILL");
    assert_string_equal(json_string_value(json_object_get(run, "status")), "SG");
    assert_true(json_is_null(json_object_get(run, "message")));
    assert_int_equal(json_integer_value(json_object_get(run, "cpu_time")), 12);
    assert_int_equal(json_integer_value(json_object_get(run, "wall_time")), 34);
    assert_int_equal(json_integer_value(json_object_get(run, "memory")), 1048576);
    json_decref(root);
    free(text);

    /* An OK stage with an exit code, plus a compile stage. */
    res.run.has_code = 1;
    res.run.code = 0;
    res.run.has_signal = 0;
    res.run.status = MOAT_STATUS_OK;
    res.compile.present = 1;
    res.compile.has_code = 1;
    res.compile.code = 1;
    res.compile.status = MOAT_STATUS_RE;
    res.compile.message = (char *)(uintptr_t) "compile failed";
    text = piston_exec_result_json(&res);
    assert_non_null(text);
    root = json_loads(text, 0, &jerr);
    assert_non_null(root);
    run = json_object_get(root, "run");
    assert_int_equal(json_integer_value(json_object_get(run, "code")), 0);
    assert_true(json_is_null(json_object_get(run, "signal")));
    assert_true(json_is_null(json_object_get(run, "status")));
    assert_string_equal(json_string_value(json_object_get(json_object_get(root, "compile"), "status")), "RE");
    assert_string_equal(json_string_value(json_object_get(json_object_get(root, "compile"), "message")), "compile failed");
    assert_string_equal(json_string_value(json_object_get(json_object_get(root, "compile"), "stdout")), "");
    json_decref(root);
    free(text);

    /* A failed compile, no run stage: `run` repeats the compile result, as Piston's does. */
    memset(&res.run, 0, sizeof(res.run));
    res.compile.stderr_data = err;
    res.compile.stderr_len = 4;
    text = piston_exec_result_json(&res);
    assert_non_null(text);
    root = json_loads(text, 0, &jerr);
    assert_non_null(root);
    run = json_object_get(root, "run");
    assert_true(json_equal(run, json_object_get(root, "compile")));
    assert_int_equal(json_integer_value(json_object_get(run, "code")), 1);
    assert_string_equal(json_string_value(json_object_get(run, "status")), "RE");
    assert_string_equal(json_string_value(json_object_get(run, "stderr")), "oops");
    json_decref(root);
    free(text);
}

static void test_runtimes_and_error_json(void **state)
{
    char *aliases[] = {(char *)(uintptr_t) "py", (char *)(uintptr_t) "py3"};
    struct moat_runtime items[1];
    struct moat_runtimes rt = {items, 1, {0}, NULL};
    char *text;

    memset(items, 0, sizeof(items));
    items[0].language = (char *)(uintptr_t) "python";
    items[0].version = (char *)(uintptr_t) "3.11.0";
    items[0].aliases = aliases;
    items[0].naliases = 2;
    text = piston_runtimes_json(&rt);
    assert_non_null(text);
    assert_string_equal(text, "[{\"language\":\"python\",\"version\":\"3.11.0\",\"aliases\":[\"py\",\"py3\"],"
                              "\"isolation\":[\"namespaces\"]}]");
    free(text);
    items[0].isolations = (1u << MOAT_ISOLATION_NAMESPACES) | (1u << MOAT_ISOLATION_GVISOR);
    text = piston_runtimes_json(&rt);
    assert_non_null(text);
    assert_non_null(strstr(text, "\"isolation\":[\"namespaces\",\"gvisor\"]"));
    free(text);
    items[0].isolations = 1u << MOAT_ISOLATION_GVISOR; /* a language whose manifest asks for gVisor */
    text = piston_runtimes_json(&rt);
    assert_non_null(strstr(text, "\"isolation\":[\"gvisor\"]"));
    free(text);

    text = piston_error_json("bad \"thing\"", "invalid_request", "0123456789abcdef");
    assert_non_null(text);
    assert_string_equal(text,
                        "{\"message\":\"bad \\\"thing\\\"\",\"code\":\"invalid_request\",\"request_id\":\"0123456789abcdef\"}");
    free(text);
}

/* ---- test cases: parsing, comparisons, verdicts, result JSON ---------------- */

static int same(enum piston_compare mode, double tol, const char *exp, const char *got, struct piston_diff *d)
{
    return piston_compare(mode, tol, (const uint8_t *)exp, strlen(exp), (const uint8_t *)got, strlen(got), d);
}

static void expect_diff(const struct piston_diff *d, size_t line, const char *exp, const char *got)
{
    assert_int_equal(d->line, line);
    assert_int_equal(d->exp_len, strlen(exp));
    assert_memory_equal(d->exp, exp, d->exp_len);
    assert_int_equal(d->got_len, strlen(got));
    assert_memory_equal(d->got, got, d->got_len);
}

static void test_compare_exact(void **state)
{
    struct piston_diff d;
    (void)state;

    assert_true(same(PISTON_CMP_EXACT, 0, "a\nb\n", "a\nb\n", &d));
    assert_true(same(PISTON_CMP_EXACT, 0, "", "", &d));
    assert_false(same(PISTON_CMP_EXACT, 0, "a\nb\n", "a\nb", &d)); /* a missing newline counts */
    expect_diff(&d, 2, "b", "b");
    assert_false(same(PISTON_CMP_EXACT, 0, "a\nb\nc\n", "a\nx\nc\n", &d));
    expect_diff(&d, 2, "b", "x");
    assert_false(same(PISTON_CMP_EXACT, 0, "a\r\n", "a\n", &d)); /* CRLF is a difference here */
    assert_false(same(PISTON_CMP_EXACT, 0, "x", "", &d));        /* empty output */
    expect_diff(&d, 1, "x", "");
    /* NUL bytes are bytes */
    assert_false(piston_compare(PISTON_CMP_EXACT, 0, (const uint8_t *)"a\0b", 3, (const uint8_t *)"a\0c", 3, &d));
}

static void test_compare_trimmed(void **state)
{
    struct piston_diff d;
    (void)state;

    assert_true(same(PISTON_CMP_TRIMMED, 0, "a\nb\n", "a  \nb\t\n", &d));   /* trailing whitespace */
    assert_true(same(PISTON_CMP_TRIMMED, 0, "a\nb\n", "a\r\nb\r\n", &d));   /* CRLF */
    assert_true(same(PISTON_CMP_TRIMMED, 0, "a\nb", "a\nb\n\n\n  \n", &d)); /* trailing blank lines */
    assert_true(same(PISTON_CMP_TRIMMED, 0, "", "\n\n", &d));               /* empty output */
    assert_true(same(PISTON_CMP_TRIMMED, 0, "\n", "", &d));
    assert_false(same(PISTON_CMP_TRIMMED, 0, "a\nb\n", " a\nb\n", &d)); /* leading space counts */
    expect_diff(&d, 1, "a", " a");
    assert_false(same(PISTON_CMP_TRIMMED, 0, "a\n\nb\n", "a\nb\n", &d)); /* a blank line inside counts */
    expect_diff(&d, 2, "", "b");
    assert_false(same(PISTON_CMP_TRIMMED, 0, "1\n2\n3\n", "1\n2\n", &d)); /* output ended first */
    expect_diff(&d, 3, "3", "");
    assert_false(same(PISTON_CMP_TRIMMED, 0, "1\n", "1\n2\n", &d)); /* expected ended first */
    expect_diff(&d, 2, "", "2");
    assert_false(same(PISTON_CMP_TRIMMED, 0, "x", "", &d));
    expect_diff(&d, 1, "x", "");
}

static void test_compare_tokens(void **state)
{
    struct piston_diff d;
    (void)state;

    assert_true(same(PISTON_CMP_TOKENS, 0, "1 2 3\n", "1\n2\t\t3", &d));
    assert_true(same(PISTON_CMP_TOKENS, 0, "", " \r\n\t", &d));
    assert_false(same(PISTON_CMP_TOKENS, 0, "1 2\n3 4\n", "1 2\n3 5\n", &d));
    expect_diff(&d, 2, "3 4", "3 5");
    assert_false(same(PISTON_CMP_TOKENS, 0, "1 2\n3\n", "1 2\n", &d));
    expect_diff(&d, 2, "3", "");
    assert_false(same(PISTON_CMP_TOKENS, 0, "1.0", "1", &d)); /* tokens are text */
}

static void test_compare_float(void **state)
{
    struct piston_diff d;
    (void)state;

    assert_true(same(PISTON_CMP_FLOAT, 1e-6, "0.333333", "0.3333333", &d));
    assert_true(same(PISTON_CMP_FLOAT, 1e-6, "1.0 2", "1 2.0000000001", &d));
    assert_false(same(PISTON_CMP_FLOAT, 1e-6, "0.5", "0.50001", &d));
    expect_diff(&d, 1, "0.5", "0.50001");
    assert_true(same(PISTON_CMP_FLOAT, 1e-3, "1000000", "1000500", &d)); /* relative */
    assert_false(same(PISTON_CMP_FLOAT, 0, "1", "1.0000001", &d));       /* tolerance 0: equal numbers only */
    assert_true(same(PISTON_CMP_FLOAT, 0, "1", "1.0", &d));
    /* NaN equals NaN only; infinities equal themselves */
    assert_true(same(PISTON_CMP_FLOAT, 1e-6, "nan", "NaN", &d));
    assert_false(same(PISTON_CMP_FLOAT, 1e9, "nan", "0", &d));
    assert_false(same(PISTON_CMP_FLOAT, 1e9, "0", "nan", &d));
    assert_true(same(PISTON_CMP_FLOAT, 1e-6, "inf", "Infinity", &d));
    assert_false(same(PISTON_CMP_FLOAT, 1e300, "inf", "-inf", &d));
    assert_false(same(PISTON_CMP_FLOAT, 1e300, "inf", "1e300", &d));
    /* words are compared as words; an empty output against numbers */
    assert_true(same(PISTON_CMP_FLOAT, 1e-6, "YES 0.1", "YES 0.1000000001", &d));
    assert_false(same(PISTON_CMP_FLOAT, 1e-6, "YES", "yes", &d));
    assert_false(same(PISTON_CMP_FLOAT, 1e-6, "1", "", &d));
    expect_diff(&d, 1, "1", "");
    assert_false(same(PISTON_CMP_FLOAT, 1e-6, "1x", "1", &d)); /* not a number as a whole */
}

static void test_tests_parse(void **state)
{
    struct moat_exec_request r;
    struct piston_tests t;
    char err[256];
    const char *body = "{\"language\":\"c\",\"version\":\"*\"," F ",\"stdin\":\"def\",\"args\":[\"x\"],\"tests_timeout\":5000,"
                       "\"tests\":[{\"name\":\"one\",\"stdin\":\"1\",\"args\":[],\"expected_output\":\"2\",\"compare\":\"float\","
                       "\"tolerance\":0.5,\"run_timeout\":100,\"run_cpu_time\":50,\"run_memory_limit\":1000000},{}]}";
    (void)state;

    assert_int_equal(piston_parse_exec_request_tests(body, strlen(body), &r, &t, NULL, err, sizeof(err)), 0);
    assert_int_equal(r.ntests, 2);
    assert_int_equal(t.count, 2);
    assert_true(r.tests_wall_ms == 5000);
    assert_string_equal(t.items[0].name, "one");
    assert_int_equal(t.items[0].compare, PISTON_CMP_FLOAT);
    assert_true(t.items[0].tolerance == 0.5);
    assert_int_equal(t.items[0].expected_len, 1);
    assert_int_equal(r.tests[0].stdin_len, 1);
    assert_int_equal(r.tests[0].nargs, 0); /* its own, empty */
    assert_true(r.tests[0].run_timeout_ms == 100 && r.tests[0].run_cpu_ms == 50 && r.tests[0].run_memory_bytes == 1000000);
    /* the second takes the request's stdin and args, the defaults */
    assert_string_equal(t.items[1].name, "test 2");
    assert_int_equal(t.items[1].compare, PISTON_CMP_TRIMMED);
    assert_null(t.items[1].expected);
    assert_int_equal(r.tests[1].stdin_len, 3);
    assert_memory_equal(r.tests[1].stdin_data, "def", 3);
    assert_int_equal(r.tests[1].nargs, 1);
    assert_string_equal(r.tests[1].args[0], "x");
    assert_true(r.tests[1].run_timeout_ms == -1);
    piston_exec_request_free(&r);
    piston_tests_free(&t);

    /* the plain parser knows no tests */
    assert_int_equal(piston_parse_exec_request(body, strlen(body), &r, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "unknown field 'tests"));
}

/* metadata (metadata.c): kept as sent when it is one; refused, naming
 * the member, when not; an unknown field where the caller takes none. */
static json_t *parse_meta(const char *meta, char *err, size_t errlen, int *rc)
{
    struct moat_exec_request r;
    struct piston_tests t;
    json_t *m = (json_t *)1;
    char body[160 * 1024];

    snprintf(body, sizeof(body), "{\"language\":\"c\",\"version\":\"*\"," F ",\"metadata\":%s}", meta);
    *rc = piston_parse_exec_request_tests(body, strlen(body), &r, &t, &m, err, errlen);
    if (*rc == 0) {
        piston_exec_request_free(&r);
        piston_tests_free(&t);
    }
    return m;
}

static void expect_bad_metadata(const char *meta, const char *needle)
{
    char err[256];
    int rc;
    json_t *m = parse_meta(meta, err, sizeof(err), &rc);

    assert_int_equal(rc, -1);
    assert_null(m);
    if (strstr(err, needle) == NULL)
        fail_msg("metadata %s: message \"%s\" does not mention \"%s\"", meta, err, needle);
}

static void test_metadata(void **state)
{
    struct moat_exec_request r;
    char err[256], *text;
    int rc;
    json_t *m;
    (void)state;

    m = parse_meta("{\"prompt\":\"sum two numbers \\u00e9\",\"purpose\":\"ci\",\"dependencies\":[\"numpy>=1.26\"],"
                   "\"labels\":{\"team\":\"search\",\"ticket/id\":\"A-1\"}}",
                   err, sizeof(err), &rc);
    assert_int_equal(rc, 0);
    assert_non_null(m);
    text = json_dumps(m, JSON_COMPACT);
    assert_string_equal(text, "{\"prompt\":\"sum two numbers \u00e9\",\"purpose\":\"ci\",\"dependencies\":[\"numpy>=1.26\"],"
                              "\"labels\":{\"team\":\"search\",\"ticket/id\":\"A-1\"}}"); /* verbatim, in order */
    free(text);
    json_decref(m);
    m = parse_meta("{}", err, sizeof(err), &rc);
    assert_int_equal(rc, 0);
    assert_true(json_is_object(m) && json_object_size(m) == 0);
    json_decref(m);

    expect_bad_metadata("\"a prompt\"", "metadata must be an object");
    expect_bad_metadata("{\"promt\":\"x\"}", "unknown member 'promt'");
    expect_bad_metadata("{\"prompt\":1}", "metadata.prompt must be a string");
    expect_bad_metadata("{\"prompt\":\"a\\u0000b\"}", "without NUL");
    expect_bad_metadata("{\"dependencies\":\"numpy\"}", "metadata.dependencies must be an array");
    expect_bad_metadata("{\"dependencies\":[1]}", "metadata.dependencies[0]");
    expect_bad_metadata("{\"labels\":[\"x\"]}", "metadata.labels must be an object");
    expect_bad_metadata("{\"labels\":{\"a b\":\"x\"}}", "a label's name");
    expect_bad_metadata("{\"labels\":{\"team\":7}}", "metadata.labels.team must be a string");

    /* the cap is the whole object's, as compact JSON */
    size_t n = GW_METADATA_MAX_BYTES;
    char *big = malloc(n + 32);
    assert_non_null(big);
    memcpy(big, "{\"prompt\":\"", 11);
    memset(big + 11, 'x', n);
    memcpy(big + 11 + n, "\"}", 3);
    expect_bad_metadata(big, "at most");
    free(big);

    /* the plain parser, and a session's init, know what they take */
    const char *body = "{\"language\":\"c\",\"version\":\"*\"," F ",\"metadata\":{}}";
    assert_int_equal(piston_parse_exec_request(body, strlen(body), &r, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "unknown field 'metadata"));
}

static void expect_bad_tests(const char *body, const char *needle)
{
    struct moat_exec_request r;
    struct piston_tests t;
    char err[256];

    assert_int_equal(piston_parse_exec_request_tests(body, strlen(body), &r, &t, NULL, err, sizeof(err)), -1);
    if (strstr(err, needle) == NULL)
        fail_msg("body %s: message \"%s\" does not mention \"%s\"", body, err, needle);
    assert_null(r.tests);
    assert_null(t.items);
}

#define CB "{\"language\":\"c\",\"version\":\"*\"," F ","

static void test_tests_rejections(void **state)
{
    (void)state;
    expect_bad_tests(CB "\"tests\":{}}", "tests must be an array");
    expect_bad_tests(CB "\"tests\":[]}", "tests must hold between 1 and 64 cases");
    expect_bad_tests(CB "\"tests\":[1]}", "tests[0] must be an object");
    expect_bad_tests(CB "\"tests\":[{},{\"x\":1}]}", "tests[1]: unknown field 'x'");
    expect_bad_tests(CB "\"tests\":[{\"compare\":\"regex\"}]}", "tests[0].compare must be one of exact, trimmed, tokens, float");
    expect_bad_tests(CB "\"tests\":[{\"tolerance\":1}]}", "tests[0].tolerance goes with compare \"float\" only");
    expect_bad_tests(CB "\"tests\":[{\"compare\":\"float\",\"tolerance\":\"1\"}]}", "tests[0].tolerance must be a non-negative");
    expect_bad_tests(CB "\"tests\":[{\"run_cpu_time\":0}]}", "tests[0].run_cpu_time must be -1 or a positive integer");
    expect_bad_tests(CB "\"tests\":[{\"run_memory_limit\":-2}]}", "tests[0].run_memory_limit must be -1 or a positive");
    expect_bad_tests(CB "\"tests\":[{\"args\":[\"a\",2]}]}", "tests[0].args[1] must be a string");
    expect_bad_tests(CB "\"tests\":[{\"stdin\":null}]}", "tests[0].stdin must be a string");
    expect_bad_tests(CB "\"tests\":[{\"name\":\"a\\nb\"}]}", "tests[0].name must be 1 to 128 bytes");
    expect_bad_tests(CB "\"tests_timeout\":10}", "tests_timeout goes with tests only");
    expect_bad_tests(CB "\"tests\":[{}],\"tests_timeout\":\"1\"}", "tests_timeout must be -1 or a positive integer");
}

static void test_tests_verdicts_and_json(void **state)
{
    static char n0[] = "ok", n1[] = "wa", n2[] = "tle", n3[] = "skipped";
    static uint8_t e0[] = "3", e1[] = "4";
    struct piston_test items[4] = {
        {n0, e0, 1, PISTON_CMP_TRIMMED, 0},
        {n1, e1, 1, PISTON_CMP_TRIMMED, 0},
        {n2, NULL, 0, PISTON_CMP_TRIMMED, 0},
        {n3, NULL, 0, PISTON_CMP_TRIMMED, 0},
    };
    struct piston_tests tests = {items, 4};
    static uint8_t out[] = "3\n";
    struct moat_stage_result st[3] = {
        {.present = 1, .stdout_data = out, .stdout_len = 2, .has_code = 1, .status = MOAT_STATUS_OK},
        {.present = 1, .stdout_data = out, .stdout_len = 2, .has_code = 1, .status = MOAT_STATUS_OK},
        {.present = 1, .status = MOAT_STATUS_TO, .clock = MOAT_CLOCK_CPU, .has_signal = 1, .signal = 9},
    };
    static char lang[] = "c", ver[] = "12";
    struct moat_exec_result res = {.language = lang, .version = ver, .tests = st, .ntests = 3};
    struct piston_diff d;
    json_t *audit = NULL;
    (void)state;

    assert_int_equal(piston_judge_case(&st[0], &items[0], &d), PISTON_ACCEPTED);
    assert_int_equal(piston_judge_case(&st[1], &items[1], &d), PISTON_WRONG_ANSWER);
    assert_int_equal(piston_judge_case(&st[2], &items[2], &d), PISTON_TIME_LIMIT);
    assert_int_equal(piston_judge_case(NULL, &items[3], &d), PISTON_SKIPPED);
    struct moat_stage_result other = {.present = 1, .status = MOAT_STATUS_ML};
    assert_int_equal(piston_judge_case(&other, &items[2], &d), PISTON_MEMORY_LIMIT);
    other.status = MOAT_STATUS_SG;
    assert_int_equal(piston_judge_case(&other, &items[2], &d), PISTON_RUNTIME_ERROR);
    other.status = MOAT_STATUS_EL;
    assert_int_equal(piston_judge_case(&other, &items[2], &d), PISTON_OUTPUT_LIMIT);
    other.status = MOAT_STATUS_XX;
    assert_int_equal(piston_judge_case(&other, &items[2], &d), PISTON_INTERNAL_ERROR);

    char *text = piston_exec_result_tests_json(&res, &tests, &audit);
    assert_non_null(text);
    json_t *o = json_loads(text, 0, NULL);
    assert_non_null(o);
    json_t *t = json_object_get(o, "tests");
    assert_int_equal(json_array_size(t), 4);
    assert_string_equal(json_string_value(json_object_get(json_array_get(t, 1), "verdict")), "Wrong Answer");
    json_t *diff = json_object_get(json_array_get(t, 1), "diff");
    assert_int_equal(json_integer_value(json_object_get(diff, "line")), 1);
    assert_string_equal(json_string_value(json_object_get(diff, "expected")), "4");
    assert_string_equal(json_string_value(json_object_get(diff, "got")), "3");
    assert_string_equal(json_string_value(json_object_get(json_array_get(t, 2), "clock")), "cpu");
    assert_string_equal(json_string_value(json_object_get(json_array_get(t, 3), "verdict")), "Skipped");
    assert_null(json_object_get(json_array_get(t, 3), "stdout"));
    json_t *sum = json_object_get(o, "summary");
    assert_int_equal(json_integer_value(json_object_get(sum, "passed")), 1);
    assert_int_equal(json_integer_value(json_object_get(sum, "total")), 4);
    assert_string_equal(json_string_value(json_object_get(sum, "verdict")), "Wrong Answer");
    assert_string_equal(json_string_value(json_object_get(sum, "first_failure")), "wa");
    /* `run` is the first case's */
    assert_string_equal(json_string_value(json_object_get(json_object_get(o, "run"), "stdout")), "3\n");
    assert_non_null(audit);
    assert_int_equal(json_array_size(json_object_get(audit, "verdicts")), 4);
    json_decref(audit);
    json_decref(o);
    free(text);

    /* a failed compile: every case is a Compilation Error */
    res.ntests = 0;
    res.compile = (struct moat_stage_result){.present = 1, .status = MOAT_STATUS_RE, .has_code = 1, .code = 1};
    text = piston_exec_result_tests_json(&res, &tests, NULL);
    o = json_loads(text, 0, NULL);
    assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(o, "tests"), 0), "verdict")),
                        "Compilation Error");
    assert_string_equal(json_string_value(json_object_get(json_object_get(o, "summary"), "verdict")), "Compilation Error");
    json_decref(o);
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_compare_exact),
        cmocka_unit_test(test_compare_trimmed),
        cmocka_unit_test(test_compare_tokens),
        cmocka_unit_test(test_compare_float),
        cmocka_unit_test(test_tests_parse),
        cmocka_unit_test(test_tests_rejections),
        cmocka_unit_test(test_tests_verdicts_and_json),
        cmocka_unit_test(test_valid_request),
        cmocka_unit_test(test_minimal_defaults),
        cmocka_unit_test(test_rejections),
        cmocka_unit_test(test_bad_file_names),
        cmocka_unit_test(test_path_tricks),
        cmocka_unit_test(test_option_like_file_names),
        cmocka_unit_test(test_bad_encodings),
        cmocka_unit_test(test_too_many),
        cmocka_unit_test(test_utf8_sanitize),
        cmocka_unit_test(test_result_json),
        cmocka_unit_test(test_runtimes_and_error_json),
        cmocka_unit_test(test_metadata),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
