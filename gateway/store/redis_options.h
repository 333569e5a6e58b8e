/*
 * redis_options.h - the limiter section's connection settings (config.h:
 * socket, host and port, or Sentinels; password, database, prefix,
 * timeouts, lease) as the options of a Redis client (redis_client.h):
 * the one place that maps one onto the other, for every client the
 * gateway makes (the gateway's own, the supervisor's admin store).
 */
#ifndef GW_REDIS_OPTIONS_H
#define GW_REDIS_OPTIONS_H

#include "config/config.h"
#include "redis_client.h"

/* o from c; the Sentinels' addresses go in sentinels (which must live as
 * long as o is used: until redis_client_new copied them).  what names the
 * connections in log lines. */
void gw_redis_options(const struct gw_limiter_config *c, const char *what,
                      struct redis_sentinel_addr sentinels[GW_REDIS_MAX_SENTINELS], struct redis_client_options *o);

#endif
