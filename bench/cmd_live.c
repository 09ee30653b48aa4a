/*
 * cmd_live.c - mg-bench live: what is live at a plan's predicted peak, and
 * why (issue 29 item 2: why compaction alone does not lower the ResNet's
 * peak). The plan is mg-bench step's (same model, policy and --compact),
 * compiled, never run. Its steps are replayed in the pool's memory model
 * (each output allocated at its step in mg_pool_size_class bytes, freed
 * after its last reader; bound outputs take nothing; the op's workspace on
 * top), the peak step found, and every tensor live there listed: the step
 * that made it, its bytes, whether it is forward or backward, a pack, and
 * the first step and op still to read it (the reason it is live). Then the
 * live bytes by kind: forward tensors held for the backward pass, packs,
 * gradients and other backward temporaries, and the workspace.
 */
#include "bench.h"
#include "memgrad_observe.h"

#include <stdbool.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct live_sim {
    int ns;
    mg_step_info *st;
    int *stepof; /* tensor -> step computing it, -1 */
    int *last;   /* tensor -> last step reading it, -1 */
    size_t *bytes;
} live_sim;

static void live_free(live_sim *s) {
    free(s->st);
    free(s->stepof);
    free(s->last);
    free(s->bytes);
    memset(s, 0, sizeof *s);
}

/* The first step after `after` that reads t, or -1. */
static int next_reader(const mg_graph *g, const live_sim *s, mg_tensor t,
                       int after) {
    for (int k = after + 1; k < s->ns; k++) {
        const mg_tensor u = s->st[k].tensor;
        for (int q = 0; q < mg_tensor_num_inputs(g, u); q++)
            if (mg_tensor_input(g, u, q) == t) return k;
    }
    return -1;
}

static int live_report(const bench_case *c, const char *label) {
    const mg_graph *g = c->mm->g;
    const mg_plan *p = c->plan;
    live_sim s = {0};
    s.ns = mg_plan_num_steps(p);
    const int32_t nt = mg_graph_num_tensors(g);
    s.st = malloc((size_t)(s.ns ? s.ns : 1) * sizeof *s.st);
    s.stepof = malloc((size_t)nt * sizeof *s.stepof);
    s.last = malloc((size_t)nt * sizeof *s.last);
    s.bytes = calloc((size_t)nt, sizeof *s.bytes);
    if (!s.st || !s.stepof || !s.last || !s.bytes ||
        mg_plan_timeline(p, c->binds, c->n_binds, s.st, s.ns) != s.ns) {
        fprintf(stderr, "mg-bench: live: %s\n",
                s.st ? mg_last_error() : "out of memory");
        live_free(&s);
        return 1;
    }
    for (int32_t t = 0; t < nt; t++) s.stepof[t] = s.last[t] = -1;
    for (int k = 0; k < s.ns; k++) s.stepof[s.st[k].tensor] = k;
    for (int k = 0; k < s.ns; k++) {
        const mg_tensor u = s.st[k].tensor;
        for (int q = 0; q < mg_tensor_num_inputs(g, u); q++) {
            const mg_tensor in = mg_tensor_input(g, u, q);
            if (in >= 0 && in < nt && s.stepof[in] >= 0) s.last[in] = k;
        }
    }
    for (int i = 0; i < c->n_binds; i++)
        if (c->binds[i].tensor >= 0 && c->binds[i].tensor < nt)
            s.stepof[c->binds[i].tensor] = -2; /* bound: no pool bytes */
    for (int k = 0; k < s.ns; k++) {
        const mg_tensor t = s.st[k].tensor;
        s.bytes[t] =
            s.stepof[t] == -2 ? 0 : mg_pool_size_class(mg_tensor_nbytes(g, t));
        s.stepof[t] = k;
    }
    /* replay: live after step k's allocation, plus its workspace */
    size_t in_use = 0, peak = 0;
    int peak_k = 0;
    size_t *freed = calloc((size_t)s.ns + 1, sizeof *freed);
    if (!freed) {
        live_free(&s);
        return 1;
    }
    for (int k = 0; k < s.ns; k++) {
        const mg_tensor t = s.st[k].tensor;
        in_use += s.bytes[t];
        if (in_use + s.st[k].workspace_bytes > peak) {
            peak = in_use + s.st[k].workspace_bytes;
            peak_k = k;
        }
        freed[s.last[t] < 0 ? k : s.last[t]] += s.bytes[t];
        in_use -= freed[k];
    }
    free(freed);
    const mg_step_info *pk = &s.st[peak_k];
    printf("# %s: %d steps, predicted peak %zu, replayed peak %zu at step "
           "%d (%s %%%d, %s), workspace %zu\n",
           label, s.ns, c->sum.predicted_peak, peak, peak_k, pk->op,
           (int)pk->tensor,
           mg_tensor_is_backward(g, pk->tensor) ? "backward" : "forward",
           pk->workspace_bytes);
    printf("# live at the peak (made at or before step %d, read at or "
           "after it):\n",
           peak_k);
    printf("%-8s %6s %-24s %-9s %12s %6s %s\n", "tensor", "made", "op", "kind",
           "bytes", "next", "next reader (why live)");
    size_t fwd = 0, packs = 0, bwd = 0;
    int n_fwd = 0, n_packs = 0, n_bwd = 0;
    for (int k = 0; k <= peak_k; k++) {
        const mg_tensor t = s.st[k].tensor;
        if (!s.bytes[t]) continue;
        if (k != peak_k && (s.last[t] < peak_k)) continue;
        const bool pack = mg_tensor_is_pack(g, t);
        const bool bw = mg_tensor_is_backward(g, t);
        const int nr = k == peak_k ? -1 : next_reader(g, &s, t, peak_k - 1);
        char why[160] = "(the peak step's output)";
        if (nr >= 0) {
            const mg_tensor u = s.st[nr].tensor;
            int slot = 0;
            for (int q = 0; q < mg_tensor_num_inputs(g, u); q++)
                if (mg_tensor_input(g, u, q) == t) slot = q;
            snprintf(why, sizeof why, "%s %%%d input %d%s", s.st[nr].op, (int)u,
                     slot, mg_tensor_is_backward(g, u) ? "" : " (forward)");
        }
        printf("%%%-7d %6d %-24s %-9s %12zu %6d %s\n", (int)t, k, s.st[k].op,
               pack ? "pack"
               : bw ? "backward"
                    : "forward",
               s.bytes[t], nr, why);
        if (pack) {
            packs += s.bytes[t];
            n_packs++;
        } else if (bw) {
            bwd += s.bytes[t];
            n_bwd++;
        } else {
            fwd += s.bytes[t];
            n_fwd++;
        }
    }
    printf("# live bytes at the peak: forward %zu (%d tensors), packs %zu "
           "(%d), backward %zu (%d), workspace %zu; total %zu\n",
           fwd, n_fwd, packs, n_packs, bwd, n_bwd, pk->workspace_bytes,
           fwd + packs + bwd + pk->workspace_bytes);
    live_free(&s);
    return 0;
}

int bench_cmd_live(int argc, char **argv) {
    const char *policy_s = "none";
    common_opts o = {.repeat = 1, .model = "resnet", .depth = 32};
    for (int i = 0; i < argc; i += 2) { /* --option value pairs */
        const char *a, *v;
        int r = bench_opt_next(argc, argv, i, &o, &a, &v);
        if (r == BENCH_OPT_DONE) continue;
        if (r != BENCH_OPT_OWN) return r;
        if (!strcmp(a, "--policy")) policy_s = v;
        else return bench_usage_error("unknown option '%s' for live", a);
    }
    int rc = bench_case_setup(o.model, &o);
    if (rc) return rc;
    mg_ckpt_policy pol;
    if (bench_policy_list_parse(policy_s, &pol, 1) != 1)
        return bench_usage_error("bad --policy '%s'", policy_s);
    bench_model_cfg cfg = bench_case_cfg(&o, o.depth);
    bench_case c;
    bench_memory mem;
    if ((rc = bench_case_open(&o, &cfg, pol, NULL, 0, &c, &mem))) return rc;
    char label[160];
    snprintf(label, sizeof label,
             "%s depth %ld batch %ld width %ld, policy %s, compact %s",
             o.spec->name, o.depth, o.batch, o.width, mg_ckpt_policy_name(pol),
             o.compact ? "yes" : "no");
    /* the caller memory of mg-bench step: inputs, parameters, gradients
     * and the loss bound (bench_case_warm_up's binding, without a run) */
    mg_status s = bench_case_bind(&c, &mem, &c.binds, &c.n_binds);
    rc = s == MG_OK ? live_report(&c, label) : bench_fail("binding", s);
    bench_case_free(&c);
    bench_memory_free(&mem);
    return rc;
}
