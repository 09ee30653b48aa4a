/*
 * test_checkpoint.c - the checkpointing rewriter from every side:
 * gradients equal plain backprop's bit for bit under every policy (dropout
 * included), the pool's peak equals the prediction, memory grows like
 * sqrt(depth) under the memory policy with at most one extra forward pass,
 * speed recomputes no matmul, collection keeps exactly what was listed,
 * graphs without articulation points still get checkpoints, and bad
 * checkpoint requests get clear errors.
 */
#include "helpers.h"

typedef struct run_out {
    size_t peak, predicted, plain_predicted;
    double recompute_ratio;
    void *grads[2 * (TM_MAX_LAYERS + 1)];
    size_t grad_bytes[2 * (TM_MAX_LAYERS + 1)];
    double loss;
} run_out;

/* Train-step an MLP once (params and grads in caller memory) and keep its
 * gradients. without_recompute compiles the plain schedule of the same
 * graph. */
static void run_mlp(tm_mlp *m, uint64_t seed, int without_recompute,
                    run_out *r) {
    memset(r, 0, sizeof *r);
    tm_mlp_data d;
    tm_mlp_data_init(&d, m, seed, 1);
    mg_plan_options o = {.without_recompute = without_recompute};
    mg_plan *p = NULL;
    mg_exec *ex = NULL;
    ck_assert_msg(mg_plan_compile(m->g, d.outs, d.n_outs, &o, &p) == MG_OK,
                  "%s", mg_last_error());
    ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
    ck_assert_msg(mg_exec_run(ex, p, d.binds, d.n_binds, 99) == MG_OK, "%s",
                  mg_last_error());
    mg_pool_stats st;
    mg_exec_pool_stats(ex, &st);
    r->peak = st.peak_bytes_in_use;
    mg_plan_summary sum;
    ck_assert(mg_plan_summarize(p, d.binds, d.n_binds, &sum) == MG_OK);
    r->predicted = sum.predicted_peak;
    r->plain_predicted = sum.predicted_peak_without_recompute;
    r->recompute_ratio = sum.recompute_flops / sum.forward_flops;
    r->loss = tm_loss_value(&d, m);
    size_t es = mg_dtype_size(m->dtype);
    int fan_in = m->in;
    for (int l = 0; l <= m->depth; l++) {
        int fan_out = l == m->depth ? m->out : m->width;
        r->grad_bytes[2 * l] = es * (size_t)fan_in * (size_t)fan_out;
        r->grad_bytes[2 * l + 1] = es * (size_t)fan_out;
        r->grads[2 * l] = malloc(r->grad_bytes[2 * l]);
        r->grads[2 * l + 1] = malloc(r->grad_bytes[2 * l + 1]);
        memcpy(r->grads[2 * l], d.gw[l], r->grad_bytes[2 * l]);
        memcpy(r->grads[2 * l + 1], d.gb[l], r->grad_bytes[2 * l + 1]);
        fan_in = fan_out;
    }
    mg_exec_free(ex);
    mg_plan_free(p);
    tm_mlp_data_free(&d, m);
}

static void run_out_free(run_out *r, const tm_mlp *m) {
    for (int i = 0; i < 2 * (m->depth + 1); i++) free(r->grads[i]);
}

static void assert_same_grads(const char *what, const run_out *a,
                              const run_out *b, const tm_mlp *m) {
    ck_assert_msg(memcmp(&a->loss, &b->loss, sizeof a->loss) == 0,
                  "%s: loss %.17g vs %.17g", what, a->loss, b->loss);
    for (int i = 0; i < 2 * (m->depth + 1); i++)
        ck_assert_msg(memcmp(a->grads[i], b->grads[i], a->grad_bytes[i]) == 0,
                      "%s: gradient %d differs from plain backprop", what, i);
}

static const mg_ckpt_policy all_policies[] = {MG_CKPT_MEMORY, MG_CKPT_SPEED,
                                              MG_CKPT_COLLECTION};

/* Every policy, f32 and f64, with dropout: bit-for-bit equal gradients,
 * against a separately built plain graph and against the same graph's
 * plain schedule; measured peak equals predicted. */
START_TEST(test_policies_bit_exact) {
    for (int dt = 0; dt < 2; dt++) {
        mg_dtype dtype = dt ? MG_F64 : MG_F32;
        tm_mlp plain;
        ck_assert(tm_mlp_build(&plain, dtype, 12, 8, 32, 5, 6, 1, 0.25, NULL) ==
                  MG_OK);
        run_out ref;
        run_mlp(&plain, 4, 0, &ref);
        for (size_t k = 0; k < sizeof all_policies / sizeof *all_policies;
             k++) {
            tm_mlp m;
            mg_checkpoints c = {.policy = all_policies[k]};
            mg_tensor listed[TM_MAX_LAYERS];
            if (c.policy == MG_CKPT_COLLECTION) {
                /* the same model, built once to learn the ids */
                tm_mlp probe;
                ck_assert(tm_mlp_build(&probe, dtype, 12, 8, 32, 5, 6, 1, 0.25,
                                       NULL) == MG_OK);
                for (int l = 0; l < 4; l++) listed[l] = probe.h[3 * l + 2];
                mg_graph_free(probe.g);
                c.tensors = listed;
                c.n_tensors = 4;
            }
            mg_status s = tm_mlp_build(&m, dtype, 12, 8, 32, 5, 6, 1, 0.25, &c);
            ck_assert_msg(s == MG_OK, "policy %d: %s", (int)c.policy,
                          mg_last_error());
            run_out got, same_graph_plain;
            run_mlp(&m, 4, 0, &got);
            run_mlp(&m, 4, 1, &same_graph_plain);
            assert_same_grads("policy vs plain graph", &got, &ref, &m);
            assert_same_grads("policy vs its plain schedule", &got,
                              &same_graph_plain, &m);
            ck_assert_msg(got.peak == got.predicted,
                          "policy %d: peak %zu, predicted %zu", (int)c.policy,
                          got.peak, got.predicted);
            ck_assert_uint_eq(same_graph_plain.peak, ref.peak);
            ck_assert_uint_eq(got.plain_predicted, ref.peak);
            ck_assert(got.recompute_ratio <= 1.0);
            run_out_free(&got, &m);
            run_out_free(&same_graph_plain, &m);
            mg_graph_free(m.g);
        }
        run_out_free(&ref, &plain);
        mg_graph_free(plain.g);
    }
}
END_TEST

/* Peak activation bytes under the memory policy stay within 3 sqrt(n)
 * layers, and recomputation costs at most one forward pass. */
START_TEST(test_memory_against_depth) {
    const int depths[] = {16, 64, 256, 1024};
    for (size_t i = 0; i < sizeof depths / sizeof *depths; i++) {
        int n = depths[i];
        tm_mlp m;
        mg_checkpoints c = {.policy = MG_CKPT_MEMORY};
        /* TM_MAX_LAYERS bounds the helper; deeper chains are built here */
        if (n > TM_MAX_LAYERS) {
            /* a plain chain: x -> (matmul -> relu)^n -> mse, weights shared
             * are not allowed to bypass: one weight per layer */
            mg_graph *g = mg_graph_new();
            int64_t xs[2] = {8, 32}, ws[2] = {32, 32};
            mg_tensor x = mg_input(g, "x", MG_F32, 2, xs), h = x;
            mg_tensor *w = malloc(sizeof *w * (size_t)n);
            for (int l = 0; l < n; l++) {
                w[l] = mg_param(g, NULL, MG_F32, 2, ws);
                h = mg_relu(g, mg_matmul(g, h, w[l], 0, 0));
            }
            mg_tensor target = mg_input(g, "t", MG_F32, 2, xs);
            mg_tensor loss = mg_mse(g, h, target);
            mg_tensor *gw = malloc(sizeof *gw * (size_t)n);
            ck_assert_msg(mg_gradients(g, &loss, 1, NULL, w, n, &c, gw) ==
                              MG_OK,
                          "%s", mg_last_error());
            mg_tensor *outs = malloc(sizeof *outs * (size_t)(n + 1));
            mg_binding *b = malloc(sizeof *b * (size_t)(2 * n + 3));
            float *mem = calloc((size_t)(2 * n + 3) * 32 * 32, sizeof(float));
            int nb = 0;
            b[nb++] = (mg_binding){x, mem};
            b[nb++] = (mg_binding){target, mem + 1024};
            outs[0] = loss;
            b[nb++] = (mg_binding){loss, mem + 2048};
            for (int l = 0; l < n; l++) {
                b[nb++] = (mg_binding){w[l], mem + (size_t)(3 + 2 * l) * 1024};
                b[nb++] = (mg_binding){gw[l], mem + (size_t)(4 + 2 * l) * 1024};
                outs[l + 1] = gw[l];
            }
            for (int l = 0; l < n;
                 l++) /* identity-ish weights keep values sane */
                for (int k = 0; k < 32; k++)
                    mem[(size_t)(3 + 2 * l) * 1024 + (size_t)k * 33] = 1.0f;
            mg_plan *p = NULL;
            ck_assert(mg_plan_compile(g, outs, n + 1, NULL, &p) == MG_OK);
            mg_exec *ex = NULL;
            ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
            ck_assert_msg(mg_exec_run(ex, p, b, nb, 0) == MG_OK, "%s",
                          mg_last_error());
            mg_pool_stats st;
            mg_exec_pool_stats(ex, &st);
            mg_plan_summary sum;
            ck_assert(mg_plan_summarize(p, b, nb, &sum) == MG_OK);
            size_t layer = mg_pool_size_class(8 * 32 * 4);
            ck_assert_msg((double)st.peak_bytes_in_use <= 3 * sqrt(n) * layer,
                          "depth %d: peak %zu > 3 sqrt(n) layers (%g)", n,
                          st.peak_bytes_in_use, 3 * sqrt(n) * layer);
            ck_assert_msg(sum.recompute_flops <= sum.forward_flops,
                          "depth %d: recompute %g > forward %g flops", n,
                          sum.recompute_flops, sum.forward_flops);
            ck_assert_uint_eq(st.peak_bytes_in_use, sum.predicted_peak);
            ck_assert(sum.predicted_peak * 4 <
                      sum.predicted_peak_without_recompute);
            mg_exec_free(ex);
            mg_plan_free(p);
            mg_graph_free(g);
            free(w);
            free(gw);
            free(outs);
            free(b);
            free(mem);
            continue;
        }
        ck_assert(tm_mlp_build(&m, MG_F32, n, 32, 32, 32, 8, 0, 0.0, &c) ==
                  MG_OK);
        run_out r;
        run_mlp(&m, 1, 0, &r);
        /* one layer = matmul, add, relu over [8,32] f32 */
        size_t layer = mg_pool_size_class(8 * 32 * 4);
        ck_assert_msg((double)r.peak <= 3 * sqrt(n) * layer,
                      "depth %d: peak %zu > 3 sqrt(n) layers (%g)", n, r.peak,
                      3 * sqrt(n) * layer);
        ck_assert_msg(r.recompute_ratio <= 1.0, "depth %d: recompute %g", n,
                      r.recompute_ratio);
        ck_assert_uint_eq(r.peak, r.predicted);
        run_out_free(&r, &m);
        mg_graph_free(m.g);
    }
}
END_TEST

START_TEST(test_speed_recomputes_no_matmul) {
    tm_mlp m;
    mg_checkpoints c = {.policy = MG_CKPT_SPEED};
    ck_assert(tm_mlp_build(&m, MG_F32, 6, 8, 16, 4, 4, 1, 0.1, &c) == MG_OK);
    int copies = 0;
    for (mg_tensor t = 0; t < mg_graph_num_tensors(m.g); t++) {
        if (!mg_tensor_is_recompute(m.g, t)) continue;
        copies++;
        ck_assert_msg(strcmp(mg_tensor_op_name(m.g, t), "matmul") != 0,
                      "speed recomputes matmul #%d", (int)t);
    }
    ck_assert_msg(copies > 0, "speed recomputed nothing");
    mg_tensor chosen[64];
    int n = mg_graph_checkpoints(m.g, chosen, 64);
    ck_assert_int_eq(n, 7); /* one matmul per layer, 6 hidden + output */
    for (int i = 0; i < n; i++)
        ck_assert_str_eq(mg_tensor_op_name(m.g, chosen[i]), "matmul");
    mg_graph_free(m.g);
}
END_TEST

/* Every forward tensor that a backward or recompute op reads is a leaf, a
 * y, or one of `kept`. */
static void assert_reads_only(const mg_graph *g, const mg_tensor *kept,
                              int n_kept, mg_tensor y) {
    for (mg_tensor t = 0; t < mg_graph_num_tensors(g); t++) {
        if (!mg_tensor_is_backward(g, t)) continue;
        for (int k = 0; k < mg_tensor_num_inputs(g, t); k++) {
            mg_tensor in = mg_tensor_input(g, t, k);
            if (mg_tensor_is_backward(g, in) || in == y) continue;
            const char *op = mg_tensor_op_name(g, in);
            if (!strcmp(op, "input") || !strcmp(op, "param")) continue;
            int ok = 0;
            for (int i = 0; i < n_kept; i++) ok |= kept[i] == in;
            ck_assert_msg(ok,
                          "backward #%d reads forward #%d (%s), which is "
                          "not a checkpoint",
                          (int)t, (int)in, op);
        }
    }
}

START_TEST(test_collection_keeps_exactly_listed) {
    tm_mlp probe;
    ck_assert(tm_mlp_build(&probe, MG_F64, 8, 4, 8, 3, 2, 1, 0.0, NULL) ==
              MG_OK);
    mg_tensor listed[2] = {probe.h[2], probe.h[5]};
    mg_graph_free(probe.g);
    tm_mlp m;
    mg_checkpoints c = {
        .policy = MG_CKPT_COLLECTION, .tensors = listed, .n_tensors = 2};
    ck_assert(tm_mlp_build(&m, MG_F64, 8, 4, 8, 3, 2, 1, 0.0, &c) == MG_OK);
    mg_tensor chosen[8];
    ck_assert_int_eq(mg_graph_checkpoints(m.g, chosen, 8), 2);
    ck_assert_int_eq(chosen[0], listed[0]);
    ck_assert_int_eq(chosen[1], listed[1]);
    assert_reads_only(m.g, listed, 2, m.loss);
    mg_graph_free(m.g);
}
END_TEST

START_TEST(test_tagged_checkpoints) {
    mg_graph *g = mg_graph_new();
    int64_t s[2] = {4, 4};
    mg_tensor x = mg_param(g, "x", MG_F64, 2, s);
    mg_tensor a = mg_tanh(g, x), b = mg_exp(g, a), c = mg_sigmoid(g, b);
    mg_tensor d = mg_tanh(g, c);
    mg_tensor L = mg_sum(g, d, 0, NULL, 0);
    ck_assert(mg_tensor_set_checkpoint(g, b, 1) == MG_OK);
    ck_assert(mg_tensor_is_checkpoint(g, b));
    ck_assert_int_eq(mg_tensor_set_checkpoint(g, x, 1), MG_ERR_INVALID_ARG);
    mg_checkpoints ck = {.policy = MG_CKPT_COLLECTION};
    mg_tensor gx;
    ck_assert_msg(mg_gradients(g, &L, 1, NULL, &x, 1, &ck, &gx) == MG_OK, "%s",
                  mg_last_error());
    mg_tensor kept[1] = {b};
    assert_reads_only(g, kept, 1, L);
    double xv[16], gv[16], ref[16];
    for (int i = 0; i < 16; i++) xv[i] = 0.1 * i - 0.7;
    mg_binding in = {x, xv};
    void *bufs[1] = {gv};
    TH_RUN_OK("tagged", g, 1, &gx, bufs, 1, &in, 0);
    for (int i = 0; i < 16; i++) { /* chain rule by hand */
        double ta = tanh(xv[i]), eb = exp(ta), sc = 1 / (1 + exp(-eb));
        double td = tanh(sc);
        ref[i] = (1 - td * td) * sc * (1 - sc) * eb * (1 - ta * ta);
    }
    th_check_f64("tagged grad", gv, ref, 16, 1e-12, 1e-12);
    mg_graph_free(g);
}
END_TEST

/* A U shape: decoder level i reads encoder level i, so no single tensor
 * separates the first half from the second. The memory policy must still
 * find checkpoints (multi-tensor cuts) and save memory, exactly. */
START_TEST(test_unet_without_articulation_points) {
    const int levels = 12;
    mg_graph *graphs[2];
    double grads[2][16 * 16];
    size_t peaks[2];
    for (int v = 0; v < 2; v++) {
        mg_graph *g = graphs[v] = mg_graph_new();
        int64_t s[2] = {16, 16};
        mg_tensor x = mg_param(g, "x", MG_F64, 2, s);
        mg_tensor enc[16], h = x;
        for (int i = 0; i < levels; i++)
            h = enc[i] = mg_tanh(g, mg_scale(g, h, 0.9));
        for (int i = levels - 1; i >= 0; i--)
            h = mg_sigmoid(g,
                           mg_add(g, mg_exp(g, mg_scale(g, h, 0.5)), enc[i]));
        mg_tensor L = mg_sum(g, h, 0, NULL, 0);
        mg_checkpoints c = {.policy = v ? MG_CKPT_MEMORY : MG_CKPT_NONE};
        mg_tensor gx;
        ck_assert_msg(mg_gradients(g, &L, 1, NULL, &x, 1, &c, &gx) == MG_OK,
                      "%s", mg_last_error());
        double xv[256];
        for (int i = 0; i < 256; i++) xv[i] = sin(i);
        mg_binding b[2] = {{x, xv}, {gx, grads[v]}};
        mg_plan *p = NULL;
        ck_assert(mg_plan_compile(g, &gx, 1, NULL, &p) == MG_OK);
        mg_exec *ex = NULL;
        ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
        ck_assert(mg_exec_run(ex, p, b, 2, 0) == MG_OK);
        mg_pool_stats st;
        mg_exec_pool_stats(ex, &st);
        peaks[v] = st.peak_bytes_in_use;
        ck_assert_uint_eq(peaks[v], mg_plan_predicted_peak(p, b, 2));
        if (v) {
            ck_assert_msg(mg_graph_checkpoints(g, NULL, 0) > 0,
                          "no checkpoints chosen");
            FILE *devnull = fopen("/dev/null", "w");
            ck_assert(mg_plan_report(p, b, 2, devnull) == MG_OK);
            fclose(devnull);
        }
        mg_exec_free(ex);
        mg_plan_free(p);
    }
    ck_assert_msg(memcmp(grads[0], grads[1], sizeof grads[0]) == 0,
                  "U-shape gradients differ under the memory policy");
    ck_assert_msg(peaks[1] < peaks[0], "memory policy peak %zu >= plain %zu",
                  peaks[1], peaks[0]);
    mg_graph_free(graphs[0]);
    mg_graph_free(graphs[1]);
}
END_TEST

#define EXPECT_CKPT_ERR(c, status, needle)                                     \
    do {                                                                       \
        int n0_ = mg_graph_num_tensors(g);                                     \
        mg_status s_ = mg_gradients(g, &L, 1, NULL, &x, 1, (c), &gx);          \
        ck_assert_msg(s_ == (status), "got %s: %s", mg_status_str(s_),         \
                      mg_last_error());                                        \
        ck_assert_msg(strstr(mg_last_error(), (needle)), "'%s' lacks '%s'",    \
                      mg_last_error(), (needle));                              \
        ck_assert_int_eq(mg_graph_num_tensors(g), n0_);                        \
        ck_assert_int_eq(mg_graph_checkpoints(g, NULL, 0), 0);                 \
    } while (0)

START_TEST(test_bad_checkpoints) {
    mg_graph *g = mg_graph_new();
    int64_t s[1] = {5};
    mg_tensor x = mg_param(g, "x", MG_F64, 1, s);
    mg_tensor a = mg_tanh(g, x);
    mg_tensor L = mg_sum(g, mg_exp(g, a), 0, NULL, 0);
    mg_tensor other = mg_exp(g, x); /* not an ancestor of L */
    mg_tensor u = mg_input(g, "u", MG_F64, 1, s);
    mg_tensor lonely = mg_sum(g, mg_tanh(g, u), 0, NULL, 0);
    mg_tensor gx;
    mg_checkpoints c = {.policy = MG_CKPT_COLLECTION, .n_tensors = 1};
    mg_tensor bad = 4242;
    c.tensors = &bad;
    EXPECT_CKPT_ERR(&c, MG_ERR_UNKNOWN_ID, "4242");
    c.tensors = &other;
    EXPECT_CKPT_ERR(&c, MG_ERR_INVALID_ARG, "not in the forward graph");
    c.tensors = &L;
    EXPECT_CKPT_ERR(&c, MG_ERR_INVALID_ARG, "is a y");
    c.tensors = &x;
    EXPECT_CKPT_ERR(&c, MG_ERR_INVALID_ARG, "caller memory");
    /* no path from the x to the y */
    mg_checkpoints mem = {.policy = MG_CKPT_MEMORY};
    int n0 = mg_graph_num_tensors(g);
    mg_status st = mg_gradients(g, &lonely, 1, NULL, &x, 1, &mem, &gx);
    ck_assert_int_eq(st, MG_ERR_INVALID_ARG);
    ck_assert_msg(strstr(mg_last_error(), "no y depends on any x"), "%s",
                  mg_last_error());
    ck_assert_int_eq(mg_graph_num_tensors(g), n0);
    mg_graph_free(g);
    /* an empty graph has no tensor to differentiate */
    mg_graph *empty = mg_graph_new();
    mg_tensor y0 = 0, x0 = 0;
    st = mg_gradients(empty, &y0, 1, NULL, &x0, 1, &mem, &gx);
    ck_assert_int_eq(st, MG_ERR_UNKNOWN_ID);
    ck_assert_msg(strstr(mg_last_error(), "0 tensors"), "%s", mg_last_error());
    mg_graph_free(empty);
}
END_TEST

/* mg_ckpt_policy_name and mg_ckpt_policy_parse: every policy's name, and
 * back; anything else refused. */
START_TEST(test_policy_names) {
    const char *names[] = {"none", "collection", "memory", "speed", "budget"};
    for (int p = MG_CKPT_NONE; p <= MG_CKPT_BUDGET; p++) {
        ck_assert_str_eq(mg_ckpt_policy_name((mg_ckpt_policy)p), names[p]);
        mg_ckpt_policy got = (mg_ckpt_policy)-1;
        ck_assert_int_eq(mg_ckpt_policy_parse(names[p], &got), MG_OK);
        ck_assert_int_eq(got, p);
    }
    ck_assert_str_eq(mg_ckpt_policy_name((mg_ckpt_policy)9), "?");
    ck_assert_str_eq(mg_ckpt_policy_name((mg_ckpt_policy)-1), "?");
    mg_ckpt_policy kept = MG_CKPT_SPEED;
    ck_assert_int_eq(mg_ckpt_policy_parse("Memory", &kept), MG_ERR_INVALID_ARG);
    ck_assert_msg(strstr(mg_last_error(), "'Memory' is no policy"), "%s",
                  mg_last_error());
    ck_assert_int_eq(mg_ckpt_policy_parse("", &kept), MG_ERR_INVALID_ARG);
    ck_assert_int_eq(mg_ckpt_policy_parse(NULL, &kept), MG_ERR_INVALID_ARG);
    ck_assert_int_eq(kept, MG_CKPT_SPEED);
    ck_assert_int_eq(mg_ckpt_policy_parse("none", NULL), MG_ERR_INVALID_ARG);
}
END_TEST

/* The DOT export marks checkpoints and recomputed ops; the report names
 * the figures a person needs. */
START_TEST(test_dot_and_report) {
    tm_mlp m;
    mg_checkpoints c = {.policy = MG_CKPT_MEMORY};
    ck_assert(tm_mlp_build(&m, MG_F32, 16, 8, 8, 3, 2, 1, 0.0, &c) == MG_OK);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ck_assert(mg_graph_write_dot(m.g, f) == MG_OK);
    fclose(f);
    ck_assert_msg(strstr(buf, "style=dashed") && strstr(buf, "style=bold"),
                  "DOT marks neither recompute nor checkpoints");
    free(buf);
    tm_mlp_data d;
    tm_mlp_data_init(&d, &m, 1, 1);
    mg_plan *p = NULL;
    ck_assert(mg_plan_compile(m.g, d.outs, d.n_outs, NULL, &p) == MG_OK);
    f = open_memstream(&buf, &len);
    ck_assert(mg_plan_report(p, d.binds, d.n_binds, f) == MG_OK);
    fclose(f);
    ck_assert_msg(strstr(buf, "checkpoints:") && strstr(buf, "segment 1") &&
                      strstr(buf, "of one forward pass") &&
                      strstr(buf, "plain backprop"),
                  "report: %s", buf);
    free(buf);
    mg_plan_summary s;
    ck_assert(mg_plan_summarize(p, d.binds, d.n_binds, &s) == MG_OK);
    ck_assert(s.n_checkpoints > 0 && s.n_segments > 0 && s.n_recompute > 0);
    ck_assert(s.predicted_peak < s.predicted_peak_without_recompute);
    ck_assert_int_eq(mg_plan_summarize(NULL, NULL, 0, &s), MG_ERR_INVALID_ARG);
    mg_plan_free(p);
    tm_mlp_data_free(&d, &m);
    mg_graph_free(m.g);
}
END_TEST

/* The ops of the ATen-level capture (issue 45) in a deep chain: where on
 * a comparison, clamp, maximum, cumsum, gather, index_select, abs, sin,
 * cos, reciprocal and rsqrt in every layer. Under the memory policy the
 * backward pass recomputes them (the plan says so), and the gradients
 * equal plain backprop's bit for bit, in f32 and f64. */
#define ATEN_B 8
#define ATEN_W 12
#define ATEN_DEPTH 6

static void aten_chain_grads(mg_dtype dt, mg_ckpt_policy policy,
                             double *recompute_flops, void **grads) {
    mg_graph *g = mg_graph_new();
    ck_assert(g != NULL);
    mg_tensor x = mg_input(g, "x", dt, 2, S(ATEN_B, ATEN_W));
    mg_tensor idx = mg_input(g, "idx", MG_I32, 2, S(ATEN_B, ATEN_W));
    mg_tensor sel = mg_input(g, "sel", MG_I64, 1, S(ATEN_W));
    mg_tensor zero = mg_fill(g, dt, 0, NULL, 0.0);
    mg_tensor one = mg_fill(g, dt, 0, NULL, 1.0);
    mg_tensor params[2 * ATEN_DEPTH], h = x;
    for (int l = 0; l < ATEN_DEPTH; l++) {
        mg_tensor w = mg_param(g, "w", dt, 2, S(ATEN_W, ATEN_W));
        mg_tensor b = mg_param(g, "b", dt, 1, S(ATEN_W));
        params[2 * l] = w;
        params[2 * l + 1] = b;
        mg_tensor z = mg_add(g, mg_matmul(g, h, w, 0, 0), b);
        mg_tensor a =
            mg_where(g, mg_gt(g, z, zero), mg_sin(g, z), mg_scale(g, z, 0.1));
        a = mg_maximum(g, mg_clamp(g, a, -0.8, 0.8),
                       mg_scale(g, mg_cos(g, z), 0.5));
        a = mg_scale(g, mg_cumsum(g, a, 1), 0.2);
        a = mg_index_select(g, mg_gather(g, a, 1, idx), 1, sel);
        mg_tensor az = mg_add(g, mg_abs(g, z), one);
        a = mg_add(g, a, mg_mul(g, mg_reciprocal(g, az), mg_scale(g, az, 0.1)));
        h = mg_add(g, a, mg_rsqrt(g, mg_add(g, mg_mul(g, z, z), one)));
    }
    mg_tensor loss = mg_sum(g, mg_mul(g, h, h), 0, NULL, 0);
    TH_OK_T("aten chain", loss);
    mg_tensor outs[2 * ATEN_DEPTH];
    mg_checkpoints c = {.policy = policy};
    ck_assert_msg(mg_gradients(g, &loss, 1, NULL, params, 2 * ATEN_DEPTH, &c,
                               outs) == MG_OK,
                  "%s", mg_last_error());
    /* data: the same for every build */
    th_rng r;
    th_rng_init(&r, 45);
    const size_t es = mg_dtype_size(dt);
    mg_binding binds[3 + 2 * ATEN_DEPTH + 2 * ATEN_DEPTH];
    int nb = 0;
    double vals[ATEN_W * ATEN_W];
    th_rand_vals(&r, vals, ATEN_B * ATEN_W, -1, 1);
    void *xd = malloc(ATEN_B * ATEN_W * es);
    for (int i = 0; i < ATEN_B * ATEN_W; i++)
        if (dt == MG_F32) ((float *)xd)[i] = (float)vals[i];
        else ((double *)xd)[i] = vals[i];
    int32_t iv[ATEN_B * ATEN_W];
    int64_t sv[ATEN_W];
    for (int i = 0; i < ATEN_B * ATEN_W; i++)
        iv[i] = (int32_t)(th_rng_next(&r) % ATEN_W);
    for (int i = 0; i < ATEN_W; i++)
        sv[i] = (int64_t)(th_rng_next(&r) % ATEN_W);
    binds[nb++] = (mg_binding){x, xd};
    binds[nb++] = (mg_binding){idx, iv};
    binds[nb++] = (mg_binding){sel, sv};
    void *pd[2 * ATEN_DEPTH];
    for (int k = 0; k < 2 * ATEN_DEPTH; k++) {
        const int n = k % 2 ? ATEN_W : ATEN_W * ATEN_W;
        th_rand_vals(&r, vals, n, -0.5, 0.5);
        pd[k] = malloc((size_t)n * es);
        for (int i = 0; i < n; i++)
            if (dt == MG_F32) ((float *)pd[k])[i] = (float)vals[i];
            else ((double *)pd[k])[i] = vals[i];
        binds[nb++] = (mg_binding){params[k], pd[k]};
    }
    mg_plan *p = NULL;
    ck_assert_msg(mg_plan_compile(g, outs, 2 * ATEN_DEPTH, NULL, &p) == MG_OK,
                  "%s", mg_last_error());
    mg_plan_summary sum;
    ck_assert(mg_plan_summarize(p, binds, nb, &sum) == MG_OK);
    *recompute_flops = sum.recompute_flops;
    mg_plan_free(p);
    TH_RUN_OK("aten chain", g, 2 * ATEN_DEPTH, outs, grads, nb, binds, 7);
    free(xd);
    for (int k = 0; k < 2 * ATEN_DEPTH; k++) free(pd[k]);
    mg_graph_free(g);
}

START_TEST(test_aten_ops_bit_exact) {
    for (int d = 0; d < 2; d++) {
        const mg_dtype dt = d ? MG_F64 : MG_F32;
        const size_t es = mg_dtype_size(dt);
        void *plain[2 * ATEN_DEPTH], *mem[2 * ATEN_DEPTH];
        for (int k = 0; k < 2 * ATEN_DEPTH; k++) {
            const size_t n = k % 2 ? ATEN_W : ATEN_W * ATEN_W;
            plain[k] = calloc(n, es);
            mem[k] = calloc(n, es);
        }
        double rf_plain = -1, rf_mem = -1;
        aten_chain_grads(dt, MG_CKPT_NONE, &rf_plain, plain);
        aten_chain_grads(dt, MG_CKPT_MEMORY, &rf_mem, mem);
        ck_assert_msg(rf_plain == 0 && rf_mem > 0,
                      "%s: recompute flops %g under none, %g under memory",
                      mg_dtype_name(dt), rf_plain, rf_mem);
        for (int k = 0; k < 2 * ATEN_DEPTH; k++) {
            const size_t n = k % 2 ? ATEN_W : ATEN_W * ATEN_W;
            ck_assert_msg(memcmp(plain[k], mem[k], n * es) == 0,
                          "%s: gradient %d differs between policies none and "
                          "memory",
                          mg_dtype_name(dt), k);
            free(plain[k]);
            free(mem[k]);
        }
    }
}
END_TEST

TH_MAIN("checkpoint", "checkpoint", 300, test_policies_bit_exact,
        test_memory_against_depth, test_speed_recomputes_no_matmul,
        test_collection_keeps_exactly_listed, test_tagged_checkpoints,
        test_unet_without_articulation_points, test_bad_checkpoints,
        test_policy_names, test_dot_and_report, test_aten_ops_bit_exact)
