/*
 * cmd_rewrite.c - mg-bench rewrite: the time mg_gradients (differentiate
 * and rewrite, policy memory) and mg_plan_compile take on graphs of very
 * many forward ops, chains and residual blocks: wall time, and the CPU
 * time of the one thread that does it all (what one core spent, which a
 * loaded machine inflates less than wall time).
 */
#include "bench.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* N forward ops on a 16-element f32 vector, ending in a scalar sum:
 * chain:    p -> tanh -> tanh -> ... (N-1 tanh) -> sum
 * residual: h -> h + tanh(h) blocks ((N-1)/2 of them) -> sum
 * Differentiated with respect to the parameter p. */
static mg_status build_rewrite_graph(const char *shape, long n_ops,
                                     mg_graph **g_out, mg_tensor *p_out,
                                     mg_tensor *y_out) {
    mg_graph *g = mg_graph_new();
    if (!g) return MG_ERR_NOMEM;
    int64_t s[1] = {16};
    mg_tensor p = mg_param(g, "p", MG_F32, 1, s), h = p;
    if (!strcmp(shape, "chain"))
        for (long i = 0; i < n_ops - 1; i++) h = mg_tanh(g, h);
    else
        for (long i = 0; i < (n_ops - 1) / 2; i++)
            h = mg_add(g, h, mg_tanh(g, h));
    mg_tensor y = mg_sum(g, h, 0, NULL, 0);
    *g_out = g;
    *p_out = p;
    *y_out = y;
    if (y == MG_NO_TENSOR) {
        mg_graph_free(g);
        *g_out = NULL;
        return MG_ERR_NOMEM;
    }
    return MG_OK;
}

int bench_cmd_rewrite(int argc, char **argv) {
    const char *ops_s = "10000,100000,1000000", *shape_s = "chain,residual",
               *csv_path = NULL;
    long repeat = 5;
    for (int i = 0; i < argc; i += 2) { /* --option value pairs */
        const char *a, *v;
        int r = bench_opt_next(argc, argv, i, NULL, &a, &v);
        if (r != BENCH_OPT_OWN) return r;
        if (!strcmp(a, "--ops")) ops_s = v;
        else if (!strcmp(a, "--shape")) shape_s = v;
        else if (!strcmp(a, "--csv")) csv_path = v;
        else if (!strcmp(a, "--repeat")) {
            if (!bench_long_parse(v, 1, 100000, &repeat))
                return bench_usage_error("bad --repeat '%s'", v);
        } else return bench_usage_error("unknown option '%s' for rewrite", a);
    }
    long ops[BENCH_MAX_LIST];
    int n_ops = bench_int_list_parse(ops_s, 3, 50000000L, ops, BENCH_MAX_LIST);
    if (n_ops < 1)
        return bench_usage_error("bad --ops '%s' (integers >= 3)", ops_s);
    const char *shapes[2];
    int n_shapes = 0;
    {
        char buf[64];
        if (strlen(shape_s) >= sizeof buf)
            return bench_usage_error("bad --shape '%s'", shape_s);
        strcpy(buf, shape_s);
        for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
             tok = strtok_r(NULL, ",", &save)) {
            if (n_shapes == 2)
                return bench_usage_error("bad --shape '%s'", shape_s);
            if (!strcmp(tok, "chain")) shapes[n_shapes++] = "chain";
            else if (!strcmp(tok, "residual")) shapes[n_shapes++] = "residual";
            else
                return bench_usage_error("bad --shape '%s' (chain, residual)",
                                         shape_s);
        }
        if (!n_shapes) return bench_usage_error("bad --shape '%s'", shape_s);
    }
    FILE *csv = NULL;
    if (csv_path) {
        if (!(csv = fopen(csv_path, "w"))) {
            fprintf(stderr, "mg-bench: cannot write %s: %s\n", csv_path,
                    strerror(errno));
            return 1;
        }
        fputs("shape,ops,tensors,plan_steps,build_ms,gradients_ms,plan_ms,"
              "total_ms,gradients_cpu_ms,plan_cpu_ms,total_cpu_ms\n",
              csv);
    }
    printf("# mg-bench rewrite: median of %ld runs; gradients = mg_gradients "
           "(differentiate + rewrite, policy memory), plan = mg_plan_compile; "
           "total = gradients + plan; *_ms wall, cpu_* this thread's CPU "
           "time\n",
           repeat);
    printf("%-9s %9s %9s %9s %10s %12s %10s %10s %10s %10s %10s\n", "shape",
           "ops", "tensors", "steps", "build_ms", "gradients_ms", "plan_ms",
           "total_ms", "cpu_grad", "cpu_plan", "cpu_total");
    double *tb = malloc((size_t)repeat * sizeof *tb),
           *tg = malloc((size_t)repeat * sizeof *tg),
           *tp = malloc((size_t)repeat * sizeof *tp),
           *tt = malloc((size_t)repeat * sizeof *tt),
           *cg = malloc((size_t)repeat * sizeof *cg),
           *cp = malloc((size_t)repeat * sizeof *cp),
           *ct = malloc((size_t)repeat * sizeof *ct);
    int rc = 0;
    if (!tb || !tg || !tp || !tt || !cg || !cp || !ct) {
        rc = bench_fail("rewrite", MG_ERR_NOMEM);
        goto out;
    }
    for (int si = 0; si < n_shapes; si++)
        for (int oi = 0; oi < n_ops; oi++) {
            int32_t n_tensors = 0, n_steps = 0;
            for (long k = 0; k < repeat; k++) {
                fprintf(stderr, "[rewrite] %s %ld ops: run %ld/%ld\n",
                        shapes[si], ops[oi], k + 1, repeat);
                mg_graph *g;
                mg_tensor p, y, gp;
                double t0 = bench_now_ms();
                mg_status s =
                    build_rewrite_graph(shapes[si], ops[oi], &g, &p, &y);
                double t1 = bench_now_ms(), c1 = bench_cpu_ms();
                if (s != MG_OK) {
                    rc = bench_fail("building the graph", s);
                    goto out;
                }
                mg_checkpoints ck = {.policy = MG_CKPT_MEMORY};
                s = mg_gradients(g, &y, 1, NULL, &p, 1, &ck, &gp);
                double t2 = bench_now_ms(), c2 = bench_cpu_ms();
                mg_plan *plan = NULL;
                mg_tensor outs[2] = {y, gp};
                if (s == MG_OK) s = mg_plan_compile(g, outs, 2, NULL, &plan);
                double t3 = bench_now_ms(), c3 = bench_cpu_ms();
                if (s != MG_OK) {
                    mg_graph_free(g);
                    rc = bench_fail("differentiating and planning", s);
                    goto out;
                }
                tb[k] = t1 - t0;
                tg[k] = t2 - t1;
                tp[k] = t3 - t2;
                tt[k] = t3 - t1;
                cg[k] = c2 - c1;
                cp[k] = c3 - c2;
                ct[k] = c3 - c1;
                n_tensors = mg_graph_num_tensors(g);
                n_steps = mg_plan_num_steps(plan);
                mg_plan_free(plan);
                mg_graph_free(g);
            }
            double mb = bench_median(tb, (int)repeat),
                   mgr = bench_median(tg, (int)repeat),
                   mp = bench_median(tp, (int)repeat),
                   mt = bench_median(tt, (int)repeat),
                   mcg = bench_median(cg, (int)repeat),
                   mcp = bench_median(cp, (int)repeat),
                   mct = bench_median(ct, (int)repeat);
            printf(
                "%-9s %9ld %9d %9d %10.1f %12.1f %10.1f %10.1f %10.1f %10.1f "
                "%10.1f\n",
                shapes[si], ops[oi], (int)n_tensors, (int)n_steps, mb, mgr, mp,
                mt, mcg, mcp, mct);
            fflush(stdout);
            if (csv)
                fprintf(csv,
                        "%s,%ld,%d,%d,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f\n",
                        shapes[si], ops[oi], (int)n_tensors, (int)n_steps, mb,
                        mgr, mp, mt, mcg, mcp, mct);
        }
out:
    free(tb);
    free(tg);
    free(tp);
    free(tt);
    free(cg);
    free(cp);
    free(ct);
    if (csv && fclose(csv) != 0) {
        fprintf(stderr, "mg-bench: error writing %s\n", csv_path);
        rc = 1;
    }
    return rc;
}
