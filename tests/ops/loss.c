/*
 * ops/loss.c - part of test_ops: forward values, in MG_F32 and MG_F64, of
 * cross_entropy and mse, with bad labels and bad arguments.
 */
#include "../helpers.h"

/* ------------------------------------------------------------------ losses */

START_TEST(test_cross_entropy) {
    /* logits [[1,2,3],[1,1,1]]
     * labels [2,0]: (lse(1,2,3) - 3 + ln3) / 2 */
    const double lse0 = 3.4076059644443806, ln3 = 1.0986122886681098;
    for (int di = 0; di < 2; di++) {
        fw f;
        fw_begin(&f, th_dtypes[di]);
        mg_tensor l = fw_in(&f, 2, S(2, 3), D(1, 2, 3, 1, 1, 1));
        mg_tensor y1 = fw_labels(&f, 2, (const int32_t[]){2, 0});
        mg_tensor y2 = fw_labels(&f, 2, (const int32_t[]){0, 1});
        fw_check(&f, "cross_entropy labels {2,0}", mg_cross_entropy(f.g, l, y1),
                 0, NULL, D(((lse0 - 3) + ln3) / 2));
        fw_check(&f, "cross_entropy labels {0,1}", mg_cross_entropy(f.g, l, y2),
                 0, NULL, D(((lse0 - 1) + ln3) / 2));
        /* large logits: must not overflow */
        mg_tensor big = fw_in(&f, 2, S(1, 3), D(1000, 1001, 1002));
        mg_tensor y3 = fw_labels(&f, 1, (const int32_t[]){1});
        fw_check(&f, "cross_entropy large logits",
                 mg_cross_entropy(f.g, big, y3), 0, NULL, D(lse0 - 2));
        fw_end(&f);
    }
}
END_TEST

START_TEST(test_cross_entropy_bad_label) {
    const int32_t bad[2][2] = {{3, 0}, {0, -1}};
    for (int k = 0; k < 2; k++) {
        mg_graph *g = mg_graph_new();
        ck_assert(g != NULL);
        float lv[6] = {1, 2, 3, 1, 1, 1};
        int32_t lab[2] = {bad[k][0], bad[k][1]};
        float out = -1;
        mg_tensor l = mg_input(g, "logits", MG_F32, 2, S(2, 3));
        mg_tensor y = mg_input(g, "labels", MG_I32, 1, S(2));
        mg_tensor ce = mg_cross_entropy(g, l, y);
        TH_OK_T("cross_entropy", ce);
        mg_binding b[2] = {{l, lv}, {y, lab}};
        void *bufs[1] = {&out};
        mg_status st = th_run(g, 1, &ce, bufs, 2, b, 0);
        mg_graph_free(g);
        ck_assert_msg(st == MG_ERR_INVALID_ARG,
                      "cross_entropy with label %d (C=3): run returned %s "
                      "(%s), expected MG_ERR_INVALID_ARG",
                      k == 0 ? 3 : -1, mg_status_str(st), th_errmsg);
    }
}
END_TEST

START_TEST(test_cross_entropy_errors) {
    mg_graph *g = mg_graph_new();
    ck_assert(g != NULL);
    mg_tensor l = mg_input(g, "logits", MG_F32, 2, S(2, 3));
    mg_tensor y3 = mg_input(g, "labels3", MG_I32, 1, S(3));
    mg_tensor yf = mg_input(g, "labelsf", MG_F32, 1, S(2));
    ck_assert_msg(mg_cross_entropy(g, l, y3) == MG_NO_TENSOR,
                  "cross_entropy logits [2,3] labels [3] must fail");
    ck_assert_msg(mg_cross_entropy(g, l, yf) == MG_NO_TENSOR,
                  "cross_entropy with float labels must fail");
    mg_graph_free(g);
}
END_TEST

START_TEST(test_mse) {
    for (int di = 0; di < 2; di++) {
        fw f;
        fw_begin(&f, th_dtypes[di]);
        mg_tensor p = fw_in(&f, 2, S(2, 2), D(1, 2, 3, 4));
        mg_tensor t = fw_in(&f, 2, S(2, 2), D(1.5, 2, 2, 6));
        /* diffs -0.5, 0, 1, -2 -> (0.25 + 0 + 1 + 4) / 4 */
        fw_check(&f, "mse", mg_mse(f.g, p, t), 0, NULL, D(1.3125));
        fw_check(&f, "mse(t,p)", mg_mse(f.g, t, p), 0, NULL, D(1.3125));
        fw_check(&f, "mse(p,p)", mg_mse(f.g, p, p), 0, NULL, D(0));
        mg_tensor q = fw_in(&f, 1, S(3), D(1, 2, 3));
        ck_assert_msg(mg_mse(f.g, p, q) == MG_NO_TENSOR,
                      "mse of [2,2] and [3] must fail");
        fw_end(&f);
    }
}
END_TEST

TH_PART(ops_loss_tcase, "loss", 0, test_cross_entropy,
        test_cross_entropy_bad_label, test_cross_entropy_errors, test_mse)
