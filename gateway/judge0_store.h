/*
 * judge0_store.h - where finished Judge0 submissions are kept until their
 * owner asks for them (GET /submissions/{token}).
 *
 * The interface is a record's text by (tenant, token): put and get, nothing
 * about its shape, so a durable or shared store (issue 12 item 2: restart-
 * safe, several gateways) can replace the in-memory one behind the same
 * calls.  The one here lives in the gateway process: bounded in records per
 * tenant, in records and bytes overall, and each record expires
 * GW_JUDGE0_STORE_TTL_MS (gw_limits.h) after it was put.  Thread-safe (every worker shares it).
 */
#ifndef GW_JUDGE0_STORE_H
#define GW_JUDGE0_STORE_H

#include <stddef.h>
#include <stdint.h>

struct judge0_store_limits {
    size_t max_records;            /* all tenants together */
    size_t max_records_per_tenant; /* one tenant's newest records */
    size_t max_bytes;              /* of record texts, all tenants together */
    uint64_t ttl_ms;               /* a record's life */
};

struct judge0_store;

/* A new empty store, or NULL out of memory. */
struct judge0_store *judge0_store_new(const struct judge0_store_limits *lim);
void judge0_store_free(struct judge0_store *s);

/* The gateway's one store (created on first use with gw_limits.h's figures;
 * NULL out of memory). */
struct judge0_store *judge0_store_default(void);

/*
 * Keep text[0..len) as tenant's record `token` (now_ms: a monotonic clock),
 * replacing the one it had, if any.  Makes room first: expired records, then the tenant's oldest past its cap,
 * then the oldest of anyone past the overall caps.  0, or -1 (too large
 * for the store, or out of memory).
 */
int judge0_store_put(struct judge0_store *s, const char *tenant, const char *token, const char *text, size_t len, uint64_t now_ms);

/*
 * A malloc'ed, NUL-terminated copy of tenant's record `token` (*len its
 * bytes), or NULL: no such record, another tenant's (indistinguishable on
 * purpose), expired, or out of memory.
 */
char *judge0_store_get(struct judge0_store *s, const char *tenant, const char *token, uint64_t now_ms, size_t *len);

/* Records held (tests, /config_info). */
size_t judge0_store_count(struct judge0_store *s);

#endif /* GW_JUDGE0_STORE_H */
