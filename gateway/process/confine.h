/*
 * confine.h - the gateway's system call allow-list (pledge's role here).
 */
#ifndef GW_CONFINE_H
#define GW_CONFINE_H

#include <stddef.h>

/*
 * Set no_new_privs and install the gateway's seccomp filter on every thread
 * of the process (TSYNC).  Called once, after the privilege drop and before
 * the worker threads start; threads created later inherit the filter.
 * tcp_client: also allow AF_INET and AF_INET6 sockets (a Redis reached
 * over TCP, limiter.redis.host); 0 keeps sockets to AF_UNIX.
 * 0, or -1 with err set; the caller must treat -1 as fatal.
 */
int gw_confine(int tcp_client, char *err, size_t errlen);

/* The same for the callback sender: the gateway's calls plus outbound
 * IPv4/IPv6 sockets and what its resolver and TLS need (confine.c). */
int gw_confine_callback_sender(char *err, size_t errlen);

#endif /* GW_CONFINE_H */
