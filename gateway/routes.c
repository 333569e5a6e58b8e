/*
 * routes.c - the one table of routes.
 *
 * Only the exact paths below exist; everything else is a JSON 404, so
 * nothing h2o might serve by default is reachable.  Adding a route is one
 * row here and a handler (struct gw_handler) that translates the request
 * into a backend message and the reply into a body: authentication,
 * authorization, admission and the audit trail come from the pipeline, and
 * a route is audited unless its row says GW_ROUTE_NO_AUDIT.
 */
#include "routes.h"
#include "policy.h"

#include <string.h>

static const struct gw_route routes[] = {
    /* path, method, endpoint (authorization; 0 public), flags, handler */
    {"/healthz", "GET", 0, GW_ROUTE_NO_AUDIT | GW_ROUTE_NO_ADMIT, &gw_handler_healthz},
    {"/readyz", "GET", 0, GW_ROUTE_NO_AUDIT | GW_ROUTE_NO_ADMIT, &gw_handler_readyz},
    {"/api/v2/runtimes", "GET", POLICY_EP_RUNTIMES, 0, &gw_handler_runtimes},
    {"/api/v2/execute", "POST", POLICY_EP_EXECUTE, GW_ROUTE_EXECUTION, &gw_handler_execute},
    {"/api/v2/connect", "GET", POLICY_EP_CONNECT, 0, &gw_handler_connect}, /* a live session: WebSocket */
    {"/api/v2/watch", "GET", POLICY_EP_WATCH, GW_ROUTE_WATCH, &gw_handler_watch},
};

static const struct gw_route *match(const struct gw_route *table, size_t n, const char *path, size_t path_len)
{
    for (size_t i = 0; i < n; i++)
        if (strlen(table[i].path) == path_len && memcmp(table[i].path, path, path_len) == 0)
            return &table[i];
    return NULL;
}

const struct gw_route *gw_route_find(const char *path, size_t path_len, const char *method, size_t method_len, int *method_ok)
{
    const struct gw_route *rt = match(routes, sizeof(routes) / sizeof(routes[0]), path, path_len);

    if (rt == NULL && &gw_test_nroutes != NULL && gw_test_routes != NULL)
        rt = match(gw_test_routes, gw_test_nroutes, path, path_len);
    *method_ok = rt != NULL && strlen(rt->method) == method_len && memcmp(rt->method, method, method_len) == 0;
    return rt;
}
