/*
 * piston_tests.h - judging an execute's test cases (issue 12 item 3): the
 * output comparisons, each case's verdict and the result JSON's `tests`
 * and `summary`.  Pure functions, unit-tested (tests/unit/test_gateway_piston.c):
 * the backend returns each case's run stage as it ran; the verdicts are
 * made here, where the expected output is.
 */
#ifndef GW_PISTON_TESTS_H
#define GW_PISTON_TESTS_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "moat_proto.h"
#include "json/piston_json.h"

/* Where two outputs first differ: line is 1-based in the expected output
 * (for tokens and float, the line of the first differing token); exp and
 * got are that line of each (got's line holding the differing token),
 * without its end of line; got is empty when the output ended first. */
struct piston_diff {
    size_t line;
    const uint8_t *exp;
    size_t exp_len;
    const uint8_t *got;
    size_t got_len;
};

/* 1 when got matches expected under mode (tolerance for PISTON_CMP_FLOAT),
 * else 0 with *d saying where they first differ. */
int piston_compare(enum piston_compare mode, double tolerance, const uint8_t *exp, size_t exp_len, const uint8_t *got,
                   size_t got_len, struct piston_diff *d);

enum piston_verdict {
    PISTON_ACCEPTED = 0,
    PISTON_WRONG_ANSWER,
    PISTON_TIME_LIMIT,
    PISTON_MEMORY_LIMIT,
    PISTON_RUNTIME_ERROR,
    PISTON_OUTPUT_LIMIT,
    PISTON_COMPILATION_ERROR,
    PISTON_INTERNAL_ERROR,
    PISTON_SKIPPED, /* not run: the job's wall budget (tests_timeout) was spent */
};

/* "Accepted", "Wrong Answer", ... */
const char *piston_verdict_name(enum piston_verdict v);

/* A case's verdict from its run stage (NULL: not run) and what judges it. */
enum piston_verdict piston_judge_case(const struct moat_stage_result *st, const struct piston_test *t, struct piston_diff *d);

/*
 * The execute result with test cases: Piston's body (`run` is the first
 * case's run stage, or the compile stage's when compiling failed), plus
 * `tests` (one object per case: name, verdict, and for a Wrong Answer
 * `diff` {line, expected, got}, for a Time Limit `clock`, then stdout,
 * stderr and the stage's status fields) and `summary` {passed, total,
 * verdict, first_failure}.  *audit, when not NULL, gets the per-case
 * verdicts for the result record ({summary, verdicts: [...]}).  A
 * malloc'ed JSON text, or NULL when memory runs out.
 */
char *piston_exec_result_tests_json(const struct moat_exec_result *res, const struct piston_tests *tests, json_t **audit);

#endif /* GW_PISTON_TESTS_H */
