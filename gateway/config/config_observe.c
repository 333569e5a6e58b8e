/*
 * config_observe.c - the configuration's observability sections.
 *
 *   metrics:                    # absent: no metrics listener at all
 *     address: 127.0.0.1        # numeric; default 127.0.0.1
 *     port: 9464                # default 9464; never the public listener's port
 *     allow_non_loopback: false # another address must be said to be meant
 *     backend_timeout_ms: 1000  # a scrape's wait for the backend's load
 *
 *   log:
 *     format: text              # text (default) | json
 *
 * The metrics listener is plain HTTP (the Prometheus convention) and
 * answers every scrape without credentials, so it is off unless the
 * section is present, on loopback unless allow_non_loopback says the
 * operator put it on a private network, and never on the public port
 * (cfg_metrics_finish, after MOAT_PORT is applied).  It is bound at start
 * only: a reload that changes the section warns and keeps the running one
 * (server.c).  backend_timeout_ms bounds the scrape's question to the
 * backend (its load), short and apart from backend.timeout_ms so that a
 * hung backend does not stall the scraper: a reload applies it.  The log
 * format is applied at start and by every reload.
 */
#include "config_parse.h"
#include "common/gw_limits.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#define GW_METRICS_DEFAULT_ADDRESS "127.0.0.1"
#define GW_METRICS_DEFAULT_PORT    9464

/* 127.0.0.0/8, ::1, or ::ffff:127.0.0.0/104. */
static int is_loopback(const char *address)
{
    struct in_addr a4;
    struct in6_addr a6;

    if (inet_pton(AF_INET, address, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, address, &a6) != 1)
        return 0;
    if (IN6_IS_ADDR_LOOPBACK(&a6))
        return 1;
    return IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127;
}

static int metrics_field(struct parse_ctx *pc, const char *key, yaml_node_t *v, void *arg)
{
    struct gw_metrics_config *m = &pc->cfg->metrics;
    uint64_t port;

    (void)arg;
    if (strcmp(key, "address") == 0) {
        unsigned char buf[sizeof(struct in6_addr)];
        if (cfg_string(pc, v, "metrics.address", 64, &m->address) != 0)
            return -1;
        if (inet_pton(AF_INET, m->address, buf) != 1 && inet_pton(AF_INET6, m->address, buf) != 1)
            return cfg_fail(pc, v, "metrics.address must be a numeric IPv4 or IPv6 address");
        return 0;
    }
    if (strcmp(key, "port") == 0) {
        if (cfg_uint(pc, v, "metrics.port", 1, 65535, &port) != 0)
            return -1;
        m->port = (uint16_t)port;
        return 0;
    }
    if (strcmp(key, "allow_non_loopback") == 0)
        return cfg_bool(pc, v, "metrics.allow_non_loopback", &m->allow_non_loopback);
    if (strcmp(key, "backend_timeout_ms") == 0)
        return cfg_uint(pc, v, "metrics.backend_timeout_ms", 1, GW_MAX_METRICS_BACKEND_TIMEOUT_MS, &m->backend_timeout_ms);
    return 1;
}

int cfg_parse_metrics(struct parse_ctx *pc, yaml_node_t *v)
{
    struct gw_metrics_config *m = &pc->cfg->metrics;

    m->port = GW_METRICS_DEFAULT_PORT;
    if (cfg_walk_mapping(pc, v, "metrics", metrics_field, NULL) != 0)
        return -1;
    if (m->address == NULL && (m->address = strdup(GW_METRICS_DEFAULT_ADDRESS)) == NULL)
        return cfg_fail(pc, v, "out of memory");
    if (!m->allow_non_loopback && !is_loopback(m->address))
        return cfg_fail(pc, v,
                        "metrics.address %s is not a loopback address: the metrics listener answers anyone who reaches it "
                        "(set metrics.allow_non_loopback: true only on a private network)",
                        m->address);
    return 0;
}

static int log_field(struct parse_ctx *pc, const char *key, yaml_node_t *v, void *arg)
{
    (void)arg;
    if (strcmp(key, "format") != 0)
        return 1;
    if (cfg_want_scalar(pc, v, "log.format") != 0)
        return -1;
    if (strcmp(cfg_scalar(v), "text") == 0)
        pc->cfg->log_json = 0;
    else if (strcmp(cfg_scalar(v), "json") == 0)
        pc->cfg->log_json = 1;
    else
        return cfg_fail(pc, v, "log.format must be text or json");
    return 0;
}

int cfg_parse_log(struct parse_ctx *pc, yaml_node_t *v)
{
    return cfg_walk_mapping(pc, v, "log", log_field, NULL);
}

int cfg_metrics_finish(struct parse_ctx *pc)
{
    const struct gw_config *cfg = pc->cfg;

    if (cfg->metrics.address == NULL)
        return 0;
    /* any address: on the same port one of the two listeners would take
     * the other's connections (a wildcard covers loopback) */
    if (cfg->metrics.port == cfg->listen_port)
        return cfg_fail(pc, NULL,
                        "metrics.port %u is the public listener's port: the metrics listener must have a port of its own "
                        "(it is never served on the public one)",
                        (unsigned)cfg->metrics.port);
    return 0;
}
