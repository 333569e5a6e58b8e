/*
 * fuzz_jwt_auth.c - libFuzzer target for jwt_verify() (F2, "JWT wrapper").
 *
 * Arbitrary bytes are offered as a token to a fixed set of three issuers
 * (HS256 with a fixed secret, RS256 and ES256 with keys generated once per
 * process: jwt_fixture.c) at a fixed time.  The harness aborts if:
 *   - libjwt's jwt_decode() is ever called with a NULL or empty key (G3;
 *     linked with -Wl,--wrap=jwt_decode);
 *   - a token is accepted whose identity is not well formed, names a
 *     tenant its issuer is not bound to, or outlives the lifetime cap;
 *   - a failure comes without a reason.
 *
 * Seeds: one valid token per key of the issuer set (signed with libjwt) and
 * a few malformed ones.  The oracle (accepts) lets the replay driver require
 * that the valid tokens verify and that none of their mutants, truncations
 * or splices does.
 *
 * Built as the real fuzzer with -DMOAT_FUZZ=ON, and always as part of
 * fuzz_jwt_replay (see replay.c).  Both link with -Wl,--wrap=jwt_decode.
 */
#include "fuzz_target.h"
#include "jwt_fixture.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jwt.h>

int __real_jwt_decode(jwt_t **jwt, const char *token, const unsigned char *key, int key_len);
int __wrap_jwt_decode(jwt_t **jwt, const char *token, const unsigned char *key, int key_len);

static unsigned long fuzz_decode_calls;

int __wrap_jwt_decode(jwt_t **jwt, const char *token, const unsigned char *key, int key_len)
{
    if (key == NULL || key_len <= 0) {
        fprintf(stderr, "G3 violated: jwt_decode called without a key\n");
        abort();
    }
    fuzz_decode_calls++;
    return __real_jwt_decode(jwt, token, key, key_len);
}

static int fuzz_bounded_name(const char *s, size_t cap)
{
    size_t n = strnlen(s, cap + 1);
    if (n == 0 || n > cap)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_jwt_init();
    struct jwt_identity id;
    const char *why = NULL;
    int rc = jwt_verify(fuzz_issuers, FUZZ_ISSUERS, (const char *)data, size, FUZZ_NOW, &id, &why);
    if (why == NULL)
        abort();
    if (rc == 0) {
        if (id.issuer != &fuzz_issuers[0] && id.issuer != &fuzz_issuers[1] && id.issuer != &fuzz_issuers[2])
            abort();
        if (!fuzz_bounded_name(id.tenant, JWT_MAX_TENANT_LEN) || !fuzz_bounded_name(id.kid, JWT_MAX_KID_LEN))
            abort();
        if (strnlen(id.subject, sizeof(id.subject)) >= sizeof(id.subject))
            abort();
        if (id.exp < (long)FUZZ_NOW - (long)id.issuer->leeway_s)
            abort();
        /* G24: a bound tenant, a capped lifetime */
        if (strcmp(id.tenant, fuzz_tenant_acme) != 0 ||
            id.exp > (long)FUZZ_NOW + (long)id.issuer->leeway_s + (long)id.issuer->max_lifetime_s)
            abort();
    } else if (rc != -1) {
        abort();
    }
    return 0;
}

/* ===========================================================================
 * Seeds and the oracle for the replay driver
 * ======================================================================== */

static char *sign_token(jwt_alg_t alg, const unsigned char *key, size_t keylen, const char *kid, const char *grants)
{
    jwt_t *jwt = NULL;
    if (jwt_new(&jwt) != 0 || jwt_add_header(jwt, "kid", kid) != 0 || jwt_add_grants_json(jwt, grants) != 0 ||
        jwt_set_alg(jwt, alg, key, (int)keylen) != 0) {
        fprintf(stderr, "fuzz_jwt_auth: cannot build a seed token\n");
        abort();
    }
    char *t = jwt_encode_str(jwt);
    jwt_free(jwt);
    if (t == NULL) {
        fprintf(stderr, "fuzz_jwt_auth: jwt_encode_str failed\n");
        abort();
    }
    return t;
}

static int accepts(const uint8_t *data, size_t size)
{
    struct jwt_identity id;
    const char *why = NULL;

    fuzz_jwt_init();
    return jwt_verify(fuzz_issuers, FUZZ_ISSUERS, (const char *)data, size, FUZZ_NOW, &id, &why) == 0;
}

static void make_seeds(fuzz_add_seed_fn *add)
{
    static const char claims_fmt[] = "{\"iss\":\"%s\",\"aud\":\"moat\",\"sub\":\"user-1\",\"tenant\":\"acme\","
                                     "\"scope\":\"execute runtimes\",\"exp\":%lld,\"nbf\":%lld,\"iat\":%lld}";
    static const char *const junk[] = {
        "",
        ".",
        "..",
        "...",
        "a.b.c",
        "eyJhbGciOiJub25lIiwidHlwIjoiSldUIiwia2lkIjoiaHMtMSJ9.e30.",
        "eyJhbGciOiJub25lIn0.e30.e30",
        "e30.e30.e30.e30",
    };
    const char *isss[3] = {fuzz_iss_hs, fuzz_iss_rs, fuzz_iss_es};
    char claims[3][512];
    char *valid[4];

    fuzz_jwt_init();
    for (int i = 0; i < 3; i++)
        snprintf(claims[i], sizeof(claims[i]), claims_fmt, isss[i], (long long)FUZZ_NOW + 3600, (long long)FUZZ_NOW - 10,
                 (long long)FUZZ_NOW - 10);
    valid[0] = sign_token(JWT_ALG_HS256, fuzz_hs_secret1, fuzz_hs_secret_len, fuzz_kid_hs1, claims[0]);
    valid[1] = sign_token(JWT_ALG_HS256, fuzz_hs_secret2, fuzz_hs_secret_len, fuzz_kid_hs2, claims[0]);
    valid[2] = sign_token(JWT_ALG_RS256, (const unsigned char *)fuzz_rs_priv, fuzz_rs_priv_len, fuzz_kid_rs, claims[1]);
    valid[3] = sign_token(JWT_ALG_ES256, (const unsigned char *)fuzz_es_priv, fuzz_es_priv_len, fuzz_kid_es, claims[2]);

    for (size_t j = 0; j < sizeof(junk) / sizeof(junk[0]); j++)
        add(junk[j], strlen(junk[j]), 0);
    for (int v = 0; v < 4; v++) {
        /* a valid token reaches libjwt: proves the G3 check (the --wrap) is linked in and live */
        unsigned long before = fuzz_decode_calls;
        if (!accepts((const uint8_t *)valid[v], strlen(valid[v])) || fuzz_decode_calls == before) {
            fprintf(stderr, "fuzz_jwt_auth: seed token %d does not verify through the wrapped jwt_decode\n", v);
            abort();
        }
        add(valid[v], strlen(valid[v]), FUZZ_SEED_AUTHENTIC);
        free(valid[v]);
    }
}

const struct fuzz_target fuzz_target = {.make_seeds = make_seeds, .accepts = accepts};
