/*
 * test_proto_doc.c - PROTOCOL.md's field tables against the codec's own
 * (moat_proto_describe(), moat_codec.h), both ways.
 *
 * Theory of operation:
 *   1. Read: a field table is a Markdown table whose header is
 *      "| tag | field | type | presence | rule |"; it documents the table
 *      its nearest heading names ("### EXEC_REQUEST", "#### file (...)":
 *      the words before " (").  A row "| 1–11, 14–18 | (exec request) |"
 *      stands for EXEC_REQUEST's rows of those tags.
 *   2. Compare: every codec field has a row of the same tag, name, type
 *      and presence ("required", "optional", "repeated", "required,
 *      repeated"); every row is a codec field; no table is documented twice.
 *   3. Prove it can fail: the same check over the real text mutated (a
 *      type changed, a row dropped, a row added, a presence flipped, a
 *      table renamed) must find a problem each time.
 *
 * Problems are collected as lines of a report, printed on failure.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "moat_codec.h"

#ifndef MOAT_SOURCE_DIR
#error "MOAT_SOURCE_DIR must name the checkout"
#endif
#define PROTOCOL_MD MOAT_SOURCE_DIR "/backend/protocol/PROTOCOL.md"

#define MAX_ROWS 256
#define CELL     96

struct row {
    char message[CELL], field[CELL], type[CELL], presence[CELL];
    unsigned tag;
};

struct doc {
    struct row rows[MAX_ROWS];
    size_t n;
    char tables[64][CELL]; /* the headings that have a table */
    size_t ntables;
    char report[8192];
    int problems;
};

static void problem(struct doc *d, const char *fmt, ...)
{
    size_t at = strlen(d->report);
    va_list ap;
    va_start(ap, fmt);
    if (at + 2 < sizeof(d->report)) {
        vsnprintf(d->report + at, sizeof(d->report) - at - 1, fmt, ap);
        strcat(d->report, "\n");
    }
    va_end(ap);
    d->problems++;
}

/* Copies the text between s and e, trimmed, into out. */
static void trim_copy(char *out, const char *s, const char *e)
{
    while (s < e && (*s == ' ' || *s == '\t'))
        s++;
    while (e > s && (e[-1] == ' ' || e[-1] == '\t'))
        e--;
    size_t n = (size_t)(e - s) < CELL - 1 ? (size_t)(e - s) : CELL - 1;
    memcpy(out, s, n);
    out[n] = '\0';
}

/* The cells of a table line "| a | b | ... |": up to max of them. */
static size_t cells(const char *line, const char *end, char out[][CELL], size_t max)
{
    size_t n = 0;
    const char *p = line + 1; /* past the first '|' */
    while (p < end && n < max) {
        const char *bar = memchr(p, '|', (size_t)(end - p));
        if (bar == NULL)
            break;
        trim_copy(out[n++], p, bar);
        p = bar + 1;
    }
    return n;
}

static const struct row *find_row(const struct doc *d, const char *message, unsigned tag)
{
    for (size_t i = 0; i < d->n; i++)
        if (d->rows[i].tag == tag && strcmp(d->rows[i].message, message) == 0)
            return &d->rows[i];
    return NULL;
}

static void add_row(struct doc *d, const char *message, unsigned tag, const char *field, const char *type, const char *presence)
{
    if (find_row(d, message, tag)) {
        problem(d, "%s: tag %u documented twice", message, tag);
        return;
    }
    if (d->n == MAX_ROWS) {
        problem(d, "more than %d rows", MAX_ROWS);
        return;
    }
    struct row *r = &d->rows[d->n++];
    snprintf(r->message, CELL, "%s", message);
    snprintf(r->field, CELL, "%s", field);
    snprintf(r->type, CELL, "%s", type);
    snprintf(r->presence, CELL, "%s", presence);
    r->tag = tag;
}

/* "1–11, 14–18" (en dash or '-'): each tag in turn into tags; the count, or -1. */
static int tag_list(const char *s, unsigned *tags, int max)
{
    int n = 0;
    while (*s) {
        char *e;
        unsigned long lo = strtoul(s, &e, 10), hi;
        if (e == s)
            return -1;
        s = e;
        if (strncmp(s, "\xe2\x80\x93", 3) == 0 || *s == '-') {
            s += *s == '-' ? 1 : 3;
            hi = strtoul(s, &e, 10);
            if (e == s)
                return -1;
            s = e;
        } else {
            hi = lo;
        }
        for (unsigned long t = lo; t <= hi && n < max; t++)
            tags[n++] = (unsigned)t;
        while (*s == ',' || *s == ' ')
            s++;
    }
    return n;
}

/* One row of the table under heading. */
static void doc_row(struct doc *d, const char *heading, char c[][CELL], size_t nc)
{
    unsigned tags[64];
    int nt = tag_list(c[0], tags, 64);
    if (nc < 5 || nt < 1) {
        problem(d, "%s: a row that is not \"| tag | field | type | presence | rule |\" (tag \"%s\")", heading, c[0]);
        return;
    }
    if (strcmp(c[1], "(exec request)") == 0) { /* EXEC_REQUEST's rows of those tags */
        for (int i = 0; i < nt; i++) {
            const struct row *r = find_row(d, "EXEC_REQUEST", tags[i]);
            if (r == NULL)
                problem(d, "%s: tag %u is not an EXEC_REQUEST row", heading, tags[i]);
            else
                add_row(d, heading, tags[i], r->field, r->type, r->presence);
        }
    } else if (nt != 1) {
        problem(d, "%s: a range of tags for one field (%s)", heading, c[1]);
    } else {
        add_row(d, heading, tags[0], c[1], c[2], c[3]);
    }
}

/* Reads every field table of text into d. */
static void read_doc(struct doc *d, const char *text)
{
    char heading[CELL] = "";
    const char *p = text;
    int in_table = 0;

    while (*p) {
        const char *end = strchr(p, '\n');
        if (end == NULL)
            end = p + strlen(p);
        char c[8][CELL];
        if (*p == '#') {
            const char *s = p;
            while (*s == '#')
                s++;
            const char *paren = strstr(s, " (");
            trim_copy(heading, s, paren && paren < end ? paren : end);
            in_table = 0;
        } else if (*p == '|' && !in_table) {
            size_t nc = cells(p, end, c, 8);
            if (nc >= 3 && strcmp(c[0], "tag") == 0 && strcmp(c[1], "field") == 0) {
                if (nc != 5 || strcmp(c[2], "type") != 0 || strcmp(c[3], "presence") != 0 || strcmp(c[4], "rule") != 0)
                    problem(d, "%s: the header is not \"| tag | field | type | presence | rule |\"", heading);
                for (size_t i = 0; i < d->ntables; i++)
                    if (strcmp(d->tables[i], heading) == 0)
                        problem(d, "%s: a second field table under one heading", heading);
                if (d->ntables < 64)
                    snprintf(d->tables[d->ntables++], CELL, "%s", heading);
                in_table = 2; /* the separator line next */
            } else {
                in_table = 1; /* another kind of table: skipped */
            }
        } else if (*p == '|' && in_table == 2) {
            in_table = 3;
        } else if (*p == '|' && in_table == 3) {
            size_t nc = cells(p, end, c, 8);
            doc_row(d, heading, c, nc);
        } else if (*p != '|') {
            in_table = 0;
        }
        p = *end ? end + 1 : end;
    }
}

static const char *presence(const struct moat_proto_field_info *f)
{
    if (f->required)
        return f->repeated ? "required, repeated" : "required";
    return f->repeated ? "repeated" : "optional";
}

/* Reads text and holds it against the codec: the number of problems. */
static int check_doc(struct doc *d, const char *text)
{
    struct moat_proto_field_info f;

    memset(d, 0, sizeof(*d));
    read_doc(d, text);
    for (size_t i = 0; moat_proto_describe(i, &f); i++) {
        const struct row *r = find_row(d, f.message, f.tag);
        if (r == NULL) {
            problem(d, "%s tag %u (%s) is not documented", f.message, f.tag, f.field);
            continue;
        }
        if (strcmp(r->field, f.field) != 0)
            problem(d, "%s tag %u: documented as \"%s\", the codec's \"%s\"", f.message, f.tag, r->field, f.field);
        if (strcmp(r->type, f.type) != 0)
            problem(d, "%s tag %u (%s): type \"%s\", the codec's \"%s\"", f.message, f.tag, f.field, r->type, f.type);
        if (strcmp(r->presence, presence(&f)) != 0)
            problem(d, "%s tag %u (%s): presence \"%s\", the codec's \"%s\"", f.message, f.tag, f.field, r->presence, presence(&f));
    }
    for (size_t i = 0; i < d->n; i++) {
        const struct row *r = &d->rows[i];
        int known = 0;
        for (size_t j = 0; !known && moat_proto_describe(j, &f); j++)
            known = f.tag == r->tag && strcmp(f.message, r->message) == 0;
        if (!known)
            problem(d, "%s tag %u (%s) is documented but not in the codec", r->message, r->tag, r->field);
    }
    return d->problems;
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    assert_true(n > 0);
    rewind(f);
    char *s = malloc((size_t)n + 1);
    assert_non_null(s);
    assert_int_equal(fread(s, 1, (size_t)n, f), (size_t)n);
    s[n] = '\0';
    fclose(f);
    return s;
}

static struct doc doc;

static void test_protocol_md_matches_the_tables(void **state)
{
    (void)state;
    char *text = read_file(PROTOCOL_MD);
    if (check_doc(&doc, text) != 0) {
        print_error("%s", doc.report);
        fail_msg("PROTOCOL.md and the codec's tables differ in %d places (above)", doc.problems);
    }
    assert_true(doc.n >= 80); /* the tables were found at all */
    free(text);
}

/* text with the first occurrence of from replaced by to (which must occur). */
static char *replaced(const char *text, const char *from, const char *to)
{
    const char *at = strstr(text, from);
    assert_non_null(at);
    size_t n = strlen(text) - strlen(from) + strlen(to);
    char *s = malloc(n + 1);
    assert_non_null(s);
    memcpy(s, text, (size_t)(at - text));
    strcpy(s + (at - text), to);
    strcat(s, at + strlen(from));
    return s;
}

static void test_the_check_finds_a_mutated_row(void **state)
{
    (void)state;
    static const struct {
        const char *from, *to;
    } mutations[] = {
        {"| 6   | status  | u8     | required |", "| 6   | status  | u16    | required |"}, /* a type */
        {"| 2   | offset | u64  | required |", ""},                                         /* a row dropped */
        {"| 2   | message | string | required |", "| 2   | message | string | optional |"}, /* a presence */
        {"| 24  | output_bytes |", "| 25  | output_bytes |"},                               /* a tag */
        {"| 3   | alias", "| 3   | aliases"},                                               /* a name */
        {"| 1   | bytes | u32  | required |", "| 1   | bytes | u32  | required | 1 |\n| 2   | more  | u8   | optional |"},
        {"#### load", "#### backend load"}, /* a table no codec table is */
        {"1–11, 14–18", "1–12, 14–18"},     /* SESSION_OPEN taking test cases */
    };
    char *text = read_file(PROTOCOL_MD);
    for (size_t i = 0; i < sizeof(mutations) / sizeof(mutations[0]); i++) {
        char *m = replaced(text, mutations[i].from, mutations[i].to);
        if (check_doc(&doc, m) == 0)
            fail_msg("mutation %zu (\"%s\") went unnoticed", i, mutations[i].from);
        free(m);
    }
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_protocol_md_matches_the_tables),
        cmocka_unit_test(test_the_check_finds_a_mutated_row),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
