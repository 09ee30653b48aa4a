/*
 * onnx_ops_fold.c - import-time evaluation of constants: numpy broadcasting
 * over constants, elementwise and Where folding, and reshaped copies, so
 * that the Shape/Gather/Unsqueeze/Concat arithmetic exporters emit around
 * Reshape never reaches the planned graph.
 */
#include <math.h>
#include <string.h>

#include "onnx_ops.h"

/* numpy broadcast of two shapes */
bool mgi_onnx_bcast(int na, const int64_t *a, int nb, const int64_t *b, int *nd,
                    int64_t *out) {
    int n = na > nb ? na : nb;
    for (int d = 0; d < n; d++) {
        int64_t x = d - (n - na) >= 0 ? a[d - (n - na)] : 1;
        int64_t y = d - (n - nb) >= 0 ? b[d - (n - nb)] : 1;
        if (x != y && x != 1 && y != 1) return false;
        out[d] = x == 1 ? y : x;
    }
    *nd = n;
    return true;
}

/* Offset in k of the output multi-index idx (rank nd), broadcasting. */
int64_t mgi_onnx_boff(const mgi_oconst *k, int nd, const int64_t *idx) {
    int64_t off = 0;
    for (int d = 0; d < k->ndim; d++) {
        int64_t i = idx[nd - k->ndim + d];
        off = off * k->shape[d] + (k->shape[d] == 1 ? 0 : i);
    }
    return off;
}

void mgi_onnx_next_idx(int nd, const int64_t *shape, int64_t *idx) {
    for (int d = nd - 1; d >= 0; d--) {
        if (++idx[d] < shape[d]) return;
        idx[d] = 0;
    }
}

mg_status mgi_onnx_fold_consts(mgi_octx *c, const mgi_oconst *a,
                               const mgi_oconst *b, fold_op op,
                               mgi_oconst **out) {
    int nd;
    int64_t shape[MG_MAX_DIMS];
    *out = NULL;
    if (!mgi_onnx_bcast(a->ndim, a->shape, b->ndim, b->shape, &nd, shape))
        return mgi_onnx_node_error(c, MG_ERR_SHAPE, "shapes do not broadcast");
    bool cmp =
        op == F_EQ || op == F_LT || op == F_GT || op == F_AND || op == F_OR;
    bool fl = !cmp && (a->f || b->f);
    mgi_oconst *k = mgi_onnx_const_new(
        c, cmp ? ONNX__TENSOR_PROTO__DATA_TYPE__BOOL : a->onnx_type, fl, nd,
        shape);
    if (!k) return mg_last_status();
    int64_t idx[MG_MAX_DIMS] = {0};
    for (int64_t e = 0; e < k->n; e++, mgi_onnx_next_idx(nd, shape, idx)) {
        int64_t ia = mgi_onnx_boff(a, nd, idx), ib = mgi_onnx_boff(b, nd, idx);
        if (fl) {
            double x = mgi_onnx_cval(a, ia), y = mgi_onnx_cval(b, ib), r;
            switch (op) {
            case F_ADD: r = x + y; break;
            case F_SUB: r = x - y; break;
            case F_MUL: r = x * y; break;
            case F_DIV: r = x / y; break;
            case F_POW: r = pow(x, y); break;
            case F_MIN: r = x < y ? x : y; break;
            default: r = x > y ? x : y; break;
            }
            if (a->onnx_type == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT)
                r = (float)r;
            k->f[e] = r;
        } else if (cmp) {
            double x = mgi_onnx_cval(a, ia), y = mgi_onnx_cval(b, ib);
            int64_t r;
            switch (op) {
            case F_EQ: r = x == y; break;
            case F_LT: r = x < y; break;
            case F_GT: r = x > y; break;
            case F_AND: r = x != 0 && y != 0; break;
            default: r = x != 0 || y != 0; break;
            }
            k->i[e] = r;
        } else {
            int64_t x = a->i[ia], y = b->i[ib], r;
            switch (op) {
            case F_ADD: r = (int64_t)((uint64_t)x + (uint64_t)y); break;
            case F_SUB: r = (int64_t)((uint64_t)x - (uint64_t)y); break;
            case F_MUL: r = (int64_t)((uint64_t)x * (uint64_t)y); break;
            case F_DIV:
                if (y == 0 || (x == INT64_MIN && y == -1))
                    return mgi_onnx_node_error(c, MG_ERR_INVALID_ARG,
                                               "integer division by zero");
                r = x / y; /* ONNX integer Div truncates, as C does */
                break;
            case F_POW: r = mgi_onnx_d2i(pow((double)x, (double)y)); break;
            case F_MIN: r = x < y ? x : y; break;
            default: r = x > y ? x : y; break;
            }
            k->i[e] = r;
        }
    }
    *out = k;
    return MG_OK;
}

mg_status mgi_onnx_fold_binary(mgi_octx *c, const node_t *n, fold_op op) {
    mgi_oconst *k;
    TRY(mgi_onnx_fold_consts(c, mgi_onnx_in_const(c, n, 0),
                             mgi_onnx_in_const(c, n, 1), op, &k));
    return mgi_onnx_out_const(c, n, 0, k);
}

mg_status mgi_onnx_fold_where(mgi_octx *c, const node_t *n) {
    mgi_oconst *q = mgi_onnx_in_const(c, n, 0), *a = mgi_onnx_in_const(c, n, 1),
               *b = mgi_onnx_in_const(c, n, 2);
    int nd, nd2;
    int64_t s1[MG_MAX_DIMS], shape[MG_MAX_DIMS];
    if (!mgi_onnx_bcast(q->ndim, q->shape, a->ndim, a->shape, &nd, s1) ||
        !mgi_onnx_bcast(nd, s1, b->ndim, b->shape, &nd2, shape))
        return mgi_onnx_node_error(c, MG_ERR_SHAPE, "shapes do not broadcast");
    bool fl = a->f != NULL;
    if (fl != (b->f != NULL))
        return mgi_onnx_node_error(c, MG_ERR_DTYPE, "X and Y types differ");
    mgi_oconst *k = mgi_onnx_const_new(c, a->onnx_type, fl, nd2, shape);
    if (!k) return mg_last_status();
    int64_t idx[MG_MAX_DIMS] = {0};
    for (int64_t e = 0; e < k->n; e++, mgi_onnx_next_idx(nd2, shape, idx)) {
        bool t = mgi_onnx_cval(q, mgi_onnx_boff(q, nd2, idx)) != 0;
        const mgi_oconst *src = t ? a : b;
        int64_t o = mgi_onnx_boff(src, nd2, idx);
        if (fl) k->f[e] = src->f[o];
        else k->i[e] = src->i[o];
    }
    return mgi_onnx_out_const(c, n, 0, k);
}

/* A constant with k's data and a new shape (Reshape, Squeeze, Unsqueeze,
 * Flatten on constants). */
mgi_oconst *mgi_onnx_const_reshaped(mgi_octx *c, const mgi_oconst *k, int nd,
                                    const int64_t *shape) {
    mgi_oconst *r =
        mgi_onnx_const_new(c, k->onnx_type, k->f != NULL, nd, shape);
    if (!r) return NULL;
    if (r->n != k->n) {
        mgi_onnx_node_error(c, MG_ERR_SHAPE, "reshape of %lld elements to %lld",
                            (long long)k->n, (long long)r->n);
        return NULL;
    }
    if (k->f) memcpy(r->f, k->f, (size_t)k->n * sizeof(double));
    else memcpy(r->i, k->i, (size_t)k->n * sizeof(int64_t));
    return r;
}

/* The shape of input 0, tensor or constant. */
int mgi_onnx_in_shape(mgi_octx *c, const node_t *n, size_t k, int64_t *shape) {
    mgi_oval *v = mgi_onnx_in(c, n, k);
    if (!v) return -1;
    if (v->c) {
        memcpy(shape, v->c->shape, sizeof(int64_t) * (size_t)v->c->ndim);
        return v->c->ndim;
    }
    return mgi_onnx_tshape(c, v->t, shape);
}
