/*
 * cuda_elementwise.cu - fill, unary maths, broadcasting binary ops (and the
 * activation gradients), dropout, and the ops that only move elements:
 * reshape, permute, broadcast_to, slice, pad, concat. Expressions match
 * cpu_elementwise.c term for term; layouts come from the CPU's host-side
 * helpers (mg_cpu_layout_*), so both backends broadcast alike.
 */
#include "cuda_internal.h"

#include <string.h>

#define GELU_C 0.79788456080286535588
#define GELU_K 0.044715

/* ---- strided views -------------------------------------------------------- */

/* An iteration domain (the output, or a box) and the element strides of two
 * operands over it, as in mg_cpu_layout. */
struct cu_layout {
    int ndim;
    int64_t shape[MG_MAX_DIMS];
    int64_t s0[MG_MAX_DIMS], s1[MG_MAX_DIMS];
};

static cu_layout to_cu(const mg_cpu_layout *l) {
    cu_layout r;
    memset(&r, 0, sizeof r);
    r.ndim = l->ndim;
    for (int i = 0; i < l->ndim; i++) {
        r.shape[i] = l->shape[i];
        r.s0[i] = l->stride[0][i];
        r.s1[i] = l->stride[1][i];
    }
    return r;
}

/* Offsets of the i-th element of the domain (row-major) in both operands. */
__device__ __forceinline__ void cu_offsets(const cu_layout &l, int64_t i,
                                           int64_t *o0, int64_t *o1) {
    int64_t a = 0, b = 0;
    for (int d = l.ndim - 1; d >= 0; d--) {
        const int64_t n = l.shape[d], k = i % n;
        i /= n;
        a += k * l.s0[d];
        b += k * l.s1[d];
    }
    *o0 = a;
    *o1 = b;
}

/* ---- fill ------------------------------------------------------------------ */

template <typename T> __global__ void k_fill(T *y, int64_t n, T v) {
    CU_FOR(i, n) y[i] = v;
}

mg_status cu_fill(cu_ctx *c, const mg_kargs *a) {
    const int64_t n = mg_tdesc_numel(&a->out.d);
    if (a->out.d.dtype == MG_I32) {
        k_fill<int32_t><<<cu_blocks(n), CU_THREADS, 0, c->stream>>>(
            (int32_t *)a->out.data, n, (int32_t)a->attrs->alpha);
        return MG_OK;
    }
    CU_BY_FLOAT(a, a->out.d.dtype,
                (k_fill<T><<<cu_blocks(n), CU_THREADS, 0, c->stream>>>(
                    (T *)a->out.data, n, (T)a->attrs->alpha)));
    return MG_OK;
}

/* ---- unary ------------------------------------------------------------------ */

enum { U_NEG, U_RELU, U_GELU, U_TANH, U_SIGMOID, U_EXP, U_LOG, U_SQRT,
       U_SCALE };

template <typename T, int OP>
__global__ void k_unary(const T *xs, T *ys, int64_t n, double alpha) {
    CU_FOR(i, n) {
        const T x = xs[i];
        T y;
        switch (OP) {
        case U_NEG: y = -x; break;
        case U_RELU: y = x > 0 ? x : (T)0; break;
        case U_GELU:
            y = (T)0.5 * x *
                ((T)1 + tanh((T)GELU_C * (x + (T)GELU_K * x * x * x)));
            break;
        case U_TANH: y = tanh(x); break;
        case U_SIGMOID: y = (T)1 / ((T)1 + exp(-x)); break;
        case U_EXP: y = exp(x); break;
        case U_LOG: y = log(x); break;
        case U_SQRT: y = sqrt(x); break;
        default: y = (T)(alpha * (double)x); break; /* scale, as the CPU */
        }
        ys[i] = y;
    }
}

template <typename T>
static void launch_unary(cu_ctx *c, int op, const T *x, T *y, int64_t n,
                         double alpha) {
    const unsigned b = cu_blocks(n);
    cudaStream_t s = c->stream;
    switch (op) {
    case U_NEG: k_unary<T, U_NEG><<<b, CU_THREADS, 0, s>>>(x, y, n, alpha); break;
    case U_RELU: k_unary<T, U_RELU><<<b, CU_THREADS, 0, s>>>(x, y, n, alpha); break;
    case U_GELU: k_unary<T, U_GELU><<<b, CU_THREADS, 0, s>>>(x, y, n, alpha); break;
    case U_TANH: k_unary<T, U_TANH><<<b, CU_THREADS, 0, s>>>(x, y, n, alpha); break;
    case U_SIGMOID: k_unary<T, U_SIGMOID><<<b, CU_THREADS, 0, s>>>(x, y, n, alpha); break;
    case U_EXP: k_unary<T, U_EXP><<<b, CU_THREADS, 0, s>>>(x, y, n, alpha); break;
    case U_LOG: k_unary<T, U_LOG><<<b, CU_THREADS, 0, s>>>(x, y, n, alpha); break;
    case U_SQRT: k_unary<T, U_SQRT><<<b, CU_THREADS, 0, s>>>(x, y, n, alpha); break;
    default: k_unary<T, U_SCALE><<<b, CU_THREADS, 0, s>>>(x, y, n, alpha); break;
    }
}

mg_status cu_unary(cu_ctx *c, const mg_kargs *a) {
    int op;
    switch (a->op) {
    case MG_OP_NEG: op = U_NEG; break;
    case MG_OP_RELU: op = U_RELU; break;
    case MG_OP_GELU: op = U_GELU; break;
    case MG_OP_TANH: op = U_TANH; break;
    case MG_OP_SIGMOID: op = U_SIGMOID; break;
    case MG_OP_EXP: op = U_EXP; break;
    case MG_OP_LOG: op = U_LOG; break;
    case MG_OP_SQRT: op = U_SQRT; break;
    case MG_OP_SCALE: op = U_SCALE; break;
    default:
        return cu_fail(a, MG_ERR_INTERNAL, "%s is not a unary op",
                       mg_op_str(a->op));
    }
    const int64_t n = mg_tdesc_numel(&a->out.d);
    const double alpha = a->attrs ? a->attrs->alpha : 0.0;
    CU_BY_FLOAT(a, a->out.d.dtype,
                launch_unary<T>(c, op, (const T *)a->in[0].data,
                                (T *)a->out.data, n, alpha));
    return MG_OK;
}

/* ---- binary, with numpy broadcasting --------------------------------------- */

enum { B_ADD, B_SUB, B_MUL, B_DIV, B_RELU_GRAD, B_GELU_GRAD, B_TANH_GRAD,
       B_SIGMOID_GRAD };

template <typename T> __device__ __forceinline__ T gelu_deriv(T x) {
    const T t = tanh((T)GELU_C * (x + (T)GELU_K * x * x * x));
    const T du = (T)GELU_C * ((T)1 + (T)(3 * GELU_K) * x * x);
    return (T)0.5 * ((T)1 + t) + (T)0.5 * x * ((T)1 - t * t) * du;
}

template <typename T, int OP>
__global__ void k_binary(const T *as, const T *bs, T *ys, int64_t n,
                         cu_layout l) {
    CU_FOR(i, n) {
        int64_t oa, ob;
        cu_offsets(l, i, &oa, &ob);
        const T a = as[oa], b = bs[ob];
        T y;
        switch (OP) {
        case B_ADD: y = a + b; break;
        case B_SUB: y = a - b; break;
        case B_MUL: y = a * b; break;
        case B_DIV: y = a / b; break;
        case B_RELU_GRAD: y = b > 0 ? a : (T)0; break;
        case B_GELU_GRAD: y = a * gelu_deriv(b); break;
        case B_TANH_GRAD: y = a * ((T)1 - b * b); break;
        default: y = a * b * ((T)1 - b); break; /* sigmoid_grad */
        }
        ys[i] = y;
    }
}

template <typename T>
static void launch_binary(cu_ctx *c, int op, const T *x0, const T *x1, T *y,
                          int64_t n, const cu_layout &l) {
    const unsigned b = cu_blocks(n);
    cudaStream_t s = c->stream;
#define CU_BIN(OP) k_binary<T, OP><<<b, CU_THREADS, 0, s>>>(x0, x1, y, n, l)
    switch (op) {
    case B_ADD: CU_BIN(B_ADD); break;
    case B_SUB: CU_BIN(B_SUB); break;
    case B_MUL: CU_BIN(B_MUL); break;
    case B_DIV: CU_BIN(B_DIV); break;
    case B_RELU_GRAD: CU_BIN(B_RELU_GRAD); break;
    case B_GELU_GRAD: CU_BIN(B_GELU_GRAD); break;
    case B_TANH_GRAD: CU_BIN(B_TANH_GRAD); break;
    default: CU_BIN(B_SIGMOID_GRAD); break;
    }
#undef CU_BIN
}

mg_status cu_binary(cu_ctx *c, const mg_kargs *a) {
    int op;
    switch (a->op) {
    case MG_OP_ADD: op = B_ADD; break;
    case MG_OP_SUB: op = B_SUB; break;
    case MG_OP_MUL: op = B_MUL; break;
    case MG_OP_DIV: op = B_DIV; break;
    case MG_OP_RELU_GRAD: op = B_RELU_GRAD; break;
    case MG_OP_GELU_GRAD: op = B_GELU_GRAD; break;
    case MG_OP_TANH_GRAD: op = B_TANH_GRAD; break;
    case MG_OP_SIGMOID_GRAD: op = B_SIGMOID_GRAD; break;
    default:
        return cu_fail(a, MG_ERR_INTERNAL, "%s is not a binary op",
                       mg_op_str(a->op));
    }
    mg_cpu_layout ml;
    mg_cpu_layout_init(&ml, &a->out.d);
    mg_cpu_layout_broadcast(&ml, 0, &a->in[0].d);
    mg_cpu_layout_broadcast(&ml, 1, &a->in[1].d);
    mg_cpu_layout_coalesce(&ml);
    const cu_layout l = to_cu(&ml);
    const int64_t n = mg_tdesc_numel(&a->out.d);
    CU_BY_FLOAT(a, a->out.d.dtype,
                launch_binary<T>(c, op, (const T *)a->in[0].data,
                                 (const T *)a->in[1].data, (T *)a->out.data,
                                 n, l));
    return MG_OK;
}

/* ---- element moves: gathers and boxes, by element size --------------------- */

/* dst[base1 + off1(i)] = src[base0 + off0(i)] over the domain. */
template <typename U>
__global__ void k_move(const U *src, U *dst, int64_t n, cu_layout l,
                       int64_t base0, int64_t base1) {
    CU_FOR(i, n) {
        int64_t o0, o1;
        cu_offsets(l, i, &o0, &o1);
        dst[base1 + o1] = src[base0 + o0];
    }
}

static mg_status move(cu_ctx *c, const mg_kargs *a, const void *src,
                      void *dst, mg_cpu_layout *ml, int64_t base0,
                      int64_t base1) {
    mg_cpu_layout_coalesce(ml);
    const cu_layout l = to_cu(ml);
    int64_t n = 1;
    for (int i = 0; i < l.ndim; i++) n *= l.shape[i];
    switch (mg_dtype_size(a->out.d.dtype)) {
    case 4:
        k_move<uint32_t><<<cu_blocks(n), CU_THREADS, 0, c->stream>>>(
            (const uint32_t *)src, (uint32_t *)dst, n, l, base0, base1);
        return MG_OK;
    case 8:
        k_move<uint64_t><<<cu_blocks(n), CU_THREADS, 0, c->stream>>>(
            (const uint64_t *)src, (uint64_t *)dst, n, l, base0, base1);
        return MG_OK;
    default:
        return cu_fail(a, MG_ERR_DTYPE, "the CUDA kernel has no %s version",
                       mg_dtype_name(a->out.d.dtype));
    }
}

static void dense_strides(const mg_tdesc *d, int64_t *stride) {
    int64_t step = 1;
    for (int i = d->ndim - 1; i >= 0; i--) {
        stride[i] = step;
        step *= d->shape[i];
    }
}

mg_status cu_reshape(cu_ctx *c, const mg_kargs *a) {
    const size_t n = mg_tdesc_nbytes(&a->out.d);
    if (!n || a->out.data == a->in[0].data) return MG_OK;
    return cu_check(a, cudaMemcpyAsync(a->out.data, a->in[0].data, n,
                                       cudaMemcpyDeviceToDevice, c->stream),
                    "reshape copy");
}

/* Slot 0: the source strides; slot 1: the contiguous output. */
mg_status cu_broadcast_to(cu_ctx *c, const mg_kargs *a) {
    mg_cpu_layout ml;
    mg_cpu_layout_init(&ml, &a->out.d);
    mg_cpu_layout_broadcast(&ml, 0, &a->in[0].d);
    mg_tdesc out = a->out.d;
    mg_cpu_layout_broadcast(&ml, 1, &out);
    return move(c, a, a->in[0].data, a->out.data, &ml, 0, 0);
}

mg_status cu_permute(cu_ctx *c, const mg_kargs *a) {
    const mg_tdesc *dx = &a->in[0].d;
    int64_t xs[MG_MAX_DIMS], ys[MG_MAX_DIMS];
    dense_strides(dx, xs);
    dense_strides(&a->out.d, ys);
    mg_cpu_layout ml;
    mg_cpu_layout_init(&ml, &a->out.d);
    for (int i = 0; i < dx->ndim; i++) {
        const int p = a->attrs->perm[i];
        if (p < 0 || p >= dx->ndim)
            return cu_fail(a, MG_ERR_INVALID_ARG,
                           "perm[%d] = %d is outside [0, %d)", i, p, dx->ndim);
        ml.stride[0][i] = xs[p];
        ml.stride[1][i] = ys[i];
    }
    return move(c, a, a->in[0].data, a->out.data, &ml, 0, 0);
}

/* The box of shape `box` from src at src_at to dst at dst_at (NULL: 0). */
static mg_status copy_box(cu_ctx *c, const mg_kargs *a, const mg_kbuf *src,
                          const int64_t *src_at, const mg_kbuf *dst,
                          const int64_t *dst_at, const mg_tdesc *box) {
    int64_t ss[MG_MAX_DIMS], ds[MG_MAX_DIMS], base0 = 0, base1 = 0;
    dense_strides(&src->d, ss);
    dense_strides(&dst->d, ds);
    mg_cpu_layout ml;
    mg_cpu_layout_init(&ml, box);
    for (int i = 0; i < box->ndim; i++) {
        ml.stride[0][i] = ss[i];
        ml.stride[1][i] = ds[i];
        base0 += (src_at ? src_at[i] : 0) * ss[i];
        base1 += (dst_at ? dst_at[i] : 0) * ds[i];
    }
    if (mg_tdesc_numel(box) == 0) return MG_OK;
    return move(c, a, src->data, dst->data, &ml, base0, base1);
}

mg_status cu_slice(cu_ctx *c, const mg_kargs *a) {
    return copy_box(c, a, &a->in[0], a->attrs->start, &a->out, NULL,
                    &a->out.d);
}

mg_status cu_pad(cu_ctx *c, const mg_kargs *a) {
    mg_status s = cu_check(a, cudaMemsetAsync(a->out.data, 0,
                                              mg_tdesc_nbytes(&a->out.d),
                                              c->stream),
                           "pad memset");
    if (s != MG_OK) return s;
    return copy_box(c, a, &a->in[0], NULL, &a->out, a->attrs->start,
                    &a->in[0].d);
}

mg_status cu_concat(cu_ctx *c, const mg_kargs *a) {
    const int ax = a->attrs->axis;
    if (ax < 0 || ax >= a->out.d.ndim)
        return cu_fail(a, MG_ERR_INVALID_ARG, "axis %d is outside [0, %d)",
                       ax, a->out.d.ndim);
    int64_t at[MG_MAX_DIMS] = {0};
    at[ax] = a->in[0].d.shape[ax];
    mg_status s = copy_box(c, a, &a->in[0], NULL, &a->out, NULL, &a->in[0].d);
    if (s != MG_OK) return s;
    return copy_box(c, a, &a->in[1], NULL, &a->out, at, &a->in[1].d);
}

/* ---- dropout: the CPU's counter-based RNG, element for element ------------- */

template <typename T>
__global__ void k_dropout(const T *x, T *y, int64_t n, uint64_t key,
                          uint64_t offset, double p, T keep_scale) {
    CU_FOR(i, n) {
        const uint64_t h = mg_rng_hash(key, offset + (uint64_t)i);
        y[i] = mg_rng_uniform(h) >= p ? x[i] * keep_scale : (T)0;
    }
}

mg_status cu_dropout(cu_ctx *c, const mg_kargs *a) {
    const mg_attrs *at = a->attrs;
    if (!(at->p >= 0.0 && at->p < 1.0))
        return cu_fail(a, MG_ERR_INVALID_ARG,
                       "dropout p = %g is outside [0, 1)", at->p);
    if (at->p == 0.0) return cu_reshape(c, a);
    const int64_t n = mg_tdesc_numel(&a->out.d);
    const uint64_t key = mg_rng_key(a->run_seed, at->seed);
    CU_BY_FLOAT(a, a->out.d.dtype,
                (k_dropout<T><<<cu_blocks(n), CU_THREADS, 0, c->stream>>>(
                    (const T *)a->in[0].data, (T *)a->out.data, n, key,
                    at->offset, at->p, (T)(1.0 / (1.0 - at->p)))));
    return MG_OK;
}
