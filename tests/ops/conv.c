/*
 * ops/conv.c - part of test_ops: forward values, in MG_F32 and MG_F64, of
 * conv2d against hand values and a direct 7-loop convolution; bad arguments to
 * its builder.
 */
#include "../helpers.h"

/* ------------------------------------------------------------------ conv2d */

typedef struct conv_case {
    int64_t n, c, h, w, o, kh, kw;
    int sh, sw, ph, pw, dh, dw, groups;
} conv_case;

/* Direct 7-loop convolution, independent of im2col. */
static void ref_conv(const conv_case *k, const double *x, const double *w,
                     double *y, int64_t oh, int64_t ow) {
    const int64_t cg = k->c / k->groups, og = k->o / k->groups;
    for (int64_t n = 0; n < k->n; n++)
        for (int64_t o = 0; o < k->o; o++)
            for (int64_t i = 0; i < oh; i++)
                for (int64_t j = 0; j < ow; j++) {
                    double s = 0;
                    for (int64_t ci = 0; ci < cg; ci++)
                        for (int64_t a = 0; a < k->kh; a++)
                            for (int64_t b = 0; b < k->kw; b++) {
                                int64_t iy = i * k->sh - k->ph + a * k->dh;
                                int64_t ix = j * k->sw - k->pw + b * k->dw;
                                if (iy < 0 || iy >= k->h || ix < 0 ||
                                    ix >= k->w)
                                    continue;
                                int64_t c = (o / og) * cg + ci;
                                s += x[((n * k->c + c) * k->h + iy) * k->w +
                                       ix] *
                                     w[((o * cg + ci) * k->kh + a) * k->kw + b];
                            }
                    *y++ = s;
                }
}

START_TEST(test_conv2d_hand) {
    /* x = 1..9 in 3x3, w = [[1, 0], [0, -1]]: each window gives
     * x[i][j] - x[i+1][j+1] = -4. With pad 1 and stride 2 the windows start
     * at -1 and 1 and only taps inside x count: -x00, -x02, -x20 and
     * x11 - x22. */
    for (int d = 0; d < 2; d++) {
        fw t;
        fw_begin(&t, th_dtypes[d]);
        mg_tensor x = fw_in(&t, 4, S(1, 1, 3, 3), D(1, 2, 3, 4, 5, 6, 7, 8, 9));
        mg_tensor w = fw_in(&t, 4, S(1, 1, 2, 2), D(1, 0, 0, -1));
        fw_expect(&t, "conv2d valid", mg_conv2d(t.g, x, w, 1, 1, 0, 0, 1, 1, 1),
                  4, S(1, 1, 2, 2), D(-4, -4, -4, -4), 1e-6);
        fw_expect(&t, "conv2d pad 1 stride 2",
                  mg_conv2d(t.g, x, w, 2, 2, 1, 1, 1, 1, 1), 4, S(1, 1, 2, 2),
                  D(-1, -3, -7, -4), 1e-6);
        /* dilation 2: the only window is x00 - x22 = -8 */
        fw_expect(&t, "conv2d dilation 2",
                  mg_conv2d(t.g, x, w, 1, 1, 0, 0, 2, 2, 1), 4, S(1, 1, 1, 1),
                  D(-8), 1e-6);
        fw_end(&t);
    }
}
END_TEST

static const conv_case conv_cases[] = {
    {2, 3, 5, 6, 4, 3, 3, 1, 1, 0, 0, 1, 1, 1},
    {2, 4, 7, 6, 6, 3, 2, 2, 1, 1, 2, 1, 1, 2}, /* groups, asymmetric */
    {1, 3, 9, 8, 3, 3, 3, 2, 3, 2, 1, 2, 1, 3}, /* depthwise, dilated */
    {2, 2, 4, 4, 4, 1, 1, 1, 1, 0, 0, 1, 1, 1}, /* 1x1: no im2col */
    {1, 2, 5, 5, 2, 1, 1, 2, 2, 1, 0, 1, 1, 1}, /* 1x1 strided, padded */
    {1, 6, 5, 7, 4, 2, 3, 1, 2, 1, 1, 2, 2, 2}, /* everything at once */
};

START_TEST(test_conv2d_random_ref) {
    th_rng r;
    th_rng_init(&r, 31);
    for (size_t k = 0; k < sizeof conv_cases / sizeof conv_cases[0]; k++) {
        const conv_case *c = &conv_cases[k];
        const int64_t oh =
            (c->h + 2 * c->ph - c->dh * (c->kh - 1) - 1) / c->sh + 1;
        const int64_t ow =
            (c->w + 2 * c->pw - c->dw * (c->kw - 1) - 1) / c->sw + 1;
        const int64_t xs[4] = {c->n, c->c, c->h, c->w};
        const int64_t ws[4] = {c->o, c->c / c->groups, c->kh, c->kw};
        const int64_t ys[4] = {c->n, c->o, oh, ow};
        double *x = malloc(sizeof(double) * (size_t)th_numel(4, xs));
        double *w = malloc(sizeof(double) * (size_t)th_numel(4, ws));
        double *y = malloc(sizeof(double) * (size_t)th_numel(4, ys));
        double *yb = malloc(sizeof(double) * (size_t)th_numel(4, ys));
        double bias[8];
        ck_assert(x && w && y && yb);
        th_rand_vals(&r, x, th_numel(4, xs), -2, 2);
        th_rand_vals(&r, w, th_numel(4, ws), -2, 2);
        th_rand_vals(&r, bias, c->o, -2, 2);
        ref_conv(c, x, w, y, oh, ow);
        for (int64_t i = 0; i < th_numel(4, ys); i++)
            yb[i] = y[i] + bias[(i / (oh * ow)) % c->o];
        for (int d = 0; d < 2; d++) {
            char what[64];
            snprintf(what, sizeof what, "conv2d case %zu", k);
            fw t;
            fw_begin(&t, th_dtypes[d]);
            mg_tensor xt = fw_in(&t, 4, xs, x), wt = fw_in(&t, 4, ws, w);
            mg_tensor bt = fw_in(&t, 3, S(c->o, 1, 1), bias);
            mg_tensor yt = mg_conv2d(t.g, xt, wt, c->sh, c->sw, c->ph, c->pw,
                                     c->dh, c->dw, c->groups);
            fw_expect(&t, what, yt, 4, ys, y, 1e-5);
            snprintf(what, sizeof what, "conv2d case %zu + bias", k);
            fw_expect(&t, what, mg_add(t.g, yt, bt), 4, ys, yb, 1e-5);
            fw_end(&t);
        }
        free(x), free(w), free(y), free(yb);
    }
}
END_TEST

START_TEST(test_conv2d_errors) {
    th_bad_leaves l;
    th_bad_leaves_make(&l);
    mg_graph *g = l.g;
    TH_FAIL(mg_conv2d(g, l.x3, l.w, 1, 1, 0, 0, 1, 1, 1), MG_ERR_SHAPE,
            "conv2d", "x must be 4-D");
    TH_FAIL(mg_conv2d(g, l.x4, l.v3, 1, 1, 0, 0, 1, 1, 1), MG_ERR_SHAPE,
            "conv2d", "w must be 4-D");
    mg_tensor w2 = mg_param(g, "w2", MG_F32, 4, S(4, 2, 3, 3));
    TH_FAIL(mg_conv2d(g, l.x4, w2, 1, 1, 0, 0, 1, 1, 1), MG_ERR_SHAPE, "conv2d",
            "channel mismatch");
    TH_FAIL(mg_conv2d(g, l.x4, l.w, 1, 1, 0, 0, 1, 1, 2), MG_ERR_INVALID_ARG,
            "conv2d", "groups = 2");
    TH_FAIL(mg_conv2d(g, l.x4, l.w, 1, 1, 0, 0, 1, 1, 0), MG_ERR_INVALID_ARG,
            "conv2d", "groups = 0");
    TH_FAIL(mg_conv2d(g, l.x4, l.w, 0, 1, 0, 0, 1, 1, 1), MG_ERR_INVALID_ARG,
            "conv2d", "stride_h = 0");
    TH_FAIL(mg_conv2d(g, l.x4, l.w, 1, 1, 0, 0, 1, 0, 1), MG_ERR_INVALID_ARG,
            "conv2d", "dilation_w = 0");
    TH_FAIL(mg_conv2d(g, l.x4, l.w, 1, 1, -1, 0, 1, 1, 1), MG_ERR_INVALID_ARG,
            "conv2d", "pad_h = -1");
    TH_FAIL(mg_conv2d(g, l.x4, l.w, 1, 1, 0, 0, 3, 3, 1), MG_ERR_SHAPE,
            "conv2d", "does not fit");
    TH_FAIL(mg_conv2d(g, l.x4d, l.w, 1, 1, 0, 0, 1, 1, 1), MG_ERR_DTYPE,
            "conv2d", "f64");
    TH_FAIL(mg_conv2d(g, l.xi, l.w, 1, 1, 0, 0, 1, 1, 1), MG_ERR_DTYPE,
            "conv2d", "i32");
    mg_graph_free(g);
}
END_TEST

void ops_conv_tcase(Suite *s) {
    th_add_tcase(
        s, "conv", 0,
        TH_TESTS(test_conv2d_hand, test_conv2d_random_ref, test_conv2d_errors));
}
