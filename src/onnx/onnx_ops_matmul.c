/*
 * onnx_ops_matmul.c - the matrix product converters: MatMul (batched, with
 * broadcast leading dims) and Gemm (transposes, alpha, beta and C). A MatMul
 * that closes softmax(Q K^T * s + mask) V becomes memgrad's fused attention
 * op (mg_attention_ex), which keeps no Lq x Lk scores.
 */
#include <math.h>
#include <string.h>

#include "onnx_ops.h"

/* ---- attention -----------------------------------------------------------
 * MatMul(p, v) with p = Softmax(x) over the last axis, x = Add(s, mask) (or
 * Add(mask, s), or Where(cond, s, fill) or Where(cond, fill, s) with fill
 * one constant value not +inf or NaN, as torch's masked_fill exports; or
 * s itself), s = Mul(t, c), Mul(c, t) or Div(t, c) with c
 * one value (or t itself; a constant becomes the op's scale, a tensor such
 * as an initializer multiplies or divides q), t = MatMul(q, kt): every
 * intermediate
 * value read by the next node alone (and by no graph output), q, kt, v of
 * one rank with equal leading dims, no broadcasting. k is kt with its last
 * two axes swapped: the input of a Transpose that swaps them, or a
 * transpose. The nodes of the chain were converted already; their outputs
 * are left unread, so no plan computes them. */

static bool is_op(const node_t *n, const char *op) {
    return n &&
           (!n->domain || !n->domain[0] || !strcmp(n->domain, "ai.onnx")) &&
           !strcmp(S(n->op_type), op);
}

/* A scale: a scalar float constant (into *v), or else a one-element
 * tensor such as an initializer, which is a trained parameter (into *t,
 * applied to q so that its gradient flows). */
static bool scalar_value(mgi_octx *c, const char *name, double *v,
                         mg_tensor *t) {
    mgi_oval *o = mgi_onnx_lookup(c, name);
    *t = MG_NO_TENSOR;
    if (!o) return false;
    if (o->c) {
        if (!o->c->f || o->c->n != 1) return false;
        *v = o->c->f[0];
        return true;
    }
    if (o->t == MG_NO_TENSOR || mg_tensor_numel(c->g, o->t) != 1) return false;
    mg_dtype dt;
    mg_tensor_dtype(c->g, o->t, &dt);
    if (dt != MG_F32 && dt != MG_F64) return false;
    *t = o->t;
    *v = 1.0;
    return true;
}

/* The graph tensor of value `name` (a constant gets one), shape in sh. */
static mg_tensor named_tensor(mgi_octx *c, const char *name, int *nd,
                              int64_t *sh) {
    mgi_oval *o = mgi_onnx_lookup(c, name);
    mg_tensor t = o ? mgi_onnx_tensor(c, o) : MG_NO_TENSOR;
    *nd = t == MG_NO_TENSOR ? -1 : mgi_onnx_tshape(c, t, sh);
    return t;
}

/* The additive mask equal to Where node w before a softmax, whose scores
 * are its input score_side (1 or 2) and whose other value input is the
 * constant fill: fill where the Where picks fill, 0 where it picks the
 * scores, in cond's shape (into *nd, shape). A constant condition gives a
 * constant mask, -inf kept (the fused kernel's rows take it as no weight);
 * a tensor condition gives (picks fill) * fill with -inf made the lowest
 * float, so that 0 * fill stays 0. MG_NO_TENSOR if cond is neither. */
static mg_tensor where_mask(mgi_octx *c, const node_t *w, int score_side,
                            double fill, int *nd, int64_t *shape) {
    const mgi_oconst *cond = mgi_onnx_in_const(c, w, 0);
    if (cond) {
        mgi_oconst *k =
            mgi_onnx_const_new(c, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, true,
                               cond->ndim, cond->shape);
        if (!k) return MG_NO_TENSOR;
        for (int64_t e = 0; e < k->n; e++) {
            const bool picks_fill =
                (mgi_onnx_cval(cond, e) != 0) == (score_side == 2);
            k->f[e] = picks_fill ? fill : 0.0;
        }
        mgi_oval tmp = {w->input[0], MG_NO_TENSOR, k, NULL};
        mg_tensor t = mgi_onnx_tensor(c, &tmp);
        *nd = t == MG_NO_TENSOR ? -1 : mgi_onnx_tshape(c, t, shape);
        return t;
    }
    mg_tensor ct = mgi_onnx_float_in(c, w, 0);
    if (ct == MG_NO_TENSOR) return MG_NO_TENSOR;
    mg_tensor pick = score_side == 1 ? mgi_onnx_one_minus(c, ct) : ct;
    const double lowest = -3.4028234663852886e38;
    mg_tensor t = pick == MG_NO_TENSOR
                      ? MG_NO_TENSOR
                      : mg_scale(c->g, pick, fill < lowest ? lowest : fill);
    *nd = t == MG_NO_TENSOR ? -1 : mgi_onnx_tshape(c, t, shape);
    return t;
}

/* Whether constant k, broadcast to the scores [..., lq, lk], is the causal
 * mask: a value that removes a key (-inf, or the lowest float and below,
 * which exp takes to 0 beside any finite score) exactly where column j >
 * row i, and 0 elsewhere, the same in every leading entry. The fused op's
 * causal flag then does the masking and skips the removed tiles, where a
 * mask tensor would be read for every score (issue 46: torch's
 * masked_fill of a triu buffer, the causal mask of every exported GPT).
 * where_side: k is a Where's condition whose scores are on that side (1
 * or 2: a nonzero entry picks input 1), fill its other value; 0: k is an
 * additive mask. */
static bool causal_const(const mgi_oconst *k, int where_side, double fill,
                         int64_t lq, int64_t lk) {
    const double lowest = -3.4028234663852886e38;
    if (!k || k->ndim < 2 || lq != lk || k->shape[k->ndim - 2] != lq ||
        k->shape[k->ndim - 1] != lk || (where_side && !(fill <= lowest)))
        return false;
    for (int64_t e = 0; e < k->n; e++) {
        const int64_t i = e / lk % lq, j = e % lk;
        const double v = mgi_onnx_cval(k, e);
        const bool removed =
            where_side ? (v != 0) == (where_side == 2) : v <= lowest;
        if (removed != (j > i) || (!where_side && !removed && v != 0))
            return false;
    }
    return true;
}

/* The attention pattern's nodes and values as try_attention matches them,
 * from the softmax back to q kt. */
typedef struct attn_match {
    const node_t *sm; /* the Softmax */
    const node_t *xn; /* the producer of its input x */
    const char *x;    /* the scores, with a mask added or not */
    const char *s;    /* the scaled scores */
    const char *mask; /* an Add's mask, or NULL */
    int score_side;   /* a Where mask: the scores' side (1 or 2), or 0 */
    double fill;      /* the Where's fill on the other side */
    const char *t;    /* q kt */
    const node_t *tn; /* its MatMul */
    double scale;     /* a constant scale */
    mg_tensor st;     /* a scale tensor, or MG_NO_TENSOR */
    bool div;         /* s = Div(t, c) */
} attn_match;

/* The graph tensors of the pattern's values and their shapes. */
typedef struct attn_operands {
    mg_tensor q, kt, v, xt, m;
    bool causal; /* the mask is the causal one (causal_const): no m */
    int nq, nkt, nv, nx, nm;
    int64_t sq[MG_MAX_DIMS], skt[MG_MAX_DIMS], sv[MG_MAX_DIMS], sx[MG_MAX_DIMS],
        smk[MG_MAX_DIMS];
    mg_dtype dq;
} attn_operands;

/* The scores s under x: x itself, one side of an Add (the other the
 * mask), or one side of a Where whose other side is one constant value
 * not +inf or NaN. False when x's producer is such a node but does not
 * match. */
static bool match_mask(mgi_octx *c, attn_match *a) {
    const node_t *xn = a->xn;
    a->s = a->x;
    if (is_op(xn, "Where") && xn->n_input == 3) {
        for (int i = 1; i <= 2 && !a->score_side; i++) {
            const node_t *p = mgi_onnx_sole_producer(c, xn->input[i]);
            mgi_oval *f = mgi_onnx_lookup(c, xn->input[3 - i]);
            const mgi_oconst *fc = !f ? NULL : f->c ? f->c : f->init;
            if ((is_op(p, "Mul") || is_op(p, "Div") || is_op(p, "MatMul")) &&
                fc && fc->n == 1 && fc->f) {
                a->fill = fc->f[0];
                if (isnan(a->fill) || a->fill == INFINITY) return false;
                a->s = xn->input[i];
                a->score_side = i;
            }
        }
        return a->score_side != 0;
    }
    if (is_op(xn, "Add") && xn->n_input == 2) {
        for (int i = 0; i < 2 && !a->mask; i++) {
            const node_t *p = mgi_onnx_sole_producer(c, xn->input[i]);
            if (is_op(p, "Mul") || is_op(p, "Div") || is_op(p, "MatMul")) {
                a->s = xn->input[i];
                a->mask = xn->input[1 - i];
            }
        }
        return a->mask != NULL;
    }
    return true;
}

/* q kt under s: s itself, or Mul(t, c), Mul(c, t) or Div(t, c) with c a
 * scale (scalar_value); the scale finite and not 0. */
static bool match_scale(mgi_octx *c, attn_match *a) {
    double cv;
    a->scale = 1.0;
    a->st = MG_NO_TENSOR;
    a->t = a->s;
    const node_t *sn = mgi_onnx_sole_producer(c, a->s);
    a->div = is_op(sn, "Div");
    if ((is_op(sn, "Mul") || a->div) && sn->n_input == 2) {
        if (scalar_value(c, sn->input[1], &cv, &a->st)) {
            a->t = sn->input[0];
            a->scale = a->div ? 1.0 / cv : cv;
        } else if (!a->div && scalar_value(c, sn->input[0], &cv, &a->st)) {
            a->t = sn->input[1];
            a->scale = cv;
        } else {
            return false;
        }
    }
    return isfinite(a->scale) && a->scale != 0;
}

/* The graph tensors of q, kt, v (MatMul n's second input), x and the mask
 * (a Where's made by where_mask); false, with no error left set, when one
 * has none. */
static bool attn_tensors(mgi_octx *c, const node_t *n, const attn_match *a,
                         attn_operands *o) {
    o->nm = 0;
    o->causal = false;
    o->q = named_tensor(c, a->tn->input[0], &o->nq, o->sq);
    o->kt = named_tensor(c, a->tn->input[1], &o->nkt, o->skt);
    o->v = named_tensor(c, n->input[1], &o->nv, o->sv);
    o->xt = named_tensor(c, a->x, &o->nx, o->sx);
    if (o->nx >= 2 && (a->mask || a->score_side)) {
        const mgi_oval *mv = a->mask ? mgi_onnx_lookup(c, a->mask) : NULL;
        const mgi_oconst *k =
            a->mask ? (mv ? mv->c : NULL) : mgi_onnx_in_const(c, a->xn, 0);
        o->causal = k && k->ndim <= o->nx &&
                    causal_const(k, a->score_side, a->fill, o->sx[o->nx - 2],
                                 o->sx[o->nx - 1]);
    }
    o->m = a->mask && !o->causal ? named_tensor(c, a->mask, &o->nm, o->smk)
                                 : MG_NO_TENSOR;
    if (a->score_side && !o->causal) {
        o->m = where_mask(c, a->xn, a->score_side, a->fill, &o->nm, o->smk);
        if (o->m == MG_NO_TENSOR) {
            mg_clear_error();
            return false;
        }
    }
    if (o->q == MG_NO_TENSOR || o->kt == MG_NO_TENSOR || o->v == MG_NO_TENSOR ||
        o->xt == MG_NO_TENSOR ||
        (a->mask && !o->causal && o->m == MG_NO_TENSOR)) {
        mg_clear_error();
        return false;
    }
    return true;
}

/* q, kt, v and x of one rank nd >= 2 and one float dtype, with equal
 * leading dims and matching inner ones; the softmax over the last axis;
 * the mask of q's dtype, broadcasting to the scores. */
static bool attn_operands_agree(mgi_octx *c, const attn_match *a,
                                attn_operands *o) {
    const int nd = o->nq;
    mg_dtype dkt, dv;
    mg_tensor_dtype(c->g, o->q, &o->dq);
    mg_tensor_dtype(c->g, o->kt, &dkt);
    mg_tensor_dtype(c->g, o->v, &dv);
    if (nd < 2 || o->nkt != nd || o->nv != nd || o->nx != nd || o->nm > nd ||
        o->skt[nd - 2] != o->sq[nd - 1] || o->sv[nd - 2] != o->skt[nd - 1] ||
        memcmp(o->sq, o->skt, sizeof(int64_t) * (size_t)(nd - 2)) ||
        memcmp(o->sq, o->sv, sizeof(int64_t) * (size_t)(nd - 2)) ||
        !(o->dq == MG_F32 || o->dq == MG_F64) || dkt != o->dq || dv != o->dq)
        return false;
    /* the softmax's axis must be the last (before opset 13 the input is
     * flattened at axis, the same only for the last) */
    int64_t axis = mgi_onnx_attr_i(c, a->sm, "axis", c->opset >= 13 ? -1 : 1);
    if (!mgi_onnx_norm_axis(&axis, nd) || axis != nd - 1) return false;
    if (o->m != MG_NO_TENSOR) {
        mg_dtype dm;
        mg_tensor_dtype(c->g, o->m, &dm);
        if (dm != o->dq) return false;
        for (int i = 0; i < o->nm; i++) {
            const int64_t want = o->sx[nd - o->nm + i];
            if (o->smk[i] != 1 && o->smk[i] != want) return false;
        }
    }
    return true;
}

/* k: the source of kt (value `kt_name`, of rank nd) if kt is a Transpose
 * swapping the last two axes, else MG_NO_TENSOR (no error left set). */
static mg_tensor swapped_source(mgi_octx *c, const char *kt_name, int nd) {
    mg_tensor k = MG_NO_TENSOR;
    const node_t *ktn = mgi_onnx_sole_producer(c, kt_name);
    int64_t perm[MG_MAX_DIMS];
    if (is_op(ktn, "Transpose") && ktn->n_input == 1 &&
        mgi_onnx_attr_ints(c, ktn, "perm", perm, MG_MAX_DIMS) == nd) {
        bool swap = perm[nd - 2] == nd - 1 && perm[nd - 1] == nd - 2;
        for (int i = 0; swap && i < nd - 2; i++) swap = perm[i] == i;
        int nk;
        int64_t sk[MG_MAX_DIMS];
        if (swap) k = named_tensor(c, ktn->input[0], &nk, sk);
        if (k == MG_NO_TENSOR) mg_clear_error();
    }
    return k;
}

/* The fused attention for MatMul node n, or MG_NO_TENSOR with no error set
 * when n does not close the pattern (n converts as a plain MatMul then);
 * *matched says which. */
static mg_tensor try_attention(mgi_octx *c, const node_t *n, bool *matched) {
    *matched = false;
    if (n->n_input != 2) return MG_NO_TENSOR;
    attn_match a = {.sm = mgi_onnx_sole_producer(c, n->input[0])};
    if (!is_op(a.sm, "Softmax") || a.sm->n_input != 1) return MG_NO_TENSOR;
    a.x = a.sm->input[0];
    a.xn = mgi_onnx_sole_producer(c, a.x);
    if (!match_mask(c, &a) || !match_scale(c, &a)) return MG_NO_TENSOR;
    a.tn = mgi_onnx_sole_producer(c, a.t);
    if (!is_op(a.tn, "MatMul") || a.tn->n_input != 2) return MG_NO_TENSOR;
    attn_operands o;
    if (!attn_tensors(c, n, &a, &o) || !attn_operands_agree(c, &a, &o))
        return MG_NO_TENSOR;
    const int nd = o.nq;
    mg_tensor k = swapped_source(c, a.tn->input[1], nd);
    if (a.st != MG_NO_TENSOR) {
        mg_dtype ds;
        mg_tensor_dtype(c->g, a.st, &ds);
        int64_t ss[MG_MAX_DIMS];
        if (ds != o.dq || mgi_onnx_tshape(c, a.st, ss) > nd)
            return MG_NO_TENSOR;
    }
    *matched = true;
    if (k == MG_NO_TENSOR) k = mg_transpose(c->g, o.kt, nd - 2, nd - 1);
    /* (q s) k^T = (q k^T) s: a scale tensor goes onto q */
    mg_tensor q = o.q;
    if (a.st != MG_NO_TENSOR)
        q = a.div ? mg_div(c->g, q, a.st) : mg_mul(c->g, q, a.st);
    const mg_attention_opts ao = {.causal = o.causal, .scale = a.scale};
    return mg_attention_ex(c->g, q, k, o.v, o.m, &ao);
}

mg_status mgi_onnx_op_matmul(mgi_octx *c, const node_t *n) {
    bool matched;
    mg_tensor att = try_attention(c, n, &matched);
    if (matched) return mgi_onnx_out(c, n, 0, att);

    mg_tensor a = mgi_onnx_float_in(c, n, 0), b = mgi_onnx_float_in(c, n, 1);
    if (a == MG_NO_TENSOR || b == MG_NO_TENSOR) return mg_last_status();
    int64_t sa[MG_MAX_DIMS], sb[MG_MAX_DIMS];
    int na = mgi_onnx_tshape(c, a, sa), nb = mgi_onnx_tshape(c, b, sb);
    if (na < 2 || nb < 2) return UNSUP("MatMul of 1-D operands");
    if (nb > 2 && !(na == nb &&
                    memcmp(sa, sb, sizeof(int64_t) * (size_t)(na - 2)) == 0)) {
        /* broadcast the leading dims of both to a common shape */
        int nd;
        int64_t lead[MG_MAX_DIMS], ta[MG_MAX_DIMS], tb[MG_MAX_DIMS];
        if (!mgi_onnx_bcast(na - 2, sa, nb - 2, sb, &nd, lead))
            return mgi_onnx_node_error(c, MG_ERR_SHAPE,
                                       "batch dims do not broadcast");
        memcpy(ta, lead, sizeof(int64_t) * (size_t)nd);
        memcpy(tb, lead, sizeof(int64_t) * (size_t)nd);
        ta[nd] = sa[na - 2], ta[nd + 1] = sa[na - 1];
        tb[nd] = sb[nb - 2], tb[nd + 1] = sb[nb - 1];
        a = mg_broadcast_to(c->g, a, nd + 2, ta);
        b = mg_broadcast_to(c->g, b, nd + 2, tb);
    }
    return mgi_onnx_out(c, n, 0, mg_matmul(c->g, a, b, 0, 0));
}

mg_status mgi_onnx_op_gemm(mgi_octx *c, const node_t *n) {
    mg_tensor a = mgi_onnx_float_in(c, n, 0), b = mgi_onnx_float_in(c, n, 1);
    if (a == MG_NO_TENSOR || b == MG_NO_TENSOR) return mg_last_status();
    double alpha = mgi_onnx_attr_f(c, n, "alpha", 1.0),
           beta = mgi_onnx_attr_f(c, n, "beta", 1.0);
    mg_graph *g = c->g;
    mg_tensor y = mg_matmul(g, a, b, mgi_onnx_attr_flag(c, n, "transA", false),
                            mgi_onnx_attr_flag(c, n, "transB", false));
    if (alpha != 1.0) y = mg_scale(g, y, alpha);
    if (mgi_onnx_in(c, n, 2) && beta != 0.0) {
        mg_tensor cc = mgi_onnx_float_in(c, n, 2);
        if (cc == MG_NO_TENSOR) return mg_last_status();
        if (beta != 1.0) cc = mg_scale(g, cc, beta);
        y = mg_add(g, y, cc);
    }
    return mgi_onnx_out(c, n, 0, y);
}

/* The ONNX ops this file converts (onnx_ops.c looks them up). */
