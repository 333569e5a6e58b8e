/*
 * moat_semver.c - version selectors (see moat_semver.h).  Pure code: no
 * allocation, no I/O, no global state.
 *
 * A range is read one comparator set at a time ("||" separates them); each
 * comparator becomes an interval [lo, hi) of versions (hi may be open), and
 * a version is in the set when it is in every interval.  A partial version
 * ("3", "3.11", "3.x") has n given components; "next" is the version just
 * past its span (3 -> 4.0.0, 3.11 -> 3.12.0, 3.11.2 -> 3.11.3), which is how
 * node-semver reads partials with each operator.
 */
#include "moat_semver.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define PART_MAX 999999999ull /* a component larger than this is not a version */

struct ver {
    uint64_t v[3];
};

/* [lo, hi), hi_open: no upper bound; empty: selects nothing */
struct interval {
    struct ver lo, hi;
    int hi_open, empty;
};

/* ---------------------------------------------------------------- plain */

static int plain_char(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '.' || c == '*' || c == '+' ||
           c == '-' || c == '_';
}

int moat_selector_is_plain(const char *selector)
{
    if (selector[0] == '\0')
        return 0;
    for (const char *p = selector; *p; p++)
        if (!plain_char(*p))
            return 0;
    return 1;
}

/* The plain rule: whole dotted components, a wildcard component ends it, a prefix selects below it. */
static int plain_selects(const char *version, const char *selector)
{
    const char *v = version, *s = selector;

    if (strcmp(selector, "*") == 0 || strcmp(selector, "x") == 0)
        return 1;
    while (*s) {
        if (*s == 'x' || *s == 'X' || *s == '*')
            return 1; /* wildcard from here on */
        size_t sl = strcspn(s, "."), vl = strcspn(v, ".");
        if (sl != vl || strncmp(s, v, sl) != 0)
            return 0;
        s += sl;
        v += vl;
        if (*s == '.') {
            if (*v != '.')
                return 0;
            s++;
            v++;
        }
    }
    return 1; /* a prefix like "3.11" selects "3.11.2" */
}

int moat_version_cmp(const char *a, const char *b)
{
    while (*a || *b) {
        char *ea, *eb;
        long x = strtol(a, &ea, 10), y = strtol(b, &eb, 10);
        a = ea;
        b = eb;
        if (x != y)
            return x < y ? -1 : 1;
        if (*a == '.')
            a++;
        else if (*a)
            return strcmp(a, b);
        if (*b == '.')
            b++;
        else if (*b)
            return strcmp(a, b);
    }
    return 0;
}

/* ---------------------------------------------------------------- ranges */

static int ver_cmp(const struct ver *a, const struct ver *b)
{
    for (int i = 0; i < 3; i++)
        if (a->v[i] != b->v[i])
            return a->v[i] < b->v[i] ? -1 : 1;
    return 0;
}

/* An installed version: one to three whole numbers, dotted, nothing else. */
static int parse_version(const char *s, struct ver *out)
{
    memset(out, 0, sizeof(*out));
    for (int i = 0; i < 3; i++) {
        uint64_t n = 0;
        const char *start = s;
        while (*s >= '0' && *s <= '9') {
            n = n * 10 + (uint64_t)(*s++ - '0');
            if (n > PART_MAX)
                return -1;
        }
        if (s == start)
            return -1;
        out->v[i] = n;
        if (*s == '\0')
            return 0;
        if (*s++ != '.')
            return -1;
    }
    return -1; /* a fourth component */
}

/* A partial version in s[0..len): "3", "3.11", "3.x", "v3.11.2", "*".  *n: the components given before a wildcard. */
static int parse_partial(const char *s, size_t len, struct ver *base, int *n)
{
    size_t i = 0;

    memset(base, 0, sizeof(*base));
    *n = 0;
    if (i < len && (s[i] == 'v' || s[i] == 'V'))
        i++;
    if (i == len)
        return -1;
    for (int c = 0; c < 3; c++) {
        if (s[i] == 'x' || s[i] == 'X' || s[i] == '*') {
            i++;
            /* a wildcard may only be followed by more wildcards */
            while (i < len) {
                if (s[i] != '.' || i + 1 == len || !(s[i + 1] == 'x' || s[i + 1] == 'X' || s[i + 1] == '*'))
                    return -1;
                i += 2;
            }
            return 0;
        }
        uint64_t v = 0;
        size_t start = i;
        while (i < len && s[i] >= '0' && s[i] <= '9') {
            v = v * 10 + (uint64_t)(s[i++] - '0');
            if (v > PART_MAX)
                return -1;
        }
        if (i == start)
            return -1;
        base->v[c] = v;
        *n = c + 1;
        if (i == len)
            return 0;
        if (s[i] != '.' || ++i == len)
            return -1;
    }
    return -1; /* a fourth component */
}

/* The version just past a partial's span: n components given, n >= 1. */
static struct ver next_of(const struct ver *base, int n)
{
    struct ver r = *base;
    r.v[n - 1]++;
    for (int i = n; i < 3; i++)
        r.v[i] = 0;
    return r;
}

static void any(struct interval *iv)
{
    memset(iv, 0, sizeof(*iv));
    iv->hi_open = 1;
}

static void span(struct interval *iv, struct ver lo, struct ver hi)
{
    memset(iv, 0, sizeof(*iv));
    iv->lo = lo;
    iv->hi = hi;
}

/* "^V": changes that keep V's first non-zero component (of those given). */
static void caret(struct interval *iv, const struct ver *b, int n)
{
    if (b->v[0] > 0 || n == 1)
        span(iv, *b, next_of(b, 1));
    else if (b->v[1] > 0 || n == 2)
        span(iv, *b, next_of(b, 2));
    else
        span(iv, *b, next_of(b, 3));
}

/* One comparator: an operator (maybe none) and a partial version. */
static int comparator(const char *op, size_t oplen, const char *s, size_t len, struct interval *iv)
{
    struct ver b, zero = {{0, 0, 0}};
    int n;

    if (parse_partial(s, len, &b, &n) != 0)
        return -1;
    if (n == 0) { /* "*": everything, but nothing is below or above everything */
        any(iv);
        iv->empty = oplen == 1 && (op[0] == '<' || op[0] == '>');
        return 0;
    }
    any(iv);
    if (oplen == 0 || (oplen == 1 && op[0] == '='))
        span(iv, b, next_of(&b, n));
    else if (oplen == 2 && op[0] == '>' && op[1] == '=')
        iv->lo = b;
    else if (oplen == 1 && op[0] == '>')
        iv->lo = next_of(&b, n);
    else if (oplen == 1 && op[0] == '<')
        span(iv, zero, b);
    else if (oplen == 2 && op[0] == '<' && op[1] == '=')
        span(iv, zero, next_of(&b, n));
    else if (op[0] == '~' && (oplen == 1 || op[1] == '>')) /* "~>" too, as node-semver reads it */
        span(iv, b, next_of(&b, n >= 2 ? 2 : 1));
    else if (oplen == 1 && op[0] == '^')
        caret(iv, &b, n);
    else
        return -1;
    return 0;
}

static int in_interval(const struct ver *v, const struct interval *iv)
{
    return !iv->empty && ver_cmp(v, &iv->lo) >= 0 && (iv->hi_open || ver_cmp(v, &iv->hi) < 0);
}

static int is_space(char c)
{
    return c == ' ' || c == '\t';
}

static size_t op_len(const char *s, size_t len)
{
    if (len >= 2 && (((s[0] == '>' || s[0] == '<') && s[1] == '=') || (s[0] == '~' && s[1] == '>')))
        return 2;
    if (len >= 1 && strchr("<>=~^", s[0]) != NULL)
        return 1;
    return 0;
}

/*
 * One comparator set s[0..len): 1 when v (NULL: only check the syntax) is
 * in it, 0 when not, -1 when it does not parse.
 */
static int set_selects(const struct ver *v, const char *s, size_t len)
{
    size_t i = 0;
    int in = 1;

    for (;;) {
        struct interval iv;
        while (i < len && is_space(s[i]))
            i++;
        if (i == len)
            return in;
        size_t ol = op_len(s + i, len - i), at = i + ol;
        while (at < len && is_space(s[at])) /* ">= 3" */
            at++;
        size_t end = at;
        while (end < len && !is_space(s[end]))
            end++;
        /* "A - B": a hyphen range, inclusive at both ends */
        size_t h = end;
        while (h < len && is_space(s[h]))
            h++;
        if (ol == 0 && h + 1 < len && s[h] == '-' && is_space(s[h + 1])) {
            struct interval lo, hi;
            size_t b = h + 1, bend;
            while (b < len && is_space(s[b]))
                b++;
            for (bend = b; bend < len && !is_space(s[bend]); bend++)
                ;
            if (comparator(">=", 2, s + at, end - at, &lo) != 0 || comparator("<=", 2, s + b, bend - b, &hi) != 0)
                return -1;
            in = in && v != NULL && in_interval(v, &lo) && in_interval(v, &hi);
            i = bend;
            continue;
        }
        if (comparator(s + i, ol, s + at, end - at, &iv) != 0)
            return -1;
        in = in && v != NULL && in_interval(v, &iv);
        i = end;
    }
}

/* 1 when v (NULL: syntax only) is in the range, 0 when not, -1 when it does not parse. */
static int range_selects(const struct ver *v, const char *range)
{
    int found = 0;

    for (const char *s = range;;) {
        const char *bar = strstr(s, "||");
        size_t len = bar != NULL ? (size_t)(bar - s) : strlen(s);
        int rc = set_selects(v, s, len);
        if (rc < 0)
            return -1;
        found |= rc;
        if (bar == NULL)
            return found;
        s = bar + 2;
    }
}

int moat_selector_valid(const char *selector)
{
    return moat_selector_is_plain(selector) || range_selects(NULL, selector) >= 0;
}

int moat_version_selects(const char *version, const char *selector)
{
    struct ver v;

    if (moat_selector_is_plain(selector))
        return plain_selects(version, selector);
    if (parse_version(version, &v) != 0)
        return 0;
    return range_selects(&v, selector) == 1;
}
