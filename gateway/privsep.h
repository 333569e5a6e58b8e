/*
 * privsep.h - supervisor (root), gateway (moat) and audit writer
 * (moat-audit) processes; see privsep.c.
 */
#ifndef GW_PRIVSEP_H
#define GW_PRIVSEP_H

#include <stddef.h>

#define GW_PRIVSEP_MAX_FDS 256

struct gw_audit_config {
    char *dir;    /* the audit directory (moat-audit init) */
    char *user;   /* the writer's user */
    char *writer; /* path of moat-audit-writer */
    int packets;  /* store full request/result packets */
};

/*
 * Called as root after binding, before the privilege drop.  Starts the
 * writer, forks; returns 0 in the gateway process with one writer socket
 * per worker in audit_fds and the supervisor's control socket in *ctl_fd.
 * The supervisor never returns from here.  -1 with err set if nothing was
 * started.
 */
int gw_privsep_start(const struct gw_audit_config *ac, int nfds, int *audit_fds, int *ctl_fd, char *err, size_t errlen);

/* In the gateway: reads a new set of n writer sockets sent by the
 * supervisor after it restarted the writer. */
int gw_privsep_recv_fds(int ctl_fd, int *fds, int n);

#endif
