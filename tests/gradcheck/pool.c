/*
 * gradcheck/pool.c - part of test_gradcheck: analytic gradients against
 * float64 central finite differences (gc_* in helpers/gradcheck.h) for max and
 * average pooling, with each side's padding, ceil_mode and
 * count_include_pad.
 */
#include "../helpers.h"

/* ------------------------------------------------------------------ pooling */

typedef struct gpool {
    int64_t x[4];
    mg_pool2d_opts o; /* kh, kw, sh, sw, pads t l b r, ceil_mode, cip */
    const char *desc;
} gpool;

/* gc_x draws x from a continuous distribution, so max-pool windows have
 * no ties for the finite differences to straddle. */
static const gpool gpools[] = {
    {{2, 2, 4, 4}, {2, 2, 2, 2, 0, 0, 0, 0, 0, 1}, "2x2/2"},
    {{1, 2, 5, 6}, {3, 3, 2, 2, 1, 1, 1, 1, 0, 1}, "3x3/2 pad 1 (overlapping)"},
    {{1, 3, 5, 4}, {3, 2, 1, 2, 1, 0, 1, 0, 0, 1}, "3x2 stride 1x2 pad 1x0"},
    {{2, 1, 6, 5}, {2, 3, 3, 1, 1, 1, 1, 1, 0, 1}, "2x3 stride 3x1 pad 1"},
    {{1, 2, 5, 6}, {3, 2, 2, 1, 0, 1, 1, 0, 0, 1}, "pads t0 l1 b1 r0"},
    {{1, 2, 6, 6}, {3, 3, 2, 2, 1, 1, 1, 1, 1, 1}, "3x3/2 pad 1 ceil_mode"},
    {{1, 2, 7, 6},
     {3, 3, 2, 2, 1, 0, 0, 1, 1, 1},
     "pads t1 l0 b0 r1 ceil_mode"},
    {{1, 1, 4, 5},
     {2, 3, 2, 2, 0, 1, 1, 1, 1, 1},
     "ceil_mode window dropped (h) and overhanging (w)"},
    {{1, 2, 6, 6},
     {3, 3, 2, 2, 1, 1, 1, 1, 1, 0},
     "3x3/2 pad 1 ceil_mode count_include_pad=0"},
    {{2, 1, 5, 6},
     {3, 2, 2, 1, 0, 1, 1, 0, 0, 0},
     "pads t0 l1 b1 r0 count_include_pad=0"},
};

START_TEST(test_gc_pool2d) {
    for (int avg = 0; avg < 2; avg++)
        for (int k = 0; k < (int)(sizeof gpools / sizeof gpools[0]); k++) {
            const gpool *c = &gpools[k];
            if (!avg && !c->o.count_include_pad) continue; /* no divisor */
            char name[96];
            gc_ctx g;
            snprintf(name, sizeof name, "%s_pool2d %s", avg ? "avg" : "max",
                     c->desc);
            gc_begin(&g, name, 3200 + 10 * (uint64_t)avg + (uint64_t)k);
            mg_tensor x = gc_x(&g, 4, c->x);
            gc_check(&g, avg ? mg_avg_pool2d_ex(g.g, x, &c->o)
                             : mg_max_pool2d_ex(g.g, x, &c->o));
            gc_end(&g);
        }
}
END_TEST

/* The compact saved forms (issue 29): with mg_checkpoints.compact, the
 * pools read their input's argmax (max_pool2d_argmax,
 * max_pool2d_grad_argmax) and the relus their sign (pack_sign,
 * relu_grad_mask): y = scale(max_pool(relu(leaky_relu(scale(x))))), where
 * relu's output is read backward only for its sign and argmax, and leaky
 * relu's input only for its sign. Every pool geometry above. */
START_TEST(test_gc_pool2d_compact) {
    const mg_checkpoints ck = {.policy = MG_CKPT_NONE, .compact = 1};
    for (int k = 0; k < (int)(sizeof gpools / sizeof gpools[0]); k++) {
        const gpool *c = &gpools[k];
        if (!c->o.count_include_pad) continue;
        char name[96];
        gc_ctx g;
        snprintf(name, sizeof name, "compact max_pool2d %s", c->desc);
        gc_begin(&g, name, 3300 + (uint64_t)k);
        mg_tensor x = gc_x(&g, 4, c->x);
        mg_tensor h = mg_leaky_relu(g.g, mg_scale(g.g, x, 1.25), 0.2);
        h = mg_max_pool2d_ex(g.g, mg_relu(g.g, h), &c->o);
        g.fwd_end = mg_graph_num_tensors(g.g);
        mg_tensor L = gc_loss(&g, mg_scale(g.g, h, 2.0));
        const int32_t n_fwd = mg_graph_num_tensors(g.g);
        gc_check_ys_ex(&g, 1, &L, NULL, &ck, NULL);
        int packs = 0;
        for (int32_t t = n_fwd; t < mg_graph_num_tensors(g.g); t++) {
            const char *op = mg_tensor_op_name(g.g, t);
            packs +=
                !strcmp(op, "pack_sign") || !strcmp(op, "max_pool2d_argmax");
        }
        ck_assert_msg(packs == 3, "%s: %d packs, not 3", name, packs);
        gc_end(&g);
    }
}
END_TEST

TH_PART(gradcheck_pool_tcase, "pool", 120, test_gc_pool2d,
        test_gc_pool2d_compact)
