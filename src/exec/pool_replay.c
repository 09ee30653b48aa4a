/*
 * pool_replay.c - the list of pool requests a run of a plan will make, in
 * the order run_plan in exec.c makes them, so that the pool can lay them
 * out in one arena before the run (buffer_pool.c says why). It follows
 * run_step: a step's output when it is not caller memory, then its
 * workspace, handed back after the kernel, then the step's releases.
 * Outputs and retained tensors live on past the run.
 */
#include "../rewrite/schedule.h"
#include "buffer_pool.h"

#include <stdlib.h>

void mgi_pool_replay_begin(mg_pool *pool, const mg_plan *p, void *const *buf) {
    const size_t cap = 2 * (size_t)p->n_steps;
    mg_pool_rec *rec = malloc((cap ? cap : 1) * sizeof *rec);
    int64_t *of =
        malloc((size_t)(p->n_tensors ? p->n_tensors : 1) * sizeof *of);
    size_t n = 0;
    int64_t clock = 0;
    bool ok = rec && of;
    for (int32_t t = 0; ok && t < p->n_tensors; t++) of[t] = -1;
    for (int32_t st = 0; ok && st < p->n_steps; st++) {
        const mg_plan_step *s = &p->step[st];
        if (!buf[s->t]) {
            of[s->t] = (int64_t)n;
            rec[n++] = (mg_pool_rec){
                mg_pool_size_class(mgi_tdesc_nbytes(&p->tensor[s->t].d)),
                clock++, -1};
        }
        if (s->work) {
            rec[n++] =
                (mg_pool_rec){mg_pool_size_class(s->work), clock, clock + 1};
            clock += 2;
        }
        for (int32_t r = p->release_start[st]; r < p->release_start[st + 1];
             r++) {
            const int64_t k = of[p->release[r]];
            /* run_plan only releases blocks the run took from the pool */
            if (k < 0) {
                ok = false;
                break;
            }
            rec[k].died = clock++;
        }
    }
    /* Without a list the run is served by the cache alone. */
    mgi_pool_run_begin(pool, ok ? rec : NULL, ok ? n : 0);
    free(rec);
    free(of);
}
