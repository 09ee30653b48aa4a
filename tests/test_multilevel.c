/*
 * test_multilevel.c - multi-level recomputation (Revolve's and Rotor's
 * schedules) in the rewriter, with hand-written plans: a tensor is
 * recomputed more than once, from snapshots that are copies themselves,
 * yet gradients equal policy none's bit for bit (dropout included), skip
 * connections stay correct, and the pool's measured peak equals the
 * prediction. The budget policy's search uses such plans to fit budgets
 * below what recomputing each tensor at most once can reach.
 */
#include "helpers.h"
#include "helpers/model.h"

#include "graph/graph.h"
#include "rewrite/rewrite.h"

/* x -> (matmul -> act)^layers -> mse. kind 0: act is tanh; 1: odd layers
 * use dropout; 2: residual, h = h + tanh(h w) (one width); 3: as 1, one
 * width. */
#define ML_MAX_LAYERS 24
#define ML_BATCH 5

typedef struct mchain {
    mg_graph *g;
    int layers, kind;
    int widths[ML_MAX_LAYERS + 1];
    mg_tensor x, target, loss;
    mg_tensor w[ML_MAX_LAYERS], gw[ML_MAX_LAYERS];
} mchain;

static void mchain_forward(mchain *c, int kind, int layers, mg_dtype dt) {
    memset(c, 0, sizeof *c);
    c->layers = layers;
    c->kind = kind;
    for (int l = 0; l <= layers; l++)
        c->widths[l] = kind >= 2 ? 8 : 3 + (l * 7) % 11;
    c->g = mg_graph_new();
    c->x = mg_input(c->g, "x", dt, 2, S(ML_BATCH, c->widths[0]));
    c->target = mg_input(c->g, "target", dt, 2, S(ML_BATCH, c->widths[layers]));
    mg_tensor h = c->x;
    for (int l = 0; l < layers; l++) {
        char name[16];
        snprintf(name, sizeof name, "w%d", l);
        c->w[l] =
            mg_param(c->g, name, dt, 2, S(c->widths[l], c->widths[l + 1]));
        mg_tensor z = mg_matmul(c->g, h, c->w[l], 0, 0);
        if (kind == 2) h = mg_add(c->g, h, mg_tanh(c->g, z));
        else if ((kind == 1 || kind == 3) && l % 2)
            h = mg_dropout(c->g, z, 0.25, (uint64_t)l);
        else h = mg_tanh(c->g, z);
    }
    c->loss = mg_mse(c->g, h, c->target);
    ck_assert(c->loss != MG_NO_TENSOR);
}

/* The forward positions (computed tensors, topological = id order). */
static int positions(const mchain *c, mg_tensor *pos) {
    int n = 0;
    for (mg_tensor t = 0; t < mg_graph_num_tensors(c->g); t++) {
        mg_op op = c->g->nodes[t].op;
        if (op != MG_OP_INPUT && op != MG_OP_PARAM) pos[n++] = t;
    }
    return n;
}

/* A Revolve-like bisection plan over positions [lo, hi): the right half
 * is reversed first, with the separator after lo..mid-1 as a snapshot
 * (every tensor at or before mid-1 read after it), then the left half
 * from the snapshots above. Segments are written in backward order. */
typedef struct gen {
    const mchain *c;
    const mg_tensor *pos;
    int n_pos, leaf;
    int seg_lo[256], seg_hi[256], n_seg;
    mg_tensor snaps[256][64];
    int n_snaps[256];
} gen;

static int last_reader(const gen *G, int p) {
    int last = p;
    for (int q = p + 1; q < G->n_pos; q++) {
        const mg_node *nd = &G->c->g->nodes[G->pos[q]];
        for (int k = 0; k < nd->n_in; k++)
            if (nd->in[k] == G->pos[p]) last = q;
    }
    return last;
}

static void gen_rec(gen *G, int lo, int hi, const mg_tensor *stack, int n_st) {
    if (hi - lo <= G->leaf) {
        int j = G->n_seg++;
        ck_assert(j < 256 && n_st <= 64);
        G->seg_lo[j] = lo;
        G->seg_hi[j] = hi;
        if (n_st) memcpy(G->snaps[j], stack, (size_t)n_st * sizeof *stack);
        G->n_snaps[j] = n_st;
        return;
    }
    int mid = (lo + hi) / 2;
    mg_tensor st[64];
    if (n_st) memcpy(st, stack, (size_t)n_st * sizeof *stack);
    int n = n_st;
    for (int q = lo; q < mid; q++) /* the separator after mid - 1 */
        if (q == mid - 1 || last_reader(G, q) > mid - 1) st[n++] = G->pos[q];
    gen_rec(G, mid, hi, st, n);
    gen_rec(G, lo, mid, stack, n_st);
}

/* Build the plan for c: leaf segments of `leaf` positions; level-0 keeps
 * every keep_every-th position (0: none). */
static void plan_build(const mchain *c, int leaf, int keep_every,
                       mg_budget_point *bp, mg_ml_plan *ml) {
    static gen G;
    mg_tensor pos[4 * ML_MAX_LAYERS + 2];
    memset(&G, 0, sizeof G);
    G.c = c;
    G.pos = pos;
    G.n_pos = positions(c, pos);
    G.leaf = leaf;
    int32_t n = mg_graph_num_tensors(c->g);
    bool *keep = calloc((size_t)n, sizeof *keep);
    /* level 0: kept stretches, each with its own bisection */
    int lo = 0;
    int stretch_ends[64], n_st = 0;
    for (int p = 0; p < G.n_pos; p++)
        if (keep_every && p % keep_every == keep_every - 1 && p + 1 < G.n_pos) {
            keep[pos[p]] = true;
            stretch_ends[n_st++] = p + 1;
        }
    stretch_ends[n_st++] = G.n_pos;
    for (int i = n_st - 1; i >= 0; i--) {
        lo = i ? stretch_ends[i - 1] : 0;
        gen_rec(&G, lo, stretch_ends[i], NULL, 0);
    }
    ml->n = n;
    ml->n_seg = G.n_seg;
    ml->seg = malloc((size_t)n * sizeof *ml->seg);
    ml->snap_start = malloc((size_t)(G.n_seg + 1) * sizeof *ml->snap_start);
    int total = 0;
    for (int j = 0; j < G.n_seg; j++) total += G.n_snaps[j];
    ml->snap = malloc((size_t)(total ? total : 1) * sizeof *ml->snap);
    for (int32_t t = 0; t < n; t++) ml->seg[t] = -1;
    /* numbered in position order: backward order reversed */
    int k = 0;
    for (int j = 0; j < G.n_seg; j++) {
        int src = G.n_seg - 1 - j;
        ml->snap_start[j] = k;
        for (int p = G.seg_lo[src]; p < G.seg_hi[src]; p++) ml->seg[pos[p]] = j;
        for (int i = 0; i < G.n_snaps[src]; i++)
            ml->snap[k++] = G.snaps[src][i];
    }
    ml->snap_start[G.n_seg] = k;
    memset(bp, 0, sizeof *bp);
    bp->search.segment_factor = 1.0;
    bp->keep_set = keep;
    bp->ml = ml;
}

typedef struct mres {
    size_t predicted, peak;
    double rflops, loss;
    double *grads[ML_MAX_LAYERS];
    int max_copies; /* the most copies of one forward tensor */
} mres;

/* Compile loss and gradients (bound to caller memory), run once. */
static void mchain_run(const mchain *c, mg_dtype dt, mres *m) {
    memset(m, 0, sizeof *m);
    const int L = c->layers;
    size_t es = mg_dtype_size(dt);
    mg_tensor outs[1 + ML_MAX_LAYERS] = {c->loss};
    mg_binding b[3 + 2 * ML_MAX_LAYERS];
    void *mem[3 + 2 * ML_MAX_LAYERS] = {NULL};
    int64_t numel[3 + 2 * ML_MAX_LAYERS];
    int nb = 0;
    double lossbuf = 0;
    b[nb++] = (mg_binding){c->loss, &lossbuf};
    for (int l = 0; l < L; l++) {
        outs[1 + l] = c->gw[l];
        mem[nb] = calloc((size_t)c->widths[l] * c->widths[l + 1], es);
        b[nb] = (mg_binding){c->gw[l], mem[nb]};
        nb++;
    }
    const int n_grad_binds = nb;
    numel[nb] = ML_BATCH * c->widths[0];
    b[nb++].tensor = c->x;
    numel[nb] = ML_BATCH * c->widths[L];
    b[nb++].tensor = c->target;
    for (int l = 0; l < L; l++) {
        numel[nb] = (int64_t)c->widths[l] * c->widths[l + 1];
        b[nb++].tensor = c->w[l];
    }
    th_rng r;
    th_rng_init(&r, 11);
    for (int i = n_grad_binds; i < nb; i++) {
        b[i].data = mem[i] = malloc(es * (size_t)numel[i]);
        if (dt == MG_F64) th_fill_f64(&r, mem[i], numel[i], -1, 1, 0);
        else th_fill_f32(&r, mem[i], numel[i], -1, 1, 0);
    }
    mg_plan *p = NULL;
    ck_assert_msg(mg_plan_compile(c->g, outs, 1 + L, NULL, &p) == MG_OK, "%s",
                  mg_last_error());
    mg_plan_summary s;
    ck_assert(mg_plan_summarize(p, b, n_grad_binds, &s) == MG_OK);
    m->predicted = s.predicted_peak;
    m->rflops = s.recompute_flops;
    mg_exec *ex = NULL;
    ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
    ck_assert_msg(mg_exec_run(ex, p, b, nb, 5) == MG_OK, "%s", mg_last_error());
    mg_pool_stats st;
    mg_exec_pool_stats(ex, &st);
    m->peak = st.peak_bytes_in_use;
    mg_exec_free(ex);
    mg_plan_free(p);
    float lf;
    memcpy(&lf, &lossbuf, sizeof lf);
    m->loss = dt == MG_F64 ? lossbuf : (double)lf;
    for (int l = 0; l < L; l++) {
        int64_t n = (int64_t)c->widths[l] * c->widths[l + 1];
        m->grads[l] = malloc((size_t)n * sizeof(double));
        for (int64_t i = 0; i < n; i++)
            m->grads[l][i] = dt == MG_F64 ? ((double *)mem[1 + l])[i]
                                          : ((float *)mem[1 + l])[i];
    }
    for (int i = 1; i < nb; i++) free(mem[i]);
    /* copies per forward tensor */
    int32_t n = mg_graph_num_tensors(c->g);
    int *cnt = calloc((size_t)n, sizeof *cnt);
    for (int32_t t = 0; t < n; t++)
        if (c->g->nodes[t].flags & MG_NODE_RECOMPUTE) {
            int k = ++cnt[c->g->nodes[t].orig];
            if (k > m->max_copies) m->max_copies = k;
        }
    free(cnt);
}

static void mres_free(mres *m) {
    for (int l = 0; l < ML_MAX_LAYERS; l++) free(m->grads[l]);
}

static void same_grads(const mchain *c, const mres *a, const mres *b,
                       const char *what) {
    ck_assert_msg(memcmp(&a->loss, &b->loss, sizeof a->loss) == 0,
                  "%s: loss differs", what);
    for (int l = 0; l < c->layers; l++)
        ck_assert_msg(memcmp(a->grads[l], b->grads[l],
                             sizeof(double) * (size_t)c->widths[l] *
                                 (size_t)c->widths[l + 1]) == 0,
                      "%s: gradient of w%d differs from policy none's", what,
                      l);
}

/* _i: kind (0 tanh, 1 dropout, 2 residual) x dtype x (leaf, keep_every) */
START_TEST(test_hand_plan_bit_exact) {
    static const int cfg[][2] = {{1, 0}, {2, 0}, {3, 0}, {2, 6}, {1, 5}};
    const int n_cfg = (int)(sizeof cfg / sizeof *cfg);
    const int kind = _i / (2 * n_cfg);
    const mg_dtype dt = (_i / n_cfg) % 2 ? MG_F64 : MG_F32;
    const int leaf = cfg[_i % n_cfg][0], keep_every = cfg[_i % n_cfg][1];
    const int layers = 12;

    mchain ref;
    mchain_forward(&ref, kind, layers, dt);
    ck_assert(mg_gradients(ref.g, &ref.loss, 1, NULL, ref.w, layers, NULL,
                           ref.gw) == MG_OK);
    mres r0;
    mchain_run(&ref, dt, &r0);
    ck_assert_uint_eq(r0.peak, r0.predicted);

    mchain c;
    mchain_forward(&c, kind, layers, dt);
    mg_budget_point bp;
    mg_ml_plan ml;
    plan_build(&c, leaf, keep_every, &bp, &ml);
    ck_assert_msg(
        mgi_gradients_point(c.g, &c.loss, 1, c.w, layers, &bp, c.gw) == MG_OK,
        "%s", mg_last_error());
    mres r1;
    mchain_run(&c, dt, &r1);
    char what[96];
    snprintf(what, sizeof what, "kind %d %s leaf %d keep_every %d", kind,
             mg_dtype_name(dt), leaf, keep_every);
    same_grads(&c, &r1, &r0, what);
    ck_assert_msg(r1.peak == r1.predicted, "%s: measured %zu, predicted %zu",
                  what, r1.peak, r1.predicted);
    /* multi-level: some tensor is recomputed more than once */
    ck_assert_msg(r1.max_copies >= 2, "%s: at most %d copies", what,
                  r1.max_copies);
    ck_assert_msg(r1.predicted < r0.predicted, "%s: peak %zu vs none's %zu",
                  what, r1.predicted, r0.predicted);
    mres_free(&r0);
    mres_free(&r1);
    free(bp.keep_set);
    mgi_ml_plan_free(&ml);
    mg_graph_free(ref.g);
    mg_graph_free(c.g);
}
END_TEST

/* Without a plan each tensor is recomputed at most once, as before. */
START_TEST(test_no_plan_single_level) {
    mchain c;
    mchain_forward(&c, 0, 10, MG_F32);
    mg_budget_point bp;
    mg_ml_plan ml;
    plan_build(&c, 2, 0, &bp, &ml);
    bp.ml = NULL;
    ck_assert(mgi_gradients_point(c.g, &c.loss, 1, c.w, 10, &bp, c.gw) ==
              MG_OK);
    mres r;
    mchain_run(&c, MG_F32, &r);
    ck_assert_int_eq(r.max_copies, 1);
    mres_free(&r);
    free(bp.keep_set);
    mgi_ml_plan_free(&ml);
    mg_graph_free(c.g);
}
END_TEST

/* Peak predicted for m's training step with d's bindings; run: also run it
 * once and store the pool's measured peak. */
static size_t mlp_step(const tm_mlp *m, tm_mlp_data *d, int run,
                       size_t *measured) {
    mg_plan *p = NULL;
    ck_assert_msg(mg_plan_compile(m->g, d->outs, d->n_outs, NULL, &p) == MG_OK,
                  "%s", mg_last_error());
    mg_plan_summary s;
    ck_assert(mg_plan_summarize(p, d->binds, d->n_binds, &s) == MG_OK);
    if (run) {
        mg_exec *ex = NULL;
        ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
        ck_assert_msg(mg_exec_run(ex, p, d->binds, d->n_binds, 3) == MG_OK,
                      "%s", mg_last_error());
        mg_pool_stats st;
        mg_exec_pool_stats(ex, &st);
        *measured = st.peak_bytes_in_use;
        mg_exec_free(ex);
    }
    mg_plan_free(p);
    return s.predicted_peak;
}

/* An MLP with dropout, at 0.6 of the memory policy's peak (which, at about
 * 2 sqrt(n) activations, is near the least a single-level schedule
 * reaches): the budget policy fits with a multi-level plan, gradients
 * equal policy none's bit for bit, and the measured peak is the
 * predicted one. */
START_TEST(test_budget_below_single_level) {
    const int depth = 48, in = 8, width = 32, out = 5, batch = 6;
    tm_mlp none, mem, bud;
    tm_mlp_data dn, dm, db;
    size_t meas_none = 0, meas = 0;
    ck_assert(tm_mlp_build(&none, MG_F32, depth, in, width, out, batch, 1, 0.2,
                           NULL) == MG_OK);
    tm_mlp_data_init(&dn, &none, 3, 1);
    size_t peak_none = mlp_step(&none, &dn, 1, &meas_none);
    ck_assert_uint_eq(peak_none, meas_none);
    mg_checkpoints ckm = {.policy = MG_CKPT_MEMORY};
    ck_assert(tm_mlp_build(&mem, MG_F32, depth, in, width, out, batch, 1, 0.2,
                           &ckm) == MG_OK);
    tm_mlp_data_init(&dm, &mem, 3, 1);
    size_t peak_mem = mlp_step(&mem, &dm, 0, &meas);
    mg_checkpoints ck = {.policy = MG_CKPT_BUDGET,
                         .budget_bytes = peak_mem * 6 / 10};
    ck_assert_msg(tm_mlp_build(&bud, MG_F32, depth, in, width, out, batch, 1,
                               0.2, &ck) == MG_OK,
                  "budget %zu (memory policy %zu, none %zu): %s",
                  ck.budget_bytes, peak_mem, peak_none, mg_last_error());
    tm_mlp_data_init(&db, &bud, 3, 1);
    size_t peak = mlp_step(&bud, &db, 1, &meas);
    ck_assert_uint_le(peak, ck.budget_bytes);
    ck_assert_uint_eq(peak, meas);
    ck_assert(memcmp(&db.loss, &dn.loss, sizeof db.loss) == 0);
    size_t es = sizeof(float);
    int fan_in = in;
    for (int l = 0; l <= depth; l++) {
        int fan_out = l == depth ? out : width;
        ck_assert_msg(memcmp(db.gw[l], dn.gw[l],
                             es * (size_t)fan_in * (size_t)fan_out) == 0 &&
                          memcmp(db.gb[l], dn.gb[l], es * (size_t)fan_out) == 0,
                      "layer %d: gradients differ from policy none's", l);
        fan_in = fan_out;
    }
    int32_t n = mg_graph_num_tensors(bud.g);
    int *cnt = calloc((size_t)n, sizeof *cnt), most = 0;
    for (int32_t t = 0; t < n; t++)
        if (bud.g->nodes[t].flags & MG_NODE_RECOMPUTE) {
            int k = ++cnt[bud.g->nodes[t].orig];
            if (k > most) most = k;
        }
    free(cnt);
    ck_assert_int_ge(most, 2);
    tm_mlp_data_free(&dn, &none);
    tm_mlp_data_free(&dm, &mem);
    tm_mlp_data_free(&db, &bud);
    mg_graph_free(none.g);
    mg_graph_free(mem.g);
    mg_graph_free(bud.g);
}
END_TEST

/* The budget policy at the smallest budget that fits (which the NOMEM
 * message names) on the dropout and the residual chain of one width: a
 * multi-level plan, gradients equal to policy none's bit for bit, measured
 * peak equal to the predicted one and within the budget. */
START_TEST(test_budget_minimum_multilevel) {
    const int kind = _i ? 2 : 3, layers = ML_MAX_LAYERS;
    const mg_dtype dt = MG_F64;
    mchain ref;
    mchain_forward(&ref, kind, layers, dt);
    ck_assert(mg_gradients(ref.g, &ref.loss, 1, NULL, ref.w, layers, NULL,
                           ref.gw) == MG_OK);
    mres r0;
    mchain_run(&ref, dt, &r0);

    mchain c;
    mchain_forward(&c, kind, layers, dt);
    mg_checkpoints ck = {.policy = MG_CKPT_BUDGET, .budget_bytes = 1};
    ck_assert_int_eq(
        mg_gradients(c.g, &c.loss, 1, NULL, c.w, layers, &ck, c.gw),
        MG_ERR_NOMEM);
    ck.budget_bytes = th_budget_smallest();
    ck_assert_msg(mg_gradients(c.g, &c.loss, 1, NULL, c.w, layers, &ck, c.gw) ==
                      MG_OK,
                  "%s", mg_last_error());
    mres r1;
    mchain_run(&c, dt, &r1);
    char what[64];
    snprintf(what, sizeof what, "kind %d at %zu bytes", kind, ck.budget_bytes);
    same_grads(&c, &r1, &r0, what);
    ck_assert_uint_eq(r1.peak, r1.predicted);
    ck_assert_uint_le(r1.peak, ck.budget_bytes);
    ck_assert_msg(r1.max_copies >= 2, "%s: at most %d copies", what,
                  r1.max_copies);
    mres_free(&r0);
    mres_free(&r1);
    mg_graph_free(ref.g);
    mg_graph_free(c.g);
}
END_TEST

/* Rotor's store-all option in the chain DP (issue 29 item 3): on a chain
 * of steps costing 1, 10, 1 with snapshots of 2 slots and 2 slots free,
 * Revolve's options cost 11 forward steps (snapshot state 1, advance the
 * expensive step once more); storing step 1 whole (2 slots) costs 10 (its
 * reversal recomputes nothing). On random heterogeneous chains the
 * option never costs more, and its schedules list every stored step after
 * its state, on the stack of each step reversed meanwhile. */
START_TEST(test_chain_store_all) {
    const double f[3] = {1, 10, 1};
    const int32_t w[3] = {1, 2, 2}, all[3] = {2, 2, 2};
    mg_chain_dp c = {.l = 3, .f = f, .w = w, .slots = 2};
    double rev = -1, rev_all = -1;
    ck_assert(mgi_chain_revolve(&c, true, &rev) == MG_OK);
    c.all = all;
    ck_assert(mgi_chain_revolve(&c, true, &rev_all) == MG_OK);
    ck_assert_double_eq(rev, 11);
    ck_assert_double_eq(rev_all, 10);
    const int32_t bad[3] = {2, 0, 2};
    c.all = bad;
    ck_assert_int_eq(mgi_chain_revolve(&c, true, &rev), MG_ERR_INVALID_ARG);
    th_rng r;
    th_rng_init(&r, 29);
    for (int k = 0; k < 64; k++) {
        int32_t l = 2 + (int32_t)(th_rng_next(&r) % 9), slots;
        double ff[12];
        int32_t ww[12], aa[12], tt[12];
        slots = 1 + (int32_t)(th_rng_next(&r) % 8);
        for (int32_t i = 0; i < l; i++) {
            ff[i] = 1 + (double)(th_rng_next(&r) % 20);
            ww[i] = 1 + (int32_t)(th_rng_next(&r) % 3);
            tt[i] = (int32_t)(th_rng_next(&r) % 2);
            aa[i] = 1 + (int32_t)(th_rng_next(&r) % 4);
        }
        mg_chain_dp d = {.l = l, .f = ff, .w = ww, .slots = slots, .tape = tt};
        mg_chain_sched q0, q1;
        ck_assert(mgi_chain_schedule(&d, &q0) == MG_OK);
        d.all = aa;
        ck_assert(mgi_chain_schedule(&d, &q1) == MG_OK);
        ck_assert_msg(q1.cost <= q0.cost, "chain %d: store-all %g > %g", k,
                      q1.cost, q0.cost);
        for (int32_t i = 0; i < q1.snap_start[l]; i++)
            if (q1.snap[i] < 0) {
                ck_assert_int_gt(i, 0);
                ck_assert_int_eq(q1.snap[i - 1], -q1.snap[i]);
            }
        mgi_chain_sched_free(&q0);
        mgi_chain_sched_free(&q1);
    }
}
END_TEST

int main(void) {
    Suite *s = suite_create("multilevel");
    th_add_tcase_loops(s, "plans", 300,
                       TH_LOOPS({test_hand_plan_bit_exact, 0, 3 * 2 * 5},
                                {test_budget_minimum_multilevel, 0, 2}),
                       TH_TESTS(test_no_plan_single_level, test_chain_store_all,
                                test_budget_below_single_level));
    return th_run_suite(s);
}
