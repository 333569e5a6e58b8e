/*
 * router.c - route allow-list -> method -> authentication -> handler.
 *
 * Only the exact paths in routes[] exist; everything else is a JSON 404, so
 * nothing h2o might serve by default is reachable.
 */
#include "router.h"
#include "conn.h"
#include "auth.h"
#include "handlers.h"
#include "log.h"

#include <string.h>
#include <strings.h>
#include <time.h>

struct route {
    const char *path;
    const char *method;
    unsigned endpoint; /* POLICY_EP_* bit; 0: no authentication (healthz) */
    void (*handle)(struct gw_request *r);
};

static const struct route routes[] = {
    {"/healthz", "GET", 0, handle_healthz},
    {"/api/v2/runtimes", "GET", POLICY_EP_RUNTIMES, handle_runtimes},
    {"/api/v2/execute", "POST", POLICY_EP_EXECUTE, handle_execute},
};

static const struct route *find_route(h2o_iovec_t path)
{
    size_t i;

    for (i = 0; i < sizeof(routes) / sizeof(routes[0]); i++)
        if (h2o_memis(path.base, path.len, routes[i].path, strlen(routes[i].path)))
            return &routes[i];
    return NULL;
}

static void unauthorized(struct gw_request *r, const char *why, const char *message)
{
    r->note = why;
    gw_add_header(r, "www-authenticate", "Bearer");
    gw_respond_error(r, 401, message);
}

/* A JWT from a configured issuer: the tenant comes from its tenant claim. */
static int authenticate_jwt(struct gw_request *r, const char *token, size_t len)
{
    struct jwt_identity id;
    const char *why = NULL;
    const struct gw_tenant *t;

    if (r->cfg->nissuers == 0 || jwt_verify(r->cfg->issuers, r->cfg->nissuers, token, len, time(NULL), &id, &why) != 0) {
        unauthorized(r, why != NULL ? why : "no JWT issuers configured", "invalid or missing bearer token");
        return 0;
    }
    if ((t = gw_config_find_tenant(r->cfg, id.tenant)) == NULL) {
        unauthorized(r, "JWT names an unknown tenant", "invalid or missing bearer token");
        return 0;
    }
    snprintf(r->key_id, sizeof(r->key_id), "jwt:%.32s/%.32s", id.issuer->name, id.kid);
    r->tenant_cfg = t;
    r->tenant = t->name;
    r->scopes = POLICY_EP_ALL;
    return 1;
}

/* 1 if authenticated (r->tenant set); otherwise responds 401 and returns 0. */
static int authenticate(struct gw_request *r)
{
    h2o_req_t *req = r->req;
    const struct gw_key *key;
    const char *why = NULL;
    ssize_t i = h2o_find_header(&req->headers, H2O_TOKEN_AUTHORIZATION, -1);

    if (i != -1 && h2o_find_header(&req->headers, H2O_TOKEN_AUTHORIZATION, i) != -1) {
        why = "more than one Authorization header";
        key = NULL;
    } else if (i == -1) {
        key = auth_bearer(r->cfg, NULL, 0, &why);
    } else {
        h2o_iovec_t v = req->headers.entries[i].value;
        /* "Bearer <JWT>": three base64url segments, never an API key */
        if (v.len > 7 && strncasecmp(v.base, "Bearer ", 7) == 0 && !h2o_memis(v.base + 7, v.len < 12 ? v.len - 7 : 5, "moat_", 5) &&
            memchr(v.base + 7, '.', v.len - 7) != NULL)
            return authenticate_jwt(r, v.base + 7, v.len - 7);
        /* a connection sending the key it sent before skips the parse and
         * the two SHA-256 computations (same bytes, same configuration) */
        struct gw_conn *gc = gw_conn_of(req);
        unsigned serial = H2O_STRUCT_FROM_MEMBER(struct gw_generation, cfg, r->cfg)->serial;
        int bearer = v.len > 7 && strncasecmp(v.base, "Bearer ", 7) == 0;
        key = bearer ? gw_conn_cached_key(gc, serial, v.base + 7, v.len - 7) : NULL;
        if (key == NULL) {
            key = auth_bearer(r->cfg, v.base, v.len, &why);
            if (key != NULL && bearer)
                gw_conn_cache_key(gc, serial, v.base + 7, v.len - 7, key);
        }
    }
    if (key == NULL) {
        r->note = why;
        gw_add_header(r, "www-authenticate", "Bearer");
        gw_respond_error(r, 401, "invalid or missing API key");
        return 0;
    }
    _Static_assert(sizeof(key->id) <= sizeof(r->key_id), "a key id fits");
    memcpy(r->key_id, key->id, sizeof(key->id)); /* NUL-terminated at load */
    if (key->expires != 0 && time(NULL) >= key->expires) {
        r->note = "key expired";
        gw_add_header(r, "www-authenticate", "Bearer error=\"invalid_token\"");
        gw_respond_error(r, 401, "API key expired");
        return 0;
    }
    r->tenant_cfg = &r->cfg->tenants[key->tenant];
    r->tenant = r->tenant_cfg->name;
    r->scopes = key->scopes;
    return 1;
}

/* The tenant's endpoint allow-list and the credential's scopes. */
static int endpoint_allowed(struct gw_request *r, unsigned endpoint)
{
    if ((r->tenant_cfg->policy.endpoints & endpoint) == 0) {
        gw_respond_error(r, 403, "this endpoint is not allowed for this tenant");
        return 0;
    }
    if ((r->scopes & endpoint) == 0) {
        gw_respond_error(r, 403, "this endpoint is outside the credential's scopes");
        return 0;
    }
    return 1;
}

struct admission {
    struct gw_request *r;
    const struct route *rt;
};

/* The limiter's answer (now, or later from a shared store). */
static void on_admission(void *arg, const struct rl_decision *d)
{
    struct admission *a = arg;
    struct gw_request *r = a->r;

    gw_add_ratelimit_headers(r, d);
    if (d->allowed) {
        r->admitted = a->rt->endpoint == POLICY_EP_EXECUTE;
        a->rt->handle(r);
        return;
    }
    r->reason = d->reason == RL_CONCURRENCY ? "concurrency" : d->reason == RL_QUOTA ? "quota" : "rate";
    switch (d->reason) {
    case RL_RATE:
        gw_respond_error(r, 429, "rate limit exceeded for this tenant");
        break;
    case RL_CONCURRENCY:
        gw_respond_error(r, 429, "too many executions in flight for this tenant");
        break;
    case RL_QUOTA:
        gw_respond_error(r, 429, "CPU-time budget for this tenant used up; try again later");
        break;
    default:
        /* the limiter could not decide: fail closed */
        gw_respond_error(r, 503, "rate limiter unavailable");
        break;
    }
}

static void admit(struct gw_request *r, const struct route *rt)
{
    const struct tenant_policy *p = &r->tenant_cfg->policy;
    struct rl_params params = {p->rate_per_second, p->burst, p->max_in_flight, p->cpu_ms_per_minute};
    struct admission *a = h2o_mem_alloc_pool(&r->req->pool, sizeof(*a));

    a->r = r;
    a->rt = rt;
    if (rt->endpoint == POLICY_EP_EXECUTE)
        rl_admit(r->worker->server->limiter, r->tenant, &params, rl_monotonic_ms(), on_admission, a);
    else
        rl_admit_rate_only(r->worker->server->limiter, r->tenant, &params, rl_monotonic_ms(), on_admission, a);
}

static int on_req(h2o_handler_t *self, h2o_req_t *req)
{
    struct gw_request *r = gw_request_new(req);
    const struct route *rt;

    if (r == NULL)
        return -1;
    if ((rt = find_route(req->path_normalized)) == NULL) {
        handle_not_found(r);
        return 0;
    }
    if (!h2o_memis(req->method.base, req->method.len, rt->method, strlen(rt->method))) {
        gw_add_header(r, "allow", rt->method);
        gw_respond_error(r, 405, "method not allowed");
        return 0;
    }
    if (rt->endpoint == 0) {
        rt->handle(r);
        return 0;
    }
    if (!authenticate(r) || !endpoint_allowed(r, rt->endpoint))
        return 0;
    admit(r, rt);
    return 0;
}

void gw_router_register(h2o_pathconf_t *pathconf)
{
    h2o_handler_t *h = h2o_create_handler(pathconf, sizeof(*h));

    h->on_req = on_req;
}
