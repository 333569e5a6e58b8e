/*
 * submission_token.h - a submission's token (submission_token.c).
 */
#ifndef GW_SUBMISSION_TOKEN_H
#define GW_SUBMISSION_TOKEN_H

#include <stddef.h>
#include <stdint.h>

#define JUDGE0_TOKEN_LEN 36 /* a random (version 4) UUID, 8-4-4-4-12 hex digits */

/* A random UUID (version 4) from 16 random bytes. */
void judge0_token(const uint8_t rnd[16], char out[JUDGE0_TOKEN_LEN + 1]);
/* Is s[0..len) a token's shape (lower-case hex UUID)? */
int judge0_token_valid(const char *s, size_t len);

#endif /* GW_SUBMISSION_TOKEN_H */
