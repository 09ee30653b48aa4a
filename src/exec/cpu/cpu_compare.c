/*
 * cpu_compare.c - the CPU kernels of ops_compare.c's ops: the comparisons
 * and logical ops of MG_COMPARE_OPS (kernel_shared.h) with numpy
 * broadcasting, in every dtype; logical_not; where, which copies each
 * element's bits from the side cond picks (so an inf or NaN on the other
 * side never reaches y); clamp and clamp_grad. maximum and minimum are
 * MG_BINARY_OPS entries (cpu_elementwise.c).
 */
#include "cpu_kernels.h"

/* Every dtype, for the ops that work on integers too. */
#define FOR_ALL_TYPES(X, name, expr)                                           \
    X(float, f32, name, expr)                                                  \
    X(double, f64, name, expr)                                                 \
    X(int32_t, i32, name, expr) X(int64_t, i64, name, expr)

/* Calls fn_<dtype>(...) for any of the four dtypes. */
#define BY_ANY_DTYPE(ka, dtype, fn, ...)                                       \
    ((dtype) == MG_F32   ? fn##_f32(__VA_ARGS__)                               \
     : (dtype) == MG_F64 ? fn##_f64(__VA_ARGS__)                               \
     : (dtype) == MG_I32 ? fn##_i32(__VA_ARGS__)                               \
     : (dtype) == MG_I64 ? fn##_i64(__VA_ARGS__)                               \
                         : mgi_cpu_bad_dtype((ka), (dtype)))

/* ---- comparisons and logical ops: y = expr(a, b) ? 1 : 0 ----------------- */

#define COMPARE_LOOP(TYPE, SUF, name, expr)                                    \
    static mg_status name##_##SUF(const TYPE *as, const TYPE *bs,              \
                                  TYPE *restrict ys, const mg_layout *l) {     \
        typedef TYPE T;                                                        \
        int64_t idx[MG_MAX_DIMS] = {0}, off[2] = {0, 0};                       \
        const int last = l->ndim - 1;                                          \
        const int64_t n = l->shape[last], rows = mg_layout_rows(l);            \
        const int64_t sa = l->stride[0][last], sb = l->stride[1][last];        \
        for (int64_t r = 0; r < rows; r++, ys += n) {                          \
            const T *pa = as + off[0], *pb = bs + off[1];                      \
            MG_CPU_PAR_LOOP(n, for (int64_t i = 0; i < n; i++), {              \
                const T a = pa[i * sa], b = pb[i * sb];                        \
                ys[i] = (expr) ? (T)1 : (T)0;                                  \
            });                                                                \
            mg_layout_next(l, idx, off);                                       \
        }                                                                      \
        return MG_OK;                                                          \
    }

#define COMPARE_KERNEL(name, OP, expr)                                         \
    FOR_ALL_TYPES(COMPARE_LOOP, name, expr)                                    \
    mg_status mgi_cpu_##name(const mg_kargs *ka) {                             \
        mg_layout l;                                                           \
        mg_layout_init(&l, &ka->out.d);                                        \
        mg_layout_broadcast(&l, 0, &ka->in[0].d);                              \
        mg_layout_broadcast(&l, 1, &ka->in[1].d);                              \
        mg_layout_coalesce(&l);                                                \
        return BY_ANY_DTYPE(ka, ka->out.d.dtype, name, ka->in[0].data,         \
                            ka->in[1].data, ka->out.data, &l);                 \
    }
MG_COMPARE_OPS(COMPARE_KERNEL)

#define NOT_LOOP(TYPE, SUF, name, expr)                                        \
    static mg_status name##_##SUF(const TYPE *restrict xs, TYPE *restrict ys,  \
                                  int64_t n) {                                 \
        MG_CPU_PAR_LOOP(n, for (int64_t i = 0; i < n; i++),                    \
                        { ys[i] = xs[i] == 0 ? (TYPE)1 : (TYPE)0; });          \
        return MG_OK;                                                          \
    }
FOR_ALL_TYPES(NOT_LOOP, logical_not, 0)

mg_status mgi_cpu_logical_not(const mg_kargs *ka) {
    return BY_ANY_DTYPE(ka, ka->out.d.dtype, logical_not, ka->in[0].data,
                        ka->out.data, mgi_tdesc_numel(&ka->out.d));
}

/* ---- where: y = cond ? a : b, as bits ------------------------------------ */

/* One row of y's last dim at a time: the offsets of its first element in
 * the three inputs, then the last dim's strides. */
#define WHERE_DEF(U, BITS)                                                     \
    static void where_##BITS(const void *cond, mg_dtype ct, const U *as,       \
                             const U *bs, U *restrict ys,                      \
                             const mg_bcast3 *l) {                             \
        const int last = l->ndim - 1;                                          \
        const int64_t n = l->ndim ? l->shape[last] : 1;                        \
        const int64_t sc = l->ndim ? l->stride[0][last] : 0;                   \
        const int64_t sa = l->ndim ? l->stride[1][last] : 0;                   \
        const int64_t sb = l->ndim ? l->stride[2][last] : 0;                   \
        int64_t rows = 1;                                                      \
        for (int d = 0; d < last; d++) rows *= l->shape[d];                    \
        MG_CPU_PAR_LOOP(rows *n, for (int64_t r = 0; r < rows; r++), {         \
            int64_t o[3];                                                      \
            mg_bcast3_offsets(l, r *n, o);                                     \
            U *y = ys + r * n;                                                 \
            for (int64_t i = 0; i < n; i++)                                    \
                y[i] = mg_nonzero_at(cond, ct, o[0] + i * sc)                  \
                           ? as[o[1] + i * sa]                                 \
                           : bs[o[2] + i * sb];                                \
        });                                                                    \
    }
WHERE_DEF(uint32_t, 32)
WHERE_DEF(uint64_t, 64)
#undef WHERE_DEF

mg_status mgi_cpu_where(const mg_kargs *ka) {
    mg_bcast3 l;
    mg_bcast3_init(&l, ka);
    const void *c = ka->in[0].data, *a = ka->in[1].data, *b = ka->in[2].data;
    const mg_dtype ct = ka->in[0].d.dtype;
    switch (mg_dtype_size(ka->out.d.dtype)) {
    case 4: where_32(c, ct, a, b, ka->out.data, &l); return MG_OK;
    case 8: where_64(c, ct, a, b, ka->out.data, &l); return MG_OK;
    default: return mgi_cpu_bad_dtype(ka, ka->out.d.dtype);
    }
}

/* ---- clamp and its gradient ---------------------------------------------- */

#define CLAMP_DEF(T, SUF)                                                      \
    static mg_status clamp_##SUF(const T *restrict xs, T *restrict ys,         \
                                 int64_t n, double lo, double hi) {            \
        const T l = (T)lo, h = (T)hi;                                          \
        MG_CPU_PAR_LOOP(n, for (int64_t i = 0; i < n; i++),                    \
                        { ys[i] = mg_clamp_##SUF(xs[i], l, h); });             \
        return MG_OK;                                                          \
    }                                                                          \
    static mg_status clamp_grad_##SUF(const T *gy, const T *xs,                \
                                      T *restrict dx, int64_t n, double lo,    \
                                      double hi) {                             \
        const T l = (T)lo, h = (T)hi;                                          \
        MG_CPU_PAR_LOOP(n, for (int64_t i = 0; i < n; i++),                    \
                        { dx[i] = mg_clamp_grad_##SUF(gy[i], xs[i], l, h); }); \
        return MG_OK;                                                          \
    }
MG_CPU_FLOAT_TYPES(CLAMP_DEF)
#undef CLAMP_DEF

mg_status mgi_cpu_clamp(const mg_kargs *ka) {
    return MG_CPU_BY_DTYPE(ka, ka->out.d.dtype, clamp, ka->in[0].data,
                           ka->out.data, mgi_tdesc_numel(&ka->out.d),
                           ka->attrs->lo, ka->attrs->hi);
}

/* (gy, x) -> dx */
mg_status mgi_cpu_clamp_grad(const mg_kargs *ka) {
    return MG_CPU_BY_DTYPE(ka, ka->out.d.dtype, clamp_grad, ka->in[0].data,
                           ka->in[1].data, ka->out.data,
                           mgi_tdesc_numel(&ka->out.d), ka->attrs->lo,
                           ka->attrs->hi);
}
