/*
 * ops_shape.c - ops that only move or relabel elements (reshape, permute
 * and transpose, which is a permute) and fill, which makes a constant.
 * Tensors are always dense, so each of these is a copy at run time, but
 * for a reshape, which a plan makes a view of its input's block where it
 * can (MG_OPF_VIEW, src/rewrite/schedule.c).
 */
#include "graph.h"
#include "ops_internal.h"

#include <stdio.h>

mg_status mgi_reshape_infer(const mg_tdesc *in, int n_in, const mg_attrs *a,
                            mg_tdesc *out, char *why, size_t len) {
    (void)n_in;
    mg_status s = mgi_float_check(&in[0], "x", why, len);
    if (s == MG_OK) s = mgi_shape_check(a->ndim, a->shape, why, len);
    if (s != MG_OK) return s;
    out->dtype = in[0].dtype;
    out->ndim = a->ndim;
    for (int i = 0; i < a->ndim; i++) out->shape[i] = a->shape[i];
    if (mgi_tdesc_numel(out) < 0) {
        char buf[128];
        snprintf(why, len, "shape %s has more elements than int64_t can hold",
                 mgi_shape_str(out, buf, sizeof buf));
        return MG_ERR_SHAPE;
    }
    if (mgi_tdesc_numel(out) != mgi_tdesc_numel(&in[0])) {
        char buf[128];
        snprintf(why, len, "x has %lld elements but shape %s has %lld",
                 (long long)mgi_tdesc_numel(&in[0]),
                 mgi_shape_str(out, buf, sizeof buf),
                 (long long)mgi_tdesc_numel(out));
        return MG_ERR_SHAPE;
    }
    return MG_OK;
}

mg_tensor mg_reshape(mg_graph *g, mg_tensor x, int ndim, const int64_t *shape) {
    mg_attrs at = {0};
    if (mgi_attrs_shape_set(&at, ndim, shape, "reshape") != MG_OK)
        return MG_NO_TENSOR;
    return mgi_graph_add_node(g, MG_OP_RESHAPE, 1, &x, &at);
}

mg_tensor mgi_reshape_as(mg_graph *g, mg_tensor t, const mg_tdesc *d) {
    if (t == MG_NO_TENSOR || mgi_tdesc_same_shape(mgi_graph_desc(g, t), d))
        return t;
    return mg_reshape(g, t, d->ndim, d->shape);
}

mg_status mgi_reshape_grad(mg_graph *g, const mg_node *node,
                           const mg_tensor *in, mg_tensor y, mg_tensor gy,
                           const bool *need, mg_tensor *gin) {
    (void)node;
    (void)y;
    const mg_tdesc xd = *mgi_graph_desc(g, in[0]);
    if (need[0]) gin[0] = mgi_reshape_as(g, gy, &xd);
    return mgi_grad_status(1, need, gin);
}

mg_status mgi_permute_infer(const mg_tdesc *in, int n_in, const mg_attrs *a,
                            mg_tdesc *out, char *why, size_t len) {
    (void)n_in;
    mg_status s = mgi_float_check(&in[0], "x", why, len);
    if (s != MG_OK) return s;
    const int nd = in[0].ndim;
    bool seen[MG_MAX_DIMS] = {false};
    for (int i = 0; i < nd; i++) {
        int p = a->perm[i];
        if (p < 0 || p >= nd || seen[p]) {
            snprintf(why, len,
                     "perm is not a permutation of 0..%d (entry %d "
                     "is %d)",
                     nd - 1, i, p);
            return MG_ERR_INVALID_ARG;
        }
        seen[p] = true;
        out->shape[i] = in[0].shape[p];
    }
    out->dtype = in[0].dtype;
    out->ndim = nd;
    return MG_OK;
}

mg_tensor mg_permute(mg_graph *g, mg_tensor x, const int *perm) {
    const mg_tdesc *xd = mgi_arg_desc(g, x, "permute");
    if (!xd) return MG_NO_TENSOR;
    if (!perm && xd->ndim > 0) {
        mg_set_error(MG_ERR_INVALID_ARG, "permute: perm is NULL");
        return MG_NO_TENSOR;
    }
    mg_attrs at = {0};
    for (int i = 0; i < xd->ndim; i++) at.perm[i] = perm[i];
    /* A permute of a permute is one permute of the first's input: one copy
     * where there were two (an importer's Transpose of a Transpose, issue
     * 46), the same elements in the same places. Only a valid perm is
     * composed; the shape rule words the error for any other. */
    const mg_node *xn = &g->nodes[x];
    bool valid = xn->op == MG_OP_PERMUTE;
    bool seen[MG_MAX_DIMS] = {false};
    for (int i = 0; valid && i < xd->ndim; i++) {
        valid = perm[i] >= 0 && perm[i] < xd->ndim && !seen[perm[i]];
        if (valid) seen[perm[i]] = true;
    }
    if (valid) {
        for (int i = 0; i < xd->ndim; i++)
            at.perm[i] = xn->attrs->perm[perm[i]];
        x = xn->in[0];
    }
    return mgi_graph_add_node(g, MG_OP_PERMUTE, 1, &x, &at);
}

mg_tensor mg_transpose(mg_graph *g, mg_tensor x, int axis0, int axis1) {
    const mg_tdesc *xd = mgi_arg_desc(g, x, "transpose");
    if (!xd) return MG_NO_TENSOR;
    const int nd = xd->ndim;
    int a0 = mg_axis_wrap(axis0, nd), a1 = mg_axis_wrap(axis1, nd);
    if (a0 < 0 || a0 >= nd || a1 < 0 || a1 >= nd) {
        mg_set_error(MG_ERR_INVALID_ARG,
                     "transpose: axes %d and %d must be in -%d..%d", axis0,
                     axis1, nd, nd - 1);
        return MG_NO_TENSOR;
    }
    int perm[MG_MAX_DIMS];
    for (int i = 0; i < nd; i++) perm[i] = i;
    perm[a0] = a1;
    perm[a1] = a0;
    return mg_permute(g, x, perm);
}

mg_status mgi_permute_grad(mg_graph *g, const mg_node *node,
                           const mg_tensor *in, mg_tensor y, mg_tensor gy,
                           const bool *need, mg_tensor *gin) {
    (void)in;
    (void)y;
    int inv[MG_MAX_DIMS];
    for (int i = 0; i < mgi_node_desc(g, node)->ndim; i++)
        inv[node->attrs->perm[i]] = i;
    if (need[0]) gin[0] = mg_permute(g, gy, inv);
    return mgi_grad_status(1, need, gin);
}

mg_status mgi_fill_infer(const mg_tdesc *in, int n_in, const mg_attrs *a,
                         mg_tdesc *out, char *why, size_t len) {
    (void)in, (void)n_in;
    int dtype = a->dtype;
    if (!mgi_dtype_is_float((mg_dtype)dtype)) {
        snprintf(why, len, "dtype must be f32, f64, bf16 or f16, not %s",
                 mg_dtype_name((mg_dtype)dtype));
        return MG_ERR_DTYPE;
    }
    mg_status s = mgi_shape_check(a->ndim, a->shape, why, len);
    if (s != MG_OK) return s;
    out->dtype = (mg_dtype)dtype;
    out->ndim = a->ndim;
    for (int i = 0; i < a->ndim; i++) out->shape[i] = a->shape[i];
    return MG_OK;
}

mg_tensor mg_fill(mg_graph *g, mg_dtype dtype, int ndim, const int64_t *shape,
                  double value) {
    mg_attrs at = {0};
    if (mgi_attrs_shape_set(&at, ndim, shape, "fill") != MG_OK)
        return MG_NO_TENSOR;
    at.dtype = dtype;
    at.alpha = value;
    return mgi_graph_add_node(g, MG_OP_FILL, 0, NULL, &at);
}
