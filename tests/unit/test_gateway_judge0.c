/*
 * test_gateway_judge0.c - Judge0 CE's API in moat's terms, through the real
 * judge0_api.c (query, submission, verdicts, records, rendering, the
 * catalogue) and judge0_store.c (bounds, expiry, tenants; the directory
 * store: files, restarts, corrupt files and planted links).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "apis/judge0/judge0_api.h"
#include "common/gw_limits.h"
#include "store/judge0_store.h"
#include "apis/judge0/judge0_zip.h"
#include "moat_base64.h"

#include <zlib.h>
#include <openssl/sha.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---------------------------------------------------------------- query */

static int q(const char *s, unsigned allowed, struct judge0_query *out, char *err)
{
    err[0] = '\0';
    return judge0_parse_query(s, s != NULL ? strlen(s) : 0, allowed, out, err, 256);
}

static const unsigned ALL_Q = JUDGE0_Q_WAIT | JUDGE0_Q_BASE64 | JUDGE0_Q_FIELDS;

static void test_query(void **state)
{
    struct judge0_query out;
    char err[256];

    (void)state;
    /* none: Judge0's default fields, in its order */
    assert_int_equal(q(NULL, ALL_Q, &out, err), 0);
    assert_int_equal(out.wait, 0);
    assert_int_equal(out.base64, 0);
    assert_int_equal(out.nfields, 8);
    assert_int_equal(out.order[0], JUDGE0_F_STDOUT);
    assert_int_equal(out.order[7], JUDGE0_F_STATUS);
    assert_int_equal(q("wait=true&base64_encoded=true&fields=token,status_id,stdout", ALL_Q, &out, err), 0);
    assert_int_equal(out.wait, 1);
    assert_int_equal(out.base64, 1);
    assert_int_equal(out.nfields, 3);
    assert_int_equal(out.order[0], JUDGE0_F_TOKEN);
    assert_int_equal(out.order[2], JUDGE0_F_STDOUT);
    /* percent-escapes, "*" */
    assert_int_equal(q("fields=token%2Cstatus", ALL_Q, &out, err), 0);
    assert_int_equal(out.nfields, 2);
    assert_int_equal(q("fields=*", ALL_Q, &out, err), 0);
    assert_int_equal(out.nfields, JUDGE0_NFIELDS);
    /* refusals name what is wrong */
    assert_int_equal(q("fields=stdout,bogus,nope", ALL_Q, &out, err), -1);
    assert_string_equal(err, "invalid fields: [bogus, nope]");
    assert_int_equal(q("wait=yes", ALL_Q, &out, err), -1);
    assert_string_equal(err, "wait must be true or false");
    assert_int_equal(q("base64_encoded=1", ALL_Q, &out, err), -1);
    assert_int_equal(q("page=2", ALL_Q, &out, err), -1);
    assert_string_equal(err, "unknown query parameter: page");
    assert_int_equal(q("wait=true", JUDGE0_Q_BASE64 | JUDGE0_Q_FIELDS, &out, err), -1);
    assert_string_equal(err, "unknown query parameter: wait");
    assert_int_equal(q("wait=true&wait=false", ALL_Q, &out, err), -1);
    assert_int_equal(q("wait", ALL_Q, &out, err), -1);
    assert_int_equal(q("fields=%zz", ALL_Q, &out, err), -1);
    assert_int_equal(q("fields=%00", ALL_Q, &out, err), -1);
    /* tokens= (GET /submissions/batch): 1 to 20, a malformed one kept as "" (not found) */
    const unsigned batch = JUDGE0_Q_TOKENS | JUDGE0_Q_FIELDS | JUDGE0_Q_BASE64;
    assert_int_equal(q("tokens=00000000-0000-4000-8000-000000000000,nope&fields=token", batch, &out, err), 0);
    assert_int_equal(out.ntokens, 2);
    assert_string_equal(out.tokens[0], "00000000-0000-4000-8000-000000000000");
    assert_string_equal(out.tokens[1], "");
    assert_int_equal(q("fields=token", batch, &out, err), -1);
    assert_string_equal(err, "there should be at least one submission in a batch");
    assert_int_equal(q("tokens=", batch, &out, err), -1);
    assert_string_equal(err, "there should be at least one submission in a batch");
    char many[1024] = "tokens=a";
    for (int i = 0; i < 20; i++)
        strcat(many, ",a");
    assert_int_equal(q(many, batch, &out, err), -1);
    assert_string_equal(err, "number of submissions in a batch should be less than or equal to 20");
    assert_int_equal(q("tokens=a", ALL_Q, &out, err), -1); /* only where the route takes it */
}

/* ----------------------------------------------------------- submission */

static int parse(const char *body, int base64, struct judge0_request *j, json_t **errors, char *err)
{
    err[0] = '\0';
    return judge0_parse_submission(body, strlen(body), base64, j, errors, err, 256);
}

static void test_submission_valid(void **state)
{
    const char *body =
        "{\"source_code\":\"print(input())\",\"language_id\":71,\"stdin\":\"world\",\"expected_output\":\"hello, world\","
        "\"cpu_time_limit\":2,\"wall_time_limit\":1.5,\"memory_limit\":128000,\"stack_limit\":65536,"
        "\"max_processes_and_or_threads\":null,\"max_file_size\":9000,\"redirect_stderr_to_stdout\":true,"
        "\"number_of_runs\":1,\"command_line_arguments\":\"a 'b c' \\\"d\\\"\",\"compiler_options\":\"\","
        "\"enable_network\":false,\"cpu_extra_time\":0.5,\"callback_url\":null,\"additional_files\":null}";
    struct judge0_request j;
    struct moat_exec_request e;
    json_t *errors;
    char err[256];

    (void)state;
    assert_int_equal(parse(body, 0, &j, &errors, err), 0);
    assert_int_equal(j.language_id, 71);
    assert_string_equal(j.lang->moat, "python");
    assert_int_equal(j.source_len, 14);
    assert_memory_equal(j.stdin_data, "world", 5);
    assert_int_equal(j.nargs, 3);
    assert_string_equal(j.args[0], "a");
    assert_string_equal(j.args[1], "b c");
    assert_string_equal(j.args[2], "d");
    assert_int_equal(j.redirect_stderr, 1);
    assert_int_equal(judge0_exec_request(&j, &e), 0);
    assert_string_equal(e.language, "python");
    assert_string_equal(e.version, "*");
    assert_int_equal(e.nfiles, 1);
    assert_string_equal(e.files[0].name, "script.py");
    assert_int_equal(e.run_timeout_ms, 1500); /* the wall clock: wall_time_limit */
    assert_int_equal(e.run_cpu_ms, 2500);     /* the CPU clock: cpu_time_limit and cpu_extra_time */
    assert_int_equal(e.run_memory_bytes, 128000LL * 1024);
    assert_int_equal(e.run_stack_kib, 65536);
    assert_int_equal(e.run_processes, -1);
    assert_int_equal(e.run_file_size_kib, 9000);
    assert_int_equal(e.ncompiler_options, 0);
    assert_int_equal(e.ntests, 0);
    assert_int_equal(e.compile_timeout_ms, -1);
    assert_int_equal(e.stdin_len, 5);
    assert_int_equal(e.nargs, 3);
    moat_exec_request_free(&e);
    judge0_request_free(&j);

    /* the minimum: defaults everywhere */
    assert_int_equal(parse("{\"source_code\":\"x\",\"language_id\":50}", 0, &j, &errors, err), 0);
    assert_int_equal(judge0_exec_request(&j, &e), 0);
    assert_string_equal(e.files[0].name, "main.c");
    assert_int_equal(e.run_timeout_ms, -1);
    assert_int_equal(e.run_memory_bytes, -1);
    assert_null(e.stdin_data);
    moat_exec_request_free(&e);
    judge0_request_free(&j);

    /* cpu_time_limit alone; fractions round up to whole milliseconds */
    assert_int_equal(parse("{\"source_code\":\"x\",\"language_id\":50,\"cpu_time_limit\":0.0005}", 0, &j, &errors, err), 0);
    assert_int_equal(judge0_exec_request(&j, &e), 0);
    assert_int_equal(e.run_timeout_ms, 1);
    assert_int_equal(e.run_cpu_ms, 1);
    moat_exec_request_free(&e);
    judge0_request_free(&j);
}

/* compiler_options: split on white space, each its own word; the allow-list decides (the backend again) */
static void test_submission_compiler_options(void **state)
{
    char p0[] = "-O2", p1[] = "-D{ident}={value}";
    char *pats[] = {p0, p1};
    struct judge0_request j;
    struct moat_exec_request e;
    json_t *errors = NULL;
    char err[256];

    (void)state;
    assert_int_equal(
        parse("{\"source_code\":\"x\",\"language_id\":50,\"compiler_options\":\"  -O2\\t -DX=5 \"}", 0, &j, &errors, err), 0);
    assert_int_equal(j.ncompiler_options, 2);
    assert_string_equal(j.compiler_options[0], "-O2");
    assert_string_equal(j.compiler_options[1], "-DX=5");
    assert_int_equal(judge0_check_options(&j, pats, 2, &errors, err, sizeof(err)), 0);
    assert_null(errors);
    assert_int_equal(judge0_exec_request(&j, &e), 0);
    assert_int_equal(e.ncompiler_options, 2);
    assert_string_equal(e.compiler_options[1], "-DX=5");
    moat_exec_request_free(&e);
    /* the second pattern alone: -O2 refused, named */
    assert_int_equal(judge0_check_options(&j, pats + 1, 1, &errors, err, sizeof(err)), -2);
    assert_string_equal(err, "compiler option \"-O2\" is not allowed for language c");
    assert_string_equal(json_string_value(json_array_get(json_object_get(errors, "compiler_options"), 0)), err);
    json_decref(errors);
    /* no allow-list at all */
    assert_int_equal(judge0_check_options(&j, NULL, 0, &errors, err, sizeof(err)), -2);
    assert_string_equal(err, "compiler_options are not allowed for language c: it accepts no compiler options");
    json_decref(errors);
    judge0_request_free(&j);
    /* dangerous words, one at a time */
    static const char *const bad[] = {"-fplugin=/tmp/x.so", "-wrapper /bin/sh", "@/etc/passwd", "-o /tmp/x", "; rm -rf /"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char body[256];
        snprintf(body, sizeof(body), "{\"source_code\":\"x\",\"language_id\":50,\"compiler_options\":\"%s\"}", bad[i]);
        assert_int_equal(parse(body, 0, &j, &errors, err), 0);
        assert_int_equal(judge0_check_options(&j, pats, 2, &errors, err, sizeof(err)), -2);
        json_decref(errors);
        judge0_request_free(&j);
    }
    /* empty: none */
    assert_int_equal(parse("{\"source_code\":\"x\",\"language_id\":50,\"compiler_options\":\"   \"}", 0, &j, &errors, err), 0);
    assert_int_equal(j.ncompiler_options, 0);
    judge0_request_free(&j);
}

/* number_of_runs > 1: as many test cases, each the submission's stdin and arguments */
static void test_submission_runs(void **state)
{
    struct judge0_request j;
    struct moat_exec_request e;
    json_t *errors = NULL;
    char err[256];

    (void)state;
    assert_int_equal(parse("{\"source_code\":\"x\",\"language_id\":71,\"number_of_runs\":3,\"stdin\":\"in\","
                           "\"command_line_arguments\":\"a b\"}",
                           0, &j, &errors, err),
                     0);
    assert_int_equal(judge0_exec_request(&j, &e), 0);
    assert_int_equal(e.ntests, 3);
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(e.tests[i].stdin_len, 2);
        assert_memory_equal(e.tests[i].stdin_data, "in", 2);
        assert_int_equal(e.tests[i].nargs, 2);
        assert_string_equal(e.tests[i].args[1], "b");
        assert_int_equal(e.tests[i].run_timeout_ms, -1);
    }
    assert_int_equal(e.tests_wall_ms, -1);
    moat_exec_request_free(&e);
    judge0_request_free(&j);
}

static void test_submission_base64(void **state)
{
    struct judge0_request j;
    json_t *errors;
    char err[256];

    (void)state;
    /* "print(1)\n" with a line break inside the base64 (Ruby's encode64 does that) */
    assert_int_equal(parse("{\"source_code\":\"cHJpbnQo\\nMSkK\",\"language_id\":71,\"stdin\":\"AP8=\"}", 1, &j, &errors, err), 0);
    assert_int_equal(j.source_len, 9);
    assert_memory_equal(j.source, "print(1)\n", 9);
    assert_int_equal(j.stdin_len, 2);
    assert_memory_equal(j.stdin_data, "\x00\xff", 2);
    judge0_request_free(&j);
    assert_int_equal(parse("{\"source_code\":\"not base64!\",\"language_id\":71}", 1, &j, &errors, err), -2);
    assert_string_equal(err, "source_code is not valid base64");
    assert_non_null(json_object_get(errors, "source_code"));
    json_decref(errors);
}

/* A body that is a 400: err names the member. */
static void expect_400(const char *body, const char *msg)
{
    struct judge0_request j;
    json_t *errors = NULL;
    char err[256];

    assert_int_equal(parse(body, 0, &j, &errors, err), -1);
    assert_null(errors);
    assert_string_equal(err, msg);
}

static void test_submission_malformed(void **state)
{
    (void)state;
    expect_400("{\"source_code\":\"x\",\"language_id\":71,\"priority\":1}", "unknown field: priority");
    expect_400("{\"source_code\":1,\"language_id\":71}", "source_code must be a string");
    expect_400("{\"source_code\":\"x\",\"language_id\":\"71\"}", "language_id must be an integer");
    expect_400("{\"source_code\":\"x\",\"language_id\":71,\"cpu_time_limit\":\"2\"}", "cpu_time_limit must be a number");
    expect_400("{\"source_code\":\"x\",\"language_id\":71,\"redirect_stderr_to_stdout\":1}",
               "redirect_stderr_to_stdout must be true or false");
    expect_400("[1]", "the body must be a JSON object");
    struct judge0_request j;
    json_t *errors;
    char err[256];
    assert_int_equal(parse("{\"source_code\":\"x\",\"source_code\":\"y\",\"language_id\":71}", 0, &j, &errors, err), -1);
    assert_non_null(strstr(err, "invalid JSON"));
}

static void test_batch_body(void **state)
{
    char err[256], body[4096] = "{\"submissions\":[";
    json_t *items;

    (void)state;
    assert_int_equal(judge0_parse_batch("{\"submissions\":[{\"a\":1},2]}", 27, &items, err, sizeof(err)), 0);
    assert_int_equal(json_array_size(items), 2); /* each entry is judged on its own later */
    json_decref(items);
    static const struct {
        const char *body, *err;
    } bad[] = {
        {"{\"submissions\":[]}", "there should be at least one submission in a batch"},
        {"{\"submissions\":{}}", "the body must be {\"submissions\": [...]}"},
        {"[]", "the body must be {\"submissions\": [...]}"},
        {"{\"submissions\":[1],\"wait\":true}", "unknown field: wait"},
        {"{\"submissions\":[1],\"submissions\":[2]}", NULL},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(judge0_parse_batch(bad[i].body, strlen(bad[i].body), &items, err, sizeof(err)), -1);
        assert_null(items);
        if (bad[i].err != NULL)
            assert_string_equal(err, bad[i].err);
    }
    for (int i = 0; i < 21; i++)
        strcat(body, i ? ",{}" : "{}");
    strcat(body, "]}");
    assert_int_equal(judge0_parse_batch(body, strlen(body), &items, err, sizeof(err)), -1);
    assert_string_equal(err, "number of submissions in a batch should be less than or equal to 20");
}

/* A body that is a 422: field holds message (Judge0's shape). */
static void expect_422(const char *body, const char *field, const char *message)
{
    struct judge0_request j;
    json_t *errors = NULL;
    char err[256], want[512];

    assert_int_equal(parse(body, 0, &j, &errors, err), -2);
    json_t *a = json_object_get(errors, field);
    assert_true(json_is_array(a));
    assert_string_equal(json_string_value(json_array_get(a, 0)), message);
    snprintf(want, sizeof(want), "%s %s", field, message);
    if (json_object_size(errors) == 1)
        assert_string_equal(err, want);
    json_decref(errors);
}

static void test_submission_refused(void **state)
{
    (void)state;
    expect_422("{\"language_id\":71}", "source_code", "can't be blank");
    expect_422("{\"source_code\":\"x\"}", "language_id", "can't be blank");
    expect_422("{\"source_code\":\"x\",\"language_id\":999}", "language_id", "language with id 999 doesn't exist");
    expect_422("{\"source_code\":\"x\",\"language_id\":71,\"enable_network\":true}", "enable_network",
               "is not allowed: boxes have no network");
    expect_422("{\"source_code\":\"x\",\"language_id\":50,\"compiler_options\":\"-DX='a b'\"}", "compiler_options",
               "may only be options separated by spaces, without quotes: they are never given to a shell");
    expect_422("{\"source_code\":\"x\",\"language_id\":50,\"compiler_options\":\"-O2 \\\"-DX\\\"\"}", "compiler_options",
               "may only be options separated by spaces, without quotes: they are never given to a shell");
    expect_422("{\"source_code\":\"x\",\"language_id\":71,\"number_of_runs\":21}", "number_of_runs", "must be between 1 and 20");
    expect_422("{\"source_code\":\"x\",\"language_id\":71,\"number_of_runs\":0}", "number_of_runs", "must be between 1 and 20");
    expect_422("{\"source_code\":\"x\",\"language_id\":71,\"number_of_runs\":2,\"redirect_stderr_to_stdout\":true}",
               "number_of_runs", "must be 1 with redirect_stderr_to_stdout");
    expect_422("{\"source_code\":\"x\",\"language_id\":71,\"stack_limit\":65537}", "stack_limit",
               "must be less than or equal to 65536");
    expect_422("{\"source_code\":\"x\",\"language_id\":71,\"max_processes_and_or_threads\":65}", "max_processes_and_or_threads",
               "must be less than or equal to 64");
    expect_422("{\"source_code\":\"x\",\"language_id\":71,\"max_file_size\":99999999}", "max_file_size",
               "must be less than or equal to 9765");
    expect_422("{\"source_code\":\"x\",\"language_id\":71,\"cpu_time_limit\":0}", "cpu_time_limit", "must be greater than 0");
    expect_422("{\"source_code\":\"x\",\"language_id\":71,\"wall_time_limit\":-1}", "wall_time_limit", "must be greater than 0");
    expect_422("{\"source_code\":\"x\",\"language_id\":71,\"cpu_extra_time\":6}", "cpu_extra_time",
               "must be less than or equal to 5");
    expect_422("{\"source_code\":\"x\",\"language_id\":71,\"memory_limit\":0}", "memory_limit", "must be greater than 0");
    expect_422("{\"source_code\":\"x\",\"language_id\":71,\"callback_url\":\"\"}", "callback_url",
               "must be a URL of 1 to 2048 bytes");
    /* a callback_url is parsed, then judged against the tenant's rules (callback_policy.c) */
    {
        struct judge0_request j;
        struct cb_url allow;
        struct cb_tenant_rules none = {NULL, 0, 0}, rules = {&allow, 1, 0};
        json_t *errors = NULL;
        char err[256];
        assert_int_equal(
            parse("{\"source_code\":\"x\",\"language_id\":71,\"callback_url\":\"https://example.com/cb/1\"}", 0, &j, &errors, err),
            0);
        assert_string_equal(j.callback_url, "https://example.com/cb/1");
        assert_int_equal(judge0_check_callback(&j, &none, &errors, err, sizeof(err)), -2);
        assert_string_equal(json_string_value(json_array_get(json_object_get(errors, "callback_url"), 0)),
                            "callbacks are not enabled for this tenant (its configuration lists no allowed URL prefixes)");
        json_decref(errors);
        assert_int_equal(cb_url_parse("https://example.com/cb", 22, &allow, err, sizeof(err)), 0);
        assert_int_equal(judge0_check_callback(&j, &rules, &errors, err, sizeof(err)), 0);
        assert_null(errors);
        judge0_request_free(&j);
    }
    expect_422("{\"source_code\":\"x\",\"language_id\":71,\"enable_per_process_and_thread_time_limit\":true}",
               "enable_per_process_and_thread_time_limit", "is not supported: the limits are per box");
    /* never a shell: its syntax is refused, not interpreted */
    static const char *const shells[] = {"a; rm -rf /", "$(id)",         "`id`",  "a | b",  "a > f",
                                         "a && b",      "\\\"$HOME\\\"", "'open", "a\\\\b", "*"};
    for (size_t i = 0; i < sizeof(shells) / sizeof(shells[0]); i++) {
        char body[256];
        snprintf(body, sizeof(body), "{\"source_code\":\"x\",\"language_id\":71,\"command_line_arguments\":\"%s\"}", shells[i]);
        expect_422(body, "command_line_arguments",
                   "may only be words separated by spaces, optionally quoted: they are never given to a shell");
    }
    /* every field error at once */
    struct judge0_request j;
    json_t *errors;
    char err[256];
    assert_int_equal(parse("{\"language_id\":1,\"enable_network\":true}", 0, &j, &errors, err), -2);
    assert_int_equal(json_object_size(errors), 3);
    json_decref(errors);
}

/* ---------------------------------------------------------------- verdicts */

static struct judge0_request request_of(const char *body)
{
    struct judge0_request j;
    json_t *errors;
    char err[256];

    assert_int_equal(parse(body, 0, &j, &errors, err), 0);
    return j;
}

static struct moat_exec_result run_result(uint8_t status, int code, int sig, const char *text)
{
    static uint8_t out[256]; /* one result at a time */
    struct moat_exec_result res;

    memset(&res, 0, sizeof(res));
    res.run.present = 1;
    res.run.status = status;
    res.run.has_code = code >= 0;
    res.run.code = code;
    res.run.has_signal = sig > 0;
    res.run.signal = sig;
    snprintf((char *)out, sizeof(out), "%s", text);
    res.run.stdout_data = out;
    res.run.stdout_len = strlen(text);
    res.run.output_data = out;
    res.run.output_len = strlen(text);
    return res;
}

static int verdict(const struct judge0_request *j, const struct moat_exec_result *res)
{
    struct judge0_verdict v;

    judge0_verdict_of(j, res, &v);
    return v.status;
}

static void test_verdicts(void **state)
{
    struct judge0_request plain = request_of("{\"source_code\":\"x\",\"language_id\":50}");
    struct judge0_request expect = request_of("{\"source_code\":\"x\",\"language_id\":50,\"expected_output\":\"1 2\\n3\\n\"}");
    struct moat_exec_result res;

    (void)state;
    res = run_result(MOAT_STATUS_OK, 0, 0, "anything");
    assert_int_equal(verdict(&plain, &res), JUDGE0_ACCEPTED);
    /* trailing white space of lines and of the text does not count */
    res = run_result(MOAT_STATUS_OK, 0, 0, "1 2  \n3\n\n");
    assert_int_equal(verdict(&expect, &res), JUDGE0_ACCEPTED);
    res = run_result(MOAT_STATUS_OK, 0, 0, "1  2\n3\n");
    assert_int_equal(verdict(&expect, &res), JUDGE0_WRONG_ANSWER);
    res = run_result(MOAT_STATUS_TO, -1, 9, "");
    assert_int_equal(verdict(&plain, &res), JUDGE0_TIME_LIMIT);
    res = run_result(MOAT_STATUS_SG, -1, 11, "");
    assert_int_equal(verdict(&plain, &res), JUDGE0_RE_SIGSEGV);
    res = run_result(MOAT_STATUS_SG, -1, 25, "");
    assert_int_equal(verdict(&plain, &res), JUDGE0_RE_SIGXFSZ);
    res = run_result(MOAT_STATUS_SG, -1, 8, "");
    assert_int_equal(verdict(&plain, &res), JUDGE0_RE_SIGFPE);
    res = run_result(MOAT_STATUS_SG, -1, 6, "");
    assert_int_equal(verdict(&plain, &res), JUDGE0_RE_SIGABRT);
    res = run_result(MOAT_STATUS_SG, -1, 15, "");
    assert_int_equal(verdict(&plain, &res), JUDGE0_RE_OTHER);
    res = run_result(MOAT_STATUS_RE, 3, 0, "");
    assert_int_equal(verdict(&plain, &res), JUDGE0_RE_NZEC);
    res = run_result(MOAT_STATUS_ML, -1, 9, "");
    assert_int_equal(verdict(&plain, &res), JUDGE0_RE_OTHER);
    res = run_result(MOAT_STATUS_OL, -1, 9, "");
    assert_int_equal(verdict(&plain, &res), JUDGE0_RE_SIGXFSZ);
    res = run_result(MOAT_STATUS_XX, -1, 0, "");
    assert_int_equal(verdict(&plain, &res), JUDGE0_INTERNAL_ERROR);
    /* a failed compile: no run */
    memset(&res, 0, sizeof(res));
    res.compile.present = 1;
    res.compile.status = MOAT_STATUS_RE;
    res.compile.has_code = 1;
    res.compile.code = 1;
    assert_int_equal(verdict(&plain, &res), JUDGE0_COMPILATION_ERROR);
    judge0_request_free(&plain);
    judge0_request_free(&expect);
}

/* number_of_runs: the first run that is not Accepted decides, else the last; time and memory are averages */
static void test_verdict_of_runs(void **state)
{
    struct judge0_request j = request_of("{\"source_code\":\"x\",\"language_id\":71,\"number_of_runs\":3}");
    struct moat_exec_request e;
    struct moat_stage_result runs[3];
    struct moat_exec_result res;
    static uint8_t a[] = "first", b[] = "second", c[] = "third";
    uint8_t *texts[] = {a, b, c};

    (void)state;
    memset(&res, 0, sizeof(res));
    memset(runs, 0, sizeof(runs));
    for (size_t i = 0; i < 3; i++) {
        runs[i].present = 1;
        runs[i].has_code = 1;
        runs[i].stdout_data = texts[i];
        runs[i].stdout_len = strlen((char *)texts[i]);
        runs[i].cpu_ms = 10 * (i + 1);
        runs[i].wall_ms = 100 * (i + 1);
        runs[i].memory_bytes = 1024 * 1024 * (i + 1);
    }
    res.tests = runs;
    res.ntests = 3;
    assert_int_equal(judge0_exec_request(&j, &e), 0);
    json_t *rec = judge0_submission_record("0b3c1f3e-1a2b-4c3d-8e4f-001122334455", 0, 0, &j, &e, &res, "Python (3.11.2)");
    assert_int_equal(json_integer_value(json_object_get(rec, "status_id")), JUDGE0_ACCEPTED);
    assert_string_equal(json_string_value(json_object_get(rec, "stdout")), "dGhpcmQ="); /* the last run's: "third" */
    assert_string_equal(json_string_value(json_object_get(rec, "time")), "0.020");
    assert_string_equal(json_string_value(json_object_get(rec, "wall_time")), "0.200");
    assert_int_equal(json_integer_value(json_object_get(rec, "memory")), 2048);
    assert_int_equal(json_integer_value(json_object_get(rec, "number_of_runs")), 3);
    json_decref(rec);
    /* the second run fails: it decides */
    runs[1].status = MOAT_STATUS_RE;
    runs[1].code = 2;
    rec = judge0_submission_record("0b3c1f3e-1a2b-4c3d-8e4f-001122334455", 0, 0, &j, &e, &res, "Python (3.11.2)");
    assert_int_equal(json_integer_value(json_object_get(rec, "status_id")), JUDGE0_RE_NZEC);
    assert_int_equal(json_integer_value(json_object_get(rec, "exit_code")), 2);
    assert_string_equal(json_string_value(json_object_get(rec, "stdout")), "c2Vjb25k"); /* "second" */
    json_decref(rec);
    /* fewer runs than asked, all Accepted: the wall budget ran out */
    runs[1].status = MOAT_STATUS_OK;
    runs[1].code = 0;
    res.ntests = 2;
    assert_int_equal(verdict(&j, &res), JUDGE0_TIME_LIMIT);
    res.ntests = 0;
    res.compile.present = 1; /* compiled, then no run at all */
    assert_int_equal(verdict(&j, &res), JUDGE0_TIME_LIMIT);
    moat_exec_request_free(&e);
    judge0_request_free(&j);
}

/* ------------------------------------------------------ records, render */

static void test_record_and_render(void **state)
{
    struct judge0_request j = request_of("{\"source_code\":\"x\",\"language_id\":71,\"stdin\":\"in\"}");
    struct moat_exec_request e;
    struct moat_exec_result res = run_result(MOAT_STATUS_OK, 0, 0, "");
    static uint8_t binary[] = {0x00, 0xff, 0xfe, 'a'}, oops[] = "oops", outerr[] = "outerr";
    struct judge0_query qu;
    char err[256], *s;
    int not_utf8;

    (void)state;
    res.run.stdout_data = binary;
    res.run.stdout_len = sizeof(binary);
    res.run.stderr_data = oops;
    res.run.stderr_len = 4;
    res.run.cpu_ms = 12;
    res.run.wall_ms = 1034;
    res.run.memory_bytes = 2048 * 1024;
    assert_int_equal(judge0_exec_request(&j, &e), 0);
    e.run_timeout_ms = 3000; /* as judged */
    e.run_memory_bytes = 256LL * 1024 * 1024;
    json_t *rec = judge0_submission_record("0b3c1f3e-1a2b-4c3d-8e4f-001122334455", 1700000000123, 1700000001000, &j, &e, &res,
                                           "Python (3.11.2)");
    assert_non_null(rec);
    assert_string_equal(json_string_value(json_object_get(rec, "stdout")), "AP/+YQ==");
    assert_string_equal(json_string_value(json_object_get(rec, "created_at")), "2023-11-14T22:13:20.123Z");
    assert_string_equal(json_string_value(json_object_get(rec, "time")), "0.012");
    assert_string_equal(json_string_value(json_object_get(rec, "wall_time")), "1.034");
    assert_int_equal(json_integer_value(json_object_get(rec, "memory")), 2048);
    assert_int_equal(json_integer_value(json_object_get(rec, "memory_limit")), 262144);
    assert_true(json_is_null(json_object_get(rec, "compile_output")));
    assert_int_equal(json_integer_value(json_object_get(json_object_get(rec, "status"), "id")), JUDGE0_ACCEPTED);
    assert_string_equal(json_string_value(json_object_get(json_object_get(rec, "language"), "name")), "Python (3.11.2)");

    /* binary output: base64 round trip; without base64 Judge0's "cannot be converted" */
    assert_int_equal(q("base64_encoded=true&fields=stdout,stderr,token", ALL_Q, &qu, err), 0);
    s = judge0_render(rec, &qu, &not_utf8);
    assert_string_equal(s, "{\"stdout\":\"AP/+YQ==\",\"stderr\":\"b29wcw==\",\"token\":\"0b3c1f3e-1a2b-4c3d-8e4f-001122334455\"}");
    free(s);
    assert_int_equal(q("fields=stdout", ALL_Q, &qu, err), 0);
    assert_null(judge0_render(rec, &qu, &not_utf8));
    assert_int_equal(not_utf8, 1);
    assert_int_equal(q("fields=stderr,stdin,status", ALL_Q, &qu, err), 0);
    s = judge0_render(rec, &qu, &not_utf8);
    assert_string_equal(s, "{\"stderr\":\"oops\",\"stdin\":\"in\",\"status\":{\"id\":3,\"description\":\"Accepted\"}}");
    free(s);
    json_decref(rec);

    /* still running: Processing, no output, no finished_at */
    rec = judge0_submission_record("0b3c1f3e-1a2b-4c3d-8e4f-001122334455", 0, 0, &j, &e, NULL, "Python (3.11.2)");
    assert_int_equal(q("fields=status,stdout,time,finished_at,exit_code", ALL_Q, &qu, err), 0);
    s = judge0_render(rec, &qu, &not_utf8);
    assert_string_equal(s, "{\"status\":{\"id\":2,\"description\":\"Processing\"},\"stdout\":null,\"time\":null,"
                           "\"finished_at\":null,\"exit_code\":null}");
    free(s);
    json_decref(rec);
    judge0_request_free(&j);

    /* redirect_stderr_to_stdout: stdout is both, interleaved; stderr null */
    j = request_of("{\"source_code\":\"x\",\"language_id\":71,\"redirect_stderr_to_stdout\":true}");
    res = run_result(MOAT_STATUS_OK, 0, 0, "out");
    res.run.output_data = outerr;
    res.run.output_len = 6;
    rec = judge0_submission_record("0b3c1f3e-1a2b-4c3d-8e4f-001122334455", 0, 0, &j, &e, &res, "Python (3.11.2)");
    assert_int_equal(q("fields=stdout,stderr", ALL_Q, &qu, err), 0);
    s = judge0_render(rec, &qu, &not_utf8);
    assert_string_equal(s, "{\"stdout\":\"outerr\",\"stderr\":null}");
    free(s);
    json_decref(rec);
    judge0_request_free(&j);
    moat_exec_request_free(&e);
}

/* ------------------------------------------------------------ catalogue */

static void test_catalogue(void **state)
{
    char *s, name[128];
    json_t *a;

    (void)state;
    s = judge0_statuses_json();
    a = json_loads(s, 0, NULL);
    free(s);
    assert_int_equal(json_array_size(a), 14);
    assert_string_equal(json_string_value(json_object_get(json_array_get(a, 6), "description")), "Runtime Error (SIGSEGV)");
    assert_int_equal(json_integer_value(json_object_get(json_array_get(a, 13), "id")), 14);
    json_decref(a);
    /* the well-known ids, named with the installed version */
    static const struct {
        int id;
        const char *moat, *name;
    } ids[] = {{71, "python", "Python (3.11.2)"},     {50, "c", "C (GCC 12.2.0)"},
               {54, "c++", "C++ (GCC 12.2.0)"},       {63, "javascript", "JavaScript (Node.js 12.2.0)"},
               {62, "java", "Java (OpenJDK 12.2.0)"}, {60, "go", "Go (12.2.0)"},
               {73, "rust", "Rust (12.2.0)"},         {72, "ruby", "Ruby (12.2.0)"},
               {85, "perl", "Perl (12.2.0)"},         {64, "lua", "Lua (12.2.0)"},
               {46, "bash", "Bash (12.2.0)"},         {82, "sqlite3", "SQL (SQLite 12.2.0)"}};
    for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
        const struct judge0_lang *l = judge0_lang_by_id(ids[i].id);
        assert_non_null(l);
        assert_string_equal(l->moat, ids[i].moat);
        judge0_language_name(l, i < 1 ? "3.11.2" : "12.2.0", name, sizeof(name));
        assert_string_equal(name, ids[i].name);
    }
    assert_null(judge0_lang_by_id(1));
    assert_null(judge0_lang_at(12));
    /* config_info: the tenant's ceilings are its limits */
    struct tenant_policy p;
    memset(&p, 0, sizeof(p));
    p.ceilings.run_timeout_ms = 2500;
    p.ceilings.run_memory_bytes = 64LL * 1024 * 1024;
    json_t *langs = json_pack("[s]", "C (GCC 12.2.0)");
    p.ceilings.run_processes = 8; /* a tenant ceiling below the box's */
    const struct judge0_callbacks_info off = {0, 3, 10.0}, on = {1, 3, 2.5};
    s = judge0_config_info_json(&p, 3600, 4, langs, &on);
    json_decref(langs);
    json_t *o = json_loads(s, 0, NULL);
    free(s);
    assert_true(json_real_value(json_object_get(o, "cpu_time_limit")) == 2.5);
    assert_true(json_real_value(json_object_get(o, "max_wall_time_limit")) == 2.5);
    assert_int_equal(json_integer_value(json_object_get(o, "memory_limit")), 65536);
    assert_int_equal(json_integer_value(json_object_get(o, "submission_cache_duration")), 3600);
    assert_int_equal(json_integer_value(json_object_get(o, "max_queue_size")), 4);
    assert_true(json_is_false(json_object_get(o, "allow_enable_network")));
    assert_true(json_is_true(json_object_get(o, "enable_callbacks")));
    assert_int_equal(json_integer_value(json_object_get(o, "callbacks_max_tries")), 3);
    assert_true(json_real_value(json_object_get(o, "callbacks_timeout")) == 2.5);
    assert_true(json_is_true(json_object_get(o, "enable_compiler_options")));
    assert_string_equal(json_string_value(json_array_get(json_object_get(o, "allowed_languages_for_compile_options"), 0)),
                        "C (GCC 12.2.0)");
    assert_int_equal(json_integer_value(json_object_get(o, "max_stack_limit")), JUDGE0_BOX_STACK_KB);
    assert_int_equal(json_integer_value(json_object_get(o, "max_max_processes_and_or_threads")), 8);
    assert_int_equal(json_integer_value(json_object_get(o, "max_max_file_size")), JUDGE0_BOX_FILE_SIZE_KB);
    assert_int_equal(json_integer_value(json_object_get(o, "max_number_of_runs")), GW_JUDGE0_MAX_RUNS);
    json_decref(o);
    /* no language with an allow-list: compiler options off */
    langs = json_array();
    s = judge0_config_info_json(&p, 3600, 4, langs, &off);
    json_decref(langs);
    o = json_loads(s, 0, NULL);
    free(s);
    assert_true(json_is_false(json_object_get(o, "enable_compiler_options")));
    assert_true(json_is_false(json_object_get(o, "enable_callbacks")));
    assert_int_equal(json_integer_value(json_object_get(o, "callbacks_max_tries")), 0);
    assert_int_equal(json_array_size(json_object_get(o, "allowed_languages_for_compile_options")), 0);
    json_decref(o);
}

static void test_tokens(void **state)
{
    uint8_t rnd[16];
    char t[JUDGE0_TOKEN_LEN + 1];

    (void)state;
    memset(rnd, 0xff, sizeof(rnd));
    judge0_token(rnd, t);
    assert_string_equal(t, "ffffffff-ffff-4fff-bfff-ffffffffffff");
    assert_true(judge0_token_valid(t, strlen(t)));
    memset(rnd, 0, sizeof(rnd));
    judge0_token(rnd, t);
    assert_string_equal(t, "00000000-0000-4000-8000-000000000000");
    assert_false(judge0_token_valid("ffffffff-ffff-4fff-bfff-fffffffffff", 35));
    assert_false(judge0_token_valid("FFFFFFFF-ffff-4fff-bfff-ffffffffffff", 36));
    assert_false(judge0_token_valid("ffffffff-ffff-4fff-bfff/ffffffffffff", 36));
}

/* ------------------------------------------------------------------ zip */

/* One entry of a test archive. */
struct zent {
    const char *name;
    const void *data;
    size_t len;
    int deflate;
    uint32_t mode;  /* Unix mode in the external attributes; 0: none (made on DOS) */
    uint32_t usize; /* the size the archive claims; 0: the real one */
    uint16_t flags; /* general purpose flags */
    int bad_crc;
};

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
    put16(p, (uint16_t)v);
    put16(p + 2, (uint16_t)(v >> 16));
}

/* A zip archive of es into out (large enough); its length. */
static size_t zip_build(const struct zent *es, size_t n, uint8_t *out)
{
    size_t at = 0, locals[16], csizes[16], dir_at, dir_len;

    for (size_t i = 0; i < n; i++) {
        const struct zent *e = &es[i];
        size_t nlen = strlen(e->name), csize = e->len;
        uint8_t *h = out + at, *data = h + 30 + nlen;
        locals[i] = at;
        if (e->deflate) {
            z_stream zs;
            memset(&zs, 0, sizeof(zs));
            assert_int_equal(deflateInit2(&zs, 9, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
            zs.next_in = (Bytef *)(uintptr_t)e->data;
            zs.avail_in = (uInt)e->len;
            zs.next_out = data;
            zs.avail_out = (uInt)(e->len + 1024);
            assert_int_equal(deflate(&zs, Z_FINISH), Z_STREAM_END);
            csize = zs.total_out;
            deflateEnd(&zs);
        } else {
            memcpy(data, e->data, e->len);
        }
        csizes[i] = csize;
        memset(h, 0, 30);
        put32(h, 0x04034b50);
        put16(h + 4, 20);
        put16(h + 6, e->flags);
        put16(h + 8, e->deflate ? 8 : 0);
        put32(h + 14, (uint32_t)crc32(0, e->data, (uInt)e->len) ^ (e->bad_crc ? 1u : 0u));
        put32(h + 18, (uint32_t)csize);
        put32(h + 22, e->usize ? e->usize : (uint32_t)e->len);
        put16(h + 26, (uint16_t)nlen);
        memcpy(h + 30, e->name, nlen);
        at += 30 + nlen + csize;
    }
    dir_at = at;
    for (size_t i = 0; i < n; i++) {
        const struct zent *e = &es[i];
        size_t nlen = strlen(e->name);
        uint8_t *d = out + at;
        memset(d, 0, 46);
        put32(d, 0x02014b50);
        put16(d + 4, e->mode ? (3 << 8 | 20) : 20);
        put16(d + 6, 20);
        put16(d + 8, e->flags);
        put16(d + 10, e->deflate ? 8 : 0);
        put32(d + 16, (uint32_t)crc32(0, e->data, (uInt)e->len) ^ (e->bad_crc ? 1u : 0u));
        put32(d + 20, (uint32_t)csizes[i]);
        put32(d + 24, e->usize ? e->usize : (uint32_t)e->len);
        put16(d + 28, (uint16_t)nlen);
        put32(d + 38, e->mode << 16);
        put32(d + 42, (uint32_t)locals[i]);
        memcpy(d + 46, e->name, nlen);
        at += 46 + nlen;
    }
    dir_len = at - dir_at;
    memset(out + at, 0, 22);
    put32(out + at, 0x06054b50);
    put16(out + at + 8, (uint16_t)n);
    put16(out + at + 10, (uint16_t)n);
    put32(out + at + 12, (uint32_t)dir_len);
    put32(out + at + 16, (uint32_t)dir_at);
    return at + 22;
}

static uint8_t zbuf[4 << 20], big_data[1 << 20];

/* Unpack es with lim: 0 and the files, or -1 with err holding want. */
static int unzip(const struct zent *es, size_t n, size_t max_files, size_t max_bytes, const char *want_err, struct moat_file **fs,
                 size_t *nfs)
{
    const struct judge0_zip_limits lim = {max_files, max_bytes};
    size_t len = zip_build(es, n, zbuf);
    char err[256] = "";
    int rc = judge0_zip_unpack(zbuf, len, &lim, fs, nfs, err, sizeof(err));

    if (want_err != NULL) {
        assert_int_equal(rc, -1);
        if (strstr(err, want_err) == NULL)
            fail_msg("error \"%s\" does not say \"%s\"", err, want_err);
        assert_null(*fs);
    }
    return rc;
}

static void free_unzipped(struct moat_file *fs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(fs[i].name);
        free(fs[i].content);
    }
    free(fs);
}

static void test_zip(void **state)
{
    static const char text[] = "x = 1\nx = 1\nx = 1\nx = 1\nx = 1\nx = 1\nx = 1\nx = 1\n";
    struct moat_file *fs;
    size_t n;

    (void)state;
    /* a good archive: a stored file, a directory, a deflated file in it */
    const struct zent good[] = {
        {"data.txt", "hello", 5, 0, 0100644, 0, 0, 0},
        {"lib/", "", 0, 0, 040755, 0, 0, 0},
        {"lib/util.py", text, sizeof(text) - 1, 1, 0100644, 0, 0, 0},
    };
    assert_int_equal(unzip(good, 3, 31, 1 << 20, NULL, &fs, &n), 0);
    assert_int_equal(n, 2);
    assert_string_equal(fs[0].name, "data.txt");
    assert_int_equal(fs[0].content_len, 5);
    assert_memory_equal(fs[0].content, "hello", 5);
    assert_string_equal(fs[1].name, "lib/util.py");
    assert_int_equal(fs[1].content_len, sizeof(text) - 1);
    assert_memory_equal(fs[1].content, text, sizeof(text) - 1);
    free_unzipped(fs, n);

    /* links, escapes, absolute paths, option-like names */
    const struct zent link[] = {{"link", "/etc/passwd", 11, 0, 0120777, 0, 0, 0}};
    unzip(link, 1, 31, 1 << 20, "entry 'link' is a symbolic link or a special file", &fs, &n);
    const struct zent fifo[] = {{"pipe", "", 0, 0, 0010644, 0, 0, 0}};
    unzip(fifo, 1, 31, 1 << 20, "a symbolic link or a special file", &fs, &n);
    const struct zent up[] = {{"../evil.py", "x", 1, 0, 0, 0, 0, 0}};
    unzip(up, 1, 31, 1 << 20, "entry '../evil.py' must not have a '.' or '..' component", &fs, &n);
    const struct zent deep_up[] = {{"a/../../evil", "x", 1, 0, 0, 0, 0, 0}};
    unzip(deep_up, 1, 31, 1 << 20, "'..'", &fs, &n);
    const struct zent abs[] = {{"/etc/cron.d/x", "x", 1, 0, 0, 0, 0, 0}};
    unzip(abs, 1, 31, 1 << 20, "entry '/etc/cron.d/x'", &fs, &n);
    const struct zent opt[] = {{"-rf", "x", 1, 0, 0, 0, 0, 0}};
    unzip(opt, 1, 31, 1 << 20, "entry '-rf'", &fs, &n);
    /* names together */
    const struct zent twice[] = {{"a", "1", 1, 0, 0, 0, 0, 0}, {"a", "2", 1, 0, 0, 0, 0, 0}};
    unzip(twice, 2, 31, 1 << 20, "holds 'a' twice", &fs, &n);
    const struct zent file_dir[] = {{"a", "1", 1, 0, 0, 0, 0, 0}, {"a/b", "2", 1, 0, 0, 0, 0, 0}};
    unzip(file_dir, 2, 31, 1 << 20, "holds 'a' both as a file and as a directory", &fs, &n);
    /* bombs: a declared size past the limit, a size that lies, too many files */
    const struct zent bomb[] = {{"zeros", big_data, sizeof(big_data), 1, 0, 0, 0, 0}};
    unzip(bomb, 1, 31, 64 * 1024, "unpacks to more than 65536 bytes", &fs, &n);
    const struct zent liar[] = {{"zeros", big_data, sizeof(big_data), 1, 0, 100, 0, 0}};
    unzip(liar, 1, 31, 64 * 1024, "entry 'zeros' does not inflate to its declared size", &fs, &n);
    const struct zent many[] = {{"a", "1", 1, 0, 0, 0, 0, 0}, {"b", "2", 1, 0, 0, 0, 0, 0}, {"c", "3", 1, 0, 0, 0, 0, 0}};
    unzip(many, 3, 2, 1 << 20, "has more than 2 files", &fs, &n);
    /* integrity */
    const struct zent enc[] = {{"a", "1", 1, 0, 0, 0, 1, 0}};
    unzip(enc, 1, 31, 1 << 20, "entry 'a' is encrypted", &fs, &n);
    const struct zent crc[] = {{"a", "1", 1, 0, 0, 0, 0, 1}};
    unzip(crc, 1, 31, 1 << 20, "entry 'a' fails its CRC check", &fs, &n);
    /* not an archive, or a cut one */
    const struct judge0_zip_limits lim = {31, 1 << 20};
    char err[256];
    assert_int_equal(judge0_zip_unpack((const uint8_t *)"hello", 5, &lim, &fs, &n, err, sizeof(err)), -1);
    assert_string_equal(err, "is not a zip archive");
    size_t len = zip_build(good, 3, zbuf);
    assert_int_equal(judge0_zip_unpack(zbuf, len - 1, &lim, &fs, &n, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "is not a zip archive"));
    /* an empty archive is no files */
    assert_int_equal(unzip(good, 0, 31, 1 << 20, NULL, &fs, &n), 0);
    assert_int_equal(n, 0);
}

/* additional_files in a submission: files beside the source, or a 400. */
static void test_submission_additional_files(void **state)
{
    static const char text[] = "VALUE = 42\n";
    const struct zent files[] = {{"helper.py", text, sizeof(text) - 1, 1, 0100644, 0, 0, 0}};
    char body[8192], b64[4096], err[256];
    struct judge0_request j;
    struct moat_exec_request e;
    json_t *errors;
    size_t len;

    (void)state;
    len = zip_build(files, 1, zbuf);
    b64[moat_base64_encode(zbuf, len, b64)] = '\0';
    snprintf(body, sizeof(body), "{\"source_code\":\"import helper\",\"language_id\":71,\"additional_files\":\"%s\"}", b64);
    assert_int_equal(parse(body, 0, &j, &errors, err), 0);
    assert_int_equal(judge0_exec_request(&j, &e), 0);
    assert_int_equal(e.nfiles, 2);
    assert_string_equal(e.files[0].name, "script.py"); /* the source first: the entry file */
    assert_string_equal(e.files[1].name, "helper.py");
    assert_memory_equal(e.files[1].content, text, sizeof(text) - 1);
    moat_exec_request_free(&e);
    judge0_request_free(&j);
    /* the source's own name, bad base64, a link: 400s naming the problem */
    const struct zent clash[] = {{"script.py", "x", 1, 0, 0, 0, 0, 0}};
    len = zip_build(clash, 1, zbuf);
    b64[moat_base64_encode(zbuf, len, b64)] = '\0';
    snprintf(body, sizeof(body), "{\"source_code\":\"1\",\"language_id\":71,\"additional_files\":\"%s\"}", b64);
    expect_400(body, "additional_files holds 'script.py', the source's own file");
    expect_400("{\"source_code\":\"1\",\"language_id\":71,\"additional_files\":\"!!!!\"}", "additional_files is not valid base64");
    const struct zent link[] = {{"lnk", "/", 1, 0, 0120777, 0, 0, 0}};
    len = zip_build(link, 1, zbuf);
    b64[moat_base64_encode(zbuf, len, b64)] = '\0';
    snprintf(body, sizeof(body), "{\"source_code\":\"1\",\"language_id\":71,\"additional_files\":\"%s\"}", b64);
    expect_400(body, "additional_files entry 'lnk' is a symbolic link or a special file");
}

/* ---------------------------------------------------------------- store */

static void put(struct judge0_store *s, const char *tenant, const char *token, uint64_t now)
{
    assert_int_equal(judge0_store_put(s, tenant, token, token, strlen(token), now), 0);
}

static int has(struct judge0_store *s, const char *tenant, const char *token, uint64_t now)
{
    size_t len;
    int orphaned;
    char *t = judge0_store_get(s, tenant, token, now, &len, &orphaned);
    int found = t != NULL;

    if (found)
        assert_string_equal(t, token);
    free(t);
    return found;
}

static void test_store(void **state)
{
    const struct judge0_store_limits lim = {5, 3, 64, 1000};
    struct judge0_store *s = judge0_store_new(&lim);
    char tok[16];

    (void)state;
    put(s, "a", "t1", 0);
    assert_true(has(s, "a", "t1", 10));
    assert_false(has(s, "b", "t1", 10)); /* another tenant's: not found */
    assert_false(has(s, "a", "t2", 10));
    assert_false(has(s, "a", "t1", 1000)); /* expired */
    /* the tenant's cap drops its own oldest */
    for (int i = 0; i < 4; i++) {
        snprintf(tok, sizeof(tok), "a%d", i);
        put(s, "a", tok, 2000);
    }
    put(s, "b", "b0", 2000);
    assert_false(has(s, "a", "a0", 2001));
    assert_true(has(s, "a", "a1", 2001));
    assert_true(has(s, "a", "a3", 2001));
    assert_true(has(s, "b", "b0", 2001));
    /* the overall cap drops anyone's oldest */
    put(s, "c", "c0", 2000);
    put(s, "c", "c1", 2000);
    assert_int_equal(judge0_store_count(s), 5);
    assert_false(has(s, "a", "a1", 2001));
    assert_true(has(s, "c", "c1", 2001));
    /* putting a token again replaces its record */
    assert_int_equal(judge0_store_put(s, "c", "c1", "new", 3, 2000), 0);
    assert_int_equal(judge0_store_count(s), 5);
    size_t len;
    int orphaned;
    char *t = judge0_store_get(s, "c", "c1", 2001, &len, &orphaned);
    assert_int_equal(orphaned, 0);
    assert_string_equal(t, "new");
    free(t);
    /* bytes: a record larger than the store is refused; a large one makes room */
    char big[80];
    memset(big, 'x', sizeof(big));
    assert_int_equal(judge0_store_put(s, "a", "big", big, sizeof(big), 2000), -1);
    assert_int_equal(judge0_store_put(s, "a", "big", big, 60, 2000), 0);
    assert_int_equal(judge0_store_count(s), 2); /* c1 (put last before it) and it: 63 bytes */
    t = judge0_store_get(s, "c", "c1", 2001, &len, &orphaned);
    assert_string_equal(t, "new");
    free(t);
    /* expiry at the next put */
    put(s, "a", "late", 5000);
    assert_int_equal(judge0_store_count(s), 1);
    judge0_store_free(s);
}

/* The directory store: tokens are UUIDs; TOK(n) the n-th. */
#define TOK_FMT "00000000-0000-4000-8000-%012d"

static char *tok(int n)
{
    static char buf[8][40];
    static int next;
    char *b = buf[next++ % 8];

    snprintf(b, 40, TOK_FMT, n);
    return b;
}

/* store_dir/<hex sha256(tenant)>/<name>, as judge0_store.c names it. */
static void record_path(const char *dir, const char *tenant, const char *name, char *out, size_t outlen)
{
    unsigned char md[SHA256_DIGEST_LENGTH];
    char hex[2 * SHA256_DIGEST_LENGTH + 1];

    SHA256((const unsigned char *)tenant, strlen(tenant), md);
    for (int i = 0; i < SHA256_DIGEST_LENGTH; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
    snprintf(out, outlen, "%s/%s%s%s", dir, hex, name[0] != '\0' ? "/" : "", name);
}

static void write_file(const char *path, const char *text)
{
    FILE *fp = fopen(path, "w");

    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
}

static void test_store_dir(void **state)
{
    const struct judge0_store_limits lim = {6, 3, 4096, 1000};
    char dir[] = "/tmp/test_judge0_store.XXXXXX", path[512], target[512], err[512];
    struct judge0_store *s, *s2;
    size_t len;
    int orphaned;
    char *t;

    (void)state;
    assert_non_null(mkdtemp(dir));
    /* the directory: nobody else may write it, and it is no link */
    assert_int_equal(chmod(dir, 0770), 0);
    assert_null(judge0_store_open_dir(dir, &lim, err, sizeof(err)));
    assert_non_null(strstr(err, "group or others may write it"));
    assert_int_equal(judge0_store_check_dir(dir, err, sizeof(err)), -1);
    assert_int_equal(chmod(dir, 0700), 0);
    snprintf(path, sizeof(path), "%s.lnk", dir);
    assert_int_equal(symlink(dir, path), 0);
    assert_null(judge0_store_open_dir(path, &lim, err, sizeof(err)));
    unlink(path);
    if (geteuid() == 0) { /* another user's directory */
        assert_int_equal(chown(dir, 65534, 65534), 0);
        assert_null(judge0_store_open_dir(dir, &lim, err, sizeof(err)));
        assert_non_null(strstr(err, "not by the gateway's user"));
        assert_int_equal(chown(dir, 0, 0), 0);
    }
    assert_int_equal(judge0_store_check_dir(dir, err, sizeof(err)), 0);
    assert_non_null(s = judge0_store_open_dir(dir, &lim, err, sizeof(err)));

    /* put and get; another tenant's token is not found */
    put(s, "a", tok(1), 0);
    assert_true(has(s, "a", tok(1), 10));
    assert_false(has(s, "b", tok(1), 10));
    assert_false(has(s, "a", tok(2), 10));
    record_path(dir, "a", tok(1), path, sizeof(path));
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0600);
    /* tokens that are not UUIDs never reach a path */
    assert_int_equal(judge0_store_put(s, "a", "../../etc/x", "x", 1, 0), -1);
    assert_int_equal(judge0_store_put(s, "a", "00000000-0000-4000-8000-00000000000A", "x", 1, 0), -1);
    assert_int_equal(judge0_store_put(s, "a", ".tmp-00000000-0000-4000-8000-000000000001", "x", 1, 0), -1);
    assert_null(judge0_store_get(s, "a", "..", 10, &len, &orphaned));
    /* replacing keeps the count */
    assert_int_equal(judge0_store_put(s, "a", tok(1), "new", 3, 0), 0);
    assert_int_equal(judge0_store_count(s), 1);
    t = judge0_store_get(s, "a", tok(1), 10, &len, &orphaned);
    assert_non_null(t);
    assert_string_equal(t, "new");
    assert_int_equal(len, 3);
    assert_int_equal(orphaned, 0);
    free(t);
    /* expired: not found, and the file goes */
    assert_false(has(s, "a", tok(1), 1000));
    assert_int_equal(stat(path, &st), -1);
    assert_int_equal(judge0_store_count(s), 0);

    /* the tenant's cap: its oldest goes */
    for (int i = 10; i < 14; i++)
        put(s, "a", tok(i), 2000);
    assert_false(has(s, "a", tok(10), 2001));
    assert_true(has(s, "a", tok(11), 2001));
    assert_true(has(s, "a", tok(13), 2001));
    assert_int_equal(judge0_store_count(s), 3);
    /* the overall caps: refused (records, then bytes) */
    put(s, "b", tok(20), 2000);
    put(s, "b", tok(21), 2000);
    put(s, "c", tok(22), 2000);
    assert_int_equal(judge0_store_put(s, "c", tok(23), "x", 1, 2000), -1);
    assert_int_equal(judge0_store_count(s), 6);
    assert_false(has(s, "c", tok(23), 2001));

    /* corrupt files and planted links are not found, and never followed */
    record_path(dir, "b", tok(20), path, sizeof(path));
    write_file(path, "moat-judge0 1 99999999 nothex\n{}");
    assert_false(has(s, "b", tok(20), 2001));
    write_file(path, "garbage");
    assert_false(has(s, "b", tok(20), 2001));
    snprintf(target, sizeof(target), "%s/target", dir);
    record_path(dir, "b", tok(21), path, sizeof(path));
    rename(path, target); /* a good record, reachable only through a link */
    assert_int_equal(symlink(target, path), 0);
    assert_false(has(s, "b", tok(21), 2001));
    assert_int_equal(judge0_store_put(s, "b", tok(21), "over", 4, 2000), -1); /* a link is not replaced */
    assert_int_equal(lstat(path, &st), 0);
    assert_true(S_ISLNK(st.st_mode));
    unlink(path);
    assert_int_equal(link(target, path), 0); /* a hard link: refused too */
    assert_false(has(s, "b", tok(21), 2001));
    unlink(path);
    unlink(target);

    /* another process's records (a restart): found, and marked orphaned */
    record_path(dir, "c", ".tmp-", path, sizeof(path));
    strcat(path, tok(22)); /* a temporary file a put left behind */
    write_file(path, "half");
    s2 = judge0_store_open_dir(dir, &lim, err, sizeof(err));
    assert_non_null(s2);
    assert_int_equal(stat(path, &st), -1); /* removed at open */
    t = judge0_store_get(s2, "a", tok(13), 2001, &len, &orphaned);
    assert_non_null(t);
    assert_int_equal(orphaned, 1);
    free(t);
    t = judge0_store_get(s, "a", tok(13), 2001, &len, &orphaned);
    assert_non_null(t);
    assert_int_equal(orphaned, 0);
    free(t);
    judge0_store_free(s);

    /* the sweep: expired records go without being read */
    size_t before = judge0_store_count(s2);
    assert_true(before > 0);
    for (int i = 0; i < 8; i++)
        assert_null(judge0_store_get(s2, "z", tok(99), 10000, &len, &orphaned));
    assert_int_equal(judge0_store_count(s2), 0);
    judge0_store_free(s2);
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_query),
        cmocka_unit_test(test_submission_valid),
        cmocka_unit_test(test_submission_base64),
        cmocka_unit_test(test_submission_malformed),
        cmocka_unit_test(test_submission_refused),
        cmocka_unit_test(test_batch_body),
        cmocka_unit_test(test_verdicts),
        cmocka_unit_test(test_verdict_of_runs),
        cmocka_unit_test(test_submission_compiler_options),
        cmocka_unit_test(test_submission_runs),
        cmocka_unit_test(test_record_and_render),
        cmocka_unit_test(test_catalogue),
        cmocka_unit_test(test_tokens),
        cmocka_unit_test(test_store),
        cmocka_unit_test(test_store_dir),
        cmocka_unit_test(test_zip),
        cmocka_unit_test(test_submission_additional_files),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
