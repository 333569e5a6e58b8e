/*
 * auth.c - API key authentication for the public routes.
 */
#include "auth.h"

#include <strings.h>

#include <openssl/crypto.h>

#define BEARER     "Bearer"
#define BEARER_LEN 6

const struct gw_key *auth_bearer(const struct gw_config *cfg, const char *value, size_t len, const char **why)
{
    char id[APIKEY_ID_LEN + 1];
    uint8_t digest[APIKEY_DIGEST_LEN];
    const struct gw_key *key;
    const char *token;
    size_t i;
    int equal;

    if (value == NULL) {
        *why = "no Authorization header";
        return NULL;
    }
    /* The scheme name is case-insensitive (RFC 9110 11.1); one or more spaces follow. */
    if (len <= BEARER_LEN || strncasecmp(value, BEARER, BEARER_LEN) != 0 || value[BEARER_LEN] != ' ') {
        *why = "not a Bearer credential";
        return NULL;
    }
    for (i = BEARER_LEN; i < len && value[i] == ' '; i++)
        ;
    token = value + i;
    len -= i;
    if (apikey_parse(token, len, id, why) != 0)
        return NULL;
    if ((key = gw_config_find_key(cfg, id)) == NULL) {
        *why = "unknown key id";
        return NULL;
    }
    if (apikey_digest(token, len, digest) != 0) {
        *why = "SHA-256 failed";
        return NULL;
    }
    equal = apikey_digest_equal(digest, key->sha256);
    OPENSSL_cleanse(digest, sizeof(digest));
    if (!equal) {
        *why = "wrong key secret";
        return NULL;
    }
    return key;
}
