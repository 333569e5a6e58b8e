/*
 * job.c - one execute request: validate every field again (the backend
 * trusts nothing the socket brings), pick the language, apply limits that may
 * only lower the server's, take a slot, run the compile stage if there is one
 * and the run stage unless compiling failed, and fill the typed result.
 *
 * Test cases (issue 12 item 3): compiled once, each case run fresh.  The
 * compile stage runs in a box as usual; then, instead of its run stage,
 * the box's init packs what /box holds (box_pack: regular files and their
 * exec bits, never following a link, capped; checked again here as
 * untrusted bytes) and the box is discarded.  Each case then takes a warm
 * box of its own whose plan has those files and only a run stage, with the
 * case's stdin, args and limits (which may only lower the request's run
 * limits), so no case sees another's files or processes: the case's box,
 * its tmpfs and its pid namespace are gone before the next case starts.
 * The host still never opens anything inside a box: the files travel as
 * bytes over init's control socket and into the next box's plan, where
 * that box's init writes them O_EXCL | O_NOFOLLOW into a fresh tmpfs.
 * The cases run one after another, within the job's wall budget
 * (tests_wall_ms, at most DEFAULT_TESTS_WALL_MS): a case gets no more wall
 * time than the budget has left, and the cases after it has run out are
 * not run (the result holds fewer).  A language without a compile stage
 * gives every case the request's files.  Verdicts are the gateway's
 * (piston_tests.c): the backend returns each case's run stage as is.
 *
 * A request may also lower the run stage's stack, processes and file size
 * (run_rlimits_for: RLIMIT_STACK, pids.max with RLIMIT_NPROC, RLIMIT_FSIZE;
 * every test case inherits them), never raise them, and may add compiler
 * options, each of which the language's allow-list must take
 * (validate_compiler_options, moat_options.h): this is the check that
 * counts, whatever the gateway checked.  They reach the compiler as argv
 * elements where the manifest says "{options}".
 *
 * The checks and the plan (job_plan_init) are the same for a live session
 * (session.c), which adds its clocks and caps: the language's session
 * limits lowered by the SESSION_OPEN's ceilings, then by run_timeout.
 */
#include "job.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "moat_options.h"
#include "moat_path.h"

/* ---- validation -------------------------------------------------------- */

int job_fail(struct job_error *je, uint16_t code, const char *fmt, ...)
{
    va_list ap;
    je->code = code;
    va_start(ap, fmt);
    vsnprintf(je->message, sizeof(je->message), fmt, ap);
    va_end(ap);
    return -1;
}

static int validate_files(const struct moat_exec_request *req, struct job_error *je)
{
    size_t total = 0;
    if (req->nfiles == 0)
        return job_fail(je, MOAT_ERR_BAD_REQUEST, "files must hold at least one file");
    for (size_t i = 0; i < req->nfiles; i++) {
        /* a relative path inside /box, whatever the gateway checked (moat_path.h);
         * S26: no component a tool could read as an option ("-o") or an option
         * file ("@o" to gcc, rustc, javac, java); language_argv()'s "./" is the second line */
        const char *name = req->files[i].name;
        enum moat_path_problem p = moat_path_check(name, strlen(name));
        if (p == MOAT_PATH_CONTROL || p == MOAT_PATH_LENGTH)
            return job_fail(je, MOAT_ERR_BAD_REQUEST, "files[%zu].name %s", i, moat_path_problem_text(p));
        if (p != MOAT_PATH_OK)
            return job_fail(je, MOAT_ERR_BAD_REQUEST, "files[%zu].name %s (\"%.64s\")", i, moat_path_problem_text(p), name);
        for (size_t j = 0; j < i; j++) {
            if (strcmp(name, req->files[j].name) == 0)
                return job_fail(je, MOAT_ERR_BAD_REQUEST, "files[%zu].name repeats files[%zu].name", i, j);
            /* box_init.c creates directories as it meets them: a name may not be both */
            if (moat_path_is_dir_of(name, req->files[j].name) || moat_path_is_dir_of(req->files[j].name, name))
                return job_fail(je, MOAT_ERR_BAD_REQUEST,
                                "files[%zu].name and files[%zu].name: one is a file and a directory of the other", j, i);
        }
        total += req->files[i].content_len;
    }
    if (total > MAX_CODE_BYTES)
        return job_fail(je, MOAT_ERR_LIMIT, "files exceed the configured limit of %llu bytes", (unsigned long long)MAX_CODE_BYTES);
    return 0;
}

/* A batch job's stdin against the server's cap; a session's against its own. */
static int validate_stdin(const struct moat_exec_request *req, const struct session_limits *session, struct job_error *je)
{
    if (session == NULL && req->stdin_len > MAX_STDIN_BYTES)
        return job_fail(je, MOAT_ERR_LIMIT, "stdin exceeds the configured limit of %llu bytes",
                        (unsigned long long)MAX_STDIN_BYTES);
    if (session != NULL && req->stdin_len > session->stdin_bytes)
        return job_fail(je, MOAT_ERR_LIMIT, "stdin exceeds the session's limit of %llu bytes",
                        (unsigned long long)session->stdin_bytes);
    return 0;
}

/* A requested limit may lower the ceiling, never raise it; -1 = default. */
static int apply_limit(int64_t requested, uint64_t ceiling, const char *field, const char *unit, uint64_t *out,
                       struct job_error *je)
{
    if (requested < 0) {
        *out = ceiling;
        return 0;
    }
    if (requested == 0)
        return job_fail(je, MOAT_ERR_LIMIT, "%s must be positive", field);
    if ((uint64_t)requested > ceiling)
        return job_fail(je, MOAT_ERR_LIMIT, "%s cannot exceed the configured limit of %llu %s", field, (unsigned long long)ceiling,
                        unit);
    *out = (uint64_t)requested;
    return 0;
}

static int stage_limits_for(const struct stage_limits *ceil, int64_t timeout_ms, int64_t cpu_ms, int64_t memory, const char *stage,
                            struct box_limits *lim, struct job_error *je)
{
    char field[32];
    uint64_t cpu = 0; /* set by apply_limit when it succeeds (gcc -O2 cannot tell) */
    memset(lim, 0, sizeof(*lim));
    snprintf(field, sizeof(field), "%s_timeout", stage);
    if (apply_limit(timeout_ms, ceil->wall_ms, field, "ms", &lim->wall_ms, je) != 0)
        return -1;
    snprintf(field, sizeof(field), "%s_memory_limit", stage);
    if (apply_limit(memory, ceil->memory_bytes, field, "bytes", &lim->memory_bytes, je) != 0)
        return -1;
    /* the CPU time asked for (0 is not asked: moat_proto.h) lowers the
     * ceiling; the CPU clock never runs longer than the wall clock */
    snprintf(field, sizeof(field), "%s_cpu_time", stage);
    if (apply_limit(cpu_ms == 0 ? -1 : cpu_ms, ceil->cpu_ms, field, "ms", &cpu, je) != 0)
        return -1;
    lim->cpu_ms = cpu < lim->wall_ms ? cpu : lim->wall_ms;
    lim->idle_ms = ceil->idle_ms;
    lim->pids = ceil->pids;
    lim->output_cap = (size_t)ceil->output_cap;
    lim->fsize_bytes = ceil->fsize_bytes;
    lim->stack_bytes = ceil->stack_bytes;
    lim->nofile = DEFAULT_NOFILE;
    return 0;
}

/* A run-stage rlimit asked in units of `scale` bytes (> 0 asked; 0 or -1
 * not) may lower the limit in force, never raise it. */
static int lower_rlimit(int64_t asked, uint64_t scale, uint64_t *lim, const char *field, const char *unit, struct job_error *je)
{
    if (asked <= 0)
        return 0;
    if ((uint64_t)asked > *lim / scale)
        return job_fail(je, MOAT_ERR_LIMIT, "%s cannot exceed the configured limit of %llu %s", field,
                        (unsigned long long)(*lim / scale), unit);
    *lim = (uint64_t)asked * scale;
    return 0;
}

/* The request's stack, processes and file size limits lower the run stage's (and so every test case's). */
static int run_rlimits_for(const struct moat_exec_request *req, struct box_limits *run, struct job_error *je)
{
    uint64_t pids = run->pids;

    if (lower_rlimit(req->run_stack_kib, 1024, &run->stack_bytes, "run_stack_limit", "KiB", je) != 0 ||
        lower_rlimit(req->run_file_size_kib, 1024, &run->fsize_bytes, "run_file_size_limit", "KiB", je) != 0 ||
        lower_rlimit(req->run_processes, 1, &pids, "run_processes", "processes and threads", je) != 0)
        return -1;
    run->pids = (uint32_t)pids;
    return 0;
}

/* Compiler options: only for a language that compiles, each taken by its allow-list (moat_options.h). */
static int validate_compiler_options(const struct language *lang, const struct moat_exec_request *req, struct job_error *je)
{
    size_t bad = 0;

    if (req->ncompiler_options == 0)
        return 0;
    if (req->ncompiler_options > MOAT_MAX_COMPILER_OPTIONS)
        return job_fail(je, MOAT_ERR_BAD_REQUEST, "compiler_options must hold at most %d options", MOAT_MAX_COMPILER_OPTIONS);
    if (lang->compile_argv == NULL || lang->noption_patterns == 0)
        return job_fail(je, MOAT_ERR_BAD_REQUEST, "compiler_options are not allowed for %s: it accepts no compiler options",
                        lang->name);
    if (moat_options_check(lang->option_patterns, lang->noption_patterns, req->compiler_options, req->ncompiler_options, &bad) != 0)
        return job_fail(je, MOAT_ERR_BAD_REQUEST, "compiler option \"%.64s\" is not allowed for %s", req->compiler_options[bad],
                        lang->name);
    return 0;
}

static uint64_t min_u64(uint64_t a, uint64_t b)
{
    return a < b ? a : b;
}

/* The idle clock: 0 is off, so the smaller of the two that are on. */
static uint64_t min_on(uint64_t a, uint64_t b)
{
    return a == 0 ? b : b == 0 ? a : min_u64(a, b);
}

/*
 * A session's clocks and caps: the language's (built-in defaults, the
 * server's --limit, the manifest's session_* keys) lowered by the
 * SESSION_OPEN's ceilings; run_timeout, when the request has one, lowers the
 * wall clock further and may never raise it.
 */
static int session_limits_for(const struct language *lang, const struct session_limits *ceil, int64_t run_timeout_ms,
                              int64_t run_cpu_ms, struct session_limits *out, struct job_error *je)
{
    const struct session_limits *d = &lang->session_limits;

    if (ceil->wall_ms == 0 || ceil->cpu_ms == 0)
        return job_fail(je, MOAT_ERR_BAD_REQUEST, "the session's wall and cpu limits must be positive");
    out->wall_ms = min_u64(d->wall_ms, ceil->wall_ms);
    out->idle_ms = min_on(d->idle_ms, ceil->idle_ms);
    out->cpu_ms = min_u64(d->cpu_ms, ceil->cpu_ms);
    out->stdin_bytes = min_u64(d->stdin_bytes, ceil->stdin_bytes);
    out->output_bytes = min_u64(d->output_bytes, ceil->output_bytes);
    if (run_timeout_ms == 0)
        return job_fail(je, MOAT_ERR_LIMIT, "run_timeout must be positive");
    if (run_timeout_ms > 0 && (uint64_t)run_timeout_ms > out->wall_ms)
        return job_fail(je, MOAT_ERR_LIMIT, "run_timeout cannot exceed the session's wall limit of %llu ms",
                        (unsigned long long)out->wall_ms);
    if (run_timeout_ms > 0)
        out->wall_ms = (uint64_t)run_timeout_ms;
    /* run_cpu_time lowers the session's CPU clock the same way */
    if (run_cpu_ms > 0 && (uint64_t)run_cpu_ms > out->cpu_ms)
        return job_fail(je, MOAT_ERR_LIMIT, "run_cpu_time cannot exceed the session's cpu limit of %llu ms",
                        (unsigned long long)out->cpu_ms);
    if (run_cpu_ms > 0)
        out->cpu_ms = (uint64_t)run_cpu_ms;
    return 0;
}

/* ---- stages ------------------------------------------------------------- */

static int fill_stage(struct moat_stage_result *st, struct box_result *br)
{
    uint8_t clock = br->status == MOAT_STATUS_TO ? br->clock : 0;
    memset(st, 0, sizeof(*st));
    st->present = 1;
    st->stdout_data = br->out.data;
    st->stdout_len = br->out.len;
    st->stderr_data = br->err.data;
    st->stderr_len = br->err.len;
    st->output_data = br->both.data;
    st->output_len = br->both.len;
    br->out.data = br->err.data = br->both.data = NULL; /* moved */
    st->has_code = br->has_code;
    st->code = br->code;
    st->has_signal = br->has_signal;
    st->signal = br->signal;
    st->status = br->status;
    st->cpu_ms = br->cpu_ms;
    st->wall_ms = br->wall_ms;
    st->memory_bytes = br->memory_bytes;
    st->clock = clock;
    if (br->message[0] && (st->message = strdup(br->message)) == NULL)
        return -1;
    return 0;
}

static int run_stage(struct slot *s, int stage, const struct box_stage *st, const struct moat_exec_request *req,
                     struct moat_stage_result *out, struct job_error *je)
{
    struct box_result br;
    struct errbuf e;
    int with_stdin = stage == BOX_STAGE_RUN;

    if (box_run_stage(s, stage, st, with_stdin ? req->stdin_data : NULL, with_stdin ? req->stdin_len : 0, &br, &e) != 0) {
        log_warnx("%s: slot %d: %s", __func__, s->index, e.msg);
        return job_fail(je, MOAT_ERR_INTERNAL, "the box could not be run");
    }
    int rc = fill_stage(out, &br);
    box_result_free(&br);
    if (rc != 0)
        return job_fail(je, MOAT_ERR_INTERNAL, "out of memory");
    return 0;
}

static int has_suffix(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/*
 * Compilers want their extension (go build, gcc without -x, ...): when the
 * entry file lacks it, it is stored as main<ext> instead, in its own
 * directory ("src/prog" -> "src/main.c"), unless another file already has
 * that name or has it as a directory.  Only the job's view of the names
 * changes.
 */
static int apply_extension(const struct language *lang, struct moat_exec_request *view, struct moat_file *files, char *entry,
                           size_t entry_size)
{
    const char *name = view->files[0].name, *slash;

    if (lang->extension == NULL || has_suffix(name, lang->extension))
        return 0;
    slash = strrchr(name, '/');
    if ((size_t)snprintf(entry, entry_size, "%.*smain%s", slash ? (int)(slash - name + 1) : 0, name, lang->extension) >= entry_size)
        return 0;
    if (moat_path_check(entry, strlen(entry)) != MOAT_PATH_OK)
        return 0;
    for (size_t i = 1; i < view->nfiles; i++)
        if (strcmp(view->files[i].name, entry) == 0 || moat_path_is_dir_of(entry, view->files[i].name))
            return 0;
    memcpy(files, view->files, view->nfiles * sizeof(*files));
    files[0].name = entry;
    view->files = files;
    return 0;
}

void job_plan_free(struct job_plan *plan)
{
    language_argv_free(plan->argv_compile);
    language_argv_free(plan->argv_run);
    plan->argv_compile = plan->argv_run = NULL;
}

/*
 * The walls the job runs in: the stronger of the tenant's (the request's,
 * set by the gateway from its configuration) and the language's.  gVisor
 * on a backend that cannot run it is refused, never run with fewer walls.
 */
static int plan_isolation(struct backend *b, const struct moat_exec_request *req, const struct language *lang, struct box_job *job,
                          struct job_error *je)
{
    const char *why;

    if (req->isolation > MOAT_ISOLATION_MAX)
        return job_fail(je, MOAT_ERR_BAD_REQUEST, "isolation %u is unknown", (unsigned)req->isolation);
    job->isolation = req->isolation > lang->isolation ? req->isolation : lang->isolation;
    if (job->isolation != MOAT_ISOLATION_GVISOR)
        return 0;
    if (gvisor_get(&b->gvisor, &job->runsc, &job->platform, &why) != 0)
        return job_fail(je, MOAT_ERR_UNAVAILABLE, "%s requires gVisor isolation but %s",
                        req->isolation == MOAT_ISOLATION_GVISOR ? "this tenant" : "this language", why);
    return 0;
}

int job_plan_init(struct backend *b, const struct moat_exec_request *req, const struct session_limits *ceilings,
                  struct job_plan *plan, struct job_error *je)
{
    struct box_limits run_lim, compile_lim;
    struct moat_exec_request *view = &plan->view;

    memset(plan, 0, sizeof(*plan));
    *view = *req;
    const struct language *lang = plan->lang = language_find(&b->langs, req->language, req->version);
    if (lang == NULL)
        return job_fail(je, MOAT_ERR_UNKNOWN_LANGUAGE, "%s-%s runtime is unknown", req->language, req->version);
    if (validate_files(req, je) != 0)
        return -1;
    if (ceilings != NULL && req->ntests > 0)
        return job_fail(je, MOAT_ERR_BAD_REQUEST, "a session has no test cases");
    if (ceilings != NULL && session_limits_for(lang, ceilings, req->run_timeout_ms, req->run_cpu_ms, &plan->session, je) != 0)
        return -1;
    if (validate_stdin(req, ceilings ? &plan->session : NULL, je) != 0 || validate_compiler_options(lang, req, je) != 0)
        return -1;
    if (apply_extension(lang, view, plan->renamed, plan->entry, sizeof(plan->entry)) != 0)
        return -1;
    /* a session's run stage runs on the session's clocks, not run_timeout's batch ceiling */
    if (stage_limits_for(&lang->run_limits, ceilings ? -1 : req->run_timeout_ms, ceilings ? -1 : req->run_cpu_ms,
                         req->run_memory_bytes, "run", &run_lim, je) != 0 ||
        stage_limits_for(&lang->compile_limits, req->compile_timeout_ms, req->compile_cpu_ms, req->compile_memory_bytes, "compile",
                         &compile_lim, je) != 0 ||
        run_rlimits_for(req, &run_lim, je) != 0)
        return -1;
    if (ceilings != NULL) {
        run_lim.wall_ms = plan->session.wall_ms;
        run_lim.cpu_ms = plan->session.cpu_ms;
        run_lim.idle_ms = plan->session.idle_ms;
    }

    struct box_job *job = &plan->job;
    if (plan_isolation(b, req, lang, job, je) != 0)
        return -1;
    job->ro = lang->ro;
    job->nro = lang->nro;
    job->files = view->files;
    job->nfiles = view->nfiles;
    job->box_bytes = DEFAULT_BOX_BYTES;
    if (lang->compile_argv) {
        struct language_words words = {NULL, 0, req->compiler_options, req->ncompiler_options};
        if ((plan->argv_compile = language_argv(lang->compile_argv, view->files, view->nfiles, &words)) == NULL)
            return job_fail(je, MOAT_ERR_INTERNAL, "out of memory");
        job->stages[BOX_STAGE_COMPILE] = (struct box_stage){1, plan->argv_compile, lang->env, compile_lim};
    }
    struct language_words run_words = {view->args, view->nargs, NULL, 0};
    if ((plan->argv_run = language_argv(lang->run_argv, view->files, view->nfiles, &run_words)) == NULL) {
        job_plan_free(plan);
        return job_fail(je, MOAT_ERR_INTERNAL, "out of memory");
    }
    job->stages[BOX_STAGE_RUN] = (struct box_stage){1, plan->argv_run, lang->env, run_lim};
    return 0;
}

/* ---- test cases --------------------------------------------------------- */

_Static_assert(DEFAULT_TESTS_WALL_MS == MOAT_MAX_TESTS_WALL_MS, "the gateway bounds tests_wall_ms by moat_proto.h's figure");

/* A case's limit (> 0 asked) may lower the request's run limit, never raise it. */
static int case_limit(int64_t asked, uint64_t *lim, size_t i, const char *field, const char *unit, struct job_error *je)
{
    if (asked <= 0)
        return 0;
    if ((uint64_t)asked > *lim)
        return job_fail(je, MOAT_ERR_LIMIT, "tests[%zu].%s cannot exceed the run limit in force of %llu %s", i, field,
                        (unsigned long long)*lim, unit);
    *lim = (uint64_t)asked;
    return 0;
}

/* Every case's stdin and limits, before any box is taken; lims[i] is case i's run limits. */
static int plan_tests(const struct moat_exec_request *req, const struct box_limits *run, struct box_limits *lims,
                      struct job_error *je)
{
    size_t total = 0;

    if (req->ntests > MOAT_MAX_TESTS)
        return job_fail(je, MOAT_ERR_BAD_REQUEST, "tests must hold at most %d cases", MOAT_MAX_TESTS);
    if (req->tests_wall_ms > DEFAULT_TESTS_WALL_MS)
        return job_fail(je, MOAT_ERR_LIMIT, "tests_timeout cannot exceed the configured limit of %llu ms",
                        (unsigned long long)DEFAULT_TESTS_WALL_MS);
    for (size_t i = 0; i < req->ntests; i++) {
        const struct moat_test_case *tc = &req->tests[i];
        if (tc->stdin_len > MAX_STDIN_BYTES)
            return job_fail(je, MOAT_ERR_LIMIT, "tests[%zu].stdin exceeds the configured limit of %llu bytes", i,
                            (unsigned long long)MAX_STDIN_BYTES);
        total += tc->stdin_len;
        lims[i] = *run;
        if (case_limit(tc->run_timeout_ms, &lims[i].wall_ms, i, "run_timeout", "ms", je) != 0 ||
            case_limit(tc->run_cpu_ms, &lims[i].cpu_ms, i, "run_cpu_time", "ms", je) != 0 ||
            case_limit(tc->run_memory_bytes, &lims[i].memory_bytes, i, "run_memory_limit", "bytes", je) != 0)
            return -1;
        if (lims[i].cpu_ms > lims[i].wall_ms) /* the CPU clock never runs longer than the wall clock */
            lims[i].cpu_ms = lims[i].wall_ms;
    }
    if (total > MAX_TESTS_STDIN_BYTES)
        return job_fail(je, MOAT_ERR_LIMIT, "the test cases' stdin together exceeds the configured limit of %llu bytes",
                        (unsigned long long)MAX_TESTS_STDIN_BYTES);
    return 0;
}

/* Takes a slot, or fails the job saying why. */
static int take_slot(struct backend *b, struct slot **s, struct job_error *je)
{
    struct errbuf e;
    int got = pool_acquire(&b->pool, s, &e);
    if (got == POOL_BUSY)
        return job_fail(je, MOAT_ERR_BUSY, "server busy: every box slot and queue place is taken, try again later");
    if (got != 0)
        return job_fail(je, MOAT_ERR_INTERNAL, "no box could be prepared");
    return 0;
}

/* The compile stage in a box of its own, then the box's files as a pack
 * (pack->nfiles 0 and res->compile failed: no case runs). */
static int compile_once(struct backend *b, struct job_plan *plan, struct moat_exec_result *res, struct box_pack *pack,
                        struct job_error *je)
{
    struct errbuf e;
    struct slot *s;
    int rc = -1;

    if (take_slot(b, &s, je) != 0)
        return -1;
    if (box_start(s, &plan->job, &e) != 0) {
        log_warnx("%s: slot %d: %s", __func__, s->index, e.msg);
        job_fail(je, MOAT_ERR_INTERNAL, "the box could not be prepared");
        goto out;
    }
    if (run_stage(s, BOX_STAGE_COMPILE, &plan->job.stages[BOX_STAGE_COMPILE], &plan->view, &res->compile, je) != 0)
        goto out;
    if (res->compile.status != MOAT_STATUS_OK) {
        rc = 0;
        goto out;
    }
    int got = box_pack(s, pack, &e);
    if (got == BOX_PACK_REFUSED) {
        job_fail(je, MOAT_ERR_LIMIT, "%s", e.msg);
        goto out;
    }
    if (got != 0) {
        log_warnx("%s: slot %d: %s", __func__, s->index, e.msg);
        job_fail(je, MOAT_ERR_INTERNAL, "the compiled files could not be taken from the box");
        goto out;
    }
    rc = 0;
out:
    pool_release(&b->pool, s);
    return rc;
}

/* One case: a fresh box with the files (the pack's, or the request's), only the run stage. */
static int run_case(struct backend *b, const struct job_plan *plan, const struct box_pack *pack, const struct moat_test_case *tc,
                    const struct box_limits *lim, struct moat_stage_result *out, struct job_error *je)
{
    const struct language *lang = plan->lang;
    struct box_job job = plan->job;
    struct box_result br;
    struct errbuf e;
    struct slot *s;
    int rc = -1;

    struct language_words words = {tc->args, tc->nargs, NULL, 0};
    char **argv = language_argv(lang->run_argv, plan->view.files, plan->view.nfiles, &words);
    if (argv == NULL)
        return job_fail(je, MOAT_ERR_INTERNAL, "out of memory");
    job.stages[BOX_STAGE_COMPILE].present = 0;
    job.stages[BOX_STAGE_RUN] = (struct box_stage){1, argv, lang->env, *lim};
    if (pack != NULL) {
        job.files = pack->files;
        job.nfiles = pack->nfiles;
        job.file_exec = pack->exec;
    }
    if (take_slot(b, &s, je) != 0)
        goto done;
    if (box_start(s, &job, &e) != 0) {
        log_warnx("%s: slot %d: %s", __func__, s->index, e.msg);
        job_fail(je, MOAT_ERR_INTERNAL, "the box could not be prepared");
        goto out;
    }
    if (box_run_stage(s, BOX_STAGE_RUN, &job.stages[BOX_STAGE_RUN], tc->stdin_data, tc->stdin_len, &br, &e) != 0) {
        log_warnx("%s: slot %d: %s", __func__, s->index, e.msg);
        job_fail(je, MOAT_ERR_INTERNAL, "the box could not be run");
        goto out;
    }
    rc = fill_stage(out, &br);
    box_result_free(&br);
    if (rc != 0) {
        job_fail(je, MOAT_ERR_INTERNAL, "out of memory");
        goto out;
    }
    /* stdout and stderr apart are what a case is judged on: the interleaved copy stays here */
    free(out->output_data);
    out->output_data = NULL;
    out->output_len = 0;
out:
    pool_release(&b->pool, s);
done:
    language_argv_free(argv);
    return rc;
}

static int run_tests(struct backend *b, struct job_plan *plan, const struct moat_exec_request *req, struct moat_exec_result *res,
                     struct job_error *je)
{
    struct box_limits lims[MOAT_MAX_TESTS];
    struct box_pack pack;
    int rc = -1;

    memset(&pack, 0, sizeof(pack));
    if (plan_tests(req, &plan->job.stages[BOX_STAGE_RUN].lim, lims, je) != 0)
        return -1;
    if (plan->lang->compile_argv != NULL) {
        if (compile_once(b, plan, res, &pack, je) != 0)
            goto out;
        if (res->compile.status != MOAT_STATUS_OK) {
            rc = 0; /* no case runs: the compile result says why */
            goto out;
        }
    }
    if ((res->tests = calloc(req->ntests, sizeof(*res->tests))) == NULL) {
        job_fail(je, MOAT_ERR_INTERNAL, "out of memory");
        goto out;
    }
    uint64_t budget = req->tests_wall_ms > 0 ? (uint64_t)req->tests_wall_ms : DEFAULT_TESTS_WALL_MS;
    uint64_t deadline = box_now_ms() + budget;
    for (size_t i = 0; i < req->ntests; i++) {
        uint64_t now = box_now_ms();
        if (now >= deadline)
            break; /* the job's wall budget is spent: the rest are not run */
        if (lims[i].wall_ms > deadline - now)
            lims[i].wall_ms = deadline - now;
        if (lims[i].cpu_ms > lims[i].wall_ms)
            lims[i].cpu_ms = lims[i].wall_ms;
        if (run_case(b, plan, plan->lang->compile_argv ? &pack : NULL, &req->tests[i], &lims[i], &res->tests[i], je) != 0)
            goto out;
        res->ntests = i + 1;
    }
    rc = 0;
out:
    box_pack_free(&pack);
    return rc;
}

/* What ran the job: its language and version, and the walls that held its
 * boxes (box_walls).  0, or -1 out of memory. */
static int result_names(struct moat_exec_result *res, const struct job_plan *plan)
{
    if ((res->language = strdup(plan->lang->name)) == NULL || (res->version = strdup(plan->lang->version)) == NULL ||
        (res->walls = strdup(box_walls(plan->job.isolation))) == NULL)
        return -1;
    return 0;
}

int job_run(struct backend *b, const struct moat_exec_request *req, struct moat_exec_result *res, struct job_error *je)
{
    struct job_plan plan;
    struct errbuf e;
    struct slot *s;
    int rc = -1;

    memset(res, 0, sizeof(*res));
    if (job_plan_init(b, req, NULL, &plan, je) != 0)
        return -1;
    if (req->ntests > 0) {
        rc = run_tests(b, &plan, req, res, je);
        if (rc == 0 && result_names(res, &plan) != 0)
            rc = job_fail(je, MOAT_ERR_INTERNAL, "out of memory");
        job_plan_free(&plan);
        if (rc != 0)
            moat_exec_result_free(res);
        return rc;
    }
    const struct language *lang = plan.lang;
    struct box_job *job = &plan.job;
    int got = pool_acquire(&b->pool, &s, &e);
    if (got != 0) {
        if (got == POOL_BUSY)
            job_fail(je, MOAT_ERR_BUSY, "server busy: every box slot and queue place is taken, try again later");
        else
            job_fail(je, MOAT_ERR_INTERNAL, "no box could be prepared");
        goto done;
    }
    if (box_start(s, job, &e) != 0) {
        log_warnx("%s: slot %d: %s", __func__, s->index, e.msg);
        job_fail(je, MOAT_ERR_INTERNAL, "the box could not be prepared");
        goto out;
    }
    if (lang->compile_argv && run_stage(s, BOX_STAGE_COMPILE, &job->stages[BOX_STAGE_COMPILE], &plan.view, &res->compile, je) != 0)
        goto out;
    if (!res->compile.present || res->compile.status == MOAT_STATUS_OK) {
        if (run_stage(s, BOX_STAGE_RUN, &job->stages[BOX_STAGE_RUN], &plan.view, &res->run, je) != 0)
            goto out;
    }
    if (result_names(res, &plan) != 0) {
        job_fail(je, MOAT_ERR_INTERNAL, "out of memory");
        goto out;
    }
    rc = 0;
out:
    /* the box is discarded and the slot made warm again off this path */
    pool_release(&b->pool, s);
done:
    job_plan_free(&plan);
    if (rc != 0)
        moat_exec_result_free(res);
    return rc;
}

/* How busy the pools are now: the gateway's metrics (moat_backend_*). */
static void runtimes_load(struct backend *b, struct moat_backend_load *l)
{
    int slots, busy, queue_max, queued, sessions, sessions_busy, zero, none;

    pool_load(&b->pool, &slots, &busy, &queue_max, &queued);
    pool_load(&b->sessions, &sessions, &sessions_busy, &zero, &none);
    *l = (struct moat_backend_load){
        1, (uint64_t)slots, (uint64_t)busy, (uint64_t)queue_max, (uint64_t)queued, (uint64_t)sessions, (uint64_t)sessions_busy};
}

int job_runtimes(struct backend *b, struct moat_runtimes *rt)
{
    memset(rt, 0, sizeof(*rt));
    size_t n = b->langs.count < MOAT_MAX_RUNTIMES ? b->langs.count : MOAT_MAX_RUNTIMES;
    rt->items = calloc(n ? n : 1, sizeof(*rt->items));
    if (rt->items == NULL)
        return -1;
    for (size_t i = 0; i < n; i++) {
        const struct language *l = &b->langs.items[i];
        /* borrowed pointers: the caller must not free them */
        rt->items[i].language = l->name;
        rt->items[i].version = l->version;
        rt->items[i].aliases = l->aliases;
        rt->items[i].naliases = l->naliases;
        rt->items[i].compiled = l->compile_argv != NULL;
        rt->items[i].option_patterns = l->option_patterns;
        rt->items[i].noption_patterns = l->noption_patterns;
        /* what this backend can run the language in: never less than its manifest asks */
        rt->items[i].isolations = (uint8_t)((l->isolation == MOAT_ISOLATION_NAMESPACES ? 1u << MOAT_ISOLATION_NAMESPACES : 0) |
                                            (gvisor_installed(&b->gvisor) ? 1u << MOAT_ISOLATION_GVISOR : 0));
    }
    rt->count = n;
    runtimes_load(b, &rt->load);
    rt->walls = (char *)(uintptr_t)box_walls(MOAT_ISOLATION_NAMESPACES); /* borrowed, as the names */
    return 0;
}
