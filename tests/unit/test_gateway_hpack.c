/*
 * test_gateway_hpack.c - hpack_scan.c, the header block guard's reader:
 * Huffman lengths against h2o's own encoder, limits, malformed blocks, and
 * thousands of random blocks scanned and then decoded by h2o 2.2.5's own
 * decoder (h2o_hpack_parse_headers), which must agree on the fields, their
 * size and the dynamic table afterwards.  The test reads h2o's dynamic
 * table (http2_internal.h), as gateway/core/h2o_compat.c does.
 *
 * Also the response side (h2o_compat.c's h2o_hpack_flatten_response, which
 * wraps h2o's): request ids are sent without indexing, so they never enter
 * the output table, statuses are written as h2o writes them, and h2o's
 * decoder reads every block back, whole or split into CONTINUATION frames.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/h2o_compat.h"
#include "core/hpack_scan.h"

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

/* h2o's decoder on a block, into req's headers (req->pool to be cleared).  Its answer. */
static int h2o_decode(h2o_req_t *req, h2o_hpack_header_table_t *h, const uint8_t *block, size_t len)
{
    int pseudo = 0;
    size_t content_length;
    const char *err = NULL;

    memset(req, 0, sizeof(*req));
    h2o_mem_init_pool(&req->pool);
    return h2o_hpack_parse_headers(req, h, block, len, &pseudo, &content_length, NULL, &err);
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
        int ret = h2o_decode(&req, &h, block, len);
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

/* ---------------------------------------------------------------- responses */

/* The header block of the response that starts at buf[0]: HEADERS, then
 * CONTINUATIONs up to END_HEADERS, each at most max_frame, for stream 1;
 * the payloads joined into block.  Its length. */
static size_t reassemble(const h2o_buffer_t *buf, size_t max_frame, uint8_t *block, size_t *frames)
{
    size_t off = 0, len = 0;

    *frames = 0;
    for (;;) {
        const uint8_t *f = (const uint8_t *)buf->bytes + off;
        size_t n = (size_t)f[0] << 16 | (size_t)f[1] << 8 | f[2];
        assert_true(off + H2O_HTTP2_FRAME_HEADER_SIZE + n <= buf->size);
        assert_true(n <= max_frame);
        assert_int_equal(f[3], *frames == 0 ? H2O_HTTP2_FRAME_TYPE_HEADERS : H2O_HTTP2_FRAME_TYPE_CONTINUATION);
        assert_int_equal((uint32_t)f[5] << 24 | (uint32_t)f[6] << 16 | (uint32_t)f[7] << 8 | f[8], 1);
        memcpy(block + len, f + H2O_HTTP2_FRAME_HEADER_SIZE, n);
        len += n;
        off += H2O_HTTP2_FRAME_HEADER_SIZE + n;
        ++*frames;
        if (f[4] & H2O_HTTP2_FRAME_FLAG_END_HEADERS)
            break;
        assert_int_equal(f[4], 0);
    }
    assert_int_equal(off, buf->size); /* nothing after the block */
    return len;
}

static const h2o_iovec_t *header_value(const h2o_headers_t *hs, const char *name)
{
    for (size_t i = 0; i < hs->size; i++)
        if (h2o_memis(hs->entries[i].name->base, hs->entries[i].name->len, name, strlen(name)))
            return &hs->entries[i].value;
    return NULL;
}

static void test_request_ids_stay_out_of_the_output_table(void **state)
{
    static const size_t max_frames[] = {16384, 16384, 16384, 120, 40};
    static uint8_t block[65536];
    h2o_hpack_header_table_t enc, dec;
    h2o_timestamp_string_t ts_str;
    h2o_timestamp_t ts = {{0, 0}, &ts_str};
    h2o_iovec_t no_server = {NULL, 0};
    size_t split = 0;

    assert_int_equal(gw_h2_encoder_init(), 0);
    memset(&enc, 0, sizeof(enc));
    memset(&dec, 0, sizeof(dec));
    enc.hpack_capacity = enc.hpack_max_capacity = H2O_HTTP2_SETTINGS_DEFAULT.header_table_size;
    dec.hpack_capacity = dec.hpack_max_capacity = H2O_HTTP2_SETTINGS_DEFAULT.header_table_size;
    memcpy(ts_str.rfc1123, "Wed, 02 Dec 2026 01:00:00 GMT", H2O_TIMESTR_RFC1123_LEN + 1);
    for (int round = 0; round < 500; round++) {
        static const int statuses[] = {200, 401, 429, 404, 503, 401, 429};
        size_t max_frame = max_frames[round % 5], frames;
        int status = statuses[round % 7];
        char id[17], big[600];
        h2o_mem_pool_t pool;
        h2o_res_t res;
        h2o_buffer_t *buf;

        h2o_mem_init_pool(&pool);
        memset(&res, 0, sizeof(res));
        res.status = status;
        snprintf(id, sizeof(id), "%016llx", (unsigned long long)rng ^ (unsigned long long)round);
        memset(big, 'a' + round % 26, sizeof(big));
        h2o_add_header(&pool, &res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, H2O_STRLIT("application/json"));
        h2o_add_header_by_str(&pool, &res.headers, H2O_STRLIT("x-request-id"), 0, NULL, id, strlen(id));
        h2o_add_header(&pool, &res.headers, H2O_TOKEN_CACHE_CONTROL, NULL, H2O_STRLIT("no-store"));
        if (round % 3 == 0) /* a field h2o indexes anew each time, and a block of several frames */
            h2o_add_header_by_str(&pool, &res.headers, H2O_STRLIT("x-big"), 0, NULL, big, 100 + (size_t)rnd(sizeof(big) - 100));
        h2o_buffer_init(&buf, &h2o_socket_buffer_prototype);
        h2o_hpack_flatten_response(&buf, &enc, 1, max_frame, &res, &ts, &no_server, SIZE_MAX);
        assert_int_equal(res.headers.size, round % 3 == 0 ? 4 : 3); /* the response is as it was */
        assert_int_equal(res.status, status);

        size_t len = reassemble(buf, max_frame, block, &frames);
        split += frames > 1;
        /* :status first (h2o's request decoder takes none): indexed, or a
         * literal without indexing with name index 8, as h2o writes it */
        size_t skip = 1;
        if (status == 200) {
            assert_int_equal(block[0], 0x88);
        } else {
            char digits[4];
            snprintf(digits, sizeof(digits), "%d", status);
            assert_int_equal(block[0], status == 404 ? 0x80 | 13 : 0x08);
            if (status != 404) {
                assert_int_equal(block[1], 3);
                assert_memory_equal(block + 2, digits, 3);
                skip = 5;
            }
        }
        h2o_req_t req;
        assert_int_equal(h2o_decode(&req, &dec, block + skip, len - skip), 0);
        const h2o_iovec_t *got = header_value(&req.headers, "x-request-id");
        assert_non_null(got);
        assert_memory_equal(got->base, id, 16);
        assert_int_equal(got->len, 16);
        assert_non_null(header_value(&req.headers, "cache-control"));
        assert_non_null(header_value(&req.headers, "date"));

        /* the peer's table is the encoder's, and holds no request id */
        assert_int_equal(dec.num_entries, enc.num_entries);
        assert_int_equal(dec.hpack_size, enc.hpack_size);
        for (size_t i = 0; i < enc.num_entries; i++) {
            const h2o_hpack_header_table_entry_t *e = h2o_hpack_header_table_get(&enc, i);
            assert_false(h2o_memis(e->name->base, e->name->len, H2O_STRLIT("x-request-id")));
        }
        h2o_mem_clear_pool(&req.pool);
        h2o_buffer_dispose(&buf);
        h2o_mem_clear_pool(&pool);
    }
    assert_true(split > 10); /* CONTINUATION frames were made, and read back */
    h2o_hpack_dispose_header_table(&enc);
    h2o_hpack_dispose_header_table(&dec);
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
        cmocka_unit_test(test_request_ids_stay_out_of_the_output_table),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
