/*
 * config_keys.c - a tenant's API keys in the configuration.
 *
 * A key is a mapping inside its tenant's keys sequence: id (the public
 * half, APIKEY_ID_LEN lowercase hex), sha256 (the digest of the secret,
 * never the secret itself), optional expires and scopes (endpoint names,
 * within the tenant's endpoints; all of them when omitted).  Key ids are
 * unique across tenants, since a request names only the key.
 */
#include "config_parse.h"
#include "common/gw_limits.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "moat_hex.h"

void gw_time_format(time_t t, char out[GW_TIME_LEN + 1])
{
    struct tm tm;

    if (gmtime_r(&t, &tm) == NULL || strftime(out, GW_TIME_LEN + 1, "%Y-%m-%dT%H:%M:%SZ", &tm) != GW_TIME_LEN)
        memcpy(out, "1970-01-01T00:00:00Z", GW_TIME_LEN + 1);
}

int cfg_time(struct parse_ctx *pc, const yaml_node_t *n, const char *name, time_t *out)
{
    struct tm tm;
    const char *s, *end;
    uint64_t secs;

    if (cfg_want_scalar(pc, n, name) != 0)
        return -1;
    s = cfg_scalar(n);
    if (strchr(s, '-') == NULL) {
        if (cfg_uint(pc, n, name, 1, (uint64_t)INT32_MAX * 4, &secs) != 0)
            return -1;
        *out = (time_t)secs;
        return 0;
    }
    memset(&tm, 0, sizeof(tm));
    end = strptime(s, "%Y-%m-%dT%H:%M:%SZ", &tm);
    if (end == NULL || *end != '\0')
        return cfg_fail(pc, n, "%s must look like 2027-01-31T00:00:00Z (UTC) or be seconds since 1970", name);
    *out = timegm(&tm);
    return 0;
}

int cfg_key_field(struct parse_ctx *pc, const char *key, yaml_node_t *v, void *arg)
{
    struct cfg_key_seen *ks = arg;

    if (strcmp(key, "id") == 0) {
        if (cfg_want_scalar(pc, v, "key id") != 0)
            return -1;
        if (!apikey_valid_id(cfg_scalar(v), v->data.scalar.length))
            return cfg_fail(pc, v, "key id must be %d lowercase hex characters", APIKEY_ID_LEN);
        memcpy(ks->key.id, cfg_scalar(v), APIKEY_ID_LEN + 1);
        ks->id = 1;
        return 0;
    }
    if (strcmp(key, "sha256") == 0) {
        if (cfg_want_scalar(pc, v, "key sha256") != 0)
            return -1;
        if (v->data.scalar.length != APIKEY_DIGEST_HEX ||
            moat_hex_decode(cfg_scalar(v), APIKEY_DIGEST_HEX, ks->key.sha256, MOAT_HEX_LOWER) != 0)
            return cfg_fail(pc, v, "key sha256 must be %d lowercase hex characters", APIKEY_DIGEST_HEX);
        ks->sha256 = 1;
        return 0;
    }
    if (strcmp(key, "expires") == 0)
        return cfg_time(pc, v, "key expires", &ks->key.expires);
    if (strcmp(key, "scopes") == 0)
        return cfg_endpoints(pc, v, "key scopes", &ks->key.scopes);
    return 1;
}

void cfg_key_start(struct cfg_key_seen *ks)
{
    memset(ks, 0, sizeof(*ks));
    ks->key.scopes = POLICY_EP_ALL;
}

int cfg_key_commit(struct parse_ctx *pc, yaml_node_t *node, struct cfg_key_seen *ks, size_t tenant)
{
    struct gw_config *cfg = pc->cfg;
    struct gw_key *grown;

    if (!ks->id || !ks->sha256)
        return cfg_fail(pc, node, "a key needs both id and sha256");
    if (gw_config_find_key(cfg, ks->key.id) != NULL)
        return cfg_fail(pc, node, "duplicate key id %s", ks->key.id);
    if (cfg->nkeys >= GW_MAX_KEYS)
        return cfg_fail(pc, node, "more than %d keys", GW_MAX_KEYS);
    if (cfg->nkeys == cfg->keys_cap) {
        size_t cap = cfg->keys_cap ? 2 * cfg->keys_cap : 16;
        if ((grown = realloc(cfg->keys, cap * sizeof(*grown))) == NULL)
            return cfg_fail(pc, node, "out of memory");
        cfg->keys = grown;
        cfg->keys_cap = cap;
    }
    if (gw_index_add(&cfg->key_index, gw_index_hash(ks->key.id, APIKEY_ID_LEN), cfg->nkeys) != 0)
        return cfg_fail(pc, node, "out of memory");
    ks->key.tenant = tenant;
    cfg->keys[cfg->nkeys++] = ks->key;
    return 0;
}

int cfg_add_key(struct parse_ctx *pc, yaml_node_t *node, size_t tenant)
{
    struct cfg_key_seen ks;

    cfg_key_start(&ks);
    if (cfg_walk_mapping(pc, node, "key", cfg_key_field, &ks) != 0)
        return -1;
    return cfg_key_commit(pc, node, &ks, tenant);
}
