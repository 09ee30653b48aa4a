/*
 * onnx_ops.c - one converter per ONNX op, split by op family as
 * graph/ops_*.c are: each onnx_ops_<family>.c lists the ops it converts
 * (mgi_onnx_ops_<family>), and this file finds a node's converter in those
 * lists and reports what it makes of the node.
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

static const mgi_onnx_op *const families[] = {
    mgi_onnx_ops_const,       mgi_onnx_ops_shape,  mgi_onnx_ops_slice,
    mgi_onnx_ops_elementwise, mgi_onnx_ops_matmul, mgi_onnx_ops_conv,
    mgi_onnx_ops_norm};

mg_status mgi_onnx_convert_node(mgi_octx *c, const node_t *n) {
    const char *dom = S(n->domain);
    for (size_t k = 0; k < n->n_input; k++)
        if (n->input[k][0] && !mgi_onnx_lookup(c, n->input[k]))
            return mgi_onnx_node_error(
                c, MG_ERR_UNKNOWN_ID, "input '%s' is not defined", n->input[k]);
    if (!dom[0] || strcmp(dom, "ai.onnx") == 0) {
        for (size_t f = 0; f < sizeof families / sizeof *families; f++)
            for (const mgi_onnx_op *o = families[f]; o->op_type; o++) {
                if (strcmp(o->op_type, S(n->op_type)) != 0) continue;
                c->attr_err[0] = '\0';
                mg_status s = o->fn(c, n);
                /* a bad attribute is the first thing wrong with the node,
                 * whatever the converter made of the default it got */
                if (c->attr_err[0]) return BAD_ATTR("%s", c->attr_err);
                return s;
            }
    }
    return mgi_onnx_node_error(c, MG_ERR_UNSUPPORTED, "unsupported op");
}
