/*
 * runtime_table.c - each worker's copy of the backend's runtime table.
 *
 * The backend knows which languages are installed and their aliases; the
 * tenant's policy may name a language by any of them.  So that the same
 * rule decides what /api/v2/runtimes lists and what execute accepts
 * (policy_runtime_allowed, policy_evaluate), each worker keeps the table
 * from the backend's last runtimes reply: every /api/v2/runtimes answer
 * refreshes it, and an execute on a worker whose table is missing or older
 * than GW_RUNTIME_TABLE_TTL_MS asks the backend first.  The table only
 * widens a policy entry to the other names of the same runtime; the backend
 * validates the language again either way.  Worker thread only: no locks.
 */
#include "runtime_table.h"
#include "log.h"
#include "moat_semver.h"

#include <stdlib.h>
#include <string.h>

/* A deep copy of a list of strings into *dst (*n of them copied); 0 or -1 out of memory. */
static int strv_copy(char ***dst, size_t *n, char *const *src, size_t count)
{
    if (count > 0 && (*dst = calloc(count, sizeof(char *))) == NULL)
        return -1;
    for (size_t j = 0; j < count; j++, (*n)++)
        if (((*dst)[j] = strdup(src[j])) == NULL)
            return -1;
    return 0;
}

/* A deep copy of one runtime; 0 or -1 (out of memory, dst partly filled). */
static int runtime_copy(struct moat_runtime *dst, const struct moat_runtime *src)
{
    memset(dst, 0, sizeof(*dst));
    if ((dst->language = strdup(src->language)) == NULL || (dst->version = strdup(src->version)) == NULL)
        return -1;
    if (strv_copy(&dst->aliases, &dst->naliases, src->aliases, src->naliases) != 0 ||
        strv_copy(&dst->option_patterns, &dst->noption_patterns, src->option_patterns, src->noption_patterns) != 0)
        return -1;
    dst->compiled = src->compiled;
    return 0;
}

int gw_runtime_table_fresh(struct gw_worker *w)
{
    return w->runtimes_ms != 0 && h2o_now(w->ctx.loop) - w->runtimes_ms < GW_RUNTIME_TABLE_TTL_MS;
}

void gw_runtime_table_store(struct gw_worker *w, const struct moat_runtimes *rt)
{
    struct moat_runtimes t = {NULL, 0, {0}, NULL};

    if (rt->count > 0 && (t.items = calloc(rt->count, sizeof(*t.items))) == NULL)
        return;
    for (size_t i = 0; i < rt->count; i++, t.count++) {
        if (runtime_copy(&t.items[i], &rt->items[i]) != 0) {
            t.count++;
            moat_runtimes_free(&t);
            log_warnx("%s: out of memory: the runtime table stays as it was", __func__);
            return;
        }
    }
    moat_runtimes_free(&w->runtimes);
    w->runtimes = t;
    w->runtimes_ms = h2o_now(w->ctx.loop);
}

/* Is language one of rt's names (canonical or alias)? */
static int runtime_named(const struct moat_runtime *rt, const char *language)
{
    int named = strcmp(rt->language, language) == 0;
    for (size_t j = 0; !named && j < rt->naliases; j++)
        named = strcmp(rt->aliases[j], language) == 0;
    return named;
}

const struct policy_runtime *gw_runtime_table_find(struct gw_worker *w, const char *language, struct policy_runtime *out)
{
    for (size_t i = 0; language != NULL && i < w->runtimes.count; i++) {
        const struct moat_runtime *rt = &w->runtimes.items[i];
        if (runtime_named(rt, language)) {
            *out = (struct policy_runtime){rt->language, (const char *const *)rt->aliases, rt->naliases, rt->version};
            return out;
        }
    }
    return NULL;
}

const struct moat_runtime *gw_runtime_table_pick(struct gw_worker *w, const char *language, const char *selector)
{
    const struct moat_runtime *best = NULL;

    for (size_t i = 0; language != NULL && selector != NULL && i < w->runtimes.count; i++) {
        const struct moat_runtime *rt = &w->runtimes.items[i];
        /* the backend's own rule (language_find): the highest version the selector picks */
        if (runtime_named(rt, language) && moat_version_selects(rt->version, selector) &&
            (best == NULL || moat_version_cmp(rt->version, best->version) > 0))
            best = rt;
    }
    return best;
}

const struct policy_runtime *gw_runtime_table_select(struct gw_worker *w, const char *language, const char *selector,
                                                     struct policy_runtime *out)
{
    const struct moat_runtime *best = gw_runtime_table_pick(w, language, selector);

    if (best == NULL)
        return NULL;
    *out = (struct policy_runtime){best->language, (const char *const *)best->aliases, best->naliases, best->version};
    return out;
}

static void on_table(void *data, enum backend_status status, const struct backend_reply *reply)
{
    struct gw_request *r = data;

    if (status != BACKEND_OK || reply->hdr.type != MOAT_MSG_RUNTIMES) {
        /* a reply of another type is a broken reply, never read as an ERROR */
        if (status == BACKEND_OK && reply->hdr.type != MOAT_MSG_ERROR)
            status = BACKEND_BAD_REPLY;
        gw_step_done(r, gw_backend_failure(r, status, reply));
        return;
    }
    gw_runtime_table_store(r->worker, &reply->u.runtimes);
    gw_step_done(r, GW_REPEAT);
}

enum gw_flow gw_runtimes_query(struct gw_request *r, struct moat_buf *frame, uint64_t *job)
{
    const char *why = NULL;

    *job = backend_next_job_id();
    if (moat_encode_runtimes_query(frame, *job, &why) != 0) {
        log_warnx("%s: id=%s: %s", __func__, r->request_id, why);
        return gw_deny(r, 500, GW_REASON_BACKEND, "cannot encode the backend request");
    }
    return GW_NEXT;
}

enum gw_flow gw_runtime_table_fetch(struct gw_request *r)
{
    struct moat_buf frame = {NULL, 0, 0};
    uint64_t job;
    enum gw_flow f = gw_runtimes_query(r, &frame, &job);

    if (f != GW_NEXT)
        return f;
    gw_backend_call(r, &frame, job, on_table, r);
    return GW_WAIT;
}
