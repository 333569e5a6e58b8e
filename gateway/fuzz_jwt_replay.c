/*
 * fuzz_jwt_replay.c - run the fuzz_jwt_auth target over generated inputs.
 *
 * Builds one valid token per issuer of the fuzz target's fixed set (signed
 * with libjwt), checks each verifies, then feeds LLVMFuzzerTestOneInput every
 * truncation and every single-bit flip of each, plus a few hand-made
 * malformed tokens, and requires that none of the mutants verifies.
 *
 *   test_jwt_fuzz_replay [--write-seeds DIR] [FILE...]
 * replays the generated inputs (ctest unit_gateway_jwt_fuzz_replay), writes
 * the seeds into DIR as a starting corpus if asked, and feeds the target each
 * FILE (e.g. a crash- file from the fuzzer) with no expectation but survival.
 */
#include "fuzz_jwt_auth.c"

#include <errno.h>
#include <sys/stat.h>

static char *replay_sign(jwt_alg_t alg, const unsigned char *key, size_t keylen, const char *kid, const char *grants)
{
    jwt_t *jwt = NULL;
    if (jwt_new(&jwt) != 0 || jwt_add_header(jwt, "kid", kid) != 0 || jwt_add_grants_json(jwt, grants) != 0 ||
        jwt_set_alg(jwt, alg, key, (int)keylen) != 0) {
        fprintf(stderr, "replay: cannot build token\n");
        exit(1);
    }
    char *t = jwt_encode_str(jwt);
    jwt_free(jwt);
    if (t == NULL) {
        fprintf(stderr, "replay: jwt_encode_str failed\n");
        exit(1);
    }
    return t;
}

static int replay_accepts(const char *t, size_t len)
{
    struct jwt_identity id;
    const char *why = NULL;
    return jwt_verify(fuzz_issuers, 3, t, len, FUZZ_NOW, &id, &why) == 0;
}

static unsigned long replay_runs, replay_bad;

static void replay_one(const char *t, size_t len, int expect_accept)
{
    LLVMFuzzerTestOneInput((const uint8_t *)t, len);
    replay_runs++;
    if (replay_accepts(t, len) != expect_accept) {
        replay_bad++;
        if (replay_bad < 10)
            fprintf(stderr, "replay: input of %zu bytes %s unexpectedly\n", len, expect_accept ? "rejected" : "accepted");
    }
}

static void replay_write(const char *dir, unsigned n, const char *t, size_t len)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/seed-%03u", dir, n);
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(t, 1, len, f) != len || fclose(f) != 0) {
        fprintf(stderr, "replay: cannot write %s\n", path);
        exit(1);
    }
}

int main(int argc, char **argv)
{
    fuzz_init();
    static const char claims_fmt[] = "{\"iss\":\"%s\",\"aud\":\"moat\",\"sub\":\"user-1\",\"tenant\":\"acme\","
                                     "\"exp\":%lld,\"nbf\":%lld,\"iat\":%lld}";
    char claims[3][512];
    const char *isss[3] = {fuzz_iss_hs, fuzz_iss_rs, fuzz_iss_es};
    for (int i = 0; i < 3; i++)
        snprintf(claims[i], sizeof(claims[i]), claims_fmt, isss[i], (long long)FUZZ_NOW + 3600, (long long)FUZZ_NOW - 10,
                 (long long)FUZZ_NOW - 10);

    char *valid[4];
    valid[0] = replay_sign(JWT_ALG_HS256, fuzz_hs_secret1, sizeof(fuzz_hs_secret1) - 1, fuzz_kid_hs1, claims[0]);
    valid[1] = replay_sign(JWT_ALG_HS256, fuzz_hs_secret2, sizeof(fuzz_hs_secret2) - 1, fuzz_kid_hs2, claims[0]);
    valid[2] = replay_sign(JWT_ALG_RS256, (const unsigned char *)fuzz_rs_priv, fuzz_rs_priv_len, fuzz_kid_rs, claims[1]);
    valid[3] = replay_sign(JWT_ALG_ES256, (const unsigned char *)fuzz_es_priv, fuzz_es_priv_len, fuzz_kid_es, claims[2]);

    static const char *const junk[] = {
        "",
        ".",
        "..",
        "...",
        "a.b.c",
        "eyJhbGciOiJub25lIiwidHlwIjoiSldUIiwia2lkIjoiaHMtMSJ9.e30.",
        "eyJhbGciOiJub25lIn0.e30.e30",
        "e30.e30.e30.e30",
    };

    const char *dir = NULL;
    int argi = 1;
    if (argc > 2 && strcmp(argv[1], "--write-seeds") == 0) {
        dir = argv[2];
        argi = 3;
    }
    unsigned nseed = 0;
    if (dir != NULL && mkdir(dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "replay: cannot create %s\n", dir);
        return 1;
    }

    for (size_t j = 0; j < sizeof(junk) / sizeof(junk[0]); j++) {
        replay_one(junk[j], strlen(junk[j]), 0);
        if (dir != NULL)
            replay_write(dir, nseed++, junk[j], strlen(junk[j]));
    }

    for (int v = 0; v < 4; v++) {
        char *t = valid[v];
        size_t len = strlen(t);
        replay_one(t, len, 1);
        if (dir != NULL)
            replay_write(dir, nseed++, t, len);
        for (size_t cut = 0; cut < len; cut++)
            replay_one(t, cut, 0);
        char *m = malloc(len);
        if (m == NULL)
            return 1;
        for (size_t i = 0; i < len; i++) {
            for (int bit = 0; bit < 8; bit++) {
                memcpy(m, t, len);
                m[i] = (char)(m[i] ^ (1 << bit));
                replay_one(m, len, 0);
            }
        }
        free(m);
        free(t);
    }

    for (; argi < argc; argi++) {
        FILE *f = fopen(argv[argi], "rb");
        static char buf[1 << 20];
        if (f == NULL) {
            fprintf(stderr, "replay: cannot open %s\n", argv[argi]);
            return 1;
        }
        size_t n = fread(buf, 1, sizeof(buf), f);
        fclose(f);
        LLVMFuzzerTestOneInput((const uint8_t *)buf, n);
        replay_runs++;
    }

    printf("replay: %lu inputs, %lu libjwt decodes, %lu unexpected\n", replay_runs, fuzz_decode_calls, replay_bad);
    return replay_bad == 0 ? 0 : 1;
}
