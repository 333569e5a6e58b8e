/*
 * judge0_callback.h - a finished Judge0 submission handed to the callback
 * sender (see judge0_callback.c).
 */
#ifndef GW_JUDGE0_CALLBACK_H
#define GW_JUDGE0_CALLBACK_H

#include <stddef.h>
#include <stdint.h>

#include "config/config.h"

/* The gateway's end of the sender's socket (privsep.c), shared by every
 * worker; made non-blocking here.  Called once before the workers start;
 * without it (-1) callbacks are dropped and logged. */
void judge0_callback_init(int fd);

/*
 * A submission's record was just kept (text: the stored record, JSON):
 * when it is final (not In Queue or Processing) and names a callback_url
 * that the tenant's rules in cfg still allow, send the sender the body
 * Judge0 sends (the default fields, texts in base64).  Never blocks: a
 * message the socket cannot take at once is dropped, logged and counted.
 */
void judge0_callback_kept(const struct gw_config *cfg, const char *tenant, const char *token, const char *text, size_t len);

/* Callbacks handed to the sender, and dropped (socket full, too large, no sender). */
uint64_t judge0_callback_sent(void);
uint64_t judge0_callback_dropped(void);

#endif /* GW_JUDGE0_CALLBACK_H */
