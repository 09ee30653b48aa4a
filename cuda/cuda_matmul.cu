/*
 * cuda_matmul.cu - matmul and batched matmul through cuBLAS (row-major by
 * the transpose trick: a row-major Y = A B is the column-major Y^T = B^T
 * A^T); cu_gemm also serves the convolutions.
 */
#include "cuda_internal.h"

#include <limits.h>

/* ---- GEMM -------------------------------------------------------------------
 */

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
mg_status cu_gemm(cu_ctx *c, const mg_kargs *a, int ta, int tb, int64_t M,
                  int64_t N, int64_t K, const T *A, int64_t lda, int64_t sa,
                  const T *B, int64_t ldb, int64_t sb, T beta, T *Y,
                  int64_t ldy, int64_t sy, int64_t batch) {
    if (M > INT_MAX || N > INT_MAX || K > INT_MAX || lda > INT_MAX ||
        ldb > INT_MAX || ldy > INT_MAX || batch > INT_MAX)
        return mg_kernel_fail(a, MG_ERR_UNSUPPORTED,
                              "GEMM dims exceed the cuBLAS int range");
    if (M == 0 || N == 0 || batch == 0) return MG_OK;
    const T one = 1;
    return cu_check_blas(a,
                         gemm_sb(c->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                 ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)N, (int)M,
                                 (int)K, &one, B, (int)ldb, sb, A, (int)lda, sa,
                                 &beta, Y, (int)ldy, sy, (int)batch),
                         "gemm");
}

mg_status cu_matmul(cu_ctx *c, const mg_kargs *a) {
    const mg_tdesc *da = &a->in[0].d, *db = &a->in[1].d, *dy = &a->out.d;
    if (da->ndim < 2 || db->ndim < 2 || dy->ndim < 2)
        return mg_kernel_fail(a, MG_ERR_SHAPE,
                              "matmul needs operands of 2 or more "
                              "dims, got %d and %d",
                              da->ndim, db->ndim);
    const int ta = a->attrs->trans_a, tb = a->attrs->trans_b;
    const int64_t m = dy->shape[dy->ndim - 2], n = dy->shape[dy->ndim - 1];
    const int64_t k = da->shape[da->ndim - (ta ? 2 : 1)];
    const int64_t lda = da->shape[da->ndim - 1], ldb = db->shape[db->ndim - 1];
    const int64_t batch = (m * n) != 0 ? mgi_tdesc_numel(dy) / (m * n) : 0;
    const int64_t sa = da->ndim == 2 ? 0 : m * k,
                  sb = db->ndim == 2 ? 0 : k * n;
    if (k == 0)
        return cu_check(
            a, cudaMemsetAsync(a->out.data, 0, mgi_tdesc_nbytes(dy), c->stream),
            "matmul zero fill");
    CU_BY_FLOAT(a, dy->dtype,
                return cu_gemm<T>(c, a, ta, tb, m, n, k,
                                  (const T *)a->in[0].data, lda, sa,
                                  (const T *)a->in[1].data, ldb, sb, (T)0,
                                  (T *)a->out.data, n, m * n, batch));
    return MG_OK;
}

template mg_status cu_gemm<float>(cu_ctx *, const mg_kargs *, int, int, int64_t,
                                  int64_t, int64_t, const float *, int64_t,
                                  int64_t, const float *, int64_t, int64_t,
                                  float, float *, int64_t, int64_t, int64_t);
template mg_status cu_gemm<double>(cu_ctx *, const mg_kargs *, int, int,
                                   int64_t, int64_t, int64_t, const double *,
                                   int64_t, int64_t, const double *, int64_t,
                                   int64_t, double, double *, int64_t, int64_t,
                                   int64_t);
