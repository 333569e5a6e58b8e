/*
 * judge.c - a parsed execution request judged by the tenant's policy (see
 * judge.h).  Policy (policy/) decides; this only translates the request
 * into its terms and writes the verdict's effective limits back.
 */
#include "judge.h"
#include "moat_semver.h"
#include "runtime_table.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * A semver range ("^3.10", ">=3 <4") is judged as the concrete version it
 * picks among the installed runtimes (the worker's runtime table), and that
 * version is what the backend is asked for, so what runs is what policy
 * allowed.  A range that picks nothing stays as sent: policy allows it only
 * under "*" and the backend finds no runtime for it.  0, or -1 out of memory.
 */
static int resolve_range(struct moat_exec_request *ereq, const struct policy_runtime *selected)
{
    char *concrete;

    if (selected == NULL || ereq->version == NULL || moat_selector_is_plain(ereq->version))
        return 0;
    if ((concrete = strdup(selected->version)) == NULL)
        return -1;
    free(ereq->version);
    ereq->version = concrete;
    return 0;
}

int gw_judge_tests_budget(uint64_t backend_timeout_ms, struct moat_exec_request *ereq, char *err, size_t errlen)
{
    int64_t compile = ereq->compile_timeout_ms > 0 ? ereq->compile_timeout_ms : 0;
    int64_t budget = (int64_t)backend_timeout_ms - compile - 1000;

    if (budget > MOAT_MAX_TESTS_WALL_MS)
        budget = MOAT_MAX_TESTS_WALL_MS;
    if (budget < 1000)
        budget = 1000;
    if (ereq->tests_wall_ms > budget) {
        snprintf(err, errlen,
                 "tests_timeout cannot exceed %lld ms (the gateway's backend timeout less the compile timeout in force)",
                 (long long)budget);
        return -1;
    }
    if (ereq->tests_wall_ms <= 0)
        ereq->tests_wall_ms = budget;
    return 0;
}

int gw_judge_exec(struct gw_worker *w, const struct tenant_policy *p, unsigned endpoint, struct moat_exec_request *ereq,
                  struct policy_verdict *v)
{
    struct policy_file files[MOAT_MAX_FILES];
    size_t arg_lens[MOAT_MAX_ARGS];
    struct policy_runtime rt;
    struct policy_request pr;

    memset(&pr, 0, sizeof(pr));
    pr.endpoint = endpoint;
    pr.language = ereq->language;
    /* the runtime the version picks; else any of that name (its names widen a policy entry) */
    pr.runtime = gw_runtime_table_select(w, ereq->language, ereq->version, &rt);
    if (resolve_range(ereq, pr.runtime) != 0) {
        memset(v, 0, sizeof(*v));
        v->http_status = 503;
        snprintf(v->message, sizeof(v->message), "%s", "out of memory");
        return -1;
    }
    if (pr.runtime == NULL)
        pr.runtime = gw_runtime_table_find(w, ereq->language, &rt);
    pr.version = ereq->version;
    for (size_t i = 0; i < ereq->nfiles && i < MOAT_MAX_FILES; i++)
        files[i] = (struct policy_file){ereq->files[i].name, ereq->files[i].content, ereq->files[i].content_len};
    for (size_t i = 0; i < ereq->nargs && i < MOAT_MAX_ARGS; i++)
        arg_lens[i] = strlen(ereq->args[i]);
    pr.files = files;
    pr.nfiles = ereq->nfiles;
    pr.stdin_len = ereq->stdin_len;
    pr.nargs = ereq->nargs;
    pr.arg_lens = arg_lens;
    pr.run_timeout_ms = ereq->run_timeout_ms;
    pr.compile_timeout_ms = ereq->compile_timeout_ms;
    pr.run_memory_bytes = ereq->run_memory_bytes;
    pr.compile_memory_bytes = ereq->compile_memory_bytes;
    /* 0 is "not asked" for the CPU limits (moat_proto.h) */
    pr.run_cpu_ms = ereq->run_cpu_ms > 0 ? ereq->run_cpu_ms : -1;
    pr.compile_cpu_ms = ereq->compile_cpu_ms > 0 ? ereq->compile_cpu_ms : -1;
    pr.run_stack_kib = ereq->run_stack_kib > 0 ? ereq->run_stack_kib : -1; /* 0 is "not asked" too */
    pr.run_processes = ereq->run_processes > 0 ? ereq->run_processes : -1;
    pr.run_file_size_kib = ereq->run_file_size_kib > 0 ? ereq->run_file_size_kib : -1;
    if (policy_evaluate(p, &pr, v) != 0 || !v->allow) {
        if (v->http_status == 0)
            v->http_status = 403;
        if (v->message[0] == '\0')
            snprintf(v->message, sizeof(v->message), "%s", "denied by policy");
        return -1;
    }
    ereq->run_timeout_ms = v->run_timeout_ms;
    ereq->compile_timeout_ms = v->compile_timeout_ms;
    ereq->run_memory_bytes = v->run_memory_bytes;
    ereq->compile_memory_bytes = v->compile_memory_bytes;
    ereq->run_cpu_ms = v->run_cpu_ms;
    ereq->compile_cpu_ms = v->compile_cpu_ms;
    ereq->run_stack_kib = v->run_stack_kib;
    ereq->run_processes = v->run_processes;
    ereq->run_file_size_kib = v->run_file_size_kib;
    /* the tenant's walls, on every request the tenant sends: no request body field reaches this */
    ereq->isolation = p->isolation;
    return 0;
}
