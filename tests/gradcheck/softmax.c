/*
 * gradcheck/softmax.c - part of test_gradcheck: analytic gradients against
 * float64 central finite differences (gc_* in helpers/gradcheck.h) for softmax
 * and log_softmax.
 */
#include "../helpers.h"

/* ------------------------------------------------------------------ softmax */

START_TEST(test_gc_softmax) {
    static const int axes[4] = {-1, 0, 1, 2};
    for (int lg = 0; lg < 2; lg++)
        for (int k = 0; k < 4; k++) {
            char name[64];
            gc_ctx c;
            snprintf(name, sizeof name, "%s [2,3,4] axis %d",
                     lg ? "log_softmax" : "softmax", axes[k]);
            gc_begin(&c, name, 1400 + 10 * lg + k);
            mg_tensor x = gc_x_range(&c, 3, S(2, 3, 4), -3.0, 3.0);
            gc_check(&c, lg ? mg_log_softmax(c.g, x, axes[k])
                            : mg_softmax(c.g, x, axes[k]));
            gc_end(&c);
        }
}
END_TEST

TH_PART(gradcheck_softmax_tcase, "softmax", 120, test_gc_softmax)
