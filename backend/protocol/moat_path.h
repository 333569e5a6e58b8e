/*
 * moat_path.h - the rule for a file's name in a request, written once for
 * the gateway (which refuses with a 400) and the backend (which checks again,
 * trusting nothing the socket brings), so the two can never disagree.
 *
 * A name is a relative path of at most MOAT_MAX_PATH_DEPTH components
 * ("main.py", "pkg/mod.py", "src/util.h"), at most MOAT_MAX_NAME_LEN bytes
 * in all, without control characters; no component is empty ("a//b", "/x",
 * "x/"), "." or "..", and none begins with '-' or '@' (S26: a tool could
 * read it as an option or an option file).  The box's init then creates the
 * directories inside /box itself, one component at a time relative to the
 * directory it opened last, never following a link (box_init.c).  Of two
 * names, one must not be a directory of the other ("pkg" and "pkg/mod.py"):
 * a path cannot be a file and a directory at once.
 */
#ifndef MOAT_PATH_H
#define MOAT_PATH_H

#include <stddef.h>

#define MOAT_MAX_PATH_DEPTH 8 /* components in a file's name, the file included */

/* What is wrong with a file name; MOAT_PATH_OK when nothing is. */
enum moat_path_problem {
    MOAT_PATH_OK = 0,
    MOAT_PATH_LENGTH,      /* empty, or longer than MOAT_MAX_NAME_LEN */
    MOAT_PATH_CONTROL,     /* a control character (NUL, newline, DEL, ...) */
    MOAT_PATH_ABSOLUTE,    /* begins with '/' */
    MOAT_PATH_EMPTY_PART,  /* "a//b" or a trailing '/' */
    MOAT_PATH_DOT_PART,    /* a "." or ".." component */
    MOAT_PATH_DEPTH,       /* more than MOAT_MAX_PATH_DEPTH components */
    MOAT_PATH_OPTION_LIKE, /* a component begins with '-' or '@' */
};

/* Check name[0..len) (it may hold NUL bytes, which are refused). */
enum moat_path_problem moat_path_check(const char *name, size_t len);

/* A client-facing phrase for a problem, to follow the field's name:
 * "must not have a '.' or '..' component". */
const char *moat_path_problem_text(enum moat_path_problem p);

/* 1 when a (a checked name) is a directory of b, as "pkg" is of "pkg/mod.py". */
int moat_path_is_dir_of(const char *a, const char *b);

#endif /* MOAT_PATH_H */
