/*
 * demo.c - memgrad's main job in one program: train a deep MLP classifier
 * with SGD, once per checkpoint policy, and print the loss and the peak
 * activation memory each run needed.
 *
 * Parameters and their gradient buffers are caller memory (bound to the
 * plan), so the pool peak printed here is activations, recomputed values
 * and temporaries only, as in the bench tools.
 *
 *   usage: memgrad-demo [depth] [width] [batch] [steps]
 */
#include <memgrad.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct mlp {
    mg_graph *g;
    int depth;
    mg_tensor x, labels, loss;
    mg_tensor *w, *b;   /* depth weights [in,out] and biases [out] */
    mg_tensor *gw, *gb; /* their gradient tensors */
} mlp;

static uint64_t rng_state = 0x2545f4914f6cdd1dULL;
static double rng_uniform(void) { /* xorshift64*: deterministic data */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 0x2545f4914f6cdd1dULL) >> 11) /
           9007199254740992.0;
}

static void fail(const char *what, mg_status s) {
    fprintf(stderr, "memgrad-demo: %s: %s: %s\n", what, mg_status_str(s),
            mg_last_error());
    exit(1);
}

/* x -> [matmul + bias -> relu] * (depth-1) -> matmul + bias -> cross-entropy */
static void mlp_build(mlp *m, int depth, int width, int batch, int classes,
                      const mg_checkpoints *ckpt, mg_status *grad_status) {
    memset(m, 0, sizeof *m);
    m->g = mg_graph_new();
    m->depth = depth;
    m->w = calloc((size_t)depth, sizeof *m->w);
    m->b = calloc((size_t)depth, sizeof *m->b);
    m->gw = calloc((size_t)depth, sizeof *m->gw);
    m->gb = calloc((size_t)depth, sizeof *m->gb);
    int64_t xs[2] = {batch, width}, ls[1] = {batch};
    m->x = mg_input(m->g, "x", MG_F32, 2, xs);
    m->labels = mg_input(m->g, "labels", MG_I32, 1, ls);
    mg_tensor h = m->x;
    for (int l = 0; l < depth; l++) {
        int out = l == depth - 1 ? classes : width;
        char name[32];
        int64_t ws[2] = {width, out}, bs[1] = {out};
        snprintf(name, sizeof name, "w%d", l);
        m->w[l] = mg_param(m->g, name, MG_F32, 2, ws);
        snprintf(name, sizeof name, "b%d", l);
        m->b[l] = mg_param(m->g, name, MG_F32, 1, bs);
        h = mg_add(m->g, mg_matmul(m->g, h, m->w[l], 0, 0), m->b[l]);
        if (l < depth - 1) h = mg_relu(m->g, h);
    }
    m->loss = mg_cross_entropy(m->g, h, m->labels);
    if (m->loss == MG_NO_TENSOR) fail("building the model", MG_ERR_INTERNAL);
    mg_tensor *params = malloc(2 * (size_t)depth * sizeof *params);
    mg_tensor *grads = malloc(2 * (size_t)depth * sizeof *grads);
    for (int l = 0; l < depth; l++) {
        params[2 * l] = m->w[l];
        params[2 * l + 1] = m->b[l];
    }
    *grad_status =
        mg_gradients(m->g, &m->loss, 1, NULL, params, 2 * depth, ckpt, grads);
    for (int l = 0; *grad_status == MG_OK && l < depth; l++) {
        m->gw[l] = grads[2 * l];
        m->gb[l] = grads[2 * l + 1];
    }
    free(params);
    free(grads);
}

static void mlp_free(mlp *m) {
    mg_graph_free(m->g);
    free(m->w);
    free(m->b);
    free(m->gw);
    free(m->gb);
}

typedef struct run_result {
    float first_loss, last_loss;
    size_t peak, predicted;
    int steps;
} run_result;

static run_result train(mlp *m, int width, int batch, int classes, int steps) {
    int depth = m->depth;
    float **pw = malloc((size_t)depth * sizeof *pw),
          **pb = malloc((size_t)depth * sizeof *pb);
    float **dw = malloc((size_t)depth * sizeof *dw),
          **db = malloc((size_t)depth * sizeof *db);
    int n_binds = 3 + 4 * depth;
    mg_binding *binds = malloc((size_t)n_binds * sizeof *binds);
    mg_tensor *outs = malloc((size_t)(1 + 2 * depth) * sizeof *outs);
    float *x = malloc(sizeof(float) * (size_t)batch * (size_t)width);
    int32_t *labels = malloc(sizeof(int32_t) * (size_t)batch);
    float loss = 0;
    rng_state = 0x2545f4914f6cdd1dULL; /* same data and weights per policy */
    for (int i = 0; i < batch * width; i++)
        x[i] = (float)(2 * rng_uniform() - 1);
    for (int i = 0; i < batch; i++)
        labels[i] = (int32_t)(rng_uniform() * classes);
    int k = 0;
    binds[k++] = (mg_binding){m->x, x};
    binds[k++] = (mg_binding){m->labels, labels};
    binds[k++] = (mg_binding){m->loss, &loss};
    outs[0] = m->loss;
    for (int l = 0; l < depth; l++) {
        int out = l == depth - 1 ? classes : width;
        size_t nw = (size_t)width * (size_t)out;
        pw[l] = malloc(nw * sizeof(float));
        dw[l] = malloc(nw * sizeof(float));
        pb[l] = calloc((size_t)out, sizeof(float));
        db[l] = malloc((size_t)out * sizeof(float));
        float scale = sqrtf(2.0f / (float)width); /* He init */
        for (size_t i = 0; i < nw; i++)
            pw[l][i] = (float)(2 * rng_uniform() - 1) * scale * 1.7f;
        binds[k++] = (mg_binding){m->w[l], pw[l]};
        binds[k++] = (mg_binding){m->b[l], pb[l]};
        binds[k++] = (mg_binding){m->gw[l], dw[l]};
        binds[k++] = (mg_binding){m->gb[l], db[l]};
        outs[1 + 2 * l] = m->gw[l];
        outs[2 + 2 * l] = m->gb[l];
    }
    mg_plan *plan = NULL;
    mg_exec *ex = NULL;
    mg_status s = mg_plan_compile(m->g, outs, 1 + 2 * depth, NULL, &plan);
    if (s != MG_OK) fail("compiling the plan", s);
    if ((s = mg_exec_new(NULL, &ex)) != MG_OK) fail("creating the executor", s);
    run_result r = {.predicted = mg_plan_predicted_peak(plan, binds, n_binds),
                    .steps = steps};
    const float lr = 0.05f;
    for (int step = 0; step < steps; step++) {
        if ((s = mg_exec_run(ex, plan, binds, n_binds, (uint64_t)step)) !=
            MG_OK)
            fail("running a training step", s);
        if (step == 0) r.first_loss = loss;
        r.last_loss = loss;
        for (int l = 0; l < depth; l++) {
            int out = l == depth - 1 ? classes : width;
            for (size_t i = 0; i < (size_t)width * (size_t)out; i++)
                pw[l][i] -= lr * dw[l][i];
            for (int i = 0; i < out; i++) pb[l][i] -= lr * db[l][i];
        }
    }
    mg_pool_stats st;
    mg_exec_pool_stats(ex, &st);
    r.peak = st.peak_bytes_in_use;
    mg_exec_free(ex);
    mg_plan_free(plan);
    for (int l = 0; l < depth; l++) {
        free(pw[l]);
        free(pb[l]);
        free(dw[l]);
        free(db[l]);
    }
    free(pw);
    free(pb);
    free(dw);
    free(db);
    free(binds);
    free(outs);
    free(x);
    free(labels);
    return r;
}

int main(int argc, char **argv) {
    int depth = argc > 1 ? atoi(argv[1]) : 64;
    int width = argc > 2 ? atoi(argv[2]) : 256;
    int batch = argc > 3 ? atoi(argv[3]) : 256;
    int steps = argc > 4 ? atoi(argv[4]) : 5;
    const int classes = 10;
    if (depth < 1 || width < 1 || batch < 1 || steps < 1) {
        fprintf(stderr,
                "usage: memgrad-demo [depth] [width] [batch] [steps]\n");
        return 2;
    }
    printf(
        "memgrad demo: MLP depth %d, width %d, batch %d, %d SGD steps, f32\n",
        depth, width, batch, steps);
    printf("one layer's activations: %.2f MiB\n\n",
           (double)batch * width * 4 / (1 << 20));
    printf("%-12s %12s %12s %14s %14s\n", "policy", "first loss", "last loss",
           "peak MiB", "predicted MiB");
    const mg_ckpt_policy policies[] = {MG_CKPT_NONE, MG_CKPT_MEMORY,
                                       MG_CKPT_SPEED};
    for (size_t i = 0; i < sizeof policies / sizeof *policies; i++) {
        const char *name = mg_ckpt_policy_name(policies[i]);
        mg_checkpoints ck = {
            .policy = policies[i], .tensors = NULL, .n_tensors = 0};
        mlp m;
        mg_status gs;
        mlp_build(&m, depth, width, batch, classes, &ck, &gs);
        if (gs == MG_ERR_UNSUPPORTED) {
            printf("%-12s not available in this build: %s\n", name,
                   mg_last_error());
            mlp_free(&m);
            continue;
        }
        if (gs != MG_OK) fail("mg_gradients", gs);
        run_result r = train(&m, width, batch, classes, steps);
        printf("%-12s %12.4f %12.4f %14.2f %14.2f\n", name, r.first_loss,
               r.last_loss, (double)r.peak / (1 << 20),
               (double)r.predicted / (1 << 20));
        mlp_free(&m);
    }
    return 0;
}
