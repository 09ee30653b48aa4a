/*
 * schedule.h - the compiled plan: one linear order of ops, the last reader
 * of every buffer, and what the caller must bind. The executor only walks
 * it; every decision about order and lifetime is made here.
 */
#ifndef MG_SCHEDULE_H
#define MG_SCHEDULE_H

#include "../graph/graph.h"

enum {
    MG_ROLE_NONE = 0,     /* not read or computed by the plan */
    MG_ROLE_LEAF = 1,     /* caller memory, read by some step */
    MG_ROLE_COMPUTED = 2, /* written by a step */
    MG_ROLE_KEPT = 4      /* output or retained: not released by the run */
};

struct mg_plan {
    const mg_graph *g;
    int32_t n_tensors; /* graph size when compiled; ids below it are valid */
    uint8_t *role;     /* per tensor id, MG_ROLE_* bits */
    int32_t n_steps;
    mg_tensor *steps;  /* computed tensors in execution order */
    size_t *work;      /* per step: workspace bytes its kernel borrows */
    /* After step s, release release[release_start[s] .. release_start[s+1]) */
    int32_t *release_start;
    mg_tensor *release;
    int32_t n_leaves;
    mg_tensor *leaves; /* leaves some step reads, or that are outputs */
    int32_t n_kept;
    mg_tensor *kept;   /* outputs then retained, without repeats */
    /* Inputs are read through this map: identity, or with
     * without_recompute, each recomputed copy -> its forward tensor. */
    mg_tensor *remap;
};

/* Input k of the node of tensor t, as this plan reads it. */
static inline mg_tensor mg_plan_input(const mg_plan *p, mg_tensor t, int k) {
    return p->remap[p->g->nodes[t].in[k]];
}

/* mg_plan_predicted_peak with a status: MG_ERR_INVALID_ARG for a negative
 * n_binds or a NULL list of n_binds > 0 (as mg_exec_run), MG_ERR_NOMEM if
 * its scratch memory cannot be had; errors are prefixed by what. */
mg_status mg_plan_peak(const mg_plan *p, const mg_binding *binds, int n_binds,
                       const char *what, size_t *peak);


#endif
