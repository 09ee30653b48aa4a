/*
 * onnx_ops_norm.c - normalisation and what reduces over axes:
 * BatchNormalization, LayerNormalization, Softmax, LogSoftmax, Dropout,
 * ReduceMean and ReduceSum.
 */
#include <math.h>

#include "onnx_ops.h"

mg_status mgi_onnx_op_batchnorm(mgi_octx *c, const node_t *n) {
    mg_tensor x = mgi_onnx_float_in(c, n, 0), sc = mgi_onnx_float_in(c, n, 1),
              b = mgi_onnx_float_in(c, n, 2);
    if (x == MG_NO_TENSOR || sc == MG_NO_TENSOR || b == MG_NO_TENSOR)
        return mg_last_status();
    double eps = mgi_onnx_attr_eps(c, n);
    /* opsets 7-8: spatial 0 normalises each element over the batch */
    if (!mgi_onnx_attr_flag(c, n, "spatial", true))
        return UNSUP("BatchNormalization with spatial 0");
    mg_graph *g = c->g;
    for (size_t k = 1; k < n->n_output; k++)
        if (mgi_onnx_is_read(c, n->output[k]))
            return UNSUP("BatchNormalization's running statistics outputs");
    if (c->opts.training)
        return mgi_onnx_out(c, n, 0, mg_batchnorm(g, x, sc, b, eps));
    /* inference: y = x * s + (b - mean * s), s = scale / sqrt(var + eps) */
    mg_tensor mean = mgi_onnx_float_in(c, n, 3),
              var = mgi_onnx_float_in(c, n, 4);
    if (mean == MG_NO_TENSOR || var == MG_NO_TENSOR) return mg_last_status();
    int64_t xs[MG_MAX_DIMS];
    int nd = mgi_onnx_tshape(c, x, xs);
    if (nd < 2) return BAD_ATTR("input of rank %d", nd);
    int64_t cs[MG_MAX_DIMS];
    cs[0] = xs[1];
    for (int d = 1; d < nd - 1; d++) cs[d] = 1;
    /* eps in var's dtype: a float16 or bfloat16 model's own */
    mg_tensor s = mg_div(g, sc,
                         mg_sqrt(g, mg_add(g, var,
                                           mg_fill(g, mgi_onnx_dtype_of(c, var),
                                                   0, NULL, eps))));
    mg_tensor sh = mg_sub(g, b, mg_mul(g, mean, s));
    mg_tensor y = mg_add(g, mg_mul(g, x, mg_reshape(g, s, nd - 1, cs)),
                         mg_reshape(g, sh, nd - 1, cs));
    return mgi_onnx_out(c, n, 0, y);
}

mg_status mgi_onnx_op_layernorm(mgi_octx *c, const node_t *n) {
    mg_tensor x = mgi_onnx_float_in(c, n, 0), sc = mgi_onnx_float_in(c, n, 1);
    if (x == MG_NO_TENSOR || sc == MG_NO_TENSOR) return mg_last_status();
    for (size_t k = 1; k < n->n_output; k++)
        if (mgi_onnx_is_read(c, n->output[k]))
            return UNSUP("LayerNormalization's Mean and InvStdDev outputs");
    int64_t xs[MG_MAX_DIMS], ss[MG_MAX_DIMS];
    int nd = mgi_onnx_tshape(c, x, xs);
    int64_t axis = mgi_onnx_attr_i(c, n, "axis", -1);
    if (!mgi_onnx_norm_axis(&axis, nd)) return BAD_ATTR("bad axis");
    mg_tensor b;
    if (mgi_onnx_in(c, n, 2)) {
        b = mgi_onnx_float_in(c, n, 2);
    } else {
        int ns = mgi_onnx_tshape(c, sc, ss);
        b = mg_fill(c->g, mgi_onnx_dtype_of(c, sc), ns, ss, 0.0);
    }
    if (b == MG_NO_TENSOR) return mgi_onnx_out(c, n, 0, b);
    return mgi_onnx_out(
        c, n, 0,
        mg_layernorm(c->g, x, sc, b, nd - (int)axis, mgi_onnx_attr_eps(c, n)));
}

static mg_status softmax_like(mgi_octx *c, const node_t *n, bool log) {
    mg_tensor x = mgi_onnx_float_in(c, n, 0);
    if (x == MG_NO_TENSOR) return mg_last_status();
    int64_t xs[MG_MAX_DIMS];
    int nd = mgi_onnx_tshape(c, x, xs);
    int64_t axis = mgi_onnx_attr_i(c, n, "axis", c->opset >= 13 ? -1 : 1);
    if (!mgi_onnx_norm_axis(&axis, nd)) return BAD_ATTR("bad axis");
    mg_graph *g = c->g;
    if (c->opset < 13 && axis != nd - 1) {
        /* before opset 13: over the flattened axis.. dims */
        int64_t s2[2] = {1, 1};
        for (int d = 0; d < nd; d++) s2[d < axis ? 0 : 1] *= xs[d];
        mg_tensor f = mg_reshape(g, x, 2, s2);
        f = log ? mg_log_softmax(g, f, 1) : mg_softmax(g, f, 1);
        return mgi_onnx_out(c, n, 0, mg_reshape(g, f, nd, xs));
    }
    return mgi_onnx_out(c, n, 0,
                        log ? mg_log_softmax(g, x, (int)axis)
                            : mg_softmax(g, x, (int)axis));
}

mg_status mgi_onnx_op_softmax(mgi_octx *c, const node_t *n) {
    return softmax_like(c, n, false);
}
mg_status mgi_onnx_op_log_softmax(mgi_octx *c, const node_t *n) {
    return softmax_like(c, n, true);
}

mg_status mgi_onnx_op_dropout(mgi_octx *c, const node_t *n) {
    mg_tensor x = mgi_onnx_float_in(c, n, 0);
    if (x == MG_NO_TENSOR) return mg_last_status();
    if (n->n_output > 1 && mgi_onnx_is_read(c, n->output[1]))
        return UNSUP("Dropout's mask output");
    double ratio = mgi_onnx_attr_f(c, n, "ratio", 0.5);
    if (mgi_onnx_in(c, n, 1)) {
        const mgi_oconst *r = mgi_onnx_slot_const(c, n, 1);
        if (!r || r->n != 1)
            return UNSUP("a ratio that is not a constant scalar");
        ratio = mgi_onnx_cval(r, 0);
    }
    if (!(ratio >= 0 && ratio < 1))
        return BAD_ATTR("ratio %g (at least 0, below 1)", ratio);
    if (!c->opts.training || ratio == 0.0) return mgi_onnx_out(c, n, 0, x);
    return mgi_onnx_out(c, n, 0, mg_dropout(c->g, x, ratio, c->next_seed++));
}

static mg_status reduce(mgi_octx *c, const node_t *n, bool mean) {
    mg_tensor x = mgi_onnx_float_in(c, n, 0);
    if (x == MG_NO_TENSOR) return mg_last_status();
    int64_t ax64[MG_MAX_DIMS];
    int na = mgi_onnx_attr_ints(c, n, "axes", ax64, MG_MAX_DIMS);
    if (na == -1 && ((!mean && c->opset >= 13) || c->opset >= 18))
        na = mgi_onnx_const_ints(c, n, 1, ax64, MG_MAX_DIMS);
    if (na == -2) return UNSUP("axes that are not a constant");
    bool keep = mgi_onnx_attr_flag(c, n, "keepdims", true);
    if (na <= 0 && mgi_onnx_attr_flag(c, n, "noop_with_empty_axes", false))
        return mgi_onnx_out(c, n, 0, x);
    int axes[MG_MAX_DIMS];
    for (int k = 0; k < na; k++)
        axes[k] = (int)(ax64[k] < -64 || ax64[k] > 64 ? 64 : ax64[k]);
    na = na < 0 ? 0 : na;
    return mgi_onnx_out(c, n, 0,
                        mean ? mg_mean(c->g, x, na, axes, keep)
                             : mg_sum(c->g, x, na, axes, keep));
}

mg_status mgi_onnx_op_reduce_mean(mgi_octx *c, const node_t *n) {
    return reduce(c, n, true);
}
mg_status mgi_onnx_op_reduce_sum(mgi_octx *c, const node_t *n) {
    return reduce(c, n, false);
}

/* The ONNX ops this file converts (onnx_ops.c looks them up). */
