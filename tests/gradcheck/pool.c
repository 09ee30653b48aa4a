/*
 * gradcheck/pool.c - part of test_gradcheck: analytic gradients against
 * float64 central finite differences (gc_* in helpers/gradcheck.h) for max and
 * average pooling.
 */
#include "../helpers.h"

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

void gradcheck_pool_tcase(Suite *s) {
    th_add_tcase(s, "pool", 120, TH_TESTS(test_gc_pool2d));
}
