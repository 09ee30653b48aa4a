/*
 * ops_reduce.c - sum and mean over axes, and broadcast_to, their adjoint:
 * each one's gradient is built from the other.
 */
#include "../common/group_reduce.h"
#include "graph.h"
#include "ops_internal.h"

#include <stdio.h>

/* Axes come from the caller in any order and sign; the builder wraps and
 * sorts them, and the shape rule rejects what is still wrong, so the
 * attributes kernels see are sorted, unique and non-negative. */
mg_status mgi_reduce_infer(const mg_tdesc *in, int n_in, const mg_attrs *a,
                           mg_tdesc *out, char *why, size_t len) {
    (void)n_in;
    mg_status s = mgi_float_check(&in[0], "x", why, len);
    if (s != MG_OK) return s;
    const int nd = in[0].ndim;
    bool reduced[MG_MAX_DIMS] = {false};
    for (int i = 0; i < a->naxes; i++) {
        int ax = a->axes[i];
        if (ax < 0 || ax >= nd) {
            snprintf(why, len, "axis %d is out of range for %d dims", ax, nd);
            return MG_ERR_INVALID_ARG;
        }
        if (reduced[ax] || (i > 0 && ax < a->axes[i - 1])) {
            snprintf(why, len,
                     reduced[ax] ? "axis %d is listed twice"
                                 : "axes must be sorted (at %d)",
                     ax);
            return MG_ERR_INVALID_ARG;
        }
        reduced[ax] = true;
    }
    out->dtype = in[0].dtype;
    out->ndim = 0;
    for (int i = 0; i < nd; i++) {
        if (!reduced[i]) out->shape[out->ndim++] = in[0].shape[i];
        else if (a->keepdims) out->shape[out->ndim++] = 1;
    }
    return MG_OK;
}

double mgi_reduce_flops(const mg_tdesc *in, int n_in, const mg_attrs *a,
                        const mg_tdesc *out) {
    (void)n_in, (void)a, (void)out;
    return (double)mgi_tdesc_numel(&in[0]);
}

/* The partial sums of the CUDA kernel's chunks (group_reduce.h), where a
 * few outputs each add many elements; the CPU needs none. */
size_t mgi_reduce_workspace(const mg_tdesc *in, int n_in, const mg_attrs *a,
                            const mg_tdesc *out) {
    (void)n_in;
    return mg_reduce_workspace(&in[0], a, mgi_tdesc_numel(out));
}

static mg_tensor reduce_build(mg_graph *g, mg_op op, mg_tensor x, int naxes,
                              const int *axes, int keepdims) {
    const char *name = mgi_op_str(op);
    const mg_tdesc *xd = mgi_arg_desc(g, x, name);
    if (!xd) return MG_NO_TENSOR;
    const int nd = xd->ndim;
    mg_attrs at = {0};
    at.keepdims = keepdims != 0;
    if (naxes < 0 || naxes > MG_MAX_DIMS) {
        mg_set_error(MG_ERR_INVALID_ARG, "%s: naxes %d is not in 0..%d", name,
                     naxes, MG_MAX_DIMS);
        return MG_NO_TENSOR;
    }
    if (naxes == 0 || !axes) {
        at.naxes = nd;
        for (int i = 0; i < nd; i++) at.axes[i] = i;
    } else {
        at.naxes = naxes;
        for (int i = 0; i < naxes; i++) {
            /* Insertion sort: at most MG_MAX_DIMS entries. */
            int ax = mg_axis_wrap(axes[i], nd), j = i;
            for (; j > 0 && at.axes[j - 1] > ax; j--)
                at.axes[j] = at.axes[j - 1];
            at.axes[j] = ax;
        }
    }
    return mgi_graph_add_node(g, op, 1, &x, &at);
}

mg_tensor mg_sum(mg_graph *g, mg_tensor x, int naxes, const int *axes,
                 int keepdims) {
    return reduce_build(g, MG_OP_SUM, x, naxes, axes, keepdims);
}

mg_tensor mg_mean(mg_graph *g, mg_tensor x, int naxes, const int *axes,
                  int keepdims) {
    return reduce_build(g, MG_OP_MEAN, x, naxes, axes, keepdims);
}

mg_status mgi_reduce_grad(mg_graph *g, const mg_node *node, const mg_tensor *in,
                          mg_tensor y, mg_tensor gy, const bool *need,
                          mg_tensor *gin) {
    (void)y;
    const mg_tdesc xd = *mgi_graph_desc(g, in[0]);
    if (!need[0]) return MG_OK;
    /* gy with the reduced axes put back as size 1. */
    mg_tdesc kd = xd;
    for (int i = 0; i < node->attrs->naxes; i++)
        kd.shape[node->attrs->axes[i]] = 1;
    mg_tensor t = gy;
    if (node->op == MG_OP_MEAN) {
        /* Scaling before the broadcast touches fewer elements and gives
         * the same values bit for bit. */
        double count = (double)mgi_tdesc_numel(&xd) /
                       (double)mgi_tdesc_numel(mgi_node_desc(g, node));
        t = mg_scale(g, t, 1.0 / count);
    }
    t = mgi_reshape_as(g, t, &kd);
    gin[0] = mgi_tdesc_same_shape(&kd, &xd)
                 ? t
                 : mg_broadcast_to(g, t, xd.ndim, xd.shape);
    return mgi_grad_status(1, need, gin);
}

mg_status mgi_broadcast_to_infer(const mg_tdesc *in, int n_in,
                                 const mg_attrs *a, mg_tdesc *out, char *why,
                                 size_t len) {
    (void)n_in;
    mg_status s = mgi_float_check(&in[0], "x", why, len);
    if (s == MG_OK) s = mgi_shape_check(a->ndim, a->shape, why, len);
    if (s != MG_OK) return s;
    out->dtype = in[0].dtype;
    out->ndim = a->ndim;
    for (int i = 0; i < a->ndim; i++) out->shape[i] = a->shape[i];
    if (!mgi_shape_broadcasts_to(&in[0], out)) {
        char buf[128];
        snprintf(why, len, "x does not broadcast to %s",
                 mgi_shape_str(out, buf, sizeof buf));
        return MG_ERR_SHAPE;
    }
    return MG_OK;
}

mg_tensor mg_broadcast_to(mg_graph *g, mg_tensor x, int ndim,
                          const int64_t *shape) {
    mg_attrs at = {0};
    if (mgi_attrs_shape_set(&at, ndim, shape, "broadcast_to") != MG_OK)
        return MG_NO_TENSOR;
    return mgi_graph_add_node(g, MG_OP_BROADCAST_TO, 1, &x, &at);
}

mg_status mgi_broadcast_to_grad(mg_graph *g, const mg_node *node,
                                const mg_tensor *in, mg_tensor y, mg_tensor gy,
                                const bool *need, mg_tensor *gin) {
    (void)node;
    (void)y;
    const mg_tdesc xd = *mgi_graph_desc(g, in[0]);
    if (need[0]) gin[0] = mgi_sum_to(g, gy, &xd);
    return mgi_grad_status(1, need, gin);
}
