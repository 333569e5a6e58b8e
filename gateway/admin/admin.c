/*
 * admin.c - moatctl's requests and what they do to the admin store.
 *
 * Theory of operation
 * -------------------
 * A request is one JSON object, {"cmd": NAME, ...}.  admin_decode() takes
 * it apart with one table (cmds[]): for each command the fields it needs
 * and the fields it may have; any other field, a wrong type, an over-long
 * string or a key id that is not one is refused before anything looks at
 * the store.  The decoded request is plain data (struct admin_req).
 *
 * The store is a JSON document (config_store.c describes it).  A mutating
 * request is applied to a copy of it in memory (admin_apply): each command
 * is a short function that finds what it names, refuses what the store
 * may not do (a name the configuration file or the store already has, a
 * key or tenant that lives in the configuration file, a tenant that still
 * has keys) and edits the copy.  It checks only what the parser cannot:
 * whether the result is a valid configuration is the parser's to say, on
 * the candidate file (control.c), with the same code the gateway loads it
 * with.
 *
 * Rotation makes the new key now and gives the old one an expiry at the
 * end of the grace (or keeps its own, if sooner): the gateway's ordinary
 * expiry check stops it, with nobody having to come back.  Revocation
 * marks the key revoked, which the parser never loads.
 *
 * Reads (admin_read) join the configuration file's tenants, keys and
 * issuers with the store's, each row saying where it lives, and keys with
 * when they were last used (from the gateway's table, keyuse.c).
 */
#include "admin.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moat_errf.h"
#include "moat_hex.h"
#include "policy.h"

/* ---------------------------------------------------------------- decoding */

enum {
    F_TENANT = 1u << 0,
    F_KEY = 1u << 1,
    F_ID = 1u << 2,
    F_SHA256 = 1u << 3,
    F_EXPIRES = 1u << 4,
    F_GRACE = 1u << 5,
    F_SCOPES = 1u << 6,
    F_NOTE = 1u << 7,
    F_POLICY = 1u << 8,
    F_ISSUER = 1u << 9,
    F_NAME = 1u << 10,
};

static const struct cmd_spec {
    const char *name;
    enum admin_cmd cmd;
    unsigned required, optional;
    int mutates;
} cmds[] = {
    {"tenant.add", ADMIN_TENANT_ADD, F_TENANT, F_POLICY, 1},
    {"tenant.set", ADMIN_TENANT_SET, F_TENANT | F_POLICY, 0, 1},
    {"tenant.show", ADMIN_TENANT_SHOW, F_TENANT, 0, 0},
    {"tenant.list", ADMIN_TENANT_LIST, 0, 0, 0},
    {"tenant.remove", ADMIN_TENANT_REMOVE, F_TENANT, 0, 1},
    {"key.create", ADMIN_KEY_CREATE, F_TENANT | F_ID | F_SHA256, F_EXPIRES | F_SCOPES | F_NOTE, 1},
    {"key.rotate", ADMIN_KEY_ROTATE, F_KEY | F_ID | F_SHA256, F_GRACE | F_EXPIRES | F_NOTE, 1},
    {"key.revoke", ADMIN_KEY_REVOKE, F_KEY, 0, 1},
    {"key.list", ADMIN_KEY_LIST, 0, F_TENANT, 0},
    {"jwt-issuer.add", ADMIN_ISSUER_ADD, F_ISSUER, 0, 1},
    {"jwt-issuer.remove", ADMIN_ISSUER_REMOVE, F_NAME, 0, 1},
    {"jwt-issuer.list", ADMIN_ISSUER_LIST, 0, 0, 0},
    {"status", ADMIN_STATUS, 0, 0, 0},
};

static const struct field_spec {
    const char *name;
    unsigned bit;
} fields[] = {
    {"tenant", F_TENANT},     {"key", F_KEY},       {"id", F_ID},         {"sha256", F_SHA256},
    {"expires_s", F_EXPIRES}, {"grace_s", F_GRACE}, {"scopes", F_SCOPES}, {"note", F_NOTE},
    {"policy", F_POLICY},     {"issuer", F_ISSUER}, {"name", F_NAME},
};

/* A string field of at most max bytes, copied into out (max + 1 bytes). */
static int text_field(const json_t *v, const char *name, char *out, size_t max, char *err, size_t errlen)
{
    size_t n;

    if (!json_is_string(v))
        return moat_errf(err, errlen, "%s must be a string", name);
    n = json_string_length(v);
    if (n == 0 || n > max || strlen(json_string_value(v)) != n)
        return moat_errf(err, errlen, "%s must be 1 to %zu bytes without NUL", name, max);
    memcpy(out, json_string_value(v), n + 1);
    return 0;
}

static int id_field(const json_t *v, const char *name, char *out, char *err, size_t errlen)
{
    if (text_field(v, name, out, APIKEY_ID_LEN, err, errlen) != 0 || !apikey_valid_id(out, strlen(out)))
        return moat_errf(err, errlen, "%s must be a key id (%d lowercase hex characters)", name, APIKEY_ID_LEN);
    return 0;
}

static int seconds_field(const json_t *v, const char *name, uint64_t *out, char *err, size_t errlen)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0 || (uint64_t)json_integer_value(v) > GW_CONTROL_MAX_DURATION_S)
        return moat_errf(err, errlen, "%s must be 0 to %llu seconds", name, (unsigned long long)GW_CONTROL_MAX_DURATION_S);
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

static int scopes_field(json_t *v, struct admin_req *q, char *err, size_t errlen)
{
    size_t i;
    json_t *e;
    unsigned bit;

    if (!json_is_array(v) || json_array_size(v) == 0)
        return moat_errf(err, errlen, "scopes must be a non-empty list of endpoint names");
    json_array_foreach(v, i, e)
    {
        if (!json_is_string(e) || policy_endpoint_from_name(json_string_value(e), &bit) != 0)
            return moat_errf(err, errlen, "scopes: %s is not an endpoint name",
                             json_is_string(e) ? json_string_value(e) : "(not a string)");
    }
    q->scopes = json_incref(v);
    return 0;
}

static int one_field(const struct field_spec *f, json_t *v, struct admin_req *q, char *err, size_t errlen)
{
    switch (f->bit) {
    case F_TENANT:
        return text_field(v, "tenant", q->tenant, GW_MAX_TENANT_NAME, err, errlen);
    case F_KEY:
        return id_field(v, "key", q->key, err, errlen);
    case F_ID:
        return id_field(v, "id", q->id, err, errlen);
    case F_SHA256:
        if (text_field(v, "sha256", q->sha256, APIKEY_DIGEST_HEX, err, errlen) != 0 || strlen(q->sha256) != APIKEY_DIGEST_HEX ||
            strspn(q->sha256, "0123456789abcdef") != APIKEY_DIGEST_HEX)
            return moat_errf(err, errlen, "sha256 must be %d lowercase hex characters", APIKEY_DIGEST_HEX);
        return 0;
    case F_EXPIRES:
        return seconds_field(v, "expires_s", &q->expires_s, err, errlen);
    case F_GRACE:
        q->has_grace = 1;
        return seconds_field(v, "grace_s", &q->grace_s, err, errlen);
    case F_SCOPES:
        return scopes_field(v, q, err, errlen);
    case F_NOTE:
        return text_field(v, "note", q->note, GW_STORE_MAX_NOTE, err, errlen);
    case F_POLICY:
        if (!json_is_object(v) || json_object_get(v, "name") != NULL || json_object_get(v, "keys") != NULL)
            return moat_errf(err, errlen, "policy must be an object of a tenant's policy fields (not name or keys)");
        q->policy = json_incref(v);
        return 0;
    case F_ISSUER:
        if (!json_is_object(v) || !json_is_string(json_object_get(v, "name")))
            return moat_errf(err, errlen, "issuer must be an object with a name (the fields of a jwt_issuers entry)");
        q->issuer = json_incref(v);
        return text_field(json_object_get(v, "name"), "issuer name", q->issuer_name, GW_MAX_TENANT_NAME, err, errlen);
    case F_NAME:
        return text_field(v, "name", q->issuer_name, GW_MAX_TENANT_NAME, err, errlen);
    }
    return moat_errf(err, errlen, "internal: field %s", f->name);
}

static const struct cmd_spec *find_cmd(const json_t *c)
{
    for (size_t i = 0; json_is_string(c) && i < sizeof(cmds) / sizeof(cmds[0]); i++)
        if (strcmp(json_string_value(c), cmds[i].name) == 0)
            return &cmds[i];
    return NULL;
}

static const struct field_spec *find_field(const char *name)
{
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
        if (strcmp(name, fields[i].name) == 0)
            return &fields[i];
    return NULL;
}

/* Every field of o but cmd: known to the command, well typed; then the required ones are there. */
static int decode_fields(json_t *o, const struct cmd_spec *c, struct admin_req *q, char *err, size_t errlen)
{
    const char *k;
    json_t *v;
    unsigned seen = 0;

    json_object_foreach(o, k, v)
    {
        const struct field_spec *f;
        if (strcmp(k, "cmd") == 0)
            continue;
        if ((f = find_field(k)) == NULL || !((c->required | c->optional) & f->bit))
            return moat_errf(err, errlen, "%s takes no field %.64s", c->name, k);
        if (one_field(f, v, q, err, errlen) != 0)
            return -1;
        seen |= f->bit;
    }
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
        if ((c->required & fields[i].bit) && !(seen & fields[i].bit))
            return moat_errf(err, errlen, "%s needs %s", c->name, fields[i].name);
    return 0;
}

int admin_decode(const char *text, size_t len, struct admin_req *q, char *err, size_t errlen)
{
    json_error_t je;
    json_t *o;
    const struct cmd_spec *c;
    int rc;

    memset(q, 0, sizeof(*q));
    if (len > GW_CONTROL_MAX_REQUEST)
        return moat_errf(err, errlen, "request longer than %d bytes", GW_CONTROL_MAX_REQUEST);
    if ((o = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je)) == NULL)
        return moat_errf(err, errlen, "request is not JSON: %s", je.text);
    if (!json_is_object(o)) {
        json_decref(o);
        return moat_errf(err, errlen, "request must be a JSON object");
    }
    if ((c = find_cmd(json_object_get(o, "cmd"))) == NULL) {
        json_decref(o);
        return moat_errf(err, errlen, "unknown or missing cmd");
    }
    q->cmd = c->cmd;
    q->name = c->name;
    q->mutates = c->mutates;
    rc = decode_fields(o, c, q, err, errlen);
    json_decref(o);
    if (rc != 0)
        admin_req_free(q);
    return rc;
}

void admin_req_free(struct admin_req *q)
{
    json_decref(q->scopes);
    json_decref(q->policy);
    json_decref(q->issuer);
    q->scopes = q->policy = q->issuer = NULL;
}

/* ---------------------------------------------------------------- the store document */

static const char *const lists[] = {"tenants", "jwt_issuers", "keys"};
static const char *const list_ids[] = {"name", "name", "id"};

json_t *admin_store_empty(void)
{
    return json_pack("{s:i, s:[], s:[], s:[]}", "version", GW_STORE_VERSION, "tenants", "jwt_issuers", "keys");
}

int admin_store_check(json_t *doc, char *err, size_t errlen)
{
    if (!json_is_object(doc) || json_integer_value(json_object_get(doc, "version")) != GW_STORE_VERSION)
        return moat_errf(err, errlen, "not a version %d store", GW_STORE_VERSION);
    for (size_t l = 0; l < sizeof(lists) / sizeof(lists[0]); l++) {
        json_t *a = json_object_get(doc, lists[l]), *e;
        size_t i;
        if (a == NULL && json_object_set_new(doc, lists[l], json_array()) == 0)
            continue;
        if (!json_is_array(a))
            return moat_errf(err, errlen, "%s is not a list", lists[l]);
        json_array_foreach(a, i, e)
        {
            if (!json_is_object(e) || !json_is_string(json_object_get(e, list_ids[l])))
                return moat_errf(err, errlen, "%s entry %zu has no %s", lists[l], i, list_ids[l]);
        }
    }
    return 0;
}

/* The entry of list whose field is value, or NULL; its index in *at. */
static json_t *find_in(const json_t *doc, const char *list, const char *field, const char *value, size_t *at)
{
    json_t *a = json_object_get(doc, list), *e;
    size_t i;

    json_array_foreach(a, i, e)
    {
        if (strcmp(json_string_value(json_object_get(e, field)), value) == 0) {
            if (at != NULL)
                *at = i;
            return e;
        }
    }
    return NULL;
}

/* In the configuration file (not the store): the first n - nstore entries. */
static int config_has_tenant(const struct gw_config *cfg, const char *name)
{
    for (size_t i = 0; i + cfg->nstore_tenants < cfg->ntenants; i++)
        if (strcmp(cfg->tenants[i].name, name) == 0)
            return 1;
    return 0;
}

static int config_has_key(const struct gw_config *cfg, const char *id)
{
    for (size_t i = 0; i + cfg->nstore_keys < cfg->nkeys; i++)
        if (strcmp(cfg->keys[i].id, id) == 0)
            return 1;
    return 0;
}

static int config_has_issuer(const struct gw_config *cfg, const char *name)
{
    for (size_t i = 0; i + cfg->nstore_issuers < cfg->nissuers; i++)
        if (strcmp(cfg->issuers[i].name, name) == 0)
            return 1;
    return 0;
}

static void put_time(json_t *o, const char *field, time_t t)
{
    char s[GW_TIME_LEN + 1];

    gw_time_format(t, s);
    json_object_set_new(o, field, json_string(s));
}

/* A store time back (the format put_time writes); 0 when absent or not one. */
static time_t get_time(const json_t *o, const char *field)
{
    const char *s = json_string_value(json_object_get(o, field));
    struct tm tm;
    const char *end;

    if (s == NULL)
        return 0;
    memset(&tm, 0, sizeof(tm));
    end = strptime(s, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return end != NULL && *end == '\0' ? timegm(&tm) : 0;
}

/* ---------------------------------------------------------------- mutations */

/* a into b, recursively: objects merge, null removes, anything else replaces. */
static int merge(json_t *dst, json_t *src)
{
    const char *k;
    json_t *v;

    json_object_foreach(src, k, v)
    {
        json_t *cur = json_object_get(dst, k);
        if (json_is_null(v)) {
            json_object_del(dst, k);
        } else if (json_is_object(v) && json_is_object(cur)) {
            if (merge(cur, v) != 0)
                return -1;
        } else if (json_object_set_new(dst, k, json_deep_copy(v)) != 0) {
            return -1;
        }
    }
    return 0;
}

static int tenant_add(const struct admin_req *q, json_t *doc, const struct gw_config *run, char *err, size_t errlen)
{
    json_t *t;

    if (config_has_tenant(run, q->tenant))
        return moat_errf(err, errlen, "tenant %s is in the configuration file", q->tenant);
    if (find_in(doc, "tenants", "name", q->tenant, NULL) != NULL)
        return moat_errf(err, errlen, "tenant %s exists", q->tenant);
    if ((t = json_pack("{s:s}", "name", q->tenant)) == NULL || (q->policy != NULL && merge(t, q->policy) != 0) ||
        json_array_append_new(json_object_get(doc, "tenants"), t) != 0)
        return moat_errf(err, errlen, "out of memory");
    return 0;
}

/* A tenant of the store, or -1 with err saying where it is instead. */
static json_t *store_tenant(const char *name, json_t *doc, const struct gw_config *run, size_t *at, char *err, size_t errlen)
{
    json_t *t = find_in(doc, "tenants", "name", name, at);

    if (t == NULL) {
        if (config_has_tenant(run, name))
            moat_errf(err, errlen, "tenant %s is in the configuration file: change it there", name);
        else
            moat_errf(err, errlen, "no tenant %s", name);
    }
    return t;
}

static int tenant_set(const struct admin_req *q, json_t *doc, const struct gw_config *run, char *err, size_t errlen)
{
    json_t *t = store_tenant(q->tenant, doc, run, NULL, err, errlen);

    if (t == NULL)
        return -1;
    return merge(t, q->policy) == 0 ? 0 : moat_errf(err, errlen, "out of memory");
}

static int tenant_remove(const struct admin_req *q, json_t *doc, const struct gw_config *run, char *err, size_t errlen)
{
    json_t *keys = json_object_get(doc, "keys"), *k;
    size_t at, i, active = 0;

    if (store_tenant(q->tenant, doc, run, &at, err, errlen) == NULL)
        return -1;
    json_array_foreach(keys, i, k)
    {
        if (strcmp(json_string_value(json_object_get(k, "tenant")), q->tenant) == 0 &&
            strcmp(json_string_value(json_object_get(k, "state")), "active") == 0)
            active++;
    }
    if (active > 0)
        return moat_errf(err, errlen, "tenant %s still has %zu active key(s): revoke them first", q->tenant, active);
    return json_array_remove(json_object_get(doc, "tenants"), at) == 0 ? 0 : moat_errf(err, errlen, "out of memory");
}

/* A new key's id is free: not in the configuration file, not in the store (revoked ones included). */
static int id_free(const char *id, const json_t *doc, const struct gw_config *run, char *err, size_t errlen)
{
    if (config_has_key(run, id) || find_in(doc, "keys", "id", id, NULL) != NULL)
        return moat_errf(err, errlen, "key id %s is taken", id);
    return 0;
}

static json_t *new_key(const struct admin_req *q, const char *tenant, const json_t *scopes, time_t now)
{
    json_t *k = json_pack("{s:s, s:s, s:s, s:s}", "id", q->id, "tenant", tenant, "sha256", q->sha256, "state", "active");

    if (k == NULL)
        return NULL;
    put_time(k, "created", now);
    if (q->expires_s != 0)
        put_time(k, "expires", now + (time_t)q->expires_s);
    if (scopes != NULL)
        json_object_set_new(k, "scopes", json_deep_copy(scopes));
    if (q->note[0] != '\0')
        json_object_set_new(k, "note", json_string(q->note));
    return k;
}

static int key_create(const struct admin_req *q, json_t *doc, const struct gw_config *run, time_t now, json_t *result, char *err,
                      size_t errlen)
{
    json_t *k;

    if (!config_has_tenant(run, q->tenant) && find_in(doc, "tenants", "name", q->tenant, NULL) == NULL)
        return moat_errf(err, errlen, "no tenant %s", q->tenant);
    if (id_free(q->id, doc, run, err, errlen) != 0)
        return -1;
    if ((k = new_key(q, q->tenant, q->scopes, now)) == NULL || json_array_append_new(json_object_get(doc, "keys"), k) != 0)
        return moat_errf(err, errlen, "out of memory");
    json_object_set_new(result, "key_id", json_string(q->id));
    json_object_set_new(result, "tenant", json_string(q->tenant));
    return 0;
}

/* An active key of the store, or NULL with err saying why not. */
static json_t *store_key(const char *id, json_t *doc, const struct gw_config *run, char *err, size_t errlen)
{
    json_t *k = find_in(doc, "keys", "id", id, NULL);

    if (k == NULL) {
        if (config_has_key(run, id))
            moat_errf(err, errlen, "key %s is in the configuration file: change it there", id);
        else
            moat_errf(err, errlen, "no key %s", id);
        return NULL;
    }
    if (strcmp(json_string_value(json_object_get(k, "state")), "active") != 0) {
        moat_errf(err, errlen, "key %s is revoked", id);
        return NULL;
    }
    return k;
}

static int key_rotate(const struct admin_req *q, json_t *doc, const struct gw_config *run, time_t now, json_t *result, char *err,
                      size_t errlen)
{
    json_t *old = store_key(q->key, doc, run, err, errlen), *k;
    time_t ends, cur;

    if (old == NULL || id_free(q->id, doc, run, err, errlen) != 0)
        return -1;
    if (json_object_get(old, "replaced_by") != NULL)
        return moat_errf(err, errlen, "key %s was already rotated (to %s)", q->key,
                         json_string_value(json_object_get(old, "replaced_by")));
    ends = now + (time_t)(q->has_grace ? q->grace_s : GW_DEFAULT_ROTATE_GRACE_S);
    cur = get_time(old, "expires");
    if (cur != 0 && cur < ends)
        ends = cur;
    if ((k = new_key(q, json_string_value(json_object_get(old, "tenant")), json_object_get(old, "scopes"), now)) == NULL)
        return moat_errf(err, errlen, "out of memory");
    json_object_set_new(k, "rotated_from", json_string(q->key));
    put_time(old, "expires", ends);
    json_object_set_new(old, "replaced_by", json_string(q->id));
    if (json_array_append_new(json_object_get(doc, "keys"), k) != 0)
        return moat_errf(err, errlen, "out of memory");
    json_object_set_new(result, "key_id", json_string(q->id));
    json_object_set_new(result, "tenant",
                        json_object_get(k, "tenant") ? json_deep_copy(json_object_get(k, "tenant")) : json_null());
    json_object_set_new(result, "old_key_id", json_string(q->key));
    put_time(result, "old_key_expires", ends);
    return 0;
}

static int key_revoke(const struct admin_req *q, json_t *doc, const struct gw_config *run, time_t now, json_t *result, char *err,
                      size_t errlen)
{
    json_t *k = store_key(q->key, doc, run, err, errlen);

    if (k == NULL)
        return -1;
    json_object_set_new(k, "state", json_string("revoked"));
    put_time(k, "revoked", now);
    json_object_set_new(result, "key_id", json_string(q->key));
    return 0;
}

static int issuer_add(const struct admin_req *q, json_t *doc, const struct gw_config *run, char *err, size_t errlen)
{
    if (config_has_issuer(run, q->issuer_name))
        return moat_errf(err, errlen, "JWT issuer %s is in the configuration file", q->issuer_name);
    if (find_in(doc, "jwt_issuers", "name", q->issuer_name, NULL) != NULL)
        return moat_errf(err, errlen, "JWT issuer %s exists", q->issuer_name);
    return json_array_append_new(json_object_get(doc, "jwt_issuers"), json_deep_copy(q->issuer)) == 0
               ? 0
               : moat_errf(err, errlen, "out of memory");
}

static int issuer_remove(const struct admin_req *q, json_t *doc, const struct gw_config *run, char *err, size_t errlen)
{
    size_t at;

    if (find_in(doc, "jwt_issuers", "name", q->issuer_name, &at) == NULL) {
        if (config_has_issuer(run, q->issuer_name))
            return moat_errf(err, errlen, "JWT issuer %s is in the configuration file: change it there", q->issuer_name);
        return moat_errf(err, errlen, "no JWT issuer %s", q->issuer_name);
    }
    return json_array_remove(json_object_get(doc, "jwt_issuers"), at) == 0 ? 0 : moat_errf(err, errlen, "out of memory");
}

int admin_apply(const struct admin_req *q, json_t *doc, const struct gw_config *run, time_t now, json_t *result, char *err,
                size_t errlen)
{
    switch (q->cmd) {
    case ADMIN_TENANT_ADD:
        return tenant_add(q, doc, run, err, errlen);
    case ADMIN_TENANT_SET:
        return tenant_set(q, doc, run, err, errlen);
    case ADMIN_TENANT_REMOVE:
        return tenant_remove(q, doc, run, err, errlen);
    case ADMIN_KEY_CREATE:
        return key_create(q, doc, run, now, result, err, errlen);
    case ADMIN_KEY_ROTATE:
        return key_rotate(q, doc, run, now, result, err, errlen);
    case ADMIN_KEY_REVOKE:
        return key_revoke(q, doc, run, now, result, err, errlen);
    case ADMIN_ISSUER_ADD:
        return issuer_add(q, doc, run, err, errlen);
    case ADMIN_ISSUER_REMOVE:
        return issuer_remove(q, doc, run, err, errlen);
    default:
        return moat_errf(err, errlen, "%s changes nothing", q->name);
    }
}

/* ---------------------------------------------------------------- reads */

static json_t *scope_names(unsigned bits)
{
    json_t *a = json_array();

    for (unsigned b = 1; b != 0 && b <= POLICY_EP_ALL; b <<= 1)
        if ((bits & b) && (POLICY_EP_ALL & b))
            json_array_append_new(a, json_string(policy_endpoint_name(b)));
    return a;
}

static void put_time_or_null(json_t *o, const char *field, time_t t)
{
    if (t != 0)
        put_time(o, field, t);
    else
        json_object_set_new(o, field, json_null());
}

/* "active", or "expired" once its expiry has passed. */
static const char *key_state(const char *state, time_t expires, time_t now)
{
    if (strcmp(state, "active") == 0 && expires != 0 && expires <= now)
        return "expired";
    return state;
}

static json_t *config_key_row(const struct gw_config *run, const struct gw_key *k, time_t now, admin_last_used_fn last_used)
{
    json_t *r = json_pack("{s:s, s:s, s:o, s:n, s:s}", "id", k->id, "tenant", run->tenants[k->tenant].name, "scopes",
                          scope_names(k->scopes), "created", "source", "config");

    put_time_or_null(r, "expires", k->expires);
    put_time_or_null(r, "last_used", last_used(k->id));
    json_object_set_new(r, "state", json_string(key_state("active", k->expires, now)));
    return r;
}

/* A store key as listed: its fields but the hash, with scopes spelled out and last used. */
static json_t *store_key_row(const json_t *k, time_t now, admin_last_used_fn last_used)
{
    json_t *r = json_deep_copy(k);
    const char *id = json_string_value(json_object_get(k, "id"));

    json_object_del(r, "sha256");
    if (json_object_get(r, "scopes") == NULL)
        json_object_set_new(r, "scopes", scope_names(POLICY_EP_ALL));
    if (json_object_get(r, "expires") == NULL)
        json_object_set_new(r, "expires", json_null());
    put_time_or_null(r, "last_used", last_used(id));
    json_object_set_new(r, "state",
                        json_string(key_state(json_string_value(json_object_get(k, "state")), get_time(k, "expires"), now)));
    json_object_set_new(r, "source", json_string("store"));
    return r;
}

static json_t *key_rows(const char *tenant, const json_t *doc, const struct gw_config *run, time_t now,
                        admin_last_used_fn last_used)
{
    json_t *rows = json_array(), *k;
    size_t i;

    for (i = 0; i + run->nstore_keys < run->nkeys; i++)
        if (tenant[0] == '\0' || strcmp(run->tenants[run->keys[i].tenant].name, tenant) == 0)
            json_array_append_new(rows, config_key_row(run, &run->keys[i], now, last_used));
    json_array_foreach(json_object_get(doc, "keys"), i, k)
    {
        if (tenant[0] == '\0' || strcmp(json_string_value(json_object_get(k, "tenant")), tenant) == 0)
            json_array_append_new(rows, store_key_row(k, now, last_used));
    }
    return rows;
}

static json_t *tenant_rows(const json_t *doc, const struct gw_config *run)
{
    json_t *rows = json_array(), *t;
    size_t i;

    for (i = 0; i + run->nstore_tenants < run->ntenants; i++)
        json_array_append_new(rows, json_pack("{s:s, s:s}", "name", run->tenants[i].name, "source", "config"));
    json_array_foreach(json_object_get(doc, "tenants"), i, t)
    {
        json_array_append_new(rows, json_pack("{s:O, s:s}", "name", json_object_get(t, "name"), "source", "store"));
    }
    return rows;
}

static json_t *issuer_rows(const json_t *doc, const struct gw_config *run)
{
    json_t *rows = json_array(), *e;
    size_t i;

    for (i = 0; i + run->nstore_issuers < run->nissuers; i++)
        json_array_append_new(
            rows, json_pack("{s:s, s:s, s:s}", "name", run->issuers[i].name, "iss", run->issuers[i].iss, "source", "config"));
    json_array_foreach(json_object_get(doc, "jwt_issuers"), i, e)
    {
        json_t *r = json_deep_copy(e);
        json_object_set_new(r, "source", json_string("store"));
        json_array_append_new(rows, r);
    }
    return rows;
}

static int tenant_show(const struct admin_req *q, const json_t *doc, const struct gw_config *run, time_t now,
                       admin_last_used_fn last_used, json_t *result, char *err, size_t errlen)
{
    json_t *t = find_in(doc, "tenants", "name", q->tenant, NULL), *view;

    if (t != NULL) {
        view = json_deep_copy(t);
        json_object_set_new(view, "source", json_string("store"));
    } else if (config_has_tenant(run, q->tenant)) {
        view = json_pack("{s:s, s:s}", "name", q->tenant, "source", "config");
    } else {
        return moat_errf(err, errlen, "no tenant %s", q->tenant);
    }
    json_object_set_new(view, "keys", key_rows(q->tenant, doc, run, now, last_used));
    json_object_set_new(result, "tenant", view);
    return 0;
}

int admin_read(const struct admin_req *q, const json_t *doc, const struct gw_config *run, time_t now, admin_last_used_fn last_used,
               json_t *result, char *err, size_t errlen)
{
    switch (q->cmd) {
    case ADMIN_TENANT_SHOW:
        return tenant_show(q, doc, run, now, last_used, result, err, errlen);
    case ADMIN_TENANT_LIST:
        return json_object_set_new(result, "tenants", tenant_rows(doc, run));
    case ADMIN_KEY_LIST:
        if (q->tenant[0] != '\0' && gw_config_find_tenant(run, q->tenant) == NULL &&
            find_in(doc, "tenants", "name", q->tenant, NULL) == NULL)
            return moat_errf(err, errlen, "no tenant %s", q->tenant);
        return json_object_set_new(result, "keys", key_rows(q->tenant, doc, run, now, last_used));
    case ADMIN_ISSUER_LIST:
        return json_object_set_new(result, "jwt_issuers", issuer_rows(doc, run));
    default:
        return moat_errf(err, errlen, "%s is not a read", q->name);
    }
}

/* ---------------------------------------------------------------- audit */

json_t *admin_audit_body(const struct admin_req *q, unsigned uid, const char *user)
{
    json_t *b =
        json_pack("{s:s, s:s, s:I, s:s}", "type", "admin", "action", q->name, "admin_uid", (json_int_t)uid, "admin_user", user);

    if (b == NULL)
        return NULL;
    if (q->tenant[0] != '\0')
        json_object_set_new(b, "tenant", json_string(q->tenant));
    if (q->key[0] != '\0')
        json_object_set_new(b, "key_id", json_string(q->key));
    if (q->id[0] != '\0')
        json_object_set_new(b, "new_key_id", json_string(q->id));
    if (q->issuer_name[0] != '\0')
        json_object_set_new(b, "issuer", json_string(q->issuer_name));
    if (q->cmd == ADMIN_KEY_ROTATE)
        json_object_set_new(b, "grace_s", json_integer((json_int_t)(q->has_grace ? q->grace_s : GW_DEFAULT_ROTATE_GRACE_S)));
    if (q->expires_s != 0)
        json_object_set_new(b, "expires_s", json_integer((json_int_t)q->expires_s));
    if (q->policy != NULL)
        json_object_set(b, "policy", q->policy);
    return b;
}
