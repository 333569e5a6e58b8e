/*
 * http.h - the per-request context and the one place responses are sent
 * from, so that every response carries X-Request-Id and a JSON content type
 * and produces exactly one log line.
 */
#ifndef GW_HTTP_H
#define GW_HTTP_H

#include "gw_limits.h"
#include "server.h"

struct gw_request {
    h2o_req_t *req;
    struct gw_worker *worker;
    const struct gw_config *cfg;
    const char *tenant; /* NULL until authenticated */
    char key_id[APIKEY_ID_LEN + 1];
    char request_id[GW_REQUEST_ID_LEN + 1];
};

/*
 * Create the context for req in req->pool: it lives exactly as long as the
 * request, and counts towards worker->inflight until then.  NULL only if
 * the pool allocator fails (h2o aborts instead, in practice).
 */
struct gw_request *gw_request_new(h2o_req_t *req);

/* Send status with a JSON body (NUL-terminated).  Nothing may touch r afterwards. */
void gw_respond(struct gw_request *r, int status, const char *body);

/* Send {"message": message, "request_id": ...} with status. */
void gw_respond_error(struct gw_request *r, int status, const char *message);

/* Add a response header before gw_respond*. */
void gw_add_header(struct gw_request *r, const char *name, const char *value);

#endif /* GW_HTTP_H */
