/*
 * audit_crypto.h - hashing, MACs, the key ratchet and checkpoint signatures
 * of the audit trail (OpenSSL 3), shared by the writer and the verifier.
 */
#ifndef MOAT_AUDIT_CRYPTO_H
#define MOAT_AUDIT_CRYPTO_H

#include <stddef.h>
#include <stdint.h>

#include <openssl/evp.h>

#include "moat_hex.h"

#define AUDIT_KEY_LEN  32
#define AUDIT_HASH_LEN 32
#define AUDIT_HEX_LEN  64
#define AUDIT_SIG_LEN  64
#define AUDIT_PUB_LEN  32

/* Hex is moat_hex.h's (moat_hex_encode writes lowercase).  A field of the
 * trail is exactly outlen bytes as 2 * outlen lowercase digits: 0 or -1. */
int audit_unhex(const char *in, size_t hexlen, uint8_t *out, size_t outlen);
void audit_sha256(const void *data, size_t len, uint8_t out[AUDIT_HASH_LEN]);
int audit_hmac(const uint8_t key[AUDIT_KEY_LEN], const void *data, size_t len, uint8_t out[AUDIT_HASH_LEN]);

/*
 * HMAC-SHA256 under one key, many times: keyed once (the writer does it when
 * its key is set, at open and at each ratchet), then only re-initialised per
 * message.  The same bytes as audit_hmac().  The context holds material
 * derived from the key: audit_mac_free() cleanses it, and must be called
 * when that key is erased.
 */
struct audit_mac {
    EVP_MAC_CTX *ctx; /* NULL: not keyed */
};
int audit_mac_set_key(struct audit_mac *m, const uint8_t key[AUDIT_KEY_LEN]); /* frees any old context first */
int audit_mac_compute(struct audit_mac *m, const void *data, size_t len, uint8_t out[AUDIT_HASH_LEN]);
void audit_mac_free(struct audit_mac *m);
/* K(i+1) = SHA-256("moat-audit ratchet v1" || K(i)), in place. */
void audit_ratchet(uint8_t key[AUDIT_KEY_LEN]);
/* The text a checkpoint signs: "moat-audit checkpoint v1 <seq> <head hex>". */
int audit_checkpoint_text(char *buf, size_t size, uint64_t head_seq, const char *head_hex);
/* verifier.key's text: "moat-audit verifier v1\nk0 <hex>\npublic <hex>\n".
 * Its length, or -1 when it does not fit. */
int audit_verifier_text(char *buf, size_t size, const uint8_t k0[AUDIT_KEY_LEN], const uint8_t pub[AUDIT_PUB_LEN]);
/* "SHA256:<64 hex>": SHA-256 of that text (what sha256sum says of a
 * verifier.key moat-audit init wrote).  Names the trust anchor without
 * giving K0 away. */
#define AUDIT_FINGERPRINT_LEN (7 + AUDIT_HEX_LEN)
void audit_verifier_fingerprint(const uint8_t k0[AUDIT_KEY_LEN], const uint8_t pub[AUDIT_PUB_LEN],
                                char out[AUDIT_FINGERPRINT_LEN + 1]);
int audit_sign(EVP_PKEY *key, const char *text, uint8_t sig[AUDIT_SIG_LEN]);
int audit_verify_sig(const uint8_t pub[AUDIT_PUB_LEN], const char *text, const uint8_t sig[AUDIT_SIG_LEN]);

#endif
