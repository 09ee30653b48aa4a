/*
 * test_train.c - end-to-end training: an MLP regressor and a small
 * classifier take a few SGD steps through mg_gradients, mg_plan_compile
 * and mg_exec_run, and the loss must go down.
 */
#include "helpers.h"

/* Train for `steps` and return first and last loss. */
static void train(tm_mlp *m, double lr, int steps, uint64_t seed, double *first,
                  double *last) {
    tm_mlp_data d;
    tm_mlp_data_init(&d, m, seed, 1);
    mg_plan *p = NULL;
    mg_exec *ex = NULL;
    ck_assert_msg(mg_plan_compile(m->g, d.outs, d.n_outs, NULL, &p) == MG_OK,
                  "compile: %s", mg_last_error());
    ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
    for (int s = 0; s < steps; s++) {
        mg_status st = mg_exec_run(ex, p, d.binds, d.n_binds, (uint64_t)s);
        ck_assert_msg(st == MG_OK, "step %d: %s", s, mg_last_error());
        double loss = tm_loss_value(&d, m);
        ck_assert_msg(isfinite(loss), "step %d: loss is %g", s, loss);
        if (s == 0) *first = loss;
        *last = loss;
        tm_sgd(&d, m, lr);
    }
    mg_pool_stats st;
    mg_exec_pool_stats(ex, &st);
    ck_assert_msg(st.bytes_in_use == 0, "%zu bytes still in use",
                  st.bytes_in_use);
    mg_exec_free(ex);
    mg_plan_free(p);
    tm_mlp_data_free(&d, m);
}

START_TEST(test_mlp_regression_f32) {
    tm_mlp m;
    ck_assert_msg(tm_mlp_build(&m, MG_F32, 3, 8, 32, 4, 16, 0, 0.0, NULL) ==
                      MG_OK,
                  "%s", mg_last_error());
    double first = 0, last = 0;
    train(&m, 0.02, 30, 1, &first, &last);
    ck_assert_msg(last < 0.7 * first, "mse went from %g to %g", first, last);
    mg_graph_free(m.g);
}
END_TEST

START_TEST(test_classifier_f64) {
    tm_mlp m;
    ck_assert_msg(tm_mlp_build(&m, MG_F64, 2, 6, 24, 3, 32, 1, 0.0, NULL) ==
                      MG_OK,
                  "%s", mg_last_error());
    double first = 0, last = 0;
    train(&m, 0.1, 40, 2, &first, &last);
    ck_assert_msg(last < 0.8 * first, "cross-entropy went from %g to %g", first,
                  last);
    mg_graph_free(m.g);
}
END_TEST

START_TEST(test_classifier_dropout_f32) {
    tm_mlp m;
    ck_assert_msg(tm_mlp_build(&m, MG_F32, 2, 6, 32, 3, 32, 1, 0.1, NULL) ==
                      MG_OK,
                  "%s", mg_last_error());
    double first = 0, last = 0;
    train(&m, 0.1, 40, 3, &first, &last);
    ck_assert_msg(last < first, "cross-entropy went from %g to %g", first,
                  last);
    mg_graph_free(m.g);
}
END_TEST

/* A softmax + log + mean classifier written from primitive ops must agree
 * with the fused cross-entropy op, value and gradient. */
START_TEST(test_softmax_classifier_matches_cross_entropy) {
    mg_graph *g = mg_graph_new();
    int64_t ls[2] = {4, 5}, ys[1] = {4};
    mg_tensor logits = mg_param(g, "logits", MG_F64, 2, ls);
    mg_tensor onehot = mg_input(g, "onehot", MG_F64, 2, ls);
    mg_tensor labels = mg_input(g, "labels", MG_I32, 1, ys);
    mg_tensor ce = mg_cross_entropy(g, logits, labels);
    mg_tensor lsm = mg_log_softmax(g, logits, -1);
    mg_tensor manual = mg_neg(
        g, mg_scale(g, mg_sum(g, mg_mul(g, lsm, onehot), 0, NULL, 0), 1.0 / 4));
    TH_OK_T("manual loss", manual);
    mg_tensor g1, g2;
    ck_assert(mg_gradients(g, &ce, 1, NULL, &logits, 1, NULL, &g1) == MG_OK);
    ck_assert(mg_gradients(g, &manual, 1, NULL, &logits, 1, NULL, &g2) ==
              MG_OK);
    double l[20], oh[20] = {0}, v1, v2, d1[20], d2[20];
    int32_t lab[4] = {0, 4, 2, 2};
    th_rng r;
    th_rng_init(&r, 9);
    th_fill_f64(&r, l, 20, -3, 3, 0);
    for (int i = 0; i < 4; i++) oh[i * 5 + lab[i]] = 1.0;
    mg_binding in[3] = {{logits, l}, {onehot, oh}, {labels, lab}};
    mg_tensor outs[4] = {ce, manual, g1, g2};
    void *bufs[4] = {&v1, &v2, d1, d2};
    TH_RUN_OK("classifier", g, 4, outs, bufs, 3, in, 0);
    ck_assert_msg(fabs(v1 - v2) < 1e-12, "loss %g vs %g", v1, v2);
    th_check_f64("grad", d1, d2, 20, 1e-12, 1e-12);
    mg_graph_free(g);
}
END_TEST

TH_MAIN("train", "sgd", 120, test_mlp_regression_f32, test_classifier_f64,
        test_classifier_dropout_f32,
        test_softmax_classifier_matches_cross_entropy)
