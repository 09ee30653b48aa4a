/*
 * ops/softmax.c - part of test_ops: forward values, in MG_F32 and MG_F64, of
 * softmax and log_softmax along every axis, with large inputs.
 */
#include "../helpers.h"

/* ------------------------------------------------------------------ softmax */

START_TEST(test_softmax_last_axis) {
    for (int di = 0; di < 2; di++) {
        fw f;
        fw_begin(&f, th_dtypes[di]);
        mg_tensor x = fw_in(&f, 2, S(2, 3), D(1, 2, 3, 1, 1, 1));
        const double *sm = D(0.09003057317038046, 0.24472847105479764,
                             0.6652409557748219, 1.0 / 3, 1.0 / 3, 1.0 / 3);
        const double *lsm =
            D(-2.4076059644443806, -1.4076059644443806, -0.4076059644443805,
              -1.0986122886681098, -1.0986122886681098, -1.0986122886681098);
        fw_check(&f, "softmax axis -1", mg_softmax(f.g, x, -1), 2, S(2, 3), sm);
        fw_check(&f, "softmax axis 1", mg_softmax(f.g, x, 1), 2, S(2, 3), sm);
        fw_check(&f, "log_softmax axis -1", mg_log_softmax(f.g, x, -1), 2,
                 S(2, 3), lsm);
        fw_check(&f, "log_softmax axis 1", mg_log_softmax(f.g, x, 1), 2,
                 S(2, 3), lsm);
        fw_end(&f);
    }
}
END_TEST

START_TEST(test_softmax_first_axis) {
    for (int di = 0; di < 2; di++) {
        fw f;
        fw_begin(&f, th_dtypes[di]);
        mg_tensor x = fw_in(&f, 2, S(2, 3), D(1, 2, 3, 1, 1, 1));
        fw_check(&f, "softmax axis 0", mg_softmax(f.g, x, 0), 2, S(2, 3),
                 D(0.5, 0.7310585786300049, 0.8807970779778823, 0.5,
                   0.2689414213699951, 0.11920292202211755));
        fw_check(
            &f, "log_softmax axis 0", mg_log_softmax(f.g, x, 0), 2, S(2, 3),
            D(-0.6931471805599453, -0.31326168751822286, -0.1269280110429725,
              -0.6931471805599453, -1.3132616875182228, -2.1269280110429727));
        fw_check(&f, "softmax axis -2", mg_softmax(f.g, x, -2), 2, S(2, 3),
                 D(0.5, 0.7310585786300049, 0.8807970779778823, 0.5,
                   0.2689414213699951, 0.11920292202211755));
        fw_end(&f);
    }
}
END_TEST

/* middle axis of [2,3,2] against the textbook formula */
START_TEST(test_softmax_middle_axis_ref) {
    th_rng r;
    th_rng_init(&r, 11);
    double x[12], sm[12], lsm[12];
    th_rand_vals(&r, x, 12, -3, 3);
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 2; k++) {
            double s = 0;
            for (int j = 0; j < 3; j++) s += exp(x[(i * 3 + j) * 2 + k]);
            for (int j = 0; j < 3; j++) {
                int idx = (i * 3 + j) * 2 + k;
                sm[idx] = exp(x[idx]) / s;
                lsm[idx] = x[idx] - log(s);
            }
        }
    for (int di = 0; di < 2; di++) {
        fw f;
        fw_begin(&f, th_dtypes[di]);
        mg_tensor t = fw_in(&f, 3, S(2, 3, 2), x);
        fw_check_tol(&f, "softmax axis 1 of [2,3,2]", mg_softmax(f.g, t, 1), 3,
                     S(2, 3, 2), sm, 2);
        fw_check_tol(&f, "log_softmax axis -2 of [2,3,2]",
                     mg_log_softmax(f.g, t, -2), 3, S(2, 3, 2), lsm, 2);
        fw_end(&f);
    }
}
END_TEST

START_TEST(test_softmax_size1_axis) {
    for (int di = 0; di < 2; di++) {
        fw f;
        fw_begin(&f, th_dtypes[di]);
        mg_tensor x = fw_in(&f, 2, S(3, 1), D(-5, 0, 7));
        fw_check(&f, "softmax over a size-1 axis", mg_softmax(f.g, x, 1), 2,
                 S(3, 1), D(1, 1, 1));
        fw_check(&f, "log_softmax over a size-1 axis",
                 mg_log_softmax(f.g, x, -1), 2, S(3, 1), D(0, 0, 0));
        fw_end(&f);
    }
}
END_TEST

START_TEST(test_softmax_large_inputs) {
    /* softmax is shift invariant; a kernel must not overflow exp(1000) */
    for (int di = 0; di < 2; di++) {
        fw f;
        fw_begin(&f, th_dtypes[di]);
        mg_tensor x = fw_in(&f, 2, S(1, 3), D(1000, 1001, 1002));
        fw_check(
            &f, "softmax of [1000,1001,1002]", mg_softmax(f.g, x, -1), 2,
            S(1, 3),
            D(0.09003057317038046, 0.24472847105479764, 0.6652409557748219));
        fw_check(
            &f, "log_softmax of [1000,1001,1002]", mg_log_softmax(f.g, x, -1),
            2, S(1, 3),
            D(-2.4076059644443806, -1.4076059644443806, -0.4076059644443805));
        fw_end(&f);
    }
}
END_TEST

TH_PART(ops_softmax_tcase, "softmax", 0, test_softmax_last_axis,
        test_softmax_first_axis, test_softmax_middle_axis_ref,
        test_softmax_size1_axis, test_softmax_large_inputs)
