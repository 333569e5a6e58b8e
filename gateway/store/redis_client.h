/*
 * redis_client.h - the gateway's asynchronous Redis client: one hiredis
 * connection per event loop (redis_h2o.c), bounded by timeouts, remade
 * after a loss, with the Lua scripts its users register loaded on each.
 * Theory of operation: redis_client.c.
 *
 * Users: the limiter (ratelimit_redis.c), the submissions queue
 * (queue_redis.c), the results store (judge0_store.c), the heartbeat
 * (redis_beat.c) and the supervisor's admin store (admin_store_redis.c).  A user never sees a redisAsyncContext: it sends a
 * script or a command on the connection of the loop it runs on and gets
 * the reply (or NULL: no answer) back on that loop.
 */
#ifndef GW_REDIS_CLIENT_H
#define GW_REDIS_CLIENT_H

#include <h2o.h>
#include <hiredis/hiredis.h>
#include <stddef.h>
#include <stdint.h>

#define REDIS_CLIENT_OWNER_MAX 64
#define REDIS_CLIENT_KEY_MAX   192

#define REDIS_CLIENT_MAX_SENTINELS 16
#define REDIS_CLIENT_WHY_MAX       192

/* A Sentinel: a numeric address and its port. */
struct redis_sentinel_addr {
    const char *host;
    unsigned port;
};

struct redis_client_options {
    const char *socket_path; /* a Unix socket, or NULL for host:port or Sentinels */
    const char *host;        /* a numeric IPv4 or IPv6 address (no resolver on the loop) */
    unsigned port;
    const char *password; /* AUTH with it on every connection; NULL: none */
    unsigned db;          /* SELECT it when not 0 */
    const char *prefix;   /* every key starts with it */
    uint64_t connect_timeout_ms;
    uint64_t timeout_ms; /* each command's answer */
    uint64_t lease_ms;   /* each connection's heartbeat key ("<prefix>o:<owner>") lives this long unless renewed */
    const char *what;    /* for log lines: what the connections are for ("decisions", ...) */
    /* or (socket_path and host NULL) the primary the Sentinels name
     * master: asked of them at each connection, checked with ROLE */
    const struct redis_sentinel_addr *sentinels;
    size_t nsentinels;
    const char *master;
    const char *sentinel_password; /* AUTH with it on each Sentinel; NULL: none */
};

/* A Lua script and its SHA-1 (redis_script_init), registered with a
 * client before its first connection (redis_client_add_script). */
struct redis_script {
    const char *body;
    char sha[41];
    struct redis_script *next; /* the client's */
};

struct redis_client;
struct redis_conn;

/* The reply to one command, on the connection's loop: reply NULL when none
 * came (not connected, timed out, the connection was lost, the client is
 * going away); an error reply is passed as it is (NOSCRIPT is handled
 * here).  The reply is hiredis': valid during the call only. */
typedef void (*redis_reply_fn)(void *arg, const redisReply *reply);

/* Copies what o points at; connects nothing yet.  NULL with err set. */
struct redis_client *redis_client_new(const struct redis_client_options *o, char *err, size_t errlen);

/* After every loop stopped (or on the only loop's thread): every command
 * still waiting is answered NULL. */
void redis_client_free(struct redis_client *rc);

/* s->sha from s->body (at start-up). */
void redis_script_init(struct redis_script *s);

/* Load s on every connection rc makes (before the first is made). */
void redis_client_add_script(struct redis_client *rc, struct redis_script *s);

/* The connection of loop (made and started on first use, on loop's
 * thread), or NULL out of memory.  Remembered as this thread's. */
struct redis_conn *redis_client_conn(struct redis_client *rc, h2o_loop_t *loop);

/* The connection this thread last took from rc, or NULL. */
struct redis_conn *redis_client_thread_conn(const struct redis_client *rc);

/* Connected and set up (AUTH, SELECT, scripts): 1 or 0. */
int redis_conn_ready(const struct redis_conn *c);

/* Connected or connecting: a command sent now is sent (answered, or
 * timed out), not refused at once.  1 or 0. */
int redis_conn_usable(const struct redis_conn *c);

/* Ready for lease_ms at least, so that every live gateway's heartbeat
 * key must exist by now (right after Redis restarts one may not yet). */
int redis_conn_settled(const struct redis_conn *c);

/* Down: how long until the next attempt (at least 1000 ms, for Retry-After). */
uint64_t redis_conn_retry_after_ms(const struct redis_conn *c);

/* Why the connection's last attempt failed (a refused AUTH, a timeout,
 * the server gone, ...), or "" when it has worked since (or is making
 * its first attempt).  On its loop's thread. */
const char *redis_conn_why(const struct redis_conn *c);

/* This connection's owner name ("<client id>.<index>.<generation>": a new
 * one for each reconnection) and its heartbeat key, kept alive while it
 * is up (every lease_ms / 3). */
const char *redis_conn_owner(const struct redis_conn *c);
const char *redis_conn_heartbeat(const struct redis_conn *c);

/* The client's key prefix and its random per-process id (16 hex digits). */
const char *redis_client_prefix(const struct redis_client *rc);
const char *redis_client_id(const struct redis_client *rc);
uint64_t redis_client_lease_ms(const struct redis_client *rc);

/* The process heartbeats' key prefix, "<prefix>g:" (redis_beat.c keeps
 * this process's key, that and redis_client_id, alive). */
const char *redis_client_beat_prefix(const struct redis_client *rc);

/* Has any connection failed since it last answered?  (A scrape, /readyz.) */
int redis_client_lost(struct redis_client *rc);

/*
 * Run s (EVALSHA; EVAL once if Redis forgot it) with nkeys keys then
 * args: nargs strings, binary-safe when lens is given.  0: sent, fn will
 * be called exactly once; -1: not sent (down, out of memory): fn is not
 * called.
 */
int redis_conn_eval(struct redis_conn *c, struct redis_script *s, int nkeys, int nargs, const char *const *args, const size_t *lens,
                    redis_reply_fn fn, void *arg);

/* Any command (argv[0] its name); fn NULL: nobody waits.  As eval. */
int redis_conn_command(struct redis_conn *c, int argc, const char *const *argv, const size_t *lens, redis_reply_fn fn, void *arg);

/*
 * A connection of its own on loop that stays SUBSCRIBEd to channel
 * (resubscribing after each reconnection): fn(arg, payload, len) for
 * every message, and fn(arg, NULL, 0) each time the subscription is made
 * (messages may have been missed while it was down).  0, or -1 out of
 * memory.  Freed with the client.
 */
typedef void (*redis_message_fn)(void *arg, const char *payload, size_t len);
int redis_client_subscribe(struct redis_client *rc, h2o_loop_t *loop, const char *channel, redis_message_fn fn, void *arg);

#endif /* GW_REDIS_CLIENT_H */
