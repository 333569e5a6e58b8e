/*
 * moatctl - administration tool for moat.  For now: API keys.
 *
 *   moatctl key new [--id HEX12]   print a new token and what to put in the config
 *   moatctl key hash TOKEN         check a token and print "<id> <sha256>"
 *
 * The token is printed once and never stored; the configuration holds only
 * its SHA-256.
 */
#include "apikey.h"
#include "moat_hex.h"

#include <stdio.h>
#include <string.h>

#include <openssl/crypto.h>

static void usage(FILE *fp)
{
    fprintf(fp, "usage: moatctl key new [--id HEX12]\n"
                "       moatctl key hash TOKEN\n"
                "       moatctl --help\n");
}

static int key_new(int argc, char **argv)
{
    char token[APIKEY_TOKEN_LEN + 1], id[APIKEY_ID_LEN + 1], hex[APIKEY_DIGEST_HEX + 1];
    uint8_t digest[APIKEY_DIGEST_LEN];
    const char *want = NULL, *why = NULL;

    if (argc == 2 && strcmp(argv[0], "--id") == 0)
        want = argv[1];
    else if (argc != 0) {
        fprintf(stderr, "moatctl: usage: moatctl key new [--id HEX12]\n");
        return 2;
    }
    if (want != NULL && !apikey_valid_id(want, strlen(want))) {
        fprintf(stderr, "moatctl: key id must be %d lowercase hex characters\n", APIKEY_ID_LEN);
        return 1;
    }
    if (apikey_generate(want, token, &why) != 0 || apikey_parse(token, APIKEY_TOKEN_LEN, id, &why) != 0 ||
        apikey_digest(token, APIKEY_TOKEN_LEN, digest) != 0) {
        fprintf(stderr, "moatctl: cannot create a key: %s\n", why != NULL ? why : "SHA-256 failed");
        return 1;
    }
    moat_hex_encode(digest, sizeof(digest), hex);
    printf("token: %s\nid: %s sha256: %s\n", token, id, hex);
    OPENSSL_cleanse(token, sizeof(token));
    return fflush(stdout) == 0 ? 0 : 1;
}

static int key_hash(int argc, char **argv)
{
    char id[APIKEY_ID_LEN + 1], hex[APIKEY_DIGEST_HEX + 1];
    uint8_t digest[APIKEY_DIGEST_LEN];
    const char *why = NULL;

    if (argc != 1) {
        fprintf(stderr, "moatctl: usage: moatctl key hash TOKEN\n");
        return 2;
    }
    if (apikey_parse(argv[0], strlen(argv[0]), id, &why) != 0) {
        fprintf(stderr, "moatctl: invalid token: %s\n", why);
        return 1;
    }
    if (apikey_digest(argv[0], strlen(argv[0]), digest) != 0) {
        fprintf(stderr, "moatctl: SHA-256 failed\n");
        return 1;
    }
    moat_hex_encode(digest, sizeof(digest), hex);
    printf("%s %s\n", id, hex);
    return fflush(stdout) == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        usage(stdout);
        return 0;
    }
    if (argc >= 3 && strcmp(argv[1], "key") == 0) {
        if (strcmp(argv[2], "new") == 0)
            return key_new(argc - 3, argv + 3);
        if (strcmp(argv[2], "hash") == 0)
            return key_hash(argc - 3, argv + 3);
    }
    fprintf(stderr, "moatctl: unknown command (try moatctl --help)\n");
    return 2;
}
