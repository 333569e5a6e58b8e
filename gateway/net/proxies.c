/*
 * proxies.c - the client's address behind a load balancer.
 *
 * Theory of operation
 * -------------------
 * Behind a load balancer every connection comes from the balancer, so the
 * per-address connection caps, the unauthenticated-refusal limiter
 * (denials.c), the logs and the audit records' `client` would all name
 * it.  The configuration's `trusted_proxies` lists the ranges of the
 * balancers; only peers in those ranges may say who the client is, in two
 * ways:
 *
 *   PROXY v2   (`proxy_protocol: true`) the balancer starts each TCP
 *              connection with a binary header naming the client's address
 *              (haproxy's PROXY protocol, version 2); conn.c reads it
 *              before the TLS handshake, and from then on the connection
 *              is the client's: its caps, its logs.  A trusted peer must
 *              send it; a LOCAL header (the balancer's health check) keeps
 *              the balancer's own address.
 *   X-Forwarded-For  per request, from a trusted peer (after PROXY): the
 *              hops are walked from the right, skipping trusted ones, and
 *              the first untrusted hop is the client ("rightmost untrusted":
 *              a client can prepend anything, but cannot forge what the
 *              trusted proxies appended).
 *
 * From any other peer both are ignored (and logged): an untrusted client
 * cannot move its requests to another address's limits or records.
 * Addresses are kept as 16 bytes, IPv4 mapped into IPv6, so one matcher
 * serves both families.
 */
#include "proxies.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- addresses */

static void addr_v4(const void *in4, struct gw_addr *out)
{
    memset(out->a, 0, 10);
    out->a[10] = out->a[11] = 0xff;
    memcpy(out->a + 12, in4, 4);
}

static int is_mapped(const struct gw_addr *a)
{
    static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

    return memcmp(a->a, prefix, sizeof(prefix)) == 0;
}

/* An address in text, strictly (inet_pton: no hostnames, no ports). */
static int addr_parse(const char *s, struct gw_addr *out, int *v4)
{
    struct in_addr in4;

    if (inet_pton(AF_INET, s, &in4) == 1) {
        addr_v4(&in4, out);
        *v4 = 1;
        return 0;
    }
    *v4 = 0;
    return inet_pton(AF_INET6, s, out->a) == 1 ? 0 : -1;
}

int gw_addr_of_sockaddr(const struct sockaddr *sa, socklen_t len, struct gw_addr *out)
{
    if (sa->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
        addr_v4(&((const struct sockaddr_in *)(const void *)sa)->sin_addr, out);
        return 0;
    }
    if (sa->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
        memcpy(out->a, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, 16);
        return 0;
    }
    return -1;
}

void gw_addr_text(const struct gw_addr *a, char *text, size_t textlen)
{
    const char *ok = is_mapped(a) ? inet_ntop(AF_INET, a->a + 12, text, (socklen_t)textlen)
                                  : inet_ntop(AF_INET6, a->a, text, (socklen_t)textlen);

    if (ok == NULL)
        snprintf(text, textlen, "?");
}

void gw_addr_key(const struct gw_addr *a, uint8_t key[16])
{
    memcpy(key, a->a, 16);
    if (!is_mapped(a))
        memset(key + 8, 0, 8);
}

/* ---------------------------------------------------------------- ranges */

int gw_cidr_parse(const char *s, struct gw_cidr *out)
{
    char host[INET6_ADDRSTRLEN];
    const char *slash = strchr(s, '/');
    size_t hlen = slash != NULL ? (size_t)(slash - s) : strlen(s);
    unsigned long bits;
    char *end;
    int v4;

    if (hlen == 0 || hlen >= sizeof(host))
        return -1;
    memcpy(host, s, hlen);
    host[hlen] = '\0';
    if (addr_parse(host, &out->addr, &v4) != 0)
        return -1;
    if (slash == NULL) {
        bits = v4 ? 32 : 128;
    } else {
        if (slash[1] < '0' || slash[1] > '9' || (slash[1] == '0' && slash[2] != '\0'))
            return -1;
        bits = strtoul(slash + 1, &end, 10);
        if (*end != '\0' || bits > (v4 ? 32ul : 128ul))
            return -1;
    }
    out->bits = (unsigned)bits + (v4 ? 96u : 0u);
    /* no bits past the prefix: "10.1.0.0/8" is a typo, not a range */
    for (unsigned i = out->bits; i < 128; i++)
        if (out->addr.a[i / 8] & (0x80u >> (i % 8)))
            return -1;
    return 0;
}

static int in_range(const struct gw_cidr *c, const struct gw_addr *a)
{
    unsigned full = c->bits / 8, rest = c->bits % 8;

    if (memcmp(c->addr.a, a->a, full) != 0)
        return 0;
    if (rest == 0)
        return 1;
    uint8_t mask = (uint8_t)(0xffu << (8 - rest));
    return (c->addr.a[full] & mask) == (a->a[full] & mask);
}

int gw_cidr_match(const struct gw_cidr *list, size_t n, const struct gw_addr *a)
{
    for (size_t i = 0; i < n; i++)
        if (in_range(&list[i], a))
            return 1;
    return 0;
}

/* ---------------------------------------------------------------- PROXY v2 */

static const uint8_t v2_signature[12] = {0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a};

long gw_proxy_v2_parse(const uint8_t *p, size_t len, struct sockaddr_storage *src, socklen_t *srclen, const char **why)
{
    size_t n = len < sizeof(v2_signature) ? len : sizeof(v2_signature);
    size_t body;

    *srclen = 0;
    *why = NULL;
    if (memcmp(p, v2_signature, n) != 0) {
        *why = "no PROXY protocol v2 signature";
        return -1;
    }
    if (len < 16)
        return 0;
    body = (size_t)p[14] << 8 | p[15];
    if ((p[12] & 0xf0) != 0x20) {
        *why = "PROXY protocol version is not 2";
        return -1;
    }
    if (16 + body > GW_PROXY_V2_MAX_HEADER) {
        *why = "PROXY header too long";
        return -1;
    }
    if (len < 16 + body)
        return 0;
    switch (p[12] & 0x0f) {
    case 0x0: /* LOCAL: the proxy's own connection; the body is ignored */
        return (long)(16 + body);
    case 0x1: /* PROXY */
        break;
    default:
        *why = "PROXY protocol command is neither LOCAL nor PROXY";
        return -1;
    }
    memset(src, 0, sizeof(*src));
    switch (p[13] >> 4) {
    case 0x1: { /* AF_INET: src, dst, sport, dport */
        struct sockaddr_in *sin = (struct sockaddr_in *)src;
        if (body < 12) {
            *why = "PROXY header's IPv4 block is short";
            return -1;
        }
        sin->sin_family = AF_INET;
        memcpy(&sin->sin_addr, p + 16, 4);
        memcpy(&sin->sin_port, p + 24, 2);
        *srclen = sizeof(*sin);
        break;
    }
    case 0x2: { /* AF_INET6 */
        struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)src;
        if (body < 36) {
            *why = "PROXY header's IPv6 block is short";
            return -1;
        }
        sin6->sin6_family = AF_INET6;
        memcpy(&sin6->sin6_addr, p + 16, 16);
        memcpy(&sin6->sin6_port, p + 48, 2);
        *srclen = sizeof(*sin6);
        break;
    }
    default: /* UNSPEC or AF_UNIX: no address to take */
        break;
    }
    return (long)(16 + body);
}

/* ---------------------------------------------------------------- X-Forwarded-For */

/* One hop, trimmed of spaces and tabs: an address, or -1. */
static int hop_parse(const char *s, size_t len, struct gw_addr *out)
{
    char buf[INET6_ADDRSTRLEN];
    int v4;

    while (len > 0 && (s[0] == ' ' || s[0] == '\t')) {
        s++;
        len--;
    }
    while (len > 0 && (s[len - 1] == ' ' || s[len - 1] == '\t'))
        len--;
    if (len == 0 || len >= sizeof(buf))
        return -1;
    memcpy(buf, s, len);
    buf[len] = '\0';
    return addr_parse(buf, out, &v4);
}

int gw_forwarded_client(const char *value, size_t len, const struct gw_cidr *trusted, size_t ntrusted, struct gw_addr *client)
{
    size_t end = len;
    int walked = 0;

    while (end > 0) {
        size_t start = end;
        struct gw_addr hop;
        while (start > 0 && value[start - 1] != ',')
            start--;
        if (hop_parse(value + start, end - start, &hop) != 0)
            return -1;
        *client = hop;
        walked = 1;
        if (!gw_cidr_match(trusted, ntrusted, &hop))
            return 0;
        end = start > 0 ? start - 1 : 0;
    }
    return walked ? 0 : 1;
}
