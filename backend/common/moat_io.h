/*
 * moat_io.h - whole-buffer reads and writes on blocking descriptors, and
 * descriptor passing, the one copy (bubblewrap's TEMP_FAILURE_RETRY habit):
 * every loop here retries EINTR and short transfers, so callers never
 * write one again.
 *
 * Safe in a clone of a multi-threaded process (backend/box_init.c): these
 * functions only make system calls; no malloc, no locks.
 */
#ifndef MOAT_IO_H
#define MOAT_IO_H

#include <stddef.h>
#include <sys/types.h>

/* The most descriptors one moat_send_fds / moat_recv_fds carries. */
#define MOAT_IO_MAX_FDS 256

/* Reads until len bytes or end of file: the number read (len, or fewer at
 * end of file: 0 when it came before the first byte), or -1 with errno. */
ssize_t moat_read_full(int fd, void *buf, size_t len);

/* Writes all of buf with write(2): 0, or -1 with errno (ENOSPC when the
 * descriptor takes no more bytes).  done (may be NULL) gets how many bytes
 * went out, on failure too: a log writer rolls back to its last whole
 * record with it. */
int moat_write_full(int fd, const void *buf, size_t len, size_t *done);

/* Sends all of buf on a socket with MSG_NOSIGNAL: a peer that went away is
 * -1 with EPIPE, never SIGPIPE.  0, or -1 with errno. */
int moat_send_full(int sock, const void *buf, size_t len);

/* Passes n (1..MOAT_IO_MAX_FDS) descriptors over a Unix socket with one
 * marker byte (SCM_RIGHTS).  The sender keeps its copies.  0, or -1. */
int moat_send_fds(int sock, const int *fds, size_t n);

/* Receives exactly n descriptors sent by moat_send_fds, close-on-exec:
 * 0, or -1 (end of file, error, another message, another count; anything
 * received is then closed). */
int moat_recv_fds(int sock, int *fds, size_t n);

#endif /* MOAT_IO_H */
