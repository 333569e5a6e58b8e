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

void handle_runtimes(struct gw_request *r)
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
