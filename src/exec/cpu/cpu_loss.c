/*
 * cpu_loss.c - the scalar losses (cross-entropy over int labels, mean
 * squared error), the fused gradient of cross-entropy, and the chunked
 * linear + cross-entropy pair (its logits chunks through OpenBLAS GEMM,
 * as cpu_matmul.c makes matmul's).
 */
#include "cpu_kernels.h"

#include <cblas.h>

/* loss = mean over rows of logsumexp(row) - row[label];
 * grad = (softmax(row) - onehot(label)) * gy / rows. */
#define LOSS_DEF(T, SUF)                                                       \
    static mg_status cross_entropy_##SUF(const T *x, const void *labels,       \
                                         mg_dtype lt, T *y, int64_t rows,      \
                                         int64_t c) {                          \
        /* rows summed with the fixed split (cpu_kernels.h) */                 \
        const int64_t ch = mgi_split_chunk(rows, 64);                          \
        const int64_t nch = (rows + ch - 1) / ch;                              \
        T part[MG_SPLIT_MAX];                                                  \
        MG_CPU_PAR_LOOP(rows *c, for (int64_t k = 0; k < nch; k++), {          \
            const int64_t hi = (k + 1) * ch < rows ? (k + 1) * ch : rows;      \
            T s = 0;                                                           \
            for (int64_t r = k * ch; r < hi; r++)                              \
                s += mgi_cpu_logsumexp_minus_##SUF(                            \
                    x + r * c, c, 1, x[r * c + mg_index_at(labels, lt, r)]);   \
            part[k] = s;                                                       \
        });                                                                    \
        T s = 0;                                                               \
        for (int64_t k = 0; k < nch; k++) s += part[k];                        \
        y[0] = s / (T)rows;                                                    \
        return MG_OK;                                                          \
    }                                                                          \
    static mg_status cross_entropy_grad_##SUF(const T *gy, const T *x,         \
                                              const void *labels, mg_dtype lt, \
                                              T *g, int64_t rows, int64_t c) { \
        const T scale = gy[0] / (T)rows;                                       \
        MG_CPU_PAR_LOOP(rows *c, for (int64_t r = 0; r < rows; r++), {         \
            T *gr = g + r * c;                                                 \
            mgi_cpu_softmax_row_##SUF(x + r * c, gr, c, 1, 0);                 \
            gr[mg_index_at(labels, lt, r)] -= 1;                               \
            for (int64_t i = 0; i < c; i++) gr[i] *= scale;                    \
        });                                                                    \
        return MG_OK;                                                          \
    }                                                                          \
    static mg_status mse_##SUF(const T *p, const T *t, T *y, int64_t n) {      \
        const int64_t ch = mgi_split_chunk(n, 16384);                          \
        const int64_t nch = (n + ch - 1) / ch;                                 \
        T part[MG_SPLIT_MAX];                                                  \
        MG_CPU_PAR_LOOP(n, for (int64_t k = 0; k < nch; k++), {                \
            const int64_t hi = (k + 1) * ch < n ? (k + 1) * ch : n;            \
            T s = 0;                                                           \
            for (int64_t i = k * ch; i < hi; i++) {                            \
                const T e = p[i] - t[i];                                       \
                s += e * e;                                                    \
            }                                                                  \
            part[k] = s;                                                       \
        });                                                                    \
        T s = 0;                                                               \
        for (int64_t k = 0; k < nch; k++) s += part[k];                        \
        y[0] = s / (T)n;                                                       \
        return MG_OK;                                                          \
    }
MG_CPU_FLOAT_TYPES(LOSS_DEF)

/* Logits [N, C] and labels [N] from input slots `lo` and `lo + 1`. */
static mg_status ce_dims(const mg_kargs *ka, int lo, int64_t *rows,
                         int64_t *classes) {
    mg_status s = mg_ce_dims_setup(ka, lo, rows, classes);
    if (s != MG_OK) return s;
    /* Both cross-entropy kernels index logits with the labels, so both
     * check every label before reading anything. */
    return mg_kernel_check_indices(ka, ka->in[lo + 1].data,
                                   ka->in[lo + 1].d.dtype, *rows, *classes,
                                   "label", "row");
}

mg_status mgi_cpu_cross_entropy(const mg_kargs *ka) {
    int64_t rows = 0, c = 0;
    mg_status s = ce_dims(ka, 0, &rows, &c);
    if (s != MG_OK) return s;
    return MG_CPU_BY_DTYPE(ka, ka->out.d.dtype, cross_entropy, ka->in[0].data,
                           ka->in[1].data, ka->in[1].d.dtype, ka->out.data,
                           rows, c);
}

mg_status mgi_cpu_cross_entropy_grad(const mg_kargs *ka) {
    int64_t rows = 0, c = 0;
    mg_status s = ce_dims(ka, 1, &rows, &c);
    if (s != MG_OK) return s;
    return MG_CPU_BY_DTYPE(ka, ka->out.d.dtype, cross_entropy_grad,
                           ka->in[0].data, ka->in[1].data, ka->in[2].data,
                           ka->in[2].d.dtype, ka->out.data, rows, c);
}

mg_status mgi_cpu_mse(const mg_kargs *ka) {
    return MG_CPU_BY_DTYPE(ka, ka->out.d.dtype, mse, ka->in[0].data,
                           ka->in[1].data, ka->out.data,
                           mgi_tdesc_numel(&ka->in[0].d));
}

/* ---- linear_cross_entropy ------------------------------------------------
 * Chunk k holds the logits of rows [k c, k c + m) (m = c but for the last):
 * L = h_k w^T, [m, V], made by one GEMM into the workspace. The forward
 * takes each row's logsumexp(row) - row[label] from it; the gradient turns
 * L in place into (softmax(L) - onehot) * gy / N, the rows' logits
 * gradient exactly as cross_entropy_grad computes it, then
 *   dh_k  = L w      (rows k of the output),
 *   dw   += L^T h_k  (chunk 0 writes it, the later ones add, in order),
 * so every element of dw is summed over the chunks in the same order on
 * every run, and the result does not depend on the thread count beyond
 * what OpenBLAS's own GEMM does (matmul shares that). */
#define LCE_DEF(T, SUF, GEMM)                                                  \
    static mg_status lce_##SUF(const T *h, const T *w, const void *labels,     \
                               mg_dtype lt, const T *given, T *y, T *work,     \
                               const mg_lce_dims *d, const mg_attrs *at,       \
                               int64_t kept) {                                 \
        const int64_t n = d->rows, v = d->vocab, dim = d->dim;                 \
        const int ign = at->has_ignore_index;                                  \
        const int64_t ii = at->ignore_index;                                   \
        /* given: the logits, read in place of a chunk made here */           \
        T *chunk = given ? NULL : work;                                        \
        T *row_loss = given ? work : work + d->chunk * v;                      \
        for (int64_t r0 = 0; r0 < n; r0 += d->chunk) {                         \
            const int64_t m = n - r0 < d->chunk ? n - r0 : d->chunk;           \
            const T *lg = given ? given + r0 * v : chunk;                      \
            if (!given)                                                        \
                GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)v,  \
                     (int)dim, 1, h + r0 * dim, (int)dim, w, (int)dim, 0,      \
                     chunk, (int)v);                                           \
            MG_CPU_PAR_LOOP(m *v, for (int64_t r = 0; r < m; r++), {           \
                const T *x = lg + r * v;                                       \
                const int64_t lab = mg_index_at(labels, lt, r0 + r);           \
                row_loss[r0 + r] =                                             \
                    ign && lab == ii                                           \
                        ? (T)0                                                 \
                        : mgi_cpu_logsumexp_minus_##SUF(x, v, 1, x[lab]);      \
            });                                                                \
        }                                                                      \
        /* the rows summed as cross_entropy sums them: the fixed split */      \
        const int64_t ch = mgi_split_chunk(n, 64);                             \
        const int64_t nch = (n + ch - 1) / ch;                                 \
        T s = 0;                                                               \
        for (int64_t k = 0; k < nch; k++) {                                    \
            const int64_t hi = (k + 1) * ch < n ? (k + 1) * ch : n;            \
            T part = 0;                                                        \
            for (int64_t r = k * ch; r < hi; r++) part += row_loss[r];         \
            s += part;                                                         \
        }                                                                      \
        /* every row ignored: 0 / 0, NaN, as PyTorch's mean */                 \
        y[0] = s / (T)kept;                                                    \
        return MG_OK;                                                          \
    }                                                                          \
    static mg_status lce_grad_##SUF(const T *gy, const T *h, const T *w,       \
                                    const void *labels, mg_dtype lt, T *out,   \
                                    T *work, const mg_lce_dims *d,             \
                                    const mg_attrs *at, int64_t kept) {        \
        const int64_t n = d->rows, v = d->vocab, dim = d->dim;                 \
        const int ign = at->has_ignore_index;                                  \
        const int64_t ii = at->ignore_index;                                   \
        /* kept 0: every row is zeroed below and the scale is never used */    \
        const T scale = kept > 0 ? gy[0] / (T)kept : (T)0;                     \
        T *lg = work, *dh = out, *dw = out + n * dim;                          \
        for (int64_t r0 = 0; r0 < n; r0 += d->chunk) {                         \
            const int64_t m = n - r0 < d->chunk ? n - r0 : d->chunk;           \
            GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)v,      \
                 (int)dim, 1, h + r0 * dim, (int)dim, w, (int)dim, 0, lg,      \
                 (int)v);                                                      \
            MG_CPU_PAR_LOOP(m *v, for (int64_t r = 0; r < m; r++), {           \
                T *gr = lg + r * v;                                            \
                const int64_t lab = mg_index_at(labels, lt, r0 + r);           \
                if (ign && lab == ii) {                                        \
                    for (int64_t i = 0; i < v; i++) gr[i] = 0;                 \
                } else {                                                       \
                    mgi_cpu_softmax_row_##SUF(gr, gr, v, 1, 0);                \
                    gr[lab] -= 1;                                              \
                    for (int64_t i = 0; i < v; i++) gr[i] *= scale;            \
                }                                                              \
            });                                                                \
            GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)dim,  \
                 (int)v, 1, lg, (int)v, w, (int)dim, 0, dh + r0 * dim,         \
                 (int)dim);                                                    \
            GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, (int)v, (int)dim,    \
                 (int)m, 1, lg, (int)v, h + r0 * dim, (int)dim,                \
                 r0 == 0 ? 0 : 1, dw, (int)dim);                               \
        }                                                                      \
        return MG_OK;                                                          \
    }
LCE_DEF(float, f32, cblas_sgemm)
LCE_DEF(double, f64, cblas_dgemm)

/* linear_cross_entropy's dims (grad 0) or its gradient's (grad 1), and
 * every label (input 2 + grad) checked before any is read, as
 * cross_entropy does; *kept: the rows not ignored. */
static mg_status lce_setup(const mg_kargs *ka, int grad, mg_lce_dims *d,
                           int64_t *kept) {
    mg_status s = mg_lce_dims_setup(ka, grad, !grad, d);
    const mg_kbuf *labels = &ka->in[2 + grad];
    if (s == MG_OK)
        s = mg_lce_check_labels(ka, labels->data, labels->d.dtype, d->rows,
                                d->vocab, kept);
    return s;
}

mg_status mgi_cpu_linear_cross_entropy(const mg_kargs *ka) {
    mg_lce_dims d = {0}; /* set by setup; zero for -O3 flow analysis */
    int64_t kept = 0;
    mg_status s = lce_setup(ka, 0, &d, &kept);
    if (s != MG_OK) return s;
    const void *given = ka->n_in > 3 ? ka->in[3].data : NULL;
    return MG_CPU_BY_DTYPE(ka, ka->out.d.dtype, lce, ka->in[0].data,
                           ka->in[1].data, ka->in[2].data, ka->in[2].d.dtype,
                           given, ka->out.data, ka->work, &d, ka->attrs, kept);
}

mg_status mgi_cpu_linear_cross_entropy_grad(const mg_kargs *ka) {
    mg_lce_dims d = {0}; /* set by setup; zero for -O3 flow analysis */
    int64_t kept = 0;
    mg_status s = lce_setup(ka, 1, &d, &kept);
    if (s != MG_OK) return s;
    return MG_CPU_BY_DTYPE(ka, ka->out.d.dtype, lce_grad, ka->in[0].data,
                           ka->in[1].data, ka->in[2].data, ka->in[3].data,
                           ka->in[3].d.dtype, ka->out.data, ka->work, &d,
                           ka->attrs, kept);
}
