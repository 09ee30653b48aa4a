/*
 * cuda_elementwise.cu - fill, unary maths, broadcasting binary ops (and the
 * activation gradients), dropout, and the ops that only move elements:
 * reshape, permute, broadcast_to, slice, pad, concat. The formulas and the
 * layouts are the CPU's own (kernel_shared.h), so both backends compute
 * and broadcast alike.
 */
#include "cuda_internal.h"

#include <string.h>

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

/* ---- unary and binary: the formulas of kernel_shared.h ------------------- */

/* One functor per formula, so each op is its own kernel instantiation. */
#define CU_UNARY_FN(name, OP, expr)                                           \
    struct cu_unary_##name {                                                  \
        template <typename T>                                                 \
        __device__ __forceinline__ T operator()(const T x,                    \
                                                double alpha) const {         \
            (void)alpha;                                                      \
            return (expr);                                                    \
        }                                                                     \
    };
MG_UNARY_OPS(CU_UNARY_FN)
#undef CU_UNARY_FN

#define CU_BINARY_FN(name, OP, expr)                                          \
    struct cu_binary_##name {                                                 \
        template <typename T>                                                 \
        __device__ __forceinline__ T operator()(const T a, const T b) const { \
            return (expr);                                                    \
        }                                                                     \
    };
MG_BINARY_OPS(CU_BINARY_FN)
#undef CU_BINARY_FN

template <typename T, typename F>
__global__ void k_unary(const T *xs, T *ys, int64_t n, double alpha) {
    const F f;
    CU_FOR(i, n) ys[i] = f(xs[i], alpha);
}

mg_status cu_unary(cu_ctx *c, const mg_kargs *a) {
    const int64_t n = mg_tdesc_numel(&a->out.d);
    const double alpha = a->attrs ? a->attrs->alpha : 0.0;
    const unsigned b = cu_blocks(n);
    switch (a->op) {
#define CU_UNARY_CASE(name, OP, expr)                                         \
    case MG_OP_##OP:                                                          \
        CU_BY_FLOAT(a, a->out.d.dtype,                                        \
                    (k_unary<T, cu_unary_##name>                              \
                     <<<b, CU_THREADS, 0, c->stream>>>(                       \
                         (const T *)a->in[0].data, (T *)a->out.data, n,       \
                         alpha)));                                            \
        return MG_OK;
        MG_UNARY_OPS(CU_UNARY_CASE)
#undef CU_UNARY_CASE
    default:
        return mg_kernel_fail(a, MG_ERR_INTERNAL, "%s is not a unary op",
                              mg_op_str(a->op));
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

mg_status cu_binary(cu_ctx *c, const mg_kargs *a) {
    mg_layout l;
    mg_layout_init(&l, &a->out.d);
    mg_layout_broadcast(&l, 0, &a->in[0].d);
    mg_layout_broadcast(&l, 1, &a->in[1].d);
    mg_layout_coalesce(&l);
    const int64_t n = mg_tdesc_numel(&a->out.d);
    const unsigned b = cu_blocks(n);
    switch (a->op) {
#define CU_BINARY_CASE(name, OP, expr)                                        \
    case MG_OP_##OP:                                                          \
        CU_BY_FLOAT(a, a->out.d.dtype,                                        \
                    (k_binary<T, cu_binary_##name>                            \
                     <<<b, CU_THREADS, 0, c->stream>>>(                       \
                         (const T *)a->in[0].data, (const T *)a->in[1].data,  \
                         (T *)a->out.data, n, l)));                           \
        return MG_OK;
        MG_BINARY_OPS(CU_BINARY_CASE)
#undef CU_BINARY_CASE
    default:
        return mg_kernel_fail(a, MG_ERR_INTERNAL, "%s is not a binary op",
                              mg_op_str(a->op));
    }
}

/* ---- element moves: gathers and boxes, by element size --------------------- */

/* dst[base1 + off1(i)] = src[base0 + off0(i)] over the domain. */
template <typename U>
__global__ void k_move(const U *src, U *dst, int64_t n, mg_layout l,
                       int64_t base0, int64_t base1) {
    CU_FOR(i, n) {
        int64_t o0, o1;
        mg_layout_offsets(&l, i, &o0, &o1);
        dst[base1 + o1] = src[base0 + o0];
    }
}

static mg_status move(cu_ctx *c, const mg_kargs *a, const void *src,
                      void *dst, mg_layout *ml, int64_t base0,
                      int64_t base1) {
    mg_layout_coalesce(ml);
    const mg_layout l = *ml;
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
        return mg_kernel_fail(a, MG_ERR_DTYPE,
                              "the CUDA kernel has no %s version",
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
    mg_layout ml;
    mg_layout_init(&ml, &a->out.d);
    mg_layout_broadcast(&ml, 0, &a->in[0].d);
    mg_tdesc out = a->out.d;
    mg_layout_broadcast(&ml, 1, &out);
    return move(c, a, a->in[0].data, a->out.data, &ml, 0, 0);
}

mg_status cu_permute(cu_ctx *c, const mg_kargs *a) {
    const mg_tdesc *dx = &a->in[0].d;
    int64_t xs[MG_MAX_DIMS], ys[MG_MAX_DIMS];
    dense_strides(dx, xs);
    dense_strides(&a->out.d, ys);
    mg_layout ml;
    mg_layout_init(&ml, &a->out.d);
    for (int i = 0; i < dx->ndim; i++) {
        const int p = a->attrs->perm[i];
        if (p < 0 || p >= dx->ndim)
            return mg_kernel_fail(a, MG_ERR_INVALID_ARG,
                                  "perm[%d] = %d is outside [0, %d)", i, p,
                                  dx->ndim);
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
    mg_layout ml;
    mg_layout_init(&ml, box);
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
        return mg_kernel_fail(a, MG_ERR_INVALID_ARG,
                              "axis %d is outside [0, %d)", ax, a->out.d.ndim);
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
        return mg_kernel_fail(a, MG_ERR_INVALID_ARG,
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
