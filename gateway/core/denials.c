/*
 * denials.c - what unauthenticated and failed requests may cost.
 *
 * Theory of operation
 * -------------------
 * A request refused before anyone authenticated (a bad or missing
 * credential, an unknown route, broken framing) needs no credential to
 * send, and each one used to cost an audit record of ~420 bytes: at the
 * deny path's rate, megabytes a second of disk that anybody could fill,
 * after which every request fails closed.  So such refusals are charged to
 * the client's address (IPv4, or the IPv6 /64: conn.c's address key) in a
 * limiter of their own (GCRA, `unauthenticated: {per_second, burst}`):
 *
 *   within the rate   the refusal is answered and recorded as before;
 *   past it           the answer is 429 `too_many_failed_requests` with
 *                     Retry-After, and no record of its own: it is counted
 *                     in a summary per address and reason, which the worker
 *                     sends as one "denials" record (count, statuses, first
 *                     and last time) every `summary_ms`, or sooner when its
 *                     table fills.
 *
 * Requests that authenticated are never charged here: their refusals are a
 * tenant's, accounted by the tenant's own limiter and recorded one by one.
 * The address limiter is one for the process (exact across workers); its
 * table holds GW_DENIAL_ADDRESSES addresses, and when it is full a new
 * address is treated as over its rate (fail closed, for unauthenticated
 * traffic only).  Summaries are per worker (no locks); at most
 * GW_DENIAL_SUMMARIES (address, reason) pairs wait at once.
 */
#include "denials.h"
#include "conn.h"
#include "request.h"
#include "records/audit_records.h"
#include "http.h"
#include "log.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "moat_hex.h"

static struct rl_limiter *addr_limiter;
static pthread_once_t addr_once = PTHREAD_ONCE_INIT;

static void addr_limiter_init(void)
{
    addr_limiter = rl_memory_new_capped(GW_DENIAL_ADDRESSES);
    if (addr_limiter == NULL)
        log_warnx("%s: out of memory: every unauthenticated refusal counts as over its rate", __func__);
}

/* The address as a record shows it: a.b.c.d, or the IPv6 /64 as prefix/64. */
static void prefix_text(const uint8_t key[16], char *out, size_t outlen)
{
    static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    char a[INET6_ADDRSTRLEN];

    if (memcmp(key, v4mapped, sizeof(v4mapped)) == 0) {
        inet_ntop(AF_INET, key + 12, out, (socklen_t)outlen);
        return;
    }
    inet_ntop(AF_INET6, key, a, sizeof(a));
    snprintf(out, outlen, "%s/64", a);
}

/* ------------------------------------------------------------- summaries */

static void send_summary(struct gw_worker *w, const struct gw_denial_summary *s)
{
    char client[INET6_ADDRSTRLEN + 4], since[21], until[21];
    json_t *b = json_object(), *st = json_object();
    size_t len = 0;
    char *text;

    if (b == NULL || st == NULL) {
        json_decref(b);
        json_decref(st);
        return;
    }
    prefix_text(s->key, client, sizeof(client));
    gw_time_format(s->since, since);
    gw_time_format(s->until, until);
    for (size_t i = 0; i < GW_DENIAL_STATUSES && s->statuses[i].count != 0; i++) {
        char code[8];
        snprintf(code, sizeof(code), "%d", s->statuses[i].status);
        json_object_set_new(st, code, json_integer((json_int_t)s->statuses[i].count));
    }
    json_object_set_new(b, "type", json_string("denials"));
    json_object_set_new(b, "client", json_string(client));
    json_object_set_new(b, "reason", json_string(gw_reason_name(s->reason)));
    json_object_set_new(b, "count", json_integer((json_int_t)s->count));
    json_object_set_new(b, "statuses", st);
    json_object_set_new(b, "since", json_string(since));
    json_object_set_new(b, "until", json_string(until));
    text = gw_audit_dump(b, &len);
    json_decref(b);
    if (text != NULL)
        gw_audit_submit(&w->audit, text, len, NULL, 0, NULL, NULL); /* nobody waits: like the denials it counts */
    free(text);
}

void gw_denials_flush(struct gw_worker *w)
{
    struct gw_denials *d = &w->denials;

    for (size_t i = 0; i < d->n; i++)
        send_summary(w, &d->table[i]);
    d->n = 0;
}

static void on_summary_timer(h2o_timeout_entry_t *entry)
{
    struct gw_worker *w = H2O_STRUCT_FROM_MEMBER(struct gw_worker, denials.timer, entry);

    gw_denials_flush(w);
}

/* Count one refusal into its (address, reason) summary. */
static void count(struct gw_worker *w, const uint8_t key[16], enum gw_reason reason, int status)
{
    struct gw_denials *d = &w->denials;
    struct gw_denial_summary *s = NULL;
    time_t now = time(NULL);

    if (!d->timer_ready) {
        h2o_timeout_init(w->ctx.loop, &d->timeout, w->cfg->unauth_summary_ms);
        d->timer.cb = on_summary_timer;
        d->timer_ready = 1;
    }
    for (size_t i = 0; i < d->n && s == NULL; i++)
        if (d->table[i].reason == reason && memcmp(d->table[i].key, key, 16) == 0)
            s = &d->table[i];
    if (s == NULL) {
        if (d->n == GW_DENIAL_SUMMARIES)
            gw_denials_flush(w); /* full: send what is there, start again */
        s = &d->table[d->n++];
        memset(s, 0, sizeof(*s));
        memcpy(s->key, key, 16);
        s->reason = reason;
        s->since = now;
    }
    s->count++;
    s->until = now;
    for (size_t i = 0; i < GW_DENIAL_STATUSES; i++) {
        if (s->statuses[i].count == 0 || s->statuses[i].status == status) {
            s->statuses[i].status = status;
            s->statuses[i].count++;
            break;
        }
    }
    if (!h2o_timeout_is_linked(&d->timer))
        h2o_timeout_link(w->ctx.loop, &d->timeout, &d->timer);
}

/* ------------------------------------------------------------ the charge */

struct verdict {
    int allowed;
    uint64_t retry_after_ms;
};

static void on_verdict(void *arg, const struct rl_decision *dec)
{
    struct verdict *v = arg;

    v->allowed = dec->allowed;
    v->retry_after_ms = dec->retry_after_ms;
}

int gw_denials_over(struct gw_request *r, int status)
{
    const struct gw_config *cfg = r->cfg;
    const uint8_t *key = r->has_client ? r->client_key : NULL;
    struct rl_params p = {cfg->unauth_per_second, cfg->unauth_burst, RL_UNLIMITED_IN_FLIGHT, RL_UNLIMITED_CPU_MS};
    struct verdict v = {0, RL_RETRY_NEVER};
    char name[3 + 32 + 1] = "ip:";

    if (key == NULL || r->tenant != NULL)
        return 0; /* not ours to charge: authenticated, or not a socket we know */
    pthread_once(&addr_once, addr_limiter_init);
    moat_hex_encode(key, 16, name + 3);
    if (addr_limiter != NULL) /* the in-memory limiter answers before it returns */
        rl_admit_on(addr_limiter, r->worker->ctx.loop, RL_ADMIT_RATE, name, &p, rl_monotonic_ms(), on_verdict, &v);
    if (v.allowed)
        return 0;
    if (r->worker->audit.enabled)
        count(r->worker, key, r->reason, status);
    r->retry_after_ms = v.retry_after_ms;
    return 1;
}

int gw_denials_charge(struct gw_request *r)
{
    if (r->status < 400 || !gw_denials_over(r, 429))
        return 1;
    /* past the address's rate: 429 and a count, no record of its own */
    if (r->retry_after_ms != RL_RETRY_NEVER)
        gw_add_retry_after(r, r->retry_after_ms);
    r->status = 429;
    r->code = gw_code(GW_CODE_TOO_MANY_FAILED_REQUESTS);
    r->message = "too many failed requests from this address; slow down";
    return 0;
}
