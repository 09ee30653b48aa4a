/*
 * cuda_loss.cu - the scalar losses (cross-entropy against integer labels,
 * with its fused backward op, and mean squared error), and the chunked
 * linear + cross-entropy pair, whose logits chunks are cuBLAS products
 * (cu_gemm). Per-row partial losses are summed by one block in a fixed
 * order; a bad label is found on the device and reported as the CPU
 * reports it.
 */
#include "cuda_internal.h"

#include <limits.h>

/* ---- losses -----------------------------------------------------------------
 */

/* Which label, if any, linear_cross_entropy leaves out (PyTorch's
 * ignore_index); cross_entropy ignores none. */
struct ce_ignore {
    int on;
    int64_t index;
};

static __device__ bool ce_ignored(ce_ignore ig, int64_t lab) {
    return ig.on && lab == ig.index;
}

/* The shared start of a cross-entropy row (row `row` of the batch, its
 * cl logits at px): its label, a bad one's row recorded in *flag (the
 * smallest such row; an ignored label is not bad), and the block's max
 * *mx and sum of exp(x - max) *s, which every thread gets. */
template <typename T>
__device__ int64_t ce_row_start(const T *px, int64_t cl, const void *labels,
                                mg_dtype lt, int64_t row, ce_ignore ig,
                                int *flag, T *sh, T *mx, T *s) {
    const int64_t lab = mg_index_at(labels, lt, row);
    if ((lab < 0 || lab >= cl) && !ce_ignored(ig, lab) && threadIdx.x == 0)
        atomicMin(flag, (int)(row < INT_MAX ? row : INT_MAX - 1));
    T m = px[0];
    for (int64_t i = threadIdx.x; i < cl; i += blockDim.x)
        if (px[i] > m) m = px[i];
    m = cu_block_max(m, sh);
    T sum = 0;
    for (int64_t i = threadIdx.x; i < cl; i += blockDim.x)
        sum += exp(px[i] - m);
    *s = cu_block_sum(sum, sh);
    *mx = m;
    return lab;
}

/* Per row r of the m rows of x: logsumexp(row) - row[label of row r0 + r]
 * as (mx - v) + log s, into part[r]; a bad label records its row (r0 + r)
 * in *flag (the smallest such row) and contributes 0. cross_entropy runs
 * it on all its rows (r0 0), linear_cross_entropy on each chunk. */
template <typename T>
__global__ void k_ce_rows(const T *x, const void *labels, mg_dtype lt, T *part,
                          int64_t m, int64_t r0, int64_t cl, ce_ignore ig,
                          int *flag) {
    CU_SHARED(T, sh);
    for (int64_t r = blockIdx.x; r < m; r += gridDim.x) {
        const T *px = x + r * cl;
        T mx, s;
        const int64_t lab =
            ce_row_start(px, cl, labels, lt, r0 + r, ig, flag, sh, &mx, &s);
        /* an ignored row adds 0, as a bad one (which fails the run) */
        const bool skip = lab < 0 || lab >= cl || ce_ignored(ig, lab);
        if (threadIdx.x == 0) part[r] = skip ? (T)0 : (mx - px[lab]) + log(s);
    }
}

/* y[0] = (sum of v[i] or of (v[i] - w[i])^2) / n in one block; den
 * non-NULL: divided by den[0] instead (linear_cross_entropy's kept rows;
 * 0 of them gives NaN, as PyTorch's mean over no rows). */
template <typename T>
__global__ void k_mean_of(const T *v, const T *w, T *y, int64_t n,
                          const T *den) {
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
    if (threadIdx.x == 0) y[0] = s / (den ? den[0] : (T)n);
}

/* out[0] = the count of the n labels that are not ig's index, in one
 * block (a fixed order: the same bits on every run). */
template <typename T>
__global__ void k_kept_rows(const void *labels, mg_dtype lt, int64_t n,
                            ce_ignore ig, T *out) {
    CU_SHARED(T, sh);
    T c = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        if (!ce_ignored(ig, mg_index_at(labels, lt, i))) c += 1;
    c = cu_block_sum(c, sh);
    if (threadIdx.x == 0) out[0] = c;
}

/* Rows r0 .. r0 + m - 1 of the batch (rows in all): g row r = (softmax(x
 * row r) - onehot(label of row r0 + r)) * gy / rows; a bad label records
 * its row in *flag (the smallest such row). g may be x (in place): each
 * thread writes only the elements it read, after the block's max and sum
 * are complete. cross_entropy_grad runs it on all its rows (r0 0),
 * linear_cross_entropy's gradient on each chunk's logits, in place. */
template <typename T>
__global__ void
k_ce_grad_rows(const T *x, T *g, const T *gy, const void *labels, mg_dtype lt,
               int64_t m, int64_t r0, int64_t cl, int64_t rows, ce_ignore ig,
               const T *kept, int *flag) {
    CU_SHARED(T, sh);
    /* kept (the rows not ignored) 0: every row is zeroed, scale unused */
    const T den = kept ? kept[0] : (T)rows;
    const T scale = den > 0 ? gy[0] / den : (T)0;
    for (int64_t r = blockIdx.x; r < m; r += gridDim.x) {
        const T *px = x + r * cl;
        T *pg = g + r * cl;
        if (ce_ignored(ig, mg_index_at(labels, lt, r0 + r))) {
            /* every thread writes only its own elements, as below */
            for (int64_t i = threadIdx.x; i < cl; i += blockDim.x) pg[i] = 0;
            continue; /* the whole block skips the row together */
        }
        T mx, s;
        const int64_t lab =
            ce_row_start(px, cl, labels, lt, r0 + r, ig, flag, sh, &mx, &s);
        for (int64_t i = threadIdx.x; i < cl; i += blockDim.x) {
            T v = exp(px[i] - mx) / s;
            if (i == lab) v -= 1;
            pg[i] = v * scale;
        }
    }
}

static mg_status flag_reset(cu_ctx *c, const mg_kargs *a) {
    return cu_check(a, cudaMemsetAsync(c->flag, 0x7f, sizeof(int), c->stream),
                    "label check reset");
}

/* Waits for the kernel and reports the first bad label, as the CPU does. */
static mg_status flag_check(cu_ctx *c, const mg_kargs *a, const void *labels,
                            mg_dtype lt, int64_t cl) {
    int row = 0;
    mg_status s = cu_check(a,
                           cudaMemcpyAsync(&row, c->flag, sizeof row,
                                           cudaMemcpyDeviceToHost, c->stream),
                           "label check");
    if (s == MG_OK)
        s = cu_check(a, cudaStreamSynchronize(c->stream), "label check");
    if (s != MG_OK || row == 0x7f7f7f7f) return s;
    int64_t lab[1] = {0}; /* room for either label dtype */
    const size_t es = mg_dtype_size(lt);
    s = cu_check(a,
                 cudaMemcpy(lab, (const char *)labels + (size_t)row * es, es,
                            cudaMemcpyDeviceToHost),
                 "label check");
    if (s != MG_OK) return s;
    return mg_kernel_fail(
        a, MG_ERR_INVALID_ARG, "label %lld at row %d is outside [0, %lld)",
        (long long)mg_index_at(lab, lt, 0), row, (long long)cl);
}

size_t cu_cross_entropy_workspace(const mg_kargs *a) {
    const mg_tdesc *dl = &a->in[0].d;
    if (dl->ndim != 2) return 0;
    return (size_t)dl->shape[0] * mg_dtype_size(a->out.d.dtype);
}

mg_status cu_cross_entropy(cu_ctx *c, const mg_kargs *a) {
    int64_t rows = 0, cl = 0;
    mg_status s = mg_ce_dims_setup(a, 0, &rows, &cl);
    if (s == MG_OK) s = flag_reset(c, a);
    if (s != MG_OK) return s;
    const void *labels = a->in[1].data;
    const mg_dtype lt = a->in[1].d.dtype;
    const unsigned t = cu_row_threads(cl);
    CU_BY_FLOAT(a, a->out.d.dtype, {
        void *w = NULL;
        s = cu_work(a, (size_t)rows * sizeof(T), &w);
        if (s != MG_OK) return s;
        T *part = (T *)w; /* one partial loss per row */
        k_ce_rows<T><<<cu_grid_rows(rows), t, t * sizeof(T), c->stream>>>(
            (const T *)a->in[0].data, labels, lt, part, rows, 0, cl,
            ce_ignore{0, 0}, c->flag);
        s = cu_check_launch(a, "cross_entropy rows");
        if (s != MG_OK) return s;
        k_mean_of<T><<<1, 1024, 1024 * sizeof(T), c->stream>>>(
            part, (const T *)NULL, (T *)a->out.data, rows, (const T *)NULL);
    });
    s = cu_check_launch(a, "cross_entropy mean");
    return s != MG_OK ? s : flag_check(c, a, labels, lt, cl);
}

mg_status cu_cross_entropy_grad(cu_ctx *c, const mg_kargs *a) {
    int64_t rows = 0, cl = 0;
    mg_status s = mg_ce_dims_setup(a, 1, &rows, &cl);
    if (s == MG_OK) s = flag_reset(c, a);
    if (s != MG_OK) return s;
    const void *labels = a->in[2].data;
    const mg_dtype lt = a->in[2].d.dtype;
    const unsigned t = cu_row_threads(cl);
    CU_BY_FLOAT(
        a, a->out.d.dtype,
        (k_ce_grad_rows<T><<<cu_grid_rows(rows), t, t * sizeof(T), c->stream>>>(
            (const T *)a->in[1].data, (T *)a->out.data,
            (const T *)a->in[0].data, labels, lt, rows, 0, cl, rows,
            ce_ignore{0, 0}, (const T *)NULL, c->flag)));
    s = cu_check_launch(a, "cross_entropy_grad");
    return s != MG_OK ? s : flag_check(c, a, labels, lt, cl);
}

mg_status cu_mse(cu_ctx *c, const mg_kargs *a) {
    const int64_t n = mgi_tdesc_numel(&a->in[0].d);
    CU_BY_FLOAT(a, a->out.d.dtype,
                (k_mean_of<T><<<1, 1024, 1024 * sizeof(T), c->stream>>>(
                    (const T *)a->in[0].data, (const T *)a->in[1].data,
                    (T *)a->out.data, n, (const T *)NULL)));
    return MG_OK;
}

/* ---- linear_cross_entropy ------------------------------------------------
 * As the CPU kernels (cpu_loss.c): per chunk of m rows from row r0, one
 * GEMM makes the logits [m, V] in the workspace; the forward takes each
 * row's loss from it into part[r0 + r], the gradient turns it in place
 * into the rows' logits gradient and makes dh (rows r0.. of the output)
 * and adds dw (chunk 0 writes it) with two more GEMMs. Everything is on
 * one stream in chunk order, with no atomics on floats, so the bits are
 * the same on every run. */

size_t cu_linear_ce_workspace(const mg_kargs *a) {
    const int grad = a->op == MG_OP_LINEAR_CROSS_ENTROPY_GRAD;
    const mg_tdesc *h = &a->in[grad].d, *w = &a->in[grad + 1].d;
    if (h->ndim != 2 || w->ndim != 2) return 0;
    return mg_lce_op_workspace(h->shape[0], w->shape[0], a->attrs->chunk_rows,
                               mg_dtype_size(h->dtype), !grad,
                               a->attrs->has_ignore_index, a->n_in > 3);
}

template <typename T>
static mg_status lce_forward(cu_ctx *c, const mg_kargs *a,
                             const mg_lce_dims *d) {
    const int64_t n = d->rows, v = d->vocab, dim = d->dim;
    const T *h = (const T *)a->in[0].data, *w = (const T *)a->in[1].data;
    const void *labels = a->in[2].data;
    const mg_dtype lt = a->in[2].d.dtype;
    /* given logits (input 3): read in place of chunks made here */
    const T *given = a->n_in > 3 ? (const T *)a->in[3].data : NULL;
    T *lg = given ? NULL : (T *)a->work;
    T *part = given ? (T *)a->work : lg + d->chunk * v;
    const ce_ignore ig = {a->attrs->has_ignore_index, a->attrs->ignore_index};
    T *kept = NULL; /* with an ignore_index: the mean's divisor, after part */
    if (ig.on) {
        kept = part + n;
        k_kept_rows<T><<<1, 1024, 1024 * sizeof(T), c->stream>>>(labels, lt, n,
                                                                 ig, kept);
        mg_status s = cu_check_launch(a, "linear_cross_entropy kept rows");
        if (s != MG_OK) return s;
    }
    const unsigned t = cu_row_threads(v);
    for (int64_t r0 = 0; r0 < n; r0 += d->chunk) {
        const int64_t m = n - r0 < d->chunk ? n - r0 : d->chunk;
        mg_status s = MG_OK;
        if (!given)
            s = cu_gemm<T>(c, a, 0, 1, m, v, dim, h + r0 * dim, dim, 0, w, dim,
                           0, (T)0, lg, v, 0, 1);
        if (s != MG_OK) return s;
        k_ce_rows<T><<<cu_grid_rows(m), t, t * sizeof(T), c->stream>>>(
            given ? given + r0 * v : lg, labels, lt, part + r0, m, r0, v, ig,
            c->flag);
        s = cu_check_launch(a, "linear_cross_entropy rows");
        if (s != MG_OK) return s;
    }
    k_mean_of<T><<<1, 1024, 1024 * sizeof(T), c->stream>>>(
        part, (const T *)NULL, (T *)a->out.data, n, (const T *)kept);
    return cu_check_launch(a, "linear_cross_entropy mean");
}

template <typename T>
static mg_status lce_backward(cu_ctx *c, const mg_kargs *a,
                              const mg_lce_dims *d) {
    const int64_t n = d->rows, v = d->vocab, dim = d->dim;
    const T *gy = (const T *)a->in[0].data, *h = (const T *)a->in[1].data,
            *w = (const T *)a->in[2].data;
    const void *labels = a->in[3].data;
    const mg_dtype lt = a->in[3].d.dtype;
    T *lg = (T *)a->work, *dh = (T *)a->out.data, *dw = dh + n * dim;
    const ce_ignore ig = {a->attrs->has_ignore_index, a->attrs->ignore_index};
    T *kept = NULL; /* with an ignore_index: after the logits chunk */
    if (ig.on) {
        kept = lg + d->chunk * v;
        k_kept_rows<T><<<1, 1024, 1024 * sizeof(T), c->stream>>>(labels, lt, n,
                                                                 ig, kept);
        mg_status s = cu_check_launch(a, "linear_cross_entropy_grad kept rows");
        if (s != MG_OK) return s;
    }
    const unsigned t = cu_row_threads(v);
    for (int64_t r0 = 0; r0 < n; r0 += d->chunk) {
        const int64_t m = n - r0 < d->chunk ? n - r0 : d->chunk;
        mg_status s = cu_gemm<T>(c, a, 0, 1, m, v, dim, h + r0 * dim, dim, 0, w,
                                 dim, 0, (T)0, lg, v, 0, 1);
        if (s != MG_OK) return s;
        k_ce_grad_rows<T><<<cu_grid_rows(m), t, t * sizeof(T), c->stream>>>(
            lg, lg, gy, labels, lt, m, r0, v, n, ig, kept, c->flag);
        s = cu_check_launch(a, "linear_cross_entropy_grad rows");
        /* dh rows r0.. = dlogits w; dw (+)= dlogits^T h rows r0.. */
        if (s == MG_OK)
            s = cu_gemm<T>(c, a, 0, 0, m, dim, v, lg, v, 0, w, dim, 0, (T)0,
                           dh + r0 * dim, dim, 0, 1);
        if (s == MG_OK)
            s = cu_gemm<T>(c, a, 1, 0, v, dim, m, lg, v, 0, h + r0 * dim, dim,
                           0, r0 == 0 ? (T)0 : (T)1, dw, dim, 0, 1);
        if (s != MG_OK) return s;
    }
    return MG_OK;
}

/* linear_cross_entropy (grad 0) or its gradient (grad 1): the labels are
 * input 2 + grad, checked on the device as the chunks run. */
static mg_status lce_run(cu_ctx *c, const mg_kargs *a, int grad) {
    mg_lce_dims d = {0}; /* set by setup; zero for -O3 flow analysis */
    mg_status s = mg_lce_dims_setup(a, grad, !grad, &d);
    if (s == MG_OK) s = flag_reset(c, a);
    if (s != MG_OK) return s;
    if (grad) CU_BY_FLOAT(a, a->out.d.dtype, s = lce_backward<T>(c, a, &d));
    else CU_BY_FLOAT(a, a->out.d.dtype, s = lce_forward<T>(c, a, &d));
    const mg_kbuf *labels = &a->in[2 + grad];
    return s != MG_OK
               ? s
               : flag_check(c, a, labels->data, labels->d.dtype, d.vocab);
}

mg_status cu_linear_cross_entropy(cu_ctx *c, const mg_kargs *a) {
    return lce_run(c, a, 0);
}

mg_status cu_linear_cross_entropy_grad(cu_ctx *c, const mg_kargs *a) {
    return lce_run(c, a, 1);
}
