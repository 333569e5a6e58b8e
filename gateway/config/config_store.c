/*
 * config_store.c - the admin store, read into the configuration.
 *
 * The store (written by the supervisor for moatctl: admin_store.c) is a
 * JSON file, and JSON is YAML: it is loaded with the configuration's own
 * loader (same secrecy check, same libyaml) and its sections are read by
 * the configuration's own parsers, so a tenant or an issuer means exactly
 * what it means in gateway.conf:
 *
 *   {"version": 1,
 *    "tenants": [{"name": "acme", "rate": {...}, ...}],     cfg_parse_tenants (no keys inside)
 *    "jwt_issuers": [{...}],                                cfg_parse_issuers
 *    "keys": [{"id", "tenant", "sha256", "scopes", "expires", cfg_key_field, plus what moatctl
 *              "created", "note", "state", "revoked",          keeps about a key
 *              "rotated_from", "replaced_by"}]}
 *
 * Names clash with the configuration file's as they would inside one
 * file: a duplicate tenant, key id or issuer is an error naming the store.
 * A revoked key is checked and skipped: it never reaches the key table.
 * A store that does not exist yet is empty; one that does not parse
 * (torn, truncated, edited by hand) fails the whole load, so a reload
 * keeps the running generation and a start refuses to start.
 */
#include "config_parse.h"
#include "common/gw_limits.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

struct store_seen {
    yaml_node_t *version, *tenants, *issuers, *keys;
};

static int store_field(struct parse_ctx *pc, const char *key, yaml_node_t *v, void *arg)
{
    static const struct cfg_slot slots[] = {
        {"version", offsetof(struct store_seen, version)},
        {"tenants", offsetof(struct store_seen, tenants)},
        {"jwt_issuers", offsetof(struct store_seen, issuers)},
        {"keys", offsetof(struct store_seen, keys)},
    };
    return cfg_note(slots, sizeof(slots) / sizeof(slots[0]), arg, key, v);
}

struct store_key_seen {
    struct cfg_key_seen k;
    yaml_node_t *tenant, *state, *created, *revoked, *note, *rotated_from, *replaced_by;
};

/* A store key: moatctl's fields here, the rest as in the configuration. */
static int store_key_field(struct parse_ctx *pc, const char *key, yaml_node_t *v, void *arg)
{
    static const struct cfg_slot slots[] = {
        {"tenant", offsetof(struct store_key_seen, tenant)},
        {"state", offsetof(struct store_key_seen, state)},
        {"created", offsetof(struct store_key_seen, created)},
        {"revoked", offsetof(struct store_key_seen, revoked)},
        {"note", offsetof(struct store_key_seen, note)},
        {"rotated_from", offsetof(struct store_key_seen, rotated_from)},
        {"replaced_by", offsetof(struct store_key_seen, replaced_by)},
    };
    struct store_key_seen *sk = arg;
    int rc = cfg_note(slots, sizeof(slots) / sizeof(slots[0]), arg, key, v);

    return rc == 1 ? cfg_key_field(pc, key, v, &sk->k) : rc;
}

static int key_id_ref(struct parse_ctx *pc, const yaml_node_t *v, const char *name)
{
    if (v == NULL)
        return 0;
    if (cfg_want_scalar(pc, v, name) != 0)
        return -1;
    return apikey_valid_id(cfg_scalar(v), v->data.scalar.length) ? 0 : cfg_fail(pc, v, "%s must be a key id", name);
}

/* moatctl's fields, checked; returns the key's tenant index through *tenant. */
static int store_key_meta(struct parse_ctx *pc, yaml_node_t *node, const struct store_key_seen *sk, size_t *tenant, int *active)
{
    const struct gw_tenant *t;
    time_t created, revoked;

    if (sk->tenant == NULL || sk->state == NULL || sk->created == NULL)
        return cfg_fail(pc, node, "a store key needs tenant, state and created");
    if (cfg_want_scalar(pc, sk->tenant, "key tenant") != 0 || cfg_want_scalar(pc, sk->state, "key state") != 0 ||
        cfg_time(pc, sk->created, "key created", &created) != 0 ||
        (sk->revoked != NULL && cfg_time(pc, sk->revoked, "key revoked", &revoked) != 0))
        return -1;
    if (strcmp(cfg_scalar(sk->state), "active") != 0 && strcmp(cfg_scalar(sk->state), "revoked") != 0)
        return cfg_fail(pc, sk->state, "key state must be active or revoked");
    *active = strcmp(cfg_scalar(sk->state), "active") == 0;
    if (sk->note != NULL && (cfg_want_scalar(pc, sk->note, "key note") != 0 || sk->note->data.scalar.length > GW_STORE_MAX_NOTE))
        return pc->err[0] != '\0' ? -1 : cfg_fail(pc, sk->note, "key note is longer than %d bytes", GW_STORE_MAX_NOTE);
    if (key_id_ref(pc, sk->rotated_from, "key rotated_from") != 0 || key_id_ref(pc, sk->replaced_by, "key replaced_by") != 0)
        return -1;
    if ((t = gw_config_find_tenant(pc->cfg, cfg_scalar(sk->tenant))) == NULL) {
        if (*active)
            return cfg_fail(pc, sk->tenant, "key tenant %s is not a tenant", cfg_scalar(sk->tenant));
        return 0; /* a revoked key may outlive its tenant */
    }
    *tenant = (size_t)(t - pc->cfg->tenants);
    return 0;
}

static int store_keys(struct parse_ctx *pc, const yaml_node_t *seq)
{
    yaml_node_item_t *it;

    if (seq->type != YAML_SEQUENCE_NODE)
        return cfg_fail(pc, seq, "keys must be a sequence");
    for (it = seq->data.sequence.items.start; it < seq->data.sequence.items.top; it++) {
        yaml_node_t *node = yaml_document_get_node(pc->doc, *it);
        struct store_key_seen sk;
        size_t tenant = 0;
        int active = 0;

        memset(&sk, 0, sizeof(sk));
        cfg_key_start(&sk.k);
        if (cfg_walk_mapping(pc, node, "key", store_key_field, &sk) != 0 || store_key_meta(pc, node, &sk, &tenant, &active) != 0)
            return -1;
        if (!sk.k.id || !sk.k.sha256)
            return cfg_fail(pc, node, "a key needs both id and sha256");
        if (active && cfg_key_commit(pc, node, &sk.k, tenant) != 0)
            return -1;
    }
    return 0;
}

/* The store's tenants hold no keys: its keys list does (with their metadata). */
static int store_tenants(struct parse_ctx *pc, yaml_node_t *seq)
{
    yaml_node_item_t *it;

    if (seq->type != YAML_SEQUENCE_NODE)
        return cfg_fail(pc, seq, "tenants must be a sequence");
    for (it = seq->data.sequence.items.start; it < seq->data.sequence.items.top; it++) {
        yaml_node_t *t = yaml_document_get_node(pc->doc, *it);
        yaml_node_pair_t *p;
        if (t == NULL || t->type != YAML_MAPPING_NODE)
            continue; /* cfg_parse_tenants says what is wrong */
        for (p = t->data.mapping.pairs.start; p < t->data.mapping.pairs.top; p++) {
            yaml_node_t *k = yaml_document_get_node(pc->doc, p->key);
            if (k != NULL && k->type == YAML_SCALAR_NODE && strcmp(cfg_scalar(k), "keys") == 0)
                return cfg_fail(pc, k, "a store tenant holds no keys (the store's keys list does)");
        }
    }
    return cfg_parse_tenants(pc, seq);
}

static int store_version(struct parse_ctx *pc, const yaml_node_t *root, const yaml_node_t *v)
{
    uint64_t version;

    if (v == NULL)
        return cfg_fail(pc, root, "the store has no version");
    if (cfg_uint(pc, v, "version", 1, UINT32_MAX, &version) != 0)
        return -1;
    return version == GW_STORE_VERSION
               ? 0
               : cfg_fail(pc, v, "store version %llu is not %d", (unsigned long long)version, GW_STORE_VERSION);
}

/* The sections in the order their references need: tenants, issuers, keys. */
static int parse_store(struct parse_ctx *pc)
{
    yaml_node_t *root = yaml_document_get_root_node(pc->doc);
    struct gw_config *cfg = pc->cfg;
    size_t t0 = cfg->ntenants, k0 = cfg->nkeys, i0 = cfg->nissuers;
    struct store_seen ss;

    if (root == NULL)
        return cfg_fail(pc, NULL, "empty store (a torn write?)");
    memset(&ss, 0, sizeof(ss));
    if (cfg_walk_mapping(pc, root, "store", store_field, &ss) != 0 || store_version(pc, root, ss.version) != 0)
        return -1;
    if (ss.tenants != NULL && store_tenants(pc, ss.tenants) != 0)
        return -1;
    if (ss.issuers != NULL && cfg_parse_issuers(pc, ss.issuers) != 0)
        return -1;
    if (ss.keys != NULL && store_keys(pc, ss.keys) != 0)
        return -1;
    cfg->nstore_tenants = cfg->ntenants - t0;
    cfg->nstore_keys = cfg->nkeys - k0;
    cfg->nstore_issuers = cfg->nissuers - i0;
    return 0;
}

int cfg_load_store(struct parse_ctx *config_pc, const char *store_path)
{
    struct parse_ctx pc = {store_path, NULL, config_pc->cfg, config_pc->err, config_pc->errlen};
    yaml_document_t doc;
    int rc;

    if ((rc = cfg_load_document(&pc, &doc, 1)) != 0)
        return rc == 1 ? 0 : -1;
    pc.doc = &doc;
    rc = parse_store(&pc);
    yaml_document_delete(&doc);
    return rc;
}
