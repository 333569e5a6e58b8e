/*
 * box.h - run one program in an isolated box.
 *
 * A slot is a reusable place for boxes: its own unprivileged uid, a private
 * directory under the run dir, a pre-allocated clone stack.  A job mounts a
 * fresh tmpfs as the slot's /box (slot_job_begin), runs one or more stages in
 * boxes that share it (box_run), and unmounts it lazily (slot_job_end).
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
    uint64_t tmp_bytes; /* size of the box's /tmp */
    uint32_t nofile;
};

/* A read-only path from the host, bound at the same place in the box. */
struct box_mount {
    char *path;
};

struct box_spec {
    char *const *argv; /* argv[0] is an absolute path inside the box */
    char *const *envp;
    const struct box_mount *ro;
    size_t nro;
    const uint8_t *stdin_data;
    size_t stdin_len;
    struct box_limits lim;
    const struct seccomp_prog *seccomp; /* installed just before execve */
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

struct slot {
    int index;
    uid_t uid;
    gid_t gid;
    char dir[PATH_MAX / 4];  /* <run>/slots/<n>, root-only */
    char root[PATH_MAX / 4]; /* mount point for a box's root tmpfs */
    char box[PATH_MAX / 4];  /* mount point for the job's /box tmpfs */
    char cg_name[32];
    void *stack;
    size_t stack_size;
    int job_mounted;
    unsigned long runs;
};

/* Called at start-up for each slot. */
int slot_init(struct slot *s, int index, const char *run_dir, uid_t uid, struct errbuf *e);
/* Called at start-up: unmounts whatever a crashed backend left in a slot. */
void slot_cleanup_stale(struct slot *s);
/* Called per job, before any stage: fresh /box tmpfs holding the files. */
int slot_job_begin(struct slot *s, uint64_t box_bytes, const struct moat_file *files, size_t nfiles, struct errbuf *e);
/* Called per job after the last stage. */
void slot_job_end(struct slot *s);

/* Runs one stage.  Returns 0 with *res filled (the program's own failures are
 * statuses in *res), or -1 if the box could not be run at all. */
int box_run(const struct cg_system *cg, struct slot *s, const struct box_spec *spec, struct box_result *res, struct errbuf *e);
void box_result_free(struct box_result *res);

#endif
