/*
 * test_errors.c - every class of bad input gets a status and a message
 * naming the op or tensor: NULL, unknown ids, wrong shapes, wrong dtypes,
 * cycles, unbound leaves, allocation failure, bad checkpoints, bad
 * gradients requests, second-order gradients; a failed inner builder call
 * keeps its message through the outer ones. Nothing crashes, aborts, leaks
 * (ASan runs this) or writes into the caller's memory. The argument checks
 * of each op's builder are tested with the op, in tests/ops/.
 */
#include "graph/graph.h"
#include "helpers.h"
#include "memgrad_dlpack.h"
#include "memgrad_observe.h"

#include <pthread.h>

#define EXPECT_ERR(call, status, needle)                                       \
    do {                                                                       \
        mg_clear_error();                                                      \
        mg_status s_ = (call);                                                 \
        ck_assert_msg(s_ == (status), "%s: got %s (%s), expected %s", #call,   \
                      mg_status_str(s_), mg_last_error(),                      \
                      mg_status_str(status));                                  \
        ck_assert_msg(strstr(mg_last_error(), (needle)) != NULL,               \
                      "%s: message '%s' does not mention '%s'", #call,         \
                      mg_last_error(), (needle));                              \
    } while (0)

#define EXPECT_NO_TENSOR(call, needle)                                         \
    do {                                                                       \
        mg_clear_error();                                                      \
        mg_tensor t_ = (call);                                                 \
        ck_assert_msg(t_ == MG_NO_TENSOR, "%s: expected MG_NO_TENSOR", #call); \
        ck_assert_msg(strstr(mg_last_error(), (needle)) != NULL,               \
                      "%s: message '%s' does not mention '%s'", #call,         \
                      mg_last_error(), (needle));                              \
    } while (0)

static const int64_t s23[2] = {2, 3}, s45[2] = {4, 5}, s3[1] = {3};

START_TEST(test_null_arguments) {
    EXPECT_NO_TENSOR(mg_input(NULL, "x", MG_F32, 1, s3), "NULL");
    EXPECT_NO_TENSOR(mg_relu(NULL, 0), "NULL");
    EXPECT_ERR(mg_plan_compile(NULL, NULL, 0, NULL, NULL), MG_ERR_INVALID_ARG,
               "NULL");
    mg_tensor grads[1];
    EXPECT_ERR(mg_gradients(NULL, NULL, 0, NULL, NULL, 0, NULL, grads),
               MG_ERR_INVALID_ARG, "NULL");
    EXPECT_ERR(mg_exec_new(NULL, NULL), MG_ERR_INVALID_ARG, "NULL");
    EXPECT_ERR(mg_exec_run(NULL, NULL, NULL, 0, 0), MG_ERR_INVALID_ARG, "NULL");
    EXPECT_ERR(mg_graph_dump(NULL, stdout), MG_ERR_INVALID_ARG, "NULL");
    EXPECT_ERR(mg_tensor_shape(NULL, 0, NULL, NULL), MG_ERR_INVALID_ARG,
               "NULL");
    mg_graph *g = mg_graph_new();
    mg_tensor x = mg_input(g, "x", MG_F32, 1, s3);
    mg_tensor y = mg_sum(g, x, 0, NULL, 0);
    EXPECT_ERR(mg_gradients(g, &y, 1, NULL, &x, 1, NULL, NULL),
               MG_ERR_INVALID_ARG, "grads_out");
    EXPECT_NO_TENSOR(mg_input(g, "bad", MG_F32, 2, NULL), "bad");
    mg_plan *p = NULL;
    ck_assert(mg_plan_compile(g, &y, 1, NULL, &p) == MG_OK);
    mg_exec *ex = NULL;
    ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
    mg_binding b = {x, NULL};
    EXPECT_ERR(mg_exec_run(ex, p, &b, 1, 0), MG_ERR_INVALID_ARG, "'x'");
    EXPECT_ERR(mg_exec_run(ex, p, NULL, 1, 0), MG_ERR_INVALID_ARG, "NULL");
    mg_graph_free(NULL); /* accepted */
    mg_plan_free(NULL);
    mg_exec_free(NULL);
    mg_exec_free(ex);
    mg_plan_free(p);
    mg_graph_free(g);
}
END_TEST

/* The calls of the two-phase run, DLPack, observers, hooks, the profiler and
 * the timeline refuse NULL with a status and a message naming the call;
 * the accessors that cannot return a status return 0 or -1. */
START_TEST(test_null_arguments_run_and_observe) {
    mg_binding b;
    mg_saved *sv = NULL;
    mg_phase_peaks pk;
    DLManagedTensor *dm = NULL;
    const void *d = NULL;
    EXPECT_ERR(mg_exec_forward(NULL, NULL, NULL, 0, 0, &sv), MG_ERR_INVALID_ARG,
               "mg_exec_forward");
    ck_assert(sv == NULL);
    EXPECT_ERR(mg_exec_backward(NULL, NULL, NULL, NULL, 0), MG_ERR_INVALID_ARG,
               "mg_exec_backward");
    EXPECT_ERR(mg_saved_tensor_data(NULL, 0, &d), MG_ERR_INVALID_ARG,
               "mg_saved_tensor_data");
    ck_assert_uint_eq(mg_saved_bytes(NULL), 0);
    mg_saved_free(NULL); /* accepted */
    EXPECT_ERR(mg_plan_phase_peaks(NULL, NULL, 0, &pk), MG_ERR_INVALID_ARG,
               "mg_plan_phase_peaks");
    EXPECT_ERR(mg_dlpack_bind(NULL, NULL, 0, NULL, &b), MG_ERR_INVALID_ARG,
               "mg_dlpack_bind");
    EXPECT_ERR(mg_dlpack_bind_managed(NULL, NULL, 0, NULL, &b),
               MG_ERR_INVALID_ARG, "mg_dlpack_bind_managed");
    EXPECT_ERR(mg_exec_export(NULL, 0, &dm), MG_ERR_INVALID_ARG,
               "mg_exec_export");
    ck_assert(dm == NULL);
    EXPECT_ERR(mg_exec_observer_attach(NULL, NULL, NULL), MG_ERR_INVALID_ARG,
               "mg_exec_observer_attach");
    EXPECT_ERR(mg_exec_observer_detach(NULL, 0), MG_ERR_INVALID_ARG,
               "mg_exec_observer_detach");
    EXPECT_ERR(mg_tensor_add_hook(NULL, 0, NULL, NULL, NULL),
               MG_ERR_INVALID_ARG, "mg_tensor_add_hook");
    EXPECT_ERR(mg_tensor_remove_hook(NULL, 0), MG_ERR_INVALID_ARG,
               "mg_tensor_remove_hook");
    EXPECT_ERR(mg_profiler_new(NULL), MG_ERR_INVALID_ARG, "mg_profiler_new");
    EXPECT_ERR(mg_profiler_write_trace(NULL, stdout), MG_ERR_INVALID_ARG,
               "mg_profiler_write_trace");
    EXPECT_ERR(mg_profiler_print(NULL, stdout), MG_ERR_INVALID_ARG,
               "mg_profiler_print");
    ck_assert_int_eq(mg_profiler_num_events(NULL), 0);
    mg_profiler_reset(NULL); /* accepted */
    mg_profiler_free(NULL);
    EXPECT_ERR(mg_plan_write_timeline(NULL, NULL, 0, NULL, stdout),
               MG_ERR_INVALID_ARG, "mg_plan_write_timeline");
    mg_clear_error();
    ck_assert_int_eq(mg_plan_timeline(NULL, NULL, 0, NULL, 0), -1);
    ck_assert(strstr(mg_last_error(), "mg_plan_timeline") != NULL);
    ck_assert_str_eq(mg_phase_name((mg_phase)77), "?");

    /* The observer of a NULL profiler stops the run with a message instead
     * of dereferencing NULL in its callbacks. */
    mg_graph *g = mg_graph_new();
    mg_tensor x = mg_input(g, "x", MG_F32, 1, s3);
    mg_tensor y = mg_sum(g, mg_relu(g, x), 0, NULL, 0);
    mg_plan *p = NULL;
    ck_assert(mg_plan_compile(g, &y, 1, NULL, &p) == MG_OK);
    mg_exec *ex = NULL;
    ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
    mg_observer o = mg_profiler_observer(NULL);
    ck_assert(mg_exec_observer_attach(ex, &o, NULL) == MG_OK);
    float xv[3] = {1, -2, 3}, yv = -1;
    mg_binding bs[2] = {{x, xv}, {y, &yv}};
    EXPECT_ERR(mg_exec_run(ex, p, bs, 2, 0), MG_ERR_INVALID_ARG, "profiler");
    ck_assert(yv == -1.0f);
    mg_exec_free(ex);
    mg_plan_free(p);
    mg_graph_free(g);
}
END_TEST

START_TEST(test_unknown_ids) {
    mg_graph *g = mg_graph_new();
    mg_tensor x = mg_input(g, "x", MG_F32, 1, s3);
    EXPECT_NO_TENSOR(mg_relu(g, 42), "42");
    EXPECT_NO_TENSOR(mg_add(g, x, -7), "-7");
    EXPECT_ERR(mg_tensor_set_name(g, 99, "n"), MG_ERR_UNKNOWN_ID, "99");
    mg_tensor out = 1000, grads[1];
    mg_plan *p = NULL;
    EXPECT_ERR(mg_plan_compile(g, &out, 1, NULL, &p), MG_ERR_UNKNOWN_ID,
               "1000");
    ck_assert_ptr_null(p);
    mg_tensor y = mg_sum(g, x, 0, NULL, 0);
    EXPECT_ERR(mg_gradients(g, &y, 1, NULL, &out, 1, NULL, grads),
               MG_ERR_UNKNOWN_ID, "1000");
    EXPECT_ERR(mg_gradients(g, &out, 1, NULL, &x, 1, NULL, grads),
               MG_ERR_UNKNOWN_ID, "1000");
    ck_assert(mg_plan_compile(g, &y, 1, NULL, &p) == MG_OK);
    mg_exec *ex = NULL;
    ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
    float xv[3] = {1, 2, 3};
    mg_binding b[2] = {{x, xv}, {555, xv}};
    EXPECT_ERR(mg_exec_run(ex, p, b, 2, 0), MG_ERR_UNKNOWN_ID, "555");
    const void *d = NULL;
    EXPECT_ERR(mg_exec_tensor_data(ex, 3, &d), MG_ERR_UNKNOWN_ID, "3");
    ck_assert_int_eq(mg_tensor_find(g, "nope"), MG_NO_TENSOR);
    ck_assert_int_eq(mg_tensor_find(g, "x"), x);
    mg_exec_free(ex);
    mg_plan_free(p);
    mg_graph_free(g);
}
END_TEST

START_TEST(test_shapes) {
    mg_graph *g = mg_graph_new();
    mg_tensor a = mg_input(g, "a", MG_F32, 2, s23);
    mg_tensor w = mg_param(g, "w", MG_F32, 2, s45);
    int n0 = mg_graph_num_tensors(g);
    EXPECT_NO_TENSOR(mg_matmul(g, a, w, 0, 0), "'w'");
    ck_assert_msg(strstr(mg_last_error(), "matmul") &&
                      strstr(mg_last_error(), "[2,3]") &&
                      strstr(mg_last_error(), "[4,5]"),
                  "%s", mg_last_error());
    EXPECT_NO_TENSOR(mg_add(g, a, w), "add");
    int64_t bad[2] = {3, 3};
    EXPECT_NO_TENSOR(mg_reshape(g, a, 2, bad), "reshape");
    int64_t zero[1] = {0};
    EXPECT_NO_TENSOR(mg_input(g, "z", MG_F32, 1, zero), "'z'");
    EXPECT_NO_TENSOR(mg_input(g, "deep", MG_F32, MG_MAX_DIMS + 1, s23),
                     "'deep'");
    int axes[1] = {5};
    EXPECT_NO_TENSOR(mg_sum(g, a, 1, axes, 0), "sum");
    int perm[2] = {0, 0};
    EXPECT_NO_TENSOR(mg_permute(g, a, perm), "permute");
    EXPECT_NO_TENSOR(mg_dropout(g, a, 1.5, 0), "dropout");
    /* The status of a failed builder can be read back. */
    mg_clear_error();
    ck_assert_int_eq(mg_last_status(), MG_OK);
    ck_assert_int_eq(mg_matmul(g, a, w, 0, 0), MG_NO_TENSOR);
    ck_assert_int_eq(mg_last_status(), MG_ERR_SHAPE);
    /* An error inside a nested call is reported once, not as a cascade. */
    mg_clear_error();
    ck_assert_int_eq(mg_relu(g, mg_matmul(g, a, w, 0, 0)), MG_NO_TENSOR);
    ck_assert_msg(strstr(mg_last_error(), "matmul") != NULL, "%s",
                  mg_last_error());
    ck_assert_int_eq(mg_graph_num_tensors(g), n0);
    mg_graph_free(g);
}
END_TEST

START_TEST(test_dtypes) {
    mg_graph *g = mg_graph_new();
    mg_tensor a = mg_input(g, "a", MG_F32, 1, s3);
    mg_tensor b = mg_input(g, "b", MG_F64, 1, s3);
    mg_tensor l = mg_input(g, "labels", MG_I32, 1, s3);
    EXPECT_NO_TENSOR(mg_add(g, a, b), "'b'");
    EXPECT_NO_TENSOR(mg_relu(g, l), "'labels'");
    EXPECT_NO_TENSOR(mg_input(g, "q", (mg_dtype)17, 1, s3), "'q'");
    int64_t ls[2] = {3, 4};
    mg_tensor logits = mg_input(g, "logits", MG_F32, 2, ls);
    EXPECT_NO_TENSOR(mg_cross_entropy(g, logits, a), "cross_entropy");
    mg_tensor ce = mg_cross_entropy(g, logits, l);
    TH_OK_T("ce", ce);
    mg_tensor grads[1];
    EXPECT_ERR(mg_gradients(g, &ce, 1, NULL, &l, 1, NULL, grads), MG_ERR_DTYPE,
               "'labels'");
    mg_graph_free(g);
}
END_TEST

START_TEST(test_gradient_requests) {
    mg_graph *g = mg_graph_new();
    mg_tensor x = mg_param(g, "x", MG_F64, 2, s23);
    mg_tensor y = mg_tanh(g, x);
    mg_tensor grads[2];
    int n0 = mg_graph_num_tensors(g);
    EXPECT_ERR(mg_gradients(g, &y, 1, NULL, &x, 1, NULL, grads), MG_ERR_SHAPE,
               "seed");
    mg_tensor wrong_seed = mg_input(g, "seed", MG_F64, 1, s3);
    n0 = mg_graph_num_tensors(g);
    EXPECT_ERR(mg_gradients(g, &y, 1, &wrong_seed, &x, 1, NULL, grads),
               MG_ERR_SHAPE, "'seed'");
    ck_assert_int_eq(mg_graph_num_tensors(g), n0);
    mg_tensor L = mg_sum(g, y, 0, NULL, 0);
    EXPECT_ERR(mg_gradients(g, &L, 0, NULL, &x, 1, NULL, grads),
               MG_ERR_INVALID_ARG, "y");
    EXPECT_ERR(mg_gradients(g, &L, 1, NULL, &x, 0, NULL, grads),
               MG_ERR_INVALID_ARG, "x");
    /* second order through a backward helper op has no rule */
    mg_tensor gx;
    ck_assert(mg_gradients(g, &L, 1, NULL, &x, 1, NULL, &gx) == MG_OK);
    mg_tensor L2 = mg_sum(g, gx, 0, NULL, 0);
    n0 = mg_graph_num_tensors(g);
    EXPECT_ERR(mg_gradients(g, &L2, 1, NULL, &x, 1, NULL, grads),
               MG_ERR_NOT_DIFFERENTIABLE, "tanh_grad");
    ck_assert_int_eq(mg_graph_num_tensors(g), n0); /* graph left as it was */
    mg_graph_free(g);
}
END_TEST

START_TEST(test_checkpoint_arguments) {
    mg_graph *g = mg_graph_new();
    mg_tensor x = mg_param(g, "x", MG_F64, 1, s3);
    mg_tensor h = mg_tanh(g, x);
    mg_tensor L = mg_sum(g, h, 0, NULL, 0);
    mg_tensor gx;
    mg_tensor outside = 77;
    mg_checkpoints c1 = {
        .policy = MG_CKPT_COLLECTION, .tensors = &outside, .n_tensors = 1};
    EXPECT_ERR(mg_gradients(g, &L, 1, NULL, &x, 1, &c1, &gx), MG_ERR_UNKNOWN_ID,
               "77");
    mg_checkpoints c2 = {
        .policy = MG_CKPT_COLLECTION, .tensors = NULL, .n_tensors = 2};
    EXPECT_ERR(mg_gradients(g, &L, 1, NULL, &x, 1, &c2, &gx),
               MG_ERR_INVALID_ARG, "collection");
    mg_checkpoints c3 = {
        .policy = (mg_ckpt_policy)9, .tensors = NULL, .n_tensors = 0};
    EXPECT_ERR(mg_gradients(g, &L, 1, NULL, &x, 1, &c3, &gx),
               MG_ERR_INVALID_ARG, "policy");
    mg_graph_free(g);
}
END_TEST

/* Rewiring can reorder (handled through igraph's topological sort) or make
 * a cycle (reported, never an abort). */
START_TEST(test_cycles_and_rewiring) {
    mg_graph *g = mg_graph_new();
    mg_tensor x = mg_input(g, "x", MG_F64, 1, s3);
    mg_tensor a = mg_neg(g, x);        /* will read c instead of x */
    mg_tensor c = mg_scale(g, x, 2.0); /* created after a */
    mg_tensor d = mg_exp(g, a);
    ck_assert(mg_tensor_set_input(g, a, 0, c) == MG_OK);
    double xv[3] = {0.5, -1, 2}, dv[3];
    mg_binding in = {x, xv};
    void *bufs[1] = {dv};
    TH_RUN_OK("rewired", g, 1, &d, bufs, 1, &in, 0);
    for (int i = 0; i < 3; i++)
        ck_assert_msg(fabs(dv[i] - exp(-2 * xv[i])) < 1e-12, "d[%d] = %g", i,
                      dv[i]);
    EXPECT_ERR(mg_tensor_set_input(g, a, 3, c), MG_ERR_INVALID_ARG, "slot");
    mg_tensor wrong = mg_input(g, "wrong", MG_F64, 2, s23);
    EXPECT_ERR(mg_tensor_set_input(g, a, 0, wrong), MG_ERR_SHAPE, "neg");
    /* c = scale(d): c -> a -> d -> c */
    ck_assert(mg_tensor_set_input(g, c, 0, d) == MG_OK);
    mg_plan *p = NULL;
    EXPECT_ERR(mg_plan_compile(g, &d, 1, NULL, &p), MG_ERR_CYCLE, "cycle");
    ck_assert_msg(strstr(mg_last_error(), "#") != NULL, "%s", mg_last_error());
    ck_assert_ptr_null(p);
    mg_tensor L = mg_sum(g, d, 0, NULL, 0), gx;
    EXPECT_ERR(mg_gradients(g, &L, 1, NULL, &x, 1, NULL, &gx), MG_ERR_CYCLE,
               "cycle");
    /* a self-loop */
    mg_tensor e = mg_neg(g, x);
    ck_assert(mg_tensor_set_input(g, e, 0, e) == MG_OK);
    EXPECT_ERR(mg_plan_compile(g, &e, 1, NULL, &p), MG_ERR_CYCLE, "cycle");
    mg_graph_free(g);
}
END_TEST

START_TEST(test_unbound_and_aliasing) {
    mg_graph *g = mg_graph_new();
    mg_tensor x = mg_input(g, "x", MG_F32, 1, s3);
    mg_tensor w = mg_param(g, "w", MG_F32, 1, s3);
    mg_tensor y = mg_mul(g, x, w);
    mg_tensor mid = mg_exp(g, y);
    mg_tensor z = mg_relu(g, mid);
    mg_plan *p = NULL;
    ck_assert(mg_plan_compile(g, &z, 1, NULL, &p) == MG_OK);
    mg_exec *ex = NULL;
    ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
    float xv[3] = {1, 2, 3}, wv[3] = {1, 1, 1}, zv[3];
    mg_binding b1[1] = {{x, xv}};
    EXPECT_ERR(mg_exec_run(ex, p, b1, 1, 0), MG_ERR_UNBOUND, "'w'");
    mg_binding b2[3] = {{x, xv}, {w, wv}, {z, xv}};
    EXPECT_ERR(mg_exec_run(ex, p, b2, 3, 0), MG_ERR_INVALID_ARG, "overlaps");
    ck_assert(xv[0] == 1 && xv[1] == 2 && xv[2] == 3);
    mg_binding b3[3] = {{x, xv}, {w, wv}, {mid, zv}};
    EXPECT_ERR(mg_exec_run(ex, p, b3, 3, 0), MG_ERR_INVALID_ARG,
               "intermediate");
    mg_binding b4[3] = {{x, xv}, {w, wv}, {x, wv}};
    EXPECT_ERR(mg_exec_run(ex, p, b4, 3, 0), MG_ERR_INVALID_ARG, "twice");
    mg_pool_stats st;
    mg_exec_pool_stats(ex, &st);
    ck_assert_uint_eq(st.bytes_in_use, 0);
    mg_exec_free(ex);
    mg_plan_free(p);
    mg_graph_free(g);
}
END_TEST

/* Out of memory: a pool limit, and a tensor too big for the machine. */
START_TEST(test_out_of_memory) {
    tm_mlp m;
    ck_assert(tm_mlp_build(&m, MG_F32, 4, 8, 32, 3, 8, 1, 0.0, NULL) == MG_OK);
    tm_mlp_data d;
    tm_mlp_data_init(&d, &m, 1, 1);
    mg_plan *p = NULL;
    ck_assert(mg_plan_compile(m.g, d.outs, d.n_outs, NULL, &p) == MG_OK);
    size_t need = mg_plan_predicted_peak(p, d.binds, d.n_binds);
    mg_exec_options o = {.device = MG_DEVICE_CPU, .max_bytes = need - 1};
    mg_exec *ex = NULL;
    ck_assert(mg_exec_new(&o, &ex) == MG_OK);
    EXPECT_ERR(mg_exec_run(ex, p, d.binds, d.n_binds, 0), MG_ERR_NOMEM,
               "out of memory");
    ck_assert_msg(strstr(mg_last_error(), "#") != NULL, "names no tensor: %s",
                  mg_last_error());
    mg_pool_stats st;
    mg_exec_pool_stats(ex, &st);
    ck_assert_uint_eq(st.bytes_in_use, 0);
    mg_exec_free(ex);
    o.max_bytes = need; /* exactly the prediction is enough */
    ck_assert(mg_exec_new(&o, &ex) == MG_OK);
    ck_assert_msg(mg_exec_run(ex, p, d.binds, d.n_binds, 0) == MG_OK, "%s",
                  mg_last_error());
    mg_exec_free(ex);
    mg_plan_free(p);
    tm_mlp_data_free(&d, &m);
    mg_graph_free(m.g);

    /* 2^42 floats: the builder accepts it, the system cannot provide it. */
    mg_graph *g = mg_graph_new();
    int64_t one[1] = {1}, huge[2] = {1 << 21, 1 << 21};
    mg_tensor s = mg_input(g, "s", MG_F32, 1, one);
    mg_tensor big = mg_broadcast_to(g, s, 2, huge);
    TH_OK_T("broadcast", big);
    mg_tensor tot = mg_sum(g, big, 0, NULL, 0);
    float sv = 1, out = 0;
    mg_binding in = {s, &sv};
    void *bufs[1] = {&out};
    mg_status rs = th_run(g, 1, &tot, bufs, 1, &in, 0);
    ck_assert_msg(rs == MG_ERR_NOMEM, "got %s: %s", mg_status_str(rs),
                  th_errmsg);
    ck_assert_msg(strstr(th_errmsg, "broadcast_to") != NULL, "%s", th_errmsg);
    ck_assert(out == 0);
    mg_graph_free(g);
}
END_TEST

START_TEST(test_kernel_error_label_range) {
    mg_graph *g = mg_graph_new();
    int64_t ls[2] = {2, 3}, ys[1] = {2};
    mg_tensor logits = mg_input(g, "logits", MG_F32, 2, ls);
    mg_tensor labels = mg_input(g, "labels", MG_I32, 1, ys);
    mg_tensor ce = mg_cross_entropy(g, logits, labels);
    float lv[6] = {0}, out = -1;
    int32_t bad[2] = {1, 3};
    mg_binding in[2] = {{logits, lv}, {labels, bad}};
    void *bufs[1] = {&out};
    mg_status rs = th_run(g, 1, &ce, bufs, 2, in, 0);
    ck_assert_int_eq(rs, MG_ERR_INVALID_ARG);
    ck_assert_msg(strstr(th_errmsg, "cross_entropy") && strstr(th_errmsg, "3"),
                  "%s", th_errmsg);
    mg_graph_free(g);
}
END_TEST

START_TEST(test_exec_device) {
    mg_exec *ex = NULL;
    mg_exec_options o = {.device = (mg_device)5};
    EXPECT_ERR(mg_exec_new(&o, &ex), MG_ERR_INVALID_ARG, "device");
    ck_assert_ptr_null(ex);
}
END_TEST

START_TEST(test_introspection_and_report_errors) {
    mg_graph *g = mg_graph_new();
    mg_tensor x = mg_input(g, "x", MG_F32, 1, s3);
    mg_tensor y = mg_relu(g, x);
    ck_assert_int_eq(mg_tensor_num_inputs(g, y), 1);
    ck_assert_int_eq(mg_tensor_input(g, y, 0), x);
    mg_clear_error();
    ck_assert_int_eq(mg_tensor_num_inputs(g, 50), -1);
    ck_assert_msg(strstr(mg_last_error(), "50") != NULL, "%s", mg_last_error());
    EXPECT_NO_TENSOR(mg_tensor_input(g, y, 1), "no input 1");
    EXPECT_NO_TENSOR(mg_tensor_input(g, 9, 0), "9");
    EXPECT_NO_TENSOR(mg_tensor_recompute_source(g, 9), "9");
    ck_assert_int_eq(mg_tensor_recompute_source(g, y), MG_NO_TENSOR);
    ck_assert_int_eq(mg_tensor_is_recompute(g, 9), 0);
    ck_assert_int_eq(mg_tensor_is_checkpoint(NULL, 0), 0);
    EXPECT_ERR(mg_tensor_set_checkpoint(g, 12, 1), MG_ERR_UNKNOWN_ID, "12");
    EXPECT_ERR(mg_tensor_set_checkpoint(NULL, 0, 1), MG_ERR_INVALID_ARG,
               "NULL");
    ck_assert_int_eq(mg_graph_checkpoints(NULL, NULL, 0), -1);
    ck_assert_int_eq(mg_graph_checkpoints(g, NULL, 0), 0);
    mg_plan *p = NULL;
    ck_assert(mg_plan_compile(g, &y, 1, NULL, &p) == MG_OK);
    EXPECT_ERR(mg_plan_report(p, NULL, 0, NULL), MG_ERR_INVALID_ARG, "NULL");
    EXPECT_ERR(mg_plan_report(NULL, NULL, 0, stdout), MG_ERR_INVALID_ARG,
               "NULL");
    EXPECT_ERR(mg_plan_dump(NULL, stdout), MG_ERR_INVALID_ARG, "NULL");
    ck_assert_uint_eq(mg_plan_predicted_peak(NULL, NULL, 0), 0);
    mg_plan_free(p);
    mg_graph_free(g);
}
END_TEST

static void *other_thread(void *arg) {
    (void)arg;
    /* A fresh thread has no error, whatever the main thread did. */
    int clean = mg_last_error()[0] == '\0';
    mg_relu(NULL, 0);
    return clean ? (void *)1 : NULL;
}

START_TEST(test_error_is_per_thread) {
    mg_clear_error();
    mg_relu(NULL, 3);
    char before[256];
    snprintf(before, sizeof before, "%s", mg_last_error());
    pthread_t t;
    void *ret = NULL;
    ck_assert(pthread_create(&t, NULL, other_thread, NULL) == 0);
    ck_assert(pthread_join(t, &ret) == 0);
    ck_assert_ptr_nonnull(ret);
    ck_assert_str_eq(before, mg_last_error());
    ck_assert_str_eq(mg_status_str(MG_ERR_CYCLE), "graph has a cycle");
}
END_TEST

/* A failed inner call keeps its own message through the outer builders. */
START_TEST(test_errors_propagate) {
    th_bad_leaves l;
    th_bad_leaves_make(&l);
    mg_graph *g = l.g;
    mg_tensor bad = mg_conv2d(g, l.x4, l.w, 0, 1, 0, 0, 1, 1, 1);
    TH_FAIL(mg_attention(
                g, mg_flatten(g, mg_max_pool2d(g, bad, 2, 2, 2, 2, 0, 0), 1),
                l.x3, l.x3, 1, 0),
            MG_ERR_INVALID_ARG, "conv2d", "stride_h = 0");
    bad = mg_slice(g, l.x4, 9, 0, 1);
    TH_FAIL(mg_concat(g, 2, (mg_tensor[]){l.x4, bad}, 0), MG_ERR_INVALID_ARG,
            "slice", "axis 9");
    bad = mg_embedding(g, l.x4, l.x4);
    TH_FAIL(mg_layernorm(g, mg_concat(g, 2, (mg_tensor[]){bad, l.x4}, 0), l.v3,
                         l.v3, 1, 0),
            MG_ERR_SHAPE, "embedding", "table must be 2-D");
    mg_graph_free(g);
}
END_TEST

/* The helper ops that gradients are made of have no gradients. */
START_TEST(test_no_second_order) {
    th_bad_leaves l;
    th_bad_leaves_make(&l);
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

/* A name set, then unset, is gone: finding another name does not read
 * the empty slot (it dereferenced NULL before), and truncating a graph
 * gives the slots of the names it drops back. */
START_TEST(test_names_unset_and_truncated) {
    mg_graph *g = mg_graph_new();
    mg_tensor x = mg_input(g, "x", MG_F32, 1, S(3));
    mg_tensor y = mg_relu(g, x);
    ck_assert_int_eq(mg_tensor_set_name(g, y, "y"), MG_OK);
    ck_assert_int_eq(mg_tensor_set_name(g, y, NULL), MG_OK);
    ck_assert_ptr_null(mg_tensor_name(g, y));
    ck_assert_int_eq(mg_tensor_find(g, "x"), x);
    ck_assert_int_eq(mg_tensor_find(g, "z"), MG_NO_TENSOR);
    ck_assert_int_eq(mg_last_status(), MG_ERR_UNKNOWN_ID);
    ck_assert_int_eq(mg_tensor_set_name(g, y, "y2"), MG_OK);
    ck_assert_int_eq(mg_tensor_find(g, "y2"), y);
    /* trial nodes named and dropped, as a search does, many times over */
    const int32_t n = mg_graph_num_tensors(g), names = g->n_names;
    for (int i = 0; i < 100; i++) {
        mg_tensor t = mg_tanh(g, y);
        ck_assert_int_eq(mg_tensor_set_name(g, t, "trial"), MG_OK);
        mgi_graph_truncate(g, n);
    }
    ck_assert_int_eq(g->n_names, names);
    ck_assert_str_eq(mg_tensor_name(g, x), "x");
    ck_assert_str_eq(mg_tensor_name(g, y), "y2");
    ck_assert_int_eq(mg_tensor_find(g, "trial"), MG_NO_TENSOR);
    mg_graph_free(g);
}
END_TEST

int main(void) {
    Suite *s = suite_create("errors");
    th_add_tcase(
        s, "errors", 120,
        TH_TESTS(test_null_arguments, test_null_arguments_run_and_observe,
                 test_unknown_ids, test_shapes, test_dtypes,
                 test_gradient_requests, test_checkpoint_arguments,
                 test_cycles_and_rewiring, test_unbound_and_aliasing,
                 test_out_of_memory, test_kernel_error_label_range,
                 test_exec_device, test_error_is_per_thread,
                 test_introspection_and_report_errors, test_errors_propagate,
                 test_no_second_order, test_names_unset_and_truncated));
    return th_run_suite(s);
}
