/*
 * test_budget.c - MG_CKPT_BUDGET: on small heterogeneous chains no
 * checkpoint set found by exhaustive search recomputes fewer flops within
 * the budget; an infeasible budget fails with MG_ERR_NOMEM naming the
 * smallest budget that fits (and that budget then fits); gradients equal
 * policy none's bit for bit, dropout included; the pool's measured peak
 * equals the prediction and stays within the budget; plans carry the
 * budget they were compiled with (mg_plan_options.budget_bytes), and their
 * summaries and reports compare it with the peak in the budget's own
 * measure (budget_peak: outputs in caller memory, whatever is bound), in
 * which the NOMEM message's figures are given too.
 */
#include "helpers.h"

#include "memgrad_models.h"

/* ------------------------------------------------------------------ chain
 * x -> (matmul -> tanh or dropout)^layers -> mse: 2 * layers forward
 * tensors besides the loss, of heterogeneous widths. */

#define CH_LAYERS 5
/* The widths of the chain under test; test_exhaustive_chain tries each of
 * ch_configs. */
static int ch_widths[CH_LAYERS + 1] = {6, 20, 5, 32, 9, 24};
static const int ch_configs[][CH_LAYERS + 1] = {
    {6, 20, 5, 32, 9, 24},
    {40, 3, 3, 48, 2, 64},
    {16, 16, 16, 16, 16, 16},
    {2, 64, 8, 64, 8, 4},
    /* arbitrary widths; the last one defeated a coarser grid of M */
    {3, 3, 6, 8, 4, 24},
    {1, 32, 64, 2, 16, 6},
    {24, 2, 48, 12, 1, 64},
    {64, 4, 32, 1, 48, 8},
    {48, 48, 4, 3, 64, 4}};
#define CH_BATCH 7

typedef struct chain {
    mg_graph *g;
    mg_tensor x, target, loss;
    mg_tensor w[CH_LAYERS], gw[CH_LAYERS];
    mg_tensor fwd[2 * CH_LAYERS]; /* the forward tensors, in order */
} chain;

/* dropout: the odd layers' activation is dropout instead of tanh. */
static mg_status chain_build(chain *c, int dropout, mg_dtype dt,
                             const mg_checkpoints *ck) {
    memset(c, 0, sizeof *c);
    c->g = mg_graph_new();
    c->x = mg_input(c->g, "x", dt, 2, S(CH_BATCH, ch_widths[0]));
    c->target =
        mg_input(c->g, "target", dt, 2, S(CH_BATCH, ch_widths[CH_LAYERS]));
    mg_tensor h = c->x;
    for (int l = 0; l < CH_LAYERS; l++) {
        char name[16];
        snprintf(name, sizeof name, "w%d", l);
        c->w[l] =
            mg_param(c->g, name, dt, 2, S(ch_widths[l], ch_widths[l + 1]));
        h = c->fwd[2 * l] = mg_matmul(c->g, h, c->w[l], 0, 0);
        h = c->fwd[2 * l + 1] = dropout && (l % 2)
                                    ? mg_dropout(c->g, h, 0.3, (uint64_t)l)
                                    : mg_tanh(c->g, h);
    }
    c->loss = mg_mse(c->g, h, c->target);
    if (c->loss == MG_NO_TENSOR) return MG_ERR_INTERNAL;
    return mg_gradients(c->g, &c->loss, 1, NULL, c->w, CH_LAYERS, ck, c->gw);
}

typedef struct measured {
    size_t predicted, peak, budget_peak;
    double rflops, loss;
    double *grads[CH_LAYERS]; /* as doubles, or NULL when not run */
} measured;

/* Compile loss and gradients, the gradients and the loss bound to caller
 * memory, and read the summary; run: also execute and keep the
 * gradients. */
static void chain_measure(const chain *c, mg_dtype dt, int run, measured *m) {
    memset(m, 0, sizeof *m);
    size_t es = mg_dtype_size(dt);
    mg_tensor outs[1 + CH_LAYERS] = {c->loss};
    mg_binding b[3 + 2 * CH_LAYERS];
    void *mem[3 + 2 * CH_LAYERS];
    int64_t numel[3 + 2 * CH_LAYERS];
    int nb = 0;
    double lossbuf = 0;
    b[nb++] = (mg_binding){c->loss, &lossbuf};
    for (int l = 0; l < CH_LAYERS; l++) {
        outs[1 + l] = c->gw[l];
        mem[nb] = calloc((size_t)ch_widths[l] * ch_widths[l + 1], es);
        b[nb] = (mg_binding){c->gw[l], mem[nb]};
        nb++;
    }
    int n_grad_binds = nb;
    th_rng r;
    th_rng_init(&r, 7);
    if (run) {
        numel[nb] = CH_BATCH * ch_widths[0];
        b[nb++].tensor = c->x;
        numel[nb] = CH_BATCH * ch_widths[CH_LAYERS];
        b[nb++].tensor = c->target;
        for (int l = 0; l < CH_LAYERS; l++) {
            numel[nb] = (int64_t)ch_widths[l] * ch_widths[l + 1];
            b[nb++].tensor = c->w[l];
        }
        for (int i = n_grad_binds; i < nb; i++) {
            b[i].data = mem[i] = malloc(es * (size_t)numel[i]);
            if (dt == MG_F64) th_fill_f64(&r, mem[i], numel[i], -1, 1, 0);
            else th_fill_f32(&r, mem[i], numel[i], -1, 1, 0);
        }
    }
    /* unfused, as the budget's measure counts (mg_plan_summary); the
     * plan that fuses element-wise chains peaks no higher */
    mg_plan *p = NULL;
    const mg_plan_options unfused = {.no_fusion = 1};
    ck_assert_msg(mg_plan_compile(c->g, outs, 1 + CH_LAYERS, NULL, &p) == MG_OK,
                  "%s", mg_last_error());
    mg_plan_summary s;
    ck_assert(mg_plan_summarize(p, b, n_grad_binds, &s) == MG_OK);
    ck_assert_uint_le(s.predicted_peak, s.budget_peak);
    mg_plan_free(p);
    ck_assert_msg(mg_plan_compile(c->g, outs, 1 + CH_LAYERS, &unfused, &p) ==
                      MG_OK,
                  "%s", mg_last_error());
    ck_assert(mg_plan_summarize(p, b, n_grad_binds, &s) == MG_OK);
    m->predicted = s.predicted_peak;
    m->budget_peak = s.budget_peak;
    m->rflops = s.recompute_flops;
    /* every output is bound: the prediction is the budget's measure */
    ck_assert_uint_eq(s.budget_peak, s.predicted_peak);
    if (run) {
        mg_exec *ex = NULL;
        ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
        ck_assert_msg(mg_exec_run(ex, p, b, nb, 5) == MG_OK, "%s",
                      mg_last_error());
        mg_pool_stats st;
        mg_exec_pool_stats(ex, &st);
        m->peak = st.peak_bytes_in_use;
        mg_exec_free(ex);
        float lf;
        memcpy(&lf, &lossbuf, sizeof lf);
        m->loss = dt == MG_F64 ? lossbuf : (double)lf;
        for (int l = 0; l < CH_LAYERS; l++) {
            int64_t n = (int64_t)ch_widths[l] * ch_widths[l + 1];
            m->grads[l] = malloc((size_t)n * sizeof(double));
            for (int64_t i = 0; i < n; i++)
                m->grads[l][i] = dt == MG_F64 ? ((double *)mem[1 + l])[i]
                                              : ((float *)mem[1 + l])[i];
        }
    }
    mg_plan_free(p);
    for (int i = 1; i < nb; i++) free(mem[i]);
}

static void measured_free(measured *m) {
    for (int l = 0; l < CH_LAYERS; l++) free(m->grads[l]);
}

static void same_grads(const char *what, const measured *a, const measured *b) {
    ck_assert_msg(memcmp(&a->loss, &b->loss, sizeof a->loss) == 0,
                  "%s: loss %.17g vs %.17g", what, a->loss, b->loss);
    for (int l = 0; l < CH_LAYERS; l++)
        ck_assert_msg(memcmp(a->grads[l], b->grads[l],
                             sizeof(double) * (size_t)ch_widths[l] *
                                 (size_t)ch_widths[l + 1]) == 0,
                      "%s: gradient of w%d differs from policy none's", what,
                      l);
}

/* Build the chain under ck (must succeed) and measure it. */
static void chain_under(const mg_checkpoints *ck, int dropout, mg_dtype dt,
                        int run, measured *m) {
    chain c;
    mg_status s = chain_build(&c, dropout, dt, ck);
    ck_assert_msg(s == MG_OK, "%s", mg_last_error());
    chain_measure(&c, dt, run, m);
    mg_graph_free(c.g);
}

/* ------------------------------------------------------------------ tests */

/* Every checkpoint set of the chain's 10 forward tensors, by exhaustive
 * search: at each budget between the smallest peak any set reaches and
 * policy none's, the budget policy fits and no set within the budget
 * recomputes fewer flops. */
START_TEST(test_exhaustive_chain) {
    const int config = _i / 2, dropout = _i % 2;
    memcpy(ch_widths, ch_configs[config], sizeof ch_widths);
    const int n = 2 * CH_LAYERS;
    const int n_sets = 1 << n;
    size_t *peak = malloc(sizeof *peak * (size_t)n_sets);
    double *rfl = malloc(sizeof *rfl * (size_t)n_sets);
    chain probe;
    ck_assert(chain_build(&probe, dropout, MG_F32, NULL) == MG_OK);
    size_t lo = SIZE_MAX, hi = 0;
    for (int set = 0; set < n_sets; set++) {
        mg_tensor listed[2 * CH_LAYERS];
        int k = 0;
        for (int i = 0; i < n; i++)
            if (set & (1 << i)) listed[k++] = probe.fwd[i];
        mg_checkpoints ck = {
            .policy = MG_CKPT_COLLECTION, .tensors = listed, .n_tensors = k};
        measured m;
        chain_under(&ck, dropout, MG_F32, 0, &m);
        peak[set] = m.predicted;
        rfl[set] = m.rflops;
        if (m.predicted < lo) lo = m.predicted;
        if (m.predicted > hi) hi = m.predicted;
    }
    mg_graph_free(probe.g);
    int budgets = 0;
    for (size_t budget = lo; budget <= hi + 64; budget += (hi - lo) / 23 + 1) {
        double best = INFINITY;
        int best_set = -1;
        for (int set = 0; set < n_sets; set++)
            if (peak[set] <= budget && rfl[set] < best) {
                best = rfl[set];
                best_set = set;
            }
        mg_checkpoints ck = {.policy = MG_CKPT_BUDGET, .budget_bytes = budget};
        measured m;
        chain_under(&ck, dropout, MG_F32, 0, &m);
        ck_assert_msg(m.predicted <= budget, "budget %zu: predicted %zu",
                      budget, m.predicted);
        ck_assert_msg(m.rflops <= best,
                      "chain %d%s, budget %zu: the budget policy recomputes "
                      "%.0f flops, exhaustive search finds %.0f (set %#x, "
                      "peak %zu)",
                      config, dropout ? " with dropout" : "", budget, m.rflops,
                      best, (unsigned)best_set, peak[best_set]);
        budgets++;
    }
    ck_assert_int_ge(budgets, 20);
    free(peak);
    free(rfl);
}
END_TEST

/* Too small a budget: MG_ERR_NOMEM naming the smallest budget that fits,
 * the graph left as it was; asking for that budget then succeeds. */
START_TEST(test_infeasible_names_minimum) {
    chain c;
    mg_checkpoints ck = {.policy = MG_CKPT_BUDGET, .budget_bytes = 256};
    mg_status s = chain_build(&c, 1, MG_F32, &ck);
    ck_assert_int_eq(s, MG_ERR_NOMEM);
    const char *msg = mg_last_error();
    const char *at = strstr(msg, "smallest budget that fits is ");
    ck_assert_msg(at && strstr(msg, "256 bytes"), "%s", msg);
    size_t minimum = (size_t)strtoull(
        at + strlen("smallest budget that fits is "), NULL, 10);
    ck_assert_msg(minimum > 256, "%s", msg);
    ck_assert_int_eq(mg_graph_num_tensors(c.g), 2 + 3 * CH_LAYERS + 1);
    ck_assert_int_eq(mg_graph_checkpoints(c.g, NULL, 0), 0);
    mg_graph_free(c.g);
    measured m;
    ck.budget_bytes = minimum;
    chain_under(&ck, 1, MG_F32, 0, &m);
    ck_assert_uint_le(m.predicted, minimum);
    ck.budget_bytes = minimum - 1;
    s = chain_build(&c, 1, MG_F32, &ck);
    mg_graph_free(c.g);
    ck_assert_msg(s == MG_ERR_NOMEM, "budget one byte under the minimum %zu",
                  minimum);
}
END_TEST

/* Gradients equal policy none's bit for bit, dropout included, in f32 and
 * f64, at budgets from the tightest to none's peak; the pool's measured
 * peak equals the prediction and fits. */
START_TEST(test_bit_exact_and_measured_peak) {
    for (int dt_i = 0; dt_i < 2; dt_i++) {
        mg_dtype dt = dt_i ? MG_F64 : MG_F32;
        measured ref;
        chain_under(NULL, 1, dt, 1, &ref);
        ck_assert_uint_eq(ref.peak, ref.predicted);
        chain c;
        mg_checkpoints ck = {.policy = MG_CKPT_BUDGET, .budget_bytes = 1};
        ck_assert(chain_build(&c, 1, dt, &ck) == MG_ERR_NOMEM);
        size_t minimum = th_budget_smallest();
        mg_graph_free(c.g);
        int recomputed = 0;
        for (int k = 0; k <= 4; k++) {
            ck.budget_bytes =
                minimum + (ref.predicted - minimum) * (size_t)k / 4;
            measured m;
            chain_under(&ck, 1, dt, 1, &m);
            same_grads("budget vs none", &m, &ref);
            ck_assert_uint_eq(m.peak, m.predicted);
            ck_assert_uint_le(m.peak, ck.budget_bytes);
            if (m.rflops > 0) recomputed++;
            if (k == 4) ck_assert(m.rflops == 0); /* none's peak: no copies */
            measured_free(&m);
        }
        ck_assert_int_ge(recomputed, 1);
        measured_free(&ref);
    }
}
END_TEST

/* The NOMEM message's two figures are in the budget's measure: "policy
 * none needs" is the budget_peak of plain backprop's plan of the loss and
 * gradients, and "the smallest budget that fits" is the budget_peak of
 * the plan the policy then makes at that budget, which one byte less does
 * not fit. */
START_TEST(test_nomem_figures_are_budget_peaks) {
    for (int config = 0; config < 4; config++) {
        memcpy(ch_widths, ch_configs[config], sizeof ch_widths);
        chain c;
        mg_checkpoints ck = {.policy = MG_CKPT_BUDGET, .budget_bytes = 1};
        ck_assert_int_eq(chain_build(&c, 1, MG_F32, &ck), MG_ERR_NOMEM);
        const char *msg = mg_last_error();
        const char *at = strstr(msg, "fits is "), *no = strstr(msg, "needs ");
        ck_assert_msg(at && no, "%s", msg);
        size_t minimum = (size_t)strtoull(at + 8, NULL, 10);
        size_t none_needs = (size_t)strtoull(no + 6, NULL, 10);
        mg_graph_free(c.g);
        measured none;
        chain_under(NULL, 1, MG_F32, 0, &none);
        ck_assert_uint_eq(none.budget_peak, none_needs);
        measured m;
        ck.budget_bytes = minimum;
        chain_under(&ck, 1, MG_F32, 0, &m);
        ck_assert_uint_eq(m.budget_peak, minimum);
        ck.budget_bytes = minimum - 1;
        ck_assert_int_eq(chain_build(&c, 1, MG_F32, &ck), MG_ERR_NOMEM);
        mg_graph_free(c.g);
    }
    memcpy(ch_widths, ch_configs[0], sizeof ch_widths);
}
END_TEST

/* A y that backward reads (tanh's output, seeded with a gradient): the
 * budget's measure has it in caller memory, as the plan of the y and the
 * gradients does, so the NOMEM figures are that plan's budget_peak. */
#define TY_LAYERS 6
static mg_status tanh_build(mg_graph *g, const mg_checkpoints *ck,
                            mg_tensor *outs) {
    mg_tensor h = mg_input(g, "x", MG_F32, 2, S(64, 32)), w[TY_LAYERS];
    for (int l = 0; l < TY_LAYERS; l++) {
        char name[16];
        snprintf(name, sizeof name, "w%d", l);
        /* the last layer wide: the peak is where backward reads y */
        w[l] =
            mg_param(g, name, MG_F32, 2, S(32, l == TY_LAYERS - 1 ? 512 : 32));
        h = mg_tanh(g, mg_matmul(g, h, w[l], 0, 0));
    }
    mg_tensor seed = mg_input(g, "dy", MG_F32, 2, S(64, 512));
    outs[0] = h;
    return mg_gradients(g, &h, 1, &seed, w, TY_LAYERS, ck, outs + 1);
}

static size_t tanh_budget_peak(const mg_checkpoints *ck, size_t plan_budget) {
    mg_graph *g = mg_graph_new();
    mg_tensor outs[1 + TY_LAYERS];
    ck_assert_msg(tanh_build(g, ck, outs) == MG_OK, "%s", mg_last_error());
    mg_plan *p = NULL;
    const mg_plan_options o = {.budget_bytes = plan_budget};
    ck_assert(mg_plan_compile(g, outs, 1 + TY_LAYERS, &o, &p) == MG_OK);
    mg_plan_summary s;
    ck_assert(mg_plan_summarize(p, NULL, 0, &s) == MG_OK);
    ck_assert_uint_eq(s.budget_bytes, plan_budget);
    mg_plan_free(p);
    mg_graph_free(g);
    return s.budget_peak;
}

START_TEST(test_nomem_figures_with_y_read_by_backward) {
    mg_graph *g = mg_graph_new();
    mg_tensor outs[1 + TY_LAYERS];
    mg_checkpoints ck = {.policy = MG_CKPT_BUDGET, .budget_bytes = 1};
    ck_assert_int_eq(tanh_build(g, &ck, outs), MG_ERR_NOMEM);
    const char *msg = mg_last_error();
    const char *at = strstr(msg, "fits is "), *no = strstr(msg, "needs ");
    ck_assert_msg(at && no, "%s", msg);
    size_t minimum = (size_t)strtoull(at + 8, NULL, 10);
    size_t none_needs = (size_t)strtoull(no + 6, NULL, 10);
    mg_graph_free(g);
    ck_assert_uint_eq(tanh_budget_peak(NULL, 0), none_needs);
    ck.budget_bytes = minimum;
    ck_assert_uint_eq(tanh_budget_peak(&ck, minimum), minimum);
    ck_assert_uint_lt(minimum, none_needs);
}
END_TEST

/* A deeper MLP (the shared test model) at half of none's peak: fits, equal
 * gradients, and the summary and report carry the budget. */
START_TEST(test_mlp_summary_and_report) {
    tm_mlp plain;
    ck_assert(tm_mlp_build(&plain, MG_F32, 24, 8, 32, 5, 6, 1, 0.2, NULL) ==
              MG_OK);
    tm_mlp_data d;
    tm_mlp_data_init(&d, &plain, 3, 1);
    mg_plan *p = NULL;
    ck_assert(mg_plan_compile(plain.g, d.outs, d.n_outs, NULL, &p) == MG_OK);
    mg_plan_summary none;
    ck_assert(mg_plan_summarize(p, d.binds, d.n_binds, &none) == MG_OK);
    ck_assert_uint_eq(none.budget_bytes, 0);
    mg_plan_free(p);
    tm_mlp_data_free(&d, &plain);
    mg_graph_free(plain.g);

    tm_mlp m;
    mg_checkpoints ck = {.policy = MG_CKPT_BUDGET,
                         .budget_bytes = none.predicted_peak / 2};
    ck_assert_msg(tm_mlp_build(&m, MG_F32, 24, 8, 32, 5, 6, 1, 0.2, &ck) ==
                      MG_OK,
                  "%s", mg_last_error());
    tm_mlp_data_init(&d, &m, 3, 1);
    /* compiled without a budget: the plan carries none */
    ck_assert(mg_plan_compile(m.g, d.outs, d.n_outs, NULL, &p) == MG_OK);
    mg_plan_summary s;
    ck_assert(mg_plan_summarize(p, d.binds, d.n_binds, &s) == MG_OK);
    ck_assert_uint_eq(s.budget_bytes, 0);
    ck_assert_uint_le(s.budget_peak, ck.budget_bytes);
    mg_plan_free(p);
    const mg_plan_options o = {.budget_bytes = ck.budget_bytes};
    ck_assert(mg_plan_compile(m.g, d.outs, d.n_outs, &o, &p) == MG_OK);
    ck_assert(mg_plan_summarize(p, d.binds, d.n_binds, &s) == MG_OK);
    ck_assert_uint_eq(s.budget_bytes, ck.budget_bytes);
    ck_assert_uint_le(s.budget_peak, ck.budget_bytes);
    /* loss and gradients bound: the prediction is the budget's measure */
    ck_assert_uint_eq(s.predicted_peak, s.budget_peak);
    ck_assert(s.n_recompute > 0 && s.n_checkpoints > 0);
    /* nothing bound: the gradients are in the pool and the prediction
     * counts them, the budget's measure does not change */
    mg_plan_summary u;
    ck_assert(mg_plan_summarize(p, NULL, 0, &u) == MG_OK);
    ck_assert_uint_eq(u.budget_peak, s.budget_peak);
    ck_assert_uint_eq(u.budget_bytes, ck.budget_bytes);
    ck_assert_uint_gt(u.predicted_peak, s.predicted_peak);
    for (int bound = 1; bound >= 0; bound--) {
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        ck_assert(mg_plan_report(p, bound ? d.binds : NULL,
                                 bound ? d.n_binds : 0, f) == MG_OK);
        fclose(f);
        char want[160];
        snprintf(want, sizeof want,
                 "budget: %.3f MiB (%zu bytes); budget "
                 "peak %.3f MiB (%zu bytes), within it\n",
                 (double)ck.budget_bytes / 1048576.0, ck.budget_bytes,
                 (double)s.budget_peak / 1048576.0, s.budget_peak);
        ck_assert_msg(strstr(buf, want), "wanted '%s' in\n%s", want, buf);
        ck_assert_msg(strstr(buf, "not the parameters, the inputs, or the "
                                  "outputs and gradients"),
                      "%s", buf);
        free(buf);
    }
    mg_plan_free(p);
    tm_mlp_data_free(&d, &m);
    mg_graph_free(m.g);
}
END_TEST

/* The text form of a budget: byte counts with binary suffixes, fractions
 * of plain backprop's peak, and a clear refusal of anything else, the
 * outputs untouched. */
START_TEST(test_budget_parse) {
    static const struct {
        const char *text;
        size_t bytes;
        double fraction;
    } good[] = {{"1", 1, 0},        {"1048576", 1048576, 0},
                {"64K", 65536, 0},  {"64KiB", 65536, 0},
                {"3M", 3 << 20, 0}, {"1.5MiB", 3 << 19, 0},
                {".5K", 512, 0},    {"2G", (size_t)2 << 30, 0},
                {"0.25x", 0, 0.25}, {"2x", 0, 2.0},
                {".5x", 0, 0.5}};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        size_t b = 7;
        double f = 7;
        ck_assert_msg(mg_budget_parse(good[i].text, &b, &f) == MG_OK, "%s: %s",
                      good[i].text, mg_last_error());
        ck_assert_msg(b == good[i].bytes && f == good[i].fraction,
                      "%s: %zu bytes, fraction %g", good[i].text, b, f);
    }
    static const char *const bad[] = {"",
                                      "0",
                                      "0x",
                                      "0K",
                                      "-1",
                                      "+1",
                                      " 1",
                                      "1 ",
                                      "1.5",
                                      "1e6",
                                      "1k",
                                      "1T",
                                      "1MB",
                                      "x",
                                      ".",
                                      "..5",
                                      "1.2.3",
                                      "0x10",
                                      "inf",
                                      "nanx",
                                      "1xx",
                                      "0.25X",
                                      "-0.5x",
                                      "99999999999999999999",
                                      "99999999999G"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        size_t b = 7;
        double f = 7;
        ck_assert_msg(mg_budget_parse(bad[i], &b, &f) == MG_ERR_INVALID_ARG,
                      "'%s' was read as %zu bytes, fraction %g", bad[i], b, f);
        ck_assert(b == 7 && f == 7);
        char want[80];
        snprintf(want, sizeof want, "'%s' is no budget", bad[i]);
        ck_assert_msg(strstr(mg_last_error(), want), "%s", mg_last_error());
    }
    size_t b;
    double f;
    /* Budgets round down, exactly: through a double these rounded to the
     * nearest (2^31 for the first, one over the text's value) or lost
     * units in the whole part (2^53 + 1 is no double). */
    static const struct {
        const char *text;
        size_t bytes;
    } down[] = {{"1.99999999999999999999999999999G", ((size_t)2 << 30) - 1},
                {"0.99999999999999999999999999999K", 1023},
                {"1.0009765625K", 1025}, /* 1 + 2^-10 exactly */
                {"1.00097656249999999999999K", 1024},
                {"0.00097656250000000000000000000000M", 1024},
                {"3.9999999999999999999999M", ((size_t)4 << 20) - 1}};
    for (size_t i = 0; i < sizeof down / sizeof *down; i++) {
        b = 7;
        ck_assert_msg(mg_budget_parse(down[i].text, &b, &f) == MG_OK, "%s: %s",
                      down[i].text, mg_last_error());
        ck_assert_msg(b == down[i].bytes && f == 0, "%s: %zu bytes, not %zu",
                      down[i].text, b, down[i].bytes);
    }
    if (sizeof(size_t) == 8) {
        ck_assert_int_eq(mg_budget_parse("9007199254740993K", &b, &f), MG_OK);
        ck_assert_uint_eq(b, ((size_t)1 << 63) + 1024);
        /* the largest size_t, and one byte over it */
        ck_assert_int_eq(
            mg_budget_parse("17179869183.99999999999999999999G", &b, &f),
            MG_OK);
        ck_assert_uint_eq(b, SIZE_MAX);
        ck_assert_int_eq(mg_budget_parse("17179869184G", &b, &f),
                         MG_ERR_INVALID_ARG);
        ck_assert_ptr_nonnull(strstr(mg_last_error(), "too large"));
    }
    ck_assert_int_eq(mg_budget_parse("0.0009K", &b, &f), MG_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(mg_last_error(), "above 0"));
    ck_assert_int_eq(mg_budget_parse(NULL, &b, &f), MG_ERR_INVALID_ARG);
    ck_assert_int_eq(mg_budget_parse("1", NULL, &f), MG_ERR_INVALID_ARG);
    ck_assert_int_eq(mg_budget_parse("1", &b, NULL), MG_ERR_INVALID_ARG);
}
END_TEST

/* ------------------------------------------------------------ monotone
 * Issue 29 item 6: on the bench models, a larger budget never costs more
 * recomputation, a budget that fits stays fitting when raised, and no
 * plan exceeds its budget (PyTorch's memory budget is neither: a smaller
 * budget can give a higher peak, pytorch/pytorch#197838, and a solver can
 * return plans over budget, #197871). */

static mg_model *sweep_model(int which) {
    switch (which) {
    case 0: return mg_model_mlp(3, 64, 32, 64, 10, 0.0, MG_F32, 1);
    case 1: return mg_model_mlp(8, 32, 16, 32, 10, 0.2, MG_F32, 1);
    case 2: return mg_model_resnet(1, 4, 2, 8, 10, MG_F32, 1);
    case 3: return mg_model_resnet(3, 4, 2, 8, 10, MG_F32, 1);
    case 4: return mg_model_unet(1, 4, 2, 8, MG_F32, 1);
    case 5: return mg_model_unet(2, 4, 2, 8, MG_F32, 1);
    case 6: return mg_model_transformer(2, 32, 1, 32, 2, 64, 0.1, 1, MG_F32, 1);
    default: /* test_compact_dp_counts_packs's long chain */
        return mg_model_mlp(64, 64, 32, 64, 10, 0.1, MG_F32, 1);
    }
}
#define SWEEP_MODELS 7
#define SWEEP_POINTS 40

/* The budget measure of m's loss and gradients, and their recomputed
 * flops; MG_ERR_NOMEM when the policy fits nothing. */
static mg_status sweep_point(int which, const mg_checkpoints *ck,
                             size_t *budget_peak, double *rflops) {
    mg_model *m = sweep_model(which);
    ck_assert_ptr_nonnull(m);
    mg_status s = mg_model_gradients(m, ck);
    if (s == MG_OK) {
        mg_tensor outs[256];
        ck_assert_int_le(m->n_params + 1, 256);
        int n = 0;
        outs[n++] = m->loss;
        for (int i = 0; i < m->n_params; i++) outs[n++] = m->grads[i];
        mg_plan *p = NULL;
        ck_assert_msg(mg_plan_compile(m->g, outs, n, NULL, &p) == MG_OK, "%s",
                      mg_last_error());
        mg_plan_summary sum;
        ck_assert(mg_plan_summarize(p, NULL, 0, &sum) == MG_OK);
        *budget_peak = sum.budget_peak;
        *rflops = sum.recompute_flops;
        mg_plan_free(p);
    } else {
        ck_assert_msg(s == MG_ERR_NOMEM, "%s", mg_last_error());
    }
    mg_model_free(m);
    return s;
}

START_TEST(test_sweep_monotone) {
    size_t none_peak;
    double none_fl;
    ck_assert_int_eq(sweep_point(_i, NULL, &none_peak, &none_fl), MG_OK);
    ck_assert(none_fl == 0);
    bool fitted = false;
    double prev_fl = INFINITY;
    size_t prev_budget = 0;
    int fits = 0;
    for (int k = 1; k <= SWEEP_POINTS; k++) {
        const size_t budget =
            (size_t)((double)none_peak * (0.04 + 0.96 * k / SWEEP_POINTS));
        mg_checkpoints ck = {.policy = MG_CKPT_BUDGET, .budget_bytes = budget};
        size_t peak = 0;
        double fl = 0;
        mg_status s = sweep_point(_i, &ck, &peak, &fl);
        if (s == MG_ERR_NOMEM) {
            ck_assert_msg(!fitted,
                          "model %d: budget %zu fits nothing, but %zu fit", _i,
                          budget, prev_budget);
            continue;
        }
        fits++;
        ck_assert_msg(peak <= budget,
                      "model %d: plan peaks at %zu > budget %zu", _i, peak,
                      budget);
        ck_assert_msg(fl <= prev_fl,
                      "model %d: budget %zu recomputes %.0f flops, more than "
                      "%.0f at the smaller budget %zu",
                      _i, budget, fl, prev_fl, prev_budget);
        fitted = true;
        prev_fl = fl;
        prev_budget = budget;
    }
    ck_assert_int_ge(fits, 2);
    ck_assert(prev_fl == 0); /* the last budget is none's peak */
}
END_TEST

/* Compaction never makes the budget policy worse: at every other budget
 * of the sweep, where the plain policy fits the compacting one fits too,
 * recomputing no more, within the budget, and its sweep is monotone as
 * well. On mg-checkmate's U-Net (model 4) the compacted plans alone fit
 * nothing below 38656 bytes where plain ones fit at 38400: the search now
 * takes the plain plan there (autodiff.c, budget_search_compact). */
START_TEST(test_compact_never_worse) {
    size_t none_peak;
    double none_fl;
    ck_assert_int_eq(sweep_point(_i, NULL, &none_peak, &none_fl), MG_OK);
    double prev_fl = INFINITY;
    int fits = 0;
    for (int k = 2; k <= SWEEP_POINTS; k += 2) {
        const size_t budget =
            (size_t)((double)none_peak * (0.04 + 0.96 * k / SWEEP_POINTS));
        mg_checkpoints ck = {.policy = MG_CKPT_BUDGET, .budget_bytes = budget};
        size_t peak = 0, cpeak = 0;
        double fl = 0, cfl = 0;
        const mg_status s = sweep_point(_i, &ck, &peak, &fl);
        ck.compact = 1;
        const mg_status cs = sweep_point(_i, &ck, &cpeak, &cfl);
        if (s == MG_OK)
            ck_assert_msg(cs == MG_OK,
                          "model %d: budget %zu fits plain, not compacted: %s",
                          _i, budget, mg_last_error());
        if (cs != MG_OK) continue;
        fits++;
        ck_assert_msg(cpeak <= budget, "model %d: %zu > budget %zu", _i, cpeak,
                      budget);
        if (s == MG_OK)
            ck_assert_msg(cfl <= fl,
                          "model %d: budget %zu: compacted plan recomputes "
                          "%.0f flops, plain %.0f",
                          _i, budget, cfl, fl);
        ck_assert_msg(cfl <= prev_fl, "model %d: budget %zu: %.0f > %.0f", _i,
                      budget, cfl, prev_fl);
        prev_fl = cfl;
    }
    ck_assert_int_ge(fits, 2);
    /* and at the plain policy's smallest budget, which no sweep point may
     * hit: the compacting policy names one no larger, and fits there */
    size_t smallest[2];
    for (int c = 0; c < 2; c++) {
        mg_checkpoints ck = {
            .policy = MG_CKPT_BUDGET, .budget_bytes = 1, .compact = c};
        size_t peak;
        double fl;
        ck_assert_int_eq(sweep_point(_i, &ck, &peak, &fl), MG_ERR_NOMEM);
        smallest[c] = th_budget_smallest();
    }
    ck_assert_msg(smallest[1] <= smallest[0],
                  "model %d: smallest budget %zu compacted, %zu plain", _i,
                  smallest[1], smallest[0]);
    mg_checkpoints ck = {
        .policy = MG_CKPT_BUDGET, .budget_bytes = smallest[0], .compact = 1};
    size_t peak;
    double fl;
    ck_assert_msg(sweep_point(_i, &ck, &peak, &fl) == MG_OK,
                  "model %d: the compacting policy fits nothing at %zu: %s", _i,
                  smallest[0], mg_last_error());
    ck_assert_int_le(peak, smallest[0]);
}
END_TEST

/* With compaction the DP's store way counts a packed tensor's packs, not
 * its whole bytes: on a long chain (no local search) of 64 layers of
 * linear, relu and dropout, whose relu outputs the backward pass reads
 * only as sign bits, the compacting policy stores more of the chain and
 * recomputes less than the plain one. Before, the DP modelled the
 * compacted chain as the plain one and recomputed the same at 0.30 and
 * 0.40 of none's peak (0.5432 and 0.3769 forward passes; now 0.4522 and
 * 0.2491). */
START_TEST(test_compact_dp_counts_packs) {
    size_t none_peak;
    double none_fl;
    ck_assert_int_eq(sweep_point(SWEEP_MODELS, NULL, &none_peak, &none_fl),
                     MG_OK);
    const double fractions[] = {0.30, 0.40};
    for (int i = 0; i < 2; i++) {
        const size_t budget = (size_t)((double)none_peak * fractions[i]);
        mg_checkpoints ck = {.policy = MG_CKPT_BUDGET, .budget_bytes = budget};
        size_t peak, cpeak;
        double fl, cfl;
        ck_assert_int_eq(sweep_point(SWEEP_MODELS, &ck, &peak, &fl), MG_OK);
        ck.compact = 1;
        ck_assert_int_eq(sweep_point(SWEEP_MODELS, &ck, &cpeak, &cfl), MG_OK);
        ck_assert_int_le(cpeak, budget);
        ck_assert_msg(cfl <= 0.9 * fl,
                      "at %.2f of none's peak the compacting policy "
                      "recomputes %.0f flops, the plain one %.0f",
                      fractions[i], cfl, fl);
    }
}
END_TEST

/* A training step of m (every output bound to caller memory), its loss
 * and gradients in out (malloc'd, n_params + 1 buffers), its measured
 * pool peak and prediction. */
static void model_step(const mg_model *m, void **out, size_t *peak,
                       size_t *predicted) {
    const int np = m->n_params;
    mg_binding *b = calloc((size_t)(2 * np + 3), sizeof *b);
    mg_tensor *outs = calloc((size_t)(np + 1), sizeof *outs);
    void **pd = calloc((size_t)np, sizeof *pd);
    void *in = malloc(mg_tensor_nbytes(m->g, m->input));
    void *tg = malloc(mg_tensor_nbytes(m->g, m->target));
    ck_assert(b && outs && pd && in && tg);
    for (int i = 0; i < np; i++)
        ck_assert_ptr_nonnull(pd[i] =
                                  malloc(mg_tensor_nbytes(m->g, m->params[i])));
    ck_assert(mg_model_init_params(m, 3, pd) == MG_OK);
    ck_assert(mg_model_init_data(m, 4, in, tg) == MG_OK);
    int nb = 0;
    b[nb++] = (mg_binding){m->input, in};
    b[nb++] = (mg_binding){m->target, tg};
    for (int i = 0; i < np; i++) b[nb++] = (mg_binding){m->params[i], pd[i]};
    for (int i = 0; i <= np; i++) {
        outs[i] = i ? m->grads[i - 1] : m->loss;
        out[i] = calloc(1, mg_tensor_nbytes(m->g, outs[i]));
        b[nb++] = (mg_binding){outs[i], out[i]};
    }
    mg_plan *p = NULL;
    mg_exec *ex = NULL;
    ck_assert_msg(mg_plan_compile(m->g, outs, np + 1, NULL, &p) == MG_OK, "%s",
                  mg_last_error());
    ck_assert(mg_exec_new(NULL, &ex) == MG_OK);
    ck_assert_msg(mg_exec_run(ex, p, b, nb, 5) == MG_OK, "%s", mg_last_error());
    mg_pool_stats st;
    mg_exec_pool_stats(ex, &st);
    *peak = st.peak_bytes_in_use;
    *predicted = mg_plan_predicted_peak(p, b, nb);
    mg_exec_free(ex);
    mg_plan_free(p);
    for (int i = 0; i < np; i++) free(pd[i]);
    free(pd);
    free(in);
    free(tg);
    free(b);
    free(outs);
}

static mg_model *remat_model(int which) {
    return which ? mg_model_unet(1, 4, 2, 8, MG_F64, 1)
                 : mg_model_resnet(1, 4, 2, 8, 10, MG_F64, 1);
}

/* Plans that recompute a value once per reader (remat: made again for
 * each gradient rule that reads it, released after it): on mg-checkmate's
 * ResNet and U-Net, at budgets from their smallest up, some tensor is
 * recomputed more than once in a single-level plan (on the ResNet), the
 * loss and every
 * gradient equal policy none's bit for bit (f64), and the measured peak
 * equals the prediction and the budget's. */
START_TEST(test_remat_bit_exact) {
    mg_model *ref = remat_model(_i);
    ck_assert(mg_model_gradients(ref, NULL) == MG_OK);
    const int np = ref->n_params;
    void **want = calloc((size_t)np + 1, sizeof *want);
    size_t peak, pred;
    model_step(ref, want, &peak, &pred);
    const size_t none_peak = pred;
    int twice = 0;
    for (int k = 0; k < 4; k++) {
        mg_model *m = remat_model(_i);
        const double fr[4] = {0.86, 0.88, 0.9, 0.93};
        mg_checkpoints ck = {.policy = MG_CKPT_BUDGET,
                             .budget_bytes =
                                 (size_t)(fr[k] * (double)none_peak)};
        mg_status s = mg_model_gradients(m, &ck);
        if (s == MG_ERR_NOMEM) {
            mg_model_free(m);
            continue;
        }
        ck_assert_msg(s == MG_OK, "%s", mg_last_error());
        /* a forward tensor with more than one copy */
        const int32_t nt = mg_graph_num_tensors(m->g);
        int *copies = calloc((size_t)nt, sizeof *copies);
        for (mg_tensor t = 0; t < nt; t++)
            if (mg_tensor_is_recompute(m->g, t))
                if (++copies[mg_tensor_recompute_source(m->g, t)] > 1) twice++;
        free(copies);
        void **got = calloc((size_t)np + 1, sizeof *got);
        model_step(m, got, &peak, &pred);
        ck_assert_uint_eq(peak, pred);
        ck_assert_uint_le(pred, ck.budget_bytes);
        for (int i = 0; i <= np; i++) {
            mg_tensor t = i ? m->grads[i - 1] : m->loss;
            ck_assert_msg(!memcmp(got[i], want[i], mg_tensor_nbytes(m->g, t)),
                          "model %d at %.2f: %s differs from policy none's", _i,
                          fr[k], i ? "a gradient" : "the loss");
            free(got[i]);
        }
        free(got);
        mg_model_free(m);
    }
    if (_i == 0) ck_assert_int_ge(twice, 1); /* the U-Net: none needed */
    for (int i = 0; i <= np; i++) free(want[i]);
    free(want);
    mg_model_free(ref);
}
END_TEST

int main(void) {
    Suite *s = suite_create("budget");
    th_add_tcase_loops(
        s, "exhaustive", 300,
        TH_LOOPS({test_exhaustive_chain, 0,
                  2 * (int)(sizeof ch_configs / sizeof *ch_configs)}),
        NULL);
    th_add_tcase_loops(s, "monotone", 300,
                       TH_LOOPS({test_sweep_monotone, 0, SWEEP_MODELS},
                                {test_compact_never_worse, 0, SWEEP_MODELS},
                                {test_remat_bit_exact, 0, 2}),
                       TH_TESTS(test_compact_dp_counts_packs));
    th_add_tcase(s, "budget", 300,
                 TH_TESTS(test_budget_parse, test_infeasible_names_minimum,
                          test_nomem_figures_are_budget_peaks,
                          test_nomem_figures_with_y_read_by_backward,
                          test_bit_exact_and_measured_peak,
                          test_mlp_summary_and_report));
    return th_run_suite(s);
}
