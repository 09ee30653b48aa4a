/*
 * gradcheck/f32.c - part of test_gradcheck: every backward kernel also exists
 * in MG_F32; its gradients must match the (finite-difference checked) MG_F64
 * ones on the same data to f32 accuracy.
 */
#include "../helpers.h"

/* ------------------------------------------------------------------ dense
 * The f32 gradient of each dense op must match the (FD-checked) f64 one. */

#define F32_NOPS 17
static const char *f32_names[F32_NOPS] = {"matmul",
                                          "add [3,4]+[4]",
                                          "sub [3,1]-[3,4]",
                                          "mul [3,4]*[3,1]",
                                          "div",
                                          "neg",
                                          "relu",
                                          "gelu",
                                          "tanh",
                                          "sigmoid",
                                          "exp",
                                          "log",
                                          "sqrt",
                                          "scale",
                                          "softmax(0)",
                                          "log_softmax(-1)",
                                          "cross_entropy"};

/* grads of L = sum(op(a, b) * W) w.r.t. a and b, copied out as doubles */
static void f32_grads(mg_dtype dt, int op, const double *av, const double *bv,
                      const double *wv, double *ga, double *gb) {
    int64_t sb[2] = {op == 0 ? 4 : 3, op == 0                ? 5
                                      : (op == 2 || op == 3) ? 1
                                                             : 4};
    int ndb = op == 1 ? 1 : 2;
    const int64_t *sbp = op == 1 ? S(4) : sb;
    int64_t nb = th_numel(ndb, sbp);
    mg_graph *g = mg_graph_new();
    ck_assert(g != NULL);
    mg_tensor a = mg_input(g, "a", dt, 2, S(3, 4));
    mg_tensor b = mg_input(g, "b", dt, ndb, sbp);
    mg_tensor lab = mg_input(g, "lab", MG_I32, 1, S(3));
    mg_tensor y;
    switch (op) {
    case 0: y = mg_matmul(g, a, b, 0, 0); break;
    case 1: y = mg_add(g, a, b); break;
    case 2: y = mg_sub(g, b, a); break;
    case 3: y = mg_mul(g, a, b); break;
    case 4: y = mg_div(g, a, b); break;
    case 5: y = mg_neg(g, a); break;
    case 6: y = mg_relu(g, a); break;
    case 7: y = mg_gelu(g, a); break;
    case 8: y = mg_tanh(g, a); break;
    case 9: y = mg_sigmoid(g, a); break;
    case 10: y = mg_exp(g, a); break;
    case 11: y = mg_log(g, b); break;
    case 12: y = mg_sqrt(g, b); break;
    case 13: y = mg_scale(g, a, 0.7); break;
    case 14: y = mg_softmax(g, a, 0); break;
    case 15: y = mg_log_softmax(g, a, -1); break;
    default: y = mg_cross_entropy(g, a, lab); break;
    }
    ck_assert_msg(y != MG_NO_TENSOR, "%s: %s", f32_names[op], mg_last_error());
    int nd;
    int64_t sy[MG_MAX_DIMS];
    ck_assert(mg_tensor_shape(g, y, &nd, sy) == MG_OK);
    mg_tensor w = mg_input(g, "w", dt, nd, sy);
    mg_tensor L = mg_sum(g, mg_mul(g, y, w), 0, NULL, 0);
    TH_OK_T(f32_names[op], L);
    mg_tensor xs[2] = {a, b}, gr[2];
    mg_status st = mg_gradients(g, &L, 1, NULL, xs, 2, NULL, gr);
    ck_assert_msg(st == MG_OK, "%s (%s): mg_gradients failed: %s",
                  f32_names[op], mg_dtype_name(dt), mg_last_error());
    size_t es = mg_dtype_size(dt);
    void *ad = malloc(12 * es), *bd = malloc((size_t)nb * es);
    void *wd = malloc((size_t)th_numel(nd, sy) * es);
    void *gad = malloc(12 * es), *gbd = malloc((size_t)nb * es);
    ck_assert(ad && bd && wd && gad && gbd);
    for (int i = 0; i < 12; i++) {
        if (dt == MG_F32) ((float *)ad)[i] = (float)av[i];
        else ((double *)ad)[i] = av[i];
    }
    for (int64_t i = 0; i < nb; i++) {
        if (dt == MG_F32) ((float *)bd)[i] = (float)bv[i];
        else ((double *)bd)[i] = bv[i];
    }
    for (int64_t i = 0; i < th_numel(nd, sy); i++) {
        if (dt == MG_F32) ((float *)wd)[i] = (float)wv[i];
        else ((double *)wd)[i] = wv[i];
    }
    int32_t labv[3] = {2, 0, 3};
    mg_binding bnd[4] = {{a, ad}, {b, bd}, {w, wd}, {lab, labv}};
    void *outs[2] = {gad, gbd};
    mg_status rs = th_run(g, 2, gr, outs, 4, bnd, 5);
    if (rs == MG_OK) {
        for (int i = 0; i < 12; i++)
            ga[i] = dt == MG_F32 ? ((float *)gad)[i] : ((double *)gad)[i];
        for (int64_t i = 0; i < nb; i++)
            gb[i] = dt == MG_F32 ? ((float *)gbd)[i] : ((double *)gbd)[i];
    }
    free(ad);
    free(bd);
    free(wd);
    free(gad);
    free(gbd);
    mg_graph_free(g);
    ck_assert_msg(rs == MG_OK, "%s (%s): gradient run failed: %s",
                  f32_names[op], mg_dtype_name(dt), th_errmsg);
}

START_TEST(test_f32_grads_match_f64) {
    th_rng r;
    th_rng_init(&r, 3000);
    double av[12], bv[20], wv[20];
    double ga32[12], gb32[20], ga64[12], gb64[20];
    for (int op = 0; op < F32_NOPS; op++) {
        /* values exactly representable in f32 */
        for (int i = 0; i < 12; i++)
            av[i] = (double)(float)th_rng_range(&r, -2, 2, 1e-2);
        for (int i = 0; i < 20; i++) {
            bv[i] = (double)(float)th_rng_range(&r, 0.5, 2, 0);
            wv[i] = (double)(float)th_rng_range(&r, -1, 1, 0);
        }
        f32_grads(MG_F64, op, av, bv, wv, ga64, gb64);
        f32_grads(MG_F32, op, av, bv, wv, ga32, gb32);
        int64_t nb = op == 0 ? 20 : op == 1 ? 4 : (op == 2 || op == 3) ? 3 : 12;
        for (int i = 0; i < 12; i++)
            ck_assert_msg(fabs(ga32[i] - ga64[i]) <=
                              1e-5 + 1e-4 * fabs(ga64[i]),
                          "%s: f32 gradient of a[%d] is %.9g, f64 gives %.17g",
                          f32_names[op], i, ga32[i], ga64[i]);
        for (int64_t i = 0; i < nb; i++)
            ck_assert_msg(
                fabs(gb32[i] - gb64[i]) <= 1e-5 + 1e-4 * fabs(gb64[i]),
                "%s: f32 gradient of b[%lld] is %.9g, f64 gives %.17g",
                f32_names[op], (long long)i, gb32[i], gb64[i]);
    }
}
END_TEST

/* ------------------------------------------------------------------ network
 * The same for the network ops: conv2d, pooling, norms, concat/pad/slice,
 * embedding and attention. */

#define F32_MAX_IN 3
typedef struct f32_case {
    const char *name;
    int n; /* inputs, all differentiated but indices */
    int nd[F32_MAX_IN];
    int64_t sh[F32_MAX_IN][4];
    int64_t index_bound[F32_MAX_IN]; /* > 0: an i32 input in [0, bound) */
    int op;
} f32_case;

static mg_tensor f32_build(mg_graph *g, int op, const mg_tensor *x) {
    switch (op) {
    case 0: return mg_conv2d(g, x[0], x[1], 2, 1, 1, 2, 1, 2, 2);
    case 1: return mg_max_pool2d(g, x[0], 3, 2, 2, 1, 1, 1);
    case 2: return mg_avg_pool2d(g, x[0], 3, 2, 2, 1, 1, 1);
    case 3: return mg_batchnorm(g, x[0], x[1], x[2], 1e-5);
    case 4: return mg_layernorm(g, x[0], x[1], x[2], 2, 1e-5);
    case 5:
        return mg_slice(
            g, mg_pad(g, mg_concat(g, 2, x, 1), S(0, 1, 2), S(1, 0, 0)), 2, 1,
            3);
    case 6: return mg_embedding(g, x[0], x[1]);
    default: return mg_attention(g, x[0], x[1], x[2], 1, 0);
    }
}

static const f32_case f32_cases[] = {
    {"conv2d", 2, {4, 4}, {{2, 4, 6, 5}, {4, 2, 3, 2}}, {0}, 0},
    {"max_pool2d", 1, {4}, {{2, 2, 6, 5}}, {0}, 1},
    {"avg_pool2d", 1, {4}, {{2, 2, 6, 5}}, {0}, 2},
    {"batchnorm", 3, {4, 1, 1}, {{3, 2, 2, 3}, {2}, {2}}, {0}, 3},
    {"layernorm", 3, {3, 2, 2}, {{2, 3, 4}, {3, 4}, {3, 4}}, {0}, 4},
    {"concat/pad/slice", 2, {3, 3}, {{2, 1, 3}, {2, 2, 3}}, {0}, 5},
    {"embedding", 2, {2, 1}, {{5, 3}, {7}}, {0, 5}, 6},
    {"causal attention",
     3,
     {3, 3, 3},
     {{2, 3, 4}, {2, 4, 4}, {2, 4, 2}},
     {0},
     7},
};

/* Gradients of sum(y * W) for every float input, as doubles. */
static void f32_nn_grads(const f32_case *c, mg_dtype dt, double *const *vals,
                         const double *wv, double **grads) {
    mg_graph *g = mg_graph_new();
    ck_assert(g != NULL);
    mg_tensor x[F32_MAX_IN], xs[F32_MAX_IN], gr[F32_MAX_IN];
    mg_binding b[F32_MAX_IN + 1];
    void *mem[F32_MAX_IN + 1];
    int nx = 0;
    for (int i = 0; i < c->n; i++) {
        const int64_t n = th_numel(c->nd[i], c->sh[i]);
        const mg_dtype di = c->index_bound[i] ? MG_I32 : dt;
        x[i] = mg_input(g, NULL, di, c->nd[i], c->sh[i]);
        mem[i] = malloc((size_t)n * 8);
        ck_assert(x[i] != MG_NO_TENSOR && mem[i] != NULL);
        for (int64_t k = 0; k < n; k++) {
            if (di == MG_I32) ((int32_t *)mem[i])[k] = (int32_t)vals[i][k];
            else if (di == MG_F32) ((float *)mem[i])[k] = (float)vals[i][k];
            else ((double *)mem[i])[k] = vals[i][k];
        }
        b[i] = (mg_binding){x[i], mem[i]};
        if (di != MG_I32) xs[nx++] = x[i];
    }
    mg_tensor y = f32_build(g, c->op, x);
    TH_OK_T(c->name, y);
    int nd;
    int64_t sy[MG_MAX_DIMS];
    ck_assert(mg_tensor_shape(g, y, &nd, sy) == MG_OK);
    const int64_t ny = th_numel(nd, sy);
    mg_tensor w = mg_input(g, "w", dt, nd, sy);
    mem[c->n] = malloc((size_t)ny * 8);
    ck_assert(mem[c->n] != NULL);
    for (int64_t k = 0; k < ny; k++) {
        if (dt == MG_F32) ((float *)mem[c->n])[k] = (float)wv[k];
        else ((double *)mem[c->n])[k] = wv[k];
    }
    b[c->n] = (mg_binding){w, mem[c->n]};
    mg_tensor L = mg_sum(g, mg_mul(g, y, w), 0, NULL, 0);
    ck_assert_msg(mg_gradients(g, &L, 1, NULL, xs, nx, NULL, gr) == MG_OK,
                  "%s: %s", c->name, mg_last_error());
    void *out[F32_MAX_IN] = {NULL};
    for (int i = 0; i < nx; i++) {
        out[i] = malloc((size_t)mg_tensor_nbytes(g, gr[i]));
        ck_assert(out[i] != NULL);
    }
    mg_status st = th_run(g, nx, gr, out, c->n + 1, b, 0);
    ck_assert_msg(st == MG_OK, "%s (%s): %s", c->name, mg_dtype_name(dt),
                  th_errmsg);
    for (int i = 0; i < nx; i++) {
        for (int64_t k = 0; k < mg_tensor_numel(g, gr[i]); k++)
            grads[i][k] =
                dt == MG_F32 ? ((float *)out[i])[k] : ((double *)out[i])[k];
        free(out[i]);
    }
    for (int i = 0; i <= c->n; i++) free(mem[i]);
    mg_graph_free(g);
}

START_TEST(test_f32_nn_grads_match_f64) {
    th_rng r;
    th_rng_init(&r, 3800);
    enum { MAXN = 512 };
    static double vals[F32_MAX_IN][MAXN], wv[MAXN];
    static double g32[F32_MAX_IN][MAXN], g64[F32_MAX_IN][MAXN];
    for (size_t k = 0; k < sizeof f32_cases / sizeof f32_cases[0]; k++) {
        const f32_case *c = &f32_cases[k];
        double *vp[F32_MAX_IN], *p32[F32_MAX_IN], *p64[F32_MAX_IN];
        int nx = 0;
        for (int i = 0; i < c->n; i++) {
            const int64_t n = th_numel(c->nd[i], c->sh[i]);
            ck_assert(n <= MAXN);
            for (int64_t j = 0; j < n; j++)
                vals[i][j] = c->index_bound[i]
                                 ? (double)(th_rng_next(&r) %
                                            (uint64_t)c->index_bound[i])
                                 : (double)(float)th_rng_range(&r, -2, 2, 0);
            vp[i] = vals[i];
            if (!c->index_bound[i]) p32[nx] = g32[nx], p64[nx] = g64[nx], nx++;
        }
        for (int j = 0; j < MAXN; j++)
            wv[j] = (double)(float)th_rng_range(&r, -1, 1, 0);
        f32_nn_grads(c, MG_F64, vp, wv, p64);
        f32_nn_grads(c, MG_F32, vp, wv, p32);
        for (int i = 0, xi = 0; i < c->n; i++) {
            if (c->index_bound[i]) continue;
            char what[64];
            snprintf(what, sizeof what, "%s: f32 gradient of input %d", c->name,
                     i);
            th_check_f64(what, g32[xi], g64[xi], th_numel(c->nd[i], c->sh[i]),
                         1e-4, 1e-4);
            xi++;
        }
    }
}
END_TEST

void gradcheck_f32_tcase(Suite *s) {
    th_add_tcase(
        s, "f32", 0,
        TH_TESTS(test_f32_grads_match_f64, test_f32_nn_grads_match_f64));
}
