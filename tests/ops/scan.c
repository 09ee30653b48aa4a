/*
 * ops/scan.c - part of test_ops: forward values of cumsum in MG_F32 and
 * MG_F64 along each axis of a 3-D tensor against a loop, its gradient (a
 * cumulative sum of gy from the end) against a loop, and bad arguments to
 * the builder.
 */
#include "../helpers.h"

/* y[.., k, ..] = sum over j <= k of x[.., j, ..] along axis of [2, 3, 4];
 * rev sums over j >= k instead (the gradient's direction). */
static void cumsum_ref(const double *x, int axis, int rev, double *y) {
    const int64_t sh[3] = {2, 3, 4};
    for (int64_t e = 0; e < 24; e++) {
        int64_t ix[3];
        th_unravel(e, 3, sh, ix);
        double s = 0;
        for (int64_t j = 0; j < sh[axis]; j++) {
            if (rev ? j < ix[axis] : j > ix[axis]) continue;
            int64_t jx[3] = {ix[0], ix[1], ix[2]};
            jx[axis] = j;
            s += x[(jx[0] * 3 + jx[1]) * 4 + jx[2]];
        }
        y[e] = s;
    }
}

START_TEST(test_cumsum_values) {
    double xv[24], gv[24];
    for (int i = 0; i < 24; i++) {
        xv[i] = (double)((i * 7) % 11) - 4.5;
        gv[i] = (double)((i * 5) % 13) * 0.25 - 1;
    }
    for (int d = 0; d < 2; d++)
        for (int axis = -1; axis < 3; axis++) {
            const int ax = axis < 0 ? 2 : axis;
            double y[24], dx[24];
            cumsum_ref(xv, ax, 0, y);
            cumsum_ref(gv, ax, 1, dx);
            fw f;
            fw_begin(&f, th_dtypes[d]);
            mg_tensor x = fw_in(&f, 3, S(2, 3, 4), xv);
            mg_tensor t = mg_cumsum(f.g, x, axis);
            char what[64];
            snprintf(what, sizeof what, "cumsum axis %d", axis);
            fw_check(&f, what, t, 3, S(2, 3, 4), y);
            mg_tensor g = fw_in(&f, 3, S(2, 3, 4), gv);
            snprintf(what, sizeof what, "cumsum gradient axis %d", axis);
            fw_check(&f, what, fw_grad(&f, t, g, x), 3, S(2, 3, 4), dx);
            fw_end(&f);
        }
    /* a small hand-checked case: [2, 3] along its rows */
    fw f;
    fw_begin(&f, MG_F64);
    mg_tensor x = fw_in(&f, 2, S(2, 3), D(1, 2, 3, 4, 5, 6));
    mg_tensor y = mg_cumsum(f.g, x, 1);
    fw_check(&f, "cumsum [2,3] axis 1", y, 2, S(2, 3), D(1, 3, 6, 4, 9, 15));
    mg_tensor g = fw_in(&f, 2, S(2, 3), D(1, 1, 1, 1, 2, 3));
    fw_check(&f, "cumsum [2,3] gradient", fw_grad(&f, y, g, x), 2, S(2, 3),
             D(3, 2, 1, 6, 5, 3));
    fw_end(&f);
}
END_TEST

START_TEST(test_cumsum_errors) {
    th_bad_leaves l;
    th_bad_leaves_make(&l);
    mg_tensor s = mg_input(l.g, "s", MG_F32, 0, NULL);
    TH_FAIL(mg_cumsum(l.g, l.xi, 0), MG_ERR_DTYPE, "cumsum(",
            "x must be f32, f64, bf16 or f16, not i32");
    TH_FAIL(mg_cumsum(l.g, l.x4, 4), MG_ERR_INVALID_ARG, "cumsum(",
            "axis 4 is out of range for 4 dims");
    TH_FAIL(mg_cumsum(l.g, l.x4, -5), MG_ERR_INVALID_ARG, "cumsum(",
            "axis -5 is out of range for 4 dims");
    TH_FAIL(mg_cumsum(l.g, s, 0), MG_ERR_INVALID_ARG, "cumsum(",
            "axis 0 is out of range for 0 dims");
    TH_FAIL(mg_cumsum(l.g, 9999, 0), MG_ERR_UNKNOWN_ID, "cumsum",
            "not in the graph");
    TH_FAIL(mg_cumsum(NULL, l.x4, 0), MG_ERR_INVALID_ARG, "cumsum",
            "graph is NULL");
    mg_graph_free(l.g);
}
END_TEST

TH_PART(ops_scan_tcase, "scan", 0, test_cumsum_values, test_cumsum_errors)
