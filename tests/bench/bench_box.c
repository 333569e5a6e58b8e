/*
 * bench_box - box lifecycle cost against bare exec and bubblewrap, in one run.
 *
 *   bench_box [-n RUNS] [-c CONCURRENCY] [-m ROUNDS]
 *
 * Sequential part: RUNS times `python3 -B main.py` (main.py is `pass`)
 *   bare    fork + execve, output to a pipe, waitpid
 *   moat    job_run(): slot, /box tmpfs, namespaces, pivot_root, cgroup,
 *           seccomp, supervise, cgroup removal, unmount - the whole lifecycle
 *   bwrap   bwrap --unshare-all with read-only /usr (if installed)
 * Concurrent part: CONCURRENCY threads, ROUNDS runs each, bare vs moat,
 * reported as execs per second.
 *
 * Prints mean and median per run and the ratios against bare exec measured
 * in the same run.  Needs root (it makes real boxes).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "job.h"
#include "uid_range.h"
#include "log.h"

#ifndef MOAT_SOURCE_DIR
#define MOAT_SOURCE_DIR "."
#endif
#define PYTHON     "/usr/bin/python3.11"
#define SCRIPT_DIR "/run/moat-bench-files"
#define SCRIPT     SCRIPT_DIR "/main.py"

static struct backend backend;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* fork + execve argv with stdout/stderr to a pipe that is drained. */
static int spawn_wait(char *const argv[])
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int null = open("/dev/null", O_RDONLY);
        dup2(null, 0);
        dup2(p[1], 1);
        dup2(p[1], 2);
        static char path[] = "PATH=/usr/bin:/bin", lang[] = "LANG=C.UTF-8";
        char *envp[] = {path, lang, NULL};
        execve(argv[0], argv, envp);
        _exit(127);
    }
    close(p[1]);
    char buf[4096];
    while (read(p[0], buf, sizeof(buf)) > 0)
        ;
    close(p[0]);
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

static const char *const bare_tmpl[] = {PYTHON, "-B", SCRIPT, NULL};
static const char *const bwrap_tmpl[] = {"/usr/bin/bwrap",
                                         "--unshare-all",
                                         "--die-with-parent",
                                         "--ro-bind",
                                         "/usr",
                                         "/usr",
                                         "--symlink",
                                         "usr/bin",
                                         "/bin",
                                         "--symlink",
                                         "usr/lib",
                                         "/lib",
                                         "--symlink",
                                         "usr/lib64",
                                         "/lib64",
                                         "--proc",
                                         "/proc",
                                         "--dev",
                                         "/dev",
                                         "--tmpfs",
                                         "/tmp",
                                         "--ro-bind",
                                         SCRIPT,
                                         "/box/main.py",
                                         "--chdir",
                                         "/box",
                                         PYTHON,
                                         "-B",
                                         "/box/main.py",
                                         NULL};

static char **bare_argv, **bwrap_argv;

/* A mutable copy of a NULL-terminated list of literals, for execve. */
static char **argv_dup(const char *const *src)
{
    size_t n = 0;
    while (src[n])
        n++;
    char **v = calloc(n + 1, sizeof(char *));
    for (size_t i = 0; v && i < n; i++)
        if ((v[i] = strdup(src[i])) == NULL)
            fatalx("out of memory");
    if (v == NULL)
        fatalx("out of memory");
    return v;
}

static int run_bare(void)
{
    return spawn_wait(bare_argv);
}

static int run_bwrap(void)
{
    return spawn_wait(bwrap_argv);
}

static int run_moat(void)
{
    static char lang[] = "python", ver[] = "*", name[] = "main.py";
    static uint8_t code[] = "pass\n";
    struct moat_file file = {name, code, sizeof(code) - 1};
    struct moat_exec_request req = {lang, ver, &file, 1, NULL, 0,  NULL, 0,  -1,   -1, -1, -1,
                                    -1,   -1,  NULL,  0, -1,   -1, -1,   -1, NULL, 0,  0};
    struct moat_exec_result res;
    struct job_error je;
    if (job_run(&backend, &req, &res, &je) != 0) {
        fprintf(stderr, "bench_box: job_run: %s\n", je.message);
        return -1;
    }
    int ok = res.run.present && res.run.status == MOAT_STATUS_OK;
    if (!ok)
        fprintf(stderr, "bench_box: box run failed: %s\n", res.run.message ? res.run.message : "?");
    moat_exec_result_free(&res);
    return ok ? 0 : -1;
}

struct series {
    const char *name;
    int (*fn)(void);
    double *t;
    double mean_ms, median_ms;
};

/* Runs the series interleaved (a b c a b c ...) so drift in machine load
 * hits them all alike. */
static int measure(struct series *ser, int nser, int runs)
{
    for (int k = 0; k < nser; k++) {
        if ((ser[k].t = calloc((size_t)runs, sizeof(double))) == NULL)
            return -1;
        for (int i = 0; i < 3; i++) /* warm caches */
            if (ser[k].fn() != 0)
                return -1;
    }
    for (int i = 0; i < runs; i++) {
        for (int k = 0; k < nser; k++) {
            double a = now_s();
            if (ser[k].fn() != 0)
                return -1;
            ser[k].t[i] = (now_s() - a) * 1000.0;
        }
    }
    for (int k = 0; k < nser; k++) {
        double sum = 0;
        for (int i = 0; i < runs; i++)
            sum += ser[k].t[i];
        qsort(ser[k].t, (size_t)runs, sizeof(double), cmp_double);
        ser[k].mean_ms = sum / runs;
        ser[k].median_ms = ser[k].t[runs / 2];
        free(ser[k].t);
    }
    return 0;
}

struct worker_arg {
    int (*fn)(void);
    int rounds;
    int failed;
};

static void *worker(void *p)
{
    struct worker_arg *w = p;
    for (int i = 0; i < w->rounds; i++)
        if (w->fn() != 0)
            w->failed = 1;
    return NULL;
}

static double throughput(int (*fn)(void), int conc, int rounds)
{
    pthread_t th[64];
    struct worker_arg args[64];
    double a = now_s();
    for (int i = 0; i < conc; i++) {
        args[i] = (struct worker_arg){fn, rounds, 0};
        pthread_create(&th[i], NULL, worker, &args[i]);
    }
    int failed = 0;
    for (int i = 0; i < conc; i++) {
        pthread_join(th[i], NULL);
        failed |= args[i].failed;
    }
    if (failed)
        return -1;
    return conc * rounds / (now_s() - a);
}

#define BENCH_UID_BASE 1800000000u /* up to 1800000000 + 4096 * MAX_SLOTS: below the tests' 1900000000 */

static void setup(int slots)
{
    struct errbuf e;
    if (languages_load(&backend.langs, MOAT_SOURCE_DIR "/backend/languages", &e) != 0)
        fatalx("%s", e.msg);
    if (cg_detect(&backend.cg, "/sys/fs/cgroup", "/proc/self/cgroup", "moat-bench", &e) != 0 ||
        cg_setup_instance(&backend.cg, &e) != 0)
        fatalx("cgroups: %s", e.msg);
    if (seccomp_policy_build(&backend.seccomp, &e) != 0)
        fatalx("%s", e.msg);
    mkdir("/run/moat-bench", 0755);
    /* box uids of their own, never a running moat-backend's (60000..): a
     * block of MAX_SLOTS per pid above the e2e tests' range */
    static struct uid_range uids;
    uid_t base = (uid_t)(BENCH_UID_BASE + (unsigned)(getpid() % 4096) * MAX_SLOTS);
    if (uid_range_lock(&uids, base, slots, &e) != 0 || uid_range_check_unused(&uids, &e) != 0)
        fatalx("%s", e.msg);
    if (pool_init_at(&backend.pool, slots, slots * 4, &uids, "/run/moat-bench", &backend.cg, &backend.seccomp, &e) != 0)
        fatalx("%s", e.msg);
    mkdir(SCRIPT_DIR, 0755);
    FILE *f = fopen(SCRIPT, "w");
    if (f == NULL || fputs("pass\n", f) < 0 || fclose(f) != 0)
        fatal("write %s", SCRIPT);
}

int main(int argc, char **argv)
{
    int runs = 200, conc = 16, rounds = 10, ch;
    while ((ch = getopt(argc, argv, "n:c:m:h")) != -1) {
        switch (ch) {
        case 'n':
            runs = atoi(optarg);
            break;
        case 'c':
            conc = atoi(optarg);
            break;
        case 'm':
            rounds = atoi(optarg);
            break;
        default:
            fprintf(stderr, "usage: bench_box [-n RUNS] [-c CONCURRENCY] [-m ROUNDS]\n");
            return 2;
        }
    }
    if (runs < 1 || conc < 1 || conc > 64 || rounds < 1) {
        fprintf(stderr, "bench_box: bad arguments\n");
        return 2;
    }
    log_init("bench_box", 0);
    if (geteuid() != 0)
        fatalx("needs root");
    setup(conc);
    bare_argv = argv_dup(bare_tmpl);
    bwrap_argv = argv_dup(bwrap_tmpl);

    struct series ser[3] = {
        {"bare exec", run_bare, NULL, 0, 0}, {"moat box", run_moat, NULL, 0, 0}, {"bubblewrap", run_bwrap, NULL, 0, 0}};
    int nser = access(bwrap_argv[0], X_OK) == 0 ? 3 : 2;
    if (measure(ser, nser, runs) != 0)
        fatalx("a run failed");

    printf("box lifecycle: python3 -B main.py (pass), %d runs each, sequential, interleaved\n", runs);
    for (int k = 0; k < nser; k++)
        printf("  %-12s mean %7.2f ms  median %7.2f ms  ratio (median) %.2fx%s\n", ser[k].name, ser[k].mean_ms, ser[k].median_ms,
               ser[k].median_ms / ser[0].median_ms, k == 1 ? " (goal <= 1.15x)" : "");
    if (nser == 2)
        printf("  bubblewrap   not installed\n");

    double tb = throughput(run_bare, conc, rounds), tm = throughput(run_moat, conc, rounds);
    if (tb < 0 || tm < 0)
        fatalx("a concurrent run failed");
    printf("throughput: %d concurrent, %d runs each\n", conc, rounds);
    printf("  bare exec    %7.1f execs/s\n", tb);
    printf("  moat box     %7.1f execs/s  ratio %.2fx\n", tm, tm / tb);
    return 0;
}
