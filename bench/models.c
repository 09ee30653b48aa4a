/*
 * models.c - the model table of mg-bench and the MLP builder.
 *
 * resnet, unet and transformer are listed without a builder until their
 * builders exist in a public header (issue 3 and after); mg-bench then says
 * so instead of running something else.
 */
#include "models.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MLP_CLASSES 10

void bench_model_free(bench_model *m) {
    if (!m) return;
    mg_graph_free(m->g);
    free(m->params);
    free(m->init_bound);
    memset(m, 0, sizeof *m);
}

static mg_status model_alloc(bench_model *m, int n_params) {
    m->g = mg_graph_new();
    m->params = calloc((size_t)n_params, sizeof *m->params);
    m->init_bound = calloc((size_t)n_params, sizeof *m->init_bound);
    if (!m->g || !m->params || !m->init_bound) return MG_ERR_NOMEM;
    return MG_OK;
}

/*
 * MLP classifier, f32:
 *   x [batch, width] -> (matmul w_l [width, width] + b_l [width] -> relu)
 *   for l < depth-1 -> matmul w_last [width, 10] + b_last [10] ->
 *   cross-entropy against labels [batch] in [0, 10).
 * Inputs: x, labels. Params: w0, b0, w1, b1, ..., each weight [in, out]
 * row-major (PyTorch's nn.Linear stores its transpose). Weights start
 * U(-sqrt(6/width), sqrt(6/width)) (He, so activations keep their scale
 * over 1024 ReLU layers), biases U(-0.01, 0.01).
 * Per layer three [batch, width] tensors (matmul, add, relu); plain backprop
 * keeps relu's output (its gradient and the next matmul's read it).
 * Every round(sqrt(depth))-th relu output is tagged as a checkpoint, which
 * only policy collection reads: sqrt(n) checkpoints placed by hand, as
 * torch.utils.checkpoint_sequential places them.
 */
static mg_status build_mlp(bench_model *m, const bench_model_cfg *c) {
    mg_status s = model_alloc(m, 2 * c->depth);
    if (s != MG_OK) return s;
    mg_graph *g = m->g;
    int64_t xs[2] = {c->batch, c->width}, ls[1] = {c->batch};
    m->inputs[0] = mg_input(g, "x", MG_F32, 2, xs);
    m->inputs[1] = mg_input(g, "labels", MG_I32, 1, ls);
    m->labels[0] = 0;
    m->labels[1] = MLP_CLASSES;
    m->n_inputs = 2;
    mg_tensor h = m->inputs[0];
    int every = (int)lround(sqrt((double)c->depth));
    if (every < 1) every = 1;
    for (int l = 0; l < c->depth; l++) {
        int last = l == c->depth - 1;
        int64_t out = last ? MLP_CLASSES : c->width;
        int64_t ws[2] = {c->width, out}, bs[1] = {out};
        mg_tensor w = mg_param(g, NULL, MG_F32, 2, ws);
        mg_tensor b = mg_param(g, NULL, MG_F32, 1, bs);
        m->params[m->n_params] = w;
        m->init_bound[m->n_params++] = sqrt(6.0 / (double)c->width);
        m->params[m->n_params] = b;
        m->init_bound[m->n_params++] = 0.01;
        h = mg_add(g, mg_matmul(g, h, w, 0, 0), b);
        if (!last) h = mg_relu(g, h);
        /* Hand-placed checkpoints for policy collection. */
        if (!last && (l + 1) % every == 0 && h != MG_NO_TENSOR)
            mg_tensor_set_checkpoint(g, h, 1);
    }
    m->loss = mg_cross_entropy(g, h, m->inputs[1]);
    m->activation_bytes_one_layer =
        (size_t)c->batch * (size_t)c->width * mg_dtype_size(MG_F32);
    return m->loss == MG_NO_TENSOR ? MG_ERR_INVALID_ARG : MG_OK;
}

/*
 * Defaults: activations must dominate weights, as in openai's plots (batch
 * 1280). An MLP layer holds batch x width activations against width x width
 * weights, so batch / width is that ratio: batch 1024, width 256 gives 4x
 * (1 MiB of activations per layer against 256 KiB of weights), and a step
 * at depth 1024 is about 0.4 TFLOP, a few seconds on two cores, so the whole
 * depth sweep 8..1024 x 3 policies stays within minutes.
 */
const bench_model_spec bench_models[] = {
    {"mlp", "MLP classifier: depth x (linear + relu), cross-entropy", 1024,
     256, build_mlp},
    {"resnet", "residual conv net (no builder yet)", 0, 0, NULL},
    {"unet", "U-Net (no builder yet)", 0, 0, NULL},
    {"transformer", "transformer encoder (no builder yet)", 0, 0, NULL},
};
const int bench_n_models = (int)(sizeof bench_models / sizeof *bench_models);

const bench_model_spec *bench_model_find(const char *name) {
    for (int i = 0; i < bench_n_models; i++)
        if (!strcmp(bench_models[i].name, name)) return &bench_models[i];
    return NULL;
}

const char *bench_model_names(void) {
    static char names[256];
    if (!names[0])
        for (int i = 0; i < bench_n_models; i++) {
            if (i) strncat(names, ",", sizeof names - strlen(names) - 1);
            strncat(names, bench_models[i].name,
                    sizeof names - strlen(names) - 1);
        }
    return names;
}
