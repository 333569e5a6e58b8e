/*
 * auth.c - step 4 of the request path: who is asking.
 *
 * One Authorization header, one Bearer parser; on the routes of Judge0's
 * API (GW_ROUTE_X_AUTH_TOKEN) the same token may come as Judge0's
 * "X-Auth-Token: <token>" instead, never both.  A token holding a '.' and
 * not starting "moat_" is a JWT (three base64url segments): jwt_auth.c
 * verifies it against the configured issuers and the tenant comes from its
 * tenant claim.  Anything else is an API key: shape and checksum first,
 * then the key id's table entry and a constant-time comparison of SHA-256
 * digests.  A connection that re-sends the key it authenticated with under
 * the same configuration generation skips the parse and the digests
 * (conn.c's cache, compared in constant time).
 */
#include "auth.h"
#include "conn.h"
#include "http.h"
#include "auth/keyuse.h"
#include "routes.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <openssl/crypto.h>

#define BEARER     "Bearer"
#define BEARER_LEN 6

int auth_bearer_token(const char *value, size_t len, const char **token, size_t *toklen)
{
    size_t i;

    /* a field value has no leading or trailing white space (RFC 9110 5.5):
     * h2o keeps trailing SP/HTAB, so they go here */
    while (value != NULL && len > 0 && (value[len - 1] == ' ' || value[len - 1] == '\t'))
        len--;
    if (value == NULL || len <= BEARER_LEN || strncasecmp(value, BEARER, BEARER_LEN) != 0 || value[BEARER_LEN] != ' ')
        return -1;
    for (i = BEARER_LEN; i < len && value[i] == ' '; i++)
        ;
    if (i == len)
        return -1;
    *token = value + i;
    *toklen = len - i;
    return 0;
}

const struct gw_key *auth_bearer(const struct gw_config *cfg, const char *value, size_t len, const char **why)
{
    const char *token;

    if (value == NULL) {
        *why = "no Authorization header";
        return NULL;
    }
    if (auth_bearer_token(value, len, &token, &len) != 0) {
        *why = "not a Bearer credential";
        return NULL;
    }
    return auth_key(cfg, token, len, why);
}

const struct gw_key *auth_key(const struct gw_config *cfg, const char *token, size_t len, const char **why)
{
    char id[APIKEY_ID_LEN + 1];
    uint8_t digest[APIKEY_DIGEST_LEN];
    const struct gw_key *key;
    int equal;

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

enum gw_flow gw_unauthorized(struct gw_request *r, const char *why, const char *challenge, const char *message)
{
    r->note = why;
    gw_add_header(r, "www-authenticate", challenge);
    return gw_deny(r, 401, GW_REASON_AUTH, message);
}

static int is_jwt(const char *token, size_t len)
{
    return !(len >= 5 && memcmp(token, "moat_", 5) == 0) && memchr(token, '.', len) != NULL;
}

/*
 * A JWT from a configured issuer: the tenant comes from its tenant claim (one
 * the issuer is bound to), the scopes from its scopes claim: the names that
 * are endpoints in policy's table (others grant nothing, and no claim grants
 * nothing); policy_authorize() then intersects them with the tenant's.
 */
static enum gw_flow authenticate_jwt(struct gw_request *r, const char *token, size_t len)
{
    struct jwt_identity id;
    const char *why = NULL;
    const struct gw_tenant *t;
    char *name, *save = NULL;
    unsigned bit;

    if (r->cfg->nissuers == 0 || jwt_verify(r->cfg->issuers, r->cfg->nissuers, token, len, time(NULL), &id, &why) != 0)
        return gw_unauthorized(r, why != NULL ? why : "no JWT issuers configured", "Bearer", "invalid or missing bearer token");
    if ((t = gw_config_find_tenant(r->cfg, id.tenant)) == NULL)
        return gw_unauthorized(r, "JWT names an unknown tenant", "Bearer", "invalid or missing bearer token");
    snprintf(r->key_id, sizeof(r->key_id), "jwt:%.32s/%.32s", id.issuer->name, id.kid);
    r->tenant_cfg = t;
    r->tenant = t->name;
    r->scopes = 0;
    for (name = strtok_r(id.scope, " ", &save); name != NULL; name = strtok_r(NULL, " ", &save))
        if (policy_endpoint_from_name(name, &bit) == 0)
            r->scopes |= bit;
    return GW_NEXT;
}

/* An API key, from the connection's cache when it is the same token again. */
static const struct gw_key *api_key(struct gw_request *r, const char *token, size_t toklen, const char **why)
{
    unsigned serial = r->gen->serial;
    const struct gw_key *key = gw_conn_cached_key(r->conn, serial, token, toklen);

    if (key != NULL)
        return key;
    key = auth_key(r->cfg, token, toklen, why);
    if (key != NULL)
        gw_conn_cache_key(r->conn, serial, token, toklen, key);
    return key;
}

/* Judge0's X-Auth-Token on a route that takes it: 0 none, 1 found (*token
 * the value without surrounding white space), -1 more than one. */
static int x_auth_token(struct gw_request *r, const char **token, size_t *toklen)
{
    static const char name[] = "x-auth-token";
    h2o_req_t *req = r->req;
    ssize_t i;

    if ((r->route->flags & GW_ROUTE_X_AUTH_TOKEN) == 0 ||
        (i = h2o_find_header_by_str(&req->headers, name, sizeof(name) - 1, -1)) == -1)
        return 0;
    if (h2o_find_header_by_str(&req->headers, name, sizeof(name) - 1, i) != -1)
        return -1;
    const char *v = req->headers.entries[i].value.base;
    size_t len = req->headers.entries[i].value.len;
    while (len > 0 && (*v == ' ' || *v == '\t'))
        v++, len--;
    while (len > 0 && (v[len - 1] == ' ' || v[len - 1] == '\t'))
        len--;
    *token = v;
    *toklen = len;
    return 1;
}

/* A refused key's id, when the token is well formed: the record of the
 * refusal says which key was presented (never its secret). */
static void presented_key_id(struct gw_request *r, const char *token, size_t toklen)
{
    char id[APIKEY_ID_LEN + 1];
    const char *why;

    _Static_assert(sizeof(id) <= sizeof(r->key_id), "a key id fits");
    if (token != NULL && apikey_parse(token, toklen, id, &why) == 0)
        memcpy(r->key_id, id, sizeof(id));
}

enum gw_flow gw_authenticate(struct gw_request *r)
{
    h2o_req_t *req = r->req;
    const struct gw_key *key;
    const char *why = NULL, *token = NULL;
    size_t toklen = 0;
    ssize_t i = h2o_find_header(&req->headers, H2O_TOKEN_AUTHORIZATION, -1);

    int judge0 = x_auth_token(r, &token, &toklen);

    if (i != -1 && h2o_find_header(&req->headers, H2O_TOKEN_AUTHORIZATION, i) != -1)
        return gw_unauthorized(r, "more than one Authorization header", "Bearer", "invalid or missing API key");
    if (judge0 < 0)
        return gw_unauthorized(r, "more than one X-Auth-Token header", "Bearer", "invalid or missing API key");
    if (judge0 > 0 && i != -1)
        return gw_unauthorized(r, "both Authorization and X-Auth-Token", "Bearer",
                               "invalid or missing API key: send one credential");
    if (i == -1 && judge0 == 0) {
        key = auth_bearer(r->cfg, NULL, 0, &why);
    } else {
        if (judge0 == 0) {
            h2o_iovec_t v = req->headers.entries[i].value;
            if (auth_bearer_token(v.base, v.len, &token, &toklen) != 0)
                token = NULL;
        }
        if (token != NULL && is_jwt(token, toklen))
            return authenticate_jwt(r, token, toklen);
        key = token != NULL ? api_key(r, token, toklen, &why) : NULL;
        if (token == NULL)
            why = "not a Bearer credential";
    }
    if (key == NULL) {
        presented_key_id(r, token, toklen);
        return gw_unauthorized(r, why, "Bearer", "invalid or missing API key");
    }
    _Static_assert(sizeof(key->id) <= sizeof(r->key_id), "a key id fits");
    memcpy(r->key_id, key->id, sizeof(key->id)); /* NUL-terminated at load */
    time_t now = time(NULL);
    if (key->expires != 0 && now >= key->expires) {
        r->code = gw_code(GW_CODE_TOKEN_EXPIRED);
        return gw_unauthorized(r, "key expired", "Bearer error=\"invalid_token\"", "API key expired");
    }
    gw_keyuse_note(key->id, now); /* moatctl key list: last used */
    r->tenant_cfg = &r->cfg->tenants[key->tenant];
    r->tenant = r->tenant_cfg->name;
    r->scopes = key->scopes;
    return GW_NEXT;
}
