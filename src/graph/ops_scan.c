/*
 * ops_scan.c - cumsum along one axis (torch.cumsum). One op serves both
 * directions: its gradient is the cumulative sum of gy taken from the end
 * of the axis, the same op with the reverse attribute flipped, so no
 * backward kernel of its own is needed.
 */
#include "graph.h"
#include "ops_internal.h"

static mg_tensor cumsum_build(mg_graph *g, mg_tensor x, int axis, int reverse) {
    const mg_tdesc *xd = mgi_arg_desc(g, x, "cumsum");
    if (!xd) return MG_NO_TENSOR;
    mg_attrs at = {0};
    at.axis = mg_axis_wrap(axis, xd->ndim);
    at.reverse = reverse;
    return mgi_graph_add_node(g, MG_OP_CUMSUM, 1, &x, &at);
}

mg_tensor mg_cumsum(mg_graph *g, mg_tensor x, int axis) {
    return cumsum_build(g, x, axis, 0);
}

/* dx[i] = sum over k >= i of gy[k] (k <= i for a reversed cumsum). */
mg_status mgi_cumsum_grad(mg_graph *g, const mg_node *node, const mg_tensor *in,
                          mg_tensor y, mg_tensor gy, const bool *need,
                          mg_tensor *gin) {
    (void)in, (void)y;
    if (need[0])
        gin[0] = cumsum_build(g, gy, node->attrs->axis, !node->attrs->reverse);
    return mgi_grad_status(1, need, gin);
}
