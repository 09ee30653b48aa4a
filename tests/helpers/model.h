/*
 * helpers/model.h - a small MLP built through the public API, shared by the
 * training, pool and error tests (included through helpers.h).
 *
 *   tm_mlp_build   x [batch,in] -> (matmul + bias -> relu [-> dropout])^depth
 *                  -> matmul + bias -> loss (cross-entropy or mse), and the
 *                  gradients of the loss w.r.t. every weight and bias
 *   tm_mlp_data    caller memory for inputs, parameters and gradients
 */
#ifndef MG_TEST_HELPERS_MODEL_H
#define MG_TEST_HELPERS_MODEL_H

#include "../helpers.h"

#define TM_MAX_LAYERS 64

typedef struct tm_mlp {
    mg_graph *g;
    mg_dtype dtype;
    int depth, in, width, out, batch, classify;
    mg_tensor x, target, loss;
    mg_tensor h[TM_MAX_LAYERS]; /* hidden activations after relu */
    mg_tensor w[TM_MAX_LAYERS + 1], b[TM_MAX_LAYERS + 1];
    mg_tensor gw[TM_MAX_LAYERS + 1], gb[TM_MAX_LAYERS + 1];
    int n_params;
} tm_mlp;

/* depth hidden layers of `width`; classify: cross-entropy over `out`
 * classes, else mse against a [batch,out] target. dropout_p > 0 adds
 * dropout after each hidden relu. ckpt is passed to mg_gradients. */
static inline mg_status tm_mlp_build(tm_mlp *m, mg_dtype dt, int depth, int in,
                                     int width, int out, int batch,
                                     int classify, double dropout_p,
                                     const mg_checkpoints *ckpt) {
    memset(m, 0, sizeof *m);
    ck_assert(depth >= 0 && depth <= TM_MAX_LAYERS);
    m->g = mg_graph_new();
    m->dtype = dt;
    m->depth = depth;
    m->in = in;
    m->width = width;
    m->out = out;
    m->batch = batch;
    m->classify = classify;
    int64_t xs[2] = {batch, in};
    m->x = mg_input(m->g, "x", dt, 2, xs);
    if (classify) {
        int64_t ls[1] = {batch};
        m->target = mg_input(m->g, "labels", MG_I32, 1, ls);
    } else {
        int64_t ts[2] = {batch, out};
        m->target = mg_input(m->g, "target", dt, 2, ts);
    }
    mg_tensor h = m->x;
    int fan_in = in;
    for (int l = 0; l <= depth; l++) {
        int fan_out = l == depth ? out : width;
        int64_t ws[2] = {fan_in, fan_out}, bs[1] = {fan_out};
        char name[32];
        snprintf(name, sizeof name, "w%d", l);
        m->w[l] = mg_param(m->g, name, dt, 2, ws);
        snprintf(name, sizeof name, "b%d", l);
        m->b[l] = mg_param(m->g, name, dt, 1, bs);
        h = mg_add(m->g, mg_matmul(m->g, h, m->w[l], 0, 0), m->b[l]);
        if (l < depth) {
            h = mg_relu(m->g, h);
            if (dropout_p > 0) h = mg_dropout(m->g, h, dropout_p, (uint64_t)l);
            m->h[l] = h;
        }
        fan_in = fan_out;
    }
    m->loss = classify ? mg_cross_entropy(m->g, h, m->target)
                       : mg_mse(m->g, h, m->target);
    if (m->loss == MG_NO_TENSOR) return MG_ERR_INTERNAL;
    mg_tensor params[2 * (TM_MAX_LAYERS + 1)], grads[2 * (TM_MAX_LAYERS + 1)];
    m->n_params = 2 * (depth + 1);
    for (int l = 0; l <= depth; l++) {
        params[2 * l] = m->w[l];
        params[2 * l + 1] = m->b[l];
    }
    mg_status s =
        mg_gradients(m->g, &m->loss, 1, NULL, params, m->n_params, ckpt, grads);
    if (s != MG_OK) return s;
    for (int l = 0; l <= depth; l++) {
        m->gw[l] = grads[2 * l];
        m->gb[l] = grads[2 * l + 1];
    }
    return MG_OK;
}

/* Caller memory for an MLP: one block per leaf and gradient. */
typedef struct tm_mlp_data {
    void *x, *target;
    void *w[TM_MAX_LAYERS + 1], *b[TM_MAX_LAYERS + 1];
    void *gw[TM_MAX_LAYERS + 1], *gb[TM_MAX_LAYERS + 1];
    double loss; /* big enough for either dtype */
    mg_binding binds[3 + 4 * (TM_MAX_LAYERS + 1)];
    int n_binds;
    mg_tensor outs[1 + 2 * (TM_MAX_LAYERS + 1)];
    int n_outs;
} tm_mlp_data;

static inline void tm_fill(th_rng *r, mg_dtype dt, void *p, int64_t n,
                           double scale) {
    if (dt == MG_F64) th_fill_f64(r, (double *)p, n, -scale, scale, 0.0);
    else th_fill_f32(r, (float *)p, n, -scale, scale, 0.0);
}

/* Random data and He-style weights from `seed`. bind_grads: gradient
 * buffers are caller memory bound as outputs (else they stay in the pool).
 */
static inline void tm_mlp_data_init(tm_mlp_data *d, const tm_mlp *m,
                                    uint64_t seed, int bind_grads) {
    memset(d, 0, sizeof *d);
    th_rng r;
    th_rng_init(&r, seed);
    size_t es = mg_dtype_size(m->dtype);
    d->x = malloc(es * (size_t)m->batch * (size_t)m->in);
    tm_fill(&r, m->dtype, d->x, (int64_t)m->batch * m->in, 1.0);
    if (m->classify) {
        int32_t *lab = malloc(sizeof(int32_t) * (size_t)m->batch);
        for (int i = 0; i < m->batch; i++)
            lab[i] = (int32_t)(th_rng_next(&r) % (uint64_t)m->out);
        d->target = lab;
    } else {
        d->target = malloc(es * (size_t)m->batch * (size_t)m->out);
        tm_fill(&r, m->dtype, d->target, (int64_t)m->batch * m->out, 1.0);
    }
    d->binds[d->n_binds++] = (mg_binding){m->x, d->x};
    d->binds[d->n_binds++] = (mg_binding){m->target, d->target};
    d->binds[d->n_binds++] = (mg_binding){m->loss, &d->loss};
    d->outs[d->n_outs++] = m->loss;
    int fan_in = m->in;
    for (int l = 0; l <= m->depth; l++) {
        int fan_out = l == m->depth ? m->out : m->width;
        int64_t nw = (int64_t)fan_in * fan_out;
        d->w[l] = malloc(es * (size_t)nw);
        d->b[l] = calloc((size_t)fan_out, es);
        d->gw[l] = malloc(es * (size_t)nw);
        d->gb[l] = malloc(es * (size_t)fan_out);
        tm_fill(&r, m->dtype, d->w[l], nw, sqrt(6.0 / fan_in));
        d->binds[d->n_binds++] = (mg_binding){m->w[l], d->w[l]};
        d->binds[d->n_binds++] = (mg_binding){m->b[l], d->b[l]};
        if (bind_grads) {
            d->binds[d->n_binds++] = (mg_binding){m->gw[l], d->gw[l]};
            d->binds[d->n_binds++] = (mg_binding){m->gb[l], d->gb[l]};
        }
        d->outs[d->n_outs++] = m->gw[l];
        d->outs[d->n_outs++] = m->gb[l];
        fan_in = fan_out;
    }
}

static inline void tm_mlp_data_free(tm_mlp_data *d, const tm_mlp *m) {
    free(d->x);
    free(d->target);
    for (int l = 0; l <= m->depth; l++) {
        free(d->w[l]);
        free(d->b[l]);
        free(d->gw[l]);
        free(d->gb[l]);
    }
}

static inline double tm_loss_value(const tm_mlp_data *d, const tm_mlp *m) {
    if (m->dtype == MG_F64) return d->loss;
    float f;
    memcpy(&f, &d->loss, sizeof f);
    return (double)f;
}

/* One SGD step on the parameters from the bound gradient buffers. */
static inline void tm_sgd(tm_mlp_data *d, const tm_mlp *m, double lr) {
    int fan_in = m->in;
    for (int l = 0; l <= m->depth; l++) {
        int fan_out = l == m->depth ? m->out : m->width;
        int64_t nw = (int64_t)fan_in * fan_out;
        if (m->dtype == MG_F64) {
            double *w = d->w[l], *b = d->b[l], *gw = d->gw[l], *gb = d->gb[l];
            for (int64_t i = 0; i < nw; i++) w[i] -= lr * gw[i];
            for (int i = 0; i < fan_out; i++) b[i] -= lr * gb[i];
        } else {
            float *w = d->w[l], *b = d->b[l], *gw = d->gw[l], *gb = d->gb[l];
            for (int64_t i = 0; i < nw; i++) w[i] -= (float)lr * gw[i];
            for (int i = 0; i < fan_out; i++) b[i] -= (float)lr * gb[i];
        }
        fan_in = fan_out;
    }
}

#endif
