/*
 * config_jwt.c - the configuration's JWT issuers.
 *
 * Each issuer names its iss and aud, the one algorithm it may use (pinned:
 * jwt_auth.c refuses a token that names another), the claim that names the
 * tenant and the tenants it may name (required: an issuer speaks for its
 * own tenants only), the claim that holds the token's scopes, the clock
 * leeway, the longest lifetime it may give a token, and 1 to JWT_MAX_KEYS
 * keys, each a kid and a file.  Key files are read here, at load, and must
 * pass the same secrecy check as the configuration (gw_check_file_secrecy);
 * their material is wiped when the configuration is freed.
 * jwt_issuer_check() and jwt_issuers_check() (jwt_auth.c) judge each issuer
 * and the set; config.c checks, once the whole file is read, that each
 * issuer's tenants are configured.
 */
#include "config_parse.h"
#include "common/gw_limits.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

struct jwt_key_seen {
    yaml_node_t *kid, *file;
};

static int jwt_key_field(struct parse_ctx *pc, const char *key, yaml_node_t *v, void *arg)
{
    static const struct cfg_slot slots[] = {
        {"kid", offsetof(struct jwt_key_seen, kid)},
        {"file", offsetof(struct jwt_key_seen, file)},
    };
    return cfg_note(slots, sizeof(slots) / sizeof(slots[0]), arg, key, v);
}

struct issuer_seen {
    yaml_node_t *name, *iss, *aud, *algorithm, *tenant_claim, *leeway, *keys, *tenants, *scopes_claim, *max_lifetime;
};

static int issuer_field(struct parse_ctx *pc, const char *key, yaml_node_t *v, void *arg)
{
    static const struct cfg_slot slots[] = {
        {"name", offsetof(struct issuer_seen, name)},
        {"iss", offsetof(struct issuer_seen, iss)},
        {"aud", offsetof(struct issuer_seen, aud)},
        {"algorithm", offsetof(struct issuer_seen, algorithm)},
        {"tenant_claim", offsetof(struct issuer_seen, tenant_claim)},
        {"leeway_s", offsetof(struct issuer_seen, leeway)},
        {"keys", offsetof(struct issuer_seen, keys)},
        {"tenants", offsetof(struct issuer_seen, tenants)},
        {"scopes_claim", offsetof(struct issuer_seen, scopes_claim)},
        {"max_lifetime_s", offsetof(struct issuer_seen, max_lifetime)},
    };
    return cfg_note(slots, sizeof(slots) / sizeof(slots[0]), arg, key, v);
}

/* The algorithm pinned for an issuer: tokens naming any other are refused. */
static int issuer_algorithm(struct parse_ctx *pc, const yaml_node_t *n, enum jwt_alg_pin *out)
{
    static const struct {
        const char *name;
        enum jwt_alg_pin pin;
    } algs[] = {{"HS256", JWT_PIN_HS256}, {"RS256", JWT_PIN_RS256}, {"ES256", JWT_PIN_ES256}};

    if (cfg_want_scalar(pc, n, "algorithm") != 0)
        return -1;
    for (size_t i = 0; i < sizeof(algs) / sizeof(algs[0]); i++) {
        if (strcmp(cfg_scalar(n), algs[i].name) == 0) {
            *out = algs[i].pin;
            return 0;
        }
    }
    return cfg_fail(pc, n, "algorithm must be HS256, RS256 or ES256");
}

/* A claim name: the one given, or the default. */
static int claim_name(struct parse_ctx *pc, const yaml_node_t *n, const char *what, const char *dflt, char **out, yaml_node_t *node)
{
    if (n != NULL)
        return cfg_string(pc, n, what, 64, out);
    if ((*out = strdup(dflt)) == NULL)
        return cfg_fail(pc, node, "out of memory");
    return 0;
}

/* An issuer's list (its tenants, its keys): a sequence of 1 to max entries, and zeroed room for them in *room. */
static int issuer_list(struct parse_ctx *pc, const yaml_node_t *seq, const char *what, size_t max, size_t size, void **room)
{
    size_t count;

    if (seq->type != YAML_SEQUENCE_NODE)
        return cfg_fail(pc, seq, "%s must be a sequence", what);
    count = (size_t)(seq->data.sequence.items.top - seq->data.sequence.items.start);
    if (count == 0 || count > max)
        return cfg_fail(pc, seq, "an issuer needs 1 to %zu %s", max, what);
    if ((*room = calloc(count, size)) == NULL)
        return cfg_fail(pc, seq, "out of memory");
    return 0;
}

/* The issuer's tenants: 1 to JWT_MAX_TENANTS names (config.c checks that they are configured). */
static int issuer_tenants(struct parse_ctx *pc, struct jwt_issuer *ji, const yaml_node_t *seq)
{
    yaml_node_item_t *it;
    void *room;

    if (issuer_list(pc, seq, "tenants", JWT_MAX_TENANTS, sizeof(*ji->tenants), &room) != 0)
        return -1;
    ji->tenants = room;
    for (it = seq->data.sequence.items.start; it < seq->data.sequence.items.top; it++)
        if (cfg_string(pc, yaml_document_get_node(pc->doc, *it), "tenant", JWT_MAX_TENANT_LEN, &ji->tenants[ji->ntenants++]) != 0)
            return -1;
    return 0;
}

/* Everything of an issuer but its keys: names, algorithm, tenants, claims, leeway, lifetime. */
static int issuer_settings(struct parse_ctx *pc, const struct issuer_seen *is, struct jwt_issuer *ji, yaml_node_t *node)
{
    uint64_t n;

    if (cfg_string(pc, is->name, "issuer name", 64, &ji->name) != 0 || cfg_string(pc, is->iss, "iss", 512, &ji->iss) != 0 ||
        cfg_string(pc, is->aud, "aud", 512, &ji->aud) != 0)
        return -1;
    if (issuer_algorithm(pc, is->algorithm, &ji->alg) != 0)
        return -1;
    if (issuer_tenants(pc, ji, is->tenants) != 0)
        return -1;
    if (claim_name(pc, is->tenant_claim, "tenant_claim", "tenant", &ji->tenant_claim, node) != 0 ||
        claim_name(pc, is->scopes_claim, "scopes_claim", "scope", &ji->scopes_claim, node) != 0)
        return -1;
    ji->leeway_s = 30;
    if (is->leeway != NULL) {
        if (cfg_uint(pc, is->leeway, "leeway_s", 0, JWT_MAX_LEEWAY_S, &n) != 0)
            return -1;
        ji->leeway_s = (unsigned)n;
    }
    ji->max_lifetime_s = JWT_DEFAULT_LIFETIME;
    if (is->max_lifetime != NULL) {
        if (cfg_uint(pc, is->max_lifetime, "max_lifetime_s", 1, JWT_MAX_LIFETIME_S, &n) != 0)
            return -1;
        ji->max_lifetime_s = (unsigned)n;
    }
    return 0;
}

/* One {kid, file} entry: the next of ji->keys, its material read from the file. */
static int add_issuer_key(struct parse_ctx *pc, struct jwt_issuer *ji, yaml_node_t *kn)
{
    struct jwt_key_seen ks = {NULL, NULL};
    struct jwt_key *k = &ji->keys[ji->nkeys];
    char *path = NULL;
    int rc;

    if (cfg_walk_mapping(pc, kn, "JWT key", jwt_key_field, &ks) != 0)
        return -1;
    if (ks.kid == NULL || ks.file == NULL)
        return cfg_fail(pc, kn, "a JWT key needs kid and file");
    if (cfg_string(pc, ks.kid, "kid", JWT_MAX_KID_LEN, &k->kid) != 0)
        return -1;
    ji->nkeys++;
    if (cfg_string(pc, ks.file, "key file", GW_MAX_PATH_LEN, &path) != 0)
        return -1;
    rc = cfg_read_key_file(pc, ks.file, path, JWT_MAX_KEY_LEN, &k->material, &k->len);
    free(path);
    return rc;
}

/* The issuer's keys: 1 to JWT_MAX_KEYS entries. */
static int issuer_keys(struct parse_ctx *pc, struct jwt_issuer *ji, const yaml_node_t *keys)
{
    yaml_node_item_t *it;
    void *room;

    if (issuer_list(pc, keys, "keys", JWT_MAX_KEYS, sizeof(*ji->keys), &room) != 0)
        return -1;
    ji->keys = room;
    for (it = keys->data.sequence.items.start; it < keys->data.sequence.items.top; it++)
        if (add_issuer_key(pc, ji, yaml_document_get_node(pc->doc, *it)) != 0)
            return -1;
    return 0;
}

static int add_issuer(struct parse_ctx *pc, yaml_node_t *node)
{
    struct gw_config *cfg = pc->cfg;
    struct issuer_seen is;
    struct jwt_issuer *ji, *grown;
    char err[256];

    memset(&is, 0, sizeof(is));
    if (cfg_walk_mapping(pc, node, "jwt issuer", issuer_field, &is) != 0)
        return -1;
    if (is.name == NULL || is.iss == NULL || is.aud == NULL || is.algorithm == NULL || is.tenants == NULL || is.keys == NULL)
        return cfg_fail(pc, node, "a JWT issuer needs name, iss, aud, algorithm, tenants and keys");
    if ((grown = realloc(cfg->issuers, (cfg->nissuers + 1) * sizeof(*grown))) == NULL)
        return cfg_fail(pc, node, "out of memory");
    cfg->issuers = grown;
    ji = &cfg->issuers[cfg->nissuers++];
    memset(ji, 0, sizeof(*ji));
    if (issuer_settings(pc, &is, ji, node) != 0 || issuer_keys(pc, ji, is.keys) != 0)
        return -1;
    if (jwt_issuer_check(ji, err, sizeof(err)) != 0)
        return cfg_fail(pc, node, "JWT issuer %s: %s", ji->name, err);
    return 0;
}

int cfg_parse_issuers(struct parse_ctx *pc, yaml_node_t *seq)
{
    yaml_node_item_t *it;
    char err[256];

    if (seq->type != YAML_SEQUENCE_NODE)
        return cfg_fail(pc, seq, "jwt_issuers must be a sequence");
    for (it = seq->data.sequence.items.start; it < seq->data.sequence.items.top; it++)
        if (add_issuer(pc, yaml_document_get_node(pc->doc, *it)) != 0)
            return -1;
    if (pc->cfg->nissuers > 0 && jwt_issuers_check(pc->cfg->issuers, pc->cfg->nissuers, err, sizeof(err)) != 0)
        return cfg_fail(pc, seq, "jwt_issuers: %s", err);
    return 0;
}

void cfg_free_issuers(struct gw_config *cfg)
{
    for (size_t i = 0; i < cfg->nissuers; i++) {
        struct jwt_issuer *ji = &cfg->issuers[i];
        for (size_t k = 0; k < ji->nkeys; k++) {
            free(ji->keys[k].kid);
            if (ji->keys[k].material != NULL)
                OPENSSL_cleanse(ji->keys[k].material, ji->keys[k].len);
            free(ji->keys[k].material);
        }
        free(ji->keys);
        for (size_t t = 0; t < ji->ntenants; t++)
            free(ji->tenants[t]);
        free(ji->tenants);
        free(ji->name);
        free(ji->iss);
        free(ji->aud);
        free(ji->tenant_claim);
        free(ji->scopes_claim);
    }
    free(cfg->issuers);
    cfg->issuers = NULL;
    cfg->nissuers = 0;
}
