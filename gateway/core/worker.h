/*
 * worker.h - a worker thread and the configuration generation it serves
 * from, and the server they belong to: the types the whole gateway
 * reads, and the generation's references (worker.c).  Below the request
 * core; server.h starts and stops what is described here.
 */
#ifndef GW_WORKER_H
#define GW_WORKER_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <openssl/ssl.h>

#ifndef H2O_USE_LIBUV
#define H2O_USE_LIBUV 0
#endif
#include <h2o.h>

#include "link/audit_client.h"
#include "config/config.h"
#include "denials.h"
#include "moat_proto.h"
#include "limits/ratelimit.h"

struct gw_server;
struct gw_conn_table;

/*
 * One loaded configuration and the TLS context built from it.  Reference
 * counted: the server holds one reference while it is the current
 * generation, each worker one for the generation it serves new requests
 * from, and each request one for the generation it started with.  The last
 * release frees it, on whichever thread that happens.
 */
struct gw_generation {
    struct gw_config cfg;
    SSL_CTX *ssl_ctx;
    unsigned long refs; /* __atomic */
    unsigned serial;    /* 1 at start, +1 per successful reload */
};

/* Takes one more reference on a generation the caller already holds. */
void gw_generation_hold(struct gw_generation *gen);

/* Drops a reference; the last one frees the generation. */
void gw_generation_release(struct gw_generation *gen);

/* The server's current generation, with a reference for the caller (worker.c). */
struct gw_generation *gw_generation_current(struct gw_server *srv);

/*
 * One worker thread: its own evloop, listener (SO_REUSEPORT), timers and h2o
 * configuration (so that a reload changes h2o's settings on the worker's own
 * thread).  ctx comes first so a handler gets from req->conn->ctx to its
 * worker.
 */
struct gw_worker {
    h2o_context_t ctx;
    h2o_globalconf_t h2o;
    h2o_accept_ctx_t accept_ctx;
    h2o_timeout_t backend_timeout; /* backend.timeout_ms, on this loop */
    h2o_timeout_t metrics_timeout; /* metrics.backend_timeout_ms: a scrape's question to the backend */
    h2o_timeout_t group_timeout;   /* backend.timeout_ms + MOAT_MAX_TESTS_WALL_MS: a Judge0 batch's job compiled once */
    h2o_timeout_t session_tick;    /* GW_SESSION_TICK_MS: sessions' init deadlines, WebSockets' close grace */
    h2o_timeout_t watch_tick;      /* GW_WATCH_POLL_MS: watchers read their session's transcript */
    h2o_timeout_t watchdog_timeout;
    h2o_timeout_entry_t watchdog; /* conn.c: connection clocks and limits */
    struct gw_server *server;
    const struct gw_config *cfg; /* &gen->cfg: what new requests use */
    struct gw_generation *gen;   /* held by this worker */
    h2o_linklist_t conns;        /* struct gw_conn, conn.c */
    h2o_socket_t *listener;
    int listen_fd;
    size_t inflight; /* requests not yet disposed; touched by this thread only */
    unsigned index;
    pthread_t tid;
    struct gw_audit audit;                    /* this worker's connection to the audit writer */
    struct moat_runtimes runtimes;            /* the backend's runtime table, as last listed (runtime_table.c) */
    uint64_t runtimes_ms;                     /* when (loop time); 0: never */
    struct gw_denials denials;                /* summaries of refusals past their address's rate (denials.c) */
    uint64_t ready_ms;                        /* the last /readyz that found the backend answering (loop time); 0: never */
    char ready_walls[MOAT_MAX_WALLS_LEN + 1]; /* the walls its answer named (RUNTIMES tag 3); "" if none */
    uint64_t xff_logged_ms;                   /* an ignored X-Forwarded-For was last logged (loop time) */
    int audit_pending_fd;                     /* a replacement writer socket from the main thread (atomic; -1 none) */
    uint64_t beat_ms;                         /* the watchdog's last run (loop time; __atomic): moatctl status */
};

struct gw_server {
    const char *config_path;
    pthread_mutex_t gen_lock;
    struct gw_generation *gen; /* current; written under gen_lock, read with __atomic */
    /* fixed at start: a reload warns when the file changes them */
    char *listen_address;
    uint16_t listen_port;
    char *user;
    struct rl_limiter *limiter;  /* per-tenant rate, concurrency and CPU budget; shared, survives reloads */
    struct redis_client *redis;  /* limiter.store redis: the one asynchronous Redis client (store/redis_client.h) */
    struct queue_redis *queue;   /* submissions.queue redis: the shared queue, dispatched on worker 0 */
    struct gw_conn_table *conns; /* connections per client address; shared by every worker */
    struct gw_worker *workers;
    unsigned nworkers;
    int audit_enabled;
    int *audit_fds;            /* one writer socket per worker, from the supervisor (privsep.c) */
    int audit_ctl;             /* the supervisor's ctl socket (privsep.h): writer sockets, reload and status requests; -1 none */
    pthread_barrier_t started; /* workers + main thread, once every listener is on its loop */
    pthread_barrier_t drained; /* workers + main thread, after draining */
    /* Each worker's watchdog tick, on its loop, for the layers above
     * (server.c: the local submissions queue's pump).  NULL: none. */
    void (*on_tick)(struct gw_worker *w);
};

/* The worker that owns a request's connection. */
static inline struct gw_worker *gw_worker_of(h2o_context_t *ctx)
{
    return (struct gw_worker *)ctx;
}

/*
 * Called on a worker's own thread (before each request and accept, and by
 * the watchdog): switch the worker to the current generation if a reload
 * published a new one, applying its timeouts and limits to the worker's
 * h2o context.
 */
void gw_worker_refresh(struct gw_worker *w);

/* w->gen's settings onto w's own h2o context (worker.c; at start and at
 * each refresh). */
void gw_worker_apply_generation(struct gw_worker *w);

#endif /* GW_WORKER_H */
