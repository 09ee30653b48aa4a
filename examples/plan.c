/*
 * plan.c - memgrad-plan: build a model, differentiate it under a checkpoint
 * policy and print the plan report (checkpoints, segments, recomputed
 * flops, predicted peak beside plain backprop's). Nothing is run, but with
 * --timeline.
 *
 * --timeline FILE.svg draws the memory timeline (memgrad_observe.h): pool
 * bytes in use against step for each policy (none, memory, speed) on the
 * same axes, predicted from the plan and measured in one run on the CPU,
 * with the phases of --policy's plan shaded, every policy's phases as a
 * strip below, and the checkpoints marked. --csv PREFIX also writes each
 * policy's timeline as PREFIX-<policy>.csv (mg_plan_write_timeline).
 *
 * --policy budget --budget B plans under MG_CKPT_BUDGET (not with
 * --timeline). B is a byte count, whole or with a binary suffix K, M or G
 * (2^10, 2^20, 2^30 bytes: "64M"), or a fraction of plain backprop's peak
 * in the budget's measure written with an x ("0.25x"), as mg_budget_parse
 * reads it. The budget covers memgrad's pool (activations, recomputed
 * copies, intermediate gradients, workspace), with the parameters, the
 * loss and the gradients in caller memory; the report's budget line
 * compares the plan's peak in that measure with it. If nothing fits, the
 * message names the smallest budget that does.
 *
 * --offload BW,RATE (with --policy budget) lets the budget policy offload
 * saved tensors to the host tier as well as recompute (issue 51,
 * docs/offload.md), pricing copies at BW bytes/s beside compute at RATE
 * flops/s; the step is compiled offloading the tensors it chose, with the
 * same rates, and the report lists them, their bytes and the overlap the
 * plan predicts.
 *
 *   usage: memgrad-plan [--model mlp|resnet|unet|transformer]
 *                       [--policy none|memory|speed|budget] [--budget B]
 *                       [--offload BW,RATE]
 *                       [--depth N] [--width W] [--batch B] [--dot FILE]
 *                       [--dump] [--timeline FILE.svg] [--csv PREFIX]
 */
#include <memgrad.h>
#include <memgrad_models.h>
#include <memgrad_observe.h>

#include "../tools/cli_policy.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int usage(void) {
    fprintf(stderr,
            "usage: memgrad-plan [--model mlp|resnet|unet|transformer] "
            "[--policy none|memory|speed|budget] [--budget BYTES|BYTES{K,M,G}|"
            "FRACTIONx] [--offload BW,RATE] [--depth N] [--width W] [--batch B] [--dot FILE] "
            "[--dump] [--timeline FILE.svg] [--csv PREFIX]\n"
            "  --budget goes with --policy budget (not --timeline): bytes of "
            "memgrad's pool, K/M/G = 2^10/2^20/2^30, or a fraction of plain "
            "backprop's peak, e.g. 0.25x\n"
            "  --offload goes with --policy budget: host copy bytes/s and "
            "compute flops/s, e.g. 12e9,5e11\n");
    return 2;
}

static int fail(const char *what) {
    fprintf(stderr, "memgrad-plan: %s: %s\n", what, mg_last_error());
    return 1;
}

/* width is the MLP's units, the ResNet's and U-Net's channels, the
 * transformer's d_model. Images are 32x32, sequences 64 tokens. */
static mg_model *build(const char *model, int depth, int width, int batch) {
    if (!strcmp(model, "mlp"))
        return mg_model_mlp(depth, width, batch, width, 10, 0.0, MG_F32, 1);
    if (!strcmp(model, "resnet"))
        return mg_model_resnet(depth, width, batch, 32, 10, MG_F32, 1);
    if (!strcmp(model, "unet"))
        return mg_model_unet(depth, width, batch, 32, MG_F32, 1);
    if (!strcmp(model, "transformer"))
        return mg_model_transformer(depth, width, 4, 64, batch, 1000, 0.1, 1,
                                    MG_F32, 1);
    return NULL;
}

/* ------------------------------------------------------------ timeline */

#define N_POLICIES 3
static const mg_ckpt_policy policies[N_POLICIES] = {
    MG_CKPT_NONE, MG_CKPT_MEMORY, MG_CKPT_SPEED};
static const char *pname(int k) { return mg_ckpt_policy_name(policies[k]); }
static const char *const policy_colors[N_POLICIES] = {"#d62728", "#1f77b4",
                                                      "#2ca02c"};
static const char *const phase_colors[3] = {"#dbe9f6", "#fde0c5", "#dcefd8"};

typedef struct series {
    mg_step_info *pred, *meas;
    int n, n_meas;
    size_t peak;
} series;

static mg_status record_step(void *user, const mg_step_info *info) {
    series *s = user;
    if (s->n_meas >= s->n)
        return mg_set_error(MG_ERR_INTERNAL, "more steps than the plan has");
    s->meas[s->n_meas++] = *info;
    return MG_OK;
}

/* Build the model under policy k, compile its training step, predict its
 * timeline and measure it in one run with parameters, gradients and the
 * loss in caller memory (as in training). */
static int timeline_policy(const char *model, int depth, int width, int batch,
                           int k, const char *csv, series *out) {
    mg_checkpoints ck = {.policy = policies[k]};
    mg_model *m = build(model, depth, width, batch);
    if (!m) return fail("building the model");
    int n = m->n_params, rc = 0, nb = 2 * n + 3;
    mg_tensor *outs = calloc((size_t)n + 1, sizeof *outs);
    mg_binding *binds = calloc(2 * (size_t)n + 3, sizeof *binds);
    void **mem = calloc(2 * (size_t)n + 3, sizeof *mem);
    void **pd = NULL;
    mg_plan *plan = NULL;
    mg_exec *ex = NULL;
    series *s = out;
    /* failures go to the end, which frees what was made */
    if (mg_model_gradients(m, &ck) != MG_OK) {
        rc = fail("mg_gradients");
        goto done;
    }
    if (!outs || !binds || !mem) {
        rc = fail("out of memory");
        goto done;
    }
    for (int i = 0; i < n; i++) {
        outs[i] = m->grads[i];
        binds[2 * i] = (mg_binding){m->params[i], NULL};
        binds[2 * i + 1] = (mg_binding){m->grads[i], NULL};
    }
    outs[n] = m->loss;
    binds[2 * n] = (mg_binding){m->loss, NULL};
    binds[2 * n + 1] = (mg_binding){m->input, NULL};
    binds[2 * n + 2] = (mg_binding){m->target, NULL};
    for (int i = 0; i < nb; i++) {
        mem[i] = calloc(1, mg_tensor_nbytes(m->g, binds[i].tensor));
        if (!mem[i]) {
            rc = fail("out of memory");
            goto done;
        }
        binds[i].data = mem[i];
    }
    pd = calloc((size_t)n + 1, sizeof *pd);
    for (int i = 0; pd && i < n; i++) pd[i] = mem[2 * i];
    mg_observer o = {.user = s, .after_op = record_step};
    if (!pd || mg_model_init_params(m, 1, pd) != MG_OK ||
        mg_model_init_data(m, 1, mem[2 * n + 1], mem[2 * n + 2]) != MG_OK)
        rc = fail("initialising");
    else if (mg_plan_compile(m->g, outs, n + 1, NULL, &plan) != MG_OK)
        rc = fail("mg_plan_compile");
    else if ((s->n = mg_plan_timeline(plan, binds, nb, NULL, 0)) < 0)
        rc = fail("mg_plan_timeline");
    else if (!(s->pred = calloc((size_t)s->n + 1, sizeof *s->pred)) ||
             !(s->meas = calloc((size_t)s->n + 1, sizeof *s->meas)))
        rc = fail("out of memory");
    else if (mg_plan_timeline(plan, binds, nb, s->pred, s->n) != s->n)
        rc = fail("mg_plan_timeline");
    else if (mg_exec_new(NULL, &ex) != MG_OK ||
             mg_exec_observer_attach(ex, &o, NULL) != MG_OK ||
             mg_exec_run(ex, plan, binds, nb, 1) != MG_OK)
        rc = fail("running");
    if (!rc) {
        s->peak = mg_plan_predicted_peak(plan, binds, nb);
        printf("%s: %d steps, predicted peak %zu bytes, measured %d steps\n",
               pname(k), s->n, s->peak, s->n_meas);
        for (int i = 0; i < s->n && i < s->n_meas; i++)
            if (s->pred[i].bytes_after != s->meas[i].bytes_after ||
                s->pred[i].bytes_before != s->meas[i].bytes_before) {
                fprintf(stderr,
                        "memgrad-plan: %s step %d: measured %zu "
                        "bytes, predicted %zu\n",
                        pname(k), i, s->meas[i].bytes_after,
                        s->pred[i].bytes_after);
                rc = 1;
                break;
            }
    }
    if (!rc && csv) {
        char path[1024];
        snprintf(path, sizeof path, "%s-%s.csv", csv, pname(k));
        FILE *f = fopen(path, "w");
        if (!f || mg_plan_write_timeline(plan, binds, nb, s->meas, f) != MG_OK)
            rc = fail(path);
        if (f) fclose(f);
    }
done:
    /* Tensor names live in the graph, freed below. */
    for (int i = 0; s->pred && s->meas && i < s->n; i++)
        s->pred[i].tensor_name = s->meas[i].tensor_name = NULL;
    mg_exec_free(ex);
    mg_plan_free(plan);
    for (int i = 0; mem && i < nb; i++) free(mem[i]);
    free(mem);
    free(pd);
    free(binds);
    free(outs);
    mg_model_free(m);
    return rc;
}

static double mib(size_t b) { return (double)b / (1024.0 * 1024.0); }

/* The picture: plot area, phase shading of series `shade`, a predicted
 * (wide, pale) and a measured (thin, dashed) line per policy, checkpoints
 * as circles, one phase strip per policy below. */
static void write_svg(FILE *f, const series *ser, int shade,
                      const char *title) {
    const double W = 1000, L = 80, T = 118, PW = 880, PH = 330;
    int max_n = 1;
    size_t max_b = 1;
    for (int k = 0; k < N_POLICIES; k++) {
        if (ser[k].n > max_n) max_n = ser[k].n;
        for (int i = 0; i < ser[k].n; i++) {
            size_t b = ser[k].pred[i].bytes_after;
            if (b > max_b) max_b = b;
        }
    }
    /* y ticks at a round MiB step */
    double top = mib(max_b) * 1.05;
    double step = pow(10, floor(log10(top / 5)));
    if (top / step > 25) step *= 5;
    else if (top / step > 10) step *= 2;
    const double H = T + PH + 60 + 22.0 * N_POLICIES + 20;
#define X(s) (L + PW * ((double)(s)) / max_n)
#define Y(b) (T + PH - PH * mib(b) / top)
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" "
            "height=\"%.0f\" font-family=\"sans-serif\" font-size=\"12\">\n"
            "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
            "<text x=\"%.0f\" y=\"24\" font-size=\"15\">%s</text>\n",
            W, H, L, title);
    /* phase shading of one policy's steps */
    const series *sh = &ser[shade];
    for (int i = 0; i < sh->n;) {
        int j = i;
        while (j < sh->n && sh->pred[j].phase == sh->pred[i].phase) j++;
        fprintf(f,
                "<rect x=\"%.2f\" y=\"%.0f\" width=\"%.2f\" "
                "height=\"%.0f\" fill=\"%s\"/>\n",
                X(i), T, X(j) - X(i), PH, phase_colors[sh->pred[i].phase]);
        i = j;
    }
    fprintf(f,
            "<text x=\"%.0f\" y=\"%.0f\" fill=\"#555\">shading: phases "
            "of policy %s</text>\n",
            L + 8, T + 16, pname(shade));
    /* axes and ticks */
    fprintf(f,
            "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" "
            "fill=\"none\" stroke=\"#333\"/>\n",
            L, T, PW, PH);
    for (double v = 0; v <= top; v += step) {
        double y = T + PH - PH * v / top;
        fprintf(f,
                "<line x1=\"%.0f\" x2=\"%.0f\" y1=\"%.1f\" y2=\"%.1f\" "
                "stroke=\"#ccc\" stroke-width=\"0.5\"/><text x=\"%.0f\" "
                "y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
                L, L + PW, y, y, L - 6, y + 4, v);
    }
    int xs = (int)pow(10, floor(log10(max_n / 5.0)));
    if (xs < 1) xs = 1;
    if (max_n / xs > 25) xs *= 5;
    else if (max_n / xs > 10) xs *= 2;
    for (int s = 0; s <= max_n; s += xs)
        fprintf(f,
                "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\">"
                "%d</text>\n",
                X(s), T + PH + 16, s);
    fprintf(f,
            "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">step"
            "</text>\n<text x=\"18\" y=\"%.0f\" transform=\"rotate(-90 18 "
            "%.0f)\" text-anchor=\"middle\">pool MiB in use</text>\n",
            L + PW / 2, T + PH + 34, T + PH / 2, T + PH / 2);
    /* the lines: predicted wide and pale, measured thin and dashed */
    for (int k = 0; k < N_POLICIES; k++) {
        const series *s = &ser[k];
        for (int m = 0; m < 2; m++) {
            const mg_step_info *v = m ? s->meas : s->pred;
            int n = m ? s->n_meas : s->n;
            fprintf(f,
                    "<polyline fill=\"none\" stroke=\"%s\" %s "
                    "points=\"",
                    policy_colors[k],
                    m ? "stroke-width=\"1.2\" stroke-dasharray=\"5 3\""
                      : "stroke-width=\"5\" stroke-opacity=\"0.3\"");
            for (int i = 0; i < n; i++)
                fprintf(f, "%.2f,%.2f %.2f,%.2f ", X(i), Y(v[i].bytes_before),
                        X(i + 1), Y(v[i].bytes_after));
            fputs("\"/>\n", f);
        }
        for (int i = 0; i < s->n; i++)
            if (s->pred[i].is_checkpoint &&
                s->pred[i].phase == MG_PHASE_FORWARD)
                fprintf(f,
                        "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"3.5\" "
                        "fill=\"white\" stroke=\"%s\" stroke-width=\"1.5\"/>"
                        "\n",
                        X(i + 1), Y(s->pred[i].bytes_after), policy_colors[k]);
        /* legend */
        double ly = 48 + 18.0 * k;
        fprintf(f,
                "<line x1=\"%.0f\" x2=\"%.0f\" y1=\"%.0f\" y2=\"%.0f\" "
                "stroke=\"%s\" stroke-width=\"3\"/><text x=\"%.0f\" "
                "y=\"%.0f\">%s: predicted peak %.2f MiB (workspace included), "
                "%d steps</text>\n",
                L, L + 25, ly - 4, ly - 4, policy_colors[k], L + 32, ly,
                pname(k), mib(s->peak), s->n);
    }
    fprintf(f,
            "<text x=\"%.0f\" y=\"48\" fill=\"#555\">wide pale line: "
            "predicted</text><text x=\"%.0f\" y=\"66\" fill=\"#555\">"
            "dashed line: measured in a run</text><text x=\"%.0f\" y=\"84\" "
            "fill=\"#555\">circles: checkpoints</text>\n",
            L + 580, L + 580, L + 580);
    /* one phase strip per policy */
    for (int k = 0; k < N_POLICIES; k++) {
        const series *s = &ser[k];
        double y = T + PH + 50 + 22.0 * k;
        fprintf(f,
                "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"end\">%s"
                "</text>\n",
                L - 6, y + 11, pname(k));
        for (int i = 0; i < s->n;) {
            int j = i;
            while (j < s->n && s->pred[j].phase == s->pred[i].phase) j++;
            fprintf(f,
                    "<rect x=\"%.2f\" y=\"%.0f\" width=\"%.2f\" "
                    "height=\"14\" fill=\"%s\" stroke=\"#999\" "
                    "stroke-width=\"0.3\"/>\n",
                    X(i), y, X(j) - X(i), phase_colors[s->pred[i].phase]);
            i = j;
        }
    }
    double ly = T + PH + 50 + 22.0 * N_POLICIES + 6;
    for (int ph = 0; ph < 3; ph++)
        fprintf(f,
                "<rect x=\"%.0f\" y=\"%.0f\" width=\"14\" height=\"10\" "
                "fill=\"%s\" stroke=\"#999\"/><text x=\"%.0f\" y=\"%.0f\">"
                "%s</text>\n",
                L + 120.0 * ph, ly, phase_colors[ph], L + 120.0 * ph + 18,
                ly + 10, mg_phase_name((mg_phase)ph));
    fputs("</svg>\n", f);
#undef X
#undef Y
}

static int timeline(const char *model, int depth, int width, int batch,
                    const char *policy, const char *svg, const char *csv) {
    series ser[N_POLICIES] = {{0}};
    int rc = 0, shade = 1;
    for (int k = 0; k < N_POLICIES; k++)
        if (!strcmp(policy, pname(k))) shade = k;
    for (int k = 0; k < N_POLICIES && !rc; k++)
        rc = timeline_policy(model, depth, width, batch, k, csv, &ser[k]);
    if (!rc) {
        char title[256];
        snprintf(title, sizeof title,
                 "memory timeline: %s depth %d, width "
                 "%d, batch %d, f32, one training step",
                 model, depth, width, batch);
        FILE *f = fopen(svg, "w");
        if (!f) {
            fprintf(stderr, "memgrad-plan: cannot write %s\n", svg);
            rc = 1;
        } else {
            write_svg(f, ser, shade, title);
            if (fclose(f) != 0) rc = 1;
        }
    }
    for (int k = 0; k < N_POLICIES; k++) {
        free(ser[k].pred);
        free(ser[k].meas);
    }
    return rc;
}

/* The training step's plan of m (the gradients of the model's
 * mg_gradients call): the gradients and the loss as outputs, and in binds
 * the parameters, gradients and loss as caller memory, as in training (the
 * addresses are never used, nothing runs). budget goes into the plan. */
typedef struct step_plan {
    mg_tensor *outs, *offload;
    mg_binding *binds;
    int n_binds;
    mg_plan *plan;
} step_plan;

static void step_plan_free(step_plan *sp) {
    mg_plan_free(sp->plan);
    free(sp->outs);
    free(sp->offload);
    free(sp->binds);
}

/* ck: the policy the gradients were made under; with offload, the plan
 * offloads the tensors it chose, at its rates. */
static int step_plan_compile(const mg_model *m, size_t budget,
                             const mg_checkpoints *ck, step_plan *sp) {
    static char placeholder;
    int n = m->n_params;
    memset(sp, 0, sizeof *sp);
    sp->outs = malloc(sizeof *sp->outs * ((size_t)n + 1));
    sp->binds = malloc(sizeof *sp->binds * (2 * (size_t)n + 1));
    if (!sp->outs || !sp->binds) {
        fprintf(stderr, "memgrad-plan: out of memory\n");
        return 1;
    }
    for (int i = 0; i < n; i++) {
        sp->outs[i] = m->grads[i];
        sp->binds[2 * i] = (mg_binding){m->params[i], &placeholder};
        sp->binds[2 * i + 1] = (mg_binding){m->grads[i], &placeholder};
    }
    sp->outs[n] = m->loss;
    sp->binds[2 * n] = (mg_binding){m->loss, &placeholder};
    sp->n_binds = 2 * n + 1;
    mg_plan_options o = {.budget_bytes = budget};
    if (ck && ck->offload) {
        if (mg_cli_offloads(m->g, &sp->offload, &o.n_offload)) {
            fprintf(stderr, "memgrad-plan: out of memory\n");
            return 1;
        }
        o.offload = sp->offload;
        o.host_bandwidth = ck->host_bandwidth;
        o.compute_rate = ck->compute_rate;
    }
    if (mg_plan_compile(m->g, sp->outs, n + 1, &o, &sp->plan) != MG_OK)
        return fail("mg_plan_compile");
    return 0;
}

/* A fraction of plain backprop's peak in the budget's measure, as bytes. */
static int budget_of_fraction(const char *model, int depth, int width,
                              int batch, double fraction, size_t *budget) {
    mg_checkpoints none = {.policy = MG_CKPT_NONE};
    mg_model *m = build(model, depth, width, batch);
    if (!m) return mg_last_error()[0] ? fail("building the model") : usage();
    step_plan sp = {0};
    mg_plan_summary s;
    int rc = mg_model_gradients(m, &none) != MG_OK ? fail("mg_gradients")
             : step_plan_compile(m, 0, NULL, &sp)  ? 1
             : mg_plan_summarize(sp.plan, NULL, 0, &s) != MG_OK
                 ? fail("mg_plan_summarize")
                 : 0;
    if (!rc) {
        double b = floor(fraction * (double)s.budget_peak);
        if (!(b >= 1) || b >= (double)SIZE_MAX) {
            fprintf(stderr,
                    "memgrad-plan: --budget %gx of plain backprop's "
                    "%zu bytes is no budget\n",
                    fraction, s.budget_peak);
            rc = 2;
        } else {
            *budget = (size_t)b;
            printf("budget: %g of plain backprop's %zu bytes = %zu bytes\n",
                   fraction, s.budget_peak, *budget);
        }
    }
    step_plan_free(&sp);
    mg_model_free(m);
    return rc;
}

int main(int argc, char **argv) {
    int depth = 16, width = 64, batch = 32, dump = 0;
    const char *model = "mlp", *policy = "memory", *dot = NULL;
    const char *svg = NULL, *csv = NULL, *budget = NULL, *offload = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--dump")) {
            dump = 1;
            continue;
        }
        if (!v) return usage();
        if (!strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "--policy")) policy = v;
        else if (!strcmp(a, "--budget")) budget = v;
        else if (!strcmp(a, "--offload")) offload = v;
        else if (!strcmp(a, "--depth")) depth = atoi(v);
        else if (!strcmp(a, "--width")) width = atoi(v);
        else if (!strcmp(a, "--batch")) batch = atoi(v);
        else if (!strcmp(a, "--dot")) dot = v;
        else if (!strcmp(a, "--timeline")) svg = v;
        else if (!strcmp(a, "--csv")) csv = v;
        else return usage();
        i++;
    }
    mg_checkpoints ck = {.policy = MG_CKPT_NONE};
    int npol;
    char why[256];
    if (mg_cli_policy_list(policy, &ck.policy, 1, &npol, why, sizeof why)) {
        fprintf(stderr, "memgrad-plan: --policy: %s\n", why);
        return usage();
    }
    if ((ck.policy == MG_CKPT_BUDGET) != (budget != NULL)) {
        fprintf(stderr, "memgrad-plan: %s\n",
                budget ? "--budget goes with --policy budget"
                       : "--policy budget needs --budget");
        return usage();
    }
    if (offload && ck.policy != MG_CKPT_BUDGET) {
        fprintf(stderr, "memgrad-plan: --offload goes with --policy budget\n");
        return usage();
    }
    if (offload && mg_cli_offload_rates(offload, &ck.host_bandwidth,
                                        &ck.compute_rate, why, sizeof why)) {
        fprintf(stderr, "memgrad-plan: --offload: %s\n", why);
        return usage();
    }
    ck.offload = offload != NULL;
    size_t budget_bytes = 0;
    double fraction = 0;
    if (budget && mg_budget_parse(budget, &budget_bytes, &fraction) != MG_OK) {
        fprintf(stderr, "memgrad-plan: --budget: %s\n", mg_last_error());
        return usage();
    }
    if (svg) {
        if (budget) {
            fprintf(stderr, "memgrad-plan: --timeline draws policies none, "
                            "memory and speed, not budget\n");
            return usage();
        }
        return timeline(model, depth, width, batch, policy, svg, csv);
    }
    if (csv) return usage();
    if (fraction > 0) {
        int rc = budget_of_fraction(model, depth, width, batch, fraction,
                                    &budget_bytes);
        if (rc) return rc;
    }
    ck.budget_bytes = budget_bytes;

    mg_model *m = build(model, depth, width, batch);
    if (!m) return mg_last_error()[0] ? fail("building the model") : usage();
    /* Every failure below frees the model and the plan: LeakSanitizer
     * reported the model of a budget that does not fit (issue 49). */
    step_plan sp = {0};
    int rc = 0;
    if (mg_model_gradients(m, &ck) != MG_OK) rc = fail("mg_gradients");
    else if (step_plan_compile(m, budget_bytes, &ck, &sp)) rc = 1;
    if (rc) goto done;
    printf("%s depth %d, width %d, batch %d, f32, policy %s\n", model, depth,
           width, batch, policy);
    if (mg_plan_report(sp.plan, sp.binds, sp.n_binds, stdout) != MG_OK) {
        rc = fail("mg_plan_report");
        goto done;
    }
    if (dump) mg_plan_dump(sp.plan, stdout);
    if (dot) {
        FILE *f = fopen(dot, "w");
        if (!f || mg_graph_write_dot(m->g, f) != MG_OK) {
            fprintf(stderr, "memgrad-plan: cannot write %s\n", dot);
            rc = 1;
        }
        if (f && fclose(f) != 0 && !rc) {
            fprintf(stderr, "memgrad-plan: cannot write %s\n", dot);
            rc = 1;
        }
    }
done:
    step_plan_free(&sp);
    mg_model_free(m);
    return rc;
}
