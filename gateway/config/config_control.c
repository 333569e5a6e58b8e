/*
 * config_control.c - the configuration's control section.
 *
 *   control:
 *     socket: /run/moat/control.sock   # required: an absolute path
 *     mode: "0660"                     # octal, within 0666 (default 0660)
 *     group: moat-admin                # the socket's group (default root's)
 *     users: [alice]                   # who may use it besides root
 *     store: /etc/moat/moat-store.json # default: moat-store.json beside the configuration
 *     store_backend: file              # file (default) | redis
 *     last_used_every_s: 60            # keys' last use into the store (1..3600)
 *
 * Present, it turns on the supervisor's control socket (control.c, only
 * with the audit trail on) and the admin store (config_store.c), which
 * every load of the configuration then reads too.  The socket's settings
 * are taken at start only; the store is read again on every reload.
 *
 * store_backend: redis keeps the store in Redis, shared by every gateway
 * that names the same Redis and prefix (admin_store_redis.c); the store
 * file is then this gateway's copy, which its supervisor keeps in step and
 * the gateway loads as before.  The connection is the limiter's redis
 * section (one place for it), so it needs limiter: store: redis; config.c
 * checks that once both sections are read.  Taken at start only.
 *
 * last_used_every_s: the supervisor writes when each key last
 * authenticated a request into the store (to the minute) this often, so
 * moatctl key list says it across restarts and, with the store in Redis,
 * across gateways (admin/key_last_used.c).  Taken at start only.
 */
#include "config_parse.h"
#include "common/gw_limits.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "0660": octal digits, no bits beyond rw for owner, group and others. */
static int control_mode(struct parse_ctx *pc, const yaml_node_t *v, unsigned *out)
{
    const char *s;
    char *end;
    unsigned long m;

    if (cfg_want_scalar(pc, v, "control.mode") != 0)
        return -1;
    s = cfg_scalar(v);
    m = strtoul(s, &end, 8);
    if (s[0] < '0' || s[0] > '7' || *end != '\0' || strlen(s) > 4 || (m & ~0666ul) != 0)
        return cfg_fail(pc, v, "control.mode must be octal permission bits within 0666, e.g. \"0660\"");
    *out = (unsigned)m;
    return 0;
}

static int control_users(struct parse_ctx *pc, const yaml_node_t *v, struct gw_control_config *c)
{
    yaml_node_item_t *it;

    if (v->type != YAML_SEQUENCE_NODE)
        return cfg_fail(pc, v, "control.users must be a sequence of user names");
    for (it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
        char *name = NULL, **grown;
        if (c->nusers >= GW_CONTROL_MAX_USERS)
            return cfg_fail(pc, v, "control.users: more than %d users", GW_CONTROL_MAX_USERS);
        if (cfg_string(pc, yaml_document_get_node(pc->doc, *it), "control.users entry", 32, &name) != 0)
            return -1;
        if ((grown = realloc(c->users, (c->nusers + 1) * sizeof(*grown))) == NULL) {
            free(name);
            return cfg_fail(pc, v, "out of memory");
        }
        c->users = grown;
        c->users[c->nusers++] = name;
    }
    return 0;
}

static int absolute(struct parse_ctx *pc, const yaml_node_t *v, const char *name, char **dst)
{
    if (cfg_string(pc, v, name, GW_MAX_PATH_LEN, dst) != 0)
        return -1;
    return (*dst)[0] == '/' ? 0 : cfg_fail(pc, v, "%s must be an absolute path", name);
}

static int control_field(struct parse_ctx *pc, const char *key, yaml_node_t *v, void *arg)
{
    struct gw_control_config *c = arg;

    if (strcmp(key, "socket") == 0)
        return absolute(pc, v, "control.socket", &c->socket);
    if (strcmp(key, "mode") == 0)
        return control_mode(pc, v, &c->mode);
    if (strcmp(key, "group") == 0)
        return cfg_string(pc, v, "control.group", 32, &c->group);
    if (strcmp(key, "users") == 0)
        return control_users(pc, v, c);
    if (strcmp(key, "store") == 0)
        return absolute(pc, v, "control.store", &c->store);
    if (strcmp(key, "store_backend") == 0)
        return cfg_either(pc, v, "control.store_backend", "file", "redis", &c->redis_store);
    if (strcmp(key, "last_used_every_s") == 0)
        return cfg_unsigned(pc, v, "control.last_used_every_s", 1, GW_LAST_USED_EVERY_MAX_S, &c->last_used_every_s);
    return 1;
}

/* GW_STORE_FILE in the configuration's directory. */
static int default_store(struct parse_ctx *pc, const yaml_node_t *v, char **out)
{
    const char *slash = strrchr(pc->path, '/');
    size_t dirlen = slash != NULL ? (size_t)(slash - pc->path) : 0;
    size_t n = dirlen + 1 + sizeof(GW_STORE_FILE);
    char *s = malloc(n + 1);

    if (s == NULL)
        return cfg_fail(pc, v, "out of memory");
    if (slash == NULL)
        snprintf(s, n + 1, "%s", GW_STORE_FILE);
    else
        snprintf(s, n + 1, "%.*s/%s", (int)dirlen, pc->path, GW_STORE_FILE);
    *out = s;
    return 0;
}

int cfg_parse_control(struct parse_ctx *pc, yaml_node_t *v)
{
    struct gw_control_config *c = &pc->cfg->control;

    c->mode = GW_DEFAULT_CONTROL_MODE;
    c->last_used_every_s = GW_DEFAULT_LAST_USED_EVERY_S;
    if (cfg_walk_mapping(pc, v, "control", control_field, c) != 0)
        return -1;
    if (c->socket == NULL)
        return cfg_fail(pc, v, "control needs a socket (an absolute path)");
    if (c->store == NULL)
        return default_store(pc, v, &c->store);
    return 0;
}

void cfg_free_control(struct gw_config *cfg)
{
    struct gw_control_config *c = &cfg->control;

    for (size_t i = 0; i < c->nusers; i++)
        free(c->users[i]);
    free(c->users);
    free(c->socket);
    free(c->group);
    free(c->store);
    memset(c, 0, sizeof(*c));
}
