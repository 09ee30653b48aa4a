/*
 * ops_embedding.c - embedding lookup: rows of a float table [V, D] gathered
 * by int32 or int64 indices of any shape, and its gradient, a scatter-add
 * of gy into a zero table done by a helper op in a fixed order.
 */
#include "graph.h"
#include "ops_internal.h"

#include <stdio.h>

mg_status mgi_embedding_infer(const mg_tdesc *in, int n_in, const mg_attrs *a,
                              mg_tdesc *out, char *why, size_t len) {
    (void)n_in, (void)a;
    const mg_tdesc *table = &in[0], *idx = &in[1];
    mg_status s = mgi_rank_check(table, "table", "[V, D]", why, len);
    if (s != MG_OK) return s;
    s = mgi_index_check(idx, "indices", why, len);
    if (s != MG_OK) return s;
    if (idx->ndim >= MG_MAX_DIMS) {
        snprintf(why, len, "indices may have at most %d dims", MG_MAX_DIMS - 1);
        return MG_ERR_SHAPE;
    }
    *out = *idx;
    out->dtype = table->dtype;
    out->shape[out->ndim++] = table->shape[1];
    return MG_OK;
}

/* embedding_grad(gy, idx): the table's shape is in the attributes. */
mg_status mgi_embedding_grad_infer(const mg_tdesc *in, int n_in,
                                   const mg_attrs *a, mg_tdesc *out, char *why,
                                   size_t len) {
    return mgi_grad_infer_via(mgi_embedding_infer, in, n_in, a, out, why, len);
}

/* One add per element of gy. */
double mgi_embedding_grad_flops(const mg_tdesc *in, int n_in, const mg_attrs *a,
                                const mg_tdesc *out) {
    (void)n_in, (void)a, (void)out;
    return (double)mgi_tdesc_numel(&in[0]);
}

/* embedding_grad (gy, indices) -> dtable: the CUDA kernel gathers instead
 * of scattering, from the positions of each row sorted by row (CSR: rows
 * + 1 starts, then one entry per index, as int64); the CPU needs none. */
size_t mgi_embedding_grad_workspace(const mg_tdesc *in, int n_in,
                                    const mg_attrs *a, const mg_tdesc *out) {
    (void)n_in, (void)a;
    if (out->ndim < 1) return 0;
    return (size_t)(out->shape[0] + 1 + mgi_tdesc_numel(&in[1])) *
           sizeof(int64_t);
}

mg_tensor mg_embedding(mg_graph *g, mg_tensor table, mg_tensor indices) {
    const mg_tensor in[2] = {table, indices};
    return mgi_graph_add_node(g, MG_OP_EMBEDDING, 2, in, NULL);
}

/* The indices are in no_grad_inputs: only the table gets a gradient. */
mg_status mgi_embedding_grad(mg_graph *g, const mg_node *node,
                             const mg_tensor *in, mg_tensor y, mg_tensor gy,
                             const bool *need, mg_tensor *gin) {
    (void)node;
    (void)y;
    const mg_tdesc td = *mgi_graph_desc(g, in[0]);
    mg_attrs at = {0};
    const mg_tensor args[2] = {gy, in[1]};
    if (need[0] &&
        mgi_attrs_shape_set(&at, td.ndim, td.shape, "embedding") == MG_OK)
        gin[0] = mgi_graph_add_node(g, MG_OP_EMBEDDING_GRAD, 2, args, &at);
    return mgi_grad_status(1, need, gin);
}
