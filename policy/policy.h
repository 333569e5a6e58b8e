/*
 * policy.h - the tenant policy engine: pure code, no I/O.
 *
 * Given a tenant's policy and a parsed request, policy_evaluate() returns a
 * verdict: allow (with the effective limits), or deny with a reason, an HTTP
 * status and a client-facing message.  It does no I/O and its own code never
 * allocates; the only library code on its path is vsnprintf (fixed formats
 * into the verdict's own buffer) and glibc regexec() for content rules.
 * Every check before the content rules is allocation-free (the unit test
 * counts).
 * regexec() is not: it builds DFA states lazily and caches them in the
 * compiled regex_t (released by regfree), so inputs that reach new states
 * allocate, and the same inputs again do not; in a multibyte locale (the
 * locale in force at policy_rule_compile() time) it also takes and frees two
 * small buffers per call.  glibc's regexec() reports an internal failure
 * (out of memory) as REG_NOMATCH, so a rule cannot match when memory has run
 * out: content rules fail open under memory exhaustion.
 *
 * Checks run in this order; the first failure decides the verdict:
 *
 *   1. policy     p == NULL, or a policy that fails policy_validate():
 *                 POLICY_DENY_NO_POLICY, 403.  Default deny, fail closed.
 *   2. endpoint   the request's single POLICY_EP_* bit must be in
 *                 p->endpoints: POLICY_DENY_ENDPOINT, 403.
 *                 The runtimes and watch endpoints stop here (allowed): a
 *                 watcher sends no program, its watch token names a
 *                 session that was judged when it started.
 *   3. language   (execute, connect) some p->langs[] entry must allow the
 *                 request's language and version: POLICY_DENY_LANGUAGE, 403.
 *                 A missing language is POLICY_DENY_INPUT, 400.
 *   4. input      file count (1 .. max_files), each file name's length, args
 *                 count and each arg's length, total code bytes, stdin bytes:
 *                 POLICY_DENY_INPUT, 400.  For connect the stdin is the
 *                 session's initial stdin, judged against
 *                 p->sessions.stdin_bytes (the whole session's stdin
 *                 ceiling) instead of ceilings.max_stdin_bytes.
 *   5. limits     each requested limit: -1 means the tenant's ceiling;
 *                 otherwise 1 .. ceiling.  0 and anything below -1 are
 *                 rejected: POLICY_DENY_LIMIT, 400.  For connect,
 *                 run_timeout is judged against p->sessions.wall_ms (a
 *                 session's run_timeout lowers its wall clock), and -1
 *                 stays -1 in the verdict: the backend applies the
 *                 language's default, lowered to the ceiling.
 *                 run_cpu_time and compile_cpu_time (Piston's CPU clocks)
 *                 have no ceilings of their own: a stage's CPU clock never
 *                 runs past its wall clock, so each is judged against its
 *                 stage's timeout ceiling (connect: run_cpu_time against
 *                 p->sessions.cpu_ms), 1 .. ceiling, and -1 stays -1 in the
 *                 verdict: the backend applies the language's CPU limit,
 *                 which the request may only lower.
 *                 run_stack_kib, run_processes and run_file_size_kib (the
 *                 run stage's rlimits) are judged against the tenant's
 *                 optional ceilings of the same names: with one, -1 takes
 *                 it and 1 .. ceiling is kept; without one (0), -1 stays
 *                 -1 (the backend's own limit) and 1 .. POLICY_MAX_* is
 *                 kept.  The backend refuses one above its own limit.
 *   6. content    every rule's regex against every file's content (the whole
 *                 length, NUL bytes included, via REG_STARTEND); the first
 *                 match: POLICY_DENY_CONTENT, 422, with v->rule set.
 *
 * Connect (a live session) is judged like execute but for the two session
 * ceilings above; the session's other clocks and caps (idle, CPU, output,
 * concurrency) are not in the request: the caller applies
 * p->sessions as they are.
 *
 * Language and version matching (policy_version_matches):
 *
 *   - A policy entry's language is a name of a runtime (canonical or an
 *     alias), or "*" for every language.  Names compare exactly
 *     (case-sensitive).  An entry names the request's language when it
 *     equals the name sent, or any name of the runtime that name resolves to
 *     (request.runtime, from the backend's runtime table): a policy "py"
 *     allows "python" and "python3" too.  Without request.runtime only the
 *     name sent counts.  Mismatches deny; they never allow.
 *   - A policy version selector is "*" (any version) or dotted components
 *     ("3", "3.11"); a component "x", "X" or "*" and everything after it is a
 *     wildcard, so "3.x" means "3" and "x" means "*".  What is left is the
 *     allowed prefix P.
 *   - The request's version (a selector the backend resolves) is allowed
 *     when P is empty (policy "*"), or when it equals P or starts with P
 *     followed by ".".  So policy "3" allows "3", "3.11", "3.11.2" and
 *     "3.x", but not "31", "*", "x" or "4"; policy "3.11" does not allow
 *     "3" or "3.x", which could resolve to 3.12.  A request version may only
 *     hold letters, digits and ". * + - _" (no ranges such as "3 || 4"),
 *     otherwise only policy "*" allows it.  A NULL or empty request version
 *     means "*".
 *   - Semver ranges ("^3.10", ">=3 <4", "~3.11", "3 || 4"; moat_semver.h)
 *     are resolved before they are judged: the gateway picks the concrete
 *     version the range selects among the installed runtimes (its copy of
 *     the backend's runtime table, by the backend's own rule: the highest),
 *     judges that version under the rule above, and asks the backend for
 *     exactly that version (gw_judge_exec), so what runs is what was
 *     judged.  A range that selects no installed version reaches policy as
 *     sent, and by the rule above only policy "*" allows it (the backend
 *     then finds no runtime).  Judging the range itself ("every version it
 *     could select is allowed") would deny ranges that only ever pick an
 *     allowed version, and allow nothing more.
 *
 * Thread safety: policy_evaluate() only reads the policy; glibc's regexec()
 * locks each compiled regex, so worker threads may share one policy.
 */
#ifndef MOAT_POLICY_H
#define MOAT_POLICY_H

#include <regex.h>
#include <stddef.h>
#include <stdint.h>

#define POLICY_MESSAGE_MAX  256 /* size of policy_verdict.message, terminator included */
#define POLICY_QUOTE_MAX    64  /* client strings quoted in a message are cut to this many bytes */
#define POLICY_HTTP_OK      200
#define POLICY_HTTP_BAD     400 /* input structure or limits */
#define POLICY_HTTP_FORBID  403 /* no policy, endpoint or language */
#define POLICY_HTTP_CONTENT 422 /* content rule */

/*
 * The endpoint table: the endpoints a tenant may call, one row each.  Row
 * X(ID, N, NAME) makes POLICY_EP_ID, bit N of tenant_policy.endpoints, and
 * NAME is how configuration (tenant endpoints, key scopes), messages and
 * audit records spell it.  Adding an endpoint is adding a row (and its
 * route in the gateway's router).  POLICY_EP_ALL is every row: the mask of
 * known bits, and what a credential without narrower scopes holds (always
 * intersected with its tenant's endpoints).  It is not what a tenant gets by
 * default: the configuration decides that (gw_limits.h).
 */
#define POLICY_ENDPOINT_TABLE(X)                                                                                                   \
    X(EXECUTE, 0, "execute")         /* POST /api/v2/execute, batch or streamed */                                                 \
    X(RUNTIMES, 1, "runtimes")       /* GET /api/v2/runtimes */                                                                    \
    X(CONNECT, 2, "connect")         /* GET /api/v2/connect: a live session over a WebSocket */                                    \
    X(WATCH, 3, "watch")             /* GET /api/v2/watch: a read-only view of one session, with a watch token */                  \
    X(SUBMISSIONS, 4, "submissions") /* Judge0: POST /submissions, GET /submissions/{token} */                                     \
    X(LANGUAGES, 5, "languages")     /* Judge0: GET /languages[/{id}], /statuses, /about, /config_info */                          \
    X(PACKETS, 6, "packets")         /* GET /api/v2/executions/{id}: an execution's result packet */                               \
    X(REVIEW, 7, "review")           /* POST /api/v2/executions/{id}/reviews */

#define POLICY_EP_ENUM_ROW(id, n, name) POLICY_EP_##id = 1u << (n),
#define POLICY_EP_ALL_ROW(id, n, name)  | POLICY_EP_##id
enum policy_endpoint { POLICY_ENDPOINT_TABLE(POLICY_EP_ENUM_ROW) };
#define POLICY_EP_ALL (0u POLICY_ENDPOINT_TABLE(POLICY_EP_ALL_ROW))

#define POLICY_ENDPOINT_LIST_MAX 256 /* room for policy_endpoint_list(), terminator included */

/* Why a request was denied; policy_reason_name() gives the audit string. */
enum policy_reason {
    POLICY_OK = 0,         /* "ok": allowed */
    POLICY_DENY_ENDPOINT,  /* "endpoint": 403 */
    POLICY_DENY_LANGUAGE,  /* "language": 403 */
    POLICY_DENY_LIMIT,     /* "limit": 400 */
    POLICY_DENY_INPUT,     /* "filter": 400 */
    POLICY_DENY_CONTENT,   /* "content": 422 */
    POLICY_DENY_NO_POLICY, /* "no-policy": 403 */
};

/* One allowed language; both strings are owned by the policy. */
struct policy_lang {
    char *language; /* backend name, or "*" for every language */
    char *version;  /* version selector: "*", "3", "3.11", "3.x" (see above) */
};

/*
 * One content deny rule.  Fill it with policy_rule_compile(); the strings and
 * the compiled regex are owned by the rule and released by tenant_policy_free().
 */
struct policy_rule {
    char *name;    /* short name reported to the client and the audit log */
    char *pattern; /* POSIX extended regex, compiled REG_EXTENDED | REG_NOSUB; no REG_NEWLINE: ^ $ anchor the whole file */
    regex_t re;    /* valid only when compiled is 1 */
    int compiled;  /* 1 once re holds a compiled pattern; a rule with 0 fails closed */
};

/*
 * The tenant's ceilings.  A request may only lower them, and a request that
 * names no limit (-1) gets the ceiling.  Every field must be positive: there
 * is no "unlimited" (policy_validate() rejects a zero).
 */
struct policy_limits {
    int64_t run_timeout_ms;       /* wall time of the run stage, ms */
    int64_t compile_timeout_ms;   /* wall time of the compile stage, ms */
    int64_t run_memory_bytes;     /* memory of the run stage, bytes */
    int64_t compile_memory_bytes; /* memory of the compile stage, bytes */
    uint32_t max_files;           /* files per request (a request needs at least one) */
    uint32_t max_file_name_len;   /* bytes in one file name */
    uint32_t max_args;            /* command-line arguments per request */
    uint32_t max_arg_len;         /* bytes in one argument */
    uint64_t max_code_bytes;      /* bytes of all file contents together */
    uint64_t max_stdin_bytes;     /* bytes of stdin */
    /* Optional (0: none of the tenant's own; the backend's limits apply):
     * the run stage's stack, processes and threads, and file size. */
    uint64_t run_stack_kib;
    uint64_t run_processes;
    uint64_t run_file_size_kib;
};

/* What a run-stage rlimit may be at most, with or without a tenant ceiling
 * (the protocol's bounds, moat_proto.h: a request is never sent above them). */
#define POLICY_MAX_STACK_KIB     (16ull * 1024 * 1024)
#define POLICY_MAX_PROCESSES     65536ull
#define POLICY_MAX_FILE_SIZE_KIB (1024ull * 1024 * 1024)

/*
 * The tenant's session ceilings (connect): any one of the three clocks ends
 * a session, first to expire wins.  Every field must be at least 1 and at
 * most its POLICY_SESSION_MAX_* bound (policy_validate()): there is no
 * "unlimited" and no "off"; an exam platform needs an idle clock.  A
 * request lowers only the wall clock (run_timeout, judged in step 5); the
 * caller applies the rest as they are.
 */
#define POLICY_SESSION_MAX_CONCURRENT 65536u                /* sessions of one tenant at once */
#define POLICY_SESSION_MAX_MS         (24ull * 3600 * 1000) /* any clock: one day */
#define POLICY_SESSION_MAX_BYTES      (4ull * 1024 * 1024)  /* stdin or output: the transcript is one audit packet */

struct policy_session_limits {
    uint32_t max_concurrent; /* the tenant's sessions at once */
    uint64_t wall_ms;        /* a session's whole lifetime */
    uint64_t idle_ms;        /* no output written and no stdin received */
    uint64_t cpu_ms;         /* CPU time of the session's box */
    uint64_t stdin_bytes;    /* all stdin of a session, the initial stdin included */
    uint64_t output_bytes;   /* all stdout and stderr of a session */
};

/* One tenant's policy.  Every pointer is owned; release with tenant_policy_free(). */
struct tenant_policy {
    char *tenant;                          /* tenant id, as in the key store */
    unsigned endpoints;                    /* POLICY_EP_* bits the tenant may call */
    struct policy_lang *langs;             /* allowed languages; none allows no execution */
    size_t nlangs;                         /* entries in langs */
    struct policy_limits ceilings;         /* ceilings, and the defaults for omitted limits */
    struct policy_session_limits sessions; /* connect: session ceilings */
    double rate_per_second;                /* rate limiter: sustained requests per second (not judged here) */
    uint32_t burst;                        /* rate limiter: burst size (not judged here) */
    uint32_t max_in_flight;                /* rate limiter: concurrent executions (not judged here) */
    uint64_t cpu_ms_per_minute;            /* rate limiter: CPU-time budget (not judged here) */
    struct policy_rule *rules;             /* content deny rules, all compiled */
    size_t nrules;                         /* entries in rules */
    uint8_t isolation;                     /* the walls every job of the tenant runs in (enum moat_isolation; not judged
                                            * here: gw_judge_exec puts it on every request it allows) */
};

/* One submitted file, borrowed from the parsed request. */
struct policy_file {
    const char *name;       /* file name, or NULL when the client gave none */
    const uint8_t *content; /* len bytes, may hold NUL bytes; NULL only when len is 0 */
    size_t len;             /* bytes of content (after any base64 decoding) */
};

/*
 * An installed runtime as the backend lists it: its canonical name, its
 * aliases and its concrete version.  Borrowed; nothing is kept.
 */
struct policy_runtime {
    const char *language;
    const char *const *aliases;
    size_t naliases;
    const char *version;
};

/* A parsed request, borrowed from the gateway; nothing here is kept.
 * "execute:" fields are read for execute and connect alike. */
struct policy_request {
    unsigned endpoint;                    /* exactly one POLICY_EP_* bit */
    const char *language;                 /* execute: language as the client sent it */
    const char *version;                  /* execute: version selector as sent; NULL or "" means "*" */
    const struct policy_runtime *runtime; /* execute: the runtime `language` names, if known; NULL: exact names only */
    const struct policy_file *files;      /* execute: nfiles entries */
    size_t nfiles;                        /* execute: number of files */
    size_t stdin_len;                     /* execute: bytes of stdin; connect: of the initial stdin */
    size_t nargs;                         /* execute: number of arguments */
    const size_t *arg_lens;               /* execute: nargs lengths in bytes; may be NULL when nargs is 0 */
    int64_t run_timeout_ms;               /* requested limit, or -1 for the tenant's ceiling */
    int64_t compile_timeout_ms;           /* requested limit, or -1 for the tenant's ceiling */
    int64_t run_memory_bytes;             /* requested limit, or -1 for the tenant's ceiling */
    int64_t compile_memory_bytes;         /* requested limit, or -1 for the tenant's ceiling */
    int64_t run_cpu_ms;                   /* requested CPU limit, or -1 for the backend's (step 5) */
    int64_t compile_cpu_ms;               /* requested CPU limit, or -1 for the backend's (step 5) */
    int64_t run_stack_kib;                /* requested, or -1 (step 5) */
    int64_t run_processes;                /* requested, or -1 (step 5) */
    int64_t run_file_size_kib;            /* requested, or -1 (step 5) */
};

/* The decision.  policy_evaluate() sets every field, allowed or not. */
struct policy_verdict {
    int allow;                        /* 1 allowed, 0 denied */
    int http_status;                  /* 200 allowed; 403, 400 or 422 when denied */
    enum policy_reason reason;        /* POLICY_OK when allowed */
    const char *rule;                 /* POLICY_DENY_CONTENT: the matching rule's name (owned by the policy), else NULL */
    char message[POLICY_MESSAGE_MAX]; /* client-facing, printable ASCII; names the field and the ceiling; "" when allowed */
    int64_t run_timeout_ms;           /* allowed execute: effective limit (defaults applied); connect: as asked, -1 kept; else 0 */
    int64_t compile_timeout_ms;       /* allowed execute or connect: effective limit, else 0 */
    int64_t run_memory_bytes;         /* allowed execute or connect: effective limit, else 0 */
    int64_t compile_memory_bytes;     /* allowed execute or connect: effective limit, else 0 */
    int64_t run_cpu_ms;               /* allowed execute or connect: as asked (-1 kept: the backend's), else 0 */
    int64_t compile_cpu_ms;           /* allowed execute or connect: as asked (-1 kept: the backend's), else 0 */
    int64_t run_stack_kib;            /* allowed execute or connect: effective (-1: the backend's), else 0 */
    int64_t run_processes;            /* allowed execute or connect: effective (-1: the backend's), else 0 */
    int64_t run_file_size_kib;        /* allowed execute or connect: effective (-1: the backend's), else 0 */
};

/*
 * Judge request r against policy p (NULL: no policy, deny) and fill v.
 * Returns 0 when allowed, -1 when denied (v says why), or -1 with nothing
 * written when v is NULL.  Pointers in v refer to p and stay valid while p does.
 */
int policy_evaluate(const struct tenant_policy *p, const struct policy_request *r, struct policy_verdict *v);

/*
 * Step 5 of the request path: may a credential with `scopes` (POLICY_EP_*
 * bits) of the tenant with policy p call `endpoint` (one POLICY_EP_* bit)?
 * The tenant's endpoint allow-list first, then the credential's scopes;
 * both deny POLICY_DENY_ENDPOINT, 403.  0 allowed, -1 denied (v says why).
 */
int policy_authorize(const struct tenant_policy *p, unsigned endpoint, unsigned scopes, struct policy_verdict *v);

/*
 * 1 if the tenant may use runtime rt: some langs[] entry names it ("*",
 * its canonical name or one of its aliases) and allows its version.  This
 * decides what /api/v2/runtimes lists, and it agrees with policy_evaluate():
 * any name of a listed runtime is allowed for execute (given rt there).
 */
int policy_runtime_allowed(const struct tenant_policy *p, const struct policy_runtime *rt);

/*
 * Check a loaded policy before it is put to use (config load): a tenant name,
 * known non-empty endpoint bits, complete language entries, every ceiling
 * positive, every session ceiling within 1 .. its POLICY_SESSION_MAX_*
 * bound, every rule named and compiled.  0, or -1 with a reason in err.
 * policy_evaluate() applies the same check and denies when it fails.
 */
int policy_validate(const struct tenant_policy *p, char *err, size_t errlen);

/*
 * Copy name and pattern into rule and compile the pattern (REG_EXTENDED |
 * REG_NOSUB).  0, or -1 with regerror() text (or "out of memory") in err and
 * rule left empty.  Call at config load, never on the request path.
 */
int policy_rule_compile(struct policy_rule *rule, const char *name, const char *pattern, char *err, size_t errlen);

/* Release what one rule owns (regfree when compiled) and zero it. */
void policy_rule_free(struct policy_rule *rule);

/* Release everything p owns (strings, langs, rules) and zero *p; p itself is the caller's.  NULL is fine. */
void tenant_policy_free(struct tenant_policy *p);

/* Audit name of a reason: "ok", "endpoint", "language", "limit", "filter", "content", "no-policy"; "unknown" otherwise. */
const char *policy_reason_name(enum policy_reason r);

/* "execute" -> POLICY_EP_EXECUTE: 0 with *bit set, or -1 (and *bit untouched) for a name not in the table. */
int policy_endpoint_from_name(const char *name, unsigned *bit);

/* POLICY_EP_EXECUTE -> "execute"; "unknown" for anything but exactly one bit in the table. */
const char *policy_endpoint_name(unsigned bit);

/*
 * Every endpoint's name in table order with ", " between ("execute,
 * runtimes"), for messages that list the choices.  Returns buf, always
 * terminated; POLICY_ENDPOINT_LIST_MAX bytes hold the whole list.
 */
const char *policy_endpoint_list(char *buf, size_t buflen);

/*
 * 1 if the request's version selector `version` stays within the policy's
 * version selector `selector` under the rule above, else 0.  NULL or ""
 * version means "*"; a NULL selector never matches.
 */
int policy_version_matches(const char *version, const char *selector);

#endif /* MOAT_POLICY_H */
