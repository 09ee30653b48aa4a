/*
 * cpu_softmax.c - softmax and log_softmax along one axis, plus the strided
 * row helpers that the cross-entropy kernels reuse. Every row subtracts its
 * maximum first, so exp never overflows.
 */
#include "cpu_kernels.h"

#include <tgmath.h>

#define ROW_DEF(T, SUF)                                                        \
    static T row_max_##SUF(const T *x, int64_t n, int64_t stride) {            \
        T m = x[0];                                                            \
        for (int64_t i = 1; i < n; i++)                                        \
            if (x[i * stride] > m) m = x[i * stride];                          \
        return m;                                                              \
    }                                                                          \
    /* sum of exp(x - m), accumulated in T in index order */                   \
    static T row_expsum_##SUF(const T *x, int64_t n, int64_t stride, T m) {    \
        T s = 0;                                                               \
        for (int64_t i = 0; i < n; i++) s += exp(x[i * stride] - m);           \
        return s;                                                              \
    }                                                                          \
    /* logsumexp(x) - v as (m - v) + log s: for large logits that keeps        \
     * the digits m + log s - v would round away in float. */                  \
    T mgi_cpu_logsumexp_minus_##SUF(const T *x, int64_t n, int64_t stride,     \
                                    T v) {                                     \
        const T m = row_max_##SUF(x, n, stride);                               \
        return (m - v) + log(row_expsum_##SUF(x, n, stride, m));               \
    }                                                                          \
    void mgi_cpu_softmax_row_##SUF(const T *x, T *y, int64_t n,                \
                                   int64_t stride, int log_out) {              \
        const T m = row_max_##SUF(x, n, stride);                               \
        if (log_out) {                                                         \
            /* (x - m) - log s keeps the small differences that                \
             * x - logsumexp would round away */                               \
            const T ls = log(row_expsum_##SUF(x, n, stride, m));               \
            for (int64_t i = 0; i < n; i++)                                    \
                y[i * stride] = (x[i * stride] - m) - ls;                      \
            return;                                                            \
        }                                                                      \
        T s = 0;                                                               \
        for (int64_t i = 0; i < n; i++) {                                      \
            const T e = exp(x[i * stride] - m);                                \
            y[i * stride] = e;                                                 \
            s += e;                                                            \
        }                                                                      \
        for (int64_t i = 0; i < n; i++) y[i * stride] /= s;                    \
    }                                                                          \
    /* The axis splits the tensor into [outer, n, inner]; each (outer,         \
     * inner) pair is one row of n elements `inner` apart. */                  \
    static mg_status softmax_##SUF(const T *x, T *y, int64_t outer, int64_t n, \
                                   int64_t inner, int log_out) {               \
        /* rows are independent: each is computed whole by one thread */       \
        const int64_t rows = outer * inner;                                    \
        MG_CPU_PAR_LOOP(rows *n, for (int64_t r = 0; r < rows; r++), {         \
            const int64_t base = (r / inner) * n * inner + r % inner;          \
            mgi_cpu_softmax_row_##SUF(x + base, y + base, n, inner, log_out);  \
        });                                                                    \
        return MG_OK;                                                          \
    }
MG_CPU_FLOAT_TYPES(ROW_DEF)

static mg_status softmax(const mg_kargs *ka, int log_out) {
    mg_softmax_dims d = {0};
    mg_status s = mg_softmax_dims_setup(ka, &d);
    if (s != MG_OK) return s;
    return MG_CPU_BY_DTYPE(ka, ka->out.d.dtype, softmax, ka->in[0].data,
                           ka->out.data, d.outer, d.n, d.inner, log_out);
}

mg_status mgi_cpu_softmax(const mg_kargs *ka) { return softmax(ka, 0); }

mg_status mgi_cpu_log_softmax(const mg_kargs *ka) { return softmax(ka, 1); }
