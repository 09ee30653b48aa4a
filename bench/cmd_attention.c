/*
 * cmd_attention.c - mg-bench attention: one attention layer (q, k, v of
 * [batch, heads, T, d], causal or not) and its gradients, built as the fused
 * op (mg_attention) and as the composed ops (matmul, scale, causal_mask,
 * softmax, matmul), each compiled without checkpointing. For each: the
 * planner's predicted peak (pool bytes beyond the caller's q, k, v, the
 * loss weights and the bound gradients), that peak over the bytes of q, k, v
 * and o, the largest tensor of the graph, and the median time of --repeat
 * forward+backward runs after one untimed warm-up. Public API only.
 */
#include "bench.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct attn_opts {
    long batch, heads, seq, dim, causal, repeat;
} attn_opts;

static mg_tensor attn_composed(mg_graph *g, mg_tensor q, mg_tensor k,
                               mg_tensor v, int causal, double scale) {
    mg_tensor s = mg_scale(g, mg_matmul(g, q, k, 0, 1), scale);
    if (causal) s = mg_causal_mask(g, s, -INFINITY);
    return mg_matmul(g, mg_softmax(g, s, -1), v, 0, 0);
}

static int attn_run(const attn_opts *o, int fused) {
    const int64_t sh[4] = {o->batch, o->heads, o->seq, o->dim};
    const size_t n = (size_t)(o->batch * o->heads * o->seq * o->dim);
    mg_graph *g = mg_graph_new();
    mg_tensor q = mg_input(g, "q", MG_F32, 4, sh);
    mg_tensor k = mg_input(g, "k", MG_F32, 4, sh);
    mg_tensor v = mg_input(g, "v", MG_F32, 4, sh);
    mg_tensor r = mg_input(g, "r", MG_F32, 4, sh);
    const double scale = 1.0 / sqrt((double)o->dim);
    mg_tensor y = fused ? mg_attention(g, q, k, v, (int)o->causal, 0)
                        : attn_composed(g, q, k, v, (int)o->causal, scale);
    mg_tensor loss = mg_sum(g, mg_mul(g, y, r), 0, NULL, 0);
    const mg_tensor wrt[3] = {q, k, v};
    mg_tensor gr[3];
    mg_status s = mg_gradients(g, &loss, 1, NULL, wrt, 3, NULL, gr);
    if (s != MG_OK) return bench_fail("mg_gradients", s);
    size_t largest = 0;
    for (mg_tensor t = 0; t < (mg_tensor)mg_graph_num_tensors(g); t++)
        if (mg_tensor_nbytes(g, t) > largest) largest = mg_tensor_nbytes(g, t);
    const mg_tensor outs[4] = {loss, gr[0], gr[1], gr[2]};
    mg_plan *p = NULL;
    s = mg_plan_compile(g, outs, 4, NULL, &p);
    if (s != MG_OK) return bench_fail("mg_plan_compile", s);
    float *buf[8];
    for (int i = 0; i < 8; i++) {
        buf[i] = malloc(n * sizeof(float));
        if (!buf[i]) return bench_fail("malloc", MG_ERR_NOMEM);
        for (size_t e = 0; e < n; e++)
            buf[i][e] = (float)sin(0.37 * (double)e + i);
    }
    mg_binding b[7] = {{q, buf[0]},    {k, buf[1]},     {v, buf[2]},
                       {r, buf[3]},    {gr[0], buf[4]}, {gr[1], buf[5]},
                       {gr[2], buf[6]}};
    const size_t peak = mg_plan_predicted_peak(p, b, 7);
    mg_exec *ex = NULL;
    s = mg_exec_new(NULL, &ex);
    if (s != MG_OK) return bench_fail("mg_exec_new", s);
    double *ms = malloc((size_t)o->repeat * sizeof *ms);
    for (long i = -1; i < o->repeat && s == MG_OK; i++) {
        const double t0 = bench_now_ms();
        s = mg_exec_run(ex, p, b, 7, 1);
        if (i >= 0) ms[i] = bench_now_ms() - t0;
    }
    if (s != MG_OK) return bench_fail("mg_exec_run", s);
    const size_t qkvo = 4 * n * sizeof(float);
    printf("%-8s %6ld %5ld %4ld %5ld %6ld %12.1f %10.2f %14.1f %10.1f\n",
           fused ? "fused" : "composed", o->batch, o->heads, o->seq, o->dim,
           o->causal, bench_mib(peak), (double)peak / (double)qkvo,
           bench_mib(largest), bench_median(ms, (int)o->repeat));
    fflush(stdout);
    free(ms);
    mg_exec_free(ex);
    mg_plan_free(p);
    for (int i = 0; i < 8; i++) free(buf[i]);
    mg_graph_free(g);
    return 0;
}

int bench_cmd_attention(int argc, char **argv) {
    attn_opts o = {1, 8, 4096, 64, 1, 3};
    for (int i = 0; i < argc; i += 2) {
        const char *opt, *value;
        int rc = bench_opt_next(argc, argv, i, NULL, &opt, &value);
        if (rc != BENCH_OPT_OWN) return rc == BENCH_OPT_DONE ? 2 : rc;
        long *dst = !strcmp(opt, "--batch")    ? &o.batch
                    : !strcmp(opt, "--heads")  ? &o.heads
                    : !strcmp(opt, "--seq")    ? &o.seq
                    : !strcmp(opt, "--dim")    ? &o.dim
                    : !strcmp(opt, "--causal") ? &o.causal
                    : !strcmp(opt, "--repeat") ? &o.repeat
                                               : NULL;
        if (!dst) return bench_usage_error("attention: unknown option %s", opt);
        const long lo = dst == &o.causal ? 0 : 1,
                   hi = dst == &o.causal ? 1 : 1L << 20;
        if (!bench_long_parse(value, lo, hi, dst))
            return bench_usage_error("attention: bad %s %s", opt, value);
    }
    char blas[128];
    bench_blas_info(blas, sizeof blas);
    printf("# mg-bench attention: f32, no checkpointing; %s\n", blas);
    printf("# peak: predicted pool bytes beyond the bound q, k, v, r and "
           "gradients; xqkvo: over the bytes of q, k, v, o\n");
    printf("%-8s %6s %5s %4s %5s %6s %12s %10s %14s %10s\n", "attn", "batch",
           "heads", "T", "d", "causal", "peak_MiB", "xqkvo", "largest_MiB",
           "median_ms");
    int rc = attn_run(&o, 1);
    if (rc == 0) rc = attn_run(&o, 0);
    return rc;
}
