/*
 * moat_hex.h - hexadecimal, the one copy every moat program uses: key ids
 * and digests (gateway/auth/apikey.c), request ids, audit MACs and hashes.
 *
 * moat_hex_encode writes lowercase.  Decoding is strict: an even number of
 * digits from the chosen alphabet, nothing else (no "0x", no spaces).
 * MOAT_HEX_LOWER accepts only what moat_hex_encode writes (the canonical
 * form: one text per value, so texts can be compared as strings);
 * MOAT_HEX_ANY_CASE also accepts A-F (client input, JSON \uXXXX escapes).
 */
#ifndef MOAT_HEX_H
#define MOAT_HEX_H

#include <stddef.h>

#define MOAT_HEX_LOWER    0u /* 0-9 a-f only */
#define MOAT_HEX_ANY_CASE 1u /* 0-9 a-f A-F */

/* Writes 2 * len lowercase digits and a NUL to out (2 * len + 1 bytes). */
void moat_hex_encode(const void *in, size_t len, char *out);

/* Decodes in[0..inlen) into out (inlen / 2 bytes): 0, or -1 when inlen is
 * odd or a character is not a digit of the flags' alphabet (out is then
 * untouched). */
int moat_hex_decode(const char *in, size_t inlen, void *out, unsigned flags);

/* 1 if s[0..len) holds only digits of the flags' alphabet (any length). */
int moat_hex_valid(const char *s, size_t len, unsigned flags);

/* The value (0-15) of one digit, or -1. */
int moat_hex_digit(int c, unsigned flags);

#endif /* MOAT_HEX_H */
