/*
 * hex.c - lowercase hex encoding and strict decoding (see moat_hex.h).
 */
#include "moat_hex.h"

#include <stdint.h>

void moat_hex_encode(const void *in, size_t len, char *out)
{
    static const char digits[] = "0123456789abcdef";
    const uint8_t *p = in;

    for (size_t i = 0; i < len; i++) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 0xf];
    }
    out[2 * len] = '\0';
}

/* A digit's value + 1 by table (0: not a digit; past 16: upper case,
 * a digit only with MOAT_HEX_ANY_CASE).  The audit verifier decodes two
 * 64-digit fields per record, and the branches of a compare chain on
 * random digits were a quarter of its time. */
#define D10(b) b, b + 1, b + 2, b + 3, b + 4, b + 5, b + 6, b + 7, b + 8, b + 9
#define D6(b)  b, b + 1, b + 2, b + 3, b + 4, b + 5
static const unsigned char values[256] = {['0'] = D10(1), ['A'] = D6(17 + 10), ['a'] = D6(11)};

static inline int digit(int c, unsigned flags)
{
    int v = c >= 0 && c <= 0xff ? values[c] : 0;
    if (v > 16)
        return (flags & MOAT_HEX_ANY_CASE) ? v - 17 : -1;
    return v - 1;
}

int moat_hex_digit(int c, unsigned flags)
{
    return digit(c, flags);
}

int moat_hex_valid(const char *s, size_t len, unsigned flags)
{
    for (size_t i = 0; i < len; i++)
        if (digit((unsigned char)s[i], flags) < 0)
            return 0;
    return 1;
}

int moat_hex_decode(const char *in, size_t inlen, void *out, unsigned flags)
{
    uint8_t *p = out;

    /* checked whole first: a refused text leaves out as it was */
    if (inlen % 2 != 0 || !moat_hex_valid(in, inlen, flags))
        return -1;
    for (size_t i = 0; i < inlen / 2; i++)
        p[i] = (uint8_t)(digit((unsigned char)in[2 * i], flags) << 4 | digit((unsigned char)in[2 * i + 1], flags));
    return 0;
}
