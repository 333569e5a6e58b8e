/*
 * gvisor.c - runsc present or not, and the platform it runs on (gvisor.h).
 *
 * The probe (auto, /dev/kvm present): a bundle below <run_dir>/gvisor-probe
 * whose process is /bin/true as nobody, run as
 *   runsc --root=<dir>/state --network=none --platform=kvm --ignore-cgroups
 *         run --bundle <dir>/bundle probe
 * in a session of its own (posix_spawn, POSIX_SPAWN_SETSID), stdio on
 * /dev/null.  Exit 0 within GVISOR_PROBE_TIMEOUT_MS: kvm.  Anything else
 * (a non-zero exit, the timeout): ptrace, and the reason is logged.  At the
 * timeout the whole process group gets SIGKILL; runsc's sandbox process
 * is "attached" (it dies with runsc run).
 */
#include "gvisor.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "box.h"
#include "box_internal.h"
#include "log.h"

extern char **environ;

int gvisor_parse_platform(const char *s, int *out)
{
    static const char *const names[] = {"auto", "ptrace", "kvm"};
    for (int i = 0; i < 3; i++)
        if (strcmp(s, names[i]) == 0) {
            *out = i;
            return 0;
        }
    return -1;
}

static void decide(struct gvisor *g, const char *platform)
{
    pthread_mutex_lock(&g->mu);
    snprintf(g->platform, sizeof(g->platform), "%s", platform);
    g->decided = 1;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* The probe's bundle: /bin/true as nobody, no /box. 0 or -1 with *why. */
static int probe_bundle(const struct gvisor *g, char *bundle, size_t size, const char **why)
{
    static char true_path[] = "/bin/true", path_env[] = "PATH=/usr/bin:/bin";
    char *const argv[] = {true_path, NULL}, *const envp[] = {path_env, NULL};
    struct gvisor_stage st = {NULL, argv, envp, 65534, 65534, 1 << 20, 8 << 20, 10, 64, 64};
    char dir[sizeof(g->probe_dir) + 16], config[sizeof(dir) + 16];
    const char *subdirs[] = {g->probe_dir, dir, bundle};

    snprintf(dir, sizeof(dir), "%s/state", g->probe_dir);
    snprintf(bundle, size, "%s/bundle", g->probe_dir);
    snprintf(config, sizeof(config), "%s/config.json", bundle);
    for (int i = 0; i < 3; i++)
        if (mkdir(subdirs[i], 0700) != 0 && errno != EEXIST) {
            *why = "mkdir failed";
            return -1;
        }
    return gvisor_write_bundle(config, &st, why);
}

/* Waits for pid until deadline; its exit status, or -1 after killing its group. */
static int wait_bounded(pid_t pid, uint64_t deadline)
{
    for (;;) {
        int st;
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid)
            return st;
        if (w < 0 && errno != EINTR)
            return -1;
        if (now_ms() >= deadline) {
            kill(-pid, SIGKILL);
            while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
                ;
            return -1;
        }
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

static void set_probe_pid(struct gvisor *g, pid_t pid)
{
    pthread_mutex_lock(&g->mu);
    g->probe_pid = pid;
    pthread_mutex_unlock(&g->mu);
}

/* runsc's state of an earlier probe (killed at its timeout): removed, so
 * the container name is free.  Below the backend's own root-only run dir. */
static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    if (flag == FTW_DP)
        return rmdir(path) != 0 && errno != ENOENT ? -1 : 0;
    return unlink(path) != 0 && errno != ENOENT ? -1 : 0;
}

static void *probe_main(void *arg)
{
    struct gvisor *g = arg;
    char bundle[sizeof(g->probe_dir) + 16];
    struct runsc_cmd cmd;
    const char *why = NULL;
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    sigset_t none, dfl;
    pid_t pid;

    (void)nftw(g->probe_dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
    if (probe_bundle(g, bundle, sizeof(bundle), &why) != 0) {
        log_warnx("gVisor: platform probe: %s: using ptrace", why);
        decide(g, "ptrace");
        return NULL;
    }
    gvisor_runsc_cmd(&cmd, g->runsc, "kvm", g->probe_dir, "probe");
    sigemptyset(&none);
    sigemptyset(&dfl);
    sigaddset(&dfl, SIGPIPE);
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    posix_spawnattr_init(&at);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &dfl);
    uint64_t start = now_ms();
    pthread_mutex_lock(&g->mu);
    int rc = posix_spawn(&pid, g->runsc, &fa, &at, cmd.argv, environ);
    g->probe_pid = rc == 0 ? pid : 0;
    pthread_mutex_unlock(&g->mu);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    if (rc != 0) {
        log_warnx("gVisor: platform probe: cannot start %s: %s: using ptrace", g->runsc, strerror(rc));
        decide(g, "ptrace");
        return NULL;
    }
    int st = wait_bounded(pid, start + GVISOR_PROBE_TIMEOUT_MS);
    set_probe_pid(g, 0);
    if (st < 0)
        log_warnx("gVisor: runsc on kvm did not finish a trivial sandbox in %d ms (killed): using ptrace", GVISOR_PROBE_TIMEOUT_MS);
    else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        log_warnx("gVisor: runsc on kvm failed a trivial sandbox (wait status %d): using ptrace", st);
    else
        log_info("gVisor: runsc on kvm ran a trivial sandbox in %llu ms: using kvm", (unsigned long long)(now_ms() - start));
    decide(g, st == 0 ? "kvm" : "ptrace");
    return NULL;
}

void gvisor_setup(struct gvisor *g, const char *runsc, int choice, const char *run_dir)
{
    struct stat st;

    memset(g, 0, sizeof(*g));
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    if (runsc == NULL)
        runsc = GVISOR_DEFAULT_RUNSC;
    if (runsc[0] != '/' || strlen(runsc) >= sizeof(g->runsc) || stat(runsc, &st) != 0 || !S_ISREG(st.st_mode) ||
        access(runsc, X_OK) != 0) {
        snprintf(g->why_not, sizeof(g->why_not), "runsc is not installed on the backend (no executable %.120s)", runsc);
        log_info("gVisor: %s: gVisor jobs will be refused", g->why_not);
        decide(g, "none");
        return;
    }
    snprintf(g->runsc, sizeof(g->runsc), "%s", runsc);
    int kvm = access("/dev/kvm", R_OK | W_OK) == 0;
    if (choice == GVISOR_KVM && !kvm)
        fatalx("--gvisor-platform kvm: /dev/kvm is not usable");
    if (choice != GVISOR_AUTO || !kvm) {
        log_info("gVisor: %s, platform %s (%s)", g->runsc, choice == GVISOR_KVM ? "kvm" : "ptrace",
                 choice != GVISOR_AUTO ? "--gvisor-platform" : "auto: no /dev/kvm");
        decide(g, choice == GVISOR_KVM ? "kvm" : "ptrace");
        return;
    }
    snprintf(g->probe_dir, sizeof(g->probe_dir), "%s/gvisor-probe", run_dir);
    log_info("gVisor: %s; platform auto: /dev/kvm present, kvm is probed when gVisor is first needed", g->runsc);
}

void gvisor_probe_now(struct gvisor *g)
{
    pthread_mutex_lock(&g->mu);
    int start = !g->decided && !g->probing;
    if (start)
        g->probing = 1;
    pthread_mutex_unlock(&g->mu);
    if (!start)
        return;
    log_info("gVisor: probing the kvm platform (at most %d ms)", GVISOR_PROBE_TIMEOUT_MS);
    if (pthread_create(&g->probe, NULL, probe_main, g) != 0) {
        log_warnx("gVisor: cannot start the platform probe: using ptrace");
        pthread_mutex_lock(&g->mu);
        g->probing = 0;
        pthread_mutex_unlock(&g->mu);
        decide(g, "ptrace");
    }
}

int gvisor_installed(const struct gvisor *g)
{
    return g->runsc[0] != '\0';
}

int gvisor_get(struct gvisor *g, const char **runsc, const char **platform, const char **why)
{
    if (!gvisor_installed(g)) {
        *why = g->why_not;
        return -1;
    }
    gvisor_probe_now(g);
    pthread_mutex_lock(&g->mu);
    while (!g->decided)
        pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
    *runsc = g->runsc;
    *platform = g->platform;
    return 0;
}

/* A probe still running is cut short: its runsc's group killed, the thread joined. */
void gvisor_shutdown(struct gvisor *g)
{
    pthread_mutex_lock(&g->mu);
    int probing = g->probing;
    if (g->probe_pid > 0)
        kill(-g->probe_pid, SIGKILL);
    pthread_mutex_unlock(&g->mu);
    if (probing)
        pthread_join(g->probe, NULL);
}
