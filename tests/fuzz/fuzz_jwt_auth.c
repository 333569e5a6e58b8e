/*
 * fuzz_jwt_auth.c - libFuzzer target for jwt_verify() (F2, "JWT wrapper").
 *
 * Arbitrary bytes are offered as a token to a fixed set of three issuers
 * (HS256 with a fixed secret, RS256 and ES256 with keys generated once per
 * process) at a fixed time.  The harness aborts if:
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
#include "jwt_auth.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jwt.h>
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#define FUZZ_NOW ((time_t)1700000000)

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

static unsigned char fuzz_hs_secret1[] = "fuzz-hs256-secret-one-0123456789abcdef";
static unsigned char fuzz_hs_secret2[] = "fuzz-hs256-secret-two-0123456789abcdef";
static char fuzz_kid_hs1[] = "hs-1", fuzz_kid_hs2[] = "hs-2", fuzz_kid_rs[] = "rs-1", fuzz_kid_es[] = "es-1";
static char fuzz_name_hs[] = "fuzz-hs", fuzz_name_rs[] = "fuzz-rs", fuzz_name_es[] = "fuzz-es";
static char fuzz_iss_hs[] = "https://hs.fuzz.moat", fuzz_iss_rs[] = "https://rs.fuzz.moat", fuzz_iss_es[] = "https://es.fuzz.moat";
static char fuzz_aud[] = "moat", fuzz_tenant_claim[] = "tenant", fuzz_scopes_claim[] = "scope";
static char fuzz_tenant_acme[] = "acme";
static char *fuzz_tenants[] = {fuzz_tenant_acme};

static struct jwt_key fuzz_hs_keys[2], fuzz_rs_keys[1], fuzz_es_keys[1];
static struct jwt_issuer fuzz_issuers[3];
/* Private halves, to sign the valid seeds. */
static char *fuzz_rs_priv, *fuzz_es_priv;
static size_t fuzz_rs_priv_len, fuzz_es_priv_len;

static char *fuzz_pem(EVP_PKEY *pk, int priv, size_t *len)
{
    BIO *b = BIO_new(BIO_s_mem());
    if (b == NULL)
        abort();
    int ok = priv ? PEM_write_bio_PrivateKey(b, pk, NULL, NULL, 0, NULL, NULL) : PEM_write_bio_PUBKEY(b, pk);
    if (ok != 1)
        abort();
    char *p = NULL;
    long n = BIO_get_mem_data(b, &p);
    if (n <= 0)
        abort();
    char *out = malloc((size_t)n + 1);
    if (out == NULL)
        abort();
    memcpy(out, p, (size_t)n);
    out[n] = '\0';
    BIO_free(b);
    *len = (size_t)n;
    return out;
}

/* Every issuer names tenant acme only, with a lifetime cap the seeds (iat - 10 .. + 3600) stay under. */
static void fuzz_issuer(struct jwt_issuer *is, char *name, char *iss, enum jwt_alg_pin alg, struct jwt_key *keys, size_t nkeys,
                        unsigned leeway_s)
{
    *is = (struct jwt_issuer){.name = name,
                              .iss = iss,
                              .aud = fuzz_aud,
                              .alg = alg,
                              .keys = keys,
                              .nkeys = nkeys,
                              .tenant_claim = fuzz_tenant_claim,
                              .leeway_s = leeway_s,
                              .tenants = fuzz_tenants,
                              .ntenants = 1,
                              .scopes_claim = fuzz_scopes_claim,
                              .max_lifetime_s = 7200};
}

static void fuzz_init(void)
{
    static int done;
    if (done)
        return;
    done = 1;

    EVP_PKEY *rsa = EVP_PKEY_Q_keygen(NULL, NULL, "RSA", (size_t)2048);
    EVP_PKEY *ec = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    if (rsa == NULL || ec == NULL)
        abort();
    size_t n = 0;
    fuzz_rs_keys[0] = (struct jwt_key){fuzz_kid_rs, (unsigned char *)fuzz_pem(rsa, 0, &n), 0};
    fuzz_rs_keys[0].len = n;
    fuzz_es_keys[0] = (struct jwt_key){fuzz_kid_es, (unsigned char *)fuzz_pem(ec, 0, &n), 0};
    fuzz_es_keys[0].len = n;
    fuzz_rs_priv = fuzz_pem(rsa, 1, &fuzz_rs_priv_len);
    fuzz_es_priv = fuzz_pem(ec, 1, &fuzz_es_priv_len);
    EVP_PKEY_free(rsa);
    EVP_PKEY_free(ec);

    fuzz_hs_keys[0] = (struct jwt_key){fuzz_kid_hs1, fuzz_hs_secret1, sizeof(fuzz_hs_secret1) - 1};
    fuzz_hs_keys[1] = (struct jwt_key){fuzz_kid_hs2, fuzz_hs_secret2, sizeof(fuzz_hs_secret2) - 1};
    fuzz_issuer(&fuzz_issuers[0], fuzz_name_hs, fuzz_iss_hs, JWT_PIN_HS256, fuzz_hs_keys, 2, 60);
    fuzz_issuer(&fuzz_issuers[1], fuzz_name_rs, fuzz_iss_rs, JWT_PIN_RS256, fuzz_rs_keys, 1, 60);
    fuzz_issuer(&fuzz_issuers[2], fuzz_name_es, fuzz_iss_es, JWT_PIN_ES256, fuzz_es_keys, 1, 0);

    char err[256];
    if (jwt_issuers_check(fuzz_issuers, 3, err, sizeof(err)) != 0) {
        fprintf(stderr, "fuzz issuer set invalid: %s\n", err);
        abort();
    }
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
    fuzz_init();
    struct jwt_identity id;
    const char *why = NULL;
    int rc = jwt_verify(fuzz_issuers, 3, (const char *)data, size, FUZZ_NOW, &id, &why);
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

    fuzz_init();
    return jwt_verify(fuzz_issuers, 3, (const char *)data, size, FUZZ_NOW, &id, &why) == 0;
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

    fuzz_init();
    for (int i = 0; i < 3; i++)
        snprintf(claims[i], sizeof(claims[i]), claims_fmt, isss[i], (long long)FUZZ_NOW + 3600, (long long)FUZZ_NOW - 10,
                 (long long)FUZZ_NOW - 10);
    valid[0] = sign_token(JWT_ALG_HS256, fuzz_hs_secret1, sizeof(fuzz_hs_secret1) - 1, fuzz_kid_hs1, claims[0]);
    valid[1] = sign_token(JWT_ALG_HS256, fuzz_hs_secret2, sizeof(fuzz_hs_secret2) - 1, fuzz_kid_hs2, claims[0]);
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
