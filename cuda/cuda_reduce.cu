/*
 * cuda_reduce.cu - sum and mean over axes, softmax and log_softmax, the
 * losses and cross-entropy's gradient, batchnorm and layernorm. Every
 * reduction is a fixed-order tree within one block (or a sequential loop in
 * one thread), never atomics, so results are deterministic run to run.
 */
#include "cuda_internal.h"

#include <limits.h>
#include <string.h>

/* Threads for a block that reduces rows of n elements: a power of two. */
static unsigned row_threads(int64_t n) {
    unsigned t = 32;
    while (t < 256 && (int64_t)t < n) t *= 2;
    return t;
}

/* ---- sum, mean -------------------------------------------------------------- */

/* Kept dims (the output, in order) and reduced dims, with x's strides. */
struct red_dims {
    int nk, nr;
    int64_t kshape[MG_MAX_DIMS], kstride[MG_MAX_DIMS];
    int64_t rshape[MG_MAX_DIMS], rstride[MG_MAX_DIMS];
};

__device__ __forceinline__ int64_t red_off(int n, const int64_t *shape,
                                           const int64_t *stride, int64_t i) {
    int64_t o = 0;
    for (int d = n - 1; d >= 0; d--) {
        o += (i % shape[d]) * stride[d];
        i /= shape[d];
    }
    return o;
}

/* One block per output: deterministic tree over the reduced elements. */
template <typename T>
__global__ void k_reduce_block(const T *x, T *y, int64_t ny, int64_t nr,
                               red_dims d, int64_t mean_of) {
    CU_SHARED(T, sh);
    for (int64_t o = blockIdx.x; o < ny; o += gridDim.x) {
        const T *px = x + red_off(d.nk, d.kshape, d.kstride, o);
        T acc = 0;
        for (int64_t r = threadIdx.x; r < nr; r += blockDim.x)
            acc += px[red_off(d.nr, d.rshape, d.rstride, r)];
        acc = cu_block_sum(acc, sh);
        if (threadIdx.x == 0) y[o] = mean_of ? acc / (T)mean_of : acc;
    }
}

/* One thread per output, in index order: for short reductions. */
template <typename T>
__global__ void k_reduce_thread(const T *x, T *y, int64_t ny, int64_t nr,
                                red_dims d, int64_t mean_of) {
    CU_FOR(o, ny) {
        const T *px = x + red_off(d.nk, d.kshape, d.kstride, o);
        T acc = 0;
        for (int64_t r = 0; r < nr; r++)
            acc += px[red_off(d.nr, d.rshape, d.rstride, r)];
        y[o] = mean_of ? acc / (T)mean_of : acc;
    }
}

static mg_status reduce(cu_ctx *c, const mg_kargs *a, int mean) {
    const mg_tdesc *dx = &a->in[0].d;
    const mg_attrs *at = a->attrs;
    const int64_t nx = mg_tdesc_numel(dx), ny = mg_tdesc_numel(&a->out.d);
    int reduced[MG_MAX_DIMS] = {0};
    for (int i = 0; i < dx->ndim; i++) reduced[i] = at->naxes == 0 && nx != ny;
    for (int j = 0; j < at->naxes; j++) {
        if (at->axes[j] < 0 || at->axes[j] >= dx->ndim)
            return mg_kernel_fail(a, MG_ERR_INVALID_ARG,
                                  "axis %d is outside [0, %d)", at->axes[j],
                                  dx->ndim);
        reduced[at->axes[j]] = 1;
    }
    red_dims d;
    memset(&d, 0, sizeof d);
    int64_t stride = 1, kept = 1;
    int64_t xs[MG_MAX_DIMS];
    for (int i = dx->ndim - 1; i >= 0; i--) {
        xs[i] = stride;
        stride *= dx->shape[i];
    }
    for (int i = 0; i < dx->ndim; i++) {
        if (dx->shape[i] == 1) continue;
        if (reduced[i]) {
            d.rshape[d.nr] = dx->shape[i];
            d.rstride[d.nr++] = xs[i];
        } else {
            d.kshape[d.nk] = dx->shape[i];
            d.kstride[d.nk++] = xs[i];
            kept *= dx->shape[i];
        }
    }
    if (kept != ny)
        return mg_kernel_fail(a, MG_ERR_SHAPE,
                              "reduced input has %lld elements, output %lld",
                              (long long)kept, (long long)ny);
    const int64_t nr = ny ? nx / ny : 0, mean_of = mean ? nr : 0;
    CU_BY_FLOAT(a, a->out.d.dtype, {
        if (nr < 64) {
            k_reduce_thread<T><<<cu_blocks(ny), CU_THREADS, 0, c->stream>>>(
                (const T *)a->in[0].data, (T *)a->out.data, ny, nr, d,
                mean_of);
        } else {
            const unsigned t = row_threads(nr);
            k_reduce_block<T><<<cu_grid_rows(ny), t, t * sizeof(T),
                                c->stream>>>((const T *)a->in[0].data,
                                             (T *)a->out.data, ny, nr, d,
                                             mean_of);
        }
    });
    return MG_OK;
}

mg_status cu_sum(cu_ctx *c, const mg_kargs *a) { return reduce(c, a, 0); }
mg_status cu_mean(cu_ctx *c, const mg_kargs *a) { return reduce(c, a, 1); }

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
    const unsigned t = row_threads(n);
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

/* ---- losses ----------------------------------------------------------------- */

/* Per row: logsumexp(row) - row[label] as (m - v) + log s; a bad label
 * records its row in *flag (the smallest such row) and contributes 0. */
template <typename T>
__global__ void k_ce_rows(const T *x, const int32_t *labels, T *part,
                          int64_t rows, int64_t cl, int *flag) {
    CU_SHARED(T, sh);
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const T *px = x + r * cl;
        const int32_t lab = labels[r];
        const bool bad = lab < 0 || lab >= cl;
        if (bad && threadIdx.x == 0) atomicMin(flag, (int)(r < INT_MAX ? r : INT_MAX - 1));
        T m = px[0];
        for (int64_t i = threadIdx.x; i < cl; i += blockDim.x)
            if (px[i] > m) m = px[i];
        m = cu_block_max(m, sh);
        T s = 0;
        for (int64_t i = threadIdx.x; i < cl; i += blockDim.x)
            s += exp(px[i] - m);
        s = cu_block_sum(s, sh);
        if (threadIdx.x == 0) part[r] = bad ? (T)0 : (m - px[lab]) + log(s);
    }
}

/* y[0] = (sum of v[i] or of (v[i] - w[i])^2) / n in one block. */
template <typename T>
__global__ void k_mean_of(const T *v, const T *w, T *y, int64_t n) {
    CU_SHARED(T, sh);
    T s = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        if (w) {
            const T e = v[i] - w[i];
            s += e * e;
        } else {
            s += v[i];
        }
    }
    s = cu_block_sum(s, sh);
    if (threadIdx.x == 0) y[0] = s / (T)n;
}

/* grad row = (softmax(row) - onehot(label)) * gy / rows */
template <typename T>
__global__ void k_ce_grad(const T *gy, const T *x, const int32_t *labels,
                          T *g, int64_t rows, int64_t cl, int *flag) {
    CU_SHARED(T, sh);
    const T scale = gy[0] / (T)rows;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const T *px = x + r * cl;
        T *pg = g + r * cl;
        const int32_t lab = labels[r];
        if ((lab < 0 || lab >= cl) && threadIdx.x == 0)
            atomicMin(flag, (int)(r < INT_MAX ? r : INT_MAX - 1));
        T m = px[0];
        for (int64_t i = threadIdx.x; i < cl; i += blockDim.x)
            if (px[i] > m) m = px[i];
        m = cu_block_max(m, sh);
        T s = 0;
        for (int64_t i = threadIdx.x; i < cl; i += blockDim.x)
            s += exp(px[i] - m);
        s = cu_block_sum(s, sh);
        for (int64_t i = threadIdx.x; i < cl; i += blockDim.x) {
            T v = exp(px[i] - m) / s;
            if (i == lab) v -= 1;
            pg[i] = v * scale;
        }
    }
}

/* Logits [N, C] and labels [N] in slots lo, lo + 1. */
static mg_status ce_dims(const mg_kargs *a, int lo, int64_t *rows,
                         int64_t *cl) {
    const mg_tdesc *dl = &a->in[lo].d;
    if (dl->ndim != 2)
        return mg_kernel_fail(a, MG_ERR_SHAPE,
                              "logits must be [N, C], got %d dims", dl->ndim);
    *rows = dl->shape[0];
    *cl = dl->shape[1];
    return MG_OK;
}

static mg_status flag_reset(cu_ctx *c, const mg_kargs *a) {
    return cu_check(a, cudaMemsetAsync(c->flag, 0x7f, sizeof(int), c->stream),
                    "label check reset");
}

/* Waits for the kernel and reports the first bad label, as the CPU does. */
static mg_status flag_check(cu_ctx *c, const mg_kargs *a,
                            const int32_t *labels, int64_t cl) {
    int row = 0;
    mg_status s = cu_check(a, cudaMemcpyAsync(&row, c->flag, sizeof row,
                                              cudaMemcpyDeviceToHost,
                                              c->stream),
                           "label check");
    if (s == MG_OK)
        s = cu_check(a, cudaStreamSynchronize(c->stream), "label check");
    if (s != MG_OK || row == 0x7f7f7f7f) return s;
    int32_t lab = 0;
    s = cu_check(a, cudaMemcpy(&lab, labels + row, sizeof lab,
                               cudaMemcpyDeviceToHost),
                 "label check");
    if (s != MG_OK) return s;
    return mg_kernel_fail(a, MG_ERR_INVALID_ARG,
                          "label %d at row %d is outside [0, %lld)", (int)lab,
                          row, (long long)cl);
}

size_t cu_cross_entropy_workspace(const mg_kargs *a) {
    const mg_tdesc *dl = &a->in[0].d;
    if (dl->ndim != 2) return 0;
    return (size_t)dl->shape[0] * mg_dtype_size(a->out.d.dtype);
}

mg_status cu_cross_entropy(cu_ctx *c, const mg_kargs *a) {
    int64_t rows = 0, cl = 0;
    mg_status s = ce_dims(a, 0, &rows, &cl);
    if (s == MG_OK) s = flag_reset(c, a);
    if (s != MG_OK) return s;
    const int32_t *labels = (const int32_t *)a->in[1].data;
    const unsigned t = row_threads(cl);
    CU_BY_FLOAT(a, a->out.d.dtype, {
        void *w = NULL;
        s = cu_work(a, (size_t)rows * sizeof(T), &w);
        if (s != MG_OK) return s;
        T *part = (T *)w; /* one partial loss per row */
        k_ce_rows<T><<<cu_grid_rows(rows), t, t * sizeof(T), c->stream>>>(
            (const T *)a->in[0].data, labels, part, rows, cl, c->flag);
        s = cu_check_launch(a, "cross_entropy rows");
        if (s != MG_OK) return s;
        k_mean_of<T><<<1, 1024, 1024 * sizeof(T), c->stream>>>(
            part, (const T *)NULL, (T *)a->out.data, rows);
    });
    s = cu_check_launch(a, "cross_entropy mean");
    return s != MG_OK ? s : flag_check(c, a, labels, cl);
}

mg_status cu_cross_entropy_grad(cu_ctx *c, const mg_kargs *a) {
    int64_t rows = 0, cl = 0;
    mg_status s = ce_dims(a, 1, &rows, &cl);
    if (s == MG_OK) s = flag_reset(c, a);
    if (s != MG_OK) return s;
    const int32_t *labels = (const int32_t *)a->in[2].data;
    const unsigned t = row_threads(cl);
    CU_BY_FLOAT(a, a->out.d.dtype,
                (k_ce_grad<T><<<cu_grid_rows(rows), t, t * sizeof(T),
                                c->stream>>>(
                    (const T *)a->in[0].data, (const T *)a->in[1].data,
                    labels, (T *)a->out.data, rows, cl, c->flag)));
    s = cu_check_launch(a, "cross_entropy_grad");
    return s != MG_OK ? s : flag_check(c, a, labels, cl);
}

mg_status cu_mse(cu_ctx *c, const mg_kargs *a) {
    const int64_t n = mg_tdesc_numel(&a->in[0].d);
    CU_BY_FLOAT(a, a->out.d.dtype,
                (k_mean_of<T><<<1, 1024, 1024 * sizeof(T), c->stream>>>(
                    (const T *)a->in[0].data, (const T *)a->in[1].data,
                    (T *)a->out.data, n)));
    return MG_OK;
}

/* ---- batchnorm, layernorm ------------------------------------------------- */

/* x viewed as [A, B, C], normalised per b over A * C (see cpu_norm.c). */
__device__ __forceinline__ int64_t norm_at(const mg_norm_dims &d, int64_t b,
                                           int64_t e) {
    return ((e / d.c) * d.b + b) * d.c + e % d.c;
}

/* Two-pass mean and rstd of group b; every thread of the block gets them. */
template <typename T>
__device__ void norm_stats(const T *x, const mg_norm_dims &d, int64_t b, T *sh,
                           T *mean, T *rstd) {
    const int64_t cnt = d.a * d.c;
    T s = 0;
    for (int64_t e = threadIdx.x; e < cnt; e += blockDim.x)
        s += x[norm_at(d, b, e)];
    const T m = cu_block_sum(s, sh) / (T)cnt;
    T v = 0;
    for (int64_t e = threadIdx.x; e < cnt; e += blockDim.x) {
        const T u = x[norm_at(d, b, e)] - m;
        v += u * u;
    }
    v = cu_block_sum(v, sh);
    *mean = m;
    *rstd = (T)1 / sqrt(v / (T)cnt + (T)d.eps);
}

template <typename T>
__global__ void k_norm_fwd(const T *x, const T *gamma, const T *beta, T *y,
                           mg_norm_dims d) {
    CU_SHARED(T, sh);
    const int64_t cnt = d.a * d.c;
    for (int64_t b = blockIdx.x; b < d.b; b += gridDim.x) {
        T m, rs;
        norm_stats(x, d, b, sh, &m, &rs);
        for (int64_t e = threadIdx.x; e < cnt; e += blockDim.x) {
            const int64_t o = norm_at(d, b, e), k = d.gamma_by_c ? e % d.c : b;
            y[o] = (x[o] - m) * rs * gamma[k] + beta[k];
        }
    }
}

template <typename T>
__global__ void k_norm_grad_input(const T *gy, const T *x, const T *gamma,
                                  T *dx, mg_norm_dims d) {
    CU_SHARED(T, sh);
    const int64_t cnt = d.a * d.c;
    for (int64_t b = blockIdx.x; b < d.b; b += gridDim.x) {
        T m, rs, s1 = 0, s2 = 0;
        norm_stats(x, d, b, sh, &m, &rs);
        for (int64_t e = threadIdx.x; e < cnt; e += blockDim.x) {
            const int64_t o = norm_at(d, b, e), k = d.gamma_by_c ? e % d.c : b;
            const T h = gy[o] * gamma[k];
            s1 += h;
            s2 += h * (x[o] - m) * rs;
        }
        const T mh = cu_block_sum(s1, sh) / (T)cnt;
        const T mhx = cu_block_sum(s2, sh) / (T)cnt;
        for (int64_t e = threadIdx.x; e < cnt; e += blockDim.x) {
            const int64_t o = norm_at(d, b, e), k = d.gamma_by_c ? e % d.c : b;
            const T h = gy[o] * gamma[k];
            dx[o] = rs * (h - mh - (x[o] - m) * rs * mhx);
        }
    }
}

/* batchnorm: dgamma[b] = sum over the group of gy * xhat. Layernorm keeps
 * each group's stats in st[2b], st[2b+1] for k_norm_grad_gamma_c. */
template <typename T>
__global__ void k_norm_grad_gamma_b(const T *gy, const T *x, T *dg, T *st,
                                    mg_norm_dims d) {
    CU_SHARED(T, sh);
    const int64_t cnt = d.a * d.c;
    for (int64_t b = blockIdx.x; b < d.b; b += gridDim.x) {
        T m, rs;
        norm_stats(x, d, b, sh, &m, &rs);
        if (st) {
            if (threadIdx.x == 0) {
                st[2 * b] = m;
                st[2 * b + 1] = rs;
            }
            continue;
        }
        T s = 0;
        for (int64_t e = threadIdx.x; e < cnt; e += blockDim.x) {
            const int64_t o = norm_at(d, b, e);
            s += gy[o] * ((x[o] - m) * rs);
        }
        s = cu_block_sum(s, sh);
        if (threadIdx.x == 0) dg[b] = s;
    }
}

/* layernorm (A = 1): dgamma[j] = sum over rows b of gy * xhat, in row order */
template <typename T>
__global__ void k_norm_grad_gamma_c(const T *gy, const T *x, T *dg,
                                    const T *st, mg_norm_dims d) {
    CU_FOR(j, d.c) {
        T s = 0;
        for (int64_t b = 0; b < d.b; b++) {
            const int64_t o = b * d.c + j;
            s += gy[o] * ((x[o] - st[2 * b]) * st[2 * b + 1]);
        }
        dg[j] = s;
    }
}

mg_status cu_norm(cu_ctx *c, const mg_kargs *a) {
    mg_norm_dims d;
    mg_status s = mg_norm_dims_setup(a, &a->in[0].d, &d);
    if (s != MG_OK) return s;
    const unsigned t = row_threads(d.a * d.c);
    CU_BY_FLOAT(a, a->out.d.dtype,
                (k_norm_fwd<T><<<cu_grid_rows(d.b), t, t * sizeof(T),
                                 c->stream>>>(
                    (const T *)a->in[0].data, (const T *)a->in[1].data,
                    (const T *)a->in[2].data, (T *)a->out.data, d)));
    return MG_OK;
}

mg_status cu_norm_grad_input(cu_ctx *c, const mg_kargs *a) {
    mg_norm_dims d;
    mg_status s = mg_norm_dims_setup(a, &a->in[1].d, &d);
    if (s != MG_OK) return s;
    const unsigned t = row_threads(d.a * d.c);
    CU_BY_FLOAT(a, a->out.d.dtype,
                (k_norm_grad_input<T><<<cu_grid_rows(d.b), t, t * sizeof(T),
                                        c->stream>>>(
                    (const T *)a->in[0].data, (const T *)a->in[1].data,
                    (const T *)a->in[2].data, (T *)a->out.data, d)));
    return MG_OK;
}

/* layernorm keeps each row's mean and rstd for the column pass. */
size_t cu_norm_grad_gamma_workspace(const mg_kargs *a) {
    mg_norm_dims d = {};
    if (mg_norm_dims_setup(a, &a->in[1].d, &d) != MG_OK || !d.gamma_by_c)
        return 0;
    return (size_t)(2 * d.b) * mg_dtype_size(a->out.d.dtype);
}

mg_status cu_norm_grad_gamma(cu_ctx *c, const mg_kargs *a) {
    mg_norm_dims d;
    mg_status s = mg_norm_dims_setup(a, &a->in[1].d, &d);
    if (s != MG_OK) return s;
    const unsigned t = row_threads(d.a * d.c);
    CU_BY_FLOAT(a, a->out.d.dtype, {
        const T *gy = (const T *)a->in[0].data, *x = (const T *)a->in[1].data;
        T *dg = (T *)a->out.data, *st = NULL;
        if (d.gamma_by_c) {
            void *w = NULL;
            s = cu_work(a, (size_t)(2 * d.b) * sizeof(T), &w);
            if (s != MG_OK) return s;
            st = (T *)w;
        }
        k_norm_grad_gamma_b<T><<<cu_grid_rows(d.b), t, t * sizeof(T),
                                 c->stream>>>(gy, x, dg, st, d);
        if (d.gamma_by_c) {
            s = cu_check_launch(a, "layernorm statistics");
            if (s != MG_OK) return s;
            k_norm_grad_gamma_c<T><<<cu_blocks(d.c), CU_THREADS, 0,
                                     c->stream>>>(gy, x, dg, st, d);
        }
    });
    return MG_OK;
}
