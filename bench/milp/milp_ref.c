/*
 * milp_ref.c - mg-milp-ref: a MILP reference for MG_CKPT_BUDGET on small
 * graphs (issue 17), solved with GLPK, judged by memgrad's own planner.
 *
 * For a model's forward graph (at most MAX_CAND computed tensors) and a
 * budget B, the MILP picks what the forward pass keeps:
 *
 *   binary k_t for each computed forward tensor t (1: kept)
 *   minimise    sum_t (1 - k_t) f_t      recomputed flops
 *   subject to  sum_t k_t b_t <= C       kept bytes within a capacity
 *
 * f_t is memgrad's recompute cost of t alone (the recompute flops of the
 * plan that keeps every tensor but t, from mg_plan_summarize) and b_t its
 * bytes. The capacity starts at B minus what policy none needs beyond the
 * forward tensors the backward pass reads (gradients in flight,
 * workspace), and is then corrected by the real planner: the MILP's keep
 * set is differentiated with MG_CKPT_COLLECTION, compiled, and its exact
 * predicted peak P compared with B; while P > B the capacity shrinks by
 * P - B (or, while it fits, grows), then it is bisected between the
 * largest capacity whose plan fitted and the smallest whose plan did not, and
 * the fitting plan with the least recomputation is the MILP's answer. The model
 * is a knapsack (PyTorch's min-cut partitioner solves one for
 * activation_memory_budget), not Checkmate's scheduled MILP: it is exact in
 * what it recomputes but not in memory, which the planner feedback supplies. So
 * it is a reference to beat, not a proof of optimality. Its answer is then
 * compared with MG_CKPT_BUDGET at the same budget: recomputed flops as a
 * fraction of one forward pass, and exact predicted peaks, both under a
 * single-level rewriter (what a keep set can express).
 *
 *   usage: mg-milp-ref [--model mlp|resnet|unet|transformer|all]
 *                      [--fractions F,F,...] [--check]
 *
 * --check exits 1 if, at some budget, the MILP found a plan that fits with
 * less recomputation than MG_CKPT_BUDGET's (beyond 1e-9 of a forward pass).
 */
#include "memgrad.h"
#include "memgrad_models.h"
#include "milp_args.h"

#include <glpk.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_CAND 64
#define MAX_ROUNDS 40

static mg_model *model_build(const char *name) {
    if (!strcmp(name, "mlp"))
        return mg_model_mlp(6, 64, 256, 64, 10, 0.0, MG_F32, 1);
    if (!strcmp(name, "resnet"))
        return mg_model_resnet(3, 8, 8, 16, 10, MG_F32, 1);
    if (!strcmp(name, "unet")) return mg_model_unet(2, 8, 4, 16, MG_F32, 1);
    if (!strcmp(name, "transformer"))
        return mg_model_transformer(1, 32, 2, 32, 8, 64, 0.0, 1, MG_F32, 1);
    return NULL;
}

/* One training step's plan under checkpoints c, with inputs, parameters
 * and gradients as caller memory, as the budget policy counts it. */
typedef struct trial {
    size_t peak;
    double recompute, forward; /* flops */
} trial;

static mg_status trial_run(const char *name, const mg_checkpoints *c,
                           trial *out) {
    mg_model *m = model_build(name);
    if (!m)
        return mg_last_status() != MG_OK ? mg_last_status()
                                         : MG_ERR_INVALID_ARG;
    mg_status s = mg_model_gradients(m, c);
    mg_plan *p = NULL;
    int n = 0;
    mg_binding *b = NULL;
    void **mem = NULL;
    if (s == MG_OK) {
        mg_tensor *outs = malloc((size_t)(m->n_params + 1) * sizeof *outs);
        b = malloc((size_t)(2 * m->n_params + 3) * sizeof *b);
        mem = calloc((size_t)(2 * m->n_params + 3), sizeof *mem);
        if (!outs || !b || !mem) s = MG_ERR_NOMEM;
        for (int i = 0; s == MG_OK && i < m->n_params; i++)
            outs[i] = m->grads[i];
        if (s == MG_OK) {
            outs[m->n_params] = m->loss;
            s = mg_plan_compile(m->g, outs, m->n_params + 1, NULL, &p);
        }
        free(outs);
    }
    mg_tensor bound[4] = {m->input, m->target, m->loss};
    for (int i = 0; s == MG_OK && i < 2 * m->n_params + 3; i++) {
        mg_tensor t = i < 3                 ? bound[i]
                      : i < 3 + m->n_params ? m->params[i - 3]
                                            : m->grads[i - 3 - m->n_params];
        if (!(mem[i] = calloc(1, mg_tensor_nbytes(m->g, t)))) s = MG_ERR_NOMEM;
        else b[n++] = (mg_binding){t, mem[i]};
    }
    mg_plan_summary sum;
    if (s == MG_OK) s = mg_plan_summarize(p, b, n, &sum);
    if (s == MG_OK)
        *out =
            (trial){sum.predicted_peak, sum.recompute_flops, sum.forward_flops};
    for (int i = 0; mem && i < 2 * m->n_params + 3; i++) free(mem[i]);
    free(mem);
    free(b);
    mg_plan_free(p);
    mg_model_free(m);
    return s;
}

/* The computed forward tensors of the model (no leaves), in id order. */
static int candidates(const char *name, mg_tensor *cand, size_t *bytes) {
    mg_model *m = model_build(name);
    if (!m) return -1;
    int n = 0;
    for (mg_tensor t = 0; t < mg_graph_num_tensors(m->g); t++) {
        if (mg_tensor_num_inputs(m->g, t) == 0 || t == m->loss) continue;
        if (n == MAX_CAND) {
            n = -1;
            break;
        }
        bytes[n] = mg_tensor_nbytes(m->g, t);
        cand[n++] = t;
    }
    mg_model_free(m);
    return n;
}

static mg_status keep_set_run(const char *name, const mg_tensor *cand,
                              const bool *keep, int n, trial *out) {
    mg_tensor list[MAX_CAND];
    int k = 0;
    for (int i = 0; i < n; i++)
        if (keep[i]) list[k++] = cand[i];
    mg_checkpoints c = {
        .policy = MG_CKPT_COLLECTION, .tensors = list, .n_tensors = k};
    return trial_run(name, &c, out);
}

/* The knapsack MILP: least sum (1-k) f with sum k b <= cap. Returns false
 * if GLPK finds no solution (cap < 0). */
static bool milp_solve(int n, const double *f, const size_t *b, double cap,
                       bool *keep) {
    if (cap < 0) return false;
    glp_prob *lp = glp_create_prob();
    glp_set_obj_dir(lp, GLP_MAX); /* max sum k f = min recomputed flops */
    glp_add_rows(lp, 1);
    glp_set_row_bnds(lp, 1, GLP_UP, 0.0, cap);
    glp_add_cols(lp, n);
    int ia[MAX_CAND + 1], ja[MAX_CAND + 1];
    double ar[MAX_CAND + 1];
    for (int j = 1; j <= n; j++) {
        glp_set_col_kind(lp, j, GLP_BV);
        glp_set_obj_coef(lp, j, f[j - 1]);
        ia[j] = 1;
        ja[j] = j;
        ar[j] = (double)b[j - 1];
    }
    glp_load_matrix(lp, n, ia, ja, ar);
    glp_iocp parm;
    glp_init_iocp(&parm);
    parm.presolve = GLP_ON;
    parm.msg_lev = GLP_MSG_OFF;
    bool ok = glp_intopt(lp, &parm) == 0 &&
              (glp_mip_status(lp) == GLP_OPT || glp_mip_status(lp) == GLP_FEAS);
    for (int j = 1; ok && j <= n; j++)
        keep[j - 1] = glp_mip_col_val(lp, j) > 0.5;
    glp_delete_prob(lp);
    return ok;
}

static int run_model(const char *name, const double *fr, int n_fr, bool check) {
    mg_tensor cand[MAX_CAND];
    size_t bytes[MAX_CAND];
    double f[MAX_CAND];
    bool keep[MAX_CAND];
    int n = candidates(name, cand, bytes);
    if (n <= 0) {
        fprintf(stderr, "mg-milp-ref: %s: no model or more than %d tensors\n",
                name, MAX_CAND);
        return 2;
    }
    trial none, t;
    mg_checkpoints cn = {.policy = MG_CKPT_NONE};
    double kept_all = 0, needed = 0;
    for (int i = 0; i < n; i++) kept_all += (double)bytes[i];
    if (trial_run(name, &cn, &none) != MG_OK) {
        fprintf(stderr, "mg-milp-ref: %s: %s\n", name, mg_last_error());
        return 2;
    }
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < n; j++) keep[j] = j != i;
        if (keep_set_run(name, cand, keep, n, &t) != MG_OK) {
            fprintf(stderr, "mg-milp-ref: %s: %s\n", name, mg_last_error());
            return 2;
        }
        f[i] = t.recompute;
        /* what plain backprop keeps: tensors the backward pass reads,
         * which cost recomputation when not kept */
        if (f[i] > 0) needed += (double)bytes[i];
    }
    printf("# %s: %d computed forward tensors (%.0f bytes, %.0f read by the "
           "backward pass), none's peak %zu, forward %.0f flops\n",
           name, n, kept_all, needed, none.peak, none.forward);
    int worse = 0;
    for (int k = 0; k < n_fr; k++) {
        const size_t budget = (size_t)(fr[k] * (double)none.peak);
        /* MG_CKPT_BUDGET */
        mg_checkpoints cb = {.policy = MG_CKPT_BUDGET, .budget_bytes = budget};
        trial bud;
        bool bud_ok = trial_run(name, &cb, &bud) == MG_OK;
        /* the MILP with planner feedback: shrink the capacity by the
         * excess until the plan fits, then bisect between the largest
         * capacity that fitted and the smallest that did not, keeping the
         * fitting plan with the least recomputation */
        double cap = (double)budget - ((double)none.peak - needed);
        double fit_cap = -1, over_cap = -1;
        trial mil = {0}, cur;
        bool mil_ok = false;
        int rounds = 0;
        while (rounds < MAX_ROUNDS) {
            if (fit_cap >= 0 && over_cap >= 0) {
                if (over_cap - fit_cap < 1) break;
                cap = 0.5 * (fit_cap + over_cap);
            }
            if (!milp_solve(n, f, bytes, cap, keep)) break;
            rounds++;
            if (keep_set_run(name, cand, keep, n, &cur) != MG_OK) break;
            if (cur.peak <= budget) {
                if (!mil_ok || cur.recompute < mil.recompute) mil = cur;
                mil_ok = true;
                fit_cap = cap;
                if (over_cap < 0) { /* fits: try a larger capacity */
                    if (cur.recompute == 0) break;
                    double up = (double)(budget - cur.peak);
                    cap += up > (double)budget / 16 ? up : (double)budget / 16;
                }
            } else {
                over_cap = cap;
                if (fit_cap < 0) cap -= (double)(cur.peak - budget);
            }
        }
        double fw = none.forward > 0 ? none.forward : 1;
        printf("%s,%.3f,%zu,", name, fr[k], budget);
        if (bud_ok) printf("%zu,%.4f,", bud.peak, bud.recompute / fw);
        else printf(",,");
        if (mil_ok)
            printf("%zu,%.4f,%d,", mil.peak, mil.recompute / fw, rounds);
        else printf(",,%d,", rounds);
        if (bud_ok && mil_ok)
            printf("%+.4f\n", (bud.recompute - mil.recompute) / fw);
        else
            printf("%s\n", !bud_ok && !mil_ok ? "both infeasible"
                           : !bud_ok          ? "budget policy infeasible"
                                              : "milp infeasible");
        if (mil_ok && (!bud_ok || bud.recompute > mil.recompute + 1e-9 * fw))
            worse++;
    }
    if (worse)
        printf("# %s: at %d budget(s) the MILP fits with less recomputation "
               "than MG_CKPT_BUDGET\n",
               name, worse);
    return check && worse ? 1 : 0;
}

int main(int argc, char **argv) {
    const char *model = "all";
    char fr_s[256] = "0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9,1.0";
    bool check = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--check")) check = true;
        else if (!strcmp(argv[i], "--model") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "--fractions") && i + 1 < argc &&
                 strlen(argv[i + 1]) < sizeof fr_s)
            strcpy(fr_s, argv[++i]);
        else {
            fprintf(stderr,
                    "usage: mg-milp-ref [--model mlp|resnet|unet|"
                    "transformer|all] [--fractions F,F,...] [--check]\n");
            return 2;
        }
    }
    double fr[32];
    int n_fr = milp_fractions_parse(fr_s, fr, 32, "mg-milp-ref");
    if (n_fr < 0) return 2;
    glp_term_out(GLP_OFF);
    printf("model,budget_fraction,budget_bytes,budget_policy_peak,"
           "budget_policy_recompute,milp_peak,milp_recompute,milp_rounds,"
           "recompute_gap\n");
    const char *all[] = {"mlp", "resnet", "unet", "transformer"};
    int rc = 0;
    for (int i = 0; i < 4; i++) {
        if (strcmp(model, "all") && strcmp(model, all[i])) continue;
        int r = run_model(all[i], fr, n_fr, check);
        if (r > rc) rc = r;
    }
    return rc;
}
