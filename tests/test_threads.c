/*
 * test_threads.c - issue 14's threads: the CPU kernels that run on
 * OpenMP's threads (elementwise, batchnorm and layernorm, softmax,
 * reductions, the losses and pooling, forward and backward) give the same bits
 * whatever the thread count, and do run on
 * more than one thread where OpenMP allows it; the float32 exp and tanh
 * of cpu_vmath.c give each element the same bits wherever it sits. A graph big
 * enough to cross MG_PAR_MIN runs with 1, 2 and 3 threads (set the way
 * OMP_NUM_THREADS would) and every output is compared bit for bit. Where
 * memgrad was built without OpenMP all runs are single-threaded and the
 * comparison still holds.
 */
#include "helpers.h"

#include "exec/cpu/cpu_kernels.h"
#include "exec/cpu/cpu_vmath.h"
#include "memgrad_observe.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>

/* libgomp's, linked through libmemgrad where it has OpenMP; declared here
 * so that the test builds either way (a no-op stand-in otherwise). */
#ifdef _OPENMP
#include <omp.h>
#else
static void omp_set_num_threads(int n) { (void)n; }
static int omp_get_max_threads(void) { return 1; }
#endif

START_TEST(test_bits_independent_of_threads) {
    mg_graph *g = mg_graph_new();
    const int64_t xs[4] = {8, 16, 24, 24}, cs[1] = {16}, ls[1] = {24};
    mg_tensor x = mg_input(g, "x", MG_F32, 4, xs);
    mg_tensor gam = mg_param(g, "gamma", MG_F32, 1, cs);
    mg_tensor bet = mg_param(g, "beta", MG_F32, 1, cs);
    mg_tensor lg = mg_param(g, "lgamma", MG_F32, 1, ls);
    mg_tensor lb = mg_param(g, "lbeta", MG_F32, 1, ls);
    mg_tensor h = mg_relu(g, mg_batchnorm(g, x, gam, bet, 1e-5));
    h = mg_mul(g, mg_add(g, h, x), mg_tanh(g, x));
    h = mg_layernorm(g, h, lg, lb, 1, 1e-5);
    mg_tensor loss = mg_sum(g, mg_mul(g, h, h), 0, NULL, 0);
    const mg_tensor wrt[5] = {x, gam, bet, lg, lb};
    mg_tensor grads[5];
    ck_assert_int_eq(mg_gradients(g, &loss, 1, NULL, wrt, 5, NULL, grads),
                     MG_OK);
    const int64_t n[5] = {th_numel(4, xs), 16, 16, 24, 24};
    float *in[5];
    th_rng rng;
    th_rng_init(&rng, 14);
    for (int i = 0; i < 5; i++) {
        in[i] = malloc((size_t)n[i] * sizeof(float));
        ck_assert_ptr_nonnull(in[i]);
        th_fill_f32(&rng, in[i], n[i], -2, 2, 0);
    }
    const mg_binding b[5] = {
        {x, in[0]}, {gam, in[1]}, {bet, in[2]}, {lg, in[3]}, {lb, in[4]}};
    mg_tensor outs[6] = {h, grads[0], grads[1], grads[2], grads[3], grads[4]};
    const int64_t on[6] = {n[0], n[0], 16, 16, 24, 24};
    float *ref[6], *got[6];
    for (int i = 0; i < 6; i++) {
        ref[i] = malloc((size_t)on[i] * sizeof(float));
        got[i] = malloc((size_t)on[i] * sizeof(float));
        ck_assert(ref[i] && got[i]);
    }
    /* memgrad's loops stay on one thread while OpenBLAS's own pthreads
     * pool has more (cpu_kernels.h): give it one, as for an im2col run */
    openblas_set_num_threads(1);
    omp_set_num_threads(1);
    TH_RUN_OK("1 thread", g, 6, outs, (void *const *)ref, 5, b, 1);
    for (int t = 2; t <= 3; t++) {
        omp_set_num_threads(t);
#ifdef _OPENMP
        ck_assert_int_eq(omp_get_max_threads(), t);
        /* the loops of this graph do go parallel */
        ck_assert(mgi_cpu_par(th_numel(4, xs)));
#endif
        TH_RUN_OK("threads", g, 6, outs, (void *const *)got, 5, b, 1);
        for (int i = 0; i < 6; i++)
            ck_assert_msg(
                !memcmp(ref[i], got[i], (size_t)on[i] * sizeof(float)),
                "output %d differs between 1 and %d threads", i, t);
    }
    omp_set_num_threads(1);
    for (int i = 0; i < 6; i++) free(ref[i]), free(got[i]);
    for (int i = 0; i < 5; i++) free(in[i]);
    mg_graph_free(g);
}
END_TEST

/* Runs outs at 1 thread, then 2 and 3, and compares every output's bits. */
static void same_bits_at_thread_counts(const mg_graph *g, int n_outs,
                                       const mg_tensor *outs, const int64_t *on,
                                       int n_ins, const mg_binding *b,
                                       int64_t work) {
    float *ref[8], *got[8];
    ck_assert_int_le(n_outs, 8);
    for (int i = 0; i < n_outs; i++) {
        ref[i] = malloc((size_t)on[i] * sizeof(float));
        got[i] = malloc((size_t)on[i] * sizeof(float));
        ck_assert(ref[i] && got[i]);
    }
    openblas_set_num_threads(1);
    omp_set_num_threads(1);
    TH_RUN_OK("1 thread", g, n_outs, outs, (void *const *)ref, n_ins, b, 1);
    for (int t = 2; t <= 3; t++) {
        omp_set_num_threads(t);
#ifdef _OPENMP
        ck_assert(mgi_cpu_par(work));
#else
        (void)work;
#endif
        TH_RUN_OK("threads", g, n_outs, outs, (void *const *)got, n_ins, b, 1);
        for (int i = 0; i < n_outs; i++)
            ck_assert_msg(
                !memcmp(ref[i], got[i], (size_t)on[i] * sizeof(float)),
                "output %d differs between 1 and %d threads", i, t);
    }
    omp_set_num_threads(1);
    for (int i = 0; i < n_outs; i++) free(ref[i]), free(got[i]);
}

/* softmax and log_softmax along either axis, sums and means to a vector
 * (reduced axes leading, trailing and split) and to one value (the fixed
 * split), cross-entropy and mse, and the gradients through all of them. */
START_TEST(test_softmax_reduce_loss_bits) {
    mg_graph *g = mg_graph_new();
    const int64_t xs[2] = {1024, 64}, ys[3] = {64, 32, 32}, ls[1] = {1024};
    mg_tensor x = mg_input(g, "x", MG_F32, 2, xs);
    mg_tensor t = mg_input(g, "t", MG_F32, 2, xs);
    mg_tensor y3 = mg_input(g, "y3", MG_F32, 3, ys);
    mg_tensor lab = mg_input(g, "labels", MG_I64, 1, ls);
    const int ax0[1] = {0}, ax1[1] = {1}, ax02[2] = {0, 2};
    mg_tensor sm = mg_softmax(g, x, 1);
    mg_tensor lsm = mg_log_softmax(g, x, 0);
    mg_tensor col = mg_mean(g, lsm, 1, ax0, 0); /* [64] */
    mg_tensor row = mg_sum(g, sm, 1, ax1, 0);   /* [1024] */
    mg_tensor mid = mg_sum(g, y3, 2, ax02, 0);  /* [32] */
    mg_tensor loss = mg_add(g, mg_cross_entropy(g, x, lab), mg_mse(g, sm, t));
    loss = mg_add(g, loss, mg_sum(g, mg_mul(g, lsm, t), 0, NULL, 0));
    loss = mg_add(g, loss, mg_mean(g, mg_mul(g, y3, y3), 0, NULL, 0));
    const mg_tensor wrt[2] = {x, y3};
    mg_tensor grads[2];
    ck_assert_int_eq(mg_gradients(g, &loss, 1, NULL, wrt, 2, NULL, grads),
                     MG_OK);
    const int64_t nx = th_numel(2, xs), ny = th_numel(3, ys);
    float *in[3];
    int64_t *labels = malloc(1024 * sizeof *labels);
    th_rng rng;
    th_rng_init(&rng, 41);
    const int64_t n[3] = {nx, nx, ny};
    for (int i = 0; i < 3; i++) {
        in[i] = malloc((size_t)n[i] * sizeof(float));
        ck_assert_ptr_nonnull(in[i]);
        th_fill_f32(&rng, in[i], n[i], -3, 3, 0);
    }
    ck_assert_ptr_nonnull(labels);
    for (int i = 0; i < 1024; i++) labels[i] = (i * 37) % 64;
    const mg_binding b[4] = {
        {x, in[0]}, {t, in[1]}, {y3, in[2]}, {lab, labels}};
    const mg_tensor outs[8] = {sm,  lsm,  col,      row,
                               mid, loss, grads[0], grads[1]};
    const int64_t on[8] = {nx, nx, 64, 1024, 32, 1, nx, ny};
    same_bits_at_thread_counts(g, 8, outs, on, 4, b, nx);
    for (int i = 0; i < 3; i++) free(in[i]);
    free(labels);
    mg_graph_free(g);
}
END_TEST

/* The fused attention and its backward op (issue 30), causal with an
 * additive mask and dropout: its tasks (query blocks forward, batch entries
 * backward) run on separate threads, each exactly as one thread runs it. */
START_TEST(test_attention_bits) {
    mg_graph *g = mg_graph_new();
    const int64_t s[4] = {2, 4, 130, 16}, ms[2] = {130, 130};
    mg_tensor q = mg_input(g, "q", MG_F32, 4, s);
    mg_tensor k = mg_input(g, "k", MG_F32, 4, s);
    mg_tensor v = mg_input(g, "v", MG_F32, 4, s);
    mg_tensor m = mg_input(g, "mask", MG_F32, 2, ms);
    const mg_attention_opts o = {.causal = 1, .dropout_p = 0.1, .seed = 3};
    mg_tensor y = mg_attention_ex(g, q, k, v, m, &o);
    mg_tensor loss = mg_sum(g, mg_mul(g, y, mg_tanh(g, y)), 0, NULL, 0);
    const mg_tensor wrt[4] = {q, k, v, m};
    mg_tensor grads[4];
    ck_assert_int_eq(mg_gradients(g, &loss, 1, NULL, wrt, 4, NULL, grads),
                     MG_OK);
    const int64_t n = th_numel(4, s);
    float *in[4];
    th_rng rng;
    th_rng_init(&rng, 30);
    for (int i = 0; i < 4; i++) {
        const int64_t ni = i == 3 ? 130 * 130 : n;
        in[i] = malloc((size_t)ni * sizeof(float));
        ck_assert_ptr_nonnull(in[i]);
        th_fill_f32(&rng, in[i], ni, -2, 2, 0);
    }
    const mg_binding b[4] = {{q, in[0]}, {k, in[1]}, {v, in[2]}, {m, in[3]}};
    const mg_tensor outs[5] = {y, grads[0], grads[1], grads[2], grads[3]};
    const int64_t on[5] = {n, n, n, n, 130 * 130};
    same_bits_at_thread_counts(g, 5, outs, on, 4, b, 8 * 130 * 130);
    for (int i = 0; i < 4; i++) free(in[i]);
    mg_graph_free(g);
}
END_TEST

/* max and average pooling (overlapping, padded windows) and their
 * gradients, whose planes run on separate threads: the loops (MG_POOL=
 * loops) and, where the library has it, oneDNN's primitives; a plan
 * compiled at 1 thread lends oneDNN's pools their scratchpad at 3. */
START_TEST(test_pool_bits) {
    static const char *const paths[2] = {"loops", "onednn"};
    mg_graph *g = mg_graph_new();
    const int64_t xs[4] = {4, 16, 32, 32};
    mg_tensor x = mg_input(g, "x", MG_F32, 4, xs);
    mg_tensor mp = mg_max_pool2d(g, x, 3, 3, 2, 2, 1, 1);
    mg_tensor ap = mg_avg_pool2d(g, x, 3, 3, 1, 1, 1, 1);
    mg_tensor loss = mg_add(g, mg_sum(g, mg_mul(g, mp, mp), 0, NULL, 0),
                            mg_sum(g, mg_mul(g, ap, ap), 0, NULL, 0));
    mg_tensor gx;
    ck_assert_int_eq(mg_gradients(g, &loss, 1, NULL, &x, 1, NULL, &gx), MG_OK);
    const int64_t n = th_numel(4, xs);
    float *in = malloc((size_t)n * sizeof *in);
    ck_assert_ptr_nonnull(in);
    th_rng rng;
    th_rng_init(&rng, 5);
    th_fill_f32(&rng, in, n, -2, 2, 0);
    const mg_binding b[1] = {{x, in}};
    const mg_tensor outs[3] = {mp, ap, gx};
    const int64_t on[3] = {4 * 16 * 16 * 16, n, n};
    for (int p = 0; p < 2; p++) {
        setenv("MG_POOL", paths[p], 1);
        same_bits_at_thread_counts(g, 3, outs, on, 1, b, n);
    }
    unsetenv("MG_POOL");
    free(in);
    mg_graph_free(g);
}
END_TEST

/* A plan compiled while the caller runs one OpenMP thread, run by an
 * executor with more: oneDNN's convolutions size their scratchpad by the
 * thread count, so the plan's workspace must cover the run's, and the
 * measured peak still equals the predicted one. */
START_TEST(test_conv_plan_covers_more_threads) {
    mg_graph *g = mg_graph_new();
    const int64_t xs[4] = {8, 16, 32, 32}, ws[4] = {32, 16, 3, 3};
    mg_tensor x = mg_input(g, "x", MG_F32, 4, xs);
    mg_tensor w = mg_param(g, "w", MG_F32, 4, ws);
    mg_tensor y = mg_conv2d(g, x, w, 1, 1, 1, 1, 1, 1, 1);
    mg_tensor loss = mg_sum(g, mg_mul(g, y, y), 0, NULL, 0);
    const mg_tensor wrt[2] = {x, w};
    mg_tensor grads[2];
    ck_assert_int_eq(mg_gradients(g, &loss, 1, NULL, wrt, 2, NULL, grads),
                     MG_OK);
    const int64_t nx = th_numel(4, xs), nw = th_numel(4, ws);
    float *in = malloc((size_t)nx * sizeof *in);
    float *win = malloc((size_t)nw * sizeof *win);
    ck_assert(in && win);
    th_rng rng;
    th_rng_init(&rng, 3);
    th_fill_f32(&rng, in, nx, -1, 1, 0);
    th_fill_f32(&rng, win, nw, -1, 1, 0);
    openblas_set_num_threads(1);
    omp_set_num_threads(1);
    mg_plan *p = NULL;
    const mg_tensor outs[3] = {loss, grads[0], grads[1]};
    ck_assert_int_eq(mg_plan_compile(g, outs, 3, NULL, &p), MG_OK);
    const mg_binding b[2] = {{x, in}, {w, win}};
    const size_t predicted = mg_plan_predicted_peak(p, b, 2);
    for (int t = 1; t <= 4; t++) {
        mg_exec_options eo = {.device = MG_DEVICE_CPU, .num_threads = t};
        mg_exec *ex = NULL;
        ck_assert_int_eq(mg_exec_new(&eo, &ex), MG_OK);
        mg_status st = mg_exec_run(ex, p, b, 2, 0);
        ck_assert_msg(st == MG_OK, "%d threads: %s", t, mg_last_error());
        mg_pool_stats ps;
        ck_assert_int_eq(mg_exec_pool_stats(ex, &ps), MG_OK);
        ck_assert_uint_eq(ps.peak_bytes_in_use, predicted);
        mg_exec_free(ex);
    }
    mg_plan_free(p);
    free(in);
    free(win);
    mg_graph_free(g);
}
END_TEST

/* The OpenMP thread count the run saw when it started. */
static mg_status note_threads(void *user, const mg_plan *plan) {
    (void)plan;
    *(int *)user = omp_get_max_threads();
    return MG_OK;
}

/* mg_exec_options.num_threads: the run uses that many threads (at most
 * the cores, where the caller's count is lower), the
 * caller's count is back afterwards, the bits are the 1-thread ones, and a
 * negative count is refused. */
START_TEST(test_exec_num_threads_option) {
    mg_graph *g = mg_graph_new();
    const int64_t xs[2] = {512, 128};
    mg_tensor x = mg_input(g, "x", MG_F32, 2, xs);
    mg_tensor y = mg_sum(g, mg_softmax(g, mg_tanh(g, x), 1), 0, NULL, 0);
    mg_plan *p = NULL;
    ck_assert_int_eq(mg_plan_compile(g, &y, 1, NULL, &p), MG_OK);
    const int64_t n = th_numel(2, xs);
    float *in = malloc((size_t)n * sizeof *in), out[3];
    ck_assert_ptr_nonnull(in);
    th_rng rng;
    th_rng_init(&rng, 7);
    th_fill_f32(&rng, in, n, -2, 2, 0);
    openblas_set_num_threads(1);
    omp_set_num_threads(1);
    int seen = 0;
    const mg_observer obs = {.user = &seen, .run_start = note_threads};
    for (int t = 0; t < 3; t++) {
        mg_exec_options eo = {.device = MG_DEVICE_CPU, .num_threads = t + 1};
        mg_exec *ex = NULL;
        ck_assert_int_eq(mg_exec_new(&eo, &ex), MG_OK);
        ck_assert_int_eq(mg_exec_observer_attach(ex, &obs, NULL), MG_OK);
        const mg_binding b[2] = {{x, in}, {y, &out[t]}};
        ck_assert_int_eq(mg_exec_run(ex, p, b, 2, 0), MG_OK);
#ifdef _OPENMP
        /* counts above the cores (the caller's is 1) are clamped to them */
        const int procs = omp_get_num_procs();
        ck_assert_int_eq(seen, t + 1 < procs ? t + 1 : procs);
#endif
        ck_assert_int_eq(omp_get_max_threads(), 1);
        ck_assert(!memcmp(&out[t], &out[0], sizeof *out));
        mg_exec_free(ex);
    }
    mg_exec_options bad = {.device = MG_DEVICE_CPU, .num_threads = -1};
    mg_exec *ex = NULL;
    ck_assert_int_eq(mg_exec_new(&bad, &ex), MG_ERR_INVALID_ARG);
    ck_assert_ptr_null(ex);
    ck_assert_ptr_nonnull(strstr(mg_last_error(), "num_threads"));
    free(in);
    mg_plan_free(p);
    mg_graph_free(g);
}
END_TEST

/* gelu and silu (and their gradients), tanh, exp and sigmoid in float32, whose
 * exp and tanh go through cpu_vmath.c a block at a time: an odd length, so
 * blocks and vector tails fall in different places at each thread count. */
START_TEST(test_vmath_ops_bits) {
    enum { N = 100003 };
    mg_graph *g = mg_graph_new();
    const int64_t s[1] = {N};
    mg_tensor x = mg_input(g, "x", MG_F32, 1, s);
    mg_tensor w = mg_input(g, "w", MG_F32, 1, s);
    mg_tensor ys[4] = {mg_gelu(g, x), mg_tanh(g, x), mg_exp(g, x),
                       mg_sigmoid(g, x)};
    /* gelu_grad and silu_grad (gy = w) in the one gradient of x */
    mg_tensor loss =
        mg_sum(g, mg_mul(g, mg_add(g, ys[0], mg_silu(g, x)), w), 0, NULL, 0);
    mg_tensor gx;
    ck_assert_int_eq(mg_gradients(g, &loss, 1, NULL, &x, 1, NULL, &gx), MG_OK);
    float *in[2];
    th_rng rng;
    th_rng_init(&rng, 31);
    for (int i = 0; i < 2; i++) {
        in[i] = malloc((size_t)N * sizeof(float));
        ck_assert_ptr_nonnull(in[i]);
        th_fill_f32(&rng, in[i], N, -12, 12, 0);
    }
    const mg_binding b[2] = {{x, in[0]}, {w, in[1]}};
    const mg_tensor outs[5] = {ys[0], ys[1], ys[2], ys[3], gx};
    const int64_t on[5] = {N, N, N, N, N};
    same_bits_at_thread_counts(g, 5, outs, on, 2, b, N);
    for (int i = 0; i < 2; i++) free(in[i]);
    mg_graph_free(g);
}
END_TEST

/* The vector routines themselves: an element's bits do not depend on its
 * place in the array (shifted by one, so it moves between a vector body and
 * a padded tail), and each value is within a few float32 ulps of the
 * function in double. */
START_TEST(test_vmath_position_and_accuracy) {
    enum { N = 1037 };
    float x[N + 1], a[N + 1], b[N + 1];
    th_rng rng;
    th_rng_init(&rng, 32);
    th_fill_f32(&rng, x, N + 1, -30, 30, 0);
    x[0] = 0.0f, x[1] = -INFINITY, x[2] = 100.0f, x[3] = -100.0f;
    for (int f = 0; f < 2; f++) {
        void (*fn)(float *, const float *, int64_t) =
            f ? mgi_cpu_vtanhf : mgi_cpu_vexpf;
        fn(a, x, N + 1);
        fn(b, x + 1, N); /* every element one place earlier */
        ck_assert_msg(!memcmp(a + 1, b, (size_t)N * sizeof(float)),
                      "%s: bits depend on the position", f ? "tanh" : "exp");
        for (int i = 0; i <= N; i++) {
            const double want = f ? tanh((double)x[i]) : exp((double)x[i]);
            const double tol = 4 * (double)FLT_EPSILON * fabs(want) + 1e-44;
            if (want > FLT_MAX) /* beyond float: inf, as expf */
                ck_assert(isinf(a[i]) && a[i] > 0);
            else
                ck_assert_msg(fabs((double)a[i] - want) <= tol,
                              "%s(%g) = %.9g, want %.9g", f ? "tanh" : "exp",
                              (double)x[i], (double)a[i], want);
        }
    }
    /* in place */
    memcpy(b, x, sizeof b);
    mgi_cpu_vexpf(b, b, N + 1);
    mgi_cpu_vexpf(a, x, N + 1);
    ck_assert(!memcmp(a, b, sizeof a));
}
END_TEST

TH_MAIN("threads", "threads", 120, test_bits_independent_of_threads,
        test_softmax_reduce_loss_bits, test_pool_bits, test_attention_bits,
        test_exec_num_threads_option, test_conv_plan_covers_more_threads,
        test_vmath_ops_bits, test_vmath_position_and_accuracy)
