/*
 * moat-audit - for security reviewers: verify and read the audit trail;
 * for admins: create a new audit directory.  Never modifies a log.
 *
 *   moat-audit init DIR [--user USER]       new directory, keys, verifier.key
 *   moat-audit verify DIR [--key FILE | --key-fingerprint SHA256:...] [--checkpoints FILE]
 *                         [--strict] [--json]
 *   moat-audit verify --export FILE --key FILE [--checkpoints FILE] [--strict] [--json]
 *   moat-audit query DIR [filters] [--format table|json]
 *   moat-audit show DIR REQUEST_ID [--raw-packet | --transcript [--raw STREAM]]
 *   moat-audit stats DIR [--since T] [--until T] [--tenant T] [--format table|json]
 *   moat-audit export DIR [--since T] [--until T] [--tenant T]
 *
 * Everything but init reads only records that verify: the verifier walks
 * the chain and hands each good record to a callback.  When verification
 * fails, what verified before the failure is still printed, and the exit
 * status is 1 with the problem on stderr.  Strings from the log are printed
 * with terminal control characters escaped, so a tenant-supplied string
 * cannot rewrite a reviewer's screen.
 *
 * The trust anchor (K0 and the checkpoint public key) is what verification
 * proves the trail against, so it must not come from the trail itself: a
 * directory replaced wholesale, keys included, verifies against its own
 * verifier.key.  load_anchor takes it from --key (a copy kept off the
 * host) or checks it against --key-fingerprint; taken from the directory
 * checked (the default, or --key naming that very file), it is said on
 * stderr every time, and in verify --json.  Nothing here writes, and
 * nothing needs root: a reviewer verifies a copy as any user.
 *
 * show --transcript replays a live session from its packet (kind
 * "session", FORMAT.md): the packet is found and checked as show does,
 * then each transcript event is decoded strictly (known events, each with
 * exactly its fields and types, at_ms never going back; anything else is
 * a one-line error, never a guess) and printed, one line each, with the
 * data escaped; --raw STREAM writes one stream's bytes exactly instead.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <openssl/crypto.h>

#include "audit_log.h"
#include "moat_base64.h"
#include "moat_hex.h"
#include "moat_utf8.h"
#include "wire/audit_wire.h"
#include "audit_verify.h"

#define PROG "moat-audit"

static void usage(FILE *f)
{
    fprintf(f, "usage: moat-audit COMMAND DIR [options]\n"
               "\n"
               "  init DIR [--user USER]\n"
               "      create a new audit directory owned by USER (default moat-audit)\n"
               "  verify DIR [--key VERIFIER_KEY | --key-fingerprint SHA256:HEX] [--checkpoints FILE]\n"
               "         [--strict] [--json]\n"
               "      check the whole trail; exit 0 if it verifies, 1 with the first bad record and why;\n"
               "      says how many records at the end no signed checkpoint covers yet (their removal\n"
               "      would go unnoticed); --strict fails when there are any; --json: one JSON object\n"
               "  verify --export FILE --key VERIFIER_KEY [--checkpoints FILE] [--strict] [--json]\n"
               "      the same for the output of export (FILE - is stdin), on its own\n"
               "  query DIR [--tenant T] [--key-id K] [--since TIME] [--until TIME]\n"
               "            [--decision allowed|denied] [--reason R] [--status S] [--language L]\n"
               "            [--type T] [--format table|json]\n"
               "            [--review pending|approved|rejected|needs_changes]\n"
               "      verified records that match (json: the lines as stored); the table's REQUEST_ID is\n"
               "      what show takes; --status S is the HTTP status (401) or an execution's outcome (TO, ML);\n"
               "      --review: executions (their result records) nobody reviewed yet (pending), or whose\n"
               "      latest review has that verdict\n"
               "  show DIR REQUEST_ID [--raw-packet | --transcript [--raw stdin|stdout|stderr]]\n"
               "      every record of a request and its packet (code, stdin, args, limits, output),\n"
               "      then its reviews: verdict, reviewer, time, note, and whether the result each names is\n"
               "      the one in the trail;\n"
               "      --raw-packet writes the verified packet's bytes to stdout instead;\n"
               "      --transcript replays a session (GET /api/v2/connect) from its packet, one line per\n"
               "      event: +<at_ms> ms  <stream or event>  <data, escaped>; --raw STREAM writes the\n"
               "      exact bytes of one stream instead\n"
               "  stats DIR [--since TIME] [--until TIME] [--tenant T] [--format table|json]\n"
               "      requests per tenant, allowed and denied by reason (with the gateway's denial\n"
               "      summaries), and the records the disk reserve kept out\n"
               "  export DIR [--since TIME] [--until TIME] [--tenant T]\n"
               "      the verified records as JSON lines, for archiving off the host (verify --export\n"
               "      checks an unfiltered one, or one cut by time, on its own)\n"
               "\n"
               "Every command but init takes --key VERIFIER_KEY, the trust anchor: a copy of verifier.key\n"
               "kept off the host.  Without it, DIR/verifier.key is used with a WARNING: a trail replaced\n"
               "whole, keys included, verifies against its own key.  --key-fingerprint SHA256:HEX (from\n"
               "init, or sha256sum of the copy) accepts DIR/verifier.key only if it is that key.\n"
               "--checkpoints FILE: a copy of checkpoints.log kept elsewhere (truncation is caught\n"
               "against it).\n"
               "TIME is 2026-11-29T16:40:00Z (fractions allowed) or seconds since the epoch; --since\n"
               "is inclusive, --until exclusive.  Commands never modify the log.  Exit status: 0 ok,\n"
               "1 verification failed (with --strict: or records not covered yet) or not found, 2 usage\n"
               "error.\n"
               "see moat-audit(1)\n");
}

__attribute__((format(printf, 2, 3))) static int die(int code, const char *fmt, ...)
{
    va_list ap;
    fputs(PROG ": ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return code;
}

/* ---- options ----------------------------------------------------------------- */

struct opts {
    const char *cmd;
    const char *pos[2];
    int npos;
    const char *user, *key, *key_fp, *checkpoints, *tenant, *key_id, *since_s, *until_s, *decision, *reason, *status, *language,
        *type, *format, *export_file, *review;
    const char *strict, *json, *transcript; /* flags: non-NULL when given */
    const char *raw_stream;                 /* show --transcript --raw STREAM */
    int raw_packet;
    int64_t since_ms, until_ms; /* -1: unset */
};

struct optdef {
    const char *name;
    size_t off;
    const char *cmds; /* commands that take it, space-separated with spaces around */
    int flag;         /* takes no value */
};

#define OPT(field) offsetof(struct opts, field)

static const struct optdef optdefs[] = {
    {"--user", OPT(user), " init ", 0},
    {"--key", OPT(key), " verify query show stats export ", 0},
    {"--key-fingerprint", OPT(key_fp), " verify query show stats export ", 0},
    {"--checkpoints", OPT(checkpoints), " verify query show stats export ", 0},
    {"--export", OPT(export_file), " verify ", 0},
    {"--strict", OPT(strict), " verify ", 1},
    {"--json", OPT(json), " verify ", 1},
    {"--tenant", OPT(tenant), " query stats export ", 0},
    {"--key-id", OPT(key_id), " query ", 0},
    {"--since", OPT(since_s), " query stats export ", 0},
    {"--until", OPT(until_s), " query stats export ", 0},
    {"--decision", OPT(decision), " query ", 0},
    {"--reason", OPT(reason), " query ", 0},
    {"--status", OPT(status), " query ", 0},
    {"--language", OPT(language), " query ", 0},
    {"--type", OPT(type), " query ", 0},
    {"--review", OPT(review), " query ", 0},
    {"--format", OPT(format), " query stats ", 0},
    {"--transcript", OPT(transcript), " show ", 1},
    {"--raw", OPT(raw_stream), " show ", 0},
};

static int takes(const char *cmds, const char *cmd)
{
    char word[32];
    snprintf(word, sizeof(word), " %s ", cmd);
    return strstr(cmds, word) != NULL;
}

/* Milliseconds since the epoch from "2026-11-29T16:40:00Z", with optional
 * fraction, or from plain seconds.  -1 when malformed. */
static int64_t parse_time(const char *s)
{
    char *end;
    if (s[0] >= '0' && s[0] <= '9' && strchr(s, '-') == NULL) {
        errno = 0;
        unsigned long long v = strtoull(s, &end, 10);
        if (errno != 0 || *end != '\0' || v > 253402300799ull)
            return -1;
        return (int64_t)v * 1000;
    }
    struct tm tm;
    memset(&tm, 0, sizeof(tm));
    end = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
    if (end == NULL)
        return -1;
    int64_t ms = 0;
    if (*end == '.') {
        int digits = 0;
        end++;
        while (*end >= '0' && *end <= '9') {
            if (digits < 3) {
                ms = ms * 10 + (*end - '0');
                digits++;
            }
            end++;
        }
        if (digits == 0)
            return -1;
        while (digits++ < 3)
            ms *= 10;
    }
    if (strcmp(end, "Z") != 0)
        return -1;
    time_t t = timegm(&tm);
    if (t == (time_t)-1)
        return -1;
    return (int64_t)t * 1000 + ms;
}

static int parse_opts(int argc, char **argv, struct opts *o)
{
    memset(o, 0, sizeof(*o));
    o->cmd = argv[1];
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            exit(0);
        }
        if (strcmp(a, "--raw-packet") == 0 && strcmp(o->cmd, "show") == 0) {
            o->raw_packet = 1;
            continue;
        }
        if (strncmp(a, "--", 2) == 0) {
            const struct optdef *d = NULL;
            for (size_t k = 0; k < sizeof(optdefs) / sizeof(optdefs[0]); k++)
                if (strcmp(a, optdefs[k].name) == 0 && takes(optdefs[k].cmds, o->cmd))
                    d = &optdefs[k];
            if (d == NULL)
                return die(2, "%s: unknown option %s (see --help)", o->cmd, a);
            if (d->flag) {
                *(const char **)((char *)o + d->off) = "yes";
                continue;
            }
            if (i + 1 >= argc)
                return die(2, "%s: %s needs a value", o->cmd, a);
            *(const char **)((char *)o + d->off) = argv[++i];
            continue;
        }
        if (o->npos >= 2)
            return die(2, "%s: unexpected argument '%s' (see --help)", o->cmd, a);
        o->pos[o->npos++] = a;
    }
    int want = strcmp(o->cmd, "show") == 0 ? 2 : o->export_file ? 0 : 1;
    if (o->npos != want)
        return die(2, "%s: %s (see --help)", o->cmd,
                   want == 2   ? "needs DIR and REQUEST_ID"
                   : want == 0 ? "takes --export FILE instead of DIR"
                               : "needs DIR");
    if (o->export_file && o->key == NULL)
        return die(2, "%s: --export needs --key VERIFIER_KEY (a copy kept apart from the export)", o->cmd);
    o->since_ms = o->until_ms = -1;
    if (o->since_s && (o->since_ms = parse_time(o->since_s)) < 0)
        return die(2, "%s: bad --since '%s' (use 2026-11-29T16:40:00Z or seconds since the epoch)", o->cmd, o->since_s);
    if (o->until_s && (o->until_ms = parse_time(o->until_s)) < 0)
        return die(2, "%s: bad --until '%s' (use 2026-11-29T16:40:00Z or seconds since the epoch)", o->cmd, o->until_s);
    if (o->format && strcmp(o->format, "table") != 0 && strcmp(o->format, "json") != 0)
        return die(2, "%s: --format is table or json, not '%s'", o->cmd, o->format);
    if (o->decision && strcmp(o->decision, "allowed") != 0 && strcmp(o->decision, "denied") != 0)
        return die(2, "%s: --decision is allowed or denied, not '%s'", o->cmd, o->decision);
    if (o->review && strcmp(o->review, "pending") != 0 && strcmp(o->review, "approved") != 0 &&
        strcmp(o->review, "rejected") != 0 && strcmp(o->review, "needs_changes") != 0)
        return die(2, "%s: --review is pending, approved, rejected or needs_changes, not '%s'", o->cmd, o->review);
    if (o->review && o->type && strcmp(o->type, "result") != 0)
        return die(2, "%s: --review lists result records; --type %s does not go with it", o->cmd, o->type);
    if (o->raw_stream && o->transcript == NULL)
        return die(2, "%s: --raw STREAM goes with --transcript", o->cmd);
    if (o->raw_stream && strcmp(o->raw_stream, "stdin") != 0 && strcmp(o->raw_stream, "stdout") != 0 &&
        strcmp(o->raw_stream, "stderr") != 0)
        return die(2, "%s: --raw is stdin, stdout or stderr, not '%s'", o->cmd, o->raw_stream);
    if (o->transcript && o->raw_packet)
        return die(2, "%s: --transcript and --raw-packet exclude each other", o->cmd);
    return 0;
}

/* ---- printing strings from the log safely --------------------------------------- */

/* Characters a terminal or an editor would act on rather than show. */
static int dangerous(uint32_t cp)
{
    return cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp <= 0x9f) || cp == 0x2028 || cp == 0x2029 ||
           (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069) || cp == 0x200e || cp == 0x200f || cp == 0xfeff;
}

/* Prints s with dangerous characters and invalid bytes escaped; in a text
 * block (block=1) newlines and tabs pass. */
static void put_safe(FILE *f, const char *s, size_t len, int block)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t n = moat_utf8_decode(u + i, len - i, &cp, NULL);
        if (n == 0) {
            fprintf(f, "\\x%02x", u[i]);
            i++;
            continue;
        }
        if (block && (cp == '\n' || cp == '\t'))
            fputc((int)cp, f);
        else if (!block && cp == '\\')
            fputs("\\\\", f);
        else if (!block && cp == '"')
            fputs("\\\"", f);
        else if (cp == '\n')
            fputs("\\n", f);
        else if (cp == '\r')
            fputs("\\r", f);
        else if (cp == '\t')
            fputs("\\t", f);
        else if (dangerous(cp))
            fprintf(f, "\\u%04x", (unsigned)cp);
        else
            fwrite(u + i, 1, n, f);
        i += n;
    }
}

/* A table cell: the string or "-", spaces and controls escaped. */
static void put_cell(const char *s, int width)
{
    if (s == NULL || *s == '\0')
        s = "-";
    size_t len = strlen(s), start = 0;
    int pad = width - (int)len;
    while (start < len) {
        const char *sp = memchr(s + start, ' ', len - start);
        size_t end = sp ? (size_t)(sp - s) : len;
        put_safe(stdout, s + start, end - start, 0);
        if (sp != NULL) {
            fputs("\\x20", stdout);
            pad -= 3;
        }
        start = end + 1;
    }
    while (pad-- > 0)
        putchar(' ');
    putchar(' ');
}

/* ---- records ---------------------------------------------------------------------- */

static const char *str(json_t *rec, const char *name)
{
    return json_string_value(json_object_get(rec, name));
}

static int64_t record_ms(json_t *rec)
{
    const char *t = str(rec, "time");
    return t ? parse_time(t) : -1;
}

/* The value of a field as text for comparing with a filter. */
static int field_is(json_t *rec, const char *name, const char *want)
{
    json_t *v = json_object_get(rec, name);
    char buf[32];
    if (json_is_string(v))
        return strcmp(json_string_value(v), want) == 0;
    if (json_is_integer(v)) {
        snprintf(buf, sizeof(buf), "%lld", (long long)json_integer_value(v));
        return strcmp(buf, want) == 0;
    }
    return 0;
}

static int in_time(const struct opts *o, json_t *rec)
{
    if (o->since_ms < 0 && o->until_ms < 0)
        return 1;
    int64_t t = record_ms(rec);
    if (t < 0)
        return 0;
    return (o->since_ms < 0 || t >= o->since_ms) && (o->until_ms < 0 || t < o->until_ms);
}

/* --status: the HTTP status, or an execution's outcome (run or compile:
 * OK, RE, SG, TO, OL, EL, XX, ML), or one a denials summary counts. */
static int status_is(json_t *rec, const char *want)
{
    return field_is(rec, "status", want) || field_is(json_object_get(rec, "run"), "status", want) ||
           field_is(json_object_get(rec, "compile"), "status", want) ||
           json_object_get(json_object_get(rec, "statuses"), want) != NULL;
}

static int matches(const struct opts *o, json_t *rec)
{
    return in_time(o, rec) && (!o->tenant || field_is(rec, "tenant", o->tenant)) &&
           (!o->key_id || field_is(rec, "key_id", o->key_id)) && (!o->decision || field_is(rec, "decision", o->decision)) &&
           (!o->reason || field_is(rec, "reason", o->reason)) && (!o->status || status_is(rec, o->status)) &&
           (!o->language || field_is(rec, "language", o->language)) && (!o->type || field_is(rec, "type", o->type));
}

/* ---- the trust anchor ------------------------------------------------------------------ */

/* What the trail is verified against, and where that came from. */
struct anchor {
    uint8_t k0[AUDIT_KEY_LEN], pub[AUDIT_PUB_LEN];
    char fingerprint[AUDIT_FINGERPRINT_LEN + 1];
    char path[4200];
    const char *source; /* "directory" (the checked directory's own key), "file" (--key), "fingerprint" */
    char warning[8192]; /* set when source is "directory" */
    char problem[8192]; /* set when the key is not the one --key-fingerprint names */
};

/* The directory the trail is in: DIR, or the export file's. */
static void trail_dir(const struct opts *o, char *out, size_t size)
{
    if (o->export_file == NULL) {
        snprintf(out, size, "%s", o->pos[0]);
        return;
    }
    const char *slash = strrchr(o->export_file, '/');
    if (slash == NULL)
        snprintf(out, size, ".");
    else
        snprintf(out, size, "%.*s", (int)(slash == o->export_file ? 1 : slash - o->export_file), o->export_file);
}

/* Is the key file inside dir: in it (by its real path) or the very file
 * dir/verifier.key (by inode, whatever the path says)? */
static int key_in_dir(const char *key, const char *dir)
{
    char kreal[PATH_MAX], dreal[PATH_MAX], own[4200];
    struct stat ks, os;
    snprintf(own, sizeof(own), "%s/verifier.key", dir);
    if (stat(key, &ks) == 0 && stat(own, &os) == 0 && ks.st_dev == os.st_dev && ks.st_ino == os.st_ino)
        return 1;
    if (realpath(key, kreal) == NULL || realpath(dir, dreal) == NULL)
        return 0;
    char *slash = strrchr(kreal, '/'); /* a real path is absolute: there is one */
    if (slash == NULL)
        return 0;
    slash[slash == kreal ? 1 : 0] = '\0'; /* its directory; "/" stays "/" */
    return strcmp(kreal, dreal) == 0;
}

/* "SHA256:" and 64 hex digits, either case: lower-cased into out.  0 or -1. */
static int parse_fingerprint(const char *text, char out[AUDIT_FINGERPRINT_LEN + 1])
{
    if (strncmp(text, "SHA256:", 7) != 0 || strlen(text) != AUDIT_FINGERPRINT_LEN ||
        !moat_hex_valid(text + 7, AUDIT_HEX_LEN, MOAT_HEX_ANY_CASE))
        return -1;
    for (size_t i = 0; i <= AUDIT_FINGERPRINT_LEN; i++)
        out[i] = i >= 7 && text[i] >= 'A' && text[i] <= 'F' ? (char)(text[i] - 'A' + 'a') : text[i];
    return 0;
}

/* Reads the key (--key, or the directory's own), checks it against
 * --key-fingerprint, and names its source; one taken from the trail's
 * directory is said on stderr.  0, or the exit status after saying why. */
static int load_anchor(const struct opts *o, struct anchor *a)
{
    char dir[4096], err[512], want[AUDIT_FINGERPRINT_LEN + 1];
    memset(a, 0, sizeof(*a));
    trail_dir(o, dir, sizeof(dir));
    if (o->key_fp && parse_fingerprint(o->key_fp, want) != 0)
        return die(2, "%s: --key-fingerprint wants SHA256: and 64 hex digits, not '%s'", o->cmd, o->key_fp);
    if (o->key)
        snprintf(a->path, sizeof(a->path), "%s", o->key);
    else
        snprintf(a->path, sizeof(a->path), "%s/verifier.key", dir);
    if (audit_read_verifier_key(a->path, a->k0, a->pub, err, sizeof(err)) != 0)
        return die(2, "%s: %s", o->cmd, err);
    audit_verifier_fingerprint(a->k0, a->pub, a->fingerprint);
    if (o->key_fp && strcmp(want, a->fingerprint) != 0) {
        OPENSSL_cleanse(a->k0, sizeof(a->k0));
        snprintf(a->problem, sizeof(a->problem),
                 "the verifier key %s is %s, not the %s given: this trail's keys are not the ones expected (replaced?)", a->path,
                 a->fingerprint, want);
        return die(1, "%s: %s", o->cmd, a->problem);
    }
    if (o->key_fp)
        a->source = "fingerprint";
    else if (o->key && !key_in_dir(o->key, dir))
        a->source = "file";
    else
        a->source = "directory";
    if (strcmp(a->source, "directory") == 0) {
        snprintf(a->warning, sizeof(a->warning),
                 "the trust anchor is %s, inside the directory being checked: a trail replaced whole, this key included, "
                 "verifies against it.  Its fingerprint is %s: compare it with the one init printed, or verify with --key "
                 "and a copy kept off this host, or --key-fingerprint and the fingerprint you recorded",
                 a->path, a->fingerprint);
        fprintf(stderr, PROG ": %s: WARNING: %s\n", o->cmd, a->warning);
    }
    return 0;
}

/* Runs the verifier with cb; 0 when everything verified, else 1 with the
 * problem on stderr (what verified was already handed to cb), or 2 (a
 * usage error).  *out and *anchor_out, when asked for, are the caller's to
 * free: *out is NULL when no walk was made. */
static int verify_with(const struct opts *o, audit_record_cb cb, void *arg, struct audit_verify_result **out,
                       struct anchor **anchor_out)
{
    struct audit_verify_result *r = calloc(1, sizeof(*r));
    struct anchor *a = calloc(1, sizeof(*a));
    int rc;
    if (r == NULL || a == NULL) {
        free(r);
        free(a);
        return die(2, "%s: out of memory", o->cmd);
    }
    if ((rc = load_anchor(o, a)) != 0) {
        free(r);
        if (anchor_out && rc == 1)
            *anchor_out = a;
        else
            free(a);
        return rc;
    }
    if (o->export_file)
        rc = audit_verify_export(o->export_file, a->k0, a->pub, o->checkpoints, r, cb, arg);
    else
        rc = audit_verify_dir(o->pos[0], a->k0, a->pub, o->checkpoints, r, cb, arg);
    OPENSSL_cleanse(a->k0, sizeof(a->k0));
    fflush(stdout);
    if (rc != 0)
        die(1, "%s: verification FAILED after %llu good records: %s", o->cmd, (unsigned long long)r->records, r->problem);
    if (out)
        *out = r;
    else
        free(r);
    if (anchor_out)
        *anchor_out = a;
    else
        free(a);
    return rc == 0 ? 0 : 1;
}

/* ---- init / verify ---------------------------------------------------------------- */

static int cmd_init(const struct opts *o)
{
    const char *user = o->user ? o->user : "moat-audit";
    struct passwd *pw = getpwnam(user);
    char err[512];
    if (pw == NULL)
        return die(1, "init: unknown user %s", user);
    if (audit_init_dir(o->pos[0], pw->pw_uid, pw->pw_gid, err, sizeof(err)) != 0)
        return die(1, "init: %s", err);
    char path[4200], fp[AUDIT_FINGERPRINT_LEN + 1];
    uint8_t k0[AUDIT_KEY_LEN], pub[AUDIT_PUB_LEN];
    snprintf(path, sizeof(path), "%s/verifier.key", o->pos[0]);
    if (audit_read_verifier_key(path, k0, pub, err, sizeof(err)) != 0)
        return die(1, "init: %s", err);
    audit_verifier_fingerprint(k0, pub, fp);
    OPENSSL_cleanse(k0, sizeof(k0));
    printf("audit directory %s ready.\n"
           "Copy %s off this host for reviewers: it is their trust anchor (verify --key COPY).\n"
           "Its fingerprint (for verify --key-fingerprint; safe to publish): %s\n",
           o->pos[0], path, fp);
    return 0;
}

/* The checkpoints list the walk read ("" for none). */
static void checkpoints_path(const struct opts *o, char *out, size_t size)
{
    if (o->checkpoints)
        snprintf(out, size, "%s", o->checkpoints);
    else if (o->export_file)
        snprintf(out, size, "%s", "");
    else
        snprintf(out, size, "%s/checkpoints.log", o->pos[0]);
}

static void verify_json(const struct opts *o, const struct audit_verify_result *r, const struct anchor *a, int verified, int ok)
{
    char cpath[4200];
    static const struct audit_verify_result none;
    checkpoints_path(o, cpath, sizeof(cpath));
    if (r == NULL)
        r = &none;
    json_t *anchor = json_pack("{s:s?, s:s, s:s?, s:s?}", "source", a->source, "key", a->path, "fingerprint",
                               a->fingerprint[0] ? a->fingerprint : NULL, "warning", a->warning[0] ? a->warning : NULL);
    json_t *out =
        json_pack("{s:b, s:b, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:s?, s:b, s:s?, s:o}", "ok", ok, "verified",
                  verified, "trail", o->export_file ? o->export_file : o->pos[0], "records", (json_int_t)r->records, "first_seq",
                  (json_int_t)r->first_seq, "last_seq", (json_int_t)r->last_seq, "checkpoints", (json_int_t)r->checkpoints,
                  "last_checkpoint_seq", (json_int_t)r->last_checkpoint_seq, "listed_checkpoints", (json_int_t)r->listed,
                  "covered_seq", (json_int_t)r->covered_seq, "uncovered", (json_int_t)r->uncovered, "repairs",
                  (json_int_t)r->repairs, "checkpoints_file", cpath[0] ? cpath : NULL, "strict", o->strict != NULL, "problem",
                  a->problem[0]   ? a->problem
                  : r->problem[0] ? r->problem
                                  : NULL,
                  "anchor", anchor);
    char *text = out ? json_dumps(out, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    if (text)
        printf("%s\n", text);
    free(text);
    json_decref(out);
}

static void verify_text(const struct opts *o, const struct audit_verify_result *r, const struct anchor *a)
{
    char cpath[4200];
    checkpoints_path(o, cpath, sizeof(cpath));
    printf("OK: %llu records, last seq %llu, %llu signed checkpoints (last covers seq %llu), %llu repaired torn line(s)\n",
           (unsigned long long)r->records, (unsigned long long)r->last_seq, (unsigned long long)r->checkpoints,
           (unsigned long long)r->last_checkpoint_seq, (unsigned long long)r->repairs);
    if (r->uncovered == 0)
        printf("covered: every record, up to seq %llu, by a signed checkpoint in %s\n", (unsigned long long)r->last_seq, cpath);
    else if (cpath[0] == '\0')
        printf("NOT COVERED: %llu record(s) (seq %llu-%llu): with no checkpoints list (--checkpoints, a copy of "
               "checkpoints.log), nothing shows whether the export was cut short\n",
               (unsigned long long)r->uncovered, (unsigned long long)r->covered_seq + 1, (unsigned long long)r->last_seq);
    else
        printf("NOT COVERED: %llu record(s) at the end (seq %llu-%llu): no signed checkpoint in %s covers them yet, so "
               "their removal would go unnoticed\n",
               (unsigned long long)r->uncovered, (unsigned long long)r->covered_seq + 1, (unsigned long long)r->last_seq, cpath);
    printf("anchor: %s (%s %s)\n", a->fingerprint, strcmp(a->source, "directory") == 0 ? "from the directory checked:" : "from",
           a->path);
}

static int cmd_verify(const struct opts *o)
{
    struct audit_verify_result *r = NULL;
    struct anchor *a = NULL;
    int rc = verify_with(o, NULL, NULL, &r, &a);
    int strict_failed = rc == 0 && o->strict && r->uncovered > 0;
    if (a != NULL && o->json)
        verify_json(o, r, a, rc == 0, rc == 0 && !strict_failed);
    else if (rc == 0)
        verify_text(o, r, a);
    if (strict_failed) {
        fflush(stdout);
        rc = die(1, "verify: --strict: %llu record(s) at the end (seq %llu-%llu) are not covered by a signed checkpoint yet",
                 (unsigned long long)r->uncovered, (unsigned long long)r->covered_seq + 1, (unsigned long long)r->last_seq);
    }
    free(r);
    free(a);
    return rc;
}

/* ---- query / export ----------------------------------------------------------------- */

struct query {
    const struct opts *o;
    int json;
    uint64_t shown;
    json_t *results; /* --review: [[key, record, line]] of the result records that match */
    json_t *latest;  /* --review: key -> the latest review's verdict */
};

/* An execution's key for --review: tenant, a NUL, request id (a review is
 * always of its own tenant's execution). */
static json_t *execution_key(json_t *rec)
{
    const char *t = str(rec, "tenant"), *r = str(rec, "request_id");
    if (t == NULL || r == NULL)
        return NULL;
    size_t tl = strlen(t), rl = strlen(r);
    char *k = malloc(tl + rl + 2);
    if (k == NULL)
        return NULL;
    memcpy(k, t, tl);
    k[tl] = '\x1f';
    memcpy(k + tl + 1, r, rl + 1);
    json_t *j = json_string(k);
    free(k);
    return j;
}

/* A JSON value as a table cell's text ("" for none). */
static void cell_text(json_t *v, char *out, size_t size)
{
    if (json_is_integer(v))
        snprintf(out, size, "%lld", (long long)json_integer_value(v));
    else
        snprintf(out, size, "%s", json_is_string(v) ? json_string_value(v) : "");
}

/* The run column: an execution's outcome, or what a summary counts
 * ("57@203.0.113.7": 57 denials of that client) or a "dropped" record. */
static void run_text(json_t *rec, const char *type, char *out, size_t size)
{
    if (type != NULL && strcmp(type, "denials") == 0) {
        const char *client = str(rec, "client");
        snprintf(out, size, "%lld@%s", (long long)json_integer_value(json_object_get(rec, "count")), client ? client : "?");
    } else if (type != NULL && strcmp(type, "dropped") == 0) {
        snprintf(out, size, "%lld", (long long)json_integer_value(json_object_get(rec, "count")));
    } else {
        cell_text(json_object_get(json_object_get(rec, "run"), "status"), out, size);
    }
}

static void print_record(struct query *q, json_t *rec, const char *line, size_t len)
{
    q->shown++;
    if (q->json) {
        fwrite(line, 1, len, stdout);
        putchar('\n');
        return;
    }
    char seq[24], decision[96], status[24], run[160];
    snprintf(seq, sizeof(seq), "%lld", (long long)json_integer_value(json_object_get(rec, "seq")));
    const char *type = str(rec, "type"), *endpoint = str(rec, "endpoint"), *dec = str(rec, "decision"),
               *reason = str(rec, "reason");
    if (type != NULL && strcmp(type, "denials") == 0 && dec == NULL)
        dec = "denied";
    if (dec && reason)
        snprintf(decision, sizeof(decision), "%s/%s", dec, reason);
    else
        snprintf(decision, sizeof(decision), "%s", dec ? dec : "");
    cell_text(json_object_get(rec, "status"), status, sizeof(status));
    run_text(rec, type, run, sizeof(run));
    char ep[64];
    if (endpoint == NULL && type != NULL && strcmp(type, "request") != 0) {
        snprintf(ep, sizeof(ep), "(%s)", type);
        endpoint = ep;
    }
    put_cell(seq, 8);
    put_cell(str(rec, "time"), 24);
    put_cell(str(rec, "request_id"), 16);
    put_cell(str(rec, "tenant"), 16);
    put_cell(str(rec, "key_id"), 24);
    put_cell(endpoint, 12);
    put_cell(decision, 20);
    put_cell(str(rec, "language"), 10);
    put_cell(status, 6);
    put_cell(run, 0);
    putchar('\n');
}

/* --review: result records that match are kept, with their key; every
 * review (whatever the filters) sets its execution's latest verdict. */
static void note_for_review(struct query *q, json_t *rec, const char *line, size_t len)
{
    const char *type = str(rec, "type");
    json_t *key;
    if (type == NULL || (strcmp(type, "result") != 0 && strcmp(type, "review") != 0) || (key = execution_key(rec)) == NULL)
        return;
    if (strcmp(type, "review") == 0) {
        json_object_set(q->latest, json_string_value(key), json_object_get(rec, "verdict"));
    } else if (matches(q->o, rec)) {
        json_array_append_new(q->results, json_pack("[O, O, s%]", key, rec, line, len));
    }
    json_decref(key);
}

static void query_cb(void *arg, json_t *rec, const char *line, size_t len)
{
    struct query *q = arg;
    if (q->o->review != NULL)
        note_for_review(q, rec, line, len);
    else if (matches(q->o, rec))
        print_record(q, rec, line, len);
}

/* --review: the kept results whose execution's latest verdict is the one
 * asked for (pending: none). */
static void print_reviewed(struct query *q)
{
    size_t i;
    json_t *row;
    json_array_foreach(q->results, i, row)
    {
        const char *verdict = json_string_value(json_object_get(q->latest, json_string_value(json_array_get(row, 0))));
        int want = strcmp(q->o->review, "pending") == 0 ? verdict == NULL : verdict != NULL && strcmp(verdict, q->o->review) == 0;
        json_t *line = json_array_get(row, 2);
        if (want)
            print_record(q, json_array_get(row, 1), json_string_value(line), json_string_length(line));
    }
}

static int cmd_query(struct opts *o, int export)
{
    struct query q = {o, export || (o->format && strcmp(o->format, "json") == 0), 0, json_array(), json_object()};
    if (!q.json)
        printf("%-8s %-24s %-16s %-16s %-24s %-12s %-20s %-10s %-6s %s\n", "SEQ", "TIME", "REQUEST_ID", "TENANT", "KEY_ID",
               "ENDPOINT", "DECISION/REASON", "LANGUAGE", "STATUS", "RUN");
    int rc = verify_with(o, query_cb, &q, NULL, NULL);
    if (o->review != NULL && rc == 0)
        print_reviewed(&q);
    json_decref(q.results);
    json_decref(q.latest);
    if (!q.json && rc == 0)
        printf("(%llu record(s))\n", (unsigned long long)q.shown);
    return rc;
}

/* ---- stats ------------------------------------------------------------------------------ */

struct stats {
    const struct opts *o;
    json_t *tenants; /* tenant -> {requests, allowed, denied, reasons: {reason: n}} */
    uint64_t records, requests, results;
    uint64_t summaries; /* "denials" records (their counts are in tenants) */
    uint64_t dropped;   /* records the disk reserve kept out ("dropped" records' counts) */
};

static void bump(json_t *obj, const char *name, json_int_t by)
{
    json_t *v = json_object_get(obj, name);
    json_object_set_new(obj, name, json_integer((v ? json_integer_value(v) : 0) + by));
}

/* A tenant's counters ("(none)" for requests no tenant was known for). */
static json_t *tenant_stats(struct stats *s, json_t *rec)
{
    const char *tenant = str(rec, "tenant");
    if (tenant == NULL)
        tenant = "(none)";
    json_t *t = json_object_get(s->tenants, tenant);
    if (t == NULL) {
        t = json_pack("{s:I, s:I, s:I, s:{}}", "requests", (json_int_t)0, "allowed", (json_int_t)0, "denied", (json_int_t)0,
                      "reasons");
        json_object_set_new(s->tenants, tenant, t);
    }
    return t;
}

/* n requests decided dec (allowed or denied, with reason). */
static void count_requests(struct stats *s, json_t *rec, const char *dec, json_int_t n)
{
    json_t *t = tenant_stats(s, rec);
    s->requests += (uint64_t)n;
    bump(t, "requests", n);
    if (strcmp(dec, "allowed") == 0) {
        bump(t, "allowed", n);
    } else {
        const char *reason = str(rec, "reason");
        bump(t, "denied", n);
        bump(json_object_get(t, "reasons"), reason ? reason : "(none)", n);
    }
}

static void stats_cb(void *arg, json_t *rec, const char *line, size_t len)
{
    struct stats *s = arg;
    if (!in_time(s->o, rec) || (s->o->tenant && !field_is(rec, "tenant", s->o->tenant)))
        return;
    s->records++;
    const char *type = str(rec, "type"), *dec = str(rec, "decision");
    json_int_t count = json_integer_value(json_object_get(rec, "count"));
    if (type == NULL)
        return;
    if (strcmp(type, "result") == 0)
        s->results++;
    else if (strcmp(type, "dropped") == 0 && count > 0)
        s->dropped += (uint64_t)count;
    else if (strcmp(type, "denials") == 0 && count > 0) { /* count denials coalesced by the gateway */
        s->summaries++;
        count_requests(s, rec, "denied", count);
    } else if (strcmp(type, "request") == 0 && dec != NULL) /* one decision per request */
        count_requests(s, rec, dec, 1);
    (void)line;
    (void)len;
}

static int cmd_stats(struct opts *o)
{
    struct stats s = {o, json_object(), 0, 0, 0, 0, 0};
    int rc = verify_with(o, stats_cb, &s, NULL, NULL);
    if (o->format && strcmp(o->format, "json") == 0) {
        json_t *out =
            json_pack("{s:I, s:I, s:I, s:I, s:I, s:O, s:b}", "records", (json_int_t)s.records, "requests", (json_int_t)s.requests,
                      "results", (json_int_t)s.results, "denial_summaries", (json_int_t)s.summaries, "dropped",
                      (json_int_t)s.dropped, "tenants", s.tenants, "verified", rc == 0);
        char *text = out ? json_dumps(out, JSON_COMPACT | JSON_ENSURE_ASCII | JSON_SORT_KEYS) : NULL;
        if (text)
            printf("%s\n", text);
        free(text);
        json_decref(out);
    } else {
        const char *name;
        json_t *t;
        printf("%-24s %9s %9s %9s  %s\n", "TENANT", "REQUESTS", "ALLOWED", "DENIED", "DENIED BY REASON");
        for (void *it_ = json_object_iter(s.tenants); it_ != NULL; it_ = json_object_iter_next(s.tenants, it_)) {
            name = json_object_iter_key(it_);
            t = json_object_iter_value(it_);
            put_cell(name, 24);
            printf("%9lld %9lld %9lld ", (long long)json_integer_value(json_object_get(t, "requests")),
                   (long long)json_integer_value(json_object_get(t, "allowed")),
                   (long long)json_integer_value(json_object_get(t, "denied")));
            const char *reason;
            json_t *n;
            for (void *rit_ = json_object_iter(json_object_get(t, "reasons")); rit_ != NULL;
                 rit_ = json_object_iter_next(json_object_get(t, "reasons"), rit_)) {
                reason = json_object_iter_key(rit_);
                n = json_object_iter_value(rit_);
                putchar(' ');
                put_safe(stdout, reason, strlen(reason), 0);
                printf("=%lld", (long long)json_integer_value(n));
            }
            putchar('\n');
        }
        printf("%-24s %9llu   (%llu records in range, %llu execution results, %llu denial summaries)%s\n", "total",
               (unsigned long long)s.requests, (unsigned long long)s.records, (unsigned long long)s.results,
               (unsigned long long)s.summaries, rc == 0 ? "" : "  [INCOMPLETE: verification failed]");
        if (s.dropped)
            printf("%llu record(s) nobody waited for (denials) were not written: the audit disk was below its reserve\n",
                   (unsigned long long)s.dropped);
    }
    json_decref(s.tenants);
    return rc;
}

/* ---- show ---------------------------------------------------------------------------------- */

struct show {
    const char *request_id;
    json_t *records; /* verified records of the request, in order */
    json_t *results; /* "<seq>" -> the SHA-256 of its line, for each result record among them */
};

static void show_cb(void *arg, json_t *rec, const char *line, size_t len)
{
    struct show *s = arg;
    const char *rid = str(rec, "request_id"), *type = str(rec, "type");
    if (rid == NULL || strcmp(rid, s->request_id) != 0)
        return;
    json_array_append(s->records, rec);
    if (type != NULL && strcmp(type, "result") == 0) {
        uint8_t h[AUDIT_HASH_LEN];
        char hex[AUDIT_HEX_LEN + 1], seq[24];
        audit_sha256(line, len, h);
        moat_hex_encode(h, sizeof(h), hex);
        snprintf(seq, sizeof(seq), "%lld", (long long)json_integer_value(json_object_get(rec, "seq")));
        json_object_set_new(s->results, seq, json_string(hex));
    }
}

/* One review: verdict, reviewer, time, whether the result it names (by seq
 * and line SHA-256) is the one in the trail, and its note.  1 when it is
 * not (never expected: the writer checked it). */
static int put_review(const struct show *s, json_t *rec)
{
    char seq[24];
    const char *note = str(rec, "note"), *sha = str(rec, "result_sha256");
    json_int_t rseq = json_integer_value(json_object_get(rec, "result_seq"));
    snprintf(seq, sizeof(seq), "%lld", (long long)rseq);
    const char *have = json_string_value(json_object_get(s->results, seq));
    int named = have != NULL && sha != NULL && strcmp(have, sha) == 0;
    printf("  %s", "");
    put_cell(str(rec, "verdict"), 14);
    fputs("by ", stdout);
    put_cell(str(rec, "key_id"), 0);
    fputs("of ", stdout);
    put_cell(str(rec, "tenant"), 0);
    fputs("at ", stdout);
    put_cell(str(rec, "time"), 0);
    printf("(record %lld; result record %s: %s)\n", (long long)json_integer_value(json_object_get(rec, "seq")), seq,
           named ? "the one shown above" : "NOT IN THE TRAIL AS NAMED");
    if (note != NULL && note[0] != '\0') {
        fputs("      note \"", stdout);
        put_safe(stdout, note, json_string_length(json_object_get(rec, "note")), 0);
        fputs("\"\n", stdout);
    }
    return !named;
}

/* The request's reviews, oldest first, after its records. */
static int show_reviews(const struct show *s)
{
    size_t i, n = 0;
    json_t *rec;
    int bad = 0;
    json_array_foreach(s->records, i, rec)
    {
        const char *type = str(rec, "type");
        if (type == NULL || strcmp(type, "review") != 0)
            continue;
        if (n++ == 0)
            printf("\nreviews\n");
        bad |= put_review(s, rec);
    }
    if (n == 0 && json_object_size(s->results) > 0)
        printf("\nreviews\n  (none yet)\n");
    return bad;
}

static void indent(int n)
{
    for (int i = 0; i < n; i++)
        fputs("  ", stdout);
}

/* The bytes of canonical base64 text (malloc'd), or NULL when it is not. */
static unsigned char *unbase64(const char *in, size_t len, size_t *outlen)
{
    unsigned char *out = malloc(MOAT_BASE64_DECODED_MAX(len) + 1);
    if (out != NULL && moat_base64_decode(in, len, out, outlen) != 0) {
        free(out);
        out = NULL;
    }
    return out;
}

/* Text as a block: each line after "| "; a last line without a newline is
 * marked, so the block gives back the exact text. */
static void put_block(const char *text, size_t len, int depth)
{
    size_t start = 0;
    if (len == 0)
        return;
    while (start < len) {
        const char *nl = memchr(text + start, '\n', len - start);
        size_t end = nl ? (size_t)(nl - text) : len;
        indent(depth);
        fputs("| ", stdout);
        put_safe(stdout, text + start, end - start, 1);
        putchar('\n');
        if (nl == NULL) {
            indent(depth);
            fputs("\\ no newline at end\n", stdout);
        }
        start = end + 1;
    }
}

static void put_json(const char *key, json_t *v, int depth);

/* Each member of an object, at depth. */
static void put_members(json_t *obj, int depth)
{
    for (void *it = json_object_iter(obj); it != NULL; it = json_object_iter_next(obj, it))
        put_json(json_object_iter_key(it), json_object_iter_value(it), depth);
}

static void put_string_value(const char *key, const char *s, size_t len, int depth)
{
    size_t klen = key ? strlen(key) : 0;
    if (klen >= 6 && strcmp(key + klen - 6, "base64") == 0) {
        size_t n = 0;
        unsigned char *raw = unbase64(s, len, &n);
        if (raw != NULL && moat_utf8_valid(raw, n)) {
            printf(" (base64, decoded: %zu bytes of UTF-8 text)\n", n);
            put_block((const char *)raw, n, depth + 1);
            free(raw);
            return;
        }
        if (raw != NULL) {
            printf(" (base64 as stored: %zu bytes, binary)\n", n);
            indent(depth + 1);
            fwrite(s, 1, len, stdout);
            putchar('\n');
            free(raw);
            return;
        }
    }
    if (memchr(s, '\n', len) != NULL && moat_utf8_valid((const uint8_t *)s, len)) {
        printf(" (%zu bytes of text)\n", len);
        put_block(s, len, depth + 1);
        return;
    }
    fputs(" \"", stdout);
    put_safe(stdout, s, len, 0);
    fputs("\"\n", stdout);
}

static void put_json(const char *key, json_t *v, int depth)
{
    indent(depth);
    if (key != NULL) {
        put_safe(stdout, key, strlen(key), 0);
        putchar(':');
    }
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        putchar('\n');
        put_members(v, depth + 1);
        break;
    case JSON_ARRAY: {
        size_t i;
        json_t *x;
        if (json_array_size(v) == 0) {
            puts(" []");
            break;
        }
        putchar('\n');
        for (i = 0; i < json_array_size(v) && (x = json_array_get(v, i)) != NULL; i++) {
            char idx[32];
            snprintf(idx, sizeof(idx), "[%zu]", i);
            put_json(idx, x, depth + 1);
        }
        break;
    }
    case JSON_STRING:
        put_string_value(key, json_string_value(v), json_string_length(v), depth);
        break;
    default: {
        char *t = json_dumps(v, JSON_ENCODE_ANY);
        printf(" %s\n", t ? t : "?");
        free(t);
    }
    }
}

static int is_hex64(const char *s)
{
    return s != NULL && strlen(s) == AUDIT_HEX_LEN && moat_hex_valid(s, AUDIT_HEX_LEN, MOAT_HEX_LOWER);
}

/* A packet in a pack: at is "audit-<16 digits>.pack:<offset>:<length>",
 * from the verified record.  The bytes in *buf (malloc'd), or 1. */
static int read_packet_pack(const char *dir, const char *at, char *path, size_t pathlen, char **buf, size_t *len)
{
    char name[32];
    unsigned long long off, n;
    int used = 0;
    if (sscanf(at, "%27[-a-z0-9.]:%llu:%llu%n", name, &off, &n, &used) != 3 || at[used] != '\0' || strlen(name) != 27 ||
        strncmp(name, "audit-", 6) != 0 || strspn(name + 6, "0123456789") != 16 || strcmp(name + 22, ".pack") != 0 ||
        n > AUDIT_WIRE_MAX_PACKET)
        return die(1, "show: the record's packet location is malformed");
    snprintf(path, pathlen, "%s/%s", dir, name);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return die(1, "show: packet pack %s: %s (expired or removed)", path, strerror(errno));
    char *b = malloc(n ? n : 1);
    ssize_t got = b ? pread(fd, b, n, (off_t)off) : -1;
    close(fd);
    if (got < 0 || (unsigned long long)got != n) {
        free(b);
        return die(1, "show: packet at %s: cannot read %llu bytes at offset %llu (truncated?)", path, n, off);
    }
    *buf = b;
    *len = n;
    return 0;
}

/* A verified packet, for reading: JSON as a tree, other UTF-8 text as a
 * block, anything else only counted. */
static void print_packet(const char *ref, const char *buf, size_t len)
{
    json_error_t jerr;
    printf("\npacket %s (%zu bytes, SHA-256 matches the record)\n", ref, len);
    json_t *j = json_loadb(buf, len, JSON_ALLOW_NUL, &jerr);
    if (j != NULL) {
        if (json_is_object(j))
            put_members(j, 1);
        else
            put_json(NULL, j, 1);
        json_decref(j);
    } else if (moat_utf8_valid((const uint8_t *)buf, len)) {
        printf("  (not JSON: %s)\n", jerr.text);
        put_block(buf, len, 1);
    } else {
        printf("  (not JSON and not UTF-8: %zu bytes; use --raw-packet)\n", len);
    }
}

/* Reads and checks the packet a verified record names: its bytes in *buf
 * (malloc'd) only when their SHA-256 is the record's reference.  0 or 1. */
static int load_packet(const char *dir, const char *ref, const char *at, char **buf, size_t *len)
{
    char path[4200], hex[AUDIT_HEX_LEN + 1];
    uint8_t h[AUDIT_HASH_LEN];
    if (!is_hex64(ref))
        return die(1, "show: the record's packet reference is not a SHA-256");
    if (at == NULL)
        return die(1, "show: the record names packet %s but not where it is (no packet_at)", ref);
    if (read_packet_pack(dir, at, path, sizeof(path), buf, len) != 0)
        return 1;
    audit_sha256(*buf, *len, h);
    moat_hex_encode(h, sizeof(h), hex);
    if (strcmp(hex, ref) != 0) {
        free(*buf);
        *buf = NULL;
        return die(1, "show: packet %s at %s does not match the record's reference (its SHA-256 is %s): tampered", path,
                   strchr(at, ':') + 1, hex);
    }
    return 0;
}

/* Reads, checks and prints (or writes raw) one packet.  0 or 1. */
static int show_packet(const char *dir, const char *ref, const char *at, int raw)
{
    char *buf = NULL;
    size_t len = 0;
    if (load_packet(dir, ref, at, &buf, &len) != 0)
        return 1;
    if (raw)
        fwrite(buf, 1, len, stdout);
    else
        print_packet(ref, buf, len);
    free(buf);
    return 0;
}

/* ---- show --transcript: a session replayed ------------------------------------------------ */

/* What a field of a transcript event may hold. */
enum tr_type {
    TR_NAME, /* a string from the field's set */
    TR_NAME_OR_NULL,
    TR_TEXT_OR_NULL, /* any string (printed escaped), or null */
    TR_INT_OR_NULL,
    TR_BASE64, /* canonical base64: the event's data */
};

struct tr_field {
    const char *key;
    enum tr_type type;
    const char *const *set; /* TR_NAME*: the names allowed, NULL-terminated */
};

#define TR_MAX_FIELDS 5

/* One kind of event: its name and exactly its fields besides at_ms and event. */
struct tr_shape {
    const char *event;
    struct tr_field fields[TR_MAX_FIELDS];
};

static const char *const tr_streams[] = {"stdin", "stdout", "stderr", NULL};
static const char *const tr_stages[] = {"compile", "run", NULL};
static const char *const tr_clocks[] = {"wall", "idle", "cpu", NULL};

static const struct tr_shape tr_shapes[] = {
    {"stage", {{"stage", TR_NAME, tr_stages}}},
    {"data", {{"stream", TR_NAME, tr_streams}, {"data_base64", TR_BASE64, NULL}}},
    {"signal", {{"signal", TR_TEXT_OR_NULL, NULL}}},
    {"stdin_close", {{NULL, TR_NAME, NULL}}}, /* no fields */
    {"exit",
     {{"stage", TR_NAME, tr_stages},
      {"status", TR_TEXT_OR_NULL, NULL},
      {"clock", TR_NAME_OR_NULL, tr_clocks},
      {"code", TR_INT_OR_NULL, NULL},
      {"signal", TR_TEXT_OR_NULL, NULL}}},
};

/* One decoded event: the object (borrowed from the packet) and its data. */
struct tr_event {
    json_int_t at_ms;
    const struct tr_shape *shape;
    json_t *obj;
    const char *stream;  /* data: the stream's name */
    unsigned char *data; /* data: the decoded bytes (malloc'd) */
    size_t len;
};

static size_t tr_nfields(const struct tr_shape *sh)
{
    size_t n = 0;
    while (n < TR_MAX_FIELDS && sh->fields[n].key != NULL)
        n++;
    return n;
}

static int in_set(const char *s, const char *const *set)
{
    for (; s != NULL && *set != NULL; set++)
        if (strcmp(s, *set) == 0)
            return 1;
    return 0;
}

/* NULL when v fits f, else what is wrong with it. */
static const char *tr_field_problem(const struct tr_field *f, json_t *v)
{
    switch (f->type) {
    case TR_NAME_OR_NULL:
        if (json_is_null(v))
            return NULL;
        /* fall through */
    case TR_NAME:
        return json_is_string(v) && in_set(json_string_value(v), f->set) ? NULL : "is not one of the names it may hold";
    case TR_TEXT_OR_NULL:
        return json_is_string(v) || json_is_null(v) ? NULL : "is not a string or null";
    case TR_INT_OR_NULL:
        return json_is_integer(v) || json_is_null(v) ? NULL : "is not an integer or null";
    case TR_BASE64:
        return json_is_string(v) ? NULL : "is not a string";
    }
    return "has no type";
}

/*
 * Decodes event i strictly into *e: an object with at_ms (an integer, not
 * below the previous event's, prev) and a known event, and exactly that
 * event's fields, each of its type.  0, or 1 with the reason said.
 */
static int tr_decode(json_t *obj, size_t i, json_int_t prev, struct tr_event *e)
{
    json_t *at = json_object_get(obj, "at_ms"), *ev = json_object_get(obj, "event");
    const struct tr_shape *sh = NULL;
    size_t nf;

    memset(e, 0, sizeof(*e));
    if (!json_is_object(obj) || !json_is_integer(at) || !json_is_string(ev))
        return die(1, "show: transcript[%zu] is not an event (an object with at_ms and event)", i);
    if (json_integer_value(at) < prev)
        return die(1, "show: transcript[%zu]: at_ms %lld goes back (the one before is at %lld)", i,
                   (long long)json_integer_value(at), (long long)prev);
    for (size_t k = 0; k < sizeof(tr_shapes) / sizeof(tr_shapes[0]); k++)
        if (strcmp(json_string_value(ev), tr_shapes[k].event) == 0)
            sh = &tr_shapes[k];
    if (sh == NULL)
        return die(1, "show: transcript[%zu]: unknown event (see FORMAT.md)", i);
    nf = tr_nfields(sh);
    if (json_object_size(obj) != nf + 2)
        return die(1, "show: transcript[%zu]: a %s event has exactly at_ms, event and %zu other field(s)", i, sh->event, nf);
    for (size_t k = 0; k < nf; k++) {
        json_t *v = json_object_get(obj, sh->fields[k].key);
        const char *why = v == NULL ? "is missing" : tr_field_problem(&sh->fields[k], v);
        if (why != NULL)
            return die(1, "show: transcript[%zu]: the %s event's %s %s", i, sh->event, sh->fields[k].key, why);
    }
    e->at_ms = json_integer_value(at);
    e->shape = sh;
    e->obj = obj;
    if (strcmp(sh->event, "data") == 0) {
        json_t *d = json_object_get(obj, "data_base64");
        e->stream = json_string_value(json_object_get(obj, "stream"));
        e->data = unbase64(json_string_value(d), json_string_length(d), &e->len);
        if (e->data == NULL)
            return die(1, "show: transcript[%zu]: data_base64 is not canonical base64", i);
    }
    return 0;
}

/* One value of an event's line: names and text escaped, null as "-". */
static void tr_put_value(json_t *v)
{
    if (json_is_string(v))
        put_safe(stdout, json_string_value(v), json_string_length(v), 0);
    else if (json_is_integer(v))
        printf("%lld", (long long)json_integer_value(v));
    else
        putchar('-');
}

/* "+<at_ms> ms  <stream or event>  <data>": data quoted and escaped; other
 * events their first field bare, then key=value for those not null. */
static void tr_print(const struct tr_event *e)
{
    size_t nf = tr_nfields(e->shape);

    printf("+%lld ms  %s", (long long)e->at_ms, e->stream != NULL ? e->stream : e->shape->event);
    if (e->stream != NULL) {
        fputs("  \"", stdout);
        put_safe(stdout, (const char *)e->data, e->len, 0);
        putchar('"');
    }
    for (size_t k = 0; e->stream == NULL && k < nf; k++) {
        json_t *v = json_object_get(e->obj, e->shape->fields[k].key);
        if (k == 0) {
            fputs("  ", stdout);
        } else if (json_is_null(v)) {
            continue;
        } else {
            printf(" %s=", e->shape->fields[k].key);
        }
        tr_put_value(v);
    }
    putchar('\n');
}

/* Decodes the whole transcript (nothing is printed unless all of it
 * decodes), then prints it, or writes the bytes of one stream.  0 or 1. */
static int tr_replay(json_t *transcript, const char *raw_stream)
{
    size_t n = json_array_size(transcript), i;
    struct tr_event *ev = calloc(n ? n : 1, sizeof(*ev));
    json_int_t prev = 0;
    int rc = 0;

    if (ev == NULL)
        return die(1, "show: out of memory");
    for (i = 0; i < n && rc == 0; i++) {
        rc = tr_decode(json_array_get(transcript, i), i, prev, &ev[i]);
        prev = ev[i].at_ms;
    }
    for (size_t k = 0; k < n && rc == 0; k++) {
        if (raw_stream == NULL)
            tr_print(&ev[k]);
        else if (ev[k].stream != NULL && strcmp(ev[k].stream, raw_stream) == 0)
            fwrite(ev[k].data, 1, ev[k].len, stdout);
    }
    for (size_t k = 0; k < n; k++)
        free(ev[k].data);
    free(ev);
    if (rc == 0 && fflush(stdout) != 0)
        return die(1, "show: writing the transcript: %s", strerror(errno));
    return rc;
}

/* The request's one session packet, parsed (the caller decrefs), or NULL with the reason said. */
static json_t *session_packet(const char *dir, const char *request_id, json_t *records)
{
    json_t *found = NULL, *rec;
    size_t packets = 0;

    for (size_t i = 0; i < json_array_size(records) && (rec = json_array_get(records, i)) != NULL; i++) {
        const char *ref = str(rec, "packet");
        char *buf = NULL;
        size_t len = 0;
        json_t *p;
        if (ref == NULL)
            continue;
        packets++;
        if (load_packet(dir, ref, str(rec, "packet_at"), &buf, &len) != 0) {
            json_decref(found);
            return NULL;
        }
        p = json_loadb(buf, len, JSON_ALLOW_NUL, NULL);
        free(buf);
        if (!json_is_object(p) || !json_is_string(json_object_get(p, "kind")) ||
            strcmp(json_string_value(json_object_get(p, "kind")), "session") != 0) {
            json_decref(p);
            continue;
        }
        if (found != NULL) {
            json_decref(found);
            json_decref(p);
            die(1, "show: request %s has more than one session packet", request_id);
            return NULL;
        }
        found = p;
    }
    if (found == NULL)
        die(1, "show: request %s has no session packet (%s); --transcript replays GET /api/v2/connect sessions", request_id,
            packets ? "its packet is not a session's" : "it has no packet");
    else if (!json_is_array(json_object_get(found, "transcript"))) {
        json_decref(found);
        found = NULL;
        die(1, "show: request %s: the session packet's transcript is not an array", request_id);
    }
    return found;
}

static int show_transcript(const struct opts *o, json_t *records)
{
    json_t *p = session_packet(o->pos[0], o->pos[1], records);
    int rc;

    if (p == NULL)
        return 1;
    rc = tr_replay(json_object_get(p, "transcript"), o->raw_stream);
    json_decref(p);
    return rc;
}

static int cmd_show(struct opts *o)
{
    struct show s = {o->pos[1], json_array(), json_object()};
    int rc = verify_with(o, show_cb, &s, NULL, NULL);
    size_t i;
    json_t *rec;
    if (json_array_size(s.records) == 0) {
        json_decref(s.records);
        json_decref(s.results);
        return rc ? rc : die(1, "show: no verified record of request %s", o->pos[1]);
    }
    if (o->transcript) {
        int trc = show_transcript(o, s.records);
        json_decref(s.records);
        json_decref(s.results);
        return rc ? rc : trc;
    }
    int prc = 0, packets = 0;
    for (i = 0; i < json_array_size(s.records) && (rec = json_array_get(s.records, i)) != NULL; i++) {
        const char *ref = str(rec, "packet");
        if (!o->raw_packet) {
            printf("%srecord seq %lld", i ? "\n" : "", (long long)json_integer_value(json_object_get(rec, "seq")));
            const char *type = str(rec, "type");
            if (type) {
                fputs(" (", stdout);
                put_safe(stdout, type, strlen(type), 0);
                putchar(')');
            }
            putchar('\n');
            put_members(rec, 1);
        }
        if (ref != NULL) {
            packets++;
            if (show_packet(o->pos[0], ref, str(rec, "packet_at"), o->raw_packet) != 0)
                prc = 1;
        }
    }
    if (!o->raw_packet && show_reviews(&s) != 0)
        prc = 1;
    json_decref(s.records);
    json_decref(s.results);
    if (o->raw_packet && packets == 0 && rc == 0)
        return die(1, "show: request %s has no packet", o->pos[1]);
    return rc ? rc : prc;
}

int main(int argc, char **argv)
{
    struct opts o;
    if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "help") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    static const char *const cmds[] = {"init", "verify", "query", "show", "stats", "export"};
    int known = 0;
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
        known |= strcmp(argv[1], cmds[i]) == 0;
    if (!known)
        return die(2, "unknown command '%s' (see --help)", argv[1]);
    int rc = parse_opts(argc, argv, &o);
    if (rc != 0)
        return rc;
    if (strcmp(o.cmd, "init") == 0)
        return cmd_init(&o);
    if (strcmp(o.cmd, "verify") == 0)
        return cmd_verify(&o);
    if (strcmp(o.cmd, "query") == 0)
        return cmd_query(&o, 0);
    if (strcmp(o.cmd, "export") == 0)
        return cmd_query(&o, 1);
    if (strcmp(o.cmd, "stats") == 0)
        return cmd_stats(&o);
    return cmd_show(&o);
}
