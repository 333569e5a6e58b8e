/*
 * test_gateway_callback.c - Judge0 callbacks' pure parts: the address
 * classifier (IPv4, IPv6, the IPv6 forms that carry IPv4), the URL's strict
 * form and the prefix matcher (callback_policy.c), the worker-to-sender
 * message (callback_wire.c) and the signature a receiver checks.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include <openssl/hmac.h>

#include "net/callback_policy.h"
#include "callbacks/callback_wire.h"
#include "moat_hex.h"

/* ---------------------------------------------------------- addresses */

static enum cb_addr_kind kind(const char *text)
{
    uint8_t a[16];
    int family = strchr(text, ':') != NULL ? AF_INET6 : AF_INET;

    assert_int_equal(inet_pton(family, text, a), 1);
    return cb_addr_kind_of(family, a);
}

static void test_addr_v4(void **state)
{
    static const struct {
        const char *addr;
        enum cb_addr_kind kind;
    } rows[] = {
        {"8.8.8.8", CB_ADDR_PUBLIC},
        {"1.1.1.1", CB_ADDR_PUBLIC},
        {"127.0.0.1", CB_ADDR_LOOPBACK},
        {"127.255.255.254", CB_ADDR_LOOPBACK},
        {"10.1.2.3", CB_ADDR_PRIVATE},
        {"172.16.0.1", CB_ADDR_PRIVATE},
        {"172.31.255.255", CB_ADDR_PRIVATE},
        {"172.32.0.1", CB_ADDR_PUBLIC},
        {"172.15.255.255", CB_ADDR_PUBLIC},
        {"192.168.1.1", CB_ADDR_PRIVATE},
        {"169.254.169.254", CB_ADDR_LINK_LOCAL}, /* the cloud metadata service */
        {"100.64.0.1", CB_ADDR_SHARED},
        {"100.127.255.255", CB_ADDR_SHARED},
        {"100.128.0.1", CB_ADDR_PUBLIC},
        {"0.0.0.0", CB_ADDR_UNSPECIFIED},
        {"0.1.2.3", CB_ADDR_UNSPECIFIED},
        {"224.0.0.1", CB_ADDR_MULTICAST},
        {"239.255.255.250", CB_ADDR_MULTICAST},
        {"255.255.255.255", CB_ADDR_RESERVED},
        {"240.0.0.1", CB_ADDR_RESERVED},
        {"192.0.2.1", CB_ADDR_RESERVED},
        {"198.18.0.1", CB_ADDR_RESERVED},
        {"198.19.255.255", CB_ADDR_RESERVED},
        {"198.20.0.1", CB_ADDR_PUBLIC},
    };
    (void)state;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        if (kind(rows[i].addr) != rows[i].kind)
            fail_msg("%s: %s, expected %s", rows[i].addr, cb_addr_kind_name(kind(rows[i].addr)), cb_addr_kind_name(rows[i].kind));
    }
}

static void test_addr_v6(void **state)
{
    static const struct {
        const char *addr;
        enum cb_addr_kind kind;
    } rows[] = {
        {"2606:4700:4700::1111", CB_ADDR_PUBLIC},
        {"::1", CB_ADDR_LOOPBACK},
        {"::", CB_ADDR_UNSPECIFIED},
        {"fe80::1", CB_ADDR_LINK_LOCAL},
        {"febf::1", CB_ADDR_LINK_LOCAL},
        {"fec0::1", CB_ADDR_PRIVATE},
        {"fc00::1", CB_ADDR_PRIVATE},
        {"fd12:3456::1", CB_ADDR_PRIVATE},
        {"ff02::1", CB_ADDR_MULTICAST},
        {"2001:db8::1", CB_ADDR_RESERVED},
        {"2001::1", CB_ADDR_RESERVED}, /* Teredo */
        {"100::1", CB_ADDR_RESERVED},
        {"::127.0.0.1", CB_ADDR_RESERVED}, /* IPv4-compatible */
        /* IPv4 carried in IPv6: judged by the IPv4 address */
        {"::ffff:127.0.0.1", CB_ADDR_LOOPBACK},
        {"::ffff:10.0.0.1", CB_ADDR_PRIVATE},
        {"::ffff:169.254.169.254", CB_ADDR_LINK_LOCAL},
        {"::ffff:8.8.8.8", CB_ADDR_PUBLIC},
        {"64:ff9b::7f00:1", CB_ADDR_LOOPBACK},
        {"64:ff9b::808:808", CB_ADDR_PUBLIC},
        {"64:ff9b:1::1", CB_ADDR_PRIVATE},
        {"2002:7f00:1::1", CB_ADDR_LOOPBACK},
        {"2002:c0a8:101::1", CB_ADDR_PRIVATE},
        {"2002:808:808::1", CB_ADDR_PUBLIC},
    };
    (void)state;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        if (kind(rows[i].addr) != rows[i].kind)
            fail_msg("%s: %s, expected %s", rows[i].addr, cb_addr_kind_name(kind(rows[i].addr)), cb_addr_kind_name(rows[i].kind));
    }
}

static void test_addr_allowed(void **state)
{
    (void)state;
    assert_true(cb_addr_allowed(CB_ADDR_PUBLIC, 0));
    assert_false(cb_addr_allowed(CB_ADDR_LOOPBACK, 0));
    assert_false(cb_addr_allowed(CB_ADDR_PRIVATE, 0));
    assert_false(cb_addr_allowed(CB_ADDR_LINK_LOCAL, 0));
    assert_false(cb_addr_allowed(CB_ADDR_SHARED, 0));
    assert_true(cb_addr_allowed(CB_ADDR_LOOPBACK, 1));
    assert_true(cb_addr_allowed(CB_ADDR_PRIVATE, 1));
    /* never, whatever the tenant says */
    assert_false(cb_addr_allowed(CB_ADDR_UNSPECIFIED, 1));
    assert_false(cb_addr_allowed(CB_ADDR_MULTICAST, 1));
    assert_false(cb_addr_allowed(CB_ADDR_RESERVED, 1));
}

static void test_addr_sockaddr(void **state)
{
    struct sockaddr_in in4 = {.sin_family = AF_INET};
    struct sockaddr_in6 in6 = {.sin6_family = AF_INET6};
    struct sockaddr un = {.sa_family = AF_UNIX};

    (void)state;
    inet_pton(AF_INET, "127.0.0.1", &in4.sin_addr);
    inet_pton(AF_INET6, "::ffff:192.168.0.1", &in6.sin6_addr);
    assert_int_equal(cb_addr_kind_of_sockaddr((struct sockaddr *)&in4, sizeof(in4)), CB_ADDR_LOOPBACK);
    assert_int_equal(cb_addr_kind_of_sockaddr((struct sockaddr *)&in6, sizeof(in6)), CB_ADDR_PRIVATE);
    assert_int_equal(cb_addr_kind_of_sockaddr((struct sockaddr *)&in4, 4), CB_ADDR_RESERVED); /* too short */
    assert_int_equal(cb_addr_kind_of_sockaddr(&un, sizeof(un)), CB_ADDR_RESERVED);
}

/* ---------------------------------------------------------------- URLs */

static int parses(const char *url)
{
    struct cb_url u;
    char err[256];

    return cb_url_parse(url, strlen(url), &u, err, sizeof(err)) == 0;
}

static void test_url_form(void **state)
{
    static const char *const good[] = {
        "https://hooks.example.com/judge/",
        "HTTPS://Hooks.Example.COM/judge/x?token=1&b=%41",
        "https://a.com",
        "https://a.com:8443/x",
        "https://a.com?x=1",
        "https://127.0.0.1:9000/x",
        "https://[::1]:9000/x",
        "https://[2001:DB8::1]/x",
        "https://xn--bcher-kva.example/",
        "https://a.com/x/",
        "https://a.com/a.b/c..d/.e",
    };
    static const char *const bad[] = {
        "http://a.com/x", /* not https */
        "ftp://a.com/",
        "https:/a.com/",
        "https://",            /* no host */
        "https://user@a.com/", /* userinfo */
        "https://a.com@evil.net/",
        "https://a.com:/x", /* empty port */
        "https://a.com:0/x",
        "https://a.com:65536/x",
        "https://a.com:80a/x",
        "https://a.com/x#frag",
        "https://a.com/x y",
        "https://a.com/x\\y",
        "https://a..com/",
        "https://.a.com/",
        "https://a.com./", /* trailing dot: a second spelling of the host */
        "https://-a.com/",
        "https://a_b.com/",
        "https://2130706433/", /* 127.0.0.1 to inet_aton */
        "https://0x7f.1/",
        "https://0x5/", /* found by fuzz_callback: 0.0.0.5 to inet_aton */
        "https://0x7f000001/",
        "https://127.1/",
        "https://017700000001/",
        "https://[::1/",
        "https://[fe80::1%25eth0]/", /* zone */
        "https://[::1]x/",
        "https://a.com/x/../y",
        "https://a.com/x/..",
        "https://a.com/./x",
        "https://a.com//x",
        "https://a.com/x//y",
        "https://a.com/x/%2e%2e/y",
        "https://a.com/x%2Fy",
        "https://a.com/x%5cy",
        "https://a.com/x%zz",
        "https://a.com/x%4",
        "https://a.com/\xc3\xa9",
    };
    (void)state;
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        if (!parses(good[i]))
            fail_msg("refused: %s", good[i]);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (parses(bad[i]))
            fail_msg("accepted: %s", bad[i]);
}

static void test_url_parts(void **state)
{
    struct cb_url u;
    char err[256];

    (void)state;
    assert_int_equal(cb_url_parse("HTTPS://Hooks.Example.COM:8443/J?x=1", 36, &u, err, sizeof(err)), 0);
    assert_string_equal(u.host, "hooks.example.com");
    assert_int_equal(u.port, 8443);
    assert_int_equal(u.ip, 0);
    assert_string_equal(u.path, "/J?x=1"); /* the path keeps its case */
    assert_int_equal(cb_url_parse("https://[::FFFF:7f00:1]", 23, &u, err, sizeof(err)), 0);
    assert_string_equal(u.host, "::ffff:7f00:1");
    assert_int_equal(u.ip, 6);
    assert_int_equal(u.port, 443);
    assert_string_equal(u.path, "/");
    assert_int_equal(cb_url_parse("https://a.com?q", 15, &u, err, sizeof(err)), 0);
    assert_string_equal(u.path, "/?q");
}

static int under(const char *prefix, const char *url)
{
    struct cb_url p, u;
    char err[256];

    assert_int_equal(cb_url_parse(prefix, strlen(prefix), &p, err, sizeof(err)), 0);
    if (cb_url_parse(url, strlen(url), &u, err, sizeof(err)) != 0)
        return 0;
    return cb_url_under(&p, &u);
}

static void test_prefix(void **state)
{
    (void)state;
    assert_true(under("https://a.com/x", "https://a.com/x"));
    assert_true(under("https://a.com/x", "https://a.com/x/y"));
    assert_true(under("https://a.com/x", "https://a.com/x?t=1"));
    assert_true(under("https://a.com/x/", "https://a.com/x/y"));
    assert_true(under("https://A.com/x", "https://a.COM/x/y"));
    assert_true(under("https://a.com", "https://a.com/anything"));
    assert_true(under("https://a.com:443/x", "https://a.com/x"));
    assert_false(under("https://a.com/x", "https://a.com/xyz"));
    assert_false(under("https://a.com/x/", "https://a.com/x"));
    assert_false(under("https://a.com/x", "https://a.com.evil.net/x"));
    assert_false(under("https://a.com/x", "https://evil.net/https://a.com/x"));
    assert_false(under("https://a.com/x", "https://a.com@evil.net/x"));
    assert_false(under("https://a.com/x", "https://a.com/xyz/../"));
    assert_false(under("https://a.com/x", "https://a.com/x/../y"));
    assert_false(under("https://a.com/x", "https://a.com/x/%2e%2e/y"));
    assert_false(under("https://a.com/x", "https://a.com:8443/x"));
    assert_false(under("https://a.com/x", "https://b.a.com/x"));
    assert_false(under("https://a.com/X", "https://a.com/x"));
}

static void test_check_url(void **state)
{
    struct cb_url allow[2];
    struct cb_tenant_rules r = {allow, 2, 0}, none = {NULL, 0, 0};
    char err[256];

    (void)state;
    assert_int_equal(cb_url_parse("https://hooks.example.com/judge/", 32, &allow[0], err, sizeof(err)), 0);
    assert_int_equal(cb_url_parse("https://127.0.0.1:9000/", 23, &allow[1], err, sizeof(err)), 0);
#define CHECK(rules, url) cb_check_url(rules, url, strlen(url), NULL, err, sizeof(err))
    assert_int_equal(CHECK(&r, "https://hooks.example.com/judge/a"), 0);
    assert_int_equal(CHECK(&none, "https://hooks.example.com/judge/a"), -1);
    assert_non_null(strstr(err, "not enabled"));
    assert_int_equal(CHECK(&r, "http://hooks.example.com/judge/a"), -1);
    assert_non_null(strstr(err, "https"));
    assert_int_equal(CHECK(&r, "https://hooks.example.com/other"), -1);
    assert_non_null(strstr(err, "prefix"));
    /* a loopback literal under a listed prefix: only with allow_private */
    assert_int_equal(CHECK(&r, "https://127.0.0.1:9000/x"), -1);
    assert_non_null(strstr(err, "loopback"));
    r.allow_private = 1;
    assert_int_equal(CHECK(&r, "https://127.0.0.1:9000/x"), 0);
#undef CHECK
}

/* ---------------------------------------------------------------- wire */

static const char token[] = "0f8fad5b-d9cb-469f-a165-70867728950e";

static void test_wire_round_trip(void **state)
{
    struct moat_buf b = {0};
    struct cb_message m;
    char err[128];

    (void)state;
    assert_int_equal(cb_message_encode(&b, "acme", token, "https://a.com/x", "{\"a\":1}\0z", 9), 0);
    assert_int_equal(cb_message_decode(b.data, b.len, &m, err, sizeof(err)), 0);
    assert_string_equal(m.tenant, "acme");
    assert_string_equal(m.token, token);
    assert_string_equal(m.url, "https://a.com/x");
    assert_int_equal(m.body_len, 9);
    assert_memory_equal(m.body, "{\"a\":1}\0z", 9);
    /* every truncation, and a byte too many, is refused */
    for (size_t n = 0; n < b.len; n++)
        assert_int_equal(cb_message_decode(b.data, n, &m, err, sizeof(err)), -1);
    assert_int_equal(moat_buf_append(&b, "x", 1), 0);
    assert_int_equal(cb_message_decode(b.data, b.len, &m, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "left over"));
    moat_buf_free(&b);
}

static void test_wire_strict(void **state)
{
    struct moat_buf b = {0};
    struct cb_message m;
    char err[128], long_tenant[GW_MAX_TENANT_NAME + 2];

    (void)state;
    memset(long_tenant, 't', sizeof(long_tenant) - 1);
    long_tenant[sizeof(long_tenant) - 1] = '\0';
    assert_int_equal(cb_message_encode(&b, long_tenant, token, "https://a.com/", "", 0), -1);
    assert_int_equal(cb_message_encode(&b, "", token, "https://a.com/", "", 0), -1);
    assert_int_equal(cb_message_encode(&b, "a", "not-a-token", "https://a.com/", "", 0), -1);
    assert_int_equal(cb_message_encode(&b, "a", token, "", "", 0), -1);
    assert_int_equal(cb_message_encode(&b, "a", token, "https://a.com/", "", GW_CALLBACK_MESSAGE_MAX), -1);
    /* a good message with its bytes changed */
    assert_int_equal(cb_message_encode(&b, "acme", token, "https://a.com/x", "{}", 2), 0);
    b.data[0] = 2; /* unknown type */
    assert_int_equal(cb_message_decode(b.data, b.len, &m, err, sizeof(err)), -1);
    b.data[0] = CB_MSG_CALLBACK;
    b.data[5] = '\0'; /* a NUL in the tenant */
    assert_int_equal(cb_message_decode(b.data, b.len, &m, err, sizeof(err)), -1);
    b.data[5] = 'a';
    b.data[1 + 4 + 4 + 4 + 3] = 'X'; /* the token is not lower-case hex */
    assert_int_equal(cb_message_decode(b.data, b.len, &m, err, sizeof(err)), -1);
    b.data[1 + 4 + 4 + 4 + 3] = 'f';
    assert_int_equal(cb_message_decode(b.data, b.len, &m, err, sizeof(err)), 0);
    b.data[1] = 0xff; /* a tenant length past the message */
    assert_int_equal(cb_message_decode(b.data, b.len, &m, err, sizeof(err)), -1);
    moat_buf_free(&b);
}

/* The signature, against OpenSSL's one-shot HMAC over the text a receiver builds. */
static void test_signature(void **state)
{
    static const uint8_t secret[] = "0123456789abcdef0123456789abcdef";
    static const char body[] = "{\"token\":\"x\"}";
    char sig[CB_SIGNATURE_MAX], want[CB_SIGNATURE_MAX], hex[65];
    uint8_t md[32];
    unsigned mdlen = 0;
    const char signed_text[] = "1700000000.{\"token\":\"x\"}";

    (void)state;
    assert_int_equal(cb_signature(secret, sizeof(secret) - 1, 1700000000LL, body, sizeof(body) - 1, sig), 0);
    assert_non_null(
        HMAC(EVP_sha256(), secret, (int)sizeof(secret) - 1, (const uint8_t *)signed_text, sizeof(signed_text) - 1, md, &mdlen));
    assert_int_equal(mdlen, 32);
    moat_hex_encode(md, 32, hex);
    snprintf(want, sizeof(want), "t=1700000000,v1=%s", hex);
    assert_string_equal(sig, want);
    /* another body, another time, another secret: another signature */
    assert_int_equal(cb_signature(secret, sizeof(secret) - 1, 1700000001LL, body, sizeof(body) - 1, want), 0);
    assert_string_not_equal(sig + 14, want + 14);
    assert_int_equal(cb_signature(secret, sizeof(secret) - 2, 1700000000LL, body, sizeof(body) - 1, want), 0);
    assert_string_not_equal(sig, want);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_addr_v4),       cmocka_unit_test(test_addr_v6),   cmocka_unit_test(test_addr_allowed),
        cmocka_unit_test(test_addr_sockaddr), cmocka_unit_test(test_url_form),  cmocka_unit_test(test_url_parts),
        cmocka_unit_test(test_prefix),        cmocka_unit_test(test_check_url), cmocka_unit_test(test_wire_round_trip),
        cmocka_unit_test(test_wire_strict),   cmocka_unit_test(test_signature),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
