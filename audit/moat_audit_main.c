/*
 * moat-audit - for security reviewers: verify and read the audit trail;
 * for admins: create a new audit directory.  Never modifies a log.
 *
 *   moat-audit init DIR [--user USER]       new directory, keys, verifier.key
 *   moat-audit verify DIR [--key FILE] [--checkpoints FILE]
 */
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "audit_log.h"
#include "audit_verify.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: moat-audit init DIR [--user USER]\n"
               "       moat-audit verify DIR [--key VERIFIER_KEY] [--checkpoints FILE]\n");
}

static const char *opt(int argc, char **argv, const char *name, const char *def)
{
    for (int i = 3; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0)
            return argv[i + 1];
    return def;
}

static int cmd_init(int argc, char **argv)
{
    const char *user = opt(argc, argv, "--user", "moat-audit");
    struct passwd *pw = getpwnam(user);
    char err[512];
    if (pw == NULL) {
        fprintf(stderr, "moat-audit: init: unknown user %s\n", user);
        return 1;
    }
    if (audit_init_dir(argv[2], pw->pw_uid, pw->pw_gid, err, sizeof(err)) != 0) {
        fprintf(stderr, "moat-audit: init: %s\n", err);
        return 1;
    }
    printf("audit directory %s ready; copy %s/verifier.key off this host for reviewers\n", argv[2], argv[2]);
    return 0;
}

static int cmd_verify(int argc, char **argv)
{
    char keypath[4096], err[512];
    uint8_t k0[AUDIT_KEY_LEN], pub[AUDIT_PUB_LEN];
    struct audit_verify_result *r = calloc(1, sizeof(*r));
    snprintf(keypath, sizeof(keypath), "%s/verifier.key", argv[2]);
    const char *key = opt(argc, argv, "--key", keypath);
    if (r == NULL || audit_read_verifier_key(key, k0, pub, err, sizeof(err)) != 0) {
        fprintf(stderr, "moat-audit: verify: %s\n", r ? err : "out of memory");
        free(r);
        return 2;
    }
    int rc = audit_verify_dir(argv[2], k0, pub, opt(argc, argv, "--checkpoints", NULL), r, NULL, NULL);
    OPENSSL_cleanse(k0, sizeof(k0));
    if (rc == 0)
        printf("OK: %llu records, last seq %llu, %llu signed checkpoints (last covers seq %llu), %llu repaired torn "
               "line(s)\n",
               (unsigned long long)r->records, (unsigned long long)r->last_seq, (unsigned long long)r->checkpoints,
               (unsigned long long)r->last_checkpoint_seq, (unsigned long long)r->repairs);
    else
        fprintf(stderr, "moat-audit: verify: FAILED after %llu good records: %s\n", (unsigned long long)r->records, r->problem);
    free(r);
    return rc == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (argc < 3) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "init") == 0)
        return cmd_init(argc, argv);
    if (strcmp(argv[1], "verify") == 0)
        return cmd_verify(argc, argv);
    fprintf(stderr, "moat-audit: unknown command '%s' (see --help)\n", argv[1]);
    return 2;
}
