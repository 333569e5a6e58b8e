/*
 * privdrop.h - become the unprivileged gateway user, once, for good.
 */
#ifndef GW_PRIVDROP_H
#define GW_PRIVDROP_H

#include <stddef.h>
#include <sys/types.h>

/*
 * If running as root: clear supplementary groups, setresgid and setresuid to
 * user, and prove root cannot be regained.  Not root: nothing to do.  0, or
 * -1 with err set; the caller must treat -1 as fatal.  Call before starting
 * any thread.
 */
int gw_drop_privileges(const char *user, char *err, size_t errlen);

/* The same to uid and gid, neither 0 (root or not: not root, the calls
 * fail).  0, or -1 with err set. */
int gw_drop_to(uid_t uid, gid_t gid, char *err, size_t errlen);

/* 0 if user exists and is not uid 0 (for -n), else -1 with err set. */
int gw_check_user(const char *user, char *err, size_t errlen);

#endif /* GW_PRIVDROP_H */
