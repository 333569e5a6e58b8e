/*
 * test_gateway_apikey.c - API key token format: generation, strict parsing,
 * digests.  Runs the real apikey.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "auth/apikey.h"
#include "moat_hex.h"

static void make_token(char token[APIKEY_TOKEN_LEN + 1], const char *id)
{
    const char *why = NULL;

    assert_int_equal(apikey_generate(id, token, &why), 0);
    assert_int_equal(strlen(token), APIKEY_TOKEN_LEN);
}

/* Recompute the checksum of a token whose body was edited on purpose. */
static void fix_checksum(char *token)
{
    uint8_t d[APIKEY_DIGEST_LEN];
    char hex[APIKEY_DIGEST_HEX + 1];
    size_t body = APIKEY_TOKEN_LEN - APIKEY_CHECKSUM_LEN - 1;

    assert_int_equal(apikey_digest(token, body, d), 0);
    moat_hex_encode(d, 4, hex);
    memcpy(token + body + 1, hex, APIKEY_CHECKSUM_LEN);
}

static void test_round_trip(void **state)
{
    char token[APIKEY_TOKEN_LEN + 1], id[APIKEY_ID_LEN + 1];
    const char *why = NULL;

    make_token(token, "0123456789ab");
    assert_memory_equal(token, "moat_0123456789ab_", 18);
    assert_int_equal(token[APIKEY_TOKEN_LEN - APIKEY_CHECKSUM_LEN - 1], '_');
    assert_int_equal(apikey_parse(token, strlen(token), id, &why), 0);
    assert_string_equal(id, "0123456789ab");

    /* A random id is valid lowercase hex too, and two tokens differ. */
    {
        char t2[APIKEY_TOKEN_LEN + 1], id2[APIKEY_ID_LEN + 1];
        make_token(t2, NULL);
        assert_int_equal(apikey_parse(t2, strlen(t2), id2, &why), 0);
        assert_true(apikey_valid_id(id2, strlen(id2)));
        assert_memory_not_equal(token + 18, t2 + 18, APIKEY_SECRET_LEN);
    }
}

static void test_generate_rejects_bad_id(void **state)
{
    char token[APIKEY_TOKEN_LEN + 1];
    const char *why = NULL;

    assert_int_equal(apikey_generate("0123456789AB", token, &why), -1);
    assert_non_null(why);
    assert_int_equal(apikey_generate("0123", token, &why), -1);
    assert_int_equal(apikey_generate("0123456789ag", token, &why), -1);
}

static void expect_reject(const char *token, size_t len)
{
    char id[APIKEY_ID_LEN + 1];
    const char *why = NULL;

    assert_int_equal(apikey_parse(token, len, id, &why), -1);
    assert_non_null(why);
}

static void test_malformed(void **state)
{
    char good[APIKEY_TOKEN_LEN + 1], t[APIKEY_TOKEN_LEN + 2];

    make_token(good, "abcdefabcdef");

    /* wrong prefix (checksum recomputed so only the prefix is wrong) */
    memcpy(t, good, sizeof(good));
    memcpy(t, "mote_", 5);
    fix_checksum(t);
    expect_reject(t, APIKEY_TOKEN_LEN);

    /* too short, too long, empty */
    expect_reject(good, APIKEY_TOKEN_LEN - 1);
    memcpy(t, good, APIKEY_TOKEN_LEN);
    t[APIKEY_TOKEN_LEN] = '0';
    t[APIKEY_TOKEN_LEN + 1] = '\0';
    expect_reject(t, APIKEY_TOKEN_LEN + 1);
    expect_reject("", 0);
    expect_reject(NULL, 0);

    /* upper-case hex in the secret, checksum consistent */
    memcpy(t, good, sizeof(good));
    t[20] = 'A';
    fix_checksum(t);
    expect_reject(t, APIKEY_TOKEN_LEN);

    /* non-hex in the id */
    memcpy(t, good, sizeof(good));
    t[6] = 'z';
    fix_checksum(t);
    expect_reject(t, APIKEY_TOKEN_LEN);

    /* separator replaced */
    memcpy(t, good, sizeof(good));
    t[APIKEY_PREFIX_LEN + APIKEY_ID_LEN] = '-';
    expect_reject(t, APIKEY_TOKEN_LEN);

    /* one secret digit changed: bad checksum */
    memcpy(t, good, sizeof(good));
    t[30] = t[30] == '0' ? '1' : '0';
    expect_reject(t, APIKEY_TOKEN_LEN);

    /* checksum itself changed */
    memcpy(t, good, sizeof(good));
    t[APIKEY_TOKEN_LEN - 1] = t[APIKEY_TOKEN_LEN - 1] == '0' ? '1' : '0';
    expect_reject(t, APIKEY_TOKEN_LEN);

    /* embedded NUL */
    memcpy(t, good, sizeof(good));
    t[40] = '\0';
    expect_reject(t, APIKEY_TOKEN_LEN);
}

static void test_digest_compare(void **state)
{
    char a[APIKEY_TOKEN_LEN + 1], b[APIKEY_TOKEN_LEN + 1];
    uint8_t da[APIKEY_DIGEST_LEN], da2[APIKEY_DIGEST_LEN], db[APIKEY_DIGEST_LEN];

    make_token(a, "000000000001");
    make_token(b, "000000000001");
    assert_int_equal(apikey_digest(a, APIKEY_TOKEN_LEN, da), 0);
    assert_int_equal(apikey_digest(a, APIKEY_TOKEN_LEN, da2), 0);
    assert_int_equal(apikey_digest(b, APIKEY_TOKEN_LEN, db), 0);
    assert_true(apikey_digest_equal(da, da2));
    assert_false(apikey_digest_equal(da, db)); /* same id, different secret */
    da2[31] ^= 1;
    assert_false(apikey_digest_equal(da, da2));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_generate_rejects_bad_id),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_digest_compare),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
