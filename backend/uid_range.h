/*
 * uid_range.h - the box uids (and gids) of one moat-backend instance, held
 * exclusively for the process's life.
 *
 * Slot n runs as uid and gid first + n.  A backend holds two adjacent
 * ranges: its batch slots' (-j) and, right after, its session slots'
 * (--sessions); each is locked and checked on its own, so the messages
 * name the range that collided.  RLIMIT_NPROC, signals and file
 * ownership all go by uid, so a range shared with anything else (a second
 * backend during a blue/green upgrade, a test run beside a service, Isolate
 * boxes, an account) lets one box count against, or reach, the other.  Two
 * steps make the range ours:
 *
 *   uid_range_lock()    first thing at start-up: one flock'd file per uid in
 *                       UID_LOCK_DIR, so a second live backend with an
 *                       overlapping range is refused before it touches any
 *                       shared state (cgroups, run dir, socket);
 *   uid_range_check_unused()  once this instance has removed what a crashed
 *                       run of it left behind: no account, group or process
 *                       on the host may use a uid or gid of the range.
 *
 * The locks go when the process does (the kernel drops a flock with its
 * last descriptor); uid_range_unlock() also removes the files, so they do
 * not pile up in /run.
 */
#ifndef MOAT_UID_RANGE_H
#define MOAT_UID_RANGE_H

#include <sys/types.h>

#include "errbuf.h"
#include "moat_limits.h"

#define UID_LOCK_DIR      "/run/moat-uids"
#define UID_RANGE_LAST_OK 2147483647u /* the highest uid a range may reach (INT32_MAX: tools print uids as int) */

struct uid_range {
    uid_t first; /* slot n: uid and gid first + n */
    int count;
    int nlocked;        /* fds[0..nlocked-1] hold the locks */
    int fds[MAX_SLOTS]; /* also bounds a session range: MAX_SESSIONS <= MAX_SLOTS */
};

/* Called at start-up: checks the bounds and locks every uid of
 * first..first+count-1, or fails naming the first uid held elsewhere. */
int uid_range_lock(struct uid_range *r, uid_t first, int count, struct errbuf *e);
/* Called at start-up after the locks and the removal of stale boxes: fails
 * naming the first account, group or process that uses the range. */
int uid_range_check_unused(const struct uid_range *r, struct errbuf *e);
/* Drops the locks (also on a range that never locked anything). */
void uid_range_unlock(struct uid_range *r);
/* 1 if r is locked whole and has room for nslots slots. */
int uid_range_covers(const struct uid_range *r, int nslots);

#endif
