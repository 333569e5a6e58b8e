/*
 * routes.h - the route table: every path the gateway answers.
 */
#ifndef GW_ROUTES_H
#define GW_ROUTES_H

#include <stddef.h>

#include "request.h"

enum gw_route_flags {
    GW_ROUTE_NO_AUDIT = 1u << 0,     /* opt out of the audit trail (healthz); audited otherwise */
    GW_ROUTE_NO_ADMIT = 1u << 1,     /* not counted by the tenant's limiter */
    GW_ROUTE_EXECUTION = 1u << 2,    /* admission takes an in-flight slot; a result record follows */
    GW_ROUTE_X_AUTH_TOKEN = 1u << 4, /* the API key may also come as X-Auth-Token (Judge0's header) */
};

struct gw_route {
    const char *path;   /* after h2o's normalisation: exact, or with one "{name}" segment (any
                         * non-empty segment; text may follow it); exact rows are matched first */
    const char *method; /* the one method it answers (a path may have a row per method) */
    unsigned endpoint;  /* POLICY_EP_* the tenant and the credential must allow; 0: public, no authentication */
    unsigned flags;     /* GW_ROUTE_* */
    const struct gw_handler *handler;
};

/* The table the routes are found in (route_table.c's, at start, before
 * any worker runs); until then none is found. */
void gw_routes_install(const struct gw_route *table, size_t n);

/* The route for path, or NULL; *method_ok says whether method matches it. */
const struct gw_route *gw_route_find(const char *path, size_t path_len, const char *method, size_t method_len, int *method_ok);

/* The table's rows (*n of them): the metrics label requests by row. */
const struct gw_route *gw_routes(size_t *n);

/* rt's row number: i + 1 for row i of the table, 0 for none (NULL, or not
 * a row of it). */
unsigned gw_route_row(const struct gw_route *rt);

/* The "{name}" segment of path under rt (a parameterised route): 0 with
 * *param and *len set (pointing into path), or -1 (rt has no parameter). */
int gw_route_param(const struct gw_route *rt, const char *path, size_t path_len, const char **param, size_t *len);

/*
 * A test build may link extra routes (tests/unit: a route written without
 * any audit code, to show the pipeline audits it): a weak symbol, absent
 * from the shipped binaries.
 */
extern const struct gw_route gw_test_routes[] __attribute__((weak));
extern const size_t gw_test_nroutes __attribute__((weak));

#endif /* GW_ROUTES_H */
