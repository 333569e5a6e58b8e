/*
 * audit_crypto.c - see audit_crypto.h.
 */
#include "audit_crypto.h"

#include <stdio.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/params.h>

int audit_unhex(const char *in, size_t hexlen, uint8_t *out, size_t outlen)
{
    if (hexlen != 2 * outlen)
        return -1;
    return moat_hex_decode(in, hexlen, out, MOAT_HEX_LOWER);
}

/* SHA-256 fetched once, and one context reused: the writer and the verifier
 * are single-threaded.  wipe: the data is key material; free the context's
 * state with it rather than leave it for the next call. */
static void sha256(const void *data, size_t len, uint8_t out[AUDIT_HASH_LEN], int wipe)
{
    static EVP_MD *md;
    static EVP_MD_CTX *ctx;
    unsigned int n = AUDIT_HASH_LEN;
    if (md == NULL)
        md = EVP_MD_fetch(NULL, "SHA256", NULL);
    if (ctx == NULL)
        ctx = EVP_MD_CTX_new();
    int ok = md != NULL && ctx != NULL && EVP_DigestInit_ex2(ctx, md, NULL) == 1 && EVP_DigestUpdate(ctx, data, len) == 1 &&
             EVP_DigestFinal_ex(ctx, out, &n) == 1;
    if (ctx != NULL && (wipe || !ok))
        EVP_MD_CTX_reset(ctx);
    if (!ok)
        EVP_Digest(data, len, out, &n, EVP_sha256(), NULL);
}

void audit_sha256(const void *data, size_t len, uint8_t out[AUDIT_HASH_LEN])
{
    sha256(data, len, out, 0);
}

static EVP_MAC *hmac_alg(void)
{
    static EVP_MAC *mac; /* fetched once: the writer and verifier are single-threaded */
    if (mac == NULL)
        mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    return mac;
}

/* A new context keyed with key for HMAC-SHA256, or NULL. */
static EVP_MAC_CTX *hmac_keyed(const uint8_t key[AUDIT_KEY_LEN])
{
    EVP_MAC *mac = hmac_alg();
    EVP_MAC_CTX *ctx = mac ? EVP_MAC_CTX_new(mac) : NULL;
    char digest[] = "SHA256";
    OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0), OSSL_PARAM_construct_end()};
    if (ctx != NULL && EVP_MAC_init(ctx, key, AUDIT_KEY_LEN, params) != 1) {
        EVP_MAC_CTX_free(ctx);
        ctx = NULL;
    }
    return ctx;
}

/* One message on a keyed context (EVP_MAC_init has just been called). */
static int hmac_message(EVP_MAC_CTX *ctx, const void *data, size_t len, uint8_t out[AUDIT_HASH_LEN])
{
    size_t outl = 0;
    return EVP_MAC_update(ctx, data, len) == 1 && EVP_MAC_final(ctx, out, &outl, AUDIT_HASH_LEN) == 1 && outl == AUDIT_HASH_LEN
               ? 0
               : -1;
}

int audit_hmac(const uint8_t key[AUDIT_KEY_LEN], const void *data, size_t len, uint8_t out[AUDIT_HASH_LEN])
{
    EVP_MAC_CTX *ctx = hmac_keyed(key);
    int rc = ctx != NULL ? hmac_message(ctx, data, len, out) : -1;
    EVP_MAC_CTX_free(ctx);
    return rc;
}

int audit_mac_set_key(struct audit_mac *m, const uint8_t key[AUDIT_KEY_LEN])
{
    audit_mac_free(m);
    m->ctx = hmac_keyed(key);
    return m->ctx != NULL ? 0 : -1;
}

int audit_mac_compute(struct audit_mac *m, const void *data, size_t len, uint8_t out[AUDIT_HASH_LEN])
{
    /* no key: HMAC keeps the one it was given (OpenSSL 3) */
    if (m->ctx == NULL || EVP_MAC_init(m->ctx, NULL, 0, NULL) != 1)
        return -1;
    return hmac_message(m->ctx, data, len, out);
}

void audit_mac_free(struct audit_mac *m)
{
    EVP_MAC_CTX_free(m->ctx); /* cleanses the key and the pads derived from it */
    m->ctx = NULL;
}

void audit_ratchet(uint8_t key[AUDIT_KEY_LEN])
{
    static const char label[] = "moat-audit ratchet v1";
    uint8_t buf[sizeof(label) - 1 + AUDIT_KEY_LEN];
    memcpy(buf, label, sizeof(label) - 1);
    memcpy(buf + sizeof(label) - 1, key, AUDIT_KEY_LEN);
    sha256(buf, sizeof(buf), key, 1);
    OPENSSL_cleanse(buf, sizeof(buf));
}

int audit_checkpoint_text(char *buf, size_t size, uint64_t head_seq, const char *head_hex)
{
    int n = snprintf(buf, size, "moat-audit checkpoint v1 %llu %s", (unsigned long long)head_seq, head_hex);
    return n > 0 && (size_t)n < size ? 0 : -1;
}

int audit_verifier_text(char *buf, size_t size, const uint8_t k0[AUDIT_KEY_LEN], const uint8_t pub[AUDIT_PUB_LEN])
{
    char k0hex[AUDIT_HEX_LEN + 1], pubhex[2 * AUDIT_PUB_LEN + 1];
    moat_hex_encode(k0, AUDIT_KEY_LEN, k0hex);
    moat_hex_encode(pub, AUDIT_PUB_LEN, pubhex);
    int n = snprintf(buf, size, "moat-audit verifier v1\nk0 %s\npublic %s\n", k0hex, pubhex);
    OPENSSL_cleanse(k0hex, sizeof(k0hex));
    return n > 0 && (size_t)n < size ? n : -1;
}

void audit_verifier_fingerprint(const uint8_t k0[AUDIT_KEY_LEN], const uint8_t pub[AUDIT_PUB_LEN],
                                char out[AUDIT_FINGERPRINT_LEN + 1])
{
    char text[256];
    uint8_t h[AUDIT_HASH_LEN];
    int n = audit_verifier_text(text, sizeof(text), k0, pub);
    sha256(text, n > 0 ? (size_t)n : 0, h, 1);
    OPENSSL_cleanse(text, sizeof(text));
    memcpy(out, "SHA256:", 7);
    moat_hex_encode(h, sizeof(h), out + 7);
}

int audit_sign(EVP_PKEY *key, const char *text, uint8_t sig[AUDIT_SIG_LEN])
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    size_t len = AUDIT_SIG_LEN;
    int ok = ctx && EVP_DigestSignInit(ctx, NULL, NULL, NULL, key) == 1 &&
             EVP_DigestSign(ctx, sig, &len, (const unsigned char *)text, strlen(text)) == 1 && len == AUDIT_SIG_LEN;
    EVP_MD_CTX_free(ctx);
    return ok ? 0 : -1;
}

int audit_verify_sig(const uint8_t pub[AUDIT_PUB_LEN], const char *text, const uint8_t sig[AUDIT_SIG_LEN])
{
    EVP_PKEY *key = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, pub, AUDIT_PUB_LEN);
    EVP_MD_CTX *ctx = key ? EVP_MD_CTX_new() : NULL;
    int ok = ctx && EVP_DigestVerifyInit(ctx, NULL, NULL, NULL, key) == 1 &&
             EVP_DigestVerify(ctx, sig, AUDIT_SIG_LEN, (const unsigned char *)text, strlen(text)) == 1;
    EVP_MD_CTX_free(ctx);
    EVP_PKEY_free(key);
    return ok ? 0 : -1;
}
