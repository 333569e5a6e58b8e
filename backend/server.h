/*
 * server.h - the backend's Unix socket listener.
 */
#ifndef MOAT_SERVER_H
#define MOAT_SERVER_H

#include <stddef.h>
#include <sys/types.h>

#include "errbuf.h"

struct backend;

struct server {
    struct backend *b;
    int listen_fd;
    uid_t *allowed; /* peer uids allowed besides root */
    size_t nallowed;
    int active; /* connections being served (atomic) */
};

/* Creates the socket: mode 0660, owner root, group `group`. */
int server_listen(struct server *srv, const char *path, gid_t group, struct errbuf *e);
/* Accepts until a signal arrives on sig_fd (a signalfd). */
void server_serve(struct server *srv, int sig_fd);

#endif
