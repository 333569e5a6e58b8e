/*
 * test_gateway_metrics.c - metrics.c: requests counted per worker and
 * summed by a scrape, labels from the route table only (escaped), the
 * histogram's cumulative buckets, and a full label table.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "observe/metrics_serve.h"
#include "core/http.h"
#include "core/pipeline.h"
#include "route_table.h"

static struct gw_server srv; /* no workers of its own: the gauges read nothing */

static char *scrape(void)
{
    size_t len = 0;
    char *text = gw_metrics_render(&srv, NULL, &len);

    assert_non_null(text);
    assert_int_equal(strlen(text), len);
    return text;
}

static void count(const char *tenant, const struct gw_route *route, int status, uint64_t us)
{
    struct gw_request r;

    memset(&r, 0, sizeof(r));
    r.tenant = tenant;
    r.route = route;
    gw_metrics_request(&r, status, us);
}

static void assert_has(const char *text, const char *line)
{
    if (strstr(text, line) == NULL)
        fail_msg("missing: %s\nin:\n%s", line, text);
}

static void test_counts_and_labels(void **state)
{
    size_t n;
    const struct gw_route *rows = gw_routes(&n);
    char line[256];
    char *text;

    (void)state;
    assert_true(n > 0 && n <= GW_METRICS_ROUTES);
    gw_metrics_attach(0);
    count("acme", &rows[0], 200, 700);
    count("acme", &rows[0], 200, 20000000); /* past the last bucket: +Inf only */
    count(NULL, NULL, 404, 100);
    count("we\"ird\\na\nme", &rows[0], 401, 100);
    gw_metrics_attach(1);
    count("acme", &rows[0], 200, 100); /* another worker: summed */
    text = scrape();
    snprintf(line, sizeof(line), "moat_requests_total{tenant=\"acme\",route=\"%s\",method=\"%s\",status=\"200\"} 3\n", rows[0].path,
             rows[0].method);
    assert_has(text, line);
    assert_has(text, "moat_requests_total{tenant=\"\",route=\"other\",method=\"other\",status=\"404\"} 1\n");
    /* the text format's escapes: backslash, quote, newline */
    snprintf(line, sizeof(line), "tenant=\"we\\\"ird\\\\na\\nme\",route=\"%s\"", rows[0].path);
    assert_has(text, line);
    snprintf(line, sizeof(line), "moat_request_duration_seconds_bucket{route=\"%s\",method=\"%s\",le=\"0.0005\"} 2\n", rows[0].path,
             rows[0].method);
    assert_has(text, line);
    snprintf(line, sizeof(line), "moat_request_duration_seconds_bucket{route=\"%s\",method=\"%s\",le=\"0.001\"} 3\n", rows[0].path,
             rows[0].method);
    assert_has(text, line);
    snprintf(line, sizeof(line), "moat_request_duration_seconds_bucket{route=\"%s\",method=\"%s\",le=\"10\"} 3\n", rows[0].path,
             rows[0].method);
    assert_has(text, line);
    snprintf(line, sizeof(line), "moat_request_duration_seconds_bucket{route=\"%s\",method=\"%s\",le=\"+Inf\"} 4\n", rows[0].path,
             rows[0].method);
    assert_has(text, line);
    snprintf(line, sizeof(line), "moat_request_duration_seconds_count{route=\"%s\",method=\"%s\"} 4\n", rows[0].path,
             rows[0].method);
    assert_has(text, line);
    snprintf(line, sizeof(line), "moat_request_duration_seconds_sum{route=\"%s\",method=\"%s\"} 20.000900\n", rows[0].path,
             rows[0].method);
    assert_has(text, line);
    assert_has(text, "moat_limiter_store_state{store=\"memory\",state=\"up\"} 1\n");
    assert_has(text, "moat_requests_unlabelled_total 0\n");
    free(text);
}

/* A worker's table holds GW_METRICS_TABLE keys; more are counted unlabelled. */
static void test_table_full(void **state)
{
    char tenant[32], *text;

    (void)state;
    gw_metrics_attach(1);
    for (unsigned i = 0; i < GW_METRICS_TABLE + 5; i++) {
        snprintf(tenant, sizeof(tenant), "t%u", i);
        count(tenant, NULL, 200, 1);
    }
    count("t0", NULL, 200, 1); /* an existing key still counts */
    text = scrape();
    /* worker 1 already held one key (acme) */
    assert_has(text, "moat_requests_unlabelled_total 6\n");
    assert_has(text, "moat_requests_total{tenant=\"t0\",route=\"other\",method=\"other\",status=\"200\"} 2\n");
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counts_and_labels),
        cmocka_unit_test(test_table_full),
    };

    gw_route_table_install();
    if (gw_metrics_init(2) != 0)
        return 1;
    return cmocka_run_group_tests(tests, NULL, NULL);
}
