/*
 * moat_codec.c - one encoder and one strict decoder that walk the field
 * tables of moat_proto.c (moat_codec.h).  Wire format: PROTOCOL.md.
 *
 * Theory of operation:
 *   1. Frame: a 16-byte header, then the payload as TLVs (u16 tag, u32
 *      length, value); a nested group is a TLV whose value is TLVs again.
 *   2. Encode: pre hooks, then every field in table order (base fields
 *      first), then the post hook.  A writer keeps the first failure and
 *      writes nothing after it; the frame is then rewound, so a refused
 *      message appends nothing.
 *   3. Decode: a bounded cursor yields one TLV at a time.  Its tag must be
 *      in the table (a tag of 32 and above is "unknown field" unless the
 *      table says otherwise), a non-repeatable tag at most once, a repeated
 *      one at most count_max times.  The value is read by its kind: strings
 *      NUL-free UTF-8 of min..max bytes, integers of exactly their width and
 *      within their range, nested groups by their own table.  Then the
 *      required fields by group, then the table's cross-field hook.
 *   4. Errors are values: a reason string, never a partial message (the
 *      decoder frees what it took and zeroes the output).
 *
 * The decoder is the first code the privileged backend runs on another
 * process's bytes: every length is checked against what is left before it
 * is used, and every default is the fail-closed one the table names.
 */
#include "moat_codec.h"

#include <stdlib.h>
#include <string.h>

#include "moat_proto.h"

#define TLV_HEADER_SIZE 6 /* u16 tag, u32 length */

/* ---- byte order and storage ------------------------------------------- */

static void put_be(uint8_t *p, uint64_t v, size_t width)
{
    for (size_t i = 0; i < width; i++)
        p[i] = (uint8_t)(v >> (8 * (width - 1 - i)));
}

uint64_t moat_codec_get(const uint8_t *p, size_t width)
{
    uint64_t v = 0;
    for (size_t i = 0; i < width; i++)
        v = (v << 8) | p[i];
    return v;
}

static const uint8_t wire_width[] = {
    [MOAT_K_U8] = 1, [MOAT_K_U16] = 2, [MOAT_K_U32] = 4, [MOAT_K_I32] = 4, [MOAT_K_U64] = 8, [MOAT_K_LIMIT] = 8, [MOAT_K_BOOL] = 1,
};

/* An integer in its C type, widened: signed kinds sign-extended, a bool 0 or 1. */
static uint64_t load_int(uint8_t kind, const uint8_t *at)
{
    switch (kind) {
    case MOAT_K_U8:
        return *at;
    case MOAT_K_U16:
        return *(const uint16_t *)(const void *)at;
    case MOAT_K_U32:
        return *(const uint32_t *)(const void *)at;
    case MOAT_K_I32: {
        int64_t s = *(const int32_t *)(const void *)at;
        return (uint64_t)s;
    }
    case MOAT_K_BOOL:
        return *(const int *)(const void *)at != 0;
    default: /* MOAT_K_U64, MOAT_K_LIMIT */
        return *(const uint64_t *)(const void *)at;
    }
}

static void store_int(uint8_t kind, uint8_t *at, uint64_t v)
{
    switch (kind) {
    case MOAT_K_U8:
        *at = (uint8_t)v;
        break;
    case MOAT_K_U16:
        *(uint16_t *)(void *)at = (uint16_t)v;
        break;
    case MOAT_K_U32:
        *(uint32_t *)(void *)at = (uint32_t)v;
        break;
    case MOAT_K_I32:
        *(int32_t *)(void *)at = (int32_t)(uint32_t)v;
        break;
    case MOAT_K_BOOL:
        *(int *)(void *)at = (int)v;
        break;
    default:
        *(uint64_t *)(void *)at = v;
    }
}

/* A pointer member (char *, uint8_t *, an array), whatever it points to
 * (all object pointers share one representation here; the build has
 * -fno-strict-aliasing). */
static void *load_ptr(const uint8_t *at)
{
    return *(void *const *)(const void *)at;
}

static void store_ptr(uint8_t *at, void *p)
{
    *(void **)(void *)at = p;
}

static size_t item_size(const struct moat_field *f)
{
    return f->kind == MOAT_K_NEST ? f->sub->size : sizeof(char *);
}

/* ---- tables ----------------------------------------------------------- */

static size_t field_count(const struct moat_msg *m)
{
    return m->nfields + (m->base ? m->base->nfields : 0);
}

/* The i-th field of m, base fields first; *shift: where its struct starts in m's. */
static const struct moat_field *field_at(const struct moat_msg *m, size_t i, size_t *shift)
{
    size_t nbase = m->base ? m->base->nfields : 0;
    *shift = i < nbase ? m->base_off : 0;
    return i < nbase ? &m->base->fields[i] : &m->fields[i - nbase];
}

static const struct moat_field *field_by_tag(const struct moat_msg *m, uint16_t tag, size_t *index, size_t *shift)
{
    for (size_t i = 0; i < field_count(m); i++) {
        const struct moat_field *f = field_at(m, i, shift);
        if (f->tag == tag) {
            *index = i;
            return f;
        }
    }
    return NULL;
}

/* ---- writers ---------------------------------------------------------- */

struct writer {
    struct moat_buf *b;
    int failed;
    const char *why;
};

/* Keeps the first failure; a NULL reason (a hook that passed) is none. */
static void w_fail(struct writer *w, const char *why)
{
    if (why != NULL && !w->failed) {
        w->failed = 1;
        w->why = why;
    }
}

static void w_tlv(struct writer *w, uint16_t tag, const void *data, size_t len)
{
    uint8_t hdr[TLV_HEADER_SIZE];
    if (w->failed)
        return;
    if (len > MOAT_FRAME_MAX_PAYLOAD) {
        w_fail(w, "field too large");
        return;
    }
    put_be(hdr, tag, 2);
    put_be(hdr + 2, len, 4);
    if (moat_buf_append(w->b, hdr, sizeof(hdr)) != 0 || moat_buf_append(w->b, data, len) != 0)
        w_fail(w, "out of memory");
}

/* Patches the length of what was written since at (a TLV header or a frame
 * header, whose length is at at + len_at). */
static void w_patch(struct writer *w, size_t at, size_t hdr, size_t len_at, const char *too_large)
{
    size_t len = w->b->len - at - hdr;
    if (w->failed)
        return;
    if (len > MOAT_FRAME_MAX_PAYLOAD)
        w_fail(w, too_large);
    else
        put_be(w->b->data + at + len_at, len, 4);
}

static void encode_msg(struct writer *w, const struct moat_msg *m, const uint8_t *obj);

/* Whether the encoder leaves f of obj out (enum moat_omit). */
static int omitted(const struct moat_field *f, const uint8_t *obj)
{
    int64_t v;
    switch (f->omit) {
    case MOAT_O_ALWAYS:
        return 0;
    case MOAT_O_EMPTY:
        return *(const size_t *)(const void *)(obj + f->aux) == 0;
    case MOAT_O_FLAG:
        return *(const int *)(const void *)(obj + f->aux) == 0;
    default:
        break;
    }
    v = (int64_t)load_int(f->kind, obj + f->off);
    if (f->omit == MOAT_O_NEGATIVE)
        return v < 0;
    if (f->omit == MOAT_O_DEFAULT)
        return v == 0 || v == f->dflt;
    return v <= 0 || (f->omit == MOAT_O_WITH && *(const size_t *)(const void *)(obj + f->aux) == 0);
}

/* One value of f: the field itself at obj + f->off, or an item of its array. */
static void encode_one(struct writer *w, const struct moat_field *f, const uint8_t *obj, const uint8_t *at)
{
    uint8_t num[8];
    const void *p = f->kind == MOAT_K_STR || f->kind == MOAT_K_BYTES ? load_ptr(at) : NULL;
    uint64_t v;

    if (f->kind == MOAT_K_NEST) {
        size_t nest = w->b->len;
        w_tlv(w, f->tag, NULL, 0);
        encode_msg(w, f->sub, at);
        w_patch(w, nest, TLV_HEADER_SIZE, 2, "field too large");
        return;
    }
    if (f->kind == MOAT_K_STR)
        v = p ? strlen(p) : 0;
    else if (f->kind == MOAT_K_BYTES)
        v = *(const size_t *)(const void *)(obj + f->aux);
    else
        v = load_int(f->kind, at);
    if (f->enc_bad && (v < f->min || v > f->max))
        w_fail(w, f->enc_bad);
    if (f->check)
        w_fail(w, f->check(v, p, 1));
    if (f->kind == MOAT_K_STR && p == NULL)
        return; /* an absent string */
    if (f->kind == MOAT_K_STR && v > f->max) {
        w_fail(w, "string field too long");
        return;
    }
    if (p == NULL && f->kind != MOAT_K_BYTES) {
        put_be(num, v, wire_width[f->kind]);
        p = num;
        v = wire_width[f->kind];
    }
    w_tlv(w, f->tag, p, (size_t)v);
}

static void encode_field(struct writer *w, const struct moat_field *f, const uint8_t *obj)
{
    if (f->flags & MOAT_F_REPEATED) {
        size_t n = *(const size_t *)(const void *)(obj + f->aux);
        const uint8_t *items = load_ptr(obj + f->off);
        if (n > f->count_max)
            w_fail(w, f->too_many);
        for (size_t i = 0; i < n && !w->failed; i++)
            encode_one(w, f, obj, items + i * item_size(f));
    } else if (!omitted(f, obj)) {
        encode_one(w, f, obj, obj + f->off);
    }
}

static void encode_msg(struct writer *w, const struct moat_msg *m, const uint8_t *obj)
{
    if (m->pre)
        w_fail(w, m->pre(obj));
    if (m->base && m->base->pre)
        w_fail(w, m->base->pre(obj + m->base_off));
    for (size_t i = 0, shift; i < field_count(m); i++) {
        const struct moat_field *f = field_at(m, i, &shift);
        encode_field(w, f, obj + shift);
    }
    if (m->post)
        w_fail(w, m->post(obj));
}

int moat_codec_encode(struct moat_buf *out, uint8_t type, uint64_t job_id, const struct moat_msg *m, const void *obj,
                      const char **why)
{
    struct writer w = {out, 0, NULL};
    uint8_t hdr[MOAT_FRAME_HEADER_SIZE] = {MOAT_PROTO_VERSION, type};
    size_t at = out->len;

    put_be(hdr + 8, job_id, 8);
    if (moat_buf_append(out, hdr, sizeof(hdr)) != 0)
        w_fail(&w, "out of memory");
    if (m != NULL)
        encode_msg(&w, m, obj);
    w_patch(&w, at, MOAT_FRAME_HEADER_SIZE, 4, "message exceeds the frame size cap");
    if (w.failed) {
        out->len = at;
        if (why)
            *why = w.why;
        return -1;
    }
    return 0;
}

/* ---- readers ---------------------------------------------------------- */

struct reader {
    const uint8_t *p;
    size_t len;
    size_t off;
};

struct tlv {
    uint16_t tag;
    const uint8_t *val;
    size_t len;
};

/* Returns 1 with *t filled, 0 at the end, -1 if the TLV is truncated. */
static int r_next(struct reader *r, struct tlv *t, const char **why)
{
    if (r->off == r->len)
        return 0;
    if (r->len - r->off < TLV_HEADER_SIZE) {
        *why = "truncated field header";
        return -1;
    }
    t->tag = (uint16_t)moat_codec_get(r->p + r->off, 2);
    uint32_t len = (uint32_t)moat_codec_get(r->p + r->off + 2, 4);
    r->off += TLV_HEADER_SIZE;
    if (len > r->len - r->off) {
        *why = "field length exceeds message";
        return -1;
    }
    t->val = r->p + r->off;
    t->len = len;
    r->off += len;
    return 1;
}

/* A NUL-free UTF-8 string of f->min..f->max bytes, copied and terminated. */
static char *r_str(const struct moat_field *f, const struct tlv *t, const char **why)
{
    char *s;
    if (t->len > f->max)
        *why = "string field too long";
    else if (t->len < f->min)
        *why = "empty string field";
    else if (memchr(t->val, 0, t->len) != NULL)
        *why = "NUL byte in string field";
    else if (!moat_utf8_valid(t->val, t->len))
        *why = "string field is not valid UTF-8";
    else if ((s = malloc(t->len + 1)) == NULL)
        *why = "out of memory";
    else {
        memcpy(s, t->val, t->len);
        s[t->len] = '\0';
        return s;
    }
    return NULL;
}

static int decode_msg(const struct moat_msg *m, const uint8_t *payload, size_t len, uint8_t *obj, const char **why);

/* One value of f into at (the field in obj, or an item of its array). */
static int decode_one(const struct moat_field *f, const struct tlv *t, uint8_t *obj, uint8_t *at, const char **why)
{
    const char *bad = NULL;
    void *p = NULL;
    uint64_t v = t->len;

    if (f->kind == MOAT_K_NEST)
        return decode_msg(f->sub, t->val, t->len, at, why);
    if (f->kind == MOAT_K_STR) {
        if ((p = r_str(f, t, why)) == NULL)
            return -1;
        store_ptr(at, p);
    } else if (f->kind == MOAT_K_BYTES) {
        uint8_t *b = malloc(t->len ? t->len : 1);
        if (b == NULL) {
            *why = "out of memory";
            return -1;
        }
        if (t->len)
            memcpy(b, t->val, t->len);
        *(uint8_t **)(void *)at = b;
        p = b;
        *(size_t *)(void *)(obj + f->aux) = t->len;
    } else if (t->len != wire_width[f->kind]) {
        bad = "integer field has the wrong width";
    } else {
        v = moat_codec_get(t->val, t->len);
        if (f->kind == MOAT_K_LIMIT && v > (uint64_t)INT64_MAX)
            bad = "limit out of range";
        else if (f->bad && (v < f->min || v > f->max))
            bad = f->bad;
        store_int(f->kind, at, v);
    }
    if (bad == NULL && f->check)
        bad = f->check(v, p, 0);
    if (bad != NULL) {
        *why = bad;
        return -1;
    }
    return 0;
}

static int decode_field(const struct moat_field *f, const struct tlv *t, uint8_t *obj, const char **why)
{
    uint8_t *at = obj + f->off;
    if (f->flags & MOAT_F_REPEATED) {
        size_t *n = (size_t *)(void *)(obj + f->aux);
        uint8_t *items = load_ptr(at);
        if (*n >= f->count_max) {
            *why = f->too_many;
            return -1;
        }
        if (items == NULL) {
            if ((items = calloc(f->count_max, item_size(f))) == NULL) {
                *why = "out of memory";
                return -1;
            }
            store_ptr(at, items);
        }
        at = items + item_size(f) * (*n)++; /* counted now: a half-read item is freed with the rest */
    }
    if (decode_one(f, t, obj, at, why) != 0)
        return -1;
    if (f->omit == MOAT_O_FLAG)
        *(int *)(void *)(obj + f->aux) = 1;
    return 0;
}

/* The message with nothing in it yet: zero, and every table default. */
static void init(const struct moat_msg *m, uint8_t *obj)
{
    memset(obj, 0, m->size);
    for (size_t i = 0, shift; i < field_count(m); i++) {
        const struct moat_field *f = field_at(m, i, &shift);
        if (f->dflt != 0)
            store_int(f->kind, obj + shift + f->off, (uint64_t)f->dflt);
    }
    if (m->init)
        m->init(obj);
}

/* The first required group with a field not seen: its reason. */
static const char *missing(const struct moat_msg *m, uint64_t seen)
{
    for (uint8_t need = 1; need <= sizeof(m->missing) / sizeof(m->missing[0]); need++)
        for (size_t i = 0, shift; i < field_count(m); i++)
            if (field_at(m, i, &shift)->need == need && !(seen & (1ull << i)))
                return m->missing[need - 1];
    return NULL;
}

static int decode_msg(const struct moat_msg *m, const uint8_t *payload, size_t len, uint8_t *obj, const char **why)
{
    struct reader r = {payload, len, 0};
    struct tlv t, last = {0};
    const struct moat_field *only = NULL;
    const char *bad;
    uint64_t seen = 0;
    int rc;

    init(m, obj);
    while ((rc = r_next(&r, &t, why)) == 1) {
        size_t i, shift;
        const struct moat_field *f = NULL;
        if (t.tag >= 32 && !(m->flags & MOAT_M_ANY_UNKNOWN)) {
            *why = "unknown field";
            return -1;
        }
        if ((f = field_by_tag(m, t.tag, &i, &shift)) == NULL) {
            *why = m->unknown;
            return -1;
        }
        if (!(f->flags & MOAT_F_REPEATED) && (seen & (1ull << i))) {
            *why = "duplicate field";
            return -1;
        }
        seen |= 1ull << i;
        if (m->flags & MOAT_M_ONE_FIELD) {
            only = f, last = t;
            continue;
        }
        if (decode_field(f, &t, obj + shift, why) != 0)
            return -1;
    }
    if (rc < 0)
        return -1;
    if ((bad = missing(m, seen)) != NULL || (only && decode_field(only, &last, obj, why) != 0) ||
        (m->done && (bad = m->done(obj)) != NULL)) {
        if (bad)
            *why = bad;
        return -1;
    }
    if (m->flags & MOAT_M_PRESENT)
        *(int *)(void *)(obj + m->present) = 1;
    return 0;
}

int moat_codec_decode(const struct moat_msg *m, const uint8_t *payload, size_t len, void *obj, const char **why)
{
    if (decode_msg(m, payload, len, obj, why) != 0) {
        moat_codec_free(m, obj);
        return -1;
    }
    return 0;
}

/* ---- release and introspection ---------------------------------------- */

static void free_one(const struct moat_field *f, uint8_t *at)
{
    if (f->kind == MOAT_K_NEST)
        moat_codec_free(f->sub, at);
    else
        free(load_ptr(at));
}

void moat_codec_free(const struct moat_msg *m, void *obj)
{
    uint8_t *o = obj;
    for (size_t i = 0, shift; i < field_count(m); i++) {
        const struct moat_field *f = field_at(m, i, &shift);
        uint8_t *at = o + shift + f->off;
        if (f->kind != MOAT_K_STR && f->kind != MOAT_K_BYTES && f->kind != MOAT_K_NEST)
            continue;
        if (f->flags & MOAT_F_REPEATED) {
            uint8_t *items = load_ptr(at);
            size_t n = *(size_t *)(void *)(o + shift + f->aux);
            for (size_t j = 0; items && j < n; j++)
                free_one(f, items + j * item_size(f));
            free(items);
        } else {
            free_one(f, at);
        }
    }
    memset(obj, 0, m->size);
}

int moat_codec_describe(const struct moat_msg *m, size_t i, struct moat_proto_field_info *info)
{
    static const char *const kind_names[] = {
        [MOAT_K_STR] = "string", [MOAT_K_BYTES] = "bytes", [MOAT_K_U8] = "u8",     [MOAT_K_U16] = "u16", [MOAT_K_U32] = "u32",
        [MOAT_K_I32] = "i32",    [MOAT_K_U64] = "u64",     [MOAT_K_LIMIT] = "u64", [MOAT_K_BOOL] = "u8",
    };
    size_t shift;
    if (i >= field_count(m))
        return 0;
    const struct moat_field *f = field_at(m, i, &shift);
    info->message = m->name;
    info->tag = f->tag;
    info->field = f->name;
    info->type = f->kind == MOAT_K_NEST ? f->sub->name : kind_names[f->kind];
    info->required = f->need != 0;
    info->repeated = (f->flags & MOAT_F_REPEATED) != 0;
    return 1;
}
