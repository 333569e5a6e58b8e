/*
 * config.c - load gateway.conf (YAML) into struct gw_config.
 *
 * Theory of operation: gw_config_load() runs four steps and stops at the
 * first failure, leaving cfg empty (fail closed: a configuration is taken
 * whole or not at all):
 *
 *   1. set_defaults    every field to its default from gw_limits.h
 *   2. load_document   open the file, refuse it if group or others may
 *                      write it (gw_check_file_secrecy), and parse the
 *                      whole of it as one libyaml document
 *   3. walk            the top-level mapping, each key handed to its
 *                      section's parser (top_field below; the sections
 *                      live in config_*.c, see config_parse.h)
 *   4. finish          with a control section, the admin store joins in
 *                      (config_store.c: its tenants, keys and issuers,
 *                      read with the same section parsers); then what
 *                      only the whole picture can tell: every JWT
 *                      issuer's tenants are configured tenants
 *                      (issuer_tenants_known), MOAT_PORT and the worker
 *                      count (cfg_server_finish), then the metrics
 *                      listener against the public one (cfg_metrics_finish)
 *
 * Every error names the file and line ("PATH:LINE: reason").  After a
 * load the configuration is read-only; gw_config_free() releases it.
 */
#include "config.h"
#include "config_parse.h"
#include "common/gw_limits.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---------------------------------------------------------------- loading */

static int set_defaults(struct gw_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->listen_port = GW_DEFAULT_PORT;
    cfg->unauth_per_second = GW_DEFAULT_UNAUTH_PER_SECOND;
    cfg->unauth_burst = GW_DEFAULT_UNAUTH_BURST;
    cfg->unauth_summary_ms = GW_DEFAULT_UNAUTH_SUMMARY_MS;
    cfg->backend_timeout_ms = GW_DEFAULT_BACKEND_TIMEOUT_MS;
    cfg->metrics.backend_timeout_ms = GW_DEFAULT_METRICS_BACKEND_TIMEOUT_MS;
    cfg->max_request_entity_size = GW_DEFAULT_MAX_ENTITY;
    cfg->header_timeout_ms = GW_DEFAULT_HEADER_TIMEOUT_MS;
    cfg->body_timeout_ms = GW_DEFAULT_BODY_TIMEOUT_MS;
    cfg->idle_timeout_ms = GW_DEFAULT_IDLE_TIMEOUT_MS;
    cfg->send_timeout_ms = GW_DEFAULT_SEND_TIMEOUT_MS;
    cfg->http2_max_streams = GW_DEFAULT_H2_MAX_STREAMS;
    cfg->http2_reset_budget = GW_DEFAULT_H2_RESET_BUDGET;
    cfg->http2_max_header_list_bytes = GW_DEFAULT_H2_MAX_HEADER_LIST;
    cfg->http2_max_headers = GW_DEFAULT_H2_MAX_HEADERS;
    cfg->max_connections = GW_DEFAULT_MAX_CONNECTIONS;
    cfg->max_connections_per_address = GW_DEFAULT_MAX_CONN_PER_ADDR;
    cfg->sessions.init_timeout_ms = GW_DEFAULT_SESSION_INIT_TIMEOUT_MS;
    cfg->sessions.max_sessions = GW_DEFAULT_MAX_SESSIONS;
    cfg->sessions.watch_token_ttl_s = GW_DEFAULT_WATCH_TOKEN_TTL_S;
    cfg->sessions.max_watchers = GW_DEFAULT_MAX_WATCHERS;
    cfg->submissions.ttl_s = GW_DEFAULT_JUDGE0_TTL_S;
    cfg->submissions.max_per_tenant = GW_DEFAULT_JUDGE0_MAX_PER_TENANT;
    cfg->submissions.max_records = GW_DEFAULT_JUDGE0_MAX_RECORDS;
    cfg->submissions.max_bytes = GW_DEFAULT_JUDGE0_MAX_BYTES;
    cfg->submissions.max_running = GW_DEFAULT_JUDGE0_MAX_RUNNING;
    cfg->submissions.queue_max = GW_DEFAULT_JUDGE0_QUEUE_MAX;
    cfg->submissions.queue_max_per_tenant = GW_DEFAULT_JUDGE0_QUEUE_PER_TENANT;
    cfg->submissions.queue_max_bytes_per_tenant = GW_DEFAULT_QUEUE_MAX_BYTES_PER_TENANT;
    cfg->submissions.max_attempts = GW_DEFAULT_QUEUE_MAX_ATTEMPTS;
    cfg->limiter.port = GW_REDIS_DEFAULT_PORT;
    cfg->limiter.connect_timeout_ms = GW_REDIS_DEFAULT_CONNECT_TIMEOUT_MS;
    cfg->limiter.timeout_ms = GW_REDIS_DEFAULT_TIMEOUT_MS;
    cfg->limiter.lease_ms = GW_REDIS_DEFAULT_LEASE_MS;
    cfg->limiter.gateways = GW_REDIS_DEFAULT_GATEWAYS;
    cfg->listen_address = strdup(GW_DEFAULT_ADDRESS);
    cfg->backend_socket = strdup(GW_DEFAULT_BACKEND_SOCKET);
    cfg->user = strdup(GW_DEFAULT_USER);
    return cfg->listen_address != NULL && cfg->backend_socket != NULL && cfg->user != NULL ? 0 : -1;
}

/* A top-level key: a section of its own, or one about serving (config_server.c). */
static int top_field(struct parse_ctx *pc, const char *key, yaml_node_t *v, void *arg)
{
    if (strcmp(key, "tenants") == 0)
        return cfg_parse_tenants(pc, v);
    if (strcmp(key, "jwt_issuers") == 0)
        return cfg_parse_issuers(pc, v);
    if (strcmp(key, "audit") == 0)
        return cfg_parse_audit(pc, v);
    if (strcmp(key, "unauthenticated") == 0)
        return cfg_parse_unauthenticated(pc, v);
    if (strcmp(key, "sessions") == 0)
        return cfg_parse_sessions(pc, v);
    if (strcmp(key, "submissions") == 0)
        return cfg_parse_submissions(pc, v);
    if (strcmp(key, "callbacks") == 0)
        return cfg_parse_callbacks(pc, v);
    if (strcmp(key, "control") == 0)
        return cfg_parse_control(pc, v);
    if (strcmp(key, "limiter") == 0)
        return cfg_parse_limiter(pc, v);
    if (strcmp(key, "metrics") == 0)
        return cfg_parse_metrics(pc, v);
    if (strcmp(key, "log") == 0)
        return cfg_parse_log(pc, v);
    return cfg_server_field(pc, key, v, arg);
}

/* Step 4: an issuer may only name tenants that exist (a typo would otherwise only show as 401s). */
static int issuer_tenants_known(struct parse_ctx *pc)
{
    const struct gw_config *cfg = pc->cfg;

    for (size_t i = 0; i < cfg->nissuers; i++)
        for (size_t t = 0; t < cfg->issuers[i].ntenants; t++)
            if (gw_config_find_tenant(cfg, cfg->issuers[i].tenants[t]) == NULL)
                return cfg_fail(pc, NULL, "JWT issuer %s: tenant %s is not a configured tenant", cfg->issuers[i].name,
                                cfg->issuers[i].tenants[t]);
    return 0;
}

/* Steps 3 and 4, over the loaded document; with a control section the
 * admin store (store_path, or the one the section names) joins in before
 * the checks that need the whole picture. */
static int parse_document(struct parse_ctx *pc, const char *store_path)
{
    yaml_node_t *root = yaml_document_get_root_node(pc->doc);

    if (root == NULL)
        return cfg_fail(pc, NULL, "empty configuration");
    if (cfg_walk_mapping(pc, root, "configuration", top_field, NULL) != 0)
        return -1;
    if (pc->cfg->control.socket != NULL && !pc->cfg->audit_enabled)
        return cfg_fail(pc, NULL, "control needs the audit section: the control socket lives in the audit trail's supervisor");
    if (pc->cfg->control.redis_store && !pc->cfg->limiter.redis)
        return cfg_fail(pc, NULL, "control.store_backend: redis needs limiter: store: redis (its redis section is the connection)");
    if (pc->cfg->control.socket != NULL && cfg_load_store(pc, store_path != NULL ? store_path : pc->cfg->control.store) != 0)
        return -1;
    if (issuer_tenants_known(pc) != 0 || cfg_callbacks_finish(pc) != 0 || cfg_submissions_finish(pc) != 0)
        return -1;
    if (cfg_server_finish(pc, root) != 0)
        return -1;
    return cfg_metrics_finish(pc); /* after MOAT_PORT */
}

int gw_config_load_with_store(const char *path, const char *store_path, struct gw_config *cfg, char *err, size_t errlen)
{
    struct parse_ctx pc = {path, NULL, cfg, err, errlen};
    yaml_document_t doc;
    int rc;

    if (errlen > 0)
        err[0] = '\0';
    if (set_defaults(cfg) != 0) {
        rc = cfg_fail(&pc, NULL, "out of memory");
    } else if ((rc = cfg_load_document(&pc, &doc, 0)) == 0) {
        pc.doc = &doc;
        rc = parse_document(&pc, store_path);
        yaml_document_delete(&doc);
    }
    if (rc != 0)
        gw_config_free(cfg);
    return rc;
}

int gw_config_load(const char *path, struct gw_config *cfg, char *err, size_t errlen)
{
    return gw_config_load_with_store(path, NULL, cfg, err, errlen);
}

void gw_config_free(struct gw_config *cfg)
{
    free(cfg->listen_address);
    free(cfg->tls_certificate);
    free(cfg->tls_key);
    free(cfg->tls_client_ca);
    free(cfg->backend_socket);
    free(cfg->user);
    cfg_free_tenants(cfg);
    free(cfg->keys);
    gw_index_free(&cfg->key_index);
    gw_index_free(&cfg->tenant_index);
    cfg_free_issuers(cfg);
    free(cfg->audit.dir);
    free(cfg->submissions.store_dir);
    free(cfg->audit.user);
    free(cfg->audit.writer);
    cfg_free_callbacks(cfg);
    cfg_free_control(cfg);
    cfg_free_limiter(cfg);
    free(cfg->metrics.address);
    memset(cfg, 0, sizeof(*cfg));
}
