/*
 * cpu_matmul.c - matmul through OpenBLAS GEMM, one call per batch entry, so
 * that batched and 2-D products share one code path.
 */
#include "cpu_kernels.h"

#include <cblas.h>
#include <limits.h>

/* Sizes of one GEMM (row-major, as cblas sees them) and the element
 * distance between consecutive batch entries of a, b and y; a 2-D operand
 * shared across the batch has distance 0. */
typedef struct mm_dims {
    int m, n, k, lda, ldb;
    int64_t batch, step_a, step_b, step_y;
    enum CBLAS_TRANSPOSE ta, tb;
} mm_dims;

#define MATMUL_DEF(T, SUF, GEMM)                                               \
    static mg_status matmul_##SUF(const T *a, const T *b, T *y,                \
                                  const mm_dims *d) {                          \
        for (int64_t i = 0; i < d->batch; i++)                                 \
            GEMM(CblasRowMajor, d->ta, d->tb, d->m, d->n, d->k, 1,             \
                 a + i * d->step_a, d->lda, b + i * d->step_b, d->ldb, 0,      \
                 y + i * d->step_y, d->n);                                     \
        return MG_OK;                                                          \
    }
MATMUL_DEF(float, f32, cblas_sgemm)
MATMUL_DEF(double, f64, cblas_dgemm)

mg_status mgi_cpu_matmul(const mg_kargs *ka) {
    const mg_tdesc *da = &ka->in[0].d, *db = &ka->in[1].d, *dy = &ka->out.d;
    if (da->ndim < 2 || db->ndim < 2 || dy->ndim < 2)
        return mg_kernel_fail(ka, MG_ERR_SHAPE,
                              "matmul needs operands of 2 or "
                              "more dims, got %d and %d",
                              da->ndim, db->ndim);
    const int ta = ka->attrs->trans_a, tb = ka->attrs->trans_b;
    const int64_t m = dy->shape[dy->ndim - 2], n = dy->shape[dy->ndim - 1];
    const int64_t k = da->shape[da->ndim - (ta ? 2 : 1)];
    /* cblas takes int sizes; leading dims are the stored row lengths. */
    const int64_t lda = da->shape[da->ndim - 1], ldb = db->shape[db->ndim - 1];
    if (m > INT_MAX || n > INT_MAX || k > INT_MAX || lda > INT_MAX ||
        ldb > INT_MAX)
        return mg_kernel_fail(ka, MG_ERR_UNSUPPORTED,
                              "matmul dims exceed the BLAS int range");
    mm_dims d = {
        .m = (int)m,
        .n = (int)n,
        .k = (int)k,
        .lda = (int)lda,
        .ldb = (int)ldb,
        .batch = mgi_tdesc_numel(dy) / (m * n),
        .step_a = da->ndim == 2 ? 0 : m * k,
        .step_b = db->ndim == 2 ? 0 : k * n,
        .step_y = m * n,
        .ta = ta ? CblasTrans : CblasNoTrans,
        .tb = tb ? CblasTrans : CblasNoTrans,
    };
    return MG_CPU_BY_DTYPE(ka, dy->dtype, matmul, ka->in[0].data,
                           ka->in[1].data, ka->out.data, &d);
}
