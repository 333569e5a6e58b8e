/*
 * moat_semver.h - which installed version a request's version selector
 * picks, written once for the backend (language_find) and the gateway
 * (which resolves a range before policy judges it), so both pick the same.
 *
 * A selector is either plain or a range:
 *
 *   - plain: letters, digits and ". * + - _" only ("*", "3", "3.11",
 *     "3.x", "3.11.2"): dotted components compared whole, a component "x",
 *     "X" or "*" and everything after it a wildcard, and a prefix selects
 *     every version below it ("3.11" selects 3.11.2, not 3.1 or 3.110).
 *     This is moat's rule from the start, and what policy's version check
 *     reads (policy.h).
 *   - a range, as Piston matches it (node-semver's satisfies()): comparator
 *     sets joined by "||", each a space-separated list of comparators that
 *     must all hold: "=V", "<V", "<=V", ">V", ">=V", "~V" (patch updates; "~3"
 *     is 3.x), "^V" (updates that keep the first non-zero component), a bare
 *     partial version ("3.11" is >=3.11.0 <3.12.0), and hyphen ranges
 *     "A - B" (inclusive; a partial B covers its whole span).  A partial V
 *     may end in "x", "X" or "*".  Examples: "^3.10", ">=3", "~3.11",
 *     ">=3.9 <3.12", "3 || 4", "1.2 - 3".  Versions compare as three whole
 *     numbers (major.minor.patch, missing ones 0); a version that is not
 *     such numbers is never in a range; pre-release tags are not read.
 *
 * Of the versions a selector selects, the highest wins (moat_version_cmp).
 */
#ifndef MOAT_SEMVER_H
#define MOAT_SEMVER_H

/* 1 for a plain selector (see above), else 0. */
int moat_selector_is_plain(const char *selector);

/* 1 when the selector is plain or a range that parses; 0 otherwise. */
int moat_selector_valid(const char *selector);

/* 1 when the selector (plain or range) selects version, else 0 (also for a
 * range that does not parse). */
int moat_version_selects(const char *version, const char *selector);

/* Dotted versions compared numerically, component by component: <0, 0, >0. */
int moat_version_cmp(const char *a, const char *b);

#endif /* MOAT_SEMVER_H */
