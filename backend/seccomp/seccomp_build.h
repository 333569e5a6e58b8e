/*
 * seccomp_build.h - a libseccomp filter from a table of system calls.
 *
 * The one copy of the filter-building code.  Each program keeps its own
 * table (backend/seccomp_policy.c for the box, gateway/process/confine.c for the
 * gateway); this file turns a table into a libseccomp context with the same
 * architecture handling for both.
 */
#ifndef MOAT_SECCOMP_BUILD_H
#define MOAT_SECCOMP_BUILD_H

#include <linux/sched.h>
#include <seccomp.h>
#include <stddef.h>
#include <stdint.h>

/*
 * A call with its own action, or allowed only with one argument condition.
 * arg.op == 0 means "any arguments"; SECCOMP_ARG() writes a condition in a
 * static table (libseccomp's SCMP_A0() is a compound literal).
 */
struct seccomp_rule {
    const char *name; /* libseccomp's name for the call */
    uint32_t action;  /* SCMP_ACT_ALLOW, SCMP_ACT_ERRNO(e), SCMP_ACT_KILL_PROCESS ... */
    struct scmp_arg_cmp arg;
};

#define SECCOMP_ARG(index, cmp, a, b)                                                                                              \
    {                                                                                                                              \
        .arg = (index), .op = (cmp), .datum_a = (a), .datum_b = (b)                                                                \
    }

/* Every namespace flag of clone: a rule on clone masks them all. */
#define SECCOMP_CLONE_NS_FLAGS                                                                                                     \
    (CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWCGROUP |                   \
     0x00000080ULL /* CLONE_NEWTIME */)

/* A whole policy: what happens to calls no row names, then the rows. */
struct seccomp_spec {
    uint32_t default_action;
    const char *const *allow; /* allowed with any arguments */
    size_t nallow;
    const char *const *kill; /* kill the process, whatever the arguments */
    size_t nkill;
    const struct seccomp_rule *rules; /* added last, in order */
    size_t nrules;
};

/*
 * A libseccomp context for the native architecture only: a call made
 * through another ABI (32-bit int 0x80, x32) kills the process, since a
 * table of names says nothing about those.  Names this architecture lacks
 * are skipped, so one table serves every kernel and architecture libseccomp
 * knows.  Rules are compiled to a binary search over call numbers.  The
 * caller loads or exports it and calls seccomp_release().  NULL on error,
 * with err set.
 */
scmp_filter_ctx seccomp_build(const struct seccomp_spec *spec, char *err, size_t errlen);

#endif
