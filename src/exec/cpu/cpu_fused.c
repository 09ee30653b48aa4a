/*
 * cpu_fused.c - the CPU's kernel for a fused chain of element-wise ops
 * (src/rewrite/fuse.c makes the chains): a tile interpreter. The output is
 * cut into tiles of MG_VMATH_BLOCK elements; for each tile every op of the
 * chain runs in turn over stack buffers, so the chain's intermediates
 * never reach memory, and only the last op writes the output.
 *
 * Each op's body is the unfused kernel's, expanded from the same lists
 * (MG_UNARY_OPS and MG_BINARY_OPS, kernel_shared.h), and the float32 ops
 * that go through cpu_vmath call the same block functions as the unfused
 * kernels (mgi_cpu_unary_tile_vec_f32, mgi_cpu_binary_tile_vec_f32) under
 * the same conditions (dropout's mask, keyed by the element's index, is
 * cpu_random.c's): every element is the same scalar operations in the
 * same order as in the unfused chain, so the bits are the same, whatever
 * the tile or the thread count.
 */
#include "cpu_kernels.h"
#include "cpu_vmath.h"

#include <string.h>
#include <tgmath.h> /* tanh/exp/... pick the float or double version */

#define TILE MG_VMATH_BLOCK

/* Operand count of an op the fused kernel has a body for; 0 for others. */
static int fused_arity(int op) {
    switch (op) {
#define ONE(name, OP, expr) case MG_OP_##OP:
        MG_UNARY_OPS(ONE)
#undef ONE
    case MG_OP_DROPOUT: return 1;
#define TWO(name, OP, expr) case MG_OP_##OP:
        MG_BINARY_OPS(TWO)
#undef TWO
        return 2;
    default: return 0;
    }
}

bool mgi_cpu_fused_has(mg_op op) { return fused_arity(op) != 0; }

/* An external input as the tiles read it: in place when it has the
 * output's element count (a dense tensor broadcast to a shape of the same
 * count is the same elements in the same order), else gathered per tile
 * through its broadcast strides (slot 0 of l). */
typedef struct fused_ext {
    const void *data;
    bool full;
    mg_layout l;
} fused_ext;

/* dst[0..m) = the elements i0 .. i0 + m of x broadcast to the domain of
 * l, a run along the last dim at a time (a copy where x is contiguous
 * there, a fill where it repeats), walking the other dims' odometer. */
#define GATHER_DEF(T, SUF)                                                     \
    static void gather_##SUF(T *restrict dst, const T *restrict x,             \
                             const mg_layout *l, int64_t i0, int64_t m) {      \
        int64_t idx[MG_MAX_DIMS], off = 0, r = i0;                             \
        for (int d = l->ndim - 1; d >= 0; d--) {                               \
            idx[d] = r % l->shape[d];                                          \
            r /= l->shape[d];                                                  \
            off += idx[d] * l->stride[0][d];                                   \
        }                                                                      \
        const int last = l->ndim - 1;                                          \
        const int64_t n = l->shape[last], st = l->stride[0][last];             \
        for (int64_t j = 0; j < m;) {                                          \
            const int64_t run = n - idx[last] < m - j ? n - idx[last] : m - j; \
            if (st == 1)                                                       \
                for (int64_t q = 0; q < run; q++) dst[j + q] = x[off + q];     \
            else if (st == 0)                                                  \
                for (int64_t q = 0; q < run; q++) dst[j + q] = x[off];         \
            else                                                               \
                for (int64_t q = 0; q < run; q++)                              \
                    dst[j + q] = x[off + q * st];                              \
            j += run;                                                          \
            idx[last] += run;                                                  \
            off += run * st;                                                   \
            for (int d = last; d > 0 && idx[d] == l->shape[d]; d--) {          \
                off -= l->stride[0][d] * l->shape[d];                          \
                idx[d] = 0;                                                    \
                idx[d - 1]++;                                                  \
                off += l->stride[0][d - 1];                                    \
            }                                                                  \
        }                                                                      \
    }
MG_CPU_FLOAT_TYPES(GATHER_DEF)
#undef GATHER_DEF

/* One op over one tile: y[j] = body(a[j]) or body(a[j], b[j]); element
 * j is element i0 + j of the output, which dropout's mask is keyed by.
 * full: neither operand is broadcast, the condition under which the
 * unfused binary kernels take their vector path. Dropout is cpu_random.c's
 * formula: a copy at p = 0, else the kept elements scaled. */
#define TILE_OP_DEF(TYPE, SUF, VEC_U, VEC_B)                                   \
    static void tile_op_##SUF(const mg_fused_instr *in, const TYPE *as,        \
                              const TYPE *bs, TYPE *restrict ys, int64_t m,    \
                              bool full, int64_t i0, uint64_t run_seed) {      \
        typedef TYPE T;                                                        \
        const double alpha = in->attrs ? in->attrs->alpha : 0.0;               \
        (void)alpha;                                                           \
        if (in->op == MG_OP_DROPOUT) {                                         \
            const mg_attrs *at = in->attrs;                                    \
            if (at->p == 0.0) {                                                \
                memcpy(ys, as, (size_t)m * sizeof *ys);                        \
                return;                                                        \
            }                                                                  \
            const T keep_scale = (T)(1.0 / (1.0 - at->p));                     \
            const uint64_t thr = mg_rng_keep_threshold(at->p);                 \
            const uint64_t key = mg_rng_key(run_seed, at->seed);               \
            for (int64_t j = 0; j < m; j++) {                                  \
                const uint64_t h =                                             \
                    mg_rng_hash(key, at->offset + (uint64_t)(i0 + j));         \
                ys[j] = mg_rng_keep(h, thr) ? as[j] * keep_scale : (T)0;       \
            }                                                                  \
            return;                                                            \
        }                                                                      \
        if (VEC_U(in->op, as, ys, m)) return;                                  \
        if (full && VEC_B(in->op, as, bs, ys, m)) return;                      \
        switch (in->op) {                                                      \
            MG_UNARY_OPS(UNARY_CASE)                                           \
            MG_BINARY_OPS(BINARY_CASE)                                         \
        default: break;                                                        \
        }                                                                      \
    }
#define UNARY_CASE(name, OP, expr)                                             \
    case MG_OP_##OP:                                                           \
        for (int64_t j = 0; j < m; j++) {                                      \
            const T x = as[j];                                                 \
            ys[j] = (expr);                                                    \
        }                                                                      \
        break;
#define BINARY_CASE(name, OP, expr)                                            \
    case MG_OP_##OP:                                                           \
        for (int64_t j = 0; j < m; j++) {                                      \
            const T a = as[j], b = bs[j];                                      \
            ys[j] = (expr);                                                    \
        }                                                                      \
        break;
/* float64 has no vector path */
#define NO_VEC_U(op, a, y, m) ((void)(op), (void)(a), (void)(y), false)
#define NO_VEC_B(op, a, b, y, m) ((void)(op), (void)(a), (void)(b), false)
TILE_OP_DEF(float, f32, mgi_cpu_unary_tile_vec_f32, mgi_cpu_binary_tile_vec_f32)
TILE_OP_DEF(double, f64, NO_VEC_U, NO_VEC_B)
#undef TILE_OP_DEF
#undef UNARY_CASE
#undef BINARY_CASE
#undef NO_VEC_U
#undef NO_VEC_B

/* The chain over all tiles; each tile's buffers are its thread's own. */
#define FUSED_LOOP_DEF(TYPE, SUF)                                              \
    static void fused_##SUF(const mg_kargs *a, const fused_ext *ext,           \
                            const bool *full, int64_t n) {                     \
        const int k = a->n_fused;                                              \
        const int64_t nt = (n + TILE - 1) / TILE;                              \
        MG_CPU_PAR_LOOP(n, for (int64_t t = 0; t < nt; t++), {                 \
            const int64_t i0 = t * TILE;                                       \
            const int64_t m = n - i0 < TILE ? n - i0 : TILE;                   \
            TYPE buf[MG_FUSE_MAX][TILE], ebuf[MG_MAX_INPUTS][TILE];            \
            const TYPE *ep[MG_MAX_INPUTS];                                     \
            for (int e = 0; e < a->n_in; e++) {                                \
                if (ext[e].full) {                                             \
                    ep[e] = (const TYPE *)ext[e].data + i0;                    \
                } else {                                                       \
                    gather_##SUF(ebuf[e], ext[e].data, &ext[e].l, i0, m);      \
                    ep[e] = ebuf[e];                                           \
                }                                                              \
            }                                                                  \
            for (int j = 0; j < k; j++) {                                      \
                const mg_fused_instr *in = &a->fused[j];                       \
                const TYPE *op[2] = {NULL, NULL};                              \
                for (int q = 0; q < in->n_in; q++)                             \
                    op[q] = in->src[q] >= 0 ? buf[in->src[q]]                  \
                                            : ep[-1 - in->src[q]];             \
                TYPE *y = j == k - 1 ? (TYPE *)a->out.data + i0 : buf[j];      \
                tile_op_##SUF(in, op[0], op[1], y, m, full[j], i0,             \
                              a->run_seed);                                    \
            }                                                                  \
        });                                                                    \
    }
MG_CPU_FLOAT_TYPES(FUSED_LOOP_DEF)
#undef FUSED_LOOP_DEF

/* The chain as the kernel relies on it: ops it has bodies for, with their
 * operand counts, operands that come before them, and inputs of the
 * output's dtype that broadcast to its shape. */
static mg_status check_chain(const mg_kargs *a) {
    const mg_tdesc *y = &a->out.d;
    if (!a->fused || a->n_fused < 1 || a->n_fused > MG_FUSE_MAX)
        return mg_kernel_fail(a, MG_ERR_INVALID_ARG,
                              "a fused chain needs 1 to %d ops, got %d",
                              MG_FUSE_MAX, a->n_fused);
    if (a->n_in < 0 || a->n_in > MG_MAX_INPUTS)
        return mg_kernel_fail(a, MG_ERR_INVALID_ARG,
                              "a fused chain has %d inputs, at most %d",
                              a->n_in, MG_MAX_INPUTS);
    if (y->dtype != MG_F32 && y->dtype != MG_F64)
        return mg_kernel_fail(a, MG_ERR_DTYPE,
                              "a fused chain computes in float32 or float64, "
                              "not %s",
                              mg_dtype_name(y->dtype));
    for (int e = 0; e < a->n_in; e++) {
        const mg_tdesc *x = &a->in[e].d;
        if (x->dtype != y->dtype)
            return mg_kernel_fail(a, MG_ERR_DTYPE,
                                  "fused chain input %d is %s, the chain "
                                  "computes in %s",
                                  e, mg_dtype_name(x->dtype),
                                  mg_dtype_name(y->dtype));
        const int lead = y->ndim - x->ndim;
        bool ok = lead >= 0;
        for (int i = 0; ok && i < x->ndim; i++)
            ok = x->shape[i] == 1 || x->shape[i] == y->shape[lead + i];
        if (!ok)
            return mg_kernel_fail(a, MG_ERR_SHAPE,
                                  "fused chain input %d does not broadcast "
                                  "to the output's shape",
                                  e);
    }
    for (int j = 0; j < a->n_fused; j++) {
        const mg_fused_instr *in = &a->fused[j];
        const int n = fused_arity(in->op);
        if (n == 0 || n != in->n_in)
            return mg_kernel_fail(a, MG_ERR_UNSUPPORTED,
                                  "op %d of a fused chain is %s with %d "
                                  "operands, which the fused kernel does "
                                  "not run",
                                  j, mgi_op_str((mg_op)in->op), in->n_in);
        if (in->op == MG_OP_DROPOUT &&
            !(in->attrs && in->attrs->p >= 0.0 && in->attrs->p < 1.0))
            return mg_kernel_fail(a, MG_ERR_INVALID_ARG,
                                  "op %d of a fused chain is dropout with "
                                  "p = %g, outside [0, 1)",
                                  j, in->attrs ? in->attrs->p : NAN);
        for (int q = 0; q < n; q++) {
            const int s = in->src[q];
            if (s >= j || (s < 0 && -1 - s >= a->n_in))
                return mg_kernel_fail(a, MG_ERR_INVALID_ARG,
                                      "operand %d of op %d (%s) of a fused "
                                      "chain reads %s %d, which it does "
                                      "not have before it",
                                      q, j, mgi_op_str((mg_op)in->op),
                                      s >= 0 ? "op" : "input",
                                      s >= 0 ? s : -1 - s);
        }
    }
    return MG_OK;
}

mg_status mgi_cpu_fused(const mg_kargs *a) {
    mg_status s = check_chain(a);
    if (s != MG_OK) return s;
    const int64_t n = mgi_tdesc_numel(&a->out.d);
    fused_ext ext[MG_MAX_INPUTS];
    for (int e = 0; e < a->n_in; e++) {
        ext[e].data = a->in[e].data;
        ext[e].full = mgi_tdesc_numel(&a->in[e].d) == n;
        if (!ext[e].full) {
            mg_layout_init(&ext[e].l, &a->out.d);
            mg_layout_broadcast(&ext[e].l, 0, &a->in[e].d);
            mg_layout_coalesce(&ext[e].l);
        }
    }
    /* per op: whether both its operands are whole (instructions' results
     * always are) */
    bool full[MG_FUSE_MAX];
    for (int j = 0; j < a->n_fused; j++) {
        const mg_fused_instr *in = &a->fused[j];
        full[j] = true;
        for (int q = 0; q < in->n_in; q++)
            if (in->src[q] < 0 && !ext[-1 - in->src[q]].full) full[j] = false;
    }
    if (n == 0) return MG_OK;
    if (a->out.d.dtype == MG_F32) fused_f32(a, ext, full, n);
    else fused_f64(a, ext, full, n);
    return MG_OK;
}
