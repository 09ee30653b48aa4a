/*
 * gradcheck/attention.c - part of test_gradcheck: analytic gradients against
 * float64 central finite differences (gc_* in helpers/gradcheck.h) for
 * attention with and without the causal mask; the fused op with additive
 * masks, dropout, tiles split across blocks and the log-sum-exp column of its
 * packed output; and the small builders.
 */
#include "../helpers.h"

/* ------------------------------------------------------------------ attention
 * and the small builders */

START_TEST(test_gc_attention) {
    for (int causal = 0; causal < 2; causal++) {
        char name[80];
        gc_ctx g;
        snprintf(name, sizeof name,
                 "attention [2,3,4]x[2,5,4]x[2,5,2] causal=%d", causal);
        gc_begin(&g, name, 3700 + (uint64_t)causal);
        mg_tensor q = gc_x(&g, 3, S(2, 3, 4)), k = gc_x(&g, 3, S(2, 5, 4));
        mg_tensor v = gc_x(&g, 3, S(2, 5, 2));
        gc_check(&g, mg_attention(g.g, q, k, v, causal, 0));
        gc_end(&g);

        snprintf(name, sizeof name,
                 "self-attention of x W with 2 heads causal=%d", causal);
        gc_begin(&g, name, 3710 + (uint64_t)causal);
        mg_tensor x = gc_x(&g, 3, S(2, 2, 4)); /* [heads, L, d] */
        mg_tensor w = gc_p(&g, 2, S(4, 4));
        mg_tensor h = mg_matmul(g.g, x, w, 0, 0);
        gc_check(&g, mg_attention(g.g, h, x, h, causal, 0.7));
        gc_end(&g);
    }
}
END_TEST

/* The fused op over several query and key tiles (64 and 128 rows), with a
 * broadcast additive mask, causality and dropout on the weights (the same
 * counters in every evaluation). */
START_TEST(test_gc_attention_fused) {
    for (int v = 0; v < 4; v++) {
        char name[96];
        gc_ctx g;
        const int causal = v & 1, drop = v >= 2;
        snprintf(name, sizeof name,
                 "attention_ex [2,70,3]x[2,140,3]x[2,140,2] mask [70,140] "
                 "causal=%d dropout=%d",
                 causal, drop);
        gc_begin(&g, name, 3730 + (uint64_t)v);
        mg_tensor q = gc_x(&g, 3, S(2, 70, 3)), k = gc_x(&g, 3, S(2, 140, 3));
        mg_tensor vv = gc_x(&g, 3, S(2, 140, 2));
        /* differentiated in two of the four: its gradient is the scores',
         * summed over the batch it broadcasts across */
        mg_tensor m = v == 1 || v == 2 ? gc_x(&g, 2, S(70, 140))
                                       : gc_const(&g, 2, S(70, 140), -1, 1);
        const mg_attention_opts o = {.causal = causal,
                                     .scale = 0.8,
                                     .dropout_p = drop ? 0.3 : 0,
                                     .seed = 5};
        gc_check(&g, mg_attention_ex(g.g, q, k, vv, m, &o));
        gc_end(&g);
    }
}
END_TEST

/* The whole packed output of the op: o and each row's log-sum-exp, whose
 * gradient flows into the scores as well (reached through the slice that
 * mg_attention returns). */
START_TEST(test_gc_attention_lse) {
    gc_ctx g;
    gc_begin(&g, "attention packed [o, lse] of [3,5,4]x[3,6,4]x[3,6,3]", 3740);
    mg_tensor q = gc_x(&g, 3, S(3, 5, 4)), k = gc_x(&g, 3, S(3, 6, 4));
    mg_tensor v = gc_x(&g, 3, S(3, 6, 3));
    mg_tensor o = mg_attention(g.g, q, k, v, 1, 0);
    mg_tensor packed = mg_tensor_input(g.g, o, 0);
    ck_assert_str_eq(mg_tensor_op_name(g.g, packed), "attention");
    gc_check(&g, packed);
    gc_end(&g);
}
END_TEST

START_TEST(test_gc_small_builders) {
    gc_ctx g;
    gc_begin(&g, "causal_mask [2,3,4] value 0.5", 3720);
    mg_tensor x = gc_x(&g, 3, S(2, 3, 4));
    gc_check(&g, mg_causal_mask(g.g, x, 0.5));
    gc_end(&g);

    gc_begin(&g, "global_avg_pool2d then flatten(conv2d)", 3721);
    x = gc_x(&g, 4, S(2, 3, 3, 4));
    mg_tensor w = gc_p(&g, 4, S(2, 3, 2, 2));
    mg_tensor f = mg_flatten(g.g, mg_conv2d(g.g, x, w, 1, 1, 0, 0, 1, 1, 1), 1);
    mg_tensor p = mg_global_avg_pool2d(g.g, x);
    gc_check(&g, mg_matmul(g.g, p, mg_slice(g.g, f, 1, 0, 3), 1, 0));
    gc_end(&g);
}
END_TEST

TH_PART(gradcheck_attention_tcase, "attention", 120, test_gc_attention,
        test_gc_attention_fused, test_gc_attention_lse, test_gc_small_builders)
