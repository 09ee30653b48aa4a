/*
 * cuda_random.cu - dropout, with the CPU's counter-based RNG (rng.h)
 * evaluated element for element, so masks agree across devices and
 * recomputation.
 */
#include "cuda_internal.h"

template <typename T>
__global__ void k_dropout(const T *x, T *y, int64_t n, uint64_t key,
                          uint64_t offset, double p, T keep_scale) {
    CU_FOR(i, n) {
        const uint64_t h = mg_rng_hash(key, offset + (uint64_t)i);
        y[i] = mg_rng_uniform(h) >= p ? x[i] * keep_scale : (T)0;
    }
}

mg_status cu_dropout(cu_ctx *c, const mg_kargs *a) {
    const mg_attrs *at = a->attrs;
    if (!(at->p >= 0.0 && at->p < 1.0))
        return mg_kernel_fail(a, MG_ERR_INVALID_ARG,
                              "dropout p = %g is outside [0, 1)", at->p);
    if (at->p == 0.0) return cu_reshape(c, a);
    const int64_t n = mgi_tdesc_numel(&a->out.d);
    const uint64_t key = mg_rng_key(a->run_seed, at->seed);
    CU_BY_FLOAT(a, a->out.d.dtype,
                (k_dropout<T><<<cu_blocks(n), CU_THREADS, 0, c->stream>>>(
                    (const T *)a->in[0].data, (T *)a->out.data, n, key,
                    at->offset, at->p, (T)(1.0 / (1.0 - at->p)))));
    return MG_OK;
}
