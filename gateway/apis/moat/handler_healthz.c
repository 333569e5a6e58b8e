/*
 * handler_healthz.c - liveness and readiness, both public, neither audited
 * nor admitted (routes.c).
 *
 *   GET /healthz  liveness: the process is up and its loop turns.  200.
 *   GET /readyz   readiness: this worker can serve work now: the audit
 *                 writer is connected (when the trail is on) and the
 *                 backend answers a runtimes query.  200, or 503 naming the
 *                 part that is not ready (with Retry-After, like every 503).
 *                 The 200 names the walls of the backend's boxes when its
 *                 answer did ("walls": "namespaces+seccomp+landlock"; a
 *                 kernel without Landlock: "namespaces+seccomp", and then
 *                 "walls_missing": ["landlock"], so a readiness check can
 *                 see that a wall is missing, not only which ran).
 *                 A success is remembered for GW_READY_CACHE_MS per worker,
 *                 so a flood of probes costs the backend nothing.
 */
#include "core/pipeline.h"
#include "exec/runtime_table.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GW_READY_CACHE_MS 1000

static enum gw_flow answer_live(struct gw_request *r, const struct backend_reply *reply)
{
    if ((r->body = strdup("{\"status\":\"ok\"}")) == NULL)
        return gw_deny(r, 500, GW_REASON_BACKEND, "out of memory");
    return GW_NEXT;
}

const struct gw_handler gw_handler_healthz = {NULL, NULL, answer_live, NULL, NULL};

/* Step 7: the audit writer first (no I/O), then a backend query unless a
 * recent one answered. */
static enum gw_flow prepare_ready(struct gw_request *r)
{
    struct gw_worker *w = r->worker;

    if (w->audit.enabled && !gw_audit_connected(&w->audit))
        return gw_deny(r, 503, GW_REASON_AUDIT, "not ready: audit writer unavailable");
    if (w->ready_ms != 0 && h2o_now(w->ctx.loop) - w->ready_ms < GW_READY_CACHE_MS)
        return GW_NEXT; /* answered without the backend */
    return gw_runtimes_query(r, &r->frame, &r->job_id);
}

/* The walls a plain box should have (moat-backend(8), "Walls"): those the backend's
 * answer lacks are named in the readiness answer, e.g. Landlock on a
 * kernel without it or a backend run with --no-landlock. */
static const char *const plain_box_walls[] = {"namespaces", "seccomp", "landlock"};

static int names_wall(const char *walls, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = walls;; p++) {
        if (strncmp(p, name, n) == 0 && (p[n] == '+' || p[n] == '\0'))
            return 1;
        if ((p = strchr(p, '+')) == NULL)
            return 0;
    }
}

static json_t *missing_walls(const char *walls)
{
    json_t *missing = json_array();
    for (size_t i = 0; missing != NULL && i < sizeof(plain_box_walls) / sizeof(plain_box_walls[0]); i++)
        if (!names_wall(walls, plain_box_walls[i]))
            json_array_append_new(missing, json_string(plain_box_walls[i]));
    return missing;
}

/* Step 9: the backend answered (or a recent probe did). */
static enum gw_flow answer_ready(struct gw_request *r, const struct backend_reply *reply)
{
    struct gw_worker *w = r->worker;

    if (reply != NULL && reply->hdr.type != MOAT_MSG_RUNTIMES)
        return gw_deny(r, 503, GW_REASON_BACKEND, "not ready: bad reply from backend");
    if (reply != NULL) {
        const char *walls = reply->u.runtimes.walls; /* checked by the decoder: [a-z] names joined by '+' */
        w->ready_ms = h2o_now(w->ctx.loop);
        snprintf(w->ready_walls, sizeof(w->ready_walls), "%s", walls != NULL ? walls : "");
    }
    json_t *o = json_pack("{s:s, s:s, s:s}", "status", "ready", "backend", "ok", "audit", w->audit.enabled ? "ok" : "off");
    if (o != NULL && w->ready_walls[0] != '\0') {
        json_t *missing = missing_walls(w->ready_walls);
        json_object_set_new(o, "walls", json_string(w->ready_walls));
        if (missing != NULL && json_array_size(missing) > 0)
            json_object_set_new(o, "walls_missing", missing);
        else
            json_decref(missing);
    }
    r->body = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (r->body == NULL)
        return gw_deny(r, 500, GW_REASON_BACKEND, "out of memory");
    return GW_NEXT;
}

const struct gw_handler gw_handler_readyz = {prepare_ready, NULL, answer_ready, NULL, NULL};
