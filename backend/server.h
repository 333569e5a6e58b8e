/*
 * server.h - the backend's Unix socket listener.
 */
#ifndef MOAT_SERVER_H
#define MOAT_SERVER_H

#include <pthread.h>
#include <stddef.h>
#include <sys/types.h>

#include "errbuf.h"

struct backend;

struct conn;

struct server {
    struct backend *b;
    int listen_fd;
    uid_t *allowed; /* peer uids allowed besides root */
    size_t nallowed;
    int active; /* connections being served (atomic) */
    pthread_mutex_t mu;
    struct conn *conns; /* those connections, under mu */
};

/* Creates the socket: mode 0660, owner root, group `group`. */
int server_listen(struct server *srv, const char *path, gid_t group, struct errbuf *e);
/* Accepts until a signal arrives on sig_fd (a signalfd). */
void server_serve(struct server *srv, int sig_fd);
/* At a stop: no connection reads another request; sessions end (their
 * gateway looks gone), batch jobs in flight finish. */
void server_stop_reading(struct server *srv);

#endif
