/*
 * ops_attention.c - builders composed of other ops: scaled dot-product
 * attention, global average pooling and flatten; and the causal mask op
 * that attention needs. Composites add no op-table entry of their own, so
 * autodiff, the planner and checkpointing see only the ops they are made of.
 */
#include "graph.h"
#include "ops_internal.h"

#include <math.h>
#include <stdio.h>

mg_status mgi_causal_mask_infer(const mg_tdesc *in, int n_in, const mg_attrs *a,
                                mg_tdesc *out, char *why, size_t len) {
    (void)n_in, (void)a;
    mg_status s = mgi_float_check(&in[0], "x", why, len);
    if (s == MG_OK && in[0].ndim < 2) {
        snprintf(why, len, "x must have at least 2 dims");
        s = MG_ERR_SHAPE;
    }
    if (s == MG_OK) *out = in[0];
    return s;
}

mg_tensor mg_causal_mask(mg_graph *g, mg_tensor x, double value) {
    mg_attrs at = {0};
    at.alpha = value;
    return mgi_graph_add_node(g, MG_OP_CAUSAL_MASK, 1, &x, &at);
}

/* Masked entries do not depend on x: their gradient is 0, the same mask
 * with 0 as the value. */
mg_status mgi_causal_mask_grad(mg_graph *g, const mg_node *node,
                               const mg_tensor *in, mg_tensor y, mg_tensor gy,
                               const bool *need, mg_tensor *gin) {
    (void)node;
    (void)in;
    (void)y;
    if (need[0]) gin[0] = mg_causal_mask(g, gy, 0.0);
    return mgi_grad_status(1, need, gin);
}

/* q [..., Lq, d], k [..., Lk, d], v [..., Lk, dv] with equal leading dims.
 * Checked here so that a mistake is reported as attention's, not as one of
 * the matmuls it builds. */
static mg_status attention_check(const mg_tdesc *q, const mg_tdesc *k,
                                 const mg_tdesc *v) {
    char a[128], b[128], c[128];
    bool ok = q->ndim >= 2 && q->ndim == k->ndim && q->ndim == v->ndim;
    const int nd = q->ndim;
    for (int i = 0; ok && i < nd - 2; i++)
        ok = q->shape[i] == k->shape[i] && q->shape[i] == v->shape[i];
    ok = ok && q->shape[nd - 1] == k->shape[nd - 1] &&
         k->shape[nd - 2] == v->shape[nd - 2];
    if (ok) return MG_OK;
    return mg_set_error(MG_ERR_SHAPE,
                        "attention: q %s, k %s and v %s do not fit [..., Lq, "
                        "d], [..., Lk, d] and [..., Lk, dv]",
                        mgi_shape_str(q, a, sizeof a),
                        mgi_shape_str(k, b, sizeof b),
                        mgi_shape_str(v, c, sizeof c));
}

mg_tensor mg_attention(mg_graph *g, mg_tensor q, mg_tensor k, mg_tensor v,
                       int causal, double scale) {
    const mg_tdesc *p;
    mg_tdesc qd, kd, vd;
    if (!(p = mgi_arg_desc(g, q, "attention (q)"))) return MG_NO_TENSOR;
    qd = *p;
    if (!(p = mgi_arg_desc(g, k, "attention (k)"))) return MG_NO_TENSOR;
    kd = *p;
    if (!(p = mgi_arg_desc(g, v, "attention (v)"))) return MG_NO_TENSOR;
    vd = *p;
    if (attention_check(&qd, &kd, &vd) != MG_OK) return MG_NO_TENSOR;
    if (!isfinite(scale)) {
        mg_set_error(MG_ERR_INVALID_ARG, "attention: scale %g is not finite",
                     scale);
        return MG_NO_TENSOR;
    }
    if (scale == 0) scale = 1.0 / sqrt((double)qd.shape[qd.ndim - 1]);
    mg_tensor s = mg_scale(g, mg_matmul(g, q, k, 0, 1), scale);
    /* -inf, not a large negative number: masked scores then weigh exactly
     * 0, and no row is fully masked (column 0 is never above the
     * diagonal), so softmax never sees a row of -inf. */
    if (causal) s = mg_causal_mask(g, s, -INFINITY);
    return mg_matmul(g, mg_softmax(g, s, -1), v, 0, 0);
}

mg_tensor mg_global_avg_pool2d(mg_graph *g, mg_tensor x) {
    const mg_tdesc *xd = mgi_arg_desc(g, x, "global_avg_pool2d");
    if (!xd) return MG_NO_TENSOR;
    if (xd->ndim != 4) {
        char buf[128];
        mg_set_error(MG_ERR_SHAPE,
                     "global_avg_pool2d: x must be 4-D [N, C, H, W], not %s",
                     mgi_shape_str(xd, buf, sizeof buf));
        return MG_NO_TENSOR;
    }
    static const int hw[2] = {2, 3};
    return mg_mean(g, x, 2, hw, 0);
}

mg_tensor mg_flatten(mg_graph *g, mg_tensor x, int start_axis) {
    const mg_tdesc *xd = mgi_arg_desc(g, x, "flatten");
    if (!xd) return MG_NO_TENSOR;
    const int nd = xd->ndim, ax = mg_axis_wrap(start_axis, nd);
    if (ax < 0 || ax >= nd) {
        mg_set_error(MG_ERR_INVALID_ARG,
                     "flatten: start_axis %d is out of range for %d dims",
                     start_axis, nd);
        return MG_NO_TENSOR;
    }
    int64_t shape[MG_MAX_DIMS];
    for (int i = 0; i < ax; i++) shape[i] = xd->shape[i];
    shape[ax] = 1;
    for (int i = ax; i < nd; i++) shape[ax] *= xd->shape[i];
    return mg_reshape(g, x, ax + 1, shape);
}
