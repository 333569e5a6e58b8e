/*
 * sockio.c - see sockio.h.
 */
#include "sockio.h"

#include <errno.h>
#include <stdint.h>
#include <sys/socket.h>

int send_full(int fd, const void *buf, size_t len)
{
    size_t off = 0;
    while (off < len) {
        ssize_t n = send(fd, (const uint8_t *)buf + off, len - off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        off += (size_t)n;
    }
    return 0;
}
