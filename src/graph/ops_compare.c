/*
 * ops_compare.c - the ops that test and select, for PyTorch's ATen-level
 * capture (issue 45): the comparisons (eq, ne, lt, le, gt, ge) and logical
 * ops (logical_and, logical_or, logical_not), which return 1/0 in their
 * inputs' dtype and pass no gradient; where, an elementwise select whose
 * gradient is gy masked the same way; clamp and its gradient helper; and
 * the gradients of maximum and minimum (their forward kernels are plain
 * binary elementwise ops, ops_elementwise.c), composed of where and
 * comparisons.
 */
#include "graph.h"
#include "ops_internal.h"

#include <math.h>
#include <stdio.h>

/* ---- shape rules --------------------------------------------------------- */

/* Two tensors of one dtype, any of the four: memgrad converts nothing
 * implicitly, so f32 against i32 is the caller's cast to make. */
static mg_status same_dtype(const mg_tdesc *a, const char *a_what,
                            const mg_tdesc *b, const char *b_what, char *why,
                            size_t len) {
    if (a->dtype == b->dtype) return MG_OK;
    snprintf(why, len, "%s is %s but %s is %s; cast one of them first", a_what,
             mg_dtype_name(a->dtype), b_what, mg_dtype_name(b->dtype));
    return MG_ERR_DTYPE;
}

/* eq, ..., logical_or (a, b): a broadcast of a and b, in their dtype. */
mg_status mgi_compare_infer(const mg_tdesc *in, int n_in, const mg_attrs *a,
                            mg_tdesc *out, char *why, size_t len) {
    (void)n_in, (void)a;
    mg_status s = same_dtype(&in[0], "a", &in[1], "b", why, len);
    if (s != MG_OK) return s;
    return mgi_broadcast_shape(&in[0], "a", &in[1], "b", out, why, len);
}

/* logical_not (x): any dtype, x's shape. */
mg_status mgi_logical_not_infer(const mg_tdesc *in, int n_in, const mg_attrs *a,
                                mg_tdesc *out, char *why, size_t len) {
    (void)n_in, (void)a, (void)why, (void)len;
    *out = in[0];
    return MG_OK;
}

/* where (cond, a, b): cond of any dtype, a and b of one dtype; the three
 * shapes broadcast together. */
mg_status mgi_where_infer(const mg_tdesc *in, int n_in, const mg_attrs *a,
                          mg_tdesc *out, char *why, size_t len) {
    (void)n_in, (void)a;
    mg_status s = same_dtype(&in[1], "a", &in[2], "b", why, len);
    if (s != MG_OK) return s;
    mg_tdesc ab;
    s = mgi_broadcast_shape(&in[1], "a", &in[2], "b", &ab, why, len);
    if (s != MG_OK) return s;
    s = mgi_broadcast_shape(&ab, "a and b", &in[0], "cond", out, why, len);
    if (s == MG_OK) out->dtype = in[1].dtype;
    return s;
}

/* clamp_grad (gy, x): as relu_grad's; the bounds are attributes. */
mg_status mgi_clamp_grad_infer(const mg_tdesc *in, int n_in, const mg_attrs *a,
                               mg_tdesc *out, char *why, size_t len) {
    return mgi_pair_infer(in, n_in, a, out, why, len);
}

/* ---- builders ------------------------------------------------------------ */

static mg_tensor compare_build(mg_graph *g, mg_op op, mg_tensor a,
                               mg_tensor b) {
    const mg_tensor in[2] = {a, b};
    return mgi_graph_add_node(g, op, 2, in, NULL);
}

mg_tensor mg_eq(mg_graph *g, mg_tensor a, mg_tensor b) {
    return compare_build(g, MG_OP_EQ, a, b);
}
mg_tensor mg_ne(mg_graph *g, mg_tensor a, mg_tensor b) {
    return compare_build(g, MG_OP_NE, a, b);
}
mg_tensor mg_lt(mg_graph *g, mg_tensor a, mg_tensor b) {
    return compare_build(g, MG_OP_LT, a, b);
}
mg_tensor mg_le(mg_graph *g, mg_tensor a, mg_tensor b) {
    return compare_build(g, MG_OP_LE, a, b);
}
mg_tensor mg_gt(mg_graph *g, mg_tensor a, mg_tensor b) {
    return compare_build(g, MG_OP_GT, a, b);
}
mg_tensor mg_ge(mg_graph *g, mg_tensor a, mg_tensor b) {
    return compare_build(g, MG_OP_GE, a, b);
}
mg_tensor mg_logical_and(mg_graph *g, mg_tensor a, mg_tensor b) {
    return compare_build(g, MG_OP_LOGICAL_AND, a, b);
}
mg_tensor mg_logical_or(mg_graph *g, mg_tensor a, mg_tensor b) {
    return compare_build(g, MG_OP_LOGICAL_OR, a, b);
}
mg_tensor mg_logical_not(mg_graph *g, mg_tensor x) {
    return mgi_graph_add_node(g, MG_OP_LOGICAL_NOT, 1, &x, NULL);
}

mg_tensor mg_where(mg_graph *g, mg_tensor cond, mg_tensor a, mg_tensor b) {
    const mg_tensor in[3] = {cond, a, b};
    return mgi_graph_add_node(g, MG_OP_WHERE, 3, in, NULL);
}

mg_tensor mg_clamp(mg_graph *g, mg_tensor x, double lo, double hi) {
    /* A missing x keeps the earlier message (memgrad.h's conventions). */
    if (x != MG_NO_TENSOR && (isnan(lo) || isnan(hi))) {
        mg_set_error(MG_ERR_INVALID_ARG,
                     "clamp: bound %s is NaN (use -inf or inf for none)",
                     isnan(lo) ? "lo" : "hi");
        return MG_NO_TENSOR;
    }
    mg_attrs at = {0};
    at.lo = lo;
    at.hi = hi;
    return mgi_graph_add_node(g, MG_OP_CLAMP, 1, &x, &at);
}

/* ---- gradient rules ------------------------------------------------------ */

/* A scalar 0 of t's dtype, which broadcasts to any shape. */
static mg_tensor zero_like(mg_graph *g, mg_tensor t) {
    mg_dtype dt;
    if (mg_tensor_dtype(g, t, &dt) != MG_OK) return MG_NO_TENSOR;
    return mg_fill(g, dt, 0, NULL, 0.0);
}

/* cond takes no gradient (no_grad_inputs); a gets gy where cond holds and
 * b where it does not, each summed back to its own shape. Selecting gy or
 * an exact 0 keeps an inf or NaN of the branch not taken out of the
 * gradient, as the forward op keeps it out of y. */
mg_status mgi_where_grad(mg_graph *g, const mg_node *node, const mg_tensor *in,
                         mg_tensor y, mg_tensor gy, const bool *need,
                         mg_tensor *gin) {
    (void)node, (void)y;
    const mg_tdesc ad = *mgi_graph_desc(g, in[1]),
                   bd = *mgi_graph_desc(g, in[2]);
    mg_tensor zero = zero_like(g, gy);
    if (need[1]) gin[1] = mgi_sum_to(g, mg_where(g, in[0], gy, zero), &ad);
    if (need[2]) gin[2] = mgi_sum_to(g, mg_where(g, in[0], zero, gy), &bd);
    return mgi_grad_status(3, need, gin);
}

mg_status mgi_clamp_grad(mg_graph *g, const mg_node *node, const mg_tensor *in,
                         mg_tensor y, mg_tensor gy, const bool *need,
                         mg_tensor *gin) {
    (void)y;
    if (!need[0]) return MG_OK;
    mg_attrs at = {0};
    at.lo = node->attrs->lo;
    at.hi = node->attrs->hi;
    const mg_tensor args[2] = {gy, in[0]};
    gin[0] = mgi_graph_add_node(g, MG_OP_CLAMP_GRAD, 2, args, &at);
    return mgi_grad_status(1, need, gin);
}

/* PyTorch's rule for maximum (minimum swaps lt and gt): w = gy, halved
 * where a == b; a gets w except where a < b, b gets w except where a > b.
 * Where either is NaN no comparison holds, and both get gy, as in
 * PyTorch. */
mg_status mgi_minmax_grad(mg_graph *g, const mg_node *node, const mg_tensor *in,
                          mg_tensor y, mg_tensor gy, const bool *need,
                          mg_tensor *gin) {
    (void)y;
    const mg_tensor a = in[0], b = in[1];
    const mg_tdesc ad = *mgi_graph_desc(g, a), bd = *mgi_graph_desc(g, b);
    const bool max = node->op == MG_OP_MAXIMUM;
    mg_tensor zero = zero_like(g, gy);
    mg_tensor w = mg_where(g, mg_eq(g, a, b), mg_scale(g, gy, 0.5), gy);
    if (need[0]) {
        mg_tensor loses = max ? mg_lt(g, a, b) : mg_gt(g, a, b);
        gin[0] = mgi_sum_to(g, mg_where(g, loses, zero, w), &ad);
    }
    if (need[1]) {
        mg_tensor loses = max ? mg_gt(g, a, b) : mg_lt(g, a, b);
        gin[1] = mgi_sum_to(g, mg_where(g, loses, zero, w), &bd);
    }
    return mgi_grad_status(2, need, gin);
}
