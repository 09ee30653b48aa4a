/*
 * gradcheck/random.c - part of test_gradcheck: analytic gradients against
 * float64 central finite differences (gc_* in helpers/gradcheck.h) for dropout
 * (fixed seed: the mask is the same in every run).
 */
#include "../helpers.h"

/* ------------------------------------------------------------------ dropout */

START_TEST(test_gc_dropout) {
    static const double ps[3] = {0.0, 0.4, 0.75};
    for (int k = 0; k < 3; k++) {
        char name[64];
        gc_ctx c;
        snprintf(name, sizeof name, "dropout p=%g [4,5]", ps[k]);
        gc_begin(&c, name, 1500 + k);
        c.run_seed = 42 + (uint64_t)k;
        mg_tensor x = gc_x(&c, 2, S(4, 5));
        gc_check(&c, mg_dropout(c.g, x, ps[k], 9));
        gc_end(&c);
    }
    /* dropout between two ops: tanh(dropout(x W)) */
    gc_ctx c;
    gc_begin(&c, "tanh(dropout(matmul(x, w), 0.5))", 1510);
    c.run_seed = 7;
    mg_tensor x = gc_x(&c, 2, S(3, 4));
    mg_tensor w = gc_p(&c, 2, S(4, 5));
    gc_check(&c,
             mg_tanh(c.g, mg_dropout(c.g, mg_matmul(c.g, x, w, 0, 0), 0.5, 1)));
    gc_end(&c);
}
END_TEST

TH_PART(gradcheck_random_tcase, "random", 120, test_gc_dropout)
