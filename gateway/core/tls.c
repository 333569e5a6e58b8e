/*
 * tls.c - build the SSL_CTX the listeners hand to h2o.
 *
 * Memory per connection: OpenSSL gives every connection a read buffer
 * (16.7 KB) and a write buffer (16.6 KB) and keeps both for the
 * connection's life, though an idle keep-alive or HTTP/2 connection has
 * nothing in them.  The watchdog (conn.c) gives them back for every
 * connection with no request in flight, once a tick
 * (gw_tls_release_buffers): an idle TLS connection costs the gateway
 * about 15 KiB instead of 27 (bench_gateway's idle case), mostly
 * OpenSSL's own SSL object and cipher contexts (about 10 KB after a TLS
 * 1.3 handshake), then h2o's connection.  SSL_MODE_RELEASE_BUFFERS would
 * do the same after every record, at the cost of two allocations per
 * request (3% of an HTTP/1.1 401's instructions under callgrind).
 */
#include "tls.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/pem.h>

#ifndef H2O_USE_LIBUV
#define H2O_USE_LIBUV 0
#endif
#include <h2o.h>

/* Mozilla intermediate, TLS 1.2 part: ECDHE key exchange, AEAD ciphers only. */
#define GW_TLS12_CIPHERS                                                                                                           \
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"         \
    "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305"
#define GW_TLS13_SUITES "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256"
#define GW_TLS_GROUPS   "X25519:prime256v1:secp384r1"

static void ssl_error(char *err, size_t errlen, const char *what, const char *path)
{
    char buf[256];
    unsigned long e = ERR_get_error();

    ERR_error_string_n(e, buf, sizeof(buf));
    snprintf(err, errlen, "%s%s%s: %s", path != NULL ? path : "", path != NULL ? ": " : "", what, e != 0 ? buf : "failed");
    ERR_clear_error();
}

static int load_key(SSL_CTX *ctx, const char *path, char *err, size_t errlen)
{
    EVP_PKEY *pkey;
    FILE *fp;
    int fd, rc;

    if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY)) == -1) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    if (gw_check_file_secrecy(fd, path, err, errlen) != 0) {
        close(fd);
        return -1;
    }
    if ((fp = fdopen(fd, "r")) == NULL) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    pkey = PEM_read_PrivateKey(fp, NULL, NULL, NULL);
    fclose(fp);
    if (pkey == NULL) {
        ssl_error(err, errlen, "cannot read private key", path);
        return -1;
    }
    rc = SSL_CTX_use_PrivateKey(ctx, pkey);
    EVP_PKEY_free(pkey);
    if (rc != 1) {
        ssl_error(err, errlen, "cannot use private key", path);
        return -1;
    }
    return 0;
}

/*
 * Client certificates: ask for one signed by tls.client_ca, and with
 * tls.require_client_certificate refuse a handshake without one.
 */
static int load_client_ca(SSL_CTX *ctx, const struct gw_config *cfg, char *err, size_t errlen)
{
    static const unsigned char sid_ctx[] = "moat-gateway";
    STACK_OF(X509_NAME) * names;

    if (SSL_CTX_load_verify_locations(ctx, cfg->tls_client_ca, NULL) != 1) {
        ssl_error(err, errlen, "cannot load client CA certificates", cfg->tls_client_ca);
        return -1;
    }
    if ((names = SSL_load_client_CA_file(cfg->tls_client_ca)) == NULL) {
        ssl_error(err, errlen, "no CA certificates in file", cfg->tls_client_ca);
        return -1;
    }
    SSL_CTX_set_client_CA_list(ctx, names); /* takes ownership */
    /* resumed sessions must not skip the check: give them a context to match */
    if (SSL_CTX_set_session_id_context(ctx, sid_ctx, sizeof(sid_ctx) - 1) != 1) {
        ssl_error(err, errlen, "cannot set the session id context", NULL);
        return -1;
    }
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | (cfg->tls_require_client_cert ? SSL_VERIFY_FAIL_IF_NO_PEER_CERT : 0), NULL);
    SSL_CTX_set_verify_depth(ctx, 4);
    return 0;
}

SSL_CTX *gw_tls_create(const struct gw_config *cfg, char *err, size_t errlen)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());

    if (ctx == NULL) {
        ssl_error(err, errlen, "SSL_CTX_new", NULL);
        return NULL;
    }
    if (SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1) {
        ssl_error(err, errlen, "cannot set the minimum TLS version", NULL);
        goto fail;
    }
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
    if (SSL_CTX_set_cipher_list(ctx, GW_TLS12_CIPHERS) != 1 || SSL_CTX_set_ciphersuites(ctx, GW_TLS13_SUITES) != 1) {
        ssl_error(err, errlen, "cannot set the cipher list", NULL);
        goto fail;
    }
    char groups[] = GW_TLS_GROUPS; /* OpenSSL's macro casts away const (clang's -Wcast-qual) */
    if (SSL_CTX_set1_groups_list(ctx, groups) != 1) {
        ssl_error(err, errlen, "cannot set the key exchange groups", NULL);
        goto fail;
    }
    if (SSL_CTX_use_certificate_chain_file(ctx, cfg->tls_certificate) != 1) {
        ssl_error(err, errlen, "cannot load certificate chain", cfg->tls_certificate);
        goto fail;
    }
    if (load_key(ctx, cfg->tls_key, err, errlen) != 0)
        goto fail;
    if (SSL_CTX_check_private_key(ctx) != 1) {
        ssl_error(err, errlen, "private key does not match the certificate", cfg->tls_key);
        goto fail;
    }
    if (cfg->tls_client_ca != NULL && load_client_ca(ctx, cfg, err, errlen) != 0)
        goto fail;
    h2o_ssl_register_alpn_protocols(ctx, h2o_http2_alpn_protocols);
    return ctx;

fail:
    SSL_CTX_free(ctx);
    return NULL;
}
