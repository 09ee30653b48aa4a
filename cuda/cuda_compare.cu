/*
 * cuda_compare.cu - the CUDA kernels of ops_compare.c's ops, with the CPU's
 * formulas and layouts (src/backend/kernel_shared.h): the comparisons and
 * logical ops of MG_COMPARE_OPS in every dtype, logical_not, where (a copy
 * of each element's bits from the side cond picks), clamp and clamp_grad.
 * maximum and minimum are MG_BINARY_OPS entries (cuda_elementwise.cu).
 */
#include "cuda_internal.h"

/* Dispatch on any of the four dtypes: the statements run with T defined. */
#define CU_BY_ANY(a, dtype, ...)                                               \
    do {                                                                       \
        if ((dtype) == MG_F32) {                                               \
            typedef float T;                                                   \
            __VA_ARGS__;                                                       \
        } else if ((dtype) == MG_F64) {                                        \
            typedef double T;                                                  \
            __VA_ARGS__;                                                       \
        } else if ((dtype) == MG_I32) {                                        \
            typedef int32_t T;                                                 \
            __VA_ARGS__;                                                       \
        } else if ((dtype) == MG_I64) {                                        \
            typedef int64_t T;                                                 \
            __VA_ARGS__;                                                       \
        } else {                                                               \
            return mg_kernel_fail((a), MG_ERR_DTYPE,                           \
                                  "the CUDA kernel has no %s version",         \
                                  mg_dtype_name(dtype));                       \
        }                                                                      \
    } while (0)

/* ---- comparisons and logical ops ----------------------------------------- */

#define CU_COMPARE_FN(name, OP, expr)                                          \
    struct cu_compare_##name {                                                 \
        template <typename T>                                                  \
        __device__ __forceinline__ T operator()(const T a, const T b) const {  \
            return (expr) ? (T)1 : (T)0;                                       \
        }                                                                      \
    };
MG_COMPARE_OPS(CU_COMPARE_FN)
#undef CU_COMPARE_FN

template <typename T, typename F>
__global__ void k_compare(const T *as, const T *bs, T *ys, int64_t n,
                          mg_layout l) {
    const F f;
    CU_FOR(i, n) {
        int64_t oa, ob;
        mg_layout_offsets(&l, i, &oa, &ob);
        ys[i] = f(as[oa], bs[ob]);
    }
}

mg_status cu_compare(cu_ctx *c, const mg_kargs *a) {
    mg_layout l;
    mg_layout_init(&l, &a->out.d);
    mg_layout_broadcast(&l, 0, &a->in[0].d);
    mg_layout_broadcast(&l, 1, &a->in[1].d);
    mg_layout_coalesce(&l);
    const int64_t n = mgi_tdesc_numel(&a->out.d);
    const unsigned b = cu_blocks(n);
    switch (a->op) {
#define CU_COMPARE_CASE(name, OP, expr)                                        \
    case MG_OP_##OP:                                                           \
        CU_BY_ANY(                                                             \
            a, a->out.d.dtype,                                                 \
            (k_compare<T, cu_compare_##name><<<b, CU_THREADS, 0, c->stream>>>( \
                (const T *)a->in[0].data, (const T *)a->in[1].data,            \
                (T *)a->out.data, n, l)));                                     \
        return MG_OK;
        MG_COMPARE_OPS(CU_COMPARE_CASE)
#undef CU_COMPARE_CASE
    default:
        return mg_kernel_fail(a, MG_ERR_INTERNAL, "%s is not a comparison",
                              mgi_op_str(a->op));
    }
}

template <typename T>
__global__ void k_logical_not(const T *xs, T *ys, int64_t n) {
    CU_FOR(i, n) ys[i] = xs[i] == 0 ? (T)1 : (T)0;
}

mg_status cu_logical_not(cu_ctx *c, const mg_kargs *a) {
    const int64_t n = mgi_tdesc_numel(&a->out.d);
    CU_BY_ANY(a, a->out.d.dtype,
              (k_logical_not<T><<<cu_blocks(n), CU_THREADS, 0, c->stream>>>(
                  (const T *)a->in[0].data, (T *)a->out.data, n)));
    return MG_OK;
}

/* ---- where --------------------------------------------------------------- */

template <typename U>
__global__ void k_where(const void *cond, mg_dtype ct, const U *as, const U *bs,
                        U *ys, int64_t n, mg_bcast3 l) {
    CU_FOR(i, n) {
        int64_t o[3];
        mg_bcast3_offsets(&l, i, o);
        ys[i] = mg_nonzero_at(cond, ct, o[0]) ? as[o[1]] : bs[o[2]];
    }
}

mg_status cu_where(cu_ctx *c, const mg_kargs *a) {
    mg_bcast3 l;
    mg_bcast3_init(&l, a);
    const int64_t n = mgi_tdesc_numel(&a->out.d);
    const unsigned b = cu_blocks(n);
    const mg_dtype ct = a->in[0].d.dtype;
    switch (mg_dtype_size(a->out.d.dtype)) {
    case 4:
        k_where<uint32_t><<<b, CU_THREADS, 0, c->stream>>>(
            a->in[0].data, ct, (const uint32_t *)a->in[1].data,
            (const uint32_t *)a->in[2].data, (uint32_t *)a->out.data, n, l);
        return MG_OK;
    case 8:
        k_where<uint64_t><<<b, CU_THREADS, 0, c->stream>>>(
            a->in[0].data, ct, (const uint64_t *)a->in[1].data,
            (const uint64_t *)a->in[2].data, (uint64_t *)a->out.data, n, l);
        return MG_OK;
    default:
        return mg_kernel_fail(a, MG_ERR_DTYPE,
                              "the CUDA kernel has no %s version",
                              mg_dtype_name(a->out.d.dtype));
    }
}

/* ---- clamp and its gradient ---------------------------------------------- */

__device__ __forceinline__ float cu_clamp(float x, float lo, float hi) {
    return mg_clamp_f32(x, lo, hi);
}
__device__ __forceinline__ double cu_clamp(double x, double lo, double hi) {
    return mg_clamp_f64(x, lo, hi);
}
__device__ __forceinline__ float cu_clamp_grad(float gy, float x, float lo,
                                               float hi) {
    return mg_clamp_grad_f32(gy, x, lo, hi);
}
__device__ __forceinline__ double cu_clamp_grad(double gy, double x, double lo,
                                                double hi) {
    return mg_clamp_grad_f64(gy, x, lo, hi);
}

template <typename T>
__global__ void k_clamp(const T *xs, T *ys, int64_t n, T lo, T hi) {
    CU_FOR(i, n) ys[i] = cu_clamp(xs[i], lo, hi);
}

template <typename T>
__global__ void k_clamp_grad(const T *gy, const T *xs, T *dx, int64_t n, T lo,
                             T hi) {
    CU_FOR(i, n) dx[i] = cu_clamp_grad(gy[i], xs[i], lo, hi);
}

/* The bounds rounded to T on the host, as the CPU rounds them. */
mg_status cu_clamp_op(cu_ctx *c, const mg_kargs *a) {
    const int64_t n = mgi_tdesc_numel(&a->out.d);
    CU_BY_FLOAT(a, a->out.d.dtype,
                (k_clamp<T><<<cu_blocks(n), CU_THREADS, 0, c->stream>>>(
                    (const T *)a->in[0].data, (T *)a->out.data, n,
                    (T)a->attrs->lo, (T)a->attrs->hi)));
    return MG_OK;
}

/* (gy, x) -> dx */
mg_status cu_clamp_grad_op(cu_ctx *c, const mg_kargs *a) {
    const int64_t n = mgi_tdesc_numel(&a->out.d);
    CU_BY_FLOAT(a, a->out.d.dtype,
                (k_clamp_grad<T><<<cu_blocks(n), CU_THREADS, 0, c->stream>>>(
                    (const T *)a->in[0].data, (const T *)a->in[1].data,
                    (T *)a->out.data, n, (T)a->attrs->lo, (T)a->attrs->hi)));
    return MG_OK;
}
