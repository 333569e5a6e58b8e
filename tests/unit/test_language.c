/*
 * test_language.c - backend/language.c: version selectors, manifest
 * parsing (valid manifests, every rejection, limit overrides), a stage's
 * argv from its template, lookup by name and alias, and the manifests
 * shipped in backend/languages/.
 *
 * Manifests are written to a fresh mkdtemp(3) directory per test.  Their
 * argv[0] is /bin/sh, which every Debian system has.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include "language.h"
#include "moat_options.h"

#ifndef MOAT_SOURCE_DIR
#error "MOAT_SOURCE_DIR must name the source tree"
#endif

/* The common tail of a valid manifest, after "language" and "version". */
#define RUN_SH "\"run\":[\"/bin/sh\",\"{file}\",\"{args}\"],\"runtime\":[\"/usr/bin\",\"/bin\"]"

/* ---- temp dir fixture ----------------------------------------------------- */

struct fx {
    char tmp[PATH_MAX];
    char path[PATH_MAX + 64]; /* last manifest written */
};

static int rm_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    return type == FTW_DP ? rmdir(path) : unlink(path);
}

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    if (f == NULL)
        return -1;
    const char *t = getenv("TMPDIR");
    snprintf(f->tmp, sizeof(f->tmp), "%s/moat-langtest-XXXXXX", t && *t ? t : "/tmp");
    if (mkdtemp(f->tmp) == NULL) {
        free(f);
        return -1;
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    int rc = nftw(f->tmp, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    free(f);
    return rc;
}

/* Writes <tmp>/<sub>/manifest.json; its path is left in f->path. */
static const char *manifest(struct fx *f, const char *sub, const char *json)
{
    char dir[PATH_MAX + 32];
    snprintf(dir, sizeof(dir), "%s/%s", f->tmp, sub);
    assert_true(mkdir(dir, 0755) == 0 || errno == EEXIST);
    snprintf(f->path, sizeof(f->path), "%s/manifest.json", dir);
    FILE *fp = fopen(f->path, "w");
    assert_non_null(fp);
    fputs(json, fp);
    assert_int_equal(fclose(fp), 0);
    return f->path;
}

static int is_zero(const void *p, size_t len)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < len; i++)
        if (b[i])
            return 0;
    return 1;
}

/* ==== version selectors =================================================== */

static void test_version_matches(void **state)
{
    static const struct {
        const char *version, *selector;
        int want;
    } t[] = {
        {"3.11.2", "*", 1},        {"3.11.2", "x", 1},       {"3.11.2", "3", 1},     {"3.11.2", "3.11", 1},
        {"3.11.2", "3.11.2", 1},   {"3.11.2", "3.x", 1},     {"3.11.2", "3.X", 1},   {"3.11.2", "3.*", 1},
        {"3.11.2", "3.11.x", 1},   {"3.11.2", "3.1", 0}, /* a component is a whole number, not a prefix */
        {"3.11.2", "3.11.2.1", 0}, {"3.11.2", "3.11.20", 0}, {"3.11.2", "3.12", 0},  {"3.11.2", "4", 0},
        {"3.11.2", "4.x", 0},      {"3.11.2", "31", 0},      {"3.11.2", "2", 0},     {"10.2.1", "1", 0},
        {"10.2.1", "10", 1},       {"5.2.15", "5.2", 1},     {"5.2.15", "5.2.1", 0}, {"1", "1", 1},
        {"1", "1.0", 0},
    };
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        int got = version_matches(t[i].version, t[i].selector) != 0;
        if (got != t[i].want)
            fail_msg("version_matches(\"%s\", \"%s\") = %d, want %d", t[i].version, t[i].selector, got, t[i].want);
    }
}

/* ==== parsing ============================================================= */

static void test_parse_valid(void **state)
{
    struct fx *f = *state;
    struct language l;
    struct errbuf e = {""};

    manifest(f, "python-3.11",
             "{\"language\":\"python\",\"version\":\"3.11.2\",\"aliases\":[\"py\",\"py3\"],\"compile\":null,"
             "\"run\":[\"/usr/bin/python3.11\",\"-B\",\"{file}\",\"{args}\"],"
             "\"runtime\":[\"/usr/bin\",\"/usr/lib\",\"/etc/alternatives\"],"
             "\"env\":[\"PATH=/usr/bin:/bin\",\"HOME=/box\",\"EMPTY=\"]}");
    if (access("/usr/bin/python3.11", X_OK) != 0)
        skip();
    assert_int_equal(language_parse(&l, f->path, &e), 0);
    assert_string_equal(l.name, "python");
    assert_string_equal(l.version, "3.11.2");
    assert_int_equal(l.naliases, 2);
    assert_string_equal(l.aliases[0], "py");
    assert_string_equal(l.aliases[1], "py3");
    assert_null(l.compile_argv);
    assert_non_null(l.run_argv);
    assert_string_equal(l.run_argv[0], "/usr/bin/python3.11");
    assert_string_equal(l.run_argv[1], "-B");
    assert_string_equal(l.run_argv[2], "{file}");
    assert_string_equal(l.run_argv[3], "{args}");
    assert_null(l.run_argv[4]);
    assert_int_equal(l.nro, 3);
    assert_string_equal(l.ro[0].path, "/usr/bin");
    assert_string_equal(l.ro[2].path, "/etc/alternatives");
    assert_string_equal(l.env[0], "PATH=/usr/bin:/bin");
    assert_string_equal(l.env[2], "EMPTY=");
    assert_null(l.env[3]);
    /* no "limits": the server defaults */
    assert_true(l.run_limits.wall_ms == DEFAULT_RUN_WALL_MS);
    assert_true(l.run_limits.cpu_ms == DEFAULT_RUN_CPU_MS);
    assert_true(l.run_limits.memory_bytes == DEFAULT_RUN_MEMORY);
    assert_true(l.run_limits.pids == DEFAULT_RUN_PIDS);
    assert_true(l.run_limits.output_cap == DEFAULT_OUTPUT_CAP);
    assert_true(l.run_limits.fsize_bytes == DEFAULT_FSIZE);
    assert_true(l.compile_limits.wall_ms == DEFAULT_COMPILE_WALL_MS);
    assert_true(l.compile_limits.memory_bytes == DEFAULT_COMPILE_MEMORY);
    assert_true(l.compile_limits.pids == DEFAULT_COMPILE_PIDS);
    language_free(&l);
    assert_true(is_zero(&l, sizeof(l)));
}

static void test_parse_minimal_and_compiled(void **state)
{
    struct fx *f = *state;
    struct language l;
    struct errbuf e = {""};

    /* no aliases, no env, no compile key at all */
    manifest(f, "sh", "{\"language\":\"sh\",\"version\":\"1\"," RUN_SH "}");
    assert_int_equal(language_parse(&l, f->path, &e), 0);
    assert_int_equal(l.naliases, 0);
    assert_null(l.compile_argv);
    assert_non_null(l.env);
    assert_null(l.env[0]);
    language_free(&l);

    /* an empty runtime list is allowed */
    manifest(f, "sh2", "{\"language\":\"sh\",\"version\":\"2\",\"run\":[\"/bin/sh\"],\"runtime\":[]}");
    assert_int_equal(language_parse(&l, f->path, &e), 0);
    assert_int_equal(l.nro, 0);
    language_free(&l);

    /* a compiled language; names may use + # . _ - */
    manifest(f, "cpp",
             "{\"language\":\"c++\",\"version\":\"12.2.0-1_a\",\"aliases\":[\"g++\",\"c#x\"],"
             "\"compile\":[\"/bin/sh\",\"-c\",\"cc {files}\"]," RUN_SH "}");
    assert_int_equal(language_parse(&l, f->path, &e), 0);
    assert_string_equal(l.name, "c++");
    assert_non_null(l.compile_argv);
    assert_string_equal(l.compile_argv[0], "/bin/sh");
    assert_string_equal(l.compile_argv[2], "cc {files}");
    assert_null(l.compile_argv[3]);
    language_free(&l);
}

static void test_parse_errors(void **state)
{
    struct fx *f = *state;
    static const struct {
        const char *json;
        const char *why; /* a substring of the reason */
    } t[] = {
        {"{\"language\":\"sh\",\"version\":\"1\"," RUN_SH ",\"foo\":1}", "unknown field \"foo\""},
        {"{\"language\":\"sh\",\"version\":\"1\",\"run\":[\"sh\",\"{file}\"],\"runtime\":[]}", "run[0] must be an absolute path"},
        {"{\"language\":\"sh\",\"version\":\"1\",\"run\":[\"bin/sh\"],\"runtime\":[]}", "run[0] must be an absolute path"},
        {"{\"language\":\"sh\",\"version\":\"1\",\"run\":[],\"runtime\":[]}", "run[0] must be an absolute path"},
        {"{\"language\":\"sh\",\"version\":\"1\",\"runtime\":[]}", "run must be an array of strings"},
        {"{\"language\":\"sh\",\"version\":\"1\",\"run\":\"/bin/sh\",\"runtime\":[]}", "run must be an array of strings"},
        {"{\"language\":\"sh\",\"version\":\"1\",\"run\":[\"/bin/sh\",3],\"runtime\":[]}", "run[1] must be a string"},
        {"{\"language\":\"sh\",\"version\":\"1\",\"run\":[\"/nonexistent/x\"],\"runtime\":[]}",
         "runtime /nonexistent/x is not installed"},
        {"{\"language\":\"sh\",\"version\":\"1\",\"compile\":[\"/nonexistent/cc\"]," RUN_SH "}",
         "runtime /nonexistent/cc is not installed"},
        {"{\"language\":\"sh\",\"version\":\"1\",\"compile\":[]," RUN_SH "}", "compile[0] must be an absolute path"},
        {"{\"language\":\"sh\",\"version\":\"1\",\"run\":[\"/bin/sh\"],\"runtime\":[\"/\"]}", "runtime path \"/\""},
        {"{\"language\":\"sh\",\"version\":\"1\",\"run\":[\"/bin/sh\"],\"runtime\":[\"/usr\",\"/usr/../etc\"]}",
         "runtime path \"/usr/../etc\""},
        {"{\"language\":\"sh\",\"version\":\"1\",\"run\":[\"/bin/sh\"],\"runtime\":[\"/usr\",\"lib\",\"/bin\"]}",
         "runtime path \"lib\""},
        {"{\"language\":\"sh\",\"version\":\"1\",\"run\":[\"/bin/sh\"],\"runtime\":[\"/..\"]}", "runtime path \"/..\""},
        {"{\"language\":\"sh\",\"version\":\"1\",\"run\":[\"/bin/sh\"]}", "runtime must be an array of strings"},
        {"{\"language\":\"sh\",\"version\":\"1\"," RUN_SH ",\"env\":[\"A=1\",\"FOO\"]}", "env entry \"FOO\" is not KEY=VALUE"},
        {"{\"language\":\"sh\",\"version\":\"1\"," RUN_SH ",\"env\":[\"=x\"]}", "env entry \"=x\" is not KEY=VALUE"},
        {"{\"language\":\"sh\",\"version\":\"1\"," RUN_SH ",\"env\":\"A=1\"}", "env must be an array of strings"},
        {"{\"language\":\"sh\",\"version\":\"1\"," RUN_SH ",\"limits\":{\"bogus\":1}}", "unknown limit \"bogus\""},
        {"{\"language\":\"sh\",\"version\":\"1\"," RUN_SH ",\"limits\":{\"run_timeout\":-5}}",
         "limits.run_timeout must be a positive integer"},
        {"{\"language\":\"sh\",\"version\":\"1\"," RUN_SH ",\"limits\":{\"run_memory\":0}}",
         "limits.run_memory must be a positive integer"},
        {"{\"language\":\"sh\",\"version\":\"1\"," RUN_SH ",\"limits\":{\"output\":\"64k\"}}",
         "limits.output must be a positive integer"},
        {"{\"language\":\"sh\",\"version\":\"1\"," RUN_SH ",\"limits\":{\"output\":1.5}}",
         "limits.output must be a positive integer"},
        {"{\"language\":\"sh\",\"version\":\"1\"," RUN_SH ",\"limits\":{\"compile_processes\":-1}}",
         "limits.compile_processes must be a positive integer"},
        {"{\"language\":\"sh\",\"version\":\"1\"," RUN_SH ",\"limits\":[]}", "limits must be an object"},
        {"{\"language\":\"sh\",\"language\":\"bash\",\"version\":\"1\"," RUN_SH "}", "duplicate"},
        {"{\"language\":\"sh\",\"version\":\"1\"," RUN_SH ",\"limits\":{\"output\":1,\"output\":2}}", "duplicate"},
        {"[\"language\",\"sh\"]", "not a JSON object"},
        {"\"sh\"", "manifest.json:1:"}, /* jansson itself refuses a bare string */
        {"{\"language\":\"sh\",", "manifest.json:"},
        {"", "manifest.json:"},
        {"{\"language\":\"py thon\",\"version\":\"1\"," RUN_SH "}", "language must be a short name"},
        {"{\"language\":\"\",\"version\":\"1\"," RUN_SH "}", "language must be a short name"},
        {"{\"language\":3,\"version\":\"1\"," RUN_SH "}", "language must be a short name"},
        {"{\"language\":\"../sh\",\"version\":\"1\"," RUN_SH "}", "language must be a short name"},
        {"{\"language\":\"sh\"," RUN_SH "}", "version must be a version string"},
        {"{\"language\":\"sh\",\"version\":\"1/2\"," RUN_SH "}", "version must be a version string"},
        {"{\"language\":\"sh\",\"version\":\"1\",\"aliases\":[\"a\",1]," RUN_SH "}", "aliases[1] must be a string"},
        {"{\"language\":\"sh\",\"version\":\"1\",\"extension\":\"go\"," RUN_SH "}", "extension must look like"},
        {"{\"language\":\"sh\",\"version\":\"1\",\"extension\":\".tar.gz\"," RUN_SH "}", "extension must look like"},
        {"{\"language\":\"sh\",\"version\":\"1\",\"extension\":\".\"," RUN_SH "}", "extension must look like"},
        {"{\"language\":\"sh\",\"version\":\"1\",\"extension\":7," RUN_SH "}", "extension must look like"},
        {"{\"language\":\"sh\",\"version\":\"1\",\"version_package\":3," RUN_SH "}", "version_package must be a package name"},
        {"{\"language\":\"sh\",\"version\":\"1\"," RUN_SH ",\"limits\":{\"run_idle_timeout\":0}}",
         "limits.run_idle_timeout must be a positive integer"},
        {"{\"language\":\"sh\",\"version\":\"1\",\"aliases\":\"a\"," RUN_SH "}", "aliases must be an array of strings"},
        /* S26: arguments are the program's, never the tool's */
        {"{\"language\":\"sh\",\"version\":\"1\",\"compile\":[\"/bin/sh\",\"{file}\",\"{args}\"]," RUN_SH "}",
         "compile must not use {args}"},
        {"{\"language\":\"sh\",\"version\":\"1\",\"run\":[\"/bin/sh\",\"{args}\",\"{file}\"],\"runtime\":[]}",
         "run may use {args} once, as its last element"},
        {"{\"language\":\"sh\",\"version\":\"1\",\"run\":[\"/bin/sh\",\"{file}\",\"{args}\",\"{args}\"],\"runtime\":[]}",
         "run may use {args} once, as its last element"},
        {"{\"language\":\"sh\",\"version\":\"1\",\"run\":[\"/bin/sh\",\"{args}\"],\"runtime\":[]}",
         "run's {args} must follow {file} or a program built in /box"},
        {"{\"language\":\"sh\",\"version\":\"1\",\"run\":[\"/bin/sh\",\"{file}\",\"-x\",\"{args}\"],\"runtime\":[]}",
         "run's {args} must follow {file} or a program built in /box"},
        {"{\"language\":\"sh\",\"version\":\"1\",\"run\":[\"/box/a.out\",\"-x\",\"{args}\"],\"runtime\":[]}",
         "run's {args} must follow {file} or a program built in /box"},
        /* compiler options: well-formed patterns, placed by the compile template, never in run */
        {"{\"language\":\"sh\",\"version\":\"1\",\"compile\":[\"/bin/sh\",\"{options}\",\"{file}\"]," RUN_SH
         ",\"compiler_options\":[\"O2\"]}",
         "compiler_options[0] \"O2\" is not an option pattern"},
        {"{\"language\":\"sh\",\"version\":\"1\",\"compile\":[\"/bin/sh\",\"{options}\",\"{file}\"]," RUN_SH
         ",\"compiler_options\":[\"-D{name}\"]}",
         "is not an option pattern"},
        {"{\"language\":\"sh\",\"version\":\"1\",\"compile\":[\"/bin/sh\",\"{file}\"]," RUN_SH ",\"compiler_options\":[\"-O2\"]}",
         "compiler_options needs a compile template with {options}"},
        {"{\"language\":\"sh\",\"version\":\"1\"," RUN_SH ",\"compiler_options\":[\"-O2\"]}",
         "compiler_options needs a compile template with {options}"},
        {"{\"language\":\"sh\",\"version\":\"1\",\"compile\":[\"/bin/sh\",\"{options}\",\"{options}\"]," RUN_SH "}",
         "compile may use {options} once, after the compiler"},
        {"{\"language\":\"sh\",\"version\":\"1\",\"compile\":[\"{options}\",\"/bin/sh\"]," RUN_SH "}",
         "compile[0] must be an absolute path"},
        {"{\"language\":\"sh\",\"version\":\"1\",\"run\":[\"/bin/sh\",\"{options}\",\"{file}\"],\"runtime\":[]}",
         "run must not use {options}"},
        {"{\"language\":\"sh\",\"version\":\"1\",\"compile\":[\"/bin/sh\",\"{options}\",\"{file}\"]," RUN_SH
         ",\"compiler_options\":\"-O2\"}",
         "compiler_options must be an array of strings"},
        {"{\"language\":\"sh\",\"version\":\"1\",\"aliases\":[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\","
         "\"j\",\"k\",\"l\",\"m\",\"n\",\"o\",\"p\",\"q\"]," RUN_SH "}",
         "too many aliases"},
    };
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        struct language l;
        struct errbuf e = {""};
        char sub[32];
        snprintf(sub, sizeof(sub), "bad%zu", i);
        manifest(f, sub, t[i].json);
        if (language_parse(&l, f->path, &e) != -1) {
            language_free(&l);
            fail_msg("case %zu accepted: %s", i, t[i].json);
        }
        if (strstr(e.msg, t[i].why) == NULL)
            fail_msg("case %zu: reason \"%s\" lacks \"%s\"", i, e.msg, t[i].why);
        /* nothing half-filled is left behind */
        assert_null(l.name);
        assert_null(l.version);
        assert_null(l.aliases);
        assert_null(l.run_argv);
        assert_null(l.compile_argv);
        assert_null(l.ro);
        assert_null(l.env);
        assert_null(l.option_patterns);
    }
}

static void test_parse_missing_file(void **state)
{
    struct fx *f = *state;
    struct language l;
    struct errbuf e = {""};
    char path[PATH_MAX + 32];

    snprintf(path, sizeof(path), "%s/nope/manifest.json", f->tmp);
    assert_int_equal(language_parse(&l, path, &e), -1);
    assert_non_null(strstr(e.msg, path));
    assert_null(l.name);
}

static void test_parse_limits_override(void **state)
{
    struct fx *f = *state;
    struct language l;
    struct errbuf e = {""};

    manifest(f, "lim",
             "{\"language\":\"sh\",\"version\":\"1\"," RUN_SH ",\"limits\":{"
             "\"run_timeout\":5000,\"compile_memory\":536870912,\"output\":1024,"
             "\"run_processes\":100000,\"compile_processes\":3,\"file_size\":4096}}");
    assert_int_equal(language_parse(&l, f->path, &e), 0);
    assert_true(l.run_limits.wall_ms == 5000);
    assert_true(l.run_limits.cpu_ms == DEFAULT_RUN_CPU_MS); /* untouched */
    assert_true(l.run_limits.memory_bytes == DEFAULT_RUN_MEMORY);
    assert_true(l.compile_limits.wall_ms == DEFAULT_COMPILE_WALL_MS);
    assert_true(l.compile_limits.memory_bytes == 536870912);
    /* output and file size apply to both stages */
    assert_true(l.run_limits.output_cap == 1024);
    assert_true(l.compile_limits.output_cap == 1024);
    assert_true(l.run_limits.fsize_bytes == 4096);
    assert_true(l.compile_limits.fsize_bytes == 4096);
    /* processes are capped at 4096 */
    assert_int_equal(l.run_limits.pids, 4096);
    assert_int_equal(l.compile_limits.pids, 3);
    language_free(&l);

    manifest(f, "lim2",
             "{\"language\":\"sh\",\"version\":\"1\"," RUN_SH ",\"limits\":{"
             "\"run_cpu_time\":1,\"run_memory\":1048576,\"compile_timeout\":20000,\"compile_cpu_time\":15000}}");
    assert_int_equal(language_parse(&l, f->path, &e), 0);
    assert_true(l.run_limits.cpu_ms == 1);
    assert_true(l.run_limits.memory_bytes == 1048576);
    assert_true(l.run_limits.wall_ms == DEFAULT_RUN_WALL_MS);
    assert_true(l.compile_limits.wall_ms == 20000);
    assert_true(l.compile_limits.cpu_ms == 15000);
    assert_int_equal(l.run_limits.pids, DEFAULT_RUN_PIDS);
    assert_int_equal(l.compile_limits.pids, DEFAULT_COMPILE_PIDS);
    language_free(&l);
}

static void test_parse_extension_and_new_limits(void **state)
{
    struct fx *f = *state;
    struct language l;
    struct errbuf e = {""};

    manifest(f, "go",
             "{\"language\":\"go\",\"version\":\"1.19\",\"extension\":\".go\"," RUN_SH ",\"limits\":{"
             "\"run_idle_timeout\":700,\"compile_idle_timeout\":900,\"compile_file_size\":123456}}");
    assert_int_equal(language_parse(&l, f->path, &e), 0);
    assert_string_equal(l.extension, ".go");
    assert_true(l.run_limits.idle_ms == 700);
    assert_true(l.compile_limits.idle_ms == 900);
    assert_true(l.compile_limits.fsize_bytes == 123456);
    assert_true(l.run_limits.fsize_bytes == DEFAULT_FSIZE); /* run stage untouched */
    language_free(&l);

    /* a version_package that is not installed keeps the manifest's version */
    manifest(f, "pkg", "{\"language\":\"sh\",\"version\":\"9.9\",\"version_package\":\"moat-no-such-package\"," RUN_SH "}");
    assert_int_equal(language_parse(&l, f->path, &e), 0);
    assert_string_equal(l.version, "9.9");
    assert_null(l.extension);
    language_free(&l);
}

static void test_package_version(void **state)
{
    struct fx *f = *state;
    char out[64];
    const char *status = manifest(f, "dpkg",
                                  "Package: python3.11\n"
                                  "Status: install ok installed\n"
                                  "Priority: optional\n"
                                  "Version: 3.11.2-6+deb12u6\n"
                                  " continuation: Version: 0.0\n"
                                  "\n"
                                  "Package: golang-go\n"
                                  "Status: install ok installed\n"
                                  "Version: 2:1.19~1\n"
                                  "\n"
                                  "Package: nodejs\n"
                                  "Status: install ok installed\n"
                                  "Version: 18.19.0+dfsg-6~deb12u2\n"
                                  "\n"
                                  "Package: ruby3.1\n"
                                  "Status: deinstall ok config-files\n"
                                  "Version: 3.1.2-7\n"
                                  "\n"
                                  "Package: sqlite3\n"
                                  "Version: 3.40.1-2\n"
                                  "Status: install ok installed\n"
                                  "\n"
                                  "Package: lua5.4\n"
                                  "Status: install ok installed\n"
                                  "Version: 5.4.4-3");
    static const struct {
        const char *pkg, *want; /* want NULL: not found */
    } t[] = {
        {"python3.11", "3.11.2"}, /* revision and +suffix dropped */
        {"golang-go", "1.19"},    /* epoch and ~suffix dropped */
        {"nodejs", "18.19.0"},
        {"ruby3.1", NULL}, /* removed, only config files left */
        {"sqlite3", "3.40.1"},
        {"lua5.4", "5.4.4"}, /* last paragraph, no trailing newline */
        {"python3", NULL},   /* a prefix of a package name is not it */
        {"", NULL},
    };
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        memset(out, 'x', sizeof(out));
        int rc = package_version(status, t[i].pkg, out, sizeof(out));
        if (t[i].want == NULL) {
            if (rc != -1)
                fail_msg("package_version(\"%s\") = %d (\"%s\"), want -1", t[i].pkg, rc, out);
        } else {
            if (rc != 0)
                fail_msg("package_version(\"%s\") failed", t[i].pkg);
            assert_string_equal(out, t[i].want);
        }
    }
    /* too small an output buffer, a missing status file */
    assert_int_equal(package_version(status, "python3.11", out, 6), -1);
    assert_int_equal(package_version(status, "python3.11", out, 7), 0);
    assert_string_equal(out, "3.11.2");
    char missing[PATH_MAX + 16];
    snprintf(missing, sizeof(missing), "%s/no-status", f->tmp);
    assert_int_equal(package_version(missing, "python3.11", out, sizeof(out)), -1);
}

/* ==== a stage's argv ====================================================== */

static void assert_argv(char **got, const char *const *want)
{
    size_t i;
    assert_non_null(got);
    for (i = 0; want[i]; i++) {
        if (got[i] == NULL)
            fail_msg("argv[%zu] missing, want \"%s\"", i, want[i]);
        assert_string_equal(got[i], want[i]);
    }
    if (got[i] != NULL)
        fail_msg("argv[%zu] = \"%s\" is one too many", i, got[i]);
}

/* S26: every file goes as "./name", whatever the name; arguments go as they are, one element each. */
static void test_argv_expansion(void **state)
{
    char n0[] = "-o", n1[] = "@o", n2[] = "inspect";
    char a0[] = "-e", a1[] = "@x", a2[] = "a b\nc", a3[] = "--";
    char gcc[] = "/usr/bin/gcc", o[] = "-o", out[] = "/box/a.out", all[] = "{files}", lm[] = "-lm";
    char node[] = "/usr/bin/node", dashes[] = "--", file[] = "{file}", args_ph[] = "{args}";
    char sh[] = "/bin/sh", c[] = "-c", inner[] = "cc {files}";
    struct moat_file files[] = {{n0, NULL, 0}, {n1, NULL, 0}, {n2, NULL, 0}};
    char *args[] = {a0, a1, a2, a3};
    char *compile[] = {gcc, o, out, all, lm, NULL};
    char *run[] = {node, dashes, file, args_ph, NULL};
    char *box_prog[] = {out, args_ph, NULL};
    char *literal[] = {sh, c, inner, NULL};
    char o2[] = "-O2", dx[] = "-DX=5", opts_ph[] = "{options}";
    char *options[] = {o2, dx};
    char *with_options[] = {gcc, opts_ph, o, out, all, NULL};
    const struct language_words w4 = {args, 4, NULL, 0}, w0 = {args, 0, NULL, 0}, wopt = {NULL, 0, options, 2};
    char **argv;

    (void)state;
    argv = language_argv(compile, files, 3, &w4);
    assert_argv(argv, (const char *const[]){"/usr/bin/gcc", "-o", "/box/a.out", "./-o", "./@o", "./inspect", "-lm", NULL});
    language_argv_free(argv);

    argv = language_argv(run, files, 3, &w4);
    assert_argv(argv, (const char *const[]){"/usr/bin/node", "--", "./-o", "-e", "@x", "a b\nc", "--", NULL});
    language_argv_free(argv);

    /* no arguments: {args} expands to nothing */
    argv = language_argv(box_prog, files, 1, &w0);
    assert_argv(argv, (const char *const[]){"/box/a.out", NULL});
    language_argv_free(argv);

    /* a placeholder inside a longer string is not one */
    argv = language_argv(literal, files, 3, &w4);
    assert_argv(argv, (const char *const[]){"/bin/sh", "-c", "cc {files}", NULL});
    language_argv_free(argv);

    /* {options}: each option its own element, where the template puts them */
    argv = language_argv(with_options, files, 1, &wopt);
    assert_argv(argv, (const char *const[]){"/usr/bin/gcc", "-O2", "-DX=5", "-o", "/box/a.out", "./-o", NULL});
    language_argv_free(argv);

    language_argv_free(NULL);
}

/* ==== lookup ============================================================== */

static void test_find(void **state)
{
    struct fx *f = *state;
    struct language_set set;
    struct errbuf e = {""};
    const struct language *l;

    /* 3.9.18 sorts after 3.11.2 as a string: the comparison must be numeric */
    manifest(f, "python-3.9", "{\"language\":\"python\",\"version\":\"3.9.18\",\"aliases\":[\"py\"]," RUN_SH "}");
    manifest(f, "python-3.11", "{\"language\":\"python\",\"version\":\"3.11.2\",\"aliases\":[\"py\",\"python3\"]," RUN_SH "}");
    manifest(f, "python-2.7", "{\"language\":\"python\",\"version\":\"2.7.18\",\"aliases\":[\"py\"]," RUN_SH "}");
    manifest(f, "bash-5.2", "{\"language\":\"bash\",\"version\":\"5.2.15\",\"aliases\":[\"sh\"]," RUN_SH "}");
    /* broken and runtime-less manifests are skipped, not fatal */
    manifest(f, "broken", "{\"language\":");
    manifest(f, "ruby-3", "{\"language\":\"ruby\",\"version\":\"3.1.2\",\"run\":[\"/nonexistent/ruby\"],\"runtime\":[]}");
    char empty[PATH_MAX + 16];
    snprintf(empty, sizeof(empty), "%s/no-manifest", f->tmp);
    assert_int_equal(mkdir(empty, 0755), 0);

    assert_int_equal(languages_load(&set, f->tmp, &e), 0);
    assert_int_equal(set.count, 4);

    l = language_find(&set, "python", "*");
    assert_non_null(l);
    assert_string_equal(l->version, "3.11.2");
    l = language_find(&set, "python", "3");
    assert_non_null(l);
    assert_string_equal(l->version, "3.11.2");
    l = language_find(&set, "python", "3.9");
    assert_non_null(l);
    assert_string_equal(l->version, "3.9.18");
    l = language_find(&set, "python", "2.x");
    assert_non_null(l);
    assert_string_equal(l->version, "2.7.18");
    assert_null(language_find(&set, "python", "4"));
    assert_null(language_find(&set, "python", "3.1"));

    /* by alias */
    l = language_find(&set, "py", "*");
    assert_non_null(l);
    assert_string_equal(l->name, "python");
    assert_string_equal(l->version, "3.11.2");
    l = language_find(&set, "py", "3.9.18");
    assert_non_null(l);
    assert_string_equal(l->version, "3.9.18");
    assert_null(language_find(&set, "python3", "3.9")); /* that alias is only on 3.11 */
    l = language_find(&set, "sh", "5");
    assert_non_null(l);
    assert_string_equal(l->name, "bash");

    /* unknown */
    assert_null(language_find(&set, "ruby", "*"));
    assert_null(language_find(&set, "pyth", "*"));
    assert_null(language_find(&set, "", "*"));

    languages_free(&set);
    assert_int_equal(set.count, 0);
    assert_null(set.items);

    /* a missing directory is an error; an empty set finds nothing */
    char nodir[PATH_MAX + 16];
    snprintf(nodir, sizeof(nodir), "%s/absent", f->tmp);
    assert_int_equal(languages_load(&set, nodir, &e), -1);
    assert_non_null(strstr(e.msg, nodir));
    assert_null(language_find(&set, "python", "*"));
}

/* ==== the manifests shipped with the backend ================================ */

/* S26: in a shipped manifest's stages, an option-like name only ever reaches a tool as "./name". */
static void shipped_argv_keeps_names_files(const struct language *l, const char *path)
{
    char n0[] = "--version", n1[] = "@o", a0[] = "-e";
    struct moat_file files[] = {{n0, NULL, 0}, {n1, NULL, 0}};
    char *args[] = {a0};
    const struct language_words words = {args, 1, NULL, 0};
    char **stages[] = {l->compile_argv, l->run_argv};

    for (size_t k = 0; k < 2; k++) {
        if (stages[k] == NULL)
            continue;
        char **argv = language_argv(stages[k], files, 2, &words);
        assert_non_null(argv);
        for (size_t i = 1; argv[i]; i++)
            if (strcmp(argv[i], "--version") == 0 || strcmp(argv[i], "@o") == 0)
                fail_msg("%s: a file name reaches %s bare as argv[%zu]", path, argv[0], i);
        language_argv_free(argv);
    }
}

/* No shipped allow-list takes an option that names a file, a program, a plugin or an output. */
static void shipped_options_refuse_dangerous(const struct language *l, const char *path)
{
    static const char *const dangerous[][2] = {
        {"-o", "/tmp/x"},
        {"-B/tmp", NULL},
        {"-wrapper", "/bin/sh,-c"},
        {"-fplugin=/tmp/p.so", NULL},
        {"@/etc/passwd", NULL},
        {"-specs=/tmp/s", NULL},
        {"--sysroot=/", NULL},
        {"-Wl,-rpath,/tmp", NULL},
        {"-I/etc", NULL},
        {"-include", "/etc/passwd"},
        {"-x", "none"},
        {"-C", "linker=/bin/sh"},
        {"-Clinker=/bin/sh", NULL},
        {"--out-dir", "/tmp"},
        {"-L/tmp", NULL},
        {"-DX=$(id)", NULL},
        {";", NULL},
        {"-O2;rm", NULL},
        {"--help", NULL},
        {"-E", NULL},
    };
    for (size_t i = 0; i < sizeof(dangerous) / sizeof(dangerous[0]); i++) {
        char a[64], b[64], *opts[2] = {a, b};
        size_t n = dangerous[i][1] != NULL ? 2 : 1, bad;
        snprintf(a, sizeof(a), "%s", dangerous[i][0]);
        snprintf(b, sizeof(b), "%s", dangerous[i][1] != NULL ? dangerous[i][1] : "");
        if (moat_options_check(l->option_patterns, l->noption_patterns, opts, n, &bad) == 0)
            fail_msg("%s: the allow-list takes %s %s", path, a, b);
    }
}

static void test_shipped_manifests(void **state)
{
    const char *dir = MOAT_SOURCE_DIR "/backend/languages";
    DIR *d = opendir(dir);
    struct dirent *de;
    size_t n = 0;

    assert_non_null(d);
    while ((de = readdir(d)) != NULL) {
        char path[PATH_MAX];
        struct stat st;
        struct language l;
        struct errbuf e = {""};
        if (de->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "%s/%s/manifest.json", dir, de->d_name);
        if (stat(path, &st) != 0)
            continue;
        if (language_parse(&l, path, &e) != 0)
            fail_msg("%s: %s", path, e.msg);
        assert_non_null(l.run_argv);
        assert_true(l.nro > 0);
        shipped_argv_keeps_names_files(&l, path);
        shipped_options_refuse_dangerous(&l, path);
        language_free(&l);
        n++;
    }
    closedir(d);
    assert_true(n >= 2);

    struct language_set set;
    struct errbuf e = {""};
    assert_int_equal(languages_load(&set, dir, &e), 0);
    assert_int_equal(set.count, n);
    const struct language *py = language_find(&set, "py", "3");
    assert_non_null(py);
    assert_string_equal(py->name, "python");
    const struct language *sh = language_find(&set, "sh", "*");
    assert_non_null(sh);
    assert_string_equal(sh->name, "bash");
    languages_free(&set);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_version_matches),
        cmocka_unit_test_setup_teardown(test_parse_valid, setup, teardown),
        cmocka_unit_test_setup_teardown(test_parse_minimal_and_compiled, setup, teardown),
        cmocka_unit_test_setup_teardown(test_parse_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_parse_missing_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_parse_limits_override, setup, teardown),
        cmocka_unit_test_setup_teardown(test_parse_extension_and_new_limits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_package_version, setup, teardown),
        cmocka_unit_test_setup_teardown(test_find, setup, teardown),
        cmocka_unit_test(test_argv_expansion),
        cmocka_unit_test(test_shipped_manifests),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
