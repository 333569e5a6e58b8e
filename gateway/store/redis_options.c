/*
 * redis_options.c - the limiter section's connection as a Redis client's
 * options (see redis_options.h).  Nothing is checked here: the
 * configuration parser (config_limiter.c) refused what is wrong, and
 * redis_client_new checks what it is given again.
 */
#include "redis_options.h"

#include <string.h>

void gw_redis_options(const struct gw_limiter_config *c, const char *what,
                      struct redis_sentinel_addr sentinels[GW_REDIS_MAX_SENTINELS], struct redis_client_options *o)
{
    memset(o, 0, sizeof(*o));
    o->socket_path = c->socket;
    o->host = c->host;
    o->port = c->port;
    o->password = c->password;
    o->db = c->db;
    o->prefix = c->prefix;
    o->connect_timeout_ms = c->connect_timeout_ms;
    o->timeout_ms = c->timeout_ms;
    o->lease_ms = c->lease_ms;
    o->what = what;
    for (size_t i = 0; i < c->nsentinels && i < GW_REDIS_MAX_SENTINELS; i++)
        sentinels[i] = (struct redis_sentinel_addr){c->sentinels[i].host, c->sentinels[i].port};
    o->sentinels = sentinels;
    o->nsentinels = c->nsentinels;
    o->master = c->master;
    o->sentinel_password = c->sentinel_password;
}
