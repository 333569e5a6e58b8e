/*
 * moat-backend - the privileged half of moat: runs programs in boxes.
 *
 * Theory of operation
 * -------------------
 * moat-backend runs as root and is reachable only through a Unix socket
 * (mode 0660, group of the gateway) whose peers' uids are checked with
 * SO_PEERCRED.  Start-up is a fixed sequence of setup_* steps, each fatal on
 * failure: parse options, load the language manifests, lock this
 * instance's box uids (so a second backend with an overlapping range stops
 * before it touches anything shared), detect cgroup v1 or v2 and create
 * this instance's groups below the backend's own (removing what a crashed
 * run left), check that nothing else on the host uses the box uids, compile
 * the seccomp allow-list, detect Landlock (its ABI logged; a kernel without
 * it, or --no-landlock, runs boxes with one wall fewer, said loudly and in
 * every result's walls), prepare the box slots (one uid, directory and
 * clone stack each), then bind the socket.  The main thread accepts; each
 * connection gets a worker thread that reads typed frames (moat_proto),
 * validates them again, takes a slot and runs the compile and run stages in
 * boxes (box.c), and writes a typed result back.  A connection that opens a
 * live session (session.c) runs it instead, in a slot of the session pool:
 * --sessions slots with uids of their own right after the batch slots',
 * cold until a session takes one (--sessions-warm keeps some warm).
 * SIGTERM/SIGINT stop accepting and end every session (its box killed, its
 * connection closed); in-flight batch jobs finish (bounded by their own
 * limits) before exit.
 *
 * Under systemd (Type=notify, backend/systemd/moat-backend.service) the
 * backend says READY=1 once its socket accepts, and STOPPING=1 when a
 * signal ends the accept loop (moat_notify.h; nothing outside systemd).
 *
 * `moat-backend run` runs one job locally without a socket and prints the
 * result as JSON, for debugging and benchmarks.  It is two processes, so
 * that however it ends its box ends too (see "run: the keeper" below).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <jansson.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "job.h"
#include "landlock.h"
#include "log.h"
#include "moat_buf.h"
#include "moat_io.h"
#include "moat_notify.h"
#include "server.h"
#include "uid_range.h"

#ifndef MOAT_LANGUAGES_DIR
#define MOAT_LANGUAGES_DIR "/usr/local/share/moat/languages"
#endif
#define DEFAULT_RUN_DIR "/run/moat"
#define DEFAULT_SOCKET  "/run/moat/backend.sock"
#define DEFAULT_CG_NAME "moat"
#define SHUTDOWN_WAIT_S 30
#define RUN_FILE_CHUNK  4096  /* read_whole_file grows by at least this */
#define KEEPER_REAP_MS  10000 /* the keeper waits this long for a killed worker's boxes */

#define STR_(x)               #x
#define STR(x)                STR_(x)
#define DEFAULT_UID_BASE_TEXT STR(SLOT_UID_BASE) /* "60000", for the usage text */
#define DEFAULT_SESSIONS_TEXT STR(DEFAULT_SESSIONS)
#define MAX_SESSIONS_TEXT     STR(MAX_SESSIONS)

struct options {
    const char *socket_path;
    const char *run_dir;
    const char *lang_dir;
    const char *cg_name;
    const char *group;
    uid_t allowed[16];
    size_t nallowed;
    int slots;
    int sessions;      /* session slots; 0 disables sessions */
    int sessions_warm; /* of them kept warm */
    int queue;
    int verbose;
    long idle_ms;
    json_t *limits;      /* --limit KEY=VALUE pairs */
    long uid_base;       /* slot n runs as uid and gid uid_base + n */
    const char *runsc;   /* --runsc */
    int gvisor_platform; /* enum gvisor_platform_choice */
    int no_landlock;     /* --no-landlock: boxes without the Landlock wall */
};

static void usage(FILE *f)
{
    fprintf(f, "usage: moat-backend [options]            serve on the Unix socket\n"
               "       moat-backend run [options] [run options] FILE...\n"
               "\n"
               "options:\n"
               "  -s, --socket PATH      Unix socket (default " DEFAULT_SOCKET ")\n"
               "  -r, --run-dir DIR      state directory for box slots (default " DEFAULT_RUN_DIR ")\n"
               "  -L, --languages DIR    language manifests (default " MOAT_LANGUAGES_DIR ")\n"
               "  -u, --allow USER|UID   peer allowed to connect (repeatable; root always is)\n"
               "  -g, --group GROUP      group owning the socket (default: root)\n"
               "  -j, --slots N          concurrent batch boxes (default 2 x CPUs)\n"
               "  -q, --queue N          requests that may wait for a slot (default 4 x slots; 0 = none)\n"
               "      --sessions N       concurrent live sessions, in slots of their own (default " DEFAULT_SESSIONS_TEXT ",\n"
               "                         at most " MAX_SESSIONS_TEXT "; 0 = sessions refused as busy); never queued\n"
               "      --sessions-warm N  session slots kept warm (default 0: a session's box is made when\n"
               "                         it opens, a few ms; every warm slot holds a waiting init)\n"
               "  -n, --name NAME        cgroup instance name (default " DEFAULT_CG_NAME ")\n"
               "      --uid-base N       box uids and gids N..N+slots-1 (batch), then N+slots..\n"
               "                         N+slots+sessions-1 (sessions), held exclusively: a range that\n"
               "                         another backend, an account or a process uses is refused\n"
               "                         (default " DEFAULT_UID_BASE_TEXT ")\n"
               "  -o, --limit KEY=VALUE  a server limit, as in a manifest's \"limits\" (repeatable), e.g.\n"
               "                         run_timeout=3000 run_memory=268435456 output=65536 run_processes=64\n"
               "                         session_wall=900000 session_idle=60000 session_cpu=30000\n"
               "                         session_stdin=1048576 session_output=1048576\n"
               "      --idle-timeout MS  kill a box after MS without output or input (default: off;\n"
               "                         a manifest's run_idle_timeout/compile_idle_timeout wins)\n"
               "      --runsc PATH       gVisor's runsc (default " GVISOR_DEFAULT_RUNSC "; gVisor jobs are\n"
               "                         refused when it is missing)\n"
               "      --gvisor-platform auto|ptrace|kvm\n"
               "                         runsc's platform (default auto: kvm where /dev/kvm exists and a\n"
               "                         trivial sandbox runs on it, else ptrace; probed when first needed)\n"
               "      --no-landlock      boxes without the Landlock wall (for comparisons; logged as a\n"
               "                         warning, and every result's walls then lack \"landlock\")\n"
               "  -v, --verbose          debug logging\n"
               "  -h, --help             this text\n"
               "\n"
               "run options:\n"
               "  -l, --language NAME    language or alias (required)\n"
               "  -V, --version SEL      version selector (default *)\n"
               "  -c, --code TEXT        program text instead of FILE\n"
               "  -i, --stdin TEXT       standard input\n"
               "  -a, --arg ARG          program argument (repeatable)\n"
               "      --run-timeout MS   --run-memory BYTES   --compile-timeout MS   --compile-memory BYTES\n"
               "      --isolation namespaces|gvisor   the walls the job needs (a tenant's isolation)\n"
               "see moat-backend(8), moat-languages(5) and moat-protocol(7)\n");
}

/* ---- setup steps ---------------------------------------------------------- */

static void setup_languages(struct backend *b, struct options *o)
{
    struct errbuf e;
    if (o->limits && languages_server_limits(o->limits, &e) != 0)
        fatalx("--limit: %s", e.msg);
    json_decref(o->limits); /* copied into the server limits */
    o->limits = NULL;
    if (languages_load(&b->langs, o->lang_dir, &e) != 0)
        fatalx("%s%s", e.msg,
               strcmp(o->lang_dir, MOAT_LANGUAGES_DIR) == 0 ? " (the installed manifests: cmake --install, or -L DIR; "
                                                              "from a checkout -L backend/languages)"
                                                            : "");
    if (b->langs.count == 0)
        fatalx("no usable language manifests in %s", o->lang_dir);
    for (size_t i = 0; i < b->langs.count; i++) {
        struct language *l = &b->langs.items[i];
        if (o->idle_ms > 0 && l->run_limits.idle_ms == 0)
            l->run_limits.idle_ms = (uint64_t)o->idle_ms;
        if (o->idle_ms > 0 && l->compile_limits.idle_ms == 0)
            l->compile_limits.idle_ms = (uint64_t)o->idle_ms;
        log_info("language %s %s", l->name, l->version);
    }
}

/* The box uids of this instance: the batch slots', then the session
 * slots' right after (none in one-shot runs, or with --sessions 0). */
struct box_uids {
    struct uid_range batch;
    struct uid_range sessions;
};

/* Before anything shared (cgroups, run dir, socket) is touched: a second
 * backend whose range overlaps this one's stops here. */
static void setup_uid_locks(struct box_uids *u, const struct options *o, int sessions)
{
    struct errbuf e;
    if (uid_range_lock(&u->batch, (uid_t)o->uid_base, o->slots, &e) != 0)
        fatalx("%s", e.msg);
    if (sessions > 0 && uid_range_lock(&u->sessions, (uid_t)o->uid_base + (uid_t)o->slots, sessions, &e) != 0)
        fatalx("%s", e.msg);
}

static void uid_check_one(const struct uid_range *u, const char *what)
{
    struct errbuf e;
    if (u->count == 0)
        return;
    if (uid_range_check_unused(u, &e) != 0)
        fatalx("%s", e.msg);
    log_info("box uids and gids %u..%u (%s)", (unsigned)u->first, (unsigned)u->first + (unsigned)u->count - 1, what);
}

/* After setup_cgroups removed what a crashed run of this instance left. */
static void setup_uid_check(const struct box_uids *u)
{
    uid_check_one(&u->batch, "batch slots");
    uid_check_one(&u->sessions, "session slots");
}

static void uid_unlock_all(struct box_uids *u)
{
    uid_range_unlock(&u->batch);
    uid_range_unlock(&u->sessions);
}

/* Every way out after setup_cgroups (a fatal error too) removes the groups
 * and, on v2, puts the own group back as it was; only in the backend itself,
 * never in a child that exits. */
static struct cg_system *exit_cg;
static pid_t exit_cg_pid;

static void teardown_cgroups(void)
{
    struct errbuf e;
    struct cg_system *cg = exit_cg;
    if (cg == NULL || getpid() != exit_cg_pid)
        return;
    exit_cg = NULL; /* one attempt: a failure is reported once */
    if (cg_teardown_instance(cg, &e) != 0)
        log_warnx("cgroups: left behind: %s", e.msg);
}

static void setup_cgroups(struct backend *b, const struct options *o)
{
    struct errbuf e;
    if (cg_detect(&b->cg, "/sys/fs/cgroup", "/proc/self/cgroup", o->cg_name, &e) != 0 || cg_setup_instance(&b->cg, &e) != 0)
        fatalx("cgroups: %s", e.msg);
    exit_cg = &b->cg;
    exit_cg_pid = getpid();
    if (atexit(teardown_cgroups) != 0)
        fatalx("atexit failed");
    if (b->cg.leaf_used)
        log_info("cgroup v2: the processes of %s are in %s until exit (v2 allows none in a group that delegates)", b->cg.own,
                 b->cg.leaf);
    log_info("cgroup v%d, boxes below %s", b->cg.version, b->cg.base[0]);
}

/* After setup_languages: runsc and its platform (gvisor.h).  A language
 * whose manifest asks for gVisor on a backend without runsc is logged and
 * dropped, as one whose runtime is missing; if one remains, the platform is
 * probed now rather than at its first job. */
static void setup_gvisor(struct backend *b, const struct options *o)
{
    size_t kept = 0, gvisor_langs = 0;

    gvisor_setup(&b->gvisor, o->runsc, o->gvisor_platform, o->run_dir);
    for (size_t i = 0; i < b->langs.count; i++) {
        struct language *l = &b->langs.items[i];
        if (l->isolation == MOAT_ISOLATION_GVISOR && !gvisor_installed(&b->gvisor)) {
            log_warnx("language %s %s: its manifest asks for gVisor and runsc is not installed: skipped", l->name, l->version);
            language_free(l);
            continue;
        }
        gvisor_langs += l->isolation == MOAT_ISOLATION_GVISOR;
        b->langs.items[kept++] = *l;
    }
    b->langs.count = kept;
    if (kept == 0)
        fatalx("no usable language manifests in %s", o->lang_dir);
    if (gvisor_langs > 0)
        gvisor_probe_now(&b->gvisor);
}

static void setup_seccomp(struct backend *b)
{
    struct errbuf e;
    if (seccomp_policy_build(&b->seccomp, &e) != 0)
        fatalx("%s", e.msg);
}

/* Does this process hold CAP_NET_ADMIN (a box's init brings up lo with
 * it)?  Read from /proc/self/status's CapEff: no library for one bit. */
static int has_net_admin(void)
{
    char line[256];
    unsigned long long eff = 0;
    int found = 0;
    FILE *f = fopen("/proc/self/status", "re");

    if (f == NULL)
        return 1; /* unknown: say nothing */
    while (!found && fgets(line, sizeof(line), f) != NULL)
        found = sscanf(line, "CapEff: %llx", &eff) == 1;
    fclose(f);
    return !found || (eff >> 12 & 1) != 0; /* CAP_NET_ADMIN is 12 */
}

/* Before the slots: every box made from now on gets the ABI found here. */
static void setup_landlock(const struct options *o)
{
    char why[128];
    int abi = landlock_setup(!o->no_landlock, why, sizeof(why));
    if (abi > 0)
        log_info("landlock: ABI %d", abi);
    else
        log_warnx("landlock: not available (%s) - one wall missing", why);
    log_info("walls: %s", box_walls(MOAT_ISOLATION_NAMESPACES));
    if (!has_net_admin())
        log_warnx("no CAP_NET_ADMIN: boxes get no loopback (a program cannot serve and call itself on 127.0.0.1); "
                  "every other address is unreachable either way");
}

static void setup_slots(struct backend *b, const struct options *o, const struct box_uids *u, int sessions)
{
    struct errbuf e;
    if (mkdir(o->run_dir, 0755) != 0 && errno != EEXIST)
        fatal("mkdir %s", o->run_dir);
    if (chmod(o->run_dir, 0755) != 0)
        fatal("chmod %s", o->run_dir);
    if (pool_init_at(&b->pool, o->slots, o->queue, &u->batch, o->run_dir, &b->cg, &b->seccomp, &e) != 0)
        fatalx("slots: %s", e.msg);
    if (pool_init_sessions(&b->sessions, sessions, o->sessions_warm, &u->sessions, o->run_dir, &b->cg, &b->seccomp, &e) != 0)
        fatalx("session slots: %s", e.msg);
}

static void shutdown_slots(struct backend *b)
{
    pool_shutdown(&b->sessions);
    pool_shutdown(&b->pool);
}

/* SIGTERM, SIGINT and SIGHUP (and SIGCHLD if asked) read from a signalfd;
 * blocked before any thread starts, so only the signalfd sees them. */
static int signals_fd(int with_sigchld)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    if (with_sigchld)
        sigaddset(&set, SIGCHLD);
    if (pthread_sigmask(SIG_BLOCK, &set, NULL) != 0)
        fatalx("pthread_sigmask failed");
    int fd = signalfd(-1, &set, SFD_CLOEXEC);
    if (fd < 0)
        fatal("signalfd");
    signal(SIGPIPE, SIG_IGN);
    return fd;
}

static void setup_socket(struct server *srv, struct backend *b, struct options *o)
{
    struct errbuf e;
    gid_t gid = 0;
    if (o->group) {
        struct group *g = getgrnam(o->group);
        if (g == NULL)
            fatalx("unknown group %s", o->group);
        gid = g->gr_gid;
    }
    memset(srv, 0, sizeof(*srv));
    srv->b = b;
    srv->allowed = o->allowed;
    srv->nallowed = o->nallowed;
    if (server_listen(srv, o->socket_path, gid, &e) != 0)
        fatalx("%s", e.msg);
    log_info("listening on %s", o->socket_path);
}

/* ---- options ---------------------------------------------------------------- */

static int parse_uint(const char *s, long max, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < 0 || v > max)
        return -1;
    *out = v;
    return 0;
}

static void add_allowed(struct options *o, const char *who)
{
    long uid;
    if (o->nallowed >= sizeof(o->allowed) / sizeof(o->allowed[0]))
        fatalx("too many --allow entries");
    if (parse_uint(who, 0x7fffffff, &uid) != 0) {
        struct passwd *pw = getpwnam(who);
        if (pw == NULL)
            fatalx("--allow: unknown user %s", who);
        uid = pw->pw_uid;
    }
    o->allowed[o->nallowed++] = (uid_t)uid;
}

enum {
    OPT_RUN_TIMEOUT = 256,
    OPT_RUN_MEMORY,
    OPT_COMPILE_TIMEOUT,
    OPT_COMPILE_MEMORY,
    OPT_IDLE_TIMEOUT,
    OPT_UID_BASE,
    OPT_SESSIONS,
    OPT_SESSIONS_WARM,
    OPT_RUNSC,
    OPT_GVISOR_PLATFORM,
    OPT_ISOLATION,
    OPT_NO_LANDLOCK
};

static const struct option long_opts[] = {
    {"socket", required_argument, NULL, 's'},
    {"run-dir", required_argument, NULL, 'r'},
    {"languages", required_argument, NULL, 'L'},
    {"allow", required_argument, NULL, 'u'},
    {"group", required_argument, NULL, 'g'},
    {"slots", required_argument, NULL, 'j'},
    {"queue", required_argument, NULL, 'q'},
    {"limit", required_argument, NULL, 'o'},
    {"name", required_argument, NULL, 'n'},
    {"verbose", no_argument, NULL, 'v'},
    {"help", no_argument, NULL, 'h'},
    {"language", required_argument, NULL, 'l'},
    {"version", required_argument, NULL, 'V'},
    {"code", required_argument, NULL, 'c'},
    {"stdin", required_argument, NULL, 'i'},
    {"arg", required_argument, NULL, 'a'},
    {"run-timeout", required_argument, NULL, OPT_RUN_TIMEOUT},
    {"run-memory", required_argument, NULL, OPT_RUN_MEMORY},
    {"compile-timeout", required_argument, NULL, OPT_COMPILE_TIMEOUT},
    {"compile-memory", required_argument, NULL, OPT_COMPILE_MEMORY},
    {"idle-timeout", required_argument, NULL, OPT_IDLE_TIMEOUT},
    {"uid-base", required_argument, NULL, OPT_UID_BASE},
    {"sessions", required_argument, NULL, OPT_SESSIONS},
    {"sessions-warm", required_argument, NULL, OPT_SESSIONS_WARM},
    {"runsc", required_argument, NULL, OPT_RUNSC},
    {"gvisor-platform", required_argument, NULL, OPT_GVISOR_PLATFORM},
    {"isolation", required_argument, NULL, OPT_ISOLATION},
    {"no-landlock", no_argument, NULL, OPT_NO_LANDLOCK},
    {NULL, 0, NULL, 0},
};

/* ---- one-shot run ------------------------------------------------------------ */

/* A source file for `run`: the whole of it in *data (malloc'ed), or -1 with
 * errno (EFBIG once it reaches MAX_CODE_BYTES, which job.c refuses anyway). */
static int read_whole_file(const char *path, uint8_t **data, size_t *len)
{
    struct moat_buf b = {NULL, 0, 0};
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    if (fd < 0)
        return -1;
    for (;;) {
        if (moat_buf_reserve(&b, RUN_FILE_CHUNK) != 0) {
            errno = ENOMEM;
            break;
        }
        size_t want = b.cap - b.len;
        if (want > MAX_CODE_BYTES - b.len)
            want = MAX_CODE_BYTES - b.len;
        ssize_t r = moat_read_full(fd, b.data + b.len, want);
        if (r < 0)
            break;
        b.len += (size_t)r;
        if ((size_t)r < want) { /* end of file */
            close(fd);
            *data = b.data;
            *len = b.len;
            return 0;
        }
        if (b.len == MAX_CODE_BYTES) {
            errno = EFBIG;
            break;
        }
    }
    int saved = errno;
    close(fd);
    moat_buf_free(&b);
    errno = saved;
    return -1;
}

static json_t *bytes_json(const uint8_t *data, size_t len)
{
    json_t *s = json_stringn_nocheck((const char *)(data ? data : (const uint8_t *)""), len);
    return s ? s : json_null();
}

static json_t *stage_json(const struct moat_stage_result *st)
{
    json_t *o = json_object();
    const char *abbrev = st->has_signal ? sigabbrev_np(st->signal) : NULL;
    char signame[32];
    snprintf(signame, sizeof(signame), "SIG%s", abbrev ? abbrev : "UNKNOWN");
    json_object_set_new(o, "stdout", bytes_json(st->stdout_data, st->stdout_len));
    json_object_set_new(o, "stderr", bytes_json(st->stderr_data, st->stderr_len));
    json_object_set_new(o, "output", bytes_json(st->output_data, st->output_len));
    json_object_set_new(o, "code", st->has_code ? json_integer(st->code) : json_null());
    json_object_set_new(o, "signal", st->has_signal ? json_string(signame) : json_null());
    json_object_set_new(o, "message", st->message ? json_string(st->message) : json_null());
    json_object_set_new(o, "status", st->status ? json_string(moat_status_name(st->status)) : json_null());
    json_object_set_new(o, "cpu_time", json_integer((json_int_t)st->cpu_ms));
    json_object_set_new(o, "wall_time", json_integer((json_int_t)st->wall_ms));
    json_object_set_new(o, "memory", json_integer((json_int_t)st->memory_bytes));
    return o;
}

/* Tells the keeper that this worker, its uids locked, sets up (and so owns)
 * the instance's cgroups and run directory from now on. */
static void tell_keeper_instance_owned(int owned_fd)
{
    char c = 'c';
    if (write(owned_fd, &c, 1) != 1)
        fatal("run: tell the keeper");
    close(owned_fd);
}

static int cmd_run(struct backend *b, struct options *o, struct moat_exec_request *req, int argc, char **argv, int optind_,
                   int owned_fd)
{
    static struct box_uids uids; /* held until the boxes are gone */
    struct moat_exec_result res;
    struct job_error je;

    if (req->language == NULL)
        fatalx("run: --language is required");
    if (req->nfiles == 0 && optind_ >= argc)
        fatalx("run: give --code TEXT or at least one FILE");
    for (int i = optind_; i < argc; i++) {
        if (req->nfiles >= MOAT_MAX_FILES)
            fatalx("run: too many files");
        struct moat_file *f = &req->files[req->nfiles];
        if (read_whole_file(argv[i], &f->content, &f->content_len) != 0)
            fatal("run: read %s", argv[i]);
        const char *base = strrchr(argv[i], '/');
        f->name = strdup(base ? base + 1 : argv[i]);
        req->nfiles++;
    }
    setup_languages(b, o);
    setup_gvisor(b, o);
    setup_uid_locks(&uids, o, 0); /* one batch job: no session slots */
    tell_keeper_instance_owned(owned_fd);
    setup_cgroups(b, o);
    setup_uid_check(&uids);
    setup_seccomp(b);
    setup_landlock(o);
    setup_slots(b, o, &uids, 0);
    if (job_run(b, req, &res, &je) != 0) {
        fprintf(stderr, "moat-backend: run: %s\n", je.message);
        gvisor_shutdown(&b->gvisor);
        shutdown_slots(b);
        teardown_cgroups();
        uid_unlock_all(&uids);
        return 2;
    }
    json_t *out = json_object();
    json_object_set_new(out, "language", json_string(res.language));
    json_object_set_new(out, "version", json_string(res.version));
    json_object_set_new(out, "walls", json_string(res.walls));
    if (res.compile.present)
        json_object_set_new(out, "compile", stage_json(&res.compile));
    if (res.run.present)
        json_object_set_new(out, "run", stage_json(&res.run));
    json_dumpf(out, stdout, JSON_INDENT(2) | JSON_ENSURE_ASCII);
    fputc('\n', stdout);
    json_decref(out);
    moat_exec_result_free(&res);
    gvisor_shutdown(&b->gvisor);
    shutdown_slots(b);
    teardown_cgroups();
    uid_unlock_all(&uids);
    return 0;
}

/* ---- run: the keeper ------------------------------------------------------ */

/*
 * `moat-backend run` is two processes.  The keeper (the process the caller
 * started) holds no box, no thread and no cgroup: it blocks SIGTERM, SIGINT,
 * SIGHUP and SIGCHLD into a signalfd, becomes a child subreaper and forks
 * the worker, which runs the job (cmd_run) with those signals still blocked
 * (a terminal's Ctrl-C reaches the whole process group: the keeper alone
 * decides; the box's program gets a clean signal mask from init).  Then:
 *  - the worker exits: its own teardown has run (atexit); its status is the
 *    keeper's.
 *  - a signal: the keeper SIGKILLs the worker.  Every box dies with it: each
 *    init with the thread that cloned it (PR_SET_PDEATHSIG, box_init.c), and
 *    the pid namespace with its init.  The worker killed by anything else (an
 *    OOM kill, a SIGKILL of its pid) is the same case.
 * After a killed worker the keeper reaps the orphaned inits (a subreaper
 * inherits them: when none is left, no box process is) and removes the
 * instance's cgroups as the next backend start would (cg_setup_instance
 * takes over what a killed run left, cg_teardown_instance removes it) and
 * the empty slot directories below the run directory, but only if the
 * worker said it was about to set them up (its uids locked): a worker
 * stopped before that (its uids held by another backend) never touched
 * them, and they may be another backend's.  One line on stderr says what happened; the exit status
 * is 128 + the signal's number, as shells report it.  The keeper itself
 * SIGKILLed cannot clean up: the worker dies with it (PR_SET_PDEATHSIG; the
 * keeper is single-threaded, so its thread's death is its own), the boxes
 * with the worker, and the cgroups left behind are removed by the next start
 * of a backend with this instance name.
 */

static int keeper_signals(void)
{
    int fd = signals_fd(1);
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0)
        fatal("PR_SET_CHILD_SUBREAPER");
    return fd;
}

/* In the worker: die with the keeper, drop the keeper's descriptors, run the job. */
static void worker_main(pid_t keeper, int sig_fd, int owned[2], struct backend *b, struct options *o, struct moat_exec_request *req,
                        int argc, char **argv, int optind_)
{
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != keeper)
        _exit(1); /* the keeper is gone already */
    close(sig_fd);
    close(owned[0]);
    exit(cmd_run(b, o, req, argc, argv, optind_, owned[1]));
}

/* Waits for the worker's end; a signal first kills it.  Returns its wait
 * status and sets *sig to the signal that interrupted the run (0: none). */
static int keeper_wait(pid_t worker, int sig_fd, int *sig)
{
    int status;
    *sig = 0;
    for (;;) {
        struct signalfd_siginfo si;
        ssize_t n = read(sig_fd, &si, sizeof(si));
        if (n < 0 && errno == EINTR)
            continue;
        if (n != (ssize_t)sizeof(si))
            fatal("run: read signalfd");
        if (si.ssi_signo != SIGCHLD) {
            *sig = (int)si.ssi_signo;
            kill(worker, SIGKILL);
        }
        pid_t p = waitpid(worker, &status, *sig ? 0 : WNOHANG);
        if (p == worker)
            return status;
        if (p < 0 && errno != EINTR)
            fatal("run: waitpid");
    }
}

/* Reaps the killed worker's orphaned inits (each one's exit means its pid
 * namespace is gone); bounded, the cgroup removal kills any straggler. */
static void keeper_reap_orphans(void)
{
    uint64_t deadline = box_now_ms() + KEEPER_REAP_MS;
    for (;;) {
        pid_t p = waitpid(-1, NULL, WNOHANG);
        if (p > 0 || (p < 0 && errno == EINTR))
            continue;
        if (p < 0) /* ECHILD: nothing of the worker's is left */
            return;
        if (box_now_ms() >= deadline) {
            log_warnx("run: a process of the killed worker outlived %d ms", KEEPER_REAP_MS);
            return;
        }
        struct timespec ts = {0, 10000000L};
        nanosleep(&ts, NULL);
    }
}

static void keeper_remove_cgroups(const struct options *o)
{
    struct cg_system cg;
    struct errbuf e;
    if (cg_detect(&cg, "/sys/fs/cgroup", "/proc/self/cgroup", o->cg_name, &e) != 0 || cg_setup_instance(&cg, &e) != 0 ||
        cg_teardown_instance(&cg, &e) != 0)
        log_warnx("run: cgroups of instance %s left behind: %s", o->cg_name, e.msg);
}

/* The slot directories a killed worker left (pool_shutdown's rmdirs): empty,
 * as the box roots are mounted only inside the boxes. */
static void keeper_remove_run_dirs(const struct options *o)
{
    char path[PATH_MAX];
    for (int i = 0; i < o->slots; i++) {
        snprintf(path, sizeof(path), "%s/slots/%d/root", o->run_dir, i);
        (void)rmdir(path);
        snprintf(path, sizeof(path), "%s/slots/%d", o->run_dir, i);
        (void)rmdir(path);
    }
    snprintf(path, sizeof(path), "%s/slots", o->run_dir);
    (void)rmdir(path);
    (void)rmdir(o->run_dir); /* if nothing else is in it */
}

static int cmd_run_kept(struct backend *b, struct options *o, struct moat_exec_request *req, int argc, char **argv, int optind_)
{
    int owned[2], sig;
    int sig_fd = keeper_signals();
    if (pipe2(owned, O_CLOEXEC) != 0)
        fatal("pipe");
    pid_t keeper = getpid();
    fflush(NULL);
    pid_t worker = fork();
    if (worker < 0)
        fatal("fork");
    if (worker == 0)
        worker_main(keeper, sig_fd, owned, b, o, req, argc, argv, optind_);
    close(owned[1]);

    int status = keeper_wait(worker, sig_fd, &sig);
    if (sig == 0 && WIFEXITED(status))
        return WEXITSTATUS(status); /* the worker ended the run itself, and tore down */
    int killer = sig ? sig : WIFSIGNALED(status) ? WTERMSIG(status) : SIGKILL;
    char owns;
    keeper_reap_orphans();
    if (read(owned[0], &owns, 1) == 1) {
        keeper_remove_cgroups(o);
        keeper_remove_run_dirs(o);
    }
    const char *abbrev = sigabbrev_np(killer);
    fprintf(stderr, "moat-backend: run: %s by SIG%s: its box was killed\n", sig ? "interrupted" : "worker killed",
            abbrev ? abbrev : "UNKNOWN");
    return 128 + killer;
}

static void add_limit(struct options *o, const char *kv)
{
    const char *eq = strchr(kv, '=');
    long v;
    if (eq == NULL || eq == kv || parse_uint(eq + 1, 0x7fffffffffffL, &v) != 0 || v <= 0)
        fatalx("--limit: expected KEY=POSITIVE-INTEGER, got \"%s\"", kv);
    if (o->limits == NULL && (o->limits = json_object()) == NULL)
        fatalx("out of memory");
    char key[64];
    snprintf(key, sizeof(key), "%.*s", (int)(eq - kv), kv);
    json_object_set_new(o->limits, key, json_integer(v));
}

static long parse_limit_opt(const char *name, const char *v)
{
    long x;
    if (parse_uint(v, 0x7fffffffL, &x) != 0)
        fatalx("--%s: not a non-negative integer: %s", name, v);
    return x;
}

/* One server option (both modes); 1 if ch is not one. */
static int server_option(struct options *o, int ch, char *arg)
{
    long n;

    switch (ch) {
    case 's':
        o->socket_path = arg;
        return 0;
    case 'r':
        o->run_dir = arg;
        return 0;
    case 'L':
        o->lang_dir = arg;
        return 0;
    case 'u':
        add_allowed(o, arg);
        return 0;
    case 'g':
        o->group = arg;
        return 0;
    case 'j':
        if (parse_uint(arg, MAX_SLOTS, &n) != 0 || n < 1)
            fatalx("--slots: expected 1..%d", MAX_SLOTS);
        o->slots = (int)n;
        return 0;
    case 'q':
        if (parse_uint(arg, 100000, &n) != 0)
            fatalx("--queue: expected 0..100000");
        o->queue = (int)n;
        return 0;
    case 'n':
        o->cg_name = arg;
        return 0;
    case 'o':
        add_limit(o, arg);
        return 0;
    case 'v':
        o->verbose = 1;
        return 0;
    case OPT_IDLE_TIMEOUT:
        o->idle_ms = parse_limit_opt("idle-timeout", arg);
        return 0;
    case OPT_UID_BASE:
        if (parse_uint(arg, UID_RANGE_LAST_OK, &n) != 0 || n < 1)
            fatalx("--uid-base: expected 1..%u, got \"%s\"", UID_RANGE_LAST_OK, arg);
        o->uid_base = n;
        return 0;
    case OPT_SESSIONS:
        if (parse_uint(arg, MAX_SESSIONS, &n) != 0)
            fatalx("--sessions: expected 0..%d, got \"%s\"", MAX_SESSIONS, arg);
        o->sessions = (int)n;
        return 0;
    case OPT_SESSIONS_WARM:
        if (parse_uint(arg, MAX_SESSIONS, &n) != 0)
            fatalx("--sessions-warm: expected 0..%d, got \"%s\"", MAX_SESSIONS, arg);
        o->sessions_warm = (int)n;
        return 0;
    case OPT_RUNSC:
        o->runsc = arg;
        return 0;
    case OPT_GVISOR_PLATFORM:
        if (gvisor_parse_platform(arg, &o->gvisor_platform) != 0)
            fatalx("--gvisor-platform: expected auto, ptrace or kvm, got \"%s\"", arg);
        return 0;
    case OPT_NO_LANDLOCK:
        o->no_landlock = 1;
        return 0;
    }
    return 1;
}

/* One run option (the one-shot request); 1 if ch is not one. */
static int run_option(struct moat_exec_request *req, int ch, char *arg)
{
    switch (ch) {
    case 'l':
        req->language = arg;
        return 0;
    case 'V':
        req->version = arg;
        return 0;
    case 'c':
        if (req->nfiles >= MOAT_MAX_FILES)
            fatalx("too many files");
        req->files[req->nfiles].name = strdup("main.code");
        req->files[req->nfiles].content = (uint8_t *)strdup(arg);
        req->files[req->nfiles].content_len = strlen(arg);
        req->nfiles++;
        return 0;
    case 'i':
        req->stdin_data = (uint8_t *)arg;
        req->stdin_len = strlen(arg);
        return 0;
    case 'a':
        if (req->nargs >= MOAT_MAX_ARGS)
            fatalx("too many --arg");
        req->args[req->nargs++] = arg;
        return 0;
    case OPT_RUN_TIMEOUT:
        req->run_timeout_ms = parse_limit_opt("run-timeout", arg);
        return 0;
    case OPT_RUN_MEMORY:
        req->run_memory_bytes = parse_limit_opt("run-memory", arg);
        return 0;
    case OPT_COMPILE_TIMEOUT:
        req->compile_timeout_ms = parse_limit_opt("compile-timeout", arg);
        return 0;
    case OPT_COMPILE_MEMORY:
        req->compile_memory_bytes = parse_limit_opt("compile-memory", arg);
        return 0;
    case OPT_ISOLATION: {
        int iso = moat_isolation_parse(arg);
        if (iso < 0)
            fatalx("--isolation: expected namespaces or gvisor, got \"%s\"", arg);
        req->isolation = (uint8_t)iso;
        return 0;
    }
    }
    return 1;
}

/*
 * Every option, into o and req.  0 to go on, or -1 with *status set when
 * main should exit now (0 after --help, 2 after a bad option).
 */
static int parse_options(int argc, char **argv, struct options *o, struct moat_exec_request *req, int *status)
{
    int ch;

    while ((ch = getopt_long(argc, argv, "s:r:L:u:g:j:q:n:o:vhl:V:c:i:a:", long_opts, NULL)) != -1) {
        if (ch == 'h') {
            usage(stdout);
            *status = 0;
            return -1;
        }
        if (server_option(o, ch, optarg) != 0 && run_option(req, ch, optarg) != 0) {
            usage(stderr);
            *status = 2;
            return -1;
        }
    }
    return 0;
}

/* The one-shot request before any option: no files, version "*", every limit the server's. */
static void request_init(struct moat_exec_request *req)
{
    static struct moat_file files[MOAT_MAX_FILES];
    static char *args[MOAT_MAX_ARGS];

    memset(req, 0, sizeof(*req));
    req->files = files;
    req->args = args;
    req->version = (char *)(uintptr_t) "*";
    req->run_timeout_ms = req->compile_timeout_ms = req->run_memory_bytes = req->compile_memory_bytes = -1;
}

/* Defaults that depend on the machine or on other options: 2 slots a CPU, 4 queued a slot. */
static void resolve_defaults(struct options *o)
{
    if (o->slots == 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        o->slots = cpus > 0 ? (int)(cpus * 2 > MAX_SLOTS ? MAX_SLOTS : cpus * 2) : 2;
    }
    if (o->queue < 0)
        o->queue = o->slots * 4;
}

/* After server_serve returns: stop listening, end the sessions, let in-flight
 * batch jobs finish (bounded), tear down. */
static void shutdown_server(struct server *srv, struct backend *b, const struct options *o)
{
    close(srv->listen_fd);
    unlink(o->socket_path);
    server_stop_reading(srv);
    for (int i = 0; i < SHUTDOWN_WAIT_S * 10 && __atomic_load_n(&srv->active, __ATOMIC_SEQ_CST) > 0; i++) {
        struct timespec ts = {0, 100000000L};
        nanosleep(&ts, NULL);
    }
    gvisor_shutdown(&b->gvisor);
    shutdown_slots(b);
    teardown_cgroups();
    log_info("stopped");
}

/* Serve on the socket until SIGTERM/SIGINT: the setup steps in order, then the accept loop. */
static int serve(struct backend *b, struct options *o)
{
    static struct box_uids uids; /* held until the boxes are gone */
    struct server srv;
    int sig_fd = signals_fd(0);

    setup_languages(b, o);
    setup_gvisor(b, o);
    setup_uid_locks(&uids, o, o->sessions);
    setup_cgroups(b, o);
    setup_uid_check(&uids);
    setup_seccomp(b);
    setup_landlock(o);
    setup_slots(b, o, &uids, o->sessions);
    setup_socket(&srv, b, o);
    log_info("ready: %d slots, queue %d, %d session slots (%d warm)", o->slots, o->queue, o->sessions,
             o->sessions_warm < o->sessions ? o->sessions_warm : o->sessions);
    char status[128];
    snprintf(status, sizeof(status), "READY=1\nSTATUS=walls %s", box_walls(MOAT_ISOLATION_NAMESPACES));
    moat_notify(status); /* the socket listens: a connection is accepted from now on */
    server_serve(&srv, sig_fd);
    moat_notify("STOPPING=1");
    shutdown_server(&srv, b, o);
    uid_unlock_all(&uids); /* every box is gone: the uids are free */
    return 0;
}

int main(int argc, char **argv)
{
    struct options o = {.socket_path = DEFAULT_SOCKET,
                        .run_dir = DEFAULT_RUN_DIR,
                        .lang_dir = MOAT_LANGUAGES_DIR,
                        .cg_name = DEFAULT_CG_NAME,
                        .sessions = DEFAULT_SESSIONS,
                        .queue = -1,
                        .uid_base = SLOT_UID_BASE};
    struct moat_exec_request req;
    static struct backend b;
    int run_mode = 0, status;

    request_init(&req);
    if (argc > 1 && strcmp(argv[1], "run") == 0) {
        run_mode = 1;
        argv++;
        argc--;
    }
    if (parse_options(argc, argv, &o, &req, &status) != 0)
        return status;
    log_init("moat-backend", o.verbose);
    if (geteuid() != 0)
        fatalx("must run as root (it creates namespaces, mounts and cgroups)");
    resolve_defaults(&o);
    signal(SIGPIPE, SIG_IGN);

    if (run_mode)
        return cmd_run_kept(&b, &o, &req, argc, argv, optind);
    if (optind != argc)
        fatalx("unexpected argument %s (see --help)", argv[optind]);
    char err[256];
    if (moat_notify_open(err, sizeof(err)) != 0) /* before any thread: it unsets the variable */
        fatalx("%s", err);
    return serve(&b, &o);
}
