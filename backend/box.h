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
 *
 * One supervision loop runs every stage, batch or session: box_run_stage
 * gives it capped buffers and the request's stdin; a session gives it a
 * struct box_io of its own (box_run_stage_io): output as frames while the
 * gateway's credit lasts, stdin as it arrives, the connection to watch.
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
    uint64_t stack_bytes; /* RLIMIT_STACK */
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
    const uint8_t *file_exec; /* per file: 1 mode 0755, 0 mode 0644; NULL: all 0644 */
    uint64_t box_bytes;       /* size of the job's /box tmpfs */
    uint8_t isolation;        /* enum moat_isolation, for every stage (box_gvisor.c) */
    const char *runsc;        /* MOAT_ISOLATION_GVISOR: runsc's absolute path */
    const char *platform;     /* MOAT_ISOLATION_GVISOR: "ptrace" or "kvm" */
    struct box_stage stages[BOX_NSTAGES];
};

/* Threads and processes a gVisor stage gets above its own pids limit: the
 * sentry's, the gofer's and runsc's, all in the box's cgroup.  The
 * program's own count holds inside gVisor (RLIMIT_NPROC). */
#define GVISOR_PIDS_HEADROOM 512

/* The stage's output streams, as struct box_io names them. */
enum { BOX_STDOUT = 0, BOX_STDERR = 1 };

struct box_run; /* a stage under supervision (box.c) */

/*
 * Where a stage's output goes and its stdin comes from, and what else the
 * supervision loop watches.  Callbacks run on the loop's thread and must not
 * block for long; they may end the stage with box_run_kill().
 */
struct box_io {
    void *ctx;
    /* Bytes of stream the loop may read now.  0 holds the pipe: the loop
     * stops reading it and the program blocks in write(); that time does
     * not count as idle. */
    size_t (*room)(void *ctx, int stream);
    /* 1..room bytes read from stream (BOX_STDOUT, BOX_STDERR). */
    void (*output)(void *ctx, struct box_run *run, int stream, const uint8_t *data, size_t len);
    /* Run stage: stdin bytes ready to write (*data), 0 when none are. */
    size_t (*stdin_pending)(void *ctx, const uint8_t **data);
    /* n of them left the source: written into the pipe, or dropped because
     * the program closed its stdin. */
    void (*stdin_consumed)(void *ctx, size_t n);
    /* 1 once no more stdin will come: the pipe is closed when none is pending. */
    int (*stdin_ended)(void *ctx);
    /* One more descriptor polled for input, -1 for none; extra() returns
     * non-zero when it is no longer to be polled. */
    int extra_fd;
    int (*extra)(void *ctx, struct box_run *run);
    /* Absolute CLOCK_MONOTONIC ms the stage must end by even if its own
     * wall_ms lasts longer (a session's lifetime); 0 for none. */
    uint64_t deadline_ms;
    /* Optional: the stage was told to start ("go" sent): from here on
     * box_signal() reaches its program. */
    void (*started)(void *ctx, struct box_run *run);
};

/* The clock of every box deadline (struct box_io's deadline_ms): CLOCK_MONOTONIC, in ms. */
uint64_t box_now_ms(void);

/* From a box_io callback: kill the box; the first reason given names the
 * stage's status (clock: enum moat_clock for a TO, else 0). */
void box_run_kill(struct box_run *run, uint8_t status, uint8_t clock, const char *message);
/* From a box_io callback: the program had input (a session's stdin
 * arrived): the idle clock starts again. */
void box_run_active(struct box_run *run);

struct box_stream {
    uint8_t *data;
    size_t len;
    size_t cap;
};

struct box_result {
    uint8_t status; /* enum moat_status */
    uint8_t clock;  /* enum moat_clock when status is TO, else 0 */
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
    int ready;         /* prepared and not yet used */
    int broken;        /* a stage was killed: later stages must not run */
    uint8_t isolation; /* the plan's (enum moat_isolation) */
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

/* Called at start-up for each slot: index is unique across the pools (its
 * directory <run_dir>/slots/<index>, its init_args), cg_name its cgroup's. */
int slot_init(struct slot *s, int index, const char *cg_name, const char *run_dir, uid_t uid, struct errbuf *e);

/* Called off the request path: make the slot's next box warm. */
/*
 * The walls that hold this backend's boxes for a job of the given isolation
 * (enum moat_isolation), for results, audit records and readiness:
 * "namespaces+seccomp", then "+landlock" when the kernel has it and it is
 * not switched off (landlock_setup); a gVisor job's are "namespaces+gvisor"
 * (runsc instead of our seccomp filter and Landlock).  The one place that
 * names them.  A static string.
 */
const char *box_walls(uint8_t isolation);

int box_prepare(const struct cg_system *cg, const struct seccomp_prog *seccomp, struct slot *s, struct errbuf *e);
/* Called per job: hand the warm box its plan. */
int box_start(struct slot *s, const struct box_job *job, struct errbuf *e);
/* Runs one stage, batch: output into res's buffers (capped), stdin from
 * stdin_data.  Returns 0 with *res filled (the program's own failures are
 * statuses in *res), or -1 if the box failed. */
int box_run_stage(struct slot *s, int stage, const struct box_stage *st, const uint8_t *stdin_data, size_t stdin_len,
                  struct box_result *res, struct errbuf *e);
/* Runs one stage with io as its sink and source.  res starts zeroed; this
 * fills its status, code, signal, clock, message and usage, never its
 * buffers.  0, or -1 if the box failed. */
int box_run_stage_io(struct slot *s, int stage, const struct box_stage *st, const struct box_io *io, struct box_result *res,
                     struct errbuf *e);
/*
 * What a box's programs left in /box, to be the files of other boxes (a
 * job's test cases: box.c, "Test cases").  Regular files only, with their
 * exec bit; directories are implied by the names; links, fifos and the like
 * are left out, never followed.  Checked here like request files are
 * (moat_path.h), and capped.
 */
#define BOX_PACK_MAX_FILES 256
#define BOX_PACK_MAX_BYTES (16u * 1024u * 1024u)
struct box_pack {
    uint8_t *buf; /* the bytes as init sent them; names and contents point into it */
    struct moat_file *files;
    uint8_t *exec;
    size_t nfiles;
};
/* Between stages (after a compile stage that ended OK): init packs /box
 * and sends it.  0 with *pack filled; BOX_PACK_REFUSED with e saying why for
 * the client (over a cap, a name the rules refuse); -1 if the box failed. */
#define BOX_PACK_REFUSED (-2)
int box_pack(struct slot *s, struct box_pack *pack, struct errbuf *e);
/* The pack's body as init sent it, untrusted (box_internal.h): pack takes
 * buf (malloc'ed) whatever the outcome, its files point into it.  0,
 * BOX_PACK_REFUSED or -1 as box_pack; free with box_pack_free either way. */
int box_pack_parse(struct box_pack *pack, uint8_t *buf, size_t len, struct errbuf *e);
void box_pack_free(struct box_pack *pack);

/* During a stage: init sends sig (a host signal number) to the stage's
 * program's process group, inside the box's pid namespace (box_init.c). */
int box_signal(struct slot *s, int sig, struct errbuf *e);
/* Called after a job (off the request path): kill, reap, remove the
 * cgroup.  Nothing of the box is read or followed on the host. */
void box_discard(struct slot *s);

void box_result_free(struct box_result *res);

#endif
