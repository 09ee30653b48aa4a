/*
 * chain_dp.c - the dynamic program of Revolve and Rotor over a chain of
 * steps with heterogeneous costs and snapshot sizes, and the multi-level
 * schedule it implies.
 *
 * States 0..l, step i (1..l) takes state i - 1 to state i at cost
 * f[i - 1]; a snapshot of state i takes w[i] slots, and reversing step
 * i takes tape[i - 1] slots of its own (0 without tapes: Revolve's
 * model). Reversing steps a+1..b from a stored state a with s free slots
 * costs, in Revolve's count of forward steps (a step taped and reversed
 * at once is not counted):
 *   rev(a, b, s) = 0 if tape[a] <= s, else infinite            b = a + 1
 *                = min( sum_{a<i<b} F(a, i)       advance from a each time,
 *                         if every tape of a+1..b is <= s,
 *                       min_{a<m<b, w[m]<=s} F(a, m) + rev(m, b, s - w[m])
 *                                                  + rev(a, m, s) )
 * Per-step tapes matter on real chains: a step whose reversal holds little
 * (a classifier head) can run beside a snapshot that a wide step's
 * reversal has no room for.
 * with F(a, i) the cost of steps a+1..i. With c->all, Rotor's third
 * option too: advance step a+1 storing all its values (all[a] slots,
 * its state included), reverse a+2..b from state a+1 in what is left,
 * then reverse step a+1 from its stored values, recomputing nothing:
 *   rev(a, b, s) = min(.., rev(a + 1, b, s - all[a]))    b > a + 1
 * (its advance costs f[a] and its reversal then saves the f[a] that
 * every reversal costs in T below). On a homogeneous chain with s
 * slots free besides state 0's, rev(0, l, s) is Revolve's optimum
 * r*l - beta(s + 2, r - 1) (test_chain_dp). The general table is cubic in
 * l, so callers bound l (the budget policy groups its cuts into at most
 * MG_CHAIN_DP_MAX_STEPS steps); homogeneous chains use a table over
 * lengths, quadratic in l.
 *
 * For the rewriter, the advances of the first sweep are the forward pass
 * (free; the states it stops at are kept), and each step's values are
 * recomputed once more when it is reversed: mgi_chain_schedule minimises
 *   T(a, s) = min( rev(a, l, s) + F(a, l),
 *                  min_{a<m<l, w[m]<=s} T(m, s - w[m]) + rev(a, m, s) + F(a, m)
 * ) and returns, per step, the snapshot stack its reversal needs.
 */
#include "rewrite.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static mg_status dp_oom(void) {
    return mg_set_error(MG_ERR_NOMEM, "mg_gradients: out of memory");
}

static mg_status dp_check(const mg_chain_dp *c) {
    if (!c || c->l < 1 || !c->f || !c->w || c->slots < 0)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_gradients: chain DP needs at least one step, "
                            "costs, sizes and a slot count >= 0");
    /* a snapshot takes a slot at least: stacks are then at most `slots`
     * deep */
    for (int32_t i = 1; i < c->l; i++)
        if (c->w[i] < 1)
            return mg_set_error(MG_ERR_INVALID_ARG,
                                "mg_gradients: chain DP state %d takes %d "
                                "slots; every state takes one at least",
                                (int)i, (int)c->w[i]);
    for (int32_t i = 0; c->all && i < c->l; i++)
        if (c->all[i] < 1)
            return mg_set_error(MG_ERR_INVALID_ARG,
                                "mg_gradients: chain DP step %d stores its "
                                "values in %d slots; at least one",
                                (int)i + 1, (int)c->all[i]);
    for (int32_t i = 0; c->tape && i < c->l; i++)
        if (c->tape[i] < 0 || c->tape[i] > c->slots)
            return mg_set_error(MG_ERR_INVALID_ARG,
                                "mg_gradients: chain DP step %d's reversal "
                                "takes %d slots of %d",
                                (int)i + 1, (int)c->tape[i], (int)c->slots);
    return MG_OK;
}

/* The interval table rev, indexed ((a * (l + 1)) + b) * (S + 1) + s. The
 * argmin is found again where a schedule is written (dp_arg): keeping it
 * in the table would stop the inner loop from vectorising. */
typedef struct dp_tab {
    int32_t l, S;
    double *P; /* prefix sums of f, l + 1 */
    double *rev;
} dp_tab;

static size_t ix(const dp_tab *t, int32_t a, int32_t b, int32_t s) {
    return ((size_t)a * (size_t)(t->l + 1) + (size_t)b) * (size_t)(t->S + 1) +
           (size_t)s;
}

static void tab_free(dp_tab *t) {
    free(t->P);
    free(t->rev);
}

/* best[s] = min(best[s], min over the splits m of adv[m] + right[m][s]
 * + left[m][s]), rows of S + 1. Four splits per pass over s, so that best
 * is loaded and stored once per four (a tenth off the table's time); the
 * minimum is the same whatever the order. */
MG_DP_CLONES
static void tab_min(double *restrict best, const double *restrict adv,
                    const double *restrict right, const double *restrict left,
                    int32_t n_m, int32_t S) {
    const size_t row = (size_t)(S + 1);
    int32_t m = 0;
    for (; m + 4 <= n_m; m += 4) {
        const double *r0 = right + m * row, *l0 = left + m * row;
        const double *r1 = r0 + row, *l1 = l0 + row;
        const double *r2 = r1 + row, *l2 = l1 + row;
        const double *r3 = r2 + row, *l3 = l2 + row;
        const double a0 = adv[m], a1 = adv[m + 1], a2 = adv[m + 2],
                     a3 = adv[m + 3];
        for (int32_t s = 0; s <= S; s++) {
            const double v0 = a0 + r0[s] + l0[s], v1 = a1 + r1[s] + l1[s],
                         v2 = a2 + r2[s] + l2[s], v3 = a3 + r3[s] + l3[s];
            const double u0 = v0 < v1 ? v0 : v1, u1 = v2 < v3 ? v2 : v3;
            const double u = u0 < u1 ? u0 : u1;
            best[s] = u < best[s] ? u : best[s];
        }
    }
    for (; m < n_m; m++)
        for (int32_t s = 0; s <= S; s++) {
            const double v = adv[m] + right[m * row + s] + left[m * row + s];
            best[s] = v < best[s] ? v : best[s];
        }
}

/* Rows (a, b) of rev are computed from rev(a, m) and rev(m, b) over the
 * splits m. The first rows lie next to each other in rev; the second are
 * read from a copy, shifted(b, m)[s] = rev(m, b)[s - w[m]] (INFINITY
 * below w[m], or everywhere when w[m] > S: such a split never fits),
 * where they do too, and every split then covers all of s. The sums are
 * rev's own, so is every value of the table. */
typedef struct tab_work {
    const mg_chain_dp *c;
    dp_tab *t;
    double *shifted;
    /* Per row a of the group being computed (a - lo): adv[m] = P[m] -
     * P[a] for every split m, and noslot, the sum of P[i] - P[a] over a <
     * i < b for the current b, grown by one term per b: the same terms
     * in the same order as summing them afresh for each b, so the same
     * bits, without the two passes over the splits per row. */
    double *adv;
    double *noslot;
    int32_t *maxtape; /* per row, as noslot: the largest tape of a+1..b */
} tab_work;

static void tab_row(tab_work *w, int32_t lo, int32_t a, int32_t b) {
    const dp_tab *t = w->t;
    const int32_t S = t->S, l = t->l;
    const double noslot = w->noslot[a - lo];
    w->noslot[a - lo] = noslot + (t->P[b] - t->P[a]); /* for b + 1 */
    const int32_t *tape = w->c->tape;
    int32_t mt = w->maxtape[a - lo];
    if (tape && tape[b - 1] > mt) mt = tape[b - 1];
    w->maxtape[a - lo] = mt;
    double *best = t->rev + ix(t, a, b, 0);
    for (int32_t s = 0; s <= S; s++) best[s] = s >= mt ? noslot : INFINITY;
    if (b > a + 1)
        tab_min(best, w->adv + (size_t)(a - lo) * (size_t)(l + 1) + a + 1,
                w->shifted + ix(t, b, a + 1, 0), t->rev + ix(t, a, a + 1, 0),
                b - a - 1, S);
    /* Rotor's store-all: rev(a + 1, b), computed before (a descends) */
    if (w->c->all && b > a + 1) {
        const int32_t wa1 = w->c->all[a];
        const double *r1 = t->rev + ix(t, a + 1, b, 0);
        for (int32_t s = wa1; s <= S; s++)
            best[s] = r1[s - wa1] < best[s] ? r1[s - wa1] : best[s];
    }
    /* row (a, b) as the splits of later rows read it */
    double *sh = w->shifted + ix(t, b, a, 0);
    const int32_t wa = w->c->w[a];
    for (int32_t s = 0; s <= S; s++)
        sh[s] = a > 0 && s >= wa ? best[s - wa] : INFINITY;
}

/* Rows of TAB_GROUP values of a at a time, for every b: the group's rows
 * rev(a, .) stay in cache across b, and each block shifted(b, .) is read
 * by the whole group at once. One a at a time read all of shifted again
 * for each a: the table (17 MB at 256 steps) streamed from memory. Row
 * (a, b) needs rev(a, m < b), computed earlier in b, and rev(m > a, b),
 * computed by an earlier group or earlier in this group's descending a. */
#define TAB_GROUP 16
static mg_status tab_solve(const mg_chain_dp *c, dp_tab *t) {
    const int32_t l = c->l, S = c->slots;
    memset(t, 0, sizeof *t);
    t->l = l;
    t->S = S;
    size_t n = (size_t)(l + 1) * (size_t)(l + 1) * (size_t)(S + 1);
    t->P = malloc((size_t)(l + 1) * sizeof *t->P);
    t->rev = malloc(n * sizeof *t->rev);
    tab_work w = {
        .c = c,
        .t = t,
        .shifted = malloc(n * sizeof *w.shifted),
        .adv = malloc((size_t)TAB_GROUP * (size_t)(l + 1) * sizeof *w.adv),
        .noslot = malloc(TAB_GROUP * sizeof *w.noslot),
        .maxtape = malloc(TAB_GROUP * sizeof *w.maxtape)};
    if (!t->P || !t->rev || !w.shifted || !w.adv || !w.noslot || !w.maxtape) {
        tab_free(t);
        free(w.shifted);
        free(w.adv);
        free(w.noslot);
        free(w.maxtape);
        return dp_oom();
    }
    t->P[0] = 0;
    for (int32_t i = 0; i < l; i++) t->P[i + 1] = t->P[i] + c->f[i];
    for (int32_t hi = l - 1; hi >= 0; hi -= TAB_GROUP) {
        const int32_t lo = hi - TAB_GROUP + 1 > 0 ? hi - TAB_GROUP + 1 : 0;
        for (int32_t a = lo; a <= hi; a++) {
            double *adv = w.adv + (size_t)(a - lo) * (size_t)(l + 1);
            for (int32_t m = a + 1; m <= l; m++) adv[m] = t->P[m] - t->P[a];
            w.noslot[a - lo] = 0;
            w.maxtape[a - lo] = 0;
        }
        for (int32_t b = lo + 1; b <= l; b++)
            for (int32_t a = hi < b - 1 ? hi : b - 1; a >= lo; a--)
                tab_row(&w, lo, a, b);
    }
    free(w.shifted);
    free(w.adv);
    free(w.noslot);
    free(w.maxtape);
    return MG_OK;
}

/* Homogeneous chains: rev depends on the length and the snapshots that
 * fit only. h[len * (k + 1) + j]: len steps, j snapshots. */
static mg_status revolve_homogeneous(const mg_chain_dp *c, double *steps) {
    const int32_t l = c->l;
    const int32_t k = c->w[1] > 0 ? c->slots / c->w[1] : l;
    const int32_t K = k < l ? k : l;
    double *h = malloc((size_t)(l + 1) * (size_t)(K + 1) * sizeof *h);
    if (!h) return dp_oom();
    for (int32_t len = 1; len <= l; len++)
        for (int32_t j = 0; j <= K; j++) {
            double best = (double)len * (double)(len - 1) / 2;
            for (int32_t m = 1; j > 0 && m < len; m++) {
                double v = m + h[(size_t)(len - m) * (K + 1) + j - 1] +
                           h[(size_t)m * (K + 1) + j];
                if (v < best) best = v;
            }
            h[(size_t)len * (K + 1) + j] = best;
        }
    *steps = h[(size_t)l * (K + 1) + K] * c->f[0];
    free(h);
    return MG_OK;
}

static bool homogeneous(const mg_chain_dp *c) {
    if (c->all) return false; /* the table over lengths has no store-all */
    for (int32_t i = 0; c->tape && i < c->l; i++)
        if (c->tape[i] != 0) return false;
    for (int32_t i = 1; i < c->l; i++)
        if (c->f[i] != c->f[0] || c->w[i] != c->w[1]) return false;
    return true;
}

mg_status mgi_chain_revolve(const mg_chain_dp *c, bool general, double *steps) {
    mg_status s = dp_check(c);
    if (s != MG_OK) return s;
    if (!general && homogeneous(c)) return revolve_homogeneous(c, steps);
    dp_tab t;
    if ((s = tab_solve(c, &t)) != MG_OK) return s;
    *steps = t.rev[ix(&t, 0, c->l, c->slots)];
    tab_free(&t);
    return MG_OK;
}

void mgi_chain_sched_free(mg_chain_sched *q) {
    if (!q) return;
    free(q->kept);
    free(q->snap_start);
    free(q->snap);
    memset(q, 0, sizeof *q);
}

/* Writing the per-step snapshot stacks: steps are reversed last first. */
typedef struct emit {
    const dp_tab *t;
    const mg_chain_dp *c;
    mg_chain_sched *q;
    int32_t *stack, depth;
    int32_t **lists; /* per step: its stack, filled in by put */
    int32_t *n_list;
    int32_t *pool, n_pool;
} emit;

static void put(emit *e, int32_t step) {
    e->lists[step - 1] = e->pool + e->n_pool;
    e->n_list[step - 1] = e->depth;
    memcpy(e->pool + e->n_pool, e->stack, (size_t)e->depth * sizeof *e->stack);
    e->n_pool += e->depth;
}

/* The choice behind rev(a, b, s): 0 (advance from a each time), the
 * split m, or -1 (store all of step a + 1), found by the same arithmetic
 * as tab_solve's, so exactly. */
static int32_t dp_arg(const dp_tab *t, const mg_chain_dp *c, int32_t a,
                      int32_t b, int32_t s) {
    const double want = t->rev[ix(t, a, b, s)];
    double noslot = 0;
    int32_t mt = 0;
    for (int32_t i = a + 1; i < b; i++) noslot += t->P[i] - t->P[a];
    for (int32_t i = a + 1; c->tape && i <= b; i++)
        if (c->tape[i - 1] > mt) mt = c->tape[i - 1];
    if (s >= mt && noslot == want) return 0;
    for (int32_t m = a + 1; m < b; m++) {
        if (c->w[m] > s) continue;
        double v = t->P[m] - t->P[a] + t->rev[ix(t, m, b, s - c->w[m])] +
                   t->rev[ix(t, a, m, s)];
        if (v == want) return m;
    }
    if (c->all && b > a + 1 && s >= c->all[a] &&
        t->rev[ix(t, a + 1, b, s - c->all[a])] == want)
        return -1;
    return 0; /* not reached: want is one of these */
}

/* Reverse a+1..b from state a (a snapshot on the stack, or kept). */
static void emit_rev(emit *e, int32_t a, int32_t b, int32_t s) {
    if (b == a + 1) {
        put(e, b);
        return;
    }
    int32_t m = dp_arg(e->t, e->c, a, b, s);
    if (m < 0) { /* step a + 1 stored whole: its state, then its values */
        e->stack[e->depth++] = a + 1;
        e->stack[e->depth++] = -(a + 1);
        emit_rev(e, a + 1, b, s - e->c->all[a]);
        e->depth -= 2;
        put(e, a + 1);
        return;
    }
    if (m == 0) {
        for (int32_t i = b; i > a; i--) put(e, i);
        return;
    }
    e->stack[e->depth++] = m;
    emit_rev(e, m, b, s - e->c->w[m]);
    e->depth--;
    emit_rev(e, a, m, s);
}

mg_status mgi_chain_schedule(const mg_chain_dp *c, mg_chain_sched *q) {
    memset(q, 0, sizeof *q);
    mg_status st = dp_check(c);
    if (st != MG_OK) return st;
    const int32_t l = c->l, S = c->slots;
    dp_tab t;
    if ((st = tab_solve(c, &t)) != MG_OK) return st;
    size_t nT = (size_t)(l + 1) * (size_t)(S + 1);
    double *T = malloc(nT * sizeof *T);
    int32_t *argT = malloc(nT * sizeof *argT);
    emit e = {.t = &t, .c = c, .q = q};
    e.stack = malloc((size_t)(2 * l + 2) * sizeof *e.stack);
    e.lists = malloc((size_t)l * sizeof *e.lists);
    e.n_list = malloc((size_t)l * sizeof *e.n_list);
    /* a stack is at most one state per slot, plus the state reversed from,
     * and with store-all two entries per slot */
    e.pool = malloc((size_t)l * (size_t)(2 * S + 2) * sizeof *e.pool);
    q->kept = calloc((size_t)(l + 1), sizeof *q->kept);
    q->snap_start = malloc((size_t)(l + 1) * sizeof *q->snap_start);
    if (!T || !argT || !e.stack || !e.lists || !e.n_list || !e.pool ||
        !q->kept || !q->snap_start)
        st = dp_oom();
    for (int32_t a = l - 1; st == MG_OK && a >= 0; a--)
        for (int32_t s = 0; s <= S; s++) {
            double best = t.rev[ix(&t, a, l, s)] + t.P[l] - t.P[a];
            int32_t arg = 0;
            for (int32_t m = a + 1; m < l; m++) {
                if (c->w[m] > s) continue;
                double v = T[(size_t)m * (S + 1) + s - c->w[m]] +
                           t.rev[ix(&t, a, m, s)] + t.P[m] - t.P[a];
                if (v < best) {
                    best = v;
                    arg = m;
                }
            }
            T[(size_t)a * (S + 1) + s] = best;
            argT[(size_t)a * (S + 1) + s] = arg;
        }
    /* dp_check bounds every tape by the slots, so advancing from state 0
     * each time fits: T[S] is finite */
    if (st == MG_OK) {
        q->cost = T[S];
        /* the kept states, and between two of them rev's schedule */
        int32_t a = 0, s = S;
        q->kept[0] = true;
        int32_t n_top = 0; /* the stretches between kept states */
        int32_t *top_a = malloc((size_t)(l + 1) * sizeof *top_a);
        int32_t *top_b = malloc((size_t)(l + 1) * sizeof *top_b);
        int32_t *top_s = malloc((size_t)(l + 1) * sizeof *top_s);
        if (!top_b || !top_a || !top_s) st = dp_oom();
        while (st == MG_OK) {
            int32_t m = argT[(size_t)a * (S + 1) + s];
            top_a[n_top] = a;
            top_s[n_top] = s;
            top_b[n_top++] = m ? m : l;
            if (!m) break;
            q->kept[m] = true;
            s -= c->w[m];
            a = m;
        }
        /* reversed last stretch first */
        for (int32_t i = n_top - 1; st == MG_OK && i >= 0; i--) {
            e.depth = 0;
            emit_rev(&e, top_a[i], top_b[i], top_s[i]);
        }
        if (st == MG_OK) {
            q->snap =
                malloc((size_t)(e.n_pool ? e.n_pool : 1) * sizeof *q->snap);
            if (!q->snap) st = dp_oom();
        }
        int32_t k = 0;
        for (int32_t i = 0; st == MG_OK && i < l; i++) {
            q->snap_start[i] = k;
            memcpy(q->snap + k, e.lists[i],
                   (size_t)e.n_list[i] * sizeof *q->snap);
            k += e.n_list[i];
        }
        if (st == MG_OK) q->snap_start[l] = k;
        free(top_a);
        free(top_b);
        free(top_s);
    }
    free(T);
    free(argT);
    free(e.stack);
    free(e.lists);
    free(e.n_list);
    free(e.pool);
    tab_free(&t);
    if (st != MG_OK) mgi_chain_sched_free(q);
    return st;
}
