/*
 * config_submissions.c - where Judge0 submissions' results are kept
 * (judge0_store.c) and how many wait and run (judge0_queue.c): the
 * top-level submissions section.
 *
 * Optional and strict like every section (unknown keys, values out of
 * range: PATH:LINE):
 *
 *   submissions:
 *     store_dir: /var/lib/moat/submissions  # absent: kept in memory only
 *     ttl_s: 86400              # a record's life, by the wall clock
 *     max_per_tenant: 1000      # records one tenant may hold
 *     max_records: 20000        # records of all tenants together
 *     max_bytes: 268435456      # bytes of records, all tenants together
 *     max_running: 4            # queued submissions' runs at once, all tenants
 *     queue_max: 2000           # submissions waiting, all tenants (503 past it)
 *     queue_max_per_tenant: 500 # submissions waiting, one tenant (429 past it)
 *
 * Defaults and bounds come from gw_limits.h (GW_DEFAULT_JUDGE0_*,
 * GW_MAX_JUDGE0_*); queue_max_per_tenant may not exceed queue_max.  store_dir must be absolute; that the directory is the
 * gateway user's own and nobody else may write it is checked as that user
 * when the store opens (judge0_store_open_dir), at start and by -n.
 */
#include "config_parse.h"
#include "gw_limits.h"

#include <stddef.h>
#include <string.h>

static int submissions_field(struct parse_ctx *pc, const char *key, yaml_node_t *v, void *arg)
{
#define FIELD(field, min, max) CFG_UINT_SPEC(struct gw_submissions_config, field, (min), (max))
    static const struct cfg_uint_spec fields[] = {
        FIELD(ttl_s, 1, GW_MAX_JUDGE0_TTL_S),
        FIELD(max_per_tenant, 1, GW_MAX_JUDGE0_STORE_RECORDS),
        FIELD(max_records, 1, GW_MAX_JUDGE0_STORE_RECORDS),
        FIELD(max_bytes, 4096, GW_MAX_JUDGE0_STORE_BYTES),
        FIELD(max_running, 1, GW_MAX_JUDGE0_MAX_RUNNING),
        FIELD(queue_max, 1, GW_MAX_JUDGE0_QUEUE),
        FIELD(queue_max_per_tenant, 1, GW_MAX_JUDGE0_QUEUE),
    };
#undef FIELD
    struct gw_submissions_config *s = &pc->cfg->submissions;

    (void)arg;
    if (strcmp(key, "store_dir") == 0) {
        if (cfg_string(pc, v, "submissions.store_dir", GW_MAX_PATH_LEN, &s->store_dir) != 0)
            return -1;
        return s->store_dir[0] == '/' ? 0 : cfg_fail(pc, v, "submissions.store_dir must be an absolute path");
    }
    return cfg_uint_table(pc, fields, sizeof(fields) / sizeof(fields[0]), "submissions", key, v, s);
}

int cfg_parse_submissions(struct parse_ctx *pc, yaml_node_t *v)
{
    const struct gw_submissions_config *s = &pc->cfg->submissions;

    if (cfg_walk_mapping(pc, v, "submissions", submissions_field, NULL) != 0)
        return -1;
    if (s->queue_max_per_tenant > s->queue_max)
        return cfg_fail(pc, v, "submissions.queue_max_per_tenant (%llu) exceeds submissions.queue_max (%llu)",
                        (unsigned long long)s->queue_max_per_tenant, (unsigned long long)s->queue_max);
    return 0;
}
