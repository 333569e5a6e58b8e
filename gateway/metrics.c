/*
 * metrics.c - the gateway's counters and its Prometheus text /metrics.
 *
 * Theory of operation
 * -------------------
 * Counting.  Each worker thread owns one struct gw_metrics (allocated at
 * start, one per worker, cache-line aligned) and reaches it through a
 * thread-local pointer (gw_metrics_here); nothing else writes it.  A
 * counter has exactly one writer, so an increment is a relaxed load and
 * store (gw_metric_add: a plain add, no lock prefix), and a scrape on
 * another thread reads each one with a relaxed load: it may miss the
 * requests of the last microseconds, never tear a value.  Code that runs
 * on a thread that is not a worker's (the main thread, unit tests) counts
 * into a scratch set nobody reports.
 *
 * A request is counted once, when it is answered (gw_log_request, the one
 * place every answer passes): by tenant, route row and status in the
 * worker's table, and its duration in the route's histogram.  Labels come
 * from the configuration and the route table only, never from the
 * request's text: a path no row matches (or a method the row does not
 * answer) is route="other", an unauthenticated request tenant="".  The
 * table is open-addressed with GW_METRICS_TABLE entries per worker; a key
 * is written whole and then published (a release store of `used`), so a
 * scrape that sees `used` sees the key.  When a worker's table is full,
 * further new keys are counted in moat_requests_unlabelled_total.
 *
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
#include "metrics.h"
#include "backend_client.h"
#include "config.h"
#include "judge0_queue.h"
#include "log.h"
#include "moat_buf.h"
#include "request.h"
#include "routes.h"
#include "session_registry.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Upper bounds of the latency buckets, microseconds (the last is +Inf). */
static const uint64_t bucket_us[GW_METRICS_BUCKETS - 1] = {500,    1000,   2500,   5000,    10000,   25000,   50000,
                                                           100000, 250000, 500000, 1000000, 2500000, 5000000, 10000000};
static const char *const bucket_le[GW_METRICS_BUCKETS] = {"0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1",
                                                          "0.25",   "0.5",   "1",      "2.5",   "5",    "10",    "+Inf"};

static struct gw_metrics *workers; /* one per worker, from gw_metrics_init */
static unsigned nworkers;
static struct gw_metrics scratch; /* threads that are not a worker's */
static __thread struct gw_metrics *here = &scratch;

/* ---------------------------------------------------------------- counting */

int gw_metrics_init(unsigned n)
{
    if ((workers = aligned_alloc(64, sizeof(*workers) * n)) == NULL)
        return -1;
    memset(workers, 0, sizeof(*workers) * n);
    for (unsigned i = 0; i < n; i++)
        if ((workers[i].table = calloc(GW_METRICS_TABLE, sizeof(*workers[i].table))) == NULL)
            return -1;
    nworkers = n;
    return 0;
}

void gw_metrics_attach(unsigned index)
{
    if (index < nworkers)
        here = &workers[index];
}

struct gw_metrics *gw_metrics_here(void)
{
    return here;
}

/* 0 for "other", i + 1 for row i of the route table. */
static unsigned route_index(const struct gw_route *rt)
{
    size_t n;
    const struct gw_route *rows = gw_routes(&n);

    if (rt == NULL || rt < rows || rt >= rows + n || (size_t)(rt - rows) >= GW_METRICS_ROUTES)
        return 0;
    return (unsigned)(rt - rows) + 1;
}

static uint32_t key_hash(const char *tenant, size_t tlen, unsigned route, unsigned status)
{
    uint32_t h = 2166136261u; /* FNV-1a */

    for (size_t i = 0; i < tlen; i++)
        h = (h ^ (uint8_t)tenant[i]) * 16777619u;
    h = (h ^ route) * 16777619u;
    return (h ^ status) * 16777619u;
}

/* The worker's entry for the key, made when new; NULL when the table is full. */
static struct gw_metrics_count *count_entry(struct gw_metrics *m, const char *tenant, unsigned route, unsigned status)
{
    size_t tlen = strlen(tenant);
    uint32_t i = key_hash(tenant, tlen, route, status);

    if (m->table == NULL || tlen > GW_MAX_TENANT_NAME)
        return NULL;
    for (unsigned probe = 0; probe < GW_METRICS_TABLE; probe++, i++) {
        struct gw_metrics_count *e = &m->table[i & (GW_METRICS_TABLE - 1)];
        if (!e->used) { /* only this thread writes used */
            memcpy(e->tenant, tenant, tlen + 1);
            e->route = (uint16_t)route;
            e->status = (uint16_t)status;
            __atomic_store_n(&e->used, 1, __ATOMIC_RELEASE);
            return e;
        }
        if (e->route == route && e->status == status && memcmp(e->tenant, tenant, tlen + 1) == 0)
            return e;
    }
    return NULL;
}

void gw_metrics_request(const struct gw_request *r, int status, uint64_t us)
{
    struct gw_metrics *m = here;
    unsigned route = route_index(r->route), b = 0;
    struct gw_metrics_count *e;

    if (status < 0 || status > 999)
        status = 0;
    if ((e = count_entry(m, r->tenant != NULL ? r->tenant : "", route, (unsigned)status)) != NULL)
        gw_metric_add(&e->n, 1);
    else
        gw_metric_add(&m->table_full, 1);
    while (b < GW_METRICS_BUCKETS - 1 && us > bucket_us[b])
        b++;
    gw_metric_add(&m->hist[route][b], 1);
    gw_metric_add(&m->hist_sum_us[route], (int64_t)us);
}

/* ---------------------------------------------------------------- the exposition */

struct gw_metrics_text {
    struct moat_buf b;
    int failed;
};

__attribute__((format(printf, 2, 3))) static void put(struct gw_metrics_text *t, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (t->failed)
        return;
    va_start(ap, fmt);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || moat_buf_reserve(&t->b, (size_t)n + 1) != 0) {
        t->failed = 1;
        return;
    }
    va_start(ap, fmt);
    vsnprintf((char *)t->b.data + t->b.len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    t->b.len += (size_t)n;
}

static void family(struct gw_metrics_text *t, const char *name, const char *type, const char *help)
{
    put(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A label value as the text format wants it: \ " and newline escaped. */
static const char *label(const char *s, char *out, size_t outlen)
{
    size_t o = 0;

    for (; *s != '\0' && o + 3 < outlen; s++) {
        if (*s == '\\' || *s == '"' || *s == '\n') {
            out[o++] = '\\';
            out[o++] = *s == '\n' ? 'n' : *s;
        } else {
            out[o++] = *s;
        }
    }
    out[o] = '\0';
    return out;
}

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

    for (unsigned i = 0; i < nworkers; i++)
        s += load((const uint64_t *)(const void *)((const char *)&workers[i] + off));
    return s;
}

#define SUM(field) sum(offsetof(struct gw_metrics, field))

/* moat_requests_total: every worker's entries merged by key. */
static void render_requests(struct gw_metrics_text *t)
{
    size_t cap = (size_t)nworkers * GW_METRICS_TABLE * 2, used = 0;
    struct gw_metrics_count *merged = calloc(cap ? cap : 1, sizeof(*merged));
    char tenant[GW_MAX_TENANT_NAME * 2 + 1], path[128];
    const char *route, *method;

    family(t, "moat_requests_total", "counter", "Requests answered, by tenant (\"\" before authentication), route row and status.");
    if (merged == NULL) {
        t->failed = 1;
        return;
    }
    for (unsigned w = 0; w < nworkers; w++) {
        for (size_t i = 0; i < GW_METRICS_TABLE; i++) {
            const struct gw_metrics_count *e = &workers[w].table[i];
            if (!__atomic_load_n(&e->used, __ATOMIC_ACQUIRE))
                continue;
            size_t j = key_hash(e->tenant, strlen(e->tenant), e->route, e->status) % cap;
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
        put(t, "moat_requests_total{tenant=\"%s\",route=\"%s\",method=\"%s\",status=\"%u\"} %llu\n",
            label(merged[j].tenant, tenant, sizeof(tenant)), label(route, path, sizeof(path)), method, (unsigned)merged[j].status,
            (unsigned long long)merged[j].n);
    }
    free(merged);
    family(t, "moat_requests_unlabelled_total", "counter", "Requests counted without labels: a worker's label table was full.");
    put(t, "moat_requests_unlabelled_total %llu\n", (unsigned long long)SUM(table_full));
}

/* moat_request_duration_seconds: one histogram per route row that has
 * answered; _count is the +Inf bucket, so the two always agree. */
static void render_durations(struct gw_metrics_text *t)
{
    char path[128];
    const char *route, *method;

    family(t, "moat_request_duration_seconds", "histogram",
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
        label(route, path, sizeof(path));
        cum = 0;
        for (unsigned b = 0; b < GW_METRICS_BUCKETS; b++) {
            cum += buckets[b];
            put(t, "moat_request_duration_seconds_bucket{route=\"%s\",method=\"%s\",le=\"%s\"} %llu\n", path, method, bucket_le[b],
                (unsigned long long)cum);
        }
        put(t, "moat_request_duration_seconds_sum{route=\"%s\",method=\"%s\"} %llu.%06llu\n", path, method,
            (unsigned long long)(us / 1000000), (unsigned long long)(us % 1000000));
        put(t, "moat_request_duration_seconds_count{route=\"%s\",method=\"%s\"} %llu\n", path, method, (unsigned long long)cum);
    }
}

static void gauge(struct gw_metrics_text *t, const char *name, const char *help, unsigned long long v)
{
    family(t, name, "gauge", help);
    put(t, "%s %llu\n", name, v);
}

static void counter(struct gw_metrics_text *t, const char *name, const char *help, unsigned long long v)
{
    family(t, name, "counter", help);
    put(t, "%s %llu\n", name, v);
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
    gauge(t, "moat_audit_enabled", "1 when the audit trail is on.", (unsigned long long)srv->audit_enabled);
    gauge(t, "moat_audit_writer_connected", "Workers connected to the audit writer.", connected);
    family(t, "moat_audit_lag_seconds", "gauge",
           "Age of the oldest record still waiting for the audit writer's acknowledgement (0: none waits).");
    put(t, "moat_audit_lag_seconds %llu.%03llu\n", (unsigned long long)(lag_ms / 1000), (unsigned long long)(lag_ms % 1000));
    counter(t, "moat_audit_failures_total",
            "Records the audit writer did not make durable (refused, timed out, or the writer gone).", SUM(audit_failed));
    counter(t, "moat_audit_dropped_total", "Denial records not written: no audit writer was connected.", dropped);
}

static void render_limiter(struct gw_metrics_text *t, struct gw_server *srv)
{
    static const char *const states[] = {"up", "down", "fallback"};
    enum rl_store_state s = rl_store_state(srv->limiter);
    /* worker 0's generation: this runs on its thread (a reload keeps the running limiter's section) */
    const char *store = srv->nworkers > 0 && srv->workers[0].cfg != NULL && srv->workers[0].cfg->limiter.redis ? "redis" : "memory";

    family(t, "moat_limiter_store_state", "gauge",
           "The limiter's store: 1 on its state now (up; down: refusing with 503; fallback: deciding locally).");
    for (unsigned i = 0; i < sizeof(states) / sizeof(states[0]); i++)
        put(t, "moat_limiter_store_state{store=\"%s\",state=\"%s\"} %d\n", store, states[i], (unsigned)s == i);
}

static void render_connections(struct gw_metrics_text *t)
{
    family(t, "moat_tls_handshake_failures_total", "counter",
           "TLS handshakes that failed (error) or did not finish in time (timeout).");
    put(t, "moat_tls_handshake_failures_total{reason=\"error\"} %llu\n", (unsigned long long)SUM(tls_failed[GW_TLS_FAIL_ERROR]));
    put(t, "moat_tls_handshake_failures_total{reason=\"timeout\"} %llu\n",
        (unsigned long long)SUM(tls_failed[GW_TLS_FAIL_TIMEOUT]));
    family(t, "moat_http2_goaways_total", "counter",
           "HTTP/2 connections the gateway closed with GOAWAY: too many reset streams, a timeout, a header block over the limits.");
    put(t, "moat_http2_goaways_total{reason=\"reset_budget\"} %llu\n", (unsigned long long)SUM(goaway[GW_GOAWAY_RESET_BUDGET]));
    put(t, "moat_http2_goaways_total{reason=\"timeout\"} %llu\n", (unsigned long long)SUM(goaway[GW_GOAWAY_TIMEOUT]));
    put(t, "moat_http2_goaways_total{reason=\"header_block\"} %llu\n", (unsigned long long)SUM(goaway[GW_GOAWAY_HEADER_BLOCK]));
    counter(t, "moat_connections_reset_total", "Connections reset by the watchdog: a response not taken within timeouts.send_ms.",
            SUM(aborted));
}

/* The backend's own account of its slots (RUNTIMES' load), asked at each scrape. */
static void render_backend(struct gw_metrics_text *t, const struct moat_backend_load *l)
{
    gauge(t, "moat_backend_up", "1 when moat-backend answered this scrape's query.", (unsigned long long)l->present);
    if (!l->present)
        return;
    gauge(t, "moat_backend_slots", "moat-backend's batch slots (-j).", l->slots);
    gauge(t, "moat_backend_slots_busy", "Batch slots running a job now.", l->busy);
    gauge(t, "moat_backend_queue_max", "Requests that may wait for a batch slot (-q).", l->queue_max);
    gauge(t, "moat_backend_queue_depth", "Requests waiting for a batch slot now.", l->queued);
    gauge(t, "moat_backend_session_slots", "moat-backend's session slots (--sessions).", l->session_slots);
    gauge(t, "moat_backend_session_slots_busy", "Session slots holding a live session now.", l->sessions_busy);
}

/* The gauges other layers register (the shared queue's: judge0_dispatch.c). */
static gw_metrics_collector collectors[GW_METRICS_MAX_COLLECTORS];
static unsigned ncollectors;

int gw_metrics_add_collector(gw_metrics_collector fn)
{
    for (unsigned i = 0; i < ncollectors; i++)
        if (collectors[i] == fn)
            return 0;
    if (ncollectors == GW_METRICS_MAX_COLLECTORS)
        return -1;
    collectors[ncollectors++] = fn;
    return 0;
}

void gw_metrics_gauge(struct gw_metrics_text *t, const char *name, const char *help, unsigned long long v)
{
    gauge(t, name, help, v);
}

void gw_metrics_counter(struct gw_metrics_text *t, const char *name, const char *help, unsigned long long v)
{
    counter(t, name, help, v);
}

char *gw_metrics_render(struct gw_server *srv, const struct moat_backend_load *backend, size_t *len)
{
    struct gw_metrics_text t = {{0}, 0};
    struct jq_counts q;

    render_requests(&t);
    render_durations(&t);
    if (backend != NULL)
        render_backend(&t, backend);
    gauge(&t, "moat_backend_calls_in_flight", "Calls to moat-backend waiting for their answer (backend slots this gateway holds).",
          SUM(backend_in_flight));
    counter(&t, "moat_backend_busy_total", "Calls moat-backend refused because every slot was taken.", SUM(backend_busy));
    judge0_queue_counts(judge0_queue_default(), &q);
    gauge(&t, "moat_submissions_running", "Judge0 queued submissions running now.", q.running);
    gauge(&t, "moat_submissions_queue_depth", "Judge0 submissions waiting for a run.", q.queued);
    for (unsigned i = 0; i < ncollectors; i++)
        collectors[i](&t);
    gauge(&t, "moat_sessions_open", "Live sessions (WebSocket) open now.", gw_sessions_count(NULL));
    render_audit(&t, srv);
    render_limiter(&t, srv);
    render_connections(&t);
    gauge(&t, "moat_workers", "Worker threads.", srv->nworkers);
    if (t.failed) {
        moat_buf_free(&t.b);
        return NULL;
    }
    *len = t.b.len;
    return (char *)t.b.data;
}
