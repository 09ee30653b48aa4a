/*
 * ops_matmul.c - matrix product, plain or batched, with either operand
 * transposed, and its gradient, which must undo the sharing of a 2-D
 * operand across a batch by summing over the batch.
 */
#include "graph.h"
#include "ops_internal.h"

#include <stdbool.h>
#include <stdio.h>

/* Rows and columns of an operand after its optional transpose. */
static int64_t mat_rows(const mg_tdesc *d, int trans) {
    return d->shape[d->ndim - (trans ? 1 : 2)];
}
static int64_t mat_cols(const mg_tdesc *d, int trans) {
    return d->shape[d->ndim - (trans ? 2 : 1)];
}

mg_status mgi_matmul_infer(const mg_tdesc *in, int n_in, const mg_attrs *a,
                           mg_tdesc *out, char *why, size_t len) {
    (void)n_in;
    const mg_tdesc *x = &in[0], *w = &in[1];
    mg_status s = mgi_float_pair_check(x, "a", w, "b", why, len);
    if (s != MG_OK) return s;
    if (x->ndim < 2 || w->ndim < 2) {
        snprintf(why, len, "%s must have at least 2 dims",
                 x->ndim < 2 ? "a" : "b");
        return MG_ERR_SHAPE;
    }
    int64_t k_a = mat_cols(x, a->trans_a), k_b = mat_rows(w, a->trans_b);
    if (k_a != k_b) {
        snprintf(why, len,
                 "inner dims differ: a%s has K = %lld, b%s has K = %lld",
                 a->trans_a ? "^T" : "", (long long)k_a, a->trans_b ? "^T" : "",
                 (long long)k_b);
        return MG_ERR_SHAPE;
    }
    /* The batch dims come from the batched operand; a 2-D one is shared. */
    const mg_tdesc *batched = x->ndim > 2 ? x : w;
    if (x->ndim > 2 && w->ndim > 2) {
        bool same = x->ndim == w->ndim;
        for (int i = 0; same && i < x->ndim - 2; i++)
            same = x->shape[i] == w->shape[i];
        if (!same) {
            snprintf(why, len,
                     "batch dims differ (they must be equal, or one operand "
                     "2-D)");
            return MG_ERR_SHAPE;
        }
    }
    *out = *batched;
    out->dtype = x->dtype;
    out->shape[out->ndim - 2] = mat_rows(x, a->trans_a);
    out->shape[out->ndim - 1] = mat_cols(w, a->trans_b);
    return MG_OK;
}

double mgi_matmul_flops(const mg_tdesc *in, int n_in, const mg_attrs *a,
                        const mg_tdesc *out) {
    (void)n_in;
    /* numel(out) = M * N * batch. */
    return 2.0 * (double)mgi_tdesc_numel(out) *
           (double)mat_cols(&in[0], a->trans_a);
}

/* An operand that is a permute swapping only its last two axes is read
 * from the permute's input with its transpose flag flipped (issue 46): the
 * GEMM reads the transposed layout in place, so the permute's copy and its
 * buffer go (no plan computes a permute nobody else reads), and so does
 * its gradient's, as the matmul's own gradient is written with flags too.
 * An importer's MatMul(x, Transpose(W)) and the ATen capture's mm(x, t(w))
 * become one GEMM, in the forward and the backward graph alike. A node
 * the graph does not hold is left for the shape rule to report. */
static mg_tensor untransposed(const mg_graph *g, mg_tensor t, bool *trans) {
    if (!g || t < 0 || t >= g->n || g->nodes[t].op != MG_OP_PERMUTE) return t;
    const mg_node *n = &g->nodes[t];
    const int nd = mgi_node_desc(g, n)->ndim;
    bool swap = nd >= 2 && n->attrs->perm[nd - 2] == nd - 1 &&
                n->attrs->perm[nd - 1] == nd - 2;
    for (int i = 0; swap && i < nd - 2; i++) swap = n->attrs->perm[i] == i;
    if (!swap) return t;
    *trans = !*trans;
    return n->in[0];
}

mg_tensor mg_matmul(mg_graph *g, mg_tensor a, mg_tensor b, int trans_a,
                    int trans_b) {
    mg_attrs at = {0};
    bool ta = trans_a != 0, tb = trans_b != 0;
    const mg_tensor a0 = a, b0 = b;
    a = untransposed(g, a, &ta);
    b = untransposed(g, b, &tb);
    at.trans_a = ta;
    at.trans_b = tb;
    const mg_tensor in[2] = {a, b};
    const mg_tensor out = mgi_graph_add_node(g, MG_OP_MATMUL, 2, in, &at);
    if (out >= 0) {
        if (a != a0) g->nodes[a0].flags |= MG_NODE_FOLDED;
        if (b != b0) g->nodes[b0].flags |= MG_NODE_FOLDED;
    }
    return out;
}

/* A 2-D operand shared across the batch gets the sum of its per-entry
 * gradients, t, over the leading batch dims. */
static mg_tensor batch_sum(mg_graph *g, mg_tensor t, const mg_tdesc *operand) {
    if (t == MG_NO_TENSOR || operand->ndim != 2) return t;
    int axes[MG_MAX_DIMS], n = mgi_graph_desc(g, t)->ndim - 2;
    for (int i = 0; i < n; i++) axes[i] = i;
    return n > 0 ? mg_sum(g, t, n, axes, 0) : t;
}

/* Gradient of a shared b when a is [..., M, K] untransposed: stacking the
 * batch into rows makes the batch sum part of one GEMM, with no
 * [batch, K, N] intermediate. */
static mg_tensor shared_b_grad(mg_graph *g, mg_tensor a, mg_tensor gy,
                               const mg_tdesc *ad, int trans_b) {
    int64_t k = ad->shape[ad->ndim - 1];
    int64_t rows = mgi_tdesc_numel(ad) / k;
    int64_t n = mgi_graph_desc(g, gy)->shape[mgi_graph_desc(g, gy)->ndim - 1];
    const int64_t a2[2] = {rows, k}, gy2[2] = {rows, n};
    mg_tensor ar = mg_reshape(g, a, 2, a2), gr = mg_reshape(g, gy, 2, gy2);
    return trans_b ? mg_matmul(g, gr, ar, 1, 0) : mg_matmul(g, ar, gr, 1, 0);
}

/* With A = op(a), B = op(b): dA = gy B^T and dB = A^T gy, each written so
 * that it comes out in the operand's stored (possibly transposed) layout. */
mg_status mgi_matmul_grad(mg_graph *g, const mg_node *node, const mg_tensor *in,
                          mg_tensor y, mg_tensor gy, const bool *need,
                          mg_tensor *gin) {
    (void)y;
    const mg_tensor a = in[0], b = in[1];
    const int ta = node->attrs->trans_a, tb = node->attrs->trans_b;
    const mg_tdesc ad = *mgi_graph_desc(g, a), bd = *mgi_graph_desc(g, b);
    if (need[0]) {
        mg_tensor t =
            ta ? mg_matmul(g, b, gy, tb, 1) : mg_matmul(g, gy, b, 0, !tb);
        gin[0] = batch_sum(g, t, &ad);
    }
    if (need[1]) {
        if (bd.ndim == 2 && ad.ndim > 2 && !ta) {
            gin[1] = shared_b_grad(g, a, gy, &ad, tb);
        } else {
            mg_tensor t =
                tb ? mg_matmul(g, gy, a, 1, ta) : mg_matmul(g, a, gy, !ta, 0);
            gin[1] = batch_sum(g, t, &bd);
        }
    }
    return mgi_grad_status(2, need, gin);
}
