/*
 * cpu_attention.c - the fused attention op and its backward op (tiled, with
 * OpenBLAS GEMMs for the tiles; the loops are in cpu_attention_impl.h), and
 * causal_mask: over the last two axes [L1, L2] of x, entries above the
 * diagonal (column j > row i) take the fill value; the rest are copied.
 */
#include "cpu_kernels.h"
#include "cpu_vmath.h"

#include "common/attn_tiles.h"

#include <cblas.h>
#include <limits.h>
#include <tgmath.h>

/* x[j] = exp(x[j] - m) over a scores row: float32 through the vector
 * routines (the weights' exp was most of the kernel's own time), float64
 * one value at a time. */
static void attn_exp_shift_f32(float *x, int n, float m) {
    for (int j = 0; j < n; j++) x[j] -= m;
    mgi_cpu_vexpf(x, x, n);
}

static void attn_exp_shift_f64(double *x, int n, double m) {
    for (int j = 0; j < n; j++) x[j] = exp(x[j] - m);
}

#define T float
#define SUF f32
#define GEMM cblas_sgemm
#include "cpu_attention_impl.h"
#undef T
#undef SUF
#undef GEMM
#define T double
#define SUF f64
#define GEMM cblas_dgemm
#include "cpu_attention_impl.h"
#undef T
#undef SUF
#undef GEMM

/* grad: 0 the forward, 1 attention_grad, 2 attention_grad_mask */
static mg_status attention(const mg_kargs *ka, int grad) {
    mg_attn_dims d;
    mg_status s = mg_attn_dims_setup(ka, grad ? 5 : 3, &d);
    if (s != MG_OK) return s;
    if (d.lq > INT_MAX || d.lk > INT_MAX || d.d > INT_MAX - 1 ||
        d.dv > INT_MAX - 1)
        return mg_kernel_fail(ka, MG_ERR_UNSUPPORTED,
                              "attention dims exceed the BLAS int range");
    switch (ka->in[0].d.dtype) {
    case MG_F32: return attn_run_f32(ka, &d, grad);
    case MG_F64: return attn_run_f64(ka, &d, grad);
    default: return mgi_cpu_bad_dtype(ka, ka->in[0].d.dtype);
    }
}

mg_status mgi_cpu_attention(const mg_kargs *ka) { return attention(ka, 0); }

mg_status mgi_cpu_attention_grad(const mg_kargs *ka) {
    return attention(ka, 1);
}

mg_status mgi_cpu_attention_grad_mask(const mg_kargs *ka) {
    return attention(ka, 2);
}

#define MASK_DEF(T, SUF)                                                       \
    static mg_status causal_mask_##SUF(const T *x, T *y, int64_t batch,        \
                                       int64_t rows, int64_t cols,             \
                                       double value) {                         \
        const T v = (T)value;                                                  \
        for (int64_t b = 0; b < batch; b++)                                    \
            for (int64_t i = 0; i < rows; i++, x += cols, y += cols)           \
                for (int64_t j = 0; j < cols; j++) y[j] = j > i ? v : x[j];    \
        return MG_OK;                                                          \
    }
MG_CPU_FLOAT_TYPES(MASK_DEF)

mg_status mgi_cpu_causal_mask(const mg_kargs *ka) {
    const mg_tdesc *d = &ka->out.d;
    if (d->ndim < 2)
        return mg_kernel_fail(ka, MG_ERR_SHAPE,
                              "causal_mask needs 2 or more dims");
    const int64_t rows = d->shape[d->ndim - 2], cols = d->shape[d->ndim - 1];
    return MG_CPU_BY_DTYPE(ka, d->dtype, causal_mask, ka->in[0].data,
                           ka->out.data, mgi_tdesc_numel(d) / (rows * cols),
                           rows, cols, ka->attrs->alpha);
}
