/*
 * moat_options.h - compiler options against a language's allow-list, one
 * rule for both programs: the backend checks every request (it is the
 * authority), the gateway checks first for a clearer answer (Judge0's 422).
 *
 * An allow-list is the "compiler_options" array of a language's manifest
 * (backend/languages/<name>/manifest.json).  Each pattern is one option of
 * one or more words separated by single spaces ("-O2", "-C opt-level=3");
 * the first word starts with '-'.  A word is matched character by
 * character, except for two placeholders:
 *
 *   {ident}   a C identifier: [A-Za-z_][A-Za-z0-9_]*, 1-64 characters
 *   {value}   1-64 characters of [A-Za-z0-9_.+-]
 *
 * so "-D{ident}" and "-D{ident}={value}" accept "-DX" and "-DX=5" and
 * nothing with a '/', a quote, a space or a shell character.  A request's
 * options are matched from the first: at each position the first pattern
 * whose words all match the next options takes them; an option no pattern
 * takes is refused.  A multi-word pattern's words must come together, so a
 * word that takes an argument ("-C") can never take one of the template's
 * own words.  No pattern means no option is accepted.
 */
#ifndef MOAT_OPTIONS_H
#define MOAT_OPTIONS_H

#include <stddef.h>

#define MOAT_OPTION_PLACEHOLDER_MAX 64 /* characters one placeholder matches */

/* 1 if pattern is well-formed (the rules above, at most
 * MOAT_MAX_COMPILER_OPTION_LEN bytes), else 0. */
int moat_option_pattern_valid(const char *pattern);

/* 0 when every option is taken by some pattern; -1 with *bad the index of
 * the first option none takes. */
int moat_options_check(char *const *patterns, size_t npatterns, char *const *opts, size_t nopts, size_t *bad);

#endif /* MOAT_OPTIONS_H */
