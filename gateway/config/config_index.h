/*
 * config_index.h - the configuration's lookup tables: key ids and tenant
 * names hashed to their index in gw_config.keys / gw_config.tenants, so
 * that authenticating a request, and loading 16,000 keys, does not scan
 * every key (one of tests/bench/bench_scale.py's findings: with 16,000
 * keys a linear scan per unknown key id cost the 401 path, and the
 * duplicate check at load was quadratic).
 *
 * Open addressing with linear probing over a power-of-two array of slots,
 * at most half full.  A slot holds the entry's 32-bit hash and its index +
 * 1 (0: empty), so a probe compares hashes before it compares names, and
 * growing rehashes without looking at the entries.  Only the configuration
 * puts entries in (an administrator's ids and names), so a request's
 * lookup probes at most the longest run of occupied slots; a lookup for an
 * absent name stops at the first empty slot.
 *
 * Built while the configuration loads (single thread); read-only after,
 * like the rest of struct gw_config.
 */
#ifndef GW_CONFIG_INDEX_H
#define GW_CONFIG_INDEX_H

#include <stddef.h>
#include <stdint.h>

struct gw_index {
    uint64_t *slots; /* hash << 32 | (index + 1); 0: empty */
    size_t mask;     /* number of slots - 1 (slots NULL: none) */
    size_t used;
};

/* The hash of len bytes (FNV-1a, folded to 32 bits). */
uint32_t gw_index_hash(const void *data, size_t len);

/* Adds index under hash (grows the table as needed); 0, or -1 out of memory. */
int gw_index_add(struct gw_index *ix, uint32_t hash, size_t index);

/* The candidates for hash, one per call: start with *pos = 0; returns an
 * index + 1 whose entry has this hash (the caller compares the entry), or
 * 0 when there are no more. */
size_t gw_index_next(const struct gw_index *ix, uint32_t hash, size_t *pos);

void gw_index_free(struct gw_index *ix);

#endif
