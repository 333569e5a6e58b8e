/*
 * pipeline.h - the request path: one state machine from the first byte of
 * a request to its one response (see pipeline.c for the theory of
 * operation, routes.c for the routes; request.h for the request itself).
 */
#ifndef GW_PIPELINE_H
#define GW_PIPELINE_H

#include <jansson.h>

#include "records/audit_records.h"
#include "link/backend_client.h"
#include "request.h"

/* The record of a refusal nobody waits for ("request"/"denied", or an
 * execution's "result"/"failed"), built without allocating when it can. */
void gw_record_refusal(struct gw_request *r, const char *type, const char *decision);

/* A step that returned GW_WAIT is finished: how to go on (GW_NEXT, GW_DENY
 * after gw_deny, or GW_REPEAT).  May be called from inside the step. */
void gw_step_done(struct gw_request *r, enum gw_flow flow);

/*
 * A wait that may outlive its request (an answer from Redis): r is NULL
 * once h2o disposed of the request (a guard in the request's pool points
 * back).  The waiting thing embeds one, starts it with the request, ends
 * it when its answer comes (before it is freed), and then finds r or
 * NULL.
 */
struct gw_req_watch {
    struct gw_request *r;
    struct gw_req_watch **guard; /* in the request's pool */
};
/* Watch r: 0, or -1 out of memory. */
int gw_req_watch_start(struct gw_req_watch *w, struct gw_request *r);
/* The wait is over: w may be freed after it. */
void gw_req_watch_end(struct gw_req_watch *w);

/* An execution that goes on after its answer (step 9) takes over r's
 * in-flight slot: the pipeline no longer gives it back, and no result
 * record follows the answer; the caller calls rl_release once the run is
 * over, and records the result itself.  Returns whether r held a slot. */
int gw_take_slot(struct gw_request *r);

/* r->client and r->client_key, from r->conn and, when the connection's
 * client is a trusted proxy, X-Forwarded-For (after r->request_id is
 * made: a log line may name it). */
void gw_request_client(struct gw_request *r);

/* Who asked, for a record made after r is gone: the fields point into r
 * (copy them). */
void gw_request_who(struct gw_request *r, struct gw_audit_who *who);

/* A backend call that failed (status != BACKEND_OK) or answered
 * MOAT_MSG_ERROR (only then is reply->u.error read), as a refusal with the right HTTP status (503, 504, 502; 400/500/503 by error
 * code). */
enum gw_flow gw_backend_failure(struct gw_request *r, enum backend_status status, const struct backend_reply *reply);

/* Start a backend call for r on its worker's loop (frame is taken). */
void gw_backend_call(struct gw_request *r, struct moat_buf *frame, uint64_t job_id, backend_done_cb cb, void *data);

/* A fresh request id (GW_REQUEST_ID_LEN hex digits) from the worker's
 * pool of random bytes. */
void gw_new_request_id(char out[GW_REQUEST_ID_LEN + 1]);

/* Register the one h2o handler that runs every request through the steps. */
void gw_pipeline_register(h2o_pathconf_t *pathconf);

#endif /* GW_PIPELINE_H */
