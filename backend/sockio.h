/*
 * sockio.h - the backend's whole-buffer socket write, now moat_send_full in
 * moat_common (backend/common/moat_io.h).  Kept only while backend/box.c
 * still calls it send_full; new code includes moat_io.h.
 */
#ifndef MOAT_SOCKIO_H
#define MOAT_SOCKIO_H

#include "moat_io.h"

static inline int send_full(int fd, const void *buf, size_t len)
{
    return moat_send_full(fd, buf, len);
}

#endif
