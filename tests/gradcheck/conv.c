/*
 * gradcheck/conv.c - part of test_gradcheck: analytic gradients against
 * float64 central finite differences (gc_* in helpers/gradcheck.h) for conv2d
 * with stride, padding, dilation and groups, and in a chain.
 */
#include "../helpers.h"

/* ------------------------------------------------------------------ conv2d */

typedef struct gconv {
    int64_t x[4], w[4];
    int sh, sw, ph, pw, dh, dw, groups;
    const char *desc;
} gconv;

static const gconv gconvs[] = {
    {{2, 3, 5, 4}, {2, 3, 3, 3}, 1, 1, 0, 0, 1, 1, 1, "3x3 valid"},
    {{1, 2, 6, 5}, {3, 2, 3, 2}, 2, 1, 1, 2, 1, 1, 1, "stride 2x1 pad 1x2"},
    {{1, 4, 6, 6}, {4, 2, 2, 3}, 2, 2, 1, 0, 2, 1, 2, "groups 2 dilation 2x1"},
    {{2, 3, 4, 4}, {3, 1, 3, 3}, 1, 1, 1, 1, 1, 1, 3, "depthwise pad 1"},
    {{2, 3, 3, 4}, {2, 3, 1, 1}, 1, 1, 0, 0, 1, 1, 1, "1x1 direct"},
    {{1, 2, 5, 5}, {2, 2, 1, 1}, 2, 2, 1, 1, 1, 1, 1, "1x1 stride 2 pad 1"},
};

START_TEST(test_gc_conv2d) {
    for (int k = 0; k < (int)(sizeof gconvs / sizeof gconvs[0]); k++) {
        const gconv *c = &gconvs[k];
        char name[80];
        gc_ctx g;
        snprintf(name, sizeof name, "conv2d %s", c->desc);
        gc_begin(&g, name, 3100 + (uint64_t)k);
        mg_tensor x = gc_x(&g, 4, c->x), w = gc_p(&g, 4, c->w);
        gc_check(&g, mg_conv2d(g.g, x, w, c->sh, c->sw, c->ph, c->pw, c->dh,
                               c->dw, c->groups));
        gc_end(&g);
    }
}
END_TEST

/* conv + broadcast bias + relu, and x used twice (fan-out into conv) */
START_TEST(test_gc_conv2d_chain) {
    gc_ctx g;
    gc_begin(&g, "relu(conv2d(x, w) + b[O,1,1]) * conv2d(x, w2)", 3150);
    mg_tensor x = gc_x(&g, 4, S(2, 2, 5, 5));
    mg_tensor w = gc_p(&g, 4, S(3, 2, 3, 3)), b = gc_p(&g, 3, S(3, 1, 1));
    mg_tensor w2 = gc_p(&g, 4, S(3, 2, 1, 1));
    mg_tensor h =
        mg_relu(g.g, mg_add(g.g, mg_conv2d(g.g, x, w, 1, 1, 1, 1, 1, 1, 1), b));
    gc_check(&g, mg_mul(g.g, h, mg_conv2d(g.g, x, w2, 1, 1, 0, 0, 1, 1, 1)));
    gc_end(&g);
}
END_TEST

TH_PART(gradcheck_conv_tcase, "conv", 120, test_gc_conv2d, test_gc_conv2d_chain)
