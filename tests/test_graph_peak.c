/*
 * test_graph_peak.c - mgi_graph_peak, the budget policy's fast peak: it
 * must give exactly the peak that mgi_plan_peak predicts for the compiled
 * plan with every output bound, since the policy judges its candidates by
 * it and the executor then reaches the compiled plan's peak; so must its
 * figure without recomputed copies, which mg_plan_summarize reports for
 * plain backprop. Checked on training graphs under every policy
 * (recomputed copies, multi-level plans) with every output bound or some
 * left in the pool, convolutions (workspaces), a rewired graph whose
 * creation order is not topological, and output lists with a leaf and
 * repeats.
 */
#include "helpers.h"

#include "memgrad_models.h"
#include "rewrite/schedule.h"

/* Both peaks of q's plan, through one scratch reused across calls as the
 * budget search reuses its own: unfused (the search's measure) and with
 * q->fuse, of the plan that fuses element-wise chains. */
static void check_query_fused(const char *what, const mg_graph *g,
                              const mg_peak_query *q, mg_peak_scratch *sc);
static void check_query(const char *what, const mg_graph *g,
                        const mg_peak_query *q0, mg_peak_scratch *sc) {
    mg_peak_query qf = *q0;
    qf.fuse = true;
    check_query_fused(what, g, &qf, sc);
    qf.fuse = false;
    check_query_fused(what, g, &qf, sc);
}

static void check_query_fused(const char *what, const mg_graph *g,
                              const mg_peak_query *q, mg_peak_scratch *sc) {
    mg_plan *p = NULL;
    mg_plan_options o = {.without_recompute = q->without_recompute,
                         .no_fusion = !q->fuse};
    mg_status s = mg_plan_compile(g, q->outputs, q->n_outputs, &o, &p);
    ck_assert_msg(s == MG_OK, "%s: compile: %s", what, mg_last_error());
    const int n = q->all_bound ? q->n_outputs : q->n_binds;
    mg_binding *b = malloc((size_t)(n ? n : 1) * sizeof *b);
    static char any; /* the addresses are never used */
    ck_assert_ptr_nonnull(b);
    for (int i = 0; i < n; i++)
        b[i] = q->all_bound ? (mg_binding){q->outputs[i], &any} : q->binds[i];
    size_t want = 0, got = 0;
    ck_assert(mgi_plan_peak(p, b, n, "test", &want) == MG_OK);
    s = mgi_graph_peak(g, q, sc, "test", &got);
    ck_assert_msg(s == MG_OK, "%s: %s", what, mg_last_error());
    ck_assert_msg(got == want,
                  "%s%s%s%s: mgi_graph_peak %zu, compiled plan %zu", what,
                  q->without_recompute ? ", without recompute" : "",
                  q->all_bound ? "" : ", some bound", q->fuse ? ", fused" : "",
                  got, want);
    ck_assert_int_gt((int)want, 0);
    /* the schedule it leaves: the plan's steps and leaves, in order (and
     * the fused plan's absorbed ops, which are no steps) */
    if (!q->fuse) ck_assert_int_eq(sc->n_order, p->n_steps + p->n_leaves);
    ck_assert_int_eq(sc->n_steps, p->n_steps);
    for (int32_t i = 0; i < p->n_steps; i++)
        ck_assert_int_eq(sc->steps[i], p->steps[i]);
    mg_plan_free(p);
    free(b);
}

/* Every output bound, as the budget search measures its candidates. */
static void check_peaks(const char *what, const mg_graph *g,
                        const mg_tensor *outs, int n, mg_peak_scratch *sc) {
    const mg_peak_query q = {
        .outputs = outs, .n_outputs = n, .all_bound = true};
    check_query(what, g, &q, sc);
}

/* The loss and every gradient of m, as the bench's training plan: all
 * bound; the loss left in the pool; then read without recomputed copies,
 * as mg_plan_summarize predicts plain backprop's peak. */
static void check_model(const char *what, mg_model *m, const mg_checkpoints *ck,
                        mg_peak_scratch *sc) {
    ck_assert_ptr_nonnull(m);
    mg_status s = mg_model_gradients(m, ck);
    ck_assert_msg(s == MG_OK, "%s: gradients: %s", what, mg_last_error());
    const int n = m->n_params + 1;
    mg_tensor *outs = malloc((size_t)n * sizeof *outs);
    mg_binding *b = malloc((size_t)n * sizeof *b);
    static char any;
    ck_assert(outs && b);
    outs[0] = m->loss;
    memcpy(outs + 1, m->grads, (size_t)m->n_params * sizeof *outs);
    for (int i = 0; i < n; i++) b[i] = (mg_binding){outs[i], &any};
    check_peaks(what, m->g, outs, n, sc);
    /* the gradients only, as the budget search measures them */
    check_peaks(what, m->g, outs + 1, m->n_params, sc);
    for (int without = 0; without < 2; without++) {
        mg_peak_query q = {.outputs = outs,
                           .n_outputs = n,
                           .without_recompute = without,
                           .binds = b + 1,
                           .n_binds = n - 1};
        check_query(what, m->g, &q, sc);
        q.binds = b;
        q.n_binds = n;
        check_query(what, m->g, &q, sc);
    }
    /* mg_plan_summarize's figure for plain backprop is the same, fused as
     * the plan is (compiled with the defaults) */
    mg_plan *p = NULL;
    ck_assert(mg_plan_compile(m->g, outs, n, NULL, &p) == MG_OK);
    mg_plan_summary sum;
    ck_assert(mg_plan_summarize(p, b + 1, n - 1, &sum) == MG_OK);
    const mg_peak_query q = {.outputs = outs,
                             .n_outputs = n,
                             .without_recompute = true,
                             .binds = b + 1,
                             .n_binds = n - 1,
                             .fuse = true};
    size_t plain = 0;
    ck_assert(mgi_graph_peak(m->g, &q, sc, "test", &plain) == MG_OK);
    ck_assert_uint_eq(sum.predicted_peak_without_recompute, plain);
    mg_plan_free(p);
    free(outs);
    free(b);
}

/* Policy none's peak of the MLP, for budgets relative to it. */
static size_t mlp_none_peak(int depth) {
    mg_model *m = mg_model_mlp(depth, 8, 4, 8, 10, 0.1, MG_F32, 7);
    ck_assert_ptr_nonnull(m);
    mg_checkpoints ck = {.policy = MG_CKPT_NONE};
    ck_assert(mg_model_gradients(m, &ck) == MG_OK);
    mg_tensor *outs = malloc((size_t)m->n_params * sizeof *outs);
    ck_assert_ptr_nonnull(outs);
    memcpy(outs, m->grads, (size_t)m->n_params * sizeof *outs);
    mg_peak_scratch sc = {0};
    size_t peak = 0;
    const mg_peak_query q = {
        .outputs = outs, .n_outputs = m->n_params, .all_bound = true};
    ck_assert(mgi_graph_peak(m->g, &q, &sc, "test", &peak) == MG_OK);
    mgi_peak_scratch_free(&sc);
    free(outs);
    mg_model_free(m);
    return peak;
}

START_TEST(test_mlp_policies) {
    const int depth = 48;
    mg_peak_scratch sc = {0};
    const mg_ckpt_policy plain[] = {MG_CKPT_NONE, MG_CKPT_MEMORY,
                                    MG_CKPT_SPEED};
    for (int i = 0; i < 3; i++) {
        char what[64];
        snprintf(what, sizeof what, "mlp, policy %d", (int)plain[i]);
        mg_model *m = mg_model_mlp(depth, 8, 4, 8, 10, 0.1, MG_F32, 7);
        mg_checkpoints ck = {.policy = plain[i]};
        check_model(what, m, &ck, &sc);
        mg_model_free(m);
    }
    /* budgets down to where only multi-level plans fit */
    const size_t none = mlp_none_peak(depth);
    const double fr[] = {0.6, 0.3, 0.15, 0.08};
    for (int i = 0; i < 4; i++) {
        char what[64];
        snprintf(what, sizeof what, "mlp, budget %.2f", fr[i]);
        mg_model *m = mg_model_mlp(depth, 8, 4, 8, 10, 0.1, MG_F32, 7);
        mg_checkpoints ck = {.policy = MG_CKPT_BUDGET,
                             .budget_bytes = (size_t)(fr[i] * (double)none)};
        check_model(what, m, &ck, &sc);
        mg_model_free(m);
    }
    mgi_peak_scratch_free(&sc);
}
END_TEST

START_TEST(test_resnet_workspaces) {
    mg_peak_scratch sc = {0};
    const mg_ckpt_policy pol[] = {MG_CKPT_NONE, MG_CKPT_MEMORY};
    for (int i = 0; i < 2; i++) {
        mg_model *m = mg_model_resnet(3, 4, 2, 8, 10, MG_F32, 3);
        mg_checkpoints ck = {.policy = pol[i]};
        check_model(pol[i] == MG_CKPT_NONE ? "resnet, none" : "resnet, memory",
                    m, &ck, &sc);
        mg_model_free(m);
    }
    mgi_peak_scratch_free(&sc);
}
END_TEST

/* A node rewired to read a later one (igraph's order, not creation
 * order); outputs with a leaf and a repeat; a tensor nobody reads. */
START_TEST(test_rewired_and_odd_outputs) {
    mg_graph *g = mg_graph_new();
    mg_tensor x = mg_input(g, "x", MG_F64, 2, S(4, 16));
    mg_tensor a = mg_neg(g, x);        /* will read c instead of x */
    mg_tensor c = mg_scale(g, x, 2.0); /* created after a */
    mg_tensor d = mg_exp(g, a);
    mg_tensor e = mg_add(g, d, mg_tanh(g, c));
    ck_assert(mg_tensor_set_input(g, a, 0, c) == MG_OK);
    mg_peak_scratch sc = {0};
    check_peaks("rewired", g, &e, 1, &sc);
    const mg_tensor outs[] = {e, x, e, d};
    check_peaks("leaf and repeat", g, outs, 4, &sc);
    mgi_peak_scratch_free(&sc);
    mg_graph_free(g);
}
END_TEST

TH_MAIN("graph_peak", "peaks", 300, test_mlp_policies, test_resnet_workspaces,
        test_rewired_and_odd_outputs)
