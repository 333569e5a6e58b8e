/*
 * raw_h2o.c - the baseline of bench_gateway: a bare h2o 2.2.5 evloop TLS
 * server that answers every request with 200 and a fixed small JSON body.
 *
 *   raw_h2o -c CERT -k KEY [-a ADDRESS] [-p PORT] [-t THREADS]
 *
 * It is built the way moat-gateway is (gateway/server.c, gateway/core/tls.c):
 * one h2o evloop and one SO_REUSEPORT listener per worker thread, the same
 * TLS context settings (TLS 1.2 minimum, ECDHE + AEAD, ALPN h2 and
 * http/1.1 through h2o_ssl_register_alpn_protocols), and the response is
 * sent the same way (h2o_send_inline with a Content-Type header).  What it
 * leaves out is everything the gateway adds: routing, authentication, rate
 * limiting, JSON building, request ids and the access log.  So the ratio
 * gateway/raw_h2o measures the cost of moat's own request handling.
 *
 * Runs until SIGTERM or SIGINT, then exits 0.
 */
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#ifndef H2O_USE_LIBUV
#define H2O_USE_LIBUV 0
#endif
#include <h2o.h>

/* The same TLS settings as gateway/core/tls.c. */
#define RAW_TLS12_CIPHERS                                                                                                          \
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"         \
    "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305"
#define RAW_TLS13_SUITES "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256"
#define RAW_TLS_GROUPS   "X25519:prime256v1:secp384r1"

#define RAW_MAX_THREADS     256
#define RAW_IDLE_TIMEOUT_MS 60000

/* About the size of the gateway's error bodies. */
static const char body[] = "{\"message\":\"fixed response\",\"request_id\":\"0000000000000000\"}";

struct worker {
    h2o_context_t ctx;
    h2o_accept_ctx_t accept_ctx;
    int listen_fd;
    pthread_t tid;
};

static h2o_globalconf_t config;
static SSL_CTX *ssl_ctx;
static struct worker *workers;

static void die(const char *what)
{
    fprintf(stderr, "raw_h2o: %s\n", what);
    exit(1);
}

static void die_ssl(const char *what)
{
    char buf[256];

    ERR_error_string_n(ERR_get_error(), buf, sizeof(buf));
    fprintf(stderr, "raw_h2o: %s: %s\n", what, buf);
    exit(1);
}

static int on_req(h2o_handler_t *self, h2o_req_t *req)
{
    req->res.status = 200;
    req->res.reason = "OK";
    req->res.content_length = sizeof(body) - 1;
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, H2O_STRLIT("application/json"));
    h2o_send_inline(req, body, sizeof(body) - 1);
    return 0;
}

static void make_ssl_ctx(const char *cert, const char *key)
{
    static char groups[] = RAW_TLS_GROUPS;

    if ((ssl_ctx = SSL_CTX_new(TLS_server_method())) == NULL)
        die_ssl("SSL_CTX_new");
    if (SSL_CTX_set_min_proto_version(ssl_ctx, TLS1_2_VERSION) != 1)
        die_ssl("SSL_CTX_set_min_proto_version");
    SSL_CTX_set_options(ssl_ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
    if (SSL_CTX_set_cipher_list(ssl_ctx, RAW_TLS12_CIPHERS) != 1 || SSL_CTX_set_ciphersuites(ssl_ctx, RAW_TLS13_SUITES) != 1)
        die_ssl("cipher list");
    /* SSL_CTX_set1_groups_list() without the macro's const-dropping cast (clang -Wcast-qual) */
    if (SSL_CTX_ctrl(ssl_ctx, SSL_CTRL_SET_GROUPS_LIST, 0, groups) != 1)
        die_ssl("groups");
    if (SSL_CTX_use_certificate_chain_file(ssl_ctx, cert) != 1)
        die_ssl(cert);
    if (SSL_CTX_use_PrivateKey_file(ssl_ctx, key, SSL_FILETYPE_PEM) != 1 || SSL_CTX_check_private_key(ssl_ctx) != 1)
        die_ssl(key);
    h2o_ssl_register_alpn_protocols(ssl_ctx, h2o_http2_alpn_protocols);
}

static int bind_one(const char *address, const char *port)
{
    struct addrinfo hints, *ai = NULL;
    int fd, on = 1;

    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE;
    if (getaddrinfo(address, port, &hints, &ai) != 0)
        die("bad address or port");
    if ((fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol)) == -1)
        die("socket");
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)) == -1 ||
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &on, sizeof(on)) == -1)
        die("setsockopt");
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) == -1 || listen(fd, SOMAXCONN) == -1) {
        fprintf(stderr, "raw_h2o: bind/listen %s port %s: %s\n", address, port, strerror(errno));
        exit(1);
    }
    freeaddrinfo(ai);
    return fd;
}

static void on_accept(h2o_socket_t *listener, const char *err)
{
    struct worker *w = listener->data;
    h2o_socket_t *sock;

    if (err != NULL)
        return;
    if ((sock = h2o_evloop_socket_accept(listener)) == NULL)
        return;
    h2o_accept(&w->accept_ctx, sock);
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    h2o_evloop_t *loop = h2o_evloop_create();
    h2o_socket_t *listener;

    h2o_context_init(&w->ctx, loop, &config);
    w->accept_ctx.ctx = &w->ctx;
    w->accept_ctx.hosts = config.hosts;
    w->accept_ctx.ssl_ctx = ssl_ctx;
    listener = h2o_evloop_socket_create(loop, w->listen_fd, H2O_SOCKET_FLAG_DONT_READ);
    listener->data = w;
    h2o_socket_read_start(listener, on_accept);
    for (;;)
        h2o_evloop_run(loop, INT32_MAX);
    return NULL;
}

static void usage(void)
{
    fprintf(stderr, "usage: raw_h2o -c CERT -k KEY [-a ADDRESS] [-p PORT] [-t THREADS]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    const char *cert = NULL, *key = NULL, *address = "127.0.0.1", *port = "8444";
    long nthreads = 2;
    sigset_t set;
    int ch, sig = 0;

    while ((ch = getopt(argc, argv, "a:c:k:p:t:")) != -1) {
        switch (ch) {
        case 'a':
            address = optarg;
            break;
        case 'c':
            cert = optarg;
            break;
        case 'k':
            key = optarg;
            break;
        case 'p':
            port = optarg;
            break;
        case 't':
            nthreads = strtol(optarg, NULL, 10);
            break;
        default:
            usage();
        }
    }
    if (cert == NULL || key == NULL || optind != argc || nthreads < 1 || nthreads > RAW_MAX_THREADS)
        usage();
    signal(SIGPIPE, SIG_IGN);

    make_ssl_ctx(cert, key);
    h2o_config_init(&config);
    config.server_name = h2o_iovec_init(H2O_STRLIT("moat"));
    /* idle connections stay as long as the gateway's default idle_timeout_ms
     * keeps them (h2o's own 10 s would end bench_gateway's idle case) */
    config.http1.req_timeout = RAW_IDLE_TIMEOUT_MS;
    config.http2.idle_timeout = RAW_IDLE_TIMEOUT_MS;
    h2o_hostconf_t *hostconf = h2o_config_register_host(&config, h2o_iovec_init(H2O_STRLIT("default")), 65535);
    h2o_handler_t *h = h2o_create_handler(h2o_config_register_path(hostconf, "/", 0), sizeof(*h));
    h->on_req = on_req;

    if ((workers = calloc((size_t)nthreads, sizeof(*workers))) == NULL)
        die("out of memory");
    for (long i = 0; i < nthreads; i++)
        workers[i].listen_fd = bind_one(address, port);

    /* Workers inherit the mask: only this thread takes SIGTERM/SIGINT. */
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    if (pthread_sigmask(SIG_BLOCK, &set, NULL) != 0)
        die("pthread_sigmask");
    for (long i = 0; i < nthreads; i++)
        if (pthread_create(&workers[i].tid, NULL, worker_main, &workers[i]) != 0)
            die("pthread_create");
    fprintf(stderr, "raw_h2o: listening on %s port %s with %ld threads\n", address, port, nthreads);
    while (sigwait(&set, &sig) == EINTR)
        ;
    /* Workers never return; exit() reclaims everything. */
    exit(0);
}
