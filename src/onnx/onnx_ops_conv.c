/*
 * onnx_ops_conv.c - the converters over [N, C, H, W] images: Conv, MaxPool,
 * AveragePool, GlobalAveragePool (with ONNX's pads and auto_pad), and
 * Resize/Upsample by integer nearest factors.
 */
#include <string.h>

#include "onnx_ops.h"

/* pads begin/end per spatial axis from pads/auto_pad (Conv and pools). */
static mg_status spatial_pads(mgi_octx *c, const node_t *n,
                              const int64_t *in_hw, const int64_t *k,
                              const int64_t *s, const int64_t *d, int64_t *pb,
                              int64_t *pe) {
    char ap[32];
    mgi_onnx_attr_s(c, n, "auto_pad", "NOTSET", ap, sizeof ap);
    int64_t pads[4] = {0, 0, 0, 0};
    int np = mgi_onnx_attr_ints(c, n, "pads", pads, 4);
    if (np >= 0 && np != 4) return BAD_ATTR("pads must have 4 entries for 2-D");
    for (int q = 0; q < 2; q++) {
        if (strcmp(ap, "SAME_UPPER") == 0 || strcmp(ap, "SAME_LOWER") == 0) {
            int64_t out = (in_hw[q] + s[q] - 1) / s[q];
            int64_t tot = (out - 1) * s[q] + (k[q] - 1) * d[q] + 1 - in_hw[q];
            if (tot < 0) tot = 0;
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
        if (pb[q] < 0 || pe[q] < 0) return UNSUP("negative pads");
        if (pb[q] > (1 << 20) || pe[q] > (1 << 20))
            return BAD_ATTR("pads too large");
    }
    return MG_OK;
}

static mg_status hw_attrs(mgi_octx *c, const node_t *n, const char *name,
                          int64_t def, int64_t *out) {
    int cnt = mgi_onnx_attr_ints(c, n, name, out, 2);
    if (cnt == -1) {
        out[0] = out[1] = def;
        return MG_OK;
    }
    if (cnt != 2) return UNSUP("%s with other than 2 entries (only 2-D)", name);
    if (out[0] < 1 || out[1] < 1 || out[0] > (1 << 20) || out[1] > (1 << 20))
        return BAD_ATTR("bad %s", name);
    return MG_OK;
}

mg_status mgi_onnx_op_conv(mgi_octx *c, const node_t *n) {
    mg_tensor x = mgi_onnx_float_in(c, n, 0), w = mgi_onnx_float_in(c, n, 1);
    if (x == MG_NO_TENSOR || w == MG_NO_TENSOR) return mg_last_status();
    int64_t xs[MG_MAX_DIMS], ws[MG_MAX_DIMS];
    if (mgi_onnx_tshape(c, x, xs) != 4 || mgi_onnx_tshape(c, w, ws) != 4)
        return UNSUP("Conv of other than 2-D images (NCHW)");
    int64_t st[2], dl[2], pb[2], pe[2], ks[2] = {ws[2], ws[3]};
    if (ks[0] > (1 << 20) || ks[1] > (1 << 20))
        return UNSUP("kernels larger than 2^20");
    TRY(hw_attrs(c, n, "strides", 1, st));
    TRY(hw_attrs(c, n, "dilations", 1, dl));
    TRY(spatial_pads(c, n, xs + 2, ks, st, dl, pb, pe));
    int64_t groups = mgi_onnx_attr_i(c, n, "group", 1);
    if (groups < 1 || groups > INT32_MAX) return BAD_ATTR("bad group");
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
    if (mgi_onnx_in(c, n, 2) && y != MG_NO_TENSOR) {
        mg_tensor b = mgi_onnx_float_in(c, n, 2);
        if (b == MG_NO_TENSOR) return mg_last_status();
        int64_t bs[3] = {ws[0], 1, 1};
        y = mg_add(g, y, mg_reshape(g, b, 3, bs));
    }
    return mgi_onnx_out(c, n, 0, y);
}

static mg_status op_pool(mgi_octx *c, const node_t *n, bool is_max) {
    mg_tensor x = mgi_onnx_float_in(c, n, 0);
    if (x == MG_NO_TENSOR) return mg_last_status();
    if (n->n_output > 1 && mgi_onnx_is_read(c, n->output[1]))
        return UNSUP("MaxPool's Indices output");
    int64_t xs[MG_MAX_DIMS];
    if (mgi_onnx_tshape(c, x, xs) != 4)
        return UNSUP("pooling of other than 2-D images (NCHW)");
    int64_t ks[2], st[2], dl[2], pb[2], pe[2];
    if (mgi_onnx_attr_ints(c, n, "kernel_shape", ks, 2) != 2)
        return UNSUP("kernel_shape with other than 2 entries (only 2-D)");
    if (ks[0] < 1 || ks[1] < 1 || ks[0] > (1 << 20) || ks[1] > (1 << 20))
        return BAD_ATTR("bad kernel_shape");
    TRY(hw_attrs(c, n, "strides", 1, st));
    TRY(hw_attrs(c, n, "dilations", 1, dl));
    if (dl[0] != 1 || dl[1] != 1) return UNSUP("dilated pooling");
    TRY(spatial_pads(c, n, xs + 2, ks, st, dl, pb, pe));
    /* ceil_mode, each side's pads and count_include_pad (ONNX's default 0)
     * are the builder's own: ONNX's rules are PyTorch's (mg_pool2d_opts) */
    int64_t ceil_mode = mgi_onnx_attr_i(c, n, "ceil_mode", 0);
    int64_t cip = mgi_onnx_attr_i(c, n, "count_include_pad", 0);
    if ((ceil_mode != 0 && ceil_mode != 1) || (cip != 0 && cip != 1))
        return BAD_ATTR("ceil_mode and count_include_pad must be 0 or 1");
    if (ks[0] > INT32_MAX || ks[1] > INT32_MAX || st[0] > INT32_MAX ||
        st[1] > INT32_MAX || pb[0] > INT32_MAX || pb[1] > INT32_MAX ||
        pe[0] > INT32_MAX || pe[1] > INT32_MAX)
        return BAD_ATTR("sizes too large");
    const mg_pool2d_opts o = {.kernel_h = (int)ks[0],
                              .kernel_w = (int)ks[1],
                              .stride_h = (int)st[0],
                              .stride_w = (int)st[1],
                              .pad_top = (int)pb[0],
                              .pad_left = (int)pb[1],
                              .pad_bottom = (int)pe[0],
                              .pad_right = (int)pe[1],
                              .ceil_mode = (int)ceil_mode,
                              .count_include_pad = (int)cip};
    mg_tensor y =
        is_max ? mg_max_pool2d_ex(c->g, x, &o) : mg_avg_pool2d_ex(c->g, x, &o);
    return mgi_onnx_out(c, n, 0, y);
}

mg_status mgi_onnx_op_maxpool(mgi_octx *c, const node_t *n) {
    return op_pool(c, n, true);
}
mg_status mgi_onnx_op_avgpool(mgi_octx *c, const node_t *n) {
    return op_pool(c, n, false);
}

mg_status mgi_onnx_op_global_avgpool(mgi_octx *c, const node_t *n) {
    mg_tensor x = mgi_onnx_float_in(c, n, 0);
    if (x == MG_NO_TENSOR) return mg_last_status();
    int64_t xs[MG_MAX_DIMS];
    int nd = mgi_onnx_tshape(c, x, xs);
    if (nd < 3) return BAD_ATTR("input of rank %d", nd);
    int axes[MG_MAX_DIMS];
    for (int d = 2; d < nd; d++) axes[d - 2] = d;
    return mgi_onnx_out(c, n, 0, mg_mean(c->g, x, nd - 2, axes, 1));
}

/* Nearest upsampling by integer factors: [N,C,H,W] -> [N,C,H,1,W,1] ->
 * broadcast [N,C,H,sh,W,sw] -> [N,C,H sh,W sw]. */
mg_status mgi_onnx_op_resize(mgi_octx *c, const node_t *n) {
    char mode[32];
    mgi_onnx_attr_s(c, n, "mode", "nearest", mode, sizeof mode);
    if (strcmp(mode, "nearest") != 0)
        return UNSUP("Resize mode '%s' (only nearest)", mode);
    /* opset 18's additions change what is computed when set */
    char policy[32];
    mgi_onnx_attr_s(c, n, "keep_aspect_ratio_policy", "stretch", policy,
                    sizeof policy);
    if (mgi_onnx_attr_i(c, n, "antialias", 0) != 0 ||
        mgi_onnx_attr_any(n, "axes") || strcmp(policy, "stretch") != 0)
        return UNSUP(
            "Resize with antialias, axes or a keep_aspect_ratio_policy");
    mg_tensor x = mgi_onnx_float_in(c, n, 0);
    if (x == MG_NO_TENSOR) return mg_last_status();
    int64_t xs[MG_MAX_DIMS];
    int nd = mgi_onnx_tshape(c, x, xs);
    if (nd != 4) return UNSUP("Resize of other than 4-D");
    double sc[4] = {0};
    const mgi_oconst *k = NULL;
    if (strcmp(S(n->op_type), "Upsample") == 0) {
        const Onnx__AttributeProto *a =
            mgi_onnx_attr(c, n, "scales", AT(FLOATS));
        if (a && a->n_floats == 4)
            for (int q = 0; q < 4; q++) sc[q] = a->floats[q];
        else k = mgi_onnx_slot_const(c, n, 1);
    } else {
        k = c->opset < 11 ? mgi_onnx_slot_const(c, n, 1)
                          : mgi_onnx_slot_const(c, n, 2);
        if ((!k || k->n == 0) && c->opset >= 11) {
            const mgi_oconst *sz = mgi_onnx_slot_const(c, n, 3);
            if (sz && sz->n == 4)
                for (int q = 0; q < 4; q++)
                    sc[q] = mgi_onnx_cval(sz, q) / (double)xs[q];
            k = NULL;
        }
    }
    if (k && k->n == 4)
        for (int q = 0; q < 4; q++) sc[q] = mgi_onnx_cval(k, q);
    int64_t f[4];
    for (int q = 0; q < 4; q++) {
        f[q] = mgi_onnx_d2i(sc[q]);
        if (sc[q] != (double)f[q] || f[q] < 1 || f[q] > 4096 ||
            (q < 2 && f[q] != 1))
            return UNSUP("scales other than constant integers on H and W");
    }
    /* checked before multiplying: a [1,1,2^52,1] input scaled by 4096
     * overflows int64 */
    for (int q = 2; q < 4; q++)
        if (xs[q] > INT64_MAX / f[q])
            return mgi_onnx_node_error(c, MG_ERR_SHAPE,
                                       "output dim %d (%lld x %lld) is too "
                                       "large",
                                       q, (long long)xs[q], (long long)f[q]);
    mg_graph *g = c->g;
    int64_t s6[6] = {xs[0], xs[1], xs[2], 1, xs[3], 1};
    int64_t b6[6] = {xs[0], xs[1], xs[2], f[2], xs[3], f[3]};
    int64_t o4[4] = {xs[0], xs[1], xs[2] * f[2], xs[3] * f[3]};
    mg_tensor y = mg_reshape(g, x, 6, s6);
    y = mg_broadcast_to(g, y, 6, b6);
    return mgi_onnx_out(c, n, 0, mg_reshape(g, y, 4, o4));
}

/* The ONNX ops this file converts (onnx_ops.c looks them up). */
