/*
 * gradcheck/autodiff.c - part of test_gradcheck: analytic gradients against
 * float64 central finite differences (gc_* in helpers/gradcheck.h) for what
 * mg_gradients does beyond single ops: fan-out, unused and intermediate xs,
 * several ys, seeds, checkpoints, and its errors.
 */
#include "../helpers.h"

/* ------------------------------------------------------------------ autodiff
 */

/* y = x*x + relu(x): x fans out to three uses; gradients must be summed */
START_TEST(test_gc_fan_out) {
    gc_ctx c;
    gc_begin(&c, "fan-out x*x + relu(x)", 1800);
    mg_tensor x = gc_x(&c, 2, S(3, 4));
    gc_check(&c, mg_add(c.g, mg_mul(c.g, x, x), mg_relu(c.g, x)));
    gc_end(&c);

    /* a shared intermediate used by two branches */
    gc_begin(&c, "fan-out of h = tanh(xw): sum(h*h) + softmax(h)", 1801);
    x = gc_x(&c, 2, S(2, 3));
    mg_tensor w = gc_x(&c, 2, S(3, 4));
    mg_tensor h = mg_tanh(c.g, mg_matmul(c.g, x, w, 0, 0));
    mg_tensor y = mg_add(c.g, mg_sum(c.g, mg_mul(c.g, h, h), 1, AX(1), 1),
                         mg_softmax(c.g, h, -1));
    gc_check(&c, y);
    gc_end(&c);
}
END_TEST

/* an x that no y depends on gets a zero-filled gradient of its shape */
START_TEST(test_gc_unused_x) {
    gc_ctx c;
    gc_begin(&c, "unused x", 1900);
    mg_tensor x = gc_x(&c, 2, S(2, 3));
    (void)gc_x(&c, 3, S(2, 1, 4)); /* unused by L */
    mg_tensor L = gc_loss(&c, mg_tanh(c.g, x));
    double *grads[GC_MAX_LEAVES];
    gc_check_ys_ex(&c, 1, &L, NULL, NULL, grads);
    for (int i = 0; i < 8; i++)
        ck_assert_msg(grads[1][i] == 0.0,
                      "unused x: gradient element %d is %.17g, expected 0", i,
                      grads[1][i]);
    int nonzero = 0;
    for (int i = 0; i < 6; i++) nonzero += grads[0][i] != 0.0;
    ck_assert_msg(nonzero > 0, "used x: gradient is all zero");
    free(grads[0]);
    free(grads[1]);
    gc_end(&c);
}
END_TEST

/* xs may be any float tensor: the gradient w.r.t. an intermediate h = 3x
 * of L = sum(tanh(h) * W) is W (1 - tanh(h)^2), and dL/dx = 3 dL/dh */
START_TEST(test_gc_intermediate_x) {
    double xv[6], wv[6], gh[6], gx[6];
    th_rng r;
    th_rng_init(&r, 1950);
    th_fill_f64(&r, xv, 6, -1, 1, 0);
    th_fill_f64(&r, wv, 6, -1, 1, 0);
    mg_graph *g = mg_graph_new();
    ck_assert(g != NULL);
    mg_tensor x = mg_input(g, "x", MG_F64, 2, S(2, 3));
    mg_tensor w = mg_input(g, "w", MG_F64, 2, S(2, 3));
    mg_tensor h = mg_scale(g, x, 3.0);
    mg_tensor L = mg_sum(g, mg_mul(g, mg_tanh(g, h), w), 0, NULL, 0);
    TH_OK_T("L", L);
    mg_tensor xs[2] = {h, x}, grads[2];
    ck_assert_msg(mg_gradients(g, &L, 1, NULL, xs, 2, NULL, grads) == MG_OK,
                  "mg_gradients w.r.t. an intermediate failed: %s",
                  mg_last_error());
    mg_binding b[2] = {{x, xv}, {w, wv}};
    void *bufs[2] = {gh, gx};
    TH_RUN_OK("gradient w.r.t. intermediate", g, 2, grads, bufs, 2, b, 0);
    for (int i = 0; i < 6; i++) {
        double t = tanh(3.0 * xv[i]);
        double e = wv[i] * (1 - t * t);
        ck_assert_msg(fabs(gh[i] - e) <= 1e-12 * (1 + fabs(e)),
                      "dL/dh[%d] (h = 3x intermediate): got %.17g, expected "
                      "%.17g",
                      i, gh[i], e);
        ck_assert_msg(fabs(gx[i] - 3 * e) <= 1e-12 * (1 + fabs(e)),
                      "dL/dx[%d]: got %.17g, expected %.17g", i, gx[i], 3 * e);
    }
    mg_graph_free(g);
}
END_TEST

/* n_ys = 2, grad_ys NULL (both scalar): d(L1 + L2)/dx */
START_TEST(test_gc_two_ys) {
    gc_ctx c;
    gc_begin(&c, "two scalar ys, grad_ys NULL", 2000);
    mg_tensor x = gc_x(&c, 2, S(2, 3));
    mg_tensor z = gc_x(&c, 2, S(2, 3));
    mg_tensor ys[2];
    ys[0] = gc_loss(&c, mg_tanh(c.g, x));
    ys[1] = gc_loss(&c, mg_mul(c.g, x, z));
    gc_check_ys(&c, 2, ys, NULL);
    gc_end(&c);

    /* the same y twice counts twice */
    gc_begin(&c, "same scalar y twice", 2001);
    x = gc_x(&c, 1, S(4));
    ys[0] = gc_loss(&c, mg_sigmoid(c.g, x));
    ys[1] = ys[0];
    gc_check_ys(&c, 2, ys, NULL);
    gc_end(&c);
}
END_TEST

/* a non-scalar y with a caller-given seed tensor bound at run time */
START_TEST(test_gc_grad_ys_seed) {
    gc_ctx c;
    gc_begin(&c, "non-scalar y = sigmoid(x w) with grad_ys seed", 2100);
    mg_tensor x = gc_x(&c, 2, S(3, 4));
    mg_tensor w = gc_x(&c, 2, S(4, 2));
    mg_tensor y = mg_sigmoid(c.g, mg_matmul(c.g, x, w, 0, 0));
    TH_OK_T("sigmoid(matmul)", y);
    mg_tensor seed = gc_const(&c, 2, S(3, 2), -1.0, 1.0);
    gc_check_ys(&c, 1, &y, &seed);
    gc_end(&c);

    /* mixed: a scalar y with MG_NO_TENSOR (ones) and a seeded non-scalar */
    gc_begin(&c, "ys {scalar (MG_NO_TENSOR seed), [2,3] (seeded)}", 2101);
    x = gc_x(&c, 2, S(2, 3));
    mg_tensor ys[2], gys[2];
    ys[0] = gc_loss(&c, mg_exp(c.g, x));
    ys[1] = mg_tanh(c.g, mg_mul(c.g, x, x));
    TH_OK_T("tanh(x*x)", ys[1]);
    gys[0] = MG_NO_TENSOR;
    gys[1] = gc_const(&c, 2, S(2, 3), -1.0, 1.0);
    gc_check_ys(&c, 2, ys, gys);
    gc_end(&c);
}
END_TEST

/* a graph with several op kinds; identical data for identical seeds */
static mg_tensor build_net(gc_ctx *c) {
    mg_tensor x = gc_x(c, 2, S(4, 3));
    mg_tensor w1 = gc_p(c, 2, S(3, 5));
    mg_tensor b1 = gc_p(c, 1, S(5));
    mg_tensor w2 = gc_p(c, 2, S(5, 3));
    mg_tensor lab = gc_labels(c, 4, 3);
    mg_tensor tgt = gc_const(c, 2, S(4, 5), -1.0, 1.0);
    mg_tensor h = mg_gelu(c->g, mg_add(c->g, mg_matmul(c->g, x, w1, 0, 0), b1));
    mg_tensor hd = mg_dropout(c->g, h, 0.3, 5);
    mg_tensor logits = mg_matmul(c->g, hd, w2, 0, 0);
    mg_tensor ce = mg_cross_entropy(c->g, logits, lab);
    mg_tensor m = mg_mse(c->g, mg_tanh(c->g, h), tgt);
    mg_tensor L = mg_add(c->g, ce, mg_scale(c->g, m, 0.5));
    ck_assert_msg(L != MG_NO_TENSOR, "build_net failed: %s", mg_last_error());
    return L;
}

START_TEST(test_gc_checkpoints_none_identical) {
    gc_ctx c1, c2;
    double *g1[GC_MAX_LEAVES], *g2[GC_MAX_LEAVES];
    mg_checkpoints none = {
        .policy = MG_CKPT_NONE, .tensors = NULL, .n_tensors = 0};

    gc_begin(&c1, "net, checkpoints NULL", 2200);
    c1.run_seed = 11;
    mg_tensor L1 = build_net(&c1);
    gc_check_ys_ex(&c1, 1, &L1, NULL, NULL, g1);

    gc_begin(&c2, "net, checkpoints {MG_CKPT_NONE, NULL, 0}", 2200);
    c2.run_seed = 11;
    mg_tensor L2 = build_net(&c2);
    gc_check_ys_ex(&c2, 1, &L2, NULL, &none, g2);

    int nx = 0;
    for (int i = 0; i < c1.n; i++) {
        if (!c1.is_x[i]) continue;
        ck_assert_msg(
            memcmp(g1[nx], g2[nx], (size_t)c1.numel[i] * sizeof(double)) == 0,
            "gradient %d differs between checkpoints NULL and "
            "MG_CKPT_NONE",
            nx);
        free(g1[nx]);
        free(g2[nx]);
        nx++;
    }
    ck_assert_int_eq(nx, 3 + 1);
    gc_end(&c1);
    gc_end(&c2);
}
END_TEST

/* the same comparison on one graph: two mg_gradients calls */
START_TEST(test_gc_checkpoints_same_graph) {
    gc_ctx c;
    gc_begin(&c, "net, twice on one graph", 2300);
    c.run_seed = 3;
    mg_tensor L = build_net(&c);
    mg_tensor xs[GC_MAX_LEAVES], ga[GC_MAX_LEAVES], gb[GC_MAX_LEAVES];
    int nx = 0;
    for (int i = 0; i < c.n; i++)
        if (c.is_x[i]) xs[nx++] = c.t[i];
    mg_checkpoints none = {
        .policy = MG_CKPT_NONE, .tensors = NULL, .n_tensors = 0};
    ck_assert_msg(mg_gradients(c.g, &L, 1, NULL, xs, nx, NULL, ga) == MG_OK,
                  "mg_gradients (NULL) failed: %s", mg_last_error());
    ck_assert_msg(mg_gradients(c.g, &L, 1, NULL, xs, nx, &none, gb) == MG_OK,
                  "mg_gradients (NONE) failed: %s", mg_last_error());
    double *bufs[2 * GC_MAX_LEAVES];
    mg_tensor outs[2 * GC_MAX_LEAVES];
    for (int i = 0; i < nx; i++) {
        int64_t n = mg_tensor_numel(c.g, xs[i]);
        bufs[i] = calloc((size_t)n, sizeof(double));
        bufs[nx + i] = calloc((size_t)n, sizeof(double));
        ck_assert(bufs[i] && bufs[nx + i]);
        outs[i] = ga[i];
        outs[nx + i] = gb[i];
    }
    mg_binding *b = gc_bindings(&c);
    TH_RUN_OK("both gradient sets", c.g, 2 * nx, outs, (void *const *)bufs, c.n,
              b, c.run_seed);
    for (int i = 0; i < nx; i++) {
        int64_t n = mg_tensor_numel(c.g, xs[i]);
        ck_assert_msg(
            memcmp(bufs[i], bufs[nx + i], (size_t)n * sizeof(double)) == 0,
            "one graph: gradient %d differs between checkpoints "
            "NULL and MG_CKPT_NONE",
            i);
        free(bufs[i]);
        free(bufs[nx + i]);
    }
    free(b);
    gc_end(&c);
}
END_TEST

/* grad_ys NULL for a non-scalar y fails and leaves the graph unchanged */
START_TEST(test_gc_errors) {
    mg_graph *g = mg_graph_new();
    ck_assert(g != NULL);
    mg_tensor x = mg_input(g, "x", MG_F64, 2, S(2, 3));
    mg_tensor y = mg_tanh(g, x);
    TH_OK_T("tanh", y);
    int32_t before = mg_graph_num_tensors(g);
    mg_tensor gx = (mg_tensor)-7;
    mg_status st = mg_gradients(g, &y, 1, NULL, &x, 1, NULL, &gx);
    ck_assert_msg(st != MG_OK,
                  "mg_gradients with grad_ys NULL for a [2,3] y succeeded");
    ck_assert_msg(mg_graph_num_tensors(g) == before,
                  "failed mg_gradients changed the graph: %d tensors, was %d",
                  (int)mg_graph_num_tensors(g), (int)before);
    ck_assert_msg(gx == (mg_tensor)-7,
                  "failed mg_gradients wrote grads_out (%d)", (int)gx);

    /* a seed of the wrong shape */
    mg_tensor s = mg_input(g, "s", MG_F64, 1, S(3));
    before = mg_graph_num_tensors(g);
    st = mg_gradients(g, &y, 1, &s, &x, 1, NULL, &gx);
    ck_assert_msg(st != MG_OK,
                  "mg_gradients with a [3] seed for a [2,3] y succeeded");
    ck_assert_msg(mg_graph_num_tensors(g) == before,
                  "failed mg_gradients changed the graph");

    /* gradient w.r.t. an integer tensor is not possible; labels need none */
    mg_tensor l = mg_input(g, "l", MG_F64, 2, S(2, 3));
    mg_tensor lab = mg_input(g, "lab", MG_I32, 1, S(2));
    mg_tensor ce = mg_cross_entropy(g, l, lab);
    TH_OK_T("cross_entropy", ce);
    mg_tensor gl = MG_NO_TENSOR;
    st = mg_gradients(g, &ce, 1, NULL, &l, 1, NULL, &gl);
    ck_assert_msg(st == MG_OK && gl != MG_NO_TENSOR,
                  "gradient of cross_entropy w.r.t. logits failed: %s",
                  mg_last_error());
    mg_graph_free(g);
}
END_TEST

TH_PART(gradcheck_autodiff_tcase, "autodiff", 120, test_gc_fan_out,
        test_gc_unused_x, test_gc_intermediate_x, test_gc_two_ys,
        test_gc_grad_ys_seed, test_gc_checkpoints_none_identical,
        test_gc_checkpoints_same_graph, test_gc_errors)
