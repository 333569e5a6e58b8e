/*
 * config_parse.c - the YAML walking helpers every part of the configuration
 * parser uses (see config_parse.h).
 *
 * Each reads one node of the loaded document, checks its type, length and
 * range, and either stores the value or records "PATH:LINE: reason" and
 * returns -1.  Nothing here knows a section's keys: those live with their
 * section (config_server.c, config_tenants.c, ...).
 */
#include "config_parse.h"
#include "common/gw_limits.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "moat_io.h"
#include "policy.h"

int cfg_fail(struct parse_ctx *pc, const yaml_node_t *node, const char *fmt, ...)
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

/* ---------------------------------------------------------------- scalars */

int cfg_want_scalar(struct parse_ctx *pc, const yaml_node_t *n, const char *name)
{
    if (n == NULL || n->type != YAML_SCALAR_NODE)
        return cfg_fail(pc, n, "%s must be a scalar", name);
    if (strlen(cfg_scalar(n)) != n->data.scalar.length)
        return cfg_fail(pc, n, "%s contains a NUL byte", name);
    return 0;
}

int cfg_string(struct parse_ctx *pc, const yaml_node_t *n, const char *name, size_t maxlen, char **dst)
{
    char *s;

    if (cfg_want_scalar(pc, n, name) != 0)
        return -1;
    if (n->data.scalar.length == 0)
        return cfg_fail(pc, n, "%s must not be empty", name);
    if (n->data.scalar.length > maxlen)
        return cfg_fail(pc, n, "%s is longer than %zu bytes", name, maxlen);
    if ((s = strdup(cfg_scalar(n))) == NULL)
        return cfg_fail(pc, n, "out of memory");
    free(*dst);
    *dst = s;
    return 0;
}

int cfg_uint(struct parse_ctx *pc, const yaml_node_t *n, const char *name, uint64_t min, uint64_t max, uint64_t *out)
{
    const char *s;
    char *end;
    unsigned long long v;

    if (cfg_want_scalar(pc, n, name) != 0)
        return -1;
    s = cfg_scalar(n);
    if (s[0] < '0' || s[0] > '9')
        return cfg_fail(pc, n, "%s must be a non-negative integer", name);
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0')
        return cfg_fail(pc, n, "%s must be a non-negative integer", name);
    if (v < min || v > max)
        return cfg_fail(pc, n, "%s must be between %llu and %llu", name, (unsigned long long)min, (unsigned long long)max);
    *out = v;
    return 0;
}

int cfg_unsigned(struct parse_ctx *pc, const yaml_node_t *n, const char *name, unsigned min, unsigned max, unsigned *out)
{
    uint64_t v;

    if (cfg_uint(pc, n, name, min, max, &v) != 0)
        return -1;
    *out = (unsigned)v;
    return 0;
}

int cfg_either(struct parse_ctx *pc, const yaml_node_t *n, const char *name, const char *off, const char *on, int *out)
{
    if (cfg_want_scalar(pc, n, name) != 0)
        return -1;
    if (strcmp(cfg_scalar(n), off) != 0 && strcmp(cfg_scalar(n), on) != 0)
        return cfg_fail(pc, n, "%s must be %s or %s", name, off, on);
    *out = strcmp(cfg_scalar(n), on) == 0;
    return 0;
}

int cfg_bool(struct parse_ctx *pc, const yaml_node_t *n, const char *name, int *out)
{
    static const char *const yes[] = {"true", "yes", "on"}, *const no[] = {"false", "no", "off"};

    if (cfg_want_scalar(pc, n, name) != 0)
        return -1;
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        if (strcmp(cfg_scalar(n), yes[i]) == 0) {
            *out = 1;
            return 0;
        }
        if (strcmp(cfg_scalar(n), no[i]) == 0) {
            *out = 0;
            return 0;
        }
    }
    return cfg_fail(pc, n, "%s must be true or false", name);
}

int cfg_uint_table(struct parse_ctx *pc, const struct cfg_uint_spec *specs, size_t nspecs, const char *prefix, const char *key,
                   const yaml_node_t *v, void *base)
{
    char label[96];
    uint64_t n;

    for (size_t i = 0; i < nspecs; i++) {
        char *at = (char *)base + specs[i].off;
        if (strcmp(key, specs[i].key) != 0)
            continue;
        snprintf(label, sizeof(label), "%s.%s", prefix, key);
        if (cfg_uint(pc, v, label, specs[i].min, specs[i].max, &n) != 0)
            return -1;
        if (specs[i].size == sizeof(uint32_t)) {
            uint32_t x = (uint32_t)n; /* max fits: the table says so */
            memcpy(at, &x, sizeof(x));
        } else {
            memcpy(at, &n, sizeof(n)); /* an int64_t field has max <= INT64_MAX: the same bytes */
        }
        return 0;
    }
    return 1;
}

/* ---------------------------------------------------------------- sequences and mappings */

int cfg_endpoints(struct parse_ctx *pc, const yaml_node_t *n, const char *name, unsigned *out)
{
    char names[POLICY_ENDPOINT_LIST_MAX];
    yaml_node_item_t *it;
    unsigned bits = 0, bit;

    policy_endpoint_list(names, sizeof(names));
    if (n->type != YAML_SEQUENCE_NODE)
        return cfg_fail(pc, n, "%s must be a sequence of endpoint names (%s)", name, names);
    for (it = n->data.sequence.items.start; it < n->data.sequence.items.top; it++) {
        yaml_node_t *e = yaml_document_get_node(pc->doc, *it);
        if (cfg_want_scalar(pc, e, name) != 0)
            return -1;
        if (policy_endpoint_from_name(cfg_scalar(e), &bit) != 0)
            return cfg_fail(pc, e, "%s: unknown endpoint '%s' (%s)", name, cfg_scalar(e), names);
        bits |= bit;
    }
    *out = bits;
    return 0;
}

int cfg_walk_mapping(struct parse_ctx *pc, yaml_node_t *map, const char *name, cfg_field_fn fn, void *arg)
{
    yaml_node_pair_t *p, *q;

    if (map == NULL || map->type != YAML_MAPPING_NODE)
        return cfg_fail(pc, map, "%s must be a mapping", name);
    for (p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(pc->doc, p->key);
        yaml_node_t *v = yaml_document_get_node(pc->doc, p->value);
        int rc;

        if (k == NULL || k->type != YAML_SCALAR_NODE)
            return cfg_fail(pc, k != NULL ? k : map, "keys in %s must be scalars", name);
        for (q = map->data.mapping.pairs.start; q < p; q++) {
            yaml_node_t *k2 = yaml_document_get_node(pc->doc, q->key);
            if (k2 != NULL && k2->type == YAML_SCALAR_NODE && strcmp(cfg_scalar(k2), cfg_scalar(k)) == 0)
                return cfg_fail(pc, k, "duplicate key '%s' in %s", cfg_scalar(k), name);
        }
        if (v == NULL)
            return cfg_fail(pc, k, "%s.%s has no value", name, cfg_scalar(k));
        rc = fn(pc, cfg_scalar(k), v, arg);
        if (rc == 1)
            return cfg_fail(pc, k, "unknown key '%s' in %s", cfg_scalar(k), name);
        if (rc != 0)
            return -1;
    }
    return 0;
}

int cfg_note(const struct cfg_slot *slots, size_t nslots, void *seen, const char *key, yaml_node_t *v)
{
    for (size_t i = 0; i < nslots; i++) {
        if (strcmp(key, slots[i].key) == 0) {
            memcpy((char *)seen + slots[i].off, &v, sizeof(v));
            return 0;
        }
    }
    return 1;
}

int cfg_rate(struct parse_ctx *pc, const yaml_node_t *n, const char *name, double *out)
{
    char *end;
    double v;

    if (cfg_want_scalar(pc, n, name) != 0)
        return -1;
    errno = 0;
    v = strtod(cfg_scalar(n), &end);
    if (errno != 0 || *end != '\0' || end == cfg_scalar(n) || !(v >= 0.0) || v > GW_MAX_RATE_PER_SECOND)
        return cfg_fail(pc, n, "%s must be a number between 0 and %.0f", name, GW_MAX_RATE_PER_SECOND);
    *out = v;
    return 0;
}

/* One copy for every key file: JWT keys (config_jwt.c), callback secrets (config_callbacks.c). */
int cfg_read_key_file(struct parse_ctx *pc, const yaml_node_t *n, const char *path, size_t max, unsigned char **out, size_t *len)
{
    char err[512];
    unsigned char *buf;
    ssize_t got;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);

    if (fd == -1)
        return cfg_fail(pc, n, "key file %s: %s", path, strerror(errno));
    if (gw_check_file_secrecy(fd, path, err, sizeof(err)) != 0) {
        close(fd);
        return cfg_fail(pc, n, "%s", err);
    }
    if ((buf = malloc(max + 1)) == NULL) {
        close(fd);
        return cfg_fail(pc, n, "key file %s: out of memory", path);
    }
    got = moat_read_full(fd, buf, max + 1);
    int saved = errno;
    close(fd);
    if (got < 0 || (size_t)got > max) {
        OPENSSL_cleanse(buf, max + 1);
        free(buf);
        if (got < 0)
            return cfg_fail(pc, n, "key file %s: %s", path, strerror(saved));
        return cfg_fail(pc, n, "key file %s is too large", path);
    }
    *out = buf;
    *len = (size_t)got;
    return 0;
}

/* ---------------------------------------------------------------- files */

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

/* The file (config.c's step 2, the store's too), checked and parsed into *doc (the caller deletes it). */
int cfg_load_document(struct parse_ctx *pc, yaml_document_t *doc, int missing_ok)
{
    yaml_parser_t parser;
    FILE *fp;
    int fd, rc = 0;

    if ((fd = open(pc->path, O_RDONLY | O_CLOEXEC | O_NOCTTY)) == -1) {
        if (errno == ENOENT && missing_ok)
            return 1;
        return cfg_fail(pc, NULL, "%s", strerror(errno));
    }
    if (gw_check_file_secrecy(fd, pc->path, pc->err, pc->errlen) != 0 || (fp = fdopen(fd, "r")) == NULL) {
        if (pc->err[0] == '\0')
            cfg_fail(pc, NULL, "%s", strerror(errno));
        close(fd);
        return -1;
    }
    if (!yaml_parser_initialize(&parser)) {
        fclose(fp);
        return cfg_fail(pc, NULL, "cannot initialise the YAML parser");
    }
    yaml_parser_set_input_file(&parser, fp);
    if (!yaml_parser_load(&parser, doc)) {
        snprintf(pc->err, pc->errlen, "%s:%lu: %s", pc->path, (unsigned long)parser.problem_mark.line + 1,
                 parser.problem != NULL ? parser.problem : "YAML syntax error");
        rc = -1;
    }
    yaml_parser_delete(&parser);
    fclose(fp);
    return rc;
}
