/*
 * gradcheck/scan.c - part of test_gradcheck: analytic gradients against
 * float64 central finite differences (gc_* in helpers/gradcheck.h) for
 * cumsum along each axis, and of a cumsum of a cumsum (whose gradient
 * runs the reversed cumsum twice).
 */
#include "../helpers.h"

START_TEST(test_gc_cumsum) {
    for (int axis = -1; axis < 3; axis++) {
        char name[64];
        snprintf(name, sizeof name, "cumsum x [3,4,5] axis %d", axis);
        gc_ctx c;
        gc_begin(&c, name, 4600 + axis + 1);
        mg_tensor x = gc_x(&c, 3, S(3, 4, 5));
        gc_check(&c, mg_cumsum(c.g, x, axis));
        gc_end(&c);
    }
    gc_ctx c;
    gc_begin(&c, "cumsum(tanh(cumsum(x, 0)), 1)", 4610);
    mg_tensor x = gc_x(&c, 2, S(6, 7));
    gc_check(&c, mg_cumsum(c.g, mg_tanh(c.g, mg_cumsum(c.g, x, 0)), 1));
    gc_end(&c);
}
END_TEST

TH_PART(gradcheck_scan_tcase, "scan", 120, test_gc_cumsum)
