/*
 * test_audit_client.c - the gateway's audit client (gateway/link/audit_client.c)
 * writing on a real h2o loop while its socket to the writer fills and
 * drains.  The peer is the other end of a socketpair, read by the test.
 *
 * The worker asks the client to send what a loop turn queued between two
 * turns (gw_audit_flush, server.c).  libh2o 2.2.5's evloop decides at the
 * start of a turn which sockets it polls for writing (those with a write
 * callback); a write started between turns that completes at once keeps
 * its callback until that turn's pending callbacks run, so the socket is
 * polled for writing with no callback left, and the first EPOLLOUT after
 * that aborts the process (write_pending's assertion).  The load campaign
 * (tests/bench/load_campaign.py) hit it within minutes.  The sequence here
 * makes it happen at once: a record larger than the socket's buffer (a
 * partial write: polled for writing), drained until it is written, then a
 * record that fits but leaves the socket unwritable (written at once), one
 * turn, a drain, one turn.
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
#include <sys/socket.h>
#include <unistd.h>

#include "link/audit_client.h"
#include "audit_wire.h"

static int acks;

static void on_ack(void *arg, int ok, uint64_t seq)
{
    (void)arg;
    (void)ok;
    (void)seq;
    acks++;
}

/* Reads everything the peer holds now; returns the bytes read. */
static size_t drain(int fd)
{
    char buf[65536];
    size_t total = 0;
    ssize_t n;

    while ((n = read(fd, buf, sizeof(buf))) > 0)
        total += (size_t)n;
    assert_true(n == -1 && errno == EAGAIN);
    return total;
}

/* One record of body_len bytes, queued and flushed between turns as the worker does. */
static size_t submit(struct gw_audit *a, size_t body_len)
{
    char *body = malloc(body_len);

    assert_non_null(body);
    memset(body, 'x', body_len);
    assert_non_null(gw_audit_submit(a, body, body_len, NULL, 0, on_ack, NULL));
    free(body);
    gw_audit_flush(a);
    return sizeof(struct audit_wire_req) + body_len;
}

static void test_writes_between_turns(void **state)
{
    (void)state;
    h2o_loop_t *loop = h2o_evloop_create();
    struct gw_audit a;
    int sp[2], sndbuf = 16384;
    size_t sent = 0, got = 0;

    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
    assert_int_equal(setsockopt(sp[0], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf)), 0);
    assert_int_equal(fcntl(sp[1], F_SETFL, O_NONBLOCK), 0);
    gw_audit_init(&a, loop);
    assert_int_equal(gw_audit_attach(&a, sp[0]), 0);
    h2o_evloop_run(loop, 0);

    for (int round = 0; round < 20; round++) {
        /* larger than the socket's buffer: written in parts, the socket polled for writing */
        sent += submit(&a, AUDIT_WIRE_MAX_BODY);
        h2o_evloop_run(loop, 0);
        for (int i = 0; i < 1000 && gw_audit_sending(&a); i++) {
            got += drain(sp[1]);
            h2o_evloop_run(loop, 1);
        }
        assert_false(gw_audit_sending(&a));
        /* fits, and leaves the socket unwritable until the peer reads */
        sent += submit(&a, 12000 + 500 * (size_t)round);
        h2o_evloop_run(loop, 0);
        got += drain(sp[1]);
        h2o_evloop_run(loop, 1);
        h2o_evloop_run(loop, 1);
    }
    for (int i = 0; i < 1000 && gw_audit_sending(&a); i++) {
        got += drain(sp[1]);
        h2o_evloop_run(loop, 1);
    }
    got += drain(sp[1]);
    assert_true(gw_audit_connected(&a));
    assert_int_equal(got, sent);
    assert_int_equal(acks, 0); /* nobody acknowledged: the records still wait */
    gw_audit_dispose(&a);      /* and fail */
    assert_int_equal(acks, 40);
    close(sp[1]);
    h2o_evloop_destroy(loop);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_writes_between_turns),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
