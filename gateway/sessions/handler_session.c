/*
 * handler_session.c - GET /api/v2/connect (a live session, Piston's
 * WebSocket protocol) and GET /api/v2/watch (a read-only watcher of one).
 * Only translation: authentication (a watch token for watchers), the
 * endpoint allow-list, the rate limit and the decision record are the
 * pipeline's; the session is session.c's, the WebSocket session_ws.c's.
 *
 * Step 7 of connect checks the handshake, refreshes the runtime table the
 * `init` will be judged with, and counts the session against the tenant's
 * sessions.max_concurrent and the gateway's sessions.max_sessions: over
 * either it is a 429 (tenant) or 503 (gateway) with Retry-After, before the
 * upgrade.  With counts shared in Redis the step waits for Redis' answer
 * (struct asking) and runs again with it.  Step 9 upgrades, and the
 * session takes the count over.
 */
#include "core/pipeline.h"
#include "core/auth.h"
#include "core/http.h"
#include "exec/runtime_table.h"
#include "session_ws.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GW_SESSION_RETRY_AFTER_MS 1000

struct connect_job {
    int asked_table;
    int counted;  /* holds a count in the session registry */
    int answered; /* Redis answered the count's acquire: verdict */
    enum gw_session_refusal verdict;
    char tenant[GW_MAX_TENANT_NAME + 1];
};

/* An acquire waiting for Redis; its request may go away meanwhile (then
 * a count granted is given back at once). */
struct asking {
    struct gw_req_watch watch;
    char tenant[GW_MAX_TENANT_NAME + 1];
};

static void on_counted(void *arg, enum gw_session_refusal verdict)
{
    struct asking *a = arg;
    struct gw_request *r = a->watch.r;
    struct connect_job *job;

    gw_req_watch_end(&a->watch);
    if (r == NULL) {
        if (verdict == GW_SESSIONS_OK)
            gw_sessions_release(a->tenant);
        free(a);
        return;
    }
    free(a);
    job = r->job;
    job->answered = 1;
    job->verdict = verdict;
    gw_step_done(r, GW_REPEAT);
}

/* Count the session: the registry's answer now, or GW_SESSIONS_ASKING
 * (on_counted follows). */
static enum gw_session_refusal count_session(struct gw_request *r)
{
    const struct policy_session_limits *sl = &r->tenant_cfg->policy.sessions;
    struct connect_job *job = r->job;
    struct asking *a;
    enum gw_session_refusal v;

    if (job->answered)
        return job->verdict;
    if ((a = calloc(1, sizeof(*a))) == NULL || gw_req_watch_start(&a->watch, r) != 0) {
        free(a);
        return GW_SESSIONS_NO_MEMORY;
    }
    snprintf(a->tenant, sizeof(a->tenant), "%s", r->tenant);
    v = gw_sessions_acquire(r->tenant, sl->max_concurrent, r->cfg->sessions.max_sessions, r->worker->ctx.loop, on_counted, a);
    if (v != GW_SESSIONS_ASKING) {
        gw_req_watch_end(&a->watch);
        free(a);
    }
    return v;
}

static void connect_dispose(void *p)
{
    struct connect_job *job = p;

    if (job->counted)
        gw_sessions_release(job->tenant); /* never handed to a session */
}

static enum gw_flow connect_prepare(struct gw_request *r)
{
    struct connect_job *job = r->job;
    const struct policy_session_limits *sl = &r->tenant_cfg->policy.sessions;
    enum gw_flow f;
    char msg[160];

    if (job == NULL) {
        if ((f = gw_ws_handshake(r, &r->ws_key)) != GW_NEXT)
            return f;
        job = h2o_mem_alloc_shared(&r->req->pool, sizeof(*job), connect_dispose);
        memset(job, 0, sizeof(*job));
        r->job = job;
    }
    if (!gw_runtime_table_fresh(r->worker) && !job->asked_table) {
        job->asked_table = 1;
        return gw_runtime_table_fetch(r); /* then this step again */
    }
    switch (count_session(r)) {
    case GW_SESSIONS_ASKING:
        return GW_WAIT;
    case GW_SESSIONS_OK:
        break;
    case GW_SESSIONS_TENANT_FULL:
        gw_add_retry_after(r, GW_SESSION_RETRY_AFTER_MS);
        r->code = gw_code(GW_CODE_TOO_MANY_SESSIONS);
        snprintf(msg, sizeof(msg), "this tenant already holds its %u concurrent sessions (sessions.max_concurrent)",
                 sl->max_concurrent);
        return gw_deny_copy(r, 429, GW_REASON_CONCURRENCY, msg);
    case GW_SESSIONS_FULL:
        gw_add_retry_after(r, GW_SESSION_RETRY_AFTER_MS);
        r->code = gw_code(GW_CODE_SESSIONS_FULL);
        return gw_deny(r, 503, GW_REASON_CONCURRENCY, "the gateway holds as many sessions as it may (sessions.max_sessions)");
    case GW_SESSIONS_UNAVAILABLE:
        gw_add_retry_after(r, gw_sessions_retry_after_ms());
        r->code = gw_code(GW_CODE_SESSIONS_UNAVAILABLE);
        return gw_deny(r, 503, GW_REASON_CONCURRENCY, "the shared session counts cannot be reached (Redis): try again later");
    default:
        return gw_deny(r, 500, GW_REASON_BACKEND, "out of memory");
    }
    job->counted = 1;
    snprintf(job->tenant, sizeof(job->tenant), "%s", r->tenant);
    return GW_NEXT;
}

static void connect_describe(struct gw_request *r, json_t *record)
{
    (void)r;
    json_object_set_new(record, "session", json_string("websocket"));
}

static enum gw_flow connect_answer(struct gw_request *r, const struct backend_reply *reply)
{
    struct connect_job *job = r->job;
    enum gw_flow f;

    (void)reply;
    f = gw_ws_connect(r, r->ws_key);
    if (f == GW_TAKEN)
        job->counted = 0; /* the session holds it now */
    return f;
}

const struct gw_handler gw_handler_connect = {connect_prepare, connect_describe, connect_answer, NULL, NULL};

/* ------------------------------------------------------------- watchers */

static enum gw_flow watch_prepare(struct gw_request *r)
{
    return gw_ws_handshake(r, &r->ws_key);
}

static void watch_describe(struct gw_request *r, json_t *record)
{
    const struct gw_watch_grant *g = r->job;

    json_object_set_new(record, "watch", json_string(g->session_id));
}

static enum gw_flow watch_answer(struct gw_request *r, const struct backend_reply *reply)
{
    (void)reply;
    return gw_ws_watch(r, r->ws_key, r->job); /* the grant from auth.c */
}

/* ---------------------------------------------------- step 4 of watch */

static void grant_dispose(void *p)
{
    gw_watch_leave(p); /* unless the watcher took it */
}

/* The watch token: "Authorization: Bearer mwt_...", or for a browser
 * (which cannot set headers on a WebSocket) the query's token=mwt_...; the
 * log masks query values. */
static int watch_token(h2o_req_t *req, const char **token, size_t *len)
{
    ssize_t i = h2o_find_header(&req->headers, H2O_TOKEN_AUTHORIZATION, -1);

    if (i != -1)
        return auth_bearer_token(req->headers.entries[i].value.base, req->headers.entries[i].value.len, token, len);
    if (req->query_at == SIZE_MAX || req->query_at >= req->path.len)
        return -1;
    const char *q = req->path.base + req->query_at + 1, *end = req->path.base + req->path.len;
    while (q < end) {
        const char *amp = memchr(q, '&', (size_t)(end - q));
        const char *stop = amp != NULL ? amp : end;
        if ((size_t)(stop - q) > 6 && memcmp(q, "token=", 6) == 0) {
            *token = q + 6;
            *len = (size_t)(stop - q - 6);
            return 0;
        }
        q = stop + (amp != NULL);
    }
    return -1;
}

static enum gw_flow watch_authenticate(struct gw_request *r)
{
    h2o_req_t *req = r->req;
    struct gw_watch_grant *g;
    const char *token, *why;
    size_t len;

    if (h2o_find_header(&req->headers, H2O_TOKEN_AUTHORIZATION, -1) != -1 &&
        h2o_find_header(&req->headers, H2O_TOKEN_AUTHORIZATION, h2o_find_header(&req->headers, H2O_TOKEN_AUTHORIZATION, -1)) != -1)
        return gw_unauthorized(r, "more than one Authorization header", "Bearer", "invalid or missing watch token");
    if (watch_token(req, &token, &len) != 0)
        return gw_unauthorized(r, "no watch token", "Bearer", "invalid or missing watch token");
    g = h2o_mem_alloc_shared(&req->pool, sizeof(*g), grant_dispose);
    if (gw_watch_join(token, len, g, &why) != 0)
        return gw_unauthorized(r, why, "Bearer error=\"invalid_token\"", why);
    r->tenant_cfg = gw_config_find_tenant(r->cfg, g->tenant);
    if (r->tenant_cfg == NULL) /* removed by a reload since the token was issued */
        return gw_unauthorized(r, "the watch token's tenant is gone", "Bearer error=\"invalid_token\"",
                               "invalid or missing watch token");
    r->tenant = r->tenant_cfg->name;
    r->scopes = POLICY_EP_WATCH;
    snprintf(r->key_id, sizeof(r->key_id), "watch:%s", g->session_id);
    r->job = g;
    return GW_NEXT;
}

const struct gw_handler gw_handler_watch = {watch_prepare, watch_describe, watch_answer, NULL, watch_authenticate};
