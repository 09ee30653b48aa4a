/*
 * ops_conv.c - 2-D convolution of NCHW tensors (stride, padding, dilation,
 * groups) and its two backward helper ops, plus the sliding-window shape
 * rule that the pooling ops share. conv2d has no bias: a bias is an add
 * that broadcasts [O,1,1] over the output.
 */
#include "graph.h"
#include "ops_internal.h"

#include <limits.h>
#include <stdio.h>

/* Output length of one axis; 0 when even one window does not fit, -1
 * when the padded length does not fit int64_t. */
static int64_t window_len(int64_t in, int k, int stride, int pad, int dil) {
    int64_t padded, span, room;
    if (__builtin_mul_overflow((int64_t)pad, (int64_t)2, &padded) ||
        __builtin_add_overflow(in, padded, &padded) ||
        __builtin_mul_overflow((int64_t)dil, (int64_t)k - 1, &span) ||
        __builtin_sub_overflow(padded, span + 1, &room))
        return -1;
    return room < 0 ? 0 : room / stride + 1;
}

mg_status mgi_rank_check(const mg_tdesc *d, const char *what,
                         const char *layout, char *why, size_t len) {
    mg_status s = mgi_float_check(d, what, why, len);
    int ndim = 1;
    for (const char *c = layout; *c; c++) ndim += *c == ',';
    if (s == MG_OK && d->ndim != ndim) {
        char buf[128];
        snprintf(why, len, "%s must be %d-D %s, not %s", what, ndim, layout,
                 mgi_shape_str(d, buf, sizeof buf));
        s = MG_ERR_SHAPE;
    }
    return s;
}

mg_status mgi_window_shape(const mg_tdesc *x, const int kernel[2],
                           const mg_attrs *a, mg_tdesc *out, char *why,
                           size_t len) {
    mg_status s = mgi_rank_check(x, "x", "[N, C, H, W]", why, len);
    if (s != MG_OK) return s;
    for (int i = 0; i < 2; i++) {
        const char *axis = i ? "w" : "h";
        if (kernel[i] < 1 || a->stride[i] < 1 || a->dilation[i] < 1 ||
            a->pad[i] < 0) {
            snprintf(why, len,
                     "kernel_%s = %d, stride_%s = %d and dilation_%s = %d "
                     "must be >= 1 and pad_%s = %d >= 0",
                     axis, kernel[i], axis, a->stride[i], axis, a->dilation[i],
                     axis, a->pad[i]);
            return MG_ERR_INVALID_ARG;
        }
        const int64_t n = window_len(x->shape[2 + i], kernel[i], a->stride[i],
                                     a->pad[i], a->dilation[i]);
        if (n < 0) {
            snprintf(why, len, "%s = %lld with padding %d overflows int64_t",
                     axis, (long long)x->shape[2 + i], a->pad[i]);
            return MG_ERR_SHAPE;
        }
        if (n < 1) {
            snprintf(why, len,
                     "a window of %d (dilation %d) does not fit along %s = "
                     "%lld with padding %d",
                     kernel[i], a->dilation[i], axis,
                     (long long)x->shape[2 + i], a->pad[i]);
            return MG_ERR_SHAPE;
        }
        out->shape[2 + i] = n;
    }
    out->dtype = x->dtype;
    out->ndim = 4;
    out->shape[0] = x->shape[0];
    out->shape[1] = x->shape[1];
    return MG_OK;
}

/* Checks the output of a gradient op's forward against its gy. */
mg_status mgi_grad_shape_check(const mg_tdesc *gy, const mg_tdesc *want,
                               char *why, size_t len) {
    mg_status s =
        mgi_float_pair_check(gy, "gy", want, "the forward output", why, len);
    if (s == MG_OK && !mgi_tdesc_same_shape(gy, want)) {
        char a[128], b[128];
        snprintf(why, len, "gy is %s but the forward output would be %s",
                 mgi_shape_str(gy, a, sizeof a),
                 mgi_shape_str(want, b, sizeof b));
        s = MG_ERR_SHAPE;
    }
    return s;
}

mg_status mgi_grad_infer_via(mg_infer_fn *forward, const mg_tdesc *in, int n_in,
                             const mg_attrs *a, mg_tdesc *out, char *why,
                             size_t len) {
    mg_tdesc fwd[MG_MAX_INPUTS] = {{.dtype = in[0].dtype, .ndim = a->ndim}}, y;
    for (int i = 0; i < a->ndim; i++) fwd[0].shape[i] = a->shape[i];
    for (int i = 1; i < n_in; i++) fwd[i] = in[i];
    mg_status s = forward(fwd, n_in, a, &y, why, len);
    if (s == MG_OK) s = mgi_grad_shape_check(&in[0], &y, why, len);
    if (s == MG_OK) *out = fwd[0];
    return s;
}

mg_status mgi_conv2d_infer(const mg_tdesc *in, int n_in, const mg_attrs *a,
                           mg_tdesc *out, char *why, size_t len) {
    (void)n_in;
    const mg_tdesc *x = &in[0], *w = &in[1];
    mg_status s = mgi_float_pair_check(x, "x", w, "w", why, len);
    if (s == MG_OK)
        s = mgi_rank_check(w, "w", "[O, C/groups, KH, KW]", why, len);
    if (s != MG_OK) return s;
    if (w->shape[2] > INT_MAX || w->shape[3] > INT_MAX) {
        snprintf(why, len, "the kernel of w is too large");
        return MG_ERR_SHAPE;
    }
    const int kernel[2] = {(int)w->shape[2], (int)w->shape[3]};
    if ((s = mgi_window_shape(x, kernel, a, out, why, len)) != MG_OK) return s;
    const int64_t c = x->shape[1], o = w->shape[0], gr = a->groups;
    if (gr < 1 || c % gr != 0 || o % gr != 0) {
        snprintf(why, len,
                 "groups = %lld must be >= 1 and divide both the %lld input "
                 "and the %lld output channels",
                 (long long)gr, (long long)c, (long long)o);
        return MG_ERR_INVALID_ARG;
    }
    if (w->shape[1] * gr != c) {
        snprintf(why, len,
                 "channel mismatch: x has %lld channels, so w must have %lld "
                 "per group, not %lld",
                 (long long)c, (long long)(c / gr), (long long)w->shape[1]);
        return MG_ERR_SHAPE;
    }
    out->shape[1] = o;
    return MG_OK;
}

/* conv2d_grad_input(gy, w): x's shape is in the attributes. */
mg_status mgi_conv2d_grad_input_infer(const mg_tdesc *in, int n_in,
                                      const mg_attrs *a, mg_tdesc *out,
                                      char *why, size_t len) {
    return mgi_grad_infer_via(mgi_conv2d_infer, in, n_in, a, out, why, len);
}

/* conv2d_grad_weight(gy, x): w's kernel size is in the attributes. */
mg_status mgi_conv2d_grad_weight_infer(const mg_tdesc *in, int n_in,
                                       const mg_attrs *a, mg_tdesc *out,
                                       char *why, size_t len) {
    if (in[0].ndim != 4 || in[1].ndim != 4 || a->groups < 1) {
        snprintf(why, len, "gy and x must be 4-D and groups >= 1");
        return MG_ERR_SHAPE;
    }
    const mg_tdesc w = {.dtype = in[1].dtype,
                        .ndim = 4,
                        .shape = {in[0].shape[1], in[1].shape[1] / a->groups,
                                  a->kernel[0], a->kernel[1]}};
    mg_tdesc fwd[2] = {in[1], w}, y;
    mg_status s = mgi_conv2d_infer(fwd, n_in, a, &y, why, len);
    if (s == MG_OK) s = mgi_grad_shape_check(&in[0], &y, why, len);
    if (s == MG_OK) *out = w;
    return s;
}

/* The GEMM work of a convolution with output y and weight w: each output
 * element is a dot product over C/groups * KH * KW. The op and both of its
 * gradients do the same amount. */
static double conv_flops(const mg_tdesc *y, const mg_tdesc *w) {
    return 2.0 * (double)mgi_tdesc_numel(y) * (double)mgi_tdesc_numel(w) /
           (double)w->shape[0];
}

/* The im2col buffer of one sample: C*KH*KW rows of OH*OW (the CPU walks it
 * one group at a time, the CUDA kernels fill all groups at once), none for
 * a 1x1 kernel with stride 1 and no padding, which reads x directly. w is
 * the weight's descriptor, y the output-side one ([N, O, OH, OW]). */
static size_t conv_workspace(const mg_tdesc *w, const mg_tdesc *y,
                             const mg_attrs *a) {
    bool direct = w->shape[2] == 1 && w->shape[3] == 1 && a->stride[0] == 1 &&
                  a->stride[1] == 1 && a->pad[0] == 0 && a->pad[1] == 0;
    if (direct) return 0;
    /* Every factor fits (the tensors do), their product need not: a size
     * no allocation can meet then makes the run fail with MG_ERR_NOMEM. */
    size_t n = mg_dtype_size(y->dtype);
    const int64_t f[5] = {a->groups, w->shape[1], w->shape[2], w->shape[3],
                          y->shape[2] * y->shape[3]};
    for (int i = 0; i < 5; i++)
        if (f[i] < 0 || __builtin_mul_overflow(n, (size_t)f[i], &n))
            return SIZE_MAX;
    return n;
}

size_t mgi_conv2d_workspace(const mg_tdesc *in, int n_in, const mg_attrs *a,
                            const mg_tdesc *out) {
    (void)n_in;
    return conv_workspace(&in[1], out, a);
}

size_t mgi_conv2d_grad_input_workspace(const mg_tdesc *in, int n_in,
                                       const mg_attrs *a, const mg_tdesc *out) {
    (void)n_in, (void)out;
    return conv_workspace(&in[1], &in[0], a);
}

size_t mgi_conv2d_grad_weight_workspace(const mg_tdesc *in, int n_in,
                                        const mg_attrs *a,
                                        const mg_tdesc *out) {
    (void)n_in;
    return conv_workspace(out, &in[0], a);
}

double mgi_conv2d_flops(const mg_tdesc *in, int n_in, const mg_attrs *a,
                        const mg_tdesc *out) {
    (void)n_in, (void)a;
    return conv_flops(out, &in[1]);
}

double mgi_conv2d_grad_input_flops(const mg_tdesc *in, int n_in,
                                   const mg_attrs *a, const mg_tdesc *out) {
    (void)n_in, (void)a, (void)out;
    return conv_flops(&in[0], &in[1]);
}

double mgi_conv2d_grad_weight_flops(const mg_tdesc *in, int n_in,
                                    const mg_attrs *a, const mg_tdesc *out) {
    (void)n_in, (void)a;
    return conv_flops(&in[0], out);
}

mg_tensor mg_conv2d(mg_graph *g, mg_tensor x, mg_tensor w, int stride_h,
                    int stride_w, int pad_h, int pad_w, int dilation_h,
                    int dilation_w, int groups) {
    mg_attrs at = {0};
    at.stride[0] = stride_h;
    at.stride[1] = stride_w;
    at.pad[0] = pad_h;
    at.pad[1] = pad_w;
    at.dilation[0] = dilation_h;
    at.dilation[1] = dilation_w;
    at.groups = groups;
    const mg_tensor in[2] = {x, w};
    return mgi_graph_add_node(g, MG_OP_CONV2D, 2, in, &at);
}

/* dx is the transposed convolution of gy with w, dw correlates gy with x;
 * both are helper ops so that no flipped or dilated copy of w or gy is
 * ever materialised. */
mg_status mgi_conv2d_grad(mg_graph *g, const mg_node *node, const mg_tensor *in,
                          mg_tensor y, mg_tensor gy, const bool *need,
                          mg_tensor *gin) {
    (void)y;
    const mg_tdesc xd = *mgi_graph_desc(g, in[0]),
                   wd = *mgi_graph_desc(g, in[1]);
    mg_attrs at = *node->attrs;
    if (need[0]) {
        const mg_tensor args[2] = {gy, in[1]};
        gin[0] =
            mgi_attrs_shape_set(&at, xd.ndim, xd.shape, "conv2d") == MG_OK
                ? mgi_graph_add_node(g, MG_OP_CONV2D_GRAD_INPUT, 2, args, &at)
                : MG_NO_TENSOR;
    }
    if (need[1]) {
        const mg_tensor args[2] = {gy, in[0]};
        at.kernel[0] = (int)wd.shape[2];
        at.kernel[1] = (int)wd.shape[3];
        gin[1] = mgi_graph_add_node(g, MG_OP_CONV2D_GRAD_WEIGHT, 2, args, &at);
    }
    return mgi_grad_status(2, need, gin);
}
