/*
 * test_onnx.c - ONNX import (memgrad_onnx.h) on the models that
 * tests/data/make_onnx.py writes: forward values against onnx's reference
 * evaluator, gradients against the same graph built by hand and against
 * finite differences, shape arithmetic folded away, external data, and
 * clean errors for unsupported ops, bad graphs and truncated or corrupt
 * files.
 */
#include <dirent.h>

#include "graph/graph.h"
#include "helpers.h"
#include "memgrad_onnx.h"

#ifndef MG_ONNX_DATA_DIR
#error "MG_ONNX_DATA_DIR must name tests/data"
#endif

static char *data_path(const char *name) {
    static char buf[4][1024];
    static int k;
    char *p = buf[k++ & 3];
    snprintf(p, 1024, "%s/%s", MG_ONNX_DATA_DIR, name);
    return p;
}

static void *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *p = malloc(n > 0 ? (size_t)n : 1);
    ck_assert(p != NULL);
    ck_assert(fread(p, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return p;
}

static mg_onnx_model *import(const char *name, mg_graph *g, int training,
                             int64_t batch) {
    mg_onnx_options o;
    mg_onnx_options_init(&o);
    o.training = training;
    o.batch_size = batch;
    mg_onnx_model *m = NULL;
    mg_status s = mg_onnx_import_file(data_path(name), &o, g, &m);
    ck_assert_msg(s == MG_OK, "import %s: %s", name, mg_last_error());
    return m;
}

/* The data of a model's second input (an attention mask), from
 * <stem>.input1.bin, or NULL for a model with one input. */
static void *second_input(const mg_onnx_model *m, const char *stem) {
    if (mg_onnx_num_inputs(m) < 2) return NULL;
    char ib[64];
    size_t n;
    snprintf(ib, sizeof ib, "%s.input1.bin", stem);
    return read_all(data_path(ib), &n);
}

/* All bindings: the model's, then input 0 bound to x and input 1 to x1
 * (if not NULL). */
static mg_binding *all_binds2(const mg_onnx_model *m, void *x, void *x1,
                              int *n) {
    int nb;
    const mg_binding *b = mg_onnx_bindings(m, &nb);
    mg_binding *all = malloc(sizeof *all * (size_t)(nb + 2));
    ck_assert_ptr_nonnull(all);
    if (nb) /* a model without weights has none (b may be NULL) */
        memcpy(all, b, sizeof *all * (size_t)nb);
    all[nb] = (mg_binding){mg_onnx_input(m, 0), x};
    *n = nb + 1;
    if (x1) all[(*n)++] = (mg_binding){mg_onnx_input(m, 1), x1};
    return all;
}

static mg_binding *all_binds(const mg_onnx_model *m, void *x, int *n) {
    return all_binds2(m, x, NULL, n);
}

/* Inference mode forward pass against the reference evaluator's output. */
static void check_forward(const char *stem, int64_t batch) {
    char on[64], ib[64], ob[64];
    snprintf(on, sizeof on, "%s.onnx", stem);
    snprintf(ib, sizeof ib, "%s.input.bin", stem);
    snprintf(ob, sizeof ob, "%s.output.bin", stem);
    mg_graph *g = mg_graph_new();
    mg_onnx_model *m = import(on, g, 0, batch);
    size_t nx, ny;
    float *x = read_all(data_path(ib), &nx);
    float *want = read_all(data_path(ob), &ny);
    mg_tensor y = mg_onnx_output(m, 0);
    ck_assert_int_eq(mg_tensor_nbytes(g, y), ny);
    ck_assert_int_eq(mg_tensor_nbytes(g, mg_onnx_input(m, 0)), nx);
    float *got = malloc(ny);
    int n;
    void *x1 = second_input(m, stem);
    mg_binding *b = all_binds2(m, x, x1, &n);
    void *bufs[1] = {got};
    TH_RUN_OK(stem, g, 1, &y, bufs, n, b, 0);
    free(x1);
    for (size_t k = 0; k < ny / 4; k++)
        ck_assert_msg(fabsf(got[k] - want[k]) <= 1e-4f * (1 + fabsf(want[k])),
                      "%s: output[%zu] = %g, reference %g", stem, k,
                      (double)got[k], (double)want[k]);
    free(b);
    free(got);
    free(x);
    free(want);
    mg_onnx_model_free(m);
    mg_graph_free(g);
}

/* The plan of y computes the fused attention and no softmax: the composed
 * ops the importer built before it matched are left unread. */
static void assert_plan_fused(const mg_graph *g, mg_tensor y) {
    mg_plan *p = NULL;
    ck_assert_int_eq(mg_plan_compile(g, &y, 1, NULL, &p), MG_OK);
    char *dump = NULL;
    size_t dlen = 0;
    FILE *f = open_memstream(&dump, &dlen);
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(mg_plan_dump(p, f), MG_OK);
    fclose(f);
    ck_assert_msg(strstr(dump, "attention") && !strstr(dump, "softmax"),
                  "plan: %s", dump);
    free(dump);
    mg_plan_free(p);
}

/* softmax(Q K^T * s + mask) V, twice (Mul and Div scales, Add either way
 * round, Softmax axis -1 and 3): the importer builds memgrad's fused
 * attention op for both, the forward matches the reference, and in training
 * mode the gradients of every parameter (the mask initializer included)
 * come out finite. */
START_TEST(test_attention_fused) {
    check_forward("attention", 2);
    for (int training = 0; training < 2; training++) {
        mg_graph *g = mg_graph_new();
        mg_onnx_model *m = import("attention.onnx", g, training, 2);
        int fused = 0, softmax = 0;
        for (mg_tensor t = 0; t < (mg_tensor)mg_graph_num_tensors(g); t++) {
            fused += !strcmp(mg_tensor_op_name(g, t), "attention");
            softmax += !strcmp(mg_tensor_op_name(g, t), "softmax");
        }
        ck_assert_int_eq(fused, 2);
        mg_tensor y = mg_onnx_output(m, 0);
        assert_plan_fused(g, y);
        ck_assert_int_eq(softmax, 2); /* built, then left unread */
        if (training) {
            mg_tensor loss = mg_sum(g, mg_mul(g, y, y), 0, NULL, 0);
            const int np = mg_onnx_num_params(m);
            /* 6 weights, the mask and the two scales */
            ck_assert_int_eq(np, 9);
            mg_tensor ps_[9], gr[9];
            for (int k = 0; k < np; k++) ps_[k] = mg_onnx_param(m, k);
            ck_assert_msg(mg_gradients(g, &loss, 1, NULL, ps_, np, NULL, gr) ==
                              MG_OK,
                          "%s", mg_last_error());
            size_t nx;
            void *x = read_all(data_path("attention.input.bin"), &nx);
            int n;
            mg_binding *b = all_binds(m, x, &n);
            float *gv[9];
            void *bufs[9];
            for (int k = 0; k < np; k++)
                bufs[k] = gv[k] = malloc(mg_tensor_nbytes(g, gr[k]));
            TH_RUN_OK("attention grads", g, np, gr, bufs, n, b, 0);
            for (int k = 0; k < np; k++) {
                double norm = 0;
                for (int64_t e = 0; e < mg_tensor_numel(g, gr[k]); e++) {
                    ck_assert(isfinite(gv[k][e]));
                    norm += (double)gv[k][e] * gv[k][e];
                }
                ck_assert_msg(norm > 0, "gradient %d is zero", k);
                free(gv[k]);
            }
            free(b);
            free(x);
        }
        mg_onnx_model_free(m);
        mg_graph_free(g);
    }
}
END_TEST

/* The masks as torch's masked_fill exports them: Where(causal, -inf,
 * scores) with a constant condition, and Where(keep, scores, -1e9) with a
 * condition computed from an input padding mask. Both blocks become the
 * fused attention op, the first with its causal flag and no mask tensor
 * (issue 46: the kernel skips the masked tiles), the second with an
 * additive mask; the forward matches the reference evaluator's, and the
 * Where nodes' composed T x T products are left unread by the plan. */
START_TEST(test_attention_where_fused) {
    check_forward("attention_where", 2);
    mg_graph *g = mg_graph_new();
    mg_onnx_model *m = import("attention_where.onnx", g, 1, 2);
    int fused = 0, causal = 0, masked = 0;
    for (mg_tensor t = 0; t < (mg_tensor)mg_graph_num_tensors(g); t++) {
        if (strcmp(mg_tensor_op_name(g, t), "attention")) continue;
        fused++;
        causal += g->nodes[t].attrs->causal != 0;
        masked += g->nodes[t].n_in == 4;
    }
    ck_assert_int_eq(fused, 2);
    ck_assert_int_eq(causal, 1);
    ck_assert_int_eq(masked, 1);
    assert_plan_fused(g, mg_onnx_output(m, 0));
    mg_onnx_model_free(m);
    mg_graph_free(g);
}
END_TEST

/* Constant masks as the fused op's causal flag (issue 46): Where(triu(T,
 * 1), -inf, s) and Add(s, constant 0 / -inf above the diagonal) are; a
 * triangle that keeps the first superdiagonal (triu(T, 2)) is not, and
 * stays an additive mask. The forward matches the reference evaluator's
 * either way. */
START_TEST(test_attention_causal_mask) {
    check_forward("attention_causal", 2);
    mg_graph *g = mg_graph_new();
    mg_onnx_model *m = import("attention_causal.onnx", g, 1, 2);
    int fused = 0, causal = 0, masked = 0;
    for (mg_tensor t = 0; t < (mg_tensor)mg_graph_num_tensors(g); t++) {
        if (strcmp(mg_tensor_op_name(g, t), "attention")) continue;
        fused++;
        causal += g->nodes[t].attrs->causal != 0 && g->nodes[t].n_in == 3;
        masked += g->nodes[t].attrs->causal == 0 && g->nodes[t].n_in == 4;
    }
    ck_assert_int_eq(fused, 3);
    ck_assert_int_eq(causal, 2);
    ck_assert_int_eq(masked, 1);
    mg_onnx_model_free(m);
    mg_graph_free(g);
}
END_TEST

START_TEST(test_mlp_forward) { check_forward("mlp", 3); }
END_TEST
START_TEST(test_cnn_forward) { check_forward("cnn", 2); }
END_TEST
START_TEST(test_ops_forward) { check_forward("ops", 2); }
END_TEST
START_TEST(test_gpt_forward) { check_forward("gpt", 2); }
END_TEST
START_TEST(test_resnet_forward) { check_forward("resnet", 2); }
END_TEST
START_TEST(test_mobilenet_forward) { check_forward("mobilenet", 2); }
END_TEST
START_TEST(test_unet_forward) { check_forward("unet", 2); }
END_TEST
START_TEST(test_bert_forward) { check_forward("bert", 2); }
END_TEST
START_TEST(test_where_init_forward) { check_forward("where_init", 2); }
END_TEST
/* a padding mask as an int64 input: Cast, Equal and Where on tensors */
START_TEST(test_bert_mask_forward) { check_forward("bert_mask", 2); }
END_TEST
START_TEST(test_bool_ops_forward) { check_forward("bool_ops", 2); }
END_TEST

/* An int64 input read by two Cast nodes and a Transpose: right values, and
 * one cast to f32 in the graph, not one per reader. */
START_TEST(test_int_input_cast_once) {
    check_forward("int_reuse", 2);
    mg_graph *g = mg_graph_new();
    mg_onnx_model *m = import("int_reuse.onnx", g, 0, 2);
    int casts = 0;
    for (mg_tensor t = 0; t < mg_graph_num_tensors(g); t++)
        casts += !strcmp(mg_tensor_op_name(g, t), "cast");
    ck_assert_int_eq(casts, 1);
    mg_onnx_model_free(m);
    mg_graph_free(g);
}
END_TEST
/* pooling with ceil_mode, each side's pads and count_include_pad */
START_TEST(test_pool_attrs_forward) {
    check_forward("maxpool_ceil", 2);
    check_forward("avgpool_ceil", 2);
    check_forward("avgpool_ceil_nopad", 2);
    check_forward("avgpool_pads", 2);
    check_forward("maxpool_same", 2);
}
END_TEST

START_TEST(test_model_handle) {
    mg_graph *g = mg_graph_new();
    mg_onnx_model *m = import("mlp.onnx", g, 1, 3);
    ck_assert_int_eq(mg_onnx_opset(m), 13);
    ck_assert_int_eq(mg_onnx_num_inputs(m), 1);
    ck_assert_int_eq(mg_onnx_num_outputs(m), 1);
    ck_assert_int_eq(mg_onnx_num_params(m), 4);
    const char *names[4] = {"w1", "b1", "w2", "b2"};
    int nb;
    const mg_binding *b = mg_onnx_bindings(m, &nb);
    ck_assert_int_eq(nb, 4);
    for (int k = 0; k < 4; k++) {
        mg_tensor p = mg_onnx_param(m, k);
        ck_assert_str_eq(mg_tensor_name(g, p), names[k]);
        ck_assert_int_eq(mg_onnx_find(m, names[k]), p);
        ck_assert_int_eq(b[k].tensor, p);
        ck_assert_str_eq(mg_tensor_op_name(g, p), "param");
    }
    int nd;
    int64_t sh[MG_MAX_DIMS];
    ck_assert(mg_tensor_shape(g, mg_onnx_input(m, 0), &nd, sh) == MG_OK);
    ck_assert_int_eq(nd, 2);
    ck_assert_int_eq(sh[0], 3); /* the dynamic "N" */
    ck_assert_int_eq(mg_onnx_find(m, "y"), mg_onnx_output(m, 0));
    ck_assert_int_eq(mg_onnx_find(m, "nothing"), MG_NO_TENSOR);
    ck_assert_int_eq(mg_onnx_input(m, 1), MG_NO_TENSOR);
    mg_onnx_model_free(m);
    mg_graph_free(g);

    /* a dynamic dim by name, and none given */
    g = mg_graph_new();
    mg_onnx_options o;
    mg_onnx_options_init(&o);
    ck_assert_int_eq(o.training, 1);
    mg_onnx_dim d = {"N", 5};
    o.dims = &d;
    o.n_dims = 1;
    ck_assert(mg_onnx_import_file(data_path("mlp.onnx"), &o, g, &m) == MG_OK);
    ck_assert(mg_tensor_shape(g, mg_onnx_input(m, 0), &nd, sh) == MG_OK);
    ck_assert_int_eq(sh[0], 5);
    mg_onnx_model_free(m);
    mg_graph_free(g);
    g = mg_graph_new();
    ck_assert_int_eq(mg_onnx_import_file(data_path("mlp.onnx"), NULL, g, &m),
                     MG_ERR_INVALID_ARG);
    ck_assert_ptr_null(m);
    ck_assert_msg(strstr(mg_last_error(), "'N'") != NULL, "%s",
                  mg_last_error());
    mg_graph_free(g);
}
END_TEST

/* The MLP imported and the MLP written with builder calls give the same
 * loss and gradients bit for bit, under every policy. */
START_TEST(test_mlp_grads_match_hand_built) {
    mg_ckpt_policy pols[3] = {MG_CKPT_NONE, MG_CKPT_MEMORY, MG_CKPT_SPEED};
    size_t nx;
    float *x = read_all(data_path("mlp.input.bin"), &nx);
    float ref[4][128];
    for (int pi = 0; pi < 3; pi++) {
        mg_checkpoints ck = {.policy = pols[pi]};
        for (int hand = 0; hand < 2; hand++) {
            mg_graph *g = mg_graph_new();
            mg_onnx_model *m = import("mlp.onnx", g, 1, 3);
            mg_tensor y, ps[4];
            for (int k = 0; k < 4; k++) ps[k] = mg_onnx_param(m, k);
            if (hand) {
                mg_tensor xi = mg_onnx_input(m, 0);
                mg_tensor h =
                    mg_relu(g, mg_add(g, mg_matmul(g, xi, ps[0], 0, 1), ps[1]));
                y = mg_add(g, mg_matmul(g, h, ps[2], 0, 1), ps[3]);
            } else {
                y = mg_onnx_output(m, 0);
            }
            mg_tensor loss = mg_sum(g, mg_mul(g, y, y), 0, NULL, 0);
            mg_tensor grads[4];
            ck_assert_msg(mg_gradients(g, &loss, 1, NULL, ps, 4, &ck, grads) ==
                              MG_OK,
                          "%s", mg_last_error());
            float gv[4][128];
            void *bufs[4] = {gv[0], gv[1], gv[2], gv[3]};
            int n;
            mg_binding *b = all_binds(m, x, &n);
            TH_RUN_OK("mlp grads", g, 4, grads, bufs, n, b, 0);
            for (int k = 0; k < 4; k++) {
                size_t nb = mg_tensor_nbytes(g, grads[k]);
                ck_assert(nb <= sizeof gv[k]);
                if (hand == 0 && pi == 0) memcpy(ref[k], gv[k], nb);
                else
                    ck_assert_msg(memcmp(ref[k], gv[k], nb) == 0,
                                  "param %d differs (policy %d, hand %d)", k,
                                  pi, hand);
            }
            free(b);
            mg_onnx_model_free(m);
            mg_graph_free(g);
        }
    }
    free(x);
}
END_TEST

/* Training mode (BatchNorm on batch statistics): gradients of a weighted
 * sum of the [2, 5] outputs against central differences, for every
 * parameter but those listed in skip (unused ones). */
static void check_fd(const char *stem, int n_params, uint64_t skip) {
    char on[64], ib[64];
    snprintf(on, sizeof on, "%s.onnx", stem);
    snprintf(ib, sizeof ib, "%s.input.bin", stem);
    mg_graph *g = mg_graph_new();
    mg_onnx_model *m = import(on, g, 1, 2);
    size_t nx;
    void *x = read_all(data_path(ib), &nx);
    mg_tensor y = mg_onnx_output(m, 0);
    float wts[10];
    for (int k = 0; k < 10; k++) wts[k] = (float)((k * 7) % 5) - 2.0f;
    mg_tensor w = mg_input(g, "loss_w", MG_F32, 2, S(2, 5));
    mg_tensor loss = mg_sum(g, mg_mul(g, y, w), 0, NULL, 0);
    int np = mg_onnx_num_params(m);
    ck_assert_int_eq(np, n_params);
    mg_tensor ps[64], grads[64];
    ck_assert(np <= 64);
    for (int k = 0; k < np; k++) ps[k] = mg_onnx_param(m, k);
    ck_assert(mg_gradients(g, &loss, 1, NULL, ps, np, NULL, grads) == MG_OK);
    int n;
    void *x1 = second_input(m, stem);
    mg_binding *b0 = all_binds2(m, x, x1, &n);
    mg_binding *b = malloc(sizeof *b * (size_t)(n + 1));
    memcpy(b, b0, sizeof *b * (size_t)n);
    b[n++] = (mg_binding){w, wts};
    int checked = 0;
    for (int k = 0; k < np; k++) {
        if (skip & ((uint64_t)1 << k)) continue;
        int64_t cnt = mg_tensor_numel(g, ps[k]);
        float *gv = malloc((size_t)cnt * sizeof *gv);
        void *bufs[1] = {gv};
        TH_RUN_OK("cnn grad", g, 1, &grads[k], bufs, n, b, 0);
        float *pdata = NULL;
        for (int q = 0; q < n; q++)
            if (b[q].tensor == ps[k]) pdata = b[q].data;
        ck_assert(pdata != NULL);
        /* A small step: a larger one moves values across ReLU's and
         * MaxPool's kinks (with 1e-2, bn_b's difference is 5% off and
         * converges to the gradient as the step shrinks). */
        for (int64_t e = 0; e < cnt; e += (cnt > 8 ? cnt / 5 : 1)) {
            float save = pdata[e], lp, lm;
            void *lb[1] = {&lp};
            pdata[e] = save + 5e-4f;
            TH_RUN_OK("cnn loss+", g, 1, &loss, lb, n, b, 0);
            lb[0] = &lm;
            pdata[e] = save - 5e-4f;
            TH_RUN_OK("cnn loss-", g, 1, &loss, lb, n, b, 0);
            pdata[e] = save;
            double fd = ((double)lp - lm) / 1e-3;
            ck_assert_msg(fabs(fd - gv[e]) <= 1e-2 * (1 + fabs(fd)),
                          "param %s[%lld]: gradient %g, finite difference %g",
                          mg_tensor_name(g, ps[k]), (long long)e, (double)gv[e],
                          fd);
            checked++;
        }
        free(gv);
    }
    /* at least two elements of every parameter checked */
    ck_assert_int_ge(checked, 2 * (np - __builtin_popcountll(skip)));
    free(b);
    free(b0);
    free(x);
    free(x1);
    mg_onnx_model_free(m);
    mg_graph_free(g);
}

/* the CNN's running statistics (4, 5) are unused in training mode */
START_TEST(test_cnn_grads_finite_difference) { check_fd("cnn", 9, 0x30); }
END_TEST
START_TEST(test_gpt_grads_finite_difference) { check_fd("gpt", 15, 0); }
END_TEST
/* six conv + batchnorm pairs, each with running statistics 3 and 4 */
START_TEST(test_resnet_grads_finite_difference) {
    uint64_t skip = 0;
    for (int k = 0; k < 6; k++) skip |= (uint64_t)3 << (5 * k + 3);
    check_fd("resnet", 32, skip);
}
END_TEST
START_TEST(test_bert_grads_finite_difference) { check_fd("bert", 14, 0); }
END_TEST
START_TEST(test_bert_mask_grads_finite_difference) {
    check_fd("bert_mask", 14, 0);
}
END_TEST
START_TEST(test_bool_ops_grads_finite_difference) {
    check_fd("bool_ops", 6, 0);
}
END_TEST

/* Shape/Gather/Unsqueeze/Concat are evaluated at import: the graph holds
 * one reshape and no integer tensors. */
START_TEST(test_shape_arithmetic_folded) {
    mg_graph *g = mg_graph_new();
    mg_onnx_model *m = import("cnn.onnx", g, 1, 2);
    int reshapes = 0;
    for (mg_tensor t = 0; t < mg_graph_num_tensors(g); t++) {
        mg_dtype dt;
        ck_assert(mg_tensor_dtype(g, t, &dt) == MG_OK);
        ck_assert_msg(dt == MG_F32, "tensor %d (%s) is not f32", t,
                      mg_tensor_op_name(g, t));
        reshapes += strcmp(mg_tensor_op_name(g, t), "reshape") == 0;
    }
    /* conv bias reshapes (2) and the folded flatten */
    ck_assert_int_eq(reshapes, 2);
    ck_assert_int_eq(mg_onnx_find(m, "tgt"), MG_NO_TENSOR);
    int nd;
    int64_t sh[MG_MAX_DIMS];
    ck_assert(mg_tensor_shape(g, mg_onnx_find(m, "flat"), &nd, sh) == MG_OK);
    ck_assert_int_eq(nd, 2);
    ck_assert_int_eq(sh[0], 2);
    ck_assert_int_eq(sh[1], 24);
    mg_onnx_model_free(m);
    mg_graph_free(g);
}
END_TEST

START_TEST(test_training_mode_ops) {
    /* training: a dropout op and batchnorm; inference: neither */
    for (int tr = 0; tr < 2; tr++) {
        mg_graph *g = mg_graph_new();
        mg_onnx_model *m = import("ops.onnx", g, tr, 2);
        int drop = 0;
        for (mg_tensor t = 0; t < mg_graph_num_tensors(g); t++)
            drop += strcmp(mg_tensor_op_name(g, t), "dropout") == 0;
        ck_assert_int_eq(drop, tr);
        mg_onnx_model_free(m);
        mg_graph_free(g);
        g = mg_graph_new();
        m = import("cnn.onnx", g, tr, 2);
        int bn = 0;
        for (mg_tensor t = 0; t < mg_graph_num_tensors(g); t++)
            bn += strcmp(mg_tensor_op_name(g, t), "batchnorm") == 0;
        ck_assert_int_eq(bn, tr);
        mg_onnx_model_free(m);
        mg_graph_free(g);
    }
}
END_TEST

/* A training-mode export: optional outputs nobody reads are left out, and
 * a read one is refused naming the node. */
START_TEST(test_training_export) {
    for (int tr = 0; tr < 2; tr++) {
        mg_graph *g = mg_graph_new();
        mg_onnx_model *m = import("train_export.onnx", g, tr, 2);
        int drop = 0, bn = 0;
        for (mg_tensor t = 0; t < mg_graph_num_tensors(g); t++) {
            drop += strcmp(mg_tensor_op_name(g, t), "dropout") == 0;
            bn += strcmp(mg_tensor_op_name(g, t), "batchnorm") == 0;
        }
        ck_assert_int_eq(drop, tr);
        ck_assert_int_eq(bn, tr);
        ck_assert_int_eq(mg_onnx_find(m, "rm"), MG_NO_TENSOR);
        mg_onnx_model_free(m);
        mg_graph_free(g);
    }
    mg_graph *g = mg_graph_new();
    mg_onnx_options o;
    mg_onnx_options_init(&o);
    o.batch_size = 2;
    mg_onnx_model *m;
    ck_assert_int_eq(
        mg_onnx_import_file(data_path("train_export_mask.onnx"), &o, g, &m),
        MG_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(mg_last_error(), "drop_train") &&
                      strstr(mg_last_error(), "mask"),
                  "%s", mg_last_error());
    mg_graph_free(g);
}
END_TEST

START_TEST(test_external_data) {
    mg_graph *g1 = mg_graph_new(), *g2 = mg_graph_new();
    mg_onnx_model *a = import("mlp.onnx", g1, 1, 3);
    mg_onnx_model *b = import("mlp_external.onnx", g2, 1, 3);
    int na, nb;
    const mg_binding *ba = mg_onnx_bindings(a, &na),
                     *bb = mg_onnx_bindings(b, &nb);
    ck_assert_int_eq(na, nb);
    for (int k = 0; k < na; k++) {
        size_t len = mg_tensor_nbytes(g1, ba[k].tensor);
        ck_assert_int_eq(len, mg_tensor_nbytes(g2, bb[k].tensor));
        ck_assert(memcmp(ba[k].data, bb[k].data, len) == 0);
    }
    mg_onnx_model_free(a);
    mg_onnx_model_free(b);
    /* from a buffer with no directory given, the external file is not found */
    size_t len;
    void *buf = read_all(data_path("mlp_external.onnx"), &len);
    mg_onnx_options o;
    mg_onnx_options_init(&o);
    o.batch_size = 3;
    o.external_data_dir = "/nonexistent";
    mg_graph *g3 = mg_graph_new();
    ck_assert_int_eq(mg_onnx_import_buffer(buf, len, &o, g3, &a),
                     MG_ERR_INVALID_ARG);
    ck_assert_msg(strstr(mg_last_error(), "mlp_external.bin") != NULL, "%s",
                  mg_last_error());
    o.external_data_dir = MG_ONNX_DATA_DIR;
    ck_assert(mg_onnx_import_buffer(buf, len, &o, g3, &a) == MG_OK);
    mg_onnx_model_free(a);
    free(buf);
    mg_graph_free(g1);
    mg_graph_free(g2);
    mg_graph_free(g3);
}
END_TEST

static mg_status import_status(const char *name) {
    mg_graph *g = mg_graph_new();
    mg_onnx_model *m = (mg_onnx_model *)1;
    mg_status s = mg_onnx_import_file(data_path(name), NULL, g, &m);
    ck_assert(s != MG_OK);
    ck_assert_ptr_null(m);
    mg_graph_free(g);
    return s;
}

START_TEST(test_unsupported_op) {
    ck_assert_int_eq(import_status("unsupported.onnx"), MG_ERR_UNSUPPORTED);
    const char *e = mg_last_error();
    ck_assert_msg(strstr(e, "the_hardmax") && strstr(e, "Hardmax") &&
                      strstr(e, "domain ''") && strstr(e, "opset 13"),
                  "message: %s", e);
    ck_assert_int_eq(import_status("custom_domain.onnx"), MG_ERR_UNSUPPORTED);
    e = mg_last_error();
    ck_assert_msg(strstr(e, "custom_relu") && strstr(e, "com.example"),
                  "message: %s", e);
}
END_TEST

START_TEST(test_bad_graphs) {
    ck_assert_int_eq(import_status("cycle.onnx"), MG_ERR_CYCLE);
    ck_assert_int_eq(import_status("undefined_input.onnx"), MG_ERR_UNKNOWN_ID);
    ck_assert_msg(strstr(mg_last_error(), "nowhere"), "%s", mg_last_error());
    ck_assert_int_eq(import_status("shape_mismatch.onnx"), MG_ERR_SHAPE);
    ck_assert_msg(strstr(mg_last_error(), "mm_bad"), "%s", mg_last_error());
    ck_assert_int_eq(import_status("short_initializer.onnx"),
                     MG_ERR_INVALID_ARG);
    ck_assert_int_eq(import_status("huge_initializer.onnx"),
                     MG_ERR_INVALID_ARG);
    ck_assert_int_eq(import_status("no_such_file.onnx"), MG_ERR_INVALID_ARG);
    mg_graph *g = mg_graph_new();
    mg_onnx_model *m;
    ck_assert_int_eq(mg_onnx_import_file(NULL, NULL, g, &m),
                     MG_ERR_INVALID_ARG);
    ck_assert_int_eq(mg_onnx_import_buffer(NULL, 4, NULL, g, &m),
                     MG_ERR_INVALID_ARG);
    ck_assert_int_eq(mg_onnx_import_buffer("", 0, NULL, NULL, &m),
                     MG_ERR_INVALID_ARG);
    /* The accessors answer "nothing" for a NULL model or an index out of
     * range, instead of reading out of bounds. */
    ck_assert_int_eq(mg_onnx_num_inputs(NULL), 0);
    ck_assert_int_eq(mg_onnx_num_outputs(NULL), 0);
    ck_assert_int_eq(mg_onnx_num_params(NULL), 0);
    ck_assert_int_eq(mg_onnx_input(NULL, 0), MG_NO_TENSOR);
    ck_assert_int_eq(mg_onnx_find(NULL, "x"), MG_NO_TENSOR);
    ck_assert(mg_onnx_opset(NULL) == -1);
    int nb = 7;
    ck_assert(mg_onnx_bindings(NULL, &nb) == NULL && nb == 0);
    mg_onnx_model_free(NULL); /* accepted */
    mg_onnx_options o;
    mg_onnx_options_init(&o);
    o.batch_size = 2;
    ck_assert_msg(mg_onnx_import_file(data_path("mlp.onnx"), &o, g, &m) ==
                      MG_OK,
                  "%s", mg_last_error());
    ck_assert_int_eq(mg_onnx_input(m, -1), MG_NO_TENSOR);
    ck_assert_int_eq(mg_onnx_input(m, mg_onnx_num_inputs(m)), MG_NO_TENSOR);
    ck_assert_int_eq(mg_onnx_output(m, mg_onnx_num_outputs(m)), MG_NO_TENSOR);
    ck_assert_int_eq(mg_onnx_param(m, mg_onnx_num_params(m)), MG_NO_TENSOR);
    ck_assert_int_eq(mg_onnx_find(m, "no such tensor"), MG_NO_TENSOR);
    ck_assert_int_eq(mg_onnx_find(m, NULL), MG_NO_TENSOR);
    mg_onnx_model_free(m);
    mg_graph_free(g);
}
END_TEST

/* Every prefix of a model, and the model with bytes changed: a status,
 * never a crash (ASan builds check for overreads and leaks too). */
START_TEST(test_truncated_and_corrupt) {
    const char *names[2] = {"cnn.onnx", "ops.onnx"};
    for (int q = 0; q < 2; q++) {
        size_t len;
        uint8_t *buf = read_all(data_path(names[q]), &len);
        mg_onnx_options o;
        mg_onnx_options_init(&o);
        o.batch_size = 2;
        int failed = 0;
        for (size_t cut = 0; cut < len; cut++) {
            mg_graph *g = mg_graph_new();
            mg_onnx_model *m = NULL;
            mg_status s = mg_onnx_import_buffer(buf, cut, &o, g, &m);
            if (s != MG_OK) {
                failed++;
                ck_assert_ptr_null(m);
                ck_assert(mg_last_error()[0] != '\0');
            }
            mg_onnx_model_free(m);
            mg_graph_free(g);
        }
        ck_assert_int_gt(failed, (int)len / 2);
        th_rng r;
        th_rng_init(&r, 77);
        for (int trial = 0; trial < 400; trial++) {
            uint8_t *cp = malloc(len);
            memcpy(cp, buf, len);
            for (int f = 0; f < 1 + trial % 4; f++)
                cp[th_rng_next(&r) % len] = (uint8_t)th_rng_next(&r);
            mg_graph *g = mg_graph_new();
            mg_onnx_model *m = NULL;
            if (mg_onnx_import_buffer(cp, len, &o, g, &m) != MG_OK)
                ck_assert_ptr_null(m);
            mg_onnx_model_free(m);
            mg_graph_free(g);
            free(cp);
        }
        free(buf);
    }
}
END_TEST

/* Imports every file in dir (a status, never a crash); their count. */
static int import_dir(const char *dir) {
    DIR *d = opendir(dir);
    ck_assert_msg(d != NULL, "cannot open %s", dir);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        size_t len;
        void *buf = read_all(path, &len);
        mg_onnx_options o;
        mg_onnx_options_init(&o);
        o.batch_size = 2;
        o.external_data_dir = "/nonexistent"; /* the seeds' data is not here */
        mg_graph *g = mg_graph_new();
        mg_onnx_model *m = NULL;
        if (mg_onnx_import_buffer(buf, len, &o, g, &m) != MG_OK)
            ck_assert(mg_last_error()[0] != '\0');
        mg_onnx_model_free(m);
        mg_graph_free(g);
        free(buf);
        n++;
    }
    closedir(d);
    return n;
}

/* Inputs the fuzzer once crashed the importer with (tests/fuzz/), and the
 * fuzzers' seeds of the hostile cases of issue 25. */
START_TEST(test_fuzz_regressions) {
    ck_assert_int_ge(import_dir(MG_ONNX_FUZZ_DIR), 1);
    ck_assert_int_ge(import_dir(MG_ONNX_SEED_DIR), 1);
}
END_TEST

int main(void) {
    Suite *s = suite_create("onnx");
    th_add_tcase(
        s, "import", 300,
        TH_TESTS(
            test_mlp_forward, test_cnn_forward, test_ops_forward,
            test_attention_fused, test_attention_where_fused,
            test_attention_causal_mask, test_gpt_forward, test_resnet_forward,
            test_mobilenet_forward, test_unet_forward, test_bert_forward,
            test_where_init_forward, test_bert_mask_forward,
            test_bool_ops_forward, test_int_input_cast_once,
            test_pool_attrs_forward, test_model_handle,
            test_mlp_grads_match_hand_built, test_cnn_grads_finite_difference,
            test_gpt_grads_finite_difference,
            test_resnet_grads_finite_difference,
            test_bert_grads_finite_difference,
            test_bert_mask_grads_finite_difference,
            test_bool_ops_grads_finite_difference, test_shape_arithmetic_folded,
            test_training_mode_ops, test_external_data, test_training_export));
    th_add_tcase(s, "errors", 300,
                 TH_TESTS(test_unsupported_op, test_bad_graphs,
                          test_truncated_and_corrupt, test_fuzz_regressions));
    return th_run_suite(s);
}
