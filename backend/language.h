/*
 * language.h - language manifests: backend/languages/<name>-<version>/
 * manifest.json, discovered once at start.  A language whose runtime is
 * missing is logged and skipped, never half-registered.
 */
#ifndef MOAT_LANGUAGE_H
#define MOAT_LANGUAGE_H

#include <jansson.h>
#include <stddef.h>

#include "box.h"
#include "errbuf.h"
#include "moat_limits.h"

struct language {
    char *name;
    char *version;
    char **aliases;
    size_t naliases;
    char *extension;     /* e.g. ".go": the first file is named main<ext> when its name lacks it */
    char **compile_argv; /* NULL-terminated template, NULL if interpreted */
    char **run_argv;     /* NULL-terminated template */
    struct box_mount *ro;
    size_t nro;
    char **env; /* NULL-terminated KEY=VALUE list */
    /* compiler_options: the allow-list (moat_options.h patterns) of the
     * options a request may add where the compile template says "{options}" */
    char **option_patterns;
    size_t noption_patterns;
    struct stage_limits compile_limits;
    struct stage_limits run_limits;
    struct session_limits session_limits; /* a live session's defaults */
    uint8_t isolation;                    /* enum moat_isolation: the least this language runs in */
};

struct language_set {
    struct language *items;
    size_t count;
};

/* Applies limit keys (the manifest "limits" names, e.g. {"output": 1024})
 * to a run and a compile stage's limits and a session's. */
int limits_apply(json_t *obj, struct stage_limits *run, struct stage_limits *compile, struct session_limits *session,
                 struct errbuf *e);
/* Called at start-up, before languages_load: the server's own limits, on
 * top of the built-in defaults; a manifest's "limits" still win. */
int languages_server_limits(json_t *obj, struct errbuf *e);
/* Loads every manifest below dir; skips (and logs) broken or missing ones. */
int languages_load(struct language_set *set, const char *dir, struct errbuf *e);
/* Parses one manifest file; fills *lang or fails with a reason. */
int language_parse(struct language *lang, const char *path, struct errbuf *e);
void language_free(struct language *lang);
void languages_free(struct language_set *set);

/*
 * A stage's argv from its template: "{file}" becomes "./" and the first
 * file's name, "{files}" every file's name so (one element each), "{args}"
 * the arguments as they are (one element each), "{options}" the compiler
 * options (one element each; job.c has checked them against the
 * language's allow-list).  The "./" keeps a name from ever reading as an
 * option ("-o", "@file", "inspect" to node) to the tool that gets it.
 * Every element is the caller's: free with language_argv_free.  NULL when
 * out of memory.
 */
struct language_words {
    char *const *args; /* "{args}" */
    size_t nargs;
    char *const *options; /* "{options}" */
    size_t noptions;
};
char **language_argv(char *const *tmpl, const struct moat_file *files, size_t nfiles, const struct language_words *words);
void language_argv_free(char **argv);

/* Finds a language by name or alias and a version selector ("*", "3",
 * "3.11", "3.11.2", "3.x", or a semver range as Piston takes them: "^3.10",
 * ">=3 <4", "~3.11", "3 || 4"; moat_semver.h); the highest matching version
 * wins. */
const struct language *language_find(const struct language_set *set, const char *name, const char *selector);
int version_matches(const char *version, const char *selector);
/* Upstream version of an installed Debian package; 0 or -1. */
int package_version(const char *status_path, const char *package, char *out, size_t size);

#endif
