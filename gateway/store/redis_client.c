/*
 * redis_client.c - the gateway's asynchronous Redis client (see
 * redis_client.h).
 *
 * Theory of operation
 * -------------------
 * Connections.  One redisAsyncContext per event loop (redis_h2o.c), made
 * on the loop's first use, on its own thread, and only ever touched there.
 * While connecting, commands queue in hiredis behind the setup and count
 * against their own timeout.  Each connection is set up before it counts as ready: AUTH (a
 * password), SELECT (a database), then SCRIPT LOAD of every script its
 * users registered; an error reply to any of them drops the connection.
 *
 * Owners.  Each connection has a name, "<client id>.<index>.<generation>"
 * (a random id per process, the connection's number, and how many times it
 * was made), and a heartbeat key P o:<owner> with a TTL of lease_ms,
 * renewed every lease_ms / 3 while the connection is up.  State that must
 * come back by itself when a gateway dies (the limiter's in-flight slots)
 * is held in an owner's name: lease_ms after the last beat it is gone.  A
 * reconnection is a new owner, so an answer lost with the old connection
 * cannot pin anything for ever.
 *
 * Unreachable Redis.  Each command has a timer of timeout_ms; a connect,
 * of connect_timeout_ms.  A timeout or a lost connection drops the
 * connection: hiredis answers every pending command with no reply, and
 * each of those is passed on as NULL; the loop's tick (every
 * GW_REDIS_TICK_MS) reconnects after a backoff doubling from
 * GW_REDIS_BACKOFF_MIN_MS to GW_REDIS_BACKOFF_MAX_MS.  Until then a
 * command is not sent at all (-1): the caller answers at once, never
 * waits for a dead Redis.  The first failure after a success is logged,
 * and the recovery; nothing in between.
 *
 * Scripts go as EVALSHA; a NOSCRIPT (Redis restarted under a live
 * connection, SCRIPT FLUSH) sends the same call once more as EVAL, from a
 * copy of its arguments kept for that.
 *
 * Subscribers.  A SUBSCRIBEd connection can carry nothing else, so each
 * subscription is a connection of its own on the loop, without scripts,
 * heartbeat or command timers, resubscribing after every reconnection;
 * its user hears of each (re)subscription, since messages sent meanwhile
 * are lost (publish is fire and forget: a wake-up, never the data).
 *
 * Threads: a connection and its calls belong to their loop's thread; the
 * list of connections is shared (a mutex), and `lost` is read by scrapes
 * (atomics).  redis_client_free must run after the loops have stopped.
 */
#include "redis_client.h"
#include "common/gw_limits.h"
#include "log.h"
#include "moat_hex.h"
#include "redis_h2o.h"

#include <hiredis/async.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <arpa/inet.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct redis_conn {
    struct redis_client *rc;
    struct redis_conn *next;
    h2o_loop_t *loop;
    unsigned index;         /* which connection of this process: part of the owner's name */
    unsigned gen;           /* connections made so far: the other part */
    redisAsyncContext *ac;  /* NULL: down */
    int up;                 /* the connect completed */
    int ready;              /* and the setup is through */
    uint64_t ready_since;   /* when it last became ready */
    int lost;               /* has been down since the last success (log the recovery); __atomic */
    redisAsyncContext *sac; /* asking a Sentinel for the primary; NULL: not */
    char host[64];          /* where the connection goes (the primary the Sentinels named) */
    unsigned port;
    char owner[REDIS_CLIENT_OWNER_MAX];
    char heartbeat[REDIS_CLIENT_KEY_MAX];
    char why[REDIS_CLIENT_WHY_MAX]; /* why the last attempt failed; "" since the last success */
    uint64_t next_attempt, backoff_ms, connect_deadline, next_heartbeat;
    h2o_timeout_t cmd_timeout;
    h2o_timeout_t tick_timeout;
    h2o_timeout_entry_t tick;
    /* a subscriber: the channel and whom to tell; NULL for a command connection */
    char *channel;
    redis_message_fn on_message;
    void *message_arg;
};

/* One command's wait for its answer. */
struct redis_call {
    struct redis_conn *c;
    h2o_timeout_entry_t timer;
    redis_reply_fn fn;
    void *arg;
    struct redis_script *script; /* NULL: a plain command */
    int evaled;                  /* sent again as EVAL after NOSCRIPT */
    int argc;                    /* of argv below: the script's numkeys, keys and args */
    const char **argv;
    size_t *lens; /* argv and its bytes live after this struct */
};

struct redis_client {
    char *socket_path, *host, *password, *prefix, *what;
    unsigned port, db;
    /* Sentinels (nsentinels > 0): whom to ask for master's primary, and
     * the answer last given (mu; known 0: ask again) */
    struct {
        char host[64];
        unsigned port;
    } sentinels[REDIS_CLIENT_MAX_SENTINELS];
    size_t nsentinels;
    char *master, *sentinel_password;
    pthread_mutex_t primary_mu; /* the four below (conn_start runs under mu) */
    char primary_host[64];
    unsigned primary_port, next_sentinel;
    int primary_known;
    uint64_t connect_timeout_ms, timeout_ms, lease_ms;
    char id[17];
    char beat_prefix[GW_REDIS_MAX_PREFIX + 3];
    struct redis_script *scripts;
    pthread_mutex_t mu; /* conns, nconns */
    struct redis_conn *conns;
    unsigned nconns;
};

/* The connection this thread last took, and whose client it belongs to. */
static __thread struct redis_conn *tls_conn;
static __thread const struct redis_client *tls_client;

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static uint64_t min_u64(uint64_t a, uint64_t b)
{
    return a < b ? a : b;
}

/* ------------------------------------------------------------ connections */

/* Note why c is down (for redis_conn_why), and when to try again. */
static void schedule_retry(struct redis_conn *c, const char *why)
{
    if (why != NULL)
        snprintf(c->why, sizeof(c->why), "%s", why);
    c->next_attempt = now_ms() + c->backoff_ms;
    c->backoff_ms = min_u64(c->backoff_ms * 2, GW_REDIS_BACKOFF_MAX_MS);
}

static const char *redis_name(const struct redis_conn *c, char *buf, size_t len)
{
    const struct redis_client *rc = c->rc;

    if (rc->socket_path != NULL)
        return rc->socket_path;
    if (rc->nsentinels == 0)
        snprintf(buf, len, "%s port %u", c->host, c->port);
    else if (c->host[0] != '\0')
        snprintf(buf, len, "%s port %u (primary of %s)", c->host, c->port, rc->master);
    else
        snprintf(buf, len, "the primary of %s (the Sentinels)", rc->master);
    return buf;
}

/* The primary the Sentinels named is in doubt (its connection failed, it
 * is not the primary any more): the next connection asks them again. */
static void primary_doubted(const struct redis_conn *c)
{
    struct redis_client *rc = c->rc;

    if (rc->nsentinels == 0)
        return;
    pthread_mutex_lock(&rc->primary_mu);
    if (rc->primary_known && strcmp(rc->primary_host, c->host) == 0 && rc->primary_port == c->port)
        rc->primary_known = 0;
    pthread_mutex_unlock(&rc->primary_mu);
}

/* Mark c down (logged once per outage) and schedule the next attempt. */
static void conn_lost(struct redis_conn *c, const char *why)
{
    char name[96];

    c->ac = NULL;
    c->up = 0;
    c->ready = 0;
    primary_doubted(c);
    if (!c->lost && why != NULL)
        log_warnx("redis_client: Redis at %s: %s; %s wait until it answers again", redis_name(c, name, sizeof(name)), why,
                  c->rc->what);
    __atomic_store_n(&c->lost, 1, __ATOMIC_RELAXED);
    schedule_retry(c, why);
}

/* Give up on the connection: every pending command is answered (no reply),
 * and the tick reconnects later. */
static void conn_drop(struct redis_conn *c, const char *why)
{
    redisAsyncContext *ac = c->ac;

    if (ac == NULL)
        return;
    conn_lost(c, why);
    redisAsyncFree(ac); /* deferred by hiredis when called from one of its callbacks */
}

static void on_connect(const redisAsyncContext *ac, int status)
{
    struct redis_conn *c = ac->data;

    if (c == NULL || c->ac != ac)
        return;
    if (status != REDIS_OK) {
        conn_lost(c, ac->errstr); /* hiredis frees ac after this returns (and answers what was queued) */
        return;
    }
    c->up = 1; /* ready once the setup is through (on_setup_reply) */
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    struct redis_conn *c = ac->data;

    (void)status;
    if (c == NULL || c->ac != ac)
        return; /* we dropped it ourselves */
    conn_lost(c, ac->errstr != NULL && ac->err ? ac->errstr : "the connection was closed");
}

static void conn_works(struct redis_conn *c)
{
    char name[96];

    c->ready = 1;
    c->why[0] = '\0';
    c->ready_since = now_ms();
    c->backoff_ms = GW_REDIS_BACKOFF_MIN_MS;
    if (c->lost)
        log_info("redis_client: Redis at %s answers again (%s)", redis_name(c, name, sizeof(name)), c->rc->what);
    __atomic_store_n(&c->lost, 0, __ATOMIC_RELAXED);
}

/* A setup step's answer (step: its name, a literal; the last one is
 * flagged by a NULL next in the script list or by SUBSCRIBE). */
struct setup_step {
    const char *name;
    int last;
};

static const struct setup_step step_auth = {"AUTH", 0}, step_select = {"SELECT", 0}, step_role = {"ROLE", 0},
                               step_script = {"SCRIPT LOAD", 0}, step_last_script = {"SCRIPT LOAD", 1}, step_ping = {"PING", 1};

/* Is rep ROLE's answer of a primary? */
static int role_primary(const redisReply *rep)
{
    return rep->type == REDIS_REPLY_ARRAY && rep->elements >= 1 && rep->element[0]->type == REDIS_REPLY_STRING &&
           strcmp(rep->element[0]->str, "master") == 0;
}

static void on_setup_reply(redisAsyncContext *ac, void *reply, void *arg)
{
    struct redis_conn *c = ac->data;
    const struct setup_step *step = arg;
    const redisReply *rep = reply;
    char why[256];

    if (rep == NULL || c == NULL || c->ac != ac)
        return;
    if (step == &step_role && rep->type != REDIS_REPLY_ERROR && !role_primary(rep)) {
        conn_drop(c, "the Sentinels named a server that is not the primary (ROLE): asking them again");
        return;
    }
    if (rep->type != REDIS_REPLY_ERROR) {
        if (step->last)
            conn_works(c);
        return;
    }
    snprintf(why, sizeof(why), "%s refused: %.*s", step->name, (int)min_u64(rep->len, 160), rep->str);
    conn_drop(c, why);
}

/* A subscriber's every message, and the answers to its SUBSCRIBE. */
static void on_subscribed(redisAsyncContext *ac, void *reply, void *arg)
{
    struct redis_conn *c = ac->data;
    const redisReply *rep = reply;

    (void)arg;
    if (rep == NULL || c == NULL || c->ac != ac)
        return;
    if (rep->type == REDIS_REPLY_ERROR) {
        char why[256];
        snprintf(why, sizeof(why), "SUBSCRIBE refused: %.*s", (int)min_u64(rep->len, 160), rep->str);
        conn_drop(c, why);
        return;
    }
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 3 || rep->element[0]->type != REDIS_REPLY_STRING)
        return;
    if (strcmp(rep->element[0]->str, "subscribe") == 0) {
        conn_works(c);
        c->on_message(c->message_arg, NULL, 0);
    } else if (strcmp(rep->element[0]->str, "message") == 0 && rep->element[2]->type == REDIS_REPLY_STRING) {
        c->on_message(c->message_arg, rep->element[2]->str, rep->element[2]->len);
    }
}

static void setup_command(struct redis_conn *c, const struct setup_step *step, int argc, const char **argv)
{
    (void)redisAsyncCommandArgv(c->ac, on_setup_reply, (void *)(uintptr_t)step, argc, argv, NULL);
}

/* Open the connection to c->host (or the socket); queue its setup on it. */
static void conn_open(struct redis_conn *c)
{
    struct redis_client *rc = c->rc;
    redisAsyncContext *ac =
        rc->socket_path != NULL ? redisAsyncConnectUnix(rc->socket_path) : redisAsyncConnect(c->host, (int)c->port);
    char db[16];

    if (ac == NULL || ac->err || redis_h2o_attach(ac, c->loop) != REDIS_OK) {
        char name[96];
        if (!c->lost)
            log_warnx("redis_client: Redis at %s: %s", redis_name(c, name, sizeof(name)),
                      ac != NULL && ac->err ? ac->errstr : "out of memory");
        __atomic_store_n(&c->lost, 1, __ATOMIC_RELAXED);
        schedule_retry(c, ac != NULL && ac->err ? ac->errstr : "out of memory");
        if (ac != NULL)
            redisAsyncFree(ac);
        return;
    }
    ac->data = c;
    c->ac = ac;
    c->up = 0;
    c->ready = 0;
    c->gen++;
    snprintf(c->owner, sizeof(c->owner), "%s.%u.%u", rc->id, c->index, c->gen);
    snprintf(c->heartbeat, sizeof(c->heartbeat), "%so:%s", rc->prefix, c->owner);
    c->connect_deadline = now_ms() + rc->connect_timeout_ms;
    c->next_heartbeat = 0;
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    if (rc->password != NULL)
        setup_command(c, &step_auth, 2, (const char *[]){"AUTH", rc->password});
    if (rc->db != 0) {
        snprintf(db, sizeof(db), "%u", rc->db);
        setup_command(c, &step_select, 2, (const char *[]){"SELECT", db});
    }
    if (rc->nsentinels > 0)
        setup_command(c, &step_role, 1, (const char *[]){"ROLE"});
    if (c->channel != NULL) {
        (void)redisAsyncCommandArgv(ac, on_subscribed, NULL, 2, (const char *[]){"SUBSCRIBE", c->channel}, NULL);
        return;
    }
    for (struct redis_script *s = rc->scripts; s != NULL; s = s->next)
        setup_command(c, s->next == NULL ? &step_last_script : &step_script, 3, (const char *[]){"SCRIPT", "LOAD", s->body});
    if (rc->scripts == NULL)
        setup_command(c, &step_ping, 1, (const char *[]){"PING"});
}

/* ------------------------------------------------------------ Sentinels */

/* Asking a Sentinel failed: log it once per outage, try again (the next
 * Sentinel in turn) after the backoff. */
static void sentinel_failed(struct redis_conn *c, const char *why)
{
    char name[96];

    if (!c->lost)
        log_warnx("redis_client: Redis at %s: %s; %s wait until it answers again", redis_name(c, name, sizeof(name)), why,
                  c->rc->what);
    __atomic_store_n(&c->lost, 1, __ATOMIC_RELAXED);
    schedule_retry(c, why);
}

/* Drop the Sentinel connection (its callbacks see c->sac no longer theirs). */
static void sentinel_drop(struct redis_conn *c)
{
    redisAsyncContext *ac = c->sac;

    c->sac = NULL;
    if (ac != NULL)
        redisAsyncFree(ac); /* deferred by hiredis inside its callbacks */
}

static int numeric_address(const char *s)
{
    unsigned char a[16];

    return inet_pton(AF_INET, s, a) == 1 || inet_pton(AF_INET6, s, a) == 1;
}

/* SENTINEL get-master-addr-by-name's answer: the primary's address. */
static void on_primary_named(redisAsyncContext *ac, void *reply, void *arg)
{
    struct redis_conn *c = ac->data;
    struct redis_client *rc;
    const redisReply *rep = reply;
    char why[192];
    unsigned long port;
    char *end;

    (void)arg;
    if (c == NULL || c->sac != ac)
        return;
    rc = c->rc;
    sentinel_drop(c);
    if (rep == NULL || rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 || rep->element[0]->type != REDIS_REPLY_STRING ||
        rep->element[1]->type != REDIS_REPLY_STRING) {
        snprintf(why, sizeof(why), "a Sentinel %s",
                 rep == NULL                      ? "did not answer"
                 : rep->type == REDIS_REPLY_ERROR ? rep->str
                                                  : "does not know that master");
        sentinel_failed(c, why);
        return;
    }
    port = strtoul(rep->element[1]->str, &end, 10);
    if (!numeric_address(rep->element[0]->str) || rep->element[0]->len >= sizeof(c->host) || *end != '\0' || port == 0 ||
        port > 65535) {
        sentinel_failed(c, "a Sentinel named the primary by a name, not a numeric address (no resolver on the loop)");
        return;
    }
    snprintf(c->host, sizeof(c->host), "%s", rep->element[0]->str);
    c->port = (unsigned)port;
    pthread_mutex_lock(&rc->primary_mu);
    snprintf(rc->primary_host, sizeof(rc->primary_host), "%s", c->host);
    rc->primary_port = c->port;
    rc->primary_known = 1;
    pthread_mutex_unlock(&rc->primary_mu);
    conn_open(c);
}

static void on_sentinel_connect(const redisAsyncContext *ac, int status)
{
    struct redis_conn *c = ac->data;

    if (c == NULL || c->sac != ac || status == REDIS_OK)
        return;
    c->sac = NULL; /* hiredis frees ac after this returns */
    sentinel_failed(c, ac->errstr[0] != '\0' ? ac->errstr : "a Sentinel refused the connection");
}

static void on_sentinel_disconnect(const redisAsyncContext *ac, int status)
{
    struct redis_conn *c = ac->data;

    (void)status;
    if (c == NULL || c->sac != ac)
        return;
    c->sac = NULL;
    sentinel_failed(c, "a Sentinel closed the connection");
}

/* Ask the next Sentinel in turn where the primary is (on_primary_named). */
static void ask_sentinel(struct redis_conn *c)
{
    struct redis_client *rc = c->rc;
    redisAsyncContext *ac;
    unsigned i;

    pthread_mutex_lock(&rc->primary_mu);
    i = rc->next_sentinel++ % (unsigned)rc->nsentinels;
    pthread_mutex_unlock(&rc->primary_mu);
    c->host[0] = '\0';
    ac = redisAsyncConnect(rc->sentinels[i].host, (int)rc->sentinels[i].port);
    if (ac == NULL || ac->err || redis_h2o_attach(ac, c->loop) != REDIS_OK) {
        if (ac != NULL)
            redisAsyncFree(ac);
        sentinel_failed(c, "cannot reach a Sentinel");
        return;
    }
    ac->data = c;
    c->sac = ac;
    c->connect_deadline = now_ms() + rc->connect_timeout_ms;
    redisAsyncSetConnectCallback(ac, on_sentinel_connect);
    redisAsyncSetDisconnectCallback(ac, on_sentinel_disconnect);
    if (rc->sentinel_password != NULL)
        (void)redisAsyncCommandArgv(ac, NULL, NULL, 2, (const char *[]){"AUTH", rc->sentinel_password}, NULL);
    (void)redisAsyncCommandArgv(ac, on_primary_named, NULL, 3, (const char *[]){"SENTINEL", "get-master-addr-by-name", rc->master},
                                NULL);
}

/* Start a connection: to the configured server, or to the primary the
 * Sentinels named last (asking them first when that is in doubt). */
static void conn_start(struct redis_conn *c)
{
    struct redis_client *rc = c->rc;
    int known = 0;

    if (rc->nsentinels == 0) {
        conn_open(c);
        return;
    }
    pthread_mutex_lock(&rc->primary_mu);
    if (rc->primary_known) {
        known = 1;
        snprintf(c->host, sizeof(c->host), "%s", rc->primary_host);
        c->port = rc->primary_port;
    }
    pthread_mutex_unlock(&rc->primary_mu);
    if (known)
        conn_open(c);
    else
        ask_sentinel(c);
}

static void send_heartbeat(struct redis_conn *c)
{
    char px[24];

    snprintf(px, sizeof(px), "%llu", (unsigned long long)c->rc->lease_ms);
    (void)redisAsyncCommandArgv(c->ac, NULL, NULL, 5, (const char *[]){"SET", c->heartbeat, "1", "PX", px}, NULL);
}

/* Every GW_REDIS_TICK_MS: reconnect when due, give up a slow connect, renew the heartbeat. */
static void on_tick(h2o_timeout_entry_t *entry)
{
    struct redis_conn *c = H2O_STRUCT_FROM_MEMBER(struct redis_conn, tick, entry);
    uint64_t now = now_ms();

    if (c->sac != NULL && now >= c->connect_deadline) {
        sentinel_drop(c);
        sentinel_failed(c, "a Sentinel did not answer in time");
    } else if (c->ac == NULL && c->sac == NULL && now >= c->next_attempt)
        conn_start(c);
    else if (c->ac != NULL && !c->ready && now >= c->connect_deadline)
        conn_drop(c, "connect timed out");
    else if (c->ac != NULL && c->ready && c->channel == NULL && now >= c->next_heartbeat) {
        send_heartbeat(c);
        c->next_heartbeat = now + c->rc->lease_ms / 3;
    }
    h2o_timeout_link(c->loop, &c->tick_timeout, &c->tick);
}

/* A new connection on loop, linked and started (lock held). */
static struct redis_conn *conn_new(struct redis_client *rc, h2o_loop_t *loop)
{
    struct redis_conn *c = calloc(1, sizeof(*c));

    if (c == NULL)
        return NULL;
    c->rc = rc;
    c->loop = loop;
    c->index = rc->nconns++;
    c->backoff_ms = GW_REDIS_BACKOFF_MIN_MS;
    if (rc->host != NULL) {
        snprintf(c->host, sizeof(c->host), "%s", rc->host);
        c->port = rc->port;
    }
    c->next = rc->conns;
    rc->conns = c;
    h2o_timeout_init(loop, &c->cmd_timeout, rc->timeout_ms);
    h2o_timeout_init(loop, &c->tick_timeout, GW_REDIS_TICK_MS);
    c->tick.cb = on_tick;
    h2o_timeout_link(loop, &c->tick_timeout, &c->tick);
    return c;
}

struct redis_conn *redis_client_conn(struct redis_client *rc, h2o_loop_t *loop)
{
    struct redis_conn *c;

    if (tls_client == rc && tls_conn != NULL && tls_conn->loop == loop)
        return tls_conn;
    pthread_mutex_lock(&rc->mu);
    for (c = rc->conns; c != NULL && (c->loop != loop || c->channel != NULL); c = c->next)
        ;
    if (c == NULL && (c = conn_new(rc, loop)) != NULL)
        conn_start(c);
    pthread_mutex_unlock(&rc->mu);
    if (c != NULL) {
        tls_client = rc;
        tls_conn = c;
    }
    return c;
}

struct redis_conn *redis_client_thread_conn(const struct redis_client *rc)
{
    return tls_client == rc ? tls_conn : NULL;
}

int redis_client_subscribe(struct redis_client *rc, h2o_loop_t *loop, const char *channel, redis_message_fn fn, void *arg)
{
    struct redis_conn *c;
    char *name = strdup(channel);

    if (name == NULL)
        return -1;
    pthread_mutex_lock(&rc->mu);
    if ((c = conn_new(rc, loop)) != NULL) {
        c->channel = name;
        c->on_message = fn;
        c->message_arg = arg;
        conn_start(c);
    }
    pthread_mutex_unlock(&rc->mu);
    if (c == NULL)
        free(name);
    return c != NULL ? 0 : -1;
}

int redis_conn_ready(const struct redis_conn *c)
{
    return c != NULL && c->ac != NULL && c->ready;
}

int redis_conn_usable(const struct redis_conn *c)
{
    return c != NULL && c->ac != NULL;
}

int redis_conn_settled(const struct redis_conn *c)
{
    return redis_conn_ready(c) && now_ms() - c->ready_since >= c->rc->lease_ms;
}

uint64_t redis_conn_retry_after_ms(const struct redis_conn *c)
{
    uint64_t now = now_ms();

    if (c != NULL && c->ac == NULL && c->next_attempt > now + 1000)
        return c->next_attempt - now;
    return 1000;
}

const char *redis_conn_why(const struct redis_conn *c)
{
    return c->why;
}

const char *redis_conn_owner(const struct redis_conn *c)
{
    return c->owner;
}

const char *redis_conn_heartbeat(const struct redis_conn *c)
{
    return c->heartbeat;
}

const char *redis_client_prefix(const struct redis_client *rc)
{
    return rc->prefix;
}

const char *redis_client_id(const struct redis_client *rc)
{
    return rc->id;
}

uint64_t redis_client_lease_ms(const struct redis_client *rc)
{
    return rc->lease_ms;
}

const char *redis_client_beat_prefix(const struct redis_client *rc)
{
    return rc->beat_prefix;
}

int redis_client_lost(struct redis_client *rc)
{
    int lost = 0;

    pthread_mutex_lock(&rc->mu);
    for (const struct redis_conn *c = rc->conns; c != NULL; c = c->next)
        lost |= __atomic_load_n(&c->lost, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&rc->mu);
    return lost;
}

/* ------------------------------------------------------------ commands */

static void on_reply(redisAsyncContext *ac, void *reply, void *arg);

/* Send k (EVAL or EVALSHA by k->evaled for a script): 0, or -1 not sent. */
static int call_send(struct redis_call *k)
{
    struct redis_conn *c = k->c;
    const char *argv[3 + 64];
    size_t lens[3 + 64];
    const char **av = argv;
    size_t *lv = lens;
    int argc = k->argc, rc;

    if (c->ac == NULL)
        return -1;
    if (k->script == NULL) {
        rc = redisAsyncCommandArgv(c->ac, on_reply, k, argc, k->argv, k->lens);
    } else {
        if (argc + 2 > (int)(sizeof(argv) / sizeof(argv[0])))
            return -1;
        av[0] = k->evaled ? "EVAL" : "EVALSHA";
        lv[0] = strlen(av[0]);
        av[1] = k->evaled ? k->script->body : k->script->sha;
        lv[1] = strlen(av[1]);
        memcpy(av + 2, k->argv, (size_t)argc * sizeof(*av));
        memcpy(lv + 2, k->lens, (size_t)argc * sizeof(*lv));
        rc = redisAsyncCommandArgv(c->ac, on_reply, k, argc + 2, av, lv);
    }
    if (rc != REDIS_OK)
        return -1;
    h2o_timeout_link(c->loop, &c->cmd_timeout, &k->timer);
    return 0;
}

/* k's answer came (reply NULL: the connection went away first). */
static void on_reply(redisAsyncContext *ac, void *reply, void *arg)
{
    struct redis_call *k = arg;
    const redisReply *rep = reply;

    (void)ac;
    h2o_timeout_unlink(&k->timer);
    if (rep != NULL && k->script != NULL && rep->type == REDIS_REPLY_ERROR && !k->evaled && strncmp(rep->str, "NOSCRIPT", 8) == 0) {
        k->evaled = 1; /* Redis forgot the script (restart, SCRIPT FLUSH): EVAL loads it again */
        if (call_send(k) == 0)
            return;
        rep = NULL;
    }
    if (k->fn != NULL)
        k->fn(k->arg, rep);
    if (rep != NULL && rep->type == REDIS_REPLY_ERROR && strncmp(rep->str, "READONLY", 8) == 0)
        conn_drop(k->c, "the server is a replica now (READONLY): looking for the primary again");
    free(k);
}

/* No answer within timeout_ms: the connection is of no use (its pending
 * commands, this one included, are answered as it goes). */
static void on_call_timeout(h2o_timeout_entry_t *entry)
{
    struct redis_call *k = H2O_STRUCT_FROM_MEMBER(struct redis_call, timer, entry);
    char why[96];

    snprintf(why, sizeof(why), "no answer within %llu ms", (unsigned long long)k->c->rc->timeout_ms);
    conn_drop(k->c, why);
}

/* A call holding a copy of argv (argc strings, lens or strlen). */
static struct redis_call *call_new(struct redis_conn *c, struct redis_script *s, int argc, const char *const *argv,
                                   const size_t *lens, redis_reply_fn fn, void *arg)
{
    size_t bytes = 0, off;
    struct redis_call *k;
    char *p;

    if (argc <= 0 || argc > 64)
        return NULL;
    for (int i = 0; i < argc; i++)
        bytes += lens != NULL ? lens[i] : strlen(argv[i]);
    off = sizeof(*k) + (size_t)argc * (sizeof(char *) + sizeof(size_t));
    if ((k = calloc(1, off + bytes + (size_t)argc)) == NULL)
        return NULL;
    k->c = c;
    k->fn = fn;
    k->arg = arg;
    k->script = s;
    k->argc = argc;
    k->argv = (const char **)(void *)(k + 1);
    k->lens = (size_t *)(void *)(k->argv + argc);
    k->timer.cb = on_call_timeout;
    p = (char *)k + off;
    for (int i = 0; i < argc; i++) {
        size_t n = lens != NULL ? lens[i] : strlen(argv[i]);
        memcpy(p, argv[i], n);
        p[n] = '\0';
        k->argv[i] = p;
        k->lens[i] = n;
        p += n + 1;
    }
    return k;
}

static int call_start(struct redis_call *k)
{
    if (k == NULL)
        return -1;
    if (call_send(k) != 0) {
        free(k);
        return -1;
    }
    return 0;
}

int redis_conn_eval(struct redis_conn *c, struct redis_script *s, int nkeys, int nargs, const char *const *args, const size_t *lens,
                    redis_reply_fn fn, void *arg)
{
    const char *argv[64];
    size_t lv[64];
    char nk[16];
    int argc = nargs + 1;

    if (c == NULL || c->ac == NULL || nkeys < 0 || nkeys > nargs || argc > 64)
        return -1;
    snprintf(nk, sizeof(nk), "%d", nkeys);
    argv[0] = nk;
    lv[0] = strlen(nk);
    for (int i = 0; i < nargs; i++) {
        argv[i + 1] = args[i];
        lv[i + 1] = lens != NULL ? lens[i] : strlen(args[i]);
    }
    return call_start(call_new(c, s, argc, argv, lv, fn, arg));
}

int redis_conn_command(struct redis_conn *c, int argc, const char *const *argv, const size_t *lens, redis_reply_fn fn, void *arg)
{
    if (c == NULL || c->ac == NULL)
        return -1;
    return call_start(call_new(c, NULL, argc, argv, lens, fn, arg));
}

/* ------------------------------------------------------------ creation */

void redis_script_init(struct redis_script *s)
{
    unsigned char digest[SHA_DIGEST_LENGTH];

    SHA1((const unsigned char *)s->body, strlen(s->body), digest);
    moat_hex_encode(digest, sizeof(digest), s->sha);
}

void redis_client_add_script(struct redis_client *rc, struct redis_script *s)
{
    struct redis_script **p = &rc->scripts;

    redis_script_init(s);
    while (*p != NULL && *p != s)
        p = &(*p)->next;
    if (*p == NULL) {
        s->next = NULL;
        *p = s; /* in order: the last one loaded says the setup is through */
    }
}

static int copy_opt(const char *s, char **out)
{
    return s == NULL || (*out = strdup(s)) != NULL ? 0 : -1;
}

static void client_free_fields(struct redis_client *rc)
{
    free(rc->socket_path);
    free(rc->host);
    if (rc->password != NULL) {
        OPENSSL_cleanse(rc->password, strlen(rc->password));
        free(rc->password);
    }
    free(rc->prefix);
    free(rc->what);
    free(rc->master);
    if (rc->sentinel_password != NULL) {
        OPENSSL_cleanse(rc->sentinel_password, strlen(rc->sentinel_password));
        free(rc->sentinel_password);
    }
    pthread_mutex_destroy(&rc->mu);
    pthread_mutex_destroy(&rc->primary_mu);
    free(rc);
}

static void name_this_process(struct redis_client *rc)
{
    unsigned char id[8];

    if (RAND_bytes(id, sizeof(id)) != 1) {
        /* a weaker name still differs per process and start */
        unsigned long long v = (unsigned long long)getpid() << 32 ^ now_ms();
        memcpy(id, &v, sizeof(id));
    }
    moat_hex_encode(id, sizeof(id), rc->id);
}

struct redis_client *redis_client_new(const struct redis_client_options *o, char *err, size_t errlen)
{
    struct redis_client *rc;
    const char *why = NULL;

    if ((o->socket_path != NULL) + (o->host != NULL) + (o->nsentinels > 0) != 1)
        why = "name either a Unix socket, a host or Sentinels";
    else if (o->nsentinels > REDIS_CLIENT_MAX_SENTINELS || (o->nsentinels > 0 && (o->master == NULL || o->master[0] == '\0')))
        why = "too many Sentinels, or no master name";
    else if (o->host != NULL && strlen(o->host) >= sizeof(((struct redis_conn *)0)->host))
        why = "the host is too long";
    else if (o->prefix == NULL || strlen(o->prefix) > GW_REDIS_MAX_PREFIX)
        why = "bad key prefix";
    else if (o->timeout_ms == 0 || o->connect_timeout_ms == 0 || o->lease_ms < 3)
        why = "timeouts and the lease must be positive";
    if (why != NULL) {
        snprintf(err, errlen, "%s", why);
        return NULL;
    }
    if ((rc = calloc(1, sizeof(*rc))) == NULL || pthread_mutex_init(&rc->mu, NULL) != 0 ||
        pthread_mutex_init(&rc->primary_mu, NULL) != 0) {
        free(rc);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    rc->port = o->port;
    rc->db = o->db;
    rc->connect_timeout_ms = o->connect_timeout_ms;
    rc->timeout_ms = o->timeout_ms;
    rc->lease_ms = o->lease_ms;
    name_this_process(rc);
    for (size_t i = 0; i < o->nsentinels; i++) {
        if (strlen(o->sentinels[i].host) >= sizeof(rc->sentinels[i].host)) {
            client_free_fields(rc);
            snprintf(err, errlen, "a Sentinel's host is too long");
            return NULL;
        }
        snprintf(rc->sentinels[i].host, sizeof(rc->sentinels[i].host), "%s", o->sentinels[i].host);
        rc->sentinels[i].port = o->sentinels[i].port;
    }
    rc->nsentinels = o->nsentinels;
    snprintf(rc->beat_prefix, sizeof(rc->beat_prefix), "%sg:", o->prefix);
    if (copy_opt(o->socket_path, &rc->socket_path) != 0 || copy_opt(o->host, &rc->host) != 0 ||
        copy_opt(o->password, &rc->password) != 0 || copy_opt(o->prefix, &rc->prefix) != 0 ||
        copy_opt(o->what != NULL ? o->what : "commands", &rc->what) != 0 || copy_opt(o->master, &rc->master) != 0 ||
        copy_opt(o->sentinel_password, &rc->sentinel_password) != 0) {
        client_free_fields(rc);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    return rc;
}

void redis_client_free(struct redis_client *rc)
{
    struct redis_conn *c, *next;

    if (rc == NULL)
        return;
    for (c = rc->conns; c != NULL; c = next) {
        next = c->next;
        __atomic_store_n(&c->lost, 1, __ATOMIC_RELAXED); /* nothing to warn about */
        conn_drop(c, NULL);
        sentinel_drop(c);
        h2o_timeout_unlink(&c->tick);
        h2o_timeout_dispose(c->loop, &c->cmd_timeout);
        h2o_timeout_dispose(c->loop, &c->tick_timeout);
        if (tls_conn == c) {
            tls_conn = NULL;
            tls_client = NULL;
        }
        free(c->channel);
        free(c);
    }
    client_free_fields(rc);
}
