/*
 * moat_codec.h - the table-driven TLV codec under moat_proto.c.
 *
 * Theory of operation:
 *   1. Describe: each message, and each nested group of fields (a file, a
 *      test case, a stage, a runtime, the backend's load), is one static
 *      struct moat_msg: its fields' tags, wire kinds, places in the C
 *      struct (offsetof), bounds and reasons.  moat_proto.c holds them all.
 *   2. Encode: moat_codec_encode() walks a table in order and appends one
 *      frame; the first refusal wins and nothing is left appended.
 *   3. Decode: moat_codec_decode() reads a payload against a table: an
 *      unknown tag, a second non-repeatable tag, a wrong width, an over-long
 *      or non-UTF-8 string, too many items or a missing required field is
 *      refused with its reason (errors as values); what it allocated is
 *      released and the output zeroed.
 *   4. Release: moat_codec_free() frees whatever a table says is owned.
 *   5. Introspect: moat_proto_describe() lists every table's fields, so a
 *      test holds PROTOCOL.md against the tables the code runs.
 *
 * Fail closed: a field no table names is an error, and a table's defaults
 * (dflt) are what a decoded message holds for an absent optional field.
 */
#ifndef MOAT_CODEC_H
#define MOAT_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "moat_buf.h"

/* Wire kinds.  The integers are big-endian of exactly their width. */
enum moat_kind {
    MOAT_K_STR,   /* char *: NUL-free UTF-8, length min..max */
    MOAT_K_BYTES, /* uint8_t * with its size_t length at aux */
    MOAT_K_U8,
    MOAT_K_U16,
    MOAT_K_U32,
    MOAT_K_I32, /* int32_t sent as its u32 bits */
    MOAT_K_U64,
    MOAT_K_LIMIT, /* int64_t sent as u64: never above INT64_MAX ("limit out of range") */
    MOAT_K_BOOL,  /* int sent as u8 0 or 1 */
    MOAT_K_NEST,  /* the struct of table sub, embedded (or an array of them when repeated) */
};

/* When the encoder leaves a field out (a decoded message then holds dflt). */
enum moat_omit {
    MOAT_O_ALWAYS,   /* always sent (a NULL string never is) */
    MOAT_O_NEGATIVE, /* a negative limit: not asked */
    MOAT_O_POSITIVE, /* sent only when positive */
    MOAT_O_DEFAULT,  /* not sent when 0 or dflt */
    MOAT_O_EMPTY,    /* bytes of length 0 */
    MOAT_O_FLAG,     /* sent when the int at aux is non-zero (has_code, present); decoding sets it */
    MOAT_O_WITH,     /* sent when positive and the size_t count at aux is non-zero */
};

enum {
    MOAT_F_REPEATED = 1, /* may repeat, up to count_max: an array at off, its count (size_t) at aux */
};

struct moat_field;
/* An irregular check: NULL, or the reason to refuse value v (a string's or
 * bytes' length, or an integer) with its data p; enc: 1 encoding, 0 decoding. */
typedef const char *(*moat_check_fn)(uint64_t v, const void *p, int enc);

struct moat_field {
    uint16_t tag;
    const char *name; /* as PROTOCOL.md names it */
    uint8_t kind;     /* enum moat_kind */
    size_t off;       /* the value (or the array) in the struct */
    uint8_t omit;     /* enum moat_omit */
    uint8_t flags;    /* MOAT_F_* */
    uint8_t need;     /* 0 optional; k: required, refused as the message's missing[k - 1] */
    uint16_t count_max;
    size_t aux;          /* the bytes' length, the array's count, or omit's flag or count */
    uint64_t min, max;   /* a string's length; an integer's range when bad is set */
    const char *bad;     /* the decoder's reason for an integer outside min..max */
    const char *enc_bad; /* the encoder's for the same, when it checks (NULL: it does not) */
    int64_t dflt;        /* what a decoded message holds when the field is absent */
    const char *too_many;
    const struct moat_msg *sub; /* MOAT_K_NEST */
    moat_check_fn check;
};

enum {
    MOAT_M_ANY_UNKNOWN = 1, /* a tag of 32 and above is refused with unknown too, not "unknown field" */
    MOAT_M_ONE_FIELD = 2,   /* one field: its value is read once the whole payload was */
    MOAT_M_PRESENT = 4,     /* the int at present is set once the group decoded */
};

/* A hook: NULL, or the reason to refuse the message m. */
typedef const char *(*moat_hook_fn)(const void *m);

struct moat_msg {
    const char *name; /* PROTOCOL.md's heading of its table */
    const struct moat_field *fields;
    size_t nfields;
    size_t size; /* of its C struct */
    /* Fields shared with other messages, before its own: base's table, on
     * the struct at base_off (the exec request in EXEC_REQUEST and SESSION_OPEN). */
    const struct moat_msg *base;
    size_t base_off;
    unsigned flags; /* MOAT_M_* */
    size_t present;
    const char *unknown;    /* the reason for a tag it has not */
    const char *missing[3]; /* the reasons for a missing required field, by need */
    moat_hook_fn pre;       /* the encoder's checks before the first field (base's run after m's) */
    moat_hook_fn post;      /* and after the last */
    moat_hook_fn done;      /* the decoder's cross-field checks, once every field is in */
    void (*init)(void *m);  /* the decoder's defaults no row of the table holds */
};

/* One frame of type with m's fields of obj (m NULL: an empty payload). */
int moat_codec_encode(struct moat_buf *out, uint8_t type, uint64_t job_id, const struct moat_msg *m, const void *obj,
                      const char **why);
/* obj (m->size bytes) from a payload; on failure obj is zeroed. */
int moat_codec_decode(const struct moat_msg *m, const uint8_t *payload, size_t len, void *obj, const char **why);
void moat_codec_free(const struct moat_msg *m, void *obj);
uint64_t moat_codec_get(const uint8_t *p, size_t width); /* big-endian */

/* One field of the codec's tables, for the documentation check. */
struct moat_proto_field_info {
    const char *message; /* the table: "EXEC_REQUEST", "file", "stage", ... */
    uint16_t tag;
    const char *field;
    const char *type; /* "string", "bytes", "u8", "u16", "u32", "i32", "u64", or a nested table's name */
    int required;
    int repeated;
};
/* The i-th field over every table, base fields flattened in: 1 and *info
 * filled, or 0 past the last. */
int moat_proto_describe(size_t i, struct moat_proto_field_info *info);
/* The same for table m alone. */
int moat_codec_describe(const struct moat_msg *m, size_t i, struct moat_proto_field_info *info);

#endif /* MOAT_CODEC_H */
