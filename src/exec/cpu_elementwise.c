/*
 * cpu_elementwise.c - fill, the unary maths ops, and every two-input
 * elementwise op (arithmetic with numpy broadcasting and the activation
 * gradients), each written once as an expression and instantiated per dtype.
 */
#include "cpu_kernels.h"

#include <tgmath.h> /* tanh/exp/... pick the float or double version */

/* tanh approximation of gelu: sqrt(2/pi) and the cubic coefficient. */
#define GELU_C 0.79788456080286535588
#define GELU_K 0.044715
#define GELU_U(T, x) ((T)GELU_C * ((x) + (T)GELU_K * (x) * (x) * (x)))

/* Exact derivative of the tanh approximation (not of the erf gelu), so that
 * gradients agree with finite differences of the forward op. */
#define GELU_DERIV_DEF(T, SUF)                                                \
    static inline T gelu_deriv_##SUF(T x) {                                   \
        const T t = tanh(GELU_U(T, x));                                       \
        const T du = (T)GELU_C * ((T)1 + (T)(3 * GELU_K) * x * x);            \
        return (T)0.5 * ((T)1 + t) + (T)0.5 * x * ((T)1 - t * t) * du;        \
    }
MG_CPU_FLOAT_TYPES(GELU_DERIV_DEF)
#define GELU_DERIV(x)                                                         \
    _Generic((x), float: gelu_deriv_f32, double: gelu_deriv_f64)(x)

/* Pairs a macro X(T, SUF, name, expr) with every float dtype. */
#define FOR_FLOAT_TYPES(X, name, expr)                                        \
    X(float, f32, name, expr) X(double, f64, name, expr)

/* ---- fill ---------------------------------------------------------------- */

#define FILL_DEF(T, SUF)                                                      \
    static mg_status fill_##SUF(T *restrict y, int64_t n, double value) {     \
        const T v = (T)value;                                                 \
        for (int64_t i = 0; i < n; i++) y[i] = v;                             \
        return MG_OK;                                                         \
    }
MG_CPU_FLOAT_TYPES(FILL_DEF)

mg_status mg_cpu_fill(const mg_kargs *ka) {
    return MG_CPU_BY_DTYPE(ka, ka->out.d.dtype, fill, ka->out.data,
                           mg_tdesc_numel(&ka->out.d), ka->attrs->alpha);
}

/* ---- unary: y = expr(x); T is the element type, alpha the op's attribute */

#define UNARY_OPS(X)                                                          \
    X(neg, -x)                                                                \
    X(relu, x > 0 ? x : (T)0)                                                 \
    X(gelu, (T)0.5 * x * ((T)1 + tanh(GELU_U(T, x))))                         \
    X(tanh, tanh(x))                                                          \
    X(sigmoid, (T)1 / ((T)1 + exp(-x)))                                       \
    X(exp, exp(x))                                                            \
    X(log, log(x))                                                            \
    X(sqrt, sqrt(x))                                                          \
    /* in double, then rounded once, as for the fill value */                 \
    X(scale, (T)(alpha * x))

#define UNARY_LOOP(TYPE, SUF, name, expr)                                     \
    static mg_status name##_##SUF(const TYPE *restrict xs, TYPE *restrict ys, \
                                  int64_t n, double alpha) {                  \
        typedef TYPE T;                                                       \
        (void)alpha;                                                          \
        for (int64_t i = 0; i < n; i++) {                                     \
            const T x = xs[i];                                                \
            ys[i] = (expr);                                                   \
        }                                                                     \
        return MG_OK;                                                         \
    }

#define UNARY_KERNEL(name, expr)                                              \
    FOR_FLOAT_TYPES(UNARY_LOOP, name, expr)                                   \
    mg_status mg_cpu_##name(const mg_kargs *ka) {                             \
        return MG_CPU_BY_DTYPE(ka, ka->out.d.dtype, name, ka->in[0].data,     \
                               ka->out.data, mg_tdesc_numel(&ka->out.d),      \
                               ka->attrs ? ka->attrs->alpha : 0.0);           \
    }
UNARY_OPS(UNARY_KERNEL)

/* ---- binary: y = expr(a, b) with a and b broadcast to y's shape ---------- */

#define BINARY_OPS(X)                                                         \
    X(add, a + b)                                                             \
    X(sub, a - b)                                                             \
    X(mul, a * b)                                                             \
    X(div, a / b)                                                             \
    X(relu_grad, b > 0 ? a : (T)0)          /* (gy, y) */                     \
    X(gelu_grad, a * GELU_DERIV(b))         /* (gy, x) */                     \
    X(tanh_grad, a * ((T)1 - b * b))        /* (gy, y) */                     \
    X(sigmoid_grad, a * b * ((T)1 - b))     /* (gy, y) */

/* After coalescing, equal shapes are one flat row with unit strides, which
 * gets its own loop so the compiler can vectorise it; a scalar operand or a
 * repeated row takes the strided loop with stride 0. */
#define BINARY_LOOP(TYPE, SUF, name, expr)                                    \
    static mg_status name##_##SUF(const TYPE *as, const TYPE *bs,             \
                                  TYPE *restrict ys,                          \
                                  const mg_cpu_layout *l) {                   \
        typedef TYPE T;                                                       \
        int64_t idx[MG_MAX_DIMS] = {0}, off[2] = {0, 0};                      \
        const int last = l->ndim - 1;                                         \
        const int64_t n = l->shape[last], rows = mg_cpu_layout_rows(l);       \
        const int64_t sa = l->stride[0][last], sb = l->stride[1][last];       \
        for (int64_t r = 0; r < rows; r++, ys += n) {                         \
            const T *pa = as + off[0], *pb = bs + off[1];                     \
            if (sa == 1 && sb == 1) {                                         \
                for (int64_t i = 0; i < n; i++) {                             \
                    const T a = pa[i], b = pb[i];                             \
                    ys[i] = (expr);                                           \
                }                                                             \
            } else {                                                          \
                for (int64_t i = 0; i < n; i++) {                             \
                    const T a = pa[i * sa], b = pb[i * sb];                   \
                    ys[i] = (expr);                                           \
                }                                                             \
            }                                                                 \
            mg_cpu_layout_next(l, idx, off);                                  \
        }                                                                     \
        return MG_OK;                                                         \
    }

static void binary_layout(const mg_kargs *ka, mg_cpu_layout *l) {
    mg_cpu_layout_init(l, &ka->out.d);
    mg_cpu_layout_broadcast(l, 0, &ka->in[0].d);
    mg_cpu_layout_broadcast(l, 1, &ka->in[1].d);
    mg_cpu_layout_coalesce(l);
}

#define BINARY_KERNEL(name, expr)                                             \
    FOR_FLOAT_TYPES(BINARY_LOOP, name, expr)                                  \
    mg_status mg_cpu_##name(const mg_kargs *ka) {                             \
        mg_cpu_layout l;                                                      \
        binary_layout(ka, &l);                                                \
        return MG_CPU_BY_DTYPE(ka, ka->out.d.dtype, name, ka->in[0].data,     \
                               ka->in[1].data, ka->out.data, &l);             \
    }
BINARY_OPS(BINARY_KERNEL)
