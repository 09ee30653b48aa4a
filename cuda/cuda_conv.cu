/*
 * cuda_conv.cu - conv2d and its gradients: through cuDNN where it runs them
 * (cuda_cudnn.cu), else by im2col + cuBLAS GEMM (cu_gemm), one sample's
 * columns at a time in the workspace the executor lends. col2im is written as a
 * gather in the CPU's accumulation order, so it needs no atomics and is
 * deterministic.
 */
#include "cuda_internal.h"

/* ---- conv2d ----------------------------------------------------------------
 */

/* col[s][(cc*KH + i)*KW + j][oy*OW + ox] for samples s of a chunk, cc over
 * all channels (group g's block starts at g*k*p, as the GEMMs expect). */
template <typename T>
__global__ void k_im2col(const T *x, T *col, int64_t total, mg_conv_dims d) {
    CU_FOR(idx, total) {
        int64_t t = idx;
        const int64_t ox = t % d.ow;
        t /= d.ow;
        const int64_t oy = t % d.oh;
        t /= d.oh;
        const int j = (int)(t % d.kw);
        t /= d.kw;
        const int i = (int)(t % d.kh);
        t /= d.kh;
        const int64_t cc = t; /* sample * C + channel */
        const int64_t iy = oy * d.sh - d.ph + i * d.dh;
        const int64_t ix = ox * d.sw - d.pw + j * d.dw;
        col[idx] = iy >= 0 && iy < d.h && ix >= 0 && ix < d.w
                       ? x[(cc * d.h + iy) * d.w + ix]
                       : (T)0;
    }
}

/* dx[s][cc][iy][ix] = sum over (i, j) of the col entries that read it. */
template <typename T>
__global__ void k_col2im(const T *col, T *x, int64_t total, mg_conv_dims d) {
    CU_FOR(idx, total) {
        int64_t t = idx;
        const int64_t ix = t % d.w;
        t /= d.w;
        const int64_t iy = t % d.h;
        t /= d.h;
        const int64_t cc = t;
        const int64_t base = cc * d.kh * d.kw;
        T s = 0;
        for (int i = 0; i < d.kh; i++) {
            const int64_t ty = iy + d.ph - (int64_t)i * d.dh;
            if (ty < 0 || ty % d.sh) continue;
            const int64_t oy = ty / d.sh;
            if (oy >= d.oh) continue;
            for (int j = 0; j < d.kw; j++) {
                const int64_t tx = ix + d.pw - (int64_t)j * d.dw;
                if (tx < 0 || tx % d.sw) continue;
                const int64_t ox = tx / d.sw;
                if (ox >= d.ow) continue;
                s += col[((base + i * d.kw + j) * d.oh + oy) * d.ow + ox];
            }
        }
        x[idx] = s;
    }
}

/* One sample's im2col columns, all groups at once; none when x is its own
 * column matrix. ops_conv.c's workspace rule lends exactly this. */
size_t cu_conv2d_workspace(const mg_kargs *a) {
    mg_conv_dims d = {};
    if (mg_conv_dims_of_op(a, &d) != MG_OK || d.direct) return 0;
    return (size_t)(d.groups * d.k * d.p) * mg_dtype_size(a->out.d.dtype);
}

/* mode FORWARD: (x, w) -> y; GRAD_INPUT: (gy, w) -> dx; GRAD_WEIGHT:
 * (gy, x) -> dw. */
template <typename T>
static mg_status conv_run(cu_ctx *c, const mg_kargs *a, const mg_conv_dims *d,
                          int mode) {
    const int64_t xs = d->cg * d->h * d->w; /* one (sample, group) of x */
    const int64_t ys = d->m * d->p, ws = d->m * d->k, cs = d->k * d->p;
    /* x is its own column matrix (all samples at once), or the columns of
     * one sample at a time go to the workspace the executor lent from the
     * pool, so the plan's peak counts them. */
    const int64_t chunk = d->direct ? d->n : 1;
    T *col = NULL;
    if (!d->direct) {
        void *w = NULL;
        mg_status ws = cu_work(a, cu_conv2d_workspace(a), &w);
        if (ws != MG_OK) return ws;
        col = (T *)w;
    }
    const T *in0 = (const T *)a->in[0].data, *in1 = (const T *)a->in[1].data;
    T *out = (T *)a->out.data;
    mg_status s = MG_OK;
    for (int64_t n0 = 0; n0 < d->n && s == MG_OK; n0 += chunk) {
        const int64_t nc = d->n - n0 < chunk ? d->n - n0 : chunk;
        const int64_t cells = nc * d->groups * cs; /* col entries */
        if (mode == CU_CONV_FORWARD) {
            const T *x = in0 + n0 * d->groups * xs;
            if (!d->direct) {
                k_im2col<T><<<cu_blocks(cells), CU_THREADS, 0, c->stream>>>(
                    x, col, cells, *d);
                s = cu_check_launch(a, "im2col");
            }
            const T *cx = d->direct ? x : col;
            const int64_t step = d->direct ? xs : cs;
            /* groups == 1: one GEMM over the chunk with w shared */
            if (s == MG_OK && d->groups == 1)
                s = cu_gemm<T>(c, a, 0, 0, d->m, d->p, d->k, in1, d->k, 0, cx,
                               d->p, step, (T)0, out + n0 * ys, d->p, ys, nc);
            for (int64_t i = 0; s == MG_OK && d->groups > 1 && i < nc; i++)
                s = cu_gemm<T>(c, a, 0, 0, d->m, d->p, d->k, in1, d->k, ws,
                               cx + i * d->groups * step, d->p, step, (T)0,
                               out + (n0 + i) * d->groups * ys, d->p, ys,
                               d->groups);
        } else if (mode == CU_CONV_GRAD_INPUT) {
            /* col = w^T gy per (sample, group), then col2im into dx */
            T *dx = out + n0 * d->groups * xs;
            T *cx = d->direct ? dx : col;
            const int64_t step = d->direct ? xs : cs;
            if (d->groups == 1)
                s = cu_gemm<T>(c, a, 1, 0, d->k, d->p, d->m, in1, d->k, 0,
                               in0 + n0 * ys, d->p, ys, (T)0, cx, d->p, step,
                               nc);
            for (int64_t i = 0; s == MG_OK && d->groups > 1 && i < nc; i++)
                s = cu_gemm<T>(c, a, 1, 0, d->k, d->p, d->m, in1, d->k, ws,
                               in0 + (n0 + i) * d->groups * ys, d->p, ys, (T)0,
                               cx + i * d->groups * step, d->p, step,
                               d->groups);
            if (s == MG_OK && !d->direct) {
                const int64_t nx = nc * d->groups * xs;
                k_col2im<T><<<cu_blocks(nx), CU_THREADS, 0, c->stream>>>(
                    col, dx, nx, *d);
                s = cu_check_launch(a, "col2im");
            }
        } else {
            /* dw += gy col^T per sample, in sample order (beta 0 first) */
            const T *x = in1 + n0 * d->groups * xs;
            if (!d->direct) {
                k_im2col<T><<<cu_blocks(cells), CU_THREADS, 0, c->stream>>>(
                    x, col, cells, *d);
                s = cu_check_launch(a, "im2col");
            }
            const T *cx = d->direct ? x : col;
            const int64_t step = d->direct ? xs : cs;
            for (int64_t i = 0; s == MG_OK && i < nc; i++)
                s = cu_gemm<T>(c, a, 0, 1, d->m, d->k, d->p,
                               in0 + (n0 + i) * d->groups * ys, d->p, ys,
                               cx + i * d->groups * step, d->p, step,
                               n0 + i == 0 ? (T)0 : (T)1, out, d->k, ws,
                               d->groups);
        }
    }
    if (s == MG_OK && mode == CU_CONV_GRAD_WEIGHT && d->n == 0)
        s = cu_check(a,
                     cudaMemsetAsync(out, 0,
                                     (size_t)(ws * d->groups) * sizeof(T),
                                     c->stream),
                     "conv2d_grad_weight zero fill");
    return s;
}

static mg_status conv(cu_ctx *c, const mg_kargs *a, int mode) {
    mg_conv_dims d;
    mg_status s = mg_conv_dims_of_op(a, &d);
    if (s != MG_OK) return s;
    if (cu_dnn_conv(c, a, &d, mode, &s)) return s;
    CU_BY_FLOAT(a, a->out.d.dtype, return conv_run<T>(c, a, &d, mode));
    return MG_OK;
}

mg_status cu_conv2d(cu_ctx *c, const mg_kargs *a) {
    return conv(c, a, CU_CONV_FORWARD);
}
mg_status cu_conv2d_grad_input(cu_ctx *c, const mg_kargs *a) {
    return conv(c, a, CU_CONV_GRAD_INPUT);
}
mg_status cu_conv2d_grad_weight(cu_ctx *c, const mg_kargs *a) {
    return conv(c, a, CU_CONV_GRAD_WEIGHT);
}
