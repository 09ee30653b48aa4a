/*
 * recompute.c - recomputed copies of forward tensors for the backward
 * pass.
 *
 * A copy has the op and attributes of its forward tensor and reads kept
 * tensors (checkpoints, leaves) or other copies, never a forward tensor
 * that is not kept: the forward pass can then release those after their
 * last forward reader. Copies are made on demand while backprop walks the
 * graph backwards, so each segment's copies are appended just before the
 * backward ops that first need them, and creation order is already the
 * schedule: forward, then per segment (last first) recompute + backward.
 * Same op, same attributes, same inputs bit for bit: dropout replays its
 * seed and offset, and the copy equals the original exactly.
 *
 * Without a plan each tensor is recomputed at most once, but for those a
 * budget point marks remat: their copies are made for each gradient rule
 * that reads them and released after it (mgi_recompute_release_remat),
 * so a cheap op is recomputed once per reader instead of being held
 * between its readers. A multi-level
 * plan (rewrite.h, mg_ml_plan) makes Revolve's and Rotor's schedules: on
 * entering a segment, every copy but the segment's own and its snapshots'
 * is dropped, so later readers recompute from the snapshots, which are
 * copies made (from older snapshots) when the segment is entered. Copies
 * still read only kept tensors or other copies, so the forward pass may
 * release what it does not keep, and each dropped copy lives exactly
 * until its last reader, which the exact peak predictor sees.
 *
 * Under mg_checkpoints.store16 a tensor kept in 16 bits is not kept either,
 * and its copy is no recomputation: it is unpack_bf16 of the tensor's
 * pack_bf16 (one pack, made with the first copy and scheduled right after
 * the tensor in the forward pass), so it reads nothing else and is made
 * wherever a recomputed copy would be.
 */
#include "rewrite.h"

#include <stdlib.h>

static bool needs_copy(const mg_graph *g, const mg_recompute *r, mg_tensor t) {
    return t < r->n && !r->keep[t] &&
           !(mgi_op_table[g->nodes[t].op].flags & MG_OPF_LEAF);
}

static mg_tensor resolved(const mg_graph *g, const mg_recompute *r,
                          mg_tensor t) {
    return needs_copy(g, r, t) ? r->copy[t] : t;
}

/* Record c as u's copy (c: the node just made, or MG_NO_TENSOR). */
static mg_tensor copy_made(mg_graph *g, mg_recompute *r, mg_tensor u,
                           mg_tensor c) {
    if (c == MG_NO_TENSOR) return c;
    g->nodes[c].flags |= MG_NODE_RECOMPUTE;
    g->nodes[c].orig = u;
    r->copy[u] = c;
    if (r->ml) r->made[r->n_made++] = u;
    return c;
}

static bool stored16(const mg_recompute *r, mg_tensor u) {
    return r->store16 && u < r->n && r->store16[u];
}

/* The copy of a tensor kept in 16 bits: its pack (made once, scheduled
 * right after u in the forward pass) unpacked here, in the backward pass. */
static mg_tensor make_unpack(mg_graph *g, mg_recompute *r, mg_tensor u) {
    if (r->pack16[u] == MG_NO_TENSOR) {
        const unsigned flags = g->building_flags;
        g->building_flags =
            (flags & ~(unsigned)MG_NODE_BACKWARD) | MG_NODE_PACK;
        const mg_attrs none = {0};
        r->pack16[u] = mgi_graph_add_node(g, MG_OP_PACK_BF16, 1, &u, &none);
        g->building_flags = flags;
        if (r->pack16[u] == MG_NO_TENSOR) return MG_NO_TENSOR;
    }
    const mg_tdesc *d = mgi_graph_desc(g, u);
    mg_attrs a = {0};
    a.ndim = d->ndim;
    for (int i = 0; i < d->ndim; i++) a.shape[i] = d->shape[i];
    const mg_tensor p = r->pack16[u];
    return copy_made(g, r, u,
                     mgi_graph_add_node(g, MG_OP_UNPACK_BF16, 1, &p, &a));
}

/* Append the copy of u; its inputs' copies exist already. */
static mg_tensor make_copy(mg_graph *g, mg_recompute *r, mg_tensor u) {
    if (stored16(r, u)) return make_unpack(g, r, u);
    /* Locals: adding a node may move g->nodes. */
    const mg_op op = g->nodes[u].op;
    const int n_in = g->nodes[u].n_in;
    const mg_attrs *attrs = g->nodes[u].attrs; /* shared, never moved */
    mg_tensor in[MG_MAX_INPUTS];
    for (int k = 0; k < n_in; k++) in[k] = resolved(g, r, g->nodes[u].in[k]);
    return copy_made(g, r, u,
                     mgi_graph_add_node_shared(g, op, n_in, in, attrs));
}

mg_tensor mgi_recompute_get(mg_graph *g, mg_recompute *r, mg_tensor t) {
    if (!needs_copy(g, r, t) || r->copy[t] != MG_NO_TENSOR)
        return resolved(g, r, t);
    /* Post-order walk with an explicit stack: a segment can be thousands
     * of ops long, too deep for recursion. The stack is the current path,
     * so it never holds more than r->n entries. */
    int32_t top = 0;
    r->stack[top++] = t;
    while (top > 0) {
        mg_tensor u = r->stack[top - 1];
        bool pushed = false;
        /* an unpacked copy reads only its pack */
        for (int k = 0; k < g->nodes[u].n_in && !pushed && !stored16(r, u);
             k++) {
            mg_tensor v = g->nodes[u].in[k];
            if (needs_copy(g, r, v) && r->copy[v] == MG_NO_TENSOR) {
                r->stack[top++] = v;
                pushed = true;
            }
        }
        if (pushed) continue;
        top--;
        if (make_copy(g, r, u) == MG_NO_TENSOR) return MG_NO_TENSOR;
    }
    return r->copy[t];
}

static int32_t seg_of(const mg_ml_plan *p, mg_tensor t) {
    return t >= 0 && t < p->n ? p->seg[t] : -1;
}

mg_status mgi_recompute_enter(mg_graph *g, mg_recompute *r, mg_tensor v) {
    const mg_ml_plan *p = r ? r->ml : NULL;
    if (!p) return MG_OK;
    const int32_t j = seg_of(p, v);
    if (j < 0 || j == r->cur_seg) return MG_OK;
    r->cur_seg = j;
    const mg_tensor *sn = p->snap + p->snap_start[j];
    const int32_t n_sn = p->snap_start[j + 1] - p->snap_start[j];
    for (int32_t i = 0; i < n_sn; i++)
        if (sn[i] >= 0 && sn[i] < r->n) r->mark[sn[i]] = j;
    /* Every copy stays in made at most once: a dropped one leaves it, and
     * only a dropped (or never made) one is made again. */
    int32_t k = 0;
    for (int32_t i = 0; i < r->n_made; i++) {
        mg_tensor u = r->made[i];
        if (r->mark[u] == j || seg_of(p, u) == j) r->made[k++] = u;
        else r->copy[u] = MG_NO_TENSOR;
    }
    r->n_made = k;
    for (int32_t i = 0; i < n_sn; i++)
        if (sn[i] >= 0 && sn[i] < r->n &&
            mgi_recompute_get(g, r, sn[i]) == MG_NO_TENSOR) {
            mg_status s = mg_last_status();
            return s != MG_OK ? s
                              : mg_set_error(MG_ERR_INTERNAL,
                                             "mg_gradients: a snapshot could "
                                             "not be recomputed");
        }
    return MG_OK;
}

/* A multi-level plan's list of the copies in force (r->made) loses the
 * ones just forgotten. */
static void drop_forgotten_made(mg_recompute *r) {
    int32_t k = 0;
    for (int32_t i = 0; i < r->n_made; i++)
        if (r->copy[r->made[i]] != MG_NO_TENSOR) r->made[k++] = r->made[i];
    r->n_made = k;
}

void mgi_recompute_forget_unread(mg_graph *g, mg_recompute *r,
                                 mg_tensor first_copy, mg_tensor first_rule) {
    if (!r || !(r->ml || r->lazy) || first_rule <= first_copy) return;
    /* r->stack (room for r->n entries; the copies of one rule are fewer)
     * is free between mgi_recompute_get calls: 1 marks a copy read */
    int32_t *read = r->stack;
    const int32_t n_copies = first_rule - first_copy;
    if (n_copies > r->n) return; /* not reached: one copy per tensor */
    for (int32_t i = 0; i < n_copies; i++) read[i] = 0;
    for (mg_tensor t = g->n - 1; t >= first_copy; t--) {
        if (t < first_rule && !read[t - first_copy]) continue;
        const mg_node *c = &g->nodes[t];
        for (int k = 0; k < c->n_in; k++)
            if (c->in[k] >= first_copy && c->in[k] < first_rule)
                read[c->in[k] - first_copy] = 1;
    }
    bool forgot = false;
    for (mg_tensor t = first_copy; t < first_rule; t++) {
        const mg_node *c = &g->nodes[t];
        if (read[t - first_copy] || !(c->flags & MG_NODE_RECOMPUTE)) continue;
        if (c->orig >= 0 && c->orig < r->n && r->copy[c->orig] == t) {
            r->copy[c->orig] = MG_NO_TENSOR;
            forgot = true;
        }
    }
    if (forgot && r->ml) drop_forgotten_made(r);
}

void mgi_recompute_release_remat(const mg_graph *g, mg_recompute *r,
                                 mg_tensor first_copy, mg_tensor first_rule) {
    if (!r || !r->remat) return;
    bool forgot = false;
    for (mg_tensor t = first_copy; t < first_rule; t++) {
        const mg_node *c = &g->nodes[t];
        if (!(c->flags & MG_NODE_RECOMPUTE) || c->orig < 0 || c->orig >= r->n ||
            !r->remat[c->orig] || r->copy[c->orig] != t)
            continue;
        /* a multi-level plan's snapshot stays valid for its segment */
        if (r->ml && r->mark[c->orig] == r->cur_seg) continue;
        r->copy[c->orig] = MG_NO_TENSOR;
        forgot = true;
    }
    if (forgot && r->ml) drop_forgotten_made(r);
}

void mgi_ml_plan_free(mg_ml_plan *p) {
    if (!p) return;
    free(p->seg);
    free(p->snap_start);
    free(p->snap);
    p->seg = p->snap_start = NULL;
    p->snap = NULL;
    p->n_seg = p->n = 0;
}
