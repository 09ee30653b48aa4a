/*
 * kernel_shared.h - kernel code that does not depend on the device, written
 * once for the CPU kernels (cpu_*.c) and the CUDA kernels (the .cu files
 * in cuda/):
 *   - the failure helper every kernel reports through;
 *   - strided layouts (broadcasting, permute, the boxes of slice, pad and
 *     concat);
 *   - the geometry of softmax, cross-entropy, conv2d, pooling and
 *     normalisation, with its setup and its failure messages;
 *   - the elementwise formulas and their derivatives, as two X-macro lists
 *     that each backend expands into its kernels and kernel table.
 * Adding a unary or binary elementwise op to the backends is one line of
 * MG_UNARY_OPS or MG_BINARY_OPS.
 *
 * Plain C11 that nvcc also compiles as C++; as in rng.h, MG_KFN makes the
 * functions __host__ __device__ under nvcc, so both devices evaluate the
 * same code. Setup functions run on the host only (they may fail).
 */
#ifndef MG_KERNEL_SHARED_H
#define MG_KERNEL_SHARED_H

#ifdef __cplusplus
extern "C" {
#endif
#include "backend.h"
#ifdef __cplusplus
}
#endif
#include "../common/half.h"
#include "../common/linear_ce.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#if defined(__CUDACC__)
#define MG_KFN static inline __host__ __device__
#else
#define MG_KFN static inline
#endif

/* ---- failures ------------------------------------------------------------ */

/* Kernels never touch the thread's last-error message: the executor owns it
 * and adds the op and tensor names, so they only leave a reason in a->why
 * and return s. */
static inline mg_status mg_kernel_fail(const mg_kargs *a, mg_status s,
                                       const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline mg_status mg_kernel_fail(const mg_kargs *a, mg_status s,
                                       const char *fmt, ...) {
    if (a && a->why && a->why_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(a->why, a->why_len, fmt, ap);
        va_end(ap);
    }
    return s;
}

/* Entry p of label or index data, whose dtype is MG_I32 or MG_I64 (the
 * shape rules admit no other), widened so that one kernel serves both. */
MG_KFN int64_t mg_index_at(const void *idx, mg_dtype dt, int64_t p) {
    return dt == MG_I64 ? ((const int64_t *)idx)[p]
                        : (int64_t)((const int32_t *)idx)[p];
}

/* Kernels that index with integer data check all of it (on the host) before
 * reading anything: fails unless every entry p of idx (of dtype dt) is in
 * [0, bound), naming an entry as `what` and its place as `where` ("index 7
 * at position 2 is outside [0, 5)"). */
static inline mg_status mg_kernel_check_indices(const mg_kargs *a,
                                                const void *idx, mg_dtype dt,
                                                int64_t n, int64_t bound,
                                                const char *what,
                                                const char *where) {
    for (int64_t p = 0; p < n; p++) {
        const int64_t v = mg_index_at(idx, dt, p);
        if (v < 0 || v >= bound)
            return mg_kernel_fail(a, MG_ERR_INVALID_ARG,
                                  "%s %" PRId64 " at %s %" PRId64
                                  " is outside [0, %" PRId64 ")",
                                  what, v, where, p, bound);
    }
    return MG_OK;
}

/* ---- strided layouts ----------------------------------------------------- */

/*
 * A contiguous iteration domain of `ndim` dims plus the element strides at
 * which two companion operands are visited alongside it. Broadcasting gives
 * a companion stride 0 on repeated dims; permute gives it shuffled strides;
 * a reduction walks its input and accumulates into an output whose reduced
 * dims have stride 0. Slots that are not used keep stride 0.
 */
typedef struct mg_layout {
    int ndim;
    int64_t shape[MG_MAX_DIMS];
    int64_t stride[2][MG_MAX_DIMS];
} mg_layout;

/* Domain = d's shape (a scalar becomes [1]); all strides 0. */
MG_KFN void mg_layout_init(mg_layout *l, const mg_tdesc *d) {
    l->ndim = d->ndim > 0 ? d->ndim : 1;
    for (int i = 0; i < l->ndim; i++) {
        l->shape[i] = d->ndim > 0 ? d->shape[i] : 1;
        l->stride[0][i] = l->stride[1][i] = 0;
    }
}

/* Strides of contiguous `in` read as if broadcast to the domain (numpy
 * rules: aligned from the right, size-1 and missing dims repeat). */
MG_KFN void mg_layout_broadcast(mg_layout *l, int slot, const mg_tdesc *in) {
    int64_t step = 1;
    int lead = l->ndim - in->ndim;
    for (int i = l->ndim - 1; i >= 0; i--) {
        int j = i - lead;
        int64_t n = j >= 0 ? in->shape[j] : 1;
        l->stride[slot][i] = n == 1 ? 0 : step;
        step *= n;
    }
}

/* Drops size-1 dims and merges dims that are contiguous in every slot, so
 * inner loops run as long as possible (equal shapes become one flat dim). */
MG_KFN void mg_layout_coalesce(mg_layout *l) {
    int n = 0;
    for (int i = 0; i < l->ndim; i++) {
        if (l->shape[i] == 1) continue;
        if (n > 0 && l->stride[0][n - 1] == l->stride[0][i] * l->shape[i] &&
            l->stride[1][n - 1] == l->stride[1][i] * l->shape[i]) {
            l->shape[n - 1] *= l->shape[i];
            l->stride[0][n - 1] = l->stride[0][i];
            l->stride[1][n - 1] = l->stride[1][i];
            continue;
        }
        l->shape[n] = l->shape[i];
        l->stride[0][n] = l->stride[0][i];
        l->stride[1][n] = l->stride[1][i];
        n++;
    }
    if (n == 0) {
        l->shape[0] = 1;
        l->stride[0][0] = l->stride[1][0] = 0;
        n = 1;
    }
    l->ndim = n;
}

/* Number of rows of the last dim, the unit the CPU kernels loop over. */
MG_KFN int64_t mg_layout_rows(const mg_layout *l) {
    int64_t rows = 1;
    for (int d = 0; d + 1 < l->ndim; d++) rows *= l->shape[d];
    return rows;
}

/* Advances idx/off to the next row (an odometer over all but the last dim). */
MG_KFN void mg_layout_next(const mg_layout *l, int64_t *idx, int64_t off[2]) {
    for (int d = l->ndim - 2; d >= 0; d--) {
        off[0] += l->stride[0][d];
        off[1] += l->stride[1][d];
        if (++idx[d] < l->shape[d]) return;
        off[0] -= l->stride[0][d] * l->shape[d];
        off[1] -= l->stride[1][d] * l->shape[d];
        idx[d] = 0;
    }
}

/* Offsets in both slots of the i-th element of the domain (row-major): the
 * random access a GPU thread needs. */
MG_KFN void mg_layout_offsets(const mg_layout *l, int64_t i, int64_t *o0,
                              int64_t *o1) {
    int64_t a = 0, b = 0;
    for (int d = l->ndim - 1; d >= 0; d--) {
        const int64_t n = l->shape[d], k = i % n;
        i /= n;
        a += k * l->stride[0][d];
        b += k * l->stride[1][d];
    }
    *o0 = a;
    *o1 = b;
}

/* Element strides of a dense (row-major) tensor. */
MG_KFN void mg_dense_strides(const mg_tdesc *d, int64_t *stride) {
    int64_t step = 1;
    for (int i = d->ndim - 1; i >= 0; i--) {
        stride[i] = step;
        step *= d->shape[i];
    }
}

/* The layout that copies a box of shape `box` from dense src, at corner
 * src_at, into dense dst at dst_at (NULL: the origin), for slice, pad and
 * concat: slot 0 walks src and slot 1 dst, from the element offsets base[0]
 * and base[1]. Not yet coalesced. */
MG_KFN void mg_layout_box(mg_layout *l, int64_t base[2], const mg_tdesc *src,
                          const int64_t *src_at, const mg_tdesc *dst,
                          const int64_t *dst_at, const mg_tdesc *box) {
    int64_t ss[MG_MAX_DIMS], ds[MG_MAX_DIMS];
    mg_dense_strides(src, ss);
    mg_dense_strides(dst, ds);
    mg_layout_init(l, box);
    base[0] = base[1] = 0;
    for (int i = 0; i < box->ndim; i++) {
        l->stride[0][i] = ss[i];
        l->stride[1][i] = ds[i];
        base[0] += (src_at ? src_at[i] : 0) * ss[i];
        base[1] += (dst_at ? dst_at[i] : 0) * ds[i];
    }
}

/* The layout of permute (y = x with axes permuted, y.shape[i] =
 * x.shape[perm[i]]): the domain is y; slot 0 walks x with permuted strides,
 * slot 1 walks y densely. Fails on a perm entry outside x's axes. */
static inline mg_status mg_layout_permute(const mg_kargs *a, mg_layout *l) {
    const mg_tdesc *dx = &a->in[0].d;
    int64_t xs[MG_MAX_DIMS], ys[MG_MAX_DIMS];
    mg_dense_strides(dx, xs);
    mg_dense_strides(&a->out.d, ys);
    mg_layout_init(l, &a->out.d);
    for (int i = 0; i < dx->ndim; i++) {
        const int p = a->attrs->perm[i];
        if (p < 0 || p >= dx->ndim)
            return mg_kernel_fail(a, MG_ERR_INVALID_ARG,
                                  "perm[%d] = %d is outside [0, %d)", i, p,
                                  dx->ndim);
        l->stride[0][i] = xs[p];
        l->stride[1][i] = ys[i];
    }
    return MG_OK;
}

/* concat (x0, x1) along a->attrs->axis: x0 goes to y's origin, x1 to the
 * corner `at` this writes. Fails on an axis outside y's. */
static inline mg_status mg_concat_corner(const mg_kargs *a, int64_t *at) {
    const int ax = a->attrs->axis;
    if (ax < 0 || ax >= a->out.d.ndim)
        return mg_kernel_fail(a, MG_ERR_INVALID_ARG,
                              "axis %d is outside [0, %d)", ax, a->out.d.ndim);
    for (int i = 0; i < MG_MAX_DIMS; i++) at[i] = 0;
    at[ax] = a->in[0].d.shape[ax];
    return MG_OK;
}

/* ---- softmax and loss geometry ------------------------------------------- */

/* softmax and log_softmax of x along a->attrs->axis: x viewed as [outer,
 * n, inner], normalised over n for each (outer, inner) row. */
typedef struct mg_softmax_dims {
    int64_t outer, n, inner;
} mg_softmax_dims;

static inline mg_status mg_softmax_dims_setup(const mg_kargs *a,
                                              mg_softmax_dims *d) {
    const mg_tdesc *x = &a->in[0].d;
    const int axis = a->attrs->axis;
    if (axis < 0 || axis >= x->ndim)
        return mg_kernel_fail(a, MG_ERR_INVALID_ARG,
                              "axis %d is outside [0, %d)", axis, x->ndim);
    d->outer = d->inner = 1;
    for (int i = 0; i < axis; i++) d->outer *= x->shape[i];
    for (int i = axis + 1; i < x->ndim; i++) d->inner *= x->shape[i];
    d->n = x->shape[axis];
    return MG_OK;
}

/* The cross-entropy ops read logits [N, C] and labels [N] from input slots
 * lo and lo + 1: rows N and classes C. */
static inline mg_status mg_ce_dims_setup(const mg_kargs *a, int lo,
                                         int64_t *rows, int64_t *classes) {
    const mg_tdesc *dl = &a->in[lo].d;
    if (dl->ndim != 2)
        return mg_kernel_fail(a, MG_ERR_SHAPE,
                              "logits must be [N, C], got %d dims", dl->ndim);
    *rows = dl->shape[0];
    *classes = dl->shape[1];
    return MG_OK;
}

/* ---- linear cross-entropy geometry --------------------------------------- */

/* linear_cross_entropy reads h [N, D], w [V, D] and labels [N] from input
 * slots lo, lo + 1 and lo + 2 (lo 1 for its gradient op, after gy), and
 * makes the logits `chunk` rows at a time in a->work. */
typedef struct mg_lce_dims {
    int64_t rows, dim, vocab, chunk;
} mg_lce_dims;

/* Checks what the kernels rely on: the shapes, a chunk in [1, N], the
 * workspace the op table's rule lends (linear_ce.h: the logits chunk,
 * and one loss per row when `forward`), and sizes within the int range
 * of BLAS and cuBLAS, whose GEMMs make each chunk. */
static inline mg_status mg_lce_dims_setup(const mg_kargs *a, int lo,
                                          int forward, mg_lce_dims *d) {
    const mg_tdesc *h = &a->in[lo].d, *w = &a->in[lo + 1].d,
                   *l = &a->in[lo + 2].d;
    if (h->ndim != 2 || w->ndim != 2 || w->shape[1] != h->shape[1] ||
        l->ndim != 1 || l->shape[0] != h->shape[0])
        return mg_kernel_fail(a, MG_ERR_SHAPE,
                              "needs h [N, D], w [V, D] and labels [N], got "
                              "%d, %d and %d dims",
                              h->ndim, w->ndim, l->ndim);
    d->rows = h->shape[0];
    d->dim = h->shape[1];
    d->vocab = w->shape[0];
    d->chunk = a->attrs->chunk_rows;
    if (d->chunk < 1 || d->chunk > d->rows)
        return mg_kernel_fail(a, MG_ERR_INVALID_ARG,
                              "chunk_rows %" PRId64 " is not in [1, %" PRId64
                              "]",
                              d->chunk, d->rows);
    if (d->chunk > INT32_MAX || d->dim > INT32_MAX || d->vocab > INT32_MAX)
        return mg_kernel_fail(a, MG_ERR_UNSUPPORTED,
                              "chunk, D or V exceeds the BLAS int range");
    /* a forward op given its logits (input 3) reads them, of [N, V] */
    const int given = forward && a->n_in > 3;
    if (given && (a->in[3].d.ndim != 2 || a->in[3].d.shape[0] != d->rows ||
                  a->in[3].d.shape[1] != d->vocab))
        return mg_kernel_fail(a, MG_ERR_SHAPE, "logits must be [N, V]");
    const size_t need = mg_lce_op_workspace(
        d->rows, d->vocab, d->chunk, mg_dtype_size(h->dtype), forward,
        a->attrs->has_ignore_index, given);
    if (a->work_bytes < need || !a->work)
        return mg_kernel_fail(a, MG_ERR_INTERNAL,
                              "needs %zu bytes of workspace, got %zu", need,
                              a->work_bytes);
    return MG_OK;
}

/* Checks every label of linear_cross_entropy (n of them, host memory)
 * before any is read: each is in [0, vocab) or, with has_ignore_index,
 * the ignore_index; *kept gets the count of the rows not ignored (the
 * mean's divisor). */
static inline mg_status mg_lce_check_labels(const mg_kargs *a,
                                            const void *labels, mg_dtype lt,
                                            int64_t n, int64_t vocab,
                                            int64_t *kept) {
    const int ign = a->attrs->has_ignore_index;
    const int64_t ii = a->attrs->ignore_index;
    int64_t k = 0;
    for (int64_t p = 0; p < n; p++) {
        const int64_t v = mg_index_at(labels, lt, p);
        if (ign && v == ii) continue;
        if (v < 0 || v >= vocab) {
            if (ign)
                return mg_kernel_fail(a, MG_ERR_INVALID_ARG,
                                      "label %" PRId64 " at row %" PRId64
                                      " is outside [0, %" PRId64
                                      ") and is not ignore_index %" PRId64,
                                      v, p, vocab, ii);
            return mg_kernel_fail(a, MG_ERR_INVALID_ARG,
                                  "label %" PRId64 " at row %" PRId64
                                  " is outside [0, %" PRId64 ")",
                                  v, p, vocab);
        }
        k++;
    }
    *kept = k;
    return MG_OK;
}

/* ---- attention geometry -------------------------------------------------- */

/* The attention op reads q [..., Lq, d], k [..., Lk, d], v [..., Lk, dv]
 * (inputs 0-2) and an optional additive mask that broadcasts to the scores
 * [..., Lq, Lk] (input mask_slot). batch is the product of the leading
 * dims; the mask's element for (b, i, j) is at mask_base(b) + i * ms_r +
 * j * ms_c, with stride 0 on broadcast dims. */
typedef struct mg_attn_dims {
    int64_t batch, lq, lk, d, dv;
    int has_mask, nbd;
    int64_t bshape[MG_MAX_DIMS], mstride[MG_MAX_DIMS];
    int64_t ms_r, ms_c;
} mg_attn_dims;

MG_KFN int64_t mg_attn_mask_base(const mg_attn_dims *d, int64_t b) {
    int64_t off = 0;
    for (int i = d->nbd - 1; i >= 0; i--) {
        off += (b % d->bshape[i]) * d->mstride[i];
        b /= d->bshape[i];
    }
    return off;
}

static inline mg_status mg_attn_dims_setup(const mg_kargs *a, int mask_slot,
                                           mg_attn_dims *d) {
    const mg_tdesc *q = &a->in[0].d, *k = &a->in[1].d, *v = &a->in[2].d;
    const int nd = q->ndim;
    if (nd < 2 || k->ndim != nd || v->ndim != nd)
        return mg_kernel_fail(a, MG_ERR_SHAPE,
                              "attention needs q, k, v of 2 or more dims");
    d->lq = q->shape[nd - 2];
    d->lk = k->shape[nd - 2];
    d->d = q->shape[nd - 1];
    d->dv = v->shape[nd - 1];
    d->batch = 1;
    d->nbd = nd - 2;
    for (int i = 0; i < nd - 2; i++) {
        d->bshape[i] = q->shape[i];
        d->batch *= q->shape[i];
    }
    d->has_mask = a->n_in > mask_slot;
    d->ms_r = d->ms_c = 0;
    for (int i = 0; i < nd - 2; i++) d->mstride[i] = 0;
    if (!d->has_mask) return MG_OK;
    const mg_tdesc *m = &a->in[mask_slot].d;
    if (m->ndim > nd)
        return mg_kernel_fail(a, MG_ERR_SHAPE,
                              "attention mask has more dims than q");
    /* contiguous strides of the mask, aligned from the right */
    int64_t st = 1;
    for (int i = m->ndim - 1; i >= 0; i--) {
        const int o = i + nd - m->ndim; /* the scores' axis */
        const int64_t s = m->shape[i] == 1 ? 0 : st;
        if (o == nd - 1) d->ms_c = s;
        else if (o == nd - 2) d->ms_r = s;
        else d->mstride[o] = s;
        st *= m->shape[i];
    }
    return MG_OK;
}

/* ---- conv2d geometry ----------------------------------------------------- */

/* conv2d and its gradients see x [N,C,H,W], y [N,O,OH,OW] and w
 * [O,C/groups,KH,KW]. For each (sample, group) the input windows unfold
 * into a column matrix of k rows by p columns, so that the op is a GEMM of
 * the group's m = O/groups filters with it. */
typedef struct mg_conv_dims {
    int64_t n, c, h, w; /* x */
    int64_t o, oh, ow;  /* y */
    int kh, kw, sh, sw, ph, pw, dh, dw;
    int64_t groups, cg, og; /* channels per group of x and of y */
    int64_t k, p, m;        /* GEMM sizes: rows of col, cols of col, og */
    int direct;             /* 1x1, stride 1, no padding: col is x itself */
} mg_conv_dims;

/* Sizes from x, y and w as above. */
static inline mg_status mg_conv_dims_setup(const mg_kargs *a, const mg_tdesc *x,
                                           const mg_tdesc *y, const mg_tdesc *w,
                                           mg_conv_dims *d) {
    const mg_attrs *at = a->attrs;
    if (x->ndim != 4 || y->ndim != 4 || w->ndim != 4 || at->groups < 1)
        return mg_kernel_fail(a, MG_ERR_SHAPE,
                              "conv2d kernels need 4-D tensors and groups "
                              ">= 1");
    d->n = x->shape[0];
    d->c = x->shape[1];
    d->h = x->shape[2];
    d->w = x->shape[3];
    d->o = y->shape[1];
    d->oh = y->shape[2];
    d->ow = y->shape[3];
    d->kh = (int)w->shape[2];
    d->kw = (int)w->shape[3];
    d->sh = at->stride[0];
    d->sw = at->stride[1];
    d->ph = at->pad[0];
    d->pw = at->pad[1];
    d->dh = at->dilation[0];
    d->dw = at->dilation[1];
    d->groups = at->groups;
    d->cg = d->c / d->groups;
    d->og = d->o / d->groups;
    d->k = d->cg * d->kh * d->kw;
    d->p = d->oh * d->ow;
    d->m = d->og;
    d->direct = d->kh == 1 && d->kw == 1 && d->sh == 1 && d->sw == 1 &&
                d->ph == 0 && d->pw == 0;
    return MG_OK;
}

/* The same for the op a->op, which names x, y and w among its tensors:
 * conv2d (x, w) -> y; conv2d_grad_input (gy, w) -> dx; conv2d_grad_weight
 * (gy, x) -> dw. */
static inline mg_status mg_conv_dims_of_op(const mg_kargs *a, mg_conv_dims *d) {
    switch (a->op) {
    case MG_OP_CONV2D:
        return mg_conv_dims_setup(a, &a->in[0].d, &a->out.d, &a->in[1].d, d);
    case MG_OP_CONV2D_GRAD_INPUT:
        return mg_conv_dims_setup(a, &a->out.d, &a->in[0].d, &a->in[1].d, d);
    case MG_OP_CONV2D_GRAD_WEIGHT:
        return mg_conv_dims_setup(a, &a->in[1].d, &a->in[0].d, &a->out.d, d);
    default:
        return mg_kernel_fail(a, MG_ERR_INTERNAL, "%s is not a conv2d op",
                              mgi_op_str(a->op));
    }
}

/* ---- pooling geometry ---------------------------------------------------- */

/* x [N,C,H,W] pooled to y [N,C,OH,OW]; planes = N * C. ph, pw pad the
 * top and left, ph1, pw1 the bottom and right (ops_pool.c); cip is
 * count_include_pad. */
typedef struct mg_pool2d_dims {
    int64_t planes, h, w, oh, ow;
    int kh, kw, sh, sw, ph, pw, ph1, pw1, cip;
} mg_pool2d_dims;

/* Window (oy, ox) clipped to x: rows [y0, y1), columns [x0, x1). */
typedef struct mg_pool2d_win {
    int64_t y0, y1, x0, x1;
} mg_pool2d_win;

static inline mg_status mg_pool2d_dims_setup(const mg_kargs *a,
                                             const mg_tdesc *x,
                                             const mg_tdesc *y,
                                             mg_pool2d_dims *d) {
    const mg_attrs *at = a->attrs;
    if (x->ndim != 4 || y->ndim != 4)
        return mg_kernel_fail(a, MG_ERR_SHAPE, "pooling needs 4-D tensors");
    d->planes = x->shape[0] * x->shape[1];
    d->h = x->shape[2];
    d->w = x->shape[3];
    d->oh = y->shape[2];
    d->ow = y->shape[3];
    d->kh = at->kernel[0];
    d->kw = at->kernel[1];
    d->sh = at->stride[0];
    d->sw = at->stride[1];
    d->ph = at->pad[0];
    d->pw = at->pad[1];
    d->ph1 = at->pad_end[0];
    d->pw1 = at->pad_end[1];
    d->cip = at->count_include_pad;
    return MG_OK;
}

MG_KFN mg_pool2d_win mg_pool2d_window(const mg_pool2d_dims *d, int64_t oy,
                                      int64_t ox) {
    const int64_t ys = oy * d->sh - d->ph, xs = ox * d->sw - d->pw;
    mg_pool2d_win r = {ys < 0 ? 0 : ys, ys + d->kh, xs < 0 ? 0 : xs,
                       xs + d->kw};
    if (r.y1 > d->h) r.y1 = d->h;
    if (r.x1 > d->w) r.x1 = d->w;
    return r;
}

/* What average pooling divides window (oy, ox)'s sum by: with
 * count_include_pad the window clipped to the padded input (padding
 * counts; a ceil_mode window's part past the end padding does not:
 * PyTorch's divisor), without it the count of x's elements, r's area.
 * Either is kh * kw for a window inside the padded input, the only kind
 * without ceil_mode when both sides pad alike. */
MG_KFN int64_t mg_pool2d_divisor(const mg_pool2d_dims *d, int64_t oy,
                                 int64_t ox, mg_pool2d_win r) {
    if (!d->cip) return (r.y1 - r.y0) * (r.x1 - r.x0);
    const int64_t ys = oy * d->sh - d->ph, xs = ox * d->sw - d->pw;
    int64_t ye = ys + d->kh, xe = xs + d->kw;
    if (ye > d->h + d->ph1) ye = d->h + d->ph1;
    if (xe > d->w + d->pw1) xe = d->w + d->pw1;
    return (ye - ys) * (xe - xs);
}

/* The element max pooling picks in one plane x: the first maximum in
 * row-major window order, never padding. A NaN counts as larger than any
 * number, as in PyTorch, so it propagates; the first NaN wins like the
 * first maximum does. Every max-pool kernel and its gradient call this, so
 * the gradient finds the element the forward picked. */
#define MG_POOL2D_ARGMAX_DEF(T, SUF)                                           \
    MG_KFN int64_t mg_pool2d_argmax_##SUF(const T *x, const mg_pool2d_dims *d, \
                                          mg_pool2d_win r) {                   \
        int64_t best = r.y0 * d->w + r.x0;                                     \
        for (int64_t iy = r.y0; iy < r.y1; iy++)                               \
            for (int64_t ix = r.x0; ix < r.x1; ix++) {                         \
                const T v = x[iy * d->w + ix], b = x[best];                    \
                if (v > b || (isnan(v) && !isnan(b))) best = iy * d->w + ix;   \
            }                                                                  \
        return best;                                                           \
    }
MG_POOL2D_ARGMAX_DEF(float, f32)
MG_POOL2D_ARGMAX_DEF(double, f64)
#undef MG_POOL2D_ARGMAX_DEF

/* The output length along one axis, for a kernel whose y is not an
 * operand (max_pool2d_argmax): ops_pool.c's rule, after its shape rule
 * has checked for overflow. */
static inline int64_t mg_pool2d_out_len(int64_t n, int k, int s, int p0, int p1,
                                        int ceil) {
    const int64_t span = n + p0 + p1 - k;
    int64_t out = (ceil ? span + (s - 1) : span) / s + 1;
    if (ceil && (out - 1) * s >= n + p0) out--;
    return out;
}

/* max_pool2d_argmax's byte (ops_compact.c): the picked element's place in
 * window (oy, ox), row-major over the kh x kw window with its padding,
 * from its index in the plane; and back. */
MG_KFN uint8_t mg_pool2d_argmax_byte(const mg_pool2d_dims *d, int64_t oy,
                                     int64_t ox, int64_t at) {
    const int64_t ys = oy * d->sh - d->ph, xs = ox * d->sw - d->pw;
    return (uint8_t)((at / d->w - ys) * d->kw + (at % d->w - xs));
}
MG_KFN int64_t mg_pool2d_argmax_at(const mg_pool2d_dims *d, int64_t oy,
                                   int64_t ox, uint8_t b) {
    const int64_t ys = oy * d->sh - d->ph, xs = ox * d->sw - d->pw;
    return (ys + b / d->kw) * d->w + xs + b % d->kw;
}

/* ---- normalisation geometry ---------------------------------------------- */

/* batchnorm and layernorm view x as [A, B, C] and normalise each group b
 * over its A * C elements:
 *   batchnorm  A = N, B = channels, C = spatial size; gamma indexed by b
 *   layernorm  A = 1, B = rows,     C = normalised size; gamma by c */
typedef struct mg_norm_dims {
    int64_t a, b, c;
    int gamma_by_c; /* layernorm: gamma varies along c, not b */
    double eps;
} mg_norm_dims;

MG_KFN int mg_norm_is_layer(mg_op op) {
    return op == MG_OP_LAYERNORM || op == MG_OP_LAYERNORM_GRAD_INPUT ||
           op == MG_OP_LAYERNORM_GRAD_GAMMA;
}

/* The [A, B, C] view of x (the op's input x, which gradient ops name as
 * theirs) for the op a->op. */
static inline mg_status mg_norm_dims_setup(const mg_kargs *a, const mg_tdesc *x,
                                           mg_norm_dims *d) {
    const int layer = mg_norm_is_layer(a->op);
    const int n = layer ? a->attrs->n_norm_axes : 1;
    if (n < 1 || n > x->ndim || x->ndim < (layer ? 1 : 2))
        return mg_kernel_fail(a, MG_ERR_SHAPE,
                              "cannot normalise %d axes of a %d-D tensor", n,
                              x->ndim);
    int64_t inner = 1;
    for (int i = layer ? x->ndim - n : 2; i < x->ndim; i++)
        inner *= x->shape[i];
    const int64_t numel = mgi_tdesc_numel(x);
    d->a = layer ? 1 : x->shape[0];
    d->b = layer ? numel / inner : x->shape[1];
    d->c = inner;
    d->gamma_by_c = layer;
    d->eps = a->attrs->eps;
    return MG_OK;
}

/* ---- 16-bit storage (pack_bf16, unpack_bf16): mg_bf16_from_f32 and
 * mg_f32_from_bf16 are in common/half.h, with float16's -------------- */

/* ---- elementwise formulas ------------------------------------------------ */

/* tanh approximation of gelu: sqrt(2/pi) and the cubic coefficient. */
#define MG_GELU_C 0.79788456080286535588
#define MG_GELU_K 0.044715
#define MG_GELU_U(T, x) ((T)MG_GELU_C * ((x) + (T)MG_GELU_K * (x) * (x) * (x)))

/* Exact derivative of the tanh approximation (not of the erf gelu), so that
 * gradients agree with finite differences of the forward op. */
#define MG_GELU_DERIV_DEF(T, SUF, TANH)                                        \
    MG_KFN T mg_gelu_deriv_##SUF(T x) {                                        \
        const T t = TANH(MG_GELU_U(T, x));                                     \
        const T du = (T)MG_GELU_C * ((T)1 + (T)(3 * MG_GELU_K) * x * x);       \
        return (T)0.5 * ((T)1 + t) + (T)0.5 * x * ((T)1 - t * t) * du;         \
    }
MG_GELU_DERIV_DEF(float, f32, tanhf)
MG_GELU_DERIV_DEF(double, f64, tanh)
#undef MG_GELU_DERIV_DEF
/* silu'(x) = s (1 + x (1 - s)) with s = sigmoid(x): silu_grad's factor. */
#define MG_SILU_DERIV_DEF(T, SUF, EXP)                                         \
    MG_KFN T mg_silu_deriv_##SUF(T x) {                                        \
        const T s = (T)1 / ((T)1 + EXP(-x));                                   \
        return s * ((T)1 + x * ((T)1 - s));                                    \
    }
MG_SILU_DERIV_DEF(float, f32, expf)
MG_SILU_DERIV_DEF(double, f64, exp)
#undef MG_SILU_DERIV_DEF
#ifdef __cplusplus
MG_KFN float mg_silu_deriv(float x) { return mg_silu_deriv_f32(x); }
MG_KFN double mg_silu_deriv(double x) { return mg_silu_deriv_f64(x); }
#else
#define mg_silu_deriv(x)                                                       \
    _Generic((x), float : mg_silu_deriv_f32, double : mg_silu_deriv_f64)(x)
#endif
#ifdef __cplusplus
MG_KFN float mg_gelu_deriv(float x) { return mg_gelu_deriv_f32(x); }
MG_KFN double mg_gelu_deriv(double x) { return mg_gelu_deriv_f64(x); }
#else
#define mg_gelu_deriv(x)                                                       \
    _Generic((x), float : mg_gelu_deriv_f32, double : mg_gelu_deriv_f64)(x)
#endif

/* ---- cast ---------------------------------------------------------------- */

/* A float converted to an integer type whose range is [lo, hi]: truncated
 * toward zero, saturated at the ends, NaN to 0. C leaves out-of-range
 * conversions undefined, and the two devices would differ on them. */
MG_KFN int64_t mg_cast_saturate(double x, int64_t lo, int64_t hi) {
    if (x != x) return 0;
    if (x <= (double)lo) return lo;
    if (x >= (double)hi) return hi;
    return (int64_t)x;
}
#define MG_CAST_PLAIN(TT, v) ((TT)(v))
#define MG_CAST_SAT32(TT, v)                                                   \
    ((TT)mg_cast_saturate((double)(v), INT32_MIN, INT32_MAX))
#define MG_CAST_SAT64(TT, v)                                                   \
    ((TT)mg_cast_saturate((double)(v), INT64_MIN, INT64_MAX))

/* X(FT, FROM, TT, TO, CONV): every (source, target) dtype pair of cast and
 * how one element converts. Between ints and from ints to floats it is C's
 * conversion (int64 to float rounds once, to nearest; int64 to int32
 * keeps the low bits, as numpy and PyTorch do). */
#define MG_CAST_PAIRS(X)                                                       \
    X(float, MG_F32, float, MG_F32, MG_CAST_PLAIN)                             \
    X(float, MG_F32, double, MG_F64, MG_CAST_PLAIN)                            \
    X(float, MG_F32, int32_t, MG_I32, MG_CAST_SAT32)                           \
    X(float, MG_F32, int64_t, MG_I64, MG_CAST_SAT64)                           \
    X(double, MG_F64, float, MG_F32, MG_CAST_PLAIN)                            \
    X(double, MG_F64, double, MG_F64, MG_CAST_PLAIN)                           \
    X(double, MG_F64, int32_t, MG_I32, MG_CAST_SAT32)                          \
    X(double, MG_F64, int64_t, MG_I64, MG_CAST_SAT64)                          \
    X(int32_t, MG_I32, float, MG_F32, MG_CAST_PLAIN)                           \
    X(int32_t, MG_I32, double, MG_F64, MG_CAST_PLAIN)                          \
    X(int32_t, MG_I32, int32_t, MG_I32, MG_CAST_PLAIN)                         \
    X(int32_t, MG_I32, int64_t, MG_I64, MG_CAST_PLAIN)                         \
    X(int64_t, MG_I64, float, MG_F32, MG_CAST_PLAIN)                           \
    X(int64_t, MG_I64, double, MG_F64, MG_CAST_PLAIN)                          \
    X(int64_t, MG_I64, int32_t, MG_I32, MG_CAST_PLAIN)                         \
    X(int64_t, MG_I64, int64_t, MG_I64, MG_CAST_PLAIN)

/*
 * X(name, OP, expr): the kernel of MG_OP_<OP>, named <name> in each backend,
 * computes y = expr elementwise. T is the element type; the maths functions
 * are the type-generic ones (<tgmath.h> in C, overloads in CUDA C++).
 *
 * Unary: expr of x; alpha is the op's attribute (a double).
 */
#define MG_UNARY_OPS(X)                                                        \
    X(neg, NEG, -x)                                                            \
    X(relu, RELU, x > 0 ? x : (T)0)                                            \
    X(gelu, GELU, (T)0.5 * x * ((T)1 + tanh(MG_GELU_U(T, x))))                 \
    X(silu, SILU, x / ((T)1 + exp(-x)))                                        \
    X(tanh, TANH, tanh(x))                                                     \
    X(sigmoid, SIGMOID, (T)1 / ((T)1 + exp(-x)))                               \
    X(exp, EXP, exp(x))                                                        \
    X(log, LOG, log(x))                                                        \
    X(sqrt, SQRT, sqrt(x))                                                     \
    X(erf, ERF, erf(x))                                                        \
    /* squares and cubes multiplied out, as PyTorch does: libm's pow costs  \
     * ~20x a multiply, and GPT-2's tanh GELU cubes every activation */     \
    X(pow, POW,                                                                \
      alpha == 2 ? x * x : alpha == 3 ? x * x * x : pow(x, (T)alpha))          \
    X(leaky_relu, LEAKY_RELU, x > 0 ? x : (T)alpha * x)                        \
    X(reciprocal, RECIPROCAL, (T)1 / x)                                        \
    X(rsqrt, RSQRT, (T)1 / sqrt(x))                                            \
    X(sin, SIN, sin(x))                                                        \
    X(cos, COS, cos(x))                                                        \
    X(abs, ABS, fabs(x))                                                       \
    X(is_nonzero, IS_NONZERO, x != 0 ? (T)1 : (T)0)                            \
    /* in double, then rounded once, as for the fill value */                  \
    X(scale, SCALE, (T)(alpha * (double)x))

/* Binary: expr of a and b, broadcast to y's shape (numpy rules). The
 * activation gradients take (gy, y), except gelu's, silu's and abs's, which
 * take (gy, x). maximum and minimum pass a NaN of either operand on, as
 * torch.maximum does (a != a is isnan without a type-generic isnan). */
#define MG_BINARY_OPS(X)                                                       \
    X(add, ADD, a + b)                                                         \
    X(sub, SUB, a - b)                                                         \
    X(mul, MUL, a *b)                                                          \
    X(div, DIV, a / b)                                                         \
    X(relu_grad, RELU_GRAD, b > 0 ? a : (T)0)                                  \
    X(gelu_grad, GELU_GRAD, a *mg_gelu_deriv(b))                               \
    X(silu_grad, SILU_GRAD, a *mg_silu_deriv(b))                               \
    X(tanh_grad, TANH_GRAD, a *((T)1 - b * b))                                 \
    X(sigmoid_grad, SIGMOID_GRAD, a *b *((T)1 - b))                            \
    X(abs_grad, ABS_GRAD, b > 0 ? a : b < 0 ? -a : (T)0)                       \
    X(maximum, MAXIMUM, (a > b || a != a) ? a : b)                             \
    X(minimum, MINIMUM, (a < b || a != a) ? a : b)

/* Comparisons and logical ops: expr of a and b (broadcast as above), true
 * or false, stored as 1 or 0 in the inputs' dtype, which may be any of the
 * four (memgrad has no bool dtype). A NaN compares as IEEE 754 says (only
 * != holds) and counts as true in the logical ops, as in PyTorch. */
#define MG_COMPARE_OPS(X)                                                      \
    X(eq, EQ, a == b)                                                          \
    X(ne, NE, a != b)                                                          \
    X(lt, LT, a < b)                                                           \
    X(le, LE, a <= b)                                                          \
    X(gt, GT, a > b)                                                           \
    X(ge, GE, a >= b)                                                          \
    X(logical_and, LOGICAL_AND, a != 0 && b != 0)                              \
    X(logical_or, LOGICAL_OR, a != 0 || b != 0)

/* ---- where, clamp, gather, index_select, cumsum -------------------------- */

/* where (cond, a, b): the domain is y's shape and slot k walks input k
 * broadcast to it (numpy rules), as mg_layout does for two operands. */
typedef struct mg_bcast3 {
    int ndim;
    int64_t shape[MG_MAX_DIMS];
    int64_t stride[3][MG_MAX_DIMS];
} mg_bcast3;

static inline void mg_bcast3_init(mg_bcast3 *l, const mg_kargs *a) {
    const mg_tdesc *y = &a->out.d;
    l->ndim = y->ndim;
    for (int i = 0; i < y->ndim; i++) l->shape[i] = y->shape[i];
    for (int k = 0; k < 3; k++) {
        const mg_tdesc *in = &a->in[k].d;
        const int lead = y->ndim - in->ndim;
        int64_t step = 1;
        for (int i = y->ndim - 1; i >= 0; i--) {
            const int64_t n = i - lead >= 0 ? in->shape[i - lead] : 1;
            l->stride[k][i] = n == 1 ? 0 : step;
            step *= n;
        }
    }
}

/* Offsets in the three inputs of the i-th element of y (row-major). */
MG_KFN void mg_bcast3_offsets(const mg_bcast3 *l, int64_t i, int64_t *o) {
    o[0] = o[1] = o[2] = 0;
    for (int d = l->ndim - 1; d >= 0; d--) {
        const int64_t n = l->shape[d], k = i % n;
        i /= n;
        for (int s = 0; s < 3; s++) o[s] += k * l->stride[s][d];
    }
}

/* Whether element p of data of dtype dt is nonzero (where's cond; a NaN
 * is nonzero, so true, as PyTorch's bool conversion has it). */
MG_KFN int mg_nonzero_at(const void *p, mg_dtype dt, int64_t i) {
    switch (dt) {
    case MG_F32: return ((const float *)p)[i] != 0;
    case MG_F64: return ((const double *)p)[i] != 0;
    case MG_I32: return ((const int32_t *)p)[i] != 0;
    default: return ((const int64_t *)p)[i] != 0;
    }
}

/* clamp: min(max(x, lo), hi) as torch.clamp computes it, so hi wins when
 * lo > hi and a NaN x stays NaN; the bounds are rounded to T first. Its
 * gradient passes gy where lo <= x <= hi (both ends included, as
 * PyTorch's) and is 0 elsewhere, a NaN x included. */
#define MG_CLAMP_DEF(T, SUF)                                                   \
    MG_KFN T mg_clamp_##SUF(T x, T lo, T hi) {                                 \
        const T t = x < lo ? lo : x;                                           \
        return t > hi ? hi : t;                                                \
    }                                                                          \
    MG_KFN T mg_clamp_grad_##SUF(T gy, T x, T lo, T hi) {                      \
        return x >= lo && x <= hi ? gy : (T)0;                                 \
    }
MG_CLAMP_DEF(float, f32)
MG_CLAMP_DEF(double, f64)
#undef MG_CLAMP_DEF

/* gather (x, index) -> y and gather_grad (gy, index) -> dx, along axis:
 * y has index's shape and y[..., j, ...] = x[..., index[..., j, ...], ...]
 * (torch.gather); index has x's rank and no dim larger than x's, except
 * along axis. index_select (x, index) -> y and index_select_grad (gy,
 * index) -> dx, with a 1-D index: y is x with axis resized to the index's
 * length, y[o, j, i] = x[o, index[j], i] in the [outer, n, inner] view. */
typedef struct mg_gather_dims {
    int ndim, axis;
    int64_t xshape[MG_MAX_DIMS], ishape[MG_MAX_DIMS];
    int64_t xstride[MG_MAX_DIMS], istride[MG_MAX_DIMS];
    int64_t outer, inner, nx, ni; /* index_select's view */
} mg_gather_dims;

/* x is the forward input (for the gradient ops, the output); the index is
 * input 1 of all four ops. Fails on an axis outside x's. */
static inline mg_status mg_gather_dims_setup(const mg_kargs *a,
                                             mg_gather_dims *d) {
    const int grad =
        a->op == MG_OP_GATHER_GRAD || a->op == MG_OP_INDEX_SELECT_GRAD;
    const mg_tdesc *x = grad ? &a->out.d : &a->in[0].d, *ix = &a->in[1].d;
    const int axis = a->attrs->axis;
    if (axis < 0 || axis >= x->ndim)
        return mg_kernel_fail(a, MG_ERR_INVALID_ARG,
                              "axis %d is outside [0, %d)", axis, x->ndim);
    d->ndim = x->ndim;
    d->axis = axis;
    for (int i = 0; i < x->ndim; i++) {
        d->xshape[i] = x->shape[i];
        d->ishape[i] = i < ix->ndim ? ix->shape[i] : 1;
    }
    mg_dense_strides(x, d->xstride);
    d->outer = d->inner = 1;
    for (int i = 0; i < axis; i++) d->outer *= x->shape[i];
    for (int i = axis + 1; i < x->ndim; i++) d->inner *= x->shape[i];
    d->nx = x->shape[axis];
    d->ni = mgi_tdesc_numel(ix);
    /* gather's index has x's rank: its own dense strides */
    int64_t step = 1;
    for (int i = x->ndim - 1; i >= 0; i--) {
        d->istride[i] = step;
        step *= d->ishape[i];
    }
    return MG_OK;
}

/* gather: the offset in x of element o of the index (and of y), whose
 * entry is v. */
MG_KFN int64_t mg_gather_xoff(const mg_gather_dims *d, int64_t o, int64_t v) {
    int64_t off = 0;
    for (int i = d->ndim - 1; i >= 0; i--) {
        const int64_t k = o % d->ishape[i];
        o /= d->ishape[i];
        off += (i == d->axis ? v : k) * d->xstride[i];
    }
    return off;
}

#endif
