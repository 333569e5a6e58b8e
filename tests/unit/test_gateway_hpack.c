/*
 * test_gateway_hpack.c - hpack_scan.c, the header block guard's reader:
 * Huffman lengths against h2o's own encoder, limits, malformed blocks, and
 * thousands of random blocks scanned and then decoded by h2o 2.2.5's own
 * decoder (h2o_hpack_parse_headers), which must agree on the fields, their
 * size and the dynamic table afterwards.  The test reads h2o's dynamic
 * table (http2_internal.h), as gateway/h2o_compat.c does.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hpack_scan.h"

#include <h2o.h>
#include <h2o/http2.h>
#include <h2o/http2_internal.h>

#define NO_LIMIT ((size_t)1 << 40)

/* A deterministic generator: every run tests the same blocks. */
static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static unsigned rnd(unsigned n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (unsigned)(rng % n);
}

/* RFC 7541 5.1 */
static size_t put_int(uint8_t *p, uint8_t first, unsigned prefix_bits, uint64_t v)
{
    uint8_t max = (uint8_t)((1u << prefix_bits) - 1);
    size_t n = 0;

    if (v < max) {
        p[n++] = first | (uint8_t)v;
        return n;
    }
    p[n++] = first | max;
    for (v -= max; v >= 128; v >>= 7)
        p[n++] = (uint8_t)(0x80 | (v & 0x7f));
    p[n++] = (uint8_t)v;
    return n;
}

/* A raw string literal (no Huffman). */
static size_t put_raw(uint8_t *p, const char *s, size_t len)
{
    size_t n = put_int(p, 0, 7, len);
    memcpy(p + n, s, len);
    return n + len;
}

/* ------------------------------------------------------------ Huffman */

/* h2o_hpack_encode_string picks Huffman when it is shorter: the scan must count every symbol. */
static void test_huffman_lengths_match_h2o_encoder(void **state)
{
    static const char alphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789-_./:=;, ";
    uint8_t dst[4096];
    char s[1024];
    int huffman_seen = 0;

    for (int round = 0; round < 3000; round++) {
        size_t len = rnd(sizeof(s));
        for (size_t i = 0; i < len; i++)
            s[i] = round % 3 == 0 ? (char)rnd(256) : alphabet[rnd(sizeof(alphabet) - 1)];
        size_t n = h2o_hpack_encode_string(dst, s, len);
        const uint8_t *p = dst;
        int64_t slen = *p & 0x7f;
        int huffman = (*p++ & 0x80) != 0;
        if (slen == 0x7f)
            for (int shift = 0;; shift += 7) {
                slen += (int64_t)(*p & 0x7f) << shift;
                if ((*p++ & 0x80) == 0)
                    break;
            }
        assert_int_equal((size_t)(p - dst) + (size_t)slen, n);
        if (huffman) {
            huffman_seen++;
            assert_int_equal(hpack_huffman_len(p, (size_t)slen), (ssize_t)len);
        } else {
            assert_int_equal(slen, (int64_t)len);
        }
    }
    assert_true(huffman_seen > 1000);
}

/* Every octet value on its own (lengths 5 to 30 bits), and the empty string. */
static void test_huffman_every_symbol(void **state)
{
    uint8_t dst[64];
    char s[3];

    for (int c = 0; c < 256; c++) {
        memset(s, c, sizeof(s));
        size_t n = h2o_hpack_encode_string(dst, s, sizeof(s));
        if (dst[0] & 0x80)
            assert_int_equal(hpack_huffman_len(dst + 1, n - 1), (ssize_t)sizeof(s));
    }
    assert_int_equal(hpack_huffman_len(dst, 0), 0);
}

static void test_huffman_invalid(void **state)
{
    /* "a" is 00011: the rest of the octet must be ones (the start of EOS) */
    static const uint8_t ok[] = {0x1f}, zero_pad[] = {0x18}, long_pad[] = {0x1f, 0xff};
    /* 30 ones is EOS, which may not appear in a string */
    static const uint8_t eos[] = {0xff, 0xff, 0xff, 0xff};

    assert_int_equal(hpack_huffman_len(ok, sizeof(ok)), 1);
    assert_int_equal(hpack_huffman_len(zero_pad, sizeof(zero_pad)), -1);
    assert_int_equal(hpack_huffman_len(long_pad, sizeof(long_pad)), -1);
    assert_int_equal(hpack_huffman_len(eos, sizeof(eos)), -1);
}

/* ------------------------------------------------------------ limits */

static void empty_table(struct hpack_sizes *t)
{
    assert_int_equal(hpack_sizes_reset(t, 4096, 4096), 0);
}

/* The amplification: a 4,000-octet literal added to the table, then referenced 16,000 times. */
static size_t amplifier(uint8_t *block, size_t refs)
{
    static char value[4000];
    size_t n = 0;

    memset(value, 'a', sizeof(value));
    block[n++] = 0x40; /* literal with incremental indexing, new name */
    n += put_raw(block + n, "x-a", 3);
    n += put_raw(block + n, value, sizeof(value));
    memset(block + n, 0x80 | 62, refs); /* indexed: the newest dynamic entry */
    return n + refs;
}

static void test_amplification_stops_at_the_limits(void **state)
{
    static uint8_t block[4100 + 16000];
    size_t len = amplifier(block, 16000);
    struct hpack_sizes t;
    struct hpack_scan_result r;

    empty_table(&t);
    assert_int_equal(hpack_scan(&t, block, len, NULL, 0, 65536, 100, &r), HPACK_TOO_LARGE);
    assert_int_equal(r.fields, 17); /* 17 * 4035 > 65536 */
    empty_table(&t);
    assert_int_equal(hpack_scan(&t, block, len, NULL, 0, NO_LIMIT, 100, &r), HPACK_TOO_MANY_FIELDS);
    assert_int_equal(r.fields, 101);
    empty_table(&t);
    assert_int_equal(hpack_scan(&t, block, len, NULL, 0, NO_LIMIT, 100000, &r), HPACK_OK);
    assert_int_equal(r.fields, 16001);
    assert_int_equal(r.bytes, (size_t)16001 * (3 + 4000 + 32));
    /* within the limits */
    empty_table(&t);
    assert_int_equal(hpack_scan(&t, block, amplifier(block, 10), NULL, 0, 65536, 100, &r), HPACK_OK);
    assert_int_equal(r.fields, 11);
}

/* A block split anywhere over two frames reads the same. */
static void test_split_anywhere(void **state)
{
    uint8_t block[8192];
    size_t len = amplifier(block, 20);
    struct hpack_sizes t;
    struct hpack_scan_result whole, part;

    /* and a Huffman-coded literal across the split */
    len += put_int(block + len, 0x00, 4, 0);
    len += h2o_hpack_encode_string(block + len, H2O_STRLIT("x-huffman-coded-name"));
    len += h2o_hpack_encode_string(block + len, H2O_STRLIT("a value that huffman shortens nicely"));
    empty_table(&t);
    assert_int_equal(hpack_scan(&t, block, len, NULL, 0, NO_LIMIT, 1000, &whole), HPACK_OK);
    for (size_t at = 0; at <= len; at++) {
        empty_table(&t);
        assert_int_equal(hpack_scan(&t, block, at, block + at, len - at, NO_LIMIT, 1000, &part), HPACK_OK);
        assert_int_equal(part.fields, whole.fields);
        assert_int_equal(part.bytes, whole.bytes);
    }
}

static void test_malformed(void **state)
{
    static const struct {
        const char *what;
        uint8_t block[8];
        size_t len;
    } cases[] = {
        {"index 0", {0x80}, 1},
        {"index past the tables", {0x80 | 62}, 1},
        {"integer cut short", {0xff}, 1},
        {"integer over four octets", {0xff, 0x80, 0x80, 0x80, 0x80, 0x01}, 6},
        {"string past the block", {0x00, 0x05, 'a', 'b'}, 4},
        {"name index past the tables", {0x40 | 63, 0x00, 0x00}, 3},
        {"table size above the maximum", {0x3f, 0xe2, 0x1f}, 3}, /* 4097 */
        {"invalid Huffman", {0x00, 0x81, 0x18, 0x00}, 4},
    };
    struct hpack_sizes t;
    struct hpack_scan_result r;

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        empty_table(&t);
        if (hpack_scan(&t, cases[i].block, cases[i].len, NULL, 0, NO_LIMIT, 1000, &r) != HPACK_MALFORMED)
            fail_msg("%s: not malformed", cases[i].what);
    }
    /* a size update to 0 evicts everything: the entry is gone */
    static const uint8_t evicted[] = {0x40, 0x01, 'a', 0x01, 'b', 0x20, 0x80 | 62};
    empty_table(&t);
    assert_int_equal(hpack_scan(&t, evicted, sizeof(evicted), NULL, 0, NO_LIMIT, 1000, &r), HPACK_MALFORMED);
    assert_int_equal(r.fields, 1);
}

/* ------------------------------------------------------------ against h2o's decoder */

/* Static entries h2o takes as ordinary headers (no pseudo-headers, no
 * content-length, host or transfer-encoding, which it treats apart). */
static const unsigned safe_static[] = {15, 16, 17, 19, 23, 24, 31, 32, 33, 49, 51, 58};

static size_t random_string(char *s, size_t max)
{
    size_t len = rnd(4) == 0 ? rnd((unsigned)max) : rnd(40);

    for (size_t i = 0; i < len; i++)
        s[i] = (char)(0x20 + rnd(0x5f)); /* printable ASCII */
    return len;
}

static size_t random_name(char *s)
{
    size_t len = 2 + rnd(12);

    s[0] = 'x';
    s[1] = '-';
    for (size_t i = 2; i < len; i++)
        s[i] = (char)('a' + rnd(26));
    return len;
}

static size_t put_string(uint8_t *p, const char *s, size_t len)
{
    return rnd(2) ? h2o_hpack_encode_string(p, s, len) : put_raw(p, s, len);
}

/* One representation with names and values h2o takes without an error
 * (indices may be stale: then both must call the block malformed). */
static size_t random_field(uint8_t *p, size_t entries)
{
    static char s[3000];
    size_t n = 0;
    unsigned kind = rnd(10);
    unsigned index =
        entries != 0 && rnd(2) ? 62 + rnd((unsigned)entries) : safe_static[rnd(sizeof(safe_static) / sizeof(safe_static[0]))];

    if (kind < 3)
        return put_int(p, 0x80, 7, index); /* indexed */
    if (kind == 3)
        return put_int(p, 0x20, 5, rnd(4097)); /* table size update */
    static const uint8_t firsts[] = {0x40, 0x00, 0x10};
    static const unsigned prefixes[] = {6, 4, 4};
    unsigned lit = rnd(3);
    if (rnd(2)) {
        n += put_int(p, firsts[lit], prefixes[lit], index);
    } else {
        p[n++] = firsts[lit];
        n += put_string(p + n, s, random_name(s));
    }
    return n + put_string(p + n, s, random_string(s, sizeof(s)));
}

static void seed_from(struct hpack_sizes *t, h2o_hpack_header_table_t *h)
{
    assert_int_equal(hpack_sizes_reset(t, h->hpack_capacity, h->hpack_max_capacity), 0);
    for (size_t i = 0; i < h->num_entries; i++) {
        const h2o_hpack_header_table_entry_t *e = h2o_hpack_header_table_get(h, i);
        assert_int_equal(hpack_sizes_add_oldest(t, e->name->len, e->value->len), 0);
    }
}

static void assert_same_table(struct hpack_sizes *t, h2o_hpack_header_table_t *h)
{
    assert_int_equal(t->num, h->num_entries);
    assert_int_equal(t->size, h->hpack_size);
    assert_int_equal(t->capacity, h->hpack_capacity);
    for (size_t i = 0; i < h->num_entries; i++) {
        const h2o_hpack_header_table_entry_t *e = h2o_hpack_header_table_get(h, i);
        assert_int_equal(t->name_len[(t->first + i) % HPACK_TABLE_MAX_ENTRIES], e->name->len);
        assert_int_equal(t->value_len[(t->first + i) % HPACK_TABLE_MAX_ENTRIES], e->value->len);
    }
}

static void test_random_blocks_agree_with_h2o(void **state)
{
    static uint8_t block[65536];
    h2o_hpack_header_table_t h;
    struct hpack_sizes t;
    int decoded = 0, refused = 0;

    memset(&h, 0, sizeof(h));
    h.hpack_capacity = h.hpack_max_capacity = H2O_HTTP2_SETTINGS_DEFAULT.header_table_size;
    for (int round = 0; round < 4000; round++) {
        size_t len = 0;
        for (unsigned f = rnd(30); f > 0 && len < sizeof(block) - 8192; f--)
            len += random_field(block + len, h.num_entries);
        seed_from(&t, &h);
        struct hpack_scan_result r;
        enum hpack_verdict v = hpack_scan(&t, block, len, NULL, 0, NO_LIMIT, 100000, &r);

        h2o_req_t req;
        int pseudo = 0;
        size_t content_length;
        const char *err = NULL;
        memset(&req, 0, sizeof(req));
        h2o_mem_init_pool(&req.pool);
        int ret = h2o_hpack_parse_headers(&req, &h, block, len, &pseudo, &content_length, NULL, &err);
        if (ret != 0 && ret != H2O_HTTP2_ERROR_INVALID_HEADER_CHAR) {
            assert_int_equal(v, HPACK_MALFORMED);
            refused++;
        } else {
            size_t bytes = 0;
            assert_int_equal(v, HPACK_OK);
            for (size_t i = 0; i < req.headers.size; i++)
                bytes += req.headers.entries[i].name->len + req.headers.entries[i].value.len + HPACK_ENTRY_OVERHEAD;
            assert_int_equal(r.fields, req.headers.size);
            assert_int_equal(r.bytes, bytes);
            decoded++;
        }
        assert_same_table(&t, &h); /* both stop at the same place */
        h2o_mem_clear_pool(&req.pool);
    }
    h2o_hpack_dispose_header_table(&h);
    assert_true(decoded > 1000);
    assert_true(refused > 100);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_huffman_lengths_match_h2o_encoder),
        cmocka_unit_test(test_huffman_every_symbol),
        cmocka_unit_test(test_huffman_invalid),
        cmocka_unit_test(test_amplification_stops_at_the_limits),
        cmocka_unit_test(test_split_anywhere),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_random_blocks_agree_with_h2o),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
