/*
 * denials.h - the per-address rate for unauthenticated and failed requests,
 * and the summary records that count what went past it (denials.c).
 */
#ifndef GW_DENIALS_H
#define GW_DENIALS_H

#include <stdint.h>
#include <time.h>

#ifndef H2O_USE_LIBUV
#define H2O_USE_LIBUV 0
#endif
#include <h2o.h>

#include "records/audit_reason.h"

#define GW_DENIAL_ADDRESSES 65536 /* addresses the process tracks; past it, new ones are over their rate */
#define GW_DENIAL_SUMMARIES 256   /* (address, reason) summaries a worker holds before it sends them */
#define GW_DENIAL_STATUSES  4     /* distinct statuses one summary counts */

struct gw_request;
struct gw_worker;

struct gw_denial_summary {
    uint8_t key[16]; /* conn.c's address key: IPv4 mapped, or the IPv6 /64 */
    enum gw_reason reason;
    uint64_t count;
    time_t since, until;
    struct {
        int status;
        uint64_t count;
    } statuses[GW_DENIAL_STATUSES];
};

/* A worker's summaries not yet sent (worker thread only). */
struct gw_denials {
    h2o_timeout_t timeout; /* unauthenticated.summary_ms */
    h2o_timeout_entry_t timer;
    int timer_ready;
    size_t n;
    struct gw_denial_summary table[GW_DENIAL_SUMMARIES];
};

/*
 * Charge a refused, unauthenticated request (r->status >= 400, r->tenant
 * NULL) to its address.  1: within the rate, record it as usual.  0: past
 * it; r now answers 429 too_many_failed_requests (with Retry-After) and is
 * counted in a summary record instead of its own.  Requests that
 * authenticated are never charged (1).
 */
int gw_denials_charge(struct gw_request *r);

/*
 * The charge alone, for a refusal already answered with `status` (what h2o
 * answers itself, fallback.c): 1 when it is past its address's rate
 * (counted in a summary, r->retry_after_ms set), else 0.  r is not changed
 * otherwise.
 */
int gw_denials_over(struct gw_request *r, int status);

/* Send the worker's summaries now (its timer, a full table, shutdown). */
void gw_denials_flush(struct gw_worker *w);

#endif /* GW_DENIALS_H */
