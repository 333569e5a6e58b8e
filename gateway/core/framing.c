/*
 * framing.c - step 2 of the request path: what must hold for the message
 * framing before anything reads the request (G14/G15).
 *
 * HTTP/1: h2o 2.2.5 takes the first of duplicate Content-Length headers,
 * lets Transfer-Encoding win over Content-Length, and keeps neither header
 * in req->headers, so the request head is read again from the socket's
 * input buffer (h2o_compat.c: h2o leaves it there until the response is
 * done).  HTTP/2: content-length must match the DATA received, and no
 * header value may hold CR, LF or NUL.  The pipeline answers a failure
 * with a JSON 400 and, on HTTP/1, closes the connection.
 */
#include "framing.h"
#include "h2o_compat.h"
#include "log.h"

#include <string.h>
#include <strings.h>

static int is_ows(char c)
{
    return c == ' ' || c == '\t';
}

const char *gw_http1_check_framing(const char *buf, size_t len)
{
    size_t pos = 0, ncl = 0, nte = 0;
    int first = 1;

    for (;;) {
        const char *line = buf + pos, *nl, *colon, *v, *vend;
        size_t n;

        if (pos >= len || (nl = memchr(line, '\n', len - pos)) == NULL)
            return "incomplete request head";
        n = (size_t)(nl - line);
        pos += n + 1;
        if (n > 0 && line[n - 1] == '\r')
            n--;
        if (first) {
            first = 0;
            continue;
        }
        if (n == 0)
            break; /* end of the head */
        if (is_ows(line[0]))
            return "obsolete line folding in a header";
        if ((colon = memchr(line, ':', n)) == NULL)
            return "malformed header line";
        for (const char *p = line; p < colon; p++)
            if (is_ows(*p))
                return "white space in a header name";
        for (v = colon + 1, vend = line + n; v < vend && is_ows(*v); v++)
            ;
        while (vend > v && is_ows(vend[-1]))
            vend--;
        if (colon - line == 14 && strncasecmp(line, "content-length", 14) == 0) {
            if (++ncl > 1)
                return "more than one Content-Length";
            if (vend == v || vend - v > 18)
                return "malformed Content-Length";
            for (const char *p = v; p < vend; p++)
                if (*p < '0' || *p > '9')
                    return "malformed Content-Length";
        } else if (colon - line == 17 && strncasecmp(line, "transfer-encoding", 17) == 0) {
            if (++nte > 1)
                return "more than one Transfer-Encoding";
            if (vend - v != 7 || strncasecmp(v, "chunked", 7) != 0)
                return "Transfer-Encoding other than chunked";
        }
    }
    if (ncl != 0 && nte != 0)
        return "both Content-Length and Transfer-Encoding";
    return NULL;
}

/* HTTP/1: the raw head is at the start of the socket's input buffer. */
static const char *check_http1(h2o_req_t *req)
{
    h2o_iovec_t head = gw_h1_request_head(req);

    if (head.base == NULL) {
        log_warnx("%s: cannot find the request head in the input buffer", __func__);
        return "cannot verify the request framing";
    }
    return gw_http1_check_framing(head.base, head.len);
}

/* HTTP/2: content-length against the DATA received; no CR, LF or NUL in a value. */
static const char *check_h2(h2o_req_t *req)
{
    ssize_t i = h2o_find_header(&req->headers, H2O_TOKEN_CONTENT_LENGTH, -1);

    if (i != -1) {
        h2o_iovec_t v = req->headers.entries[i].value;
        size_t cl = h2o_strtosize(v.base, v.len);
        if (h2o_find_header(&req->headers, H2O_TOKEN_CONTENT_LENGTH, i) != -1)
            return "more than one content-length";
        if (cl == SIZE_MAX || cl != req->entity.len)
            return "content-length does not match the request body";
    }
    /* h2o 2.2.5 refuses these itself before any handler runs; kept as a
     * second wall, with memchr (the values total at most
     * http2.max_header_list_bytes: h2o_compat.c bounds them first) */
    for (size_t k = 0; k < req->headers.size; k++) {
        h2o_iovec_t v = req->headers.entries[k].value;
        if (memchr(v.base, '\r', v.len) != NULL || memchr(v.base, '\n', v.len) != NULL || memchr(v.base, '\0', v.len) != NULL)
            return "control character in a header value";
    }
    return NULL;
}

const char *gw_framing_check(h2o_req_t *req)
{
    /* origin-form only (RFC 9112 3.2.1, RFC 9113 8.3.1): h2o routes an
     * HTTP/2 :path such as "api/v2/execute" as if it had its slash */
    if (req->path.len == 0 || req->path.base[0] != '/')
        return "the request target must be an absolute path starting with /";
    return req->version < 0x200 ? check_http1(req) : check_h2(req);
}
