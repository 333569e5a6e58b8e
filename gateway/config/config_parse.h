/*
 * config_parse.h - what the parts of the configuration parser share.
 *
 * Internal to config*.c: callers use config.h.  gw_config_load() (config.c)
 * loads the whole file as one libyaml document and walks it with a fixed
 * schema, one file per concern:
 *
 *   config.c          load, the top-level mapping, defaults, free, lookups
 *   config_parse.c    the YAML walking helpers declared below
 *   config_server.c   listen, tls, backend, timeouts, http2, workers, limits
 *   config_tenants.c  tenants and their policies
 *   config_keys.c     API keys (inside a tenant)
 *   config_jwt.c      JWT issuers and their key files
 *   config_audit.c    the audit section
 *   config_sessions.c the sessions section, and each tenant's sessions
 *   config_submissions.c the submissions section (Judge0 results' store)
 *   config_limiter.c  the limiter section (memory or a shared Redis)
 *
 * Every function here returns 0, or -1 with pc->err holding "PATH:LINE:
 * reason" (cfg_fail); a field function (cfg_field_fn) returns 1 for a key
 * it does not know, and cfg_walk_mapping turns that into an error.  Every
 * mapping rejects unknown and duplicate keys and every scalar is range
 * checked, so a configuration is taken whole or not at all.
 */
#ifndef GW_CONFIG_PARSE_H
#define GW_CONFIG_PARSE_H

#include <stddef.h>
#include <stdint.h>

#include <yaml.h>

#include "config.h"

struct parse_ctx {
    const char *path;
    yaml_document_t *doc;
    struct gw_config *cfg;
    char *err;
    size_t errlen;
};

/* Record "PATH:LINE: reason" (or "PATH: reason" when node is NULL) and return -1. */
__attribute__((format(printf, 3, 4))) int cfg_fail(struct parse_ctx *pc, const yaml_node_t *node, const char *fmt, ...);

/* A rate in requests per second: a number from 0 to GW_MAX_RATE_PER_SECOND. */
int cfg_rate(struct parse_ctx *pc, const yaml_node_t *n, const char *name, double *out);

/* The `unauthenticated` section (config_unauth.c). */
int cfg_parse_unauthenticated(struct parse_ctx *pc, yaml_node_t *v);

/* A scalar node's text (check it with cfg_want_scalar first). */
static inline const char *cfg_scalar(const yaml_node_t *n)
{
    return (const char *)n->data.scalar.value;
}

/* n must be a scalar without NUL bytes; name is for the message. */
int cfg_want_scalar(struct parse_ctx *pc, const yaml_node_t *n, const char *name);

/* A non-empty string of at most maxlen bytes, copied into *dst (replacing what was there). */
int cfg_string(struct parse_ctx *pc, const yaml_node_t *n, const char *name, size_t maxlen, char **dst);

/* A decimal integer in min..max. */
int cfg_uint(struct parse_ctx *pc, const yaml_node_t *n, const char *name, uint64_t min, uint64_t max, uint64_t *out);

/* The same, for an unsigned field (max must fit in one). */
int cfg_unsigned(struct parse_ctx *pc, const yaml_node_t *n, const char *name, unsigned min, unsigned max, unsigned *out);

/* true/false (also yes/no, on/off). */
int cfg_bool(struct parse_ctx *pc, const yaml_node_t *n, const char *name, int *out);

/* One of two words: *out 0 for off, 1 for on; else "name must be off or on". */
int cfg_either(struct parse_ctx *pc, const yaml_node_t *n, const char *name, const char *off, const char *on, int *out);

/* A sequence of endpoint names from policy's endpoint table, as POLICY_EP_* bits. */
int cfg_endpoints(struct parse_ctx *pc, const yaml_node_t *n, const char *name, unsigned *out);

/*
 * A mapping of integer fields described by a table: each key, where its
 * value goes (offset into the caller's struct, a uint32_t or a uint64_t, or
 * an int64_t stored as a uint64_t when max <= INT64_MAX) and its range.
 */
struct cfg_uint_spec {
    const char *key;
    size_t off;
    size_t size; /* sizeof the field: 4 or 8 */
    uint64_t min, max;
};

#define CFG_UINT_SPEC(type, field, min, max)                                                                                       \
    {                                                                                                                              \
#field, offsetof(type, field), sizeof(((type *)0)->field), (min), (max)                                                    \
    }

/* key's spec in specs: read v in its range into base (the message names it "prefix.key"); 1 for a key not in specs. */
int cfg_uint_table(struct parse_ctx *pc, const struct cfg_uint_spec *specs, size_t nspecs, const char *prefix, const char *key,
                   const yaml_node_t *v, void *base);

/* Handles one key of a mapping: 0, -1 on error, 1 for an unknown key. */
typedef int (*cfg_field_fn)(struct parse_ctx *pc, const char *key, yaml_node_t *value, void *arg);

/* Walk a mapping, rejecting non-scalar, duplicate and unknown keys, and hand each pair to fn. */
int cfg_walk_mapping(struct parse_ctx *pc, yaml_node_t *map, const char *name, cfg_field_fn fn, void *arg);

/*
 * For mappings read in two passes (note every key's node, then parse them
 * in an order of our choosing): the key and where its node goes, as the
 * offset of a yaml_node_t * in the caller's "seen" struct.
 */
struct cfg_slot {
    const char *key;
    size_t off;
};

/* Store v in the slot of seen named key: 0, or 1 when no slot is (an unknown key). */
int cfg_note(const struct cfg_slot *slots, size_t nslots, void *seen, const char *key, yaml_node_t *v);

/*
 * Read a secret or key file that group and others cannot write
 * (gw_check_file_secrecy) into one allocation of max + 1 bytes (a longer
 * file is refused, and no realloc leaves a copy of the material behind).
 * n is the node the message points at.
 */
int cfg_read_key_file(struct parse_ctx *pc, const yaml_node_t *n, const char *path, size_t max, unsigned char **out, size_t *len);

/* ---- the sections, each in its own file ---------------------------------- */

/* config_server.c: a top-level key about serving (listen, tls, ...); 1 if it is not one. */
int cfg_server_field(struct parse_ctx *pc, const char *key, yaml_node_t *v, void *arg);

/* config_server.c: after the walk: required TLS settings, MOAT_PORT, the worker count. */
int cfg_server_finish(struct parse_ctx *pc, const yaml_node_t *root);

/* config_tenants.c: the tenants sequence (with each tenant's keys). */
int cfg_parse_tenants(struct parse_ctx *pc, yaml_node_t *seq);

/* config_tenants.c: release every tenant. */
void cfg_free_tenants(struct gw_config *cfg);

/* config_keys.c: one key mapping of tenant number tenant. */
int cfg_add_key(struct parse_ctx *pc, yaml_node_t *node, size_t tenant);

/* config_keys.c: a key's fields as they are read (id, sha256, expires, scopes). */
struct cfg_key_seen {
    int id, sha256;
    struct gw_key key;
};

/* config_keys.c: start a key (every scope), one of its fields (a cfg_field_fn whose arg is a
 * struct cfg_key_seen), and the finished key added to tenant number tenant. */
void cfg_key_start(struct cfg_key_seen *ks);
int cfg_key_field(struct parse_ctx *pc, const char *key, yaml_node_t *v, void *arg);
int cfg_key_commit(struct parse_ctx *pc, yaml_node_t *node, struct cfg_key_seen *ks, size_t tenant);

/* config_keys.c: "2027-01-31T00:00:00Z" (UTC) or seconds since the epoch. */
int cfg_time(struct parse_ctx *pc, const yaml_node_t *n, const char *name, time_t *out);

/* config.c: open path (pc->path), refuse it if group or others may write it, and load it as one
 * YAML document into *doc (the caller deletes it).  missing_ok: a file that does not exist is 1
 * (no document). */
int cfg_load_document(struct parse_ctx *pc, yaml_document_t *doc, int missing_ok);

/* config_control.c: the control mapping (the control socket and the store's path). */
int cfg_parse_control(struct parse_ctx *pc, yaml_node_t *v);

/* config_control.c: release the control section. */
void cfg_free_control(struct gw_config *cfg);

/* config_store.c: the admin store at store_path, added to pc->cfg (tenants, keys, issuers).
 * A store that does not exist yet is empty. */
int cfg_load_store(struct parse_ctx *pc, const char *store_path);

/* config_jwt.c: the jwt_issuers sequence. */
int cfg_parse_issuers(struct parse_ctx *pc, yaml_node_t *seq);

/* config_jwt.c: release every issuer, wiping key material. */
void cfg_free_issuers(struct gw_config *cfg);

/* config_audit.c: the audit mapping (turns the audit trail on). */
int cfg_parse_audit(struct parse_ctx *pc, yaml_node_t *v);

/* config_sessions.c: the top-level sessions mapping (the gateway's session settings). */
int cfg_parse_sessions(struct parse_ctx *pc, yaml_node_t *v);

/* config_submissions.c: the top-level submissions mapping (where Judge0 results are kept). */
int cfg_parse_submissions(struct parse_ctx *pc, yaml_node_t *v);
/* After every section: submissions.store redis needs limiter.store redis. */
int cfg_submissions_finish(struct parse_ctx *pc);

/* config_callbacks.c: the top-level callbacks mapping (the callback sender). */
int cfg_parse_callbacks(struct parse_ctx *pc, yaml_node_t *v);

/* config_callbacks.c: a tenant's callbacks mapping. */
int cfg_parse_tenant_callbacks(struct parse_ctx *pc, yaml_node_t *v, struct gw_tenant_callbacks *out);

/* config_callbacks.c: after the walk: tenants' callbacks need the section, the section needs the audit trail. */
int cfg_callbacks_finish(struct parse_ctx *pc);

/* config_callbacks.c: release the section and a tenant's callbacks (the secret wiped). */
void cfg_free_callbacks(struct gw_config *cfg);
void cfg_free_tenant_callbacks(struct gw_tenant_callbacks *c);

/* config_limiter.c: the top-level limiter mapping (memory or Redis). */
int cfg_parse_limiter(struct parse_ctx *pc, yaml_node_t *v);

/* config_limiter.c: release the limiter section, wiping the password. */
void cfg_free_limiter(struct gw_config *cfg);

/* config_observe.c: the metrics and log mappings, and after every section
 * the metrics listener's checks against the public one. */
int cfg_parse_metrics(struct parse_ctx *pc, yaml_node_t *v);
int cfg_parse_log(struct parse_ctx *pc, yaml_node_t *v);
int cfg_metrics_finish(struct parse_ctx *pc);

/* config_sessions.c: a tenant's sessions mapping, narrowing *s (its defaults). */
int cfg_parse_tenant_sessions(struct parse_ctx *pc, yaml_node_t *v, struct policy_session_limits *s);

#endif /* GW_CONFIG_PARSE_H */
