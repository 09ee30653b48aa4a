/*
 * ops/embedding.c - part of test_ops: forward values, in MG_F32 and MG_F64, of
 * embedding and its gradient, out-of-range indices at run time; bad arguments
 * to the builder.
 */
#include "../helpers.h"

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

START_TEST(test_embedding_errors) {
    th_bad_leaves l;
    th_bad_leaves_make(&l);
    mg_graph *g = l.g;
    mg_tensor table = mg_param(g, "table", MG_F32, 2, S(10, 4));
    mg_tensor fidx = mg_input(g, "fidx", MG_F32, 1, S(3));
    mg_tensor idx = mg_input(g, "idx", MG_I32, 1, S(3));
    mg_tensor itab = mg_input(g, "itab", MG_I32, 2, S(10, 4));
    mg_tensor deep =
        mg_input(g, "deep", MG_I32, MG_MAX_DIMS, S(1, 1, 1, 1, 1, 1, 1, 2));
    TH_FAIL(mg_embedding(g, table, fidx), MG_ERR_DTYPE, "embedding",
            "indices must be i32 or i64, not f32");
    TH_FAIL(mg_embedding(g, l.x4, idx), MG_ERR_SHAPE, "embedding",
            "table must be 2-D");
    TH_FAIL(mg_embedding(g, itab, idx), MG_ERR_DTYPE, "embedding",
            "table must be f32, f64, bf16 or f16");
    TH_FAIL(mg_embedding(g, table, deep), MG_ERR_SHAPE, "embedding",
            "at most 7 dims");
    mg_graph_free(g);
}
END_TEST

TH_PART(ops_embedding_tcase, "embedding", 0, test_embedding,
        test_embedding_bad_index, test_embedding_errors)
