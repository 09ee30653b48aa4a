/*
 * cpu_loss.c - the scalar losses (cross-entropy over int labels, mean
 * squared error) and the fused gradient of cross-entropy.
 */
#include "cpu_kernels.h"


/* loss = mean over rows of logsumexp(row) - row[label];
 * grad = (softmax(row) - onehot(label)) * gy / rows. */
#define LOSS_DEF(T, SUF)                                                      \
    static mg_status cross_entropy_##SUF(const T *x, const void *labels,      \
                                         mg_dtype lt, T *y, int64_t rows,     \
                                         int64_t c) {                         \
        T s = 0;                                                              \
        for (int64_t r = 0; r < rows; r++, x += c)                            \
            s += mgi_cpu_logsumexp_minus_##SUF(                               \
                x, c, 1, x[mg_index_at(labels, lt, r)]);                      \
        y[0] = s / (T)rows;                                                   \
        return MG_OK;                                                         \
    }                                                                         \
    static mg_status cross_entropy_grad_##SUF(                                \
        const T *gy, const T *x, const void *labels, mg_dtype lt, T *g,       \
        int64_t rows, int64_t c) {                                            \
        const T scale = gy[0] / (T)rows;                                      \
        for (int64_t r = 0; r < rows; r++, x += c, g += c) {                  \
            mgi_cpu_softmax_row_##SUF(x, g, c, 1, 0);                          \
            g[mg_index_at(labels, lt, r)] -= 1;                               \
            for (int64_t i = 0; i < c; i++) g[i] *= scale;                    \
        }                                                                     \
        return MG_OK;                                                         \
    }                                                                         \
    static mg_status mse_##SUF(const T *p, const T *t, T *y, int64_t n) {     \
        T s = 0;                                                              \
        for (int64_t i = 0; i < n; i++) {                                     \
            const T e = p[i] - t[i];                                          \
            s += e * e;                                                       \
        }                                                                     \
        y[0] = s / (T)n;                                                      \
        return MG_OK;                                                         \
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
