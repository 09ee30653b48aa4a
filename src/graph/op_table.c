/*
 * op_table.c - the table that tells the graph, autodiff and the planner
 * everything they know about an op, and the argument checks that the op
 * files share.
 */
#include "ops_internal.h"

#include <stdio.h>
#include <string.h>

/* Names come from MG_OP_LIST so they cannot drift from the enum. An op
 * left out of the table leaves its name unused, which -Wall reports. */
#define OP_NAME_DECL(e, s) static const char op_name_##e[] = s;
MG_OP_LIST(OP_NAME_DECL)
#undef OP_NAME_DECL

#define OP(e, ...) [MG_OP_##e] = {.name = op_name_##e, __VA_ARGS__}

const mg_op_def mg_op_table[MG_OP_COUNT] = {
    OP(INPUT, .flags = MG_OPF_LEAF),
    OP(PARAM, .flags = MG_OPF_LEAF),
    OP(FILL, .infer = mg_fill_infer),
    OP(MATMUL, .n_inputs = 2, .flags = MG_OPF_EXPENSIVE, .infer = mg_matmul_infer,
       .grad = mg_matmul_grad, .flops = mg_matmul_flops),
    OP(ADD, .n_inputs = 2, .infer = mg_binary_infer, .grad = mg_binary_grad,
       .flops_per_elem = 1),
    OP(SUB, .n_inputs = 2, .infer = mg_binary_infer, .grad = mg_binary_grad,
       .flops_per_elem = 1),
    OP(MUL, .n_inputs = 2, .infer = mg_binary_infer, .grad = mg_binary_grad,
       .flops_per_elem = 1),
    OP(DIV, .n_inputs = 2, .infer = mg_binary_infer, .grad = mg_binary_grad,
       .flops_per_elem = 1),
    OP(NEG, .n_inputs = 1, .infer = mg_unary_infer, .grad = mg_unary_grad,
       .flops_per_elem = 1),
    OP(RELU, .n_inputs = 1, .infer = mg_unary_infer, .grad = mg_unary_grad,
       .flops_per_elem = 1),
    OP(GELU, .n_inputs = 1, .infer = mg_unary_infer, .grad = mg_unary_grad,
       .flops_per_elem = 14),
    OP(TANH, .n_inputs = 1, .infer = mg_unary_infer, .grad = mg_unary_grad,
       .flops_per_elem = 10),
    OP(SIGMOID, .n_inputs = 1, .infer = mg_unary_infer,
       .grad = mg_unary_grad, .flops_per_elem = 12),
    OP(EXP, .n_inputs = 1, .infer = mg_unary_infer, .grad = mg_unary_grad,
       .flops_per_elem = 10),
    OP(LOG, .n_inputs = 1, .infer = mg_unary_infer, .grad = mg_unary_grad,
       .flops_per_elem = 10),
    OP(SQRT, .n_inputs = 1, .infer = mg_unary_infer, .grad = mg_unary_grad,
       .flops_per_elem = 4),
    OP(SCALE, .n_inputs = 1, .infer = mg_unary_infer, .grad = mg_unary_grad,
       .flops_per_elem = 1),
    OP(SUM, .n_inputs = 1, .infer = mg_reduce_infer, .grad = mg_reduce_grad,
       .flops = mg_reduce_flops),
    OP(MEAN, .n_inputs = 1, .infer = mg_reduce_infer, .grad = mg_reduce_grad,
       .flops = mg_reduce_flops),
    OP(BROADCAST_TO, .n_inputs = 1, .infer = mg_broadcast_to_infer,
       .grad = mg_broadcast_to_grad),
    OP(RESHAPE, .n_inputs = 1, .infer = mg_reshape_infer,
       .grad = mg_reshape_grad),
    OP(PERMUTE, .n_inputs = 1, .infer = mg_permute_infer,
       .grad = mg_permute_grad),
    OP(SOFTMAX, .n_inputs = 1, .infer = mg_softmax_infer,
       .grad = mg_softmax_grad, .flops_per_elem = 5),
    OP(LOG_SOFTMAX, .n_inputs = 1, .infer = mg_softmax_infer,
       .grad = mg_softmax_grad, .flops_per_elem = 5),
    OP(DROPOUT, .n_inputs = 1, .flags = MG_OPF_RANDOM,
       .infer = mg_dropout_infer, .grad = mg_dropout_grad,
       .flops_per_elem = 2),
    OP(CROSS_ENTROPY, .n_inputs = 2, .infer = mg_cross_entropy_infer,
       .grad = mg_cross_entropy_grad, .flops = mg_loss_flops,
       .workspace = mg_cross_entropy_workspace, .no_grad_inputs = 1u << 1),
    OP(MSE, .n_inputs = 2, .infer = mg_mse_infer, .grad = mg_mse_grad,
       .flops = mg_loss_flops),
    OP(RELU_GRAD, .n_inputs = 2, .infer = mg_pair_infer, .flops_per_elem = 1),
    OP(GELU_GRAD, .n_inputs = 2, .infer = mg_pair_infer,
       .flops_per_elem = 20),
    OP(TANH_GRAD, .n_inputs = 2, .infer = mg_pair_infer, .flops_per_elem = 3),
    OP(SIGMOID_GRAD, .n_inputs = 2, .infer = mg_pair_infer,
       .flops_per_elem = 3),
    OP(CROSS_ENTROPY_GRAD, .n_inputs = 3, .infer = mg_ce_grad_infer,
       .flops_per_elem = 6),
    OP(CONV2D, .n_inputs = 2, .flags = MG_OPF_EXPENSIVE,
       .infer = mg_conv2d_infer, .grad = mg_conv2d_grad,
       .flops = mg_conv2d_flops, .workspace = mg_conv2d_workspace),
    OP(MAX_POOL2D, .n_inputs = 1, .infer = mg_pool2d_infer,
       .grad = mg_pool2d_grad, .flops = mg_pool2d_flops),
    OP(AVG_POOL2D, .n_inputs = 1, .infer = mg_pool2d_infer,
       .grad = mg_pool2d_grad, .flops = mg_pool2d_flops),
    OP(BATCHNORM, .n_inputs = 3, .infer = mg_batchnorm_infer,
       .grad = mg_norm_grad, .flops = mg_norm_flops),
    OP(LAYERNORM, .n_inputs = 3, .infer = mg_layernorm_infer,
       .grad = mg_norm_grad, .flops = mg_norm_flops),
    OP(CONCAT, .n_inputs = 2, .infer = mg_concat_infer,
       .grad = mg_concat_grad),
    OP(SLICE, .n_inputs = 1, .infer = mg_slice_infer, .grad = mg_window_grad),
    OP(PAD, .n_inputs = 1, .infer = mg_pad_infer, .grad = mg_window_grad),
    OP(EMBEDDING, .n_inputs = 2, .infer = mg_embedding_infer,
       .grad = mg_embedding_grad, .no_grad_inputs = 1u << 1),
    OP(CAUSAL_MASK, .n_inputs = 1, .infer = mg_causal_mask_infer,
       .grad = mg_causal_mask_grad, .flops_per_elem = 1),
    OP(CONV2D_GRAD_INPUT, .n_inputs = 2, .infer = mg_conv2d_grad_input_infer,
       .flops = mg_conv2d_grad_input_flops,
       .workspace = mg_conv2d_grad_input_workspace),
    OP(CONV2D_GRAD_WEIGHT, .n_inputs = 2,
       .infer = mg_conv2d_grad_weight_infer,
       .flops = mg_conv2d_grad_weight_flops,
       .workspace = mg_conv2d_grad_weight_workspace),
    OP(MAX_POOL2D_GRAD, .n_inputs = 2, .infer = mg_max_pool2d_grad_infer,
       .flops = mg_pool2d_grad_flops),
    OP(AVG_POOL2D_GRAD, .n_inputs = 1, .infer = mg_avg_pool2d_grad_infer,
       .flops = mg_pool2d_grad_flops),
    OP(BATCHNORM_GRAD_INPUT, .n_inputs = 3,
       .infer = mg_batchnorm_grad_input_infer, .flops = mg_norm_flops),
    OP(BATCHNORM_GRAD_GAMMA, .n_inputs = 2,
       .infer = mg_batchnorm_grad_gamma_infer, .flops = mg_norm_flops),
    OP(LAYERNORM_GRAD_INPUT, .n_inputs = 3,
       .infer = mg_layernorm_grad_input_infer, .flops = mg_norm_flops),
    OP(LAYERNORM_GRAD_GAMMA, .n_inputs = 2,
       .infer = mg_layernorm_grad_gamma_infer, .flops = mg_norm_flops,
       .workspace = mg_layernorm_grad_gamma_workspace),
    OP(EMBEDDING_GRAD, .n_inputs = 2, .infer = mg_embedding_grad_infer,
       .flops = mg_embedding_grad_flops,
       .workspace = mg_embedding_grad_workspace),
};

#undef OP

const char *mg_op_str(mg_op op) {
    return op >= 0 && op < MG_OP_COUNT ? mg_op_table[op].name : "?";
}

/* ---- shared checks ------------------------------------------------------- */

const mg_tdesc *mg_arg_desc(const mg_graph *g, mg_tensor t, const char *op) {
    if (g && t == MG_NO_TENSOR) {
        mg_graph_missing_input(op, -1); /* op names the argument */
        return NULL;
    }
    return mg_graph_check_id(g, t, op) == MG_OK ? &g->nodes[t].d : NULL;
}

mg_status mg_attrs_shape_set(mg_attrs *a, int ndim, const int64_t *shape,
                             const char *op) {
    if (ndim < 0 || ndim > MG_MAX_DIMS)
        return mg_set_error(MG_ERR_INVALID_ARG, "%s: ndim %d is not in 0..%d",
                            op, ndim, MG_MAX_DIMS);
    if (ndim > 0 && !shape)
        return mg_set_error(MG_ERR_INVALID_ARG, "%s: shape is NULL", op);
    a->ndim = ndim;
    for (int i = 0; i < ndim; i++) a->shape[i] = shape[i];
    return MG_OK;
}

mg_status mg_shape_check(int ndim, const int64_t *shape, char *why,
                         size_t len) {
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 1) {
            snprintf(why, len,
                     "dim %d of the shape is %lld; sizes must be >= 1", i,
                     (long long)shape[i]);
            return MG_ERR_INVALID_ARG;
        }
    }
    return MG_OK;
}

mg_status mg_float_check(const mg_tdesc *d, const char *what, char *why,
                         size_t len) {
    if (d->dtype == MG_F32 || d->dtype == MG_F64) return MG_OK;
    snprintf(why, len, "%s must be f32 or f64, not %s", what,
             mg_dtype_name(d->dtype));
    return MG_ERR_DTYPE;
}

mg_status mg_float_pair_check(const mg_tdesc *a, const char *a_what,
                              const mg_tdesc *b, const char *b_what, char *why,
                              size_t len) {
    mg_status s = mg_float_check(a, a_what, why, len);
    if (s == MG_OK) s = mg_float_check(b, b_what, why, len);
    if (s == MG_OK && a->dtype != b->dtype) {
        snprintf(why, len, "%s is %s but %s is %s", a_what,
                 mg_dtype_name(a->dtype), b_what, mg_dtype_name(b->dtype));
        s = MG_ERR_DTYPE;
    }
    return s;
}

mg_status mg_grad_status(int n, const bool *need, const mg_tensor *gin) {
    for (int i = 0; i < n; i++) {
        if (!need[i] || gin[i] != MG_NO_TENSOR) continue;
        /* The failing builder recorded why. */
        mg_status s = mg_last_status();
        return s != MG_OK ? s
                          : mg_set_error(MG_ERR_INTERNAL,
                                         "a gradient rule built no tensor "
                                         "for input %d",
                                         i);
    }
    return MG_OK;
}
