/*
 * cpu_backend.c - the CPU device: host memory, dispatch through the CPU
 * kernel table, and the workspace its kernels need (conv2d's im2col
 * columns, or oneDNN's scratchpad and reordered operands; for pooling
 * through oneDNN its scratchpad and max_pool2d_grad's forward y and
 * argmax). Its ctx is the executor's cache of oneDNN primitives (NULL
 * without oneDNN).
 */
#include "cpu_kernels.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A cache line: keeps SIMD loads aligned and stops two pool buffers from
 * sharing a line. */
#define CPU_ALIGN ((size_t)64)

static void *cpu_alloc(void *ctx, size_t nbytes) {
    (void)ctx;
    if (nbytes > SIZE_MAX - (CPU_ALIGN - 1)) return NULL;
    /* aligned_alloc wants a multiple of the alignment, and may return NULL
     * for 0, which the pool would take for an allocation failure. */
    size_t rounded = (nbytes + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN;
    return aligned_alloc(CPU_ALIGN, rounded ? rounded : CPU_ALIGN);
}

static void cpu_free(void *ctx, void *ptr) {
    (void)ctx;
    free(ptr);
}

static mg_status cpu_copy(void *ctx, void *dst, const void *src, size_t n) {
    (void)ctx;
    if (n) memcpy(dst, src, n);
    return MG_OK;
}

static mg_status cpu_run_f32(void *ctx, const mg_kargs *a);

static mg_status cpu_run_op(void *ctx, const mg_kargs *a) {
    mg_status s; /* bfloat16 and float16 run widened (cpu_widen.c) */
    if (mgi_cpu_widen_run(ctx, a, cpu_run_f32, &s)) return s;
    return cpu_run_f32(ctx, a);
}

static mg_status cpu_run_f32(void *ctx, const mg_kargs *a) {
    mg_status s;
    /* f32 convolutions and pools go to oneDNN where it is built in and
     * takes them (cpu_onednn.c), with this executor's cached primitives */
    if (mgi_onednn_conv_run(ctx, a, &s)) return s;
    if (mgi_onednn_pool_run(ctx, a, &s)) return s;
    if ((unsigned)a->op >= (unsigned)MG_OP_COUNT)
        return mg_set_error(MG_ERR_UNSUPPORTED,
                            "cpu backend: op code %d is out of range",
                            (int)a->op);
    mg_kernel_fn k = mgi_cpu_kernels[a->op];
    if (!k)
        return mg_set_error(MG_ERR_UNSUPPORTED,
                            "cpu backend: no kernel for op %s",
                            mgi_op_str(a->op));
    return k(a);
}

static mg_status cpu_run_fused(void *ctx, const mg_kargs *a) {
    (void)ctx;
    return mgi_cpu_fused(a);
}

/* Kernels run to completion before run_op returns. */
static mg_status cpu_synchronize(void *ctx) {
    (void)ctx;
    return MG_OK;
}

static void cpu_destroy(void *ctx) { mgi_onednn_cache_free(ctx); }

static bool cpu_has_kernel(mg_op op) {
    if ((unsigned)op >= (unsigned)MG_OP_COUNT) return false;
    return op == MG_OP_INPUT || op == MG_OP_PARAM || mgi_cpu_kernels[op];
}

static bool cpu_supports_op(void *ctx, mg_op op) {
    (void)ctx;
    return cpu_has_kernel(op);
}

static size_t cpu_f32_workspace(const mg_kargs *a);
static bool cpu_plan_workspace_op(mg_op op);

/* A 16-bit op's float32 copies are in the op table's workspace rule
 * (src/graph/ops_widen.c), so the plan query asks only what the float32
 * query asks for the ops it answers for, with the copies ahead of it. */
static size_t cpu_plan_workspace(const mg_kargs *a) {
    bool widened;
    const size_t w = mgi_cpu_widen_workspace(a, cpu_f32_workspace, &widened);
    if (!widened) return cpu_f32_workspace(a);
    return cpu_plan_workspace_op(a->op) ? w : 0;
}

static size_t cpu_f32_workspace(const mg_kargs *a) {
    switch (a->op) {
    case MG_OP_CONV2D:
    case MG_OP_CONV2D_GRAD_INPUT:
    case MG_OP_CONV2D_GRAD_WEIGHT: {
        size_t bytes;
        if (mgi_onednn_conv_workspace(a, &bytes)) return bytes;
        return mgi_cpu_conv2d_workspace(a);
    }
    case MG_OP_MAX_POOL2D:
    case MG_OP_AVG_POOL2D:
    case MG_OP_MAX_POOL2D_GRAD:
    case MG_OP_AVG_POOL2D_GRAD: { /* the loops need none */
        size_t bytes;
        return mgi_onednn_pool_workspace(a, &bytes) ? bytes : 0;
    }
    default: return 0;
    }
}

/* The ops cpu_plan_workspace answers for; 0 for every other. */
static bool cpu_plan_workspace_op(mg_op op) {
    switch (op) {
    case MG_OP_CONV2D:
    case MG_OP_CONV2D_GRAD_INPUT:
    case MG_OP_CONV2D_GRAD_WEIGHT:
    case MG_OP_MAX_POOL2D:
    case MG_OP_AVG_POOL2D:
    case MG_OP_MAX_POOL2D_GRAD:
    case MG_OP_AVG_POOL2D_GRAD: return true;
    default: return false;
    }
}

/* What a step really borrows, copies included, for the executor's check. */
static size_t cpu_workspace(void *ctx, const mg_kargs *a) {
    (void)ctx;
    bool widened;
    const size_t w = mgi_cpu_widen_workspace(a, cpu_f32_workspace, &widened);
    return widened ? w : cpu_f32_workspace(a);
}

static int cpu_device_count(void) { return 1; }

const mg_backend_reg mgi_backend_cpu_reg = {
    .device = MG_DEVICE_CPU,
    .name = "CPU",
    .dlpack_device = 1, /* kDLCPU */
    .device_count = cpu_device_count,
    .init = mgi_backend_cpu_init,
    .plan_workspace = cpu_plan_workspace,
    .has_kernel = cpu_has_kernel,
    .kernel_workspace = cpu_plan_workspace,
    .plan_workspace_op = cpu_plan_workspace_op,
    .runs_fused = 1,
};

mg_status mgi_backend_cpu_init(mg_backend *out) {
    if (!out)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mgi_backend_cpu_init: out is NULL");
    mgi_onednn_cache *cache = NULL;
    if (mgi_onednn_conv_available() && !(cache = mgi_onednn_cache_new()))
        return mg_set_error(MG_ERR_NOMEM,
                            "mgi_backend_cpu_init: out of memory");
    *out = (mg_backend){
        .name = "cpu",
        .alloc = cpu_alloc,
        .free = cpu_free,
        .copy_to_host = cpu_copy,
        .copy_from_host = cpu_copy,
        .run_op = cpu_run_op,
        .synchronize = cpu_synchronize,
        .destroy = cpu_destroy,
        .supports_op = cpu_supports_op,
        .workspace = cpu_workspace,
        .ctx = cache,
        .run_fused = cpu_run_fused,
    };
    return MG_OK;
}
