/*
 * callback_sender.c - sends Judge0 callbacks (callback_url) for the gateway.
 *
 * Theory of operation
 * -------------------
 * One thread, one loop over libcurl's multi interface, the socket from the
 * gateway's workers (callback_wire.c) and a signalfd:
 *
 *   take      a message is decoded strictly, its tenant looked up in the
 *             configuration now in force and its URL checked against the
 *             tenant's rules again (cb_check_url: https, form, prefix,
 *             address literal): the workers are not trusted.  Past
 *             max_queue callbacks in hand it is dropped and logged.
 *   attempt   at most max_in_flight at once: PUT with the body Judge0
 *             sends, Content-Type application/json and X-Moat-Signature
 *             (cb_signature, a fresh timestamp each attempt).  libcurl is
 *             told: https only, no redirects, no proxy (environment
 *             proxies would be the address vetted, not the receiver), a
 *             new connection each time (a connection vetted for a tenant
 *             that allows private addresses is never reused for one that
 *             does not), the receiver's certificate verified (callbacks.
 *             ca_file or the system's CAs), connect and total timeouts.
 *   vet       libcurl resolves the host; every address it is about to
 *             connect to comes through vet_socket(), which refuses one
 *             that is loopback, private, link-local... unless the tenant
 *             allows private addresses (cb_addr_allowed), and refuses the
 *             rest of the attempt after a refusal.  The check is on the
 *             very address connected to, so a DNS answer that changes
 *             between a check and the connection (rebinding) cannot slip
 *             through: there is no second lookup.
 *   outcome   2xx: delivered.  5xx, 408, 429 or a network failure
 *             (timeout, refused connection, TLS): another attempt after
 *             retry_ms, doubling each time, up to max_tries attempts.
 *             Another status, or an address refused: given up at once.
 *             Every attempt's outcome is logged with tenant, token and
 *             URL.
 *
 * When the gateway's end of the socket closes (the gateway stopped), the
 * sender stops taking messages, lets the attempts in flight finish for at
 * most GW_CALLBACK_DRAIN_MS, logs what it drops and returns.
 */
#include "callback_sender.h"
#include "callback_wire.h"
#include "log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <openssl/crypto.h>

/* One callback, from its message to its outcome. */
struct job {
    struct job *next; /* the waiting list, or the list in flight */
    char tenant[GW_MAX_TENANT_NAME + 1];
    char token[JUDGE0_TOKEN_LEN + 1];
    char url[GW_CALLBACK_URL_MAX + 1];
    uint8_t *body;
    size_t body_len;
    uint8_t secret[GW_CALLBACK_SECRET_MAX];
    size_t secret_len;
    int allow_private;
    unsigned tries;  /* attempts started */
    uint64_t due_ms; /* waiting: not before (monotonic) */
    /* the attempt in flight */
    CURL *easy;
    struct curl_slist *headers;
    int refused;                              /* vet_socket refused an address */
    char refused_what[INET6_ADDRSTRLEN + 48]; /* "loopback address 127.0.0.1" */
    size_t response_bytes;
};

struct cb_sender {
    int fd;
    const struct gw_config *cfg;
    CURLM *multi;
    struct job *waiting; /* in arrival order */
    size_t nwaiting, nflight;
    int stopping;         /* no more messages: draining */
    uint64_t drain_until; /* when stopping: the end of the drain */
    uint8_t *buf;         /* one message */
    uint64_t dropped, delivered, failed;
};

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void job_free(struct job *j)
{
    if (j->easy != NULL)
        curl_easy_cleanup(j->easy);
    curl_slist_free_all(j->headers);
    OPENSSL_cleanse(j->secret, sizeof(j->secret));
    free(j->body);
    free(j);
}

struct cb_sender *cb_sender_new(int fd, const struct gw_config *cfg)
{
    struct cb_sender *s = calloc(1, sizeof(*s));

    if (s == NULL || (s->buf = malloc(GW_CALLBACK_MESSAGE_MAX + 1)) == NULL || (s->multi = curl_multi_init()) == NULL) {
        if (s != NULL)
            free(s->buf);
        free(s);
        return NULL;
    }
    s->fd = fd;
    s->cfg = cfg;
    return s;
}

void cb_sender_set_config(struct cb_sender *s, const struct gw_config *cfg)
{
    s->cfg = cfg;
}

void cb_sender_stop(struct cb_sender *s)
{
    if (!s->stopping) {
        s->stopping = 1;
        s->drain_until = now_ms() + GW_CALLBACK_DRAIN_MS;
    }
}

void cb_sender_free(struct cb_sender *s)
{
    struct job *j;

    while ((j = s->waiting) != NULL) {
        s->waiting = j->next;
        job_free(j);
    }
    curl_multi_cleanup(s->multi);
    free(s->buf);
    free(s);
}

/* ------------------------------------------------------------- take */

static void drop(struct cb_sender *s, const char *tenant, const char *token, const char *why)
{
    s->dropped++;
    log_warnx("cb_take: tenant=%s token=%s: callback dropped: %s (%llu dropped so far)", tenant, token, why,
              (unsigned long long)s->dropped);
}

/* A decoded message becomes a waiting job, or is dropped. */
static void take(struct cb_sender *s, const struct cb_message *m)
{
    const struct gw_tenant *t = gw_config_find_tenant(s->cfg, m->tenant);
    struct cb_tenant_rules rules;
    struct job *j, **tail;
    char err[256];

    if (t == NULL || t->callbacks.nallow == 0) {
        drop(s, m->tenant, m->token, "the tenant has no callbacks in the configuration");
        return;
    }
    rules = gw_tenant_callback_rules(t);
    if (cb_check_url(&rules, m->url, strlen(m->url), NULL, err, sizeof(err)) != 0) {
        drop(s, m->tenant, m->token, err);
        return;
    }
    if (s->nwaiting + s->nflight >= s->cfg->callbacks.max_queue) {
        drop(s, m->tenant, m->token, "the queue is full (callbacks.max_queue)");
        return;
    }
    if ((j = calloc(1, sizeof(*j))) == NULL || (j->body = moat_memdup0(m->body, m->body_len)) == NULL) {
        free(j);
        drop(s, m->tenant, m->token, "out of memory");
        return;
    }
    memcpy(j->tenant, m->tenant, sizeof(j->tenant));
    memcpy(j->token, m->token, sizeof(j->token));
    memcpy(j->url, m->url, sizeof(j->url));
    j->body_len = m->body_len;
    memcpy(j->secret, t->callbacks.secret, t->callbacks.secret_len);
    j->secret_len = t->callbacks.secret_len;
    j->allow_private = t->callbacks.allow_private;
    j->due_ms = now_ms();
    for (tail = &s->waiting; *tail != NULL; tail = &(*tail)->next)
        ;
    *tail = j;
    s->nwaiting++;
}

/* Every message the socket holds now; its end closing starts the drain. */
static void read_messages(struct cb_sender *s)
{
    for (;;) {
        struct cb_message m;
        char err[128];
        ssize_t n = recv(s->fd, s->buf, GW_CALLBACK_MESSAGE_MAX + 1, MSG_DONTWAIT | MSG_TRUNC);
        if (n < 0) {
            if (errno != EAGAIN && errno != EINTR) {
                log_warn("%s: recv", __func__);
                cb_sender_stop(s);
            }
            return;
        }
        if (n == 0) {
            log_info("%s: the gateway closed its end: finishing the callbacks in hand", __func__);
            cb_sender_stop(s);
            return;
        }
        if ((size_t)n > GW_CALLBACK_MESSAGE_MAX) {
            drop(s, "?", "?", "a message larger than GW_CALLBACK_MESSAGE_MAX");
            continue;
        }
        if (cb_message_decode(s->buf, (size_t)n, &m, err, sizeof(err)) != 0) {
            log_warnx("%s: a malformed message from the gateway: %s", __func__, err);
            continue;
        }
        take(s, &m);
    }
}

/* ---------------------------------------------------------- attempt */

/* Every address libcurl is about to connect to, vetted (the file's comment: vet). */
static curl_socket_t vet_socket(void *clientp, curlsocktype purpose, struct curl_sockaddr *a)
{
    struct job *j = clientp;
    enum cb_addr_kind k = cb_addr_kind_of_sockaddr(&a->addr, a->addrlen);
    char text[INET6_ADDRSTRLEN] = "?";

    if (purpose == CURLSOCKTYPE_IPCXN && !j->refused && cb_addr_allowed(k, j->allow_private))
        return socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
    if (!j->refused) {
        const void *ip = a->family == AF_INET6 ? (const void *)&((const struct sockaddr_in6 *)(const void *)&a->addr)->sin6_addr
                                               : (const void *)&((const struct sockaddr_in *)(const void *)&a->addr)->sin_addr;
        if (a->family == AF_INET || a->family == AF_INET6)
            inet_ntop(a->family, ip, text, sizeof(text));
        snprintf(j->refused_what, sizeof(j->refused_what), "%s address %s", cb_addr_kind_name(k), text);
        j->refused = 1;
    }
    return CURL_SOCKET_BAD;
}

/* The receiver's answer is read and thrown away, at most GW_CALLBACK_RESPONSE_MAX bytes of it. */
static size_t discard(char *data, size_t size, size_t n, void *arg)
{
    struct job *j = arg;

    (void)data;
    j->response_bytes += size * n;
    return j->response_bytes > GW_CALLBACK_RESPONSE_MAX ? 0 : size * n;
}

/* The request of one attempt on j->easy.  0, or -1. */
static int set_request(struct cb_sender *s, struct job *j)
{
    const struct gw_callback_config *c = &s->cfg->callbacks;
    char sig[CB_SIGNATURE_MAX], header[sizeof(sig) + sizeof(CB_SIGNATURE_HEADER) + 2];
    CURL *e = j->easy;
    struct curl_slist *h = NULL;

    if (cb_signature(j->secret, j->secret_len, (long long)time(NULL), j->body, j->body_len, sig) != 0)
        return -1;
    snprintf(header, sizeof(header), "%s: %s", CB_SIGNATURE_HEADER, sig);
    if ((h = curl_slist_append(NULL, "Content-Type: application/json")) == NULL ||
        (j->headers = curl_slist_append(h, header)) == NULL || curl_slist_append(j->headers, "Expect:") == NULL) {
        curl_slist_free_all(j->headers != NULL ? j->headers : h);
        j->headers = NULL;
        return -1;
    }
    int ok =
        curl_easy_setopt(e, CURLOPT_URL, j->url) == CURLE_OK && curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "https") == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "https") == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L) == CURLE_OK && curl_easy_setopt(e, CURLOPT_PROXY, "") == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_NOPROXY, "*") == CURLE_OK && curl_easy_setopt(e, CURLOPT_FRESH_CONNECT, 1L) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_FORBID_REUSE, 1L) == CURLE_OK && curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 1L) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 2L) == CURLE_OK &&
        /* ca_file: those CAs only, not the system's directory as well */
        (c->ca_file == NULL ||
         (curl_easy_setopt(e, CURLOPT_CAINFO, c->ca_file) == CURLE_OK && curl_easy_setopt(e, CURLOPT_CAPATH, NULL) == CURLE_OK)) &&
        curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)c->connect_timeout_ms) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)c->timeout_ms) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, vet_socket) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, j) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, "PUT") == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, j->body) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)j->body_len) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_HTTPHEADER, j->headers) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_USERAGENT, "moat-callback") == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, discard) == CURLE_OK && curl_easy_setopt(e, CURLOPT_WRITEDATA, j) == CURLE_OK &&
        curl_easy_setopt(e, CURLOPT_PRIVATE, j) == CURLE_OK;
    return ok ? 0 : -1;
}

static void finish(struct cb_sender *s, struct job *j, int delivered, const char *what)
{
    if (delivered) {
        s->delivered++;
        log_info("cb_attempt: tenant=%s token=%s url=%s attempt %u: delivered (%s)", j->tenant, j->token, j->url, j->tries, what);
    } else {
        s->failed++;
        log_warnx("cb_attempt: tenant=%s token=%s url=%s attempt %u: given up: %s", j->tenant, j->token, j->url, j->tries, what);
    }
    job_free(j);
}

/* Start j's next attempt (j is off the waiting list). */
static void start(struct cb_sender *s, struct job *j)
{
    j->tries++;
    j->refused = 0;
    j->response_bytes = 0;
    curl_slist_free_all(j->headers);
    j->headers = NULL;
    if ((j->easy = curl_easy_init()) == NULL || set_request(s, j) != 0 || curl_multi_add_handle(s->multi, j->easy) != CURLM_OK) {
        finish(s, j, 0, "cannot set up the request");
        return;
    }
    s->nflight++;
}

/* Attempts for waiting jobs that are due, up to max_in_flight. */
static void start_due(struct cb_sender *s)
{
    uint64_t now = now_ms();
    struct job **p = &s->waiting;

    while (*p != NULL && s->nflight < s->cfg->callbacks.max_in_flight) {
        struct job *j = *p;
        if (j->due_ms > now) {
            p = &j->next;
            continue;
        }
        *p = j->next;
        j->next = NULL;
        s->nwaiting--;
        start(s, j);
    }
}

/* ----------------------------------------------------------- outcome */

/* Back to the waiting list for another attempt, or given up. */
static void again(struct cb_sender *s, struct job *j, const char *what)
{
    const struct gw_callback_config *c = &s->cfg->callbacks;
    struct job **tail;

    if (j->tries >= c->max_tries || s->stopping) {
        finish(s, j, 0, what);
        return;
    }
    log_warnx("cb_attempt: tenant=%s token=%s url=%s attempt %u: %s; trying again", j->tenant, j->token, j->url, j->tries, what);
    j->due_ms = now_ms() + (c->retry_ms << (j->tries - 1));
    for (tail = &s->waiting; *tail != NULL; tail = &(*tail)->next)
        ;
    *tail = j;
    s->nwaiting++;
}

/* An attempt is over: delivered, again, or given up. */
static void outcome(struct cb_sender *s, struct job *j, CURLcode rc)
{
    long status = 0;
    char what[CURL_ERROR_SIZE + 64];

    curl_easy_getinfo(j->easy, CURLINFO_RESPONSE_CODE, &status);
    curl_multi_remove_handle(s->multi, j->easy);
    curl_easy_cleanup(j->easy);
    j->easy = NULL;
    s->nflight--;
    if (j->refused) {
        snprintf(what, sizeof(what), "refused: the host resolves to a %s, which the tenant's configuration does not allow",
                 j->refused_what);
        finish(s, j, 0, what);
    } else if (status >= 200 && status <= 299) {
        snprintf(what, sizeof(what), "HTTP %ld", status);
        finish(s, j, 1, what);
    } else if (status >= 500 || status == 408 || status == 429 || (rc != CURLE_OK && status == 0)) {
        if (status != 0)
            snprintf(what, sizeof(what), "HTTP %ld", status);
        else
            snprintf(what, sizeof(what), "%s", curl_easy_strerror(rc));
        again(s, j, what);
    } else {
        snprintf(what, sizeof(what), "HTTP %ld", status);
        finish(s, j, 0, what);
    }
}

static void reap(struct cb_sender *s)
{
    CURLMsg *m;
    int left;

    while ((m = curl_multi_info_read(s->multi, &left)) != NULL) {
        struct job *j = NULL;
        if (m->msg != CURLMSG_DONE)
            continue;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&j);
        if (j != NULL)
            outcome(s, j, m->data.result);
    }
}

/* -------------------------------------------------------------- loop */

/* How long the loop may sleep: libcurl's timers, the next retry, a second at most. */
static int wait_ms(struct cb_sender *s)
{
    long t = -1;
    uint64_t now = now_ms(), ms = 1000;

    if (curl_multi_timeout(s->multi, &t) == CURLM_OK && t >= 0 && (uint64_t)t < ms)
        ms = (uint64_t)t;
    for (const struct job *j = s->waiting; j != NULL && s->nflight < s->cfg->callbacks.max_in_flight; j = j->next) {
        uint64_t in = j->due_ms > now ? j->due_ms - now : 0;
        if (in < ms)
            ms = in;
    }
    return (int)ms;
}

/* Draining: done when nothing is in hand, or the drain's time is up (what remains is logged as dropped). */
static int drained(struct cb_sender *s)
{
    struct job *j;

    if (!s->stopping)
        return 0;
    if (s->nflight == 0 && s->nwaiting == 0)
        return 1;
    if (now_ms() < s->drain_until)
        return 0;
    while ((j = s->waiting) != NULL) {
        s->waiting = j->next;
        s->nwaiting--;
        drop(s, j->tenant, j->token, "the gateway stopped before another attempt was due");
        job_free(j);
    }
    if (s->nflight > 0)
        log_warnx("%s: %zu callbacks still in flight at exit", __func__, s->nflight);
    return 1;
}

int cb_sender_run(struct cb_sender *s, int sigfd, void (*on_signal)(struct cb_sender *s, int sig))
{
    int running;

    while (!drained(s)) {
        struct curl_waitfd fds[2] = {{sigfd, CURL_WAIT_POLLIN, 0}, {s->fd, CURL_WAIT_POLLIN, 0}};
        start_due(s);
        if (curl_multi_perform(s->multi, &running) != CURLM_OK) {
            log_warnx("%s: curl_multi_perform failed", __func__);
            return -1;
        }
        reap(s);
        if (curl_multi_wait(s->multi, fds, s->stopping ? 1 : 2, wait_ms(s), NULL) != CURLM_OK) {
            log_warnx("%s: curl_multi_wait failed", __func__);
            return -1;
        }
        if (fds[0].revents != 0) {
            struct signalfd_siginfo si;
            if (read(sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si))
                on_signal(s, (int)si.ssi_signo);
        }
        if (!s->stopping && fds[1].revents != 0)
            read_messages(s);
    }
    log_info("%s: stopped: %llu delivered, %llu given up, %llu dropped", __func__, (unsigned long long)s->delivered,
             (unsigned long long)s->failed, (unsigned long long)s->dropped);
    return 0;
}
