/*
 * cpu_pool.c - max and average pooling and their gradients. Every kernel
 * visits a window's elements of x in the same row-major order, clipped to
 * x, so the max-pool gradient finds the element the forward picked: the
 * first maximum in that order, never padding. Gradients accumulate into a
 * zeroed dx in output order, so overlapping windows sum deterministically.
 */
#include "cpu_kernels.h"

#include <math.h>
#include <string.h>

typedef struct pool_dims {
    int64_t planes, h, w, oh, ow; /* planes = N * C */
    int kh, kw, sh, sw, ph, pw;
} pool_dims;

/* Window (oy, ox) clipped to x: rows [y0, y1), columns [x0, x1). */
typedef struct pool_win {
    int64_t y0, y1, x0, x1;
} pool_win;

static pool_win window_at(const pool_dims *d, int64_t oy, int64_t ox) {
    const int64_t ys = oy * d->sh - d->ph, xs = ox * d->sw - d->pw;
    pool_win r = {ys < 0 ? 0 : ys, ys + d->kh, xs < 0 ? 0 : xs, xs + d->kw};
    if (r.y1 > d->h) r.y1 = d->h;
    if (r.x1 > d->w) r.x1 = d->w;
    return r;
}

/* A NaN counts as larger than any number, as in PyTorch, so it propagates;
 * the first NaN wins like the first maximum does. */
#define POOL_DEF(T, SUF)                                                      \
    static int64_t argmax_##SUF(const T *x, const pool_dims *d, pool_win r) { \
        int64_t best = r.y0 * d->w + r.x0;                                    \
        for (int64_t iy = r.y0; iy < r.y1; iy++)                              \
            for (int64_t ix = r.x0; ix < r.x1; ix++) {                        \
                const T v = x[iy * d->w + ix], b = x[best];                   \
                if (v > b || (isnan(v) && !isnan(b))) best = iy * d->w + ix;  \
            }                                                                 \
        return best;                                                          \
    }                                                                         \
    static mg_status max_pool_##SUF(const T *x, T *y, const pool_dims *d) {   \
        for (int64_t p = 0; p < d->planes; p++, x += d->h * d->w)             \
            for (int64_t oy = 0; oy < d->oh; oy++)                            \
                for (int64_t ox = 0; ox < d->ow; ox++)                        \
                    *y++ = x[argmax_##SUF(x, d, window_at(d, oy, ox))];       \
        return MG_OK;                                                         \
    }                                                                         \
    static mg_status max_pool_grad_##SUF(const T *gy, const T *x, T *gx,      \
                                         const pool_dims *d) {                \
        memset(gx, 0, (size_t)(d->planes * d->h * d->w) * sizeof(T));         \
        for (int64_t p = 0; p < d->planes; p++, x += d->h * d->w,             \
                     gx += d->h * d->w)                                       \
            for (int64_t oy = 0; oy < d->oh; oy++)                            \
                for (int64_t ox = 0; ox < d->ow; ox++)                        \
                    gx[argmax_##SUF(x, d, window_at(d, oy, ox))] += *gy++;    \
        return MG_OK;                                                         \
    }                                                                         \
    static mg_status avg_pool_##SUF(const T *x, T *y, const pool_dims *d) {   \
        const T count = (T)d->kh * (T)d->kw;                                  \
        for (int64_t p = 0; p < d->planes; p++, x += d->h * d->w)             \
            for (int64_t oy = 0; oy < d->oh; oy++)                            \
                for (int64_t ox = 0; ox < d->ow; ox++) {                      \
                    const pool_win r = window_at(d, oy, ox);                  \
                    T s = 0;                                                  \
                    for (int64_t iy = r.y0; iy < r.y1; iy++)                  \
                        for (int64_t ix = r.x0; ix < r.x1; ix++)              \
                            s += x[iy * d->w + ix];                           \
                    *y++ = s / count;                                         \
                }                                                             \
        return MG_OK;                                                         \
    }                                                                         \
    static mg_status avg_pool_grad_##SUF(const T *gy, T *gx,                  \
                                         const pool_dims *d) {                \
        const T count = (T)d->kh * (T)d->kw;                                  \
        memset(gx, 0, (size_t)(d->planes * d->h * d->w) * sizeof(T));         \
        for (int64_t p = 0; p < d->planes; p++, gx += d->h * d->w)            \
            for (int64_t oy = 0; oy < d->oh; oy++)                            \
                for (int64_t ox = 0; ox < d->ow; ox++) {                      \
                    const pool_win r = window_at(d, oy, ox);                  \
                    const T v = *gy++ / count;                                \
                    for (int64_t iy = r.y0; iy < r.y1; iy++)                  \
                        for (int64_t ix = r.x0; ix < r.x1; ix++)              \
                            gx[iy * d->w + ix] += v;                          \
                }                                                             \
        return MG_OK;                                                         \
    }
MG_CPU_FLOAT_TYPES(POOL_DEF)

/* Sizes from x [N,C,H,W] and y [N,C,OH,OW]. */
static mg_status pool_setup(const mg_kargs *ka, const mg_tdesc *x,
                            const mg_tdesc *y, pool_dims *d) {
    const mg_attrs *at = ka->attrs;
    if (x->ndim != 4 || y->ndim != 4)
        return mg_cpu_fail(ka, MG_ERR_SHAPE, "pooling needs 4-D tensors");
    *d = (pool_dims){
        .planes = x->shape[0] * x->shape[1], .h = x->shape[2],
        .w = x->shape[3], .oh = y->shape[2], .ow = y->shape[3],
        .kh = at->kernel[0], .kw = at->kernel[1], .sh = at->stride[0],
        .sw = at->stride[1], .ph = at->pad[0], .pw = at->pad[1],
    };
    return MG_OK;
}

mg_status mg_cpu_max_pool2d(const mg_kargs *ka) {
    pool_dims d = {0};
    mg_status s = pool_setup(ka, &ka->in[0].d, &ka->out.d, &d);
    return s != MG_OK ? s
                      : MG_CPU_BY_DTYPE(ka, ka->out.d.dtype, max_pool,
                                        ka->in[0].data, ka->out.data, &d);
}

mg_status mg_cpu_avg_pool2d(const mg_kargs *ka) {
    pool_dims d = {0};
    mg_status s = pool_setup(ka, &ka->in[0].d, &ka->out.d, &d);
    return s != MG_OK ? s
                      : MG_CPU_BY_DTYPE(ka, ka->out.d.dtype, avg_pool,
                                        ka->in[0].data, ka->out.data, &d);
}

mg_status mg_cpu_max_pool2d_grad(const mg_kargs *ka) {
    pool_dims d = {0};
    mg_status s = pool_setup(ka, &ka->out.d, &ka->in[0].d, &d);
    return s != MG_OK ? s
                      : MG_CPU_BY_DTYPE(ka, ka->out.d.dtype, max_pool_grad,
                                        ka->in[0].data, ka->in[1].data,
                                        ka->out.data, &d);
}

mg_status mg_cpu_avg_pool2d_grad(const mg_kargs *ka) {
    pool_dims d = {0};
    mg_status s = pool_setup(ka, &ka->out.d, &ka->in[0].d, &d);
    return s != MG_OK ? s
                      : MG_CPU_BY_DTYPE(ka, ka->out.d.dtype, avg_pool_grad,
                                        ka->in[0].data, ka->out.data, &d);
}
