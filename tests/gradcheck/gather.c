/*
 * gradcheck/gather.c - part of test_gradcheck: analytic gradients against
 * float64 central finite differences (gc_* in helpers/gradcheck.h) for
 * gather and index_select (w.r.t. x), with repeated indices, int32 and
 * int64 indices and each axis.
 */
#include "../helpers.h"

/* An index leaf of dtype dt and any shape, entries in [0, bound), owned by
 * the context like gc_labels' (which makes 1-D int32 ones). */
static mg_tensor gc_index(gc_ctx *c, mg_dtype dt, int ndim,
                          const int64_t *shape, int bound) {
    ck_assert_msg(c->n < GC_MAX_LEAVES, "%s: too many leaves", c->name);
    mg_tensor t = mg_input(c->g, "index", dt, ndim, shape);
    ck_assert_msg(t != MG_NO_TENSOR, "%s: creating the index failed: %s",
                  c->name, mg_last_error());
    const int64_t n = th_numel(ndim, shape);
    void *d = malloc((size_t)n * mg_dtype_size(dt));
    ck_assert(d != NULL);
    for (int64_t i = 0; i < n; i++) {
        const uint64_t v = th_rng_next(&c->rng) % (uint64_t)bound;
        if (dt == MG_I64) ((int64_t *)d)[i] = (int64_t)v;
        else ((int32_t *)d)[i] = (int32_t)v;
    }
    c->t[c->n] = t;
    c->data[c->n] = d;
    c->numel[c->n] = n;
    c->dtype[c->n] = dt;
    c->is_x[c->n] = 0;
    c->n++;
    return t;
}

START_TEST(test_gc_gather) {
    for (int axis = 0; axis < 3; axis++) {
        const int64_t xs[3] = {3, 4, 5};
        /* twice x's length along axis (so indices repeat), and smaller than
         * x in the other dims where torch.gather allows it */
        int64_t is[3] = {2, 4, 3};
        is[axis] = 2 * xs[axis];
        char name[64];
        snprintf(name, sizeof name, "gather x [3,4,5] axis %d", axis);
        gc_ctx c;
        gc_begin(&c, name, 4400 + axis);
        mg_tensor x = gc_x(&c, 3, xs);
        mg_tensor i =
            gc_index(&c, axis == 1 ? MG_I64 : MG_I32, 3, is, (int)xs[axis]);
        gc_check(&c, mg_gather(c.g, x, axis, i));
        gc_end(&c);
    }
    /* gather of a computed tensor, read twice */
    gc_ctx c;
    gc_begin(&c, "tanh(gather(x * x, -1, i)) + gather(x, 1, i)", 4410);
    mg_tensor x = gc_x(&c, 2, S(3, 6));
    mg_tensor i = gc_index(&c, MG_I32, 2, S(3, 8), 6);
    gc_check(&c,
             mg_add(c.g, mg_tanh(c.g, mg_gather(c.g, mg_mul(c.g, x, x), -1, i)),
                    mg_gather(c.g, x, 1, i)));
    gc_end(&c);
}
END_TEST

START_TEST(test_gc_index_select) {
    for (int axis = -1; axis < 3; axis++) {
        char name[64];
        snprintf(name, sizeof name, "index_select x [3,4,5] axis %d", axis);
        gc_ctx c;
        gc_begin(&c, name, 4500 + axis + 1);
        const int64_t xs[3] = {3, 4, 5};
        mg_tensor x = gc_x(&c, 3, xs);
        const int ax = axis < 0 ? 2 : axis;
        mg_tensor i = gc_index(&c, axis == 0 ? MG_I64 : MG_I32, 1,
                               S(2 * xs[ax] + 1), (int)xs[ax]);
        gc_check(&c, mg_index_select(c.g, x, axis, i));
        gc_end(&c);
    }
}
END_TEST

TH_PART(gradcheck_gather_tcase, "gather", 120, test_gc_gather,
        test_gc_index_select)
