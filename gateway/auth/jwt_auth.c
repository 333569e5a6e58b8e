/*
 * jwt_auth.c - JWT verification with pinned algorithms and configured keys.
 * See jwt_auth.h for the order of checks and why libjwt is not trusted alone.
 *
 * jwt_verify() runs those checks as a table of short steps (verify_steps[])
 * over one struct verification: split the token, decode and check the
 * header, decode the payload, pick the issuer by iss and the key by kid
 * within it, check the signature's shape, verify it (HS256 here, then libjwt
 * with a configured, non-empty key, the algorithm re-checked after decode),
 * check exp/nbf/iat, the lifetime and aud, pick the tenant (one the issuer
 * is bound to), the scopes and sub, and only then fill *out.
 * Each step returns NULL or a static reason; the first reason ends the run.
 */
#include "jwt_auth.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <jwt.h>
#include <openssl/bio.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>

#define HS256_MAC_LEN   32
#define ES256_SIG_LEN   64
#define MAX_SIG_LEN     1024 /* RSA-8192 signatures are 1024 bytes */
#define MAX_ISS_AUD_LEN 1024

const char *jwt_pin_name(enum jwt_alg_pin pin)
{
    switch (pin) {
    case JWT_PIN_HS256:
        return "HS256";
    case JWT_PIN_RS256:
        return "RS256";
    case JWT_PIN_ES256:
        return "ES256";
    }
    return NULL;
}

static int pin_valid(enum jwt_alg_pin pin)
{
    return jwt_pin_name(pin) != NULL;
}

static jwt_alg_t pin_to_libjwt(enum jwt_alg_pin pin)
{
    switch (pin) {
    case JWT_PIN_HS256:
        return JWT_ALG_HS256;
    case JWT_PIN_RS256:
        return JWT_ALG_RS256;
    case JWT_PIN_ES256:
        return JWT_ALG_ES256;
    }
    return JWT_ALG_INVAL;
}

/* ---- character classes ------------------------------------------------ */

static int is_b64url_char(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

static int is_name_char(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
}

/* kid: 1..64 of [A-Za-z0-9._-], and no ".." anywhere ("/" is not in the class). */
static int kid_valid(const char *s, size_t len)
{
    if (s == NULL || len == 0 || len > JWT_MAX_KID_LEN)
        return 0;
    for (size_t i = 0; i < len; i++) {
        if (!is_name_char((unsigned char)s[i]))
            return 0;
        if (s[i] == '.' && i + 1 < len && s[i + 1] == '.')
            return 0;
    }
    return 1;
}

/* tenant: 1..64 of [A-Za-z0-9._-], and not "." or "..". */
static int tenant_valid(const char *s, size_t len)
{
    if (len == 0 || len > JWT_MAX_TENANT_LEN)
        return 0;
    for (size_t i = 0; i < len; i++)
        if (!is_name_char((unsigned char)s[i]))
            return 0;
    if ((len == 1 && s[0] == '.') || (len == 2 && s[0] == '.' && s[1] == '.'))
        return 0;
    return 1;
}

/* sub: at most 128 bytes, no ASCII control characters (UTF-8 is allowed). */
static int subject_valid(const char *s, size_t len)
{
    if (len > JWT_MAX_SUBJECT_LEN)
        return 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f)
            return 0;
    }
    return 1;
}

/* RFC 6749 section 3.3: scope-token = 1*( %x21 / %x23-5B / %x5D-7E ). */
static int is_scope_char(unsigned char c)
{
    return c == 0x21 || (c >= 0x23 && c <= 0x5b) || (c >= 0x5d && c <= 0x7e);
}

/* A scope string: scope-tokens with exactly one space between, or "" (none). */
static int scope_string_valid(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if (s[i] == ' ') {
            if (i == 0 || i + 1 == len || s[i + 1] == ' ')
                return 0;
        } else if (!is_scope_char((unsigned char)s[i])) {
            return 0;
        }
    }
    return 1;
}

/* ---- strict base64url --------------------------------------------------- */

static int b64url_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '-')
        return 62;
    if (c == '_')
        return 63;
    return -1;
}

/*
 * Unpadded, canonical base64url: only the 64 characters, len % 4 != 1, and the
 * unused low bits of the last character zero (so each byte string has exactly
 * one encoding).  Returns a malloc'd buffer (one spare byte, NUL-terminated)
 * and its length, or NULL.
 */
static unsigned char *b64url_decode(const char *in, size_t len, size_t *outlen)
{
    if (len == 0 || len % 4 == 1)
        return NULL;
    unsigned char *out = malloc(len / 4 * 3 + 3);
    if (out == NULL)
        return NULL;
    size_t o = 0;
    uint32_t acc = 0;
    unsigned bits = 0;
    for (size_t i = 0; i < len; i++) {
        int v = b64url_value((unsigned char)in[i]);
        if (v < 0) {
            free(out);
            return NULL;
        }
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (unsigned char)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    if (acc != 0) { /* non-canonical: leftover bits must be zero */
        free(out);
        return NULL;
    }
    out[o] = '\0';
    *outlen = o;
    return out;
}

static json_t *b64url_json_object(const char *seg, size_t len)
{
    size_t n = 0;
    unsigned char *raw = b64url_decode(seg, len, &n);
    if (raw == NULL)
        return NULL;
    /* No NUL byte at all: jansson 2.14 skips one that follows a number or a
     * word ({"exp":1<NUL>} parses), so the bytes would not be the JSON read
     * (found by fuzz_jwt_struct; libjwt's NUL-terminated parse refused them). */
    if (memchr(raw, '\0', n) != NULL) {
        free(raw);
        return NULL;
    }
    json_error_t jerr;
    /* No JSON_ALLOW_NUL, no JSON_DECODE_ANY, no JSON_DISABLE_EOF_CHECK: strict. */
    json_t *j = json_loadb((const char *)raw, n, JSON_REJECT_DUPLICATES, &jerr);
    free(raw);
    if (j != NULL && !json_is_object(j)) {
        json_decref(j);
        return NULL;
    }
    return j;
}

/* ---- the libjwt step ---------------------------------------------------- */

int jwt_decode_pinned(const char *token, const unsigned char *key, size_t keylen, enum jwt_alg_pin pin, const char **why)
{
    static const char *dummy;
    if (why == NULL)
        why = &dummy;
    /* G3: libjwt 1.10 skips verification when the key is NULL or empty. */
    if (key == NULL || keylen == 0) {
        *why = "refusing to decode without a key";
        return -1;
    }
    if (keylen > JWT_MAX_KEY_LEN) {
        *why = "key too long";
        return -1;
    }
    if (token == NULL || !pin_valid(pin)) {
        *why = "bad decode arguments";
        return -1;
    }
    jwt_t *jwt = NULL;
    if (jwt_decode(&jwt, token, key, (int)keylen) != 0 || jwt == NULL) {
        *why = "signature verification failed";
        return -1;
    }
    jwt_alg_t got = jwt_get_alg(jwt);
    jwt_free(jwt);
    if (got != pin_to_libjwt(pin)) {
        *why = "algorithm after decode differs from pinned algorithm";
        return -1;
    }
    return 0;
}

/* ---- verification ------------------------------------------------------- */

static int hs256_check(const unsigned char *key, size_t keylen, const char *signing_input, size_t silen, const char *sig_b64,
                       size_t siglen)
{
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int maclen = 0;
    size_t n = 0;
    int ok = 0;
    unsigned char *sig = b64url_decode(sig_b64, siglen, &n);
    if (sig == NULL)
        return 0;
    if (n == HS256_MAC_LEN &&
        HMAC(EVP_sha256(), key, (int)keylen, (const unsigned char *)signing_input, silen, mac, &maclen) != NULL &&
        maclen == HS256_MAC_LEN)
        ok = CRYPTO_memcmp(mac, sig, HS256_MAC_LEN) == 0;
    OPENSSL_cleanse(mac, sizeof(mac));
    free(sig);
    return ok;
}

static int json_str_eq(const json_t *s, const char *want)
{
    size_t wl = strlen(want);
    return json_is_string(s) && json_string_length(s) == wl && memcmp(json_string_value(s), want, wl) == 0;
}

static int aud_matches(const json_t *aud, const char *want)
{
    if (json_is_string(aud))
        return json_str_eq(aud, want);
    if (!json_is_array(aud))
        return 0;
    size_t n = json_array_size(aud);
    if (n == 0 || n > JWT_MAX_AUD_ENTRIES)
        return 0;
    int found = 0;
    for (size_t i = 0; i < n; i++) {
        const json_t *e = json_array_get(aud, i);
        if (!json_is_string(e))
            return 0; /* malformed array: reject outright */
        if (json_str_eq(e, want))
            found = 1;
    }
    return found;
}

/* Optional integer claim: 1 absent, 0 present and integer (*v set), -1 present and not an integer. */
static int int_claim(const json_t *payload, const char *name, json_int_t *v)
{
    const json_t *c = json_object_get(payload, name);
    if (c == NULL)
        return 1;
    if (!json_is_integer(c))
        return -1;
    *v = json_integer_value(c);
    return 0;
}

static const char *check_header(const json_t *hdr, enum jwt_alg_pin *alg, const char **kid, size_t *kidlen)
{
    static const char *const forbidden[] = {"jku", "x5u", "jwk", "x5c", "crit"};
    for (size_t i = 0; i < sizeof(forbidden) / sizeof(forbidden[0]); i++)
        if (json_object_get(hdr, forbidden[i]) != NULL)
            return "forbidden header parameter (jku/x5u/jwk/x5c/crit)";

    const json_t *a = json_object_get(hdr, "alg");
    if (!json_is_string(a))
        return "alg missing or not a string";
    const char *as = json_string_value(a);
    size_t al = json_string_length(a);
    if (al == 4 && strncasecmp(as, "none", 4) == 0)
        return "alg none rejected";
    if (json_str_eq(a, "HS256"))
        *alg = JWT_PIN_HS256;
    else if (json_str_eq(a, "RS256"))
        *alg = JWT_PIN_RS256;
    else if (json_str_eq(a, "ES256"))
        *alg = JWT_PIN_ES256;
    else
        return "unsupported alg";

    const json_t *t = json_object_get(hdr, "typ");
    if (t != NULL && !json_str_eq(t, "JWT"))
        return "typ must be absent or JWT";

    const json_t *k = json_object_get(hdr, "kid");
    if (k == NULL)
        return "kid missing";
    if (!json_is_string(k))
        return "kid not a string";
    if (!kid_valid(json_string_value(k), json_string_length(k)))
        return "kid malformed";
    *kid = json_string_value(k);
    *kidlen = json_string_length(k);
    return NULL;
}

/* ---- the verification steps ---------------------------------------------- */

/*
 * One verification in progress: the caller's arguments, then what each step
 * found, for the steps after it.  token, issuers and out are the caller's;
 * hdr and payload are owned here and released by verify_inner(); kid points
 * into hdr, tenant and sub into payload.
 */
struct verification {
    const struct jwt_issuer *issuers;
    size_t nissuers;
    const char *token;
    size_t len;
    time_t now;
    struct jwt_identity *out;

    const char *head, *body, *sig; /* split_token: the three segments, in token */
    size_t headlen, bodylen, siglen;
    size_t signed_len; /* "header.payload", the signing input */
    json_t *hdr;       /* decode_header */
    enum jwt_alg_pin alg;
    const char *kid;
    size_t kidlen;
    json_t *payload;                   /* decode_payload */
    const struct jwt_issuer *is;       /* select_issuer */
    const struct jwt_key *key;         /* select_key */
    json_int_t exp, iat;               /* check_times, check_lifetime */
    const json_t *tenant, *sub;        /* pick_tenant, pick_subject (sub may be NULL) */
    char scope[JWT_MAX_SCOPE_LEN + 1]; /* pick_scopes: names, one space between */
    size_t scopelen;
};

static const char *check_arguments(struct verification *v)
{
    if (v->issuers == NULL || v->nissuers == 0)
        return "no issuers configured";
    if (v->token == NULL || v->len == 0)
        return "empty token";
    if (v->len > JWT_MAX_TOKEN_LEN)
        return "token too long";
    if (v->now < 0)
        return "invalid clock";
    return NULL;
}

/* Exactly three segments, base64url characters only (this also rules out NUL, spaces, '=' padding). */
static const char *split_token(struct verification *v)
{
    size_t dots[2], ndots = 0;
    for (size_t i = 0; i < v->len; i++) {
        unsigned char c = (unsigned char)v->token[i];
        if (c == '.') {
            if (ndots == 2)
                return "token must have exactly three segments";
            dots[ndots++] = i;
        } else if (!is_b64url_char(c)) {
            return "token has characters outside base64url";
        }
    }
    if (ndots != 2)
        return "token must have exactly three segments";
    v->head = v->token;
    v->headlen = dots[0];
    v->body = v->token + dots[0] + 1;
    v->bodylen = dots[1] - dots[0] - 1;
    v->sig = v->token + dots[1] + 1;
    v->siglen = v->len - dots[1] - 1;
    v->signed_len = dots[1];
    if (v->headlen == 0 || v->bodylen == 0)
        return "empty header or payload segment";
    if (v->siglen == 0)
        return "empty signature (unsigned token)";
    return NULL;
}

static const char *decode_header(struct verification *v)
{
    v->hdr = b64url_json_object(v->head, v->headlen);
    if (v->hdr == NULL)
        return "header is not a base64url JSON object (or has duplicate keys)";
    return check_header(v->hdr, &v->alg, &v->kid, &v->kidlen);
}

static const char *decode_payload(struct verification *v)
{
    v->payload = b64url_json_object(v->body, v->bodylen);
    if (v->payload == NULL)
        return "payload is not a base64url JSON object (or has duplicate keys)";
    return NULL;
}

/*
 * Issuer by the payload's iss; ambiguity is a configuration error, refuse.
 * The issuer's cheap invariants are re-checked (it may not have passed
 * jwt_issuers_check()), and its pinned algorithm must be the header's.
 */
static const char *select_issuer(struct verification *v)
{
    const json_t *iss = json_object_get(v->payload, "iss");
    if (!json_is_string(iss))
        return "iss missing or not a string";
    const struct jwt_issuer *is = NULL;
    for (size_t i = 0; i < v->nissuers; i++) {
        if (v->issuers[i].iss != NULL && json_str_eq(iss, v->issuers[i].iss)) {
            if (is != NULL)
                return "iss matches more than one configured issuer";
            is = &v->issuers[i];
        }
    }
    if (is == NULL)
        return "unknown iss";
    if (!pin_valid(is->alg) || is->aud == NULL || is->tenant_claim == NULL || is->leeway_s > JWT_MAX_LEEWAY_S ||
        is->tenants == NULL || is->ntenants == 0 || is->scopes_claim == NULL || is->max_lifetime_s == 0 ||
        is->max_lifetime_s > JWT_MAX_LIFETIME_S)
        return "issuer configuration invalid";
    if (v->alg != is->alg)
        return "alg not allowed for this issuer";
    v->is = is;
    return NULL;
}

/* The key named kid among this issuer's keys only, or NULL. */
static const struct jwt_key *find_key(const struct jwt_issuer *is, const char *kid, size_t kidlen)
{
    for (size_t i = 0; is->keys != NULL && i < is->nkeys; i++) {
        const char *k = is->keys[i].kid;
        if (k != NULL && strlen(k) == kidlen && memcmp(k, kid, kidlen) == 0)
            return &is->keys[i];
    }
    return NULL;
}

static const char *select_key(struct verification *v)
{
    const struct jwt_key *key = find_key(v->is, v->kid, v->kidlen);
    if (key == NULL)
        return "unknown kid for this issuer";
    /* G3 guard: never let libjwt see a NULL or empty key (it would skip verification). */
    if (key->material == NULL || key->len == 0)
        return "configured key is empty; refusing to verify";
    if (key->len > JWT_MAX_KEY_LEN || (v->alg == JWT_PIN_HS256 && key->len < JWT_MIN_HMAC_KEY_LEN))
        return "configured key has invalid length";
    v->key = key;
    return NULL;
}

/* Cheap signature-shape checks before any crypto. */
static const char *check_signature_shape(struct verification *v)
{
    size_t n = 0;
    unsigned char *sig = b64url_decode(v->sig, v->siglen, &n);
    if (sig == NULL)
        return "signature is not canonical base64url";
    free(sig);
    if ((v->alg == JWT_PIN_HS256 && n != HS256_MAC_LEN) || (v->alg == JWT_PIN_ES256 && n != ES256_SIG_LEN) || n > MAX_SIG_LEN)
        return "signature has wrong length";
    return NULL;
}

/*
 * HS256 is recomputed here and compared in constant time; then libjwt checks
 * the signature with the configured key for every algorithm, and
 * jwt_decode_pinned() re-checks the algorithm after decoding (and refuses a
 * NULL or empty key itself, G3).
 */
static const char *verify_signature(struct verification *v)
{
    if (v->alg == JWT_PIN_HS256 && !hs256_check(v->key->material, v->key->len, v->token, v->signed_len, v->sig, v->siglen))
        return "signature verification failed";
    /* libjwt needs a NUL-terminated copy; split_token ruled out embedded NULs. */
    char *copy = malloc(v->len + 1);
    if (copy == NULL)
        return "out of memory";
    memcpy(copy, v->token, v->len);
    copy[v->len] = '\0';
    const char *why = NULL;
    int rc = jwt_decode_pinned(copy, v->key->material, v->key->len, v->is->alg, &why);
    free(copy);
    if (rc != 0)
        return why != NULL ? why : "signature verification failed";
    return NULL;
}

/* exp required, nbf and iat optional; all integers, compared with the issuer's leeway. */
static const char *check_times(struct verification *v)
{
    long long t = (long long)v->now;
    long long lw = (long long)v->is->leeway_s;
    json_int_t nbf = 0, iat = 0;

    int r = int_claim(v->payload, "exp", &v->exp);
    if (r == 1)
        return "exp missing";
    if (r < 0)
        return "exp not an integer";
    if (t - lw > v->exp) /* now > exp + leeway, without overflowing exp + leeway */
        return "token expired";
    if (v->exp > LONG_MAX || v->exp < LONG_MIN)
        return "exp out of range";

    r = int_claim(v->payload, "nbf", &nbf);
    if (r < 0)
        return "nbf not an integer";
    if (r == 0 && t + lw < nbf)
        return "token not yet valid (nbf)";

    r = int_claim(v->payload, "iat", &iat);
    if (r < 0)
        return "iat not an integer";
    if (r == 0 && iat > t + lw)
        return "token issued in the future (iat)";
    return NULL;
}

/*
 * iat is required, and the lifetime is capped twice, each at most the
 * issuer's max_lifetime_s: as issued (exp - iat), and as left (exp - now,
 * without leeway: no token accepted now outlives now + max_lifetime_s, even
 * one whose iat lies up to the leeway ahead).  check_times bounded iat
 * above (now + leeway), so no sum overflows.
 */
static const char *check_lifetime(struct verification *v)
{
    long long max = (long long)v->is->max_lifetime_s;

    int r = int_claim(v->payload, "iat", &v->iat);
    if (r == 1)
        return "iat missing (required to bound the lifetime)";
    if (r < 0)
        return "iat not an integer";
    if (v->exp < v->iat)
        return "exp before iat";
    if (v->exp > v->iat + max)
        return "lifetime (exp - iat) longer than the issuer's max_lifetime_s";
    if (v->exp > (long long)v->now + max)
        return "exp further ahead than the issuer's max_lifetime_s";
    return NULL;
}

static const char *check_audience(struct verification *v)
{
    const json_t *aud = json_object_get(v->payload, "aud");
    if (aud == NULL)
        return "aud missing";
    if (!aud_matches(aud, v->is->aud))
        return "aud mismatch";
    return NULL;
}

static const char *pick_tenant(struct verification *v)
{
    const json_t *ten = json_object_get(v->payload, v->is->tenant_claim);
    if (ten == NULL)
        return "tenant claim missing";
    if (!json_is_string(ten) || !tenant_valid(json_string_value(ten), json_string_length(ten)))
        return "tenant claim malformed";
    v->tenant = ten;
    return NULL;
}

/* The tenant must be one of those the issuer is bound to: no issuer speaks for every tenant. */
static const char *check_tenant_bound(struct verification *v)
{
    for (size_t i = 0; i < v->is->ntenants; i++)
        if (v->is->tenants[i] != NULL && json_str_eq(v->tenant, v->is->tenants[i]))
            return NULL;
    return "tenant not bound to this issuer";
}

/* One scope name onto v->scope, a space before all but the first. */
static const char *append_scope(struct verification *v, const char *s, size_t len)
{
    size_t need = len + (v->scopelen > 0);
    if (len == 0 || need > JWT_MAX_SCOPE_LEN - v->scopelen)
        return "scope claim too long";
    if (v->scopelen > 0)
        v->scope[v->scopelen++] = ' ';
    memcpy(v->scope + v->scopelen, s, len);
    v->scopelen += len;
    v->scope[v->scopelen] = '\0';
    return NULL;
}

/*
 * The issuer's scopes claim: a space-separated string or an array of names
 * (jwt_auth.h).  Absent means no scopes (fail closed: the token may call
 * nothing); any other shape is refused.
 */
static const char *pick_scopes(struct verification *v)
{
    const json_t *c = json_object_get(v->payload, v->is->scopes_claim);
    v->scopelen = 0;
    v->scope[0] = '\0';
    if (c == NULL)
        return NULL;
    if (json_is_string(c)) {
        size_t n = json_string_length(c);
        if (n > JWT_MAX_SCOPE_LEN)
            return "scope claim too long";
        if (!scope_string_valid(json_string_value(c), n))
            return "scope claim malformed";
        return n > 0 ? append_scope(v, json_string_value(c), n) : NULL;
    }
    if (!json_is_array(c))
        return "scope claim malformed";
    if (json_array_size(c) > JWT_MAX_SCOPES)
        return "scope claim has too many entries";
    for (size_t i = 0; i < json_array_size(c); i++) {
        const json_t *e = json_array_get(c, i);
        if (!json_is_string(e) || json_string_length(e) == 0 || !scope_string_valid(json_string_value(e), json_string_length(e)) ||
            memchr(json_string_value(e), ' ', json_string_length(e)) != NULL)
            return "scope claim malformed";
        const char *why = append_scope(v, json_string_value(e), json_string_length(e));
        if (why != NULL)
            return why;
    }
    return NULL;
}

static const char *pick_subject(struct verification *v)
{
    const json_t *sub = json_object_get(v->payload, "sub");
    if (sub != NULL && (!json_is_string(sub) || !subject_valid(json_string_value(sub), json_string_length(sub))))
        return "sub malformed";
    v->sub = sub;
    return NULL;
}

/* Only once every check has passed; the lengths were bounded by pick_tenant, pick_subject and check_header. */
static const char *fill_identity(struct verification *v)
{
    struct jwt_identity *out = v->out;
    memcpy(out->tenant, json_string_value(v->tenant), json_string_length(v->tenant));
    out->tenant[json_string_length(v->tenant)] = '\0';
    if (v->sub != NULL) {
        memcpy(out->subject, json_string_value(v->sub), json_string_length(v->sub));
        out->subject[json_string_length(v->sub)] = '\0';
    }
    out->exp = (long)v->exp;
    memcpy(out->scope, v->scope, v->scopelen + 1);
    memcpy(out->kid, v->kid, v->kidlen);
    out->kid[v->kidlen] = '\0';
    out->issuer = v->is;
    return NULL;
}

/*
 * The order of checks of jwt_auth.h, one step a row.  Each step passes the
 * token on (NULL) or rejects it with a static reason; the first reason wins.
 */
typedef const char *verify_step(struct verification *v);

static verify_step *const verify_steps[] = {
    check_arguments,       /* 1. issuers, token length, clock */
    split_token,           /* 1. three non-empty base64url segments */
    decode_header,         /* 2. strict JSON; alg one of the pins; typ, kid; no key sources */
    decode_payload,        /* 3. strict JSON */
    select_issuer,         /* 3. iss picks one issuer; header alg is its pinned alg */
    select_key,            /* 3, 4. kid among that issuer's keys; no NULL or empty key (G3) */
    check_signature_shape, /* 5. canonical base64url, right length for the alg */
    verify_signature,      /* 5. HS256 here, then libjwt with the key; alg re-checked */
    check_times,           /* 6. exp, nbf, iat */
    check_lifetime,        /* 6. iat required; exp - iat and exp - now capped */
    check_audience,        /* 6. aud */
    pick_tenant,           /* 6. the issuer's tenant claim */
    check_tenant_bound,    /* 6. ...naming one of the issuer's tenants */
    pick_scopes,           /* 6. the issuer's scopes claim */
    pick_subject,          /* 6. sub */
    fill_identity,         /* *out, from the signed payload */
};

static const char *verify_inner(const struct jwt_issuer *issuers, size_t nissuers, const char *token, size_t len, time_t now,
                                struct jwt_identity *out)
{
    struct verification v = {.issuers = issuers, .nissuers = nissuers, .token = token, .len = len, .now = now, .out = out};
    const char *why = NULL;
    for (size_t i = 0; why == NULL && i < sizeof(verify_steps) / sizeof(verify_steps[0]); i++)
        why = verify_steps[i](&v);
    json_decref(v.payload);
    json_decref(v.hdr);
    return why;
}

int jwt_verify(const struct jwt_issuer *issuers, size_t nissuers, const char *token, size_t len, time_t now,
               struct jwt_identity *out, const char **why)
{
    static const char *dummy;
    if (why == NULL)
        why = &dummy;
    if (out == NULL) {
        *why = "no output";
        return -1;
    }
    memset(out, 0, sizeof(*out));
    const char *r = verify_inner(issuers, nissuers, token, len, now, out);
    ERR_clear_error(); /* don't leave libjwt/OpenSSL failures queued for unrelated callers */
    if (r != NULL) {
        memset(out, 0, sizeof(*out));
        *why = r;
        return -1;
    }
    *why = "ok";
    return 0;
}

/* ---- configuration checks ---------------------------------------------- */

static int pem_check(const struct jwt_key *k, enum jwt_alg_pin alg, const char **what)
{
    BIO *b = BIO_new_mem_buf(k->material, (int)k->len);
    if (b == NULL) {
        *what = "out of memory";
        return -1;
    }
    EVP_PKEY *pk = PEM_read_bio_PUBKEY(b, NULL, NULL, NULL);
    BIO_free(b);
    int rc = -1;
    if (pk == NULL) {
        *what = "is not a PEM public key";
        goto out;
    }
    if (alg == JWT_PIN_RS256) {
        if (EVP_PKEY_get_base_id(pk) != EVP_PKEY_RSA) {
            *what = "is not an RSA public key (RS256)";
            goto out;
        }
        if (EVP_PKEY_get_bits(pk) < JWT_MIN_RSA_BITS) {
            *what = "RSA key shorter than 2048 bits";
            goto out;
        }
    } else {
        char group[64];
        size_t glen = 0;
        if (EVP_PKEY_get_base_id(pk) != EVP_PKEY_EC) {
            *what = "is not an EC public key (ES256)";
            goto out;
        }
        if (EVP_PKEY_get_utf8_string_param(pk, OSSL_PKEY_PARAM_GROUP_NAME, group, sizeof(group), &glen) != 1 ||
            strcmp(group, "prime256v1") != 0) {
            *what = "EC key is not on P-256 (ES256)";
            goto out;
        }
    }
    rc = 0;
out:
    EVP_PKEY_free(pk);
    ERR_clear_error();
    return rc;
}

static int str_ok(const char *s, size_t max)
{
    return s != NULL && s[0] != '\0' && strlen(s) <= max;
}

/* The issuer's tenants: 1..JWT_MAX_TENANTS valid, distinct names. */
static int tenants_check(const struct jwt_issuer *is, const char *name, char *err, size_t errlen)
{
    if (is->tenants == NULL || is->ntenants == 0 || is->ntenants > JWT_MAX_TENANTS) {
        snprintf(err, errlen, "issuer %s: needs 1..%d tenants (the tenants its tokens may name)", name, JWT_MAX_TENANTS);
        return -1;
    }
    for (size_t i = 0; i < is->ntenants; i++) {
        const char *t = is->tenants[i];
        if (t == NULL || !tenant_valid(t, strlen(t))) {
            snprintf(err, errlen, "issuer %s: tenant %zu: must be 1..%d of [A-Za-z0-9._-], not . or ..", name, i,
                     JWT_MAX_TENANT_LEN);
            return -1;
        }
        for (size_t j = 0; j < i; j++) {
            if (strcmp(is->tenants[j], t) == 0) {
                snprintf(err, errlen, "issuer %s: duplicate tenant %s", name, t);
                return -1;
            }
        }
    }
    return 0;
}

int jwt_issuer_check(const struct jwt_issuer *is, char *err, size_t errlen)
{
    char dummy[1];
    if (err == NULL || errlen == 0) {
        err = dummy;
        errlen = sizeof(dummy);
    }
    err[0] = '\0';
    if (is == NULL) {
        snprintf(err, errlen, "issuer is NULL");
        return -1;
    }
    const char *name = str_ok(is->name, 128) ? is->name : "(unnamed)";
    if (!str_ok(is->name, 128)) {
        snprintf(err, errlen, "issuer name missing or longer than 128");
        return -1;
    }
    if (!str_ok(is->iss, MAX_ISS_AUD_LEN)) {
        snprintf(err, errlen, "issuer %s: iss missing or too long", name);
        return -1;
    }
    if (!str_ok(is->aud, MAX_ISS_AUD_LEN)) {
        snprintf(err, errlen, "issuer %s: aud missing or too long", name);
        return -1;
    }
    if (!str_ok(is->tenant_claim, 64)) {
        snprintf(err, errlen, "issuer %s: tenant_claim missing or too long", name);
        return -1;
    }
    if (!pin_valid(is->alg)) {
        snprintf(err, errlen, "issuer %s: alg must be HS256, RS256 or ES256", name);
        return -1;
    }
    if (is->leeway_s > JWT_MAX_LEEWAY_S) {
        snprintf(err, errlen, "issuer %s: leeway %u s exceeds %d s", name, is->leeway_s, JWT_MAX_LEEWAY_S);
        return -1;
    }
    if (is->max_lifetime_s == 0 || is->max_lifetime_s > JWT_MAX_LIFETIME_S) {
        snprintf(err, errlen, "issuer %s: max_lifetime_s must be 1 to %d", name, JWT_MAX_LIFETIME_S);
        return -1;
    }
    if (!str_ok(is->scopes_claim, 64)) {
        snprintf(err, errlen, "issuer %s: scopes_claim missing or too long", name);
        return -1;
    }
    if (tenants_check(is, name, err, errlen) != 0)
        return -1;
    if (is->keys == NULL || is->nkeys == 0 || is->nkeys > JWT_MAX_KEYS) {
        snprintf(err, errlen, "issuer %s: needs 1..%d keys", name, JWT_MAX_KEYS);
        return -1;
    }
    for (size_t i = 0; i < is->nkeys; i++) {
        const struct jwt_key *k = &is->keys[i];
        if (k->kid == NULL || !kid_valid(k->kid, strlen(k->kid))) {
            snprintf(err, errlen, "issuer %s: key %zu: kid must be 1..%d of [A-Za-z0-9._-] without '..'", name, i, JWT_MAX_KID_LEN);
            return -1;
        }
        for (size_t j = 0; j < i; j++) {
            if (strcmp(is->keys[j].kid, k->kid) == 0) {
                snprintf(err, errlen, "issuer %s: duplicate kid %s", name, k->kid);
                return -1;
            }
        }
        if (k->material == NULL || k->len == 0) { /* G3 */
            snprintf(err, errlen, "issuer %s: kid %s: empty key", name, k->kid);
            return -1;
        }
        if (k->len > JWT_MAX_KEY_LEN) {
            snprintf(err, errlen, "issuer %s: kid %s: key longer than %d bytes", name, k->kid, JWT_MAX_KEY_LEN);
            return -1;
        }
        if (is->alg == JWT_PIN_HS256) {
            if (k->len < JWT_MIN_HMAC_KEY_LEN) {
                snprintf(err, errlen, "issuer %s: kid %s: HS256 secret shorter than %d bytes", name, k->kid, JWT_MIN_HMAC_KEY_LEN);
                return -1;
            }
            static const char pem[] = "-----BEGIN";
            for (size_t o = 0; o + sizeof(pem) - 1 <= k->len; o++) {
                if (memcmp(k->material + o, pem, sizeof(pem) - 1) == 0) {
                    snprintf(err, errlen, "issuer %s: kid %s: HS256 secret looks like a PEM key (algorithm confusion?)", name,
                             k->kid);
                    return -1;
                }
            }
        } else {
            const char *what = NULL;
            if (pem_check(k, is->alg, &what) != 0) {
                snprintf(err, errlen, "issuer %s: kid %s: key %s", name, k->kid, what);
                return -1;
            }
        }
    }
    return 0;
}

int jwt_issuers_check(const struct jwt_issuer *issuers, size_t nissuers, char *err, size_t errlen)
{
    char dummy[1];
    if (err == NULL || errlen == 0) {
        err = dummy;
        errlen = sizeof(dummy);
    }
    if (issuers == NULL || nissuers == 0) {
        snprintf(err, errlen, "no issuers configured");
        return -1;
    }
    for (size_t i = 0; i < nissuers; i++) {
        if (jwt_issuer_check(&issuers[i], err, errlen) != 0)
            return -1;
        for (size_t j = 0; j < i; j++) {
            if (strcmp(issuers[i].iss, issuers[j].iss) == 0) {
                snprintf(err, errlen, "issuers %s and %s share iss", issuers[j].name, issuers[i].name);
                return -1;
            }
        }
    }
    return 0;
}
