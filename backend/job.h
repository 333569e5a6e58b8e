/*
 * job.h - the backend's state shared by its worker threads, and the
 * execute path from a decoded request to a typed result.
 */
#ifndef MOAT_JOB_H
#define MOAT_JOB_H

#include <stdarg.h>

#include "cgroup.h"
#include "language.h"
#include "moat_proto.h"
#include "pool.h"

struct backend {
    struct cg_system cg;
    struct language_set langs;
    struct slot_pool pool;
    struct seccomp_prog seccomp;
};

struct job_error {
    uint16_t code; /* enum moat_error_code */
    char message[MOAT_MAX_MESSAGE_LEN / 2];
};

/* Returns 0 with *res filled, or -1 with *je saying why it was refused. */
int job_run(struct backend *b, const struct moat_exec_request *req, struct moat_exec_result *res, struct job_error *je);
/* Lists the installed languages; the strings are borrowed from b (free only
 * rt->items). */
int job_runtimes(struct backend *b, struct moat_runtimes *rt);

#endif
