/*
 * routes.c - finding a request's route in the one table of routes
 * (route_table.c, installed at start: the rows name the handlers, which
 * sit above the request core; this file, below it, only matches).
 *
 * Only the paths below exist; everything else is a JSON 404, so nothing
 * h2o might serve by default is reachable.  A path is exact, or holds one
 * "{name}" segment that matches any one non-empty segment, with the same
 * text before and after it (the handler reads it with gw_route_param);
 * exact rows win over parameterised ones ("/submissions/batch" is not a
 * token).  A path may have a row per
 * method; another method gets 405.  Adding a route is one
 * row in route_table.c and a handler (struct gw_handler) that translates the request
 * into a backend message and the reply into a body: authentication,
 * authorization, admission and the audit trail come from the pipeline, and
 * a route is audited unless its row says GW_ROUTE_NO_AUDIT.
 */
#include "routes.h"

#include <string.h>

/* The table main.c installed (route_table.c); none before: every path a 404. */
static const struct gw_route *routes;
static size_t nroutes;

void gw_routes_install(const struct gw_route *table, size_t n)
{
    routes = table;
    nroutes = n;
}

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
    *n = nroutes;
    return routes;
}

const struct gw_route *gw_route_find(const char *path, size_t path_len, const char *method, size_t method_len, int *method_ok)
{
    const struct gw_route *rt = match(routes, nroutes, path, path_len, method, method_len);

    if (rt == NULL && &gw_test_nroutes != NULL && gw_test_routes != NULL)
        rt = match(gw_test_routes, gw_test_nroutes, path, path_len, method, method_len);
    *method_ok = rt != NULL && same_method(rt, method, method_len);
    return rt;
}

unsigned gw_route_row(const struct gw_route *rt)
{
    if (rt == NULL || routes == NULL || rt < routes || rt >= routes + nroutes)
        return 0;
    return (unsigned)(rt - routes) + 1;
}
