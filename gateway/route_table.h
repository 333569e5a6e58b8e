/*
 * route_table.h - the route table (route_table.c) and the handlers it
 * names.
 */
#ifndef GW_ROUTE_TABLE_H
#define GW_ROUTE_TABLE_H

#include "core/routes.h"

/* The handlers of the routes (handler_*.c). */
extern const struct gw_handler gw_handler_healthz, gw_handler_readyz, gw_handler_runtimes, gw_handler_execute, gw_handler_connect,
    gw_handler_watch, gw_handler_execution, gw_handler_execution_review, gw_handler_judge0_languages, gw_handler_judge0_language,
    gw_handler_judge0_statuses, gw_handler_judge0_about, gw_handler_judge0_config_info, gw_handler_judge0_submit,
    gw_handler_judge0_submission, gw_handler_judge0_batch, gw_handler_judge0_batch_submit;

/* Install the table for routes.c (at start, before the workers). */
void gw_route_table_install(void);

#endif
