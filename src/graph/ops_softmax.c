/*
 * ops_softmax.c - softmax and log-softmax along one axis. Their gradients
 * are composed from existing ops, so neither needs a backward kernel.
 */
#include "graph.h"
#include "ops_internal.h"

static mg_tensor softmax_build(mg_graph *g, mg_op op, mg_tensor x, int axis) {
    const mg_tdesc *xd = mgi_arg_desc(g, x, mgi_op_str(op));
    if (!xd) return MG_NO_TENSOR;
    mg_attrs at = {0};
    at.axis = mg_axis_wrap(axis, xd->ndim);
    return mgi_graph_add_node(g, op, 1, &x, &at);
}

mg_tensor mg_softmax(mg_graph *g, mg_tensor x, int axis) {
    return softmax_build(g, MG_OP_SOFTMAX, x, axis);
}

mg_tensor mg_log_softmax(mg_graph *g, mg_tensor x, int axis) {
    return softmax_build(g, MG_OP_LOG_SOFTMAX, x, axis);
}

mg_status mgi_softmax_grad(mg_graph *g, const mg_node *node,
                           const mg_tensor *in, mg_tensor y, mg_tensor gy,
                           const bool *need, mg_tensor *gin) {
    (void)in;
    const int axis = node->attrs->axis;
    if (!need[0]) return MG_OK;
    if (node->op == MG_OP_SOFTMAX) /* y * (gy - sum(gy * y)) */
        gin[0] = mg_mul(
            g, y, mg_sub(g, gy, mg_sum(g, mg_mul(g, gy, y), 1, &axis, 1)));
    else /* gy - exp(y) * sum(gy) */
        gin[0] =
            mg_sub(g, gy, mg_mul(g, mg_exp(g, y), mg_sum(g, gy, 1, &axis, 1)));
    return mgi_grad_status(1, need, gin);
}
