/*
 * callback_policy.h - where a Judge0 callback may go: the URL's strict
 * form, a tenant's allow-listed prefixes, and the classes of addresses
 * refused unless the tenant allows private ones (see callback_policy.c).
 *
 * Pure functions, no I/O: the gateway checks a submission's callback_url
 * with them at submit time, and the callback sender (callback_sender.c)
 * checks again before it sends, and vets every address it connects to.
 */
#ifndef GW_CALLBACK_POLICY_H
#define GW_CALLBACK_POLICY_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "common/gw_limits.h"

/* A callback URL taken apart. */
struct cb_url {
    char host[256];                     /* lower case; an IPv6 literal without its brackets */
    int ip;                             /* 4 or 6: host is an address literal; 0: a name */
    uint16_t port;                      /* 443 when the URL names none */
    char path[GW_CALLBACK_URL_MAX + 1]; /* from the first '/' (with the query); "/" when empty */
};

/*
 * Parse url[0..len) strictly: "https://" (scheme in any case), a host name
 * of letters, digits, '-' and '.' (non-empty labels, not numeric as a whole
 * unless a dotted-quad address) or a bracketed IPv6 address (no zone), an
 * optional port 1..65535, then a path in normal form: printable ASCII
 * without '\', no fragment, no empty, "." or ".." segment, no percent
 * escape of '.', '/' or '\', every escape two hex digits.  No userinfo.
 * 0, or -1 with the reason in err.
 */
int cb_url_parse(const char *url, size_t len, struct cb_url *out, char *err, size_t errlen);

/*
 * Does url fall under prefix?  Same host, same port, and url's path starts
 * with prefix's path at a segment boundary: the prefix's path ends with
 * '/', or url's continues with '/' or '?' or ends there
 * ("https://a.com/x" covers "https://a.com/x/y", not "https://a.com/xyz").
 */
int cb_url_under(const struct cb_url *prefix, const struct cb_url *url);

/* What an address is, for the callback sender. */
enum cb_addr_kind {
    CB_ADDR_PUBLIC,      /* anywhere on the internet */
    CB_ADDR_LOOPBACK,    /* 127/8, ::1 */
    CB_ADDR_PRIVATE,     /* 10/8, 172.16/12, 192.168/16, fc00::/7, fec0::/10 */
    CB_ADDR_LINK_LOCAL,  /* 169.254/16, fe80::/10 */
    CB_ADDR_SHARED,      /* 100.64/10 (carrier-grade NAT) */
    CB_ADDR_UNSPECIFIED, /* 0/8, :: (Linux connects 0.0.0.0 to the host itself) */
    CB_ADDR_MULTICAST,   /* 224/4, ff00::/8 */
    CB_ADDR_RESERVED,    /* broadcast, 240/4, documentation, benchmarking, protocol assignments, discard-only, IPv4-compatible */
};

/* The kind of an IPv4 address (4 bytes, network order) or an IPv6 one (16
 * bytes); IPv6 forms that carry an IPv4 address (mapped ::ffff:0:0/96,
 * NAT64 64:ff9b::/96, 6to4 2002::/16) are the kind of that address. */
enum cb_addr_kind cb_addr_kind_of(int family, const uint8_t *addr);

/* The same for a socket address; an unknown family is RESERVED. */
enum cb_addr_kind cb_addr_kind_of_sockaddr(const struct sockaddr *sa, size_t len);

/* May a tenant send there?  PUBLIC always; LOOPBACK, PRIVATE, LINK_LOCAL
 * and SHARED only when it allows private addresses; never the others. */
int cb_addr_allowed(enum cb_addr_kind kind, int allow_private);

/* "loopback", "private", ... */
const char *cb_addr_kind_name(enum cb_addr_kind kind);

/* A tenant's callbacks: allowed prefixes (parsed), private addresses allowed or not. */
struct cb_tenant_rules {
    const struct cb_url *allow;
    size_t nallow;
    int allow_private;
};

/*
 * The whole check of a callback URL against a tenant's rules, as the
 * gateway makes it at submit time and the sender again before sending:
 * callbacks on (a prefix listed), the URL's form, one prefix covering it,
 * and an address literal's kind.  A host name's addresses are the sender's
 * to vet when it connects.  0 (out filled when not NULL), or -1 with a
 * client-facing reason in err.
 */
int cb_check_url(const struct cb_tenant_rules *rules, const char *url, size_t len, struct cb_url *out, char *err, size_t errlen);

#endif /* GW_CALLBACK_POLICY_H */
