/*
 * resnet.c - mg_model_resnet: a CIFAR-style pre-activation ResNet (He et
 * al., "Identity Mappings in Deep Residual Networks", 2016) with identity
 * and projection shortcuts, training-mode batchnorm and a global average
 * pool before the classifier.
 */
#include "models_internal.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>

#define BN_EPS 1e-5

static mg_tensor conv(mg_model *m, mg_tensor x, int cin, int cout, int k,
                      int stride, const char *name) {
    int64_t ws[4] = {cout, cin, k, k};
    mg_tensor w = mgm_param(m, name, 4, ws, MGM_INIT_UNIFORM,
                            sqrt(6.0 / ((double)cin * k * k)));
    return mg_conv2d(m->g, x, w, stride, stride, k / 2, k / 2, 1, 1, 1);
}

/* relu(batchnorm(x)) with gamma = 1, beta = 0 initially. */
static mg_tensor bn_relu(mg_model *m, mg_tensor x, int c, const char *prefix) {
    char name[96];
    int64_t s[1] = {c};
    snprintf(name, sizeof name, "%s.gamma", prefix);
    mg_tensor gamma = mgm_param(m, name, 1, s, MGM_INIT_CONST, 1.0);
    snprintf(name, sizeof name, "%s.beta", prefix);
    mg_tensor beta = mgm_param(m, name, 1, s, MGM_INIT_CONST, 0.0);
    return mg_relu(m->g, mg_batchnorm(m->g, x, gamma, beta, BN_EPS));
}

mg_model *mg_model_resnet(int depth, int width, int batch, int image,
                          int classes, mg_dtype dtype, uint64_t seed) {
    const char *who = "mg_model_resnet";
    if (!mgm_check(depth >= 1, who, "depth = %d must be >= 1", depth) ||
        !mgm_check(width >= 1, who, "width = %d must be >= 1", width) ||
        /* the last stage has width << (stages - 1) channels, an int */
        !mgm_check(((int64_t)width << ((depth < 3 ? depth : 3) - 1)) <= INT_MAX,
                   who,
                   "width = %d is too large: the widest stage's "
                   "channels must fit an int",
                   width) ||
        !mgm_check(batch >= 1, who, "batch = %d must be >= 1", batch) ||
        !mgm_check(image >= 1, who, "image = %d must be >= 1", image) ||
        !mgm_check(classes >= 1, who, "classes = %d must be >= 1", classes) ||
        !mgm_check(mgi_dtype_is_float(dtype), who,
                   "dtype = %s must be f32, f64, bf16 or f16", mg_dtype_name(dtype)))
        return NULL;
    mg_model *m = mgm_new(MG_MODEL_RESNET, dtype, seed);
    if (!m) return NULL;
    mg_graph *g = m->g;
    m->impl->n_classes = classes;
    int64_t xs[4] = {batch, 3, image, image}, ls[1] = {batch};
    m->input = mg_input(g, "x", dtype, 4, xs);
    m->target = mg_input(g, "labels", MG_I32, 1, ls);
    mg_tensor h = conv(m, m->input, 3, width, 3, 1, "stem.w");
    int stages = depth < 3 ? depth : 3, cin = width, prev_stage = 0;
    for (int b = 0; b < depth; b++) {
        int stage = b * stages / depth;
        int stride = stage != prev_stage ? 2 : 1;
        int cout = width << stage;
        char p[64], name[96];
        snprintf(p, sizeof p, "block%d", b);
        snprintf(name, sizeof name, "%s.bn1", p);
        mg_tensor a = bn_relu(m, h, cin, name);
        mg_tensor shortcut = h;
        if (stride != 1 || cin != cout) {
            snprintf(name, sizeof name, "%s.proj.w", p);
            shortcut = conv(m, a, cin, cout, 1, stride, name);
        }
        snprintf(name, sizeof name, "%s.conv1.w", p);
        mg_tensor o = conv(m, a, cin, cout, 3, stride, name);
        snprintf(name, sizeof name, "%s.bn2", p);
        o = bn_relu(m, o, cout, name);
        snprintf(name, sizeof name, "%s.conv2.w", p);
        o = conv(m, o, cout, cout, 3, 1, name);
        h = mgm_block(m, mg_add(g, o, shortcut));
        cin = cout;
        prev_stage = stage;
    }
    h = bn_relu(m, h, cin, "bn_final");
    h = mg_global_avg_pool2d(g, h); /* [N, C] */
    m->output = mgm_linear(m, h, cin, classes, "fc", 1.0 / sqrt((double)cin));
    m->loss = mg_cross_entropy(g, m->output, m->target);
    return mgm_finish(m, who);
}
