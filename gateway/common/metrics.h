/*
 * metrics.h - the gateway's counters and the text their gauges are written
 * in (see metrics.c for the theory of operation; the /metrics listener and
 * its exposition are observe/'s).
 *
 * Every worker thread counts into its own struct gw_metrics (no lock, no
 * atomic read-modify-write on the request path: each counter has one
 * writer); a scrape sums them.  Code on a worker's thread reaches its
 * worker's counters with gw_metrics_here(); on any other thread that is a
 * scratch struct nobody reports.
 */
#ifndef GW_METRICS_H
#define GW_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "gw_limits.h"
#include "moat_buf.h"

/* Request counters: one entry per (tenant, route, status) a worker saw. */
#define GW_METRICS_TABLE 1024 /* entries per worker (a power of two) */
/* Route rows that get labels of their own (more go to route="other"). */
#define GW_METRICS_ROUTES 48
/* Latency buckets, seconds (the last is +Inf). */
#define GW_METRICS_BUCKETS 15

enum gw_metrics_tls { GW_TLS_FAIL_ERROR, GW_TLS_FAIL_TIMEOUT, GW_TLS_FAIL_N };
enum gw_metrics_goaway { GW_GOAWAY_RESET_BUDGET, GW_GOAWAY_TIMEOUT, GW_GOAWAY_HEADER_BLOCK, GW_GOAWAY_N };

struct gw_metrics_count {
    uint32_t used;  /* published last (release): the key is complete */
    uint16_t route; /* 0: other; i + 1: row i of the route table */
    uint16_t status;
    uint64_t n;
    char tenant[GW_MAX_TENANT_NAME + 1]; /* "" when nobody authenticated */
};

struct gw_metrics {
    struct gw_metrics_count *table; /* GW_METRICS_TABLE entries */
    uint64_t table_full;            /* requests counted without labels: the table was full */
    uint64_t hist[GW_METRICS_ROUTES + 1][GW_METRICS_BUCKETS];
    uint64_t hist_sum_us[GW_METRICS_ROUTES + 1];
    uint64_t tls_failed[GW_TLS_FAIL_N];
    uint64_t goaway[GW_GOAWAY_N];
    uint64_t aborted;           /* connections reset by the watchdog (a response not taken) */
    uint64_t backend_in_flight; /* backend calls waiting for their answer (a gauge) */
    uint64_t backend_busy;      /* the backend answered busy: every slot taken */
    uint64_t audit_failed;      /* records (and queries) the audit writer did not acknowledge as durable */
} __attribute__((aligned(64)));

/* One set of counters per worker; at start, before the workers (0 or -1). */
int gw_metrics_init(unsigned nworkers);

/* The calling thread is worker index: gw_metrics_here() is its counters. */
void gw_metrics_attach(unsigned index);

/* This thread's counters (a scratch set off the workers' threads). */
struct gw_metrics *gw_metrics_here(void);

/* One more on a counter this thread owns (no lock: one writer each). */
static inline void gw_metric_add(uint64_t *c, int64_t d)
{
    __atomic_store_n(c, __atomic_load_n(c, __ATOMIC_RELAXED) + (uint64_t)d, __ATOMIC_RELAXED);
}

/* The request is answered: count it by tenant ("" for nobody), route row
 * (0: other; i + 1: row i of the route table; beyond GW_METRICS_ROUTES:
 * other) and status, and its duration.  (core/http.c's gw_metrics_request
 * for a request.) */
void gw_metrics_count(const char *tenant, unsigned route, int status, uint64_t us);

/* The workers' counters (*out, as many as returned), for the exposition. */
unsigned gw_metrics_workers(const struct gw_metrics **out);
/* The key hash of the workers' tables, for merging them. */
uint32_t gw_metrics_key_hash(const char *tenant, size_t tlen, unsigned route, unsigned status);
/* The histogram's bucket bounds as the text format writes them ("+Inf" last). */
extern const char *const gw_metrics_bucket_le[GW_METRICS_BUCKETS];

/* The text format 0.0.4 being written (b grows; failed: out of memory,
 * the text is dropped). */
struct gw_metrics_text {
    struct moat_buf b;
    int failed;
};
__attribute__((format(printf, 2, 3))) void gw_metrics_put(struct gw_metrics_text *t, const char *fmt, ...);
/* # HELP and # TYPE of one family. */
void gw_metrics_family(struct gw_metrics_text *t, const char *name, const char *type, const char *help);
/* A label value as the text format wants it (\ " and newline escaped) in out. */
const char *gw_metrics_label(const char *s, char *out, size_t outlen);
/* One family of one unlabelled sample. */
void gw_metrics_gauge(struct gw_metrics_text *t, const char *name, const char *help, unsigned long long v);
void gw_metrics_counter(struct gw_metrics_text *t, const char *name, const char *help, unsigned long long v);

/* Gauges of a layer above the counters, rendered at each scrape: fn
 * writes them with gw_metrics_gauge and gw_metrics_counter.  At most
 * GW_METRICS_MAX_COLLECTORS, registered before the workers start.  0, or
 * -1 when full. */
#define GW_METRICS_MAX_COLLECTORS 4
typedef void (*gw_metrics_collector)(struct gw_metrics_text *t);
int gw_metrics_add_collector(gw_metrics_collector fn);
/* Run the registered collectors into t (the exposition's). */
void gw_metrics_collect(struct gw_metrics_text *t);

#endif /* GW_METRICS_H */
