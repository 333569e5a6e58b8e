/*
 * policy.c - the tenant policy engine (see policy.h for the rules).
 *
 * Everything on the verdict path works on borrowed memory: the policy, the
 * request and the caller's verdict.  Messages are formatted into
 * v->message with fixed formats; client strings are quoted through
 * quote(), which keeps printable ASCII only and cuts long values, so a
 * message can never carry control bytes into a log line.
 */
#include "policy.h"

#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------
 * Names and statuses
 * ------------------------------------------------------------------------ */

const char *policy_reason_name(enum policy_reason r)
{
    switch (r) {
    case POLICY_OK:
        return "ok";
    case POLICY_DENY_ENDPOINT:
        return "endpoint";
    case POLICY_DENY_LANGUAGE:
        return "language";
    case POLICY_DENY_LIMIT:
        return "limit";
    case POLICY_DENY_INPUT:
        return "filter";
    case POLICY_DENY_CONTENT:
        return "content";
    case POLICY_DENY_NO_POLICY:
        return "no-policy";
    }
    return "unknown";
}

static int reason_status(enum policy_reason r)
{
    switch (r) {
    case POLICY_OK:
        return POLICY_HTTP_OK;
    case POLICY_DENY_LIMIT:
    case POLICY_DENY_INPUT:
        return POLICY_HTTP_BAD;
    case POLICY_DENY_CONTENT:
        return POLICY_HTTP_CONTENT;
    case POLICY_DENY_ENDPOINT:
    case POLICY_DENY_LANGUAGE:
    case POLICY_DENY_NO_POLICY:
        break;
    }
    return POLICY_HTTP_FORBID;
}

/* The endpoint table, one row per POLICY_ENDPOINT_TABLE row in policy.h. */
static const struct {
    unsigned bit;
    const char *name;
} endpoints[] = {
#define POLICY_EP_NAME_ROW(id, n, name) {POLICY_EP_##id, name},
    POLICY_ENDPOINT_TABLE(POLICY_EP_NAME_ROW)
#undef POLICY_EP_NAME_ROW
};

int policy_endpoint_from_name(const char *name, unsigned *bit)
{
    for (size_t i = 0; name != NULL && i < sizeof(endpoints) / sizeof(endpoints[0]); i++) {
        if (strcmp(name, endpoints[i].name) == 0) {
            *bit = endpoints[i].bit;
            return 0;
        }
    }
    return -1;
}

const char *policy_endpoint_name(unsigned bit)
{
    for (size_t i = 0; i < sizeof(endpoints) / sizeof(endpoints[0]); i++)
        if (bit == endpoints[i].bit)
            return endpoints[i].name;
    return "unknown";
}

const char *policy_endpoint_list(char *buf, size_t buflen)
{
    size_t used = 0;

    if (buflen == 0)
        return buf;
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof(endpoints) / sizeof(endpoints[0]) && used < buflen; i++) {
        int n = snprintf(buf + used, buflen - used, "%s%s", i > 0 ? ", " : "", endpoints[i].name);
        if (n < 0)
            break;
        used += (size_t)n; /* past buflen when cut: the loop ends, buf stays terminated */
    }
    return buf;
}

/* ------------------------------------------------------------------------
 * Verdict helpers
 * ------------------------------------------------------------------------ */

/* A client string made safe to quote in a message: printable ASCII, '"' and
 * '\\' replaced by '?', cut to POLICY_QUOTE_MAX bytes with "..." after. */
struct quoted {
    char s[POLICY_QUOTE_MAX + sizeof("...")];
};

static const char *quote(struct quoted *q, const char *in)
{
    size_t i = 0;

    if (in == NULL)
        in = "";
    for (; i < POLICY_QUOTE_MAX && in[i] != '\0'; i++) {
        unsigned char c = (unsigned char)in[i];
        q->s[i] = (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') ? (char)c : '?';
    }
    if (in[i] != '\0') {
        memcpy(q->s + i, "...", sizeof("..."));
        return q->s;
    }
    q->s[i] = '\0';
    return q->s;
}

static int deny(struct policy_verdict *v, enum policy_reason reason, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int deny(struct policy_verdict *v, enum policy_reason reason, const char *fmt, ...)
{
    va_list ap;

    v->allow = 0;
    v->reason = reason;
    v->http_status = reason_status(reason);
    v->run_timeout_ms = v->compile_timeout_ms = 0;
    v->run_memory_bytes = v->compile_memory_bytes = 0;
    v->run_cpu_ms = v->compile_cpu_ms = 0;
    v->run_stack_kib = v->run_processes = v->run_file_size_kib = 0;
    va_start(ap, fmt);
    (void)vsnprintf(v->message, sizeof(v->message), fmt, ap); /* a cut message is still a message */
    va_end(ap);
    return -1;
}

/* ------------------------------------------------------------------------
 * Versions
 * ------------------------------------------------------------------------ */

/* Characters a request version may hold when the policy pins a version. */
static int version_chars_ok(const char *s)
{
    for (; *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '.' || c == '*' || c == '+' ||
              c == '-' || c == '_'))
            return 0;
    }
    return 1;
}

/* Length of the policy selector's fixed prefix: the components before the
 * first wildcard component ("x", "X", "*"), as the backend reads selectors. */
static size_t selector_prefix_len(const char *sel)
{
    size_t n = 0, i = 0;

    for (;;) {
        if (sel[i] == 'x' || sel[i] == 'X' || sel[i] == '*')
            return n;
        i += strcspn(sel + i, ".");
        n = i;
        if (sel[i] == '\0')
            return n;
        i++; /* past '.' */
    }
}

int policy_version_matches(const char *version, const char *selector)
{
    size_t plen;

    if (selector == NULL)
        return 0;
    if (version == NULL || version[0] == '\0')
        version = "*";
    plen = selector_prefix_len(selector);
    if (plen == 0)
        return 1;
    if (!version_chars_ok(version))
        return 0;
    return strncmp(version, selector, plen) == 0 && (version[plen] == '\0' || version[plen] == '.');
}

/* ------------------------------------------------------------------------
 * Policy shape
 * ------------------------------------------------------------------------ */

/* NULL if every session ceiling is within 1 .. its bound, else a static description. */
static const char *session_problem(const struct policy_session_limits *s)
{
    if (s->max_concurrent == 0 || s->max_concurrent > POLICY_SESSION_MAX_CONCURRENT)
        return "sessions.max_concurrent must be between 1 and 65536";
    if (s->wall_ms == 0 || s->wall_ms > POLICY_SESSION_MAX_MS || s->idle_ms == 0 || s->idle_ms > POLICY_SESSION_MAX_MS ||
        s->cpu_ms == 0 || s->cpu_ms > POLICY_SESSION_MAX_MS)
        return "every session clock must be between 1 ms and one day";
    if (s->stdin_bytes == 0 || s->stdin_bytes > POLICY_SESSION_MAX_BYTES || s->output_bytes == 0 ||
        s->output_bytes > POLICY_SESSION_MAX_BYTES)
        return "every session size must be between 1 byte and 4 MiB";
    return NULL;
}

/* NULL if p is usable, else a static description; *at names the entry. */
static const char *policy_problem(const struct tenant_policy *p, const char **what, size_t *at)
{
    const struct policy_limits *c;
    const char *problem;

    *what = NULL;
    *at = 0;
    if (p == NULL)
        return "no policy";
    if (p->tenant == NULL || p->tenant[0] == '\0')
        return "tenant is empty";
    if (p->endpoints == 0 || (p->endpoints & ~(unsigned)POLICY_EP_ALL) != 0)
        return "endpoints must name at least one known endpoint and nothing else";
    if (p->nlangs > 0 && p->langs == NULL)
        return "langs is missing";
    for (size_t i = 0; i < p->nlangs; i++) {
        const struct policy_lang *l = &p->langs[i];
        *what = "langs";
        *at = i;
        if (l->language == NULL || l->language[0] == '\0')
            return "language is empty";
        if (l->version == NULL || l->version[0] == '\0')
            return "version is empty";
        if (!version_chars_ok(l->version))
            return "version holds characters other than letters, digits and . * + - _";
    }
    *what = NULL;
    c = &p->ceilings;
    if (c->run_timeout_ms <= 0 || c->compile_timeout_ms <= 0)
        return "every timeout ceiling must be positive";
    if (c->run_memory_bytes <= 0 || c->compile_memory_bytes <= 0)
        return "every memory ceiling must be positive";
    if (c->max_files == 0 || c->max_file_name_len == 0 || c->max_args == 0 || c->max_arg_len == 0)
        return "every count and length ceiling must be positive";
    if (c->max_code_bytes == 0 || c->max_stdin_bytes == 0)
        return "every size ceiling must be positive";
    if ((problem = session_problem(&p->sessions)) != NULL)
        return problem;
    if (p->nrules > 0 && p->rules == NULL)
        return "rules is missing";
    for (size_t i = 0; i < p->nrules; i++) {
        *what = "rules";
        *at = i;
        if (p->rules[i].name == NULL || p->rules[i].name[0] == '\0')
            return "rule has no name";
        if (!p->rules[i].compiled)
            return "rule is not compiled";
    }
    *what = NULL;
    return NULL;
}

int policy_validate(const struct tenant_policy *p, char *err, size_t errlen)
{
    const char *what;
    size_t at;
    const char *problem = policy_problem(p, &what, &at);

    if (problem == NULL)
        return 0;
    if (err != NULL && errlen > 0) {
        if (what != NULL)
            (void)snprintf(err, errlen, "%s[%zu]: %s", what, at, problem);
        else
            (void)snprintf(err, errlen, "%s", problem);
    }
    return -1;
}

/* ------------------------------------------------------------------------
 * The checks, in order
 * ------------------------------------------------------------------------ */

static int check_endpoint(const struct tenant_policy *p, const struct policy_request *r, struct policy_verdict *v)
{
    unsigned ep = r->endpoint;

    /* Exactly one known bit: a mask with several bits must not pass on any one of them. */
    if (ep == 0 || (ep & (ep - 1)) != 0 || (ep & ~(unsigned)POLICY_EP_ALL) != 0)
        return deny(v, POLICY_DENY_ENDPOINT, "unknown endpoint");
    if ((p->endpoints & ep) == 0)
        return deny(v, POLICY_DENY_ENDPOINT, "endpoint \"%s\" is not allowed for this tenant", policy_endpoint_name(ep));
    return 0;
}

/*
 * Does policy entry l name the language?  "*" names every language; else
 * the entry must equal the name the client sent, or any name (canonical or
 * alias) of the runtime it resolves to.  The same test decides what
 * /api/v2/runtimes lists, so a tenant may send any name it is shown.
 */
static int entry_names(const struct policy_lang *l, const char *language, const struct policy_runtime *rt)
{
    if (strcmp(l->language, "*") == 0 || (language != NULL && strcmp(l->language, language) == 0))
        return 1;
    if (rt == NULL)
        return 0;
    if (rt->language != NULL && strcmp(l->language, rt->language) == 0)
        return 1;
    for (size_t j = 0; j < rt->naliases; j++)
        if (rt->aliases[j] != NULL && strcmp(l->language, rt->aliases[j]) == 0)
            return 1;
    return 0;
}

static int check_language(const struct tenant_policy *p, const struct policy_request *r, struct policy_verdict *v)
{
    struct quoted ql, qv;
    int named = 0;

    if (r->language == NULL || r->language[0] == '\0')
        return deny(v, POLICY_DENY_INPUT, "language is required");
    for (size_t i = 0; i < p->nlangs; i++) {
        const struct policy_lang *l = &p->langs[i];
        if (!entry_names(l, r->language, r->runtime))
            continue;
        named = 1;
        if (policy_version_matches(r->version, l->version))
            return 0;
    }
    if (named)
        return deny(v, POLICY_DENY_LANGUAGE, "version \"%s\" of language \"%s\" is not allowed for this tenant",
                    quote(&qv, r->version != NULL && r->version[0] != '\0' ? r->version : "*"), quote(&ql, r->language));
    return deny(v, POLICY_DENY_LANGUAGE, "language \"%s\" is not allowed for this tenant", quote(&ql, r->language));
}

int policy_runtime_allowed(const struct tenant_policy *p, const struct policy_runtime *rt)
{
    const char *what;
    size_t at;

    if (p == NULL || rt == NULL || rt->language == NULL || policy_problem(p, &what, &at) != NULL)
        return 0;
    for (size_t i = 0; i < p->nlangs; i++)
        if (entry_names(&p->langs[i], NULL, rt) && policy_version_matches(rt->version, p->langs[i].version))
            return 1;
    return 0;
}

/* Step 4; stdin_max is the stdin ceiling of the request's endpoint. */
static int check_input(const struct policy_limits *c, uint64_t stdin_max, const struct policy_request *r, struct policy_verdict *v)
{
    uint64_t total = 0;

    if (r->nfiles == 0)
        return deny(v, POLICY_DENY_INPUT, "files must hold at least one file");
    if (r->nfiles > c->max_files)
        return deny(v, POLICY_DENY_INPUT, "files has %zu entries, more than the tenant's limit of %" PRIu32, r->nfiles,
                    c->max_files);
    if (r->files == NULL)
        return deny(v, POLICY_DENY_INPUT, "files is missing");
    for (size_t i = 0; i < r->nfiles; i++) {
        const struct policy_file *f = &r->files[i];
        /* strnlen: never scan past the limit, however long the name. */
        if (f->name != NULL && strnlen(f->name, (size_t)c->max_file_name_len + 1) > c->max_file_name_len)
            return deny(v, POLICY_DENY_INPUT, "files[%zu].name is longer than the tenant's limit of %" PRIu32 " bytes", i,
                        c->max_file_name_len);
        if (f->content == NULL && f->len > 0)
            return deny(v, POLICY_DENY_INPUT, "files[%zu].content is missing", i);
        if ((uint64_t)f->len > c->max_code_bytes - total) /* total <= max here: no overflow */
            return deny(v, POLICY_DENY_INPUT, "files' contents total more than the tenant's limit of %" PRIu64 " bytes",
                        c->max_code_bytes);
        total += f->len;
    }
    if (r->nargs > c->max_args)
        return deny(v, POLICY_DENY_INPUT, "args has %zu entries, more than the tenant's limit of %" PRIu32, r->nargs, c->max_args);
    if (r->nargs > 0 && r->arg_lens == NULL)
        return deny(v, POLICY_DENY_INPUT, "args is missing");
    for (size_t i = 0; i < r->nargs; i++)
        if (r->arg_lens[i] > c->max_arg_len)
            return deny(v, POLICY_DENY_INPUT, "args[%zu] is longer than the tenant's limit of %" PRIu32 " bytes", i,
                        c->max_arg_len);
    if ((uint64_t)r->stdin_len > stdin_max)
        return deny(v, POLICY_DENY_INPUT, "stdin is longer than the tenant's limit of %" PRIu64 " bytes", stdin_max);
    return 0;
}

/* One requested limit: -1 takes the ceiling, 1..ceiling is kept, the rest is refused. */
static int check_limit(const char *field, const char *unit, int64_t want, int64_t ceiling, int64_t *out, struct policy_verdict *v)
{
    if (want == -1) {
        *out = ceiling;
        return 0;
    }
    if (want <= 0)
        return deny(v, POLICY_DENY_LIMIT, "%s must be between 1 and %" PRId64 " %s, or -1 for the tenant's limit", field, ceiling,
                    unit);
    if (want > ceiling)
        return deny(v, POLICY_DENY_LIMIT, "%s cannot exceed the tenant's limit of %" PRId64 " %s", field, ceiling, unit);
    *out = want;
    return 0;
}

/* A run-stage rlimit: against the tenant's ceiling when it has one (-1 takes
 * it), else against the protocol's bound (-1 stays -1: the backend's). */
static int check_rlimit(const char *field, const char *unit, int64_t want, uint64_t tenant, uint64_t bound, int64_t *out,
                        struct policy_verdict *v)
{
    if (tenant > 0)
        return check_limit(field, unit, want, (int64_t)(tenant < bound ? tenant : bound), out, v);
    if (want == -1) {
        *out = -1;
        return 0;
    }
    if (want <= 0 || (uint64_t)want > bound)
        return deny(v, POLICY_DENY_LIMIT, "%s must be between 1 and %" PRIu64 " %s, or -1 for the backend's limit", field, bound,
                    unit);
    *out = want;
    return 0;
}

/*
 * Step 5.  run_ceiling is the run_timeout ceiling of the request's endpoint;
 * with keep_default a run_timeout of -1 stays -1 (connect: the backend
 * applies the language's default, lowered to the ceiling).
 */
static int check_limits(const struct policy_limits *c, int64_t run_ceiling, int64_t run_cpu_ceiling, int keep_default,
                        const struct policy_request *r, struct policy_verdict *v)
{
    int64_t run_t, comp_t, run_m, comp_m, run_c, comp_c, stack, procs, fsize;

    /* Field names are the client's (Piston's) names for these limits. */
    if (check_limit("run_timeout", "ms", r->run_timeout_ms, run_ceiling, &run_t, v) != 0 ||
        check_limit("compile_timeout", "ms", r->compile_timeout_ms, c->compile_timeout_ms, &comp_t, v) != 0 ||
        check_limit("run_memory_limit", "bytes", r->run_memory_bytes, c->run_memory_bytes, &run_m, v) != 0 ||
        check_limit("compile_memory_limit", "bytes", r->compile_memory_bytes, c->compile_memory_bytes, &comp_m, v) != 0 ||
        check_limit("run_cpu_time", "ms", r->run_cpu_ms, run_cpu_ceiling, &run_c, v) != 0 ||
        check_limit("compile_cpu_time", "ms", r->compile_cpu_ms, c->compile_timeout_ms, &comp_c, v) != 0 ||
        check_rlimit("run_stack_limit", "KiB", r->run_stack_kib, c->run_stack_kib, POLICY_MAX_STACK_KIB, &stack, v) != 0 ||
        check_rlimit("run_processes", "processes", r->run_processes, c->run_processes, POLICY_MAX_PROCESSES, &procs, v) != 0 ||
        check_rlimit("run_file_size_limit", "KiB", r->run_file_size_kib, c->run_file_size_kib, POLICY_MAX_FILE_SIZE_KIB, &fsize,
                     v) != 0)
        return -1;
    v->run_timeout_ms = keep_default && r->run_timeout_ms == -1 ? -1 : run_t;
    v->compile_timeout_ms = comp_t;
    v->run_memory_bytes = run_m;
    v->compile_memory_bytes = comp_m;
    /* no CPU ceilings of their own: not asked stays not asked (the backend's) */
    v->run_cpu_ms = r->run_cpu_ms == -1 ? -1 : run_c;
    v->compile_cpu_ms = r->compile_cpu_ms == -1 ? -1 : comp_c;
    v->run_stack_kib = stack;
    v->run_processes = procs;
    v->run_file_size_kib = fsize;
    return 0;
}

static int check_content(const struct tenant_policy *p, const struct policy_request *r, struct policy_verdict *v)
{
    for (size_t i = 0; i < r->nfiles; i++) {
        const struct policy_file *f = &r->files[i];
        const char *s = f->content != NULL ? (const char *)f->content : "";

        if (p->nrules > 0 && f->len > (size_t)INT_MAX) /* regoff_t is int in glibc */
            return deny(v, POLICY_DENY_CONTENT, "files[%zu].content is too large to check against content rules", i);
        for (size_t j = 0; j < p->nrules; j++) {
            const struct policy_rule *rule = &p->rules[j];
            /* REG_STARTEND: match over [rm_so, rm_eo), so a NUL byte does not end the input. */
            regmatch_t m = {.rm_so = 0, .rm_eo = (regoff_t)f->len};
            struct quoted qr;

            /* glibc returns REG_NOMATCH for no match and for internal failure alike. */
            if (regexec(&rule->re, s, 1, &m, REG_STARTEND) != 0)
                continue;
            v->rule = rule->name;
            return deny(v, POLICY_DENY_CONTENT, "files[%zu].content matches content rule \"%s\"", i, quote(&qr, rule->name));
        }
    }
    return 0;
}

int policy_evaluate(const struct tenant_policy *p, const struct policy_request *r, struct policy_verdict *v)
{
    const char *what;
    size_t at;

    if (v == NULL)
        return -1;
    v->rule = NULL;
    v->message[0] = '\0';
    if (policy_problem(p, &what, &at) != NULL)
        return deny(v, POLICY_DENY_NO_POLICY, "no policy for this tenant");
    if (r == NULL)
        return deny(v, POLICY_DENY_INPUT, "no request");
    if (check_endpoint(p, r, v) != 0)
        return -1;
    if (r->endpoint == POLICY_EP_EXECUTE || r->endpoint == POLICY_EP_CONNECT) {
        int session = r->endpoint == POLICY_EP_CONNECT;
        /* session ceilings are at most POLICY_SESSION_MAX_* (validated): they fit an int64_t */
        uint64_t stdin_max = session ? p->sessions.stdin_bytes : p->ceilings.max_stdin_bytes;
        int64_t run_ceiling = session ? (int64_t)p->sessions.wall_ms : p->ceilings.run_timeout_ms;
        int64_t run_cpu_ceiling = session ? (int64_t)p->sessions.cpu_ms : p->ceilings.run_timeout_ms;

        if (check_language(p, r, v) != 0 || check_input(&p->ceilings, stdin_max, r, v) != 0 ||
            check_limits(&p->ceilings, run_ceiling, run_cpu_ceiling, session, r, v) != 0 || check_content(p, r, v) != 0)
            return -1;
    } else {
        v->run_timeout_ms = v->compile_timeout_ms = 0;
        v->run_memory_bytes = v->compile_memory_bytes = 0;
        v->run_cpu_ms = v->compile_cpu_ms = 0;
        v->run_stack_kib = v->run_processes = v->run_file_size_kib = 0;
    }
    v->allow = 1;
    v->reason = POLICY_OK;
    v->http_status = POLICY_HTTP_OK;
    return 0;
}

int policy_authorize(const struct tenant_policy *p, unsigned endpoint, unsigned scopes, struct policy_verdict *v)
{
    const char *what;
    size_t at;

    if (v == NULL)
        return -1;
    v->rule = NULL;
    v->message[0] = '\0';
    v->run_timeout_ms = v->compile_timeout_ms = 0;
    v->run_memory_bytes = v->compile_memory_bytes = 0;
    v->run_cpu_ms = v->compile_cpu_ms = 0;
    v->run_stack_kib = v->run_processes = v->run_file_size_kib = 0;
    if (p == NULL || policy_problem(p, &what, &at) != NULL)
        return deny(v, POLICY_DENY_NO_POLICY, "no policy for this tenant");
    if (endpoint == 0 || (endpoint & (endpoint - 1)) != 0 || (endpoint & ~(unsigned)POLICY_EP_ALL) != 0)
        return deny(v, POLICY_DENY_ENDPOINT, "unknown endpoint");
    if ((p->endpoints & endpoint) == 0)
        return deny(v, POLICY_DENY_ENDPOINT, "this endpoint is not allowed for this tenant");
    if ((scopes & endpoint) == 0)
        return deny(v, POLICY_DENY_ENDPOINT, "this endpoint is outside the credential's scopes");
    v->allow = 1;
    v->reason = POLICY_OK;
    v->http_status = POLICY_HTTP_OK;
    return 0;
}

/* ------------------------------------------------------------------------
 * Building and freeing (config load only)
 * ------------------------------------------------------------------------ */

int policy_rule_compile(struct policy_rule *rule, const char *name, const char *pattern, char *err, size_t errlen)
{
    int rc;

    memset(rule, 0, sizeof(*rule));
    if (name == NULL || pattern == NULL) {
        if (err != NULL && errlen > 0)
            (void)snprintf(err, errlen, "%s", "rule needs a name and a pattern");
        return -1;
    }
    rule->name = strdup(name);
    rule->pattern = strdup(pattern);
    if (rule->name == NULL || rule->pattern == NULL) {
        if (err != NULL && errlen > 0)
            (void)snprintf(err, errlen, "%s", "out of memory");
        policy_rule_free(rule);
        return -1;
    }
    rc = regcomp(&rule->re, pattern, REG_EXTENDED | REG_NOSUB);
    if (rc != 0) {
        if (err != NULL && errlen > 0)
            (void)regerror(rc, &rule->re, err, errlen);
        policy_rule_free(rule);
        return -1;
    }
    rule->compiled = 1;
    return 0;
}

void policy_rule_free(struct policy_rule *rule)
{
    if (rule == NULL)
        return;
    if (rule->compiled)
        regfree(&rule->re);
    free(rule->name);
    free(rule->pattern);
    memset(rule, 0, sizeof(*rule));
}

void tenant_policy_free(struct tenant_policy *p)
{
    if (p == NULL)
        return;
    free(p->tenant);
    for (size_t i = 0; p->langs != NULL && i < p->nlangs; i++) {
        free(p->langs[i].language);
        free(p->langs[i].version);
    }
    free(p->langs);
    for (size_t i = 0; p->rules != NULL && i < p->nrules; i++)
        policy_rule_free(&p->rules[i]);
    free(p->rules);
    memset(p, 0, sizeof(*p));
}
