/*
 * memgrad.h - the public C API of memgrad.
 *
 * memgrad builds a static forward graph, appends its gradient graph with
 * mg_gradients(), compiles a linear schedule for the tensors the caller wants,
 * and runs it from a caching buffer pool, returning each buffer after its
 * last reader as the plan's precomputed release lists say.
 *
 * Conventions (igraph style):
 *   - every call that can fail returns an mg_status (MG_OK == 0) or, for
 *     builder calls, a tensor id that is MG_NO_TENSOR on failure;
 *   - on failure a readable message naming the op or tensor is kept per
 *     thread and read back with mg_last_error();
 *   - a builder call given MG_NO_TENSOR as an input returns MG_NO_TENSOR and
 *     keeps the earlier message, so nested builder calls report the first
 *     error, not a cascade.
 *   - memory the caller hands in (inputs, parameters, output buffers) is
 *     borrowed: memgrad never frees it and writes only the outputs asked for.
 *   - out of memory is MG_ERR_NOMEM from the call that hit it, which then
 *     leaves its objects as they were (docs/errors.md). The exception is
 *     OpenBLAS 0.3.21: its small-matrix sgemm kernel does not check its own
 *     malloc and crashes when it fails, where memgrad cannot catch it.
 *   - a tensor's element count must fit int64_t and its byte size
 *     PTRDIFF_MAX; a shape that would not is MG_ERR_SHAPE.
 */
#ifndef MEMGRAD_H
#define MEMGRAD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* MG_API marks every public function, on a line of its own before the
 * declaration (as GLib's GLIB_AVAILABLE_IN_ALL). libmemgrad is compiled with
 * hidden symbol visibility, so a shared libmemgrad exports exactly what
 * carries MG_API; the exported_symbols test holds it to include/. A Windows
 * DLL build defines MG_BUILD_DLL, and its consumers MG_USE_DLL. */
#ifndef MG_API
#if defined(_WIN32) || defined(__CYGWIN__)
#if defined(MG_BUILD_DLL)
#define MG_API __declspec(dllexport)
#elif defined(MG_USE_DLL)
#define MG_API __declspec(dllimport)
#else
#define MG_API
#endif
#elif defined(__GNUC__) && __GNUC__ >= 4
#define MG_API __attribute__((visibility("default")))
#else
#define MG_API
#endif
#endif

/* Lets the compiler check a printf-style format against its arguments. */
#if defined(__GNUC__)
#define MG_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define MG_PRINTF(fmt, args)
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define MG_VERSION_MAJOR 0
#define MG_VERSION_MINOR 1
#define MG_VERSION_PATCH 0

/* ------------------------------------------------------------------ errors */

typedef enum mg_status {
    MG_OK = 0,
    MG_ERR_INVALID_ARG, /* NULL pointer, bad count, bad attribute value */
    MG_ERR_SHAPE,       /* shapes that do not fit the op */
    MG_ERR_DTYPE,       /* dtypes that do not fit the op */
    MG_ERR_UNKNOWN_ID,  /* a tensor id that is not in the graph */
    MG_ERR_CYCLE,       /* the graph is not acyclic */
    MG_ERR_NOMEM,       /* an allocation failed or the pool limit was hit */
    MG_ERR_UNBOUND,     /* a leaf the schedule reads has no memory bound */
    MG_ERR_NOT_DIFFERENTIABLE, /* a gradient through an op that has none */
    MG_ERR_UNSUPPORTED,        /* valid request that this build cannot do yet */
    MG_ERR_INTERNAL,
    MG_ERR_COMM /* another rank failed or timed out, or MPI
                   returned an error (memgrad_dist.h) */
} mg_status;

/* A constant string naming the status, e.g. "shape mismatch". */
MG_API
const char *mg_status_str(mg_status s);
/* The message of the last failed call on this thread ("" if none). */
MG_API
const char *mg_last_error(void);
/* The status that went with it (MG_OK if none): why a builder returned
 * MG_NO_TENSOR. */
MG_API
mg_status mg_last_status(void);
MG_API
void mg_clear_error(void);
/* Record a printf-style message for mg_last_error() and mg_last_status()
 * on this thread, and return s: for libraries built on memgrad (such as
 * memgrad_dist), so that their errors read like memgrad's own. */
MG_API
mg_status mg_set_error(mg_status s, const char *fmt, ...) MG_PRINTF(2, 3);

/* ------------------------------------------------------------------ tensors */

typedef enum mg_dtype {
    MG_F32 = 0,
    MG_F64 = 1,
    MG_I32 = 2, /* integer labels and indices; not differentiable */
    MG_I64 = 3, /* the same, as int64 (how PyTorch and ONNX hand them) */
    /* 16-bit floats, stored in 2 bytes (src/common/half.h). On the CPU an
     * op computes in float32 and rounds its output once (docs/half.md). */
    MG_BF16 = 4, /* bfloat16: float32's exponent, 8 significant bits */
    MG_F16 = 5   /* IEEE 754 binary16 (float16, "half") */
} mg_dtype;

#define MG_MAX_DIMS 8
/* Tensor ids are small non-negative integers, dense in creation order. */
typedef int32_t mg_tensor;
#define MG_NO_TENSOR ((mg_tensor)-1)

typedef struct mg_graph mg_graph;

MG_API
const char *mg_dtype_name(mg_dtype d);
MG_API
size_t mg_dtype_size(mg_dtype d);

MG_API
mg_graph *mg_graph_new(void); /* NULL on allocation failure */
MG_API
void mg_graph_free(mg_graph *g); /* NULL is accepted */
MG_API
int32_t mg_graph_num_tensors(const mg_graph *g);

/* Leaves. Inputs and parameters get their memory from the caller at run
 * time; shape entries must be >= 1; ndim 0 is a scalar. */
MG_API
mg_tensor mg_input(mg_graph *g, const char *name, mg_dtype dtype, int ndim,
                   const int64_t *shape);
MG_API
mg_tensor mg_param(mg_graph *g, const char *name, mg_dtype dtype, int ndim,
                   const int64_t *shape);
/* A tensor of the given shape filled with one value, computed by the graph. */
MG_API
mg_tensor mg_fill(mg_graph *g, mg_dtype dtype, int ndim, const int64_t *shape,
                  double value);

/* Introspection. Each returns MG_ERR_UNKNOWN_ID for a bad id. */
MG_API
mg_status mg_tensor_shape(const mg_graph *g, mg_tensor t, int *ndim,
                          int64_t shape[MG_MAX_DIMS]);
MG_API
mg_status mg_tensor_dtype(const mg_graph *g, mg_tensor t, mg_dtype *dtype);
MG_API
int64_t mg_tensor_numel(const mg_graph *g, mg_tensor t); /* -1 if bad id */
MG_API
size_t mg_tensor_nbytes(const mg_graph *g, mg_tensor t); /* 0 if bad id */
MG_API
const char *mg_tensor_name(const mg_graph *g, mg_tensor t); /* NULL if none */
MG_API
mg_status mg_tensor_set_name(mg_graph *g, mg_tensor t, const char *name);
MG_API
const char *mg_tensor_op_name(const mg_graph *g, mg_tensor t); /* "matmul" */
/* A 64-bit hash of every attribute of the op computing t (a matmul's
 * transposes, a conv's strides and pads, a dropout's probability, seed and
 * RNG offset, a fill's value, ...; a leaf's are all zero) into *out. Equal
 * attributes hash equal in every process of one byte order; the op kind,
 * dtype, shape and inputs are not in it (mg_tensor_op_name and the calls
 * above give them). Pipeline ranks compare it to agree that their graphs
 * compute the same (memgrad_pipeline.h). */
MG_API
mg_status mg_tensor_attrs_hash(const mg_graph *g, mg_tensor t, uint64_t *out);
MG_API
mg_tensor mg_tensor_find(const mg_graph *g, const char *name);
/* True for tensors that mg_gradients appended. */
MG_API
int mg_tensor_is_backward(const mg_graph *g, mg_tensor t);
/* The inputs of the op producing t: their count (-1 for a bad id), and
 * input k (MG_NO_TENSOR if out of range). */
MG_API
int mg_tensor_num_inputs(const mg_graph *g, mg_tensor t);
MG_API
mg_tensor mg_tensor_input(const mg_graph *g, mg_tensor t, int k);

/* Rewire input `slot` of the op producing `t` to read `src` instead. The
 * shape rule is checked again; this is how importers and rewriters edit a
 * graph, and it is the one way to create a cycle, which mg_plan_compile and
 * mg_gradients then report as MG_ERR_CYCLE. */
MG_API
mg_status mg_tensor_set_input(mg_graph *g, mg_tensor t, int slot,
                              mg_tensor src);

/* Append to dst a copy of the op that computes src's tensor t, reading
 * inputs[k] (tensors of dst, n_inputs of them: mg_tensor_num_inputs(src,
 * t)) in place of its inputs: same op, attributes, dtype and shape (the
 * shape rule is checked again), name and checkpoint tag. A dropout keeps
 * its seed and RNG offset, so the copy draws the same mask, and dst's
 * counter moves past src's so that later dropouts in dst get fresh ones.
 * A leaf (input or parameter) is copied as a leaf of the same kind, name,
 * dtype and shape (n_inputs 0). Tensors that mg_gradients appended are
 * refused (MG_ERR_INVALID_ARG): copy forward graphs, then differentiate
 * the copy. Splitting a graph into pipeline stages is built on it
 * (memgrad_pipeline.h). Returns the new tensor or MG_NO_TENSOR. */
MG_API
mg_tensor mg_graph_copy_op(mg_graph *dst, const mg_graph *src, mg_tensor t,
                           const mg_tensor *inputs, int n_inputs);
/* The cost model's flops for computing t from its inputs (0 for a leaf),
 * as mg_plan_summary counts them; -1 for a NULL graph or a bad id, with
 * the error set naming it. */
MG_API
double mg_tensor_flops(const mg_graph *g, mg_tensor t);

/* ------------------------------------------------------------------ ops
 * Every op builds one output tensor and checks shapes and dtypes now. */

/* Matrix product. 2-D: [M,K] x [K,N]. Batched: a is [..., M, K]; b is either
 * [..., K, N] with the same leading dims or 2-D (shared across the batch).
 * trans_a / trans_b transpose the last two dims of a / b first. An a or b
 * that is a permute swapping only its last two axes (mg_transpose(x, -2,
 * -1)) is read as x with its flag flipped: the GEMM reads x in place, and
 * the permute is computed only for its other readers, if any. The product
 * then does not read the permute, so mg_gradients refuses such a permute
 * as an x (MG_ERR_INVALID_ARG, naming x): list x instead. */
MG_API
mg_tensor mg_matmul(mg_graph *g, mg_tensor a, mg_tensor b, int trans_a,
                    int trans_b);

/* Elementwise with numpy broadcasting. */
MG_API
mg_tensor mg_add(mg_graph *g, mg_tensor a, mg_tensor b);
MG_API
mg_tensor mg_sub(mg_graph *g, mg_tensor a, mg_tensor b);
MG_API
mg_tensor mg_mul(mg_graph *g, mg_tensor a, mg_tensor b);
MG_API
mg_tensor mg_div(mg_graph *g, mg_tensor a, mg_tensor b);

MG_API
mg_tensor mg_neg(mg_graph *g, mg_tensor x);
MG_API
mg_tensor mg_relu(mg_graph *g, mg_tensor x);
MG_API
mg_tensor mg_gelu(mg_graph *g, mg_tensor x); /* tanh approximation */
MG_API
mg_tensor mg_silu(mg_graph *g, mg_tensor x); /* x * sigmoid(x), one op */
MG_API
mg_tensor mg_tanh(mg_graph *g, mg_tensor x);
MG_API
mg_tensor mg_sigmoid(mg_graph *g, mg_tensor x);
MG_API
mg_tensor mg_exp(mg_graph *g, mg_tensor x);
MG_API
mg_tensor mg_log(mg_graph *g, mg_tensor x);
MG_API
mg_tensor mg_sqrt(mg_graph *g, mg_tensor x);
MG_API
mg_tensor mg_scale(mg_graph *g, mg_tensor x, double alpha); /* alpha * x */
/* The error function; exact GELU is 0.5 x (1 + erf(x / sqrt 2)). */
MG_API
mg_tensor mg_erf(mg_graph *g, mg_tensor x);
/* x to a constant power p (finite); x must be positive where p is not an
 * integer, as for pow(). */
MG_API
mg_tensor mg_pow(mg_graph *g, mg_tensor x, double p);
/* x where x > 0, alpha x elsewhere (alpha finite). */
MG_API
mg_tensor mg_leaky_relu(mg_graph *g, mg_tensor x, double alpha);
/* 1 where x != 0, 0 elsewhere (NaN counts as nonzero), in x's float dtype:
 * the 0/1 masks that comparisons and boolean casts become (ONNX import).
 * Its gradient is 0. */
MG_API
mg_tensor mg_is_nonzero(mg_graph *g, mg_tensor x);
/* x converted to dtype, elementwise, same shape (torch's .to(dtype), ONNX
 * Cast). A float becomes an integer truncated toward zero and saturated at
 * the integer's range, NaN becoming 0; int64 to int32 keeps the low bits.
 * To bf16 or f16 a value rounds once, to nearest, ties to even (overflow
 * to infinity). Between float dtypes the gradient is gy cast back; integer
 * tensors get none. */
MG_API
mg_tensor mg_cast(mg_graph *g, mg_tensor x, mg_dtype dtype);

/* More float maths, elementwise (f32 or f64), each with its gradient:
 * 1/x; 1/sqrt(x); sin; cos; |x| (gradient gy sign(x), 0 at x = 0, as
 * PyTorch's). */
MG_API
mg_tensor mg_reciprocal(mg_graph *g, mg_tensor x);
MG_API
mg_tensor mg_rsqrt(mg_graph *g, mg_tensor x);
MG_API
mg_tensor mg_sin(mg_graph *g, mg_tensor x);
MG_API
mg_tensor mg_cos(mg_graph *g, mg_tensor x);
MG_API
mg_tensor mg_abs(mg_graph *g, mg_tensor x);
/* min(max(x, lo), hi), elementwise on a float x, as torch.clamp: either
 * bound may be -INFINITY or INFINITY for none (a NaN bound is
 * MG_ERR_INVALID_ARG); hi wins where lo > hi, and a NaN x stays NaN. The
 * gradient is gy where lo <= x <= hi, 0 elsewhere. */
MG_API
mg_tensor mg_clamp(mg_graph *g, mg_tensor x, double lo, double hi);
/* The larger / smaller of a and b elementwise, with add's broadcasting
 * and float dtypes; a NaN in either gives NaN (torch.maximum). The
 * gradient goes to the operand chosen, half to each on a tie, as
 * PyTorch's. */
MG_API
mg_tensor mg_maximum(mg_graph *g, mg_tensor a, mg_tensor b);
MG_API
mg_tensor mg_minimum(mg_graph *g, mg_tensor a, mg_tensor b);

/* Comparisons a == b, a != b, a < b, a <= b, a > b, a >= b and the
 * logical ops, elementwise with add's broadcasting. a and b must have one
 * dtype, any of the four: mixed ones (f32 with i32, say) are
 * MG_ERR_DTYPE; cast one first. memgrad has no bool dtype: the result is 1
 * where the test holds and 0 elsewhere, in the inputs' dtype. NaN compares
 * as IEEE 754 has it (only != holds). The logical ops read nonzero as true
 * (NaN included). None of them passes a gradient: mg_gradients treats
 * their results as constants, as PyTorch treats its bool tensors. */
MG_API
mg_tensor mg_eq(mg_graph *g, mg_tensor a, mg_tensor b);
MG_API
mg_tensor mg_ne(mg_graph *g, mg_tensor a, mg_tensor b);
MG_API
mg_tensor mg_lt(mg_graph *g, mg_tensor a, mg_tensor b);
MG_API
mg_tensor mg_le(mg_graph *g, mg_tensor a, mg_tensor b);
MG_API
mg_tensor mg_gt(mg_graph *g, mg_tensor a, mg_tensor b);
MG_API
mg_tensor mg_ge(mg_graph *g, mg_tensor a, mg_tensor b);
MG_API
mg_tensor mg_logical_and(mg_graph *g, mg_tensor a, mg_tensor b);
MG_API
mg_tensor mg_logical_or(mg_graph *g, mg_tensor a, mg_tensor b);
MG_API
mg_tensor mg_logical_not(mg_graph *g, mg_tensor x);
/* a where cond is nonzero (NaN counts as nonzero), b elsewhere; the three
 * shapes broadcast together (numpy rules). cond may have any dtype; a and
 * b share one, any of the four, which y has. y takes each element from
 * one side only, so an inf or NaN in the side not taken never reaches it
 * (masked_fill with -inf). cond passes no gradient; a gets gy where cond
 * holds and b where it does not (exact zeros elsewhere), each summed back
 * to its own shape. */
MG_API
mg_tensor mg_where(mg_graph *g, mg_tensor cond, mg_tensor a, mg_tensor b);

/* Reductions over the listed axes (negative axes count from the end; no
 * axes at all means every axis). keepdims keeps reduced axes as size 1. */
MG_API
mg_tensor mg_sum(mg_graph *g, mg_tensor x, int naxes, const int *axes,
                 int keepdims);
MG_API
mg_tensor mg_mean(mg_graph *g, mg_tensor x, int naxes, const int *axes,
                  int keepdims);
/* Repeat x along size-1 (or missing leading) dims to reach `shape`. */
MG_API
mg_tensor mg_broadcast_to(mg_graph *g, mg_tensor x, int ndim,
                          const int64_t *shape);

/* Shape ops. reshape keeps the element count; permute takes perm[ndim]. */
MG_API
mg_tensor mg_reshape(mg_graph *g, mg_tensor x, int ndim, const int64_t *shape);
MG_API
mg_tensor mg_permute(mg_graph *g, mg_tensor x, const int *perm);
/* Swap two axes: a permute. */
MG_API
mg_tensor mg_transpose(mg_graph *g, mg_tensor x, int axis0, int axis1);

/* Softmax and log-softmax along one axis (negative counts from the end). */
MG_API
mg_tensor mg_softmax(mg_graph *g, mg_tensor x, int axis);
MG_API
mg_tensor mg_log_softmax(mg_graph *g, mg_tensor x, int axis);

/* Inverted dropout: keeps each element with probability 1-p and scales it by
 * 1/(1-p). The mask is a pure function of (run seed, op seed, op offset,
 * element index) through a counter-based RNG, so running the op again, or a
 * recomputed copy of it, gives the same mask bit for bit. The graph hands
 * every dropout op its own offset range; `seed` tells ops apart further. */
MG_API
mg_tensor mg_dropout(mg_graph *g, mg_tensor x, double p, uint64_t seed);

/* Mean cross-entropy of logits [N, C] against labels [N] (MG_I32 or MG_I64):
 * a scalar.
 * A label outside [0, C) makes the run fail with MG_ERR_INVALID_ARG. */
MG_API
mg_tensor mg_cross_entropy(mg_graph *g, mg_tensor logits, mg_tensor labels);
/* Mean squared error over all elements: a scalar. */
MG_API
mg_tensor mg_mse(mg_graph *g, mg_tensor pred, mg_tensor target);

/* ------------------------------------------------------------------ ops for
 * convolutional networks and transformers. Images are NCHW; every spatial
 * argument comes as an (h, w) pair. */

/* 2-D cross-correlation (PyTorch's conv2d) of x [N, C, H, W] with
 * w [O, C/groups, KH, KW]: y is [N, O, OH, OW] with
 * OH = (H + 2 pad_h - dilation_h (KH - 1) - 1) / stride_h + 1 (floored),
 * likewise OW. Strides and dilations >= 1, pads >= 0, groups >= 1 dividing
 * C and O. No bias: add one of shape [O, 1, 1], which broadcasts. */
MG_API
mg_tensor mg_conv2d(mg_graph *g, mg_tensor x, mg_tensor w, int stride_h,
                    int stride_w, int pad_h, int pad_w, int dilation_h,
                    int dilation_w, int groups);

/* Max and average pooling of x [N, C, H, W] over kernel_h x kernel_w
 * windows; the output size follows conv2d's rule with dilation 1. Padding
 * may be at most half the kernel, so every window holds part of x. Max
 * pooling never picks padding; on ties its gradient goes to the first
 * maximum in row-major window order, deterministically. Average pooling
 * divides by kernel_h * kernel_w, padding included (PyTorch's default
 * count_include_pad = True). */
MG_API
mg_tensor mg_max_pool2d(mg_graph *g, mg_tensor x, int kernel_h, int kernel_w,
                        int stride_h, int stride_w, int pad_h, int pad_w);
MG_API
mg_tensor mg_avg_pool2d(mg_graph *g, mg_tensor x, int kernel_h, int kernel_w,
                        int stride_h, int stride_w, int pad_h, int pad_w);

/* Pooling with each side's padding and PyTorch's (and ONNX's) ceil_mode and
 * count_include_pad; mg_max_pool2d(x, kh, kw, sh, sw, ph, pw) is
 * mg_max_pool2d_ex with pad_top = pad_bottom = ph, pad_left = pad_right =
 * pw, ceil_mode 0 and count_include_pad 1, likewise mg_avg_pool2d.
 *
 * Along H (W alike) OH = (H + pad_top + pad_bottom - kernel_h) / stride_h
 * + 1, rounded down, or up with ceil_mode; with ceil_mode a last window
 * that would start below x and its top padding (at or past row H) is
 * dropped, as PyTorch drops it. Each pad is at most half its kernel. A
 * ceil_mode window may reach past the bottom padding: that part is outside
 * the op. Max pooling looks only at x's elements. Average pooling divides
 * the window's sum of x by the window clipped to the padded input
 * (padding counted, the ceil overhang not: PyTorch's divisor) when
 * count_include_pad is 1, by the number of x's elements in the window when
 * it is 0. max_pool2d ignores count_include_pad. */
typedef struct mg_pool2d_opts {
    int kernel_h, kernel_w;
    int stride_h, stride_w;
    int pad_top, pad_left, pad_bottom, pad_right;
    int ceil_mode;         /* 0 or 1 */
    int count_include_pad; /* 0 or 1; avg pooling only */
} mg_pool2d_opts;
MG_API
mg_tensor mg_max_pool2d_ex(mg_graph *g, mg_tensor x,
                           const mg_pool2d_opts *opts);
MG_API
mg_tensor mg_avg_pool2d_ex(mg_graph *g, mg_tensor x,
                           const mg_pool2d_opts *opts);

/* Batch normalisation in training mode: x [N, C, ...] is normalised per
 * channel with the mean and biased variance of the batch (over every axis
 * but 1), then y = xhat * gamma[c] + beta[c]; gamma and beta are [C].
 * eps >= 0 is added to the variance. There are no running statistics:
 * an evaluation-mode batchnorm is an affine op (mul and add) of its own. */
MG_API
mg_tensor mg_batchnorm(mg_graph *g, mg_tensor x, mg_tensor gamma,
                       mg_tensor beta, double eps);
/* Layer normalisation over the last n_norm_axes axes of x (1..ndim), with
 * gamma and beta of the shape of those axes. */
MG_API
mg_tensor mg_layernorm(mg_graph *g, mg_tensor x, mg_tensor gamma,
                       mg_tensor beta, int n_norm_axes, double eps);

/* Join n >= 1 tensors along axis (negative counts from the end); all other
 * dims must match. The op takes two inputs, so n tensors make n - 1 concat
 * ops chained left to right, each a full copy of what it has so far (join
 * many at once by concatenating balanced pairs yourself if that matters).
 * n == 1 returns xs[0] itself. */
MG_API
mg_tensor mg_concat(mg_graph *g, int n, const mg_tensor *xs, int axis);
/* Narrow x to [start, start + length) along axis (PyTorch's narrow). */
MG_API
mg_tensor mg_slice(mg_graph *g, mg_tensor x, int axis, int64_t start,
                   int64_t length);
/* Zero padding: before[i] and after[i] (>= 0) zeros around axis i; either
 * array may be NULL for none. Its gradient is a slice, and slice's a pad. */
MG_API
mg_tensor mg_pad(mg_graph *g, mg_tensor x, const int64_t *before,
                 const int64_t *after);

/* Rows of table [V, D] (float) picked by indices (MG_I32 or MG_I64) of any
 * shape (up to MG_MAX_DIMS - 1 dims): y is [..., D]. The table's gradient
 * adds the rows of gy in index order, so repeated indices sum
 * deterministically. An index outside [0, V) makes the run fail with
 * MG_ERR_INVALID_ARG. */
MG_API
mg_tensor mg_embedding(mg_graph *g, mg_tensor table, mg_tensor indices);
/* torch.gather: y has index's shape and x's dtype (any of the four), and
 * y[..., j, ...] = x[..., index[..., j, ...], ...] along axis (negative
 * counts from the end). index is MG_I32 or MG_I64 of x's rank, no larger
 * than x in any dim but axis. x's gradient adds gy at the places the
 * indices name, in index order, so repeated indices sum
 * deterministically. An index outside [0, x's size along axis) makes the
 * run fail with MG_ERR_INVALID_ARG. */
MG_API
mg_tensor mg_gather(mg_graph *g, mg_tensor x, int axis, mg_tensor index);
/* torch.index_select: the slices of x along axis that a 1-D index
 * (MG_I32 or MG_I64) picks, in its order; y is x with that axis resized
 * to the index's length. Gradient and index errors as for mg_gather. */
MG_API
mg_tensor mg_index_select(mg_graph *g, mg_tensor x, int axis, mg_tensor index);
/* Cumulative sum of a float x along axis (negative counts from the end),
 * added in index order; the gradient is the cumulative sum of gy taken
 * from the end of the axis. */
MG_API
mg_tensor mg_cumsum(mg_graph *g, mg_tensor x, int axis);

/* Over the last two axes [L1, L2] of x, entries above the diagonal (column
 * j > row i) become `value`; the others are x's. The gradient is gy with
 * those entries zeroed. */
MG_API
mg_tensor mg_causal_mask(mg_graph *g, mg_tensor x, double value);
/* Scaled dot-product attention softmax(q k^T * scale [+ causal mask]) v as
 * one fused op (FlashAttention's algorithm): q is [..., Lq, d], k [..., Lk,
 * d], v [..., Lk, dv] with equal leading dims; y is [..., Lq, dv]. scale 0
 * means 1/sqrt(d). causal masks column j > row i with -inf, aligned at the
 * top left like PyTorch's is_causal. The op keeps only its output and each
 * row's log-sum-exp (O(Lq) memory, no Lq x Lk scores); its gradient
 * recomputes the scores tile by tile. */
MG_API
mg_tensor mg_attention(mg_graph *g, mg_tensor q, mg_tensor k, mg_tensor v,
                       int causal, double scale);
/* Options of mg_attention_ex; all-zero means mg_attention's defaults. */
typedef struct mg_attention_opts {
    int causal;       /* mask column j > row i (top-left aligned) */
    double scale;     /* 0: 1/sqrt(d) */
    double dropout_p; /* on the attention weights, as PyTorch's dropout_p */
    uint64_t seed;    /* the dropout's op seed, as mg_dropout's */
} mg_attention_opts;
/* mg_attention with an additive mask (MG_NO_TENSOR for none: q's dtype,
 * broadcasting to the scores [..., Lq, Lk], added after the scale; -inf
 * removes a key) and dropout on the weights: weight (b, i, j) is dropped
 * by the counter (b * Lq + i) * Lk + j of the op's range, so the fused op
 * drops what mg_dropout on the composed weights would. The mask's gradient
 * (computed only when asked for) is the scores' gradient summed over the
 * dims it broadcasts across, which costs Lq x Lk per batch entry. opts
 * NULL: the defaults. */
MG_API
mg_tensor mg_attention_ex(mg_graph *g, mg_tensor q, mg_tensor k, mg_tensor v,
                          mg_tensor mask, const mg_attention_opts *opts);
/* Mean over H and W of x [N, C, H, W]: [N, C]. A mean op. */
MG_API
mg_tensor mg_global_avg_pool2d(mg_graph *g, mg_tensor x);
/* Merge axes start_axis.. (negative counts from the end) into one: a
 * reshape, e.g. [N, C, H, W] with start_axis 1 gives [N, C*H*W]. */
MG_API
mg_tensor mg_flatten(mg_graph *g, mg_tensor x, int start_axis);
/* Mean cross-entropy of the logits h w^T against labels, fused so that the
 * logits are never whole: the same scalar as
 * mg_cross_entropy(g, mg_matmul(g, h, w, 0, 1), labels). h is [N, D]
 * (float), w [V, D] of h's dtype (PyTorch's Linear weight layout, no
 * bias), labels [N] (MG_I32 or MG_I64). Both passes make the logits
 * chunk_rows rows at a time in the op's workspace (chunk_rows x V
 * elements, which the plan's peak counts), and the backward pass makes
 * each chunk again from h and w: nothing of size N x V is kept or
 * allocated. chunk_rows 0 picks the default, 2^21 / V rows (at least 1:
 * 8 MiB of float32 logits); more than N is cut to N; a negative one is
 * refused with MG_ERR_INVALID_ARG. The gradients of h
 * and w come from one backward op that adds w's over the chunks in a
 * fixed order, so they are the same bits on every run. A label outside
 * [0, V) makes the run fail with MG_ERR_INVALID_ARG, as mg_cross_entropy
 * does; mg_linear_cross_entropy_ex takes PyTorch's ignore_index. */
MG_API
mg_tensor mg_linear_cross_entropy(mg_graph *g, mg_tensor h, mg_tensor w,
                                  mg_tensor labels, int64_t chunk_rows);
/* Options of mg_linear_cross_entropy_ex; all-zero means
 * mg_linear_cross_entropy's defaults (default chunk, no label ignored). */
typedef struct mg_linear_ce_opts {
    int64_t chunk_rows;   /* as mg_linear_cross_entropy's chunk_rows */
    int has_ignore_index; /* nonzero: rows labelled ignore_index are left out */
    int64_t ignore_index; /* PyTorch's default is -100 */
} mg_linear_ce_opts;
/* mg_linear_cross_entropy with PyTorch's ignore_index, as
 * F.cross_entropy(h @ w.T, labels, ignore_index=i, reduction='mean'): a
 * row whose label is ignore_index adds nothing to the loss, gets a zero
 * gradient row in h and adds nothing to w's, and the mean is over the
 * rows that are not ignored. When every row is ignored the loss is NaN
 * (0 / 0, as PyTorch's) and both gradients are zero (as PyTorch's).
 * ignore_index may lie inside [0, V) (then that class is never learnt);
 * any other label outside [0, V) fails the run with MG_ERR_INVALID_ARG.
 * With an ignore_index the op's workspace is one element larger (the
 * kept-row count, which the CUDA kernels keep on the device). logits:
 * MG_NO_TENSOR, or mg_matmul(g, h, w, 0, 1) itself (anything else is
 * refused with MG_ERR_INVALID_ARG), for a caller that makes the logits
 * anyway (a model that returns them beside its loss): the forward op then
 * reads their rows instead of making chunks (no GEMM, no chunk
 * workspace); the gradient op still makes its chunks from h and w and
 * never reads them, so they need not live into the backward pass, and no
 * gradient flows into them from this op. opts NULL: the defaults. */
MG_API
mg_tensor mg_linear_cross_entropy_ex(mg_graph *g, mg_tensor h, mg_tensor w,
                                     mg_tensor labels, mg_tensor logits,
                                     const mg_linear_ce_opts *opts);

/* ------------------------------------------------------------------ gradients
 */

typedef enum mg_ckpt_policy {
    MG_CKPT_NONE = 0,       /* plain backprop: every activation kept */
    MG_CKPT_COLLECTION = 1, /* the tensors listed by the caller */
    MG_CKPT_MEMORY = 2,     /* articulation points about sqrt(n) apart */
    MG_CKPT_SPEED = 3,      /* keep matmul/conv outputs */
    MG_CKPT_BUDGET = 4      /* least recomputation within budget_bytes */
} mg_ckpt_policy;

/*
 * What the forward pass keeps for the backward pass. Forward tensors that
 * are not kept are freed after their last forward reader, and the backward
 * pass reads recomputed copies instead: each segment between kept tensors is
 * recomputed once, just before the backward ops that need it. Copies replay
 * dropout's seed and offset, so gradients equal plain backprop's bit for bit.
 *
 *   MG_CKPT_COLLECTION  keep the listed tensors plus every tensor tagged with
 *                       mg_tensor_set_checkpoint. Each must be a computed
 *                       tensor that some y depends on, and not a y.
 *   MG_CKPT_MEMORY      keep about sqrt(n) tensors: articulation points of
 *                       the forward graph (igraph), and where the graph has
 *                       too few of them (skip connections), the smallest
 *                       topological cut in each stretch (docs/checkpointing.md)
 *   MG_CKPT_SPEED       keep the outputs of expensive ops (matmul, conv) and
 *                       recompute the cheap ones between them
 *   MG_CKPT_BUDGET      the checkpoints with the least recomputed flops whose
 *                       training step (ys and gradients bound to caller
 *                       memory) has an exact predicted pool peak <=
 *                       budget_bytes (what it covers: below); if none
 *                       fits, MG_ERR_NOMEM with the smallest budget that
 *                       would (docs/checkpointing.md)
 * The ys are always kept; so is an op that cannot be recomputed safely.
 * No policy predicts a higher peak than MG_CKPT_NONE: the choice is
 * planned beside plain backprop's, and where it would need more memory,
 * speed keeps only the expensive outputs that plain backprop's backward
 * pass reads anyway (and the cheap consumers of the others), and any
 * policy that still needs more takes plain backprop's choice (nothing is
 * chosen). Graphs of over 50,000 tensors skip this comparison.
 */
typedef struct mg_checkpoints {
    mg_ckpt_policy policy;
    const mg_tensor *tensors; /* for MG_CKPT_COLLECTION */
    int n_tensors;
    /* MG_CKPT_MEMORY: tensors smaller than this are never chosen (0: any) */
    size_t min_bytes;
    /* MG_CKPT_BUDGET: the most bytes of memgrad's pool that the training
     * step may use. The one meaning of a budget everywhere (mg_plan_options,
     * mg_plan_summary, mg_plan_report, Python, memgrad-plan, memgrad-onnx):
     * the predicted pool peak, in mg_pool_size_class units, of the plan
     * that computes the ys and the gradients with every one of those
     * outputs in caller memory (mg_plan_summary.budget_peak). It covers the
     * activations kept for backward, recomputed copies, intermediate
     * gradients and kernel workspace. It does not cover the parameters and
     * inputs (caller memory), nor the ys and the gradients themselves,
     * which the caller holds: bind them, or add their bytes, when the pool
     * must hold them. The smallest budget that fits, which MG_ERR_NOMEM
     * names, is in the same measure. */
    size_t budget_bytes;
    /* 1: keep compact what a gradient rule reads only in part, under any
     * policy (issue 29): a relu's or leaky relu's input or output that the
     * backward pass reads only for its sign is kept as 1 bit per element,
     * a max pool's input that it reads only for the argmax as 1 byte per
     * output (windows of up to 256 elements), when no other backward op
     * reads the tensor whole. Under MG_CKPT_NONE, also a relu of a
     * batchnorm's output that a conv or matmul reads (whole) is not kept:
     * it is made again from the batchnorm's input, kept anyway for its
     * gradient, when the backward pass reads it (one batchnorm and one
     * relu more). Lossless: the gradients are the same bits,
     * and the predicted peak counts the compact bytes exactly. Costs a
     * pass over each such tensor in the forward pass. Under
     * MG_CKPT_BUDGET the search runs with and without the packs and takes
     * the plan that recomputes less (compacted on a tie), so compaction
     * never fits less or recomputes more; its DP counts a compacted
     * tensor's packs where a stretch is stored. That search costs up to
     * about three times as long: the compacted search walks its DP's grid
     * twice, and the second search is skipped where the compacted plan
     * recomputes nothing. 0 (the default under every policy): off
     * (docs/checkpointing.md#keeping-compact). */
    int compact;
    /* 1: keep float32 activations in 16 bits (bfloat16, rounded to
     * nearest even), as ActNN does: every f32 tensor that the policy keeps
     * for the backward pass, other than the ys and leaves, is packed right
     * after it is computed, and the backward pass reads it unpacked, so
     * the forward pass holds half the bytes. LOSSY: gradient rules read
     * values rounded to 8 significant bits, so the gradients differ from
     * exact ones (bench/results/store16.txt measures by how much). Under a
     * policy that recomputes, recomputation starts from those values too.
     * 0 (the default under every policy): off; exact gradients
     * (docs/checkpointing.md#16-bit-storage). */
    int store16;
    /* 1, MG_CKPT_BUDGET only: host offload (issue 51, docs/offload.md) is
     * a choice beside recomputation. The policy takes the plan with the
     * least predicted step time that fits: recomputed flops at
     * compute_rate, against keeping every activation and offloading the
     * fewest saved tensors that make the step fit, in a fixed order
     * (least exposed copy time first), where a copy costs nothing while
     * the steps beside it hide it at host_bandwidth and its seconds count
     * past that. mg_graph_offloads lists the tensors it chose: compile
     * the step with them as mg_plan_options.offload and the same two
     * rates, every output bound, and its predicted peak is within the
     * budget. Both rates must be > 0 (bytes/s, flops/s). */
    int offload;
    double host_bandwidth;
    double compute_rate;
} mg_checkpoints;

/* A policy's name: "none", "collection", "memory", "speed" or "budget";
 * "?" for a value that is no policy. */
MG_API
const char *mg_ckpt_policy_name(mg_ckpt_policy p);
/* The policy whose mg_ckpt_policy_name is `name` into *out: MG_OK, or
 * MG_ERR_INVALID_ARG (out untouched) for any other string or NULL. */
MG_API
mg_status mg_ckpt_policy_parse(const char *name, mg_ckpt_policy *out);

/* A byte budget written as text, as memgrad-plan and memgrad-onnx take it
 * (--budget): either a byte count, a whole number ("1048576") or a number
 * with a binary suffix K, M or G, also written KiB, MiB or GiB, for 2^10,
 * 2^20 or 2^30 bytes ("64M", "1.5G"; rounded down to whole bytes); or a
 * fraction of plain backprop's peak in the budget's measure (its plan's
 * mg_plan_summary.budget_peak), a number followed by x ("0.25x"). On
 * success, a count sets *bytes and *fraction = 0; a fraction sets *bytes
 * = 0 and *fraction > 0. Anything else (empty, signed, zero, another
 * suffix, too large for size_t) is MG_ERR_INVALID_ARG with a message that
 * quotes the text, the outputs untouched. */
MG_API
mg_status mg_budget_parse(const char *text, size_t *bytes, double *fraction);

/* Tag t (a computed tensor) for MG_CKPT_COLLECTION, or untag it (on = 0). */
MG_API
mg_status mg_tensor_set_checkpoint(mg_graph *g, mg_tensor t, int on);
/* True if t is tagged, or was chosen as a checkpoint by mg_gradients. */
MG_API
int mg_tensor_is_checkpoint(const mg_graph *g, mg_tensor t);
/* True if t is a recomputed copy that mg_gradients made; then
 * mg_tensor_recompute_source gives the forward tensor it recomputes. */
MG_API
int mg_tensor_is_recompute(const mg_graph *g, mg_tensor t);
MG_API
mg_tensor mg_tensor_recompute_source(const mg_graph *g, mg_tensor t);
/* True if t is a compact pack that mg_gradients made under
 * mg_checkpoints.compact (a relu's sign bits, a max pool's argmax) or
 * mg_checkpoints.store16 (the tensor in 16 bits): a forward op of one
 * input, the tensor it encodes, whose backward readers read the pack (or
 * its unpacked copy) instead of that tensor. */
MG_API
int mg_tensor_is_pack(const mg_graph *g, mg_tensor t);
/* The checkpoints chosen by mg_gradients calls on g, in id order: writes up
 * to cap ids to out (out may be NULL when cap is 0) and returns how many
 * there are, or -1 if g is NULL. */
MG_API
int mg_graph_checkpoints(const mg_graph *g, mg_tensor *out, int cap);
/* The tensors the last MG_CKPT_BUDGET mg_gradients call with offload
 * chose to offload (mg_checkpoints.offload), in id order, as
 * mg_graph_checkpoints lists its checkpoints: up to cap into out, the
 * count returned; -1 for a NULL g. */
MG_API
int mg_graph_offloads(const mg_graph *g, mg_tensor *out, int cap);

/*
 * Append the gradient graph of ys with respect to xs and store in
 * grads_out[i] the tensor holding d(sum_j <grad_ys[j], ys[j]>)/d xs[i].
 *
 *   ys, n_ys       tensors to differentiate (float dtypes), n_ys >= 1
 *   grad_ys        NULL, or n_ys seed gradients (same shape and dtype as the
 *                  matching y); MG_NO_TENSOR in a slot, or grad_ys NULL,
 *                  means "ones", which is allowed only for a y with one
 *                  element
 *   xs, n_xs       inputs or parameters (or any float tensor), n_xs >= 1
 *   checkpoints    NULL or policy MG_CKPT_NONE for plain backprop
 *   grads_out      n_xs tensor ids written on success only
 *
 * Gradients from fan-out are summed. An x that no y depends on gets a
 * zero-filled tensor of its shape (as jax.grad does), never MG_NO_TENSOR;
 * but when no y depends on any x at all the call fails with
 * MG_ERR_INVALID_ARG, since every gradient would be zero (a wiring
 * mistake, not a request). On failure the graph is left as it was before
 * the call.
 */
MG_API
mg_status mg_gradients(mg_graph *g, const mg_tensor *ys, int n_ys,
                       const mg_tensor *grad_ys, const mg_tensor *xs, int n_xs,
                       const mg_checkpoints *checkpoints, mg_tensor *grads_out);

/* ------------------------------------------------------------------ output */

/* A readable dump: one line per tensor with id, name, op, inputs, shape. */
MG_API
mg_status mg_graph_dump(const mg_graph *g, FILE *out);
/* Graphviz DOT: ops as boxes, leaves as ellipses, backward ops shaded,
 * checkpoints drawn bold, recomputed copies dashed. */
MG_API
mg_status mg_graph_write_dot(const mg_graph *g, FILE *out);

/* ------------------------------------------------------------------ plans */

/* Caller memory for one tensor: the data of an input or parameter (read
 * only), or the buffer an output is written into. Borrowed, never freed.
 * data must be aligned to the tensor's dtype (4 bytes for f32 and i32, 8
 * for f64 and i64), as malloc'd memory always is; mg_exec_run refuses a
 * misaligned pointer with MG_ERR_INVALID_ARG. */
typedef struct mg_binding {
    mg_tensor tensor;
    void *data;
} mg_binding;

/* A binding carries no element type: mg_exec_run trusts data to hold the
 * tensor's dtype, and an int64 buffer bound to an MG_I32 tensor would be
 * read as int32 pairs. mg_bind makes a binding of data whose element type
 * the caller states, and refuses (MG_ERR_DTYPE, naming the tensor and both
 * types) one that is not the tensor's dtype; *out is written on success
 * only. Bindings made with it are ordinary mg_bindings. */
MG_API
mg_status mg_bind(const mg_graph *g, mg_tensor t, void *data, mg_dtype dtype,
                  mg_binding *out);

typedef struct mg_plan mg_plan;

/* Where a plan runs (mg_plan_options) and an executor lives
 * (mg_exec_options). */
typedef enum mg_device { MG_DEVICE_CPU = 0, MG_DEVICE_CUDA = 1 } mg_device;

typedef struct mg_plan_options {
    /* Extra tensors to keep after the run besides the outputs, e.g. an
     * intermediate gradient (the retain_grad of PyTorch/DeZero). Everything
     * else is released right after its last reader. */
    const mg_tensor *retain;
    int n_retain;
    /* Set for a forward-only (no_grad) run: compiling fails with
     * MG_ERR_INVALID_ARG if an output needs a backward op. */
    int no_grad;
    /* Compile as if mg_gradients had kept every activation: ops read the
     * forward tensors instead of their recomputed copies. Same values; the
     * plain-backprop schedule, to compare memory and time against. */
    int without_recompute;
    /* The budget the graph's gradients were made for (the budget_bytes of
     * the MG_CKPT_BUDGET mg_checkpoints), or 0 for none. Carried by the
     * plan: mg_plan_summary and mg_plan_report compare it with the plan's
     * budget_peak. Nothing else depends on it. */
    size_t budget_bytes;
    /* The device the plan will run on (MG_DEVICE_CPU by default). A plan
     * for MG_DEVICE_CUDA lends cuBLAS a workspace on matmuls whose inner
     * dimension is the longest and whose output is small, so that it can
     * split K (which costs up to 4 outputs' bytes on such a step, counted
     * in every prediction); cuBLAS keeps none of its own. Any plan runs on
     * any executor: a CPU plan on a CUDA executor leaves cuBLAS without a
     * workspace, slower on such products but with the same peak. Every
     * plan for one device gives a product the same workspace, so
     * checkpointed and plain gradients stay bit-equal. An unknown device
     * is MG_ERR_INVALID_ARG. */
    mg_device device;
    /* Host offload (issue 51; docs/offload.md): saved tensors to move out
     * of the device arena between the forward and the backward pass.
     * Each is copied to a host tier outside the arena after its producer,
     * its arena block is freed once that copy completes (and its last
     * forward reader is done), and it is copied back into a fresh arena
     * block before its first backward reader. Every copy, the thread it
     * runs on and the event it waits for are fixed at compile time
     * (mg_plan_dump lists them); the predicted peak counts the prefetch
     * blocks, and mg_plan_offload_info the host bytes. Each must be a
     * tensor the plan computes and releases (not an output or retained
     * tensor), read by some backward step and by no forward step after
     * the first backward reader; otherwise MG_ERR_INVALID_ARG naming it.
     * No copy crosses the boundary between the forward and the backward
     * steps, so such a plan runs in one call (mg_exec_run) or in two
     * (mg_exec_forward, mg_exec_backward: the saved state holds the host
     * copies) with the same copies and the same device peak; one whose
     * forward steps do not all come first runs in one call only
     * (mg_exec_forward: MG_ERR_UNSUPPORTED). The bits read back are the
     * bits written. */
    const mg_tensor *offload;
    int n_offload;
    /* Host copy bandwidth (bytes/s) and compute rate (flops/s) the plan
     * assumes to place each copy back early enough to hide it behind the
     * steps before its reader, and to predict how much of the copies is
     * hidden; 0 for either: copies back are issued one step before their
     * reader and the overlap is reported in steps and flops only. */
    double host_bandwidth;
    double compute_rate;
    /* 0 (the default): where the device's backend has a fused kernel
     * (the CPU's), each chain of element-wise ops (bias add, activation,
     * residual add, their gradients; recomputed copies alike) runs as one
     * step that makes the chain's last tensor, and the chain's other
     * tensors, which nothing else reads, get no buffer. Same bits as the
     * unfused ops; the predicted peak is never higher. The plan then
     * runs only on an executor of a device whose backend fuses (a
     * CPU-compiled plan on a CUDA executor fails with MG_ERR_UNSUPPORTED:
     * compile it for MG_DEVICE_CUDA, or with no_fusion). 1: one step per
     * op (docs/design.md, fusion). */
    int no_fusion;
} mg_plan_options;

/* Compile a linear schedule that computes `outputs` (and opts->retain).
 * Only the ops they need are scheduled; opts may be NULL. The plan refers to
 * g, which must outlive it and must not be edited while it is in use. */
MG_API
mg_status mg_plan_compile(const mg_graph *g, const mg_tensor *outputs,
                          int n_outputs, const mg_plan_options *opts,
                          mg_plan **out);
MG_API
void mg_plan_free(mg_plan *p);
MG_API
int mg_plan_num_steps(const mg_plan *p);
/* The peak of pool bytes in use that mg_exec_run(p, binds, n_binds) will
 * reach, computed from the schedule's liveness before anything runs (in
 * mg_pool_size_class units). Outputs the caller binds memory for are not in
 * the pool and do not count; binds may be NULL when n_binds is 0. Returns 0
 * if p is NULL, and 0 with mg_last_status() set for a negative n_binds
 * (MG_ERR_INVALID_ARG), a binding of a tensor id the plan does not know
 * (MG_ERR_UNKNOWN_ID, as mg_exec_run) or out of memory (MG_ERR_NOMEM). A
 * binding of a known tensor that is not an output is no error: one list
 * serves a run and its prediction. */
MG_API
size_t mg_plan_predicted_peak(const mg_plan *p, const mg_binding *binds,
                              int n_binds);
/* The plan's arena (issue 28). Every buffer that lives and dies within a
 * run (intermediates, recomputed copies, kernel workspace) has an offset
 * in one block, chosen when the plan was compiled: an executor takes that
 * block from the system once, as large as the largest arena of the plans
 * it has run, and a run takes nothing else for them. Outputs and retained
 * tensors outlive the run, so they have blocks of their own (from the
 * pool's cache), and one that the caller holds never pins the arena. */
typedef struct mg_plan_arena {
    size_t bytes;     /* the arena's size */
    size_t live_peak; /* the most of its bytes live at once: no layout of
                         these buffers is smaller */
    size_t reserved;  /* what a new executor's pool reserves after one
                         mg_exec_run of the plan with these bindings:
                         bytes, plus in size classes each output and
                         retained tensor not bound to caller memory
                         (mg_pool_stats.bytes_reserved equals it, unless
                         max_bytes is below bytes: then the run is served
                         block by block from the cache) */
} mg_plan_arena;

/* binds as for mg_plan_predicted_peak. MG_ERR_INVALID_ARG for a NULL p or
 * out, a negative n_binds, or a NULL list with n_binds > 0;
 * MG_ERR_UNKNOWN_ID for a binding of an id the plan does not know. */
MG_API
mg_status mg_plan_arena_info(const mg_plan *p, const mg_binding *binds,
                             int n_binds, mg_plan_arena *out);
/* What a plan offloads (mg_plan_options.offload). Host bytes are counted
 * in mg_pool_size_class units, as the pool counts device bytes. */
typedef struct mg_plan_offload {
    int n_offloaded;        /* tensors copied out and back */
    size_t offloaded_bytes; /* their bytes */
    size_t host_bytes;      /* the host tier's size: what a run reserves */
    size_t host_peak;       /* the most host bytes in use at once
                               (mg_host_stats.peak_bytes_in_use) */
    /* The compute the copies run beside, summed over every copy: steps
     * between a copy's issue and the wait on its event, and their flops
     * (mgi_graph_op_cost's). */
    int overlap_steps;
    double overlap_flops;
    /* With host_bandwidth and compute_rate: the copies' predicted seconds,
     * and how many of them the steps beside them hide (each copy alone;
     * the worker thread runs copies one at a time). 0 without them. */
    double copy_seconds, hidden_seconds;
} mg_plan_offload;

/* MG_ERR_INVALID_ARG for a NULL p or out; a plan without offload gives
 * zeros. */
MG_API
mg_status mg_plan_offload_info(const mg_plan *p, mg_plan_offload *out);

/* The plan's ops in order with the buffers each step releases. */
MG_API
mg_status mg_plan_dump(const mg_plan *p, FILE *out);

/* What a plan does, counted over its steps. Forward steps are those
 * mg_gradients did not add; recompute steps are the copies it made. */
typedef struct mg_plan_summary {
    int n_steps, n_forward, n_recompute, n_backward;
    int n_segments;    /* runs of consecutive recompute steps */
    int n_checkpoints; /* chosen checkpoints the plan computes */
    double forward_flops, recompute_flops, backward_flops;
    size_t predicted_peak;                   /* with the given bindings */
    size_t predicted_peak_without_recompute; /* same, plain backprop */
    size_t budget_bytes; /* mg_plan_options.budget_bytes at compile, or 0 */
    /* The peak in the budget's measure (mg_checkpoints.budget_bytes): every
     * output and retained tensor bound to caller memory, whatever binds
     * says. For a plan of the ys and the gradients of a MG_CKPT_BUDGET
     * mg_gradients call, at most its budget. Counted one step per op, as
     * the budget policy counts on every device: a plan that fuses
     * element-wise chains (mg_plan_options.no_fusion) peaks at most at
     * this figure with those bindings. */
    size_t budget_peak;
} mg_plan_summary;

/* binds as for mg_plan_predicted_peak; a negative n_binds, or a NULL list
 * with n_binds > 0, is MG_ERR_INVALID_ARG. */
MG_API
mg_status mg_plan_summarize(const mg_plan *p, const mg_binding *binds,
                            int n_binds, mg_plan_summary *out);
/* A readable report: the checkpoints, each recompute segment, recomputed
 * ops and flops as a fraction of one forward pass, and the predicted peak
 * beside plain backprop's. */
MG_API
mg_status mg_plan_report(const mg_plan *p, const mg_binding *binds, int n_binds,
                         FILE *out);

/* ------------------------------------------------------------------ running */

typedef struct mg_exec mg_exec;

/* With MG_DEVICE_CUDA, bindings and mg_exec_tensor_data are device pointers. */
typedef struct mg_exec_options {
    mg_device device;
    /* Upper bound on pool bytes in use; 0 means no bound. An allocation past
     * it fails with MG_ERR_NOMEM as a real out-of-memory would. */
    size_t max_bytes;
    /* CPU threads each run uses (memgrad's kernels and oneDNN's); 0 keeps
     * OpenMP's count, whose default is OMP_NUM_THREADS (else every core);
     * more than the larger of that count and the cores counts as that
     * many (plans size oneDNN's scratchpad for it). Set for the calling
     * thread during mg_exec_run and restored after, so
     * executors with different counts may run on different threads at
     * once. Results do not depend on it. OpenBLAS's own pool (Debian's
     * pthreads build) is process-wide: OPENBLAS_NUM_THREADS sets it, and
     * while it has more than one thread memgrad's loops stay serial. */
    int num_threads;
} mg_exec_options;

/* opts may be NULL for the CPU with no limit. */
MG_API
mg_status mg_exec_new(const mg_exec_options *opts, mg_exec **out);
MG_API
void mg_exec_free(mg_exec *ex);

/* Run the plan. Every input/parameter the plan reads must be bound; a
 * binding for one it does not read is ignored, neither read nor checked,
 * so one list serves a forward and a training plan. `seed` feeds the
 * dropout RNG: the same seed gives the same masks. Outputs and retained
 * tensors that were not bound stay in the pool, readable with
 * mg_exec_tensor_data, until mg_exec_release or the next run. If the run
 * fails, each bound output is untouched or holds its final value, never a
 * partial one, and the executor can run again. */
MG_API
mg_status mg_exec_run(mg_exec *ex, const mg_plan *p, const mg_binding *binds,
                      int n_binds, uint64_t seed);
/* Accumulate instead of overwrite (issue 28), as PyTorch's AccumulateGrad
 * adds a gradient into .grad: in the runs of ex from now on (mg_exec_run,
 * mg_exec_forward, mg_exec_backward), each output among ts[0..n) that the
 * run computes and that is bound to caller memory gets its value added
 * into that memory (data += value, one addition per element, by the
 * backend's add kernel) instead of written over it. Outputs in ts that a
 * run does not compute, or that are left in the pool, are computed as
 * usual, so one list serves every plan of a graph. A later call replaces
 * the list; n = 0 ends accumulation. The value is computed into one extra
 * pool block, the accumulation slot, as large as the largest output
 * accumulated so far (counted in bytes_reserved, and in use during the
 * step that computes such an output, so peak_bytes_in_use may pass
 * mg_plan_predicted_peak by up to its size class), then added and the
 * slot is free again. A run whose plan reads an accumulated output in a
 * later step fails with MG_ERR_INVALID_ARG naming both. MG_ERR_INVALID_ARG
 * for a NULL ex, a negative n or a NULL list with n > 0; MG_ERR_UNKNOWN_ID
 * for a negative id. */
MG_API
mg_status mg_exec_accumulate(mg_exec *ex, const mg_tensor *ts, int n);
/* Pointer to the kept value of an output or retained tensor after a run. */
MG_API
mg_status mg_exec_tensor_data(mg_exec *ex, mg_tensor t, const void **data);
/* Return kept outputs to the pool. */
MG_API
void mg_exec_release(mg_exec *ex);

/* ------------------------------------------------------------------ phases
 * A training plan (one with gradient steps) can also run in two calls, as
 * an autograd engine needs: mg_exec_forward computes the forward outputs
 * and returns an mg_saved holding what the backward phase needs (the
 * checkpoints, or under MG_CKPT_NONE the activations); mg_exec_backward
 * later takes the ys' seed gradients as bindings (build the gradients with
 * input tensors as grad_ys) and computes the gradients, recomputing
 * segments as the one-call run does, with the same bits. Several forward
 * phases may be outstanding on one executor, each with its own mg_saved,
 * for micro-batches; accumulate gradients by summing each backward's
 * outputs. Bindings are as for mg_exec_run, and one list may serve both
 * calls: each call ignores those of the other phase. The two phases lay
 * their buffers out in the training plan's arena (mg_plan_arena_info),
 * the saved tensors included, so a forward and its backward reserve what
 * one mg_exec_run does; a second forward phase begun while the first one's
 * saved tensors hold the arena takes its blocks from the pool's cache. */
typedef struct mg_saved mg_saved;

/* Run the forward phase of p. On success *saved owns the forward outputs
 * that were not bound (read them with mg_saved_tensor_data) and the saved
 * tensors, all in ex's pool until mg_saved_free. Memory bound to a forward
 * output that the backward phase reads must stay unchanged until then. */
MG_API
mg_status mg_exec_forward(mg_exec *ex, const mg_plan *p,
                          const mg_binding *binds, int n_binds, uint64_t seed,
                          mg_saved **saved);
/* Run the backward phase of p for a forward phase's saved state, once; the
 * gradients are kept as mg_exec_run's outputs are. Each saved tensor goes
 * back to the pool after its last backward reader; the forward outputs
 * stay in saved until mg_saved_free. A failure before any saved tensor is
 * released (a missing seed, or a forward output exported with
 * mg_saved_export and written since) leaves saved usable for another
 * try. */
MG_API
mg_status mg_exec_backward(mg_exec *ex, const mg_plan *p, mg_saved *saved,
                           const mg_binding *binds, int n_binds);
/* The value of a forward output held by saved. */
MG_API
mg_status mg_saved_tensor_data(const mg_saved *saved, mg_tensor t,
                               const void **data);
/* Pool bytes (size-class units) that saved holds now. */
MG_API
size_t mg_saved_bytes(const mg_saved *saved);
/* Give everything saved still holds back to its executor's pool. A saved
 * state holds a reference on its executor, as an export does: freed after
 * mg_exec_free, it is still safe, and the executor goes when the last
 * saved state and export let go. NULL is accepted. */
MG_API
void mg_saved_free(mg_saved *saved);

/* Predicted peaks of the two phases, in pool bytes as
 * mg_plan_predicted_peak: forward is the peak above what was in use when
 * mg_exec_forward began; saved what its mg_saved then holds; backward the
 * peak of that saved state plus what mg_exec_backward allocates; pair the
 * peak of one forward followed by its backward. */
typedef struct mg_phase_peaks {
    size_t forward, backward, pair, saved;
} mg_phase_peaks;

/* binds and their errors as for mg_plan_arena_info; MG_ERR_INVALID_ARG
 * for a plan without backward steps. */
MG_API
mg_status mg_plan_phase_peaks(const mg_plan *p, const mg_binding *binds,
                              int n_binds, mg_phase_peaks *out);

typedef struct mg_pool_stats {
    size_t bytes_in_use;      /* handed out now (size-class rounded) */
    size_t peak_bytes_in_use; /* since creation or the last reset */
    size_t bytes_reserved;    /* the arena (mg_plan_arena: the largest of
                                 the plans run so far), plus blocks outside
                                 it in use or cached. Outside the arena the
                                 pool gives cached blocks back rather than
                                 let them pass max(peak in use, in use plus
                                 the request being served) */
    uint64_t alloc_calls;     /* requests to the pool */
    uint64_t cache_hits;      /* requests served from cached blocks */
    uint64_t system_allocs;   /* requests that went to the system */
    uint64_t exported_blocks; /* blocks shared with DLPack consumers
                                 (memgrad_dlpack.h), still in use */
    size_t exported_bytes;    /* their bytes, size-class rounded */
} mg_pool_stats;

MG_API
mg_status mg_exec_pool_stats(const mg_exec *ex, mg_pool_stats *out);

/* The executor's host tier: where offloaded tensors wait between their
 * copies (mg_plan_options.offload), in mg_pool_size_class units. On the
 * CPU it is malloc'd memory and the copies run on a worker thread. */
typedef struct mg_host_stats {
    size_t bytes_in_use;      /* held now (0 between runs but for the
                                 forward phases whose saved state holds
                                 offloaded tensors) */
    size_t peak_bytes_in_use; /* since creation or mg_exec_pool_reset_peak */
    size_t bytes_reserved;    /* its size: the largest plan's host_bytes,
                                 plus a block per outstanding forward
                                 phase beyond the first that offloads */
    uint64_t copies_out, copies_in; /* copies completed, all runs */
} mg_host_stats;

MG_API
mg_status mg_exec_host_stats(const mg_exec *ex, mg_host_stats *out);
MG_API
void mg_exec_pool_reset_peak(mg_exec *ex);
/* Give cached free blocks back to the system, and the arena (the next run
 * takes a new one). */
MG_API
void mg_exec_pool_trim(mg_exec *ex);
/* The size a request of `nbytes` occupies in the pool (its size class). */
MG_API
size_t mg_pool_size_class(size_t nbytes);

#ifdef __cplusplus
}
#endif
#endif
