/*
 * redis_h2o.h - hiredis' asynchronous client driven by an h2o evloop.
 *
 * hiredis 0.14 ships adapters for libevent, libev, libuv, ae and others,
 * but none for h2o.  redis_h2o_attach() gives a redisAsyncContext the five
 * hooks hiredis calls (addRead, delRead, addWrite, delWrite, cleanup) on
 * top of h2o's public socket API; after it, the context's replies and
 * callbacks arrive on that loop's thread, like any other h2o event.
 */
#ifndef MOAT_REDIS_H2O_H
#define MOAT_REDIS_H2O_H

#include <h2o.h>
#include <hiredis/async.h>

/*
 * Attach ac (just made by redisAsyncConnect*, nothing attached yet) to
 * loop.  Returns REDIS_OK, or REDIS_ERR (something already attached, out of
 * memory); on REDIS_ERR the caller still owns ac and frees it.  From then
 * on the descriptor is h2o's: hiredis never closes it, the cleanup hook does.
 */
int redis_h2o_attach(redisAsyncContext *ac, h2o_loop_t *loop);

#endif /* MOAT_REDIS_H2O_H */
