/*
 * queue_redis.c - accepted work in Redis Streams (see queue_redis.h).
 *
 * Theory of operation
 * -------------------
 * Keys (P the configured prefix, T a tenant's name in hex: any byte of a
 * name is safe in a key and two names never share one):
 *
 *   P q:s:T   the tenant's stream; one consumer group, "moat", made with
 *             the stream (XGROUP CREATE ... 0 MKSTREAM).  An entry is
 *             {k: submissions it holds, n: its bytes, g: the accepting
 *             gateway, e: the user's blob}.
 *   P q:w     hash: T -> submissions waiting (not yet claimed), and "*"
 *             -> all tenants'; what queue_max and queue_max_per_tenant
 *             count.
 *   P q:b     hash: T -> bytes of its entries waiting (the byte cap).
 *   P q:ring  list of the tenants with something waiting, in turn.
 *   P q:t     set of the tenants that have a stream (the sweep's list).
 *   P q:dead  list of entries never to run, newest first, with why
 *             (capped at GW_QUEUE_DEAD_MAX).
 *   P q:wake  a pub/sub channel: a tenant queued something.
 *
 * Every operation is one Lua script, so every gateway sees the counts,
 * the ring and the streams change together.
 *
 *   enqueue   checks the caps for all of the request's entries at once
 *             (a batch fits whole or not at all), XADDs them, counts them
 *             waiting, puts the tenant at the ring's tail if it was not
 *             waiting, and publishes a wake-up.
 *   claim     pops the ring's head tenant, reads one entry of its stream
 *             for this consumer (XREADGROUP ... >: it is now pending, at
 *             delivery 1), counts it out of waiting and puts the tenant
 *             back at the tail if it has more: one submission per tenant
 *             per turn, across every gateway (deficit round robin with a
 *             quantum of one entry).  So one tenant's burst of 200 holds
 *             at most one run more than another tenant's single entry,
 *             whichever gateway claims next.
 *   sweep     (a claim with sweep set, a few times per lease) looks at
 *             the entries pending longer than lease_ms in every stream
 *             (XPENDING IDLE) and takes over, with XCLAIM, the first whose
 *             consumer's heartbeat key is gone: its delivery count is the
 *             attempt.  An entry of a live consumer is never taken over,
 *             however long its run: liveness is the heartbeat, not the
 *             entry's idle time, so a long program is not run twice.
 *             XAUTOCLAIM would take every idle entry, live owner or not;
 *             that is why the sweep is XPENDING + a heartbeat check +
 *             XCLAIM.  Past max_attempts the claim says QR_EXHAUSTED: the
 *             user ends it without running it.  Empty streams of tenants
 *             with nothing waiting are deleted here.
 *   ack       XACK and XDEL: the entry is over.
 *   dead      the entry with why to P q:dead, then as ack.
 *
 * At least once.  An entry leaves the stream only when its user acks it
 * after keeping its result, so a gateway killed between claim and run or
 * between run and result leaves it pending under a consumer whose
 * heartbeat stops: lease_ms later a live gateway's sweep takes it over
 * and runs it again.  The user keeps a result only where none was kept
 * (judge0_store.c: a final record is never overwritten), so it ends once.
 * Three more ways to lose one, closed here:
 *
 *   a run lost, its gateway alive (the backend killed mid-run): release
 *             gives it back, a new entry at the tenant's tail with field
 *             a = the attempts so far, so any gateway's free slot runs it
 *             (attempt = a + its delivery count).
 *   a claim's answer lost (a timeout, Redis restarted after the script
 *             ran): the entry is pending at a live consumer that never
 *             saw it.  Each consumer keeps what it holds (struct qr_held)
 *             and sends it with every claim; its sweep takes back its own
 *             pending entries that it does not hold, at the same attempt
 *             (XCLAIM RETRYCOUNT: it never ran).
 *   Redis itself away (frozen, restarted): every heartbeat may have
 *             expired at once.  The sweep takes nothing of another
 *             consumer's while the beat's grace key stands or while the
 *             newest beat is older than 2/3 of the lease (redis_beat.c).
 *
 * Answers are checked field by field; anything else is logged and taken
 * as "Redis did not answer" (QR_DOWN, or nothing claimed).
 */
#include "queue_redis.h"
#include "log.h"
#include "moat_hex.h"
#include "redis_client.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define QR_GROUP       "moat"
#define QR_PREFIX_MAX  (GW_REDIS_MAX_PREFIX + 8)
#define QR_KEY_MAX     (QR_PREFIX_MAX + 2 * GW_MAX_TENANT_NAME + 1)
#define QR_MAX_ENTRIES 64
#define QR_SWEEP_SCAN  32 /* pending entries looked at per stream per sweep */
#define QR_DEAD_SHOWN  10 /* dead letters the counts show */

/* Lua, for a script whose KEYS[2..5] are wait, bytes, ring, tenants:
 * k submissions of b bytes of tenant t are waiting now (counted, the
 * tenant in the ring if it was not, a wake-up on chan). */
#define QR_LUA_WAITING                                                                                                             \
    "redis.call('HINCRBY', KEYS[2], '*', k)\n"                                                                                     \
    "redis.call('HINCRBY', KEYS[3], t, b)\n"                                                                                       \
    "if redis.call('HINCRBY', KEYS[2], t, k) == k then redis.call('RPUSH', KEYS[4], t) end\n"                                      \
    "redis.call('SADD', KEYS[5], t)\n"                                                                                             \
    "redis.call('PUBLISH', chan, t)\n"

/* KEYS: stream, wait, bytes, ring, tenants.  ARGV: T, queue_max,
 * per_tenant, bytes_per_tenant, group, channel, n, then per entry k, n, g, e.
 * {1, {ids}} or {0, reason} (1 queue_max, 2 per tenant, 3 bytes). */
static struct redis_script enqueue_script = {
    "local t, qmax, tmax, bmax = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])\n"
    "local grp, chan, n = ARGV[5], ARGV[6], tonumber(ARGV[7])\n"
    "local k, b = 0, 0\n"
    "for i = 0, n - 1 do k = k + tonumber(ARGV[8 + 4 * i]); b = b + tonumber(ARGV[9 + 4 * i]) end\n"
    "local all = tonumber(redis.call('HGET', KEYS[2], '*') or '0')\n"
    "local mine = tonumber(redis.call('HGET', KEYS[2], t) or '0')\n"
    "local bytes = tonumber(redis.call('HGET', KEYS[3], t) or '0')\n"
    "if all + k > qmax then return {0, 1} end\n"
    "if mine + k > tmax then return {0, 2} end\n"
    "if bytes + b > bmax then return {0, 3} end\n"
    "redis.pcall('XGROUP', 'CREATE', KEYS[1], grp, '0', 'MKSTREAM')\n"
    "local ids = {}\n"
    "for i = 0, n - 1 do\n"
    "  ids[#ids + 1] = redis.call('XADD', KEYS[1], '*', 'k', ARGV[8 + 4 * i], 'n', ARGV[9 + 4 * i], 'g', ARGV[10 + 4 * i],\n"
    "                             'e', ARGV[11 + 4 * i])\n"
    "end\n" QR_LUA_WAITING "return {1, ids}\n",
    "", NULL};

/* KEYS: wait, bytes, ring, tenants.  ARGV: streams' prefix, group,
 * consumer, heartbeat prefix, lease_ms, sweep, max_attempts, scan, held
 * (";T/id" per entry this consumer knows it holds, then ";").
 * {0} nothing; {kind, T, id, fields, attempt}: 1 run, 2 exhausted. */
static struct redis_script claim_script = {
    "local sp, grp, me, hb = ARGV[1], ARGV[2], ARGV[3], ARGV[4]\n"
    "local lease, sweep, maxa, scan = tonumber(ARGV[5]), ARGV[6] == '1', tonumber(ARGV[7]), tonumber(ARGV[8])\n"
    "local held = ARGV[9]\n"
    "local function tries(f)\n"
    "  for j = 1, #f, 2 do if f[j] == 'a' then return tonumber(f[j + 1]) or 0 end end\n"
    "  return 0\n"
    "end\n"
    "if sweep then\n"
    "  local now = redis.call('TIME')\n"
    "  now = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)\n"
    "  local last = tonumber(redis.call('GET', hb .. '" GW_REDIS_BEAT_LAST "') or '0')\n"
    "  local away = redis.call('EXISTS', hb .. '" GW_REDIS_BEAT_GRACE "') == 1 or (last > 0 and now - last > lease * 2 / 3)\n"
    "  for _, t in ipairs(redis.call('SMEMBERS', KEYS[4])) do\n"
    "    local s = sp .. t\n"
    "    local p = redis.pcall('XPENDING', s, grp, 'IDLE', lease, '-', '+', scan)\n"
    "    if type(p) == 'table' and p.err == nil then\n"
    "      for _, e in ipairs(p) do\n"
    "        local mine = e[2] == me\n"
    "        local lost = mine and not string.find(held, ';' .. t .. '/' .. e[1] .. ';', 1, true)\n"
    "        if lost or (not mine and not away and redis.call('EXISTS', hb .. e[2]) == 0) then\n"
    "          local n = tonumber(e[4])\n"
    "          local c\n"
    "          if lost then c = redis.call('XCLAIM', s, grp, me, lease, e[1], 'RETRYCOUNT', n)\n"
    "          else c = redis.call('XCLAIM', s, grp, me, lease, e[1]); n = n + 1 end\n"
    "          if c[1] and c[1][2] then\n"
    "            local a = tries(c[1][2]) + n\n"
    "            return {a > maxa and 2 or 1, t, e[1], c[1][2], a}\n"
    "          end\n"
    "          redis.call('XACK', s, grp, e[1])\n"
    "        end\n"
    "      end\n"
    "      if redis.call('XLEN', s) == 0 and not redis.call('HGET', KEYS[1], t) then\n"
    "        redis.call('DEL', s); redis.call('SREM', KEYS[4], t)\n"
    "      end\n"
    "    else\n"
    "      redis.call('SREM', KEYS[4], t)\n"
    "    end\n"
    "  end\n"
    "end\n"
    "for i = 1, redis.call('LLEN', KEYS[3]) do\n"
    "  local t = redis.call('LPOP', KEYS[3])\n"
    "  if not t then break end\n"
    "  local r = redis.pcall('XREADGROUP', 'GROUP', grp, me, 'COUNT', 1, 'STREAMS', sp .. t, '>')\n"
    "  local e = type(r) == 'table' and r.err == nil and r[1] and r[1][2] and r[1][2][1]\n"
    "  if e then\n"
    "    local f, k, b = e[2], 1, 0\n"
    "    for j = 1, #f, 2 do\n"
    "      if f[j] == 'k' then k = tonumber(f[j + 1]) or 1 elseif f[j] == 'n' then b = tonumber(f[j + 1]) or 0 end\n"
    "    end\n"
    "    redis.call('HINCRBY', KEYS[1], '*', 0 - k)\n"
    "    redis.call('HINCRBY', KEYS[2], t, 0 - b)\n"
    "    if redis.call('HINCRBY', KEYS[1], t, 0 - k) > 0 then redis.call('RPUSH', KEYS[3], t)\n"
    "    else redis.call('HDEL', KEYS[1], t); redis.call('HDEL', KEYS[2], t) end\n"
    "    local a = tries(f) + 1\n"
    "    return {a > maxa and 2 or 1, t, e[1], f, a}\n"
    "  end\n"
    "  local w = tonumber(redis.call('HGET', KEYS[1], t) or '0')\n"
    "  redis.call('HINCRBY', KEYS[1], '*', 0 - w)\n"
    "  redis.call('HDEL', KEYS[1], t); redis.call('HDEL', KEYS[2], t)\n"
    "end\n"
    "return {0}\n",
    "", NULL};

/* KEYS: stream, wait, bytes, ring, tenants.  ARGV: group, id, consumer,
 * channel, attempts so far, T.  1 given back (a new entry with the same
 * fields and a = the attempts, at the stream's tail, counted waiting),
 * 0 no longer this consumer's (acknowledged, or taken over). */
static struct redis_script release_script = {
    "local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1, ARGV[3])\n"
    "if not p[1] then return 0 end\n"
    "local r = redis.call('XRANGE', KEYS[1], ARGV[2], ARGV[2])\n"
    "redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])\n"
    "redis.call('XDEL', KEYS[1], ARGV[2])\n"
    "if not r[1] then return 0 end\n"
    "local f, ks, bs, g, e = r[1][2], '1', '0', '', ''\n"
    "for j = 1, #f, 2 do\n"
    "  if f[j] == 'k' then ks = f[j + 1] elseif f[j] == 'n' then bs = f[j + 1]\n"
    "  elseif f[j] == 'g' then g = f[j + 1] elseif f[j] == 'e' then e = f[j + 1] end\n"
    "end\n"
    "local t, k, b, chan = ARGV[6], tonumber(ks), tonumber(bs), ARGV[4]\n"
    "redis.call('XADD', KEYS[1], '*', 'k', ks, 'n', bs, 'g', g, 'e', e, 'a', ARGV[5])\n" QR_LUA_WAITING "return 1\n",
    "", NULL};

/* KEYS: stream.  ARGV: group, id.  The entries acknowledged (0 or 1). */
static struct redis_script ack_script = {"local n = redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])\n"
                                         "redis.call('XDEL', KEYS[1], ARGV[2])\n"
                                         "return n\n",
                                         "", NULL};

/* KEYS: stream, dead list.  ARGV: group, id, the record, cap. */
static struct redis_script dead_script = {"redis.call('LPUSH', KEYS[2], ARGV[3])\n"
                                          "redis.call('LTRIM', KEYS[2], 0, tonumber(ARGV[4]) - 1)\n"
                                          "local n = redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])\n"
                                          "redis.call('XDEL', KEYS[1], ARGV[2])\n"
                                          "return n\n",
                                          "", NULL};

/* KEYS: wait, bytes, tenants, dead.  ARGV: streams' prefix, group,
 * heartbeat prefix, how many dead letters to show.  One JSON text:
 * {waiting, dead, oldest_ms (0 none), now_ms, tenants: [{t (hex), waiting,
 * bytes, pending, oldest_ms}], consumers: [{name, pending, alive}],
 * dead_recent: [the newest dead letters' texts]}. */
static struct redis_script counts_script = {
    "local oldest, per, cons = 0, {}, {}\n"
    "for _, t in ipairs(redis.call('SMEMBERS', KEYS[3])) do\n"
    "  local s = ARGV[1] .. t\n"
    "  local o = 0\n"
    "  local first = redis.call('XRANGE', s, '-', '+', 'COUNT', 1)\n"
    "  if first[1] then\n"
    "    o = tonumber(string.match(first[1][1], '^(%d+)'))\n"
    "    if oldest == 0 or o < oldest then oldest = o end\n"
    "  end\n"
    "  local pending = 0\n"
    "  local p = redis.pcall('XPENDING', s, ARGV[2])\n"
    "  if type(p) == 'table' and p.err == nil and type(p[4]) == 'table' then\n"
    "    for _, c in ipairs(p[4]) do\n"
    "      local n = tonumber(c[2])\n"
    "      pending = pending + n\n"
    "      cons[c[1]] = (cons[c[1]] or 0) + n\n"
    "    end\n"
    "  end\n"
    "  per[#per + 1] = {t = t, waiting = tonumber(redis.call('HGET', KEYS[1], t) or '0'),\n"
    "                   bytes = tonumber(redis.call('HGET', KEYS[2], t) or '0'), pending = pending, oldest_ms = o}\n"
    "end\n"
    "local cl = {}\n"
    "for name, n in pairs(cons) do\n"
    "  cl[#cl + 1] = {name = name, pending = n, alive = redis.call('EXISTS', ARGV[3] .. name) == 1}\n"
    "end\n"
    "local now = redis.call('TIME')\n"
    "local out = {waiting = tonumber(redis.call('HGET', KEYS[1], '*') or '0'), dead = redis.call('LLEN', KEYS[4]),\n"
    "             oldest_ms = oldest, now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000),\n"
    "             tenants = per, consumers = cl,\n"
    "             dead_recent = redis.call('LRANGE', KEYS[4], 0, tonumber(ARGV[4]) - 1)}\n"
    "return cjson.encode(out)\n",
    "", NULL};

/* An entry this consumer holds: claimed, and not yet acknowledged, given
 * back or dead-lettered (the claim script's "held"). */
struct qr_held {
    char t[2 * GW_MAX_TENANT_NAME + 1]; /* the tenant in hex, as in the stream's key */
    char id[QR_ID_MAX];
};

struct queue_redis {
    struct redis_client *rc;
    char *consumer, *heartbeat_prefix;
    uint64_t lease_ms;
    unsigned max_attempts;
    unsigned wait_replicas; /* durability replicated: WAIT for this many, wait_ms */
    uint64_t wait_ms;
    struct qr_held *held; /* the dispatcher's loop only */
    size_t nheld, held_cap;
    char k_wait[QR_PREFIX_MAX], k_bytes[QR_PREFIX_MAX], k_ring[QR_PREFIX_MAX], k_tenants[QR_PREFIX_MAX], k_dead[QR_PREFIX_MAX];
    char k_wake[QR_PREFIX_MAX], stream_prefix[QR_PREFIX_MAX];
};

/* One call's wait for its answer. */
struct qr_call {
    struct queue_redis *q;
    void *fn;
    void *arg;
    size_t n;         /* enqueue: entries */
    const char *what; /* ack, release, dead: the script, for the log */
    int always_drop;  /* dead: no longer held, whatever Redis answers */
    char tenant[GW_MAX_TENANT_NAME + 1];
    char id[QR_ID_MAX];
};

static uint64_t min_u64(uint64_t a, uint64_t b)
{
    return a < b ? a : b;
}

static void tenant_hex(const char *tenant, char out[2 * GW_MAX_TENANT_NAME + 1])
{
    moat_hex_encode(tenant, strnlen(tenant, GW_MAX_TENANT_NAME), out);
}

static void stream_key(const struct queue_redis *q, const char *tenant, char out[QR_KEY_MAX])
{
    char hex[2 * GW_MAX_TENANT_NAME + 1];

    tenant_hex(tenant, hex);
    snprintf(out, QR_KEY_MAX, "%s%s", q->stream_prefix, hex);
}

/* ------------------------------------------------------------- held */

static size_t held_find(const struct queue_redis *q, const char *t, const char *id)
{
    size_t i;

    for (i = 0; i < q->nheld; i++)
        if (strcmp(q->held[i].t, t) == 0 && strcmp(q->held[i].id, id) == 0)
            break;
    return i;
}

/* Out of memory: not held, so this consumer's own sweep takes the entry
 * back lease_ms after its delivery (as a lost claim's): nothing is lost. */
static void held_add(struct queue_redis *q, const char *tenant, const char *id)
{
    char t[2 * GW_MAX_TENANT_NAME + 1];

    tenant_hex(tenant, t);
    if (held_find(q, t, id) < q->nheld)
        return;
    if (q->nheld == q->held_cap) {
        size_t cap = q->held_cap == 0 ? 16 : 2 * q->held_cap;
        struct qr_held *h = realloc(q->held, cap * sizeof(*h));
        if (h == NULL)
            return;
        q->held = h;
        q->held_cap = cap;
    }
    snprintf(q->held[q->nheld].t, sizeof(q->held[0].t), "%s", t);
    snprintf(q->held[q->nheld].id, sizeof(q->held[0].id), "%s", id);
    q->nheld++;
}

static void held_drop(struct queue_redis *q, const char *tenant, const char *id)
{
    char t[2 * GW_MAX_TENANT_NAME + 1];
    size_t i;

    tenant_hex(tenant, t);
    if ((i = held_find(q, t, id)) < q->nheld)
        q->held[i] = q->held[--q->nheld];
}

void queue_redis_forget(struct queue_redis *q, const char *tenant, const char *id)
{
    held_drop(q, tenant, id);
}

size_t queue_redis_held(const struct queue_redis *q)
{
    return q->nheld;
}

/* The claim script's "held": ";T/id" each, then ";" (malloc), or NULL. */
static char *held_text(const struct queue_redis *q)
{
    size_t one = sizeof(q->held[0].t) + sizeof(q->held[0].id) + 2, len = 0;
    char *out = malloc(q->nheld * one + 2);

    if (out == NULL)
        return NULL;
    for (size_t i = 0; i < q->nheld; i++)
        len += (size_t)snprintf(out + len, one + 1, ";%s/%s", q->held[i].t, q->held[i].id);
    out[len++] = ';';
    out[len] = '\0';
    return out;
}

static void log_odd(const char *what, const redisReply *rep)
{
    log_warnx("queue_redis: Redis answered the %s script with %s%.*s", what,
              rep->type == REDIS_REPLY_ERROR ? "an error: " : "something else",
              rep->type == REDIS_REPLY_ERROR ? (int)min_u64(rep->len, 200) : 0, rep->type == REDIS_REPLY_ERROR ? rep->str : "");
}

static struct qr_call *call_new(struct queue_redis *q, void *fn, void *arg)
{
    struct qr_call *k = calloc(1, sizeof(*k));

    if (k != NULL) {
        k->q = q;
        k->fn = fn;
        k->arg = arg;
    }
    return k;
}

/* Send s on loop's connection for k: 0, or -1 (k freed). */
static int call_eval(struct qr_call *k, h2o_loop_t *loop, struct redis_script *s, int nkeys, int nargs, const char *const *args,
                     const size_t *lens, redis_reply_fn on_reply)
{
    struct redis_conn *c;

    if (k == NULL)
        return -1;
    c = redis_client_conn(k->q->rc, loop);
    if (c == NULL || redis_conn_eval(c, s, nkeys, nargs, args, lens, on_reply, k) != 0) {
        free(k);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------- enqueue */

/* durability replicated: what the enqueue waits for after Redis queued it. */
struct qr_waiting {
    struct qr_call *k;
    char ids[QR_MAX_ENTRIES][QR_ID_MAX];
};

static void on_replicated(void *arg, const redisReply *rep)
{
    struct qr_waiting *w = arg;
    struct qr_call *k = w->k;
    qr_enqueue_fn fn = (qr_enqueue_fn)k->fn;
    int safe = rep != NULL && rep->type == REDIS_REPLY_INTEGER && rep->integer >= (long long)k->q->wait_replicas;

    if (!safe)
        log_warnx("queue_redis: %s replica(s) had the entries within %llu ms (durability: replicated wants %u): refused",
                  rep != NULL && rep->type == REDIS_REPLY_INTEGER ? "too few" : "no answer: unknown how many",
                  (unsigned long long)k->q->wait_ms, k->q->wait_replicas);
    fn(k->arg, safe ? QR_OK : QR_UNREPLICATED, safe ? w->ids : NULL, safe ? k->n : 0);
    free(w);
    free(k);
}

/* WAIT for the replicas on the connection that queued (on its loop,
 * the one answering now): 0 sent (on_replicated follows), -1 not. */
static int wait_for_replicas(struct qr_call *k, char (*ids)[QR_ID_MAX])
{
    struct qr_waiting *w = calloc(1, sizeof(*w));
    char nrep[16], ms[24];
    const char *argv[3] = {"WAIT", nrep, ms};

    if (w == NULL)
        return -1;
    w->k = k;
    memcpy(w->ids, ids, k->n * sizeof(w->ids[0]));
    snprintf(nrep, sizeof(nrep), "%u", k->q->wait_replicas);
    snprintf(ms, sizeof(ms), "%llu", (unsigned long long)k->q->wait_ms);
    if (redis_conn_command(redis_client_thread_conn(k->q->rc), 3, argv, NULL, on_replicated, w) != 0) {
        free(w);
        return -1;
    }
    return 0;
}

static void on_enqueued(void *arg, const redisReply *rep)
{
    struct qr_call *k = arg;
    qr_enqueue_fn fn = (qr_enqueue_fn)k->fn;
    char ids[QR_MAX_ENTRIES][QR_ID_MAX];
    enum qr_verdict v = QR_DOWN;

    if (rep != NULL && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 && rep->element[0]->type == REDIS_REPLY_INTEGER) {
        const redisReply *r1 = rep->element[1];
        if (rep->element[0]->integer == 0 && r1->type == REDIS_REPLY_INTEGER && r1->integer >= 1 && r1->integer <= 3) {
            v = r1->integer == 1 ? QR_FULL : r1->integer == 2 ? QR_TENANT_FULL : QR_TENANT_BYTES;
        } else if (rep->element[0]->integer == 1 && r1->type == REDIS_REPLY_ARRAY && r1->elements == k->n) {
            v = QR_OK;
            for (size_t i = 0; i < k->n && v == QR_OK; i++) {
                if (r1->element[i]->type != REDIS_REPLY_STRING || r1->element[i]->len >= QR_ID_MAX)
                    v = QR_DOWN;
                else
                    snprintf(ids[i], QR_ID_MAX, "%s", r1->element[i]->str);
            }
        }
        if (v == QR_DOWN)
            log_odd("enqueue", rep);
    } else if (rep != NULL) {
        log_odd("enqueue", rep);
    }
    if (v == QR_OK && k->q->wait_replicas > 0) {
        if (wait_for_replicas(k, ids) == 0)
            return;          /* on_replicated answers */
        v = QR_UNREPLICATED; /* the WAIT could not be sent */
    }
    fn(k->arg, v, v == QR_OK ? ids : NULL, v == QR_OK ? k->n : 0);
    free(k);
}

int queue_redis_enqueue(struct queue_redis *q, h2o_loop_t *loop, const char *tenant, const struct qr_caps *caps,
                        const struct qr_entry_in *e, size_t n, qr_enqueue_fn fn, void *arg)
{
    enum { FIXED = 12 };
    const char *args[FIXED + 4 * QR_MAX_ENTRIES];
    size_t lens[FIXED + 4 * QR_MAX_ENTRIES];
    char stream[QR_KEY_MAX], hex[2 * GW_MAX_TENANT_NAME + 1], qmax[24], tmax[24], bmax[24], nn[16];
    char counts[QR_MAX_ENTRIES][16], sizes[QR_MAX_ENTRIES][24];
    struct qr_call *k;
    int argc = 0;

    if (n == 0 || n > QR_MAX_ENTRIES || strnlen(tenant, GW_MAX_TENANT_NAME + 1) > GW_MAX_TENANT_NAME)
        return -1;
    stream_key(q, tenant, stream);
    moat_hex_encode(tenant, strlen(tenant), hex);
    snprintf(qmax, sizeof(qmax), "%" PRIu64, caps->queue_max);
    snprintf(tmax, sizeof(tmax), "%" PRIu64, caps->queue_max_per_tenant);
    snprintf(bmax, sizeof(bmax), "%" PRIu64, caps->queue_max_bytes_per_tenant);
    snprintf(nn, sizeof(nn), "%zu", n);
    const char *fixed[FIXED] = {stream, q->k_wait, q->k_bytes, q->k_ring, q->k_tenants, hex,
                                qmax,   tmax,      bmax,       QR_GROUP,  q->k_wake,    nn};
    for (; argc < FIXED; argc++) {
        args[argc] = fixed[argc];
        lens[argc] = strlen(fixed[argc]);
    }
    for (size_t i = 0; i < n; i++) {
        snprintf(counts[i], sizeof(counts[i]), "%u", e[i].count);
        snprintf(sizes[i], sizeof(sizes[i]), "%zu", e[i].len);
        args[argc] = counts[i];
        lens[argc++] = strlen(counts[i]);
        args[argc] = sizes[i];
        lens[argc++] = strlen(sizes[i]);
        args[argc] = q->consumer;
        lens[argc++] = strlen(q->consumer);
        args[argc] = e[i].blob;
        lens[argc++] = e[i].len;
    }
    if ((k = call_new(q, (void *)fn, arg)) == NULL)
        return -1;
    k->n = n;
    return call_eval(k, loop, &enqueue_script, 5, argc, args, lens, on_enqueued);
}

/* --------------------------------------------------------------- claim */

/* The entry's fields as enqueue writes them: k, n, g, e, and a when it
 * was given back (1), or 0. */
static int entry_fields(const redisReply *f, struct qr_claim *c)
{
    int seen = 0;

    if (f->type != REDIS_REPLY_ARRAY || (f->elements != 8 && f->elements != 10))
        return 0;
    for (size_t i = 0; i + 1 < f->elements; i += 2) {
        const redisReply *name = f->element[i], *v = f->element[i + 1];
        if (name->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING || name->len != 1)
            return 0;
        switch (name->str[0]) {
        case 'k':
        case 'n':
            seen |= name->str[0] == 'k' ? 1 : 2;
            break;
        case 'a': /* the script counted it in the attempt */
            if (f->elements != 10)
                return 0;
            break;
        case 'g':
            c->gateway = v->str;
            c->gateway_len = v->len;
            seen |= 4;
            break;
        case 'e':
            c->blob = v->str;
            c->len = v->len;
            seen |= 8;
            break;
        default:
            return 0;
        }
    }
    return seen == 15;
}

static void on_claimed(void *arg, const redisReply *rep)
{
    struct qr_call *k = arg;
    qr_claim_fn fn = (qr_claim_fn)k->fn;
    struct qr_claim c;
    const redisReply *const *el;

    memset(&c, 0, sizeof(c));
    if (rep == NULL || rep->type != REDIS_REPLY_ARRAY || rep->elements == 0 || rep->element[0]->type != REDIS_REPLY_INTEGER) {
        if (rep != NULL)
            log_odd("claim", rep);
        fn(k->arg, NULL, 1);
        free(k);
        return;
    }
    el = (const redisReply *const *)rep->element;
    if (el[0]->integer == 0 && rep->elements == 1) {
        fn(k->arg, NULL, 0);
        free(k);
        return;
    }
    if (rep->elements != 5 || (el[0]->integer != 1 && el[0]->integer != 2) || el[1]->type != REDIS_REPLY_STRING ||
        el[1]->len > 2 * GW_MAX_TENANT_NAME || el[1]->len % 2 != 0 ||
        moat_hex_decode(el[1]->str, el[1]->len, c.tenant, MOAT_HEX_LOWER) != 0 || el[2]->type != REDIS_REPLY_STRING ||
        el[2]->len >= QR_ID_MAX || el[4]->type != REDIS_REPLY_INTEGER || el[4]->integer < 1) {
        log_odd("claim", rep);
        fn(k->arg, NULL, 1);
        free(k);
        return;
    }
    c.tenant[el[1]->len / 2] = '\0';
    c.kind = el[0]->integer == 1 ? QR_RUN : QR_EXHAUSTED;
    snprintf(c.id, sizeof(c.id), "%s", el[2]->str);
    c.attempt = el[4]->integer > 1000000 ? 1000000u : (unsigned)el[4]->integer;
    c.malformed = !entry_fields(el[3], &c) || strlen(c.tenant) != el[1]->len / 2;
    if (c.malformed) {
        c.blob = NULL;
        c.len = 0;
        c.gateway = NULL;
        c.gateway_len = 0;
    }
    held_add(k->q, c.tenant, c.id);
    fn(k->arg, &c, 0);
    free(k);
}

int queue_redis_claim(struct queue_redis *q, h2o_loop_t *loop, int sweep, qr_claim_fn fn, void *arg)
{
    char lease[24], maxa[16], scan[16];
    const char *args[13];
    char *held = held_text(q);
    int rc;

    if (held == NULL)
        return -1;
    snprintf(lease, sizeof(lease), "%" PRIu64, q->lease_ms);
    snprintf(maxa, sizeof(maxa), "%u", q->max_attempts);
    snprintf(scan, sizeof(scan), "%d", QR_SWEEP_SCAN);
    args[0] = q->k_wait;
    args[1] = q->k_bytes;
    args[2] = q->k_ring;
    args[3] = q->k_tenants;
    args[4] = q->stream_prefix;
    args[5] = QR_GROUP;
    args[6] = q->consumer;
    args[7] = q->heartbeat_prefix;
    args[8] = lease;
    args[9] = sweep ? "1" : "0";
    args[10] = maxa;
    args[11] = scan;
    args[12] = held;
    rc = call_eval(call_new(q, (void *)fn, arg), loop, &claim_script, 4, 13, args, NULL, on_claimed);
    free(held);
    return rc;
}

/* ------------------------------------------------------------ ack, dead */

/* An ack's, a release's or a dead letter's answer: the entry is no longer
 * held once Redis took it (a dead letter: whatever it answered, so that
 * an unanswered one is taken back by this consumer's sweep and tried
 * again). */
static void on_done(void *arg, const redisReply *rep)
{
    struct qr_call *k = arg;
    qr_done_fn fn = (qr_done_fn)k->fn;
    int ok = rep != NULL && rep->type == REDIS_REPLY_INTEGER;

    if (rep != NULL && !ok)
        log_odd(k->what, rep);
    if (ok || k->always_drop)
        held_drop(k->q, k->tenant, k->id);
    if (fn != NULL)
        fn(k->arg, ok);
    free(k);
}

static struct qr_call *done_call(struct queue_redis *q, qr_done_fn fn, void *arg, const char *what, const char *tenant,
                                 const char *id, int always_drop)
{
    struct qr_call *k = call_new(q, (void *)fn, arg);

    if (k != NULL) {
        k->what = what;
        k->always_drop = always_drop;
        snprintf(k->tenant, sizeof(k->tenant), "%s", tenant);
        snprintf(k->id, sizeof(k->id), "%s", id);
    }
    return k;
}

int queue_redis_ack(struct queue_redis *q, h2o_loop_t *loop, const char *tenant, const char *id, qr_done_fn fn, void *arg)
{
    char stream[QR_KEY_MAX];
    const char *args[3] = {stream, QR_GROUP, id};

    stream_key(q, tenant, stream);
    return call_eval(done_call(q, fn, arg, "ack", tenant, id, 0), loop, &ack_script, 1, 3, args, NULL, on_done);
}

int queue_redis_release(struct queue_redis *q, h2o_loop_t *loop, const char *tenant, const char *id, unsigned attempts,
                        qr_done_fn fn, void *arg)
{
    char stream[QR_KEY_MAX], hex[2 * GW_MAX_TENANT_NAME + 1], tries[16];

    stream_key(q, tenant, stream);
    tenant_hex(tenant, hex);
    snprintf(tries, sizeof(tries), "%u", attempts);
    const char *args[11] = {stream, q->k_wait,   q->k_bytes, q->k_ring, q->k_tenants, QR_GROUP,
                            id,     q->consumer, q->k_wake,  tries,     hex};
    return call_eval(done_call(q, fn, arg, "release", tenant, id, 0), loop, &release_script, 5, 11, args, NULL, on_done);
}

int queue_redis_dead(struct queue_redis *q, h2o_loop_t *loop, const struct qr_claim *c, const char *why, qr_done_fn fn, void *arg)
{
    char stream[QR_KEY_MAX], cap[16];
    json_t *rec;
    char *text;
    int rc;

    stream_key(q, c->tenant, stream);
    snprintf(cap, sizeof(cap), "%u", GW_QUEUE_DEAD_MAX);
    rec = json_pack("{s:s, s:s, s:I, s:s, s:s%, s:I}", "tenant", c->tenant, "id", c->id, "attempt", (json_int_t)c->attempt, "why",
                    why, "gateway", c->gateway != NULL ? c->gateway : "", c->gateway != NULL ? c->gateway_len : 0, "bytes",
                    (json_int_t)c->len);
    text = rec != NULL ? json_dumps(rec, JSON_COMPACT) : NULL;
    json_decref(rec);
    if (text == NULL) {
        held_drop(q, c->tenant, c->id);
        return -1;
    }
    const char *args[6] = {stream, q->k_dead, QR_GROUP, c->id, text, cap};
    rc = call_eval(done_call(q, fn, arg, "dead", c->tenant, c->id, 1), loop, &dead_script, 2, 6, args, NULL, on_done);
    if (rc != 0)
        held_drop(q, c->tenant, c->id); /* taken back by the sweep, and dead-lettered again */
    free(text);
    return rc;
}

/* -------------------------------------------------------------- counts */

/* The counts' JSON, checked and turned into c and detail (tenants by
 * name; cjson writes an empty table as {}: taken as none).  0 or -1. */
static int counts_decode(const char *text, size_t len, struct qr_counts *c, json_t **detail)
{
    json_t *o = json_loadb(text, len, 0, NULL), *v, *tenants = json_array(), *t;
    json_int_t w, d, oldest, now;
    size_t i;

    *detail = NULL;
    if (o == NULL || tenants == NULL ||
        json_unpack(o, "{s:I, s:I, s:I, s:I}", "waiting", &w, "dead", &d, "oldest_ms", &oldest, "now_ms", &now) != 0 || w < 0 ||
        d < 0) {
        json_decref(o);
        json_decref(tenants);
        return -1;
    }
    memset(c, 0, sizeof(*c));
    c->waiting = (uint64_t)w;
    c->dead = (uint64_t)d;
    c->oldest_ms = oldest > 0 && now > oldest ? (uint64_t)(now - oldest) : 0;
    json_array_foreach(json_object_get(o, "tenants"), i, v)
    {
        const char *hex = json_string_value(json_object_get(v, "t"));
        char name[GW_MAX_TENANT_NAME + 1];
        json_int_t to = json_integer_value(json_object_get(v, "oldest_ms"));
        size_t n = hex != NULL ? strlen(hex) : 0;
        if (n == 0 || n % 2 != 0 || n > 2 * GW_MAX_TENANT_NAME || moat_hex_decode(hex, n, name, MOAT_HEX_LOWER) != 0)
            continue;
        name[n / 2] = '\0';
        c->pending += (uint64_t)json_integer_value(json_object_get(v, "pending"));
        t = json_pack("{s:s, s:O, s:O, s:O, s:I}", "tenant", name, "waiting", json_object_get(v, "waiting"), "bytes",
                      json_object_get(v, "bytes"), "pending", json_object_get(v, "pending"), "oldest_s",
                      (json_int_t)(to > 0 && now > to ? (now - to) / 1000 : 0));
        if (t != NULL)
            json_array_append_new(tenants, t);
    }
    json_array_foreach(json_object_get(o, "consumers"), i, v) if (!json_is_true(json_object_get(v, "alive"))) c->pending_dead +=
        (uint64_t)json_integer_value(json_object_get(v, "pending"));
    json_object_set_new(o, "tenants", tenants);
    if (!json_is_array(json_object_get(o, "consumers")))
        json_object_set_new(o, "consumers", json_array());
    if (!json_is_array(json_object_get(o, "dead_recent")))
        json_object_set_new(o, "dead_recent", json_array());
    *detail = o;
    return 0;
}

static void on_counts(void *arg, const redisReply *rep)
{
    struct qr_call *k = arg;
    qr_counts_fn fn = (qr_counts_fn)k->fn;
    struct qr_counts c;
    json_t *detail = NULL;
    int ok = rep != NULL && rep->type == REDIS_REPLY_STRING && counts_decode(rep->str, rep->len, &c, &detail) == 0;

    if (rep != NULL && !ok)
        log_odd("counts", rep);
    fn(k->arg, ok ? &c : NULL, detail);
    json_decref(detail);
    free(k);
}

int queue_redis_counts(struct queue_redis *q, h2o_loop_t *loop, qr_counts_fn fn, void *arg)
{
    char shown[16];
    const char *args[8] = {q->k_wait, q->k_bytes, q->k_tenants, q->k_dead, q->stream_prefix, QR_GROUP, q->heartbeat_prefix, shown};

    snprintf(shown, sizeof(shown), "%d", QR_DEAD_SHOWN);
    return call_eval(call_new(q, (void *)fn, arg), loop, &counts_script, 4, 8, args, NULL, on_counts);
}

/* ----------------------------------------------------------- wake-ups */

struct qr_wake {
    void (*fn)(void *arg);
    void *arg;
};

static void on_wake(void *arg, const char *payload, size_t len)
{
    struct qr_wake *w = arg;

    (void)payload;
    (void)len;
    w->fn(w->arg);
}

int queue_redis_subscribe(struct queue_redis *q, h2o_loop_t *loop, void (*fn)(void *arg), void *arg)
{
    static struct qr_wake w; /* one dispatcher per process */

    w.fn = fn;
    w.arg = arg;
    return redis_client_subscribe(q->rc, loop, q->k_wake, on_wake, &w);
}

/* ------------------------------------------------------------ creation */

struct queue_redis *queue_redis_new(struct redis_client *rc, const struct qr_options *o, char *err, size_t errlen)
{
    const char *p = redis_client_prefix(rc);
    struct queue_redis *q;

    if (o->consumer == NULL || o->consumer[0] == '\0' || o->heartbeat_prefix == NULL || o->lease_ms == 0 || o->max_attempts == 0) {
        snprintf(err, errlen, "queue_redis: a consumer, its heartbeat, a lease and max_attempts are needed");
        return NULL;
    }
    if ((q = calloc(1, sizeof(*q))) == NULL || (q->consumer = strdup(o->consumer)) == NULL ||
        (q->heartbeat_prefix = strdup(o->heartbeat_prefix)) == NULL) {
        queue_redis_free(q);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    q->rc = rc;
    q->lease_ms = o->lease_ms;
    q->max_attempts = o->max_attempts;
    q->wait_replicas = o->wait_replicas;
    q->wait_ms = o->wait_ms;
    snprintf(q->k_wait, sizeof(q->k_wait), "%sq:w", p);
    snprintf(q->k_bytes, sizeof(q->k_bytes), "%sq:b", p);
    snprintf(q->k_ring, sizeof(q->k_ring), "%sq:ring", p);
    snprintf(q->k_tenants, sizeof(q->k_tenants), "%sq:t", p);
    snprintf(q->k_dead, sizeof(q->k_dead), "%sq:dead", p);
    snprintf(q->k_wake, sizeof(q->k_wake), "%sq:wake", p);
    snprintf(q->stream_prefix, sizeof(q->stream_prefix), "%sq:s:", p);
    redis_client_add_script(rc, &enqueue_script);
    redis_client_add_script(rc, &claim_script);
    redis_client_add_script(rc, &ack_script);
    redis_client_add_script(rc, &dead_script);
    redis_client_add_script(rc, &release_script);
    redis_client_add_script(rc, &counts_script);
    return q;
}

void queue_redis_free(struct queue_redis *q)
{
    if (q == NULL)
        return;
    free(q->consumer);
    free(q->heartbeat_prefix);
    free(q->held);
    free(q);
}
