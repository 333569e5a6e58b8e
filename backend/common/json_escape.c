/*
 * json_escape.c - allocation-free JSON string escaping (see
 * moat_json_escape.h).  tests/unit/test_common.c compares it with jansson.
 */
#include "moat_json_escape.h"

#include <stdint.h>
#include <string.h>

#include "moat_utf8.h"

/* \uXXXX of one UTF-16 unit, uppercase as jansson writes it. */
static void put_u16(char *o, uint32_t u)
{
    static const char up[] = "0123456789ABCDEF";

    o[0] = '\\';
    o[1] = 'u';
    o[2] = up[(u >> 12) & 0xf];
    o[3] = up[(u >> 8) & 0xf];
    o[4] = up[(u >> 4) & 0xf];
    o[5] = up[u & 0xf];
}

int moat_json_escape(char *buf, size_t size, size_t *off, const char *src, size_t len, unsigned flags)
{
    static const char lo[] = "0123456789abcdef";
    const uint8_t *s = (const uint8_t *)src;
    size_t o = *off;

    if (o >= size)
        return -1;
    for (size_t i = 0; i < len;) {
        uint8_t c = s[i];
        size_t run = i;
        while (run < len && s[run] >= 0x20 && s[run] < 0x7f && s[run] != '"' && s[run] != '\\')
            run++;
        /* every branch checks o + need < size: one byte always stays free */
        if (run > i) { /* a run that needs no escape is copied at once (error bodies, log lines) */
            if (size - o <= run - i)
                return -1;
            memcpy(buf + o, s + i, run - i);
            o += run - i;
            i = run;
        } else if (c == '"' || c == '\\') {
            if (size - o <= 2)
                return -1;
            buf[o++] = '\\';
            buf[o++] = (char)c;
            i++;
        } else if (c < 0x80) { /* controls and DEL */
            if (size - o <= 6)
                return -1;
            memcpy(buf + o, "\\u00", 4);
            buf[o + 4] = lo[c >> 4];
            buf[o + 5] = lo[c & 0xf];
            o += 6;
            i++;
        } else {
            uint32_t cp;
            size_t n;
            if ((flags & MOAT_JSON_ASCII_ONLY) || (n = moat_utf8_decode(s + i, len - i, &cp, NULL)) == 0)
                return -1;
            if (flags & MOAT_JSON_UTF8_RAW) {
                if (size - o <= n)
                    return -1;
                memcpy(buf + o, s + i, n);
                o += n;
            } else if (cp < 0x10000) {
                if (size - o <= 6)
                    return -1;
                put_u16(buf + o, cp);
                o += 6;
            } else {
                if (size - o <= 12)
                    return -1;
                cp -= 0x10000;
                put_u16(buf + o, 0xd800 | (cp >> 10));
                put_u16(buf + o + 6, 0xdc00 | (cp & 0x3ff));
                o += 12;
            }
            i += n;
        }
    }
    *off = o;
    return 0;
}
