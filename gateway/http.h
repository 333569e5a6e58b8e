/*
 * http.h - the per-request context and the one place responses are sent
 * from, so that every response carries X-Request-Id and a JSON content type
 * and produces exactly one log line.
 */
#ifndef GW_HTTP_H
#define GW_HTTP_H

#include "gw_limits.h"
#include "server.h"
#include "audit_records.h"

struct gw_request {
    h2o_req_t *req;
    struct gw_worker *worker;
    const struct gw_config *cfg;
    const char *tenant; /* NULL until authenticated */
    const struct gw_tenant *tenant_cfg;
    unsigned scopes; /* POLICY_EP_* the credential may call */
    char key_id[80]; /* API key id, or "jwt:<issuer>/<kid>" */
    int admitted;    /* holds an in-flight slot of the tenant's limiter */
    char request_id[GW_REQUEST_ID_LEN + 1];
    /* audit (audit/FORMAT.md) */
    const char *reason;                 /* why a request was denied; NULL: from the status */
    const char *rule;                   /* the content rule that matched */
    const char *note;                   /* why, for the request's one log line (static text) */
    int audit_skip;                     /* not audited (/healthz) */
    int audited;                        /* the request's decision record went out */
    int executing;                      /* allowed to execute: what follows is a result record */
    struct gw_audit_entry *audit_entry; /* a record this request waits for */
};

/* The decision record of r (denied unless status < 400), sent without
 * waiting; a result record instead for an execution that was allowed. */
void gw_audit_decision(struct gw_request *r, int status, const char *message);
/* Who asked: the fields every record starts with. */
void gw_audit_who(struct gw_request *r, struct gw_audit_who *who, char *client, size_t clientlen);

/*
 * Create the context for req in req->pool: it lives exactly as long as the
 * request, and counts towards worker->inflight until then.  NULL only if
 * the pool allocator fails (h2o aborts instead, in practice).
 */
struct gw_request *gw_request_new(h2o_req_t *req);

/* Ends an admitted execution: frees its in-flight slot and charges the
 * CPU time it used to the tenant's budget.  Idempotent; the request's
 * disposal calls it with 0 if nothing did. */
void gw_request_release(struct gw_request *r, uint64_t cpu_ms);

/* Adds RateLimit-Limit/Remaining/Reset (and Retry-After when refused). */
void gw_add_ratelimit_headers(struct gw_request *r, const struct rl_decision *d);

/* Send status with a JSON body (NUL-terminated).  Nothing may touch r afterwards. */
void gw_respond(struct gw_request *r, int status, const char *body);

/* Send {"message": message, "request_id": ...} with status. */
void gw_respond_error(struct gw_request *r, int status, const char *message);

/* Add a response header before gw_respond*: name (lower case) and value
 * are literals or otherwise outlive the request (h2o keeps the pointers). */
void gw_add_header(struct gw_request *r, const char *name, const char *value);

#endif /* GW_HTTP_H */
