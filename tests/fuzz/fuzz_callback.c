/*
 * fuzz_callback.c - libFuzzer target for what decides where a Judge0
 * callback may go and what the callback sender takes from the workers
 * (G38 of tests/SECURITY-CHECKS.md): cb_url_parse and cb_url_under
 * (gateway/net/callback_policy.c) and cb_message_decode (gateway/callbacks/callback_wire.c).
 *
 * The first byte picks the parser, the rest is its input.  For every input:
 *
 *   - a refused URL or message gives a non-empty message;
 *   - an accepted URL keeps the promises of the normal form: https, no
 *     userinfo, fragment, backslash, space or control byte, a host of
 *     [a-z0-9.-] that inet_aton does not read as an address (or an
 *     address literal), a path from '/' without an empty, "." or ".."
 *     segment or an escaped '.', '/' or '\'; written out again as
 *     https://HOST:PORT/PATH it parses to the same parts (one spelling),
 *     and it is under itself;
 *   - an accepted message encodes back to the same bytes.
 *
 * Built as the real fuzzer with -DMOAT_FUZZ=ON, and always as part of
 * fuzz_callback_replay (see replay.c).  Violations abort().
 */
#include "fuzz_target.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "net/callback_policy.h"
#include "callbacks/callback_wire.h"

enum { MODE_URL, MODE_MESSAGE };

/* The path part (before any '?') has no empty, "." or ".." segment. */
static void path_in_normal_form(const char *p)
{
    const char *q = strchr(p, '?');
    size_t n = q != NULL ? (size_t)(q - p) : strlen(p);

    CHECK(p[0] == '/');
    for (size_t i = 0; i < n; i++) {
        if (p[i] != '/')
            continue;
        size_t j = i + 1;
        while (j < n && p[j] != '/')
            j++;
        size_t len = j - i - 1;
        CHECK(!(len == 0 && j < n));
        CHECK(!(len == 1 && p[i + 1] == '.'));
        CHECK(!(len == 2 && p[i + 1] == '.' && p[i + 2] == '.'));
    }
    for (const char *e = strchr(p, '%'); e != NULL; e = strchr(e + 1, '%'))
        CHECK(strncasecmp(e, "%2e", 3) != 0 && strncasecmp(e, "%2f", 3) != 0 && strncasecmp(e, "%5c", 3) != 0);
}

static void url(const uint8_t *data, size_t size)
{
    struct cb_url u, again;
    char err[256], text[GW_CALLBACK_URL_MAX + 512];
    struct in_addr v4;

    memset(err, 0, sizeof(err));
    if (cb_url_parse((const char *)data, size, &u, err, sizeof(err)) != 0) {
        CHECK(err[0] != '\0');
        return;
    }
    CHECK(size >= 8 && strncasecmp((const char *)data, "https://", 8) == 0);
    for (size_t i = 0; i < size; i++)
        CHECK(data[i] > 0x20 && data[i] < 0x7f && data[i] != '\\' && data[i] != '#');
    size_t authority = 8; /* no userinfo: no '@' before the path or query */
    while (authority < size && data[authority] != '/' && data[authority] != '?')
        CHECK(data[authority++] != '@');
    if (u.ip == 0) {
        CHECK(strspn(u.host, "abcdefghijklmnopqrstuvwxyz0123456789.-") == strlen(u.host));
        CHECK(inet_aton(u.host, &v4) == 0);
    }
    CHECK(u.port != 0);
    path_in_normal_form(u.path);
    CHECK(cb_url_under(&u, &u));
    snprintf(text, sizeof(text), "https://%s%s%s:%u%s", u.ip == 6 ? "[" : "", u.host, u.ip == 6 ? "]" : "", (unsigned)u.port,
             u.path);
    if (strlen(text) <= GW_CALLBACK_URL_MAX) {
        CHECK(cb_url_parse(text, strlen(text), &again, err, sizeof(err)) == 0);
        CHECK(strcmp(again.host, u.host) == 0 && again.port == u.port && again.ip == u.ip && strcmp(again.path, u.path) == 0);
    }
}

static void message(const uint8_t *data, size_t size)
{
    struct cb_message m;
    struct moat_buf b = {0};
    char err[256];

    memset(err, 0, sizeof(err));
    if (cb_message_decode(data, size, &m, err, sizeof(err)) != 0) {
        CHECK(err[0] != '\0');
        return;
    }
    CHECK(cb_message_encode(&b, m.tenant, m.token, m.url, m.body, m.body_len) == 0);
    CHECK(b.len == size && memcmp(b.data, data, size) == 0);
    moat_buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    if (data[0] % 2 == MODE_URL)
        url(data + 1, size - 1);
    else
        message(data + 1, size - 1);
    return 0;
}

static void add_url(fuzz_add_seed_fn *add, const char *s)
{
    uint8_t buf[512];
    size_t n = strlen(s);

    buf[0] = MODE_URL;
    memcpy(buf + 1, s, n);
    add(buf, n + 1, 0);
}

static void make_seeds(fuzz_add_seed_fn *add)
{
    static const char *const urls[] = {
        "https://hooks.example.com/judge/x?t=1",
        "HTTPS://A.COM:8443",
        "https://[::ffff:127.0.0.1]:9000/a/b",
        "https://127.0.0.1/x",
        "https://a.com/x/../y",
        "https://a.com@b.com/",
        "https://2130706433/",
        "https://a.com/%2e%2e/",
        "https://a.com?q",
        "http://a.com/",
    };
    struct moat_buf b = {0};

    for (size_t i = 0; i < sizeof(urls) / sizeof(urls[0]); i++)
        add_url(add, urls[i]);
    if (cb_message_encode(&b, "acme", "0f8fad5b-d9cb-469f-a165-70867728950e", "https://a.com/x", "{\"token\":1}", 11) == 0) {
        uint8_t *m = malloc(b.len + 1); /* the mode byte, then the message */
        if (m != NULL) {
            m[0] = MODE_MESSAGE;
            memcpy(m + 1, b.data, b.len);
            add(m, b.len + 1, 0);
            free(m);
        }
    }
    moat_buf_free(&b);
}

/* "https://" and then bytes from an alphabet that reaches every branch of the parser. */
static size_t random_input(uint8_t *buf, size_t cap, uint32_t (*rng)(void))
{
    static const char alphabet[] = "abcAZ019.-:/[]@?#%%2eEfF5c\\ x";
    size_t n = 9 + rng() % 48;

    if (cap < 64)
        return 0;
    buf[0] = MODE_URL;
    memcpy(buf + 1, "https://", 8);
    for (size_t i = 9; i < n; i++)
        buf[i] = (uint8_t)alphabet[rng() % (sizeof(alphabet) - 1)];
    return n;
}

const struct fuzz_target fuzz_target = {.make_seeds = make_seeds, .random_input = random_input};
