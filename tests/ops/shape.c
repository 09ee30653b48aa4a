/*
 * ops/shape.c - part of test_ops: forward values, in MG_F32 and MG_F64, of
 * reshape, permute, transpose and fill.
 */
#include "../helpers.h"

START_TEST(test_reshape) {
    for (int di = 0; di < 2; di++) {
        fw f;
        fw_begin(&f, th_dtypes[di]);
        mg_tensor x = fw_in(&f, 3, S(2, 3, 4), th_iota24);
        fw_check(&f, "reshape [2,3,4]->[6,4]", mg_reshape(f.g, x, 2, S(6, 4)),
                 2, S(6, 4), th_iota24);
        fw_check(&f, "reshape [2,3,4]->[24]", mg_reshape(f.g, x, 1, S(24)), 1,
                 S(24), th_iota24);
        fw_check(&f, "reshape [2,3,4]->[4,1,6]",
                 mg_reshape(f.g, x, 3, S(4, 1, 6)), 3, S(4, 1, 6), th_iota24);
        mg_tensor s = fw_in(&f, 1, S(1), D(3.5));
        fw_check(&f, "reshape [1]->scalar", mg_reshape(f.g, s, 0, NULL), 0,
                 NULL, D(3.5));
        ck_assert_msg(mg_reshape(f.g, x, 2, S(5, 5)) == MG_NO_TENSOR,
                      "reshape 24 -> 25 elements must fail");
        fw_end(&f);
    }
}
END_TEST

START_TEST(test_permute_transpose) {
    double e[24];
    for (int di = 0; di < 2; di++) {
        fw f;
        fw_begin(&f, th_dtypes[di]);
        mg_tensor x = fw_in(&f, 3, S(2, 3, 4), th_iota24);
        /* perm {2,0,1}: out[a,b,c] = x[b,c,a], out shape [4,2,3] */
        for (int a = 0; a < 4; a++)
            for (int b = 0; b < 2; b++)
                for (int c = 0; c < 3; c++)
                    e[(a * 2 + b) * 3 + c] = 12 * b + 4 * c + a;
        fw_check(&f, "permute {2,0,1}", mg_permute(f.g, x, AX(2, 0, 1)), 3,
                 S(4, 2, 3), e);
        /* perm {1,0,2}: out[a,b,c] = x[b,a,c], shape [3,2,4] */
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 2; b++)
                for (int c = 0; c < 4; c++)
                    e[(a * 2 + b) * 4 + c] = 12 * b + 4 * a + c;
        fw_check(&f, "permute {1,0,2}", mg_permute(f.g, x, AX(1, 0, 2)), 3,
                 S(3, 2, 4), e);
        fw_check(&f, "permute identity", mg_permute(f.g, x, AX(0, 1, 2)), 3,
                 S(2, 3, 4), th_iota24);
        /* transpose(0,2): out[a,b,c] = x[c,b,a], shape [4,3,2] */
        for (int a = 0; a < 4; a++)
            for (int b = 0; b < 3; b++)
                for (int c = 0; c < 2; c++)
                    e[(a * 3 + b) * 2 + c] = 12 * c + 4 * b + a;
        fw_check(&f, "transpose(0,2)", mg_transpose(f.g, x, 0, 2), 3,
                 S(4, 3, 2), e);
        mg_tensor m = fw_in(&f, 2, S(2, 3), D(1, 2, 3, 4, 5, 6));
        fw_check(&f, "transpose 2-D", mg_transpose(f.g, m, 0, 1), 2, S(3, 2),
                 D(1, 4, 2, 5, 3, 6));
        ck_assert_msg(mg_permute(f.g, x, AX(0, 0, 1)) == MG_NO_TENSOR,
                      "permute {0,0,1} must fail");
        fw_end(&f);
    }
}
END_TEST

/* 4-D permutations against a naive index loop */
START_TEST(test_permute_random_ref) {
    static const int perms[4][4] = {
        {3, 1, 0, 2}, {0, 1, 3, 2}, {3, 2, 1, 0}, {1, 3, 0, 2}};
    const int64_t sh[4] = {2, 3, 4, 5};
    double x[120], e[120];
    for (int i = 0; i < 120; i++) x[i] = i;
    for (int k = 0; k < 4; k++) {
        int64_t so[4];
        for (int d = 0; d < 4; d++) so[d] = sh[perms[k][d]];
        for (int64_t i = 0; i < 120; i++) {
            int64_t io[4], ix[4];
            th_unravel(i, 4, so, io);
            for (int d = 0; d < 4; d++) ix[perms[k][d]] = io[d];
            e[i] = x[((ix[0] * 3 + ix[1]) * 4 + ix[2]) * 5 + ix[3]];
        }
        for (int di = 0; di < 2; di++) {
            char what[64];
            snprintf(what, sizeof what, "permute {%d,%d,%d,%d} of [2,3,4,5]",
                     perms[k][0], perms[k][1], perms[k][2], perms[k][3]);
            fw f;
            fw_begin(&f, th_dtypes[di]);
            mg_tensor t = fw_in(&f, 4, sh, x);
            fw_check(&f, what, mg_permute(f.g, t, perms[k]), 4, so, e);
            fw_end(&f);
        }
    }
}
END_TEST

/* ------------------------------------------------------------------ fill */

START_TEST(test_fill) {
    for (int di = 0; di < 2; di++) {
        fw f;
        fw_begin(&f, th_dtypes[di]);
        fw_check(&f, "fill [2,3] 2.5", mg_fill(f.g, f.dt, 2, S(2, 3), 2.5), 2,
                 S(2, 3), D(2.5, 2.5, 2.5, 2.5, 2.5, 2.5));
        fw_check(&f, "fill scalar -3", mg_fill(f.g, f.dt, 0, NULL, -3.0), 0,
                 NULL, D(-3));
        fw_check(&f, "fill [4] 0", mg_fill(f.g, f.dt, 1, S(4), 0.0), 1, S(4),
                 D(0, 0, 0, 0));
        /* fill used as an operand */
        mg_tensor x = fw_in(&f, 1, S(3), D(1, 2, 3));
        mg_tensor one = mg_fill(f.g, f.dt, 1, S(3), 1.0);
        fw_check(&f, "x + fill(1)", mg_add(f.g, x, one), 1, S(3), D(2, 3, 4));
        fw_end(&f);
    }
}
END_TEST

TH_PART(ops_shape_tcase, "shape", 0, test_reshape, test_permute_transpose,
        test_permute_random_ref, test_fill)
