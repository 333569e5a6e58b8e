/*
 * utf8.c - well-formed UTF-8 (see moat_utf8.h).
 *
 * Table 3-7 of the Unicode standard as code: the lead byte gives the length
 * and the allowed range of the second byte (which is what rules out
 * overlongs, surrogates and values past U+10FFFF); later bytes are plain
 * continuation bytes.  Hand-written rather than through jansson because the
 * codec checks every string field of every frame and the deny path checks
 * error messages, neither of which may allocate; the test compares it with
 * jansson's own check.
 */
#include "moat_utf8.h"

size_t moat_utf8_decode(const uint8_t *s, size_t len, uint32_t *cp, size_t *bad_len)
{
    uint8_t c = s[0], lo = 0x80, hi = 0xbf;
    size_t need;
    uint32_t v;

    if (bad_len != NULL)
        *bad_len = 1;
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    if (c >= 0xc2 && c <= 0xdf) {
        need = 1;
        v = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        need = 2;
        v = c & 0x0f;
        if (c == 0xe0)
            lo = 0xa0; /* overlong below U+0800 */
        else if (c == 0xed)
            hi = 0x9f; /* surrogates */
    } else if (c >= 0xf0 && c <= 0xf4) {
        need = 3;
        v = c & 0x07;
        if (c == 0xf0)
            lo = 0x90; /* overlong below U+10000 */
        else if (c == 0xf4)
            hi = 0x8f; /* past U+10FFFF */
    } else {
        return 0; /* continuation byte, C0/C1 (overlong ASCII), F5..FF */
    }
    for (size_t i = 1; i <= need; i++) {
        if (i >= len || s[i] < lo || s[i] > hi) {
            if (bad_len != NULL)
                *bad_len = i;
            return 0;
        }
        v = v << 6 | (s[i] & 0x3f);
        lo = 0x80;
        hi = 0xbf;
    }
    *cp = v;
    return need + 1;
}

int moat_utf8_valid(const uint8_t *s, size_t len)
{
    size_t i = 0;
    uint32_t cp;

    while (i < len) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        size_t n = moat_utf8_decode(s + i, len - i, &cp, NULL);
        if (n == 0)
            return 0;
        i += n;
    }
    return 1;
}
