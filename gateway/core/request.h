/*
 * request.h - one request on its way through the pipeline (pipeline.c):
 * its state, the steps' verdicts, a route's handler, and the refusal
 * every layer may give.  Types and inline setters only, below the
 * pipeline, so that what the pipeline calls (authentication, the
 * connection, the handlers) needs nothing of the pipeline itself.
 */
#ifndef GW_REQUEST_H
#define GW_REQUEST_H

#include <stdint.h>

#include <jansson.h>

#include "records/audit_reason.h"
#include "link/backend_client.h"
#include "common/gw_limits.h"
#include "moat_buf.h"
#include "worker.h"

struct gw_conn;
struct gw_route;
struct gw_audit_entry;

/* moat-gateway(8)'s numbered request-path steps, in order. */
enum gw_step {
    GW_STEP_CAPS,         /*  1. the connection's caps and abuse state */
    GW_STEP_FRAMING,      /*  2. HTTP/1 smuggling shapes, HTTP/2 field values */
    GW_STEP_ROUTE,        /*  3. exact route (404), then method (405) */
    GW_STEP_AUTHENTICATE, /*  4. API key or JWT (401) */
    GW_STEP_AUTHORIZE,    /*  5. the tenant's endpoints and the credential's scopes (403) */
    GW_STEP_ADMIT,        /*  6. the tenant's limiter (429, 503) */
    GW_STEP_PREPARE,      /*  7. the route's parse + policy, and its backend message */
    GW_STEP_DECISION,     /*  8. the decision record (allowed: durable before going on) */
    GW_STEP_BACKEND,      /*  9. the backend call, and the reply turned into a body */
    GW_STEP_RESULT,       /* 10. the result record (durable before the answer leaves) */
    GW_STEP_RESPOND,      /* 11. the response and the request's log line */
    GW_STEP_COUNT
};

/* What a step (or a callback finishing one) says happens next. */
enum gw_flow {
    GW_NEXT,   /* go on with the next step */
    GW_WAIT,   /* an answer comes later: its callback calls gw_step_done */
    GW_DENY,   /* refused: gw_deny() said why; the denial is recorded and answered */
    GW_REPEAT, /* run this step again (it fetched something it needed) */
    GW_TAKEN,  /* step 9 handed the request over (a WebSocket upgrade, a streamed
                * response): it answers and logs; no step runs after it */
};

/* One request, from h2o's on_req to its disposal; lives in req->pool. */
struct gw_request {
    h2o_req_t *req;
    struct gw_worker *worker;
    struct gw_generation *gen; /* held until the request is freed */
    const struct gw_config *cfg;
    struct gw_conn *conn; /* NULL if not one of ours */
    /* the client: the connection's, or a trusted proxy's X-Forwarded-For (proxies.c) */
    char client[INET6_ADDRSTRLEN];
    uint8_t client_key[16]; /* its per-address key (IPv6: the /64) */
    int has_client;         /* 0: not a socket we know ("?"; no per-address limits) */
    const struct gw_route *route;
    enum gw_step step;
    char request_id[GW_REQUEST_ID_LEN + 1];
    uint64_t started_ns; /* gw_monotonic_ns() when h2o handed the request over */
    /* step 4: who */
    const char *tenant; /* NULL until authenticated */
    const struct gw_tenant *tenant_cfg;
    unsigned scopes; /* POLICY_EP_* the credential may call */
    char key_id[80]; /* API key id, or "jwt:<issuer>/<kid>" */
    /* step 6 */
    struct rl_pending *admission; /* an answer still to come */
    enum rl_admission admit_kind; /* what admission checks and takes */
    int holds_slot;               /* an in-flight slot of the tenant's limiter */
    /* step 7 and 9: the route's own state, and what it leaves for the steps after it */
    void *job;             /* the handler's, in req->pool */
    struct moat_buf frame; /* the backend message; empty: answered without the backend */
    uint64_t job_id;
    uint64_t cpu_ms;       /* charged to the tenant's CPU budget when the slot goes back */
    const char *ws_key;    /* a WebSocket handshake's Sec-WebSocket-Key (h2o's) */
    json_t *result_fields; /* fields of the result record (compile, run) */
    int result_later;      /* the run goes on after the answer: its handler makes the result record */
    char *packet;          /* the full request and result for the audit pack */
    size_t packet_len;
    char *body;       /* the successful answer (malloc) */
    int ok_status;    /* its status when not 200 (Judge0's 201 Created) */
    char *error_body; /* a refusal's body in a route's own shape (malloc; Judge0's), instead of the usual one */
    /* the outcome */
    int status;              /* 0 until decided; >= 400 refused or failed */
    enum gw_reason reason;   /* why, when status >= 400 */
    const char *message;     /* for the client and the record */
    uint64_t retry_after_ms; /* denials.c: when the address may try again */
    const char *code;        /* the body's `code` when not gw_error_code(reason, status) */
    const char *rule;        /* the content rule that matched */
    const char *note;        /* for the log line only (static text) */
    /* audit */
    int recorded;                       /* the decision record went out */
    struct gw_audit_entry *audit_entry; /* a record this request waits for */
    /* the driver */
    int driving;  /* inside drive(): callbacks only leave their answer */
    int answered; /* a callback finished the current step while driving */
    enum gw_flow answer;
};

/* Step 7 and 9 of one route: a handler only translates. */
struct gw_handler {
    /* 7: parse and judge the request (gw_deny to refuse); put the backend
     * message in r->frame (r->job_id), or leave it empty to answer alone. NULL: none. */
    enum gw_flow (*prepare)(struct gw_request *r);
    /* 8: extra fields of the allowed decision record.  NULL: none. */
    void (*describe)(struct gw_request *r, json_t *record);
    /* 9: the backend's reply (NULL when r->frame was empty) into r->body; an
     * execution also sets r->cpu_ms, r->result_fields and r->packet. */
    enum gw_flow (*answer)(struct gw_request *r, const struct backend_reply *reply);
    /* 6, an execution's: does r's run wait in the submissions
     * queue (then its admission takes no in-flight slot)?  NULL: never. */
    int (*queued)(const struct gw_request *r);
    /* 4, for a handler whose credential is not a key or a JWT (a session
     * watcher's token): who asks.  NULL: gw_authenticate (core/auth.c). */
    enum gw_flow (*authenticate)(struct gw_request *r);
};

/* Refuse the request: status >= 400, a reason, and a message that outlives
 * the request (a literal).  Returns GW_DENY for the step to return.  (A
 * setter every layer uses, authentication too: inline.) */
static inline enum gw_flow gw_deny(struct gw_request *r, int status, enum gw_reason reason, const char *message)
{
    r->status = status;
    r->reason = reason;
    r->message = message;
    return GW_DENY;
}

/* The same with a message of any lifetime (copied into the request's pool). */
static inline enum gw_flow gw_deny_copy(struct gw_request *r, int status, enum gw_reason reason, const char *message)
{
    return gw_deny(r, status, reason, h2o_strdup(&r->req->pool, message, SIZE_MAX).base);
}

#endif /* GW_REQUEST_H */
