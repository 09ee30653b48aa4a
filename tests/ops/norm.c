/*
 * ops/norm.c - part of test_ops: forward values, in MG_F32 and MG_F64, of
 * batchnorm and layernorm against hand values and naive loops; bad arguments
 * to the builders.
 */
#include "../helpers.h"

/* ------------------------------------------------------------------ norms */

START_TEST(test_norm_hand) {
    /* batchnorm channels {1,3} and {2,6}: means 2 and 4, biased variances 1
     * and 4, so xhat = [[-1,-1],[1,1]] */
    for (int d = 0; d < 2; d++) {
        fw t;
        fw_begin(&t, th_dtypes[d]);
        mg_tensor x = fw_in(&t, 2, S(2, 2), D(1, 2, 3, 6));
        mg_tensor gm = fw_in(&t, 1, S(2), D(2, 3)),
                  bt = fw_in(&t, 1, S(2), D(1, -1));
        fw_expect(&t, "batchnorm [2,2]", mg_batchnorm(t.g, x, gm, bt, 0), 2,
                  S(2, 2), D(-1, -4, 3, 2), 1e-6);
        /* layernorm of 1..4: mean 2.5, variance 1.25 */
        mg_tensor r = fw_in(&t, 2, S(1, 4), D(1, 2, 3, 4));
        mg_tensor g4 = fw_in(&t, 1, S(4), D(1, 1, 2, 2));
        mg_tensor b4 = fw_in(&t, 1, S(4), D(0, 0, 0, 1));
        const double s = 1 / sqrt(1.25 + 0.25);
        fw_expect(&t, "layernorm [1,4] eps 0.25",
                  mg_layernorm(t.g, r, g4, b4, 1, 0.25), 2, S(1, 4),
                  D(-1.5 * s, -0.5 * s, 2 * 0.5 * s, 2 * 1.5 * s + 1), 1e-6);
        fw_end(&t);
    }
}
END_TEST

/* y[a, b, c] normalised per group b over (a, c); gamma by b or by c. */
static void ref_norm(const double *x, const double *gm, const double *bt,
                     double *y, int64_t na, int64_t nb, int64_t nc,
                     int gamma_by_c, double eps) {
    for (int64_t b = 0; b < nb; b++) {
        double m = 0, v = 0;
        for (int64_t a = 0; a < na; a++)
            for (int64_t c = 0; c < nc; c++) m += x[(a * nb + b) * nc + c];
        m /= (double)(na * nc);
        for (int64_t a = 0; a < na; a++)
            for (int64_t c = 0; c < nc; c++) {
                double e = x[(a * nb + b) * nc + c] - m;
                v += e * e;
            }
        v /= (double)(na * nc);
        for (int64_t a = 0; a < na; a++)
            for (int64_t c = 0; c < nc; c++) {
                int64_t i = (a * nb + b) * nc + c, k = gamma_by_c ? c : b;
                y[i] = (x[i] - m) / sqrt(v + eps) * gm[k] + bt[k];
            }
    }
}

START_TEST(test_norm_random_ref) {
    static const int64_t xs[3] = {3, 4, 6};
    th_rng r;
    th_rng_init(&r, 59);
    double x[72], gm[72], bt[72], y[72];
    th_rand_vals(&r, x, 72, -2, 2);
    th_rand_vals(&r, gm, 72, -2, 2);
    th_rand_vals(&r, bt, 72, -2, 2);
    for (int d = 0; d < 2; d++) {
        fw t;
        fw_begin(&t, th_dtypes[d]);
        mg_tensor xt = fw_in(&t, 4, S(3, 4, 2, 3), x);
        mg_tensor g4 = fw_in(&t, 1, S(4), gm), b4 = fw_in(&t, 1, S(4), bt);
        ref_norm(x, gm, bt, y, 3, 4, 6, 0, 1e-5);
        fw_expect(&t, "batchnorm [3,4,2,3]",
                  mg_batchnorm(t.g, xt, g4, b4, 1e-5), 4, S(3, 4, 2, 3), y,
                  1e-5);
        mg_tensor x2 = fw_in(&t, 2, S(12, 6), x);
        mg_tensor g6 = fw_in(&t, 1, S(6), gm), b6 = fw_in(&t, 1, S(6), bt);
        ref_norm(x, gm, bt, y, 12, 6, 1, 0, 1e-3);
        fw_expect(&t, "batchnorm [12,6]", mg_batchnorm(t.g, x2, g6, b6, 1e-3),
                  2, S(12, 6), y, 1e-5);
        mg_tensor xl = fw_in(&t, 3, xs, x);
        for (int n = 1; n <= 3; n++) {
            char what[48];
            int64_t inner = th_numel(n, xs + 3 - n);
            mg_tensor gl = fw_in(&t, n, xs + 3 - n, gm);
            mg_tensor bl = fw_in(&t, n, xs + 3 - n, bt);
            ref_norm(x, gm, bt, y, 1, 72 / inner, inner, 1, 1e-5);
            snprintf(what, sizeof what, "layernorm [3,4,6] over %d axes", n);
            fw_expect(&t, what, mg_layernorm(t.g, xl, gl, bl, n, 1e-5), 3, xs,
                      y, 1e-5);
        }
        fw_end(&t);
    }
}
END_TEST

START_TEST(test_norm_errors) {
    th_bad_leaves l;
    th_bad_leaves_make(&l);
    mg_graph *g = l.g;
    mg_tensor v4 = mg_param(g, "v4", MG_F32, 1, S(4));
    mg_tensor v3d = mg_param(g, "v3d", MG_F64, 1, S(3));
    mg_tensor m55 = mg_param(g, "m55", MG_F32, 2, S(5, 5));
    TH_FAIL(mg_batchnorm(g, l.v3, l.v3, l.v3, 1e-5), MG_ERR_SHAPE, "batchnorm",
            "at least 2 dims");
    TH_FAIL(mg_batchnorm(g, l.x4, v4, l.v3, 1e-5), MG_ERR_SHAPE, "batchnorm",
            "gamma must be [3]");
    TH_FAIL(mg_batchnorm(g, l.x4, l.v3, v3d, 1e-5), MG_ERR_DTYPE, "batchnorm",
            "beta");
    TH_FAIL(mg_batchnorm(g, l.x4, l.v3, l.v3, -1), MG_ERR_INVALID_ARG,
            "batchnorm", "eps");
    TH_FAIL(mg_batchnorm(g, l.x4, l.v3, l.v3, NAN), MG_ERR_INVALID_ARG,
            "batchnorm", "eps");
    TH_FAIL(mg_layernorm(g, l.x4, m55, m55, 0, 1e-5), MG_ERR_INVALID_ARG,
            "layernorm", "n_norm_axes = 0");
    TH_FAIL(mg_layernorm(g, l.x4, m55, m55, 5, 1e-5), MG_ERR_INVALID_ARG,
            "layernorm", "n_norm_axes = 5");
    TH_FAIL(mg_layernorm(g, l.x4, m55, m55, 1, 1e-5), MG_ERR_SHAPE, "layernorm",
            "gamma must be [5]");
    TH_FAIL(mg_layernorm(g, l.xi, m55, m55, 2, 1e-5), MG_ERR_DTYPE, "layernorm",
            "i32");
    mg_graph_free(g);
}
END_TEST

void ops_norm_tcase(Suite *s) {
    th_add_tcase(
        s, "norm", 0,
        TH_TESTS(test_norm_hand, test_norm_random_ref, test_norm_errors));
}
