/*
 * cmd_budget.c - mg-bench budget: the memory/time curve of MG_CKPT_BUDGET.
 * Policy none is measured first (its step, and its forward-only plan for
 * forward_share), then the budget policy at each fraction of none's
 * predicted peak, one CSV row each, on the same caller memory. Each row
 * also checks issue 29's time bound, (time - 1) <= 1.1 x recompute x
 * forward share, with the row's own ratios: time_bound_limit is the
 * largest time_ratio_vs_none it allows, time_bound pass or fail.
 * --plan-only yes only plans: the policy without and with compaction at
 * the same budgets, which the DP's model of packed positions changes.
 */
#include "bench.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_FRACTIONS 32

static int fractions_parse(const char *s, double *out, int cap) {
    int n = 0;
    char buf[512];
    if (strlen(s) >= sizeof buf) return -1;
    strcpy(buf, s);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        char *end;
        double v = strtod(tok, &end);
        if (*end || !(v > 0) || v > 100 || n == cap) return -1;
        out[n++] = v;
    }
    return n;
}

/* The budget policy's plan at budget bytes, compacting or not: its
 * predicted peak and recomputed flops over one forward pass. */
static mg_status plan_point(const common_opts *o, const bench_model_cfg *cfg,
                            size_t budget, int compact, size_t *peak,
                            double *ratio) {
    const mg_checkpoints ck = {
        .policy = MG_CKPT_BUDGET, .budget_bytes = budget, .compact = compact};
    bench_case c;
    mg_status s = bench_case_prepare_ckpt(o->spec, cfg, &ck, &c);
    if (s == MG_OK) {
        *peak = c.sum.predicted_peak;
        *ratio = c.sum.forward_flops > 0
                     ? c.sum.recompute_flops / c.sum.forward_flops
                     : 0.0;
    }
    bench_case_free(&c);
    return s;
}

/* --plan-only yes: the policy without and with compaction at the same
 * budgets, fractions of plain none's predicted peak; no step runs, so the
 * rows are the same on every machine. */
static int budget_plan_only(const common_opts *o, const bench_model_cfg *cfg,
                            long depth, const double *fr, int n_fr, FILE *out) {
    size_t none_peak[2];
    for (int c = 0; c < 2; c++) {
        const mg_checkpoints cn = {.policy = MG_CKPT_NONE, .compact = c};
        bench_case none;
        mg_status s = bench_case_prepare_ckpt(o->spec, cfg, &cn, &none);
        none_peak[c] = none.sum.predicted_peak;
        bench_case_free(&none);
        if (s != MG_OK) return bench_fail("building the model", s);
    }
    fprintf(stderr,
            "none: predicted peak %zu, with compaction %zu (%.4f of it)\n",
            none_peak[0], none_peak[1],
            (double)none_peak[1] / (double)none_peak[0]);
    fprintf(out, "model,depth,batch,width,dropout,budget_fraction,"
                 "budget_bytes,predicted_peak_bytes,recompute_flops_ratio,"
                 "compact_predicted_peak_bytes,"
                 "compact_recompute_flops_ratio\n");
    for (int i = 0; i < n_fr; i++) {
        const size_t budget = (size_t)(fr[i] * (double)none_peak[0]);
        fprintf(out, "%s,%ld,%ld,%ld,%g,%g,%zu", o->spec->name, depth, o->batch,
                o->width, o->dropout, fr[i], budget);
        for (int c = 0; c < 2; c++) {
            size_t peak;
            double ratio;
            const mg_status s = plan_point(o, cfg, budget, c, &peak, &ratio);
            if (s == MG_OK) {
                fprintf(out, ",%zu,%.4f", peak, ratio);
            } else if (s == MG_ERR_NOMEM) {
                fprintf(out, ",,");
            } else {
                fprintf(out, "\n");
                return bench_fail("planning the budget policy", s);
            }
        }
        fprintf(out, "\n");
        fflush(out);
    }
    return 0;
}

/* None's forward-only plan: the loss from the inputs and parameters,
 * nothing of the backward pass. */
typedef struct fwd_plan {
    mg_plan *p;
    mg_exec *ex;
    mg_binding *b;
    int nb;
} fwd_plan;

static mg_status fwd_prepare(const bench_case *c, bench_memory *mem,
                             fwd_plan *f) {
    const mg_model *m = c->mm;
    mg_plan_options o = {.no_grad = 1};
    memset(f, 0, sizeof *f);
    f->b = malloc((size_t)(m->n_params + 3) * sizeof *f->b);
    if (!f->b) return MG_ERR_NOMEM;
    for (int i = 0; i < 2; i++)
        f->b[f->nb++] = (mg_binding){c->inputs[i], mem->inputs[i]};
    for (int i = 0; i < m->n_params; i++)
        f->b[f->nb++] = (mg_binding){m->params[i], mem->params[i]};
    f->b[f->nb++] = (mg_binding){m->loss, (void *)&mem->loss};
    mg_status s = mg_plan_compile(m->g, &m->loss, 1, &o, &f->p);
    if (s == MG_OK) s = mg_exec_new(NULL, &f->ex);
    if (s == MG_OK) s = mg_exec_run(f->ex, f->p, f->b, f->nb, 0); /* warm */
    return s;
}

static mg_status fwd_time(fwd_plan *f, double *ms) {
    double t0 = bench_now_ms();
    mg_status s = mg_exec_run(f->ex, f->p, f->b, f->nb, 0);
    *ms = bench_now_ms() - t0;
    return s;
}

static void fwd_free(fwd_plan *f) {
    mg_exec_free(f->ex);
    mg_plan_free(f->p);
    free(f->b);
}

/* One row's timings. The machine is shared and its load drifts, so the
 * steps interleave: none's step, none's forward-only plan, then c's step,
 * `repeat` times; each median is over that row's runs, and the row's
 * ratios are between them. */
typedef struct row_times {
    double none_ms, fwd_ms, ms;
} row_times;

static mg_status time_row(bench_case *none, step_result *rn, fwd_plan *f,
                          bench_case *c, step_result *r, int repeat,
                          row_times *out) {
    double *fw = calloc((size_t)repeat, sizeof *fw);
    if (!fw) return MG_ERR_NOMEM;
    mg_status s = MG_OK;
    for (int k = 0; s == MG_OK && k < repeat; k++) {
        s = bench_case_timed_step(none, k, rn);
        if (s == MG_OK) s = fwd_time(f, &fw[k]);
        if (s == MG_OK && c) s = bench_case_timed_step(c, k, r);
    }
    out->none_ms = bench_median(rn->times, repeat);
    out->fwd_ms = bench_median(fw, repeat);
    out->ms = c ? bench_median(r->times, repeat) : NAN;
    free(fw);
    return s;
}

int bench_cmd_budget(int argc, char **argv) {
    const char *fr_s = "0.02,0.05,0.1,0.2,0.3,0.5,1.0";
    long memory_point = 0;
    int plan_only = 0;
    common_opts o = {.repeat = 3, .model = "mlp", .depth = 1024};
    for (int i = 0; i < argc; i += 2) {
        const char *a, *v;
        int r = bench_opt_next(argc, argv, i, &o, &a, &v);
        if (r == BENCH_OPT_DONE) continue;
        if (r != BENCH_OPT_OWN) return r;
        if (!strcmp(a, "--fractions")) fr_s = v;
        else if (!strcmp(a, "--csv")) o.csv = v;
        else if (!strcmp(a, "--memory-point")) {
            if (!bench_long_parse(v, 0, 1, &memory_point))
                return bench_usage_error("bad --memory-point '%s' (0 or 1)", v);
        } else if (!strcmp(a, "--plan-only")) {
            if (bench_yes_no_parse(a, v, &plan_only)) return 2;
        } else return bench_usage_error("unknown option '%s' for budget", a);
    }
    double fr[MAX_FRACTIONS + 1];
    int n_fr = fractions_parse(fr_s, fr, MAX_FRACTIONS);
    if (n_fr < 1)
        return bench_usage_error("bad --fractions '%s' (positive numbers)",
                                 fr_s);
    if (o.device != MG_DEVICE_CPU)
        return bench_usage_error("budget runs on the CPU only");
    int rc = bench_case_setup(o.model, &o);
    if (rc) return rc;
    const int repeat = (int)o.repeat;
    bench_model_cfg cfg = bench_case_cfg(&o, o.depth);
    FILE *out = stdout;
    if (o.csv && !(out = fopen(o.csv, "w"))) {
        fprintf(stderr, "mg-bench: cannot write %s\n", o.csv);
        return 1;
    }
    if (plan_only) {
        rc = budget_plan_only(&o, &cfg, o.depth, fr, n_fr, out);
        if (out != stdout) fclose(out);
        return rc;
    }
    fprintf(out, "model,depth,batch,width,budget_fraction,budget_bytes,"
                 "predicted_peak_bytes,peak_bytes,recompute_flops_ratio,"
                 "forward_share,time_ms_median,time_ratio_vs_none,"
                 "time_bound_limit,time_bound\n");

    bench_case none;
    bench_memory mem = {0};
    step_result rn = {0};
    fwd_plan fp = {0};
    row_times rt = {0};
    /* --compact yes: every plan of the run compacts, none's included */
    const mg_checkpoints cn = {
        .policy = MG_CKPT_NONE, .compact = o.compact, .store16 = o.store16};
    mg_status s = bench_case_prepare_ckpt(o.spec, &cfg, &cn, &none);
    if (s != MG_OK) rc = bench_fail("building the model", s);
    if (!rc && !bench_memory_alloc(&none, &mem, NULL)) rc = 1;
    if (!rc && (s = bench_case_warm_up(&none, &mem, repeat, &rn)) != MG_OK)
        rc = bench_fail("running policy none", s);
    if (!rc && (s = fwd_prepare(&none, &mem, &fp)) != MG_OK)
        rc = bench_fail("running the forward-only plan", s);
    if (!rc &&
        (s = time_row(&none, &rn, &fp, NULL, NULL, repeat, &rt)) != MG_OK)
        rc = bench_fail("timing policy none", s);
    const size_t none_peak = none.sum.predicted_peak;
    if (!rc)
        fprintf(stderr,
                "none: predicted peak %zu, measured %zu, step %.1f ms, "
                "forward %.1f ms (share %.3f)\n",
                none_peak, rn.peak_bytes, rt.none_ms, rt.fwd_ms,
                rt.fwd_ms / rt.none_ms);
    if (!rc && memory_point) {
        /* The memory policy's point, for the comparison at its peak: its
         * predicted peak becomes one more budget. */
        bench_case mc;
        const mg_checkpoints cm = {.policy = MG_CKPT_MEMORY,
                                   .compact = o.compact,
                                   .store16 = o.store16};
        s = bench_case_prepare_ckpt(o.spec, &cfg, &cm, &mc);
        if (s != MG_OK) {
            rc = bench_fail("building under policy memory", s);
        } else {
            double f = (double)mc.sum.predicted_peak / (double)none_peak;
            fprintf(stderr,
                    "memory policy: predicted peak %zu (%.4f of none), "
                    "recompute_flops_ratio %.4f\n",
                    mc.sum.predicted_peak, f,
                    mc.sum.recompute_flops / mc.sum.forward_flops);
            fr[n_fr++] = f;
        }
        bench_case_free(&mc);
    }
    for (int i = 0; !rc && i < n_fr; i++) {
        mg_checkpoints ck = {.policy = MG_CKPT_BUDGET,
                             .budget_bytes =
                                 (size_t)(fr[i] * (double)none_peak),
                             .compact = o.compact,
                             .store16 = o.store16};
        bench_case c;
        double t0 = bench_now_ms();
        s = bench_case_prepare_ckpt(o.spec, &cfg, &ck, &c);
        double prep_ms = bench_now_ms() - t0;
        if (s != MG_OK) {
            fprintf(stderr, "mg-bench: budget %.3f (%zu bytes): %s: %s\n",
                    fr[i], ck.budget_bytes, mg_status_str(s), mg_last_error());
            fprintf(out, "%s,%ld,%ld,%ld,%g,%zu,,,,%.4f,,,,\n", o.spec->name,
                    o.depth, o.batch, o.width, fr[i], ck.budget_bytes,
                    rt.fwd_ms / rt.none_ms);
            bench_case_free(&c);
            continue;
        }
        step_result r = {0};
        s = bench_case_warm_up(&c, &mem, repeat, &r);
        if (s == MG_OK) s = time_row(&none, &rn, &fp, &c, &r, repeat, &rt);
        const double none_ms = rt.none_ms, share = rt.fwd_ms / rt.none_ms;
        r.time_ms_median = rt.ms;
        if (s != MG_OK) {
            rc = bench_fail("running the budget policy", s);
        } else {
            double ratio = c.sum.forward_flops > 0
                               ? c.sum.recompute_flops / c.sum.forward_flops
                               : 0.0;
            /* issue 29: (time - 1) <= 1.1 x recompute x forward share */
            const double time = r.time_ms_median / none_ms;
            const double limit = 1 + 1.1 * ratio * share;
            fprintf(out,
                    "%s,%ld,%ld,%ld,%g,%zu,%zu,%zu,%.4f,%.4f,%.3f,%.4f,%.4f,"
                    "%s\n",
                    o.spec->name, o.depth, o.batch, o.width, fr[i],
                    ck.budget_bytes, c.sum.predicted_peak, r.peak_bytes, ratio,
                    share, r.time_ms_median, time, limit,
                    time <= limit ? "pass" : "fail");
            fflush(out);
            fprintf(stderr,
                    "budget %.3f: %d checkpoints, %d segments, "
                    "differentiate+choose+compile %.0f ms, none's step "
                    "%.1f ms and forward %.1f ms in the same row; time "
                    "bound: %.4f - 1 %s 1.1 x %.4f x %.4f = %.4f: %s\n",
                    fr[i], c.sum.n_checkpoints, c.sum.n_segments, prep_ms,
                    none_ms, rt.fwd_ms, time, time <= limit ? "<=" : ">", ratio,
                    share, limit - 1, time <= limit ? "pass" : "fail");
        }
        free(r.times);
        free(r.event_times);
        bench_case_free(&c);
    }
    free(rn.times);
    free(rn.event_times);
    fwd_free(&fp);
    bench_case_free(&none);
    bench_memory_free(&mem);
    if (out != stdout) fclose(out);
    return rc;
}
