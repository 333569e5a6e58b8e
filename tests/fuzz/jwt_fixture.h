/*
 * jwt_fixture.h - the issuer set both JWT fuzz targets verify against
 * (fuzz_jwt_auth.c, fuzz_jwt_struct.c), built once per process.
 *
 * Three issuers, each bound to tenant "acme" only, with a lifetime cap of
 * 7200 s: HS256 (keys hs-1 and hs-2, leeway 60 s), RS256 (key rs-1, a
 * 2048-bit key generated here, leeway 60 s) and ES256 (key es-1, P-256,
 * leeway 0).  The private halves are kept, to sign tokens with.
 */
#ifndef MOAT_FUZZ_JWT_FIXTURE_H
#define MOAT_FUZZ_JWT_FIXTURE_H

#include <stddef.h>
#include <time.h>

#include <openssl/evp.h>

#include "auth/jwt_auth.h"

#define FUZZ_NOW      ((time_t)1700000000)
#define FUZZ_ISSUERS  3
#define FUZZ_LIFETIME 7200

extern unsigned char fuzz_hs_secret1[], fuzz_hs_secret2[];
extern const size_t fuzz_hs_secret_len;
extern char fuzz_kid_hs1[], fuzz_kid_hs2[], fuzz_kid_rs[], fuzz_kid_es[];
extern char fuzz_iss_hs[], fuzz_iss_rs[], fuzz_iss_es[];
extern char fuzz_tenant_acme[];

/* issuers[0] HS256, [1] RS256, [2] ES256 */
extern struct jwt_issuer fuzz_issuers[FUZZ_ISSUERS];
/* The private halves, as PEM (for libjwt) and as keys (for OpenSSL). */
extern char *fuzz_rs_priv, *fuzz_es_priv;
extern size_t fuzz_rs_priv_len, fuzz_es_priv_len;
extern EVP_PKEY *fuzz_rs_pkey, *fuzz_es_pkey;

/* Builds all of the above the first time; aborts if it cannot. */
void fuzz_jwt_init(void);

#endif
