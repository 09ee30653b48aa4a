/*
 * compact.c - the compaction pass of issue 29: a third choice for a saved
 * tensor besides keeping it whole and recomputing it, keeping it compact.
 *
 * After backprop has built the gradient ops, a forward tensor t that the
 * forward pass keeps is read by some of them. When every one of those
 * reads goes through an input slot that the reader's op table entry gives
 * a compact saved form (op_table.h: mg_saved_form), the pass adds t's
 * packs (one per pack op and attributes, shared by the readers that agree)
 * and rewrites each reader in place to read its pack. The packs run right
 * after t (the scheduler places every MG_NODE_PACK node there), so t dies
 * after its last forward reader and the backward pass holds only the
 * packs: 1 bit per element for relu's sign, 1 byte per output for a max
 * pool's argmax. The readers compute the same bits (ops_compact.c), so the
 * gradients are unchanged.
 *
 * Left whole: a tensor that some backward op reads in full (a conv's
 * input, or anything a recomputed copy reads: a checkpoint), a y, a leaf
 * (caller memory, which compaction would not free), and recomputed copies
 * (made in the backward pass, for one segment). The pass names no op: a
 * new compact form is a table entry, its two ops and their kernels.
 */
#include "../graph/graph.h"
#include "rewrite.h"

#include <stdlib.h>
#include <string.h>

enum { UNREAD = 0, COMPACT = 1, WHOLE = 2 };

/* Whether r's pack op can encode t (a max pool's window may be too large
 * for a byte). The shape rule decides, without setting an error. */
static bool pack_fits(const mg_graph *g, const mg_saved_form *f, mg_tensor t,
                      const mg_attrs *a) {
    mg_tdesc out;
    char why[160];
    return mgi_op_table[f->pack].infer(mgi_graph_desc(g, t), 1, a, &out, why,
                                       sizeof why) == MG_OK;
}

/* The pack of t by op with attributes a: one made already, or a new one. */
static mg_tensor pack_get(mg_graph *g, mg_tensor first_pack, mg_tensor t,
                          mg_op op, const mg_attrs *a) {
    for (mg_tensor p = first_pack; p < g->n; p++)
        if (g->nodes[p].in[0] == t && g->nodes[p].op == op &&
            memcmp(g->nodes[p].attrs, a, sizeof *a) == 0)
            return p;
    const unsigned flags = g->building_flags;
    g->building_flags = (flags & ~(unsigned)MG_NODE_BACKWARD) | MG_NODE_PACK;
    mg_tensor p = mgi_graph_add_node(g, op, 1, &t, a);
    g->building_flags = flags;
    return p;
}

mg_status mgi_compact_saved(mg_graph *g, int32_t n_fwd, const bool *keep,
                            const bool *is_y) {
    const mg_tensor n_end = g->n;
    uint8_t *st = calloc((size_t)(n_fwd ? n_fwd : 1), 1);
    if (!st) return mg_set_error(MG_ERR_NOMEM, "mg_gradients: out of memory");
    for (mg_tensor r = n_fwd; r < n_end; r++) {
        const mg_node *nd = &g->nodes[r];
        const mg_saved_form *f = &mgi_op_table[nd->op].compact;
        const bool bwd = !(nd->flags & MG_NODE_RECOMPUTE);
        for (int k = 0; k < nd->n_in; k++) {
            const mg_tensor t = nd->in[k];
            if (t >= n_fwd) continue;
            if (bwd && f->reader && k == f->slot &&
                pack_fits(g, f, t, nd->attrs)) {
                if (st[t] == UNREAD) st[t] = COMPACT;
            } else {
                st[t] = WHOLE;
            }
        }
    }
    mg_status s = MG_OK;
    for (mg_tensor r = n_fwd; r < n_end && s == MG_OK; r++) {
        const mg_node *nd = &g->nodes[r];
        const mg_saved_form f = mgi_op_table[nd->op].compact;
        if (!f.reader || (nd->flags & MG_NODE_RECOMPUTE)) continue;
        const mg_tensor t = nd->in[f.slot];
        if (t >= n_fwd || st[t] != COMPACT || is_y[t] || !keep[t] ||
            (mgi_op_table[g->nodes[t].op].flags & MG_OPF_LEAF))
            continue;
        const mg_attrs a = *nd->attrs;
        const mg_tensor p = pack_get(g, n_end, t, f.pack, &a);
        if (p == MG_NO_TENSOR) {
            s = mg_last_status() != MG_OK ? mg_last_status() : MG_ERR_INTERNAL;
            break;
        }
        mg_tensor in[MG_MAX_INPUTS];
        memcpy(in, g->nodes[r].in, sizeof in);
        in[f.slot] = p;
        const mg_tdesc shape = *mgi_graph_desc(g, t);
        s = mgi_graph_node_rewrite(g, r, f.reader, in, &shape);
    }
    free(st);
    return s;
}
