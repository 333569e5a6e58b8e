/*
 * worker.c - what the request core needs of a worker and of the
 * configuration generations (server.h): a generation's references, the
 * current one, and a worker moving onto it between requests.  Below the
 * request core (conn.c and pipeline.c refresh their worker here), so that
 * server.c, which starts the workers, the listeners and what else runs,
 * sits above everything it starts and nothing calls back into it.
 */
#include "worker.h"
#include "config/config.h"
#include "log.h"
#include "common/gw_limits.h"
#include "moat_proto.h"

#include <pthread.h>
#include <stdlib.h>

/* ---------------------------------------------------------------- generations */

void gw_generation_hold(struct gw_generation *gen)
{
    __atomic_add_fetch(&gen->refs, 1, __ATOMIC_RELAXED);
}

void gw_generation_release(struct gw_generation *gen)
{
    if (__atomic_sub_fetch(&gen->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    log_debug("%s: configuration generation %u freed", __func__, gen->serial);
    gw_config_free(&gen->cfg);
    SSL_CTX_free(gen->ssl_ctx);
    free(gen);
}

/* The current generation, with a reference for the caller. */
struct gw_generation *gw_generation_current(struct gw_server *srv)
{
    struct gw_generation *gen;

    pthread_mutex_lock(&srv->gen_lock);
    gen = srv->gen;
    gw_generation_hold(gen);
    pthread_mutex_unlock(&srv->gen_lock);
    return gen;
}

/* ---------------------------------------------------------------- a worker's generation */

/*
 * A generation's settings on the worker's own h2o context: h2o reads its
 * limits from globalconf on every use and its timeouts from the context's
 * h2o_timeout_t, which may change in place (entries expire in the order
 * they were linked either way).
 */
void gw_worker_apply_generation(struct gw_worker *w)
{
    const struct gw_config *cfg = &w->gen->cfg;

    w->cfg = cfg;
    w->accept_ctx.ssl_ctx = w->gen->ssl_ctx;
    /*
     * h2o enforces a hard cap with a bare 413 (HTTP/1, before reading the
     * body when Content-Length says so) or REFUSED_STREAM (HTTP/2).  Set it
     * above the configured limit so that moderately oversized bodies reach
     * handle_execute and get a JSON 413 with a request id; the hard cap
     * still bounds memory.
     */
    w->h2o.max_request_entity_size = cfg->max_request_entity_size * GW_ENTITY_HARD_CAP_FACTOR;
    w->h2o.http2.max_concurrent_requests_per_connection = cfg->http2_max_streams;
    w->h2o.handshake_timeout = cfg->header_timeout_ms;
    /* h2o's single HTTP/1 request timer is only a backstop: conn.c times each phase */
    w->h2o.http1.req_timeout = cfg->idle_timeout_ms + cfg->header_timeout_ms + cfg->body_timeout_ms;
    w->h2o.http2.idle_timeout = cfg->idle_timeout_ms;
    w->ctx.handshake_timeout.timeout = w->h2o.handshake_timeout;
    w->ctx.http1.req_timeout.timeout = w->h2o.http1.req_timeout;
    w->ctx.http2.idle_timeout.timeout = w->h2o.http2.idle_timeout;
    w->backend_timeout.timeout = cfg->backend_timeout_ms;
    w->metrics_timeout.timeout = cfg->metrics.backend_timeout_ms;
    w->group_timeout.timeout = cfg->backend_timeout_ms + MOAT_MAX_TESTS_WALL_MS;
}

void gw_worker_refresh(struct gw_worker *w)
{
    struct gw_generation *old = w->gen;

    if (__atomic_load_n(&w->server->gen, __ATOMIC_ACQUIRE) == old)
        return;
    w->gen = gw_generation_current(w->server);
    gw_worker_apply_generation(w);
    log_debug("%s: worker %u now on configuration generation %u", __func__, w->index, w->gen->serial);
    gw_generation_release(old);
}
