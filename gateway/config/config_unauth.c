/*
 * config_unauth.c - the `unauthenticated` section: what refusals before
 * authentication may cost one client address (denials.c).
 *
 *   unauthenticated:
 *     per_second: 20     # sustained refusals per address (IPv6: per /64)
 *     burst: 200         # at once
 *     summary_ms: 10000  # past the rate, one summary record per address and reason this often
 */
#include "config.h"
#include "config_parse.h"

#include <string.h>

static int unauth_field(struct parse_ctx *pc, const char *key, yaml_node_t *v, void *arg)
{
    struct gw_config *cfg = pc->cfg;
    uint64_t n;

    if (strcmp(key, "per_second") == 0)
        return cfg_rate(pc, v, "unauthenticated.per_second", &cfg->unauth_per_second);
    if (strcmp(key, "burst") == 0) {
        if (cfg_uint(pc, v, "unauthenticated.burst", 1, 10000000, &n) != 0)
            return -1;
        cfg->unauth_burst = (uint32_t)n;
        return 0;
    }
    if (strcmp(key, "summary_ms") == 0)
        return cfg_uint(pc, v, "unauthenticated.summary_ms", 100, 3600000, &cfg->unauth_summary_ms);
    return 1;
}

int cfg_parse_unauthenticated(struct parse_ctx *pc, yaml_node_t *v)
{
    return cfg_walk_mapping(pc, v, "unauthenticated", unauth_field, NULL);
}
