/*
 * metrics_render.c - the Prometheus text of /metrics: the workers' counters
 * (common/metrics.c) summed, and the gauges that live elsewhere.
 *
 * Theory of operation
 * -------------------
 * Scraping (metrics_serve.c; the gauges of layers above these counters,
 * such as the shared queue's, come through gw_metrics_add_collector).
 * The metrics section binds one more listening socket before
 * the privilege drop (gw_metrics_listen; loopback unless the operator says
 * otherwise, never the public port: config_observe.c).  Worker 0 serves it
 * on its own loop with h2o, plain HTTP/1.1 and a host table of its own
 * (gw_metrics_serve): nothing of the public pipeline (TLS, routes,
 * authentication, audit) is reachable there, and /metrics is not a route of
 * the public listener (404 like any unknown path).  A scrape first asks
 * moat-backend for its runtimes, the readiness probe's query, whose reply
 * carries the backend's load (its slots and queue, PROTOCOL.md RUNTIMES
 * tag 2), then sums the workers' counters, reads the gauges that live
 * elsewhere (sessions, the submissions queue, the audit client of each
 * worker, the limiter's store) and writes the text exposition format 0.0.4.
 * A backend that does not answer makes moat_backend_up 0, not a failed
 * scrape: the question waits metrics.backend_timeout_ms (1 s by default),
 * not backend.timeout_ms (a minute), so a hung backend does not stall
 * the scraper past its own timeout.
 */
#include "metrics_serve.h"
#include "link/backend_client.h"
#include "config/config.h"
#include "apis/judge0/judge0_queue.h"
#include "log.h"
#include "moat_buf.h"
#include "core/request.h"
#include "core/routes.h"
#include "sessions/session_registry.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- the exposition */

/* The route row's labels (route and method), or "other". */
static void route_labels(unsigned route, const char **path, const char **method)
{
    size_t n;
    const struct gw_route *rows = gw_routes(&n);

    *path = *method = "other";
    if (route > 0 && route <= n) {
        *path = rows[route - 1].path;
        *method = rows[route - 1].method;
    }
}

static uint64_t load(const uint64_t *c)
{
    return __atomic_load_n(c, __ATOMIC_RELAXED);
}

/* The sum of one counter over the workers: offset of a uint64_t in struct gw_metrics. */
static uint64_t sum(size_t off)
{
    uint64_t s = 0;

    const struct gw_metrics *workers;
    unsigned nworkers = gw_metrics_workers(&workers);

    for (unsigned i = 0; i < nworkers; i++)
        s += load((const uint64_t *)(const void *)((const char *)&workers[i] + off));
    return s;
}

#define SUM(field) sum(offsetof(struct gw_metrics, field))

/* moat_requests_total: every worker's entries merged by key. */
static void render_requests(struct gw_metrics_text *t)
{
    const struct gw_metrics *workers;
    unsigned nworkers = gw_metrics_workers(&workers);
    size_t cap = (size_t)nworkers * GW_METRICS_TABLE * 2, used = 0;
    struct gw_metrics_count *merged = calloc(cap ? cap : 1, sizeof(*merged));
    char tenant[GW_MAX_TENANT_NAME * 2 + 1], path[128];
    const char *route, *method;

    gw_metrics_family(t, "moat_requests_total", "counter",
                      "Requests answered, by tenant (\"\" before authentication), route row and status.");
    if (merged == NULL) {
        t->failed = 1;
        return;
    }
    for (unsigned w = 0; w < nworkers; w++) {
        for (size_t i = 0; i < GW_METRICS_TABLE; i++) {
            const struct gw_metrics_count *e = &workers[w].table[i];
            if (!__atomic_load_n(&e->used, __ATOMIC_ACQUIRE))
                continue;
            size_t j = gw_metrics_key_hash(e->tenant, strlen(e->tenant), e->route, e->status) % cap;
            while (merged[j].used &&
                   !(merged[j].route == e->route && merged[j].status == e->status && strcmp(merged[j].tenant, e->tenant) == 0))
                j = (j + 1) % cap;
            if (!merged[j].used) {
                merged[j] = *e;
                merged[j].n = 0;
                used++;
            }
            merged[j].n += load(&e->n);
        }
    }
    for (size_t j = 0; j < cap && used > 0; j++) {
        if (!merged[j].used)
            continue;
        route_labels(merged[j].route, &route, &method);
        gw_metrics_put(t, "moat_requests_total{tenant=\"%s\",route=\"%s\",method=\"%s\",status=\"%u\"} %llu\n",
                       gw_metrics_label(merged[j].tenant, tenant, sizeof(tenant)), gw_metrics_label(route, path, sizeof(path)),
                       method, (unsigned)merged[j].status, (unsigned long long)merged[j].n);
    }
    free(merged);
    gw_metrics_family(t, "moat_requests_unlabelled_total", "counter",
                      "Requests counted without labels: a worker's label table was full.");
    gw_metrics_put(t, "moat_requests_unlabelled_total %llu\n", (unsigned long long)SUM(table_full));
}

/* moat_request_duration_seconds: one histogram per route row that has
 * answered; _count is the +Inf bucket, so the two always agree. */
static void render_durations(struct gw_metrics_text *t)
{
    const struct gw_metrics *workers;
    unsigned nworkers = gw_metrics_workers(&workers);
    char path[128];
    const char *route, *method;

    gw_metrics_family(t, "moat_request_duration_seconds", "histogram",
                      "Time from the request's headers to its answer, by route row (status and tenant in moat_requests_total).");
    for (unsigned r = 0; r <= GW_METRICS_ROUTES; r++) {
        uint64_t cum = 0, buckets[GW_METRICS_BUCKETS], us = 0;
        for (unsigned b = 0; b < GW_METRICS_BUCKETS; b++) {
            buckets[b] = SUM(hist[r][b]);
            cum += buckets[b];
        }
        if (cum == 0)
            continue;
        for (unsigned w = 0; w < nworkers; w++)
            us += load(&workers[w].hist_sum_us[r]);
        route_labels(r, &route, &method);
        gw_metrics_label(route, path, sizeof(path));
        cum = 0;
        for (unsigned b = 0; b < GW_METRICS_BUCKETS; b++) {
            cum += buckets[b];
            gw_metrics_put(t, "moat_request_duration_seconds_bucket{route=\"%s\",method=\"%s\",le=\"%s\"} %llu\n", path, method,
                           gw_metrics_bucket_le[b], (unsigned long long)cum);
        }
        gw_metrics_put(t, "moat_request_duration_seconds_sum{route=\"%s\",method=\"%s\"} %llu.%06llu\n", path, method,
                       (unsigned long long)(us / 1000000), (unsigned long long)(us % 1000000));
        gw_metrics_put(t, "moat_request_duration_seconds_count{route=\"%s\",method=\"%s\"} %llu\n", path, method,
                       (unsigned long long)cum);
    }
}

/* The audit client of each worker: connected, its oldest unacknowledged record, failures. */
static void render_audit(struct gw_metrics_text *t, struct gw_server *srv)
{
    unsigned connected = 0;
    uint64_t dropped = 0, lag_ms = 0, now = srv->nworkers > 0 ? h2o_now(srv->workers[0].ctx.loop) : 0;

    for (unsigned i = 0; i < srv->nworkers; i++) {
        const struct gw_audit *a = &srv->workers[i].audit;
        uint64_t since = __atomic_load_n(&a->oldest_ms, __ATOMIC_RELAXED);
        connected += __atomic_load_n(&a->sock, __ATOMIC_RELAXED) != NULL;
        dropped += __atomic_load_n(&a->dropped, __ATOMIC_RELAXED);
        if (since != 0 && now > since && now - since > lag_ms)
            lag_ms = now - since;
    }
    gw_metrics_gauge(t, "moat_audit_enabled", "1 when the audit trail is on.", (unsigned long long)srv->audit_enabled);
    gw_metrics_gauge(t, "moat_audit_writer_connected", "Workers connected to the audit writer.", connected);
    gw_metrics_family(t, "moat_audit_lag_seconds", "gauge",
                      "Age of the oldest record still waiting for the audit writer's acknowledgement (0: none waits).");
    gw_metrics_put(t, "moat_audit_lag_seconds %llu.%03llu\n", (unsigned long long)(lag_ms / 1000),
                   (unsigned long long)(lag_ms % 1000));
    gw_metrics_counter(t, "moat_audit_failures_total",
                       "Records the audit writer did not make durable (refused, timed out, or the writer gone).",
                       SUM(audit_failed));
    gw_metrics_counter(t, "moat_audit_dropped_total", "Denial records not written: no audit writer was connected.", dropped);
}

static void render_limiter(struct gw_metrics_text *t, struct gw_server *srv)
{
    static const char *const states[] = {"up", "down", "fallback"};
    enum rl_store_state s = rl_store_state(srv->limiter);
    /* worker 0's generation: this runs on its thread (a reload keeps the running limiter's section) */
    const char *store = srv->nworkers > 0 && srv->workers[0].cfg != NULL && srv->workers[0].cfg->limiter.redis ? "redis" : "memory";

    gw_metrics_family(t, "moat_limiter_store_state", "gauge",
                      "The limiter's store: 1 on its state now (up; down: refusing with 503; fallback: deciding locally).");
    for (unsigned i = 0; i < sizeof(states) / sizeof(states[0]); i++)
        gw_metrics_put(t, "moat_limiter_store_state{store=\"%s\",state=\"%s\"} %d\n", store, states[i], (unsigned)s == i);
}

static void render_connections(struct gw_metrics_text *t)
{
    gw_metrics_family(t, "moat_tls_handshake_failures_total", "counter",
                      "TLS handshakes that failed (error) or did not finish in time (timeout).");
    gw_metrics_put(t, "moat_tls_handshake_failures_total{reason=\"error\"} %llu\n",
                   (unsigned long long)SUM(tls_failed[GW_TLS_FAIL_ERROR]));
    gw_metrics_put(t, "moat_tls_handshake_failures_total{reason=\"timeout\"} %llu\n",
                   (unsigned long long)SUM(tls_failed[GW_TLS_FAIL_TIMEOUT]));
    gw_metrics_family(
        t, "moat_http2_goaways_total", "counter",
        "HTTP/2 connections the gateway closed with GOAWAY: too many reset streams, a timeout, a header block over the limits.");
    gw_metrics_put(t, "moat_http2_goaways_total{reason=\"reset_budget\"} %llu\n",
                   (unsigned long long)SUM(goaway[GW_GOAWAY_RESET_BUDGET]));
    gw_metrics_put(t, "moat_http2_goaways_total{reason=\"timeout\"} %llu\n", (unsigned long long)SUM(goaway[GW_GOAWAY_TIMEOUT]));
    gw_metrics_put(t, "moat_http2_goaways_total{reason=\"header_block\"} %llu\n",
                   (unsigned long long)SUM(goaway[GW_GOAWAY_HEADER_BLOCK]));
    gw_metrics_counter(t, "moat_connections_reset_total",
                       "Connections reset by the watchdog: a response not taken within timeouts.send_ms.", SUM(aborted));
}

/* The backend's own account of its slots (RUNTIMES' load), asked at each scrape. */
static void render_backend(struct gw_metrics_text *t, const struct moat_backend_load *l)
{
    gw_metrics_gauge(t, "moat_backend_up", "1 when moat-backend answered this scrape's query.", (unsigned long long)l->present);
    if (!l->present)
        return;
    gw_metrics_gauge(t, "moat_backend_slots", "moat-backend's batch slots (-j).", l->slots);
    gw_metrics_gauge(t, "moat_backend_slots_busy", "Batch slots running a job now.", l->busy);
    gw_metrics_gauge(t, "moat_backend_queue_max", "Requests that may wait for a batch slot (-q).", l->queue_max);
    gw_metrics_gauge(t, "moat_backend_queue_depth", "Requests waiting for a batch slot now.", l->queued);
    gw_metrics_gauge(t, "moat_backend_session_slots", "moat-backend's session slots (--sessions).", l->session_slots);
    gw_metrics_gauge(t, "moat_backend_session_slots_busy", "Session slots holding a live session now.", l->sessions_busy);
}

char *gw_metrics_render(struct gw_server *srv, const struct moat_backend_load *backend, size_t *len)
{
    struct gw_metrics_text t = {{0}, 0};
    struct jq_counts q;

    render_requests(&t);
    render_durations(&t);
    if (backend != NULL)
        render_backend(&t, backend);
    gw_metrics_gauge(&t, "moat_backend_calls_in_flight",
                     "Calls to moat-backend waiting for their answer (backend slots this gateway holds).", SUM(backend_in_flight));
    gw_metrics_counter(&t, "moat_backend_busy_total", "Calls moat-backend refused because every slot was taken.",
                       SUM(backend_busy));
    judge0_queue_counts(judge0_queue_default(), &q);
    gw_metrics_gauge(&t, "moat_submissions_running", "Judge0 queued submissions running now.", q.running);
    gw_metrics_gauge(&t, "moat_submissions_queue_depth", "Judge0 submissions waiting for a run.", q.queued);
    gw_metrics_collect(&t);
    gw_metrics_gauge(&t, "moat_sessions_open", "Live sessions (WebSocket) open now.", gw_sessions_count(NULL));
    render_audit(&t, srv);
    render_limiter(&t, srv);
    render_connections(&t);
    gw_metrics_gauge(&t, "moat_workers", "Worker threads.", srv->nworkers);
    if (t.failed) {
        moat_buf_free(&t.b);
        return NULL;
    }
    *len = t.b.len;
    return (char *)t.b.data;
}
