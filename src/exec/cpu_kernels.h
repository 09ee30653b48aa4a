/*
 * cpu_kernels.h - private to the CPU backend: the kernel entry points that
 * fill mg_cpu_kernels[], and the helpers the kernel files share (dtype
 * dispatch, failure messages, strided iteration).
 */
#ifndef MG_CPU_KERNELS_H
#define MG_CPU_KERNELS_H

#include "backend.h"

/* Kernels are written once as a macro over (C type, suffix); this
 * instantiates such a macro for every float dtype. */
#define MG_CPU_FLOAT_TYPES(X) X(float, f32) X(double, f64)

/* Calls fn_f32(...) or fn_f64(...), both returning mg_status; the void data
 * pointers in the arguments convert to the right element type on the way. */
#define MG_CPU_BY_DTYPE(ka, dtype, fn, ...)                                   \
    ((dtype) == MG_F32   ? fn##_f32(__VA_ARGS__)                             \
     : (dtype) == MG_F64 ? fn##_f64(__VA_ARGS__)                             \
                         : mg_cpu_bad_dtype((ka), (dtype)))

/* Kernels never touch the thread's last-error message: the executor owns it
 * and adds the op and tensor names, so they only leave a reason in a->why. */
mg_status mg_cpu_fail(const mg_kargs *a, mg_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
mg_status mg_cpu_bad_dtype(const mg_kargs *a, mg_dtype d);
/* Kernels that index with int32 data check all of it before reading
 * anything: fails unless every idx[p] is in [0, bound), naming an entry as
 * `what` and its place as `where` ("index 7 at position 2 is outside
 * [0, 5)"). */
mg_status mg_cpu_check_indices(const mg_kargs *a, const int32_t *idx,
                               int64_t n, int64_t bound, const char *what,
                               const char *where);

/*
 * A contiguous iteration domain of `ndim` dims plus the element strides at
 * which two companion operands are visited alongside it. Broadcasting gives
 * a companion stride 0 on repeated dims; permute gives it shuffled strides;
 * a reduction walks its input and accumulates into an output whose reduced
 * dims have stride 0. Slots that are not used keep stride 0.
 */
typedef struct mg_cpu_layout {
    int ndim;
    int64_t shape[MG_MAX_DIMS];
    int64_t stride[2][MG_MAX_DIMS];
} mg_cpu_layout;

/* Domain = d's shape (a scalar becomes [1]); all strides 0. */
void mg_cpu_layout_init(mg_cpu_layout *l, const mg_tdesc *d);
/* Strides of contiguous `in` read as if broadcast to the domain (numpy
 * rules: aligned from the right, size-1 and missing dims repeat). */
void mg_cpu_layout_broadcast(mg_cpu_layout *l, int slot, const mg_tdesc *in);
/* Drops size-1 dims and merges dims that are contiguous in every slot, so
 * inner loops run as long as possible (equal shapes become one flat dim). */
void mg_cpu_layout_coalesce(mg_cpu_layout *l);

/* Number of rows of the last dim, the unit the kernels loop over. */
static inline int64_t mg_cpu_layout_rows(const mg_cpu_layout *l) {
    int64_t rows = 1;
    for (int d = 0; d + 1 < l->ndim; d++) rows *= l->shape[d];
    return rows;
}

/* Advances idx/off to the next row (an odometer over all but the last dim). */
static inline void mg_cpu_layout_next(const mg_cpu_layout *l, int64_t *idx,
                                      int64_t off[2]) {
    for (int d = l->ndim - 2; d >= 0; d--) {
        off[0] += l->stride[0][d];
        off[1] += l->stride[1][d];
        if (++idx[d] < l->shape[d]) return;
        off[0] -= l->stride[0][d] * l->shape[d];
        off[1] -= l->stride[1][d] * l->shape[d];
        idx[d] = 0;
    }
}

/* Row-wise softmax helpers shared by softmax and the cross-entropy ops: n
 * elements `stride` apart, stabilised by subtracting the maximum. */
#define MG_CPU_ROW_DECL(T, SUF)                                               \
    T mg_cpu_logsumexp_minus_##SUF(const T *x, int64_t n, int64_t stride,    \
                                   T v);                                      \
    void mg_cpu_softmax_row_##SUF(const T *x, T *y, int64_t n,               \
                                  int64_t stride, int log_out);
MG_CPU_FLOAT_TYPES(MG_CPU_ROW_DECL)
#undef MG_CPU_ROW_DECL

/* Kernels, one per op (cpu_kernels.c puts them in the table). */
mg_status mg_cpu_fill(const mg_kargs *a);
mg_status mg_cpu_matmul(const mg_kargs *a);
mg_status mg_cpu_add(const mg_kargs *a);
mg_status mg_cpu_sub(const mg_kargs *a);
mg_status mg_cpu_mul(const mg_kargs *a);
mg_status mg_cpu_div(const mg_kargs *a);
mg_status mg_cpu_neg(const mg_kargs *a);
mg_status mg_cpu_relu(const mg_kargs *a);
mg_status mg_cpu_gelu(const mg_kargs *a);
mg_status mg_cpu_tanh(const mg_kargs *a);
mg_status mg_cpu_sigmoid(const mg_kargs *a);
mg_status mg_cpu_exp(const mg_kargs *a);
mg_status mg_cpu_log(const mg_kargs *a);
mg_status mg_cpu_sqrt(const mg_kargs *a);
mg_status mg_cpu_scale(const mg_kargs *a);
mg_status mg_cpu_sum(const mg_kargs *a);
mg_status mg_cpu_mean(const mg_kargs *a);
mg_status mg_cpu_broadcast_to(const mg_kargs *a);
mg_status mg_cpu_reshape(const mg_kargs *a);
mg_status mg_cpu_permute(const mg_kargs *a);
mg_status mg_cpu_softmax(const mg_kargs *a);
mg_status mg_cpu_log_softmax(const mg_kargs *a);
mg_status mg_cpu_dropout(const mg_kargs *a);
mg_status mg_cpu_cross_entropy(const mg_kargs *a);
mg_status mg_cpu_mse(const mg_kargs *a);
mg_status mg_cpu_relu_grad(const mg_kargs *a);
mg_status mg_cpu_gelu_grad(const mg_kargs *a);
mg_status mg_cpu_tanh_grad(const mg_kargs *a);
mg_status mg_cpu_sigmoid_grad(const mg_kargs *a);
mg_status mg_cpu_cross_entropy_grad(const mg_kargs *a);
mg_status mg_cpu_conv2d(const mg_kargs *a);
mg_status mg_cpu_conv2d_grad_input(const mg_kargs *a);
mg_status mg_cpu_conv2d_grad_weight(const mg_kargs *a);
mg_status mg_cpu_max_pool2d(const mg_kargs *a);
mg_status mg_cpu_avg_pool2d(const mg_kargs *a);
mg_status mg_cpu_max_pool2d_grad(const mg_kargs *a);
mg_status mg_cpu_avg_pool2d_grad(const mg_kargs *a);
/* batchnorm and layernorm share kernels that read a->op */
mg_status mg_cpu_norm(const mg_kargs *a);
mg_status mg_cpu_norm_grad_input(const mg_kargs *a);
mg_status mg_cpu_norm_grad_gamma(const mg_kargs *a);
mg_status mg_cpu_concat(const mg_kargs *a);
mg_status mg_cpu_slice(const mg_kargs *a);
mg_status mg_cpu_pad(const mg_kargs *a);
mg_status mg_cpu_embedding(const mg_kargs *a);
mg_status mg_cpu_embedding_grad(const mg_kargs *a);
mg_status mg_cpu_causal_mask(const mg_kargs *a);

#endif
