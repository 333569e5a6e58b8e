/*
 * ratelimit_redis.c - per-tenant admission control shared by several
 * gateways through Redis (store: redis in the limiter section).
 *
 * Theory of operation
 * -------------------
 * Every decision is one Lua script run by Redis (EVALSHA; EVAL when Redis
 * answers NOSCRIPT, after a restart or SCRIPT FLUSH: redis_client.c), so
 * reading and updating a tenant's state is atomic across all gateways, and
 * the time is Redis' own (redis.call('TIME')): the gateways' clocks do not
 * matter.  The script keeps the in-memory backend's semantics (ratelimit.c,
 * ratelimit.h), in microseconds instead of nanoseconds:
 *
 *   rate      GCRA: T = floor(1e6 / rate) us, tau = (burst - 1) * T, the
 *             TAT in key P t:<tenant>:tat (expires once it is in the past,
 *             when a missing key means the same thing: a full bucket).
 *   in flight leases (below), in hash P t:<tenant>:run.
 *   cpu       ms charged per second of Redis time in hash P t:<tenant>:cpu,
 *             field = the second; a charge counts while now's second is
 *             below its second + 60, exactly as in memory.
 *   answer    {allowed, reason, retry_after_ms (-1: never), remaining,
 *             reset_ms}; limit is the burst, known here.  The 429 path is
 *             the hot one: the in-flight hash is not read when the rate
 *             already refuses for a second or more (the count could then
 *             change neither the reason nor the wait), and a refusal
 *             writes nothing.
 *
 * <tenant> is the tenant name in hex: any byte of a name is safe in a key
 * and two names never share one.  P is the client's key prefix.
 *
 * Leases.  The in-flight count must come back by itself when a gateway
 * dies holding slots (SIGKILL, a lost host), so slots are held by an owner
 * that has to stay alive: the Redis connection the decision went on
 * (redis_client.c: one per worker loop, "<gateway id>.<loop>.<n>", a new
 * owner for each reconnection), whose heartbeat key P o:<owner> has a TTL
 * of lease_ms, renewed by the client every lease_ms / 3 and by every script
 * here that takes or frees one of its slots.  A tenant's run hash maps
 * owner -> slots held; the script counts only owners whose heartbeat key
 * exists and deletes the others.
 * An admit adds one to its owner's field, a release takes one off (never
 * below zero).  So:
 *   - a dead gateway's slots come back lease_ms after its last heartbeat;
 *   - an answer lost on the way back (timeout, connection drop) cannot leak
 *     a slot for ever: the connection is dropped with it, its owner stops
 *     renewing and its slots expire; the reconnection is a new owner;
 *   - the cost: a run admitted before a reconnection is released against
 *     the new owner (clamped at zero), so for the rest of such runs the
 *     shared count may be lower than the truth by at most the runs that
 *     were in flight on the lost connection; and a gateway cut off from
 *     Redis for longer than lease_ms has its slots expire while its runs
 *     go on.  Both err towards admitting, briefly and by a bounded amount;
 *     the other choice (a count that only a restart repairs) is worse.
 * A release differs from memory in one way: the CPU time is charged even
 * when the owner holds no slot (it was used; only the slot was lost).
 *
 * Connections.  Made, set up, timed and remade by redis_client.c, shared
 * with the client's other users (the submissions queue) or, from
 * rl_redis_new, the limiter's own.  A decision takes the connection of the
 * caller's loop (the admit names it); a release or a charge, which does
 * not, the one the thread last took from the client (workers are threads
 * with one loop each).
 *
 * Unreachable Redis.  A decision the client cannot send (the connection is
 * down, between its backoff's attempts) or gets no answer to (timeout_ms,
 * or the connection lost first) is answered at once, by the on_unavailable
 * mode:
 *   fail_closed  RL_BACKEND_ERROR with retry_after_ms = the time to the
 *                next attempt (at least 1 s): the gateway answers 503
 *                limiter_unavailable with Retry-After.
 *   local        an in-memory limiter (one per process, kept across
 *                outages) at each limit divided by `gateways` (floor, at
 *                least 1 for a non-zero limit; unlimited stays unlimited).
 * A release while the connection is down is dropped (its owner's slots
 * expire with the owner), unless the local limiter holds a slot for that
 * tenant: then it is that slot that goes back.  CPU charged while down is
 * lost to Redis (in local mode the local budget counts it).
 *
 * Threads: a decision's call is only touched on its loop's thread; the
 * local limiter is shared (it has its own locks).  rl_destroy must run
 * after the loops have stopped (or on the only loop's thread), and, with a
 * client the caller made, after that client was freed (rl_redis_new_on).
 */
#include "ratelimit_redis.h"
#include "common/gw_limits.h"
#include "log.h"
#include "moat_hex.h"
#include "store/redis_client.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RR_KEY_MAX     (GW_REDIS_MAX_PREFIX + 2 + 2 * RL_MAX_TENANT_NAME + 8)
#define RR_MAX_T_US    1000000000000000.0 /* 1e15 us: slower rates clamp here */
#define RR_MAX_TAU_US  (1ull << 51)       /* Lua numbers stay exact integers */
#define RR_NEVER       (-1)
#define RR_MODE_RATE   0
#define RR_MODE_ADMIT  1
#define RR_MODE_FREE   2 /* release: a slot back, its cpu charged */
#define RR_MODE_CHARGE 3 /* cpu charged only (a queued submission's run) */
#define RR_MODE_QUEUED 4 /* rate and cpu budget, no slot (a queued submission) */
#define RR_SCRIPT_KEYS 4
#define RR_SCRIPT_ARGS 14 /* 4 keys 10 args */

/* KEYS: tat, run, cpu, the caller's heartbeat.  ARGV: mode, owner,
 * lease_ms, heartbeat prefix, T_us, tau_us, burst, max_in_flight,
 * cpu budget (-1: unlimited), cpu_ms (modes 2 and 3).  Mode 0: rate only,
 * 1: admit, 2: release, 3: charge, 4: rate and cpu budget (no slot). */
static const char script[] =
    "if redis.replicate_commands then redis.replicate_commands() end\n"
    "local mode, owner, lease, hb = tonumber(ARGV[1]), ARGV[2], ARGV[3], ARGV[4]\n"
    "local t = redis.call('TIME')\n"
    "local now_s = tonumber(t[1])\n"
    "local now = now_s * 1000000 + tonumber(t[2])\n"
    "local now_ms = math.floor(now / 1000)\n"
    "if mode == 2 or mode == 3 then\n"
    "  if mode == 2 then\n"
    "    redis.call('SET', KEYS[4], '1', 'PX', lease)\n"
    "    local held = tonumber(redis.call('HGET', KEYS[2], owner) or '0')\n"
    "    if held > 1 then redis.call('HINCRBY', KEYS[2], owner, -1)\n"
    "    elseif held == 1 then redis.call('HDEL', KEYS[2], owner) end\n"
    "  end\n"
    "  if tonumber(ARGV[10]) > 0 then\n"
    "    redis.call('HINCRBY', KEYS[3], tostring(now_s), ARGV[10])\n"
    "    redis.call('EXPIRE', KEYS[3], 61)\n"
    "  end\n"
    "  return 0\n"
    "end\n"
    "local T, tau, burst = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])\n"
    "local maxf, budget = tonumber(ARGV[8]), tonumber(ARGV[9])\n"
    "local retry = 0\n"
    "local function later(w)\n"
    "  if retry ~= -1 and (w == -1 or w > retry) then retry = w end\n"
    "end\n"
    "local quota_ok, conc_ok, rate_ok = true, true, true\n"
    "if mode == 1 or mode == 4 then\n"
    "  if budget == 0 then quota_ok = false; later(-1)\n"
    "  elseif budget > 0 then\n"
    "    local h = redis.call('HGETALL', KEYS[3])\n"
    "    local used, live = 0, {}\n"
    "    for i = 1, #h, 2 do\n"
    "      local s, ms = tonumber(h[i]), tonumber(h[i + 1])\n"
    "      if s + 60 > now_s then used = used + ms; live[#live + 1] = {s, ms}\n"
    "      else redis.call('HDEL', KEYS[3], h[i]) end\n"
    "    end\n"
    "    if used >= budget then\n"
    "      quota_ok = false\n"
    "      table.sort(live, function(a, b) return a[1] < b[1] end)\n"
    "      for i = 1, #live do\n"
    "        used = used - live[i][2]\n"
    "        if used < budget then later((live[i][1] + 60) * 1000 - now_ms); break end\n"
    "      end\n"
    "    end\n"
    "  end\n"
    "end\n"
    "local tat = tonumber(redis.call('GET', KEYS[1]) or '0')\n"
    "if T == 0 then rate_ok = false; later(-1)\n"
    "elseif math.max(tat, now) - now > tau then rate_ok = false; later(math.ceil((math.max(tat, now) - now - tau) / 1000)) end\n"
    "if mode == 1 and (rate_ok or maxf == 0 or (retry ~= -1 and retry < 1000)) then\n"
    "  local h = redis.call('HGETALL', KEYS[2])\n"
    "  local n = 0\n"
    "  for i = 1, #h, 2 do\n"
    "    if h[i] == owner or redis.call('EXISTS', hb .. h[i]) == 1 then n = n + tonumber(h[i + 1])\n"
    "    else redis.call('HDEL', KEYS[2], h[i]) end\n"
    "  end\n"
    "  if n >= maxf then conc_ok = false; if maxf == 0 then later(-1) else later(1000) end end\n"
    "end\n"
    "if quota_ok and conc_ok and rate_ok then tat = math.max(tat, now) + T end\n"
    "local reason = 0\n"
    "if quota_ok and conc_ok and rate_ok then\n"
    "  redis.call('SET', KEYS[1], string.format('%.0f', tat), 'PX', string.format('%.0f', math.ceil((tat - now) / 1000) + 1000))\n"
    "  if mode == 1 then\n"
    "    redis.call('HINCRBY', KEYS[2], owner, 1)\n"
    "    redis.call('SET', KEYS[4], '1', 'PX', lease)\n"
    "  end\n"
    "  retry = 0\n"
    "elseif not quota_ok then reason = 3\n"
    "elseif not rate_ok then reason = 1\n"
    "else reason = 2 end\n"
    "local remaining, reset = 0, 0\n"
    "if T > 0 then\n"
    "  local ahead = math.max(tat - now, 0)\n"
    "  if ahead < tau + T then remaining = math.min(math.floor((tau + T - ahead) / T), burst) end\n"
    "  reset = math.ceil(ahead / 1000)\n"
    "end\n"
    "return {reason == 0 and 1 or 0, reason, retry, remaining, reset}\n";

struct rr {
    struct redis_client *rc;
    int own_rc; /* rl_redis_new made rc: destroy frees it */
    unsigned gateways;
    enum rl_redis_unavailable on_unavailable;
    struct redis_script script; /* registered with rc */
    char hb_prefix[GW_REDIS_MAX_PREFIX + 3];
    char lease[24];
    struct rl_limiter *local; /* on_unavailable: local */
};

/* One decision's wait for its answer (a release or a charge waits for none). */
struct rcall {
    struct rr *r;
    struct redis_conn *c;
    rl_cb cb;
    void *arg;
    struct rl_params p;
    int mode;
    char tenant[RL_MAX_TENANT_NAME + 1];
};

/* ------------------------------------------------------------ answers */

static uint64_t min_u64(uint64_t a, uint64_t b)
{
    return a < b ? a : b;
}

static uint32_t share_u32(uint32_t v, unsigned n)
{
    return v == 0 ? 0 : v / n > 0 ? v / n : 1;
}

static uint64_t share_u64(uint64_t v, unsigned n)
{
    return v == 0 ? 0 : v / n > 0 ? v / n : 1;
}

/* This gateway's part of each limit, for the local fallback. */
static struct rl_params local_share(const struct rl_params *p, unsigned n)
{
    struct rl_params q = *p;

    q.rate_per_second = p->rate_per_second / n;
    q.burst = share_u32(p->burst, n);
    if (p->max_in_flight != RL_UNLIMITED_IN_FLIGHT)
        q.max_in_flight = share_u32(p->max_in_flight, n);
    if (p->cpu_ms_per_minute != RL_UNLIMITED_CPU_MS)
        q.cpu_ms_per_minute = share_u64(p->cpu_ms_per_minute, n);
    return q;
}

/* Redis cannot decide now (c: the connection that failed, or NULL): the
 * local limiter's answer, or RL_BACKEND_ERROR. */
static void answer_unavailable(struct rr *r, const struct redis_conn *c, int mode, const char *tenant, const struct rl_params *p,
                               rl_cb cb, void *arg)
{
    struct rl_decision d;
    struct rl_params q;
    uint64_t now = rl_monotonic_ms();

    if (cb == NULL)
        return;
    if (r->on_unavailable == RL_REDIS_LOCAL) {
        q = local_share(p, r->gateways);
        if (mode == RR_MODE_ADMIT)
            rl_admit(r->local, tenant, &q, now, cb, arg);
        else if (mode == RR_MODE_QUEUED)
            (void)rl_admit_on(r->local, NULL, RL_ADMIT_QUEUED, tenant, &q, now, cb, arg); /* answers at once */
        else
            rl_admit_rate_only(r->local, tenant, &q, now, cb, arg);
        return;
    }
    memset(&d, 0, sizeof(d));
    d.reason = RL_BACKEND_ERROR;
    d.limit = p->burst;
    d.retry_after_ms = redis_conn_retry_after_ms(c);
    cb(arg, &d);
}

/* The script's answer, checked field by field: 0, or -1 for anything else. */
static int decode_answer(const redisReply *rep, uint32_t burst, struct rl_decision *d)
{
    long long v[5];

    if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 5)
        return -1;
    for (size_t i = 0; i < 5; i++) {
        if (rep->element[i]->type != REDIS_REPLY_INTEGER)
            return -1;
        v[i] = rep->element[i]->integer;
    }
    if ((v[0] != 0 && v[0] != 1) || v[1] < RL_OK || v[1] > RL_QUOTA || (v[0] == 1) != (v[1] == RL_OK) || v[2] < RR_NEVER ||
        v[3] < 0 || v[3] > burst || v[4] < 0)
        return -1;
    memset(d, 0, sizeof(*d));
    d->allowed = (int)v[0];
    d->reason = (enum rl_reason)v[1];
    d->retry_after_ms = v[2] == RR_NEVER ? RL_RETRY_NEVER : (uint64_t)v[2];
    d->limit = burst;
    d->remaining = (uint32_t)v[3];
    d->reset_ms = (uint64_t)v[4];
    return 0;
}

/* A decision's answer (rep NULL: none came; see redis_reply_fn). */
static void on_reply(void *arg, const redisReply *rep)
{
    struct rcall *k = arg;
    struct rl_decision d;

    if (rep != NULL && decode_answer(rep, k->p.burst, &d) == 0) {
        k->cb(k->arg, &d);
    } else {
        if (rep != NULL) {
            log_warnx("%s: Redis answered the limiter's script with %s%.*s", __func__,
                      rep->type == REDIS_REPLY_ERROR ? "an error: " : "something else",
                      rep->type == REDIS_REPLY_ERROR ? (int)min_u64(rep->len, 200) : 0,
                      rep->type == REDIS_REPLY_ERROR ? rep->str : "");
        }
        answer_unavailable(k->r, k->c, k->mode, k->tenant, &k->p, k->cb, k->arg);
    }
    free(k);
}

/* ------------------------------------------------------------ the script */

/* GCRA in whole microseconds; 0 for a rate that passes nothing. */
static void gcra_us(const struct rl_params *p, unsigned long long *T, unsigned long long *tau)
{
    double t;

    *T = 0;
    *tau = 0;
    if (!(p->rate_per_second > 0.0) || p->burst == 0)
        return;
    t = 1e6 / p->rate_per_second;
    *T = !(t >= 1.0) ? 1 : t >= RR_MAX_T_US ? (unsigned long long)RR_MAX_T_US : (unsigned long long)t;
    *tau = (p->burst - 1ull) <= RR_MAX_TAU_US / *T ? (p->burst - 1ull) * *T : RR_MAX_TAU_US;
}

static int tenant_ok(const char *tenant)
{
    size_t len = tenant != NULL ? strnlen(tenant, RL_MAX_TENANT_NAME + 1) : 0;

    return len > 0 && len <= RL_MAX_TENANT_NAME;
}

/* Run the script in mode for tenant on c (p NULL: a release or a charge);
 * k waits for the answer, or NULL: nobody does.  0: sent, k is on_reply's;
 * -1: not sent (c NULL or down, out of memory). */
static int send_script(struct rr *r, struct redis_conn *c, int mode, const char *tenant, const struct rl_params *p, uint64_t cpu_ms,
                       struct rcall *k)
{
    static const struct rl_params none = {0, 0, 0, 0};
    const char *prefix = redis_client_prefix(r->rc);
    char hex[2 * RL_MAX_TENANT_NAME + 1], tat[RR_KEY_MAX], run[RR_KEY_MAX], cpu[RR_KEY_MAX];
    char md[4], T[24], tau[24], burst[16], maxf[16], budget[24], cpu_s[24];
    unsigned long long t_us, tau_us;

    if (c == NULL)
        return -1;
    if (p == NULL)
        p = &none;
    moat_hex_encode(tenant, strlen(tenant), hex);
    snprintf(tat, sizeof(tat), "%st:%s:tat", prefix, hex);
    snprintf(run, sizeof(run), "%st:%s:run", prefix, hex);
    snprintf(cpu, sizeof(cpu), "%st:%s:cpu", prefix, hex);
    snprintf(md, sizeof(md), "%d", mode);
    gcra_us(p, &t_us, &tau_us);
    snprintf(T, sizeof(T), "%llu", t_us);
    snprintf(tau, sizeof(tau), "%llu", tau_us);
    snprintf(burst, sizeof(burst), "%u", (unsigned)p->burst);
    snprintf(maxf, sizeof(maxf), "%u", (unsigned)p->max_in_flight);
    if (p->cpu_ms_per_minute == RL_UNLIMITED_CPU_MS)
        snprintf(budget, sizeof(budget), "-1");
    else
        snprintf(budget, sizeof(budget), "%llu", (unsigned long long)min_u64(p->cpu_ms_per_minute, 1ull << 52));
    snprintf(cpu_s, sizeof(cpu_s), "%llu", (unsigned long long)min_u64(cpu_ms, 1ull << 52));
    const char *const args[RR_SCRIPT_ARGS] = {
        tat,      run,
        cpu,      redis_conn_heartbeat(c), /* KEYS */
        md,       redis_conn_owner(c),
        r->lease, r->hb_prefix,
        T,        tau,
        burst,    maxf,
        budget,   cpu_s, /* ARGV */
    };
    return redis_conn_eval(c, &r->script, RR_SCRIPT_KEYS, RR_SCRIPT_ARGS, args, NULL, k != NULL ? on_reply : NULL, k);
}

/* ------------------------------------------------------------ the ops */

/* A decision for tenant on c; answered now when Redis cannot be asked. */
static void run_decision(struct rr *r, struct redis_conn *c, int mode, const char *tenant, const struct rl_params *p, rl_cb cb,
                         void *arg)
{
    struct rcall *k;

    if (!tenant_ok(tenant) || p == NULL) {
        struct rl_decision d = {0, RL_BACKEND_ERROR, RL_RETRY_NEVER, p != NULL ? p->burst : 0, 0, 0};
        cb(arg, &d);
        return;
    }
    if ((k = calloc(1, sizeof(*k))) == NULL) {
        answer_unavailable(r, c, mode, tenant, p, cb, arg);
        return;
    }
    k->r = r;
    k->c = c;
    k->cb = cb;
    k->arg = arg;
    k->p = *p;
    k->mode = mode;
    memcpy(k->tenant, tenant, strlen(tenant));
    if (send_script(r, c, mode, tenant, p, 0, k) != 0) {
        free(k);
        answer_unavailable(r, c, mode, tenant, p, cb, arg);
    }
}

/* A decision on the caller's loop's connection (Redis' clock decides, not now_ms). */
static void redis_decide(struct rl_limiter *l, struct st_h2o_evloop_t *loop, int mode, const char *tenant,
                         const struct rl_params *p, rl_cb cb, void *arg)
{
    struct rr *r = rl_impl(l);

    if (cb != NULL)
        run_decision(r, loop != NULL ? redis_client_conn(r->rc, loop) : NULL, mode, tenant, p, cb, arg);
}

static void redis_admit(struct rl_limiter *l, struct st_h2o_evloop_t *loop, const char *tenant, const struct rl_params *p,
                        uint64_t now_ms, rl_cb cb, void *arg)
{
    (void)now_ms;
    redis_decide(l, loop, RR_MODE_ADMIT, tenant, p, cb, arg);
}

static void redis_admit_rate(struct rl_limiter *l, struct st_h2o_evloop_t *loop, const char *tenant, const struct rl_params *p,
                             uint64_t now_ms, rl_cb cb, void *arg)
{
    (void)now_ms;
    redis_decide(l, loop, RR_MODE_RATE, tenant, p, cb, arg);
}

static void redis_admit_queued(struct rl_limiter *l, struct st_h2o_evloop_t *loop, const char *tenant, const struct rl_params *p,
                               uint64_t now_ms, rl_cb cb, void *arg)
{
    (void)now_ms;
    redis_decide(l, loop, RR_MODE_QUEUED, tenant, p, cb, arg);
}

static void redis_release(struct rl_limiter *l, const char *tenant, uint64_t cpu_ms, uint64_t now_ms)
{
    struct rr *r = rl_impl(l);

    /* a slot the local fallback gave goes back there */
    if (r->local != NULL && rl_memory_release_held(r->local, tenant, cpu_ms, now_ms))
        return;
    if (tenant_ok(tenant))
        (void)send_script(r, redis_client_thread_conn(r->rc), RR_MODE_FREE, tenant, NULL, cpu_ms, NULL); /* down: dropped */
}

/* A run that held no slot (a queued Judge0 submission's) charges its CPU time. */
static void redis_charge(struct rl_limiter *l, const char *tenant, uint64_t cpu_ms, uint64_t now_ms)
{
    struct rr *r = rl_impl(l);

    if (cpu_ms == 0)
        return;
    if (tenant_ok(tenant) && send_script(r, redis_client_thread_conn(r->rc), RR_MODE_CHARGE, tenant, NULL, cpu_ms, NULL) == 0)
        return;
    if (r->local != NULL)
        rl_charge(r->local, tenant, cpu_ms, now_ms); /* Redis is away: the local share's budget */
}

static void rr_free(struct rr *r)
{
    rl_destroy(r->local);
    free(r);
}

static void redis_destroy(struct rl_limiter *l)
{
    struct rr *r = rl_impl(l);

    if (r->own_rc)
        redis_client_free(r->rc); /* its pending decisions are answered now: r->local still stands */
    rr_free(r);
}

/* Down while any of the client's connections has failed since it last
 * answered (each worker's connection is made on its first decision). */
static enum rl_store_state redis_state(struct rl_limiter *l)
{
    struct rr *r = rl_impl(l);

    if (!redis_client_lost(r->rc))
        return RL_STORE_UP;
    return r->on_unavailable == RL_REDIS_LOCAL ? RL_STORE_FALLBACK : RL_STORE_DOWN;
}

static const struct rl_ops redis_ops = {
    .admit = redis_admit,
    .admit_rate = redis_admit_rate,
    .admit_queued = redis_admit_queued,
    .release = redis_release,
    .charge = redis_charge,
    .destroy = redis_destroy,
    .deferred = 1,
    .state = redis_state,
};

/* ------------------------------------------------------------ creation */

/* The limiter on rc (own: destroy frees rc); its script registered last,
 * once nothing can fail. */
static struct rl_limiter *limiter_on(struct redis_client *rc, int own, const struct rl_redis_options *o, char *err, size_t errlen)
{
    struct rl_limiter *l = NULL;
    struct rr *r;

    if (rc == NULL || o->gateways == 0) {
        snprintf(err, errlen, "%s", rc == NULL ? "no Redis client" : "gateways must be at least 1");
        return NULL;
    }
    if ((r = calloc(1, sizeof(*r))) == NULL || (o->on_unavailable == RL_REDIS_LOCAL && (r->local = rl_memory_new()) == NULL) ||
        (l = rl_new(&redis_ops, r)) == NULL) {
        if (r != NULL)
            rr_free(r);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    r->rc = rc;
    r->own_rc = own;
    r->gateways = o->gateways;
    r->on_unavailable = o->on_unavailable;
    snprintf(r->hb_prefix, sizeof(r->hb_prefix), "%so:", redis_client_prefix(rc));
    snprintf(r->lease, sizeof(r->lease), "%llu", (unsigned long long)redis_client_lease_ms(rc));
    r->script.body = script;
    redis_client_add_script(rc, &r->script);
    return l;
}

struct rl_limiter *rl_redis_new_on(struct redis_client *rc, const struct rl_redis_options *o, char *err, size_t errlen)
{
    return limiter_on(rc, 0, o, err, errlen);
}

struct rl_limiter *rl_redis_new(const struct rl_redis_options *o, char *err, size_t errlen)
{
    struct redis_client *rc = redis_client_new(&o->redis, err, errlen);
    struct rl_limiter *l;

    if (rc == NULL)
        return NULL;
    if ((l = limiter_on(rc, 1, o, err, errlen)) == NULL)
        redis_client_free(rc);
    return l;
}
