/*
 * redis_sync.h - short, bounded, blocking calls to the Redis the limiter
 * section names, for the state several gateways share besides the limits:
 * Judge0 results (judge0_store.c) and live session counts
 * (session_registry.c).  Theory of operation: redis_sync.c.
 */
#ifndef GW_REDIS_SYNC_H
#define GW_REDIS_SYNC_H

#include <hiredis/hiredis.h>
#include <stddef.h>
#include <stdint.h>

#define REDIS_SYNC_INSTANCE_LEN 32 /* hex digits of this process's name */

struct redis_sync_options {
    const char *socket_path; /* a Unix socket, or NULL for host:port */
    const char *host;        /* a numeric address */
    unsigned port;
    const char *password; /* AUTH on every connection; NULL: none */
    unsigned db;          /* SELECT it when not 0 */
    const char *prefix;   /* every key starts with it */
    uint64_t connect_timeout_ms, timeout_ms;
    uint64_t lease_ms; /* this process's heartbeat key lives this long unless renewed */
};

/* A Lua script and its SHA-1 (filled by redis_sync_script_init). */
struct redis_sync_script {
    const char *body;
    char sha[41];
};

/* Fill sc->sha (at start-up, before any thread runs sc). */
void redis_sync_script_init(struct redis_sync_script *sc);

/*
 * Start (once, at start-up, before the workers): copies o, names this
 * process, and starts the heartbeat thread that keeps its key alive.
 * Connects nothing yet.  0, or -1 with err set.
 */
int redis_sync_start(const struct redis_sync_options *o, char *err, size_t errlen);

/* 1 once redis_sync_start succeeded. */
int redis_sync_enabled(void);

/* The key prefix, this process's name, and the heartbeat keys' prefix
 * ("<prefix>g:"; a process's key is that and its name). */
const char *redis_sync_prefix(void);
const char *redis_sync_instance(void);
const char *redis_sync_heartbeat_prefix(void);

/* Run sc with keys and args (binary-safe: lens[i] bytes each; NULL lens:
 * C strings) on this thread's connection: the reply (freeReplyObject), or
 * NULL: Redis could not be asked now or answered an error (logged). */
redisReply *redis_sync_eval(struct redis_sync_script *sc, int nkeys, int nargs, const char *const *argv, const size_t *lens);

/* Is this thread's connection up (connecting when it may)?  1 or 0. */
int redis_sync_ready(void);

/* Has this thread's connection been up for lease_ms (so that a live
 * gateway's heartbeat key must exist)?  1 or 0. */
int redis_sync_settled(void);

/* A round trip (PING) on this thread's connection: 1 if Redis answered. */
int redis_sync_ping(void);

/* How long to tell a client to wait after a failure (>= 1000 ms). */
uint64_t redis_sync_retry_after_ms(void);

/* fn is called by the heartbeat thread after each beat (session_registry.c
 * republishes its counts, judge0_store.c retries the puts that failed).
 * Added before redis_sync_start; 0, or -1 past REDIS_SYNC_MAX_HOOKS. */
#define REDIS_SYNC_MAX_HOOKS 4
int redis_sync_on_beat(void (*fn)(void));

#endif /* GW_REDIS_SYNC_H */
