/*
 * handler_healthz.c - GET /healthz: public, not audited, not admitted
 * (routes.c); answers without the backend.
 */
#include "pipeline.h"

#include <stdlib.h>
#include <string.h>

static enum gw_flow answer(struct gw_request *r, const struct backend_reply *reply)
{
    if ((r->body = strdup("{\"status\":\"ok\"}")) == NULL)
        return gw_deny(r, 500, GW_REASON_BACKEND, "out of memory");
    return GW_NEXT;
}

const struct gw_handler gw_handler_healthz = {NULL, NULL, answer};
