/*
 * ops_pool.c - max and average pooling over the H and W axes of NCHW
 * tensors, and their backward helper ops. Windows are conv2d's with
 * dilation 1, but each side has its own padding (pad: top and left,
 * pad_end: bottom and right) and the output size may round up (ceil_mode),
 * as in PyTorch and ONNX. Average pooling divides by the window clipped to
 * the padded input (count_include_pad, PyTorch's default) or by the count
 * of x's elements in it; the kernels share that rule (mg_pool2d_divisor in
 * src/backend/kernel_shared.h).
 */
#include "graph.h"
#include "ops_internal.h"

#include <stdio.h>

/* The output length along one axis of length n, or -1 on int64_t
 * overflow and 0 where no window fits. */
static int64_t pool_len(int64_t n, int k, int s, int p0, int p1, int ceil) {
    int64_t span;
    if (__builtin_add_overflow(n, (int64_t)p0 + p1 - k, &span)) return -1;
    if (span < 0) return 0;
    int64_t out = (ceil ? span + (s - 1) : span) / s + 1;
    /* PyTorch's rule: a window starting at or past x's end (in the end
     * padding, or beyond it) is dropped; ceil mode alone can make one */
    if (ceil && (out - 1) * s >= n + p0) out--;
    return out;
}

mg_status mgi_pool2d_infer(const mg_tdesc *in, int n_in, const mg_attrs *a,
                           mg_tdesc *out, char *why, size_t len) {
    (void)n_in;
    mg_status s = mgi_rank_check(&in[0], "x", "[N, C, H, W]", why, len);
    if (s != MG_OK) return s;
    if ((a->ceil_mode != 0 && a->ceil_mode != 1) ||
        (a->count_include_pad != 0 && a->count_include_pad != 1)) {
        snprintf(why, len,
                 "ceil_mode = %d and count_include_pad = %d must "
                 "be 0 or 1",
                 a->ceil_mode, a->count_include_pad);
        return MG_ERR_INVALID_ARG;
    }
    for (int i = 0; i < 2; i++) {
        const char *axis = i ? "w" : "h";
        const char *side0 = i ? "left" : "top", *side1 = i ? "right" : "bottom";
        const int k = a->kernel[i], st = a->stride[i];
        const int p[2] = {a->pad[i], a->pad_end[i]};
        if (k < 1 || st < 1 || p[0] < 0 || p[1] < 0) {
            snprintf(why, len,
                     "kernel_%s = %d and stride_%s = %d must be >= 1 and "
                     "pad_%s = %d, pad_%s = %d >= 0",
                     axis, k, axis, st, side0, p[0], side1, p[1]);
            return MG_ERR_INVALID_ARG;
        }
        /* As in PyTorch: then every window holds at least one element of
         * x, so a max never comes from padding alone and no average
         * divides by 0. */
        for (int e = 0; e < 2; e++)
            if (p[e] > k / 2) { /* 2 pad > kernel, unwrapped */
                snprintf(why, len,
                         "pad_%s = %d is more than half the kernel (%d)",
                         e ? side1 : side0, p[e], k);
                return MG_ERR_INVALID_ARG;
            }
        const int64_t n = in[0].shape[2 + i];
        const int64_t o = pool_len(n, k, st, p[0], p[1], a->ceil_mode);
        if (o < 0) {
            snprintf(why, len,
                     "%s = %lld with padding %d + %d overflows "
                     "int64_t",
                     axis, (long long)n, p[0], p[1]);
            return MG_ERR_SHAPE;
        }
        if (o < 1) {
            snprintf(why, len,
                     "a window of %d does not fit along %s = %lld with "
                     "padding %d + %d",
                     k, axis, (long long)n, p[0], p[1]);
            return MG_ERR_SHAPE;
        }
        out->shape[2 + i] = o;
    }
    out->dtype = in[0].dtype;
    out->ndim = 4;
    out->shape[0] = in[0].shape[0];
    out->shape[1] = in[0].shape[1];
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

static mg_tensor pool_build(mg_graph *g, mg_op op, mg_tensor x,
                            const mg_pool2d_opts *o) {
    if (!o) {
        mg_set_error(MG_ERR_INVALID_ARG, "%s: opts is NULL", mgi_op_str(op));
        return MG_NO_TENSOR;
    }
    mg_attrs at = {0};
    at.kernel[0] = o->kernel_h;
    at.kernel[1] = o->kernel_w;
    at.stride[0] = o->stride_h;
    at.stride[1] = o->stride_w;
    at.pad[0] = o->pad_top;
    at.pad[1] = o->pad_left;
    at.pad_end[0] = o->pad_bottom;
    at.pad_end[1] = o->pad_right;
    at.dilation[0] = at.dilation[1] = 1;
    at.ceil_mode = o->ceil_mode;
    /* max pooling has no divisor: one value of the flag, so that two
     * equal max pools have equal attributes */
    at.count_include_pad = op == MG_OP_AVG_POOL2D ? o->count_include_pad : 1;
    return mgi_graph_add_node(g, op, 1, &x, &at);
}

/* The symmetric builders: PyTorch's defaults for the rest. */
static mg_pool2d_opts sym_opts(int kernel_h, int kernel_w, int stride_h,
                               int stride_w, int pad_h, int pad_w) {
    return (mg_pool2d_opts){.kernel_h = kernel_h,
                            .kernel_w = kernel_w,
                            .stride_h = stride_h,
                            .stride_w = stride_w,
                            .pad_top = pad_h,
                            .pad_left = pad_w,
                            .pad_bottom = pad_h,
                            .pad_right = pad_w,
                            .ceil_mode = 0,
                            .count_include_pad = 1};
}

mg_tensor mg_max_pool2d(mg_graph *g, mg_tensor x, int kernel_h, int kernel_w,
                        int stride_h, int stride_w, int pad_h, int pad_w) {
    const mg_pool2d_opts o =
        sym_opts(kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w);
    return pool_build(g, MG_OP_MAX_POOL2D, x, &o);
}

mg_tensor mg_avg_pool2d(mg_graph *g, mg_tensor x, int kernel_h, int kernel_w,
                        int stride_h, int stride_w, int pad_h, int pad_w) {
    const mg_pool2d_opts o =
        sym_opts(kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w);
    return pool_build(g, MG_OP_AVG_POOL2D, x, &o);
}

mg_tensor mg_max_pool2d_ex(mg_graph *g, mg_tensor x,
                           const mg_pool2d_opts *opts) {
    return pool_build(g, MG_OP_MAX_POOL2D, x, opts);
}

mg_tensor mg_avg_pool2d_ex(mg_graph *g, mg_tensor x,
                           const mg_pool2d_opts *opts) {
    return pool_build(g, MG_OP_AVG_POOL2D, x, opts);
}

/* The max-pool gradient reads x to find each window's argmax again rather
 * than keeping an index tensor from the forward pass: that costs a second
 * scan but no memory, and recomputing gives the same element, ties
 * included, because the scan order is fixed. */
mg_status mgi_pool2d_grad(mg_graph *g, const mg_node *node, const mg_tensor *in,
                          mg_tensor y, mg_tensor gy, const bool *need,
                          mg_tensor *gin) {
    (void)y;
    const mg_tdesc xd = *mgi_graph_desc(g, in[0]);
    mg_attrs at = *node->attrs;
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
