/*
 * ops_gather.c - gather (torch.gather) and index_select along one axis,
 * and their gradients: helper ops that add gy into a zero tensor of x's
 * shape at the places the indices name, in a fixed order, so repeated
 * indices sum the same way every run (as embedding_grad does). An index
 * outside x's axis makes the run fail (the kernels check every index
 * before reading anything).
 */
#include "graph.h"
#include "ops_internal.h"

#include <stdio.h>

/* The axis, already wrapped by the builder, must be one of x's. */
static mg_status axis_check(const mg_tdesc *x, int axis, char *why,
                            size_t len) {
    if (x->ndim < 1) {
        snprintf(why, len, "x must have at least 1 dim");
        return MG_ERR_SHAPE;
    }
    if (axis < 0 || axis >= x->ndim) {
        snprintf(why, len, "axis %d is out of range for %d dims", axis,
                 x->ndim);
        return MG_ERR_INVALID_ARG;
    }
    return MG_OK;
}

/* gather (x, index): index (i32 or i64) has x's rank and no dim larger
 * than x's except along axis (torch.gather's rule); y has index's shape
 * and x's dtype, any of the four (a gather copies elements). */
mg_status mgi_gather_infer(const mg_tdesc *in, int n_in, const mg_attrs *a,
                           mg_tdesc *out, char *why, size_t len) {
    (void)n_in;
    const mg_tdesc *x = &in[0], *ix = &in[1];
    mg_status s = mgi_index_check(ix, "index", why, len);
    if (s == MG_OK) s = axis_check(x, a->axis, why, len);
    if (s != MG_OK) return s;
    char xs[128], is[128];
    if (ix->ndim != x->ndim) {
        snprintf(why, len, "index %s must have x's rank %d, not %d",
                 mgi_shape_str(ix, is, sizeof is), x->ndim, ix->ndim);
        return MG_ERR_SHAPE;
    }
    for (int i = 0; i < x->ndim; i++)
        if (i != a->axis && ix->shape[i] > x->shape[i]) {
            snprintf(why, len,
                     "index %s is larger than x %s in dim %d (only axis %d "
                     "may be)",
                     mgi_shape_str(ix, is, sizeof is),
                     mgi_shape_str(x, xs, sizeof xs), i, a->axis);
            return MG_ERR_SHAPE;
        }
    *out = *ix;
    out->dtype = x->dtype;
    return MG_OK;
}

/* index_select (x, index): a 1-D index; y is x with axis resized to it. */
mg_status mgi_index_select_infer(const mg_tdesc *in, int n_in,
                                 const mg_attrs *a, mg_tdesc *out, char *why,
                                 size_t len) {
    (void)n_in;
    const mg_tdesc *x = &in[0], *ix = &in[1];
    mg_status s = mgi_index_check(ix, "index", why, len);
    if (s == MG_OK) s = axis_check(x, a->axis, why, len);
    if (s != MG_OK) return s;
    if (ix->ndim != 1) {
        char is[128];
        snprintf(why, len, "index must be 1-D, not %s",
                 mgi_shape_str(ix, is, sizeof is));
        return MG_ERR_SHAPE;
    }
    *out = *x;
    out->shape[a->axis] = ix->shape[0];
    return MG_OK;
}

/* The gradient ops (gy, index) -> dx: x's shape is in the attributes. */
mg_status mgi_gather_grad_infer(const mg_tdesc *in, int n_in, const mg_attrs *a,
                                mg_tdesc *out, char *why, size_t len) {
    mg_status s = mgi_float_check(&in[0], "gy", why, len);
    if (s != MG_OK) return s;
    return mgi_grad_infer_via(mgi_gather_infer, in, n_in, a, out, why, len);
}

mg_status mgi_index_select_grad_infer(const mg_tdesc *in, int n_in,
                                      const mg_attrs *a, mg_tdesc *out,
                                      char *why, size_t len) {
    mg_status s = mgi_float_check(&in[0], "gy", why, len);
    if (s != MG_OK) return s;
    return mgi_grad_infer_via(mgi_index_select_infer, in, n_in, a, out, why,
                              len);
}

/* index_select_grad (gy, index) -> dx: the CUDA kernel reads, for each
 * slice of dx, only the index positions that name it, bucketed by value
 * (CSR: x's length along axis + 1 starts, then one position per index
 * entry, as int64; embedding_grad's form); the CPU needs none. */
size_t mgi_index_select_grad_workspace(const mg_tdesc *in, int n_in,
                                       const mg_attrs *a, const mg_tdesc *out) {
    (void)n_in;
    if (a->axis < 0 || a->axis >= out->ndim) return 0;
    return (size_t)(out->shape[a->axis] + 1 + mgi_tdesc_numel(&in[1])) *
           sizeof(int64_t);
}

static mg_tensor build(mg_graph *g, mg_op op, mg_tensor x, int axis,
                       mg_tensor index) {
    const mg_tdesc *xd = mgi_arg_desc(g, x, mgi_op_str(op));
    if (!xd) return MG_NO_TENSOR;
    mg_attrs at = {0};
    at.axis = mg_axis_wrap(axis, xd->ndim);
    const mg_tensor in[2] = {x, index};
    return mgi_graph_add_node(g, op, 2, in, &at);
}

mg_tensor mg_gather(mg_graph *g, mg_tensor x, int axis, mg_tensor index) {
    return build(g, MG_OP_GATHER, x, axis, index);
}

mg_tensor mg_index_select(mg_graph *g, mg_tensor x, int axis, mg_tensor index) {
    return build(g, MG_OP_INDEX_SELECT, x, axis, index);
}

/* The index is in no_grad_inputs: only x gets a gradient, from the
 * helper op of the same name plus _grad, which reads gy and the index. */
static mg_status scatter_grad(mg_graph *g, const mg_node *node,
                              const mg_tensor *in, mg_tensor gy,
                              const bool *need, mg_tensor *gin, mg_op op) {
    const mg_tdesc xd = *mgi_graph_desc(g, in[0]);
    mg_attrs at = {0};
    at.axis = node->attrs->axis;
    const mg_tensor args[2] = {gy, in[1]};
    if (need[0] && mgi_attrs_shape_set(&at, xd.ndim, xd.shape,
                                       mgi_op_str(node->op)) == MG_OK)
        gin[0] = mgi_graph_add_node(g, op, 2, args, &at);
    return mgi_grad_status(1, need, gin);
}

mg_status mgi_gather_grad(mg_graph *g, const mg_node *node, const mg_tensor *in,
                          mg_tensor y, mg_tensor gy, const bool *need,
                          mg_tensor *gin) {
    (void)y;
    return scatter_grad(g, node, in, gy, need, gin, MG_OP_GATHER_GRAD);
}

mg_status mgi_index_select_grad(mg_graph *g, const mg_node *node,
                                const mg_tensor *in, mg_tensor y, mg_tensor gy,
                                const bool *need, mg_tensor *gin) {
    (void)y;
    return scatter_grad(g, node, in, gy, need, gin, MG_OP_INDEX_SELECT_GRAD);
}
