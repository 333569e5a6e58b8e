/*
 * hpack_scan.h - what an HPACK header block (RFC 7541) decodes to, found
 * without decoding it: the number of header fields and their size as
 * SETTINGS_MAX_HEADER_LIST_SIZE counts it (name + value + 32 octets each),
 * exact, Huffman-coded strings included.  Only lengths are read, never
 * the names and values, so the work is linear in the encoded block and
 * stops at the first field over a limit, however many times the block
 * references its dynamic table.
 *
 * The dynamic table is followed by its entries' sizes (struct
 * hpack_sizes): seeded from the decoder's table as it is before the block,
 * updated by the block's insertions, evictions and size updates exactly as
 * a decoder updates its own, so that every index means what it will mean
 * to the decoder.  Pure code: h2o_compat.c seeds it from h2o's table.
 */
#ifndef GW_HPACK_SCAN_H
#define GW_HPACK_SCAN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define HPACK_ENTRY_OVERHEAD    32   /* RFC 7541 4.1, also SETTINGS_MAX_HEADER_LIST_SIZE's per field */
#define HPACK_TABLE_MAX_SIZE    4096 /* the largest dynamic table followed (SETTINGS_HEADER_TABLE_SIZE) */
#define HPACK_TABLE_MAX_ENTRIES (HPACK_TABLE_MAX_SIZE / HPACK_ENTRY_OVERHEAD)

/* A decoder's dynamic table, by sizes: entry 0 is the newest. */
struct hpack_sizes {
    uint32_t name_len[HPACK_TABLE_MAX_ENTRIES];
    uint32_t value_len[HPACK_TABLE_MAX_ENTRIES];
    size_t first, num; /* a ring: entry i is at (first + i) % HPACK_TABLE_MAX_ENTRIES */
    size_t size;       /* sum of name + value + 32 over the entries */
    size_t capacity;   /* the size the table may reach now (dynamic table size updates) */
    size_t max_capacity;
};

/* An empty table of capacity (<= max_capacity <= HPACK_TABLE_MAX_SIZE).  0, or -1 if too large. */
int hpack_sizes_reset(struct hpack_sizes *t, size_t capacity, size_t max_capacity);

/* Seeding, newest first: an entry older than those present.  0, or -1
 * when the table would be over its capacity (not a decoder's table). */
int hpack_sizes_add_oldest(struct hpack_sizes *t, size_t name_len, size_t value_len);

enum hpack_verdict {
    HPACK_OK,
    HPACK_TOO_MANY_FIELDS, /* more than max_fields */
    HPACK_TOO_LARGE,       /* more than max_bytes */
    HPACK_MALFORMED,       /* a decoder refuses it (RFC 7541 COMPRESSION_ERROR) */
};

/* What the block decodes to, as far as it was read. */
struct hpack_scan_result {
    size_t fields;
    size_t bytes;
};

/*
 * The header block made of a[0..alen) then b[0..blen) (a block split over
 * frames; b may be NULL), decoded against t, which it updates as the
 * decoder would.  Stops at the first field over max_fields or max_bytes.
 */
enum hpack_verdict hpack_scan(struct hpack_sizes *t, const uint8_t *a, size_t alen, const uint8_t *b, size_t blen, size_t max_bytes,
                              unsigned max_fields, struct hpack_scan_result *out);

/* The decoded length of Huffman-coded s (RFC 7541 5.2, appendix B), or -1
 * if it is not a valid encoding (an invalid code, EOS, bad padding). */
ssize_t hpack_huffman_len(const uint8_t *s, size_t len);

#endif /* GW_HPACK_SCAN_H */
