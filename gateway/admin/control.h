/*
 * control.h - the supervisor's control socket for moatctl (control.c).
 */
#ifndef GW_CONTROL_H
#define GW_CONTROL_H

#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include <jansson.h>

#include "admin_store.h"
#include "config/config.h"
#include "common/gw_limits.h"

struct gw_control_client {
    int fd; /* -1: free */
    uid_t uid;
    pid_t pid;
    uint64_t deadline_ms; /* monotonic */
    char *in;             /* the request as read so far */
    size_t in_len;
    char *out; /* the reply, once there is one */
    size_t out_len, out_off;
};

struct gw_control {
    int listen_fd; /* -1: no control section (nothing below is used) */
    char *socket_path;
    char *config_path;
    uid_t users[GW_CONTROL_MAX_USERS]; /* allowed besides root */
    size_t nusers;
    struct admin_store store;
    int audit_fd; /* the supervisor's own socket to the audit writer; -1 while there is none */
    uint64_t audit_tag;
    int ctl; /* the ctl socketpair's supervisor end (privsep.h) */
    uint64_t ctl_seq;
    pid_t gateway, writer;
    struct gw_control_client clients[GW_CONTROL_MAX_CLIENTS];
    /* keys' last use into the store (gw_control_flush_used) */
    uint64_t used_every_ms, used_next_ms;
    time_t used_since; /* what was used from then on is not in the store yet */
    int used_failing;  /* the last flush failed (logged once until one works) */
};

/*
 * As root, before the supervisor forks: with a control section, check the
 * socket's directory, remove a stale socket left by a crash (never a live
 * one, never anything but a socket), bind and listen with the section's
 * mode and group, look up the allowed users and the gateway's user (the
 * store's owner).  Without one, c->listen_fd is -1.  0, or -1 with err.
 */
int gw_control_open(struct gw_control *c, const struct gw_config *cfg, const char *config_path, char *err, size_t errlen);

/* What gw_control_open will need, checked without binding (-n and before a start): the
 * group, the users and the gateway's user exist, the socket's directory is fit.  0 or -1. */
int gw_control_check(const struct gw_config *cfg, char *err, size_t errlen);

/* In the gateway after the fork: its copy of the listening socket goes. */
void gw_control_forget(struct gw_control *c);

/* Room gw_control_pollfds needs: each client, the listener, the store's subscription in Redis. */
#define GW_CONTROL_MAX_POLLFDS (GW_CONTROL_MAX_CLIENTS + 2)

/* The supervisor's poll set: the listener while there is room, each client, the store's
 * subscription (store_backend: redis); returns how many were filled. */
int gw_control_pollfds(struct gw_control *c, struct pollfd *pfd, int max);

/* After poll: serve what is ready (pfd as filled by gw_control_pollfds), drop clients past their
 * deadline; with the store in Redis, follow it (admin_store_redis.h): apply another gateway's change. */
void gw_control_serve(struct gw_control *c, const struct pollfd *pfd, int n);

/* Milliseconds until the next client deadline or the store's next reconnect or resync; -1 if none. */
int gw_control_timeout(const struct gw_control *c);

/* A new audit writer: its socket for the supervisor's own records (the old one is closed). */
void gw_control_set_writer(struct gw_control *c, pid_t writer, int audit_fd);

/* The supervisor is ending: remove the socket file. */
void gw_control_close(struct gw_control *c);

/* Write keys' last use since the last flush into the store (to the
 * minute, the later time kept), as the poll loop does every
 * control.last_used_every_s and the supervisor does once more as it exits. */
void gw_control_flush_used(struct gw_control *c);

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
