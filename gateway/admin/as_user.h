/*
 * as_user.h - run a question about the configuration in a child that is
 * the gateway's user (as_user.c).
 */
#ifndef GW_AS_USER_H
#define GW_AS_USER_H

#include <stddef.h>
#include <sys/types.h>

#include <jansson.h>

/* In the child, after the drop: the answer (a new reference, any JSON),
 * or NULL with err. */
typedef json_t *(*gw_as_user_fn)(void *arg, char *err, size_t errlen);

/* fn(arg) in a child that closed every descriptor past stderr and became
 * uid:gid (never 0).  fn's answer (the caller's to json_decref), or NULL
 * with err: fn's own, or why the child gave none (killed after
 * GW_CONTROL_RELOAD_MS, an answer too large or malformed, an exit). */
json_t *gw_as_user(uid_t uid, gid_t gid, gw_as_user_fn fn, void *arg, char *err, size_t errlen);

#endif /* GW_AS_USER_H */
