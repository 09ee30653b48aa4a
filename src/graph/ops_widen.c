/*
 * ops_widen.c - the workspace rule of every op on bfloat16 or float16
 * tensors: the CPU runs such an op on float32 copies of its 16-bit tensors
 * (common/widen.h, src/exec/cpu/cpu_widen.c), so the step lends those
 * copies, then what the op's own rule asks for the float32 op that runs
 * on them. The plan counts both, which keeps the predicted peak the
 * measured one.
 */
#include "../common/widen.h"
#include "graph.h"
#include "op_table.h"

bool mgi_graph_widen_workspace(const mg_graph *g, mg_tensor t,
                               mg_workspace_fn *ws, size_t *bytes) {
    if (!g->descs.has_half) return false; /* no 16-bit tensor at all */
    const mg_node *n = &g->nodes[t];
    const mg_tdesc *out = mgi_node_desc(g, n);
    /* the common case first, without copying descriptors (planning asks
     * this of every step, issue 32) */
    bool half = mgi_dtype_is_half(out->dtype);
    for (int i = 0; i < n->n_in && !half; i++)
        half = mgi_dtype_is_half(mgi_graph_desc(g, n->in[i])->dtype);
    if (!half) return false;
    mg_tdesc in[MG_MAX_INPUTS], f[MG_MAX_INPUTS];
    for (int i = 0; i < n->n_in; i++) in[i] = *mgi_graph_desc(g, n->in[i]);
    if (!mgi_widen_needed(n->op, n->n_in, in, out)) return false;
    const size_t copies = mgi_widen_bytes(n->op, n->n_in, in, out);
    size_t inner = 0;
    if (ws) {
        for (int i = 0; i < n->n_in; i++) f[i] = mgi_widen_desc(&in[i]);
        const mg_tdesc fo = mgi_widen_desc(out);
        inner = ws(f, n->n_in, n->attrs, &fo);
    }
    *bytes = copies == SIZE_MAX || inner > SIZE_MAX - copies ? SIZE_MAX
                                                             : copies + inner;
    return true;
}
