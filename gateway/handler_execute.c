/*
 * handler_execute.c - POST /api/v2/execute: the Piston request validated and
 * judged by the tenant's policy, re-serialised as a typed
 * MOAT_MSG_EXEC_REQUEST, and the backend's result turned back into Piston
 * JSON.  Only translation: authentication, admission, the audit trail and
 * the answer are the pipeline's (pipeline.c).
 */
#include "pipeline.h"
#include "log.h"
#include "piston_json.h"
#include "runtime_table.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* The parsed request, kept for the records and the packet. */
struct exec_job {
    struct moat_exec_request ereq;
    int asked_table; /* the runtime table was fetched once for this request */
};

static void job_dispose(void *p)
{
    struct exec_job *job = p;

    piston_exec_request_free(&job->ereq);
}

/*
 * "application/json", optionally with parameters (RFC 9110 8.3.1).  JSON is
 * UTF-8 (RFC 8259 8.1): a charset parameter must say so, any other charset
 * is refused rather than parsed as UTF-8.
 */
static int is_json_content_type(h2o_req_t *req)
{
    static const char want[] = "application/json";
    const size_t wlen = sizeof(want) - 1;
    ssize_t i = h2o_find_header(&req->headers, H2O_TOKEN_CONTENT_TYPE, -1);
    const char *p, *end;

    if (i == -1)
        return 0;
    p = req->headers.entries[i].value.base;
    end = p + req->headers.entries[i].value.len;
    if ((size_t)(end - p) < wlen || strncasecmp(p, want, wlen) != 0)
        return 0;
    for (p += wlen;;) {
        const char *name, *val;
        size_t nlen, vlen;
        while (p < end && (*p == ' ' || *p == '\t'))
            p++;
        if (p == end)
            return 1;
        if (*p++ != ';')
            return 0;
        while (p < end && (*p == ' ' || *p == '\t'))
            p++;
        for (name = p; p < end && *p != '=' && *p != ';' && *p != ' '; p++)
            ;
        nlen = (size_t)(p - name);
        if (p == end || *p != '=')
            return 0;
        p++;
        if (p < end && *p == '"') {
            for (val = ++p; p < end && *p != '"'; p++)
                ;
            if (p == end)
                return 0;
            vlen = (size_t)(p++ - val);
        } else {
            for (val = p; p < end && *p != ';' && *p != ' ' && *p != '\t'; p++)
                ;
            vlen = (size_t)(p - val);
        }
        if (nlen == 7 && strncasecmp(name, "charset", 7) == 0 && !(vlen == 5 && strncasecmp(val, "utf-8", 5) == 0))
            return 0;
    }
}

/* The body, strictly: size, type, Piston JSON. */
static enum gw_flow parse(struct gw_request *r)
{
    h2o_req_t *req = r->req;
    struct exec_job *job;
    char err[GW_ERR_MSG_MAX];

    if (req->entity.len > r->cfg->max_request_entity_size)
        return gw_deny(r, 413, GW_REASON_FILTER, "request body is larger than max_request_entity_size");
    if (!is_json_content_type(req))
        return gw_deny(r, 415, GW_REASON_FILTER, "Content-Type must be application/json (charset utf-8)");
    job = h2o_mem_alloc_shared(&req->pool, sizeof(*job), job_dispose);
    memset(job, 0, sizeof(*job));
    if (piston_parse_exec_request(req->entity.base, req->entity.len, &job->ereq, err, sizeof(err)) != 0)
        return gw_deny_copy(r, 400, GW_REASON_FILTER, err);
    r->job = job;
    return GW_NEXT;
}

/* The tenant's policy: language (by any name of its runtime), input
 * structure, limits (-1 becomes the tenant's default), content rules.
 * Allowed: the effective limits are written into ereq. */
static enum gw_flow judge(struct gw_request *r, struct moat_exec_request *ereq)
{
    struct policy_file files[MOAT_MAX_FILES];
    size_t arg_lens[MOAT_MAX_ARGS];
    struct policy_runtime rt;
    struct policy_request pr;
    struct policy_verdict v;

    memset(&pr, 0, sizeof(pr));
    pr.endpoint = POLICY_EP_EXECUTE;
    pr.language = ereq->language;
    pr.version = ereq->version;
    pr.runtime = gw_runtime_table_find(r->worker, ereq->language, &rt);
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
        r->rule = v.rule;
        r->note = v.rule;
        return gw_deny_copy(r, v.http_status ? v.http_status : 403, gw_reason_of_policy(v.reason),
                            v.message[0] ? v.message : "denied by policy");
    }
    ereq->run_timeout_ms = v.run_timeout_ms;
    ereq->compile_timeout_ms = v.compile_timeout_ms;
    ereq->run_memory_bytes = v.run_memory_bytes;
    ereq->compile_memory_bytes = v.compile_memory_bytes;
    return GW_NEXT;
}

/* Step 7: parse, make sure the runtime table is known, judge, encode. */
static enum gw_flow prepare(struct gw_request *r)
{
    struct exec_job *job = r->job;
    const char *why = NULL;
    enum gw_flow f;

    if (job == NULL && (f = parse(r)) != GW_NEXT)
        return f;
    job = r->job;
    if (!gw_runtime_table_fresh(r->worker) && !job->asked_table) {
        job->asked_table = 1;             /* once: a table that could not be kept leaves exact names only */
        return gw_runtime_table_fetch(r); /* then this step again */
    }
    if ((f = judge(r, &job->ereq)) != GW_NEXT)
        return f;
    r->job_id = backend_next_job_id();
    if (moat_encode_exec_request(&r->frame, r->job_id, &job->ereq, &why) != 0) {
        /* a structural cap the parser does not know about: the client's fault */
        char err[GW_ERR_MSG_MAX];
        snprintf(err, sizeof(err), "request rejected: %s", why != NULL ? why : "cannot encode");
        return gw_deny_copy(r, 400, GW_REASON_FILTER, err);
    }
    return GW_NEXT;
}

/* Step 8: what the allowed decision record says of the request. */
static void describe(struct gw_request *r, json_t *record)
{
    const struct exec_job *job = r->job;

    gw_audit_add_request(record, &job->ereq, r->frame.data + MOAT_FRAME_HEADER_SIZE, r->frame.len - MOAT_FRAME_HEADER_SIZE);
}

/* Step 9: the result as Piston JSON, and for the trail its fields and packet. */
static enum gw_flow answer(struct gw_request *r, const struct backend_reply *reply)
{
    const struct exec_job *job = r->job;
    const struct moat_exec_result *res = &reply->u.result;

    if (reply->hdr.type != MOAT_MSG_EXEC_RESULT) {
        log_warnx("%s: id=%s: unexpected reply type %u", __func__, r->request_id, reply->hdr.type);
        return gw_deny(r, 502, GW_REASON_BACKEND, "bad reply from backend");
    }
    r->cpu_ms = (res->compile.present ? res->compile.cpu_ms : 0) + (res->run.present ? res->run.cpu_ms : 0);
    if ((r->body = piston_exec_result_json(res)) == NULL)
        return gw_deny(r, 500, GW_REASON_BACKEND, "out of memory");
    if (r->worker->audit.enabled) {
        struct gw_audit_who who = {.request_id = r->request_id, .tenant = r->tenant};
        if ((r->result_fields = json_object()) == NULL)
            return gw_deny(r, 500, GW_REASON_AUDIT, "out of memory");
        gw_audit_add_result(r->result_fields, res);
        r->packet = gw_audit_packet(&who, &job->ereq, r->body, &r->packet_len);
    }
    return GW_NEXT;
}

const struct gw_handler gw_handler_execute = {prepare, describe, answer};
