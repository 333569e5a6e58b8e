/*
 * framing.h - step 2 of the request path: message framing checks.
 */
#ifndef GW_FRAMING_H
#define GW_FRAMING_H

#include <stddef.h>

#ifndef H2O_USE_LIBUV
#define H2O_USE_LIBUV 0
#endif
#include <h2o.h>

/* Step 2 for req (HTTP/1 or HTTP/2): NULL if acceptable, else the reason. */
const char *gw_framing_check(h2o_req_t *req);

/*
 * Check the framing headers of an HTTP/1.x request head (buf holds the
 * request line through the empty line, or more): at most one
 * Content-Length, of digits only; at most one Transfer-Encoding, exactly
 * "chunked"; never both; no obsolete line folding; no white space in a
 * header name.  Returns NULL if acceptable, else the reason.
 */
const char *gw_http1_check_framing(const char *buf, size_t len);

#endif /* GW_FRAMING_H */
