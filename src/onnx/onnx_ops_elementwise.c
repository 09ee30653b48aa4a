/*
 * onnx_ops_elementwise.c - the elementwise converters: the binary ops
 * (arithmetic, comparisons and logic, whose results are f32 0/1 on
 * tensors), Where, Pow, the unary activations and maths, LeakyRelu, Clip
 * and Gelu; folded where every input is a constant.
 */
#include <math.h>
#include <string.h>

#include "onnx_ops.h"

static bool all_inputs_const(mgi_octx *c, const node_t *n) {
    for (size_t k = 0; k < n->n_input; k++) {
        /* an empty name is a missing input: the tensor path reports it */
        mgi_oval *v = mgi_onnx_in(c, n, k);
        if (!v || !v->c) return false;
    }
    return n->n_input > 0;
}

static mg_status binary(mgi_octx *c, const node_t *n, fold_op op) {
    if (n->n_input != 2) return BAD_ATTR("needs 2 inputs");
    if (all_inputs_const(c, n)) return mgi_onnx_fold_binary(c, n, op);
    mg_tensor a = mgi_onnx_float_in(c, n, 0), b = mgi_onnx_float_in(c, n, 1);
    if (a == MG_NO_TENSOR || b == MG_NO_TENSOR) return mg_last_status();
    mg_tensor y;
    switch (op) {
    case F_ADD: y = mg_add(c->g, a, b); break;
    case F_SUB: y = mg_sub(c->g, a, b); break;
    case F_MUL: y = mg_mul(c->g, a, b); break;
    case F_DIV: y = mg_div(c->g, a, b); break;
    /* Comparisons and logic give f32 0/1 masks. a - b is 0 only when
     * a == b (subnormals keep distinct floats apart), so these are exact;
     * NaN compares false, and inf == inf gives false (inf - inf is NaN). */
    case F_EQ:
        y = mgi_onnx_one_minus(c, mg_is_nonzero(c->g, mg_sub(c->g, a, b)));
        break;
    case F_LT:
        y = mg_is_nonzero(c->g, mg_relu(c->g, mg_sub(c->g, b, a)));
        break;
    case F_GT:
        y = mg_is_nonzero(c->g, mg_relu(c->g, mg_sub(c->g, a, b)));
        break;
    case F_AND: y = mg_mul(c->g, a, b); break;
    case F_OR: y = mg_is_nonzero(c->g, mg_add(c->g, a, b)); break;
    default: return UNSUP("this op on tensors (only on constants)");
    }
    return mgi_onnx_out(c, n, 0, y);
}

mg_status mgi_onnx_op_add(mgi_octx *c, const node_t *n) {
    return binary(c, n, F_ADD);
}
mg_status mgi_onnx_op_sub(mgi_octx *c, const node_t *n) {
    return binary(c, n, F_SUB);
}
mg_status mgi_onnx_op_mul(mgi_octx *c, const node_t *n) {
    return binary(c, n, F_MUL);
}
mg_status mgi_onnx_op_div(mgi_octx *c, const node_t *n) {
    return binary(c, n, F_DIV);
}
mg_status mgi_onnx_op_equal(mgi_octx *c, const node_t *n) {
    return binary(c, n, F_EQ);
}
mg_status mgi_onnx_op_less(mgi_octx *c, const node_t *n) {
    return binary(c, n, F_LT);
}
mg_status mgi_onnx_op_greater(mgi_octx *c, const node_t *n) {
    return binary(c, n, F_GT);
}
mg_status mgi_onnx_op_min(mgi_octx *c, const node_t *n) {
    return binary(c, n, F_MIN);
}
mg_status mgi_onnx_op_max(mgi_octx *c, const node_t *n) {
    return binary(c, n, F_MAX);
}
mg_status mgi_onnx_op_and(mgi_octx *c, const node_t *n) {
    return binary(c, n, F_AND);
}
mg_status mgi_onnx_op_or(mgi_octx *c, const node_t *n) {
    return binary(c, n, F_OR);
}

mg_status mgi_onnx_op_where(mgi_octx *c, const node_t *n) {
    if (n->n_input != 3) return BAD_ATTR("needs 3 inputs");
    if (all_inputs_const(c, n)) return mgi_onnx_fold_where(c, n);
    /* X m + Y (1 - m) with m the condition's 0/1 values: folded into
     * constant operands where the condition is a constant (masks), else a
     * tensor (booleans are f32 0/1, see as_float). Both terms are exact
     * when X and Y are finite, one of them being 0; infinite constant
     * operands become the largest finite float, so that 0 * -inf does not
     * give NaN (after a softmax the two agree). A tensor operand that is
     * infinite or NaN where it is not picked still spoils the sum. */
    mgi_oconst *q = mgi_onnx_in_const(c, n, 0);
    mgi_oconst *m = NULL, *nm = NULL;
    mg_tensor mt = MG_NO_TENSOR, nmt = MG_NO_TENSOR;
    if (q) {
        m = mgi_onnx_const_new(c, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, true,
                               q->ndim, q->shape);
        nm = mgi_onnx_const_new(c, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, true,
                                q->ndim, q->shape);
        if (!m || !nm) return mg_last_status();
        for (int64_t e = 0; e < q->n; e++) {
            m->f[e] = mgi_onnx_cval(q, e) != 0;
            nm->f[e] = 1.0 - m->f[e];
        }
    } else {
        mt = mgi_onnx_float_in(c, n, 0);
        nmt = mt == MG_NO_TENSOR ? mt : mgi_onnx_one_minus(c, mt);
        if (nmt == MG_NO_TENSOR) return mgi_onnx_out(c, n, 0, MG_NO_TENSOR);
    }
    mg_tensor part[2];
    for (int k = 0; k < 2; k++) {
        mgi_oval *v = mgi_onnx_in(c, n, (size_t)k + 1);
        mgi_oconst *mask = k == 0 ? m : nm;
        if (!v) return BAD_ATTR("input %d is missing", k + 1);
        /* A scalar initializer here is a fill value (torch's masked_fill
         * exports -inf so when folding constants), not a weight. */
        const mgi_oconst *vc = v->c                         ? v->c
                               : v->init && v->init->n == 1 ? v->init
                                                            : NULL;
        mg_tensor val, mask_t;
        if (vc) {
            mgi_oconst *fin =
                mgi_onnx_const_new(c, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT,
                                   true, vc->ndim, vc->shape);
            if (!fin) return mg_last_status();
            for (int64_t e = 0; e < fin->n; e++) {
                double x = mgi_onnx_cval(vc, e);
                fin->f[e] = x > 3.4028234663852886e38 ? 3.4028234663852886e38
                            : x < -3.4028234663852886e38
                                ? -3.4028234663852886e38
                                : x;
            }
            if (q) {
                mgi_oconst *prod;
                TRY(mgi_onnx_fold_consts(c, fin, mask, F_MUL, &prod));
                mgi_oval tmp = {v->name, MG_NO_TENSOR, prod, NULL};
                part[k] = mgi_onnx_tensor(c, &tmp);
                if (part[k] == MG_NO_TENSOR)
                    return mgi_onnx_out(c, n, 0, MG_NO_TENSOR);
                continue;
            }
            mgi_oval tmp = {v->name, MG_NO_TENSOR, fin, NULL};
            val = mgi_onnx_tensor(c, &tmp);
        } else {
            val = mgi_onnx_float_in(c, n, (size_t)k + 1);
        }
        if (q) {
            mgi_oval tmp = {v->name, MG_NO_TENSOR, mask, NULL};
            mask_t = mgi_onnx_tensor(c, &tmp);
        } else {
            mask_t = k == 0 ? mt : nmt;
        }
        part[k] = val == MG_NO_TENSOR || mask_t == MG_NO_TENSOR
                      ? MG_NO_TENSOR
                      : mg_mul(c->g, val, mask_t);
        if (part[k] == MG_NO_TENSOR) return mgi_onnx_out(c, n, 0, MG_NO_TENSOR);
    }
    return mgi_onnx_out(c, n, 0, mg_add(c->g, part[0], part[1]));
}

mg_status mgi_onnx_op_pow(mgi_octx *c, const node_t *n) {
    if (n->n_input != 2) return BAD_ATTR("needs 2 inputs");
    if (all_inputs_const(c, n)) return mgi_onnx_fold_binary(c, n, F_POW);
    const mgi_oconst *e = mgi_onnx_slot_const(c, n, 1);
    mg_tensor x = mgi_onnx_float_in(c, n, 0);
    if (x == MG_NO_TENSOR) return mg_last_status();
    if (e && e->n == 1) {
        double p = mgi_onnx_cval(e, 0);
        if (p == 1) return mgi_onnx_out(c, n, 0, x);
        if (p == 2) return mgi_onnx_out(c, n, 0, mg_mul(c->g, x, x));
        if (p == 3)
            return mgi_onnx_out(c, n, 0, mg_mul(c->g, mg_mul(c->g, x, x), x));
        if (p == 0.5) return mgi_onnx_out(c, n, 0, mg_sqrt(c->g, x));
        return mgi_onnx_out(c, n, 0, mg_pow(c->g, x, p));
    }
    return UNSUP("Pow with an exponent that is not a constant scalar");
}

typedef mg_tensor (*unary_fn)(mg_graph *, mg_tensor);

static mg_status unary(mgi_octx *c, const node_t *n, unary_fn f) {
    mg_tensor x = mgi_onnx_float_in(c, n, 0);
    if (x == MG_NO_TENSOR) return mg_last_status();
    return mgi_onnx_out(c, n, 0, f(c->g, x));
}

static mg_status fold_unary(mgi_octx *c, const node_t *n, double (*f)(double)) {
    mgi_oconst *a = mgi_onnx_in_const(c, n, 0);
    mgi_oconst *k =
        mgi_onnx_const_new(c, a->onnx_type, a->f != NULL, a->ndim, a->shape);
    if (!k) return mg_last_status();
    for (int64_t e = 0; e < a->n; e++) {
        if (k->f)
            k->f[e] = a->onnx_type == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT
                          ? (float)f(a->f[e])
                          : f(a->f[e]);
        else k->i[e] = mgi_onnx_d2i(f((double)a->i[e]));
    }
    return mgi_onnx_out_const(c, n, 0, k);
}

static double d_neg(double x) { return -x; }
static double d_not(double x) { return x == 0; }

mg_status mgi_onnx_op_relu(mgi_octx *c, const node_t *n) {
    return unary(c, n, mg_relu);
}
mg_status mgi_onnx_op_sigmoid(mgi_octx *c, const node_t *n) {
    return unary(c, n, mg_sigmoid);
}
mg_status mgi_onnx_op_tanh(mgi_octx *c, const node_t *n) {
    return unary(c, n, mg_tanh);
}
mg_status mgi_onnx_op_exp(mgi_octx *c, const node_t *n) {
    return unary(c, n, mg_exp);
}
mg_status mgi_onnx_op_erf(mgi_octx *c, const node_t *n) {
    return all_inputs_const(c, n) ? fold_unary(c, n, erf) : unary(c, n, mg_erf);
}
mg_status mgi_onnx_op_log(mgi_octx *c, const node_t *n) {
    return unary(c, n, mg_log);
}
mg_status mgi_onnx_op_sqrt(mgi_octx *c, const node_t *n) {
    return all_inputs_const(c, n) ? fold_unary(c, n, sqrt)
                                  : unary(c, n, mg_sqrt);
}
mg_status mgi_onnx_op_neg(mgi_octx *c, const node_t *n) {
    return all_inputs_const(c, n) ? fold_unary(c, n, d_neg)
                                  : unary(c, n, mg_neg);
}
mg_status mgi_onnx_op_floor(mgi_octx *c, const node_t *n) {
    return all_inputs_const(c, n)
               ? fold_unary(c, n, floor)
               : UNSUP("Floor on tensors (only on constants)");
}
mg_status mgi_onnx_op_ceil(mgi_octx *c, const node_t *n) {
    return all_inputs_const(c, n)
               ? fold_unary(c, n, ceil)
               : UNSUP("Ceil on tensors (only on constants)");
}
mg_status mgi_onnx_op_not(mgi_octx *c, const node_t *n) {
    if (all_inputs_const(c, n)) return fold_unary(c, n, d_not);
    mg_tensor x = mgi_onnx_float_in(c, n, 0);
    return x == MG_NO_TENSOR ? mg_last_status()
                             : mgi_onnx_out(c, n, 0, mgi_onnx_one_minus(c, x));
}

mg_status mgi_onnx_op_leaky_relu(mgi_octx *c, const node_t *n) {
    mg_tensor x = mgi_onnx_float_in(c, n, 0);
    if (x == MG_NO_TENSOR) return mg_last_status();
    return mgi_onnx_out(
        c, n, 0, mg_leaky_relu(c->g, x, mgi_onnx_attr_f(c, n, "alpha", 0.01)));
}

/* lo + relu(x - lo) - relu(x - hi), with the terms of a missing bound left
 * out: ReLU6 is relu(x) - relu(x - 6). */
mg_status mgi_onnx_op_clip(mgi_octx *c, const node_t *n) {
    double lo = -INFINITY, hi = INFINITY;
    if (c->opset < 11) {
        lo = mgi_onnx_attr_f(c, n, "min", lo);
        hi = mgi_onnx_attr_f(c, n, "max", hi);
    } else {
        for (size_t k = 1; k <= 2; k++) {
            if (!mgi_onnx_in(c, n, k)) continue;
            const mgi_oconst *b = mgi_onnx_slot_const(c, n, k);
            if (!b || b->n != 1)
                return UNSUP("Clip bounds that are not constant scalars");
            if (k == 1) lo = mgi_onnx_cval(b, 0);
            else hi = mgi_onnx_cval(b, 0);
        }
    }
    mg_tensor x = mgi_onnx_float_in(c, n, 0);
    if (x == MG_NO_TENSOR) return mg_last_status();
    mg_graph *g = c->g;
    mg_tensor y = x;
    if (isfinite(lo)) {
        mg_tensor sh =
            lo == 0 ? x : mg_add(g, x, mg_fill(g, MG_F32, 0, NULL, -lo));
        y = mg_relu(g, sh);
        if (lo != 0) y = mg_add(g, y, mg_fill(g, MG_F32, 0, NULL, lo));
    }
    if (isfinite(hi))
        y = mg_sub(g, y,
                   mg_relu(g, mg_add(g, x, mg_fill(g, MG_F32, 0, NULL, -hi))));
    return mgi_onnx_out(c, n, 0, y);
}

/* max(0, min(1, alpha x + beta)). torch.onnx.export writes nn.Hardsigmoid
 * with alpha = 1/6 (as a float) and beta = 1/2: that one is computed as
 * PyTorch and memgrad.torch do, relu6(x + 3) / 6, and any other as
 * relu(t) - relu(t - 1). */
static mg_tensor hardsigmoid(mg_graph *g, mg_tensor x, double alpha,
                             double beta) {
    if ((float)alpha == (float)(1.0 / 6.0) && beta == 0.5) {
        mg_tensor t = mg_add(g, x, mg_fill(g, MG_F32, 0, NULL, 3.0));
        mg_tensor r6 =
            mg_sub(g, mg_relu(g, t),
                   mg_relu(g, mg_add(g, t, mg_fill(g, MG_F32, 0, NULL, -6.0))));
        return mg_scale(g, r6, 1.0 / 6.0);
    }
    mg_tensor t =
        mg_add(g, mg_scale(g, x, alpha), mg_fill(g, MG_F32, 0, NULL, beta));
    return mg_sub(g, mg_relu(g, t),
                  mg_relu(g, mg_add(g, t, mg_fill(g, MG_F32, 0, NULL, -1.0))));
}

mg_status mgi_onnx_op_hardsigmoid(mgi_octx *c, const node_t *n) {
    double alpha = mgi_onnx_attr_f(c, n, "alpha", 0.2);
    double beta = mgi_onnx_attr_f(c, n, "beta", 0.5);
    if (!isfinite(alpha) || !isfinite(beta))
        return BAD_ATTR("alpha %g and beta %g must be finite", alpha, beta);
    mg_tensor x = mgi_onnx_float_in(c, n, 0);
    if (x == MG_NO_TENSOR) return mg_last_status();
    return mgi_onnx_out(c, n, 0, hardsigmoid(c->g, x, alpha, beta));
}

/* x HardSigmoid(x) with alpha 1/6, beta 1/2 (opset 14) */
mg_status mgi_onnx_op_hardswish(mgi_octx *c, const node_t *n) {
    mg_tensor x = mgi_onnx_float_in(c, n, 0);
    if (x == MG_NO_TENSOR) return mg_last_status();
    return mgi_onnx_out(c, n, 0,
                        mg_mul(c->g, x, hardsigmoid(c->g, x, 1.0 / 6.0, 0.5)));
}

/* Gelu (opset 20): the tanh form is mg_gelu; the exact one
 * 0.5 x (1 + erf(x / sqrt 2)), as torch exports it before opset 20. */
mg_status mgi_onnx_op_gelu(mgi_octx *c, const node_t *n) {
    char ap[16];
    mgi_onnx_attr_s(c, n, "approximate", "none", ap, sizeof ap);
    if (strcmp(ap, "tanh") == 0) return unary(c, n, mg_gelu);
    if (strcmp(ap, "none") != 0) return BAD_ATTR("approximate '%s'", ap);
    mg_tensor x = mgi_onnx_float_in(c, n, 0);
    if (x == MG_NO_TENSOR) return mg_last_status();
    mg_graph *g = c->g;
    mg_tensor e = mg_erf(g, mg_scale(g, x, 0.70710678118654752440));
    return mgi_onnx_out(c, n, 0,
                        mg_mul(g, mg_scale(g, x, 0.5),
                               mg_add(g, e, mg_fill(g, MG_F32, 0, NULL, 1.0))));
}

/* The ONNX ops this file converts (onnx_ops.c looks them up). */
