/*
 * apikey.h - the API key token format.
 *
 *   moat_<id>_<secret>_<checksum>
 *
 * id       12 lowercase hex: names the key in the tenant table (not secret)
 * secret   64 lowercase hex: 32 bytes from RAND_bytes
 * checksum  8 lowercase hex: the first 4 bytes of SHA-256 over everything
 *          before the last underscore, so typos and truncated tokens are
 *          rejected before any table lookup.
 *
 * The server stores only SHA-256 of the whole token and compares digests in
 * constant time.  The hex is moat_hex.h's (moat_hex_encode, MOAT_HEX_LOWER).
 */
#ifndef GW_APIKEY_H
#define GW_APIKEY_H

#include <stddef.h>
#include <stdint.h>

#define APIKEY_PREFIX       "moat_"
#define APIKEY_PREFIX_LEN   5
#define APIKEY_ID_LEN       12
#define APIKEY_SECRET_BYTES 32
#define APIKEY_SECRET_LEN   (2 * APIKEY_SECRET_BYTES)
#define APIKEY_CHECKSUM_LEN 8
#define APIKEY_TOKEN_LEN    (APIKEY_PREFIX_LEN + APIKEY_ID_LEN + 1 + APIKEY_SECRET_LEN + 1 + APIKEY_CHECKSUM_LEN)
#define APIKEY_DIGEST_LEN   32
#define APIKEY_DIGEST_HEX   (2 * APIKEY_DIGEST_LEN)

/* 1 if s[0..len) is exactly APIKEY_ID_LEN lowercase hex characters. */
int apikey_valid_id(const char *s, size_t len);

/*
 * Create a new token.  id may be NULL (random) or a valid key id.  token
 * receives APIKEY_TOKEN_LEN characters plus a terminator.  0 or -1 (*why set).
 */
int apikey_generate(const char *id, char token[APIKEY_TOKEN_LEN + 1], const char **why);

/*
 * Check the shape and checksum of token[0..len) without looking anything up.
 * On success copies the key id (terminated) into id and returns 0; otherwise
 * -1 with *why set to a static reason that never contains token bytes.
 */
int apikey_parse(const char *token, size_t len, char id[APIKEY_ID_LEN + 1], const char **why);

/* SHA-256 of token[0..len); 0 or -1. */
int apikey_digest(const char *token, size_t len, uint8_t digest[APIKEY_DIGEST_LEN]);

/* SHA-256 of pieces taken in order as one message, each hashed where it
 * lies (nothing is joined): next(arg, &p, &len) gives the next piece and
 * returns 1, or 0 after the last.  0 or -1. */
int apikey_digest_pieces(int (*next)(void *arg, const void **p, size_t *len), void *arg, uint8_t digest[APIKEY_DIGEST_LEN]);

/* Constant-time comparison of two digests: 1 when equal. */
int apikey_digest_equal(const uint8_t a[APIKEY_DIGEST_LEN], const uint8_t b[APIKEY_DIGEST_LEN]);

#endif /* GW_APIKEY_H */
