/*
 * onnx_ops_const.c - the converters that make or retype values: Constant,
 * ConstantOfShape, Range and Cast, folded at import time where their inputs
 * are constants.
 */
#include <math.h>

#include "../common/half.h"
#include "onnx_ops.h"

mg_status mgi_onnx_op_constant(mgi_octx *c, const node_t *n) {
    const Onnx__AttributeProto *a;
    mgi_oconst *k = NULL;
    if ((a = mgi_onnx_attr(c, n, "value", AT(TENSOR)))) {
        TRY(mgi_onnx_decode_tensor(c, a->t, &k));
    } else if ((a = mgi_onnx_attr(c, n, "value_float", AT(FLOAT)))) {
        k = mgi_onnx_const_new(c, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, true, 0,
                               NULL);
        if (k) k->f[0] = a->f;
    } else if ((a = mgi_onnx_attr(c, n, "value_int", AT(INT)))) {
        k = mgi_onnx_const_new(c, ONNX__TENSOR_PROTO__DATA_TYPE__INT64, false,
                               0, NULL);
        if (k) k->i[0] = a->i;
    } else if ((a = mgi_onnx_attr(c, n, "value_floats", AT(FLOATS)))) {
        int64_t len = (int64_t)a->n_floats;
        k = mgi_onnx_const_new(c, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, true, 1,
                               &len);
        for (int64_t e = 0; k && e < len; e++) k->f[e] = a->floats[e];
    } else if ((a = mgi_onnx_attr(c, n, "value_ints", AT(INTS)))) {
        int64_t len = (int64_t)a->n_ints;
        k = mgi_onnx_const_new(c, ONNX__TENSOR_PROTO__DATA_TYPE__INT64, false,
                               1, &len);
        for (int64_t e = 0; k && e < len; e++) k->i[e] = a->ints[e];
    } else {
        return UNSUP(
            "only value, value_float(s) and value_int(s) are supported");
    }
    return mgi_onnx_out_const(c, n, 0, k);
}

mg_status mgi_onnx_op_constant_of_shape(mgi_octx *c, const node_t *n) {
    int64_t shape[MG_MAX_DIMS];
    int nd = mgi_onnx_const_ints(c, n, 0, shape, MG_MAX_DIMS);
    if (nd < 0)
        return UNSUP("the shape must be a constant of rank at most %d",
                     MG_MAX_DIMS);
    const Onnx__AttributeProto *a = mgi_onnx_attr(c, n, "value", AT(TENSOR));
    mgi_oconst *v = NULL;
    if (a) TRY(mgi_onnx_decode_tensor(c, a->t, &v));
    if (v && v->n != 1) return BAD_ATTR("value must hold one element");
    mgi_oconst *k = mgi_onnx_const_new(
        c, v ? v->onnx_type : ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT,
        v ? v->f != NULL : true, nd, shape);
    if (!k) return mg_last_status();
    for (int64_t e = 0; e < k->n; e++) {
        if (k->f) k->f[e] = v ? v->f[0] : 0.0;
        else k->i[e] = v->i[0];
    }
    return mgi_onnx_out_const(c, n, 0, k);
}

/* The name of TensorProto data type t ("FLOAT", "INT64"), or NULL if t is
 * none. */
static const char *type_name(int64_t t) {
    if (t < INT32_MIN || t > INT32_MAX) return NULL;
    const ProtobufCEnumValue *v = protobuf_c_enum_descriptor_get_value(
        &onnx__tensor_proto__data_type__descriptor, (int)t);
    return v ? v->name : NULL;
}

/* An integer element of a constant, whichever way it is stored. */
static int64_t ival(const mgi_oconst *k, int64_t e) {
    return k->i ? k->i[e] : mgi_onnx_d2i(k->f[e]);
}

mg_status mgi_onnx_op_range(mgi_octx *c, const node_t *n) {
    mgi_oconst *s = mgi_onnx_in_const(c, n, 0), *l = mgi_onnx_in_const(c, n, 1),
               *d = mgi_onnx_in_const(c, n, 2);
    if (!s || !l || !d || s->n != 1 || l->n != 1 || d->n != 1)
        return UNSUP("start, limit and delta must be constant scalars");
    /* ONNX gives all three one type T; the integer fold below reads delta
     * as an integer, so mixed operands are refused, not guessed at */
    if (s->onnx_type != l->onnx_type || s->onnx_type != d->onnx_type ||
        (s->f != NULL) != (d->f != NULL))
        return mgi_onnx_node_error(c, MG_ERR_DTYPE,
                                   "start, limit and delta must have one "
                                   "type (they are %s, %s, %s)",
                                   S(type_name(s->onnx_type)),
                                   S(type_name(l->onnx_type)),
                                   S(type_name(d->onnx_type)));
    double st = mgi_onnx_cval(s, 0), li = mgi_onnx_cval(l, 0),
           de = mgi_onnx_cval(d, 0);
    if (de == 0) return BAD_ATTR("delta is 0");
    double cnt = ceil((li - st) / de);
    if (!(cnt < (double)MGI_ONNX_MAX_CONST_ELEMS))
        return mgi_onnx_node_error(c, MG_ERR_SHAPE, "range too long");
    int64_t len = cnt > 0 ? (int64_t)cnt : 0;
    mgi_oconst *k = mgi_onnx_const_new(c, s->onnx_type, s->f != NULL, 1, &len);
    if (!k) return mg_last_status();
    for (int64_t e = 0; e < len; e++) {
        if (k->f) k->f[e] = st + (double)e * de;
        else
            k->i[e] = (int64_t)((uint64_t)ival(s, 0) +
                                (uint64_t)e * (uint64_t)ival(d, 0));
    }
    return mgi_onnx_out_const(c, n, 0, k);
}

/* The Cast targets memgrad implements: f32, f64, float16 and bfloat16, and
 * the integers it keeps as int64 constants or int32 tensors (see
 * as_float). Narrower and unsigned integers would need their wrap-around,
 * strings and complex numbers a representation memgrad does not have. */
static mg_status cast_target(mgi_octx *c, const node_t *n, int64_t *to) {
    if (!mgi_onnx_attr(c, n, "to", AT(INT)))
        return BAD_ATTR("Cast needs its 'to' attribute");
    *to = mgi_onnx_attr_i(c, n, "to", 0);
    const char *name = type_name(*to);
    if (!name || *to == ONNX__TENSOR_PROTO__DATA_TYPE__UNDEFINED)
        return BAD_ATTR("to=%lld is not a TensorProto data type",
                        (long long)*to);
    switch (*to) {
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT:
    case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE:
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16:
    case ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16:
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT32:
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT64:
    case ONNX__TENSOR_PROTO__DATA_TYPE__BOOL: return MG_OK;
    default:
        return UNSUP("Cast to %s (FLOAT, DOUBLE, FLOAT16, BFLOAT16, INT32, "
                     "INT64 and BOOL are supported)",
                     name);
    }
}

mg_status mgi_onnx_op_cast(mgi_octx *c, const node_t *n) {
    int64_t to = 0;
    TRY(cast_target(c, n, &to));
    mgi_oval *v = mgi_onnx_in(c, n, 0);
    if (!v) return BAD_ATTR("input 0 is missing");
    const bool to_f16 = to == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16,
               to_bf16 = to == ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16;
    bool to_float = to == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT ||
                    to == ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE || to_f16 ||
                    to_bf16;
    if (!v->c) {
        /* Booleans are f32 0/1 (see as_float), so a cast to bool is
         * is_nonzero and one from bool to float is nothing. */
        mg_dtype dt;
        TRY(mg_tensor_dtype(c->g, v->t, &dt));
        bool is_int = dt == MG_I32 || dt == MG_I64;
        if (to == ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE && dt != MG_F64)
            return UNSUP("a cast of a float tensor to double");
        /* to and from the 16-bit floats: mg_cast, rounding once (its
         * gradient casts back) */
        if (to_f16 || to_bf16) {
            mg_dtype want = to_f16 ? MG_F16 : MG_BF16;
            mg_tensor f = mgi_onnx_as_float(c, v->t);
            return mgi_onnx_out(c, n, 0,
                                dt == want ? f : mg_cast(c->g, f, want));
        }
        if (to == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT &&
            (dt == MG_F16 || dt == MG_BF16))
            return mgi_onnx_out(c, n, 0, mg_cast(c->g, v->t, MG_F32));
        if (to == ONNX__TENSOR_PROTO__DATA_TYPE__BOOL)
            return mgi_onnx_out(
                c, n, 0, mg_is_nonzero(c->g, mgi_onnx_as_float(c, v->t)));
        if (to_float) return mgi_onnx_out(c, n, 0, mgi_onnx_as_float(c, v->t));
        return mgi_onnx_out(c, n, 0,
                            is_int ? v->t : mg_cast(c->g, v->t, MG_I32));
    }
    mgi_oconst *k =
        mgi_onnx_const_new(c, (int32_t)to, to_float, v->c->ndim, v->c->shape);
    if (!k) return mg_last_status();
    for (int64_t e = 0; e < k->n; e++) {
        double x = mgi_onnx_cval(v->c, e);
        if (to_f16) k->f[e] = mg_f32_from_f16(mg_f16_from_f64(x));
        else if (to_bf16) k->f[e] = mg_f32_from_bf16(mg_bf16_from_f64(x));
        else if (to_float)
            k->f[e] = to == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT ? (float)x : x;
        else if (to == ONNX__TENSOR_PROTO__DATA_TYPE__BOOL) k->i[e] = x != 0;
        else k->i[e] = v->c->i ? v->c->i[e] : mgi_onnx_d2i(x);
    }
    return mgi_onnx_out_const(c, n, 0, k);
}

/* The ONNX ops this file converts (onnx_ops.c looks them up). */
