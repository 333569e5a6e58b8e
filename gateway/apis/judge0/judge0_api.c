/*
 * judge0_api.c - Judge0 CE's API in moat's terms (see judge0_api.h).
 *
 * Theory of operation
 * -------------------
 * A Judge0 client speaks in language ids, seconds, kilobytes and base64
 * texts; moat's backend in language names, milliseconds, bytes and raw
 * bytes.  This file is the one translation between them, in four parts:
 *
 *   the catalogue   Judge0 CE's well-known ids of the languages moat has
 *                   (the name carries the version really installed), the
 *                   statuses 1-14, /about and /config_info;
 *   the query       wait, base64_encoded and fields, strictly;
 *   the request     a submission parsed strictly: duplicate, unknown and
 *                   wrongly typed members are a 400 naming them; values
 *                   Judge0 itself refuses, and the features moat refuses
 *                   (compiler options, network, extra files, repeated
 *                   runs, limits the box cannot apply), a 422 in Judge0's
 *                   shape ({"field": ["message"]}); then the execution
 *                   request for the backend, always freshly built;
 *   the result      the backend's result judged as Judge0 judges it
 *                   (compile failure, timeout, signal, exit code, expected
 *                   output), stored as one record with every field and the
 *                   texts in base64 (any bytes survive), and rendered from
 *                   that record with the fields and encoding a response
 *                   asks for.
 */
#include "judge0_api.h"
#include "json/metadata.h"
#include "common/gw_limits.h"
#include "judge0_zip.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "moat_base64.h"
#include "moat_buf.h"
#include "moat_options.h"
#include "moat_path.h"
#include "moat_utf8.h"

/* ------------------------------------------------------------- helpers */

/* A JSON string of len bytes as base64, or null for NULL data. */
static json_t *b64_json(const void *data, size_t len)
{
    char *buf;
    json_t *s;

    if (data == NULL)
        return json_null();
    if ((buf = malloc(MOAT_BASE64_ENCODED_LEN(len) + 1)) == NULL)
        return NULL;
    size_t n = moat_base64_encode(data, len, buf);
    s = json_stringn(buf, n);
    free(buf);
    return s;
}

/* Strict base64 after dropping line breaks (what Ruby's encode64 and
 * Python's encodebytes put every 60 or 76 characters).  0, -1 bad, -2 memory. */
static int b64_decode(const char *in, size_t len, uint8_t **out, size_t *outlen)
{
    char *clean = malloc(len + 1);
    uint8_t *buf;
    size_t n = 0;

    if (clean == NULL)
        return -2;
    for (size_t i = 0; i < len; i++)
        if (in[i] != '\n' && in[i] != '\r')
            clean[n++] = in[i];
    if (n % 4 != 0 || (buf = malloc(MOAT_BASE64_DECODED_MAX(n) + 1)) == NULL) {
        free(clean);
        return n % 4 != 0 ? -1 : -2;
    }
    int rc = moat_base64_decode(clean, n, buf, outlen);
    free(clean);
    if (rc != 0) {
        free(buf);
        return -1;
    }
    buf[*outlen] = '\0';
    *out = buf;
    return 0;
}

/* ------------------------------------------------------------ catalogue */

static const char *const status_names[JUDGE0_STATUS_MAX + 1] = {
    [JUDGE0_IN_QUEUE] = "In Queue",
    [JUDGE0_PROCESSING] = "Processing",
    [JUDGE0_ACCEPTED] = "Accepted",
    [JUDGE0_WRONG_ANSWER] = "Wrong Answer",
    [JUDGE0_TIME_LIMIT] = "Time Limit Exceeded",
    [JUDGE0_COMPILATION_ERROR] = "Compilation Error",
    [JUDGE0_RE_SIGSEGV] = "Runtime Error (SIGSEGV)",
    [JUDGE0_RE_SIGXFSZ] = "Runtime Error (SIGXFSZ)",
    [JUDGE0_RE_SIGFPE] = "Runtime Error (SIGFPE)",
    [JUDGE0_RE_SIGABRT] = "Runtime Error (SIGABRT)",
    [JUDGE0_RE_NZEC] = "Runtime Error (NZEC)",
    [JUDGE0_RE_OTHER] = "Runtime Error (Other)",
    [JUDGE0_INTERNAL_ERROR] = "Internal Error",
    [JUDGE0_EXEC_FORMAT_ERROR] = "Exec Format Error",
};

const char *judge0_status_description(int id)
{
    return id >= 1 && id <= JUDGE0_STATUS_MAX ? status_names[id] : NULL;
}

/* Judge0 CE's ids (db/seeds/languages/active.rb) of the families moat has. */
static const struct judge0_lang langs[] = {
    {46, "bash", "Bash ", "script.sh"},
    {50, "c", "C (GCC ", "main.c"},
    {54, "c++", "C++ (GCC ", "main.cpp"},
    {60, "go", "Go ", "main.go"},
    {62, "java", "Java (OpenJDK ", "Main.java"},
    {63, "javascript", "JavaScript (Node.js ", "script.js"},
    {64, "lua", "Lua ", "script.lua"},
    {71, "python", "Python ", "script.py"},
    {72, "ruby", "Ruby ", "script.rb"},
    {73, "rust", "Rust ", "main.rs"},
    {82, "sqlite3", "SQL (SQLite ", "script.sql"},
    {85, "perl", "Perl ", "script.pl"},
};
#define NLANGS (sizeof(langs) / sizeof(langs[0]))

const struct judge0_lang *judge0_lang_by_id(int64_t id)
{
    for (size_t i = 0; i < NLANGS; i++)
        if (langs[i].id == id)
            return &langs[i];
    return NULL;
}

const struct judge0_lang *judge0_lang_at(size_t i)
{
    return i < NLANGS ? &langs[i] : NULL;
}

void judge0_language_name(const struct judge0_lang *l, const char *version, char *out, size_t size)
{
    /* "Python (3.11.2)", "C (GCC 12.2.0)": the prefix holds the '(' when it names a compiler */
    snprintf(out, size, "%s%s%s)", l->name_prefix, strchr(l->name_prefix, '(') != NULL ? "" : "(", version);
}

json_t *judge0_language_json(const struct judge0_lang *l, const char *version, int detail)
{
    char name[128];

    judge0_language_name(l, version, name, sizeof(name));
    json_t *o = json_pack("{s:i, s:s}", "id", (json_int_t)l->id, "name", name);
    if (o == NULL || !detail)
        return o;
    /* the commands are the backend's (its language manifests), not told to the gateway */
    if (json_object_set_new(o, "is_archived", json_false()) != 0 ||
        json_object_set_new(o, "source_file", json_string(l->source_file)) != 0 ||
        json_object_set_new(o, "compile_cmd", json_null()) != 0 || json_object_set_new(o, "run_cmd", json_null()) != 0) {
        json_decref(o);
        return NULL;
    }
    return o;
}

char *judge0_statuses_json(void)
{
    json_t *a = json_array();
    char *s = NULL;

    for (int id = 1; a != NULL && id <= JUDGE0_STATUS_MAX; id++)
        if (json_array_append_new(a, json_pack("{s:i, s:s}", "id", id, "description", status_names[id])) != 0)
            goto out;
    if (a != NULL)
        s = json_dumps(a, JSON_COMPACT);
out:
    json_decref(a);
    return s;
}

char *judge0_about_json(void)
{
    json_t *o = json_pack("{s:s, s:s, s:s, s:s}", "version", "moat (Judge0 CE API)", "homepage", "https://judge0.com",
                          "source_code", "https://github.com/judge0/judge0", "maintainer",
                          "the operator of this moat gateway (compatibility layer; not Judge0)");
    char *s = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;

    json_decref(o);
    return s;
}

/* A run-stage rlimit in force: the box's, lowered by the tenant's ceiling when it has one. */
static json_int_t rlimit_in_force(uint64_t box, uint64_t tenant)
{
    return (json_int_t)(tenant > 0 && tenant < box ? tenant : box);
}

char *judge0_config_info_json(const struct tenant_policy *p, uint64_t ttl_s, uint64_t max_queue, json_t *compile_langs,
                              const struct judge0_callbacks_info *cb)
{
    const struct policy_limits *c = &p->ceilings;
    double t = (double)c->run_timeout_ms / 1000.0;
    json_int_t mem = (json_int_t)(c->run_memory_bytes / 1024);
    json_int_t stack = rlimit_in_force(JUDGE0_BOX_STACK_KB, c->run_stack_kib);
    json_int_t procs = rlimit_in_force(JUDGE0_BOX_PROCESSES, c->run_processes);
    json_int_t fsize = rlimit_in_force(JUDGE0_BOX_FILE_SIZE_KB, c->run_file_size_kib);
    /* a limit's default is the tenant's ceiling (policy: omitted limits get it) */
    json_t *o = json_pack("{s:b, s:b, s:O, s:b, s:b, s:b, s:I, s:f, s:b, s:I, s:f, s:f, s:f, s:f, s:f, s:f, s:I, s:I}",
                          "enable_wait_result", 1, "enable_compiler_options", json_array_size(compile_langs) > 0,
                          "allowed_languages_for_compile_options", compile_langs, "enable_command_line_arguments", 1,
                          "enable_submission_delete", 0, "enable_callbacks", cb->enabled, "callbacks_max_tries",
                          (json_int_t)(cb->enabled ? cb->max_tries : 0), "callbacks_timeout", cb->enabled ? cb->timeout_s : 0.0,
                          "enable_additional_files", 1, "max_queue_size", (json_int_t)max_queue, "cpu_time_limit", t,
                          "max_cpu_time_limit", t, "cpu_extra_time", 0.0, "max_cpu_extra_time", JUDGE0_MAX_CPU_EXTRA_TIME,
                          "wall_time_limit", t, "max_wall_time_limit", t, "memory_limit", mem, "max_memory_limit", mem);
    json_t *more = json_pack("{s:I, s:I, s:I, s:I, s:b, s:b, s:b, s:b, s:I, s:I, s:i, s:i, s:b, s:i, s:b, s:i, s:I, s:b, "
                             "s:b, s:b}",
                             "stack_limit", stack, "max_stack_limit", stack, "max_processes_and_or_threads", procs,
                             "max_max_processes_and_or_threads", procs, "enable_per_process_and_thread_time_limit", 0,
                             "allow_enable_per_process_and_thread_time_limit", 0, "enable_per_process_and_thread_memory_limit", 0,
                             "allow_enable_per_process_and_thread_memory_limit", 0, "max_file_size", fsize, "max_max_file_size",
                             fsize, "number_of_runs", 1, "max_number_of_runs", GW_JUDGE0_MAX_RUNS, "redirect_stderr_to_stdout", 0,
                             "max_extract_size", (int)(GW_JUDGE0_ZIP_MAX_BYTES / 1024), "enable_batched_submissions", 0,
                             "max_submission_batch_size", 0, "submission_cache_duration", (json_int_t)ttl_s, "use_docs_as_homepage",
                             0, "allow_enable_network", 0, "enable_network", 0);
    char *s = NULL;

    if (o != NULL && more != NULL && json_object_update(o, more) == 0)
        s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    json_decref(more);
    return s;
}

/* ---------------------------------------------------------------- query */

static const char *const field_names[JUDGE0_NFIELDS] = {
#define JUDGE0_FIELD_NAME(id, name) [JUDGE0_F_##id] = name,
    JUDGE0_FIELDS(JUDGE0_FIELD_NAME)
#undef JUDGE0_FIELD_NAME
};

/* The texts a record keeps in base64. */
static int is_text_field(int f)
{
    return f == JUDGE0_F_SOURCE_CODE || f == JUDGE0_F_STDIN || f == JUDGE0_F_EXPECTED_OUTPUT || f == JUDGE0_F_STDOUT ||
           f == JUDGE0_F_STDERR || f == JUDGE0_F_COMPILE_OUTPUT || f == JUDGE0_F_MESSAGE;
}

static void add_field(struct judge0_query *q, int f)
{
    if (q->fields & (1ull << f))
        return;
    q->fields |= 1ull << f;
    q->order[q->nfields++] = (unsigned char)f;
}

static void default_fields(struct judge0_query *q)
{
    static const int def[] = {JUDGE0_F_STDOUT, JUDGE0_F_TIME,           JUDGE0_F_MEMORY,  JUDGE0_F_STDERR,
                              JUDGE0_F_TOKEN,  JUDGE0_F_COMPILE_OUTPUT, JUDGE0_F_MESSAGE, JUDGE0_F_STATUS};

    for (size_t i = 0; i < sizeof(def) / sizeof(def[0]); i++)
        add_field(q, def[i]);
}

static int hexval(int c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* Percent-decode (and '+' as space) in[0..len) into out (NUL-terminated); -1 bad escape or too long. */
static int url_decode(const char *in, size_t len, char *out, size_t outsize)
{
    size_t n = 0;

    for (size_t i = 0; i < len; i++) {
        int c = (unsigned char)in[i];
        if (c == '%') {
            int hi, lo;
            if (i + 2 >= len || (hi = hexval(in[i + 1])) < 0 || (lo = hexval(in[i + 2])) < 0)
                return -1;
            c = hi * 16 + lo;
            i += 2;
        } else if (c == '+') {
            c = ' ';
        }
        if (c == 0 || n + 1 >= outsize)
            return -1;
        out[n++] = (char)c;
    }
    out[n] = '\0';
    return 0;
}

static int parse_bool(const char *v, int *out)
{
    if (strcmp(v, "true") == 0)
        *out = 1;
    else if (strcmp(v, "false") == 0)
        *out = 0;
    else
        return -1;
    return 0;
}

static int parse_fields(const char *v, struct judge0_query *q, char *err, size_t errlen)
{
    char bad_names[256] = "";
    size_t nbad = 0;

    if (strcmp(v, "*") == 0) {
        for (int f = 0; f < JUDGE0_NFIELDS; f++)
            add_field(q, f);
        return 0;
    }
    for (const char *p = v; *p != '\0';) {
        const char *end = strchr(p, ',');
        size_t n = end != NULL ? (size_t)(end - p) : strlen(p);
        int found = -1;
        while (n > 0 && *p == ' ')
            p++, n--;
        while (n > 0 && p[n - 1] == ' ')
            n--;
        for (int f = 0; f < JUDGE0_NFIELDS && n > 0; f++)
            if (strlen(field_names[f]) == n && memcmp(field_names[f], p, n) == 0)
                found = f;
        if (found >= 0) {
            add_field(q, found);
        } else if (n > 0) {
            nbad++;
            size_t used = strlen(bad_names);
            snprintf(bad_names + used, sizeof(bad_names) - used, "%s%.*s", used ? ", " : "", (int)(n > 64 ? 64 : n), p);
        }
        if (end == NULL)
            break;
        p = end + 1;
    }
    if (nbad > 0)
        return judge0_errf(err, errlen, "invalid fields: [%s]", bad_names);
    if (q->nfields == 0)
        default_fields(q);
    return 0;
}

/* tokens=a,b,c: Judge0's batch bounds; a malformed token is kept as "" (not found). */
static int parse_tokens(const char *v, struct judge0_query *q, char *err, size_t errlen)
{
    for (const char *p = v; *p != '\0';) {
        const char *end = strchr(p, ',');
        size_t n = end != NULL ? (size_t)(end - p) : strlen(p);
        if (q->ntokens == JUDGE0_BATCH_MAX)
            return judge0_errf(err, errlen, "number of submissions in a batch should be less than or equal to %d",
                               JUDGE0_BATCH_MAX);
        if (judge0_token_valid(p, n))
            memcpy(q->tokens[q->ntokens], p, n);
        q->tokens[q->ntokens++][judge0_token_valid(p, n) ? n : 0] = '\0';
        if (end == NULL)
            break;
        p = end + 1;
    }
    if (q->ntokens == 0)
        return judge0_errf(err, errlen, "there should be at least one submission in a batch");
    return 0;
}

int judge0_parse_query(const char *q, size_t len, unsigned allowed, struct judge0_query *out, char *err, size_t errlen)
{
    char name[32], value[1024];
    unsigned seen = 0;

    memset(out, 0, sizeof(*out));
    for (size_t at = 0; q != NULL && at < len;) {
        const char *amp = memchr(q + at, '&', len - at);
        size_t end = amp != NULL ? (size_t)(amp - q) : len;
        const char *eq = memchr(q + at, '=', end - at);
        size_t nlen = eq != NULL ? (size_t)(eq - (q + at)) : end - at;
        unsigned bit = 0;

        if (end > at) {
            if (url_decode(q + at, nlen, name, sizeof(name)) != 0)
                return judge0_errf(err, errlen, "malformed query parameter");
            if (eq == NULL || url_decode(eq + 1, end - (size_t)(eq + 1 - q), value, sizeof(value)) != 0)
                return judge0_errf(err, errlen, "query parameter %s needs a value", name);
            if (strcmp(name, "wait") == 0)
                bit = JUDGE0_Q_WAIT;
            else if (strcmp(name, "base64_encoded") == 0)
                bit = JUDGE0_Q_BASE64;
            else if (strcmp(name, "fields") == 0)
                bit = JUDGE0_Q_FIELDS;
            else if (strcmp(name, "tokens") == 0)
                bit = JUDGE0_Q_TOKENS;
            if ((bit & allowed) == 0)
                return judge0_errf(err, errlen, "unknown query parameter: %s", name);
            if (seen & bit)
                return judge0_errf(err, errlen, "query parameter %s given twice", name);
            seen |= bit;
            if (bit == JUDGE0_Q_WAIT && parse_bool(value, &out->wait) != 0)
                return judge0_errf(err, errlen, "wait must be true or false");
            if (bit == JUDGE0_Q_BASE64 && parse_bool(value, &out->base64) != 0)
                return judge0_errf(err, errlen, "base64_encoded must be true or false");
            if (bit == JUDGE0_Q_FIELDS && parse_fields(value, out, err, errlen) != 0)
                return -1;
            if (bit == JUDGE0_Q_TOKENS && parse_tokens(value, out, err, errlen) != 0)
                return -1;
        }
        at = end + 1;
    }
    if (out->nfields == 0)
        default_fields(out);
    if ((allowed & JUDGE0_Q_TOKENS) && !(seen & JUDGE0_Q_TOKENS))
        return judge0_errf(err, errlen, "there should be at least one submission in a batch");
    return 0;
}

/* --------------------------------------------------------------- request */

/* The members of a submission: Judge0's, and what each is in moat. */
enum member_kind {
    M_TEXT,     /* a string, base64 when asked; null: none */
    M_STRING,   /* a string as it is; null: none */
    M_INT,      /* an integer; null: default */
    M_SECONDS,  /* a number; null: default */
    M_BOOL,     /* true or false; null: false */
    M_REFUSED,  /* any non-null value is a 422 */
    M_METADATA, /* moat's extension: an object metadata.c accepts; null: none */
};

static const struct member {
    const char *name;
    enum member_kind kind;
} members[] = {
    {"source_code", M_TEXT},
    {"language_id", M_INT},
    {"compiler_options", M_STRING},
    {"command_line_arguments", M_STRING},
    {"stdin", M_TEXT},
    {"expected_output", M_TEXT},
    {"cpu_time_limit", M_SECONDS},
    {"cpu_extra_time", M_SECONDS},
    {"wall_time_limit", M_SECONDS},
    {"memory_limit", M_INT},
    {"stack_limit", M_INT},
    {"max_processes_and_or_threads", M_INT},
    {"enable_per_process_and_thread_time_limit", M_BOOL},
    {"enable_per_process_and_thread_memory_limit", M_BOOL},
    {"max_file_size", M_INT},
    {"redirect_stderr_to_stdout", M_BOOL},
    {"number_of_runs", M_INT},
    {"enable_network", M_BOOL},
    {"callback_url", M_STRING},     /* checked against the tenant's rules: judge0_check_callback */
    {"additional_files", M_STRING}, /* base64 of a zip archive */
    {"metadata", M_METADATA},
};
#define NMEMBERS (sizeof(members) / sizeof(members[0]))

/* One Judge0 field error: {"field": ["message"]} (the first message of a field). */
static void field_error(json_t *errors, char *err, size_t errlen, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void field_error(json_t *errors, char *err, size_t errlen, const char *field, const char *fmt, ...)
{
    char msg[256];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (json_object_get(errors, field) != NULL)
        return;
    if (json_object_size(errors) == 0)
        snprintf(err, errlen, "%s %s", field, msg);
    json_object_set_new(errors, field, json_pack("[s]", msg));
}

/* The shell's special characters: command_line_arguments is split on
 * white space only (with '...' and "..." quoting), never given to a shell. */
static int shell_special(int c)
{
    return strchr("\\$`;|&<>(){}*?[]~!#\n\r", c) != NULL;
}

/* Split s into args; 0, -1 shell syntax or unbalanced quote, -2 too many/long, -3 memory. */
static int split_args(const char *s, char ***out, size_t *nout)
{
    char **args = NULL;
    size_t n = 0;
    char *cur = NULL;
    size_t clen = 0;
    const char *p = s;
    int rc = 0;

    if ((cur = malloc(MOAT_MAX_ARG_LEN + 1)) == NULL)
        return -3;
    for (;;) {
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == '\0')
            break;
        clen = 0;
        while (*p != '\0' && *p != ' ' && *p != '\t') {
            if (*p == '\'' || *p == '"') {
                char q = *p++;
                while (*p != '\0' && *p != q) {
                    if (q == '"' && (*p == '$' || *p == '`' || *p == '\\')) {
                        rc = -1; /* $ ` \ inside double quotes: expansions */
                        goto out;
                    }
                    if (clen >= MOAT_MAX_ARG_LEN) {
                        rc = -2;
                        goto out;
                    }
                    cur[clen++] = *p++;
                }
                if (*p != q) {
                    rc = -1;
                    goto out;
                }
                p++;
                continue;
            }
            if (shell_special((unsigned char)*p)) {
                rc = -1;
                goto out;
            }
            if (clen >= MOAT_MAX_ARG_LEN) {
                rc = -2;
                goto out;
            }
            cur[clen++] = *p++;
        }
        if (n >= MOAT_MAX_ARGS) {
            rc = -2;
            goto out;
        }
        char **grown = realloc(args, (n + 1) * sizeof(*args));
        if (grown == NULL || (grown[n] = (char *)moat_memdup0(cur, clen)) == NULL) {
            if (grown != NULL)
                args = grown;
            rc = -3;
            goto out;
        }
        args = grown;
        n++;
    }
out:
    free(cur);
    if (rc != 0) {
        for (size_t i = 0; i < n; i++)
            free(args[i]);
        free(args);
        return rc;
    }
    *out = args;
    *nout = n;
    return 0;
}

void judge0_request_free(struct judge0_request *j)
{
    free(j->source);
    free(j->stdin_data);
    free(j->expected);
    free(j->command_line_arguments);
    free(j->compiler_options_text);
    for (size_t i = 0; i < j->ncompiler_options; i++)
        free(j->compiler_options[i]);
    free(j->compiler_options);
    free(j->callback_url);
    free(j->zip);
    for (size_t i = 0; i < j->nextra; i++) {
        free(j->extra[i].name);
        free(j->extra[i].content);
    }
    free(j->extra);
    for (size_t i = 0; i < j->nargs; i++)
        free(j->args[i]);
    free(j->args);
    json_decref(j->metadata);
    memset(j, 0, sizeof(*j));
}

/* A text member: base64 or not; -1 bad base64 (422), -2 memory. */
static int get_text(json_t *v, int base64, uint8_t **out, size_t *len)
{
    if (base64)
        return b64_decode(json_string_value(v), json_string_length(v), out, len);
    *len = json_string_length(v);
    return (*out = moat_memdup0(json_string_value(v), *len)) != NULL ? 0 : -2;
}

/* The JSON type check of every member: -1 with err naming it. */
static int check_types(json_t *root, char *err, size_t errlen)
{
    const char *key;
    json_t *v;

    json_object_foreach(root, key, v)
    {
        const struct member *m = NULL;
        for (size_t i = 0; i < NMEMBERS && m == NULL; i++)
            if (strcmp(members[i].name, key) == 0)
                m = &members[i];
        if (m == NULL)
            return judge0_errf(err, errlen, "unknown field: %.64s", key);
        if (json_is_null(v) || m->kind == M_REFUSED)
            continue;
        if ((m->kind == M_TEXT || m->kind == M_STRING) && !json_is_string(v))
            return judge0_errf(err, errlen, "%s must be a string", key);
        if (m->kind == M_INT && !json_is_integer(v))
            return judge0_errf(err, errlen, "%s must be an integer", key);
        if (m->kind == M_SECONDS && !json_is_number(v))
            return judge0_errf(err, errlen, "%s must be a number", key);
        if (m->kind == M_BOOL && !json_is_boolean(v))
            return judge0_errf(err, errlen, "%s must be true or false", key);
        if (m->kind == M_METADATA && gw_metadata_check(v, err, errlen) != 0)
            return -1;
    }
    return 0;
}

static double seconds_of(json_t *root, const char *name)
{
    json_t *v = json_object_get(root, name);

    return v == NULL || json_is_null(v) ? -1 : json_number_value(v);
}

static int64_t int_of(json_t *root, const char *name)
{
    json_t *v = json_object_get(root, name);

    return v == NULL || json_is_null(v) ? -1 : (int64_t)json_integer_value(v);
}

/* The limits and switches: Judge0's rules, then what moat can apply. */
static void check_limits(json_t *root, struct judge0_request *j, json_t *errors, char *err, size_t errlen)
{
    static const struct {
        const char *name;
        double max;
    } secs[] = {{"cpu_time_limit", 0}, {"cpu_extra_time", JUDGE0_MAX_CPU_EXTRA_TIME}, {"wall_time_limit", 0}};
    static const struct {
        const char *name;
        int64_t max;
    } box[] = {{"stack_limit", JUDGE0_BOX_STACK_KB},
               {"max_processes_and_or_threads", JUDGE0_BOX_PROCESSES},
               {"max_file_size", JUDGE0_BOX_FILE_SIZE_KB}};

    for (size_t i = 0; i < sizeof(secs) / sizeof(secs[0]); i++) {
        double v = seconds_of(root, secs[i].name);
        if (v == -1 && json_object_get(root, secs[i].name) != NULL && !json_is_null(json_object_get(root, secs[i].name)))
            v = -2;
        if (v != -1 && (!isfinite(v) || (i == 1 ? v < 0 : v <= 0)))
            field_error(errors, err, errlen, secs[i].name, "must be greater than %s0", i == 1 ? "or equal to " : "");
        else if (secs[i].max > 0 && v > secs[i].max)
            field_error(errors, err, errlen, secs[i].name, "must be less than or equal to %g", secs[i].max);
        else if (v > (double)(GW_MAX_TIMEOUT_MS / 1000))
            field_error(errors, err, errlen, secs[i].name, "must be less than or equal to %d", GW_MAX_TIMEOUT_MS / 1000);
    }
    j->cpu_time_limit = seconds_of(root, "cpu_time_limit");
    j->cpu_extra_time = seconds_of(root, "cpu_extra_time");
    j->wall_time_limit = seconds_of(root, "wall_time_limit");
    j->memory_limit = int_of(root, "memory_limit");
    if (json_object_get(root, "memory_limit") != NULL && !json_is_null(json_object_get(root, "memory_limit")) &&
        (j->memory_limit <= 0 || j->memory_limit > INT64_MAX / 1024))
        field_error(errors, err, errlen, "memory_limit", "must be greater than 0");
    j->stack_limit = int_of(root, "stack_limit");
    j->max_processes = int_of(root, "max_processes_and_or_threads");
    j->max_file_size = int_of(root, "max_file_size");
    for (size_t i = 0; i < sizeof(box) / sizeof(box[0]); i++) {
        json_t *v = json_object_get(root, box[i].name);
        if (v == NULL || json_is_null(v))
            continue;
        int64_t n = (int64_t)json_integer_value(v);
        if (n <= 0)
            field_error(errors, err, errlen, box[i].name, "must be greater than 0");
        else if (n > box[i].max) /* the box's own limit: a request may lower it, never raise it */
            field_error(errors, err, errlen, box[i].name, "must be less than or equal to %lld", (long long)box[i].max);
    }
    j->number_of_runs = int_of(root, "number_of_runs");
    if (json_object_get(root, "number_of_runs") != NULL && !json_is_null(json_object_get(root, "number_of_runs")) &&
        (j->number_of_runs < 1 || j->number_of_runs > GW_JUDGE0_MAX_RUNS))
        field_error(errors, err, errlen, "number_of_runs", "must be between 1 and %d", GW_JUDGE0_MAX_RUNS);
    if (json_is_true(json_object_get(root, "enable_per_process_and_thread_time_limit")))
        field_error(errors, err, errlen, "enable_per_process_and_thread_time_limit", "is not supported: the limits are per box");
    if (json_is_true(json_object_get(root, "enable_per_process_and_thread_memory_limit")))
        field_error(errors, err, errlen, "enable_per_process_and_thread_memory_limit", "is not supported: the limits are per box");
    j->redirect_stderr = json_is_true(json_object_get(root, "redirect_stderr_to_stdout"));
    /* the runs' stages keep stdout and stderr apart (backend/job.c), not interleaved */
    if (j->redirect_stderr && j->number_of_runs > 1)
        field_error(errors, err, errlen, "number_of_runs", "must be 1 with redirect_stderr_to_stdout");
}

/* The features moat refuses, each with its reason. */
static void check_refused(json_t *root, json_t *errors, char *err, size_t errlen)
{
    if (json_is_true(json_object_get(root, "enable_network")))
        field_error(errors, err, errlen, "enable_network", "is not allowed: boxes have no network");
}

/* The texts and the language. */
static int get_texts(json_t *root, int base64, struct judge0_request *j, json_t *errors, char *err, size_t errlen)
{
    static const char *const names[] = {"source_code", "stdin", "expected_output"};
    uint8_t **dst[] = {&j->source, &j->stdin_data, &j->expected};
    size_t *lens[] = {&j->source_len, &j->stdin_len, &j->expected_len};
    json_t *v;

    for (size_t i = 0; i < 3; i++) {
        v = json_object_get(root, names[i]);
        if (v == NULL || json_is_null(v))
            continue;
        int rc = get_text(v, base64, dst[i], lens[i]);
        if (rc == -2)
            return judge0_errf(err, errlen, "out of memory");
        if (rc != 0)
            field_error(errors, err, errlen, names[i], "is not valid base64");
    }
    if (j->source == NULL && json_object_get(errors, "source_code") == NULL)
        field_error(errors, err, errlen, "source_code", "can't be blank");
    v = json_object_get(root, "language_id");
    if (v == NULL || json_is_null(v)) {
        field_error(errors, err, errlen, "language_id", "can't be blank");
    } else {
        j->language_id = (int64_t)json_integer_value(v);
        if ((j->lang = judge0_lang_by_id(j->language_id)) == NULL)
            field_error(errors, err, errlen, "language_id", "language with id %lld doesn't exist", (long long)j->language_id);
    }
    return 0;
}

static int get_arguments(json_t *root, struct judge0_request *j, json_t *errors, char *err, size_t errlen)
{
    json_t *v = json_object_get(root, "command_line_arguments");

    if (v == NULL || json_is_null(v))
        return 0;
    if ((j->command_line_arguments = (char *)moat_memdup0(json_string_value(v), json_string_length(v))) == NULL)
        return judge0_errf(err, errlen, "out of memory");
    if (strlen(j->command_line_arguments) != json_string_length(v)) {
        field_error(errors, err, errlen, "command_line_arguments", "must not hold NUL characters");
        return 0;
    }
    switch (split_args(j->command_line_arguments, &j->args, &j->nargs)) {
    case 0:
        return 0;
    case -1:
        field_error(errors, err, errlen, "command_line_arguments",
                    "may only be words separated by spaces, optionally quoted: they are never given to a shell");
        return 0;
    case -2:
        field_error(errors, err, errlen, "command_line_arguments", "are at most %d words of at most %d bytes", MOAT_MAX_ARGS,
                    MOAT_MAX_ARG_LEN);
        return 0;
    default:
        return judge0_errf(err, errlen, "out of memory");
    }
}

/* callback_url: kept as sent (a string without NUL); judge0_check_callback
 * judges it against the tenant's rules. */
static int get_callback_url(json_t *root, struct judge0_request *j, json_t *errors, char *err, size_t errlen)
{
    json_t *v = json_object_get(root, "callback_url");

    if (v == NULL || json_is_null(v))
        return 0;
    if (json_string_length(v) == 0 || json_string_length(v) > GW_CALLBACK_URL_MAX ||
        strlen(json_string_value(v)) != json_string_length(v)) {
        field_error(errors, err, errlen, "callback_url", "must be a URL of 1 to %d bytes", GW_CALLBACK_URL_MAX);
        return 0;
    }
    if ((j->callback_url = strdup(json_string_value(v))) == NULL)
        return judge0_errf(err, errlen, "out of memory");
    return 0;
}

int judge0_check_callback(const struct judge0_request *j, const struct cb_tenant_rules *rules, json_t **errors, char *err,
                          size_t errlen)
{
    char why[256];

    *errors = NULL;
    if (j->callback_url == NULL || cb_check_url(rules, j->callback_url, strlen(j->callback_url), NULL, why, sizeof(why)) == 0)
        return 0;
    judge0_errf(err, errlen, "callback_url %s", why);
    *errors = json_pack("{s:[s]}", "callback_url", why);
    return -2;
}

/*
 * compiler_options: words separated by white space, nothing else (no
 * quotes, no escapes: they are never given to a shell, and no allow-listed
 * option needs one); each word one argv element.  Which words a language
 * takes is its allow-list's (judge0_check_options, and the backend).
 */
static int get_compiler_options(json_t *root, struct judge0_request *j, json_t *errors, char *err, size_t errlen)
{
    json_t *v = json_object_get(root, "compiler_options");
    const char *s;

    if (v == NULL || json_is_null(v) || json_string_length(v) == 0)
        return 0;
    if ((j->compiler_options_text = (char *)moat_memdup0(json_string_value(v), json_string_length(v))) == NULL ||
        (j->compiler_options = calloc(MOAT_MAX_COMPILER_OPTIONS, sizeof(char *))) == NULL)
        return judge0_errf(err, errlen, "out of memory");
    s = j->compiler_options_text;
    if (strlen(s) != json_string_length(v) || strpbrk(s, "'\"`\\\n\r") != NULL) {
        field_error(errors, err, errlen, "compiler_options",
                    "may only be options separated by spaces, without quotes: they are never given to a shell");
        return 0;
    }
    while (*(s += strspn(s, " \t")) != '\0') {
        size_t len = strcspn(s, " \t");
        if (j->ncompiler_options == MOAT_MAX_COMPILER_OPTIONS || len > MOAT_MAX_COMPILER_OPTION_LEN) {
            field_error(errors, err, errlen, "compiler_options", "are at most %d options of at most %d bytes",
                        MOAT_MAX_COMPILER_OPTIONS, MOAT_MAX_COMPILER_OPTION_LEN);
            return 0;
        }
        if ((j->compiler_options[j->ncompiler_options] = (char *)moat_memdup0(s, len)) == NULL)
            return judge0_errf(err, errlen, "out of memory");
        j->ncompiler_options++;
        s += len;
    }
    return 0;
}

int judge0_check_options(const struct judge0_request *j, char *const *patterns, size_t npatterns, json_t **errors, char *err,
                         size_t errlen)
{
    size_t bad = 0;

    *errors = NULL;
    if (j->ncompiler_options == 0 || moat_options_check(patterns, npatterns, j->compiler_options, j->ncompiler_options, &bad) == 0)
        return 0;
    if (npatterns == 0)
        snprintf(err, errlen, "compiler_options are not allowed for language %s: it accepts no compiler options", j->lang->moat);
    else
        snprintf(err, errlen, "compiler option \"%.64s\" is not allowed for language %s", j->compiler_options[bad], j->lang->moat);
    *errors = json_pack("{s:[s]}", "compiler_options", err);
    return -2;
}

/*
 * additional_files: base64 of a zip archive, unpacked here (judge0_zip.c)
 * into files beside the source.  Any problem is a 400 naming it.
 */
static int get_additional_files(json_t *root, struct judge0_request *j, char *err, size_t errlen)
{
    const struct judge0_zip_limits lim = {MOAT_MAX_FILES - 1, GW_JUDGE0_ZIP_MAX_BYTES};
    json_t *v = json_object_get(root, "additional_files");
    char why[256];

    if (v == NULL || json_is_null(v))
        return 0;
    switch (b64_decode(json_string_value(v), json_string_length(v), &j->zip, &j->zip_len)) {
    case 0:
        break;
    case -1:
        return judge0_errf(err, errlen, "additional_files is not valid base64");
    default:
        return judge0_errf(err, errlen, "out of memory");
    }
    if (judge0_zip_unpack(j->zip, j->zip_len, &lim, &j->extra, &j->nextra, why, sizeof(why)) != 0)
        return judge0_errf(err, errlen, "additional_files %s", why);
    for (size_t i = 0; j->lang != NULL && i < j->nextra; i++)
        if (strcmp(j->extra[i].name, j->lang->source_file) == 0 || moat_path_is_dir_of(j->lang->source_file, j->extra[i].name))
            return judge0_errf(err, errlen, "additional_files holds '%s', the source's own file", j->lang->source_file);
    return 0;
}

int judge0_parse_submission(const char *body, size_t len, int base64, struct judge0_request *out, json_t **errors, char *err,
                            size_t errlen)
{
    json_error_t jerr;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
    int rc;

    memset(out, 0, sizeof(*out));
    *errors = NULL;
    if (root == NULL)
        return judge0_errf(err, errlen, "invalid JSON: %s", jerr.text);
    rc = judge0_parse_submission_object(root, base64, out, errors, err, errlen);
    json_decref(root);
    return rc;
}

int judge0_parse_batch(const char *body, size_t len, json_t **items, char *err, size_t errlen)
{
    json_error_t jerr;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr), *a;
    const char *key;
    json_t *v;

    *items = NULL;
    if (root == NULL)
        return judge0_errf(err, errlen, "invalid JSON: %s", jerr.text);
    json_object_foreach(root, key, v)
    {
        if (strcmp(key, "submissions") != 0) {
            judge0_errf(err, errlen, "unknown field: %.64s", key); /* before key goes with root */
            json_decref(root);
            return -1;
        }
    }
    a = json_object_get(root, "submissions");
    if (!json_is_object(root) || !json_is_array(a)) {
        json_decref(root);
        return judge0_errf(err, errlen, "the body must be {\"submissions\": [...]}");
    }
    size_t n = json_array_size(a);
    if (n == 0 || n > JUDGE0_BATCH_MAX) {
        json_decref(root);
        if (n == 0)
            return judge0_errf(err, errlen, "there should be at least one submission in a batch");
        return judge0_errf(err, errlen, "number of submissions in a batch should be less than or equal to %d", JUDGE0_BATCH_MAX);
    }
    *items = json_incref(a);
    json_decref(root);
    return 0;
}

int judge0_parse_submission_object(json_t *root, int base64, struct judge0_request *out, json_t **errors, char *err, size_t errlen)
{
    json_t *errs = NULL, *v;
    int rc = -1;

    memset(out, 0, sizeof(*out));
    *errors = NULL;
    if (!json_is_object(root)) {
        judge0_errf(err, errlen, "the body must be a JSON object");
        goto out;
    }
    if (check_types(root, err, errlen) != 0 || (errs = json_object()) == NULL)
        goto out;
    if (get_texts(root, base64, out, errs, err, errlen) != 0 || get_arguments(root, out, errs, err, errlen) != 0 ||
        get_compiler_options(root, out, errs, err, errlen) != 0 || get_callback_url(root, out, errs, err, errlen) != 0 ||
        get_additional_files(root, out, err, errlen) != 0)
        goto out;
    check_limits(root, out, errs, err, errlen);
    check_refused(root, errs, err, errlen);
    if (json_object_size(errs) > 0) {
        *errors = errs;
        errs = NULL;
        rc = -2;
        goto out;
    }
    v = json_object_get(root, "metadata");
    out->metadata = v != NULL && !json_is_null(v) ? json_incref(v) : NULL;
    rc = 0;
out:
    json_decref(errs);
    if (rc != 0)
        judge0_request_free(out);
    return rc;
}

/* Seconds as whole milliseconds, rounded up; -1 for none asked. */
static int64_t ms_of(double s)
{
    int64_t ms = (int64_t)(s * 1000.0);

    if (s <= 0)
        return -1;
    return (double)ms < s * 1000.0 ? ms + 1 : ms;
}

/* A list of strings copied into *dst (n of them); 0 or -1 out of memory. */
static int strv_dup(char *const *src, size_t n, char ***dst, size_t *ndst)
{
    if (n == 0)
        return 0;
    if ((*dst = calloc(n, sizeof(char *))) == NULL)
        return -1;
    for (size_t i = 0; i < n; i++, (*ndst)++)
        if (((*dst)[i] = strdup(src[i])) == NULL)
            return -1;
    return 0;
}

/* number_of_runs > 1: that many test cases, each the submission's stdin and arguments. */
static int runs_as_tests(const struct judge0_request *j, struct moat_exec_request *out)
{
    size_t n = (size_t)j->number_of_runs;

    if (j->number_of_runs <= 1)
        return 0;
    if ((out->tests = calloc(n, sizeof(*out->tests))) == NULL)
        return -1;
    for (; out->ntests < n; out->ntests++) {
        struct moat_test_case *tc = &out->tests[out->ntests];
        tc->run_timeout_ms = tc->run_memory_bytes = tc->run_cpu_ms = -1; /* the request's */
        if (strv_dup(j->args, j->nargs, &tc->args, &tc->nargs) != 0) {
            out->ntests++;
            return -1;
        }
        if (j->stdin_len > 0) {
            if ((tc->stdin_data = moat_memdup0(j->stdin_data, j->stdin_len)) == NULL) {
                out->ntests++;
                return -1;
            }
            tc->stdin_len = j->stdin_len;
        }
    }
    return 0;
}

int judge0_exec_request(const struct judge0_request *j, struct moat_exec_request *out)
{
    memset(out, 0, sizeof(*out));
    /* the CPU clock is cpu_time_limit (and its extra time); the wall clock
     * wall_time_limit, or the CPU time when only that is asked */
    out->run_cpu_ms = j->cpu_time_limit > 0 ? ms_of(j->cpu_time_limit + (j->cpu_extra_time > 0 ? j->cpu_extra_time : 0)) : -1;
    out->run_timeout_ms = j->wall_time_limit > 0 ? ms_of(j->wall_time_limit) : out->run_cpu_ms;
    out->compile_timeout_ms = -1;
    out->compile_cpu_ms = -1;
    out->run_memory_bytes = j->memory_limit > 0 ? j->memory_limit * 1024 : -1;
    out->compile_memory_bytes = -1;
    out->run_stack_kib = j->stack_limit > 0 ? j->stack_limit : -1;
    out->run_processes = j->max_processes > 0 ? j->max_processes : -1;
    out->run_file_size_kib = j->max_file_size > 0 ? j->max_file_size : -1;
    out->tests_wall_ms = -1;
    if (strv_dup(j->compiler_options, j->ncompiler_options, &out->compiler_options, &out->ncompiler_options) != 0 ||
        runs_as_tests(j, out) != 0)
        goto oom;
    if ((out->language = strdup(j->lang->moat)) == NULL || (out->version = strdup("*")) == NULL ||
        (out->files = calloc(1 + j->nextra, sizeof(*out->files))) == NULL)
        goto oom;
    out->nfiles = 1 + j->nextra;
    if ((out->files[0].name = strdup(j->lang->source_file)) == NULL ||
        (out->files[0].content = moat_memdup0(j->source, j->source_len)) == NULL)
        goto oom;
    out->files[0].content_len = j->source_len;
    for (size_t i = 0; i < j->nextra; i++) { /* the source first: the language's entry file */
        if ((out->files[1 + i].name = strdup(j->extra[i].name)) == NULL ||
            (out->files[1 + i].content = moat_memdup0(j->extra[i].content, j->extra[i].content_len)) == NULL)
            goto oom;
        out->files[1 + i].content_len = j->extra[i].content_len;
    }
    if (j->nargs > 0 && (out->args = calloc(j->nargs, sizeof(char *))) == NULL)
        goto oom;
    for (size_t i = 0; i < j->nargs; i++, out->nargs++)
        if ((out->args[i] = strdup(j->args[i])) == NULL)
            goto oom;
    if (j->stdin_data != NULL && j->stdin_len > 0) {
        if ((out->stdin_data = moat_memdup0(j->stdin_data, j->stdin_len)) == NULL)
            goto oom;
        out->stdin_len = j->stdin_len;
    }
    return 0;
oom:
    moat_exec_request_free(out);
    return -1;
}

/* ---------------------------------------------------------------- result */

/* Judge0's comparison: every line's trailing white space, then the whole
 * text's leading and trailing white space, do not count. */
static size_t normalise(const uint8_t *in, size_t len, uint8_t *out)
{
    size_t n = 0, line = 0;

    for (size_t i = 0; i <= len; i++) {
        if (i == len || in[i] == '\n') {
            size_t e = i;
            while (e > line && isspace(in[e - 1]))
                e--;
            memcpy(out + n, in + line, e - line);
            n += e - line;
            if (i < len)
                out[n++] = '\n';
            line = i + 1;
        }
    }
    size_t s = 0;
    while (s < n && isspace(out[s]))
        s++;
    while (n > s && isspace(out[n - 1]))
        n--;
    memmove(out, out + s, n - s);
    return n - s;
}

/* -1: could not compare (memory). */
static int same_output(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen)
{
    uint8_t *x = malloc(alen + 1), *y = malloc(blen + 1);
    int same = -1;

    if (x != NULL && y != NULL) {
        size_t xn = normalise(a, alen, x), yn = normalise(b, blen, y);
        same = xn == yn && memcmp(x, y, xn) == 0;
    }
    free(x);
    free(y);
    return same;
}

static int signal_status(int sig)
{
    switch (sig) {
    case 11:
        return JUDGE0_RE_SIGSEGV;
    case 25:
        return JUDGE0_RE_SIGXFSZ;
    case 8:
        return JUDGE0_RE_SIGFPE;
    case 6:
        return JUDGE0_RE_SIGABRT;
    default:
        return JUDGE0_RE_OTHER;
    }
}

/* The run that stands for the submission: the run stage, or with
 * number_of_runs > 1 (the result's test stages) the first run that is not
 * Accepted, else the last one; NULL when there is none. */
static const struct moat_stage_result *deciding_run(const struct judge0_request *j, const struct moat_exec_result *res)
{
    struct judge0_verdict v;

    if (res->ntests == 0)
        return res->run.present ? &res->run : NULL;
    for (size_t i = 0; i < res->ntests; i++) {
        judge0_run_verdict(j, &res->tests[i], &v);
        if (v.status != JUDGE0_ACCEPTED || i + 1 == res->ntests)
            return &res->tests[i];
    }
    return NULL;
}

void judge0_verdict_of(const struct judge0_request *j, const struct moat_exec_result *res, struct judge0_verdict *v)
{
    const struct moat_stage_result *c = &res->compile, *r = deciding_run(j, res);

    v->message = NULL;
    if (c->present && ((r == NULL && res->ntests == 0 && j->number_of_runs <= 1) || c->status != MOAT_STATUS_OK ||
                       (c->has_code && c->code != 0))) {
        v->status = c->status == MOAT_STATUS_XX ? JUDGE0_INTERNAL_ERROR : JUDGE0_COMPILATION_ERROR;
        /* the compiler's words are compile_output; Judge0 adds no message */
        v->message = c->status == MOAT_STATUS_TO   ? "Compilation time limit exceeded"
                     : c->status == MOAT_STATUS_XX ? c->message
                                                   : NULL;
        return;
    }
    if (r == NULL && j->number_of_runs > 1) {
        v->status = JUDGE0_TIME_LIMIT;
        v->message = "Time limit exceeded: the runs together outlasted the job's wall budget";
        return;
    }
    if (r == NULL) {
        v->status = JUDGE0_INTERNAL_ERROR;
        v->message = "no run stage";
        return;
    }
    judge0_run_verdict(j, r, v);
    /* every run that ran was Accepted, but not every run ran: the job's wall budget ran out */
    if (v->status == JUDGE0_ACCEPTED && res->ntests > 0 && (int64_t)res->ntests < j->number_of_runs) {
        v->status = JUDGE0_TIME_LIMIT;
        v->message = "Time limit exceeded: the runs together outlasted the job's wall budget";
    }
}

void judge0_run_verdict(const struct judge0_request *j, const struct moat_stage_result *r, struct judge0_verdict *v)
{
    v->message = r->message;
    switch (r->status) {
    case MOAT_STATUS_TO:
        v->status = JUDGE0_TIME_LIMIT;
        v->message = "Time limit exceeded";
        return;
    case MOAT_STATUS_OL:
    case MOAT_STATUS_EL:
        v->status = JUDGE0_RE_SIGXFSZ;
        v->message = "Output limit exceeded";
        return;
    case MOAT_STATUS_ML:
        v->status = JUDGE0_RE_OTHER;
        v->message = "Memory limit exceeded";
        return;
    case MOAT_STATUS_XX:
        v->status = JUDGE0_INTERNAL_ERROR;
        return;
    case MOAT_STATUS_SG:
        v->status = r->has_signal ? signal_status(r->signal) : JUDGE0_RE_OTHER;
        return;
    case MOAT_STATUS_RE:
        v->status = JUDGE0_RE_NZEC;
        if (v->message == NULL)
            v->message = "Exited with error status";
        return;
    default:
        break;
    }
    if (r->has_code && r->code != 0) {
        v->status = JUDGE0_RE_NZEC;
        return;
    }
    if (r->has_signal) {
        v->status = signal_status(r->signal);
        return;
    }
    if (j->expected == NULL) {
        v->status = JUDGE0_ACCEPTED;
        return;
    }
    const uint8_t *out = j->redirect_stderr ? r->output_data : r->stdout_data;
    size_t outlen = j->redirect_stderr ? r->output_len : r->stdout_len;
    int same = same_output(j->expected, j->expected_len, out, outlen);
    v->status = same < 0 ? JUDGE0_INTERNAL_ERROR : same ? JUDGE0_ACCEPTED : JUDGE0_WRONG_ANSWER;
}

void judge0_time_iso(int64_t ms, char out[JUDGE0_TIME_LEN])
{
    time_t s = (time_t)(ms / 1000);
    struct tm tm;

    gmtime_r(&s, &tm);
    snprintf(out, JUDGE0_TIME_LEN, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
             tm.tm_min, tm.tm_sec, (int)(ms % 1000));
}

/* Judge0 writes times as strings of seconds ("0.012"). */
static json_t *seconds_json(uint64_t ms)
{
    char buf[32];

    snprintf(buf, sizeof(buf), "%llu.%03llu", (unsigned long long)(ms / 1000), (unsigned long long)(ms % 1000));
    return json_string(buf);
}

static json_t *limit_seconds(double asked, int64_t effective_ms)
{
    if (asked > 0)
        return json_real(asked);
    return effective_ms > 0 ? json_real((double)effective_ms / 1000.0) : json_null();
}

static json_t *int_or_null(int64_t v)
{
    return v >= 0 ? json_integer((json_int_t)v) : json_null();
}

/* A text, or null when empty (as Judge0 leaves an empty output). */
static json_t *text_or_null(const void *data, size_t len)
{
    return len > 0 ? b64_json(data, len) : json_null();
}

/* What time, wall_time and memory report: the run's, or with several runs
 * their averages (Judge0's), over the runs that ran. */
struct run_usage {
    uint64_t cpu_ms, wall_ms, memory_bytes;
};

static void usage_of(const struct moat_exec_result *res, const struct moat_stage_result *r, struct run_usage *u)
{
    *u = (struct run_usage){r->cpu_ms, r->wall_ms, r->memory_bytes};
    if (res->ntests == 0)
        return;
    *u = (struct run_usage){0, 0, 0};
    for (size_t i = 0; i < res->ntests; i++) {
        u->cpu_ms += res->tests[i].cpu_ms;
        u->wall_ms += res->tests[i].wall_ms;
        u->memory_bytes += res->tests[i].memory_bytes;
    }
    u->cpu_ms /= res->ntests;
    u->wall_ms /= res->ntests;
    u->memory_bytes /= res->ntests;
}

json_t *judge0_submission_record(const char *token, int64_t created_ms, int64_t finished_ms, const struct judge0_request *j,
                                 const struct moat_exec_request *eff, const struct moat_exec_result *res, const char *lang_name)
{
    static const struct moat_exec_result none; /* still running: no stage */
    static const struct moat_stage_result no_run;
    struct judge0_verdict v = {JUDGE0_PROCESSING, NULL};
    const struct moat_stage_result *c, *r;
    struct run_usage use;
    char created[JUDGE0_TIME_LEN], finished[JUDGE0_TIME_LEN];
    json_t *o = json_object(), *st;
    int ok = o != NULL;

    if (res != NULL)
        judge0_verdict_of(j, res, &v);
    else
        res = &none;
    c = &res->compile;
    r = deciding_run(j, res);
    if (r == NULL)
        r = &no_run;
    usage_of(res, r, &use);
    judge0_time_iso(created_ms, created);
    judge0_time_iso(finished_ms, finished);
    st = json_pack("{s:i, s:s}", "id", v.status, "description", status_names[v.status]);
#define SET(k, val) ok = ok && json_object_set_new(o, k, val) == 0
    SET("source_code", b64_json(j->source, j->source_len));
    SET("language_id", json_integer((json_int_t)j->language_id));
    SET("stdin", b64_json(j->stdin_data, j->stdin_len));
    SET("expected_output", b64_json(j->expected, j->expected_len));
    if (j->redirect_stderr) {
        SET("stdout", text_or_null(r->output_data, r->present ? r->output_len : 0));
        SET("stderr", json_null());
    } else {
        SET("stdout", text_or_null(r->stdout_data, r->present ? r->stdout_len : 0));
        SET("stderr", text_or_null(r->stderr_data, r->present ? r->stderr_len : 0));
    }
    SET("status_id", json_integer(v.status));
    SET("created_at", json_string(created));
    SET("finished_at", v.status != JUDGE0_PROCESSING ? json_string(finished) : json_null());
    SET("time", r->present ? seconds_json(use.cpu_ms) : json_null());
    SET("wall_time", r->present ? seconds_json(use.wall_ms) : json_null());
    SET("memory", r->present ? json_integer((json_int_t)(use.memory_bytes / 1024)) : json_null());
    SET("token", json_string(token));
    SET("number_of_runs", json_integer(j->number_of_runs > 0 ? j->number_of_runs : 1));
    SET("cpu_time_limit", limit_seconds(j->cpu_time_limit, eff->run_cpu_ms > 0 ? eff->run_cpu_ms : eff->run_timeout_ms));
    SET("cpu_extra_time", json_real(j->cpu_extra_time > 0 ? j->cpu_extra_time : 0.0));
    SET("wall_time_limit", limit_seconds(j->wall_time_limit, eff->run_timeout_ms));
    SET("memory_limit", int_or_null(eff->run_memory_bytes > 0 ? eff->run_memory_bytes / 1024 : -1));
    SET("stack_limit", json_integer(eff->run_stack_kib > 0 ? eff->run_stack_kib : JUDGE0_BOX_STACK_KB));
    SET("max_processes_and_or_threads", json_integer(eff->run_processes > 0 ? eff->run_processes : JUDGE0_BOX_PROCESSES));
    SET("enable_per_process_and_thread_time_limit", json_false());
    SET("enable_per_process_and_thread_memory_limit", json_false());
    SET("max_file_size", json_integer(eff->run_file_size_kib > 0 ? eff->run_file_size_kib : JUDGE0_BOX_FILE_SIZE_KB));
    SET("compile_output", c->present && c->output_len > 0 ? b64_json(c->output_data, c->output_len) : json_null());
    SET("exit_code", r->present && r->has_code ? json_integer(r->code) : json_null());
    SET("exit_signal", r->present && r->has_signal ? json_integer(r->signal) : json_null());
    SET("message", v.message != NULL && v.message[0] != '\0' ? b64_json(v.message, strlen(v.message)) : json_null());
    SET("compiler_options", j->compiler_options_text != NULL ? json_string(j->compiler_options_text) : json_null());
    SET("command_line_arguments", j->command_line_arguments != NULL ? json_string(j->command_line_arguments) : json_null());
    SET("redirect_stderr_to_stdout", json_boolean(j->redirect_stderr));
    SET("callback_url", j->callback_url != NULL ? json_string(j->callback_url) : json_null());
    SET("additional_files", j->zip != NULL ? b64_json(j->zip, j->zip_len) : json_null());
    SET("enable_network", json_false());
    SET("status", st);
    SET("language", json_pack("{s:i, s:s}", "id", (json_int_t)j->language_id, "name", lang_name));
#undef SET
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

json_t *judge0_render_object(const json_t *record, const struct judge0_query *q, int *not_utf8)
{
    json_t *o = json_object();

    *not_utf8 = 0;
    for (size_t i = 0; o != NULL && i < q->nfields; i++) {
        int f = q->order[i];
        json_t *v = json_object_get(record, field_names[f]), *copy;
        if (v == NULL)
            v = json_null();
        if (is_text_field(f) && json_is_string(v) && !q->base64) {
            uint8_t *raw;
            size_t rawlen;
            if (b64_decode(json_string_value(v), json_string_length(v), &raw, &rawlen) != 0)
                goto fail;
            if (!moat_utf8_valid(raw, rawlen)) {
                free(raw);
                *not_utf8 = 1;
                goto fail;
            }
            copy = json_stringn((const char *)raw, rawlen);
            free(raw);
        } else {
            copy = json_deep_copy(v);
        }
        if (copy == NULL || json_object_set_new(o, field_names[f], copy) != 0)
            goto fail;
    }
    return o;
fail:
    json_decref(o);
    return NULL;
}

char *judge0_render(const json_t *record, const struct judge0_query *q, int *not_utf8)
{
    json_t *o = judge0_render_object(record, q, not_utf8);
    char *s = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;

    json_decref(o);
    return s;
}
