/*
 * test_int64_indices.c - MG_I64 labels and indices (issue 11 item 7).
 * PyTorch and ONNX hand labels and embedding indices as int64; before
 * MG_I64 such a buffer bound to an MG_I32 tensor was read as int32 pairs,
 * so labels {1, 2} became {1, 0}, still in range and silently wrong. Here:
 * int64 values are read as they are, gradients equal the int32 path's bit
 * for bit, an out-of-range int64 index is not truncated into range, and
 * mg_bind refuses a buffer whose stated type is not the tensor's.
 */
#include "helpers.h"

#include <limits.h>

START_TEST(test_dtype_helpers) {
    ck_assert_str_eq(mg_dtype_name(MG_I64), "i64");
    ck_assert_uint_eq(mg_dtype_size(MG_I64), 8);
    ck_assert_uint_eq(mg_dtype_size((mg_dtype)99), 0);
    mg_graph *g = mg_graph_new();
    mg_tensor l = mg_input(g, "labels", MG_I64, 1, S(3));
    TH_OK_T("i64 input", l);
    ck_assert_uint_eq(mg_tensor_nbytes(g, l), 24);
    mg_dtype dt;
    ck_assert_int_eq(mg_tensor_dtype(g, l, &dt), MG_OK);
    ck_assert_int_eq(dt, MG_I64);
    /* still not a float: no fill, no gradient */
    ck_assert_int_eq(mg_fill(g, MG_I64, 1, S(3), 1.0), MG_NO_TENSOR);
    ck_assert_int_eq(mg_last_status(), MG_ERR_DTYPE);
    mg_tensor x = mg_param(g, "x", MG_F32, 2, S(3, 4));
    mg_tensor ce = mg_cross_entropy(g, x, l);
    TH_OK_T("cross_entropy with i64 labels", ce);
    mg_tensor gl;
    ck_assert_int_eq(mg_gradients(g, &ce, 1, NULL, &l, 1, NULL, &gl),
                     MG_ERR_DTYPE);
    /* a float is still no label */
    ck_assert_int_eq(mg_cross_entropy(g, x, mg_input(g, "f", MG_F32, 1, S(3))),
                     MG_NO_TENSOR);
    ck_assert_int_eq(mg_last_status(), MG_ERR_DTYPE);
    ck_assert_ptr_nonnull(strstr(mg_last_error(), "i32 or i64"));
    mg_graph_free(g);
}
END_TEST

/* Labels {1, 2} as int64 against logits [2, 3]: the loss is row 0's
 * logsumexp minus x[0][1] and row 1's minus x[1][2], averaged. Read as
 * int32 pairs they would be {1, 0}, and the loss would differ. */
START_TEST(test_labels_read_as_int64) {
    const double xv[6] = {0.5, 2.0, -1.0, 1.5, 0.25, 3.0};
    mg_graph *g = mg_graph_new();
    mg_tensor x = mg_input(g, "x", MG_F64, 2, S(2, 3));
    mg_tensor l = mg_input(g, "labels", MG_I64, 1, S(2));
    mg_tensor ce = mg_cross_entropy(g, x, l);
    TH_OK_T("cross_entropy", ce);
    int64_t lab[2] = {1, 2};
    double loss = 0;
    void *out[1] = {&loss};
    mg_binding b[2] = {{x, (void *)xv}, {l, lab}};
    TH_RUN_OK("i64 labels", g, 1, &ce, out, 2, b, 1);
    double want = 0, wrong = 0;
    const int64_t misread[2] = {1, 0};
    for (int r = 0; r < 2; r++) {
        double s = 0;
        for (int c = 0; c < 3; c++) s += exp(xv[3 * r + c]);
        want += log(s) - xv[3 * r + lab[r]];
        wrong += log(s) - xv[3 * r + misread[r]];
    }
    want /= 2;
    wrong /= 2;
    ck_assert_msg(fabs(loss - want) < 1e-12, "loss %.17g, want %.17g", loss,
                  want);
    ck_assert(fabs(want - wrong) > 0.1); /* the test can tell them apart */
    mg_graph_free(g);
}
END_TEST

/* Embedding rows picked by int64 indices of shape [2, 2]. */
START_TEST(test_embedding_reads_int64) {
    mg_graph *g = mg_graph_new();
    mg_tensor tab = mg_input(g, "table", MG_F32, 2, S(4, 3));
    mg_tensor idx = mg_input(g, "idx", MG_I64, 2, S(2, 2));
    mg_tensor y = mg_embedding(g, tab, idx);
    TH_OK_T("embedding", y);
    th_check_shape("embedding i64", g, y, 3, S(2, 2, 3));
    float tv[12];
    for (int i = 0; i < 12; i++) tv[i] = (float)(10 * (i / 3) + i % 3);
    const int64_t iv[4] = {1, 2, 3, 0};
    float got[12];
    void *out[1] = {got};
    mg_binding b[2] = {{tab, tv}, {idx, (void *)iv}};
    TH_RUN_OK("i64 indices", g, 1, &y, out, 2, b, 1);
    for (int p = 0; p < 4; p++)
        for (int j = 0; j < 3; j++)
            ck_assert_float_eq(got[3 * p + j], tv[3 * iv[p] + j]);
    mg_graph_free(g);
}
END_TEST

/* 2^32 + 1 truncated to int32 would be 1, a valid row: it must fail. */
START_TEST(test_int64_out_of_range_not_truncated) {
    mg_graph *g = mg_graph_new();
    mg_tensor tab = mg_input(g, "table", MG_F32, 2, S(4, 3));
    mg_tensor idx = mg_input(g, "idx", MG_I64, 1, S(2));
    mg_tensor y = mg_embedding(g, tab, idx);
    mg_tensor x = mg_input(g, "x", MG_F32, 2, S(2, 3));
    mg_tensor ce = mg_cross_entropy(g, x, idx);
    float tv[12] = {0}, got[6], loss;
    const int64_t iv[2] = {0, ((int64_t)1 << 32) + 1};
    void *out[1] = {got};
    mg_binding b[3] = {{tab, tv}, {idx, (void *)iv}, {x, tv}};
    ck_assert_int_eq(th_run(g, 1, &y, out, 2, b, 1), MG_ERR_INVALID_ARG);
    ck_assert_msg(strstr(th_errmsg, "index 4294967297 at position 1"), "%s",
                  th_errmsg);
    out[0] = &loss;
    ck_assert_int_eq(th_run(g, 1, &ce, out, 3, b, 1), MG_ERR_INVALID_ARG);
    ck_assert_msg(strstr(th_errmsg, "label 4294967297 at row 1"), "%s",
                  th_errmsg);
    mg_graph_free(g);
}
END_TEST

/* embedding -> matmul -> cross_entropy, with the indices and labels of one
 * dtype; writes the loss and the gradients of table and w. */
static void train_step(mg_dtype fdt, mg_dtype idt, const void *ids,
                       const void *labels, unsigned char *loss,
                       unsigned char *gtab, unsigned char *gw) {
    mg_graph *g = mg_graph_new();
    mg_tensor tab = mg_param(g, "table", fdt, 2, S(7, 5));
    mg_tensor w = mg_param(g, "w", fdt, 2, S(5, 4));
    mg_tensor idx = mg_input(g, "ids", idt, 1, S(6));
    mg_tensor lab = mg_input(g, "labels", idt, 1, S(6));
    mg_tensor ce = mg_cross_entropy(
        g, mg_matmul(g, mg_embedding(g, tab, idx), w, 0, 0), lab);
    TH_OK_T("model", ce);
    const mg_tensor xs[2] = {tab, w};
    mg_tensor gr[2];
    ck_assert_int_eq(mg_gradients(g, &ce, 1, NULL, xs, 2, NULL, gr), MG_OK);
    th_rng r;
    th_rng_init(&r, 42);
    double tv[35], wv[20];
    float tf[35], wf[20];
    th_fill_f64(&r, tv, 35, -1, 1, 0);
    th_fill_f64(&r, wv, 20, -1, 1, 0);
    for (int i = 0; i < 35; i++) tf[i] = (float)tv[i];
    for (int i = 0; i < 20; i++) wf[i] = (float)wv[i];
    const bool f32 = fdt == MG_F32;
    mg_binding b[4] = {{tab, f32 ? (void *)tf : (void *)tv},
                       {w, f32 ? (void *)wf : (void *)wv},
                       {idx, (void *)ids},
                       {lab, (void *)labels}};
    const mg_tensor outs[3] = {ce, gr[0], gr[1]};
    void *bufs[3] = {loss, gtab, gw};
    TH_RUN_OK("train step", g, 3, outs, bufs, 4, b, 1);
    mg_graph_free(g);
}

START_TEST(test_gradients_equal_int32_bitwise) {
    const int32_t ids32[6] = {3, 0, 6, 3, 1, 2}, lab32[6] = {1, 2, 0, 3, 3, 1};
    int64_t ids64[6], lab64[6];
    for (int i = 0; i < 6; i++) {
        ids64[i] = ids32[i];
        lab64[i] = lab32[i];
    }
    for (int d = 0; d < 2; d++) {
        const mg_dtype fdt = th_dtypes[d];
        const size_t es = mg_dtype_size(fdt);
        unsigned char l32[8], l64[8], t32[35 * 8], t64[35 * 8], w32[20 * 8],
            w64[20 * 8];
        train_step(fdt, MG_I32, ids32, lab32, l32, t32, w32);
        train_step(fdt, MG_I64, ids64, lab64, l64, t64, w64);
        ck_assert_msg(memcmp(l32, l64, es) == 0, "%s loss differs",
                      mg_dtype_name(fdt));
        ck_assert_msg(memcmp(t32, t64, 35 * es) == 0, "%s table grad differs",
                      mg_dtype_name(fdt));
        ck_assert_msg(memcmp(w32, w64, 20 * es) == 0, "%s w grad differs",
                      mg_dtype_name(fdt));
    }
}
END_TEST

START_TEST(test_bind_checks_dtype) {
    mg_graph *g = mg_graph_new();
    mg_tensor l32 = mg_input(g, "labels32", MG_I32, 1, S(2));
    mg_tensor l64 = mg_input(g, "labels64", MG_I64, 1, S(2));
    int64_t buf64[2] = {1, 2};
    int32_t buf32[2] = {1, 2};
    mg_binding b = {MG_NO_TENSOR, NULL};
    /* an int64 buffer for an int32 tensor, and the other way round */
    ck_assert_int_eq(mg_bind(g, l32, buf64, MG_I64, &b), MG_ERR_DTYPE);
    ck_assert_msg(strstr(mg_last_error(), "labels32") &&
                      strstr(mg_last_error(), "i32") &&
                      strstr(mg_last_error(), "i64"),
                  "%s", mg_last_error());
    ck_assert_int_eq(b.tensor, MG_NO_TENSOR); /* not written */
    ck_assert_int_eq(mg_bind(g, l64, buf32, MG_I32, &b), MG_ERR_DTYPE);
    ck_assert_msg(strstr(mg_last_error(), "labels64"), "%s", mg_last_error());
    ck_assert_int_eq(mg_bind(g, l64, buf64, MG_F64, &b), MG_ERR_DTYPE);
    ck_assert_int_eq(mg_bind(g, l64, buf64, (mg_dtype)7, &b), MG_ERR_DTYPE);
    ck_assert_int_eq(mg_bind(g, l64, NULL, MG_I64, &b), MG_ERR_INVALID_ARG);
    ck_assert_int_eq(mg_bind(g, l64, buf64, MG_I64, NULL), MG_ERR_INVALID_ARG);
    ck_assert_int_eq(mg_bind(g, 99, buf64, MG_I64, &b), MG_ERR_UNKNOWN_ID);
    ck_assert_int_eq(mg_bind(NULL, l64, buf64, MG_I64, &b), MG_ERR_INVALID_ARG);
    ck_assert_int_eq(b.tensor, MG_NO_TENSOR);
    /* matching types bind, and the binding runs */
    ck_assert_int_eq(mg_bind(g, l64, buf64, MG_I64, &b), MG_OK);
    ck_assert_int_eq(b.tensor, l64);
    ck_assert_ptr_eq(b.data, buf64);
    mg_tensor x = mg_input(g, "x", MG_F32, 2, S(2, 3));
    mg_tensor ce = mg_cross_entropy(g, x, l64);
    const float xv[6] = {0};
    float loss = 0;
    void *out[1] = {&loss};
    mg_binding bx;
    ck_assert_int_eq(mg_bind(g, x, (void *)xv, MG_F32, &bx), MG_OK);
    mg_binding bs[2] = {bx, b};
    TH_RUN_OK("bound with mg_bind", g, 1, &ce, out, 2, bs, 1);
    ck_assert_float_eq_tol(loss, logf(3.0f), 1e-6f);
    mg_graph_free(g);
}
END_TEST

TH_MAIN("int64_indices", "int64_indices", 60, test_dtype_helpers,
        test_labels_read_as_int64, test_embedding_reads_int64,
        test_int64_out_of_range_not_truncated,
        test_gradients_equal_int32_bitwise, test_bind_checks_dtype)
