/*
 * cuda_softmax.cu - softmax and log-softmax along one axis, one block per
 * row with fixed-order block reductions.
 */
#include "cuda_internal.h"

/* ---- softmax rows ----------------------------------------------------------- */

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
    const mg_tdesc *d = &a->in[0].d;
    const int axis = a->attrs->axis;
    if (axis < 0 || axis >= d->ndim)
        return mg_kernel_fail(a, MG_ERR_INVALID_ARG,
                              "axis %d is outside [0, %d)", axis, d->ndim);
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < axis; i++) outer *= d->shape[i];
    for (int i = axis + 1; i < d->ndim; i++) inner *= d->shape[i];
    const int64_t n = d->shape[axis], rows = outer * inner;
    const unsigned t = cu_row_threads(n);
    CU_BY_FLOAT(a, a->out.d.dtype,
                (k_softmax<T><<<cu_grid_rows(rows), t, t * sizeof(T),
                                c->stream>>>((const T *)a->in[0].data,
                                             (T *)a->out.data, rows, n, inner,
                                             log_out)));
    return MG_OK;
}

mg_status cu_softmax(cu_ctx *c, const mg_kargs *a) { return softmax(c, a, 0); }
mg_status cu_log_softmax(cu_ctx *c, const mg_kargs *a) {
    return softmax(c, a, 1);
}
