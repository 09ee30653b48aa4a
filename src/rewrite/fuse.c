/*
 * fuse.c - the plan pass that fuses chains of element-wise ops into one
 * step each (mg_plan_options.no_fusion turns it off).
 *
 * It runs on the schedule of the graph as rewritten (gradient ops, and
 * recomputed copies under checkpointing), so a recomputed chain is fused
 * as its forward chain is: its step runs the same ops on the same values
 * through the same fused kernel, and checkpointed gradients stay the same
 * bits as plain ones. Which ops are element-wise is the op table's
 * MG_OPF_ELEMENTWISE flag; the kernels take each op's body from the lists
 * of kernel_shared.h, so a new element-wise op joins fusion through its
 * table entry and its line there.
 *
 * A chain is a tree: the root's step computes it, and each other op's
 * tensor is absorbed, i.e. it has no buffer, since its one reader is the
 * op above it in the chain. A tensor that anything else reads (a backward
 * op, an output, a hook) is never absorbed: it ends a chain of its own,
 * and the chain above reads it as an input. Chains are only formed over
 * consecutive steps, and every absorbed tensor has the root's dtype and
 * shape, so the fused step allocates its output where the unfused first
 * op allocated one of the same size class, with the same tensors live:
 * the peak never rises (schedule.h, mgi_plan_fuse).
 */
#include "schedule.h"

#include <stdlib.h>
#include <string.h>

enum { MARK_ABSORBED = 1, MARK_ROOT = 2 };

/* What the marking knows per tensor id, in one byte (an array per fact
 * was most of the pages a 10^6-op plan's fusion touched): bits 0-1 how
 * many distinct steps read it (2: two or more); FUSABLE, the step's op
 * may be in a chain (fusable_op), cleared when its inputs' dtypes rule it
 * out; CHECKED, its inputs' dtypes were checked and do not (fusable); its
 * kind (forward, recomputed or backward; 2 bits); and from bit MARK_SHIFT
 * its mark. */
enum {
    READERS = 3,
    FUSABLE = 1 << 2,
    CHECKED = 1 << 3,
    KIND_SHIFT = 4,
    KIND = 3 << KIND_SHIFT,
    MARK_SHIFT = 6
};

void mgi_fusion_free(mgi_fusion *f) {
    if (!f) return;
    free(f->root);
    free(f->start);
    free(f->ins);
    free(f->member);
    free(f->mark);
    free(f->n_ext);
    free(f->ext);
    free(f);
}

/* What the marking reads: the graph, the plan's remap (NULL: none), and
 * per tensor id whether it is kept (flags[t] & kept_mask). */
typedef struct fuse_ctx {
    const mg_graph *g;
    const mg_tensor *remap;
    const uint8_t *flags;
    uint8_t kept_mask;
} fuse_ctx;

static mg_tensor input_of(const fuse_ctx *p, mg_tensor t, int k) {
    const mg_tensor in = p->g->nodes[t].in[k];
    return p->remap ? p->remap[in] : in;
}

static bool is_leaf(const fuse_ctx *p, mg_tensor t) {
    return (mgi_op_table[p->g->nodes[t].op].flags & MG_OPF_LEAF) != 0;
}

/* Forward, recomputed or backward: a chain keeps to one, so that the
 * summary counts its flops where the unfused ops' were counted. */
static uint8_t kind_of(const mg_graph *g, mg_tensor t) {
    const unsigned f = g->nodes[t].flags;
    return (uint8_t)((((f & MG_NODE_BACKWARD) != 0) |
                      ((f & MG_NODE_RECOMPUTE) != 0) << 1)
                     << KIND_SHIFT);
}

/* Whether step t's op can be in a chain: element-wise, of at most two
 * inputs, float. */
static bool fusable_op(const mg_graph *g, const mg_node *n) {
    if (!(mgi_op_table[n->op].flags & MG_OPF_ELEMENTWISE) || n->n_in > 2)
        return false;
    const mg_dtype dt = mgi_node_desc(g, n)->dtype;
    return dt == MG_F32 || dt == MG_F64;
}

/* Whether step t can be an op of a chain: fusable_op, with inputs of its
 * dtype. Asked only of steps that may join a chain, and answered once
 * (bits[t]): an input's node is often far from t's, and reading it for
 * every step was much of the pass. */
static bool fusable(const fuse_ctx *p, uint8_t *bits, mg_tensor t) {
    if (!(bits[t] & FUSABLE)) return false;
    if (bits[t] & CHECKED) return true;
    const mg_node *n = &p->g->nodes[t];
    const mg_dtype dt = mgi_node_desc(p->g, n)->dtype;
    for (int k = 0; k < n->n_in; k++)
        if (mgi_graph_desc(p->g, input_of(p, t, k))->dtype != dt) {
            bits[t] &= (uint8_t)~FUSABLE;
            return false;
        }
    bits[t] |= CHECKED;
    return true;
}

/* Add x to the set ext (n of them, room for MG_MAX_INPUTS); false when it
 * is full. */
static bool ext_add(mg_tensor *ext, int *n, mg_tensor x) {
    for (int i = 0; i < *n; i++)
        if (ext[i] == x) return true;
    if (*n == MG_MAX_INPUTS) return false;
    ext[(*n)++] = x;
    return true;
}

static mg_status nomem(void) {
    return mg_set_error(MG_ERR_NOMEM,
                        "out of memory fusing element-wise chains");
}

/* The marking's scratch and results, per position i of the order:
 * tree[i] is TREE_LEAF for a leaf, else step order[i] is the root of a
 * tree, the ops it would fuse: itself alone (TREE_ALONE), or as the
 * pool's slot number tree[i] says, {its first step's position, its op
 * count, n external inputs, the n inputs}. A tree's steps are
 * consecutive steps (fuse_mark absorbs only trees that end right below
 * the cursor). Only trees that absorbed something have a slot, and a tree
 * absorbed into another hands its slot on: the pool holds about as many
 * slots as there are chains, where one per absorbing step (most of them
 * absorbed again in turn) grew it to tens of MB at 10^6 ops. Free slots
 * are listed through their first int, from free_slot (-1: none). The
 * pool is sized once, for n_order / 2 + 1 slots, and never grows: a slot
 * is taken only when none is free, so it belongs to a tree then live,
 * and live trees are disjoint and of two ops or more. tree is the
 * caller's scratch where it has one: a plan's last_read, which its next
 * pass writes over anyway, so that no fresh pages are touched for it. */
enum { TREE_LEAF = -2, TREE_ALONE = -1, SLOT = 3 + MG_MAX_INPUTS };
typedef struct fuse_work {
    uint8_t *bits; /* per tensor id, as the enum above */
    int32_t *tree;
    bool own_tree; /* allocated here, to be freed */
    int32_t *pool; /* SLOT ints a slot */
    int32_t n_slots, cap_slots, free_slot;
    int32_t n_roots;
} fuse_work;

static void work_free(fuse_work *w) {
    free(w->bits);
    if (w->own_tree) free(w->tree);
    free(w->pool);
}

static int32_t *slot_at(const fuse_work *w, int32_t slot) {
    return w->pool + (size_t)slot * SLOT;
}

static int32_t tree_start(const fuse_work *w, int32_t i) {
    return w->tree[i] < 0 ? i : slot_at(w, w->tree[i])[0];
}

static int32_t tree_ops(const fuse_work *w, int32_t i) {
    return w->tree[i] < 0 ? 1 : slot_at(w, w->tree[i])[1];
}

/* The position of the step before position i, or -1. */
static int32_t step_below(const fuse_work *w, int32_t i) {
    do i--;
    while (i >= 0 && w->tree[i] == TREE_LEAF);
    return i;
}

/* The external inputs of step t if it absorbs the trees of the n_a
 * tensors abs[] (those of steps sub[]): false when more than
 * MG_MAX_INPUTS. A tree alone (no pool entry) adds its op's inputs: as a
 * set, the same as adding them without repeats. */
static bool chain_ext(const fuse_ctx *p, const fuse_work *w, mg_tensor t,
                      const mg_tensor *abs, const int32_t *sub, int n_a,
                      mg_tensor *ext, int *n_ext) {
    *n_ext = 0;
    const mg_node *n = &p->g->nodes[t];
    for (int k = 0; k < n->n_in; k++) {
        const mg_tensor x = input_of(p, t, k);
        bool absorbed = false;
        for (int i = 0; i < n_a; i++) absorbed |= abs[i] == x;
        if (absorbed) continue;
        if (!ext_add(ext, n_ext, x)) return false;
    }
    for (int i = 0; i < n_a; i++) {
        const int32_t at = w->tree[sub[i]];
        if (at < 0) {
            for (int k = 0; k < p->g->nodes[abs[i]].n_in; k++)
                if (!ext_add(ext, n_ext, input_of(p, abs[i], k))) return false;
            continue;
        }
        const int32_t *e = slot_at(w, at);
        for (int j = 0; j < e[2]; j++)
            if (!ext_add(ext, n_ext, e[3 + j])) return false;
    }
    return true;
}

/* Record the tree at position i, which absorbed the trees at positions
 * sub[0..n_a): its first step's position, its n_ops ops and its n_ext
 * inputs, in the first of their slots, or a free one; their other slots
 * are freed. */
static mg_status tree_set(fuse_work *w, int32_t i, const int32_t *sub, int n_a,
                          int32_t first, int n_ops, const mg_tensor *ext,
                          int n_ext) {
    int32_t at = -1;
    for (int a = 0; a < n_a; a++) {
        const int32_t own = w->tree[sub[a]];
        if (own < 0) continue;
        if (at < 0) {
            at = own;
        } else {
            slot_at(w, own)[0] = w->free_slot;
            w->free_slot = own;
        }
    }
    if (at < 0 && w->free_slot >= 0) {
        at = w->free_slot;
        w->free_slot = slot_at(w, at)[0];
    }
    if (at < 0) {
        if (w->n_slots == w->cap_slots)
            return mg_set_error(MG_ERR_INTERNAL,
                                "mg_plan_compile: fusion ran out of the "
                                "%d tree slots it counted on",
                                (int)w->cap_slots);
        at = w->n_slots++;
    }
    int32_t *e = slot_at(w, at);
    e[0] = first;
    e[1] = n_ops;
    e[2] = n_ext;
    for (int k = 0; k < n_ext; k++) e[3 + k] = ext[k];
    w->tree[i] = at;
    return MG_OK;
}

/* Whether step x (an input of fusable step t, of descriptor d) may be
 * absorbed into t's chain: fusable, of t's kind, read by t alone, neither
 * kept nor hooked, of t's shape and dtype. */
static bool absorbable(const fuse_ctx *p, uint8_t *bits, mg_tensor t,
                       mg_tensor x, const mg_tdesc *d) {
    const mg_graph *g = p->g;
    if ((bits[x] & READERS) != 1 || ((bits[x] ^ bits[t]) & KIND) ||
        (p->flags[x] & p->kept_mask) || !fusable(p, bits, x))
        return false;
    if (g->nodes[x].desc != g->nodes[t].desc) {
        const mg_tdesc *dx = mgi_graph_desc(g, x);
        if (!mgi_tdesc_same_shape(dx, d) || dx->dtype != d->dtype) return false;
    }
    return !mgi_hooks_on(g, x);
}

/* Mark the chains among the computed tensors of order[0..n_order), as
 * mgi_plan_fuse describes them, into w: the marks in bits[], from bit
 * MARK_SHIFT. scratch: n_order ints for w->tree, or NULL. */
static mg_status fuse_mark(const fuse_ctx *p, int32_t n_tensors,
                           const mg_tensor *order, int32_t n_order,
                           int32_t *scratch, fuse_work *w) {
    const mg_graph *g = p->g;
    memset(w, 0, sizeof *w);
    w->free_slot = -1;
    w->bits = calloc((size_t)(n_tensors ? n_tensors : 1), 1);
    w->tree = scratch;
    if (!scratch) {
        w->tree = malloc((size_t)(n_order ? n_order : 1) * sizeof *w->tree);
        w->own_tree = true;
    }
    w->cap_slots = n_order / 2 + 1;
    w->pool = malloc((size_t)w->cap_slots * SLOT * sizeof *w->pool);
    if (!w->bits || !w->tree || !w->pool) return nomem();
    uint8_t *bits = w->bits;
    int32_t *tree = w->tree;
    /* the steps, what each one is, and how many distinct steps read each
     * tensor */
    for (int32_t i = 0; i < n_order; i++) {
        const mg_tensor t = order[i];
        if (is_leaf(p, t)) {
            tree[i] = TREE_LEAF;
            continue;
        }
        tree[i] = TREE_ALONE;
        const mg_node *n = &g->nodes[t];
        bits[t] |= (uint8_t)(kind_of(g, t) | (fusable_op(g, n) ? FUSABLE : 0));
        for (int k = 0; k < n->n_in; k++) {
            const mg_tensor x = input_of(p, t, k);
            bool seen = false;
            for (int j = 0; j < k; j++) seen |= input_of(p, t, j) == x;
            if (!seen && (bits[x] & READERS) < 2) bits[x]++;
        }
    }
    int32_t n_roots = 0, below = -1; /* the last step's position */
    for (int32_t i = 0; i < n_order; i++) {
        if (tree[i] == TREE_LEAF) continue;
        const mg_tensor t = order[i];
        const int32_t cursor0 = below;
        below = i;
        if (!(bits[t] & FUSABLE) || cursor0 < 0) continue;
        /* The inputs it may absorb: the step right below it first, then
         * its other input, if that one's tree ends right below the first
         * one's. Without an input right below it, it absorbs nothing. */
        const mg_node *n = &g->nodes[t];
        const mg_tensor under = order[cursor0];
        mg_tensor cand[2];
        int n_c = 0;
        for (int k = 0; k < n->n_in; k++)
            if (input_of(p, t, k) == under) {
                cand[n_c++] = under;
                if (n->n_in == 2 && input_of(p, t, 1 - k) != under)
                    cand[n_c++] = input_of(p, t, 1 - k);
                break;
            }
        if (!n_c || !fusable(p, bits, t)) continue;
        const mg_tdesc *d = mgi_node_desc(g, n);
        /* take them while their trees end right below the cursor */
        mg_tensor abs[2];
        int32_t sub[2];
        int n_a = 0, n_ops = 1;
        int32_t cursor = cursor0, first = i;
        /* ext: the inputs with the n_a taken; more: with one more */
        mg_tensor ext[MG_MAX_INPUTS], more[MG_MAX_INPUTS];
        int n_ext = 0, n_more;
        for (int c = 0; c < n_c; c++) {
            if (cursor < 0 || order[cursor] != cand[c] ||
                !absorbable(p, bits, t, cand[c], d))
                break;
            const int32_t sub_ops = tree_ops(w, cursor);
            if (n_ops + sub_ops > MG_FUSE_MAX) break;
            abs[n_a] = cand[c];
            sub[n_a] = cursor;
            if (!chain_ext(p, w, t, abs, sub, n_a + 1, more, &n_more)) break;
            memcpy(ext, more, (size_t)n_more * sizeof *ext);
            n_ext = n_more;
            n_a++;
            n_ops += sub_ops;
            first = tree_start(w, cursor);
            cursor = step_below(w, first);
        }
        if (!n_a) continue; /* the step alone: its own inputs */
        mg_status s = tree_set(w, i, sub, n_a, first, n_ops, ext, n_ext);
        if (s != MG_OK) return s;
        for (int a = 0; a < n_a; a++) {
            const mg_tensor x = abs[a];
            if (bits[x] >> MARK_SHIFT == MARK_ROOT) n_roots--;
            bits[x] = (uint8_t)((bits[x] & ((1 << MARK_SHIFT) - 1)) |
                                MARK_ABSORBED << MARK_SHIFT);
        }
        bits[t] |= MARK_ROOT << MARK_SHIFT;
        n_roots++;
    }
    w->n_roots = n_roots;
    return MG_OK;
}

/* Emit the ops of the tree rooted at t into ins/member from *k on, in
 * evaluation order (inputs first); returns t's index. mark: per tensor
 * id, its mark. An absorbed input is read by t alone, so it is emitted
 * here, once: t's second input is its first again, or not yet emitted. */
static int emit(const fuse_ctx *p, const uint8_t *mark, mg_tensor t,
                const mg_tensor *ext, int n_ext, mg_fused_instr *ins,
                mg_tensor *member, int *k, int base) {
    const mg_node *n = &p->g->nodes[t];
    int8_t src[2] = {0, 0};
    for (int q = 0; q < n->n_in; q++) {
        const mg_tensor x = input_of(p, t, q);
        if (q == 1 && input_of(p, t, 0) == x) {
            src[1] = src[0];
            continue;
        }
        if (mark[x] == MARK_ABSORBED) {
            src[q] = (int8_t)emit(p, mark, x, ext, n_ext, ins, member, k, base);
            continue;
        }
        for (int e = 0; e < n_ext; e++)
            if (ext[e] == x) src[q] = (int8_t)(-1 - e);
    }
    const int at = *k - base;
    ins[*k] = (mg_fused_instr){.op = n->op,
                               .n_in = n->n_in,
                               .src = {src[0], src[1]},
                               .attrs = n->attrs};
    member[(*k)++] = t;
    return at;
}

/* A chain's root and its position in the order, sorted by root. */
typedef struct root_at {
    mg_tensor root;
    int32_t i;
} root_at;

static int compare_root_at(const void *a, const void *b) {
    const mg_tensor x = ((const root_at *)a)->root,
                    y = ((const root_at *)b)->root;
    return (x > y) - (x < y);
}

/* The chains of w's marks into f, sorted by root, each one's ops written
 * where it goes. */
static mg_status fusion_fill(const fuse_ctx *p, const mg_tensor *order,
                             int32_t n_order, const fuse_work *w,
                             mgi_fusion *f) {
    const int32_t n_roots = w->n_roots;
    const uint8_t *mark = f->mark;
    root_at *idx = malloc((size_t)n_roots * sizeof *idx);
    if (!idx) return nomem();
    int32_t c = 0;
    bool sorted = true;
    for (int32_t i = 0; i < n_order; i++) {
        const mg_tensor t = order[i];
        if (mark[t] != MARK_ROOT) continue;
        sorted = sorted && (c == 0 || idx[c - 1].root < t);
        idx[c++] = (root_at){t, i};
    }
    if (!sorted) qsort(idx, (size_t)n_roots, sizeof *idx, compare_root_at);
    int32_t at = 0;
    for (int32_t i = 0; i < n_roots; i++) {
        f->root[i] = idx[i].root;
        f->start[i] = at;
        at += tree_ops(w, idx[i].i);
    }
    f->start[n_roots] = at;
    f->ins = malloc((size_t)(at ? at : 1) * sizeof *f->ins);
    f->member = malloc((size_t)(at ? at : 1) * sizeof *f->member);
    mg_status s = f->ins && f->member ? MG_OK : nomem();
    for (int32_t i = 0; s == MG_OK && i < n_roots; i++) {
        const int32_t *e = slot_at(w, w->tree[idx[i].i]);
        mg_tensor *ext = f->ext + (size_t)i * MG_MAX_INPUTS;
        f->n_ext[i] = (uint8_t)e[2];
        memcpy(ext, e + 3, (size_t)e[2] * sizeof *ext);
        int k = f->start[i];
        emit(p, mark, idx[i].root, ext, e[2], f->ins, f->member, &k, k);
        if (k != f->start[i + 1])
            s = mg_set_error(MG_ERR_INTERNAL,
                             "mg_plan_compile: fusion counted %d ops in a "
                             "chain, emitted %d",
                             (int)(f->start[i + 1] - f->start[i]),
                             (int)(k - f->start[i]));
    }
    free(idx);
    return s;
}

mg_status mgi_plan_fuse(const mg_plan *p_, const mg_tensor *order,
                        int32_t n_order, int32_t *scratch, mgi_fusion **out) {
    *out = NULL;
    const fuse_ctx ctx = {p_->g, p_->remap, p_->role, MG_ROLE_KEPT};
    fuse_work w;
    mgi_fusion *f = NULL;
    mg_status s = fuse_mark(&ctx, p_->n_tensors, order, n_order, scratch, &w);
    if (s != MG_OK || w.n_roots == 0) goto done;
    f = calloc(1, sizeof *f);
    if (!f) {
        s = nomem();
        goto done;
    }
    const size_t n_roots = (size_t)w.n_roots;
    f->n = w.n_roots;
    f->root = malloc(n_roots * sizeof *f->root);
    f->start = malloc((n_roots + 1) * sizeof *f->start);
    f->n_ext = malloc(n_roots * sizeof *f->n_ext);
    f->ext = malloc(n_roots * MG_MAX_INPUTS * sizeof *f->ext);
    if (!f->root || !f->start || !f->n_ext || !f->ext) {
        s = nomem();
        goto done;
    }
    /* the marks alone, as the plan reads them */
    for (int32_t t = 0; t < p_->n_tensors; t++) w.bits[t] >>= MARK_SHIFT;
    f->mark = w.bits;
    w.bits = NULL;
    s = fusion_fill(&ctx, order, n_order, &w, f);
    if (s != MG_OK) goto done;
    *out = f;
    f = NULL;
done:
    mgi_fusion_free(f);
    work_free(&w);
    return s;
}

mg_status mgi_fuse_absorbed(const mg_graph *g, const mg_tensor *remap,
                            const mg_tensor *kept, int n_kept,
                            const mg_tensor *order, int32_t n_order,
                            int32_t *scratch, uint8_t **absorbed) {
    *absorbed = NULL;
    uint8_t *flags = calloc((size_t)(g->n ? g->n : 1), 1);
    if (!flags) return nomem();
    for (int i = 0; i < n_kept; i++) flags[kept[i]] = 1;
    const fuse_ctx ctx = {g, remap, flags, 1};
    fuse_work w;
    mg_status s = fuse_mark(&ctx, g->n, order, n_order, scratch, &w);
    free(flags);
    if (s == MG_OK) {
        for (int32_t t = 0; t < g->n; t++)
            w.bits[t] = w.bits[t] >> MARK_SHIFT == MARK_ABSORBED;
        *absorbed = w.bits;
        w.bits = NULL;
    }
    work_free(&w);
    return s;
}

int32_t mgi_fusion_chain(const mgi_fusion *f, mg_tensor t) {
    int32_t lo = 0, hi = f->n - 1;
    while (lo <= hi) {
        const int32_t mid = lo + (hi - lo) / 2;
        if (f->root[mid] == t) return mid;
        if (f->root[mid] < t) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

bool mgi_fusion_find(const mg_plan *p, mg_tensor t, const mg_fused_instr **ins,
                     const mg_tensor **members, int *n) {
    const mgi_fusion *f = p->fusion;
    const int32_t c = f ? mgi_fusion_chain(f, t) : -1;
    if (c < 0) return false;
    *ins = f->ins + f->start[c];
    if (members) *members = f->member + f->start[c];
    *n = (int)(f->start[c + 1] - f->start[c]);
    return true;
}

void mgi_plan_step_cost(const mg_plan *p, int32_t s, double *flops,
                        double *bytes) {
    const mg_tensor t = p->steps[s];
    const mg_fused_instr *ins;
    const mg_tensor *members;
    int n;
    if (p->step[s].op != MG_STEP_FUSED ||
        !mgi_fusion_find(p, t, &ins, &members, &n)) {
        mgi_graph_op_cost(p->g, t, flops, bytes);
        return;
    }
    double sum = 0, moved = (double)mg_plan_nbytes(p, t);
    for (int i = 0; i < n; i++) {
        double fl = 0;
        mgi_graph_op_cost(p->g, members[i], &fl, NULL);
        sum += fl;
    }
    for (int k = 0; k < p->step[s].n_in; k++)
        moved += (double)mg_plan_nbytes(p, p->step[s].in[k]);
    if (flops) *flops = sum;
    if (bytes) *bytes = moved;
}
