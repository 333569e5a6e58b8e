/*
 * box.h - run a job's stages in an isolated box.
 *
 * A slot is a reusable place for boxes: its own unprivileged uid, a private
 * mount point, a clone stack.  Each slot holds one *warm* box at a time,
 * prepared off the request path (box_prepare): its cgroup exists, its init
 * process is cloned into fresh namespaces, attached to the cgroup and has
 * mounted the generic parts of the root.  A job then sends the box its plan
 * (box_start: runtime mounts, files, stage argv/env/limits), runs each stage
 * (box_run_stage), and leaves the box to be discarded (box_discard) and the
 * slot prepared again, after the reply has gone out.
 */
#ifndef MOAT_BOX_H
#define MOAT_BOX_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cgroup.h"
#include "errbuf.h"
#include "moat_proto.h"
#include "seccomp_policy.h"

struct box_limits {
    uint64_t wall_ms;
    uint64_t cpu_ms;
    uint64_t idle_ms; /* no output read and no input written; 0 = off */
    uint64_t memory_bytes;
    uint32_t pids;
    size_t output_cap; /* per stream */
    uint64_t fsize_bytes;
    uint32_t nofile;
};

/* A read-only path from the host, bound at the same place in the box. */
struct box_mount {
    char *path;
};

enum { BOX_STAGE_COMPILE = 0, BOX_STAGE_RUN = 1, BOX_NSTAGES = 2 };

struct box_stage {
    int present;
    char *const *argv; /* argv[0] is an absolute path inside the box */
    char *const *envp;
    struct box_limits lim;
};

struct box_job {
    const struct box_mount *ro;
    size_t nro;
    const struct moat_file *files; /* written into /box before anything runs */
    size_t nfiles;
    uint64_t box_bytes; /* size of the job's /box tmpfs */
    struct box_stage stages[BOX_NSTAGES];
};

struct box_stream {
    uint8_t *data;
    size_t len;
    size_t cap;
};

struct box_result {
    uint8_t status; /* enum moat_status */
    int has_code;
    int code;
    int has_signal;
    int signal;
    uint64_t cpu_ms;
    uint64_t wall_ms;
    uint64_t memory_bytes;
    struct box_stream out, err, both;
    char message[256];
};

/* The host's handles on a warm box. */
struct warm_box {
    int ready;  /* prepared and not yet used */
    int broken; /* a stage was killed: later stages must not run */
    pid_t init_pid;
    int ctl;                 /* stream socket: plan and "go" to init, reports back */
    int out_rd[BOX_NSTAGES]; /* per-stage stdout, read end */
    int err_rd[BOX_NSTAGES]; /* per-stage stderr, read end */
    int in_wr;               /* run-stage stdin, write end */
    struct cg_box cgb;
};

struct slot {
    int index;
    uid_t uid;
    gid_t gid;
    char dir[PATH_MAX / 4];  /* <run>/slots/<n>, root-only */
    char root[PATH_MAX / 4]; /* mount point for a box's root tmpfs (in the box's namespace only) */
    char cg_name[32];
    void *stack;
    size_t stack_size;
    unsigned long generation;
    struct warm_box warm;
};

/* Called at start-up for each slot. */
int slot_init(struct slot *s, int index, const char *run_dir, uid_t uid, struct errbuf *e);

/* Called off the request path: make the slot's next box warm. */
int box_prepare(const struct cg_system *cg, const struct seccomp_prog *seccomp, struct slot *s, struct errbuf *e);
/* Called per job: hand the warm box its plan. */
int box_start(struct slot *s, const struct box_job *job, struct errbuf *e);
/* Runs one stage.  Returns 0 with *res filled (the program's own failures
 * are statuses in *res), or -1 if the box failed. */
int box_run_stage(struct slot *s, int stage, const struct box_stage *st, const uint8_t *stdin_data, size_t stdin_len,
                  struct box_result *res, struct errbuf *e);
/* Called after a job (off the request path): kill, reap, remove the
 * cgroup.  Nothing of the box is read or followed on the host. */
void box_discard(struct slot *s);

void box_result_free(struct box_result *res);

#endif
