/*
 * apikey.c - generate and check API key tokens (see apikey.h for the format).
 */
#include "apikey.h"

#include <pthread.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include "moat_hex.h"

#define APIKEY_ID_OFF       APIKEY_PREFIX_LEN
#define APIKEY_SECRET_OFF   (APIKEY_ID_OFF + APIKEY_ID_LEN + 1)
#define APIKEY_CHECKSUM_OFF (APIKEY_SECRET_OFF + APIKEY_SECRET_LEN + 1)

int apikey_valid_id(const char *s, size_t len)
{
    return s != NULL && len == APIKEY_ID_LEN && moat_hex_valid(s, len, MOAT_HEX_LOWER);
}

static EVP_MD *fetched_sha256;

static void fetch_sha256_once(void)
{
    fetched_sha256 = EVP_MD_fetch(NULL, "SHA256", NULL);
}

int apikey_digest_pieces(int (*next)(void *arg, const void **p, size_t *len), void *arg, uint8_t digest[APIKEY_DIGEST_LEN])
{
    /* one fetched SHA-256 and one context per thread: EVP_Digest with
     * EVP_sha256() looks the algorithm up and allocates a context each call */
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    static __thread EVP_MD_CTX *ctx;
    unsigned int outlen = 0;
    const void *p;
    size_t len;

    pthread_once(&once, fetch_sha256_once);
    if (fetched_sha256 == NULL || (ctx == NULL && (ctx = EVP_MD_CTX_new()) == NULL))
        return -1;
    if (EVP_DigestInit_ex2(ctx, fetched_sha256, NULL) != 1)
        return -1;
    while (next(arg, &p, &len))
        if (EVP_DigestUpdate(ctx, p, len) != 1)
            return -1;
    if (EVP_DigestFinal_ex(ctx, digest, &outlen) != 1 || outlen != APIKEY_DIGEST_LEN)
        return -1;
    return 0;
}

struct one_piece {
    const void *p;
    size_t len;
    int given;
};

static int next_one(void *arg, const void **p, size_t *len)
{
    struct one_piece *o = arg;

    if (o->given)
        return 0;
    o->given = 1;
    *p = o->p;
    *len = o->len;
    return 1;
}

int apikey_digest(const char *token, size_t len, uint8_t digest[APIKEY_DIGEST_LEN])
{
    struct one_piece o = {token, len, 0};

    return apikey_digest_pieces(next_one, &o, digest);
}

/* Checksum over token[0..APIKEY_CHECKSUM_OFF - 1) as 8 hex characters. */
static int apikey_checksum(const char *token, char out[APIKEY_CHECKSUM_LEN + 1])
{
    uint8_t digest[APIKEY_DIGEST_LEN];

    if (apikey_digest(token, APIKEY_CHECKSUM_OFF - 1, digest) != 0)
        return -1;
    moat_hex_encode(digest, APIKEY_CHECKSUM_LEN / 2, out);
    return 0;
}

int apikey_generate(const char *id, char token[APIKEY_TOKEN_LEN + 1], const char **why)
{
    uint8_t secret[APIKEY_SECRET_BYTES];
    uint8_t rid[APIKEY_ID_LEN / 2];
    char idbuf[APIKEY_ID_LEN + 1];
    char secret_hex[APIKEY_SECRET_LEN + 1];
    char sum[APIKEY_CHECKSUM_LEN + 1];

    if (id == NULL) {
        if (RAND_bytes(rid, sizeof(rid)) != 1) {
            *why = "RAND_bytes failed";
            return -1;
        }
        moat_hex_encode(rid, sizeof(rid), idbuf);
        id = idbuf;
    } else if (!apikey_valid_id(id, strlen(id))) {
        *why = "key id must be 12 lowercase hex characters";
        return -1;
    }
    if (RAND_bytes(secret, sizeof(secret)) != 1) {
        *why = "RAND_bytes failed";
        return -1;
    }
    moat_hex_encode(secret, sizeof(secret), secret_hex);
    OPENSSL_cleanse(secret, sizeof(secret));

    memcpy(token, APIKEY_PREFIX, APIKEY_PREFIX_LEN);
    memcpy(token + APIKEY_ID_OFF, id, APIKEY_ID_LEN);
    token[APIKEY_SECRET_OFF - 1] = '_';
    memcpy(token + APIKEY_SECRET_OFF, secret_hex, APIKEY_SECRET_LEN);
    OPENSSL_cleanse(secret_hex, sizeof(secret_hex));
    token[APIKEY_CHECKSUM_OFF - 1] = '_';
    token[APIKEY_TOKEN_LEN] = '\0';
    if (apikey_checksum(token, sum) != 0) {
        OPENSSL_cleanse(token, APIKEY_TOKEN_LEN + 1);
        *why = "SHA-256 failed";
        return -1;
    }
    memcpy(token + APIKEY_CHECKSUM_OFF, sum, APIKEY_CHECKSUM_LEN);
    return 0;
}

int apikey_parse(const char *token, size_t len, char id[APIKEY_ID_LEN + 1], const char **why)
{
    char sum[APIKEY_CHECKSUM_LEN + 1];

    if (token == NULL || len != APIKEY_TOKEN_LEN) {
        *why = "wrong token length";
        return -1;
    }
    if (memcmp(token, APIKEY_PREFIX, APIKEY_PREFIX_LEN) != 0) {
        *why = "wrong token prefix";
        return -1;
    }
    if (token[APIKEY_SECRET_OFF - 1] != '_' || token[APIKEY_CHECKSUM_OFF - 1] != '_') {
        *why = "malformed token";
        return -1;
    }
    if (!moat_hex_valid(token + APIKEY_ID_OFF, APIKEY_ID_LEN, MOAT_HEX_LOWER) ||
        !moat_hex_valid(token + APIKEY_SECRET_OFF, APIKEY_SECRET_LEN, MOAT_HEX_LOWER) ||
        !moat_hex_valid(token + APIKEY_CHECKSUM_OFF, APIKEY_CHECKSUM_LEN, MOAT_HEX_LOWER)) {
        *why = "token is not lowercase hex";
        return -1;
    }
    if (apikey_checksum(token, sum) != 0) {
        *why = "SHA-256 failed";
        return -1;
    }
    if (memcmp(sum, token + APIKEY_CHECKSUM_OFF, APIKEY_CHECKSUM_LEN) != 0) {
        *why = "bad token checksum";
        return -1;
    }
    memcpy(id, token + APIKEY_ID_OFF, APIKEY_ID_LEN);
    id[APIKEY_ID_LEN] = '\0';
    return 0;
}

int apikey_digest_equal(const uint8_t a[APIKEY_DIGEST_LEN], const uint8_t b[APIKEY_DIGEST_LEN])
{
    return CRYPTO_memcmp(a, b, APIKEY_DIGEST_LEN) == 0;
}
