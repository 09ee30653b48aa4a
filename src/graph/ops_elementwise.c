/*
 * ops_elementwise.c - binary ops with numpy broadcasting (maximum and
 * minimum among them; their gradients are in ops_compare.c, composed of
 * where and comparisons), unary float ops, the activation-gradient helper
 * ops, cast between dtypes, and sum_to, which undoes a broadcast on the
 * way back.
 */
#include "graph.h"
#include "ops_internal.h"

#include <math.h>
#include <stdio.h>

/* ---- shape rules --------------------------------------------------------- */

bool mgi_shape_broadcasts_to(const mg_tdesc *from, const mg_tdesc *to) {
    int lead = to->ndim - from->ndim;
    if (lead < 0) return false;
    for (int i = 0; i < from->ndim; i++)
        if (from->shape[i] != 1 && from->shape[i] != to->shape[lead + i])
            return false;
    return true;
}

mg_status mgi_broadcast_shape(const mg_tdesc *a, const char *a_what,
                              const mg_tdesc *b, const char *b_what,
                              mg_tdesc *out, char *why, size_t len) {
    int nd = a->ndim > b->ndim ? a->ndim : b->ndim;
    mg_tdesc r = {.dtype = a->dtype, .ndim = nd};
    for (int i = 0; i < nd; i++) {
        /* Aligned from the right; a missing leading dim counts as 1. */
        int ia = i - (nd - a->ndim), ib = i - (nd - b->ndim);
        int64_t da = ia >= 0 ? a->shape[ia] : 1;
        int64_t db = ib >= 0 ? b->shape[ib] : 1;
        if (da != db && da != 1 && db != 1) {
            snprintf(why, len,
                     "shapes do not broadcast: dim %d of the result would be "
                     "%lld from %s and %lld from %s",
                     i, (long long)da, a_what, (long long)db, b_what);
            return MG_ERR_SHAPE;
        }
        r.shape[i] = da == 1 ? db : da;
    }
    *out = r; /* out may be a or b */
    return MG_OK;
}

mg_status mgi_binary_infer(const mg_tdesc *in, int n_in, const mg_attrs *a,
                           mg_tdesc *out, char *why, size_t len) {
    (void)n_in, (void)a;
    mg_status s = mgi_float_pair_check(&in[0], "a", &in[1], "b", why, len);
    if (s != MG_OK) return s;
    return mgi_broadcast_shape(&in[0], "a", &in[1], "b", out, why, len);
}

mg_status mgi_unary_infer(const mg_tdesc *in, int n_in, const mg_attrs *a,
                          mg_tdesc *out, char *why, size_t len) {
    (void)n_in, (void)a;
    *out = in[0];
    return mgi_float_check(&in[0], "x", why, len);
}

/* cast: any dtype to a->dtype, same shape */
mg_status mgi_cast_infer(const mg_tdesc *in, int n_in, const mg_attrs *a,
                         mg_tdesc *out, char *why, size_t len) {
    (void)n_in, (void)why, (void)len;
    *out = in[0];
    out->dtype = a->dtype;
    return MG_OK;
}

/* relu_grad(gy, x) and its kin: two float tensors of one shape. */
mg_status mgi_pair_infer(const mg_tdesc *in, int n_in, const mg_attrs *a,
                         mg_tdesc *out, char *why, size_t len) {
    (void)n_in, (void)a;
    mg_status s = mgi_float_pair_check(&in[0], "gy", &in[1], "x", why, len);
    if (s != MG_OK) return s;
    if (!mgi_tdesc_same_shape(&in[0], &in[1])) {
        snprintf(why, len, "gy and x must have the same shape");
        return MG_ERR_SHAPE;
    }
    *out = in[0];
    return MG_OK;
}

/* ---- builders ------------------------------------------------------------ */

static mg_tensor binary_build(mg_graph *g, mg_op op, mg_tensor a, mg_tensor b) {
    const mg_tensor in[2] = {a, b};
    return mgi_graph_add_node(g, op, 2, in, NULL);
}

static mg_tensor unary_build(mg_graph *g, mg_op op, mg_tensor x, double alpha) {
    mg_attrs at = {0};
    at.alpha = alpha;
    return mgi_graph_add_node(g, op, 1, &x, &at);
}

mg_tensor mg_add(mg_graph *g, mg_tensor a, mg_tensor b) {
    return binary_build(g, MG_OP_ADD, a, b);
}
mg_tensor mg_sub(mg_graph *g, mg_tensor a, mg_tensor b) {
    return binary_build(g, MG_OP_SUB, a, b);
}
mg_tensor mg_mul(mg_graph *g, mg_tensor a, mg_tensor b) {
    return binary_build(g, MG_OP_MUL, a, b);
}
mg_tensor mg_div(mg_graph *g, mg_tensor a, mg_tensor b) {
    return binary_build(g, MG_OP_DIV, a, b);
}

mg_tensor mg_neg(mg_graph *g, mg_tensor x) {
    return unary_build(g, MG_OP_NEG, x, 0);
}
mg_tensor mg_relu(mg_graph *g, mg_tensor x) {
    return unary_build(g, MG_OP_RELU, x, 0);
}
mg_tensor mg_gelu(mg_graph *g, mg_tensor x) {
    return unary_build(g, MG_OP_GELU, x, 0);
}
mg_tensor mg_silu(mg_graph *g, mg_tensor x) {
    return unary_build(g, MG_OP_SILU, x, 0);
}
mg_tensor mg_tanh(mg_graph *g, mg_tensor x) {
    return unary_build(g, MG_OP_TANH, x, 0);
}
mg_tensor mg_sigmoid(mg_graph *g, mg_tensor x) {
    return unary_build(g, MG_OP_SIGMOID, x, 0);
}
mg_tensor mg_exp(mg_graph *g, mg_tensor x) {
    return unary_build(g, MG_OP_EXP, x, 0);
}
mg_tensor mg_log(mg_graph *g, mg_tensor x) {
    return unary_build(g, MG_OP_LOG, x, 0);
}
mg_tensor mg_sqrt(mg_graph *g, mg_tensor x) {
    return unary_build(g, MG_OP_SQRT, x, 0);
}
mg_tensor mg_erf(mg_graph *g, mg_tensor x) {
    return unary_build(g, MG_OP_ERF, x, 0);
}
mg_tensor mg_pow(mg_graph *g, mg_tensor x, double p) {
    if (!isfinite(p)) {
        mg_set_error(MG_ERR_INVALID_ARG, "pow: exponent %g is not finite", p);
        return MG_NO_TENSOR;
    }
    return unary_build(g, MG_OP_POW, x, p);
}
mg_tensor mg_reciprocal(mg_graph *g, mg_tensor x) {
    return unary_build(g, MG_OP_RECIPROCAL, x, 0);
}
mg_tensor mg_rsqrt(mg_graph *g, mg_tensor x) {
    return unary_build(g, MG_OP_RSQRT, x, 0);
}
mg_tensor mg_sin(mg_graph *g, mg_tensor x) {
    return unary_build(g, MG_OP_SIN, x, 0);
}
mg_tensor mg_cos(mg_graph *g, mg_tensor x) {
    return unary_build(g, MG_OP_COS, x, 0);
}
mg_tensor mg_abs(mg_graph *g, mg_tensor x) {
    return unary_build(g, MG_OP_ABS, x, 0);
}
mg_tensor mg_maximum(mg_graph *g, mg_tensor a, mg_tensor b) {
    return binary_build(g, MG_OP_MAXIMUM, a, b);
}
mg_tensor mg_minimum(mg_graph *g, mg_tensor a, mg_tensor b) {
    return binary_build(g, MG_OP_MINIMUM, a, b);
}
mg_tensor mg_leaky_relu(mg_graph *g, mg_tensor x, double alpha) {
    if (!isfinite(alpha)) {
        mg_set_error(MG_ERR_INVALID_ARG, "leaky_relu: alpha %g is not finite",
                     alpha);
        return MG_NO_TENSOR;
    }
    return unary_build(g, MG_OP_LEAKY_RELU, x, alpha);
}
mg_tensor mg_cast(mg_graph *g, mg_tensor x, mg_dtype dtype) {
    if (mg_dtype_size(dtype) == 0) {
        mg_set_error(MG_ERR_DTYPE, "cast: unknown target dtype %d", (int)dtype);
        return MG_NO_TENSOR;
    }
    mg_attrs at = {0};
    at.dtype = dtype;
    return mgi_graph_add_node(g, MG_OP_CAST, 1, &x, &at);
}

/* Between float dtypes the gradient is gy cast back; autodiff asks for none
 * when x is an integer tensor, and a cast to an integer dtype has no
 * gradient to pass on. */
mg_status mgi_cast_grad(mg_graph *g, const mg_node *node, const mg_tensor *in,
                        mg_tensor y, mg_tensor gy, const bool *need,
                        mg_tensor *gin) {
    (void)node, (void)y;
    if (!need[0]) return MG_OK;
    mg_dtype from;
    mg_status s = mg_tensor_dtype(g, in[0], &from);
    if (s != MG_OK) return s;
    gin[0] = mg_cast(g, gy, from);
    return mgi_grad_status(1, need, gin);
}

mg_tensor mg_is_nonzero(mg_graph *g, mg_tensor x) {
    return unary_build(g, MG_OP_IS_NONZERO, x, 0);
}
mg_tensor mg_scale(mg_graph *g, mg_tensor x, double alpha) {
    return unary_build(g, MG_OP_SCALE, x, alpha);
}

mg_tensor mgi_sum_to(mg_graph *g, mg_tensor t, const mg_tdesc *shape) {
    const mg_tdesc *td = mgi_arg_desc(g, t, "sum_to");
    if (!td) return MG_NO_TENSOR;
    if (!shape) {
        mg_set_error(MG_ERR_INVALID_ARG, "sum_to: shape is NULL");
        return MG_NO_TENSOR;
    }
    /* Copies: shape may point into g->nodes, which building moves. */
    const mg_tdesc from = *td, want = *shape;
    if (mgi_tdesc_same_shape(&from, &want)) return t;
    if (!mgi_shape_broadcasts_to(&want, &from)) {
        char a[128], b[128];
        mg_set_error(MG_ERR_SHAPE, "sum_to: %s does not broadcast to %s",
                     mgi_shape_str(&want, a, sizeof a),
                     mgi_shape_str(&from, b, sizeof b));
        return MG_NO_TENSOR;
    }
    /* Summing a size-1 dim changes nothing, so those are left to the
     * reshape at the end. */
    int axes[MG_MAX_DIMS], n = 0, lead = from.ndim - want.ndim;
    for (int i = 0; i < from.ndim; i++)
        if (from.shape[i] != 1 && (i < lead || want.shape[i - lead] == 1))
            axes[n++] = i;
    return mgi_reshape_as(g, n ? mg_sum(g, t, n, axes, 0) : t, &want);
}

/* ---- gradient rules ------------------------------------------------------ */

mg_status mgi_binary_grad(mg_graph *g, const mg_node *node, const mg_tensor *in,
                          mg_tensor y, mg_tensor gy, const bool *need,
                          mg_tensor *gin) {
    const mg_tensor a = in[0], b = in[1];
    const mg_tdesc ad = *mgi_graph_desc(g, a), bd = *mgi_graph_desc(g, b);
    /* Gradients at the broadcast shape; sub and div negate b's after the
     * sum, where it has fewer elements. */
    mg_tensor ga = gy, gb = gy;
    bool neg_b = node->op == MG_OP_SUB || node->op == MG_OP_DIV;
    switch (node->op) {
    case MG_OP_MUL:
        if (need[0]) ga = mg_mul(g, gy, b);
        if (need[1]) gb = mg_mul(g, gy, a);
        break;
    case MG_OP_DIV: /* d(a/b)/db = -y/b */
        if (need[0]) ga = mg_div(g, gy, b);
        if (need[1]) gb = mg_div(g, mg_mul(g, gy, y), b);
        break;
    default: break;
    }
    if (need[0]) gin[0] = mgi_sum_to(g, ga, &ad);
    if (need[1]) {
        gin[1] = mgi_sum_to(g, gb, &bd);
        if (neg_b) gin[1] = mg_neg(g, gin[1]);
    }
    return mgi_grad_status(2, need, gin);
}

static mg_tensor helper_build(mg_graph *g, mg_op op, mg_tensor gy,
                              mg_tensor x) {
    const mg_tensor in[2] = {gy, x};
    return mgi_graph_add_node(g, op, 2, in, NULL);
}

mg_status mgi_unary_grad(mg_graph *g, const mg_node *node, const mg_tensor *in,
                         mg_tensor y, mg_tensor gy, const bool *need,
                         mg_tensor *gin) {
    const mg_tensor x = in[0];
    if (!need[0]) return MG_OK;
    switch (node->op) {
    case MG_OP_NEG: gin[0] = mg_neg(g, gy); break;
    /* relu reads its output (y > 0 iff x > 0), as PyTorch does: a
     * recomputed segment then keeps one tensor per layer, not two. */
    case MG_OP_RELU: gin[0] = helper_build(g, MG_OP_RELU_GRAD, gy, y); break;
    case MG_OP_GELU: gin[0] = helper_build(g, MG_OP_GELU_GRAD, gy, x); break;
    /* from x alone, so that only x is kept (x * sigmoid(x) composed keeps
     * sigmoid(x) as well) */
    case MG_OP_SILU: gin[0] = helper_build(g, MG_OP_SILU_GRAD, gy, x); break;
    case MG_OP_TANH: gin[0] = helper_build(g, MG_OP_TANH_GRAD, gy, y); break;
    case MG_OP_SIGMOID:
        gin[0] = helper_build(g, MG_OP_SIGMOID_GRAD, gy, y);
        break;
    case MG_OP_EXP: gin[0] = mg_mul(g, gy, y); break;
    case MG_OP_LOG: gin[0] = mg_div(g, gy, x); break;
    case MG_OP_SQRT: gin[0] = mg_div(g, mg_scale(g, gy, 0.5), y); break;
    case MG_OP_SCALE: gin[0] = mg_scale(g, gy, node->attrs->alpha); break;
    /* erf'(x) = 2/sqrt(pi) exp(-x^2) */
    case MG_OP_ERF:
        gin[0] = mg_mul(g, gy,
                        mg_scale(g, mg_exp(g, mg_neg(g, mg_mul(g, x, x))),
                                 1.12837916709551257390));
        break;
    /* p x^(p-1) */
    case MG_OP_POW:
        gin[0] = mg_mul(g, gy,
                        mg_scale(g, mg_pow(g, x, node->attrs->alpha - 1.0),
                                 node->attrs->alpha));
        break;
    /* gy where x > 0, alpha gy elsewhere; relu_grad tests its second
     * argument, here x. Both terms are exact: one of them is 0. */
    case MG_OP_LEAKY_RELU: {
        mg_tensor pos = helper_build(g, MG_OP_RELU_GRAD, gy, x);
        gin[0] =
            mg_add(g, pos, mg_scale(g, mg_sub(g, gy, pos), node->attrs->alpha));
        break;
    }
    /* -1/x^2 = -y^2, from y alone */
    case MG_OP_RECIPROCAL:
        gin[0] = mg_neg(g, mg_mul(g, gy, mg_mul(g, y, y)));
        break;
    /* -x^(-3/2) / 2 = -y^3 / 2 */
    case MG_OP_RSQRT:
        gin[0] =
            mg_mul(g, gy, mg_scale(g, mg_mul(g, y, mg_mul(g, y, y)), -0.5));
        break;
    case MG_OP_SIN: gin[0] = mg_mul(g, gy, mg_cos(g, x)); break;
    case MG_OP_COS: gin[0] = mg_neg(g, mg_mul(g, gy, mg_sin(g, x))); break;
    /* gy sign(x), 0 at x = 0 as PyTorch's: abs_grad reads x, not y, which
     * has lost the sign */
    case MG_OP_ABS: gin[0] = helper_build(g, MG_OP_ABS_GRAD, gy, x); break;
    /* a step function: its derivative is 0 wherever it has one */
    case MG_OP_IS_NONZERO:
        gin[0] = mg_fill(g, mgi_node_desc(g, node)->dtype,
                         mgi_node_desc(g, node)->ndim,
                         mgi_node_desc(g, node)->shape, 0.0);
        break;
    default:
        return mg_set_error(MG_ERR_INTERNAL, "%s: not a unary op",
                            mgi_op_str(node->op));
    }
    return mgi_grad_status(1, need, gin);
}
