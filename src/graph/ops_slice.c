/*
 * ops_slice.c - ops that copy a box of elements between tensors of the same
 * rank: slice (a window of x), pad (x inside zeros) and concat (two tensors
 * side by side). Slice and pad are each other's gradient and share their
 * attributes: the output shape in ndim/shape and the box corner in start.
 */
#include "graph.h"
#include "ops_internal.h"

#include <stdio.h>

/* The box is the smaller tensor (slice: y, pad: x); it must lie inside the
 * larger one at start. */
static mg_status box_check(const mg_tdesc *box, const mg_tdesc *big,
                           const int64_t *start, char *why, size_t len) {
    for (int i = 0; i < big->ndim; i++) {
        if (start[i] < 0 || start[i] > big->shape[i] - box->shape[i]) {
            /* start + length may not fit int64_t: then print them apart */
            int64_t end;
            if (__builtin_add_overflow(start[i], box->shape[i], &end))
                snprintf(why, len,
                         "axis %d: %lld elements from %lld are not inside "
                         "[0, %lld)",
                         i, (long long)box->shape[i], (long long)start[i],
                         (long long)big->shape[i]);
            else
                snprintf(why, len,
                         "axis %d: [%lld, %lld) is not inside [0, %lld)", i,
                         (long long)start[i], (long long)end,
                         (long long)big->shape[i]);
            return MG_ERR_INVALID_ARG;
        }
    }
    return MG_OK;
}

/* Shared by slice and pad: the output is attrs' shape, of x's rank. */
static mg_status window_infer(const mg_tdesc *x, const mg_attrs *a, bool pad,
                              mg_tdesc *out, char *why, size_t len) {
    mg_status s = mgi_float_check(x, "x", why, len);
    if (s == MG_OK) s = mgi_shape_check(a->ndim, a->shape, why, len);
    if (s != MG_OK) return s;
    if (a->ndim != x->ndim) {
        snprintf(why, len, "the output must have x's %d dims, not %d", x->ndim,
                 a->ndim);
        return MG_ERR_SHAPE;
    }
    *out = *x;
    for (int i = 0; i < x->ndim; i++) out->shape[i] = a->shape[i];
    return pad ? box_check(x, out, a->start, why, len)
               : box_check(out, x, a->start, why, len);
}

mg_status mgi_slice_infer(const mg_tdesc *in, int n_in, const mg_attrs *a,
                          mg_tdesc *out, char *why, size_t len) {
    (void)n_in;
    return window_infer(&in[0], a, false, out, why, len);
}

mg_status mgi_pad_infer(const mg_tdesc *in, int n_in, const mg_attrs *a,
                        mg_tdesc *out, char *why, size_t len) {
    (void)n_in;
    return window_infer(&in[0], a, true, out, why, len);
}

mg_status mgi_concat_infer(const mg_tdesc *in, int n_in, const mg_attrs *a,
                           mg_tdesc *out, char *why, size_t len) {
    (void)n_in;
    const mg_tdesc *x = &in[0], *y = &in[1];
    mg_status s = mgi_float_pair_check(x, "a", y, "b", why, len);
    if (s != MG_OK) return s;
    if (a->axis < 0 || a->axis >= x->ndim) {
        snprintf(why, len, "axis %d is out of range for %d dims", a->axis,
                 x->ndim);
        return MG_ERR_INVALID_ARG;
    }
    bool fits = x->ndim == y->ndim;
    for (int i = 0; fits && i < x->ndim; i++)
        fits = i == a->axis || x->shape[i] == y->shape[i];
    if (!fits) {
        snprintf(why, len, "shapes must match except along axis %d", a->axis);
        return MG_ERR_SHAPE;
    }
    *out = *x;
    if (__builtin_add_overflow(x->shape[a->axis], y->shape[a->axis],
                               &out->shape[a->axis])) {
        snprintf(why, len, "the joined axis %d overflows int64_t", a->axis);
        return MG_ERR_SHAPE;
    }
    return MG_OK;
}

/* A slice or pad of x with the given output shape and box corner. */
static mg_tensor window_build(mg_graph *g, mg_op op, mg_tensor x, int ndim,
                              const int64_t *shape, const int64_t *start) {
    mg_attrs at = {0};
    if (mgi_attrs_shape_set(&at, ndim, shape, mgi_op_str(op)) != MG_OK)
        return MG_NO_TENSOR;
    for (int i = 0; i < ndim; i++) at.start[i] = start[i];
    return mgi_graph_add_node(g, op, 1, &x, &at);
}

mg_tensor mg_slice(mg_graph *g, mg_tensor x, int axis, int64_t start,
                   int64_t length) {
    const mg_tdesc *xd = mgi_arg_desc(g, x, "slice");
    if (!xd) return MG_NO_TENSOR;
    const int nd = xd->ndim, ax = mg_axis_wrap(axis, nd);
    if (ax < 0 || ax >= nd) {
        mg_set_error(MG_ERR_INVALID_ARG,
                     "slice: axis %d is out of range for "
                     "%d dims",
                     axis, nd);
        return MG_NO_TENSOR;
    }
    int64_t shape[MG_MAX_DIMS], at[MG_MAX_DIMS] = {0};
    for (int i = 0; i < nd; i++) shape[i] = xd->shape[i];
    shape[ax] = length;
    at[ax] = start;
    return window_build(g, MG_OP_SLICE, x, nd, shape, at);
}

mg_tensor mg_pad(mg_graph *g, mg_tensor x, const int64_t *before,
                 const int64_t *after) {
    const mg_tdesc *xd = mgi_arg_desc(g, x, "pad");
    if (!xd) return MG_NO_TENSOR;
    int64_t shape[MG_MAX_DIMS], at[MG_MAX_DIMS];
    for (int i = 0; i < xd->ndim; i++) {
        at[i] = before ? before[i] : 0;
        const int64_t b = after ? after[i] : 0;
        if (at[i] < 0 || b < 0) {
            mg_set_error(MG_ERR_INVALID_ARG,
                         "pad: axis %d has padding %lld "
                         "before and %lld after; both must be >= 0",
                         i, (long long)at[i], (long long)b);
            return MG_NO_TENSOR;
        }
        if (__builtin_add_overflow(at[i], xd->shape[i], &shape[i]) ||
            __builtin_add_overflow(shape[i], b, &shape[i])) {
            mg_set_error(MG_ERR_SHAPE,
                         "pad: axis %d of size %lld with "
                         "padding %lld before and %lld after overflows "
                         "int64_t",
                         i, (long long)xd->shape[i], (long long)at[i],
                         (long long)b);
            return MG_NO_TENSOR;
        }
    }
    return window_build(g, MG_OP_PAD, x, xd->ndim, shape, at);
}

mg_tensor mg_concat(mg_graph *g, int n, const mg_tensor *xs, int axis) {
    if (n < 1 || !xs) {
        mg_set_error(MG_ERR_INVALID_ARG,
                     "concat: needs at least one tensor "
                     "(got %d%s)",
                     n, xs ? "" : ", NULL");
        return MG_NO_TENSOR;
    }
    const mg_tdesc *xd = mgi_arg_desc(g, xs[0], "concat");
    if (!xd) return MG_NO_TENSOR;
    mg_attrs at = {0};
    at.axis = mg_axis_wrap(axis, xd->ndim);
    /* Left to right, so the result of step i is the concat of xs[0..i]. */
    mg_tensor y = xs[0];
    for (int i = 1; i < n; i++) {
        const mg_tensor in[2] = {y, xs[i]};
        y = mgi_graph_add_node(g, MG_OP_CONCAT, 2, in, &at);
    }
    return y;
}

/* slice and pad: each is the other with the same corner and x's shape. */
mg_status mgi_window_grad(mg_graph *g, const mg_node *node, const mg_tensor *in,
                          mg_tensor y, mg_tensor gy, const bool *need,
                          mg_tensor *gin) {
    (void)y;
    const mg_tdesc xd = *mgi_graph_desc(g, in[0]);
    const mg_op back = node->op == MG_OP_SLICE ? MG_OP_PAD : MG_OP_SLICE;
    if (need[0])
        gin[0] =
            window_build(g, back, gy, xd.ndim, xd.shape, node->attrs->start);
    return mgi_grad_status(1, need, gin);
}

mg_status mgi_concat_grad(mg_graph *g, const mg_node *node, const mg_tensor *in,
                          mg_tensor y, mg_tensor gy, const bool *need,
                          mg_tensor *gin) {
    (void)y;
    const int ax = node->attrs->axis;
    const int64_t na = mgi_graph_desc(g, in[0])->shape[ax];
    if (need[0]) gin[0] = mg_slice(g, gy, ax, 0, na);
    if (need[1])
        gin[1] =
            mg_slice(g, gy, ax, na, mgi_node_desc(g, node)->shape[ax] - na);
    return mgi_grad_status(2, need, gin);
}
