/*
 * config_server.c - the configuration's serving sections: listen, tls,
 * backend, timeouts, http2, and the top-level user, workers, request size,
 * connection limits and load balancers (trusted_proxies, proxy_protocol).
 *
 * cfg_server_field() takes these keys from the top-level mapping (config.c
 * hands it every key that is not a tenant, issuer or audit key); each
 * section is a mapping walked by its own field function.  After the walk,
 * cfg_server_finish() checks what only the whole file can tell (a
 * certificate and key, a CA when client certificates are required), then
 * applies MOAT_PORT from the environment and resolves "workers: 0".
 */
#include "config_parse.h"
#include "common/gw_limits.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <unistd.h>

static int listen_field(struct parse_ctx *pc, const char *key, yaml_node_t *v, void *arg)
{
    uint64_t port;

    if (strcmp(key, "address") == 0) {
        unsigned char buf[sizeof(struct in6_addr)];
        if (cfg_string(pc, v, "listen.address", 64, &pc->cfg->listen_address) != 0)
            return -1;
        if (inet_pton(AF_INET, pc->cfg->listen_address, buf) != 1 && inet_pton(AF_INET6, pc->cfg->listen_address, buf) != 1)
            return cfg_fail(pc, v, "listen.address must be a numeric IPv4 or IPv6 address");
        return 0;
    }
    if (strcmp(key, "port") == 0) {
        if (cfg_uint(pc, v, "listen.port", 1, 65535, &port) != 0)
            return -1;
        pc->cfg->listen_port = (uint16_t)port;
        return 0;
    }
    return 1;
}

static int tls_field(struct parse_ctx *pc, const char *key, yaml_node_t *v, void *arg)
{
    if (strcmp(key, "certificate") == 0)
        return cfg_string(pc, v, "tls.certificate", GW_MAX_PATH_LEN, &pc->cfg->tls_certificate);
    if (strcmp(key, "key") == 0)
        return cfg_string(pc, v, "tls.key", GW_MAX_PATH_LEN, &pc->cfg->tls_key);
    if (strcmp(key, "client_ca") == 0)
        return cfg_string(pc, v, "tls.client_ca", GW_MAX_PATH_LEN, &pc->cfg->tls_client_ca);
    if (strcmp(key, "require_client_certificate") == 0)
        return cfg_bool(pc, v, "tls.require_client_certificate", &pc->cfg->tls_require_client_cert);
    return 1;
}

static int timeouts_field(struct parse_ctx *pc, const char *key, yaml_node_t *v, void *arg)
{
    if (strcmp(key, "header_ms") == 0)
        return cfg_uint(pc, v, "timeouts.header_ms", 1, GW_MAX_TIMEOUT_MS, &pc->cfg->header_timeout_ms);
    if (strcmp(key, "body_ms") == 0)
        return cfg_uint(pc, v, "timeouts.body_ms", 1, GW_MAX_TIMEOUT_MS, &pc->cfg->body_timeout_ms);
    if (strcmp(key, "idle_ms") == 0)
        return cfg_uint(pc, v, "timeouts.idle_ms", 1, GW_MAX_TIMEOUT_MS, &pc->cfg->idle_timeout_ms);
    if (strcmp(key, "send_ms") == 0)
        return cfg_uint(pc, v, "timeouts.send_ms", 1, GW_MAX_TIMEOUT_MS, &pc->cfg->send_timeout_ms);
    return 1;
}

static int http2_field(struct parse_ctx *pc, const char *key, yaml_node_t *v, void *arg)
{
    if (strcmp(key, "max_concurrent_streams") == 0)
        return cfg_unsigned(pc, v, "http2.max_concurrent_streams", 1, GW_MAX_H2_MAX_STREAMS, &pc->cfg->http2_max_streams);
    if (strcmp(key, "reset_budget") == 0)
        return cfg_unsigned(pc, v, "http2.reset_budget", 0, GW_MAX_H2_RESET_BUDGET, &pc->cfg->http2_reset_budget);
    if (strcmp(key, "max_header_list_bytes") == 0) {
        uint64_t n;
        if (cfg_uint(pc, v, "http2.max_header_list_bytes", GW_MIN_H2_MAX_HEADER_LIST, GW_MAX_H2_MAX_HEADER_LIST, &n) != 0)
            return -1;
        pc->cfg->http2_max_header_list_bytes = (size_t)n;
        return 0;
    }
    if (strcmp(key, "max_headers") == 0)
        return cfg_unsigned(pc, v, "http2.max_headers", 1, GW_MAX_H2_MAX_HEADERS, &pc->cfg->http2_max_headers);
    return 1;
}

static int backend_field(struct parse_ctx *pc, const char *key, yaml_node_t *v, void *arg)
{
    if (strcmp(key, "socket") == 0) {
        struct sockaddr_un sun;
        if (cfg_string(pc, v, "backend.socket", sizeof(sun.sun_path) - 1, &pc->cfg->backend_socket) != 0)
            return -1;
        if (pc->cfg->backend_socket[0] != '/')
            return cfg_fail(pc, v, "backend.socket must be an absolute path");
        return 0;
    }
    if (strcmp(key, "timeout_ms") == 0)
        return cfg_uint(pc, v, "backend.timeout_ms", 1, GW_MAX_BACKEND_TIMEOUT_MS, &pc->cfg->backend_timeout_ms);
    return 1;
}

/* trusted_proxies: a sequence of CIDRs ("10.0.0.0/8", "192.0.2.7", "fd00::/8"). */
static int trusted_proxies(struct parse_ctx *pc, const yaml_node_t *n)
{
    yaml_node_item_t *it;
    struct gw_config *cfg = pc->cfg;

    if (n->type != YAML_SEQUENCE_NODE)
        return cfg_fail(pc, n, "trusted_proxies must be a sequence of addresses or CIDR ranges");
    cfg->ntrusted_proxies = 0;
    for (it = n->data.sequence.items.start; it < n->data.sequence.items.top; it++) {
        yaml_node_t *e = yaml_document_get_node(pc->doc, *it);
        if (cfg_want_scalar(pc, e, "trusted_proxies") != 0)
            return -1;
        if (cfg->ntrusted_proxies == GW_MAX_TRUSTED_PROXIES)
            return cfg_fail(pc, e, "trusted_proxies: at most %d ranges", GW_MAX_TRUSTED_PROXIES);
        if (gw_cidr_parse(cfg_scalar(e), &cfg->trusted_proxies[cfg->ntrusted_proxies]) != 0)
            return cfg_fail(pc, e,
                            "trusted_proxies: '%s' is not an address or a CIDR range with no bits set past its prefix "
                            "(10.0.0.0/8, 192.0.2.7, fd00::/8)",
                            cfg_scalar(e));
        cfg->ntrusted_proxies++;
    }
    return 0;
}

/* The serving sections, each a mapping with its own field function. */
static const struct {
    const char *key;
    cfg_field_fn field;
} sections[] = {
    {"listen", listen_field}, {"tls", tls_field}, {"backend", backend_field}, {"timeouts", timeouts_field}, {"http2", http2_field},
};

int cfg_server_field(struct parse_ctx *pc, const char *key, yaml_node_t *v, void *arg)
{
    uint64_t n;

    for (size_t i = 0; i < sizeof(sections) / sizeof(sections[0]); i++)
        if (strcmp(key, sections[i].key) == 0)
            return cfg_walk_mapping(pc, v, sections[i].key, sections[i].field, NULL);
    if (strcmp(key, "user") == 0)
        return cfg_string(pc, v, "user", 32, &pc->cfg->user);
    if (strcmp(key, "workers") == 0)
        return cfg_unsigned(pc, v, "workers", 0, GW_MAX_WORKERS, &pc->cfg->workers);
    if (strcmp(key, "max_request_entity_size") == 0) {
        if (cfg_uint(pc, v, "max_request_entity_size", 1, GW_MAX_ENTITY, &n) != 0)
            return -1;
        pc->cfg->max_request_entity_size = (size_t)n;
        return 0;
    }
    if (strcmp(key, "max_connections") == 0)
        return cfg_unsigned(pc, v, "max_connections", 1, GW_MAX_CONNECTIONS, &pc->cfg->max_connections);
    if (strcmp(key, "max_connections_per_address") == 0)
        return cfg_unsigned(pc, v, "max_connections_per_address", 1, GW_MAX_CONNECTIONS, &pc->cfg->max_connections_per_address);
    if (strcmp(key, "trusted_proxies") == 0)
        return trusted_proxies(pc, v);
    if (strcmp(key, "proxy_protocol") == 0)
        return cfg_bool(pc, v, "proxy_protocol", &pc->cfg->proxy_protocol);
    return 1;
}

/* MOAT_PORT, when set, wins over listen.port. */
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
        return cfg_fail(pc, NULL, "MOAT_PORT must be a port number between 1 and 65535");
    pc->cfg->listen_port = (uint16_t)v;
    return 0;
}

/* workers: 0 means one per CPU, at most GW_MAX_WORKERS. */
static void resolve_workers(struct gw_config *cfg)
{
    long n;

    if (cfg->workers != 0)
        return;
    n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1)
        n = 1;
    if (n > GW_MAX_WORKERS)
        n = GW_MAX_WORKERS;
    cfg->workers = (unsigned)n;
}

int cfg_server_finish(struct parse_ctx *pc, const yaml_node_t *root)
{
    const struct gw_config *cfg = pc->cfg;

    if (cfg->tls_certificate == NULL || cfg->tls_key == NULL)
        return cfg_fail(pc, root, "tls.certificate and tls.key are required");
    if (cfg->tls_require_client_cert && cfg->tls_client_ca == NULL)
        return cfg_fail(pc, root, "tls.require_client_certificate needs tls.client_ca");
    if (cfg->proxy_protocol && cfg->ntrusted_proxies == 0)
        return cfg_fail(pc, root, "proxy_protocol needs trusted_proxies: the peers that send the PROXY header");
    if (apply_env(pc) != 0)
        return -1;
    resolve_workers(pc->cfg);
    return 0;
}
