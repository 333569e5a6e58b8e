/*
 * handler_healthz.c - GET /healthz (no auth) and the 404 answer.
 */
#include "handlers.h"

void handle_healthz(struct gw_request *r)
{
    r->audit_skip = 1;
    gw_respond(r, 200, "{\"status\":\"ok\"}");
}

void handle_not_found(struct gw_request *r)
{
    gw_respond_error(r, 404, "not found");
}
