/*
 * schedule.c - compile the tensors a caller wants into a linear schedule
 * and predict its peak memory exactly.
 *
 * Only the ancestors of the requested tensors are scheduled, in
 * topological order. Each computed buffer is released right after the step
 * that reads it last, unless the caller keeps it (an output, or a tensor
 * retained like PyTorch's retain_grad). The executor follows the same
 * alloc-run-release sequence that mg_plan_predicted_peak simulates, so the
 * pool's measured peak equals the prediction.
 */
#include "schedule.h"
#include "backend/backend.h"
#include "offload.h"

#include <stdlib.h>
#include <string.h>

static mg_status check_list(const mg_graph *g, const mg_tensor *ts, int n,
                            const char *what) {
    if (n < 0 || (n > 0 && !ts))
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_plan_compile: %d %s with a %s list", n, what,
                            ts ? "non-NULL" : "NULL");
    for (int i = 0; i < n; i++) {
        mg_status s = mgi_graph_check_id(g, ts[i], "mg_plan_compile");
        if (s != MG_OK) return s;
    }
    return MG_OK;
}

void mg_plan_free(mg_plan *p) {
    if (!p) return;
    for (int i = 0; i < 2; i++)
        if (p->phase[i]) mgi_phase_unshare(p->phase[i], p);
    free(p->role);
    free(p->steps);
    free(p->step);
    free(p->release_start);
    free(p->release);
    free(p->leaves);
    free(p->kept);
    free(p->remap);
    free(p->saved);
    free(p->out_off);
    free(p->work_off);
    mgi_offload_free(p->offload);
    mgi_fusion_free(p->fusion);
    mg_plan_free(p->phase[0]);
    mg_plan_free(p->phase[1]);
    free(p);
}

static mg_status plan_alloc(mg_plan *p, int32_t n, int n_kept) {
    size_t sz = (size_t)(n ? n : 1);
    p->role = calloc(sz, sizeof *p->role);
    p->steps = malloc(sz * sizeof *p->steps);
    p->step = malloc(sz * sizeof *p->step);
    p->release_start = malloc((sz + 1) * sizeof *p->release_start);
    p->release = malloc(sz * sizeof *p->release);
    p->leaves = malloc(sz * sizeof *p->leaves);
    p->kept = malloc((size_t)(n_kept ? n_kept : 1) * sizeof *p->kept);
    if (!p->role || !p->steps || !p->step || !p->release_start || !p->release ||
        !p->leaves || !p->kept)
        return mg_set_error(MG_ERR_NOMEM,
                            "mg_plan_compile: out of memory for "
                            "a plan over %d tensors",
                            (int)n);
    return MG_OK;
}

static void plan_add_kept(mg_plan *p, const mg_tensor *ts, int n) {
    for (int i = 0; i < n; i++) {
        if (p->role[ts[i]] & MG_ROLE_KEPT) continue;
        p->role[ts[i]] |= MG_ROLE_KEPT;
        p->kept[p->n_kept++] = ts[i];
    }
}

/* The workspace step t borrows: what its op's rule asks, or more where
 * some scratch only a backend can size (oneDNN's scratchpad): the plan
 * lends the most any backend of this build asks, so the peak it predicts
 * is the one the executor reaches. Then, after it, what the plan's
 * device's row lends beyond its kernels' need (plan_extra: cuBLAS's room
 * on CUDA), for that device alone; r is that row, or NULL. */
static size_t step_workspace(const mg_graph *g, mg_tensor t,
                             const mg_backend_reg *r) {
    const mg_node *n = &g->nodes[t];
    size_t work = mgi_graph_op_workspace(g, t);
    const bool ask = mgi_backends_plan_workspace_op(n->op);
    if (!ask && !r) return work;
    mg_kargs a = {.op = n->op,
                  .attrs = n->attrs,
                  .n_in = n->n_in,
                  .out = {NULL, *mgi_node_desc(g, n)}};
    for (int k = 0; k < n->n_in; k++)
        a.in[k] = (mg_kbuf){NULL, *mgi_graph_desc(g, n->in[k])};
    if (ask) {
        size_t backend = mgi_backends_plan_workspace(&a);
        if (backend > work) work = backend;
    }
    const size_t extra = r ? r->plan_extra(&a) : 0;
    return extra ? mgi_plan_extra_offset(work) + extra : work;
}

/* The row whose plan_extra a plan for dev asks, or NULL. */
static const mg_backend_reg *extra_row(mg_device dev) {
    const mg_backend_reg *r = mgi_backend_find(dev);
    return r && r->plan_extra ? r : NULL;
}

/* The executor's copy of step t into *r; extra as for step_workspace.
 * next_chain: the chain after the last one met, which is most often the
 * next one (chains are sorted by root, and orders mostly by id). */
static mg_status step_record(const mg_plan *p, mg_tensor t,
                             const mg_backend_reg *extra, int32_t *next_chain,
                             mg_plan_step *r) {
    const mg_node *n = &p->g->nodes[t];
    if (p->fusion && p->fusion->mark[t] == 2) {
        /* a fused chain (fuse.c): its external inputs, no workspace */
        const mgi_fusion *f = p->fusion;
        const int32_t c = *next_chain < f->n && f->root[*next_chain] == t
                              ? *next_chain
                              : mgi_fusion_chain(f, t);
        *next_chain = c + 1;
        *r = (mg_plan_step){.op = MG_STEP_FUSED, .n_in = f->n_ext[c]};
        memcpy(r->in, f->ext + (size_t)c * MG_MAX_INPUTS,
               (size_t)f->n_ext[c] * sizeof *r->in);
        return MG_OK;
    }
    const size_t work = step_workspace(p->g, t, extra);
    const size_t units =
        work / MG_STEP_WORK_UNIT + (work % MG_STEP_WORK_UNIT != 0);
    if (units > UINT32_MAX) {
        char label[160];
        return mg_set_error(
            MG_ERR_INVALID_ARG,
            "mg_plan_compile: %s needs %zu bytes of "
            "workspace, more than a plan step holds",
            mgi_graph_tensor_label(p->g, t, label, sizeof label), work);
    }
    *r = (mg_plan_step){
        .work_units = (uint32_t)units, .op = n->op, .n_in = n->n_in};
    for (int k = 0; k < n->n_in; k++) r->in[k] = mg_plan_input(p, t, k);
    return MG_OK;
}

/* Which steps are views (mg_plan_step.view; issue 46). A step whose node
 * may be one (mgi_node_viewable: a reshape) becomes a view of its input's
 * block, or of the block its input is itself a view of, unless
 * - the plan keeps it (an output, or retained): the caller is handed a
 *   block of its own, which it may hold past the run and write into;
 * - it is a forward tensor that a backward step reads, and the block is
 *   caller memory (a leaf, or an output, which the caller may bind): a
 *   forward phase's saved state would hold the caller's memory, which the
 *   caller may change or free before the backward phase (memgrad.h asks
 *   only that bound forward outputs that backward reads stay unchanged).
 * mgi_graph_peak applies the same rule. cand: the n_cand steps that may
 * be views, in order; last_read: per tensor its last reader's step, read
 * through the steps' inputs as recorded. A view's block then lives until
 * the view's last reader (counted once, as the block's, and released by
 * its owner), and the view's own entry holds -2 - its block. interleaved:
 * some forward step comes after a backward one, so a forward tensor's
 * last reader does not tell whether a backward step reads it. Passes
 * over the candidates only, which kept compiling within issue 32's
 * instruction guard (scripts/icount.sh). */
static mg_status plan_views(mg_plan *p, const bool *bwd, const int32_t *cand,
                            int32_t n_cand, bool interleaved,
                            int32_t *last_read) {
    uint8_t *crossed = NULL; /* per tensor, for an interleaved schedule */
    if (interleaved) {
        crossed = calloc((size_t)p->n_tensors, 1);
        if (!crossed)
            return mg_set_error(MG_ERR_NOMEM, "mg_plan_compile: out of memory");
        for (int32_t s = 0; s < p->n_steps; s++)
            for (int k = 0; bwd[p->steps[s]] && k < p->step[s].n_in; k++)
                crossed[p->step[s].in[k]] = !bwd[p->step[s].in[k]];
    }
    for (int32_t c = 0; c < n_cand; c++) {
        const int32_t s = cand[c];
        const mg_tensor t = p->steps[s], in = p->step[s].in[0];
        if (p->role[t] & MG_ROLE_KEPT) continue;
        const mg_tensor block = last_read[in] <= -2 ? -2 - last_read[in] : in;
        const bool read_back =
            !bwd[t] &&
            (crossed ? crossed[t] != 0
                     : last_read[t] >= 0 && bwd[p->steps[last_read[t]]]);
        if (read_back &&
            (mg_plan_leaf(p, block) || (p->role[block] & MG_ROLE_KEPT)))
            continue;
        p->step[s].view = 1;
        p->step[s].in[0] = block;
        if (last_read[t] > last_read[block]) last_read[block] = last_read[t];
        last_read[t] = -2 - block;
    }
    free(crossed);
    return MG_OK;
}

/* Fill steps, leaves and release lists from a topological order, and
 * bwd (for mgi_plan_split) for the tensors in it. */
static mg_status plan_build(mg_plan *p, const mg_tensor *order, int32_t n_order,
                            int32_t *last_read, bool *bwd, bool views) {
    const mg_backend_reg *extra = extra_row(p->device);
    int32_t *cand = NULL, n_cand = 0; /* steps that may be views */
    int32_t next_chain = 0;
    bool back = false, interleaved = false;
    for (int32_t k = 0; k < n_order; k++) {
        mg_tensor t = order[k];
        bwd[t] = (p->g->nodes[t].flags &
                  (MG_NODE_BACKWARD | MG_NODE_RECOMPUTE)) != 0;
        if (p->fusion && p->fusion->mark[t] == 1) { /* in a fused step */
            p->role[t] |= MG_ROLE_ABSORBED;
            continue;
        }
        if (mg_plan_leaf(p, t)) {
            p->role[t] |= MG_ROLE_LEAF;
            p->leaves[p->n_leaves++] = t;
        } else {
            p->role[t] |= MG_ROLE_COMPUTED;
            mg_status s =
                step_record(p, t, extra, &next_chain, &p->step[p->n_steps]);
            const bool viewable = views && mgi_node_viewable(p->g, t);
            if (s == MG_OK && viewable && !cand &&
                !(cand = malloc((size_t)n_order * sizeof *cand)))
                s = mg_set_error(MG_ERR_NOMEM,
                                 "mg_plan_compile: out of memory");
            if (s != MG_OK) {
                free(cand);
                return s;
            }
            if (cand && viewable) cand[n_cand++] = p->n_steps;
            interleaved = interleaved || (back && !bwd[t]);
            back = back || bwd[t];
            p->steps[p->n_steps++] = t;
        }
    }
    for (int32_t i = 0; i < p->n_tensors; i++) last_read[i] = -1;
    for (int32_t s = 0; s < p->n_steps; s++)
        for (int k = 0; k < p->step[s].n_in; k++)
            last_read[p->step[s].in[k]] = s;
    mg_status st =
        n_cand ? plan_views(p, bwd, cand, n_cand, interleaved, last_read)
               : MG_OK;
    free(cand);
    if (st != MG_OK) return st;
    /* Bucket releases by step: count, prefix-sum, then place. */
    memset(p->release_start, 0, ((size_t)p->n_steps + 1) * sizeof(int32_t));
    for (int32_t s = 0; s < p->n_steps; s++) {
        mg_tensor t = p->steps[s];
        if ((p->role[t] & MG_ROLE_KEPT) || p->step[s].view) continue;
        if (last_read[t] < 0) /* read by no one: nothing else needs it */
            last_read[t] = s;
        p->release_start[last_read[t] + 1]++;
    }
    for (int32_t s = 0; s < p->n_steps; s++)
        p->release_start[s + 1] += p->release_start[s];
    int32_t *fill = malloc(((size_t)p->n_steps + 1) * sizeof *fill);
    if (!fill)
        return mg_set_error(MG_ERR_NOMEM, "mg_plan_compile: out of memory");
    memcpy(fill, p->release_start, ((size_t)p->n_steps + 1) * sizeof *fill);
    for (int32_t s = 0; s < p->n_steps; s++) {
        mg_tensor t = p->steps[s];
        if ((p->role[t] & MG_ROLE_KEPT) || p->step[s].view) continue;
        p->release[fill[last_read[t]]++] = t;
    }
    free(fill);
    return MG_OK;
}

static mg_status check_no_grad(const mg_plan *p) {
    for (int32_t s = 0; s < p->n_steps; s++)
        if (p->g->nodes[p->steps[s]].flags & MG_NODE_BACKWARD) {
            char label[160];
            return mg_set_error(
                MG_ERR_INVALID_ARG,
                "mg_plan_compile: no_grad plan needs backward op %s",
                mgi_graph_tensor_label(p->g, p->steps[s], label, sizeof label));
        }
    return MG_OK;
}

/* mg_plan_compile, with views (plan_views) or with every reshape a copy.
 * A plan that offloads has no views: an offloaded tensor's arena block is
 * freed once its copy-out completes and a prefetch block takes its place
 * (offload.c), so it cannot also be the block a view reads; and the
 * offload pricer (offload_price.c) prices copies on such a plan. */
static mg_status plan_compile(const mg_graph *g, const mg_tensor *outputs,
                              int n_outputs, const mg_plan_options *opts,
                              bool views, mg_plan **out);

mg_status mg_plan_compile(const mg_graph *g, const mg_tensor *outputs,
                          int n_outputs, const mg_plan_options *opts,
                          mg_plan **out) {
    return plan_compile(g, outputs, n_outputs, opts,
                        !(opts && opts->n_offload > 0), out);
}

mg_status mgi_plan_compile_copies(const mg_graph *g, const mg_tensor *outputs,
                                  int n_outputs, mg_plan **out) {
    return plan_compile(g, outputs, n_outputs, NULL, false, out);
}

static mg_status plan_compile(const mg_graph *g, const mg_tensor *outputs,
                              int n_outputs, const mg_plan_options *opts,
                              bool views, mg_plan **out) {
    if (!out)
        return mg_set_error(MG_ERR_INVALID_ARG, "mg_plan_compile: out is NULL");
    *out = NULL;
    if (!g)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_plan_compile: graph is NULL");
    if (n_outputs < 1)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_plan_compile: needs at least one output");
    mg_status s = check_list(g, outputs, n_outputs, "outputs");
    const mg_tensor *retain = opts ? opts->retain : NULL;
    int n_retain = opts ? opts->n_retain : 0;
    if (s == MG_OK) s = check_list(g, retain, n_retain, "retained tensors");
    if (s != MG_OK) return s;
    if (opts && opts->device != MG_DEVICE_CPU && opts->device != MG_DEVICE_CUDA)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_plan_compile: unknown device %d",
                            (int)opts->device);

    mg_plan *p = calloc(1, sizeof *p);
    if (!p) return mg_set_error(MG_ERR_NOMEM, "mg_plan_compile: out of memory");
    p->g = g;
    p->n_tensors = g->n;
    p->budget_bytes = opts ? opts->budget_bytes : 0;
    p->device = opts ? opts->device : MG_DEVICE_CPU;
    size_t sz = (size_t)(g->n ? g->n : 1);
    bool *needed = calloc(sz, sizeof *needed);
    /* one more than the tensors: order and last_read are the later
     * passes' scratch too */
    mg_tensor *order = malloc((sz + 1) * sizeof *order);
    int32_t *last_read = malloc((sz + 1) * sizeof *last_read);
    /* the outputs then the retained: one list of roots */
    mg_tensor *roots = malloc((size_t)(n_outputs + n_retain) * sizeof *roots);
    int32_t n_order = 0;
    s = plan_alloc(p, g->n, n_outputs + n_retain);
    if (s == MG_OK && (!needed || !order || !last_read || !roots))
        s = mg_set_error(MG_ERR_NOMEM, "mg_plan_compile: out of memory");
    if (s == MG_OK) {
        /* the identity needs no array: 12 MB to write for a 10^6-op plan
         * (issue 32) */
        if (opts && opts->without_recompute) {
            if (!(p->remap = malloc(sz * sizeof *p->remap)))
                s = mg_set_error(MG_ERR_NOMEM,
                                 "mg_plan_compile: out of memory");
            for (int32_t t = 0; s == MG_OK && t < g->n; t++)
                p->remap[t] = (g->nodes[t].flags & MG_NODE_RECOMPUTE)
                                  ? g->nodes[t].orig
                                  : t;
        }
    }
    if (s == MG_OK) {
        memcpy(roots, outputs, (size_t)n_outputs * sizeof *roots);
        if (n_retain)
            memcpy(roots + n_outputs, retain, (size_t)n_retain * sizeof *roots);
        /* one backward sweep where creation order is topological (the
         * marks and order of a search and igraph's sort otherwise) */
        s = mgi_graph_ancestors_order(g, roots, n_outputs + n_retain, p->remap,
                                      needed, order, &n_order,
                                      "mg_plan_compile");
    }
    if (s == MG_OK) {
        plan_add_kept(p, outputs, n_outputs);
        plan_add_kept(p, retain, n_retain);
        /* chains of element-wise ops, where the device's backend runs
         * them fused (fuse.c) */
        const mg_backend_reg *reg = mgi_backend_find(p->device);
        p->fuses = !(opts && opts->no_fusion) && reg && reg->runs_fused;
        /* last_read is scratch until plan_build */
        if (p->fuses)
            s = mgi_plan_fuse(p, order, n_order, last_read, &p->fusion);
    }
    if (s == MG_OK) {
        /* needed is done with: it holds bwd now */
        s = plan_build(p, order, n_order, last_read, needed, views);
        if (p->fusion) {
            free(p->fusion->mark);
            p->fusion->mark = NULL;
        }
    }
    if (s == MG_OK) s = mgi_offload_plan(p, opts, last_read);
    if (s == MG_OK && opts && opts->no_grad) s = check_no_grad(p);
    if (s == MG_OK) s = mgi_plan_split(p, needed, last_read, order);
    if (s == MG_OK) s = mgi_plan_lay_out(p, last_read);
    if (s == MG_OK && p->offload) s = mgi_offload_lay_out(p);
    /* phases that share p's offsets (arena.c) share the arena the
     * prefetch blocks made */
    for (int k = 0; s == MG_OK && p->offload && k < 2; k++)
        if (p->phase[k] && p->phase[k]->phase_offload) {
            p->phase[k]->arena_bytes = p->arena_bytes;
            p->phase[k]->arena_live_peak = p->arena_live_peak;
        }
    free(needed);
    free(order);
    free(last_read);
    free(roots);
    if (s != MG_OK) {
        mg_plan_free(p);
        return s;
    }
    *out = p;
    return MG_OK;
}

int mg_plan_num_steps(const mg_plan *p) { return p ? p->n_steps : 0; }

size_t mg_plan_predicted_peak(const mg_plan *p, const mg_binding *binds,
                              int n_binds) {
    size_t peak = 0;
    if (!p) return 0;
    mgi_plan_peak(p, binds, n_binds, "mg_plan_predicted_peak", &peak);
    return peak;
}

mg_status mgi_plan_binds_check(const mg_plan *p, const mg_binding *binds,
                               int n_binds, const char *what) {
    if (n_binds < 0 || (n_binds > 0 && !binds))
        return mg_set_error(MG_ERR_INVALID_ARG, "%s: %d bindings%s", what,
                            n_binds, n_binds < 0 ? "" : " with a NULL list");
    for (int i = 0; i < n_binds; i++)
        if (binds[i].tensor < 0 || binds[i].tensor >= p->n_tensors)
            return mg_set_error(MG_ERR_UNKNOWN_ID,
                                "%s: binding %d names tensor id %d, which the "
                                "plan does not know",
                                what, i, (int)binds[i].tensor);
    return MG_OK;
}

mg_status mgi_plan_bound(const mg_plan *p, const mg_binding *binds, int n_binds,
                         const char *what, bool **bound_out) {
    *bound_out = NULL;
    mg_status s = mgi_plan_binds_check(p, binds, n_binds, what);
    if (s != MG_OK) return s;
    bool *bound = calloc((size_t)(p->n_tensors ? p->n_tensors : 1), 1);
    if (!bound) return mg_set_error(MG_ERR_NOMEM, "%s: out of memory", what);
    for (int i = 0; i < n_binds; i++)
        if (p->role[binds[i].tensor] & MG_ROLE_KEPT)
            bound[binds[i].tensor] = true;
    *bound_out = bound;
    return MG_OK;
}

mg_status mgi_plan_peak(const mg_plan *p, const mg_binding *binds, int n_binds,
                        const char *what, size_t *peak_out) {
    *peak_out = 0;
    /* Caller-bound outputs never enter the pool. */
    bool *bound;
    mg_status st = mgi_plan_bound(p, binds, n_binds, what, &bound);
    if (st != MG_OK) return st;
    size_t in_use = 0, peak = 0;
    for (int32_t s = 0; !p->offload && s < p->n_steps; s++) {
        mg_tensor t = p->steps[s];
        if (!bound[t] && !p->step[s].view)
            in_use += mg_pool_size_class(mg_plan_nbytes(p, t));
        /* the workspace is lent after the output and returned at once */
        const size_t w = mg_plan_step_work(&p->step[s]);
        size_t work = w ? mg_pool_size_class(w) : 0;
        if (in_use + work > peak) peak = in_use + work;
        for (int32_t r = p->release_start[s]; r < p->release_start[s + 1]; r++)
            in_use -= mg_pool_size_class(mg_plan_nbytes(p, p->release[r]));
    }
    if (p->offload) peak = mgi_offload_peak(p, bound);
    free(bound);
    *peak_out = peak;
    return MG_OK;
}

void mgi_peak_scratch_free(mg_peak_scratch *sc) {
    free(sc->needed);
    free(sc->order);
    free(sc->steps);
    free(sc->last);
    free(sc->bytes);
    free(sc->work);
    free(sc->freed);
    free(sc->remap);
    free(sc->cand);
    memset(sc, 0, sizeof *sc);
}

/* Grow every array of the scratch to n elements; on failure the arrays
 * that did grow are kept, to be freed with the rest. */
#define SCRATCH_GROW(field)                                                    \
    do {                                                                       \
        void *p_ = realloc(sc->field, (size_t)n * sizeof *sc->field);          \
        if (p_) sc->field = p_;                                                \
        else ok = false;                                                       \
    } while (0)

static mg_status scratch_reserve(mg_peak_scratch *sc, int32_t n,
                                 const char *what) {
    if (n <= sc->cap) return MG_OK;
    bool ok = true;
    SCRATCH_GROW(needed);
    SCRATCH_GROW(order);
    SCRATCH_GROW(steps);
    SCRATCH_GROW(last);
    SCRATCH_GROW(bytes);
    SCRATCH_GROW(work);
    SCRATCH_GROW(freed);
    SCRATCH_GROW(remap);
    SCRATCH_GROW(cand);
    if (!ok) return mg_set_error(MG_ERR_NOMEM, "%s: out of memory", what);
    sc->cap = n;
    return MG_OK;
}

/* plan_views' rule on sc's schedule of n steps, after the outputs' last
 * readers are set to kept or bound: each view's bytes to 0, its block's
 * last reader extended to the view's, and the view's own entry -2 - its
 * block. cand: the n_cand steps that may be views; interleaved as for
 * plan_views. */
static mg_status graph_views(const mg_graph *g, const mg_tensor *remap,
                             mg_peak_scratch *sc, int32_t n_cand,
                             bool interleaved, int32_t kept, int32_t bound,
                             const char *what) {
    const unsigned back = MG_NODE_BACKWARD | MG_NODE_RECOMPUTE;
    uint8_t *crossed = NULL; /* per tensor, for an interleaved schedule */
    if (interleaved) {
        if (!(crossed = calloc((size_t)g->n, 1)))
            return mg_set_error(MG_ERR_NOMEM, "%s: out of memory", what);
        for (int32_t k = 0; k < sc->n_steps; k++) {
            const mg_node *nd = &g->nodes[sc->steps[k]];
            for (int i = 0; (nd->flags & back) && i < nd->n_in; i++) {
                const mg_tensor in = remap ? remap[nd->in[i]] : nd->in[i];
                crossed[in] = !(g->nodes[in].flags & back);
            }
        }
    }
    for (int32_t c = 0; c < n_cand; c++) {
        const int32_t k = sc->cand[c];
        const mg_tensor t = sc->steps[k];
        const int32_t last = sc->last[t];
        if (last == kept || last == bound) continue; /* an output */
        const mg_tensor in0 = g->nodes[t].in[0];
        const mg_tensor in = remap ? remap[in0] : in0;
        const mg_tensor block = sc->last[in] <= -2 ? -2 - sc->last[in] : in;
        const bool read_back =
            !(g->nodes[t].flags & back) &&
            (crossed ? crossed[t] != 0
                     : last >= 0 && (g->nodes[sc->steps[last]].flags & back));
        if (read_back &&
            ((mgi_op_table[g->nodes[block].op].flags & MG_OPF_LEAF) ||
             sc->last[block] == kept || sc->last[block] == bound))
            continue;
        sc->bytes[k] = 0;
        if (last > sc->last[block]) sc->last[block] = last;
        sc->last[t] = -2 - block;
    }
    free(crossed);
    return MG_OK;
}

/* As plan_build and mgi_plan_peak: a computed tensor is freed after its
 * last reader, or its own step when none reads it; an output is never
 * freed, and a bound one never enters the pool. One pass over the nodes
 * gathers what the count needs into arrays per step, and the count runs
 * on those: the nodes are large, and reading them once is most of the
 * cost. */
mg_status mgi_graph_peak(const mg_graph *g, const mg_peak_query *q,
                         mg_peak_scratch *sc, const char *what,
                         size_t *peak_out) {
    *peak_out = 0;
    if (!q->all_bound && (q->n_binds < 0 || (q->n_binds > 0 && !q->binds)))
        return mg_set_error(MG_ERR_INVALID_ARG, "%s: %d bindings%s", what,
                            q->n_binds,
                            q->n_binds < 0 ? "" : " with a NULL list");
    mg_status s = check_list(g, q->outputs, q->n_outputs, "outputs");
    if (s == MG_OK) s = scratch_reserve(sc, g->n ? g->n : 1, what);
    if (s != MG_OK) return s;
    /* as mg_plan_compile's remap */
    const mg_tensor *remap = NULL;
    if (q->without_recompute) {
        for (int32_t t = 0; t < g->n; t++)
            sc->remap[t] =
                (g->nodes[t].flags & MG_NODE_RECOMPUTE) ? g->nodes[t].orig : t;
        remap = sc->remap;
    }
    memset(sc->needed, 0, (size_t)g->n * sizeof *sc->needed);
    s = mgi_graph_ancestors_order(g, q->outputs, q->n_outputs, remap,
                                  sc->needed, sc->order, &sc->n_order, what);
    if (s != MG_OK) return s;
    /* as mgi_plan_fuse: an absorbed op's inputs are read by its chain's
     * step, the next one that is not absorbed */
    uint8_t *absorbed = NULL;
    if (q->fuse) {
        s = mgi_fuse_absorbed(g, remap, q->outputs, q->n_outputs, sc->order,
                              sc->n_order, sc->last, &absorbed);
        if (s != MG_OK) return s;
    }
    int32_t n = 0, n_cand = 0; /* steps, and those that may be views */
    bool back = false, interleaved = false;
    for (int32_t k = 0; k < sc->n_order; k++) {
        const mg_tensor t = sc->order[k];
        const mg_node *nd = &g->nodes[t];
        sc->last[t] = -1;
        if (mgi_op_table[nd->op].flags & MG_OPF_LEAF) continue;
        if (absorbed && absorbed[t]) {
            for (int i = 0; i < nd->n_in; i++)
                sc->last[remap ? remap[nd->in[i]] : nd->in[i]] = n;
            continue;
        }
        for (int i = 0; i < nd->n_in; i++)
            sc->last[remap ? remap[nd->in[i]] : nd->in[i]] = n;
        if (mgi_node_viewable(g, t)) sc->cand[n_cand++] = n;
        const bool b = nd->flags & (MG_NODE_BACKWARD | MG_NODE_RECOMPUTE);
        interleaved = interleaved || (back && !b);
        back = back || b;
        const size_t work = step_workspace(g, t, NULL);
        sc->steps[n] = t;
        sc->bytes[n] = mg_pool_size_class(g->descs.nbytes[nd->desc]);
        sc->work[n] = work ? mg_pool_size_class(work) : 0;
        sc->freed[n++] = 0;
    }
    sc->n_steps = n;
    free(absorbed);
    /* outputs: kept in the pool, or bound to caller memory */
    const int32_t KEPT = INT32_MAX, BOUND = INT32_MAX - 1;
    for (int i = 0; i < q->n_outputs; i++)
        sc->last[q->outputs[i]] = q->all_bound ? BOUND : KEPT;
    for (int i = 0; !q->all_bound && i < q->n_binds; i++) {
        const mg_tensor t = q->binds[i].tensor;
        if (t >= 0 && t < g->n && sc->needed[t] && sc->last[t] == KEPT)
            sc->last[t] = BOUND;
    }
    if (n_cand)
        s = graph_views(g, remap, sc, n_cand, interleaved, KEPT, BOUND, what);
    if (s != MG_OK) return s;
    size_t in_use = 0, peak = 0;
    for (int32_t k = 0; k < n; k++) {
        const int32_t last = sc->last[sc->steps[k]];
        if (last != BOUND) in_use += sc->bytes[k];
        if (last != BOUND && last != KEPT)
            sc->freed[last < 0 ? k : last] += sc->bytes[k];
        /* the workspace is lent after the output and returned at once */
        if (in_use + sc->work[k] > peak) peak = in_use + sc->work[k];
        in_use -= sc->freed[k];
    }
    *peak_out = peak;
    return MG_OK;
}

mg_status mg_plan_dump(const mg_plan *p, FILE *out) {
    if (!p || !out)
        return mg_set_error(MG_ERR_INVALID_ARG, "mg_plan_dump: %s is NULL",
                            p ? "out" : "plan");
    char label[160];
    size_t peak;
    mg_status st = mgi_plan_peak(p, NULL, 0, "mg_plan_dump", &peak);
    if (st != MG_OK) return st;
    fprintf(out,
            "plan: %d steps, %d leaves, %d kept, predicted peak %zu "
            "bytes\n",
            (int)p->n_steps, (int)p->n_leaves, (int)p->n_kept, peak);
    for (int32_t s = 0; s < p->n_steps; s++) {
        fprintf(out, "%5d  %s", (int)s,
                mgi_graph_tensor_label(p->g, p->steps[s], label, sizeof label));
        if (p->step[s].view)
            fprintf(out, "  view of %%%d", (int)p->step[s].in[0]);
        /* a fused chain: its ops in the order it runs them */
        const mg_fused_instr *chain;
        int n_chain;
        if (p->step[s].op == MG_STEP_FUSED &&
            mgi_fusion_find(p, p->steps[s], &chain, NULL, &n_chain)) {
            fprintf(out, "  fused");
            for (int k = 0; k < n_chain; k++)
                fprintf(out, " %s", mgi_op_str(chain[k].op));
        }
        if (p->release_start[s] < p->release_start[s + 1]) {
            fprintf(out, "  release");
            for (int32_t r = p->release_start[s]; r < p->release_start[s + 1];
                 r++)
                fprintf(out, " %%%d", (int)p->release[r]);
        }
        fputc('\n', out);
    }
    mgi_offload_dump(p, out);
    return MG_OK;
}
