/*
 * widen.c - the byte counts of widen.h: which ops run on float32 copies of
 * their 16-bit tensors and how many bytes those copies take.
 */
#include "widen.h"

static bool any_half(int n_in, const mg_tdesc *in, const mg_tdesc *out) {
    if (mgi_dtype_is_half(out->dtype)) return true;
    for (int i = 0; i < n_in; i++)
        if (mgi_dtype_is_half(in[i].dtype)) return true;
    return false;
}

/* Ops whose CPU kernels move bytes by the element size, whatever the
 * dtype (cpu_slice.c, cpu_shape.c's reshape, cpu_embedding.c's forward):
 * they run on the 16-bit data as it is, bits kept exactly. */
static bool moves_bytes(mg_op op) {
    switch (op) {
    case MG_OP_RESHAPE: case MG_OP_SLICE: case MG_OP_PAD: case MG_OP_CONCAT:
    case MG_OP_EMBEDDING: return true;
    default: return false;
    }
}

bool mgi_widen_needed(mg_op op, int n_in, const mg_tdesc *in,
                      const mg_tdesc *out) {
    return op != MG_OP_CAST && op != MG_OP_INPUT && op != MG_OP_PARAM &&
           !moves_bytes(op) && any_half(n_in, in, out);
}

/* Ops whose value at an element depends on the inputs at that element
 * alone (not on its index, as dropout's mask does): kernel_shared.h's
 * MG_UNARY_OPS, MG_BINARY_OPS and MG_COMPARE_OPS and cpu_compare.c's
 * others. tests/test_half.c holds this list to those. */
static bool elementwise(mg_op op) {
    switch (op) {
    case MG_OP_NEG: case MG_OP_RELU: case MG_OP_GELU: case MG_OP_SILU:
    case MG_OP_TANH: case MG_OP_SIGMOID: case MG_OP_EXP: case MG_OP_LOG:
    case MG_OP_SQRT: case MG_OP_ERF: case MG_OP_POW: case MG_OP_LEAKY_RELU:
    case MG_OP_RECIPROCAL: case MG_OP_RSQRT: case MG_OP_SIN: case MG_OP_COS:
    case MG_OP_ABS: case MG_OP_IS_NONZERO: case MG_OP_SCALE:
    case MG_OP_ADD: case MG_OP_SUB: case MG_OP_MUL: case MG_OP_DIV:
    case MG_OP_RELU_GRAD: case MG_OP_GELU_GRAD: case MG_OP_SILU_GRAD:
    case MG_OP_TANH_GRAD: case MG_OP_SIGMOID_GRAD: case MG_OP_ABS_GRAD:
    case MG_OP_MAXIMUM: case MG_OP_MINIMUM:
    case MG_OP_EQ: case MG_OP_NE: case MG_OP_LT: case MG_OP_LE: case MG_OP_GT:
    case MG_OP_GE: case MG_OP_LOGICAL_AND: case MG_OP_LOGICAL_OR:
    case MG_OP_LOGICAL_NOT: case MG_OP_WHERE: case MG_OP_CLAMP:
    case MG_OP_CLAMP_GRAD: return true;
    default: return false;
    }
}

bool mgi_widen_blockwise(mg_op op, int n_in, const mg_tdesc *in,
                         const mg_tdesc *out) {
    if (!elementwise(op)) return false;
    for (int i = 0; i < n_in; i++)
        if (!mgi_tdesc_same_shape(&in[i], out)) return false;
    return true;
}

static size_t copy_bytes(const mg_tdesc *d) {
    if (!mgi_dtype_is_half(d->dtype)) return 0;
    const mg_tdesc f = mgi_widen_desc(d);
    const size_t n = mgi_tdesc_nbytes(&f);
    if (n > SIZE_MAX - MGI_WIDEN_ALIGN) return SIZE_MAX;
    return (n + MGI_WIDEN_ALIGN - 1) / MGI_WIDEN_ALIGN * MGI_WIDEN_ALIGN;
}

size_t mgi_widen_bytes(mg_op op, int n_in, const mg_tdesc *in,
                       const mg_tdesc *out) {
    if (!mgi_widen_needed(op, n_in, in, out) ||
        mgi_widen_blockwise(op, n_in, in, out))
        return 0;
    size_t total = copy_bytes(out);
    for (int i = 0; i < n_in && total != SIZE_MAX; i++) {
        const size_t c = copy_bytes(&in[i]);
        total = c > SIZE_MAX - total ? SIZE_MAX : total + c;
    }
    return total;
}

mg_tdesc mgi_widen_desc(const mg_tdesc *d) {
    mg_tdesc f = *d;
    if (mgi_dtype_is_half(f.dtype)) f.dtype = MG_F32;
    return f;
}
