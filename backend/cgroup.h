/*
 * cgroup.h - one small interface over cgroup v1 and v2.
 *
 * cg_detect() runs once at start-up and finds the hierarchy and the
 * backend's own group in each controller; every box group is created below
 * <own group>/<instance name>, never at the hierarchy root.  Box groups are
 * made fresh for each run (cg_box_create), so their counters start at zero,
 * and removed after it (cg_box_destroy) once every process is gone.
 * cg_teardown_instance removes what cg_setup_instance made and, on v2, puts
 * the own group back as it was found (cgroup.c says how).
 */
#ifndef MOAT_CGROUP_H
#define MOAT_CGROUP_H

#include <limits.h>
#include <stdint.h>
#include <sys/types.h>

#include "errbuf.h"

enum cg_version { CG_V1 = 1, CG_V2 = 2 };

/* v1 controllers moat uses, each its own hierarchy. */
enum cg_v1_ctrl { CG_MEMORY, CG_PIDS, CG_CPUACCT, CG_FREEZER, CG_NCTRL };

struct cg_system {
    enum cg_version version;
    char fsroot[PATH_MAX / 4];         /* normally /sys/fs/cgroup */
    char base[CG_NCTRL][PATH_MAX / 4]; /* v2 uses base[0] only */
    int memsw;                         /* v1: memory.memsw.* present */
    /* v2 only: the own group, and what cg_setup_instance changed in it for
     * cg_teardown_instance to undo */
    char own[PATH_MAX / 4];  /* the parent of base[0] */
    char leaf[PATH_MAX / 4]; /* <own>/<name>.supervisor */
    int leaf_used;           /* the own group's processes were moved into leaf */
    int adopted;             /* started inside the leaf a killed run left */
    int added;               /* controllers enabled in own by us (bit per controller) */
    int ready;               /* something to tear down */
};

struct cg_box {
    const struct cg_system *cg;
    char path[CG_NCTRL][PATH_MAX / 4]; /* v2 uses path[0] only */
};

struct cg_usage {
    uint64_t cpu_ns;
    uint64_t memory_peak;
    uint64_t oom_kills;  /* processes of the box the OOM killer killed */
    int oom_exact;       /* the kernel counts them (v2 memory.events, v1 since 4.13) */
    uint64_t limit_hits; /* times usage reached the limit (v2 "max" events, v1 failcnt) */
};

/*
 * Called once at start.  fsroot is the cgroup mount root and self_cgroup the
 * path of a /proc/<pid>/cgroup file (tests pass a fake tree and file).
 * name is this backend instance's group name below its own group.
 */
int cg_detect(struct cg_system *cg, const char *fsroot, const char *self_cgroup, const char *name, struct errbuf *e);

/* Called once at start, after cg_detect: creates the instance groups,
 * enables v2 controllers (moving the own group's processes into a leaf when
 * v2 requires it), and removes groups left by a crashed run.  On failure
 * nothing it changed is left. */
int cg_setup_instance(struct cg_system *cg, struct errbuf *e);

/* Called at shutdown, after every box is gone: removes the instance's
 * groups and, on v2, disables the controllers cg_setup_instance enabled and
 * moves the leaf's processes back, so nothing of this backend is left in the
 * hierarchy.  Safe to call again (a no-op once done). */
int cg_teardown_instance(struct cg_system *cg, struct errbuf *e);

/* Called before each run. */
int cg_box_create(const struct cg_system *cg, struct cg_box *box, const char *box_name, struct errbuf *e);

/* What cg_box_set_limits returns when the box already holds more memory than
 * the new limit and the kernel could not reclaim it (files left in the box's
 * tmpfs by an earlier stage, say): EBUSY on v1; on v2 the write succeeds but
 * the kernel OOM-kills in the box or leaves usage above the limit. */
#define CG_OVER_LIMIT 1

/* Called before each stage: 0, CG_OVER_LIMIT (the box cannot run under this
 * limit; e says why), or -1. */
int cg_box_set_limits(struct cg_box *box, uint64_t memory_bytes, uint32_t pids, struct errbuf *e);
/* The memory the box holds now, in bytes. */
int cg_box_memory_current(struct cg_box *box, uint64_t *bytes, struct errbuf *e);
int cg_box_attach(struct cg_box *box, pid_t pid, struct errbuf *e);
/* Called before each stage: the peak memory starts again from the current
 * usage (v1); returns -1 where the kernel cannot do that (v2 before 6.12). */
int cg_box_reset_peak(struct cg_box *box);
/* Called while a box runs and after it ends. */
int cg_box_usage(struct cg_box *box, struct cg_usage *u, struct errbuf *e);
/* Kills every process of the box through its cgroup and waits until the
 * group is empty (bounded); returns -1 if processes remain. */
int cg_box_kill(struct cg_box *box, struct errbuf *e);
/* Called after a run: kill leftovers and remove the group. */
int cg_box_destroy(struct cg_box *box, struct errbuf *e);

#endif
