/*
 * proxies.h - the client's address behind a load balancer: trusted proxy
 * ranges (CIDRs), the PROXY protocol v2 header, X-Forwarded-For.  Pure
 * functions (no I/O, no globals): conn.c reads the PROXY header off the
 * socket, the pipeline reads X-Forwarded-For; see proxies.c.
 */
#ifndef GW_PROXIES_H
#define GW_PROXIES_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define GW_PROXY_V2_MAX_HEADER 536 /* bytes: 16 + the largest address block we accept (216), with TLVs */
#define GW_MAX_TRUSTED_PROXIES 64

/* An address as 16 bytes, IPv4 as ::ffff:a.b.c.d. */
struct gw_addr {
    uint8_t a[16];
};

/* A range: the first bits of addr (IPv4 ranges as IPv4-mapped, bits + 96). */
struct gw_cidr {
    struct gw_addr addr;
    unsigned bits;
};

/* "10.0.0.0/8", "192.0.2.7" (a /32), "fd00::/8", "::1": 0, or -1 (bad
 * syntax, a prefix too long, or bits set past the prefix). */
int gw_cidr_parse(const char *s, struct gw_cidr *out);
/* Is a in one of the n ranges? */
int gw_cidr_match(const struct gw_cidr *list, size_t n, const struct gw_addr *a);

/* sa as a gw_addr: 0, or -1 for a family other than IPv4 and IPv6. */
int gw_addr_of_sockaddr(const struct sockaddr *sa, socklen_t len, struct gw_addr *out);
/* Text form (IPv4 dotted for mapped addresses); "?" if it does not fit. */
void gw_addr_text(const struct gw_addr *a, char *text, size_t textlen);
/* The unit of per-address limits: IPv4 whole, IPv6 by its /64. */
void gw_addr_key(const struct gw_addr *a, uint8_t key[16]);

/*
 * A PROXY protocol v2 header at the start of p[0..len).  Returns the
 * header's length with *src the client's address (PROXY command, TCP or
 * UDP over IPv4 or IPv6) or *srclen 0 (LOCAL command, or an address family
 * it does not carry: the connection's own address stands); 0 when more
 * bytes are needed; -1 when it is not a valid v2 header (the reason in
 * *why).
 */
long gw_proxy_v2_parse(const uint8_t *p, size_t len, struct sockaddr_storage *src, socklen_t *srclen, const char **why);

/*
 * The client by X-Forwarded-For, as sent by a peer already trusted: the
 * header's hops (value, len bytes; several header lines joined with ",")
 * walked from the right, skipping trusted ones; the first untrusted hop is
 * the client, or the leftmost hop when all are trusted.  Returns 0 with
 * *client set, 1 when the header names no hop (the peer stands), -1 when a
 * hop that had to be read is not an address (*client: the last trusted
 * hop walked, or unchanged).
 */
int gw_forwarded_client(const char *value, size_t len, const struct gw_cidr *trusted, size_t ntrusted, struct gw_addr *client);

#endif
