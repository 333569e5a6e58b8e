/*
 * buf.c - growable byte buffer (see moat_buf.h).
 */
#include "moat_buf.h"

#include <stdlib.h>
#include <string.h>

#define BUF_FIRST_CAP 256

int moat_buf_reserve(struct moat_buf *b, size_t extra)
{
    if (extra > SIZE_MAX - b->len)
        return -1;
    size_t need = b->len + extra;
    if (need <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : BUF_FIRST_CAP;
    while (cap < need) {
        if (cap > SIZE_MAX / 2)
            return -1;
        cap *= 2;
    }
    uint8_t *p = realloc(b->data, cap);
    if (p == NULL)
        return -1;
    b->data = p;
    b->cap = cap;
    return 0;
}

int moat_buf_append(struct moat_buf *b, const void *data, size_t len)
{
    if (moat_buf_reserve(b, len) != 0)
        return -1;
    if (len)
        memcpy(b->data + b->len, data, len);
    b->len += len;
    return 0;
}

void moat_buf_free(struct moat_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

void *moat_memdup0(const void *data, size_t len)
{
    uint8_t *p = len < SIZE_MAX ? malloc(len + 1) : NULL;

    if (p == NULL)
        return NULL;
    if (len > 0)
        memcpy(p, data, len);
    p[len] = '\0';
    return p;
}
