/*
 * test_gateway_proxies.c - proxies.c: trusted ranges, the PROXY v2
 * header, X-Forwarded-For's rightmost untrusted hop.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include "net/proxies.h"

static struct gw_addr addr(const char *s)
{
    struct gw_cidr c;

    assert_int_equal(gw_cidr_parse(s, &c), 0);
    return c.addr;
}

static int matches(const struct gw_cidr *list, size_t n, const char *s)
{
    struct gw_addr a = addr(s);

    return gw_cidr_match(list, n, &a);
}

static void test_cidr(void **state)
{
    static const char *const bad[] = {"",           "/8",          "10.0.0.0/", "10.0.0.0/33", "10.0.0.0/08", "10.1.0.0/8",
                                      "::1/129",    "fd00::1/8",   "localhost", "10.0.0.0/8 ", " 10.0.0.0/8", "10.0.0.0/-1",
                                      "1.2.3.4:80", "10.0.0.0/8/8"};
    struct gw_cidr list[3];
    struct gw_addr a;
    char text[INET6_ADDRSTRLEN];
    (void)state;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (gw_cidr_parse(bad[i], &list[0]) == 0)
            fail_msg("'%s' was taken for a range", bad[i]);
    assert_int_equal(gw_cidr_parse("10.0.0.0/8", &list[0]), 0);
    assert_int_equal(gw_cidr_parse("192.0.2.7", &list[1]), 0);
    assert_int_equal(gw_cidr_parse("fd00::/8", &list[2]), 0);
    assert_true(matches(list, 3, "10.255.1.2"));
    assert_false(matches(list, 3, "11.0.0.1"));
    assert_true(matches(list, 3, "192.0.2.7"));
    assert_false(matches(list, 3, "192.0.2.8"));
    assert_true(matches(list, 3, "fdff::1"));
    assert_false(matches(list, 3, "fe00::1"));
    /* an IPv4 range never matches an IPv6 address with the same bytes */
    assert_false(matches(list, 3, "::a00:1"));
    /* but does match the IPv4-mapped form, which is the same address */
    assert_true(matches(list, 3, "::ffff:10.0.0.1"));
    a = addr("::ffff:10.0.0.1");
    gw_addr_text(&a, text, sizeof(text));
    assert_string_equal(text, "10.0.0.1");
    assert_int_equal(gw_cidr_parse("0.0.0.0/0", &list[0]), 0);
    assert_true(matches(list, 1, "203.0.113.9"));
    assert_false(matches(list, 1, "2001:db8::1")); /* /0 of IPv4 is every IPv4 address, not every address */
}

static size_t v2(uint8_t *b, uint8_t cmd, uint8_t fam, const uint8_t *addrs, size_t alen)
{
    static const uint8_t sig[12] = {0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a};

    memcpy(b, sig, 12);
    b[12] = (uint8_t)(0x20 | cmd);
    b[13] = fam;
    b[14] = (uint8_t)(alen >> 8);
    b[15] = (uint8_t)alen;
    if (alen > 0)
        memcpy(b + 16, addrs, alen);
    return 16 + alen;
}

static void test_proxy_v2(void **state)
{
    uint8_t b[600], in4[12] = {203, 0, 113, 9, 10, 0, 0, 1, 0x1f, 0x90, 0x01, 0xbb}, in6[36] = {0x20, 0x01, 0x0d, 0xb8};
    struct sockaddr_storage src;
    socklen_t srclen;
    const char *why;
    size_t n;
    (void)state;

    n = v2(b, 1, 0x11, in4, sizeof(in4));
    memcpy(b + n, "\x16\x03\x01", 3); /* the TLS handshake that follows stays */
    assert_int_equal(gw_proxy_v2_parse(b, n + 3, &src, &srclen, &why), (long)n);
    assert_int_equal(srclen, sizeof(struct sockaddr_in));
    assert_int_equal(((struct sockaddr_in *)&src)->sin_addr.s_addr, htonl(0xcb007109));
    assert_int_equal(ntohs(((struct sockaddr_in *)&src)->sin_port), 8080);
    /* every prefix is "more to come", never an answer */
    for (size_t k = 0; k < n; k++)
        assert_int_equal(gw_proxy_v2_parse(b, k, &src, &srclen, &why), 0);
    n = v2(b, 1, 0x21, in6, sizeof(in6));
    assert_int_equal(gw_proxy_v2_parse(b, n, &src, &srclen, &why), (long)n);
    assert_int_equal(srclen, sizeof(struct sockaddr_in6));
    /* LOCAL: a health check; the connection's own address stands */
    n = v2(b, 0, 0x00, NULL, 0);
    assert_int_equal(gw_proxy_v2_parse(b, n, &src, &srclen, &why), (long)n);
    assert_int_equal(srclen, 0);
    /* malformed */
    assert_int_equal(gw_proxy_v2_parse((const uint8_t *)"GET / HTTP/1.1\r\n\r\n", 18, &src, &srclen, &why), -1);
    assert_int_equal(gw_proxy_v2_parse((const uint8_t *)"\x16\x03\x01\x02\x00", 5, &src, &srclen, &why), -1);
    n = v2(b, 1, 0x11, in4, 8); /* short IPv4 block */
    assert_int_equal(gw_proxy_v2_parse(b, n, &src, &srclen, &why), -1);
    n = v2(b, 2, 0x11, in4, sizeof(in4)); /* unknown command */
    assert_int_equal(gw_proxy_v2_parse(b, n, &src, &srclen, &why), -1);
    n = v2(b, 1, 0x11, in4, sizeof(in4));
    b[12] = 0x11; /* version 1 in a v2 header */
    assert_int_equal(gw_proxy_v2_parse(b, n, &src, &srclen, &why), -1);
    n = v2(b, 1, 0x11, in4, sizeof(in4));
    b[14] = 0xff; /* longer than any header we take: refused before waiting for it */
    assert_int_equal(gw_proxy_v2_parse(b, 16, &src, &srclen, &why), -1);
    assert_non_null(why);
}

static int xff(const char *value, const char *want)
{
    struct gw_cidr trusted[2];
    struct gw_addr c = addr("198.51.100.1"); /* the peer */
    char text[INET6_ADDRSTRLEN];
    int rc;

    assert_int_equal(gw_cidr_parse("10.0.0.0/8", &trusted[0]), 0);
    assert_int_equal(gw_cidr_parse("fd00::/8", &trusted[1]), 0);
    rc = gw_forwarded_client(value, strlen(value), trusted, 2, &c);
    gw_addr_text(&c, text, sizeof(text));
    if (strcmp(text, want) != 0)
        fail_msg("X-Forwarded-For '%s': client %s, want %s", value, text, want);
    return rc;
}

static void test_forwarded_for(void **state)
{
    (void)state;
    assert_int_equal(xff("203.0.113.9", "203.0.113.9"), 0);
    /* a client's own prepended hops are never believed past an untrusted one */
    assert_int_equal(xff("1.1.1.1, 203.0.113.9, 10.0.0.2", "203.0.113.9"), 0);
    assert_int_equal(xff("evil, 203.0.113.9,10.1.1.1 ,fd00::7", "203.0.113.9"), 0);
    assert_int_equal(xff("2001:db8::5", "2001:db8::5"), 0);
    /* all trusted: the leftmost */
    assert_int_equal(xff("10.0.0.9, 10.0.0.2", "10.0.0.9"), 0);
    /* nothing named: the peer stands */
    assert_int_equal(xff("", "198.51.100.1"), 1);
    /* garbage where a hop had to be read: the last trusted hop walked, or the peer */
    assert_int_equal(xff("203.0.113.9, junk", "198.51.100.1"), -1);
    assert_int_equal(xff("junk, 10.0.0.2", "10.0.0.2"), -1);
    assert_int_equal(xff("203.0.113.9:443", "198.51.100.1"), -1);
    assert_int_equal(xff("1.2.3.4,", "198.51.100.1"), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cidr),
        cmocka_unit_test(test_proxy_v2),
        cmocka_unit_test(test_forwarded_for),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
