/*
 * ops/pool.c - part of test_ops: forward values, in MG_F32 and MG_F64, of max
 * and average pooling (and max-pool gradient ties) against hand values and
 * naive loops, and values and gradients with each side's padding,
 * ceil_mode and count_include_pad against PyTorch's (pool_torch.h); bad
 * arguments to the builders.
 */
#include "../helpers.h"

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

/* pool_torch.h: PyTorch's values for x = POOL_TORCH_X, seed gy =
 * POOL_TORCH_GY (the formulas of tests/pool_torch_reference.py, which
 * writes the header), for each side's padding, ceil_mode and
 * count_include_pad. */
#include "pool_torch.h"
#define POOL_TORCH_X(i) ((double)(((i)*7919) % 1009) / 64.0 - 8.0)
#define POOL_TORCH_GY(j) ((double)(((j)*31) % 17 + 1) / 8.0)

START_TEST(test_pool_torch) {
    double x[400], gy[200];
    for (int i = 0; i < 400; i++) x[i] = POOL_TORCH_X(i);
    for (int j = 0; j < 200; j++) gy[j] = POOL_TORCH_GY(j);
    for (size_t k = 0; k < sizeof pool_torch_cases / sizeof pool_torch_cases[0];
         k++) {
        const pool_torch_case *c = &pool_torch_cases[k];
        const int64_t ys[4] = {c->x[0], c->x[1], c->oh, c->ow};
        ck_assert(th_numel(4, c->x) <= 400 && th_numel(4, ys) <= 200);
        const mg_pool2d_opts o = {c->kh, c->kw, c->sh, c->sw,        c->pt,
                                  c->pl, c->pb, c->pr, c->ceil_mode, c->cip};
        for (int d = 0; d < 2; d++) {
            char what[96];
            fw t;
            fw_begin(&t, th_dtypes[d]);
            mg_tensor xt = fw_in(&t, 4, c->x, x), gt = fw_in(&t, 4, ys, gy);
            mg_tensor y = c->is_max ? mg_max_pool2d_ex(t.g, xt, &o)
                                    : mg_avg_pool2d_ex(t.g, xt, &o);
            snprintf(what, sizeof what, "%s_pool2d_ex torch case %zu",
                     c->is_max ? "max" : "avg", k);
            fw_expect(&t, what, y, 4, ys, c->y, 1e-5);
            snprintf(what, sizeof what, "%s_pool2d_ex torch case %zu grad",
                     c->is_max ? "max" : "avg", k);
            fw_expect(&t, what, fw_grad(&t, y, gt, xt), 4, c->x, c->dx, 1e-5);
            fw_end(&t);
        }
    }
}
END_TEST

/* The symmetric builders are the _ex ones with PyTorch's defaults: the
 * same shape and bits. */
START_TEST(test_pool_ex_defaults) {
    fw t;
    fw_begin(&t, MG_F64);
    double xv[60];
    for (int i = 0; i < 60; i++) xv[i] = POOL_TORCH_X(i);
    mg_tensor x = fw_in(&t, 4, S(1, 2, 5, 6), xv);
    const mg_pool2d_opts o = {3, 2, 2, 1, 1, 1, 1, 1, 0, 1};
    double a[60], b[60];
    for (int avg = 0; avg < 2; avg++) {
        mg_tensor y0 = avg ? mg_avg_pool2d(t.g, x, 3, 2, 2, 1, 1, 1)
                           : mg_max_pool2d(t.g, x, 3, 2, 2, 1, 1, 1);
        mg_tensor y1 =
            avg ? mg_avg_pool2d_ex(t.g, x, &o) : mg_max_pool2d_ex(t.g, x, &o);
        TH_OK_T("pool2d", y0);
        TH_OK_T("pool2d_ex", y1);
        ck_assert_int_eq(fw_try(&t, y0, a), MG_OK);
        ck_assert_int_eq(fw_try(&t, y1, b), MG_OK);
        ck_assert(memcmp(a, b, 3 * 7 * 2 * sizeof a[0]) == 0);
    }
    fw_end(&t);
}
END_TEST

START_TEST(test_pool_errors) {
    th_bad_leaves l;
    th_bad_leaves_make(&l);
    mg_graph *g = l.g;
    TH_FAIL(mg_max_pool2d(g, l.x3, 2, 2, 2, 2, 0, 0), MG_ERR_SHAPE,
            "max_pool2d", "x must be 4-D");
    TH_FAIL(mg_avg_pool2d(g, l.x4, 0, 2, 2, 2, 0, 0), MG_ERR_INVALID_ARG,
            "avg_pool2d", "kernel_h = 0");
    TH_FAIL(mg_max_pool2d(g, l.x4, 2, 2, 2, 0, 0, 0), MG_ERR_INVALID_ARG,
            "max_pool2d", "stride_w = 0");
    TH_FAIL(mg_max_pool2d(g, l.x4, 3, 3, 1, 1, 2, 0), MG_ERR_INVALID_ARG,
            "max_pool2d", "more than half the kernel");
    TH_FAIL(mg_avg_pool2d(g, l.x4, 6, 2, 1, 1, 0, 0), MG_ERR_SHAPE,
            "avg_pool2d", "does not fit");
    TH_FAIL(mg_max_pool2d(g, l.xi, 2, 2, 2, 2, 0, 0), MG_ERR_DTYPE,
            "max_pool2d", "i32");
    /* each side's pad is at most half the kernel */
    mg_pool2d_opts o = {3, 3, 1, 1, 0, 0, 2, 0, 0, 1};
    TH_FAIL(mg_max_pool2d_ex(g, l.x4, &o), MG_ERR_INVALID_ARG, "max_pool2d",
            "pad_bottom = 2 is more than half");
    o = (mg_pool2d_opts){3, 3, 1, 1, 0, 0, 0, -1, 0, 1};
    TH_FAIL(mg_avg_pool2d_ex(g, l.x4, &o), MG_ERR_INVALID_ARG, "avg_pool2d",
            "pad_right = -1 >= 0");
    o = (mg_pool2d_opts){2, 2, 2, 2, 0, 0, 0, 0, 2, 1};
    TH_FAIL(mg_max_pool2d_ex(g, l.x4, &o), MG_ERR_INVALID_ARG, "max_pool2d",
            "ceil_mode = 2");
    o.ceil_mode = 1, o.count_include_pad = -1;
    TH_FAIL(mg_avg_pool2d_ex(g, l.x4, &o), MG_ERR_INVALID_ARG, "avg_pool2d",
            "count_include_pad = -1");
    TH_FAIL(mg_avg_pool2d_ex(g, l.x4, NULL), MG_ERR_INVALID_ARG, "avg_pool2d",
            "opts is NULL");
    mg_graph_free(g);
}
END_TEST

TH_PART(ops_pool_tcase, "pool", 0, test_pool_hand, test_max_pool_ties,
        test_pool_random_ref, test_pool_torch, test_pool_ex_defaults,
        test_pool_errors)
