/*
 * moat_utf8.h - UTF-8 checking and decoding, the one copy: the codec's
 * string fields, the gateway's error bodies and output sanitising, the
 * audit tools' display.
 *
 * Well-formed means Unicode's definition (table 3-7): no overlong forms, no
 * surrogates (U+D800..U+DFFF), nothing past U+10FFFF, no truncated
 * sequence.  NUL is a valid character here; callers that refuse it say so.
 * It accepts exactly what jansson accepts as a string (a differential test
 * in tests/unit/test_common.c checks that).
 */
#ifndef MOAT_UTF8_H
#define MOAT_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* 1 if s[0..len) is well-formed UTF-8, else 0. */
int moat_utf8_valid(const uint8_t *s, size_t len);

/*
 * The sequence at s[0..len) (len >= 1): its length (1-4) with its code
 * point in *cp, or 0 when it is not well-formed.  Then *bad_len (when not
 * NULL) is the length of its maximal ill-formed subpart (1-3): the bytes
 * to replace with one U+FFFD, as Unicode recommends, before going on.
 */
size_t moat_utf8_decode(const uint8_t *s, size_t len, uint32_t *cp, size_t *bad_len);

#endif /* MOAT_UTF8_H */
