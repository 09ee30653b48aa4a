/*
 * onnx_ops_shape.c - the converters that change a tensor's shape but not its
 * elements: Shape, Reshape, Unsqueeze, Squeeze, Flatten, Identity,
 * Transpose and Expand; on constants they fold.
 */
#include <string.h>

#include "onnx_ops.h"

mg_status mgi_onnx_op_shape(mgi_octx *c, const node_t *n) {
    int64_t shape[MG_MAX_DIMS];
    int nd = mgi_onnx_in_shape(c, n, 0, shape);
    if (nd < 0) return BAD_ATTR("input 0 is missing");
    int64_t start = mgi_onnx_attr_i(c, n, "start", 0),
            end = mgi_onnx_attr_i(c, n, "end", nd);
    if (start < 0) start += nd;
    if (end < 0) end += nd;
    start = start < 0 ? 0 : start > nd ? nd : start;
    end = end < start ? start : end > nd ? nd : end;
    int64_t len = end - start;
    mgi_oconst *k = mgi_onnx_const_new(c, ONNX__TENSOR_PROTO__DATA_TYPE__INT64,
                                       false, 1, &len);
    if (!k) return mg_last_status();
    for (int64_t d = 0; d < len; d++) k->i[d] = shape[start + d];
    return mgi_onnx_out_const(c, n, 0, k);
}

/* Reshape's target: 0 copies the input's dim (unless allowzero), one -1 is
 * inferred. */
static mg_status reshape_target(mgi_octx *c, const node_t *n, int nd_in,
                                const int64_t *in_shape_, int64_t numel,
                                int *nd_out, int64_t *out) {
    int64_t sh[MG_MAX_DIMS];
    int nd = mgi_onnx_const_ints(c, n, 1, sh, MG_MAX_DIMS);
    if (nd < 0)
        return UNSUP("the target shape must be a constant of rank at most %d "
                     "(a static shape)",
                     MG_MAX_DIMS);
    bool allowzero = mgi_onnx_attr_flag(c, n, "allowzero", false);
    int infer = -1;
    int64_t prod = 1;
    for (int d = 0; d < nd; d++) {
        int64_t v = sh[d];
        if (v == 0 && !allowzero) {
            if (d >= nd_in)
                return BAD_ATTR("shape entry %d is 0 past the input's rank", d);
            v = in_shape_[d];
        }
        if (v == -1) {
            if (infer >= 0) return BAD_ATTR("two -1 entries in the shape");
            infer = d;
            out[d] = 1;
            continue;
        }
        if (v < 0) return BAD_ATTR("shape entry %lld", (long long)v);
        out[d] = v;
        if (v && prod > INT64_MAX / v)
            return mgi_onnx_node_error(c, MG_ERR_SHAPE, "shape too large");
        prod *= v;
    }
    if (infer >= 0) {
        if (prod == 0 || numel % prod)
            return mgi_onnx_node_error(c, MG_ERR_SHAPE,
                                       "cannot infer -1: %lld elements",
                                       (long long)numel);
        out[infer] = numel / prod;
    }
    *nd_out = nd;
    return MG_OK;
}

/* Input 0 reshaped to (nd_out, out): Reshape, and Squeeze, Unsqueeze and
 * Flatten once they have their new shape. */
static mg_status reshape_to(mgi_octx *c, const node_t *n, int nd_out,
                            const int64_t *out) {
    mgi_oval *v = mgi_onnx_in(c, n, 0);
    if (v->c)
        return mgi_onnx_out_const(
            c, n, 0, mgi_onnx_const_reshaped(c, v->c, nd_out, out));
    return mgi_onnx_out(
        c, n, 0, mg_reshape(c->g, mgi_onnx_as_float(c, v->t), nd_out, out));
}

mg_status mgi_onnx_op_reshape(mgi_octx *c, const node_t *n) {
    int64_t shape[MG_MAX_DIMS], out[MG_MAX_DIMS];
    int nd = mgi_onnx_in_shape(c, n, 0, shape), nd_out = 0;
    if (nd < 0) return BAD_ATTR("input 0 is missing");
    TRY(reshape_target(c, n, nd, shape, mgi_onnx_numel(nd, shape), &nd_out,
                       out));
    return reshape_to(c, n, nd_out, out);
}

static int axes_of(mgi_octx *c, const node_t *n, int64_t *axes, int max) {
    int na = mgi_onnx_attr_ints(c, n, "axes", axes, max);
    if (na == -1 && c->opset >= 13)
        na = mgi_onnx_const_ints(c, n, 1, axes, max);
    return na;
}

mg_status mgi_onnx_op_unsqueeze(mgi_octx *c, const node_t *n) {
    int64_t shape[MG_MAX_DIMS], axes[MG_MAX_DIMS], out[MG_MAX_DIMS];
    int nd = mgi_onnx_in_shape(c, n, 0, shape);
    int na = axes_of(c, n, axes, MG_MAX_DIMS);
    if (nd < 0 || na < 0 || nd + na > MG_MAX_DIMS)
        return BAD_ATTR("needs an input and constant axes (rank at most %d)",
                        MG_MAX_DIMS);
    int no = nd + na;
    bool is_new[MG_MAX_DIMS] = {false};
    for (int k = 0; k < na; k++) {
        if (!mgi_onnx_norm_axis(&axes[k], no) || is_new[axes[k]])
            return BAD_ATTR("bad axis %lld", (long long)axes[k]);
        is_new[axes[k]] = true;
    }
    for (int d = 0, j = 0; d < no; d++) out[d] = is_new[d] ? 1 : shape[j++];
    return reshape_to(c, n, no, out);
}

mg_status mgi_onnx_op_squeeze(mgi_octx *c, const node_t *n) {
    int64_t shape[MG_MAX_DIMS], axes[MG_MAX_DIMS], out[MG_MAX_DIMS];
    int nd = mgi_onnx_in_shape(c, n, 0, shape);
    int na = axes_of(c, n, axes, MG_MAX_DIMS);
    if (nd < 0 || na == -2) return BAD_ATTR("needs an input and constant axes");
    bool drop[MG_MAX_DIMS] = {false};
    if (na < 0) {
        for (int d = 0; d < nd; d++) drop[d] = shape[d] == 1;
    } else {
        for (int k = 0; k < na; k++) {
            if (!mgi_onnx_norm_axis(&axes[k], nd) || shape[axes[k]] != 1)
                return BAD_ATTR("axis %lld is not of size 1",
                                (long long)axes[k]);
            drop[axes[k]] = true;
        }
    }
    int no = 0;
    for (int d = 0; d < nd; d++)
        if (!drop[d]) out[no++] = shape[d];
    return reshape_to(c, n, no, out);
}

mg_status mgi_onnx_op_flatten(mgi_octx *c, const node_t *n) {
    int64_t shape[MG_MAX_DIMS], out[2] = {1, 1};
    int nd = mgi_onnx_in_shape(c, n, 0, shape);
    int64_t axis = mgi_onnx_attr_i(c, n, "axis", 1);
    if (axis < 0) axis += nd;
    if (nd < 0 || axis < 0 || axis > nd) return BAD_ATTR("bad axis");
    for (int d = 0; d < nd; d++) out[d < axis ? 0 : 1] *= shape[d];
    return reshape_to(c, n, 2, out);
}

mg_status mgi_onnx_op_identity(mgi_octx *c, const node_t *n) {
    mgi_oval *v = mgi_onnx_in(c, n, 0);
    if (!v) return BAD_ATTR("input 0 is missing");
    if (v->c) return mgi_onnx_out_const(c, n, 0, v->c);
    return mgi_onnx_out(c, n, 0, v->t);
}

mg_status mgi_onnx_op_transpose(mgi_octx *c, const node_t *n) {
    int64_t shape[MG_MAX_DIMS], perm64[MG_MAX_DIMS];
    int nd = mgi_onnx_in_shape(c, n, 0, shape);
    if (nd < 0) return BAD_ATTR("input 0 is missing");
    int np = mgi_onnx_attr_ints(c, n, "perm", perm64, MG_MAX_DIMS);
    int perm[MG_MAX_DIMS];
    if (np == -2) return BAD_ATTR("perm has more than %d entries", MG_MAX_DIMS);
    if (np >= 0 && np != nd)
        return BAD_ATTR("perm has %d entries for rank %d", np, nd);
    /* a permutation of 0..nd-1, as mg_permute asks: the folding below
     * reads the constant through it, so a repeated axis would read past
     * the constant's data */
    bool seen[MG_MAX_DIMS] = {false};
    for (int d = 0; d < nd; d++) {
        int64_t p = np >= 0 ? perm64[d] : nd - 1 - d;
        if (p < 0 || p >= nd || seen[p])
            return BAD_ATTR("perm entry %d (%lld) is out of range or repeated: "
                            "perm must be a permutation of 0..%d",
                            d, (long long)p, nd - 1);
        seen[p] = true;
        perm[d] = (int)p;
    }
    mgi_oval *v = mgi_onnx_in(c, n, 0);
    if (v->c) {
        mgi_oconst *k = v->c;
        int64_t os[MG_MAX_DIMS], st[MG_MAX_DIMS], idx[MG_MAX_DIMS] = {0};
        for (int d = 0; d < nd; d++) os[d] = shape[perm[d]];
        int64_t s = 1;
        for (int d = nd - 1; d >= 0; d--) {
            st[d] = s;
            s *= shape[d];
        }
        mgi_oconst *r =
            mgi_onnx_const_new(c, k->onnx_type, k->f != NULL, nd, os);
        if (!r) return mg_last_status();
        for (int64_t e = 0; e < r->n; e++, mgi_onnx_next_idx(nd, os, idx)) {
            int64_t src = 0;
            for (int d = 0; d < nd; d++) src += idx[d] * st[perm[d]];
            if (r->f) r->f[e] = k->f[src];
            else r->i[e] = k->i[src];
        }
        return mgi_onnx_out_const(c, n, 0, r);
    }
    if (nd < 2) return mgi_onnx_out(c, n, 0, v->t);
    return mgi_onnx_out(c, n, 0,
                        mg_permute(c->g, mgi_onnx_as_float(c, v->t), perm));
}

mg_status mgi_onnx_op_expand(mgi_octx *c, const node_t *n) {
    int64_t shape[MG_MAX_DIMS], tgt[MG_MAX_DIMS], out[MG_MAX_DIMS];
    int nd = mgi_onnx_in_shape(c, n, 0, shape);
    int nt = mgi_onnx_const_ints(c, n, 1, tgt, MG_MAX_DIMS);
    int no;
    if (nd < 0 || nt < 0)
        return UNSUP("Expand needs a constant shape of rank at most %d",
                     MG_MAX_DIMS);
    if (!mgi_onnx_bcast(nd, shape, nt, tgt, &no, out))
        return mgi_onnx_node_error(c, MG_ERR_SHAPE, "shapes do not broadcast");
    mgi_oval *v = mgi_onnx_in(c, n, 0);
    if (v->c) {
        mgi_oconst *r =
            mgi_onnx_const_new(c, v->c->onnx_type, v->c->f != NULL, no, out);
        if (!r) return mg_last_status();
        int64_t idx[MG_MAX_DIMS] = {0};
        for (int64_t e = 0; e < r->n; e++, mgi_onnx_next_idx(no, out, idx)) {
            int64_t o = mgi_onnx_boff(v->c, no, idx);
            if (r->f) r->f[e] = v->c->f[o];
            else r->i[e] = v->c->i[o];
        }
        return mgi_onnx_out_const(c, n, 0, r);
    }
    if (no == nd && memcmp(shape, out, sizeof(int64_t) * (size_t)nd) == 0)
        return mgi_onnx_out(c, n, 0, v->t);
    return mgi_onnx_out(
        c, n, 0, mg_broadcast_to(c->g, mgi_onnx_as_float(c, v->t), no, out));
}

/* The ONNX ops this file converts (onnx_ops.c looks them up). */
