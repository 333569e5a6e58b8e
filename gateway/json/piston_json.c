/*
 * piston_json.c - Piston v2 request parsing and response building.
 *
 * Requests are parsed strictly: duplicate keys, unknown fields, wrong types
 * and out-of-range values are refused with a message that names the field,
 * because a field the gateway silently dropped would be a field the client
 * believes was honoured.  Everything that leaves here towards the backend is
 * a freshly built struct moat_exec_request, never client bytes passed along.
 */
#include "piston_json.h"
#include "common/gw_limits.h"
#include "metadata.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "moat_base64.h"
#include "moat_buf.h"
#include "moat_errf.h"
#include "moat_hex.h"
#include "moat_path.h"
#include "moat_semver.h"
#include "moat_utf8.h"

/* ---------------------------------------------------------------- helpers */

/* A printable name: no NUL or control characters, 1..MOAT_MAX_NAME_LEN bytes. */
static int valid_label(const char *s, size_t len)
{
    size_t i;

    if (len == 0 || len > MOAT_MAX_NAME_LEN)
        return 0;
    for (i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f)
            return 0;
    }
    return 1;
}

/* Strict base64 (moat_base64.h) or hex in either case (moat_hex.h) into a
 * new buffer.  0, -1 bad input, -2 no memory. */
static int decode_content(const char *in, size_t len, int base64, uint8_t **out, size_t *outlen)
{
    uint8_t *buf;
    int rc;

    if (len % (base64 ? 4 : 2) != 0)
        return -1;
    if ((buf = malloc((base64 ? MOAT_BASE64_DECODED_MAX(len) : len / 2) + 1)) == NULL)
        return -2;
    if (base64) {
        rc = moat_base64_decode(in, len, buf, outlen);
    } else {
        rc = moat_hex_decode(in, len, buf, MOAT_HEX_ANY_CASE);
        *outlen = len / 2;
    }
    if (rc != 0) {
        free(buf);
        return -1;
    }
    *out = buf;
    return 0;
}

/* ---------------------------------------------------------------- request */

static int get_label(json_t *v, const char *field, char **dst, char *err, size_t errlen)
{
    if (!json_is_string(v))
        return moat_errf(err, errlen, "%s must be a string", field);
    if (!valid_label(json_string_value(v), json_string_length(v)))
        return moat_errf(err, errlen, "%s must be 1 to %d bytes without control characters", field, MOAT_MAX_NAME_LEN);
    if ((*dst = moat_memdup0(json_string_value(v), json_string_length(v))) == NULL)
        return moat_errf(err, errlen, "out of memory");
    return 0;
}

/* An integer >= -1 (-1: server default). */
static int get_limit(json_t *v, const char *field, int64_t *dst, char *err, size_t errlen)
{
    json_int_t n;

    if (!json_is_integer(v))
        return moat_errf(err, errlen, "%s must be an integer", field);
    n = json_integer_value(v);
    if (n < -1)
        return moat_errf(err, errlen, "%s must be -1 or a non-negative integer", field);
    *dst = (int64_t)n;
    return 0;
}

/* A CPU limit: -1 or positive.  0 would mean "not asked" on the wire
 * (moat_proto.h), so a client's 0 is refused here rather than dropped. */
static int get_cpu_limit(json_t *v, const char *field, int64_t *dst, char *err, size_t errlen)
{
    if (get_limit(v, field, dst, err, errlen) != 0)
        return -1;
    if (*dst == 0)
        return moat_errf(err, errlen, "%s must be -1 or a positive integer", field);
    return 0;
}

static int parse_file(json_t *obj, size_t idx, struct moat_file *f, char *err, size_t errlen)
{
    json_t *name = NULL, *content = NULL, *encoding = NULL, *v;
    const char *key, *enc = "utf8";
    int rc;

    if (!json_is_object(obj))
        return moat_errf(err, errlen, "files[%zu] must be an object", idx);
    json_object_foreach(obj, key, v)
    {
        if (strcmp(key, "name") == 0)
            name = v;
        else if (strcmp(key, "content") == 0)
            content = v;
        else if (strcmp(key, "encoding") == 0)
            encoding = v;
        else
            return moat_errf(err, errlen, "files[%zu]: unknown field '%.64s'", idx, key);
    }
    if (name != NULL) {
        if (!json_is_string(name))
            return moat_errf(err, errlen, "files[%zu].name must be a string", idx);
        /* a relative path inside /box (moat_path.h); the backend checks again.
         * Option-like names ("-o", "@o" to gcc) are refused too (S26). */
        enum moat_path_problem p = moat_path_check(json_string_value(name), json_string_length(name));
        if (p == MOAT_PATH_CONTROL || p == MOAT_PATH_LENGTH)
            return moat_errf(err, errlen, "files[%zu].name %s", idx, moat_path_problem_text(p));
        if (p != MOAT_PATH_OK)
            return moat_errf(err, errlen, "files[%zu].name %s (\"%.64s\")", idx, moat_path_problem_text(p),
                             json_string_value(name));
        f->name = moat_memdup0(json_string_value(name), json_string_length(name));
    } else {
        char def[32];
        snprintf(def, sizeof(def), "file%zu.code", idx);
        f->name = strdup(def);
    }
    if (f->name == NULL)
        return moat_errf(err, errlen, "out of memory");

    if (encoding != NULL) {
        if (!json_is_string(encoding))
            return moat_errf(err, errlen, "files[%zu].encoding must be a string", idx);
        enc = json_string_value(encoding);
        if (strcmp(enc, "utf8") != 0 && strcmp(enc, "base64") != 0 && strcmp(enc, "hex") != 0)
            return moat_errf(err, errlen, "files[%zu].encoding must be one of utf8, base64, hex", idx);
    }
    if (content == NULL)
        return moat_errf(err, errlen, "files[%zu].content is required", idx);
    if (!json_is_string(content))
        return moat_errf(err, errlen, "files[%zu].content must be a string", idx);

    if (strcmp(enc, "base64") == 0 || strcmp(enc, "hex") == 0)
        rc = decode_content(json_string_value(content), json_string_length(content), strcmp(enc, "base64") == 0, &f->content,
                            &f->content_len);
    else {
        f->content_len = json_string_length(content);
        f->content = (uint8_t *)moat_memdup0(json_string_value(content), f->content_len);
        rc = f->content == NULL ? -2 : 0;
    }
    if (rc == -2)
        return moat_errf(err, errlen, "out of memory");
    if (rc != 0)
        return moat_errf(err, errlen, "files[%zu].content is not valid %s", idx, enc);
    return 0;
}

/* Of two names, one may not be a directory of the other ("pkg" and "pkg/mod.py"). */
static int dir_conflict(const struct moat_file *files, size_t i, size_t j, char *err, size_t errlen)
{
    size_t file = j, below = i;

    if (moat_path_is_dir_of(files[i].name, files[j].name)) {
        file = i;
        below = j;
    } else if (!moat_path_is_dir_of(files[j].name, files[i].name)) {
        return 0;
    }
    return moat_errf(err, errlen, "files[%zu].name \"%.64s\" is a file, and a directory of files[%zu].name \"%.64s\"", file,
                     files[file].name, below, files[below].name);
}

static int parse_files(json_t *arr, struct moat_exec_request *out, char *err, size_t errlen)
{
    size_t i, j, n;

    if (!json_is_array(arr))
        return moat_errf(err, errlen, "files must be an array");
    n = json_array_size(arr);
    if (n < 1 || n > MOAT_MAX_FILES)
        return moat_errf(err, errlen, "files must hold between 1 and %d files", MOAT_MAX_FILES);
    if ((out->files = calloc(n, sizeof(*out->files))) == NULL)
        return moat_errf(err, errlen, "out of memory");
    for (i = 0; i < n; i++) {
        out->nfiles = i + 1; /* so a partial parse is freed */
        if (parse_file(json_array_get(arr, i), i, &out->files[i], err, errlen) != 0)
            return -1;
        for (j = 0; j < i; j++) {
            const char *a = out->files[j].name, *b = out->files[i].name;
            if (strcmp(a, b) == 0)
                return moat_errf(err, errlen, "files[%zu].name duplicates files[%zu].name", i, j);
            if (dir_conflict(out->files, i, j, err, errlen) != 0)
                return -1;
        }
    }
    return 0;
}

static int parse_args(json_t *arr, struct moat_exec_request *out, char *err, size_t errlen)
{
    size_t i, n;

    if (!json_is_array(arr))
        return moat_errf(err, errlen, "args must be an array");
    n = json_array_size(arr);
    if (n > MOAT_MAX_ARGS)
        return moat_errf(err, errlen, "args must hold at most %d strings", MOAT_MAX_ARGS);
    if (n == 0)
        return 0;
    if ((out->args = calloc(n, sizeof(*out->args))) == NULL)
        return moat_errf(err, errlen, "out of memory");
    for (i = 0; i < n; i++) {
        json_t *v = json_array_get(arr, i);
        if (!json_is_string(v))
            return moat_errf(err, errlen, "args[%zu] must be a string", i);
        if (json_string_length(v) > MOAT_MAX_ARG_LEN || memchr(json_string_value(v), '\0', json_string_length(v)) != NULL)
            return moat_errf(err, errlen, "args[%zu] must be at most %d bytes without NUL", i, MOAT_MAX_ARG_LEN);
        if ((out->args[i] = moat_memdup0(json_string_value(v), json_string_length(v))) == NULL)
            return moat_errf(err, errlen, "out of memory");
        out->nargs = i + 1;
    }
    return 0;
}

/* ---------------------------------------------------------------- test cases */

/* A case's limit: -1 (the request's) or positive. */
static int get_case_limit(json_t *v, size_t i, const char *field, int64_t *dst, char *err, size_t errlen)
{
    if (!json_is_integer(v) || (json_integer_value(v) != -1 && json_integer_value(v) < 1))
        return moat_errf(err, errlen, "tests[%zu].%s must be -1 or a positive integer", i, field);
    *dst = (int64_t)json_integer_value(v);
    return 0;
}

static int parse_compare(json_t *v, size_t i, enum piston_compare *dst, char *err, size_t errlen)
{
    static const char *const names[] = {"exact", "trimmed", "tokens", "float"};

    if (json_is_string(v))
        for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++)
            if (strcmp(json_string_value(v), names[k]) == 0 && strlen(names[k]) == json_string_length(v)) {
                *dst = (enum piston_compare)k;
                return 0;
            }
    return moat_errf(err, errlen, "tests[%zu].compare must be one of exact, trimmed, tokens, float", i);
}

static int dup_args(char **from, size_t n, char ***to, size_t *nto)
{
    if (n == 0)
        return 0;
    if ((*to = calloc(n, sizeof(**to))) == NULL)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (((*to)[i] = strdup(from[i])) == NULL)
            return -1;
        *nto = i + 1;
    }
    return 0;
}

/* One case: its wire part into *tc, what judges it into *t.  The request's
 * stdin and args are the defaults of a case without its own. */
static int parse_case(json_t *obj, size_t i, const struct moat_exec_request *req, struct moat_test_case *tc, struct piston_test *t,
                      char *err, size_t errlen)
{
    json_t *v, *args = NULL, *stdin_v = NULL, *tolerance = NULL;
    const char *key;

    tc->run_timeout_ms = tc->run_memory_bytes = tc->run_cpu_ms = -1;
    t->compare = PISTON_CMP_TRIMMED;
    t->tolerance = PISTON_DEFAULT_TOLERANCE;
    if (!json_is_object(obj))
        return moat_errf(err, errlen, "tests[%zu] must be an object", i);
    json_object_foreach(obj, key, v)
    {
        int rc = 0;
        if (strcmp(key, "name") == 0) {
            if (!json_is_string(v) || json_string_length(v) > PISTON_TEST_NAME_MAX ||
                !valid_label(json_string_value(v), json_string_length(v)))
                return moat_errf(err, errlen, "tests[%zu].name must be 1 to %d bytes without control characters", i,
                                 PISTON_TEST_NAME_MAX);
            if ((t->name = moat_memdup0(json_string_value(v), json_string_length(v))) == NULL)
                return moat_errf(err, errlen, "out of memory");
        } else if (strcmp(key, "stdin") == 0) {
            if (!json_is_string(v))
                return moat_errf(err, errlen, "tests[%zu].stdin must be a string", i);
            stdin_v = v;
        } else if (strcmp(key, "args") == 0) {
            args = v;
        } else if (strcmp(key, "expected_output") == 0) {
            if (!json_is_string(v))
                return moat_errf(err, errlen, "tests[%zu].expected_output must be a string", i);
            if (json_string_length(v) > PISTON_EXPECTED_MAX)
                return moat_errf(err, errlen, "tests[%zu].expected_output must be at most %d bytes", i, PISTON_EXPECTED_MAX);
            t->expected_len = json_string_length(v);
            if ((t->expected = (uint8_t *)moat_memdup0(json_string_value(v), t->expected_len)) == NULL)
                return moat_errf(err, errlen, "out of memory");
        } else if (strcmp(key, "compare") == 0) {
            rc = parse_compare(v, i, &t->compare, err, errlen);
        } else if (strcmp(key, "tolerance") == 0) {
            tolerance = v;
        } else if (strcmp(key, "run_timeout") == 0) {
            rc = get_case_limit(v, i, "run_timeout", &tc->run_timeout_ms, err, errlen);
        } else if (strcmp(key, "run_cpu_time") == 0) {
            rc = get_case_limit(v, i, "run_cpu_time", &tc->run_cpu_ms, err, errlen);
        } else if (strcmp(key, "run_memory_limit") == 0) {
            rc = get_case_limit(v, i, "run_memory_limit", &tc->run_memory_bytes, err, errlen);
        } else {
            return moat_errf(err, errlen, "tests[%zu]: unknown field '%.64s'", i, key);
        }
        if (rc != 0)
            return -1;
    }
    if (tolerance != NULL) {
        if (t->compare != PISTON_CMP_FLOAT)
            return moat_errf(err, errlen, "tests[%zu].tolerance goes with compare \"float\" only", i);
        if (!json_is_number(tolerance) || !(json_number_value(tolerance) >= 0) || json_number_value(tolerance) > 1e300)
            return moat_errf(err, errlen, "tests[%zu].tolerance must be a non-negative number", i);
        t->tolerance = json_number_value(tolerance);
    }
    if (t->name == NULL) {
        char def[32];
        snprintf(def, sizeof(def), "test %zu", i + 1);
        if ((t->name = strdup(def)) == NULL)
            return moat_errf(err, errlen, "out of memory");
    }
    /* the case's own stdin and args, else the request's */
    const char *in = stdin_v ? json_string_value(stdin_v) : (const char *)req->stdin_data;
    tc->stdin_len = stdin_v ? json_string_length(stdin_v) : req->stdin_len;
    if (tc->stdin_len > 0 && (tc->stdin_data = (uint8_t *)moat_memdup0(in, tc->stdin_len)) == NULL)
        return moat_errf(err, errlen, "out of memory");
    if (args != NULL) {
        struct moat_exec_request a;
        char field[48];
        memset(&a, 0, sizeof(a));
        if (parse_args(args, &a, err, errlen) != 0) {
            /* name the case: "args[0] must ..." becomes "tests[2].args[0] must ..." */
            snprintf(field, sizeof(field), "tests[%zu].", i);
            size_t fl = strlen(field), el = strlen(err);
            if (fl + el < errlen) {
                memmove(err + fl, err, el + 1);
                memcpy(err, field, fl);
            }
            for (size_t k = 0; k < a.nargs; k++)
                free(a.args[k]);
            free(a.args);
            return -1;
        }
        tc->args = a.args;
        tc->nargs = a.nargs;
    } else if (dup_args(req->args, req->nargs, &tc->args, &tc->nargs) != 0) {
        return moat_errf(err, errlen, "out of memory");
    }
    return 0;
}

static int parse_tests(json_t *arr, json_t *timeout, struct moat_exec_request *out, struct piston_tests *tests, char *err,
                       size_t errlen)
{
    size_t n;

    if (!json_is_array(arr))
        return moat_errf(err, errlen, "tests must be an array");
    n = json_array_size(arr);
    if (n < 1 || n > MOAT_MAX_TESTS)
        return moat_errf(err, errlen, "tests must hold between 1 and %d cases", MOAT_MAX_TESTS);
    if ((out->tests = calloc(n, sizeof(*out->tests))) == NULL || (tests->items = calloc(n, sizeof(*tests->items))) == NULL)
        return moat_errf(err, errlen, "out of memory");
    for (size_t i = 0; i < n; i++) {
        out->ntests = tests->count = i + 1; /* so a partial parse is freed */
        if (parse_case(json_array_get(arr, i), i, out, &out->tests[i], &tests->items[i], err, errlen) != 0)
            return -1;
    }
    if (timeout != NULL) {
        if (!json_is_integer(timeout) || (json_integer_value(timeout) != -1 && json_integer_value(timeout) < 1))
            return moat_errf(err, errlen, "tests_timeout must be -1 or a positive integer");
        out->tests_wall_ms = (int64_t)json_integer_value(timeout);
    }
    return 0;
}

void piston_tests_free(struct piston_tests *t)
{
    for (size_t i = 0; t->items != NULL && i < t->count; i++) {
        free(t->items[i].name);
        free(t->items[i].expected);
    }
    free(t->items);
    memset(t, 0, sizeof(*t));
}

/* ---------------------------------------------------------------- request fields */

static int parse_fields(json_t *root, struct moat_exec_request *out, struct piston_tests *tests, json_t **metadata, char *err,
                        size_t errlen)
{
    json_t *language = NULL, *version = NULL, *files = NULL, *tests_v = NULL, *tests_timeout = NULL, *v;
    const char *key;

    json_object_foreach(root, key, v)
    {
        int rc = 0;
        if (strcmp(key, "language") == 0)
            language = v;
        else if (strcmp(key, "version") == 0)
            version = v;
        else if (strcmp(key, "files") == 0)
            files = v;
        else if (strcmp(key, "stdin") == 0) {
            if (!json_is_string(v))
                return moat_errf(err, errlen, "stdin must be a string");
            out->stdin_len = json_string_length(v);
            if ((out->stdin_data = (uint8_t *)moat_memdup0(json_string_value(v), out->stdin_len)) == NULL)
                return moat_errf(err, errlen, "out of memory");
        } else if (strcmp(key, "args") == 0)
            rc = parse_args(v, out, err, errlen);
        else if (strcmp(key, "run_timeout") == 0)
            rc = get_limit(v, "run_timeout", &out->run_timeout_ms, err, errlen);
        else if (strcmp(key, "compile_timeout") == 0)
            rc = get_limit(v, "compile_timeout", &out->compile_timeout_ms, err, errlen);
        else if (strcmp(key, "run_memory_limit") == 0)
            rc = get_limit(v, "run_memory_limit", &out->run_memory_bytes, err, errlen);
        else if (strcmp(key, "compile_memory_limit") == 0)
            rc = get_limit(v, "compile_memory_limit", &out->compile_memory_bytes, err, errlen);
        else if (strcmp(key, "run_cpu_time") == 0)
            rc = get_cpu_limit(v, "run_cpu_time", &out->run_cpu_ms, err, errlen);
        else if (strcmp(key, "compile_cpu_time") == 0)
            rc = get_cpu_limit(v, "compile_cpu_time", &out->compile_cpu_ms, err, errlen);
        else if (tests != NULL && strcmp(key, "tests") == 0)
            tests_v = v;
        else if (tests != NULL && strcmp(key, "tests_timeout") == 0)
            tests_timeout = v;
        else if (metadata != NULL && strcmp(key, "metadata") == 0) {
            if ((rc = gw_metadata_check(v, err, errlen)) == 0)
                *metadata = json_incref(v);
        } else
            return moat_errf(err, errlen, "unknown field '%.64s'", key);
        if (rc != 0)
            return -1;
    }
    if (language == NULL)
        return moat_errf(err, errlen, "language is required");
    if (get_label(language, "language", &out->language, err, errlen) != 0)
        return -1;
    if (version == NULL)
        return moat_errf(err, errlen, "version is required");
    if (get_label(version, "version", &out->version, err, errlen) != 0)
        return -1;
    if (!moat_selector_valid(out->version))
        return moat_errf(err, errlen, "version \"%.64s\" is neither a version nor a semver range (\"3.11\", \"^3.10\", \">=3 <4\")",
                         out->version);
    if (files == NULL)
        return moat_errf(err, errlen, "files is required");
    if (parse_files(files, out, err, errlen) != 0)
        return -1;
    if (tests_timeout != NULL && tests_v == NULL)
        return moat_errf(err, errlen, "tests_timeout goes with tests only");
    if (tests_v != NULL)
        return parse_tests(tests_v, tests_timeout, out, tests, err, errlen);
    return 0;
}

static int parse_object(json_t *root, struct moat_exec_request *out, struct piston_tests *tests, json_t **metadata, char *err,
                        size_t errlen)
{
    int rc;

    memset(out, 0, sizeof(*out));
    if (tests != NULL)
        memset(tests, 0, sizeof(*tests));
    if (metadata != NULL)
        *metadata = NULL;
    out->tests_wall_ms = -1;
    out->run_timeout_ms = out->compile_timeout_ms = -1;
    out->run_memory_bytes = out->compile_memory_bytes = -1;
    out->run_cpu_ms = out->compile_cpu_ms = -1;
    if (!json_is_object(root))
        return moat_errf(err, errlen, "request body must be a JSON object");
    rc = parse_fields(root, out, tests, metadata, err, errlen);
    if (rc != 0) {
        piston_exec_request_free(out);
        if (tests != NULL)
            piston_tests_free(tests);
        if (metadata != NULL) {
            json_decref(*metadata);
            *metadata = NULL;
        }
    }
    return rc;
}

int piston_parse_exec_object(json_t *root, struct moat_exec_request *out, json_t **metadata, char *err, size_t errlen)
{
    return parse_object(root, out, NULL, metadata, err, errlen);
}

int piston_parse_exec_request_tests(const char *body, size_t len, struct moat_exec_request *out, struct piston_tests *tests,
                                    json_t **metadata, char *err, size_t errlen)
{
    json_error_t jerr;
    json_t *root;
    int rc;

    memset(out, 0, sizeof(*out));
    if (tests != NULL)
        memset(tests, 0, sizeof(*tests));
    if (metadata != NULL)
        *metadata = NULL;
    if (body == NULL || len == 0)
        return moat_errf(err, errlen, "request body must be a JSON object");
    root = json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
    if (root == NULL)
        return moat_errf(err, errlen, "invalid JSON at line %d column %d: %s", jerr.line, jerr.column, jerr.text);
    rc = parse_object(root, out, tests, metadata, err, errlen);
    json_decref(root);
    return rc;
}

int piston_parse_exec_request(const char *body, size_t len, struct moat_exec_request *out, char *err, size_t errlen)
{
    return piston_parse_exec_request_tests(body, len, out, NULL, NULL, err, errlen);
}

void piston_exec_request_free(struct moat_exec_request *r)
{
    size_t i;

    free(r->language);
    free(r->version);
    for (i = 0; i < r->nfiles; i++) {
        free(r->files[i].name);
        free(r->files[i].content);
    }
    free(r->files);
    for (i = 0; i < r->nargs; i++)
        free(r->args[i]);
    free(r->args);
    free(r->stdin_data);
    for (i = 0; r->tests != NULL && i < r->ntests; i++) {
        for (size_t j = 0; j < r->tests[i].nargs; j++)
            free(r->tests[i].args[j]);
        free(r->tests[i].args);
        free(r->tests[i].stdin_data);
    }
    free(r->tests);
    memset(r, 0, sizeof(*r));
}

/* ---------------------------------------------------------------- responses */

char *piston_utf8_sanitize(const uint8_t *in, size_t len, size_t *outlen)
{
    size_t i = 0, o = 0;
    char *out;

    if (len > (SIZE_MAX - 1) / 3)
        return NULL;
    if ((out = malloc(len * 3 + 1)) == NULL)
        return NULL;
    while (i < len) {
        uint32_t cp;
        size_t bad_len, n = moat_utf8_decode(in + i, len - i, &cp, &bad_len);
        if (n > 0) {
            memcpy(out + o, in + i, n);
            o += n;
            i += n;
        } else {
            memcpy(out + o, "\xef\xbf\xbd", 3);
            o += 3;
            i += bad_len;
        }
    }
    out[o] = '\0';
    *outlen = o;
    return out;
}

/* A JSON string from arbitrary bytes (invalid UTF-8 replaced); NULL on no memory. */
static json_t *json_bytes(const void *data, size_t len)
{
    size_t n;
    char *s;
    json_t *j;

    if (data == NULL)
        return json_string("");
    if ((s = piston_utf8_sanitize(data, len, &n)) == NULL)
        return NULL;
    j = json_stringn_nocheck(s, n);
    free(s);
    return j;
}

static json_t *json_u64(uint64_t v)
{
    return json_integer(v > (uint64_t)LLONG_MAX ? LLONG_MAX : (json_int_t)v);
}

static json_t *signal_name(const struct moat_stage_result *st)
{
    const char *abbrev;
    char name[32];

    if (!st->has_signal || st->signal <= 0 || (abbrev = sigabbrev_np(st->signal)) == NULL)
        return json_null();
    snprintf(name, sizeof(name), "SIG%s", abbrev);
    return json_string(name);
}

/* json_object_set_new that remembers a failure (a NULL value or no memory). */
static void put(json_t *obj, const char *key, json_t *v, int *failed)
{
    if (v == NULL || json_object_set_new(obj, key, v) != 0)
        *failed = 1;
}

int piston_stage_status_fields(json_t *o, const struct moat_stage_result *st)
{
    const char *status = moat_status_piston(st->status);
    int failed = 0;

    put(o, "code", st->has_code ? json_integer(st->code) : json_null(), &failed);
    put(o, "signal", signal_name(st), &failed);
    put(o, "message", st->message != NULL ? json_bytes(st->message, strlen(st->message)) : json_null(), &failed);
    put(o, "status", status != NULL ? json_string(status) : json_null(), &failed);
    put(o, "cpu_time", json_u64(st->cpu_ms), &failed);
    put(o, "wall_time", json_u64(st->wall_ms), &failed);
    put(o, "memory", json_u64(st->memory_bytes), &failed);
    return failed ? -1 : 0;
}

json_t *piston_json_bytes(const void *data, size_t len)
{
    return json_bytes(data, len);
}

static json_t *stage_json(const struct moat_stage_result *st)
{
    json_t *o = json_object();
    int failed = 0;

    if (o == NULL)
        return NULL;
    put(o, "stdout", json_bytes(st->stdout_data, st->stdout_len), &failed);
    put(o, "stderr", json_bytes(st->stderr_data, st->stderr_len), &failed);
    put(o, "output", json_bytes(st->output_data, st->output_len), &failed);
    if (!failed && piston_stage_status_fields(o, st) != 0)
        failed = 1;
    if (failed) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static char *dump(json_t *root)
{
    char *s = json_dumps(root, JSON_COMPACT);

    json_decref(root);
    return s;
}

json_t *piston_exec_result_object(const struct moat_exec_result *res)
{
    json_t *o = json_object();
    int failed = 0;

    if (o == NULL)
        return NULL;
    put(o, "language", res->language != NULL ? json_bytes(res->language, strlen(res->language)) : json_null(), &failed);
    put(o, "version", res->version != NULL ? json_bytes(res->version, strlen(res->version)) : json_null(), &failed);
    /* moat's: the walls that held the job's boxes (moat-backend(8), "Walls"), when the backend said */
    if (res->walls != NULL)
        put(o, "walls", json_bytes(res->walls, strlen(res->walls)), &failed);
    /* Piston answers a failed compile with its compile result as `run` too
     * (api/v2.js: "backward compatibility when the run stage is not started"). */
    put(o, "run", stage_json(!res->run.present && res->compile.present ? &res->compile : &res->run), &failed);
    if (res->compile.present)
        put(o, "compile", stage_json(&res->compile), &failed);
    if (failed) {
        json_decref(o);
        return NULL;
    }
    return o;
}

char *piston_exec_result_json(const struct moat_exec_result *res)
{
    json_t *o = piston_exec_result_object(res);

    return o != NULL ? dump(o) : NULL;
}

char *piston_runtimes_json(const struct moat_runtimes *rt)
{
    json_t *arr = json_array();
    size_t i, j;

    if (arr == NULL)
        return NULL;
    for (i = 0; i < rt->count; i++) {
        const struct moat_runtime *r = &rt->items[i];
        json_t *o = json_object(), *aliases;
        int failed = 0;

        /* Once appended, o belongs to arr: one json_decref(arr) frees everything on failure. */
        if (o == NULL || json_array_append_new(arr, o) != 0) {
            json_decref(arr);
            return NULL;
        }
        put(o, "language", json_bytes(r->language, r->language != NULL ? strlen(r->language) : 0), &failed);
        put(o, "version", json_bytes(r->version, r->version != NULL ? strlen(r->version) : 0), &failed);
        aliases = json_array();
        put(o, "aliases", aliases, &failed);
        for (j = 0; !failed && j < r->naliases; j++)
            if (json_array_append_new(aliases, json_bytes(r->aliases[j], r->aliases[j] != NULL ? strlen(r->aliases[j]) : 0)) != 0)
                failed = 1;
        /* the walls this backend can run the runtime in (moat's own field; none said: the plain box) */
        json_t *walls = json_array();
        unsigned bits = r->isolations ? r->isolations : 1u << MOAT_ISOLATION_NAMESPACES;
        put(o, "isolation", walls, &failed);
        for (uint8_t k = 0; !failed && k <= MOAT_ISOLATION_MAX; k++)
            if ((bits & (1u << k)) && json_array_append_new(walls, json_string(moat_isolation_name(k))) != 0)
                failed = 1;
        if (failed) {
            json_decref(arr);
            return NULL;
        }
    }
    return dump(arr);
}

char *piston_error_json(const char *message, const char *code, const char *request_id)
{
    json_t *o = json_object();
    int failed = 0;

    if (o == NULL)
        return NULL;
    put(o, "message", json_bytes(message, strlen(message)), &failed);
    put(o, "code", json_string(code), &failed);
    put(o, "request_id", json_string(request_id), &failed);
    if (failed) {
        json_decref(o);
        return NULL;
    }
    return dump(o);
}
