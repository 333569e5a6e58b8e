/*
 * piston_tests.c - test cases' verdicts: compare a case's stdout with its
 * expected output, name the verdict, build `tests` and `summary`.
 *
 * The comparisons work on bytes as the program wrote them (no UTF-8
 * assumption) and never allocate: each walks both outputs once, line by
 * line or token by token, and stops at the first difference, which it
 * reports as a line of each (struct piston_diff, pointing into the inputs).
 */
#include "piston_tests.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- lines */

/* The line of buf holding offset at: [*start, *end) without its '\n' (nor a '\r' before it). */
static void line_around(const uint8_t *buf, size_t len, size_t at, size_t *start, size_t *end)
{
    size_t s = at > len ? len : at, e = s;

    while (s > 0 && buf[s - 1] != '\n')
        s--;
    while (e < len && buf[e] != '\n')
        e++;
    if (e > s && buf[e - 1] == '\r')
        e--;
    *start = s;
    *end = e;
}

static void diff_at(struct piston_diff *d, size_t line, const uint8_t *exp, size_t exp_len, size_t exp_at, const uint8_t *got,
                    size_t got_len, size_t got_at, int got_ended)
{
    size_t s, e;

    d->line = line;
    line_around(exp, exp_len, exp_at, &s, &e);
    d->exp = exp + s;
    d->exp_len = e - s;
    if (got_ended) {
        d->got = got + got_len;
        d->got_len = 0;
        return;
    }
    line_around(got, got_len, got_at, &s, &e);
    d->got = got + s;
    d->got_len = e - s;
}

static size_t count_lines(const uint8_t *buf, size_t upto)
{
    size_t n = 1;
    for (size_t i = 0; i < upto; i++)
        n += buf[i] == '\n';
    return n;
}

static int compare_exact(const uint8_t *exp, size_t exp_len, const uint8_t *got, size_t got_len, struct piston_diff *d)
{
    size_t i = 0, n = exp_len < got_len ? exp_len : got_len;

    while (i < n && exp[i] == got[i])
        i++;
    if (i == exp_len && i == got_len)
        return 1;
    diff_at(d, count_lines(exp, i), exp, exp_len, i, got, got_len, i, 0);
    return 0;
}

/* ---------------------------------------------------------------- trimmed */

static int is_trailing_space(uint8_t c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v';
}

/* The next line from *off: [*s, *e) with trailing whitespace cut; 0 at the end. */
static int next_line(const uint8_t *buf, size_t len, size_t *off, size_t *s, size_t *e)
{
    if (*off >= len)
        return 0;
    *s = *off;
    size_t i = *off;
    while (i < len && buf[i] != '\n')
        i++;
    *off = i < len ? i + 1 : len;
    while (i > *s && is_trailing_space(buf[i - 1]))
        i--;
    *e = i;
    return 1;
}

/* The length of buf without its trailing blank lines (whitespace only). */
static size_t without_trailing_blank_lines(const uint8_t *buf, size_t len)
{
    size_t end = len;

    while (end > 0) {
        size_t s = end;
        while (s > 0 && buf[s - 1] != '\n')
            s--;
        size_t k = s;
        while (k < end && is_trailing_space(buf[k]))
            k++;
        if (k != end)
            break;    /* the last line has something on it */
        if (s == 0) { /* the only line, and blank */
            end = 0;
            break;
        }
        end = s - 1; /* drop the blank line and the '\n' before it */
    }
    return end;
}

static int compare_trimmed(const uint8_t *exp, size_t exp_len, const uint8_t *got, size_t got_len, struct piston_diff *d)
{
    size_t el = without_trailing_blank_lines(exp, exp_len), gl = without_trailing_blank_lines(got, got_len);
    size_t eo = 0, go = 0, line = 1;

    for (;; line++) {
        size_t es = 0, ee = 0, gs = 0, ge = 0;
        int he = next_line(exp, el, &eo, &es, &ee), hg = next_line(got, gl, &go, &gs, &ge);
        if (!he && !hg)
            return 1;
        if (he && hg && ee - es == ge - gs && memcmp(exp + es, got + gs, ee - es) == 0)
            continue;
        diff_at(d, line, exp, exp_len, he ? es : exp_len, got, got_len, gs, !hg);
        if (!he) { /* the expected output ended: its "line" is empty */
            d->exp = exp + exp_len;
            d->exp_len = 0;
        }
        return 0;
    }
}

/* ---------------------------------------------------------------- tokens */

static int is_space(uint8_t c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

struct tok_reader {
    const uint8_t *buf;
    size_t len, off, line;
};

/* The next token: [*s, *e), on line *line; 0 at the end. */
static int next_token(struct tok_reader *r, size_t *s, size_t *e, size_t *line)
{
    while (r->off < r->len && is_space(r->buf[r->off]))
        r->line += r->buf[r->off++] == '\n';
    if (r->off >= r->len)
        return 0;
    *s = r->off;
    *line = r->line;
    while (r->off < r->len && !is_space(r->buf[r->off]))
        r->off++;
    *e = r->off;
    return 1;
}

/* A token as a number: the whole of it, as strtod reads it ("1e-3", "nan", "inf"). */
static int token_number(const uint8_t *p, size_t n, double *v)
{
    char buf[64], *end;

    if (n == 0 || n >= sizeof(buf))
        return 0;
    memcpy(buf, p, n);
    buf[n] = '\0';
    *v = strtod(buf, &end);
    return end == buf + n;
}

/* Equal within tolerance: absolutely, or relative to the expected value.
 * NaN equals NaN (the expected output says "nan"), infinities equal
 * themselves; a NaN or infinity never equals a finite number. */
static int numbers_match(double exp, double got, double tolerance)
{
    if (isnan(exp) || isnan(got))
        return isnan(exp) && isnan(got);
    if (isinf(exp) || isinf(got))
        return exp == got;
    double diff = fabs(exp - got);
    return diff <= tolerance || diff <= tolerance * fabs(exp);
}

static int tokens_match(const uint8_t *a, size_t an, const uint8_t *b, size_t bn, int floats, double tolerance)
{
    double x, y;

    if (an == bn && memcmp(a, b, an) == 0)
        return 1;
    return floats && token_number(a, an, &x) && token_number(b, bn, &y) && numbers_match(x, y, tolerance);
}

static int compare_tokens(const uint8_t *exp, size_t exp_len, const uint8_t *got, size_t got_len, int floats, double tolerance,
                          struct piston_diff *d)
{
    struct tok_reader er = {exp, exp_len, 0, 1}, gr = {got, got_len, 0, 1};

    for (;;) {
        size_t es = 0, ee = 0, gs = 0, ge = 0, eline = 0, gline = 0;
        int he = next_token(&er, &es, &ee, &eline), hg = next_token(&gr, &gs, &ge, &gline);
        if (!he && !hg)
            return 1;
        if (he && hg && tokens_match(exp + es, ee - es, got + gs, ge - gs, floats, tolerance))
            continue;
        diff_at(d, he ? eline : er.line, exp, exp_len, he ? es : exp_len, got, got_len, gs, !hg);
        if (!he) {
            d->exp = exp + exp_len;
            d->exp_len = 0;
        }
        return 0;
    }
}

int piston_compare(enum piston_compare mode, double tolerance, const uint8_t *exp, size_t exp_len, const uint8_t *got,
                   size_t got_len, struct piston_diff *d)
{
    static const uint8_t empty[1];

    memset(d, 0, sizeof(*d));
    if (exp == NULL)
        exp = empty, exp_len = 0;
    if (got == NULL)
        got = empty, got_len = 0;
    switch (mode) {
    case PISTON_CMP_EXACT:
        return compare_exact(exp, exp_len, got, got_len, d);
    case PISTON_CMP_TOKENS:
        return compare_tokens(exp, exp_len, got, got_len, 0, 0, d);
    case PISTON_CMP_FLOAT:
        return compare_tokens(exp, exp_len, got, got_len, 1, tolerance, d);
    case PISTON_CMP_TRIMMED:
    default:
        return compare_trimmed(exp, exp_len, got, got_len, d);
    }
}

/* ---------------------------------------------------------------- verdicts */

const char *piston_verdict_name(enum piston_verdict v)
{
    static const char *const names[] = {
        [PISTON_ACCEPTED] = "Accepted",
        [PISTON_WRONG_ANSWER] = "Wrong Answer",
        [PISTON_TIME_LIMIT] = "Time Limit Exceeded",
        [PISTON_MEMORY_LIMIT] = "Memory Limit Exceeded",
        [PISTON_RUNTIME_ERROR] = "Runtime Error",
        [PISTON_OUTPUT_LIMIT] = "Output Limit Exceeded",
        [PISTON_COMPILATION_ERROR] = "Compilation Error",
        [PISTON_INTERNAL_ERROR] = "Internal Error",
        [PISTON_SKIPPED] = "Skipped",
    };
    return (size_t)v < sizeof(names) / sizeof(names[0]) ? names[v] : "Internal Error";
}

enum piston_verdict piston_judge_case(const struct moat_stage_result *st, const struct piston_test *t, struct piston_diff *d)
{
    memset(d, 0, sizeof(*d));
    if (st == NULL || !st->present)
        return PISTON_SKIPPED;
    switch (st->status) {
    case MOAT_STATUS_OK:
        if (t->expected == NULL)
            return PISTON_ACCEPTED; /* nothing to compare: the run alone is judged */
        return piston_compare(t->compare, t->tolerance, t->expected, t->expected_len, st->stdout_data, st->stdout_len, d)
                   ? PISTON_ACCEPTED
                   : PISTON_WRONG_ANSWER;
    case MOAT_STATUS_TO:
        return PISTON_TIME_LIMIT;
    case MOAT_STATUS_ML:
        return PISTON_MEMORY_LIMIT;
    case MOAT_STATUS_RE:
    case MOAT_STATUS_SG:
        return PISTON_RUNTIME_ERROR;
    case MOAT_STATUS_OL:
    case MOAT_STATUS_EL:
        return PISTON_OUTPUT_LIMIT;
    default:
        return PISTON_INTERNAL_ERROR;
    }
}

/* ---------------------------------------------------------------- JSON */

/* json_object_set_new that remembers a failure (a NULL value or no memory). */
static void put(json_t *obj, const char *key, json_t *v, int *failed)
{
    if (v == NULL || json_object_set_new(obj, key, v) != 0)
        *failed = 1;
}

static json_t *case_json(const struct piston_test *t, const struct moat_stage_result *st, enum piston_verdict v,
                         const struct piston_diff *d)
{
    json_t *o = json_object();
    int failed = 0;

    if (o == NULL)
        return NULL;
    put(o, "name", piston_json_bytes(t->name, strlen(t->name)), &failed);
    put(o, "verdict", json_string(piston_verdict_name(v)), &failed);
    if (v == PISTON_WRONG_ANSWER) {
        json_t *diff = json_object();
        put(o, "diff", diff, &failed);
        if (!failed) {
            put(diff, "line", json_integer(d->line > (size_t)LLONG_MAX ? LLONG_MAX : (json_int_t)d->line), &failed);
            put(diff, "expected", piston_json_bytes(d->exp, d->exp_len), &failed);
            put(diff, "got", piston_json_bytes(d->got, d->got_len), &failed);
        }
    }
    if (v == PISTON_TIME_LIMIT) {
        const char *c = moat_clock_name(st->clock);
        put(o, "clock", c != NULL ? json_string(c) : json_null(), &failed);
    }
    if (st != NULL && st->present) {
        put(o, "stdout", piston_json_bytes(st->stdout_data, st->stdout_len), &failed);
        put(o, "stderr", piston_json_bytes(st->stderr_data, st->stderr_len), &failed);
        if (!failed && piston_stage_status_fields(o, st) != 0)
            failed = 1;
    }
    if (failed) {
        json_decref(o);
        return NULL;
    }
    return o;
}

char *piston_exec_result_tests_json(const struct moat_exec_result *res, const struct piston_tests *tests, json_t **audit)
{
    struct moat_exec_result shown = *res;
    json_t *o, *arr = json_array(), *verdicts = json_array(), *summary = json_object();
    int compile_failed = res->compile.present && res->compile.status != MOAT_STATUS_OK;
    size_t passed = 0, first = SIZE_MAX;
    enum piston_verdict first_v = PISTON_ACCEPTED;
    int failed = 0;
    char *text = NULL;

    if (audit != NULL)
        *audit = NULL;
    /* `run` is the first case's run stage (a Piston client reads it), or the compile's when that failed */
    if (res->ntests > 0 && !res->run.present)
        shown.run = res->tests[0];
    o = piston_exec_result_object(&shown);
    if (o == NULL || arr == NULL || verdicts == NULL || summary == NULL)
        goto out;
    for (size_t i = 0; i < tests->count && !failed; i++) {
        const struct moat_stage_result *st = i < res->ntests ? &res->tests[i] : NULL;
        struct piston_diff d;
        enum piston_verdict v = compile_failed ? PISTON_COMPILATION_ERROR : piston_judge_case(st, &tests->items[i], &d);
        if (compile_failed)
            memset(&d, 0, sizeof(d));
        if (v == PISTON_ACCEPTED)
            passed++;
        else if (first == SIZE_MAX) {
            first = i;
            first_v = v;
        }
        if (json_array_append_new(arr, case_json(&tests->items[i], st, v, &d)) != 0 ||
            json_array_append_new(verdicts, json_string(piston_verdict_name(v))) != 0)
            failed = 1;
    }
    put(summary, "passed", json_integer((json_int_t)passed), &failed);
    put(summary, "total", json_integer((json_int_t)tests->count), &failed);
    put(summary, "verdict", json_string(piston_verdict_name(first_v)), &failed);
    put(summary, "first_failure",
        first == SIZE_MAX ? json_null() : piston_json_bytes(tests->items[first].name, strlen(tests->items[first].name)), &failed);
    put(summary, "first_failure_index", first == SIZE_MAX ? json_null() : json_integer((json_int_t)first), &failed);
    if (failed)
        goto out;
    if (audit != NULL) {
        json_t *a = json_object();
        if (a == NULL || json_object_set(a, "summary", summary) != 0 || json_object_set(a, "verdicts", verdicts) != 0) {
            json_decref(a);
            goto out;
        }
        *audit = a;
    }
    /* set_new takes its value, on failure too */
    int lost = json_object_set_new(o, "tests", arr) != 0;
    arr = NULL;
    lost |= json_object_set_new(o, "summary", summary) != 0;
    summary = NULL;
    if (lost)
        goto out;
    text = json_dumps(o, JSON_COMPACT);
out:
    json_decref(o);
    json_decref(arr);
    json_decref(verdicts);
    json_decref(summary);
    if (text == NULL && audit != NULL && *audit != NULL) {
        json_decref(*audit);
        *audit = NULL;
    }
    return text;
}
