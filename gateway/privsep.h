/*
 * privsep.h - supervisor (root), gateway (moat), audit writer
 * (moat-audit) and callback sender processes; see privsep.c.
 */
#ifndef GW_PRIVSEP_H
#define GW_PRIVSEP_H

#include <stddef.h>
#include <stdint.h>

#define GW_PRIVSEP_MAX_FDS 256

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

/* The callback sender (callback_sender_main.c), when the configuration has
 * a callbacks section: the program, the configuration it reads (absolute)
 * and the user it runs as. */
struct gw_sender_spec {
    const char *program;
    const char *config;
    const char *user;
};

/*
 * Called as root after binding, before the privilege drop.  Starts the
 * writer (and the callback sender when cs is not NULL), forks; returns 0
 * in the gateway process with one writer socket per worker in audit_fds,
 * the supervisor's control socket in *ctl_fd and the gateway's end of the
 * sender's socket in *callback_fd (-1 without a sender).  The supervisor
 * never returns from here: it also serves control (opened with
 * gw_control_open, or with listen_fd -1 for none).  -1 with err set if
 * nothing was started.
 */
struct gw_control;
int gw_privsep_start(const struct gw_audit_config *ac, const struct gw_sender_spec *cs, int nfds, int *audit_fds, int *ctl_fd,
                     int *callback_fd, struct gw_control *control, char *err, size_t errlen);

/*
 * The ctl socketpair (SOCK_SEQPACKET) between the supervisor and the
 * gateway's main thread carries three kinds of message:
 *
 *   supervisor -> gateway  one byte with SCM_RIGHTS: a new set of writer
 *                          sockets after a writer restart (moat_send_fds;
 *                          the gateway takes it with moat_recv_fds)
 *   supervisor -> gateway  struct gw_ctl_msg, type GW_CTL_RELOAD or
 *                          GW_CTL_STATUS, len 0
 *   gateway -> supervisor  struct gw_ctl_msg with the same type and seq,
 *                          status 0 or -1, then len bytes of text: a
 *                          reload's "generation N" or its error, a
 *                          status's JSON object
 *
 * Every message is at most GW_CONTROL_MSG_MAX bytes.  The supervisor
 * waits for its answer (bounded) and drops answers to older requests
 * (seq), so a late one can never pass for the next.
 */
#define GW_CTL_MAGIC 0x4c54434du /* "MCTL" */
enum gw_ctl_type { GW_CTL_RELOAD = 1, GW_CTL_STATUS = 2 };
struct gw_ctl_msg {
    uint32_t magic;
    uint32_t type;
    uint64_t seq;
    int32_t status;
    uint32_t len;
};

#endif
