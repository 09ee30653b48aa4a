/*
 * ops/reduce.c - part of test_ops: forward values, in MG_F32 and MG_F64, of
 * sum, mean and broadcast_to over axes against hand values and naive loops;
 * bad axes.
 */
#include "../helpers.h"

/* ------------------------------------------------------------------ reductions
 * x = th_iota24 of shape [2,3,4]: x[i,j,k] = 12i + 4j + k */

START_TEST(test_sum_axes) {
    for (int di = 0; di < 2; di++) {
        fw f;
        fw_begin(&f, th_dtypes[di]);
        mg_tensor x = fw_in(&f, 3, S(2, 3, 4), th_iota24);
        fw_check(&f, "sum axis 0", mg_sum(f.g, x, 1, AX(0), 0), 2, S(3, 4),
                 D(12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 34));
        fw_check(&f, "sum axis 1", mg_sum(f.g, x, 1, AX(1), 0), 2, S(2, 4),
                 D(12, 15, 18, 21, 48, 51, 54, 57));
        fw_check(&f, "sum axis -2", mg_sum(f.g, x, 1, AX(-2), 0), 2, S(2, 4),
                 D(12, 15, 18, 21, 48, 51, 54, 57));
        fw_check(&f, "sum axis -1", mg_sum(f.g, x, 1, AX(-1), 0), 2, S(2, 3),
                 D(6, 22, 38, 54, 70, 86));
        fw_check(&f, "sum axis -1 keepdims", mg_sum(f.g, x, 1, AX(-1), 1), 3,
                 S(2, 3, 1), D(6, 22, 38, 54, 70, 86));
        fw_check(&f, "sum axes {0,2}", mg_sum(f.g, x, 2, AX(0, 2), 0), 1, S(3),
                 D(60, 92, 124));
        fw_check(&f, "sum axes {0,-1} keepdims",
                 mg_sum(f.g, x, 2, AX(0, -1), 1), 3, S(1, 3, 1),
                 D(60, 92, 124));
        fw_check(&f, "sum axes {0,1}", mg_sum(f.g, x, 2, AX(0, 1), 0), 1, S(4),
                 D(60, 66, 72, 78));
        fw_check(&f, "sum all (naxes 0)", mg_sum(f.g, x, 0, NULL, 0), 0, NULL,
                 D(276));
        fw_check(&f, "sum all keepdims", mg_sum(f.g, x, 0, NULL, 1), 3,
                 S(1, 1, 1), D(276));
        fw_check(&f, "sum axes {0,1,2}", mg_sum(f.g, x, 3, AX(0, 1, 2), 0), 0,
                 NULL, D(276));
        fw_end(&f);
    }
}
END_TEST

START_TEST(test_sum_axes_unsorted) {
    for (int di = 0; di < 2; di++) {
        fw f;
        fw_begin(&f, th_dtypes[di]);
        mg_tensor x = fw_in(&f, 3, S(2, 3, 4), th_iota24);
        fw_check(&f, "sum axes {2,0} (listed out of order)",
                 mg_sum(f.g, x, 2, AX(2, 0), 0), 1, S(3), D(60, 92, 124));
        fw_check(&f, "mean axes {-1,-3} keepdims",
                 mg_mean(f.g, x, 2, AX(-1, -3), 1), 3, S(1, 3, 1),
                 D(7.5, 11.5, 15.5));
        fw_end(&f);
    }
}
END_TEST

START_TEST(test_mean_axes) {
    for (int di = 0; di < 2; di++) {
        fw f;
        fw_begin(&f, th_dtypes[di]);
        mg_tensor x = fw_in(&f, 3, S(2, 3, 4), th_iota24);
        fw_check(&f, "mean axis -1", mg_mean(f.g, x, 1, AX(-1), 0), 2, S(2, 3),
                 D(1.5, 5.5, 9.5, 13.5, 17.5, 21.5));
        fw_check(&f, "mean axis 1 keepdims", mg_mean(f.g, x, 1, AX(1), 1), 3,
                 S(2, 1, 4), D(4, 5, 6, 7, 16, 17, 18, 19));
        fw_check(&f, "mean axis 0", mg_mean(f.g, x, 1, AX(0), 0), 2, S(3, 4),
                 D(6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17));
        fw_check(&f, "mean axes {0,2}", mg_mean(f.g, x, 2, AX(0, 2), 0), 1,
                 S(3), D(7.5, 11.5, 15.5));
        fw_check(&f, "mean all", mg_mean(f.g, x, 0, NULL, 0), 0, NULL, D(11.5));
        fw_check(&f, "mean all keepdims", mg_mean(f.g, x, 0, NULL, 1), 3,
                 S(1, 1, 1), D(11.5));
        fw_end(&f);
    }
}
END_TEST

/* every axis subset of [3,5,7], keepdims 0/1, sum and mean, against a
 * naive loop */
START_TEST(test_reduce_random_ref) {
    const int64_t sh[3] = {3, 5, 7};
    double x[105], e[105];
    th_rng r;
    th_rng_init(&r, 31);
    th_rand_vals(&r, x, 105, -2, 2);
    for (int mask = 1; mask < 8; mask++)
        for (int keep = 0; keep < 2; keep++)
            for (int mean = 0; mean < 2; mean++) {
                int axes[3], na = 0, ndo = 0;
                int64_t so[3], sk[3]; /* out shape, keepdims shape */
                int64_t cnt = 1;
                for (int d = 0; d < 3; d++) {
                    if (mask & (1 << d)) {
                        /* list as negative axes for odd masks */
                        axes[na++] = (mask & 1) ? d - 3 : d;
                        sk[d] = 1;
                        cnt *= sh[d];
                        if (keep) so[ndo++] = 1;
                    } else {
                        sk[d] = sh[d];
                        so[ndo++] = sh[d];
                    }
                }
                int64_t no = th_numel(3, sk);
                for (int64_t i = 0; i < no; i++) e[i] = 0;
                for (int64_t i = 0; i < 105; i++) {
                    int64_t ix[3];
                    th_unravel(i, 3, sh, ix);
                    e[th_bcast_off(3, sk, 3, ix)] += x[i];
                }
                if (mean)
                    for (int64_t i = 0; i < no; i++) e[i] /= (double)cnt;
                for (int di = 0; di < 2; di++) {
                    char what[96];
                    snprintf(what, sizeof what,
                             "%s of [3,5,7] over axis mask %d keepdims %d",
                             mean ? "mean" : "sum", mask, keep);
                    fw f;
                    fw_begin(&f, th_dtypes[di]);
                    mg_tensor t = fw_in(&f, 3, sh, x);
                    mg_tensor y = mean ? mg_mean(f.g, t, na, axes, keep)
                                       : mg_sum(f.g, t, na, axes, keep);
                    fw_check_tol(&f, what, y, ndo, so, e, 20);
                    fw_end(&f);
                }
            }
}
END_TEST

START_TEST(test_reduce_errors) {
    mg_graph *g = mg_graph_new();
    ck_assert(g != NULL);
    mg_tensor x = mg_input(g, "x", MG_F32, 2, S(2, 3));
    ck_assert_msg(mg_sum(g, x, 1, AX(2), 0) == MG_NO_TENSOR,
                  "sum axis 2 of a 2-D tensor must fail");
    ck_assert_msg(mg_sum(g, x, 1, AX(-3), 0) == MG_NO_TENSOR,
                  "sum axis -3 of a 2-D tensor must fail");
    mg_graph_free(g);
}
END_TEST

/* ------------------------------------------------------------ broadcast_to */

START_TEST(test_broadcast_to) {
    for (int di = 0; di < 2; di++) {
        fw f;
        fw_begin(&f, th_dtypes[di]);
        mg_tensor a = fw_in(&f, 1, S(3), D(1, 2, 3));
        fw_check(&f, "broadcast_to [3]->[2,3]",
                 mg_broadcast_to(f.g, a, 2, S(2, 3)), 2, S(2, 3),
                 D(1, 2, 3, 1, 2, 3));
        mg_tensor b = fw_in(&f, 2, S(2, 1), D(1, 2));
        fw_check(&f, "broadcast_to [2,1]->[2,3]",
                 mg_broadcast_to(f.g, b, 2, S(2, 3)), 2, S(2, 3),
                 D(1, 1, 1, 2, 2, 2));
        mg_tensor c = fw_in(&f, 3, S(1, 3, 1), D(1, 2, 3));
        fw_check(&f, "broadcast_to [1,3,1]->[2,3,2]",
                 mg_broadcast_to(f.g, c, 3, S(2, 3, 2)), 3, S(2, 3, 2),
                 D(1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3));
        mg_tensor s = fw_in(&f, 0, NULL, D(7));
        fw_check(&f, "broadcast_to scalar->[2,2]",
                 mg_broadcast_to(f.g, s, 2, S(2, 2)), 2, S(2, 2),
                 D(7, 7, 7, 7));
        fw_check(&f, "broadcast_to [2,1]->[3,2,2]",
                 mg_broadcast_to(f.g, b, 3, S(3, 2, 2)), 3, S(3, 2, 2),
                 D(1, 1, 2, 2, 1, 1, 2, 2, 1, 1, 2, 2));
        ck_assert_msg(mg_broadcast_to(f.g, a, 2, S(2, 4)) == MG_NO_TENSOR,
                      "broadcast_to [3]->[2,4] must fail");
        fw_end(&f);
    }
}
END_TEST

TH_PART(ops_reduce_tcase, "reduce", 0, test_sum_axes, test_sum_axes_unsorted,
        test_mean_axes, test_reduce_random_ref, test_reduce_errors,
        test_broadcast_to)
