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

/* The tree ending at a step: its first step, its op count and its
 * external inputs. */
typedef struct tree {
    int32_t start;
    uint8_t n_mem, n_ext;
    mg_tensor ext[MG_MAX_INPUTS];
} tree;

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
static unsigned kind_of(const mg_graph *g, mg_tensor t) {
    return g->nodes[t].flags & (MG_NODE_BACKWARD | MG_NODE_RECOMPUTE);
}

/* Whether step t can be an op of a chain: element-wise, float, with
 * inputs of its dtype. */
static bool fusable(const fuse_ctx *p, mg_tensor t) {
    const mg_node *n = &p->g->nodes[t];
    if (!(mgi_op_table[n->op].flags & MG_OPF_ELEMENTWISE) || n->n_in > 2)
        return false;
    const mg_tdesc *d = mgi_node_desc(p->g, n);
    if (d->dtype != MG_F32 && d->dtype != MG_F64) return false;
    for (int k = 0; k < n->n_in; k++)
        if (mgi_graph_desc(p->g, input_of(p, t, k))->dtype != d->dtype)
            return false;
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

/* The external inputs of step t if it absorbs the trees of the n_a
 * tensors abs[] (at positions pos of those tensors): false when more
 * than MG_MAX_INPUTS. */
static bool chain_ext(const fuse_ctx *p, mg_tensor t, const mg_tensor *abs,
                      int n_a, const tree *trees, const int32_t *pos,
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
        const tree *tr = &trees[pos[abs[i]]];
        for (int e = 0; e < tr->n_ext; e++)
            if (!ext_add(ext, n_ext, tr->ext[e])) return false;
    }
    return true;
}

/* Emit the ops of the tree rooted at t into ins/member from *k on, in
 * evaluation order (inputs first); returns t's index. */
static int emit(const fuse_ctx *p, const uint8_t *mark, mg_tensor t,
                const mg_tensor *ext, int n_ext, mg_fused_instr *ins,
                mg_tensor *member, int *k, int base) {
    const mg_node *n = &p->g->nodes[t];
    int8_t src[2] = {0, 0};
    for (int q = 0; q < n->n_in; q++) {
        const mg_tensor x = input_of(p, t, q);
        int found = -1;
        for (int j = base; j < *k && found < 0; j++)
            if (member[j] == x) found = j - base;
        if (found < 0 && mark[x] == MARK_ABSORBED)
            found = emit(p, mark, x, ext, n_ext, ins, member, k, base);
        if (found >= 0) {
            src[q] = (int8_t)found;
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

/* A chain's root and its index in schedule order, sorted by root. */
typedef struct root_at {
    mg_tensor root;
    int32_t c;
} root_at;

static int compare_root_at(const void *a, const void *b) {
    const mg_tensor x = ((const root_at *)a)->root,
                    y = ((const root_at *)b)->root;
    return (x > y) - (x < y);
}

static mg_status nomem(void) {
    return mg_set_error(MG_ERR_NOMEM,
                        "out of memory fusing element-wise chains");
}

/* The marking's scratch and results: the steps in order, each one's
 * position and tree, and mark[] per tensor id. */
typedef struct fuse_work {
    int32_t *pos;
    uint8_t *readers, *mark;
    mg_tensor *steps;
    tree *trees;
    int32_t n_steps, n_roots, n_ins;
} fuse_work;

static void work_free(fuse_work *w) {
    free(w->pos);
    free(w->readers);
    free(w->mark);
    free(w->steps);
    free(w->trees);
}

/* Mark the chains among the computed tensors of order[0..n_order), as
 * mgi_plan_fuse describes them, into w. */
static mg_status fuse_mark(const fuse_ctx *p, int32_t n_tensors,
                           const mg_tensor *order, int32_t n_order,
                           fuse_work *w) {
    const mg_graph *g = p->g;
    const size_t nt = (size_t)(n_tensors ? n_tensors : 1);
    memset(w, 0, sizeof *w);
    w->pos = malloc(nt * sizeof *w->pos);
    w->readers = calloc(nt, 1);
    w->mark = calloc(nt, 1);
    w->steps = malloc((size_t)(n_order ? n_order : 1) * sizeof *w->steps);
    w->trees = malloc((size_t)(n_order ? n_order : 1) * sizeof *w->trees);
    if (!w->pos || !w->readers || !w->mark || !w->steps || !w->trees)
        return nomem();
    int32_t *pos = w->pos;
    uint8_t *readers = w->readers, *mark = w->mark;
    mg_tensor *steps = w->steps;
    tree *trees = w->trees;
    /* the steps, and how many distinct steps read each tensor */
    int32_t n_steps = 0;
    for (int32_t i = 0; i < n_order; i++) {
        const mg_tensor t = order[i];
        if (is_leaf(p, t)) continue;
        pos[t] = n_steps;
        steps[n_steps++] = t;
        const mg_node *n = &g->nodes[t];
        for (int k = 0; k < n->n_in; k++) {
            const mg_tensor x = input_of(p, t, k);
            bool seen = false;
            for (int j = 0; j < k; j++) seen |= input_of(p, t, j) == x;
            if (!seen && readers[x] < 255) readers[x]++;
        }
    }
    int32_t n_roots = 0, n_ins = 0;
    for (int32_t s_ = 0; s_ < n_steps; s_++) {
        const mg_tensor t = steps[s_];
        tree *tr = &trees[s_];
        *tr = (tree){.start = s_, .n_mem = 1, .n_ext = 0};
        if (!fusable(p, t)) continue;
        const mg_node *n = &g->nodes[t];
        const mg_tdesc *d = mgi_node_desc(g, n);
        /* the inputs it may absorb, latest step first */
        mg_tensor cand[2];
        int n_c = 0;
        for (int k = 0; k < n->n_in; k++) {
            const mg_tensor x = input_of(p, t, k);
            if (is_leaf(p, x) || readers[x] != 1 ||
                (p->flags[x] & p->kept_mask) || mgi_hooks_on(g, x) ||
                !fusable(p, x) || kind_of(g, x) != kind_of(g, t) ||
                !mgi_tdesc_same_shape(mgi_graph_desc(g, x), d) ||
                mgi_graph_desc(g, x)->dtype != d->dtype)
                continue;
            if (n_c == 1 && cand[0] == x) continue;
            cand[n_c++] = x;
        }
        if (n_c == 2 && pos[cand[1]] > pos[cand[0]]) {
            const mg_tensor x = cand[0];
            cand[0] = cand[1];
            cand[1] = x;
        }
        /* take them while their trees end right below the cursor */
        mg_tensor abs[2];
        int n_a = 0, n_mem = 1;
        int32_t cursor = s_ - 1;
        mg_tensor ext[MG_MAX_INPUTS];
        int n_ext = 0;
        for (int c = 0; c < n_c; c++) {
            const tree *sub = &trees[pos[cand[c]]];
            if (pos[cand[c]] != cursor || n_mem + sub->n_mem > MG_FUSE_MAX)
                break;
            abs[n_a] = cand[c];
            if (!chain_ext(p, t, abs, n_a + 1, trees, pos, ext, &n_ext)) break;
            n_a++;
            n_mem += sub->n_mem;
            cursor = sub->start - 1;
        }
        if (!chain_ext(p, t, abs, n_a, trees, pos, ext, &n_ext)) {
            /* its own inputs always fit: an op has at most 2 */
            return mg_set_error(MG_ERR_INTERNAL,
                                "mg_plan_compile: fusion lost track of a "
                                "chain's inputs");
        }
        tr->start = cursor + 1;
        tr->n_mem = (uint8_t)n_mem;
        tr->n_ext = (uint8_t)n_ext;
        memcpy(tr->ext, ext, (size_t)n_ext * sizeof *ext);
        for (int i = 0; i < n_a; i++) {
            const mg_tensor x = abs[i];
            if (mark[x] == MARK_ROOT) n_roots--;
            else n_ins++; /* a lone op joins: itself, plus t below */
            mark[x] = MARK_ABSORBED;
        }
        if (n_a) {
            mark[t] = MARK_ROOT;
            n_roots++;
            n_ins++;
        }
    }
    w->n_steps = n_steps;
    w->n_roots = n_roots;
    w->n_ins = n_ins;
    return MG_OK;
}

mg_status mgi_plan_fuse(const mg_plan *p_, const mg_tensor *order,
                        int32_t n_order, mgi_fusion **out) {
    *out = NULL;
    const fuse_ctx ctx = {p_->g, p_->remap, p_->role, MG_ROLE_KEPT};
    const fuse_ctx *p = &ctx;
    fuse_work w;
    mgi_fusion *f = NULL;
    mg_status s = fuse_mark(p, p_->n_tensors, order, n_order, &w);
    int32_t n_roots = w.n_roots, n_ins = w.n_ins, n_steps = w.n_steps;
    uint8_t *mark = w.mark;
    const mg_tensor *steps = w.steps;
    const tree *trees = w.trees;
    const int32_t *pos = w.pos;
    if (s != MG_OK) goto done;
    if (n_roots == 0) goto done;
    /* n_ins counted each absorbed op once and each root once: the total */
    f = calloc(1, sizeof *f);
    if (!f) {
        s = nomem();
        goto done;
    }
    f->root = malloc((size_t)n_roots * sizeof *f->root);
    f->start = malloc(((size_t)n_roots + 1) * sizeof *f->start);
    f->ins = malloc((size_t)n_ins * sizeof *f->ins);
    f->member = malloc((size_t)n_ins * sizeof *f->member);
    f->n_ext = malloc((size_t)n_roots * sizeof *f->n_ext);
    f->ext = malloc((size_t)n_roots * MG_MAX_INPUTS * sizeof *f->ext);
    mg_fused_instr *ins = malloc((size_t)n_ins * sizeof *ins);
    mg_tensor *member = malloc((size_t)n_ins * sizeof *member);
    root_at *idx = malloc((size_t)n_roots * sizeof *idx);
    mg_tensor *roots = malloc((size_t)n_roots * sizeof *roots);
    int32_t *first = malloc((size_t)n_roots * sizeof *first);
    if (!f->root || !f->start || !f->ins || !f->member || !f->n_ext ||
        !f->ext || !ins || !member || !idx || !roots || !first) {
        free(ins), free(member), free(idx), free(roots), free(first);
        s = nomem();
        goto done;
    }
    /* each chain's ops in schedule order of roots, then sorted by root id */
    int k = 0;
    int32_t c = 0;
    for (int32_t s_ = 0; s_ < n_steps; s_++) {
        const mg_tensor t = steps[s_];
        if (mark[t] != MARK_ROOT) continue;
        const tree *tr = &trees[s_];
        roots[c] = t;
        first[c] = k;
        idx[c] = (root_at){t, c};
        emit(p, mark, t, tr->ext, tr->n_ext, ins, member, &k, k);
        c++;
    }
    qsort(idx, (size_t)n_roots, sizeof *idx, compare_root_at);
    int32_t at = 0;
    for (int32_t i = 0; i < n_roots; i++) {
        const int32_t ci = idx[i].c;
        const int32_t len = (ci + 1 < n_roots ? first[ci + 1] : k) - first[ci];
        const tree *tr = &trees[pos[roots[ci]]];
        f->root[i] = roots[ci];
        f->start[i] = at;
        memcpy(f->ins + at, ins + first[ci], (size_t)len * sizeof *ins);
        memcpy(f->member + at, member + first[ci],
               (size_t)len * sizeof *member);
        f->n_ext[i] = tr->n_ext;
        memcpy(f->ext + (size_t)i * MG_MAX_INPUTS, tr->ext,
               (size_t)tr->n_ext * sizeof *tr->ext);
        at += len;
    }
    f->start[n_roots] = at;
    f->n = n_roots;
    f->mark = mark;
    w.mark = NULL;
    free(ins), free(member), free(idx), free(roots), free(first);
    if (at != n_ins) {
        s = mg_set_error(MG_ERR_INTERNAL,
                         "mg_plan_compile: fusion counted %d ops, emitted %d",
                         (int)n_ins, (int)at);
        goto done;
    }
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
                            uint8_t **absorbed) {
    *absorbed = NULL;
    uint8_t *flags = calloc((size_t)(g->n ? g->n : 1), 1);
    if (!flags) return nomem();
    for (int i = 0; i < n_kept; i++) flags[kept[i]] = 1;
    const fuse_ctx ctx = {g, remap, flags, 1};
    fuse_work w;
    mg_status s = fuse_mark(&ctx, g->n, order, n_order, &w);
    free(flags);
    if (s == MG_OK) {
        for (int32_t t = 0; t < g->n; t++)
            w.mark[t] = w.mark[t] == MARK_ABSORBED;
        *absorbed = w.mark;
        w.mark = NULL;
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
