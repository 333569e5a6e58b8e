/*
 * config_audit.c - the configuration's audit section.
 *
 * Present, it turns the audit trail on: dir (made by moat-audit init) is
 * required, user and writer default to GW_DEFAULT_AUDIT_USER and
 * GW_DEFAULT_AUDIT_WRITER, packets defaults to true, and the writer's
 * cadences and disk reserve (gw_audit_tuning_specs below:
 * checkpoint_delay_ms, reserve_bytes, ...) are taken by name, each within
 * its own range, and passed on only when given.  Absent, the gateway runs
 * without a trail (audit_enabled 0).
 */
#include "config_parse.h"
#include "common/gw_limits.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Each tuning key of the audit section, the writer's option it becomes
 * (privsep.c passes it on) and its bounds. */
const struct gw_audit_tuning_spec gw_audit_tuning_specs[GW_AUDIT_NTUNING] = {
    [GW_AUDIT_CHECKPOINT_RECORDS] = {"checkpoint_records", "--checkpoint-records", 1, 10000000},
    [GW_AUDIT_CHECKPOINT_SECONDS] = {"checkpoint_seconds", "--checkpoint-seconds", 1, 86400},
    [GW_AUDIT_CHECKPOINT_DELAY_MS] = {"checkpoint_delay_ms", "--checkpoint-delay-ms", 10, 3600000},
    [GW_AUDIT_EPOCH_RECORDS] = {"epoch_records", "--epoch-records", 1, 10000000},
    [GW_AUDIT_EPOCH_SECONDS] = {"epoch_seconds", "--epoch-seconds", 1, 30 * 86400},
    [GW_AUDIT_ROTATE_BYTES] = {"rotate_bytes", "--rotate-bytes", 65536, 1ull << 40},
    [GW_AUDIT_ROTATE_SECONDS] = {"rotate_seconds", "--rotate-seconds", 60, 366 * 86400},
    [GW_AUDIT_PACKET_RETENTION_DAYS] = {"packet_retention_days", "--packet-retention-days", 0, 3650},
    [GW_AUDIT_RESERVE_BYTES] = {"reserve_bytes", "--reserve-bytes", 0, 1ull << 40},
};

static int audit_field(struct parse_ctx *pc, const char *key, yaml_node_t *v, void *arg)
{
    struct gw_audit_config *a = &pc->cfg->audit;
    if (strcmp(key, "dir") == 0) {
        if (cfg_string(pc, v, "audit.dir", GW_MAX_PATH_LEN, &a->dir) != 0)
            return -1;
        if (a->dir[0] != '/')
            return cfg_fail(pc, v, "audit.dir must be an absolute path");
        return 0;
    }
    if (strcmp(key, "user") == 0)
        return cfg_string(pc, v, "audit.user", 32, &a->user);
    if (strcmp(key, "writer") == 0)
        return cfg_string(pc, v, "audit.writer", GW_MAX_PATH_LEN, &a->writer);
    if (strcmp(key, "packets") == 0)
        return cfg_bool(pc, v, "audit.packets", &a->packets);
    for (int t = 0; t < GW_AUDIT_NTUNING; t++) {
        const struct gw_audit_tuning_spec *sp = &gw_audit_tuning_specs[t];
        char name[64];
        if (strcmp(key, sp->key) != 0)
            continue;
        snprintf(name, sizeof(name), "audit.%s", sp->key);
        if (cfg_uint(pc, v, name, sp->min, sp->max, &a->tuning[t]) != 0)
            return -1;
        a->tuning_set |= 1u << t;
        return 0;
    }
    return 1;
}

int cfg_parse_audit(struct parse_ctx *pc, yaml_node_t *v)
{
    struct gw_audit_config *a = &pc->cfg->audit;
    a->packets = 1;
    if (cfg_walk_mapping(pc, v, "audit", audit_field, NULL) != 0)
        return -1;
    if (a->dir == NULL)
        return cfg_fail(pc, v, "audit needs a dir (made by moat-audit init)");
    if ((a->user == NULL && (a->user = strdup(GW_DEFAULT_AUDIT_USER)) == NULL) ||
        (a->writer == NULL && (a->writer = strdup(GW_DEFAULT_AUDIT_WRITER)) == NULL))
        return cfg_fail(pc, v, "out of memory");
    pc->cfg->audit_enabled = 1;
    return 0;
}
