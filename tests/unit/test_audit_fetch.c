/*
 * test_audit_fetch.c - the gateway's side of reading an execution back and
 * reviewing it (gateway/link/audit_client.c gw_audit_fetch, audit_records.c
 * gw_audit_review, gw_audit_result_of, gw_audit_execution), on a real h2o
 * loop against the real moat-audit-writer started the way moat-gateway
 * starts it (one end of a socketpair on descriptor 3).
 *
 * An execution's request and result records (with a packet) are submitted,
 * then fetched back by request id: found for its tenant, not found for
 * another; a cancelled fetch's answer is absorbed and the next one still
 * pairs; a review built from the fetched result is acknowledged, one naming
 * another tenant's execution is refused; gw_audit_execution shows the
 * review.  Needs root when run as root (the writer drops to moat-audit);
 * runs as any user otherwise.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <ftw.h>
#include <pwd.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "link/audit_client.h"
#include "records/audit_records.h"

static char dir[256];
static pid_t writer = -1;

struct got {
    int called, found;
    char *records;
    size_t records_len;
    char *packet;
    size_t packet_len;
    int ok;
    uint64_t seq;
};

static void on_fetch(void *arg, int found, const char *records, size_t records_len, const uint8_t *packet, size_t packet_len)
{
    struct got *g = arg;
    g->called++;
    g->found = found;
    g->records = records ? strndup(records, records_len) : NULL;
    g->records_len = records_len;
    g->packet = packet ? strndup((const char *)packet, packet_len) : NULL;
    g->packet_len = packet_len;
}

static void on_ack(void *arg, int ok, uint64_t seq)
{
    struct got *g = arg;
    g->called++;
    g->ok = ok;
    g->seq = seq;
}

static void got_free(struct got *g)
{
    free(g->records);
    free(g->packet);
    memset(g, 0, sizeof(*g));
}

/* Runs the loop until g has been called (or 10 s). */
static void wait_for(h2o_loop_t *loop, struct gw_audit *a, struct got *g)
{
    for (int i = 0; i < 1000 && !g->called; i++) {
        gw_audit_flush(a);
        h2o_evloop_run(loop, 10);
    }
    assert_int_equal(g->called, 1);
}

static int run(char *const argv[])
{
    pid_t pid = fork();
    if (pid == 0) {
        execv(argv[0], argv);
        _exit(127);
    }
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int start_writer(void)
{
    int sv[2];
    char adir[300], cli[] = MOAT_AUDIT_CLI, cmd[] = "init", opt[] = "--user", user[64];
    snprintf(adir, sizeof(adir), "%s/audit", dir);
    snprintf(user, sizeof(user), "%s", geteuid() == 0 ? "moat-audit" : getpwuid(geteuid())->pw_name);
    char *const init[] = {cli, cmd, adir, opt, user, NULL};
    if (geteuid() == 0)
        chmod(dir, 0755);
    assert_int_equal(run(init), 0);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    writer = fork();
    if (writer == 0) {
        dup2(sv[1], 3);
        execl(MOAT_AUDIT_WRITER, MOAT_AUDIT_WRITER, "--dir", adir, "--clients", "1", (char *)NULL);
        _exit(127);
    }
    close(sv[1]);
    return sv[0];
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static const struct gw_audit_who acme = {"req-1", "acme", "k_acme", "10.0.0.1", "POST", 4, "/api/v2/execute", 15};
static const struct gw_audit_who other = {"req-1", "other", "k_other", "10.0.0.2", "POST", 4, "/api/v2/execute", 15};

/* An execution's request, and its result with a packet. */
static void execute(h2o_loop_t *loop, struct gw_audit *a, const struct gw_audit_who *who, const char *packet)
{
    const char *types[] = {"request", "result"};
    for (int i = 0; i < 2; i++) {
        struct got g = {0};
        size_t len;
        json_t *b = gw_audit_base(who, types[i]);
        gw_audit_add_decision(b, "allowed", NULL, NULL, 200, NULL);
        char *body = gw_audit_dump(b, &len);
        json_decref(b);
        gw_audit_submit(a, body, len, i ? packet : NULL, i ? strlen(packet) : 0, on_ack, &g);
        free(body);
        wait_for(loop, a, &g);
        assert_true(g.ok);
    }
}

static void test_fetch_and_review(void **state)
{
    (void)state;
    h2o_loop_t *loop = h2o_evloop_create();
    struct gw_audit a;
    struct got g = {0}, cancelled = {0};
    const char *packet = "{\"request\":{\"code\":\"print(1)\"},\"result\":{\"run\":{\"stdout\":\"1\\n\"}}}";

    gw_audit_init(&a, loop);
    assert_int_equal(gw_audit_attach(&a, start_writer()), 0);
    execute(loop, &a, &acme, packet);
    execute(loop, &a, &other, "{\"other\":true}");

    /* its own tenant's: found, with the packet */
    gw_audit_fetch(&a, "acme", "req-1", on_fetch, &g);
    wait_for(loop, &a, &g);
    assert_int_equal(g.found, 1);
    assert_string_equal(g.packet, packet);
    assert_non_null(strstr(g.records, "\"type\":\"request\""));
    assert_null(strstr(g.records, "other"));
    uint64_t seq;
    char sha[65];
    assert_int_equal(gw_audit_result_of(g.records, g.records_len, &seq, sha), 0);
    got_free(&g);

    /* another tenant, an unknown id: not found */
    gw_audit_fetch(&a, "nobody", "req-1", on_fetch, &g);
    wait_for(loop, &a, &g);
    assert_int_equal(g.found, 0);
    assert_null(g.records);
    got_free(&g);

    /* a cancelled fetch: its answer is absorbed, the next one pairs */
    gw_audit_cancel(gw_audit_fetch(&a, "acme", "req-1", on_fetch, &cancelled));
    gw_audit_fetch(&a, "other", "req-1", on_fetch, &g);
    wait_for(loop, &a, &g);
    assert_int_equal(cancelled.called, 0);
    assert_int_equal(g.found, 1);
    assert_string_equal(g.packet, "{\"other\":true}");
    got_free(&g);

    /* a review of acme's result: acknowledged; the same naming other's: refused */
    const struct gw_audit_who reviewer = {"rv-1", "acme", "k_reviewer", "10.0.0.9", "POST", 4, "/api/v2/executions/req-1/reviews",
                                          31};
    const struct gw_audit_who intruder = {"rv-2", "other", "k_other", "10.0.0.9", "POST", 4, "/api/v2/executions/req-1/reviews",
                                          31};
    const char *why = NULL;
    assert_null(gw_audit_review(&reviewer, "req-1", "fine", "", 0, seq, sha, &why));
    assert_string_equal(why, "verdict must be approved, rejected or needs_changes");
    assert_null(gw_audit_review(&reviewer, "req-1", "approved", "\xff", 1, seq, sha, &why));
    const struct gw_audit_who *who[] = {&reviewer, &intruder};
    for (int i = 0; i < 2; i++) {
        size_t len;
        json_t *r = gw_audit_review(who[i], "req-1", "needs_changes", "loop \xc3\xa9", 7, seq, sha, &why);
        assert_non_null(r);
        char *body = gw_audit_dump(r, &len);
        json_decref(r);
        gw_audit_submit(&a, body, len, NULL, 0, on_ack, &g);
        free(body);
        wait_for(loop, &a, &g);
        assert_int_equal(g.ok, i == 0);
        got_free(&g);
    }

    /* read back with its review */
    gw_audit_fetch(&a, "acme", "req-1", on_fetch, &g);
    wait_for(loop, &a, &g);
    json_t *x = gw_audit_execution("req-1", g.records, g.records_len, (const uint8_t *)g.packet, g.packet_len);
    assert_non_null(x);
    assert_int_equal(json_array_size(json_object_get(x, "records")), 3);
    json_t *rv = json_array_get(json_object_get(x, "reviews"), 0);
    assert_string_equal(json_string_value(json_object_get(rv, "verdict")), "needs_changes");
    assert_string_equal(json_string_value(json_object_get(rv, "note")), "loop \xc3\xa9");
    assert_string_equal(json_string_value(json_object_get(rv, "key_id")), "k_reviewer");
    assert_non_null(json_object_get(json_object_get(x, "packet"), "result"));
    json_decref(x);
    got_free(&g);

    /* a packet of 4 MiB comes back whole, over many reads */
    const struct gw_audit_who big = {"req-big", "acme", "k_acme", "10.0.0.1", "POST", 4, "/api/v2/execute", 15};
    char *large = malloc(4u << 20);
    assert_non_null(large);
    memset(large, 'p', (4u << 20) - 1);
    large[(4u << 20) - 1] = '\0';
    execute(loop, &a, &big, large);
    gw_audit_fetch(&a, "acme", "req-big", on_fetch, &g);
    wait_for(loop, &a, &g);
    assert_int_equal(g.found, 1);
    assert_int_equal(g.packet_len, (4u << 20) - 1);
    assert_string_equal(g.packet, large);
    free(large);
    got_free(&g);

    /* the writer gone: a fetch fails (never "not found") */
    gw_audit_attach(&a, -1);
    gw_audit_fetch(&a, "acme", "req-1", on_fetch, &g);
    assert_int_equal(g.called, 1);
    assert_int_equal(g.found, -1);
    got_free(&g);
    int st = 0;
    pid_t done = 0;
    for (int i = 0; i < 1000 && done == 0; i++) { /* the socket is closed by the loop */
        h2o_evloop_run(loop, 10);
        done = waitpid(writer, &st, WNOHANG);
    }
    assert_int_equal(done, writer);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    writer = -1;
    gw_audit_dispose(&a);
    h2o_evloop_destroy(loop);
}

static int setup(void **state)
{
    (void)state;
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof(dir), "%s/moat-fetch-XXXXXX", tmp ? tmp : "/tmp");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    if (writer > 0) {
        kill(writer, SIGKILL);
        waitpid(writer, NULL, 0);
    }
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "chattr -R -a %s 2>/dev/null", dir);
    if (system(cmd) < 0)
        return -1;
    nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fetch_and_review, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
