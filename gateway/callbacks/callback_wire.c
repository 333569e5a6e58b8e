/*
 * callback_wire.c - a callback request from a gateway worker to the
 * callback sender, on their SOCK_SEQPACKET socket (privsep.c).
 *
 * The socket keeps message boundaries, so one message is one packet:
 *
 *   u8  type            CB_MSG_CALLBACK
 *   u32 length, bytes   tenant   1..GW_MAX_TENANT_NAME, no NUL
 *   u32 length, bytes   token    JUDGE0_TOKEN_LEN, a token's shape
 *   u32 length, bytes   url      1..GW_CALLBACK_URL_MAX, no NUL
 *   u32 length, bytes   body     the rest of GW_CALLBACK_MESSAGE_MAX
 *
 * Lengths are big-endian.  The sender trusts nothing in it: the decoder
 * below is strict (smtpd's m_end habit: bytes left over are an error), and
 * the sender checks the URL against the tenant's rules again.
 *
 * The sender signs what it sends to a receiver (cb_signature): the
 * receiver recomputes HMAC-SHA256(secret, t + "." + body) with the
 * tenant's secret and compares in constant time (moat-api(7): Callbacks).
 */
#include "callback_wire.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/evp.h>

#include "moat_errf.h"
#include "moat_hex.h"

static int put_field(struct moat_buf *b, const void *data, size_t len)
{
    uint32_t be = htonl((uint32_t)len);

    return moat_buf_append(b, &be, sizeof(be)) != 0 || moat_buf_append(b, data, len) != 0 ? -1 : 0;
}

int cb_message_encode(struct moat_buf *b, const char *tenant, const char *token, const char *url, const void *body, size_t len)
{
    const uint8_t type = CB_MSG_CALLBACK;
    size_t tl = strlen(tenant), kl = strlen(token), ul = strlen(url);

    b->len = 0;
    if (tl == 0 || tl > GW_MAX_TENANT_NAME || kl != JUDGE0_TOKEN_LEN || ul == 0 || ul > GW_CALLBACK_URL_MAX ||
        len > GW_CALLBACK_MESSAGE_MAX - (1 + 16 + tl + kl + ul))
        return -1;
    if (moat_buf_reserve(b, 1 + 16 + tl + kl + ul + len) != 0 || moat_buf_append(b, &type, 1) != 0 ||
        put_field(b, tenant, tl) != 0 || put_field(b, token, kl) != 0 || put_field(b, url, ul) != 0 || put_field(b, body, len) != 0)
        return -1;
    return 0;
}

/* The next field: *data and *len, within max bytes; the cursor moves past it. */
static int get_field(const uint8_t **p, const uint8_t *end, size_t max, const uint8_t **data, size_t *len)
{
    uint32_t be;

    if ((size_t)(end - *p) < sizeof(be))
        return -1;
    memcpy(&be, *p, sizeof(be));
    *p += sizeof(be);
    *len = ntohl(be);
    if (*len > max || *len > (size_t)(end - *p))
        return -1;
    *data = *p;
    *p += *len;
    return 0;
}

/* A string field into out (size bytes with its NUL): 1..size-1 bytes, no NUL. */
static int get_string(const uint8_t **p, const uint8_t *end, char *out, size_t size)
{
    const uint8_t *d;
    size_t len;

    if (get_field(p, end, size - 1, &d, &len) != 0 || len == 0 || memchr(d, '\0', len) != NULL)
        return -1;
    memcpy(out, d, len);
    out[len] = '\0';
    return 0;
}

int cb_message_decode(const uint8_t *p, size_t n, struct cb_message *m, char *err, size_t errlen)
{
    const uint8_t *end = p + n;

    memset(m, 0, sizeof(*m));
    if (n > GW_CALLBACK_MESSAGE_MAX)
        return moat_errf(err, errlen, "message of %zu bytes is over %u", n, GW_CALLBACK_MESSAGE_MAX);
    if (n < 1 || p[0] != CB_MSG_CALLBACK)
        return moat_errf(err, errlen, "unknown message type");
    p++;
    if (get_string(&p, end, m->tenant, sizeof(m->tenant)) != 0)
        return moat_errf(err, errlen, "bad tenant field");
    if (get_string(&p, end, m->token, sizeof(m->token)) != 0 || !judge0_token_valid(m->token, strlen(m->token)))
        return moat_errf(err, errlen, "bad token field");
    if (get_string(&p, end, m->url, sizeof(m->url)) != 0)
        return moat_errf(err, errlen, "bad url field");
    if (get_field(&p, end, GW_CALLBACK_MESSAGE_MAX, &m->body, &m->body_len) != 0)
        return moat_errf(err, errlen, "bad body field");
    if (p != end)
        return moat_errf(err, errlen, "%zu bytes left over", (size_t)(end - p));
    return 0;
}

int cb_signature(const uint8_t *secret, size_t secret_len, long long t, const void *body, size_t len, char out[CB_SIGNATURE_MAX])
{
    EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    EVP_MAC_CTX *ctx = mac != NULL ? EVP_MAC_CTX_new(mac) : NULL;
    char digest[] = "SHA256", ts[24], hex[2 * 32 + 1];
    OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0), OSSL_PARAM_construct_end()};
    uint8_t md[32];
    size_t mdlen = 0;
    int n = snprintf(ts, sizeof(ts), "%lld.", t);
    int ok = ctx != NULL && n > 0 && (size_t)n < sizeof(ts) && EVP_MAC_init(ctx, secret, secret_len, params) == 1 &&
             EVP_MAC_update(ctx, (const uint8_t *)ts, (size_t)n) == 1 && EVP_MAC_update(ctx, body, len) == 1 &&
             EVP_MAC_final(ctx, md, &mdlen, sizeof(md)) == 1 && mdlen == sizeof(md);

    EVP_MAC_CTX_free(ctx);
    EVP_MAC_free(mac);
    if (!ok)
        return -1;
    moat_hex_encode(md, sizeof(md), hex);
    snprintf(out, CB_SIGNATURE_MAX, "t=%lld,v1=%s", t, hex);
    return 0;
}
