/*
 * test_gradcheck_nn.c - gradients of the network ops of issue 3 against
 * float64 central finite differences (gc_* in helpers.h), on shapes that
 * exercise stride, padding, dilation, groups and broadcasting, and for
 * attention with and without the causal mask.
 */
#include "helpers.h"

#define S(...) ((const int64_t[]){__VA_ARGS__})

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
    mg_tensor h = mg_relu(g.g, mg_add(g.g, mg_conv2d(g.g, x, w, 1, 1, 1, 1,
                                                     1, 1, 1), b));
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
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(gradcheck_nn_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
