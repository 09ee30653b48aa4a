/*
 * ops_attention.c - scaled dot-product attention as one fused op (and its
 * backward op), the causal mask op, and two small composite builders
 * (global average pooling, flatten).
 *
 * The attention op keeps what FlashAttention keeps: its output y is
 * [..., Lq, dv + 1], the attention result o in columns [0, dv) and each
 * row's log-sum-exp of the scores in column dv, so the planner sees O(T)
 * bytes where the composed attention keeps T x T scores and weights.
 * mg_attention returns the o part (a slice). attention_grad recomputes the
 * scores tile by tile from q, k, lse and writes dq, dk and dv packed into
 * one tensor, which the gradient rule slices apart.
 */
#include "graph.h"
#include "ops_internal.h"

#include "../common/attn_tiles.h"

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

/* q [..., Lq, d], k [..., Lk, d], v [..., Lk, dv] with equal leading dims
 * and one float dtype; an additive mask (in[3]) of that dtype broadcasts to
 * [..., Lq, Lk]. */
static mg_status attention_check(const mg_tdesc *in, int n_in,
                                 const mg_attrs *a, char *why, size_t len) {
    const mg_tdesc *q = &in[0], *k = &in[1], *v = &in[2];
    static const char *const names[4] = {"q", "k", "v", "mask"};
    for (int i = 0; i < n_in && i < 4; i++) {
        mg_status s = mgi_float_check(&in[i], names[i], why, len);
        if (s != MG_OK) return s;
        if (in[i].dtype != q->dtype) {
            snprintf(why, len, "%s is %s but q is %s", names[i],
                     mg_dtype_name(in[i].dtype), mg_dtype_name(q->dtype));
            return MG_ERR_DTYPE;
        }
    }
    bool ok = q->ndim >= 2 && q->ndim == k->ndim && q->ndim == v->ndim;
    const int nd = q->ndim;
    for (int i = 0; ok && i < nd - 2; i++)
        ok = q->shape[i] == k->shape[i] && q->shape[i] == v->shape[i];
    ok = ok && q->shape[nd - 1] == k->shape[nd - 1] &&
         k->shape[nd - 2] == v->shape[nd - 2];
    if (!ok) {
        char b1[128], b2[128], b3[128];
        snprintf(why, len,
                 "q %s, k %s and v %s do not fit [..., Lq, d], [..., Lk, d] "
                 "and [..., Lk, dv]",
                 mgi_shape_str(q, b1, sizeof b1),
                 mgi_shape_str(k, b2, sizeof b2),
                 mgi_shape_str(v, b3, sizeof b3));
        return MG_ERR_SHAPE;
    }
    if (n_in > 3) {
        mg_tdesc sc = *q;
        sc.shape[nd - 1] = k->shape[nd - 2];
        if (!mgi_shape_broadcasts_to(&in[3], &sc)) {
            char b1[128], b2[128];
            snprintf(why, len, "mask %s does not broadcast to the scores %s",
                     mgi_shape_str(&in[3], b1, sizeof b1),
                     mgi_shape_str(&sc, b2, sizeof b2));
            return MG_ERR_SHAPE;
        }
    }
    if (!isfinite(a->alpha) || a->alpha == 0) {
        snprintf(why, len, "scale %g is not finite and non-zero", a->alpha);
        return MG_ERR_INVALID_ARG;
    }
    if (!(a->p >= 0.0 && a->p < 1.0)) { /* NaN fails too */
        snprintf(why, len, "dropout p = %g is not in [0, 1)", a->p);
        return MG_ERR_INVALID_ARG;
    }
    return MG_OK;
}

mg_status mgi_attention_infer(const mg_tdesc *in, int n_in, const mg_attrs *a,
                              mg_tdesc *out, char *why, size_t len) {
    mg_status s = attention_check(in, n_in, a, why, len);
    if (s != MG_OK) return s;
    const int nd = in[0].ndim;
    *out = in[0];
    out->shape[nd - 1] = in[2].shape[nd - 1] + 1;
    return MG_OK;
}

/* attention_grad reads (q, k, v, y, gy[, mask]) and writes [..., Lq * d +
 * Lk * d + Lk * dv]: dq, dk and dv of each batch entry one after another. */
mg_status mgi_attention_grad_infer(const mg_tdesc *in, int n_in,
                                   const mg_attrs *a, mg_tdesc *out, char *why,
                                   size_t len) {
    mg_tdesc fin[4] = {in[0], in[1], in[2]}, y;
    if (n_in > 5) fin[3] = in[5];
    mg_status s = mgi_attention_infer(fin, n_in > 5 ? 4 : 3, a, &y, why, len);
    if (s != MG_OK) return s;
    for (int i = 3; i < 5; i++)
        if (!mgi_tdesc_same_shape(&in[i], &y) || in[i].dtype != y.dtype) {
            char b1[128], b2[128];
            snprintf(why, len, "%s %s %s is not the forward output %s %s",
                     i == 3 ? "y" : "gy", mgi_shape_str(&in[i], b1, sizeof b1),
                     mg_dtype_name(in[i].dtype),
                     mgi_shape_str(&y, b2, sizeof b2), mg_dtype_name(y.dtype));
            return MG_ERR_SHAPE;
        }
    const int nd = in[0].ndim;
    const int64_t lq = in[0].shape[nd - 2], lk = in[1].shape[nd - 2],
                  d = in[0].shape[nd - 1], dv = in[2].shape[nd - 1];
    *out = in[0];
    out->ndim = nd - 1;
    /* each term is an element count of q, k or v, which fit int64_t */
    out->shape[nd - 2] = lq * d + lk * d + lk * dv;
    return MG_OK;
}

/* attention_grad_mask reads what attention_grad reads, the mask included,
 * and writes the scores' gradient [..., Lq, Lk], which the gradient rule
 * sums down to the mask's shape. */
mg_status mgi_attention_grad_mask_infer(const mg_tdesc *in, int n_in,
                                        const mg_attrs *a, mg_tdesc *out,
                                        char *why, size_t len) {
    mg_tdesc packed;
    mg_status s = mgi_attention_grad_infer(in, n_in, a, &packed, why, len);
    if (s != MG_OK) return s;
    const int nd = in[0].ndim;
    *out = in[0];
    out->shape[nd - 1] = in[1].shape[nd - 2];
    return MG_OK;
}

/* Multiply-adds of the score and output products (the causal mask's
 * skipped tiles are not subtracted), plus the exponentials. */
static double attention_pairs(const mg_tdesc *q, const mg_tdesc *k) {
    const int nd = q->ndim;
    double pairs = (double)q->shape[nd - 2] * (double)k->shape[nd - 2];
    for (int i = 0; i < nd - 2; i++) pairs *= (double)q->shape[i];
    return pairs;
}

double mgi_attention_flops(const mg_tdesc *in, int n_in, const mg_attrs *a,
                           const mg_tdesc *out) {
    (void)n_in, (void)a, (void)out;
    const int nd = in[0].ndim;
    const double d = (double)in[0].shape[nd - 1],
                 dv = (double)in[2].shape[nd - 1];
    return attention_pairs(&in[0], &in[1]) * (2 * (d + dv) + 6);
}

/* scores, dp, then the dv, dq and dk products: five against the forward's
 * two */
double mgi_attention_grad_flops(const mg_tdesc *in, int n_in, const mg_attrs *a,
                                const mg_tdesc *out) {
    (void)n_in, (void)a, (void)out;
    const int nd = in[0].ndim;
    const double d = (double)in[0].shape[nd - 1],
                 dv = (double)in[2].shape[nd - 1];
    return attention_pairs(&in[0], &in[1]) * (2 * (3 * d + 2 * dv) + 10);
}

/* batch entries (the product of the leading dims) and Lq of q */
static int64_t attention_batch(const mg_tdesc *q) {
    int64_t b = 1;
    for (int i = 0; i < q->ndim - 2; i++) b *= q->shape[i];
    return b;
}

/* the scores and dp products */
double mgi_attention_grad_mask_flops(const mg_tdesc *in, int n_in,
                                     const mg_attrs *a, const mg_tdesc *out) {
    (void)n_in, (void)a, (void)out;
    const int nd = in[0].ndim;
    const double d = (double)in[0].shape[nd - 1],
                 dv = (double)in[2].shape[nd - 1];
    return attention_pairs(&in[0], &in[1]) * (2 * (d + dv) + 10);
}

size_t mgi_attention_workspace(const mg_tdesc *in, int n_in, const mg_attrs *a,
                               const mg_tdesc *out) {
    (void)n_in, (void)a, (void)out;
    const int nd = in[0].ndim;
    return mg_attn_workspace(attention_batch(&in[0]), in[0].shape[nd - 2],
                             in[1].shape[nd - 2], 0,
                             mg_dtype_size(in[0].dtype));
}

size_t mgi_attention_grad_workspace(const mg_tdesc *in, int n_in,
                                    const mg_attrs *a, const mg_tdesc *out) {
    (void)n_in, (void)a, (void)out;
    const int nd = in[0].ndim;
    return mg_attn_workspace(attention_batch(&in[0]), in[0].shape[nd - 2],
                             in[1].shape[nd - 2], 1,
                             mg_dtype_size(in[0].dtype));
}

/* The packed output of the attention op, and the o part of it. */
static mg_tensor attention_build(mg_graph *g, mg_tensor q, mg_tensor k,
                                 mg_tensor v, mg_tensor mask,
                                 const mg_attention_opts *o) {
    const mg_tdesc *qd = mgi_arg_desc(g, q, "attention (q)");
    if (!qd) return MG_NO_TENSOR;
    if (qd->ndim < 1) {
        mg_set_error(MG_ERR_SHAPE,
                     "attention: q is a scalar, not [..., Lq, d]");
        return MG_NO_TENSOR;
    }
    const int64_t dim = qd->shape[qd->ndim - 1];
    mg_attrs at = {0};
    at.alpha = o->scale == 0 ? 1.0 / sqrt((double)dim) : o->scale;
    at.causal = o->causal != 0;
    at.p = o->dropout_p;
    at.seed = o->seed;
    at.offset = g ? g->rng_offset : 0;
    const mg_tensor in[4] = {q, k, v, mask};
    mg_tensor y = mgi_graph_add_node(g, MG_OP_ATTENTION,
                                     mask == MG_NO_TENSOR ? 3 : 4, in, &at);
    if (y == MG_NO_TENSOR) return y;
    const mg_tdesc yd = *mgi_graph_desc(g, y);
    const int nd = yd.ndim;
    if (at.p > 0) {
        /* the weights' counters [offset, offset + batch * Lq * Lk) */
        uint64_t n = (uint64_t)mgi_graph_desc(g, k)->shape[nd - 2];
        for (int i = 0; i < nd - 1; i++) n *= (uint64_t)yd.shape[i];
        g->rng_offset += n;
    }
    return mg_slice(g, y, nd - 1, 0, yd.shape[nd - 1] - 1);
}

mg_tensor mg_attention_ex(mg_graph *g, mg_tensor q, mg_tensor k, mg_tensor v,
                          mg_tensor mask, const mg_attention_opts *opts) {
    static const mg_attention_opts none = {0};
    return attention_build(g, q, k, v, mask, opts ? opts : &none);
}

mg_tensor mg_attention(mg_graph *g, mg_tensor q, mg_tensor k, mg_tensor v,
                       int causal, double scale) {
    const mg_attention_opts o = {.causal = causal, .scale = scale};
    return attention_build(g, q, k, v, MG_NO_TENSOR, &o);
}

/* One attention_grad op writes dq, dk and dv packed; each input's gradient
 * is its part, sliced out and reshaped. The mask's (asked for only when
 * something it depends on is differentiated) is the scores' gradient,
 * Lq x Lk per batch entry, from attention_grad_mask. */
mg_status mgi_attention_grad(mg_graph *g, const mg_node *node,
                             const mg_tensor *in, mg_tensor y, mg_tensor gy,
                             const bool *need, mg_tensor *gin) {
    const mg_attrs at = *node->attrs;
    const int n_in = node->n_in;
    mg_tensor gi[6] = {in[0], in[1], in[2], y, gy};
    if (n_in > 3) gi[5] = in[3];
    const mg_tdesc qd = *mgi_graph_desc(g, in[0]),
                   kd = *mgi_graph_desc(g, in[1]),
                   vd = *mgi_graph_desc(g, in[2]);
    mg_tensor pk = need[0] || need[1] || need[2]
                       ? mgi_graph_add_node(g, MG_OP_ATTENTION_GRAD,
                                            n_in > 3 ? 6 : 5, gi, &at)
                       : MG_NO_TENSOR;
    const int nd = qd.ndim;
    const int64_t part[3] = {mgi_tdesc_numel(&qd), mgi_tdesc_numel(&kd),
                             mgi_tdesc_numel(&vd)};
    const mg_tdesc *shape[3] = {&qd, &kd, &vd};
    const int64_t batch = attention_batch(&qd);
    int64_t start = 0;
    for (int i = 0; i < 3; i++) {
        const int64_t n = part[i] / batch;
        if (need[i])
            gin[i] =
                mgi_reshape_as(g, mg_slice(g, pk, nd - 2, start, n), shape[i]);
        start += n;
    }
    if (n_in > 3 && need[3]) {
        /* the scores' gradient [..., Lq, Lk], summed over what the mask
         * broadcasts */
        const mg_tdesc md = *mgi_graph_desc(g, in[3]);
        gin[3] = mgi_sum_to(
            g, mgi_graph_add_node(g, MG_OP_ATTENTION_GRAD_MASK, 6, gi, &at),
            &md);
    }
    return mgi_grad_status(n_in, need, gin);
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
