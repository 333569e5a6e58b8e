/*
 * moat_proto.h - the typed message codec spoken on the gateway <-> backend
 * Unix socket.  Both moat-gateway and moat-backend link this one library
 * (libmoat_proto); see PROTOCOL.md next to this file for the wire format.
 *
 * Every frame is a fixed 16-byte header followed by a payload of TLV fields.
 * Decoders check every length, reject unknown or duplicate tags, require the
 * mandatory fields and refuse trailing bytes.  Decoded messages own their
 * memory; free them with the matching *_free() function.
 */
#ifndef MOAT_PROTO_H
#define MOAT_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "moat_buf.h"
#include "moat_utf8.h" /* moat_utf8_valid: string fields are checked with it */

#define MOAT_PROTO_VERSION     1
#define MOAT_FRAME_HEADER_SIZE 16
#define MOAT_FRAME_MAX_PAYLOAD (16u * 1024u * 1024u)

/* Structural caps enforced by the codec itself (semantic limits live in the
 * backend's validator and the gateway's policy). */
#define MOAT_MAX_FILES               32
#define MOAT_MAX_ARGS                64
#define MOAT_MAX_NAME_LEN            255    /* language, version, file name */
#define MOAT_MAX_ARG_LEN             4096   /* one argv element */
#define MOAT_MAX_WALLS_LEN           64     /* an exec result's walls */
#define MOAT_MAX_MESSAGE_LEN         1024   /* human readable message */
#define MOAT_MAX_TESTS               64     /* test cases of one exec request */
#define MOAT_MAX_TESTS_WALL_MS       120000 /* the backend's ceiling (and default) of a request's tests_wall_ms */
#define MOAT_MAX_COMPILER_OPTIONS    32     /* compiler options of one request (tag 17) */
#define MOAT_MAX_COMPILER_OPTION_LEN 128    /* bytes of one option, and of one allow-list pattern */
#define MOAT_MAX_OPTION_PATTERNS     64     /* allow-list patterns of one runtime (RUNTIMES tag 5) */
/* The largest run_stack_kib, run_file_size_kib (KiB) and run_processes the
 * wire carries: sanity bounds, far above any backend's own ceilings. */
#define MOAT_MAX_STACK_KIB     (16u * 1024u * 1024u)
#define MOAT_MAX_FILE_SIZE_KIB (1024u * 1024u * 1024u)
#define MOAT_MAX_PROCESSES     65536u

enum moat_msg_type {
    MOAT_MSG_EXEC_REQUEST = 1,   /* gateway -> backend */
    MOAT_MSG_EXEC_RESULT = 2,    /* backend -> gateway */
    MOAT_MSG_ERROR = 3,          /* backend -> gateway: request refused */
    MOAT_MSG_RUNTIMES_QUERY = 4, /* gateway -> backend: empty payload */
    MOAT_MSG_RUNTIMES = 5,       /* backend -> gateway: installed languages */
    /* a live session (PROTOCOL.md, "Sessions"): every frame carries the session's job id */
    MOAT_MSG_SESSION_STDIN = 6,       /* gateway -> backend: bytes for the program's stdin */
    MOAT_MSG_SESSION_STDIN_CLOSE = 7, /* gateway -> backend: empty payload, end of stdin */
    MOAT_MSG_SESSION_SIGNAL = 8,      /* gateway -> backend: a signal from the allow-list */
    MOAT_MSG_SESSION_OUTPUT = 9,      /* backend -> gateway: a chunk of stdout or stderr */
    MOAT_MSG_SESSION_STAGE = 10,      /* backend -> gateway: a stage started */
    MOAT_MSG_SESSION_EXIT = 11,       /* backend -> gateway: a stage ended */
    MOAT_MSG_SESSION_CREDIT = 12,     /* either way: the receiver of data grants window */
    MOAT_MSG_SESSION_OPEN = 13,       /* gateway -> backend: an exec request and the session's ceilings */
    MOAT_MSG_SESSION_READY = 14,      /* backend -> gateway: the box took the plan; the effective limits */
};
#define MOAT_MSG_MAX MOAT_MSG_SESSION_READY

/* Session caps.  A data chunk (stdin or output) is 1..MOAT_SESSION_CHUNK_MAX
 * bytes; each side may have at most MOAT_SESSION_WINDOW data bytes
 * unacknowledged towards the other (SESSION_CREDIT gives them back).  The
 * header parser refuses a session frame longer than its type's cap before
 * anything reads or allocates the payload. */
#define MOAT_SESSION_CHUNK_MAX      (64u * 1024u)
#define MOAT_SESSION_WINDOW         (128u * 1024u)
#define MOAT_SESSION_DATA_FRAME_MAX (MOAT_SESSION_CHUNK_MAX + 64u) /* STDIN, OUTPUT */
#define MOAT_SESSION_CTRL_FRAME_MAX 4096u                          /* SIGNAL, STAGE, EXIT, CREDIT */

/* Output streams of SESSION_OUTPUT. */
enum moat_stream {
    MOAT_STREAM_STDOUT = 1,
    MOAT_STREAM_STDERR = 2,
};

/* Stages of SESSION_STAGE and SESSION_EXIT. */
enum moat_stage {
    MOAT_STAGE_COMPILE = 1,
    MOAT_STAGE_RUN = 2,
};

/* The clock that ended a stage with MOAT_STATUS_TO (SESSION_EXIT). */
enum moat_clock {
    MOAT_CLOCK_WALL = 1, /* whole lifetime; also a compile stage's timeout */
    MOAT_CLOCK_IDLE = 2, /* no output written and no stdin received */
    MOAT_CLOCK_CPU = 3,
};
#define MOAT_CLOCK_MAX MOAT_CLOCK_CPU

/* SESSION_SIGNAL's allow-list, in Linux's generic numbering (x86, arm,
 * riscv), which is the wire's numbering.  SIGSTOP/SIGCONT would freeze the
 * session's clocks, and a program's fault signals (SIGSEGV, ...) are for the
 * kernel to send: neither is on the list. */
enum moat_signal {
    MOAT_SIG_HUP = 1,
    MOAT_SIG_INT = 2,
    MOAT_SIG_QUIT = 3,
    MOAT_SIG_KILL = 9,
    MOAT_SIG_USR1 = 10,
    MOAT_SIG_USR2 = 12,
    MOAT_SIG_TERM = 15,
};

/* The walls a job runs in (EXEC_REQUEST / SESSION_OPEN tag "isolation",
 * RUNTIMES tag "isolations"): the gateway sets it from the tenant's
 * configuration, never from a request body; the backend runs the stronger
 * of it and the language manifest's.  Ordered: a larger value is stronger. */
enum moat_isolation {
    MOAT_ISOLATION_NAMESPACES = 0, /* the plain box: namespaces, seccomp, rlimits, cgroup */
    MOAT_ISOLATION_GVISOR = 1,     /* the plain box running runsc: the program meets gVisor's kernel */
};
#define MOAT_ISOLATION_MAX  MOAT_ISOLATION_GVISOR
#define MOAT_ISOLATIONS_ALL ((1u << (MOAT_ISOLATION_MAX + 1)) - 1) /* every bit of a runtime's isolations */
/* "namespaces", "gvisor"; NULL for an unknown value. */
const char *moat_isolation_name(uint8_t isolation);
/* The value of a name (as moat_isolation_name spells it), or -1. */
int moat_isolation_parse(const char *name);

/* Result status of one stage (compile or run). */
enum moat_status {
    MOAT_STATUS_OK = 0, /* Piston: null */
    MOAT_STATUS_RE = 1, /* runtime error: non-zero exit */
    MOAT_STATUS_SG = 2, /* killed by a signal */
    MOAT_STATUS_TO = 3, /* a clock (wall, cpu, idle) expired */
    MOAT_STATUS_OL = 4, /* output limit exceeded */
    MOAT_STATUS_EL = 5, /* error limit (stderr) exceeded */
    MOAT_STATUS_XX = 6, /* internal error */
    MOAT_STATUS_ML = 7, /* memory limit: reported as SG in Piston shape */
};
#define MOAT_STATUS_MAX MOAT_STATUS_ML

/* Error codes carried by MOAT_MSG_ERROR. */
enum moat_error_code {
    MOAT_ERR_BAD_REQUEST = 1,      /* malformed or invalid field */
    MOAT_ERR_UNKNOWN_LANGUAGE = 2, /* no such language / version */
    MOAT_ERR_LIMIT = 3,            /* a limit above the server ceiling */
    MOAT_ERR_BUSY = 4,             /* every slot and queue place taken */
    MOAT_ERR_INTERNAL = 5,         /* the backend failed */
    MOAT_ERR_UNAVAILABLE = 6,      /* the backend cannot give the job the walls it needs (no runsc) */
};
#define MOAT_ERR_MAX MOAT_ERR_UNAVAILABLE

struct moat_frame_header {
    uint8_t version;
    uint8_t type;
    uint16_t flags;
    uint32_t length; /* payload bytes after the header */
    uint64_t job_id;
};

struct moat_file {
    char *name;
    uint8_t *content;
    size_t content_len;
};

/* One test case of an exec request (issue 12 item 3): the run stage once
 * more, in a box of its own, with the files the compile stage left.  Its
 * args replace the request's; a limit > 0 lowers the request's run limit
 * for this case (0 or -1: the request's). */
struct moat_test_case {
    uint8_t *stdin_data;
    size_t stdin_len;
    char **args;
    size_t nargs;
    int64_t run_timeout_ms;
    int64_t run_memory_bytes;
    int64_t run_cpu_ms;
};

/* Limits: -1 means "the server default".  The CPU limits were added later:
 * 0 means the same as -1 for them and neither is sent, so a request built
 * with its other limits set and these left zeroed asks for no CPU limit. */
struct moat_exec_request {
    char *language;
    char *version; /* semver selector, "*" allowed */
    struct moat_file *files;
    size_t nfiles;
    char **args;
    size_t nargs;
    uint8_t *stdin_data;
    size_t stdin_len;
    int64_t run_timeout_ms;
    int64_t compile_timeout_ms;
    int64_t run_memory_bytes;
    int64_t compile_memory_bytes;
    int64_t run_cpu_ms;     /* Piston's run_cpu_time */
    int64_t compile_cpu_ms; /* Piston's compile_cpu_time */
    /* Test cases (EXEC_REQUEST only, never a session): with any, the run
     * stage runs once per case instead of once.  tests_wall_ms > 0 bounds
     * the wall time of all the cases together (0 or -1: the backend's). */
    struct moat_test_case *tests;
    size_t ntests;
    int64_t tests_wall_ms;
    /* The run stage's (and every test case's) stack, processes and threads,
     * and file size; like the CPU limits, 0 or -1 is "not asked" (the
     * backend's), and the backend refuses one above its own. */
    int64_t run_stack_kib;     /* RLIMIT_STACK, KiB (Judge0's stack_limit) */
    int64_t run_processes;     /* pids.max and RLIMIT_NPROC (max_processes_and_or_threads) */
    int64_t run_file_size_kib; /* RLIMIT_FSIZE, KiB (max_file_size) */
    /* Compiler options, one argv element each, checked by the backend
     * against the language's allow-list (moat_options.h). */
    char **compiler_options;
    size_t ncompiler_options;
    /* The walls the job needs (enum moat_isolation): the tenant's, from the
     * gateway's configuration, never from a request body.  The backend
     * runs the stronger of it and the language's. */
    uint8_t isolation;
};

struct moat_stage_result {
    int present;
    uint8_t *stdout_data;
    size_t stdout_len;
    uint8_t *stderr_data;
    size_t stderr_len;
    uint8_t *output_data; /* stdout and stderr interleaved as read */
    size_t output_len;
    int has_code; /* exit code is null when killed by a signal */
    int32_t code;
    int has_signal;
    int32_t signal;
    uint8_t status; /* enum moat_status */
    char *message;  /* may be NULL */
    uint64_t cpu_ms;
    uint64_t wall_ms;
    uint64_t memory_bytes; /* peak, from the cgroup */
    uint8_t clock;         /* enum moat_clock when status is TO and the backend says which; else 0 */
};

struct moat_exec_result {
    char *language;
    char *version;
    /* The walls that held the job's boxes, e.g. "namespaces+seccomp+landlock"
     * (box_walls); optional (NULL: not said). */
    char *walls;
    struct moat_stage_result compile; /* present only for compiled languages */
    struct moat_stage_result run;     /* absent only when the compile stage failed, or with tests */
    /* With test cases: one run stage per case, in the request's order; fewer
     * than asked when the compile failed (none) or the job's wall budget
     * ran out (the rest were not run). */
    struct moat_stage_result *tests;
    size_t ntests;
};

struct moat_error {
    uint16_t code; /* enum moat_error_code */
    char *message;
};

#define MOAT_MAX_RUNTIMES 256
#define MOAT_MAX_ALIASES  16

struct moat_runtime {
    char *language;
    char *version;
    char **aliases;
    size_t naliases;
    int compiled; /* has a compile stage */
    /* The compiler options the language accepts (its manifest's allow-list,
     * moat_options.h patterns); none: no option is accepted. */
    char **option_patterns;
    size_t noption_patterns;
    /* The isolations this backend can run the language in: bit n for enum
     * moat_isolation n (0 from a caller: namespaces only; a decoded one has
     * at least one bit). */
    uint8_t isolations;
};

/* How busy the backend is now (RUNTIMES tag 2): its batch slots and the
 * queue before them, its session slots.  present 0: not sent. */
struct moat_backend_load {
    int present;
    uint64_t slots, busy;       /* batch slots, and those running a job */
    uint64_t queue_max, queued; /* requests that may wait for a slot, and those waiting */
    uint64_t session_slots, sessions_busy;
};

struct moat_runtimes {
    struct moat_runtime *items;
    size_t count;
    struct moat_backend_load load;
    char *walls; /* optional: the walls of the backend's plain boxes (box_walls) */
};

/* SESSION_STDIN: 1..MOAT_SESSION_CHUNK_MAX bytes. */
struct moat_session_stdin {
    uint8_t *data;
    size_t len;
};

/* SESSION_OUTPUT: what the program wrote, as read from the box's pipe. */
struct moat_session_output {
    uint8_t stream;     /* enum moat_stream */
    uint64_t offset_ms; /* since the session started */
    uint8_t *data;      /* 1..MOAT_SESSION_CHUNK_MAX bytes */
    size_t len;
};

/* SESSION_STAGE: a stage started. */
struct moat_session_stage {
    uint8_t stage; /* enum moat_stage */
    uint64_t offset_ms;
};

/* SESSION_EXIT: a stage ended.  The result is a stage result without output
 * (that went as SESSION_OUTPUT); clock is set exactly when status is TO. */
struct moat_session_exit {
    uint8_t stage; /* enum moat_stage */
    uint64_t offset_ms;
    uint8_t clock; /* enum moat_clock, or 0 */
    struct moat_stage_result result;
};

/* SESSION_OPEN: every EXEC_REQUEST field (same tags and rules; stdin is the
 * initial stdin, written first) and the session's ceilings, all required.
 * idle_ms 0 means no idle clock; stdin_bytes counts the initial stdin. */
struct moat_session_open {
    struct moat_exec_request req;
    uint64_t wall_ms;      /* whole lifetime, compile stage included */
    uint64_t idle_ms;      /* 0 = off */
    uint64_t cpu_ms;       /* the run stage's CPU time */
    uint64_t stdin_bytes;  /* total stdin over the session */
    uint64_t output_bytes; /* per stream, over the whole session */
};

/* SESSION_READY: the box took the plan; the limits in force (idle_ms 0 = off). */
struct moat_session_ready {
    char *language;
    char *version;
    uint64_t wall_ms;
    uint64_t idle_ms;
    uint64_t cpu_ms;
    uint64_t stdin_bytes;
    uint64_t output_bytes;
    char *walls; /* optional, as an exec result's (box_walls) */
};

/* Encoders append to a struct moat_buf (moat_buf.h, in moat_common): start
 * it {0}, free it with moat_buf_free(). */

/*
 * Header handling.  moat_frame_parse_header() reads the first
 * MOAT_FRAME_HEADER_SIZE bytes of buf; it returns 0 on success, -1 with *why
 * set when the header is invalid (bad version, unknown type, oversized
 * payload, reserved flags set).
 */
int moat_frame_parse_header(const uint8_t *buf, size_t len, struct moat_frame_header *h, const char **why);

/*
 * Encoders append one complete frame (header + payload) to out.  They return
 * 0, or -1 with *why set if the message breaks a structural cap or memory ran
 * out.  Nothing is appended on failure.
 */
int moat_encode_exec_request(struct moat_buf *out, uint64_t job_id, const struct moat_exec_request *req, const char **why);
/* 1 if s is a walls string: 1..MOAT_MAX_WALLS_LEN bytes, names of [a-z]
 * joined by single '+' ("namespaces+seccomp+landlock"); 0 if not. */
int moat_walls_valid(const char *s);

int moat_encode_exec_result(struct moat_buf *out, uint64_t job_id, const struct moat_exec_result *res, const char **why);
int moat_encode_error(struct moat_buf *out, uint64_t job_id, uint16_t code, const char *message, const char **why);
int moat_encode_runtimes_query(struct moat_buf *out, uint64_t job_id, const char **why);
int moat_encode_runtimes(struct moat_buf *out, uint64_t job_id, const struct moat_runtimes *rt, const char **why);
int moat_encode_session_stdin(struct moat_buf *out, uint64_t job_id, const uint8_t *data, size_t len, const char **why);
int moat_encode_session_stdin_close(struct moat_buf *out, uint64_t job_id, const char **why);
int moat_encode_session_signal(struct moat_buf *out, uint64_t job_id, int32_t signal, const char **why);
int moat_encode_session_output(struct moat_buf *out, uint64_t job_id, const struct moat_session_output *o, const char **why);
int moat_encode_session_stage(struct moat_buf *out, uint64_t job_id, const struct moat_session_stage *s, const char **why);
int moat_encode_session_exit(struct moat_buf *out, uint64_t job_id, const struct moat_session_exit *e, const char **why);
int moat_encode_session_credit(struct moat_buf *out, uint64_t job_id, uint32_t bytes, const char **why);
int moat_encode_session_open(struct moat_buf *out, uint64_t job_id, const struct moat_session_open *o, const char **why);
int moat_encode_session_ready(struct moat_buf *out, uint64_t job_id, const struct moat_session_ready *r, const char **why);

/*
 * Decoders read a payload (without the header).  They return 0 and fill *out
 * (which the caller frees with the matching *_free), or -1 with *why set and
 * *out left empty.
 */
int moat_decode_exec_request(const uint8_t *payload, size_t len, struct moat_exec_request *out, const char **why);
int moat_decode_exec_result(const uint8_t *payload, size_t len, struct moat_exec_result *out, const char **why);
int moat_decode_error(const uint8_t *payload, size_t len, struct moat_error *out, const char **why);
int moat_decode_runtimes(const uint8_t *payload, size_t len, struct moat_runtimes *out, const char **why);
int moat_decode_session_stdin(const uint8_t *payload, size_t len, struct moat_session_stdin *out, const char **why);
/* SESSION_STDIN_CLOSE has no fields: 0 for an empty payload, else -1. */
int moat_decode_session_stdin_close(const uint8_t *payload, size_t len, const char **why);
int moat_decode_session_signal(const uint8_t *payload, size_t len, int32_t *signal, const char **why);
int moat_decode_session_output(const uint8_t *payload, size_t len, struct moat_session_output *out, const char **why);
int moat_decode_session_stage(const uint8_t *payload, size_t len, struct moat_session_stage *out, const char **why);
int moat_decode_session_exit(const uint8_t *payload, size_t len, struct moat_session_exit *out, const char **why);
int moat_decode_session_credit(const uint8_t *payload, size_t len, uint32_t *bytes, const char **why);
int moat_decode_session_open(const uint8_t *payload, size_t len, struct moat_session_open *out, const char **why);
int moat_decode_session_ready(const uint8_t *payload, size_t len, struct moat_session_ready *out, const char **why);

void moat_exec_request_free(struct moat_exec_request *r);
void moat_exec_result_free(struct moat_exec_result *r);
void moat_error_free(struct moat_error *e);
void moat_runtimes_free(struct moat_runtimes *rt);
void moat_session_stdin_free(struct moat_session_stdin *s);
void moat_session_output_free(struct moat_session_output *o);
void moat_session_exit_free(struct moat_session_exit *e);
void moat_session_open_free(struct moat_session_open *o);
void moat_session_ready_free(struct moat_session_ready *r);

/* 1 if signal is on SESSION_SIGNAL's allow-list (enum moat_signal). */
int moat_session_signal_allowed(int32_t signal);

/* The CPU time a result's stages used together (compile, run, every test case), ms. */
uint64_t moat_exec_result_cpu_ms(const struct moat_exec_result *res);

/* "RE", "SG", ... or NULL for MOAT_STATUS_OK; ML maps to "SG" (Piston shape). */
const char *moat_status_piston(uint8_t status);
/* Distinct names for logs and backend results: "OK", "RE", ..., "ML". */
const char *moat_status_name(uint8_t status);
/* "wall", "idle", "cpu" (enum moat_clock), or NULL for 0 or an unknown clock. */
const char *moat_clock_name(uint8_t clock);

#endif /* MOAT_PROTO_H */
