/*
 * moat_options.c - compiler options against an allow-list (moat_options.h).
 *
 * A pattern word is matched against one option by a small backtracking
 * matcher: literal characters compare exactly, a placeholder takes 1-64
 * characters of its class (longest first).  Patterns are short and the
 * placeholders few, so the work is bounded by the allow-list, not by the
 * request.
 */
#include "moat_options.h"

#include <string.h>

#include "moat_proto.h"

enum placeholder { PH_NONE, PH_IDENT, PH_VALUE };

/* The placeholder starting at p ("{ident}", "{value}"), its length in *len. */
static enum placeholder placeholder_at(const char *p, size_t left, size_t *len)
{
    if (left >= 7 && memcmp(p, "{ident}", 7) == 0) {
        *len = 7;
        return PH_IDENT;
    }
    if (left >= 7 && memcmp(p, "{value}", 7) == 0) {
        *len = 7;
        return PH_VALUE;
    }
    return PH_NONE;
}

static int ident_char(char c, int first)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (!first && c >= '0' && c <= '9');
}

static int value_char(char c)
{
    return ident_char(c, 0) || c == '.' || c == '+' || c == '-';
}

/* How many characters of t (1..64) the placeholder could take: the longest run of its class. */
static size_t class_run(enum placeholder ph, const char *t, size_t tlen)
{
    size_t n = 0;

    while (n < tlen && n < MOAT_OPTION_PLACEHOLDER_MAX && (ph == PH_IDENT ? ident_char(t[n], n == 0) : value_char(t[n])))
        n++;
    return n;
}

/* Does the pattern word p[0..plen) match all of t[0..tlen)? */
static int word_matches(const char *p, size_t plen, const char *t, size_t tlen)
{
    size_t phlen;

    while (plen > 0) {
        enum placeholder ph = placeholder_at(p, plen, &phlen);
        if (ph != PH_NONE) {
            for (size_t n = class_run(ph, t, tlen); n >= 1; n--)
                if (word_matches(p + phlen, plen - phlen, t + n, tlen - n))
                    return 1;
            return 0;
        }
        if (tlen == 0 || *p != *t)
            return 0;
        p++, plen--, t++, tlen--;
    }
    return tlen == 0;
}

int moat_option_pattern_valid(const char *pattern)
{
    size_t len = strlen(pattern), phlen;

    if (len == 0 || len > MOAT_MAX_COMPILER_OPTION_LEN || pattern[0] != '-' || pattern[len - 1] == ' ')
        return 0;
    for (size_t i = 0; i < len; i++) {
        char c = pattern[i];
        if (c == '{') {
            if (placeholder_at(pattern + i, len - i, &phlen) == PH_NONE)
                return 0;
            i += phlen - 1;
            continue;
        }
        /* printable ASCII; a space only between words, one at a time; no quote, no '}' alone */
        if (c < 0x21 && !(c == ' ' && pattern[i + 1] != ' '))
            return 0;
        if (c > 0x7e || c == '}' || c == '"' || c == '\'' || c == '\\')
            return 0;
    }
    return 1;
}

/* How many options from opts[0..nopts) the pattern takes (its word count), or 0. */
static size_t pattern_takes(const char *pattern, char *const *opts, size_t nopts)
{
    size_t k = 0;
    const char *w = pattern;

    for (;;) {
        const char *end = strchr(w, ' ');
        size_t wlen = end != NULL ? (size_t)(end - w) : strlen(w);
        if (k >= nopts || !word_matches(w, wlen, opts[k], strlen(opts[k])))
            return 0;
        k++;
        if (end == NULL)
            return k;
        w = end + 1;
    }
}

int moat_options_check(char *const *patterns, size_t npatterns, char *const *opts, size_t nopts, size_t *bad)
{
    size_t i = 0;

    while (i < nopts) {
        size_t took = 0;
        for (size_t p = 0; p < npatterns && took == 0; p++)
            took = pattern_takes(patterns[p], opts + i, nopts - i);
        if (took == 0) {
            *bad = i;
            return -1;
        }
        i += took;
    }
    return 0;
}
