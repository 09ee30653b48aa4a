/*
 * ops_random.c - dropout. The mask is a pure function of the op's
 * attributes and the run seed, so the gradient replays it as another
 * dropout op instead of storing it.
 */
#include "graph.h"
#include "ops_internal.h"

#include <stdio.h>

mg_status mgi_dropout_infer(const mg_tdesc *in, int n_in, const mg_attrs *a,
                            mg_tdesc *out, char *why, size_t len) {
    (void)n_in;
    mg_status s = mgi_float_check(&in[0], "x", why, len);
    if (s != MG_OK) return s;
    if (!(a->p >= 0.0 && a->p < 1.0)) { /* NaN fails too */
        snprintf(why, len, "p = %g is not in [0, 1)", a->p);
        return MG_ERR_INVALID_ARG;
    }
    *out = in[0];
    return MG_OK;
}

mg_tensor mgi_dropout_at(mg_graph *g, mg_tensor x, double p, uint64_t seed,
                         uint64_t offset) {
    mg_attrs at = {0};
    at.p = p;
    at.seed = seed;
    at.offset = offset;
    return mgi_graph_add_node(g, MG_OP_DROPOUT, 1, &x, &at);
}

mg_tensor mg_dropout(mg_graph *g, mg_tensor x, double p, uint64_t seed) {
    const mg_tdesc *xd = mgi_arg_desc(g, x, "dropout");
    if (!xd) return MG_NO_TENSOR;
    /* Each op owns the counters [offset, offset + numel), so no two
     * dropout ops share a mask. */
    const uint64_t numel = (uint64_t)mgi_tdesc_numel(xd);
    mg_tensor y = mgi_dropout_at(g, x, p, seed, g->rng_offset);
    if (y != MG_NO_TENSOR) g->rng_offset += numel;
    return y;
}

mg_status mgi_dropout_grad(mg_graph *g, const mg_node *node,
                           const mg_tensor *in, mg_tensor y, mg_tensor gy,
                           const bool *need, mg_tensor *gin) {
    (void)in;
    (void)y;
    const mg_attrs at = *node->attrs;
    if (need[0]) gin[0] = mgi_dropout_at(g, gy, at.p, at.seed, at.offset);
    return mgi_grad_status(1, need, gin);
}
