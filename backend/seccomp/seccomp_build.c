/*
 * seccomp_build.c - a libseccomp filter from a table of system calls.
 */
#include "seccomp_build.h"

#include <stdio.h>
#include <string.h>

static int add_rule(scmp_filter_ctx ctx, uint32_t action, const char *name, const struct scmp_arg_cmp *arg, char *err,
                    size_t errlen)
{
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR)
        return 0; /* not a system call on this architecture */
    int rc = seccomp_rule_add_array(ctx, action, nr, arg != NULL ? 1 : 0, arg);
    if (rc != 0) {
        snprintf(err, errlen, "seccomp rule for %s: %s", name, strerror(-rc));
        return -1;
    }
    return 0;
}

scmp_filter_ctx seccomp_build(const struct seccomp_spec *spec, char *err, size_t errlen)
{
    scmp_filter_ctx ctx = seccomp_init(spec->default_action);

    if (ctx == NULL) {
        snprintf(err, errlen, "seccomp_init failed");
        return NULL;
    }
    if (seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS) != 0) {
        snprintf(err, errlen, "seccomp: cannot set the bad-architecture action");
        goto fail;
    }
    /* a binary search over syscall numbers instead of a linear list: a few
     * comparisons per call rather than up to ~200 */
    if (seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2) != 0) {
        snprintf(err, errlen, "seccomp: cannot enable binary-tree optimisation");
        goto fail;
    }
    for (size_t i = 0; i < spec->nallow; i++)
        if (add_rule(ctx, SCMP_ACT_ALLOW, spec->allow[i], NULL, err, errlen) != 0)
            goto fail;
    for (size_t i = 0; i < spec->nkill; i++)
        if (add_rule(ctx, SCMP_ACT_KILL_PROCESS, spec->kill[i], NULL, err, errlen) != 0)
            goto fail;
    for (size_t i = 0; i < spec->nrules; i++) {
        const struct seccomp_rule *r = &spec->rules[i];
        if (add_rule(ctx, r->action, r->name, r->arg.op != 0 ? &r->arg : NULL, err, errlen) != 0)
            goto fail;
    }
    return ctx;
fail:
    seccomp_release(ctx);
    return NULL;
}
