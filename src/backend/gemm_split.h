/*
 * gemm_split.h - the workspace a plan made for a CUDA device lends cuBLAS
 * on a matmul step, beside what the op's own rule lends: the CUDA row's
 * plan_extra (backend.h, registry.c), which the plan counts
 * (src/rewrite/schedule.c) and the CUDA backend hands to
 * cublasSetWorkspace (cuda/cuda_backend.cu), both from the same shapes.
 *
 * Why: cuBLAS reduces a long inner dimension in parts (split-K) only with
 * a workspace. Without one (0ff4fa0 took cuBLAS's own, which lived outside
 * the pool) a weight gradient such as X^T dY, whose output is a few tiles
 * and whose K is batch x sequence, keeps most of the GPU idle. So a CUDA
 * plan lends room for MG_GEMM_SPLIT_PARTS partial outputs where K is the
 * longest dimension and the output is small enough to leave SMs idle, and
 * nothing elsewhere: the peak rises by at most the largest such lending.
 *
 * The bytes are a function of the shapes alone, so every plan for a device
 * (checkpointed or not) gives cuBLAS the same workspace on the same
 * product, and cuBLAS, which picks its algorithm from the shapes and the
 * workspace size, computes the same bits.
 */
#ifndef MG_GEMM_SPLIT_H
#define MG_GEMM_SPLIT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus /* included by the CUDA backend's C++ too */
extern "C" {
#endif

#include "backend.h" /* mg_kargs */

/* Partial outputs a split product may keep at once. */
#define MG_GEMM_SPLIT_PARTS 4
/* Outputs of more elements than this have a tile for about every SM of an
 * H100 (2^21 elements are 128 tiles of 128 x 128; it has 132 SMs), so
 * they get no workspace. */
#define MG_GEMM_SPLIT_MAX_OUT ((int64_t)1 << 21)

/* The workspace for Y[batch] = op(A) op(B), op(A) [m, k], op(B) [k, n], of
 * elements of elt bytes; 0 where splitting K would not pay. */
static inline size_t mg_gemm_split_bytes(int64_t m, int64_t n, int64_t k,
                                         int64_t batch, size_t elt) {
    if (m <= 0 || n <= 0 || k <= 0 || batch <= 0) return 0;
    if (k <= m || k <= n) return 0;
    if (m > MG_GEMM_SPLIT_MAX_OUT / n || m * n > MG_GEMM_SPLIT_MAX_OUT / batch)
        return 0;
    return (size_t)(MG_GEMM_SPLIT_PARTS * m * n * batch) * elt;
}

/* A CUDA plan's cuBLAS workspace for step a (its descriptors and
 * attributes; no data needed): the matmul's product, 0 for every other op.
 * (Attention and the im2col convolution call cuBLAS too, on batched or
 * column products that get none yet.) The CUDA row's plan_extra. */
static inline size_t mg_gemm_split_step_bytes(const mg_kargs *s) {
    const mg_tdesc *a = &s->in[0].d, *y = &s->out.d;
    if (s->op != MG_OP_MATMUL || a->ndim < 2 || y->ndim < 2) return 0;
    const int64_t m = y->shape[y->ndim - 2], n = y->shape[y->ndim - 1];
    const int64_t k = a->shape[a->ndim - (s->attrs->trans_a ? 2 : 1)];
    int64_t batch = 1;
    for (int i = 0; i < y->ndim - 2; i++) batch *= y->shape[i];
    return mg_gemm_split_bytes(m, n, k, batch, mg_dtype_size(y->dtype));
}

#ifdef __cplusplus
}
#endif

#endif
