/*
 * cpu_random.c - dropout. The mask comes from the counter-based RNG in
 * ir.h, evaluated per element exactly as docs/ops.md specifies, so the CPU
 * agrees bit for bit with other backends and with recomputed copies.
 */
#include "cpu_kernels.h"

#include <string.h>

/* Each element's decision is docs/ops.md's, mg_rng_uniform(h) >= p, taken
 * as the equivalent integer compare (rng.h); elements are independent, so
 * threads split them (MG_CPU_PAR_LOOP) with the same results. */
#define DROPOUT_DEF(T, SUF)                                                    \
    static mg_status dropout_##SUF(const T *x, T *restrict y, int64_t n,       \
                                   uint64_t key, uint64_t offset, double p) {  \
        const T keep_scale = (T)(1.0 / (1.0 - p));                             \
        const uint64_t thr = mg_rng_keep_threshold(p);                         \
        /* a hash costs about ten cheap ops: threads pay off sooner */         \
        MG_CPU_PAR_LOOP(8 * n, for (int64_t i = 0; i < n; i++), {              \
            const uint64_t h = mg_rng_hash(key, offset + (uint64_t)i);         \
            y[i] = mg_rng_keep(h, thr) ? x[i] * keep_scale : (T)0;             \
        });                                                                    \
        return MG_OK;                                                          \
    }
MG_CPU_FLOAT_TYPES(DROPOUT_DEF)

mg_status mgi_cpu_dropout(const mg_kargs *ka) {
    const mg_attrs *at = ka->attrs;
    if (!(at->p >= 0.0 && at->p < 1.0))
        return mg_kernel_fail(ka, MG_ERR_INVALID_ARG,
                              "dropout p = %g is outside [0, 1)", at->p);
    if (at->p == 0.0) {
        memcpy(ka->out.data, ka->in[0].data, mgi_tdesc_nbytes(&ka->out.d));
        return MG_OK;
    }
    return MG_CPU_BY_DTYPE(ka, ka->out.d.dtype, dropout, ka->in[0].data,
                           ka->out.data, mgi_tdesc_numel(&ka->out.d),
                           mg_rng_key(ka->run_seed, at->seed), at->offset,
                           at->p);
}
