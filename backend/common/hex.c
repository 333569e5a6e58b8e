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

int moat_hex_digit(int c, unsigned flags)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if ((flags & MOAT_HEX_ANY_CASE) && c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int moat_hex_valid(const char *s, size_t len, unsigned flags)
{
    for (size_t i = 0; i < len; i++)
        if (moat_hex_digit((unsigned char)s[i], flags) < 0)
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
        p[i] =
            (uint8_t)(moat_hex_digit((unsigned char)in[2 * i], flags) << 4 | moat_hex_digit((unsigned char)in[2 * i + 1], flags));
    return 0;
}
