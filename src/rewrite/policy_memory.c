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
    /* The peak of mg_plan_compile(g, grads)'s plan without building it:
     * its records, phases and arena would be thrown away. */
    mg_peak_scratch sc = {0};
    const mg_peak_query q = {
        .outputs = grads, .n_outputs = n, .all_bound = true};
    mg_status s = mgi_graph_peak(g, &q, &sc, "mg_gradients", peak);
    mgi_peak_scratch_free(&sc);
    return s;
}

/* Graphs up to this many tensors get the memory policy's search, and
 * every policy the comparison with policy none; larger ones take the
 * policy's default point, to keep rewriting linear in time. */
#define MG_SEARCH_MAX_TENSORS 50000

/* The most trailing segments the memory policy tries to keep: each is one
 * more trial of its search. */
#define MG_KEEP_TAIL_MAX 4

/* One trial: build the backward graph at point m, plan it, and take it out
 * again. With reads (room for the graph's tensors before the build), mark
 * the forward tensors its backward ops read. */
static mg_status trial(mg_graph *g, const void *ctx, mg_memory_build_fn build,
                       const mg_memory_search *m, int n_xs, mg_tensor *result,
                       size_t *peak, bool *reads) {
    const int32_t n_before = g->n;
    const uint64_t rng_before = g->rng_offset;
    *peak = SIZE_MAX;
    mg_status s = build(g, ctx, m, result);
    if (s == MG_OK) s = trial_peak(g, result, n_xs, peak);
    if (s == MG_OK && reads)
        for (int32_t t = n_before; t < g->n; t++)
            for (int k = 0; k < g->nodes[t].n_in; k++)
                if (g->nodes[t].in[k] < n_before)
                    reads[g->nodes[t].in[k]] = true;
    mgi_graph_truncate(g, n_before);
    g->rng_offset = rng_before;
    return s;
}

/* The memory policy's segment length is a trade-off that depends on which
 * tensors gradient rules read, so rather than guess, build the rewrite for
 * a few lengths (and with cuts forced), plan each, and keep the lowest
 * exact predicted peak. Ties go to the earlier, longer-segment point. */
static mg_status search_memory(mg_graph *g, const void *ctx,
                               mg_memory_build_fn build, int n_xs,
                               mg_tensor *result, mg_memory_search *best,
                               size_t *best_peak) {
    static const mg_memory_search points[] = {
        {2.0, false, false, NULL, 0}, {3.0, false, false, NULL, 0},
        {4.0, false, false, NULL, 0}, {1.5, false, false, NULL, 0},
        {1.0, false, false, NULL, 0}, {2.0, true, false, NULL, 0},
        {3.0, true, false, NULL, 0},  {1.0, true, false, NULL, 0}};
    *best = points[0];
    *best_peak = SIZE_MAX;
    for (size_t i = 0; i < sizeof points / sizeof *points; i++) {
        size_t peak;
        mg_status s =
            trial(g, ctx, build, &points[i], n_xs, result, &peak, NULL);
        if (s == MG_ERR_NOMEM) return s;
        if (s == MG_OK && peak < *best_peak) {
            *best_peak = peak;
            *best = points[i];
        }
    }
    /* Then the best point's last segments kept rather than recomputed,
     * one more at a time while the peak does not rise: the last segment's
     * activations are what the backward pass needs first, so recomputing
     * them straight after the forward pass made them often saves nothing
     * (on torchvision's resnet50 it was a quarter of the recomputed
     * flops). */
    if (*best_peak == SIZE_MAX) return MG_OK;
    for (int k = 1; k <= MG_KEEP_TAIL_MAX; k++) {
        mg_memory_search m = *best;
        m.keep_tail = k;
        size_t peak;
        mg_status s = trial(g, ctx, build, &m, n_xs, result, &peak, NULL);
        if (s == MG_ERR_NOMEM) return s;
        if (s != MG_OK || peak > *best_peak) break;
        *best_peak = peak;
        *best = m;
    }
    return MG_OK;
}

/*
 * No automatic policy may need more memory than plain backprop (issue 11:
 * the speed policy predicted 1.9x policy none's peak on two mixing streams
 * of matmuls). So each policy's choice is planned beside none's, and
 * none's is taken where the policy's predicts a higher peak. The speed
 * policy, which recomputes only to save memory, tries one step between
 * where its choice saves nothing: keeping only the expensive outputs that
 * plain backprop's backward pass reads anyway (checkpoint.c), taken where
 * that saves memory over none, and none's choice otherwise.
 *
 * Running out of memory in a trial fails the search with MG_ERR_NOMEM
 * rather than quietly choosing among the trials that happened to fit: the
 * choice must not depend on how much memory was free. Any other failure
 * leaves the policy's own point, whose build then reports it.
 */
mg_status mgi_memory_search_best(mg_graph *g, const mg_checkpoints *c, int n_xs,
                                 mg_memory_build_fn build, const void *ctx,
                                 mg_memory_search *best) {
    static const mg_memory_search first = {2.0, false, false, NULL, 0};
    static const mg_memory_search plain = {2.0, false, true, NULL, 0};
    *best = first;
    if (!c || c->policy == MG_CKPT_NONE || g->n > MG_SEARCH_MAX_TENSORS)
        return MG_OK;
    const bool speed = c->policy == MG_CKPT_SPEED;
    mg_tensor *result = malloc((size_t)n_xs * sizeof *result);
    bool *reads =
        speed ? calloc((size_t)(g->n ? g->n : 1), sizeof *reads) : NULL;
    if (!result || (speed && !reads)) {
        free(result);
        free(reads);
        return mg_set_error(MG_ERR_NOMEM, "mg_gradients: out of memory");
    }
    size_t none_peak, peak;
    mg_memory_search choice = first;
    mg_status s = trial(g, ctx, build, &plain, n_xs, result, &none_peak, reads);
    if (s == MG_OK && c->policy == MG_CKPT_MEMORY)
        s = search_memory(g, ctx, build, n_xs, result, &choice, &peak);
    else if (s == MG_OK)
        s = trial(g, ctx, build, &first, n_xs, result, &peak, NULL);
    /* Speed recomputes to save memory: where it saves none, plain
     * backprop is as small and faster. */
    if (s == MG_OK && speed && peak >= none_peak) {
        const mg_memory_search fewer = {2.0, false, false, reads, 0};
        s = trial(g, ctx, build, &fewer, n_xs, result, &peak, NULL);
        if (s == MG_OK && peak < none_peak) {
            choice = fewer;
            reads = NULL; /* now the caller's */
        } else if (s == MG_OK) {
            choice = plain;
            peak = none_peak;
        }
    }
    if (s == MG_OK && peak > none_peak) choice = plain;
    free(result);
    free(reads);
    if (s == MG_ERR_NOMEM) return s; /* the message says where */
    if (s == MG_OK) *best = choice;
    mg_clear_error();
    return MG_OK;
}
