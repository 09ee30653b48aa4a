/*
 * onnx_ops.c - one converter per ONNX op: builder calls for tensor work, and
 * import-time evaluation for nodes whose inputs are all constants (the
 * Shape/Gather/Unsqueeze/Concat arithmetic exporters emit around Reshape),
 * so the planned graph holds only real tensor work.
 *
 * Constants are kept as doubles or int64s; a constant that a tensor op reads
 * becomes a tensor through mgi_onnx_tensor (a fill if uniform, otherwise an
 * input bound to data the model handle owns).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_internal.h"

#define S(x) ((x) ? (x) : "")
#define AT(x) ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__##x
typedef Onnx__NodeProto node_t;

/* ------------------------------------------------------------------ helpers */

static mgi_oval *in(mgi_octx *c, const node_t *n, size_t k)
{
    if (k >= n->n_input || !n->input[k][0])
        return NULL;
    return mgi_onnx_lookup(c, n->input[k]);
}

static mgi_oconst *in_const(mgi_octx *c, const node_t *n, size_t k)
{
    mgi_oval *v = in(c, n, k);
    return v ? v->c : NULL;
}

/* Input k where an op wants a constant (a shape, axes, a bound): a
 * constant, or a parameter's initial data. */
static const mgi_oconst *slot_const(mgi_octx *c, const node_t *n, size_t k)
{
    mgi_oval *v = in(c, n, k);
    return !v ? NULL : v->c ? v->c : v->init;
}

/* Integer tensors (token ids, attention masks) take part in tensor math
 * as f32, since memgrad's float ops take no integers: masks are 0/1 and
 * ids below 2^24 are exact in f32. ONNX booleans computed on tensors are
 * f32 0/1 too (comparisons below). Gather's indices and Cast read the
 * integer tensor itself. */
static mg_tensor as_float(mgi_octx *c, mg_tensor t)
{
    mg_dtype dt;
    if (t == MG_NO_TENSOR || mg_tensor_dtype(c->g, t, &dt) != MG_OK ||
        (dt != MG_I32 && dt != MG_I64))
        return t;
    if (t < c->cap_f32_of && c->f32_of[t] != MG_NO_TENSOR)
        return c->f32_of[t];
    mg_tensor f = mg_cast(c->g, t, MG_F32);
    if (f == MG_NO_TENSOR)
        return f;
    if (t >= c->cap_f32_of) { /* grow to the graph's size; on failure the
                               * cast stays uncached, which is only slower */
        int32_t cap = mg_graph_num_tensors(c->g);
        mg_tensor *grown = realloc(c->f32_of, (size_t)cap * sizeof *grown);
        if (!grown)
            return f;
        for (int32_t k = c->cap_f32_of; k < cap; k++)
            grown[k] = MG_NO_TENSOR;
        c->f32_of = grown;
        c->cap_f32_of = cap;
    }
    c->f32_of[t] = f;
    return f;
}

/* Input k as a float tensor; an error (already recorded) gives
 * MG_NO_TENSOR. */
static mg_tensor T(mgi_octx *c, const node_t *n, size_t k)
{
    mgi_oval *v = in(c, n, k);
    if (!v) {
        mgi_onnx_node_error(c, MG_ERR_INVALID_ARG, "input %zu is missing", k);
        return MG_NO_TENSOR;
    }
    return as_float(c, mgi_onnx_tensor(c, v));
}

/* 1 - x, for a 0/1 mask x: logical not. */
static mg_tensor one_minus(mgi_octx *c, mg_tensor x)
{
    return mg_sub(c->g, mg_fill(c->g, MG_F32, 0, NULL, 1.0), x);
}

/* A builder's MG_NO_TENSOR becomes an error naming the node. */
static mg_status out_t(mgi_octx *c, const node_t *n, size_t k, mg_tensor t)
{
    if (t == MG_NO_TENSOR) {
        mg_status s = mg_last_status();
        if (s == MG_OK)
            s = MG_ERR_INTERNAL;
        char msg[400];
        snprintf(msg, sizeof msg, "%s", mg_last_error());
        if (strncmp(msg, "onnx node", 9) == 0)
            return s; /* already names a node */
        return mgi_onnx_node_error(c, s, "%s", msg);
    }
    if (k >= n->n_output)
        return MG_OK;
    return mgi_onnx_define(c, n->output[k], t, NULL);
}

static mg_status out_c(mgi_octx *c, const node_t *n, size_t k, mgi_oconst *kc)
{
    if (!kc)
        return mg_last_status() ? mg_last_status() : MG_ERR_NOMEM;
    if (k >= n->n_output)
        return MG_OK;
    return mgi_onnx_define(c, n->output[k], MG_NO_TENSOR, kc);
}

static int64_t d2i(double x);

static const Onnx__AttributeProto *attr_any(const node_t *n, const char *name)
{
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
static void bad_attr(mgi_octx *c, const char *fmt, ...)
{
    if (c->attr_err[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->attr_err, sizeof c->attr_err, fmt, ap);
    va_end(ap);
}

/* Whether a holds a value of the given type (for files that leave the type
 * field unset, as IR 1 allowed). */
static bool has_value(const Onnx__AttributeProto *a,
                      Onnx__AttributeProto__AttributeType type)
{
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
static const Onnx__AttributeProto *attr(mgi_octx *c, const node_t *n,
                                        const char *name,
                                        Onnx__AttributeProto__AttributeType type)
{
    const Onnx__AttributeProto *a = attr_any(n, name);
    if (!a)
        return NULL;
    bool typed = a->has_type && a->type != AT(UNDEFINED);
    bool lists = type == AT(INTS) || type == AT(FLOATS);
    /* an empty list is a typed list with no entries */
    if (typed ? a->type == type && (lists || has_value(a, type)) : has_value(a, type))
        return a;
    const ProtobufCEnumValue *want = protobuf_c_enum_descriptor_get_value(
        &onnx__attribute_proto__attribute_type__descriptor, type);
    bad_attr(c, "attribute '%s' must be of type %s", name, want ? want->name : "?");
    return NULL;
}

static int64_t attr_i(mgi_octx *c, const node_t *n, const char *name, int64_t def)
{
    const Onnx__AttributeProto *a = attr(c, n, name, AT(INT));
    return a ? a->i : def;
}

/* An int attribute that is a flag: 0 or 1 (not cast to int from 2^32). */
static bool attr_flag(mgi_octx *c, const node_t *n, const char *name, bool def)
{
    int64_t v = attr_i(c, n, name, def);
    if (v != 0 && v != 1)
        bad_attr(c, "attribute '%s' is %lld (0 or 1)", name, (long long)v);
    return v == 1;
}

static double attr_f(mgi_octx *c, const node_t *n, const char *name, double def)
{
    const Onnx__AttributeProto *a = attr(c, n, name, AT(FLOAT));
    return a ? a->f : def;
}

/* A normalisation's epsilon: finite and not negative. */
static double attr_eps(mgi_octx *c, const node_t *n)
{
    double eps = attr_f(c, n, "epsilon", 1e-5);
    if (!(eps >= 0) || !isfinite(eps))
        bad_attr(c, "attribute 'epsilon' is %g (finite, at least 0)", eps);
    return eps;
}

/* A string attribute, copied (protobuf bytes are not NUL-terminated). */
static void attr_s(mgi_octx *c, const node_t *n, const char *name,
                   const char *def, char *buf, size_t len)
{
    const Onnx__AttributeProto *a = attr(c, n, name, AT(STRING));
    if (!a) {
        snprintf(buf, len, "%s", def);
        return;
    }
    size_t l = a->s.len < len - 1 ? a->s.len : len - 1;
    memcpy(buf, a->s.data, l);
    buf[l] = '\0';
}

/* An ints attribute: its count (-1 if absent; -2 if more than max). */
static int attr_ints(mgi_octx *c, const node_t *n, const char *name,
                     int64_t *out, int max)
{
    const Onnx__AttributeProto *a = attr(c, n, name, AT(INTS));
    if (!a)
        return -1;
    if (a->n_ints > (size_t)max)
        return -2;
    for (size_t k = 0; k < a->n_ints; k++)
        out[k] = a->ints[k];
    return (int)a->n_ints;
}

/* Integer values of a constant input (axes, shapes, pads): count, or -1 if
 * the input is absent, -2 if it is not a constant or has more than max. */
static int const_ints(mgi_octx *c, const node_t *n, size_t k, int64_t *out,
                      int max)
{
    if (!in(c, n, k))
        return -1;
    const mgi_oconst *kc = slot_const(c, n, k);
    if (!kc || kc->n > max)
        return -2;
    for (int64_t e = 0; e < kc->n; e++)
        out[e] = kc->i ? kc->i[e] : d2i(kc->f[e]);
    return (int)kc->n;
}

static int tshape(mgi_octx *c, mg_tensor t, int64_t *shape)
{
    int nd = 0;
    if (mg_tensor_shape(c->g, t, &nd, shape))
        return -1;
    return nd;
}

/* A double as an int64, saturating (NaN gives 0): hostile files put any
 * float where an index or a size belongs. */
static int64_t d2i(double x)
{
    if (!(x == x))
        return 0;
    if (x >= 4611686018427387904.0)
        return INT64_C(4611686018427387904);
    if (x <= -4611686018427387904.0)
        return -INT64_C(4611686018427387904);
    return (int64_t)x;
}

static double cval(const mgi_oconst *k, int64_t e)
{
    return k->f ? k->f[e] : (double)k->i[e];
}

static bool norm_axis(int64_t *axis, int ndim)
{
    if (*axis < 0)
        *axis += ndim;
    return *axis >= 0 && *axis < ndim;
}

#define BAD_ATTR(...) mgi_onnx_node_error(c, MG_ERR_INVALID_ARG, __VA_ARGS__)
#define UNSUP(...) mgi_onnx_node_error(c, MG_ERR_UNSUPPORTED, __VA_ARGS__)
#define TRY(expr)                      \
    do {                               \
        mg_status s_ = (expr);         \
        if (s_)                        \
            return s_;                 \
    } while (0)

/* ------------------------------------------------------------------ folding */

/* numpy broadcast of two shapes */
static bool bcast(int na, const int64_t *a, int nb, const int64_t *b, int *nd,
                  int64_t *out)
{
    int n = na > nb ? na : nb;
    for (int d = 0; d < n; d++) {
        int64_t x = d - (n - na) >= 0 ? a[d - (n - na)] : 1;
        int64_t y = d - (n - nb) >= 0 ? b[d - (n - nb)] : 1;
        if (x != y && x != 1 && y != 1)
            return false;
        out[d] = x == 1 ? y : x;
    }
    *nd = n;
    return true;
}

/* Offset in k of the output multi-index idx (rank nd), broadcasting. */
static int64_t boff(const mgi_oconst *k, int nd, const int64_t *idx)
{
    int64_t off = 0;
    for (int d = 0; d < k->ndim; d++) {
        int64_t i = idx[nd - k->ndim + d];
        off = off * k->shape[d] + (k->shape[d] == 1 ? 0 : i);
    }
    return off;
}

static void next_idx(int nd, const int64_t *shape, int64_t *idx)
{
    for (int d = nd - 1; d >= 0; d--) {
        if (++idx[d] < shape[d])
            return;
        idx[d] = 0;
    }
}

typedef enum { F_ADD, F_SUB, F_MUL, F_DIV, F_EQ, F_LT, F_GT, F_POW, F_MIN,
               F_MAX, F_AND, F_OR } fold_op;

static mg_status fold_consts(mgi_octx *c, const mgi_oconst *a,
                             const mgi_oconst *b, fold_op op, mgi_oconst **out)
{
    int nd;
    int64_t shape[MG_MAX_DIMS];
    *out = NULL;
    if (!bcast(a->ndim, a->shape, b->ndim, b->shape, &nd, shape))
        return mgi_onnx_node_error(c, MG_ERR_SHAPE, "shapes do not broadcast");
    bool cmp = op == F_EQ || op == F_LT || op == F_GT || op == F_AND || op == F_OR;
    bool fl = !cmp && (a->f || b->f);
    mgi_oconst *k = mgi_onnx_const_new(
        c, cmp ? ONNX__TENSOR_PROTO__DATA_TYPE__BOOL : a->onnx_type, fl, nd, shape);
    if (!k)
        return mg_last_status();
    int64_t idx[MG_MAX_DIMS] = {0};
    for (int64_t e = 0; e < k->n; e++, next_idx(nd, shape, idx)) {
        int64_t ia = boff(a, nd, idx), ib = boff(b, nd, idx);
        if (fl) {
            double x = cval(a, ia), y = cval(b, ib), r;
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
            double x = cval(a, ia), y = cval(b, ib);
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
            case F_POW: r = d2i(pow((double)x, (double)y)); break;
            case F_MIN: r = x < y ? x : y; break;
            default: r = x > y ? x : y; break;
            }
            k->i[e] = r;
        }
    }
    *out = k;
    return MG_OK;
}

static mg_status fold_binary(mgi_octx *c, const node_t *n, fold_op op)
{
    mgi_oconst *k;
    TRY(fold_consts(c, in_const(c, n, 0), in_const(c, n, 1), op, &k));
    return out_c(c, n, 0, k);
}

static mg_status fold_where(mgi_octx *c, const node_t *n)
{
    mgi_oconst *q = in_const(c, n, 0), *a = in_const(c, n, 1),
               *b = in_const(c, n, 2);
    int nd, nd2;
    int64_t s1[MG_MAX_DIMS], shape[MG_MAX_DIMS];
    if (!bcast(q->ndim, q->shape, a->ndim, a->shape, &nd, s1) ||
        !bcast(nd, s1, b->ndim, b->shape, &nd2, shape))
        return mgi_onnx_node_error(c, MG_ERR_SHAPE, "shapes do not broadcast");
    bool fl = a->f != NULL;
    if (fl != (b->f != NULL))
        return mgi_onnx_node_error(c, MG_ERR_DTYPE, "X and Y types differ");
    mgi_oconst *k = mgi_onnx_const_new(c, a->onnx_type, fl, nd2, shape);
    if (!k)
        return mg_last_status();
    int64_t idx[MG_MAX_DIMS] = {0};
    for (int64_t e = 0; e < k->n; e++, next_idx(nd2, shape, idx)) {
        bool t = cval(q, boff(q, nd2, idx)) != 0;
        const mgi_oconst *src = t ? a : b;
        int64_t o = boff(src, nd2, idx);
        if (fl)
            k->f[e] = src->f[o];
        else
            k->i[e] = src->i[o];
    }
    return out_c(c, n, 0, k);
}

/* A constant with k's data and a new shape (Reshape, Squeeze, Unsqueeze,
 * Flatten on constants). */
static mgi_oconst *const_reshaped(mgi_octx *c, const mgi_oconst *k, int nd,
                                  const int64_t *shape)
{
    mgi_oconst *r = mgi_onnx_const_new(c, k->onnx_type, k->f != NULL, nd, shape);
    if (!r)
        return NULL;
    if (r->n != k->n) {
        mgi_onnx_node_error(c, MG_ERR_SHAPE, "reshape of %lld elements to %lld",
                            (long long)k->n, (long long)r->n);
        return NULL;
    }
    if (k->f)
        memcpy(r->f, k->f, (size_t)k->n * sizeof(double));
    else
        memcpy(r->i, k->i, (size_t)k->n * sizeof(int64_t));
    return r;
}

/* The shape of input 0, tensor or constant. */
static int in_shape(mgi_octx *c, const node_t *n, size_t k, int64_t *shape)
{
    mgi_oval *v = in(c, n, k);
    if (!v)
        return -1;
    if (v->c) {
        memcpy(shape, v->c->shape, sizeof(int64_t) * (size_t)v->c->ndim);
        return v->c->ndim;
    }
    return tshape(c, v->t, shape);
}

/* ------------------------------------------------------------------ shape ops */

static mg_status op_shape(mgi_octx *c, const node_t *n)
{
    int64_t shape[MG_MAX_DIMS];
    int nd = in_shape(c, n, 0, shape);
    if (nd < 0)
        return BAD_ATTR("input 0 is missing");
    int64_t start = attr_i(c, n, "start", 0), end = attr_i(c, n, "end", nd);
    if (start < 0)
        start += nd;
    if (end < 0)
        end += nd;
    start = start < 0 ? 0 : start > nd ? nd : start;
    end = end < start ? start : end > nd ? nd : end;
    int64_t len = end - start;
    mgi_oconst *k = mgi_onnx_const_new(c, ONNX__TENSOR_PROTO__DATA_TYPE__INT64,
                                       false, 1, &len);
    if (!k)
        return mg_last_status();
    for (int64_t d = 0; d < len; d++)
        k->i[d] = shape[start + d];
    return out_c(c, n, 0, k);
}

/* Reshape's target: 0 copies the input's dim (unless allowzero), one -1 is
 * inferred. */
static mg_status reshape_target(mgi_octx *c, const node_t *n, int nd_in,
                                const int64_t *in_shape_, int64_t numel,
                                int *nd_out, int64_t *out)
{
    int64_t sh[MG_MAX_DIMS];
    int nd = const_ints(c, n, 1, sh, MG_MAX_DIMS);
    if (nd < 0)
        return UNSUP("the target shape must be a constant of rank at most %d "
                     "(a static shape)", MG_MAX_DIMS);
    bool allowzero = attr_flag(c, n, "allowzero", false);
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
            if (infer >= 0)
                return BAD_ATTR("two -1 entries in the shape");
            infer = d;
            out[d] = 1;
            continue;
        }
        if (v < 0)
            return BAD_ATTR("shape entry %lld", (long long)v);
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

static int64_t numel_of(int nd, const int64_t *shape)
{
    int64_t p = 1;
    for (int d = 0; d < nd; d++)
        p *= shape[d];
    return p;
}

static mg_status op_reshape(mgi_octx *c, const node_t *n)
{
    int64_t shape[MG_MAX_DIMS], out[MG_MAX_DIMS];
    int nd = in_shape(c, n, 0, shape), nd_out = 0;
    if (nd < 0)
        return BAD_ATTR("input 0 is missing");
    TRY(reshape_target(c, n, nd, shape, numel_of(nd, shape), &nd_out, out));
    mgi_oval *v = in(c, n, 0);
    if (v->c)
        return out_c(c, n, 0, const_reshaped(c, v->c, nd_out, out));
    return out_t(c, n, 0, mg_reshape(c->g, as_float(c, v->t), nd_out, out));
}

/* Squeeze/Unsqueeze/Flatten: new shape, then as Reshape. */
static mg_status reshape_to(mgi_octx *c, const node_t *n, int nd_out,
                            const int64_t *out)
{
    mgi_oval *v = in(c, n, 0);
    if (v->c)
        return out_c(c, n, 0, const_reshaped(c, v->c, nd_out, out));
    return out_t(c, n, 0, mg_reshape(c->g, as_float(c, v->t), nd_out, out));
}

static int axes_of(mgi_octx *c, const node_t *n, int64_t *axes, int max)
{
    int na = attr_ints(c, n, "axes", axes, max);
    if (na == -1 && c->opset >= 13)
        na = const_ints(c, n, 1, axes, max);
    return na;
}

static mg_status op_unsqueeze(mgi_octx *c, const node_t *n)
{
    int64_t shape[MG_MAX_DIMS], axes[MG_MAX_DIMS], out[MG_MAX_DIMS];
    int nd = in_shape(c, n, 0, shape);
    int na = axes_of(c, n, axes, MG_MAX_DIMS);
    if (nd < 0 || na < 0 || nd + na > MG_MAX_DIMS)
        return BAD_ATTR("needs an input and constant axes (rank at most %d)",
                        MG_MAX_DIMS);
    int no = nd + na;
    bool is_new[MG_MAX_DIMS] = {false};
    for (int k = 0; k < na; k++) {
        if (!norm_axis(&axes[k], no) || is_new[axes[k]])
            return BAD_ATTR("bad axis %lld", (long long)axes[k]);
        is_new[axes[k]] = true;
    }
    for (int d = 0, j = 0; d < no; d++)
        out[d] = is_new[d] ? 1 : shape[j++];
    return reshape_to(c, n, no, out);
}

static mg_status op_squeeze(mgi_octx *c, const node_t *n)
{
    int64_t shape[MG_MAX_DIMS], axes[MG_MAX_DIMS], out[MG_MAX_DIMS];
    int nd = in_shape(c, n, 0, shape);
    int na = axes_of(c, n, axes, MG_MAX_DIMS);
    if (nd < 0 || na == -2)
        return BAD_ATTR("needs an input and constant axes");
    bool drop[MG_MAX_DIMS] = {false};
    if (na < 0) {
        for (int d = 0; d < nd; d++)
            drop[d] = shape[d] == 1;
    } else {
        for (int k = 0; k < na; k++) {
            if (!norm_axis(&axes[k], nd) || shape[axes[k]] != 1)
                return BAD_ATTR("axis %lld is not of size 1", (long long)axes[k]);
            drop[axes[k]] = true;
        }
    }
    int no = 0;
    for (int d = 0; d < nd; d++)
        if (!drop[d])
            out[no++] = shape[d];
    return reshape_to(c, n, no, out);
}

static mg_status op_flatten(mgi_octx *c, const node_t *n)
{
    int64_t shape[MG_MAX_DIMS], out[2] = {1, 1};
    int nd = in_shape(c, n, 0, shape);
    int64_t axis = attr_i(c, n, "axis", 1);
    if (axis < 0)
        axis += nd;
    if (nd < 0 || axis < 0 || axis > nd)
        return BAD_ATTR("bad axis");
    for (int d = 0; d < nd; d++)
        out[d < axis ? 0 : 1] *= shape[d];
    return reshape_to(c, n, 2, out);
}

static mg_status op_identity(mgi_octx *c, const node_t *n)
{
    mgi_oval *v = in(c, n, 0);
    if (!v)
        return BAD_ATTR("input 0 is missing");
    if (v->c)
        return out_c(c, n, 0, v->c);
    return out_t(c, n, 0, v->t);
}

static mg_status op_constant(mgi_octx *c, const node_t *n)
{
    const Onnx__AttributeProto *a;
    mgi_oconst *k = NULL;
    if ((a = attr(c, n, "value", AT(TENSOR)))) {
        TRY(mgi_onnx_decode_tensor(c, a->t, &k));
    } else if ((a = attr(c, n, "value_float", AT(FLOAT)))) {
        k = mgi_onnx_const_new(c, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, true, 0, NULL);
        if (k)
            k->f[0] = a->f;
    } else if ((a = attr(c, n, "value_int", AT(INT)))) {
        k = mgi_onnx_const_new(c, ONNX__TENSOR_PROTO__DATA_TYPE__INT64, false, 0, NULL);
        if (k)
            k->i[0] = a->i;
    } else if ((a = attr(c, n, "value_floats", AT(FLOATS)))) {
        int64_t len = (int64_t)a->n_floats;
        k = mgi_onnx_const_new(c, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, true, 1, &len);
        for (int64_t e = 0; k && e < len; e++)
            k->f[e] = a->floats[e];
    } else if ((a = attr(c, n, "value_ints", AT(INTS)))) {
        int64_t len = (int64_t)a->n_ints;
        k = mgi_onnx_const_new(c, ONNX__TENSOR_PROTO__DATA_TYPE__INT64, false, 1, &len);
        for (int64_t e = 0; k && e < len; e++)
            k->i[e] = a->ints[e];
    } else {
        return UNSUP("only value, value_float(s) and value_int(s) are supported");
    }
    return out_c(c, n, 0, k);
}

static mg_status op_constant_of_shape(mgi_octx *c, const node_t *n)
{
    int64_t shape[MG_MAX_DIMS];
    int nd = const_ints(c, n, 0, shape, MG_MAX_DIMS);
    if (nd < 0)
        return UNSUP("the shape must be a constant of rank at most %d", MG_MAX_DIMS);
    const Onnx__AttributeProto *a = attr(c, n, "value", AT(TENSOR));
    mgi_oconst *v = NULL;
    if (a)
        TRY(mgi_onnx_decode_tensor(c, a->t, &v));
    if (v && v->n != 1)
        return BAD_ATTR("value must hold one element");
    mgi_oconst *k = mgi_onnx_const_new(
        c, v ? v->onnx_type : ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT,
        v ? v->f != NULL : true, nd, shape);
    if (!k)
        return mg_last_status();
    for (int64_t e = 0; e < k->n; e++) {
        if (k->f)
            k->f[e] = v ? v->f[0] : 0.0;
        else
            k->i[e] = v->i[0];
    }
    return out_c(c, n, 0, k);
}

/* The name of TensorProto data type t ("FLOAT", "INT64"), or NULL if t is
 * none. */
static const char *type_name(int64_t t)
{
    if (t < INT32_MIN || t > INT32_MAX)
        return NULL;
    const ProtobufCEnumValue *v = protobuf_c_enum_descriptor_get_value(
        &onnx__tensor_proto__data_type__descriptor, (int)t);
    return v ? v->name : NULL;
}

/* An integer element of a constant, whichever way it is stored. */
static int64_t ival(const mgi_oconst *k, int64_t e)
{
    return k->i ? k->i[e] : d2i(k->f[e]);
}

static mg_status op_range(mgi_octx *c, const node_t *n)
{
    mgi_oconst *s = in_const(c, n, 0), *l = in_const(c, n, 1), *d = in_const(c, n, 2);
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
    double st = cval(s, 0), li = cval(l, 0), de = cval(d, 0);
    if (de == 0)
        return BAD_ATTR("delta is 0");
    double cnt = ceil((li - st) / de);
    if (!(cnt < (double)MGI_ONNX_MAX_CONST_ELEMS))
        return mgi_onnx_node_error(c, MG_ERR_SHAPE, "range too long");
    int64_t len = cnt > 0 ? (int64_t)cnt : 0;
    mgi_oconst *k = mgi_onnx_const_new(c, s->onnx_type, s->f != NULL, 1, &len);
    if (!k)
        return mg_last_status();
    for (int64_t e = 0; e < len; e++) {
        if (k->f)
            k->f[e] = st + (double)e * de;
        else
            k->i[e] = (int64_t)((uint64_t)ival(s, 0) + (uint64_t)e * (uint64_t)ival(d, 0));
    }
    return out_c(c, n, 0, k);
}

/* The Cast targets memgrad implements: f32 and f64, and the integers it
 * keeps as int64 constants or int32 tensors (see as_float). Narrower and
 * unsigned integers would need their wrap-around, strings and float16 a
 * representation memgrad does not have. */
static mg_status cast_target(mgi_octx *c, const node_t *n, int64_t *to)
{
    if (!attr(c, n, "to", AT(INT)))
        return BAD_ATTR("Cast needs its 'to' attribute");
    *to = attr_i(c, n, "to", 0);
    const char *name = type_name(*to);
    if (!name || *to == ONNX__TENSOR_PROTO__DATA_TYPE__UNDEFINED)
        return BAD_ATTR("to=%lld is not a TensorProto data type",
                        (long long)*to);
    switch (*to) {
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT:
    case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE:
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT32:
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT64:
    case ONNX__TENSOR_PROTO__DATA_TYPE__BOOL:
        return MG_OK;
    default:
        return UNSUP("Cast to %s (FLOAT, DOUBLE, INT32, INT64 and BOOL are "
                     "supported)", name);
    }
}

static mg_status op_cast(mgi_octx *c, const node_t *n)
{
    int64_t to = 0;
    TRY(cast_target(c, n, &to));
    mgi_oval *v = in(c, n, 0);
    if (!v)
        return BAD_ATTR("input 0 is missing");
    bool to_float = to == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT ||
                    to == ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE;
    if (!v->c) {
        /* Booleans are f32 0/1 (see as_float), so a cast to bool is
         * is_nonzero and one from bool to float is nothing. */
        mg_dtype dt;
        TRY(mg_tensor_dtype(c->g, v->t, &dt));
        bool is_int = dt == MG_I32 || dt == MG_I64;
        if (to == ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE && dt != MG_F64)
            return UNSUP("a cast of a float tensor to double");
        if (to == ONNX__TENSOR_PROTO__DATA_TYPE__BOOL)
            return out_t(c, n, 0, mg_is_nonzero(c->g, as_float(c, v->t)));
        if (to_float)
            return out_t(c, n, 0, as_float(c, v->t));
        return out_t(c, n, 0, is_int ? v->t : mg_cast(c->g, v->t, MG_I32));
    }
    mgi_oconst *k = mgi_onnx_const_new(c, (int32_t)to, to_float, v->c->ndim,
                                       v->c->shape);
    if (!k)
        return mg_last_status();
    for (int64_t e = 0; e < k->n; e++) {
        double x = cval(v->c, e);
        if (to_float)
            k->f[e] = to == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT ? (float)x : x;
        else if (to == ONNX__TENSOR_PROTO__DATA_TYPE__BOOL)
            k->i[e] = x != 0;
        else
            k->i[e] = v->c->i ? v->c->i[e]
                              : d2i(x);
    }
    return out_c(c, n, 0, k);
}

static mg_status op_concat(mgi_octx *c, const node_t *n)
{
    if (n->n_input < 1 || n->n_input > 4096)
        return BAD_ATTR("needs 1 to 4096 inputs");
    /* required since opset 4 (the default 1 before is of opsets refused) */
    if (!attr(c, n, "axis", AT(INT)))
        return BAD_ATTR("Concat needs its axis attribute");
    int64_t axis = attr_i(c, n, "axis", 0);
    bool all_const = true;
    for (size_t k = 0; k < n->n_input; k++) {
        mgi_oval *v = in(c, n, k);
        if (!v)
            return BAD_ATTR("input %zu is missing", k);
        all_const = all_const && v->c;
    }
    if (all_const) {
        mgi_oconst *a = in_const(c, n, 0);
        int nd = a->ndim;
        if (!norm_axis(&axis, nd))
            return BAD_ATTR("axis %lld is out of range for rank %d",
                            (long long)attr_i(c, n, "axis", 0), nd);
        int64_t shape[MG_MAX_DIMS];
        memcpy(shape, a->shape, sizeof(int64_t) * (size_t)nd);
        shape[axis] = 0;
        for (size_t k = 0; k < n->n_input; k++) {
            mgi_oconst *b = in_const(c, n, k);
            if (b->ndim != nd || (b->f != NULL) != (a->f != NULL))
                return mgi_onnx_node_error(c, MG_ERR_SHAPE, "inputs differ in rank or type");
            for (int d = 0; d < nd; d++)
                if (d != axis && b->shape[d] != a->shape[d])
                    return mgi_onnx_node_error(c, MG_ERR_SHAPE, "inputs differ in dim %d", d);
            shape[axis] += b->shape[axis];
            if (shape[axis] > MGI_ONNX_MAX_CONST_ELEMS)
                return mgi_onnx_node_error(c, MG_ERR_SHAPE, "too large");
        }
        mgi_oconst *k = mgi_onnx_const_new(c, a->onnx_type, a->f != NULL, nd, shape);
        if (!k)
            return mg_last_status();
        int64_t outer = 1, inner = 1;
        for (int d = 0; d < axis; d++)
            outer *= shape[d];
        for (int d = (int)axis + 1; d < nd; d++)
            inner *= shape[d];
        int64_t pos = 0;
        for (int64_t o = 0; o < outer; o++)
            for (size_t q = 0; q < n->n_input; q++) {
                mgi_oconst *b = in_const(c, n, q);
                int64_t run = b->shape[axis] * inner;
                for (int64_t e = 0; e < run; e++, pos++) {
                    if (k->f)
                        k->f[pos] = b->f[o * run + e];
                    else
                        k->i[pos] = b->i[o * run + e];
                }
            }
        return out_c(c, n, 0, k);
    }
    mg_tensor *xs = malloc(n->n_input * sizeof *xs);
    if (!xs)
        return mg_set_error(MG_ERR_NOMEM, "onnx: out of memory");
    for (size_t k = 0; k < n->n_input; k++) {
        xs[k] = T(c, n, k);
        if (xs[k] == MG_NO_TENSOR) {
            free(xs);
            return mg_last_status();
        }
    }
    /* normalised against the rank before the cast to int: 2^32 + 1 would
     * otherwise become axis 1 */
    int64_t xs0[MG_MAX_DIMS];
    int nd = tshape(c, xs[0], xs0);
    if (!norm_axis(&axis, nd)) {
        free(xs);
        return BAD_ATTR("axis %lld is out of range for rank %d",
                        (long long)attr_i(c, n, "axis", 0), nd);
    }
    mg_tensor y = mg_concat(c->g, (int)n->n_input, xs, (int)axis);
    free(xs);
    return out_t(c, n, 0, y);
}

static mg_status op_gather(mgi_octx *c, const node_t *n)
{
    mgi_oval *dv = in(c, n, 0), *iv = in(c, n, 1);
    if (!dv || !iv)
        return BAD_ATTR("needs data and indices");
    int64_t axis = attr_i(c, n, "axis", 0);
    int64_t shape[MG_MAX_DIMS];
    int nd = in_shape(c, n, 0, shape);
    if (!norm_axis(&axis, nd))
        return BAD_ATTR("bad axis");
    if (dv->c && iv->c) {
        mgi_oconst *d = dv->c, *ix = iv->c;
        int no = nd - 1 + ix->ndim;
        if (no > MG_MAX_DIMS)
            return mgi_onnx_node_error(c, MG_ERR_SHAPE, "rank too large");
        int64_t os[MG_MAX_DIMS];
        int j = 0;
        for (int q = 0; q < axis; q++)
            os[j++] = shape[q];
        for (int q = 0; q < ix->ndim; q++)
            os[j++] = ix->shape[q];
        for (int q = (int)axis + 1; q < nd; q++)
            os[j++] = shape[q];
        mgi_oconst *k = mgi_onnx_const_new(c, d->onnx_type, d->f != NULL, no, os);
        if (!k)
            return mg_last_status();
        int64_t outer = 1, inner = 1;
        for (int q = 0; q < axis; q++)
            outer *= shape[q];
        for (int q = (int)axis + 1; q < nd; q++)
            inner *= shape[q];
        int64_t pos = 0;
        for (int64_t o = 0; o < outer; o++)
            for (int64_t e = 0; e < ix->n; e++) {
                int64_t i = d2i(cval(ix, e));
                if (i < 0)
                    i += shape[axis];
                if (i < 0 || i >= shape[axis])
                    return BAD_ATTR("index %lld out of range", (long long)i);
                for (int64_t r = 0; r < inner; r++, pos++) {
                    int64_t src = (o * shape[axis] + i) * inner + r;
                    if (k->f)
                        k->f[pos] = d->f[src];
                    else
                        k->i[pos] = d->i[src];
                }
            }
        return out_c(c, n, 0, k);
    }
    mg_tensor x = mgi_onnx_tensor(c, dv);
    if (x == MG_NO_TENSOR)
        return mg_last_status();
    if (iv->c && iv->c->ndim <= 1 && iv->c->n >= 1) {
        /* constant indices: a slice when they are consecutive */
        int64_t first = d2i(cval(iv->c, 0));
        if (first < 0)
            first += shape[axis];
        bool run = true;
        for (int64_t e = 1; e < iv->c->n && run; e++) {
            int64_t i = d2i(cval(iv->c, e));
            run = (i < 0 ? i + shape[axis] : i) == first + e;
        }
        if (run) {
            mg_tensor y = mg_slice(c->g, x, (int)axis, first, iv->c->n);
            if (iv->c->ndim == 0 && y != MG_NO_TENSOR) {
                int64_t os[MG_MAX_DIMS];
                int j = 0;
                for (int q = 0; q < nd; q++)
                    if (q != axis)
                        os[j++] = shape[q];
                y = mg_reshape(c->g, y, j, os);
            }
            return out_t(c, n, 0, y);
        }
    }
    if (axis != 0 || nd < 1)
        return UNSUP("a gather of a tensor along axis %lld with non-consecutive "
                     "or non-constant indices", (long long)axis);
    /* rows of a table: an embedding of [V, rest] */
    mg_tensor idx = mgi_onnx_tensor(c, iv);
    mg_dtype idt;
    /* ids that went through float math (a Reshape, see as_float) */
    if (idx != MG_NO_TENSOR && mg_tensor_dtype(c->g, idx, &idt) == MG_OK &&
        (idt == MG_F32 || idt == MG_F64))
        idx = mg_cast(c->g, idx, MG_I32);
    if (idx == MG_NO_TENSOR)
        return mg_last_status();
    int64_t rest = numel_of(nd - 1, shape + 1);
    int64_t tshape2[2] = {shape[0], rest};
    mg_tensor tab = nd == 2 ? x : mg_reshape(c->g, x, 2, tshape2);
    mg_tensor y = mg_embedding(c->g, tab, idx);
    if (y != MG_NO_TENSOR && nd != 2) {
        int64_t is[MG_MAX_DIMS], os[MG_MAX_DIMS];
        int ni = tshape(c, idx, is);
        if (ni + nd - 1 > MG_MAX_DIMS)
            return mgi_onnx_node_error(c, MG_ERR_SHAPE, "rank too large");
        memcpy(os, is, sizeof(int64_t) * (size_t)ni);
        memcpy(os + ni, shape + 1, sizeof(int64_t) * (size_t)(nd - 1));
        y = mg_reshape(c->g, y, ni + nd - 1, os);
    }
    return out_t(c, n, 0, y);
}

static mg_status op_slice(mgi_octx *c, const node_t *n)
{
    int64_t shape[MG_MAX_DIMS];
    int nd = in_shape(c, n, 0, shape);
    if (nd < 0)
        return BAD_ATTR("input 0 is missing");
    int64_t st[MG_MAX_DIMS], en[MG_MAX_DIMS], ax[MG_MAX_DIMS], sp[MG_MAX_DIMS];
    int ns, ne, na, nsp;
    if (c->opset < 10) {
        ns = attr_ints(c, n, "starts", st, MG_MAX_DIMS);
        ne = attr_ints(c, n, "ends", en, MG_MAX_DIMS);
        na = attr_ints(c, n, "axes", ax, MG_MAX_DIMS);
        nsp = -1;
    } else {
        ns = const_ints(c, n, 1, st, MG_MAX_DIMS);
        ne = const_ints(c, n, 2, en, MG_MAX_DIMS);
        na = const_ints(c, n, 3, ax, MG_MAX_DIMS);
        nsp = const_ints(c, n, 4, sp, MG_MAX_DIMS);
    }
    if (ns < 0 || ne != ns || na == -2 || nsp == -2 || (na >= 0 && na != ns) ||
        (nsp >= 0 && nsp != ns))
        return UNSUP("starts, ends, axes and steps must be constants of one length");
    mgi_oval *v = in(c, n, 0);
    mg_tensor y = v->c ? MG_NO_TENSOR : as_float(c, v->t);
    mgi_oconst *k = v->c;
    for (int q = 0; q < ns; q++) {
        int64_t a = na >= 0 ? ax[q] : q;
        if (!norm_axis(&a, nd))
            return BAD_ATTR("bad axis %lld", (long long)a);
        if (nsp >= 0 && sp[q] != 1)
            return UNSUP("Slice with step %lld (only 1)", (long long)sp[q]);
        int64_t dim = shape[a], s0 = st[q], e0 = en[q];
        if (s0 < 0)
            s0 += dim;
        if (e0 < 0)
            e0 += dim;
        s0 = s0 < 0 ? 0 : s0 > dim ? dim : s0;
        e0 = e0 < 0 ? 0 : e0 > dim ? dim : e0;
        if (e0 <= s0 && !k)
            return UNSUP("an empty slice");
        int64_t len = e0 > s0 ? e0 - s0 : 0;
        if (s0 == 0 && len == dim)
            continue;
        if (!k) {
            y = mg_slice(c->g, y, (int)a, s0, len);
            if (y == MG_NO_TENSOR)
                return out_t(c, n, 0, y);
        } else {
            int64_t os[MG_MAX_DIMS];
            memcpy(os, k->shape, sizeof os);
            os[a] = len;
            mgi_oconst *r = mgi_onnx_const_new(c, k->onnx_type, k->f != NULL, nd, os);
            if (!r)
                return mg_last_status();
            int64_t outer = 1, inner = 1;
            for (int d = 0; d < a; d++)
                outer *= k->shape[d];
            for (int d = (int)a + 1; d < nd; d++)
                inner *= k->shape[d];
            int64_t pos = 0;
            for (int64_t o = 0; o < outer; o++)
                for (int64_t i = s0; i < s0 + len; i++)
                    for (int64_t e = 0; e < inner; e++, pos++) {
                        int64_t src = (o * k->shape[a] + i) * inner + e;
                        if (r->f)
                            r->f[pos] = k->f[src];
                        else
                            r->i[pos] = k->i[src];
                    }
            k = r;
            shape[a] = len;
        }
    }
    if (k)
        return out_c(c, n, 0, k);
    return out_t(c, n, 0, y);
}

static mg_status op_split(mgi_octx *c, const node_t *n)
{
    int64_t shape[MG_MAX_DIMS], sizes[64];
    int nd = in_shape(c, n, 0, shape);
    int64_t axis = attr_i(c, n, "axis", 0);
    if (nd < 0 || !norm_axis(&axis, nd))
        return BAD_ATTR("bad input or axis");
    size_t no = n->n_output;
    if (no < 1 || no > 64)
        return UNSUP("Split into %zu outputs (1 to 64)", no);
    int64_t nout = attr_i(c, n, "num_outputs", (int64_t)no); /* opset 18 */
    if (nout != (int64_t)no)
        return BAD_ATTR("num_outputs %lld for %zu outputs", (long long)nout, no);
    int ns = attr_ints(c, n, "split", sizes, 64);
    if (ns == -1 && c->opset >= 13)
        ns = const_ints(c, n, 1, sizes, 64);
    if (ns < 0) {
        if (shape[axis] % (int64_t)no)
            return UNSUP("an uneven Split without sizes");
        for (size_t k = 0; k < no; k++)
            sizes[k] = shape[axis] / (int64_t)no;
    } else if ((size_t)ns != no) {
        return BAD_ATTR("%d sizes for %zu outputs", ns, no);
    }
    for (size_t k = 0; k < no; k++)
        if (sizes[k] < 1 || sizes[k] > shape[axis])
            return BAD_ATTR("split size %lld", (long long)sizes[k]);
    mg_tensor x = T(c, n, 0);
    if (x == MG_NO_TENSOR)
        return mg_last_status();
    int64_t at = 0;
    for (size_t k = 0; k < no; k++) {
        TRY(out_t(c, n, k, mg_slice(c->g, x, (int)axis, at, sizes[k])));
        at += sizes[k];
    }
    return MG_OK;
}

static mg_status op_transpose(mgi_octx *c, const node_t *n)
{
    int64_t shape[MG_MAX_DIMS], perm64[MG_MAX_DIMS];
    int nd = in_shape(c, n, 0, shape);
    if (nd < 0)
        return BAD_ATTR("input 0 is missing");
    int np = attr_ints(c, n, "perm", perm64, MG_MAX_DIMS);
    int perm[MG_MAX_DIMS];
    if (np == -2)
        return BAD_ATTR("perm has more than %d entries", MG_MAX_DIMS);
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
                            "perm must be a permutation of 0..%d", d,
                            (long long)p, nd - 1);
        seen[p] = true;
        perm[d] = (int)p;
    }
    mgi_oval *v = in(c, n, 0);
    if (v->c) {
        mgi_oconst *k = v->c;
        int64_t os[MG_MAX_DIMS], st[MG_MAX_DIMS], idx[MG_MAX_DIMS] = {0};
        for (int d = 0; d < nd; d++)
            os[d] = shape[perm[d]];
        int64_t s = 1;
        for (int d = nd - 1; d >= 0; d--) {
            st[d] = s;
            s *= shape[d];
        }
        mgi_oconst *r = mgi_onnx_const_new(c, k->onnx_type, k->f != NULL, nd, os);
        if (!r)
            return mg_last_status();
        for (int64_t e = 0; e < r->n; e++, next_idx(nd, os, idx)) {
            int64_t src = 0;
            for (int d = 0; d < nd; d++)
                src += idx[d] * st[perm[d]];
            if (r->f)
                r->f[e] = k->f[src];
            else
                r->i[e] = k->i[src];
        }
        return out_c(c, n, 0, r);
    }
    if (nd < 2)
        return out_t(c, n, 0, v->t);
    return out_t(c, n, 0, mg_permute(c->g, as_float(c, v->t), perm));
}

static mg_status op_expand(mgi_octx *c, const node_t *n)
{
    int64_t shape[MG_MAX_DIMS], tgt[MG_MAX_DIMS], out[MG_MAX_DIMS];
    int nd = in_shape(c, n, 0, shape);
    int nt = const_ints(c, n, 1, tgt, MG_MAX_DIMS);
    int no;
    if (nd < 0 || nt < 0)
        return UNSUP("Expand needs a constant shape of rank at most %d", MG_MAX_DIMS);
    if (!bcast(nd, shape, nt, tgt, &no, out))
        return mgi_onnx_node_error(c, MG_ERR_SHAPE, "shapes do not broadcast");
    mgi_oval *v = in(c, n, 0);
    if (v->c) {
        mgi_oconst *r = mgi_onnx_const_new(c, v->c->onnx_type, v->c->f != NULL, no, out);
        if (!r)
            return mg_last_status();
        int64_t idx[MG_MAX_DIMS] = {0};
        for (int64_t e = 0; e < r->n; e++, next_idx(no, out, idx)) {
            int64_t o = boff(v->c, no, idx);
            if (r->f)
                r->f[e] = v->c->f[o];
            else
                r->i[e] = v->c->i[o];
        }
        return out_c(c, n, 0, r);
    }
    if (no == nd && memcmp(shape, out, sizeof(int64_t) * (size_t)nd) == 0)
        return out_t(c, n, 0, v->t);
    return out_t(c, n, 0, mg_broadcast_to(c->g, as_float(c, v->t), no, out));
}

/* ------------------------------------------------------------------ elementwise */

static bool all_inputs_const(mgi_octx *c, const node_t *n)
{
    for (size_t k = 0; k < n->n_input; k++) {
        /* an empty name is a missing input: the tensor path reports it */
        mgi_oval *v = in(c, n, k);
        if (!v || !v->c)
            return false;
    }
    return n->n_input > 0;
}

static mg_status binary(mgi_octx *c, const node_t *n, fold_op op)
{
    if (n->n_input != 2)
        return BAD_ATTR("needs 2 inputs");
    if (all_inputs_const(c, n))
        return fold_binary(c, n, op);
    mg_tensor a = T(c, n, 0), b = T(c, n, 1);
    if (a == MG_NO_TENSOR || b == MG_NO_TENSOR)
        return mg_last_status();
    mg_tensor y;
    switch (op) {
    case F_ADD: y = mg_add(c->g, a, b); break;
    case F_SUB: y = mg_sub(c->g, a, b); break;
    case F_MUL: y = mg_mul(c->g, a, b); break;
    case F_DIV: y = mg_div(c->g, a, b); break;
    /* Comparisons and logic give f32 0/1 masks. a - b is 0 only when
     * a == b (subnormals keep distinct floats apart), so these are exact;
     * NaN compares false, and inf == inf gives false (inf - inf is NaN). */
    case F_EQ: y = one_minus(c, mg_is_nonzero(c->g, mg_sub(c->g, a, b))); break;
    case F_LT: y = mg_is_nonzero(c->g, mg_relu(c->g, mg_sub(c->g, b, a))); break;
    case F_GT: y = mg_is_nonzero(c->g, mg_relu(c->g, mg_sub(c->g, a, b))); break;
    case F_AND: y = mg_mul(c->g, a, b); break;
    case F_OR: y = mg_is_nonzero(c->g, mg_add(c->g, a, b)); break;
    default:
        return UNSUP("this op on tensors (only on constants)");
    }
    return out_t(c, n, 0, y);
}

static mg_status op_add(mgi_octx *c, const node_t *n) { return binary(c, n, F_ADD); }
static mg_status op_sub(mgi_octx *c, const node_t *n) { return binary(c, n, F_SUB); }
static mg_status op_mul(mgi_octx *c, const node_t *n) { return binary(c, n, F_MUL); }
static mg_status op_div(mgi_octx *c, const node_t *n) { return binary(c, n, F_DIV); }
static mg_status op_equal(mgi_octx *c, const node_t *n) { return binary(c, n, F_EQ); }
static mg_status op_less(mgi_octx *c, const node_t *n) { return binary(c, n, F_LT); }
static mg_status op_greater(mgi_octx *c, const node_t *n) { return binary(c, n, F_GT); }
static mg_status op_min(mgi_octx *c, const node_t *n) { return binary(c, n, F_MIN); }
static mg_status op_max(mgi_octx *c, const node_t *n) { return binary(c, n, F_MAX); }
static mg_status op_and(mgi_octx *c, const node_t *n) { return binary(c, n, F_AND); }
static mg_status op_or(mgi_octx *c, const node_t *n) { return binary(c, n, F_OR); }

static mg_status op_where(mgi_octx *c, const node_t *n)
{
    if (n->n_input != 3)
        return BAD_ATTR("needs 3 inputs");
    if (all_inputs_const(c, n))
        return fold_where(c, n);
    /* X m + Y (1 - m) with m the condition's 0/1 values: folded into
     * constant operands where the condition is a constant (masks), else a
     * tensor (booleans are f32 0/1, see as_float). Both terms are exact
     * when X and Y are finite, one of them being 0; infinite constant
     * operands become the largest finite float, so that 0 * -inf does not
     * give NaN (after a softmax the two agree). A tensor operand that is
     * infinite or NaN where it is not picked still spoils the sum. */
    mgi_oconst *q = in_const(c, n, 0);
    mgi_oconst *m = NULL, *nm = NULL;
    mg_tensor mt = MG_NO_TENSOR, nmt = MG_NO_TENSOR;
    if (q) {
        m = mgi_onnx_const_new(c, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, true,
                               q->ndim, q->shape);
        nm = mgi_onnx_const_new(c, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, true,
                                q->ndim, q->shape);
        if (!m || !nm)
            return mg_last_status();
        for (int64_t e = 0; e < q->n; e++) {
            m->f[e] = cval(q, e) != 0;
            nm->f[e] = 1.0 - m->f[e];
        }
    } else {
        mt = T(c, n, 0);
        nmt = mt == MG_NO_TENSOR ? mt : one_minus(c, mt);
        if (nmt == MG_NO_TENSOR)
            return out_t(c, n, 0, MG_NO_TENSOR);
    }
    mg_tensor part[2];
    for (int k = 0; k < 2; k++) {
        mgi_oval *v = in(c, n, (size_t)k + 1);
        mgi_oconst *mask = k == 0 ? m : nm;
        if (!v)
            return BAD_ATTR("input %d is missing", k + 1);
        /* A scalar initializer here is a fill value (torch's masked_fill
         * exports -inf so when folding constants), not a weight. */
        const mgi_oconst *vc = v->c ? v->c : v->init && v->init->n == 1 ? v->init : NULL;
        mg_tensor val, mask_t;
        if (vc) {
            mgi_oconst *fin = mgi_onnx_const_new(c, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT,
                                                 true, vc->ndim, vc->shape);
            if (!fin)
                return mg_last_status();
            for (int64_t e = 0; e < fin->n; e++) {
                double x = cval(vc, e);
                fin->f[e] = x > 3.4028234663852886e38 ? 3.4028234663852886e38
                          : x < -3.4028234663852886e38 ? -3.4028234663852886e38 : x;
            }
            if (q) {
                mgi_oconst *prod;
                TRY(fold_consts(c, fin, mask, F_MUL, &prod));
                mgi_oval tmp = {v->name, MG_NO_TENSOR, prod, NULL};
                part[k] = mgi_onnx_tensor(c, &tmp);
                if (part[k] == MG_NO_TENSOR)
                    return out_t(c, n, 0, MG_NO_TENSOR);
                continue;
            }
            mgi_oval tmp = {v->name, MG_NO_TENSOR, fin, NULL};
            val = mgi_onnx_tensor(c, &tmp);
        } else {
            val = T(c, n, (size_t)k + 1);
        }
        if (q) {
            mgi_oval tmp = {v->name, MG_NO_TENSOR, mask, NULL};
            mask_t = mgi_onnx_tensor(c, &tmp);
        } else {
            mask_t = k == 0 ? mt : nmt;
        }
        part[k] = val == MG_NO_TENSOR || mask_t == MG_NO_TENSOR
                      ? MG_NO_TENSOR : mg_mul(c->g, val, mask_t);
        if (part[k] == MG_NO_TENSOR)
            return out_t(c, n, 0, MG_NO_TENSOR);
    }
    return out_t(c, n, 0, mg_add(c->g, part[0], part[1]));
}

static mg_status op_pow(mgi_octx *c, const node_t *n)
{
    if (n->n_input != 2)
        return BAD_ATTR("needs 2 inputs");
    if (all_inputs_const(c, n))
        return fold_binary(c, n, F_POW);
    const mgi_oconst *e = slot_const(c, n, 1);
    mg_tensor x = T(c, n, 0);
    if (x == MG_NO_TENSOR)
        return mg_last_status();
    if (e && e->n == 1) {
        double p = cval(e, 0);
        if (p == 1)
            return out_t(c, n, 0, x);
        if (p == 2)
            return out_t(c, n, 0, mg_mul(c->g, x, x));
        if (p == 3)
            return out_t(c, n, 0, mg_mul(c->g, mg_mul(c->g, x, x), x));
        if (p == 0.5)
            return out_t(c, n, 0, mg_sqrt(c->g, x));
        return out_t(c, n, 0, mg_pow(c->g, x, p));
    }
    return UNSUP("Pow with an exponent that is not a constant scalar");
}

typedef mg_tensor (*unary_fn)(mg_graph *, mg_tensor);

static mg_status unary(mgi_octx *c, const node_t *n, unary_fn f)
{
    mg_tensor x = T(c, n, 0);
    if (x == MG_NO_TENSOR)
        return mg_last_status();
    return out_t(c, n, 0, f(c->g, x));
}

static mg_status fold_unary(mgi_octx *c, const node_t *n, double (*f)(double))
{
    mgi_oconst *a = in_const(c, n, 0);
    mgi_oconst *k = mgi_onnx_const_new(c, a->onnx_type, a->f != NULL, a->ndim, a->shape);
    if (!k)
        return mg_last_status();
    for (int64_t e = 0; e < a->n; e++) {
        if (k->f)
            k->f[e] = a->onnx_type == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT
                          ? (float)f(a->f[e]) : f(a->f[e]);
        else
            k->i[e] = d2i(f((double)a->i[e]));
    }
    return out_c(c, n, 0, k);
}

static double d_neg(double x) { return -x; }
static double d_not(double x) { return x == 0; }

static mg_status op_relu(mgi_octx *c, const node_t *n) { return unary(c, n, mg_relu); }
static mg_status op_sigmoid(mgi_octx *c, const node_t *n) { return unary(c, n, mg_sigmoid); }
static mg_status op_tanh(mgi_octx *c, const node_t *n) { return unary(c, n, mg_tanh); }
static mg_status op_exp(mgi_octx *c, const node_t *n) { return unary(c, n, mg_exp); }
static mg_status op_erf(mgi_octx *c, const node_t *n)
{
    return all_inputs_const(c, n) ? fold_unary(c, n, erf) : unary(c, n, mg_erf);
}
static mg_status op_log(mgi_octx *c, const node_t *n) { return unary(c, n, mg_log); }
static mg_status op_sqrt(mgi_octx *c, const node_t *n)
{
    return all_inputs_const(c, n) ? fold_unary(c, n, sqrt) : unary(c, n, mg_sqrt);
}
static mg_status op_neg(mgi_octx *c, const node_t *n)
{
    return all_inputs_const(c, n) ? fold_unary(c, n, d_neg) : unary(c, n, mg_neg);
}
static mg_status op_floor(mgi_octx *c, const node_t *n)
{
    return all_inputs_const(c, n) ? fold_unary(c, n, floor)
                                  : UNSUP("Floor on tensors (only on constants)");
}
static mg_status op_ceil(mgi_octx *c, const node_t *n)
{
    return all_inputs_const(c, n) ? fold_unary(c, n, ceil)
                                  : UNSUP("Ceil on tensors (only on constants)");
}
static mg_status op_not(mgi_octx *c, const node_t *n)
{
    if (all_inputs_const(c, n))
        return fold_unary(c, n, d_not);
    mg_tensor x = T(c, n, 0);
    return x == MG_NO_TENSOR ? mg_last_status() : out_t(c, n, 0, one_minus(c, x));
}

static mg_status op_leaky_relu(mgi_octx *c, const node_t *n)
{
    mg_tensor x = T(c, n, 0);
    if (x == MG_NO_TENSOR)
        return mg_last_status();
    return out_t(c, n, 0, mg_leaky_relu(c->g, x, attr_f(c, n, "alpha", 0.01)));
}

/* lo + relu(x - lo) - relu(x - hi), with the terms of a missing bound left
 * out: ReLU6 is relu(x) - relu(x - 6). */
static mg_status op_clip(mgi_octx *c, const node_t *n)
{
    double lo = -INFINITY, hi = INFINITY;
    if (c->opset < 11) {
        lo = attr_f(c, n, "min", lo);
        hi = attr_f(c, n, "max", hi);
    } else {
        for (size_t k = 1; k <= 2; k++) {
            if (!in(c, n, k))
                continue;
            const mgi_oconst *b = slot_const(c, n, k);
            if (!b || b->n != 1)
                return UNSUP("Clip bounds that are not constant scalars");
            if (k == 1)
                lo = cval(b, 0);
            else
                hi = cval(b, 0);
        }
    }
    mg_tensor x = T(c, n, 0);
    if (x == MG_NO_TENSOR)
        return mg_last_status();
    mg_graph *g = c->g;
    mg_tensor y = x;
    if (isfinite(lo)) {
        mg_tensor sh = lo == 0 ? x : mg_add(g, x, mg_fill(g, MG_F32, 0, NULL, -lo));
        y = mg_relu(g, sh);
        if (lo != 0)
            y = mg_add(g, y, mg_fill(g, MG_F32, 0, NULL, lo));
    }
    if (isfinite(hi))
        y = mg_sub(g, y, mg_relu(g, mg_add(g, x, mg_fill(g, MG_F32, 0, NULL, -hi))));
    return out_t(c, n, 0, y);
}

/* ------------------------------------------------------------------ nn ops */

static mg_status op_matmul(mgi_octx *c, const node_t *n)
{
    mg_tensor a = T(c, n, 0), b = T(c, n, 1);
    if (a == MG_NO_TENSOR || b == MG_NO_TENSOR)
        return mg_last_status();
    int64_t sa[MG_MAX_DIMS], sb[MG_MAX_DIMS];
    int na = tshape(c, a, sa), nb = tshape(c, b, sb);
    if (na < 2 || nb < 2)
        return UNSUP("MatMul of 1-D operands");
    if (nb > 2 && !(na == nb && memcmp(sa, sb, sizeof(int64_t) * (size_t)(na - 2)) == 0)) {
        /* broadcast the leading dims of both to a common shape */
        int nd;
        int64_t lead[MG_MAX_DIMS], ta[MG_MAX_DIMS], tb[MG_MAX_DIMS];
        if (!bcast(na - 2, sa, nb - 2, sb, &nd, lead))
            return mgi_onnx_node_error(c, MG_ERR_SHAPE, "batch dims do not broadcast");
        memcpy(ta, lead, sizeof(int64_t) * (size_t)nd);
        memcpy(tb, lead, sizeof(int64_t) * (size_t)nd);
        ta[nd] = sa[na - 2], ta[nd + 1] = sa[na - 1];
        tb[nd] = sb[nb - 2], tb[nd + 1] = sb[nb - 1];
        a = mg_broadcast_to(c->g, a, nd + 2, ta);
        b = mg_broadcast_to(c->g, b, nd + 2, tb);
    }
    return out_t(c, n, 0, mg_matmul(c->g, a, b, 0, 0));
}

static mg_status op_gemm(mgi_octx *c, const node_t *n)
{
    mg_tensor a = T(c, n, 0), b = T(c, n, 1);
    if (a == MG_NO_TENSOR || b == MG_NO_TENSOR)
        return mg_last_status();
    double alpha = attr_f(c, n, "alpha", 1.0), beta = attr_f(c, n, "beta", 1.0);
    mg_graph *g = c->g;
    mg_tensor y = mg_matmul(g, a, b, attr_flag(c, n, "transA", false),
                            attr_flag(c, n, "transB", false));
    if (alpha != 1.0)
        y = mg_scale(g, y, alpha);
    if (in(c, n, 2) && beta != 0.0) {
        mg_tensor cc = T(c, n, 2);
        if (cc == MG_NO_TENSOR)
            return mg_last_status();
        if (beta != 1.0)
            cc = mg_scale(g, cc, beta);
        y = mg_add(g, y, cc);
    }
    return out_t(c, n, 0, y);
}

/* pads begin/end per spatial axis from pads/auto_pad (Conv and pools). */
static mg_status spatial_pads(mgi_octx *c, const node_t *n, const int64_t *in_hw,
                              const int64_t *k, const int64_t *s, const int64_t *d,
                              int64_t *pb, int64_t *pe)
{
    char ap[32];
    attr_s(c, n, "auto_pad", "NOTSET", ap, sizeof ap);
    int64_t pads[4] = {0, 0, 0, 0};
    int np = attr_ints(c, n, "pads", pads, 4);
    if (np >= 0 && np != 4)
        return BAD_ATTR("pads must have 4 entries for 2-D");
    for (int q = 0; q < 2; q++) {
        if (strcmp(ap, "SAME_UPPER") == 0 || strcmp(ap, "SAME_LOWER") == 0) {
            int64_t out = (in_hw[q] + s[q] - 1) / s[q];
            int64_t tot = (out - 1) * s[q] + (k[q] - 1) * d[q] + 1 - in_hw[q];
            if (tot < 0)
                tot = 0;
            pb[q] = ap[5] == 'U' ? tot / 2 : tot - tot / 2;
            pe[q] = tot - pb[q];
        } else if (strcmp(ap, "VALID") == 0) {
            pb[q] = pe[q] = 0;
        } else if (strcmp(ap, "NOTSET") == 0 || !ap[0]) {
            pb[q] = pads[q];
            pe[q] = pads[q + 2];
        } else {
            return BAD_ATTR("auto_pad '%s'", ap);
        }
        if (pb[q] < 0 || pe[q] < 0)
            return UNSUP("negative pads");
        if (pb[q] > (1 << 20) || pe[q] > (1 << 20))
            return BAD_ATTR("pads too large");
    }
    return MG_OK;
}

static mg_status hw_attrs(mgi_octx *c, const node_t *n, const char *name,
                          int64_t def, int64_t *out)
{
    int cnt = attr_ints(c, n, name, out, 2);
    if (cnt == -1) {
        out[0] = out[1] = def;
        return MG_OK;
    }
    if (cnt != 2)
        return UNSUP("%s with other than 2 entries (only 2-D)", name);
    if (out[0] < 1 || out[1] < 1 || out[0] > (1 << 20) || out[1] > (1 << 20))
        return BAD_ATTR("bad %s", name);
    return MG_OK;
}

static mg_status op_conv(mgi_octx *c, const node_t *n)
{
    mg_tensor x = T(c, n, 0), w = T(c, n, 1);
    if (x == MG_NO_TENSOR || w == MG_NO_TENSOR)
        return mg_last_status();
    int64_t xs[MG_MAX_DIMS], ws[MG_MAX_DIMS];
    if (tshape(c, x, xs) != 4 || tshape(c, w, ws) != 4)
        return UNSUP("Conv of other than 2-D images (NCHW)");
    int64_t st[2], dl[2], pb[2], pe[2], ks[2] = {ws[2], ws[3]};
    if (ks[0] > (1 << 20) || ks[1] > (1 << 20))
        return UNSUP("kernels larger than 2^20");
    TRY(hw_attrs(c, n, "strides", 1, st));
    TRY(hw_attrs(c, n, "dilations", 1, dl));
    TRY(spatial_pads(c, n, xs + 2, ks, st, dl, pb, pe));
    int64_t groups = attr_i(c, n, "group", 1);
    if (groups < 1 || groups > INT32_MAX)
        return BAD_ATTR("bad group");
    mg_graph *g = c->g;
    if (pb[0] != pe[0] || pb[1] != pe[1]) {
        int64_t b4[4] = {0, 0, pb[0], pb[1]}, e4[4] = {0, 0, pe[0], pe[1]};
        x = mg_pad(g, x, b4, e4);
        pb[0] = pb[1] = 0;
    }
    if (pb[0] > INT32_MAX || pb[1] > INT32_MAX)
        return BAD_ATTR("pads too large");
    mg_tensor y = mg_conv2d(g, x, w, (int)st[0], (int)st[1], (int)pb[0],
                            (int)pb[1], (int)dl[0], (int)dl[1], (int)groups);
    if (in(c, n, 2) && y != MG_NO_TENSOR) {
        mg_tensor b = T(c, n, 2);
        if (b == MG_NO_TENSOR)
            return mg_last_status();
        int64_t bs[3] = {ws[0], 1, 1};
        y = mg_add(g, y, mg_reshape(g, b, 3, bs));
    }
    return out_t(c, n, 0, y);
}

static mg_status op_pool(mgi_octx *c, const node_t *n, bool is_max)
{
    mg_tensor x = T(c, n, 0);
    if (x == MG_NO_TENSOR)
        return mg_last_status();
    if (n->n_output > 1 && mgi_onnx_is_read(c, n->output[1]))
        return UNSUP("MaxPool's Indices output");
    int64_t xs[MG_MAX_DIMS];
    if (tshape(c, x, xs) != 4)
        return UNSUP("pooling of other than 2-D images (NCHW)");
    int64_t ks[2], st[2], dl[2], pb[2], pe[2];
    if (attr_ints(c, n, "kernel_shape", ks, 2) != 2)
        return UNSUP("kernel_shape with other than 2 entries (only 2-D)");
    if (ks[0] < 1 || ks[1] < 1 || ks[0] > (1 << 20) || ks[1] > (1 << 20))
        return BAD_ATTR("bad kernel_shape");
    TRY(hw_attrs(c, n, "strides", 1, st));
    TRY(hw_attrs(c, n, "dilations", 1, dl));
    if (dl[0] != 1 || dl[1] != 1)
        return UNSUP("dilated pooling");
    TRY(spatial_pads(c, n, xs + 2, ks, st, dl, pb, pe));
    /* ceil_mode, each side's pads and count_include_pad (ONNX's default 0)
     * are the builder's own: ONNX's rules are PyTorch's (mg_pool2d_opts) */
    int64_t ceil_mode = attr_i(c, n, "ceil_mode", 0);
    int64_t cip = attr_i(c, n, "count_include_pad", 0);
    if ((ceil_mode != 0 && ceil_mode != 1) || (cip != 0 && cip != 1))
        return BAD_ATTR("ceil_mode and count_include_pad must be 0 or 1");
    if (ks[0] > INT32_MAX || ks[1] > INT32_MAX || st[0] > INT32_MAX ||
        st[1] > INT32_MAX || pb[0] > INT32_MAX || pb[1] > INT32_MAX ||
        pe[0] > INT32_MAX || pe[1] > INT32_MAX)
        return BAD_ATTR("sizes too large");
    const mg_pool2d_opts o = {
        .kernel_h = (int)ks[0], .kernel_w = (int)ks[1],
        .stride_h = (int)st[0], .stride_w = (int)st[1],
        .pad_top = (int)pb[0], .pad_left = (int)pb[1],
        .pad_bottom = (int)pe[0], .pad_right = (int)pe[1],
        .ceil_mode = (int)ceil_mode, .count_include_pad = (int)cip};
    mg_tensor y = is_max ? mg_max_pool2d_ex(c->g, x, &o)
                         : mg_avg_pool2d_ex(c->g, x, &o);
    return out_t(c, n, 0, y);
}

static mg_status op_maxpool(mgi_octx *c, const node_t *n) { return op_pool(c, n, true); }
static mg_status op_avgpool(mgi_octx *c, const node_t *n) { return op_pool(c, n, false); }

static mg_status op_global_avgpool(mgi_octx *c, const node_t *n)
{
    mg_tensor x = T(c, n, 0);
    if (x == MG_NO_TENSOR)
        return mg_last_status();
    int64_t xs[MG_MAX_DIMS];
    int nd = tshape(c, x, xs);
    if (nd < 3)
        return BAD_ATTR("input of rank %d", nd);
    int axes[MG_MAX_DIMS];
    for (int d = 2; d < nd; d++)
        axes[d - 2] = d;
    return out_t(c, n, 0, mg_mean(c->g, x, nd - 2, axes, 1));
}

static mg_status op_batchnorm(mgi_octx *c, const node_t *n)
{
    mg_tensor x = T(c, n, 0), sc = T(c, n, 1), b = T(c, n, 2);
    if (x == MG_NO_TENSOR || sc == MG_NO_TENSOR || b == MG_NO_TENSOR)
        return mg_last_status();
    double eps = attr_eps(c, n);
    /* opsets 7-8: spatial 0 normalises each element over the batch */
    if (!attr_flag(c, n, "spatial", true))
        return UNSUP("BatchNormalization with spatial 0");
    mg_graph *g = c->g;
    for (size_t k = 1; k < n->n_output; k++)
        if (mgi_onnx_is_read(c, n->output[k]))
            return UNSUP("BatchNormalization's running statistics outputs");
    if (c->opts.training)
        return out_t(c, n, 0, mg_batchnorm(g, x, sc, b, eps));
    /* inference: y = x * s + (b - mean * s), s = scale / sqrt(var + eps) */
    mg_tensor mean = T(c, n, 3), var = T(c, n, 4);
    if (mean == MG_NO_TENSOR || var == MG_NO_TENSOR)
        return mg_last_status();
    int64_t xs[MG_MAX_DIMS];
    int nd = tshape(c, x, xs);
    if (nd < 2)
        return BAD_ATTR("input of rank %d", nd);
    int64_t cs[MG_MAX_DIMS];
    cs[0] = xs[1];
    for (int d = 1; d < nd - 1; d++)
        cs[d] = 1;
    mg_tensor s = mg_div(g, sc, mg_sqrt(g, mg_add(g, var, mg_fill(g, MG_F32, 0, NULL, eps))));
    mg_tensor sh = mg_sub(g, b, mg_mul(g, mean, s));
    mg_tensor y = mg_add(g, mg_mul(g, x, mg_reshape(g, s, nd - 1, cs)),
                         mg_reshape(g, sh, nd - 1, cs));
    return out_t(c, n, 0, y);
}

static mg_status op_layernorm(mgi_octx *c, const node_t *n)
{
    mg_tensor x = T(c, n, 0), sc = T(c, n, 1);
    if (x == MG_NO_TENSOR || sc == MG_NO_TENSOR)
        return mg_last_status();
    for (size_t k = 1; k < n->n_output; k++)
        if (mgi_onnx_is_read(c, n->output[k]))
            return UNSUP("LayerNormalization's Mean and InvStdDev outputs");
    int64_t xs[MG_MAX_DIMS], ss[MG_MAX_DIMS];
    int nd = tshape(c, x, xs);
    int64_t axis = attr_i(c, n, "axis", -1);
    if (!norm_axis(&axis, nd))
        return BAD_ATTR("bad axis");
    mg_tensor b;
    if (in(c, n, 2)) {
        b = T(c, n, 2);
    } else {
        int ns = tshape(c, sc, ss);
        b = mg_fill(c->g, MG_F32, ns, ss, 0.0);
    }
    if (b == MG_NO_TENSOR)
        return out_t(c, n, 0, b);
    return out_t(c, n, 0, mg_layernorm(c->g, x, sc, b, nd - (int)axis,
                                       attr_eps(c, n)));
}

static mg_status softmax_like(mgi_octx *c, const node_t *n, bool log)
{
    mg_tensor x = T(c, n, 0);
    if (x == MG_NO_TENSOR)
        return mg_last_status();
    int64_t xs[MG_MAX_DIMS];
    int nd = tshape(c, x, xs);
    int64_t axis = attr_i(c, n, "axis", c->opset >= 13 ? -1 : 1);
    if (!norm_axis(&axis, nd))
        return BAD_ATTR("bad axis");
    mg_graph *g = c->g;
    if (c->opset < 13 && axis != nd - 1) {
        /* before opset 13: over the flattened axis.. dims */
        int64_t s2[2] = {1, 1};
        for (int d = 0; d < nd; d++)
            s2[d < axis ? 0 : 1] *= xs[d];
        mg_tensor f = mg_reshape(g, x, 2, s2);
        f = log ? mg_log_softmax(g, f, 1) : mg_softmax(g, f, 1);
        return out_t(c, n, 0, mg_reshape(g, f, nd, xs));
    }
    return out_t(c, n, 0, log ? mg_log_softmax(g, x, (int)axis)
                              : mg_softmax(g, x, (int)axis));
}

static mg_status op_softmax(mgi_octx *c, const node_t *n) { return softmax_like(c, n, false); }
static mg_status op_log_softmax(mgi_octx *c, const node_t *n) { return softmax_like(c, n, true); }

static mg_status op_dropout(mgi_octx *c, const node_t *n)
{
    mg_tensor x = T(c, n, 0);
    if (x == MG_NO_TENSOR)
        return mg_last_status();
    if (n->n_output > 1 && mgi_onnx_is_read(c, n->output[1]))
        return UNSUP("Dropout's mask output");
    double ratio = attr_f(c, n, "ratio", 0.5);
    if (in(c, n, 1)) {
        const mgi_oconst *r = slot_const(c, n, 1);
        if (!r || r->n != 1)
            return UNSUP("a ratio that is not a constant scalar");
        ratio = cval(r, 0);
    }
    if (!(ratio >= 0 && ratio < 1))
        return BAD_ATTR("ratio %g (at least 0, below 1)", ratio);
    if (!c->opts.training || ratio == 0.0)
        return out_t(c, n, 0, x);
    return out_t(c, n, 0, mg_dropout(c->g, x, ratio, c->next_seed++));
}

static mg_status reduce(mgi_octx *c, const node_t *n, bool mean)
{
    mg_tensor x = T(c, n, 0);
    if (x == MG_NO_TENSOR)
        return mg_last_status();
    int64_t ax64[MG_MAX_DIMS];
    int na = attr_ints(c, n, "axes", ax64, MG_MAX_DIMS);
    if (na == -1 && ((!mean && c->opset >= 13) || c->opset >= 18))
        na = const_ints(c, n, 1, ax64, MG_MAX_DIMS);
    if (na == -2)
        return UNSUP("axes that are not a constant");
    bool keep = attr_flag(c, n, "keepdims", true);
    if (na <= 0 && attr_flag(c, n, "noop_with_empty_axes", false))
        return out_t(c, n, 0, x);
    int axes[MG_MAX_DIMS];
    for (int k = 0; k < na; k++)
        axes[k] = (int)(ax64[k] < -64 || ax64[k] > 64 ? 64 : ax64[k]);
    na = na < 0 ? 0 : na;
    return out_t(c, n, 0, mean ? mg_mean(c->g, x, na, axes, keep)
                               : mg_sum(c->g, x, na, axes, keep));
}

static mg_status op_reduce_mean(mgi_octx *c, const node_t *n) { return reduce(c, n, true); }
static mg_status op_reduce_sum(mgi_octx *c, const node_t *n) { return reduce(c, n, false); }

static mg_status op_pad(mgi_octx *c, const node_t *n)
{
    char mode[32];
    attr_s(c, n, "mode", "constant", mode, sizeof mode);
    if (strcmp(mode, "constant") != 0)
        return UNSUP("Pad mode '%s' (only constant)", mode);
    mg_tensor x = T(c, n, 0);
    if (x == MG_NO_TENSOR)
        return mg_last_status();
    int64_t xs[MG_MAX_DIMS], pads[2 * MG_MAX_DIMS], axes[MG_MAX_DIMS];
    int nd = tshape(c, x, xs);
    int np = c->opset < 11 ? attr_ints(c, n, "pads", pads, 2 * MG_MAX_DIMS)
                           : const_ints(c, n, 1, pads, 2 * MG_MAX_DIMS);
    double value = c->opset < 11 ? attr_f(c, n, "value", 0.0) : 0.0;
    const mgi_oconst *cv = c->opset >= 11 ? slot_const(c, n, 2) : NULL;
    if (c->opset >= 11 && in(c, n, 2) && (!cv || cv->n != 1))
        return UNSUP("a pad value that is not a constant scalar");
    if (cv)
        value = cval(cv, 0);
    if (value != 0.0)
        return UNSUP("a pad value other than 0");
    int na = const_ints(c, n, 3, axes, MG_MAX_DIMS);
    if (na == -2)
        return UNSUP("axes that are not a constant");
    if (na < 0) {
        na = nd;
        for (int d = 0; d < nd; d++)
            axes[d] = d;
    }
    if (np != 2 * na)
        return BAD_ATTR("pads has %d entries for %d axes", np, na);
    int64_t b[MG_MAX_DIMS] = {0}, e[MG_MAX_DIMS] = {0};
    for (int k = 0; k < na; k++) {
        int64_t a = axes[k];
        if (!norm_axis(&a, nd))
            return BAD_ATTR("bad axis");
        if (pads[k] < 0 || pads[k + na] < 0)
            return UNSUP("negative pads");
        b[a] = pads[k];
        e[a] = pads[k + na];
    }
    return out_t(c, n, 0, mg_pad(c->g, x, b, e));
}

/* Nearest upsampling by integer factors: [N,C,H,W] -> [N,C,H,1,W,1] ->
 * broadcast [N,C,H,sh,W,sw] -> [N,C,H sh,W sw]. */
static mg_status op_resize(mgi_octx *c, const node_t *n)
{
    char mode[32];
    attr_s(c, n, "mode", "nearest", mode, sizeof mode);
    if (strcmp(mode, "nearest") != 0)
        return UNSUP("Resize mode '%s' (only nearest)", mode);
    /* opset 18's additions change what is computed when set */
    char policy[32];
    attr_s(c, n, "keep_aspect_ratio_policy", "stretch", policy, sizeof policy);
    if (attr_i(c, n, "antialias", 0) != 0 || attr_any(n, "axes") ||
        strcmp(policy, "stretch") != 0)
        return UNSUP("Resize with antialias, axes or a keep_aspect_ratio_policy");
    mg_tensor x = T(c, n, 0);
    if (x == MG_NO_TENSOR)
        return mg_last_status();
    int64_t xs[MG_MAX_DIMS];
    int nd = tshape(c, x, xs);
    if (nd != 4)
        return UNSUP("Resize of other than 4-D");
    double sc[4] = {0};
    const mgi_oconst *k = NULL;
    if (strcmp(S(n->op_type), "Upsample") == 0) {
        const Onnx__AttributeProto *a = attr(c, n, "scales", AT(FLOATS));
        if (a && a->n_floats == 4)
            for (int q = 0; q < 4; q++)
                sc[q] = a->floats[q];
        else
            k = slot_const(c, n, 1);
    } else {
        k = c->opset < 11 ? slot_const(c, n, 1) : slot_const(c, n, 2);
        if ((!k || k->n == 0) && c->opset >= 11) {
            const mgi_oconst *sz = slot_const(c, n, 3);
            if (sz && sz->n == 4)
                for (int q = 0; q < 4; q++)
                    sc[q] = cval(sz, q) / (double)xs[q];
            k = NULL;
        }
    }
    if (k && k->n == 4)
        for (int q = 0; q < 4; q++)
            sc[q] = cval(k, q);
    int64_t f[4];
    for (int q = 0; q < 4; q++) {
        f[q] = d2i(sc[q]);
        if (sc[q] != (double)f[q] || f[q] < 1 || f[q] > 4096 || (q < 2 && f[q] != 1))
            return UNSUP("scales other than constant integers on H and W");
    }
    /* checked before multiplying: a [1,1,2^52,1] input scaled by 4096
     * overflows int64 */
    for (int q = 2; q < 4; q++)
        if (xs[q] > INT64_MAX / f[q])
            return mgi_onnx_node_error(c, MG_ERR_SHAPE,
                                       "output dim %d (%lld x %lld) is too "
                                       "large", q, (long long)xs[q],
                                       (long long)f[q]);
    mg_graph *g = c->g;
    int64_t s6[6] = {xs[0], xs[1], xs[2], 1, xs[3], 1};
    int64_t b6[6] = {xs[0], xs[1], xs[2], f[2], xs[3], f[3]};
    int64_t o4[4] = {xs[0], xs[1], xs[2] * f[2], xs[3] * f[3]};
    mg_tensor y = mg_reshape(g, x, 6, s6);
    y = mg_broadcast_to(g, y, 6, b6);
    return out_t(c, n, 0, mg_reshape(g, y, 4, o4));
}

/* Gelu (opset 20): the tanh form is mg_gelu; the exact one
 * 0.5 x (1 + erf(x / sqrt 2)), as torch exports it before opset 20. */
static mg_status op_gelu(mgi_octx *c, const node_t *n)
{
    char ap[16];
    attr_s(c, n, "approximate", "none", ap, sizeof ap);
    if (strcmp(ap, "tanh") == 0)
        return unary(c, n, mg_gelu);
    if (strcmp(ap, "none") != 0)
        return BAD_ATTR("approximate '%s'", ap);
    mg_tensor x = T(c, n, 0);
    if (x == MG_NO_TENSOR)
        return mg_last_status();
    mg_graph *g = c->g;
    mg_tensor e = mg_erf(g, mg_scale(g, x, 0.70710678118654752440));
    return out_t(c, n, 0, mg_mul(g, mg_scale(g, x, 0.5),
                                 mg_add(g, e, mg_fill(g, MG_F32, 0, NULL, 1.0))));
}

/* ------------------------------------------------------------------ table */

typedef mg_status (*conv_fn)(mgi_octx *, const node_t *);
static const struct {
    const char *op;
    conv_fn fn;
} OPS[] = {
    {"Add", op_add}, {"And", op_and}, {"AveragePool", op_avgpool},
    {"BatchNormalization", op_batchnorm}, {"Cast", op_cast}, {"Ceil", op_ceil},
    {"Clip", op_clip}, {"Concat", op_concat}, {"Constant", op_constant},
    {"ConstantOfShape", op_constant_of_shape}, {"Conv", op_conv},
    {"Div", op_div}, {"Dropout", op_dropout}, {"Equal", op_equal},
    {"Erf", op_erf},
    {"Exp", op_exp}, {"Expand", op_expand}, {"Flatten", op_flatten},
    {"Floor", op_floor}, {"Gather", op_gather}, {"Gelu", op_gelu},
    {"Gemm", op_gemm}, {"GlobalAveragePool", op_global_avgpool},
    {"Greater", op_greater}, {"Identity", op_identity},
    {"LayerNormalization", op_layernorm}, {"LeakyRelu", op_leaky_relu},
    {"Less", op_less}, {"Log", op_log}, {"LogSoftmax", op_log_softmax},
    {"MatMul", op_matmul}, {"Max", op_max}, {"MaxPool", op_maxpool},
    {"Min", op_min}, {"Mul", op_mul}, {"Neg", op_neg}, {"Not", op_not},
    {"Or", op_or}, {"Pad", op_pad}, {"Pow", op_pow}, {"Range", op_range},
    {"ReduceMean", op_reduce_mean}, {"ReduceSum", op_reduce_sum},
    {"Relu", op_relu}, {"Reshape", op_reshape}, {"Resize", op_resize},
    {"Shape", op_shape}, {"Sigmoid", op_sigmoid}, {"Slice", op_slice},
    {"Softmax", op_softmax}, {"Split", op_split}, {"Sqrt", op_sqrt},
    {"Squeeze", op_squeeze}, {"Sub", op_sub}, {"Tanh", op_tanh},
    {"Transpose", op_transpose}, {"Unsqueeze", op_unsqueeze},
    {"Upsample", op_resize}, {"Where", op_where},
};

mg_status mgi_onnx_convert_node(mgi_octx *c, const node_t *n)
{
    const char *dom = S(n->domain);
    for (size_t k = 0; k < n->n_input; k++)
        if (n->input[k][0] && !mgi_onnx_lookup(c, n->input[k]))
            return mgi_onnx_node_error(c, MG_ERR_UNKNOWN_ID,
                                       "input '%s' is not defined", n->input[k]);
    if (!dom[0] || strcmp(dom, "ai.onnx") == 0) {
        for (size_t k = 0; k < sizeof OPS / sizeof OPS[0]; k++)
            if (strcmp(OPS[k].op, S(n->op_type)) == 0) {
                c->attr_err[0] = '\0';
                mg_status s = OPS[k].fn(c, n);
                /* a bad attribute is the first thing wrong with the node,
                 * whatever the converter made of the default it got */
                if (c->attr_err[0])
                    return BAD_ATTR("%s", c->attr_err);
                return s;
            }
    }
    return mgi_onnx_node_error(c, MG_ERR_UNSUPPORTED, "unsupported op");
}
