/*
 * test_box_pack.c - the backend's reading of a box's pack (box_pack_parse,
 * S31): what a compile stage left in /box, as the box's init sends it, is
 * untrusted bytes; every length, count, name and flag is checked before a
 * test case's box gets them as files.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "box.h"
#include "box_internal.h"

struct pk {
    uint8_t *b;
    size_t n;
};

static void put(struct pk *p, const void *v, size_t n)
{
    p->b = realloc(p->b, p->n + n + 1);
    assert_non_null(p->b);
    memcpy(p->b + p->n, v, n);
    p->n += n;
}

static void put_u32(struct pk *p, uint32_t v)
{
    put(p, &v, sizeof(v));
}

static void start(struct pk *p, uint32_t outcome, uint32_t count)
{
    p->b = NULL;
    p->n = 0;
    put_u32(p, outcome);
    put_u32(p, count);
}

static void entry(struct pk *p, const char *name, uint32_t exec, const char *content)
{
    put_u32(p, (uint32_t)strlen(name) + 1);
    put(p, name, strlen(name) + 1);
    put_u32(p, exec);
    put_u32(p, (uint32_t)strlen(content));
    put(p, content, strlen(content));
}

/* Parses p (given away) and expects rc, and a message holding needle. */
static void expect(struct pk *p, int rc, const char *needle)
{
    struct box_pack pack;
    struct errbuf e;

    memset(&e, 0, sizeof(e));
    assert_int_equal(box_pack_parse(&pack, p->b, p->n, &e), rc);
    if (needle != NULL && strstr(e.msg, needle) == NULL)
        fail_msg("message \"%s\" does not mention \"%s\"", e.msg, needle);
    box_pack_free(&pack);
    assert_null(pack.buf);
}

static void test_valid_pack(void **state)
{
    struct pk p;
    struct box_pack pack;
    struct errbuf e;
    (void)state;

    start(&p, PACK_OK, 3);
    entry(&p, "a.out", 1,
          "\x7f"
          "ELF");
    entry(&p, "src/main.c", 0, "int main(void){}");
    entry(&p, "empty", 0, "");
    assert_int_equal(box_pack_parse(&pack, p.b, p.n, &e), 0);
    assert_int_equal(pack.nfiles, 3);
    assert_string_equal(pack.files[0].name, "a.out");
    assert_int_equal(pack.exec[0], 1);
    assert_int_equal(pack.files[0].content_len, 4);
    assert_memory_equal(pack.files[0].content,
                        "\x7f"
                        "ELF",
                        4);
    assert_string_equal(pack.files[1].name, "src/main.c");
    assert_int_equal(pack.exec[1], 0);
    assert_int_equal(pack.files[2].content_len, 0);
    box_pack_free(&pack);

    /* nothing left in /box: an empty pack */
    start(&p, PACK_OK, 0);
    expect(&p, 0, NULL);
}

static void test_outcomes(void **state)
{
    struct pk p;
    (void)state;

    start(&p, PACK_TOO_LARGE, 0);
    expect(&p, BOX_PACK_REFUSED, "more than 16 MiB");
    start(&p, PACK_TOO_MANY, 0);
    expect(&p, BOX_PACK_REFUSED, "more than 256 files");
    start(&p, PACK_TOO_DEEP, 0);
    expect(&p, BOX_PACK_REFUSED, "deeper than the path depth limit");
    start(&p, PACK_BAD_NAME, 0);
    expect(&p, BOX_PACK_REFUSED, "longer than 255 bytes");
    start(&p, PACK_IO, 0);
    expect(&p, -1, "could not read /box");
    start(&p, 99, 0);
    expect(&p, -1, "could not read /box");
}

/* Names by the request files' rule: refused for the client, naming the rule. */
static void test_names(void **state)
{
    static const struct {
        const char *name, *needle;
    } bad[] = {
        {"../x", "'..'"},        {"a/./b", "'.'"},  {"/etc/passwd", "relative path"}, {"-o", "begin with"},
        {"@opts", "begin with"}, {"a//b", "empty"}, {"a\nb", "control characters"},   {"a/b/c/d/e/f/g/h/i", "components"},
    };
    struct pk p;
    (void)state;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        start(&p, PACK_OK, 1);
        entry(&p, bad[i].name, 0, "x");
        expect(&p, BOX_PACK_REFUSED, bad[i].needle);
    }
    /* a repeat, and a name that is another's directory: init never sends them */
    start(&p, PACK_OK, 2);
    entry(&p, "a", 0, "");
    entry(&p, "a", 0, "");
    expect(&p, -1, "repeats or nests");
    start(&p, PACK_OK, 2);
    entry(&p, "a/b", 0, "");
    entry(&p, "a", 0, "");
    expect(&p, -1, "repeats or nests");
}

static void test_structure(void **state)
{
    struct pk p;
    uint32_t v;
    (void)state;

    /* truncated header */
    p.b = malloc(4);
    p.n = 4;
    memset(p.b, 0, 4);
    expect(&p, -1, "truncated");
    /* more entries announced than sent */
    start(&p, PACK_OK, 2);
    entry(&p, "a", 0, "x");
    expect(&p, -1, "bad entry 1");
    /* more than the cap */
    start(&p, PACK_OK, BOX_PACK_MAX_FILES + 1);
    expect(&p, -1, "files");
    /* an exec flag other than 0 or 1 */
    start(&p, PACK_OK, 1);
    entry(&p, "a", 2, "x");
    expect(&p, -1, "bad entry 0");
    /* a name without its NUL, or empty */
    start(&p, PACK_OK, 1);
    put_u32(&p, 1);
    put(&p, "a", 1);
    put_u32(&p, 0);
    put_u32(&p, 0);
    expect(&p, -1, "bad entry 0");
    start(&p, PACK_OK, 1);
    put_u32(&p, 0);
    put_u32(&p, 0);
    put_u32(&p, 0);
    expect(&p, -1, "bad entry 0");
    /* a content length past the end */
    start(&p, PACK_OK, 1);
    put_u32(&p, 2);
    put(&p, "a", 2);
    put_u32(&p, 0);
    v = 1000;
    put_u32(&p, v);
    put(&p, "xy", 2);
    expect(&p, -1, "bad entry 0");
    /* a name length past the end */
    start(&p, PACK_OK, 1);
    put_u32(&p, 0xffffffffu);
    expect(&p, -1, "bad entry 0");
    /* bytes left over */
    start(&p, PACK_OK, 1);
    entry(&p, "a", 0, "x");
    put(&p, "z", 1);
    expect(&p, -1, "trailing bytes");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_pack),
        cmocka_unit_test(test_outcomes),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_structure),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
