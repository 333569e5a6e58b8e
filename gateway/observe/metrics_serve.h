/*
 * metrics_serve.h - the /metrics listener (metrics_serve.c) and the text it
 * serves (metrics_render.c).
 */
#ifndef GW_METRICS_SERVE_H
#define GW_METRICS_SERVE_H

#include <stddef.h>

#include "common/metrics.h"

struct gw_config;
struct gw_server;
struct gw_worker;

/* metrics_serve.c.  The metrics section's listener, bound before the privilege drop (nothing
 * when the section is absent): 0, or -1 with err. */
int gw_metrics_listen(const struct gw_config *cfg, char *err, size_t errlen);

/* On worker 0's loop: serve the listener (plain HTTP/1.1, /metrics only). */
void gw_metrics_serve(struct gw_worker *w);

/* Shutdown: close the listener (worker 0's thread). */
void gw_metrics_stop(struct gw_worker *w);

/* The text exposition of every worker's counters and the gauges (malloc;
 * NULL when out of memory), *len its length.  backend: what moat-backend
 * said of its load just now (present 0: it did not answer), or NULL to
 * leave the backend's gauges out. */
struct moat_backend_load;
char *gw_metrics_render(struct gw_server *srv, const struct moat_backend_load *backend, size_t *len);

#endif /* GW_METRICS_SERVE_H */
