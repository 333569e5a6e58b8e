/*
 * moat_base64.h - standard base64 with padding (RFC 4648 section 4), the
 * one copy: file contents in Piston requests, audit packets, moat-audit.
 *
 * The arithmetic is OpenSSL's (EVP_EncodeBlock / EVP_DecodeBlock); this is
 * only a strict wrapper.  EVP_DecodeBlock alone is lenient: it skips
 * leading and trailing whitespace, takes '=' in the middle of the text and
 * ignores stray low bits before the padding.  moat_base64_decode accepts
 * exactly the texts moat_base64_encode writes (one text per byte string):
 * a length that is a multiple of 4, the 64 letters, one or two '=' only at
 * the end, unused bits zero, no whitespace or line breaks.
 */
#ifndef MOAT_BASE64_H
#define MOAT_BASE64_H

#include <stddef.h>

/* Characters moat_base64_encode writes for n bytes (without the NUL). */
#define MOAT_BASE64_ENCODED_LEN(n) (((n) + 2) / 3 * 4)
/* Bytes moat_base64_decode may write for a text of n characters. */
#define MOAT_BASE64_DECODED_MAX(n) ((n) / 4 * 3)

/* Writes MOAT_BASE64_ENCODED_LEN(len) characters and a NUL to out; returns
 * the number of characters. */
size_t moat_base64_encode(const void *in, size_t len, char *out);

/* Decodes the canonical text in[0..len) into out (room for
 * MOAT_BASE64_DECODED_MAX(len) bytes: padding is decoded, then dropped):
 * 0 with *outlen set, or -1 when the text is not canonical base64. */
int moat_base64_decode(const char *in, size_t len, void *out, size_t *outlen);

#endif /* MOAT_BASE64_H */
