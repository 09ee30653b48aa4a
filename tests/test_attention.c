/*
 * test_attention.c - the fused attention op (issue 30): its forward and
 * gradients equal the composed attention (matmul, scale, mask, causal_mask,
 * softmax, dropout, matmul) within rounding, in f32 and f64, over shapes
 * that span several tiles, with broadcast additive masks, causality and
 * dropout (the same counters, so the same weights are dropped); checkpointed
 * gradients equal plain ones bit for bit with dropout inside the op; the
 * planner's peak holds no Lq x Lk tensor; and bad arguments fail naming
 * the op. Finite-difference checks are in tests/gradcheck/attention.c.
 */
#include "helpers.h"

#include <math.h>
#include <stdlib.h>

typedef struct acase {
    const char *name;
    int nd, mnd;
    int64_t qs[4], ks[4], vs[4], ms[4];
    int causal;
    double scale, p;
} acase;

/* Inputs of a case as doubles: q, k, v, mask and the loss weights r. */
typedef struct adata {
    int64_t n[5];
    double *x[5];
} adata;

static mg_tensor composed(mg_graph *g, mg_tensor q, mg_tensor k, mg_tensor v,
                          mg_tensor mask, const acase *c, int64_t dim) {
    const double sc = c->scale == 0 ? 1.0 / sqrt((double)dim) : c->scale;
    mg_tensor s = mg_scale(g, mg_matmul(g, q, k, 0, 1), sc);
    if (mask != MG_NO_TENSOR) s = mg_add(g, s, mask);
    if (c->causal) s = mg_causal_mask(g, s, -INFINITY);
    mg_tensor w = mg_softmax(g, s, -1);
    if (c->p > 0) w = mg_dropout(g, w, c->p, 99);
    return mg_matmul(g, w, v, 0, 0);
}

/* Runs the fused (fused 1) or composed attention of case c on data a in
 * dtype dt; out[0] y, out[1..3] the gradients of sum(y * r) by q, k, v,
 * as doubles (caller frees). */
static void run_case(const acase *c, const adata *a, mg_dtype dt, int fused,
                     double *out[4]) {
    mg_graph *g = mg_graph_new();
    mg_tensor q = mg_input(g, "q", dt, c->nd, c->qs);
    mg_tensor k = mg_input(g, "k", dt, c->nd, c->ks);
    mg_tensor v = mg_input(g, "v", dt, c->nd, c->vs);
    mg_tensor m =
        c->mnd ? mg_input(g, "mask", dt, c->mnd, c->ms) : MG_NO_TENSOR;
    mg_tensor y;
    if (fused) {
        const mg_attention_opts o = {.causal = c->causal,
                                     .scale = c->scale,
                                     .dropout_p = c->p,
                                     .seed = 99};
        y = mg_attention_ex(g, q, k, v, m, &o);
    } else {
        y = composed(g, q, k, v, m, c, c->qs[c->nd - 1]);
    }
    TH_OK_T(c->name, y);
    int64_t ys[4];
    for (int i = 0; i < c->nd; i++) ys[i] = c->qs[i];
    ys[c->nd - 1] = c->vs[c->nd - 1];
    mg_tensor r = mg_input(g, "r", dt, c->nd, ys);
    mg_tensor loss = mg_sum(g, mg_mul(g, y, r), 0, NULL, 0);
    const mg_tensor wrt[3] = {q, k, v};
    mg_tensor gr[3];
    ck_assert_msg(mg_gradients(g, &loss, 1, NULL, wrt, 3, NULL, gr) == MG_OK,
                  "%s: %s", c->name, mg_last_error());
    const size_t es = dt == MG_F32 ? 4 : 8;
    void *in[5];
    mg_binding b[5];
    const mg_tensor leaves[5] = {q, k, v, m, r};
    int nb = 0;
    for (int i = 0; i < 5; i++) {
        in[i] = malloc((size_t)a->n[i] * es + 8);
        ck_assert_ptr_nonnull(in[i]);
        for (int64_t e = 0; e < a->n[i]; e++)
            if (dt == MG_F32) ((float *)in[i])[e] = (float)a->x[i][e];
            else ((double *)in[i])[e] = a->x[i][e];
        if (leaves[i] != MG_NO_TENSOR) b[nb++] = (mg_binding){leaves[i], in[i]};
    }
    const mg_tensor outs[4] = {y, gr[0], gr[1], gr[2]};
    const int64_t on[4] = {mg_tensor_numel(g, y), a->n[0], a->n[1], a->n[2]};
    void *ob[4];
    for (int j = 0; j < 4; j++) ob[j] = malloc((size_t)on[j] * es);
    TH_RUN_OK(c->name, g, 4, outs, ob, nb, b, 7);
    for (int j = 0; j < 4; j++) {
        out[j] = malloc((size_t)on[j] * sizeof(double));
        for (int64_t e = 0; e < on[j]; e++)
            out[j][e] = dt == MG_F32 ? (double)((float *)ob[j])[e]
                                     : ((double *)ob[j])[e];
        free(ob[j]);
    }
    for (int i = 0; i < 5; i++) free(in[i]);
    mg_graph_free(g);
}

static void make_data(const acase *c, adata *a, uint64_t seed) {
    th_rng r;
    th_rng_init(&r, seed);
    int64_t ys[4];
    for (int i = 0; i < c->nd; i++) ys[i] = c->qs[i];
    ys[c->nd - 1] = c->vs[c->nd - 1];
    a->n[0] = th_numel(c->nd, c->qs);
    a->n[1] = th_numel(c->nd, c->ks);
    a->n[2] = th_numel(c->nd, c->vs);
    a->n[3] = c->mnd ? th_numel(c->mnd, c->ms) : 1;
    a->n[4] = th_numel(c->nd, ys);
    for (int i = 0; i < 5; i++) {
        a->x[i] = malloc((size_t)a->n[i] * sizeof(double));
        ck_assert_ptr_nonnull(a->x[i]);
        th_rand_vals(&r, a->x[i], a->n[i], -1.5, 1.5);
    }
    /* some keys masked out with -inf (never a whole row: column 0 keeps
     * its value) */
    if (c->mnd) {
        const int64_t lk = c->ms[c->mnd - 1];
        for (int64_t e = 0; e < a->n[3]; e++)
            if (e % lk != 0 && th_rng_next(&r) % 7 == 0) a->x[3][e] = -INFINITY;
    }
}

static const acase cases[] = {
    {"4-D, 3 query and 3 key tiles",
     4,
     0,
     {2, 3, 130, 5},
     {2, 3, 260, 5},
     {2, 3, 260, 4},
     {0},
     0,
     0,
     0},
    {"4-D causal",
     4,
     0,
     {2, 3, 130, 5},
     {2, 3, 260, 5},
     {2, 3, 260, 4},
     {0},
     1,
     0,
     0},
    {"mask [Lq, Lk] with -inf keys",
     4,
     2,
     {2, 2, 70, 6},
     {2, 2, 200, 6},
     {2, 2, 200, 3},
     {70, 200},
     0,
     0.4,
     0},
    {"mask [B, 1, Lq, Lk], causal, dropout 0.2",
     4,
     4,
     {2, 2, 70, 6},
     {2, 2, 150, 6},
     {2, 2, 150, 6},
     {2, 1, 70, 150},
     1,
     0,
     0.2},
    {"2-D, dropout 0.3, scale 0.3",
     2,
     0,
     {70, 8},
     {200, 8},
     {200, 8},
     {0},
     0,
     0.3,
     0.3},
    {"Lq > Lk causal, mask [Lk]",
     3,
     1,
     {1, 150, 4},
     {1, 40, 4},
     {1, 40, 7},
     {40},
     1,
     0,
     0},
};

START_TEST(test_fused_matches_composed) {
    const acase *c = &cases[_i];
    adata a;
    make_data(c, &a, 300 + (uint64_t)_i);
    for (int d = 0; d < 2; d++) {
        const mg_dtype dt = d ? MG_F64 : MG_F32;
        double *f[4], *r[4];
        run_case(c, &a, dt, 1, f);
        run_case(c, &a, dt, 0, r);
        const int64_t n[4] = {a.n[4], a.n[0], a.n[1], a.n[2]};
        static const char *what[4] = {"y", "dq", "dk", "dv"};
        for (int j = 0; j < 4; j++) {
            double num = 0, den = 0;
            for (int64_t e = 0; e < n[j]; e++) {
                ck_assert_msg(isfinite(f[j][e]), "%s %s %s: element %lld is %g",
                              c->name, mg_dtype_name(dt), what[j], (long long)e,
                              f[j][e]);
                num += (f[j][e] - r[j][e]) * (f[j][e] - r[j][e]);
                den += r[j][e] * r[j][e];
            }
            const double err = sqrt(num / (den > 0 ? den : 1));
            ck_assert_msg(err < (d ? 1e-13 : 2e-6),
                          "%s %s %s: fused vs composed relative error %g",
                          c->name, mg_dtype_name(dt), what[j], err);
            free(f[j]);
            free(r[j]);
        }
    }
    for (int i = 0; i < 5; i++) free(a.x[i]);
}
END_TEST

/* A stack of causal self-attention layers with dropout inside the fused op:
 * the gradients under every checkpointing policy (attention recomputed in
 * the backward, dropout replayed from its counters) equal the plain ones
 * bit for bit. */
#define CK_L 3
/* With tag, the layer outputs are tagged for MG_CKPT_COLLECTION, so that
 * everything between them (each attention op) is recomputed. */
static mg_graph *ck_build(mg_tensor *x, mg_tensor *w, mg_tensor *loss,
                          mg_tensor *gr, const mg_checkpoints *ck, int tag) {
    mg_graph *g = mg_graph_new();
    const int64_t xs[3] = {4, 80, 16}, ws[2] = {16, 16};
    *x = mg_input(g, "x", MG_F32, 3, xs);
    mg_tensor h = *x;
    for (int l = 0; l < CK_L; l++) {
        w[l] = mg_param(g, "w", MG_F32, 2, ws);
        mg_tensor q = mg_matmul(g, h, w[l], 0, 0);
        const mg_attention_opts o = {
            .causal = 1, .dropout_p = 0.25, .seed = (uint64_t)l};
        mg_tensor a = mg_attention_ex(g, q, h, q, MG_NO_TENSOR, &o);
        h = mg_add(g, h, mg_tanh(g, a));
        if (tag) ck_assert_int_eq(mg_tensor_set_checkpoint(g, h, 1), MG_OK);
    }
    *loss = mg_sum(g, mg_mul(g, h, h), 0, NULL, 0);
    mg_tensor wrt[CK_L + 1];
    wrt[0] = *x;
    for (int l = 0; l < CK_L; l++) wrt[l + 1] = w[l];
    ck_assert_msg(mg_gradients(g, loss, 1, NULL, wrt, CK_L + 1, ck, gr) ==
                      MG_OK,
                  "%s", mg_last_error());
    return g;
}

START_TEST(test_checkpointed_bits_equal_plain) {
    const int64_t nx = 4 * 80 * 16, nw = 16 * 16;
    th_rng r;
    th_rng_init(&r, 31);
    float *xin = malloc(nx * sizeof(float)), *win[CK_L];
    th_fill_f32(&r, xin, nx, -1, 1, 0);
    for (int l = 0; l < CK_L; l++) {
        win[l] = malloc(nw * sizeof(float));
        th_fill_f32(&r, win[l], nw, -0.5, 0.5, 0);
    }
    float *ref[CK_L + 2], *got[CK_L + 2];
    const int64_t on[CK_L + 2] = {1, nx, nw, nw, nw};
    for (int i = 0; i < CK_L + 2; i++) {
        ref[i] = malloc(on[i] * sizeof(float));
        got[i] = malloc(on[i] * sizeof(float));
    }
    const mg_ckpt_policy pol[3] = {MG_CKPT_MEMORY, MG_CKPT_SPEED,
                                   MG_CKPT_COLLECTION};
    for (int v = -1; v < 3; v++) {
        mg_tensor x, w[CK_L], loss, gr[CK_L + 1];
        mg_checkpoints ck = {.policy = v >= 0 ? pol[v] : MG_CKPT_NONE};
        mg_graph *g = ck_build(&x, w, &loss, gr, v >= 0 ? &ck : NULL, v == 2);
        if (v == 2) {
            int recomputed = 0;
            for (mg_tensor t = 0; t < (mg_tensor)mg_graph_num_tensors(g); t++)
                if (mg_tensor_is_recompute(g, t) &&
                    !strcmp(mg_tensor_op_name(g, t), "attention"))
                    recomputed++;
            ck_assert_int_eq(recomputed, CK_L);
        }
        const mg_binding b[CK_L + 1] = {
            {x, xin}, {w[0], win[0]}, {w[1], win[1]}, {w[2], win[2]}};
        const mg_tensor outs[CK_L + 2] = {loss, gr[0], gr[1], gr[2], gr[3]};
        TH_RUN_OK("checkpointed", g, CK_L + 2, outs,
                  (void *const *)(v < 0 ? ref : got), CK_L + 1, b, 5);
        if (v >= 0)
            for (int i = 0; i < CK_L + 2; i++)
                ck_assert_msg(!memcmp(ref[i], got[i], on[i] * sizeof(float)),
                              "policy %s: output %d differs from the plain "
                              "run",
                              mg_ckpt_policy_name(pol[v]), i);
        mg_graph_free(g);
    }
    for (int i = 0; i < CK_L + 2; i++) free(ref[i]), free(got[i]);
    for (int l = 0; l < CK_L; l++) free(win[l]);
    free(xin);
}
END_TEST

/* The planner's peak for one attention layer and its gradients: the fused
 * op holds no [B, H, T, T] tensor, the composed one does. */
static size_t layer_peak(int fused, int64_t t, mg_tensor *largest_out) {
    mg_graph *g = mg_graph_new();
    const int64_t s[4] = {1, 8, t, 64};
    mg_tensor q = mg_input(g, "q", MG_F32, 4, s);
    mg_tensor k = mg_input(g, "k", MG_F32, 4, s);
    mg_tensor v = mg_input(g, "v", MG_F32, 4, s);
    const acase c = {.causal = 1};
    mg_tensor y = fused ? mg_attention(g, q, k, v, 1, 0)
                        : composed(g, q, k, v, MG_NO_TENSOR, &c, 64);
    mg_tensor loss = mg_sum(g, mg_mul(g, y, y), 0, NULL, 0);
    const mg_tensor wrt[3] = {q, k, v};
    mg_tensor gr[3];
    ck_assert_int_eq(mg_gradients(g, &loss, 1, NULL, wrt, 3, NULL, gr), MG_OK);
    size_t big = 0;
    for (mg_tensor i = 0; i < (mg_tensor)mg_graph_num_tensors(g); i++)
        if (mg_tensor_nbytes(g, i) > big) big = mg_tensor_nbytes(g, i);
    *largest_out = (mg_tensor)(big / (size_t)(8 * t * 4));
    mg_plan *p = NULL;
    const mg_tensor outs[4] = {loss, gr[0], gr[1], gr[2]};
    ck_assert_int_eq(mg_plan_compile(g, outs, 4, NULL, &p), MG_OK);
    const size_t peak = mg_plan_predicted_peak(p, NULL, 0);
    mg_plan_free(p);
    mg_graph_free(g);
    return peak;
}

START_TEST(test_peak_has_no_scores) {
    const int64_t t = 2048;
    const size_t qkvo = 4 * (size_t)8 * t * 64 * 4; /* q, k, v, y in f32 */
    mg_tensor big_f, big_c;
    const size_t fused = layer_peak(1, t, &big_f),
                 comp = layer_peak(0, t, &big_c);
    /* the largest tensor: at most a row of 65 values per query (y with its
     * log-sum-exp; the packed gradient is 3 x 64) for the fused op, T for
     * the composed */
    ck_assert_int_le(big_f, 3 * 64);
    ck_assert_int_ge(big_c, t);
    ck_assert_msg(fused <= 3 * qkvo, "fused peak %zu > 3 x q,k,v,o %zu", fused,
                  qkvo);
    ck_assert_msg(comp >= (size_t)8 * t * t * 4, "composed peak %zu", comp);
}
END_TEST

START_TEST(test_attention_ex_errors) {
    mg_graph *g = mg_graph_new();
    mg_tensor q = mg_input(g, "q", MG_F32, 3, S(2, 3, 4));
    mg_tensor k = mg_input(g, "k", MG_F32, 3, S(2, 5, 4));
    mg_tensor v = mg_input(g, "v", MG_F32, 3, S(2, 5, 6));
    mg_tensor kd = mg_input(g, "kd", MG_F64, 3, S(2, 5, 4));
    mg_tensor qi = mg_input(g, "qi", MG_I32, 3, S(2, 3, 4));
    mg_tensor m_ok = mg_input(g, "m", MG_F32, 2, S(3, 5));
    mg_tensor m_bad = mg_input(g, "mb", MG_F32, 2, S(3, 4));
    mg_tensor m_big = mg_input(g, "mbig", MG_F32, 4, S(1, 2, 3, 5));
    mg_tensor m_d = mg_input(g, "md", MG_F64, 2, S(3, 5));
    const mg_attention_opts o = {0}, drop1 = {.dropout_p = 1.0},
                            dropn = {.dropout_p = NAN},
                            sinf = {.scale = INFINITY};
    TH_OK_T("mask [Lq, Lk]", mg_attention_ex(g, q, k, v, m_ok, &o));
    TH_OK_T("opts NULL", mg_attention_ex(g, q, k, v, m_ok, NULL));
    TH_FAIL(mg_attention_ex(g, q, kd, v, MG_NO_TENSOR, &o), MG_ERR_DTYPE,
            "attention", "k is f64 but q is f32");
    TH_FAIL(mg_attention_ex(g, qi, k, v, MG_NO_TENSOR, &o), MG_ERR_DTYPE,
            "attention", "q");
    TH_FAIL(mg_attention_ex(g, q, k, v, m_bad, &o), MG_ERR_SHAPE, "attention",
            "mask [3,4] does not broadcast to the scores [2,3,5]");
    TH_FAIL(mg_attention_ex(g, q, k, v, m_big, &o), MG_ERR_SHAPE, "attention",
            "does not broadcast");
    TH_FAIL(mg_attention_ex(g, q, k, v, m_d, &o), MG_ERR_DTYPE, "attention",
            "mask is f64");
    TH_FAIL(mg_attention_ex(g, q, k, v, MG_NO_TENSOR, &drop1),
            MG_ERR_INVALID_ARG, "attention", "dropout p = 1");
    TH_FAIL(mg_attention_ex(g, q, k, v, MG_NO_TENSOR, &dropn),
            MG_ERR_INVALID_ARG, "attention", "dropout p = nan");
    TH_FAIL(mg_attention_ex(g, q, k, v, MG_NO_TENSOR, &sinf),
            MG_ERR_INVALID_ARG, "attention", "scale inf");
    TH_FAIL(mg_attention_ex(g, q, k, v, 999, &o), MG_ERR_UNKNOWN_ID,
            "attention", "999");
    TH_FAIL(mg_attention_ex(NULL, q, k, v, MG_NO_TENSOR, &o),
            MG_ERR_INVALID_ARG, "attention", "NULL");
    mg_graph_free(g);
}
END_TEST

int main(void) {
    Suite *s = suite_create("attention");
    th_add_tcase_loops(s, "fused vs composed", 300,
                       TH_LOOPS({test_fused_matches_composed, 0,
                                 (int)(sizeof cases / sizeof cases[0])}),
                       NULL);
    th_add_tcase(s, "checkpoint", 120,
                 TH_TESTS(test_checkpointed_bits_equal_plain,
                          test_peak_has_no_scores, test_attention_ex_errors));
    return th_run_suite(s);
}
