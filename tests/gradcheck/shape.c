/*
 * gradcheck/shape.c - part of test_gradcheck: analytic gradients against
 * float64 central finite differences (gc_* in helpers/gradcheck.h) for
 * reshape, permute and transpose.
 */
#include "../helpers.h"

START_TEST(test_gc_reshape) {
    gc_ctx c;
    gc_begin(&c, "reshape [2,3,4]->[6,4]", 1100);
    mg_tensor x = gc_x(&c, 3, S(2, 3, 4));
    gc_check(&c, mg_reshape(c.g, x, 2, S(6, 4)));
    gc_end(&c);

    gc_begin(&c, "reshape [2,3,4]->[4,1,6] then tanh", 1101);
    x = gc_x(&c, 3, S(2, 3, 4));
    gc_check(&c, mg_tanh(c.g, mg_reshape(c.g, x, 3, S(4, 1, 6))));
    gc_end(&c);

    gc_begin(&c, "reshape [6]->[2,3] * [3]", 1102);
    x = gc_x(&c, 1, S(6));
    mg_tensor z = gc_x(&c, 1, S(3));
    gc_check(&c, mg_mul(c.g, mg_reshape(c.g, x, 2, S(2, 3)), z));
    gc_end(&c);
}
END_TEST

START_TEST(test_gc_permute) {
    static const int perms[4][3] = {{2, 0, 1}, {1, 0, 2}, {0, 2, 1}, {1, 2, 0}};
    for (int k = 0; k < 4; k++) {
        char name[64];
        gc_ctx c;
        snprintf(name, sizeof name, "permute {%d,%d,%d}", perms[k][0],
                 perms[k][1], perms[k][2]);
        gc_begin(&c, name, 1200 + k);
        mg_tensor x = gc_x(&c, 3, S(2, 3, 4));
        /* a non-linear consumer so the permuted layout matters twice */
        mg_tensor y = mg_permute(c.g, x, perms[k]);
        gc_check(&c, mg_mul(c.g, y, y));
        gc_end(&c);
    }
}
END_TEST

START_TEST(test_gc_permute_4d) {
    static const int perms[3][4] = {{3, 1, 0, 2}, {0, 1, 3, 2}, {3, 2, 1, 0}};
    for (int k = 0; k < 3; k++) {
        char name[64];
        gc_ctx c;
        snprintf(name, sizeof name, "permute {%d,%d,%d,%d} of [2,3,2,4]",
                 perms[k][0], perms[k][1], perms[k][2], perms[k][3]);
        gc_begin(&c, name, 1250 + k);
        mg_tensor x = gc_x(&c, 4, S(2, 3, 2, 4));
        gc_check(&c, mg_permute(c.g, x, perms[k]));
        gc_end(&c);
    }
}
END_TEST

START_TEST(test_gc_transpose) {
    gc_ctx c;
    gc_begin(&c, "transpose(0,2) of [2,3,4]", 1300);
    mg_tensor x = gc_x(&c, 3, S(2, 3, 4));
    gc_check(&c, mg_transpose(c.g, x, 0, 2));
    gc_end(&c);

    gc_begin(&c, "matmul(transpose(a), b) 2-D", 1301);
    mg_tensor a = gc_x(&c, 2, S(4, 3));
    mg_tensor b = gc_x(&c, 2, S(4, 2));
    gc_check(&c, mg_matmul(c.g, mg_transpose(c.g, a, 0, 1), b, 0, 0));
    gc_end(&c);

    gc_begin(&c, "transpose(1,2) of [2,3,4] then softmax(-1)", 1302);
    x = gc_x(&c, 3, S(2, 3, 4));
    gc_check(&c, mg_softmax(c.g, mg_transpose(c.g, x, 1, 2), -1));
    gc_end(&c);
}
END_TEST

TH_PART(gradcheck_shape_tcase, "shape", 120, test_gc_reshape, test_gc_permute,
        test_gc_permute_4d, test_gc_transpose)
