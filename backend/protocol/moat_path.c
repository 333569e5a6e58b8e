/*
 * moat_path.c - a request's file names (see moat_path.h).  Pure code: no
 * allocation, no I/O, so the box's init could use it too.
 */
#include "moat_path.h"

#include <string.h>

#include "moat_proto.h"

_Static_assert(MOAT_MAX_NAME_LEN == 255 && MOAT_MAX_PATH_DEPTH == 8, "moat_path_problem_text() states both caps");

static int is_control(unsigned char c)
{
    return c < 0x20 || c == 0x7f;
}

/* One component s[0..n): not empty, not "." or "..", not option-like. */
static enum moat_path_problem check_part(const char *s, size_t n)
{
    if (n == 0)
        return MOAT_PATH_EMPTY_PART;
    if ((n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
        return MOAT_PATH_DOT_PART;
    if (s[0] == '-' || s[0] == '@')
        return MOAT_PATH_OPTION_LIKE;
    return MOAT_PATH_OK;
}

enum moat_path_problem moat_path_check(const char *name, size_t len)
{
    enum moat_path_problem p;
    size_t start = 0, depth = 0;

    if (len == 0 || len > MOAT_MAX_NAME_LEN)
        return MOAT_PATH_LENGTH;
    for (size_t i = 0; i < len; i++)
        if (is_control((unsigned char)name[i]))
            return MOAT_PATH_CONTROL;
    if (name[0] == '/')
        return MOAT_PATH_ABSOLUTE;
    for (size_t i = 0; i <= len; i++) {
        if (i < len && name[i] != '/')
            continue;
        if ((p = check_part(name + start, i - start)) != MOAT_PATH_OK)
            return p;
        if (++depth > MOAT_MAX_PATH_DEPTH)
            return MOAT_PATH_DEPTH;
        start = i + 1;
    }
    return MOAT_PATH_OK;
}

const char *moat_path_problem_text(enum moat_path_problem p)
{
    switch (p) {
    case MOAT_PATH_OK:
        return "is a valid file name";
    case MOAT_PATH_LENGTH:
        return "must be 1 to 255 bytes";
    case MOAT_PATH_CONTROL:
        return "must not hold control characters";
    case MOAT_PATH_ABSOLUTE:
        return "must be a relative path (no leading '/')";
    case MOAT_PATH_EMPTY_PART:
        return "must not have an empty component ('//' or a trailing '/')";
    case MOAT_PATH_DOT_PART:
        return "must not have a '.' or '..' component";
    case MOAT_PATH_DEPTH:
        return "must not have more than 8 components";
    case MOAT_PATH_OPTION_LIKE:
        return "must not begin with '-' or '@', nor may any of its directories";
    }
    return "is not a valid file name";
}

int moat_path_is_dir_of(const char *a, const char *b)
{
    size_t n = strlen(a);
    return strncmp(a, b, n) == 0 && b[n] == '/';
}
