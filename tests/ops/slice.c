/*
 * ops/slice.c - part of test_ops: forward values, in MG_F32 and MG_F64, of
 * concat, slice and pad against hand values and naive loops; bad arguments to
 * the builders.
 */
#include "../helpers.h"

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
    for (int i = 0; i < 4; i++) ys[i] = xs[i] + bf[i] + af[i];
    th_rng r;
    th_rng_init(&r, 71);
    double x[120], y[800], z[800];
    ck_assert(th_numel(4, ys) <= 800);
    th_rand_vals(&r, x, 120, -2, 2);
    int64_t n = th_numel(4, ys), k = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t ix[4], rem = i, src = 0;
        int inside = 1;
        for (int a = 3; a >= 0; a--) ix[a] = rem % ys[a], rem /= ys[a];
        for (int a = 0; a < 4; a++) {
            int64_t v = ix[a] - bf[a];
            inside &= v >= 0 && v < xs[a];
            src = src * xs[a] + v;
        }
        y[i] = inside ? x[src] : 0;
        /* slice axis 2 of y at [1, 4) */
        if (ix[2] >= 1 && ix[2] < 4) z[k++] = y[i];
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

START_TEST(test_slice_errors) {
    th_bad_leaves l;
    th_bad_leaves_make(&l);
    mg_graph *g = l.g;
    TH_FAIL(mg_concat(g, 0, &l.x4, 0), MG_ERR_INVALID_ARG, "concat",
            "at least one");
    TH_FAIL(mg_concat(g, 2, NULL, 0), MG_ERR_INVALID_ARG, "concat", "NULL");
    TH_FAIL(mg_concat(g, 2, (mg_tensor[]){l.x4, l.x3}, 1), MG_ERR_SHAPE,
            "concat", "must match except along axis 1");
    TH_FAIL(mg_concat(g, 2, (mg_tensor[]){l.x4, l.x4}, 4), MG_ERR_INVALID_ARG,
            "concat", "axis 4 is out of range");
    TH_FAIL(mg_concat(g, 2, (mg_tensor[]){l.x4, l.x4d}, 0), MG_ERR_DTYPE,
            "concat", "f64");
    TH_FAIL(mg_slice(g, l.x4, 4, 0, 1), MG_ERR_INVALID_ARG, "slice",
            "axis 4 is out of range");
    TH_FAIL(mg_slice(g, l.x4, 1, -1, 2), MG_ERR_INVALID_ARG, "slice",
            "[-1, 1) is not inside [0, 3)");
    TH_FAIL(mg_slice(g, l.x4, -1, 3, 3), MG_ERR_INVALID_ARG, "slice",
            "[3, 6) is not inside [0, 5)");
    TH_FAIL(mg_slice(g, l.x4, 0, 0, 0), MG_ERR_INVALID_ARG, "slice",
            "sizes must be >= 1");
    TH_FAIL(mg_pad(g, l.x3, S(0, -1, 0), NULL), MG_ERR_INVALID_ARG, "pad",
            "axis 1 has padding -1");
    TH_FAIL(mg_pad(g, l.xi, NULL, NULL), MG_ERR_DTYPE, "pad", "i32");
    mg_graph_free(g);
}
END_TEST

TH_PART(ops_slice_tcase, "slice", 0, test_concat_hand, test_slice_pad_hand,
        test_slice_pad_random_ref, test_slice_errors)
