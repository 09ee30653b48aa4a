/*
 * cuda_internal.h - private to the CUDA backend (the .cu files in cuda/): the
 * backend context, the kernel signature, CUDA error checks and launch helpers
 * that the kernel files share. Included only by .cu files (C++). What they
 * share with the CPU kernels (failures, layouts, geometry, the elementwise
 * formulas) is in src/backend/kernel_shared.h.
 *
 * Every kernel is deterministic (no floating-point atomics; gathers instead of
 * scatters), so a recomputed op gives the same bits as the original, and
 * checkpointed gradients equal plain ones on the GPU as on the CPU.
 */
#ifndef MG_CUDA_INTERNAL_H
#define MG_CUDA_INTERNAL_H

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "backend/kernel_shared.h" /* shared with the CPU kernels */
#include "common/group_reduce.h"   /* the chunks of group reductions */
extern "C" {
#include "backend_cuda.h"
}

struct cu_dnn; /* cuda_cudnn.cu: the cuDNN handle and its choices */

typedef struct cu_ctx {
    int device;
    cudaStream_t stream;
    cublasHandle_t blas;
    int *flag;          /* device int: first bad row of a label check, or -1 */
    int sync_each_op;   /* MG_CUDA_SYNC=1: synchronise after every op */
    struct cu_dnn *dnn; /* NULL: no cuDNN, convolutions by im2col */
    /* MG_CUDA_GEMM_SPLIT=0: give cuBLAS no workspace even where a CUDA
     * plan lent one (to time what it buys) */
    int gemm_split_off;
} cu_ctx;

typedef mg_status (*cu_kernel_fn)(cu_ctx *c, const mg_kargs *a);

/* Checks a CUDA runtime result / the last launch / a cuBLAS result. */
mg_status cu_check(const mg_kargs *a, cudaError_t e, const char *what);
mg_status cu_check_launch(const mg_kargs *a, const char *what);
mg_status cu_check_blas(const mg_kargs *a, cublasStatus_t e, const char *what);
/* The workspace the executor lent from the pool for this op, in *out;
 * MG_ERR_INTERNAL with a->why set if it is smaller than nbytes (the op
 * table's workspace rule must cover the kernel's workspace query). */
mg_status cu_work(const mg_kargs *a, size_t nbytes, void **out);

#define CU_THREADS 256
/* Blocks for a grid-stride loop over n elements. */
static inline unsigned cu_blocks(int64_t n) {
    int64_t b = (n + CU_THREADS - 1) / CU_THREADS;
    if (b < 1) b = 1;
    if (b > 65535 * 8) b = 65535 * 8;
    return (unsigned)b;
}
static inline unsigned cu_grid_rows(int64_t rows) {
    return (unsigned)(rows < 1 ? 1 : rows > 65535 * 8 ? 65535 * 8 : rows);
}

/* Threads for a block that reduces rows of n elements: a power of two. */
static inline unsigned cu_row_threads(int64_t n) {
    unsigned t = 32;
    while (t < 256 && (int64_t)t < n) t *= 2;
    return t;
}

#define CU_FOR(i, n)                                                           \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);  \
         i += (int64_t)blockDim.x * gridDim.x)

/* Dispatch on a float dtype: the statements run with T defined. */
#define CU_BY_FLOAT(a, dtype, ...)                                             \
    do {                                                                       \
        if ((dtype) == MG_F32) {                                               \
            typedef float T;                                                   \
            __VA_ARGS__;                                                       \
        } else if ((dtype) == MG_F64) {                                        \
            typedef double T;                                                  \
            __VA_ARGS__;                                                       \
        } else {                                                               \
            return mg_kernel_fail((a), MG_ERR_DTYPE,                           \
                                  "the CUDA kernel has no %s version",         \
                                  mg_dtype_name(dtype));                       \
        }                                                                      \
    } while (0)

/* Deterministic block-wide sum (fixed tree order); every thread gets it.
 * sh has blockDim.x entries; blockDim.x is a power of two. */
template <typename T> __device__ T cu_block_sum(T v, T *sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    T r = sh[0];
    __syncthreads();
    return r;
}
template <typename T> __device__ T cu_block_max(T v, T *sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s && sh[threadIdx.x + s] > sh[threadIdx.x])
            sh[threadIdx.x] = sh[threadIdx.x + s];
        __syncthreads();
    }
    T r = sh[0];
    __syncthreads();
    return r;
}

/* A reduction's groups split into chunks (src/common/group_reduce.h): P
 * chunks of L elements (the last one shorter) of each group's cnt. */
struct cu_chunks {
    int64_t P, L, cnt;
};
static inline cu_chunks cu_chunks_of(int64_t P, int64_t cnt) {
    cu_chunks k = {P, (cnt + P - 1) / P, cnt};
    return k;
}

/* The elements of chunk blockIdx.x of group b in the [A, B, C] view, one
 * thread's share: element e is (i, j) = (e / C, e % C), at offset
 * (i * B + b) * C + j. One division per thread, then adds: a 64-bit
 * division per element costs more than its load. */
struct cu_chunk_walk {
    int64_t e, end, i, j, di, dj, c;
    __device__ cu_chunk_walk(const cu_chunks &k, int64_t C) : c(C) {
        const int64_t start = (int64_t)blockIdx.x * k.L;
        end = start + k.L < k.cnt ? start + k.L : k.cnt;
        e = start + threadIdx.x;
        i = e / C;
        j = e % C;
        di = blockDim.x / C;
        dj = blockDim.x % C;
    }
    __device__ bool more() const { return e < end; }
    __device__ void next() {
        e += blockDim.x;
        i += di;
        j += dj;
        if (j >= c) {
            j -= c;
            i++;
        }
    }
    __device__ int64_t at(int64_t B, int64_t b) const {
        return (i * B + b) * c + j;
    }
};

/* Group b's total of its P partial sums, in chunk order (every thread of a
 * block gets the same value). */
__device__ __forceinline__ double
cu_chunks_total(const double *part, const cu_chunks &k, int64_t b) {
    double s = 0;
    for (int64_t q = 0; q < k.P; q++) s += part[b * k.P + q];
    return s;
}

/* Threads of a chunk block: a power of two for cu_block_sum. */
enum { CU_CHUNK_THREADS = 256 };

/* Shared memory for cu_block_* of T (one extern array per kernel file). */
#define CU_SHARED(T, name)                                                     \
    extern __shared__ __align__(16) unsigned char name##_raw[];                \
    T *name = reinterpret_cast<T *>(name##_raw)

/* Shared by the kernel files: */
/* Row-major Y[i] = op(A[i]) op(B[i]) + beta Y[i] for i < batch through
 * cuBLAS (cuda_matmul.cu, for float and double): op(A) is [M, K], op(B) is
 * [K, N]; lda/ldb/ldy are stored row lengths and sa/sb/sy element
 * distances between batch entries (0: shared). */
template <typename T>
mg_status cu_gemm(cu_ctx *c, const mg_kargs *a, int ta, int tb, int64_t M,
                  int64_t N, int64_t K, const T *A, int64_t lda, int64_t sa,
                  const T *B, int64_t ldb, int64_t sb, T beta, T *Y,
                  int64_t ldy, int64_t sy, int64_t batch);
/* dst[base1 + off1(i)] = src[base0 + off0(i)] over the (coalesced)
 * domain of l, by element size (cuda_shape.cu). */
mg_status cu_move(cu_ctx *c, const mg_kargs *a, const void *src, void *dst,
                  mg_layout *l, int64_t base0, int64_t base1);

/* Kernels, by file; each file is named after its op family in src/graph
 * (ops_<family>.c) and src/exec (cpu_<family>.c). */
/* cuda_elementwise.cu: every op of MG_UNARY_OPS / MG_BINARY_OPS, cast */
mg_status cu_unary(cu_ctx *, const mg_kargs *);  /* reads a->op */
mg_status cu_binary(cu_ctx *, const mg_kargs *); /* reads a->op */
mg_status cu_cast(cu_ctx *, const mg_kargs *);
/* cuda_shape.cu */
mg_status cu_fill(cu_ctx *, const mg_kargs *);
mg_status cu_reshape(cu_ctx *, const mg_kargs *);
mg_status cu_permute(cu_ctx *, const mg_kargs *);
/* cuda_reduce.cu */
mg_status cu_sum(cu_ctx *, const mg_kargs *);
mg_status cu_mean(cu_ctx *, const mg_kargs *);
mg_status cu_broadcast_to(cu_ctx *, const mg_kargs *);
/* cuda_slice.cu */
mg_status cu_concat(cu_ctx *, const mg_kargs *);
mg_status cu_slice(cu_ctx *, const mg_kargs *);
mg_status cu_pad(cu_ctx *, const mg_kargs *);
/* cuda_random.cu */
mg_status cu_dropout(cu_ctx *, const mg_kargs *);
/* cuda_softmax.cu */
mg_status cu_softmax(cu_ctx *, const mg_kargs *);
mg_status cu_log_softmax(cu_ctx *, const mg_kargs *);
/* cuda_loss.cu */
mg_status cu_cross_entropy(cu_ctx *, const mg_kargs *);
mg_status cu_cross_entropy_grad(cu_ctx *, const mg_kargs *);
mg_status cu_mse(cu_ctx *, const mg_kargs *);
size_t cu_cross_entropy_workspace(const mg_kargs *);
/* cuda_norm.cu: batchnorm and layernorm share kernels that read a->op */
mg_status cu_norm(cu_ctx *, const mg_kargs *);
mg_status cu_norm_grad_input(cu_ctx *, const mg_kargs *);
mg_status cu_norm_grad_gamma(cu_ctx *, const mg_kargs *);
size_t cu_norm_grad_gamma_workspace(const mg_kargs *);
/* cuda_embedding.cu */
/* Host copy (malloc'd, in *out) of the indices in a->in[1], as their dtype
 * stores them, checked against bound with the CPU's own check and
 * message; the caller frees it. */
mg_status cu_host_indices(cu_ctx *c, const mg_kargs *a, int64_t bound,
                          void **out);
/* The same indices checked against [0, rows) and bucketed by value into
 * the lent workspace: rows + 1 starts, then the positions of each value in
 * order (a stable counting sort), as int64 at *out, so that a kernel can
 * sum each value's terms in position order, as the CPU's scatter does. The
 * workspace must hold rows + 1 + n int64. */
mg_status cu_index_csr(cu_ctx *c, const mg_kargs *a, int64_t rows,
                       int64_t **out);
mg_status cu_embedding(cu_ctx *, const mg_kargs *);
mg_status cu_embedding_grad(cu_ctx *, const mg_kargs *);
size_t cu_embedding_grad_workspace(const mg_kargs *);
/* cuda_compare.cu */
mg_status cu_compare(cu_ctx *, const mg_kargs *); /* reads a->op */
mg_status cu_logical_not(cu_ctx *, const mg_kargs *);
mg_status cu_where(cu_ctx *, const mg_kargs *);
mg_status cu_clamp_op(cu_ctx *, const mg_kargs *);
mg_status cu_clamp_grad_op(cu_ctx *, const mg_kargs *);
/* cuda_gather.cu: gather, index_select and their gradients (read a->op) */
mg_status cu_gather(cu_ctx *, const mg_kargs *);
mg_status cu_gather_grad(cu_ctx *, const mg_kargs *);
size_t cu_index_select_grad_workspace(const mg_kargs *);
/* cuda_scan.cu */
mg_status cu_cumsum(cu_ctx *, const mg_kargs *);
/* cuda_attention.cu */
mg_status cu_causal_mask(cu_ctx *, const mg_kargs *);
mg_status cu_attention(cu_ctx *, const mg_kargs *);
mg_status cu_attention_grad(cu_ctx *, const mg_kargs *);
size_t cu_attention_workspace(const mg_kargs *a);
size_t cu_attention_grad_workspace(const mg_kargs *a);
/* cuda_matmul.cu */
mg_status cu_matmul(cu_ctx *, const mg_kargs *);
/* cuda_conv.cu */
mg_status cu_conv2d(cu_ctx *, const mg_kargs *);
mg_status cu_conv2d_grad_input(cu_ctx *, const mg_kargs *);
mg_status cu_conv2d_grad_weight(cu_ctx *, const mg_kargs *);
size_t cu_conv2d_workspace(const mg_kargs *); /* all three conv ops */
enum { CU_CONV_FORWARD, CU_CONV_GRAD_INPUT, CU_CONV_GRAD_WEIGHT };
/* cuda_cudnn.cu: runs the convolution through cuDNN and returns true (its
 * status in *s), or returns false, having done nothing, when cuDNN is
 * absent or declines; then cuda_conv.cu's own path runs. */
bool cu_dnn_conv(cu_ctx *c, const mg_kargs *a, const mg_conv_dims *d, int mode,
                 mg_status *s);
mg_status cu_dnn_new(cu_ctx *c); /* c->stream must exist */
void cu_dnn_free(cu_ctx *c);
const char *cu_dnn_name(const cu_ctx *c); /* "cudnn" or "im2col" */
/* cuda_pool.cu */
mg_status cu_max_pool2d(cu_ctx *, const mg_kargs *);
mg_status cu_avg_pool2d(cu_ctx *, const mg_kargs *);
mg_status cu_max_pool2d_grad(cu_ctx *, const mg_kargs *);
mg_status cu_avg_pool2d_grad(cu_ctx *, const mg_kargs *);
/* cuda_compact.cu */
mg_status cu_pack_sign(cu_ctx *, const mg_kargs *);
mg_status cu_relu_grad_mask(cu_ctx *, const mg_kargs *);
mg_status cu_pack_bf16(cu_ctx *, const mg_kargs *);
mg_status cu_unpack_bf16(cu_ctx *, const mg_kargs *);
mg_status cu_max_pool2d_argmax(cu_ctx *, const mg_kargs *);
mg_status cu_max_pool2d_grad_argmax(cu_ctx *, const mg_kargs *);
/* cuda_loss.cu: linear + cross-entropy, chunked (both ops' workspace) */
mg_status cu_linear_cross_entropy(cu_ctx *, const mg_kargs *);
mg_status cu_linear_cross_entropy_grad(cu_ctx *, const mg_kargs *);
size_t cu_linear_ce_workspace(const mg_kargs *);

#endif
