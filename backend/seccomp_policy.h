/*
 * seccomp_policy.h - the box's system call allow-list, compiled once.
 */
#ifndef MOAT_SECCOMP_POLICY_H
#define MOAT_SECCOMP_POLICY_H

#include <linux/filter.h>

#include "errbuf.h"

struct seccomp_prog {
    struct sock_filter *insns;
    unsigned short len;
};

/* Called once at start-up. */
int seccomp_policy_build(struct seccomp_prog *out, struct errbuf *e);
/* Called in the box's program child just before execve; needs
 * no_new_privs (or CAP_SYS_ADMIN) and makes no allocation. */
int seccomp_policy_install(const struct seccomp_prog *p);
void seccomp_policy_free(struct seccomp_prog *p);

#endif
