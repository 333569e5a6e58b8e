/*
 * piston_json.h - translate between the Piston v2 JSON API and the typed
 * messages of moat_proto.h.  Pure functions: no I/O, no global state, so the
 * unit tests exercise exactly the code the gateway runs.
 */
#ifndef GW_PISTON_JSON_H
#define GW_PISTON_JSON_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "moat_proto.h"

/*
 * Parse and validate a POST /api/v2/execute body into out.  Returns 0 (out
 * owns malloc'ed memory: release it with piston_exec_request_free), or -1
 * with a client-facing message naming the offending field in err and out
 * left empty.  Limits absent from the request are -1.
 */
int piston_parse_exec_request(const char *body, size_t len, struct moat_exec_request *out, char *err, size_t errlen);

/*
 * Test cases (issue 12 item 3), a moat extension of execute: what the
 * gateway keeps of each case to judge its output (the backend gets the
 * rest: stdin, args, limits, as out->tests).
 */
enum piston_compare {
    PISTON_CMP_EXACT = 0,   /* byte for byte */
    PISTON_CMP_TRIMMED = 1, /* per line, CRLF as LF, trailing whitespace and trailing blank lines ignored (the default) */
    PISTON_CMP_TOKENS = 2,  /* whitespace-separated tokens */
    PISTON_CMP_FLOAT = 3,   /* tokens; numbers within tolerance (absolute or relative) */
};
#define PISTON_TEST_NAME_MAX     128
#define PISTON_EXPECTED_MAX      (1024 * 1024) /* bytes of one case's expected_output */
#define PISTON_DEFAULT_TOLERANCE 1e-6

struct piston_test {
    char *name;
    uint8_t *expected; /* NULL: no expected_output, only the run is judged */
    size_t expected_len;
    enum piston_compare compare;
    double tolerance;
};

struct piston_tests {
    struct piston_test *items;
    size_t count;
};

/* As piston_parse_exec_request, and moat's extensions too: `tests` (tests
 * may be NULL: then `tests` is an unknown field; tests->count is 0 for a
 * request without cases; free with piston_tests_free) and `metadata`
 * (metadata.c; metadata may be NULL: then it is an unknown field; else
 * *metadata is the object, a new reference, or NULL when absent). */
int piston_parse_exec_request_tests(const char *body, size_t len, struct moat_exec_request *out, struct piston_tests *tests,
                                    json_t **metadata, char *err, size_t errlen);
void piston_tests_free(struct piston_tests *t);

/* The same from an object already parsed (a session's `init` message,
 * its "type" member removed), with metadata but without tests. */
int piston_parse_exec_object(json_t *root, struct moat_exec_request *out, json_t **metadata, char *err, size_t errlen);

/* Free what piston_parse_exec_request allocated; leaves r zeroed. */
void piston_exec_request_free(struct moat_exec_request *r);

/*
 * Copy in[0..len) replacing every invalid UTF-8 sequence (maximal subpart)
 * with U+FFFD.  Returns a malloc'ed, NUL-terminated buffer (the data itself
 * may hold NUL characters; *outlen is the byte count) or NULL on overflow or
 * out of memory.
 */
char *piston_utf8_sanitize(const uint8_t *in, size_t len, size_t *outlen);

/*
 * Serialisers: each returns a malloc'ed, NUL-terminated compact JSON text
 * (free with free()) or NULL when memory runs out.
 */
/* A result without a run stage (the compile failed) shows the compile
 * stage's result as `run` as well, as Piston does. */
char *piston_exec_result_json(const struct moat_exec_result *res);
/* The same as an object (a new reference), or NULL. */
json_t *piston_exec_result_object(const struct moat_exec_result *res);
/* A stage's status members (code, signal, message, status, cpu_time,
 * wall_time, memory) added to o, as in an execute result.  0 or -1. */
int piston_stage_status_fields(json_t *o, const struct moat_stage_result *st);
/* A JSON string of arbitrary bytes (invalid UTF-8 replaced), or NULL. */
json_t *piston_json_bytes(const void *data, size_t len);
char *piston_runtimes_json(const struct moat_runtimes *rt);
/* {"message", "code", "request_id"}: an error body (the gateway's slow path) */
char *piston_error_json(const char *message, const char *code, const char *request_id);

#endif /* GW_PISTON_JSON_H */
