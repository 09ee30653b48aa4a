/*
 * cuda_backend.cu - the CUDA device: cudaMalloc'd memory for the pool, copies,
 * dispatch through the CUDA kernel table on one stream with one cuBLAS handle,
 * the ops it supports and the workspace its kernels need; and its row of the
 * backend table (mgi_backend_cuda_reg). Every CUDA and cuBLAS call is checked;
 * a failure becomes an mg_ status with a message, never an abort.
 */
#include "backend/gemm_split.h" /* the workspace a CUDA plan lends cuBLAS */
#include "cuda_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- failures ------------------------------------------------------------ */

static mg_status cuda_status(cudaError_t e) {
    return e == cudaErrorMemoryAllocation ? MG_ERR_NOMEM : MG_ERR_INTERNAL;
}

mg_status cu_check(const mg_kargs *a, cudaError_t e, const char *what) {
    if (e == cudaSuccess) return MG_OK;
    return mg_kernel_fail(a, cuda_status(e), "CUDA error in %s: %s (%s)", what,
                          cudaGetErrorString(e), cudaGetErrorName(e));
}

mg_status cu_check_launch(const mg_kargs *a, const char *what) {
    return cu_check(a, cudaGetLastError(), what);
}

mg_status cu_check_blas(const mg_kargs *a, cublasStatus_t e, const char *what) {
    if (e == CUBLAS_STATUS_SUCCESS) return MG_OK;
    return mg_kernel_fail(
        a, e == CUBLAS_STATUS_ALLOC_FAILED ? MG_ERR_NOMEM : MG_ERR_INTERNAL,
        "cuBLAS error in %s: %s", what, cublasGetStatusString(e));
}

mg_status cu_work(const mg_kargs *a, size_t nbytes, void **out) {
    *out = a->work;
    if (a->work_bytes >= nbytes) return MG_OK;
    return mg_kernel_fail(a, MG_ERR_INTERNAL,
                          "needs %zu bytes of workspace, got %zu", nbytes,
                          a->work_bytes);
}

/* ---- the kernel table ---------------------------------------------------- */

static cu_kernel_fn kernels[MG_OP_COUNT];
static int kernels_ready;

static void kernels_init(void) {
    if (kernels_ready) return;
    cu_kernel_fn *t = kernels;
    t[MG_OP_FILL] = cu_fill;
    t[MG_OP_MATMUL] = cu_matmul;
#define UNARY_ENTRY(name, OP, expr) t[MG_OP_##OP] = cu_unary;
#define BINARY_ENTRY(name, OP, expr) t[MG_OP_##OP] = cu_binary;
    MG_UNARY_OPS(UNARY_ENTRY)
    MG_BINARY_OPS(BINARY_ENTRY)
#undef UNARY_ENTRY
#undef BINARY_ENTRY
    t[MG_OP_SUM] = cu_sum;
    t[MG_OP_MEAN] = cu_mean;
    t[MG_OP_BROADCAST_TO] = cu_broadcast_to;
    t[MG_OP_RESHAPE] = cu_reshape;
    t[MG_OP_PERMUTE] = cu_permute;
    t[MG_OP_SOFTMAX] = cu_softmax;
    t[MG_OP_LOG_SOFTMAX] = cu_log_softmax;
    t[MG_OP_DROPOUT] = cu_dropout;
    t[MG_OP_CROSS_ENTROPY] = cu_cross_entropy;
    t[MG_OP_MSE] = cu_mse;
    t[MG_OP_CROSS_ENTROPY_GRAD] = cu_cross_entropy_grad;
    t[MG_OP_CONV2D] = cu_conv2d;
    t[MG_OP_MAX_POOL2D] = cu_max_pool2d;
    t[MG_OP_AVG_POOL2D] = cu_avg_pool2d;
    t[MG_OP_BATCHNORM] = t[MG_OP_LAYERNORM] = cu_norm;
    t[MG_OP_CONCAT] = cu_concat;
    t[MG_OP_SLICE] = cu_slice;
    t[MG_OP_PAD] = cu_pad;
    t[MG_OP_CONV2D_GRAD_INPUT] = cu_conv2d_grad_input;
    t[MG_OP_CONV2D_GRAD_WEIGHT] = cu_conv2d_grad_weight;
    t[MG_OP_MAX_POOL2D_GRAD] = cu_max_pool2d_grad;
    t[MG_OP_AVG_POOL2D_GRAD] = cu_avg_pool2d_grad;
    t[MG_OP_BATCHNORM_GRAD_INPUT] = cu_norm_grad_input;
    t[MG_OP_LAYERNORM_GRAD_INPUT] = cu_norm_grad_input;
    t[MG_OP_BATCHNORM_GRAD_GAMMA] = cu_norm_grad_gamma;
    t[MG_OP_LAYERNORM_GRAD_GAMMA] = cu_norm_grad_gamma;
    t[MG_OP_EMBEDDING] = cu_embedding;
    t[MG_OP_EMBEDDING_GRAD] = cu_embedding_grad;
    t[MG_OP_CAUSAL_MASK] = cu_causal_mask;
    t[MG_OP_ATTENTION] = cu_attention;
    t[MG_OP_ATTENTION_GRAD] = cu_attention_grad;
    t[MG_OP_ATTENTION_GRAD_MASK] = cu_attention_grad;
    t[MG_OP_CAST] = cu_cast;
    t[MG_OP_PACK_SIGN] = cu_pack_sign;
    t[MG_OP_RELU_GRAD_MASK] = cu_relu_grad_mask;
    t[MG_OP_PACK_BF16] = cu_pack_bf16;
    t[MG_OP_UNPACK_BF16] = cu_unpack_bf16;
    t[MG_OP_MAX_POOL2D_ARGMAX] = cu_max_pool2d_argmax;
    t[MG_OP_MAX_POOL2D_GRAD_ARGMAX] = cu_max_pool2d_grad_argmax;
    t[MG_OP_LINEAR_CROSS_ENTROPY] = cu_linear_cross_entropy;
    t[MG_OP_LINEAR_CROSS_ENTROPY_GRAD] = cu_linear_cross_entropy_grad;
#define COMPARE_ENTRY(name, OP, expr) t[MG_OP_##OP] = cu_compare;
    MG_COMPARE_OPS(COMPARE_ENTRY)
#undef COMPARE_ENTRY
    t[MG_OP_LOGICAL_NOT] = cu_logical_not;
    t[MG_OP_WHERE] = cu_where;
    t[MG_OP_CLAMP] = cu_clamp_op;
    t[MG_OP_CLAMP_GRAD] = cu_clamp_grad_op;
    t[MG_OP_GATHER] = t[MG_OP_INDEX_SELECT] = cu_gather;
    t[MG_OP_GATHER_GRAD] = t[MG_OP_INDEX_SELECT_GRAD] = cu_gather_grad;
    t[MG_OP_CUMSUM] = cu_cumsum;
    kernels_ready = 1;
}

extern "C" int mgi_cuda_has_kernel(mg_op op) {
    if ((unsigned)op >= (unsigned)MG_OP_COUNT) return 0;
    if (op == MG_OP_INPUT || op == MG_OP_PARAM) return 1;
    kernels_init();
    return kernels[op] != NULL;
}

static bool cuda_supports_op(void *ctx, mg_op op) {
    (void)ctx;
    return mgi_cuda_has_kernel(op) != 0;
}

/* The kernels that borrow scratch, each file's own rule for it. */
extern "C" size_t mgi_cuda_workspace(const mg_kargs *a) {
    switch (a->op) {
    case MG_OP_CONV2D:
    case MG_OP_CONV2D_GRAD_INPUT:
    case MG_OP_CONV2D_GRAD_WEIGHT: return cu_conv2d_workspace(a);
    case MG_OP_CROSS_ENTROPY: return cu_cross_entropy_workspace(a);
    case MG_OP_LAYERNORM_GRAD_GAMMA: return cu_norm_grad_gamma_workspace(a);
    case MG_OP_BATCHNORM: return mg_batchnorm_workspace(&a->in[0].d, 2);
    case MG_OP_BATCHNORM_GRAD_INPUT:
        return mg_batchnorm_workspace(&a->in[1].d, 4);
    case MG_OP_BATCHNORM_GRAD_GAMMA:
        return mg_batchnorm_workspace(&a->in[1].d, 4);
    case MG_OP_SUM:
    case MG_OP_MEAN:
        return mg_reduce_workspace(&a->in[0].d, a->attrs,
                                   mgi_tdesc_numel(&a->out.d));
    case MG_OP_EMBEDDING_GRAD: return cu_embedding_grad_workspace(a);
    case MG_OP_INDEX_SELECT_GRAD: return cu_index_select_grad_workspace(a);
    case MG_OP_ATTENTION: return cu_attention_workspace(a);
    case MG_OP_ATTENTION_GRAD:
    case MG_OP_ATTENTION_GRAD_MASK: return cu_attention_grad_workspace(a);
    case MG_OP_LINEAR_CROSS_ENTROPY:
    case MG_OP_LINEAR_CROSS_ENTROPY_GRAD: return cu_linear_ce_workspace(a);
    default: return 0;
    }
}

static size_t cuda_workspace(void *ctx, const mg_kargs *a) {
    (void)ctx;
    return mgi_cuda_workspace(a);
}

/* ---- the backend --------------------------------------------------------- */

static void *cuda_alloc(void *ctx, size_t nbytes) {
    (void)ctx;
    void *p = NULL;
    if (cudaMalloc(&p, nbytes ? nbytes : 256) != cudaSuccess) {
        cudaGetLastError(); /* an allocation failure is not sticky */
        return NULL;        /* the pool trims its cache and retries */
    }
    return p;
}

/* The pool frees a block only when trimming its cache; a kernel queued on
 * the stream may still read it, so wait for the stream first. */
static void cuda_free(void *ctx, void *ptr) {
    cu_ctx *c = (cu_ctx *)ctx;
    if (!ptr) return;
    if (c && c->stream) cudaStreamSynchronize(c->stream);
    if (cudaFree(ptr) != cudaSuccess) cudaGetLastError();
}

static mg_status copy(void *ctx, void *dst, const void *src, size_t n,
                      cudaMemcpyKind kind, const char *what) {
    cu_ctx *c = (cu_ctx *)ctx;
    if (!n) return MG_OK;
    cudaError_t e = cudaMemcpyAsync(dst, src, n, kind, c->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess)
        return mg_set_error(cuda_status(e),
                            "cuda backend: %s of %zu bytes "
                            "failed: %s",
                            what, n, cudaGetErrorString(e));
    return MG_OK;
}

static mg_status cuda_copy_to_host(void *ctx, void *dst, const void *src,
                                   size_t n) {
    return copy(ctx, dst, src, n, cudaMemcpyDeviceToHost, "copy to host");
}

static mg_status cuda_copy_from_host(void *ctx, void *dst, const void *src,
                                     size_t n) {
    return copy(ctx, dst, src, n, cudaMemcpyHostToDevice, "copy from host");
}

static mg_status cuda_run_op(void *ctx, const mg_kargs *a) {
    cu_ctx *c = (cu_ctx *)ctx;
    if ((unsigned)a->op >= (unsigned)MG_OP_COUNT)
        return mg_set_error(MG_ERR_UNSUPPORTED,
                            "cuda backend: op code %d is out of range",
                            (int)a->op);
    cu_kernel_fn k = kernels[a->op];
    if (!k)
        return mg_set_error(MG_ERR_UNSUPPORTED,
                            "cuda backend: no kernel for op %s",
                            mgi_op_str(a->op));
    /* No CUDA kernel computes in bfloat16 or float16 yet (issue 47): the
     * float ones would read 2-byte elements as 4-byte ones. */
    for (int i = -1; i < a->n_in; i++) {
        const mg_dtype d = i < 0 ? a->out.d.dtype : a->in[i].d.dtype;
        if (d == MG_BF16 || d == MG_F16)
            return mg_kernel_fail(a, MG_ERR_DTYPE,
                                  "cuda backend: %s has no %s kernel yet "
                                  "(16-bit ops run on the CPU)",
                                  mgi_op_str(a->op), mg_dtype_name(d));
    }
    /* A plan for this device lent cuBLAS room to split K after the op's
     * own workspace (backend/gemm_split.h); it is the step's only while the
     * step runs, so cuBLAS gets it for this op and then none again. */
    const size_t split = c->gemm_split_off ? 0 : mg_gemm_split_step_bytes(a);
    const size_t split_at =
        split ? mgi_plan_extra_offset(mgi_cuda_workspace(a)) : 0;
    const bool lent = split && a->work && a->work_bytes >= split_at + split;
    mg_status s = MG_OK;
    if (lent)
        s = cu_check_blas(
            a, cublasSetWorkspace(c->blas, (char *)a->work + split_at, split),
            "cublasSetWorkspace");
    if (s == MG_OK) s = k(c, a);
    if (lent) {
        mg_status r = cu_check_blas(a, cublasSetWorkspace(c->blas, NULL, 0),
                                    "cublasSetWorkspace");
        if (s == MG_OK) s = r;
    }
    if (s == MG_OK) s = cu_check_launch(a, mgi_op_str(a->op));
    if (s == MG_OK && c->sync_each_op)
        s = cu_check(a, cudaStreamSynchronize(c->stream), mgi_op_str(a->op));
    return s;
}

static mg_status cuda_synchronize(void *ctx) {
    cu_ctx *c = (cu_ctx *)ctx;
    cudaError_t e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess)
        return mg_set_error(cuda_status(e),
                            "cuda backend: a kernel failed: %s (%s); set "
                            "MG_CUDA_SYNC=1 to find which op",
                            cudaGetErrorString(e), cudaGetErrorName(e));
    return MG_OK;
}

static void cuda_destroy(void *ctx) {
    cu_ctx *c = (cu_ctx *)ctx;
    if (!c) return;
    if (c->stream) cudaStreamSynchronize(c->stream);
    cu_dnn_free(c);
    if (c->flag) cudaFree(c->flag);
    if (c->blas) cublasDestroy(c->blas);
    if (c->stream) cudaStreamDestroy(c->stream);
    cudaGetLastError();
    free(c);
}

extern "C" int mgi_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

extern "C" mg_status mgi_backend_cuda_init(mg_backend *out) {
    if (!out)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mgi_backend_cuda_init: out is NULL");
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        cudaGetLastError();
        return mg_set_error(
            MG_ERR_UNSUPPORTED, "mg_exec_new: no CUDA device (%s)",
            e != cudaSuccess ? cudaGetErrorString(e) : "device count is 0");
    }
    kernels_init();
    cu_ctx *c = (cu_ctx *)calloc(1, sizeof *c);
    if (!c)
        return mg_set_error(MG_ERR_NOMEM, "mgi_backend_cuda_init: out of "
                                          "memory");
    const char *sync = getenv("MG_CUDA_SYNC");
    c->sync_each_op = sync && sync[0] == '1';
    const char *split = getenv("MG_CUDA_GEMM_SPLIT");
    c->gemm_split_off = split && split[0] == '0';
    const char *step = "cudaGetDevice";
    cublasStatus_t b = CUBLAS_STATUS_SUCCESS;
    e = cudaGetDevice(&c->device);
    if (e == cudaSuccess) {
        step = "cudaStreamCreate";
        /* A blocking stream: it waits for work the caller queued on the
         * legacy default stream (cudaMemcpy of inputs) and vice versa. */
        e = cudaStreamCreate(&c->stream);
    }
    if (e == cudaSuccess) {
        step = "cudaMalloc";
        e = cudaMalloc((void **)&c->flag, sizeof(int));
    }
    if (e == cudaSuccess) {
        b = cublasCreate(&c->blas);
        step = "cublasCreate";
        if (b == CUBLAS_STATUS_SUCCESS) b = cublasSetStream(c->blas, c->stream);
        /* Plain IEEE float32 GEMMs: no TF32, so results match the CPU. */
        if (b == CUBLAS_STATUS_SUCCESS)
            b = cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH);
        if (b == CUBLAS_STATUS_SUCCESS)
            b = cublasSetPointerMode(c->blas, CUBLAS_POINTER_MODE_HOST);
        /* No workspace of cuBLAS's own (4 to 32 MiB per handle that the
         * pool would not see): a GEMM gets the one a CUDA plan lends it
         * (cuda_run_op), else takes an algorithm that needs none, so all
         * scratch is the plan's. After cublasSetStream, which resets the
         * workspace to cuBLAS's default. */
        if (b == CUBLAS_STATUS_SUCCESS)
            b = cublasSetWorkspace(c->blas, NULL, 0);
    }
    if (e == cudaSuccess && b == CUBLAS_STATUS_SUCCESS &&
        cu_dnn_new(c) != MG_OK) {
        cuda_destroy(c);
        return MG_ERR_NOMEM;
    }
    if (e != cudaSuccess || b != CUBLAS_STATUS_SUCCESS) {
        mg_status s = e != cudaSuccess ? cuda_status(e) : MG_ERR_INTERNAL;
        mg_set_error(s, "mgi_backend_cuda_init: %s failed: %s", step,
                     e != cudaSuccess ? cudaGetErrorString(e)
                                      : cublasGetStatusString(b));
        cuda_destroy(c);
        return s;
    }
    memset(out, 0, sizeof *out);
    out->name = "cuda";
    out->alloc = cuda_alloc;
    out->free = cuda_free;
    out->copy_to_host = cuda_copy_to_host;
    out->copy_from_host = cuda_copy_from_host;
    out->run_op = cuda_run_op;
    out->synchronize = cuda_synchronize;
    out->destroy = cuda_destroy;
    out->supports_op = cuda_supports_op;
    out->workspace = cuda_workspace;
    out->ctx = c;
    return MG_OK;
}

static bool cuda_has_kernel(mg_op op) { return mgi_cuda_has_kernel(op) != 0; }

extern "C" const mg_backend_reg mgi_backend_cuda_reg = {
    /* .device */ MG_DEVICE_CUDA,
    /* .name */ "CUDA",
    /* .dlpack_device */ 2, /* kDLCUDA */
    /* .device_count */ mgi_cuda_device_count,
    /* .init */ mgi_backend_cuda_init,
    /* .plan_workspace: the op table's rules cover every CUDA kernel
     * (test_backend_table checks kernel_workspace against them) */
    NULL,
    /* .has_kernel */ cuda_has_kernel,
    /* .kernel_workspace */ mgi_cuda_workspace,
    /* .plan_workspace_op */ NULL,
    /* .plan_extra */ mg_gemm_split_step_bytes,
};
