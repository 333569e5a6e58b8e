/*
 * gw_clock.h - the gateway's one monotonic clock, in nanoseconds (a
 * request's duration in its log line, a session's clocks).  A header of
 * its own so that the bottom of the request core (http.c, the log line)
 * needs nothing above it for the time.
 */
#ifndef GW_CLOCK_H
#define GW_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t gw_monotonic_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#endif
