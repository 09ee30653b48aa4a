/*
 * ir.h - the vocabulary shared by the graph, the rewriter and the backends:
 * the op enum, tensor descriptors, op attributes and error helpers.
 *
 * Kernels see only these types, never a graph: a backend is handed an op
 * code, its attributes and descriptors plus pointers for inputs and output.
 */
#ifndef MG_IR_H
#define MG_IR_H

#include "memgrad.h"

#include <stdarg.h>
#include <stdbool.h>

#define MG_MAX_INPUTS 6

/* One line per op: enum suffix and printed name. The op table in
 * src/graph/op_table.c and each backend's kernel table are indexed by it.
 * Ops after DROPOUT whose names contain _GRAD are backward helpers built
 * only by gradient rules. The next four are the compact saved forms
 * (op_table.h: mg_saved_form), built only by the compaction pass; the two
 * after them keep float32 activations in 16 bits (mg_checkpoints.store16),
 * built only by the recompute pass (src/rewrite/recompute.c). Ops added
 * later go at the end, whatever their kind, so that the codes above keep
 * their values; their *_GRAD entries are backward helpers too. */
#define MG_OP_LIST(X)                                                          \
    X(INPUT, "input")                                                          \
    X(PARAM, "param")                                                          \
    X(FILL, "fill")                                                            \
    X(MATMUL, "matmul")                                                        \
    X(ADD, "add")                                                              \
    X(SUB, "sub")                                                              \
    X(MUL, "mul")                                                              \
    X(DIV, "div")                                                              \
    X(NEG, "neg")                                                              \
    X(RELU, "relu")                                                            \
    X(GELU, "gelu")                                                            \
    X(SILU, "silu")                                                            \
    X(TANH, "tanh")                                                            \
    X(SIGMOID, "sigmoid")                                                      \
    X(EXP, "exp")                                                              \
    X(LOG, "log")                                                              \
    X(SQRT, "sqrt")                                                            \
    X(ERF, "erf")                                                              \
    X(POW, "pow")                                                              \
    X(LEAKY_RELU, "leaky_relu")                                                \
    X(IS_NONZERO, "is_nonzero")                                                \
    X(SCALE, "scale")                                                          \
    X(SUM, "sum")                                                              \
    X(MEAN, "mean")                                                            \
    X(BROADCAST_TO, "broadcast_to")                                            \
    X(RESHAPE, "reshape")                                                      \
    X(PERMUTE, "permute")                                                      \
    X(SOFTMAX, "softmax")                                                      \
    X(LOG_SOFTMAX, "log_softmax")                                              \
    X(DROPOUT, "dropout")                                                      \
    X(CROSS_ENTROPY, "cross_entropy")                                          \
    X(MSE, "mse")                                                              \
    X(RELU_GRAD, "relu_grad")                                                  \
    X(GELU_GRAD, "gelu_grad")                                                  \
    X(SILU_GRAD, "silu_grad")                                                  \
    X(TANH_GRAD, "tanh_grad")                                                  \
    X(SIGMOID_GRAD, "sigmoid_grad")                                            \
    X(CROSS_ENTROPY_GRAD, "cross_entropy_grad")                                \
    X(CONV2D, "conv2d")                                                        \
    X(MAX_POOL2D, "max_pool2d")                                                \
    X(AVG_POOL2D, "avg_pool2d")                                                \
    X(BATCHNORM, "batchnorm")                                                  \
    X(LAYERNORM, "layernorm")                                                  \
    X(CONCAT, "concat")                                                        \
    X(SLICE, "slice")                                                          \
    X(PAD, "pad")                                                              \
    X(EMBEDDING, "embedding")                                                  \
    X(CAUSAL_MASK, "causal_mask")                                              \
    X(CAST, "cast")                                                            \
    X(CONV2D_GRAD_INPUT, "conv2d_grad_input")                                  \
    X(CONV2D_GRAD_WEIGHT, "conv2d_grad_weight")                                \
    X(MAX_POOL2D_GRAD, "max_pool2d_grad")                                      \
    X(AVG_POOL2D_GRAD, "avg_pool2d_grad")                                      \
    X(BATCHNORM_GRAD_INPUT, "batchnorm_grad_input")                            \
    X(BATCHNORM_GRAD_GAMMA, "batchnorm_grad_gamma")                            \
    X(LAYERNORM_GRAD_INPUT, "layernorm_grad_input")                            \
    X(LAYERNORM_GRAD_GAMMA, "layernorm_grad_gamma")                            \
    X(EMBEDDING_GRAD, "embedding_grad")                                        \
    X(ATTENTION, "attention")                                                  \
    X(ATTENTION_GRAD, "attention_grad")                                        \
    X(ATTENTION_GRAD_MASK, "attention_grad_mask")                              \
    X(PACK_SIGN, "pack_sign")                                                  \
    X(RELU_GRAD_MASK, "relu_grad_mask")                                        \
    X(MAX_POOL2D_ARGMAX, "max_pool2d_argmax")                                  \
    X(MAX_POOL2D_GRAD_ARGMAX, "max_pool2d_grad_argmax")                        \
    X(PACK_BF16, "pack_bf16")                                                  \
    X(UNPACK_BF16, "unpack_bf16")                                              \
    X(LINEAR_CROSS_ENTROPY, "linear_cross_entropy")                            \
    X(LINEAR_CROSS_ENTROPY_GRAD, "linear_cross_entropy_grad")              \
    X(RECIPROCAL, "reciprocal")                                                \
    X(RSQRT, "rsqrt")                                                          \
    X(SIN, "sin")                                                              \
    X(COS, "cos")                                                              \
    X(ABS, "abs")                                                              \
    X(ABS_GRAD, "abs_grad")                                                    \
    X(CLAMP, "clamp")                                                          \
    X(CLAMP_GRAD, "clamp_grad")                                                \
    X(MAXIMUM, "maximum")                                                      \
    X(MINIMUM, "minimum")                                                      \
    X(EQ, "eq")                                                                \
    X(NE, "ne")                                                                \
    X(LT, "lt")                                                                \
    X(LE, "le")                                                                \
    X(GT, "gt")                                                                \
    X(GE, "ge")                                                                \
    X(LOGICAL_AND, "logical_and")                                              \
    X(LOGICAL_OR, "logical_or")                                                \
    X(LOGICAL_NOT, "logical_not")                                              \
    X(WHERE, "where")                                                          \
    X(GATHER, "gather")                                                        \
    X(GATHER_GRAD, "gather_grad")                                              \
    X(INDEX_SELECT, "index_select")                                            \
    X(INDEX_SELECT_GRAD, "index_select_grad")                                  \
    X(CUMSUM, "cumsum")

typedef enum mg_op {
#define MG_OP_ENUM(e, s) MG_OP_##e,
    MG_OP_LIST(MG_OP_ENUM)
#undef MG_OP_ENUM
        MG_OP_COUNT
} mg_op;

/* dtype and static shape of a tensor. ndim 0 is a scalar. */
typedef struct mg_tdesc {
    mg_dtype dtype;
    int ndim;
    int64_t shape[MG_MAX_DIMS];
} mg_tdesc;

/* Attributes of every op in one flat struct; each op reads its own fields.
 * A field added here must be added to mg_tensor_attrs_hash (graph.c). */
typedef struct mg_attrs {
    int trans_a, trans_b; /* matmul */
    int naxes;            /* sum, mean: sorted, non-negative, unique */
    int axes[MG_MAX_DIMS];
    int keepdims;
    int perm[MG_MAX_DIMS]; /* permute */
    int axis;              /* softmax, gather, index_select, cumsum: >= 0 */
    int reverse;           /* cumsum: sum from the end of the axis */
    double lo, hi;         /* clamp, clamp_grad: bounds, may be infinite */
    int ndim;              /* reshape, broadcast_to, fill: target */
    mg_dtype dtype;        /* fill: element type */
    int64_t shape[MG_MAX_DIMS];
    double alpha;          /* scale factor; fill value; attention's scale */
    double p;              /* dropout (and attention's) probability */
    uint64_t seed, offset; /* dropout: op seed and RNG counter base */
    int causal;            /* attention: mask column j > row i */
    /* conv2d, pools and their gradient ops, as (h, w) pairs. Pools set
     * dilation to 1 so that one window rule serves them all. */
    int stride[2], pad[2], dilation[2];
    int kernel[2]; /* pool window; conv2d_grad_weight: w's */
    /* pools: pad above is the top and left padding, pad_end the bottom and
     * right; ceil_mode rounds the output size up; count_include_pad makes
     * avg pooling divide by the window clipped to the padded x rather than
     * by the number of x elements in it */
    int pad_end[2], ceil_mode, count_include_pad;
    int groups;      /* conv2d: channel groups */
    double eps;      /* batchnorm, layernorm: added to variance */
    int n_norm_axes; /* layernorm: trailing axes normalised */
    /* slice: where the window starts in x; pad: where x starts in y */
    int64_t start[MG_MAX_DIMS];
    /* ndim/shape above also carry the output shape of ops that cannot infer
     * it from their inputs: slice and pad, conv2d_grad_input and
     * avg_pool2d_grad (x's shape), embedding_grad (the table's). concat's
     * axis is in axis. */
    /* linear_cross_entropy and its gradient: rows of logits made at a time
     * (>= 1, at most the row count; the builder resolves 0 to its default),
     * which sets the op's workspace; with has_ignore_index, rows labelled
     * ignore_index add nothing and the mean is over the other rows
     * (PyTorch's ignore_index) */
    int64_t chunk_rows;
    int has_ignore_index;
    int64_t ignore_index;
} mg_attrs;

/* The element count, or -1 when it does not fit int64_t (or a dim is
 * negative). */
int64_t mgi_tdesc_numel(const mg_tdesc *d);
/* True when the element count fits int64_t and the byte size PTRDIFF_MAX:
 * every tensor in a graph does (mgi_graph_add_node checks). */
bool mgi_tdesc_fits(const mg_tdesc *d);
/* The byte size; SIZE_MAX (an allocation that must fail) if it does not
 * fit. */
size_t mgi_tdesc_nbytes(const mg_tdesc *d);
bool mgi_tdesc_same_shape(const mg_tdesc *a, const mg_tdesc *b);
/* Writes "[2,3,4]" into buf. Returns buf. */
char *mgi_shape_str(const mg_tdesc *d, char *buf, size_t len);
/* The float dtypes (f32, f64, bf16, f16), and the 16-bit ones among them. */
static inline bool mgi_dtype_is_float(mg_dtype d) {
    return d == MG_F32 || d == MG_F64 || d == MG_BF16 || d == MG_F16;
}
static inline bool mgi_dtype_is_half(mg_dtype d) {
    return d == MG_BF16 || d == MG_F16;
}
const char *mgi_op_str(mg_op op);

/* mg_set_error, which records a message for mg_last_error(), is public
 * (memgrad.h); its va_list form is not. */
mg_status mgi_set_errorv(mg_status s, const char *fmt, va_list ap);

/* Counter-based RNG (mg_rng_hash, mg_rng_key, mg_rng_uniform): pure
 * inline functions in rng.h, shared with the CUDA kernels. Used by dropout
 * on every backend so that masks agree across devices and recomputation. */
#include "rng.h"

#endif
