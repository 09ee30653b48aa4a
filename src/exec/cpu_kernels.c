/*
 * cpu_kernels.c - the CPU kernel table, indexed by op, and the helpers the
 * kernel files share: failure reasons and strided layouts.
 */
#include "cpu_kernels.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>

const mg_kernel_fn mg_cpu_kernels[MG_OP_COUNT] = {
    /* Leaves own caller memory: nothing to compute. */
    [MG_OP_INPUT] = NULL,
    [MG_OP_PARAM] = NULL,
    [MG_OP_FILL] = mg_cpu_fill,
    [MG_OP_MATMUL] = mg_cpu_matmul,
    [MG_OP_ADD] = mg_cpu_add,
    [MG_OP_SUB] = mg_cpu_sub,
    [MG_OP_MUL] = mg_cpu_mul,
    [MG_OP_DIV] = mg_cpu_div,
    [MG_OP_NEG] = mg_cpu_neg,
    [MG_OP_RELU] = mg_cpu_relu,
    [MG_OP_GELU] = mg_cpu_gelu,
    [MG_OP_TANH] = mg_cpu_tanh,
    [MG_OP_SIGMOID] = mg_cpu_sigmoid,
    [MG_OP_EXP] = mg_cpu_exp,
    [MG_OP_LOG] = mg_cpu_log,
    [MG_OP_SQRT] = mg_cpu_sqrt,
    [MG_OP_SCALE] = mg_cpu_scale,
    [MG_OP_SUM] = mg_cpu_sum,
    [MG_OP_MEAN] = mg_cpu_mean,
    [MG_OP_BROADCAST_TO] = mg_cpu_broadcast_to,
    [MG_OP_RESHAPE] = mg_cpu_reshape,
    [MG_OP_PERMUTE] = mg_cpu_permute,
    [MG_OP_SOFTMAX] = mg_cpu_softmax,
    [MG_OP_LOG_SOFTMAX] = mg_cpu_log_softmax,
    [MG_OP_DROPOUT] = mg_cpu_dropout,
    [MG_OP_CROSS_ENTROPY] = mg_cpu_cross_entropy,
    [MG_OP_MSE] = mg_cpu_mse,
    [MG_OP_RELU_GRAD] = mg_cpu_relu_grad,
    [MG_OP_GELU_GRAD] = mg_cpu_gelu_grad,
    [MG_OP_TANH_GRAD] = mg_cpu_tanh_grad,
    [MG_OP_SIGMOID_GRAD] = mg_cpu_sigmoid_grad,
    [MG_OP_CROSS_ENTROPY_GRAD] = mg_cpu_cross_entropy_grad,
    [MG_OP_CONV2D] = mg_cpu_conv2d,
    [MG_OP_MAX_POOL2D] = mg_cpu_max_pool2d,
    [MG_OP_AVG_POOL2D] = mg_cpu_avg_pool2d,
    [MG_OP_BATCHNORM] = mg_cpu_norm,
    [MG_OP_LAYERNORM] = mg_cpu_norm,
    [MG_OP_CONCAT] = mg_cpu_concat,
    [MG_OP_SLICE] = mg_cpu_slice,
    [MG_OP_PAD] = mg_cpu_pad,
    [MG_OP_EMBEDDING] = mg_cpu_embedding,
    [MG_OP_CAUSAL_MASK] = mg_cpu_causal_mask,
    [MG_OP_CONV2D_GRAD_INPUT] = mg_cpu_conv2d_grad_input,
    [MG_OP_CONV2D_GRAD_WEIGHT] = mg_cpu_conv2d_grad_weight,
    [MG_OP_MAX_POOL2D_GRAD] = mg_cpu_max_pool2d_grad,
    [MG_OP_AVG_POOL2D_GRAD] = mg_cpu_avg_pool2d_grad,
    [MG_OP_BATCHNORM_GRAD_INPUT] = mg_cpu_norm_grad_input,
    [MG_OP_BATCHNORM_GRAD_GAMMA] = mg_cpu_norm_grad_gamma,
    [MG_OP_LAYERNORM_GRAD_INPUT] = mg_cpu_norm_grad_input,
    [MG_OP_LAYERNORM_GRAD_GAMMA] = mg_cpu_norm_grad_gamma,
    [MG_OP_EMBEDDING_GRAD] = mg_cpu_embedding_grad,
};

mg_status mg_cpu_fail(const mg_kargs *a, mg_status s, const char *fmt, ...) {
    if (a->why && a->why_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(a->why, a->why_len, fmt, ap);
        va_end(ap);
    }
    return s;
}

mg_status mg_cpu_bad_dtype(const mg_kargs *a, mg_dtype d) {
    return mg_cpu_fail(a, MG_ERR_DTYPE, "the CPU kernel has no %s version",
                       mg_dtype_name(d));
}

mg_status mg_cpu_check_indices(const mg_kargs *a, const int32_t *idx,
                               int64_t n, int64_t bound, const char *what,
                               const char *where) {
    for (int64_t p = 0; p < n; p++)
        if (idx[p] < 0 || idx[p] >= bound)
            return mg_cpu_fail(a, MG_ERR_INVALID_ARG,
                               "%s %" PRId32 " at %s %" PRId64
                               " is outside [0, %" PRId64 ")",
                               what, idx[p], where, p, bound);
    return MG_OK;
}

void mg_cpu_layout_init(mg_cpu_layout *l, const mg_tdesc *d) {
    l->ndim = d->ndim > 0 ? d->ndim : 1;
    for (int i = 0; i < l->ndim; i++) {
        l->shape[i] = d->ndim > 0 ? d->shape[i] : 1;
        l->stride[0][i] = l->stride[1][i] = 0;
    }
}

void mg_cpu_layout_broadcast(mg_cpu_layout *l, int slot, const mg_tdesc *in) {
    int64_t step = 1;
    int lead = l->ndim - in->ndim;
    for (int i = l->ndim - 1; i >= 0; i--) {
        int j = i - lead;
        int64_t n = j >= 0 ? in->shape[j] : 1;
        l->stride[slot][i] = n == 1 ? 0 : step;
        step *= n;
    }
}

void mg_cpu_layout_coalesce(mg_cpu_layout *l) {
    int n = 0;
    for (int i = 0; i < l->ndim; i++) {
        if (l->shape[i] == 1) continue;
        if (n > 0 &&
            l->stride[0][n - 1] == l->stride[0][i] * l->shape[i] &&
            l->stride[1][n - 1] == l->stride[1][i] * l->shape[i]) {
            l->shape[n - 1] *= l->shape[i];
            l->stride[0][n - 1] = l->stride[0][i];
            l->stride[1][n - 1] = l->stride[1][i];
            continue;
        }
        l->shape[n] = l->shape[i];
        l->stride[0][n] = l->stride[0][i];
        l->stride[1][n] = l->stride[1][i];
        n++;
    }
    if (n == 0) {
        l->shape[0] = 1;
        l->stride[0][0] = l->stride[1][0] = 0;
        n = 1;
    }
    l->ndim = n;
}
