/*
 * cuda_attention.cu - causal_mask, the op attention needs: over the last
 * two axes [L1, L2] of x, entries above the diagonal (column j > row i)
 * take the fill value; the rest are copied.
 */
#include "cuda_internal.h"

/* Over the last two axes [rows, cols]: j > i takes value, the rest x. */
template <typename T>
__global__ void k_causal_mask(const T *x, T *y, int64_t n, int64_t rows,
                              int64_t cols, T v) {
    CU_FOR(e, n) {
        const int64_t j = e % cols, i = (e / cols) % rows;
        y[e] = j > i ? v : x[e];
    }
}

mg_status cu_causal_mask(cu_ctx *c, const mg_kargs *a) {
    const mg_tdesc *d = &a->out.d;
    if (d->ndim < 2)
        return mg_kernel_fail(a, MG_ERR_SHAPE,
                              "causal_mask needs 2 or more dims");
    const int64_t rows = d->shape[d->ndim - 2], cols = d->shape[d->ndim - 1];
    const int64_t n = mgi_tdesc_numel(d);
    CU_BY_FLOAT(a, d->dtype,
                k_causal_mask<T><<<cu_blocks(n), CU_THREADS, 0, c->stream>>>(
                    (const T *)a->in[0].data, (T *)a->out.data, n, rows, cols,
                    (T)a->attrs->alpha));
    return MG_OK;
}
