/*
 * ops_pool.c - max and average pooling over the H and W axes of NCHW
 * tensors, and their backward helper ops. Windows follow conv2d's rule
 * (ops_conv.c) with dilation 1; average pooling divides by the full window
 * size, padding included (PyTorch's count_include_pad = True).
 */
#include "graph.h"
#include "ops_internal.h"

#include <stdio.h>

mg_status mgi_pool2d_infer(const mg_tdesc *in, int n_in, const mg_attrs *a,
                          mg_tdesc *out, char *why, size_t len) {
    (void)n_in;
    mg_status s = mgi_window_shape(&in[0], a->kernel, a, out, why, len);
    if (s != MG_OK) return s;
    /* As in PyTorch: then every window holds at least one element of x, so
     * a max never comes from padding alone. */
    for (int i = 0; i < 2; i++) {
        if (a->pad[i] > a->kernel[i] / 2) { /* 2 pad > kernel, unwrapped */
            snprintf(why, len, "pad_%s = %d is more than half the kernel (%d)",
                     i ? "w" : "h", a->pad[i], a->kernel[i]);
            return MG_ERR_INVALID_ARG;
        }
    }
    return MG_OK;
}

/* max_pool2d_grad(gy, x): x's shape is the output's. */
mg_status mgi_max_pool2d_grad_infer(const mg_tdesc *in, int n_in,
                                   const mg_attrs *a, mg_tdesc *out, char *why,
                                   size_t len) {
    mg_tdesc y;
    mg_status s = mgi_pool2d_infer(&in[1], n_in, a, &y, why, len);
    if (s == MG_OK) s = mgi_grad_shape_check(&in[0], &y, why, len);
    if (s == MG_OK) *out = in[1];
    return s;
}

/* avg_pool2d_grad(gy) reads nothing of x but its shape, in the attributes. */
mg_status mgi_avg_pool2d_grad_infer(const mg_tdesc *in, int n_in,
                                   const mg_attrs *a, mg_tdesc *out, char *why,
                                   size_t len) {
    return mgi_grad_infer_via(mgi_pool2d_infer, in, n_in, a, out, why, len);
}

/* One visit per window element; a window per output element forward, per
 * element of gy (in[0]) backward. */
static double window_flops(const mg_tdesc *y, const mg_attrs *a) {
    return (double)mgi_tdesc_numel(y) * a->kernel[0] * a->kernel[1];
}

double mgi_pool2d_flops(const mg_tdesc *in, int n_in, const mg_attrs *a,
                       const mg_tdesc *out) {
    (void)in, (void)n_in;
    return window_flops(out, a);
}

double mgi_pool2d_grad_flops(const mg_tdesc *in, int n_in, const mg_attrs *a,
                            const mg_tdesc *out) {
    (void)n_in, (void)out;
    return window_flops(&in[0], a);
}

static mg_tensor pool_build(mg_graph *g, mg_op op, mg_tensor x, int kernel_h,
                            int kernel_w, int stride_h, int stride_w,
                            int pad_h, int pad_w) {
    mg_attrs at = {0};
    at.kernel[0] = kernel_h;
    at.kernel[1] = kernel_w;
    at.stride[0] = stride_h;
    at.stride[1] = stride_w;
    at.pad[0] = pad_h;
    at.pad[1] = pad_w;
    at.dilation[0] = at.dilation[1] = 1;
    return mgi_graph_add_node(g, op, 1, &x, &at);
}

mg_tensor mg_max_pool2d(mg_graph *g, mg_tensor x, int kernel_h, int kernel_w,
                        int stride_h, int stride_w, int pad_h, int pad_w) {
    return pool_build(g, MG_OP_MAX_POOL2D, x, kernel_h, kernel_w, stride_h,
                      stride_w, pad_h, pad_w);
}

mg_tensor mg_avg_pool2d(mg_graph *g, mg_tensor x, int kernel_h, int kernel_w,
                        int stride_h, int stride_w, int pad_h, int pad_w) {
    return pool_build(g, MG_OP_AVG_POOL2D, x, kernel_h, kernel_w, stride_h,
                      stride_w, pad_h, pad_w);
}

/* The max-pool gradient reads x to find each window's argmax again rather
 * than keeping an index tensor from the forward pass: that costs a second
 * scan but no memory, and recomputing gives the same element, ties
 * included, because the scan order is fixed. */
mg_status mgi_pool2d_grad(mg_graph *g, const mg_node *node,
                         const mg_tensor *in, mg_tensor y, mg_tensor gy,
                         const bool *need, mg_tensor *gin) {
    (void)y;
    const mg_tdesc xd = g->nodes[in[0]].d;
    mg_attrs at = node->attrs;
    if (!need[0]) return MG_OK;
    if (node->op == MG_OP_MAX_POOL2D) {
        const mg_tensor args[2] = {gy, in[0]};
        gin[0] = mgi_graph_add_node(g, MG_OP_MAX_POOL2D_GRAD, 2, args, &at);
    } else if (mgi_attrs_shape_set(&at, xd.ndim, xd.shape, "avg_pool2d") ==
               MG_OK) {
        gin[0] = mgi_graph_add_node(g, MG_OP_AVG_POOL2D_GRAD, 1, &gy, &at);
    }
    return mgi_grad_status(1, need, gin);
}
