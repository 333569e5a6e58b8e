/*
 * moatctl - administration tool for moat.
 *
 * Theory of operation
 * -------------------
 * Offline (no gateway needed):
 *   moatctl key new [--id HEX12]   print a new token and what to put in the config
 *   moatctl key hash TOKEN         check a token and print "<id> <sha256>"
 *
 * Everything else is one request to the gateway's control socket (the
 * supervisor's, control.c; only with the audit trail on): one JSON line
 * out, one JSON line back, then the connection closes.  The socket is
 * --socket PATH, else $MOAT_CONTROL, else GW_DEFAULT_CONTROL_SOCKET.
 *
 * A new key's secret is made here and printed once; only its id and
 * SHA-256 go to the gateway, which stores only those.
 *
 * Exit codes: 0 done; 1 refused or failed (one line on stderr saying why);
 * 2 usage; 3 the gateway cannot be reached (no socket, nobody listening,
 * no answer).
 */
#include "auth/apikey.h"
#include "common/gw_limits.h"
#include "moat_hex.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <jansson.h>
#include <openssl/crypto.h>

enum { EXIT_REFUSED = 1, EXIT_USAGE = 2, EXIT_UNREACHABLE = 3 };

#define MOATCTL_TIMEOUT_S 120 /* the supervisor serves one change at a time: others may be ahead */

static const char usage_text[] =
    "usage: moatctl [--socket PATH] [--json] COMMAND ...\n"
    "  tenant add NAME [FIELD=VALUE ...]     a tenant in the store (FIELD: a tenant's policy field, dotted for\n"
    "                                        nesting: rate.per_second=5; VALUE: JSON, else a string)\n"
    "  tenant set NAME FIELD=VALUE ...       change fields (FIELD= removes one)\n"
    "  tenant show NAME | tenant list\n"
    "  tenant remove NAME                    (its keys must be revoked first)\n"
    "  key create --tenant T [--expires 90d] [--scopes a,b] [--note TEXT]\n"
    "                                        a new key: its token is printed once\n"
    "  key rotate KEY_ID [--grace 24h] [--expires DUR] [--note TEXT]\n"
    "                                        a new key now; the old one works until the grace ends\n"
    "  key revoke KEY_ID                     at once\n"
    "  key list [--tenant T]                 id, tenant, scopes, created, expires, last used, state\n"
    "  jwt-issuer add NAME FIELD=VALUE ...   fields of a jwt_issuers entry (iss, aud, algorithm, tenants, keys, ...)\n"
    "  jwt-issuer remove NAME | jwt-issuer list\n"
    "  status                                gateway workers, backend, audit writer, Redis\n"
    "  queue [dead]                          the shared submissions queue (submissions.queue redis): depth per\n"
    "                                        tenant, entries running per gateway, oldest age; or its dead letters\n"
    "  key new [--id HEX12] | key hash TOKEN offline: a token for the configuration file\n"
    "durations: N, Ns, Nm, Nh or Nd.  --json: the gateway's answer as JSON.\n"
    "socket: --socket, else $MOAT_CONTROL, else " GW_DEFAULT_CONTROL_SOCKET ".\n"
    "exit: 0 done, 1 refused or failed, 2 usage, 3 cannot reach the gateway\n"
    "see moatctl(8)\n";

struct opts {
    const char *socket;
    int json;
    int argc; /* the command's words and options */
    char **argv;
};

__attribute__((format(printf, 1, 2))) static int usage_error(const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "moatctl: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (try moatctl --help)\n");
    return EXIT_USAGE;
}

/* ---------------------------------------------------------------- offline: key new, key hash */

static int make_key(const char *want, char token[APIKEY_TOKEN_LEN + 1], char id[APIKEY_ID_LEN + 1], char hex[APIKEY_DIGEST_HEX + 1])
{
    uint8_t digest[APIKEY_DIGEST_LEN];
    const char *why = NULL;

    if (apikey_generate(want, token, &why) != 0 || apikey_parse(token, APIKEY_TOKEN_LEN, id, &why) != 0 ||
        apikey_digest(token, APIKEY_TOKEN_LEN, digest) != 0) {
        fprintf(stderr, "moatctl: cannot create a key: %s\n", why != NULL ? why : "SHA-256 failed");
        return -1;
    }
    moat_hex_encode(digest, sizeof(digest), hex);
    return 0;
}

static int key_new(int argc, char **argv)
{
    char token[APIKEY_TOKEN_LEN + 1], id[APIKEY_ID_LEN + 1], hex[APIKEY_DIGEST_HEX + 1];
    const char *want = NULL;

    if (argc == 2 && strcmp(argv[0], "--id") == 0)
        want = argv[1];
    else if (argc != 0)
        return usage_error("usage: moatctl key new [--id HEX12]");
    if (want != NULL && !apikey_valid_id(want, strlen(want))) {
        fprintf(stderr, "moatctl: key id must be %d lowercase hex characters\n", APIKEY_ID_LEN);
        return EXIT_REFUSED;
    }
    if (make_key(want, token, id, hex) != 0)
        return EXIT_REFUSED;
    printf("token: %s\nid: %s sha256: %s\n", token, id, hex);
    OPENSSL_cleanse(token, sizeof(token));
    return fflush(stdout) == 0 ? 0 : EXIT_REFUSED;
}

static int key_hash(int argc, char **argv)
{
    char id[APIKEY_ID_LEN + 1], hex[APIKEY_DIGEST_HEX + 1];
    uint8_t digest[APIKEY_DIGEST_LEN];
    const char *why = NULL;

    if (argc != 1)
        return usage_error("usage: moatctl key hash TOKEN");
    if (apikey_parse(argv[0], strlen(argv[0]), id, &why) != 0) {
        fprintf(stderr, "moatctl: invalid token: %s\n", why);
        return EXIT_REFUSED;
    }
    if (apikey_digest(argv[0], strlen(argv[0]), digest) != 0) {
        fprintf(stderr, "moatctl: SHA-256 failed\n");
        return EXIT_REFUSED;
    }
    moat_hex_encode(digest, sizeof(digest), hex);
    printf("%s %s\n", id, hex);
    return fflush(stdout) == 0 ? 0 : EXIT_REFUSED;
}

/* ---------------------------------------------------------------- the control socket */

static int connect_control(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    struct timeval tv = {MOATCTL_TIMEOUT_S, 0};
    int fd;

    if (strlen(path) >= sizeof(sa.sun_path)) {
        fprintf(stderr, "moatctl: %s: socket path too long\n", path);
        return -1;
    }
    memcpy(sa.sun_path, path, strlen(path) + 1);
    if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        fprintf(
            stderr,
            "moatctl: cannot reach the gateway at %s: %s (is moat-gateway running, with the audit trail and a control section?)\n",
            path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    return fd;
}

/* One request, one answer: *reply is the decoded answer; the exit code. */
static int call(const struct opts *o, json_t *req, json_t **reply)
{
    char *text = json_dumps(req, JSON_COMPACT | JSON_ENSURE_ASCII), *in = NULL;
    size_t len = 0, cap = 0;
    json_error_t je;
    int fd, rc = EXIT_UNREACHABLE, sent_errno = 0;

    json_decref(req);
    *reply = NULL;
    if (text == NULL) {
        fprintf(stderr, "moatctl: out of memory\n");
        return EXIT_REFUSED;
    }
    if ((fd = connect_control(o->socket)) < 0) {
        free(text);
        return EXIT_UNREACHABLE;
    }
    /* a refusal (the peer check) may come, and the socket close, before the request is sent: read it anyway */
    if (send(fd, text, strlen(text), MSG_NOSIGNAL) != (ssize_t)strlen(text) || send(fd, "\n", 1, MSG_NOSIGNAL) != 1)
        sent_errno = errno;
    for (;;) {
        ssize_t n;
        if (len + 4096 > cap) {
            char *grown;
            if (cap >= GW_CONTROL_MAX_REPLY || (grown = realloc(in, cap + 65536)) == NULL) {
                fprintf(stderr, "moatctl: the answer is too large\n");
                rc = EXIT_REFUSED;
                goto out;
            }
            in = grown;
            cap += 65536;
        }
        if ((n = recv(fd, in + len, cap - len - 1, 0)) < 0 && errno == ECONNRESET && len > 0)
            break;
        if (n < 0) {
            fprintf(stderr, "moatctl: %s: no answer from the gateway: %s\n", o->socket, strerror(errno));
            goto out;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    if (len == 0) {
        if (sent_errno != 0)
            fprintf(stderr, "moatctl: %s: cannot send the request: %s\n", o->socket, strerror(sent_errno));
        else
            fprintf(stderr, "moatctl: %s: the gateway closed the connection without an answer\n", o->socket);
        goto out;
    }
    if ((*reply = json_loadb(in, len, 0, &je)) == NULL || !json_is_object(*reply)) {
        fprintf(stderr, "moatctl: a malformed answer from the gateway: %s\n", je.text);
        rc = EXIT_REFUSED;
        goto out;
    }
    rc = 0;
out:
    close(fd);
    free(text);
    free(in);
    return rc;
}

/* The answer: ok, or its error on stderr. */
static int answered(json_t *reply)
{
    if (json_is_true(json_object_get(reply, "ok")))
        return 0;
    fprintf(stderr, "moatctl: %s\n",
            json_string_value(json_object_get(reply, "error")) ? json_string_value(json_object_get(reply, "error")) : "refused");
    return EXIT_REFUSED;
}

static int print_json(const json_t *v)
{
    char *s = json_dumps(v, JSON_INDENT(2) | JSON_PRESERVE_ORDER);

    if (s == NULL)
        return EXIT_REFUSED;
    printf("%s\n", s);
    free(s);
    return fflush(stdout) == 0 ? 0 : EXIT_REFUSED;
}

/* Ask, check the answer, and with --json print it whole; *reply stays the caller's on 0. */
static int ask(const struct opts *o, json_t *req, json_t **reply)
{
    int rc = call(o, req, reply);

    if (rc == 0 && (rc = answered(*reply)) == 0 && o->json)
        rc = print_json(*reply);
    if (rc != 0) {
        json_decref(*reply);
        *reply = NULL;
    }
    return rc;
}

/* A request whose answer needs no printing beyond "done". */
static int ask_done(const struct opts *o, json_t *req, const char *done)
{
    json_t *reply;
    int rc = ask(o, req, &reply);

    if (rc == 0 && !o->json)
        printf("%s\n", done);
    json_decref(reply);
    return rc;
}

/* ---------------------------------------------------------------- arguments */

/* "90d" -> seconds; -1 if it is not a duration. */
static long long duration(const char *s)
{
    char *end;
    long long n;

    errno = 0;
    n = strtoll(s, &end, 10);
    if (errno != 0 || end == s || n < 0 || s[0] == '-' || s[0] == '+')
        return -1;
    if (*end == 's' || *end == '\0')
        ;
    else if (*end == 'm')
        n *= 60;
    else if (*end == 'h')
        n *= 3600;
    else if (*end == 'd')
        n *= 86400;
    else
        return -1;
    if (*end != '\0' && end[1] != '\0')
        return -1;
    return n > (long long)GW_CONTROL_MAX_DURATION_S ? -1 : n;
}

/* FIELD=VALUE into obj: a dotted FIELD nests; VALUE as JSON if it is JSON, else a string; empty: null. */
static int set_field(json_t *obj, const char *arg)
{
    const char *eq = strchr(arg, '=');
    char path[256], *dot, *part;
    json_t *v;

    if (eq == NULL || eq == arg || (size_t)(eq - arg) >= sizeof(path))
        return -1;
    snprintf(path, sizeof(path), "%.*s", (int)(eq - arg), arg);
    if (eq[1] == '\0')
        v = json_null();
    else if ((v = json_loads(eq + 1, JSON_DECODE_ANY, NULL)) == NULL)
        v = json_string(eq + 1);
    if (v == NULL)
        return -1;
    part = path;
    while ((dot = strchr(part, '.')) != NULL) {
        json_t *next;
        *dot = '\0';
        if (*part == '\0')
            break;
        if (!json_is_object(next = json_object_get(obj, part))) {
            next = json_object();
            json_object_set_new(obj, part, next);
        }
        obj = next;
        part = dot + 1;
    }
    if (*part == '\0') {
        json_decref(v);
        return -1;
    }
    json_object_set_new(obj, part, v);
    return 0;
}

/* argv[from..] as FIELD=VALUE pairs into a new object; NULL (usage) if one is not. */
static json_t *fields_of(int argc, char **argv, int from)
{
    json_t *o = json_object();

    for (int i = from; i < argc; i++) {
        if (set_field(o, argv[i]) != 0) {
            usage_error("%s is not FIELD=VALUE", argv[i]);
            json_decref(o);
            return NULL;
        }
    }
    return o;
}

/* "--name VALUE" options of a command; positional words in pos.  -1 on a usage error (reported). */
struct named {
    const char *name;
    const char **value;
};

static int take_options(int argc, char **argv, const struct named *names, size_t nnames, const char **pos, int maxpos, int *npos)
{
    *npos = 0;
    for (int i = 0; i < argc; i++) {
        size_t k;
        if (strncmp(argv[i], "--", 2) != 0) {
            if (*npos >= maxpos) {
                usage_error("unexpected argument %s", argv[i]);
                return -1;
            }
            pos[(*npos)++] = argv[i];
            continue;
        }
        for (k = 0; k < nnames && strcmp(argv[i], names[k].name) != 0; k++)
            ;
        if (k == nnames || i + 1 >= argc) {
            usage_error(k == nnames ? "unknown option %s" : "%s needs a value", argv[i]);
            return -1;
        }
        *names[k].value = argv[++i];
    }
    return 0;
}

/* ---------------------------------------------------------------- tenant */

static int tenant_cmd(const struct opts *o)
{
    const char *sub = o->argc > 1 ? o->argv[1] : "";
    const char *name = o->argc > 2 ? o->argv[2] : NULL;
    json_t *reply, *fields;
    int rc;

    if (strcmp(sub, "list") == 0 && o->argc == 2) {
        if ((rc = ask(o, json_pack("{s:s}", "cmd", "tenant.list"), &reply)) == 0 && !o->json) {
            size_t i;
            json_t *t;
            printf("%-32s %s\n", "TENANT", "SOURCE");
            json_array_foreach(json_object_get(reply, "tenants"), i, t)
            {
                printf("%-32s %s\n", json_string_value(json_object_get(t, "name")),
                       json_string_value(json_object_get(t, "source")));
            }
        }
        json_decref(reply);
        return rc;
    }
    if (name == NULL || name[0] == '-')
        return usage_error("tenant %s needs a tenant name", sub);
    if (strcmp(sub, "show") == 0 && o->argc == 3) {
        if ((rc = ask(o, json_pack("{s:s, s:s}", "cmd", "tenant.show", "tenant", name), &reply)) == 0 && !o->json)
            rc = print_json(json_object_get(reply, "tenant"));
        json_decref(reply);
        return rc;
    }
    if (strcmp(sub, "remove") == 0 && o->argc == 3)
        return ask_done(o, json_pack("{s:s, s:s}", "cmd", "tenant.remove", "tenant", name), "tenant removed");
    if (strcmp(sub, "add") == 0 || strcmp(sub, "set") == 0) {
        if (strcmp(sub, "set") == 0 && o->argc < 4)
            return usage_error("tenant set %s needs FIELD=VALUE ...", name);
        if ((fields = fields_of(o->argc, o->argv, 3)) == NULL)
            return EXIT_USAGE;
        return ask_done(o,
                        json_pack("{s:s, s:s, s:o}", "cmd", strcmp(sub, "add") == 0 ? "tenant.add" : "tenant.set", "tenant", name,
                                  "policy", fields),
                        strcmp(sub, "add") == 0 ? "tenant added" : "tenant changed");
    }
    return usage_error("unknown tenant command %s", sub);
}

/* ---------------------------------------------------------------- key */

static json_t *scope_list(const char *csv)
{
    json_t *a = json_array();
    char buf[1024], *save = NULL;

    snprintf(buf, sizeof(buf), "%s", csv);
    for (char *t = strtok_r(buf, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save))
        json_array_append_new(a, json_string(t));
    return a;
}

/* The new key's token, printed once (with --json: in the answer, as "token"). */
static int print_new_key(const struct opts *o, json_t *reply, const char *token)
{
    if (o->json) {
        json_object_set_new(reply, "token", json_string(token));
        return print_json(reply);
    }
    printf("token: %s\nid: %s tenant: %s\n", token, json_string_value(json_object_get(reply, "key_id")),
           json_string_value(json_object_get(reply, "tenant")) ? json_string_value(json_object_get(reply, "tenant")) : "");
    if (json_object_get(reply, "old_key_id") != NULL)
        printf("old key %s works until %s\n", json_string_value(json_object_get(reply, "old_key_id")),
               json_string_value(json_object_get(reply, "old_key_expires")));
    return fflush(stdout) == 0 ? 0 : EXIT_REFUSED;
}

/* key create / key rotate: the key is made here; only its id and hash go out. */
static int key_make(const struct opts *o, json_t *req, const char *expires, const char *note)
{
    char token[APIKEY_TOKEN_LEN + 1], id[APIKEY_ID_LEN + 1], hex[APIKEY_DIGEST_HEX + 1];
    json_t *reply;
    long long secs;
    int rc;

    if (expires != NULL) {
        if ((secs = duration(expires)) <= 0) {
            json_decref(req);
            return usage_error("--expires %s is not a duration (90d, 24h, 30m, 10s)", expires);
        }
        json_object_set_new(req, "expires_s", json_integer(secs));
    }
    if (note != NULL)
        json_object_set_new(req, "note", json_string(note));
    if (make_key(NULL, token, id, hex) != 0) {
        json_decref(req);
        return EXIT_REFUSED;
    }
    json_object_set_new(req, "id", json_string(id));
    json_object_set_new(req, "sha256", json_string(hex));
    if ((rc = call(o, req, &reply)) == 0 && (rc = answered(reply)) == 0)
        rc = print_new_key(o, reply, token);
    OPENSSL_cleanse(token, sizeof(token));
    json_decref(reply);
    return rc;
}

static int key_create(const struct opts *o)
{
    const char *tenant = NULL, *expires = NULL, *scopes = NULL, *note = NULL, *pos[1];
    const struct named names[] = {{"--tenant", &tenant}, {"--expires", &expires}, {"--scopes", &scopes}, {"--note", &note}};
    json_t *req;
    int npos;

    if (take_options(o->argc - 2, o->argv + 2, names, 4, pos, 0, &npos) != 0)
        return EXIT_USAGE;
    if (tenant == NULL)
        return usage_error("key create needs --tenant");
    req = json_pack("{s:s, s:s}", "cmd", "key.create", "tenant", tenant);
    if (scopes != NULL)
        json_object_set_new(req, "scopes", scope_list(scopes));
    return key_make(o, req, expires, note);
}

static int key_rotate(const struct opts *o)
{
    const char *grace = NULL, *expires = NULL, *note = NULL, *pos[1];
    const struct named names[] = {{"--grace", &grace}, {"--expires", &expires}, {"--note", &note}};
    long long g;
    json_t *req;
    int npos;

    if (take_options(o->argc - 2, o->argv + 2, names, 3, pos, 1, &npos) != 0)
        return EXIT_USAGE;
    if (npos != 1)
        return usage_error("key rotate needs KEY_ID");
    req = json_pack("{s:s, s:s}", "cmd", "key.rotate", "key", pos[0]);
    if (grace != NULL) {
        if ((g = duration(grace)) < 0) {
            json_decref(req);
            return usage_error("--grace %s is not a duration (24h, 30m, 10s, 0)", grace);
        }
        json_object_set_new(req, "grace_s", json_integer(g));
    }
    return key_make(o, req, expires, note);
}

static const char *str_or(const json_t *o, const char *field, const char *dflt)
{
    const char *s = json_string_value(json_object_get(o, field));
    return s != NULL ? s : dflt;
}

static int key_list(const struct opts *o)
{
    const char *tenant = NULL, *pos[1];
    const struct named names[] = {{"--tenant", &tenant}};
    json_t *req, *reply, *k;
    size_t i;
    int npos, rc;

    if (take_options(o->argc - 2, o->argv + 2, names, 1, pos, 0, &npos) != 0)
        return EXIT_USAGE;
    req = json_pack("{s:s}", "cmd", "key.list");
    if (tenant != NULL)
        json_object_set_new(req, "tenant", json_string(tenant));
    if ((rc = ask(o, req, &reply)) != 0 || o->json) {
        json_decref(reply);
        return rc;
    }
    printf("%-12s %-20s %-24s %-20s %-20s %-20s %-8s %s\n", "ID", "TENANT", "SCOPES", "CREATED", "EXPIRES", "LAST USED", "STATE",
           "SOURCE");
    json_array_foreach(json_object_get(reply, "keys"), i, k)
    {
        char scopes[256] = "";
        size_t j;
        json_t *s;
        json_array_foreach(json_object_get(k, "scopes"), j, s)
        {
            size_t used = strlen(scopes);
            snprintf(scopes + used, sizeof(scopes) - used, "%s%s", j ? "," : "", json_string_value(s));
        }
        printf("%-12s %-20s %-24s %-20s %-20s %-20s %-8s %s\n", str_or(k, "id", "?"), str_or(k, "tenant", "?"), scopes,
               str_or(k, "created", "-"), str_or(k, "expires", "never"), str_or(k, "last_used", "never"), str_or(k, "state", "?"),
               str_or(k, "source", "?"));
    }
    json_decref(reply);
    return fflush(stdout) == 0 ? 0 : EXIT_REFUSED;
}

static int key_cmd(const struct opts *o)
{
    const char *sub = o->argc > 1 ? o->argv[1] : "";

    if (strcmp(sub, "new") == 0)
        return key_new(o->argc - 2, o->argv + 2);
    if (strcmp(sub, "hash") == 0)
        return key_hash(o->argc - 2, o->argv + 2);
    if (strcmp(sub, "create") == 0)
        return key_create(o);
    if (strcmp(sub, "rotate") == 0)
        return key_rotate(o);
    if (strcmp(sub, "list") == 0)
        return key_list(o);
    if (strcmp(sub, "revoke") == 0) {
        if (o->argc != 3)
            return usage_error("key revoke needs KEY_ID");
        return ask_done(o, json_pack("{s:s, s:s}", "cmd", "key.revoke", "key", o->argv[2]), "key revoked");
    }
    return usage_error("unknown key command %s", sub);
}

/* ---------------------------------------------------------------- jwt-issuer, status */

static int issuer_cmd(const struct opts *o)
{
    const char *sub = o->argc > 1 ? o->argv[1] : "";
    json_t *reply, *e, *fields;
    size_t i;
    int rc;

    if (strcmp(sub, "list") == 0 && o->argc == 2) {
        if ((rc = ask(o, json_pack("{s:s}", "cmd", "jwt-issuer.list"), &reply)) == 0 && !o->json) {
            printf("%-24s %-40s %s\n", "ISSUER", "ISS", "SOURCE");
            json_array_foreach(json_object_get(reply, "jwt_issuers"), i, e)
            {
                printf("%-24s %-40s %s\n", str_or(e, "name", "?"), str_or(e, "iss", "?"), str_or(e, "source", "?"));
            }
        }
        json_decref(reply);
        return rc;
    }
    if (o->argc < 3 || o->argv[2][0] == '-')
        return usage_error("jwt-issuer %s needs an issuer name", sub);
    if (strcmp(sub, "remove") == 0 && o->argc == 3)
        return ask_done(o, json_pack("{s:s, s:s}", "cmd", "jwt-issuer.remove", "name", o->argv[2]), "JWT issuer removed");
    if (strcmp(sub, "add") == 0) {
        if ((fields = fields_of(o->argc, o->argv, 3)) == NULL)
            return EXIT_USAGE;
        json_object_set_new(fields, "name", json_string(o->argv[2]));
        return ask_done(o, json_pack("{s:s, s:o}", "cmd", "jwt-issuer.add", "issuer", fields), "JWT issuer added");
    }
    return usage_error("unknown jwt-issuer command %s", sub);
}

static const char *version_text(const json_t *v, char *buf, size_t len)
{
    snprintf(buf, len, "%lld", (long long)json_integer_value(v));
    return buf;
}

static int status_cmd(const struct opts *o)
{
    json_t *reply, *gw, *w, *redis;
    char vbuf[24];
    int rc;

    if (o->argc != 1)
        return usage_error("status takes no arguments");
    if ((rc = ask(o, json_pack("{s:s}", "cmd", "status"), &reply)) != 0 || o->json) {
        json_decref(reply);
        return rc;
    }
    gw = json_object_get(reply, "gateway");
    w = json_object_get(reply, "audit_writer");
    if (json_object_get(gw, "error") != NULL)
        printf("gateway:      pid %lld, %s\n", json_integer_value(json_object_get(gw, "pid")), str_or(gw, "error", "?"));
    else
        printf("gateway:      pid %lld, generation %lld, workers %lld of %lld alive\n",
               json_integer_value(json_object_get(gw, "pid")), json_integer_value(json_object_get(gw, "generation")),
               json_integer_value(json_object_get(gw, "workers_alive")), json_integer_value(json_object_get(gw, "workers")));
    printf("backend:      %s\n", str_or(gw, "backend", "unknown"));
    printf("audit writer: pid %lld, %s\n", json_integer_value(json_object_get(w, "pid")),
           json_is_true(json_object_get(w, "running")) ? "running" : "not running");
    redis = json_object_get(reply, "redis");
    if (json_is_object(redis))
        printf(
            "redis:        admin store at %s (%s), %s, version %s\n", str_or(redis, "admin_store", "?"), str_or(redis, "key", "?"),
            json_is_true(json_object_get(redis, "connected")) ? "connected" : "NOT CONNECTED (the gateway keeps its copy)",
            json_is_integer(json_object_get(redis, "version")) ? version_text(json_object_get(redis, "version"), vbuf, sizeof(vbuf))
                                                               : "not yet known");
    else
        printf("redis:        %s\n", str_or(reply, "redis", "?"));
    printf("store:        %s\n", str_or(reply, "store", "?"));
    json_decref(reply);
    return fflush(stdout) == 0 ? 0 : EXIT_REFUSED;
}

/* ---------------------------------------------------------------- queue */

/* The shared submissions queue (submissions.queue redis) as the gateway's
 * dispatcher last counted it: depth per tenant, pending per gateway,
 * oldest age, dead letters. */
static int queue_cmd(const struct opts *o)
{
    json_t *reply, *q, *counts, *v;
    int dead = o->argc == 2 && strcmp(o->argv[1], "dead") == 0, rc;
    size_t i;

    if (o->argc != 1 && !dead)
        return usage_error("queue takes no arguments but 'dead'");
    struct opts quiet = *o;

    quiet.json = 0; /* ask prints the whole answer with --json: here only the queue's part */
    if ((rc = ask(&quiet, json_pack("{s:s}", "cmd", "status"), &reply)) != 0)
        return rc;
    q = json_object_get(json_object_get(reply, "gateway"), "queue");
    if (!json_is_object(q)) {
        fprintf(stderr, "moatctl: this gateway has no shared queue (submissions.queue is not redis)\n");
        json_decref(reply);
        return EXIT_REFUSED;
    }
    if (o->json) {
        char *text = json_dumps(dead ? json_object_get(json_object_get(q, "counts"), "dead_recent") : q, JSON_COMPACT);
        printf("%s\n", text != NULL ? text : "null");
        free(text);
        json_decref(reply);
        return 0;
    }
    counts = json_object_get(q, "counts");
    if (dead) {
        printf("dead letters: %lld (newest first)\n", json_integer_value(json_object_get(counts, "dead")));
        for (i = 0; i < json_array_size(json_object_get(counts, "dead_recent")) &&
                    (v = json_array_get(json_object_get(counts, "dead_recent"), i)) != NULL;
             i++) {
            json_t *d = json_loads(json_string_value(v) != NULL ? json_string_value(v) : "", 0, NULL);
            printf("  %-24s tenant %-16s attempt %lld  %s\n", str_or(d, "id", "?"), str_or(d, "tenant", "?"),
                   json_integer_value(json_object_get(d, "attempt")), str_or(d, "why", "?"));
            json_decref(d);
        }
        json_decref(reply);
        return fflush(stdout) == 0 ? 0 : EXIT_REFUSED;
    }
    printf(
        "this gateway: backend slots %lld, busy %lld, running claimed %lld; claims %lld, taken over %lld, dead-lettered %lld%s\n",
        json_integer_value(json_object_get(q, "backend_slots")), json_integer_value(json_object_get(q, "backend_busy")),
        json_integer_value(json_object_get(q, "running_here")), json_integer_value(json_object_get(q, "claims")),
        json_integer_value(json_object_get(q, "reclaims")), json_integer_value(json_object_get(q, "dead_here")),
        json_is_true(json_object_get(q, "redis_down")) ? " (Redis is not answering)" : "");
    if (!json_is_object(counts)) {
        printf("queue: not counted yet\n");
        json_decref(reply);
        return 0;
    }
    printf(
        "queue: %lld waiting, oldest entry %llds old, %lld dead letters\n", json_integer_value(json_object_get(counts, "waiting")),
        json_integer_value(json_object_get(counts, "oldest_ms")) > 0
            ? (json_integer_value(json_object_get(counts, "now_ms")) - json_integer_value(json_object_get(counts, "oldest_ms"))) /
                  1000
            : 0,
        json_integer_value(json_object_get(counts, "dead")));
    printf("  %-24s %8s %10s %8s %8s\n", "tenant", "waiting", "bytes", "running", "oldest");
    for (i = 0; i < json_array_size(json_object_get(counts, "tenants")) &&
                (v = json_array_get(json_object_get(counts, "tenants"), i)) != NULL;
         i++)
        printf("  %-24s %8lld %10lld %8lld %7llds\n", str_or(v, "tenant", "?"), json_integer_value(json_object_get(v, "waiting")),
               json_integer_value(json_object_get(v, "bytes")), json_integer_value(json_object_get(v, "pending")),
               json_integer_value(json_object_get(v, "oldest_s")));
    printf("  %-34s %8s %s\n", "gateway (consumer)", "running", "heartbeat");
    for (i = 0; i < json_array_size(json_object_get(counts, "consumers")) &&
                (v = json_array_get(json_object_get(counts, "consumers"), i)) != NULL;
         i++)
        printf("  %-34s %8lld %s\n", str_or(v, "name", "?"), json_integer_value(json_object_get(v, "pending")),
               json_is_true(json_object_get(v, "alive")) ? "alive" : "GONE: its entries are taken over after the lease");
    json_decref(reply);
    return fflush(stdout) == 0 ? 0 : EXIT_REFUSED;
}

/* ---------------------------------------------------------------- main */

/* --socket, --json and --help anywhere; the rest stays in order. */
static int global_options(int argc, char **argv, struct opts *o, int *help)
{
    const char *env = getenv("MOAT_CONTROL");

    o->socket = env != NULL && env[0] != '\0' ? env : GW_DEFAULT_CONTROL_SOCKET;
    o->json = 0;
    o->argc = 0;
    *help = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--socket") == 0) {
            if (i + 1 >= argc)
                return usage_error("--socket needs a path");
            o->socket = argv[++i];
        } else if (strcmp(argv[i], "--json") == 0) {
            o->json = 1;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            *help = 1;
        } else {
            o->argv[o->argc++] = argv[i];
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    char *words[256];
    struct opts o = {NULL, 0, 0, words};
    int help;

    if (argc > (int)(sizeof(words) / sizeof(words[0])))
        return usage_error("too many arguments");
    if (global_options(argc, argv, &o, &help) != 0)
        return EXIT_USAGE;
    if (help || o.argc == 0) {
        fputs(usage_text, help ? stdout : stderr);
        return help ? 0 : EXIT_USAGE;
    }
    if (strcmp(o.argv[0], "tenant") == 0)
        return tenant_cmd(&o);
    if (strcmp(o.argv[0], "key") == 0)
        return key_cmd(&o);
    if (strcmp(o.argv[0], "jwt-issuer") == 0)
        return issuer_cmd(&o);
    if (strcmp(o.argv[0], "status") == 0)
        return status_cmd(&o);
    if (strcmp(o.argv[0], "queue") == 0)
        return queue_cmd(&o);
    return usage_error("unknown command %s", o.argv[0]);
}
