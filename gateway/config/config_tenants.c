/*
 * config_tenants.c - the configuration's tenants: who may call what.
 *
 * Each entry of the tenants sequence becomes a struct gw_tenant whose
 * tenant_policy starts from the defaults in gw_limits.h (execute and
 * runtimes, every language, the default ceilings, rates and session
 * ceilings) and is narrowed by the entry's endpoints, languages, limits,
 * rate, max_in_flight, cpu_seconds_per_minute, content_rules and sessions
 * (config_sessions.c).  The finished policy must pass
 * policy_validate() (fail closed: a tenant the policy engine would refuse
 * stops the load), and only then are the tenant's keys read
 * (config_keys.c), each pointing back at the tenant by index.
 */
#include "config_parse.h"
#include "common/gw_limits.h"
#include "moat_proto.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* limits: each ceiling 1 .. what its field holds (the int64_t ones up to INT64_MAX). */
static int limits_field(struct parse_ctx *pc, const char *key, yaml_node_t *v, void *arg)
{
#define LIMIT(field, max) CFG_UINT_SPEC(struct policy_limits, field, 1, (max))
    static const struct cfg_uint_spec fields[] = {
        LIMIT(run_timeout_ms, INT64_MAX),
        LIMIT(compile_timeout_ms, INT64_MAX),
        LIMIT(run_memory_bytes, INT64_MAX),
        LIMIT(compile_memory_bytes, INT64_MAX),
        LIMIT(max_files, UINT32_MAX),
        LIMIT(max_file_name_len, UINT32_MAX),
        LIMIT(max_args, UINT32_MAX),
        LIMIT(max_arg_len, UINT32_MAX),
        LIMIT(max_code_bytes, INT64_MAX),
        LIMIT(max_stdin_bytes, INT64_MAX),
        /* optional (unset: the backend's own limits): the run stage's rlimits */
        LIMIT(run_stack_kib, POLICY_MAX_STACK_KIB),
        LIMIT(run_processes, POLICY_MAX_PROCESSES),
        LIMIT(run_file_size_kib, POLICY_MAX_FILE_SIZE_KIB),
    };
#undef LIMIT
    return cfg_uint_table(pc, fields, sizeof(fields) / sizeof(fields[0]), "limits", key, v, arg);
}

struct lang_seen {
    yaml_node_t *language, *version;
};

static int lang_field(struct parse_ctx *pc, const char *key, yaml_node_t *v, void *arg)
{
    static const struct cfg_slot slots[] = {
        {"language", offsetof(struct lang_seen, language)},
        {"version", offsetof(struct lang_seen, version)},
    };
    return cfg_note(slots, sizeof(slots) / sizeof(slots[0]), arg, key, v);
}

/* languages: ["python", {language: c, version: "12"}, "*"] */
static int parse_languages(struct parse_ctx *pc, const yaml_node_t *n, struct tenant_policy *p)
{
    yaml_node_item_t *it;
    size_t count;

    if (n->type != YAML_SEQUENCE_NODE)
        return cfg_fail(pc, n, "languages must be a sequence");
    count = (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
    if (count > GW_MAX_LANG_RULES)
        return cfg_fail(pc, n, "more than %d languages", GW_MAX_LANG_RULES);
    free(p->langs);
    p->langs = calloc(count ? count : 1, sizeof(*p->langs));
    p->nlangs = 0;
    if (p->langs == NULL)
        return cfg_fail(pc, n, "out of memory");
    for (it = n->data.sequence.items.start; it < n->data.sequence.items.top; it++) {
        yaml_node_t *e = yaml_document_get_node(pc->doc, *it);
        struct policy_lang *pl = &p->langs[p->nlangs++];
        if (e != NULL && e->type == YAML_SCALAR_NODE) {
            if (cfg_string(pc, e, "language", 64, &pl->language) != 0)
                return -1;
        } else {
            struct lang_seen ls = {NULL, NULL};
            if (cfg_walk_mapping(pc, e, "language", lang_field, &ls) != 0)
                return -1;
            if (ls.language == NULL)
                return cfg_fail(pc, e, "a language entry needs a language");
            if (cfg_string(pc, ls.language, "language", 64, &pl->language) != 0 ||
                (ls.version != NULL && cfg_string(pc, ls.version, "version", 64, &pl->version) != 0))
                return -1;
        }
        if (pl->version == NULL && (pl->version = strdup("*")) == NULL)
            return cfg_fail(pc, e, "out of memory");
    }
    return 0;
}

struct rule_seen {
    yaml_node_t *name, *pattern;
};

static int rule_field(struct parse_ctx *pc, const char *key, yaml_node_t *v, void *arg)
{
    static const struct cfg_slot slots[] = {
        {"name", offsetof(struct rule_seen, name)},
        {"pattern", offsetof(struct rule_seen, pattern)},
    };
    return cfg_note(slots, sizeof(slots) / sizeof(slots[0]), arg, key, v);
}

static int parse_rules(struct parse_ctx *pc, const yaml_node_t *n, struct tenant_policy *p)
{
    yaml_node_item_t *it;
    size_t count;

    if (n->type != YAML_SEQUENCE_NODE)
        return cfg_fail(pc, n, "content_rules must be a sequence");
    count = (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
    if (count > GW_MAX_CONTENT_RULES)
        return cfg_fail(pc, n, "more than %d content rules", GW_MAX_CONTENT_RULES);
    p->rules = calloc(count ? count : 1, sizeof(*p->rules));
    if (p->rules == NULL)
        return cfg_fail(pc, n, "out of memory");
    for (it = n->data.sequence.items.start; it < n->data.sequence.items.top; it++) {
        yaml_node_t *e = yaml_document_get_node(pc->doc, *it);
        struct rule_seen rs = {NULL, NULL};
        char *name = NULL, *pattern = NULL, err[256];
        if (cfg_walk_mapping(pc, e, "content rule", rule_field, &rs) != 0)
            return -1;
        if (rs.name == NULL || rs.pattern == NULL)
            return cfg_fail(pc, e, "a content rule needs a name and a pattern");
        if (cfg_string(pc, rs.name, "content rule name", 64, &name) != 0 ||
            cfg_string(pc, rs.pattern, "content rule pattern", 4096, &pattern) != 0) {
            free(name);
            free(pattern);
            return -1;
        }
        int rc = policy_rule_compile(&p->rules[p->nrules], name, pattern, err, sizeof(err));
        free(name);
        free(pattern);
        if (rc != 0)
            return cfg_fail(pc, rs.pattern, "content rule: %s", err);
        p->nrules++;
    }
    return 0;
}

static int rate_field(struct parse_ctx *pc, const char *key, yaml_node_t *v, void *arg)
{
    struct tenant_policy *p = arg;
    uint64_t n;
    if (strcmp(key, "per_second") == 0)
        return cfg_rate(pc, v, "rate.per_second", &p->rate_per_second);
    if (strcmp(key, "burst") == 0) {
        if (cfg_uint(pc, v, "rate.burst", 0, 1000000, &n) != 0)
            return -1;
        p->burst = (uint32_t)n;
        return 0;
    }
    return 1;
}

static void default_policy(struct tenant_policy *p)
{
    memset(p, 0, sizeof(*p));
    p->endpoints = GW_DEFAULT_TENANT_ENDPOINTS;
    p->ceilings.run_timeout_ms = GW_DEFAULT_RUN_TIMEOUT_MS;
    p->ceilings.compile_timeout_ms = GW_DEFAULT_COMPILE_TIMEOUT_MS;
    p->ceilings.run_memory_bytes = GW_DEFAULT_RUN_MEMORY;
    p->ceilings.compile_memory_bytes = GW_DEFAULT_COMPILE_MEMORY;
    p->ceilings.max_files = GW_DEFAULT_MAX_FILES;
    p->ceilings.max_file_name_len = GW_DEFAULT_MAX_FILE_NAME;
    p->ceilings.max_args = GW_DEFAULT_MAX_ARGS;
    p->ceilings.max_arg_len = GW_DEFAULT_MAX_ARG_LEN;
    p->ceilings.max_code_bytes = GW_DEFAULT_MAX_CODE_BYTES;
    p->ceilings.max_stdin_bytes = GW_DEFAULT_MAX_STDIN_BYTES;
    p->rate_per_second = GW_DEFAULT_RATE_PER_SECOND;
    p->burst = GW_DEFAULT_BURST;
    p->max_in_flight = GW_DEFAULT_MAX_IN_FLIGHT;
    p->cpu_ms_per_minute = GW_DEFAULT_CPU_MS_PER_MINUTE;
    p->sessions = (struct policy_session_limits){
        .max_concurrent = GW_DEFAULT_SESSION_MAX_CONCURRENT,
        .wall_ms = GW_DEFAULT_SESSION_WALL_MS,
        .idle_ms = GW_DEFAULT_SESSION_IDLE_MS,
        .cpu_ms = GW_DEFAULT_SESSION_CPU_MS,
        .stdin_bytes = GW_DEFAULT_SESSION_STDIN_BYTES,
        .output_bytes = GW_DEFAULT_SESSION_OUTPUT_BYTES,
    };
}

static int valid_tenant_name(const char *s)
{
    for (; *s != '\0'; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '-' || *s == '_' ||
              *s == '.'))
            return 0;
    return 1;
}

struct tenant_seen {
    yaml_node_t *name, *keys, *endpoints, *languages, *limits, *rate, *max_in_flight, *cpu, *rules, *sessions, *isolation;
    yaml_node_t *callbacks; /* config_callbacks.c */
};

static int tenant_field(struct parse_ctx *pc, const char *key, yaml_node_t *v, void *arg)
{
    static const struct cfg_slot slots[] = {
        {"name", offsetof(struct tenant_seen, name)},
        {"keys", offsetof(struct tenant_seen, keys)},
        {"endpoints", offsetof(struct tenant_seen, endpoints)},
        {"languages", offsetof(struct tenant_seen, languages)},
        {"limits", offsetof(struct tenant_seen, limits)},
        {"rate", offsetof(struct tenant_seen, rate)},
        {"max_in_flight", offsetof(struct tenant_seen, max_in_flight)},
        {"cpu_seconds_per_minute", offsetof(struct tenant_seen, cpu)},
        {"content_rules", offsetof(struct tenant_seen, rules)},
        {"sessions", offsetof(struct tenant_seen, sessions)},
        {"isolation", offsetof(struct tenant_seen, isolation)},
        {"callbacks", offsetof(struct tenant_seen, callbacks)},
    };
    return cfg_note(slots, sizeof(slots) / sizeof(slots[0]), arg, key, v);
}

/* isolation: namespaces (the default: the plain box) or gvisor (every job
 * of the tenant under gVisor; a backend without runsc refuses them). */
static int parse_isolation(struct parse_ctx *pc, yaml_node_t *n, struct tenant_policy *p)
{
    char *s = NULL;
    int iso;

    if (cfg_string(pc, n, "isolation", 32, &s) != 0)
        return -1;
    iso = moat_isolation_parse(s);
    free(s);
    if (iso < 0)
        return cfg_fail(pc, n, "isolation must be namespaces or gvisor");
    p->isolation = (uint8_t)iso;
    return 0;
}

/* Everything of a tenant but its name and keys. */
static int parse_policy(struct parse_ctx *pc, const struct tenant_seen *ts, struct gw_tenant *t, yaml_node_t *node)
{
    struct tenant_policy *p = &t->policy;
    uint64_t n;
    char err[256];

    default_policy(p);
    p->tenant = t->name;
    if (ts->endpoints != NULL && cfg_endpoints(pc, ts->endpoints, "endpoints", &p->endpoints) != 0)
        return -1;
    if (ts->languages != NULL) {
        if (parse_languages(pc, ts->languages, p) != 0)
            return -1;
    } else {
        /* default: every language the backend offers */
        if ((p->langs = calloc(1, sizeof(*p->langs))) == NULL || (p->langs[0].language = strdup("*")) == NULL ||
            (p->langs[0].version = strdup("*")) == NULL)
            return cfg_fail(pc, node, "out of memory");
        p->nlangs = 1;
    }
    if (ts->limits != NULL && cfg_walk_mapping(pc, ts->limits, "limits", limits_field, &p->ceilings) != 0)
        return -1;
    if (ts->rate != NULL && cfg_walk_mapping(pc, ts->rate, "rate", rate_field, p) != 0)
        return -1;
    if (ts->max_in_flight != NULL) {
        if (cfg_uint(pc, ts->max_in_flight, "max_in_flight", 0, 100000, &n) != 0)
            return -1;
        p->max_in_flight = (uint32_t)n;
    }
    if (ts->cpu != NULL) {
        if (cfg_uint(pc, ts->cpu, "cpu_seconds_per_minute", 0, 1000000, &n) != 0)
            return -1;
        p->cpu_ms_per_minute = n * 1000;
    }
    if (ts->rules != NULL && parse_rules(pc, ts->rules, p) != 0)
        return -1;
    if (ts->sessions != NULL && cfg_parse_tenant_sessions(pc, ts->sessions, &p->sessions) != 0)
        return -1;
    if (ts->isolation != NULL && parse_isolation(pc, ts->isolation, p) != 0)
        return -1;
    if (policy_validate(p, err, sizeof(err)) != 0)
        return cfg_fail(pc, node, "tenant %s: %s", t->name, err);
    return 0;
}

/* The tenant's name: valid characters, not taken by an earlier tenant.  *out is the caller's on success. */
static int tenant_name(struct parse_ctx *pc, const yaml_node_t *n, char **out)
{
    const struct gw_config *cfg = pc->cfg;
    char *name = NULL;

    if (cfg_string(pc, n, "tenant name", GW_MAX_TENANT_NAME, &name) != 0)
        return -1;
    if (!valid_tenant_name(name)) {
        free(name);
        return cfg_fail(pc, n, "tenant name may hold only letters, digits, '-', '_' and '.'");
    }
    if (gw_config_find_tenant(cfg, name) != NULL) {
        free(name);
        return cfg_fail(pc, n, "duplicate tenant name");
    }
    *out = name;
    return 0;
}

/* The keys sequence of tenant number idx. */
static int add_tenant_keys(struct parse_ctx *pc, const yaml_node_t *keys, size_t idx)
{
    yaml_node_item_t *it;

    if (keys->type != YAML_SEQUENCE_NODE)
        return cfg_fail(pc, keys, "tenant keys must be a sequence");
    for (it = keys->data.sequence.items.start; it < keys->data.sequence.items.top; it++)
        if (cfg_add_key(pc, yaml_document_get_node(pc->doc, *it), idx) != 0)
            return -1;
    return 0;
}

static int add_tenant(struct parse_ctx *pc, yaml_node_t *node)
{
    struct gw_config *cfg = pc->cfg;
    struct tenant_seen ts;
    struct gw_tenant *grown = NULL;
    char *name = NULL;
    size_t idx;

    memset(&ts, 0, sizeof(ts));
    if (cfg_walk_mapping(pc, node, "tenant", tenant_field, &ts) != 0)
        return -1;
    if (ts.name == NULL)
        return cfg_fail(pc, node, "a tenant needs a name");
    if (tenant_name(pc, ts.name, &name) != 0)
        return -1;
    if (cfg->ntenants >= GW_MAX_TENANTS || (grown = realloc(cfg->tenants, (cfg->ntenants + 1) * sizeof(*grown))) == NULL ||
        gw_index_add(&cfg->tenant_index, gw_index_hash(name, strlen(name)), cfg->ntenants) != 0) {
        if (grown != NULL)
            cfg->tenants = grown;
        free(name);
        return cfg_fail(pc, node, "too many tenants or out of memory");
    }
    cfg->tenants = grown;
    idx = cfg->ntenants++;
    memset(&cfg->tenants[idx], 0, sizeof(cfg->tenants[idx]));
    cfg->tenants[idx].name = name;
    if (parse_policy(pc, &ts, &cfg->tenants[idx], node) != 0)
        return -1;
    if (ts.callbacks != NULL && cfg_parse_tenant_callbacks(pc, ts.callbacks, &cfg->tenants[idx].callbacks) != 0)
        return -1;
    return ts.keys != NULL ? add_tenant_keys(pc, ts.keys, idx) : 0;
}

int cfg_parse_tenants(struct parse_ctx *pc, yaml_node_t *seq)
{
    yaml_node_item_t *it;

    if (seq->type != YAML_SEQUENCE_NODE)
        return cfg_fail(pc, seq, "tenants must be a sequence");
    for (it = seq->data.sequence.items.start; it < seq->data.sequence.items.top; it++)
        if (add_tenant(pc, yaml_document_get_node(pc->doc, *it)) != 0)
            return -1;
    return 0;
}

void cfg_free_tenants(struct gw_config *cfg)
{
    for (size_t i = 0; i < cfg->ntenants; i++) {
        cfg->tenants[i].policy.tenant = NULL; /* borrowed from name */
        tenant_policy_free(&cfg->tenants[i].policy);
        cfg_free_tenant_callbacks(&cfg->tenants[i].callbacks);
        free(cfg->tenants[i].name);
    }
    free(cfg->tenants);
    cfg->tenants = NULL;
    cfg->ntenants = 0;
}
