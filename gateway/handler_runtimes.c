/*
 * handler_runtimes.c - GET /api/v2/runtimes: ask the backend which languages
 * are installed and answer in Piston's shape.
 */
#include "handlers.h"
#include "log.h"
#include "piston_json.h"

#include <stdlib.h>
#include <string.h>

static int runtime_allowed(const struct tenant_policy *p, const struct moat_runtime *rt)
{
    for (size_t i = 0; i < p->nlangs; i++) {
        const struct policy_lang *l = &p->langs[i];
        int named = strcmp(l->language, "*") == 0 || strcmp(l->language, rt->language) == 0;
        for (size_t j = 0; !named && j < rt->naliases; j++)
            named = strcmp(l->language, rt->aliases[j]) == 0;
        if (named && policy_version_matches(rt->version, l->version))
            return 1;
    }
    return 0;
}

static void on_runtimes(void *data, enum backend_status status, const struct backend_reply *reply)
{
    struct gw_request *r = data;
    char *body;

    if (handle_backend_failure(r, status, reply))
        return;
    if (reply->hdr.type != MOAT_MSG_RUNTIMES) {
        log_warnx("%s: id=%s: unexpected reply type %u", __func__, r->request_id, reply->hdr.type);
        gw_respond_error(r, 502, "bad reply from backend");
        return;
    }
    /* only the languages this tenant may use */
    const struct moat_runtimes *all = &reply->u.runtimes;
    struct moat_runtime kept[MOAT_MAX_RUNTIMES];
    struct moat_runtimes mine = {kept, 0};
    for (size_t i = 0; i < all->count && i < MOAT_MAX_RUNTIMES; i++)
        if (runtime_allowed(&r->tenant_cfg->policy, &all->items[i]))
            kept[mine.count++] = all->items[i];
    if ((body = piston_runtimes_json(&mine)) == NULL) {
        gw_respond_error(r, 500, "out of memory");
        return;
    }
    gw_respond(r, 200, body);
    free(body);
}

static void query_backend(struct gw_request *r);

/* The allowed decision is durable: now the answer may be computed. */
static void on_allowed_durable(void *arg, int ok, uint64_t seq)
{
    struct gw_request *r = arg;
    r->audit_entry = NULL;
    if (!ok) {
        gw_respond_error(r, 503, "audit log unavailable: request refused");
        return;
    }
    query_backend(r);
}

void handle_runtimes(struct gw_request *r)
{
    if (r->worker->audit.enabled) {
        struct gw_audit_who who;
        char client[64];
        size_t blen = 0;
        gw_audit_who(r, &who, client, sizeof(client));
        json_t *b = gw_audit_base(&who, "request");
        gw_audit_add_decision(b, "allowed", NULL, NULL, 200, NULL);
        char *text = gw_audit_dump(b, &blen);
        json_decref(b);
        r->audited = 1;
        if (text == NULL) {
            gw_respond_error(r, 500, "out of memory");
            return;
        }
        r->audit_entry = gw_audit_submit(&r->worker->audit, text, blen, NULL, 0, on_allowed_durable, r);
        free(text);
        return;
    }
    query_backend(r);
}

static void query_backend(struct gw_request *r)
{
    struct moat_buf frame = {NULL, 0, 0};
    uint64_t job = backend_next_job_id();
    const char *why = NULL;

    if (moat_encode_runtimes_query(&frame, job, &why) != 0) {
        log_warnx("%s: id=%s: %s", __func__, r->request_id, why);
        gw_respond_error(r, 500, "cannot encode the backend request");
        return;
    }
    gw_backend_call(r, &frame, job, on_runtimes);
}
