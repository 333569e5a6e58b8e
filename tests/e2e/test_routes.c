/*
 * test_routes.c - a route linked only into moat-gateway-test-routes, the
 * test build of the gateway (tests/e2e/test_pipeline.py).
 *
 * It is written the way a new route is meant to be: a row and a handler
 * that only translates, with no audit, authentication or admission code at
 * all.  The test shows the pipeline still authenticates, admits and audits
 * it: a route cannot forget the audit trail.
 */
#include "core/routes.h"

#include <stdio.h>
#include <stdlib.h>

/* Step 9, without the backend: how many bytes the body had. */
static enum gw_flow answer(struct gw_request *r, const struct backend_reply *reply)
{
    char body[64];

    snprintf(body, sizeof(body), "{\"echoed_bytes\":%zu}", r->req->entity.len);
    if ((r->body = strdup(body)) == NULL)
        return gw_deny(r, 500, GW_REASON_BACKEND, "out of memory");
    return GW_NEXT;
}

static const struct gw_handler echo = {NULL, NULL, answer, NULL, NULL};

const struct gw_route gw_test_routes[] = {
    {"/test/echo", "POST", POLICY_EP_RUNTIMES, 0, &echo},
};
const size_t gw_test_nroutes = sizeof(gw_test_routes) / sizeof(gw_test_routes[0]);
