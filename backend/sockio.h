/*
 * sockio.h - whole-buffer socket writes for the backend (the Unix socket to
 * the gateway, and a box's control socket).
 */
#ifndef MOAT_SOCKIO_H
#define MOAT_SOCKIO_H

#include <stddef.h>

/* Sends all of buf (no SIGPIPE); 0, or -1 with errno set. */
int send_full(int fd, const void *buf, size_t len);

#endif
