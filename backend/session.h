/*
 * session.h - a live session (issue 11): one program in one box, stdin
 * written while it runs, output sent as it is read, three clocks.  See
 * session.c for how it runs and PROTOCOL.md ("Sessions") for the wire.
 */
#ifndef MOAT_SESSION_H
#define MOAT_SESSION_H

#include <stdint.h>

#include "job.h"
#include "moat_proto.h"

/*
 * Runs the session a SESSION_OPEN (header h, its payload) asked for, on the
 * connection fd, on the calling thread, to its end: the last SESSION_EXIT,
 * an ERROR with the session's job id, or the gateway gone.  The caller then
 * closes the connection: a session is the last thing on it.
 */
void session_run(struct backend *b, int fd, const struct moat_frame_header *h, const uint8_t *payload);

#endif
