/*
 * split.c - cut a compiled training plan into a forward phase and a
 * backward phase, so that a framework can run the forward now and hand
 * memgrad the ys' seed gradients later (mg_exec_forward, mg_exec_backward).
 *
 * Each phase is an ordinary plan over the same graph, so the executor runs
 * it unchanged. The forward phase holds the training plan's forward steps
 * in their original order, and keeps, besides the forward outputs, every
 * forward tensor a backward step reads (the checkpoints, or under policy
 * none the activations): the saved state. The backward phase holds the
 * rest (gradient and recompute steps), in their original order, and reads
 * the saved tensors as if they were leaves, releasing each after its last
 * backward reader, as the one-call run does. Steps run in the same order
 * with the same inputs as in one call, so the gradients are the same bits.
 *
 * A plan that offloads (offload.c) and whose forward steps all come first
 * is split the same way, with its copies shared by both phases
 * (phase_offload): no copy crosses the boundary (mgi_offload_place), so
 * an offloaded tensor is computed and copied out by the forward phase,
 * which neither keeps nor releases it (the copy out frees its block), and
 * its copy back in the backward phase gives it the block that phase
 * releases after its last reader. The saved state holds its host copy in
 * between (phase.c).
 */
#include "offload.h"
#include "schedule.h"

#include <stdlib.h>
#include <string.h>

static mg_plan *phase_alloc(const mg_plan *p) {
    mg_plan *q = calloc(1, sizeof *q);
    if (!q) return NULL;
    q->g = p->g;
    q->n_tensors = p->n_tensors;
    size_t sz = (size_t)(p->n_tensors ? p->n_tensors : 1);
    q->role = calloc(sz, sizeof *q->role);
    q->release_start = malloc((sz + 1) * sizeof *q->release_start);
    q->release = malloc(sz * sizeof *q->release);
    q->leaves = malloc(sz * sizeof *q->leaves);
    q->kept = malloc(sz * sizeof *q->kept);
    q->saved = malloc(sz * sizeof *q->saved);
    if (!q->role || !q->release_start || !q->release || !q->leaves ||
        !q->kept || !q->saved) {
        mg_plan_free(q);
        return NULL;
    }
    /* p's, not a copy: a saved tensor is a leaf of the backward phase by
     * its role (schedule.h) */
    q->remap = p->remap;
    q->fusion = p->fusion;
    return q;
}

void mgi_phase_unshare(mg_plan *q, const mg_plan *p) {
    q->remap = NULL;
    q->fusion = NULL;
    if (q->steps && (q->steps == p->steps ||
                     q->steps == p->steps + (p->n_steps - q->n_steps))) {
        q->steps = NULL;
        q->step = NULL;
        /* and its offsets, then a stretch of p's too (arena.c) */
        q->out_off = NULL;
        q->work_off = NULL;
    }
}

/* Free a phase that is not (yet) p's. */
static void phase_free(mg_plan *q, const mg_plan *p) {
    if (!q) return;
    mgi_phase_unshare(q, p);
    mg_plan_free(q);
}

static void add_kept(mg_plan *q, mg_tensor t) {
    if (q->role[t] & MG_ROLE_KEPT) return;
    q->role[t] |= MG_ROLE_KEPT;
    q->kept[q->n_kept++] = t;
}

/* Whether saved tensor t is released by the backward phase: not when
 * the training plan keeps it (it stays with the saved state until the
 * caller frees it), nor when it is a view (its block's owner is released). */
static bool saved_released(const mg_plan *p, const mg_tensor *view_of,
                           mg_tensor t) {
    return !(p->role[t] & MG_ROLE_KEPT) && !(view_of && view_of[t] >= 0);
}

/* Release lists of phase q: each of its computed tensors that is not kept
 * goes after its last reader in q, and so does each saved tensor that
 * saved_released says goes. A view (plan_views in schedule.c) is released
 * by its block's owner, after the view's last reader too. view_of: per
 * tensor, the block a view of p reads, else -1; NULL when p has no view. */
static void build_releases(mg_plan *q, const mg_plan *p,
                           const mg_tensor *view_of, const bool *off,
                           int32_t *last, int32_t *fill) {
    for (int32_t t = 0; t < q->n_tensors; t++) last[t] = -1;
    for (int32_t s = 0; s < q->n_steps; s++)
        for (int k = 0; k < q->step[s].n_in; k++) last[q->step[s].in[k]] = s;
    for (int32_t s = 0; view_of && s < q->n_steps; s++) {
        const mg_tensor v = q->steps[s], block = q->step[s].in[0];
        if (q->step[s].view && last[v] > last[block]) last[block] = last[v];
    }
    for (int32_t i = 0; view_of && i < q->n_saved; i++) {
        const mg_tensor v = q->saved[i];
        if (view_of[v] >= 0 && last[v] > last[view_of[v]])
            last[view_of[v]] = last[v];
    }
    memset(q->release_start, 0, ((size_t)q->n_steps + 1) * sizeof(int32_t));
    for (int32_t s = 0; s < q->n_steps; s++) {
        mg_tensor t = q->steps[s];
        if ((q->role[t] & MG_ROLE_KEPT) || q->step[s].view || (off && off[t]))
            continue;
        if (last[t] < 0) last[t] = s;
        q->release_start[last[t] + 1]++;
    }
    for (int32_t i = 0; i < q->n_saved; i++)
        if (saved_released(p, view_of, q->saved[i]))
            q->release_start[last[q->saved[i]] + 1]++;
    for (int32_t s = 0; s < q->n_steps; s++)
        q->release_start[s + 1] += q->release_start[s];
    memcpy(fill, q->release_start, ((size_t)q->n_steps + 1) * sizeof *fill);
    for (int32_t s = 0; s < q->n_steps; s++) {
        mg_tensor t = q->steps[s];
        if ((q->role[t] & MG_ROLE_KEPT) || q->step[s].view || (off && off[t]))
            continue;
        q->release[fill[last[t]]++] = t;
    }
    for (int32_t i = 0; i < q->n_saved; i++)
        if (saved_released(p, view_of, q->saved[i]))
            q->release[fill[last[q->saved[i]]]++] = q->saved[i];
}

/* Whether p keeps a leaf that none of its steps reads (*late), for a
 * plan without backward steps. */
static mg_status has_unread_kept_leaf(const mg_plan *p, bool *late) {
    *late = false;
    uint8_t *read = calloc((size_t)(p->n_tensors ? p->n_tensors : 1), 1);
    if (!read)
        return mg_set_error(MG_ERR_NOMEM, "mg_plan_compile: out of memory for "
                                          "the forward and backward phases");
    for (int32_t i = 0; i < p->n_steps; i++)
        for (int k = 0; k < p->step[i].n_in; k++) read[p->step[i].in[k]] = 1;
    for (int32_t k = 0; k < p->n_kept && !*late; k++)
        *late = (p->role[p->kept[k]] & MG_ROLE_LEAF) && !read[p->kept[k]];
    free(read);
    return MG_OK;
}

/* The phases' step lists: stretches of p's when every forward step comes
 * before every backward one (prefix), else arrays of their own, filled by
 * phase_steps_fill. False when out of memory. */
static bool phase_steps_alloc(const mg_plan *p, mg_plan *f, mg_plan *b,
                              int32_t n_fwd, int32_t n_bwd, bool prefix) {
    if (prefix) {
        f->steps = p->steps;
        f->step = p->step;
        b->steps = p->steps + n_fwd;
        b->step = p->step + n_fwd;
        f->n_steps = n_fwd; /* now, so that mgi_phase_unshare knows them */
        b->n_steps = n_bwd;
        return true;
    }
    f->steps = malloc((size_t)(n_fwd ? n_fwd : 1) * sizeof *f->steps);
    f->step = malloc((size_t)(n_fwd ? n_fwd : 1) * sizeof *f->step);
    b->steps = malloc((size_t)(n_bwd ? n_bwd : 1) * sizeof *b->steps);
    b->step = malloc((size_t)(n_bwd ? n_bwd : 1) * sizeof *b->step);
    return f->steps && f->step && b->steps && b->step;
}

/* Each step of p, in order, computed in its phase (and copied there
 * unless the phase is a stretch of p's). */
static void phase_steps_fill(const mg_plan *p, const bool *bwd, bool prefix,
                             mg_plan *f, mg_plan *b) {
    for (int32_t i = 0; i < p->n_steps; i++) {
        mg_tensor t = p->steps[i];
        mg_plan *q = bwd[t] ? b : f;
        q->role[t] |= MG_ROLE_COMPUTED;
        if (!prefix) {
            q->step[q->n_steps] = p->step[i];
            q->steps[q->n_steps++] = t;
        }
    }
}

/* The leaves each phase's steps read, and saved[t] for each forward tensor
 * a backward step reads. A forward step that reads a backward tensor is
 * the scheduler's error. */
static mg_status phase_reads(const mg_plan *p, const bool *bwd, mg_plan *f,
                             mg_plan *b, bool *saved) {
    for (int32_t i = 0; i < f->n_steps; i++)
        for (int k = 0; k < f->step[i].n_in; k++) {
            mg_tensor in = f->step[i].in[k];
            if (bwd[in]) {
                char la[160];
                return mg_set_error(
                    MG_ERR_INTERNAL,
                    "mg_plan_compile: forward op %s reads a "
                    "backward tensor",
                    mgi_graph_tensor_label(p->g, f->steps[i], la, sizeof la));
            }
            if (p->role[in] & MG_ROLE_LEAF) f->role[in] |= MG_ROLE_LEAF;
        }
    for (int32_t i = 0; i < b->n_steps; i++)
        for (int k = 0; k < b->step[i].n_in; k++) {
            mg_tensor in = b->step[i].in[k];
            if (p->role[in] & MG_ROLE_LEAF) b->role[in] |= MG_ROLE_LEAF;
            else if (!bwd[in]) saved[in] = true;
        }
    return MG_OK;
}

/* The views of p (plan_views in schedule.c): *view_of per tensor, the
 * block a view reads, else -1; left NULL when p has none. A view that the
 * backward phase reads is saved with its block, which the saved state
 * then owns (plan_views leaves no such view of caller memory): saved
 * gets the block too. */
static mg_status phase_views(const mg_plan *p, bool *saved,
                             mg_tensor **view_of) {
    *view_of = NULL;
    int32_t n = 0;
    for (int32_t s = 0; s < p->n_steps; s++) n += p->step[s].view;
    if (n == 0) return MG_OK;
    mg_tensor *v = malloc((size_t)p->n_tensors * sizeof *v);
    if (!v)
        return mg_set_error(MG_ERR_NOMEM, "mg_plan_compile: out of memory for "
                                          "the forward and backward phases");
    for (int32_t t = 0; t < p->n_tensors; t++) v[t] = -1;
    for (int32_t s = 0; s < p->n_steps; s++) {
        if (!p->step[s].view) continue;
        const mg_tensor t = p->steps[s], block = p->step[s].in[0];
        v[t] = block;
        if (saved[t]) saved[block] = true;
    }
    *view_of = v;
    return MG_OK;
}

/* p's kept tensors, each kept by the phase that computes it (a kept leaf
 * by f when f's steps read it, else by b); the saved state kept by f and
 * leaves of b, but offloaded tensors (off, or NULL), which reach b by
 * their copies; then each phase's list of leaves. */
static void phase_kept(const mg_plan *p, const bool *bwd, const bool *saved,
                       const bool *off, mg_plan *f, mg_plan *b) {
    for (int32_t k = 0; k < p->n_kept; k++) {
        mg_tensor t = p->kept[k];
        if (p->role[t] & MG_ROLE_LEAF) {
            /* f's leaves so far are those its steps read */
            mg_plan *q = (f->role[t] & MG_ROLE_LEAF) ? f : b;
            q->role[t] |= MG_ROLE_LEAF;
            add_kept(q, t);
        } else {
            add_kept(!bwd[t] ? f : b, t);
        }
    }
    for (int32_t t = 0; t < p->n_tensors; t++) {
        if (!saved[t]) continue;
        if (!(off && off[t])) {
            add_kept(f, t);
            b->role[t] |= MG_ROLE_LEAF;
        }
        b->saved[b->n_saved++] = t;
    }
    for (int32_t t = 0; t < p->n_tensors; t++) {
        if (f->role[t] & MG_ROLE_LEAF) f->leaves[f->n_leaves++] = t;
        if (b->role[t] & MG_ROLE_LEAF) b->leaves[b->n_leaves++] = t;
    }
}

mg_status mgi_plan_split(mg_plan *p, const bool *bwd, int32_t *last,
                         int32_t *fill) {
    size_t sz = (size_t)(p->n_tensors ? p->n_tensors : 1);
    int32_t n_bwd = 0;
    bool prefix = true; /* every forward step before every backward one */
    for (int32_t i = 0; i < p->n_steps; i++) {
        if (bwd[p->steps[i]]) n_bwd++;
        else if (n_bwd) prefix = false;
    }
    /* A kept leaf that no forward step reads is bound when backward runs:
     * a gradient that is the seed itself (y = f(x) + b: dL/db is dL/dy),
     * which the caller has only then. It goes to the backward phase
     * (phase_kept), and a plan with one is phased even when it has no
     * backward step (y = x + b), so that mg_exec_forward and
     * mg_exec_backward still serve it. */
    if (n_bwd == 0) {
        bool late;
        mg_status s = has_unread_kept_leaf(p, &late);
        if (s != MG_OK || !late) return s;
    }
    const int32_t n_fwd = p->n_steps - n_bwd;
    mg_plan *f = phase_alloc(p), *b = phase_alloc(p);
    bool *saved = calloc(sz, sizeof *saved);
    /* an offloading plan is phased with its copies only when its forward
     * steps come first (the copies' boundary, offload.h); otherwise
     * mg_exec_forward refuses it */
    const bool offloads = p->offload && prefix;
    bool *off = offloads ? calloc(sz, sizeof *off) : NULL;
    mg_tensor *view_of = NULL;
    mg_status s = MG_OK;
    if (!f || !b || !saved || (offloads && !off) ||
        !phase_steps_alloc(p, f, b, n_fwd, n_bwd, prefix)) {
        s = mg_set_error(MG_ERR_NOMEM, "mg_plan_compile: out of memory for "
                                       "the forward and backward phases");
        goto done;
    }
    phase_steps_fill(p, bwd, prefix, f, b);
    s = phase_reads(p, bwd, f, b, saved);
    if (s == MG_OK) s = phase_views(p, saved, &view_of);
    if (s != MG_OK) goto done;
    for (int32_t k = 0; offloads && k < p->offload->n; k++)
        off[p->offload->copy[k].t] = true;
    if (offloads) {
        f->phase_offload = b->phase_offload = p->offload;
        f->phase_base = 0;
        b->phase_base = n_fwd;
    }
    phase_kept(p, bwd, saved, off, f, b);
    build_releases(f, p, view_of, off, last, fill);
    build_releases(b, p, view_of, NULL, last, fill);
    p->phase[0] = f;
    p->phase[1] = b;
    f = b = NULL;
done:
    phase_free(f, p);
    phase_free(b, p);
    free(saved);
    free(off);
    free(view_of);
    return s;
}

/* Peak of pool bytes in use over phase q's steps, starting from base;
 * *end gets what is in use after its last step. With its plan's copies,
 * as the host tier makes them: a prefetch block from its copy back's
 * queueing, a forward block until its copy out's wait. */
static size_t phase_peak(const mg_plan *q, const bool *bound, size_t base,
                         size_t *end) {
    size_t in_use = base, peak = base;
    const mg_offload_plan *o = q->phase_offload;
    for (int32_t s = 0; s < q->n_steps; s++) {
        const int32_t at = s + q->phase_base;
        for (int32_t k = 0; o && k < o->n; k++)
            if (o->copy[k].in_issue == at) in_use += o->copy[k].bytes;
        mg_tensor t = q->steps[s];
        if (!bound[t] && !q->step[s].view)
            in_use += mg_pool_size_class(mg_plan_nbytes(q, t));
        const size_t w = mg_plan_step_work(&q->step[s]);
        size_t work = w ? mg_pool_size_class(w) : 0;
        if (in_use + work > peak) peak = in_use + work;
        for (int32_t r = q->release_start[s]; r < q->release_start[s + 1]; r++)
            in_use -= mg_pool_size_class(mg_plan_nbytes(q, q->release[r]));
        for (int32_t k = 0; o && k < o->n; k++)
            if (o->copy[k].out_free == at) in_use -= o->copy[k].bytes;
    }
    *end = in_use;
    return peak;
}

mg_status mg_plan_phase_peaks(const mg_plan *p, const mg_binding *binds,
                              int n_binds, mg_phase_peaks *out) {
    if (!p || !out)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_plan_phase_peaks: %s is NULL",
                            p ? "out" : "plan");
    memset(out, 0, sizeof *out);
    bool *bound;
    mg_status st =
        mgi_plan_bound(p, binds, n_binds, "mg_plan_phase_peaks", &bound);
    if (st != MG_OK) return st;
    if (!p->phase[0]) {
        free(bound);
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_plan_phase_peaks: the plan has no backward "
                            "steps, so no phases");
    }
    if (p->offload && !p->phase[0]->phase_offload) {
        free(bound);
        return mg_set_error(MG_ERR_UNSUPPORTED,
                            "mg_plan_phase_peaks: the plan offloads and has "
                            "forward steps after backward ones, so it runs "
                            "in one call only (mg_exec_run)");
    }
    size_t end;
    out->forward = phase_peak(p->phase[0], bound, 0, &out->saved);
    out->backward = phase_peak(p->phase[1], bound, out->saved, &end);
    out->pair = out->forward > out->backward ? out->forward : out->backward;
    free(bound);
    return MG_OK;
}
