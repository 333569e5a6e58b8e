/*
 * jwt_auth.h - JWT bearer-token verification for the gateway.
 *
 * libjwt 1.10.2 verifies with whatever algorithm the token's header names and
 * silently skips verification when given a NULL key.  This module therefore
 * does everything security-relevant itself and uses libjwt only as the
 * signature checker of last resort, with a key taken from configuration:
 *
 *   1. length cap (JWT_MAX_TOKEN_LEN), exactly three non-empty segments of
 *      strict, unpadded, canonical base64url (RFC 7515 section 2);
 *   2. header decoded here (jansson, JSON_REJECT_DUPLICATES): "alg" a string
 *      naming HS256, RS256 or ES256 ("none" and everything else rejected);
 *      "typ" absent or "JWT"; "kid" required, 1..64 of [A-Za-z0-9._-] without
 *      "/" or ".."; "jku", "x5u", "jwk", "x5c" and "crit" rejected (keys come
 *      only from configuration);
 *   3. payload decoded here the same way; its "iss" selects exactly one
 *      configured issuer; header "alg" must equal that issuer's pinned
 *      algorithm; "kid" must name one of *that issuer's* keys;
 *   4. guard: a NULL or empty key aborts verification (G3);
 *   5. HS256: HMAC recomputed here and compared in constant time (libjwt uses
 *      strcmp); then jwt_decode() with the configured key for every
 *      algorithm, and jwt_get_alg() must again equal the pinned algorithm;
 *   6. claims from our own strict parse of the signed payload: "exp" and
 *      "iat" required integers, "nbf" an optional one, with the issuer's
 *      explicit leeway (<= JWT_MAX_LEEWAY_S); the lifetime capped: exp - iat
 *      and exp - now (no leeway) at most the issuer's max_lifetime_s
 *      (<= JWT_MAX_LIFETIME_S), so no token lasts for ever;
 *      "aud" a string equal to the configured audience, or an array of
 *      strings containing it; the tenant claim a string of 1..64
 *      [A-Za-z0-9._-] (not "." or "..") naming one of the tenants the issuer
 *      is bound to (an issuer cannot speak for any other tenant); the scopes
 *      claim (below); "sub" optional, a string of at most 128 printable
 *      characters.
 *
 * Scopes: the issuer's scopes_claim (default "scope") is either a string of
 * scope names separated by single spaces (RFC 6749 section 3.3, RFC 8693) or
 * an array of such names (at most JWT_MAX_SCOPES), each 1 or more of
 * RFC 6749's scope characters, JWT_MAX_SCOPE_LEN bytes in all.  Any other
 * shape is refused.  Fail closed: a token without the claim (or with an
 * empty one) carries no scopes, so it authenticates but may call nothing.
 * jwt_identity.scope holds the names; the gateway keeps those that are
 * endpoints (policy's table) and ignores the rest, and policy_authorize()
 * intersects them with the tenant's endpoints, so a token is never worth
 * more than its tenant.
 *
 * Every failure returns -1 with *why pointing at a static string that never
 * contains token bytes, so it is safe to log.
 */
#ifndef GW_JWT_AUTH_H
#define GW_JWT_AUTH_H

#include <stddef.h>
#include <time.h>

#define JWT_MAX_TOKEN_LEN    8192  /* bytes, whole compact token */
#define JWT_MAX_KID_LEN      64    /* key id: [A-Za-z0-9._-], no "/" or ".." */
#define JWT_MAX_TENANT_LEN   64    /* tenant: [A-Za-z0-9._-], not "." or ".." */
#define JWT_MAX_SUBJECT_LEN  128   /* "sub": printable, no control characters */
#define JWT_MAX_LEEWAY_S     300   /* upper bound on jwt_issuer.leeway_s */
#define JWT_MIN_HMAC_KEY_LEN 32    /* HS256 secrets: at least 256 bits */
#define JWT_MAX_KEY_LEN      16384 /* any key material (fits libjwt's int) */
#define JWT_MIN_RSA_BITS     2048
#define JWT_MAX_KEYS         64    /* keys per issuer */
#define JWT_MAX_AUD_ENTRIES  32    /* elements of an "aud" array */
#define JWT_MAX_TENANTS      256   /* tenants an issuer may name */
#define JWT_MAX_SCOPES       64    /* elements of a scopes array */
#define JWT_MAX_SCOPE_LEN    1024  /* the scope names, one space between */
#define JWT_MAX_LIFETIME_S   86400 /* upper bound on jwt_issuer.max_lifetime_s */
#define JWT_DEFAULT_LIFETIME 3600  /* max_lifetime_s when the configuration names none */

enum jwt_alg_pin { JWT_PIN_HS256 = 1, JWT_PIN_RS256, JWT_PIN_ES256 };

struct jwt_key {
    char *kid;               /* 1..64 of [A-Za-z0-9._-], no "/" or ".." */
    unsigned char *material; /* HS256: raw secret (>= 32 bytes); RS256/ES256: PEM "PUBLIC KEY" */
    size_t len;
};

struct jwt_issuer {
    char *name;              /* config name, for logs */
    char *iss;               /* required "iss" value (exact match) */
    char *aud;               /* required "aud" value (string claim, or present in an array claim) */
    enum jwt_alg_pin alg;    /* the only algorithm accepted from this issuer */
    struct jwt_key *keys;    /* the only keys accepted from this issuer, chosen by kid */
    size_t nkeys;            /* 1..JWT_MAX_KEYS */
    char *tenant_claim;      /* claim whose string value names the tenant, e.g. "tenant" */
    unsigned leeway_s;       /* explicit leeway for exp/nbf/iat, <= JWT_MAX_LEEWAY_S */
    char **tenants;          /* the only tenants this issuer may name */
    size_t ntenants;         /* 1..JWT_MAX_TENANTS */
    char *scopes_claim;      /* claim holding the token's scopes, e.g. "scope" */
    unsigned max_lifetime_s; /* exp - iat and exp - now at most this, 1..JWT_MAX_LIFETIME_S */
};

struct jwt_identity {
    char tenant[JWT_MAX_TENANT_LEN + 1];
    char subject[JWT_MAX_SUBJECT_LEN + 1]; /* "" when the token has no "sub" */
    char kid[JWT_MAX_KID_LEN + 1];
    char scope[JWT_MAX_SCOPE_LEN + 1]; /* scope names, one space between; "" when none */
    const struct jwt_issuer *issuer;   /* points into the issuers array passed in */
    long exp;
};

/*
 * Verify token[0..len) (need not be NUL-terminated) against the configured
 * issuers at time now.  Returns 0 and fills *out, or -1 with *out zeroed and
 * *why set to a static reason safe to log (never token bytes).  The issuers
 * must have passed jwt_issuers_check(); jwt_verify() re-checks the cheap
 * invariants (non-empty key, pinned alg, leeway bound) regardless.
 */
int jwt_verify(const struct jwt_issuer *issuers, size_t nissuers, const char *token, size_t len, time_t now,
               struct jwt_identity *out, const char **why);

/*
 * Config-time validation of one issuer: names non-empty, alg one of the pins,
 * leeway <= JWT_MAX_LEEWAY_S, max_lifetime_s 1..JWT_MAX_LIFETIME_S,
 * 1..JWT_MAX_TENANTS valid, distinct tenant names, a scopes claim name,
 * 1..JWT_MAX_KEYS keys with valid, distinct kids,
 * no NULL or empty key material (G3), HS256 secrets of 32..JWT_MAX_KEY_LEN
 * bytes that are not PEM text, RS256 keys an RSA "PUBLIC KEY" PEM of at least
 * 2048 bits, ES256 keys a P-256 EC "PUBLIC KEY" PEM.  0, or -1 with a
 * message in err (which names the issuer and kid, never key material).
 */
int jwt_issuer_check(const struct jwt_issuer *is, char *err, size_t errlen);

/* jwt_issuer_check() on each issuer, plus: at least one, and "iss" values distinct. */
int jwt_issuers_check(const struct jwt_issuer *issuers, size_t nissuers, char *err, size_t errlen);

/*
 * The libjwt step on its own, exported so tests can prove the defence in
 * depth: refuses a NULL/empty key (G3) without calling libjwt, calls
 * jwt_decode(token, key, keylen) and requires jwt_get_alg() == pin.
 * token must be NUL-terminated.  0 or -1 (*why set).
 */
int jwt_decode_pinned(const char *token, const unsigned char *key, size_t keylen, enum jwt_alg_pin pin, const char **why);

/* "HS256", "RS256", "ES256", or NULL for anything else. */
const char *jwt_pin_name(enum jwt_alg_pin pin);

#endif /* GW_JWT_AUTH_H */
