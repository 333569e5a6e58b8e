/*
 * hpack_scan.c - the sizes an HPACK header block decodes to (see
 * hpack_scan.h).
 *
 * Theory of operation
 * -------------------
 * A decoder's cost is driven by what the block decodes to, not by its
 * length on the wire: one indexed reference is one octet and may stand for
 * a 4 KiB entry of the dynamic table.  hpack_scan() reads the block as a
 * decoder does, representation by representation (RFC 7541 6), and keeps
 * only lengths:
 *
 *   indexed          the entry's name and value lengths: the static table
 *                    (appendix A) or the followed dynamic table
 *   literal          the name's length (a string, or an entry's name) and
 *                    the value string's; with incremental indexing it is
 *                    then added to the table, evicting as a decoder does
 *   size update      the table's capacity, evicting down to it
 *
 * A string's length is its prefix integer, or for a Huffman-coded string
 * the number of symbols, counted by a table-driven walk of the canonical
 * code four bits at a time (built once from the code's lengths).  Every
 * rule a decoder (h2o 2.2.5's lib/http2/hpack.c) checks on the way is
 * checked here too (integer length, index range, table size update bound,
 * Huffman code, EOS and padding), so that a block this scan reads to the
 * end is read the same way by the decoder, and one it calls malformed is
 * one the decoder refuses.
 */
#include "hpack_scan.h"

#include <pthread.h>
#include <string.h>

/* ---------------------------------------------------------------- Huffman */

/*
 * RFC 7541 appendix B is a canonical code, so the number of codes of each
 * length (5 to 30 bits) fixes it; its last 30-bit code (all ones) is EOS.
 */
static const uint8_t huff_count[31] = {
    [5] = 10, [6] = 26,  [7] = 32,  [8] = 6,   [10] = 5,  [11] = 3, [12] = 2,  [13] = 6,  [14] = 2,  [15] = 3, [19] = 3,
    [20] = 8, [21] = 13, [22] = 26, [23] = 29, [24] = 12, [25] = 4, [26] = 15, [27] = 19, [28] = 29, [30] = 4};

#define HUFF_SYMBOLS 257                /* 256 octets and EOS */
#define HUFF_NODES   (HUFF_SYMBOLS - 1) /* the inner nodes of the code's tree */
#define HUFF_LEAF    (-1)
#define HUFF_EOS     (-2)
#define HUFF_NONE    (-3)

/* One step of four bits from an inner node: the next node, and whether a
 * symbol ended (at most one: codes are at least five bits) or EOS came. */
#define STEP_NODE(s) ((unsigned)(s) % 256u)
#define STEP_EMIT    0x100
#define STEP_FAIL    0x200

static uint16_t huff_step[HUFF_NODES][16];
static uint8_t huff_accept[HUFF_NODES]; /* may a string end here: a prefix of EOS shorter than 8 bits */
static int huff_ready;                  /* the tables were built (and the code checked) */
static pthread_once_t huff_once = PTHREAD_ONCE_INIT;

struct huff_node {
    int16_t child[2]; /* an inner node, HUFF_LEAF, HUFF_EOS or HUFF_NONE */
    uint8_t depth;
    uint8_t all_ones;
};

/* Adds the leaf for code (len bits) below the root.  0, or -1 if the code overlaps another. */
static int huff_insert(struct huff_node *n, int *nn, uint32_t code, int len, int16_t leaf)
{
    int at = 0;

    for (int i = len - 1; i > 0; i--) {
        int bit = (code >> i) & 1;
        if (n[at].child[bit] == HUFF_NONE) {
            if (*nn >= HUFF_NODES)
                return -1;
            n[*nn] = (struct huff_node){{HUFF_NONE, HUFF_NONE}, (uint8_t)(n[at].depth + 1), (uint8_t)(n[at].all_ones && bit)};
            n[at].child[bit] = (int16_t)(*nn)++;
        } else if (n[at].child[bit] < 0) {
            return -1;
        }
        at = n[at].child[bit];
    }
    if (n[at].child[code & 1] != HUFF_NONE)
        return -1;
    n[at].child[code & 1] = leaf;
    return 0;
}

/* Four bits from node at: where they lead.  Every inner node has two children (the code is complete). */
static uint16_t huff_walk(const struct huff_node *n, int at, unsigned nibble)
{
    uint16_t flags = 0;

    for (int i = 3; i >= 0; i--) {
        int c = n[at].child[(nibble >> i) & 1];
        if (c == HUFF_EOS)
            return STEP_FAIL;
        if (c == HUFF_LEAF) {
            flags |= STEP_EMIT;
            at = 0;
        } else {
            at = c;
        }
    }
    return (uint16_t)(flags | at);
}

static void huff_build(void)
{
    struct huff_node n[HUFF_NODES];
    int nn = 1, symbols = 0, prev_len = 0;
    uint32_t code = 0;

    n[0] = (struct huff_node){{HUFF_NONE, HUFF_NONE}, 0, 1};
    for (int len = 1; len <= 30; len++) {
        for (int k = 0; k < huff_count[len]; k++, symbols++) {
            code = symbols == 0 ? 0 : (code + 1) << (len - prev_len);
            prev_len = len;
            if (huff_insert(n, &nn, code, len, symbols == HUFF_SYMBOLS - 1 ? HUFF_EOS : HUFF_LEAF) != 0)
                return;
        }
    }
    if (symbols != HUFF_SYMBOLS || nn != HUFF_NODES || code != 0x3fffffff)
        return; /* not the code of appendix B: every Huffman string is refused */
    for (int s = 0; s < HUFF_NODES; s++) {
        for (unsigned b = 0; b < 16; b++)
            huff_step[s][b] = huff_walk(n, s, b);
        huff_accept[s] = n[s].all_ones && n[s].depth <= 7;
    }
    huff_ready = 1;
}

/* The number of symbols in the Huffman string s[0..len), continuing from *state; -1 if invalid. */
static ssize_t huff_symbols(const uint8_t *s, size_t len, unsigned *state)
{
    ssize_t count = 0;
    unsigned at = *state;

    for (size_t i = 0; i < len; i++) {
        uint16_t hi = huff_step[at][s[i] >> 4];
        uint16_t lo = huff_step[STEP_NODE(hi)][s[i] & 0xf];
        if ((hi | lo) & STEP_FAIL)
            return -1;
        count += ((hi & STEP_EMIT) != 0) + ((lo & STEP_EMIT) != 0);
        at = STEP_NODE(lo);
    }
    *state = at;
    return count;
}

ssize_t hpack_huffman_len(const uint8_t *s, size_t len)
{
    unsigned state = 0;
    ssize_t count;

    pthread_once(&huff_once, huff_build);
    if (!huff_ready || (count = huff_symbols(s, len, &state)) < 0 || !huff_accept[state])
        return -1;
    return count;
}

/* ---------------------------------------------------------------- tables */

/* RFC 7541 appendix A: the static table's name and value lengths, index 1 first. */
/* clang-format off */
#define E(name, value) {sizeof(name) - 1, sizeof(value) - 1}
/* clang-format on */
static const struct {
    uint8_t name, value;
} static_table[61] = {
    E(":authority", ""),
    E(":method", "GET"),
    E(":method", "POST"),
    E(":path", "/"),
    E(":path", "/index.html"),
    E(":scheme", "http"),
    E(":scheme", "https"),
    E(":status", "200"),
    E(":status", "204"),
    E(":status", "206"),
    E(":status", "304"),
    E(":status", "400"),
    E(":status", "404"),
    E(":status", "500"),
    E("accept-charset", ""),
    E("accept-encoding", "gzip, deflate"),
    E("accept-language", ""),
    E("accept-ranges", ""),
    E("accept", ""),
    E("access-control-allow-origin", ""),
    E("age", ""),
    E("allow", ""),
    E("authorization", ""),
    E("cache-control", ""),
    E("content-disposition", ""),
    E("content-encoding", ""),
    E("content-language", ""),
    E("content-length", ""),
    E("content-location", ""),
    E("content-range", ""),
    E("content-type", ""),
    E("cookie", ""),
    E("date", ""),
    E("etag", ""),
    E("expect", ""),
    E("expires", ""),
    E("from", ""),
    E("host", ""),
    E("if-match", ""),
    E("if-modified-since", ""),
    E("if-none-match", ""),
    E("if-range", ""),
    E("if-unmodified-since", ""),
    E("last-modified", ""),
    E("link", ""),
    E("location", ""),
    E("max-forwards", ""),
    E("proxy-authenticate", ""),
    E("proxy-authorization", ""),
    E("range", ""),
    E("referer", ""),
    E("refresh", ""),
    E("retry-after", ""),
    E("server", ""),
    E("set-cookie", ""),
    E("strict-transport-security", ""),
    E("transfer-encoding", ""),
    E("user-agent", ""),
    E("vary", ""),
    E("via", ""),
    E("www-authenticate", ""),
};
#undef E
#define STATIC_ENTRIES (sizeof(static_table) / sizeof(static_table[0]))

static size_t ring(const struct hpack_sizes *t, size_t i)
{
    return (t->first + i) % HPACK_TABLE_MAX_ENTRIES;
}

static size_t entry_size(const struct hpack_sizes *t, size_t i)
{
    return (size_t)t->name_len[ring(t, i)] + t->value_len[ring(t, i)] + HPACK_ENTRY_OVERHEAD;
}

int hpack_sizes_reset(struct hpack_sizes *t, size_t capacity, size_t max_capacity)
{
    if (capacity > max_capacity || max_capacity > HPACK_TABLE_MAX_SIZE)
        return -1;
    t->first = t->num = t->size = 0;
    t->capacity = capacity;
    t->max_capacity = max_capacity;
    return 0;
}

int hpack_sizes_add_oldest(struct hpack_sizes *t, size_t name_len, size_t value_len)
{
    size_t add = name_len + value_len + HPACK_ENTRY_OVERHEAD;

    if (t->num >= HPACK_TABLE_MAX_ENTRIES || add > t->capacity - t->size)
        return -1;
    t->name_len[ring(t, t->num)] = (uint32_t)name_len;
    t->value_len[ring(t, t->num)] = (uint32_t)value_len;
    t->num++;
    t->size += add;
    return 0;
}

static void evict_oldest(struct hpack_sizes *t)
{
    t->size -= entry_size(t, t->num - 1);
    t->num--;
}

/* RFC 7541 4.4: evict until the new entry fits; one larger than the table empties it and is not added. */
static void add_newest(struct hpack_sizes *t, size_t name_len, size_t value_len)
{
    size_t add = name_len + value_len + HPACK_ENTRY_OVERHEAD;

    while (t->num != 0 && t->size + add > t->capacity)
        evict_oldest(t);
    if (add > t->capacity)
        return;
    t->first = (t->first + HPACK_TABLE_MAX_ENTRIES - 1) % HPACK_TABLE_MAX_ENTRIES;
    t->name_len[t->first] = (uint32_t)name_len;
    t->value_len[t->first] = (uint32_t)value_len;
    t->num++;
    t->size += add;
}

/* ---------------------------------------------------------------- the block */

/* The block, in at most two pieces (HEADERS and CONTINUATION payloads). */
struct block {
    const uint8_t *p, *end;
    const uint8_t *next, *next_end; /* NULL when used */
};

static size_t block_left(const struct block *b)
{
    return (size_t)(b->end - b->p) + (b->next != NULL ? (size_t)(b->next_end - b->next) : 0);
}

/* Up to n contiguous octets: how many, at *at. */
static size_t block_take(struct block *b, size_t n, const uint8_t **at)
{
    if (b->p == b->end && b->next != NULL) {
        b->p = b->next;
        b->end = b->next_end;
        b->next = b->next_end = NULL;
    }
    if (n > (size_t)(b->end - b->p))
        n = (size_t)(b->end - b->p);
    *at = b->p;
    b->p += n;
    return n;
}

static int block_octet(struct block *b, uint8_t *c)
{
    const uint8_t *at;

    if (block_take(b, 1, &at) != 1)
        return -1;
    *c = *at;
    return 0;
}

/* RFC 7541 5.1, the first octet already read; at most four octets after
 * the prefix, as h2o 2.2.5 allows.  -1 if malformed. */
static int64_t block_int(struct block *b, uint8_t first, unsigned prefix_bits)
{
    const uint8_t max = (uint8_t)((1u << prefix_bits) - 1);
    int64_t v = first & max;
    uint8_t c;

    if (v != max)
        return v;
    for (unsigned shift = 0; shift < 28; shift += 7) {
        if (block_octet(b, &c) != 0)
            return -1;
        v += (int64_t)(c & 0x7f) << shift;
        if ((c & 0x80) == 0)
            return v;
    }
    return -1;
}

/* RFC 7541 5.2: a string literal's decoded length, or -1. */
static int64_t block_string(struct block *b)
{
    uint8_t first;
    int64_t len;
    size_t left;
    unsigned state = 0;
    int64_t decoded = 0;

    if (block_octet(b, &first) != 0 || (len = block_int(b, first, 7)) < 0 || (uint64_t)len > block_left(b))
        return -1;
    if ((first & 0x80) == 0) {
        for (left = (size_t)len; left != 0;) {
            const uint8_t *at;
            left -= block_take(b, left, &at);
        }
        return len;
    }
    pthread_once(&huff_once, huff_build);
    if (!huff_ready)
        return -1;
    for (left = (size_t)len; left != 0;) {
        const uint8_t *at;
        size_t n = block_take(b, left, &at);
        ssize_t symbols = huff_symbols(at, n, &state);
        if (symbols < 0)
            return -1;
        decoded += symbols;
        left -= n;
    }
    return huff_accept[state] ? decoded : -1;
}

/* An index's name and value lengths (RFC 7541 2.3.3).  0, or -1 if out of range. */
static int lookup(const struct hpack_sizes *t, int64_t index, size_t *name_len, size_t *value_len)
{
    if (index <= 0)
        return -1;
    if ((uint64_t)index <= STATIC_ENTRIES) {
        *name_len = static_table[index - 1].name;
        *value_len = static_table[index - 1].value;
        return 0;
    }
    if ((uint64_t)index - STATIC_ENTRIES - 1 >= t->num)
        return -1;
    *name_len = t->name_len[ring(t, (size_t)index - STATIC_ENTRIES - 1)];
    *value_len = t->value_len[ring(t, (size_t)index - STATIC_ENTRIES - 1)];
    return 0;
}

/* A literal (RFC 7541 6.2) after its first octet: its name (index, or 0
 * for a new name) and value.  0, or -1 if malformed. */
static int literal(struct block *b, const struct hpack_sizes *t, int64_t index, size_t *name_len, size_t *value_len)
{
    size_t unused;
    int64_t n, v;

    if (index < 0)
        return -1;
    if (index == 0) {
        if ((n = block_string(b)) < 0)
            return -1;
        *name_len = (size_t)n;
    } else if (lookup(t, index, name_len, &unused) != 0) {
        return -1;
    }
    if ((v = block_string(b)) < 0)
        return -1;
    *value_len = (size_t)v;
    return 0;
}

/* RFC 7541 6.3: a dynamic table size update, then what it evicts.  0, or -1. */
static int size_update(struct block *b, struct hpack_sizes *t, uint8_t first)
{
    int64_t capacity = block_int(b, first, 5);

    if (capacity < 0 || (uint64_t)capacity > t->max_capacity)
        return -1;
    t->capacity = (size_t)capacity;
    while (t->num != 0 && t->size > t->capacity)
        evict_oldest(t);
    return 0;
}

/* One header field representation: *field set when it makes a header.  0, or -1 if malformed. */
static int representation(struct block *b, struct hpack_sizes *t, size_t *name_len, size_t *value_len, int *field)
{
    uint8_t c;

    *field = 0;
    if (block_octet(b, &c) != 0)
        return -1;
    if (c & 0x80) { /* indexed (6.1) */
        *field = 1;
        return lookup(t, block_int(b, c, 7), name_len, value_len);
    }
    if (c & 0x40) { /* literal with incremental indexing (6.2.1) */
        if (literal(b, t, c == 0x40 ? 0 : block_int(b, c, 6), name_len, value_len) != 0)
            return -1;
        add_newest(t, *name_len, *value_len);
        *field = 1;
        return 0;
    }
    if (c & 0x20) /* dynamic table size update (6.3); h2o 2.2.5 wants a field after it (decode_header: goto Redo) */
        return size_update(b, t, c) != 0 || block_left(b) == 0 ? -1 : 0;
    /* literal without indexing (6.2.2) or never indexed (6.2.3) */
    *field = 1;
    return literal(b, t, (c & 0x0f) == 0 ? 0 : block_int(b, c, 4), name_len, value_len);
}

enum hpack_verdict hpack_scan(struct hpack_sizes *t, const uint8_t *a, size_t alen, const uint8_t *bb, size_t blen,
                              size_t max_bytes, unsigned max_fields, struct hpack_scan_result *out)
{
    struct block b = {a, a + alen, bb, bb != NULL ? bb + blen : NULL};

    out->fields = out->bytes = 0;
    while (block_left(&b) != 0) {
        size_t name_len = 0, value_len = 0;
        int field;
        if (representation(&b, t, &name_len, &value_len, &field) != 0)
            return HPACK_MALFORMED;
        if (!field)
            continue;
        out->fields++;
        out->bytes += name_len + value_len + HPACK_ENTRY_OVERHEAD;
        if (out->fields > max_fields)
            return HPACK_TOO_MANY_FIELDS;
        if (out->bytes > max_bytes)
            return HPACK_TOO_LARGE;
    }
    return HPACK_OK;
}
