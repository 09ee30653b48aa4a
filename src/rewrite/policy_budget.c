/*
 * policy_budget.c - MG_CKPT_BUDGET: the checkpoints with the least
 * recomputed flops whose training step fits a byte budget, judged by the
 * exact predicted peak of the compiled plan.
 *
 * The forward graph is read as a chain of cut positions in topological
 * order. A cut at position p keeps the tensors produced at or before p and
 * read after it: one tensor at an articulation point of a chain, a
 * multi-tensor separator elsewhere, as the memory policy's cuts. A dynamic
 * program over that chain, in the manner of Rotor's for heterogeneous
 * chains (each stretch either recomputed from a cut or stored as plain
 * backprop does, with its real bytes and flops; stored, a tensor that
 * backward reads only through packs holds its packs' bytes), gives for a
 * memory parameter M the plan with the least recomputed flops under a model of
 * the backward pass: what is kept, plus the bytes that gradient rules read
 * in the segment being recomputed. The model is not the schedule's
 * liveness (gradient buffers, workspaces, size classes, what is freed
 * when), so M is searched over a fixed grid and refined: every distinct
 * plan the DP gives is built by autodiff and planned by the scheduler, and
 * the plan with the least recomputation whose exact predicted peak fits
 * the budget wins. Short chains then get an exact local search from those
 * plans. Neither the grid nor that search's first phase depends on the
 * budget, so the smallest peak they reach, which the NOMEM message names,
 * fits when asked for again.
 *
 * Multi-level schedules (Revolve's and Rotor's, recompute.c's mg_ml_plan)
 * are candidates too: the chain regrouped into at most 256 steps and
 * chain_dp.c's DP run on a second grid of M; they reach budgets below the
 * single-level minimum of about 2 sqrt(n) activations, and are judged by
 * the exact predicted peak like the rest. They are tried only when no
 * single-level plan fits the budget.
 */
#include "offload.h"
#include "rewrite.h"
#include "schedule.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Memory slots of the DP: its table is (cuts x slots). Finer slots model
 * memory better, at a cost linear in them. */
#define MG_BUDGET_SLOTS 128
/* Candidate cuts at most: longer chains allow a cut only at the smallest
 * separator of each run of consecutive positions. */
#define MG_BUDGET_MAX_CUTS 1024
/* Geometric grid of memory parameters, as fractions of policy none's
 * exact peak, and the refinement steps between two grid points. */
#define MG_BUDGET_GRID 28
/* Short chains (MG_BUDGET_LOCAL_MAX) get a finer grid: more DP plans to
 * start the local search from, at little cost there. */
#define MG_BUDGET_GRID_SHORT 96
#define MG_BUDGET_GRID_LO (1.0 / 1024)
#define MG_BUDGET_GRID_HI 1.25
#define MG_BUDGET_REFINE 6
/* Chains up to this many positions also get an exact local search from
 * the DP's plans (single flips; pairs of flips up to the second bound;
 * triples, when nothing else improves, up to the third). */
#define MG_BUDGET_LOCAL_MAX 64
#define MG_BUDGET_PAIR_MAX 24
#define MG_BUDGET_TRIPLE_MAX 12

typedef struct bchain {
    int32_t n_before; /* graph size before mg_gradients */
    int32_t n;        /* forward positions */
    mg_tensor *t;     /* per position: its tensor (topological = id order) */
    int32_t *pos;     /* per tensor id: its position, or -1 */
    int32_t *last;    /* per position: its last forward reader's position */
    double *bytes;    /* per position: pool bytes (size class) */
    double *sep;      /* per position: bytes a cut there keeps */
    double *rb_pre;   /* prefix sums of bytes that backward reads, n + 1 */
    double *rs_pre;   /* the same for the bytes a position kept by the
                         forward pass holds for them: its packs' where
                         the backward pass reads it only through packs
                         (compaction's, or store16's bfloat16 one), n + 1 */
    bool packed;      /* rs_pre differs from rb_pre */
    const double *store_pre; /* the DP's store way: rs_pre, or rb_pre */
    double *fl_pre;          /* prefix sums of flops, n + 1 */
    int32_t k;               /* candidate cuts */
    int32_t *cand;           /* their positions, increasing; the last is n, the
                                end of the chain, which keeps nothing */
    double *gap;             /* per candidate c: the most bytes of one position
                                strictly between cand[c - 1] (or the start) and
                                cand[c], 0 for none */
} bchain;

static void chain_free(bchain *c) {
    free(c->t);
    free(c->pos);
    free(c->last);
    free(c->bytes);
    free(c->sep);
    free(c->rb_pre);
    free(c->rs_pre);
    free(c->fl_pre);
    free(c->cand);
    free(c->gap);
}

static mg_status oom(void) {
    return mg_set_error(MG_ERR_NOMEM, "mg_gradients: out of memory");
}

/* The exact peak of a training step of the built graph, the budget's
 * measure (include/memgrad.h, mg_checkpoints): the plan computing the ys
 * and the gradients, each of them bound to caller memory (outs: the ys
 * then the gradients), as mg_plan_summary's budget_peak counts a plan of
 * those outputs; and the flops its recomputed copies cost.
 * mgi_graph_peak gives the compiled plan's peak without compiling it:
 * the search measures dozens of graphs, and building each plan (its step
 * records and phases) was most of the search's time. */
static mg_status trial_measure(const mg_graph *g, int32_t n_before,
                               const mg_tensor *outs, int n,
                               mg_peak_scratch *sc, size_t *peak,
                               double *rflops) {
    const mg_peak_query q = {
        .outputs = outs, .n_outputs = n, .all_bound = true};
    mg_status s = mgi_graph_peak(g, &q, sc, "mg_gradients", peak);
    *rflops = 0;
    for (int32_t k = 0; s == MG_OK && k < sc->n_steps; k++) {
        mg_tensor t = sc->steps[k];
        if (t < n_before || !(g->nodes[t].flags & MG_NODE_RECOMPUTE)) continue;
        double f = 0;
        mgi_graph_op_cost(g, t, &f, NULL);
        *rflops += f;
    }
    return s;
}

typedef struct bsrch {
    mg_graph *g;
    const mg_checkpoints *c;
    int n_ys, n_xs;
    mg_memory_build_fn build;
    const void *ctx;
    mg_tensor *outs;   /* the ys, then the gradients of a trial */
    mg_tensor *result; /* outs + n_ys: where a trial's gradients go */
    uint64_t rng_before;
    bchain ch;
    mg_peak_scratch peak; /* trial_measure's, across all trials */
    bool *remat;          /* NULL, or the remat marks evaluate builds with */
} bsrch;

/* Build with keep_set (and a multi-level plan, or NULL), measure, and
 * leave g as it was. */
static mg_status evaluate_ml(bsrch *b, bool *keep_set, mg_ml_plan *ml,
                             size_t *peak, double *rflops) {
    mg_budget_point m = {.search = {.segment_factor = 1.0},
                         .keep_set = keep_set,
                         .ml = ml,
                         .remat = ml ? NULL : b->remat};
    mg_status s = b->build(b->g, b->ctx, &m.search, b->result);
    if (s == MG_OK)
        s = trial_measure(b->g, b->ch.n_before, b->outs, b->n_ys + b->n_xs,
                          &b->peak, peak, rflops);
    mgi_graph_truncate(b->g, b->ch.n_before);
    b->g->rng_offset = b->rng_before;
    return s;
}

static mg_status evaluate(bsrch *b, bool *keep_set, size_t *peak,
                          double *rflops) {
    return evaluate_ml(b, keep_set, NULL, peak, rflops);
}

/* read_bwd[t] for each tensor t the caller made: -1 when a needed backward
 * op reads it whole, else the bytes of the packs the backward pass reads
 * it through (0: not read). */
static void backward_reads(const mg_graph *g, int32_t nb, const bool *needed,
                           double *read_bwd) {
    for (int32_t t = nb; t < g->n; t++) {
        const mg_node *nd = &g->nodes[t];
        const bool pack = nd->flags & MG_NODE_PACK;
        for (int k = 0; needed[t] && k < nd->n_in; k++) {
            const mg_tensor in = nd->in[k];
            if (in >= nb) continue;
            if (!pack) read_bwd[in] = -1;
            else if (read_bwd[in] >= 0)
                read_bwd[in] +=
                    (double)mg_pool_size_class(g->descs.nbytes[nd->desc]);
        }
    }
}

/* The plain build (everything kept), measured into *peak_none: the chain's
 * positions (c->t, c->pos, c->n) are its non-leaf ancestors of the
 * gradients among the tensors the caller made, and *read_bwd (the
 * caller's to free) what its backward ops read of them. The build is
 * undone. */
static mg_status chain_positions(bsrch *b, size_t *peak_none,
                                 double **read_bwd) {
    mg_graph *g = b->g;
    bchain *c = &b->ch;
    const int32_t nb = c->n_before;
    size_t sz = (size_t)(nb ? nb : 1);
    *read_bwd = NULL;
    bool *all = malloc(sz * sizeof *all);
    if (!all) return oom();
    for (int32_t t = 0; t < nb; t++) all[t] = true;
    mg_budget_point m = {.search = {.segment_factor = 1.0}, .keep_set = all};
    mg_status s = b->build(g, b->ctx, &m.search, b->result);
    double none_flops = 0;
    if (s == MG_OK)
        s = trial_measure(g, nb, b->outs, b->n_ys + b->n_xs, &b->peak,
                          peak_none, &none_flops);
    bool *needed = NULL;
    double *rb = NULL;
    if (s == MG_OK) {
        needed = calloc((size_t)g->n, sizeof *needed);
        rb = calloc(sz, sizeof *rb);
        c->t = malloc(sz * sizeof *c->t);
        c->pos = malloc(sz * sizeof *c->pos);
        if (!needed || !rb || !c->t || !c->pos) s = oom();
    }
    if (s == MG_OK)
        s = mgi_graph_mark_ancestors(g, b->result, b->n_xs, NULL, needed,
                                     "mg_gradients");
    if (s == MG_OK) {
        backward_reads(g, nb, needed, rb);
        for (int32_t t = 0; t < nb; t++) {
            c->pos[t] = -1;
            if (!needed[t] ||
                (mgi_op_table[g->nodes[t].op].flags & MG_OPF_LEAF))
                continue;
            c->pos[t] = c->n;
            c->t[c->n++] = t;
        }
    }
    mgi_graph_truncate(g, nb);
    g->rng_offset = b->rng_before;
    free(needed);
    free(all);
    if (s != MG_OK) {
        free(rb);
        return s;
    }
    *read_bwd = rb;
    return MG_OK;
}

/* Per position: its bytes, its last forward reader, the prefix sums of
 * flops and of the bytes backward reads (whole, and through packs), then
 * the separator a cut at each position keeps. */
static void chain_weigh(bchain *c, const mg_graph *g, const double *read_bwd) {
    const int32_t n = c->n, nb = c->n_before;
    for (int32_t i = 0; i < n; i++) {
        const mg_node *nd = &g->nodes[c->t[i]];
        c->last[i] = i;
        c->bytes[i] = (double)mg_pool_size_class(g->descs.nbytes[nd->desc]);
        double f = 0;
        mgi_graph_op_cost(g, c->t[i], &f, NULL);
        c->fl_pre[i + 1] = c->fl_pre[i] + f;
        const double rb = read_bwd[c->t[i]];
        c->rb_pre[i + 1] = c->rb_pre[i] + (rb != 0 ? c->bytes[i] : 0);
        c->rs_pre[i + 1] = c->rs_pre[i] + (rb < 0 ? c->bytes[i] : rb);
        c->packed = c->packed || c->rs_pre[i + 1] != c->rb_pre[i + 1];
        for (int k = 0; k < nd->n_in; k++) {
            int32_t p = nd->in[k] < nb ? c->pos[nd->in[k]] : -1;
            if (p >= 0 && c->last[p] < i) c->last[p] = i;
        }
    }
    c->store_pre = c->rb_pre;
    /* sep[p]: bytes of positions q <= p with last[q] > p, and p itself */
    for (int32_t i = 0; i < n; i++) {
        c->sep[i] += c->bytes[i];
        c->sep[c->last[i] > i ? c->last[i] : i + 1] -= c->bytes[i];
    }
    for (int32_t i = 1; i < n; i++) c->sep[i] += c->sep[i - 1];
}

/* Candidate cuts: every position on short chains; on long ones the
 * smallest separator of each run. Position n ends the chain. Then each
 * candidate's gap: the most bytes of one position since the one before. */
static void chain_candidates(bchain *c) {
    const int32_t n = c->n;
    int32_t run = (n + MG_BUDGET_MAX_CUTS - 1) / MG_BUDGET_MAX_CUTS;
    if (run < 1) run = 1;
    for (int32_t i = 0; i < n; i += run) {
        int32_t best = i;
        /* the smallest separator; of equal ones, the costliest op */
        for (int32_t j = i; j < i + run && j < n; j++)
            if (c->sep[j] < c->sep[best] ||
                (c->sep[j] == c->sep[best] &&
                 c->fl_pre[j + 1] - c->fl_pre[j] >
                     c->fl_pre[best + 1] - c->fl_pre[best]))
                best = j;
        c->cand[c->k++] = best;
    }
    c->cand[c->k++] = n;
    for (int32_t j = 0; j < c->k; j++)
        for (int32_t q = j ? c->cand[j - 1] + 1 : 0; q < c->cand[j]; q++)
            if (c->bytes[q] > c->gap[j]) c->gap[j] = c->bytes[q];
}

/* The forward positions of the plain build: the non-leaf ancestors of the
 * gradients among the tensors the caller made, what the backward ops read
 * of them, and the separator each cut would keep. The build is undone. */
static mg_status chain_analyse(bsrch *b, size_t *peak_none) {
    bchain *c = &b->ch;
    double *read_bwd;
    mg_status s = chain_positions(b, peak_none, &read_bwd);
    if (s != MG_OK) return s;
    size_t szn = (size_t)(c->n ? c->n : 1);
    c->last = malloc(szn * sizeof *c->last);
    c->bytes = malloc(szn * sizeof *c->bytes);
    c->sep = calloc(szn + 1, sizeof *c->sep);
    c->rb_pre = calloc(szn + 1, sizeof *c->rb_pre);
    c->rs_pre = calloc(szn + 1, sizeof *c->rs_pre);
    c->fl_pre = calloc(szn + 1, sizeof *c->fl_pre);
    c->cand = malloc((szn + 1) * sizeof *c->cand);
    c->gap = calloc(szn + 1, sizeof *c->gap);
    if (!c->last || !c->bytes || !c->sep || !c->rb_pre || !c->rs_pre ||
        !c->fl_pre || !c->cand || !c->gap) {
        free(read_bwd);
        return oom();
    }
    chain_weigh(c, b->g, read_bwd);
    free(read_bwd);
    chain_candidates(c);
    return MG_OK;
}

/* The DP at memory parameter M, in units of M / MG_BUDGET_SLOTS rounded
 * up, so that the model never underestimates. State (node i, slots left
 * m): node 0 is before the first position, node j >= 1 the candidate cut
 * cand[j - 1], and m what is left after keeping everything kept up to
 * there. From node i to node j, as Rotor's two ways to run a stage:
 *   recompute  keep the separator of cand[j - 1] only; the positions
 *              between are recomputed in the backward pass, when the cuts
 *              kept before, that separator and the recomputed values that
 *              gradient rules read (and the largest of them being made)
 *              are live; costs their flops
 *   store      keep every position up to cand[j - 1], as plain backprop
 *              does: their bytes that gradient rules read stay live; free
 * The edges out of node i are walked in increasing j, as long as either
 * way still fits in the slots at all. */
typedef struct dp_walk {
    const bchain *ch;
    double u; /* bytes per slot */
    int32_t i, j, pa;
    double maxb; /* the most bytes of a position between pa and cand[j - 1] */
    bool rec_ok, store_ok;
} dp_walk;

/* One edge: recompute needs seg + sep slots (seg for the segment being
 * recomputed, sep kept for later) and costs cost flops; store keeps
 * store slots. Each way is open only where its flag says so; seg is set
 * (S + 1 when over) whatever rec says, and grows with j, as cost does. */
typedef struct dp_edge {
    int32_t j;
    bool rec, st;
    int seg, sep, store;
    double cost;
} dp_edge;

static void walk_start(dp_walk *w, const bchain *ch, double u, int32_t i) {
    *w = (dp_walk){.ch = ch,
                   .u = u,
                   .i = i,
                   .j = i,
                   .pa = i == 0 ? -1 : ch->cand[i - 1],
                   .maxb = 0,
                   .rec_ok = true,
                   .store_ok = true};
}

/* The next edge out of the walk's node; false when no further edge can
 * fit. The table and the trace both walk with this, so they see the
 * same edges computed with the same arithmetic. A way that stopped
 * fitting is not computed any more: it never fits again. */
static inline bool walk_next(dp_walk *w, dp_edge *e) {
    const bchain *ch = w->ch;
    const int S = MG_BUDGET_SLOTS;
    if (w->j >= ch->k || !(w->rec_ok || w->store_ok)) return false;
    const int32_t j = ++w->j, pb = ch->cand[j - 1], pa = w->pa;
    const double sep = pb < ch->n ? ch->sep[pb] : 0;
    const double rb = ch->rb_pre[pb] - ch->rb_pre[pa + 1];
    const double rs = ch->store_pre[pb] - ch->store_pre[pa + 1];
    *e = (dp_edge){
        .j = j, .seg = S + 1, .cost = ch->fl_pre[pb] - ch->fl_pre[pa + 1]};
    if (w->rec_ok) {
        /* the positions now between: the gap before cand[j - 1], and the
         * candidate before it unless that is where the walk started */
        if (j > w->i + 1 && ch->bytes[ch->cand[j - 2]] > w->maxb)
            w->maxb = ch->bytes[ch->cand[j - 2]];
        if (ch->gap[j - 1] > w->maxb) w->maxb = ch->gap[j - 1];
        const double segd = ceil((rb + w->maxb) / w->u);
        if (segd > S) {
            w->rec_ok = false;
        } else {
            e->seg = (int)segd;
            const double sepd = ceil(sep / w->u);
            if (segd + sepd <= S) {
                e->rec = true;
                e->sep = (int)sepd;
            }
        }
    }
    if (w->store_ok) {
        const double std_ = ceil((rs + sep) / w->u);
        if (std_ > S) {
            w->store_ok = false;
        } else {
            e->st = true;
            e->store = (int)std_;
        }
    }
    return true;
}

/* Fi[m] = min(Fi[m], cost + Fj[m]) for m < len. Branch-free so that it
 * vectorises: this loop is most of the DP's time, and the DP runs once
 * per grid point. Which edge gave the minimum is found again by the
 * trace, keeping it here would stop the vectorising. */
static void relax(double *restrict Fi, const double *restrict Fj, double cost,
                  int len) {
    for (int m = 0; m < len; m++) {
        const double v = cost + Fj[m];
        Fi[m] = v < Fi[m] ? v : Fi[m];
    }
}

/* Relax row Fi with edge values cost + Fj[m - shift], m from lo to S,
 * where they can be lower. Every row of F, finished or not, is a minimum
 * of functions that do not increase with m (more slots, never more
 * flops; rounding keeps that), so it does not increase either, and no
 * value of the edge is below cost + Fj[S]: from any m where Fi is at most
 * that on, the edge changes nothing. Two probes (the start, the middle)
 * bound the range; a full binary search cost more in mispredicted
 * branches than the relaxing it saved. */
static void relax_edge(double *Fi, const double *Fj, int lo, int shift,
                       double cost) {
    const int S = MG_BUDGET_SLOTS;
    const double least = cost + Fj[S];
    if (Fi[lo] <= least) return;
    const int mid = (lo + S + 1) / 2;
    const int end = Fi[mid] <= least ? mid : S + 1;
    relax(Fi + lo, Fj + lo - shift, cost, end - lo);
}

/* F[i * (S + 1) + m]: the least recomputed flops from node i with m slots
 * left (INFINITY: nothing fits). */
MG_DP_CLONES
static void dp_fill(const bchain *ch, double u, double *F) {
    const int S = MG_BUDGET_SLOTS;
    const int32_t K = ch->k;
    for (int m = 0; m <= S; m++) F[(size_t)K * (S + 1) + m] = 0;
    for (int32_t i = K - 1; i >= 0; i--) {
        double *Fi = F + (size_t)i * (S + 1);
        for (int m = 0; m <= S; m++) Fi[m] = INFINITY;
        dp_walk w;
        dp_edge e;
        walk_start(&w, ch, u, i);
        while (walk_next(&w, &e)) {
            const double *Fj = F + (size_t)e.j * (S + 1);
            /* Recomputing to this j or beyond costs at least e.cost and
             * needs e.seg slots at least, where Fi (not increasing) is
             * already at most e.cost: no such edge lowers Fi any more. */
            if (e.seg <= S && Fi[e.seg] <= e.cost)
                w.rec_ok = false; /* the walk need not compute them */
            else if (e.rec) relax_edge(Fi, Fj, e.seg + e.sep, e.sep, e.cost);
            if (e.st) relax_edge(Fi, Fj, e.store, e.store, 0.0);
        }
    }
}

/* The edge that gave F at (i, m): the first in dp_fill's order (j
 * increasing, recompute before store) whose value, computed as dp_fill
 * does, equals it; dp_fill keeps only strictly lower values, so that is
 * the one it kept. False when none does (not for a finite F). */
static bool dp_arg(const bchain *ch, double u, const double *F, int32_t i,
                   int m, dp_edge *out) {
    const int S = MG_BUDGET_SLOTS;
    const double want = F[(size_t)i * (S + 1) + m];
    dp_walk w;
    walk_start(&w, ch, u, i);
    while (walk_next(&w, out)) {
        const double *Fj = F + (size_t)out->j * (S + 1);
        if (out->rec && m >= out->seg + out->sep &&
            out->cost + Fj[m - out->sep] == want) {
            out->st = false;
            return true;
        }
        if (out->st && m >= out->store && 0.0 + Fj[m - out->store] == want) {
            out->rec = false;
            return true;
        }
    }
    return false;
}

/* The DP's plan at memory parameter M: writes the positions to keep,
 * each marked as a cut, to cuts (room for ch->n) with their count; false
 * when nothing fits the model. F has room for (k + 1) x (S + 1). */
static bool dp_solve(const bchain *ch, double M, double *F, int32_t *cuts,
                     int32_t *n_cuts) {
    const int S = MG_BUDGET_SLOTS;
    const int32_t K = ch->k;
    const double u = M / S;
    if (u <= 0 || K == 0) return false;
    dp_fill(ch, u, F);
    if (!isfinite(F[S])) return false;
    int32_t i = 0;
    int m = S;
    *n_cuts = 0;
    while (i < K) {
        dp_edge e;
        if (!dp_arg(ch, u, F, i, m, &e)) return false;
        const int32_t pa = i == 0 ? -1 : ch->cand[i - 1];
        const int32_t pb = ch->cand[e.j - 1];
        if (e.st) {
            m -= e.store;
            for (int32_t p = pa + 1; p <= pb && p < ch->n; p++)
                cuts[(*n_cuts)++] = p;
        } else {
            m -= e.sep;
            if (pb < ch->n) cuts[(*n_cuts)++] = pb;
        }
        i = e.j;
    }
    return true;
}

/* The tensors a set of cuts keeps: each cut's separator, i.e. position q
 * when some cut p has q <= p < last[q], or q itself is a cut. */
static void cuts_to_keep(const bchain *ch, const int32_t *cuts, int32_t n_cuts,
                         int32_t *next, bool *keep) {
    memset(keep, 0, (size_t)(ch->n_before ? ch->n_before : 1) * sizeof *keep);
    const int32_t n = ch->n;
    for (int32_t q = 0; q <= n; q++) next[q] = n; /* next cut at or after q */
    for (int32_t c = 0; c < n_cuts; c++) next[cuts[c]] = cuts[c];
    for (int32_t q = n - 1; q >= 0; q--)
        if (next[q] > next[q + 1]) next[q] = next[q + 1];
    for (int32_t q = 0; q < n; q++)
        if (next[q] == q || (next[q] < n && next[q] < ch->last[q]))
            keep[ch->t[q]] = true;
}

typedef struct bbest {
    bool *keep; /* the best fitting set so far, or none yet */
    bool found;
    double flops;
    size_t peak;
    mg_ml_plan ml;      /* keep's multi-level plan (n_seg 0: none) */
    size_t ml_min_peak; /* the smallest peak of a multi-level plan */
    bool *remat;        /* keep's remat marks (mg_budget_point.remat) */
    bool lazy;          /* keep was built with remat marks (even none) */
    bool *min_keep;     /* the set with the smallest exact peak so far */
    bool *min_remat;    /* its remat marks */
    size_t min_peak;    /* its peak (SIZE_MAX: none yet) */
    double min_flops;
} bbest;

/* Evaluate keep and remember it if it fits with fewer recomputed flops,
 * or if it has the lowest peak so far. */
static mg_status consider(bsrch *b, bool *keep, bbest *best, size_t *peak,
                          double *fl) {
    mg_status s = evaluate(b, keep, peak, fl);
    if (s != MG_OK) return s;
    const size_t szt = (size_t)(b->ch.n_before ? b->ch.n_before : 1);
    if (*peak < best->min_peak ||
        (*peak == best->min_peak && *fl < best->min_flops)) {
        best->min_peak = *peak;
        best->min_flops = *fl;
        memcpy(best->min_keep, keep, szt * sizeof *keep);
        if (b->remat) memcpy(best->min_remat, b->remat, szt);
        else memset(best->min_remat, 0, szt);
    }
    if (*peak <= b->c->budget_bytes &&
        (!best->found || *fl < best->flops ||
         (*fl == best->flops && *peak < best->peak))) {
        best->found = true;
        best->flops = *fl;
        best->peak = *peak;
        memcpy(best->keep, keep, szt * sizeof *keep);
        if (b->remat) memcpy(best->remat, b->remat, szt);
        else memset(best->remat, 0, szt);
        best->lazy = b->remat != NULL;
        mgi_ml_plan_free(&best->ml);
    }
    return MG_OK;
}

/* Is (peak, fl) better than (peak0, fl0)? by_peak: lower peak first;
 * else fewer flops within the budget first. */
static bool better(size_t peak, double fl, size_t peak0, double fl0,
                   bool by_peak, size_t budget) {
    if (by_peak) return peak < peak0 || (peak == peak0 && fl < fl0);
    if (peak > budget) return false;
    if (peak0 > budget) return true;
    return fl < fl0 || (fl == fl0 && peak < peak0);
}

/* Steepest descent from cur (changed in place) over flips of one
 * position, and of two on chains up to MG_BUDGET_PAIR_MAX positions,
 * evaluating every neighbour exactly. */
static mg_status descend(bsrch *b, bool *cur, bool by_peak, bbest *best) {
    const bchain *ch = &b->ch;
    const size_t budget = b->c->budget_bytes;
    const int32_t n = ch->n;
    size_t peak0, peak;
    double fl0, fl;
    mg_status s = consider(b, cur, best, &peak0, &fl0);
    while (s == MG_OK) {
        int32_t bp = -1, bq = -1;
        size_t bpeak = peak0;
        double bfl = fl0;
        for (int32_t p = 0; s == MG_OK && p < n; p++) {
            cur[ch->t[p]] = !cur[ch->t[p]];
            s = consider(b, cur, best, &peak, &fl);
            if (s == MG_OK && better(peak, fl, bpeak, bfl, by_peak, budget)) {
                bp = p;
                bq = -1;
                bpeak = peak;
                bfl = fl;
            }
            for (int32_t q = p + 1;
                 s == MG_OK && n <= MG_BUDGET_PAIR_MAX && q < n; q++) {
                cur[ch->t[q]] = !cur[ch->t[q]];
                s = consider(b, cur, best, &peak, &fl);
                if (s == MG_OK &&
                    better(peak, fl, bpeak, bfl, by_peak, budget)) {
                    bp = p;
                    bq = q;
                    bpeak = peak;
                    bfl = fl;
                }
                cur[ch->t[q]] = !cur[ch->t[q]];
            }
            cur[ch->t[p]] = !cur[ch->t[p]];
        }
        /* Stuck: on the shortest chains, flips of three positions. */
        int32_t br = -1;
        for (int32_t p = 0;
             s == MG_OK && bp < 0 && n <= MG_BUDGET_TRIPLE_MAX && p < n; p++) {
            cur[ch->t[p]] = !cur[ch->t[p]];
            for (int32_t q = p + 1; s == MG_OK && q < n; q++) {
                cur[ch->t[q]] = !cur[ch->t[q]];
                for (int32_t r = q + 1; s == MG_OK && r < n; r++) {
                    cur[ch->t[r]] = !cur[ch->t[r]];
                    s = consider(b, cur, best, &peak, &fl);
                    if (s == MG_OK &&
                        better(peak, fl, bpeak, bfl, by_peak, budget)) {
                        bp = p;
                        bq = q;
                        br = r;
                        bpeak = peak;
                        bfl = fl;
                    }
                    cur[ch->t[r]] = !cur[ch->t[r]];
                }
                cur[ch->t[q]] = !cur[ch->t[q]];
            }
            cur[ch->t[p]] = !cur[ch->t[p]];
            if (bp >= 0) break;
        }
        if (s != MG_OK || bp < 0) break;
        cur[ch->t[bp]] = !cur[ch->t[bp]];
        if (bq >= 0) cur[ch->t[bq]] = !cur[ch->t[bq]];
        if (br >= 0) cur[ch->t[br]] = !cur[ch->t[br]];
        peak0 = bpeak;
        fl0 = bfl;
    }
    return s;
}

/* Per position, what the backward pass does with it: 0 recompute it and
 * hold the copy from its first reader to its last, 1 keep it, 2
 * recompute it for each rule that reads it (remat). */
static int pos_state(const bsrch *b, const bool *keep, int32_t p) {
    const mg_tensor t = b->ch.t[p];
    return keep[t] ? 1 : b->remat[t] ? 2 : 0;
}

static void pos_set(bsrch *b, bool *keep, int32_t p, int st) {
    const mg_tensor t = b->ch.t[p];
    keep[t] = st == 1;
    b->remat[t] = st == 2;
}

/* Steepest descent as descend's, over the three states of each position:
 * every other state of one position, and of two on chains up to
 * MG_BUDGET_REMAT_PAIR_MAX positions. keep and b->remat change in
 * place. */
#define MG_BUDGET_REMAT_PAIR_MAX 16
static mg_status descend3(bsrch *b, bool *keep, bool by_peak, bbest *best) {
    const int32_t n = b->ch.n;
    const size_t budget = b->c->budget_bytes;
    size_t peak0, peak;
    double fl0, fl;
    mg_status s = consider(b, keep, best, &peak0, &fl0);
    while (s == MG_OK) {
        int32_t bp = -1, bq = -1;
        int bsp = 0, bsq = 0;
        size_t bpeak = peak0;
        double bfl = fl0;
        for (int32_t p = 0; s == MG_OK && p < n; p++) {
            const int sp0 = pos_state(b, keep, p);
            for (int dp = 1; s == MG_OK && dp < 3; dp++) {
                const int sp = (sp0 + dp) % 3;
                pos_set(b, keep, p, sp);
                s = consider(b, keep, best, &peak, &fl);
                if (s == MG_OK &&
                    better(peak, fl, bpeak, bfl, by_peak, budget)) {
                    bp = p, bsp = sp, bq = -1;
                    bpeak = peak, bfl = fl;
                }
                for (int32_t q = p + 1;
                     s == MG_OK && n <= MG_BUDGET_REMAT_PAIR_MAX && q < n;
                     q++) {
                    const int sq0 = pos_state(b, keep, q);
                    for (int dq = 1; s == MG_OK && dq < 3; dq++) {
                        const int sq = (sq0 + dq) % 3;
                        pos_set(b, keep, q, sq);
                        s = consider(b, keep, best, &peak, &fl);
                        if (s == MG_OK &&
                            better(peak, fl, bpeak, bfl, by_peak, budget)) {
                            bp = p, bsp = sp, bq = q, bsq = sq;
                            bpeak = peak, bfl = fl;
                        }
                    }
                    pos_set(b, keep, q, sq0);
                }
            }
            pos_set(b, keep, p, sp0);
        }
        if (s != MG_OK || bp < 0) break;
        pos_set(b, keep, bp, bsp);
        if (bq >= 0) pos_set(b, keep, bq, bsq);
        peak0 = bpeak;
        fl0 = bfl;
    }
    return s;
}

/* Checkmate's schedules free a recomputed value and make it again, where
 * memgrad's single-level plans hold it from its first reader to its
 * last: from the plans the local search ended with (the lowest peak and
 * the fewest flops within the budget), a descent over the three states
 * of each position, first toward the lowest peak (budget-independent, as
 * the first phase of the local search), then toward the fewest flops
 * within the budget. */
static mg_status remat_search(bsrch *b, bbest *best) {
    const size_t szt = (size_t)(b->ch.n_before ? b->ch.n_before : 1);
    bool *keep = malloc(szt * sizeof *keep);
    b->remat = calloc(szt, sizeof *b->remat);
    mg_status s = keep && b->remat ? MG_OK : oom();
    for (int phase = 0; s == MG_OK && phase < 3; phase++) {
        /* 0: by peak from the lowest peak; 1, 2: by flops from it and
         * from the fewest flops within the budget */
        if (phase == 2 && !best->found) break;
        const bool *k0 = phase == 2 ? best->keep : best->min_keep;
        const bool *r0 = phase == 2 ? best->remat : best->min_remat;
        memcpy(keep, k0, szt * sizeof *keep);
        memcpy(b->remat, r0, szt * sizeof *b->remat);
        s = descend3(b, keep, phase == 0, best);
    }
    free(keep);
    free(b->remat);
    b->remat = NULL;
    return s;
}

/* Track the largest memory parameter of a grid whose plan fits the budget
 * (fit_M) and the one above it (above_M), between which the refinement
 * bisects: on the grid, a fitting point restarts the bracket; refining,
 * each point narrows it from its side. */
static void grid_bracket(bool refining, bool fits, double M, double *fit_M,
                         double *above_M) {
    if (refining) {
        if (fits) *fit_M = M;
        else *above_M = M;
    } else if (fits) {
        *fit_M = M;
        *above_M = -1;
    } else if (*fit_M > 0 && *above_M < 0) {
        *above_M = M;
    }
}

/* The DP's plans over the grid of memory parameters, refined by bisection
 * where the plans stop fitting; on short chains, exact local search from
 * them: first toward the lowest peak (whatever the budget, so that the
 * minimum a NOMEM message names does not depend on the budget asked
 * for), then toward the fewest flops within the budget. With compaction
 * the grid is walked twice, the DP's store way counting a packed
 * position's whole bytes and then its packs': the second model is the
 * truer one for what is stored, but the first one's plans stay
 * candidates, so that modelling the packs never loses a plan the search
 * found without it (mg_model_unet(4, 8, 2, 64) at 0.70 of none's peak
 * recomputed 0.49 forward passes with the packs' model alone, 0.23 with
 * the whole bytes'). */
static mg_status search(bsrch *b, size_t peak_none, bbest *best) {
    const bchain *ch = &b->ch;
    const int S = MG_BUDGET_SLOTS;
    const size_t szk = (size_t)(ch->k ? ch->k : 1);
    const size_t szt = (size_t)(ch->n_before ? ch->n_before : 1);
    const bool local = ch->n <= MG_BUDGET_LOCAL_MAX;
    const int grid = local ? MG_BUDGET_GRID_SHORT : MG_BUDGET_GRID;
    const int passes = ch->packed ? 2 : 1;
    const int max_starts = passes * (grid + MG_BUDGET_REFINE + 1);
    double *F = malloc((szk + 1) * (S + 1) * sizeof *F);
    const size_t szn = (size_t)ch->n + 1;
    int32_t *cuts = malloc(szn * sizeof *cuts);
    int32_t *prev = malloc(szn * sizeof *prev);
    int32_t *next = malloc(szn * sizeof *next);
    bool *keep = malloc(szt * sizeof *keep);
    bool *starts = local ? malloc(szt * (size_t)max_starts) : NULL;
    int n_starts = 0;
    mg_status s = MG_OK;
    if (!F || !cuts || !prev || !next || !keep || (local && !starts)) s = oom();
    int32_t n_cuts = 0;
    size_t peak;
    double fl;
    const size_t budget = b->c->budget_bytes;
    double lo = MG_BUDGET_GRID_LO * (double)peak_none;
    double step = pow(MG_BUDGET_GRID_HI / MG_BUDGET_GRID_LO, 1.0 / (grid - 1));
    for (int pass = 0; s == MG_OK && pass < passes; pass++) {
        b->ch.store_pre = pass ? ch->rs_pre : ch->rb_pre;
        int32_t n_prev = -1;
        /* The largest grid point whose plan fits, and the one above it. */
        double fit_M = -1, above_M = -1;
        for (int i = 0; s == MG_OK && i < grid + MG_BUDGET_REFINE; i++) {
            double M;
            if (i < grid) {
                M = lo * pow(step, i);
            } else if (fit_M > 0 && above_M > 0) { /* bisect */
                M = sqrt(fit_M * above_M);
            } else {
                break;
            }
            if (!dp_solve(ch, M, F, cuts, &n_cuts)) {
                if (i >= grid) fit_M = M;
                continue;
            }
            if (n_cuts == n_prev &&
                !memcmp(cuts, prev, (size_t)n_cuts * sizeof *cuts))
                continue;
            memcpy(prev, cuts, (size_t)n_cuts * sizeof *cuts);
            n_prev = n_cuts;
            cuts_to_keep(ch, cuts, n_cuts, next, keep);
            /* a start met before would descend the same way again */
            bool seen = false;
            for (int j = 0; local && !seen && j < n_starts; j++)
                seen = !memcmp(starts + szt * (size_t)j, keep, szt);
            if (local && !seen && n_starts < max_starts)
                memcpy(starts + szt * (size_t)n_starts++, keep, szt);
            s = consider(b, keep, best, &peak, &fl);
            grid_bracket(i >= grid, peak <= budget, M, &fit_M, &above_M);
        }
    }
    b->ch.store_pre = ch->rb_pre;
    if (s == MG_OK && local && best->min_peak != SIZE_MAX) {
        for (int i = -1; s == MG_OK && i < n_starts; i++) {
            memcpy(keep, i < 0 ? best->min_keep : starts + szt * (size_t)i,
                   szt);
            s = descend(b, keep, true, best);
        }
        for (int i = -1; s == MG_OK && i < n_starts; i++) {
            memcpy(keep, i < 0 ? best->min_keep : starts + szt * (size_t)i,
                   szt);
            s = descend(b, keep, false, best);
        }
        if (s == MG_OK) s = remat_search(b, best);
    }
    free(F);
    free(cuts);
    free(prev);
    free(next);
    free(keep);
    free(starts);
    return s;
}

/* Multi-level candidates: the chain regrouped into at most
 * MG_BUDGET_ML_STEPS steps between candidate cuts, and for each memory
 * parameter M of a grid that does not depend on the budget, the schedule
 * of chain_dp.c's DP with M in MG_BUDGET_ML_SLOTS slots, each step's
 * reversal taking the slots of the bytes it holds (its values that
 * gradient rules read, and the largest one) beside the snapshots held
 * meanwhile: a step that holds little, such as a classifier head, then
 * runs beside a snapshot that a wide step has no room for (one chain
 * uniform in the largest step's bytes recomputed an MLP's whole forward
 * pass 2.5 times where Checkmate's MILP needed 0.95; checkmate-gap.txt).
 * Its states kept by the forward pass become kept
 * separators; its snapshot stacks, the multi-level plan's snapshots. Each
 * is built and judged by its exact predicted peak, like the rest. */
#define MG_BUDGET_ML_STEPS 256
#define MG_BUDGET_ML_LEVELS 5 /* chains of 16, 32, .., 256 steps */
#define MG_BUDGET_ML_SLOTS 32
#define MG_BUDGET_ML_GRID 10
#define MG_BUDGET_ML_REFINE 4
#define MG_BUDGET_ML_GRID_HI 0.5

typedef struct mlchain {
    int32_t l;
    int32_t *cut;       /* l + 1: cut[0] = -1, cut[i] state i's position */
    double *f;          /* l: each step's flops */
    double *tapes;      /* l: the bytes each step's reversal holds */
    double tape;        /* the most of those */
    int32_t *sep_start; /* l + 1: state i's separator in sep */
    mg_tensor *sep;
} mlchain;

static void mlchain_free(mlchain *m) {
    free(m->cut);
    free(m->f);
    free(m->tapes);
    free(m->sep_start);
    free(m->sep);
}

static mg_status mlchain_build(const bchain *ch, int32_t steps, mlchain *m) {
    memset(m, 0, sizeof *m);
    const int32_t inner = ch->k - 1; /* candidate cuts before the end */
    const int32_t n = ch->n;
    int32_t stride = (inner + steps - 2) / (steps - 1);
    if (stride < 1) stride = 1;
    m->cut = malloc((size_t)(inner + 2) * sizeof *m->cut);
    m->f = malloc((size_t)(inner + 1) * sizeof *m->f);
    m->tapes = malloc((size_t)(inner + 1) * sizeof *m->tapes);
    m->sep_start = malloc((size_t)(inner + 2) * sizeof *m->sep_start);
    if (!m->cut || !m->f || !m->tapes || !m->sep_start) return oom();
    m->cut[0] = -1;
    m->l = 1;
    for (int32_t i = 0; i < inner; i += stride) {
        int32_t best = ch->cand[i];
        for (int32_t j = i; j < i + stride && j < inner; j++)
            if (ch->sep[ch->cand[j]] < ch->sep[best]) best = ch->cand[j];
        m->cut[m->l++] = best;
    }
    m->cut[m->l] = n;
    size_t n_sep = 0;
    for (int32_t i = 1; i < m->l; i++)
        for (int32_t q = 0; q <= m->cut[i]; q++)
            if (q == m->cut[i] || ch->last[q] > m->cut[i]) n_sep++;
    m->sep = malloc((n_sep ? n_sep : 1) * sizeof *m->sep);
    if (!m->sep) return oom();
    int32_t k = 0;
    m->sep_start[0] = 0;
    for (int32_t i = 1; i <= m->l; i++) {
        m->sep_start[i] = k;
        for (int32_t q = 0; i < m->l && q <= m->cut[i]; q++)
            if (q == m->cut[i] || ch->last[q] > m->cut[i])
                m->sep[k++] = ch->t[q];
    }
    m->sep_start[0] = 0;
    /* sep_start[i]..sep_start[i + 1] is state i's separator (i >= 1) */
    for (int32_t i = 1; i <= m->l; i++) {
        const int32_t a = m->cut[i - 1] + 1,
                      e = m->cut[i] < n ? m->cut[i] + 1 : n;
        m->f[i - 1] = ch->fl_pre[e] - ch->fl_pre[a];
        double maxb = 0;
        for (int32_t q = a; q < e; q++)
            if (ch->bytes[q] > maxb) maxb = ch->bytes[q];
        double tape = ch->rb_pre[e] - ch->rb_pre[a] + maxb;
        m->tapes[i - 1] = tape;
        if (tape > m->tape) m->tape = tape;
    }
    return MG_OK;
}

static int cmp_tensor(const void *a, const void *b) {
    mg_tensor x = *(const mg_tensor *)a, y = *(const mg_tensor *)b;
    return (x > y) - (x < y);
}

/* One past the last position of step i (1..l) of chain m. */
static int32_t step_end(const bchain *ch, const mlchain *m, int32_t i) {
    return m->cut[i] < ch->n ? m->cut[i] + 1 : ch->n;
}

/* The keep set and multi-level plan of schedule q on chain m. */
static mg_status ml_to_plan(const bchain *ch, const mlchain *m,
                            const mg_chain_sched *q, bool *keep,
                            mg_ml_plan *ml) {
    const int32_t nb = ch->n_before, l = m->l;
    memset(keep, 0, (size_t)(nb ? nb : 1) * sizeof *keep);
    memset(ml, 0, sizeof *ml);
    for (int32_t i = 1; i < l; i++)
        if (q->kept[i])
            for (int32_t k = m->sep_start[i]; k < m->sep_start[i + 1]; k++)
                keep[m->sep[k]] = true;
    size_t total = 0;
    for (int32_t i = 0; i < q->snap_start[l]; i++) {
        int32_t st = q->snap[i];
        total += st > 0 ? (size_t)(m->sep_start[st + 1] - m->sep_start[st])
                        : (size_t)(step_end(ch, m, -st) - m->cut[-st - 1] - 1);
    }
    ml->n = nb;
    ml->n_seg = l;
    ml->seg = malloc((size_t)(nb ? nb : 1) * sizeof *ml->seg);
    ml->snap_start = malloc((size_t)(l + 1) * sizeof *ml->snap_start);
    ml->snap = malloc((total ? total : 1) * sizeof *ml->snap);
    if (!ml->seg || !ml->snap_start || !ml->snap) {
        mgi_ml_plan_free(ml);
        return oom();
    }
    for (int32_t t = 0; t < nb; t++) ml->seg[t] = -1;
    int32_t k = 0;
    for (int32_t i = 1; i <= l; i++) {
        const int32_t a = m->cut[i - 1] + 1,
                      e = m->cut[i] < ch->n ? m->cut[i] + 1 : ch->n;
        for (int32_t p = a; p < e; p++) ml->seg[ch->t[p]] = i - 1;
        ml->snap_start[i - 1] = k;
        const int32_t k0 = k;
        for (int32_t j = q->snap_start[i - 1]; j < q->snap_start[i]; j++) {
            int32_t st = q->snap[j];
            if (st < 0) { /* step -st stored whole: what its rules read */
                for (int32_t p = m->cut[-st - 1] + 1; p < step_end(ch, m, -st);
                     p++)
                    if (ch->rb_pre[p + 1] > ch->rb_pre[p])
                        ml->snap[k++] = ch->t[p];
                continue;
            }
            for (int32_t x = m->sep_start[st]; x < m->sep_start[st + 1]; x++)
                ml->snap[k++] = m->sep[x];
        }
        /* increasing ids, each once */
        qsort(ml->snap + k0, (size_t)(k - k0), sizeof *ml->snap, cmp_tensor);
        int32_t w = k0;
        for (int32_t x = k0; x < k; x++)
            if (w == k0 || ml->snap[w - 1] != ml->snap[x])
                ml->snap[w++] = ml->snap[x];
        k = w;
    }
    ml->snap_start[l] = k;
    return MG_OK;
}

static bool same_sched(const mg_chain_sched *a, const mg_chain_sched *b,
                       int32_t l) {
    if (!a->kept || !b->kept) return false;
    if (memcmp(a->kept, b->kept, (size_t)(l + 1) * sizeof *a->kept) ||
        memcmp(a->snap_start, b->snap_start,
               (size_t)(l + 1) * sizeof *a->snap_start))
        return false;
    return !memcmp(a->snap, b->snap,
                   (size_t)a->snap_start[l] * sizeof *a->snap);
}

/* A weight in the multi-level DP's slots: at least 1, and past the last
 * slot (MG_BUDGET_ML_SLOTS + 1) for anything that cannot fit. */
static int32_t ml_slots(double d) {
    return d < 1                    ? 1
           : d > MG_BUDGET_ML_SLOTS ? MG_BUDGET_ML_SLOTS + 1
                                    : (int32_t)d;
}

/* ml_search's state across its memory parameters: the DP's weights, the
 * keep set a trial builds with, and per variant (Revolve's options, then
 * with Rotor's store-all) the last schedule, its chain's length and
 * whether it fitted, so that a schedule met again is not built again. */
typedef struct mlwork {
    int32_t *w, *ts, *all;
    bool *keep;
    mg_chain_sched prevs[2];
    int32_t prev_ls[2];
    bool prevs_fit[2];
} mlwork;

/* The chains of 16, 32, .., 256 steps, up to the first that uses every
 * candidate cut; *n_levels counts those to free, a failed one too. */
static mg_status ml_chains_build(const bchain *ch, mlchain *chains,
                                 int *n_levels) {
    mg_status s = MG_OK;
    *n_levels = 0;
    for (int v = 0; s == MG_OK && v < MG_BUDGET_ML_LEVELS; v++) {
        s = mlchain_build(ch,
                          MG_BUDGET_ML_STEPS >> (MG_BUDGET_ML_LEVELS - 1 - v),
                          &chains[v]);
        (*n_levels)++;
        if (s == MG_OK && chains[v].l >= ch->k) break; /* every cut used */
    }
    return s;
}

/* Chain mc's weights in slots of u bytes: each step's tape (ts), the state
 * kept at each cut (w), and Rotor's store-all, a step's tape and the state
 * it makes (all). */
static void ml_weights(const bchain *ch, const mlchain *mc, double u,
                       mlwork *wk) {
    const int32_t l = mc->l;
    for (int32_t i = 0; i < l; i++) wk->ts[i] = (int32_t)ceil(mc->tapes[i] / u);
    wk->w[0] = wk->w[l] = 1;
    for (int32_t i = 1; i < l; i++)
        wk->w[i] = ml_slots(ceil(ch->sep[mc->cut[i]] / u));
    for (int32_t i = 0; i < l; i++)
        wk->all[i] = ml_slots(ceil(
            (mc->tapes[i] + (i + 1 < l ? ch->sep[mc->cut[i + 1]] : 0)) / u));
}

/* Variant va's schedule on chain mc (its weights already in wk), built and
 * judged by the exact peak unless it is the variant's last one again;
 * *fits whether it fits the budget, and best takes it when it is the
 * cheapest fitting plan so far. */
static mg_status ml_try_variant(bsrch *b, const mlchain *mc, int va, mlwork *wk,
                                bbest *best, bool *fits) {
    const int32_t l = mc->l;
    mg_chain_sched *prev = &wk->prevs[va];
    mg_chain_dp c = {.l = l,
                     .f = mc->f,
                     .w = wk->w,
                     .slots = MG_BUDGET_ML_SLOTS,
                     .tape = wk->ts,
                     .all = va ? wk->all : NULL};
    mg_chain_sched q;
    mg_status s = mgi_chain_schedule(&c, &q);
    if (s != MG_OK) return s;
    if (l == wk->prev_ls[va] && same_sched(&q, prev, l)) {
        mgi_chain_sched_free(&q);
        *fits = wk->prevs_fit[va];
        return MG_OK;
    }
    mgi_chain_sched_free(prev);
    *prev = q;
    wk->prev_ls[va] = l;
    mg_ml_plan ml;
    if ((s = ml_to_plan(&b->ch, mc, &q, wk->keep, &ml)) != MG_OK) return s;
    size_t peak = SIZE_MAX;
    double fl;
    s = evaluate_ml(b, wk->keep, &ml, &peak, &fl);
    if (s == MG_OK && peak < best->ml_min_peak) best->ml_min_peak = peak;
    *fits = s == MG_OK && peak <= b->c->budget_bytes;
    if (*fits && (!best->found || fl < best->flops ||
                  (fl == best->flops && peak < best->peak))) {
        const size_t szt = (size_t)(b->ch.n_before ? b->ch.n_before : 1);
        best->found = true;
        best->flops = fl;
        best->peak = peak;
        memcpy(best->keep, wk->keep, szt * sizeof *wk->keep);
        memset(best->remat, 0, szt);
        best->lazy = false;
        mgi_ml_plan_free(&best->ml);
        best->ml = ml;
    } else {
        mgi_ml_plan_free(&ml);
    }
    return s;
}

static mg_status ml_search(bsrch *b, size_t peak_none, bbest *best) {
    const bchain *ch = &b->ch;
    if (ch->k < 3) return MG_OK; /* no chain to recompute in levels */
    /* Multi-level plans pay off below the single-level plans' lowest
     * peak: the grid stops there (that peak does not depend on the
     * budget, so neither does the grid). */
    const double M_max =
        best->min_peak != SIZE_MAX ? (double)best->min_peak : (double)peak_none;
    /* Finer chains cost a cubic DP but hold less per step: each M takes
     * the coarsest whose steps hold at most a third of it. */
    mlchain chains[MG_BUDGET_ML_LEVELS];
    int n_levels;
    mg_status s = ml_chains_build(ch, chains, &n_levels);
    const size_t szt = (size_t)(ch->n_before ? ch->n_before : 1);
    const size_t nw = (size_t)(MG_BUDGET_ML_STEPS + 2);
    mlwork wk = {.w = malloc(nw * sizeof *wk.w),
                 .ts = malloc(nw * sizeof *wk.ts),
                 .all = malloc(nw * sizeof *wk.all),
                 .keep = malloc(szt * sizeof *wk.keep),
                 .prev_ls = {-1, -1}};
    if (s == MG_OK && (!wk.w || !wk.ts || !wk.all || !wk.keep)) s = oom();
    const double lo = MG_BUDGET_GRID_LO * (double)peak_none;
    const double step = pow(MG_BUDGET_ML_GRID_HI / MG_BUDGET_GRID_LO,
                            1.0 / (MG_BUDGET_ML_GRID - 1));
    /* The grid, then bisection between the largest M whose plan fits and
     * the one above it, as search() does. */
    double fit_M = -1, above_M = -1;
    for (int g = 0; s == MG_OK && g < MG_BUDGET_ML_GRID + MG_BUDGET_ML_REFINE;
         g++) {
        double M;
        if (g < MG_BUDGET_ML_GRID) {
            M = lo * pow(step, g);
            if (M > M_max) { /* on to the bisection */
                g = MG_BUDGET_ML_GRID - 1;
                continue;
            }
        } else if (fit_M > 0 && above_M > 0) {
            M = sqrt(fit_M * above_M);
        } else {
            break;
        }
        const double u = M / MG_BUDGET_ML_SLOTS;
        int v = 0;
        while (v + 1 < n_levels && chains[v].tape > M / 3) v++;
        const mlchain *mc = &chains[v];
        if (ceil(mc->tape / u) >= MG_BUDGET_ML_SLOTS)
            continue; /* fits at no M below */
        ml_weights(ch, mc, u, &wk);
        /* Revolve's options, then with Rotor's store-all as well: the
         * DP's model ranks them, the exact peak judges each */
        bool fits_any = false;
        for (int va = 0; s == MG_OK && va < 2; va++) {
            bool fits = false;
            if ((s = ml_try_variant(b, mc, va, &wk, best, &fits)) != MG_OK)
                break;
            wk.prevs_fit[va] = fits;
            fits_any = fits_any || fits;
        }
        grid_bracket(g >= MG_BUDGET_ML_GRID, fits_any, M, &fit_M, &above_M);
    }
    mgi_chain_sched_free(&wk.prevs[0]);
    mgi_chain_sched_free(&wk.prevs[1]);
    for (int v = 0; v < n_levels; v++) mlchain_free(&chains[v]);
    free(wk.w);
    free(wk.ts);
    free(wk.all);
    free(wk.keep);
    return s;
}

/* mg_checkpoints.offload (offload_price.c): keeping every forward tensor
 * and offloading the fewest saved tensors that fit, where that predicts a
 * shorter step than the plan the search chose (its recomputed flops at
 * compute_rate), or where nothing else fits. Builds the graph that keeps
 * everything and leaves g as it was. */
static mg_status offload_stage(bsrch *b, bbest *bb, bool **offload) {
    const mg_checkpoints *c = b->c;
    const size_t szt = (size_t)(b->ch.n_before ? b->ch.n_before : 1);
    bool *all = malloc(szt * sizeof *all);
    if (!all) return oom();
    for (size_t t = 0; t < szt; t++) all[t] = true;
    mg_budget_point m = {.search = {.segment_factor = 1.0}, .keep_set = all};
    mg_offload_price pr = {0};
    mg_status s = b->build(b->g, b->ctx, &m.search, b->result);
    if (s == MG_OK)
        s = mgi_offload_price(b->g, b->outs, b->n_ys + b->n_xs, b->ch.n_before,
                              c->budget_bytes, c->host_bandwidth,
                              c->compute_rate, &pr);
    mgi_graph_truncate(b->g, b->ch.n_before);
    b->g->rng_offset = b->rng_before;
    if (s == MG_OK && pr.min_peak < bb->min_peak) bb->min_peak = pr.min_peak;
    if (s == MG_OK && pr.fits &&
        (!bb->found || pr.exposed < bb->flops / c->compute_rate)) {
        bb->found = true;
        bb->flops = 0;
        bb->peak = pr.peak;
        memcpy(bb->keep, all, szt * sizeof *all);
        memset(bb->remat, 0, szt);
        bb->lazy = false;
        mgi_ml_plan_free(&bb->ml);
        *offload = pr.chosen;
        pr.chosen = NULL;
    }
    free(pr.chosen);
    free(all);
    return s;
}

mg_status mgi_budget_search(mg_graph *g, const mg_checkpoints *c,
                            const mg_tensor *ys, int n_ys, int n_xs,
                            mg_memory_build_fn build, const void *ctx,
                            mg_budget_point *best) {
    best->keep_set = NULL;
    best->ml = NULL;
    best->remat = NULL;
    best->offload = NULL;
    bsrch b = {.g = g,
               .c = c,
               .n_ys = n_ys,
               .n_xs = n_xs,
               .build = build,
               .ctx = ctx,
               .rng_before = g->rng_offset};
    b.ch.n_before = g->n;
    size_t szt = (size_t)(g->n ? g->n : 1);
    b.outs = malloc((size_t)(n_ys + n_xs) * sizeof *b.outs);
    if (b.outs) {
        memcpy(b.outs, ys, (size_t)n_ys * sizeof *ys);
        b.result = b.outs + n_ys;
    }
    bbest bb = {.keep = malloc(szt * sizeof *bb.keep),
                .min_keep = malloc(szt * sizeof *bb.min_keep),
                .remat = calloc(szt, sizeof *bb.remat),
                .min_remat = calloc(szt, sizeof *bb.min_remat),
                .min_peak = SIZE_MAX,
                .ml_min_peak = SIZE_MAX};
    size_t peak_none = 0;
    mg_status s = b.result && bb.keep && bb.min_keep && bb.remat && bb.min_remat
                      ? MG_OK
                      : oom();
    if (s == MG_OK) s = chain_analyse(&b, &peak_none);
    if (s == MG_OK && peak_none <= c->budget_bytes) {
        /* Everything kept fits: no recomputation at all. */
        for (int32_t t = 0; t < b.ch.n_before; t++) bb.keep[t] = true;
        bb.found = true;
        bb.flops = 0;
        bb.peak = bb.min_peak = peak_none;
    } else if (s == MG_OK) {
        s = search(&b, peak_none, &bb);
        /* Multi-level plans at every budget: run only where no
         * single-level plan fitted, a smaller budget could get a
         * multi-level plan that recomputes less than the single-level
         * plan a larger one then took (mg-checkmate's transformer with
         * Rotor's store-all; test_budget's sweep), and the budget
         * would not be monotone. */
        if (s == MG_OK) s = ml_search(&b, peak_none, &bb);
        if (bb.ml_min_peak < bb.min_peak) bb.min_peak = bb.ml_min_peak;
        if (peak_none < bb.min_peak) bb.min_peak = peak_none;
        if (s == MG_OK && c->offload)
            s = offload_stage(&b, &bb, &best->offload);
    }
    best->flops = bb.found ? bb.flops : 0;
    best->peak = bb.found ? bb.peak : 0;
    best->min_peak = bb.min_peak;
    best->peak_none = peak_none;
    if (s == MG_OK && !bb.found)
        s = mg_set_error(MG_ERR_NOMEM,
                         "mg_gradients: no checkpoint schedule fits the "
                         "budget of %zu bytes; the smallest budget that fits "
                         "is %zu bytes (policy none needs %zu; pool bytes "
                         "with the ys and gradients in caller memory)",
                         c->budget_bytes, bb.min_peak, peak_none);
    chain_free(&b.ch);
    mgi_peak_scratch_free(&b.peak);
    free(b.outs);
    free(bb.min_keep);
    free(bb.min_remat);
    /* a plan the remat search built has remat marks, even if none is set:
     * its builds forget the copies a rule does not read (lazy) */
    if (!bb.lazy) {
        free(bb.remat);
        bb.remat = NULL;
    }
    if (s == MG_OK && bb.ml.n_seg > 0) {
        best->ml = malloc(sizeof *best->ml);
        if (best->ml) *best->ml = bb.ml;
        else s = oom();
    }
    if (s != MG_OK) {
        mgi_ml_plan_free(&bb.ml);
        free(bb.keep);
        free(bb.remat);
        free(best->offload);
        best->offload = NULL;
        best->ml = NULL;
        return s;
    }
    mg_clear_error();
    best->keep_set = bb.keep;
    best->remat = bb.remat;
    return MG_OK;
}
