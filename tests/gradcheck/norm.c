/*
 * gradcheck/norm.c - part of test_gradcheck: analytic gradients against
 * float64 central finite differences (gc_* in helpers/gradcheck.h) for
 * batchnorm and layernorm.
 */
#include "../helpers.h"

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

TH_PART(gradcheck_norm_tcase, "norm", 120, test_gc_batchnorm, test_gc_layernorm)
