/*
 * gradcheck/loss.c - part of test_gradcheck: analytic gradients against
 * float64 central finite differences (gc_* in helpers/gradcheck.h) for
 * cross_entropy, mse and linear_cross_entropy.
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

/* Both gradients of the fused op, h's and w's, for a chunk that divides N,
 * one that does not (5 rows in chunks of 2, 2, 1) and one row at a time;
 * and through a tanh before it, so that h's gradient flows on. */
START_TEST(test_gc_linear_cross_entropy) {
    const int64_t chunks[3] = {5, 2, 1};
    for (int k = 0; k < 3; k++) {
        gc_ctx c;
        char name[64];
        snprintf(name, sizeof name, "linear_cross_entropy chunk %lld",
                 (long long)chunks[k]);
        gc_begin(&c, name, 1800 + (uint64_t)k);
        mg_tensor h = gc_x(&c, 2, S(5, 3));
        mg_tensor w = gc_p(&c, 2, S(4, 3));
        mg_tensor y = gc_labels(&c, 5, 4);
        gc_check(&c, mg_linear_cross_entropy(c.g, h, w, y, chunks[k]));
        gc_end(&c);
    }
    gc_ctx c;
    gc_begin(&c, "linear_cross_entropy(tanh(x w1), w) default chunk", 1803);
    mg_tensor x = gc_x(&c, 2, S(6, 2));
    mg_tensor w1 = gc_p(&c, 2, S(2, 3));
    mg_tensor w = gc_p(&c, 2, S(7, 3));
    mg_tensor y = gc_labels(&c, 6, 7);
    gc_check(&c, mg_linear_cross_entropy(
                     c.g, mg_tanh(c.g, mg_matmul(c.g, x, w1, 0, 0)), w, y, 0));
    gc_end(&c);
}
END_TEST

/* With an ignore_index (mg_linear_cross_entropy_ex): rows 1 and 4 of 6
 * labelled -100, then the ignore_index 2, a class inside [0, V), for
 * chunks of 6 and 4 rows, the second given its logits (matmul(h, w, 0,
 * 1)): both gradients against finite differences, which see the mean
 * over the kept rows only. */
START_TEST(test_gc_linear_cross_entropy_ignore) {
    const int64_t ignores[2] = {-100, 2};
    for (int k = 0; k < 2; k++) {
        gc_ctx c;
        char name[80];
        snprintf(name, sizeof name,
                 "linear_cross_entropy_ex ignore_index %lld chunk %d",
                 (long long)ignores[k], k ? 4 : 6);
        gc_begin(&c, name, 1810 + (uint64_t)k);
        mg_tensor h = gc_x(&c, 2, S(6, 3));
        mg_tensor w = gc_p(&c, 2, S(5, 3));
        mg_tensor y = gc_labels(&c, 6, 5);
        /* gc_labels' data: the last leaf's; rows 1 and 4 ignored */
        int32_t *lab = (int32_t *)c.data[c.n - 1];
        for (int i = 0; i < 6; i++)
            if (lab[i] == ignores[k]) lab[i] = (int32_t)((ignores[k] + 1) % 5);
        lab[1] = lab[4] = (int32_t)ignores[k];
        const mg_linear_ce_opts o = {.chunk_rows = k ? 4 : 6,
                                     .has_ignore_index = 1,
                                     .ignore_index = ignores[k]};
        /* k 1: given its logits, which the forward reads */
        const mg_tensor lg =
            k ? mg_matmul(c.g, h, w, 0, 1) : MG_NO_TENSOR;
        gc_check(&c, mg_linear_cross_entropy_ex(c.g, h, w, y, lg, &o));
        gc_end(&c);
    }
}
END_TEST

TH_PART(gradcheck_loss_tcase, "loss", 120, test_gc_cross_entropy, test_gc_mse,
        test_gc_linear_cross_entropy, test_gc_linear_cross_entropy_ignore)
