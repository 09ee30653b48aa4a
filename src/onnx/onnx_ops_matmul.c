/*
 * onnx_ops_matmul.c - the matrix product converters: MatMul (batched, with
 * broadcast leading dims) and Gemm (transposes, alpha, beta and C).
 */
#include <string.h>

#include "onnx_ops.h"

static mg_status op_matmul(mgi_octx *c, const node_t *n) {
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

static mg_status op_gemm(mgi_octx *c, const node_t *n) {
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
const mgi_onnx_op mgi_onnx_ops_matmul[] = {
    {"Gemm", op_gemm}, {"MatMul", op_matmul}, {NULL, NULL}};
