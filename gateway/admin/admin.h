/*
 * admin.h - moatctl's requests, decoded strictly, and what each does to
 * the admin store (admin.c).  Pure: JSON in, JSON out; the supervisor
 * (control.c) does the I/O, the checks with the configuration parser, the
 * audit record and the reload.
 */
#ifndef GW_ADMIN_H
#define GW_ADMIN_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <jansson.h>

#include "auth/apikey.h"
#include "config/config.h"
#include "common/gw_limits.h"

enum admin_cmd {
    ADMIN_TENANT_ADD,
    ADMIN_TENANT_SET,
    ADMIN_TENANT_SHOW,
    ADMIN_TENANT_LIST,
    ADMIN_TENANT_REMOVE,
    ADMIN_KEY_CREATE,
    ADMIN_KEY_ROTATE,
    ADMIN_KEY_REVOKE,
    ADMIN_KEY_LIST,
    ADMIN_ISSUER_ADD,
    ADMIN_ISSUER_REMOVE,
    ADMIN_ISSUER_LIST,
    ADMIN_STATUS,
};

/* One request: {"cmd": "key.create", ...} (the fields each command takes: admin.c's table). */
struct admin_req {
    enum admin_cmd cmd;
    const char *name;                    /* "key.create" */
    int mutates;                         /* changes the store: audited, persisted, reloaded */
    char tenant[GW_MAX_TENANT_NAME + 1]; /* "" when not given */
    char key[APIKEY_ID_LEN + 1];         /* the existing key rotate/revoke act on */
    char id[APIKEY_ID_LEN + 1];          /* a new key's id (made by moatctl) ... */
    char sha256[APIKEY_DIGEST_HEX + 1];  /* ... and the SHA-256 of its secret: the secret never comes here */
    uint64_t expires_s;                  /* a new key's lifetime; 0: none */
    uint64_t grace_s;                    /* rotate: how long the old key keeps working */
    int has_grace;
    char note[GW_STORE_MAX_NOTE + 1];
    char issuer_name[GW_MAX_TENANT_NAME + 1]; /* issuer remove */
    json_t *scopes;                           /* array of endpoint names, or NULL */
    json_t *policy;                           /* tenant add/set: the policy fields, or NULL */
    json_t *issuer;                           /* issuer add: the issuer mapping */
};

/* Decode one request (a JSON object, at most GW_CONTROL_MAX_REQUEST bytes):
 * unknown commands and fields, wrong types and lengths are refused.  0, or
 * -1 with err set (q then needs no admin_req_free). */
int admin_decode(const char *text, size_t len, struct admin_req *q, char *err, size_t errlen);
void admin_req_free(struct admin_req *q);

/* An empty store: {"version": 1, "tenants": [], "jwt_issuers": [], "keys": []}. */
json_t *admin_store_empty(void);

/* The shape of a store read back: an object of the right version whose
 * lists hold objects with string names/ids (missing lists are added).  0
 * or -1 with err. */
int admin_store_check(json_t *doc, char *err, size_t errlen);

/*
 * A mutating request applied to the store document doc, given the running
 * picture (configuration file and store as the gateway would load them)
 * for names that are taken: doc is changed in place and result gets what
 * the reply reports.  0, or -1 with err (doc may be half-changed: discard
 * it).
 */
int admin_apply(const struct admin_req *q, json_t *doc, const struct gw_config *running, time_t now, json_t *result, char *err,
                size_t errlen);

/* When a key id last authenticated a request (0: not since the start). */
typedef time_t (*admin_last_used_fn)(const char *id);

/* A read (tenant show/list, key list, issuer list) into result.  0 or -1 with err. */
int admin_read(const struct admin_req *q, const json_t *doc, const struct gw_config *running, time_t now,
               admin_last_used_fn last_used, json_t *result, char *err, size_t errlen);

/* The audit record of a mutating request (audit/FORMAT.md "admin"): who, what, which ids; never a secret or a hash. */
json_t *admin_audit_body(const struct admin_req *q, unsigned uid, const char *user);

#endif
