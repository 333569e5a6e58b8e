/*
 * handler_execute.c - POST /api/v2/execute: the Piston request validated and
 * judged by the tenant's policy, re-serialised as a typed
 * MOAT_MSG_EXEC_REQUEST, and the backend's result turned back into Piston
 * JSON.  Only translation: authentication, admission, the audit trail and
 * the answer are the pipeline's (pipeline.c).
 *
 * Streamed execute: a request that accepts application/x-ndjson is run as
 * a session (session.c) with the request's stdin, closed at once, and the
 * same limits as an execute; the session's events (runtime, stage, data,
 * exit) go out one JSON object per line as they happen, and the last line
 * is the whole result ({"type":"result", ...the execute body}).  A refusal
 * before the program starts is an ordinary JSON error response.
 *
 * Test cases (`tests`, a moat extension): the cases' stdin, args and limits
 * go to the backend in the EXEC_REQUEST (compiled once, each case in a
 * fresh box: backend/job.c); their expected outputs stay here, and each
 * case's verdict is made here from its run stage (piston_tests.c).  A case's
 * limits may only lower the run limits the tenant's policy put in force.
 * The decision record names the cases (count, digests of each case's stdin
 * and expected output), the result record their verdicts.
 */
#include "core/pipeline.h"
#include "log.h"
#include "core/http.h"
#include "exec/judge.h"
#include "json/piston_json.h"
#include "piston_tests.h"
#include "exec/runtime_table.h"
#include "sessions/session.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "auth/apikey.h"
#include "moat_hex.h"

/* The parsed request, kept for the records and the packet. */
struct exec_job {
    struct moat_exec_request ereq;
    struct piston_tests tests; /* what judges each case (count 0: no cases) */
    json_t *metadata;          /* the request's metadata (metadata.c), for the packet; NULL: none */
    int asked_table;           /* the runtime table was fetched once for this request */
    int stream;                /* answer as application/x-ndjson, as it happens */
};

static void job_dispose(void *p)
{
    struct exec_job *job = p;

    piston_exec_request_free(&job->ereq);
    piston_tests_free(&job->tests);
    json_decref(job->metadata);
}

/* Does the client take a stream of JSON lines?  Accept names the media
 * type (parameters and other types around it allowed). */
static int accepts_ndjson(h2o_req_t *req)
{
    static const char want[] = "application/x-ndjson";
    ssize_t i = -1;

    while ((i = h2o_find_header(&req->headers, H2O_TOKEN_ACCEPT, i)) != -1) {
        const h2o_iovec_t v = req->headers.entries[i].value;
        for (size_t at = 0; at + sizeof(want) - 1 <= v.len; at++)
            if (strncasecmp(v.base + at, want, sizeof(want) - 1) == 0)
                return 1;
    }
    return 0;
}

/* The body, strictly: size, type, Piston JSON. */
static enum gw_flow parse(struct gw_request *r)
{
    h2o_req_t *req = r->req;
    struct exec_job *job;
    char err[GW_ERR_MSG_MAX];

    if (req->entity.len > r->cfg->max_request_entity_size)
        return gw_deny(r, 413, GW_REASON_FILTER, "request body is larger than max_request_entity_size");
    if (!gw_is_json_content_type(req))
        return gw_deny(r, 415, GW_REASON_FILTER, "Content-Type must be application/json (charset utf-8)");
    job = h2o_mem_alloc_shared(&req->pool, sizeof(*job), job_dispose);
    memset(job, 0, sizeof(*job));
    if (piston_parse_exec_request_tests(req->entity.base, req->entity.len, &job->ereq, &job->tests, &job->metadata, err,
                                        sizeof(err)) != 0)
        return gw_deny_copy(r, 400, GW_REASON_FILTER, err);
    job->stream = accepts_ndjson(req);
    if (job->stream && job->tests.count > 0)
        return gw_deny(r, 400, GW_REASON_FILTER, "tests cannot be streamed: ask for application/json");
    r->job = job;
    return GW_NEXT;
}

/* A case's limit against the run limit the policy put in force. */
static int case_over(int64_t asked, int64_t in_force)
{
    return asked > 0 && in_force > 0 && asked > in_force;
}

/* The cases' wall budget (judge.c): refused when asked above what the gateway waits for. */
static enum gw_flow tests_budget(struct gw_request *r, struct moat_exec_request *ereq)
{
    char err[GW_ERR_MSG_MAX];

    if (gw_judge_tests_budget(r->cfg->backend_timeout_ms, ereq, err, sizeof(err)) != 0)
        return gw_deny_copy(r, 400, GW_REASON_LIMIT, err);
    return GW_NEXT;
}

/* The cases after the policy: each limit may only lower the run limit in
 * force, each case's stdin is held to the tenant's stdin ceiling, and the
 * cases' wall budget fits the gateway's backend timeout. */
static enum gw_flow judge_tests(struct gw_request *r, struct moat_exec_request *ereq)
{
    const struct policy_limits *c = &r->tenant_cfg->policy.ceilings;
    char err[GW_ERR_MSG_MAX];

    for (size_t i = 0; i < ereq->ntests; i++) {
        const struct moat_test_case *tc = &ereq->tests[i];
        const char *field = NULL;
        long long in_force = 0;
        if (case_over(tc->run_timeout_ms, ereq->run_timeout_ms))
            field = "run_timeout", in_force = ereq->run_timeout_ms;
        else if (case_over(tc->run_cpu_ms, ereq->run_cpu_ms))
            field = "run_cpu_time", in_force = ereq->run_cpu_ms;
        else if (case_over(tc->run_memory_bytes, ereq->run_memory_bytes))
            field = "run_memory_limit", in_force = ereq->run_memory_bytes;
        if (field != NULL) {
            snprintf(err, sizeof(err), "tests[%zu].%s cannot exceed the request's %s in force (%lld)", i, field, field, in_force);
            return gw_deny_copy(r, 400, GW_REASON_LIMIT, err);
        }
        if (c->max_stdin_bytes > 0 && tc->stdin_len > c->max_stdin_bytes) {
            snprintf(err, sizeof(err), "tests[%zu].stdin is larger than the tenant's limit of %llu bytes", i,
                     (unsigned long long)c->max_stdin_bytes);
            return gw_deny_copy(r, 400, GW_REASON_LIMIT, err);
        }
    }
    return ereq->ntests > 0 ? tests_budget(r, ereq) : GW_NEXT;
}

/* The tenant's policy (judge.c): language by any name of its runtime,
 * input structure, limits (-1 becomes the tenant's default), content rules. */
static enum gw_flow judge(struct gw_request *r, struct moat_exec_request *ereq)
{
    struct policy_verdict v;

    if (gw_judge_exec(r->worker, &r->tenant_cfg->policy, POLICY_EP_EXECUTE, ereq, &v) == 0)
        return judge_tests(r, ereq);
    r->rule = v.rule;
    r->note = v.rule;
    return gw_deny_copy(r, v.http_status, gw_reason_of_policy(v.reason), v.message);
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
    if (job->stream)
        return GW_NEXT; /* no frame: step 9 starts the session */
    r->job_id = backend_next_job_id();
    if (moat_encode_exec_request(&r->frame, r->job_id, &job->ereq, &why) != 0) {
        /* a structural cap the parser does not know about: the client's fault */
        char err[GW_ERR_MSG_MAX];
        snprintf(err, sizeof(err), "request rejected: %s", why != NULL ? why : "cannot encode");
        return gw_deny_copy(r, 400, GW_REASON_FILTER, err);
    }
    return GW_NEXT;
}

static json_t *digest(const void *data, size_t len)
{
    uint8_t h[APIKEY_DIGEST_LEN];
    char hex[APIKEY_DIGEST_HEX + 1];

    if (apikey_digest(data != NULL ? data : "", len, h) != 0)
        return json_null();
    moat_hex_encode(h, sizeof(h), hex);
    return json_string(hex);
}

/* The cases as the decision record names them: how many, the job's wall
 * budget, and per case the SHA-256 of its stdin and expected output. */
static json_t *tests_described(const struct exec_job *job)
{
    static const char *const modes[] = {"exact", "trimmed", "tokens", "float"};
    json_t *o = json_object(), *cases = json_array();

    json_object_set_new(o, "count", json_integer((json_int_t)job->tests.count));
    json_object_set_new(o, "timeout", json_integer(job->ereq.tests_wall_ms));
    for (size_t i = 0; i < job->tests.count; i++) {
        const struct piston_test *t = &job->tests.items[i];
        const struct moat_test_case *tc = &job->ereq.tests[i];
        json_t *c = json_object();
        json_object_set_new(c, "stdin_sha256", digest(tc->stdin_data, tc->stdin_len));
        json_object_set_new(c, "expected_sha256", t->expected != NULL ? digest(t->expected, t->expected_len) : json_null());
        json_object_set_new(c, "compare", json_string(modes[t->compare]));
        json_array_append_new(cases, c);
    }
    json_object_set_new(o, "cases", cases);
    return o;
}

/* Step 8: what the allowed decision record says of the request. */
static void describe(struct gw_request *r, json_t *record)
{
    const struct exec_job *job = r->job;

    if (job->stream) {
        /* the session's SESSION_OPEN is made later: the request's own bytes name it */
        gw_audit_add_request(record, &job->ereq, r->req->entity.base, r->req->entity.len);
        json_object_set_new(record, "session", json_string("stream"));
        return;
    }
    gw_audit_add_request(record, &job->ereq, r->frame.data + MOAT_FRAME_HEADER_SIZE, r->frame.len - MOAT_FRAME_HEADER_SIZE);
    if (job->tests.count > 0)
        json_object_set_new(record, "tests", tests_described(job));
}

/* ------------------------------------------------------ a streamed answer */

struct stream_sink {
    h2o_generator_t gen; /* first: h2o passes it back */
    struct gw_request *r;
    struct gw_session *session; /* NULL once it ended */
    struct moat_buf pending, flight;
    int started, sending, ended;
};

static void stream_flush(struct stream_sink *st)
{
    h2o_iovec_t buf;
    struct moat_buf t;

    if (st->sending)
        return;
    if (st->pending.len == 0) {
        if (st->ended) {
            st->sending = 1;
            h2o_send(st->r->req, NULL, 0, H2O_SEND_STATE_FINAL);
        }
        return;
    }
    t = st->flight;
    st->flight = st->pending;
    st->pending = t;
    st->pending.len = 0;
    st->sending = 1;
    buf = h2o_iovec_init(st->flight.data, st->flight.len);
    h2o_send(st->r->req, &buf, 1, H2O_SEND_STATE_IN_PROGRESS);
}

static void stream_proceed(h2o_generator_t *gen, h2o_req_t *req)
{
    struct stream_sink *st = (struct stream_sink *)gen;

    (void)req;
    st->sending = 0;
    st->flight.len = 0;
    stream_flush(st);
    if (st->session != NULL)
        gw_session_sink_progress(st->session);
}

static void stream_stop(h2o_generator_t *gen, h2o_req_t *req)
{
    struct stream_sink *st = (struct stream_sink *)gen;
    struct gw_session *s = st->session;

    (void)req;
    st->session = NULL;
    if (s != NULL)
        gw_session_client_gone(s, 0);
}

static void stream_dispose(void *p)
{
    struct stream_sink *st = p;

    stream_stop(&st->gen, NULL); /* the client went away first */
    moat_buf_free(&st->pending);
    moat_buf_free(&st->flight);
}

static void stream_start(struct stream_sink *st)
{
    h2o_req_t *req = st->r->req;

    st->started = 1;
    req->res.status = 200;
    req->res.reason = "OK";
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, H2O_STRLIT("application/x-ndjson"));
    h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("x-request-id"), 0, NULL, st->r->request_id,
                          strlen(st->r->request_id));
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CACHE_CONTROL, NULL, H2O_STRLIT("no-store"));
    h2o_start_response(req, &st->gen);
}

static void stream_send(void *sink, const char *json, size_t len)
{
    struct stream_sink *st = sink;

    if (!st->started)
        stream_start(st);
    if (moat_buf_append(&st->pending, json, len) != 0 || moat_buf_append(&st->pending, "\n", 1) != 0)
        return; /* out of memory: the line is lost, the session goes on */
    stream_flush(st);
}

static size_t stream_backlog(void *sink)
{
    const struct stream_sink *st = sink;

    return st->pending.len + st->flight.len;
}

static void stream_end(void *sink, int code, const struct gw_session_end *how)
{
    struct stream_sink *st = sink;
    struct gw_request *r = st->r;

    (void)code;
    st->session = NULL;
    r->cpu_ms = how->cpu_ms; /* charged when the in-flight slot goes back */
    if (!st->started) {
        /* refused before the program started: an ordinary error answer */
        r->status = how->status ? how->status : 500;
        gw_respond_error(r, r->status, how->code != NULL && how->code[0] ? how->code : "session_failed",
                         how->message != NULL && how->message[0] ? how->message : "the run could not be started");
        return;
    }
    r->status = 200;
    gw_log_request(r, 200);
    st->ended = 1;
    stream_flush(st);
}

static const struct gw_session_sink stream_sink_ops = {stream_send, stream_backlog, stream_end};

/* Step 9 of a streamed execute: the session, and the stream it answers on. */
static enum gw_flow stream_answer(struct gw_request *r, struct exec_job *job)
{
    struct stream_sink *st;
    struct gw_session *s = gw_session_new(r, GW_SESSION_STREAM);

    if (s == NULL)
        return gw_deny(r, 500, GW_REASON_BACKEND, "out of memory");
    st = h2o_mem_alloc_shared(&r->req->pool, sizeof(*st), stream_dispose);
    memset(st, 0, sizeof(*st));
    st->gen.proceed = stream_proceed;
    st->gen.stop = stream_stop;
    st->r = r;
    st->session = s;
    gw_session_attach(s, &stream_sink_ops, st);
    gw_session_start(s, &job->ereq, job->metadata);
    return GW_TAKEN;
}

/* Step 9: the result as Piston JSON, and for the trail its fields and packet. */
static enum gw_flow answer(struct gw_request *r, const struct backend_reply *reply)
{
    const struct exec_job *job = r->job;
    const struct moat_exec_result *res;

    if (job->stream)
        return stream_answer(r, r->job);
    res = &reply->u.result;
    if (reply->hdr.type != MOAT_MSG_EXEC_RESULT) {
        log_warnx("%s: id=%s: unexpected reply type %u", __func__, r->request_id, reply->hdr.type);
        return gw_deny(r, 502, GW_REASON_BACKEND, "bad reply from backend");
    }
    r->cpu_ms = moat_exec_result_cpu_ms(res);
    json_t *verdicts = NULL;
    if (job->tests.count > 0)
        r->body = piston_exec_result_tests_json(res, &job->tests, &verdicts);
    else
        r->body = piston_exec_result_json(res);
    if (r->body == NULL)
        return gw_deny(r, 500, GW_REASON_BACKEND, "out of memory");
    if (r->worker->audit.enabled) {
        struct gw_audit_who who = {.request_id = r->request_id, .tenant = r->tenant};
        if ((r->result_fields = json_object()) == NULL) {
            json_decref(verdicts);
            return gw_deny(r, 500, GW_REASON_AUDIT, "out of memory");
        }
        gw_audit_add_result(r->result_fields, &job->ereq, res);
        if (verdicts != NULL)
            json_object_set_new(r->result_fields, "tests", verdicts);
        verdicts = NULL;
        r->packet = gw_audit_packet(&who, &job->ereq, job->metadata, r->body, &r->packet_len);
    }
    json_decref(verdicts);
    return GW_NEXT;
}

const struct gw_handler gw_handler_execute = {prepare, describe, answer, NULL, NULL};
