/*
 * test_checkmate.c - Checkmate's MILP (the test oracle
 * tests/oracle/checkmate_milp.c, which mg-checkmate also uses) against
 * MG_CKPT_BUDGET on a tiny chain and a tiny DAG with a skip connection: at
 * policy none's peak the MILP recomputes nothing; a little below it (on the
 * chain) it must recompute, and below every schedule's need it is infeasible;
 * at the budget policy's own peak (in the MILP's memory model) the MILP's
 * optimum never exceeds what the budget policy recomputes (memgrad's schedule
 * is a feasible point, so a violation is a bug in one or the other); and every
 * MILP solution decodes into a valid schedule within its budget, every
 * evaluation's inputs evaluated before it or held, which a corrupted schedule
 * is not. With compaction (issue 29's third choice), the MILP over a
 * compacted plan's DAG lets every reader of a pack read it or its whole
 * source: it fits where no uncompacted schedule recomputing nothing fits,
 * its schedules' choices are checked (a reader switched to a source that is
 * not there is rejected), and it bounds the compacting budget policy.
 */
#include "helpers.h"

#include "checkmate_milp.h"
#include "memgrad_models.h"

/* x -> a1 = tanh(x w0) -> a2 -> a3 -> a4 (a_k = tanh(a_{k-1} w_{k-1}))
 * -> tanh((a1 + a4) w4) -> mse: a skip connection around three layers.
 * (Smaller variants leave the budget policy no budget below none's peak;
 * GLPK's time on this one is about 6 s, most of the test.) */
static mg_status skip_net(const mg_checkpoints *c, mgi_ckm_net *net) {
    memset(net, 0, sizeof *net);
    mg_graph *g = net->g = mg_graph_new();
    if (!g) return MG_ERR_NOMEM;
    mg_tensor x = mg_input(g, "x", MG_F32, 2, S(8, 16));
    mg_tensor y = mg_input(g, "target", MG_F32, 2, S(8, 4));
    const int64_t in[5] = {16, 64, 48, 96, 64}, out[5] = {64, 48, 96, 64, 4};
    mg_tensor w[5];
    net->leaves[net->n_leaves++] = x;
    net->leaves[net->n_leaves++] = y;
    for (int i = 0; i < 5; i++) {
        char name[8];
        snprintf(name, sizeof name, "w%d", i);
        w[i] = mg_param(g, name, MG_F32, 2, S(in[i], out[i]));
        net->leaves[net->n_leaves++] = w[i];
    }
    mg_tensor a1 = mg_tanh(g, mg_matmul(g, x, w[0], 0, 0)), h = a1;
    for (int i = 1; i < 4; i++) h = mg_tanh(g, mg_matmul(g, h, w[i], 0, 0));
    h = mg_tanh(g, mg_matmul(g, mg_add(g, a1, h), w[4], 0, 0));
    net->loss = mg_mse(g, h, y);
    if (net->loss == MG_NO_TENSOR) return mg_last_status();
    net->n_grads = 5;
    return mg_gradients(g, &net->loss, 1, NULL, w, 5, c, net->grads);
}

/* x [2, 8, 16, 16] -> e = relu(x + b) -> 2x2 max pool ->
 * relu(conv1x1 to 8) -> global average pool -> mse (no conv before e: a
 * conv's weight gradient workspace at the end would be the peak): e feeds only
 * the pool (kept as its argmax under compaction) and the second relu only the
 * average (kept as its sign bits). */
static mg_status pool_net(const mg_checkpoints *c, mgi_ckm_net *net) {
    memset(net, 0, sizeof *net);
    mg_graph *g = net->g = mg_graph_new();
    if (!g) return MG_ERR_NOMEM;
    mg_tensor x = mg_input(g, "x", MG_F32, 4, S(2, 8, 16, 16));
    mg_tensor y = mg_input(g, "target", MG_F32, 2, S(2, 8));
    net->leaves[net->n_leaves++] = x;
    net->leaves[net->n_leaves++] = y;
    mg_tensor w[2];
    w[0] = net->leaves[net->n_leaves++] =
        mg_param(g, "b", MG_F32, 4, S(2, 8, 16, 16));
    w[1] = net->leaves[net->n_leaves++] =
        mg_param(g, "w1", MG_F32, 4, S(8, 8, 1, 1));
    mg_tensor e = mg_relu(g, mg_add(g, x, w[0]));
    mg_tensor h = mg_max_pool2d(g, e, 2, 2, 2, 2, 0, 0);
    h = mg_relu(g, mg_conv2d(g, h, w[1], 1, 1, 0, 0, 1, 1, 1));
    net->loss = mg_mse(g, mg_global_avg_pool2d(g, h), y);
    if (net->loss == MG_NO_TENSOR) return mg_last_status();
    net->n_grads = 2;
    return mg_gradients(g, &net->loss, 1, NULL, w, 2, c, net->grads);
}

static mg_status build(int which, const mg_checkpoints *c, mgi_ckm_net *net) {
    if (which == 3) return pool_net(c, net);
    if (which == 0)
        return mgi_ckm_net_chain(4, (const int[]){16, 64, 16, 96, 8}, 8, c,
                                 net);
    if (which == 2) /* mg-checkmate's MLP (28 ops) */
        return mgi_ckm_net_model(
            mg_model_mlp(3, 64, 32, 64, 10, 0.0, MG_F32, 1), c, net);
    return skip_net(c, net);
}

/* No wall-clock limit (the machine may be loaded): a node limit far above
 * what these tiny MILPs take to prove optimality, and the test case's
 * timeout (600 s) over their CPU time (about 20 s in all). */
#define TEST_MILP_LIMITS                                                       \
    (mgi_ckm_options) { .node_limit = 200000, .solver = test_solver }

/* The solver the tests below use: GLPK, and CBC in the agreement test. */
static int test_solver = MGI_CKM_GLPK;

/* MG_ERR_NOMEM: the budget policy found nothing that fits. */
static mg_status plan(int which, const mg_checkpoints *c, mgi_ckm_planned *p) {
    memset(p, 0, sizeof *p);
    return mgi_ckm_planned_finish(build(which, c, &p->net), p);
}

/* Solve at budget; a solution must be a valid schedule within budget. */
static mgi_ckm_outcome solve(const mgi_ckm_dag *d, double budget,
                             double *recompute) {
    mgi_ckm_options o = TEST_MILP_LIMITS;
    mgi_ckm_result r;
    ck_assert_msg(mgi_ckm_solve(d, budget, &o, &r) == MG_OK, "%s",
                  mgi_ckm_last_error());
    ck_assert_msg(
        r.outcome == MGI_CKM_OPTIMAL || r.outcome == MGI_CKM_INFEASIBLE,
        "tiny MILP not solved to a proof: %s", mgi_ckm_outcome_name(r.outcome));
    if (r.outcome == MGI_CKM_OPTIMAL) {
        mgi_ckm_eval e;
        ck_assert_msg(mgi_ckm_evaluate(d, r.R, false, &e) == MG_OK, "%s",
                      mgi_ckm_last_error());
        ck_assert_msg(mgi_ckm_check_held(d, r.R, r.S) == MG_OK, "%s",
                      mgi_ckm_last_error());
        ck_assert_msg(e.peak <= budget * (1 + 1e-9),
                      "decoded peak %.0f > "
                      "budget %.0f",
                      e.peak, budget);
        ck_assert_msg(e.peak <= r.milp_peak * (1 + 1e-6) + 1e-6,
                      "decoded peak %.0f above the MILP's own %.0f", e.peak,
                      r.milp_peak);
        ck_assert_double_eq_tol(e.recompute_flops, r.recompute_flops, 1e-6);
        ck_assert_double_eq_tol(r.bound_flops, r.recompute_flops, 1e-6);
        *recompute = r.recompute_flops;
        /* the validator rejects the schedule without its held outputs */
        const int n = d->n;
        bool any_held = false;
        for (size_t q = 0; q < (size_t)n * (size_t)n; q++)
            if (r.S[q]) {
                r.S[q] = 0;
                any_held = true;
                ck_assert_msg(mgi_ckm_check_held(d, r.R, r.S) != MG_OK,
                              "a schedule missing a held output passed");
                r.S[q] = 1;
                break;
            }
        ck_assert(any_held || n < 2);
    }
    free(r.R);
    free(r.S);
    return r.outcome;
}

/* Solve from the schedule R (offered as GLPK's first incumbent): GLPK
 * must not refuse it, which it does when a column derived from it breaks
 * a row or bound, and must prove the same optimum c as without it. It may
 * never ask (integral LP relaxations) or have one as good already. */
static void solve_from(const mgi_ckm_dag *d, double budget,
                       const unsigned char *R, double c) {
    mgi_ckm_options o = TEST_MILP_LIMITS;
    o.start = R;
    mgi_ckm_result r;
    ck_assert_msg(mgi_ckm_solve(d, budget, &o, &r) == MG_OK, "%s",
                  mgi_ckm_last_error());
    ck_assert_msg(r.start_used != -1, "GLPK refused the plan's schedule");
    ck_assert_int_eq(r.outcome, MGI_CKM_OPTIMAL);
    ck_assert_double_eq_tol(r.recompute_flops, c, 1e-6 * (1 + c));
    free(r.R);
    free(r.S);
}

START_TEST(test_none_peak_costs_nothing) {
    mgi_ckm_planned none;
    mg_checkpoints cn = {.policy = MG_CKPT_NONE};
    ck_assert_msg(plan(_i, &cn, &none) == MG_OK, "%s", mgi_ckm_last_error());
    const mgi_ckm_dag *d = &none.dag;
    ck_assert_int_le(d->n, 40);
    ck_assert_int_eq(none.eval.n_recompute, 0);
    /* plain backprop's own schedule is what the model measures */
    double c = -1;
    ck_assert_int_eq(solve(d, none.eval.peak, &c), MGI_CKM_OPTIMAL);
    ck_assert_double_eq_tol(c, 0, 1e-9);
    /* the memory constraints bite: a little less memory costs flops (on
     * the chain: the skip DAG's solve there takes GLPK 6 s, and the
     * budget policy's test below makes it recompute anyway) */
    if (_i == 0) {
        ck_assert_int_eq(solve(d, 0.9 * none.eval.peak, &c), MGI_CKM_OPTIMAL);
        ck_assert_double_gt(c, 0);
    }
    /* and less than the largest single output fits nothing */
    double biggest = 0;
    for (int i = 0; i < d->n; i++)
        if (d->mem[i] > biggest) biggest = d->mem[i];
    ck_assert_int_eq(solve(d, 0.5 * biggest, &c), MGI_CKM_INFEASIBLE);
    mgi_ckm_planned_free(&none);
}
END_TEST

START_TEST(test_lower_bound_of_budget_policy) {
    mgi_ckm_planned none;
    mg_checkpoints cn = {.policy = MG_CKPT_NONE};
    ck_assert_msg(plan(_i, &cn, &none) == MG_OK, "%s", mgi_ckm_last_error());
    int compared = 0, recomputing = 0;
    for (int k = 3; k <= 10; k++) { /* budgets of 0.3 to 1.0 */
        mgi_ckm_planned bp;
        mg_checkpoints cb = {.policy = MG_CKPT_BUDGET,
                             .budget_bytes = none.sum.predicted_peak * k / 10};
        mg_status s = plan(_i, &cb, &bp);
        if (s == MG_ERR_NOMEM) {
            mgi_ckm_planned_free(&bp);
            continue;
        }
        ck_assert_msg(s == MG_OK, "%s", mgi_ckm_last_error());
        ck_assert_int_eq(bp.dag.n, none.dag.n);
        /* the stage form recomputes what the plan summary says */
        ck_assert_double_eq_tol(bp.eval.recompute_flops, bp.sum.recompute_flops,
                                1e-6 * (1 + bp.sum.recompute_flops));
        double c = -1;
        ck_assert_int_eq(solve(&bp.dag, bp.eval.peak, &c), MGI_CKM_OPTIMAL);
        ck_assert_msg(c <= bp.eval.recompute_flops * (1 + 1e-9) + 1e-6,
                      "budget %zu: the MILP's optimum %.0f exceeds the budget "
                      "policy's %.0f at its own peak %.0f",
                      cb.budget_bytes, c, bp.eval.recompute_flops,
                      bp.eval.peak);
        if (_i == 0) solve_from(&bp.dag, bp.eval.peak, bp.R, c);
        compared++;
        recomputing += bp.eval.recompute_flops > 0;
        mgi_ckm_planned_free(&bp);
    }
    ck_assert_int_ge(compared, 2);
    ck_assert_int_ge(recomputing, 1);
    mgi_ckm_planned_free(&none);
}
END_TEST

/* mg-checkmate's MLP at 0.6 of policy none's peak, its smallest budget:
 * the budget policy recomputes exactly the optimum. It recomputed 2.7x the
 * optimum while every multi-level step was charged the widest step's
 * bytes, and 1.3x while a rule's unread copies (an add's output) were
 * orphaned on entering the next segment and made again there. */
START_TEST(test_mlp_smallest_budget_optimal) {
    mgi_ckm_planned none, bp;
    mg_checkpoints cn = {.policy = MG_CKPT_NONE};
    ck_assert_msg(plan(2, &cn, &none) == MG_OK, "%s", mgi_ckm_last_error());
    mg_checkpoints cb = {.policy = MG_CKPT_BUDGET,
                         .budget_bytes = none.sum.predicted_peak * 6 / 10};
    ck_assert_msg(plan(2, &cb, &bp) == MG_OK, "%s", mgi_ckm_last_error());
    ck_assert(bp.eval.recompute_flops > 0);
    double c = -1;
    ck_assert_int_eq(solve(&bp.dag, bp.eval.peak, &c), MGI_CKM_OPTIMAL);
    ck_assert_msg(bp.eval.recompute_flops <= c * (1 + 1e-9) + 1e-6,
                  "budget policy %.0f recomputed flops, optimum %.0f",
                  bp.eval.recompute_flops, c);
    mgi_ckm_planned_free(&bp);
    mgi_ckm_planned_free(&none);
}
END_TEST

/* The compact choice: pool_net's compacted DAG pairs each pack reader with
 * the pack's whole source; at compacted policy none's peak (below plain
 * none's) the MILP recomputes nothing, where the plain DAG must recompute
 * (or cannot fit); flipping a reader's choice to an input that is neither
 * evaluated nor held is rejected; and the compacting budget policy never
 * recomputes less than the MILP over its own DAG at its own peak. */
START_TEST(test_compact_choice) {
    mgi_ckm_planned plain, packed;
    mg_checkpoints cp = {.policy = MG_CKPT_NONE};
    mg_checkpoints cc = {.policy = MG_CKPT_NONE, .compact = 1};
    ck_assert_msg(plan(3, &cp, &plain) == MG_OK, "%s", mgi_ckm_last_error());
    ck_assert_msg(plan(3, &cc, &packed) == MG_OK, "%s", mgi_ckm_last_error());
    ck_assert_int_eq(plain.dag.n_alt, 0);
    /* e's sign and argmax readers, the second relu's sign reader */
    ck_assert_int_eq(packed.dag.n_alt, 3);
    ck_assert_double_lt(packed.eval.peak, plain.eval.peak);
    const mgi_ckm_dag *d = &packed.dag;
    const int n = d->n;
    /* the plan's own schedule reads the packs; reading every whole source
     * instead is a schedule too, and never needs less memory */
    unsigned char *R2 = malloc((size_t)n * (size_t)n);
    ck_assert_ptr_nonnull(R2);
    memcpy(R2, packed.R, (size_t)n * (size_t)n);
    for (int j = 0; j < n; j++) {
        bool alt = false;
        for (int r = d->in_start[j]; r < d->in_start[j + 1]; r++)
            alt |= d->in_form[r] == 2;
        if (alt) R2[(size_t)j * n + j] = 2;
        else ck_assert_int_eq(R2[(size_t)j * n + j], 1);
    }
    mgi_ckm_eval e2;
    ck_assert_msg(mgi_ckm_evaluate(d, R2, false, &e2) == MG_OK, "%s",
                  mgi_ckm_last_error());
    ck_assert_double_gt(e2.peak, packed.eval.peak);
    R2[0] = 2; /* the first conv has no pair of inputs */
    ck_assert(mgi_ckm_evaluate(d, R2, false, &e2) != MG_OK);
    free(R2);

    double c = -1;
    ck_assert_int_eq(solve(d, packed.eval.peak, &c), MGI_CKM_OPTIMAL);
    ck_assert_double_eq_tol(c, 0, 1e-9);
    const mgi_ckm_outcome po = solve(&plain.dag, packed.eval.peak, &c);
    ck_assert(po == MGI_CKM_INFEASIBLE || (po == MGI_CKM_OPTIMAL && c > 0));

    /* a schedule's choices are checked */
    mgi_ckm_options o = TEST_MILP_LIMITS;
    mgi_ckm_result r;
    ck_assert_msg(mgi_ckm_solve(d, packed.eval.peak, &o, &r) == MG_OK, "%s",
                  mgi_ckm_last_error());
    ck_assert_int_eq(r.outcome, MGI_CKM_OPTIMAL);
    int flips = 0;
    for (int j = 0; j < n; j++) {
        unsigned char *rj = &r.R[(size_t)j * n + j];
        for (int q = d->in_start[j]; q < d->in_start[j + 1]; q++) {
            if (d->in_form[q] == 0 || d->in_form[q] == *rj) continue;
            /* the edge the other choice reads */
            const int i = d->in[q];
            if (r.R[(size_t)j * n + i] || r.S[(size_t)j * n + i]) continue;
            const unsigned char was = *rj;
            *rj = d->in_form[q];
            ck_assert_msg(mgi_ckm_check_held(d, r.R, r.S) != MG_OK,
                          "v_%d switched to read v_%d, which is not there", j,
                          i);
            *rj = was;
            flips++;
        }
    }
    ck_assert_int_ge(flips, 1);
    ck_assert_int_eq(mgi_ckm_check_held(d, r.R, r.S), MG_OK);
    free(r.R);
    free(r.S);

    int compared = 0;
    for (int k = 5; k <= 9; k++) {
        mgi_ckm_planned bp;
        mg_checkpoints cb = {.policy = MG_CKPT_BUDGET,
                             .budget_bytes = plain.sum.predicted_peak * k / 10,
                             .compact = 1};
        mg_status s = plan(3, &cb, &bp);
        if (s == MG_ERR_NOMEM) continue;
        ck_assert_msg(s == MG_OK, "%s", mgi_ckm_last_error());
        ck_assert_int_eq(solve(&bp.dag, bp.eval.peak, &c), MGI_CKM_OPTIMAL);
        ck_assert_msg(c <= bp.eval.recompute_flops * (1 + 1e-9) + 1e-6,
                      "budget %zu: the MILP's optimum %.0f exceeds the "
                      "compacting policy's %.0f",
                      cb.budget_bytes, c, bp.eval.recompute_flops);
        solve_from(&bp.dag, bp.eval.peak, bp.R, c);
        compared++;
        mgi_ckm_planned_free(&bp);
    }
    ck_assert_int_ge(compared, 1);
    mgi_ckm_planned_free(&packed);
    mgi_ckm_planned_free(&plain);
}
END_TEST

#ifdef MG_HAVE_CBC
/* Solve at budget with both solvers: the same outcome, and the same
 * optimum where there is one (each schedule checked by solve()). */
static void agree(const mgi_ckm_dag *d, double budget) {
    double cg = -1, cc = -1;
    test_solver = MGI_CKM_GLPK;
    const mgi_ckm_outcome og = solve(d, budget, &cg);
    test_solver = MGI_CKM_CBC;
    const mgi_ckm_outcome oc = solve(d, budget, &cc);
    test_solver = MGI_CKM_GLPK;
    ck_assert_msg(og == oc, "budget %.0f: GLPK %s, CBC %s", budget,
                  mgi_ckm_outcome_name(og), mgi_ckm_outcome_name(oc));
    if (og == MGI_CKM_OPTIMAL)
        ck_assert_msg(fabs(cg - cc) <= 1e-6 * (1 + cg),
                      "budget %.0f: GLPK's optimum %.0f, CBC's %.0f", budget,
                      cg, cc);
}

/* CBC, mg-checkmate's second solver, against GLPK on the small DAGs both
 * prove: at none's peak, below it, below every schedule's need, and at
 * each budget policy plan's own peak, where CBC must also take the plan's
 * schedule as its start and prove the same optimum from it. */
START_TEST(test_cbc_agrees) {
    mgi_ckm_planned none;
    mg_checkpoints cn = {.policy = MG_CKPT_NONE};
    ck_assert_msg(plan(_i, &cn, &none) == MG_OK, "%s", mgi_ckm_last_error());
    const mgi_ckm_dag *d = &none.dag;
    agree(d, none.eval.peak);
    if (_i == 0) agree(d, 0.9 * none.eval.peak); /* GLPK's minutes elsewhere */
    double biggest = 0;
    for (int i = 0; i < d->n; i++)
        if (d->mem[i] > biggest) biggest = d->mem[i];
    agree(d, 0.5 * biggest);
    /* distinct plans only, and one on the MLP, where GLPK takes 40 s to
     * prove the next; at 1.0 of none's peak at least one plan fits */
    int compared = 0;
    double last_peak = -1;
    for (int k = 5; k <= 10 && compared < (_i == 2 ? 1 : 2); k++) {
        mgi_ckm_planned bp;
        mg_checkpoints cb = {.policy = MG_CKPT_BUDGET,
                             .budget_bytes = none.sum.predicted_peak * k / 10};
        if (plan(_i, &cb, &bp) != MG_OK) continue;
        if (bp.eval.peak == last_peak) {
            mgi_ckm_planned_free(&bp);
            continue;
        }
        last_peak = bp.eval.peak;
        agree(&bp.dag, bp.eval.peak);
        double c = -1;
        test_solver = MGI_CKM_CBC;
        ck_assert_int_eq(solve(&bp.dag, bp.eval.peak, &c), MGI_CKM_OPTIMAL);
        solve_from(&bp.dag, bp.eval.peak, bp.R, c);
        test_solver = MGI_CKM_GLPK;
        compared++;
        mgi_ckm_planned_free(&bp);
    }
    ck_assert_int_ge(compared, 1);
    mgi_ckm_planned_free(&none);
}
END_TEST

/* Issue 29's "optimal on the ResNet", held: on mg-checkmate's ResNet (40
 * ops, where GLPK proves nothing at 0.90 in 45 minutes and CBC settles
 * every budget in under a second), the budget policy recomputes exactly
 * the MILP's optimum at the budget itself (0.90 and 0.95 of policy none's
 * peak; issue 29 asks at most 1.25x), and nothing fits below its smallest
 * budget over 1.1 (the policy's smallest is within 1.1x of the MILP's). */
/* mg-checkmate's ResNet (40 ops) planned under c. */
static mg_status resnet_planned(const mg_checkpoints *c, mgi_ckm_planned *p) {
    memset(p, 0, sizeof *p);
    return mgi_ckm_planned_finish(
        mgi_ckm_net_model(mg_model_resnet(1, 4, 2, 8, 10, MG_F32, 1), c,
                          &p->net),
        p);
}

START_TEST(test_resnet_budget_optimal) {
    mgi_ckm_planned none;
    mg_checkpoints cn = {.policy = MG_CKPT_NONE};
    ck_assert_msg(resnet_planned(&cn, &none) == MG_OK, "%s",
                  mgi_ckm_last_error());
    test_solver = MGI_CKM_CBC;
    for (int k = 90; k <= 95; k += 5) {
        const size_t budget = none.sum.predicted_peak * (size_t)k / 100;
        mgi_ckm_planned bp;
        mg_checkpoints cb = {.policy = MG_CKPT_BUDGET, .budget_bytes = budget};
        ck_assert_msg(resnet_planned(&cb, &bp) == MG_OK, "%s",
                      mgi_ckm_last_error());
        double c = -1;
        ck_assert_int_eq(solve(&none.dag, (double)budget, &c), MGI_CKM_OPTIMAL);
        ck_assert_msg(bp.eval.recompute_flops <= c * (1 + 1e-9) + 1e-6,
                      "ResNet at %d%%: the budget policy recomputes %.0f "
                      "flops, the optimum %.0f",
                      k, bp.eval.recompute_flops, c);
        mgi_ckm_planned_free(&bp);
    }
    /* the policy's smallest budget, from its NOMEM message */
    mgi_ckm_planned bp;
    mg_checkpoints c1 = {.policy = MG_CKPT_BUDGET, .budget_bytes = 1};
    ck_assert_int_eq(resnet_planned(&c1, &bp), MG_ERR_NOMEM);
    const double smallest = (double)th_budget_smallest();
    ck_assert_double_gt(smallest, 0);
    double c = -1;
    ck_assert_int_eq(solve(&none.dag, smallest / 1.1, &c), MGI_CKM_INFEASIBLE);
    test_solver = MGI_CKM_GLPK;
    mgi_ckm_planned_free(&none);
}
END_TEST
#endif

/* argv[1] picks the cases: "glpk" (the GLPK solves, always built), "cbc"
 * (those that need CBC), or nothing for both. ctest runs them as two tests
 * (cmake/glpk.cmake), so that a build without CBC lists test_checkmate_cbc
 * as skipped rather than passing test_checkmate without its CBC cases. */
int main(int argc, char **argv) {
    const char *which = argc > 1 ? argv[1] : "";
    const bool glpk = !*which || !strcmp(which, "glpk");
    const bool cbc = !*which || !strcmp(which, "cbc");
    if (!glpk && !cbc) {
        fprintf(stderr, "usage: test_checkmate [glpk|cbc]\n");
        return EXIT_FAILURE;
    }
#ifndef MG_HAVE_CBC
    if (*which && cbc) {
        fprintf(stderr, "test_checkmate: built without CBC "
                        "(coinor-libcbc-dev): no cbc cases\n");
        return EXIT_FAILURE;
    }
#endif
    /* pool_net's figures must not depend on the host: where oneDNN has a
     * JIT pooling kernel (AVX-512 hosts), max_pool2d_grad borrows y and
     * the argmax as workspace, which makes test_compact_choice's
     * whole-source schedule 1.5 KB cheaper than the packed one, and no
     * budget of 0.5-0.9 fit; the memgrad loops run everywhere */
    setenv("MG_POOL", "loops", 1);
    Suite *s = suite_create("checkmate");
    if (glpk) {
        TCase *tc = tcase_create("milp");
        tcase_set_timeout(tc, 600);
        /* _i: 0 the chain, 1 the skip-connection DAG */
        tcase_add_loop_test(tc, test_none_peak_costs_nothing, 0, 2);
        tcase_add_loop_test(tc, test_lower_bound_of_budget_policy, 0, 2);
        tcase_add_test(tc, test_mlp_smallest_budget_optimal);
        tcase_add_test(tc, test_compact_choice);
        suite_add_tcase(s, tc);
    }
#ifdef MG_HAVE_CBC
    if (cbc) {
        TCase *tc = tcase_create("cbc");
        tcase_set_timeout(tc, 600);
        tcase_add_loop_test(tc, test_cbc_agrees, 0, 4);
        tcase_add_test(tc, test_resnet_budget_optimal);
        suite_add_tcase(s, tc);
    }
#endif
    return th_run_suite(s);
}
