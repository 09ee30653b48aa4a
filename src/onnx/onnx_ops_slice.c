/*
 * onnx_ops_slice.c - the converters that select or join parts of tensors:
 * Concat, Gather, Slice, Split and Pad (memgrad's slice, pad, concat and
 * embedding ops, or folding on constants).
 */
#include <stdlib.h>
#include <string.h>

#include "onnx_ops.h"

mg_status mgi_onnx_op_concat(mgi_octx *c, const node_t *n) {
    if (n->n_input < 1 || n->n_input > 4096)
        return BAD_ATTR("needs 1 to 4096 inputs");
    /* required since opset 4 (the default 1 before is of opsets refused) */
    if (!mgi_onnx_attr(c, n, "axis", AT(INT)))
        return BAD_ATTR("Concat needs its axis attribute");
    int64_t axis = mgi_onnx_attr_i(c, n, "axis", 0);
    bool all_const = true;
    for (size_t k = 0; k < n->n_input; k++) {
        mgi_oval *v = mgi_onnx_in(c, n, k);
        if (!v) return BAD_ATTR("input %zu is missing", k);
        all_const = all_const && v->c;
    }
    if (all_const) {
        mgi_oconst *a = mgi_onnx_in_const(c, n, 0);
        int nd = a->ndim;
        if (!mgi_onnx_norm_axis(&axis, nd))
            return BAD_ATTR("axis %lld is out of range for rank %d",
                            (long long)mgi_onnx_attr_i(c, n, "axis", 0), nd);
        int64_t shape[MG_MAX_DIMS];
        memcpy(shape, a->shape, sizeof(int64_t) * (size_t)nd);
        shape[axis] = 0;
        for (size_t k = 0; k < n->n_input; k++) {
            mgi_oconst *b = mgi_onnx_in_const(c, n, k);
            if (b->ndim != nd || (b->f != NULL) != (a->f != NULL))
                return mgi_onnx_node_error(c, MG_ERR_SHAPE,
                                           "inputs differ in rank or type");
            for (int d = 0; d < nd; d++)
                if (d != axis && b->shape[d] != a->shape[d])
                    return mgi_onnx_node_error(c, MG_ERR_SHAPE,
                                               "inputs differ in dim %d", d);
            shape[axis] += b->shape[axis];
            if (shape[axis] > MGI_ONNX_MAX_CONST_ELEMS)
                return mgi_onnx_node_error(c, MG_ERR_SHAPE, "too large");
        }
        mgi_oconst *k =
            mgi_onnx_const_new(c, a->onnx_type, a->f != NULL, nd, shape);
        if (!k) return mg_last_status();
        int64_t outer = 1, inner = 1;
        for (int d = 0; d < axis; d++) outer *= shape[d];
        for (int d = (int)axis + 1; d < nd; d++) inner *= shape[d];
        int64_t pos = 0;
        for (int64_t o = 0; o < outer; o++)
            for (size_t q = 0; q < n->n_input; q++) {
                mgi_oconst *b = mgi_onnx_in_const(c, n, q);
                int64_t run = b->shape[axis] * inner;
                for (int64_t e = 0; e < run; e++, pos++) {
                    if (k->f) k->f[pos] = b->f[o * run + e];
                    else k->i[pos] = b->i[o * run + e];
                }
            }
        return mgi_onnx_out_const(c, n, 0, k);
    }
    mg_tensor *xs = malloc(n->n_input * sizeof *xs);
    if (!xs) return mg_set_error(MG_ERR_NOMEM, "onnx: out of memory");
    for (size_t k = 0; k < n->n_input; k++) {
        xs[k] = mgi_onnx_float_in(c, n, k);
        if (xs[k] == MG_NO_TENSOR) {
            free(xs);
            return mg_last_status();
        }
    }
    /* normalised against the rank before the cast to int: 2^32 + 1 would
     * otherwise become axis 1 */
    int64_t xs0[MG_MAX_DIMS];
    int nd = mgi_onnx_tshape(c, xs[0], xs0);
    if (!mgi_onnx_norm_axis(&axis, nd)) {
        free(xs);
        return BAD_ATTR("axis %lld is out of range for rank %d",
                        (long long)mgi_onnx_attr_i(c, n, "axis", 0), nd);
    }
    mg_tensor y = mg_concat(c->g, (int)n->n_input, xs, (int)axis);
    free(xs);
    return mgi_onnx_out(c, n, 0, y);
}

mg_status mgi_onnx_op_gather(mgi_octx *c, const node_t *n) {
    mgi_oval *dv = mgi_onnx_in(c, n, 0), *iv = mgi_onnx_in(c, n, 1);
    if (!dv || !iv) return BAD_ATTR("needs data and indices");
    int64_t axis = mgi_onnx_attr_i(c, n, "axis", 0);
    int64_t shape[MG_MAX_DIMS];
    int nd = mgi_onnx_in_shape(c, n, 0, shape);
    if (!mgi_onnx_norm_axis(&axis, nd)) return BAD_ATTR("bad axis");
    if (dv->c && iv->c) {
        mgi_oconst *d = dv->c, *ix = iv->c;
        int no = nd - 1 + ix->ndim;
        if (no > MG_MAX_DIMS)
            return mgi_onnx_node_error(c, MG_ERR_SHAPE, "rank too large");
        int64_t os[MG_MAX_DIMS];
        int j = 0;
        for (int q = 0; q < axis; q++) os[j++] = shape[q];
        for (int q = 0; q < ix->ndim; q++) os[j++] = ix->shape[q];
        for (int q = (int)axis + 1; q < nd; q++) os[j++] = shape[q];
        mgi_oconst *k =
            mgi_onnx_const_new(c, d->onnx_type, d->f != NULL, no, os);
        if (!k) return mg_last_status();
        int64_t outer = 1, inner = 1;
        for (int q = 0; q < axis; q++) outer *= shape[q];
        for (int q = (int)axis + 1; q < nd; q++) inner *= shape[q];
        int64_t pos = 0;
        for (int64_t o = 0; o < outer; o++)
            for (int64_t e = 0; e < ix->n; e++) {
                int64_t i = mgi_onnx_d2i(mgi_onnx_cval(ix, e));
                if (i < 0) i += shape[axis];
                if (i < 0 || i >= shape[axis])
                    return BAD_ATTR("index %lld out of range", (long long)i);
                for (int64_t r = 0; r < inner; r++, pos++) {
                    int64_t src = (o * shape[axis] + i) * inner + r;
                    if (k->f) k->f[pos] = d->f[src];
                    else k->i[pos] = d->i[src];
                }
            }
        return mgi_onnx_out_const(c, n, 0, k);
    }
    mg_tensor x = mgi_onnx_tensor(c, dv);
    if (x == MG_NO_TENSOR) return mg_last_status();
    if (iv->c && iv->c->ndim <= 1 && iv->c->n >= 1) {
        /* constant indices: a slice when they are consecutive */
        int64_t first = mgi_onnx_d2i(mgi_onnx_cval(iv->c, 0));
        if (first < 0) first += shape[axis];
        bool run = true;
        for (int64_t e = 1; e < iv->c->n && run; e++) {
            int64_t i = mgi_onnx_d2i(mgi_onnx_cval(iv->c, e));
            run = (i < 0 ? i + shape[axis] : i) == first + e;
        }
        if (run) {
            mg_tensor y = mg_slice(c->g, x, (int)axis, first, iv->c->n);
            if (iv->c->ndim == 0 && y != MG_NO_TENSOR) {
                int64_t os[MG_MAX_DIMS];
                int j = 0;
                for (int q = 0; q < nd; q++)
                    if (q != axis) os[j++] = shape[q];
                y = mg_reshape(c->g, y, j, os);
            }
            return mgi_onnx_out(c, n, 0, y);
        }
    }
    if (axis != 0 || nd < 1)
        return UNSUP(
            "a gather of a tensor along axis %lld with non-consecutive "
            "or non-constant indices",
            (long long)axis);
    /* rows of a table: an embedding of [V, rest] */
    mg_tensor idx = mgi_onnx_tensor(c, iv);
    mg_dtype idt;
    /* ids that went through float math (a Reshape, see as_float) */
    if (idx != MG_NO_TENSOR && mg_tensor_dtype(c->g, idx, &idt) == MG_OK &&
        (idt == MG_F32 || idt == MG_F64))
        idx = mg_cast(c->g, idx, MG_I32);
    if (idx == MG_NO_TENSOR) return mg_last_status();
    int64_t rest = mgi_onnx_numel(nd - 1, shape + 1);
    int64_t tshape2[2] = {shape[0], rest};
    mg_tensor tab = nd == 2 ? x : mg_reshape(c->g, x, 2, tshape2);
    mg_tensor y = mg_embedding(c->g, tab, idx);
    if (y != MG_NO_TENSOR && nd != 2) {
        int64_t is[MG_MAX_DIMS], os[MG_MAX_DIMS];
        int ni = mgi_onnx_tshape(c, idx, is);
        if (ni + nd - 1 > MG_MAX_DIMS)
            return mgi_onnx_node_error(c, MG_ERR_SHAPE, "rank too large");
        memcpy(os, is, sizeof(int64_t) * (size_t)ni);
        memcpy(os + ni, shape + 1, sizeof(int64_t) * (size_t)(nd - 1));
        y = mg_reshape(c->g, y, ni + nd - 1, os);
    }
    return mgi_onnx_out(c, n, 0, y);
}

mg_status mgi_onnx_op_slice(mgi_octx *c, const node_t *n) {
    int64_t shape[MG_MAX_DIMS];
    int nd = mgi_onnx_in_shape(c, n, 0, shape);
    if (nd < 0) return BAD_ATTR("input 0 is missing");
    int64_t st[MG_MAX_DIMS], en[MG_MAX_DIMS], ax[MG_MAX_DIMS], sp[MG_MAX_DIMS];
    int ns, ne, na, nsp;
    if (c->opset < 10) {
        ns = mgi_onnx_attr_ints(c, n, "starts", st, MG_MAX_DIMS);
        ne = mgi_onnx_attr_ints(c, n, "ends", en, MG_MAX_DIMS);
        na = mgi_onnx_attr_ints(c, n, "axes", ax, MG_MAX_DIMS);
        nsp = -1;
    } else {
        ns = mgi_onnx_const_ints(c, n, 1, st, MG_MAX_DIMS);
        ne = mgi_onnx_const_ints(c, n, 2, en, MG_MAX_DIMS);
        na = mgi_onnx_const_ints(c, n, 3, ax, MG_MAX_DIMS);
        nsp = mgi_onnx_const_ints(c, n, 4, sp, MG_MAX_DIMS);
    }
    if (ns < 0 || ne != ns || na == -2 || nsp == -2 || (na >= 0 && na != ns) ||
        (nsp >= 0 && nsp != ns))
        return UNSUP(
            "starts, ends, axes and steps must be constants of one length");
    mgi_oval *v = mgi_onnx_in(c, n, 0);
    mg_tensor y = v->c ? MG_NO_TENSOR : mgi_onnx_as_float(c, v->t);
    mgi_oconst *k = v->c;
    for (int q = 0; q < ns; q++) {
        int64_t a = na >= 0 ? ax[q] : q;
        if (!mgi_onnx_norm_axis(&a, nd))
            return BAD_ATTR("bad axis %lld", (long long)a);
        if (nsp >= 0 && sp[q] != 1)
            return UNSUP("Slice with step %lld (only 1)", (long long)sp[q]);
        int64_t dim = shape[a], s0 = st[q], e0 = en[q];
        if (s0 < 0) s0 += dim;
        if (e0 < 0) e0 += dim;
        s0 = s0 < 0 ? 0 : s0 > dim ? dim : s0;
        e0 = e0 < 0 ? 0 : e0 > dim ? dim : e0;
        if (e0 <= s0 && !k) return UNSUP("an empty slice");
        int64_t len = e0 > s0 ? e0 - s0 : 0;
        if (s0 == 0 && len == dim) continue;
        if (!k) {
            y = mg_slice(c->g, y, (int)a, s0, len);
            if (y == MG_NO_TENSOR) return mgi_onnx_out(c, n, 0, y);
        } else {
            int64_t os[MG_MAX_DIMS];
            memcpy(os, k->shape, sizeof os);
            os[a] = len;
            mgi_oconst *r =
                mgi_onnx_const_new(c, k->onnx_type, k->f != NULL, nd, os);
            if (!r) return mg_last_status();
            int64_t outer = 1, inner = 1;
            for (int d = 0; d < a; d++) outer *= k->shape[d];
            for (int d = (int)a + 1; d < nd; d++) inner *= k->shape[d];
            int64_t pos = 0;
            for (int64_t o = 0; o < outer; o++)
                for (int64_t i = s0; i < s0 + len; i++)
                    for (int64_t e = 0; e < inner; e++, pos++) {
                        int64_t src = (o * k->shape[a] + i) * inner + e;
                        if (r->f) r->f[pos] = k->f[src];
                        else r->i[pos] = k->i[src];
                    }
            k = r;
            shape[a] = len;
        }
    }
    if (k) return mgi_onnx_out_const(c, n, 0, k);
    return mgi_onnx_out(c, n, 0, y);
}

mg_status mgi_onnx_op_split(mgi_octx *c, const node_t *n) {
    int64_t shape[MG_MAX_DIMS], sizes[64];
    int nd = mgi_onnx_in_shape(c, n, 0, shape);
    int64_t axis = mgi_onnx_attr_i(c, n, "axis", 0);
    if (nd < 0 || !mgi_onnx_norm_axis(&axis, nd))
        return BAD_ATTR("bad input or axis");
    size_t no = n->n_output;
    if (no < 1 || no > 64) return UNSUP("Split into %zu outputs (1 to 64)", no);
    int64_t nout =
        mgi_onnx_attr_i(c, n, "num_outputs", (int64_t)no); /* opset 18 */
    if (nout != (int64_t)no)
        return BAD_ATTR("num_outputs %lld for %zu outputs", (long long)nout,
                        no);
    int ns = mgi_onnx_attr_ints(c, n, "split", sizes, 64);
    if (ns == -1 && c->opset >= 13)
        ns = mgi_onnx_const_ints(c, n, 1, sizes, 64);
    if (ns < 0) {
        if (shape[axis] % (int64_t)no)
            return UNSUP("an uneven Split without sizes");
        for (size_t k = 0; k < no; k++) sizes[k] = shape[axis] / (int64_t)no;
    } else if ((size_t)ns != no) {
        return BAD_ATTR("%d sizes for %zu outputs", ns, no);
    }
    for (size_t k = 0; k < no; k++)
        if (sizes[k] < 1 || sizes[k] > shape[axis])
            return BAD_ATTR("split size %lld", (long long)sizes[k]);
    mg_tensor x = mgi_onnx_float_in(c, n, 0);
    if (x == MG_NO_TENSOR) return mg_last_status();
    int64_t at = 0;
    for (size_t k = 0; k < no; k++) {
        TRY(mgi_onnx_out(c, n, k, mg_slice(c->g, x, (int)axis, at, sizes[k])));
        at += sizes[k];
    }
    return MG_OK;
}

mg_status mgi_onnx_op_pad(mgi_octx *c, const node_t *n) {
    char mode[32];
    mgi_onnx_attr_s(c, n, "mode", "constant", mode, sizeof mode);
    if (strcmp(mode, "constant") != 0)
        return UNSUP("Pad mode '%s' (only constant)", mode);
    mg_tensor x = mgi_onnx_float_in(c, n, 0);
    if (x == MG_NO_TENSOR) return mg_last_status();
    int64_t xs[MG_MAX_DIMS], pads[2 * MG_MAX_DIMS], axes[MG_MAX_DIMS];
    int nd = mgi_onnx_tshape(c, x, xs);
    int np = c->opset < 11
                 ? mgi_onnx_attr_ints(c, n, "pads", pads, 2 * MG_MAX_DIMS)
                 : mgi_onnx_const_ints(c, n, 1, pads, 2 * MG_MAX_DIMS);
    double value = c->opset < 11 ? mgi_onnx_attr_f(c, n, "value", 0.0) : 0.0;
    const mgi_oconst *cv = c->opset >= 11 ? mgi_onnx_slot_const(c, n, 2) : NULL;
    if (c->opset >= 11 && mgi_onnx_in(c, n, 2) && (!cv || cv->n != 1))
        return UNSUP("a pad value that is not a constant scalar");
    if (cv) value = mgi_onnx_cval(cv, 0);
    if (value != 0.0) return UNSUP("a pad value other than 0");
    int na = mgi_onnx_const_ints(c, n, 3, axes, MG_MAX_DIMS);
    if (na == -2) return UNSUP("axes that are not a constant");
    if (na < 0) {
        na = nd;
        for (int d = 0; d < nd; d++) axes[d] = d;
    }
    if (np != 2 * na)
        return BAD_ATTR("pads has %d entries for %d axes", np, na);
    int64_t b[MG_MAX_DIMS] = {0}, e[MG_MAX_DIMS] = {0};
    for (int k = 0; k < na; k++) {
        int64_t a = axes[k];
        if (!mgi_onnx_norm_axis(&a, nd)) return BAD_ATTR("bad axis");
        if (pads[k] < 0 || pads[k + na] < 0) return UNSUP("negative pads");
        b[a] = pads[k];
        e[a] = pads[k + na];
    }
    return mgi_onnx_out(c, n, 0, mg_pad(c->g, x, b, e));
}

/* The ONNX ops this file converts (onnx_ops.c looks them up). */
