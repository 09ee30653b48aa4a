/*
 * policy_memory.c - the search behind MG_CKPT_MEMORY: which segment length
 * (and whether to force topological cuts) gives the lowest exact predicted
 * peak. checkpoint.c chooses the checkpoints for one point; this file tries
 * several, each built by autodiff and planned by the scheduler, and keeps
 * the best. autodiff.c hands in the builder, so it needs to know nothing of
 * the search, and the search nothing of autodiff's internals.
 */
#include "rewrite.h"
#include "schedule.h"

#include <stdint.h>
#include <stdlib.h>

/* The peak a training step of the built graph needs, its gradients being
 * caller memory as in training: the figure the memory policy minimises. */
static mg_status trial_peak(const mg_graph *g, const mg_tensor *grads, int n,
                            size_t *peak) {
    mg_plan *p = NULL;
    mg_binding *b = malloc((size_t)n * sizeof *b);
    static char any; /* the addresses are never used */
    if (!b) return mg_set_error(MG_ERR_NOMEM, "mg_gradients: out of memory");
    for (int i = 0; i < n; i++) b[i] = (mg_binding){grads[i], &any};
    mg_status s = mg_plan_compile(g, grads, n, NULL, &p);
    if (s == MG_OK) s = mgi_plan_peak(p, b, n, "mg_gradients", peak);
    mg_plan_free(p);
    free(b);
    return s;
}

/* Graphs up to this many tensors get the memory policy's search; larger
 * ones take the default point, to keep rewriting linear in time. */
#define MG_SEARCH_MAX_TENSORS 50000

/* The memory policy's segment length is a trade-off that depends on which
 * tensors gradient rules read, so rather than guess, build the rewrite for
 * a few lengths (and with cuts forced), plan each, and keep the lowest
 * exact predicted peak. Ties go to the earlier, longer-segment point.
 * Running out of memory in a trial fails the search with MG_ERR_NOMEM
 * rather than quietly choosing among the trials that happened to fit: the
 * choice must not depend on how much memory was free. */
mg_status mgi_memory_search_best(mg_graph *g, const mg_checkpoints *c,
                                int n_xs, mg_memory_build_fn build,
                                const void *ctx, mg_memory_search *best) {
    static const mg_memory_search points[] = {
        {2.0, false}, {3.0, false}, {4.0, false}, {1.5, false}, {1.0, false},
        {2.0, true},  {3.0, true},  {1.0, true}};
    *best = points[0];
    if (!c || c->policy != MG_CKPT_MEMORY || g->n > MG_SEARCH_MAX_TENSORS)
        return MG_OK;
    const int32_t n_before = g->n;
    const uint64_t rng_before = g->rng_offset;
    size_t best_peak = SIZE_MAX;
    mg_status nomem = MG_OK;
    mg_tensor *result = malloc((size_t)n_xs * sizeof *result);
    if (!result)
        return mg_set_error(MG_ERR_NOMEM, "mg_gradients: out of memory");
    for (size_t i = 0; nomem == MG_OK && i < sizeof points / sizeof *points;
         i++) {
        size_t peak = SIZE_MAX;
        mg_status s = build(g, ctx, &points[i], result);
        if (s == MG_OK) s = trial_peak(g, result, n_xs, &peak);
        if (s == MG_ERR_NOMEM) nomem = s;
        if (s == MG_OK && peak < best_peak) {
            best_peak = peak;
            *best = points[i];
        }
        mgi_graph_truncate(g, n_before);
        g->rng_offset = rng_before;
    }
    free(result);
    if (nomem != MG_OK) return nomem; /* the message says where */
    mg_clear_error();
    return MG_OK;
}
