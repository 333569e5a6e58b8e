/*
 * config_audit.h - the audit section's settings: where the trail lives, who
 * writes it, and the writer's cadences (the table of their keys, flags and
 * bounds is in config_audit.c).  Read by the supervisor (process/privsep.c),
 * which passes them to moat-audit-writer.
 */
#ifndef GW_CONFIG_AUDIT_H
#define GW_CONFIG_AUDIT_H

#include <stdint.h>

/* The writer's cadences, passed to moat-audit-writer as --NAME VALUE; an
 * unset one keeps the writer's default (moat-audit-writer --help). */
enum gw_audit_tuning {
    GW_AUDIT_CHECKPOINT_RECORDS,
    GW_AUDIT_CHECKPOINT_SECONDS,
    GW_AUDIT_CHECKPOINT_DELAY_MS,
    GW_AUDIT_EPOCH_RECORDS,
    GW_AUDIT_EPOCH_SECONDS,
    GW_AUDIT_ROTATE_BYTES,
    GW_AUDIT_ROTATE_SECONDS,
    GW_AUDIT_PACKET_RETENTION_DAYS,
    GW_AUDIT_RESERVE_BYTES,
    GW_AUDIT_NTUNING
};

struct gw_audit_tuning_spec {
    const char *key;  /* in the audit section of gateway.conf */
    const char *flag; /* moat-audit-writer's option */
    uint64_t min, max;
};
extern const struct gw_audit_tuning_spec gw_audit_tuning_specs[GW_AUDIT_NTUNING];

struct gw_audit_config {
    char *dir;    /* the audit directory (moat-audit init) */
    char *user;   /* the writer's user */
    char *writer; /* path of moat-audit-writer */
    int packets;  /* store full request/result packets */
    uint64_t tuning[GW_AUDIT_NTUNING];
    unsigned tuning_set; /* bit i: tuning[i] was given */
};

#endif /* GW_CONFIG_AUDIT_H */
