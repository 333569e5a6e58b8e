/*
 * audit_writer.h - the audit writer's loop over its clients' sockets.
 */
#ifndef MOAT_AUDIT_WRITER_H
#define MOAT_AUDIT_WRITER_H

#include "audit_log.h"

/* Serves the client sockets until every one has closed.  0, or -1 on a
 * fatal error. */
int audit_writer_run(struct audit_log *l, const int *fds, int nfds);

#endif
