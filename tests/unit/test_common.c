/*
 * test_common.c - the shared primitives in backend/common/ (libmoat_common):
 * hex, base64 (strictness over OpenSSL), UTF-8 (edge cases, and agreement
 * with jansson over every short byte string), the JSON escaper (byte for
 * byte against jansson's json_dumps), the I/O loops (a socketpair, a small
 * send buffer and a timer signal for short writes and EINTR), descriptor
 * passing, the growable buffer and the log lines.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <jansson.h>
#include <openssl/evp.h>

#include "log.h"
#include "moat_base64.h"
#include "moat_buf.h"
#include "moat_hex.h"
#include "moat_io.h"
#include "moat_json_escape.h"
#include "moat_utf8.h"

/* A small deterministic generator: failures reproduce. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

/* ---- hex ------------------------------------------------------------------ */

static void test_hex_round_trip(void **state)
{
    uint8_t in[64], out[64];
    char text[129];

    (void)state;
    for (size_t len = 0; len <= sizeof(in); len++) {
        for (size_t i = 0; i < len; i++)
            in[i] = (uint8_t)rnd();
        moat_hex_encode(in, len, text);
        assert_int_equal(strlen(text), 2 * len);
        assert_true(moat_hex_valid(text, 2 * len, MOAT_HEX_LOWER));
        memset(out, 0xee, sizeof(out));
        assert_int_equal(moat_hex_decode(text, 2 * len, out, MOAT_HEX_LOWER), 0);
        assert_memory_equal(in, out, len);
        assert_int_equal(moat_hex_decode(text, 2 * len, out, MOAT_HEX_ANY_CASE), 0);
        assert_memory_equal(in, out, len);
    }
    moat_hex_encode((const uint8_t *)"\x00\x0a\xff\x7f", 4, text);
    assert_string_equal(text, "000aff7f");
}

static void test_hex_strict(void **state)
{
    uint8_t out[4] = {1, 2, 3, 4};

    (void)state;
    /* uppercase only with MOAT_HEX_ANY_CASE */
    assert_int_equal(moat_hex_decode("0AFF", 4, out, MOAT_HEX_LOWER), -1);
    assert_int_equal(moat_hex_decode("0AFF", 4, out, MOAT_HEX_ANY_CASE), 0);
    assert_int_equal(out[0], 0x0a);
    assert_int_equal(out[1], 0xff);
    /* a refused text leaves out as it was */
    memcpy(out, "\x01\x02\x03\x04", 4);
    const char *bad[] = {"0af", "0afg", " 0af", "0x0a", "0a f", "\xc3\xa9", "0a\0f"};
    const size_t badlen[] = {3, 4, 4, 4, 4, 2, 4};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(moat_hex_decode(bad[i], badlen[i], out, MOAT_HEX_ANY_CASE), -1);
        assert_memory_equal(out, "\x01\x02\x03\x04", 4);
    }
    assert_true(moat_hex_valid("", 0, MOAT_HEX_LOWER));
    assert_false(moat_hex_valid("abcG", 4, MOAT_HEX_ANY_CASE));
    for (int c = 0; c < 256; c++) {
        int want = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        int upper = c >= 'A' && c <= 'F' ? c - 'A' + 10 : want;
        assert_int_equal(moat_hex_digit(c, MOAT_HEX_LOWER), want);
        assert_int_equal(moat_hex_digit(c, MOAT_HEX_ANY_CASE), upper);
    }
}

/* ---- base64 --------------------------------------------------------------- */

static void test_base64_vectors(void **state)
{
    /* RFC 4648 section 10 */
    static const char *const plain[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
    static const char *const coded[] = {"", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
    char text[16];
    uint8_t out[16];
    size_t n;

    (void)state;
    for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++) {
        assert_int_equal(moat_base64_encode(plain[i], strlen(plain[i]), text), strlen(coded[i]));
        assert_string_equal(text, coded[i]);
        assert_int_equal(MOAT_BASE64_ENCODED_LEN(strlen(plain[i])), strlen(coded[i]));
        assert_int_equal(moat_base64_decode(coded[i], strlen(coded[i]), out, &n), 0);
        assert_int_equal(n, strlen(plain[i]));
        assert_memory_equal(out, plain[i], n);
    }
}

/* The rules moat_base64.h states, written independently of OpenSSL. */
static int canonical_base64(const char *s, size_t len)
{
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t pad = 0;

    if (len % 4 != 0)
        return 0;
    while (pad < len && pad < 3 && s[len - 1 - pad] == '=')
        pad++;
    if (pad > 2)
        return 0;
    for (size_t i = 0; i < len - pad; i++)
        if (s[i] == '\0' || strchr(abc, s[i]) == NULL)
            return 0;
    if (pad == 0)
        return 1;
    int last = (int)(strchr(abc, s[len - pad - 1]) - abc);
    return pad == 1 ? (last & 0x3) == 0 : (last & 0xf) == 0;
}

static void test_base64_strict(void **state)
{
    static const char *const bad[] = {"Zg=",       "Zg",          "Z",         " Zg==",     "Zg== ",     "Zg==\n",    "Zm9v\nYmFy",
                                      "Zm9v YmFy", "Zh==",        "Zm9=",      "Q===",      "====",      "Zg==Zg==",  "Zm=v",
                                      "Zm9v-_8=",  "Zm9v\x80mFy", "Zm9vYmFy=", "=Zm9vYmFy", "Zm9vYmF=y", "Zm9vYm\0y", "\tZm9vYmFy"};
    uint8_t out[64];
    size_t n = 12345;

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        size_t len = i == 19 ? 8 : strlen(bad[i]);
        assert_int_equal(canonical_base64(bad[i], len), 0);
        if (moat_base64_decode(bad[i], len, out, &n) != -1)
            fail_msg("accepted \"%s\"", bad[i]);
        assert_int_equal(n, 12345);
    }
    /* mutations of valid texts: accepted exactly when the rules say so */
    static const char pool[] = "AZaz09+/=Qgw8 \n-_.\x80";
    for (int round = 0; round < 20000; round++) {
        uint8_t bytes[12];
        char text[32];
        size_t blen = rnd() % sizeof(bytes);
        for (size_t i = 0; i < blen; i++)
            bytes[i] = (uint8_t)rnd();
        size_t len = moat_base64_encode(bytes, blen, text);
        for (int k = rnd() % 3; k > 0 && len > 0; k--)
            text[rnd() % len] = pool[rnd() % (sizeof(pool) - 1)];
        if (rnd() % 4 == 0 && len > 0)
            len -= 1 + rnd() % (len < 3 ? len : 3);
        int ok = moat_base64_decode(text, len, out, &n) == 0;
        if (ok != canonical_base64(text, len))
            fail_msg("\"%.*s\": decoder %d, rules %d", (int)len, text, ok, !ok);
        if (ok) {
            char again[32];
            assert_int_equal(moat_base64_encode(out, n, again), len);
            assert_memory_equal(again, text, len);
        }
    }
}

static void test_base64_long(void **state)
{
    /* longer than one EVP chunk each way (768 KiB of bytes, 1 MiB of text) */
    size_t len = 2u * 1024 * 1024 + 1;
    uint8_t *in = malloc(len), *out = malloc(MOAT_BASE64_DECODED_MAX(MOAT_BASE64_ENCODED_LEN(len)));
    char *text = malloc(MOAT_BASE64_ENCODED_LEN(len) + 1), *ref = malloc(MOAT_BASE64_ENCODED_LEN(len) + 1);
    size_t n;

    (void)state;
    assert_non_null(in);
    assert_non_null(out);
    assert_non_null(text);
    assert_non_null(ref);
    for (size_t i = 0; i < len; i++)
        in[i] = (uint8_t)rnd();
    size_t tlen = moat_base64_encode(in, len, text);
    assert_int_equal(tlen, MOAT_BASE64_ENCODED_LEN(len));
    assert_int_equal(EVP_EncodeBlock((unsigned char *)ref, in, (int)len), (int)tlen);
    assert_memory_equal(text, ref, tlen + 1);
    assert_int_equal(moat_base64_decode(text, tlen, out, &n), 0);
    assert_int_equal(n, len);
    assert_memory_equal(in, out, len);
    /* padding at the end of an inner chunk is not the end of the text */
    size_t chunk = 4u * 256 * 1024;
    char keep[2] = {text[chunk - 2], text[chunk - 1]};
    text[chunk - 2] = text[chunk - 1] = '=';
    assert_int_equal(moat_base64_decode(text, tlen, out, &n), -1);
    text[chunk - 2] = keep[0];
    text[chunk - 1] = keep[1];
    text[tlen - 7] = '\n';
    assert_int_equal(moat_base64_decode(text, tlen, out, &n), -1);
    free(in);
    free(out);
    free(text);
    free(ref);
}

/* ---- UTF-8 ---------------------------------------------------------------- */

struct utf8_case {
    const char *s;
    size_t len;
    uint32_t cp;    /* valid: the code point of the first sequence */
    size_t bad_len; /* invalid: the maximal ill-formed subpart */
};

#define OK(s, cp)                                                                                                                  \
    {                                                                                                                              \
        s, sizeof(s) - 1, cp, 0                                                                                                    \
    }
#define BAD(s, n)                                                                                                                  \
    {                                                                                                                              \
        s, sizeof(s) - 1, 0, n                                                                                                     \
    }

static void test_utf8_edges(void **state)
{
    static const struct utf8_case cases[] = {
        OK("\0", 0),
        OK("A", 0x41),
        OK("\x7f", 0x7f),
        OK("\xc2\x80", 0x80),
        OK("\xdf\xbf", 0x7ff),
        OK("\xe0\xa0\x80", 0x800),
        OK("\xed\x9f\xbf", 0xd7ff),
        OK("\xee\x80\x80", 0xe000),
        OK("\xef\xbf\xbf", 0xffff),
        OK("\xf0\x90\x80\x80", 0x10000),
        OK("\xf0\x9f\x98\x80", 0x1f600),
        OK("\xf4\x8f\xbf\xbf", 0x10ffff),
        /* overlong forms */
        BAD("\xc0\x80", 1),
        BAD("\xc1\xbf", 1),
        BAD("\xe0\x80\x80", 1),
        BAD("\xe0\x9f\xbf", 1),
        BAD("\xf0\x80\x80\x80", 1),
        BAD("\xf0\x8f\xbf\xbf", 1),
        /* surrogates */
        BAD("\xed\xa0\x80", 1),
        BAD("\xed\xbf\xbf", 1),
        /* past U+10FFFF */
        BAD("\xf4\x90\x80\x80", 1),
        BAD("\xf5\x80\x80\x80", 1),
        BAD("\xf7\xbf\xbf\xbf", 1),
        BAD("\xff", 1),
        BAD("\xfe", 1),
        /* lone continuation bytes */
        BAD("\x80", 1),
        BAD("\xbf", 1),
        /* truncated, at the end and before other bytes */
        BAD("\xc3", 1),
        BAD("\xe2\x82", 2),
        BAD("\xf0\x9f\x98", 3),
        BAD("\xc3\x41", 1),
        BAD("\xe2\x82\x41", 2),
        BAD("\xf0\x9f\x98\x41", 3),
        BAD("\xe2\xc3\xa9", 1),
    };
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct utf8_case *c = &cases[i];
        uint32_t cp = 0xdeadbeef;
        size_t bad = 99;
        size_t n = moat_utf8_decode((const uint8_t *)c->s, c->len, &cp, &bad);
        if (c->bad_len == 0) {
            assert_int_equal(n, c->len);
            assert_int_equal(cp, c->cp);
            assert_true(moat_utf8_valid((const uint8_t *)c->s, c->len));
        } else {
            if (n != 0 || bad != c->bad_len)
                fail_msg("case %zu: length %zu, maximal subpart %zu (want %zu)", i, n, bad, c->bad_len);
            assert_false(moat_utf8_valid((const uint8_t *)c->s, c->len));
        }
    }
    assert_true(moat_utf8_valid((const uint8_t *)"", 0));
    assert_true(moat_utf8_valid((const uint8_t *)"caf\xc3\xa9 \xe4\xb8\xad\xf0\x9f\x98\x80", 14));
    assert_false(moat_utf8_valid((const uint8_t *)"caf\xc3\xa9 \xe4\xb8", 8));
}

static int jansson_valid(const uint8_t *s, size_t len)
{
    json_t *j = json_stringn((const char *)s, len);
    json_decref(j);
    return j != NULL;
}

static void check_against_jansson(const uint8_t *s, size_t len)
{
    if (moat_utf8_valid(s, len) != jansson_valid(s, len))
        fail_msg("%zu bytes %02x %02x %02x %02x: moat %d, jansson %d", len, len > 0 ? s[0] : 0, len > 1 ? s[1] : 0,
                 len > 2 ? s[2] : 0, len > 3 ? s[3] : 0, moat_utf8_valid(s, len), jansson_valid(s, len));
}

static void test_utf8_vs_jansson(void **state)
{
    uint8_t s[4];

    (void)state;
    /* every string of one and two bytes, every three-byte string with a
     * multi-byte lead, and four-byte strings around the edges */
    for (unsigned a = 0; a < 256; a++) {
        s[0] = (uint8_t)a;
        check_against_jansson(s, 1);
        for (unsigned b = 0; b < 256; b++) {
            s[1] = (uint8_t)b;
            check_against_jansson(s, 2);
            if (a < 0xc0)
                continue;
            for (unsigned c = 0; c < 256; c++) {
                s[2] = (uint8_t)c;
                check_against_jansson(s, 3);
            }
        }
    }
    static const uint8_t third[] = {0x41, 0x7f, 0x80, 0x8f, 0x90, 0xbf, 0xc0};
    for (unsigned a = 0xf0; a <= 0xf5; a++)
        for (unsigned b = 0; b < 256; b++)
            for (size_t c = 0; c < sizeof(third); c++)
                for (unsigned d = 0; d < 256; d++) {
                    s[0] = (uint8_t)a;
                    s[1] = (uint8_t)b;
                    s[2] = third[c];
                    s[3] = (uint8_t)d;
                    check_against_jansson(s, 4);
                }
}

/* ---- JSON escaping -------------------------------------------------------- */

/* jansson's escaped text rewritten to the escaper's documented choices:
 * controls as \u00xx in lowercase, DEL escaped. */
static size_t normalise(const char *in, char *out)
{
    size_t o = 0;
    for (size_t i = 0; in[i]; i++) {
        unsigned char c = (unsigned char)in[i];
        if (c == 0x7f) {
            memcpy(out + o, "\\u007f", 6);
            o += 6;
        } else if (c != '\\') {
            out[o++] = (char)c;
        } else {
            const char *shortc = strchr("bfnrt", in[i + 1]);
            if (shortc != NULL && in[i + 1] != '\0') {
                static const char *const esc[] = {"\\u0008", "\\u000c", "\\u000a", "\\u000d", "\\u0009"};
                memcpy(out + o, esc[shortc - "bfnrt"], 6);
                o += 6;
                i++;
            } else if (in[i + 1] == 'u' && strncmp(in + i + 2, "00", 2) == 0 && (in[i + 4] == '0' || in[i + 4] == '1')) {
                for (int k = 0; k < 6; k++)
                    out[o++] = (char)(k >= 4 && in[i + k] >= 'A' && in[i + k] <= 'F' ? in[i + k] + 32 : in[i + k]);
                i += 5;
            } else {
                out[o++] = '\\';
                out[o++] = in[++i];
            }
        }
    }
    out[o] = '\0';
    return o;
}

/* Escapes s both ways and compares; returns the escaper's result. */
static int escape_vs_jansson(const char *s, size_t len, unsigned flags)
{
    char mine[1024], ref[4096];
    size_t off = 1;

    mine[0] = '"';
    int rc = moat_json_escape(mine, sizeof(mine) - 2, &off, s, len, flags);
    json_t *j = json_stringn(s, len);
    if (j == NULL) {
        /* ill-formed UTF-8: both refuse */
        assert_int_equal(rc, -1);
        assert_int_equal(off, 1);
        return rc;
    }
    if (rc != 0) {
        json_decref(j);
        return rc;
    }
    mine[off++] = '"';
    mine[off] = '\0';
    char *dump = json_dumps(j, JSON_ENCODE_ANY | ((flags & MOAT_JSON_UTF8_RAW) ? 0 : JSON_ENSURE_ASCII));
    assert_non_null(dump);
    assert_true(strlen(dump) < sizeof(ref) / 4);
    normalise(dump, ref);
    if (strcmp(mine, ref) != 0)
        fail_msg("escaper %s\n  jansson %s", mine, ref);
    /* and it reads back as the same bytes */
    json_error_t err;
    json_t *back = json_loadb(mine, off, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
    assert_non_null(back);
    assert_int_equal(json_string_length(back), len);
    assert_memory_equal(json_string_value(back), s, len);
    if (!(flags & MOAT_JSON_UTF8_RAW))
        for (size_t i = 0; i < off; i++)
            assert_true((unsigned char)mine[i] >= 0x20 && (unsigned char)mine[i] < 0x7f);
    json_decref(back);
    json_decref(j);
    free(dump);
    return 0;
}

/* Appends code point cp as UTF-8. */
static size_t put_utf8(char *o, uint32_t cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xc0 | cp >> 6);
        o[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | cp >> 12);
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | cp >> 18);
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

static void test_json_escape_vs_jansson(void **state)
{
    char s[128];

    (void)state;
    /* every ASCII byte alone, in every mode */
    for (int c = 0; c < 0x80; c++) {
        s[0] = (char)c;
        assert_int_equal(escape_vs_jansson(s, 1, 0), 0);
        assert_int_equal(escape_vs_jansson(s, 1, MOAT_JSON_UTF8_RAW), 0);
        assert_int_equal(escape_vs_jansson(s, 1, MOAT_JSON_ASCII_ONLY), 0);
    }
    /* random ASCII strings (controls, quotes, backslashes, DEL included) */
    for (int round = 0; round < 5000; round++) {
        size_t len = rnd() % 60;
        for (size_t i = 0; i < len; i++)
            s[i] = rnd() % 4 == 0 ? "\"\\\x7f\n\t\x01\x1f/"[rnd() % 8] : (char)(rnd() % 0x80);
        assert_int_equal(escape_vs_jansson(s, len, 0), 0);
        assert_int_equal(escape_vs_jansson(s, len, MOAT_JSON_ASCII_ONLY), 0);
        assert_int_equal(escape_vs_jansson(s, len, MOAT_JSON_UTF8_RAW), 0);
    }
    /* random well-formed UTF-8: \uXXXX and surrogate pairs as jansson writes them */
    for (int round = 0; round < 5000; round++) {
        size_t len = 0;
        while (len < sizeof(s) - 8 && rnd() % 24 != 0) {
            uint32_t cp;
            switch (rnd() % 5) {
            case 0:
                cp = rnd() % 0x80;
                break;
            case 1:
                cp = 0x80 + rnd() % 0x780;
                break;
            case 2:
                cp = 0x800 + rnd() % 0xf800;
                break;
            default:
                cp = 0x10000 + rnd() % 0x100000;
                break;
            }
            if (cp >= 0xd800 && cp <= 0xdfff)
                cp = 0xfffd;
            len += put_utf8(s + len, cp);
        }
        assert_int_equal(escape_vs_jansson(s, len, 0), 0);
        assert_int_equal(escape_vs_jansson(s, len, MOAT_JSON_UTF8_RAW), 0);
        int ascii = 1;
        for (size_t i = 0; i < len; i++)
            ascii &= (unsigned char)s[i] < 0x80;
        assert_int_equal(escape_vs_jansson(s, len, MOAT_JSON_ASCII_ONLY), ascii ? 0 : -1);
    }
    /* ill-formed UTF-8 fails in every mode, as jansson refuses it */
    static const char *const bad[] = {"a\xc3", "\xed\xa0\x80", "\xc0\xaf", "x\xf4\x90\x80\x80y", "\x80"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(escape_vs_jansson(bad[i], strlen(bad[i]), 0), -1);
        assert_int_equal(escape_vs_jansson(bad[i], strlen(bad[i]), MOAT_JSON_UTF8_RAW), -1);
    }
    size_t off = 0;
    assert_int_equal(moat_json_escape(s, sizeof(s), &off, "a\x01\"\\\x7f\xc3\xa9", 7, 0), 0);
    s[off] = '\0';
    assert_string_equal(s, "a\\u0001\\\"\\\\\\u007f\\u00E9");
}

static void test_json_escape_bounds(void **state)
{
    static const char *const inputs[] = {"plain", "q\"b\\", "ctl\x01\x1f", "\xc3\xa9t\xc3\xa9", "\xf0\x9f\x98\x80!"};
    static const unsigned modes[] = {0, MOAT_JSON_UTF8_RAW};
    char buf[128];

    (void)state;
    for (size_t i = 0; i < sizeof(inputs) / sizeof(inputs[0]); i++)
        for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
            size_t need = 3, off = 3;
            assert_int_equal(moat_json_escape(buf, sizeof(buf), &need, inputs[i], strlen(inputs[i]), modes[m]), 0);
            /* need - 3 bytes of output: fits in exactly need + 1 bytes, not in need */
            for (size_t size = 0; size <= need + 1; size++) {
                memset(buf, '#', sizeof(buf));
                off = 3;
                int rc = moat_json_escape(buf, size, &off, inputs[i], strlen(inputs[i]), modes[m]);
                assert_int_equal(rc, size == need + 1 ? 0 : -1);
                assert_int_equal(off, rc == 0 ? need : 3);
                for (size_t k = size < 3 ? 0 : (rc == 0 ? need : size); k < sizeof(buf); k++)
                    assert_int_equal(buf[k], '#');
            }
        }
}

/* ---- I/O loops ------------------------------------------------------------ */

static void on_alarm(int sig)
{
    (void)sig;
}

struct reader {
    int fd;
    size_t len;
    uint8_t *got;
    ssize_t n;
};

static void *slow_reader(void *arg)
{
    struct reader *r = arg;
    size_t off = 0;
    /* small reads first, so the writer fills the socket and is cut short */
    while (off < r->len) {
        size_t want = r->len - off < 1000 ? r->len - off : 1000;
        ssize_t n = moat_read_full(r->fd, r->got + off, want);
        if (n <= 0)
            break;
        off += (size_t)n;
        if (off < 200000)
            usleep(50);
    }
    r->n = (ssize_t)off;
    return NULL;
}

/* Big transfers over a socketpair with a 4 KiB send buffer, a timer
 * signal every 200 us without SA_RESTART: write(2)/send(2) come back
 * short and with EINTR, read(2) with EINTR. */
static void transfer(int use_send)
{
    int sv[2];
    size_t len = 4u * 1024 * 1024;
    uint8_t *data = malloc(len);
    struct reader r = {0, len, malloc(len), 0};
    struct sigaction sa;
    struct itimerval tv = {{0, 200}, {0, 200}}, off = {{0, 0}, {0, 0}};
    pthread_t t;
    int small = 4096;

    assert_non_null(data);
    assert_non_null(r.got);
    for (size_t i = 0; i < len; i++)
        data[i] = (uint8_t)(i * 7 + i / 4096);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    assert_int_equal(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_alarm; /* no SA_RESTART */
    assert_int_equal(sigaction(SIGALRM, &sa, NULL), 0);
    r.fd = sv[1];
    assert_int_equal(pthread_create(&t, NULL, slow_reader, &r), 0);
    assert_int_equal(setitimer(ITIMER_REAL, &tv, NULL), 0);
    int rc = use_send ? moat_send_full(sv[0], data, len) : moat_write_full(sv[0], data, len, NULL);
    assert_int_equal(rc, 0);
    pthread_join(t, NULL);
    setitimer(ITIMER_REAL, &off, NULL);
    /* the handler stays: a last signal may still be on its way */
    assert_int_equal(r.n, (ssize_t)len);
    assert_memory_equal(data, r.got, len);
    close(sv[0]);
    close(sv[1]);
    free(data);
    free(r.got);
}

static void test_io_short_writes(void **state)
{
    (void)state;
    transfer(0);
    transfer(1);
}

static void test_io_eof_and_errors(void **state)
{
    int sv[2];
    char buf[32];

    (void)state;
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    size_t done = 99;
    assert_int_equal(moat_write_full(sv[0], "0123456789", 10, &done), 0);
    assert_int_equal(done, 10);
    close(sv[0]);
    /* end of file after 10 of 20 bytes, then at once */
    assert_int_equal(moat_read_full(sv[1], buf, 20), 10);
    assert_memory_equal(buf, "0123456789", 10);
    assert_int_equal(moat_read_full(sv[1], buf, 20), 0);
    assert_int_equal(moat_read_full(sv[1], buf, 0), 0);
    /* a peer that went away: EPIPE, and no SIGPIPE kills us */
    assert_int_equal(moat_send_full(sv[1], "x", 1), -1);
    assert_int_equal(errno, EPIPE);
    close(sv[1]);
    errno = 0;
    assert_int_equal(moat_read_full(sv[1], buf, 1), -1);
    assert_int_equal(errno, EBADF);
    assert_int_equal(moat_write_full(sv[1], buf, 1, &done), -1);
    assert_int_equal(errno, EBADF);
    assert_int_equal(done, 0);

    /* cut short: done says how much went out */
    static uint8_t big[1 << 20];
    int small = 4096;
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    assert_int_equal(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
    assert_int_equal(moat_write_full(sv[0], big, sizeof(big), &done), -1);
    assert_int_equal(errno, EAGAIN);
    assert_true(done > 0 && done < sizeof(big));
    assert_int_equal(moat_read_full(sv[1], big, done), (ssize_t)done);
    close(sv[0]);
    close(sv[1]);
}

static void test_io_pass_fds(void **state)
{
    int sv[2], p[2], q[2], got[2] = {-1, -1};
    char c = 0;

    (void)state;
    assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
    assert_int_equal(pipe(p), 0);
    assert_int_equal(pipe(q), 0);
    int fds[2] = {p[1], q[1]};
    assert_int_equal(moat_send_fds(sv[0], fds, 2), 0);
    assert_int_equal(moat_recv_fds(sv[1], got, 2), 0);
    assert_true(got[0] != p[1] && got[1] != q[1]);
    assert_int_equal(fcntl(got[0], F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
    assert_int_equal(moat_write_full(got[1], "q", 1, NULL), 0);
    assert_int_equal(moat_read_full(q[0], &c, 1), 1);
    assert_int_equal(c, 'q');
    close(got[0]);
    close(got[1]);
    /* another count than sent: refused, and what came along is closed */
    int before = open("/dev/null", O_RDONLY);
    close(before);
    assert_int_equal(moat_send_fds(sv[0], fds, 1), 0);
    assert_int_equal(moat_recv_fds(sv[1], got, 2), -1);
    int after = open("/dev/null", O_RDONLY);
    assert_int_equal(after, before);
    close(after);
    /* a plain byte is not a descriptor message */
    assert_int_equal(moat_send_full(sv[0], "F", 1), 0);
    assert_int_equal(moat_recv_fds(sv[1], got, 1), -1);
    assert_int_equal(moat_send_fds(sv[0], fds, 0), -1);
    assert_int_equal(moat_send_fds(sv[0], fds, MOAT_IO_MAX_FDS + 1), -1);
    close(p[0]);
    close(p[1]);
    close(q[0]);
    close(q[1]);
    close(sv[0]);
    close(sv[1]);
}

/* ---- buffer --------------------------------------------------------------- */

static void test_buf_growth(void **state)
{
    struct moat_buf b = {0};
    size_t reallocs = 0, cap = 0;

    (void)state;
    for (size_t i = 0; i < 100000; i++) {
        uint8_t c = (uint8_t)(i % 251);
        assert_int_equal(moat_buf_append(&b, &c, 1), 0);
        if (b.cap != cap) {
            reallocs++;
            /* doubling from 256 */
            assert_true(cap == 0 ? b.cap == 256 : b.cap == 2 * cap);
            cap = b.cap;
        }
    }
    assert_int_equal(b.len, 100000);
    assert_true(reallocs <= 10);
    for (size_t i = 0; i < b.len; i++)
        assert_int_equal(b.data[i], i % 251);
    /* too much: refused, nothing changed */
    uint8_t *data = b.data;
    assert_int_equal(moat_buf_reserve(&b, SIZE_MAX), -1);
    assert_int_equal(moat_buf_reserve(&b, SIZE_MAX / 2 + 1), -1);
    assert_ptr_equal(b.data, data);
    assert_int_equal(b.len, 100000);
    assert_int_equal(b.cap, cap);
    assert_int_equal(moat_buf_append(&b, NULL, 0), 0);
    moat_buf_free(&b);
    assert_null(b.data);
    assert_int_equal(b.len + b.cap, 0);
    /* one allocation of a chosen first size; a large append in one step */
    assert_int_equal(moat_buf_reserve(&b, 4096), 0);
    assert_int_equal(b.cap, 4096);
    assert_int_equal(moat_buf_reserve(&b, 4096), 0);
    assert_int_equal(b.cap, 4096);
    static uint8_t big[70000];
    assert_int_equal(moat_buf_append(&b, big, sizeof(big)), 0);
    assert_int_equal(b.cap, 131072);
    moat_buf_free(&b);
    moat_buf_free(&b);
}

/* ---- log ------------------------------------------------------------------ */

/* Checks that each line starts with an RFC 3339 UTC time with milliseconds
 * ("2026-12-01T02:50:00.123Z ") and removes it, in place. */
static char *strip_stamps(char *s)
{
    static const char shape[] = "dddd-dd-ddTdd:dd:dd.dddZ ";
    char *r = s, *w = s;

    while (*r != '\0') {
        for (size_t i = 0; i < sizeof(shape) - 1; i++) {
            if (shape[i] == 'd')
                assert_true(r[i] >= '0' && r[i] <= '9');
            else
                assert_int_equal(r[i], shape[i]);
        }
        r += sizeof(shape) - 1;
        while (*r != '\0' && *r != '\n')
            *w++ = *r++;
        if (*r == '\n')
            *w++ = *r++;
    }
    *w = '\0';
    return s;
}

/* Runs fn with stderr sent into a pipe; returns what it wrote, as it was. */
static char *capture_raw(void (*fn)(void))
{
    static char out[8 * MOAT_LOG_LINE_MAX];
    int p[2], saved = dup(STDERR_FILENO);

    assert_int_equal(pipe(p), 0);
    assert_int_equal(dup2(p[1], STDERR_FILENO), STDERR_FILENO);
    close(p[1]);
    fn();
    assert_int_equal(dup2(saved, STDERR_FILENO), STDERR_FILENO);
    close(saved);
    ssize_t n = moat_read_full(p[0], out, sizeof(out) - 1);
    close(p[0]);
    out[n > 0 ? n : 0] = '\0';
    return out;
}

/* Runs fn with stderr sent into a pipe; returns what it wrote, each line's
 * time checked and taken off. */
static char *capture_stderr(void (*fn)(void))
{
    return strip_stamps(capture_raw(fn));
}

static void log_lines(void)
{
    log_init("unit", 0);
    errno = ENOENT;
    log_warn("%s: open %s", "f", "x");
    assert_int_equal(errno, ENOENT);
    log_warnx("plain %d", 7);
    log_debug("hidden");
    log_init(NULL, 1);
    log_debug("shown");
    log_info_raw("raw text", 3);
}

static void log_buffered(void)
{
    log_buffer_thread();
    log_info("one");
    log_info("two");
    /* nothing written yet: a warning flushes first, then goes at once */
    log_warnx("three");
    log_info("four");
    log_flush();
}

static char long_text[3 * MOAT_LOG_LINE_MAX];

static void log_long(void)
{
    log_warnx("%s", long_text);
}

static void test_log(void **state)
{
    (void)state;
    assert_string_equal(capture_stderr(log_lines), "unit: f: open x: No such file or directory\n"
                                                   "unit: plain 7\n"
                                                   "unit: debug: shown\n"
                                                   "unit: raw\n");
    assert_string_equal(capture_stderr(log_buffered), "unit: one\nunit: two\nunit: three\nunit: four\n");
    memset(long_text, 'a', sizeof(long_text) - 1);
    char *out = capture_stderr(log_long);
    /* the whole line, its 25-byte time included, is MOAT_LOG_LINE_MAX - 1 bytes */
    assert_int_equal(strlen(out), MOAT_LOG_LINE_MAX - 1 - 25);
    assert_int_equal(out[MOAT_LOG_LINE_MAX - 2 - 25], '\n');

    char dst[16];
    log_escape(dst, sizeof(dst), "a\"b\\c\n\xff", 8, 100);
    assert_string_equal(dst, "a\\x22b\\x5cc\\x0a");
    log_escape(dst, sizeof(dst), "abcdef", 6, 3);
    assert_string_equal(dst, "abc");
    log_escape(dst, 4, "abcdef", 6, 6);
    assert_string_equal(dst, "abc");
    log_escape(dst, 4, "\x01", 1, 6);
    assert_string_equal(dst, "");
}

static void log_json_lines(void)
{
    log_init("unit", 1);
    log_set_json(1);
    log_warnx("quote \" back \\ nl \n bad \xff end");
    log_info("info %d", 1);
    log_debug("dbg");
    log_info_json("\"msg\":\"request\",\"status\":401", strlen("\"msg\":\"request\",\"status\":401"));
    log_info_raw("raw \xc3\xa9", 6);
    log_flush(); /* this thread buffers its info lines (test_log) */
    log_set_json(0);
    log_init("unit", 0);
}

/* log: {format: json}: every line one JSON object, whatever the message holds. */
static void test_log_json(void **state)
{
    static const char *const levels[] = {"warning", "info", "debug", "info", "info"};
    char *out = capture_raw(log_json_lines), *line = out, *nl;
    size_t i = 0;

    (void)state;
    while ((nl = strchr(line, '\n')) != NULL) {
        json_error_t jerr;
        json_t *o = json_loadb(line, (size_t)(nl - line), 0, &jerr);
        if (o == NULL)
            fail_msg("not JSON (%s): %.*s", jerr.text, (int)(nl - line), line);
        assert_true(i < 5);
        const char *ts = json_string_value(json_object_get(o, "ts"));
        assert_non_null(ts);
        assert_int_equal(strlen(ts), 24);
        assert_int_equal(ts[23], 'Z');
        assert_string_equal(json_string_value(json_object_get(o, "program")), "unit");
        assert_string_equal(json_string_value(json_object_get(o, "level")), levels[i]);
        if (i == 0) /* invalid UTF-8: escaped as text, never a broken line */
            assert_string_equal(json_string_value(json_object_get(o, "msg")), "quote \\x22 back \\x5c nl \\x0a bad \\xff end");
        if (i == 3) {
            assert_string_equal(json_string_value(json_object_get(o, "msg")), "request");
            assert_int_equal(json_integer_value(json_object_get(o, "status")), 401);
        }
        if (i == 4)
            assert_string_equal(json_string_value(json_object_get(o, "msg")), "raw \xc3\xa9");
        json_decref(o);
        line = nl + 1;
        i++;
    }
    if (i != 5)
        fail_msg("%zu lines:\n%s", i, out);
    assert_string_equal(line, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hex_round_trip),     cmocka_unit_test(test_hex_strict),
        cmocka_unit_test(test_base64_vectors),     cmocka_unit_test(test_base64_strict),
        cmocka_unit_test(test_base64_long),        cmocka_unit_test(test_utf8_edges),
        cmocka_unit_test(test_utf8_vs_jansson),    cmocka_unit_test(test_json_escape_vs_jansson),
        cmocka_unit_test(test_json_escape_bounds), cmocka_unit_test(test_io_short_writes),
        cmocka_unit_test(test_io_eof_and_errors),  cmocka_unit_test(test_io_pass_fds),
        cmocka_unit_test(test_buf_growth),         cmocka_unit_test(test_log),
        cmocka_unit_test(test_log_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
