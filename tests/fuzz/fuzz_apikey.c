/*
 * fuzz_apikey.c - libFuzzer target for the API key parser (gateway/auth/apikey.c)
 * and the Authorization header check built on it (gateway/core/auth.c): the first
 * code the gateway runs on a credential (F1 of tests/SECURITY-CHECKS.md).
 *
 * Every input is checked against the harness's own reading of the token
 * format in apikey.h (a differential oracle):
 *
 *   - apikey_parse accepts exactly the inputs of the right shape whose
 *     checksum matches, returns the key id from the token, and otherwise
 *     gives a static reason that does not point into the input;
 *   - the same input with its checksum field recomputed (so the fuzzer gets
 *     past SHA-256 and explores the shape checks) must then parse iff the
 *     shape is right;
 *   - moat_hex_decode (MOAT_HEX_LOWER, as the config reads digests) and
 *     apikey_valid_id agree with a plain definition, and decoding
 *     round-trips through moat_hex_encode;
 *   - auth_bearer, with a table holding one key, accepts exactly
 *     "Bearer" (any case) + one or more spaces + that key's token + any
 *     trailing spaces and tabs.
 *
 * Built as the real fuzzer with -DMOAT_FUZZ=ON, and always as part of
 * fuzz_apikey_replay (see replay.c).  Violations abort().
 */
#include "fuzz_target.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "auth/apikey.h"
#include "core/auth.h"
#include "config/config.h"
#include "moat_hex.h"

#define ID_OFF     APIKEY_PREFIX_LEN
#define SECRET_OFF (ID_OFF + APIKEY_ID_LEN + 1)
#define SUM_OFF    (SECRET_OFF + APIKEY_SECRET_LEN + 1)

/* The one key of the table auth_bearer looks in. */
static const char known_id[] = "0123456789ab";
static char known_token[APIKEY_TOKEN_LEN + 1];
static char known_tenant_name[] = "fuzz";
static struct gw_key known_key;
static struct gw_tenant known_tenant;
static struct gw_config known_config;

static int is_lower_hex(const uint8_t *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return 1;
}

/* The format as apikey.h describes it, minus the checksum. */
static int shape_ok(const uint8_t *t, size_t len)
{
    return len == APIKEY_TOKEN_LEN && memcmp(t, APIKEY_PREFIX, APIKEY_PREFIX_LEN) == 0 && t[SECRET_OFF - 1] == '_' &&
           t[SUM_OFF - 1] == '_' && is_lower_hex(t + ID_OFF, APIKEY_ID_LEN) && is_lower_hex(t + SECRET_OFF, APIKEY_SECRET_LEN) &&
           is_lower_hex(t + SUM_OFF, APIKEY_CHECKSUM_LEN);
}

/* The checksum field of a token-sized buffer: first 4 bytes of SHA-256 of what precedes it. */
static void checksum_of(const uint8_t *t, char out[APIKEY_CHECKSUM_LEN + 1])
{
    uint8_t d[APIKEY_DIGEST_LEN];

    CHECK(apikey_digest((const char *)t, SUM_OFF - 1, d) == 0);
    moat_hex_encode(d, APIKEY_CHECKSUM_LEN / 2, out);
}

static void check_parse(const uint8_t *t, size_t len)
{
    char id[APIKEY_ID_LEN + 1], sum[APIKEY_CHECKSUM_LEN + 1];
    const char *why = NULL;
    int want = 0, rc;

    if (shape_ok(t, len)) {
        checksum_of(t, sum);
        want = memcmp(sum, t + SUM_OFF, APIKEY_CHECKSUM_LEN) == 0;
    }
    memset(id, 'Z', sizeof(id));
    rc = apikey_parse((const char *)t, len, id, &why);
    CHECK(rc == 0 || rc == -1);
    CHECK((rc == 0) == want);
    if (rc == 0) {
        CHECK(memcmp(id, t + ID_OFF, APIKEY_ID_LEN) == 0);
        CHECK(id[APIKEY_ID_LEN] == '\0');
        CHECK(apikey_valid_id(id, strlen(id)));
    } else {
        /* a static reason for the log: never the caller's bytes */
        CHECK(why != NULL);
        CHECK(!((const uint8_t *)why >= t && (const uint8_t *)why < t + len));
        CHECK(strlen(why) > 0 && strlen(why) < 128);
    }
}

static void check_hex(const uint8_t *data, size_t size)
{
    uint8_t out[64];
    char back[2 * sizeof(out) + 1];

    if (size <= 2 * sizeof(out)) {
        int want = size % 2 == 0 && is_lower_hex(data, size);
        int rc = moat_hex_decode((const char *)data, size, out, MOAT_HEX_LOWER);
        CHECK((rc == 0) == want);
        if (rc == 0) {
            moat_hex_encode(out, size / 2, back);
            CHECK(memcmp(back, data, size) == 0 && back[size] == '\0');
        }
    }
    CHECK(apikey_valid_id((const char *)data, size) == (size == APIKEY_ID_LEN && is_lower_hex(data, size)));
}

static void setup(void)
{
    static int done;
    static const uint8_t secret[APIKEY_SECRET_BYTES] = {0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa,
                                                        0xbb, 0xcc, 0xdd, 0xee, 0xff, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab,
                                                        0xcd, 0xef, 0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54, 0x32, 0x10};
    char sum[APIKEY_CHECKSUM_LEN + 1];

    if (done)
        return;
    done = 1;
    memcpy(known_token, APIKEY_PREFIX, APIKEY_PREFIX_LEN);
    memcpy(known_token + ID_OFF, known_id, APIKEY_ID_LEN);
    known_token[SECRET_OFF - 1] = '_';
    moat_hex_encode(secret, sizeof(secret), known_token + SECRET_OFF);
    known_token[SUM_OFF - 1] = '_';
    checksum_of((const uint8_t *)known_token, sum);
    memcpy(known_token + SUM_OFF, sum, sizeof(sum)); /* with the terminator */
    CHECK(strlen(known_token) == APIKEY_TOKEN_LEN);

    memcpy(known_key.id, known_id, sizeof(known_key.id));
    CHECK(apikey_digest(known_token, APIKEY_TOKEN_LEN, known_key.sha256) == 0);
    known_key.tenant = 0;
    known_key.scopes = POLICY_EP_ALL;
    known_tenant.name = known_tenant_name;
    known_config.tenants = &known_tenant;
    known_config.ntenants = 1;
    known_config.keys = &known_key;
    known_config.nkeys = 1;
    /* the lookups go through the indexes a load builds (config_index.h) */
    CHECK(gw_index_add(&known_config.key_index, gw_index_hash(known_id, APIKEY_ID_LEN), 0) == 0);
    CHECK(gw_index_add(&known_config.tenant_index, gw_index_hash(known_tenant_name, strlen(known_tenant_name)), 0) == 0);
}

/* "Bearer" in any case, one or more spaces, then exactly the known token,
 * then any spaces and tabs (a field value's trailing white space, which h2o
 * keeps: RFC 9110 5.5). */
static int bearer_ok(const uint8_t *v, size_t len)
{
    size_t i = 6;

    while (len > 0 && (v[len - 1] == ' ' || v[len - 1] == '\t'))
        len--;
    if (len <= 6 || strncasecmp((const char *)v, "Bearer", 6) != 0 || v[6] != ' ')
        return 0;
    while (i < len && v[i] == ' ')
        i++;
    return len - i == APIKEY_TOKEN_LEN && memcmp(v + i, known_token, APIKEY_TOKEN_LEN) == 0;
}

static void check_bearer(const uint8_t *data, size_t size)
{
    const char *why = NULL;
    const struct gw_key *k = auth_bearer(&known_config, (const char *)data, size, &why);

    if (bearer_ok(data, size)) {
        CHECK(k == &known_key);
    } else {
        CHECK(k == NULL);
        CHECK(why != NULL);
        CHECK(!((const uint8_t *)why >= data && (const uint8_t *)why < data + size));
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    check_parse(data, size);
    if (size == APIKEY_TOKEN_LEN) {
        /* the same bytes with a correct checksum: reaches the shape checks' success path */
        uint8_t fixed[APIKEY_TOKEN_LEN];
        char sum[APIKEY_CHECKSUM_LEN + 1];
        memcpy(fixed, data, size);
        checksum_of(fixed, sum);
        memcpy(fixed + SUM_OFF, sum, APIKEY_CHECKSUM_LEN);
        check_parse(fixed, size);
    }
    check_hex(data, size);
    check_bearer(data, size);
    if (size == 0) {
        const char *why = NULL;
        CHECK(auth_bearer(&known_config, NULL, 0, &why) == NULL && why != NULL);
    }
    return 0;
}

static void make_seeds(fuzz_add_seed_fn *add)
{
    char buf[256];

    setup();
    add(known_token, APIKEY_TOKEN_LEN, 0);
    snprintf(buf, sizeof(buf), "Bearer %s", known_token);
    add(buf, strlen(buf), 0);
    snprintf(buf, sizeof(buf), "bEARER    %s", known_token);
    add(buf, strlen(buf), 0);
    snprintf(buf, sizeof(buf), "Bearer %s \t ", known_token); /* trailing white space, trimmed */
    add(buf, strlen(buf), 0);
    /* right shape and checksum, unknown id */
    memcpy(buf, known_token, APIKEY_TOKEN_LEN);
    memcpy(buf + ID_OFF, "fedcba987654", APIKEY_ID_LEN);
    checksum_of((const uint8_t *)buf, buf + SUM_OFF);
    add(buf, APIKEY_TOKEN_LEN, 0);
    memmove(buf + 7, buf, APIKEY_TOKEN_LEN);
    memcpy(buf, "Bearer ", 7);
    add(buf, APIKEY_TOKEN_LEN + 7, 0);
    /* the known id with another secret (right checksum, wrong digest) */
    snprintf(buf, sizeof(buf), "Bearer %s", known_token);
    buf[7 + SECRET_OFF] = buf[7 + SECRET_OFF] == '0' ? '1' : '0';
    checksum_of((const uint8_t *)buf + 7, buf + 7 + SUM_OFF);
    add(buf, strlen(buf), 0);
    /* other shapes */
    add(known_id, APIKEY_ID_LEN, 0);
    add("Bearer", 6, 0);
    add("Bearer ", 7, 0);
    add("Basic dXNlcjpwYXNz", 18, 0);
    add("Bearer eyJhbGciOiJIUzI1NiJ9.eyJ0ZW5hbnQiOiJ4In0.c2ln", 52, 0);
    add("", 0, 0);
}

const struct fuzz_target fuzz_target = {.make_seeds = make_seeds};
