/*
 * http.h - the one place responses are sent from (step 11 of the request
 * path), so that every response carries X-Request-Id and a JSON content
 * type and produces exactly one log line.
 */
#ifndef GW_HTTP_H
#define GW_HTTP_H

#include "common/gw_limits.h"
#include "worker.h"
#include "limits/ratelimit.h"

struct gw_request;

/* Adds Retry-After: ms rounded up to whole seconds. */
void gw_add_retry_after(struct gw_request *r, uint64_t ms);

/* Adds RateLimit-Limit/Remaining/Reset (and Retry-After when refused). */
void gw_add_ratelimit_headers(struct gw_request *r, const struct rl_decision *d);

/* The request's one log line (gw_respond writes it; fallback.c for what
 * h2o answers itself). */
void gw_log_request(const struct gw_request *r, int status);

/* Send status with a JSON body (NUL-terminated).  Nothing may touch r afterwards. */
void gw_respond(struct gw_request *r, int status, const char *body);

/* Send {"message": message, "code": code, "request_id": ...} with status;
 * a 503 also gets Retry-After (GW_RETRY_AFTER_503_S) unless it has one. */
void gw_respond_error(struct gw_request *r, int status, const char *code, const char *message);

/* Add a response header before gw_respond*: name (lower case) and value
 * are literals or otherwise outlive the request (h2o keeps the pointers). */
void gw_add_header(struct gw_request *r, const char *name, const char *value);

/* Is the body's Content-Type application/json (a charset, if any, utf-8)?
 * (Piston's execute, Judge0's submissions, reviews) */
int gw_is_json_content_type(h2o_req_t *req);

/* The request is answered: count it (common/metrics.c) by tenant, route row
 * and status, and its duration.  gw_log_request calls it. */
void gw_metrics_request(const struct gw_request *r, int status, uint64_t us);

#endif /* GW_HTTP_H */
