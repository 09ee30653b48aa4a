/*
 * cmd_observe.c - mg-bench observe: what watching a run costs. One model
 * under one policy, its training step timed with no observer attached,
 * with an observer whose callbacks are all NULL (the hook path alone), and
 * with one that counts every callback, and with the profiler; the
 * variants run interleaved (run k
 * of each, then run k+1) so that load from other processes falls on all
 * alike. Prints key=value lines: the median ms per run of each variant and
 * its difference from "none" per plan step in microseconds. With --trace
 * FILE, the profiler's table of one more run goes to stdout and its Chrome
 * trace to FILE.
 */
#include "bench.h"

#include <memgrad_observe.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static mg_status count_step(void *user, const mg_step_info *info) {
    (void)info;
    (*(long *)user)++;
    return MG_OK;
}

enum { V_NONE, V_EMPTY, V_COUNT, V_PROFILER, N_VARIANTS };
static const char *const variant_name[N_VARIANTS] = {"none", "empty", "count",
                                                     "profiler"};

int bench_cmd_observe(int argc, char **argv) {
    common_opts o = {.batch = 4,
                     .width = 0,
                     .repeat = 50,
                     .device = MG_DEVICE_CPU,
                     .model = "mlp"};
    const char *trace = NULL;
    long depth = 64;
    mg_ckpt_policy pol = MG_CKPT_MEMORY;
    for (int i = 0; i < argc; i += 2) {
        const char *a, *v;
        int r = bench_opt_next(argc, argv, i, &o, &a, &v);
        if (r == BENCH_OPT_DONE) continue;
        if (r != BENCH_OPT_OWN) return r;
        if (!strcmp(a, "--trace")) trace = v;
        else if (!strcmp(a, "--depth")) {
            if (!bench_long_parse(v, 1, 100000, &depth))
                return bench_usage_error("bad --depth '%s'", v);
        } else if (!strcmp(a, "--policy")) {
            if (bench_policy_list_parse(v, &pol, 1) != 1)
                return bench_usage_error("bad --policy '%s'", v);
        } else return bench_usage_error("unknown option '%s'", a);
    }
    int rc = bench_case_setup(o.model, &o);
    if (rc) return rc;
    bench_model_cfg cfg = bench_case_cfg(&o, depth);
    bench_case c;
    bench_memory mem;
    if ((rc = bench_case_open(&o, &cfg, pol, NULL, 0, &c, &mem))) return rc;
    step_result r = {0};
    double *t[N_VARIANTS];
    for (int v = 0; v < N_VARIANTS; v++)
        t[v] = calloc((size_t)o.repeat, sizeof *t[v]);
    long calls = 0;
    mg_status s = bench_case_warm_up(&c, &mem, (int)o.repeat, &r);
    mg_profiler *prof = NULL;
    if (s == MG_OK) s = mg_profiler_new(&prof);
    mg_observer profiler = mg_profiler_observer(prof);
    mg_observer empty = {0};
    mg_observer count = {
        .user = &calls, .before_op = count_step, .after_op = count_step};
    for (int k = 0; s == MG_OK && k < o.repeat; k++)
        for (int v = 0; s == MG_OK && v < N_VARIANTS; v++) {
            int id = -1;
            if (v != V_NONE)
                s = mg_exec_observer_attach(c.ex,
                                            v == V_EMPTY   ? &empty
                                            : v == V_COUNT ? &count
                                                           : &profiler,
                                            &id);
            double t0 = bench_now_ms();
            if (s == MG_OK)
                s = mg_exec_run(c.ex, c.plan, c.binds, c.n_binds, 0);
            t[v][k] = bench_now_ms() - t0;
            if (s == MG_OK && v != V_NONE)
                s = mg_exec_observer_detach(c.ex, id);
        }
    if (s == MG_OK && trace) {
        FILE *f = fopen(trace, "w");
        int id = -1;
        mg_profiler_reset(prof);
        s = mg_exec_observer_attach(c.ex, &profiler, &id);
        if (s == MG_OK) s = mg_exec_run(c.ex, c.plan, c.binds, c.n_binds, 0);
        if (s == MG_OK) s = mg_exec_observer_detach(c.ex, id);
        if (s == MG_OK && !f)
            s = mg_set_error(MG_ERR_INVALID_ARG, "cannot write %s", trace);
        if (s == MG_OK) s = mg_profiler_write_trace(prof, f);
        if (s == MG_OK) s = mg_profiler_print(prof, stdout);
        if (f) fclose(f);
    }
    if (s != MG_OK) rc = bench_fail("running", s);
    if (!rc) {
        int steps = mg_plan_num_steps(c.plan);
        printf("model=%s\npolicy=%s\ndepth=%ld\nbatch=%ld\nwidth=%ld\n"
               "steps=%d\nrepeat=%ld\ncallbacks_counted=%ld\n",
               o.spec->name, mg_ckpt_policy_name(pol), depth, o.batch, o.width,
               steps, o.repeat, calls);
        double none = bench_median(t[V_NONE], (int)o.repeat);
        for (int v = 0; v < N_VARIANTS; v++) {
            double m = bench_median(t[v], (int)o.repeat);
            printf("time_ms_median_%s=%.4f\n", variant_name[v], m);
            if (v != V_NONE)
                printf("overhead_us_per_step_%s=%.4f\n", variant_name[v],
                       (m - none) * 1000.0 / steps);
        }
    }
    for (int v = 0; v < N_VARIANTS; v++) free(t[v]);
    mg_profiler_free(prof);
    free(r.times);
    free(r.event_times);
    bench_memory_free(&mem);
    bench_case_free(&c);
    return rc;
}
