/*
 * cuda_scan.cu - cumsum: one thread per line along the axis ([outer, n,
 * inner] view, kernel_shared.h's softmax geometry) runs the CPU's loop, a
 * running sum in T from the start or, reversed, from the end, so both
 * backends give the same bits. A line is serial work; cumsum's lines in a
 * captured model (positions, masks) are short beside the rest of a step.
 */
#include "cuda_internal.h"

template <typename T>
__global__ void k_cumsum(const T *x, T *y, mg_softmax_dims d, int reverse) {
    const int64_t n = d.n, in = d.inner;
    CU_FOR(l, d.outer * in) {
        const int64_t o = l / in, i = l % in;
        const T *xl = x + o * n * in + i;
        T *yl = y + o * n * in + i;
        T acc = 0;
        for (int64_t k = 0; k < n; k++) {
            const int64_t at = (reverse ? n - 1 - k : k) * in;
            acc += xl[at];
            yl[at] = acc;
        }
    }
}

mg_status cu_cumsum(cu_ctx *c, const mg_kargs *a) {
    mg_softmax_dims d;
    mg_status s = mg_softmax_dims_setup(a, &d);
    if (s != MG_OK) return s;
    CU_BY_FLOAT(a, a->out.d.dtype,
                (k_cumsum<T>
                 <<<cu_blocks(d.outer * d.inner), CU_THREADS, 0, c->stream>>>(
                     (const T *)a->in[0].data, (T *)a->out.data, d,
                     a->attrs->reverse)));
    return MG_OK;
}
