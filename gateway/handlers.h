/*
 * handlers.h - one function per route.  The router has already checked the
 * method and, for protected routes, authenticated the caller.  Each handler
 * sends exactly one response, now or from a backend callback.
 */
#ifndef GW_HANDLERS_H
#define GW_HANDLERS_H

#include "backend_client.h"
#include "http.h"

void handle_healthz(struct gw_request *r);
void handle_runtimes(struct gw_request *r);
void handle_execute(struct gw_request *r);
void handle_not_found(struct gw_request *r);

/*
 * Shared by the backend-calling handlers: answer transport failures and
 * MOAT_MSG_ERROR replies.  Returns 1 if it responded, 0 if status is
 * BACKEND_OK and the reply is not an error (the caller handles it).
 */
int handle_backend_failure(struct gw_request *r, enum backend_status status, const struct backend_reply *reply);

/* Start a backend call on r's worker loop. */
void gw_backend_call(struct gw_request *r, struct moat_buf *frame, uint64_t job_id, backend_done_cb cb);
/* The same with the callback's data chosen by the caller. */
void gw_backend_call_with(struct gw_request *r, struct moat_buf *frame, uint64_t job_id, backend_done_cb cb, void *data);

#endif /* GW_HANDLERS_H */
