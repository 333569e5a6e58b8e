/*
 * callback_sender.h - the callback sender's work: take callback messages
 * from the gateway's workers, send each as Judge0 does (PUT, JSON body),
 * signed, to an address it has vetted, with bounded retries (see
 * callback_sender.c).  callback_sender_main.c is the process around it.
 */
#ifndef GW_CALLBACK_SENDER_H
#define GW_CALLBACK_SENDER_H

#include "config/config.h"

struct cb_sender;

/* A sender on the gateway's socket fd; cfg is borrowed until replaced.
 * Call curl_global_init first.  NULL out of memory. */
struct cb_sender *cb_sender_new(int fd, const struct gw_config *cfg);

/* A reloaded configuration: new messages are judged by it (callbacks
 * already queued keep the rules and secret they were taken with). */
void cb_sender_set_config(struct cb_sender *s, const struct gw_config *cfg);

/*
 * Run until the gateway's end of the socket closes and the callbacks in
 * hand are done (at most GW_CALLBACK_DRAIN_MS more).  sigfd: a signalfd
 * for SIGHUP and SIGTERM; on_signal is called with each signal read
 * (SIGHUP: reload, then cb_sender_set_config; SIGTERM: stop like an end of
 * the socket).  0, or -1 when the loop itself fails.
 */
int cb_sender_run(struct cb_sender *s, int sigfd, void (*on_signal)(struct cb_sender *s, int sig));

/* Stop taking messages: finish what is in hand (bounded), then return from cb_sender_run. */
void cb_sender_stop(struct cb_sender *s);

void cb_sender_free(struct cb_sender *s);

#endif /* GW_CALLBACK_SENDER_H */
