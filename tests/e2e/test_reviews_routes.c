/*
 * test_reviews_routes.c - two routes linked only into
 * moat-gateway-test-reviews, the test build of the gateway that
 * tests/e2e/test_reviews.py drives: the audit side of issue 12's result
 * packets and reviews, through the real gateway, before the real routes
 * (GET /api/v2/executions/{id}, POST /api/v2/executions/{id}/reviews) exist.
 * They use exactly the C API those routes are to call:
 *
 *   GET  /test/executions/{id}  gw_audit_fetch -> gw_audit_execution:
 *                               200 with the packet, records and reviews;
 *                               404 not found (another tenant's too); 503
 *   POST /test/reviews/{id}     {"verdict", "note"}: gw_audit_fetch ->
 *                               gw_audit_result_of -> gw_audit_review ->
 *                               gw_audit_submit (durable) -> 200 {"seq"};
 *                               404 not found, 409 no result yet, 400 bad
 *                               verdict or note, 503
 *
 * Step 7 (prepare) does the work and waits (GW_WAIT); the entry it waits
 * on is r->audit_entry, so the pipeline cancels it if the client goes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "link/audit_client.h"
#include "records/audit_records.h"
#include "core/pipeline.h"
#include "core/routes.h"
#include "server.h"

struct review_job {
    char id[GW_REQUEST_ID_LEN * 4 + 1];
    char verdict[32];
    char *note;
    size_t note_len;
};

/* The {id} of the path, copied into out (size bytes): 0, or -1. */
static int path_id(struct gw_request *r, char *out, size_t size)
{
    const char *p;
    size_t len;
    if (gw_route_param(r->route, r->req->path_normalized.base, r->req->path_normalized.len, &p, &len) != 0 || len == 0 ||
        len >= size)
        return -1;
    memcpy(out, p, len);
    out[len] = '\0';
    return 0;
}

/* A fetch's "not found" or failure, as the step's end. */
static void fetch_failed(struct gw_request *r, int found)
{
    if (found == 0)
        gw_step_done(r, gw_deny(r, 404, GW_REASON_ENDPOINT, "no such execution"));
    else
        gw_step_done(r, gw_deny(r, 503, GW_REASON_BACKEND, "the audit trail could not be read"));
}

/* ---- GET /test/executions/{id} ------------------------------------------------------------ */

static void on_execution(void *arg, int found, const char *records, size_t records_len, const uint8_t *packet, size_t packet_len)
{
    struct gw_request *r = arg;
    size_t len;
    r->audit_entry = NULL;
    if (found != 1) {
        fetch_failed(r, found);
        return;
    }
    json_t *x = gw_audit_execution(r->job, records, records_len, packet, packet_len);
    r->body = x ? gw_audit_dump(x, &len) : NULL;
    json_decref(x);
    gw_step_done(r, r->body ? GW_NEXT : gw_deny(r, 503, GW_REASON_BACKEND, "the execution could not be shown"));
}

static enum gw_flow prepare_execution(struct gw_request *r)
{
    char *id = h2o_mem_alloc_pool(&r->req->pool, GW_REQUEST_ID_LEN * 4 + 1);
    if (path_id(r, id, GW_REQUEST_ID_LEN * 4 + 1) != 0)
        return gw_deny(r, 404, GW_REASON_ENDPOINT, "no such execution");
    r->job = id;
    r->audit_entry = gw_audit_fetch(&r->worker->audit, r->tenant, id, on_execution, r);
    return GW_WAIT;
}

/* ---- POST /test/reviews/{id} -------------------------------------------------------------- */

static void on_review_durable(void *arg, int ok, uint64_t seq)
{
    struct gw_request *r = arg;
    char body[64];
    r->audit_entry = NULL;
    if (!ok) {
        gw_step_done(r, gw_deny(r, 503, GW_REASON_BACKEND, "the review could not be recorded"));
        return;
    }
    snprintf(body, sizeof(body), "{\"seq\":%llu}", (unsigned long long)seq);
    r->body = strdup(body);
    gw_step_done(r, GW_NEXT);
}

static void on_reviewed(void *arg, int found, const char *records, size_t records_len, const uint8_t *packet, size_t packet_len)
{
    struct gw_request *r = arg;
    struct review_job *j = r->job;
    struct gw_audit_who who;
    uint64_t seq;
    char sha[65];
    const char *why = NULL;
    size_t len;
    (void)packet;
    (void)packet_len;
    r->audit_entry = NULL;
    if (found != 1) {
        fetch_failed(r, found);
        return;
    }
    if (gw_audit_result_of(records, records_len, &seq, sha) != 0) {
        gw_step_done(r, gw_deny(r, 409, GW_REASON_FILTER, "the execution has no result yet"));
        return;
    }
    gw_request_who(r, &who);
    json_t *b = gw_audit_review(&who, j->id, j->verdict, j->note, j->note_len, seq, sha, &why);
    char *text = b ? gw_audit_dump(b, &len) : NULL;
    json_decref(b);
    if (text == NULL) {
        gw_step_done(r, gw_deny_copy(r, b ? 503 : 400, GW_REASON_FILTER, why ? why : "out of memory"));
        return;
    }
    r->audit_entry = gw_audit_submit(&r->worker->audit, text, len, NULL, 0, on_review_durable, r);
    free(text);
}

static enum gw_flow prepare_review(struct gw_request *r)
{
    struct review_job *j = h2o_mem_alloc_pool(&r->req->pool, sizeof(*j));
    json_t *body = json_loadb(r->req->entity.base, r->req->entity.len, JSON_REJECT_DUPLICATES, NULL);
    const char *verdict = json_string_value(json_object_get(body, "verdict"));
    json_t *note = json_object_get(body, "note");
    memset(j, 0, sizeof(*j));
    if (path_id(r, j->id, sizeof(j->id)) != 0 || verdict == NULL || strlen(verdict) >= sizeof(j->verdict) ||
        (note != NULL && !json_is_string(note))) {
        json_decref(body);
        return gw_deny(r, 400, GW_REASON_FILTER, "want {\"verdict\": ..., \"note\": ...}");
    }
    strcpy(j->verdict, verdict);
    j->note_len = note ? json_string_length(note) : 0;
    j->note = h2o_mem_alloc_pool(&r->req->pool, j->note_len + 1);
    memcpy(j->note, note ? json_string_value(note) : "", j->note_len + 1);
    json_decref(body);
    r->job = j;
    r->audit_entry = gw_audit_fetch(&r->worker->audit, r->tenant, j->id, on_reviewed, r);
    return GW_WAIT;
}

/* Step 9, without the backend: the body step 7 left. */
static enum gw_flow answer(struct gw_request *r, const struct backend_reply *reply)
{
    (void)reply;
    return GW_NEXT;
}

static const struct gw_handler execution = {prepare_execution, NULL, answer, NULL, NULL};
static const struct gw_handler reviews = {prepare_review, NULL, answer, NULL, NULL};

const struct gw_route gw_test_routes[] = {
    {"/test/executions/{id}", "GET", POLICY_EP_RUNTIMES, 0, &execution},
    {"/test/reviews/{id}", "POST", POLICY_EP_RUNTIMES, 0, &reviews},
};
const size_t gw_test_nroutes = sizeof(gw_test_routes) / sizeof(gw_test_routes[0]);
