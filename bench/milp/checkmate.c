/*
 * checkmate.c - mg-checkmate: the gap between MG_CKPT_BUDGET and the exact
 * optimum on small training graphs (issue 17), the optimum being
 * Checkmate's rematerialization MILP (Jain et al., MLSys 2020) solved with
 * GLPK (the test oracle tests/oracle/checkmate_milp.c, which
 * test_checkmate also uses).
 *
 * For each model (training graphs of at most about 40 ops) and each budget
 * fraction f: MG_CKPT_BUDGET plans the training step at f times policy
 * none's predicted pool peak; its plan is mapped onto the training DAG
 * (recomputed copies onto their forward sources, in the plan's order),
 * and its peak P is measured in the memory model of checkmate_milp.h
 * (size-classed bytes of live outputs plus the workspace of the op being
 * evaluated: the simulation behind memgrad's predicted peak). The MILP is then
 * solved over the same DAG, in the same topological order, at exactly P:
 * memgrad's schedule is one of its feasible points, so its optimum is a
 * lower bound on what any schedule of that order recomputes within P.
 * Reported: memgrad's recomputed flops (from mg_plan_summarize), the
 * MILP's optimum (or, past the time limit, its best schedule and best
 * bound), and the gap, as fractions of one forward pass.
 *
 *   usage: mg-checkmate [--model
 * chain|mlp|resnet|unet-small|unet|transformer|all] (all: every model but the
 * transformer)
 *                       [--fractions F,F,...] [--time-limit SECONDS]
 *                       [--cpu-limit SECONDS] [--node-limit N] [--no-start]
 *                       [--recompute-backward] [--bisect]
 *                       [--at-budget] [--compact]
 *   --node-limit: also stop each solve after N branch-and-bound nodes
 *   (reported as time_limit), a limit the machine's load does not move;
 *   --cpu-limit: also stop it after that much CPU time of this process
 *   (time_limit too), which a loaded machine moves much less than the
 *   wall-clock --time-limit.
 *   Each solve at the budget policy's own peak, and each at a budget where
 *   the policy's plan is a schedule of the same DAG (same ops in the same
 *   order), starts from the policy's schedule (GLPK's first incumbent;
 *   the *_start columns say "policy"), which means solving without
 *   GLPK's presolver; --no-start: never (presolver on).
 *   --at-budget: also solve the MILP at each budget itself (four more
 *   columns), the optimum a budget policy is held to.
 *   --compact (issue 29 item 4): every plan with mg_checkpoints.compact,
 *   the MILP over its DAG with the compact choice (keep a tensor that has
 *   a compact encoding whole, keep its pack, or recompute it:
 *   checkmate_milp.h, "Compact inputs"); with --at-budget four more
 *   columns, the MILP at the budget without the compact choice (policy
 *   none's plain DAG), and the policy's recomputation over that optimum;
 *   then the budget policy without compaction at the budget and its
 *   recomputation over the same optimum (two more).
 *   Budgets, and every recomputation, stay in plain (uncompacted) units:
 *   fractions of plain policy none's peak, forward passes of the plain
 *   forward (the packs' own flops are not counted in it).
 *   --solver cbc: solve with COIN-OR CBC instead of GLPK (where CMake
 *   found it; the same MILP, the same start, and the same checks of what
 *   comes back); --threads N: CBC's threads (results may then vary from
 *   run to run in which optimal schedule is found, not in the optimum).
 *   --bisect: after the budgets, the MILP's smallest feasible budget by
 *   bisection on its feasibility, beside the budget policy's smallest
 *   (both without compaction, also under --compact).
 *
 * Exits 1 if a MILP schedule fails to decode into a valid schedule within
 * its budget, or if the MILP's bound exceeds memgrad's recomputation at
 * memgrad's own peak (a bug in one or the other); 2 on errors.
 */
#include "checkmate_milp.h"

#include "memgrad.h"
#include "memgrad_models.h"
#include "milp_args.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const model_names[] = {"chain",      "mlp",  "resnet",
                                          "unet-small", "unet", "transformer"};
#define N_MODELS 6

/* The smallest U-Net: x [2, 3, 8, 8] -> e = relu(conv3x3 to 4 channels)
 * -> 2x2 max pool -> relu(conv3x3 to 8) -> nearest 2x upsampling
 * (reshape, broadcast_to, reshape, as mg_model_unet's) -> relu(conv3x3
 * to 4) -> concat with the skip e -> conv1x1 to 1 -> mse: one level with
 * its skip connection, 35 ops in training, where mg_model_unet's
 * smallest has 79, past what GLPK solves in a minute. */
static mg_status unet_small(const mg_checkpoints *c, mgi_ckm_net *net) {
    memset(net, 0, sizeof *net);
    mg_graph *g = net->g = mg_graph_new();
    if (!g) return MG_ERR_NOMEM;
    mg_tensor x = mg_input(g, "x", MG_F32, 4, (const int64_t[]){2, 3, 8, 8});
    mg_tensor y =
        mg_input(g, "target", MG_F32, 4, (const int64_t[]){2, 1, 8, 8});
    net->leaves[net->n_leaves++] = x;
    net->leaves[net->n_leaves++] = y;
    const int64_t ws[4][4] = {
        {4, 3, 3, 3}, {8, 4, 3, 3}, {4, 8, 3, 3}, {1, 8, 1, 1}};
    mg_tensor w[4];
    for (int i = 0; i < 4; i++) {
        char name[8];
        snprintf(name, sizeof name, "w%d", i);
        w[i] = net->leaves[net->n_leaves++] =
            mg_param(g, name, MG_F32, 4, ws[i]);
    }
    mg_tensor e = mg_relu(g, mg_conv2d(g, x, w[0], 1, 1, 1, 1, 1, 1, 1));
    mg_tensor h = mg_max_pool2d(g, e, 2, 2, 2, 2, 0, 0);
    h = mg_relu(g, mg_conv2d(g, h, w[1], 1, 1, 1, 1, 1, 1, 1));
    h = mg_reshape(g, h, 6, (const int64_t[]){2, 8, 4, 1, 4, 1});
    h = mg_broadcast_to(g, h, 6, (const int64_t[]){2, 8, 4, 2, 4, 2});
    h = mg_reshape(g, h, 4, (const int64_t[]){2, 8, 8, 8});
    h = mg_relu(g, mg_conv2d(g, h, w[2], 1, 1, 1, 1, 1, 1, 1));
    h = mg_concat(g, 2, (const mg_tensor[]){e, h}, 1);
    h = mg_conv2d(g, h, w[3], 1, 1, 0, 0, 1, 1, 1);
    net->loss = mg_mse(g, h, y);
    if (net->loss == MG_NO_TENSOR) return mg_last_status();
    net->n_grads = 4;
    return mg_gradients(g, &net->loss, 1, NULL, w, 4, c, net->grads);
}

/* The tool's models: the chain, the MLP and the ResNet are training graphs
 * of 28 to 40 ops; the smallest U-Net these builders make has 79 and the
 * smallest transformer 107, past what GLPK proves optimal in a minute:
 * "all" takes the U-Net (for its bounds) but not the transformer, which
 * runs only by name. */
static mg_status net_build(const char *name, const mg_checkpoints *c,
                           mgi_ckm_net *net) {
    if (!strcmp(name, "chain"))
        return mgi_ckm_net_chain(5, (const int[]){32, 128, 32, 256, 64, 16}, 16,
                                 c, net);
    if (!strcmp(name, "unet-small")) return unet_small(c, net);
    mg_model *m = NULL;
    if (!strcmp(name, "mlp"))
        m = mg_model_mlp(3, 64, 32, 64, 10, 0.0, MG_F32, 1);
    else if (!strcmp(name, "resnet"))
        m = mg_model_resnet(1, 4, 2, 8, 10, MG_F32, 1);
    else if (!strcmp(name, "unet")) m = mg_model_unet(1, 4, 2, 8, MG_F32, 1);
    else if (!strcmp(name, "transformer"))
        m = mg_model_transformer(1, 16, 2, 8, 16, 32, 0.0, 1, MG_F32, 1);
    else {
        fprintf(stderr, "mg-checkmate: no model '%s'\n", name);
        return MG_ERR_INVALID_ARG;
    }
    return mgi_ckm_net_model(m, c, net);
}

/* Build, plan and map one training step under c. MG_ERR_NOMEM from the
 * budget policy (no plan fits) is returned as is. */
static mg_status planned_make(const char *name, const mg_checkpoints *c,
                              mgi_ckm_planned *p) {
    memset(p, 0, sizeof *p);
    return mgi_ckm_planned_finish(net_build(name, c, &p->net), p);
}

static bool compact_on; /* --compact: every plan of the run compacts */
static bool no_start;   /* --no-start: GLPK starts from no schedule */

/* Solve at budget and check what comes back; returns 0, 1 (a check
 * failed) or 2 (an error). */
static int solve_checked(const mgi_ckm_dag *d, double budget,
                         const mgi_ckm_options *o, mgi_ckm_result *r) {
    if (mgi_ckm_solve(d, budget, o, r) != MG_OK) {
        fprintf(stderr, "mg-checkmate: %s\n", mgi_ckm_last_error());
        return 2;
    }
    if (!r->R) return 0;
    mgi_ckm_eval e;
    if (mgi_ckm_evaluate(d, r->R, o->recompute_backward, &e) != MG_OK ||
        mgi_ckm_check_held(d, r->R, r->S) != MG_OK) {
        printf("# CHECK FAILED: the MILP's schedule is invalid: %s\n",
               mgi_ckm_last_error());
        return 1;
    }
    if (e.peak > budget * (1 + 1e-9) ||
        fabs(e.recompute_flops - r->recompute_flops) >
            1e-9 * (1 + r->recompute_flops)) {
        printf("# CHECK FAILED: the MILP's schedule peaks at %.0f bytes "
               "(budget %.0f) and recomputes %.0f flops (MILP says %.0f)\n",
               e.peak, budget, e.recompute_flops, r->recompute_flops);
        return 1;
    }
    return 0;
}

/* Issue 29 item 5: the smallest budget the MILP finds a schedule for,
 * bisected on its feasibility between a budget it proves infeasible and
 * one it solves (time_limit counts as feasible: a schedule was found),
 * beside the budget policy's smallest (from its NOMEM message, checked
 * to fit). A solve that ends with neither a schedule nor a proof
 * (no_solution) stops the bisection: the interval is what is known. */
static int bisect_min(const char *name, const mgi_ckm_planned *none,
                      double peak, const mgi_ckm_options *o) {
    const mgi_ckm_dag *d = &none->dag;
    /* the budget policy's smallest budget */
    mg_checkpoints c1 = {
        .policy = MG_CKPT_BUDGET, .budget_bytes = 1, .compact = compact_on};
    mgi_ckm_planned p;
    size_t mg_min = 0;
    mg_status s = planned_make(name, &c1, &p);
    if (s == MG_ERR_NOMEM) {
        const char *at = strstr(mg_last_error(), "fits is ");
        if (at) mg_min = (size_t)strtoull(at + 8, NULL, 10);
    } else if (s == MG_OK) {
        mgi_ckm_planned_free(&p);
    }
    double lo = 0, hi = none->eval.peak;
    if (mg_min) {
        mg_checkpoints cm = {.policy = MG_CKPT_BUDGET,
                             .budget_bytes = mg_min,
                             .compact = compact_on};
        if (planned_make(name, &cm, &p) == MG_OK) {
            /* memgrad's plan is a schedule of the MILP at its own peak */
            if (p.eval.peak < hi) hi = p.eval.peak;
            mgi_ckm_planned_free(&p);
        }
    }
    const char *stop = "";
    int steps = 0;
    /* The first probe: just below the policy's smallest over 1.1 (issue
     * 29's target), where a proof of infeasibility settles the target;
     * then halving. Bytes come in pool size classes of at least 256. */
    double probe = mg_min ? floor((double)mg_min / 1.1) - 1 : -1;
    while (hi - lo > 256 && steps < 12) {
        double mid = floor((lo + hi) / 2);
        const bool probing = probe > lo && probe < hi;
        if (probing) mid = probe;
        probe = -1;
        mgi_ckm_result r;
        if (mgi_ckm_solve(d, mid, o, &r) != MG_OK) {
            fprintf(stderr, "mg-checkmate: %s\n", mgi_ckm_last_error());
            return 2;
        }
        free(r.R);
        free(r.S);
        steps++;
        printf("# %s bisect: MILP at %.0f bytes (%.4f of none): %s, %.1f s\n",
               name, mid, mid / peak, mgi_ckm_outcome_name(r.outcome),
               r.seconds);
        fflush(stdout);
        if (r.outcome == MGI_CKM_INFEASIBLE) lo = mid;
        else if (r.outcome == MGI_CKM_NO_SOLUTION && probing) {
            continue; /* unsettled: bisect the interval as it was */
        } else if (r.outcome == MGI_CKM_NO_SOLUTION) {
            stop = " (stopped: a solve ended without schedule or proof)";
            break;
        } else hi = mid;
    }
    printf("# %s smallest budget: MILP feasible at %.0f bytes (%.4f of "
           "none's peak), proven infeasible at %.0f (%.4f)%s; budget policy "
           "%zu (%.4f), %.3f x the MILP's feasible one, at most %.3f x the "
           "true minimum\n",
           name, hi, hi / peak, lo, lo / peak, stop, mg_min,
           (double)mg_min / peak, (double)mg_min / hi,
           lo > 0 ? (double)mg_min / (lo + 1) : INFINITY);
    return 0;
}

/* --at-budget: the MILP solved at the budget itself (where a schedule may
 * use memory that the budget policy's plan leaves unused), appended to a
 * row as ",status,recompute,bound,ratio" (ratio: the budget policy's
 * recomputation over the MILP's best; mg < 0: the policy fits nothing).
 * Returns solve_checked's code. */
/* Whether two DAGs are the same ops in the same order with the same
 * edges: then a schedule of one is a schedule of the other. */
static bool dag_same(const mgi_ckm_dag *a, const mgi_ckm_dag *b) {
    if (a->n != b->n) return false;
    for (int j = 0; j < a->n; j++)
        if (a->cost[j] != b->cost[j] || a->mem[j] != b->mem[j] ||
            a->work[j] != b->work[j] || a->backward[j] != b->backward[j] ||
            a->in_start[j + 1] != b->in_start[j + 1])
            return false;
    for (int r = 0; r < a->in_start[a->n]; r++)
        if (a->in[r] != b->in[r] || a->in_form[r] != b->in_form[r])
            return false;
    return true;
}

/* The start column: "policy" when GLPK took the budget policy's schedule
 * as an incumbent, "glpk" when it had one as good before it asked,
 * "refused" when it did not take it (a bug), "-" when it was never offered
 * (the plan is no schedule of this DAG, fits nothing, or GLPK asked for
 * no heuristic solution). */
static const char *start_name(int used) {
    return used == 1   ? "policy"
           : used == 2 ? "glpk"
           : used < 0  ? "refused"
                       : "-";
}

static int at_budget(const mgi_ckm_dag *d, double budget, double mg, double fw,
                     const mgi_ckm_options *o, const mgi_ckm_planned *from,
                     double *best) {
    if (best) *best = -1;
    if (!o->at_budget) return 0;
    mgi_ckm_result r;
    mgi_ckm_options os = *o;
    if (from && !no_start && dag_same(&from->dag, d)) os.start = from->R;
    const int c = solve_checked(d, budget, &os, &r);
    if (c == 2) {
        printf(",error,,,,");
        return c;
    }
    const bool sol =
        r.outcome == MGI_CKM_OPTIMAL || r.outcome == MGI_CKM_FEASIBLE;
    printf(",%s,%s,", mgi_ckm_outcome_name(r.outcome),
           start_name(r.start_used));
    if (sol) printf("%.4f", r.recompute_flops / fw);
    if (sol && best) *best = r.recompute_flops;
    printf(",");
    if (r.outcome != MGI_CKM_INFEASIBLE) printf("%.4f", r.bound_flops / fw);
    printf(",");
    if (sol && mg >= 0) {
        if (r.recompute_flops > 0) printf("%.3f", mg / r.recompute_flops);
        else printf(mg > 0 ? "inf" : "1.000");
    }
    free(r.R);
    free(r.S);
    return c;
}

/* --compact --at-budget: the MILP at the budget without the compact choice
 * (plain's DAG: four columns, as at_budget), then the budget policy without
 * compaction at the same budget (mg_plain_recompute) over that MILP's
 * schedule (mg_plain_over_plain_at_budget), issue 29's 1.25x target. */
static int plain_cols(const char *name, const mgi_ckm_dag *plain, double budget,
                      double mg, double fw, const mgi_ckm_options *o) {
    if (!compact_on || !o->at_budget) return 0;
    double best;
    mg_checkpoints cb = {.policy = MG_CKPT_BUDGET,
                         .budget_bytes = (size_t)budget};
    mgi_ckm_planned bp;
    const mg_status s = planned_make(name, &cb, &bp);
    if (s != MG_OK && s != MG_ERR_NOMEM) {
        fprintf(stderr, "mg-checkmate: %s at %.0f: %s\n", name, budget,
                mgi_ckm_last_error());
        return 2;
    }
    const int c =
        at_budget(plain, budget, mg, fw, o, s == MG_OK ? &bp : NULL, &best);
    if (c == 2 || s == MG_ERR_NOMEM) {
        if (s == MG_OK) mgi_ckm_planned_free(&bp);
        if (c != 2) printf(",,");
        return c;
    }
    const double pm = bp.eval.recompute_flops;
    printf(",%.4f,", pm / fw);
    if (best > 0) printf("%.3f", pm / best);
    else if (best == 0) printf(pm > 0 ? "inf" : "1.000");
    mgi_ckm_planned_free(&bp);
    return c;
}

static int run_model(const char *name, const double *fr, int n_fr,
                     const mgi_ckm_options *o) {
    mgi_ckm_planned none, plain = {0};
    mg_checkpoints cn = {.policy = MG_CKPT_NONE, .compact = compact_on};
    mg_checkpoints cp = {.policy = MG_CKPT_NONE};
    if (planned_make(name, &cn, &none) != MG_OK ||
        (compact_on && planned_make(name, &cp, &plain) != MG_OK)) {
        fprintf(stderr, "mg-checkmate: %s: %s\n", name, mgi_ckm_last_error());
        mgi_ckm_planned_free(&none);
        return 2;
    }
    /* budgets and recomputation in plain units (--compact) */
    const mgi_ckm_planned *ref = compact_on ? &plain : &none;
    const mgi_ckm_dag *d = &none.dag;
    int n_bw = 0;
    for (int i = 0; i < d->n; i++) n_bw += d->backward[i];
    const double fw = ref->dag.forward_flops > 0 ? ref->dag.forward_flops : 1;
    mgi_ckm_result r0;
    int rc = solve_checked(d, none.eval.peak, o, &r0);
    printf("# %s: %d ops (%d forward, %d backward), forward %.0f flops; "
           "policy none: pool peak %zu, model peak %.0f; MILP at that peak: "
           "%s, recompute %.4f, %d rows, %d columns (%d binary), %.2f s\n",
           name, d->n, d->n - n_bw, n_bw, d->forward_flops,
           none.sum.predicted_peak, none.eval.peak,
           rc == 2 ? "error" : mgi_ckm_outcome_name(r0.outcome),
           r0.recompute_flops / fw, r0.n_rows, r0.n_cols, r0.n_binaries,
           r0.seconds);
    if (compact_on)
        printf("# %s compact: %d ops in its DAG (plain %d), %d readers with "
               "a pack or its whole source to read; policy none with "
               "compaction: pool peak %zu (%.4f of plain's %zu)\n",
               name, d->n, plain.dag.n, d->n_alt, none.sum.predicted_peak,
               (double)none.sum.predicted_peak /
                   (double)plain.sum.predicted_peak,
               plain.sum.predicted_peak);
    fflush(stdout);
    free(r0.R);
    free(r0.S);
    const size_t none_peak = ref->sum.predicted_peak;
    const int n_ops = d->n;
    for (int k = 0; rc < 2 && k < n_fr; k++) {
        const size_t budget = (size_t)(fr[k] * (double)none_peak);
        mg_checkpoints cb = {.policy = MG_CKPT_BUDGET,
                             .budget_bytes = budget,
                             .compact = compact_on};
        mgi_ckm_planned bp;
        mg_status s = planned_make(name, &cb, &bp);
        /* the row's first columns (any notes go on lines before it) */
#define ROW_START() printf("%s,%d,%.2f,%zu,", name, n_ops, fr[k], budget)
        if (s == MG_ERR_NOMEM) {
            ROW_START();
            printf(",,,,,,,,,,");
            int c = at_budget(d, (double)budget, -1, fw, o, NULL, NULL);
            if (c > rc) rc = c;
            if (c < 2)
                c = plain_cols(name, &plain.dag, (double)budget, -1, fw, o);
            if (c > rc) rc = c;
            printf("%sbudget policy infeasible\n", o->at_budget ? "," : "");
            continue;
        }
        if (s != MG_OK) {
            ROW_START();
            printf("\n");
            fprintf(stderr, "mg-checkmate: %s at %zu: %s\n", name, budget,
                    mgi_ckm_last_error());
            rc = 2;
            break;
        }
        const double mg = bp.sum.recompute_flops;
        if (bp.dag.n != n_ops ||
            fabs(bp.eval.recompute_flops - mg) > 1e-9 * (1 + mg))
            printf("# note: the budget plan's DAG has %d ops (none's %d) and "
                   "its stage schedule recomputes %.0f flops (summary %.0f)\n",
                   bp.dag.n, n_ops, bp.eval.recompute_flops, mg);
        if (bp.order_peak != bp.eval.peak)
            printf("# note: the budget plan peaks at %.0f bytes in its own "
                   "order, %.0f in stage order; the MILP gets the latter\n",
                   bp.order_peak, bp.eval.peak);
        mgi_ckm_result r;
        mgi_ckm_options os = *o; /* from the policy's own schedule */
        os.start = no_start ? NULL : bp.R;
        int c = solve_checked(&bp.dag, bp.eval.peak, &os, &r);
        if (c > rc) rc = c;
        ROW_START();
#undef ROW_START
        printf("%zu,%.0f,%.4f,", bp.sum.predicted_peak, bp.eval.peak, mg / fw);
        if (c == 2) {
            printf("error,,,,,,\n");
        } else {
            const bool sol =
                r.outcome == MGI_CKM_OPTIMAL || r.outcome == MGI_CKM_FEASIBLE;
            printf("%s,%s,", mgi_ckm_outcome_name(r.outcome),
                   start_name(r.start_used));
            if (sol) printf("%.4f,", r.recompute_flops / fw);
            else printf(",");
            printf("%.4f,", r.bound_flops / fw);
            if (sol) {
                const double gap = bp.eval.recompute_flops - r.recompute_flops;
                printf("%.4f,", gap / fw);
                if (bp.eval.recompute_flops > 0)
                    printf("%.3f,", gap / bp.eval.recompute_flops);
                else printf(",");
            } else {
                printf(",,");
            }
            printf("%.2f", r.seconds);
            int c2 = at_budget(d, (double)budget, bp.eval.recompute_flops, fw,
                               o, &bp, NULL);
            if (c2 > rc) rc = c2;
            if (c2 < 2)
                c2 = plain_cols(name, &plain.dag, (double)budget,
                                bp.eval.recompute_flops, fw, o);
            if (c2 > rc) rc = c2;
            printf("\n");
            /* memgrad's schedule is feasible at its own peak: no bound
             * may exceed what it recomputes */
            if (r.outcome == MGI_CKM_INFEASIBLE ||
                r.bound_flops > bp.eval.recompute_flops * (1 + 1e-9) + 1e-6) {
                printf("# CHECK FAILED: the MILP says %s with bound %.0f flops "
                       "where memgrad's schedule recomputes %.0f\n",
                       mgi_ckm_outcome_name(r.outcome), r.bound_flops,
                       bp.eval.recompute_flops);
                if (rc < 1) rc = 1;
            }
        }
        fflush(stdout);
        free(r.R);
        free(r.S);
        mgi_ckm_planned_free(&bp);
    }
    if (rc < 2 && o->bisect) {
        /* issue 29's target is without compaction: --compact bisects the
         * plain DAG and the budget policy without compaction */
        const bool was = compact_on;
        compact_on = false;
        const int c = bisect_min(name, ref, ref->eval.peak, o);
        compact_on = was;
        if (c > rc) rc = c;
    }
    mgi_ckm_planned_free(&none);
    mgi_ckm_planned_free(&plain);
    return rc;
}

static void usage(void) {
    fprintf(stderr,
            "usage: mg-checkmate [--model chain|mlp|resnet|unet-small|unet|"
            "transformer|all] [--fractions F,F,...] "
            "[--time-limit SECONDS] [--cpu-limit SECONDS] [--node-limit N] "
            "[--no-start] [--recompute-backward] "
            "[--bisect] [--at-budget] [--compact] "
            "[--solver glpk|cbc] [--threads N]\n");
}

int main(int argc, char **argv) {
    const char *model = "all";
    char fr_s[256] = "0.3,0.4,0.5,0.6,0.7,0.8,0.9,1.0";
    mgi_ckm_options o = {.time_limit_s = 60};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "--fractions") && i + 1 < argc &&
                 strlen(argv[i + 1]) < sizeof fr_s)
            strcpy(fr_s, argv[++i]);
        else if (!strcmp(argv[i], "--time-limit") && i + 1 < argc) {
            char *end;
            o.time_limit_s = strtod(argv[++i], &end);
            if (*end || !(o.time_limit_s > 0)) {
                usage();
                return 2;
            }
        } else if (!strcmp(argv[i], "--cpu-limit") && i + 1 < argc) {
            char *end;
            o.cpu_limit_s = strtod(argv[++i], &end);
            if (*end || !(o.cpu_limit_s > 0)) {
                usage();
                return 2;
            }
        } else if (!strcmp(argv[i], "--no-start")) {
            no_start = true;
        } else if (!strcmp(argv[i], "--node-limit") && i + 1 < argc) {
            char *end;
            o.node_limit = strtol(argv[++i], &end, 10);
            if (*end || o.node_limit < 1) {
                usage();
                return 2;
            }
        } else if (!strcmp(argv[i], "--recompute-backward"))
            o.recompute_backward = true;
        else if (!strcmp(argv[i], "--bisect")) o.bisect = true;
        else if (!strcmp(argv[i], "--at-budget")) o.at_budget = true;
        else if (!strcmp(argv[i], "--compact")) o.compact = compact_on = true;
        else if (!strcmp(argv[i], "--solver") && i + 1 < argc) {
            const char *v = argv[++i];
            if (!strcmp(v, "glpk")) o.solver = MGI_CKM_GLPK;
            else if (!strcmp(v, "cbc")) o.solver = MGI_CKM_CBC;
            else {
                usage();
                return 2;
            }
        } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            char *end;
            const long t = strtol(argv[++i], &end, 10);
            if (*end || t < 1 || t > 256) {
                usage();
                return 2;
            }
            o.threads = (int)t;
        } else {
            usage();
            return 2;
        }
    }
    double fr[32];
    int n_fr = milp_fractions_parse(fr_s, fr, 32, "mg-checkmate");
    if (n_fr < 0) return 2;
    printf("model,n_ops,budget_fraction,budget_bytes,mg_pool_peak,"
           "model_peak,mg_recompute,milp_status,milp_start,milp_recompute,"
           "milp_bound,"
           "gap,gap_rel,solve_s%s%s\n",
           o.at_budget ? ",at_budget_status,at_budget_start,"
                         "at_budget_recompute,at_budget_bound,"
                         "mg_over_at_budget"
                       : "",
           o.at_budget && o.compact
               ? ",plain_at_budget_status,plain_at_budget_start,"
                 "plain_at_budget_recompute,"
                 "plain_at_budget_bound,mg_over_plain_at_budget,"
                 "mg_plain_recompute,mg_plain_over_plain_at_budget"
               : "");
    int rc = 0, found = 0;
    for (int i = 0; i < N_MODELS; i++) {
        if (strcmp(model, "all") ? strcmp(model, model_names[i])
                                 : !strcmp(model_names[i], "transformer"))
            continue;
        found++;
        int r = run_model(model_names[i], fr, n_fr, &o);
        if (r > rc) rc = r;
    }
    if (!found) {
        usage();
        return 2;
    }
    return rc;
}
