/*
 * cmd_step.c - mg-bench step: one model at one depth under one policy,
 * weights optionally read from a file and gradients optionally written to
 * one, measurements printed as key=value lines; the memgrad side of
 * bench/compare_torch.py.
 */
#include "bench.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Allocates the lazy pages of OpenBLAS and the pool once, so a later RSS
 * measurement sees the model's own memory: a tiny matmul plan. */
static void warm_up_runtime(void) {
    mg_graph *g = mg_graph_new();
    int64_t s[2] = {64, 64};
    mg_tensor a = mg_input(g, "a", MG_F32, 2, s);
    mg_tensor y = mg_sum(g, mg_matmul(g, a, a, 0, 0), 0, NULL, 0);
    mg_plan *p = NULL;
    mg_exec *ex = NULL;
    static float data[64 * 64];
    mg_binding b = {a, data};
    if (mg_plan_compile(g, &y, 1, NULL, &p) == MG_OK &&
        mg_exec_new(NULL, &ex) == MG_OK)
        mg_exec_run(ex, p, &b, 1, 0);
    mg_exec_free(ex);
    mg_plan_free(p);
    mg_graph_free(g);
}

static int write_grads(const char *path, const bench_case *c,
                       const bench_memory *mem) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "mg-bench: cannot write %s: %s\n", path,
                strerror(errno));
        return 0;
    }
    int ok = 1;
    for (int i = 0; ok && i < c->mm->n_params; i++) {
        size_t n = mg_tensor_nbytes(c->mm->g, c->mm->params[i]);
        void *host = malloc(n ? n : 1);
        ok = host && bench_memory_grad_to_host(c, mem, i, host) &&
             fwrite(host, 1, n, f) == n;
        free(host);
    }
    if (fclose(f) != 0) ok = 0;
    if (!ok) fprintf(stderr, "mg-bench: error writing %s\n", path);
    return ok;
}

int bench_cmd_step(int argc, char **argv) {
    const char *load = NULL, *save = NULL, *policy_s = "none";
    int plan_only = 0;
    common_opts o = {.repeat = 5, .model = "mlp", .depth = 64};
    for (int i = 0; i < argc; i += 2) { /* --option value pairs */
        const char *a, *v;
        int r = bench_opt_next(argc, argv, i, &o, &a, &v);
        if (r == BENCH_OPT_DONE) continue;
        if (r != BENCH_OPT_OWN) return r;
        if (!strcmp(a, "--policy")) policy_s = v;
        else if (!strcmp(a, "--load")) load = v;
        else if (!strcmp(a, "--save-grads")) save = v;
        else if (!strcmp(a, "--plan-only")) {
            if (bench_yes_no_parse(a, v, &plan_only)) return 2;
        } else return bench_usage_error("unknown option '%s' for step", a);
    }
    int rc = bench_case_setup(o.model, &o);
    if (rc) return rc;
    mg_ckpt_policy pol;
    if (bench_policy_list_parse(policy_s, &pol, 1) != 1)
        return bench_usage_error("bad --policy '%s' (one of none, memory, "
                                 "speed, collection)",
                                 policy_s);
    bench_model_cfg cfg = bench_case_cfg(&o, o.depth);
    bench_case c;
    bench_memory mem;
    if ((rc = bench_case_open(&o, &cfg, pol, load, o.max_bytes, &c, &mem)))
        return rc;
    if (plan_only) {
        /* The plan's figures alone, without a step: what
         * scripts/check-figures.sh derives again for the committed step
         * results (compact.txt, store16.txt) in seconds, where the steps
         * of a ResNet take minutes on a shared machine. */
        printf("model=%s\npolicy=%s\ncompact=%s\nstore16=%s\ndepth=%ld\n"
               "batch=%ld\nwidth=%ld\npredicted_peak_bytes=%zu\n"
               "predicted_peak_without_recompute=%zu\n"
               "recompute_flops_ratio=%.6f\nsegments=%d\ncheckpoints=%d\n",
               o.spec->name, mg_ckpt_policy_name(pol), o.compact ? "yes" : "no",
               o.store16 ? "yes" : "no", o.depth, o.batch, o.width,
               c.sum.predicted_peak, c.sum.predicted_peak_without_recompute,
               c.sum.forward_flops > 0
                   ? c.sum.recompute_flops / c.sum.forward_flops
                   : 0.0,
               c.sum.n_segments, c.sum.n_checkpoints);
        bench_case_free(&c);
        bench_memory_free(&mem);
        return 0;
    }
    if (o.device == MG_DEVICE_CPU) {
        /* Touch the gradient buffers, as PyTorch's side pre-allocates
         * .grad: both sides then start the measured step with them
         * resident. (On a device they were uploaded zeroed.) */
        for (int i = 0; i < mem.n_params; i++)
            memset(mem.grads[i], 0, mg_tensor_nbytes(c.mm->g, c.mm->params[i]));
        warm_up_runtime();
    }
    step_result r = {0};
    mg_status s = bench_case_warm_up(&c, &mem, (int)o.repeat, &r);
    for (int k = 0; s == MG_OK && k < o.repeat; k++)
        s = bench_case_timed_step(&c, k, &r);
    r.time_ms_median = bench_median(r.times, (int)o.repeat);
    double ev_median =
        r.event_times ? bench_median(r.event_times, (int)o.repeat) : NAN;
    if (s != MG_OK) rc = bench_fail("running", s);
    if (!rc && save && !write_grads(save, &c, &mem)) rc = 1;
    if (!rc) {
        char blas[128];
        bench_blas_info(blas, sizeof blas);
        printf("model=%s\npolicy=%s\ncompact=%s\nstore16=%s\ndepth=%ld\n"
               "batch=%ld\nwidth=%ld\ndevice=%s\nblas=%s\n",
               o.spec->name, mg_ckpt_policy_name(pol), o.compact ? "yes" : "no",
               o.store16 ? "yes" : "no", o.depth, o.batch, o.width,
               bench_device_str(o.device), blas);
        if (o.device != MG_DEVICE_CPU) {
            char gpu[256];
            bench_device_info(gpu, sizeof gpu);
            printf("gpu=%s\n", gpu);
        }
        printf("loss=%.9g\ntime_ms_median=%.3f\ncpu_ms_mean=%.3f\ntime_ms=",
               (double)r.loss, r.time_ms_median,
               r.cpu_ms_total / (double)o.repeat);
        for (int k = 0; k < o.repeat; k++)
            printf("%s%.3f", k ? "," : "", r.times[k]);
        if (r.event_times) { /* CUDA events around each step */
            printf("\nevent_ms_median=%.3f\nevent_ms=", ev_median);
            for (int k = 0; k < o.repeat; k++)
                printf("%s%.3f", k ? "," : "", r.event_times[k]);
        }
        printf("\npeak_bytes=%zu\npredicted_peak_bytes=%zu\n"
               "predicted_peak_without_recompute=%zu\n"
               "pool_reserved_bytes=%zu\n"
               "param_bytes=%zu\nrss_before_bytes=%zu\nrss_peak_bytes=%zu\n"
               "recompute_flops_ratio=%.6f\nsegments=%d\ncheckpoints=%d\n",
               r.peak_bytes, c.sum.predicted_peak,
               c.sum.predicted_peak_without_recompute, r.reserved_bytes,
               c.param_bytes, r.rss_before, r.rss_peak,
               c.sum.forward_flops > 0
                   ? c.sum.recompute_flops / c.sum.forward_flops
                   : 0.0,
               c.sum.n_segments, c.sum.n_checkpoints);
        mg_plan_arena a;
        if (mg_plan_arena_info(c.plan, c.binds, c.n_binds, &a) == MG_OK)
            printf("arena_bytes=%zu\narena_live_peak_bytes=%zu\n"
                   "predicted_reserved_bytes=%zu\n",
                   a.bytes, a.live_peak, a.reserved);
    }
    free(r.times);
    free(r.event_times);
    bench_case_free(&c); /* the executor before the memory it borrowed */
    bench_memory_free(&mem);
    bench_device_timer_free();
    return rc;
}
