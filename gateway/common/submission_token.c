/*
 * submission_token.c - a submission's token: a random (version 4) UUID in
 * lower-case hex, the name a submission has wherever it goes (the Judge0
 * routes, the results store, the queue, a callback's message).
 */
#include "submission_token.h"

#include <stdio.h>
#include <string.h>

void judge0_token(const uint8_t rnd[16], char out[JUDGE0_TOKEN_LEN + 1])
{
    uint8_t b[16];

    memcpy(b, rnd, 16);
    b[6] = (uint8_t)((b[6] & 0x0f) | 0x40); /* version 4 */
    b[8] = (uint8_t)((b[8] & 0x3f) | 0x80); /* RFC 4122 variant */
    snprintf(out, JUDGE0_TOKEN_LEN + 1, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2],
             b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

int judge0_token_valid(const char *s, size_t len)
{
    if (len != JUDGE0_TOKEN_LEN)
        return 0;
    for (size_t i = 0; i < len; i++) {
        int dash = i == 8 || i == 13 || i == 18 || i == 23;
        if (dash ? s[i] != '-' : !((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    }
    return 1;
}
