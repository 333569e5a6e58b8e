/*
 * config.c - load gateway.conf (YAML) into struct gw_config.
 *
 * The whole file is loaded as a libyaml document and then walked with a
 * fixed schema: every mapping rejects unknown and duplicate keys, every
 * scalar is range checked, and every error names the file and line.
 */
#include "config.h"
#include "gw_limits.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <yaml.h>

struct parse_ctx {
    const char *path;
    yaml_document_t *doc;
    struct gw_config *cfg;
    char *err;
    size_t errlen;
};

/* Record "PATH:LINE: reason" and return -1. */
__attribute__((format(printf, 3, 4))) static int fail(struct parse_ctx *pc, const yaml_node_t *node, const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (node != NULL)
        snprintf(pc->err, pc->errlen, "%s:%lu: %s", pc->path, (unsigned long)node->start_mark.line + 1, msg);
    else
        snprintf(pc->err, pc->errlen, "%s: %s", pc->path, msg);
    return -1;
}

int gw_check_file_secrecy(int fd, const char *path, char *err, size_t errlen)
{
    struct stat st;

    if (fstat(fd, &st) == -1) {
        snprintf(err, errlen, "%s: fstat: %s", path, strerror(errno));
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file", path);
        return -1;
    }
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
        snprintf(err, errlen, "%s: writable by group or others, refusing it", path);
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- scalars */

static const char *scalar(const yaml_node_t *n)
{
    return (const char *)n->data.scalar.value;
}

static int want_scalar(struct parse_ctx *pc, const yaml_node_t *n, const char *name)
{
    if (n == NULL || n->type != YAML_SCALAR_NODE)
        return fail(pc, n, "%s must be a scalar", name);
    if (strlen(scalar(n)) != n->data.scalar.length)
        return fail(pc, n, "%s contains a NUL byte", name);
    return 0;
}

static int parse_string(struct parse_ctx *pc, const yaml_node_t *n, const char *name, size_t maxlen, char **dst)
{
    char *s;

    if (want_scalar(pc, n, name) != 0)
        return -1;
    if (n->data.scalar.length == 0)
        return fail(pc, n, "%s must not be empty", name);
    if (n->data.scalar.length > maxlen)
        return fail(pc, n, "%s is longer than %zu bytes", name, maxlen);
    if ((s = strdup(scalar(n))) == NULL)
        return fail(pc, n, "out of memory");
    free(*dst);
    *dst = s;
    return 0;
}

static int parse_uint(struct parse_ctx *pc, const yaml_node_t *n, const char *name, uint64_t min, uint64_t max, uint64_t *out)
{
    const char *s;
    char *end;
    unsigned long long v;

    if (want_scalar(pc, n, name) != 0)
        return -1;
    s = scalar(n);
    if (s[0] < '0' || s[0] > '9')
        return fail(pc, n, "%s must be a non-negative integer", name);
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0')
        return fail(pc, n, "%s must be a non-negative integer", name);
    if (v < min || v > max)
        return fail(pc, n, "%s must be between %llu and %llu", name, (unsigned long long)min, (unsigned long long)max);
    *out = v;
    return 0;
}

/* true/false (also yes/no, on/off). */
static int parse_bool(struct parse_ctx *pc, const yaml_node_t *n, const char *name, int *out)
{
    static const char *const yes[] = {"true", "yes", "on"}, *const no[] = {"false", "no", "off"};

    if (want_scalar(pc, n, name) != 0)
        return -1;
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        if (strcmp(scalar(n), yes[i]) == 0) {
            *out = 1;
            return 0;
        }
        if (strcmp(scalar(n), no[i]) == 0) {
            *out = 0;
            return 0;
        }
    }
    return fail(pc, n, "%s must be true or false", name);
}

/* ---------------------------------------------------------------- mappings */

typedef int (*field_fn)(struct parse_ctx *pc, const char *key, yaml_node_t *value, void *arg);

/*
 * Walk a mapping, rejecting non-scalar and duplicate keys, and hand each
 * pair to fn.  fn returns 1 for an unknown key.
 */
static int walk_mapping(struct parse_ctx *pc, yaml_node_t *map, const char *name, field_fn fn, void *arg)
{
    yaml_node_pair_t *p, *q;

    if (map == NULL || map->type != YAML_MAPPING_NODE)
        return fail(pc, map, "%s must be a mapping", name);
    for (p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(pc->doc, p->key);
        yaml_node_t *v = yaml_document_get_node(pc->doc, p->value);
        int rc;

        if (k == NULL || k->type != YAML_SCALAR_NODE)
            return fail(pc, k != NULL ? k : map, "keys in %s must be scalars", name);
        for (q = map->data.mapping.pairs.start; q < p; q++) {
            yaml_node_t *k2 = yaml_document_get_node(pc->doc, q->key);
            if (k2 != NULL && k2->type == YAML_SCALAR_NODE && strcmp(scalar(k2), scalar(k)) == 0)
                return fail(pc, k, "duplicate key '%s' in %s", scalar(k), name);
        }
        if (v == NULL)
            return fail(pc, k, "%s.%s has no value", name, scalar(k));
        rc = fn(pc, scalar(k), v, arg);
        if (rc == 1)
            return fail(pc, k, "unknown key '%s' in %s", scalar(k), name);
        if (rc != 0)
            return -1;
    }
    return 0;
}

static int listen_field(struct parse_ctx *pc, const char *key, yaml_node_t *v, void *arg)
{
    uint64_t port;

    if (strcmp(key, "address") == 0) {
        unsigned char buf[sizeof(struct in6_addr)];
        if (parse_string(pc, v, "listen.address", 64, &pc->cfg->listen_address) != 0)
            return -1;
        if (inet_pton(AF_INET, pc->cfg->listen_address, buf) != 1 && inet_pton(AF_INET6, pc->cfg->listen_address, buf) != 1)
            return fail(pc, v, "listen.address must be a numeric IPv4 or IPv6 address");
        return 0;
    }
    if (strcmp(key, "port") == 0) {
        if (parse_uint(pc, v, "listen.port", 1, 65535, &port) != 0)
            return -1;
        pc->cfg->listen_port = (uint16_t)port;
        return 0;
    }
    return 1;
}

static int tls_field(struct parse_ctx *pc, const char *key, yaml_node_t *v, void *arg)
{
    if (strcmp(key, "certificate") == 0)
        return parse_string(pc, v, "tls.certificate", GW_MAX_PATH_LEN, &pc->cfg->tls_certificate);
    if (strcmp(key, "key") == 0)
        return parse_string(pc, v, "tls.key", GW_MAX_PATH_LEN, &pc->cfg->tls_key);
    if (strcmp(key, "client_ca") == 0)
        return parse_string(pc, v, "tls.client_ca", GW_MAX_PATH_LEN, &pc->cfg->tls_client_ca);
    if (strcmp(key, "require_client_certificate") == 0)
        return parse_bool(pc, v, "tls.require_client_certificate", &pc->cfg->tls_require_client_cert);
    return 1;
}

static int timeouts_field(struct parse_ctx *pc, const char *key, yaml_node_t *v, void *arg)
{
    if (strcmp(key, "header_ms") == 0)
        return parse_uint(pc, v, "timeouts.header_ms", 1, GW_MAX_TIMEOUT_MS, &pc->cfg->header_timeout_ms);
    if (strcmp(key, "body_ms") == 0)
        return parse_uint(pc, v, "timeouts.body_ms", 1, GW_MAX_TIMEOUT_MS, &pc->cfg->body_timeout_ms);
    if (strcmp(key, "idle_ms") == 0)
        return parse_uint(pc, v, "timeouts.idle_ms", 1, GW_MAX_TIMEOUT_MS, &pc->cfg->idle_timeout_ms);
    return 1;
}

static int http2_field(struct parse_ctx *pc, const char *key, yaml_node_t *v, void *arg)
{
    uint64_t n;

    if (strcmp(key, "max_concurrent_streams") == 0) {
        if (parse_uint(pc, v, "http2.max_concurrent_streams", 1, GW_MAX_H2_MAX_STREAMS, &n) != 0)
            return -1;
        pc->cfg->http2_max_streams = (unsigned)n;
        return 0;
    }
    if (strcmp(key, "reset_budget") == 0) {
        if (parse_uint(pc, v, "http2.reset_budget", 0, GW_MAX_H2_RESET_BUDGET, &n) != 0)
            return -1;
        pc->cfg->http2_reset_budget = (unsigned)n;
        return 0;
    }
    return 1;
}

static int backend_field(struct parse_ctx *pc, const char *key, yaml_node_t *v, void *arg)
{
    if (strcmp(key, "socket") == 0) {
        struct sockaddr_un sun;
        if (parse_string(pc, v, "backend.socket", sizeof(sun.sun_path) - 1, &pc->cfg->backend_socket) != 0)
            return -1;
        if (pc->cfg->backend_socket[0] != '/')
            return fail(pc, v, "backend.socket must be an absolute path");
        return 0;
    }
    if (strcmp(key, "timeout_ms") == 0)
        return parse_uint(pc, v, "backend.timeout_ms", 1, GW_MAX_BACKEND_TIMEOUT_MS, &pc->cfg->backend_timeout_ms);
    return 1;
}

/* ---------------------------------------------------------------- tenants */

/* "2027-01-31T00:00:00Z" (UTC) or seconds since the epoch. */
static int parse_time(struct parse_ctx *pc, const yaml_node_t *n, const char *name, time_t *out)
{
    struct tm tm;
    const char *s, *end;
    uint64_t secs;

    if (want_scalar(pc, n, name) != 0)
        return -1;
    s = scalar(n);
    if (strchr(s, '-') == NULL) {
        if (parse_uint(pc, n, name, 1, (uint64_t)INT32_MAX * 4, &secs) != 0)
            return -1;
        *out = (time_t)secs;
        return 0;
    }
    memset(&tm, 0, sizeof(tm));
    end = strptime(s, "%Y-%m-%dT%H:%M:%SZ", &tm);
    if (end == NULL || *end != '\0')
        return fail(pc, n, "%s must look like 2027-01-31T00:00:00Z (UTC) or be seconds since 1970", name);
    *out = timegm(&tm);
    return 0;
}

/* A sequence of endpoint names: execute, runtimes. */
static int parse_endpoints(struct parse_ctx *pc, const yaml_node_t *n, const char *name, unsigned *out)
{
    yaml_node_item_t *it;
    unsigned bits = 0;

    if (n->type != YAML_SEQUENCE_NODE)
        return fail(pc, n, "%s must be a sequence of endpoint names (execute, runtimes)", name);
    for (it = n->data.sequence.items.start; it < n->data.sequence.items.top; it++) {
        yaml_node_t *e = yaml_document_get_node(pc->doc, *it);
        if (want_scalar(pc, e, name) != 0)
            return -1;
        if (strcmp(scalar(e), "execute") == 0)
            bits |= POLICY_EP_EXECUTE;
        else if (strcmp(scalar(e), "runtimes") == 0)
            bits |= POLICY_EP_RUNTIMES;
        else
            return fail(pc, e, "%s: unknown endpoint '%s' (execute, runtimes)", name, scalar(e));
    }
    *out = bits;
    return 0;
}

/* A non-negative decimal number such as 10 or 0.5. */
static int parse_rate(struct parse_ctx *pc, const yaml_node_t *n, const char *name, double *out)
{
    char *end;
    double v;

    if (want_scalar(pc, n, name) != 0)
        return -1;
    errno = 0;
    v = strtod(scalar(n), &end);
    if (errno != 0 || *end != '\0' || end == scalar(n) || !(v >= 0.0) || v > GW_MAX_RATE_PER_SECOND)
        return fail(pc, n, "%s must be a number between 0 and %.0f", name, GW_MAX_RATE_PER_SECOND);
    *out = v;
    return 0;
}

static int limits_field(struct parse_ctx *pc, const char *key, yaml_node_t *v, void *arg)
{
    struct policy_limits *l = arg;
    uint64_t n;
    static const struct {
        const char *name;
        size_t off;
        int width; /* 8: int64_t, 4: uint32_t, 9: uint64_t */
    } fields[] = {
        {"run_timeout_ms", offsetof(struct policy_limits, run_timeout_ms), 8},
        {"compile_timeout_ms", offsetof(struct policy_limits, compile_timeout_ms), 8},
        {"run_memory_bytes", offsetof(struct policy_limits, run_memory_bytes), 8},
        {"compile_memory_bytes", offsetof(struct policy_limits, compile_memory_bytes), 8},
        {"max_files", offsetof(struct policy_limits, max_files), 4},
        {"max_file_name_len", offsetof(struct policy_limits, max_file_name_len), 4},
        {"max_args", offsetof(struct policy_limits, max_args), 4},
        {"max_arg_len", offsetof(struct policy_limits, max_arg_len), 4},
        {"max_code_bytes", offsetof(struct policy_limits, max_code_bytes), 9},
        {"max_stdin_bytes", offsetof(struct policy_limits, max_stdin_bytes), 9},
    };
    char label[64];

    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
        if (strcmp(key, fields[i].name) != 0)
            continue;
        snprintf(label, sizeof(label), "limits.%s", key);
        if (parse_uint(pc, v, label, 1, fields[i].width == 4 ? UINT32_MAX : (uint64_t)INT64_MAX, &n) != 0)
            return -1;
        char *base = (char *)l + fields[i].off;
        if (fields[i].width == 8) {
            int64_t x = (int64_t)n;
            memcpy(base, &x, sizeof(x));
        } else if (fields[i].width == 4) {
            uint32_t x = (uint32_t)n;
            memcpy(base, &x, sizeof(x));
        } else {
            memcpy(base, &n, sizeof(n));
        }
        return 0;
    }
    return 1;
}

struct lang_seen {
    yaml_node_t *language, *version;
};

static int lang_field(struct parse_ctx *pc, const char *key, yaml_node_t *v, void *arg)
{
    struct lang_seen *ls = arg;
    if (strcmp(key, "language") == 0) {
        ls->language = v;
        return 0;
    }
    if (strcmp(key, "version") == 0) {
        ls->version = v;
        return 0;
    }
    return 1;
}

/* languages: ["python", {language: c, version: "12"}, "*"] */
static int parse_languages(struct parse_ctx *pc, const yaml_node_t *n, struct tenant_policy *p)
{
    yaml_node_item_t *it;
    size_t count;

    if (n->type != YAML_SEQUENCE_NODE)
        return fail(pc, n, "languages must be a sequence");
    count = (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
    if (count > GW_MAX_LANG_RULES)
        return fail(pc, n, "more than %d languages", GW_MAX_LANG_RULES);
    free(p->langs);
    p->langs = calloc(count ? count : 1, sizeof(*p->langs));
    p->nlangs = 0;
    if (p->langs == NULL)
        return fail(pc, n, "out of memory");
    for (it = n->data.sequence.items.start; it < n->data.sequence.items.top; it++) {
        yaml_node_t *e = yaml_document_get_node(pc->doc, *it);
        struct policy_lang *pl = &p->langs[p->nlangs++];
        if (e != NULL && e->type == YAML_SCALAR_NODE) {
            if (parse_string(pc, e, "language", 64, &pl->language) != 0)
                return -1;
        } else {
            struct lang_seen ls = {NULL, NULL};
            if (walk_mapping(pc, e, "language", lang_field, &ls) != 0)
                return -1;
            if (ls.language == NULL)
                return fail(pc, e, "a language entry needs a language");
            if (parse_string(pc, ls.language, "language", 64, &pl->language) != 0 ||
                (ls.version != NULL && parse_string(pc, ls.version, "version", 64, &pl->version) != 0))
                return -1;
        }
        if (pl->version == NULL && (pl->version = strdup("*")) == NULL)
            return fail(pc, e, "out of memory");
    }
    return 0;
}

struct rule_seen {
    yaml_node_t *name, *pattern;
};

static int rule_field(struct parse_ctx *pc, const char *key, yaml_node_t *v, void *arg)
{
    struct rule_seen *rs = arg;
    if (strcmp(key, "name") == 0) {
        rs->name = v;
        return 0;
    }
    if (strcmp(key, "pattern") == 0) {
        rs->pattern = v;
        return 0;
    }
    return 1;
}

static int parse_rules(struct parse_ctx *pc, const yaml_node_t *n, struct tenant_policy *p)
{
    yaml_node_item_t *it;
    size_t count;

    if (n->type != YAML_SEQUENCE_NODE)
        return fail(pc, n, "content_rules must be a sequence");
    count = (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
    if (count > GW_MAX_CONTENT_RULES)
        return fail(pc, n, "more than %d content rules", GW_MAX_CONTENT_RULES);
    p->rules = calloc(count ? count : 1, sizeof(*p->rules));
    if (p->rules == NULL)
        return fail(pc, n, "out of memory");
    for (it = n->data.sequence.items.start; it < n->data.sequence.items.top; it++) {
        yaml_node_t *e = yaml_document_get_node(pc->doc, *it);
        struct rule_seen rs = {NULL, NULL};
        char *name = NULL, *pattern = NULL, err[256];
        if (walk_mapping(pc, e, "content rule", rule_field, &rs) != 0)
            return -1;
        if (rs.name == NULL || rs.pattern == NULL)
            return fail(pc, e, "a content rule needs a name and a pattern");
        if (parse_string(pc, rs.name, "content rule name", 64, &name) != 0 ||
            parse_string(pc, rs.pattern, "content rule pattern", 4096, &pattern) != 0) {
            free(name);
            free(pattern);
            return -1;
        }
        int rc = policy_rule_compile(&p->rules[p->nrules], name, pattern, err, sizeof(err));
        free(name);
        free(pattern);
        if (rc != 0)
            return fail(pc, rs.pattern, "content rule: %s", err);
        p->nrules++;
    }
    return 0;
}

static int rate_field(struct parse_ctx *pc, const char *key, yaml_node_t *v, void *arg)
{
    struct tenant_policy *p = arg;
    uint64_t n;
    if (strcmp(key, "per_second") == 0)
        return parse_rate(pc, v, "rate.per_second", &p->rate_per_second);
    if (strcmp(key, "burst") == 0) {
        if (parse_uint(pc, v, "rate.burst", 0, 1000000, &n) != 0)
            return -1;
        p->burst = (uint32_t)n;
        return 0;
    }
    return 1;
}

static void default_policy(struct tenant_policy *p)
{
    memset(p, 0, sizeof(*p));
    p->endpoints = POLICY_EP_ALL;
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
}

struct key_seen {
    int id, sha256;
    struct gw_key key;
};

static int key_field(struct parse_ctx *pc, const char *key, yaml_node_t *v, void *arg)
{
    struct key_seen *ks = arg;

    if (strcmp(key, "id") == 0) {
        if (want_scalar(pc, v, "key id") != 0)
            return -1;
        if (!apikey_valid_id(scalar(v), v->data.scalar.length))
            return fail(pc, v, "key id must be %d lowercase hex characters", APIKEY_ID_LEN);
        memcpy(ks->key.id, scalar(v), APIKEY_ID_LEN + 1);
        ks->id = 1;
        return 0;
    }
    if (strcmp(key, "sha256") == 0) {
        if (want_scalar(pc, v, "key sha256") != 0)
            return -1;
        if (hex_decode_lower(scalar(v), v->data.scalar.length, ks->key.sha256, APIKEY_DIGEST_LEN) != 0)
            return fail(pc, v, "key sha256 must be %d lowercase hex characters", APIKEY_DIGEST_HEX);
        ks->sha256 = 1;
        return 0;
    }
    if (strcmp(key, "expires") == 0)
        return parse_time(pc, v, "key expires", &ks->key.expires);
    if (strcmp(key, "scopes") == 0)
        return parse_endpoints(pc, v, "key scopes", &ks->key.scopes);
    return 1;
}

static int valid_tenant_name(const char *s)
{
    for (; *s != '\0'; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '-' || *s == '_' ||
              *s == '.'))
            return 0;
    return 1;
}

static int add_key(struct parse_ctx *pc, yaml_node_t *node, size_t tenant)
{
    struct gw_config *cfg = pc->cfg;
    struct key_seen ks;
    struct gw_key *grown;

    memset(&ks, 0, sizeof(ks));
    ks.key.scopes = POLICY_EP_ALL;
    if (walk_mapping(pc, node, "key", key_field, &ks) != 0)
        return -1;
    if (!ks.id || !ks.sha256)
        return fail(pc, node, "a key needs both id and sha256");
    if (gw_config_find_key(cfg, ks.key.id) != NULL)
        return fail(pc, node, "duplicate key id %s", ks.key.id);
    if (cfg->nkeys >= GW_MAX_KEYS)
        return fail(pc, node, "more than %d keys", GW_MAX_KEYS);
    if ((grown = realloc(cfg->keys, (cfg->nkeys + 1) * sizeof(*grown))) == NULL)
        return fail(pc, node, "out of memory");
    cfg->keys = grown;
    ks.key.tenant = tenant;
    cfg->keys[cfg->nkeys++] = ks.key;
    return 0;
}

struct tenant_seen {
    yaml_node_t *name, *keys, *endpoints, *languages, *limits, *rate, *max_in_flight, *cpu, *rules;
};

static int tenant_field(struct parse_ctx *pc, const char *key, yaml_node_t *v, void *arg)
{
    struct tenant_seen *ts = arg;
    static const struct {
        const char *name;
        size_t off;
    } fields[] = {
        {"name", offsetof(struct tenant_seen, name)},
        {"keys", offsetof(struct tenant_seen, keys)},
        {"endpoints", offsetof(struct tenant_seen, endpoints)},
        {"languages", offsetof(struct tenant_seen, languages)},
        {"limits", offsetof(struct tenant_seen, limits)},
        {"rate", offsetof(struct tenant_seen, rate)},
        {"max_in_flight", offsetof(struct tenant_seen, max_in_flight)},
        {"cpu_seconds_per_minute", offsetof(struct tenant_seen, cpu)},
        {"content_rules", offsetof(struct tenant_seen, rules)},
    };
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
        if (strcmp(key, fields[i].name) == 0) {
            memcpy((char *)ts + fields[i].off, &v, sizeof(v));
            return 0;
        }
    }
    return 1;
}

/* Everything of a tenant but its name and keys. */
static int parse_policy(struct parse_ctx *pc, const struct tenant_seen *ts, struct gw_tenant *t, yaml_node_t *node)
{
    struct tenant_policy *p = &t->policy;
    uint64_t n;
    char err[256];

    default_policy(p);
    p->tenant = t->name;
    if (ts->endpoints != NULL && parse_endpoints(pc, ts->endpoints, "endpoints", &p->endpoints) != 0)
        return -1;
    if (ts->languages != NULL) {
        if (parse_languages(pc, ts->languages, p) != 0)
            return -1;
    } else {
        /* default: every language the backend offers */
        if ((p->langs = calloc(1, sizeof(*p->langs))) == NULL || (p->langs[0].language = strdup("*")) == NULL ||
            (p->langs[0].version = strdup("*")) == NULL)
            return fail(pc, node, "out of memory");
        p->nlangs = 1;
    }
    if (ts->limits != NULL && walk_mapping(pc, ts->limits, "limits", limits_field, &p->ceilings) != 0)
        return -1;
    if (ts->rate != NULL && walk_mapping(pc, ts->rate, "rate", rate_field, p) != 0)
        return -1;
    if (ts->max_in_flight != NULL) {
        if (parse_uint(pc, ts->max_in_flight, "max_in_flight", 0, 100000, &n) != 0)
            return -1;
        p->max_in_flight = (uint32_t)n;
    }
    if (ts->cpu != NULL) {
        if (parse_uint(pc, ts->cpu, "cpu_seconds_per_minute", 0, 1000000, &n) != 0)
            return -1;
        p->cpu_ms_per_minute = n * 1000;
    }
    if (ts->rules != NULL && parse_rules(pc, ts->rules, p) != 0)
        return -1;
    if (policy_validate(p, err, sizeof(err)) != 0)
        return fail(pc, node, "tenant %s: %s", t->name, err);
    return 0;
}

static int add_tenant(struct parse_ctx *pc, yaml_node_t *node)
{
    struct gw_config *cfg = pc->cfg;
    struct tenant_seen ts;
    struct gw_tenant *grown;
    char *name = NULL;
    yaml_node_item_t *it;
    size_t i, idx;

    memset(&ts, 0, sizeof(ts));
    if (walk_mapping(pc, node, "tenant", tenant_field, &ts) != 0)
        return -1;
    if (ts.name == NULL)
        return fail(pc, node, "a tenant needs a name");
    if (parse_string(pc, ts.name, "tenant name", GW_MAX_TENANT_NAME, &name) != 0)
        return -1;
    if (!valid_tenant_name(name)) {
        free(name);
        return fail(pc, ts.name, "tenant name may hold only letters, digits, '-', '_' and '.'");
    }
    for (i = 0; i < cfg->ntenants; i++) {
        if (strcmp(cfg->tenants[i].name, name) == 0) {
            free(name);
            return fail(pc, ts.name, "duplicate tenant name");
        }
    }
    if (cfg->ntenants >= GW_MAX_TENANTS || (grown = realloc(cfg->tenants, (cfg->ntenants + 1) * sizeof(*grown))) == NULL) {
        free(name);
        return fail(pc, node, "too many tenants or out of memory");
    }
    cfg->tenants = grown;
    idx = cfg->ntenants++;
    memset(&cfg->tenants[idx], 0, sizeof(cfg->tenants[idx]));
    cfg->tenants[idx].name = name;
    if (parse_policy(pc, &ts, &cfg->tenants[idx], node) != 0)
        return -1;

    if (ts.keys == NULL)
        return 0;
    if (ts.keys->type != YAML_SEQUENCE_NODE)
        return fail(pc, ts.keys, "tenant keys must be a sequence");
    for (it = ts.keys->data.sequence.items.start; it < ts.keys->data.sequence.items.top; it++)
        if (add_key(pc, yaml_document_get_node(pc->doc, *it), idx) != 0)
            return -1;
    return 0;
}

static int parse_tenants(struct parse_ctx *pc, yaml_node_t *seq)
{
    yaml_node_item_t *it;

    if (seq->type != YAML_SEQUENCE_NODE)
        return fail(pc, seq, "tenants must be a sequence");
    for (it = seq->data.sequence.items.start; it < seq->data.sequence.items.top; it++)
        if (add_tenant(pc, yaml_document_get_node(pc->doc, *it)) != 0)
            return -1;
    return 0;
}

/* ---------------------------------------------------------------- JWT issuers */

/* Reads a key file (PEM public key or HS256 secret) that others cannot write. */
static int read_key_file(struct parse_ctx *pc, const yaml_node_t *n, const char *path, unsigned char **out, size_t *len)
{
    char err[512];
    unsigned char *buf = NULL;
    size_t cap = 0, used = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);

    if (fd == -1)
        return fail(pc, n, "key file %s: %s", path, strerror(errno));
    if (gw_check_file_secrecy(fd, path, err, sizeof(err)) != 0) {
        close(fd);
        return fail(pc, n, "%s", err);
    }
    for (;;) {
        if (used == cap) {
            unsigned char *grown;
            if (cap >= JWT_MAX_KEY_LEN + 1 || (grown = realloc(buf, cap ? cap * 2 : 4096)) == NULL) {
                free(buf);
                close(fd);
                return fail(pc, n, "key file %s is too large", path);
            }
            buf = grown;
            cap = cap ? cap * 2 : 4096;
        }
        ssize_t r = read(fd, buf + used, cap - used);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            free(buf);
            close(fd);
            return fail(pc, n, "key file %s: %s", path, strerror(errno));
        }
        if (r == 0)
            break;
        used += (size_t)r;
    }
    close(fd);
    *out = buf;
    *len = used;
    return 0;
}

struct jwt_key_seen {
    yaml_node_t *kid, *file;
};

static int jwt_key_field(struct parse_ctx *pc, const char *key, yaml_node_t *v, void *arg)
{
    struct jwt_key_seen *ks = arg;
    if (strcmp(key, "kid") == 0) {
        ks->kid = v;
        return 0;
    }
    if (strcmp(key, "file") == 0) {
        ks->file = v;
        return 0;
    }
    return 1;
}

struct issuer_seen {
    yaml_node_t *name, *iss, *aud, *algorithm, *tenant_claim, *leeway, *keys;
};

static int issuer_field(struct parse_ctx *pc, const char *key, yaml_node_t *v, void *arg)
{
    struct issuer_seen *is = arg;
    static const struct {
        const char *name;
        size_t off;
    } fields[] = {
        {"name", offsetof(struct issuer_seen, name)},
        {"iss", offsetof(struct issuer_seen, iss)},
        {"aud", offsetof(struct issuer_seen, aud)},
        {"algorithm", offsetof(struct issuer_seen, algorithm)},
        {"tenant_claim", offsetof(struct issuer_seen, tenant_claim)},
        {"leeway_s", offsetof(struct issuer_seen, leeway)},
        {"keys", offsetof(struct issuer_seen, keys)},
    };
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
        if (strcmp(key, fields[i].name) == 0) {
            memcpy((char *)is + fields[i].off, &v, sizeof(v));
            return 0;
        }
    }
    return 1;
}

static int add_issuer(struct parse_ctx *pc, yaml_node_t *node)
{
    struct gw_config *cfg = pc->cfg;
    struct issuer_seen is;
    struct jwt_issuer *ji, *grown;
    yaml_node_item_t *it;
    uint64_t n;
    char err[256];

    memset(&is, 0, sizeof(is));
    if (walk_mapping(pc, node, "jwt issuer", issuer_field, &is) != 0)
        return -1;
    if (is.name == NULL || is.iss == NULL || is.aud == NULL || is.algorithm == NULL || is.keys == NULL)
        return fail(pc, node, "a JWT issuer needs name, iss, aud, algorithm and keys");
    if ((grown = realloc(cfg->issuers, (cfg->nissuers + 1) * sizeof(*grown))) == NULL)
        return fail(pc, node, "out of memory");
    cfg->issuers = grown;
    ji = &cfg->issuers[cfg->nissuers++];
    memset(ji, 0, sizeof(*ji));
    if (parse_string(pc, is.name, "issuer name", 64, &ji->name) != 0 || parse_string(pc, is.iss, "iss", 512, &ji->iss) != 0 ||
        parse_string(pc, is.aud, "aud", 512, &ji->aud) != 0)
        return -1;
    if (want_scalar(pc, is.algorithm, "algorithm") != 0)
        return -1;
    if (strcmp(scalar(is.algorithm), "HS256") == 0)
        ji->alg = JWT_PIN_HS256;
    else if (strcmp(scalar(is.algorithm), "RS256") == 0)
        ji->alg = JWT_PIN_RS256;
    else if (strcmp(scalar(is.algorithm), "ES256") == 0)
        ji->alg = JWT_PIN_ES256;
    else
        return fail(pc, is.algorithm, "algorithm must be HS256, RS256 or ES256");
    if (is.tenant_claim != NULL) {
        if (parse_string(pc, is.tenant_claim, "tenant_claim", 64, &ji->tenant_claim) != 0)
            return -1;
    } else if ((ji->tenant_claim = strdup("tenant")) == NULL) {
        return fail(pc, node, "out of memory");
    }
    ji->leeway_s = 30;
    if (is.leeway != NULL) {
        if (parse_uint(pc, is.leeway, "leeway_s", 0, JWT_MAX_LEEWAY_S, &n) != 0)
            return -1;
        ji->leeway_s = (unsigned)n;
    }
    if (is.keys->type != YAML_SEQUENCE_NODE)
        return fail(pc, is.keys, "keys must be a sequence");
    size_t count = (size_t)(is.keys->data.sequence.items.top - is.keys->data.sequence.items.start);
    if (count == 0 || count > JWT_MAX_KEYS)
        return fail(pc, is.keys, "an issuer needs 1 to %d keys", JWT_MAX_KEYS);
    if ((ji->keys = calloc(count, sizeof(*ji->keys))) == NULL)
        return fail(pc, node, "out of memory");
    for (it = is.keys->data.sequence.items.start; it < is.keys->data.sequence.items.top; it++) {
        yaml_node_t *kn = yaml_document_get_node(pc->doc, *it);
        struct jwt_key_seen ks = {NULL, NULL};
        char *path = NULL;
        struct jwt_key *k = &ji->keys[ji->nkeys];
        if (walk_mapping(pc, kn, "JWT key", jwt_key_field, &ks) != 0)
            return -1;
        if (ks.kid == NULL || ks.file == NULL)
            return fail(pc, kn, "a JWT key needs kid and file");
        if (parse_string(pc, ks.kid, "kid", JWT_MAX_KID_LEN, &k->kid) != 0)
            return -1;
        ji->nkeys++;
        if (parse_string(pc, ks.file, "key file", GW_MAX_PATH_LEN, &path) != 0)
            return -1;
        int rc = read_key_file(pc, ks.file, path, &k->material, &k->len);
        free(path);
        if (rc != 0)
            return -1;
    }
    if (jwt_issuer_check(ji, err, sizeof(err)) != 0)
        return fail(pc, node, "JWT issuer %s: %s", ji->name, err);
    return 0;
}

static int parse_issuers(struct parse_ctx *pc, yaml_node_t *seq)
{
    yaml_node_item_t *it;
    char err[256];

    if (seq->type != YAML_SEQUENCE_NODE)
        return fail(pc, seq, "jwt_issuers must be a sequence");
    for (it = seq->data.sequence.items.start; it < seq->data.sequence.items.top; it++)
        if (add_issuer(pc, yaml_document_get_node(pc->doc, *it)) != 0)
            return -1;
    if (pc->cfg->nissuers > 0 && jwt_issuers_check(pc->cfg->issuers, pc->cfg->nissuers, err, sizeof(err)) != 0)
        return fail(pc, seq, "jwt_issuers: %s", err);
    return 0;
}

/* ---------------------------------------------------------------- top level */

static int audit_field(struct parse_ctx *pc, const char *key, yaml_node_t *v, void *arg)
{
    struct gw_audit_config *a = &pc->cfg->audit;
    if (strcmp(key, "dir") == 0) {
        if (parse_string(pc, v, "audit.dir", GW_MAX_PATH_LEN, &a->dir) != 0)
            return -1;
        if (a->dir[0] != '/')
            return fail(pc, v, "audit.dir must be an absolute path");
        return 0;
    }
    if (strcmp(key, "user") == 0)
        return parse_string(pc, v, "audit.user", 32, &a->user);
    if (strcmp(key, "writer") == 0)
        return parse_string(pc, v, "audit.writer", GW_MAX_PATH_LEN, &a->writer);
    if (strcmp(key, "packets") == 0)
        return parse_bool(pc, v, "audit.packets", &a->packets);
    for (int t = 0; t < GW_AUDIT_NTUNING; t++) {
        const struct gw_audit_tuning_spec *sp = &gw_audit_tuning_specs[t];
        char name[64];
        if (strcmp(key, sp->key) != 0)
            continue;
        snprintf(name, sizeof(name), "audit.%s", sp->key);
        if (parse_uint(pc, v, name, sp->min, sp->max, &a->tuning[t]) != 0)
            return -1;
        a->tuning_set |= 1u << t;
        return 0;
    }
    return 1;
}

static int parse_audit(struct parse_ctx *pc, yaml_node_t *v)
{
    struct gw_audit_config *a = &pc->cfg->audit;
    a->packets = 1;
    if (walk_mapping(pc, v, "audit", audit_field, NULL) != 0)
        return -1;
    if (a->dir == NULL)
        return fail(pc, v, "audit needs a dir (made by moat-audit init)");
    if ((a->user == NULL && (a->user = strdup(GW_DEFAULT_AUDIT_USER)) == NULL) ||
        (a->writer == NULL && (a->writer = strdup(GW_DEFAULT_AUDIT_WRITER)) == NULL))
        return fail(pc, v, "out of memory");
    pc->cfg->audit_enabled = 1;
    return 0;
}

static int top_field(struct parse_ctx *pc, const char *key, yaml_node_t *v, void *arg)
{
    uint64_t n;

    if (strcmp(key, "listen") == 0)
        return walk_mapping(pc, v, "listen", listen_field, NULL);
    if (strcmp(key, "audit") == 0)
        return parse_audit(pc, v);
    if (strcmp(key, "tls") == 0)
        return walk_mapping(pc, v, "tls", tls_field, NULL);
    if (strcmp(key, "backend") == 0)
        return walk_mapping(pc, v, "backend", backend_field, NULL);
    if (strcmp(key, "user") == 0)
        return parse_string(pc, v, "user", 32, &pc->cfg->user);
    if (strcmp(key, "workers") == 0) {
        if (parse_uint(pc, v, "workers", 0, GW_MAX_WORKERS, &n) != 0)
            return -1;
        pc->cfg->workers = (unsigned)n;
        return 0;
    }
    if (strcmp(key, "max_request_entity_size") == 0) {
        if (parse_uint(pc, v, "max_request_entity_size", 1, GW_MAX_ENTITY, &n) != 0)
            return -1;
        pc->cfg->max_request_entity_size = (size_t)n;
        return 0;
    }
    if (strcmp(key, "timeouts") == 0)
        return walk_mapping(pc, v, "timeouts", timeouts_field, NULL);
    if (strcmp(key, "http2") == 0)
        return walk_mapping(pc, v, "http2", http2_field, NULL);
    if (strcmp(key, "max_connections") == 0) {
        if (parse_uint(pc, v, "max_connections", 1, GW_MAX_CONNECTIONS, &n) != 0)
            return -1;
        pc->cfg->max_connections = (unsigned)n;
        return 0;
    }
    if (strcmp(key, "max_connections_per_address") == 0) {
        if (parse_uint(pc, v, "max_connections_per_address", 1, GW_MAX_CONNECTIONS, &n) != 0)
            return -1;
        pc->cfg->max_connections_per_address = (unsigned)n;
        return 0;
    }
    if (strcmp(key, "tenants") == 0)
        return parse_tenants(pc, v);
    if (strcmp(key, "jwt_issuers") == 0)
        return parse_issuers(pc, v);
    return 1;
}

static int set_defaults(struct gw_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->listen_port = GW_DEFAULT_PORT;
    cfg->backend_timeout_ms = GW_DEFAULT_BACKEND_TIMEOUT_MS;
    cfg->max_request_entity_size = GW_DEFAULT_MAX_ENTITY;
    cfg->header_timeout_ms = GW_DEFAULT_HEADER_TIMEOUT_MS;
    cfg->body_timeout_ms = GW_DEFAULT_BODY_TIMEOUT_MS;
    cfg->idle_timeout_ms = GW_DEFAULT_IDLE_TIMEOUT_MS;
    cfg->http2_max_streams = GW_DEFAULT_H2_MAX_STREAMS;
    cfg->http2_reset_budget = GW_DEFAULT_H2_RESET_BUDGET;
    cfg->max_connections = GW_DEFAULT_MAX_CONNECTIONS;
    cfg->max_connections_per_address = GW_DEFAULT_MAX_CONN_PER_ADDR;
    cfg->listen_address = strdup(GW_DEFAULT_ADDRESS);
    cfg->backend_socket = strdup(GW_DEFAULT_BACKEND_SOCKET);
    cfg->user = strdup(GW_DEFAULT_USER);
    return cfg->listen_address != NULL && cfg->backend_socket != NULL && cfg->user != NULL ? 0 : -1;
}

static int apply_env(struct parse_ctx *pc)
{
    const char *s = getenv("MOAT_PORT");
    char *end;
    unsigned long v;

    if (s == NULL)
        return 0;
    errno = 0;
    v = strtoul(s, &end, 10);
    if (s[0] < '0' || s[0] > '9' || errno != 0 || *end != '\0' || v < 1 || v > 65535)
        return fail(pc, NULL, "MOAT_PORT must be a port number between 1 and 65535");
    pc->cfg->listen_port = (uint16_t)v;
    return 0;
}

static int resolve_workers(struct gw_config *cfg)
{
    long n;

    if (cfg->workers != 0)
        return 0;
    n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1)
        n = 1;
    if (n > GW_MAX_WORKERS)
        n = GW_MAX_WORKERS;
    cfg->workers = (unsigned)n;
    return 0;
}

int gw_config_load(const char *path, struct gw_config *cfg, char *err, size_t errlen)
{
    struct parse_ctx pc = {path, NULL, cfg, err, errlen};
    yaml_parser_t parser;
    yaml_document_t doc;
    yaml_node_t *root;
    FILE *fp;
    int fd, rc = -1;

    if (errlen > 0)
        err[0] = '\0';
    if (set_defaults(cfg) != 0) {
        snprintf(err, errlen, "%s: out of memory", path);
        gw_config_free(cfg);
        return -1;
    }
    if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY)) == -1) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        gw_config_free(cfg);
        return -1;
    }
    if (gw_check_file_secrecy(fd, path, err, errlen) != 0 || (fp = fdopen(fd, "r")) == NULL) {
        if (err[0] == '\0')
            snprintf(err, errlen, "%s: %s", path, strerror(errno));
        close(fd);
        gw_config_free(cfg);
        return -1;
    }
    if (!yaml_parser_initialize(&parser)) {
        snprintf(err, errlen, "%s: cannot initialise the YAML parser", path);
        fclose(fp);
        gw_config_free(cfg);
        return -1;
    }
    yaml_parser_set_input_file(&parser, fp);
    if (!yaml_parser_load(&parser, &doc)) {
        snprintf(err, errlen, "%s:%lu: %s", path, (unsigned long)parser.problem_mark.line + 1,
                 parser.problem != NULL ? parser.problem : "YAML syntax error");
        yaml_parser_delete(&parser);
        fclose(fp);
        gw_config_free(cfg);
        return -1;
    }
    pc.doc = &doc;
    root = yaml_document_get_root_node(&doc);
    if (root == NULL)
        fail(&pc, NULL, "empty configuration");
    else if (walk_mapping(&pc, root, "configuration", top_field, NULL) != 0)
        ;
    else if (cfg->tls_certificate == NULL || cfg->tls_key == NULL)
        fail(&pc, root, "tls.certificate and tls.key are required");
    else if (cfg->tls_require_client_cert && cfg->tls_client_ca == NULL)
        fail(&pc, root, "tls.require_client_certificate needs tls.client_ca");
    else if (apply_env(&pc) == 0 && resolve_workers(cfg) == 0)
        rc = 0;
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    fclose(fp);
    if (rc != 0)
        gw_config_free(cfg);
    return rc;
}

void gw_config_free(struct gw_config *cfg)
{
    size_t i;

    free(cfg->listen_address);
    free(cfg->tls_certificate);
    free(cfg->tls_key);
    free(cfg->tls_client_ca);
    free(cfg->backend_socket);
    free(cfg->user);
    for (i = 0; i < cfg->ntenants; i++) {
        cfg->tenants[i].policy.tenant = NULL; /* borrowed from name */
        tenant_policy_free(&cfg->tenants[i].policy);
        free(cfg->tenants[i].name);
    }
    free(cfg->tenants);
    free(cfg->keys);
    for (i = 0; i < cfg->nissuers; i++) {
        struct jwt_issuer *ji = &cfg->issuers[i];
        for (size_t k = 0; k < ji->nkeys; k++) {
            free(ji->keys[k].kid);
            if (ji->keys[k].material != NULL)
                OPENSSL_cleanse(ji->keys[k].material, ji->keys[k].len);
            free(ji->keys[k].material);
        }
        free(ji->keys);
        free(ji->name);
        free(ji->iss);
        free(ji->aud);
        free(ji->tenant_claim);
    }
    free(cfg->issuers);
    free(cfg->audit.dir);
    free(cfg->audit.user);
    free(cfg->audit.writer);
    memset(cfg, 0, sizeof(*cfg));
}

const struct gw_tenant *gw_config_find_tenant(const struct gw_config *cfg, const char *name)
{
    for (size_t i = 0; i < cfg->ntenants; i++)
        if (strcmp(cfg->tenants[i].name, name) == 0)
            return &cfg->tenants[i];
    return NULL;
}

const struct gw_key *gw_config_find_key(const struct gw_config *cfg, const char *id)
{
    size_t i;

    for (i = 0; i < cfg->nkeys; i++)
        if (memcmp(cfg->keys[i].id, id, APIKEY_ID_LEN) == 0)
            return &cfg->keys[i];
    return NULL;
}
