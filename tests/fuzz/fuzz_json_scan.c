/*
 * fuzz_json_scan.c - differential libFuzzer target: the audit writer's JSON
 * scanner (audit/json_scan.c) against jansson, the parser the verifier reads
 * the log with.
 *
 * The writer splices a body that audit_json_scan() accepts into its line
 * verbatim, without parsing it; the log's integrity rests on the scanner
 * never accepting what jansson would read otherwise.  For every input the
 * scanner accepts, the harness aborts unless:
 *
 *   1. every byte is printable ASCII (0x20-0x7e) and there is no whitespace
 *      outside strings (compact form, json_scan.h's promise);
 *   2. jansson, with the verifier's flags (JSON_REJECT_DUPLICATES |
 *      JSON_ALLOW_NUL), parses it to an object whose reals are all finite;
 *   3. the scanner's top-level members, in order, are jansson's members:
 *      the same count, each raw key (never escaped) one of jansson's keys,
 *      and each raw value text read by jansson on its own equal to
 *      jansson's value of that key;
 *   4. the line the writer would make of it (seal_line in audit_log.c: the
 *      writer's fields, the body's inner text, the mac) parses with the
 *      verifier's flags, its writer fields are the writer's, and what is
 *      left equals the body (when the body names none of the writer's
 *      fields: audit_log.c's fast_member sends those the slow way).
 *
 * Inputs the scanner declines need nothing: they go through jansson.
 *
 * Seeds: bodies like the gateway's records and the unit test's edge cases.
 * random_input writes random compact-ish JSON with the scanner's edges in
 * it (escapes, surrogates, long numbers, duplicates, depth, stray bytes),
 * so the replay reaches them without libFuzzer.
 *
 * Built as the real fuzzer with -DMOAT_FUZZ=ON, and always as part of
 * fuzz_json_scan_replay (see replay.c).  Violations abort().
 */
#include "fuzz_target.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "json_scan.h"

#define VERIFIER_FLAGS (JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL)
#define MAX_MEMBERS    (AUDIT_JSON_SCAN_MAX_KEYS + 1)

/* The writer's own names (audit_log.c's reserved[]): a body holding one at
 * the top takes the slow path, which refuses it. */
static const char *const writer_names[] = {"seq", "time", "epoch", "prev", "mac", "packet", "packet_at"};

/* seal_line's fields around the body, as it writes them. */
static const char line_head[] = "{\"seq\":1,\"time\":\"2026-12-01T00:00:00.000Z\",\"epoch\":0,"
                                "\"prev\":\"0000000000000000000000000000000000000000000000000000000000000000\"";
static const char line_tail[] = ",\"mac\":\"1111111111111111111111111111111111111111111111111111111111111111\"}";

struct member {
    const char *key, *value;
    size_t key_len, value_len;
};

struct members {
    struct member m[MAX_MEMBERS];
    size_t n;
};

static int collect(void *arg, const char *key, size_t key_len, const char *value, size_t value_len)
{
    struct members *ms = arg;
    CHECK(ms->n < MAX_MEMBERS);
    ms->m[ms->n++] = (struct member){key, value, key_len, value_len};
    return 0;
}

/* ---- the checks ------------------------------------------------------------------------------ */

/* 1: printable ASCII, and no whitespace outside strings. */
static void check_compact_ascii(const char *b, size_t len)
{
    int in_string = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)b[i];
        CHECK(c >= 0x20 && c <= 0x7e);
        if (in_string) {
            if (c == '\\')
                i++; /* the escaped character; a \u's hex digits are not quotes */
            else if (c == '"')
                in_string = 0;
        } else {
            CHECK(c != ' ');
            in_string = c == '"';
        }
    }
    CHECK(!in_string);
}

/* 2: no real jansson read is infinite or NaN (no parser overflows). */
static void check_finite(json_t *j)
{
    const char *k;
    json_t *v;
    size_t i;
    if (json_is_real(j))
        CHECK(isfinite(json_real_value(j)));
    else if (json_is_object(j))
        json_object_foreach(j, k, v) check_finite(v);
    else if (json_is_array(j))
        json_array_foreach(j, i, v) check_finite(v);
}

/* 3: the scanner's members are jansson's. */
static void check_members(json_t *obj, const struct members *ms)
{
    CHECK(ms->n == json_object_size(obj));
    for (size_t i = 0; i < ms->n; i++) {
        const struct member *m = &ms->m[i];
        CHECK(memchr(m->key, '\\', m->key_len) == NULL);
        json_t *want = json_object_getn(obj, m->key, m->key_len);
        CHECK(want != NULL);
        json_t *got = json_loadb(m->value, m->value_len, VERIFIER_FLAGS | JSON_DECODE_ANY, NULL);
        CHECK(got != NULL);
        CHECK(json_equal(got, want));
        json_decref(got);
    }
}

static int names_writer_field(const json_t *obj)
{
    for (size_t i = 0; i < sizeof(writer_names) / sizeof(writer_names[0]); i++)
        if (json_object_get(obj, writer_names[i]) != NULL)
            return 1;
    return 0;
}

/* 4: the spliced line reads back as the writer's fields plus the body. */
static void check_line(const char *b, size_t len, json_t *obj)
{
    size_t n = sizeof(line_head) - 1 + 1 + len + sizeof(line_tail) - 1;
    char *line = malloc(n);
    CHECK(line != NULL);
    char *p = line;
    memcpy(p, line_head, sizeof(line_head) - 1);
    p += sizeof(line_head) - 1;
    if (len > 2) {
        *p++ = ',';
        memcpy(p, b + 1, len - 2);
        p += len - 2;
    }
    memcpy(p, line_tail, sizeof(line_tail) - 1);
    p += sizeof(line_tail) - 1;

    json_t *j = json_loadb(line, (size_t)(p - line), VERIFIER_FLAGS, NULL);
    CHECK(json_is_object(j));
    CHECK(json_integer_value(json_object_get(j, "seq")) == 1 && json_is_integer(json_object_get(j, "epoch")));
    CHECK(json_object_get(j, "prev") != NULL && strcmp(json_string_value(json_object_get(j, "prev")),
                                                       "0000000000000000000000000000000000000000000000000000000000000000") == 0);
    static const char *const fields[] = {"seq", "time", "epoch", "prev", "mac"};
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
        CHECK(json_object_del(j, fields[i]) == 0);
    CHECK(json_equal(j, obj));
    json_decref(j);
    free(line);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *b = (const char *)data;
    struct members ms = {.n = 0};

    if (audit_json_scan(b, size, collect, &ms) != 0)
        return 0; /* declined: the writer takes the jansson path */
    check_compact_ascii(b, size);
    json_error_t jerr;
    json_t *obj = json_loadb(b, size, VERIFIER_FLAGS, &jerr);
    if (!json_is_object(obj)) {
        fprintf(stderr, "json_scan accepts what jansson refuses (%s): %.*s\n", jerr.text, (int)(size > 200 ? 200 : size), b);
        abort();
    }
    check_finite(obj);
    check_members(obj, &ms);
    if (!names_writer_field(obj))
        check_line(b, size, obj);
    json_decref(obj);
    return 0;
}

/* ===========================================================================
 * Seeds and random bodies for the replay driver
 * ======================================================================== */

static void make_seeds(fuzz_add_seed_fn *add)
{
    static const char *const seeds[] = {
        "{}",
        "{\"type\":\"request\",\"request_id\":\"r-1\",\"tenant\":\"acme\",\"decision\":\"allowed\",\"status\":200}",
        ("{\"type\":\"result\",\"run\":{\"code\":0,\"cpu_ms\":12,\"signal\":null,\"ok\":true,\"bad\":false,\"x\":-1.5e3,"
         "\"y\":0.25,\"z\":-0},\"files\":[{\"name\":\"a.py\",\"bytes\":3},{\"name\":\"b\",\"bytes\":123456789012345678}],"
         "\"e\":[],\"o\":{},\"n\":[[[1]],[2]]}"),
        "{\"msg\":\"a\\nb\\\"c\\\\d\\u0041\\/e\\t\\b\\f\\r\\u00e9\\u2028\\u0000\\u007f\\u001b\"}",
        ("{\"type\":\"denials\",\"client\":\"2001:db8:1:2::/64\",\"reason\":\"auth\",\"count\":57,"
         "\"since\":\"2026-11-29T16:40:45.123Z\",\"until\":\"2026-11-29T16:40:55.001Z\",\"statuses\":{\"401\":50,\"429\":7}}"),
        "{\"a\":1E+99,\"b\":-0.0e-01,\"c\":999999999999999.5e-99,\"d\":-999999999999999999}",
        "{\"x\":[{\"a\":1},{\"a\":2}],\"a\":3,\"\":\"\"}",
        "{\"a\":1,\"a\":2}",
        "{\"e\":\"\\ud83d\\ude00\"}",
        "{\"k\\u0041\":1}",
        "{\"a\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}",
        "{\"seq\":5,\"type\":\"start\"}",
    };
    for (size_t i = 0; i < sizeof(seeds) / sizeof(seeds[0]); i++)
        add(seeds[i], strlen(seeds[i]), 0);
}

/* A buffer being filled, that silently stops at its end. */
struct out {
    uint8_t *buf;
    size_t len, cap;
    uint32_t (*rng)(void);
};

static void put(struct out *o, const char *s)
{
    for (; *s && o->len < o->cap; s++)
        o->buf[o->len++] = (uint8_t)*s;
}

static void put_byte(struct out *o, uint8_t c)
{
    if (o->len < o->cap)
        o->buf[o->len++] = c;
}

static unsigned pick(struct out *o, unsigned n)
{
    return o->rng() % n;
}

static void gen_string(struct out *o, int key)
{
    static const char *const pieces[] = {
        "a",       "type", "seq",     "x",       " ",       "\\\"",     "\\\\",    "\\/",
        "\\b",     "\\n",  "\\u0000", "\\u0041", "\\u00e9", "\\uD800",  "\\udfff", "\\ud83d\\ude00",
        "\\uFFFF", "\\x",  "\\u12",   "\x7f",    "\x1f",    "\xc3\xa9", "\xff",    "\\",
        "'",       "{",    "]"};
    put_byte(o, '"');
    for (unsigned n = pick(o, key ? 3 : 6); n > 0; n--)
        put(o, pieces[pick(o, key && pick(o, 4) ? 4 : sizeof(pieces) / sizeof(pieces[0]))]);
    if (pick(o, 64))
        put_byte(o, '"');
}

static void gen_digits(struct out *o, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        put_byte(o, (uint8_t)('0' + pick(o, 10)));
}

static void gen_number(struct out *o)
{
    if (pick(o, 2))
        put_byte(o, '-');
    unsigned width = pick(o, 4) ? 1 + pick(o, 4) : 12 + pick(o, 10); /* often around the scanner's 15 and 18 */
    if (pick(o, 8) == 0)
        put_byte(o, '0');
    else
        put_byte(o, (uint8_t)('1' + pick(o, 9)));
    gen_digits(o, width - 1);
    if (pick(o, 3) == 0) {
        put_byte(o, '.');
        gen_digits(o, pick(o, 8) ? 1 + pick(o, 3) : pick(o, 40));
    }
    if (pick(o, 3) == 0) {
        put_byte(o, "eE"[pick(o, 2)]);
        if (pick(o, 2))
            put_byte(o, "+-"[pick(o, 2)]);
        gen_digits(o, pick(o, 5));
    }
}

static void gen_value(struct out *o, int depth);

static void gen_container(struct out *o, int depth, int object)
{
    put_byte(o, object ? '{' : '[');
    for (unsigned n = pick(o, depth > 3 ? 2 : 5), i = 0; i < n; i++) {
        if (i > 0)
            put_byte(o, ',');
        if (object) {
            gen_string(o, 1);
            put_byte(o, ':');
        }
        gen_value(o, depth + 1);
    }
    if (pick(o, 32) == 0)
        put_byte(o, ','); /* a trailing comma */
    if (pick(o, 64))
        put_byte(o, object ? '}' : ']');
}

static void gen_value(struct out *o, int depth)
{
    static const char *const words[] = {"true", "false", "null", "tru", "nulll", "True", "-", "+1", ".5", "01"};
    if (pick(o, 48) == 0)
        put_byte(o, " \t\n"[pick(o, 3)]);
    unsigned k = depth > 36 ? 3 + pick(o, 3) : pick(o, 6);
    if (depth < 40 && pick(o, 24) == 0) { /* a deep chain, past the scanner's limit sometimes */
        unsigned deep = 20 + pick(o, 20);
        for (unsigned i = 0; i < deep; i++)
            put_byte(o, '[');
        gen_value(o, depth + (int)deep);
        for (unsigned i = 0; i < deep; i++)
            put_byte(o, ']');
        return;
    }
    switch (k) {
    case 0:
    case 1:
        gen_container(o, depth, k == 0);
        break;
    case 2:
    case 3:
        gen_string(o, 0);
        break;
    case 4:
        gen_number(o);
        break;
    default:
        put(o, words[pick(o, 8) ? pick(o, 3) : pick(o, sizeof(words) / sizeof(words[0]))]);
    }
}

static size_t random_input(uint8_t *buf, size_t cap, uint32_t (*rng)(void))
{
    struct out o = {buf, 0, cap > 4096 ? 4096 : cap, rng};
    gen_container(&o, 0, 1);
    if (pick(&o, 32) == 0)
        put_byte(&o, "} \n"[pick(&o, 3)]);
    return o.len;
}

const struct fuzz_target fuzz_target = {.make_seeds = make_seeds, .random_input = random_input};
