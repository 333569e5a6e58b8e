/*
 * metrics.c - the gateway's counters, and the text every layer writes its
 * gauges in.
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
 * A request is counted once, when it is answered (core/http.c's
 * gw_log_request, the one place every answer passes: gw_metrics_request):
 * by tenant, route row and status in the worker's table, and its duration
 * in the route's histogram.  Labels come from the configuration and the
 * route table only, never from the request's text: a path no row matches
 * (or a method the row does not answer) is row 0, "other", an
 * unauthenticated request tenant "".  The table is open-addressed with
 * GW_METRICS_TABLE entries per worker; a key is written whole and then
 * published (a release store of `used`), so a scrape that sees `used` sees
 * the key.  When a worker's table is full, further new keys are counted in
 * moat_requests_unlabelled_total.
 *
 * Writing.  The exposition (observe/metrics_render.c) and the gauges of
 * the layers above it (the shared queue's, registered with
 * gw_metrics_add_collector) write the text format 0.0.4 through the same
 * few calls here, so a layer that has gauges never calls up into the one
 * that renders them.
 */
#include "metrics.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Upper bounds of the latency buckets, microseconds (the last is +Inf). */
static const uint64_t bucket_us[GW_METRICS_BUCKETS - 1] = {500,    1000,   2500,   5000,    10000,   25000,   50000,
                                                           100000, 250000, 500000, 1000000, 2500000, 5000000, 10000000};
const char *const gw_metrics_bucket_le[GW_METRICS_BUCKETS] = {"0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1",
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

uint32_t gw_metrics_key_hash(const char *tenant, size_t tlen, unsigned route, unsigned status)
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
    uint32_t i = gw_metrics_key_hash(tenant, tlen, route, status);

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

void gw_metrics_count(const char *tenant, unsigned route, int status, uint64_t us)
{
    struct gw_metrics *m = here;
    unsigned b = 0;
    struct gw_metrics_count *e;

    if (route > GW_METRICS_ROUTES)
        route = 0;
    if (status < 0 || status > 999)
        status = 0;
    if ((e = count_entry(m, tenant != NULL ? tenant : "", route, (unsigned)status)) != NULL)
        gw_metric_add(&e->n, 1);
    else
        gw_metric_add(&m->table_full, 1);
    while (b < GW_METRICS_BUCKETS - 1 && us > bucket_us[b])
        b++;
    gw_metric_add(&m->hist[route][b], 1);
    gw_metric_add(&m->hist_sum_us[route], (int64_t)us);
}

unsigned gw_metrics_workers(const struct gw_metrics **out)
{
    *out = workers;
    return nworkers;
}

/* ---------------------------------------------------------------- the text */

void gw_metrics_put(struct gw_metrics_text *t, const char *fmt, ...)
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

void gw_metrics_family(struct gw_metrics_text *t, const char *name, const char *type, const char *help)
{
    gw_metrics_put(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A label value as the text format wants it: \ " and newline escaped. */
const char *gw_metrics_label(const char *s, char *out, size_t outlen)
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

void gw_metrics_gauge(struct gw_metrics_text *t, const char *name, const char *help, unsigned long long v)
{
    gw_metrics_family(t, name, "gauge", help);
    gw_metrics_put(t, "%s %llu\n", name, v);
}

void gw_metrics_counter(struct gw_metrics_text *t, const char *name, const char *help, unsigned long long v)
{
    gw_metrics_family(t, name, "counter", help);
    gw_metrics_put(t, "%s %llu\n", name, v);
}

/* The gauges other layers register (the shared queue's: apis/judge0/judge0_dispatch.c). */
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

void gw_metrics_collect(struct gw_metrics_text *t)
{
    for (unsigned i = 0; i < ncollectors; i++)
        collectors[i](t);
}
