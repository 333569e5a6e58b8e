/*
 * judge.c - a parsed execution request judged by the tenant's policy (see
 * judge.h).  Policy (policy/) decides; this only translates the request
 * into its terms and writes the verdict's effective limits back.
 */
#include "judge.h"
#include "runtime_table.h"

#include <stdio.h>
#include <string.h>

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
    pr.version = ereq->version;
    pr.runtime = gw_runtime_table_find(w, ereq->language, &rt);
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
    return 0;
}
