/*
 * cpu_conv.c - conv2d and its two gradient ops by im2col and BLAS GEMM.
 * For each (batch item, group) the input windows are unfolded into a
 * column matrix [C/groups * KH * KW, OH * OW], so that
 *   conv2d:             y  = W  . col(x)
 *   conv2d_grad_input:  dx = col2im(W^T . gy)
 *   conv2d_grad_weight: dW += gy . col(x)^T   (summed over the batch)
 * The column matrix is the op's workspace, lent from the pool (see
 * docs/ops.md); a 1x1 kernel with stride 1 and no padding needs none, since
 * there x already is its own column matrix. Where the library has oneDNN,
 * f32 convolutions go to cpu_onednn.c instead, and this is the fallback.
 */
#include "cpu_kernels.h"

#include <cblas.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

enum conv_mode { CONV_FORWARD, CONV_GRAD_INPUT, CONV_GRAD_WEIGHT };

/* col[(c*KH + i)*KW + j][oy*OW + ox] = x[c][oy*SH - PH + i*DH][ox*SW - PW +
 * j*DW], or 0 in the padding; col2im adds the entries back into x. Both walk
 * col in order. For each (c, i, j) the output columns whose input column is
 * inside x form one range [lo, hi), computed once, so the inner loops have
 * no bounds tests and a stride-1 row is a memcpy: these loops, not the
 * GEMMs, were most of a small-channel ResNet's time. */
static void conv_valid_cols(const mg_conv_dims *d, int j, int64_t *lo,
                            int64_t *hi) {
    const int64_t off = (int64_t)j * d->dw - d->pw; /* ix = ox * sw + off */
    int64_t a = off >= 0 ? 0 : (-off + d->sw - 1) / d->sw;
    int64_t b = d->w - off <= 0 ? 0 : (d->w - off + d->sw - 1) / d->sw;
    if (b > d->ow) b = d->ow;
    if (a > b) a = b;
    *lo = a;
    *hi = b;
}

/* The walk im2col and col2im share, over col in order: for each (c, i, j)
 * its valid output columns [lo, hi) and x's column offset off, then for
 * each output row oy the input row iy (inside x or not); the statements
 * given last run there, col at that row's OW entries. A macro, not a
 * function taking the row's work, so that the inner loops compile as they
 * did written out. */
#define CONV_COL_ROWS(d, col, ...)                                             \
    for (int64_t c = 0; c < (d)->cg; c++)                                      \
        for (int i = 0; i < (d)->kh; i++)                                      \
            for (int j = 0; j < (d)->kw; j++) {                                \
                int64_t lo, hi;                                                \
                conv_valid_cols(d, j, &lo, &hi);                               \
                const int64_t off = (int64_t)j * (d)->dw - (d)->pw;            \
                for (int64_t oy = 0; oy < (d)->oh; oy++, col += (d)->ow) {     \
                    const int64_t iy =                                         \
                        oy * (d)->sh - (d)->ph + (int64_t)i * (d)->dh;         \
                    __VA_ARGS__                                                \
                }                                                              \
            }

#define CONV_DEF(T, SUF, GEMM)                                                 \
    static void im2col_##SUF(const T *restrict x, T *restrict col,             \
                             const mg_conv_dims *d) {                          \
        CONV_COL_ROWS(d, col, {                                                \
            if (iy < 0 || iy >= d->h || lo == hi) {                            \
                memset(col, 0, (size_t)d->ow * sizeof(T));                     \
                continue;                                                      \
            }                                                                  \
            const T *row = x + (c * d->h + iy) * d->w + off;                   \
            if (lo > 0) memset(col, 0, (size_t)lo * sizeof(T));                \
            if (d->sw == 1)                                                    \
                memcpy(col + lo, row + lo, (size_t)(hi - lo) * sizeof(T));     \
            else                                                               \
                for (int64_t ox = lo; ox < hi; ox++)                           \
                    col[ox] = row[ox * d->sw];                                 \
            if (hi < d->ow)                                                    \
                memset(col + hi, 0, (size_t)(d->ow - hi) * sizeof(T));         \
        })                                                                     \
    }                                                                          \
    static void col2im_##SUF(const T *restrict col, T *restrict x,             \
                             const mg_conv_dims *d) {                          \
        CONV_COL_ROWS(d, col, {                                                \
            if (iy < 0 || iy >= d->h) continue;                                \
            T *row = x + (c * d->h + iy) * d->w + off;                         \
            if (d->sw == 1) /* unit stride: vectorises */                      \
                for (int64_t ox = lo; ox < hi; ox++) row[ox] += col[ox];       \
            else                                                               \
                for (int64_t ox = lo; ox < hi; ox++)                           \
                    row[ox * d->sw] += col[ox];                                \
        })                                                                     \
    }                                                                          \
    /* (a, b) are (x, w), (gy, w) or (gy, x) by mode; out is y, dx or dw. */   \
    static mg_status conv_##SUF(const T *a, const T *b, T *out, T *col,        \
                                const mg_conv_dims *d, enum conv_mode mode) {  \
        const int64_t xs = d->cg * d->h * d->w, ys = (int64_t)d->m * d->p;     \
        const int64_t ws = (int64_t)d->m * d->k;                               \
        const int64_t nx = d->n * d->c * d->h * d->w;                          \
        if (mode == CONV_GRAD_INPUT) memset(out, 0, (size_t)nx * sizeof(T));   \
        if (mode == CONV_GRAD_WEIGHT)                                          \
            memset(out, 0, (size_t)(ws * d->groups) * sizeof(T));              \
        for (int64_t n = 0; n < d->n; n++)                                     \
            for (int64_t g = 0; g < d->groups; g++) {                          \
                const int64_t e = n * d->groups + g; /* (n, g) block */        \
                switch (mode) {                                                \
                case CONV_FORWARD: {                                           \
                    const T *cx = d->direct ? a + e * xs : col;                \
                    if (!d->direct) im2col_##SUF(a + e * xs, col, d);          \
                    GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, d->m,      \
                         d->p, d->k, 1, b + g * ws, d->k, cx, d->p, 0,         \
                         out + e * ys, d->p);                                  \
                    break;                                                     \
                }                                                              \
                case CONV_GRAD_INPUT: {                                        \
                    T *cx = d->direct ? out + e * xs : col;                    \
                    GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, d->k, d->p,  \
                         d->m, 1, b + g * ws, d->k, a + e * ys, d->p, 0, cx,   \
                         d->p);                                                \
                    if (!d->direct) col2im_##SUF(col, out + e * xs, d);        \
                    break;                                                     \
                }                                                              \
                case CONV_GRAD_WEIGHT: {                                       \
                    const T *cx = d->direct ? b + e * xs : col;                \
                    if (!d->direct) im2col_##SUF(b + e * xs, col, d);          \
                    GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, d->m, d->k,  \
                         d->p, 1, a + e * ys, d->p, cx, d->p, 1, out + g * ws, \
                         d->k);                                                \
                    break;                                                     \
                }                                                              \
                }                                                              \
            }                                                                  \
        return MG_OK;                                                          \
    }
CONV_DEF(float, f32, cblas_sgemm)
CONV_DEF(double, f64, cblas_dgemm)

/* The shared geometry of a->op (kernel_shared.h), whose GEMM sizes BLAS
 * takes as int. */
static mg_status conv_setup(const mg_kargs *ka, mg_conv_dims *d) {
    mg_status s = mg_conv_dims_of_op(ka, d);
    if (s != MG_OK) return s;
    if (d->k > INT_MAX || d->p > INT_MAX || d->m > INT_MAX)
        return mg_kernel_fail(ka, MG_ERR_UNSUPPORTED,
                              "conv2d GEMM sizes exceed the BLAS int range");
    return MG_OK;
}

/* One group's im2col columns of one sample; none when x is its own. */
static size_t conv_cols_bytes(const mg_conv_dims *d, mg_dtype dt) {
    return d->direct ? 0 : (size_t)d->k * (size_t)d->p * mg_dtype_size(dt);
}

size_t mgi_cpu_conv2d_workspace(const mg_kargs *ka) {
    mg_conv_dims d = {0};
    if (conv_setup(ka, &d) != MG_OK) return 0; /* the kernel will fail */
    return conv_cols_bytes(&d, ka->out.d.dtype);
}

static mg_status conv_run(const mg_kargs *ka, enum conv_mode mode) {
    mg_conv_dims d = {0};
    mg_status s = conv_setup(ka, &d);
    if (s != MG_OK) return s;
    const mg_dtype dt = ka->out.d.dtype;
    /* The im2col buffer is the workspace the executor lends from the pool
     * (ops_conv.c sizes it), so plans count it in their peak. */
    if (ka->work_bytes < conv_cols_bytes(&d, dt))
        return mg_kernel_fail(ka, MG_ERR_INTERNAL,
                              "im2col needs %zu bytes of workspace, got %zu",
                              conv_cols_bytes(&d, dt), ka->work_bytes);
    return MG_CPU_BY_DTYPE(ka, dt, conv, ka->in[0].data, ka->in[1].data,
                           ka->out.data, d.direct ? NULL : ka->work, &d, mode);
}

mg_status mgi_cpu_conv2d(const mg_kargs *ka) {
    return conv_run(ka, CONV_FORWARD);
}

mg_status mgi_cpu_conv2d_grad_input(const mg_kargs *ka) {
    return conv_run(ka, CONV_GRAD_INPUT);
}

mg_status mgi_cpu_conv2d_grad_weight(const mg_kargs *ka) {
    return conv_run(ka, CONV_GRAD_WEIGHT);
}
