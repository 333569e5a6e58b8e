/*
 * pipeline.c - the request path, as one state machine.
 *
 * Theory of operation
 * -------------------
 * h2o calls on_req() once per request.  It makes a struct gw_request in the
 * request's pool (holding the configuration generation the request starts
 * with, so a SIGHUP cannot free what it reads) and drive() runs it through
 * moat-gateway(8)'s numbered steps, in order, each a small function that either
 * passes the request on (GW_NEXT), refuses it (gw_deny: GW_DENY), or waits
 * for an answer from the event loop (GW_WAIT):
 *
 *    1 caps          the connection is being closed, or over its HTTP/2
 *                    reset budget (429)                       conn.c
 *    2 framing       smuggling shapes and header values (400) framing.c
 *    3 route         exact path (404), then the method (405)  routes.c
 *    4 authenticate  API key or JWT (401)                     auth.c
 *    5 authorize     endpoint and scopes (403)                policy/
 *    6 admit         the tenant's limiter (429; 503 when it cannot decide);
 *                    a run that waits in the Judge0 submissions queue
 *                    takes no in-flight slot (judge0_queue.c)
 *    7 prepare       the route's parse + policy and backend message
 *    8 decision      the audit decision record
 *    9 backend       the backend call; the reply turned into a body
 *   10 result        the audit result record of an execution
 *   11 respond       the answer and the request's one log line
 *
 * A refusal at any step skips to the record of it and the answer: before
 * step 8, a denial record ("request", "denied", the reason); after it, for
 * an execution, a "result" record with decision "failed".  Records of
 * denials are not waited for (the request is refused either way); an
 * allowed decision and an execution's result are durable before the
 * request goes on (fail closed: 503 when the trail cannot record them).
 * Every route is audited unless its row in routes.c opts out; handlers
 * hold no audit code, so a new route cannot forget it.
 *
 * Asynchronous steps (admission by a shared store, the audit writer, the
 * backend) finish through gw_step_done().  If an answer arrives while the
 * driver is still inside the step (a callback run before the call that
 * started it returns), the callback only leaves the answer and the driver
 * picks it up: a request is only ever driven from one place, one step at a
 * time.  When the client goes away, h2o frees the pool: on_dispose cancels
 * the pending admission, the audit wait and (by its own dispose) the
 * backend call, so no callback reaches freed memory, and gives back the
 * in-flight slot.
 */
#include "pipeline.h"
#include "common/gw_clock.h"
#include "auth.h"
#include "conn.h"
#include "denials.h"
#include "framing.h"
#include "http.h"
#include "log.h"
#include "common/metrics.h"
#include "moat_hex.h"
#include "routes.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <openssl/rand.h>

typedef enum gw_flow (*step_fn)(struct gw_request *r);

/* ------------------------------------------------------------- outcomes */

static int audited(const struct gw_request *r)
{
    return r->worker->audit.enabled && (r->route == NULL || (r->route->flags & GW_ROUTE_NO_AUDIT) == 0);
}

static int is_execution(const struct gw_request *r)
{
    return r->route != NULL && (r->route->flags & GW_ROUTE_EXECUTION) != 0;
}

/* Ends an admitted execution: the in-flight slot goes back and the CPU time
 * it used is charged to the tenant's budget.  Idempotent. */
static void release_slot(struct gw_request *r)
{
    if (!r->holds_slot)
        return;
    r->holds_slot = 0;
    rl_release(r->worker->server->limiter, r->tenant, r->cpu_ms, rl_monotonic_ms());
}

/* ---------------------------------------------------------- audit records */

int gw_take_slot(struct gw_request *r)
{
    int held = r->holds_slot;

    r->holds_slot = 0;
    r->result_later = 1;
    return held;
}

/* Who asked: the fields every record starts with. */
void gw_request_who(struct gw_request *r, struct gw_audit_who *who)
{
    who->request_id = r->request_id;
    who->tenant = r->tenant;
    who->key_id = r->key_id;
    who->client = r->client; /* gw_request_client */
    who->method = r->req->method.base;
    who->method_len = r->req->method.len;
    who->path = r->req->path_normalized.base;
    who->path_len = r->req->path_normalized.len;
}

/* A record nobody waits for (a denial, a failure): no jansson and no
 * allocation when its fields are plain ASCII, the common case under attack. */
void gw_record_refusal(struct gw_request *r, const char *type, const char *decision)
{
    struct gw_audit_who who;
    char fast[GW_AUDIT_FAST_MAX];
    const char *reason = gw_reason_name(r->reason);
    size_t len;

    gw_request_who(r, &who);
    if (reason == NULL)
        reason = gw_reason_name(GW_REASON_FILTER);
    if (gw_audit_fast_decision(&who, type, decision, reason, r->rule, r->status, r->message, fast, sizeof(fast), &len) == 0) {
        gw_audit_submit(&r->worker->audit, fast, len, NULL, 0, NULL, NULL);
        return;
    }
    json_t *b = gw_audit_base(&who, type);
    if (b == NULL)
        return;
    gw_audit_add_decision(b, decision, reason, r->rule, r->status, r->message);
    char *text = gw_audit_dump(b, &len);
    json_decref(b);
    if (text != NULL)
        gw_audit_submit(&r->worker->audit, text, len, NULL, 0, NULL, NULL);
    free(text);
}

static void on_record_durable(void *arg, int ok, uint64_t seq)
{
    struct gw_request *r = arg;

    r->audit_entry = NULL;
    if (ok) {
        gw_step_done(r, GW_NEXT);
        return;
    }
    log_warnx("%s: id=%s: the %s record could not be made durable", __func__, r->request_id,
              r->step == GW_STEP_RESULT ? "result" : "decision");
    r->recorded = 0; /* the trail could not take it: no "failed" record after it either */
    gw_step_done(r, gw_deny(r, 503, GW_REASON_AUDIT,
                            r->step == GW_STEP_RESULT ? "audit log unavailable: the result cannot be recorded, so it is withheld"
                                                      : "audit log unavailable: request refused"));
}

/* An allowed record the request waits for: GW_WAIT, or a denial when it
 * cannot even be built. */
static enum gw_flow record_allowed(struct gw_request *r, const char *type, json_t *extra, const char *packet, size_t plen)
{
    struct gw_audit_who who;
    size_t len = 0;

    gw_request_who(r, &who);
    json_t *b = gw_audit_base(&who, type);
    if (b == NULL)
        return gw_deny(r, 500, GW_REASON_AUDIT, "out of memory");
    gw_audit_add_decision(b, "allowed", NULL, NULL, 200, NULL);
    if (extra != NULL)
        json_object_update(b, extra);
    char *text = gw_audit_dump(b, &len);
    json_decref(b);
    if (text == NULL)
        return gw_deny(r, 500, GW_REASON_AUDIT, "out of memory");
    r->recorded = 1;
    r->audit_entry = gw_audit_submit(&r->worker->audit, text, len, packet, packet != NULL ? plen : 0, on_record_durable, r);
    free(text);
    return GW_WAIT;
}

/* ------------------------------------------------------------- the steps */

/* 1. The connection's caps: counted at accept (conn.c); here its abuse state. */
static enum gw_flow step_caps(struct gw_request *r)
{
    const char *why;

    if (r->conn != NULL && (why = gw_conn_request_start(r->conn, r->req)) != NULL) {
        r->req->http1_is_persistent = 0;
        r->note = why;
        return gw_deny(r, 429, GW_REASON_FILTER, why);
    }
    return GW_NEXT;
}

/* 2. Framing: a failure closes an HTTP/1 connection after the answer. */
static enum gw_flow step_framing(struct gw_request *r)
{
    const char *why = gw_framing_check(r->req);

    if (why == NULL)
        return GW_NEXT;
    r->req->http1_is_persistent = 0;
    r->note = why;
    return gw_deny(r, 400, GW_REASON_FILTER, why);
}

/* 3. The exact route, then its method. */
static enum gw_flow step_route(struct gw_request *r)
{
    h2o_req_t *req = r->req;
    int method_ok;
    const struct gw_route *rt =
        gw_route_find(req->path_normalized.base, req->path_normalized.len, req->method.base, req->method.len, &method_ok);

    if (rt == NULL)
        return gw_deny(r, 404, GW_REASON_ENDPOINT, "not found");
    if (!method_ok) {
        gw_add_header(r, "allow", rt->method);
        return gw_deny(r, 405, GW_REASON_ENDPOINT, "method not allowed");
    }
    r->route = rt;
    return GW_NEXT;
}

/* 4. Who asks (public routes: nobody needs to). */
static enum gw_flow step_authenticate(struct gw_request *r)
{
    if (r->route->endpoint == 0)
        return GW_NEXT;
    return r->route->handler->authenticate != NULL ? r->route->handler->authenticate(r) : gw_authenticate(r);
}

/* 5. The tenant's endpoints and the credential's scopes: policy decides. */
static enum gw_flow step_authorize(struct gw_request *r)
{
    struct policy_verdict v;

    if (r->route->endpoint == 0 || policy_authorize(&r->tenant_cfg->policy, r->route->endpoint, r->scopes, &v) == 0)
        return GW_NEXT;
    return gw_deny_copy(r, v.http_status, gw_reason_of_policy(v.reason), v.message);
}

/* 6. The limiter's answer, now (in memory) or later (a shared store). */
static void on_admission(void *arg, const struct rl_decision *d)
{
    struct gw_request *r = arg;

    r->admission = NULL;
    gw_add_ratelimit_headers(r, d);
    if (d->allowed) {
        r->holds_slot = r->admit_kind == RL_ADMIT_EXECUTION;
        gw_step_done(r, GW_NEXT);
        return;
    }
    switch (d->reason) {
    case RL_RATE:
        gw_step_done(r, gw_deny(r, 429, GW_REASON_RATE, "rate limit exceeded for this tenant"));
        break;
    case RL_CONCURRENCY:
        gw_step_done(r, gw_deny(r, 429, GW_REASON_CONCURRENCY, "too many executions in flight for this tenant"));
        break;
    case RL_QUOTA:
        gw_step_done(r, gw_deny(r, 429, GW_REASON_QUOTA, "CPU-time budget for this tenant used up; try again later"));
        break;
    default: /* the limiter could not decide: fail closed */
        gw_step_done(r, gw_deny(r, 503, GW_REASON_LIMITER, "rate limiter unavailable"));
        break;
    }
}

/* An execution takes an in-flight slot, unless its run waits in the
 * submissions queue (rate and CPU budget only: the queue's caps bound it);
 * anything else is counted by the rate alone. */
static enum rl_admission admission_kind(const struct gw_request *r)
{
    if (!is_execution(r))
        return RL_ADMIT_RATE;
    if (r->route->handler->queued != NULL && r->route->handler->queued(r))
        return RL_ADMIT_QUEUED;
    return RL_ADMIT_EXECUTION;
}

static enum gw_flow step_admit(struct gw_request *r)
{
    const struct tenant_policy *p;
    struct rl_params params;

    if (r->route->endpoint == 0 || (r->route->flags & GW_ROUTE_NO_ADMIT) != 0)
        return GW_NEXT;
    p = &r->tenant_cfg->policy;
    params = (struct rl_params){p->rate_per_second, p->burst, p->max_in_flight, p->cpu_ms_per_minute};
    r->admit_kind = admission_kind(r);
    r->admission = rl_admit_on(r->worker->server->limiter, r->worker->ctx.loop, r->admit_kind, r->tenant, &params,
                               rl_monotonic_ms(), on_admission, r);
    return GW_WAIT;
}

/* 7. The route's own parse and policy, and the backend message. */
static enum gw_flow step_prepare(struct gw_request *r)
{
    return r->route->handler->prepare != NULL ? r->route->handler->prepare(r) : GW_NEXT;
}

/* 8. The decision record: a denial is recorded and not waited for; an
 * allowed request waits until its record is durable. */
static enum gw_flow step_decision(struct gw_request *r)
{
    /* a refusal nobody authenticated for is charged to its address: past
     * the address's rate it is a 429 counted in a summary (denials.c);
     * not the probes (/readyz's 503 is an answer, not a failed request) */
    if (r->status >= 400 && r->tenant == NULL && (r->route == NULL || (r->route->flags & GW_ROUTE_NO_AUDIT) == 0) &&
        !gw_denials_charge(r))
        return GW_NEXT;
    if (!audited(r) || r->recorded)
        return GW_NEXT;
    if (r->status >= 400) {
        gw_record_refusal(r, "request", "denied");
        r->recorded = 1;
        return GW_NEXT;
    }
    json_t *extra = NULL;
    if (r->route->handler->describe != NULL) {
        if ((extra = json_object()) == NULL)
            return gw_deny(r, 500, GW_REASON_AUDIT, "out of memory");
        r->route->handler->describe(r, extra);
    }
    enum gw_flow f = record_allowed(r, "request", extra, NULL, 0);
    json_decref(extra);
    return f;
}

/* 9. The backend's status and error codes as HTTP answers. */
enum gw_flow gw_backend_failure(struct gw_request *r, enum backend_status status, const struct backend_reply *reply)
{
    switch (status) {
    case BACKEND_OK:
        break;
    case BACKEND_UNAVAILABLE:
        return gw_deny(r, 503, GW_REASON_BACKEND, "backend unavailable");
    case BACKEND_TIMEOUT:
        return gw_deny(r, 504, GW_REASON_BACKEND, "backend timed out");
    case BACKEND_BAD_REPLY:
    default:
        return gw_deny(r, 502, GW_REASON_BACKEND, "bad reply from backend");
    }
    const char *msg = reply->u.error.message != NULL && reply->u.error.message[0] != '\0' ? reply->u.error.message
                                                                                          : "backend refused the request";
    switch (reply->u.error.code) {
    case MOAT_ERR_BAD_REQUEST:
    case MOAT_ERR_UNKNOWN_LANGUAGE:
    case MOAT_ERR_LIMIT:
        return gw_deny_copy(r, 400, GW_REASON_BACKEND, msg);
    case MOAT_ERR_BUSY:
        gw_metric_add(&gw_metrics_here()->backend_busy, 1);
        r->code = gw_code(GW_CODE_BACKEND_BUSY);
        return gw_deny_copy(r, 503, GW_REASON_BACKEND, msg);
    case MOAT_ERR_INTERNAL:
        return gw_deny_copy(r, 500, GW_REASON_BACKEND, msg);
    case MOAT_ERR_UNAVAILABLE:
        r->code = gw_code(GW_CODE_ISOLATION_UNAVAILABLE);
        return gw_deny_copy(r, 503, GW_REASON_BACKEND, msg);
    default:
        log_warnx("%s: id=%s: backend error code %u unknown", __func__, r->request_id, reply->u.error.code);
        return gw_deny_copy(r, 502, GW_REASON_BACKEND, msg);
    }
}

static void on_backend_reply(void *data, enum backend_status status, const struct backend_reply *reply)
{
    struct gw_request *r = data;
    enum gw_flow f;

    if (status != BACKEND_OK || reply->hdr.type == MOAT_MSG_ERROR)
        f = gw_backend_failure(r, status, reply);
    else
        f = r->route->handler->answer(r, reply);
    release_slot(r); /* the run is over: r->cpu_ms is charged */
    gw_step_done(r, f);
}

void gw_backend_call(struct gw_request *r, struct moat_buf *frame, uint64_t job_id, backend_done_cb cb, void *data)
{
    struct gw_worker *w = r->worker;

    backend_call(r->req, w->ctx.loop, &w->backend_timeout, r->cfg->backend_socket, frame, job_id, cb, data);
}

static enum gw_flow step_backend(struct gw_request *r)
{
    if (r->frame.data == NULL)
        return r->route->handler->answer(r, NULL);
    log_debug("%s: id=%s job=%llu", __func__, r->request_id, (unsigned long long)r->job_id);
    gw_backend_call(r, &r->frame, r->job_id, on_backend_reply, r);
    return GW_WAIT;
}

/* 10. An execution's result record, durable before the answer leaves; a
 * failure after the allowed decision is recorded as "failed". */
static enum gw_flow step_result(struct gw_request *r)
{
    if (!audited(r) || !is_execution(r) || !r->recorded || r->result_later)
        return GW_NEXT;
    if (r->status >= 400) {
        gw_record_refusal(r, "result", "failed");
        return GW_NEXT;
    }
    return record_allowed(r, "result", r->result_fields, r->packet, r->packet_len);
}

/* 11. The answer.  Nothing may touch r afterwards. */
static void respond(struct gw_request *r)
{
    if (r->status >= 400 && r->error_body != NULL) {
        gw_respond(r, r->status, r->error_body);
        return;
    }
    if (r->status >= 400) {
        gw_respond_error(r, r->status, r->code != NULL ? r->code : gw_error_code(r->reason, r->status),
                         r->message != NULL ? r->message : "request refused");
        return;
    }
    gw_respond(r, r->ok_status != 0 ? r->ok_status : 200, r->body != NULL ? r->body : "{}");
}

/* ------------------------------------------------------------- the driver */

static const step_fn steps[GW_STEP_COUNT] = {
    [GW_STEP_CAPS] = step_caps,
    [GW_STEP_FRAMING] = step_framing,
    [GW_STEP_ROUTE] = step_route,
    [GW_STEP_AUTHENTICATE] = step_authenticate,
    [GW_STEP_AUTHORIZE] = step_authorize,
    [GW_STEP_ADMIT] = step_admit,
    [GW_STEP_PREPARE] = step_prepare,
    [GW_STEP_DECISION] = step_decision,
    [GW_STEP_BACKEND] = step_backend,
    [GW_STEP_RESULT] = step_result,
    [GW_STEP_RESPOND] = NULL, /* respond(): the driver's last act */
};

/* Where a refusal at step s goes: its record, then the answer. */
static enum gw_step after_refusal(const struct gw_request *r, enum gw_step s)
{
    if (s < GW_STEP_DECISION)
        return GW_STEP_DECISION;
    if (s < GW_STEP_RESULT && r->recorded)
        return GW_STEP_RESULT;
    return GW_STEP_RESPOND;
}

static enum gw_step next_step(const struct gw_request *r, enum gw_step s)
{
    if (s == GW_STEP_DECISION && r->status >= 400)
        return GW_STEP_RESPOND; /* recorded: answer the refusal */
    return s + 1;
}

static void drive(struct gw_request *r)
{
    r->driving = 1;
    while (r->step != GW_STEP_RESPOND) {
        enum gw_flow f = steps[r->step](r);
        if (f == GW_WAIT) {
            if (!r->answered) {
                r->driving = 0;
                return; /* gw_step_done drives on */
            }
            f = r->answer;
        }
        if (f == GW_TAKEN) {
            r->driving = 0;
            return; /* the session answers */
        }
        r->answered = 0;
        if (f == GW_DENY)
            r->step = after_refusal(r, r->step);
        else if (f == GW_NEXT)
            r->step = next_step(r, r->step);
        /* GW_REPEAT: the same step again */
    }
    respond(r);
}

void gw_step_done(struct gw_request *r, enum gw_flow flow)
{
    if (r->driving) {
        /* answered before the step returned: drive() picks it up */
        r->answered = 1;
        r->answer = flow;
        return;
    }
    if (flow == GW_DENY)
        r->step = after_refusal(r, r->step);
    else if (flow == GW_NEXT)
        r->step = next_step(r, r->step);
    drive(r);
}

/* ------------------------------------------------- waits that outlive a request */

static void watch_gone(void *p)
{
    struct gw_req_watch **guard = p;

    if (*guard != NULL) {
        (*guard)->r = NULL;
        (*guard)->guard = NULL;
    }
}

int gw_req_watch_start(struct gw_req_watch *w, struct gw_request *r)
{
    struct gw_req_watch **guard = h2o_mem_alloc_shared(&r->req->pool, sizeof(*guard), watch_gone);

    if (guard == NULL)
        return -1;
    *guard = w;
    w->guard = guard;
    w->r = r;
    return 0;
}

void gw_req_watch_end(struct gw_req_watch *w)
{
    if (w->guard != NULL)
        *w->guard = NULL;
    w->guard = NULL;
}

/* ------------------------------------------------- a request's whole life */

static void on_dispose(void *p)
{
    struct gw_request *r = p;
    const h2o_req_t *req = r->req;

    rl_cancel(r->admission); /* its callback must not touch r */
    if (r->audit_entry != NULL)
        gw_audit_cancel(r->audit_entry);
    release_slot(r); /* a client that went away mid-run */
    moat_buf_free(&r->frame);
    json_decref(r->result_fields);
    free(r->packet);
    free(r->body);
    free(r->error_body);
    if (r->conn != NULL) {
        int completed = req->res.status != 0 && (req->res.content_length == SIZE_MAX || req->bytes_sent >= req->res.content_length);
        gw_conn_request_end(r->conn, completed);
    }
    if (r->worker->inflight > 0)
        r->worker->inflight--;
    gw_generation_release(r->gen); /* last: nothing reads the configuration after this */
}

/* Request ids from a per-thread pool refilled 4 KiB at a time: one
 * RAND_bytes call per 512 requests instead of one each. */
static void random_bytes(uint8_t *out, size_t n)
{
    static __thread uint8_t pool[4096];
    static __thread size_t left;

    if (left < n) {
        if (RAND_bytes(pool, sizeof(pool)) != 1) {
            log_warnx("%s: RAND_bytes failed, request id is zero", __func__);
            memset(out, 0, n);
            return;
        }
        left = sizeof(pool);
    }
    memcpy(out, pool + sizeof(pool) - left, n);
    left -= n;
}

void gw_new_request_id(char out[GW_REQUEST_ID_LEN + 1])
{
    uint8_t rnd[GW_REQUEST_ID_LEN / 2];

    random_bytes(rnd, sizeof(rnd));
    moat_hex_encode(rnd, sizeof(rnd), out);
}

/*
 * Who the client is: the connection's client (the peer, or who a trusted
 * proxy's PROXY header named), or, when that is a trusted proxy, the
 * rightmost untrusted hop of X-Forwarded-For (proxies.c).  The header from
 * anyone else is ignored, and logged (at most once a second per worker).
 */
void gw_request_client(struct gw_request *r)
{
    const struct gw_config *cfg = r->cfg;
    const struct gw_addr *peer;
    struct gw_addr client;
    h2o_iovec_t xff = {NULL, 0};
    ssize_t i = -1;
    int trusted, rc;

    if (r->conn == NULL) {
        memcpy(r->client, "?", 2);
        return;
    }
    r->has_client = 1;
    peer = gw_conn_addr(r->conn, &trusted);
    /* h2o keeps a known header name as its token: a pointer compare per header */
    while ((i = h2o_find_header(&r->req->headers, H2O_TOKEN_X_FORWARDED_FOR, i)) != -1) {
        h2o_iovec_t v = r->req->headers.entries[i].value;
        xff = xff.base == NULL ? v : h2o_concat(&r->req->pool, xff, h2o_iovec_init(H2O_STRLIT(",")), v);
    }
    if (xff.base == NULL || !trusted) {
        /* the peer itself: its text and key were made once, at accept (conn.c) */
        gw_conn_client(r->conn, r->client, sizeof(r->client), r->client_key);
        if (xff.base == NULL)
            return;
        uint64_t now = h2o_now(r->worker->ctx.loop);
        if (now >= r->worker->xff_logged_ms + 1000) {
            r->worker->xff_logged_ms = now;
            log_warnx("%s: id=%s: X-Forwarded-For from %s ignored: not in trusted_proxies", __func__, r->request_id,
                      gw_conn_peer(r->conn));
        }
        return;
    }
    client = *peer;
    if ((rc = gw_forwarded_client(xff.base, xff.len, cfg->trusted_proxies, cfg->ntrusted_proxies, &client)) < 0) {
        log_warnx("%s: id=%s: X-Forwarded-For from %s has a hop that is not an address; the client is taken as %s", __func__,
                  r->request_id, gw_conn_peer(r->conn), "the last trusted hop");
    }
    gw_addr_text(&client, r->client, sizeof(r->client));
    gw_addr_key(&client, r->client_key);
}

/*
 * The request's state, in req->pool: it lives exactly as long as the
 * request.  It is the pool's first shared allocation, and h2o frees those
 * last-allocated-first, so everything a step allocates later (a backend
 * call, a handler's job) is gone before the generation is released.
 */
static struct gw_request *request_new(h2o_req_t *req)
{
    struct gw_worker *w = gw_worker_of(req->conn->ctx);
    struct gw_request *r;

    gw_worker_refresh(w);
    if ((r = h2o_mem_alloc_shared(&req->pool, sizeof(*r), on_dispose)) == NULL)
        return NULL;
    memset(r, 0, sizeof(*r));
    r->started_ns = gw_monotonic_ns();
    r->req = req;
    r->worker = w;
    r->gen = w->gen;
    gw_generation_hold(r->gen);
    r->cfg = &r->gen->cfg;
    r->conn = gw_conn_of(req);
    gw_new_request_id(r->request_id);
    gw_request_client(r);
    w->inflight++;
    /* room for every header a response of ours carries, in one allocation */
    h2o_vector_reserve(&req->pool, &req->res.headers, 8);
    return r;
}

static int on_req(h2o_handler_t *self, h2o_req_t *req)
{
    struct gw_request *r = request_new(req);

    if (r == NULL)
        return -1;
    drive(r);
    return 0;
}

void gw_pipeline_register(h2o_pathconf_t *pathconf)
{
    h2o_handler_t *h = h2o_create_handler(pathconf, sizeof(*h));

    h->on_req = on_req;
}
