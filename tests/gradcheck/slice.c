/*
 * gradcheck/slice.c - part of test_gradcheck: analytic gradients against
 * float64 central finite differences (gc_* in helpers/gradcheck.h) for concat,
 * slice and pad.
 */
#include "../helpers.h"

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

TH_PART(gradcheck_slice_tcase, "slice", 0, test_gc_slice_pad_concat)
