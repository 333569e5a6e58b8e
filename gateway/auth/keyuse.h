/*
 * keyuse.h - when each API key last authenticated a request, shared by the
 * gateway (which notes it) and the supervisor (which reads it for
 * `moatctl key list`); see keyuse.c.
 */
#ifndef GW_KEYUSE_H
#define GW_KEYUSE_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* Map the table (shared, anonymous): call once, before the supervisor forks.  0 or -1. */
int gw_keyuse_init(void);

/* A request authenticated with key id (APIKEY_ID_LEN hex characters) at now. */
void gw_keyuse_note(const char *id, time_t now);

/* When key id last authenticated a request, or 0 (never, since the start, or no table). */
time_t gw_keyuse_last(const char *id);

/* Each key used at or after since: fn(id, when, arg), in no order.  How many. */
typedef void (*gw_keyuse_fn)(const char *id, time_t last, void *arg);
size_t gw_keyuse_since(time_t since, gw_keyuse_fn fn, void *arg);

#endif
