/*
 * callback_policy.c - where a Judge0 callback may go.
 *
 * Theory of operation
 * -------------------
 * A callback is a request moat makes on a tenant's behalf to a URL the
 * tenant's client chose: the server-side request forgery class (Judge0
 * fixed it in 1.13.1: callbacks to internal addresses).  Three checks, each
 * of which fails closed:
 *
 *   the form     https only, a host and port, a path in normal form.  A
 *                URL that a server could read two ways is refused rather
 *                than normalised: no userinfo ("https://a.com@evil/"), no
 *                backslash, no fragment, no "." / ".." / empty segment, no
 *                escaped '.', '/' or '\', no numeric host that is not a
 *                plain dotted quad ("2130706433", "0x7f.1" are 127.0.0.1
 *                to inet_aton).  So the text compared is the text sent.
 *   the prefix   the tenant's configuration lists URL prefixes; one must
 *                cover the URL: same host (case-folded), same port, and
 *                the path continues the prefix's at a segment boundary
 *                ("https://a.com/x" does not cover "https://a.com/xyz" or
 *                "https://a.com.evil.net/x").
 *   the address  loopback, private, link-local and carrier-grade NAT
 *                addresses are refused unless the tenant allows private
 *                ones; unspecified, multicast and reserved ones always.
 *                IPv6 forms that carry an IPv4 address (mapped, NAT64,
 *                6to4) are judged by that address.  The gateway can only
 *                judge an address literal; the callback sender judges every
 *                address it connects to, after its own resolution, so DNS
 *                cannot answer one address to a check and another to the
 *                connection.
 */
#include "callback_policy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "moat_hex.h"
#include "moat_errf.h"

/* ------------------------------------------------------------ the form */

static int is_digit(int c)
{
    return c >= '0' && c <= '9';
}

static int name_char(int c)
{
    return (c >= 'a' && c <= 'z') || is_digit(c) || c == '-' || c == '.';
}

/* A host name: labels of [a-z0-9-] (already lower case), 1..63 bytes, not
 * starting or ending with '-'; the last label not all digits. */
static int check_name(const char *h, char *err, size_t errlen)
{
    size_t n = strlen(h), label = 0;
    int digits_only = 1;

    if (n == 0 || n > 253)
        return moat_errf(err, errlen, "the host name is empty or too long");
    for (size_t i = 0; i <= n; i++) {
        if (i == n || h[i] == '.') {
            if (label == 0 || label > 63)
                return moat_errf(err, errlen, "the host name has an empty or too long label");
            if (h[i - 1] == '-' || h[i - label] == '-')
                return moat_errf(err, errlen, "a host name label may not start or end with '-'");
            if (i == n && digits_only)
                return moat_errf(err, errlen, "the host is numeric but not an IPv4 address in dotted-quad form");
            label = 0;
            digits_only = 1;
            continue;
        }
        if (!name_char(h[i]))
            return moat_errf(err, errlen, "the host name may hold only letters, digits, '-' and '.'");
        digits_only = digits_only && is_digit(h[i]);
        label++;
    }
    return 0;
}

/* The authority a[0..n): host (a name, a dotted quad, or [IPv6]) and port. */
static int parse_authority(const char *a, size_t n, struct cb_url *out, char *err, size_t errlen)
{
    const char *port = NULL;
    size_t hlen;

    if (memchr(a, '@', n) != NULL)
        return moat_errf(err, errlen, "a callback URL may not hold user information");
    if (n > 0 && a[0] == '[') {
        const char *close = memchr(a, ']', n);
        uint8_t v6[16];
        if (close == NULL || (size_t)(close - a) - 1 >= sizeof(out->host))
            return moat_errf(err, errlen, "the IPv6 address is not closed by ']'");
        hlen = (size_t)(close - a) - 1;
        memcpy(out->host, a + 1, hlen);
        out->host[hlen] = '\0';
        for (size_t i = 0; i < hlen; i++)
            if (out->host[i] >= 'A' && out->host[i] <= 'F')
                out->host[i] = (char)(out->host[i] - 'A' + 'a');
        if (inet_pton(AF_INET6, out->host, v6) != 1)
            return moat_errf(err, errlen, "the host is not a valid IPv6 address (zones are not allowed)");
        out->ip = 6;
        if ((size_t)(close - a) + 1 < n) {
            if (close[1] != ':')
                return moat_errf(err, errlen, "unexpected characters after the IPv6 address");
            port = close + 2;
        }
    } else {
        const char *colon = memchr(a, ':', n);
        struct in_addr v4;
        hlen = colon != NULL ? (size_t)(colon - a) : n;
        if (hlen == 0 || hlen >= sizeof(out->host))
            return moat_errf(err, errlen, "the host is empty or too long");
        for (size_t i = 0; i < hlen; i++)
            out->host[i] = (char)(a[i] >= 'A' && a[i] <= 'Z' ? a[i] - 'A' + 'a' : a[i]);
        out->host[hlen] = '\0';
        if (inet_pton(AF_INET, out->host, &v4) == 1)
            out->ip = 4;
        else if (inet_aton(out->host, &v4) != 0) /* "0x7f.1", "2130706433": an address to the resolver */
            return moat_errf(err, errlen, "the host is numeric but not an IPv4 address in dotted-quad form");
        else if (check_name(out->host, err, errlen) != 0)
            return -1;
        if (colon != NULL)
            port = colon + 1;
    }
    out->port = 443;
    if (port != NULL) {
        size_t plen = (size_t)(a + n - port);
        unsigned long v = 0;
        if (plen == 0 || plen > 5)
            return moat_errf(err, errlen, "the port must be 1 to 65535");
        for (size_t i = 0; i < plen; i++) {
            if (!is_digit(port[i]))
                return moat_errf(err, errlen, "the port must be 1 to 65535");
            v = v * 10 + (unsigned long)(port[i] - '0');
        }
        if (v == 0 || v > 65535)
            return moat_errf(err, errlen, "the port must be 1 to 65535");
        out->port = (uint16_t)v;
    }
    return 0;
}

/* An escape "%HH" at p that decodes to '.', '/' or '\' (or is malformed). */
static int bad_escape(const char *p, const char *end)
{
    int hi, lo, c;

    if (end - p < 3 || (hi = moat_hex_digit(p[1], MOAT_HEX_ANY_CASE)) < 0 || (lo = moat_hex_digit(p[2], MOAT_HEX_ANY_CASE)) < 0)
        return 1;
    c = hi * 16 + lo;
    return c == '.' || c == '/' || c == '\\';
}

/* The path (and query) p[0..n): normal form, as the file's comment says. */
static int check_path(const char *p, size_t n, char *err, size_t errlen)
{
    const char *end = p + n, *q = memchr(p, '?', n);
    const char *path_end = q != NULL ? q : end;

    for (const char *c = p; c < end; c++)
        if (*c == '%' && bad_escape(c, end))
            return moat_errf(err, errlen, "the path holds a malformed escape or an escaped '.', '/' or '\\'");
    /* segments of the path part: between '/'s, none empty, "." or ".." */
    for (const char *s = p; s < path_end;) {
        const char *next = memchr(s + 1, '/', (size_t)(path_end - s - 1));
        const char *seg_end = next != NULL ? next : path_end;
        size_t len = (size_t)(seg_end - s - 1);
        int last = next == NULL;
        if ((len == 0 && !last) || (len == 1 && s[1] == '.') || (len == 2 && s[1] == '.' && s[2] == '.'))
            return moat_errf(err, errlen, "the path must be in normal form (no empty, '.' or '..' segment)");
        s = seg_end;
    }
    return 0;
}

int cb_url_parse(const char *url, size_t len, struct cb_url *out, char *err, size_t errlen)
{
    static const char scheme[] = "https://";
    const size_t slen = sizeof(scheme) - 1;
    const char *a, *end = url + len, *path;

    memset(out, 0, sizeof(*out));
    if (len > GW_CALLBACK_URL_MAX)
        return moat_errf(err, errlen, "a callback URL is at most %d bytes", GW_CALLBACK_URL_MAX);
    for (size_t i = 0; i < len; i++)
        if (url[i] <= 0x20 || url[i] >= 0x7f || url[i] == '\\')
            return moat_errf(err, errlen, "a callback URL may hold only printable ASCII without spaces or '\\'");
    if (len < slen || strncasecmp(url, scheme, slen) != 0)
        return moat_errf(err, errlen, "a callback URL must be https");
    if (memchr(url, '#', len) != NULL)
        return moat_errf(err, errlen, "a callback URL may not hold a fragment");
    a = url + slen;
    for (path = a; path < end && *path != '/' && *path != '?'; path++)
        ;
    if (parse_authority(a, (size_t)(path - a), out, err, errlen) != 0)
        return -1;
    if (path == end) {
        strcpy(out->path, "/");
        return 0;
    }
    if (*path == '?') { /* "https://h?q" is "https://h/?q" */
        out->path[0] = '/';
        memcpy(out->path + 1, path, (size_t)(end - path));
    } else {
        memcpy(out->path, path, (size_t)(end - path));
    }
    return check_path(out->path, strlen(out->path), err, errlen);
}

int cb_url_under(const struct cb_url *prefix, const struct cb_url *url)
{
    size_t n = strlen(prefix->path);
    char next;

    if (strcmp(prefix->host, url->host) != 0 || prefix->port != url->port || strncmp(prefix->path, url->path, n) != 0)
        return 0;
    next = url->path[n];
    return prefix->path[n - 1] == '/' || next == '\0' || next == '/' || next == '?';
}

/* ---------------------------------------------------------- addresses */

/* Is the first bits bits of a the same as those of net? */
static int in_net(const uint8_t *a, const uint8_t *net, unsigned bits)
{
    unsigned whole = bits / 8, rest = bits % 8;

    if (memcmp(a, net, whole) != 0)
        return 0;
    return rest == 0 || ((a[whole] ^ net[whole]) & (uint8_t)(0xff << (8 - rest))) == 0;
}

struct net_kind {
    uint8_t net[16];
    unsigned bits;
    enum cb_addr_kind kind;
};

/* IPv4 blocks that are not the public internet (RFC 6890 and friends). */
static const struct net_kind v4_nets[] = {
    {{0}, 8, CB_ADDR_UNSPECIFIED},          {{10}, 8, CB_ADDR_PRIVATE},
    {{100, 64}, 10, CB_ADDR_SHARED},        {{127}, 8, CB_ADDR_LOOPBACK},
    {{169, 254}, 16, CB_ADDR_LINK_LOCAL},   {{172, 16}, 12, CB_ADDR_PRIVATE},
    {{192, 0, 0}, 24, CB_ADDR_RESERVED},                                       /* IETF protocol assignments */
    {{192, 0, 2}, 24, CB_ADDR_RESERVED},                                       /* documentation */
    {{192, 88, 99}, 24, CB_ADDR_RESERVED},                                     /* 6to4 relay anycast */
    {{192, 168}, 16, CB_ADDR_PRIVATE},      {{198, 18}, 15, CB_ADDR_RESERVED}, /* benchmarking */
    {{198, 51, 100}, 24, CB_ADDR_RESERVED}, {{203, 0, 113}, 24, CB_ADDR_RESERVED},
    {{224}, 4, CB_ADDR_MULTICAST},          {{240}, 4, CB_ADDR_RESERVED}, /* and 255.255.255.255 */
};

/* IPv6 blocks, those that carry an IPv4 address apart. */
static const struct net_kind v6_nets[] = {
    {{0}, 128, CB_ADDR_UNSPECIFIED},
    {{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, 128, CB_ADDR_LOOPBACK},
    {{0}, 96, CB_ADDR_RESERVED},                                 /* IPv4-compatible (deprecated) */
    {{0x00, 0x64, 0xff, 0x9b, 0x00, 0x01}, 48, CB_ADDR_PRIVATE}, /* NAT64 local use */
    {{0x01, 0x00}, 64, CB_ADDR_RESERVED},                        /* discard only */
    {{0x20, 0x01, 0x0d, 0xb8}, 32, CB_ADDR_RESERVED},            /* documentation */
    {{0x20, 0x01}, 23, CB_ADDR_RESERVED},                        /* protocol assignments, Teredo */
    {{0xfc}, 7, CB_ADDR_PRIVATE},                                /* unique local */
    {{0xfe, 0x80}, 10, CB_ADDR_LINK_LOCAL},
    {{0xfe, 0xc0}, 10, CB_ADDR_PRIVATE}, /* site-local (deprecated) */
    {{0xff}, 8, CB_ADDR_MULTICAST},
};

static const uint8_t v4_mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
static const uint8_t nat64[12] = {0x00, 0x64, 0xff, 0x9b};

static enum cb_addr_kind kind_in(const struct net_kind *nets, size_t n, const uint8_t *a)
{
    for (size_t i = 0; i < n; i++)
        if (in_net(a, nets[i].net, nets[i].bits))
            return nets[i].kind;
    return CB_ADDR_PUBLIC;
}

enum cb_addr_kind cb_addr_kind_of(int family, const uint8_t *a)
{
    if (family == AF_INET)
        return kind_in(v4_nets, sizeof(v4_nets) / sizeof(v4_nets[0]), a);
    if (family != AF_INET6)
        return CB_ADDR_RESERVED;
    if (memcmp(a, v4_mapped, 12) == 0 || memcmp(a, nat64, 12) == 0)
        return cb_addr_kind_of(AF_INET, a + 12);
    if (a[0] == 0x20 && a[1] == 0x02) /* 6to4: 2002:AABB:CCDD::/48 */
        return cb_addr_kind_of(AF_INET, a + 2);
    return kind_in(v6_nets, sizeof(v6_nets) / sizeof(v6_nets[0]), a);
}

enum cb_addr_kind cb_addr_kind_of_sockaddr(const struct sockaddr *sa, size_t len)
{
    if (sa->sa_family == AF_INET && len >= sizeof(struct sockaddr_in))
        return cb_addr_kind_of(AF_INET, (const uint8_t *)&((const struct sockaddr_in *)(const void *)sa)->sin_addr);
    if (sa->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6))
        return cb_addr_kind_of(AF_INET6, ((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr.s6_addr);
    return CB_ADDR_RESERVED;
}

int cb_addr_allowed(enum cb_addr_kind kind, int allow_private)
{
    switch (kind) {
    case CB_ADDR_PUBLIC:
        return 1;
    case CB_ADDR_LOOPBACK:
    case CB_ADDR_PRIVATE:
    case CB_ADDR_LINK_LOCAL:
    case CB_ADDR_SHARED:
        return allow_private;
    default:
        return 0;
    }
}

const char *cb_addr_kind_name(enum cb_addr_kind kind)
{
    static const char *const names[] = {
        [CB_ADDR_PUBLIC] = "public",
        [CB_ADDR_LOOPBACK] = "loopback",
        [CB_ADDR_PRIVATE] = "private",
        [CB_ADDR_LINK_LOCAL] = "link-local",
        [CB_ADDR_SHARED] = "shared (carrier-grade NAT)",
        [CB_ADDR_UNSPECIFIED] = "unspecified",
        [CB_ADDR_MULTICAST] = "multicast",
        [CB_ADDR_RESERVED] = "reserved",
    };
    return (unsigned)kind < sizeof(names) / sizeof(names[0]) ? names[kind] : "unknown";
}

/* ------------------------------------------------------- a tenant's rules */

int cb_check_url(const struct cb_tenant_rules *rules, const char *url, size_t len, struct cb_url *out, char *err, size_t errlen)
{
    struct cb_url tmp = {0}, *u = out != NULL ? out : &tmp;
    size_t i;

    if (rules == NULL || rules->nallow == 0)
        return moat_errf(err, errlen,
                         "callbacks are not enabled for this tenant (its configuration lists no allowed URL prefixes)");
    if (cb_url_parse(url, len, u, err, errlen) != 0)
        return -1;
    for (i = 0; i < rules->nallow && !cb_url_under(&rules->allow[i], u); i++)
        ;
    if (i == rules->nallow)
        return moat_errf(err, errlen, "is not under any URL prefix this tenant's configuration allows");
    if (u->ip != 0) {
        uint8_t a[16];
        enum cb_addr_kind k;
        (void)inet_pton(u->ip == 4 ? AF_INET : AF_INET6, u->host, a);
        k = cb_addr_kind_of(u->ip == 4 ? AF_INET : AF_INET6, a);
        if (!cb_addr_allowed(k, rules->allow_private))
            return moat_errf(err, errlen, "names a %s address, which this tenant's configuration does not allow",
                             cb_addr_kind_name(k));
    }
    return 0;
}
