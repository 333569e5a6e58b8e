/*
 * judge0_callback.c - the gateway's half of Judge0 callbacks.
 *
 * Theory of operation
 * -------------------
 * The internet-facing workers have no outbound network (confine.c: AF_UNIX
 * sockets only), so they never call a callback_url themselves: when a
 * submission's final record is kept (judge0_handlers.c: a synchronous
 * answer, the end of a wait=false run, an orphan's Internal Error), the
 * worker renders the body Judge0 sends - the default fields with the texts
 * in base64, whatever the submission asked (Judge0's IsolateJob does the
 * same, so receivers written for it decode it) - and writes one message
 * (callback_wire.c) on the socket to the callback sender
 * (callback_sender.c), which runs as a process of its own.
 *
 * The socket is SOCK_SEQPACKET, shared by the workers: one write is one
 * whole message, never interleaved with another thread's.  It is
 * non-blocking, and the supervisor gave it GW_CALLBACK_SOCKET_BYTES of
 * buffer: when the sender is slow, gone or restarting and the buffer is
 * full, the write fails at once and the callback is dropped, logged and
 * counted; a submission never waits for a callback.  Messages written
 * while the sender restarts wait in the socket (the supervisor keeps the
 * sender's end open), so a restart loses only what the old sender held.
 *
 * The URL was checked against the tenant's rules at submit time; it is
 * checked again here against the configuration now in force (a reload may
 * have taken the tenant's callbacks away), and the sender checks it once
 * more against its own copy.
 */
#include "judge0_callback.h"
#include "callbacks/callback_wire.h"
#include "judge0_api.h"
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

static int sender_fd = -1;
static uint64_t nsent, ndropped; /* __atomic */

void judge0_callback_init(int fd)
{
    int fl;

    if (fd >= 0 && (fl = fcntl(fd, F_GETFL)) != -1 && fcntl(fd, F_SETFL, fl | O_NONBLOCK) == -1)
        log_warn("%s: fcntl", __func__);
    sender_fd = fd;
}

uint64_t judge0_callback_sent(void)
{
    return __atomic_load_n(&nsent, __ATOMIC_RELAXED);
}

uint64_t judge0_callback_dropped(void)
{
    return __atomic_load_n(&ndropped, __ATOMIC_RELAXED);
}

static void dropped(const char *tenant, const char *token, const char *why)
{
    uint64_t n = __atomic_add_fetch(&ndropped, 1, __ATOMIC_RELAXED);

    log_warnx("judge0_callback_kept: tenant=%s token=%s: callback dropped: %s (%llu dropped so far)", tenant, token, why,
              (unsigned long long)n);
}

/* The body Judge0 sends: default fields, texts in base64.  malloc'ed, or NULL. */
static char *callback_body(const json_t *record)
{
    struct judge0_query q;
    char err[128];
    int not_utf8;

    if (judge0_parse_query(NULL, 0, 0, &q, err, sizeof(err)) != 0)
        return NULL;
    q.base64 = 1;
    return judge0_render(record, &q, &not_utf8);
}

/* One message on the socket, or a drop. */
static void send_message(const char *tenant, const char *token, const char *url, const char *body)
{
    struct moat_buf m = {0};

    if (cb_message_encode(&m, tenant, token, url, body, strlen(body)) != 0) {
        moat_buf_free(&m);
        dropped(tenant, token, "the result is larger than a callback message may be");
        return;
    }
    if (sender_fd < 0) {
        dropped(tenant, token, "no callback sender");
    } else if (write(sender_fd, m.data, m.len) != (ssize_t)m.len) {
        dropped(tenant, token, errno == EAGAIN ? "the sender's queue is full" : strerror(errno));
    } else {
        __atomic_add_fetch(&nsent, 1, __ATOMIC_RELAXED);
        log_debug("%s: tenant=%s token=%s: handed to the callback sender", __func__, tenant, token);
    }
    moat_buf_free(&m);
}

void judge0_callback_kept(const struct gw_config *cfg, const char *tenant, const char *token, const char *text, size_t len)
{
    const struct gw_tenant *t = gw_config_find_tenant(cfg, tenant);
    json_t *record, *url;
    json_int_t status;
    char err[256], *body;

    if (t == NULL || t->callbacks.nallow == 0 || (record = json_loadb(text, len, 0, NULL)) == NULL)
        return; /* no callbacks for this tenant now (a reload may have taken them away): nothing is sent */
    url = json_object_get(record, "callback_url");
    status = json_integer_value(json_object_get(record, "status_id"));
    if (!json_is_string(url) || status == JUDGE0_IN_QUEUE || status == JUDGE0_PROCESSING) {
        json_decref(record);
        return;
    }
    struct cb_tenant_rules rules = gw_tenant_callback_rules(t);
    if (cb_check_url(&rules, json_string_value(url), json_string_length(url), NULL, err, sizeof(err)) != 0) {
        dropped(tenant, token, err);
    } else if ((body = callback_body(record)) == NULL) {
        dropped(tenant, token, "out of memory");
    } else {
        send_message(tenant, token, json_string_value(url), body);
        free(body);
    }
    json_decref(record);
}
