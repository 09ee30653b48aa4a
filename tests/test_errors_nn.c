/*
 * test_errors_nn.c - bad arguments to the network-op builders of issue 3:
 * each returns MG_NO_TENSOR with the right status and a message that names
 * the op and the problem, and a failed inner call is reported, not masked.
 */
#include "helpers.h"



/* t must be MG_NO_TENSOR with status st and a message holding both
 * needles (the op, then the reason). */
static void expect_fail(const char *what, mg_tensor t, mg_status st,
                        const char *op, const char *reason) {
    const char *msg = mg_last_error();
    ck_assert_msg(t == MG_NO_TENSOR, "%s: built tensor %d", what, (int)t);
    ck_assert_msg(mg_last_status() == st, "%s: status %s, expected %s (%s)",
                  what, mg_status_str(mg_last_status()), mg_status_str(st),
                  msg);
    ck_assert_msg(strstr(msg, op) && strstr(msg, reason),
                  "%s: message '%s' lacks '%s' or '%s'", what, msg, op, reason);
    mg_clear_error();
}

#define FAIL(call, st, op, reason) expect_fail(#call, (call), st, op, reason)

typedef struct leaves {
    mg_graph *g;
    mg_tensor x4, x3, w, x4d, xi, v3;
} leaves;

static void leaves_make(leaves *l) {
    l->g = mg_graph_new();
    ck_assert(l->g != NULL);
    l->x4 = mg_input(l->g, "x", MG_F32, 4, S(2, 3, 5, 5));
    l->x3 = mg_input(l->g, "x3", MG_F32, 3, S(3, 5, 5));
    l->w = mg_param(l->g, "w", MG_F32, 4, S(4, 3, 3, 3));
    l->x4d = mg_input(l->g, "xd", MG_F64, 4, S(2, 3, 5, 5));
    l->xi = mg_input(l->g, "xi", MG_I32, 4, S(2, 3, 5, 5));
    l->v3 = mg_param(l->g, "v3", MG_F32, 1, S(3));
}

START_TEST(test_conv2d_errors) {
    leaves l;
    leaves_make(&l);
    mg_graph *g = l.g;
    FAIL(mg_conv2d(g, l.x3, l.w, 1, 1, 0, 0, 1, 1, 1), MG_ERR_SHAPE, "conv2d",
         "x must be 4-D");
    FAIL(mg_conv2d(g, l.x4, l.v3, 1, 1, 0, 0, 1, 1, 1), MG_ERR_SHAPE, "conv2d",
         "w must be 4-D");
    mg_tensor w2 = mg_param(g, "w2", MG_F32, 4, S(4, 2, 3, 3));
    FAIL(mg_conv2d(g, l.x4, w2, 1, 1, 0, 0, 1, 1, 1), MG_ERR_SHAPE, "conv2d",
         "channel mismatch");
    FAIL(mg_conv2d(g, l.x4, l.w, 1, 1, 0, 0, 1, 1, 2), MG_ERR_INVALID_ARG,
         "conv2d", "groups = 2");
    FAIL(mg_conv2d(g, l.x4, l.w, 1, 1, 0, 0, 1, 1, 0), MG_ERR_INVALID_ARG,
         "conv2d", "groups = 0");
    FAIL(mg_conv2d(g, l.x4, l.w, 0, 1, 0, 0, 1, 1, 1), MG_ERR_INVALID_ARG,
         "conv2d", "stride_h = 0");
    FAIL(mg_conv2d(g, l.x4, l.w, 1, 1, 0, 0, 1, 0, 1), MG_ERR_INVALID_ARG,
         "conv2d", "dilation_w = 0");
    FAIL(mg_conv2d(g, l.x4, l.w, 1, 1, -1, 0, 1, 1, 1), MG_ERR_INVALID_ARG,
         "conv2d", "pad_h = -1");
    FAIL(mg_conv2d(g, l.x4, l.w, 1, 1, 0, 0, 3, 3, 1), MG_ERR_SHAPE, "conv2d",
         "does not fit");
    FAIL(mg_conv2d(g, l.x4d, l.w, 1, 1, 0, 0, 1, 1, 1), MG_ERR_DTYPE, "conv2d",
         "f64");
    FAIL(mg_conv2d(g, l.xi, l.w, 1, 1, 0, 0, 1, 1, 1), MG_ERR_DTYPE, "conv2d",
         "i32");
    mg_graph_free(g);
}
END_TEST

START_TEST(test_pool_errors) {
    leaves l;
    leaves_make(&l);
    mg_graph *g = l.g;
    FAIL(mg_max_pool2d(g, l.x3, 2, 2, 2, 2, 0, 0), MG_ERR_SHAPE, "max_pool2d",
         "x must be 4-D");
    FAIL(mg_avg_pool2d(g, l.x4, 0, 2, 2, 2, 0, 0), MG_ERR_INVALID_ARG,
         "avg_pool2d", "kernel_h = 0");
    FAIL(mg_max_pool2d(g, l.x4, 2, 2, 2, 0, 0, 0), MG_ERR_INVALID_ARG,
         "max_pool2d", "stride_w = 0");
    FAIL(mg_max_pool2d(g, l.x4, 3, 3, 1, 1, 2, 0), MG_ERR_INVALID_ARG,
         "max_pool2d", "more than half the kernel");
    FAIL(mg_avg_pool2d(g, l.x4, 6, 2, 1, 1, 0, 0), MG_ERR_SHAPE, "avg_pool2d",
         "does not fit");
    FAIL(mg_max_pool2d(g, l.xi, 2, 2, 2, 2, 0, 0), MG_ERR_DTYPE, "max_pool2d",
         "i32");
    mg_graph_free(g);
}
END_TEST

START_TEST(test_norm_errors) {
    leaves l;
    leaves_make(&l);
    mg_graph *g = l.g;
    mg_tensor v4 = mg_param(g, "v4", MG_F32, 1, S(4));
    mg_tensor v3d = mg_param(g, "v3d", MG_F64, 1, S(3));
    mg_tensor m55 = mg_param(g, "m55", MG_F32, 2, S(5, 5));
    FAIL(mg_batchnorm(g, l.v3, l.v3, l.v3, 1e-5), MG_ERR_SHAPE, "batchnorm",
         "at least 2 dims");
    FAIL(mg_batchnorm(g, l.x4, v4, l.v3, 1e-5), MG_ERR_SHAPE, "batchnorm",
         "gamma must be [3]");
    FAIL(mg_batchnorm(g, l.x4, l.v3, v3d, 1e-5), MG_ERR_DTYPE, "batchnorm",
         "beta");
    FAIL(mg_batchnorm(g, l.x4, l.v3, l.v3, -1), MG_ERR_INVALID_ARG, "batchnorm",
         "eps");
    FAIL(mg_batchnorm(g, l.x4, l.v3, l.v3, NAN), MG_ERR_INVALID_ARG,
         "batchnorm", "eps");
    FAIL(mg_layernorm(g, l.x4, m55, m55, 0, 1e-5), MG_ERR_INVALID_ARG,
         "layernorm", "n_norm_axes = 0");
    FAIL(mg_layernorm(g, l.x4, m55, m55, 5, 1e-5), MG_ERR_INVALID_ARG,
         "layernorm", "n_norm_axes = 5");
    FAIL(mg_layernorm(g, l.x4, m55, m55, 1, 1e-5), MG_ERR_SHAPE, "layernorm",
         "gamma must be [5]");
    FAIL(mg_layernorm(g, l.xi, m55, m55, 2, 1e-5), MG_ERR_DTYPE, "layernorm",
         "i32");
    mg_graph_free(g);
}
END_TEST

START_TEST(test_slice_errors) {
    leaves l;
    leaves_make(&l);
    mg_graph *g = l.g;
    FAIL(mg_concat(g, 0, &l.x4, 0), MG_ERR_INVALID_ARG, "concat",
         "at least one");
    FAIL(mg_concat(g, 2, NULL, 0), MG_ERR_INVALID_ARG, "concat", "NULL");
    FAIL(mg_concat(g, 2, (mg_tensor[]){l.x4, l.x3}, 1), MG_ERR_SHAPE, "concat",
         "must match except along axis 1");
    FAIL(mg_concat(g, 2, (mg_tensor[]){l.x4, l.x4}, 4), MG_ERR_INVALID_ARG,
         "concat", "axis 4 is out of range");
    FAIL(mg_concat(g, 2, (mg_tensor[]){l.x4, l.x4d}, 0), MG_ERR_DTYPE, "concat",
         "f64");
    FAIL(mg_slice(g, l.x4, 4, 0, 1), MG_ERR_INVALID_ARG, "slice",
         "axis 4 is out of range");
    FAIL(mg_slice(g, l.x4, 1, -1, 2), MG_ERR_INVALID_ARG, "slice",
         "[-1, 1) is not inside [0, 3)");
    FAIL(mg_slice(g, l.x4, -1, 3, 3), MG_ERR_INVALID_ARG, "slice",
         "[3, 6) is not inside [0, 5)");
    FAIL(mg_slice(g, l.x4, 0, 0, 0), MG_ERR_INVALID_ARG, "slice",
         "sizes must be >= 1");
    FAIL(mg_pad(g, l.x3, S(0, -1, 0), NULL), MG_ERR_INVALID_ARG, "pad",
         "axis 1 has padding -1");
    FAIL(mg_pad(g, l.xi, NULL, NULL), MG_ERR_DTYPE, "pad", "i32");
    mg_graph_free(g);
}
END_TEST

START_TEST(test_embedding_errors) {
    leaves l;
    leaves_make(&l);
    mg_graph *g = l.g;
    mg_tensor table = mg_param(g, "table", MG_F32, 2, S(10, 4));
    mg_tensor fidx = mg_input(g, "fidx", MG_F32, 1, S(3));
    mg_tensor idx = mg_input(g, "idx", MG_I32, 1, S(3));
    mg_tensor itab = mg_input(g, "itab", MG_I32, 2, S(10, 4));
    mg_tensor deep =
        mg_input(g, "deep", MG_I32, MG_MAX_DIMS, S(1, 1, 1, 1, 1, 1, 1, 2));
    FAIL(mg_embedding(g, table, fidx), MG_ERR_DTYPE, "embedding",
         "indices must be i32, not f32");
    FAIL(mg_embedding(g, l.x4, idx), MG_ERR_SHAPE, "embedding",
         "table must be 2-D");
    FAIL(mg_embedding(g, itab, idx), MG_ERR_DTYPE, "embedding",
         "table must be f32 or f64");
    FAIL(mg_embedding(g, table, deep), MG_ERR_SHAPE, "embedding",
         "at most 7 dims");
    mg_graph_free(g);
}
END_TEST

START_TEST(test_attention_errors) {
    leaves l;
    leaves_make(&l);
    mg_graph *g = l.g;
    mg_tensor q = mg_input(g, "q", MG_F32, 3, S(2, 3, 4));
    mg_tensor k = mg_input(g, "k", MG_F32, 3, S(2, 5, 4));
    mg_tensor v = mg_input(g, "v", MG_F32, 3, S(2, 5, 6));
    mg_tensor kbad = mg_input(g, "kbad", MG_F32, 3, S(2, 5, 3));
    mg_tensor vbad = mg_input(g, "vbad", MG_F32, 3, S(2, 4, 6));
    mg_tensor q2 = mg_input(g, "q2", MG_F32, 2, S(3, 4));
    FAIL(mg_attention(g, q, kbad, v, 0, 0), MG_ERR_SHAPE, "attention",
         "do not fit");
    FAIL(mg_attention(g, q, k, vbad, 1, 0), MG_ERR_SHAPE, "attention",
         "do not fit");
    FAIL(mg_attention(g, q2, k, v, 0, 0), MG_ERR_SHAPE, "attention",
         "do not fit");
    FAIL(mg_attention(g, q, k, v, 0, INFINITY), MG_ERR_INVALID_ARG, "attention",
         "not finite");
    FAIL(mg_causal_mask(g, l.v3, -1), MG_ERR_SHAPE, "causal_mask",
         "at least 2 dims");
    FAIL(mg_global_avg_pool2d(g, l.x3), MG_ERR_SHAPE, "global_avg_pool2d",
         "4-D");
    FAIL(mg_flatten(g, l.x3, 3), MG_ERR_INVALID_ARG, "flatten", "start_axis 3");
    mg_graph_free(g);
}
END_TEST

/* A failed inner call keeps its own message through the outer builders. */
START_TEST(test_errors_propagate) {
    leaves l;
    leaves_make(&l);
    mg_graph *g = l.g;
    mg_tensor bad = mg_conv2d(g, l.x4, l.w, 0, 1, 0, 0, 1, 1, 1);
    FAIL(mg_attention(g,
                      mg_flatten(g, mg_max_pool2d(g, bad, 2, 2, 2, 2, 0, 0), 1),
                      l.x3, l.x3, 1, 0),
         MG_ERR_INVALID_ARG, "conv2d", "stride_h = 0");
    bad = mg_slice(g, l.x4, 9, 0, 1);
    FAIL(mg_concat(g, 2, (mg_tensor[]){l.x4, bad}, 0), MG_ERR_INVALID_ARG,
         "slice", "axis 9");
    bad = mg_embedding(g, l.x4, l.x4);
    FAIL(mg_layernorm(g, mg_concat(g, 2, (mg_tensor[]){bad, l.x4}, 0), l.v3,
                      l.v3, 1, 0),
         MG_ERR_SHAPE, "embedding", "table must be 2-D");
    mg_graph_free(g);
}
END_TEST

/* The helper ops that gradients are made of have no gradients. */
START_TEST(test_no_second_order) {
    leaves l;
    leaves_make(&l);
    mg_graph *g = l.g;
    mg_tensor y = mg_conv2d(g, l.x4, l.w, 1, 1, 1, 1, 1, 1, 1);
    mg_tensor seed = mg_input(g, "seed", MG_F32, 4, S(2, 4, 5, 5));
    mg_tensor gx;
    ck_assert(mg_gradients(g, &y, 1, &seed, &l.x4, 1, NULL, &gx) == MG_OK);
    mg_tensor s = mg_sum(g, gx, 0, NULL, 0), ggw;
    mg_clear_error();
    mg_status st = mg_gradients(g, &s, 1, NULL, &l.w, 1, NULL, &ggw);
    ck_assert_msg(st == MG_ERR_NOT_DIFFERENTIABLE &&
                      strstr(mg_last_error(), "conv2d_grad_input"),
                  "second-order gradient: %s (%s)", mg_status_str(st),
                  mg_last_error());
    mg_graph_free(g);
}
END_TEST

static Suite *errors_nn_suite(void) {
    Suite *s = suite_create("errors_nn");
    TCase *tc = tcase_create("builders");
    tcase_add_test(tc, test_conv2d_errors);
    tcase_add_test(tc, test_pool_errors);
    tcase_add_test(tc, test_norm_errors);
    tcase_add_test(tc, test_slice_errors);
    tcase_add_test(tc, test_embedding_errors);
    tcase_add_test(tc, test_attention_errors);
    tcase_add_test(tc, test_errors_propagate);
    tcase_add_test(tc, test_no_second_order);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return th_run_suite(errors_nn_suite());
}
