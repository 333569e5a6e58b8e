/*
 * test_gateway_admin.c - admin.c: moatctl's request decoder and the
 * changes it makes to the store; config_store.c: the store read back by
 * the configuration's own parser (torn, misshapen and clashing stores are
 * refused).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "admin/admin.h"
#include "config/config.h"

static const char sha[] = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

static int decode(const char *text, struct admin_req *q, char *err)
{
    return admin_decode(text, strlen(text), q, err, 256);
}

static void refused(const char *text, const char *why)
{
    struct admin_req q;
    char err[256] = "";

    assert_int_equal(decode(text, &q, err), -1);
    if (strstr(err, why) == NULL)
        fail_msg("%s: \"%s\" does not say \"%s\"", text, err, why);
}

static void test_decode(void **state)
{
    struct admin_req q;
    char err[256];
    char big[GW_CONTROL_MAX_REQUEST + 64];

    (void)state;
    assert_int_equal(
        decode("{\"cmd\":\"key.create\",\"tenant\":\"acme\",\"id\":\"0123456789ab\",\"sha256\":\"00112233445566778899aabbccdd"
               "eeff00112233445566778899aabbccddeeff\",\"expires_s\":3600,\"scopes\":[\"execute\"],\"note\":\"n\"}",
               &q, err),
        0);
    assert_int_equal(q.cmd, ADMIN_KEY_CREATE);
    assert_true(q.mutates);
    assert_string_equal(q.tenant, "acme");
    assert_int_equal(q.expires_s, 3600);
    admin_req_free(&q);
    assert_int_equal(decode("{\"cmd\":\"key.list\"}", &q, err), 0);
    assert_false(q.mutates);
    admin_req_free(&q);

    refused("[]", "JSON object");
    refused("{\"cmd\":\"key.list\"", "not JSON");
    refused("{\"cmd\":\"key.frob\"}", "unknown or missing cmd");
    refused("{\"tenant\":\"x\"}", "unknown or missing cmd");
    refused("{\"cmd\":\"key.list\",\"sha256\":\"x\"}", "takes no field sha256");
    refused("{\"cmd\":\"key.list\",\"cmd\":\"status\"}", "not JSON"); /* duplicate names */
    refused("{\"cmd\":\"key.revoke\"}", "needs key");
    refused("{\"cmd\":\"key.revoke\",\"key\":\"0123456789AB\"}", "key id");
    refused("{\"cmd\":\"key.revoke\",\"key\":\"0123\"}", "key id");
    refused("{\"cmd\":\"key.revoke\",\"key\":7}", "key id");
    refused("{\"cmd\":\"key.create\",\"tenant\":\"a\",\"id\":\"0123456789ab\",\"sha256\":\"xyz\"}", "sha256");
    refused("{\"cmd\":\"key.create\",\"tenant\":\"a\",\"id\":\"0123456789ab\",\"sha256\":\"00\",\"expires_s\":-1}", "sha256");
    refused("{\"cmd\":\"key.rotate\",\"key\":\"0123456789ab\",\"id\":\"0123456789ac\",\"grace_s\":-5}", "grace_s");
    refused("{\"cmd\":\"key.rotate\",\"key\":\"0123456789ab\",\"id\":\"0123456789ac\",\"grace_s\":\"1h\"}", "grace_s");
    refused("{\"cmd\":\"key.create\",\"tenant\":\"a\",\"scopes\":[\"nope\"]}", "not an endpoint");
    refused("{\"cmd\":\"key.create\",\"tenant\":\"a\",\"scopes\":[]}", "non-empty");
    refused("{\"cmd\":\"tenant.add\",\"tenant\":\"a\",\"policy\":{\"keys\":[]}}", "not name or keys");
    refused("{\"cmd\":\"tenant.add\",\"tenant\":\"\"}", "1 to 64 bytes");
    refused("{\"cmd\":\"tenant.add\",\"tenant\":\"a\\u0000b\"}", "not JSON"); /* jansson refuses NUL */
    refused("{\"cmd\":\"jwt-issuer.add\",\"issuer\":{\"iss\":\"x\"}}", "with a name");
    memset(big, ' ', sizeof(big));
    assert_int_equal(admin_decode(big, sizeof(big), &q, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "longer than"));
}

/* ---- the store read back by the gateway's parser ---- */

static char dir[] = "/tmp/moat-unit-admin-XXXXXX";

static void write_file(const char *name, const char *text, char *path)
{
    FILE *f;

    snprintf(path, 512, "%s/%s", dir, name);
    assert_non_null(f = fopen(path, "w"));
    fputs(text, f);
    fclose(f);
    chmod(path, 0600);
}

/* A configuration with one tenant (conf) and a control section whose store is store.json. */
static void write_config(char *conf, char *store)
{
    char text[2048];

    snprintf(store, 512, "%s/store.json", dir);
    snprintf(text, sizeof(text),
             "tls: {certificate: /nonexistent.pem, key: /nonexistent.key}\n"
             "audit: {dir: %s}\n"
             "control: {socket: %s/control.sock, store: %s}\n"
             "tenants:\n  - name: conf\n    keys:\n      - {id: aaaaaaaaaaaa, sha256: %s}\n",
             dir, dir, store, sha);
    write_file("gateway.conf", text, conf);
}

static int load_store(const char *store_text, struct gw_config *cfg, char *err)
{
    char conf[512], store[512], path[512];

    write_config(conf, store);
    if (store_text != NULL)
        write_file("store.json", store_text, path);
    else
        unlink(store);
    return gw_config_load(conf, cfg, err, 1024);
}

static void store_refused(const char *text, const char *why)
{
    struct gw_config cfg;
    char err[1024] = "";

    assert_int_equal(load_store(text, &cfg, err), -1);
    if (strstr(err, why) == NULL || strstr(err, "store.json") == NULL)
        fail_msg("\"%s\" does not name the store and say \"%s\"", err, why);
}

#define KEY(id, state, tenant)                                                                                                     \
    "{\"id\":\"" id "\",\"tenant\":\"" tenant "\",\"sha256\":\"%s\",\"state\":\"" state "\",\"created\":\"2026-01-01T00:00:00Z\"}"

static void test_store_parse(void **state)
{
    struct gw_config cfg;
    char err[1024], text[4096];

    (void)state;
    /* none yet: empty */
    assert_int_equal(load_store(NULL, &cfg, err), 0);
    assert_int_equal(cfg.ntenants, 1);
    assert_int_equal(cfg.nstore_tenants, 0);
    gw_config_free(&cfg);

    /* a tenant, an active key (to the store tenant), a revoked one (never loaded), one on the config's tenant */
    snprintf(text, sizeof(text),
             "{\"version\":1,\"tenants\":[{\"name\":\"acme\",\"rate\":{\"per_second\":5,\"burst\":5}}],\"keys\":[" KEY(
                 "bbbbbbbbbbbb", "active", "acme") "," KEY("cccccccccccc", "revoked", "acme") "," KEY("dddddddddddd", "active",
                                                                                                      "conf") "]}",
             sha, sha, sha);
    assert_int_equal(load_store(text, &cfg, err), 0);
    assert_int_equal(cfg.ntenants, 2);
    assert_int_equal(cfg.nstore_tenants, 1);
    assert_int_equal(cfg.nkeys, 3);
    assert_int_equal(cfg.nstore_keys, 2);
    assert_non_null(gw_config_find_key(&cfg, "bbbbbbbbbbbb"));
    assert_null(gw_config_find_key(&cfg, "cccccccccccc"));
    assert_string_equal(cfg.tenants[gw_config_find_key(&cfg, "dddddddddddd")->tenant].name, "conf");
    gw_config_free(&cfg);

    /* torn, empty, misshapen, clashing */
    store_refused("{\"version\":1,\"tenants\":[{\"name\":\"ac", "");
    store_refused("", "empty store");
    store_refused("{\"tenants\":[]}", "no version");
    store_refused("{\"version\":2}", "store version 2");
    store_refused("{\"version\":1,\"extra\":1}", "extra");
    store_refused("{\"version\":1,\"tenants\":[{\"name\":\"conf\"}]}", "duplicate tenant name");
    store_refused("{\"version\":1,\"tenants\":[{\"name\":\"x\",\"keys\":[]}]}", "holds no keys");
    store_refused("{\"version\":1,\"tenants\":[{\"name\":\"x\",\"rate\":{\"per_second\":-1}}]}", "rate");
    snprintf(text, sizeof(text), "{\"version\":1,\"keys\":[" KEY("aaaaaaaaaaaa", "active", "conf") "]}", sha);
    store_refused(text, "duplicate key id aaaaaaaaaaaa");
    snprintf(text, sizeof(text), "{\"version\":1,\"keys\":[" KEY("bbbbbbbbbbbb", "active", "ghost") "]}", sha);
    store_refused(text, "not a tenant");
    snprintf(text, sizeof(text), "{\"version\":1,\"keys\":[" KEY("bbbbbbbbbbbb", "lost", "conf") "]}", sha);
    store_refused(text, "active or revoked");
    /* the control socket belongs to the audit trail's supervisor: no audit, no control */
    char conf[512];
    snprintf(text, sizeof(text), "tls: {certificate: /x.pem, key: /x.key}\ncontrol: {socket: %s/control.sock}\n", dir);
    write_file("noaudit.conf", text, conf);
    assert_int_equal(gw_config_load(conf, &cfg, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "control needs the audit section"));
    /* a revoked key may outlive its tenant */
    snprintf(text, sizeof(text), "{\"version\":1,\"keys\":[" KEY("bbbbbbbbbbbb", "revoked", "ghost") "]}", sha);
    assert_int_equal(load_store(text, &cfg, err), 0);
    gw_config_free(&cfg);
}

/* ---- many keys: the lookup indexes (config_index.h) ---- */

#define MANY_TENANTS 1000
#define PER_TENANT   16

/* A configuration of MANY_TENANTS tenants t0.. with PER_TENANT keys each,
 * ids 000000000001.. in order (ids an administrator chose, which differ
 * only in their last digits), and then extra (more YAML, or ""). */
static int load_many(const char *extra, struct gw_config *cfg, char *err)
{
    size_t cap = (size_t)MANY_TENANTS * PER_TENANT * 128 + 4096, len = 0;
    char *text = malloc(cap), path[512];
    int rc;

    assert_non_null(text);
    len += (size_t)snprintf(text + len, cap - len, "tls: {certificate: /nonexistent.pem, key: /nonexistent.key}\ntenants:\n");
    for (unsigned t = 0; t < MANY_TENANTS; t++) {
        len += (size_t)snprintf(text + len, cap - len, "  - name: t%u\n    keys:\n", t);
        for (unsigned k = 0; k < PER_TENANT; k++)
            len += (size_t)snprintf(text + len, cap - len, "      - {id: %012x, sha256: %s}\n", t * PER_TENANT + k + 1, sha);
    }
    snprintf(text + len, cap - len, "%s", extra);
    write_file("many.conf", text, path);
    free(text);
    rc = gw_config_load(path, cfg, err, 1024);
    return rc;
}

static void test_many_keys(void **state)
{
    struct gw_config cfg;
    char err[1024] = "", id[16], name[16];

    (void)state;
    assert_int_equal(load_many("", &cfg, err), 0);
    assert_int_equal(cfg.nkeys, MANY_TENANTS * PER_TENANT);
    for (unsigned i = 1; i <= MANY_TENANTS * PER_TENANT; i++) {
        snprintf(id, sizeof(id), "%012x", i);
        const struct gw_key *k = gw_config_find_key(&cfg, id);
        assert_non_null(k);
        assert_string_equal(k->id, id);
        assert_int_equal(k->tenant, (i - 1) / PER_TENANT);
    }
    for (unsigned i = MANY_TENANTS * PER_TENANT + 1; i <= MANY_TENANTS * PER_TENANT + 1000; i++) {
        snprintf(id, sizeof(id), "%012x", i);
        assert_null(gw_config_find_key(&cfg, id));
    }
    assert_null(gw_config_find_key(&cfg, "00000000000g"));
    for (unsigned t = 0; t < MANY_TENANTS; t++) {
        snprintf(name, sizeof(name), "t%u", t);
        assert_ptr_equal(gw_config_find_tenant(&cfg, name), &cfg.tenants[t]);
    }
    assert_null(gw_config_find_tenant(&cfg, "t1000"));
    assert_null(gw_config_find_tenant(&cfg, "t"));
    gw_config_free(&cfg);

    /* a duplicate is still found, in either list */
    assert_int_equal(load_many("  - name: late\n    keys:\n      - {id: 000000003e80, sha256: "
                               "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff}\n",
                               &cfg, err),
                     -1);
    assert_non_null(strstr(err, "duplicate key id 000000003e80"));
    assert_int_equal(load_many("  - name: t999\n", &cfg, err), -1);
    assert_non_null(strstr(err, "duplicate tenant name"));
}

/* Entries whose hashes collide are all candidates, in the order added,
 * across the table's growth; another hash finds none of them. */
static void test_index_collisions(void **state)
{
    struct gw_index ix = {NULL, 0, 0};
    size_t pos = 0;

    (void)state;
    for (size_t i = 0; i < 100; i++)
        assert_int_equal(gw_index_add(&ix, i % 2 ? 7u : (uint32_t)(i * 2654435761u), i), 0);
    for (size_t i = 1; i < 100; i += 2)
        assert_int_equal(gw_index_next(&ix, 7u, &pos), i + 1);
    assert_int_equal(gw_index_next(&ix, 7u, &pos), 0);
    pos = 0;
    assert_int_equal(gw_index_next(&ix, 8u, &pos), 0);
    assert_true(ix.mask + 1 >= 200); /* at most half full */
    gw_index_free(&ix);
    pos = 0;
    assert_int_equal(gw_index_next(&ix, 7u, &pos), 0);
}

/* ---- changes to the document ---- */

static void apply_ok(const char *req, json_t *doc, const struct gw_config *run, time_t now, json_t *result)
{
    struct admin_req q;
    char err[256];

    assert_int_equal(decode(req, &q, err), 0);
    if (admin_apply(&q, doc, run, now, result, err, sizeof(err)) != 0)
        fail_msg("%s: %s", req, err);
    admin_req_free(&q);
}

static void apply_refused(const char *req, json_t *doc, const struct gw_config *run, const char *why)
{
    struct admin_req q;
    char err[256] = "";
    json_t *result = json_object();

    assert_int_equal(decode(req, &q, err), 0);
    assert_int_equal(admin_apply(&q, doc, run, 1000, result, err, sizeof(err)), -1);
    if (strstr(err, why) == NULL)
        fail_msg("%s: \"%s\" does not say \"%s\"", req, err, why);
    admin_req_free(&q);
    json_decref(result);
}

static json_t *key_in(json_t *doc, const char *id)
{
    size_t i;
    json_t *k;

    json_array_foreach(json_object_get(doc, "keys"), i, k)
    {
        if (strcmp(json_string_value(json_object_get(k, "id")), id) == 0)
            return k;
    }
    return NULL;
}

static void test_apply(void **state)
{
    struct gw_config run;
    char err[1024], req[512];
    json_t *doc = admin_store_empty(), *result = json_object();

    (void)state;
    assert_int_equal(load_store(NULL, &run, err), 0);
    assert_int_equal(admin_store_check(doc, err, sizeof(err)), 0);
    apply_ok("{\"cmd\":\"tenant.add\",\"tenant\":\"acme\",\"policy\":{\"rate\":{\"per_second\":5}}}", doc, &run, 1000, result);
    apply_refused("{\"cmd\":\"tenant.add\",\"tenant\":\"acme\"}", doc, &run, "exists");
    apply_refused("{\"cmd\":\"tenant.add\",\"tenant\":\"conf\"}", doc, &run, "in the configuration file");
    apply_refused("{\"cmd\":\"tenant.set\",\"tenant\":\"conf\",\"policy\":{}}", doc, &run, "change it there");
    /* set merges: rate.burst joins rate.per_second; null removes */
    apply_ok("{\"cmd\":\"tenant.set\",\"tenant\":\"acme\",\"policy\":{\"rate\":{\"burst\":9},\"max_in_flight\":3}}", doc, &run,
             1000, result);
    apply_ok("{\"cmd\":\"tenant.set\",\"tenant\":\"acme\",\"policy\":{\"max_in_flight\":null}}", doc, &run, 1000, result);
    json_t *t = json_array_get(json_object_get(doc, "tenants"), 0);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(t, "rate"), "per_second")), 5);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(t, "rate"), "burst")), 9);
    assert_null(json_object_get(t, "max_in_flight"));

    snprintf(req, sizeof(req),
             "{\"cmd\":\"key.create\",\"tenant\":\"acme\",\"id\":\"111111111111\",\"sha256\":\"%s\",\"expires_s\":100}", sha);
    apply_ok(req, doc, &run, 1000, result);
    snprintf(req, sizeof(req), "{\"cmd\":\"key.create\",\"tenant\":\"acme\",\"id\":\"aaaaaaaaaaaa\",\"sha256\":\"%s\"}", sha);
    apply_refused(req, doc, &run, "taken"); /* the configuration file's key */
    snprintf(req, sizeof(req), "{\"cmd\":\"key.create\",\"tenant\":\"ghost\",\"id\":\"121212121212\",\"sha256\":\"%s\"}", sha);
    apply_refused(req, doc, &run, "no tenant ghost");

    /* rotate: the old key ends at the sooner of its own expiry and the grace */
    snprintf(req, sizeof(req),
             "{\"cmd\":\"key.rotate\",\"key\":\"111111111111\",\"id\":\"222222222222\",\"sha256\":\"%s\",\"grace_s\":10}", sha);
    apply_ok(req, doc, &run, 1000, result);
    assert_string_equal(json_string_value(json_object_get(key_in(doc, "111111111111"), "expires")), "1970-01-01T00:16:50Z");
    assert_string_equal(json_string_value(json_object_get(key_in(doc, "111111111111"), "replaced_by")), "222222222222");
    assert_string_equal(json_string_value(json_object_get(key_in(doc, "222222222222"), "rotated_from")), "111111111111");
    snprintf(req, sizeof(req), "{\"cmd\":\"key.rotate\",\"key\":\"111111111111\",\"id\":\"444444444444\",\"sha256\":\"%s\"}", sha);
    apply_refused(req, doc, &run, "already rotated");
    snprintf(req, sizeof(req),
             "{\"cmd\":\"key.rotate\",\"key\":\"222222222222\",\"id\":\"333333333333\",\"sha256\":\"%s\",\"grace_s\":99999}", sha);
    apply_ok(req, doc, &run, 1000, result);
    assert_null(json_object_get(key_in(doc, "333333333333"), "expires"));
    assert_string_equal(json_string_value(json_object_get(key_in(doc, "222222222222"), "expires")), "1970-01-02T04:03:19Z");

    apply_refused("{\"cmd\":\"tenant.remove\",\"tenant\":\"acme\"}", doc, &run, "active key");
    apply_refused("{\"cmd\":\"key.revoke\",\"key\":\"aaaaaaaaaaaa\"}", doc, &run, "in the configuration file");
    apply_refused("{\"cmd\":\"key.revoke\",\"key\":\"999999999999\"}", doc, &run, "no key");
    apply_ok("{\"cmd\":\"key.revoke\",\"key\":\"111111111111\"}", doc, &run, 1000, result);
    apply_ok("{\"cmd\":\"key.revoke\",\"key\":\"222222222222\"}", doc, &run, 1000, result);
    apply_ok("{\"cmd\":\"key.revoke\",\"key\":\"333333333333\"}", doc, &run, 1000, result);
    apply_refused("{\"cmd\":\"key.revoke\",\"key\":\"333333333333\"}", doc, &run, "is revoked");
    apply_ok("{\"cmd\":\"tenant.remove\",\"tenant\":\"acme\"}", doc, &run, 1000, result);
    assert_int_equal(json_array_size(json_object_get(doc, "tenants")), 0);

    /* the audit record names ids, never the hash */
    struct admin_req q;
    snprintf(req, sizeof(req), "{\"cmd\":\"key.create\",\"tenant\":\"acme\",\"id\":\"111111111111\",\"sha256\":\"%s\"}", sha);
    assert_int_equal(decode(req, &q, err), 0);
    json_t *b = admin_audit_body(&q, 0, "root");
    char *s = json_dumps(b, 0);
    assert_null(strstr(s, sha));
    assert_non_null(strstr(s, "\"new_key_id\": \"111111111111\""));
    free(s);
    json_decref(b);
    admin_req_free(&q);

    gw_config_free(&run);
    json_decref(doc);
    json_decref(result);
}

static int setup(void **state)
{
    (void)state;
    return mkdtemp(dir) != NULL ? 0 : -1;
}

static int teardown(void **state)
{
    char cmd[128];

    (void)state;
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode),    cmocka_unit_test(test_store_parse),      cmocka_unit_test(test_apply),
        cmocka_unit_test(test_many_keys), cmocka_unit_test(test_index_collisions),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
