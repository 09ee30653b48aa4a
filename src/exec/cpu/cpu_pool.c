/*
 * cpu_pool.c - max and average pooling and their gradients. Every kernel
 * visits a window's elements of x in the same row-major order, clipped to
 * x, so the max-pool gradient finds the element the forward picked: the
 * first maximum in that order, never padding. Average pooling divides by
 * mg_pool2d_divisor (kernel_shared.h), which the CUDA kernels share.
 * Gradients accumulate into a zeroed dx in output order, so overlapping
 * windows sum deterministically. Planes are independent and each is
 * computed whole by one thread, so the bits do not depend on the thread
 * count.
 */
#include "cpu_kernels.h"

#include <math.h>
#include <string.h>

/* The element max pooling picks in window r of plane x (w columns):
 * mg_pool2d_argmax's rule (the first maximum in row-major order, a NaN
 * larger than any number and the first NaN winning), with the best value
 * kept in a register rather than read back through x; *v gets it. */
#define POOL_ARGMAX_DEF(T, SUF)                                                \
    static inline int64_t pool_argmax_##SUF(const T *restrict x, int64_t w,    \
                                            mg_pool2d_win r, T *v) {           \
        int64_t best = r.y0 * w + r.x0;                                        \
        T b = x[best];                                                         \
        for (int64_t iy = r.y0; iy < r.y1; iy++) {                             \
            const T *row = x + iy * w;                                         \
            for (int64_t ix = r.x0; ix < r.x1; ix++) {                         \
                const T u = row[ix];                                           \
                if (u > b || (u != u && b == b)) {                             \
                    b = u;                                                     \
                    best = iy * w + ix;                                        \
                }                                                              \
            }                                                                  \
        }                                                                      \
        *v = b;                                                                \
        return best;                                                           \
    }
POOL_ARGMAX_DEF(float, f32)
POOL_ARGMAX_DEF(double, f64)
#undef POOL_ARGMAX_DEF

/* A pooling kernel's frame: each plane p (hw inputs, ohw outputs) whole
 * on one thread, by PLANE, a call of the kernel's plane function. */
#define POOL_PLANES(d, PLANE)                                                  \
    do {                                                                       \
        const int64_t hw = (d)->h * (d)->w, ohw = (d)->oh * (d)->ow;           \
        MG_CPU_PAR_LOOP((d)->planes *hw,                                       \
                        for (int64_t p = 0; p < (d)->planes; p++),             \
                        { PLANE; });                                           \
    } while (0)

#define POOL_DEF(T, SUF)                                                       \
    static void max_pool_plane_##SUF(const T *xp, T *yp,                       \
                                     const mg_pool2d_dims *d) {                \
        for (int64_t oy = 0; oy < d->oh; oy++)                                 \
            for (int64_t ox = 0; ox < d->ow; ox++)                             \
                pool_argmax_##SUF(xp, d->w, mg_pool2d_window(d, oy, ox),       \
                                  yp++);                                       \
    }                                                                          \
    static void max_pool_grad_plane_##SUF(const T *gyp, const T *xp, T *gxp,   \
                                          const mg_pool2d_dims *d) {           \
        memset(gxp, 0, (size_t)(d->h * d->w) * sizeof(T));                     \
        for (int64_t oy = 0; oy < d->oh; oy++)                                 \
            for (int64_t ox = 0; ox < d->ow; ox++) {                           \
                T v;                                                           \
                gxp[pool_argmax_##SUF(xp, d->w, mg_pool2d_window(d, oy, ox),   \
                                      &v)] += *gyp++;                          \
            }                                                                  \
    }                                                                          \
    static void avg_pool_plane_##SUF(const T *xp, T *yp,                       \
                                     const mg_pool2d_dims *d) {                \
        for (int64_t oy = 0; oy < d->oh; oy++)                                 \
            for (int64_t ox = 0; ox < d->ow; ox++) {                           \
                const mg_pool2d_win r = mg_pool2d_window(d, oy, ox);           \
                T s = 0;                                                       \
                for (int64_t iy = r.y0; iy < r.y1; iy++)                       \
                    for (int64_t ix = r.x0; ix < r.x1; ix++)                   \
                        s += xp[iy * d->w + ix];                               \
                *yp++ = s / (T)mg_pool2d_divisor(d, oy, ox, r);                \
            }                                                                  \
    }                                                                          \
    static void avg_pool_grad_plane_##SUF(const T *gyp, T *gxp,                \
                                          const mg_pool2d_dims *d) {           \
        memset(gxp, 0, (size_t)(d->h * d->w) * sizeof(T));                     \
        for (int64_t oy = 0; oy < d->oh; oy++)                                 \
            for (int64_t ox = 0; ox < d->ow; ox++) {                           \
                const mg_pool2d_win r = mg_pool2d_window(d, oy, ox);           \
                const T v = *gyp++ / (T)mg_pool2d_divisor(d, oy, ox, r);       \
                for (int64_t iy = r.y0; iy < r.y1; iy++)                       \
                    for (int64_t ix = r.x0; ix < r.x1; ix++)                   \
                        gxp[iy * d->w + ix] += v;                              \
            }                                                                  \
    }                                                                          \
    static mg_status max_pool_##SUF(const T *x, T *y,                          \
                                    const mg_pool2d_dims *d) {                 \
        POOL_PLANES(d, max_pool_plane_##SUF(x + p * hw, y + p * ohw, d));      \
        return MG_OK;                                                          \
    }                                                                          \
    static mg_status max_pool_grad_##SUF(const T *gy, const T *x, T *gx,       \
                                         const mg_pool2d_dims *d) {            \
        POOL_PLANES(d, max_pool_grad_plane_##SUF(gy + p * ohw, x + p * hw,     \
                                                 gx + p * hw, d));             \
        return MG_OK;                                                          \
    }                                                                          \
    static mg_status avg_pool_##SUF(const T *x, T *y,                          \
                                    const mg_pool2d_dims *d) {                 \
        POOL_PLANES(d, avg_pool_plane_##SUF(x + p * hw, y + p * ohw, d));      \
        return MG_OK;                                                          \
    }                                                                          \
    static mg_status avg_pool_grad_##SUF(const T *gy, T *gx,                   \
                                         const mg_pool2d_dims *d) {            \
        POOL_PLANES(d,                                                         \
                    avg_pool_grad_plane_##SUF(gy + p * ohw, gx + p * hw, d));  \
        return MG_OK;                                                          \
    }
MG_CPU_FLOAT_TYPES(POOL_DEF)

mg_status mgi_cpu_max_pool2d(const mg_kargs *ka) {
    mg_pool2d_dims d = {0};
    mg_status s = mg_pool2d_dims_setup(ka, &ka->in[0].d, &ka->out.d, &d);
    return s != MG_OK ? s
                      : MG_CPU_BY_DTYPE(ka, ka->out.d.dtype, max_pool,
                                        ka->in[0].data, ka->out.data, &d);
}

mg_status mgi_cpu_avg_pool2d(const mg_kargs *ka) {
    mg_pool2d_dims d = {0};
    mg_status s = mg_pool2d_dims_setup(ka, &ka->in[0].d, &ka->out.d, &d);
    return s != MG_OK ? s
                      : MG_CPU_BY_DTYPE(ka, ka->out.d.dtype, avg_pool,
                                        ka->in[0].data, ka->out.data, &d);
}

mg_status mgi_cpu_max_pool2d_grad(const mg_kargs *ka) {
    mg_pool2d_dims d = {0};
    mg_status s = mg_pool2d_dims_setup(ka, &ka->out.d, &ka->in[0].d, &d);
    return s != MG_OK ? s
                      : MG_CPU_BY_DTYPE(ka, ka->out.d.dtype, max_pool_grad,
                                        ka->in[0].data, ka->in[1].data,
                                        ka->out.data, &d);
}

mg_status mgi_cpu_avg_pool2d_grad(const mg_kargs *ka) {
    mg_pool2d_dims d = {0};
    mg_status s = mg_pool2d_dims_setup(ka, &ka->out.d, &ka->in[0].d, &d);
    return s != MG_OK ? s
                      : MG_CPU_BY_DTYPE(ka, ka->out.d.dtype, avg_pool_grad,
                                        ka->in[0].data, ka->out.data, &d);
}
