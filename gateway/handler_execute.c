/*
 * handler_execute.c - POST /api/v2/execute: validate the Piston request,
 * re-serialise it as a typed MOAT_MSG_EXEC_REQUEST, and turn the backend's
 * result back into Piston JSON.
 */
#include "handlers.h"
#include "log.h"
#include "piston_json.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* "application/json", optionally followed by parameters. */
static int is_json_content_type(h2o_req_t *req)
{
    static const char want[] = "application/json";
    const size_t wlen = sizeof(want) - 1;
    ssize_t i = h2o_find_header(&req->headers, H2O_TOKEN_CONTENT_TYPE, -1);
    h2o_iovec_t v;

    if (i == -1)
        return 0;
    v = req->headers.entries[i].value;
    if (v.len < wlen || strncasecmp(v.base, want, wlen) != 0)
        return 0;
    return v.len == wlen || v.base[wlen] == ';' || v.base[wlen] == ' ' || v.base[wlen] == '\t';
}

/* What an audited execution keeps until its result is durable. */
struct execution {
    struct gw_request *r;
    struct moat_exec_request ereq; /* for the packet */
    struct moat_buf frame;
    uint64_t job;
    char *body; /* the response, sent once the result record is durable */
};

static void execution_dispose(void *p)
{
    struct execution *ex = p;
    piston_exec_request_free(&ex->ereq);
    moat_buf_free(&ex->frame);
    free(ex->body);
}

static void on_result_durable(void *arg, int ok, uint64_t seq)
{
    struct execution *ex = arg;
    struct gw_request *r = ex->r;
    r->audit_entry = NULL;
    r->executing = 0; /* the result record is written (or failed): no second one */
    if (!ok) {
        log_warnx("%s: id=%s: the result record could not be made durable", __func__, r->request_id);
        gw_respond_error(r, 503, "audit log unavailable: the result cannot be recorded, so it is withheld");
        return;
    }
    gw_respond(r, 200, ex->body);
}

/* The outcome of an audited execution: a result record (and the packet) must
 * be durable before the response leaves. */
static void audit_result(struct execution *ex, const struct moat_exec_result *res)
{
    struct gw_request *r = ex->r;
    struct gw_audit_who who;
    char client[64];
    size_t blen = 0, plen = 0;

    gw_audit_who(r, &who, client, sizeof(client));
    json_t *b = gw_audit_base(&who, "result");
    if (b == NULL) {
        gw_respond_error(r, 500, "out of memory");
        return;
    }
    gw_audit_add_decision(b, "allowed", NULL, NULL, 200, NULL);
    gw_audit_add_result(b, res);
    char *text = gw_audit_dump(b, &blen);
    json_decref(b);
    char *packet = gw_audit_packet(&who, &ex->ereq, ex->body, &plen);
    if (text == NULL) {
        free(packet);
        gw_respond_error(r, 500, "out of memory");
        return;
    }
    r->audit_entry = gw_audit_submit(&r->worker->audit, text, blen, packet, packet ? plen : 0, on_result_durable, ex);
    free(text);
    free(packet);
}

static void on_result(void *data, enum backend_status status, const struct backend_reply *reply)
{
    struct execution *ex = data;
    struct gw_request *r = ex->r;
    char *body;

    if (status == BACKEND_OK && reply->hdr.type == MOAT_MSG_EXEC_RESULT) {
        const struct moat_exec_result *res = &reply->u.result;
        gw_request_release(r, (res->compile.present ? res->compile.cpu_ms : 0) + (res->run.present ? res->run.cpu_ms : 0));
    } else {
        gw_request_release(r, 0);
    }
    if (handle_backend_failure(r, status, reply))
        return;
    if (reply->hdr.type != MOAT_MSG_EXEC_RESULT) {
        log_warnx("%s: id=%s: unexpected reply type %u", __func__, r->request_id, reply->hdr.type);
        gw_respond_error(r, 502, "bad reply from backend");
        return;
    }
    if ((body = piston_exec_result_json(&reply->u.result)) == NULL) {
        gw_respond_error(r, 500, "out of memory");
        return;
    }
    if (r->worker->audit.enabled) {
        ex->body = body;
        audit_result(ex, &reply->u.result);
        return;
    }
    gw_respond(r, 200, body);
    free(body);
}

/* The allowed decision is durable: now the program may run. */
static void on_allowed_durable(void *arg, int ok, uint64_t seq)
{
    struct execution *ex = arg;
    struct gw_request *r = ex->r;
    r->audit_entry = NULL;
    if (!ok) {
        log_warnx("%s: id=%s: the decision record could not be made durable: refused", __func__, r->request_id);
        gw_request_release(r, 0);
        r->executing = 0;
        gw_respond_error(r, 503, "audit log unavailable: request refused");
        return;
    }
    gw_backend_call_with(r, &ex->frame, ex->job, on_result, ex);
}

/*
 * The tenant's policy on the parsed request: language, input structure,
 * limits (-1 becomes the tenant's default), content rules.  Returns 1 when
 * allowed, with the effective limits written into ereq; otherwise responds.
 */
static int apply_policy(struct gw_request *r, struct moat_exec_request *ereq)
{
    struct policy_file files[MOAT_MAX_FILES];
    size_t arg_lens[MOAT_MAX_ARGS];
    struct policy_request pr;
    struct policy_verdict v;

    memset(&pr, 0, sizeof(pr));
    pr.endpoint = POLICY_EP_EXECUTE;
    pr.language = ereq->language;
    pr.version = ereq->version;
    for (size_t i = 0; i < ereq->nfiles && i < MOAT_MAX_FILES; i++)
        files[i] = (struct policy_file){ereq->files[i].name, ereq->files[i].content, ereq->files[i].content_len};
    for (size_t i = 0; i < ereq->nargs && i < MOAT_MAX_ARGS; i++)
        arg_lens[i] = strlen(ereq->args[i]);
    pr.files = files;
    pr.nfiles = ereq->nfiles;
    pr.stdin_len = ereq->stdin_len;
    pr.nargs = ereq->nargs;
    pr.arg_lens = arg_lens;
    pr.run_timeout_ms = ereq->run_timeout_ms;
    pr.compile_timeout_ms = ereq->compile_timeout_ms;
    pr.run_memory_bytes = ereq->run_memory_bytes;
    pr.compile_memory_bytes = ereq->compile_memory_bytes;
    if (policy_evaluate(&r->tenant_cfg->policy, &pr, &v) != 0 || !v.allow) {
        r->reason = v.reason == POLICY_DENY_NO_POLICY ? "endpoint" : policy_reason_name(v.reason);
        r->rule = v.rule;
        r->note = v.rule; /* the message goes to the client and the audit record */
        gw_respond_error(r, v.http_status ? v.http_status : 403, v.message[0] ? v.message : "denied by policy");
        return 0;
    }
    ereq->run_timeout_ms = v.run_timeout_ms;
    ereq->compile_timeout_ms = v.compile_timeout_ms;
    ereq->run_memory_bytes = v.run_memory_bytes;
    ereq->compile_memory_bytes = v.compile_memory_bytes;
    return 1;
}

void handle_execute(struct gw_request *r)
{
    h2o_req_t *req = r->req;
    struct moat_exec_request ereq;
    char err[GW_ERR_MSG_MAX];
    const char *why = NULL;
    uint64_t job;

    if (req->entity.len > r->cfg->max_request_entity_size) {
        gw_respond_error(r, 413, "request body is larger than max_request_entity_size");
        return;
    }
    if (!is_json_content_type(req)) {
        gw_respond_error(r, 415, "Content-Type must be application/json");
        return;
    }
    if (piston_parse_exec_request(req->entity.base, req->entity.len, &ereq, err, sizeof(err)) != 0) {
        gw_respond_error(r, 400, err);
        return;
    }
    if (!apply_policy(r, &ereq)) {
        piston_exec_request_free(&ereq);
        return;
    }
    struct execution *ex = h2o_mem_alloc_shared(&req->pool, sizeof(*ex), execution_dispose);
    memset(ex, 0, sizeof(*ex));
    ex->r = r;
    ex->job = job = backend_next_job_id();
    if (moat_encode_exec_request(&ex->frame, job, &ereq, &why) != 0) {
        piston_exec_request_free(&ereq);
        /* A structural cap the parser does not know about: the client's fault. */
        snprintf(err, sizeof(err), "request rejected: %s", why != NULL ? why : "cannot encode");
        r->reason = "filter";
        gw_respond_error(r, 400, err);
        return;
    }
    log_debug("%s: id=%s job=%llu language=%s files=%zu", __func__, r->request_id, (unsigned long long)job, ereq.language,
              ereq.nfiles);
    if (!r->worker->audit.enabled) {
        piston_exec_request_free(&ereq);
        gw_backend_call_with(r, &ex->frame, job, on_result, ex);
        return;
    }
    /* audited: the allowed decision is durable before the program runs */
    struct gw_audit_who who;
    char client[64];
    size_t blen = 0;
    gw_audit_who(r, &who, client, sizeof(client));
    json_t *b = gw_audit_base(&who, "request");
    gw_audit_add_decision(b, "allowed", NULL, NULL, 200, NULL);
    gw_audit_add_request(b, &ereq, ex->frame.data + MOAT_FRAME_HEADER_SIZE, ex->frame.len - MOAT_FRAME_HEADER_SIZE);
    char *text = gw_audit_dump(b, &blen);
    json_decref(b);
    ex->ereq = ereq; /* kept for the packet; freed with the request */
    r->audited = 1;
    r->executing = 1;
    if (text == NULL) {
        gw_respond_error(r, 500, "out of memory");
        return;
    }
    r->audit_entry = gw_audit_submit(&r->worker->audit, text, blen, NULL, 0, on_allowed_durable, ex);
    free(text);
}
