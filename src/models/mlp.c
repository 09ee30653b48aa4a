/*
 * mlp.c - mg_model_mlp: a multilayer perceptron classifier, x ->
 * (linear -> relu [-> dropout])^depth -> linear -> cross-entropy.
 */
#include "models_internal.h"

#include <math.h>
#include <stdio.h>

mg_model *mg_model_mlp(int depth, int width, int batch, int in_features,
                       int classes, double dropout, mg_dtype dtype,
                       uint64_t seed) {
    const char *who = "mg_model_mlp";
    if (!mgm_check(depth >= 1, who, "depth = %d must be >= 1", depth) ||
        !mgm_check(width >= 1, who, "width = %d must be >= 1", width) ||
        !mgm_check(batch >= 1, who, "batch = %d must be >= 1", batch) ||
        !mgm_check(in_features >= 1, who, "in_features = %d must be >= 1",
                   in_features) ||
        !mgm_check(classes >= 1, who, "classes = %d must be >= 1", classes) ||
        !mgm_check(dropout >= 0 && dropout < 1, who,
                   "dropout = %g must be in [0, 1)", dropout) ||
        !mgm_check(mgi_dtype_is_float(dtype), who,
                   "dtype = %s must be f32, f64, bf16 or f16", mg_dtype_name(dtype)))
        return NULL;
    mg_model *m = mgm_new(MG_MODEL_MLP, dtype, seed);
    if (!m) return NULL;
    mg_graph *g = m->g;
    m->impl->n_classes = classes;
    int64_t xs[2] = {batch, in_features}, ls[1] = {batch};
    m->input = mg_input(g, "x", dtype, 2, xs);
    m->target = mg_input(g, "labels", MG_I32, 1, ls);
    mg_tensor h = m->input;
    int fan_in = in_features;
    for (int l = 0; l <= depth; l++) {
        int fan_out = l == depth ? classes : width;
        char prefix[32];
        snprintf(prefix, sizeof prefix, "fc%d", l);
        h = mgm_linear(m, h, fan_in, fan_out, prefix, sqrt(6.0 / fan_in));
        if (l < depth) {
            h = mg_relu(g, h);
            if (dropout > 0)
                h = mg_dropout(g, h, dropout, seed * 1000003u + (uint64_t)l);
            mgm_block(m, h);
        }
        fan_in = fan_out;
    }
    m->output = h;
    m->loss = mg_cross_entropy(g, h, m->target);
    return mgm_finish(m, who);
}
