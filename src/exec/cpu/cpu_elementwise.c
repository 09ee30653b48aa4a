/*
 * cpu_elementwise.c - the unary maths ops, and every two-input
 * elementwise op (arithmetic with numpy broadcasting and the activation
 * gradients): the loops that the expressions of MG_UNARY_OPS and
 * MG_BINARY_OPS (kernel_shared.h) are instantiated in, per dtype; and
 * cast, one loop per pair of MG_CAST_PAIRS. In float32, the ops whose
 * time is exp, tanh or erf (gelu, silu and their gradients, tanh, exp,
 * sigmoid, erf) compute
 * it over blocks through cpu_vmath.c instead of one scalar call a value.
 */
#include "cpu_kernels.h"
#include "cpu_vmath.h"

#include <tgmath.h> /* tanh/exp/... pick the float or double version */

/* Pairs a macro X(T, SUF, name, expr) with every float dtype. */
#define FOR_FLOAT_TYPES(X, name, expr)                                         \
    X(float, f32, name, expr) X(double, f64, name, expr)

/* ---- unary: y = expr(x); T is the element type, alpha the op's attribute */

#define UNARY_LOOP(TYPE, SUF, name, expr)                                      \
    static mg_status name##_##SUF(const TYPE *restrict xs, TYPE *restrict ys,  \
                                  int64_t n, double alpha) {                   \
        typedef TYPE T;                                                        \
        (void)alpha;                                                           \
        MG_CPU_PAR_LOOP(n, for (int64_t i = 0; i < n; i++), {                  \
            const T x = xs[i];                                                 \
            ys[i] = (expr);                                                    \
        });                                                                    \
        return MG_OK;                                                          \
    }

/* The block functions fill their stack buffer's first m elements before
 * the vector call reads those m; GCC cannot see that the call reads no
 * more, and warns about the rest. */
#if defined(__GNUC__) && !defined(__clang__) /* clang has no such warning */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
bool mgi_cpu_unary_tile_vec_f32(mg_op op, const float *restrict x,
                                float *restrict y, int64_t m) {
    float u[MG_VMATH_BLOCK];
    if (m < 1 || m > MG_VMATH_BLOCK) return false; /* the scalar loop's */
    switch (op) {
    case MG_OP_GELU:
        for (int64_t j = 0; j < m; j++) u[j] = MG_GELU_U(float, x[j]);
        mgi_cpu_vtanhf(u, u, m);
        for (int64_t j = 0; j < m; j++) y[j] = 0.5f * x[j] * (1.0f + u[j]);
        return true;
    case MG_OP_SIGMOID:
        for (int64_t j = 0; j < m; j++) u[j] = -x[j];
        mgi_cpu_vexpf(u, u, m);
        for (int64_t j = 0; j < m; j++) y[j] = 1.0f / (1.0f + u[j]);
        return true;
    case MG_OP_SILU:
        for (int64_t j = 0; j < m; j++) u[j] = -x[j];
        mgi_cpu_vexpf(u, u, m);
        for (int64_t j = 0; j < m; j++) y[j] = x[j] / (1.0f + u[j]);
        return true;
    case MG_OP_TANH: mgi_cpu_vtanhf(y, x, m); return true;
    case MG_OP_EXP: mgi_cpu_vexpf(y, x, m); return true;
    case MG_OP_ERF: mgi_cpu_verff(y, x, m); return true;
    default: return false;
    }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

/* The float32 ops that spend their time in exp, tanh or erf, computed a block
 * at a time with the vector routines; false for any other op. The
 * formulas are MG_UNARY_OPS', in the same order of operations. */
static bool unary_vec_f32(mg_op op, const float *restrict xs,
                          float *restrict ys, int64_t n) {
    if (op != MG_OP_GELU && op != MG_OP_SILU && op != MG_OP_TANH &&
        op != MG_OP_EXP && op != MG_OP_SIGMOID && op != MG_OP_ERF)
        return false;
    const int64_t nb = (n + MG_VMATH_BLOCK - 1) / MG_VMATH_BLOCK;
    MG_CPU_PAR_LOOP(n, for (int64_t b = 0; b < nb; b++), {
        const int64_t i0 = b * MG_VMATH_BLOCK;
        const int64_t m = n - i0 < MG_VMATH_BLOCK ? n - i0 : MG_VMATH_BLOCK;
        mgi_cpu_unary_tile_vec_f32(op, xs + i0, ys + i0, m);
    });
    return true;
}

#define UNARY_KERNEL(name, OP, expr)                                           \
    FOR_FLOAT_TYPES(UNARY_LOOP, name, expr)                                    \
    mg_status mgi_cpu_##name(const mg_kargs *ka) {                             \
        if (ka->out.d.dtype == MG_F32 &&                                       \
            unary_vec_f32(MG_OP_##OP, ka->in[0].data, ka->out.data,            \
                          mgi_tdesc_numel(&ka->out.d)))                        \
            return MG_OK;                                                      \
        return MG_CPU_BY_DTYPE(ka, ka->out.d.dtype, name, ka->in[0].data,      \
                               ka->out.data, mgi_tdesc_numel(&ka->out.d),      \
                               ka->attrs ? ka->attrs->alpha : 0.0);            \
    }
MG_UNARY_OPS(UNARY_KERNEL)

/* ---- binary: y = expr(a, b) with a and b broadcast to y's shape ---------- */

/* After coalescing, equal shapes are one flat row with unit strides, which
 * gets its own loop so the compiler can vectorise it; a scalar operand or a
 * repeated row takes the strided loop with stride 0. */
#define BINARY_LOOP(TYPE, SUF, name, expr)                                     \
    static mg_status name##_##SUF(const TYPE *as, const TYPE *bs,              \
                                  TYPE *restrict ys, const mg_layout *l) {     \
        typedef TYPE T;                                                        \
        int64_t idx[MG_MAX_DIMS] = {0}, off[2] = {0, 0};                       \
        const int last = l->ndim - 1;                                          \
        const int64_t n = l->shape[last], rows = mg_layout_rows(l);            \
        const int64_t sa = l->stride[0][last], sb = l->stride[1][last];        \
        for (int64_t r = 0; r < rows; r++, ys += n) {                          \
            const T *pa = as + off[0], *pb = bs + off[1];                      \
            if (sa == 1 && sb == 1) {                                          \
                MG_CPU_PAR_LOOP(n, for (int64_t i = 0; i < n; i++), {          \
                    const T a = pa[i], b = pb[i];                              \
                    ys[i] = (expr);                                            \
                });                                                            \
            } else {                                                           \
                MG_CPU_PAR_LOOP(n, for (int64_t i = 0; i < n; i++), {          \
                    const T a = pa[i * sa], b = pb[i * sb];                    \
                    ys[i] = (expr);                                            \
                });                                                            \
            }                                                                  \
            mg_layout_next(l, idx, off);                                       \
        }                                                                      \
        return MG_OK;                                                          \
    }

static void binary_layout(const mg_kargs *ka, mg_layout *l) {
    mg_layout_init(l, &ka->out.d);
    mg_layout_broadcast(l, 0, &ka->in[0].d);
    mg_layout_broadcast(l, 1, &ka->in[1].d);
    mg_layout_coalesce(l);
}

#if defined(__GNUC__) && !defined(__clang__) /* clang has no such warning */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
bool mgi_cpu_binary_tile_vec_f32(mg_op op, const float *restrict a,
                                 const float *restrict x, float *restrict y,
                                 int64_t m) {
    float t[MG_VMATH_BLOCK];
    if (m < 1 || m > MG_VMATH_BLOCK) return false; /* the scalar loop's */
    if (op == MG_OP_SILU_GRAD) {
        for (int64_t j = 0; j < m; j++) t[j] = -x[j];
        mgi_cpu_vexpf(t, t, m);
        for (int64_t j = 0; j < m; j++) {
            const float s = 1.0f / (1.0f + t[j]);
            y[j] = a[j] * (s * (1.0f + x[j] * (1.0f - s)));
        }
        return true;
    }
    if (op != MG_OP_GELU_GRAD) return false;
    for (int64_t j = 0; j < m; j++) t[j] = MG_GELU_U(float, x[j]);
    mgi_cpu_vtanhf(t, t, m);
    for (int64_t j = 0; j < m; j++) {
        const float du =
            (float)MG_GELU_C * (1.0f + (float)(3 * MG_GELU_K) * x[j] * x[j]);
        y[j] = a[j] *
               (0.5f * (1.0f + t[j]) + 0.5f * x[j] * (1.0f - t[j] * t[j]) * du);
    }
    return true;
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

/* gelu's and silu's gradients gy * f'(x) in float32 over equal shapes (one
 * flat row), their tanh or exp a block at a time; false for any other op or
 * layout. The formulas are mg_gelu_deriv's and mg_silu_deriv's, in the same
 * order of operations. */
static bool binary_vec_f32(mg_op op, const float *as, const float *bs,
                           float *restrict ys, const mg_layout *l) {
    if ((op != MG_OP_GELU_GRAD && op != MG_OP_SILU_GRAD) || l->ndim != 1 ||
        l->stride[0][0] != 1 || l->stride[1][0] != 1)
        return false;
    const int64_t n = l->shape[0];
    const int64_t nb = (n + MG_VMATH_BLOCK - 1) / MG_VMATH_BLOCK;
    MG_CPU_PAR_LOOP(n, for (int64_t b = 0; b < nb; b++), {
        const int64_t i0 = b * MG_VMATH_BLOCK;
        const int64_t m = n - i0 < MG_VMATH_BLOCK ? n - i0 : MG_VMATH_BLOCK;
        mgi_cpu_binary_tile_vec_f32(op, as + i0, bs + i0, ys + i0, m);
    });
    return true;
}

#define BINARY_KERNEL(name, OP, expr)                                          \
    FOR_FLOAT_TYPES(BINARY_LOOP, name, expr)                                   \
    mg_status mgi_cpu_##name(const mg_kargs *ka) {                             \
        mg_layout l;                                                           \
        binary_layout(ka, &l);                                                 \
        if (ka->out.d.dtype == MG_F32 &&                                       \
            binary_vec_f32(MG_OP_##OP, ka->in[0].data, ka->in[1].data,         \
                           ka->out.data, &l))                                  \
            return MG_OK;                                                      \
        return MG_CPU_BY_DTYPE(ka, ka->out.d.dtype, name, ka->in[0].data,      \
                               ka->in[1].data, ka->out.data, &l);              \
    }
MG_BINARY_OPS(BINARY_KERNEL)

/* ---- cast: y = x converted to y's dtype ---------------------------------- */

#define CAST_LOOP(FT, FROM, TT, TO, CONV)                                      \
    static void cast_##FROM##_##TO(const FT *restrict xs, TT *restrict ys,     \
                                   int64_t n) {                                \
        MG_CPU_PAR_LOOP(n, for (int64_t i = 0; i < n; i++),                    \
                        { ys[i] = CONV(TT, xs[i]); });                         \
    }
MG_CAST_PAIRS(CAST_LOOP)
#undef CAST_LOOP

mg_status mgi_cpu_cast(const mg_kargs *ka) {
    const int64_t n = mgi_tdesc_numel(&ka->out.d);
    const mg_dtype from = ka->in[0].d.dtype, to = ka->out.d.dtype;
#define CAST_CASE(FT, FROM, TT, TO, CONV)                                      \
    if (from == FROM && to == TO) {                                            \
        cast_##FROM##_##TO((const FT *)ka->in[0].data, (TT *)ka->out.data, n); \
        return MG_OK;                                                          \
    }
    MG_CAST_PAIRS(CAST_CASE)
#undef CAST_CASE
    return mgi_cpu_bad_dtype(ka, from);
}
