/*
 * test_gateway_sessions.c - the live sessions' shared state, through the
 * real session_registry.c and transcript.c: per-tenant and gateway-wide
 * counts, watch tokens (issue, join, watcher cap, expiry, revocation), a
 * watcher's reads of a transcript (data messages made from the raw bytes),
 * and a session's audit packet written in place (audit_records.c) against
 * jansson's own dump of it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "auth/apikey.h"
#include "records/audit_records.h"
#include "moat_hex.h"
#include "sessions/session_registry.h"
#include "records/transcript.h"

static void test_counts(void **state)
{
    (void)state;
    assert_int_equal(gw_sessions_acquire("a", 2, 3, NULL, NULL, NULL), GW_SESSIONS_OK);
    assert_int_equal(gw_sessions_acquire("a", 2, 3, NULL, NULL, NULL), GW_SESSIONS_OK);
    assert_int_equal(gw_sessions_acquire("a", 2, 3, NULL, NULL, NULL), GW_SESSIONS_TENANT_FULL);
    assert_int_equal(gw_sessions_acquire("b", 2, 3, NULL, NULL, NULL), GW_SESSIONS_OK);
    assert_int_equal(gw_sessions_acquire("c", 2, 3, NULL, NULL, NULL), GW_SESSIONS_FULL); /* the gateway's cap first */
    assert_int_equal(gw_sessions_count("a"), 2);
    assert_int_equal(gw_sessions_count(NULL), 3);
    gw_sessions_release("a");
    assert_int_equal(gw_sessions_acquire("c", 2, 3, NULL, NULL, NULL), GW_SESSIONS_OK);
    gw_sessions_release("a");
    gw_sessions_release("b");
    gw_sessions_release("c");
    gw_sessions_release("nobody"); /* unknown: nothing changes */
    assert_int_equal(gw_sessions_count(NULL), 0);
    assert_int_equal(gw_sessions_count("a"), 0);
}

static void test_watch_tokens(void **state)
{
    struct gw_transcript *t = gw_transcript_new();
    struct gw_watch_grant g1, g2, g3;
    char token[GW_WATCH_TOKEN_LEN + 1], other[GW_WATCH_TOKEN_LEN + 1];
    const char *why = NULL;

    (void)state;
    assert_non_null(t);
    assert_int_equal(gw_watch_issue(t, "demo", "00112233aabbccdd", 300, 2, token), 0);
    assert_int_equal(strlen(token), GW_WATCH_TOKEN_LEN);
    assert_memory_equal(token, "mwt_", 4);
    assert_int_equal(strspn(token + 4, "0123456789abcdef"), 64);

    assert_int_equal(gw_watch_join(token, strlen(token), &g1, &why), 0);
    assert_ptr_equal(g1.t, t);
    assert_string_equal(g1.tenant, "demo");
    assert_string_equal(g1.session_id, "00112233aabbccdd");
    assert_int_equal(gw_watch_join(token, strlen(token), &g2, &why), 0);
    /* the third watcher is over max_watchers */
    assert_int_equal(gw_watch_join(token, strlen(token), &g3, &why), -1);
    assert_non_null(strstr(why, "watchers"));
    assert_null(g3.t);
    gw_watch_leave(&g2);
    assert_int_equal(gw_watch_join(token, strlen(token), &g3, &why), 0);

    /* a token of the right shape that was never issued, a prefix, another shape */
    memcpy(other, token, sizeof(other));
    other[GW_WATCH_TOKEN_LEN - 1] = other[GW_WATCH_TOKEN_LEN - 1] == '0' ? '1' : '0';
    assert_int_equal(gw_watch_join(other, strlen(other), &g2, &why), -1);
    assert_int_equal(gw_watch_join(token, strlen(token) - 1, &g2, &why), -1);
    assert_int_equal(gw_watch_join("moat_abc", 8, &g2, &why), -1);

    /* a new token for the session replaces the old one */
    assert_int_equal(gw_watch_issue(t, "demo", "00112233aabbccdd", 300, 2, other), 0);
    assert_int_equal(gw_watch_join(token, strlen(token), &g2, &why), -1);
    /* its two watchers are still counted against the new token */
    assert_int_equal(gw_watch_join(other, strlen(other), &g2, &why), -1);

    /* the session ends: the token stops working; watchers keep their transcript */
    gw_watch_revoke("00112233aabbccdd");
    gw_watch_leave(&g1);
    assert_int_equal(gw_watch_join(other, strlen(other), &g2, &why), -1);
    assert_non_null(strstr(why, "unknown"));
    gw_watch_leave(&g3);
    gw_watch_leave(&g3); /* twice: nothing */

    /* a token whose time is up */
    assert_int_equal(gw_watch_issue(t, "demo", "ffeeddccbbaa9988", 0, 8, token), 0);
    assert_int_equal(gw_watch_join(token, strlen(token), &g1, &why), -1);
    assert_non_null(strstr(why, "expired"));
    gw_watch_revoke("ffeeddccbbaa9988");
    gw_transcript_release(t); /* the last reference: ASan sees anything left */
}

/* An event: a DATA event's message (when message is non-NULL) is made from
 * its bytes, on stdout; any other's is message. */
static void add(struct gw_transcript *t, uint8_t kind, const char *data, const char *message)
{
    struct gw_tr_event ev;

    memset(&ev, 0, sizeof(ev));
    ev.kind = kind;
    if (data != NULL) {
        ev.len = strlen(data);
        ev.data = malloc(ev.len);
        memcpy(ev.data, data, ev.len);
    }
    if (kind == GW_TR_DATA && message != NULL) {
        ev.stream = GW_TR_STDOUT;
        ev.msg_len = ev.len;
    } else if (message != NULL) {
        ev.message = strdup(message);
        ev.message_len = strlen(message);
    }
    assert_int_equal(gw_transcript_append(t, &ev), 0);
    assert_null(ev.data); /* taken */
}

/* What a watcher gets: every message once, in order, in reads of at most
 * max_bytes (at least one), and the end only after the last one. */
static void test_transcript_reads(void **state)
{
    struct gw_transcript *t = gw_transcript_new();
    size_t cursor = 0, n, *lens;
    char **msgs;
    int ended, code = 0;

    (void)state;
    add(t, GW_TR_STAGE, NULL, "{\"type\":\"stage\"}");
    add(t, GW_TR_DATA, "secret stdin", NULL); /* no message: never a watcher's */
    add(t, GW_TR_DATA, "out1", "");
    add(t, GW_TR_DATA, "out2", "");
    assert_int_equal(t->data_bytes, 20);

    assert_int_equal(gw_transcript_read(t, &cursor, 1, &msgs, &lens, &n, &ended, &code), 0);
    assert_int_equal(n, 1);
    assert_string_equal(msgs[0], "{\"type\":\"stage\"}");
    assert_false(ended);
    free(msgs[0]);
    free(msgs);
    free(lens);
    assert_int_equal(gw_transcript_read(t, &cursor, 1 << 20, &msgs, &lens, &n, &ended, &code), 0);
    assert_int_equal(n, 2);
    assert_string_equal(msgs[0], "{\"type\":\"data\",\"stream\":\"stdout\",\"data\":\"out1\"}");
    assert_string_equal(msgs[1], "{\"type\":\"data\",\"stream\":\"stdout\",\"data\":\"out2\"}");
    assert_int_equal(lens[1], strlen(msgs[1]));
    assert_false(ended);
    for (size_t i = 0; i < n; i++)
        free(msgs[i]);
    free(msgs);
    free(lens);
    /* nothing new, not over */
    assert_int_equal(gw_transcript_read(t, &cursor, 1 << 20, &msgs, &lens, &n, &ended, &code), 0);
    assert_int_equal(n, 0);
    assert_false(ended);
    /* a last event nobody watches, then the end */
    add(t, GW_TR_STDIN_CLOSE, NULL, NULL);
    gw_transcript_end(t, 4999);
    gw_transcript_end(t, 4002); /* the first end stands */
    assert_int_equal(gw_transcript_read(t, &cursor, 1 << 20, &msgs, &lens, &n, &ended, &code), 0);
    assert_int_equal(n, 0);
    assert_true(ended);
    assert_int_equal(code, 4999);
    /* a watcher holding its own reference outlives the session's */
    gw_transcript_hold(t);
    gw_transcript_release(t);
    cursor = 0;
    assert_int_equal(gw_transcript_read(t, &cursor, 1 << 20, &msgs, &lens, &n, &ended, &code), 0);
    assert_int_equal(n, 3);
    assert_true(ended);
    for (size_t i = 0; i < n; i++)
        free(msgs[i]);
    free(msgs);
    free(lens);
    gw_transcript_release(t);
}

/* A data message carries the end of a character an earlier chunk split
 * (pre), then the first of its own bytes; what it leaves out is not sent. */
static void test_data_message(void **state)
{
    uint8_t bytes[] = {0xA9, 'x', 0xE2};
    struct gw_tr_event e = {.kind = GW_TR_DATA, .stream = GW_TR_STDERR, .data = bytes, .len = sizeof(bytes)};
    size_t len;
    char *m;

    (void)state;
    e.pre[0] = 0xC3;
    e.pre_len = 1;
    e.msg_len = 3; /* the 0xE2 waits for the rest of its character */
    m = gw_transcript_message(&e, &len);
    assert_non_null(m);
    assert_string_equal(m, "{\"type\":\"data\",\"stream\":\"stderr\",\"data\":\"\xC3\xA9x\"}");
    assert_int_equal(len, strlen(m));
    free(m);
    e.msg_len = 0; /* everything waits: no message */
    assert_null(gw_transcript_message(&e, &len));
    assert_int_equal(len, 0);
}

/* The packet written in place is the bytes jansson dumps for the same
 * object (JSON_COMPACT | JSON_PRESERVE_ORDER), with every event; a write
 * of another length fails. */
static void test_session_packet(void **state)
{
    struct gw_transcript *t = gw_transcript_new();
    struct gw_audit_who who = {"0123456789abcdef", "acme", "k1", "127.0.0.1", "GET", 3, "/api/v2/connect", 15};
    struct moat_exec_request q;
    struct gw_session_packet sp;
    struct gw_tr_event ev;
    json_t *limits = json_pack("{s:i}", "wall_ms", 1000), *parsed, *tr;
    char *again;
    uint8_t *buf;
    json_error_t jerr;

    (void)state;
    memset(&q, 0, sizeof(q));
    q.language = strdup("python");
    q.version = strdup("3.11.2");
    add(t, GW_TR_STAGE, NULL, "{}");
    t->ev[0].stage = MOAT_STAGE_RUN;
    add(t, GW_TR_DATA, "name? \xff/+", "");
    add(t, GW_TR_DATA, "ada\n", NULL); /* stdin: in the packet, not for watchers */
    t->ev[2].stream = GW_TR_STDIN;
    t->ev[2].at_ms = 503;
    add(t, GW_TR_DATA, "", "");
    memset(&ev, 0, sizeof(ev));
    ev.kind = GW_TR_SIGNAL;
    ev.signal = 2;
    ev.at_ms = 510;
    assert_int_equal(gw_transcript_append(t, &ev), 0);
    add(t, GW_TR_STDIN_CLOSE, NULL, NULL);
    memset(&ev, 0, sizeof(ev));
    ev.kind = GW_TR_EXIT;
    ev.stage = MOAT_STAGE_RUN;
    ev.at_ms = 61000;
    ev.exit.has_code = 1;
    assert_int_equal(gw_transcript_append(t, &ev), 0);

    assert_int_equal(gw_audit_session_packet(&sp, &who, &q, NULL, limits, t, "{\"language\":\"python\"}"), 0);
    buf = malloc(sp.len + 1);
    assert_int_equal(gw_audit_session_packet_write(&sp, buf, sp.len - 1), -1);
    assert_int_equal(gw_audit_session_packet_write(&sp, buf, sp.len), 0);
    buf[sp.len] = '\0';
    parsed = json_loadb((const char *)buf, sp.len, JSON_REJECT_DUPLICATES, &jerr);
    assert_non_null(parsed);
    again = json_dumps(parsed, JSON_COMPACT | JSON_PRESERVE_ORDER);
    assert_string_equal(again, (const char *)buf);
    assert_string_equal(json_string_value(json_object_get(parsed, "kind")), "session");
    tr = json_object_get(parsed, "transcript");
    assert_int_equal(json_array_size(tr), 7);
    assert_string_equal(json_string_value(json_object_get(json_array_get(tr, 1), "data_base64")), "bmFtZT8g/y8r");
    assert_string_equal(json_string_value(json_object_get(json_array_get(tr, 2), "stream")), "stdin");
    assert_int_equal(json_integer_value(json_object_get(json_array_get(tr, 2), "at_ms")), 503);
    assert_string_equal(json_string_value(json_object_get(json_array_get(tr, 3), "data_base64")), "");
    assert_string_equal(json_string_value(json_object_get(json_array_get(tr, 4), "signal")), "SIGINT");
    assert_string_equal(json_string_value(json_object_get(json_array_get(tr, 6), "event")), "exit");
    assert_true(json_is_integer(json_object_get(json_array_get(tr, 6), "code")));
    free(again);
    json_decref(parsed);
    free(buf);
    gw_audit_session_packet_free(&sp);
    json_decref(limits);
    free(q.language);
    free(q.version);
    gw_transcript_release(t);
}

/* A chunk of len bytes on stream. */
static void chunk(struct gw_transcript *t, uint8_t stream, const char *data, size_t len)
{
    struct gw_tr_event ev;

    memset(&ev, 0, sizeof(ev));
    ev.kind = GW_TR_DATA;
    ev.stream = stream;
    ev.len = len;
    ev.data = malloc(len);
    memcpy(ev.data, data, len);
    assert_int_equal(gw_transcript_append(t, &ev), 0);
}

static void stage_event(struct gw_transcript *t, uint8_t stage)
{
    struct gw_tr_event ev;

    memset(&ev, 0, sizeof(ev));
    ev.kind = GW_TR_STAGE;
    ev.stage = stage;
    assert_int_equal(gw_transcript_append(t, &ev), 0);
}

static void assert_sha256(const char *hex, const char *data, size_t len)
{
    uint8_t h[APIKEY_DIGEST_LEN];
    char want[APIKEY_DIGEST_HEX + 1];

    assert_int_equal(apikey_digest(data, len, h), 0);
    moat_hex_encode(h, sizeof(h), want);
    assert_string_equal(hex, want);
}

/* A session's result record states each stage's output as its transcript
 * holds it: every chunk of the stage and stream, in order, hashed as one;
 * stdin, and anything before the first stage, belong to no stage's output. */
static void test_transcript_output(void **state)
{
    struct gw_transcript *t = gw_transcript_new();
    struct gw_audit_output out[2];
    struct moat_exec_result res;
    json_t *b = json_object(), *run;

    (void)state;
    chunk(t, GW_TR_STDOUT, "early", 5);
    stage_event(t, MOAT_STAGE_COMPILE);
    chunk(t, GW_TR_STDERR, "warn", 4);
    chunk(t, GW_TR_STDIN, "typed\n", 6);
    chunk(t, GW_TR_STDERR, "ing\n", 4);
    stage_event(t, MOAT_STAGE_RUN);
    chunk(t, GW_TR_STDOUT, "a\0b", 3);
    chunk(t, GW_TR_STDERR, "e", 1);
    chunk(t, GW_TR_STDOUT, "\xff\n", 2);

    gw_audit_transcript_output(t, out);
    assert_int_equal(out[0].stdout_bytes, 0);
    assert_sha256(out[0].stdout_sha256, "", 0);
    assert_int_equal(out[0].stderr_bytes, 8);
    assert_sha256(out[0].stderr_sha256, "warning\n", 8);
    assert_int_equal(out[1].stdout_bytes, 5);
    assert_sha256(out[1].stdout_sha256, "a\0b\xff\n", 5);
    assert_int_equal(out[1].stderr_bytes, 1);
    assert_sha256(out[1].stderr_sha256, "e", 1);

    /* the record carries them, not the result's (empty) output */
    memset(&res, 0, sizeof(res));
    res.compile.present = res.run.present = 1;
    gw_audit_add_session_result(b, NULL, &res, out);
    run = json_object_get(b, "run");
    assert_int_equal(json_integer_value(json_object_get(run, "stdout_bytes")), 5);
    assert_string_equal(json_string_value(json_object_get(run, "stdout_sha256")), out[1].stdout_sha256);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(b, "compile"), "stderr_bytes")), 8);
    json_decref(b);
    gw_transcript_release(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counts),       cmocka_unit_test(test_watch_tokens),   cmocka_unit_test(test_transcript_reads),
        cmocka_unit_test(test_data_message), cmocka_unit_test(test_session_packet), cmocka_unit_test(test_transcript_output),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
