/*
 * allocs.c - system allocations and step time of the pool, run by run, on
 * the bench's ResNet (depth 8, width 16, batch 64, 32x32 images): the
 * figures behind issue 11 item 8. bench/pool_steady/run.sh builds it
 * against libmemgrad.a of the commits it compares.
 *
 *   usage: allocs [none|memory|speed] [runs]
 */
#include "memgrad.h"
#include "memgrad_models.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static int fail(const char *what) {
    fprintf(stderr, "allocs: %s: %s\n", what, mg_last_error());
    return 1;
}

int main(int argc, char **argv) {
    const char *pol_name = argc > 1 ? argv[1] : "none";
    const int runs = argc > 2 ? atoi(argv[2]) : 6;
    mg_ckpt_policy pol = MG_CKPT_NONE; /* for an unknown name too */
    if (mg_ckpt_policy_parse(pol_name, &pol) != MG_OK ||
        (pol != MG_CKPT_MEMORY && pol != MG_CKPT_SPEED))
        pol = MG_CKPT_NONE;
    mg_model *m = mg_model_resnet(8, 16, 64, 32, 10, MG_F32, 1);
    if (!m) return fail("model");
    mg_checkpoints c = {.policy = pol};
    if (mg_model_gradients(m, &c) != MG_OK) return fail("gradients");
    const int n = m->n_params;
    mg_binding *b = calloc((size_t)(2 * n + 2), sizeof *b);
    void **bufs = calloc((size_t)(2 * n + 2), sizeof *bufs);
    mg_tensor *outs = calloc((size_t)(n + 1), sizeof *outs);
    if (!b || !bufs || !outs) return 1;
    int k = 0;
    for (int i = 0; i < n; i++, k++) {
        bufs[k] = calloc(1, mg_tensor_nbytes(m->g, m->params[i]));
        b[k] = (mg_binding){m->params[i], bufs[k]};
    }
    if (mg_model_init_params(m, 1, bufs) != MG_OK) return fail("params");
    bufs[k] = calloc(1, mg_tensor_nbytes(m->g, m->input));
    bufs[k + 1] = calloc(1, mg_tensor_nbytes(m->g, m->target));
    b[k] = (mg_binding){m->input, bufs[k]};
    b[k + 1] = (mg_binding){m->target, bufs[k + 1]};
    if (mg_model_init_data(m, 1, bufs[k], bufs[k + 1]) != MG_OK)
        return fail("data");
    k += 2;
    outs[0] = m->loss;
    for (int i = 0; i < n; i++, k++) {
        outs[1 + i] = m->grads[i];
        bufs[k] = calloc(1, mg_tensor_nbytes(m->g, m->grads[i]));
        b[k] = (mg_binding){m->grads[i], bufs[k]};
    }
    mg_plan *p = NULL;
    mg_exec *ex = NULL;
    if (mg_plan_compile(m->g, outs, n + 1, NULL, &p) != MG_OK)
        return fail("compile");
    if (mg_exec_new(NULL, &ex) != MG_OK) return fail("exec");
    printf("resnet depth 8 width 16 batch 64, policy %s, %d steps in the "
           "plan\n",
           pol_name, mg_plan_num_steps(p));
    printf("run  ms      system_allocs  pool_requests  reserved_bytes  "
           "peak_bytes\n");
    mg_pool_stats prev = {0}, s;
    for (int r = 1; r <= runs; r++) {
        const double t0 = now_ms();
        if (mg_exec_run(ex, p, b, k, 1) != MG_OK) return fail("run");
        const double dt = now_ms() - t0;
        mg_exec_pool_stats(ex, &s);
        printf("%-4d %-7.1f %-14llu %-14llu %-15zu %zu\n", r, dt,
               (unsigned long long)(s.system_allocs - prev.system_allocs),
               (unsigned long long)(s.alloc_calls - prev.alloc_calls),
               s.bytes_reserved, s.peak_bytes_in_use);
        prev = s;
    }
    mg_exec_free(ex);
    mg_plan_free(p);
    for (int i = 0; i < k; i++) free(bufs[i]);
    free(bufs);
    free(b);
    free(outs);
    mg_model_free(m);
    return 0;
}
