/*
 * language.c - reads language manifests (JSON, via jansson).
 *
 * A manifest names the language, its version and aliases, the argv
 * templates of its compile and run stages, the host paths it needs
 * read-only inside the box, its environment, and optional limit overrides.
 * Templates may use "{file}" (the first file's name), "{files}" (every file
 * name, one argv element each), "{args}" (the request's arguments, one
 * element each) and, in compile only, "{options}" (the request's compiler
 * options, one element each, each taken by a pattern of the manifest's
 * "compiler_options" allow-list: moat_options.h; job.c checks them).
 *
 * No user string may be read as an option by a tool (S26).  Three rules
 * hold that for every manifest, not just the shipped ones: job.c refuses
 * file names that begin with '-' or '@'; language_argv() passes every file
 * as "./name", which no tool reads as an option, an @-file or a subcommand;
 * and manifest_placeholders() only accepts "{args}" last in the run
 * template, right after "{file}" (every word after a script is the
 * script's) or right after a program the compile stage built in /box, so
 * arguments reach the program and never the interpreter or compiler.
 * Manifests also put "--" before the files where the tool knows it.
 * Compiler options are words the allow-list names (never a path, an
 * @-file, a plugin or an output name), placed by the manifest before the
 * files, one argv element each, never through a shell.
 *
 * language_parse() reads a manifest in named steps (manifest_fields_known,
 * _identity, _extension, _aliases, _stages, _placeholders, _runtime, _env,
 * then the limits), each failing with the manifest's path and the field; a
 * manifest is taken whole or skipped (languages_load logs why), never
 * half-registered.
 */
#include "language.h"

#include <dirent.h>
#include <stdio.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "moat_options.h"
#include "moat_semver.h"

#define DPKG_STATUS "/var/lib/dpkg/status"

static void free_strv(char **v)
{
    for (size_t i = 0; v && v[i]; i++)
        free(v[i]);
    free(v);
}

void language_free(struct language *lang)
{
    free(lang->name);
    free(lang->version);
    free(lang->extension);
    for (size_t i = 0; i < lang->naliases; i++)
        free(lang->aliases[i]);
    free(lang->aliases);
    free_strv(lang->compile_argv);
    free_strv(lang->run_argv);
    for (size_t i = 0; i < lang->nro; i++)
        free(lang->ro[i].path);
    free(lang->ro);
    free_strv(lang->env);
    free_strv(lang->option_patterns);
    memset(lang, 0, sizeof(*lang));
}

void languages_free(struct language_set *set)
{
    for (size_t i = 0; i < set->count; i++)
        language_free(&set->items[i]);
    free(set->items);
    memset(set, 0, sizeof(*set));
}

static int valid_token(const char *s)
{
    if (s[0] == '\0' || strlen(s) > 64)
        return 0;
    for (const char *p = s; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || strchr("+-._#", *p)))
            return 0;
    return 1;
}

/* A JSON array of strings as a NULL-terminated vector. */
static int strv_from_json(json_t *arr, const char *what, char ***out, size_t *count, struct errbuf *e)
{
    if (!json_is_array(arr))
        return errf(e, "%s must be an array of strings", what);
    size_t n = json_array_size(arr);
    char **v = calloc(n + 1, sizeof(char *));
    if (v == NULL)
        return errf(e, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *it = json_array_get(arr, i);
        if (!json_is_string(it) || (v[i] = strdup(json_string_value(it))) == NULL) {
            free_strv(v);
            return errf(e, "%s[%zu] must be a string", what, i);
        }
    }
    *out = v;
    if (count)
        *count = n;
    return 0;
}

static int argv_template(json_t *arr, const char *what, char ***out, struct errbuf *e)
{
    size_t n;
    if (strv_from_json(arr, what, out, &n, e) != 0)
        return -1;
    if (n == 0 || (*out)[0][0] != '/')
        return errf(e, "%s[0] must be an absolute path", what);
    /* a program the compile stage builds in /box cannot be checked now */
    if (strncmp((*out)[0], "/box/", 5) != 0 && access((*out)[0], X_OK) != 0)
        return errf(e, "runtime %s is not installed", (*out)[0]);
    return 0;
}

static int limit_override(json_t *obj, const char *key, uint64_t *value, struct errbuf *e)
{
    json_t *v = json_object_get(obj, key);
    if (v == NULL)
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) <= 0)
        return errf(e, "limits.%s must be a positive integer", key);
    *value = (uint64_t)json_integer_value(v);
    return 0;
}

int limits_apply(json_t *obj, struct stage_limits *r, struct stage_limits *c, struct session_limits *ss, struct errbuf *e)
{
    static const char *const known[] = {
        "run_timeout",       "run_cpu_time",     "run_memory",           "run_processes", "compile_timeout",
        "compile_cpu_time",  "compile_memory",   "compile_processes",    "output",        "file_size",
        "compile_file_size", "run_idle_timeout", "compile_idle_timeout", "session_wall",  "session_idle",
        "session_cpu",       "session_stdin",    "session_output",       "stack"};
    const char *key;
    json_t *v;
    uint64_t pids;

    if (obj == NULL)
        return 0;
    if (!json_is_object(obj))
        return errf(e, "limits must be an object");
    json_object_foreach(obj, key, v)
    {
        int ok = 0;
        for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
            ok |= strcmp(key, known[i]) == 0;
        if (!ok)
            return errf(e, "unknown limit \"%s\"", key);
    }
    if (limit_override(obj, "run_timeout", &r->wall_ms, e) || limit_override(obj, "run_cpu_time", &r->cpu_ms, e) ||
        limit_override(obj, "run_memory", &r->memory_bytes, e) || limit_override(obj, "compile_timeout", &c->wall_ms, e) ||
        limit_override(obj, "compile_cpu_time", &c->cpu_ms, e) || limit_override(obj, "compile_memory", &c->memory_bytes, e) ||
        limit_override(obj, "run_idle_timeout", &r->idle_ms, e) || limit_override(obj, "compile_idle_timeout", &c->idle_ms, e))
        return -1;
    /* a live session's clocks and caps (session.c) */
    if (limit_override(obj, "session_wall", &ss->wall_ms, e) || limit_override(obj, "session_idle", &ss->idle_ms, e) ||
        limit_override(obj, "session_cpu", &ss->cpu_ms, e) || limit_override(obj, "session_stdin", &ss->stdin_bytes, e) ||
        limit_override(obj, "session_output", &ss->output_bytes, e))
        return -1;
    /* output and file_size apply to both stages; compile_file_size after */
    if (limit_override(obj, "output", &r->output_cap, e) || limit_override(obj, "output", &c->output_cap, e) ||
        limit_override(obj, "file_size", &r->fsize_bytes, e) || limit_override(obj, "file_size", &c->fsize_bytes, e) ||
        limit_override(obj, "compile_file_size", &c->fsize_bytes, e) || limit_override(obj, "stack", &r->stack_bytes, e) ||
        limit_override(obj, "stack", &c->stack_bytes, e))
        return -1;
    pids = r->pids;
    if (limit_override(obj, "run_processes", &pids, e) != 0)
        return -1;
    r->pids = (uint32_t)(pids > 4096 ? 4096 : pids);
    pids = c->pids;
    if (limit_override(obj, "compile_processes", &pids, e) != 0)
        return -1;
    c->pids = (uint32_t)(pids > 4096 ? 4096 : pids);
    return 0;
}

/* The server's limits, before a manifest's own overrides. */
static struct stage_limits server_run = {.wall_ms = DEFAULT_RUN_WALL_MS,
                                         .cpu_ms = DEFAULT_RUN_CPU_MS,
                                         .idle_ms = 0,
                                         .memory_bytes = DEFAULT_RUN_MEMORY,
                                         .pids = DEFAULT_RUN_PIDS,
                                         .output_cap = DEFAULT_OUTPUT_CAP,
                                         .fsize_bytes = DEFAULT_FSIZE,
                                         .stack_bytes = DEFAULT_STACK};
static struct stage_limits server_compile = {.wall_ms = DEFAULT_COMPILE_WALL_MS,
                                             .cpu_ms = DEFAULT_COMPILE_CPU_MS,
                                             .idle_ms = 0,
                                             .memory_bytes = DEFAULT_COMPILE_MEMORY,
                                             .pids = DEFAULT_COMPILE_PIDS,
                                             .output_cap = DEFAULT_OUTPUT_CAP,
                                             .fsize_bytes = DEFAULT_FSIZE,
                                             .stack_bytes = DEFAULT_STACK};

static struct session_limits server_session = {.wall_ms = DEFAULT_SESSION_WALL_MS,
                                               .idle_ms = DEFAULT_SESSION_IDLE_MS,
                                               .cpu_ms = DEFAULT_SESSION_CPU_MS,
                                               .stdin_bytes = DEFAULT_SESSION_STDIN_BYTES,
                                               .output_bytes = DEFAULT_SESSION_OUTPUT_BYTES};

int languages_server_limits(json_t *obj, struct errbuf *e)
{
    struct stage_limits r = server_run, c = server_compile;
    struct session_limits ss = server_session;
    if (limits_apply(obj, &r, &c, &ss, e) != 0)
        return -1;
    server_run = r;
    server_compile = c;
    server_session = ss;
    return 0;
}

static void default_limits(struct language *lang)
{
    lang->run_limits = server_run;
    lang->compile_limits = server_compile;
    lang->session_limits = server_session;
}

/* ---- one manifest, field by field ------------------------------------------ */

/* Every top-level field must be one this code reads: a typo is an error, not a default. */
static int manifest_fields_known(json_t *root, const char *path, struct errbuf *e)
{
    static const char *const known[] = {"language", "version", "version_package", "aliases",   "compile",          "run",
                                        "runtime",  "env",     "limits",          "extension", "compiler_options", "isolation"};
    const char *key;
    json_t *v;

    if (!json_is_object(root))
        return errf(e, "%s: not a JSON object", path);
    json_object_foreach(root, key, v)
    {
        int ok = 0;
        for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
            ok |= strcmp(key, known[i]) == 0;
        if (!ok)
            return errf(e, "%s: unknown field \"%s\"", path, key);
    }
    return 0;
}

/* language and version; an installed version_package's version wins over the manifest's. */
static int manifest_identity(struct language *lang, json_t *root, const char *path, struct errbuf *e)
{
    json_t *v = json_object_get(root, "language");

    if (!json_is_string(v) || !valid_token(json_string_value(v)))
        return errf(e, "%s: language must be a short name", path);
    lang->name = strdup(json_string_value(v));
    v = json_object_get(root, "version");
    if (!json_is_string(v) || !valid_token(json_string_value(v)))
        return errf(e, "%s: version must be a version string", path);
    lang->version = strdup(json_string_value(v));
    if ((v = json_object_get(root, "version_package")) != NULL) {
        char pv[64];
        if (!json_is_string(v))
            return errf(e, "%s: version_package must be a package name", path);
        if (package_version(DPKG_STATUS, json_string_value(v), pv, sizeof(pv)) == 0 && valid_token(pv)) {
            free(lang->version);
            lang->version = strdup(pv);
        }
    }
    if (lang->name == NULL || lang->version == NULL)
        return errf(e, "out of memory");
    return 0;
}

/* extension (optional): ".go", one dot and a token. */
static int manifest_extension(struct language *lang, json_t *root, const char *path, struct errbuf *e)
{
    json_t *v = json_object_get(root, "extension");
    const char *ext;

    if (v == NULL)
        return 0;
    ext = json_is_string(v) ? json_string_value(v) : "";
    if (ext[0] != '.' || !valid_token(ext + 1) || strchr(ext + 1, '.') != NULL)
        return errf(e, "%s: extension must look like \".go\"", path);
    if ((lang->extension = strdup(ext)) == NULL)
        return errf(e, "out of memory");
    return 0;
}

/* aliases (optional): at most MOAT_MAX_ALIASES strings. */
static int manifest_aliases(struct language *lang, json_t *root, const char *path, struct errbuf *e)
{
    json_t *v = json_object_get(root, "aliases");

    if (v == NULL)
        return 0;
    if (strv_from_json(v, "aliases", &lang->aliases, &lang->naliases, e) != 0)
        return -1;
    if (lang->naliases > MOAT_MAX_ALIASES)
        return errf(e, "%s: too many aliases", path);
    return 0;
}

/* compile (optional, may be null) and run: argv templates whose programs are installed. */
static int manifest_stages(struct language *lang, json_t *root, struct errbuf *e)
{
    json_t *v = json_object_get(root, "compile");

    if (v != NULL && !json_is_null(v) && argv_template(v, "compile", &lang->compile_argv, e) != 0)
        return -1;
    return argv_template(json_object_get(root, "run"), "run", &lang->run_argv, e);
}

/* "{args}" in a template: nowhere in compile; in run at most once and last, right after
 * "{file}" or after argv[0] when that is the program the compile stage built in /box.
 * "{options}": in compile only, at most once, never first. */
static int manifest_placeholders(struct language *lang, const char *path, struct errbuf *e)
{
    char **run = lang->run_argv;
    size_t n = 0, at = 0, count = 0, options = 0;

    for (size_t i = 0; lang->compile_argv && lang->compile_argv[i]; i++) {
        if (strcmp(lang->compile_argv[i], "{args}") == 0)
            return errf(e, "%s: compile must not use {args}: arguments are the program's, not the compiler's", path);
        if (strcmp(lang->compile_argv[i], "{options}") == 0 && (i == 0 || ++options > 1))
            return errf(e, "%s: compile may use {options} once, after the compiler", path);
    }
    for (size_t i = 0; run[i]; i++)
        if (strcmp(run[i], "{options}") == 0)
            return errf(e, "%s: run must not use {options}: compiler options are the compiler's", path);
    for (; run[n]; n++)
        if (strcmp(run[n], "{args}") == 0) {
            at = n;
            count++;
        }
    if (count == 0)
        return 0;
    if (count > 1 || at != n - 1)
        return errf(e, "%s: run may use {args} once, as its last element", path);
    if (!(strcmp(run[at - 1], "{file}") == 0 || (at == 1 && strncmp(run[0], "/box/", 5) == 0)))
        return errf(e, "%s: run's {args} must follow {file} or a program built in /box, so no argument reaches the tool", path);
    return 0;
}

/* runtime: the host paths mounted read-only in the box; absolute, not "/", without "..". */
static int manifest_runtime(struct language *lang, json_t *root, const char *path, struct errbuf *e)
{
    char **ro = NULL;
    size_t nro = 0;

    if (strv_from_json(json_object_get(root, "runtime"), "runtime", &ro, &nro, e) != 0)
        return -1;
    lang->ro = calloc(nro ? nro : 1, sizeof(*lang->ro));
    if (lang->ro == NULL) {
        free_strv(ro);
        return errf(e, "out of memory");
    }
    for (size_t i = 0; i < nro; i++) {
        lang->ro[i].path = ro[i];
        if (ro[i][0] != '/' || strstr(ro[i], "..") != NULL || strcmp(ro[i], "/") == 0) {
            for (size_t j = i + 1; j < nro; j++)
                free(ro[j]);
            free(ro);
            lang->nro = i + 1; /* language_free() frees ro[0..i], now lang's */
            return errf(e, "%s: runtime path \"%s\" must be absolute, not / and without ..", path, lang->ro[i].path);
        }
    }
    lang->nro = nro;
    free(ro);
    return 0;
}

/* compiler_options (optional): the allow-list, well-formed patterns (moat_options.h), and only
 * for a compile template that places them ("{options}"). */
static int manifest_compiler_options(struct language *lang, json_t *root, const char *path, struct errbuf *e)
{
    json_t *v = json_object_get(root, "compiler_options");
    int placed = 0;

    if (v == NULL)
        return 0;
    if (strv_from_json(v, "compiler_options", &lang->option_patterns, &lang->noption_patterns, e) != 0)
        return -1;
    if (lang->noption_patterns > MOAT_MAX_OPTION_PATTERNS)
        return errf(e, "%s: compiler_options holds more than %d patterns", path, MOAT_MAX_OPTION_PATTERNS);
    for (size_t i = 0; i < lang->noption_patterns; i++)
        if (!moat_option_pattern_valid(lang->option_patterns[i]))
            return errf(e, "%s: compiler_options[%zu] \"%.64s\" is not an option pattern (moat_options.h)", path, i,
                        lang->option_patterns[i]);
    for (size_t i = 0; lang->compile_argv && lang->compile_argv[i]; i++)
        placed |= strcmp(lang->compile_argv[i], "{options}") == 0;
    if (lang->noption_patterns > 0 && !placed)
        return errf(e, "%s: compiler_options needs a compile template with {options}", path);
    return 0;
}

/* env (optional): KEY=VALUE strings; an empty list when omitted. */
static int manifest_env(struct language *lang, json_t *root, const char *path, struct errbuf *e)
{
    json_t *v = json_object_get(root, "env");

    if (v == NULL) {
        if ((lang->env = calloc(1, sizeof(char *))) == NULL)
            return errf(e, "out of memory");
        return 0;
    }
    if (strv_from_json(v, "env", &lang->env, NULL, e) != 0)
        return -1;
    for (size_t i = 0; lang->env[i]; i++)
        if (strchr(lang->env[i], '=') == NULL || lang->env[i][0] == '=')
            return errf(e, "%s: env entry \"%s\" is not KEY=VALUE", path, lang->env[i]);
    return 0;
}

/* isolation (optional): "namespaces" (the default) or "gvisor": this
 * language always runs under gVisor, whatever the tenant's. */
static int manifest_isolation(struct language *lang, json_t *root, const char *path, struct errbuf *e)
{
    json_t *v = json_object_get(root, "isolation");
    int iso;

    lang->isolation = MOAT_ISOLATION_NAMESPACES;
    if (v == NULL)
        return 0;
    if (!json_is_string(v) || (iso = moat_isolation_parse(json_string_value(v))) < 0)
        return errf(e, "%s: isolation must be \"namespaces\" or \"gvisor\"", path);
    lang->isolation = (uint8_t)iso;
    return 0;
}

int language_parse(struct language *lang, const char *path, struct errbuf *e)
{
    json_error_t jerr;
    json_t *root;

    memset(lang, 0, sizeof(*lang));
    default_limits(lang);
    root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL)
        return errf(e, "%s:%d: %s", path, jerr.line, jerr.text);
    if (manifest_fields_known(root, path, e) != 0 || manifest_identity(lang, root, path, e) != 0 ||
        manifest_extension(lang, root, path, e) != 0 || manifest_aliases(lang, root, path, e) != 0 ||
        manifest_stages(lang, root, e) != 0 || manifest_placeholders(lang, path, e) != 0 ||
        manifest_runtime(lang, root, path, e) != 0 || manifest_env(lang, root, path, e) != 0 ||
        manifest_compiler_options(lang, root, path, e) != 0 || manifest_isolation(lang, root, path, e) != 0 ||
        limits_apply(json_object_get(root, "limits"), &lang->run_limits, &lang->compile_limits, &lang->session_limits, e) != 0) {
        json_decref(root);
        language_free(lang);
        return -1;
    }
    json_decref(root);
    return 0;
}

/* ---- a stage's argv ---------------------------------------------------------- */

/* "./" and a file name: never an option, an @-file or a subcommand to the tool. */
static char *file_arg(const char *name)
{
    size_t len = strlen(name);
    char *p = malloc(len + 3);

    if (p == NULL)
        return NULL;
    memcpy(p, "./", 2);
    memcpy(p + 2, name, len + 1);
    return p;
}

void language_argv_free(char **argv)
{
    free_strv(argv);
}

/* A list of words (arguments, options) into argv from k on; 0, or -1 out of memory. */
static int copy_words(char **argv, size_t *k, char *const *words, size_t n)
{
    for (size_t j = 0; j < n; j++)
        if ((argv[(*k)++] = strdup(words[j])) == NULL)
            return -1;
    return 0;
}

char **language_argv(char *const *tmpl, const struct moat_file *files, size_t nfiles, const struct language_words *words)
{
    size_t n = 0, k = 0;
    char **argv;

    for (size_t i = 0; tmpl[i]; i++)
        n += strcmp(tmpl[i], "{files}") == 0     ? nfiles
             : strcmp(tmpl[i], "{args}") == 0    ? words->nargs
             : strcmp(tmpl[i], "{options}") == 0 ? words->noptions
                                                 : 1;
    if ((argv = calloc(n + 1, sizeof(char *))) == NULL)
        return NULL;
    for (size_t i = 0; tmpl[i]; i++) {
        if (strcmp(tmpl[i], "{files}") == 0) {
            for (size_t j = 0; j < nfiles; j++)
                if ((argv[k++] = file_arg(files[j].name)) == NULL)
                    goto oom;
        } else if (strcmp(tmpl[i], "{args}") == 0) {
            if (copy_words(argv, &k, words->args, words->nargs) != 0)
                goto oom;
        } else if (strcmp(tmpl[i], "{options}") == 0) {
            if (copy_words(argv, &k, words->options, words->noptions) != 0)
                goto oom;
        } else if (strcmp(tmpl[i], "{file}") == 0) {
            if (nfiles == 0 || (argv[k++] = file_arg(files[0].name)) == NULL)
                goto oom;
        } else if ((argv[k++] = strdup(tmpl[i])) == NULL) {
            goto oom;
        }
    }
    return argv;
oom:
    free_strv(argv);
    return NULL;
}

/*
 * The upstream version of an installed Debian package, from dpkg's status
 * file: "1:3.11.2-6+deb12u6" -> "3.11.2" (epoch, Debian revision and
 * +/~ suffixes dropped).  Reading a file, not running the runtime, keeps
 * untrusted-adjacent binaries out of the privileged start-up.
 */
int package_version(const char *status_path, const char *package, char *out, size_t size)
{
    FILE *f = fopen(status_path, "re");
    char *line = NULL, version[256] = "";
    size_t cap = 0;
    int in_pkg = 0, installed = 0, found = 0;

    if (f == NULL)
        return -1;
    while (!found && getline(&line, &cap, f) >= 0) {
        line[strcspn(line, "\n")] = '\0';
        if (line[0] == '\0') { /* end of a paragraph */
            found = in_pkg && installed && version[0];
            if (!found) {
                in_pkg = installed = 0;
                version[0] = '\0';
            }
        } else if (strncmp(line, "Package: ", 9) == 0) {
            in_pkg = strcmp(line + 9, package) == 0;
        } else if (in_pkg && strncmp(line, "Status: ", 8) == 0) {
            installed = strstr(line, " installed") != NULL && strstr(line, "not-installed") == NULL;
        } else if (in_pkg && strncmp(line, "Version: ", 9) == 0) {
            snprintf(version, sizeof(version), "%.200s", line + 9);
        }
    }
    if (!found)
        found = in_pkg && installed && version[0];
    free(line);
    fclose(f);
    if (!found)
        return -1;
    const char *v = strchr(version, ':') ? strchr(version, ':') + 1 : version;
    size_t n = strlen(v);
    const char *dash = strrchr(v, '-');
    if (dash)
        n = (size_t)(dash - v);
    size_t cut = strcspn(v, "+~");
    if (cut < n)
        n = cut;
    if (n == 0 || n >= size)
        return -1;
    memcpy(out, v, n);
    out[n] = '\0';
    return 0;
}

static int cmp_lang(const void *a, const void *b)
{
    const struct language *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : strcmp(x->version, y->version);
}

int languages_load(struct language_set *set, const char *dir, struct errbuf *e)
{
    DIR *d = opendir(dir);
    struct dirent *de;

    memset(set, 0, sizeof(*set));
    if (d == NULL)
        return errf_errno(e, "open languages dir %s", dir);
    while ((de = readdir(d)) != NULL) {
        char path[4096];
        struct stat st;
        struct language lang;
        struct errbuf le;
        if (de->d_name[0] == '.')
            continue;
        if ((size_t)snprintf(path, sizeof(path), "%s/%s/manifest.json", dir, de->d_name) >= sizeof(path) || stat(path, &st) != 0)
            continue;
        if (language_parse(&lang, path, &le) != 0) {
            log_warnx("%s: skipping %s: %s", __func__, de->d_name, le.msg);
            continue;
        }
        struct language *items = realloc(set->items, (set->count + 1) * sizeof(*items));
        if (items == NULL) {
            language_free(&lang);
            closedir(d);
            languages_free(set);
            return errf(e, "out of memory");
        }
        set->items = items;
        set->items[set->count++] = lang;
    }
    closedir(d);
    if (set->count)
        qsort(set->items, set->count, sizeof(*set->items), cmp_lang);
    return 0;
}

/* The selector rule (plain or a semver range) is moat_semver.c's, shared with the gateway. */
int version_matches(const char *version, const char *selector)
{
    return moat_version_selects(version, selector);
}

const struct language *language_find(const struct language_set *set, const char *name, const char *selector)
{
    const struct language *best = NULL;
    for (size_t i = 0; i < set->count; i++) {
        const struct language *l = &set->items[i];
        int named = strcmp(l->name, name) == 0;
        for (size_t j = 0; !named && j < l->naliases; j++)
            named = strcmp(l->aliases[j], name) == 0;
        if (named && version_matches(l->version, selector) && (best == NULL || moat_version_cmp(l->version, best->version) > 0))
            best = l;
    }
    return best;
}
