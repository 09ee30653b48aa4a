/*
 * offload_price.c - the budget policy's offload stage (issue 51): what
 * offloading saved tensors costs and saves, so that MG_CKPT_BUDGET with
 * mg_checkpoints.offload can choose it instead of recomputation where it
 * makes the step faster.
 *
 * On the graph that keeps every forward tensor (policy none's), each
 * saved tensor's copies are placed as mg_plan_compile places them
 * (offload.c, with the policy's host bandwidth and compute rate), and
 * priced: a copy costs nothing while the steps beside it hide it, and
 * past that its seconds count. The tensors are taken in one order fixed
 * before the budget is looked at (least exposed time first, then largest
 * first), and the shortest prefix whose exact predicted peak fits the
 * budget is the choice. Offloading one more tensor only takes its bytes
 * away from the steps between its two copies, so the peak falls with
 * every tensor added: a larger budget needs a prefix no longer, whose
 * exposed time is no larger. So the stage's time is monotone in the
 * budget, and its peak is the compiled plan's, never above the budget.
 */
#include "offload.h"

#include <stdlib.h>
#include <string.h>

typedef struct priced {
    mg_offload_copy c;
    double exposed;
} priced;

static int by_price(const void *x, const void *y) {
    const priced *a = x, *b = y;
    if (a->exposed != b->exposed) return a->exposed < b->exposed ? -1 : 1;
    if (a->c.bytes != b->c.bytes) return a->c.bytes > b->c.bytes ? -1 : 1;
    return (a->c.t > b->c.t) - (a->c.t < b->c.t);
}

static mg_status oom(void) {
    return mg_set_error(MG_ERR_NOMEM, "mg_gradients: out of memory");
}

/* Per step, what the pool holds while the step's output and workspace
 * are taken, with every output bound (mgi_plan_peak's count). */
static void step_levels(const mg_plan *p, double *level) {
    size_t in_use = 0;
    for (int32_t s = 0; s < p->n_steps; s++) {
        const mg_tensor t = p->steps[s];
        if (!(p->role[t] & MG_ROLE_KEPT))
            in_use += mg_pool_size_class(mg_plan_nbytes(p, t));
        const size_t w = mg_plan_step_work(&p->step[s]);
        level[s] = (double)(in_use + (w ? mg_pool_size_class(w) : 0));
        for (int32_t r = p->release_start[s]; r < p->release_start[s + 1]; r++)
            in_use -= mg_pool_size_class(mg_plan_nbytes(p, p->release[r]));
    }
}

static size_t max_level(const double *level, int32_t n) {
    double m = 0;
    for (int32_t s = 0; s < n; s++)
        if (level[s] > m) m = level[s];
    return (size_t)m;
}

mg_status mgi_offload_price(const mg_graph *g, const mg_tensor *outs,
                            int n_outs, int32_t n_before, size_t budget,
                            double bw, double rate, mg_offload_price *out) {
    memset(out, 0, sizeof *out);
    mg_plan *p = NULL;
    /* without views, as a plan that offloads is compiled (schedule.c) */
    mg_status s = mgi_plan_compile_copies(g, outs, n_outs, &p);
    if (s != MG_OK) return s;
    const int32_t nt = p->n_tensors ? p->n_tensors : 1;
    int32_t *idx = malloc((size_t)nt * sizeof *idx);
    int32_t *rd = malloc(4 * (size_t)nt * sizeof *rd);
    priced *pr = malloc((size_t)nt * sizeof *pr);
    double *level = malloc(((size_t)p->n_steps + 1) * sizeof *level);
    out->chosen = calloc((size_t)(n_before ? n_before : 1), 1);
    if (!idx || !rd || !pr || !level || !out->chosen) s = oom();
    int32_t n = 0;
    if (s == MG_OK) {
        /* the candidates: forward tensors the plan computes and releases */
        for (int32_t t = 0; t < p->n_tensors; t++) {
            idx[t] = -1;
            if (t < n_before && (p->role[t] & MG_ROLE_COMPUTED) &&
                !(p->role[t] & MG_ROLE_KEPT) &&
                !(g->nodes[t].flags & (MG_NODE_BACKWARD | MG_NODE_RECOMPUTE)))
                idx[t] = n++;
        }
        int32_t *prod = rd, *f_last = rd + n, *b_first = f_last + n,
                *rel = b_first + n;
        mgi_offload_readers(p, idx, n, prod, f_last, b_first, rel);
        const int32_t bnd = mgi_offload_boundary(p);
        int32_t m = 0;
        for (int32_t t = 0; t < p->n_tensors; t++) {
            const int32_t k = idx[t];
            if (k < 0 || b_first[k] < 0 || f_last[k] > b_first[k]) continue;
            mgi_offload_place(p, t, prod[k], f_last[k], b_first[k], rel[k], bw,
                              rate, bnd, &pr[m].c);
            pr[m].exposed = mgi_offload_exposed(p, &pr[m].c, bw, rate);
            m++;
        }
        n = m;
        qsort(pr, (size_t)n, sizeof *pr, by_price);
        step_levels(p, level);
        size_t peak = max_level(level, p->n_steps);
        double exposed = 0;
        int32_t j = 0;
        if (peak <= budget) out->fits = true, out->peak = peak;
        for (; j < n; j++) {
            const mg_offload_copy *c = &pr[j].c;
            for (int32_t st = c->out_free + 1; st < c->in_issue; st++)
                level[st] -= (double)c->bytes;
            peak = max_level(level, p->n_steps);
            if (!out->fits) {
                out->chosen[c->t] = true;
                exposed += pr[j].exposed;
                if (peak <= budget) {
                    out->fits = true;
                    out->peak = peak;
                    out->exposed = exposed;
                }
            }
        }
        out->min_peak = peak;
        if (!out->fits) memset(out->chosen, 0, (size_t)n_before);
    }
    free(idx);
    free(rd);
    free(pr);
    free(level);
    mg_plan_free(p);
    if (s != MG_OK) {
        free(out->chosen);
        out->chosen = NULL;
    }
    return s;
}
