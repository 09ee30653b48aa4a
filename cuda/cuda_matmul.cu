/*
 * cuda_matmul.cu - matmul and batched matmul through cuBLAS (row-major by
 * the transpose trick: a row-major Y = A B is the column-major Y^T = B^T
 * A^T), conv2d and its gradients by im2col + cuBLAS GEMM, and pooling.
 * Scatter-adds (col2im, pooling gradients) are written as gathers in the
 * CPU's accumulation order, so they need no atomics and are deterministic.
 */
#include "cuda_internal.h"

#include <limits.h>

/* ---- GEMM ------------------------------------------------------------------- */

static cublasStatus_t gemm_sb(cublasHandle_t h, cublasOperation_t oa,
                              cublasOperation_t ob, int m, int n, int k,
                              const float *alpha, const float *A, int lda,
                              long long sa, const float *B, int ldb,
                              long long sb, const float *beta, float *C,
                              int ldc, long long sc, int batch) {
    return cublasSgemmStridedBatched(h, oa, ob, m, n, k, alpha, A, lda, sa, B,
                                     ldb, sb, beta, C, ldc, sc, batch);
}

static cublasStatus_t gemm_sb(cublasHandle_t h, cublasOperation_t oa,
                              cublasOperation_t ob, int m, int n, int k,
                              const double *alpha, const double *A, int lda,
                              long long sa, const double *B, int ldb,
                              long long sb, const double *beta, double *C,
                              int ldc, long long sc, int batch) {
    return cublasDgemmStridedBatched(h, oa, ob, m, n, k, alpha, A, lda, sa, B,
                                     ldb, sb, beta, C, ldc, sc, batch);
}

/* Row-major Y[i] = op(A[i]) op(B[i]) + beta Y[i] for i < batch, where
 * op(A) is [M, K], op(B) is [K, N]; lda/ldb/ldy are stored row lengths and
 * sa/sb/sy element distances between batch entries (0: shared). */
template <typename T>
static mg_status rm_gemm(cu_ctx *c, const mg_kargs *a, int ta, int tb,
                         int64_t M, int64_t N, int64_t K, const T *A,
                         int64_t lda, int64_t sa, const T *B, int64_t ldb,
                         int64_t sb, T beta, T *Y, int64_t ldy, int64_t sy,
                         int64_t batch) {
    if (M > INT_MAX || N > INT_MAX || K > INT_MAX || lda > INT_MAX ||
        ldb > INT_MAX || ldy > INT_MAX || batch > INT_MAX)
        return mg_kernel_fail(a, MG_ERR_UNSUPPORTED,
                              "GEMM dims exceed the cuBLAS int range");
    if (M == 0 || N == 0 || batch == 0) return MG_OK;
    const T one = 1;
    return cu_check_blas(
        a,
        gemm_sb(c->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)N, (int)M, (int)K, &one,
                B, (int)ldb, sb, A, (int)lda, sa, &beta, Y, (int)ldy, sy,
                (int)batch),
        "gemm");
}

mg_status cu_matmul(cu_ctx *c, const mg_kargs *a) {
    const mg_tdesc *da = &a->in[0].d, *db = &a->in[1].d, *dy = &a->out.d;
    if (da->ndim < 2 || db->ndim < 2 || dy->ndim < 2)
        return mg_kernel_fail(a, MG_ERR_SHAPE,
                              "matmul needs operands of 2 or more "
                              "dims, got %d and %d", da->ndim, db->ndim);
    const int ta = a->attrs->trans_a, tb = a->attrs->trans_b;
    const int64_t m = dy->shape[dy->ndim - 2], n = dy->shape[dy->ndim - 1];
    const int64_t k = da->shape[da->ndim - (ta ? 2 : 1)];
    const int64_t lda = da->shape[da->ndim - 1], ldb = db->shape[db->ndim - 1];
    const int64_t batch = (m * n) != 0 ? mg_tdesc_numel(dy) / (m * n) : 0;
    const int64_t sa = da->ndim == 2 ? 0 : m * k, sb = db->ndim == 2 ? 0 : k * n;
    if (k == 0)
        return cu_check(a, cudaMemsetAsync(a->out.data, 0,
                                           mg_tdesc_nbytes(dy), c->stream),
                        "matmul zero fill");
    CU_BY_FLOAT(a, dy->dtype,
                return rm_gemm<T>(c, a, ta, tb, m, n, k,
                                  (const T *)a->in[0].data, lda, sa,
                                  (const T *)a->in[1].data, ldb, sb, (T)0,
                                  (T *)a->out.data, n, m * n, batch));
    return MG_OK;
}

/* ---- conv2d ---------------------------------------------------------------- */

/* col[s][(cc*KH + i)*KW + j][oy*OW + ox] for samples s of a chunk, cc over
 * all channels (group g's block starts at g*k*p, as the GEMMs expect). */
template <typename T>
__global__ void k_im2col(const T *x, T *col, int64_t total, mg_conv_dims d) {
    CU_FOR(idx, total) {
        int64_t t = idx;
        const int64_t ox = t % d.ow; t /= d.ow;
        const int64_t oy = t % d.oh; t /= d.oh;
        const int j = (int)(t % d.kw); t /= d.kw;
        const int i = (int)(t % d.kh); t /= d.kh;
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
        const int64_t ix = t % d.w; t /= d.w;
        const int64_t iy = t % d.h; t /= d.h;
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

enum { CONV_FORWARD, CONV_GRAD_INPUT, CONV_GRAD_WEIGHT };

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
        if (mode == CONV_FORWARD) {
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
                s = rm_gemm<T>(c, a, 0, 0, d->m, d->p, d->k, in1, d->k, 0, cx,
                               d->p, step, (T)0, out + n0 * ys, d->p, ys, nc);
            for (int64_t i = 0; s == MG_OK && d->groups > 1 && i < nc; i++)
                s = rm_gemm<T>(c, a, 0, 0, d->m, d->p, d->k, in1, d->k, ws,
                               cx + i * d->groups * step, d->p, step, (T)0,
                               out + (n0 + i) * d->groups * ys, d->p, ys,
                               d->groups);
        } else if (mode == CONV_GRAD_INPUT) {
            /* col = w^T gy per (sample, group), then col2im into dx */
            T *dx = out + n0 * d->groups * xs;
            T *cx = d->direct ? dx : col;
            const int64_t step = d->direct ? xs : cs;
            if (d->groups == 1)
                s = rm_gemm<T>(c, a, 1, 0, d->k, d->p, d->m, in1, d->k, 0,
                               in0 + n0 * ys, d->p, ys, (T)0, cx, d->p, step,
                               nc);
            for (int64_t i = 0; s == MG_OK && d->groups > 1 && i < nc; i++)
                s = rm_gemm<T>(c, a, 1, 0, d->k, d->p, d->m, in1, d->k, ws,
                               in0 + (n0 + i) * d->groups * ys, d->p, ys,
                               (T)0, cx + i * d->groups * step, d->p, step,
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
                s = rm_gemm<T>(c, a, 0, 1, d->m, d->k, d->p,
                               in0 + (n0 + i) * d->groups * ys, d->p, ys,
                               cx + i * d->groups * step, d->p, step,
                               n0 + i == 0 ? (T)0 : (T)1, out, d->k, ws,
                               d->groups);
        }
    }
    if (s == MG_OK && mode == CONV_GRAD_WEIGHT && d->n == 0)
        s = cu_check(a, cudaMemsetAsync(out, 0, (size_t)(ws * d->groups) *
                                                     sizeof(T), c->stream),
                     "conv2d_grad_weight zero fill");
    return s;
}

static mg_status conv(cu_ctx *c, const mg_kargs *a, int mode) {
    mg_conv_dims d;
    mg_status s = mg_conv_dims_of_op(a, &d);
    if (s != MG_OK) return s;
    CU_BY_FLOAT(a, a->out.d.dtype, return conv_run<T>(c, a, &d, mode));
    return MG_OK;
}

mg_status cu_conv2d(cu_ctx *c, const mg_kargs *a) {
    return conv(c, a, CONV_FORWARD);
}
mg_status cu_conv2d_grad_input(cu_ctx *c, const mg_kargs *a) {
    return conv(c, a, CONV_GRAD_INPUT);
}
mg_status cu_conv2d_grad_weight(cu_ctx *c, const mg_kargs *a) {
    return conv(c, a, CONV_GRAD_WEIGHT);
}

/* ---- pooling ----------------------------------------------------------------- */

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
        y[idx] = s / (T)(d.kh * d.kw);
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
                    s += pg[oy * d.ow + ox] / (T)(d.kh * d.kw);
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
