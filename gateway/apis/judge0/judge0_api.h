/*
 * judge0_api.h - translate between Judge0 CE's JSON API and moat's typed
 * messages.  Pure functions (no I/O, no global state besides constant
 * tables), so the unit tests exercise exactly the code the gateway runs;
 * judge0_handlers.c wires them into the request path, judge0_store.c keeps
 * the results.
 */
#ifndef GW_JUDGE0_API_H
#define GW_JUDGE0_API_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "common/submission_token.h"
#include "net/callback_policy.h"
#include "moat_errf.h"
#include "moat_proto.h"
#include "policy.h"

/* The backend's run-stage limits (backend/moat_limits.h: DEFAULT_STACK,
 * DEFAULT_RUN_PIDS, DEFAULT_FSIZE, unless a manifest or the backend's
 * --limit lowers them): a submission's stack_limit,
 * max_processes_and_or_threads and max_file_size may lower them (the box
 * applies what is asked: RLIMIT_STACK, pids.max and RLIMIT_NPROC,
 * RLIMIT_FSIZE), never raise them; they are config_info's max_* values
 * and the defaults, lowered by the tenant's ceilings where it has them. */
#define JUDGE0_BOX_STACK_KB     65536 /* 64 MiB */
#define JUDGE0_BOX_PROCESSES    64
#define JUDGE0_BOX_FILE_SIZE_KB 9765 /* 10 MB */

#define JUDGE0_MAX_CPU_EXTRA_TIME 5.0

/* Judge0's statuses (GET /statuses), ids 1..14. */
enum judge0_status {
    JUDGE0_IN_QUEUE = 1,
    JUDGE0_PROCESSING = 2,
    JUDGE0_ACCEPTED = 3,
    JUDGE0_WRONG_ANSWER = 4,
    JUDGE0_TIME_LIMIT = 5,
    JUDGE0_COMPILATION_ERROR = 6,
    JUDGE0_RE_SIGSEGV = 7,
    JUDGE0_RE_SIGXFSZ = 8,
    JUDGE0_RE_SIGFPE = 9,
    JUDGE0_RE_SIGABRT = 10,
    JUDGE0_RE_NZEC = 11,
    JUDGE0_RE_OTHER = 12,
    JUDGE0_INTERNAL_ERROR = 13,
    JUDGE0_EXEC_FORMAT_ERROR = 14,
};
#define JUDGE0_STATUS_MAX JUDGE0_EXEC_FORMAT_ERROR

/* Judge0's description of status id, or NULL. */
const char *judge0_status_description(int id);

/* One of Judge0 CE's well-known languages that moat has. */
struct judge0_lang {
    int id;                  /* Judge0 CE's language id */
    const char *moat;        /* the backend's language name */
    const char *name_prefix; /* Judge0's name before the installed version: "Python ", "C (GCC " */
    const char *source_file; /* the file name the source is given */
};

/* The language with Judge0 id `id`, or NULL; the i-th of the table, or NULL past its end. */
const struct judge0_lang *judge0_lang_by_id(int64_t id);
const struct judge0_lang *judge0_lang_at(size_t i);

/* Judge0's name of l with the installed version: "Python (3.11.2)". */
void judge0_language_name(const struct judge0_lang *l, const char *version, char *out, size_t size);

/* {"id", "name"} (detail: also is_archived, source_file, compile_cmd,
 * run_cmd), the name with the installed version; NULL out of memory. */
json_t *judge0_language_json(const struct judge0_lang *l, const char *version, int detail);

/* --------------------------------------------------------------- queries */

/* Query parameters a route accepts (judge0_parse_query). */
enum judge0_query_param {
    JUDGE0_Q_WAIT = 1u << 0,
    JUDGE0_Q_BASE64 = 1u << 1,
    JUDGE0_Q_FIELDS = 1u << 2,
    JUDGE0_Q_TOKENS = 1u << 3,
};

#define JUDGE0_BATCH_MAX 20 /* tokens in one GET /submissions/batch, as Judge0's default */

/* Submission fields a response may carry (fields=). */
#define JUDGE0_FIELDS(X)                                                                                                           \
    X(SOURCE_CODE, "source_code")                                                                                                  \
    X(LANGUAGE_ID, "language_id")                                                                                                  \
    X(STDIN, "stdin")                                                                                                              \
    X(EXPECTED_OUTPUT, "expected_output")                                                                                          \
    X(STDOUT, "stdout")                                                                                                            \
    X(STATUS_ID, "status_id")                                                                                                      \
    X(CREATED_AT, "created_at")                                                                                                    \
    X(FINISHED_AT, "finished_at")                                                                                                  \
    X(TIME, "time")                                                                                                                \
    X(MEMORY, "memory")                                                                                                            \
    X(STDERR, "stderr")                                                                                                            \
    X(TOKEN, "token")                                                                                                              \
    X(NUMBER_OF_RUNS, "number_of_runs")                                                                                            \
    X(CPU_TIME_LIMIT, "cpu_time_limit")                                                                                            \
    X(CPU_EXTRA_TIME, "cpu_extra_time")                                                                                            \
    X(WALL_TIME_LIMIT, "wall_time_limit")                                                                                          \
    X(MEMORY_LIMIT, "memory_limit")                                                                                                \
    X(STACK_LIMIT, "stack_limit")                                                                                                  \
    X(MAX_PROCESSES, "max_processes_and_or_threads")                                                                               \
    X(PER_PROCESS_TIME, "enable_per_process_and_thread_time_limit")                                                                \
    X(PER_PROCESS_MEMORY, "enable_per_process_and_thread_memory_limit")                                                            \
    X(MAX_FILE_SIZE, "max_file_size")                                                                                              \
    X(COMPILE_OUTPUT, "compile_output")                                                                                            \
    X(EXIT_CODE, "exit_code")                                                                                                      \
    X(EXIT_SIGNAL, "exit_signal")                                                                                                  \
    X(MESSAGE, "message")                                                                                                          \
    X(WALL_TIME, "wall_time")                                                                                                      \
    X(COMPILER_OPTIONS, "compiler_options")                                                                                        \
    X(COMMAND_LINE_ARGUMENTS, "command_line_arguments")                                                                            \
    X(REDIRECT_STDERR, "redirect_stderr_to_stdout")                                                                                \
    X(CALLBACK_URL, "callback_url")                                                                                                \
    X(ADDITIONAL_FILES, "additional_files")                                                                                        \
    X(ENABLE_NETWORK, "enable_network")                                                                                            \
    X(STATUS, "status")                                                                                                            \
    X(LANGUAGE, "language")

#define JUDGE0_FIELD_ENUM(id, name) JUDGE0_F_##id,
enum judge0_field { JUDGE0_FIELDS(JUDGE0_FIELD_ENUM) JUDGE0_NFIELDS };
#undef JUDGE0_FIELD_ENUM

struct judge0_query {
    int wait;                            /* wait=true */
    int base64;                          /* base64_encoded=true */
    uint64_t fields;                     /* 1 << JUDGE0_F_*: the response's fields */
    unsigned char order[JUDGE0_NFIELDS]; /* in the order asked */
    size_t nfields;
    char tokens[JUDGE0_BATCH_MAX][JUDGE0_TOKEN_LEN + 1]; /* tokens=: "" for one that is not a token's shape */
    size_t ntokens;
};

/*
 * Parse a query string (without the '?'; NULL or empty: none) for a route
 * that accepts the parameters in `allowed`: wait and base64_encoded are
 * "true" or "false", fields a comma-separated list of field names or "*"
 * (absent: Judge0's default: stdout, time, memory, stderr, token,
 * compile_output, message, status), tokens a comma-separated list of 1 to
 * JUDGE0_BATCH_MAX tokens.  Percent-escapes are decoded.  0, or -1
 * with a message naming the parameter (an unknown one included) in err.
 */
int judge0_parse_query(const char *q, size_t len, unsigned allowed, struct judge0_query *out, char *err, size_t errlen);

/* ----------------------------------------------------------- submissions */

/* A POST /submissions body, parsed and checked.  Absent limits are -1. */
struct judge0_request {
    int64_t language_id;
    const struct judge0_lang *lang;
    uint8_t *source; /* malloc'ed, NUL-terminated; may hold NULs */
    size_t source_len;
    uint8_t *stdin_data; /* NULL: none */
    size_t stdin_len;
    uint8_t *expected; /* NULL: none (any output is Accepted) */
    size_t expected_len;
    char *command_line_arguments; /* as sent, NULL: none */
    char **args;                  /* split: nargs entries */
    size_t nargs;
    double cpu_time_limit, cpu_extra_time, wall_time_limit; /* seconds; -1 */
    int64_t memory_limit, stack_limit, max_file_size;       /* KB; -1 */
    int64_t max_processes;                                  /* -1 */
    int redirect_stderr;                                    /* redirect_stderr_to_stdout */
    int64_t number_of_runs;                                 /* -1 */
    char *compiler_options_text;                            /* compiler_options as sent, NULL: none */
    char **compiler_options;                                /* split on white space: ncompiler_options words */
    size_t ncompiler_options;
    char *callback_url; /* as sent; NULL: none */
    uint8_t *zip;       /* additional_files as sent (decoded); NULL: none */
    size_t zip_len;
    struct moat_file *extra; /* additional_files unpacked: files beside the source */
    size_t nextra;
    json_t *metadata; /* moat's extension (metadata.c), for the packet; NULL: none */
};

/*
 * Parse a POST /submissions body (base64: source_code, stdin and
 * expected_output are base64).  0 with out filled (release with
 * judge0_request_free); -1: malformed (not JSON, duplicate or unknown
 * field, a member of the wrong JSON type, additional_files that are not a
 * safe zip archive): err names it, for a 400; -2: a field Judge0 would
 * refuse, or one moat refuses (compiler_options, enable_network...): *errors is Judge0's 422 body
 * ({"field": ["message"]}, new reference) and err its first message.
 */
int judge0_parse_submission(const char *body, size_t len, int base64, struct judge0_request *out, json_t **errors, char *err,
                            size_t errlen);
/* The same for a parsed member (an entry of a batch). */
int judge0_parse_submission_object(json_t *root, int base64, struct judge0_request *out, json_t **errors, char *err, size_t errlen);
/* A POST /submissions/batch body, {"submissions": [...]} with 1 to
 * JUDGE0_BATCH_MAX entries: 0 with *items the array (new reference; each
 * entry for judge0_parse_submission_object), or -1 with err for a 400. */
int judge0_parse_batch(const char *body, size_t len, json_t **items, char *err, size_t errlen);
void judge0_request_free(struct judge0_request *j);

/* The submission's callback_url (if any) against the tenant's callback
 * rules (cb_check_url): 0, or -2 with Judge0's 422 body in *errors (new
 * reference) and the message in err. */
int judge0_check_callback(const struct judge0_request *j, const struct cb_tenant_rules *rules, json_t **errors, char *err,
                          size_t errlen);

/*
 * The compiler options against the language's allow-list (the backend's
 * manifest patterns, from its runtime table; moat_options.h), before the
 * backend checks them again: 0, or -2 with *errors Judge0's 422 naming the
 * first option refused (new reference) and err its message.
 */
int judge0_check_options(const struct judge0_request *j, char *const *patterns, size_t npatterns, json_t **errors, char *err,
                         size_t errlen);

/*
 * The execution request for the backend: the source as the language's
 * file, arguments, stdin, compiler options, and the limits asked for (run
 * CPU time: cpu_time_limit plus cpu_extra_time; run timeout:
 * wall_time_limit, else cpu_time_limit; memory: memory_limit; stack,
 * processes and file size as they are) or -1 for the tenant's defaults.
 * number_of_runs > 1 becomes as many test cases, each the same stdin and
 * arguments (compiled once, each run in a fresh box); tests_wall_ms is
 * left for gw_judge_tests_budget.  0, or -1 out of memory (out left empty;
 * release with moat_exec_request_free).
 */
int judge0_exec_request(const struct judge0_request *j, struct moat_exec_request *out);

/* The outcome of a run in Judge0's terms. */
struct judge0_verdict {
    int status;          /* enum judge0_status */
    const char *message; /* static, or the backend's message; NULL: none */
};

/* Judge0's status for the backend's result (compile failure, timeout,
 * signal, exit code, expected output compared as Judge0 does: each line's
 * trailing white space and the whole text's surrounding white space
 * ignored).  With number_of_runs > 1 (the result's test stages): the first
 * run whose status is not Accepted decides, else the last run. */
void judge0_verdict_of(const struct judge0_request *j, const struct moat_exec_result *res, struct judge0_verdict *v);
/* The verdict of one run stage alone (what judge0_verdict_of gives once the compile stage passed). */
void judge0_run_verdict(const struct judge0_request *j, const struct moat_stage_result *r, struct judge0_verdict *v);

/*
 * The stored form of a finished submission: every field of fields=*, the
 * texts (source_code, stdin, expected_output, stdout, stderr,
 * compile_output, message) base64-encoded so that any bytes survive.  eff:
 * the request as judged (the effective limits).  res NULL: still running
 * (status Processing, no output, finished_at null).  NULL out of memory.
 */
json_t *judge0_submission_record(const char *token, int64_t created_ms, int64_t finished_ms, const struct judge0_request *j,
                                 const struct moat_exec_request *eff, const struct moat_exec_result *res, const char *lang_name);

/*
 * A response from a stored record: the fields q asks for, the texts as
 * base64 (q->base64) or as they are.  Returns a malloc'ed JSON text, or
 * NULL with *not_utf8 set when a text is not UTF-8 and base64 was not asked
 * for (Judge0's "cannot be converted to UTF-8"), or NULL out of memory.
 */
char *judge0_render(const json_t *record, const struct judge0_query *q, int *not_utf8);
/* The same as an object (new reference). */
json_t *judge0_render_object(const json_t *record, const struct judge0_query *q, int *not_utf8);

/* -------------------------------------------------------- the catalogue */

/* GET /statuses: [{"id", "description"}, ...] */
char *judge0_statuses_json(void);
/* GET /about */
char *judge0_about_json(void);
/* GET /config_info: the tenant's effective limits in Judge0's fields
 * (ttl_s: how long results are kept). */
/* compile_langs: Judge0's names of the languages whose compiler options
 * are allow-listed (borrowed array). */
/* callbacks: the tenant's callback_url settings (enable_callbacks,
 * callbacks_max_tries, callbacks_timeout in seconds, a whole attempt). */
struct judge0_callbacks_info {
    int enabled;
    uint64_t max_tries;
    double timeout_s;
};
char *judge0_config_info_json(const struct tenant_policy *p, uint64_t ttl_s, uint64_t max_queue, json_t *compile_langs,
                              const struct judge0_callbacks_info *callbacks);

/* Format a client-facing message into err (errlen bytes); returns -1 (an
 * error as a value, for `return judge0_errf(...)`): moat_errf. */
#define judge0_errf moat_errf

/* RFC 3339 UTC with milliseconds, as Judge0 writes created_at ("...T...Z"). */
#define JUDGE0_TIME_LEN 64
void judge0_time_iso(int64_t ms, char out[JUDGE0_TIME_LEN]);

#endif /* GW_JUDGE0_API_H */
