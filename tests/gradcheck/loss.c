/*
 * gradcheck/loss.c - part of test_gradcheck: analytic gradients against
 * float64 central finite differences (gc_* in helpers/gradcheck.h) for
 * cross_entropy and mse.
 */
#include "../helpers.h"

/* ------------------------------------------------------------------ losses */

START_TEST(test_gc_cross_entropy) {
    gc_ctx c;
    gc_begin(&c, "cross_entropy logits [4,5]", 1600);
    mg_tensor l = gc_x_range(&c, 2, S(4, 5), -3.0, 3.0);
    mg_tensor y = gc_labels(&c, 4, 5);
    gc_check(&c, mg_cross_entropy(c.g, l, y));
    gc_end(&c);

    gc_begin(&c, "cross_entropy(matmul(x, w)) [6,3]", 1601);
    mg_tensor x = gc_x(&c, 2, S(6, 4));
    mg_tensor w = gc_p(&c, 2, S(4, 3));
    y = gc_labels(&c, 6, 3);
    gc_check(&c, mg_cross_entropy(c.g, mg_matmul(c.g, x, w, 0, 0), y));
    gc_end(&c);
}
END_TEST

START_TEST(test_gc_mse) {
    gc_ctx c;
    gc_begin(&c, "mse(pred, target) [3,4] wrt both", 1700);
    mg_tensor p = gc_x(&c, 2, S(3, 4));
    mg_tensor t = gc_x(&c, 2, S(3, 4));
    gc_check(&c, mg_mse(c.g, p, t));
    gc_end(&c);

    gc_begin(&c, "mse(tanh(x), const target) [5]", 1701);
    mg_tensor x = gc_x(&c, 1, S(5));
    t = gc_const(&c, 1, S(5), -1.0, 1.0);
    gc_check(&c, mg_mse(c.g, mg_tanh(c.g, x), t));
    gc_end(&c);
}
END_TEST

void gradcheck_loss_tcase(Suite *s) {
    th_add_tcase(s, "loss", 120, TH_TESTS(test_gc_cross_entropy, test_gc_mse));
}
