/*
 * test_cgroup_v2.c - backend/cgroup.c against fake cgroupfs trees.
 *
 * Each test gets a fresh mkdtemp(3) directory holding a fake cgroup mount
 * (<tmp>/fs) and a fake /proc/self/cgroup (<tmp>/self_cgroup).  A normal
 * filesystem does not grow control files on mkdir, and cgroup.c opens them
 * O_WRONLY without O_CREAT, so the tests create every control file a call
 * touches beforehand; regular files then simply record what was written.
 *
 * Mostly the v2 (unified) path; v1 detection, limits and usage are covered
 * at the end.  Nothing here needs root or a real cgroupfs.
 *
 * Safety: cg_box_destroy()/cg_box_kill() SIGKILL every pid listed in
 * cgroup.procs.  The tests never call them on a box whose fake cgroup.procs
 * holds a pid.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cgroup.h"

struct fx {
    char tmp[512];
    char fs[PATH_MAX];   /* the fake cgroup mount root */
    char self[PATH_MAX]; /* the fake /proc/self/cgroup */
};

/* ---- helpers ------------------------------------------------------------ */

static void mkdirs(const char *path)
{
    char buf[PATH_MAX];
    snprintf(buf, sizeof(buf), "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            assert_true(mkdir(buf, 0755) == 0 || errno == EEXIST);
            *p = '/';
        }
    }
    assert_true(mkdir(buf, 0755) == 0 || errno == EEXIST);
}

/* Creates (or truncates) dir/name with the given content. */
static void put(const char *dir, const char *name, const char *content)
{
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fputs(content, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
}

/* Reads dir/name; the result lives until the next call. */
static const char *get(const char *dir, const char *name)
{
    static char buf[4096];
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static void join(char *out, size_t size, const char *a, const char *b)
{
    assert_true((size_t)snprintf(out, size, "%s/%s", a, b) < size);
}

static void write_self(const struct fx *f, const char *content)
{
    FILE *fp = fopen(f->self, "w");
    assert_non_null(fp);
    fputs(content, fp);
    fclose(fp);
}

static int rm_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    return type == FTW_DP ? rmdir(path) : unlink(path);
}

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    if (f == NULL)
        return -1;
    const char *t = getenv("TMPDIR");
    snprintf(f->tmp, sizeof(f->tmp), "%s/moat-cgtest-XXXXXX", t && *t ? t : "/tmp");
    if (mkdtemp(f->tmp) == NULL) {
        free(f);
        return -1;
    }
    snprintf(f->fs, sizeof(f->fs), "%s/fs", f->tmp);
    snprintf(f->self, sizeof(f->self), "%s/self_cgroup", f->tmp);
    if (mkdir(f->fs, 0755) != 0) {
        free(f);
        return -1;
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    int rc = nftw(f->tmp, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    free(f);
    return rc;
}

/* A v2 tree: <fs>/cgroup.controllers and our own group /svc/backend with
 * its subtree_control, and the instance group <own>/moat pre-created with
 * its own control files.  own: where the own group's path goes, or NULL. */
static void make_v2_tree(const struct fx *f, struct cg_system *cg, char own_out[PATH_MAX])
{
    char own[PATH_MAX], base[PATH_MAX];
    struct errbuf e = {""};

    put(f->fs, "cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma misc\n");
    join(own, sizeof(own), f->fs, "svc/backend");
    mkdirs(own);
    put(own, "cgroup.subtree_control", "");
    put(own, "cgroup.controllers", "cpuset cpu io memory pids\n");
    put(own, "cgroup.procs", "");
    write_self(f, "0::/svc/backend\n");
    join(base, sizeof(base), own, "moat");
    mkdirs(base);
    put(base, "cgroup.subtree_control", "");
    put(base, "cgroup.procs", "");
    assert_int_equal(cg_detect(cg, f->fs, f->self, "moat", &e), 0);
    if (own_out != NULL)
        snprintf(own_out, PATH_MAX, "%s", own);
}

/* The control files the kernel would create in a new v2 box group. */
static void make_v2_box_files(const char *dir)
{
    put(dir, "memory.max", "");
    put(dir, "memory.swap.max", "");
    put(dir, "pids.max", "");
    put(dir, "cgroup.procs", "");
    put(dir, "cpu.stat", "usage_usec 1500\nuser_usec 1000\nsystem_usec 500\n");
    put(dir, "memory.peak", "12345\n");
    put(dir, "memory.current", "999\n");
    put(dir, "memory.events", "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n");
}

/* ==== v2 detection ======================================================= */

static void test_v2_detect(void **state)
{
    struct fx *f = *state;
    struct cg_system cg;
    struct errbuf e = {""};
    char want[PATH_MAX];

    put(f->fs, "cgroup.controllers", "memory pids cpu\n");
    join(want, sizeof(want), f->fs, "svc/backend");
    mkdirs(want);
    write_self(f, "0::/svc/backend\n");
    assert_int_equal(cg_detect(&cg, f->fs, f->self, "moat", &e), 0);
    assert_int_equal(cg.version, CG_V2);
    assert_string_equal(cg.fsroot, f->fs);
    join(want, sizeof(want), f->fs, "svc/backend/moat");
    assert_string_equal(cg.base[0], want);
    assert_string_equal(cg.base[1], ""); /* v2 uses base[0] only */
}

static void test_v2_detect_root_group_and_trailing_slash(void **state)
{
    struct fx *f = *state;
    struct cg_system cg;
    struct errbuf e = {""};
    char want[PATH_MAX], root_slash[PATH_MAX];

    put(f->fs, "cgroup.controllers", "memory pids cpu\n");
    write_self(f, "0::/\n");
    assert_int_equal(cg_detect(&cg, f->fs, f->self, "moat", &e), 0);
    join(want, sizeof(want), f->fs, "moat");
    assert_string_equal(cg.base[0], want); /* no "//" */

    write_self(f, "0::/svc/backend\n");
    join(root_slash, sizeof(root_slash), f->fs, "");
    assert_int_equal(cg_detect(&cg, root_slash, f->self, "moat", &e), 0);
    join(want, sizeof(want), f->fs, "svc/backend/moat");
    assert_string_equal(cg.base[0], want);
}

static void test_v2_detect_hybrid_self_file(void **state)
{
    struct fx *f = *state;
    struct cg_system cg;
    struct errbuf e = {""};
    char want[PATH_MAX];

    /* v1 lines before the unified one are skipped */
    put(f->fs, "cgroup.controllers", "memory pids cpu\n");
    write_self(f, "12:pids:/elsewhere\n1:name=systemd:/also/elsewhere\n0::/svc/backend\n");
    assert_int_equal(cg_detect(&cg, f->fs, f->self, "box-runner_2.a", &e), 0);
    join(want, sizeof(want), f->fs, "svc/backend/box-runner_2.a");
    assert_string_equal(cg.base[0], want);
}

static void test_v2_detect_errors(void **state)
{
    struct fx *f = *state;
    struct cg_system cg;
    struct errbuf e = {""};

    put(f->fs, "cgroup.controllers", "memory pids cpu\n");

    /* no "0::" line */
    write_self(f, "4:memory:/a/b\n8:pids:/\n");
    assert_int_equal(cg_detect(&cg, f->fs, f->self, "moat", &e), -1);
    assert_non_null(strstr(e.msg, "no v2 cgroup"));
    assert_non_null(strstr(e.msg, f->self));

    /* an empty controller list in a hierarchy other than 0 is not v2 */
    write_self(f, "1::/x\n");
    assert_int_equal(cg_detect(&cg, f->fs, f->self, "moat", &e), -1);
    assert_non_null(strstr(e.msg, "no v2 cgroup"));

    /* an empty file */
    write_self(f, "");
    assert_int_equal(cg_detect(&cg, f->fs, f->self, "moat", &e), -1);
    assert_non_null(strstr(e.msg, "no v2 cgroup"));

    /* no self file at all */
    char missing[PATH_MAX];
    join(missing, sizeof(missing), f->tmp, "does-not-exist");
    assert_int_equal(cg_detect(&cg, f->fs, missing, "moat", &e), -1);
    assert_non_null(strstr(e.msg, "open "));
    assert_non_null(strstr(e.msg, "does-not-exist"));
}

static void test_bad_names(void **state)
{
    struct fx *f = *state;
    struct cg_system cg;
    struct cg_box box;
    struct errbuf e = {""};
    char long_name[66];

    memset(long_name, 'a', 65);
    long_name[65] = '\0';
    static const char *const bad[] = {"../x", "", "a/b", ".", "..", "/abs", "sp ace", "nl\n", "x;y"};
    const char *const *names = bad;
    size_t nbad = sizeof(bad) / sizeof(bad[0]);

    put(f->fs, "cgroup.controllers", "memory pids cpu\n");
    write_self(f, "0::/\n");
    for (size_t i = 0; i <= nbad; i++) {
        const char *n = i < nbad ? names[i] : long_name;
        e.msg[0] = '\0';
        assert_int_equal(cg_detect(&cg, f->fs, f->self, n, &e), -1);
        assert_non_null(strstr(e.msg, "bad cgroup instance name"));
    }
    /* 64 characters is the longest accepted */
    long_name[64] = '\0';
    assert_int_equal(cg_detect(&cg, f->fs, f->self, long_name, &e), 0);

    assert_int_equal(cg_detect(&cg, f->fs, f->self, "moat", &e), 0);
    for (size_t i = 0; i < nbad; i++) {
        e.msg[0] = '\0';
        assert_int_equal(cg_box_create(&cg, &box, names[i], &e), -1);
        assert_non_null(strstr(e.msg, "bad box group name"));
    }
    /* nothing was created below the fake root by the refusals */
    char base_parent[PATH_MAX];
    join(base_parent, sizeof(base_parent), f->fs, "x");
    assert_false(is_dir(base_parent));
}

/* ==== v2 instance set-up ================================================= */

static void test_v2_setup_instance(void **state)
{
    struct fx *f = *state;
    struct cg_system cg;
    struct errbuf e = {""};
    char own[PATH_MAX];

    make_v2_tree(f, &cg, NULL);
    assert_int_equal(cg_setup_instance(&cg, &e), 0);
    join(own, sizeof(own), f->fs, "svc/backend");
    assert_string_equal(get(own, "cgroup.subtree_control"), "+memory +pids +cpu");
    assert_string_equal(get(cg.base[0], "cgroup.subtree_control"), "+memory +pids +cpu");
    /* the supervisor leaf is only needed when the own group is busy */
    char leaf[PATH_MAX];
    snprintf(leaf, sizeof(leaf), "%s.supervisor", cg.base[0]);
    assert_false(is_dir(leaf));
    assert_string_equal(get(own, "cgroup.procs"), "");
}

/* Removes the control files make_v2_tree put in the instance group, so
 * that rmdir(2) can remove it as it would a real group. */
static void empty_fake_group(const char *dir)
{
    char path[PATH_MAX];
    static const char *const files[] = {"cgroup.subtree_control", "cgroup.procs"};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        join(path, sizeof(path), dir, files[i]);
        (void)unlink(path);
    }
}

static void test_v2_teardown_restores_own_group(void **state)
{
    struct fx *f = *state;
    struct cg_system cg;
    struct errbuf e = {""};
    char own[PATH_MAX];

    /* nothing set up yet: nothing to undo */
    make_v2_tree(f, &cg, NULL);
    assert_int_equal(cg_teardown_instance(&cg, &e), 0);
    assert_true(is_dir(cg.base[0]));

    /* memory was enabled before us: only pids and cpu are ours to undo */
    join(own, sizeof(own), f->fs, "svc/backend");
    put(own, "cgroup.subtree_control", "memory\n");
    assert_int_equal(cg_setup_instance(&cg, &e), 0);
    assert_string_equal(get(own, "cgroup.subtree_control"), "+pids +cpu");
    empty_fake_group(cg.base[0]);
    put(own, "cgroup.subtree_control", "");
    assert_int_equal(cg_teardown_instance(&cg, &e), 0);
    assert_false(is_dir(cg.base[0]));
    assert_string_equal(get(own, "cgroup.subtree_control"), "-pids -cpu");
    assert_false(is_dir(cg.leaf)); /* the own group was free: no leaf */

    /* a second teardown is a no-op */
    put(own, "cgroup.subtree_control", "memory\n");
    assert_int_equal(cg_teardown_instance(&cg, &e), 0);
    assert_string_equal(get(own, "cgroup.subtree_control"), "memory\n");
}

static void test_v2_teardown_stops_while_the_instance_group_stays(void **state)
{
    struct fx *f = *state;
    struct cg_system cg;
    struct errbuf e = {""};
    char own[PATH_MAX];

    /* the controllers cannot be disabled while the instance group uses them */
    make_v2_tree(f, &cg, own);
    assert_int_equal(cg_setup_instance(&cg, &e), 0);
    put(own, "cgroup.subtree_control", "memory pids cpu\n");
    assert_int_equal(cg_teardown_instance(&cg, &e), -1); /* the fake group is not empty */
    assert_non_null(strstr(e.msg, "rmdir"));
    assert_string_equal(get(own, "cgroup.subtree_control"), "memory pids cpu\n");
}

static void test_v2_controller_not_delegated(void **state)
{
    struct fx *f = *state;
    struct cg_system cg;
    struct errbuf e = {""};
    char own[PATH_MAX];

    make_v2_tree(f, &cg, own);
    put(own, "cgroup.controllers", "memory pids\n");
    assert_int_equal(cg_setup_instance(&cg, &e), -1);
    assert_non_null(strstr(e.msg, "controller cpu not available"));
    assert_non_null(strstr(e.msg, "Delegate=yes"));
    /* nothing was written or made */
    assert_string_equal(get(own, "cgroup.subtree_control"), "");
    assert_false(is_dir(cg.leaf));
}

static void test_v2_adopts_the_leaf_a_killed_run_left(void **state)
{
    struct fx *f = *state;
    struct cg_system cg;
    struct errbuf e = {""};
    char own[PATH_MAX], want[PATH_MAX];

    /* started from the shell a killed run moved into its leaf */
    make_v2_tree(f, &cg, own);
    put(own, "cgroup.subtree_control", "memory pids cpu\n");
    join(want, sizeof(want), own, "moat.supervisor");
    mkdirs(want);
    write_self(f, "0::/svc/backend/moat.supervisor\n");
    assert_int_equal(cg_detect(&cg, f->fs, f->self, "moat", &e), 0);
    assert_string_equal(cg.own, own);
    assert_string_equal(cg.leaf, want);
    join(want, sizeof(want), own, "moat");
    assert_string_equal(cg.base[0], want);
    assert_int_equal(cg.adopted, 1);
    assert_int_equal(cg.leaf_used, 1);

    /* what the killed run enabled is undone at teardown */
    if (cg_setup_instance(&cg, &e) != 0)
        fail_msg("cg_setup_instance: %s", e.msg);
    empty_fake_group(cg.base[0]);
    put(own, "cgroup.subtree_control", "");
    if (cg_teardown_instance(&cg, &e) != 0)
        fail_msg("cg_teardown_instance: %s", e.msg);
    assert_string_equal(get(own, "cgroup.subtree_control"), "-memory -pids -cpu");
    assert_false(is_dir(cg.leaf));

    /* another instance's leaf, or one at the hierarchy root, is no leaf of ours */
    write_self(f, "0::/svc/backend/other.supervisor\n");
    assert_int_equal(cg_detect(&cg, f->fs, f->self, "moat", &e), 0);
    assert_int_equal(cg.adopted, 0);
    write_self(f, "0::/moat.supervisor\n");
    assert_int_equal(cg_detect(&cg, f->fs, f->self, "moat", &e), 0);
    assert_int_equal(cg.adopted, 0);
    join(want, sizeof(want), f->fs, "moat.supervisor/moat");
    assert_string_equal(cg.base[0], want);
}

static void test_v2_setup_instance_errors(void **state)
{
    struct fx *f = *state;
    struct cg_system cg;
    struct errbuf e = {""};
    char own[PATH_MAX], path[PATH_MAX];

    /* the own group cannot delegate: its subtree_control is missing */
    make_v2_tree(f, &cg, own);
    join(path, sizeof(path), own, "cgroup.subtree_control");
    assert_int_equal(unlink(path), 0);
    assert_int_equal(cg_setup_instance(&cg, &e), -1);
    assert_non_null(strstr(e.msg, path));

    /* the instance group's subtree_control is missing */
    put(own, "cgroup.subtree_control", "");
    join(path, sizeof(path), cg.base[0], "cgroup.subtree_control");
    assert_int_equal(unlink(path), 0);
    e.msg[0] = '\0';
    assert_int_equal(cg_setup_instance(&cg, &e), -1);
    assert_non_null(strstr(e.msg, path));
}

/* ==== v2 per-box ========================================================= */

static void test_v2_box_lifecycle(void **state)
{
    struct fx *f = *state;
    struct cg_system cg;
    struct cg_box box;
    struct cg_usage u;
    struct errbuf e = {""};
    char want[PATH_MAX];

    make_v2_tree(f, &cg, NULL);
    assert_int_equal(cg_setup_instance(&cg, &e), 0);

    assert_int_equal(cg_box_create(&cg, &box, "slot0", &e), 0);
    join(want, sizeof(want), cg.base[0], "slot0");
    assert_string_equal(box.path[0], want);
    assert_true(is_dir(box.path[0]));
    assert_ptr_equal(box.cg, &cg);
    make_v2_box_files(box.path[0]);

    assert_int_equal(cg_box_set_limits(&box, 268435456, 64, &e), 0);
    assert_string_equal(get(box.path[0], "memory.max"), "268435456");
    assert_string_equal(get(box.path[0], "pids.max"), "64");
    assert_string_equal(get(box.path[0], "memory.swap.max"), "0");

    assert_int_equal(cg_box_attach(&box, 4242, &e), 0);
    assert_string_equal(get(box.path[0], "cgroup.procs"), "4242");
    put(box.path[0], "cgroup.procs", ""); /* see the safety note at the top */

    memset(&u, 0xa5, sizeof(u));
    assert_int_equal(cg_box_usage(&box, &u, &e), 0);
    assert_true(u.cpu_ns == 1500000);
    assert_true(u.memory_peak == 12345);
    assert_true(u.oom_kills == 1);

    /* a second box next to it */
    struct cg_box box1;
    assert_int_equal(cg_box_create(&cg, &box1, "slot1", &e), 0);
    join(want, sizeof(want), cg.base[0], "slot1");
    assert_string_equal(box1.path[0], want);
    assert_true(is_dir(want));
}

static void test_v2_set_limits_large_and_missing_files(void **state)
{
    struct fx *f = *state;
    struct cg_system cg;
    struct cg_box box;
    struct errbuf e = {""};
    char path[PATH_MAX];

    make_v2_tree(f, &cg, NULL);
    assert_int_equal(cg_box_create(&cg, &box, "slot0", &e), 0);
    make_v2_box_files(box.path[0]);

    assert_int_equal(cg_box_set_limits(&box, UINT64_MAX, UINT32_MAX, &e), 0);
    assert_string_equal(get(box.path[0], "memory.max"), "18446744073709551615");
    assert_string_equal(get(box.path[0], "pids.max"), "4294967295");

    /* memory.swap.max is absent without swap accounting: not an error */
    join(path, sizeof(path), box.path[0], "memory.swap.max");
    assert_int_equal(unlink(path), 0);
    put(box.path[0], "memory.max", "");
    put(box.path[0], "pids.max", "");
    assert_int_equal(cg_box_set_limits(&box, 1048576, 8, &e), 0);
    assert_string_equal(get(box.path[0], "memory.max"), "1048576");
    assert_string_equal(get(box.path[0], "pids.max"), "8");

    /* pids.max missing: reported */
    join(path, sizeof(path), box.path[0], "pids.max");
    assert_int_equal(unlink(path), 0);
    assert_int_equal(cg_box_set_limits(&box, 1048576, 8, &e), -1);
    assert_non_null(strstr(e.msg, path));

    /* memory.max missing: reported */
    join(path, sizeof(path), box.path[0], "memory.max");
    assert_int_equal(unlink(path), 0);
    e.msg[0] = '\0';
    assert_int_equal(cg_box_set_limits(&box, 1048576, 8, &e), -1);
    assert_non_null(strstr(e.msg, path));

    /* cgroup.procs missing: attach fails */
    join(path, sizeof(path), box.path[0], "cgroup.procs");
    assert_int_equal(unlink(path), 0);
    e.msg[0] = '\0';
    assert_int_equal(cg_box_attach(&box, 4242, &e), -1);
    assert_non_null(strstr(e.msg, path));
}

static void test_v2_usage_fallbacks(void **state)
{
    struct fx *f = *state;
    struct cg_system cg;
    struct cg_box box;
    struct cg_usage u;
    struct errbuf e = {""};
    char path[PATH_MAX];

    make_v2_tree(f, &cg, NULL);
    assert_int_equal(cg_box_create(&cg, &box, "slot0", &e), 0);
    make_v2_box_files(box.path[0]);

    /* kernels before 5.19 have no memory.peak: memory.current is used */
    join(path, sizeof(path), box.path[0], "memory.peak");
    assert_int_equal(unlink(path), 0);
    assert_int_equal(cg_box_usage(&box, &u, &e), 0);
    assert_true(u.memory_peak == 999);
    assert_true(u.cpu_ns == 1500000);

    /* no oom_kill line: zero; usage_usec not on the first line */
    put(box.path[0], "memory.events", "low 0\nhigh 0\nmax 0\noom 0\n");
    put(box.path[0], "cpu.stat", "user_usec 7\nusage_usec 42\n");
    assert_int_equal(cg_box_usage(&box, &u, &e), 0);
    assert_true(u.oom_kills == 0);
    assert_true(u.cpu_ns == 42000);

    /* "oom_group_kill" must not be read as "oom_kill" */
    put(box.path[0], "memory.events", "oom 2\noom_group_kill 5\noom_kill 2\n");
    assert_int_equal(cg_box_usage(&box, &u, &e), 0);
    assert_true(u.oom_kills == 2);

    /* neither memory.peak nor memory.current: reported */
    join(path, sizeof(path), box.path[0], "memory.current");
    assert_int_equal(unlink(path), 0);
    assert_int_equal(cg_box_usage(&box, &u, &e), -1);
    assert_non_null(strstr(e.msg, path));

    /* not a number */
    put(box.path[0], "memory.current", "max\n");
    e.msg[0] = '\0';
    assert_int_equal(cg_box_usage(&box, &u, &e), -1);
    assert_non_null(strstr(e.msg, "not a number"));

    /* cpu.stat missing: reported */
    put(box.path[0], "memory.current", "1\n");
    join(path, sizeof(path), box.path[0], "cpu.stat");
    assert_int_equal(unlink(path), 0);
    e.msg[0] = '\0';
    assert_int_equal(cg_box_usage(&box, &u, &e), -1);
    assert_non_null(strstr(e.msg, path));
}

static void test_destroy_of_unused_box(void **state)
{
    struct cg_system cg;
    struct cg_box box;
    struct errbuf e = {""};

    /* a box that was never created (path empty) is a no-op */
    memset(&cg, 0, sizeof(cg));
    cg.version = CG_V2;
    memset(&box, 0, sizeof(box));
    box.cg = &cg;
    assert_int_equal(cg_box_destroy(&box, &e), 0);
}

/* ==== v1 ================================================================= */

static void make_v1_tree(const struct fx *f)
{
    static const char *const ctrls[] = {"memory", "pids", "cpuacct", "freezer"};
    char dir[PATH_MAX];
    for (size_t i = 0; i < 4; i++) {
        join(dir, sizeof(dir), f->fs, ctrls[i]);
        mkdirs(dir);
    }
    join(dir, sizeof(dir), f->fs, "memory/a/b");
    mkdirs(dir);
    write_self(f, "11:blkio:/x\n"
                  "4:memory:/a/b\n"
                  "8:pids:/\n"
                  "2:cpu,cpuacct:/\n"
                  "6:freezer:/\n"
                  "1:name=systemd:/user.slice\n"
                  "0::/user.slice\n");
}

static void test_v1_detect(void **state)
{
    struct fx *f = *state;
    struct cg_system cg;
    struct errbuf e = {""};
    char want[PATH_MAX];

    make_v1_tree(f);
    assert_int_equal(cg_detect(&cg, f->fs, f->self, "moat", &e), 0);
    assert_int_equal(cg.version, CG_V1);
    join(want, sizeof(want), f->fs, "memory/a/b/moat");
    assert_string_equal(cg.base[CG_MEMORY], want);
    join(want, sizeof(want), f->fs, "pids/moat");
    assert_string_equal(cg.base[CG_PIDS], want);
    join(want, sizeof(want), f->fs, "cpuacct/moat");
    assert_string_equal(cg.base[CG_CPUACCT], want);
    join(want, sizeof(want), f->fs, "freezer/moat");
    assert_string_equal(cg.base[CG_FREEZER], want);
    assert_int_equal(cg.memsw, 0);

    /* memory.memsw.* present at the memory root */
    char mem[PATH_MAX];
    join(mem, sizeof(mem), f->fs, "memory");
    put(mem, "memory.memsw.limit_in_bytes", "");
    assert_int_equal(cg_detect(&cg, f->fs, f->self, "moat", &e), 0);
    assert_int_equal(cg.memsw, 1);
}

static void test_v1_detect_errors(void **state)
{
    struct fx *f = *state;
    struct cg_system cg;
    struct errbuf e = {""};
    char dir[PATH_MAX];

    /* a controller hierarchy not mounted */
    make_v1_tree(f);
    join(dir, sizeof(dir), f->fs, "freezer");
    assert_int_equal(rmdir(dir), 0);
    assert_int_equal(cg_detect(&cg, f->fs, f->self, "moat", &e), -1);
    assert_non_null(strstr(e.msg, "freezer"));
    assert_non_null(strstr(e.msg, "not mounted"));
    assert_non_null(strstr(e.msg, dir));
    mkdirs(dir);

    /* the self file lacks the pids line */
    write_self(f, "4:memory:/a/b\n2:cpu,cpuacct:/\n6:freezer:/\n");
    e.msg[0] = '\0';
    assert_int_equal(cg_detect(&cg, f->fs, f->self, "moat", &e), -1);
    assert_non_null(strstr(e.msg, "no pids cgroup"));

    /* "cpuacct" must be a whole token, not a substring */
    write_self(f, "4:memory:/\n8:pids:/\n2:cpu,cpuacctx:/\n6:freezer:/\n");
    e.msg[0] = '\0';
    assert_int_equal(cg_detect(&cg, f->fs, f->self, "moat", &e), -1);
    assert_non_null(strstr(e.msg, "no cpuacct cgroup"));
}

static void test_v1_box_lifecycle(void **state)
{
    struct fx *f = *state;
    struct cg_system cg;
    struct cg_box box;
    struct cg_usage u;
    struct errbuf e = {""};
    char want[PATH_MAX];

    make_v1_tree(f);
    assert_int_equal(cg_detect(&cg, f->fs, f->self, "moat", &e), 0);
    assert_int_equal(cg_setup_instance(&cg, &e), 0);
    for (int i = 0; i < CG_NCTRL; i++)
        assert_true(is_dir(cg.base[i]));

    assert_int_equal(cg_box_create(&cg, &box, "slot3", &e), 0);
    for (int i = 0; i < CG_NCTRL; i++) {
        join(want, sizeof(want), cg.base[i], "slot3");
        assert_string_equal(box.path[i], want);
        assert_true(is_dir(box.path[i]));
        put(box.path[i], "cgroup.procs", "");
    }
    put(box.path[CG_MEMORY], "memory.limit_in_bytes", "");
    put(box.path[CG_PIDS], "pids.max", "");

    assert_int_equal(cg_box_set_limits(&box, 268435456, 64, &e), 0);
    assert_string_equal(get(box.path[CG_MEMORY], "memory.limit_in_bytes"), "268435456");
    assert_string_equal(get(box.path[CG_PIDS], "pids.max"), "64");

    assert_int_equal(cg_box_attach(&box, 4242, &e), 0);
    for (int i = 0; i < CG_NCTRL; i++) {
        assert_string_equal(get(box.path[i], "cgroup.procs"), "4242");
        put(box.path[i], "cgroup.procs", ""); /* see the safety note at the top */
    }

    put(box.path[CG_CPUACCT], "cpuacct.usage", "987654321\n");
    put(box.path[CG_MEMORY], "memory.max_usage_in_bytes", "4096\n");
    put(box.path[CG_MEMORY], "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n");
    assert_int_equal(cg_box_usage(&box, &u, &e), 0);
    assert_true(u.cpu_ns == 987654321);
    assert_true(u.memory_peak == 4096);
    assert_true(u.oom_kills == 2);

    /* before 4.13 there is no oom_kill line: under_oom counts as one */
    put(box.path[CG_MEMORY], "memory.oom_control", "oom_kill_disable 0\nunder_oom 1\n");
    assert_int_equal(cg_box_usage(&box, &u, &e), 0);
    assert_true(u.oom_kills == 1);
    put(box.path[CG_MEMORY], "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\n");
    assert_int_equal(cg_box_usage(&box, &u, &e), 0);
    assert_true(u.oom_kills == 0);
}

static void test_v1_memsw_limit(void **state)
{
    struct fx *f = *state;
    struct cg_system cg;
    struct cg_box box;
    struct errbuf e = {""};
    char mem[PATH_MAX], path[PATH_MAX];

    make_v1_tree(f);
    join(mem, sizeof(mem), f->fs, "memory");
    put(mem, "memory.memsw.limit_in_bytes", "");
    assert_int_equal(cg_detect(&cg, f->fs, f->self, "moat", &e), 0);
    assert_int_equal(cg.memsw, 1);
    assert_int_equal(cg_setup_instance(&cg, &e), 0);
    assert_int_equal(cg_box_create(&cg, &box, "slot0", &e), 0);
    put(box.path[CG_MEMORY], "memory.limit_in_bytes", "");
    put(box.path[CG_MEMORY], "memory.memsw.limit_in_bytes", "");
    put(box.path[CG_PIDS], "pids.max", "");

    assert_int_equal(cg_box_set_limits(&box, 1073741824, 256, &e), 0);
    assert_string_equal(get(box.path[CG_MEMORY], "memory.limit_in_bytes"), "1073741824");
    assert_string_equal(get(box.path[CG_MEMORY], "memory.memsw.limit_in_bytes"), "1073741824");
    assert_string_equal(get(box.path[CG_PIDS], "pids.max"), "256");

    /* with memsw detected, a missing memsw file is an error */
    join(path, sizeof(path), box.path[CG_MEMORY], "memory.memsw.limit_in_bytes");
    assert_int_equal(unlink(path), 0);
    assert_int_equal(cg_box_set_limits(&box, 1073741824, 256, &e), -1);
    assert_non_null(strstr(e.msg, path));
}

/* Regression test for a bug found while writing these tests: on v1,
 * kill_group reads only the freezer group's cgroup.procs
 * (cgroup.c:240/253), and kill_listed failed when that group did not exist.
 * cg_box_create makes the four per-controller groups one after the other
 * (cgroup.c:371-380); a crash or an mkdir error between them leaves a box
 * without its freezer group, which then could never be removed: the next
 * cg_box_create for that slot failed, and after a restart cg_setup_instance
 * (cleanup_stale) failed, so the backend could not start.  Fixed by
 * kill_listed treating a missing cgroup.procs (ENOENT) as an empty group.
 * Here: a stale, empty memory group "slot9" with no freezer counterpart. */
static void test_v1_stale_group_without_freezer(void **state)
{
    struct fx *f = *state;
    struct cg_system cg;
    struct errbuf e = {""};
    char stale[PATH_MAX];

    make_v1_tree(f);
    assert_int_equal(cg_detect(&cg, f->fs, f->self, "moat", &e), 0);
    join(stale, sizeof(stale), cg.base[CG_MEMORY], "slot9");
    mkdirs(stale);

    int rc = cg_setup_instance(&cg, &e);
    if (rc != 0)
        fail_msg("cg_setup_instance: %s", e.msg);
    assert_false(is_dir(stale));
}

/* Regression (kill_listed once read cgroup.procs into a 16 KiB buffer and
 * parsed the cut-off last number as a pid, so the root backend could kill an
 * unrelated host process whose pid is a decimal prefix of a box pid).  Here
 * the group lists "1" (skipped) and a non-existent pid <child>99999 placed
 * where a 16 KiB cut would leave exactly <child>: the child must survive. */
static void test_kill_reads_long_pid_lists_whole(void **state)
{
    struct fx *f = *state;
    struct cg_system cg;
    struct cg_box box;
    struct errbuf e = {""};

    make_v2_tree(f, &cg, NULL);
    assert_int_equal(cg_box_create(&cg, &box, "slot0", &e), 0);
    put(box.path[0], "cgroup.kill", "");

    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        for (;;)
            pause();
    }

    /* 16383 bytes fit in the buffer: filler of "1\n" (pid 1 is never
     * signalled), then the child's pid, then digits that get cut off */
    char pid[32];
    int d = snprintf(pid, sizeof(pid), "%ld", (long)child);
    size_t fill = 16383 - (size_t)d;
    char *procs = malloc(fill + 64);
    assert_non_null(procs);
    size_t n = 0;
    if (fill % 2) {
        memcpy(procs, "01\n", 3);
        n = 3;
    }
    while (n < fill) {
        memcpy(procs + n, "1\n", 2);
        n += 2;
    }
    snprintf(procs + n, 64, "%s99999\n", pid);
    put(box.path[0], "cgroup.procs", procs);
    free(procs);

    (void)cg_box_kill(&box, &e); /* gives up after ~4 s: the fake list never empties */

    int status = 0;
    pid_t w = waitpid(child, &status, WNOHANG);
    int killed = w == child && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
    if (w == 0) {
        kill(child, SIGKILL);
        waitpid(child, &status, 0);
    }
    put(box.path[0], "cgroup.procs", "");
    if (killed)
        fail_msg("cg_box_kill SIGKILLed pid %ld, which is not in the group (it only lists %s99999)", (long)child, pid);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_v2_detect, setup, teardown),
        cmocka_unit_test_setup_teardown(test_v2_detect_root_group_and_trailing_slash, setup, teardown),
        cmocka_unit_test_setup_teardown(test_v2_detect_hybrid_self_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_v2_detect_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_names, setup, teardown),
        cmocka_unit_test_setup_teardown(test_v2_setup_instance, setup, teardown),
        cmocka_unit_test_setup_teardown(test_v2_setup_instance_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_v2_teardown_restores_own_group, setup, teardown),
        cmocka_unit_test_setup_teardown(test_v2_teardown_stops_while_the_instance_group_stays, setup, teardown),
        cmocka_unit_test_setup_teardown(test_v2_controller_not_delegated, setup, teardown),
        cmocka_unit_test_setup_teardown(test_v2_adopts_the_leaf_a_killed_run_left, setup, teardown),
        cmocka_unit_test_setup_teardown(test_v2_box_lifecycle, setup, teardown),
        cmocka_unit_test_setup_teardown(test_v2_set_limits_large_and_missing_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_v2_usage_fallbacks, setup, teardown),
        cmocka_unit_test(test_destroy_of_unused_box),
        cmocka_unit_test_setup_teardown(test_v1_detect, setup, teardown),
        cmocka_unit_test_setup_teardown(test_v1_detect_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_v1_box_lifecycle, setup, teardown),
        cmocka_unit_test_setup_teardown(test_v1_memsw_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_v1_stale_group_without_freezer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_kill_reads_long_pid_lists_whole, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
