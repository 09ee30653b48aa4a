/*
 * onnx_ops.h - private to the ONNX converter files (onnx_ops*.c): the
 * helpers they share (onnx_ops_common.c, onnx_ops_fold.c), the error
 * macros, and the converters' declarations (from src/frontends/op_map.def).
 *
 * Constants are kept as doubles or int64s; a constant that a tensor op reads
 * becomes a tensor through mgi_onnx_tensor (a fill if uniform, otherwise an
 * input bound to data the model handle owns).
 */
#ifndef MG_ONNX_OPS_H
#define MG_ONNX_OPS_H

#include "onnx_internal.h"

#define S(x) ((x) ? (x) : "")
#define AT(x) ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__##x
typedef Onnx__NodeProto node_t;

/* Errors about the node being converted (the converters' c). */
#define BAD_ATTR(...) mgi_onnx_node_error(c, MG_ERR_INVALID_ARG, __VA_ARGS__)
#define UNSUP(...) mgi_onnx_node_error(c, MG_ERR_UNSUPPORTED, __VA_ARGS__)
#define TRY(expr)                                                              \
    do {                                                                       \
        mg_status s_ = (expr);                                                 \
        if (s_) return s_;                                                     \
    } while (0)

/* A converter: builder calls (or folding) for node n's outputs. One per
 * MG_ONNX_OP row of src/frontends/op_map.def, which declares them here and
 * is the importer's dispatch list (onnx_ops.c). A converter defined without
 * its row has no prototype, which -Wmissing-prototypes reports below. */
typedef mg_status (*mgi_onnx_convert_fn)(mgi_octx *c, const node_t *n);
#define MG_ONNX_OP(type, fn, mg_ops, torch)                                    \
    mg_status fn(mgi_octx *c, const node_t *n);
#include "frontends/op_map.def"
#if defined(__GNUC__)
#pragma GCC diagnostic warning "-Wmissing-prototypes"
#endif

/* ---- onnx_ops_common.c: inputs and outputs ------------------------------- */

/* Input k's value, or NULL if absent (past the inputs, or named ""). */
mgi_oval *mgi_onnx_in(mgi_octx *c, const node_t *n, size_t k);
/* Input k's constant, or NULL. */
mgi_oconst *mgi_onnx_in_const(mgi_octx *c, const node_t *n, size_t k);
/* Input k where an op wants a constant (a shape, axes, a bound): a
 * constant, or a parameter's initial data. */
const mgi_oconst *mgi_onnx_slot_const(mgi_octx *c, const node_t *n, size_t k);
/* An integer tensor as f32 (cast once per tensor); other tensors as they
 * are. */
mg_tensor mgi_onnx_as_float(mgi_octx *c, mg_tensor t);
/* Input k as a float tensor; an error (already recorded) gives
 * MG_NO_TENSOR. */
mg_tensor mgi_onnx_float_in(mgi_octx *c, const node_t *n, size_t k);
/* 1 - x, for a 0/1 mask x: logical not. */
mg_tensor mgi_onnx_one_minus(mgi_octx *c, mg_tensor x);
/* t's dtype (MG_F32 for an invalid t): the converters' own constants
 * (an epsilon, a missing bias) take their operand's, 16-bit ones too. */
mg_dtype mgi_onnx_dtype_of(mgi_octx *c, mg_tensor t);
/* Output k is tensor t; a builder's MG_NO_TENSOR becomes an error naming
 * the node. */
mg_status mgi_onnx_out(mgi_octx *c, const node_t *n, size_t k, mg_tensor t);
/* Output k is constant kc (NULL: the error of whatever made it). */
mg_status mgi_onnx_out_const(mgi_octx *c, const node_t *n, size_t k,
                             mgi_oconst *kc);

/* ---- onnx_ops_common.c: attributes --------------------------------------- */

const Onnx__AttributeProto *mgi_onnx_attr_any(const node_t *n,
                                              const char *name);
/* Attribute `name` if the node has it with the given type; one of another
 * type, or without its value, is recorded as bad (and NULL returned). The
 * readers below give def where it is absent or bad. */
const Onnx__AttributeProto *
mgi_onnx_attr(mgi_octx *c, const node_t *n, const char *name,
              Onnx__AttributeProto__AttributeType type);
int64_t mgi_onnx_attr_i(mgi_octx *c, const node_t *n, const char *name,
                        int64_t def);
/* An int attribute that is a flag: 0 or 1. */
bool mgi_onnx_attr_flag(mgi_octx *c, const node_t *n, const char *name,
                        bool def);
double mgi_onnx_attr_f(mgi_octx *c, const node_t *n, const char *name,
                       double def);
/* A normalisation's epsilon: finite and not negative. */
double mgi_onnx_attr_eps(mgi_octx *c, const node_t *n);
/* A string attribute, copied into buf. */
void mgi_onnx_attr_s(mgi_octx *c, const node_t *n, const char *name,
                     const char *def, char *buf, size_t len);
/* An ints attribute: its count (-1 if absent; -2 if more than max). */
int mgi_onnx_attr_ints(mgi_octx *c, const node_t *n, const char *name,
                       int64_t *out, int max);
/* Integer values of a constant input (axes, shapes, pads): count, or -1 if
 * the input is absent, -2 if it is not a constant or has more than max. */
int mgi_onnx_const_ints(mgi_octx *c, const node_t *n, size_t k, int64_t *out,
                        int max);

/* ---- onnx_ops_common.c: small conversions -------------------------------- */

/* Tensor t's rank, its dims into shape; -1 on error. */
int mgi_onnx_tshape(mgi_octx *c, mg_tensor t, int64_t *shape);
/* A double as an int64, saturating (NaN gives 0). */
int64_t mgi_onnx_d2i(double x);
/* Element e of constant k as a double. */
double mgi_onnx_cval(const mgi_oconst *k, int64_t e);
/* A negative axis counts from the end; false if out of [0, ndim). */
bool mgi_onnx_norm_axis(int64_t *axis, int ndim);
/* The number of elements of a shape. */
int64_t mgi_onnx_numel(int nd, const int64_t *shape);

/* ---- onnx_ops_fold.c ----------------------------------------------------- */

typedef enum {
    F_ADD,
    F_SUB,
    F_MUL,
    F_DIV,
    F_EQ,
    F_LT,
    F_GT,
    F_POW,
    F_MIN,
    F_MAX,
    F_AND,
    F_OR
} fold_op;

/* numpy broadcast of two shapes into (nd, out); false if they do not. */
bool mgi_onnx_bcast(int na, const int64_t *a, int nb, const int64_t *b, int *nd,
                    int64_t *out);
/* Offset in k of the output multi-index idx (rank nd), broadcasting. */
int64_t mgi_onnx_boff(const mgi_oconst *k, int nd, const int64_t *idx);
/* The next multi-index of a shape, in row-major order. */
void mgi_onnx_next_idx(int nd, const int64_t *shape, int64_t *idx);
/* a op b, broadcast, into a new constant *out. */
mg_status mgi_onnx_fold_consts(mgi_octx *c, const mgi_oconst *a,
                               const mgi_oconst *b, fold_op op,
                               mgi_oconst **out);
/* A binary node, or Where, whose inputs are all constants. */
mg_status mgi_onnx_fold_binary(mgi_octx *c, const node_t *n, fold_op op);
mg_status mgi_onnx_fold_where(mgi_octx *c, const node_t *n);
/* A constant with k's data and a new shape (NULL, with an error, if the
 * element counts differ). */
mgi_oconst *mgi_onnx_const_reshaped(mgi_octx *c, const mgi_oconst *k, int nd,
                                    const int64_t *shape);
/* The shape of input k, tensor or constant: its rank, or -1 if absent. */
int mgi_onnx_in_shape(mgi_octx *c, const node_t *n, size_t k, int64_t *shape);

#endif
