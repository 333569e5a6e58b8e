/*
 * callback_wire.h - the one message a gateway worker sends the callback
 * sender: "call back this submission's result".  See callback_wire.c.
 */
#ifndef GW_CALLBACK_WIRE_H
#define GW_CALLBACK_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "common/gw_limits.h"
#include "common/submission_token.h"
#include "moat_buf.h"

#define CB_MSG_CALLBACK 1 /* the only type */

/* A decoded message: the strings copied and NUL-terminated, the body
 * pointing into the buffer it was decoded from. */
struct cb_message {
    char tenant[GW_MAX_TENANT_NAME + 1];
    char token[JUDGE0_TOKEN_LEN + 1];
    char url[GW_CALLBACK_URL_MAX + 1];
    const uint8_t *body;
    size_t body_len;
};

/* Append the message to b (emptied first).  0, or -1: a field is out of
 * its bounds (the whole message over GW_CALLBACK_MESSAGE_MAX included) or
 * out of memory. */
int cb_message_encode(struct moat_buf *b, const char *tenant, const char *token, const char *url, const void *body, size_t len);

/* Decode p[0..n) strictly: the type, each field's length within its bound,
 * no NUL in the strings, a token's shape, nothing left over.  0, or -1 with
 * the reason in err. */
int cb_message_decode(const uint8_t *p, size_t n, struct cb_message *m, char *err, size_t errlen);

/* ---- the sender to the receiver: X-Moat-Signature ---------------------- */

#define CB_SIGNATURE_HEADER "X-Moat-Signature"
#define CB_SIGNATURE_MAX    96 /* "t=<unix time>,v1=<64 hex digits>" and its NUL */

/* The header's value for body sent at unix time t: "t=T,v1=HEX" with HEX
 * the HMAC-SHA256 under secret of "T." followed by the body (Stripe's
 * scheme: the receiver checks the MAC and that T is recent).  0, or -1. */
int cb_signature(const uint8_t *secret, size_t secret_len, long long t, const void *body, size_t len, char out[CB_SIGNATURE_MAX]);

#endif /* GW_CALLBACK_WIRE_H */
