/*
 * cpu_kernels.h - private to the CPU backend: the kernel entry points that
 * fill mgi_cpu_kernels[], and the dtype dispatch the kernel files share.
 * What the CUDA kernels share with them (failures, layouts, geometry, the
 * elementwise formulas) is in kernel_shared.h.
 */
#ifndef MG_CPU_KERNELS_H
#define MG_CPU_KERNELS_H

#include "backend/kernel_shared.h"

#include <cblas.h> /* OpenBLAS: openblas_get_parallel */

/* The CPU backend. Its kernel table has an entry for every op. */
mg_status mgi_backend_cpu_init(mg_backend *out);
extern const mg_kernel_fn mgi_cpu_kernels[MG_OP_COUNT];

/* Kernels are written once as a macro over (C type, suffix); this
 * instantiates such a macro for every float dtype. */
#define MG_CPU_FLOAT_TYPES(X) X(float, f32) X(double, f64)

/* Calls fn_f32(...) or fn_f64(...), both returning mg_status; the void data
 * pointers in the arguments convert to the right element type on the way. */
#define MG_CPU_BY_DTYPE(ka, dtype, fn, ...)                                    \
    ((dtype) == MG_F32   ? fn##_f32(__VA_ARGS__)                               \
     : (dtype) == MG_F64 ? fn##_f64(__VA_ARGS__)                               \
                         : mgi_cpu_bad_dtype((ka), (dtype)))

/* Loops over independent elements, rows or groups run on OpenMP's threads
 * (the runtime oneDNN shares; OMP_NUM_THREADS sets the count) when they
 * are big enough to pay for waking them: MG_CPU_PAR_LOOP(work, head, body)
 * runs `head body` (body: the rest of the arguments) as an OpenMP loop where
 * mgi_cpu_par(work) says so, and as a plain loop otherwise (not through an if
 * clause, which still enters the OpenMP runtime, and hides restrict from the
 * vectoriser). Each element is computed by one thread exactly as one thread
 * alone computes it, and no reduction is split across threads, so results do
 * not depend on the thread count. */
#define MG_PAR_MIN ((int64_t)32768)
#ifdef _OPENMP
#include <omp.h>
/* OpenBLAS's own pool (Debian's default build is pthreads) spins for a
 * while after each GEMM, as OpenMP's workers do after a region: with both
 * pools awake on the same cores each waits for the other (an MLP step at 2
 * threads took 348 ms against 94 ms single-threaded elementwise). So
 * memgrad's loops go parallel only where OpenBLAS shares OpenMP's pool
 * (its OpenMP build) or runs on one thread. */
static inline bool mgi_cpu_par(int64_t work) {
    return work >= MG_PAR_MIN && omp_get_max_threads() > 1 &&
           (openblas_get_parallel() != 1 || openblas_get_num_threads() <= 1);
}
#define MG_CPU_PAR_LOOP(work, head, ...)                                       \
    do {                                                                       \
        if (mgi_cpu_par(work)) {                                               \
            _Pragma("omp parallel for schedule(static)") head __VA_ARGS__      \
        } else {                                                               \
            head __VA_ARGS__                                                   \
        }                                                                      \
    } while (0)
#else
#define MG_CPU_PAR_LOOP(work, head, ...)                                       \
    do {                                                                       \
        head __VA_ARGS__                                                       \
    } while (0)
#endif

/* A fixed split for sums that collapse many elements into one value (a
 * full reduction, the losses): n terms are cut into chunks whose length
 * depends on n alone (at least `min_chunk`, at most MG_SPLIT_MAX chunks),
 * each chunk is summed in index order (possibly on its own thread) and
 * the chunk sums are added in chunk order. The bits therefore depend on n,
 * never on the thread count; up to min_chunk terms it is the plain loop. */
#define MG_SPLIT_MAX 256
static inline int64_t mgi_split_chunk(int64_t n, int64_t min_chunk) {
    const int64_t c = (n + MG_SPLIT_MAX - 1) / MG_SPLIT_MAX;
    return c < min_chunk ? min_chunk : c;
}

/* Sum of n contiguous elements in T with eight running partial sums
 * (element j into partial j % 8, the partials added pairwise, then the
 * tail): a fixed order that the compiler keeps in vector registers, where
 * one running sum would wait on each add's latency. */
#define MG_CPU_SUM8_DEF(T, SUF)                                                \
    static inline T mgi_cpu_sum8_##SUF(const T *x, int64_t n) {                \
        T acc[8] = {0};                                                        \
        int64_t j = 0;                                                         \
        for (; j + 8 <= n; j += 8)                                             \
            for (int k = 0; k < 8; k++) acc[k] += x[j + k];                    \
        T s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) +                        \
              ((acc[4] + acc[5]) + (acc[6] + acc[7]));                         \
        for (; j < n; j++) s += x[j];                                          \
        return s;                                                              \
    }
MG_CPU_FLOAT_TYPES(MG_CPU_SUM8_DEF)
#undef MG_CPU_SUM8_DEF

mg_status mgi_cpu_bad_dtype(const mg_kargs *a, mg_dtype d);
/* y[i] = x[offset of i] for every element of y (a->out), walking y in
 * order; l holds x's strides in slot 0 (cpu_shape.c). */
mg_status mgi_cpu_gather(const mg_kargs *a, mg_layout *l);

/* Row-wise softmax helpers shared by softmax and the cross-entropy ops: n
 * elements `stride` apart, stabilised by subtracting the maximum. */
#define MG_CPU_ROW_DECL(T, SUF)                                                \
    T mgi_cpu_logsumexp_minus_##SUF(const T *x, int64_t n, int64_t stride,     \
                                    T v);                                      \
    void mgi_cpu_softmax_row_##SUF(const T *x, T *y, int64_t n,                \
                                   int64_t stride, int log_out);
MG_CPU_FLOAT_TYPES(MG_CPU_ROW_DECL)
#undef MG_CPU_ROW_DECL

/* Kernels, one per op (cpu_kernels.c puts them in the table); the
 * elementwise ones are named by MG_UNARY_OPS and MG_BINARY_OPS. */
#define MG_CPU_ELEMENTWISE_DECL(name, OP, expr)                                \
    mg_status mgi_cpu_##name(const mg_kargs *a);
MG_UNARY_OPS(MG_CPU_ELEMENTWISE_DECL)
MG_BINARY_OPS(MG_CPU_ELEMENTWISE_DECL)
MG_COMPARE_OPS(MG_CPU_ELEMENTWISE_DECL) /* cpu_compare.c */
#undef MG_CPU_ELEMENTWISE_DECL
mg_status mgi_cpu_fill(const mg_kargs *a);
mg_status mgi_cpu_cast(const mg_kargs *a);
mg_status mgi_cpu_matmul(const mg_kargs *a);
mg_status mgi_cpu_attention(const mg_kargs *a);
mg_status mgi_cpu_attention_grad(const mg_kargs *a);
mg_status mgi_cpu_attention_grad_mask(const mg_kargs *a);
mg_status mgi_cpu_sum(const mg_kargs *a);
mg_status mgi_cpu_mean(const mg_kargs *a);
mg_status mgi_cpu_broadcast_to(const mg_kargs *a);
mg_status mgi_cpu_reshape(const mg_kargs *a);
mg_status mgi_cpu_permute(const mg_kargs *a);
mg_status mgi_cpu_softmax(const mg_kargs *a);
mg_status mgi_cpu_log_softmax(const mg_kargs *a);
mg_status mgi_cpu_dropout(const mg_kargs *a);
mg_status mgi_cpu_cross_entropy(const mg_kargs *a);
mg_status mgi_cpu_mse(const mg_kargs *a);
mg_status mgi_cpu_cross_entropy_grad(const mg_kargs *a);
mg_status mgi_cpu_conv2d(const mg_kargs *a);
mg_status mgi_cpu_conv2d_grad_input(const mg_kargs *a);
mg_status mgi_cpu_conv2d_grad_weight(const mg_kargs *a);
/* Bytes of im2col columns the three conv2d kernels need for a. */
size_t mgi_cpu_conv2d_workspace(const mg_kargs *a);
/* The convolution path (cpu_onednn.c), from the environment variable
 * MG_CONV: "im2col", "onednn-plain" (oneDNN on plain layouts) or, by
 * default, "onednn" (oneDNN choosing its layouts, reordered inside the op);
 * the oneDNN ones only where the library was built with it. */
enum { MGI_CONV_ONEDNN, MGI_CONV_ONEDNN_PLAIN, MGI_CONV_IM2COL };
int mgi_cpu_conv_path(void);
/* True where this build has oneDNN. */
bool mgi_onednn_conv_available(void);
/* For a conv2d op that oneDNN takes (f32, a geometry it accepts, a oneDNN
 * path chosen): true, with its workspace bytes in *bytes or, for _run, the
 * op run and its status in *s. False: the im2col path is the one to use. */
bool mgi_onednn_conv_workspace(const mg_kargs *a, size_t *bytes);
typedef struct mgi_onednn_cache mgi_onednn_cache; /* an executor's primitives */
mgi_onednn_cache *mgi_onednn_cache_new(void);     /* NULL without oneDNN */
void mgi_onednn_cache_free(mgi_onednn_cache *c);
bool mgi_onednn_conv_run(mgi_onednn_cache *c, const mg_kargs *a, mg_status *s);
mg_status mgi_cpu_max_pool2d(const mg_kargs *a);
mg_status mgi_cpu_avg_pool2d(const mg_kargs *a);
mg_status mgi_cpu_max_pool2d_grad(const mg_kargs *a);
mg_status mgi_cpu_avg_pool2d_grad(const mg_kargs *a);
/* cpu_compact.c */
mg_status mgi_cpu_pack_sign(const mg_kargs *a);
mg_status mgi_cpu_relu_grad_mask(const mg_kargs *a);
mg_status mgi_cpu_pack_bf16(const mg_kargs *a);
mg_status mgi_cpu_unpack_bf16(const mg_kargs *a);
mg_status mgi_cpu_max_pool2d_argmax(const mg_kargs *a);
mg_status mgi_cpu_max_pool2d_grad_argmax(const mg_kargs *a);
/* The pooling path (cpu_onednn.c), from the environment variable MG_POOL:
 * "loops" (cpu_pool.c), "onednn" (oneDNN's primitives on plain NCHW), or
 * by default oneDNN where it has a JIT kernel for the pool and the loops
 * otherwise; oneDNN only where the library was built with it. */
enum { MGI_POOL_AUTO, MGI_POOL_ONEDNN, MGI_POOL_LOOPS };
int mgi_cpu_pool_path(void);
/* As mgi_onednn_conv_workspace and _run, for the four pooling ops. False:
 * the loops of cpu_pool.c are the ones to use (f64, MG_POOL=loops, a
 * geometry oneDNN refuses or whose divisor it does not have). */
bool mgi_onednn_pool_workspace(const mg_kargs *a, size_t *bytes);
bool mgi_onednn_pool_run(mgi_onednn_cache *c, const mg_kargs *a, mg_status *s);
/* batchnorm and layernorm share kernels that read a->op */
mg_status mgi_cpu_norm(const mg_kargs *a);
mg_status mgi_cpu_norm_grad_input(const mg_kargs *a);
mg_status mgi_cpu_norm_grad_gamma(const mg_kargs *a);
mg_status mgi_cpu_concat(const mg_kargs *a);
mg_status mgi_cpu_slice(const mg_kargs *a);
mg_status mgi_cpu_pad(const mg_kargs *a);
mg_status mgi_cpu_embedding(const mg_kargs *a);
mg_status mgi_cpu_embedding_grad(const mg_kargs *a);
mg_status mgi_cpu_causal_mask(const mg_kargs *a);
/* cpu_loss.c: linear + cross-entropy, chunked */
mg_status mgi_cpu_linear_cross_entropy(const mg_kargs *a);
mg_status mgi_cpu_linear_cross_entropy_grad(const mg_kargs *a);
/* cpu_compare.c */
mg_status mgi_cpu_logical_not(const mg_kargs *a);
mg_status mgi_cpu_where(const mg_kargs *a);
mg_status mgi_cpu_clamp(const mg_kargs *a);
mg_status mgi_cpu_clamp_grad(const mg_kargs *a);
/* cpu_gather.c (mgi_cpu_gather above is the strided copy of cpu_shape.c) */
mg_status mgi_cpu_gather_axis(const mg_kargs *a);
mg_status mgi_cpu_gather_axis_grad(const mg_kargs *a);
mg_status mgi_cpu_index_select(const mg_kargs *a);
mg_status mgi_cpu_index_select_grad(const mg_kargs *a);
/* cpu_scan.c */
mg_status mgi_cpu_cumsum(const mg_kargs *a);

/* cpu_widen.c: ops on bfloat16 and float16 (common/widen.h). run is the
 * backend's float32 dispatch. True when a is such an op, with *s its
 * status; false for every other op. */
typedef mg_status (*mgi_cpu_run_fn)(void *ctx, const mg_kargs *a);
bool mgi_cpu_widen_run(void *ctx, const mg_kargs *a, mgi_cpu_run_fn run,
                       mg_status *s);
/* The workspace of a 16-bit op: its float32 copies plus what f32_query
 * asks for the float32 op; *widened says whether a is such an op (else 0
 * and the caller asks f32_query itself). */
size_t mgi_cpu_widen_workspace(const mg_kargs *a,
                               size_t (*f32_query)(const mg_kargs *a),
                               bool *widened);
/* The float32 bodies that compute through cpu_vmath, over one block of
 * m <= MG_VMATH_BLOCK elements (cpu_elementwise.c): gelu, silu, tanh, exp,
 * sigmoid and erf of x, and gelu's and silu's gradients a * f'(x) over equal
 * shapes; false (nothing written) for any other op. The unfused kernels and
 * the fused chains (cpu_fused.c) both compute through them, so they give
 * the same bits. */
bool mgi_cpu_unary_tile_vec_f32(mg_op op, const float *restrict x,
                                float *restrict y, int64_t m);
bool mgi_cpu_binary_tile_vec_f32(mg_op op, const float *restrict a,
                                 const float *restrict x, float *restrict y,
                                 int64_t m);
/* Runs a fused chain of element-wise ops (mg_kargs.fused): the CPU
 * backend's run_fused (cpu_fused.c). */
mg_status mgi_cpu_fused(const mg_kargs *a);
/* Whether the fused kernel has a body for op. */
bool mgi_cpu_fused_has(mg_op op);

#endif
