/*
 * cpu_attention.c - causal_mask, the op attention needs: over the last two
 * axes [L1, L2] of x, entries above the diagonal (column j > row i) take the
 * fill value; the rest are copied.
 */
#include "cpu_kernels.h"

#define MASK_DEF(T, SUF)                                                       \
    static mg_status causal_mask_##SUF(const T *x, T *y, int64_t batch,        \
                                       int64_t rows, int64_t cols,             \
                                       double value) {                         \
        const T v = (T)value;                                                  \
        for (int64_t b = 0; b < batch; b++)                                    \
            for (int64_t i = 0; i < rows; i++, x += cols, y += cols)           \
                for (int64_t j = 0; j < cols; j++) y[j] = j > i ? v : x[j];    \
        return MG_OK;                                                          \
    }
MG_CPU_FLOAT_TYPES(MASK_DEF)

mg_status mgi_cpu_causal_mask(const mg_kargs *ka) {
    const mg_tdesc *d = &ka->out.d;
    if (d->ndim < 2)
        return mg_kernel_fail(ka, MG_ERR_SHAPE,
                              "causal_mask needs 2 or more dims");
    const int64_t rows = d->shape[d->ndim - 2], cols = d->shape[d->ndim - 1];
    return MG_CPU_BY_DTYPE(ka, d->dtype, causal_mask, ka->in[0].data,
                           ka->out.data, mgi_tdesc_numel(d) / (rows * cols),
                           rows, cols, ka->attrs->alpha);
}
