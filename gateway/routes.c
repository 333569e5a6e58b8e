/*
 * routes.c - the one table of routes.
 *
 * Only the paths below exist; everything else is a JSON 404, so nothing
 * h2o might serve by default is reachable.  A path is exact, or holds one
 * "{name}" segment that matches any one non-empty segment, with the same
 * text before and after it (the handler reads it with gw_route_param);
 * exact rows win over parameterised ones ("/submissions/batch" is not a
 * token).  A path may have a row per
 * method; another method gets 405.  Adding a route is one
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
    /* Judge0 CE's API (judge0_handlers.c) */
    {"/languages", "GET", POLICY_EP_LANGUAGES, GW_ROUTE_X_AUTH_TOKEN, &gw_handler_judge0_languages},
    {"/languages/{id}", "GET", POLICY_EP_LANGUAGES, GW_ROUTE_X_AUTH_TOKEN, &gw_handler_judge0_language},
    {"/statuses", "GET", POLICY_EP_LANGUAGES, GW_ROUTE_X_AUTH_TOKEN, &gw_handler_judge0_statuses},
    {"/about", "GET", POLICY_EP_LANGUAGES, GW_ROUTE_X_AUTH_TOKEN, &gw_handler_judge0_about},
    {"/config_info", "GET", POLICY_EP_LANGUAGES, GW_ROUTE_X_AUTH_TOKEN, &gw_handler_judge0_config_info},
    {"/submissions", "POST", POLICY_EP_SUBMISSIONS, GW_ROUTE_EXECUTION | GW_ROUTE_MAY_QUEUE | GW_ROUTE_X_AUTH_TOKEN,
     &gw_handler_judge0_submit},
    {"/submissions/batch", "GET", POLICY_EP_SUBMISSIONS, GW_ROUTE_X_AUTH_TOKEN, &gw_handler_judge0_batch},
    {"/submissions/batch", "POST", POLICY_EP_SUBMISSIONS, GW_ROUTE_EXECUTION | GW_ROUTE_MAY_QUEUE | GW_ROUTE_X_AUTH_TOKEN,
     &gw_handler_judge0_batch_submit},
    {"/submissions/{token}", "GET", POLICY_EP_SUBMISSIONS, GW_ROUTE_X_AUTH_TOKEN, &gw_handler_judge0_submission},
    /* result packets and reviews (handler_executions.c) */
    {"/api/v2/executions/{id}", "GET", POLICY_EP_PACKETS, 0, &gw_handler_execution},
    {"/api/v2/executions/{id}/reviews", "POST", POLICY_EP_REVIEW, 0, &gw_handler_execution_review},
};

/* Where a row's "{name}" segment starts (its prefix's length), or -1. */
static long param_at(const char *pattern)
{
    const char *brace = strchr(pattern, '{');

    return brace != NULL ? brace - pattern : -1;
}

/* The text after a row's "{name}" (empty when it ends the path). */
static const char *param_suffix(const char *pattern, long at)
{
    const char *close = strchr(pattern + at, '}');

    return close != NULL ? close + 1 : "";
}

/* Does path fit row's pattern: exact (params 0), or a parameterised one (params 1)? */
static int fits(const struct gw_route *row, const char *path, size_t path_len, int params)
{
    long at = param_at(row->path);
    const char *suffix;
    size_t slen;

    if (!params)
        return at < 0 && strlen(row->path) == path_len && memcmp(row->path, path, path_len) == 0;
    if (at < 0)
        return 0;
    suffix = param_suffix(row->path, at);
    slen = strlen(suffix);
    return path_len > (size_t)at + slen && memcmp(row->path, path, (size_t)at) == 0 &&
           memcmp(path + path_len - slen, suffix, slen) == 0 && memchr(path + at, '/', path_len - slen - (size_t)at) == NULL;
}

static int same_method(const struct gw_route *row, const char *method, size_t method_len)
{
    return strlen(row->method) == method_len && memcmp(row->method, method, method_len) == 0;
}

/* The row for path and method; else the first row for path (a 405), or NULL. */
static const struct gw_route *match(const struct gw_route *table, size_t n, const char *path, size_t path_len, const char *method,
                                    size_t method_len)
{
    for (int params = 0; params <= 1; params++) {
        const struct gw_route *first = NULL;
        for (size_t i = 0; i < n; i++) {
            if (!fits(&table[i], path, path_len, params))
                continue;
            if (same_method(&table[i], method, method_len))
                return &table[i];
            if (first == NULL)
                first = &table[i];
        }
        if (first != NULL)
            return first;
    }
    return NULL;
}

int gw_route_param(const struct gw_route *rt, const char *path, size_t path_len, const char **param, size_t *len)
{
    long at = param_at(rt->path);
    size_t slen;

    if (at < 0)
        return -1;
    slen = strlen(param_suffix(rt->path, at));
    if (path_len <= (size_t)at + slen)
        return -1;
    *param = path + at;
    *len = path_len - slen - (size_t)at;
    return 0;
}

const struct gw_route *gw_routes(size_t *n)
{
    *n = sizeof(routes) / sizeof(routes[0]);
    return routes;
}

const struct gw_route *gw_route_find(const char *path, size_t path_len, const char *method, size_t method_len, int *method_ok)
{
    const struct gw_route *rt = match(routes, sizeof(routes) / sizeof(routes[0]), path, path_len, method, method_len);

    if (rt == NULL && &gw_test_nroutes != NULL && gw_test_routes != NULL)
        rt = match(gw_test_routes, gw_test_nroutes, path, path_len, method, method_len);
    *method_ok = rt != NULL && same_method(rt, method, method_len);
    return rt;
}
