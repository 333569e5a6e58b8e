/*
 * config_limiter.c - the limiter section: where each tenant's rate,
 * in-flight count and CPU budget are kept (ratelimit.c in memory, or
 * ratelimit_redis.c shared by several gateways).
 *
 * Optional and strict like every section (unknown keys, values out of
 * range, a key in the wrong store: PATH:LINE):
 *
 *   limiter:
 *     store: redis                # memory (default) | redis
 *     redis:                      # required with store: redis, refused without
 *       socket: /run/redis/redis.sock   # or host: 10.0.0.5 (numeric) and port: 6379
 *       # or sentinels: ["10.0.0.7:26379", "[fd00::8]:26379"] and master: mymaster
 *       password_file: /etc/moat/redis.password  # required with host or sentinels
 *       sentinel_password_file: /etc/moat/sentinel.password  # the Sentinels' own, if any
 *       db: 0
 *       prefix: "moat:"
 *       connect_timeout_ms: 1000
 *       timeout_ms: 200           # a decision's answer
 *       lease_ms: 30000           # a dead gateway's in-flight slots come back after this
 *     on_unavailable: fail_closed # | local (each limit / gateways, in memory)
 *     gateways: 2
 *
 * host must be a numeric address: the gateway resolves nothing on its event
 * loops (and its seccomp filter allows no resolver).  A password goes in
 * its own file, read here like a JWT key file (gw_check_file_secrecy: a
 * regular file nobody but its owner may write) and further refused if
 * others (not the owner, not the group) may read it; one trailing newline
 * is dropped.  Over TCP a password file is required: hiredis 0.14 speaks
 * no TLS, so a Redis on the network must at least want a password (and sit
 * on a private link; see moat-gateway(8)).  Defaults and bounds: GW_REDIS_* in
 * gw_limits.h.  The section is read at start; a reload that changes it
 * keeps the running limiter (server.c says so in the log).
 */
#include "config_parse.h"
#include "common/gw_limits.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "moat_io.h"

/* The password file: the secret, its one trailing newline dropped. */
static int read_password(struct parse_ctx *pc, const yaml_node_t *n, const char *key, const char *path, char **out)
{
    char err[512], buf[GW_REDIS_MAX_PASSWORD + 2];
    struct stat st;
    ssize_t got;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY), saved;

    if (fd == -1)
        return cfg_fail(pc, n, "limiter.redis.%s %s: %s", key, path, strerror(errno));
    if (gw_check_file_secrecy(fd, path, err, sizeof(err)) != 0 || fstat(fd, &st) != 0) {
        close(fd);
        return cfg_fail(pc, n, "%s", err);
    }
    if ((st.st_mode & S_IRWXO) != 0) {
        close(fd);
        return cfg_fail(pc, n, "limiter.redis.%s %s: others may read it (chmod o-rwx)", key, path);
    }
    got = moat_read_full(fd, buf, sizeof(buf) - 1);
    saved = errno;
    close(fd);
    if (got < 0)
        return cfg_fail(pc, n, "limiter.redis.%s %s: %s", key, path, strerror(saved));
    if (got > 0 && buf[got - 1] == '\n')
        got--;
    if (got > 0 && buf[got - 1] == '\r')
        got--;
    buf[got] = '\0';
    if (got == 0 || got > GW_REDIS_MAX_PASSWORD || strlen(buf) != (size_t)got || strpbrk(buf, "\r\n") != NULL) {
        OPENSSL_cleanse(buf, sizeof(buf));
        return cfg_fail(pc, n, "limiter.redis.%s %s: want one line of 1 to %d bytes", key, path, GW_REDIS_MAX_PASSWORD);
    }
    if (*out != NULL) {
        OPENSSL_cleanse(*out, strlen(*out));
        free(*out);
    }
    *out = strdup(buf);
    OPENSSL_cleanse(buf, sizeof(buf));
    return *out != NULL ? 0 : cfg_fail(pc, n, "out of memory");
}

static int numeric_host(const char *s)
{
    unsigned char a[sizeof(struct in6_addr)];

    return inet_pton(AF_INET, s, a) == 1 || inet_pton(AF_INET6, s, a) == 1;
}

static int good_prefix(const char *s)
{
    for (; *s != '\0'; s++)
        if (*s <= ' ' || *s > '~')
            return 0;
    return 1;
}

/* "host:port" or "[v6]:port", numeric, into *a. */
static int parse_sentinel(struct parse_ctx *pc, const yaml_node_t *e, char **host, unsigned *port)
{
    const char *s = cfg_scalar(e), *colon;
    char h[64], *end;
    unsigned long p;
    size_t hl;

    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        colon = close != NULL && close[1] == ':' ? close + 1 : NULL;
        s++;
        hl = colon != NULL ? (size_t)(colon - 1 - s) : 0;
    } else {
        colon = strrchr(s, ':');
        hl = colon != NULL ? (size_t)(colon - s) : 0;
    }
    if (colon == NULL || hl == 0 || hl >= sizeof(h))
        return cfg_fail(pc, e, "limiter.redis.sentinels: want \"host:port\" (\"[v6]:port\"), got '%s'", cfg_scalar(e));
    memcpy(h, s, hl);
    h[hl] = '\0';
    errno = 0;
    p = strtoul(colon + 1, &end, 10);
    if (!numeric_host(h) || errno != 0 || *end != '\0' || colon[1] == '\0' || p == 0 || p > 65535)
        return cfg_fail(pc, e, "limiter.redis.sentinels: '%s': a numeric address and a port from 1 to 65535", cfg_scalar(e));
    if ((*host = strdup(h)) == NULL)
        return cfg_fail(pc, e, "out of memory");
    *port = (unsigned)p;
    return 0;
}

static int parse_sentinels(struct parse_ctx *pc, const yaml_node_t *v, struct gw_limiter_config *l)
{
    if (v->type != YAML_SEQUENCE_NODE || v->data.sequence.items.top == v->data.sequence.items.start)
        return cfg_fail(pc, v, "limiter.redis.sentinels must be a sequence of 1 to %d \"host:port\"", GW_REDIS_MAX_SENTINELS);
    if (l->nsentinels != 0)
        return cfg_fail(pc, v, "limiter.redis.sentinels given twice");
    for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
        yaml_node_t *e = yaml_document_get_node(pc->doc, *it);
        if (l->nsentinels == GW_REDIS_MAX_SENTINELS)
            return cfg_fail(pc, e, "limiter.redis.sentinels: at most %d", GW_REDIS_MAX_SENTINELS);
        if (cfg_want_scalar(pc, e, "limiter.redis.sentinels") != 0 ||
            parse_sentinel(pc, e, &l->sentinels[l->nsentinels].host, &l->sentinels[l->nsentinels].port) != 0)
            return -1;
        l->nsentinels++;
    }
    return 0;
}

static int redis_field(struct parse_ctx *pc, const char *key, yaml_node_t *v, void *arg)
{
#define FIELD(field, min, max) CFG_UINT_SPEC(struct gw_limiter_config, field, (min), (max))
    static const struct cfg_uint_spec fields[] = {
        FIELD(port, 1, 65535),
        FIELD(db, 0, GW_REDIS_MAX_DB),
        FIELD(connect_timeout_ms, 1, GW_REDIS_MAX_TIMEOUT_MS),
        FIELD(timeout_ms, 1, GW_REDIS_MAX_TIMEOUT_MS),
        FIELD(lease_ms, GW_REDIS_MIN_LEASE_MS, GW_REDIS_MAX_LEASE_MS),
    };
#undef FIELD
    struct gw_limiter_config *l = &pc->cfg->limiter;
    char *path = NULL;
    int rc;

    (void)arg;
    if (strcmp(key, "socket") == 0) {
        if (cfg_string(pc, v, "limiter.redis.socket", GW_MAX_PATH_LEN, &l->socket) != 0)
            return -1;
        if (l->socket[0] != '/')
            return cfg_fail(pc, v, "limiter.redis.socket must be an absolute path");
        /* hiredis would cut a longer one short and connect to another path */
        return strlen(l->socket) < sizeof(((struct sockaddr_un *)0)->sun_path)
                   ? 0
                   : cfg_fail(pc, v, "limiter.redis.socket is longer than a Unix socket path may be (%zu bytes)",
                              sizeof(((struct sockaddr_un *)0)->sun_path) - 1);
    }
    if (strcmp(key, "host") == 0) {
        if (cfg_string(pc, v, "limiter.redis.host", 64, &l->host) != 0)
            return -1;
        return numeric_host(l->host) ? 0 : cfg_fail(pc, v, "limiter.redis.host must be a numeric IPv4 or IPv6 address");
    }
    if (strcmp(key, "prefix") == 0) {
        if (cfg_string(pc, v, "limiter.redis.prefix", GW_REDIS_MAX_PREFIX, &l->prefix) != 0)
            return -1;
        return good_prefix(l->prefix) ? 0 : cfg_fail(pc, v, "limiter.redis.prefix: printable ASCII without spaces only");
    }
    if (strcmp(key, "password_file") == 0 || strcmp(key, "sentinel_password_file") == 0) {
        if (cfg_string(pc, v, key[0] == 'p' ? "limiter.redis.password_file" : "limiter.redis.sentinel_password_file",
                       GW_MAX_PATH_LEN, &path) != 0)
            return -1;
        rc = read_password(pc, v, key, path, key[0] == 'p' ? &l->password : &l->sentinel_password);
        free(path);
        return rc;
    }
    if (strcmp(key, "sentinels") == 0)
        return parse_sentinels(pc, v, l);
    if (strcmp(key, "master") == 0) {
        if (cfg_string(pc, v, "limiter.redis.master", GW_REDIS_MAX_MASTER_NAME, &l->master) != 0)
            return -1;
        return l->master[0] != '\0' && good_prefix(l->master)
                   ? 0
                   : cfg_fail(pc, v, "limiter.redis.master: a Sentinel master name (printable ASCII without spaces)");
    }
    return cfg_uint_table(pc, fields, sizeof(fields) / sizeof(fields[0]), "limiter.redis", key, v, l);
}

static int limiter_field(struct parse_ctx *pc, const char *key, yaml_node_t *v, void *arg)
{
    struct gw_limiter_config *l = &pc->cfg->limiter;
    const char *s;

    if (strcmp(key, "store") == 0 || strcmp(key, "on_unavailable") == 0) {
        if (cfg_want_scalar(pc, v, key) != 0)
            return -1;
        s = cfg_scalar(v);
        if (strcmp(key, "store") == 0 && (strcmp(s, "memory") == 0 || strcmp(s, "redis") == 0))
            l->redis = strcmp(s, "redis") == 0;
        else if (strcmp(key, "on_unavailable") == 0 && (strcmp(s, "fail_closed") == 0 || strcmp(s, "local") == 0))
            l->local_fallback = strcmp(s, "local") == 0;
        else
            return cfg_fail(pc, v, "limiter.%s must be %s", key, key[0] == 's' ? "memory or redis" : "fail_closed or local");
        return 0;
    }
    if (strcmp(key, "gateways") == 0)
        return cfg_unsigned(pc, v, "limiter.gateways", 1, GW_REDIS_MAX_GATEWAYS, &l->gateways);
    if (strcmp(key, "redis") == 0) {
        *(yaml_node_t **)arg = v;
        return cfg_walk_mapping(pc, v, "limiter.redis", redis_field, NULL);
    }
    return 1;
}

int cfg_parse_limiter(struct parse_ctx *pc, yaml_node_t *v)
{
    struct gw_limiter_config *l = &pc->cfg->limiter;
    yaml_node_t *redis = NULL;

    if (cfg_walk_mapping(pc, v, "limiter", limiter_field, &redis) != 0)
        return -1;
    if (!l->redis)
        return redis != NULL ? cfg_fail(pc, redis, "limiter.redis needs store: redis") : 0;
    if (redis == NULL)
        return cfg_fail(pc, v, "limiter: store: redis needs a redis section (socket, or host and password_file)");
    if ((l->socket != NULL) + (l->host != NULL) + (l->nsentinels > 0) != 1)
        return cfg_fail(pc, redis, "limiter.redis: give one of socket, host (and port), or sentinels (and master)");
    if ((l->nsentinels > 0) != (l->master != NULL))
        return cfg_fail(pc, redis, "limiter.redis: sentinels and master go together");
    if (l->sentinel_password != NULL && l->nsentinels == 0)
        return cfg_fail(pc, redis, "limiter.redis.sentinel_password_file needs sentinels");
    if ((l->host != NULL || l->nsentinels > 0) && l->password == NULL)
        return cfg_fail(pc, redis, "limiter.redis: a Redis reached over TCP needs a password_file");
    if (l->prefix == NULL && (l->prefix = strdup(GW_REDIS_DEFAULT_PREFIX)) == NULL)
        return cfg_fail(pc, v, "out of memory");
    return 0;
}

void cfg_free_limiter(struct gw_config *cfg)
{
    struct gw_limiter_config *l = &cfg->limiter;

    free(l->socket);
    free(l->host);
    free(l->prefix);
    free(l->master);
    for (size_t i = 0; i < l->nsentinels; i++)
        free(l->sentinels[i].host);
    if (l->sentinel_password != NULL) {
        OPENSSL_cleanse(l->sentinel_password, strlen(l->sentinel_password));
        free(l->sentinel_password);
    }
    if (l->password != NULL) {
        OPENSSL_cleanse(l->password, strlen(l->password));
        free(l->password);
    }
    memset(l, 0, sizeof(*l));
}
