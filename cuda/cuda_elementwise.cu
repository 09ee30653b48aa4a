/*
 * cuda_elementwise.cu - the unary maths ops and every two-input elementwise
 * op (arithmetic with numpy broadcasting and the activation gradients): the
 * kernels that the expressions of MG_UNARY_OPS and MG_BINARY_OPS
 * (src/backend/kernel_shared.h) are instantiated in, with the CPU's layouts,
 * so both backends compute and broadcast alike; and cast, with the CPU's
 * conversions (MG_CAST_PAIRS).
 */
#include "cuda_internal.h"

/* ---- unary and binary: the formulas of kernel_shared.h ------------------- */

/* One functor per formula, so each op is its own kernel instantiation. */
#define CU_UNARY_FN(name, OP, expr)                                            \
    struct cu_unary_##name {                                                   \
        template <typename T>                                                  \
        __device__ __forceinline__ T operator()(const T x,                     \
                                                double alpha) const {          \
            (void)alpha;                                                       \
            return (expr);                                                     \
        }                                                                      \
    };
MG_UNARY_OPS(CU_UNARY_FN)
#undef CU_UNARY_FN

#define CU_BINARY_FN(name, OP, expr)                                           \
    struct cu_binary_##name {                                                  \
        template <typename T>                                                  \
        __device__ __forceinline__ T operator()(const T a, const T b) const {  \
            return (expr);                                                     \
        }                                                                      \
    };
MG_BINARY_OPS(CU_BINARY_FN)
#undef CU_BINARY_FN

template <typename T, typename F>
__global__ void k_unary(const T *xs, T *ys, int64_t n, double alpha) {
    const F f;
    CU_FOR(i, n) ys[i] = f(xs[i], alpha);
}

mg_status cu_unary(cu_ctx *c, const mg_kargs *a) {
    const int64_t n = mgi_tdesc_numel(&a->out.d);
    const double alpha = a->attrs ? a->attrs->alpha : 0.0;
    const unsigned b = cu_blocks(n);
    switch (a->op) {
#define CU_UNARY_CASE(name, OP, expr)                                          \
    case MG_OP_##OP:                                                           \
        CU_BY_FLOAT(                                                           \
            a, a->out.d.dtype,                                                 \
            (k_unary<T, cu_unary_##name><<<b, CU_THREADS, 0, c->stream>>>(     \
                (const T *)a->in[0].data, (T *)a->out.data, n, alpha)));       \
        return MG_OK;
        MG_UNARY_OPS(CU_UNARY_CASE)
#undef CU_UNARY_CASE
    default:
        return mg_kernel_fail(a, MG_ERR_INTERNAL, "%s is not a unary op",
                              mgi_op_str(a->op));
    }
}

/* y = f(a, b) with a and b broadcast to y's shape (numpy rules). */
template <typename T, typename F>
__global__ void k_binary(const T *as, const T *bs, T *ys, int64_t n,
                         mg_layout l) {
    const F f;
    CU_FOR(i, n) {
        int64_t oa, ob;
        mg_layout_offsets(&l, i, &oa, &ob);
        ys[i] = f(as[oa], bs[ob]);
    }
}

/* Both operands of y's shape: no offsets to compute, whose 64-bit
 * divisions cost more than the memory traffic (an add or a relu_grad of a
 * ResNet ran at a third of the GPU's bandwidth). */
template <typename T, typename F>
__global__ void k_binary_flat(const T *as, const T *bs, T *ys, int64_t n) {
    const F f;
    CU_FOR(i, n) ys[i] = f(as[i], bs[i]);
}

mg_status cu_binary(cu_ctx *c, const mg_kargs *a) {
    mg_layout l;
    mg_layout_init(&l, &a->out.d);
    mg_layout_broadcast(&l, 0, &a->in[0].d);
    mg_layout_broadcast(&l, 1, &a->in[1].d);
    mg_layout_coalesce(&l);
    const int64_t n = mgi_tdesc_numel(&a->out.d);
    const unsigned b = cu_blocks(n);
    const bool flat = l.ndim == 1 && l.stride[0][0] == 1 && l.stride[1][0] == 1;
    switch (a->op) {
#define CU_BINARY_CASE(name, OP, expr)                                         \
    case MG_OP_##OP:                                                           \
        CU_BY_FLOAT(a, a->out.d.dtype, {                                       \
            const T *x0 = (const T *)a->in[0].data;                            \
            const T *x1 = (const T *)a->in[1].data;                            \
            if (flat)                                                          \
                k_binary_flat<T, cu_binary_##name>                             \
                    <<<b, CU_THREADS, 0, c->stream>>>(x0, x1,                  \
                                                      (T *)a->out.data, n);    \
            else                                                               \
                k_binary<T, cu_binary_##name>                                  \
                    <<<b, CU_THREADS, 0, c->stream>>>(x0, x1,                  \
                                                      (T *)a->out.data, n, l); \
        });                                                                    \
        return MG_OK;
        MG_BINARY_OPS(CU_BINARY_CASE)
#undef CU_BINARY_CASE
    default:
        return mg_kernel_fail(a, MG_ERR_INTERNAL, "%s is not a binary op",
                              mgi_op_str(a->op));
    }
}

/* ---- cast: y = x converted to y's dtype ---------------------------------- */

#define CU_CAST_KERNEL(FT, FROM, TT, TO, CONV)                                 \
    __global__ void k_cast_##FROM##_##TO(const FT *xs, TT *ys, int64_t n) {    \
        CU_FOR(i, n) ys[i] = CONV(TT, xs[i]);                                  \
    }
MG_CAST_PAIRS(CU_CAST_KERNEL)
#undef CU_CAST_KERNEL

mg_status cu_cast(cu_ctx *c, const mg_kargs *a) {
    const int64_t n = mgi_tdesc_numel(&a->out.d);
    const mg_dtype from = a->in[0].d.dtype, to = a->out.d.dtype;
#define CU_CAST_CASE(FT, FROM, TT, TO, CONV)                                   \
    if (from == FROM && to == TO) {                                            \
        k_cast_##FROM##_##TO<<<cu_blocks(n), CU_THREADS, 0, c->stream>>>(      \
            (const FT *)a->in[0].data, (TT *)a->out.data, n);                  \
        return MG_OK;                                                          \
    }
    MG_CAST_PAIRS(CU_CAST_CASE)
#undef CU_CAST_CASE
    return mg_kernel_fail(a, MG_ERR_DTYPE, "cast from %s to %s",
                          mg_dtype_name(from), mg_dtype_name(to));
}
