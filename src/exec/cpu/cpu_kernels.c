/*
 * cpu_kernels.c - the CPU kernel table, indexed by op, and the CPU's
 * dtype failure. The elementwise entries come from the lists in
 * kernel_shared.h.
 */
#include "cpu_kernels.h"

const mg_kernel_fn mgi_cpu_kernels[MG_OP_COUNT] = {
    /* Leaves own caller memory: nothing to compute. */
    [MG_OP_INPUT] = NULL,
    [MG_OP_PARAM] = NULL,
#define ELEMENTWISE_ENTRY(name, OP, expr) [MG_OP_##OP] = mgi_cpu_##name,
    MG_UNARY_OPS(ELEMENTWISE_ENTRY) MG_BINARY_OPS(ELEMENTWISE_ENTRY)
        MG_COMPARE_OPS(ELEMENTWISE_ENTRY)
#undef ELEMENTWISE_ENTRY
            [MG_OP_FILL] = mgi_cpu_fill,
    [MG_OP_MATMUL] = mgi_cpu_matmul,
    [MG_OP_SUM] = mgi_cpu_sum,
    [MG_OP_MEAN] = mgi_cpu_mean,
    [MG_OP_BROADCAST_TO] = mgi_cpu_broadcast_to,
    [MG_OP_RESHAPE] = mgi_cpu_reshape,
    [MG_OP_PERMUTE] = mgi_cpu_permute,
    [MG_OP_SOFTMAX] = mgi_cpu_softmax,
    [MG_OP_LOG_SOFTMAX] = mgi_cpu_log_softmax,
    [MG_OP_DROPOUT] = mgi_cpu_dropout,
    [MG_OP_CROSS_ENTROPY] = mgi_cpu_cross_entropy,
    [MG_OP_MSE] = mgi_cpu_mse,
    [MG_OP_CROSS_ENTROPY_GRAD] = mgi_cpu_cross_entropy_grad,
    [MG_OP_CONV2D] = mgi_cpu_conv2d,
    [MG_OP_MAX_POOL2D] = mgi_cpu_max_pool2d,
    [MG_OP_AVG_POOL2D] = mgi_cpu_avg_pool2d,
    [MG_OP_BATCHNORM] = mgi_cpu_norm,
    [MG_OP_LAYERNORM] = mgi_cpu_norm,
    [MG_OP_CONCAT] = mgi_cpu_concat,
    [MG_OP_SLICE] = mgi_cpu_slice,
    [MG_OP_PAD] = mgi_cpu_pad,
    [MG_OP_EMBEDDING] = mgi_cpu_embedding,
    [MG_OP_CAUSAL_MASK] = mgi_cpu_causal_mask,
    [MG_OP_ATTENTION] = mgi_cpu_attention,
    [MG_OP_ATTENTION_GRAD] = mgi_cpu_attention_grad,
    [MG_OP_ATTENTION_GRAD_MASK] = mgi_cpu_attention_grad_mask,
    [MG_OP_CAST] = mgi_cpu_cast,
    [MG_OP_CONV2D_GRAD_INPUT] = mgi_cpu_conv2d_grad_input,
    [MG_OP_CONV2D_GRAD_WEIGHT] = mgi_cpu_conv2d_grad_weight,
    [MG_OP_MAX_POOL2D_GRAD] = mgi_cpu_max_pool2d_grad,
    [MG_OP_AVG_POOL2D_GRAD] = mgi_cpu_avg_pool2d_grad,
    [MG_OP_BATCHNORM_GRAD_INPUT] = mgi_cpu_norm_grad_input,
    [MG_OP_BATCHNORM_GRAD_GAMMA] = mgi_cpu_norm_grad_gamma,
    [MG_OP_LAYERNORM_GRAD_INPUT] = mgi_cpu_norm_grad_input,
    [MG_OP_LAYERNORM_GRAD_GAMMA] = mgi_cpu_norm_grad_gamma,
    [MG_OP_EMBEDDING_GRAD] = mgi_cpu_embedding_grad,
    [MG_OP_PACK_SIGN] = mgi_cpu_pack_sign,
    [MG_OP_RELU_GRAD_MASK] = mgi_cpu_relu_grad_mask,
    [MG_OP_PACK_BF16] = mgi_cpu_pack_bf16,
    [MG_OP_UNPACK_BF16] = mgi_cpu_unpack_bf16,
    [MG_OP_MAX_POOL2D_ARGMAX] = mgi_cpu_max_pool2d_argmax,
    [MG_OP_MAX_POOL2D_GRAD_ARGMAX] = mgi_cpu_max_pool2d_grad_argmax,
    [MG_OP_LINEAR_CROSS_ENTROPY] = mgi_cpu_linear_cross_entropy,
    [MG_OP_LINEAR_CROSS_ENTROPY_GRAD] = mgi_cpu_linear_cross_entropy_grad,
    [MG_OP_LOGICAL_NOT] = mgi_cpu_logical_not,
    [MG_OP_WHERE] = mgi_cpu_where,
    [MG_OP_CLAMP] = mgi_cpu_clamp,
    [MG_OP_CLAMP_GRAD] = mgi_cpu_clamp_grad,
    [MG_OP_GATHER] = mgi_cpu_gather_axis,
    [MG_OP_GATHER_GRAD] = mgi_cpu_gather_axis_grad,
    [MG_OP_INDEX_SELECT] = mgi_cpu_index_select,
    [MG_OP_INDEX_SELECT_GRAD] = mgi_cpu_index_select_grad,
    [MG_OP_CUMSUM] = mgi_cpu_cumsum,
};

mg_status mgi_cpu_bad_dtype(const mg_kargs *a, mg_dtype d) {
    return mg_kernel_fail(a, MG_ERR_DTYPE, "the CPU kernel has no %s version",
                          mg_dtype_name(d));
}
