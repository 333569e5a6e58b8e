/*
 * privdrop.c - the privilege drop, written once (relayd's proc_run()).
 */
#include "privdrop.h"

#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int lookup(const char *user, uid_t *uid, gid_t *gid, char *err, size_t errlen)
{
    struct passwd *pw;

    errno = 0;
    if ((pw = getpwnam(user)) == NULL) {
        snprintf(err, errlen, "user %s: %s", user, errno != 0 ? strerror(errno) : "no such user");
        return -1;
    }
    if (pw->pw_uid == 0 || pw->pw_gid == 0) {
        snprintf(err, errlen, "user %s: must not have uid or gid 0", user);
        return -1;
    }
    *uid = pw->pw_uid;
    *gid = pw->pw_gid;
    return 0;
}

int gw_check_user(const char *user, char *err, size_t errlen)
{
    uid_t uid;
    gid_t gid;

    return lookup(user, &uid, &gid, err, errlen);
}

int gw_drop_privileges(const char *user, char *err, size_t errlen)
{
    uid_t uid;
    gid_t gid;

    if (geteuid() != 0 && getuid() != 0)
        return 0;
    if (lookup(user, &uid, &gid, err, errlen) != 0)
        return -1;
    return gw_drop_to(uid, gid, err, errlen);
}

int gw_drop_to(uid_t uid, gid_t gid, char *err, size_t errlen)
{
    uid_t ruid, euid, suid;
    gid_t rgid, egid, sgid;

    if (uid == 0 || gid == 0) {
        snprintf(err, errlen, "uid %u gid %u: must not be 0", (unsigned)uid, (unsigned)gid);
        return -1;
    }
    if (chdir("/") == -1) {
        snprintf(err, errlen, "chdir /: %s", strerror(errno));
        return -1;
    }
    if (setgroups(0, NULL) == -1) {
        snprintf(err, errlen, "setgroups: %s", strerror(errno));
        return -1;
    }
    if (setresgid(gid, gid, gid) == -1) {
        snprintf(err, errlen, "setresgid: %s", strerror(errno));
        return -1;
    }
    if (setresuid(uid, uid, uid) == -1) {
        snprintf(err, errlen, "setresuid: %s", strerror(errno));
        return -1;
    }
    /* Verify: every id changed, no groups left, and root cannot come back. */
    if (getresuid(&ruid, &euid, &suid) == -1 || ruid != uid || euid != uid || suid != uid || getresgid(&rgid, &egid, &sgid) == -1 ||
        rgid != gid || egid != gid || sgid != gid) {
        snprintf(err, errlen, "ids did not change as requested");
        return -1;
    }
    if (getgroups(0, NULL) != 0) {
        snprintf(err, errlen, "supplementary groups remain");
        return -1;
    }
    if (setuid(0) != -1 || seteuid(0) != -1 || setgid(0) != -1 || setegid(0) != -1) {
        snprintf(err, errlen, "root privileges could be regained");
        return -1;
    }
    return 0;
}
