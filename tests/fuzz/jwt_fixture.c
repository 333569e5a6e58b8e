/*
 * jwt_fixture.c - the issuer set of the JWT fuzz targets (jwt_fixture.h).
 */
#include "jwt_fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/bio.h>
#include <openssl/pem.h>

unsigned char fuzz_hs_secret1[] = "fuzz-hs256-secret-one-0123456789abcdef";
unsigned char fuzz_hs_secret2[] = "fuzz-hs256-secret-two-0123456789abcdef";
const size_t fuzz_hs_secret_len = sizeof(fuzz_hs_secret1) - 1;
char fuzz_kid_hs1[] = "hs-1", fuzz_kid_hs2[] = "hs-2", fuzz_kid_rs[] = "rs-1", fuzz_kid_es[] = "es-1";
char fuzz_iss_hs[] = "https://hs.fuzz.moat", fuzz_iss_rs[] = "https://rs.fuzz.moat", fuzz_iss_es[] = "https://es.fuzz.moat";
char fuzz_tenant_acme[] = "acme";

static char fuzz_name_hs[] = "fuzz-hs", fuzz_name_rs[] = "fuzz-rs", fuzz_name_es[] = "fuzz-es";
static char fuzz_aud[] = "moat", fuzz_tenant_claim[] = "tenant", fuzz_scopes_claim[] = "scope";
static char *fuzz_tenants[] = {fuzz_tenant_acme};
static struct jwt_key fuzz_hs_keys[2], fuzz_rs_keys[1], fuzz_es_keys[1];

struct jwt_issuer fuzz_issuers[FUZZ_ISSUERS];
char *fuzz_rs_priv, *fuzz_es_priv;
size_t fuzz_rs_priv_len, fuzz_es_priv_len;
EVP_PKEY *fuzz_rs_pkey, *fuzz_es_pkey;

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
                              .max_lifetime_s = FUZZ_LIFETIME};
}

void fuzz_jwt_init(void)
{
    static int done;
    if (done)
        return;
    done = 1;

    fuzz_rs_pkey = EVP_PKEY_Q_keygen(NULL, NULL, "RSA", (size_t)2048);
    fuzz_es_pkey = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    if (fuzz_rs_pkey == NULL || fuzz_es_pkey == NULL)
        abort();
    size_t n = 0;
    fuzz_rs_keys[0] = (struct jwt_key){fuzz_kid_rs, (unsigned char *)fuzz_pem(fuzz_rs_pkey, 0, &n), 0};
    fuzz_rs_keys[0].len = n;
    fuzz_es_keys[0] = (struct jwt_key){fuzz_kid_es, (unsigned char *)fuzz_pem(fuzz_es_pkey, 0, &n), 0};
    fuzz_es_keys[0].len = n;
    fuzz_rs_priv = fuzz_pem(fuzz_rs_pkey, 1, &fuzz_rs_priv_len);
    fuzz_es_priv = fuzz_pem(fuzz_es_pkey, 1, &fuzz_es_priv_len);

    fuzz_hs_keys[0] = (struct jwt_key){fuzz_kid_hs1, fuzz_hs_secret1, fuzz_hs_secret_len};
    fuzz_hs_keys[1] = (struct jwt_key){fuzz_kid_hs2, fuzz_hs_secret2, fuzz_hs_secret_len};
    fuzz_issuer(&fuzz_issuers[0], fuzz_name_hs, fuzz_iss_hs, JWT_PIN_HS256, fuzz_hs_keys, 2, 60);
    fuzz_issuer(&fuzz_issuers[1], fuzz_name_rs, fuzz_iss_rs, JWT_PIN_RS256, fuzz_rs_keys, 1, 60);
    fuzz_issuer(&fuzz_issuers[2], fuzz_name_es, fuzz_iss_es, JWT_PIN_ES256, fuzz_es_keys, 1, 0);

    char err[256];
    if (jwt_issuers_check(fuzz_issuers, FUZZ_ISSUERS, err, sizeof(err)) != 0) {
        fprintf(stderr, "fuzz issuer set invalid: %s\n", err);
        abort();
    }
}
