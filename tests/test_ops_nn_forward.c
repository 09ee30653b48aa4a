/*
 * test_ops_nn_forward.c - forward values of the network ops of issue 3
 * (conv2d, pooling, normalisation, concat/slice/pad, embedding, causal
 * mask, attention, global pooling, flatten) against numbers worked out by
 * hand or against naive loops written here independently of the kernels,
 * in MG_F32 and MG_F64.
 */
#include "helpers.h"

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

/* ------------------------------------------------------------------ pooling */

static const double iota16[16] = {1, 2,  3,  4,  5,  6,  7,  8,
                                  9, 10, 11, 12, 13, 14, 15, 16};

START_TEST(test_pool_hand) {
    for (int d = 0; d < 2; d++) {
        fw t;
        fw_begin(&t, th_dtypes[d]);
        mg_tensor x = fw_in(&t, 4, S(1, 1, 4, 4), iota16);
        fw_expect(&t, "max_pool2d 2x2/2",
                  mg_max_pool2d(t.g, x, 2, 2, 2, 2, 0, 0), 4, S(1, 1, 2, 2),
                  D(6, 8, 14, 16), 0);
        fw_expect(&t, "avg_pool2d 2x2/2",
                  mg_avg_pool2d(t.g, x, 2, 2, 2, 2, 0, 0), 4, S(1, 1, 2, 2),
                  D(3.5, 5.5, 11.5, 13.5), 0);
        /* 1x3 windows, stride (3, 1): rows 0 and 3, columns 0..1 */
        fw_expect(&t, "max_pool2d 1x3 stride 3x1",
                  mg_max_pool2d(t.g, x, 1, 3, 3, 1, 0, 0), 4, S(1, 1, 2, 2),
                  D(3, 4, 15, 16), 0);
        /* all negative with padding: padding (0) must never win */
        mg_tensor neg =
            fw_in(&t, 4, S(1, 1, 3, 3), D(-1, -2, -3, -4, -5, -6, -7, -8, -9));
        fw_expect(&t, "max_pool2d of negatives, pad 1",
                  mg_max_pool2d(t.g, neg, 3, 3, 1, 1, 1, 1), 4, S(1, 1, 3, 3),
                  D(-1, -1, -2, -1, -1, -2, -4, -4, -5), 0);
        /* count_include_pad: a corner window of ones holds 4 of 9 */
        mg_tensor ones =
            fw_in(&t, 4, S(1, 1, 3, 3), D(1, 1, 1, 1, 1, 1, 1, 1, 1));
        fw_expect(&t, "avg_pool2d counts padding",
                  mg_avg_pool2d(t.g, ones, 3, 3, 1, 1, 1, 1), 4, S(1, 1, 3, 3),
                  D(4 / 9.0, 6 / 9.0, 4 / 9.0, 6 / 9.0, 1, 6 / 9.0, 4 / 9.0,
                    6 / 9.0, 4 / 9.0),
                  1e-6);
        fw_end(&t);
    }
}
END_TEST

/* Ties go to the first maximum in row-major window order, in the forward
 * value and in the gradient; overlapping windows add up. */
START_TEST(test_max_pool_ties) {
    for (int d = 0; d < 2; d++) {
        fw t;
        fw_begin(&t, th_dtypes[d]);
        mg_tensor x = fw_in(&t, 4, S(1, 1, 2, 4), D(1, 1, 2, 0, 1, 0, 2, 2));
        mg_tensor gy = fw_in(&t, 4, S(1, 1, 1, 2), D(10, 20));
        mg_tensor y = mg_max_pool2d(t.g, x, 2, 2, 2, 2, 0, 0);
        fw_expect(&t, "max_pool2d ties", y, 4, S(1, 1, 1, 2), D(1, 2), 0);
        fw_expect(&t, "max_pool2d_grad ties", fw_grad(&t, y, gy, x), 4,
                  S(1, 1, 2, 4), D(10, 0, 20, 0, 0, 0, 0, 0), 0);
        /* a flat row, windows of 2 with stride 1: each picks its left end */
        mg_tensor flat = fw_in(&t, 4, S(1, 1, 1, 4), D(3, 3, 3, 3));
        mg_tensor g3 = fw_in(&t, 4, S(1, 1, 1, 3), D(1, 2, 4));
        mg_tensor y3 = mg_max_pool2d(t.g, flat, 1, 2, 1, 1, 0, 0);
        fw_expect(&t, "max_pool2d_grad overlapping ties",
                  fw_grad(&t, y3, g3, flat), 4, S(1, 1, 1, 4), D(1, 2, 4, 0),
                  0);
        /* overlapping windows that share their maximum add up there */
        mg_tensor peak = fw_in(&t, 4, S(1, 1, 1, 4), D(0, 5, 1, 0));
        mg_tensor yp = mg_max_pool2d(t.g, peak, 1, 2, 1, 1, 0, 0);
        fw_expect(&t, "max_pool2d_grad shared max", fw_grad(&t, yp, g3, peak),
                  4, S(1, 1, 1, 4), D(0, 3, 4, 0), 0);
        fw_end(&t);
    }
}
END_TEST

typedef struct pool_case {
    int64_t n, c, h, w;
    int kh, kw, sh, sw, ph, pw;
} pool_case;

static void ref_pool(const pool_case *k, const double *x, double *mx,
                     double *av, int64_t oh, int64_t ow) {
    for (int64_t p = 0; p < k->n * k->c; p++, x += k->h * k->w)
        for (int64_t i = 0; i < oh; i++)
            for (int64_t j = 0; j < ow; j++) {
                double m = -INFINITY, s = 0;
                for (int a = 0; a < k->kh; a++)
                    for (int b = 0; b < k->kw; b++) {
                        int64_t iy = i * k->sh - k->ph + a;
                        int64_t ix = j * k->sw - k->pw + b;
                        if (iy < 0 || iy >= k->h || ix < 0 || ix >= k->w)
                            continue;
                        m = fmax(m, x[iy * k->w + ix]);
                        s += x[iy * k->w + ix];
                    }
                *mx++ = m;
                *av++ = s / (k->kh * k->kw);
            }
}

START_TEST(test_pool_random_ref) {
    static const pool_case cases[] = {
        {2, 3, 5, 6, 2, 2, 2, 2, 0, 0},
        {1, 2, 7, 5, 3, 2, 2, 1, 1, 1},
        {2, 1, 6, 6, 3, 3, 1, 1, 1, 1},
        {1, 2, 5, 8, 1, 4, 1, 3, 0, 2},
    };
    th_rng r;
    th_rng_init(&r, 47);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const pool_case *c = &cases[k];
        const int64_t oh = (c->h + 2 * c->ph - c->kh) / c->sh + 1;
        const int64_t ow = (c->w + 2 * c->pw - c->kw) / c->sw + 1;
        const int64_t xs[4] = {c->n, c->c, c->h, c->w},
                      ys[4] = {c->n, c->c, oh, ow};
        double x[300], mx[300], av[300];
        ck_assert(th_numel(4, xs) <= 300);
        th_rand_vals(&r, x, th_numel(4, xs), -2, 2);
        ref_pool(c, x, mx, av, oh, ow);
        for (int d = 0; d < 2; d++) {
            char what[64];
            fw t;
            fw_begin(&t, th_dtypes[d]);
            mg_tensor xt = fw_in(&t, 4, xs, x);
            snprintf(what, sizeof what, "max_pool2d case %zu", k);
            fw_expect(&t, what,
                      mg_max_pool2d(t.g, xt, c->kh, c->kw, c->sh, c->sw, c->ph,
                                    c->pw),
                      4, ys, mx, 0);
            snprintf(what, sizeof what, "avg_pool2d case %zu", k);
            fw_expect(&t, what,
                      mg_avg_pool2d(t.g, xt, c->kh, c->kw, c->sh, c->sw, c->ph,
                                    c->pw),
                      4, ys, av, 1e-6);
            fw_end(&t);
        }
    }
}
END_TEST

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
            for (int64_t c = 0; c < nc; c++)
                m += x[(a * nb + b) * nc + c];
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

/* ------------------------------------------------------------------ concat,
 * slice, pad */

START_TEST(test_concat_hand) {
    for (int d = 0; d < 2; d++) {
        fw t;
        fw_begin(&t, th_dtypes[d]);
        mg_tensor a = fw_in(&t, 2, S(2, 2), D(1, 2, 3, 4));
        mg_tensor b = fw_in(&t, 2, S(2, 1), D(9, 8));
        mg_tensor c = fw_in(&t, 2, S(1, 2), D(5, 6));
        fw_expect(&t, "concat axis 1",
                  mg_concat(t.g, 2, (mg_tensor[]){a, b}, 1), 2, S(2, 3),
                  D(1, 2, 9, 3, 4, 8), 0);
        fw_expect(&t, "concat axis 0",
                  mg_concat(t.g, 2, (mg_tensor[]){a, c}, 0), 2, S(3, 2),
                  D(1, 2, 3, 4, 5, 6), 0);
        fw_expect(&t, "concat of 4 along -1",
                  mg_concat(t.g, 4, (mg_tensor[]){b, a, b, a}, -1), 2, S(2, 6),
                  D(9, 1, 2, 9, 1, 2, 8, 3, 4, 8, 3, 4), 0);
        ck_assert(mg_concat(t.g, 1, &a, 0) == a);
        fw_end(&t);
    }
}
END_TEST

START_TEST(test_slice_pad_hand) {
    for (int d = 0; d < 2; d++) {
        fw t;
        fw_begin(&t, th_dtypes[d]);
        mg_tensor x = fw_in(&t, 2, S(2, 3), D(1, 2, 3, 4, 5, 6));
        fw_expect(&t, "slice axis 1 [1, 3)", mg_slice(t.g, x, 1, 1, 2), 2,
                  S(2, 2), D(2, 3, 5, 6), 0);
        fw_expect(&t, "slice axis -1 [2, 3)", mg_slice(t.g, x, -1, 2, 1), 2,
                  S(2, 1), D(3, 6), 0);
        fw_expect(&t, "slice axis 0 [1, 2)", mg_slice(t.g, x, 0, 1, 1), 2,
                  S(1, 3), D(4, 5, 6), 0);
        fw_expect(&t, "pad {1,0} {0,2}", mg_pad(t.g, x, S(1, 0), S(0, 2)), 2,
                  S(3, 5), D(0, 0, 0, 0, 0, 1, 2, 3, 0, 0, 4, 5, 6, 0, 0), 0);
        fw_expect(&t, "pad after only", mg_pad(t.g, x, NULL, S(1, 1)), 2,
                  S(3, 4), D(1, 2, 3, 0, 4, 5, 6, 0, 0, 0, 0, 0), 0);
        fw_end(&t);
    }
}
END_TEST

/* y = pad(x) then z = slice(y) on 4-D data, both against index loops */
START_TEST(test_slice_pad_random_ref) {
    static const int64_t xs[4] = {2, 3, 4, 5}, bf[4] = {0, 1, 2, 1},
                         af[4] = {1, 0, 1, 3};
    int64_t ys[4];
    for (int i = 0; i < 4; i++)
        ys[i] = xs[i] + bf[i] + af[i];
    th_rng r;
    th_rng_init(&r, 71);
    double x[120], y[800], z[800];
    ck_assert(th_numel(4, ys) <= 800);
    th_rand_vals(&r, x, 120, -2, 2);
    int64_t n = th_numel(4, ys), k = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t ix[4], rem = i, src = 0;
        int inside = 1;
        for (int a = 3; a >= 0; a--)
            ix[a] = rem % ys[a], rem /= ys[a];
        for (int a = 0; a < 4; a++) {
            int64_t v = ix[a] - bf[a];
            inside &= v >= 0 && v < xs[a];
            src = src * xs[a] + v;
        }
        y[i] = inside ? x[src] : 0;
        /* slice axis 2 of y at [1, 4) */
        if (ix[2] >= 1 && ix[2] < 4)
            z[k++] = y[i];
    }
    for (int d = 0; d < 2; d++) {
        fw t;
        fw_begin(&t, th_dtypes[d]);
        mg_tensor xt = fw_in(&t, 4, xs, x);
        mg_tensor yt = mg_pad(t.g, xt, bf, af);
        fw_expect(&t, "pad 4-D", yt, 4, ys, y, 0);
        fw_expect(&t, "slice of pad 4-D", mg_slice(t.g, yt, 2, 1, 3), 4,
                  S(ys[0], ys[1], 3, ys[3]), z, 0);
        fw_end(&t);
    }
}
END_TEST

/* ------------------------------------------------------------ embedding */

START_TEST(test_embedding) {
    static const double table[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    for (int d = 0; d < 2; d++) {
        fw t;
        fw_begin(&t, th_dtypes[d]);
        mg_tensor tb = fw_in(&t, 2, S(4, 3), table);
        mg_tensor idx = fw_idx(&t, 2, S(2, 2), D(3, 0, 1, 3));
        mg_tensor y = mg_embedding(t.g, tb, idx);
        fw_expect(&t, "embedding [2,2] of [4,3]", y, 3, S(2, 2, 3),
                  D(10, 11, 12, 1, 2, 3, 4, 5, 6, 10, 11, 12), 0);
        /* row 3 is picked twice: its gradient is the sum of both rows */
        mg_tensor gy =
            fw_in(&t, 3, S(2, 2, 3), D(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 20, 30));
        fw_expect(&t, "embedding_grad with a repeated index",
                  fw_grad(&t, y, gy, tb), 2, S(4, 3),
                  D(4, 5, 6, 7, 8, 9, 0, 0, 0, 11, 22, 33), 0);
        mg_tensor one = fw_idx(&t, 0, NULL, D(2));
        fw_expect(&t, "embedding of a scalar index", mg_embedding(t.g, tb, one),
                  1, S(3), D(7, 8, 9), 0);
        fw_end(&t);
    }
}
END_TEST

START_TEST(test_embedding_bad_index) {
    static const double bad[2][3] = {{0, 4, 1}, {2, -1, 0}};
    for (int k = 0; k < 2; k++) {
        fw t;
        fw_begin(&t, MG_F32);
        mg_tensor tb = fw_in(&t, 2, S(4, 2), D(1, 2, 3, 4, 5, 6, 7, 8));
        mg_tensor idx = fw_idx(&t, 1, S(3), bad[k]);
        double got[6];
        mg_status st = fw_try(&t, mg_embedding(t.g, tb, idx), got);
        char want[64];
        snprintf(want, sizeof want, "index %d at position 1 is outside [0, 4)",
                 (int)bad[k][1]);
        ck_assert_msg(st == MG_ERR_INVALID_ARG && strstr(th_errmsg, want) &&
                          strstr(th_errmsg, "embedding"),
                      "embedding with index %d: %s (%s)", (int)bad[k][1],
                      mg_status_str(st), th_errmsg);
        fw_end(&t);
    }
}
END_TEST

/* ------------------------------------------------------------------ attention
 * and the small builders */

START_TEST(test_causal_mask_and_builders) {
    for (int d = 0; d < 2; d++) {
        fw t;
        fw_begin(&t, th_dtypes[d]);
        mg_tensor x =
            fw_in(&t, 3, S(2, 2, 3), D(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12));
        fw_expect(&t, "causal_mask [2,2,3]", mg_causal_mask(t.g, x, -7), 3,
                  S(2, 2, 3), D(1, -7, -7, 4, 5, -7, 7, -7, -7, 10, 11, -7), 0);
        mg_tensor im = fw_in(&t, 4, S(1, 2, 2, 2), D(1, 2, 3, 4, 5, 7, 9, 11));
        fw_expect(&t, "global_avg_pool2d", mg_global_avg_pool2d(t.g, im), 2,
                  S(1, 2), D(2.5, 8), 0);
        fw_expect(&t, "flatten from 1", mg_flatten(t.g, im, 1), 2, S(1, 8),
                  D(1, 2, 3, 4, 5, 7, 9, 11), 0);
        fw_expect(&t, "flatten from -2", mg_flatten(t.g, x, -2), 2, S(2, 6),
                  D(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12), 0);
        fw_end(&t);
    }
}
END_TEST

/* softmax(q k^T * scale, masked) v per batch entry, by loops */
static void ref_attention(const double *q, const double *k, const double *v,
                          double *y, int64_t batch, int64_t lq, int64_t lk,
                          int64_t dk, int64_t dv, int causal, double scale) {
    for (int64_t b = 0; b < batch; b++)
        for (int64_t i = 0; i < lq; i++) {
            double s[16], m = -INFINITY, z = 0;
            for (int64_t j = 0; j < lk; j++) {
                s[j] = 0;
                for (int64_t e = 0; e < dk; e++)
                    s[j] += q[(b * lq + i) * dk + e] * k[(b * lk + j) * dk + e];
                s[j] = causal && j > i ? -INFINITY : s[j] * scale;
                m = fmax(m, s[j]);
            }
            for (int64_t j = 0; j < lk; j++)
                z += s[j] = exp(s[j] - m);
            for (int64_t e = 0; e < dv; e++) {
                double acc = 0;
                for (int64_t j = 0; j < lk; j++)
                    acc += s[j] / z * v[(b * lk + j) * dv + e];
                y[(b * lq + i) * dv + e] = acc;
            }
        }
}

START_TEST(test_attention_ref) {
    th_rng r;
    th_rng_init(&r, 83);
    double q[48], k[80], v[60], y[48];
    th_rand_vals(&r, q, 48, -2, 2);
    th_rand_vals(&r, k, 80, -2, 2);
    th_rand_vals(&r, v, 60, -2, 2);
    for (int causal = 0; causal < 2; causal++)
        for (int d = 0; d < 2; d++) {
            char what[64];
            fw t;
            fw_begin(&t, th_dtypes[d]);
            /* [2 batch, 2 heads] x Lq 3, Lk 5, d 4, dv 3; scale 0 = 1/2 */
            mg_tensor qt = fw_in(&t, 4, S(2, 2, 3, 4), q);
            mg_tensor kt = fw_in(&t, 4, S(2, 2, 5, 4), k);
            mg_tensor vt = fw_in(&t, 4, S(2, 2, 5, 3), v);
            ref_attention(q, k, v, y, 4, 3, 5, 4, 3, causal, 0.5);
            snprintf(what, sizeof what, "attention causal=%d", causal);
            fw_expect(&t, what, mg_attention(t.g, qt, kt, vt, causal, 0), 4,
                      S(2, 2, 3, 3), y, 1e-5);
            /* self-attention of one sequence, explicit scale */
            mg_tensor st = fw_in(&t, 2, S(4, 3), q);
            ref_attention(q, q, q, y, 1, 4, 4, 3, 3, causal, 0.3);
            snprintf(what, sizeof what, "self-attention causal=%d", causal);
            fw_expect(&t, what, mg_attention(t.g, st, st, st, causal, 0.3), 2,
                      S(4, 3), y, 1e-5);
            fw_end(&t);
        }
}
END_TEST

/* ------------------------------------------------------------------ suite */

static Suite *nn_forward_suite(void) {
    Suite *s = suite_create("ops_nn_forward");
    TCase *tc = tcase_create("conv2d");
    tcase_add_test(tc, test_conv2d_hand);
    tcase_add_test(tc, test_conv2d_random_ref);
    suite_add_tcase(s, tc);

    tc = tcase_create("pool");
    tcase_add_test(tc, test_pool_hand);
    tcase_add_test(tc, test_max_pool_ties);
    tcase_add_test(tc, test_pool_random_ref);
    suite_add_tcase(s, tc);

    tc = tcase_create("norm");
    tcase_add_test(tc, test_norm_hand);
    tcase_add_test(tc, test_norm_random_ref);
    suite_add_tcase(s, tc);

    tc = tcase_create("slice");
    tcase_add_test(tc, test_concat_hand);
    tcase_add_test(tc, test_slice_pad_hand);
    tcase_add_test(tc, test_slice_pad_random_ref);
    suite_add_tcase(s, tc);

    tc = tcase_create("embedding");
    tcase_add_test(tc, test_embedding);
    tcase_add_test(tc, test_embedding_bad_index);
    suite_add_tcase(s, tc);

    tc = tcase_create("attention");
    tcase_add_test(tc, test_causal_mask_and_builders);
    tcase_add_test(tc, test_attention_ref);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return th_run_suite(nn_forward_suite());
}
