/*
 * gvisor.h - whether this backend can run gVisor stages (box_gvisor.c), and
 * on which of runsc's platforms.
 *
 * At start-up (gvisor_setup): runsc is an executable at the path given
 * (--runsc, default /usr/bin/runsc) or gVisor jobs are refused with a clear
 * error, never run with one wall fewer.  The platform is the operator's
 * (--gvisor-platform ptrace|kvm) or, with auto, kvm where /dev/kvm exists
 * and a trivial sandbox on it finishes within GVISOR_PROBE_TIMEOUT_MS, else
 * ptrace.  The probe runs on a thread of its own so that nothing waits for
 * it but gVisor jobs (a nested KVM can hang runsc for good, its sandbox
 * spinning a CPU: the probe's runsc is killed with its process group at
 * the timeout), and only when gVisor may be used: at start-up if a
 * language manifest asks for it (gvisor_probe_now), else at the first
 * gVisor job; most backends never run one, and a probe that hangs costs a
 * CPU for the whole timeout.  Each outcome is logged with its reason.
 */
#ifndef MOAT_GVISOR_H
#define MOAT_GVISOR_H

#include <pthread.h>

#define GVISOR_DEFAULT_RUNSC    "/usr/bin/runsc"
#define GVISOR_PROBE_TIMEOUT_MS 10000

enum gvisor_platform_choice { GVISOR_AUTO = 0, GVISOR_PTRACE = 1, GVISOR_KVM = 2 };

struct gvisor {
    char runsc[256];   /* "" when runsc is not installed */
    char why_not[200]; /* when it is not: why, for the client's error */
    char platform[16]; /* "ptrace" or "kvm", once decided */
    char probe_dir[256];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int decided;
    int probing;     /* the probe thread was started (joined at shutdown) */
    pid_t probe_pid; /* its runsc while it runs */
    pthread_t probe;
};

/* "auto", "ptrace" or "kvm" into *out; -1 for anything else. */
int gvisor_parse_platform(const char *s, int *out);
/* At start-up: check runsc and the platform choice (the probe's files go
 * below run_dir).  Never fails: without runsc, gVisor jobs are refused.
 * Fatal only for an explicit kvm without /dev/kvm. */
void gvisor_setup(struct gvisor *g, const char *runsc, int choice, const char *run_dir);
/* Starts the platform probe now if it is due and not started. */
void gvisor_probe_now(struct gvisor *g);
/* 1 if runsc is installed (the runtimes list), else 0. */
int gvisor_installed(const struct gvisor *g);
/* For a gVisor job: 0 with *runsc and *platform (valid until shutdown),
 * waiting for the platform probe if it still runs; -1 with *why. */
int gvisor_get(struct gvisor *g, const char **runsc, const char **platform, const char **why);
void gvisor_shutdown(struct gvisor *g);

#endif
