/*
 * test_pool.c - the buffer pool and buffer ownership: bytes in use go back
 * to zero, the measured peak equals the plan's liveness prediction, cached
 * blocks are reused, caller memory is borrowed (never written except bound
 * outputs), forward-only plans keep nothing, retain keeps what was asked.
 */
#include "helpers.h"

/* Peak equals the prediction with outputs in the pool and with outputs
 * bound to caller memory; nothing stays in use after release. */
START_TEST(test_peak_equals_prediction) {
    for (int bind_grads = 0; bind_grads <= 1; bind_grads++) {
        tm_mlp m;
        ck_assert(tm_mlp_build(&m, MG_F32, 6, 16, 48, 5, 8, 1, 0.2, NULL) ==
                  MG_OK);
        tm_mlp_data d;
        tm_mlp_data_init(&d, &m, 5, bind_grads);
        mg_plan *p = NULL;
        mg_exec *ex = NULL;
        ck_assert(mg_plan_compile(m.g, d.outs, d.n_outs, NULL, &p) == MG_OK);
        ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
        size_t predicted = mg_plan_predicted_peak(p, d.binds, d.n_binds);
        ck_assert(predicted > 0);
        for (int run = 0; run < 3; run++) {
            mg_exec_pool_reset_peak(ex);
            ck_assert_msg(mg_exec_run(ex, p, d.binds, d.n_binds, 7) == MG_OK,
                          "%s", mg_last_error());
            mg_pool_stats s = th_pool_stats(ex);
            ck_assert_msg(s.peak_bytes_in_use == predicted,
                          "bind_grads %d run %d: peak %zu, predicted %zu",
                          bind_grads, run, s.peak_bytes_in_use, predicted);
            if (!bind_grads) {
                /* gradients are kept in the pool and readable */
                const void *gw0 = NULL;
                ck_assert(mg_exec_tensor_data(ex, m.gw[0], &gw0) == MG_OK);
                ck_assert(gw0 != NULL);
                ck_assert(s.bytes_in_use > 0);
            } else {
                ck_assert_msg(s.bytes_in_use == 0, "%zu in use",
                              s.bytes_in_use);
            }
            mg_exec_release(ex);
            ck_assert_uint_eq(th_pool_stats(ex).bytes_in_use, 0);
        }
        mg_exec_free(ex);
        mg_plan_free(p);
        tm_mlp_data_free(&d, &m);
        mg_graph_free(m.g);
    }
}
END_TEST

/* Blocks are reused within and across runs, and the pool never reserves
 * more than its peak in use: it gives cached blocks of unneeded classes back
 * before growing (pool.c). */
START_TEST(test_cache_reuse_and_trim) {
    for (int uniform = 0; uniform <= 1; uniform++) {
        /* uniform: every activation the same size, so one class serves all
         * and a second run needs nothing from the system */
        tm_mlp m;
        ck_assert(tm_mlp_build(&m, MG_F64, 4, uniform ? 16 : 8, 16,
                               uniform ? 16 : 3, 4, 0, 0.0, NULL) == MG_OK);
        tm_mlp_data d;
        tm_mlp_data_init(&d, &m, 1, 1);
        mg_plan *p = NULL;
        mg_exec *ex = NULL;
        ck_assert(mg_plan_compile(m.g, d.outs, d.n_outs, NULL, &p) == MG_OK);
        ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
        ck_assert(mg_exec_run(ex, p, d.binds, d.n_binds, 0) == MG_OK);
        mg_pool_stats s1 = th_pool_stats(ex);
        ck_assert(s1.alloc_calls ==
                  (uint64_t)mg_plan_num_steps(p) - (uint64_t)(d.n_outs));
        ck_assert(s1.system_allocs <= s1.alloc_calls);
        ck_assert_msg(s1.cache_hits > 0, "a chain reuses blocks within a run");
        ck_assert_msg(s1.bytes_reserved <= s1.peak_bytes_in_use,
                      "reserved %zu > peak in use %zu", s1.bytes_reserved,
                      s1.peak_bytes_in_use);
        ck_assert(mg_exec_run(ex, p, d.binds, d.n_binds, 0) == MG_OK);
        mg_pool_stats s2 = th_pool_stats(ex);
        uint64_t again = s2.system_allocs - s1.system_allocs;
        ck_assert_msg(uniform ? again == 0 : again < s1.system_allocs,
                      "uniform %d: second run went to the system %llu times "
                      "(first: %llu)",
                      uniform, (unsigned long long)again,
                      (unsigned long long)s1.system_allocs);
        ck_assert(s2.cache_hits - s1.cache_hits == s1.alloc_calls - again);
        ck_assert(s2.bytes_reserved <= s2.peak_bytes_in_use);
        mg_exec_pool_trim(ex);
        ck_assert_uint_eq(th_pool_stats(ex).bytes_reserved, 0);
        mg_exec_free(ex);
        mg_plan_free(p);
        tm_mlp_data_free(&d, &m);
        mg_graph_free(m.g);
    }
}
END_TEST

/* Inputs and parameters are read, never written; a bound output is
 * written exactly within its bytes. */
START_TEST(test_caller_memory_borrowed) {
    tm_mlp m;
    ck_assert(tm_mlp_build(&m, MG_F32, 3, 8, 16, 3, 4, 1, 0.0, NULL) == MG_OK);
    tm_mlp_data d;
    tm_mlp_data_init(&d, &m, 3, 0);
    size_t nx = sizeof(float) * 4 * 8, nw0 = sizeof(float) * 8 * 16;
    unsigned char *x_copy = malloc(nx), *w0_copy = malloc(nw0);
    memcpy(x_copy, d.x, nx);
    memcpy(w0_copy, d.w[0], nw0);
    /* gw[1] goes into the middle of a canary-filled block */
    size_t ngw1 = sizeof(float) * 16 * 16;
    unsigned char *block = malloc(ngw1 + 128);
    memset(block, 0xAB, ngw1 + 128);
    d.binds[d.n_binds++] = (mg_binding){m.gw[1], block + 64};
    mg_plan *p = NULL;
    mg_exec *ex = NULL;
    ck_assert(mg_plan_compile(m.g, d.outs, d.n_outs, NULL, &p) == MG_OK);
    ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
    ck_assert_msg(mg_exec_run(ex, p, d.binds, d.n_binds, 0) == MG_OK, "%s",
                  mg_last_error());
    ck_assert(memcmp(x_copy, d.x, nx) == 0);
    ck_assert(memcmp(w0_copy, d.w[0], nw0) == 0);
    for (int i = 0; i < 64; i++) {
        ck_assert_uint_eq(block[i], 0xAB);
        ck_assert_uint_eq(block[64 + ngw1 + (size_t)i], 0xAB);
    }
    int written = 0;
    for (size_t i = 0; i < ngw1; i++) written |= block[64 + i] != 0xAB;
    ck_assert_msg(written, "the bound output was not written");
    /* A bound output is reported at the caller's address. */
    const void *where = NULL;
    ck_assert(mg_exec_tensor_data(ex, m.gw[1], &where) == MG_OK);
    ck_assert_ptr_eq(where, block + 64);
    mg_exec_free(ex); /* must not free caller memory (ASan would see it) */
    mg_plan_free(p);
    memset(block, 0, ngw1 + 128);
    free(block);
    free(x_copy);
    free(w0_copy);
    tm_mlp_data_free(&d, &m);
    mg_graph_free(m.g);
}
END_TEST

/* A forward-only plan of a deep chain holds at most two activations. */
START_TEST(test_no_grad_keeps_nothing) {
    tm_mlp m;
    ck_assert(tm_mlp_build(&m, MG_F32, 12, 16, 64, 4, 8, 0, 0.0, NULL) ==
              MG_OK);
    tm_mlp_data d;
    tm_mlp_data_init(&d, &m, 2, 1);
    mg_plan_options o = {.no_grad = 1};
    mg_plan *fwd = NULL, *full = NULL;
    ck_assert_msg(mg_plan_compile(m.g, &m.loss, 1, &o, &fwd) == MG_OK, "%s",
                  mg_last_error());
    ck_assert(mg_plan_compile(m.g, d.outs, d.n_outs, NULL, &full) == MG_OK);
    /* binds: everything except the gradients, which fwd does not know */
    mg_binding b[3 + 2 * (TM_MAX_LAYERS + 1)];
    int nb = 0;
    for (int i = 0; i < d.n_binds; i++)
        if (!mg_tensor_is_backward(m.g, d.binds[i].tensor))
            b[nb++] = d.binds[i];
    mg_exec *ex = NULL;
    ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
    ck_assert_msg(mg_exec_run(ex, fwd, b, nb, 0) == MG_OK, "%s",
                  mg_last_error());
    mg_pool_stats s = th_pool_stats(ex);
    size_t layer = mg_pool_size_class(sizeof(float) * 8 * 64);
    ck_assert_msg(s.peak_bytes_in_use <= 2 * layer,
                  "forward-only peak %zu > two layers (%zu)",
                  s.peak_bytes_in_use, 2 * layer);
    ck_assert_uint_eq(s.peak_bytes_in_use, mg_plan_predicted_peak(fwd, b, nb));
    ck_assert_uint_eq(s.bytes_in_use, 0);
    ck_assert_msg(mg_plan_predicted_peak(full, d.binds, d.n_binds) >
                      6 * s.peak_bytes_in_use,
                  "backprop should hold every activation");
    /* The gradient is a backward op: a no_grad plan refuses it. */
    mg_plan *bad = NULL;
    ck_assert_int_eq(mg_plan_compile(m.g, &m.gw[0], 1, &o, &bad),
                     MG_ERR_INVALID_ARG);
    ck_assert_ptr_null(bad);
    ck_assert_msg(strstr(mg_last_error(), "no_grad") != NULL, "%s",
                  mg_last_error());
    mg_exec_free(ex);
    mg_plan_free(fwd);
    mg_plan_free(full);
    tm_mlp_data_free(&d, &m);
    mg_graph_free(m.g);
}
END_TEST

/* Intermediate gradients are released by default and kept when retained. */
START_TEST(test_retain_grad) {
    mg_graph *g = mg_graph_new();
    int64_t sh[1] = {3};
    mg_tensor x = mg_param(g, "x", MG_F64, 1, sh);
    mg_tensor h = mg_tanh(g, x);
    mg_tensor y = mg_sum(g, mg_mul(g, h, h), 0, NULL, 0);
    /* d y / d h is an intermediate gradient: ask for both */
    mg_tensor xs[2] = {x, h}, gr[2];
    ck_assert(mg_gradients(g, &y, 1, NULL, xs, 2, NULL, gr) == MG_OK);
    mg_tensor gx = gr[0], gh = gr[1];
    double xv[3] = {0.1, -0.5, 2.0}, gxv[3];
    mg_binding b[2] = {{x, xv}, {gx, gxv}};
    mg_exec *ex = NULL;
    ck_assert(mg_exec_new(NULL, &ex) == MG_OK);

    mg_plan *plain = NULL;
    ck_assert(mg_plan_compile(g, &gx, 1, NULL, &plain) == MG_OK);
    ck_assert(mg_exec_run(ex, plain, b, 2, 0) == MG_OK);
    const void *ptr = NULL;
    ck_assert_int_eq(mg_exec_tensor_data(ex, gh, &ptr), MG_ERR_UNKNOWN_ID);
    ck_assert_uint_eq(th_pool_stats(ex).bytes_in_use, 0);

    mg_plan_options o = {.retain = &gh, .n_retain = 1};
    mg_plan *kept = NULL;
    ck_assert(mg_plan_compile(g, &gx, 1, &o, &kept) == MG_OK);
    ck_assert(mg_exec_run(ex, kept, b, 2, 0) == MG_OK);
    ck_assert(mg_exec_tensor_data(ex, gh, &ptr) == MG_OK);
    const double *ghv = ptr;
    for (int i = 0; i < 3; i++) {
        double t = tanh(xv[i]);
        ck_assert_msg(fabs(ghv[i] - 2 * t) < 1e-12, "dy/dh[%d] = %g", i,
                      ghv[i]);
        ck_assert(fabs(gxv[i] - 2 * t * (1 - t * t)) < 1e-12);
    }
    ck_assert_uint_eq(th_pool_stats(ex).bytes_in_use,
                      mg_pool_size_class(3 * 8));
    mg_exec_release(ex);
    ck_assert_uint_eq(th_pool_stats(ex).bytes_in_use, 0);
    mg_exec_free(ex);
    mg_plan_free(plain);
    mg_plan_free(kept);
    mg_graph_free(g);
}
END_TEST

START_TEST(test_size_class) {
    ck_assert_uint_eq(mg_pool_size_class(1), 256);
    ck_assert_uint_eq(mg_pool_size_class(256), 256);
    ck_assert_uint_eq(mg_pool_size_class(257), 512);
    ck_assert_uint_ge(mg_pool_size_class(1000000), 1000000);
}
END_TEST

int main(void) {
    Suite *s = suite_create("pool");
    th_add_tcase(
        s, "pool", 120,
        TH_TESTS(test_peak_equals_prediction, test_cache_reuse_and_trim,
                 test_caller_memory_borrowed, test_no_grad_keeps_nothing,
                 test_retain_grad, test_size_class));
    return th_run_suite(s);
}
