/*
 * config_submissions.c - where Judge0 submissions' results are kept
 * (judge0_store.c) and how many wait and run (judge0_queue.c): the
 * top-level submissions section.
 *
 * Optional and strict like every section (unknown keys, values out of
 * range: PATH:LINE):
 *
 *   submissions:
 *     store: memory             # memory (default) | dir | redis
 *     store_dir: /var/lib/moat/submissions  # with store: dir (alone: store dir)
 *     ttl_s: 3600               # a record's life, by the wall clock
 *     max_per_tenant: 1000      # records one tenant may hold
 *     max_records: 20000        # records of all tenants together
 *     max_bytes: 268435456      # bytes of records, all tenants together
 *     max_running: 4            # queued submissions' runs at once, all tenants
 *     queue_max: 2000           # submissions waiting, all tenants (503 past it)
 *     queue_max_per_tenant: 500 # submissions waiting, one tenant (429 past it)
 *     queue: memory             # memory (default) | redis: shared by every gateway
 *     queue_max_bytes_per_tenant: 268435456  # queue: redis: bytes waiting, one tenant (429)
 *     max_attempts: 3           # queue: redis: runs of a submission whose gateway died
 *     durability: primary       # queue: redis: | replicated: a 201 once a replica has the entry (WAIT)
 *
 * Defaults and bounds come from gw_limits.h (GW_DEFAULT_JUDGE0_*,
 * GW_MAX_JUDGE0_*); queue_max_per_tenant may not exceed queue_max.  store_dir must be absolute; that the directory is the
 * gateway user's own and nobody else may write it is checked as that user
 * when the store opens (judge0_store_open_dir), at start and by -n.
 * store: redis keeps results in the Redis the limiter section names (its
 * connection settings, one place for them): it needs limiter.store redis
 * (checked once every section is read: cfg_submissions_finish).  queue:
 * redis needs store: redis (a result must be readable on every gateway);
 * max_running is then the backend's own slot count, learned from it.
 */
#include "config_parse.h"
#include "common/gw_limits.h"

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
        FIELD(queue_max_bytes_per_tenant, 1, GW_MAX_QUEUE_MAX_BYTES_PER_TENANT),
        FIELD(max_attempts, 1, GW_MAX_QUEUE_MAX_ATTEMPTS),
    };
#undef FIELD
    struct gw_submissions_config *s = &pc->cfg->submissions;

    if (strcmp(key, "store") == 0) {
        static const char *const names[] = {
            [GW_SUBMISSIONS_MEMORY] = "memory", [GW_SUBMISSIONS_DIR] = "dir", [GW_SUBMISSIONS_REDIS] = "redis"};
        if (cfg_want_scalar(pc, v, "submissions.store") != 0)
            return -1;
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
            if (strcmp(cfg_scalar(v), names[i]) == 0) {
                s->store = (enum gw_submissions_store)i;
                *(int *)arg = 1;
                return 0;
            }
        return cfg_fail(pc, v, "submissions.store must be memory, dir or redis");
    }
    if (strcmp(key, "queue") == 0) {
        return cfg_either(pc, v, "submissions.queue", "memory", "redis", &s->queue_redis);
    }
    if (strcmp(key, "durability") == 0)
        return cfg_either(pc, v, "submissions.durability", "primary", "replicated", &s->replicated);
    if (strcmp(key, "store_dir") == 0) {
        if (cfg_string(pc, v, "submissions.store_dir", GW_MAX_PATH_LEN, &s->store_dir) != 0)
            return -1;
        return s->store_dir[0] == '/' ? 0 : cfg_fail(pc, v, "submissions.store_dir must be an absolute path");
    }
    return cfg_uint_table(pc, fields, sizeof(fields) / sizeof(fields[0]), "submissions", key, v, s);
}

int cfg_parse_submissions(struct parse_ctx *pc, yaml_node_t *v)
{
    struct gw_submissions_config *s = &pc->cfg->submissions;
    int store_named = 0;

    if (cfg_walk_mapping(pc, v, "submissions", submissions_field, &store_named) != 0)
        return -1;
    if (!store_named && s->store_dir != NULL)
        s->store = GW_SUBMISSIONS_DIR;
    if ((s->store == GW_SUBMISSIONS_DIR) != (s->store_dir != NULL))
        return cfg_fail(pc, v, "submissions: store_dir goes with store: dir, and store: dir needs a store_dir");
    if (s->queue_max_per_tenant > s->queue_max)
        return cfg_fail(pc, v, "submissions.queue_max_per_tenant (%llu) exceeds submissions.queue_max (%llu)",
                        (unsigned long long)s->queue_max_per_tenant, (unsigned long long)s->queue_max);
    return 0;
}

int cfg_submissions_finish(struct parse_ctx *pc)
{
    if (pc->cfg->submissions.store == GW_SUBMISSIONS_REDIS && !pc->cfg->limiter.redis)
        return cfg_fail(pc, NULL,
                        "submissions.store redis needs limiter.store redis (the connection settings are limiter.redis's)");
    if (pc->cfg->submissions.queue_redis && pc->cfg->submissions.store != GW_SUBMISSIONS_REDIS)
        return cfg_fail(pc, NULL, "submissions.queue redis needs submissions.store redis (any gateway answers for a result)");
    if (pc->cfg->submissions.replicated && !pc->cfg->submissions.queue_redis)
        return cfg_fail(pc, NULL, "submissions.durability replicated needs submissions.queue redis (what a 201 waits for)");
    return 0;
}
