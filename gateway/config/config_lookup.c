/*
 * config_lookup.c - a parsed configuration's tenants and keys by name and
 * id (config.h), for the parser's own checks and for every request's key
 * lookup.  Below the parser's files: it calls only config_index.c.
 */
#include "config.h"
#include "config_index.h"

#include <string.h>

/* Both go through the hash indexes config_index.h keeps (a request's key
 * lookup must not cost more with 16,000 keys than with 10). */
const struct gw_tenant *gw_config_find_tenant(const struct gw_config *cfg, const char *name)
{
    uint32_t h = gw_index_hash(name, strlen(name));
    size_t pos = 0, c;

    while ((c = gw_index_next(&cfg->tenant_index, h, &pos)) != 0)
        if (c <= cfg->ntenants && strcmp(cfg->tenants[c - 1].name, name) == 0)
            return &cfg->tenants[c - 1];
    return NULL;
}

const struct gw_key *gw_config_find_key(const struct gw_config *cfg, const char *id)
{
    uint32_t h = gw_index_hash(id, APIKEY_ID_LEN);
    size_t pos = 0, c;

    while ((c = gw_index_next(&cfg->key_index, h, &pos)) != 0)
        if (c <= cfg->nkeys && memcmp(cfg->keys[c - 1].id, id, APIKEY_ID_LEN) == 0)
            return &cfg->keys[c - 1];
    return NULL;
}
