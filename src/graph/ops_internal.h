/*
 * ops_internal.h - private to the op files: the shape, gradient and cost
 * rules that the op table in op_table.c points at, and the checks those
 * rules share (op_checks.c) so that every op words the same mistake the
 * same way. It needs only op_table.h; a file that builds nodes includes
 * graph.h as well.
 */
#ifndef MG_OPS_INTERNAL_H
#define MG_OPS_INTERNAL_H

#include "op_table.h"

/* ---- shared checks (op_checks.c) ----------------------------------------- */

/* Descriptor of a builder argument read before mgi_graph_add_node, or NULL
 * (with the error set, or kept if t is MG_NO_TENSOR). Copy what you need:
 * the pointer dies with the next node added. */
const mg_tdesc *mgi_arg_desc(const mg_graph *g, mg_tensor t, const char *op);
/* Copy a caller's target shape into attributes; errors name op. */
mg_status mgi_attrs_shape_set(mg_attrs *a, int ndim, const int64_t *shape,
                              const char *op);
/* Shape rule checks that leave a reason in why. */
mg_status mgi_shape_check(int ndim, const int64_t *shape, char *why,
                          size_t len);
mg_status mgi_float_check(const mg_tdesc *d, const char *what, char *why,
                          size_t len);
/* Labels and indices: MG_I32 or MG_I64. */
mg_status mgi_index_check(const mg_tdesc *d, const char *what, char *why,
                          size_t len);
/* The rule of ops along one axis of a float x (softmax, cumsum): the axis
 * inside x's dims, the result shaped like x. */
mg_infer_fn mgi_float_axis_infer;
mg_status mgi_float_pair_check(const mg_tdesc *a, const char *a_what,
                               const mg_tdesc *b, const char *b_what, char *why,
                               size_t len);
/* Gradient rules chain builder calls (MG_NO_TENSOR passes through) and
 * check only their results here. */
mg_status mgi_grad_status(int n, const bool *need, const mg_tensor *gin);

/* Negative axes count from the end; one still out of range is kept as
 * given, so the shape rule reports the caller's own number. */
static inline int mg_axis_wrap(int axis, int ndim) {
    return axis < 0 && axis >= -ndim ? axis + ndim : axis;
}

/* The rules, declared through their types (op_table.h); each file
 * defines them with the full signature. */

/* ---- ops_elementwise.c --------------------------------------------------- */
bool mgi_shape_broadcasts_to(const mg_tdesc *from, const mg_tdesc *to);
/* The numpy broadcast of a's and b's shapes into out (dtype a's), or
 * MG_ERR_SHAPE with a reason naming them as a_what and b_what. */
mg_status mgi_broadcast_shape(const mg_tdesc *a, const char *a_what,
                              const mg_tdesc *b, const char *b_what,
                              mg_tdesc *out, char *why, size_t len);
mg_infer_fn mgi_binary_infer, mgi_unary_infer, mgi_pair_infer, mgi_cast_infer;
mg_grad_fn mgi_binary_grad, mgi_unary_grad, mgi_cast_grad;

/* ---- ops_compare.c ------------------------------------------------------- */
mg_infer_fn mgi_compare_infer, mgi_logical_not_infer, mgi_where_infer,
    mgi_clamp_grad_infer;
mg_grad_fn mgi_where_grad, mgi_clamp_grad, mgi_minmax_grad;

/* ---- ops_gather.c -------------------------------------------------------- */
mg_infer_fn mgi_gather_infer, mgi_gather_grad_infer, mgi_index_select_infer,
    mgi_index_select_grad_infer;
mg_grad_fn mgi_gather_grad, mgi_index_select_grad;
mg_workspace_fn mgi_index_select_grad_workspace;

/* ---- ops_scan.c ---------------------------------------------------------- */
mg_grad_fn mgi_cumsum_grad;

/* ---- ops_matmul.c -------------------------------------------------------- */
mg_infer_fn mgi_matmul_infer;
mg_grad_fn mgi_matmul_grad;
mg_flops_fn mgi_matmul_flops;

/* ---- ops_reduce.c -------------------------------------------------------- */
mg_infer_fn mgi_reduce_infer, mgi_broadcast_to_infer;
mg_grad_fn mgi_reduce_grad, mgi_broadcast_to_grad;
mg_flops_fn mgi_reduce_flops;
mg_workspace_fn mgi_reduce_workspace;

/* ---- ops_shape.c --------------------------------------------------------- */
/* Reshape t to d's shape, or return t if it already has it. */
mg_tensor mgi_reshape_as(mg_graph *g, mg_tensor t, const mg_tdesc *d);
mg_infer_fn mgi_reshape_infer, mgi_permute_infer, mgi_fill_infer;
mg_grad_fn mgi_reshape_grad, mgi_permute_grad;

/* ---- ops_softmax.c ------------------------------------------------------- */
mg_grad_fn mgi_softmax_grad;

/* ---- ops_random.c -------------------------------------------------------- */
mg_infer_fn mgi_dropout_infer;
mg_grad_fn mgi_dropout_grad;

/* ---- ops_loss.c ---------------------------------------------------------- */
mg_infer_fn mgi_cross_entropy_infer, mgi_ce_grad_infer, mgi_mse_infer;
mg_workspace_fn mgi_cross_entropy_workspace;
mg_grad_fn mgi_cross_entropy_grad, mgi_mse_grad;
mg_infer_fn mgi_linear_ce_infer, mgi_linear_ce_grad_infer;
mg_flops_fn mgi_linear_ce_flops, mgi_linear_ce_grad_flops;
mg_workspace_fn mgi_linear_ce_workspace, mgi_linear_ce_grad_workspace;
mg_grad_fn mgi_linear_ce_grad;
/* Cost per element of the first input (for ops with scalar outputs). */
mg_flops_fn mgi_loss_flops;

/* ---- ops_conv.c ---------------------------------------------------------- */
/* A float tensor whose rank is the number of dims named in layout, e.g.
 * "[N, C, H, W]"; the message quotes the layout. */
mg_status mgi_rank_check(const mg_tdesc *d, const char *what,
                         const char *layout, char *why, size_t len);
/* Shape rule of a sliding window over x [N, C, H, W] with a's stride, pad
 * and dilation: checks them and writes [N, C, OH, OW] into out. */
mg_status mgi_window_shape(const mg_tdesc *x, const int kernel[2],
                           const mg_attrs *a, mg_tdesc *out, char *why,
                           size_t len);
/* A gradient op's gy must match the output its forward op would have. */
mg_status mgi_grad_shape_check(const mg_tdesc *gy, const mg_tdesc *want,
                               char *why, size_t len);
/* Shape rule of a gradient op (gy, in[1..]) whose output is input 0 of its
 * forward op, with that input's shape kept in a->ndim/shape: runs the
 * forward rule on (that input, in[1..]) and checks gy against its output. */
mg_status mgi_grad_infer_via(mg_infer_fn *forward, const mg_tdesc *in, int n_in,
                             const mg_attrs *a, mg_tdesc *out, char *why,
                             size_t len);
mg_infer_fn mgi_conv2d_infer, mgi_conv2d_grad_input_infer,
    mgi_conv2d_grad_weight_infer;
mg_grad_fn mgi_conv2d_grad;
mg_workspace_fn mgi_conv2d_workspace, mgi_conv2d_grad_input_workspace,
    mgi_conv2d_grad_weight_workspace;
mg_flops_fn mgi_conv2d_flops, mgi_conv2d_grad_input_flops,
    mgi_conv2d_grad_weight_flops;

/* ---- ops_pool.c ---------------------------------------------------------- */
mg_infer_fn mgi_pool2d_infer, mgi_max_pool2d_grad_infer,
    mgi_avg_pool2d_grad_infer;
mg_grad_fn mgi_pool2d_grad;
mg_flops_fn mgi_pool2d_flops, mgi_pool2d_grad_flops;

/* ---- ops_compact.c ------------------------------------------------------- */
mg_infer_fn mgi_pack_sign_infer, mgi_relu_grad_mask_infer,
    mgi_max_pool2d_argmax_infer, mgi_max_pool2d_grad_argmax_infer,
    mgi_pack_bf16_infer, mgi_unpack_bf16_infer;
mg_flops_fn mgi_max_pool2d_argmax_flops;

/* ---- ops_norm.c ---------------------------------------------------------- */
mg_infer_fn mgi_batchnorm_infer, mgi_layernorm_infer,
    mgi_batchnorm_grad_input_infer, mgi_layernorm_grad_input_infer,
    mgi_batchnorm_grad_gamma_infer, mgi_layernorm_grad_gamma_infer;
mg_grad_fn mgi_norm_grad;
mg_flops_fn mgi_norm_flops;
mg_workspace_fn mgi_layernorm_grad_gamma_workspace;
mg_workspace_fn mgi_batchnorm_workspace;
mg_workspace_fn mgi_batchnorm_grad_input_workspace;
mg_workspace_fn mgi_batchnorm_grad_gamma_workspace;

/* ---- ops_slice.c --------------------------------------------------------- */
mg_infer_fn mgi_slice_infer, mgi_pad_infer, mgi_concat_infer;
/* Gradient of slice (a pad) and of pad (a slice). */
mg_grad_fn mgi_window_grad;
mg_grad_fn mgi_concat_grad;

/* ---- ops_embedding.c ----------------------------------------------------- */
mg_infer_fn mgi_embedding_infer, mgi_embedding_grad_infer;
mg_grad_fn mgi_embedding_grad;
mg_flops_fn mgi_embedding_grad_flops;
mg_workspace_fn mgi_embedding_grad_workspace;

/* ---- ops_attention.c ----------------------------------------------------- */
mg_infer_fn mgi_causal_mask_infer, mgi_attention_infer,
    mgi_attention_grad_infer, mgi_attention_grad_mask_infer;
mg_grad_fn mgi_causal_mask_grad, mgi_attention_grad;
mg_flops_fn mgi_attention_flops, mgi_attention_grad_flops,
    mgi_attention_grad_mask_flops;
mg_workspace_fn mgi_attention_workspace, mgi_attention_grad_workspace;

#endif
