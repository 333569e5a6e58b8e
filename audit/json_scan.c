/*
 * json_scan.c - the strict check behind the writer's fast path (json_scan.h).
 *
 * Accepted, and only this: one JSON object filling the whole buffer, in
 * compact form (no whitespace outside strings), made of printable ASCII
 * (0x20-0x7e) only, with
 *   - strings using only the escapes \" \\ \/ \b \f \n \r \t and \uXXXX,
 *     where XXXX is not a surrogate (D800-DFFF);
 *   - keys without any escape, no key twice in one object (compared as raw
 *     bytes, which for unescaped keys is what jansson compares), at most
 *     AUDIT_JSON_SCAN_MAX_KEYS keys in the open objects together;
 *   - numbers per the JSON grammar that no parser can overflow: integers
 *     of up to 18 digits, reals of up to 15 integer digits and an exponent
 *     of up to 2 digits;
 *   - true, false, null, and objects and arrays nested at most
 *     AUDIT_JSON_SCAN_MAX_DEPTH deep.
 *
 * The fast path is only an optimisation: anything else goes through jansson
 * (JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL) and is re-encoded or refused
 * exactly as before.  The security of the log rests on this scanner never
 * accepting a body that jansson would reject (the verifier parses the line
 * with jansson) or that would put a byte outside 0x20-0x7e into a line.
 * So when in doubt, it declines.
 */
#include "json_scan.h"

#include <stdint.h>
#include <string.h>

#include "moat_hex.h"

struct key_span {
    uint32_t off, len;
};

struct scan {
    const char *base, *p, *end;
    int depth;
    size_t nkeys;
    audit_json_member_cb top;
    void *arg;
    struct key_span keys[AUDIT_JSON_SCAN_MAX_KEYS];
};

static int scan_value(struct scan *s);

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* An escape at *pp (the backslash); moves *pp past it. */
static int scan_escape(const char **pp, const char *end)
{
    const char *p = *pp + 1;
    unsigned v = 0;
    if (p >= end)
        return -1;
    switch (*p) {
    case '"':
    case '\\':
    case '/':
    case 'b':
    case 'f':
    case 'n':
    case 'r':
    case 't':
        *pp = p + 1;
        return 0;
    case 'u':
        if (end - p < 5)
            return -1;
        for (int i = 1; i <= 4; i++) {
            int h = moat_hex_digit((unsigned char)p[i], MOAT_HEX_ANY_CASE);
            if (h < 0)
                return -1;
            v = v << 4 | (unsigned)h;
        }
        if (v >= 0xd800 && v <= 0xdfff)
            return -1; /* surrogate pairs and lone halves: jansson decides */
        *pp = p + 5;
        return 0;
    default:
        return -1;
    }
}

/* A string at s->p (its opening quote); *escaped tells whether it holds a
 * backslash. */
static int scan_string(struct scan *s, int *escaped)
{
    const char *p = s->p + 1;
    *escaped = 0;
    while (p < s->end) {
        unsigned char c = (unsigned char)*p;
        if (c == '"') {
            s->p = p + 1;
            return 0;
        }
        if (c < 0x20 || c > 0x7e)
            return -1;
        if (c == '\\') {
            *escaped = 1;
            if (scan_escape(&p, s->end) != 0)
                return -1;
        } else {
            p++;
        }
    }
    return -1;
}

static const char *skip_digits(const char *p, const char *end)
{
    while (p < end && is_digit(*p))
        p++;
    return p;
}

static int scan_number(struct scan *s)
{
    const char *p = s->p, *end = s->end, *digits, *q;
    int real = 0;
    if (p < end && *p == '-')
        p++;
    digits = p;
    if (p < end && *p == '0')
        p++;
    else if (p < end && *p >= '1' && *p <= '9')
        p = skip_digits(p, end);
    else
        return -1;
    size_t int_digits = (size_t)(p - digits);
    if (p < end && *p == '.') {
        q = p + 1;
        p = skip_digits(q, end);
        if (p == q)
            return -1;
        real = 1;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-'))
            p++;
        q = p;
        p = skip_digits(q, end);
        if (p == q || p - q > 2)
            return -1;
        real = 1;
    }
    if (int_digits > (real ? 15u : 18u))
        return -1;
    s->p = p;
    return 0;
}

static int scan_word(struct scan *s, const char *word, size_t n)
{
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, word, n) != 0)
        return -1;
    s->p += n;
    return 0;
}

/* A key and its colon; refuses escapes, duplicates in this object (its keys
 * are keys[first..nkeys)) and too many keys. */
static int scan_key(struct scan *s, size_t first, const char **key, size_t *key_len)
{
    int escaped;
    if (s->p >= s->end || *s->p != '"')
        return -1;
    const char *k = s->p + 1;
    if (scan_string(s, &escaped) != 0 || escaped || s->p >= s->end || *s->p != ':')
        return -1;
    size_t n = (size_t)(s->p - 1 - k);
    s->p++;
    for (size_t i = first; i < s->nkeys; i++)
        if (s->keys[i].len == n && memcmp(s->base + s->keys[i].off, k, n) == 0)
            return -1;
    if (s->nkeys == AUDIT_JSON_SCAN_MAX_KEYS)
        return -1;
    s->keys[s->nkeys].off = (uint32_t)(k - s->base);
    s->keys[s->nkeys].len = (uint32_t)n;
    s->nkeys++;
    *key = k;
    *key_len = n;
    return 0;
}

/* After a member or element: 1 at the closing bracket (consumed), 0 at a
 * comma (consumed), -1 otherwise. */
static int scan_next(struct scan *s, char close)
{
    if (s->p >= s->end)
        return -1;
    if (*s->p == close) {
        s->p++;
        return 1;
    }
    if (*s->p != ',')
        return -1;
    s->p++;
    return 0;
}

static int scan_object(struct scan *s, int top)
{
    size_t first = s->nkeys;
    int rc = 0;
    if (++s->depth > AUDIT_JSON_SCAN_MAX_DEPTH)
        return -1;
    s->p++;
    if (s->p < s->end && *s->p == '}') {
        s->p++;
        rc = 1;
    }
    while (rc == 0) {
        const char *key, *value;
        size_t key_len;
        if (scan_key(s, first, &key, &key_len) != 0)
            return -1;
        value = s->p;
        if (scan_value(s) != 0)
            return -1;
        if (top && s->top != NULL && s->top(s->arg, key, key_len, value, (size_t)(s->p - value)) != 0)
            return -1;
        rc = scan_next(s, '}');
    }
    s->nkeys = first;
    s->depth--;
    return rc < 0 ? -1 : 0;
}

static int scan_array(struct scan *s)
{
    int rc = 0;
    if (++s->depth > AUDIT_JSON_SCAN_MAX_DEPTH)
        return -1;
    s->p++;
    if (s->p < s->end && *s->p == ']') {
        s->p++;
        rc = 1;
    }
    while (rc == 0) {
        if (scan_value(s) != 0)
            return -1;
        rc = scan_next(s, ']');
    }
    s->depth--;
    return rc < 0 ? -1 : 0;
}

static int scan_value(struct scan *s)
{
    int escaped;
    if (s->p >= s->end)
        return -1;
    switch (*s->p) {
    case '{':
        return scan_object(s, 0);
    case '[':
        return scan_array(s);
    case '"':
        return scan_string(s, &escaped);
    case 't':
        return scan_word(s, "true", 4);
    case 'f':
        return scan_word(s, "false", 5);
    case 'n':
        return scan_word(s, "null", 4);
    default:
        return scan_number(s);
    }
}

int audit_json_scan(const char *body, size_t len, audit_json_member_cb top, void *arg)
{
    struct scan s; /* keys[] is written before it is read */
    if (body == NULL || len < 2 || len > UINT32_MAX || body[0] != '{')
        return -1;
    s.base = s.p = body;
    s.end = body + len;
    s.depth = 0;
    s.nkeys = 0;
    s.top = top;
    s.arg = arg;
    if (scan_object(&s, 1) != 0 || s.p != s.end)
        return -1;
    return 0;
}
