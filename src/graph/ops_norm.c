/*
 * ops_norm.c - batch normalisation (training mode: statistics of the batch
 * over every axis but 1) and layer normalisation (over the last axes), each
 * with a learnt scale gamma and shift beta, and their backward helper ops.
 *
 * The two share everything but the grouping: batchnorm normalises each
 * channel over [N, spatial] and scales per channel; layernorm normalises
 * each row over the trailing axes and scales per trailing element. Variance
 * is biased (divided by the count), as PyTorch uses for normalising.
 */
#include "../common/group_reduce.h"
#include "graph.h"
#include "ops_internal.h"

#include <math.h>
#include <stdio.h>

/* The shape gamma and beta must have: [C] for batchnorm, x's last
 * n_norm_axes dims for layernorm. */
static mg_status param_desc(const mg_tdesc *x, const mg_attrs *a, bool layer,
                            mg_tdesc *p, char *why, size_t len) {
    mg_status s = mgi_float_check(x, "x", why, len);
    if (s != MG_OK) return s;
    if (!(a->eps >= 0) || isinf(a->eps)) {
        snprintf(why, len, "eps = %g must be finite and >= 0", a->eps);
        return MG_ERR_INVALID_ARG;
    }
    const int n = layer ? a->n_norm_axes : 1;
    if (layer ? (n < 1 || n > x->ndim) : x->ndim < 2) {
        char buf[128];
        if (layer)
            snprintf(why, len, "n_norm_axes = %d is not in 1..%d", n, x->ndim);
        else
            snprintf(why, len,
                     "x must have at least 2 dims [N, C, ...], not %s",
                     mgi_shape_str(x, buf, sizeof buf));
        return layer ? MG_ERR_INVALID_ARG : MG_ERR_SHAPE;
    }
    p->dtype = x->dtype;
    p->ndim = n;
    for (int i = 0; i < n; i++)
        p->shape[i] = x->shape[layer ? x->ndim - n + i : 1];
    return MG_OK;
}

/* x followed by n_params tensors of the parameter shape. */
static mg_status norm_check(const mg_tdesc *in, int n_params, const mg_attrs *a,
                            bool layer, mg_tdesc *p, char *why, size_t len) {
    static const char *names[2] = {"gamma", "beta"};
    mg_status s = param_desc(&in[0], a, layer, p, why, len);
    for (int i = 0; s == MG_OK && i < n_params; i++) {
        s = mgi_float_pair_check(&in[0], "x", &in[1 + i], names[i], why, len);
        if (s == MG_OK && !mgi_tdesc_same_shape(&in[1 + i], p)) {
            char want[128], got[128];
            snprintf(why, len, "%s must be %s for this x, not %s", names[i],
                     mgi_shape_str(p, want, sizeof want),
                     mgi_shape_str(&in[1 + i], got, sizeof got));
            s = MG_ERR_SHAPE;
        }
    }
    return s;
}

/* forward (x, gamma, beta) -> x's shape; grad_input (gy, x, gamma) -> x's
 * shape; grad_gamma (gy, x) -> gamma's shape. */
enum norm_role { NORM_FORWARD, NORM_GRAD_INPUT, NORM_GRAD_GAMMA };

static mg_status norm_infer(const mg_tdesc *in, const mg_attrs *a, bool layer,
                            enum norm_role role, mg_tdesc *out, char *why,
                            size_t len) {
    mg_tdesc p;
    if (role == NORM_FORWARD) {
        mg_status s = norm_check(in, 2, a, layer, &p, why, len);
        if (s == MG_OK) *out = in[0];
        return s;
    }
    mg_status s =
        norm_check(in + 1, role == NORM_GRAD_INPUT, a, layer, &p, why, len);
    if (s == MG_OK) s = mgi_grad_shape_check(&in[0], &in[1], why, len);
    if (s == MG_OK) *out = role == NORM_GRAD_INPUT ? in[1] : p;
    return s;
}

#define NORM_INFER_DEF(name, layer, role)                                      \
    mg_status mgi_##name##_infer(const mg_tdesc *in, int n_in,                 \
                                 const mg_attrs *a, mg_tdesc *out, char *why,  \
                                 size_t len) {                                 \
        (void)n_in;                                                            \
        return norm_infer(in, a, layer, role, out, why, len);                  \
    }
NORM_INFER_DEF(batchnorm, false, NORM_FORWARD)
NORM_INFER_DEF(layernorm, true, NORM_FORWARD)
NORM_INFER_DEF(batchnorm_grad_input, false, NORM_GRAD_INPUT)
NORM_INFER_DEF(layernorm_grad_input, true, NORM_GRAD_INPUT)
NORM_INFER_DEF(batchnorm_grad_gamma, false, NORM_GRAD_GAMMA)
NORM_INFER_DEF(layernorm_grad_gamma, true, NORM_GRAD_GAMMA)
#undef NORM_INFER_DEF

/* Two passes for the statistics and one to write, a few flops each, per
 * element of x (or of gy, its size, for the gradient ops). */
double mgi_norm_flops(const mg_tdesc *in, int n_in, const mg_attrs *a,
                      const mg_tdesc *out) {
    (void)n_in, (void)a, (void)out;
    return 8.0 * (double)mgi_tdesc_numel(&in[0]);
}

/* layernorm_grad_gamma (gy, x) -> dgamma: the mean and rstd of every row
 * of x, which the CUDA kernel computes once and reads for every column of
 * dgamma, and the column sums of its chunks of rows (group_reduce.h; the
 * CPU needs none). dgamma has the normalised shape, so there are
 * numel(x) / numel(dgamma) rows. */
size_t mgi_layernorm_grad_gamma_workspace(const mg_tdesc *in, int n_in,
                                          const mg_attrs *a,
                                          const mg_tdesc *out) {
    (void)n_in, (void)a;
    const int64_t inner = mgi_tdesc_numel(out);
    if (inner <= 0) return 0;
    return mg_layernorm_gamma_workspace(mgi_tdesc_numel(&in[1]) / inner, inner,
                                        mg_dtype_size(out->dtype));
}

/* batchnorm and its gradients: a few channels of many elements are split
 * over several GPU blocks, whose partial sums the CUDA kernels keep here
 * (group_reduce.h; the CPU needs none). */
size_t mgi_batchnorm_workspace(const mg_tdesc *in, int n_in, const mg_attrs *a,
                               const mg_tdesc *out) {
    (void)n_in, (void)a, (void)out;
    return mg_batchnorm_workspace(&in[0], 2);
}
size_t mgi_batchnorm_grad_input_workspace(const mg_tdesc *in, int n_in,
                                          const mg_attrs *a,
                                          const mg_tdesc *out) {
    (void)n_in, (void)a, (void)out;
    return mg_batchnorm_workspace(&in[1], 4);
}
size_t mgi_batchnorm_grad_gamma_workspace(const mg_tdesc *in, int n_in,
                                          const mg_attrs *a,
                                          const mg_tdesc *out) {
    (void)n_in, (void)a, (void)out;
    return mg_batchnorm_workspace(&in[1], 4);
}

mg_tensor mg_batchnorm(mg_graph *g, mg_tensor x, mg_tensor gamma,
                       mg_tensor beta, double eps) {
    mg_attrs at = {0};
    at.eps = eps;
    const mg_tensor in[3] = {x, gamma, beta};
    return mgi_graph_add_node(g, MG_OP_BATCHNORM, 3, in, &at);
}

mg_tensor mg_layernorm(mg_graph *g, mg_tensor x, mg_tensor gamma,
                       mg_tensor beta, int n_norm_axes, double eps) {
    mg_attrs at = {0};
    at.eps = eps;
    at.n_norm_axes = n_norm_axes;
    const mg_tensor in[3] = {x, gamma, beta};
    return mgi_graph_add_node(g, MG_OP_LAYERNORM, 3, in, &at);
}

/* dx and dgamma need the statistics again, so they are helper ops that
 * recompute them from x rather than graph ops that would keep mean and
 * variance tensors alive; dbeta is a plain sum of gy over the axes the
 * parameters are broadcast along. */
mg_status mgi_norm_grad(mg_graph *g, const mg_node *node, const mg_tensor *in,
                        mg_tensor y, mg_tensor gy, const bool *need,
                        mg_tensor *gin) {
    (void)y;
    const bool layer = node->op == MG_OP_LAYERNORM;
    const int nd = mgi_graph_desc(g, in[0])->ndim;
    if (need[0]) {
        const mg_tensor args[3] = {gy, in[0], in[1]};
        gin[0] = mgi_graph_add_node(
            g, layer ? MG_OP_LAYERNORM_GRAD_INPUT : MG_OP_BATCHNORM_GRAD_INPUT,
            3, args, node->attrs);
    }
    if (need[1]) {
        const mg_tensor args[2] = {gy, in[0]};
        gin[1] = mgi_graph_add_node(
            g, layer ? MG_OP_LAYERNORM_GRAD_GAMMA : MG_OP_BATCHNORM_GRAD_GAMMA,
            2, args, node->attrs);
    }
    if (need[2]) {
        int axes[MG_MAX_DIMS], k = 0;
        const int n_norm = node->attrs->n_norm_axes;
        for (int i = 0; i < nd; i++)
            if (layer ? i < nd - n_norm : i != 1) axes[k++] = i;
        /* naxes 0 would mean every axis: a layernorm over all of x's axes
         * has nothing to sum. */
        gin[2] = k ? mg_sum(g, gy, k, axes, 0) : gy;
    }
    return mgi_grad_status(3, need, gin);
}
