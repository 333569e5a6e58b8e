/*
 * privsep.h - supervisor (root), gateway (moat), audit writer
 * (moat-audit) and callback sender processes; see privsep.c.
 */
#ifndef GW_PRIVSEP_H
#define GW_PRIVSEP_H

#include <stddef.h>
#include <stdint.h>

#include "config/config_audit.h"

#define GW_PRIVSEP_MAX_FDS 256

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

#endif
