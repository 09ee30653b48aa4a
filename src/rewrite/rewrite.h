/*
 * rewrite.h - internal interface of the rewriter: autodiff, the
 * checkpoint policies that decide what the forward pass keeps, and the
 * memory policy's search.
 */
#ifndef MG_REWRITE_H
#define MG_REWRITE_H

#include "../graph/graph.h"

/* The budget policy's two dynamic programs (policy_budget.c's table over
 * candidate cuts, chain_dp.c's interval table) are most of its time, in
 * loops of double additions and minima. On x86-64 with glibc they are
 * built twice, for AVX2 and for the baseline, and the loader picks one
 * (GNU ifunc): wider vectors, and ceil in one instruction. Their
 * additions, divisions, ceil and minima of doubles are exact or correctly
 * rounded in either build, and there is no multiply-add to fuse, so the
 * schedules do not depend on the machine. */
#if defined(__x86_64__) && defined(__GLIBC__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define MG_DP_CLONES __attribute__((target_clones("avx2", "default")))
#endif
#endif
#ifndef MG_DP_CLONES
#define MG_DP_CLONES
#endif

/* Validate the checkpoints argument of mg_gradients. NULL and
 * MG_CKPT_NONE mean plain backprop. */
mg_status mgi_checkpoints_check(const mg_graph *g, const mg_checkpoints *c);

/* One point of the memory policy's search: segments segment_factor times
 * the balanced sqrt length, boundaries at articulation points when there
 * are enough (or always at topological cuts with force_cuts). */
typedef struct mg_memory_search {
    double segment_factor;
    bool force_cuts;
    /* Policy none's choice instead of the policy's: what the search falls
     * back on when the policy would predict a higher peak (issue 11). */
    bool plain;
    /* Speed policy: NULL, or per forward tensor whether plain backprop's
     * backward pass reads it; then only those expensive outputs are kept,
     * and the cheap consumers of the others (policy_memory.c). Owned by
     * whoever got it from mgi_memory_search_best. */
    bool *bwd_reads;
    /* Memory policy: 0, or keep every forward tensor after the
     * keep_tail-th last checkpoint chosen (1: the last), so that the last
     * segments are not recomputed: the backward pass starts at once on
     * what the forward pass just made, as checkpoint_sequential does
     * with its last segment (policy_memory.c takes it where the peak does
     * not rise). */
    int keep_tail;
} mg_memory_search;

/* A multi-level recomputation plan (Revolve's and Rotor's schedules): the
 * forward tensors are split into segments, contiguous in topological
 * order and numbered in that order; backprop builds their backward ops
 * last segment first. When it reaches segment j, every recomputed copy is
 * dropped except those of segment j's own tensors and of snap[j]'s, and
 * the copies of snap[j] (snap[snap_start[j]] .. snap[snap_start[j+1]-1],
 * in increasing id order) are made: the snapshots, recomputed from the
 * nearest copy or kept tensor before them. A dropped copy is never read
 * again, so the scheduler frees it after its last reader; a tensor can be
 * recomputed once per segment that needs it, from snapshots that are
 * themselves copies. */
typedef struct mg_ml_plan {
    int32_t n_seg;
    int32_t n;           /* entries of seg: the graph size it covers */
    int32_t *seg;        /* per tensor id: its segment, or -1 */
    int32_t *snap_start; /* n_seg + 1 offsets into snap */
    mg_tensor *snap;     /* the snapshots of each segment */
} mg_ml_plan;

void mgi_ml_plan_free(mg_ml_plan *p);

/* A point of MG_CKPT_BUDGET's search: builds under that policy are handed
 * &point.search, and checkpoint.c reads the whole point back. keep_set:
 * per tensor id, what the forward pass keeps (owned by whoever set it);
 * ml: NULL (each tensor recomputed at most once) or a multi-level plan,
 * owned likewise (mgi_budget_search's: malloc'd, freed with
 * mgi_ml_plan_free and free). */
typedef struct mg_budget_point {
    mg_memory_search search;
    bool *keep_set;
    mg_ml_plan *ml;
    /* NULL, or per tensor id: a tensor not kept whose recomputed copy is
     * made once per gradient rule that reads it (directly or through
     * other copies) and released after it, instead of being held from
     * its first reader to its last (Checkmate's "free and make again").
     * Owned as keep_set. Non-NULL (even with none set) also makes the
     * build forget the copies a rule is handed but does not read (see
     * mg_recompute.lazy). */
    bool *remat;
    /* Set by mgi_budget_search: the chosen plan's recomputed flops and
     * exact peak; and, also when nothing fits, the smallest peak any plan
     * it built reached and policy none's. */
    double flops;
    size_t peak, min_peak, peak_none;
    /* NULL, or per tensor id below the graph size before mg_gradients:
     * chosen to be offloaded (mg_checkpoints.offload); malloc'd. */
    bool *offload;
} mg_budget_point;

/* mg_gradients under a given budget point, without the budget search:
 * the forward pass keeps point->keep_set and backprop follows point->ml.
 * For tests of hand-written plans; the graph is left as it was on
 * failure. */
mg_status mgi_gradients_point(mg_graph *g, const mg_tensor *ys, int n_ys,
                              const mg_tensor *xs, int n_xs,
                              const mg_budget_point *point,
                              mg_tensor *grads_out);

/* Append the backward graph with the memory policy at point m, writing the
 * gradients of the xs to result; ctx is the caller's description of the
 * mg_gradients call. On failure g may hold part of the graph. */
typedef mg_status (*mg_memory_build_fn)(mg_graph *g, const void *ctx,
                                        const mg_memory_search *m,
                                        mg_tensor *result);

/* Store in *best the point of the memory policy's search with the lowest
 * predicted peak (policy_memory.c): builds each point with build, plans
 * it, and leaves g as it was. Every automatic policy's choice is compared
 * with policy none's, and none's taken where the policy's would predict a
 * higher peak; the speed policy first tries keeping fewer expensive
 * outputs. n_xs: how many gradients build writes. MG_ERR_NOMEM if a trial
 * ran out of memory. The caller frees best->bwd_reads. */
mg_status mgi_memory_search_best(mg_graph *g, const mg_checkpoints *c, int n_xs,
                                 mg_memory_build_fn build, const void *ctx,
                                 mg_memory_search *best);

/* The budget policy's search (policy_budget.c): store in best->keep_set
 * (malloc'd, the caller frees it) and best->ml (NULL or malloc'd) the
 * checkpoints and multi-level plan with the least
 * recomputed flops whose exact predicted peak fits c->budget_bytes, built
 * with build as mgi_memory_search_best does; g is left as it was. The
 * peak is the budget's measure: the plan of the ys and the n_xs
 * gradients, all bound to caller memory (mg_plan_summary.budget_peak of
 * such a plan). MG_ERR_NOMEM naming the smallest budget that fits if none
 * does. */
mg_status mgi_budget_search(mg_graph *g, const mg_checkpoints *c,
                            const mg_tensor *ys, int n_ys, int n_xs,
                            mg_memory_build_fn build, const void *ctx,
                            mg_budget_point *best);

/* Decide what the forward pass keeps. order: the ancestors of the ys in
 * topological order; forward[t]: t is a computed tensor among them;
 * is_y[t]: t is a y; is_ap[t]: t is an articulation point of the forward
 * tensors' graph (needed by policy memory only; NULL is fine for the
 * others). On return keep[t] says t is never recomputed and chosen[t]
 * that the policy picked it (what mg_graph_checkpoints reports). Policy
 * none keeps everything. */
mg_status mgi_checkpoints_choose(const mg_graph *g, const mg_checkpoints *c,
                                 const mg_memory_search *m,
                                 const mg_tensor *order, int32_t n_order,
                                 const bool *forward, const bool *is_y,
                                 const bool *is_ap, bool *keep, bool *chosen);

/* The compaction pass (compact.c), run by mg_gradients after backprop when
 * mg_checkpoints.compact is set: every kept forward tensor (id < n_fwd,
 * keep[t], not a y or leaf) whose backward readers all have a compact
 * saved form is read through its packs instead. */
mg_status mgi_compact_saved(mg_graph *g, int32_t n_fwd, const bool *keep,
                            const bool *is_y);

/* Recomputed copies, made on demand while backprop runs. */
typedef struct mg_recompute {
    const bool *keep; /* tensors read as they are */
    mg_tensor *copy;  /* per forward tensor: its copy, or MG_NO_TENSOR */
    mg_tensor *stack; /* scratch, room for g->n entries at creation */
    int32_t n;        /* graph size when backprop began */
    /* Multi-level plans only (else ml is NULL): */
    const mg_ml_plan *ml;
    int32_t cur_seg; /* the segment being built, -1 before the first */
    mg_tensor *made; /* forward tensors whose copy is valid, n_made */
    int32_t n_made;
    int32_t *mark; /* per tensor: the segment that made it a snapshot */
    /* NULL, or per tensor: copies made again for each rule that reads
     * them (mg_budget_point.remat) */
    const bool *remat;
    /* Forget the copies a rule is handed but does not read, without a
     * multi-level plan too (budget points with remat marks, even none
     * set): they are made where they are read instead of being held from
     * where the rule was built. */
    bool lazy;
    /* NULL, or per forward tensor: kept in 16 bits (mg_checkpoints.
     * store16). Such a tensor is not kept: its copy is an unpack_bf16 of
     * its pack (pack16[t], made once, MG_NODE_PACK) instead of a
     * recomputation. */
    const bool *store16;
    mg_tensor *pack16;
} mg_recompute;

/* The tensor the backward pass should read for forward tensor t: t itself
 * when it is kept or a leaf, else its copy, made now (with copies of what
 * it needs) if it does not exist yet. MG_NO_TENSOR on failure. */
mg_tensor mgi_recompute_get(mg_graph *g, mg_recompute *r, mg_tensor t);

/* Under a multi-level plan, called before the backward ops of forward
 * tensor v are built: on entering v's segment, drop the copies the plan
 * does not keep valid and make its snapshots. MG_OK without a plan. */
mg_status mgi_recompute_enter(mg_graph *g, mg_recompute *r, mg_tensor v);

/* Under a multi-level plan or r->lazy, after one gradient rule: the
 * copies made for it (ids first_copy .. first_rule - 1) that none of its ops
 * (first_rule
 * ..) reads, directly or through another copy, are forgotten, so a later
 * reader makes its own in its own segment. A rule handed the copy of an
 * output it never reads (an add's) would otherwise leave a chain of copies
 * that the next segment's entry orphans and its reader then makes again. */
void mgi_recompute_forget_unread(mg_graph *g, mg_recompute *r,
                                 mg_tensor first_copy, mg_tensor first_rule);

/* After one gradient rule: forget the copies made for it (ids first_copy
 * .. first_rule - 1) of the tensors r->remat marks, so that the next rule
 * reading one makes it again; the scheduler frees this one after its last
 * reader. Nothing without r->remat. */
void mgi_recompute_release_remat(const mg_graph *g, mg_recompute *r,
                                 mg_tensor first_copy, mg_tensor first_rule);

/* A chain for the dynamic program of Revolve and Rotor (chain_dp.c):
 * states 0..l, step i (1..l) takes state i - 1 to i at cost f[i - 1], a
 * snapshot of state i (1..l-1) takes w[i] >= 1 slots of `slots`. */
typedef struct mg_chain_dp {
    int32_t l;
    const double *f;
    const int32_t *w;
    int32_t slots;
    /* per step (l of them): the slots reversing it takes besides the
     * snapshots held meanwhile; a step reverses only where that many are
     * free. NULL: none. */
    const int32_t *tape;
    /* NULL, or per step (l of them): the slots step i + 1 takes when it
     * is advanced storing all its values, state i + 1 included (Rotor's
     * F_all option); reversing it later then recomputes nothing. >= 1
     * each. NULL: Revolve's options only. */
    const int32_t *all;
} mg_chain_dp;

/* Revolve's count: the fewest forward steps that reverse the chain from
 * state 0 (stored, outside the slots), a taped step not counted. general:
 * use the heterogeneous table even on a homogeneous chain (cubic in l;
 * the homogeneous one is quadratic). */
mg_status mgi_chain_revolve(const mg_chain_dp *c, bool general, double *steps);

/* A multi-level schedule for the rewriter: the forward pass keeps the
 * states kept[i]; step i is reversed (last first) with the snapshots
 * snap[snap_start[i-1]] .. snap[snap_start[i]-1] valid: states i > 0,
 * and, with c->all, -j for step j stored with all its values (each
 * listed after its state j); cost: the steps recomputed after the forward pass,
 * each step's own values once more when it is reversed included. */
typedef struct mg_chain_sched {
    double cost;
    bool *kept;          /* l + 1 */
    int32_t *snap_start; /* l + 1 */
    int32_t *snap;
} mg_chain_sched;

mg_status mgi_chain_schedule(const mg_chain_dp *c, mg_chain_sched *q);
void mgi_chain_sched_free(mg_chain_sched *q);

#endif
