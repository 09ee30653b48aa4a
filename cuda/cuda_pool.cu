/*
 * cuda_pool.cu - max and average pooling and their gradients, with the
 * CPU's window, divisor and argmax (kernel_shared.h). The gradients are gathers
 * in the CPU's accumulation order, so they need no atomics and are
 * deterministic.
 */
#include "cuda_internal.h"

/* ---- pooling
 * ----------------------------------------------------------------- */

/* The first maximum of the window, as the CPU picks it (kernel_shared.h). */
__device__ __forceinline__ int64_t pool_argmax(const float *x,
                                               const mg_pool2d_dims &d,
                                               int64_t oy, int64_t ox) {
    return mg_pool2d_argmax_f32(x, &d, mg_pool2d_window(&d, oy, ox));
}
__device__ __forceinline__ int64_t pool_argmax(const double *x,
                                               const mg_pool2d_dims &d,
                                               int64_t oy, int64_t ox) {
    return mg_pool2d_argmax_f64(x, &d, mg_pool2d_window(&d, oy, ox));
}

template <typename T>
__global__ void k_pool(const T *x, T *y, mg_pool2d_dims d, int is_max) {
    const int64_t total = d.planes * d.oh * d.ow;
    CU_FOR(idx, total) {
        const int64_t ox = idx % d.ow, oy = (idx / d.ow) % d.oh;
        const T *px = x + (idx / (d.ow * d.oh)) * d.h * d.w;
        if (is_max) {
            y[idx] = px[pool_argmax(px, d, oy, ox)];
            continue;
        }
        const mg_pool2d_win r = mg_pool2d_window(&d, oy, ox);
        T s = 0;
        for (int64_t iy = r.y0; iy < r.y1; iy++)
            for (int64_t ix = r.x0; ix < r.x1; ix++) s += px[iy * d.w + ix];
        y[idx] = s / (T)mg_pool2d_divisor(&d, oy, ox, r);
    }
}

/* dx[p][iy][ix]: the windows that hold (iy, ix), in output order. */
template <typename T>
__global__ void k_pool_grad(const T *gy, const T *x, T *gx, mg_pool2d_dims d,
                            int is_max) {
    const int64_t total = d.planes * d.h * d.w;
    CU_FOR(idx, total) {
        const int64_t ix = idx % d.w, iy = (idx / d.w) % d.h;
        const int64_t plane = idx / (d.w * d.h);
        const T *px = x ? x + plane * d.h * d.w : NULL;
        const T *pg = gy + plane * d.oh * d.ow;
        /* oy*sh - ph <= iy < oy*sh - ph + kh */
        int64_t oy0 = iy + d.ph - d.kh + 1, ox0 = ix + d.pw - d.kw + 1;
        oy0 = oy0 <= 0 ? 0 : (oy0 + d.sh - 1) / d.sh;
        ox0 = ox0 <= 0 ? 0 : (ox0 + d.sw - 1) / d.sw;
        int64_t oy1 = (iy + d.ph) / d.sh, ox1 = (ix + d.pw) / d.sw;
        if (oy1 >= d.oh) oy1 = d.oh - 1;
        if (ox1 >= d.ow) ox1 = d.ow - 1;
        T s = 0;
        for (int64_t oy = oy0; oy <= oy1; oy++)
            for (int64_t ox = ox0; ox <= ox1; ox++) {
                if (is_max) {
                    if (pool_argmax(px, d, oy, ox) == iy * d.w + ix)
                        s += pg[oy * d.ow + ox];
                } else {
                    const mg_pool2d_win r = mg_pool2d_window(&d, oy, ox);
                    s += pg[oy * d.ow + ox] /
                         (T)mg_pool2d_divisor(&d, oy, ox, r);
                }
            }
        gx[idx] = s;
    }
}

static mg_status pool_fwd(cu_ctx *c, const mg_kargs *a, int is_max) {
    mg_pool2d_dims d;
    mg_status s = mg_pool2d_dims_setup(a, &a->in[0].d, &a->out.d, &d);
    if (s != MG_OK) return s;
    const int64_t n = d.planes * d.oh * d.ow;
    CU_BY_FLOAT(a, a->out.d.dtype,
                k_pool<T><<<cu_blocks(n), CU_THREADS, 0, c->stream>>>(
                    (const T *)a->in[0].data, (T *)a->out.data, d, is_max));
    return MG_OK;
}

mg_status cu_max_pool2d(cu_ctx *c, const mg_kargs *a) {
    return pool_fwd(c, a, 1);
}
mg_status cu_avg_pool2d(cu_ctx *c, const mg_kargs *a) {
    return pool_fwd(c, a, 0);
}

/* max_pool2d_grad: (gy, x) -> dx; avg_pool2d_grad: (gy) -> dx */
static mg_status pool_grad(cu_ctx *c, const mg_kargs *a, int is_max) {
    mg_pool2d_dims d;
    mg_status s = mg_pool2d_dims_setup(a, &a->out.d, &a->in[0].d, &d);
    if (s != MG_OK) return s;
    const int64_t n = d.planes * d.h * d.w;
    CU_BY_FLOAT(a, a->out.d.dtype,
                k_pool_grad<T><<<cu_blocks(n), CU_THREADS, 0, c->stream>>>(
                    (const T *)a->in[0].data,
                    is_max ? (const T *)a->in[1].data : (const T *)NULL,
                    (T *)a->out.data, d, is_max));
    return MG_OK;
}

mg_status cu_max_pool2d_grad(cu_ctx *c, const mg_kargs *a) {
    return pool_grad(c, a, 1);
}
mg_status cu_avg_pool2d_grad(cu_ctx *c, const mg_kargs *a) {
    return pool_grad(c, a, 0);
}
