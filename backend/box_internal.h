/*
 * box_internal.h - what the host side (box.c) and a box's init (box_init.c)
 * say to each other over the control socket.
 *
 * host -> init: one plan, then one "go" byte per stage ('0' compile,
 *               '1' run); while a stage runs, CTL_SIGNAL and one byte, a
 *               signal for the stage program's process group (between
 *               stages init reads and drops it: that stage is over);
 *               between stages CTL_PACK: init packs /box (below).
 *               The plan is "MOAT", u32 body length, body:
 *   u64 box_bytes, u32 nro, u32 nfiles, u32 stage_mask,
 *   u32 isolation (enum moat_isolation: every stage of the box),
 *   with MOAT_ISOLATION_GVISOR: str runsc (absolute path), str platform,
 *   nro x str (runtime path), nfiles x (str name, u32 exec, blob content),
 *   per present stage: u64 fsize, u64 cpu_ms, u32 nofile, u32 pids,
 *                      u32 argc, u32 envc, argc x str, envc x str
 *   str = u32 length including the NUL, bytes ending in NUL
 *   blob = u32 length, bytes
 *   (integers in host byte order: both ends are this program)
 * init -> host: fixed-size reports (struct box_report); after CTL_PACK
 *               the pack: "PACK", u32 body length, body:
 *   u32 outcome (enum pack_outcome), u32 count,
 *   count x (str name, u32 exec (0 or 1), blob content)
 *   Untrusted: it describes what the box's own programs left in /box.  The
 *   host checks every length, name and cap again (box_pack) and never
 *   writes the bytes anywhere but into another box's plan.
 */
#ifndef MOAT_BOX_INTERNAL_H
#define MOAT_BOX_INTERNAL_H

#include <stdint.h>

#include "box.h"

#define PLAN_MAGIC     0x54414f4dU /* "MOAT" */
#define CTL_SIGNAL     'S'
#define PLAN_MAX_BYTES (32u * 1024u * 1024u)
#define CTL_PACK       'P'
#define PACK_MAGIC     0x4b434150U /* "PACK" */

enum pack_outcome {
    PACK_OK = 0,
    PACK_TOO_MANY = 1,  /* more than BOX_PACK_MAX_FILES regular files */
    PACK_TOO_LARGE = 2, /* more than BOX_PACK_MAX_BYTES of content and names */
    PACK_TOO_DEEP = 3,  /* a directory deeper than MOAT_MAX_PATH_DEPTH allows */
    PACK_BAD_NAME = 4,  /* a path longer than MOAT_MAX_NAME_LEN */
    PACK_IO = 5,        /* init could not read /box */
};

enum report_kind {
    REPORT_EXITED = 1,       /* a stage's program ended: wait_status */
    REPORT_SETUP_FAILED = 2, /* init could not build the box: what, err */
    REPORT_EXEC_FAILED = 3,  /* the program could not be started: what, err */
};

struct box_report {
    int32_t kind;
    int32_t stage;
    int32_t wait_status;
    int32_t err;
    char what[112];
};

/* Fixed descriptor numbers inside init. */
enum {
    FD_RUN_IN = 0,
    FD_RUN_OUT = 1,
    FD_RUN_ERR = 2,
    FD_CTL = 3,
    FD_COMPILE_OUT = 4,
    FD_COMPILE_ERR = 5,
    FD_FIRST_FREE = 6,
};

/* What init gets from the host at clone time (a copy of host memory). */
struct init_args {
    const struct slot *slot;
    const struct seccomp_prog *seccomp;
    int landlock_abi;       /* landlock_abi() at start-up; 0: no Landlock wall */
    int fds[FD_FIRST_FREE]; /* host descriptor numbers, by fixed number */
    char etc_passwd[256];
    char etc_group[128];
};

/* ---- gVisor stages (box_gvisor.c), in init's stage child ---- */

/* runsc's state and the OCI bundle: in the box's /tmp, root only; the
 * sandboxed program has a /tmp of its own and never sees it. */
#define GVISOR_DIR          "/tmp/.moat-gvisor"
#define GVISOR_ARGV_MAX     16
#define GVISOR_LOG_TRAILERS 4         /* warnings of rootless runsc's outer process that may follow the status */
#define GVISOR_LOG          "run.log" /* runsc run's debug log, in the dir of gvisor_runsc_cmd */

struct gvisor_stage {
    const char *box; /* bound read-write at /box, the cwd; NULL: none, cwd / */
    char *const *argv;
    char *const *envp;
    unsigned long long uid, gid;
    unsigned long long fsize, stack, cpu_s, nofile, pids;
};

/* After the pivot: GVISOR_DIR and its state and bundle dirs.  0 or -1. */
int gvisor_make_dirs(uid_t uid, gid_t gid);
/* config.json for the stage at path.  0, or -1 with errno and *what.
 * Also the backend's platform probe (gvisor.c), without a box. */
int gvisor_write_bundle(const char *path, const struct gvisor_stage *g, const char **what);
/* runsc's command line: "run" the bundle <dir>/bundle as container id,
 * its state in <dir>/state.  Also the backend's platform probe. */
struct runsc_cmd {
    char *argv[GVISOR_ARGV_MAX];
    char root[288], platform[32], bundle[288], log[300], id[32], sig[8];
};
void gvisor_runsc_cmd(struct runsc_cmd *c, const char *runsc, const char *platform, const char *dir, const char *id);
/* `runsc --rootless --root=DIR/state kill ID SIG`: a signal for the program
 * inside (rootless runsc run does not forward the ones it gets itself). */
void gvisor_kill_cmd(struct runsc_cmd *c, const char *runsc, const char *dir, const char *id, int sig);
/* In runsc's stage child before its execve: the bounding set down to what
 * runsc uses, the inheritable set empty.  0 or -1 (errno). */
int gvisor_drop_caps(void);
/* The program's wait status: the one runsc run logged last in log_path
 * (GVISOR_LOG below the dir of gvisor_runsc_cmd), else runsc's own status
 * as it is (S36: never exit 128+N read as a signal). */
int gvisor_wait_status(int status, const char *log_path);
/* The parser: the raw wait status in the final line of a runsc log
 * ("... main.go:NNN] Exiting with status: N").  0 with *out, or -1. */
int gvisor_status_from_log(const char *buf, size_t len, int *out);

/* The box's pid 1; runs in the cloned child and never returns. */
int box_init_main(void *arg);

#endif
