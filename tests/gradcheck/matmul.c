/*
 * gradcheck/matmul.c - part of test_gradcheck: analytic gradients against
 * float64 central finite differences (gc_* in helpers/gradcheck.h) for matmul,
 * 2-D to 4-D and with shared operands.
 */
#include "../helpers.h"

/* ------------------------------------------------------------------ matmul */

START_TEST(test_gc_matmul_2d) {
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            char name[64];
            gc_ctx c;
            snprintf(name, sizeof name, "matmul 2-D [3,4]x[4,5] ta=%d tb=%d",
                     ta, tb);
            gc_begin(&c, name, 100 + 2 * ta + tb);
            mg_tensor a = ta ? gc_x(&c, 2, S(4, 3)) : gc_x(&c, 2, S(3, 4));
            mg_tensor b = tb ? gc_p(&c, 2, S(5, 4)) : gc_p(&c, 2, S(4, 5));
            gc_check(&c, mg_matmul(c.g, a, b, ta, tb));
            gc_end(&c);
        }
}
END_TEST

START_TEST(test_gc_matmul_batched) {
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            char name[80];
            gc_ctx c;
            snprintf(name, sizeof name,
                     "matmul batched [2,3,4]x[2,4,2] ta=%d tb=%d", ta, tb);
            gc_begin(&c, name, 200 + 2 * ta + tb);
            mg_tensor a =
                ta ? gc_x(&c, 3, S(2, 4, 3)) : gc_x(&c, 3, S(2, 3, 4));
            mg_tensor b =
                tb ? gc_x(&c, 3, S(2, 2, 4)) : gc_x(&c, 3, S(2, 4, 2));
            gc_check(&c, mg_matmul(c.g, a, b, ta, tb));
            gc_end(&c);
        }
}
END_TEST

START_TEST(test_gc_matmul_shared_b) {
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            char name[96];
            gc_ctx c;
            snprintf(name, sizeof name,
                     "matmul batched [3,2,4] x shared 2-D [4,3] ta=%d tb=%d",
                     ta, tb);
            gc_begin(&c, name, 300 + 2 * ta + tb);
            mg_tensor a =
                ta ? gc_x(&c, 3, S(3, 4, 2)) : gc_x(&c, 3, S(3, 2, 4));
            mg_tensor b = tb ? gc_x(&c, 2, S(3, 4)) : gc_x(&c, 2, S(4, 3));
            gc_check(&c, mg_matmul(c.g, a, b, ta, tb));
            gc_end(&c);
        }
}
END_TEST

START_TEST(test_gc_matmul_shared_a) {
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            char name[96];
            gc_ctx c;
            snprintf(name, sizeof name,
                     "matmul shared 2-D [2,4] x batched [3,4,3] ta=%d tb=%d",
                     ta, tb);
            gc_begin(&c, name, 400 + 2 * ta + tb);
            mg_tensor a = ta ? gc_x(&c, 2, S(4, 2)) : gc_x(&c, 2, S(2, 4));
            mg_tensor b =
                tb ? gc_x(&c, 3, S(3, 3, 4)) : gc_x(&c, 3, S(3, 4, 3));
            gc_check(&c, mg_matmul(c.g, a, b, ta, tb));
            gc_end(&c);
        }
}
END_TEST

START_TEST(test_gc_matmul_4d) {
    gc_ctx c;
    gc_begin(&c, "matmul [2,2,3,4] x [2,2,4,2]", 500);
    mg_tensor a = gc_x(&c, 4, S(2, 2, 3, 4));
    mg_tensor b = gc_x(&c, 4, S(2, 2, 4, 2));
    gc_check(&c, mg_matmul(c.g, a, b, 0, 0));
    gc_end(&c);

    gc_begin(&c, "matmul [2,2,3,4] x shared [2,4] trans_b", 501);
    a = gc_x(&c, 4, S(2, 2, 3, 4));
    b = gc_x(&c, 2, S(2, 4));
    gc_check(&c, mg_matmul(c.g, a, b, 0, 1));
    gc_end(&c);
}
END_TEST

TH_PART(gradcheck_matmul_tcase, "matmul", 120, test_gc_matmul_2d,
        test_gc_matmul_batched, test_gc_matmul_shared_b,
        test_gc_matmul_shared_a, test_gc_matmul_4d)
