/*
 * moat_limits.h - the backend's named limits and server defaults in one place.
 * A request may lower any of them, never raise one (Piston's rule).
 */
#ifndef MOAT_MOAT_LIMITS_H
#define MOAT_MOAT_LIMITS_H

#include <stdint.h>

#define MIB (1024ull * 1024ull)

/* run stage */
#define DEFAULT_RUN_WALL_MS 3000
#define DEFAULT_RUN_CPU_MS  3000
#define DEFAULT_RUN_MEMORY  (256 * MIB)
#define DEFAULT_RUN_PIDS    64
/* compile stage */
#define DEFAULT_COMPILE_WALL_MS 10000
#define DEFAULT_COMPILE_CPU_MS  10000
#define DEFAULT_COMPILE_MEMORY  (1024 * MIB)
#define DEFAULT_COMPILE_PIDS    256
/* both */
#define DEFAULT_OUTPUT_CAP (64 * 1024)
#define DEFAULT_FSIZE      (10 * 1000 * 1000)
#define DEFAULT_STACK      (64 * MIB) /* RLIMIT_STACK */
#define DEFAULT_TMP_BYTES  (64 * MIB)
#define DEFAULT_BOX_BYTES  (64 * MIB)
#define DEFAULT_NOFILE     256

/* a live session (session.c): the backend's defaults; a manifest or the
 * server's --limit may change them (session_wall, session_idle, ...), the
 * SESSION_OPEN's ceilings and run_timeout only lower them */
#define DEFAULT_SESSION_WALL_MS      900000 /* whole lifetime, compile included */
#define DEFAULT_SESSION_IDLE_MS      60000  /* no output and no stdin; 0 = off */
#define DEFAULT_SESSION_CPU_MS       30000  /* the run stage's CPU time */
#define DEFAULT_SESSION_STDIN_BYTES  (1 * MIB)
#define DEFAULT_SESSION_OUTPUT_BYTES (1 * MIB) /* per stream */

/* a job's test cases (job.c): their wall time together, and their stdin together */
#define DEFAULT_TESTS_WALL_MS 120000
#define MAX_TESTS_STDIN_BYTES (8 * MIB)

/* requests and connections */
#define MAX_STDIN_BYTES      (1 * MIB)
#define MAX_CODE_BYTES       (4 * MIB)
#define SLOT_UID_BASE        60000
#define MAX_SLOTS            256 /* batch slots (-j) */
#define MAX_SESSIONS         256 /* session slots (--sessions) */
#define DEFAULT_SESSIONS     64
#define MAX_BOXES            (MAX_SLOTS + MAX_SESSIONS) /* slot indexes: session slot n is MAX_SLOTS + n */
#define MAX_CONNECTIONS      (256 + MAX_SESSIONS)       /* batch connections, and one per session */
#define SOCKET_IO_TIMEOUT_MS 10000

_Static_assert(MAX_SESSIONS <= MAX_SLOTS, "a session uid range is a struct uid_range too");

struct stage_limits {
    uint64_t wall_ms;
    uint64_t cpu_ms;
    uint64_t idle_ms; /* 0 = off */
    uint64_t memory_bytes;
    uint32_t pids;
    uint64_t output_cap;
    uint64_t fsize_bytes;
    uint64_t stack_bytes;
};

/* A session's clocks and caps (idle_ms 0 = off). */
struct session_limits {
    uint64_t wall_ms;
    uint64_t idle_ms;
    uint64_t cpu_ms;
    uint64_t stdin_bytes;
    uint64_t output_bytes; /* per stream */
};

#endif
