/*
 * job.h - the backend's state shared by its worker threads, the checks and
 * plan every request goes through, and the execute path from a decoded
 * request to a typed result.
 */
#ifndef MOAT_JOB_H
#define MOAT_JOB_H

#include <stdarg.h>

#include "cgroup.h"
#include "language.h"
#include "moat_proto.h"
#include "gvisor.h"
#include "pool.h"

struct backend {
    struct cg_system cg;
    struct language_set langs;
    struct slot_pool pool;     /* batch slots (-j) */
    struct slot_pool sessions; /* session slots (--sessions), apart from the batch ones */
    struct seccomp_prog seccomp;
    struct gvisor gvisor;
};

struct job_error {
    uint16_t code; /* enum moat_error_code */
    char message[MOAT_MAX_MESSAGE_LEN / 2];
};

/*
 * A request checked and planned, for batch (job_run) and session
 * (session.c) alike: the language, the request as the box sees it (entry
 * file renamed to carry the language's extension), each stage's argv and
 * limits, the box plan.  For a session, also its effective clocks and caps,
 * and the run stage's wall, CPU and idle clocks are the session's.
 * Not to be moved once made (the view points into renamed[]).
 */
struct job_plan {
    const struct language *lang;
    struct moat_exec_request view;
    struct moat_file renamed[MOAT_MAX_FILES];
    char entry[MOAT_MAX_NAME_LEN + 16]; /* the entry file's name with the language's extension */
    char **argv_compile, **argv_run;
    struct box_job job;            /* job.isolation: the stronger of the request's and the language's */
    struct session_limits session; /* when planned with ceilings */
};

/* Validates req again (the backend trusts nothing the socket brings) and
 * plans it: 0, or -1 with *je saying why it is refused.  ceilings is NULL
 * for a batch job, a session's SESSION_OPEN limits otherwise. */
int job_plan_init(struct backend *b, const struct moat_exec_request *req, const struct session_limits *ceilings,
                  struct job_plan *plan, struct job_error *je);
void job_plan_free(struct job_plan *plan);

/* printf into *je with its code; returns -1. */
int job_fail(struct job_error *je, uint16_t code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Returns 0 with *res filled, or -1 with *je saying why it was refused. */
int job_run(struct backend *b, const struct moat_exec_request *req, struct moat_exec_result *res, struct job_error *je);
/* Lists the installed languages; the strings are borrowed from b (free only
 * rt->items). */
int job_runtimes(struct backend *b, struct moat_runtimes *rt);

#endif
