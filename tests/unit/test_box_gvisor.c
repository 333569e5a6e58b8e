/*
 * test_box_gvisor.c - what a gVisor box's init gives runsc (box_gvisor.c):
 * the OCI bundle read back with jansson (every field the program's walls
 * depend on, and user strings that would break the JSON staying strings),
 * runsc's command line, and runsc's exit status turned back into the
 * program's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "box.h"
#include "box_internal.h"

static char config_path[64];

static json_t *write_and_load(const struct gvisor_stage *g)
{
    const char *what = NULL;
    json_error_t err;

    assert_int_equal(gvisor_write_bundle(config_path, g, &what), 0);
    json_t *root = json_load_file(config_path, JSON_REJECT_DUPLICATES, &err);
    if (root == NULL)
        fail_msg("config.json is not JSON: %s", err.text);
    return root;
}

static void test_bundle(void **state)
{
    char a0[] = "/usr/bin/python3", a1[] = "a\"b\\c\n\x01", a2[] = "\", \"user\": {\"uid\": 0}, \"x\": \"", a3[] = "";
    char e0[] = "PATH=/usr/bin:/bin";
    char *argv[] = {a0, a1, a2, a3, NULL}, *envp[] = {e0, NULL};
    struct gvisor_stage g = {"/box", argv, envp, 60001, 60001, 10000000, 64 << 20, 4, 256, 64};

    (void)state;
    json_t *root = write_and_load(&g);
    json_t *p = json_object_get(root, "process");
    /* the program's argv and env byte for byte: nothing a user string holds becomes a field */
    json_t *args = json_object_get(p, "args");
    assert_int_equal(json_array_size(args), 4);
    for (size_t i = 0; i < 4; i++)
        assert_string_equal(json_string_value(json_array_get(args, i)), argv[i]);
    assert_string_equal(json_string_value(json_array_get(json_object_get(p, "env"), 0)), e0);
    /* who it runs as: the stage's uid and gid (box_init.c: 0 of rootless runsc's namespace), no
     * capability, no privilege to gain */
    assert_int_equal(json_integer_value(json_object_get(json_object_get(p, "user"), "uid")), 60001);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(p, "user"), "gid")), 60001);
    assert_true(json_is_true(json_object_get(p, "noNewPrivileges")));
    json_t *caps = json_object_get(p, "capabilities");
    const char *sets[] = {"bounding", "effective", "inheritable", "permitted", "ambient"};
    for (size_t i = 0; i < 5; i++) {
        assert_true(json_is_array(json_object_get(caps, sets[i])));
        assert_int_equal(json_array_size(json_object_get(caps, sets[i])), 0);
    }
    assert_string_equal(json_string_value(json_object_get(p, "cwd")), "/box");
    /* its limits inside gVisor (soft = hard), by name */
    size_t i;
    json_t *r, *lims = json_object();
    json_array_foreach(json_object_get(p, "rlimits"), i, r)
    {
        assert_true(json_equal(json_object_get(r, "soft"), json_object_get(r, "hard")));
        json_object_set(lims, json_string_value(json_object_get(r, "type")), json_object_get(r, "hard"));
    }
    assert_int_equal(json_integer_value(json_object_get(lims, "RLIMIT_NPROC")), 64);
    assert_int_equal(json_integer_value(json_object_get(lims, "RLIMIT_FSIZE")), 10000000);
    assert_int_equal(json_integer_value(json_object_get(lims, "RLIMIT_NOFILE")), 256);
    assert_int_equal(json_integer_value(json_object_get(lims, "RLIMIT_CPU")), 4);
    assert_int_equal(json_integer_value(json_object_get(lims, "RLIMIT_CORE")), 0);
    json_decref(lims);
    /* the root not remounted by runsc (rootless, it could not keep the box's locked nosuid and
     * nodev: the box's binds and owners keep it read-only), /box the one read-write bind, gVisor's
     * own /proc and /tmp */
    assert_true(json_is_false(json_object_get(json_object_get(root, "root"), "readonly")));
    assert_string_equal(json_string_value(json_object_get(json_object_get(root, "root"), "path")), "/");
    size_t binds = 0;
    json_t *m;
    json_array_foreach(json_object_get(root, "mounts"), i, m)
    {
        const char *type = json_string_value(json_object_get(m, "type"));
        if (strcmp(type, "bind") == 0) {
            binds++;
            assert_string_equal(json_string_value(json_object_get(m, "destination")), "/box");
            assert_string_equal(json_string_value(json_object_get(m, "source")), "/box");
        } else {
            assert_true(strcmp(type, "proc") == 0 || strcmp(type, "tmpfs") == 0);
        }
    }
    assert_int_equal(binds, 1);
    /* a network namespace of its own: none named, so runsc makes one (with --network=none) */
    json_t *ns;
    int has_net = 0;
    json_array_foreach(json_object_get(json_object_get(root, "linux"), "namespaces"), i, ns)
    {
        assert_null(json_object_get(ns, "path"));
        has_net |= strcmp(json_string_value(json_object_get(ns, "type")), "network") == 0;
    }
    assert_true(has_net);
    json_decref(root);

    /* the platform probe's bundle: no /box, cwd / */
    g.box = NULL;
    root = write_and_load(&g);
    assert_string_equal(json_string_value(json_object_get(json_object_get(root, "process"), "cwd")), "/");
    json_array_foreach(json_object_get(root, "mounts"), i, m)
        assert_string_not_equal(json_string_value(json_object_get(m, "type")), "bind");
    json_decref(root);
}

static void test_runsc_command_line(void **state)
{
    struct runsc_cmd c;
    const char *want[] = {"/usr/bin/runsc",
                          "--rootless",
                          "--root=/tmp/.moat-gvisor/state",
                          "--network=none",
                          "--platform=ptrace",
                          "--ignore-cgroups",
                          "--debug",
                          "--debug-log=/tmp/.moat-gvisor/run.log",
                          "--debug-command=run",
                          "run",
                          "--bundle",
                          "/tmp/.moat-gvisor/bundle",
                          "run",
                          NULL};

    (void)state;
    gvisor_runsc_cmd(&c, "/usr/bin/runsc", "ptrace", GVISOR_DIR, "run");
    for (size_t i = 0; want[i]; i++)
        assert_string_equal(c.argv[i], want[i]);
    assert_null(c.argv[13]);

    /* a session's signal: runsc kill, rootless, on the same state */
    const char *kill_want[] = {"/usr/bin/runsc", "--rootless", "--root=/tmp/.moat-gvisor/state", "kill", "run", "15", NULL};
    gvisor_kill_cmd(&c, "/usr/bin/runsc", GVISOR_DIR, "run", 15);
    for (size_t i = 0; kill_want[i]; i++)
        assert_string_equal(c.argv[i], kill_want[i]);
    assert_null(c.argv[6]);
}

/* Writes text to a fresh log file and returns gvisor_wait_status's answer for runsc's status. */
static int wait_status_with_log(int status, const char *text)
{
    char path[64];
    snprintf(path, sizeof(path), "/tmp/moat-test-gvisor-log-%d", (int)getpid());
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    int st = gvisor_wait_status(status, path);
    unlink(path);
    return st;
}

static void test_wait_status(void **state)
{
    static const char head[] = "I1202 01:25:35.000000    1363 main.go:99] Spec.Process.Args: [x]\n";
    char log[1024];

    (void)state;
    /* the status runsc logged last is the program's: a signal death ... */
    snprintf(log, sizeof(log), "%sI1202 01:25:35.069047    1363 main.go:266] Exiting with status: 9\n", head);
    int st = wait_status_with_log(137 << 8, log);
    assert_true(WIFSIGNALED(st));
    assert_int_equal(WTERMSIG(st), 9);
    /* ... or an exit of 129..192 of its own, which runsc's exit code cannot tell apart (S36) */
    snprintf(log, sizeof(log), "%sI1202 01:25:35.069047    1363 main.go:266] Exiting with status: 35072\n", head);
    st = wait_status_with_log(137 << 8, log);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 137);
    /* rootless: the outer process's warnings that it could not forward a signal may follow */
    snprintf(log, sizeof(log),
             "%sI1202 01:25:35.069047    1363 main.go:266] Exiting with status: 11\n"
             "W1202 01:25:35.070000    1359 namespace.go:297] Error forwarding signal child exited to child (PID 1363)\n"
             "W1202 01:25:35.070100    1359 namespace.go:297] Error forwarding signal urgent I/O condition to child (PID 1363)\n",
             head);
    st = wait_status_with_log(139 << 8, log);
    assert_true(WIFSIGNALED(st));
    assert_int_equal(WTERMSIG(st), 11);
    /* no final status line (runsc's own failure, a job's argv quoting one earlier, a bad one):
     * runsc's exit code as it is, 128+N never read as a signal */
    const char *const no[] = {
        "",
        "I1202 main.go:266] Exiting with status: 9\nI1202 main.go:300] something after\n",
        /* only that warning may follow, and only a few of them */
        "I1202 main.go:266] Exiting with status: 9\nW1202 main.go:297] Error forwarding signal x to child (PID 1)\n",
        "I1202 main.go:266] Exiting with status: 9\n"
        "W1 1 namespace.go:297] Error forwarding signal a to child (PID 1)\nW1 1 namespace.go:297] Error forwarding signal b to "
        "child (PID 1)\n"
        "W1 1 namespace.go:297] Error forwarding signal c to child (PID 1)\nW1 1 namespace.go:297] Error forwarding signal d to "
        "child (PID 1)\n"
        "W1 1 namespace.go:297] Error forwarding signal e to child (PID 1)\n",
        "I1202 main.go:266] Exiting with status: 9x\n",
        "I1202 main.go:266] Exiting with status: 127\n", /* stopped: not an end */
        "I1202 main.go:266] Exiting with status: 65536\n",
        "I1202 main.go:266] Exiting with status: \n",
        "Exiting with status: 9\n",
    };
    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++) {
        st = wait_status_with_log(139 << 8, no[i]);
        assert_true(WIFEXITED(st));
        assert_int_equal(WEXITSTATUS(st), 139);
    }
    /* no log at all */
    st = gvisor_wait_status(139 << 8, "/nonexistent/run.log");
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 139);
    /* runsc itself killed (a limit, the host): as it is */
    assert_int_equal(gvisor_wait_status(SIGKILL, "/nonexistent/run.log"), SIGKILL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bundle),
        cmocka_unit_test(test_runsc_command_line),
        cmocka_unit_test(test_wait_status),
    };
    snprintf(config_path, sizeof(config_path), "/tmp/moat-test-gvisor-%d.json", (int)getpid());
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    unlink(config_path);
    return rc;
}
