/*
 * moat_notify.h - systemd's readiness protocol (sd_notify) without
 * libsystemd, the one copy for moat-backend and moat-gateway.
 *
 * A Type=notify service finds an AF_UNIX datagram socket's address in
 * $NOTIFY_SOCKET (a path, or an abstract name when it starts with '@') and
 * sends it newline-separated KEY=VALUE states: READY=1 once it serves,
 * RELOADING=1 ... READY=1 around a reload, STOPPING=1 when it begins to
 * stop.  Outside systemd the variable is unset and every call does nothing.
 */
#ifndef MOAT_NOTIFY_H
#define MOAT_NOTIFY_H

#include <stddef.h>

/* Called once, early (before any thread, while still root): connects a
 * close-on-exec datagram socket to $NOTIFY_SOCKET and unsets the variable,
 * so that no program started later (the audit writer, a box) inherits it.
 * Connecting now means a later moat_notify() needs only write(2), which
 * the gateway's seccomp filter allows, and works after the privilege drop.
 * 0 (also when the variable is unset), or -1 with err: an address that is
 * not a path or an abstract name, or a socket that refuses; the caller
 * stops, since systemd would otherwise wait for a READY=1 that never comes. */
int moat_notify_open(char *err, size_t errlen);

/* Sends one state ("READY=1", "STOPPING=1", ...) if moat_notify_open found
 * a socket.  Best effort: systemd going away must not stop the service. */
void moat_notify(const char *state);

/* RELOADING=1 with MONOTONIC_USEC (what Type=notify-reload, systemd 253,
 * also wants; older systemd ignores the extra field). */
void moat_notify_reloading(void);

#endif /* MOAT_NOTIFY_H */
