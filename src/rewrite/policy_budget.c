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
 * backprop does, with its real bytes and flops), gives for a memory
 * parameter M the plan with the least recomputed flops under a model of
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
 * Each tensor is recomputed at most once (the rewriter's recompute.c):
 * multi-level schedules, Revolve's and Rotor's, are not emitted.
 */
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
    double *fl_pre;   /* prefix sums of flops, n + 1 */
    int32_t k;        /* candidate cuts */
    int32_t *cand;    /* their positions, increasing; the last is n, the
                         end of the chain, which keeps nothing */
} bchain;

static void chain_free(bchain *c) {
    free(c->t);
    free(c->pos);
    free(c->last);
    free(c->bytes);
    free(c->sep);
    free(c->rb_pre);
    free(c->fl_pre);
    free(c->cand);
}

static mg_status oom(void) {
    return mg_set_error(MG_ERR_NOMEM, "mg_gradients: out of memory");
}

/* The exact peak of a training step of the built graph, its gradients
 * bound to caller memory, and the flops its recomputed copies cost. */
static mg_status trial_measure(const mg_graph *g, int32_t n_before,
                               const mg_tensor *grads, int n, size_t *peak,
                               double *rflops) {
    mg_plan *p = NULL;
    mg_binding *b = malloc((size_t)n * sizeof *b);
    static char any; /* the addresses are never used */
    if (!b) return oom();
    for (int i = 0; i < n; i++) b[i] = (mg_binding){grads[i], &any};
    mg_status s = mg_plan_compile(g, grads, n, NULL, &p);
    if (s == MG_OK) s = mgi_plan_peak(p, b, n, "mg_gradients", peak);
    *rflops = 0;
    for (int32_t i = 0; s == MG_OK && i < p->n_steps; i++) {
        mg_tensor t = p->steps[i];
        if (t < n_before || !(g->nodes[t].flags & MG_NODE_RECOMPUTE)) continue;
        double f = 0;
        mgi_graph_op_cost(g, t, &f, NULL);
        *rflops += f;
    }
    mg_plan_free(p);
    free(b);
    return s;
}

typedef struct bsrch {
    mg_graph *g;
    const mg_checkpoints *c;
    int n_xs;
    mg_memory_build_fn build;
    const void *ctx;
    mg_tensor *result;
    uint64_t rng_before;
    bchain ch;
} bsrch;

/* Build with keep_set, measure, and leave g as it was. */
static mg_status evaluate(bsrch *b, bool *keep_set, size_t *peak,
                          double *rflops) {
    mg_budget_point m = {.search = {.segment_factor = 1.0},
                         .keep_set = keep_set};
    mg_status s = b->build(b->g, b->ctx, &m.search, b->result);
    if (s == MG_OK)
        s = trial_measure(b->g, b->ch.n_before, b->result, b->n_xs, peak,
                          rflops);
    mgi_graph_truncate(b->g, b->ch.n_before);
    b->g->rng_offset = b->rng_before;
    return s;
}

/* The forward positions of the plain build: the non-leaf ancestors of the
 * gradients among the tensors the caller made, what the backward ops read
 * of them, and the separator each cut would keep. The build is undone. */
static mg_status chain_analyse(bsrch *b, size_t *peak_none) {
    mg_graph *g = b->g;
    bchain *c = &b->ch;
    const int32_t nb = c->n_before;
    size_t sz = (size_t)(nb ? nb : 1);
    bool *all = malloc(sz * sizeof *all);
    if (!all) return oom();
    for (int32_t t = 0; t < nb; t++) all[t] = true;
    mg_budget_point m = {.search = {.segment_factor = 1.0}, .keep_set = all};
    mg_status s = b->build(g, b->ctx, &m.search, b->result);
    double none_flops = 0;
    if (s == MG_OK)
        s = trial_measure(g, nb, b->result, b->n_xs, peak_none, &none_flops);
    bool *needed = NULL, *read_bwd = NULL;
    if (s == MG_OK) {
        needed = calloc((size_t)g->n, sizeof *needed);
        read_bwd = calloc(sz, sizeof *read_bwd);
        c->t = malloc(sz * sizeof *c->t);
        c->pos = malloc(sz * sizeof *c->pos);
        if (!needed || !read_bwd || !c->t || !c->pos) s = oom();
    }
    if (s == MG_OK)
        s = mgi_graph_mark_ancestors(g, b->result, b->n_xs, NULL, needed,
                                    "mg_gradients");
    if (s == MG_OK) {
        for (int32_t t = nb; t < g->n; t++)
            for (int k = 0; needed[t] && k < g->nodes[t].n_in; k++)
                if (g->nodes[t].in[k] < nb) read_bwd[g->nodes[t].in[k]] = true;
        for (int32_t t = 0; t < nb; t++) {
            c->pos[t] = -1;
            if (!needed[t] || (mgi_op_table[g->nodes[t].op].flags & MG_OPF_LEAF))
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
        free(read_bwd);
        return s;
    }
    int32_t n = c->n;
    size_t szn = (size_t)(n ? n : 1);
    c->last = malloc(szn * sizeof *c->last);
    c->bytes = malloc(szn * sizeof *c->bytes);
    c->sep = calloc(szn + 1, sizeof *c->sep);
    c->rb_pre = calloc(szn + 1, sizeof *c->rb_pre);
    c->fl_pre = calloc(szn + 1, sizeof *c->fl_pre);
    c->cand = malloc((szn + 1) * sizeof *c->cand);
    if (!c->last || !c->bytes || !c->sep || !c->rb_pre || !c->fl_pre ||
        !c->cand) {
        free(read_bwd);
        return oom();
    }
    for (int32_t i = 0; i < n; i++) {
        const mg_node *nd = &g->nodes[c->t[i]];
        c->last[i] = i;
        c->bytes[i] = (double)mg_pool_size_class(mgi_tdesc_nbytes(&nd->d));
        double f = 0;
        mgi_graph_op_cost(g, c->t[i], &f, NULL);
        c->fl_pre[i + 1] = c->fl_pre[i] + f;
        c->rb_pre[i + 1] = c->rb_pre[i] + (read_bwd[c->t[i]] ? c->bytes[i] : 0);
        for (int k = 0; k < nd->n_in; k++) {
            int32_t p = nd->in[k] < nb ? c->pos[nd->in[k]] : -1;
            if (p >= 0 && c->last[p] < i) c->last[p] = i;
        }
    }
    free(read_bwd);
    /* sep[p]: bytes of positions q <= p with last[q] > p, and p itself */
    for (int32_t i = 0; i < n; i++) {
        c->sep[i] += c->bytes[i];
        c->sep[c->last[i] > i ? c->last[i] : i + 1] -= c->bytes[i];
    }
    for (int32_t i = 1; i < n; i++) c->sep[i] += c->sep[i - 1];
    /* Candidate cuts: every position on short chains; on long ones the
     * smallest separator of each run. Position n ends the chain. */
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
 * Writes the positions to keep, each marked as a cut, to cuts (room for
 * ch->n) with their count; false when nothing fits the model. */
static bool dp_solve(const bchain *ch, double M, double *F, int32_t *choice,
                     int32_t *cuts, int32_t *n_cuts) {
    const int S = MG_BUDGET_SLOTS;
    const int32_t K = ch->k;
    const double u = M / S;
    if (u <= 0 || K == 0) return false;
    for (int m = 0; m <= S; m++) F[(size_t)K * (S + 1) + m] = 0;
    for (int32_t i = K - 1; i >= 0; i--) {
        double *Fi = F + (size_t)i * (S + 1);
        int32_t *Ci = choice + (size_t)i * (S + 1);
        for (int m = 0; m <= S; m++) {
            Fi[m] = INFINITY;
            Ci[m] = 0;
        }
        int32_t pa = i == 0 ? -1 : ch->cand[i - 1];
        double maxb = 0;
        int32_t scanned = pa + 1;
        bool rec_ok = true, store_ok = true;
        for (int32_t j = i + 1; j <= K && (rec_ok || store_ok); j++) {
            int32_t pb = ch->cand[j - 1];
            for (; scanned < pb; scanned++)
                if (ch->bytes[scanned] > maxb) maxb = ch->bytes[scanned];
            const double sep = pb < ch->n ? ch->sep[pb] : 0;
            const double rb = ch->rb_pre[pb] - ch->rb_pre[pa + 1];
            const double *Fj = F + (size_t)j * (S + 1);
            /* recompute: +j in choice */
            double segd = ceil((rb + maxb) / u), sepd = ceil(sep / u);
            if (segd > S) rec_ok = false;
            if (rec_ok && segd + sepd <= S) {
                int seg = (int)segd, sp = (int)sepd;
                double cost = ch->fl_pre[pb] - ch->fl_pre[pa + 1];
                for (int m = seg + sp; m <= S; m++) {
                    double v = cost + Fj[m - sp];
                    if (v < Fi[m]) {
                        Fi[m] = v;
                        Ci[m] = j;
                    }
                }
            }
            /* store: -j in choice */
            double std_ = ceil((rb + sep) / u);
            if (std_ > S) store_ok = false;
            if (store_ok) {
                int st = (int)std_;
                for (int m = st; m <= S; m++) {
                    double v = Fj[m - st];
                    if (v < Fi[m]) {
                        Fi[m] = v;
                        Ci[m] = -j;
                    }
                }
            }
        }
    }
    if (!isfinite(F[S])) return false;
    int32_t i = 0, m = S;
    *n_cuts = 0;
    while (i < K) {
        int32_t j = choice[(size_t)i * (S + 1) + m];
        if (j == 0) return false;
        int32_t pa = i == 0 ? -1 : ch->cand[i - 1];
        int32_t pb = ch->cand[(j < 0 ? -j : j) - 1];
        const double sep = pb < ch->n ? ch->sep[pb] : 0;
        const double rb = ch->rb_pre[pb] - ch->rb_pre[pa + 1];
        if (j < 0) {
            j = -j;
            m -= (int32_t)ceil((rb + sep) / u);
            for (int32_t p = pa + 1; p <= pb && p < ch->n; p++)
                cuts[(*n_cuts)++] = p;
        } else {
            m -= (int32_t)ceil(sep / u);
            if (pb < ch->n) cuts[(*n_cuts)++] = pb;
        }
        i = j;
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
    bool *min_keep;  /* the set with the smallest exact peak so far */
    size_t min_peak; /* its peak (SIZE_MAX: none yet) */
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
    }
    if (*peak <= b->c->budget_bytes &&
        (!best->found || *fl < best->flops ||
         (*fl == best->flops && *peak < best->peak))) {
        best->found = true;
        best->flops = *fl;
        best->peak = *peak;
        memcpy(best->keep, keep, szt * sizeof *keep);
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
            for (int32_t q = p + 1; s == MG_OK && n <= MG_BUDGET_PAIR_MAX &&
                                    q < n; q++) {
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
        for (int32_t p = 0; s == MG_OK && bp < 0 &&
                            n <= MG_BUDGET_TRIPLE_MAX && p < n; p++) {
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

/* The DP's plans over the grid of memory parameters, refined by bisection
 * where the plans stop fitting; on short chains, exact local search from
 * them: first toward the lowest peak (whatever the budget, so that the
 * minimum a NOMEM message names does not depend on the budget asked
 * for), then toward the fewest flops within the budget. */
static mg_status search(bsrch *b, size_t peak_none, bbest *best) {
    const bchain *ch = &b->ch;
    const int S = MG_BUDGET_SLOTS;
    const size_t szk = (size_t)(ch->k ? ch->k : 1);
    const size_t szt = (size_t)(ch->n_before ? ch->n_before : 1);
    const bool local = ch->n <= MG_BUDGET_LOCAL_MAX;
    const int grid = local ? MG_BUDGET_GRID_SHORT : MG_BUDGET_GRID;
    const int max_starts = grid + MG_BUDGET_REFINE + 1;
    double *F = malloc((szk + 1) * (S + 1) * sizeof *F);
    int32_t *choice = malloc((szk + 1) * (S + 1) * sizeof *choice);
    const size_t szn = (size_t)ch->n + 1;
    int32_t *cuts = malloc(szn * sizeof *cuts);
    int32_t *prev = malloc(szn * sizeof *prev);
    int32_t *next = malloc(szn * sizeof *next);
    bool *keep = malloc(szt * sizeof *keep);
    bool *starts = local ? malloc(szt * (size_t)max_starts) : NULL;
    int n_starts = 0;
    mg_status s = MG_OK;
    if (!F || !choice || !cuts || !prev || !next || !keep ||
        (local && !starts))
        s = oom();
    int32_t n_prev = -1, n_cuts = 0;
    size_t peak;
    double fl;
    const size_t budget = b->c->budget_bytes;
    double lo = MG_BUDGET_GRID_LO * (double)peak_none;
    double step = pow(MG_BUDGET_GRID_HI / MG_BUDGET_GRID_LO,
                      1.0 / (grid - 1));
    /* The largest grid point whose plan fits, and the one above it. */
    double fit_M = -1, above_M = -1;
    for (int i = 0; s == MG_OK && i < grid + MG_BUDGET_REFINE;
         i++) {
        double M;
        if (i < grid) {
            M = lo * pow(step, i);
        } else if (fit_M > 0 && above_M > 0) { /* bisect */
            M = sqrt(fit_M * above_M);
        } else {
            break;
        }
        if (!dp_solve(ch, M, F, choice, cuts, &n_cuts)) {
            if (i >= grid) fit_M = M;
            continue;
        }
        if (n_cuts == n_prev &&
            !memcmp(cuts, prev, (size_t)n_cuts * sizeof *cuts))
            continue;
        memcpy(prev, cuts, (size_t)n_cuts * sizeof *cuts);
        n_prev = n_cuts;
        cuts_to_keep(ch, cuts, n_cuts, next, keep);
        if (local && n_starts < max_starts)
            memcpy(starts + szt * (size_t)n_starts++, keep, szt);
        s = consider(b, keep, best, &peak, &fl);
        bool fits = peak <= budget;
        if (i >= grid) {
            if (fits) fit_M = M;
            else above_M = M;
        } else if (fits) {
            fit_M = M;
            above_M = -1;
        } else if (fit_M > 0 && above_M < 0) {
            above_M = M;
        }
    }
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
    }
    free(F);
    free(choice);
    free(cuts);
    free(prev);
    free(next);
    free(keep);
    free(starts);
    return s;
}

mg_status mgi_budget_search(mg_graph *g, const mg_checkpoints *c, int n_xs,
                           mg_memory_build_fn build, const void *ctx,
                           mg_budget_point *best) {
    best->keep_set = NULL;
    bsrch b = {.g = g, .c = c, .n_xs = n_xs, .build = build, .ctx = ctx,
                 .rng_before = g->rng_offset};
    b.ch.n_before = g->n;
    size_t szt = (size_t)(g->n ? g->n : 1);
    b.result = malloc((size_t)n_xs * sizeof *b.result);
    bbest bb = {.keep = malloc(szt * sizeof *bb.keep),
                .min_keep = malloc(szt * sizeof *bb.min_keep),
                .min_peak = SIZE_MAX};
    size_t peak_none = 0;
    mg_status s = b.result && bb.keep && bb.min_keep ? MG_OK : oom();
    if (s == MG_OK) s = chain_analyse(&b, &peak_none);
    if (s == MG_OK && peak_none <= c->budget_bytes) {
        /* Everything kept fits: no recomputation at all. */
        for (int32_t t = 0; t < b.ch.n_before; t++) bb.keep[t] = true;
        bb.found = true;
    } else if (s == MG_OK) {
        s = search(&b, peak_none, &bb);
        if (peak_none < bb.min_peak) bb.min_peak = peak_none;
    }
    if (s == MG_OK && !bb.found)
        s = mg_set_error(MG_ERR_NOMEM,
                         "mg_gradients: no checkpoint schedule fits the "
                         "budget of %zu bytes; the smallest budget that fits "
                         "is %zu bytes (policy none needs %zu)",
                         c->budget_bytes, bb.min_peak, peak_none);
    chain_free(&b.ch);
    free(b.result);
    free(bb.min_keep);
    if (s != MG_OK) {
        free(bb.keep);
        return s;
    }
    mg_clear_error();
    best->keep_set = bb.keep;
    return MG_OK;
}
