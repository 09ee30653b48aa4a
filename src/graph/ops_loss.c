/*
 * ops_loss.c - the scalar losses: cross-entropy against integer labels
 * (with its fused backward helper op) and mean squared error.
 */
#include "graph.h"
#include "ops_internal.h"

#include <stdio.h>

/* logits float [N, C], labels i32 or i64 [N]. */
static mg_status ce_check(const mg_tdesc *logits, const mg_tdesc *labels,
                          char *why, size_t len) {
    char buf[128];
    mg_status s = mgi_float_check(logits, "logits", why, len);
    if (s != MG_OK) return s;
    s = mgi_index_check(labels, "labels", why, len);
    if (s != MG_OK) return s;
    if (logits->ndim != 2) {
        snprintf(why, len, "logits must be 2-D [N, C], not %s",
                 mgi_shape_str(logits, buf, sizeof buf));
        return MG_ERR_SHAPE;
    }
    if (labels->ndim != 1 || labels->shape[0] != logits->shape[0]) {
        snprintf(why, len, "labels must be [%lld] to match logits, not %s",
                 (long long)logits->shape[0],
                 mgi_shape_str(labels, buf, sizeof buf));
        return MG_ERR_SHAPE;
    }
    return MG_OK;
}

static void scalar_desc(mg_tdesc *out, mg_dtype dtype) {
    out->dtype = dtype;
    out->ndim = 0;
}

mg_status mgi_cross_entropy_infer(const mg_tdesc *in, int n_in,
                                  const mg_attrs *a, mg_tdesc *out, char *why,
                                  size_t len) {
    (void)n_in, (void)a;
    mg_status s = ce_check(&in[0], &in[1], why, len);
    if (s == MG_OK) scalar_desc(out, in[0].dtype);
    return s;
}

/* cross_entropy_grad(gy, logits, labels): gy is the loss's scalar grad. */
mg_status mgi_ce_grad_infer(const mg_tdesc *in, int n_in, const mg_attrs *a,
                            mg_tdesc *out, char *why, size_t len) {
    (void)n_in, (void)a;
    mg_status s =
        mgi_float_pair_check(&in[0], "gy", &in[1], "logits", why, len);
    if (s == MG_OK && in[0].ndim != 0) {
        snprintf(why, len, "gy must be a scalar");
        s = MG_ERR_SHAPE;
    }
    if (s == MG_OK) s = ce_check(&in[1], &in[2], why, len);
    if (s == MG_OK) *out = in[1];
    return s;
}

mg_status mgi_mse_infer(const mg_tdesc *in, int n_in, const mg_attrs *a,
                        mg_tdesc *out, char *why, size_t len) {
    (void)n_in, (void)a;
    mg_status s =
        mgi_float_pair_check(&in[0], "pred", &in[1], "target", why, len);
    if (s == MG_OK && !mgi_tdesc_same_shape(&in[0], &in[1])) {
        snprintf(why, len, "pred and target must have the same shape");
        s = MG_ERR_SHAPE;
    }
    if (s == MG_OK) scalar_desc(out, in[0].dtype);
    return s;
}

/* About a softmax row per element for cross-entropy, a subtract, square
 * and add for mse. */
double mgi_loss_flops(const mg_tdesc *in, int n_in, const mg_attrs *a,
                      const mg_tdesc *out) {
    (void)n_in, (void)a, (void)out;
    return 4.0 * (double)mgi_tdesc_numel(&in[0]);
}

/* One partial loss per row, which the CUDA kernel sums in a fixed order for
 * a deterministic result (the CPU needs none). */
size_t mgi_cross_entropy_workspace(const mg_tdesc *in, int n_in,
                                   const mg_attrs *a, const mg_tdesc *out) {
    (void)n_in, (void)a, (void)out;
    if (in[0].ndim != 2) return 0;
    return (size_t)in[0].shape[0] * mg_dtype_size(in[0].dtype);
}

mg_tensor mg_cross_entropy(mg_graph *g, mg_tensor logits, mg_tensor labels) {
    const mg_tensor in[2] = {logits, labels};
    return mgi_graph_add_node(g, MG_OP_CROSS_ENTROPY, 2, in, NULL);
}

mg_tensor mg_mse(mg_graph *g, mg_tensor pred, mg_tensor target) {
    const mg_tensor in[2] = {pred, target};
    return mgi_graph_add_node(g, MG_OP_MSE, 2, in, NULL);
}

/* Labels are in no_grad_inputs, so only the logits get a gradient. */
mg_status mgi_cross_entropy_grad(mg_graph *g, const mg_node *node,
                                 const mg_tensor *in, mg_tensor y, mg_tensor gy,
                                 const bool *need, mg_tensor *gin) {
    (void)node;
    (void)y;
    const mg_tensor args[3] = {gy, in[0], in[1]};
    if (need[0])
        gin[0] = mgi_graph_add_node(g, MG_OP_CROSS_ENTROPY_GRAD, 3, args, NULL);
    return mgi_grad_status(1, need, gin);
}

mg_status mgi_mse_grad(mg_graph *g, const mg_node *node, const mg_tensor *in,
                       mg_tensor y, mg_tensor gy, const bool *need,
                       mg_tensor *gin) {
    (void)node;
    (void)y;
    const mg_tensor p = in[0], t = in[1];
    const double numel = (double)mgi_tdesc_numel(mgi_graph_desc(g, p));
    /* d/dp = 2 (p - t) / numel * gy; d/dt is its negation. */
    mg_tensor d = mg_mul(g, mg_scale(g, mg_sub(g, p, t), 2.0 / numel), gy);
    if (need[0]) gin[0] = d;
    if (need[1]) gin[1] = mg_neg(g, d);
    return mgi_grad_status(2, need, gin);
}
