/*
 * cpu_loss.c - the scalar losses (cross-entropy over int labels, mean
 * squared error) and the fused gradient of cross-entropy.
 */
#include "cpu_kernels.h"

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
