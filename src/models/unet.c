/*
 * unet.c - mg_model_unet: a U-Net (Ronneberger et al., 2015) with padded
 * 3x3 convs, max-pool downsampling, nearest-neighbour upsampling and skip
 * connections concatenated into the decoder. The skips make it the graph
 * without articulation points between encoder and decoder that the memory
 * checkpoint policy has to cut with multi-tensor separators.
 */
#include "models_internal.h"

#include <math.h>
#include <stdio.h>

/* relu(conv_k(x) + b), padding k/2 keeps the image size. */
static mg_tensor conv_relu(mg_model *m, mg_tensor x, int cin, int cout, int k,
                           const char *prefix, int relu) {
    char name[96];
    int64_t ws[4] = {cout, cin, k, k}, bs[3] = {cout, 1, 1};
    double fan_in = (double)cin * k * k;
    snprintf(name, sizeof name, "%s.w", prefix);
    mg_tensor w =
        mgm_param(m, name, 4, ws, MGM_INIT_UNIFORM, sqrt(6.0 / fan_in));
    snprintf(name, sizeof name, "%s.b", prefix);
    mg_tensor b =
        mgm_param(m, name, 3, bs, MGM_INIT_UNIFORM, 1.0 / sqrt(fan_in));
    mg_tensor y =
        mg_add(m->g, mg_conv2d(m->g, x, w, 1, 1, k / 2, k / 2, 1, 1, 1), b);
    return relu ? mg_relu(m->g, y) : y;
}

/* Nearest-neighbour 2x upsampling of [N, C, H, W] from reshape and
 * broadcast_to (whose gradient sums each 2x2 block). */
static mg_tensor upsample2(mg_graph *g, mg_tensor x, int64_t n, int64_t c,
                           int64_t h, int64_t w) {
    int64_t s6[6] = {n, c, h, 1, w, 1}, b6[6] = {n, c, h, 2, w, 2};
    int64_t s4[4] = {n, c, 2 * h, 2 * w};
    x = mg_reshape(g, x, 6, s6);
    x = mg_broadcast_to(g, x, 6, b6);
    return mg_reshape(g, x, 4, s4);
}

mg_model *mg_model_unet(int depth, int channels, int batch, int image,
                        mg_dtype dtype, uint64_t seed) {
    const char *who = "mg_model_unet";
    if (!mgm_check(depth >= 1, who, "depth = %d must be >= 1", depth) ||
        !mgm_check(depth <= 16, who, "depth = %d must be <= 16", depth) ||
        !mgm_check(channels >= 1, who, "channels = %d must be >= 1",
                   channels) ||
        !mgm_check(batch >= 1, who, "batch = %d must be >= 1", batch) ||
        !mgm_check(image >= 1 && image % (1 << depth) == 0, who,
                   "image = %d must be a positive multiple of 2^depth = %d",
                   image, 1 << depth) ||
        !mgm_check(((int64_t)channels << depth) <= (1 << 24), who,
                   "channels << depth = %lld is too large",
                   (long long)((int64_t)channels << depth)) ||
        !mgm_check(mgi_dtype_is_float(dtype), who,
                   "dtype = %s must be f32, f64, bf16 or f16", mg_dtype_name(dtype)))
        return NULL;
    mg_model *m = mgm_new(MG_MODEL_UNET, dtype, seed);
    if (!m) return NULL;
    mg_graph *g = m->g;
    int64_t xs[4] = {batch, 3, image, image}, ts[4] = {batch, 1, image, image};
    m->input = mg_input(g, "x", dtype, 4, xs);
    m->target = mg_input(g, "target", dtype, 4, ts);
    mg_tensor skip[16], h = m->input;
    int cin = 3, size = image;
    char p[64];
    for (int i = 0; i < depth; i++) {
        int c = channels << i;
        snprintf(p, sizeof p, "enc%d.conv1", i);
        h = conv_relu(m, h, cin, c, 3, p, 1);
        snprintf(p, sizeof p, "enc%d.conv2", i);
        h = skip[i] = mgm_block(m, conv_relu(m, h, c, c, 3, p, 1));
        h = mg_max_pool2d(g, h, 2, 2, 2, 2, 0, 0);
        cin = c;
        size /= 2;
    }
    int c = channels << depth;
    h = conv_relu(m, h, cin, c, 3, "mid.conv1", 1);
    h = mgm_block(m, conv_relu(m, h, c, c, 3, "mid.conv2", 1));
    cin = c;
    for (int i = depth - 1; i >= 0; i--) {
        c = channels << i;
        h = upsample2(g, h, batch, cin, size, size);
        size *= 2;
        snprintf(p, sizeof p, "dec%d.up", i);
        h = conv_relu(m, h, cin, c, 3, p, 1);
        const mg_tensor both[2] = {skip[i], h};
        h = mg_concat(g, 2, both, 1);
        snprintf(p, sizeof p, "dec%d.conv1", i);
        h = conv_relu(m, h, 2 * c, c, 3, p, 1);
        snprintf(p, sizeof p, "dec%d.conv2", i);
        h = mgm_block(m, conv_relu(m, h, c, c, 3, p, 1));
        cin = c;
    }
    m->output = conv_relu(m, h, cin, 1, 1, "out", 0);
    m->loss = mg_mse(g, m->output, m->target);
    return mgm_finish(m, who);
}
