/*
 * onnx_ops.c - finds a node's converter and reports what it makes of the
 * node. The converters and the ONNX op types they convert are the
 * MG_ONNX_OP rows of src/frontends/op_map.def, the table the PyTorch bridge
 * is held to as well; the converters sit in files by op family, as
 * graph/ops_*.c do:
 *
 *   onnx_ops_common.c       inputs, outputs and attributes of a node
 *   onnx_ops_fold.c         import-time evaluation of constants
 *   onnx_ops_const.c        Constant, ConstantOfShape, Range, Cast
 *   onnx_ops_shape.c        Shape, Reshape, (Un)Squeeze, Flatten, Identity,
 *                           Transpose, Expand
 *   onnx_ops_slice.c        Concat, Gather, Slice, Split, Pad
 *   onnx_ops_elementwise.c  binary and unary elementwise ops, Where, Pow,
 *                           Clip, Gelu
 *   onnx_ops_matmul.c       MatMul, Gemm
 *   onnx_ops_conv.c         Conv, pools, Resize/Upsample
 *   onnx_ops_norm.c         BatchNormalization, LayerNormalization,
 *                           (Log)Softmax, Dropout, ReduceMean, ReduceSum
 */
#include <string.h>

#include "onnx_ops.h"

static const struct {
    const char *op_type;
    mgi_onnx_convert_fn fn;
} converters[] = {
#define MG_ONNX_OP(type, fn, mg_ops, torch) {#type, fn},
#include "frontends/op_map.def"
};

#define N_CONVERTERS (sizeof converters / sizeof *converters)

static const char *const op_types[N_CONVERTERS + 1] = {
#define MG_ONNX_OP(type, fn, mg_ops, torch) #type,
#include "frontends/op_map.def"
    NULL};

const char *const *mg_onnx_op_types(void) { return op_types; }

mg_status mgi_onnx_convert_node(mgi_octx *c, const node_t *n) {
    const char *dom = S(n->domain);
    for (size_t k = 0; k < n->n_input; k++)
        if (n->input[k][0] && !mgi_onnx_lookup(c, n->input[k]))
            return mgi_onnx_node_error(
                c, MG_ERR_UNKNOWN_ID, "input '%s' is not defined", n->input[k]);
    if (!dom[0] || strcmp(dom, "ai.onnx") == 0) {
        for (size_t k = 0; k < N_CONVERTERS; k++) {
            if (strcmp(converters[k].op_type, S(n->op_type)) != 0) continue;
            c->attr_err[0] = '\0';
            mg_status s = converters[k].fn(c, n);
            /* a bad attribute is the first thing wrong with the node,
             * whatever the converter made of the default it got */
            if (c->attr_err[0]) return BAD_ATTR("%s", c->attr_err);
            return s;
        }
    }
    return mgi_onnx_node_error(c, MG_ERR_UNSUPPORTED, "unsupported op");
}
