/*
 * ops_loss.c - the scalar losses: cross-entropy against integer labels
 * (with its fused backward helper op), mean squared error, and the final
 * projection fused with cross-entropy, made chunk by chunk of rows so
 * that the [N, V] logits are never whole (issue 46 item 3).
 */
#include "../common/linear_ce.h"
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

/* ---- linear_cross_entropy ------------------------------------------------
 * mean_n(logsumexp(l_n) - l_n[label_n]) over the logits l = h w^T (with an
 * ignore_index: over the rows whose label is not it), made
 * a chunk of rows at a time in the op's workspace. Its gradient op makes
 * each chunk again and turns it into the logits' gradient in place, so
 * neither pass keeps [N, V] of anything, and nothing but h, w and the
 * labels is read by the backward pass (no log-sum-exp is saved: a chunk
 * holds whole rows, so the gradient op gets it again from the chunk). */

/* h float [N, D], w [V, D] of h's dtype (PyTorch's Linear weight),
 * labels i32 or i64 [N], chunk_rows in [1, N] with a workspace that fits. */
static mg_status lce_check(const mg_tdesc *h, const mg_tdesc *w,
                           const mg_tdesc *labels, const mg_attrs *a, char *why,
                           size_t len) {
    char b1[128], b2[128];
    mg_status s = mgi_float_pair_check(h, "h", w, "w", why, len);
    if (s == MG_OK) s = mgi_index_check(labels, "labels", why, len);
    if (s != MG_OK) return s;
    if (h->ndim != 2) {
        snprintf(why, len, "h must be 2-D [N, D], not %s",
                 mgi_shape_str(h, b1, sizeof b1));
        return MG_ERR_SHAPE;
    }
    if (w->ndim != 2 || w->shape[1] != h->shape[1]) {
        snprintf(why, len,
                 "w must be [V, %lld] (V rows of h's width, as a Linear "
                 "layer's weight), not %s",
                 (long long)h->shape[1], mgi_shape_str(w, b2, sizeof b2));
        return MG_ERR_SHAPE;
    }
    if (labels->ndim != 1 || labels->shape[0] != h->shape[0]) {
        snprintf(why, len, "labels must be [%lld] to match h %s, not %s",
                 (long long)h->shape[0], mgi_shape_str(h, b1, sizeof b1),
                 mgi_shape_str(labels, b2, sizeof b2));
        return MG_ERR_SHAPE;
    }
    if (a->chunk_rows < 1 || a->chunk_rows > h->shape[0]) {
        snprintf(why, len,
                 "chunk_rows %lld is not in [1, %lld] (0 picks the default)",
                 (long long)a->chunk_rows, (long long)h->shape[0]);
        return MG_ERR_INVALID_ARG;
    }
    if (mg_lce_workspace(h->shape[0], w->shape[0], a->chunk_rows,
                         mg_dtype_size(h->dtype), 1,
                         a->has_ignore_index) == SIZE_MAX) {
        snprintf(why, len,
                 "a chunk of %lld rows of %lld logits has more bytes than "
                 "PTRDIFF_MAX",
                 (long long)a->chunk_rows, (long long)w->shape[0]);
        return MG_ERR_INVALID_ARG;
    }
    return MG_OK;
}

/* A fourth input, the logits h w^T (the builder checks it is that
 * matmul), [N, V] of h's dtype. */
mg_status mgi_linear_ce_infer(const mg_tdesc *in, int n_in, const mg_attrs *a,
                              mg_tdesc *out, char *why, size_t len) {
    char b1[128];
    mg_status s = lce_check(&in[0], &in[1], &in[2], a, why, len);
    if (s == MG_OK && n_in > 3 &&
        (in[3].dtype != in[0].dtype || in[3].ndim != 2 ||
         in[3].shape[0] != in[0].shape[0] ||
         in[3].shape[1] != in[1].shape[0])) {
        snprintf(why, len, "logits must be [%lld, %lld] of h's dtype, not %s",
                 (long long)in[0].shape[0], (long long)in[1].shape[0],
                 mgi_shape_str(&in[3], b1, sizeof b1));
        s = MG_ERR_SHAPE;
    }
    if (s == MG_OK) scalar_desc(out, in[0].dtype);
    return s;
}

/* linear_cross_entropy_grad(gy, h, w, labels) writes [N + V, D]: h's
 * gradient in rows [0, N), w's in rows [N, N + V). One op makes both,
 * since both read the same logits chunk: two ops would make every chunk
 * twice. */
mg_status mgi_linear_ce_grad_infer(const mg_tdesc *in, int n_in,
                                   const mg_attrs *a, mg_tdesc *out, char *why,
                                   size_t len) {
    (void)n_in;
    mg_status s = mgi_float_pair_check(&in[0], "gy", &in[1], "h", why, len);
    if (s == MG_OK && in[0].ndim != 0) {
        snprintf(why, len, "gy must be a scalar");
        s = MG_ERR_SHAPE;
    }
    if (s == MG_OK) s = lce_check(&in[1], &in[2], &in[3], a, why, len);
    if (s != MG_OK) return s;
    if (in[1].shape[0] > INT64_MAX - in[2].shape[0]) {
        snprintf(why, len, "N + V does not fit int64_t");
        return MG_ERR_SHAPE;
    }
    *out = in[1];
    out->shape[0] = in[1].shape[0] + in[2].shape[0];
    return MG_OK;
}

/* The forward makes the logits (2 N V D) and a log-sum-exp per row (about
 * 4 N V); the gradient makes them again, then the softmax minus the
 * one-hot, dh = dlogits w and dw = dlogits^T h: three products. */
static double lce_nvd(const mg_tdesc *h, const mg_tdesc *w, double *nv) {
    *nv = (double)h->shape[0] * (double)w->shape[0];
    return *nv * (double)h->shape[1];
}

double mgi_linear_ce_flops(const mg_tdesc *in, int n_in, const mg_attrs *a,
                           const mg_tdesc *out) {
    (void)a, (void)out;
    double nv = 0;
    const double nvd = lce_nvd(&in[0], &in[1], &nv);
    return (n_in > 3 ? 0 : 2 * nvd) + 4 * nv; /* given logits: no GEMM */
}

double mgi_linear_ce_grad_flops(const mg_tdesc *in, int n_in, const mg_attrs *a,
                                const mg_tdesc *out) {
    (void)n_in, (void)a, (void)out;
    double nv = 0;
    const double nvd = lce_nvd(&in[1], &in[2], &nv);
    return 6 * nvd + 6 * nv;
}

/* The logits chunk, plus a loss per row in the forward op (linear_ce.h). */
size_t mgi_linear_ce_workspace(const mg_tdesc *in, int n_in, const mg_attrs *a,
                               const mg_tdesc *out) {
    (void)out;
    return mg_lce_op_workspace(in[0].shape[0], in[1].shape[0], a->chunk_rows,
                               mg_dtype_size(in[0].dtype), 1,
                               a->has_ignore_index, n_in > 3);
}

size_t mgi_linear_ce_grad_workspace(const mg_tdesc *in, int n_in,
                                    const mg_attrs *a, const mg_tdesc *out) {
    (void)n_in, (void)out;
    return mg_lce_workspace(in[1].shape[0], in[2].shape[0], a->chunk_rows,
                            mg_dtype_size(in[1].dtype), 0,
                            a->has_ignore_index);
}

/* Whether t is mg_matmul(h, w, 0, 1): the only logits the op may read. */
static bool is_logits_of(const mg_graph *g, mg_tensor t, mg_tensor h,
                         mg_tensor w) {
    const mg_node *n = &g->nodes[t];
    return n->op == MG_OP_MATMUL && n->n_in == 2 && n->in[0] == h &&
           n->in[1] == w && n->attrs->trans_a == 0 && n->attrs->trans_b == 1;
}

mg_tensor mg_linear_cross_entropy_ex(mg_graph *g, mg_tensor h, mg_tensor w,
                                     mg_tensor labels, mg_tensor logits,
                                     const mg_linear_ce_opts *opts) {
    const mg_linear_ce_opts defaults = {0};
    if (!opts) opts = &defaults;
    const mg_tdesc *hd = mgi_arg_desc(g, h, "linear_cross_entropy (h)");
    if (!hd) return MG_NO_TENSOR;
    const mg_tdesc hc = *hd; /* the next call may move the descriptors */
    const mg_tdesc *wd = mgi_arg_desc(g, w, "linear_cross_entropy (w)");
    if (!wd) return MG_NO_TENSOR;
    if (logits != MG_NO_TENSOR) {
        if (!mgi_arg_desc(g, logits, "linear_cross_entropy (logits)"))
            return MG_NO_TENSOR;
        if (!is_logits_of(g, logits, h, w)) {
            mg_set_error(MG_ERR_INVALID_ARG,
                         "linear_cross_entropy: logits (tensor %d) must be "
                         "mg_matmul(g, h, w, 0, 1) of this h and w",
                         (int)logits);
            return MG_NO_TENSOR;
        }
    }
    mg_attrs at = {0};
    at.chunk_rows = opts->chunk_rows;
    at.has_ignore_index = opts->has_ignore_index != 0;
    at.ignore_index = at.has_ignore_index ? opts->ignore_index : 0;
    /* Resolved here, not in the kernels, so that the workspace, and with
     * it the plan's peak, is fixed by the graph. Shapes the shape rule
     * will refuse keep the request as given. */
    if (hc.ndim == 2 && wd->ndim == 2)
        at.chunk_rows =
            mg_lce_chunk_rows(opts->chunk_rows, hc.shape[0], wd->shape[0]);
    const mg_tensor in[4] = {h, w, labels, logits};
    return mgi_graph_add_node(g, MG_OP_LINEAR_CROSS_ENTROPY,
                              logits != MG_NO_TENSOR ? 4 : 3, in, &at);
}

mg_tensor mg_linear_cross_entropy(mg_graph *g, mg_tensor h, mg_tensor w,
                                  mg_tensor labels, int64_t chunk_rows) {
    const mg_linear_ce_opts o = {.chunk_rows = chunk_rows};
    return mg_linear_cross_entropy_ex(g, h, w, labels, MG_NO_TENSOR, &o);
}

/* One linear_cross_entropy_grad op writes both gradients packed; each is
 * its rows, sliced out. The labels get none (no_grad_inputs). */
mg_status mgi_linear_ce_grad(mg_graph *g, const mg_node *node,
                             const mg_tensor *in, mg_tensor y, mg_tensor gy,
                             const bool *need, mg_tensor *gin) {
    (void)y;
    if (!need[0] && !need[1]) return MG_OK;
    const mg_attrs at = *node->attrs;
    const int64_t n = mgi_graph_desc(g, in[0])->shape[0],
                  v = mgi_graph_desc(g, in[1])->shape[0];
    const mg_tensor args[4] = {gy, in[0], in[1], in[2]};
    mg_tensor pk =
        mgi_graph_add_node(g, MG_OP_LINEAR_CROSS_ENTROPY_GRAD, 4, args, &at);
    if (need[0]) gin[0] = mg_slice(g, pk, 0, 0, n);
    if (need[1]) gin[1] = mg_slice(g, pk, 0, n, v);
    return mgi_grad_status(2, need, gin);
}
