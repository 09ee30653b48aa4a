/*
 * onnx_ops_common.c - the helpers every ONNX converter uses: a node's inputs
 * (as values, constants or float tensors) and outputs, its attributes (read
 * with their types checked, the first bad one recorded for the node's error),
 * and small conversions of constants.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_ops.h"

mgi_oval *mgi_onnx_in(mgi_octx *c, const node_t *n, size_t k) {
    if (k >= n->n_input || !n->input[k][0]) return NULL;
    return mgi_onnx_lookup(c, n->input[k]);
}

mgi_oconst *mgi_onnx_in_const(mgi_octx *c, const node_t *n, size_t k) {
    mgi_oval *v = mgi_onnx_in(c, n, k);
    return v ? v->c : NULL;
}

/* Input k where an op wants a constant (a shape, axes, a bound): a
 * constant, or a parameter's initial data. */
const mgi_oconst *mgi_onnx_slot_const(mgi_octx *c, const node_t *n, size_t k) {
    mgi_oval *v = mgi_onnx_in(c, n, k);
    return !v ? NULL : v->c ? v->c : v->init;
}

/* Integer tensors (token ids, attention masks) take part in tensor math
 * as f32, since memgrad's float ops take no integers: masks are 0/1 and
 * ids below 2^24 are exact in f32. ONNX booleans computed on tensors are
 * f32 0/1 too (comparisons below). Gather's indices and Cast read the
 * integer tensor itself. */
mg_tensor mgi_onnx_as_float(mgi_octx *c, mg_tensor t) {
    mg_dtype dt;
    if (t == MG_NO_TENSOR || mg_tensor_dtype(c->g, t, &dt) != MG_OK ||
        (dt != MG_I32 && dt != MG_I64))
        return t;
    if (t < c->cap_f32_of && c->f32_of[t] != MG_NO_TENSOR) return c->f32_of[t];
    mg_tensor f = mg_cast(c->g, t, MG_F32);
    if (f == MG_NO_TENSOR) return f;
    if (t >= c->cap_f32_of) { /* grow to the graph's size; on failure the
                               * cast stays uncached, which is only slower */
        int32_t cap = mg_graph_num_tensors(c->g);
        mg_tensor *grown = realloc(c->f32_of, (size_t)cap * sizeof *grown);
        if (!grown) return f;
        for (int32_t k = c->cap_f32_of; k < cap; k++) grown[k] = MG_NO_TENSOR;
        c->f32_of = grown;
        c->cap_f32_of = cap;
    }
    c->f32_of[t] = f;
    return f;
}

/* Input k as a float tensor; an error (already recorded) gives
 * MG_NO_TENSOR. */
mg_tensor mgi_onnx_float_in(mgi_octx *c, const node_t *n, size_t k) {
    mgi_oval *v = mgi_onnx_in(c, n, k);
    if (!v) {
        mgi_onnx_node_error(c, MG_ERR_INVALID_ARG, "input %zu is missing", k);
        return MG_NO_TENSOR;
    }
    return mgi_onnx_as_float(c, mgi_onnx_tensor(c, v));
}

/* t's dtype; MG_F32 for an invalid t (the builder call it feeds then
 * reports it). */
mg_dtype mgi_onnx_dtype_of(mgi_octx *c, mg_tensor t) {
    mg_dtype dt;
    if (t == MG_NO_TENSOR || mg_tensor_dtype(c->g, t, &dt) != MG_OK)
        return MG_F32;
    return dt;
}

/* 1 - x, for a 0/1 mask x: logical not (in x's dtype: a 16-bit mask
 * stays 16-bit). */
mg_tensor mgi_onnx_one_minus(mgi_octx *c, mg_tensor x) {
    return mg_sub(c->g, mg_fill(c->g, mgi_onnx_dtype_of(c, x), 0, NULL, 1.0),
                  x);
}

/* A builder's MG_NO_TENSOR becomes an error naming the node. */
mg_status mgi_onnx_out(mgi_octx *c, const node_t *n, size_t k, mg_tensor t) {
    if (t == MG_NO_TENSOR) {
        mg_status s = mg_last_status();
        if (s == MG_OK) s = MG_ERR_INTERNAL;
        char msg[400];
        snprintf(msg, sizeof msg, "%s", mg_last_error());
        if (strncmp(msg, "onnx node", 9) == 0)
            return s; /* already names a node */
        return mgi_onnx_node_error(c, s, "%s", msg);
    }
    if (k >= n->n_output) return MG_OK;
    return mgi_onnx_define(c, n->output[k], t, NULL);
}

mg_status mgi_onnx_out_const(mgi_octx *c, const node_t *n, size_t k,
                             mgi_oconst *kc) {
    if (!kc) return mg_last_status() ? mg_last_status() : MG_ERR_NOMEM;
    if (k >= n->n_output) return MG_OK;
    return mgi_onnx_define(c, n->output[k], MG_NO_TENSOR, kc);
}

const Onnx__AttributeProto *mgi_onnx_attr_any(const node_t *n,
                                              const char *name) {
    for (size_t k = 0; k < n->n_attribute; k++)
        if (n->attribute[k]->name && strcmp(n->attribute[k]->name, name) == 0)
            return n->attribute[k];
    return NULL;
}

/* Records the first bad attribute of the node being converted. The readers
 * below return a value, not a status, so mgi_onnx_convert_node reports it
 * when the converter returns, whatever the converter made of the default
 * it was given instead. */
static void bad_attr(mgi_octx *c, const char *fmt, ...) MG_PRINTF(2, 3);
static void bad_attr(mgi_octx *c, const char *fmt, ...) {
    if (c->attr_err[0]) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->attr_err, sizeof c->attr_err, fmt, ap);
    va_end(ap);
}

/* Whether a holds a value of the given type (for files that leave the type
 * field unset, as IR 1 allowed). */
static bool has_value(const Onnx__AttributeProto *a,
                      Onnx__AttributeProto__AttributeType type) {
    switch (type) {
    case AT(INT): return a->has_i;
    case AT(FLOAT): return a->has_f;
    case AT(STRING): return a->has_s;
    case AT(TENSOR): return a->t != NULL;
    case AT(INTS): return a->n_ints > 0;
    case AT(FLOATS): return a->n_floats > 0;
    default: return false;
    }
}

/* Attribute `name` if the node has it with the given type; one of another
 * type, or without its value, is recorded as bad (and NULL returned). */
const Onnx__AttributeProto *
mgi_onnx_attr(mgi_octx *c, const node_t *n, const char *name,
              Onnx__AttributeProto__AttributeType type) {
    const Onnx__AttributeProto *a = mgi_onnx_attr_any(n, name);
    if (!a) return NULL;
    bool typed = a->has_type && a->type != AT(UNDEFINED);
    bool lists = type == AT(INTS) || type == AT(FLOATS);
    /* an empty list is a typed list with no entries */
    if (typed ? a->type == type && (lists || has_value(a, type))
              : has_value(a, type))
        return a;
    const ProtobufCEnumValue *want = protobuf_c_enum_descriptor_get_value(
        &onnx__attribute_proto__attribute_type__descriptor, type);
    bad_attr(c, "attribute '%s' must be of type %s", name,
             want ? want->name : "?");
    return NULL;
}

int64_t mgi_onnx_attr_i(mgi_octx *c, const node_t *n, const char *name,
                        int64_t def) {
    const Onnx__AttributeProto *a = mgi_onnx_attr(c, n, name, AT(INT));
    return a ? a->i : def;
}

/* An int attribute that is a flag: 0 or 1 (not cast to int from 2^32). */
bool mgi_onnx_attr_flag(mgi_octx *c, const node_t *n, const char *name,
                        bool def) {
    int64_t v = mgi_onnx_attr_i(c, n, name, def);
    if (v != 0 && v != 1)
        bad_attr(c, "attribute '%s' is %lld (0 or 1)", name, (long long)v);
    return v == 1;
}

double mgi_onnx_attr_f(mgi_octx *c, const node_t *n, const char *name,
                       double def) {
    const Onnx__AttributeProto *a = mgi_onnx_attr(c, n, name, AT(FLOAT));
    return a ? a->f : def;
}

/* A normalisation's epsilon: finite and not negative. */
double mgi_onnx_attr_eps(mgi_octx *c, const node_t *n) {
    double eps = mgi_onnx_attr_f(c, n, "epsilon", 1e-5);
    if (!(eps >= 0) || !isfinite(eps))
        bad_attr(c, "attribute 'epsilon' is %g (finite, at least 0)", eps);
    return eps;
}

/* A string attribute, copied (protobuf bytes are not NUL-terminated). */
void mgi_onnx_attr_s(mgi_octx *c, const node_t *n, const char *name,
                     const char *def, char *buf, size_t len) {
    const Onnx__AttributeProto *a = mgi_onnx_attr(c, n, name, AT(STRING));
    if (!a) {
        snprintf(buf, len, "%s", def);
        return;
    }
    size_t l = a->s.len < len - 1 ? a->s.len : len - 1;
    memcpy(buf, a->s.data, l);
    buf[l] = '\0';
}

/* An ints attribute: its count (-1 if absent; -2 if more than max). */
int mgi_onnx_attr_ints(mgi_octx *c, const node_t *n, const char *name,
                       int64_t *out, int max) {
    const Onnx__AttributeProto *a = mgi_onnx_attr(c, n, name, AT(INTS));
    if (!a) return -1;
    if (a->n_ints > (size_t)max) return -2;
    for (size_t k = 0; k < a->n_ints; k++) out[k] = a->ints[k];
    return (int)a->n_ints;
}

/* Integer values of a constant input (axes, shapes, pads): count, or -1 if
 * the input is absent, -2 if it is not a constant or has more than max. */
int mgi_onnx_const_ints(mgi_octx *c, const node_t *n, size_t k, int64_t *out,
                        int max) {
    if (!mgi_onnx_in(c, n, k)) return -1;
    const mgi_oconst *kc = mgi_onnx_slot_const(c, n, k);
    if (!kc || kc->n > max) return -2;
    for (int64_t e = 0; e < kc->n; e++)
        out[e] = kc->i ? kc->i[e] : mgi_onnx_d2i(kc->f[e]);
    return (int)kc->n;
}

int mgi_onnx_tshape(mgi_octx *c, mg_tensor t, int64_t *shape) {
    int nd = 0;
    if (mg_tensor_shape(c->g, t, &nd, shape)) return -1;
    return nd;
}

/* A double as an int64, saturating (NaN gives 0): hostile files put any
 * float where an index or a size belongs. */
int64_t mgi_onnx_d2i(double x) {
    if (!(x == x)) return 0;
    if (x >= 4611686018427387904.0) return INT64_C(4611686018427387904);
    if (x <= -4611686018427387904.0) return -INT64_C(4611686018427387904);
    return (int64_t)x;
}

double mgi_onnx_cval(const mgi_oconst *k, int64_t e) {
    return k->f ? k->f[e] : (double)k->i[e];
}

bool mgi_onnx_norm_axis(int64_t *axis, int ndim) {
    if (*axis < 0) *axis += ndim;
    return *axis >= 0 && *axis < ndim;
}

/* The number of elements of a shape. */
int64_t mgi_onnx_numel(int nd, const int64_t *shape) {
    int64_t p = 1;
    for (int d = 0; d < nd; d++) p *= shape[d];
    return p;
}
