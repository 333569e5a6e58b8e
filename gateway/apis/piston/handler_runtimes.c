/*
 * handler_runtimes.c - GET /api/v2/runtimes: ask the backend which
 * languages are installed and answer in Piston's shape, listing only the
 * runtimes the tenant's policy allows (policy_runtime_allowed: the same
 * rule execute is judged by).
 */
#include "core/pipeline.h"
#include "log.h"
#include "json/piston_json.h"
#include "exec/runtime_table.h"

#include <stdlib.h>
#include <string.h>

/* Step 7: the backend message is a runtimes query. */
static enum gw_flow prepare(struct gw_request *r)
{
    return gw_runtimes_query(r, &r->frame, &r->job_id);
}

/* Step 9: the tenant's part of the table, in Piston's shape. */
static enum gw_flow answer(struct gw_request *r, const struct backend_reply *reply)
{
    const struct moat_runtimes *all = &reply->u.runtimes;
    struct moat_runtime kept[MOAT_MAX_RUNTIMES];
    struct moat_runtimes mine = {kept, 0, {0}, NULL};

    if (reply->hdr.type != MOAT_MSG_RUNTIMES) {
        log_warnx("%s: id=%s: unexpected reply type %u", __func__, r->request_id, reply->hdr.type);
        return gw_deny(r, 502, GW_REASON_BACKEND, "bad reply from backend");
    }
    gw_runtime_table_store(r->worker, all);
    for (size_t i = 0; i < all->count && i < MOAT_MAX_RUNTIMES; i++) {
        const struct moat_runtime *rt = &all->items[i];
        struct policy_runtime pr = {rt->language, (const char *const *)rt->aliases, rt->naliases, rt->version};
        if (policy_runtime_allowed(&r->tenant_cfg->policy, &pr))
            kept[mine.count++] = *rt;
    }
    if ((r->body = piston_runtimes_json(&mine)) == NULL)
        return gw_deny(r, 500, GW_REASON_BACKEND, "out of memory");
    return GW_NEXT;
}

const struct gw_handler gw_handler_runtimes = {prepare, NULL, answer, NULL, NULL};
