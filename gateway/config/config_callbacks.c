/*
 * config_callbacks.c - Judge0 callbacks (callback_url): the top-level
 * callbacks section (the callback sender's settings) and each tenant's
 * callbacks (where its callbacks may go, and the secret that signs them).
 *
 *   callbacks:                      # absent: no sender, no callbacks
 *     sender: /usr/local/libexec/moat/moat-callback-sender
 *     user: moat                    # the sender's user (default: the gateway's)
 *     ca_file: /etc/moat/callback-ca.pem   # default: the system's CAs
 *     connect_timeout_ms: 5000
 *     timeout_ms: 10000             # one attempt, start to end
 *     max_tries: 3                  # attempts on a 5xx, 429 or a network failure
 *     retry_ms: 1000                # before the second attempt; doubles after each
 *     max_queue: 1000               # callbacks waiting; past it new ones are dropped
 *     max_in_flight: 16             # attempts at once
 *
 *   tenants:
 *     - name: acme
 *       callbacks:
 *         allow: ["https://hooks.acme.example/judge/"]
 *         allow_private: false
 *         secret_file: /etc/moat/callback-acme.secret
 *
 * A tenant's allow-list entries are URL prefixes in the form
 * cb_url_parse() accepts, without a query; secret_file passes the
 * secrecy check of every key file and holds GW_CALLBACK_SECRET_MIN..MAX
 * bytes (one final newline is not part of it).  Fail closed: a tenant's
 * callbacks need the section, and the section needs the audit trail (the
 * supervisor that starts and restarts the audit writer runs the sender
 * too: privsep.c).
 */
#include "config_parse.h"
#include "common/gw_limits.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

static int section_field(struct parse_ctx *pc, const char *key, yaml_node_t *v, void *arg)
{
#define FIELD(field, min, max) CFG_UINT_SPEC(struct gw_callback_config, field, (min), (max))
    static const struct cfg_uint_spec fields[] = {
        FIELD(connect_timeout_ms, 1, GW_MAX_CALLBACK_TIMEOUT_MS),
        FIELD(timeout_ms, 1, GW_MAX_CALLBACK_TIMEOUT_MS),
        FIELD(retry_ms, 1, GW_MAX_CALLBACK_RETRY_MS),
        FIELD(max_tries, 1, GW_MAX_CALLBACK_TRIES),
        FIELD(max_queue, 1, GW_MAX_CALLBACK_QUEUE),
        FIELD(max_in_flight, 1, GW_MAX_CALLBACK_IN_FLIGHT),
    };
#undef FIELD
    struct gw_callback_config *c = &pc->cfg->callbacks;

    (void)arg;
    if (strcmp(key, "sender") == 0 || strcmp(key, "ca_file") == 0) {
        char **dst = key[0] == 's' ? &c->sender : &c->ca_file;
        if (cfg_string(pc, v, key, GW_MAX_PATH_LEN, dst) != 0)
            return -1;
        return (*dst)[0] == '/' ? 0 : cfg_fail(pc, v, "callbacks.%s must be an absolute path", key);
    }
    if (strcmp(key, "user") == 0)
        return cfg_string(pc, v, "callbacks.user", 64, &c->user);
    return cfg_uint_table(pc, fields, sizeof(fields) / sizeof(fields[0]), "callbacks", key, v, c);
}

int cfg_parse_callbacks(struct parse_ctx *pc, yaml_node_t *v)
{
    struct gw_callback_config *c = &pc->cfg->callbacks;

    c->enabled = 1;
    c->connect_timeout_ms = GW_DEFAULT_CALLBACK_CONNECT_TIMEOUT_MS;
    c->timeout_ms = GW_DEFAULT_CALLBACK_TIMEOUT_MS;
    c->retry_ms = GW_DEFAULT_CALLBACK_RETRY_MS;
    c->max_tries = GW_DEFAULT_CALLBACK_MAX_TRIES;
    c->max_queue = GW_DEFAULT_CALLBACK_MAX_QUEUE;
    c->max_in_flight = GW_DEFAULT_CALLBACK_MAX_IN_FLIGHT;
    if (cfg_walk_mapping(pc, v, "callbacks", section_field, NULL) != 0)
        return -1;
    if (c->sender == NULL && (c->sender = strdup(GW_DEFAULT_CALLBACK_SENDER)) == NULL)
        return cfg_fail(pc, v, "out of memory");
    return 0;
}

/* ------------------------------------------------------------- a tenant */

struct tenant_seen {
    yaml_node_t *allow, *allow_private, *secret_file;
};

static int tenant_field(struct parse_ctx *pc, const char *key, yaml_node_t *v, void *arg)
{
    static const struct cfg_slot slots[] = {
        {"allow", offsetof(struct tenant_seen, allow)},
        {"allow_private", offsetof(struct tenant_seen, allow_private)},
        {"secret_file", offsetof(struct tenant_seen, secret_file)},
    };
    (void)pc;
    return cfg_note(slots, sizeof(slots) / sizeof(slots[0]), arg, key, v);
}

/* allow: a sequence of 1..GW_MAX_CALLBACK_PREFIXES URL prefixes. */
static int parse_allow(struct parse_ctx *pc, const yaml_node_t *n, struct gw_tenant_callbacks *out)
{
    size_t count;

    if (n->type != YAML_SEQUENCE_NODE)
        return cfg_fail(pc, n, "callbacks.allow must be a sequence of URL prefixes");
    count = (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
    if (count == 0 || count > GW_MAX_CALLBACK_PREFIXES)
        return cfg_fail(pc, n, "callbacks.allow must list 1 to %d URL prefixes", GW_MAX_CALLBACK_PREFIXES);
    if ((out->allow = calloc(count, sizeof(*out->allow))) == NULL)
        return cfg_fail(pc, n, "out of memory");
    for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top; it++) {
        yaml_node_t *e = yaml_document_get_node(pc->doc, *it);
        char err[256];
        if (e == NULL || cfg_want_scalar(pc, e, "callbacks.allow entry") != 0)
            return -1;
        const char *s = cfg_scalar(e);
        if (cb_url_parse(s, strlen(s), &out->allow[out->nallow], err, sizeof(err)) != 0)
            return cfg_fail(pc, e, "callbacks.allow: %s: %s", s, err);
        if (strchr(out->allow[out->nallow].path, '?') != NULL)
            return cfg_fail(pc, e, "callbacks.allow: %s: a prefix may not hold a query", s);
        out->nallow++;
    }
    return 0;
}

/* secret_file: the signing secret, GW_CALLBACK_SECRET_MIN..MAX bytes without a final newline. */
static int read_secret(struct parse_ctx *pc, const yaml_node_t *n, struct gw_tenant_callbacks *out)
{
    char *path = NULL;
    int rc;

    if (cfg_string(pc, n, "callbacks.secret_file", GW_MAX_PATH_LEN, &path) != 0)
        return -1;
    rc = cfg_read_key_file(pc, n, path, GW_CALLBACK_SECRET_MAX + 1, &out->secret, &out->secret_len);
    if (rc == 0) {
        if (out->secret_len > 0 && out->secret[out->secret_len - 1] == '\n')
            out->secret_len--;
        if (out->secret_len < GW_CALLBACK_SECRET_MIN || out->secret_len > GW_CALLBACK_SECRET_MAX)
            rc = cfg_fail(pc, n, "callbacks.secret_file %s must hold %d to %d bytes", path, GW_CALLBACK_SECRET_MIN,
                          GW_CALLBACK_SECRET_MAX);
    }
    free(path);
    return rc;
}

int cfg_parse_tenant_callbacks(struct parse_ctx *pc, yaml_node_t *v, struct gw_tenant_callbacks *out)
{
    struct tenant_seen ts;

    memset(&ts, 0, sizeof(ts));
    if (cfg_walk_mapping(pc, v, "callbacks", tenant_field, &ts) != 0)
        return -1;
    if (ts.allow == NULL || ts.secret_file == NULL)
        return cfg_fail(pc, v, "a tenant's callbacks need allow (URL prefixes) and secret_file");
    if (parse_allow(pc, ts.allow, out) != 0 || read_secret(pc, ts.secret_file, out) != 0)
        return -1;
    if (ts.allow_private != NULL && cfg_bool(pc, ts.allow_private, "callbacks.allow_private", &out->allow_private) != 0)
        return -1;
    return 0;
}

int cfg_callbacks_finish(struct parse_ctx *pc)
{
    const struct gw_config *cfg = pc->cfg;

    for (size_t i = 0; i < cfg->ntenants; i++)
        if (cfg->tenants[i].callbacks.nallow > 0 && !cfg->callbacks.enabled)
            return cfg_fail(pc, NULL, "tenant %s has callbacks but there is no top-level callbacks section (the callback sender)",
                            cfg->tenants[i].name);
    if (cfg->callbacks.enabled && !cfg->audit_enabled)
        return cfg_fail(pc, NULL,
                        "the callbacks section needs the audit section: the supervisor that runs the audit writer runs the "
                        "callback sender");
    return 0;
}

void cfg_free_tenant_callbacks(struct gw_tenant_callbacks *c)
{
    if (c->secret != NULL)
        OPENSSL_cleanse(c->secret, GW_CALLBACK_SECRET_MAX + 2);
    free(c->secret);
    free(c->allow);
    memset(c, 0, sizeof(*c));
}

void cfg_free_callbacks(struct gw_config *cfg)
{
    free(cfg->callbacks.sender);
    free(cfg->callbacks.user);
    free(cfg->callbacks.ca_file);
    memset(&cfg->callbacks, 0, sizeof(cfg->callbacks));
}
