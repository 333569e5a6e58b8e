/*
 * moat-audit - for security reviewers: verify and read the audit trail;
 * for admins: create a new audit directory.  Never modifies a log.
 *
 *   moat-audit init DIR [--user USER]       new directory, keys, verifier.key
 *   moat-audit verify DIR [--key FILE] [--checkpoints FILE]
 *   moat-audit query DIR [filters] [--format table|json]
 *   moat-audit show DIR REQUEST_ID [--raw-packet]
 *   moat-audit stats DIR [--since T] [--until T] [--tenant T] [--format table|json]
 *   moat-audit export DIR [--since T] [--until T] [--tenant T]
 *
 * Everything but init reads only records that verify: the verifier walks
 * the chain and hands each good record to a callback.  When verification
 * fails, what verified before the failure is still printed, and the exit
 * status is 1 with the problem on stderr.  Strings from the log are printed
 * with terminal control characters escaped, so a tenant-supplied string
 * cannot rewrite a reviewer's screen.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
               "  verify DIR [--key VERIFIER_KEY] [--checkpoints FILE]\n"
               "      check the whole trail; exit 0 if it verifies, 1 with the first bad record and why\n"
               "  query DIR [--tenant T] [--key-id K] [--since TIME] [--until TIME]\n"
               "            [--decision allowed|denied] [--reason R] [--status S] [--language L]\n"
               "            [--type T] [--format table|json]\n"
               "      verified records that match (json: the lines as stored)\n"
               "  show DIR REQUEST_ID [--raw-packet]\n"
               "      every record of a request and its packet (code, stdin, args, limits, output);\n"
               "      --raw-packet writes the verified packet's bytes to stdout instead\n"
               "  stats DIR [--since TIME] [--until TIME] [--tenant T] [--format table|json]\n"
               "      requests per tenant, allowed and denied by reason\n"
               "  export DIR [--since TIME] [--until TIME] [--tenant T]\n"
               "      the verified records as JSON lines, for archiving off the host\n"
               "\n"
               "Every command but init takes --key VERIFIER_KEY (default DIR/verifier.key; keep a copy\n"
               "off the host) and --checkpoints FILE (a copy of checkpoints.log kept elsewhere).\n"
               "TIME is 2026-11-29T16:40:00Z (fractions allowed) or seconds since the epoch; --since\n"
               "is inclusive, --until exclusive.  Commands never modify the log.  Exit status: 0 ok,\n"
               "1 verification failed or not found, 2 usage error.\n");
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
    const char *user, *key, *checkpoints, *tenant, *key_id, *since_s, *until_s, *decision, *reason, *status, *language, *type,
        *format;
    int raw_packet;
    int64_t since_ms, until_ms; /* -1: unset */
};

struct optdef {
    const char *name;
    size_t off;
    const char *cmds; /* commands that take it, space-separated with spaces around */
};

#define OPT(field) offsetof(struct opts, field)

static const struct optdef optdefs[] = {
    {"--user", OPT(user), " init "},
    {"--key", OPT(key), " verify query show stats export "},
    {"--checkpoints", OPT(checkpoints), " verify query show stats export "},
    {"--tenant", OPT(tenant), " query stats export "},
    {"--key-id", OPT(key_id), " query "},
    {"--since", OPT(since_s), " query stats export "},
    {"--until", OPT(until_s), " query stats export "},
    {"--decision", OPT(decision), " query "},
    {"--reason", OPT(reason), " query "},
    {"--status", OPT(status), " query "},
    {"--language", OPT(language), " query "},
    {"--type", OPT(type), " query "},
    {"--format", OPT(format), " query stats "},
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
            if (i + 1 >= argc)
                return die(2, "%s: %s needs a value", o->cmd, a);
            *(const char **)((char *)o + d->off) = argv[++i];
            continue;
        }
        if (o->npos >= 2)
            return die(2, "%s: unexpected argument '%s' (see --help)", o->cmd, a);
        o->pos[o->npos++] = a;
    }
    int want = strcmp(o->cmd, "show") == 0 ? 2 : 1;
    if (o->npos != want)
        return die(2, "%s: %s (see --help)", o->cmd, want == 2 ? "needs DIR and REQUEST_ID" : "needs DIR");
    o->since_ms = o->until_ms = -1;
    if (o->since_s && (o->since_ms = parse_time(o->since_s)) < 0)
        return die(2, "%s: bad --since '%s' (use 2026-11-29T16:40:00Z or seconds since the epoch)", o->cmd, o->since_s);
    if (o->until_s && (o->until_ms = parse_time(o->until_s)) < 0)
        return die(2, "%s: bad --until '%s' (use 2026-11-29T16:40:00Z or seconds since the epoch)", o->cmd, o->until_s);
    if (o->format && strcmp(o->format, "table") != 0 && strcmp(o->format, "json") != 0)
        return die(2, "%s: --format is table or json, not '%s'", o->cmd, o->format);
    if (o->decision && strcmp(o->decision, "allowed") != 0 && strcmp(o->decision, "denied") != 0)
        return die(2, "%s: --decision is allowed or denied, not '%s'", o->cmd, o->decision);
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

static int matches(const struct opts *o, json_t *rec)
{
    return in_time(o, rec) && (!o->tenant || field_is(rec, "tenant", o->tenant)) &&
           (!o->key_id || field_is(rec, "key_id", o->key_id)) && (!o->decision || field_is(rec, "decision", o->decision)) &&
           (!o->reason || field_is(rec, "reason", o->reason)) && (!o->status || field_is(rec, "status", o->status)) &&
           (!o->language || field_is(rec, "language", o->language)) && (!o->type || field_is(rec, "type", o->type));
}

/* Runs the verifier with cb; 0 when everything verified, else 1 with the
 * problem on stderr (what verified was already handed to cb). */
static int verify_with(const struct opts *o, audit_record_cb cb, void *arg, struct audit_verify_result **out)
{
    char keypath[4096], err[512];
    uint8_t k0[AUDIT_KEY_LEN], pub[AUDIT_PUB_LEN];
    const char *dir = o->pos[0];
    struct audit_verify_result *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return die(2, "%s: out of memory", o->cmd);
    snprintf(keypath, sizeof(keypath), "%s/verifier.key", dir);
    if (audit_read_verifier_key(o->key ? o->key : keypath, k0, pub, err, sizeof(err)) != 0) {
        free(r);
        return die(2, "%s: %s", o->cmd, err);
    }
    int rc = audit_verify_dir(dir, k0, pub, o->checkpoints, r, cb, arg);
    OPENSSL_cleanse(k0, sizeof(k0));
    fflush(stdout);
    if (rc != 0)
        die(1, "%s: verification FAILED after %llu good records: %s", o->cmd, (unsigned long long)r->records, r->problem);
    if (out)
        *out = r;
    else
        free(r);
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
    printf("audit directory %s ready; copy %s/verifier.key off this host for reviewers\n", o->pos[0], o->pos[0]);
    return 0;
}

static int cmd_verify(const struct opts *o)
{
    struct audit_verify_result *r = NULL;
    int rc = verify_with(o, NULL, NULL, &r);
    if (rc == 0)
        printf("OK: %llu records, last seq %llu, %llu signed checkpoints (last covers seq %llu), %llu repaired torn "
               "line(s)\n",
               (unsigned long long)r->records, (unsigned long long)r->last_seq, (unsigned long long)r->checkpoints,
               (unsigned long long)r->last_checkpoint_seq, (unsigned long long)r->repairs);
    free(r);
    return rc;
}

/* ---- query / export ----------------------------------------------------------------- */

struct query {
    const struct opts *o;
    int json;
    uint64_t shown;
};

static void query_cb(void *arg, json_t *rec, const char *line, size_t len)
{
    struct query *q = arg;
    if (!matches(q->o, rec))
        return;
    q->shown++;
    if (q->json) {
        fwrite(line, 1, len, stdout);
        putchar('\n');
        return;
    }
    char seq[24], decision[96], status[24], run[48];
    snprintf(seq, sizeof(seq), "%lld", (long long)json_integer_value(json_object_get(rec, "seq")));
    const char *type = str(rec, "type"), *endpoint = str(rec, "endpoint"), *dec = str(rec, "decision"),
               *reason = str(rec, "reason");
    if (dec && reason)
        snprintf(decision, sizeof(decision), "%s/%s", dec, reason);
    else
        snprintf(decision, sizeof(decision), "%s", dec ? dec : "");
    json_t *st = json_object_get(rec, "status");
    if (json_is_integer(st))
        snprintf(status, sizeof(status), "%lld", (long long)json_integer_value(st));
    else
        snprintf(status, sizeof(status), "%s", json_is_string(st) ? json_string_value(st) : "");
    json_t *rs = json_object_get(json_object_get(rec, "run"), "status");
    if (json_is_string(rs))
        snprintf(run, sizeof(run), "%s", json_string_value(rs));
    else if (json_is_integer(rs))
        snprintf(run, sizeof(run), "%lld", (long long)json_integer_value(rs));
    else
        run[0] = '\0';
    char ep[64];
    if (endpoint == NULL && type != NULL && strcmp(type, "request") != 0 && strcmp(type, "result") != 0) {
        snprintf(ep, sizeof(ep), "(%s)", type);
        endpoint = ep;
    } else if (type != NULL && strcmp(type, "result") == 0 && endpoint == NULL) {
        endpoint = "(result)";
    }
    put_cell(seq, 8);
    put_cell(str(rec, "time"), 24);
    put_cell(str(rec, "tenant"), 16);
    put_cell(str(rec, "key_id"), 24);
    put_cell(endpoint, 12);
    put_cell(decision, 20);
    put_cell(str(rec, "language"), 10);
    put_cell(status, 6);
    put_cell(run, 0);
    putchar('\n');
}

static int cmd_query(struct opts *o, int export)
{
    struct query q = {o, export || (o->format && strcmp(o->format, "json") == 0), 0};
    if (!q.json)
        printf("%-8s %-24s %-16s %-24s %-12s %-20s %-10s %-6s %s\n", "SEQ", "TIME", "TENANT", "KEY_ID", "ENDPOINT",
               "DECISION/REASON", "LANGUAGE", "STATUS", "RUN");
    int rc = verify_with(o, query_cb, &q, NULL);
    if (!q.json && rc == 0)
        printf("(%llu record(s))\n", (unsigned long long)q.shown);
    return rc;
}

/* ---- stats ------------------------------------------------------------------------------ */

struct stats {
    const struct opts *o;
    json_t *tenants; /* tenant -> {requests, allowed, denied, reasons: {reason: n}} */
    uint64_t records, requests, results;
};

static void bump(json_t *obj, const char *name)
{
    json_t *v = json_object_get(obj, name);
    json_object_set_new(obj, name, json_integer((v ? json_integer_value(v) : 0) + 1));
}

static void stats_cb(void *arg, json_t *rec, const char *line, size_t len)
{
    struct stats *s = arg;
    if (!in_time(s->o, rec) || (s->o->tenant && !field_is(rec, "tenant", s->o->tenant)))
        return;
    s->records++;
    const char *type = str(rec, "type");
    if (type && strcmp(type, "result") == 0)
        s->results++;
    const char *dec = str(rec, "decision");
    /* one decision per request: result records carry the outcome, not a decision */
    if (dec == NULL || type == NULL || strcmp(type, "request") != 0)
        return;
    s->requests++;
    const char *tenant = str(rec, "tenant");
    if (tenant == NULL)
        tenant = "(none)";
    json_t *t = json_object_get(s->tenants, tenant);
    if (t == NULL) {
        t = json_pack("{s:I, s:I, s:I, s:{}}", "requests", (json_int_t)0, "allowed", (json_int_t)0, "denied", (json_int_t)0,
                      "reasons");
        json_object_set_new(s->tenants, tenant, t);
    }
    bump(t, "requests");
    if (strcmp(dec, "allowed") == 0) {
        bump(t, "allowed");
    } else {
        bump(t, "denied");
        const char *reason = str(rec, "reason");
        bump(json_object_get(t, "reasons"), reason ? reason : "(none)");
    }
    (void)line;
    (void)len;
}

static int cmd_stats(struct opts *o)
{
    struct stats s = {o, json_object(), 0, 0, 0};
    int rc = verify_with(o, stats_cb, &s, NULL);
    if (o->format && strcmp(o->format, "json") == 0) {
        json_t *out = json_pack("{s:I, s:I, s:I, s:O, s:b}", "records", (json_int_t)s.records, "requests", (json_int_t)s.requests,
                                "results", (json_int_t)s.results, "tenants", s.tenants, "verified", rc == 0);
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
        printf("%-24s %9llu   (%llu records in range, %llu execution results)%s\n", "total", (unsigned long long)s.requests,
               (unsigned long long)s.records, (unsigned long long)s.results, rc == 0 ? "" : "  [INCOMPLETE: verification failed]");
    }
    json_decref(s.tenants);
    return rc;
}

/* ---- show ---------------------------------------------------------------------------------- */

struct show {
    const char *request_id;
    json_t *records; /* verified records of the request, in order */
};

static void show_cb(void *arg, json_t *rec, const char *line, size_t len)
{
    struct show *s = arg;
    const char *rid = str(rec, "request_id");
    if (rid && strcmp(rid, s->request_id) == 0)
        json_array_append(s->records, rec);
    (void)line;
    (void)len;
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

/* Reads, checks and prints (or writes raw) one packet.  0 or 1. */
static int show_packet(const char *dir, const char *ref, const char *at, int raw)
{
    char path[4200], hex[AUDIT_HEX_LEN + 1];
    uint8_t h[AUDIT_HASH_LEN];
    char *buf = NULL;
    size_t len = 0;
    if (!is_hex64(ref))
        return die(1, "show: the record's packet reference is not a SHA-256");
    if (at == NULL)
        return die(1, "show: the record names packet %s but not where it is (no packet_at)", ref);
    if (read_packet_pack(dir, at, path, sizeof(path), &buf, &len) != 0)
        return 1;
    audit_sha256(buf, len, h);
    moat_hex_encode(h, sizeof(h), hex);
    if (strcmp(hex, ref) != 0) {
        free(buf);
        return die(1, "show: packet %s at %s does not match the record's reference (its SHA-256 is %s): tampered", path,
                   strchr(at, ':') + 1, hex);
    }
    if (raw)
        fwrite(buf, 1, len, stdout);
    else
        print_packet(ref, buf, len);
    free(buf);
    return 0;
}

static int cmd_show(struct opts *o)
{
    struct show s = {o->pos[1], json_array()};
    int rc = verify_with(o, show_cb, &s, NULL);
    size_t i;
    json_t *rec;
    if (json_array_size(s.records) == 0) {
        json_decref(s.records);
        return rc ? rc : die(1, "show: no verified record of request %s", o->pos[1]);
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
    json_decref(s.records);
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
