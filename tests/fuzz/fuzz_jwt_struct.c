/*
 * fuzz_jwt_struct.c - structure-aware libFuzzer target for the claims rules
 * of jwt_verify() (gateway/auth/jwt_auth.c; F2, G24 of tests/SECURITY-CHECKS.md).
 *
 * fuzz_jwt_auth.c mutates token bytes, and so almost never gets past the
 * signature.  Here the input is a token's parts, not the token:
 *
 *   <signer byte><header JSON>\n<claims JSON>
 *
 * and the target makes the token itself: base64url of each part, signed by
 * the signer the first byte picks (hs-1, hs-2, rs-1 or es-1 of the issuer
 * set of jwt_fixture.c, a secret nobody configured, or garbage), so every
 * mutant reaches the checks after the signature.  LLVMFuzzerCustomMutator
 * mutates the JSON, not the bytes: it sets the members the rules read
 * (alg, kid, typ, the key-source headers, iss, aud, exp, nbf, iat, tenant,
 * scope, sub) to values at the rules' edges (times around now, the leeway
 * and the lifetime cap, integer limits, reals, wrong types, names just too
 * long, "." and ".."), deletes, re-types and nests members, nudges numbers,
 * duplicates a key in the text, and switches the signer.
 *
 * The oracle is the rules of jwt_auth.h written again here, plainly, on the
 * parts as parsed by jansson: the token must be accepted exactly when they
 * all hold, and then the identity must be the claims'.  A disagreement
 * prints the parts and aborts.
 *
 * The replay (fuzz_jwt_struct_replay) runs the custom mutator too: its
 * random inputs are chains of structured mutations of the seeds.
 */
#include "fuzz_target.h"
#include "jwt_fixture.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <openssl/ecdsa.h>
#include <openssl/hmac.h>

#define MAX_PART 6000 /* header or claims text; the token cap (8192) lies within reach */

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed);
/* libFuzzer's own byte mutator; absent (NULL) in the replay */
size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size) __attribute__((weak));

/* ===========================================================================
 * Signing
 * ======================================================================== */

/* Who signs: the first input byte modulo SIGNERS, HS1 most often (cheap). */
enum signer { HS1, HS2, ES, RS, HS_UNKNOWN, GARBAGE };
#define SIGNERS 16

static enum signer signer_of(uint8_t b)
{
    static const enum signer table[SIGNERS] = {HS1, HS1, HS1, HS1, HS1, HS1, HS1,        HS1,
                                               HS2, HS2, ES,  ES,  ES,  RS,  HS_UNKNOWN, GARBAGE};
    return table[b % SIGNERS];
}

static size_t b64url(const unsigned char *in, size_t len, char *out)
{
    int n = EVP_EncodeBlock((unsigned char *)out, in, (int)len);
    CHECK(n >= 0);
    while (n > 0 && out[n - 1] == '=')
        n--;
    for (int i = 0; i < n; i++)
        out[i] = out[i] == '+' ? '-' : out[i] == '/' ? '_' : out[i];
    return (size_t)n;
}

static size_t sign_pkey(EVP_PKEY *pk, const char *msg, size_t len, unsigned char *sig, size_t cap)
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    size_t n = cap;
    CHECK(ctx != NULL && EVP_DigestSignInit(ctx, NULL, EVP_sha256(), NULL, pk) == 1 &&
          EVP_DigestSign(ctx, sig, &n, (const unsigned char *)msg, len) == 1);
    EVP_MD_CTX_free(ctx);
    return n;
}

/* ES256 in JWS form: r and s, 32 bytes each, not DER. */
static size_t sign_es256(const char *msg, size_t len, unsigned char *sig)
{
    unsigned char der[128];
    size_t n = sign_pkey(fuzz_es_pkey, msg, len, der, sizeof(der));
    const unsigned char *p = der;
    ECDSA_SIG *es = d2i_ECDSA_SIG(NULL, &p, (long)n);
    CHECK(es != NULL && BN_bn2binpad(ECDSA_SIG_get0_r(es), sig, 32) == 32 &&
          BN_bn2binpad(ECDSA_SIG_get0_s(es), sig + 32, 32) == 32);
    ECDSA_SIG_free(es);
    return 64;
}

static size_t sign(enum signer who, const char *msg, size_t len, unsigned char *sig)
{
    static const unsigned char unknown[] = "fuzz-hs256-secret-nobody-configured-0123";
    unsigned int n = 0;
    switch (who) {
    case HS1:
    case HS2:
    case HS_UNKNOWN: {
        const unsigned char *k = who == HS1 ? fuzz_hs_secret1 : who == HS2 ? fuzz_hs_secret2 : unknown;
        size_t kl = who == HS_UNKNOWN ? sizeof(unknown) - 1 : fuzz_hs_secret_len;
        CHECK(HMAC(EVP_sha256(), k, (int)kl, (const unsigned char *)msg, len, sig, &n) != NULL);
        return n;
    }
    case ES:
        return sign_es256(msg, len, sig);
    case RS:
        return sign_pkey(fuzz_rs_pkey, msg, len, sig, 512);
    case GARBAGE:
        break;
    }
    memset(sig, 0x5a, 32);
    return 32;
}

/* ===========================================================================
 * The oracle: jwt_auth.h's rules, written again
 * ======================================================================== */

static int name_char(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
}

static int str_is(const json_t *j, const char *want)
{
    return json_is_string(j) && json_string_length(j) == strlen(want) && strcmp(json_string_value(j), want) == 0;
}

/* 1..64 name characters, no "..": a kid */
static int kid_ok(const json_t *k)
{
    if (!json_is_string(k))
        return 0;
    const char *s = json_string_value(k);
    size_t n = json_string_length(k);
    if (n < 1 || n > 64 || strstr(s, "..") != NULL || strlen(s) != n)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!name_char((unsigned char)s[i]))
            return 0;
    return 1;
}

static int scope_char(unsigned char c)
{
    return c == 0x21 || (c >= 0x23 && c <= 0x5b) || (c >= 0x5d && c <= 0x7e);
}

/* scope names, one space between; adds them to out (one space between) */
static int scope_words_ok(const char *s, size_t n, int spaces, char *out, size_t *outlen)
{
    if (*outlen > 0 && n > 0) {
        if (*outlen + 1 > JWT_MAX_SCOPE_LEN)
            return 0;
        out[(*outlen)++] = ' ';
    }
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ' ? !spaces || i == 0 || i + 1 == n || s[i + 1] == ' ' : !scope_char((unsigned char)s[i]))
            return 0;
        if (*outlen + 1 > JWT_MAX_SCOPE_LEN)
            return 0;
        out[(*outlen)++] = s[i];
    }
    out[*outlen] = '\0';
    return 1;
}

static int scope_ok(const json_t *c, char *out)
{
    size_t len = 0;
    out[0] = '\0';
    if (c == NULL)
        return 1;
    if (json_is_string(c))
        return scope_words_ok(json_string_value(c), json_string_length(c), 1, out, &len);
    if (!json_is_array(c) || json_array_size(c) > JWT_MAX_SCOPES)
        return 0;
    for (size_t i = 0; i < json_array_size(c); i++) {
        const json_t *e = json_array_get(c, i);
        if (!json_is_string(e) || json_string_length(e) == 0 ||
            !scope_words_ok(json_string_value(e), json_string_length(e), 0, out, &len))
            return 0;
    }
    return 1;
}

static int aud_ok(const json_t *a)
{
    if (json_is_string(a))
        return str_is(a, "moat");
    if (!json_is_array(a) || json_array_size(a) < 1 || json_array_size(a) > JWT_MAX_AUD_ENTRIES)
        return 0;
    int found = 0;
    for (size_t i = 0; i < json_array_size(a); i++) {
        if (!json_is_string(json_array_get(a, i)))
            return 0;
        found |= str_is(json_array_get(a, i), "moat");
    }
    return found;
}

static int sub_ok(const json_t *s)
{
    if (s == NULL)
        return 1;
    if (!json_is_string(s) || json_string_length(s) > JWT_MAX_SUBJECT_LEN)
        return 0;
    for (size_t i = 0; i < json_string_length(s); i++) {
        unsigned char c = (unsigned char)json_string_value(s)[i];
        if (c < 0x20 || c == 0x7f)
            return 0;
    }
    return 1;
}

/* exp, nbf, iat against now, the issuer's leeway and the lifetime cap, in
 * 128-bit arithmetic so that no sum can wrap. */
static int times_ok(const json_t *claims, long long leeway)
{
    const json_t *exp = json_object_get(claims, "exp"), *nbf = json_object_get(claims, "nbf"),
                 *iat = json_object_get(claims, "iat");
    __int128 now = (__int128)FUZZ_NOW, lw = leeway, max = FUZZ_LIFETIME;
    if (!json_is_integer(exp) || !json_is_integer(iat) || (nbf != NULL && !json_is_integer(nbf)))
        return 0;
    __int128 e = json_integer_value(exp), i = json_integer_value(iat);
    if (e < now - lw || i > now + lw || (nbf != NULL && (__int128)json_integer_value(nbf) > now + lw))
        return 0;
    return e >= i && e - i <= max && e - now <= max;
}

/* What the token must give when accepted. */
struct expected {
    const struct jwt_issuer *issuer;
    const char *kid, *tenant, *sub;
    long long exp;
    char scope[JWT_MAX_SCOPE_LEN + 1];
};

/* The issuer the claims' iss names, or NULL */
static const struct jwt_issuer *issuer_of(const json_t *claims)
{
    for (int i = 0; i < FUZZ_ISSUERS; i++)
        if (str_is(json_object_get(claims, "iss"), fuzz_issuers[i].iss))
            return &fuzz_issuers[i];
    return NULL;
}

/* The signer that holds key kid of issuer is (the one that must have signed) */
static int signed_by_key(enum signer who, const struct jwt_issuer *is, const char *kid)
{
    if (is == &fuzz_issuers[0])
        return (who == HS1 && strcmp(kid, fuzz_kid_hs1) == 0) || (who == HS2 && strcmp(kid, fuzz_kid_hs2) == 0);
    if (is == &fuzz_issuers[1])
        return who == RS && strcmp(kid, fuzz_kid_rs) == 0;
    return who == ES && strcmp(kid, fuzz_kid_es) == 0;
}

static int header_ok(const json_t *h, const struct jwt_issuer *is)
{
    static const char *const forbidden[] = {"jku", "x5u", "jwk", "x5c", "crit"};
    static const char *const algs[] = {"HS256", "RS256", "ES256"};
    for (size_t i = 0; i < sizeof(forbidden) / sizeof(forbidden[0]); i++)
        if (json_object_get(h, forbidden[i]) != NULL)
            return 0;
    const json_t *typ = json_object_get(h, "typ");
    return str_is(json_object_get(h, "alg"), algs[is->alg - JWT_PIN_HS256]) && (typ == NULL || str_is(typ, "JWT")) &&
           kid_ok(json_object_get(h, "kid"));
}

static int tenant_ok(const json_t *t)
{
    /* the only tenant the issuers are bound to; well formed by the rules too */
    return str_is(t, fuzz_tenant_acme);
}

/* 1 when the rules accept the token made of these parts, with *x filled. */
static int oracle(enum signer who, const json_t *h, const json_t *c, size_t token_len, struct expected *x)
{
    if (token_len > JWT_MAX_TOKEN_LEN || !json_is_object(h) || !json_is_object(c))
        return 0;
    const struct jwt_issuer *is = issuer_of(c);
    if (is == NULL || !header_ok(h, is))
        return 0;
    x->issuer = is;
    x->kid = json_string_value(json_object_get(h, "kid"));
    if (!signed_by_key(who, is, x->kid) || !times_ok(c, is->leeway_s) || !aud_ok(json_object_get(c, "aud")) ||
        !tenant_ok(json_object_get(c, "tenant")) || !scope_ok(json_object_get(c, "scope"), x->scope) ||
        !sub_ok(json_object_get(c, "sub")))
        return 0;
    x->tenant = json_string_value(json_object_get(c, "tenant"));
    x->sub = json_is_string(json_object_get(c, "sub")) ? json_string_value(json_object_get(c, "sub")) : "";
    x->exp = json_integer_value(json_object_get(c, "exp"));
    return 1;
}

/* ===========================================================================
 * The target
 * ======================================================================== */

/* The input's parts: signer byte, header text, claims text. */
struct parts {
    enum signer who;
    const char *head, *claims;
    size_t head_len, claims_len;
};

static int split_input(const uint8_t *data, size_t size, struct parts *p)
{
    if (size < 1)
        return -1;
    const char *rest = (const char *)data + 1, *nl = memchr(rest, '\n', size - 1);
    p->who = signer_of(data[0]);
    p->head = rest;
    p->head_len = nl ? (size_t)(nl - rest) : size - 1;
    p->claims = nl ? nl + 1 : rest + size - 1;
    p->claims_len = nl ? size - 1 - p->head_len - 1 : 0;
    return p->head_len <= MAX_PART && p->claims_len <= MAX_PART ? 0 : -1;
}

/* The compact token of the parts, signed; malloc'd, NUL-terminated. */
static char *make_token(const struct parts *p, size_t *len)
{
    unsigned char sig[512];
    char *t = malloc((p->head_len + p->claims_len) / 3 * 4 + 16 + sizeof(sig) / 3 * 4 + 8);
    CHECK(t != NULL);
    size_t n = b64url((const unsigned char *)p->head, p->head_len, t);
    t[n++] = '.';
    n += b64url((const unsigned char *)p->claims, p->claims_len, t + n);
    size_t siglen = sign(p->who, t, n, sig);
    t[n++] = '.';
    n += b64url(sig, siglen, t + n);
    t[n] = '\0';
    *len = n;
    return t;
}

static void report(const char *what, const struct parts *p, const char *why)
{
    fprintf(stderr, "fuzz_jwt_struct: %s (verifier: %s)\n  signer %d\n  header %.*s\n  claims %.*s\n", what, why, (int)p->who,
            (int)p->head_len, p->head, (int)p->claims_len, p->claims);
    abort();
}

static void check_identity(const struct jwt_identity *id, const struct expected *x, const struct parts *p)
{
    if (id->issuer != x->issuer || strcmp(id->kid, x->kid) != 0 || strcmp(id->tenant, x->tenant) != 0 ||
        strcmp(id->subject, x->sub) != 0 || id->exp != x->exp || strcmp(id->scope, x->scope) != 0)
        report("accepted, with an identity other than the claims'", p, "ok");
}

static unsigned long accepted;

/* A part as the rules read it: JSON text, which holds no NUL byte (jansson
 * alone skips one after a number or a word), parsed strictly; or NULL. */
static json_t *json_text(const char *s, size_t n)
{
    if (n == 0 || memchr(s, '\0', n) != NULL)
        return NULL;
    return json_loadb(s, n, JSON_REJECT_DUPLICATES, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct parts p;
    struct expected x;
    struct jwt_identity id;
    const char *why = NULL;
    size_t len = 0;

    fuzz_jwt_init();
    if (split_input(data, size, &p) != 0)
        return 0;
    char *token = make_token(&p, &len);
    int rc = jwt_verify(fuzz_issuers, FUZZ_ISSUERS, token, len, FUZZ_NOW, &id, &why);
    free(token);
    CHECK(rc == 0 || rc == -1);
    CHECK(why != NULL);

    json_t *h = json_text(p.head, p.head_len), *c = json_text(p.claims, p.claims_len);
    int want = oracle(p.who, h, c, len, &x);
    if (rc == 0 && !want)
        report("accepted against the rules", &p, why);
    if (rc != 0 && want)
        report("refused, though every rule holds", &p, why);
    if (rc == 0) {
        check_identity(&id, &x, &p);
        accepted++;
    }
    json_decref(h);
    json_decref(c);
    return 0;
}

/* ===========================================================================
 * The mutator
 * ======================================================================== */

struct rnd {
    uint64_t s;
};

static uint32_t rnd(struct rnd *r, uint32_t n)
{
    r->s ^= r->s << 13;
    r->s ^= r->s >> 7;
    r->s ^= r->s << 17;
    return n ? (uint32_t)(r->s % n) : 0;
}

static json_t *long_string(char c, size_t n)
{
    char buf[1100];
    CHECK(n < sizeof(buf));
    memset(buf, c, n);
    return json_stringn(buf, n);
}

/* A time near the rules' edges, mostly, or any integer. */
static json_t *time_value(struct rnd *r)
{
    static const long long deltas[] = {0,    1,    -1,   59,   60,   61,   -59,   -60,   -61,   3600,  7139,
                                       7140, 7199, 7200, 7201, 7260, 7261, -7200, -7201, 86400, -86400};
    switch (rnd(r, 8)) {
    case 0:
        return json_integer(rnd(r, 2) ? LLONG_MAX : LLONG_MIN);
    case 1:
        return json_integer((json_int_t)rnd(r, 4) - 2);
    case 2:
        return json_real((double)FUZZ_NOW + 100.0);
    default:
        return json_integer((json_int_t)FUZZ_NOW + deltas[rnd(r, sizeof(deltas) / sizeof(deltas[0]))]);
    }
}

static json_t *any_value(struct rnd *r, int depth);

/* A value for member name, at the edges of its rule. */
static json_t *value_for(struct rnd *r, const char *name)
{
    static const char *const algs[] = {"HS256", "RS256", "ES256", "none", "NONE", "HS384", "hs256", "", "HS256 "};
    static const char *const kids[] = {"hs-1", "hs-2", "rs-1", "es-1", "HS-1", "", "a..b", "../x", "hs-1/", "hs-1 "};
    static const char *const isss[] = {"https://hs.fuzz.moat",  "https://rs.fuzz.moat", "https://es.fuzz.moat",
                                       "https://hs.fuzz.moat/", "https://HS.fuzz.moat", ""};
    static const char *const tenants[] = {"acme", "ACME", "acme ", "other", ".", "..", "", "ac/me", "acme\n"};
    static const char *const scopes[] = {"execute runtimes",  "",     " execute", "execute ",
                                         "execute  runtimes", "a\"b", "a\\b",     "execute"};
    static const char *const subs[] = {"user-1",
                                       "",
                                       "caf\xc3\xa9",
                                       "a\x01"
                                       "b",
                                       "a\x7f"
                                       "b",
                                       "\t"};
    if (strcmp(name, "alg") == 0)
        return json_string(algs[rnd(r, sizeof(algs) / sizeof(algs[0]))]);
    if (strcmp(name, "kid") == 0)
        return rnd(r, 8) ? json_string(kids[rnd(r, sizeof(kids) / sizeof(kids[0]))]) : long_string('k', 64 + rnd(r, 2));
    if (strcmp(name, "typ") == 0)
        return json_string(rnd(r, 2) ? "JWT" : "jwt");
    if (strcmp(name, "iss") == 0)
        return json_string(isss[rnd(r, sizeof(isss) / sizeof(isss[0]))]);
    if (strcmp(name, "exp") == 0 || strcmp(name, "nbf") == 0 || strcmp(name, "iat") == 0)
        return time_value(r);
    if (strcmp(name, "tenant") == 0)
        return rnd(r, 8) ? json_string(tenants[rnd(r, sizeof(tenants) / sizeof(tenants[0]))]) : long_string('t', 64 + rnd(r, 2));
    if (strcmp(name, "sub") == 0)
        return rnd(r, 6) ? json_string(subs[rnd(r, sizeof(subs) / sizeof(subs[0]))]) : long_string('s', 128 + rnd(r, 2));
    if (strcmp(name, "aud") == 0) {
        json_t *a = json_array();
        unsigned n = rnd(r, 6) ? rnd(r, 3) : 31 + rnd(r, 3);
        for (unsigned i = 0; i < n; i++)
            json_array_append_new(a, json_string(rnd(r, 3) ? "x" : "moat"));
        if (rnd(r, 4) == 0)
            json_array_append_new(a, json_string("moat"));
        return rnd(r, 3) ? a : (json_decref(a), json_string(rnd(r, 2) ? "moat" : "MOAT"));
    }
    if (strcmp(name, "scope") == 0) {
        if (rnd(r, 2))
            return rnd(r, 8) ? json_string(scopes[rnd(r, sizeof(scopes) / sizeof(scopes[0]))]) : long_string('x', 1023 + rnd(r, 3));
        json_t *a = json_array();
        unsigned n = rnd(r, 6) ? rnd(r, 4) : 63 + rnd(r, 3);
        for (unsigned i = 0; i < n; i++)
            json_array_append_new(a, json_string(rnd(r, 8) ? "execute" : scopes[rnd(r, sizeof(scopes) / sizeof(scopes[0]))]));
        return a;
    }
    return any_value(r, 2);
}

static json_t *any_value(struct rnd *r, int depth)
{
    switch (rnd(r, depth > 2 ? 6 : 8)) {
    case 0:
        return json_null();
    case 1:
        return json_boolean(rnd(r, 2));
    case 2:
        return time_value(r);
    case 3:
        return json_string(rnd(r, 2) ? "moat" : "acme");
    case 4:
        return json_real(rnd(r, 2) ? 1.5 : -0.0);
    case 5:
        return json_string("");
    case 6: {
        json_t *a = json_array();
        json_array_append_new(a, any_value(r, depth + 1));
        return a;
    }
    default: {
        json_t *o = json_object();
        json_object_set_new(o, "moat", any_value(r, depth + 1));
        return o;
    }
    }
}

/* A member name of the object, or NULL when it has none. */
static const char *some_member(json_t *o, struct rnd *r)
{
    size_t n = json_object_size(o), k = rnd(r, (uint32_t)(n ? n : 1));
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v)
    {
        if (k-- == 0)
            return key;
    }
    return NULL;
}

/* One structural mutation of the header (h) or the claims (c). */
static void mutate_json(json_t *h, json_t *c, struct rnd *r)
{
    static const char *const hnames[] = {"alg", "kid", "typ", "jku", "x5u", "jwk", "x5c", "crit", "cty"};
    static const char *const cnames[] = {"iss", "aud", "exp", "nbf", "iat", "tenant", "scope", "sub", "jti"};
    int header = rnd(r, 10) < 3;
    json_t *o = header ? h : c;
    const char *const *names = header ? hnames : cnames;
    const char *name = names[rnd(r, 9)];

    switch (rnd(r, 8)) {
    case 0: /* delete a member */
        if ((name = some_member(o, r)) != NULL)
            json_object_del(o, name);
        break;
    case 1: /* another type */
        if ((name = some_member(o, r)) != NULL)
            json_object_set_new(o, name, any_value(r, 0));
        break;
    case 2: /* nest it */
        if ((name = some_member(o, r)) != NULL) {
            json_t *a = json_array();
            json_array_append(a, json_object_get(o, name));
            json_object_set_new(o, name, a);
        }
        break;
    case 3: { /* nudge a time */
        static const char *const times[] = {"exp", "nbf", "iat"};
        static const int steps[] = {1, -1, 60, -60, 7200, -7200, 3600};
        json_t *t = json_object_get(c, times[rnd(r, 3)]);
        if (json_is_integer(t) && json_integer_value(t) > LLONG_MIN + 8000 && json_integer_value(t) < LLONG_MAX - 8000)
            json_integer_set(t, json_integer_value(t) + steps[rnd(r, sizeof(steps) / sizeof(steps[0]))]);
        break;
    }
    default: /* a known member at the edge of its rule */
        json_object_set_new(o, name, value_for(r, name));
    }
}

/* The parts written back into data: signer byte, header, newline, claims. */
static size_t write_parts(uint8_t *data, size_t max_size, uint8_t sel, json_t *h, json_t *c, struct rnd *r)
{
    char *hs = json_dumps(h, JSON_COMPACT | JSON_ENCODE_ANY), *cs = json_dumps(c, JSON_COMPACT | JSON_ENCODE_ANY);
    size_t hl = hs ? strlen(hs) : 0, cl = cs ? strlen(cs) : 0, n = 0;
    static const char dup[] = "\"exp\":1700003600,";
    int add_dup = rnd(r, 16) == 0 && cl > 1 && cs[0] == '{';
    if (hs != NULL && cs != NULL && 1 + hl + 1 + cl + (add_dup ? sizeof(dup) - 1 : 0) <= max_size) {
        data[n++] = sel;
        memcpy(data + n, hs, hl);
        n += hl;
        data[n++] = '\n';
        if (add_dup) { /* a duplicate key, which jansson cannot hold: in the text */
            data[n++] = '{';
            memcpy(data + n, dup, sizeof(dup) - 1);
            n += sizeof(dup) - 1;
            memcpy(data + n, cs + 1, cl - 1);
            n += cl - 1;
        } else {
            memcpy(data + n, cs, cl);
            n += cl;
        }
    }
    free(hs);
    free(cs);
    return n;
}

/* Bytes as a fallback: libFuzzer's mutator, or a byte changed. */
static size_t mutate_bytes(uint8_t *data, size_t size, size_t max_size, struct rnd *r)
{
    if (LLVMFuzzerMutate != NULL)
        return LLVMFuzzerMutate(data, size, max_size);
    if (size > 0)
        data[rnd(r, (uint32_t)size)] = (uint8_t)rnd(r, 256);
    return size;
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed)
{
    struct rnd r = {(uint64_t)seed * 0x9e3779b97f4a7c15ull + 1};
    struct parts p;

    if (rnd(&r, 20) == 0 || split_input(data, size, &p) != 0)
        return mutate_bytes(data, size, max_size, &r);
    json_t *h = json_loadb(p.head, p.head_len, JSON_DECODE_ANY, NULL),
           *c = json_loadb(p.claims, p.claims_len, JSON_DECODE_ANY, NULL);
    size_t n = 0;
    if (json_is_object(h) && json_is_object(c)) {
        uint8_t sel = data[0];
        for (unsigned k = 1 + rnd(&r, 3); k > 0; k--) {
            if (rnd(&r, 12) == 0)
                sel = (uint8_t)rnd(&r, SIGNERS);
            else
                mutate_json(h, c, &r);
        }
        if (rnd(&r, 40) == 0) { /* not an object at all */
            json_decref(c);
            c = any_value(&r, 1);
        }
        n = write_parts(data, max_size, sel, h, c, &r);
    }
    json_decref(h);
    json_decref(c);
    return n > 0 ? n : mutate_bytes(data, size, max_size, &r);
}

/* ===========================================================================
 * Seeds and random inputs for the replay driver
 * ======================================================================== */

#define NSEEDS 4
static uint8_t seed_buf[NSEEDS][1024];
static size_t seed_len[NSEEDS];

static void make_seeds(fuzz_add_seed_fn *add)
{
    static const char claims_fmt[] = "{\"iss\":\"%s\",\"aud\":\"moat\",\"sub\":\"user-1\",\"tenant\":\"acme\","
                                     "\"scope\":\"execute runtimes\",\"exp\":%lld,\"nbf\":%lld,\"iat\":%lld}";
    const struct {
        uint8_t sel;
        const char *kid, *alg, *iss;
    } valid[NSEEDS] = {{0, fuzz_kid_hs1, "HS256", fuzz_iss_hs},
                       {8, fuzz_kid_hs2, "HS256", fuzz_iss_hs},
                       {10, fuzz_kid_es, "ES256", fuzz_iss_es},
                       {13, fuzz_kid_rs, "RS256", fuzz_iss_rs}};

    fuzz_jwt_init();
    for (int i = 0; i < NSEEDS; i++) {
        int n = snprintf((char *)seed_buf[i], sizeof(seed_buf[i]), "%c{\"alg\":\"%s\",\"typ\":\"JWT\",\"kid\":\"%s\"}\n",
                         valid[i].sel, valid[i].alg, valid[i].kid);
        CHECK(n > 0 && (size_t)n < sizeof(seed_buf[i]));
        int m = snprintf((char *)seed_buf[i] + n, sizeof(seed_buf[i]) - (size_t)n, claims_fmt, valid[i].iss,
                         (long long)FUZZ_NOW + 3600, (long long)FUZZ_NOW - 10, (long long)FUZZ_NOW - 10);
        CHECK(m > 0 && (size_t)(n + m) < sizeof(seed_buf[i]));
        seed_len[i] = (size_t)(n + m);
        /* each seed verifies: the oracle and the verifier agree on the way in */
        unsigned long before = accepted;
        LLVMFuzzerTestOneInput(seed_buf[i], seed_len[i]);
        CHECK(accepted == before + 1);
        add(seed_buf[i], seed_len[i], 0);
    }
}

/* A chain of structured mutations of a seed. */
static size_t random_input(uint8_t *buf, size_t cap, uint32_t (*rng)(void))
{
    int s = (int)(rng() % NSEEDS);
    size_t n = seed_len[s];
    memcpy(buf, seed_buf[s], n);
    for (unsigned k = 1 + rng() % 4; k > 0; k--)
        n = LLVMFuzzerCustomMutator(buf, n, cap > 16384 ? 16384 : cap, rng());
    return n;
}

const struct fuzz_target fuzz_target = {.make_seeds = make_seeds, .random_input = random_input};
