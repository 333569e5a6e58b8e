/*
 * ratelimit_redis.c - per-tenant admission control shared by several
 * gateways through Redis (store: redis in the limiter section).
 *
 * Theory of operation
 * -------------------
 * Every decision is one Lua script run by Redis (EVALSHA; EVAL when Redis
 * answers NOSCRIPT, after a restart or SCRIPT FLUSH), so reading and
 * updating a tenant's state is atomic across all gateways, and the time is
 * Redis' own (redis.call('TIME')): the gateways' clocks do not matter.
 * The script keeps the in-memory backend's semantics (ratelimit.c,
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
 * and two names never share one.  P is the configured prefix.
 *
 * Leases.  The in-flight count must come back by itself when a gateway
 * dies holding slots (SIGKILL, a lost host), so slots are held by an owner
 * that has to stay alive: each connection (one per worker loop; a new
 * owner for each reconnection) has a name, "<gateway id>.<loop>.<n>", a
 * random gateway id per process, and a heartbeat key P o:<owner> with a
 * TTL of lease_ms, set by every script that takes or frees one of its
 * slots and by a heartbeat every lease_ms / 3.  A tenant's run hash maps
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
 * Connections.  One redisAsyncContext per worker loop (redis_h2o.c), made
 * on the loop's first decision, on its own thread.  A decision takes the
 * thread's connection (the admit names the loop; a release, which does not,
 * uses the connection the thread last admitted on: workers are threads with
 * one loop each).  While connecting, commands queue in hiredis and count
 * against their own timeout.
 *
 * Unreachable Redis.  Each command has a timer of timeout_ms; a connect, of
 * connect_timeout_ms.  A timeout or a lost connection drops the connection:
 * hiredis answers every pending command with no reply, and each of those
 * decisions is answered as "unavailable"; the worker's tick (every
 * GW_REDIS_TICK_MS) reconnects after a backoff doubling from
 * GW_REDIS_BACKOFF_MIN_MS to GW_REDIS_BACKOFF_MAX_MS.  Until then a
 * decision is answered at once, by the on_unavailable mode:
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
 * Threads: a connection and its calls are only touched on their loop's
 * thread; the list of connections and the local limiter are shared (a
 * mutex; the memory limiter has its own locks).  rl_destroy must run after
 * the loops have stopped (or on the only loop's thread).
 */
#include "ratelimit_redis.h"
#include "gw_limits.h"
#include "log.h"
#include "moat_hex.h"
#include "redis_h2o.h"

#include <math.h>
#include <stdint.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define RR_OWNER_MAX   64
#define RR_KEY_MAX     (GW_REDIS_MAX_PREFIX + 2 + 2 * RL_MAX_TENANT_NAME + 8)
#define RR_MAX_T_US    1000000000000000.0 /* 1e15 us: slower rates clamp here */
#define RR_MAX_TAU_US  (1ull << 51)       /* Lua numbers stay exact integers */
#define RR_NEVER       (-1)
#define RR_MODE_RATE   0
#define RR_MODE_ADMIT  1
#define RR_MODE_FREE   2  /* release: a slot back, its cpu charged */
#define RR_MODE_CHARGE 3  /* cpu charged only (a queued submission's run) */
#define RR_MODE_QUEUED 4  /* rate and cpu budget, no slot (a queued submission) */
#define RR_SCRIPT_ARGC 17 /* EVALSHA sha numkeys 4 keys 10 args */

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

struct rr;

/* One worker loop's connection. */
struct rconn {
    struct rr *r;
    struct rconn *next;
    h2o_loop_t *loop;
    unsigned index;        /* which connection of this process: part of the owner's name */
    unsigned gen;          /* connections made so far: the other part */
    redisAsyncContext *ac; /* NULL: down */
    int up;                /* the connect completed */
    int lost;              /* has been down since the last success (log the recovery); written
                            * with __atomic_store_n: redis_state reads it from a scrape */
    char owner[RR_OWNER_MAX];
    char heartbeat[RR_KEY_MAX];
    uint64_t next_attempt, backoff_ms, connect_deadline, next_heartbeat;
    h2o_timeout_t cmd_timeout;
    h2o_timeout_t tick_timeout;
    h2o_timeout_entry_t tick;
};

/* One command's wait for its answer. */
struct rcall {
    struct rconn *c;
    h2o_timeout_entry_t timer;
    rl_cb cb; /* NULL for a release */
    void *arg;
    struct rl_params p;
    uint64_t cpu_ms;
    int mode;
    int evaled; /* sent again with EVAL after NOSCRIPT */
    char tenant[RL_MAX_TENANT_NAME + 1];
};

struct rr {
    char *socket_path, *host, *password, *prefix;
    unsigned port, db, gateways;
    uint64_t connect_timeout_ms, timeout_ms, lease_ms;
    enum rl_redis_unavailable on_unavailable;
    char gateway_id[17];
    char sha[2 * SHA_DIGEST_LENGTH + 1];
    struct rl_limiter *local; /* on_unavailable: local */
    pthread_mutex_t mu;       /* conns, nconns */
    struct rconn *conns;
    unsigned nconns;
};

/* The connection this thread last used, and whose limiter it belongs to. */
static __thread struct rconn *tls_conn;
static __thread const struct rr *tls_owner;

static void on_reply(redisAsyncContext *ac, void *reply, void *arg);

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

/* Redis cannot decide now: the local limiter's answer, or RL_BACKEND_ERROR. */
static void answer_unavailable(struct rr *r, struct rconn *c, int mode, const char *tenant, const struct rl_params *p, rl_cb cb,
                               void *arg)
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
    d.retry_after_ms = 1000;
    if (c != NULL && c->ac == NULL && c->next_attempt > now)
        d.retry_after_ms = c->next_attempt - now > 1000 ? c->next_attempt - now : 1000;
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

/* ------------------------------------------------------------ connections */

static void schedule_retry(struct rconn *c)
{
    c->next_attempt = rl_monotonic_ms() + c->backoff_ms;
    c->backoff_ms = min_u64(c->backoff_ms * 2, GW_REDIS_BACKOFF_MAX_MS);
}

static const char *redis_name(const struct rr *r, char *buf, size_t len)
{
    if (r->socket_path != NULL)
        return r->socket_path;
    snprintf(buf, len, "%s port %u", r->host, r->port);
    return buf;
}

/* Give up on the connection: every pending command is answered (no reply),
 * and the tick reconnects later. */
static void conn_drop(struct rconn *c, const char *why)
{
    redisAsyncContext *ac = c->ac;
    char name[96];

    if (ac == NULL)
        return;
    c->ac = NULL;
    c->up = 0;
    if (!c->lost)
        log_warnx("%s: Redis at %s: %s; decisions %s until it answers again", __func__, redis_name(c->r, name, sizeof(name)), why,
                  c->r->on_unavailable == RL_REDIS_LOCAL ? "made locally" : "refused (fail closed)");
    __atomic_store_n(&c->lost, 1, __ATOMIC_RELAXED);
    schedule_retry(c);
    redisAsyncFree(ac); /* deferred by hiredis when called from one of its callbacks */
}

static void on_connect(const redisAsyncContext *ac, int status)
{
    struct rconn *c = ac->data;
    char name[96];

    if (c == NULL || c->ac != ac)
        return;
    if (status != REDIS_OK) {
        /* hiredis frees ac after this returns (and answers what was queued) */
        c->ac = NULL;
        c->up = 0;
        if (!c->lost)
            log_warnx("%s: Redis at %s: %s", __func__, redis_name(c->r, name, sizeof(name)), ac->errstr);
        __atomic_store_n(&c->lost, 1, __ATOMIC_RELAXED);
        schedule_retry(c);
        return;
    }
    c->up = 1; /* the backoff resets when the setup is through (on_setup_reply) */
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    struct rconn *c = ac->data;

    (void)status;
    if (c == NULL || c->ac != ac)
        return;   /* we dropped it ourselves */
    c->ac = NULL; /* hiredis frees it */
    c->up = 0;
    if (!c->lost)
        log_warnx("%s: the connection to Redis was lost: %s", __func__, ac->errstr != NULL && ac->err ? ac->errstr : "closed");
    __atomic_store_n(&c->lost, 1, __ATOMIC_RELAXED);
    schedule_retry(c);
}

enum setup_step { SETUP_AUTH, SETUP_SELECT, SETUP_SCRIPT };
static const char *const setup_names[] = {"AUTH", "SELECT", "SCRIPT LOAD"};

/* AUTH, SELECT and SCRIPT LOAD: an error means this connection is no use. */
static void on_setup_reply(redisAsyncContext *ac, void *reply, void *step)
{
    struct rconn *c = ac->data;
    const redisReply *rep = reply;
    char why[256];

    if (rep == NULL || c == NULL || c->ac != ac)
        return;
    if (rep->type != REDIS_REPLY_ERROR) {
        if ((uintptr_t)step == SETUP_SCRIPT) { /* the last step: this connection works */
            c->backoff_ms = GW_REDIS_BACKOFF_MIN_MS;
            if (c->lost)
                log_info("%s: Redis at %s answers again", __func__, redis_name(c->r, why, sizeof(why)));
            __atomic_store_n(&c->lost, 0, __ATOMIC_RELAXED);
        }
        return;
    }
    snprintf(why, sizeof(why), "%s refused: %.*s", setup_names[(uintptr_t)step], (int)min_u64(rep->len, 160), rep->str);
    conn_drop(c, why);
}

static void setup_command(struct rconn *c, enum setup_step step, int argc, const char **argv)
{
    (void)redisAsyncCommandArgv(c->ac, on_setup_reply, (void *)(uintptr_t)step, argc, argv, NULL);
}

/* Start a connection; queue AUTH, SELECT and SCRIPT LOAD on it. */
static void conn_start(struct rconn *c)
{
    struct rr *r = c->r;
    redisAsyncContext *ac =
        r->socket_path != NULL ? redisAsyncConnectUnix(r->socket_path) : redisAsyncConnect(r->host, (int)r->port);
    char db[16];

    if (ac == NULL || ac->err || redis_h2o_attach(ac, c->loop) != REDIS_OK) {
        char name[96];
        if (!c->lost)
            log_warnx("%s: Redis at %s: %s", __func__, redis_name(r, name, sizeof(name)),
                      ac != NULL && ac->err ? ac->errstr : "out of memory");
        __atomic_store_n(&c->lost, 1, __ATOMIC_RELAXED);
        if (ac != NULL)
            redisAsyncFree(ac);
        schedule_retry(c);
        return;
    }
    ac->data = c;
    c->ac = ac;
    c->up = 0;
    c->gen++;
    snprintf(c->owner, sizeof(c->owner), "%s.%u.%u", r->gateway_id, c->index, c->gen);
    snprintf(c->heartbeat, sizeof(c->heartbeat), "%so:%s", r->prefix, c->owner);
    c->connect_deadline = rl_monotonic_ms() + r->connect_timeout_ms;
    c->next_heartbeat = 0;
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    if (r->password != NULL)
        setup_command(c, SETUP_AUTH, 2, (const char *[]){"AUTH", r->password});
    if (r->db != 0) {
        snprintf(db, sizeof(db), "%u", r->db);
        setup_command(c, SETUP_SELECT, 2, (const char *[]){"SELECT", db});
    }
    setup_command(c, SETUP_SCRIPT, 3, (const char *[]){"SCRIPT", "LOAD", script});
}

static void send_heartbeat(struct rconn *c)
{
    char px[24];

    snprintf(px, sizeof(px), "%llu", (unsigned long long)c->r->lease_ms);
    (void)redisAsyncCommandArgv(c->ac, NULL, NULL, 5, (const char *[]){"SET", c->heartbeat, "1", "PX", px}, NULL);
}

/* Every GW_REDIS_TICK_MS: reconnect when due, give up a slow connect, renew the heartbeat. */
static void on_tick(h2o_timeout_entry_t *entry)
{
    struct rconn *c = H2O_STRUCT_FROM_MEMBER(struct rconn, tick, entry);
    uint64_t now = rl_monotonic_ms();

    if (c->ac == NULL && now >= c->next_attempt)
        conn_start(c);
    else if (c->ac != NULL && !c->up && now >= c->connect_deadline)
        conn_drop(c, "connect timed out");
    else if (c->ac != NULL && c->up && now >= c->next_heartbeat) {
        send_heartbeat(c);
        c->next_heartbeat = now + c->r->lease_ms / 3;
    }
    h2o_timeout_link(c->loop, &c->tick_timeout, &c->tick);
}

/* The connection for loop, made (and started) on first use. */
static struct rconn *conn_for(struct rr *r, h2o_loop_t *loop)
{
    struct rconn *c;

    if (tls_owner == r && tls_conn != NULL && tls_conn->loop == loop)
        return tls_conn;
    pthread_mutex_lock(&r->mu);
    for (c = r->conns; c != NULL && c->loop != loop; c = c->next)
        ;
    if (c == NULL && (c = calloc(1, sizeof(*c))) != NULL) {
        c->r = r;
        c->loop = loop;
        c->index = r->nconns++;
        c->backoff_ms = GW_REDIS_BACKOFF_MIN_MS;
        c->next = r->conns;
        r->conns = c;
        h2o_timeout_init(loop, &c->cmd_timeout, r->timeout_ms);
        h2o_timeout_init(loop, &c->tick_timeout, GW_REDIS_TICK_MS);
        c->tick.cb = on_tick;
        h2o_timeout_link(loop, &c->tick_timeout, &c->tick);
        conn_start(c);
    }
    pthread_mutex_unlock(&r->mu);
    if (c != NULL) {
        tls_owner = r;
        tls_conn = c;
    }
    return c;
}

/* ------------------------------------------------------------ commands */

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

/* The script's arguments for k (EVAL or EVALSHA by k->evaled) and send them. */
static int send_script(struct rcall *k)
{
    struct rconn *c = k->c;
    struct rr *r = c->r;
    char hex[2 * RL_MAX_TENANT_NAME + 1], tat[RR_KEY_MAX], run[RR_KEY_MAX], cpu[RR_KEY_MAX];
    char mode[4], lease[24], hb[RR_KEY_MAX], T[24], tau[24], burst[16], maxf[16], budget[24], cpu_ms[24];
    unsigned long long t_us, tau_us;
    const char *argv[RR_SCRIPT_ARGC];

    moat_hex_encode(k->tenant, strlen(k->tenant), hex);
    snprintf(tat, sizeof(tat), "%st:%s:tat", r->prefix, hex);
    snprintf(run, sizeof(run), "%st:%s:run", r->prefix, hex);
    snprintf(cpu, sizeof(cpu), "%st:%s:cpu", r->prefix, hex);
    snprintf(hb, sizeof(hb), "%so:", r->prefix);
    snprintf(mode, sizeof(mode), "%d", k->mode);
    snprintf(lease, sizeof(lease), "%llu", (unsigned long long)r->lease_ms);
    gcra_us(&k->p, &t_us, &tau_us);
    snprintf(T, sizeof(T), "%llu", t_us);
    snprintf(tau, sizeof(tau), "%llu", tau_us);
    snprintf(burst, sizeof(burst), "%u", (unsigned)k->p.burst);
    snprintf(maxf, sizeof(maxf), "%u", (unsigned)k->p.max_in_flight);
    if (k->p.cpu_ms_per_minute == RL_UNLIMITED_CPU_MS)
        snprintf(budget, sizeof(budget), "-1");
    else
        snprintf(budget, sizeof(budget), "%llu", (unsigned long long)min_u64(k->p.cpu_ms_per_minute, 1ull << 52));
    snprintf(cpu_ms, sizeof(cpu_ms), "%llu", (unsigned long long)min_u64(k->cpu_ms, 1ull << 52));
    argv[0] = k->evaled ? "EVAL" : "EVALSHA";
    argv[1] = k->evaled ? script : r->sha;
    argv[2] = "4";
    argv[3] = tat;
    argv[4] = run;
    argv[5] = cpu;
    argv[6] = c->heartbeat;
    argv[7] = mode;
    argv[8] = c->owner;
    argv[9] = lease;
    argv[10] = hb;
    argv[11] = T;
    argv[12] = tau;
    argv[13] = burst;
    argv[14] = maxf;
    argv[15] = budget;
    argv[16] = cpu_ms;
    if (c->ac == NULL || redisAsyncCommandArgv(c->ac, on_reply, k, RR_SCRIPT_ARGC, argv, NULL) != REDIS_OK)
        return -1;
    h2o_timeout_link(c->loop, &c->cmd_timeout, &k->timer);
    return 0;
}

/* k's answer came (reply NULL: the connection went away first). */
static void on_reply(redisAsyncContext *ac, void *reply, void *arg)
{
    struct rcall *k = arg;
    struct rconn *c = k->c;
    const redisReply *rep = reply;
    struct rl_decision d;

    (void)ac;
    h2o_timeout_unlink(&k->timer);
    if (rep != NULL && rep->type == REDIS_REPLY_ERROR && !k->evaled && strncmp(rep->str, "NOSCRIPT", 8) == 0) {
        k->evaled = 1; /* Redis forgot the script (restart, SCRIPT FLUSH): EVAL loads it again */
        if (send_script(k) == 0)
            return;
        rep = NULL;
    }
    if (k->cb == NULL) {
        free(k); /* a release: nobody waits */
        return;
    }
    if (rep != NULL && decode_answer(rep, k->p.burst, &d) == 0) {
        k->cb(k->arg, &d);
    } else {
        if (rep != NULL) {
            log_warnx("%s: Redis answered the limiter's script with %s%.*s", __func__,
                      rep->type == REDIS_REPLY_ERROR ? "an error: " : "something else",
                      rep->type == REDIS_REPLY_ERROR ? (int)min_u64(rep->len, 200) : 0,
                      rep->type == REDIS_REPLY_ERROR ? rep->str : "");
        }
        answer_unavailable(c->r, c, k->mode, k->tenant, &k->p, k->cb, k->arg);
    }
    free(k);
}

/* No answer within timeout_ms: the connection is of no use (its pending
 * commands, this one included, are answered as it goes). */
static void on_call_timeout(h2o_timeout_entry_t *entry)
{
    struct rcall *k = H2O_STRUCT_FROM_MEMBER(struct rcall, timer, entry);

    conn_drop(k->c, "no answer within limiter.redis.timeout_ms");
}

/* ------------------------------------------------------------ the ops */

/* A decision or a release for tenant on c; answered now when Redis cannot be asked. */
static void run_script(struct rr *r, struct rconn *c, int mode, const char *tenant, const struct rl_params *p, uint64_t cpu_ms,
                       rl_cb cb, void *arg)
{
    static const struct rl_params none = {0, 0, 0, 0};
    size_t len = tenant != NULL ? strnlen(tenant, RL_MAX_TENANT_NAME + 1) : 0;
    struct rcall *k;

    if (len == 0 || len > RL_MAX_TENANT_NAME || (p == NULL && mode != RR_MODE_FREE && mode != RR_MODE_CHARGE)) {
        if (cb != NULL) {
            struct rl_decision d = {0, RL_BACKEND_ERROR, RL_RETRY_NEVER, p != NULL ? p->burst : 0, 0, 0};
            cb(arg, &d);
        }
        return;
    }
    if (c == NULL || c->ac == NULL || (k = calloc(1, sizeof(*k))) == NULL) {
        answer_unavailable(r, c, mode, tenant, p, cb, arg);
        return;
    }
    k->c = c;
    k->cb = cb;
    k->arg = arg;
    k->p = p != NULL ? *p : none;
    k->cpu_ms = cpu_ms;
    k->mode = mode;
    k->timer.cb = on_call_timeout;
    memcpy(k->tenant, tenant, len);
    if (send_script(k) != 0) {
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
        run_script(r, loop != NULL ? conn_for(r, loop) : NULL, mode, tenant, p, 0, cb, arg);
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
    struct rconn *c = tls_owner == r ? tls_conn : NULL;

    /* a slot the local fallback gave goes back there */
    if (r->local != NULL && rl_memory_release_held(r->local, tenant, cpu_ms, now_ms))
        return;
    if (c != NULL && c->ac != NULL)
        run_script(r, c, RR_MODE_FREE, tenant, NULL, cpu_ms, NULL, NULL);
}

/* A run that held no slot (a queued Judge0 submission's) charges its CPU time. */
static void redis_charge(struct rl_limiter *l, const char *tenant, uint64_t cpu_ms, uint64_t now_ms)
{
    struct rr *r = rl_impl(l);
    struct rconn *c = tls_owner == r ? tls_conn : NULL;

    if (cpu_ms == 0)
        return;
    if (c != NULL && c->ac != NULL)
        run_script(r, c, RR_MODE_CHARGE, tenant, NULL, cpu_ms, NULL, NULL);
    else if (r->local != NULL)
        rl_charge(r->local, tenant, cpu_ms, now_ms); /* Redis is away: the local share's budget */
}

static void rr_free(struct rr *r)
{
    free(r->socket_path);
    free(r->host);
    if (r->password != NULL) {
        OPENSSL_cleanse(r->password, strlen(r->password));
        free(r->password);
    }
    free(r->prefix);
    rl_destroy(r->local);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

static void redis_destroy(struct rl_limiter *l)
{
    struct rr *r = rl_impl(l);
    struct rconn *c, *next;

    for (c = r->conns; c != NULL; c = next) {
        next = c->next;
        __atomic_store_n(&c->lost, 1, __ATOMIC_RELAXED); /* nothing to warn about */
        conn_drop(c, "the limiter is going away");
        h2o_timeout_unlink(&c->tick);
        h2o_timeout_dispose(c->loop, &c->cmd_timeout);
        h2o_timeout_dispose(c->loop, &c->tick_timeout);
        if (tls_conn == c) {
            tls_conn = NULL;
            tls_owner = NULL;
        }
        free(c);
    }
    rr_free(r);
}

/* Down while any worker's connection has failed since it last answered
 * (each worker's connection is made on its first decision). */
static enum rl_store_state redis_state(struct rl_limiter *l)
{
    struct rr *r = rl_impl(l);
    int lost = 0;

    pthread_mutex_lock(&r->mu);
    for (const struct rconn *c = r->conns; c != NULL; c = c->next)
        lost |= __atomic_load_n(&c->lost, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&r->mu);
    if (!lost)
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

static int copy_opt(const char *s, char **out)
{
    return s == NULL || (*out = strdup(s)) != NULL ? 0 : -1;
}

static int check_options(const struct rl_redis_options *o, char *err, size_t errlen)
{
    const char *why = NULL;

    if ((o->socket_path == NULL) == (o->host == NULL))
        why = "name either a Unix socket or a host";
    else if (o->prefix == NULL || strlen(o->prefix) > GW_REDIS_MAX_PREFIX)
        why = "bad key prefix";
    else if (o->timeout_ms == 0 || o->connect_timeout_ms == 0 || o->lease_ms < 3)
        why = "timeouts and the lease must be positive";
    else if (o->gateways == 0)
        why = "gateways must be at least 1";
    if (why != NULL) {
        snprintf(err, errlen, "%s", why);
        return -1;
    }
    return 0;
}

static void name_this_gateway(struct rr *r)
{
    unsigned char id[8];

    if (RAND_bytes(id, sizeof(id)) != 1) {
        /* a weaker name still differs per process and start */
        unsigned long long v = (unsigned long long)getpid() << 32 ^ rl_monotonic_ms();
        memcpy(id, &v, sizeof(id));
    }
    moat_hex_encode(id, sizeof(id), r->gateway_id);
}

struct rl_limiter *rl_redis_new(const struct rl_redis_options *o, char *err, size_t errlen)
{
    unsigned char digest[SHA_DIGEST_LENGTH];
    struct rl_limiter *l;
    struct rr *r;

    if (check_options(o, err, errlen) != 0)
        return NULL;
    if ((r = calloc(1, sizeof(*r))) == NULL || pthread_mutex_init(&r->mu, NULL) != 0) {
        free(r);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    r->port = o->port;
    r->db = o->db;
    r->gateways = o->gateways;
    r->connect_timeout_ms = o->connect_timeout_ms;
    r->timeout_ms = o->timeout_ms;
    r->lease_ms = o->lease_ms;
    r->on_unavailable = o->on_unavailable;
    name_this_gateway(r);
    SHA1((const unsigned char *)script, sizeof(script) - 1, digest);
    moat_hex_encode(digest, sizeof(digest), r->sha);
    if (copy_opt(o->socket_path, &r->socket_path) != 0 || copy_opt(o->host, &r->host) != 0 ||
        copy_opt(o->password, &r->password) != 0 || copy_opt(o->prefix, &r->prefix) != 0 ||
        (o->on_unavailable == RL_REDIS_LOCAL && (r->local = rl_memory_new()) == NULL) || (l = rl_new(&redis_ops, r)) == NULL) {
        rr_free(r);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    return l;
}
