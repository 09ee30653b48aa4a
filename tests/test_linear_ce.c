/*
 * test_linear_ce.c - mg_linear_cross_entropy (issue 46 item 3), the final
 * projection and cross-entropy fused and made chunk by chunk of rows:
 *   - its loss and both gradients equal the unfused pair
 *     cross_entropy(matmul(h, w^T)) in f32 and f64, for chunks that divide
 *     N, one that does not, one row, N and more than N, and int64 labels;
 *   - the gradients of a small model ending in it are the same bits under
 *     policies none, memory, speed, budget and none with compaction, and
 *     the pool's measured peak equals the prediction under each;
 *   - at N = 512, V = 8192, D = 64 its measured peak (= predicted) is far
 *     below the unfused pair's, which keeps [N, V] logits and their
 *     gradient, and shrinks with the chunk;
 *   - with an ignore_index (mg_linear_cross_entropy_ex), the loss and
 *     gradients equal the unfused pair on the rows not ignored (the mean
 *     over those), ignored rows get zero gradient, an ignore_index inside
 *     [0, V) works, all rows ignored gives a NaN loss and zero gradients
 *     (as PyTorch), and a label that is neither in range nor ignored
 *     still fails the run;
 *   - given its logits (the matmul a model returns anyway), the forward
 *     reads them: the same loss to rounding, the same gradient bits;
 *   - bad shapes, dtypes, chunk sizes and labels are refused with the
 *     status and a message naming the op.
 * The finite-difference check of both gradients is in
 * tests/gradcheck/loss.c.
 */
#include "helpers.h"

/* ------------------------------------------------------------------ data */

/* h [n, d], w [v, d] and labels [n]; doubles, converted per dtype. */
typedef struct lce_data {
    int64_t n, d, v;
    double *h, *w;
    int32_t *lab32;
    int64_t *lab64;
} lce_data;

static void lce_data_make(lce_data *x, int64_t n, int64_t d, int64_t v,
                          uint64_t seed) {
    th_rng r;
    th_rng_init(&r, seed);
    x->n = n, x->d = d, x->v = v;
    x->h = malloc((size_t)(n * d) * sizeof *x->h);
    x->w = malloc((size_t)(v * d) * sizeof *x->w);
    x->lab32 = malloc((size_t)n * sizeof *x->lab32);
    x->lab64 = malloc((size_t)n * sizeof *x->lab64);
    ck_assert(x->h && x->w && x->lab32 && x->lab64);
    th_fill_f64(&r, x->h, n * d, -1.5, 1.5, 0.0);
    th_fill_f64(&r, x->w, v * d, -1.0, 1.0, 0.0);
    for (int64_t i = 0; i < n; i++) {
        x->lab32[i] = (int32_t)(th_rng_next(&r) % (uint64_t)v);
        x->lab64[i] = x->lab32[i];
    }
}

static void lce_data_free(lce_data *x) {
    free(x->h);
    free(x->w);
    free(x->lab32);
    free(x->lab64);
}

/* n doubles as dtype, malloc'd. */
static void *as_dtype(const double *src, int64_t n, mg_dtype dt) {
    void *p = malloc((size_t)n * mg_dtype_size(dt));
    ck_assert(p != NULL);
    for (int64_t i = 0; i < n; i++) {
        if (dt == MG_F32) ((float *)p)[i] = (float)src[i];
        else ((double *)p)[i] = src[i];
    }
    return p;
}

static double elem(const void *p, mg_dtype dt, int64_t i) {
    return dt == MG_F32 ? (double)((const float *)p)[i]
                        : ((const double *)p)[i];
}

/* ------------------------------------------------------------------ fused
 * against unfused */

typedef struct lce_out {
    double loss;
    double *gh, *gw; /* as doubles */
} lce_out;

/* Loss, dL/dh and dL/dw of the fused op (chunk >= 0) or of
 * cross_entropy(matmul(h, w, 0, 1)) (chunk < 0). */
static void lce_run(const lce_data *x, mg_dtype dt, int i64_labels,
                    int64_t chunk, lce_out *o) {
    mg_graph *g = mg_graph_new();
    ck_assert(g != NULL);
    mg_tensor h = mg_input(g, "h", dt, 2, S(x->n, x->d));
    mg_tensor w = mg_param(g, "w", dt, 2, S(x->v, x->d));
    mg_tensor lab =
        mg_input(g, "labels", i64_labels ? MG_I64 : MG_I32, 1, S(x->n));
    mg_tensor loss = chunk >= 0
                         ? mg_linear_cross_entropy(g, h, w, lab, chunk)
                         : mg_cross_entropy(g, mg_matmul(g, h, w, 0, 1), lab);
    TH_OK_T("loss", loss);
    th_check_shape("loss", g, loss, 0, NULL);
    const mg_tensor xs[2] = {h, w};
    mg_tensor gr[2];
    ck_assert_msg(mg_gradients(g, &loss, 1, NULL, xs, 2, NULL, gr) == MG_OK,
                  "%s", mg_last_error());
    th_check_shape("dh", g, gr[0], 2, S(x->n, x->d));
    th_check_shape("dw", g, gr[1], 2, S(x->v, x->d));
    void *hd = as_dtype(x->h, x->n * x->d, dt);
    void *wd = as_dtype(x->w, x->v * x->d, dt);
    const mg_binding in[3] = {
        {h, hd}, {w, wd}, {lab, i64_labels ? (void *)x->lab64 : x->lab32}};
    const size_t es = mg_dtype_size(dt);
    void *ly = malloc(es), *gh = malloc((size_t)(x->n * x->d) * es),
         *gw = malloc((size_t)(x->v * x->d) * es);
    ck_assert(ly && gh && gw);
    const mg_tensor outs[3] = {loss, gr[0], gr[1]};
    void *bufs[3] = {ly, gh, gw};
    TH_RUN_OK(chunk >= 0 ? "fused" : "unfused", g, 3, outs, bufs, 3, in, 1);
    o->loss = elem(ly, dt, 0);
    o->gh = malloc((size_t)(x->n * x->d) * sizeof(double));
    o->gw = malloc((size_t)(x->v * x->d) * sizeof(double));
    ck_assert(o->gh && o->gw);
    for (int64_t i = 0; i < x->n * x->d; i++) o->gh[i] = elem(gh, dt, i);
    for (int64_t i = 0; i < x->v * x->d; i++) o->gw[i] = elem(gw, dt, i);
    free(ly), free(gh), free(gw), free(hd), free(wd);
    mg_graph_free(g);
}

static void lce_out_free(lce_out *o) {
    free(o->gh);
    free(o->gw);
}

/* N = 10 rows: chunks 0 (the default: all 10), 1, 3 (does not divide
 * 10: chunks of 3, 3, 3, 1), 4, 10, and 25 (cut to 10); int32 and int64
 * labels. f64 within 1e-12 of the pair, f32 within 1e-5 relative. */
START_TEST(test_matches_unfused_pair) {
    lce_data x;
    lce_data_make(&x, 10, 7, 13, 46);
    const int64_t chunks[] = {0, 1, 3, 4, 10, 25};
    for (int dti = 0; dti < 2; dti++) {
        const mg_dtype dt = th_dtypes[dti];
        const double tol = dt == MG_F64 ? 1e-12 : 2e-5;
        for (int i64 = 0; i64 < 2; i64++) {
            lce_out ref;
            lce_run(&x, dt, i64, -1, &ref);
            for (size_t c = 0; c < sizeof chunks / sizeof *chunks; c++) {
                lce_out got;
                lce_run(&x, dt, i64, chunks[c], &got);
                char what[96];
                snprintf(what, sizeof what, "%s chunk %lld i64 %d loss",
                         mg_dtype_name(dt), (long long)chunks[c], i64);
                th_check_f64(what, &got.loss, &ref.loss, 1, tol, tol);
                snprintf(what, sizeof what, "%s chunk %lld i64 %d dh",
                         mg_dtype_name(dt), (long long)chunks[c], i64);
                th_check_f64(what, got.gh, ref.gh, x.n * x.d, tol, tol);
                snprintf(what, sizeof what, "%s chunk %lld i64 %d dw",
                         mg_dtype_name(dt), (long long)chunks[c], i64);
                th_check_f64(what, got.gw, ref.gw, x.v * x.d, tol, tol);
                lce_out_free(&got);
            }
            lce_out_free(&ref);
        }
    }
    lce_data_free(&x);
}
END_TEST

/* Int32 and int64 labels give the same bits, and chunking changes only
 * rounding: chunk 3 against chunk 10 in f64 within 1e-13. */
START_TEST(test_label_dtypes_same_bits) {
    lce_data x;
    lce_data_make(&x, 10, 5, 9, 7);
    for (int dti = 0; dti < 2; dti++) {
        lce_out a, b;
        lce_run(&x, th_dtypes[dti], 0, 3, &a);
        lce_run(&x, th_dtypes[dti], 1, 3, &b);
        ck_assert(memcmp(&a.loss, &b.loss, sizeof a.loss) == 0);
        ck_assert(memcmp(a.gh, b.gh, (size_t)(x.n * x.d) * sizeof *a.gh) == 0);
        ck_assert(memcmp(a.gw, b.gw, (size_t)(x.v * x.d) * sizeof *a.gw) == 0);
        lce_out_free(&a);
        lce_out_free(&b);
    }
    lce_data_free(&x);
}
END_TEST

/* The builder resolves chunk_rows and the op table lends chunk x V
 * elements (and N row losses in the forward op) as workspace: read off the
 * predicted peak of a forward-only plan, which is that workspace alone
 * (the loss is bound to caller memory). */
START_TEST(test_default_chunk_and_workspace) {
    const struct {
        int64_t n, v, ask, rows;
    } c[] = {
        {512, 8192, 0, 256},  /* 2^21 / 8192 */
        {512, 50257, 0, 41},  /* 2^21 / 50257, rounded down */
        {100, 8192, 0, 100},  /* the default cut to N */
        {512, 8192, 64, 64},  /* as asked */
        {512, 8192, 999, 512} /* cut to N */
    };
    for (size_t k = 0; k < sizeof c / sizeof *c; k++) {
        mg_graph *g = mg_graph_new();
        mg_tensor h = mg_input(g, "h", MG_F32, 2, S(c[k].n, 8));
        mg_tensor w = mg_param(g, "w", MG_F32, 2, S(c[k].v, 8));
        mg_tensor lab = mg_input(g, "lab", MG_I32, 1, S(c[k].n));
        mg_tensor y = mg_linear_cross_entropy(g, h, w, lab, c[k].ask);
        TH_OK_T("lce", y);
        mg_plan_options o = {.no_grad = 1};
        mg_plan *p = NULL;
        ck_assert_int_eq(mg_plan_compile(g, &y, 1, &o, &p), MG_OK);
        float out = 0;
        const mg_binding b = {y, &out};
        const size_t want = mg_pool_size_class(
            (size_t)(c[k].rows * c[k].v + c[k].n) * sizeof(float));
        ck_assert_msg(mg_plan_predicted_peak(p, &b, 1) == want,
                      "n %lld v %lld chunk %lld: predicted %zu, want %zu "
                      "(%lld rows)",
                      (long long)c[k].n, (long long)c[k].v, (long long)c[k].ask,
                      mg_plan_predicted_peak(p, &b, 1), want,
                      (long long)c[k].rows);
        mg_plan_free(p);
        mg_graph_free(g);
    }
}
END_TEST

/* ------------------------------------------------------------------ a model
 * x [n, din] -> tanh(x w1) -> relu(. w2) -> linear_cross_entropy(., wout):
 * parameters w1 [din, d], w2 [d, d], wout [v, d]. The relu, which only the
 * fused op reads, is what compaction may make again for the backward pass
 * (rebuild_cheap) rather than keep. */

typedef struct lce_model {
    mg_graph *g;
    mg_dtype dt;
    int64_t v;
    mg_tensor x, lab, w[3], loss, grads[3];
} lce_model;

/* mg_gradients' status (the graph is built either way; free m->g). */
static mg_status model_build(lce_model *m, mg_dtype dt, int64_t n, int64_t din,
                             int64_t d, int64_t v, int64_t chunk, int fused,
                             const mg_checkpoints *c) {
    m->g = mg_graph_new();
    ck_assert(m->g != NULL);
    m->dt = dt;
    m->v = v;
    m->x = mg_input(m->g, "x", dt, 2, S(n, din));
    m->lab = mg_input(m->g, "lab", MG_I32, 1, S(n));
    m->w[0] = mg_param(m->g, "w1", dt, 2, S(din, d));
    m->w[1] = mg_param(m->g, "w2", dt, 2, S(d, d));
    m->w[2] = mg_param(m->g, "wout", dt, 2, S(v, d));
    mg_tensor h = mg_tanh(m->g, mg_matmul(m->g, m->x, m->w[0], 0, 0));
    h = mg_relu(m->g, mg_matmul(m->g, h, m->w[1], 0, 0));
    m->loss = fused ? mg_linear_cross_entropy(m->g, h, m->w[2], m->lab, chunk)
                    : mg_cross_entropy(m->g, mg_matmul(m->g, h, m->w[2], 0, 1),
                                       m->lab);
    TH_OK_T("model loss", m->loss);
    return mg_gradients(m->g, &m->loss, 1, NULL, m->w, 3, c, m->grads);
}

typedef struct model_run {
    void *grads[3];
    size_t bytes[3];
    size_t peak, predicted;
} model_run;

/* One training step with every input, parameter, the loss and the
 * gradients in caller memory: the pool holds only activations, recomputed
 * copies, intermediate gradients and workspace. */
static void model_run_step(const lce_model *m, uint64_t seed, model_run *r) {
    th_rng rng;
    th_rng_init(&rng, seed);
    mg_binding b[9]; /* x, three weights, labels, loss, three grads */
    int nb = 0;
    void *own[8];
    int n_own = 0;
    const mg_tensor leaves[4] = {m->x, m->w[0], m->w[1], m->w[2]};
    for (int i = 0; i < 4; i++) {
        const int64_t n = mg_tensor_numel(m->g, leaves[i]);
        double *tmp = malloc((size_t)n * sizeof *tmp);
        ck_assert(tmp != NULL);
        th_fill_f64(&rng, tmp, n, -1.0, 1.0, 0.0);
        own[n_own] = as_dtype(tmp, n, m->dt);
        free(tmp);
        b[nb++] = (mg_binding){leaves[i], own[n_own++]};
    }
    const int64_t n = mg_tensor_numel(m->g, m->lab);
    int32_t *lab = malloc((size_t)n * sizeof *lab);
    ck_assert(lab != NULL);
    for (int64_t i = 0; i < n; i++)
        lab[i] = (int32_t)(th_rng_next(&rng) % (uint64_t)m->v);
    b[nb++] = (mg_binding){m->lab, lab};
    double loss[1]; /* room for either dtype */
    b[nb++] = (mg_binding){m->loss, loss};
    for (int i = 0; i < 3; i++) {
        r->bytes[i] = mg_tensor_nbytes(m->g, m->grads[i]);
        r->grads[i] = malloc(r->bytes[i]);
        ck_assert(r->grads[i] != NULL);
        b[nb++] = (mg_binding){m->grads[i], r->grads[i]};
    }
    mg_tensor outs[4] = {m->loss, m->grads[0], m->grads[1], m->grads[2]};
    mg_plan *p = NULL;
    mg_exec *ex = NULL;
    ck_assert_msg(mg_plan_compile(m->g, outs, 4, NULL, &p) == MG_OK, "%s",
                  mg_last_error());
    ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
    ck_assert_msg(mg_exec_run(ex, p, b, nb, 3) == MG_OK, "%s", mg_last_error());
    mg_pool_stats st;
    ck_assert(mg_exec_pool_stats(ex, &st) == MG_OK);
    r->peak = st.peak_bytes_in_use;
    r->predicted = mg_plan_predicted_peak(p, b, nb);
    mg_exec_free(ex);
    mg_plan_free(p);
    for (int i = 0; i < n_own; i++) free(own[i]);
    free(lab);
}

static void model_run_free(model_run *r) {
    for (int i = 0; i < 3; i++) free(r->grads[i]);
}

/* Policies none, memory, speed and budget (at the smallest budget that
 * fits), and none with compaction: the same bits in every gradient, and
 * measured peak == predicted under each. chunk 3 of 20 rows (7 chunks,
 * the last of 2), f32 and f64. */
START_TEST(test_policies_bit_equal_and_peak) {
    const mg_checkpoints pol[5] = {{.policy = MG_CKPT_NONE},
                                   {.policy = MG_CKPT_MEMORY},
                                   {.policy = MG_CKPT_SPEED},
                                   {.policy = MG_CKPT_BUDGET},
                                   {.policy = MG_CKPT_NONE, .compact = 1}};
    for (int dti = 0; dti < 2; dti++) {
        const mg_dtype dt = th_dtypes[dti];
        model_run ref = {0};
        for (int k = 0; k < 5; k++) {
            lce_model m;
            mg_checkpoints c = pol[k];
            if (c.policy == MG_CKPT_BUDGET) {
                /* a budget of 1 byte names the smallest that fits */
                c.budget_bytes = 1;
                ck_assert_int_eq(model_build(&m, dt, 20, 6, 16, 16, 3, 1, &c),
                                 MG_ERR_NOMEM);
                mg_graph_free(m.g);
                c.budget_bytes = th_budget_smallest();
            }
            ck_assert_msg(model_build(&m, dt, 20, 6, 16, 16, 3, 1, &c) == MG_OK,
                          "case %d: %s", k, mg_last_error());
            model_run r = {0};
            model_run_step(&m, 5, &r);
            ck_assert_msg(r.peak == r.predicted,
                          "%s case %d: peak %zu, predicted %zu",
                          mg_dtype_name(dt), k, r.peak, r.predicted);
            if (k == 0) {
                ref = r;
            } else {
                for (int i = 0; i < 3; i++)
                    ck_assert_msg(
                        memcmp(r.grads[i], ref.grads[i], r.bytes[i]) == 0,
                        "%s case %d: gradient %d differs from "
                        "policy none's",
                        mg_dtype_name(dt), k, i);
                model_run_free(&r);
            }
            mg_graph_free(m.g);
        }
        model_run_free(&ref);
    }
}
END_TEST

/* N = 512, V = 8192, D = 64 in f32: the unfused pair keeps the [N, V]
 * logits (16 MiB) for the backward pass and makes their gradient (16 MiB
 * more); the fused op's peak is its chunk, so it is far below, and
 * smaller chunks lower it further. Every peak is the predicted one. */
START_TEST(test_peak_below_unfused) {
    const int64_t n = 512, v = 8192, d = 64;
    const size_t logits = (size_t)(n * v) * sizeof(float);
    lce_model m;
    model_run un = {0};
    ck_assert(model_build(&m, MG_F32, n, 32, d, v, 0, 0, NULL) == MG_OK);
    model_run_step(&m, 9, &un);
    mg_graph_free(m.g);
    ck_assert_msg(un.peak == un.predicted, "unfused: peak %zu, predicted %zu",
                  un.peak, un.predicted);
    ck_assert_msg(un.peak >= 2 * logits,
                  "unfused peak %zu below two logits tensors (%zu)", un.peak,
                  2 * logits);
    const int64_t chunks[3] = {0, 64, 16};
    size_t last = SIZE_MAX;
    for (int k = 0; k < 3; k++) {
        model_run r = {0};
        ck_assert(model_build(&m, MG_F32, n, 32, d, v, chunks[k], 1, NULL) ==
                  MG_OK);
        model_run_step(&m, 9, &r);
        mg_graph_free(m.g);
        ck_assert_msg(r.peak == r.predicted,
                      "chunk %lld: peak %zu, predicted %zu",
                      (long long)chunks[k], r.peak, r.predicted);
        /* the default chunk (256 rows) is half the logits; the rest of
         * the peak is O(N D + V D) */
        ck_assert_msg(r.peak < un.peak / 3,
                      "chunk %lld: fused peak %zu not below a third of the "
                      "unfused %zu",
                      (long long)chunks[k], r.peak, un.peak);
        ck_assert_msg(r.peak < last, "chunk %lld: peak %zu not below %zu",
                      (long long)chunks[k], r.peak, last);
        last = r.peak;
        /* same gradients as the pair, to f32 accuracy */
        for (int i = 0; i < 3; i++) {
            const float *a = r.grads[i], *e = un.grads[i];
            const int64_t cnt = (int64_t)(r.bytes[i] / sizeof(float));
            double scale = 0;
            for (int64_t j = 0; j < cnt; j++)
                if (fabs(e[j]) > scale) scale = fabs(e[j]);
            for (int64_t j = 0; j < cnt; j++)
                ck_assert_msg(fabs(a[j] - e[j]) <= 1e-4 * scale,
                              "chunk %lld grad %d [%lld]: %g vs %g",
                              (long long)chunks[k], i, (long long)j, a[j],
                              e[j]);
        }
        model_run_free(&r);
    }
    model_run_free(&un);
}
END_TEST

/* ------------------------------------------------------------------ ignore
 * index */

/* Loss, dh and dw of mg_linear_cross_entropy_ex on n rows of x with the
 * given int64 labels and opts (opts NULL and rows < x->n: the unfused
 * pair on the first `rows` rows of hrows, the reference). */
static void lce_run_ign(const lce_data *x, mg_dtype dt, const double *hrows,
                        int64_t rows, const int64_t *labels,
                        const mg_linear_ce_opts *opts, lce_out *o) {
    mg_graph *g = mg_graph_new();
    ck_assert(g != NULL);
    mg_tensor h = mg_input(g, "h", dt, 2, S(rows, x->d));
    mg_tensor w = mg_param(g, "w", dt, 2, S(x->v, x->d));
    mg_tensor lab = mg_input(g, "labels", MG_I64, 1, S(rows));
    mg_tensor loss =
        opts ? mg_linear_cross_entropy_ex(g, h, w, lab, MG_NO_TENSOR, opts)
             : mg_cross_entropy(g, mg_matmul(g, h, w, 0, 1), lab);
    TH_OK_T("loss", loss);
    const mg_tensor xs[2] = {h, w};
    mg_tensor gr[2];
    ck_assert_msg(mg_gradients(g, &loss, 1, NULL, xs, 2, NULL, gr) == MG_OK,
                  "%s", mg_last_error());
    void *hd = as_dtype(hrows, rows * x->d, dt);
    void *wd = as_dtype(x->w, x->v * x->d, dt);
    const mg_binding in[3] = {{h, hd}, {w, wd}, {lab, (void *)labels}};
    const size_t es = mg_dtype_size(dt);
    void *ly = malloc(es), *gh = malloc((size_t)(rows * x->d) * es),
         *gw = malloc((size_t)(x->v * x->d) * es);
    ck_assert(ly && gh && gw);
    const mg_tensor outs[3] = {loss, gr[0], gr[1]};
    void *bufs[3] = {ly, gh, gw};
    TH_RUN_OK(opts ? "ignore_index" : "unfused kept rows", g, 3, outs, bufs, 3,
              in, 1);
    o->loss = elem(ly, dt, 0);
    o->gh = malloc((size_t)(rows * x->d) * sizeof(double));
    o->gw = malloc((size_t)(x->v * x->d) * sizeof(double));
    ck_assert(o->gh && o->gw);
    for (int64_t i = 0; i < rows * x->d; i++) o->gh[i] = elem(gh, dt, i);
    for (int64_t i = 0; i < x->v * x->d; i++) o->gw[i] = elem(gw, dt, i);
    free(ly), free(gh), free(gw), free(hd), free(wd);
    mg_graph_free(g);
}

/* N = 12 rows, 5 of them labelled with the ignore_index: -100 (PyTorch's
 * default) and 4 (a class inside [0, V), which is then never counted).
 * Against the unfused pair on the 7 kept rows alone (the mean over those
 * is PyTorch's reduction='mean' with ignore_index): the loss, dw, and dh
 * on the kept rows agree (f64 1e-12, f32 2e-5), dh on ignored rows is
 * exactly 0; for chunks 0, 1, 5 and 12. */
START_TEST(test_ignore_index_matches_kept_rows) {
    const int64_t ignores[2] = {-100, 4};
    const int64_t chunks[4] = {0, 1, 5, 12};
    const int is_ignored[12] = {0, 1, 0, 0, 1, 1, 0, 0, 0, 1, 0, 1};
    lce_data x;
    lce_data_make(&x, 12, 6, 11, 45);
    for (int ig = 0; ig < 2; ig++) {
        int64_t lab[12], kept_lab[12];
        double kept_h[12 * 6];
        int64_t kept = 0;
        for (int64_t i = 0; i < 12; i++) {
            lab[i] = is_ignored[i] ? ignores[ig] : x.lab64[i];
            if (!is_ignored[i] && lab[i] == ignores[ig]) lab[i] = 0;
            if (is_ignored[i]) continue;
            kept_lab[kept] = lab[i];
            memcpy(kept_h + kept * 6, x.h + i * 6, 6 * sizeof(double));
            kept++;
        }
        for (int dti = 0; dti < 2; dti++) {
            const mg_dtype dt = th_dtypes[dti];
            const double tol = dt == MG_F64 ? 1e-12 : 2e-5;
            lce_out ref;
            lce_run_ign(&x, dt, kept_h, kept, kept_lab, NULL, &ref);
            for (int c = 0; c < 4; c++) {
                const mg_linear_ce_opts o = {.chunk_rows = chunks[c],
                                             .has_ignore_index = 1,
                                             .ignore_index = ignores[ig]};
                lce_out got;
                lce_run_ign(&x, dt, x.h, 12, lab, &o, &got);
                char what[96];
                snprintf(what, sizeof what, "%s ignore %lld chunk %lld loss",
                         mg_dtype_name(dt), (long long)ignores[ig],
                         (long long)chunks[c]);
                th_check_f64(what, &got.loss, &ref.loss, 1, tol, tol);
                snprintf(what, sizeof what, "%s ignore %lld chunk %lld dw",
                         mg_dtype_name(dt), (long long)ignores[ig],
                         (long long)chunks[c]);
                th_check_f64(what, got.gw, ref.gw, x.v * x.d, tol, tol);
                int64_t k = 0;
                for (int64_t i = 0; i < 12; i++) {
                    if (is_ignored[i]) {
                        for (int j = 0; j < 6; j++)
                            ck_assert_msg(got.gh[i * 6 + j] == 0.0,
                                          "%s: ignored row %lld has dh %g",
                                          what, (long long)i,
                                          got.gh[i * 6 + j]);
                        continue;
                    }
                    snprintf(what, sizeof what,
                             "%s ignore %lld chunk %lld dh row %lld",
                             mg_dtype_name(dt), (long long)ignores[ig],
                             (long long)chunks[c], (long long)i);
                    th_check_f64(what, got.gh + i * 6, ref.gh + k * 6, 6, tol,
                                 tol);
                    k++;
                }
                lce_out_free(&got);
            }
            lce_out_free(&ref);
        }
    }
    lce_data_free(&x);
}
END_TEST

/* With the ignore_index set but no row carrying it, the op is the plain
 * one: the same bits as mg_linear_cross_entropy. */
START_TEST(test_ignore_index_unused_same_bits) {
    lce_data x;
    lce_data_make(&x, 10, 5, 9, 8);
    for (int dti = 0; dti < 2; dti++) {
        lce_out a, b;
        const mg_linear_ce_opts plain = {.chunk_rows = 3};
        const mg_linear_ce_opts ign = {.chunk_rows = 3, .has_ignore_index = 1,
                                       .ignore_index = -100};
        lce_run_ign(&x, th_dtypes[dti], x.h, 10, x.lab64, &plain, &a);
        lce_run_ign(&x, th_dtypes[dti], x.h, 10, x.lab64, &ign, &b);
        ck_assert(memcmp(&a.loss, &b.loss, sizeof a.loss) == 0);
        ck_assert(memcmp(a.gh, b.gh, (size_t)(x.n * x.d) * sizeof *a.gh) == 0);
        ck_assert(memcmp(a.gw, b.gw, (size_t)(x.v * x.d) * sizeof *a.gw) == 0);
        lce_out_free(&a);
        lce_out_free(&b);
    }
    lce_data_free(&x);
}
END_TEST

/* Every row ignored: the loss is NaN (0 / 0, as PyTorch's mean over no
 * rows) and both gradients are exactly zero (as PyTorch's). */
START_TEST(test_ignore_index_all_ignored) {
    lce_data x;
    lce_data_make(&x, 6, 4, 7, 9);
    int64_t lab[6];
    for (int i = 0; i < 6; i++) lab[i] = -100;
    const mg_linear_ce_opts o = {.chunk_rows = 4, .has_ignore_index = 1,
                                 .ignore_index = -100};
    for (int dti = 0; dti < 2; dti++) {
        lce_out got;
        lce_run_ign(&x, th_dtypes[dti], x.h, 6, lab, &o, &got);
        ck_assert_msg(isnan(got.loss), "all ignored: loss %g, want NaN",
                      got.loss);
        for (int64_t i = 0; i < 6 * 4; i++) ck_assert(got.gh[i] == 0.0);
        for (int64_t i = 0; i < 7 * 4; i++) ck_assert(got.gw[i] == 0.0);
        lce_out_free(&got);
    }
    lce_data_free(&x);
}
END_TEST

/* With ignore_index -100, a label -5 or V is still refused at run time,
 * forward and backward, naming the op, the label, its row and the
 * ignore_index; the workspace is one element larger (the kept count). */
START_TEST(test_ignore_index_bad_label) {
    const int64_t bad[2] = {-5, 9};
    for (int k = 0; k < 2; k++) {
        for (int backward = 0; backward < 2; backward++) {
            mg_graph *g = mg_graph_new();
            mg_tensor h = mg_input(g, "h", MG_F64, 2, S(6, 4));
            mg_tensor w = mg_param(g, "w", MG_F64, 2, S(9, 4));
            mg_tensor lab = mg_input(g, "lab", MG_I64, 1, S(6));
            const mg_linear_ce_opts o = {.chunk_rows = 4,
                                         .has_ignore_index = 1,
                                         .ignore_index = -100};
            mg_tensor y = mg_linear_cross_entropy_ex(g, h, w, lab, MG_NO_TENSOR, &o);
            TH_OK_T("lce", y);
            mg_tensor out = y;
            if (backward)
                ck_assert(mg_gradients(g, &y, 1, NULL, &w, 1, NULL, &out) ==
                          MG_OK);
            double hd[24] = {0}, wd[36] = {0}, res[36];
            int64_t labels[6] = {1, -100, 3, 4, 5, 6};
            labels[4] = bad[k];
            const mg_binding in[3] = {{h, hd}, {w, wd}, {lab, labels}};
            void *bufs[1] = {res};
            mg_status st = th_run(g, 1, &out, bufs, 3, in, 1);
            ck_assert_int_eq(st, MG_ERR_INVALID_ARG);
            char want[96];
            snprintf(want, sizeof want,
                     "label %lld at row 4 is outside [0, 9) and is not "
                     "ignore_index -100",
                     (long long)bad[k]);
            ck_assert_msg(strstr(th_errmsg, want) &&
                              strstr(th_errmsg, "linear_cross_entropy"),
                          "message '%s' lacks '%s' or the op", th_errmsg, want);
            mg_graph_free(g);
        }
    }
    /* forward-only plan: the chunk, the row losses and the kept count */
    mg_graph *g = mg_graph_new();
    mg_tensor h = mg_input(g, "h", MG_F32, 2, S(512, 8));
    mg_tensor w = mg_param(g, "w", MG_F32, 2, S(8192, 8));
    mg_tensor lab = mg_input(g, "lab", MG_I32, 1, S(512));
    const mg_linear_ce_opts o = {.chunk_rows = 64, .has_ignore_index = 1,
                                 .ignore_index = -100};
    mg_tensor y = mg_linear_cross_entropy_ex(g, h, w, lab, MG_NO_TENSOR, &o);
    TH_OK_T("lce", y);
    mg_plan_options po = {.no_grad = 1};
    mg_plan *p = NULL;
    ck_assert_int_eq(mg_plan_compile(g, &y, 1, &po, &p), MG_OK);
    float res = 0;
    const mg_binding b = {y, &res};
    ck_assert_uint_eq(mg_plan_predicted_peak(p, &b, 1),
                      mg_pool_size_class((size_t)(64 * 8192 + 512 + 1) *
                                         sizeof(float)));
    mg_plan_free(p);
    mg_graph_free(g);
    /* opts NULL: the defaults, no label ignored */
    g = mg_graph_new();
    h = mg_input(g, "h", MG_F32, 2, S(6, 4));
    w = mg_param(g, "w", MG_F32, 2, S(9, 4));
    lab = mg_input(g, "lab", MG_I32, 1, S(6));
    TH_OK_T("lce opts NULL",
            mg_linear_cross_entropy_ex(g, h, w, lab, MG_NO_TENSOR, NULL));
    /* logits other than matmul(h, w, 0, 1) are refused */
    const char *op = "linear_cross_entropy";
    TH_FAIL(mg_linear_cross_entropy_ex(g, h, w, lab, mg_tanh(g, h), NULL),
            MG_ERR_INVALID_ARG, op, "must be mg_matmul(g, h, w, 0, 1)");
    mg_tensor h2 = mg_input(g, "h2", MG_F32, 2, S(6, 4));
    TH_FAIL(mg_linear_cross_entropy_ex(g, h, w, lab,
                                       mg_matmul(g, h2, w, 0, 1), NULL),
            MG_ERR_INVALID_ARG, op, "must be mg_matmul(g, h, w, 0, 1)");
    TH_FAIL(mg_linear_cross_entropy_ex(g, h, w, lab, 12345, NULL),
            MG_ERR_UNKNOWN_ID, op, "12345");
    const mg_linear_ce_opts neg = {.chunk_rows = -3, .has_ignore_index = 1,
                                   .ignore_index = -100};
    TH_FAIL(mg_linear_cross_entropy_ex(g, h, w, lab, MG_NO_TENSOR, &neg),
            MG_ERR_INVALID_ARG, "linear_cross_entropy", "chunk_rows -3");
    mg_graph_free(g);
}
END_TEST

/* Given its logits (mg_matmul(h, w, 0, 1), which a model returning them
 * makes anyway), the forward reads them instead of making chunks: the
 * loss within 1e-12 (f64) / 2e-6 (f32) relative of the op making them
 * (the matmul's GEMM may round differently from a chunk's), both
 * gradients the same bits (the gradient op is the same), and the
 * forward's cost without the GEMM; with and without an ignore_index. */
START_TEST(test_given_logits) {
    lce_data x;
    lce_data_make(&x, 10, 6, 13, 12);
    int64_t lab[10];
    for (int i = 0; i < 10; i++) lab[i] = i % 3 ? x.lab64[i] : -100;
    for (int dti = 0; dti < 2; dti++) {
        const mg_dtype dt = th_dtypes[dti];
        for (int ign = 0; ign < 2; ign++) {
            double loss[2], *gh[2], *gw[2];
            for (int given = 0; given < 2; given++) {
                mg_graph *g = mg_graph_new();
                mg_tensor h = mg_input(g, "h", dt, 2, S(10, 6));
                mg_tensor w = mg_param(g, "w", dt, 2, S(13, 6));
                mg_tensor l = mg_input(g, "labels", MG_I64, 1, S(10));
                const mg_linear_ce_opts o = {.chunk_rows = 4,
                                             .has_ignore_index = ign,
                                             .ignore_index = -100};
                mg_tensor lg = given ? mg_matmul(g, h, w, 0, 1) : MG_NO_TENSOR;
                mg_tensor y = mg_linear_cross_entropy_ex(g, h, w, l, lg, &o);
                TH_OK_T("lce", y);
                ck_assert_double_eq(mg_tensor_flops(g, y),
                                    (given ? 0 : 2.0 * 10 * 13 * 6) +
                                        4.0 * 10 * 13);
                const mg_tensor xs[2] = {h, w};
                mg_tensor gr[2];
                ck_assert(mg_gradients(g, &y, 1, NULL, xs, 2, NULL, gr) ==
                          MG_OK);
                void *hd = as_dtype(x.h, 60, dt), *wd = as_dtype(x.w, 78, dt);
                int64_t lab_used[10];
                for (int i = 0; i < 10; i++)
                    lab_used[i] = ign ? lab[i] : x.lab64[i];
                const mg_binding in[3] = {{h, hd}, {w, wd}, {l, lab_used}};
                const size_t es = mg_dtype_size(dt);
                void *ly = malloc(es), *bh = malloc(60 * es),
                     *bw = malloc(78 * es);
                const mg_tensor outs[3] = {y, gr[0], gr[1]};
                void *bufs[3] = {ly, bh, bw};
                TH_RUN_OK("given logits", g, 3, outs, bufs, 3, in, 1);
                loss[given] = elem(ly, dt, 0);
                gh[given] = malloc(60 * sizeof(double));
                gw[given] = malloc(78 * sizeof(double));
                for (int i = 0; i < 60; i++) gh[given][i] = elem(bh, dt, i);
                for (int i = 0; i < 78; i++) gw[given][i] = elem(bw, dt, i);
                free(ly), free(bh), free(bw), free(hd), free(wd);
                mg_graph_free(g);
            }
            const double tol = dt == MG_F64 ? 1e-12 : 2e-6;
            th_check_f64("given logits loss", &loss[1], &loss[0], 1, tol, tol);
            ck_assert(memcmp(gh[0], gh[1], 60 * sizeof(double)) == 0);
            ck_assert(memcmp(gw[0], gw[1], 78 * sizeof(double)) == 0);
            for (int k = 0; k < 2; k++) free(gh[k]), free(gw[k]);
        }
    }
    lce_data_free(&x);
}
END_TEST

/* ------------------------------------------------------------------ errors */

START_TEST(test_bad_inputs) {
    mg_graph *g = mg_graph_new();
    mg_tensor h = mg_input(g, "h", MG_F32, 2, S(6, 4));
    mg_tensor w = mg_param(g, "w", MG_F32, 2, S(9, 4));
    mg_tensor lab = mg_input(g, "lab", MG_I32, 1, S(6));
    mg_tensor h3 = mg_input(g, "h3", MG_F32, 3, S(2, 3, 4));
    mg_tensor wt = mg_param(g, "wt", MG_F32, 2, S(4, 9)); /* [D, V] */
    mg_tensor w64 = mg_param(g, "w64", MG_F64, 2, S(9, 4));
    mg_tensor labf = mg_input(g, "labf", MG_F32, 1, S(6));
    mg_tensor lab5 = mg_input(g, "lab5", MG_I32, 1, S(5));
    const char *op = "linear_cross_entropy";
    TH_FAIL(mg_linear_cross_entropy(g, h, wt, lab, 0), MG_ERR_SHAPE, op,
            "w must be [V, 4]");
    TH_FAIL(mg_linear_cross_entropy(g, h3, w, lab, 0), MG_ERR_SHAPE, op,
            "h must be 2-D");
    TH_FAIL(mg_linear_cross_entropy(g, h, w, lab5, 0), MG_ERR_SHAPE, op,
            "labels must be [6]");
    TH_FAIL(mg_linear_cross_entropy(g, h, w, labf, 0), MG_ERR_DTYPE, op,
            "labels must be i32 or i64");
    TH_FAIL(mg_linear_cross_entropy(g, h, w64, lab, 0), MG_ERR_DTYPE, op,
            "h is f32 but w is f64");
    TH_FAIL(mg_linear_cross_entropy(g, lab, w, lab, 0), MG_ERR_DTYPE, op,
            "h must be f32, f64, bf16 or f16");
    TH_FAIL(mg_linear_cross_entropy(g, h, w, lab, -2), MG_ERR_INVALID_ARG, op,
            "chunk_rows -2");
    TH_FAIL(mg_linear_cross_entropy(g, h, w, 12345, 0), MG_ERR_UNKNOWN_ID, op,
            "12345");
    TH_FAIL(mg_linear_cross_entropy(g, 12345, w, lab, 0), MG_ERR_UNKNOWN_ID, op,
            "12345");
    TH_FAIL(mg_linear_cross_entropy(NULL, h, w, lab, 0), MG_ERR_INVALID_ARG, op,
            "graph");
    mg_graph_free(g);
}
END_TEST

/* A label outside [0, V) fails the run (forward and backward) with
 * MG_ERR_INVALID_ARG naming the op, the label and its row: -100, PyTorch's
 * ignore_index, included. */
START_TEST(test_bad_label_at_run) {
    const int32_t bad[2] = {-100, 9};
    for (int k = 0; k < 2; k++) {
        for (int backward = 0; backward < 2; backward++) {
            mg_graph *g = mg_graph_new();
            mg_tensor h = mg_input(g, "h", MG_F64, 2, S(6, 4));
            mg_tensor w = mg_param(g, "w", MG_F64, 2, S(9, 4));
            mg_tensor lab = mg_input(g, "lab", MG_I32, 1, S(6));
            mg_tensor y = mg_linear_cross_entropy(g, h, w, lab, 4);
            TH_OK_T("lce", y);
            mg_tensor out = y;
            if (backward)
                ck_assert(mg_gradients(g, &y, 1, NULL, &w, 1, NULL, &out) ==
                          MG_OK);
            double hd[24] = {0}, wd[36] = {0}, res[36];
            int32_t labels[6] = {1, 2, 3, 4, 5, 6};
            labels[4] = bad[k];
            const mg_binding in[3] = {{h, hd}, {w, wd}, {lab, labels}};
            void *bufs[1] = {res};
            mg_status st = th_run(g, 1, &out, bufs, 3, in, 1);
            ck_assert_int_eq(st, MG_ERR_INVALID_ARG);
            char want[64];
            snprintf(want, sizeof want, "label %d at row 4 is outside [0, 9)",
                     (int)bad[k]);
            ck_assert_msg(strstr(th_errmsg, want) &&
                              strstr(th_errmsg, "linear_cross_entropy"),
                          "message '%s' lacks '%s' or the op", th_errmsg, want);
            mg_graph_free(g);
        }
    }
}
END_TEST

/* The cost model counts the products: 2 N V D for the forward, three times
 * that for the gradient op. */
START_TEST(test_flops) {
    mg_graph *g = mg_graph_new();
    mg_tensor h = mg_input(g, "h", MG_F32, 2, S(8, 4));
    mg_tensor w = mg_param(g, "w", MG_F32, 2, S(10, 4));
    mg_tensor lab = mg_input(g, "lab", MG_I32, 1, S(8));
    mg_tensor y = mg_linear_cross_entropy(g, h, w, lab, 3);
    TH_OK_T("lce", y);
    ck_assert_double_eq(mg_tensor_flops(g, y), 2.0 * 8 * 10 * 4 + 4.0 * 80);
    mg_tensor gw;
    ck_assert(mg_gradients(g, &y, 1, NULL, &w, 1, NULL, &gw) == MG_OK);
    /* gw is a slice of the packed gradient op's output */
    mg_tensor pk = mg_tensor_input(g, gw, 0);
    ck_assert_str_eq(mg_tensor_op_name(g, pk), "linear_cross_entropy_grad");
    th_check_shape("packed", g, pk, 2, S(18, 4));
    ck_assert_double_eq(mg_tensor_flops(g, pk), 6.0 * 8 * 10 * 4 + 6.0 * 80);
    mg_graph_free(g);
}
END_TEST

int main(void) {
    Suite *s = suite_create("linear_cross_entropy");
    th_add_tcase(s, "unfused", 120,
                 TH_TESTS(test_matches_unfused_pair,
                          test_label_dtypes_same_bits,
                          test_default_chunk_and_workspace));
    th_add_tcase(
        s, "model", 300,
        TH_TESTS(test_policies_bit_equal_and_peak, test_peak_below_unfused));
    th_add_tcase(s, "ignore_index", 120,
                 TH_TESTS(test_ignore_index_matches_kept_rows,
                          test_ignore_index_unused_same_bits,
                          test_ignore_index_all_ignored,
                          test_ignore_index_bad_label, test_given_logits));
    th_add_tcase(s, "errors", 60,
                 TH_TESTS(test_bad_inputs, test_bad_label_at_run, test_flops));
    return th_run_suite(s);
}
