/*
 * tls.h - the server's TLS context (OpenSSL 3).
 */
#ifndef GW_TLS_H
#define GW_TLS_H

#include <stddef.h>

#include <openssl/ssl.h>

#include "config/config.h"

/*
 * TLS 1.2 minimum, ECDHE with AEAD ciphers only (Mozilla "intermediate"),
 * no renegotiation, ALPN h2 and http/1.1.  Loads the certificate chain and
 * the private key (refusing a key file group or others can write).  Returns
 * the context, or NULL with err set.  With tls.client_ca, asks clients for
 * a certificate signed by it (and requires one with
 * tls.require_client_certificate).  Called before the privilege drop at
 * start, and again on SIGHUP as the unprivileged user: certificate reload
 * then needs the key file to be readable by that user.
 */
SSL_CTX *gw_tls_create(const struct gw_config *cfg, char *err, size_t errlen);

#endif /* GW_TLS_H */
