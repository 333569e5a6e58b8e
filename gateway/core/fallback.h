/*
 * fallback.h - X-Request-Id, a log line and an audit record for the
 * answers h2o sends itself (fallback.c).
 */
#ifndef GW_FALLBACK_H
#define GW_FALLBACK_H

#ifndef H2O_USE_LIBUV
#define H2O_USE_LIBUV 0
#endif
#include <h2o.h>

/* Put the filter on the host's fallback path (where h2o binds a request it
 * refuses before any handler). */
void gw_fallback_register(h2o_hostconf_t *hostconf);

#endif /* GW_FALLBACK_H */
