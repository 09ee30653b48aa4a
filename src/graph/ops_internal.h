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

/* ---- ops_elementwise.c --------------------------------------------------- */
bool mgi_shape_broadcasts_to(const mg_tdesc *from, const mg_tdesc *to);
mg_status mgi_binary_infer(const mg_tdesc *in, int n_in, const mg_attrs *a,
                          mg_tdesc *out, char *why, size_t len);
mg_status mgi_unary_infer(const mg_tdesc *in, int n_in, const mg_attrs *a,
                         mg_tdesc *out, char *why, size_t len);
mg_status mgi_pair_infer(const mg_tdesc *in, int n_in, const mg_attrs *a,
                        mg_tdesc *out, char *why, size_t len);
mg_status mgi_binary_grad(mg_graph *g, const mg_node *node,
                         const mg_tensor *in, mg_tensor y, mg_tensor gy,
                         const bool *need, mg_tensor *gin);
mg_status mgi_unary_grad(mg_graph *g, const mg_node *node,
                        const mg_tensor *in, mg_tensor y, mg_tensor gy,
                        const bool *need, mg_tensor *gin);
mg_status mgi_cast_infer(const mg_tdesc *in, int n_in, const mg_attrs *a,
                         mg_tdesc *out, char *why, size_t len);
mg_status mgi_cast_grad(mg_graph *g, const mg_node *node, const mg_tensor *in,
                        mg_tensor y, mg_tensor gy, const bool *need,
                        mg_tensor *gin);

/* ---- ops_matmul.c -------------------------------------------------------- */
mg_status mgi_matmul_infer(const mg_tdesc *in, int n_in, const mg_attrs *a,
                          mg_tdesc *out, char *why, size_t len);
mg_status mgi_matmul_grad(mg_graph *g, const mg_node *node,
                         const mg_tensor *in, mg_tensor y, mg_tensor gy,
                         const bool *need, mg_tensor *gin);
double mgi_matmul_flops(const mg_tdesc *in, int n_in, const mg_attrs *a,
                       const mg_tdesc *out);

/* ---- ops_reduce.c -------------------------------------------------------- */
mg_status mgi_reduce_infer(const mg_tdesc *in, int n_in, const mg_attrs *a,
                          mg_tdesc *out, char *why, size_t len);
mg_status mgi_reduce_grad(mg_graph *g, const mg_node *node,
                         const mg_tensor *in, mg_tensor y, mg_tensor gy,
                         const bool *need, mg_tensor *gin);
double mgi_reduce_flops(const mg_tdesc *in, int n_in, const mg_attrs *a,
                       const mg_tdesc *out);
mg_status mgi_broadcast_to_infer(const mg_tdesc *in, int n_in,
                                const mg_attrs *a, mg_tdesc *out, char *why,
                                size_t len);
mg_status mgi_broadcast_to_grad(mg_graph *g, const mg_node *node,
                               const mg_tensor *in, mg_tensor y, mg_tensor gy,
                               const bool *need, mg_tensor *gin);

/* ---- ops_shape.c --------------------------------------------------------- */
/* Reshape t to d's shape, or return t if it already has it. */
mg_tensor mgi_reshape_as(mg_graph *g, mg_tensor t, const mg_tdesc *d);
mg_status mgi_reshape_infer(const mg_tdesc *in, int n_in, const mg_attrs *a,
                           mg_tdesc *out, char *why, size_t len);
mg_status mgi_reshape_grad(mg_graph *g, const mg_node *node,
                          const mg_tensor *in, mg_tensor y, mg_tensor gy,
                          const bool *need, mg_tensor *gin);
mg_status mgi_permute_infer(const mg_tdesc *in, int n_in, const mg_attrs *a,
                           mg_tdesc *out, char *why, size_t len);
mg_status mgi_permute_grad(mg_graph *g, const mg_node *node,
                          const mg_tensor *in, mg_tensor y, mg_tensor gy,
                          const bool *need, mg_tensor *gin);
mg_status mgi_fill_infer(const mg_tdesc *in, int n_in, const mg_attrs *a,
                        mg_tdesc *out, char *why, size_t len);

/* ---- ops_softmax.c ------------------------------------------------------- */
mg_status mgi_softmax_infer(const mg_tdesc *in, int n_in, const mg_attrs *a,
                           mg_tdesc *out, char *why, size_t len);
mg_status mgi_softmax_grad(mg_graph *g, const mg_node *node,
                          const mg_tensor *in, mg_tensor y, mg_tensor gy,
                          const bool *need, mg_tensor *gin);

/* ---- ops_random.c -------------------------------------------------------- */
mg_status mgi_dropout_infer(const mg_tdesc *in, int n_in, const mg_attrs *a,
                           mg_tdesc *out, char *why, size_t len);
mg_status mgi_dropout_grad(mg_graph *g, const mg_node *node,
                          const mg_tensor *in, mg_tensor y, mg_tensor gy,
                          const bool *need, mg_tensor *gin);

/* ---- ops_loss.c ---------------------------------------------------------- */
mg_status mgi_cross_entropy_infer(const mg_tdesc *in, int n_in,
                                 const mg_attrs *a, mg_tdesc *out, char *why,
                                 size_t len);
size_t mgi_cross_entropy_workspace(const mg_tdesc *in, int n_in,
                                  const mg_attrs *a, const mg_tdesc *out);
mg_status mgi_cross_entropy_grad(mg_graph *g, const mg_node *node,
                                const mg_tensor *in, mg_tensor y, mg_tensor gy,
                                const bool *need, mg_tensor *gin);
mg_status mgi_ce_grad_infer(const mg_tdesc *in, int n_in, const mg_attrs *a,
                           mg_tdesc *out, char *why, size_t len);
mg_status mgi_mse_infer(const mg_tdesc *in, int n_in, const mg_attrs *a,
                       mg_tdesc *out, char *why, size_t len);
mg_status mgi_mse_grad(mg_graph *g, const mg_node *node,
                      const mg_tensor *in, mg_tensor y, mg_tensor gy,
                      const bool *need, mg_tensor *gin);
/* Cost per element of the first input (for ops with scalar outputs). */
double mgi_loss_flops(const mg_tdesc *in, int n_in, const mg_attrs *a,
                     const mg_tdesc *out);

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
mg_status mgi_grad_infer_via(mg_infer_fn forward, const mg_tdesc *in,
                            int n_in, const mg_attrs *a, mg_tdesc *out,
                            char *why, size_t len);
mg_status mgi_conv2d_infer(const mg_tdesc *in, int n_in, const mg_attrs *a,
                          mg_tdesc *out, char *why, size_t len);
mg_status mgi_conv2d_grad(mg_graph *g, const mg_node *node,
                         const mg_tensor *in, mg_tensor y, mg_tensor gy,
                         const bool *need, mg_tensor *gin);
size_t mgi_conv2d_workspace(const mg_tdesc *in, int n_in, const mg_attrs *a,
                           const mg_tdesc *out);
size_t mgi_conv2d_grad_input_workspace(const mg_tdesc *in, int n_in,
                                      const mg_attrs *a, const mg_tdesc *out);
size_t mgi_conv2d_grad_weight_workspace(const mg_tdesc *in, int n_in,
                                       const mg_attrs *a, const mg_tdesc *out);
double mgi_conv2d_flops(const mg_tdesc *in, int n_in, const mg_attrs *a,
                       const mg_tdesc *out);
mg_status mgi_conv2d_grad_input_infer(const mg_tdesc *in, int n_in,
                                     const mg_attrs *a, mg_tdesc *out,
                                     char *why, size_t len);
double mgi_conv2d_grad_input_flops(const mg_tdesc *in, int n_in,
                                  const mg_attrs *a, const mg_tdesc *out);
mg_status mgi_conv2d_grad_weight_infer(const mg_tdesc *in, int n_in,
                                      const mg_attrs *a, mg_tdesc *out,
                                      char *why, size_t len);
double mgi_conv2d_grad_weight_flops(const mg_tdesc *in, int n_in,
                                   const mg_attrs *a, const mg_tdesc *out);

/* ---- ops_pool.c ---------------------------------------------------------- */
mg_status mgi_pool2d_infer(const mg_tdesc *in, int n_in, const mg_attrs *a,
                          mg_tdesc *out, char *why, size_t len);
mg_status mgi_pool2d_grad(mg_graph *g, const mg_node *node,
                         const mg_tensor *in, mg_tensor y, mg_tensor gy,
                         const bool *need, mg_tensor *gin);
double mgi_pool2d_flops(const mg_tdesc *in, int n_in, const mg_attrs *a,
                       const mg_tdesc *out);
mg_status mgi_max_pool2d_grad_infer(const mg_tdesc *in, int n_in,
                                   const mg_attrs *a, mg_tdesc *out, char *why,
                                   size_t len);
mg_status mgi_avg_pool2d_grad_infer(const mg_tdesc *in, int n_in,
                                   const mg_attrs *a, mg_tdesc *out, char *why,
                                   size_t len);
double mgi_pool2d_grad_flops(const mg_tdesc *in, int n_in, const mg_attrs *a,
                            const mg_tdesc *out);

/* ---- ops_norm.c ---------------------------------------------------------- */
#define MG_NORM_INFER_DECL(name)                                              \
    mg_status mgi_##name##_infer(const mg_tdesc *in, int n_in,                 \
                                const mg_attrs *a, mg_tdesc *out, char *why,  \
                                size_t len);
MG_NORM_INFER_DECL(batchnorm)
MG_NORM_INFER_DECL(layernorm)
MG_NORM_INFER_DECL(batchnorm_grad_input)
MG_NORM_INFER_DECL(layernorm_grad_input)
MG_NORM_INFER_DECL(batchnorm_grad_gamma)
MG_NORM_INFER_DECL(layernorm_grad_gamma)
#undef MG_NORM_INFER_DECL
mg_status mgi_norm_grad(mg_graph *g, const mg_node *node,
                       const mg_tensor *in, mg_tensor y, mg_tensor gy,
                       const bool *need, mg_tensor *gin);
double mgi_norm_flops(const mg_tdesc *in, int n_in, const mg_attrs *a,
                     const mg_tdesc *out);
size_t mgi_layernorm_grad_gamma_workspace(const mg_tdesc *in, int n_in,
                                         const mg_attrs *a,
                                         const mg_tdesc *out);

/* ---- ops_slice.c --------------------------------------------------------- */
mg_status mgi_slice_infer(const mg_tdesc *in, int n_in, const mg_attrs *a,
                         mg_tdesc *out, char *why, size_t len);
mg_status mgi_pad_infer(const mg_tdesc *in, int n_in, const mg_attrs *a,
                       mg_tdesc *out, char *why, size_t len);
/* Gradient of slice (a pad) and of pad (a slice). */
mg_status mgi_window_grad(mg_graph *g, const mg_node *node,
                         const mg_tensor *in, mg_tensor y, mg_tensor gy,
                         const bool *need, mg_tensor *gin);
mg_status mgi_concat_infer(const mg_tdesc *in, int n_in, const mg_attrs *a,
                          mg_tdesc *out, char *why, size_t len);
mg_status mgi_concat_grad(mg_graph *g, const mg_node *node,
                         const mg_tensor *in, mg_tensor y, mg_tensor gy,
                         const bool *need, mg_tensor *gin);

/* ---- ops_embedding.c ----------------------------------------------------- */
mg_status mgi_embedding_infer(const mg_tdesc *in, int n_in, const mg_attrs *a,
                             mg_tdesc *out, char *why, size_t len);
mg_status mgi_embedding_grad(mg_graph *g, const mg_node *node,
                            const mg_tensor *in, mg_tensor y, mg_tensor gy,
                            const bool *need, mg_tensor *gin);
mg_status mgi_embedding_grad_infer(const mg_tdesc *in, int n_in,
                                  const mg_attrs *a, mg_tdesc *out, char *why,
                                  size_t len);
double mgi_embedding_grad_flops(const mg_tdesc *in, int n_in,
                               const mg_attrs *a, const mg_tdesc *out);
size_t mgi_embedding_grad_workspace(const mg_tdesc *in, int n_in,
                                   const mg_attrs *a, const mg_tdesc *out);

/* ---- ops_attention.c ----------------------------------------------------- */
mg_status mgi_causal_mask_infer(const mg_tdesc *in, int n_in,
                               const mg_attrs *a, mg_tdesc *out, char *why,
                               size_t len);
mg_status mgi_causal_mask_grad(mg_graph *g, const mg_node *node,
                              const mg_tensor *in, mg_tensor y, mg_tensor gy,
                              const bool *need, mg_tensor *gin);

#endif
