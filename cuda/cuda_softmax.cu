/*
 * cuda_softmax.cu - softmax and log-softmax along one axis, one block per
 * row with fixed-order block reductions.
 */
#include "cuda_internal.h"

/* ---- softmax rows -----------------------------------------------------------
 */

/* Row r of [outer, n, inner]: n elements `inner` apart. One block per row:
 * max, then the sum of exp(x - m), then the outputs, as the CPU does. */
template <typename T>
__global__ void k_softmax(const T *x, T *y, int64_t rows, int64_t n,
                          int64_t inner, int log_out) {
    CU_SHARED(T, sh);
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const int64_t base = (r / inner) * n * inner + r % inner;
        const T *px = x + base;
        T *py = y + base;
        T m = px[0];
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
            if (px[i * inner] > m) m = px[i * inner];
        m = cu_block_max(m, sh);
        T s = 0;
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
            s += exp(px[i * inner] - m);
        s = cu_block_sum(s, sh);
        if (log_out) {
            const T ls = log(s);
            for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
                py[i * inner] = (px[i * inner] - m) - ls;
        } else {
            for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
                py[i * inner] = exp(px[i * inner] - m) / s;
        }
    }
}

static mg_status softmax(cu_ctx *c, const mg_kargs *a, int log_out) {
    mg_softmax_dims d = {};
    mg_status s = mg_softmax_dims_setup(a, &d);
    if (s != MG_OK) return s;
    const int64_t n = d.n, inner = d.inner, rows = d.outer * d.inner;
    const unsigned t = cu_row_threads(n);
    CU_BY_FLOAT(
        a, a->out.d.dtype,
        (k_softmax<T><<<cu_grid_rows(rows), t, t * sizeof(T), c->stream>>>(
            (const T *)a->in[0].data, (T *)a->out.data, rows, n, inner,
            log_out)));
    return MG_OK;
}

mg_status cu_softmax(cu_ctx *c, const mg_kargs *a) { return softmax(c, a, 0); }
mg_status cu_log_softmax(cu_ctx *c, const mg_kargs *a) {
    return softmax(c, a, 1);
}
