/*
 * router.h - the single h2o handler: exact-path routes, method check,
 * authentication, then dispatch to handlers.h.
 */
#ifndef GW_ROUTER_H
#define GW_ROUTER_H

#ifndef H2O_USE_LIBUV
#define H2O_USE_LIBUV 0
#endif
#include <h2o.h>

/* Register the router on pathconf ("/"): it answers every request. */
void gw_router_register(h2o_pathconf_t *pathconf);

#endif /* GW_ROUTER_H */
