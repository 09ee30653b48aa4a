/*
 * ops/attention.c - part of test_ops: forward values, in MG_F32 and MG_F64, of
 * causal_mask, attention and the small builders (global pooling, flatten)
 * against naive loops; bad arguments to the builders.
 */
#include "../helpers.h"

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
            for (int64_t j = 0; j < lk; j++) z += s[j] = exp(s[j] - m);
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

START_TEST(test_attention_errors) {
    th_bad_leaves l;
    th_bad_leaves_make(&l);
    mg_graph *g = l.g;
    mg_tensor q = mg_input(g, "q", MG_F32, 3, S(2, 3, 4));
    mg_tensor k = mg_input(g, "k", MG_F32, 3, S(2, 5, 4));
    mg_tensor v = mg_input(g, "v", MG_F32, 3, S(2, 5, 6));
    mg_tensor kbad = mg_input(g, "kbad", MG_F32, 3, S(2, 5, 3));
    mg_tensor vbad = mg_input(g, "vbad", MG_F32, 3, S(2, 4, 6));
    mg_tensor q2 = mg_input(g, "q2", MG_F32, 2, S(3, 4));
    TH_FAIL(mg_attention(g, q, kbad, v, 0, 0), MG_ERR_SHAPE, "attention",
            "do not fit");
    TH_FAIL(mg_attention(g, q, k, vbad, 1, 0), MG_ERR_SHAPE, "attention",
            "do not fit");
    TH_FAIL(mg_attention(g, q2, k, v, 0, 0), MG_ERR_SHAPE, "attention",
            "do not fit");
    TH_FAIL(mg_attention(g, q, k, v, 0, INFINITY), MG_ERR_INVALID_ARG,
            "attention", "not finite");
    TH_FAIL(mg_causal_mask(g, l.v3, -1), MG_ERR_SHAPE, "causal_mask",
            "at least 2 dims");
    TH_FAIL(mg_global_avg_pool2d(g, l.x3), MG_ERR_SHAPE, "global_avg_pool2d",
            "4-D");
    TH_FAIL(mg_flatten(g, l.x3, 3), MG_ERR_INVALID_ARG, "flatten",
            "start_axis 3");
    mg_graph_free(g);
}
END_TEST

TH_PART(ops_attention_tcase, "attention", 0, test_causal_mask_and_builders,
        test_attention_ref, test_attention_errors)
