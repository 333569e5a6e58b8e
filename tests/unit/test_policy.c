/*
 * test_policy.c - table tests for the tenant policy engine.
 *
 * One table of requests against a few fixed policies; each row names the
 * expected decision, status, reason, rule and a fragment the message must
 * hold.  Every row is also checked for the invariants that hold for all
 * verdicts (see check_invariants()).  Content rules are real POSIX regexes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "policy.h"

#if defined(__SANITIZE_ADDRESS__)
#define HAVE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HAVE_ASAN 1
#endif
#endif
#ifdef HAVE_ASAN
/* From <sanitizer/allocator_interface.h>, which GCC 12 does not install; libasan exports it. */
int __sanitizer_install_malloc_and_free_hooks(void (*malloc_hook)(const volatile void *, size_t),
                                              void (*free_hook)(const volatile void *));
#endif

/* ------------------------------------------------------------------------
 * Fixture policies
 * ------------------------------------------------------------------------ */

#define RUN_T   3000
#define COMP_T  10000
#define RUN_M   (128 * 1024 * 1024LL)
#define COMP_M  (256 * 1024 * 1024LL)
#define FILES   3
#define NAMELEN 16
#define ARGS    2
#define ARGLEN  8
#define CODE    64
#define STDIN   32
#define WALL    5000 /* session wall clock: above RUN_T, so connect judged against RUN_T would fail */
#define SSTDIN  48   /* session stdin: above STDIN likewise */

enum fixture {
    P_NULL,     /* no policy at all */
    P_BASE,     /* execute + runtimes, python 3 / node 18.x / gcc 10.2.0 / bash *, two rules */
    P_ANY,      /* execute only, every language, no rules */
    P_RUNTIMES, /* runtimes only */
    P_NOCEIL,   /* a zero ceiling: incomplete */
    P_NOCOMP,   /* a rule that never compiled */
    P_NOSESS,   /* a session ceiling of zero: incomplete */
    P_RLIM,     /* as P_ANY, with ceilings for the run stage's stack, processes and file size */
    P_COUNT
};

static struct tenant_policy policies[P_COUNT];

static const struct policy_limits ceilings = {
    .run_timeout_ms = RUN_T,
    .compile_timeout_ms = COMP_T,
    .run_memory_bytes = RUN_M,
    .compile_memory_bytes = COMP_M,
    .max_files = FILES,
    .max_file_name_len = NAMELEN,
    .max_args = ARGS,
    .max_arg_len = ARGLEN,
    .max_code_bytes = CODE,
    .max_stdin_bytes = STDIN,
};

static const struct policy_session_limits sessions = {
    .max_concurrent = 2,
    .wall_ms = WALL,
    .idle_ms = 1000,
    .cpu_ms = 2000,
    .stdin_bytes = SSTDIN,
    .output_bytes = 4096,
};

static char *xstrdup(const char *s)
{
    char *d = strdup(s);
    assert_non_null(d);
    return d;
}

static void make_policy(struct tenant_policy *p, const char *tenant, unsigned endpoints, const char *const *langs, size_t nlangs,
                        const char *const *rules, size_t nrules)
{
    char err[256];

    memset(p, 0, sizeof(*p));
    p->tenant = xstrdup(tenant);
    p->endpoints = endpoints;
    p->ceilings = ceilings;
    p->sessions = sessions;
    p->rate_per_second = 10.0;
    p->burst = 20;
    p->max_in_flight = 4;
    p->cpu_ms_per_minute = 60000;
    if (nlangs > 0) {
        p->langs = calloc(nlangs, sizeof(*p->langs));
        assert_non_null(p->langs);
        p->nlangs = nlangs;
        for (size_t i = 0; i < nlangs; i++) {
            p->langs[i].language = xstrdup(langs[2 * i]);
            p->langs[i].version = xstrdup(langs[2 * i + 1]);
        }
    }
    if (nrules > 0) {
        p->rules = calloc(nrules, sizeof(*p->rules));
        assert_non_null(p->rules);
        p->nrules = nrules;
        for (size_t i = 0; i < nrules; i++)
            assert_int_equal(policy_rule_compile(&p->rules[i], rules[2 * i], rules[2 * i + 1], err, sizeof(err)), 0);
    }
}

static const char *const base_langs[] = {"python", "3", "node", "18.x", "gcc", "10.2.0", "bash", "*"};
static const char *const any_langs[] = {"*", "*"};
static const char *const base_rules[] = {
    "no-fork-bomb",
    ":\\(\\)[[:space:]]*\\{[[:space:]]*:[[:space:]]*\\|[[:space:]]*:",
    "no-ptrace",
    "ptrace[[:space:]]*\\(",
};

static int setup(void **state)
{
    (void)state;
    make_policy(&policies[P_BASE], "acme", POLICY_EP_ALL, base_langs, 4, base_rules, 2);
    make_policy(&policies[P_ANY], "anyco", POLICY_EP_EXECUTE, any_langs, 1, NULL, 0);
    make_policy(&policies[P_RUNTIMES], "lookers", POLICY_EP_RUNTIMES, NULL, 0, NULL, 0);
    make_policy(&policies[P_NOCEIL], "half", POLICY_EP_ALL, any_langs, 1, NULL, 0);
    policies[P_NOCEIL].ceilings.max_stdin_bytes = 0;
    make_policy(&policies[P_NOCOMP], "broken", POLICY_EP_ALL, any_langs, 1, base_rules, 2);
    policies[P_NOCOMP].rules[1].compiled = 0; /* as if regcomp had failed and the loader went on */
    regfree(&policies[P_NOCOMP].rules[1].re);
    make_policy(&policies[P_NOSESS], "nosess", POLICY_EP_ALL, any_langs, 1, NULL, 0);
    policies[P_NOSESS].sessions.idle_ms = 0; /* "no idle clock" is not a setting */
    make_policy(&policies[P_RLIM], "rlim", POLICY_EP_ALL, any_langs, 1, NULL, 0);
    policies[P_RLIM].ceilings.run_stack_kib = 8192;
    policies[P_RLIM].ceilings.run_processes = 16;
    policies[P_RLIM].ceilings.run_file_size_kib = 1024;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    for (size_t i = 0; i < P_COUNT; i++)
        tenant_policy_free(&policies[i]);
    return 0;
}

/* ------------------------------------------------------------------------
 * Request pieces
 * ------------------------------------------------------------------------ */

static const uint8_t hello[] = "print('hi')";
static const uint8_t bomb[] = ":(){ :|:& };:";
static const uint8_t nul_ptrace[] = {'a', 0, 'b', 0, 0, 'p', 't', 'r', 'a', 'c', 'e', ' ', '(', '0', ')'};
static const uint8_t nul_clean[] = {'p', 't', 'r', 0, 'a', 'c', 'e', '(', 0};
static const uint8_t bytes64[64] = {'x'};

static const struct policy_file f_one[] = {{"main.py", hello, sizeof(hello) - 1}};
static const struct policy_file f_three[] = {{"a", hello, 1}, {"b", hello, 1}, {"c", hello, 1}};
static const struct policy_file f_four[] = {{"a", hello, 1}, {"b", hello, 1}, {"c", hello, 1}, {"d", hello, 1}};
static const struct policy_file f_name16[] = {{"main.py", hello, 1}, {"abcdefghijklmnop", hello, 1}};
static const struct policy_file f_name17[] = {{"main.py", hello, 1}, {"abcdefghijklmnopq", hello, 1}};
static const struct policy_file f_noname[] = {{NULL, hello, 1}};
static const struct policy_file f_code64[] = {{"a", bytes64, 60}, {"b", bytes64, 4}};
static const struct policy_file f_code65[] = {{"a", bytes64, 60}, {"b", bytes64, 5}};
static const struct policy_file f_huge[] = {{"a", bytes64, 1}, {"b", bytes64, SIZE_MAX}};
static const struct policy_file f_nocontent[] = {{"a", NULL, 5}};
static const struct policy_file f_empty[] = {{"a", NULL, 0}};
static const struct policy_file f_bomb2[] = {{"main.sh", hello, sizeof(hello) - 1}, {"lib.sh", bomb, sizeof(bomb) - 1}};
static const struct policy_file f_nulptrace[] = {{"main.c", nul_ptrace, sizeof(nul_ptrace)}};
static const struct policy_file f_nulclean[] = {{"main.c", nul_clean, sizeof(nul_clean)}};
static const size_t args_ok[] = {8, 0};
static const size_t args_long[] = {1, 9};
static const size_t args_three[] = {1, 1, 1};

static const char long_lang[] =
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

/* Runtimes as the backend lists them (canonical name, aliases, version). */
static const char *const py_aliases[] = {"py", "py3", "python3"};
static const char *const js_aliases[] = {"node", "js"};
static const struct policy_runtime rt_python = {"python", py_aliases, 3, "3.11.2"};
static const struct policy_runtime rt_python2 = {"python", py_aliases, 3, "2.7.18"};
static const struct policy_runtime rt_js = {"javascript", js_aliases, 2, "18.13.0"};
static const struct policy_runtime rt_cobol = {"cobol", NULL, 0, "3.1.2"};

/*
 * A request row starts from a valid python 3.11 execute request with every
 * limit at -1 and overrides what it tests.  Overriding a designated
 * initializer is exactly what REQ() is for, so -Woverride-init is off here.
 */
#pragma GCC diagnostic ignored "-Woverride-init"
#define REQ(...)                                                                                                                   \
    {                                                                                                                              \
        .endpoint = POLICY_EP_EXECUTE, .language = "python", .version = "3.11", .files = f_one, .nfiles = 1, .run_timeout_ms = -1, \
        .compile_timeout_ms = -1, .run_memory_bytes = -1, .compile_memory_bytes = -1, .run_cpu_ms = -1, .compile_cpu_ms = -1,      \
        .run_stack_kib = -1, .run_processes = -1, .run_file_size_kib = -1, __VA_ARGS__                                             \
    }
#define FILES_OF(a) .files = (a), .nfiles = sizeof(a) / sizeof((a)[0])

struct row {
    const char *what;
    enum fixture policy;
    struct policy_request req;
    enum policy_reason reason; /* POLICY_OK: allowed */
    int status;
    const char *msg; /* fragment the message must hold ("" for allowed rows) */
    const char *rule;
};

#define ALLOW "", NULL

static const struct row rows[] = {
    /* policy */
    {"no policy", P_NULL, REQ(), POLICY_DENY_NO_POLICY, 403, "no policy for this tenant", NULL},
    {"zero ceiling fails closed", P_NOCEIL, REQ(), POLICY_DENY_NO_POLICY, 403, "no policy for this tenant", NULL},
    {"uncompiled rule fails closed", P_NOCOMP, REQ(), POLICY_DENY_NO_POLICY, 403, "no policy for this tenant", NULL},
    {"no policy beats bad endpoint", P_NULL, REQ(.endpoint = 0), POLICY_DENY_NO_POLICY, 403, "no policy", NULL},
    {"zero session ceiling fails closed", P_NOSESS, REQ(), POLICY_DENY_NO_POLICY, 403, "no policy for this tenant", NULL},

    /* endpoint */
    {"plain execute", P_BASE, REQ(), POLICY_OK, 200, ALLOW},
    {"runtimes allowed", P_BASE, {.endpoint = POLICY_EP_RUNTIMES}, POLICY_OK, 200, ALLOW},
    {"runtimes not allowed",
     P_ANY,
     {.endpoint = POLICY_EP_RUNTIMES},
     POLICY_DENY_ENDPOINT,
     403,
     "endpoint \"runtimes\" is not allowed for this tenant",
     NULL},
    {"execute not allowed", P_RUNTIMES, REQ(), POLICY_DENY_ENDPOINT, 403, "endpoint \"execute\" is not allowed", NULL},
    {"endpoint 0", P_BASE, REQ(.endpoint = 0), POLICY_DENY_ENDPOINT, 403, "unknown endpoint", NULL},
    {"endpoint with two bits", P_BASE, REQ(.endpoint = POLICY_EP_ALL), POLICY_DENY_ENDPOINT, 403, "unknown endpoint", NULL},
    {"endpoint unknown bit", P_BASE, REQ(.endpoint = 1u << 30), POLICY_DENY_ENDPOINT, 403, "unknown endpoint", NULL},
    {"endpoint beats language", P_RUNTIMES, REQ(.language = "cobol"), POLICY_DENY_ENDPOINT, 403, "execute", NULL},
    {"connect not allowed", P_ANY, REQ(.endpoint = POLICY_EP_CONNECT), POLICY_DENY_ENDPOINT, 403,
     "endpoint \"connect\" is not allowed for this tenant", NULL},
    {"watch allowed", P_BASE, {.endpoint = POLICY_EP_WATCH}, POLICY_OK, 200, ALLOW},
    {"watch not allowed",
     P_ANY,
     {.endpoint = POLICY_EP_WATCH},
     POLICY_DENY_ENDPOINT,
     403,
     "endpoint \"watch\" is not allowed for this tenant",
     NULL},
    {"endpoint connect|watch", P_BASE, REQ(.endpoint = POLICY_EP_CONNECT | POLICY_EP_WATCH), POLICY_DENY_ENDPOINT, 403,
     "unknown endpoint", NULL},

    /* language and version */
    {"language not listed", P_BASE, REQ(.language = "cobol"), POLICY_DENY_LANGUAGE, 403,
     "language \"cobol\" is not allowed for this tenant", NULL},
    {"language case matters", P_BASE, REQ(.language = "Python"), POLICY_DENY_LANGUAGE, 403, "language \"Python\"", NULL},
    {"language missing", P_BASE, REQ(.language = NULL), POLICY_DENY_INPUT, 400, "language is required", NULL},
    {"language empty", P_BASE, REQ(.language = ""), POLICY_DENY_INPUT, 400, "language is required", NULL},
    {"python 2.7 vs policy 3", P_BASE, REQ(.version = "2.7"), POLICY_DENY_LANGUAGE, 403,
     "version \"2.7\" of language \"python\" is not allowed", NULL},
    {"python 3", P_BASE, REQ(.version = "3"), POLICY_OK, 200, ALLOW},
    {"python 3.11.2", P_BASE, REQ(.version = "3.11.2"), POLICY_OK, 200, ALLOW},
    {"python 3.x", P_BASE, REQ(.version = "3.x"), POLICY_OK, 200, ALLOW},
    {"python 31 is not 3", P_BASE, REQ(.version = "31"), POLICY_DENY_LANGUAGE, 403, "version \"31\"", NULL},
    {"python * vs policy 3", P_BASE, REQ(.version = "*"), POLICY_DENY_LANGUAGE, 403, "version \"*\"", NULL},
    {"python x vs policy 3", P_BASE, REQ(.version = "x"), POLICY_DENY_LANGUAGE, 403, "version \"x\"", NULL},
    {"python no version means *", P_BASE, REQ(.version = NULL), POLICY_DENY_LANGUAGE, 403, "version \"*\"", NULL},
    {"python range smuggling", P_BASE, REQ(.version = "3.11 || 4"), POLICY_DENY_LANGUAGE, 403, "version \"3.11 || 4\"", NULL},
    {"node 18.17.0 vs 18.x", P_BASE, REQ(.language = "node", .version = "18.17.0"), POLICY_OK, 200, ALLOW},
    {"node 19 vs 18.x", P_BASE, REQ(.language = "node", .version = "19"), POLICY_DENY_LANGUAGE, 403, "version \"19\"", NULL},
    {"gcc 10.2 wider than 10.2.0", P_BASE, REQ(.language = "gcc", .version = "10.2"), POLICY_DENY_LANGUAGE, 403,
     "of language \"gcc\"", NULL},
    {"gcc exact", P_BASE, REQ(.language = "gcc", .version = "10.2.0"), POLICY_OK, 200, ALLOW},
    {"bash any version", P_BASE, REQ(.language = "bash", .version = "*"), POLICY_OK, 200, ALLOW},
    {"bash no version", P_BASE, REQ(.language = "bash", .version = NULL), POLICY_OK, 200, ALLOW},
    {"wildcard language", P_ANY, REQ(.language = "cobol", .version = ">=1 <2"), POLICY_OK, 200, ALLOW},
    {"client string is quoted safely", P_BASE, REQ(.language = "co\"b\\o\nl\x7f"), POLICY_DENY_LANGUAGE, 403,
     "language \"co?b?o?l?\" is not allowed", NULL},
    {"long client string is cut", P_BASE, REQ(.language = long_lang), POLICY_DENY_LANGUAGE, 403, "aaaa...\" is not allowed", NULL},
    /* a name of the runtime the language resolves to (policy lists "python" and "node") */
    {"alias allowed via its runtime", P_BASE, REQ(.language = "py3", .runtime = &rt_python), POLICY_OK, 200, ALLOW},
    {"alias without the table: exact names only", P_BASE, REQ(.language = "py3"), POLICY_DENY_LANGUAGE, 403, "\"py3\"", NULL},
    {"canonical name via a listed alias", P_BASE, REQ(.language = "javascript", .version = "18.1", .runtime = &rt_js), POLICY_OK,
     200, ALLOW},
    {"alias names another runtime", P_BASE, REQ(.language = "cobol", .runtime = &rt_cobol), POLICY_DENY_LANGUAGE, 403, "\"cobol\"",
     NULL},
    {"runtime does not widen the version", P_BASE, REQ(.language = "js", .version = "19", .runtime = &rt_js), POLICY_DENY_LANGUAGE,
     403, "version \"19\"", NULL},
    {"language beats input", P_BASE, REQ(.language = "cobol", .nfiles = 0), POLICY_DENY_LANGUAGE, 403, "cobol", NULL},

    /* input structure */
    {"no files", P_BASE, REQ(.files = NULL, .nfiles = 0), POLICY_DENY_INPUT, 400, "files must hold at least one file", NULL},
    {"files at ceiling", P_BASE, REQ(FILES_OF(f_three)), POLICY_OK, 200, ALLOW},
    {"files over ceiling", P_BASE, REQ(FILES_OF(f_four)), POLICY_DENY_INPUT, 400,
     "files has 4 entries, more than the tenant's limit of 3", NULL},
    {"files pointer missing", P_BASE, REQ(.files = NULL, .nfiles = 1), POLICY_DENY_INPUT, 400, "files is missing", NULL},
    {"name at ceiling", P_BASE, REQ(FILES_OF(f_name16)), POLICY_OK, 200, ALLOW},
    {"name over ceiling", P_BASE, REQ(FILES_OF(f_name17)), POLICY_DENY_INPUT, 400,
     "files[1].name is longer than the tenant's limit of 16 bytes", NULL},
    {"file without name", P_BASE, REQ(FILES_OF(f_noname)), POLICY_OK, 200, ALLOW},
    {"empty file", P_BASE, REQ(FILES_OF(f_empty)), POLICY_OK, 200, ALLOW},
    {"content pointer missing", P_BASE, REQ(FILES_OF(f_nocontent)), POLICY_DENY_INPUT, 400, "files[0].content is missing", NULL},
    {"code at ceiling", P_BASE, REQ(FILES_OF(f_code64)), POLICY_OK, 200, ALLOW},
    {"code over ceiling", P_BASE, REQ(FILES_OF(f_code65)), POLICY_DENY_INPUT, 400,
     "files' contents total more than the tenant's limit of 64 bytes", NULL},
    {"code length overflow", P_BASE, REQ(FILES_OF(f_huge)), POLICY_DENY_INPUT, 400, "limit of 64 bytes", NULL},
    {"args at ceiling", P_BASE, REQ(.nargs = 2, .arg_lens = args_ok), POLICY_OK, 200, ALLOW},
    {"args over ceiling", P_BASE, REQ(.nargs = 3, .arg_lens = args_three), POLICY_DENY_INPUT, 400,
     "args has 3 entries, more than the tenant's limit of 2", NULL},
    {"arg over length", P_BASE, REQ(.nargs = 2, .arg_lens = args_long), POLICY_DENY_INPUT, 400,
     "args[1] is longer than the tenant's limit of 8 bytes", NULL},
    {"args pointer missing", P_BASE, REQ(.nargs = 1, .arg_lens = NULL), POLICY_DENY_INPUT, 400, "args is missing", NULL},
    {"stdin at ceiling", P_BASE, REQ(.stdin_len = STDIN), POLICY_OK, 200, ALLOW},
    {"stdin over ceiling", P_BASE, REQ(.stdin_len = STDIN + 1), POLICY_DENY_INPUT, 400,
     "stdin is longer than the tenant's limit of 32 bytes", NULL},
    {"input beats limits", P_BASE, REQ(FILES_OF(f_four), .run_timeout_ms = 0), POLICY_DENY_INPUT, 400, "files has 4", NULL},

    /* limits */
    {"run_timeout at ceiling", P_BASE, REQ(.run_timeout_ms = RUN_T), POLICY_OK, 200, ALLOW},
    {"run_timeout lowered", P_BASE, REQ(.run_timeout_ms = 1), POLICY_OK, 200, ALLOW},
    {"run_timeout over ceiling", P_BASE, REQ(.run_timeout_ms = RUN_T + 1), POLICY_DENY_LIMIT, 400,
     "run_timeout cannot exceed the tenant's limit of 3000 ms", NULL},
    {"run_timeout 0", P_BASE, REQ(.run_timeout_ms = 0), POLICY_DENY_LIMIT, 400,
     "run_timeout must be between 1 and 3000 ms, or -1 for the tenant's limit", NULL},
    {"run_timeout -2", P_BASE, REQ(.run_timeout_ms = -2), POLICY_DENY_LIMIT, 400, "run_timeout must be between", NULL},
    {"run_timeout INT64_MIN", P_BASE, REQ(.run_timeout_ms = INT64_MIN), POLICY_DENY_LIMIT, 400, "run_timeout must be", NULL},
    {"run_timeout INT64_MAX", P_BASE, REQ(.run_timeout_ms = INT64_MAX), POLICY_DENY_LIMIT, 400, "run_timeout cannot exceed", NULL},
    {"compile_timeout at ceiling", P_BASE, REQ(.compile_timeout_ms = COMP_T), POLICY_OK, 200, ALLOW},
    {"compile_timeout over ceiling", P_BASE, REQ(.compile_timeout_ms = COMP_T + 1), POLICY_DENY_LIMIT, 400,
     "compile_timeout cannot exceed the tenant's limit of 10000 ms", NULL},
    {"run_memory at ceiling", P_BASE, REQ(.run_memory_bytes = RUN_M), POLICY_OK, 200, ALLOW},
    {"run_memory over ceiling", P_BASE, REQ(.run_memory_bytes = RUN_M + 1), POLICY_DENY_LIMIT, 400,
     "run_memory_limit cannot exceed the tenant's limit of 134217728 bytes", NULL},
    {"compile_memory 0", P_BASE, REQ(.compile_memory_bytes = 0), POLICY_DENY_LIMIT, 400, "compile_memory_limit must be between 1",
     NULL},
    {"compile_memory over ceiling", P_BASE, REQ(.compile_memory_bytes = COMP_M + 1), POLICY_DENY_LIMIT, 400,
     "compile_memory_limit cannot exceed the tenant's limit of 268435456 bytes", NULL},
    /* CPU clocks: no ceilings of their own, judged against the stage's timeout ceiling */
    {"run_cpu_time at run_timeout ceiling", P_BASE, REQ(.run_cpu_ms = RUN_T), POLICY_OK, 200, ALLOW},
    {"run_cpu_time over run_timeout ceiling", P_BASE, REQ(.run_cpu_ms = RUN_T + 1), POLICY_DENY_LIMIT, 400,
     "run_cpu_time cannot exceed the tenant's limit of 3000 ms", NULL},
    {"run_cpu_time 0", P_BASE, REQ(.run_cpu_ms = 0), POLICY_DENY_LIMIT, 400, "run_cpu_time must be between 1 and 3000 ms", NULL},
    {"run_cpu_time -2", P_BASE, REQ(.run_cpu_ms = -2), POLICY_DENY_LIMIT, 400, "run_cpu_time must be between", NULL},
    {"compile_cpu_time at compile_timeout ceiling", P_BASE, REQ(.compile_cpu_ms = COMP_T), POLICY_OK, 200, ALLOW},
    {"compile_cpu_time over compile_timeout ceiling", P_BASE, REQ(.compile_cpu_ms = COMP_T + 1), POLICY_DENY_LIMIT, 400,
     "compile_cpu_time cannot exceed the tenant's limit of 10000 ms", NULL},
    {"connect run_cpu_time over session cpu", P_BASE, REQ(.endpoint = POLICY_EP_CONNECT, .run_cpu_ms = 2001), POLICY_DENY_LIMIT,
     400, "run_cpu_time cannot exceed the tenant's limit of 2000 ms", NULL},
    {"connect run_cpu_time at session cpu", P_BASE, REQ(.endpoint = POLICY_EP_CONNECT, .run_cpu_ms = 2000), POLICY_OK, 200, ALLOW},
    /* the run stage's rlimits: without tenant ceilings 1 .. the protocol's bound, -1 kept */
    {"run_stack_limit asked", P_BASE, REQ(.run_stack_kib = 8192), POLICY_OK, 200, ALLOW},
    {"run_stack_limit 0", P_BASE, REQ(.run_stack_kib = 0), POLICY_DENY_LIMIT, 400,
     "run_stack_limit must be between 1 and 16777216 KiB, or -1 for the backend's limit", NULL},
    {"run_stack_limit over the bound", P_BASE, REQ(.run_stack_kib = POLICY_MAX_STACK_KIB + 1), POLICY_DENY_LIMIT, 400,
     "run_stack_limit must be between", NULL},
    {"run_processes -2", P_BASE, REQ(.run_processes = -2), POLICY_DENY_LIMIT, 400, "run_processes must be between", NULL},
    {"run_file_size_limit at the bound", P_BASE, REQ(.run_file_size_kib = POLICY_MAX_FILE_SIZE_KIB), POLICY_OK, 200, ALLOW},
    /* with tenant ceilings: 1 .. ceiling */
    {"run_stack_limit at the tenant's", P_RLIM, REQ(.run_stack_kib = 8192), POLICY_OK, 200, ALLOW},
    {"run_stack_limit over the tenant's", P_RLIM, REQ(.run_stack_kib = 8193), POLICY_DENY_LIMIT, 400,
     "run_stack_limit cannot exceed the tenant's limit of 8192 KiB", NULL},
    {"run_processes over the tenant's", P_RLIM, REQ(.run_processes = 17), POLICY_DENY_LIMIT, 400,
     "run_processes cannot exceed the tenant's limit of 16 processes", NULL},
    {"run_file_size_limit over the tenant's", P_RLIM, REQ(.run_file_size_kib = 1025), POLICY_DENY_LIMIT, 400,
     "run_file_size_limit cannot exceed the tenant's limit of 1024 KiB", NULL},
    {"run_processes under the tenant's", P_RLIM, REQ(.run_processes = 1), POLICY_OK, 200, ALLOW},
    {"limits beat content", P_BASE, REQ(FILES_OF(f_bomb2), .run_timeout_ms = RUN_T + 1), POLICY_DENY_LIMIT, 400, "run_timeout",
     NULL},

    /* content rules */
    {"fork bomb in second file", P_BASE, REQ(.language = "bash", FILES_OF(f_bomb2)), POLICY_DENY_CONTENT, 422,
     "files[1].content matches content rule \"no-fork-bomb\"", "no-fork-bomb"},
    {"match after NUL bytes", P_BASE, REQ(.language = "gcc", .version = "10.2.0", FILES_OF(f_nulptrace)), POLICY_DENY_CONTENT, 422,
     "files[0].content matches content rule \"no-ptrace\"", "no-ptrace"},
    {"NUL splits a would-be match", P_BASE, REQ(.language = "gcc", .version = "10.2.0", FILES_OF(f_nulclean)), POLICY_OK, 200,
     ALLOW},
    {"no rules, bomb allowed", P_ANY, REQ(.language = "bash", FILES_OF(f_bomb2)), POLICY_OK, 200, ALLOW},

    /* connect: judged like execute, but run_timeout against sessions.wall_ms (-1 kept) and stdin against sessions.stdin_bytes */
    {"connect plain", P_BASE, REQ(.endpoint = POLICY_EP_CONNECT), POLICY_OK, 200, ALLOW},
    {"connect run_timeout over execute's ceiling", P_BASE, REQ(.endpoint = POLICY_EP_CONNECT, .run_timeout_ms = RUN_T + 1),
     POLICY_OK, 200, ALLOW},
    {"connect run_timeout at wall", P_BASE, REQ(.endpoint = POLICY_EP_CONNECT, .run_timeout_ms = WALL), POLICY_OK, 200, ALLOW},
    {"connect run_timeout over wall", P_BASE, REQ(.endpoint = POLICY_EP_CONNECT, .run_timeout_ms = WALL + 1), POLICY_DENY_LIMIT,
     400, "run_timeout cannot exceed the tenant's limit of 5000 ms", NULL},
    {"connect run_timeout 0", P_BASE, REQ(.endpoint = POLICY_EP_CONNECT, .run_timeout_ms = 0), POLICY_DENY_LIMIT, 400,
     "run_timeout must be between 1 and 5000 ms", NULL},
    {"connect run_timeout -2", P_BASE, REQ(.endpoint = POLICY_EP_CONNECT, .run_timeout_ms = -2), POLICY_DENY_LIMIT, 400,
     "run_timeout must be between", NULL},
    {"connect compile_timeout over ceiling", P_BASE, REQ(.endpoint = POLICY_EP_CONNECT, .compile_timeout_ms = COMP_T + 1),
     POLICY_DENY_LIMIT, 400, "compile_timeout cannot exceed the tenant's limit of 10000 ms", NULL},
    {"connect run_memory over ceiling", P_BASE, REQ(.endpoint = POLICY_EP_CONNECT, .run_memory_bytes = RUN_M + 1),
     POLICY_DENY_LIMIT, 400, "run_memory_limit cannot exceed", NULL},
    {"connect stdin over execute's ceiling", P_BASE, REQ(.endpoint = POLICY_EP_CONNECT, .stdin_len = STDIN + 1), POLICY_OK, 200,
     ALLOW},
    {"connect stdin at session ceiling", P_BASE, REQ(.endpoint = POLICY_EP_CONNECT, .stdin_len = SSTDIN), POLICY_OK, 200, ALLOW},
    {"connect stdin over session ceiling", P_BASE, REQ(.endpoint = POLICY_EP_CONNECT, .stdin_len = SSTDIN + 1), POLICY_DENY_INPUT,
     400, "stdin is longer than the tenant's limit of 48 bytes", NULL},
    {"connect language", P_BASE, REQ(.endpoint = POLICY_EP_CONNECT, .language = "cobol"), POLICY_DENY_LANGUAGE, 403,
     "language \"cobol\" is not allowed", NULL},
    {"connect version", P_BASE, REQ(.endpoint = POLICY_EP_CONNECT, .version = "2.7"), POLICY_DENY_LANGUAGE, 403, "version \"2.7\"",
     NULL},
    {"connect no files", P_BASE, REQ(.endpoint = POLICY_EP_CONNECT, .files = NULL, .nfiles = 0), POLICY_DENY_INPUT, 400,
     "files must hold at least one file", NULL},
    {"connect code over ceiling", P_BASE, REQ(.endpoint = POLICY_EP_CONNECT, FILES_OF(f_code65)), POLICY_DENY_INPUT, 400,
     "limit of 64 bytes", NULL},
    {"connect args over ceiling", P_BASE, REQ(.endpoint = POLICY_EP_CONNECT, .nargs = 3, .arg_lens = args_three), POLICY_DENY_INPUT,
     400, "args has 3 entries", NULL},
    {"connect content rule", P_BASE, REQ(.endpoint = POLICY_EP_CONNECT, .language = "bash", FILES_OF(f_bomb2)), POLICY_DENY_CONTENT,
     422, "files[1].content matches content rule \"no-fork-bomb\"", "no-fork-bomb"},
};

#define NROWS (sizeof(rows) / sizeof(rows[0]))

/* ------------------------------------------------------------------------
 * Checks
 * ------------------------------------------------------------------------ */

static const struct tenant_policy *fixture(enum fixture f)
{
    return f == P_NULL ? NULL : &policies[f];
}

static int64_t effective(int64_t want, int64_t ceiling)
{
    return want == -1 ? ceiling : want;
}

/* What holds for every verdict, whatever the row. */
static void check_invariants(const struct policy_request *r, const struct policy_verdict *v, int rc)
{
    size_t n = strnlen(v->message, sizeof(v->message));

    assert_true(n < sizeof(v->message));
    for (size_t i = 0; i < n; i++)
        assert_true(v->message[i] >= 0x20 && v->message[i] < 0x7f);
    assert_int_equal(rc, v->allow ? 0 : -1);
    assert_string_not_equal(policy_reason_name(v->reason), "unknown");
    if (v->allow) {
        assert_int_equal(v->reason, POLICY_OK);
        assert_int_equal(v->http_status, 200);
        assert_string_equal(v->message, "");
        assert_null(v->rule);
        if (r->endpoint == POLICY_EP_CONNECT) {
            /* a session's run_timeout as asked: -1 stays -1 for the backend's default */
            assert_int_equal(v->run_timeout_ms, r->run_timeout_ms);
            assert_int_equal(v->compile_timeout_ms, effective(r->compile_timeout_ms, COMP_T));
            assert_int_equal(v->run_memory_bytes, effective(r->run_memory_bytes, RUN_M));
            assert_int_equal(v->compile_memory_bytes, effective(r->compile_memory_bytes, COMP_M));
        } else if (r->endpoint == POLICY_EP_EXECUTE) {
            assert_int_equal(v->run_timeout_ms, effective(r->run_timeout_ms, RUN_T));
            assert_int_equal(v->compile_timeout_ms, effective(r->compile_timeout_ms, COMP_T));
            assert_int_equal(v->run_memory_bytes, effective(r->run_memory_bytes, RUN_M));
            assert_int_equal(v->compile_memory_bytes, effective(r->compile_memory_bytes, COMP_M));
        }
        /* CPU clocks as asked, -1 kept (the backend's) */
        assert_int_equal(v->run_cpu_ms, r->endpoint & (POLICY_EP_EXECUTE | POLICY_EP_CONNECT) ? r->run_cpu_ms : 0);
        assert_int_equal(v->compile_cpu_ms, r->endpoint & (POLICY_EP_EXECUTE | POLICY_EP_CONNECT) ? r->compile_cpu_ms : 0);
        /* the run stage's rlimits: as asked, or (not asked) the tenant's ceiling or -1 */
        if (r->endpoint & (POLICY_EP_EXECUTE | POLICY_EP_CONNECT)) {
            assert_true(r->run_stack_kib == -1 ? v->run_stack_kib == -1 || v->run_stack_kib > 0
                                               : v->run_stack_kib == r->run_stack_kib);
            assert_true(r->run_processes == -1 ? v->run_processes == -1 || v->run_processes > 0
                                               : v->run_processes == r->run_processes);
            assert_true(r->run_file_size_kib == -1 ? v->run_file_size_kib == -1 || v->run_file_size_kib > 0
                                                   : v->run_file_size_kib == r->run_file_size_kib);
        } else {
            assert_true(v->run_stack_kib == 0 && v->run_processes == 0 && v->run_file_size_kib == 0);
        }
    } else {
        assert_int_not_equal(v->reason, POLICY_OK);
        assert_true(n > 0);
        assert_int_equal(v->run_timeout_ms, 0);
        assert_int_equal(v->run_memory_bytes, 0);
        assert_int_equal(v->run_cpu_ms, 0);
        assert_int_equal(v->run_stack_kib, 0);
        if (v->reason != POLICY_DENY_CONTENT)
            assert_null(v->rule);
    }
}

static void test_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < NROWS; i++) {
        const struct row *t = &rows[i];
        struct policy_verdict v;
        int rc;

        memset(&v, 0xa5, sizeof(v)); /* every field must be written */
        print_message("[ row %2zu ] %s\n", i, t->what);
        rc = policy_evaluate(fixture(t->policy), &t->req, &v);
        if (v.reason != t->reason || v.http_status != t->status || strstr(v.message, t->msg) == NULL)
            fail_msg("row %zu (%s): reason %s status %d message \"%s\"; want %s %d \"%s\"", i, t->what,
                     policy_reason_name(v.reason), v.http_status, v.message, policy_reason_name(t->reason), t->status, t->msg);
        assert_int_equal(v.allow, t->reason == POLICY_OK);
        if (t->rule != NULL)
            assert_string_equal(v.rule, t->rule);
        else
            assert_null(v.rule);
        check_invariants(&t->req, &v, rc);
    }
}

/* Step 5: the tenant's endpoints, then the credential's scopes. */
/* Not asked: the tenant's rlimit ceilings are what the verdict applies; without them -1 (the backend's). */
static void test_rlimit_defaults(void **state)
{
    struct policy_request r = REQ(.run_processes = 4);
    struct policy_verdict v;

    (void)state;
    assert_int_equal(policy_evaluate(&policies[P_RLIM], &r, &v), 0);
    assert_int_equal(v.run_stack_kib, 8192);
    assert_int_equal(v.run_processes, 4);
    assert_int_equal(v.run_file_size_kib, 1024);
    assert_int_equal(policy_evaluate(&policies[P_ANY], &r, &v), 0);
    assert_int_equal(v.run_stack_kib, -1);
    assert_int_equal(v.run_processes, 4);
    assert_int_equal(v.run_file_size_kib, -1);
}

static void test_authorize(void **state)
{
    static const struct {
        const char *what;
        enum fixture policy;
        unsigned endpoint, scopes;
        enum policy_reason reason;
        const char *msg;
    } cases[] = {
        {"allowed and in scope", P_BASE, POLICY_EP_EXECUTE, POLICY_EP_ALL, POLICY_OK, ""},
        {"scope narrower than the tenant", P_BASE, POLICY_EP_EXECUTE, POLICY_EP_RUNTIMES, POLICY_DENY_ENDPOINT,
         "outside the credential's scopes"},
        {"tenant narrower than the scope", P_RUNTIMES, POLICY_EP_EXECUTE, POLICY_EP_ALL, POLICY_DENY_ENDPOINT,
         "not allowed for this tenant"},
        {"tenant beats scope", P_RUNTIMES, POLICY_EP_EXECUTE, 0, POLICY_DENY_ENDPOINT, "not allowed for this tenant"},
        {"no scopes", P_BASE, POLICY_EP_RUNTIMES, 0, POLICY_DENY_ENDPOINT, "scopes"},
        {"two endpoints at once", P_BASE, POLICY_EP_ALL, POLICY_EP_ALL, POLICY_DENY_ENDPOINT, "unknown endpoint"},
        {"no endpoint", P_BASE, 0, POLICY_EP_ALL, POLICY_DENY_ENDPOINT, "unknown endpoint"},
        {"no policy", P_NULL, POLICY_EP_EXECUTE, POLICY_EP_ALL, POLICY_DENY_NO_POLICY, "no policy"},
        {"broken policy fails closed", P_NOCEIL, POLICY_EP_EXECUTE, POLICY_EP_ALL, POLICY_DENY_NO_POLICY, "no policy"},
        {"connect in scope", P_BASE, POLICY_EP_CONNECT, POLICY_EP_CONNECT, POLICY_OK, ""},
        {"connect outside execute's scope", P_BASE, POLICY_EP_CONNECT, POLICY_EP_EXECUTE | POLICY_EP_RUNTIMES, POLICY_DENY_ENDPOINT,
         "outside the credential's scopes"},
        {"connect not for this tenant", P_ANY, POLICY_EP_CONNECT, POLICY_EP_ALL, POLICY_DENY_ENDPOINT,
         "not allowed for this tenant"},
        {"watch in scope", P_BASE, POLICY_EP_WATCH, POLICY_EP_WATCH, POLICY_OK, ""},
        {"watch scope calls nothing else", P_BASE, POLICY_EP_CONNECT, POLICY_EP_WATCH, POLICY_DENY_ENDPOINT, "scopes"},
        {"watch not for this tenant", P_ANY, POLICY_EP_WATCH, POLICY_EP_ALL, POLICY_DENY_ENDPOINT, "not allowed for this tenant"},
        {"broken session ceilings fail closed", P_NOSESS, POLICY_EP_CONNECT, POLICY_EP_ALL, POLICY_DENY_NO_POLICY, "no policy"},
    };
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct policy_verdict v;
        int rc = policy_authorize(fixture(cases[i].policy), cases[i].endpoint, cases[i].scopes, &v);
        print_message("[ authorize %zu ] %s\n", i, cases[i].what);
        assert_int_equal(rc, cases[i].reason == POLICY_OK ? 0 : -1);
        assert_int_equal(v.allow, cases[i].reason == POLICY_OK);
        assert_int_equal(v.reason, cases[i].reason);
        assert_int_equal(v.http_status, cases[i].reason == POLICY_OK ? 200 : 403);
        assert_non_null(strstr(v.message, cases[i].msg));
    }
    assert_int_equal(policy_authorize(fixture(P_BASE), POLICY_EP_EXECUTE, POLICY_EP_ALL, NULL), -1);
}

/* What /api/v2/runtimes lists: the same rule execute is judged by. */
static void test_runtime_allowed(void **state)
{
    static const char *const alias_langs[] = {"py", "3"};
    struct tenant_policy aliased;
    static const struct {
        const char *what;
        enum fixture policy; /* P_COUNT: the aliased policy */
        const struct policy_runtime *rt;
        int allowed;
    } cases[] = {
        {"canonical name listed", P_BASE, &rt_python, 1},
        {"version outside the entry", P_BASE, &rt_python2, 0},
        {"listed by an alias (node)", P_BASE, &rt_js, 1},
        {"not listed", P_BASE, &rt_cobol, 0},
        {"wildcard", P_ANY, &rt_cobol, 1},
        {"no languages", P_RUNTIMES, &rt_python, 0},
        {"no policy", P_NULL, &rt_python, 0},
        {"policy names only an alias", P_COUNT, &rt_python, 1},
        {"alias policy, other version", P_COUNT, &rt_python2, 0},
        {"alias policy, other runtime", P_COUNT, &rt_js, 0},
    };
    (void)state;
    make_policy(&aliased, "aliased", POLICY_EP_ALL, alias_langs, 1, NULL, 0);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct tenant_policy *p = cases[i].policy == P_COUNT ? &aliased : fixture(cases[i].policy);
        print_message("[ runtime %zu ] %s\n", i, cases[i].what);
        assert_int_equal(policy_runtime_allowed(p, cases[i].rt), cases[i].allowed);
        /* agreement: a listed runtime may be run by each of its names */
        if (cases[i].allowed && (p->endpoints & POLICY_EP_EXECUTE)) {
            for (size_t j = 0; j <= cases[i].rt->naliases; j++) {
                struct policy_request r = REQ(.language = j == 0 ? cases[i].rt->language : cases[i].rt->aliases[j - 1],
                                              .version = cases[i].rt->version, .runtime = cases[i].rt);
                struct policy_verdict v;
                assert_int_equal(policy_evaluate(p, &r, &v), 0);
            }
        }
    }
    assert_int_equal(policy_runtime_allowed(fixture(P_BASE), NULL), 0);
    tenant_policy_free(&aliased);
}

static void test_version_matches(void **state)
{
    static const struct {
        const char *version, *selector;
        int want;
    } cases[] = {
        {"3", "3", 1},         {"3.11", "3", 1},      {"3.11.2", "3", 1}, {"3.x", "3", 1},         {"3.*", "3", 1},
        {"31", "3", 0},        {"*", "3", 0},         {"x", "3", 0},      {NULL, "3", 0},          {"", "3", 0},
        {"4", "3", 0},         {"3", "3.11", 0},      {"3.1", "3.11", 0}, {"3.11", "3.11", 1},     {"3.111", "3.11", 0},
        {"3.11.x", "3.11", 1}, {"3.11", "3.x", 1},    {"4.0", "3.x", 0},  {"anything", "*", 1},    {NULL, "*", 1},
        {"3", "x", 1},         {">=3 <4", "*", 1},    {"3 || 4", "3", 0}, {"3.11 || 4", "3", 0},   {"^3.11", "3", 0},
        {"~3", "3", 0},        {"3.0.0-rc1", "3", 1}, {"3", NULL, 0},     {"3.11.2", "3.11.2", 1}, {"3.11", "3.11.2", 0},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        if (policy_version_matches(cases[i].version, cases[i].selector) != cases[i].want)
            fail_msg("version \"%s\" vs selector \"%s\": want %d", cases[i].version ? cases[i].version : "(null)",
                     cases[i].selector ? cases[i].selector : "(null)", cases[i].want);
}

static void test_reason_names(void **state)
{
    (void)state;
    assert_string_equal(policy_reason_name(POLICY_OK), "ok");
    assert_string_equal(policy_reason_name(POLICY_DENY_ENDPOINT), "endpoint");
    assert_string_equal(policy_reason_name(POLICY_DENY_LANGUAGE), "language");
    assert_string_equal(policy_reason_name(POLICY_DENY_LIMIT), "limit");
    assert_string_equal(policy_reason_name(POLICY_DENY_INPUT), "filter");
    assert_string_equal(policy_reason_name(POLICY_DENY_CONTENT), "content");
    assert_string_equal(policy_reason_name(POLICY_DENY_NO_POLICY), "no-policy");
    assert_string_equal(policy_reason_name((enum policy_reason)99), "unknown");
}

/* The endpoint table: name to bit and back, one case a row. */
static void test_endpoint_names(void **state)
{
    static const struct {
        const char *name;
        unsigned bit; /* 0: the name is not an endpoint */
    } cases[] = {
        {"execute", POLICY_EP_EXECUTE},
        {"runtimes", POLICY_EP_RUNTIMES},
        {"connect", POLICY_EP_CONNECT},
        {"watch", POLICY_EP_WATCH},
        {"submissions", POLICY_EP_SUBMISSIONS},
        {"languages", POLICY_EP_LANGUAGES},
        {"packets", POLICY_EP_PACKETS},
        {"review", POLICY_EP_REVIEW},
        {"Execute", 0},
        {"Connect", 0},
        {"session", 0},
        {"execute ", 0},
        {"", 0},
        {"unknown", 0},
        {"healthz", 0},
        {NULL, 0},
    };
    char list[POLICY_ENDPOINT_LIST_MAX], small[10];
    unsigned all = 0;

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        unsigned bit = 0xdead;
        int rc = policy_endpoint_from_name(cases[i].name, &bit);
        if (cases[i].bit == 0) {
            if (rc != -1 || bit != 0xdead)
                fail_msg("\"%s\" should not be an endpoint", cases[i].name ? cases[i].name : "(null)");
            continue;
        }
        if (rc != 0 || bit != cases[i].bit)
            fail_msg("\"%s\": rc %d, bit %#x, want bit %#x", cases[i].name, rc, bit, cases[i].bit);
        assert_string_equal(policy_endpoint_name(bit), cases[i].name);
        all |= bit;
    }
    assert_int_equal(all, POLICY_EP_ALL);
    assert_string_equal(policy_endpoint_name(0), "unknown");
    assert_string_equal(policy_endpoint_name(POLICY_EP_ALL), "unknown");
    assert_string_equal(policy_endpoint_name(1u << 31), "unknown");
    assert_string_equal(policy_endpoint_list(list, sizeof(list)),
                        "execute, runtimes, connect, watch, submissions, languages, packets, review");
    /* distinct bits, in table order */
    assert_int_equal(POLICY_EP_EXECUTE, 1u << 0);
    assert_int_equal(POLICY_EP_RUNTIMES, 1u << 1);
    assert_int_equal(POLICY_EP_CONNECT, 1u << 2);
    assert_int_equal(POLICY_EP_WATCH, 1u << 3);
    assert_int_equal(POLICY_EP_SUBMISSIONS, 1u << 4);
    assert_int_equal(POLICY_EP_LANGUAGES, 1u << 5);
    assert_int_equal(POLICY_EP_PACKETS, 1u << 6);
    assert_int_equal(POLICY_EP_REVIEW, 1u << 7);
    /* a short buffer gets a cut, terminated list */
    assert_string_equal(policy_endpoint_list(small, sizeof(small)), "execute, ");
    assert_ptr_equal(policy_endpoint_list(small, 0), small);
}

static void test_null_arguments(void **state)
{
    struct policy_verdict v;
    struct policy_request r = REQ();

    (void)state;
    assert_int_equal(policy_evaluate(&policies[P_BASE], &r, NULL), -1);
    memset(&v, 0, sizeof(v));
    assert_int_equal(policy_evaluate(&policies[P_BASE], NULL, &v), -1);
    assert_int_equal(v.reason, POLICY_DENY_INPUT);
    assert_int_equal(v.http_status, 400);
    /* a verdict reused after an allow is fully overwritten by a deny */
    assert_int_equal(policy_evaluate(&policies[P_BASE], &r, &v), 0);
    r.run_timeout_ms = 0;
    assert_int_equal(policy_evaluate(&policies[P_BASE], &r, &v), -1);
    assert_false(v.allow);
    assert_int_equal(v.run_timeout_ms, 0);
}

static void test_rule_compile(void **state)
{
    struct policy_rule rule;
    char err[128];
    regmatch_t m = {.rm_so = 0, .rm_eo = 5};

    (void)state;
    memset(err, 0, sizeof(err));
    assert_int_equal(policy_rule_compile(&rule, "bad", "(unclosed", err, sizeof(err)), -1);
    assert_true(err[0] != '\0');
    assert_null(rule.name);
    assert_null(rule.pattern);
    assert_false(rule.compiled);
    assert_int_equal(policy_rule_compile(&rule, NULL, "x", err, sizeof(err)), -1);
    assert_int_equal(policy_rule_compile(&rule, "eval", "eval[[:space:]]*\\(", err, sizeof(err)), 0);
    assert_string_equal(rule.name, "eval");
    assert_true(rule.compiled);
    assert_int_equal(regexec(&rule.re, "eval(", 1, &m, REG_STARTEND), 0);
    policy_rule_free(&rule);
    assert_null(rule.name);
    assert_false(rule.compiled);
    policy_rule_free(&rule); /* twice is harmless */
}

static void test_validate(void **state)
{
    struct tenant_policy p;
    char err[128];

    (void)state;
    assert_int_equal(policy_validate(&policies[P_BASE], err, sizeof(err)), 0);
    assert_int_equal(policy_validate(&policies[P_RUNTIMES], err, sizeof(err)), 0);
    assert_int_equal(policy_validate(NULL, err, sizeof(err)), -1);
    assert_string_equal(err, "no policy");
    assert_int_equal(policy_validate(&policies[P_NOCEIL], err, sizeof(err)), -1);
    assert_non_null(strstr(err, "size ceiling"));
    assert_int_equal(policy_validate(&policies[P_NOCOMP], err, sizeof(err)), -1);
    assert_string_equal(err, "rules[1]: rule is not compiled");

    p = policies[P_BASE]; /* shallow copies: never freed */
    p.endpoints = 0;
    assert_int_equal(policy_validate(&p, err, sizeof(err)), -1);
    p.endpoints = 1u << 8; /* no such row */
    assert_int_equal(policy_validate(&p, err, sizeof(err)), -1);
    p = policies[P_BASE];
    p.ceilings.run_timeout_ms = -1;
    assert_int_equal(policy_validate(&p, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "timeout"));
    p = policies[P_BASE];
    p.tenant = NULL;
    assert_int_equal(policy_validate(&p, NULL, 0), -1);
    p = policies[P_BASE];
    p.langs = NULL;
    assert_int_equal(policy_validate(&p, err, sizeof(err)), -1);
}

/* Session ceilings: each field 1 .. its bound; zero ("off", "unlimited") and past the bound fail closed. */
static void test_validate_sessions(void **state)
{
    static const struct {
        const char *what;
        size_t off;
        int wide; /* 1: uint64_t, 0: uint32_t */
        uint64_t max;
        const char *msg;
    } fields[] = {
        {"max_concurrent", offsetof(struct policy_session_limits, max_concurrent), 0, POLICY_SESSION_MAX_CONCURRENT,
         "max_concurrent"},
        {"wall_ms", offsetof(struct policy_session_limits, wall_ms), 1, POLICY_SESSION_MAX_MS, "session clock"},
        {"idle_ms", offsetof(struct policy_session_limits, idle_ms), 1, POLICY_SESSION_MAX_MS, "session clock"},
        {"cpu_ms", offsetof(struct policy_session_limits, cpu_ms), 1, POLICY_SESSION_MAX_MS, "session clock"},
        {"stdin_bytes", offsetof(struct policy_session_limits, stdin_bytes), 1, POLICY_SESSION_MAX_BYTES, "session size"},
        {"output_bytes", offsetof(struct policy_session_limits, output_bytes), 1, POLICY_SESSION_MAX_BYTES, "session size"},
    };
    static const uint64_t probes[] = {0, 1, 2, 3}; /* 0, 1, max, max + 1 */
    char err[128];

    (void)state;
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
        for (size_t k = 0; k < sizeof(probes) / sizeof(probes[0]); k++) {
            struct tenant_policy p = policies[P_BASE]; /* shallow copy: never freed */
            uint64_t value = probes[k] < 2 ? probes[k] : fields[i].max + (probes[k] - 2);
            int ok = value >= 1 && value <= fields[i].max;
            char *at = (char *)&p.sessions + fields[i].off;
            struct policy_request r = REQ(.endpoint = POLICY_EP_CONNECT);
            struct policy_verdict v;

            if (fields[i].wide) {
                memcpy(at, &value, sizeof(value));
            } else {
                uint32_t narrow = (uint32_t)value;
                memcpy(at, &narrow, sizeof(narrow));
            }
            print_message("[ sessions ] %s = %" PRIu64 ": %s\n", fields[i].what, value, ok ? "valid" : "refused");
            memset(err, 0, sizeof(err));
            assert_int_equal(policy_validate(&p, err, sizeof(err)), ok ? 0 : -1);
            if (!ok) {
                assert_non_null(strstr(err, fields[i].msg));
                /* evaluate and authorize refuse a policy validate refuses, for every endpoint */
                assert_int_equal(policy_evaluate(&p, &r, &v), -1);
                assert_int_equal(v.reason, POLICY_DENY_NO_POLICY);
                assert_int_equal(policy_authorize(&p, POLICY_EP_RUNTIMES, POLICY_EP_ALL, &v), -1);
            }
        }
    }
}

static void test_tenant_policy_free(void **state)
{
    struct tenant_policy p;

    (void)state;
    make_policy(&p, "tmp", POLICY_EP_ALL, base_langs, 4, base_rules, 2);
    tenant_policy_free(&p);
    assert_null(p.tenant);
    assert_null(p.langs);
    assert_int_equal(p.nrules, 0);
    tenant_policy_free(&p);
    tenant_policy_free(NULL);
}

/* ------------------------------------------------------------------------
 * Allocation count (ASan builds): the policy code never allocates; glibc's
 * regexec() only grows the compiled regex's DFA cache
 * ------------------------------------------------------------------------ */

#ifdef HAVE_ASAN
static volatile int counting;
static volatile size_t nmalloc, nfree;

static void on_malloc(const volatile void *ptr, size_t size)
{
    (void)ptr;
    (void)size;
    if (counting)
        nmalloc++;
}

static void on_free(const volatile void *ptr)
{
    (void)ptr;
    if (counting)
        nfree++;
}

/* Evaluate the rows that do (content) or do not (!content) reach the content rules, against p (NULL: the row's own policy). */
static void count_rows(const struct tenant_policy *p, int content, size_t *mallocs, size_t *frees)
{
    struct policy_verdict v;

    nmalloc = nfree = 0;
    for (size_t i = 0; i < NROWS; i++) {
        const struct policy_request *r = &rows[i].req;
        int reaches = rows[i].policy == P_BASE && (r->endpoint == POLICY_EP_EXECUTE || r->endpoint == POLICY_EP_CONNECT) &&
                      (rows[i].reason == POLICY_OK || rows[i].reason == POLICY_DENY_CONTENT);
        if (reaches != content)
            continue;
        counting = 1;
        (void)policy_evaluate(p != NULL ? p : fixture(rows[i].policy), r, &v);
        counting = 0;
    }
    *mallocs = nmalloc;
    *frees = nfree;
}

static void test_no_allocation(void **state)
{
    static int installed;
    struct tenant_policy cold;
    size_t m, f;

    (void)state;
    if (!installed) {
        assert_int_equal(__sanitizer_install_malloc_and_free_hooks(on_malloc, on_free), 1);
        installed = 1;
    }
    /* The hooks see allocations at all. */
    nmalloc = nfree = 0;
    counting = 1;
    free(malloc(1));
    counting = 0;
    assert_int_equal(nmalloc, 1);
    assert_int_equal(nfree, 1);

    /* Every row that stops before the content rules: not one allocation. */
    count_rows(NULL, 0, &m, &f);
    print_message("rows stopping before content rules: %zu mallocs, %zu frees\n", m, f);
    assert_int_equal(m, 0);
    assert_int_equal(f, 0);

    /*
     * Rows that reach regexec(), on freshly compiled rules: glibc builds its
     * DFA states lazily and caches them in the regex_t (freed by regfree), so
     * the first pass may allocate.  The same inputs again allocate nothing.
     */
    make_policy(&cold, "cold", POLICY_EP_ALL, base_langs, 4, base_rules, 2);
    count_rows(&cold, 1, &m, &f);
    print_message("rows reaching content rules, cold regex: %zu mallocs, %zu frees (DFA cache)\n", m, f);
    count_rows(&cold, 1, &m, &f);
    print_message("rows reaching content rules, warm regex: %zu mallocs, %zu frees\n", m, f);
    assert_int_equal(m, 0);
    assert_int_equal(f, 0);
    tenant_policy_free(&cold);
}
#else
static void test_no_allocation(void **state)
{
    (void)state;
    skip(); /* needs the ASan build's allocator hooks: configure with -DMOAT_SANITIZE=ON */
}
#endif

int main(void)
{
    /* clang-format off */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_rlimit_defaults),
        cmocka_unit_test(test_authorize),
        cmocka_unit_test(test_runtime_allowed),
        cmocka_unit_test(test_version_matches),
        cmocka_unit_test(test_reason_names),
        cmocka_unit_test(test_endpoint_names),
        cmocka_unit_test(test_null_arguments),
        cmocka_unit_test(test_rule_compile),
        cmocka_unit_test(test_validate),
        cmocka_unit_test(test_validate_sessions),
        cmocka_unit_test(test_tenant_policy_free),
        cmocka_unit_test(test_no_allocation),
    };
    /* clang-format on */

    return cmocka_run_group_tests_name("policy", tests, setup, teardown);
}
