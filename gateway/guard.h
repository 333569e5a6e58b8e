/*
 * guard.h - the first handler every request meets, before the router.
 */
#ifndef GW_GUARD_H
#define GW_GUARD_H

#include <stddef.h>

#ifndef H2O_USE_LIBUV
#define H2O_USE_LIBUV 0
#endif
#include <h2o.h>

/* Register the guard on pathconf; it must come before the router. */
void gw_guard_register(h2o_pathconf_t *pathconf);

/*
 * Check the framing headers of an HTTP/1.x request head (buf holds the
 * request line through the empty line, or more): at most one
 * Content-Length, of digits only; at most one Transfer-Encoding, exactly
 * "chunked"; never both; no obsolete line folding; no white space in a
 * header name.  Returns NULL if acceptable, else the reason.
 */
const char *gw_http1_check_framing(const char *buf, size_t len);

#endif /* GW_GUARD_H */
