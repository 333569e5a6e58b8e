/*
 * handler_executions.c - an execution's result packet, and its reviews:
 *
 *   GET  /api/v2/executions/{request_id}          scope "packets"
 *        the packet (request, limits applied, outputs, test verdicts) with
 *        the execution's records and its reviews, to its own tenant
 *   POST /api/v2/executions/{request_id}/reviews  scope "review"
 *        {"verdict": "approved" | "rejected" | "needs_changes", "note": "..."}
 *        a review record in the audit trail, naming the exact result record
 *        it reviews (seq and SHA-256), durable before the answer
 *
 * Only translation.  The pipeline authenticates, authorizes (the two new
 * scopes are opt-in endpoints), admits and records the decision; the audit
 * writer reads the execution back (gw_audit_fetch: another tenant's id,
 * an unknown one and one past the writer's index are all 404, never 403)
 * and refuses a review that does not name a result of the same tenant.
 * Both do their work at step 9, after the decision record, so a refused
 * credential never causes a read of the trail.
 */
#include "core/pipeline.h"
#include "link/audit_client.h"
#include "records/audit_records.h"
#include "core/http.h"
#include "core/routes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const verdicts[] = {"approved", "rejected", "needs_changes"};

struct review_job {
    char id[GW_REQUEST_ID_LEN + 1];
    const char *verdict; /* one of verdicts[] */
    const char *note;    /* in req->pool; "" when none */
    size_t note_len;
};

/* The execution's request id from the path: exactly an id's shape, or 404. */
static enum gw_flow path_id(struct gw_request *r, char out[GW_REQUEST_ID_LEN + 1])
{
    const char *p;
    size_t len;

    if (gw_route_param(r->route, r->req->path_normalized.base, r->req->path_normalized.len, &p, &len) != 0 ||
        len != GW_REQUEST_ID_LEN || strspn(p, "0123456789abcdef") < GW_REQUEST_ID_LEN)
        return gw_deny(r, 404, GW_REASON_ENDPOINT, "no such execution");
    memcpy(out, p, GW_REQUEST_ID_LEN);
    out[GW_REQUEST_ID_LEN] = '\0';
    return GW_NEXT;
}

/* A fetch that found nothing (0) or failed (-1), as the step's end. */
static void fetch_failed(struct gw_request *r, int found)
{
    if (found == 0)
        gw_step_done(r, gw_deny(r, 404, GW_REASON_ENDPOINT, "no such execution"));
    else
        gw_step_done(r, gw_deny(r, 503, GW_REASON_AUDIT, "the audit trail could not be read"));
}

/* ------------------------------------------------------------ the packet */

static enum gw_flow packet_prepare(struct gw_request *r)
{
    char *id = h2o_mem_alloc_pool(&r->req->pool, GW_REQUEST_ID_LEN + 1);
    enum gw_flow f = path_id(r, id);

    r->job = id;
    return f;
}

static void packet_describe(struct gw_request *r, json_t *record)
{
    json_object_set_new(record, "execution", json_string(r->job));
}

static void on_packet(void *arg, int found, const char *records, size_t records_len, const uint8_t *packet, size_t packet_len)
{
    struct gw_request *r = arg;
    json_t *x;
    size_t len;

    r->audit_entry = NULL;
    if (found != 1) {
        fetch_failed(r, found);
        return;
    }
    x = gw_audit_execution(r->job, records, records_len, packet, packet_len);
    r->body = x != NULL ? gw_audit_dump(x, &len) : NULL;
    json_decref(x);
    gw_step_done(r, r->body != NULL ? GW_NEXT : gw_deny(r, 500, GW_REASON_AUDIT, "out of memory"));
}

static enum gw_flow packet_answer(struct gw_request *r, const struct backend_reply *reply)
{
    (void)reply;
    if (!r->worker->audit.enabled)
        return gw_deny(r, 404, GW_REASON_ENDPOINT, "no such execution: this gateway keeps no audit trail");
    r->audit_entry = gw_audit_fetch(&r->worker->audit, r->tenant, r->job, on_packet, r);
    return GW_WAIT;
}

const struct gw_handler gw_handler_execution = {packet_prepare, packet_describe, packet_answer, NULL, NULL};

/* ------------------------------------------------------------ reviews */

/* {"verdict", "note"}, strictly: JSON, the two fields and no other. */
static enum gw_flow review_parse(struct gw_request *r, struct review_job *j)
{
    h2o_req_t *req = r->req;
    json_error_t jerr;
    json_t *body, *v;
    const char *key;
    char msg[160];

    if (!gw_is_json_content_type(req))
        return gw_deny(r, 415, GW_REASON_FILTER, "Content-Type must be application/json (charset utf-8)");
    if ((body = json_loadb(req->entity.base, req->entity.len, JSON_REJECT_DUPLICATES, &jerr)) == NULL || !json_is_object(body)) {
        json_decref(body);
        return gw_deny(r, 400, GW_REASON_FILTER, "the body must be a JSON object {\"verdict\": ..., \"note\": ...}");
    }
    j->note = "";
    json_object_foreach(body, key, v)
    {
        if (strcmp(key, "verdict") == 0 && json_is_string(v)) {
            for (size_t i = 0; i < sizeof(verdicts) / sizeof(verdicts[0]); i++)
                if (strcmp(json_string_value(v), verdicts[i]) == 0)
                    j->verdict = verdicts[i];
            if (j->verdict == NULL)
                break;
        } else if (strcmp(key, "note") == 0 && json_is_string(v)) {
            char *note = h2o_mem_alloc_pool(&req->pool, json_string_length(v) + 1);
            j->note_len = json_string_length(v);
            memcpy(note, json_string_value(v), j->note_len + 1);
            j->note = note;
        } else {
            snprintf(msg, sizeof(msg), "unknown field or wrong type: '%.64s' (want verdict, note: strings)", key);
            json_decref(body);
            return gw_deny_copy(r, 400, GW_REASON_FILTER, msg);
        }
    }
    json_decref(body);
    if (j->verdict == NULL)
        return gw_deny(r, 400, GW_REASON_FILTER, "verdict must be \"approved\", \"rejected\" or \"needs_changes\"");
    if (j->note_len > GW_AUDIT_REVIEW_MAX_NOTE)
        return gw_deny(r, 400, GW_REASON_FILTER, "note is longer than 4096 bytes");
    return GW_NEXT;
}

static enum gw_flow review_prepare(struct gw_request *r)
{
    struct review_job *j = h2o_mem_alloc_pool(&r->req->pool, sizeof(*j));
    enum gw_flow f;

    memset(j, 0, sizeof(*j));
    r->job = j;
    if ((f = path_id(r, j->id)) != GW_NEXT)
        return f;
    return review_parse(r, j);
}

static void review_describe(struct gw_request *r, json_t *record)
{
    const struct review_job *j = r->job;

    json_object_set_new(record, "execution", json_string(j->id));
    json_object_set_new(record, "verdict", json_string(j->verdict));
}

static void on_review_durable(void *arg, int ok, uint64_t seq)
{
    struct gw_request *r = arg;
    char body[96];

    r->audit_entry = NULL;
    if (!ok) {
        gw_step_done(r, gw_deny(r, 503, GW_REASON_AUDIT, "audit log unavailable: the review could not be recorded"));
        return;
    }
    snprintf(body, sizeof(body), "{\"review_seq\":%llu}", (unsigned long long)seq);
    r->body = strdup(body);
    gw_step_done(r, r->body != NULL ? GW_NEXT : gw_deny(r, 500, GW_REASON_AUDIT, "out of memory"));
}

static void on_reviewed(void *arg, int found, const char *records, size_t records_len, const uint8_t *packet, size_t packet_len)
{
    struct gw_request *r = arg;
    const struct review_job *j = r->job;
    struct gw_audit_who who;
    const char *why = NULL;
    uint64_t seq;
    char sha[65], *text;
    size_t len;
    json_t *b;

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
    if ((b = gw_audit_review(&who, j->id, j->verdict, j->note, j->note_len, seq, sha, &why)) == NULL) {
        gw_step_done(r, gw_deny_copy(r, 400, GW_REASON_FILTER, why != NULL ? why : "the review was refused"));
        return;
    }
    text = gw_audit_dump(b, &len);
    json_decref(b);
    if (text == NULL) {
        gw_step_done(r, gw_deny(r, 500, GW_REASON_AUDIT, "out of memory"));
        return;
    }
    r->audit_entry = gw_audit_submit(&r->worker->audit, text, len, NULL, 0, on_review_durable, r);
    free(text);
}

static enum gw_flow review_answer(struct gw_request *r, const struct backend_reply *reply)
{
    const struct review_job *j = r->job;

    (void)reply;
    if (!r->worker->audit.enabled)
        return gw_deny(r, 404, GW_REASON_ENDPOINT, "no such execution: this gateway keeps no audit trail");
    r->audit_entry = gw_audit_fetch(&r->worker->audit, r->tenant, j->id, on_reviewed, r);
    return GW_WAIT;
}

const struct gw_handler gw_handler_execution_review = {review_prepare, review_describe, review_answer, NULL, NULL};
