/*
 * moat-callback-sender - the one moat process that connects out to the
 * network: it sends Judge0 callbacks for the gateway (callback_sender.c).
 *
 * Theory of operation
 * -------------------
 * The supervisor (privsep.c, root) starts it with execv, its socket from
 * the gateway's workers as descriptor --fd, and restarts it when it dies.
 * A straight sequence:
 *
 *   load --config as the gateway does at start (still as root, so the
 *      file and the secrets may be root's): the tenants' callback rules
 *      and secrets, the callbacks section's settings
 *   -> drop to --user (fatal on any failure; not root: nothing to drop)
 *   -> libcurl's global set-up (before the filter: it may read files and
 *      probe the system once)
 *   -> confine (confine.c: the gateway's system calls plus outbound
 *      sockets; no programs, no processes)
 *   -> the loop, until the gateway's end of the socket closes.
 *
 * A fresh program, not a fork of the gateway: the gateway's memory (its
 * TLS private key, every tenant's key hashes) is not in this process,
 * which parses what receivers chosen by tenants send back.  SIGHUP (the
 * supervisor passes the gateway's on) loads the configuration again, as
 * the user, like the gateway's reload; one that fails to load keeps the
 * running one.
 */
#include "callbacks/callback_sender.h"
#include "config/config.h"
#include "process/confine.h"
#include "log.h"
#include "common/privdrop.h"

#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>

#include <curl/curl.h>

/* The configuration in force, and its file. */
static struct gw_config config;
static const char *config_path;

static void usage(FILE *fp)
{
    fprintf(fp, "usage: moat-callback-sender --config CONFIG --fd FD [--user USER] [--debug]\n"
                "  started by moat-gateway's supervisor (callbacks section); FD: the gateway's socket\n");
}

/* SIGHUP: the configuration again; SIGTERM/SIGINT: finish and stop. */
static void on_signal(struct cb_sender *s, int sig)
{
    struct gw_config fresh;
    char err[1024];

    if (sig != SIGHUP) {
        cb_sender_stop(s);
        return;
    }
    if (gw_config_load(config_path, &fresh, err, sizeof(err)) != 0) {
        log_warnx("%s: reload failed: %s; keeping the running configuration", __func__, err);
        return;
    }
    if (!fresh.callbacks.enabled) {
        log_warnx("%s: reload: %s has no callbacks section now; keeping the running configuration until a restart", __func__,
                  config_path);
        gw_config_free(&fresh);
        return;
    }
    /* queued callbacks hold their own copies of what they need */
    gw_config_free(&config);
    config = fresh;
    cb_sender_set_config(s, &config);
    log_set_json(config.log_json); /* the gateway's log format, the same file */
    log_info("%s: %s: configuration reloaded", __func__, config_path);
}

static int parse_fd(const char *s)
{
    char *end;
    long v = strtol(s, &end, 10);

    return *end == '\0' && end != s && v >= 0 && v < 65536 ? (int)v : -1;
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {{"config", required_argument, NULL, 'c'}, {"fd", required_argument, NULL, 'f'},
                                             {"user", required_argument, NULL, 'u'},   {"debug", no_argument, NULL, 'd'},
                                             {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0}};
    const char *user = NULL;
    int ch, fd = -1, debug = 0, sigfd, rc;
    char err[1024];
    struct cb_sender *s;
    sigset_t set;

    while ((ch = getopt_long(argc, argv, "c:f:u:dh", longopts, NULL)) != -1) {
        switch (ch) {
        case 'c':
            config_path = optarg;
            break;
        case 'f':
            fd = parse_fd(optarg);
            break;
        case 'u':
            user = optarg;
            break;
        case 'd':
            debug = 1;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 1;
        }
    }
    if (config_path == NULL || fd < 0 || optind != argc) {
        usage(stderr);
        return 1;
    }
    log_init("moat-callback-sender", debug);
    signal(SIGPIPE, SIG_IGN);
    if (gw_config_load(config_path, &config, err, sizeof(err)) != 0)
        fatalx("%s: %s", __func__, err);
    log_set_json(config.log_json);
    if (user != NULL && gw_drop_privileges(user, err, sizeof(err)) != 0)
        fatalx("%s: privilege drop: %s", __func__, err);
    if (!config.callbacks.enabled)
        fatalx("%s: %s has no callbacks section", __func__, config_path);
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        fatalx("%s: curl_global_init failed", __func__);
    sigemptyset(&set);
    sigaddset(&set, SIGHUP);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    if (sigprocmask(SIG_BLOCK, &set, NULL) != 0 || (sigfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK)) < 0)
        fatal("%s: signalfd", __func__);
    if ((s = cb_sender_new(fd, &config)) == NULL)
        fatalx("%s: out of memory", __func__);
    if (gw_confine_callback_sender(err, sizeof(err)) != 0)
        fatalx("%s: confinement: %s", __func__, err);
    log_info("%s: sending callbacks (at most %llu at once, %llu tries each)", __func__,
             (unsigned long long)config.callbacks.max_in_flight, (unsigned long long)config.callbacks.max_tries);
    rc = cb_sender_run(s, sigfd, on_signal);
    cb_sender_free(s);
    curl_global_cleanup();
    gw_config_free(&config);
    return rc == 0 ? 0 : 1;
}
