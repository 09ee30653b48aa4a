/*
 * cpu_scan.c - cumsum: each line along the axis ([outer, n, inner] view)
 * is a running sum in T, from the start or, reversed, from the end. One
 * line is one sequence of adds, the CUDA kernel's own, so the two
 * backends give the same bits.
 */
#include "cpu_kernels.h"

#define CUMSUM_DEF(T, SUF)                                                     \
    static mg_status cumsum_##SUF(const T *x, T *y, const mg_softmax_dims *d,  \
                                  int reverse) {                               \
        const int64_t n = d->n, in = d->inner;                                 \
        MG_CPU_PAR_LOOP(                                                       \
            d->outer *n *in, for (int64_t l = 0; l < d->outer * in; l++), {    \
                const int64_t o = l / in, i = l % in;                          \
                const T *xl = x + o * n * in + i;                              \
                T *yl = y + o * n * in + i;                                    \
                T acc = 0;                                                     \
                for (int64_t k = 0; k < n; k++) {                              \
                    const int64_t at = (reverse ? n - 1 - k : k) * in;         \
                    acc += xl[at];                                             \
                    yl[at] = acc;                                              \
                }                                                              \
            });                                                                \
        return MG_OK;                                                          \
    }
MG_CPU_FLOAT_TYPES(CUMSUM_DEF)
#undef CUMSUM_DEF

mg_status mgi_cpu_cumsum(const mg_kargs *ka) {
    mg_softmax_dims d;
    mg_status s = mg_softmax_dims_setup(ka, &d);
    if (s != MG_OK) return s;
    return MG_CPU_BY_DTYPE(ka, ka->out.d.dtype, cumsum, ka->in[0].data,
                           ka->out.data, &d, ka->attrs->reverse);
}
