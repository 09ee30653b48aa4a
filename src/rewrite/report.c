/*
 * report.c - what a plan does, for people and for the bench tools: forward,
 * recompute and backward steps with their flops, the checkpoints and the
 * recompute segments, and the predicted peak beside plain backprop's.
 */
#include "offload.h"

#include <stdlib.h>

typedef enum step_kind {
    STEP_FORWARD,
    STEP_RECOMPUTE,
    STEP_BACKWARD
} step_kind;

static step_kind kind_of(const mg_node *n) {
    if (n->flags & MG_NODE_RECOMPUTE) return STEP_RECOMPUTE;
    if (n->flags & MG_NODE_BACKWARD) return STEP_BACKWARD;
    return STEP_FORWARD;
}

mg_status mg_plan_summarize(const mg_plan *p, const mg_binding *binds,
                            int n_binds, mg_plan_summary *out) {
    if (!p || !out)
        return mg_set_error(MG_ERR_INVALID_ARG, "mg_plan_summarize: %s is NULL",
                            p ? "out" : "plan");
    mg_plan_summary s = {.n_steps = p->n_steps,
                         .budget_bytes = p->budget_bytes};
    step_kind prev = STEP_FORWARD;
    for (int32_t i = 0; i < p->n_steps; i++) {
        const mg_node *n = &p->g->nodes[p->steps[i]];
        double flops = 0;
        mgi_plan_step_cost(p, i, &flops, NULL);
        step_kind k = kind_of(n);
        if (k == STEP_RECOMPUTE) {
            s.n_recompute++;
            s.recompute_flops += flops;
            if (prev != STEP_RECOMPUTE) s.n_segments++;
        } else if (k == STEP_BACKWARD) {
            s.n_backward++;
            s.backward_flops += flops;
        } else {
            s.n_forward++;
            s.forward_flops += flops;
        }
        if (n->flags & MG_NODE_CHOSEN) s.n_checkpoints++;
        prev = k;
    }
    mg_status st = mgi_plan_peak(p, binds, n_binds, "mg_plan_summarize",
                                 &s.predicted_peak);
    if (st != MG_OK) return st;
    /* Plain backprop's figure: the same outputs, read without copies.
     * Predicted without compiling that plan, which took as long as
     * compiling p. */
    mg_peak_scratch sc = {0};
    const mg_peak_query q = {.outputs = p->kept,
                             .n_outputs = p->n_kept,
                             .without_recompute = true,
                             .binds = binds,
                             .n_binds = n_binds,
                             .fuse = p->fuses};
    st = mgi_graph_peak(p->g, &q, &sc, "mg_plan_summarize",
                        &s.predicted_peak_without_recompute);
    /* The budget's measure (mg_checkpoints.budget_bytes): every output
     * and retained tensor in caller memory, unfused, as the budget
     * policy's search measures its trials whatever device the plan is
     * for; fusion never raises a plan's peak above it (fuse.c). */
    const mg_peak_query qb = {
        .outputs = p->kept, .n_outputs = p->n_kept, .all_bound = true};
    if (st == MG_OK)
        st =
            mgi_graph_peak(p->g, &qb, &sc, "mg_plan_summarize", &s.budget_peak);
    mgi_peak_scratch_free(&sc);
    if (st != MG_OK) return st;
    if (p->offload) { /* its copies move the peak: the plan's own count */
        bool *all = calloc((size_t)(p->n_tensors ? p->n_tensors : 1), 1);
        if (!all)
            return mg_set_error(MG_ERR_NOMEM,
                                "mg_plan_summarize: out of memory");
        for (int32_t k = 0; k < p->n_kept; k++) all[p->kept[k]] = true;
        s.budget_peak = mgi_offload_peak(p, all);
        free(all);
    }
    *out = s;
    return MG_OK;
}

static double mib(size_t b) { return (double)b / (1024.0 * 1024.0); }

static void report_checkpoints(const mg_plan *p, FILE *out) {
    const int shown_max = 16;
    int shown = 0;
    char label[160], shape[128];
    for (int32_t i = 0; i < p->n_steps; i++) {
        const mg_node *n = &p->g->nodes[p->steps[i]];
        if (!(n->flags & MG_NODE_CHOSEN)) continue;
        if (shown++ < shown_max)
            fprintf(
                out, "  %s %s %zu bytes\n",
                mgi_graph_tensor_label(p->g, p->steps[i], label, sizeof label),
                mgi_shape_str(mgi_node_desc(p->g, n), shape, sizeof shape),
                p->g->descs.nbytes[n->desc]);
    }
    if (shown > shown_max)
        fprintf(out, "  ... and %d more\n", shown - shown_max);
}

static void report_segments(const mg_plan *p, FILE *out) {
    const int shown_max = 16;
    int seg = 0;
    for (int32_t i = 0; i < p->n_steps;) {
        if (kind_of(&p->g->nodes[p->steps[i]]) != STEP_RECOMPUTE) {
            i++;
            continue;
        }
        int32_t j = i;
        double flops = 0, f;
        for (; j < p->n_steps &&
               kind_of(&p->g->nodes[p->steps[j]]) == STEP_RECOMPUTE;
             j++) {
            mgi_plan_step_cost(p, j, &f, NULL);
            flops += f;
        }
        if (seg++ < shown_max)
            fprintf(out, "  segment %d: steps %d-%d, %d ops, %.3g flops\n", seg,
                    (int)i, (int)j - 1, (int)(j - i), flops);
        i = j;
    }
    if (seg > shown_max) fprintf(out, "  ... and %d more\n", seg - shown_max);
}

mg_status mg_plan_report(const mg_plan *p, const mg_binding *binds, int n_binds,
                         FILE *out) {
    if (!out)
        return mg_set_error(MG_ERR_INVALID_ARG, "mg_plan_report: out is NULL");
    mg_plan_summary s;
    mg_status st = mg_plan_summarize(p, binds, n_binds, &s);
    if (st != MG_OK) return st;
    fprintf(out, "plan: %d steps: %d forward, %d recompute, %d backward\n",
            s.n_steps, s.n_forward, s.n_recompute, s.n_backward);
    fprintf(out, "checkpoints: %d\n", s.n_checkpoints);
    report_checkpoints(p, out);
    fprintf(out, "recompute segments: %d\n", s.n_segments);
    report_segments(p, out);
    fprintf(out,
            "recomputed: %d ops, %.3g flops = %.3f of one forward pass "
            "(%.3g flops)\n",
            s.n_recompute, s.recompute_flops,
            s.forward_flops > 0 ? s.recompute_flops / s.forward_flops : 0.0,
            s.forward_flops);
    fprintf(out, "predicted peak: %.3f MiB; plain backprop: %.3f MiB (%.3fx)\n",
            mib(s.predicted_peak), mib(s.predicted_peak_without_recompute),
            s.predicted_peak_without_recompute
                ? (double)s.predicted_peak /
                      (double)s.predicted_peak_without_recompute
                : 1.0);
    mg_plan_arena a;
    if ((st = mg_plan_arena_info(p, binds, n_binds, &a)) != MG_OK) return st;
    fprintf(out,
            "arena: %.3f MiB, %.4fx the most of its bytes live at once; "
            "reserved by a new executor after one run: %.3f MiB\n",
            mib(a.bytes),
            a.live_peak ? (double)a.bytes / (double)a.live_peak : 1.0,
            mib(a.reserved));
    mgi_offload_report(p, out);
    if (s.budget_bytes)
        fprintf(out,
                "budget: %.3f MiB (%zu bytes); budget peak %.3f MiB (%zu "
                "bytes), %s it\n"
                "  (the budget covers memgrad's pool: activations, "
                "recomputed copies, intermediate gradients and kernel "
                "workspace; not the parameters, the inputs, or the "
                "outputs and gradients, counted as the caller's memory)\n",
                mib(s.budget_bytes), s.budget_bytes, mib(s.budget_peak),
                s.budget_peak,
                s.budget_peak <= s.budget_bytes ? "within" : "ABOVE");
    return MG_OK;
}
