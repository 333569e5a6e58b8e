/*
 * base64.c - strict base64 over OpenSSL's EVP_EncodeBlock/EVP_DecodeBlock
 * (see moat_base64.h).
 *
 * Strictness by construction rather than by a second hand-written decoder:
 * a text is accepted when EVP_DecodeBlock decodes it and encoding the bytes
 * again gives back exactly the same text.  That refuses everything the
 * lenient decoder lets through (whitespace, inner '=', stray bits, "Q===")
 * with no alphabet table of our own.  The price is a second pass over the
 * text, paid on request decoding, not on any deny path.
 *
 * EVP_*Block take an int length: long inputs go in chunks (whole groups of
 * 3 bytes / 4 characters, so only the last chunk has padding).
 */
#include "moat_base64.h"

#include <stdint.h>
#include <string.h>

#include <openssl/evp.h>

#define ENC_CHUNK (3u * 256u * 1024u) /* bytes per EVP_EncodeBlock call */
#define DEC_CHUNK (4u * 256u * 1024u) /* characters per EVP_DecodeBlock call */
#define CMP_BYTES 48u                 /* re-encoded 48 bytes at a time (64 characters) */

size_t moat_base64_encode(const void *in, size_t len, char *out)
{
    const uint8_t *p = in;
    size_t o = 0;

    for (size_t i = 0; i < len; i += ENC_CHUNK) {
        size_t n = len - i < ENC_CHUNK ? len - i : ENC_CHUNK;
        int w = EVP_EncodeBlock((unsigned char *)out + o, p + i, (int)n);
        o += w > 0 ? (size_t)w : 0;
    }
    out[o] = '\0';
    return o;
}

/* 1 if encoding bytes[0..n) gives exactly text[0..len). */
static int encodes_to(const uint8_t *bytes, size_t n, const char *text, size_t len)
{
    unsigned char again[MOAT_BASE64_ENCODED_LEN(CMP_BYTES) + 1];

    if (MOAT_BASE64_ENCODED_LEN(n) != len)
        return 0;
    for (size_t i = 0; i < n; i += CMP_BYTES) {
        size_t k = n - i < CMP_BYTES ? n - i : CMP_BYTES;
        int w = EVP_EncodeBlock(again, bytes + i, (int)k);
        if (w < 0 || memcmp(again, text + i / 3 * 4, (size_t)w) != 0)
            return 0;
    }
    return 1;
}

int moat_base64_decode(const char *in, size_t len, void *out, size_t *outlen)
{
    uint8_t *p = out;
    size_t total = 0, pad = 0;

    if (len % 4 != 0)
        return -1;
    for (size_t i = 0; i < len; i += DEC_CHUNK) {
        size_t n = len - i < DEC_CHUNK ? len - i : DEC_CHUNK;
        int got = EVP_DecodeBlock(p + total, (const unsigned char *)in + i, (int)n);
        /* fewer bytes than groups: it trimmed whitespace */
        if (got < 0 || (size_t)got != n / 4 * 3)
            return -1;
        total += (size_t)got;
    }
    /* EVP_DecodeBlock decodes the padding as zero bytes */
    if (len > 0 && in[len - 1] == '=')
        pad = in[len - 2] == '=' ? 2 : 1;
    total -= pad;
    if (!encodes_to(p, total, in, len))
        return -1;
    *outlen = total;
    return 0;
}
