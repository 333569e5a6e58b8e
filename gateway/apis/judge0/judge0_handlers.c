/*
 * judge0_handlers.c - the routes of Judge0 CE's API (routes.c): the
 * catalogue (GET /languages, /languages/{id}, /statuses, /about,
 * /config_info), POST /submissions and GET /submissions/{token}.
 *
 * Theory of operation
 * -------------------
 * Handlers only translate (judge0_api.c holds the translation, as pure
 * functions): authentication (an API key as Bearer or as Judge0's
 * X-Auth-Token), authorization (the endpoints "submissions" and
 * "languages"), admission, the audit trail and the answer are the
 * pipeline's.  A submission is an execution like /api/v2/execute: parsed
 * strictly, judged by the tenant's policy (judge.c, the one judge), sent to
 * the backend as a MOAT_MSG_EXEC_REQUEST built afresh, recorded with its
 * request and packet, and its result judged in Judge0's terms, kept in the
 * store (judge0_store.c) under a random token bound to the tenant, and
 * answered.  wait=false answers {"token"} as soon as the decision record
 * is durable; the submission then waits its turn in the gateway's queue
 * (judge0_queue.c: fair across tenants, bounded per tenant and overall,
 * max_running runs at once), showing "In Queue", then "Processing" while
 * its detached backend call runs, and its end is recorded and kept like a
 * synchronous result (async_run below).  A batch's entries are queued the
 * same way, each on its own, except that entries of one compiled program
 * are one job compiled once, a test case each (async_group below).  Room
 * in the queue is reserved in step 7,
 * before the decision record (a batch fits whole or is refused whole), and
 * a queued submission holds no in-flight slot (its admission checks the
 * rate and the CPU budget only: submit_queued, the handlers' queued), and its run's CPU time
 * is charged to the tenant's budget when it ends (rl_charge).
 *
 * Errors carry moat's {message, code, request_id} and, where Judge0
 * clients read them, Judge0's own members: "error" (400, 404) and the
 * field errors of a 422 ({"language_id": ["can't be blank"]}).
 */
#include "core/pipeline.h"
#include "core/http.h"
#include "exec/judge.h"
#include "judge0_api.h"
#include "judge0_callback.h"
#include "judge0_dispatch.h"
#include "judge0_queue.h"
#include "store/judge0_store.h"
#include "log.h"
#include "moat_base64.h"
#include "core/routes.h"
#include "exec/runtime_table.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/rand.h>

/* ------------------------------------------------------------- helpers */

/*
 * Refuse r with Judge0's shape as well as moat's: {message, code,
 * request_id, error} and extra's members (taken; Judge0's field errors).
 */
static enum gw_flow refuse(struct gw_request *r, int status, enum gw_reason reason, const char *message, json_t *extra)
{
    enum gw_flow f = gw_deny_copy(r, status, reason, message);
    json_t *o = json_pack("{s:s, s:s, s:s, s:s}", "message", message, "code", gw_error_code(reason, status), "request_id",
                          r->request_id, "error", message);

    if (o != NULL && extra != NULL)
        json_object_update_missing(o, extra);
    json_decref(extra);
    if (o != NULL)
        r->error_body = json_dumps(o, JSON_COMPACT); /* NULL: the usual body */
    json_decref(o);
    return f;
}

/* The query string's parameters, as the route allows them. */
static enum gw_flow query(struct gw_request *r, unsigned allowed, struct judge0_query *q)
{
    h2o_req_t *req = r->req;
    const char *s = NULL;
    size_t len = 0;
    char err[256];

    if (req->query_at != SIZE_MAX) {
        s = req->path.base + req->query_at + 1;
        len = req->path.len - req->query_at - 1;
    }
    if (judge0_parse_query(s, len, allowed, q, err, sizeof(err)) != 0)
        return refuse(r, 400, GW_REASON_FILTER, err, NULL);
    return GW_NEXT;
}

static int64_t wall_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The body is r->body = text (malloc'ed) or a 500. */
static enum gw_flow answer_with(struct gw_request *r, char *text)
{
    if (text == NULL)
        return gw_deny(r, 500, GW_REASON_BACKEND, "out of memory");
    r->body = text;
    return GW_NEXT;
}

/* A route without query parameters. */
static enum gw_flow no_query(struct gw_request *r)
{
    struct judge0_query q;

    return query(r, 0, &q);
}

/* ----------------------------------------------------------- catalogue */

/* The installed runtime of l the tenant may use, or NULL. */
static const struct moat_runtime *usable(struct gw_request *r, const struct moat_runtimes *all, const struct judge0_lang *l)
{
    for (size_t i = 0; i < all->count; i++) {
        const struct moat_runtime *rt = &all->items[i];
        struct policy_runtime pr = {rt->language, (const char *const *)rt->aliases, rt->naliases, rt->version};
        if (strcmp(rt->language, l->moat) == 0)
            return policy_runtime_allowed(&r->tenant_cfg->policy, &pr) ? rt : NULL;
    }
    return NULL;
}

static int runtimes_reply(struct gw_request *r, const struct backend_reply *reply)
{
    if (reply->hdr.type != MOAT_MSG_RUNTIMES) {
        log_warnx("%s: id=%s: unexpected reply type %u", __func__, r->request_id, reply->hdr.type);
        return -1;
    }
    gw_runtime_table_store(r->worker, &reply->u.runtimes);
    return 0;
}

/* GET /languages: the languages installed that the tenant may use. */
static enum gw_flow languages_prepare(struct gw_request *r)
{
    enum gw_flow f = no_query(r);

    return f != GW_NEXT ? f : gw_runtimes_query(r, &r->frame, &r->job_id);
}

static enum gw_flow languages_answer(struct gw_request *r, const struct backend_reply *reply)
{
    const struct judge0_lang *l;
    const struct moat_runtime *rt;
    json_t *a;

    if (runtimes_reply(r, reply) != 0)
        return gw_deny(r, 502, GW_REASON_BACKEND, "bad reply from backend");
    if ((a = json_array()) == NULL)
        return gw_deny(r, 500, GW_REASON_BACKEND, "out of memory");
    for (size_t i = 0; (l = judge0_lang_at(i)) != NULL; i++)
        if ((rt = usable(r, &reply->u.runtimes, l)) != NULL &&
            json_array_append_new(a, judge0_language_json(l, rt->version, 0)) != 0) {
            json_decref(a);
            return gw_deny(r, 500, GW_REASON_BACKEND, "out of memory");
        }
    char *s = json_dumps(a, JSON_COMPACT);
    json_decref(a);
    return answer_with(r, s);
}

const struct gw_handler gw_handler_judge0_languages = {languages_prepare, NULL, languages_answer, NULL, NULL};

/* GET /languages/{id}: one of them; 404 unless installed and allowed. */
static const struct judge0_lang *language_of_path(struct gw_request *r)
{
    const char *p;
    size_t len;
    int64_t id = 0;

    if (gw_route_param(r->route, r->req->path_normalized.base, r->req->path_normalized.len, &p, &len) != 0 || len > 6)
        return NULL;
    for (size_t i = 0; i < len; i++) {
        if (p[i] < '0' || p[i] > '9')
            return NULL;
        id = id * 10 + (p[i] - '0');
    }
    return judge0_lang_by_id(id);
}

static enum gw_flow language_prepare(struct gw_request *r)
{
    enum gw_flow f = no_query(r);

    if (f != GW_NEXT)
        return f;
    if (language_of_path(r) == NULL)
        return refuse(r, 404, GW_REASON_ENDPOINT, "language not found", NULL);
    return gw_runtimes_query(r, &r->frame, &r->job_id);
}

static enum gw_flow language_answer(struct gw_request *r, const struct backend_reply *reply)
{
    const struct judge0_lang *l = language_of_path(r);
    const struct moat_runtime *rt;

    if (runtimes_reply(r, reply) != 0)
        return gw_deny(r, 502, GW_REASON_BACKEND, "bad reply from backend");
    if ((rt = usable(r, &reply->u.runtimes, l)) == NULL)
        return refuse(r, 404, GW_REASON_ENDPOINT, "language not found", NULL);
    json_t *o = judge0_language_json(l, rt->version, 1);
    char *s = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return answer_with(r, s);
}

const struct gw_handler gw_handler_judge0_language = {language_prepare, NULL, language_answer, NULL, NULL};

static enum gw_flow statuses_answer(struct gw_request *r, const struct backend_reply *reply)
{
    (void)reply;
    return answer_with(r, judge0_statuses_json());
}

const struct gw_handler gw_handler_judge0_statuses = {no_query, NULL, statuses_answer, NULL, NULL};

static enum gw_flow about_answer(struct gw_request *r, const struct backend_reply *reply)
{
    (void)reply;
    return answer_with(r, judge0_about_json());
}

const struct gw_handler gw_handler_judge0_about = {no_query, NULL, about_answer, NULL, NULL};

/* GET /config_info: this tenant's effective limits, and the languages it
 * may use whose compiler options are allow-listed (the backend's table). */
static enum gw_flow config_info_answer(struct gw_request *r, const struct backend_reply *reply)
{
    const struct tenant_policy *p = &r->tenant_cfg->policy;
    const struct judge0_lang *l;
    const struct moat_runtime *rt;
    char name[128];
    json_t *langs;

    if (runtimes_reply(r, reply) != 0)
        return gw_deny(r, 502, GW_REASON_BACKEND, "bad reply from backend");
    if ((langs = json_array()) == NULL)
        return gw_deny(r, 500, GW_REASON_BACKEND, "out of memory");
    for (size_t i = 0; (l = judge0_lang_at(i)) != NULL; i++) {
        if ((rt = usable(r, &reply->u.runtimes, l)) == NULL || rt->noption_patterns == 0)
            continue;
        judge0_language_name(l, rt->version, name, sizeof(name));
        json_array_append_new(langs, json_string(name));
    }
    const struct judge0_callbacks_info cb = {r->tenant_cfg->callbacks.nallow > 0, r->cfg->callbacks.max_tries,
                                             (double)r->cfg->callbacks.timeout_ms / 1000.0};
    char *s = judge0_config_info_json(p, (unsigned)r->cfg->submissions.ttl_s, r->cfg->submissions.queue_max_per_tenant, langs, &cb);
    json_decref(langs);
    return answer_with(r, s);
}

const struct gw_handler gw_handler_judge0_config_info = {languages_prepare, NULL, config_info_answer, NULL, NULL};

/* --------------------------------------------------------- submissions */

/* A submission, from its parse to its answer (in req->pool). */
struct submission {
    struct judge0_query q;
    struct judge0_request j;
    struct moat_exec_request ereq; /* as judged: the effective limits */
    char token[JUDGE0_TOKEN_LEN + 1];
    char lang_name[128];
    int64_t created_ms;
    int asked_table;
    struct moat_buf frame; /* wait=false: the backend message, sent after the answer */
    size_t reserved;       /* wait=false: room in the queue, until the run is queued */
    char tenant[GW_MAX_TENANT_NAME + 1];
};

static void submission_dispose(void *p)
{
    struct submission *s = p;

    if (s->reserved > 0) /* refused or gone before its run was queued */
        judge0_queue_unreserve(judge0_queue_default(), s->tenant, s->reserved);
    judge0_request_free(&s->j);
    moat_exec_request_free(&s->ereq);
    moat_buf_free(&s->frame);
}

/* Step 7, first time: the query and the body, strictly. */
static enum gw_flow submission_parse(struct gw_request *r)
{
    h2o_req_t *req = r->req;
    struct submission *s;
    json_t *errors = NULL;
    char err[GW_ERR_MSG_MAX];
    enum gw_flow f;
    int rc;

    s = h2o_mem_alloc_shared(&req->pool, sizeof(*s), submission_dispose);
    memset(s, 0, sizeof(*s));
    r->job = s;
    if ((f = query(r, JUDGE0_Q_WAIT | JUDGE0_Q_BASE64 | JUDGE0_Q_FIELDS, &s->q)) != GW_NEXT)
        return f;
    if (req->entity.len > r->cfg->max_request_entity_size)
        return refuse(r, 413, GW_REASON_FILTER, "request body is larger than max_request_entity_size", NULL);
    if (!gw_is_json_content_type(req))
        return refuse(r, 415, GW_REASON_FILTER, "Content-Type must be application/json (charset utf-8)", NULL);
    rc = judge0_parse_submission(req->entity.base, req->entity.len, s->q.base64, &s->j, &errors, err, sizeof(err));
    if (rc == 0) {
        struct cb_tenant_rules cbr = gw_tenant_callback_rules(r->tenant_cfg);
        rc = judge0_check_callback(&s->j, &cbr, &errors, err, sizeof(err));
    }
    if (rc == -2)
        return refuse(r, 422, GW_REASON_FILTER, err, errors);
    if (rc != 0)
        return refuse(r, 400, GW_REASON_FILTER, err, NULL);
    return GW_NEXT;
}

/* Why a submission was refused before it ran (judge_submission). */
struct refusal {
    int status;
    enum gw_reason reason;
    const char *rule; /* a content rule's name, or NULL */
    json_t *fields;   /* Judge0's 422 field errors (taken by the caller), or NULL */
    char message[GW_ERR_MSG_MAX];
};

static int refused(struct refusal *no, int status, enum gw_reason reason, json_t *fields, const char *message)
{
    no->status = status;
    no->reason = reason;
    no->fields = fields;
    snprintf(no->message, sizeof(no->message), "%s", message);
    return -1;
}

/*
 * A parsed submission (a POST's, a batch entry's) made an execution
 * request: its language installed, its compiler options on the language's
 * allow-list (the backend checks them again), judged by the tenant's
 * policy, its runs' wall budget within what the gateway waits for.  0, or
 * -1 with *no saying why.
 */
static int judge_submission(struct gw_request *r, const struct judge0_request *j, struct moat_exec_request *ereq, char *lang_name,
                            size_t lang_name_len, struct refusal *no)
{
    const struct moat_runtime *rt = gw_runtime_table_pick(r->worker, j->lang->moat, "*");
    struct policy_verdict v;
    char msg[GW_ERR_MSG_MAX];
    json_t *fields;

    no->rule = NULL;
    if (rt == NULL) {
        snprintf(msg, sizeof(msg), "language with id %lld doesn't exist", (long long)j->language_id);
        return refused(no, 422, GW_REASON_LANGUAGE, json_pack("{s:[s]}", "language_id", msg), msg);
    }
    judge0_language_name(j->lang, rt->version, lang_name, lang_name_len);
    if (judge0_check_options(j, rt->option_patterns, rt->noption_patterns, &fields, msg, sizeof(msg)) != 0)
        return refused(no, 422, GW_REASON_FILTER, fields, msg);
    if (judge0_exec_request(j, ereq) != 0)
        return refused(no, 500, GW_REASON_FILTER, NULL, "out of memory");
    if (gw_judge_exec(r->worker, &r->tenant_cfg->policy, POLICY_EP_EXECUTE, ereq, &v) != 0) {
        no->rule = v.rule;
        return refused(no, v.http_status, gw_reason_of_policy(v.reason), NULL, v.message);
    }
    if (ereq->ntests > 0 && gw_judge_tests_budget(r->cfg->backend_timeout_ms, ereq, msg, sizeof(msg)) != 0)
        return refused(no, 422, GW_REASON_LIMIT, json_pack("{s:[s]}", "number_of_runs", msg), msg);
    return 0;
}

/* The submission as an execution request, judged by the tenant's policy. */
static enum gw_flow submission_judge(struct gw_request *r, struct submission *s)
{
    struct refusal no;

    if (judge_submission(r, &s->j, &s->ereq, s->lang_name, sizeof(s->lang_name), &no) == 0)
        return GW_NEXT;
    r->rule = no.rule;
    r->note = no.rule;
    return refuse(r, no.status, no.reason, no.message, no.fields);
}

/* Room in the queue for n of the tenant's submissions (*reserved = n), or
 * the refusal: 503 when the queue is full, 429 when the tenant's share is. */
static enum gw_flow queue_room(struct gw_request *r, size_t n, size_t *reserved, char tenant[GW_MAX_TENANT_NAME + 1])
{
    const struct gw_submissions_config *c = &r->cfg->submissions;
    const struct jq_caps caps = {(unsigned)c->max_running, c->queue_max, c->queue_max_per_tenant};

    snprintf(tenant, GW_MAX_TENANT_NAME + 1, "%s", r->tenant);
    switch (judge0_queue_reserve(judge0_queue_default(), tenant, n, &caps)) {
    case JQ_OK:
        *reserved = n;
        return GW_NEXT;
    case JQ_FULL:
        gw_add_retry_after(r, GW_JUDGE0_QUEUE_RETRY_AFTER_MS);
        return refuse(r, 503, GW_REASON_QUEUE,
                      n > 1 ? "the submissions queue is full: the batch is refused whole, none of it was queued"
                            : "the submissions queue is full",
                      NULL);
    case JQ_TENANT_FULL:
        gw_add_retry_after(r, GW_JUDGE0_QUEUE_RETRY_AFTER_MS);
        return refuse(r, 429, GW_REASON_QUEUE,
                      n > 1 ? "this tenant's share of the submissions queue is full: the batch is refused whole, none of it was "
                              "queued"
                            : "this tenant's share of the submissions queue is full",
                      NULL);
    case JQ_NO_MEMORY:
        break;
    }
    return gw_deny(r, 500, GW_REASON_FILTER, "out of memory");
}

/* A batch always waits in the queue; a submission unless its query says wait=true. */
static int batch_queued(const struct gw_request *r)
{
    (void)r;
    return 1;
}

static int submit_queued(const struct gw_request *r)
{
    const h2o_req_t *req = r->req;
    struct judge0_query q;
    char err[GW_ERR_MSG_MAX];

    if (req->query_at == SIZE_MAX)
        return 1; /* Judge0's default: wait=false */
    return judge0_parse_query(req->path.base + req->query_at + 1, req->path.len - req->query_at - 1,
                              JUDGE0_Q_WAIT | JUDGE0_Q_BASE64 | JUDGE0_Q_FIELDS, &q, err, sizeof(err)) == 0 &&
           !q.wait;
}

/* 503 store_unavailable with Retry-After: the results store (Redis) cannot
 * be asked or told now (fail closed: nothing run, nothing wrongly shown). */
static enum gw_flow store_down(struct gw_request *r, uint64_t retry_after_ms)
{
    gw_add_retry_after(r, retry_after_ms);
    return refuse(r, 503, GW_REASON_STORE, "the submissions store cannot be reached: try again later", NULL);
}

/* A record r keeps and does not wait for (its answer carries it): a put
 * the store did not take is logged (Redis: and tried again). */
struct logged_put {
    char request_id[GW_REQUEST_ID_LEN + 1];
    char token[JUDGE0_TOKEN_LEN + 1];
};

static void on_logged_put(void *arg, int rc)
{
    struct logged_put *lp = arg;

    if (rc < 0)
        log_warnx("judge0: id=%s: token %s: the record could not be kept yet", lp->request_id, lp->token);
    free(lp);
}

static void keep_logged(struct gw_request *r, const char *token, const char *text, size_t len)
{
    struct judge0_store *st = judge0_store_default();
    struct logged_put *lp = malloc(sizeof(*lp));

    if (st == NULL || lp == NULL) {
        free(lp);
        log_warnx("%s: id=%s: token %s: out of memory: the record could not be kept", __func__, r->request_id, token);
        return;
    }
    snprintf(lp->request_id, sizeof(lp->request_id), "%s", r->request_id);
    snprintf(lp->token, sizeof(lp->token), "%s", token);
    judge0_store_put_on(st, r->worker->ctx.loop, r->tenant, token, text, len, judge0_store_now_ms(), JUDGE0_PUT_FINAL,
                        on_logged_put, lp);
}

/* Step 7's first check for a POST: a result it could not keep is not run. */
static enum gw_flow store_ready(struct gw_request *r)
{
    struct judge0_store *st = judge0_store_default();
    uint64_t retry_after_ms = 0;

    if (st != NULL && !judge0_store_ready(st, r->worker->ctx.loop, &retry_after_ms))
        return store_down(r, retry_after_ms);
    return GW_NEXT;
}

/* Step 7: parse, the runtime table, judge, token, encode. */
static enum gw_flow submit_prepare(struct gw_request *r)
{
    struct submission *s = r->job;
    const char *why = NULL;
    uint8_t rnd[16];
    enum gw_flow f;

    if (s == NULL && ((f = store_ready(r)) != GW_NEXT || (f = submission_parse(r)) != GW_NEXT))
        return f;
    s = r->job;
    if (!gw_runtime_table_fresh(r->worker) && !s->asked_table) {
        s->asked_table = 1;
        return gw_runtime_table_fetch(r); /* then this step again */
    }
    if ((f = submission_judge(r, s)) != GW_NEXT)
        return f;
    if (!s->q.wait && !r->cfg->submissions.queue_redis && (f = queue_room(r, 1, &s->reserved, s->tenant)) != GW_NEXT)
        return f;
    if (RAND_bytes(rnd, sizeof(rnd)) != 1)
        return gw_deny(r, 500, GW_REASON_FILTER, "no random bytes for a token");
    judge0_token(rnd, s->token);
    s->created_ms = wall_ms();
    r->job_id = backend_next_job_id();
    if (moat_encode_exec_request(&s->frame, r->job_id, &s->ereq, &why) != 0) {
        char err[GW_ERR_MSG_MAX];
        snprintf(err, sizeof(err), "request rejected: %s", why != NULL ? why : "cannot encode");
        return refuse(r, 400, GW_REASON_FILTER, err, NULL);
    }
    if (s->q.wait) { /* the pipeline's backend call; wait=false: ours, after the answer */
        r->frame = s->frame;
        memset(&s->frame, 0, sizeof(s->frame));
    }
    return GW_NEXT;
}

/* Step 8: the request as execute records it, and Judge0's part. */
static void submit_describe(struct gw_request *r, json_t *record)
{
    const struct submission *s = r->job;
    const struct moat_buf *f = s->q.wait ? &r->frame : &s->frame;

    gw_audit_add_request(record, &s->ereq, f->data + MOAT_FRAME_HEADER_SIZE, f->len - MOAT_FRAME_HEADER_SIZE);
    json_object_set_new(record, "judge0",
                        json_pack("{s:s, s:I, s:b, s:b, s:s*}", "token", s->token, "language_id", (json_int_t)s->j.language_id,
                                  "wait", s->q.wait, "base64_encoded", s->q.base64, "callback_url", s->j.callback_url));
}

/* The body of a POST: the result (wait=true), or the token. */
static char *submit_body(struct submission *s, const json_t *record)
{
    int not_utf8 = 0;
    char *body;

    json_t *o;

    if (s->q.wait && ((body = judge0_render(record, &s->q, &not_utf8)) != NULL || !not_utf8))
        return body;
    if (!s->q.wait)
        o = json_pack("{s:s}", "token", s->token);
    else /* Judge0's answer: created, but not showable without base64 */
        o = json_pack("{s:s, s:s}", "error",
                      "some attributes for this submission cannot be converted to UTF-8, use base64_encoded=true query parameter",
                      "token", s->token);
    body = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return body;
}

static enum gw_flow start_async(struct gw_request *r, struct submission *s);
static enum gw_flow remote_submit(struct gw_request *r, struct submission *s);
struct batch;
static enum gw_flow remote_batch(struct gw_request *r, struct batch *b);

/* Step 9: judge the result, keep it, answer; the record's fields and packet. */
static enum gw_flow submit_answer(struct gw_request *r, const struct backend_reply *reply)
{
    struct submission *s = r->job;
    const struct moat_exec_result *res;
    json_t *record;
    char *text;
    size_t len;

    if (reply == NULL)
        return start_async(r, s);
    res = &reply->u.result;
    if (reply->hdr.type != MOAT_MSG_EXEC_RESULT) {
        log_warnx("%s: id=%s: unexpected reply type %u", __func__, r->request_id, reply->hdr.type);
        return gw_deny(r, 502, GW_REASON_BACKEND, "bad reply from backend");
    }
    r->cpu_ms = moat_exec_result_cpu_ms(res);
    if ((record = judge0_submission_record(s->token, s->created_ms, wall_ms(), &s->j, &s->ereq, res, s->lang_name)) == NULL)
        return gw_deny(r, 500, GW_REASON_BACKEND, "out of memory");
    text = json_dumps(record, JSON_COMPACT);
    r->body = text != NULL ? submit_body(s, record) : NULL;
    if (text == NULL || r->body == NULL) {
        json_decref(record);
        free(text);
        return gw_deny(r, 500, GW_REASON_BACKEND, "out of memory");
    }
    len = strlen(text);
    keep_logged(r, s->token, text, len);
    judge0_callback_kept(r->cfg, r->tenant, s->token, text, len);
    r->ok_status = 201;
    if (r->worker->audit.enabled) {
        struct gw_audit_who who = {.request_id = r->request_id, .tenant = r->tenant};
        if ((r->result_fields = json_object()) == NULL) {
            json_decref(record);
            free(text);
            return gw_deny(r, 500, GW_REASON_AUDIT, "out of memory");
        }
        gw_audit_add_result(r->result_fields, &s->ereq, res);
        json_object_set_new(r->result_fields, "judge0",
                            json_pack("{s:s, s:O}", "token", s->token, "status", json_object_get(record, "status")));
        r->packet = gw_audit_packet(&who, &s->ereq, s->j.metadata, text, &r->packet_len); /* every field, texts in base64 */
    }
    json_decref(record);
    free(text);
    return GW_NEXT;
}

const struct gw_handler gw_handler_judge0_submit = {submit_prepare, submit_describe, submit_answer, submit_queued, NULL};

/* ------------------------------------------------ wait=false: after the answer */

/*
 * An asynchronous run outlives its request: it holds copies of what the
 * result record needs and the parsed submission, and is an item of the
 * submissions queue (judge0_queue.c) until its turn.  Then (on_dispatch, on
 * the thread of the worker that made room) it shows "Processing" and makes
 * a detached backend call on that worker's loop.  When the backend answers,
 * its place among the queue's running runs goes to the next item at once
 * (async_ran); then the result is judged and recorded (durable before the
 * store shows it: fail closed, like a synchronous answer), kept in the
 * store in place of the "Processing" record, and its CPU time charged to
 * the tenant's budget.
 *
 * A batch entry has a request id of its own and makes its own decision
 * record (durable before its run starts) when its turn comes.
 */
struct async_run {
    struct jq_item item;                   /* first: the queue's item is the run */
    struct gw_worker *worker;              /* the request's, then the one that started the run */
    int started;                           /* counts against max_running until the backend answers */
    int own_decision;                      /* a batch entry: records its decision before it runs */
    const char *path;                      /* the route, for the records (a literal) */
    char parent_id[GW_REQUEST_ID_LEN + 1]; /* a batch entry: the batch's request id */
    struct moat_buf frame;                 /* the backend message, until it is sent */
    uint64_t job_id;
    char socket[GW_MAX_PATH_LEN + 1];
    char request_id[GW_REQUEST_ID_LEN + 1];
    char tenant[GW_MAX_TENANT_NAME + 1];
    char key_id[80];
    char client[64];
    char token[JUDGE0_TOKEN_LEN + 1];
    char lang_name[128];
    int64_t created_ms;
    uint64_t cpu_ms;
    struct judge0_request j;
    struct moat_exec_request ereq;
    char *record; /* the finished record, kept once its audit record is durable */
    size_t record_len;
    struct async_group *group;              /* a member of a batch's group compiled once (below), or NULL */
    size_t case_index;                      /* its test case in the group's job */
    size_t group_size;                      /* its group's members; 0: none (kept when it leaves one) */
    char group_first[JUDGE0_TOKEN_LEN + 1]; /* the token of its group's first member */
    struct claimed *claim;                  /* queue: redis: the entry it came from (below), or NULL */
    int give_back;                          /* its run was lost (the backend went away mid-run): the entry goes back */
    unsigned refs;                          /* 1 + its records on their way to the store (async_keep); __atomic: the run's
                                             * thread and the accepting one may both have one on the way */
};

/* What the records say of a's group: {first, size, case}, or NULL (none). */
static json_t *group_json(const struct async_run *a)
{
    if (a->group_size == 0)
        return NULL;
    return json_pack("{s:s, s:I, s:I}", "first", a->group_first, "size", (json_int_t)a->group_size, "case",
                     (json_int_t)a->case_index);
}

static void async_begin(struct async_run *a);
static void group_member_gone(struct async_group *g);
static json_t *claim_json(const struct claimed *cl);

/* Where the run was in the queue: in this gateway's memory queue {seq,
 * ahead}; in the shared one {entry, attempt, accepted_by}. */
static json_t *queue_json(const struct async_run *a)
{
    if (a->claim != NULL)
        return claim_json(a->claim);
    return json_pack("{s:I, s:I}", "seq", (json_int_t)a->item.seq, "ahead", (json_int_t)a->item.ahead);
}

static unsigned max_running(const struct gw_worker *w)
{
    return (unsigned)w->cfg->submissions.max_running;
}

static void claim_release(struct claimed *cl);

/* Freed once the store answered its puts: a claimed entry is acknowledged
 * (claim_release) only after its final records are kept. */
static void async_destroy(struct async_run *a)
{
    if (__atomic_sub_fetch(&a->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    if (a->group != NULL)
        group_member_gone(a->group);
    if (a->claim != NULL)
        claim_release(a->claim);
    judge0_request_free(&a->j);
    moat_exec_request_free(&a->ereq);
    moat_buf_free(&a->frame);
    free(a->record);
    free(a);
}

/* The queue stopped (shutdown) before a's turn: the store keeps showing it
 * "In Queue", which a restart turns into an Internal Error. */
static void async_discard(struct jq_item *it)
{
    async_destroy((struct async_run *)it);
}

/* The backend is done with a's run (or never got it): its place among the
 * running goes to the next item at once, without waiting for the result's
 * audit record, so the backend's slots do not idle meanwhile.  Idempotent. */
static void async_ran(struct async_run *a)
{
    if (!a->started)
        return;
    a->started = 0;
    if (a->claim != NULL)
        gw_dispatch_done();
    else
        judge0_queue_done(judge0_queue_default(), a->worker, max_running(a->worker));
}

/* The run is over: its CPU time charged, its place to the next item. */
static void async_free(struct async_run *a)
{
    if (a->cpu_ms > 0)
        rl_charge(a->worker->server->limiter, a->tenant, a->cpu_ms, rl_monotonic_ms());
    async_ran(a);
    async_destroy(a);
}

static void async_who(const struct async_run *a, struct gw_audit_who *who)
{
    static const char method[] = "POST";

    *who =
        (struct gw_audit_who){a->request_id, a->tenant, a->key_id, a->client, method, sizeof(method) - 1, a->path, strlen(a->path)};
}

static int claim_unfinished(struct claimed *cl, const char *tenant, const char *token, const char *text, size_t len);

/*
 * What a 201 waits for with a store that answers later (Redis): the
 * records ("In Queue", or "Processing" of a run started at once) of what
 * it accepted, kept, so that a GET on any gateway right after it finds
 * them.  The puts async_keep makes while answer_gate is set (on the
 * request's thread, during its step) count for it; gate_arm says whether
 * the step waits.
 */
struct gate {
    struct gw_req_watch watch;
    unsigned waiting;  /* puts not yet answered */
    int armed;         /* the step is over: the last answer ends it */
    enum gw_flow flow; /* what follows then */
};

static __thread struct gate *answer_gate;

/* A gate for r, or NULL (out of memory: the answer does not wait). */
static struct gate *gate_new(struct gw_request *r)
{
    struct gate *g = calloc(1, sizeof(*g));

    if (g == NULL || gw_req_watch_start(&g->watch, r) != 0) {
        free(g);
        return NULL;
    }
    return g;
}

static void gate_free(struct gate *g)
{
    gw_req_watch_end(&g->watch);
    free(g);
}

static void gate_put_done(struct gate *g)
{
    struct gw_request *r = g->watch.r;
    enum gw_flow flow = g->flow;

    if (--g->waiting > 0 || !g->armed)
        return;
    gate_free(g);
    if (r != NULL)
        gw_step_done(r, flow);
}

/* The step is over and flow follows: at once (GW_NEXT...: nothing waits),
 * or once the last put is answered (GW_WAIT). */
static enum gw_flow gate_arm(struct gate *g, enum gw_flow flow)
{
    if (g == NULL)
        return flow;
    if (g->waiting == 0) {
        gate_free(g);
        return flow;
    }
    g->flow = flow;
    g->armed = 1;
    return GW_WAIT;
}

/* One of a's records on its way to the store. */
struct keep {
    struct async_run *a;
    struct gw_worker *worker; /* whose loop it went on */
    struct gate *gate;        /* a 201 waiting for it, or NULL */
    enum judge0_put_mode mode;
    size_t len;
    char *text; /* the record */
};

static void on_kept(void *arg, int rc)
{
    struct keep *k = arg;
    struct async_run *a = k->a;

    if (rc < 0 && k->mode == JUDGE0_PUT_FINAL && a->claim != NULL &&
        claim_unfinished(a->claim, a->tenant, a->token, k->text, k->len) == 0)
        rc = 1; /* kept once Redis answers: the callback follows then */
    else if (rc < 0)
        log_warnx("%s: id=%s: token %s: the result could not be kept yet", __func__, a->request_id, a->token);
    else if (rc == 0)
        judge0_callback_kept(k->worker->cfg, a->tenant, a->token, k->text, k->len);
    if (k->gate != NULL)
        gate_put_done(k->gate);
    free(k->text);
    free(k);
    async_destroy(a); /* the put's reference */
}

/* The store shows text (mode: judge0_store_put_mode's), or an Internal
 * Error saying why it cannot.  a is not freed before the store answered
 * (async_destroy).  A claimed entry's final record that Redis did not
 * take is kept with the entry, which is not acknowledged until it is
 * (claim_release). */
static void async_keep(struct async_run *a, const char *text, size_t len, enum judge0_put_mode mode)
{
    struct judge0_store *st = judge0_store_default();
    struct keep *k = calloc(1, sizeof(*k));

    if (st == NULL || k == NULL || (k->text = malloc(len + 1)) == NULL) {
        free(k);
        log_warnx("%s: id=%s: token %s: out of memory: the result could not be kept", __func__, a->request_id, a->token);
        return;
    }
    k->a = a;
    k->worker = a->worker;
    if ((k->gate = answer_gate) != NULL)
        k->gate->waiting++;
    k->mode = mode;
    k->len = len;
    memcpy(k->text, text, len); /* the answer needs it: a callback's body, or a claim's final to keep */
    k->text[len] = '\0';
    __atomic_add_fetch(&a->refs, 1, __ATOMIC_RELAXED);
    judge0_store_put_on(st, a->worker->ctx.loop, a->tenant, a->token, text, len, judge0_store_now_ms(), mode, on_kept, k);
}

/* A record's status (and status_id) becomes id. */
static void set_status(json_t *record, enum judge0_status id)
{
    json_object_set_new(record, "status_id", json_integer(id));
    json_object_set_new(record, "status", json_pack("{s:i, s:s}", "id", id, "description", judge0_status_description(id)));
}

/* The store shows a pending: JUDGE0_IN_QUEUE or JUDGE0_PROCESSING. */
static void async_show(struct async_run *a, enum judge0_status pending)
{
    json_t *rec = judge0_submission_record(a->token, a->created_ms, 0, &a->j, &a->ereq, NULL, a->lang_name);
    char *text;

    if (rec != NULL)
        set_status(rec, pending);
    if (rec != NULL && (text = json_dumps(rec, JSON_COMPACT)) != NULL) {
        /* "In Queue" only where nothing is (a run started on another loop
         * may have shown "Processing" first), but after a lost run */
        async_keep(a, text, strlen(text), pending == JUDGE0_IN_QUEUE && !a->give_back ? JUDGE0_PUT_IF_ABSENT : JUDGE0_PUT_PENDING);
        free(text);
    }
    json_decref(rec);
}

/* A run that could not finish: an Internal Error record saying why. */
static json_t *failure_record(struct async_run *a, const char *why)
{
    struct moat_exec_result failed;

    memset(&failed, 0, sizeof(failed));
    failed.run.present = 1;
    failed.run.status = MOAT_STATUS_XX;
    failed.run.message = (char *)(uintptr_t)why; /* only read */
    return judge0_submission_record(a->token, a->created_ms, wall_ms(), &a->j, &a->ereq, &failed, a->lang_name);
}

/* Keep an Internal Error record in place of the result (fail closed). */
static void async_keep_failure(struct async_run *a, const char *why)
{
    json_t *rec = failure_record(a, why);
    char *text = rec != NULL ? json_dumps(rec, JSON_COMPACT) : NULL;

    if (text != NULL)
        async_keep(a, text, strlen(text), JUDGE0_PUT_FINAL);
    json_decref(rec);
    free(text);
}

static void claim_give_back(struct claimed *cl);

static void on_async_durable(void *arg, int ok, uint64_t seq)
{
    struct async_run *a = arg;

    (void)seq;
    if (a->give_back) { /* not an end: the store shows it waiting again, whatever the trail did */
        async_show(a, JUDGE0_IN_QUEUE);
        claim_give_back(a->claim);
    } else if (ok)
        async_keep(a, a->record, a->record_len, JUDGE0_PUT_FINAL);
    else
        async_keep_failure(a, "audit log unavailable: the result cannot be recorded, so it is withheld");
    async_free(a);
}

/* The result record: allowed with the run and the packet, or failed with
 * why; the store shows rec once it is durable.  Its judge0 member also
 * says where the run was in the queue: seq, the number of its start in
 * this gateway process, and ahead, the starts before it was queued (so
 * seq - ahead - 1 runs of any tenant started while it waited).  Takes a. */
static void async_record(struct async_run *a, const struct moat_exec_result *res, const json_t *rec, const char *failure)
{
    struct gw_audit_who who;
    char *text = NULL, *packet = NULL;
    size_t len = 0, plen = 0;
    json_t *b;

    async_who(a, &who);
    if ((a->record = json_dumps(rec, JSON_COMPACT)) == NULL || (b = gw_audit_base(&who, "result")) == NULL) {
        async_keep_failure(a, "out of memory");
        async_free(a);
        return;
    }
    a->record_len = strlen(a->record);
    if (!a->worker->audit.enabled) {
        json_decref(b);
        on_async_durable(a, 1, 0);
        return;
    }
    if (failure != NULL || res == NULL) {
        gw_audit_add_decision(b, "failed", gw_reason_name(GW_REASON_BACKEND), NULL, 502, failure != NULL ? failure : "no result");
    } else {
        gw_audit_add_decision(b, "allowed", NULL, NULL, 200, NULL);
        gw_audit_add_result(b, &a->ereq, res);
        packet = gw_audit_packet(&who, &a->ereq, a->j.metadata, a->record, &plen); /* every field, texts in base64 */
    }
    json_object_set_new(b, "judge0",
                        json_pack("{s:s, s:O?, s:o, s:o*, s:o*}", "token", a->token, "status", json_object_get(rec, "status"),
                                  "queue", queue_json(a), "group", group_json(a), "given_back", a->give_back ? json_true() : NULL));
    text = gw_audit_dump(b, &len);
    json_decref(b);
    if (text == NULL) {
        async_keep_failure(a, "out of memory");
        async_free(a);
    } else {
        gw_audit_submit(&a->worker->audit, text, len, packet, plen, on_async_durable, a);
    }
    free(text);
    free(packet);
}

/* A claimed run whose backend went away before it answered (killed,
 * restarted, its socket gone): nothing ran to an end, so nothing ends.
 * Its result record says the attempt was lost and "given_back"; the
 * store shows it "In Queue" again; the entry goes back to the queue
 * (claim_finish), where any gateway's free slot claims it, the attempt
 * counted (max_attempts bounds a program that kills its backend). */
static unsigned claim_attempt(const struct claimed *cl);

static void async_lost(struct async_run *a)
{
    char why[160];
    json_t *rec;

    snprintf(why, sizeof(why), "backend unavailable: attempt %u of this submission was lost and is given back to the queue",
             claim_attempt(a->claim));
    a->give_back = 1;
    if ((rec = failure_record(a, why)) == NULL) {
        claim_give_back(a->claim);
        async_free(a);
        return;
    }
    set_status(rec, JUDGE0_IN_QUEUE);
    async_record(a, NULL, rec, why);
    json_decref(rec);
}

/* The backend's answer to a detached call: judge, record, keep. */
static void on_async_result(void *data, enum backend_status status, const struct backend_reply *reply)
{
    struct async_run *a = data;
    const char *failure = NULL;
    json_t *rec;

    async_ran(a);
    if (status == BACKEND_OK && reply->hdr.type == MOAT_MSG_EXEC_RESULT) {
        const struct moat_exec_result *res = &reply->u.result;
        a->cpu_ms = moat_exec_result_cpu_ms(res);
        rec = judge0_submission_record(a->token, a->created_ms, wall_ms(), &a->j, &a->ereq, res, a->lang_name);
        if (rec != NULL) {
            async_record(a, res, rec, NULL);
            json_decref(rec);
            return;
        }
        failure = "out of memory";
    } else if (status == BACKEND_OK && reply->hdr.type == MOAT_MSG_ERROR && reply->u.error.message != NULL) {
        failure = reply->u.error.message;
    } else if (status == BACKEND_UNAVAILABLE && a->claim != NULL) {
        async_lost(a);
        return;
    } else {
        failure = status == BACKEND_TIMEOUT       ? "backend timed out"
                  : status == BACKEND_UNAVAILABLE ? "backend unavailable"
                                                  : "bad reply from backend";
    }
    if ((rec = failure_record(a, failure)) == NULL) {
        async_free(a);
        return;
    }
    async_record(a, NULL, rec, failure);
    json_decref(rec);
}

/* The detached backend call. */
static void async_start(struct async_run *a)
{
    backend_call(NULL, a->worker->ctx.loop, &a->worker->backend_timeout, a->socket, &a->frame, a->job_id, on_async_result, a);
}

static void on_entry_decision(void *arg, int ok, uint64_t seq)
{
    struct async_run *a = arg;

    (void)seq;
    if (ok) {
        async_start(a);
        return;
    }
    async_keep_failure(a, "audit log unavailable: request refused");
    async_free(a);
}

/* A batch entry's decision record, its durability reported to cb(arg);
 * group (taken): the group it is compiled with, or NULL.  -1 out of memory
 * (nothing submitted). */
static int async_decide(struct async_run *a, json_t *group, gw_audit_cb cb, void *arg)
{
    struct gw_audit_who who;
    size_t len;
    json_t *b;
    char *text;

    async_who(a, &who);
    if ((b = gw_audit_base(&who, "request")) == NULL) {
        json_decref(group);
        return -1;
    }
    gw_audit_add_decision(b, "allowed", NULL, NULL, 200, NULL);
    gw_audit_add_request(b, &a->ereq, a->frame.data + MOAT_FRAME_HEADER_SIZE, a->frame.len - MOAT_FRAME_HEADER_SIZE);
    json_object_set_new(b, "judge0",
                        json_pack("{s:s, s:I, s:s*, s:s*, s:o*, s:o*}", "token", a->token, "language_id",
                                  (json_int_t)a->j.language_id, "batch",
                                  strcmp(a->parent_id, a->request_id) != 0 ? a->parent_id : NULL, "callback_url", a->j.callback_url,
                                  "group", group, "queue", a->claim != NULL ? claim_json(a->claim) : NULL));
    text = gw_audit_dump(b, &len);
    json_decref(b);
    if (text == NULL)
        return -1;
    gw_audit_submit(&a->worker->audit, text, len, NULL, 0, cb, arg);
    free(text);
    return 0;
}

/* A run's start: a batch entry's decision record first (fail closed). */
static void async_begin(struct async_run *a)
{
    if (!a->own_decision || !a->worker->audit.enabled) {
        async_start(a);
        return;
    }
    if (async_decide(a, NULL, on_entry_decision, a) != 0) {
        async_keep_failure(a, "out of memory");
        async_free(a);
    }
}

static void on_dispatch(struct jq_item *it, void *ctx);

/* A run for r's tenant of an accepted submission (its parts moved in), not
 * yet queued; NULL out of memory (nothing moved). */
static struct async_run *async_new(struct gw_request *r, const char *path, const char *request_id, const char *token,
                                   const char *lang_name, int64_t created_ms, struct judge0_request *j,
                                   struct moat_exec_request *ereq, struct moat_buf *frame, uint64_t job_id)
{
    struct async_run *a = calloc(1, sizeof(*a));
    struct gw_audit_who who;

    if (a == NULL)
        return NULL;
    a->refs = 1;
    gw_request_who(r, &who);
    a->item.start = on_dispatch;
    a->item.discard = async_discard;
    snprintf(a->item.tenant, sizeof(a->item.tenant), "%s", r->tenant);
    a->worker = r->worker;
    a->path = path;
    snprintf(a->parent_id, sizeof(a->parent_id), "%s", r->request_id);
    snprintf(a->socket, sizeof(a->socket), "%s", r->cfg->backend_socket);
    snprintf(a->request_id, sizeof(a->request_id), "%s", request_id);
    snprintf(a->tenant, sizeof(a->tenant), "%s", r->tenant);
    snprintf(a->key_id, sizeof(a->key_id), "%s", r->key_id);
    snprintf(a->client, sizeof(a->client), "%s", who.client);
    snprintf(a->token, sizeof(a->token), "%s", token);
    snprintf(a->lang_name, sizeof(a->lang_name), "%s", lang_name);
    a->created_ms = created_ms;
    a->j = *j; /* moved: the request's pool no longer frees them */
    a->ereq = *ereq;
    a->frame = *frame;
    a->job_id = job_id;
    memset(j, 0, sizeof(*j));
    memset(ereq, 0, sizeof(*ereq));
    memset(frame, 0, sizeof(*frame));
    return a;
}

/* Its turn (the queue's start, on ctx's thread): "Processing", then the run
 * on that worker's loop. */
static void on_dispatch(struct jq_item *it, void *ctx)
{
    struct async_run *a = (struct async_run *)it;

    a->worker = ctx;
    a->started = 1;
    async_show(a, JUDGE0_PROCESSING);
    async_begin(a);
}

/* One of the request's reservations becomes a: it runs at once if nobody
 * waits and a run is free, else it shows "In Queue" (before another thread
 * can start it) and waits its turn. */
static void async_enqueue(struct async_run *a)
{
    struct judge0_queue *q = judge0_queue_default();
    unsigned max = max_running(a->worker);

    if (judge0_queue_try_run(q, &a->item, max)) {
        on_dispatch(&a->item, a->worker);
        return;
    }
    async_show(a, JUDGE0_IN_QUEUE);
    judge0_queue_push(q, &a->item, a->worker, max);
}

/* fn(a) on r's thread, the 201 after the records it shows are kept. */
static enum gw_flow answer_after_keeps(struct gw_request *r, void (*fn)(struct async_run *), struct async_run *a)
{
    struct judge0_store *st = judge0_store_default();
    struct gate *g = st != NULL && judge0_store_remote(st) ? gate_new(r) : NULL;

    answer_gate = g;
    fn(a);
    answer_gate = NULL;
    return gate_arm(g, GW_NEXT);
}

/* Step 9 of wait=false: the answer {"token"} once its "In Queue" is kept, the run queued. */
static enum gw_flow start_async(struct gw_request *r, struct submission *s)
{
    json_t *answer;
    struct async_run *a;

    if (r->cfg->submissions.queue_redis)
        return remote_submit(r, s);
    answer = json_pack("{s:s}", "token", s->token);
    r->body = answer != NULL ? json_dumps(answer, JSON_COMPACT) : NULL;
    json_decref(answer);
    if (r->body == NULL || (a = async_new(r, "/submissions", r->request_id, s->token, s->lang_name, s->created_ms, &s->j, &s->ereq,
                                          &s->frame, r->job_id)) == NULL)
        return gw_deny(r, 500, GW_REASON_BACKEND, "out of memory");
    r->ok_status = 201;
    (void)gw_take_slot(r); /* none held (admission took none); the run records its own result */
    s->reserved = 0;       /* the reservation becomes the run */
    return answer_after_keeps(r, async_enqueue, a);
}

/* ------------------------------------------- batches of one source: compiled once */

/*
 * Entries of a batch that share a compiled program (the same language,
 * source, additional files, compiler options and compile and rlimit
 * limits: the same request but for stdin, arguments and run limits) are
 * one job: one compile stage, then one test case per entry, each in a
 * fresh box (job.c), each judged here as its own submission.  The group is
 * one item of the queue; its members are async_runs that never run on
 * their own: at its turn each shows "Processing" and records its decision
 * (all durable before the job starts: fail closed), and when the job
 * answers, each member's result is the compile stage with its own case as
 * the run, recorded and kept like any run's.  A member the job did not
 * reach (the job's wall budget ran out, which the grouping's margin makes
 * rare) is queued again on its own; if the queue has no room it becomes
 * an Internal Error saying so.  The group lives until its last member is
 * freed; everything happens on the thread of the worker that started it.
 */
struct async_group {
    struct jq_item item; /* first: the queue's item is the group */
    struct gw_worker *worker;
    int started; /* counts against max_running until the job answers */
    size_t n, left;
    size_t decided, undecided; /* decision records answered; of those, not durable */
    struct async_run *m[JUDGE0_BATCH_MAX];
    struct moat_buf frame; /* the job: the first member's request with a case per member */
    uint64_t job_id;
    char socket[GW_MAX_PATH_LEN + 1];
    int claimed; /* queue: redis: its members' entry was claimed here (the dispatcher counts its run) */
};

static void group_free(struct async_group *g)
{
    moat_buf_free(&g->frame);
    free(g);
}

/* A member is freed; the last one frees the group. */
static void group_member_gone(struct async_group *g)
{
    if (--g->left == 0)
        group_free(g);
}

static void group_ran(struct async_group *g)
{
    if (!g->started)
        return;
    g->started = 0;
    if (g->claimed)
        gw_dispatch_done();
    else
        judge0_queue_done(judge0_queue_default(), g->worker, max_running(g->worker));
}

/* Every member not yet started fails with why (fail closed). */
static void group_fail(struct async_group *g, size_t from, const char *why)
{
    for (size_t i = from; i < g->n; i++) {
        async_keep_failure(g->m[i], why);
        async_free(g->m[i]);
    }
}

/* The queue stopped before the group's turn: its members stay "In Queue". */
static void group_discard(struct jq_item *it)
{
    struct async_group *g = (struct async_group *)it;
    size_t n = g->n;

    for (size_t i = 0; i < n; i++)
        async_destroy(g->m[i]); /* the last frees g */
}

/* Member a's result: the job's compile stage, and its case (i) as the
 * run; none when the compile failed (then no case ran). */
static void group_member_result(struct async_run *a, size_t i, const struct moat_exec_result *res)
{
    struct moat_exec_result view = *res;
    json_t *rec;

    memset(&view.run, 0, sizeof(view.run));
    if (i < res->ntests)
        view.run = res->tests[i];
    view.tests = NULL;
    view.ntests = 0;
    a->cpu_ms = (i == 0 && res->compile.present ? res->compile.cpu_ms : 0) + view.run.cpu_ms;
    if ((rec = judge0_submission_record(a->token, a->created_ms, wall_ms(), &a->j, &a->ereq, &view, a->lang_name)) == NULL) {
        async_keep_failure(a, "out of memory");
        async_free(a);
        return;
    }
    async_record(a, &view, rec, NULL);
    json_decref(rec);
}

/* A member the job did not reach: queued again on its own, or failed. */
static void group_member_again(struct async_run *a)
{
    const struct gw_submissions_config *c = &a->worker->cfg->submissions;
    const struct jq_caps caps = {(unsigned)c->max_running, c->queue_max, c->queue_max_per_tenant};
    struct async_group *g = a->group;

    if (a->claim != NULL) { /* the shared queue's entry is the group: it ends with it */
        async_keep_failure(a, "its batch's shared job ran out of wall time before this submission: submit it again");
        async_free(a);
        return;
    }
    if (judge0_queue_reserve(judge0_queue_default(), a->tenant, 1, &caps) != JQ_OK) {
        async_keep_failure(a, "its batch's shared job ran out of wall time before this submission, and the queue has no room "
                              "to run it alone: submit it again");
        async_free(a);
        return;
    }
    a->group = NULL; /* on its own now */
    group_member_gone(g);
    a->own_decision = 0; /* recorded with the group */
    async_enqueue(a);
}

/* Did the job's compile stage (if any) succeed, so that its cases ran? */
static int compiled(const struct moat_exec_result *res)
{
    const struct moat_stage_result *c = &res->compile;

    return !c->present || (c->status == MOAT_STATUS_OK && (!c->has_code || c->code == 0));
}

static void on_group_result(void *data, enum backend_status status, const struct backend_reply *reply)
{
    struct async_group *g = data;
    size_t n = g->n, reached = n;
    struct async_run *m[JUDGE0_BATCH_MAX];
    const char *failure;

    group_ran(g);
    memcpy(m, g->m, n * sizeof(m[0])); /* g goes with its last member */
    if (status == BACKEND_OK && reply->hdr.type == MOAT_MSG_EXEC_RESULT) {
        const struct moat_exec_result *res = &reply->u.result;
        if (compiled(res) && res->ntests < n)
            reached = res->ntests;
        for (size_t i = 0; i < n; i++) /* members held in m: g may go with the last of them */
            if (i < reached)
                group_member_result(m[i], i, res);
            else
                group_member_again(m[i]);
        return;
    }
    if (status == BACKEND_UNAVAILABLE && g->claimed) { /* lost: the entry, the whole group, goes back */
        for (size_t i = 0; i < n; i++)
            async_lost(m[i]);
        return;
    }
    failure = status == BACKEND_OK && reply->hdr.type == MOAT_MSG_ERROR && reply->u.error.message != NULL ? reply->u.error.message
              : status == BACKEND_TIMEOUT                                                                 ? "backend timed out"
              : status == BACKEND_UNAVAILABLE                                                             ? "backend unavailable"
                                              : "bad reply from backend";
    for (size_t i = 0; i < n; i++) {
        json_t *rec = failure_record(m[i], failure);
        if (rec == NULL) {
            async_free(m[i]);
            continue;
        }
        async_record(m[i], NULL, rec, failure);
        json_decref(rec);
    }
}

/* Every member's decision record is durable (or one is not): the job, or
 * every member fails (fail closed). */
static void group_decided(struct async_group *g)
{
    if (g->undecided > 0) {
        group_ran(g);
        group_fail(g, 0, "audit log unavailable: request refused");
        return;
    }
    backend_call(NULL, g->worker->ctx.loop, &g->worker->group_timeout, g->socket, &g->frame, g->job_id, on_group_result, g);
}

static void on_member_decision(void *arg, int ok, uint64_t seq)
{
    struct async_group *g = arg;

    (void)seq;
    g->undecided += !ok;
    if (++g->decided == g->n)
        group_decided(g);
}

/* The members' decision records, all at once (the writer makes them
 * durable together); the job when the last is. */
static void group_decide(struct async_group *g)
{
    if (!g->worker->audit.enabled) {
        group_decided(g);
        return;
    }
    for (size_t i = 0; i < g->n; i++)
        if (async_decide(g->m[i], group_json(g->m[i]), on_member_decision, g) != 0) {
            g->undecided++; /* counted as answered: out of memory */
            if (++g->decided == g->n)
                group_decided(g);
        }
}

/* The group's turn (the queue's start, on ctx's thread). */
static void on_group_dispatch(struct jq_item *it, void *ctx)
{
    struct async_group *g = (struct async_group *)it;

    g->worker = ctx;
    g->started = 1;
    for (size_t i = 0; i < g->n; i++) {
        g->m[i]->worker = ctx;
        g->m[i]->item.seq = g->item.seq;
        g->m[i]->item.ahead = g->item.ahead;
        async_show(g->m[i], JUDGE0_PROCESSING);
    }
    group_decide(g);
}

/*
 * What makes entries one job: their requests without stdin, arguments and
 * run limits, encoded (the same bytes: the same compile and the same
 * boxes).  0 with out filled, -1 out of memory.
 */
static int compile_key(const struct moat_exec_request *e, struct moat_buf *out)
{
    struct moat_exec_request k = *e; /* borrowed: only encoded */
    const char *why = NULL;

    k.stdin_data = NULL;
    k.stdin_len = 0;
    k.args = NULL;
    k.nargs = 0;
    k.run_timeout_ms = k.run_memory_bytes = k.run_cpu_ms = -1;
    k.tests = NULL;
    k.ntests = 0;
    k.tests_wall_ms = 0;
    memset(out, 0, sizeof(*out));
    return moat_encode_exec_request(out, 0, &k, &why);
}

/* The group's job: the first member's request with one case per member,
 * run limits the largest of theirs (a case may only lower them), the
 * cases' wall budget the gateway's.  0, or -1. */
static int group_frame(struct async_group *g, uint64_t budget_ms)
{
    struct moat_exec_request job = g->m[0]->ereq; /* borrowed: only encoded */
    struct moat_test_case cases[JUDGE0_BATCH_MAX];
    const char *why = NULL;

    memset(cases, 0, sizeof(cases));
    for (size_t i = 0; i < g->n; i++) {
        const struct moat_exec_request *e = &g->m[i]->ereq;
        cases[i] = (struct moat_test_case){e->stdin_data,     e->stdin_len,        e->args,      e->nargs,
                                           e->run_timeout_ms, e->run_memory_bytes, e->run_cpu_ms};
        job.run_timeout_ms = e->run_timeout_ms > job.run_timeout_ms ? e->run_timeout_ms : job.run_timeout_ms;
        job.run_memory_bytes = e->run_memory_bytes > job.run_memory_bytes ? e->run_memory_bytes : job.run_memory_bytes;
        if (e->run_cpu_ms <= 0 || job.run_cpu_ms <= 0)
            job.run_cpu_ms = -1; /* one without a CPU limit: the job asks none, the case does as it asked */
        else if (e->run_cpu_ms > job.run_cpu_ms)
            job.run_cpu_ms = e->run_cpu_ms;
    }
    job.stdin_data = NULL;
    job.stdin_len = 0;
    job.args = NULL;
    job.nargs = 0;
    job.tests = cases;
    job.ntests = g->n;
    job.tests_wall_ms = (int64_t)budget_ms;
    g->job_id = backend_next_job_id();
    return moat_encode_exec_request(&g->frame, g->job_id, &job, &why);
}

/* ---------------------------------------------------------------- batches */

/* POST /submissions/batch: each entry parsed and judged on its own; the
 * accepted ones are queued like wait=false submissions, each with its own
 * request id and records, once the queue has room for all of them. */
struct batch_entry {
    int accepted;
    int compiled;      /* its language has a compile stage */
    int first;         /* the index of its group's first entry (itself: first or alone) */
    size_t group_size; /* a group's first entry: its members; else 0 */
    struct judge0_request j;
    struct moat_exec_request ereq;
    struct moat_buf frame;
    uint64_t job_id;
    char token[JUDGE0_TOKEN_LEN + 1];
    char request_id[GW_REQUEST_ID_LEN + 1];
    char lang_name[128];
    int64_t created_ms;
};

struct batch {
    struct judge0_query q;
    json_t *items;               /* the entries as sent */
    json_t *answers;             /* Judge0's answer: {"token"} or the entry's errors, in order */
    size_t n, naccepted, nitems; /* entries, accepted ones, queue items (groups count one) */
    int asked_table;
    size_t reserved; /* room in the queue, until each item is queued */
    char tenant[GW_MAX_TENANT_NAME + 1];
    struct batch_entry e[JUDGE0_BATCH_MAX];
};

static void batch_dispose(void *p)
{
    struct batch *b = p;

    if (b->reserved > 0)
        judge0_queue_unreserve(judge0_queue_default(), b->tenant, b->reserved);

    for (size_t i = 0; i < b->n; i++) {
        judge0_request_free(&b->e[i].j);
        moat_exec_request_free(&b->e[i].ereq);
        moat_buf_free(&b->e[i].frame);
    }
    json_decref(b->items);
    json_decref(b->answers);
}

/* One entry: parsed, its language installed, judged, encoded; the answer's
 * element ({"token"}, or what is wrong with it). */
static json_t *batch_entry(struct gw_request *r, struct batch *b, json_t *item, struct batch_entry *e)
{
    json_t *errors = NULL;
    struct refusal no;
    const char *why = NULL;
    char err[GW_ERR_MSG_MAX];
    uint8_t rnd[16];
    int rc = judge0_parse_submission_object(item, b->q.base64, &e->j, &errors, err, sizeof(err));

    if (rc == 0) {
        struct cb_tenant_rules cbr = gw_tenant_callback_rules(r->tenant_cfg);
        rc = judge0_check_callback(&e->j, &cbr, &errors, err, sizeof(err));
    }
    if (rc == -2)
        return errors;
    if (rc != 0)
        return json_pack("{s:s}", "error", err);
    if (judge_submission(r, &e->j, &e->ereq, e->lang_name, sizeof(e->lang_name), &no) != 0)
        return no.fields != NULL ? no.fields : json_pack("{s:s}", "error", no.message);
    const struct moat_runtime *rt = gw_runtime_table_pick(r->worker, e->j.lang->moat, "*");
    e->compiled = rt != NULL && rt->compiled;
    e->job_id = backend_next_job_id();
    if (moat_encode_exec_request(&e->frame, e->job_id, &e->ereq, &why) != 0 || RAND_bytes(rnd, sizeof(rnd)) != 1)
        return json_pack("{s:s}", "error", why != NULL ? why : "no random bytes for a token");
    judge0_token(rnd, e->token);
    gw_new_request_id(e->request_id);
    e->created_ms = wall_ms();
    e->accepted = 1;
    return json_pack("{s:s}", "token", e->token);
}

/* May e join a group whose job has used *sum of the budget? */
static int groupable(const struct batch_entry *e)
{
    /* a compiled program, run once, without interleaved output (cases keep none), a wall limit known */
    return e->accepted && e->compiled && e->ereq.ntests == 0 && !e->j.redirect_stderr && e->ereq.run_timeout_ms > 0;
}

/*
 * Which accepted entries are one job (e->first, e->group_size), and how
 * many queue items the batch is (b->nitems): entries with the same compile
 * key, in order, as long as their wall limits (each with a margin for its
 * box) fit in the cases' budget; past it a new group starts.  0, or -1
 * out of memory.
 */
static int batch_groups(struct batch *b)
{
    struct moat_buf key[JUDGE0_BATCH_MAX];
    uint64_t used[JUDGE0_BATCH_MAX] = {0};
    int rc = 0;

    memset(key, 0, sizeof(key));
    b->nitems = 0;
    for (size_t i = 0; i < b->n; i++) {
        struct batch_entry *e = &b->e[i];
        uint64_t cost = (uint64_t)e->ereq.run_timeout_ms + GW_JUDGE0_GROUP_CASE_MARGIN_MS;
        e->first = (int)i;
        e->group_size = 0;
        if (!e->accepted)
            continue;
        if (!groupable(e) || compile_key(&e->ereq, &key[i]) != 0) {
            rc = groupable(e) ? -1 : rc;
            b->nitems++;
            continue;
        }
        const uint64_t budget = MOAT_MAX_TESTS_WALL_MS; /* the gateway waits for it that much longer (group_timeout) */
        for (size_t k = 0; k < i; k++) {
            struct batch_entry *f = &b->e[k];
            if (f->first != (int)k || f->group_size == 0 || f->group_size == JUDGE0_BATCH_MAX || used[k] + cost > budget ||
                key[k].len != key[i].len || memcmp(key[k].data, key[i].data, key[i].len) != 0)
                continue;
            e->first = (int)k;
            f->group_size++;
            used[k] += cost;
            break;
        }
        if (e->first == (int)i) { /* a group of its own, so far */
            e->group_size = 1;
            used[i] = cost;
            b->nitems++;
        }
    }
    for (size_t i = 0; i < b->n; i++)
        moat_buf_free(&key[i]);
    return rc;
}

/* Step 7: the body, the runtime table, every entry. */
static enum gw_flow batch_submit_prepare(struct gw_request *r)
{
    h2o_req_t *req = r->req;
    struct batch *b = r->job;
    char err[GW_ERR_MSG_MAX];
    enum gw_flow f;

    if (b == NULL) {
        if ((f = store_ready(r)) != GW_NEXT)
            return f;
        b = h2o_mem_alloc_shared(&req->pool, sizeof(*b), batch_dispose);
        memset(b, 0, sizeof(*b));
        r->job = b;
        if ((f = query(r, JUDGE0_Q_BASE64 | JUDGE0_Q_FIELDS, &b->q)) != GW_NEXT) /* fields: ignored, as Judge0 does */
            return f;
        if (req->entity.len > r->cfg->max_request_entity_size)
            return refuse(r, 413, GW_REASON_FILTER, "request body is larger than max_request_entity_size", NULL);
        if (!gw_is_json_content_type(req))
            return refuse(r, 415, GW_REASON_FILTER, "Content-Type must be application/json (charset utf-8)", NULL);
        if (judge0_parse_batch(req->entity.base, req->entity.len, &b->items, err, sizeof(err)) != 0)
            return refuse(r, 400, GW_REASON_FILTER, err, NULL);
    }
    if (!gw_runtime_table_fresh(r->worker) && !b->asked_table) {
        b->asked_table = 1;
        return gw_runtime_table_fetch(r); /* then this step again */
    }
    if ((b->answers = json_array()) == NULL)
        return gw_deny(r, 500, GW_REASON_FILTER, "out of memory");
    for (b->n = 0; b->n < json_array_size(b->items); b->n++) {
        struct batch_entry *e = &b->e[b->n];
        json_t *answer = batch_entry(r, b, json_array_get(b->items, b->n), e);
        if (answer == NULL || json_array_append_new(b->answers, answer) != 0) {
            b->n++;
            return gw_deny(r, 500, GW_REASON_FILTER, "out of memory");
        }
        b->naccepted += (size_t)e->accepted;
    }
    if (b->naccepted == 0)
        return refuse(r, 422, GW_REASON_FILTER, "no submission of the batch was accepted",
                      json_pack("{s:O}", "submissions", b->answers));
    if (batch_groups(b) != 0)
        return gw_deny(r, 500, GW_REASON_FILTER, "out of memory");
    if (r->cfg->submissions.queue_redis)
        return GW_NEXT;                                       /* the enqueue checks the caps (remote_batch) */
    return queue_room(r, b->nitems, &b->reserved, b->tenant); /* all or none */
}

/* Step 8: the batch's decision names its entries (each records its own). */
static void batch_submit_describe(struct gw_request *r, json_t *record)
{
    const struct batch *b = r->job;
    json_t *a = json_array();

    for (size_t i = 0; a != NULL && i < b->n; i++)
        if (b->e[i].accepted)
            json_array_append_new(a, json_pack("{s:s, s:s}", "token", b->e[i].token, "request_id", b->e[i].request_id));
    json_object_set_new(record, "judge0", json_pack("{s:o*}", "batch", a));
}

/* The group whose first entry is i: one queue item (its members made,
 * each marked with the group). */
static void group_enqueue(struct gw_request *r, struct batch *b, struct async_run **runs, size_t i)
{
    struct async_group *g = calloc(1, sizeof(*g));
    struct judge0_queue *q = judge0_queue_default();

    for (size_t k = i; g != NULL && k < b->n; k++)
        if (runs[k] != NULL && b->e[k].first == (int)i) {
            runs[k]->group = g;
            runs[k]->case_index = g->n;
            snprintf(runs[k]->group_first, sizeof(runs[k]->group_first), "%s", runs[i]->token);
            g->m[g->n++] = runs[k];
        }
    if (g == NULL) {
        log_warnx("%s: id=%s: out of memory: the group of %s fails", __func__, r->request_id, runs[i]->token);
        for (size_t k = i; k < b->n; k++)
            if (runs[k] != NULL && b->e[k].first == (int)i) {
                async_keep_failure(runs[k], "out of memory");
                async_destroy(runs[k]);
            }
        judge0_queue_unreserve(q, b->tenant, 1);
        return;
    }
    g->left = g->n;
    if (group_frame(g, MOAT_MAX_TESTS_WALL_MS) != 0) {
        log_warnx("%s: id=%s: the group of %s could not be encoded: its entries fail", __func__, r->request_id, runs[i]->token);
        group_fail(g, 0, "the batch's shared job could not be made"); /* the last member frees g */
        judge0_queue_unreserve(q, b->tenant, 1);
        return;
    }
    for (size_t k = 0; k < g->n; k++)
        g->m[k]->group_size = g->n;
    g->item.start = on_group_dispatch;
    g->item.discard = group_discard;
    snprintf(g->item.tenant, sizeof(g->item.tenant), "%s", r->tenant);
    snprintf(g->socket, sizeof(g->socket), "%s", r->cfg->backend_socket);
    g->worker = r->worker;
    if (judge0_queue_try_run(q, &g->item, max_running(r->worker))) {
        on_group_dispatch(&g->item, r->worker);
        return;
    }
    for (size_t k = 0; k < g->n; k++)
        async_show(g->m[k], JUDGE0_IN_QUEUE);
    judge0_queue_push(q, &g->item, r->worker, max_running(r->worker));
}

/* Step 9: every accepted entry queued, and the answer at once. */
static enum gw_flow batch_submit_answer(struct gw_request *r, const struct backend_reply *reply)
{
    struct batch *b = r->job;

    (void)reply;
    if (r->cfg->submissions.queue_redis)
        return remote_batch(r, b);
    if ((r->body = json_dumps(b->answers, JSON_COMPACT)) == NULL)
        return gw_deny(r, 500, GW_REASON_BACKEND, "out of memory");
    r->ok_status = 201;
    (void)gw_take_slot(r); /* none held (admission took none); each entry records its own result */
    struct async_run *runs[JUDGE0_BATCH_MAX] = {NULL};
    struct judge0_store *st = judge0_store_default();
    struct gate *g = st != NULL && judge0_store_remote(st) ? gate_new(r) : NULL;
    for (size_t i = 0; i < b->n; i++) {
        struct batch_entry *e = &b->e[i];
        if (!e->accepted)
            continue;
        runs[i] = async_new(r, "/submissions/batch", e->request_id, e->token, e->lang_name, e->created_ms, &e->j, &e->ereq,
                            &e->frame, e->job_id);
        if (runs[i] == NULL) { /* out of memory: this entry and the rest are never kept (their GET is a 404) */
            log_warnx("%s: id=%s: out of memory: entries from %zu on not queued", __func__, r->request_id, i);
            break;
        }
        runs[i]->own_decision = 1;
    }
    for (size_t i = 0; i < b->n; i++) {
        struct batch_entry *e = &b->e[i];
        if (runs[i] == NULL || e->first != (int)i)
            continue;  /* refused, not made, or a later member of a group */
        b->reserved--; /* the reservation becomes the item; the rest go back at dispose */
        answer_gate = g;
        if (e->group_size > 1)
            group_enqueue(r, b, runs, i);
        else
            async_enqueue(runs[i]);
        answer_gate = NULL;
    }
    return gate_arm(g, GW_NEXT);
}

const struct gw_handler gw_handler_judge0_batch_submit = {batch_submit_prepare, batch_submit_describe, batch_submit_answer,
                                                          batch_queued, NULL};

/* ------------------------------------------- the shared queue (queue: redis) */

/*
 * With submissions.queue: redis an accepted submission does not wait in
 * this process: it is an entry of the tenant's stream in Redis
 * (store/queue_redis.c), and any gateway whose backend has a free slot
 * claims it (judge0_dispatch.c) and runs it here.
 *
 * Accepting (remote_submit, remote_batch: step 9, after the decision
 * record is durable).  The entry holds what the run needs and never a
 * credential: per member its request id, token, creation time, language
 * name, the Judge0 submission as sent (the result record is built from
 * it) and the typed execution request this gateway built (the frame's
 * payload, base64); and the tenant, the key id, the client, the route.
 * A batch's group compiled once is one entry of its members.  The answer
 * (201 {"token"}) waits for the enqueue's reply: once it comes the entry
 * is in the stream, and "In Queue" is kept for each token where the
 * claimer has not written yet.  The caps are checked by the enqueue
 * itself, atomically with it across every gateway; a refusal there comes
 * after the decision record, so the trail shows it as a failed result.
 *
 * Running (gw_judge0_run_claim).  The entry is decoded strictly (a blob
 * that is not one of ours, or names another tenant than its stream's, is
 * never run: it goes to the dead letter list).  Each member's request is
 * decoded by the protocol's own decoder and judged again by this
 * gateway's policy for the tenant (a tenant or language this host does
 * not have, or a limit its policy refuses, ends the submission with an
 * Internal Error saying so).  Then it runs exactly as a queued run does
 * (async_run, async_group): "Processing", its decision record (naming
 * the accepting request id, the entry and the attempt), the backend, the
 * result record, the final record kept, and the run's slot back to the
 * dispatcher.  An entry taken over past max_attempts ends every member as
 * an Internal Error without running.
 *
 * Ending (struct claimed).  The runs of one entry share it; when the last
 * is freed and every final record is kept, the entry is acknowledged.  A
 * final record Redis did not take, or an ack it did not answer, keeps the
 * entry here (claim_park): both are tried again every GW_QUEUE_POLL_MS
 * until Redis takes them.  If this gateway dies first, its entry is taken
 * over and run again; the final record already kept is never replaced
 * (JUDGE0_PUT_FINAL), so the submission ends once.  A run whose backend
 * went away before it answered (async_lost) ends nothing: its result
 * record says the attempt was lost and given back, the store shows "In
 * Queue" again, and the entry is released instead of acknowledged
 * (queue_redis_release), to be claimed by any gateway at the next
 * attempt.
 */

/* A final record Redis did not take yet. */
struct unfinished {
    struct unfinished *next;
    size_t len;
    char tenant[GW_MAX_TENANT_NAME + 1];
    char token[JUDGE0_TOKEN_LEN + 1];
    char text[]; /* len bytes and a NUL */
};

struct claimed {
    struct claimed *next; /* the parked list */
    struct gw_worker *worker;
    size_t refs;               /* runs not yet freed */
    struct unfinished *finals; /* final records to keep before the ack */
    unsigned attempt;          /* 1 for the first run */
    int give_back;             /* a run was lost: released to the queue, not acknowledged */
    char tenant[GW_MAX_TENANT_NAME + 1];
    char id[QR_ID_MAX];
    char accepted_by[GW_REDIS_MAX_PREFIX + 1];
};

static struct claimed *parked; /* the dispatcher's thread only */
static h2o_timeout_t park_timeout;
static h2o_timeout_entry_t park_entry;
static int park_ready;

static json_t *claim_json(const struct claimed *cl)
{
    return json_pack("{s:s, s:I, s:s}", "entry", cl->id, "attempt", (json_int_t)cl->attempt, "accepted_by", cl->accepted_by);
}

static unsigned claim_attempt(const struct claimed *cl)
{
    return cl->attempt;
}

static int claim_unfinished(struct claimed *cl, const char *tenant, const char *token, const char *text, size_t len)
{
    struct unfinished *u = malloc(sizeof(*u) + len + 1);

    if (u == NULL)
        return -1;
    memset(u, 0, sizeof(*u));
    snprintf(u->tenant, sizeof(u->tenant), "%s", tenant);
    snprintf(u->token, sizeof(u->token), "%s", token);
    memcpy(u->text, text, len);
    u->text[len] = '\0';
    u->len = len;
    u->next = cl->finals;
    cl->finals = u;
    return 0;
}

static void claim_finish(struct claimed *cl);

static void on_park_tick(h2o_timeout_entry_t *entry)
{
    struct claimed *all = parked;

    (void)entry;
    parked = NULL;
    while (all != NULL) {
        struct claimed *cl = all;
        all = cl->next;
        claim_finish(cl);
    }
}

/* Try cl again later (Redis did not take its records or its ack). */
static void claim_park(struct claimed *cl)
{
    if (!park_ready) {
        h2o_timeout_init(cl->worker->ctx.loop, &park_timeout, GW_QUEUE_POLL_MS);
        park_entry.cb = on_park_tick;
        park_ready = 1;
    }
    cl->next = parked;
    parked = cl;
    if (!h2o_timeout_is_linked(&park_entry))
        h2o_timeout_link(cl->worker->ctx.loop, &park_timeout, &park_entry);
}

/* The ack's or the release's answer. */
static void on_acked(void *arg, int ok)
{
    struct claimed *cl = arg;

    if (!ok) {
        claim_park(cl);
        return;
    }
    free(cl);
}

/* A final record's put answered: the next, or parked. */
static void on_final_kept(void *arg, int rc)
{
    struct claimed *cl = arg;
    struct unfinished *u = cl->finals;

    if (rc < 0) {
        claim_park(cl);
        return;
    }
    if (rc == 0)
        judge0_callback_kept(cl->worker->cfg, u->tenant, u->token, u->text, u->len);
    cl->finals = u->next;
    free(u);
    claim_finish(cl);
}

/* Every final record kept (one put at a time), then the ack; parked when
 * Redis does not take one. */
static void claim_finish(struct claimed *cl)
{
    struct judge0_store *st = judge0_store_default();
    struct unfinished *u;

    if ((u = cl->finals) != NULL) {
        if (st == NULL)
            claim_park(cl);
        else
            judge0_store_put_on(st, cl->worker->ctx.loop, u->tenant, u->token, u->text, u->len, judge0_store_now_ms(),
                                JUDGE0_PUT_FINAL, on_final_kept, cl);
        return;
    }
    if ((cl->give_back
             ? queue_redis_release(gw_dispatch_queue(), cl->worker->ctx.loop, cl->tenant, cl->id, cl->attempt, on_acked, cl)
             : queue_redis_ack(gw_dispatch_queue(), cl->worker->ctx.loop, cl->tenant, cl->id, on_acked, cl)) != 0)
        claim_park(cl);
}

/* A run of cl was lost: once its runs are freed, the entry goes back. */
static void claim_give_back(struct claimed *cl)
{
    cl->give_back = 1;
}

static void claim_release(struct claimed *cl)
{
    if (--cl->refs == 0)
        claim_finish(cl);
}

/* --- accepting */

/* What an accepted POST's answer waits for: the enqueue's reply. */
struct remote {
    struct gw_req_watch watch;
    struct judge0_store *st;
    h2o_loop_t *loop; /* the request's */
    char tenant[GW_MAX_TENANT_NAME + 1];
    size_t n; /* members: "In Queue" for each once queued */
    char tokens[JUDGE0_BATCH_MAX][JUDGE0_TOKEN_LEN + 1];
    char *shown[JUDGE0_BATCH_MAX];
    char *answer; /* the 201's body */
    int batch;
};

static void remote_free(struct remote *rem)
{
    gw_req_watch_end(&rem->watch);
    for (size_t i = 0; i < rem->n; i++)
        free(rem->shown[i]);
    free(rem->answer);
    free(rem);
}

/* An "In Queue" of a queued entry's member on its way; the 201 waits for it (g). */
struct remote_put {
    struct gate *gate;
    char token[JUDGE0_TOKEN_LEN + 1];
};

static void on_remote_shown(void *arg, int rc)
{
    struct remote_put *rp = arg;

    if (rc < 0)
        log_warnx("judge0: token %s: queued, but its \"In Queue\" could not be kept yet", rp->token);
    if (rp->gate != NULL)
        gate_put_done(rp->gate);
    free(rp);
}

static void remote_show(struct remote *rem, size_t i, struct gate *g)
{
    struct remote_put *rp = calloc(1, sizeof(*rp));

    if (rp == NULL) {
        log_warnx("%s: token %s: out of memory: its \"In Queue\" is not kept", __func__, rem->tokens[i]);
        return;
    }
    snprintf(rp->token, sizeof(rp->token), "%s", rem->tokens[i]);
    if ((rp->gate = g) != NULL)
        g->waiting++;
    judge0_store_put_on(rem->st, rem->loop, rem->tenant, rem->tokens[i], rem->shown[i], strlen(rem->shown[i]),
                        judge0_store_now_ms(), JUDGE0_PUT_IF_ABSENT, on_remote_shown, rp);
}

static void on_remote_queued(void *arg, enum qr_verdict v, char (*ids)[QR_ID_MAX], size_t n)
{
    struct remote *rem = arg;
    struct gw_request *r = rem->watch.r;
    enum gw_flow f = GW_DENY;
    const char *several = rem->batch ? ": the batch is refused whole, none of it was queued" : "";
    char msg[GW_ERR_MSG_MAX];

    (void)ids;
    (void)n;
    if (v == QR_OK) {
        struct gate *g = r != NULL ? gate_new(r) : NULL;
        for (size_t i = 0; i < rem->n; i++)
            if (rem->st != NULL && rem->shown[i] != NULL)
                remote_show(rem, i, g);
        if (r != NULL) {
            r->body = rem->answer;
            rem->answer = NULL;
            r->ok_status = 201;
            (void)gw_take_slot(r); /* none held (admission took none); the runs record their own results */
            f = gate_arm(g, GW_NEXT);
            remote_free(rem);
            if (f != GW_WAIT)
                gw_step_done(r, f);
            return;
        }
    }
    if (r == NULL) { /* the client went away: what was queued runs all the same */
        remote_free(rem);
        return;
    }
    switch (v) {
    case QR_OK:
        break; /* answered above */
    case QR_FULL:
        gw_add_retry_after(r, GW_JUDGE0_QUEUE_RETRY_AFTER_MS);
        snprintf(msg, sizeof(msg), "the submissions queue is full%s", several);
        f = refuse(r, 503, GW_REASON_QUEUE, msg, NULL);
        break;
    case QR_TENANT_FULL:
    case QR_TENANT_BYTES:
        gw_add_retry_after(r, GW_JUDGE0_QUEUE_RETRY_AFTER_MS);
        snprintf(msg, sizeof(msg), "this tenant's share of the submissions queue is full (%s)%s",
                 v == QR_TENANT_FULL ? "queue_max_per_tenant" : "queue_max_bytes_per_tenant", several);
        f = refuse(r, 429, GW_REASON_QUEUE, msg, NULL);
        break;
    case QR_DOWN:
        f = store_down(r, GW_JUDGE0_STORE_RETRY_AFTER_MS);
        break;
    case QR_UNREPLICATED:
        gw_add_retry_after(r, GW_JUDGE0_STORE_RETRY_AFTER_MS);
        f = refuse(r, 503, GW_REASON_STORE,
                   "no Redis replica confirmed the submission in time (submissions.durability: replicated): not accepted, "
                   "though it may still run; try again later",
                   NULL);
        break;
    }
    remote_free(rem);
    gw_step_done(r, f);
}

/* One member of an entry. */
static json_t *member_json(const char *request_id, const char *token, int64_t created_ms, const char *lang_name, json_t *submission,
                           const struct moat_buf *frame)
{
    size_t plen = frame->len - MOAT_FRAME_HEADER_SIZE;
    char *b64 = malloc(MOAT_BASE64_ENCODED_LEN(plen) + 1);
    json_t *m;

    if (b64 == NULL || submission == NULL) {
        free(b64);
        return NULL;
    }
    moat_base64_encode(frame->data + MOAT_FRAME_HEADER_SIZE, plen, b64);
    m = json_pack("{s:s, s:s, s:I, s:s, s:O, s:s}", "request_id", request_id, "token", token, "created_ms", (json_int_t)created_ms,
                  "lang_name", lang_name, "submission", submission, "frame", b64);
    free(b64);
    return m;
}

/* The entry of members (taken), as text (malloc), or NULL. */
static char *entry_text(struct gw_request *r, const char *path, int base64, json_t *members)
{
    struct gw_audit_who who;
    json_t *e;
    char *text;

    gw_request_who(r, &who);
    e = members != NULL
            ? json_pack("{s:i, s:s, s:s, s:s, s:s, s:s, s:b, s:o}", "v", 1, "tenant", r->tenant, "parent", r->request_id, "path",
                        path, "key_id", r->key_id, "client", who.client, "base64", base64, "members", members)
            : NULL;
    text = e != NULL ? json_dumps(e, JSON_COMPACT) : NULL;
    json_decref(e);
    return text;
}

/* The "In Queue" record of a member (malloc), or NULL. */
static char *in_queue_text(const char *token, int64_t created_ms, const struct judge0_request *j, const struct moat_exec_request *e,
                           const char *lang_name)
{
    json_t *rec = judge0_submission_record(token, created_ms, 0, j, e, NULL, lang_name);
    char *text;

    if (rec == NULL)
        return NULL;
    set_status(rec, JUDGE0_IN_QUEUE);
    text = json_dumps(rec, JSON_COMPACT);
    json_decref(rec);
    return text;
}

static struct remote *remote_new(struct gw_request *r, int batch)
{
    struct remote *rem = calloc(1, sizeof(*rem));

    if (rem == NULL || gw_req_watch_start(&rem->watch, r) != 0) {
        free(rem);
        return NULL;
    }
    rem->batch = batch;
    rem->st = judge0_store_default();
    rem->loop = r->worker->ctx.loop;
    snprintf(rem->tenant, sizeof(rem->tenant), "%s", r->tenant);
    return rem;
}

/* Send the entries; the answer follows (GW_WAIT), or the refusal now. */
static enum gw_flow remote_send(struct gw_request *r, struct remote *rem, char **texts, const uint32_t *counts, size_t n)
{
    const struct gw_submissions_config *c = &r->cfg->submissions;
    const struct qr_caps caps = {c->queue_max, c->queue_max_per_tenant, c->queue_max_bytes_per_tenant};
    struct qr_entry_in in[JUDGE0_BATCH_MAX];
    struct queue_redis *q = gw_dispatch_queue();
    int rc;

    for (size_t i = 0; i < n; i++)
        in[i] = (struct qr_entry_in){counts[i], texts[i], strlen(texts[i])};
    rc = q != NULL ? queue_redis_enqueue(q, r->worker->ctx.loop, r->tenant, &caps, in, n, on_remote_queued, rem) : -1;
    for (size_t i = 0; i < n; i++)
        free(texts[i]);
    if (rc != 0) {
        remote_free(rem);
        return store_down(r, GW_JUDGE0_STORE_RETRY_AFTER_MS);
    }
    return GW_WAIT;
}

/* Step 9 of wait=false with queue: redis. */
static enum gw_flow remote_submit(struct gw_request *r, struct submission *s)
{
    struct remote *rem = remote_new(r, 0);
    json_t *sub = json_loadb(r->req->entity.base, r->req->entity.len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, NULL);
    json_t *answer = json_pack("{s:s}", "token", s->token), *m;
    char *text = NULL;
    uint32_t one = 1;

    m = member_json(r->request_id, s->token, s->created_ms, s->lang_name, sub, &s->frame);
    json_decref(sub);
    if (rem != NULL && m != NULL && (text = entry_text(r, "/submissions", s->q.base64, json_pack("[o]", m))) != NULL) {
        m = NULL;
        rem->n = 1;
        snprintf(rem->tokens[0], sizeof(rem->tokens[0]), "%s", s->token);
        rem->shown[0] = in_queue_text(s->token, s->created_ms, &s->j, &s->ereq, s->lang_name);
        rem->answer = answer != NULL ? json_dumps(answer, JSON_COMPACT) : NULL;
    }
    json_decref(m);
    json_decref(answer);
    if (rem == NULL || text == NULL || rem->answer == NULL) {
        if (rem != NULL)
            remote_free(rem);
        free(text);
        return gw_deny(r, 500, GW_REASON_BACKEND, "out of memory");
    }
    return remote_send(r, rem, &text, &one, 1);
}

/* Step 9 of a batch with queue: redis: one entry per group (or entry
 * alone), all queued or none. */
static enum gw_flow remote_batch(struct gw_request *r, struct batch *b)
{
    struct remote *rem = remote_new(r, 1);
    char *texts[JUDGE0_BATCH_MAX] = {NULL};
    uint32_t counts[JUDGE0_BATCH_MAX];
    size_t n = 0, bad = rem == NULL;

    for (size_t i = 0; !bad && i < b->n; i++) {
        struct batch_entry *e = &b->e[i];
        json_t *members = json_array();
        if (!e->accepted || e->first != (int)i) {
            json_decref(members);
            continue;
        }
        counts[n] = 0;
        for (size_t k = i; members != NULL && k < b->n; k++) {
            struct batch_entry *f = &b->e[k];
            if (!f->accepted || f->first != (int)i)
                continue;
            if (json_array_append_new(members, member_json(f->request_id, f->token, f->created_ms, f->lang_name,
                                                           json_array_get(b->items, k), &f->frame)) != 0) {
                bad = 1;
                break;
            }
            snprintf(rem->tokens[rem->n], sizeof(rem->tokens[0]), "%s", f->token);
            rem->shown[rem->n++] = in_queue_text(f->token, f->created_ms, &f->j, &f->ereq, f->lang_name);
            counts[n]++;
        }
        if (bad || (texts[n] = entry_text(r, "/submissions/batch", b->q.base64, members)) == NULL)
            bad = 1;
        else
            n++;
    }
    if (!bad && (rem->answer = json_dumps(b->answers, JSON_COMPACT)) == NULL)
        bad = 1;
    if (bad) {
        for (size_t i = 0; i < n; i++)
            free(texts[i]);
        if (rem != NULL)
            remote_free(rem);
        return gw_deny(r, 500, GW_REASON_BACKEND, "out of memory");
    }
    return remote_send(r, rem, texts, counts, n);
}

/* --- running */

/* One decoded member of a claimed entry, before it becomes a run. */
struct claim_member {
    const char *request_id, *token, *lang_name;
    json_int_t created_ms;
    json_t *submission;
    const char *frame;
    size_t frame_len;
};

static const char *path_literal(const char *path)
{
    return strcmp(path, "/submissions/batch") == 0 ? "/submissions/batch" : "/submissions";
}

/* A run of a member (j, ereq moved in), not started; NULL out of memory. */
static struct async_run *claim_run(struct gw_worker *w, struct claimed *cl, const json_t *entry, const struct claim_member *m,
                                   struct judge0_request *j, struct moat_exec_request *ereq)
{
    struct async_run *a = calloc(1, sizeof(*a));
    const char *parent = json_string_value(json_object_get(entry, "parent"));
    const char *path = json_string_value(json_object_get(entry, "path"));

    if (a == NULL)
        return NULL;
    a->refs = 1;
    a->item.start = on_dispatch;
    a->item.discard = async_discard;
    snprintf(a->item.tenant, sizeof(a->item.tenant), "%s", cl->tenant);
    a->worker = w;
    a->path = path_literal(path);
    a->own_decision = 1;
    snprintf(a->parent_id, sizeof(a->parent_id), "%s", parent);
    snprintf(a->socket, sizeof(a->socket), "%s", w->cfg->backend_socket);
    snprintf(a->request_id, sizeof(a->request_id), "%s", m->request_id);
    snprintf(a->tenant, sizeof(a->tenant), "%s", cl->tenant);
    snprintf(a->key_id, sizeof(a->key_id), "%s", json_string_value(json_object_get(entry, "key_id")));
    snprintf(a->client, sizeof(a->client), "%s", json_string_value(json_object_get(entry, "client")));
    snprintf(a->token, sizeof(a->token), "%s", m->token);
    snprintf(a->lang_name, sizeof(a->lang_name), "%s", m->lang_name);
    a->created_ms = m->created_ms;
    a->j = *j;
    a->ereq = *ereq;
    memset(j, 0, sizeof(*j));
    memset(ereq, 0, sizeof(*ereq));
    a->claim = cl;
    cl->refs++;
    return a;
}

/* a's request as this gateway sends it (judged again): what its decision
 * record hashes, and its backend message when it runs alone.  0 or -1. */
static int claim_encode(struct async_run *a)
{
    const char *why = NULL;

    a->job_id = backend_next_job_id();
    return moat_encode_exec_request(&a->frame, a->job_id, &a->ereq, &why);
}

/* The entry's shape, strictly: 0 with its members, or -1 with why. */
static int claim_decode(const struct qr_claim *c, json_t *entry, struct claim_member *m, size_t *n, const char **why)
{
    json_t *members, *v;
    const char *tenant, *parent, *path, *key_id, *client;
    json_error_t jerr;
    int version, base64;
    size_t i;

    if (json_unpack_ex(entry, &jerr, JSON_STRICT, "{s:i, s:s, s:s, s:s, s:s, s:s, s:b, s:o}", "v", &version, "tenant", &tenant,
                       "parent", &parent, "path", &path, "key_id", &key_id, "client", &client, "base64", &base64, "members",
                       &members) != 0) {
        *why = "the entry is not one of moat's submissions";
        return -1;
    }
    if (version != 1) {
        *why = "the entry's version is not 1";
        return -1;
    }
    if (strcmp(tenant, c->tenant) != 0) {
        *why = "the entry names another tenant than its stream's";
        return -1;
    }
    if (strlen(parent) > GW_REQUEST_ID_LEN || strlen(key_id) >= 80 || strlen(client) >= 64 ||
        (strcmp(path, "/submissions") != 0 && strcmp(path, "/submissions/batch") != 0) || !json_is_array(members) ||
        json_array_size(members) == 0 || json_array_size(members) > JUDGE0_BATCH_MAX) {
        *why = "the entry's fields are out of range";
        return -1;
    }
    json_array_foreach(members, i, v)
    {
        struct claim_member *x = &m[i];
        if (json_unpack_ex(v, &jerr, JSON_STRICT, "{s:s, s:s, s:I, s:s, s:o, s:s%}", "request_id", &x->request_id, "token",
                           &x->token, "created_ms", &x->created_ms, "lang_name", &x->lang_name, "submission", &x->submission,
                           "frame", &x->frame, &x->frame_len) != 0 ||
            strlen(x->request_id) > GW_REQUEST_ID_LEN || !judge0_token_valid(x->token, strlen(x->token)) ||
            strlen(x->lang_name) >= 128 || !json_is_object(x->submission)) {
            *why = "a member of the entry is not one of moat's submissions";
            return -1;
        }
    }
    *n = json_array_size(members);
    return 0;
}

/* Member m's submission and request, decoded and judged by this gateway:
 * 0, -1 (*why: it cannot run here, it ends), or -2 (*why: corrupt). */
static int claim_judge(struct gw_worker *w, const struct gw_tenant *t, int base64, const struct claim_member *m,
                       struct judge0_request *j, struct moat_exec_request *ereq, const char **why, char *msg, size_t msglen)
{
    char err[GW_ERR_MSG_MAX];
    json_t *errors = NULL;
    uint8_t *payload = malloc(MOAT_BASE64_DECODED_MAX(m->frame_len) + 1);
    size_t plen = 0;
    struct policy_verdict v;
    const char *dwhy = NULL;
    int rc;

    if (payload == NULL) {
        *why = "out of memory";
        return -1;
    }
    rc = judge0_parse_submission_object(m->submission, base64, j, &errors, err, sizeof(err));
    json_decref(errors);
    errors = NULL;
    if (rc != 0 || moat_base64_decode(m->frame, m->frame_len, payload, &plen) != 0 ||
        moat_decode_exec_request(payload, plen, ereq, &dwhy) != 0) {
        free(payload);
        *why = rc != 0 ? "the entry's submission does not parse" : "the entry's execution request does not decode";
        return -2;
    }
    free(payload);
    if (t == NULL || (t->policy.endpoints & POLICY_EP_SUBMISSIONS) == 0) {
        *why = t == NULL ? "the tenant is not configured on the gateway that took this submission from the queue"
                         : "the tenant may not use submissions on the gateway that took this submission from the queue";
        return -1;
    }
    struct cb_tenant_rules cbr = gw_tenant_callback_rules(t);
    if (judge0_check_callback(j, &cbr, &errors, err, sizeof(err)) != 0) {
        json_decref(errors);
        *why = "its callback_url is not allowed by the gateway that took this submission from the queue";
        return -1;
    }
    if (gw_runtime_table_pick(w, j->lang->moat, "*") == NULL) {
        *why = "the language is not installed on the host that took this submission from the queue";
        return -1;
    }
    if (gw_judge_exec(w, &t->policy, POLICY_EP_EXECUTE, ereq, &v) != 0) {
        snprintf(msg, msglen, "refused by the policy of the host that took this submission from the queue: %.160s", v.message);
        *why = msg;
        return -1;
    }
    return 0;
}

/* An entry that cannot run: each member's end, kept; then the ack. */
static void claim_end(struct gw_worker *w, struct claimed *cl, const json_t *entry, struct claim_member *m, size_t n, int base64,
                      const char *why)
{
    for (size_t i = 0; i < n; i++) {
        struct judge0_request j;
        struct moat_exec_request ereq;
        json_t *errors = NULL;
        char err[GW_ERR_MSG_MAX];
        struct async_run *a;

        memset(&ereq, 0, sizeof(ereq));
        if (judge0_parse_submission_object(m[i].submission, base64, &j, &errors, err, sizeof(err)) != 0) {
            json_decref(errors);
            continue; /* claim_judge found it corrupt first */
        }
        if ((a = claim_run(w, cl, entry, &m[i], &j, &ereq)) == NULL) {
            judge0_request_free(&j);
            continue;
        }
        async_keep_failure(a, why);
        async_destroy(a);
    }
}

static void claim_dead(struct gw_worker *w, const struct qr_claim *c, const char *why)
{
    log_warnx("%s: queue entry %s of tenant %s: %s: moved to the dead letter list, never run", __func__, c->id, c->tenant, why);
    gw_dispatch_note_dead();
    (void)queue_redis_dead(gw_dispatch_queue(), w->ctx.loop, c, why, NULL, NULL);
}

/* The runs of a claimed entry, judged: one run, or a group compiled once. */
static void claim_start(struct gw_worker *w, struct claimed *cl, struct async_run **runs, size_t n)
{
    struct async_group *g;

    (void)cl;
    if (n == 1) {
        on_dispatch(&runs[0]->item, w); /* its slot goes back when the backend answers (async_ran) */
        return;
    }
    if ((g = calloc(1, sizeof(*g))) == NULL) {
        for (size_t i = 0; i < n; i++) {
            async_keep_failure(runs[i], "out of memory");
            async_destroy(runs[i]);
        }
        gw_dispatch_done();
        return;
    }
    for (size_t i = 0; i < n; i++) {
        runs[i]->group = g;
        runs[i]->case_index = i;
        runs[i]->group_size = n;
        snprintf(runs[i]->group_first, sizeof(runs[i]->group_first), "%s", runs[0]->token);
        g->m[g->n++] = runs[i];
    }
    g->left = g->n;
    g->claimed = 1;
    g->worker = w;
    g->item.start = on_group_dispatch;
    g->item.discard = group_discard;
    snprintf(g->item.tenant, sizeof(g->item.tenant), "%s", runs[0]->tenant);
    snprintf(g->socket, sizeof(g->socket), "%s", w->cfg->backend_socket);
    if (group_frame(g, MOAT_MAX_TESTS_WALL_MS) != 0) {
        group_fail(g, 0, "the batch's shared job could not be made"); /* the last member frees g */
        gw_dispatch_done();
        return;
    }
    on_group_dispatch(&g->item, w); /* its slot goes back when the job answers (group_ran) */
}

void gw_judge0_run_claim(struct gw_worker *w, const struct qr_claim *c)
{
    struct claim_member m[JUDGE0_BATCH_MAX];
    struct async_run *runs[JUDGE0_BATCH_MAX] = {NULL};
    struct claimed *cl = NULL;
    const struct gw_tenant *t;
    const char *why = NULL;
    char msg[GW_ERR_MSG_MAX];
    json_t *entry = NULL;
    size_t n = 0, made = 0;
    int base64 = 0, rc = 0;

    memset(m, 0, sizeof(m));
    if (c->malformed || (entry = json_loadb(c->blob, c->len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, NULL)) == NULL ||
        claim_decode(c, entry, m, &n, &why) != 0) {
        claim_dead(w, c, why != NULL ? why : "the entry is not one of moat's submissions");
        json_decref(entry);
        gw_dispatch_done();
        return;
    }
    base64 = json_is_true(json_object_get(entry, "base64"));
    t = gw_config_find_tenant(w->cfg, c->tenant);
    if ((cl = calloc(1, sizeof(*cl))) == NULL) {
        json_decref(entry);
        queue_redis_forget(gw_dispatch_queue(), c->tenant, c->id); /* this gateway's sweep takes it back */
        gw_dispatch_done();
        return;
    }
    cl->worker = w;
    cl->refs = 1; /* this function's, until the runs are made */
    cl->attempt = c->attempt;
    snprintf(cl->tenant, sizeof(cl->tenant), "%s", c->tenant);
    snprintf(cl->id, sizeof(cl->id), "%s", c->id);
    snprintf(cl->accepted_by, sizeof(cl->accepted_by), "%.*s", (int)(c->gateway_len < GW_REDIS_MAX_PREFIX ? c->gateway_len : 0),
             c->gateway != NULL ? c->gateway : "");
    if (c->kind == QR_EXHAUSTED) {
        gw_dispatch_note_exhausted();
        log_warnx("%s: queue entry %s of tenant %s: taken over past max_attempts: it ends without running", __func__, c->id,
                  c->tenant);
        snprintf(msg, sizeof(msg),
                 "its run was lost %u times: a gateway or its backend stopped before the run ended (submissions.max_attempts %llu)",
                 c->attempt - 1, (unsigned long long)w->cfg->submissions.max_attempts);
        why = msg;
        rc = -1;
    }
    for (size_t i = 0; rc == 0 && i < n; i++) {
        struct judge0_request j;
        struct moat_exec_request ereq;
        memset(&j, 0, sizeof(j));
        memset(&ereq, 0, sizeof(ereq));
        rc = claim_judge(w, t, base64, &m[i], &j, &ereq, &why, msg, sizeof(msg));
        if (rc == 0 && (runs[i] = claim_run(w, cl, entry, &m[i], &j, &ereq)) == NULL) {
            why = "out of memory";
            rc = -1;
        } else if (rc == 0 && claim_encode(runs[i]) != 0) {
            why = "the request could not be encoded again";
            rc = -1;
        }
        judge0_request_free(&j);
        moat_exec_request_free(&ereq);
        made += runs[i] != NULL;
    }
    if (rc == -2) { /* corrupt: nothing of it runs, its runs made so far are dropped */
        for (size_t i = 0; i < made; i++)
            async_destroy(runs[i]);
        claim_dead(w, c, why);
        cl->refs = 0;
        free(cl);
        json_decref(entry);
        gw_dispatch_done();
        return;
    }
    if (rc != 0) { /* it ends here, each member with why */
        for (size_t i = 0; i < made; i++) {
            async_keep_failure(runs[i], why);
            async_destroy(runs[i]);
        }
        claim_end(w, cl, entry, m + made, n - made, base64, why);
        json_decref(entry);
        gw_dispatch_done();
        claim_release(cl);
        return;
    }
    json_decref(entry);
    claim_start(w, cl, runs, n);
    claim_release(cl);
}

/*
 * A record a gateway that has stopped since kept as pending (In Queue,
 * Processing): its run died with that gateway, so it becomes an Internal
 * Error saying so, kept in its place (once; the answer is this one).
 */
static void orphan_failed(struct gw_request *r, struct judge0_store *st, const char *token, json_t *record)
{
    static const char why[] = "the gateway restarted while this submission was pending: its run was lost";
    json_t *id = json_object_get(record, "status_id");
    char finished[JUDGE0_TIME_LEN], b64[MOAT_BASE64_ENCODED_LEN(sizeof(why) - 1) + 1], *text;

    if (!json_is_integer(id) || (json_integer_value(id) != JUDGE0_IN_QUEUE && json_integer_value(id) != JUDGE0_PROCESSING))
        return;
    judge0_time_iso(wall_ms(), finished);
    b64[moat_base64_encode(why, sizeof(why) - 1, b64)] = '\0';
    set_status(record, JUDGE0_INTERNAL_ERROR);
    json_object_set_new(record, "message", json_string(b64));
    json_object_set_new(record, "finished_at", json_string(finished));
    if ((text = json_dumps(record, JSON_COMPACT)) == NULL) {
        log_warnx("%s: id=%s: token %s: out of memory: the Internal Error could not be kept", __func__, r->request_id, token);
        return;
    }
    keep_logged(r, token, text, strlen(text)); /* final: a result that came meanwhile stays */
    judge0_callback_kept(r->cfg, r->tenant, token, text, strlen(text));
    free(text);
}

/* Why stored() found nothing to show. */
enum unshown { SHOWN, NOT_FOUND, NOT_UTF8, STORE_DOWN };

/*
 * A store that answers later (Redis): a GET's prepare step asks for all
 * its tokens at once (fetch_start: GW_WAIT), the answer is copied into
 * the request's pool (struct fetched, r->job) and the step runs again
 * (GW_REPEAT), rendering from it as from a store that answers at once.
 * The request may go away meanwhile: the wait is a req_watch.
 */
struct fetched {
    int down; /* Redis did not answer */
    size_t n;
    struct {
        char *text; /* in the pool; NULL: none */
        size_t len;
        int orphaned;
    } got[JUDGE0_GET_MAX];
};

static void on_fetched(void *arg, int down, const struct judge0_got *got, size_t n)
{
    struct gw_req_watch *fw = arg;
    struct gw_request *r = fw->r;
    struct fetched *f;

    gw_req_watch_end(fw);
    free(fw);
    if (r == NULL)
        return;
    f = h2o_mem_alloc_pool(&r->req->pool, sizeof(*f));
    memset(f, 0, sizeof(*f));
    f->down = down;
    f->n = n;
    for (size_t i = 0; !down && i < n; i++) {
        if (got[i].text == NULL)
            continue;
        f->got[i].text = h2o_mem_alloc_pool(&r->req->pool, got[i].len + 1);
        memcpy(f->got[i].text, got[i].text, got[i].len);
        f->got[i].text[got[i].len] = '\0';
        f->got[i].len = got[i].len;
        f->got[i].orphaned = got[i].orphaned;
    }
    r->job = f;
    gw_step_done(r, GW_REPEAT);
}

/* Ask the store for tokens[0..n) (an empty one is asked as a token that
 * cannot exist): GW_WAIT, or the refusal (Redis unreachable). */
static enum gw_flow fetch_start(struct gw_request *r, const char *const *tokens, size_t n)
{
    struct judge0_store *st = judge0_store_default();
    struct gw_req_watch *fw = calloc(1, sizeof(*fw));

    if (fw == NULL || gw_req_watch_start(fw, r) != 0) {
        free(fw);
        return gw_deny(r, 500, GW_REASON_BACKEND, "out of memory");
    }
    if (judge0_store_get_on(st, r->worker->ctx.loop, r->tenant, tokens, n, on_fetched, fw) != 0) {
        gw_req_watch_end(fw);
        free(fw);
        return store_down(r, GW_JUDGE0_STORE_RETRY_AFTER_MS);
    }
    return GW_WAIT;
}

/* Must the prepare step fetch first (a store that answers later, not yet asked)? */
static int must_fetch(const struct gw_request *r)
{
    struct judge0_store *st = judge0_store_default();

    return st != NULL && judge0_store_remote(st) && r->job == NULL;
}

/* The tenant's record of token (the i-th asked) rendered as q asks (new
 * reference), or NULL with *why: not found, not showable without base64,
 * or the store could not be asked (Redis unreachable: the record may
 * exist). */
static json_t *stored(struct gw_request *r, size_t i, const char *token, const struct judge0_query *q, enum unshown *why)
{
    struct judge0_store *st = judge0_store_default();
    const struct fetched *f = r->job;
    char *text = NULL;
    size_t len = 0;
    int orphaned = 0, not_utf8 = 0;
    json_t *record = NULL;

    *why = NOT_FOUND;
    if (st == NULL || token[0] == '\0')
        return NULL;
    if (f != NULL) { /* fetched */
        if (f->down || i >= f->n) {
            *why = STORE_DOWN;
            return NULL;
        }
        if (f->got[i].text == NULL)
            return NULL;
        record = json_loadb(f->got[i].text, f->got[i].len, 0, NULL);
        orphaned = f->got[i].orphaned;
    } else {
        if ((text = judge0_store_get(st, r->tenant, token, judge0_store_now_ms(), &len, &orphaned)) == NULL) {
            if (orphaned == JUDGE0_STORE_DOWN)
                *why = STORE_DOWN;
            return NULL;
        }
        record = json_loadb(text, len, 0, NULL);
        free(text);
    }
    if (record != NULL && orphaned)
        orphan_failed(r, st, token, record);
    json_t *o = record != NULL ? judge0_render_object(record, q, &not_utf8) : NULL;
    json_decref(record);
    if (o != NULL)
        *why = SHOWN;
    else if (not_utf8)
        *why = NOT_UTF8;
    return o;
}

static enum gw_flow not_utf8_refusal(struct gw_request *r)
{
    return refuse(r, 400, GW_REASON_FILTER,
                  "some attributes for this submission cannot be converted to UTF-8, use base64_encoded=true query parameter",
                  NULL);
}

/* The handlers' answer step when step 7 made the body. */
static enum gw_flow body_made(struct gw_request *r, const struct backend_reply *reply)
{
    (void)r;
    (void)reply;
    return GW_NEXT;
}

/* GET /submissions/{token}: the tenant's own result; anyone else's is "not found". */
static enum gw_flow submission_prepare(struct gw_request *r)
{
    struct judge0_query q;
    char token[JUDGE0_TOKEN_LEN + 1] = "";
    const char *p;
    size_t len;
    enum unshown why;
    enum gw_flow f;

    if ((f = query(r, JUDGE0_Q_BASE64 | JUDGE0_Q_FIELDS, &q)) != GW_NEXT)
        return f;
    if (gw_route_param(r->route, r->req->path_normalized.base, r->req->path_normalized.len, &p, &len) == 0 &&
        judge0_token_valid(p, len)) { /* JUDGE0_TOKEN_LEN bytes; anything else is not found */
        memcpy(token, p, len);
        token[len] = '\0';
    }
    if (token[0] != '\0' && must_fetch(r)) {
        const char *t = token;
        return fetch_start(r, &t, 1);
    }
    json_t *o = stored(r, 0, token, &q, &why);
    if (why == STORE_DOWN)
        return store_down(r, GW_JUDGE0_STORE_RETRY_AFTER_MS);
    if (o == NULL)
        return why == NOT_UTF8 ? not_utf8_refusal(r) : refuse(r, 404, GW_REASON_ENDPOINT, "submission not found", NULL);
    r->body = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return r->body != NULL ? GW_NEXT : gw_deny(r, 500, GW_REASON_BACKEND, "out of memory");
}

const struct gw_handler gw_handler_judge0_submission = {submission_prepare, NULL, body_made, NULL, NULL};

/* GET /submissions/batch?tokens=...: {"submissions": [...]}, null for a
 * token that is not the tenant's (or not a token at all). */
static enum gw_flow batch_prepare(struct gw_request *r)
{
    struct judge0_query q;
    enum unshown why;
    enum gw_flow f;
    json_t *a = json_array(), *o;

    if ((f = query(r, JUDGE0_Q_BASE64 | JUDGE0_Q_FIELDS | JUDGE0_Q_TOKENS, &q)) != GW_NEXT) {
        json_decref(a);
        return f;
    }
    if (q.ntokens > 0 && must_fetch(r)) {
        const char *t[JUDGE0_BATCH_MAX];
        for (size_t i = 0; i < q.ntokens; i++)
            t[i] = q.tokens[i];
        json_decref(a);
        return fetch_start(r, t, q.ntokens);
    }
    for (size_t i = 0; a != NULL && i < q.ntokens; i++) {
        if ((o = stored(r, i, q.tokens[i], &q, &why)) == NULL && why == STORE_DOWN) {
            json_decref(a);
            return store_down(r, GW_JUDGE0_STORE_RETRY_AFTER_MS);
        }
        if (o == NULL && why == NOT_UTF8) {
            json_decref(a);
            return refuse(r, 400, GW_REASON_FILTER,
                          "some attributes for one or more submissions cannot be converted to UTF-8, use base64_encoded=true "
                          "query parameter",
                          NULL);
        }
        json_array_append_new(a, o != NULL ? o : json_null());
    }
    json_t *body = a != NULL ? json_pack("{s:o}", "submissions", a) : NULL;
    r->body = body != NULL ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    return r->body != NULL ? GW_NEXT : gw_deny(r, 500, GW_REASON_BACKEND, "out of memory");
}

const struct gw_handler gw_handler_judge0_batch = {batch_prepare, NULL, body_made, NULL, NULL};
