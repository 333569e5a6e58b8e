/*
 * router.c - route allow-list -> method -> authentication -> handler.
 *
 * Only the exact paths in routes[] exist; everything else is a JSON 404, so
 * nothing h2o might serve by default is reachable.
 */
#include "router.h"
#include "auth.h"
#include "handlers.h"
#include "log.h"

#include <string.h>

struct route {
    const char *path;
    const char *method;
    int auth;
    void (*handle)(struct gw_request *r);
};

static const struct route routes[] = {
    {"/healthz", "GET", 0, handle_healthz},
    {"/api/v2/runtimes", "GET", 1, handle_runtimes},
    {"/api/v2/execute", "POST", 1, handle_execute},
};

static const struct route *find_route(h2o_iovec_t path)
{
    size_t i;

    for (i = 0; i < sizeof(routes) / sizeof(routes[0]); i++)
        if (h2o_memis(path.base, path.len, routes[i].path, strlen(routes[i].path)))
            return &routes[i];
    return NULL;
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
        key = auth_bearer(r->cfg, req->headers.entries[i].value.base, req->headers.entries[i].value.len, &why);
    }
    if (key == NULL) {
        log_info("%s: id=%s: %s", __func__, r->request_id, why);
        gw_add_header(r, "www-authenticate", "Bearer");
        gw_respond_error(r, 401, "invalid or missing API key");
        return 0;
    }
    memcpy(r->key_id, key->id, sizeof(r->key_id));
    r->tenant = r->cfg->tenants[key->tenant].name;
    return 1;
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
    if (rt->auth && !authenticate(r))
        return 0;
    rt->handle(r);
    return 0;
}

void gw_router_register(h2o_pathconf_t *pathconf)
{
    h2o_handler_t *h = h2o_create_handler(pathconf, sizeof(*h));

    h->on_req = on_req;
}
