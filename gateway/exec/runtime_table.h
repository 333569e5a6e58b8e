/*
 * runtime_table.h - each worker's copy of the backend's runtime table, so
 * that policy can judge a language by every name of its runtime.
 */
#ifndef GW_RUNTIME_TABLE_H
#define GW_RUNTIME_TABLE_H

#include "core/pipeline.h"

/* A worker refetches the table when it is older than this. */
#define GW_RUNTIME_TABLE_TTL_MS 60000

/* Has the worker a table younger than GW_RUNTIME_TABLE_TTL_MS? */
int gw_runtime_table_fresh(struct gw_worker *w);

/* Replace the worker's table with a copy of rt (out of memory: keeps the old one). */
void gw_runtime_table_store(struct gw_worker *w, const struct moat_runtimes *rt);

/* The runtime `language` names (canonical name or alias) as *out, or NULL. */
const struct policy_runtime *gw_runtime_table_find(struct gw_worker *w, const char *language, struct policy_runtime *out);

/* The runtime `language` names whose version `selector` (plain or a semver
 * range, moat_semver.h) picks, as the backend picks it: the highest.  NULL
 * when none does. */
const struct policy_runtime *gw_runtime_table_select(struct gw_worker *w, const char *language, const char *selector,
                                                     struct policy_runtime *out);
/* The same runtime as the table holds it (its compiler option allow-list
 * too), valid until the worker's table is next replaced; NULL when none. */
const struct moat_runtime *gw_runtime_table_pick(struct gw_worker *w, const char *language, const char *selector);

/* A runtimes query for r's backend call into frame (*job its id): GW_NEXT,
 * or a refusal when it cannot be encoded. */
enum gw_flow gw_runtimes_query(struct gw_request *r, struct moat_buf *frame, uint64_t *job);

/* Fetch the table for r's step, which then runs again (GW_WAIT), or is
 * refused when the backend cannot be asked. */
enum gw_flow gw_runtime_table_fetch(struct gw_request *r);

#endif /* GW_RUNTIME_TABLE_H */
