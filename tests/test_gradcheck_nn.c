/*
 * test_gradcheck_nn.c - gradients of the network ops of issue 3 against
 * float64 central finite differences (gc_* in helpers.h), on shapes that
 * exercise stride, padding, dilation, groups and broadcasting, and for
 * attention with and without the causal mask.
 */
#include "helpers.h"


/* ------------------------------------------------------------------ conv2d */

typedef struct gconv {
    int64_t x[4], w[4];
    int sh, sw, ph, pw, dh, dw, groups;
    const char *desc;
} gconv;

static const gconv gconvs[] = {
    {{2, 3, 5, 4}, {2, 3, 3, 3}, 1, 1, 0, 0, 1, 1, 1, "3x3 valid"},
    {{1, 2, 6, 5}, {3, 2, 3, 2}, 2, 1, 1, 2, 1, 1, 1, "stride 2x1 pad 1x2"},
    {{1, 4, 6, 6}, {4, 2, 2, 3}, 2, 2, 1, 0, 2, 1, 2, "groups 2 dilation 2x1"},
    {{2, 3, 4, 4}, {3, 1, 3, 3}, 1, 1, 1, 1, 1, 1, 3, "depthwise pad 1"},
    {{2, 3, 3, 4}, {2, 3, 1, 1}, 1, 1, 0, 0, 1, 1, 1, "1x1 direct"},
    {{1, 2, 5, 5}, {2, 2, 1, 1}, 2, 2, 1, 1, 1, 1, 1, "1x1 stride 2 pad 1"},
};

START_TEST(test_gc_conv2d) {
    for (int k = 0; k < (int)(sizeof gconvs / sizeof gconvs[0]); k++) {
        const gconv *c = &gconvs[k];
        char name[80];
        gc_ctx g;
        snprintf(name, sizeof name, "conv2d %s", c->desc);
        gc_begin(&g, name, 3100 + (uint64_t)k);
        mg_tensor x = gc_x(&g, 4, c->x), w = gc_p(&g, 4, c->w);
        gc_check(&g, mg_conv2d(g.g, x, w, c->sh, c->sw, c->ph, c->pw, c->dh,
                               c->dw, c->groups));
        gc_end(&g);
    }
}
END_TEST

/* conv + broadcast bias + relu, and x used twice (fan-out into conv) */
START_TEST(test_gc_conv2d_chain) {
    gc_ctx g;
    gc_begin(&g, "relu(conv2d(x, w) + b[O,1,1]) * conv2d(x, w2)", 3150);
    mg_tensor x = gc_x(&g, 4, S(2, 2, 5, 5));
    mg_tensor w = gc_p(&g, 4, S(3, 2, 3, 3)), b = gc_p(&g, 3, S(3, 1, 1));
    mg_tensor w2 = gc_p(&g, 4, S(3, 2, 1, 1));
    mg_tensor h =
        mg_relu(g.g, mg_add(g.g, mg_conv2d(g.g, x, w, 1, 1, 1, 1, 1, 1, 1), b));
    gc_check(&g, mg_mul(g.g, h, mg_conv2d(g.g, x, w2, 1, 1, 0, 0, 1, 1, 1)));
    gc_end(&g);
}
END_TEST

/* ------------------------------------------------------------------ pooling */

typedef struct gpool {
    int64_t x[4];
    int kh, kw, sh, sw, ph, pw;
    const char *desc;
} gpool;

static const gpool gpools[] = {
    {{2, 2, 4, 4}, 2, 2, 2, 2, 0, 0, "2x2/2"},
    {{1, 2, 5, 6}, 3, 3, 2, 2, 1, 1, "3x3/2 pad 1 (overlapping)"},
    {{1, 3, 5, 4}, 3, 2, 1, 2, 1, 0, "3x2 stride 1x2 pad 1x0"},
    {{2, 1, 6, 5}, 2, 3, 3, 1, 1, 1, "2x3 stride 3x1 pad 1"},
};

START_TEST(test_gc_pool2d) {
    for (int avg = 0; avg < 2; avg++)
        for (int k = 0; k < (int)(sizeof gpools / sizeof gpools[0]); k++) {
            const gpool *c = &gpools[k];
            char name[80];
            gc_ctx g;
            snprintf(name, sizeof name, "%s_pool2d %s", avg ? "avg" : "max",
                     c->desc);
            gc_begin(&g, name, 3200 + 10 * (uint64_t)avg + (uint64_t)k);
            mg_tensor x = gc_x(&g, 4, c->x);
            gc_check(&g, avg ? mg_avg_pool2d(g.g, x, c->kh, c->kw, c->sh, c->sw,
                                             c->ph, c->pw)
                             : mg_max_pool2d(g.g, x, c->kh, c->kw, c->sh, c->sw,
                                             c->ph, c->pw));
            gc_end(&g);
        }
}
END_TEST

/* ------------------------------------------------------------------ norms */

START_TEST(test_gc_batchnorm) {
    static const struct {
        int nd;
        int64_t x[4];
        double eps;
        const char *desc;
    } cases[] = {
        {4, {3, 2, 2, 3}, 1e-5, "[3,2,2,3]"},
        {2, {5, 3}, 1e-3, "[5,3]"},
        {3, {2, 3, 4}, 0.1, "[2,3,4] eps 0.1"},
    };
    for (int k = 0; k < 3; k++) {
        char name[64];
        gc_ctx g;
        snprintf(name, sizeof name, "batchnorm %s", cases[k].desc);
        gc_begin(&g, name, 3300 + (uint64_t)k);
        mg_tensor x = gc_x(&g, cases[k].nd, cases[k].x);
        mg_tensor gm = gc_p(&g, 1, S(cases[k].x[1]));
        mg_tensor bt = gc_p(&g, 1, S(cases[k].x[1]));
        gc_check(&g, mg_batchnorm(g.g, x, gm, bt, cases[k].eps));
        gc_end(&g);
    }
}
END_TEST

START_TEST(test_gc_layernorm) {
    static const int64_t xs[3] = {2, 3, 4};
    for (int n = 1; n <= 3; n++) {
        char name[64];
        gc_ctx g;
        snprintf(name, sizeof name, "layernorm [2,3,4] over %d axes", n);
        gc_begin(&g, name, 3400 + (uint64_t)n);
        mg_tensor x = gc_x(&g, 3, xs);
        mg_tensor gm = gc_p(&g, n, xs + 3 - n), bt = gc_p(&g, n, xs + 3 - n);
        gc_check(&g, mg_layernorm(g.g, x, gm, bt, n, 1e-5));
        gc_end(&g);
    }
    /* normalised twice with x also feeding the residual */
    gc_ctx g;
    gc_begin(&g, "x + layernorm(tanh(layernorm(x)))", 3410);
    mg_tensor x = gc_x(&g, 2, S(3, 5));
    mg_tensor g1 = gc_p(&g, 1, S(5)), b1 = gc_p(&g, 1, S(5));
    mg_tensor h = mg_tanh(g.g, mg_layernorm(g.g, x, g1, b1, 1, 1e-5));
    gc_check(&g, mg_add(g.g, x, mg_layernorm(g.g, h, g1, b1, 1, 1e-5)));
    gc_end(&g);
}
END_TEST

/* ------------------------------------------------------------------ concat,
 * slice, pad */

START_TEST(test_gc_slice_pad_concat) {
    gc_ctx g;
    gc_begin(&g, "slice [3,4,5] axis 1 [1,3) then axis -1 [4,5)", 3500);
    mg_tensor x = gc_x(&g, 3, S(3, 4, 5));
    gc_check(&g, mg_slice(g.g, mg_slice(g.g, x, 1, 1, 2), -1, 4, 1));
    gc_end(&g);

    gc_begin(&g, "pad [2,3,2] {1,0,2} {0,2,1}", 3501);
    x = gc_x(&g, 3, S(2, 3, 2));
    gc_check(&g, mg_pad(g.g, x, S(1, 0, 2), S(0, 2, 1)));
    gc_end(&g);

    gc_begin(&g, "concat(a, b * c[3], a) along axis 0", 3502);
    mg_tensor a = gc_x(&g, 2, S(2, 3)), b = gc_x(&g, 2, S(1, 3));
    mg_tensor c = gc_x(&g, 1, S(3));
    gc_check(&g, mg_concat(g.g, 3, (mg_tensor[]){a, mg_mul(g.g, b, c), a}, 0));
    gc_end(&g);

    gc_begin(&g, "tanh(concat(x, pad(x)) along -1) sliced", 3503);
    x = gc_x(&g, 3, S(2, 2, 3));
    mg_tensor px = mg_pad(g.g, x, NULL, S(0, 0, 1));
    mg_tensor cx = mg_tanh(g.g, mg_concat(g.g, 2, (mg_tensor[]){x, px}, -1));
    gc_check(&g, mg_slice(g.g, cx, 2, 2, 4));
    gc_end(&g);
}
END_TEST

/* ------------------------------------------------------------ embedding */

START_TEST(test_gc_embedding) {
    gc_ctx g;
    gc_begin(&g, "embedding [5,3] by 9 indices (repeats)", 3600);
    mg_tensor tb = gc_p(&g, 2, S(5, 3));
    mg_tensor idx = gc_labels(&g, 9, 5);
    gc_check(&g, mg_embedding(g.g, tb, idx));
    gc_end(&g);

    gc_begin(&g, "tanh(embedding(table, idx)) * embedding(table, idx2)", 3601);
    tb = gc_p(&g, 2, S(4, 2));
    mg_tensor i1 = gc_labels(&g, 6, 4), i2 = gc_labels(&g, 6, 4);
    gc_check(&g, mg_mul(g.g, mg_tanh(g.g, mg_embedding(g.g, tb, i1)),
                        mg_embedding(g.g, tb, i2)));
    gc_end(&g);
}
END_TEST

/* ------------------------------------------------------------------ attention
 * and the small builders */

START_TEST(test_gc_attention) {
    for (int causal = 0; causal < 2; causal++) {
        char name[80];
        gc_ctx g;
        snprintf(name, sizeof name,
                 "attention [2,3,4]x[2,5,4]x[2,5,2] causal=%d", causal);
        gc_begin(&g, name, 3700 + (uint64_t)causal);
        mg_tensor q = gc_x(&g, 3, S(2, 3, 4)), k = gc_x(&g, 3, S(2, 5, 4));
        mg_tensor v = gc_x(&g, 3, S(2, 5, 2));
        gc_check(&g, mg_attention(g.g, q, k, v, causal, 0));
        gc_end(&g);

        snprintf(name, sizeof name,
                 "self-attention of x W with 2 heads causal=%d", causal);
        gc_begin(&g, name, 3710 + (uint64_t)causal);
        mg_tensor x = gc_x(&g, 3, S(2, 2, 4)); /* [heads, L, d] */
        mg_tensor w = gc_p(&g, 2, S(4, 4));
        mg_tensor h = mg_matmul(g.g, x, w, 0, 0);
        gc_check(&g, mg_attention(g.g, h, x, h, causal, 0.7));
        gc_end(&g);
    }
}
END_TEST

START_TEST(test_gc_small_builders) {
    gc_ctx g;
    gc_begin(&g, "causal_mask [2,3,4] value 0.5", 3720);
    mg_tensor x = gc_x(&g, 3, S(2, 3, 4));
    gc_check(&g, mg_causal_mask(g.g, x, 0.5));
    gc_end(&g);

    gc_begin(&g, "global_avg_pool2d then flatten(conv2d)", 3721);
    x = gc_x(&g, 4, S(2, 3, 3, 4));
    mg_tensor w = gc_p(&g, 4, S(2, 3, 2, 2));
    mg_tensor f = mg_flatten(g.g, mg_conv2d(g.g, x, w, 1, 1, 0, 0, 1, 1, 1), 1);
    mg_tensor p = mg_global_avg_pool2d(g.g, x);
    gc_check(&g, mg_matmul(g.g, p, mg_slice(g.g, f, 1, 0, 3), 1, 0));
    gc_end(&g);
}
END_TEST

/* ------------------------------------------------------------------ f32
 * Every backward kernel also exists in MG_F32: its gradients must match the
 * (finite-difference checked) f64 ones to f32 accuracy on the same data. */

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
    case 0:
        return mg_conv2d(g, x[0], x[1], 2, 1, 1, 2, 1, 2, 2);
    case 1:
        return mg_max_pool2d(g, x[0], 3, 2, 2, 1, 1, 1);
    case 2:
        return mg_avg_pool2d(g, x[0], 3, 2, 2, 1, 1, 1);
    case 3:
        return mg_batchnorm(g, x[0], x[1], x[2], 1e-5);
    case 4:
        return mg_layernorm(g, x[0], x[1], x[2], 2, 1e-5);
    case 5:
        return mg_slice(
            g, mg_pad(g, mg_concat(g, 2, x, 1), S(0, 1, 2), S(1, 0, 0)), 2, 1,
            3);
    case 6:
        return mg_embedding(g, x[0], x[1]);
    default:
        return mg_attention(g, x[0], x[1], x[2], 1, 0);
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
static void f32_grads(const f32_case *c, mg_dtype dt, double *const *vals,
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
            if (di == MG_I32)
                ((int32_t *)mem[i])[k] = (int32_t)vals[i][k];
            else if (di == MG_F32)
                ((float *)mem[i])[k] = (float)vals[i][k];
            else
                ((double *)mem[i])[k] = vals[i][k];
        }
        b[i] = (mg_binding){x[i], mem[i]};
        if (di != MG_I32)
            xs[nx++] = x[i];
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
        if (dt == MG_F32)
            ((float *)mem[c->n])[k] = (float)wv[k];
        else
            ((double *)mem[c->n])[k] = wv[k];
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
    for (int i = 0; i <= c->n; i++)
        free(mem[i]);
    mg_graph_free(g);
}

START_TEST(test_f32_grads_match_f64) {
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
            if (!c->index_bound[i])
                p32[nx] = g32[nx], p64[nx] = g64[nx], nx++;
        }
        for (int j = 0; j < MAXN; j++)
            wv[j] = (double)(float)th_rng_range(&r, -1, 1, 0);
        f32_grads(c, MG_F64, vp, wv, p64);
        f32_grads(c, MG_F32, vp, wv, p32);
        for (int i = 0, xi = 0; i < c->n; i++) {
            if (c->index_bound[i])
                continue;
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

/* ------------------------------------------------------------------ suite */

static Suite *gradcheck_nn_suite(void) {
    Suite *s = suite_create("gradcheck_nn");
    TCase *tc = tcase_create("conv2d");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_gc_conv2d);
    tcase_add_test(tc, test_gc_conv2d_chain);
    suite_add_tcase(s, tc);

    tc = tcase_create("pool");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_gc_pool2d);
    suite_add_tcase(s, tc);

    tc = tcase_create("norm");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_gc_batchnorm);
    tcase_add_test(tc, test_gc_layernorm);
    suite_add_tcase(s, tc);

    tc = tcase_create("slice");
    tcase_add_test(tc, test_gc_slice_pad_concat);
    suite_add_tcase(s, tc);

    tc = tcase_create("embedding");
    tcase_add_test(tc, test_gc_embedding);
    suite_add_tcase(s, tc);

    tc = tcase_create("attention");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_gc_attention);
    tcase_add_test(tc, test_gc_small_builders);
    suite_add_tcase(s, tc);

    tc = tcase_create("f32");
    tcase_add_test(tc, test_f32_grads_match_f64);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return th_run_suite(gradcheck_nn_suite());
}
