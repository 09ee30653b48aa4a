/*
 * model.c - what every model builder shares: creating and freeing an
 * mg_model, registering parameters with their init rule, the linear layer,
 * mg_model_gradients, and seeded initialisation of parameters and data.
 */
#include "models_internal.h"
#include "common/half.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *mg_model_kind_name(mg_model_kind kind) {
    switch (kind) {
    case MG_MODEL_MLP: return "mlp";
    case MG_MODEL_RESNET: return "resnet";
    case MG_MODEL_UNET: return "unet";
    case MG_MODEL_TRANSFORMER: return "transformer";
    case MG_MODEL_GPT: return "gpt";
    }
    return "?";
}

int mgm_check(int cond, const char *who, const char *fmt, ...) {
    if (cond) return 1;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    mg_set_error(MG_ERR_INVALID_ARG, "%s: %s", who, msg);
    return 0;
}

mg_model *mgm_new(mg_model_kind kind, mg_dtype dtype, uint64_t seed) {
    mg_model *m = calloc(1, sizeof *m);
    mg_model_impl *impl = calloc(1, sizeof *impl);
    mg_graph *g = mg_graph_new();
    if (!m || !impl || !g) {
        free(m);
        free(impl);
        mg_graph_free(g);
        mg_set_error(MG_ERR_NOMEM, "%s model: out of memory",
                     mg_model_kind_name(kind));
        return NULL;
    }
    m->g = g;
    m->impl = impl;
    m->kind = kind;
    m->dtype = dtype;
    m->seed = seed;
    m->input = m->target = m->output = m->loss = MG_NO_TENSOR;
    return m;
}

void mg_model_free(mg_model *m) {
    if (!m) return;
    mg_graph_free(m->g);
    free(m->params);
    free(m->blocks);
    free(m->grads);
    if (m->impl) {
        free(m->impl->init);
        free(m->impl->init_a);
        free(m->impl);
    }
    free(m);
}

static int grow(void **p, int *cap, int need, size_t elem) {
    if (need <= *cap) return 1;
    int nc = *cap ? 2 * *cap : 16;
    while (nc < need) nc *= 2;
    void *q = realloc(*p, (size_t)nc * elem);
    if (!q) return 0;
    *p = q;
    *cap = nc;
    return 1;
}

mg_tensor mgm_param(mg_model *m, const char *name, int ndim,
                    const int64_t *shape, mgm_init init, double a) {
    mg_model_impl *im = m->impl;
    if (m->n_params == im->cap_params) {
        /* grow the three arrays to the same new capacity; on failure the
         * ones that grew are merely larger than recorded */
        int nc = im->cap_params ? 2 * im->cap_params : 16;
        void *p = realloc(m->params, (size_t)nc * sizeof *m->params);
        if (p) m->params = p;
        void *q = p ? realloc(im->init, (size_t)nc * sizeof *im->init) : NULL;
        if (q) im->init = q;
        void *r =
            q ? realloc(im->init_a, (size_t)nc * sizeof *im->init_a) : NULL;
        if (r) im->init_a = r;
        if (!r) {
            im->failed = 1;
            mg_set_error(MG_ERR_NOMEM, "parameter %s: out of memory", name);
            return MG_NO_TENSOR;
        }
        im->cap_params = nc;
    }
    mg_tensor t = mg_param(m->g, name, m->dtype, ndim, shape);
    if (t == MG_NO_TENSOR) {
        im->failed = 1;
        return MG_NO_TENSOR;
    }
    m->params[m->n_params] = t;
    im->init[m->n_params] = init;
    im->init_a[m->n_params] = a;
    m->n_params++;
    return t;
}

mg_tensor mgm_block(mg_model *m, mg_tensor t) {
    if (t == MG_NO_TENSOR) return t;
    if (!grow((void **)&m->blocks, &m->impl->cap_blocks, m->n_blocks + 1,
              sizeof *m->blocks)) {
        m->impl->failed = 1;
        mg_set_error(MG_ERR_NOMEM, "model blocks: out of memory");
        return MG_NO_TENSOR;
    }
    m->blocks[m->n_blocks++] = t;
    return t;
}

mg_model *mgm_finish(mg_model *m, const char *who) {
    if (m->loss != MG_NO_TENSOR && !m->impl->failed) return m;
    char msg[1024];
    mg_status s = mg_last_status();
    snprintf(msg, sizeof msg, "%s", mg_last_error());
    mg_set_error(s == MG_OK ? MG_ERR_INTERNAL : s, "%s: %s", who,
                 msg[0] ? msg : "building the graph failed");
    mg_model_free(m);
    return NULL;
}

mg_tensor mgm_linear(mg_model *m, mg_tensor x, int in, int out,
                     const char *prefix, double w_bound) {
    char name[96];
    int64_t ws[2] = {in, out}, bs[1] = {out};
    snprintf(name, sizeof name, "%s.w", prefix);
    mg_tensor w = mgm_param(m, name, 2, ws, MGM_INIT_UNIFORM, w_bound);
    snprintf(name, sizeof name, "%s.b", prefix);
    mg_tensor b =
        mgm_param(m, name, 1, bs, MGM_INIT_UNIFORM, 1.0 / sqrt((double)in));
    return mg_add(m->g, mg_matmul(m->g, x, w, 0, 0), b);
}

mg_status mg_model_gradients(mg_model *m, const mg_checkpoints *checkpoints) {
    if (!m || !m->g)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_model_gradients: m is NULL");
    if (m->grads)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_model_gradients: m already has gradients");
    mg_tensor *grads = malloc(sizeof *grads * (size_t)m->n_params);
    if (!grads)
        return mg_set_error(MG_ERR_NOMEM, "mg_model_gradients: out of memory");
    mg_status s = mg_gradients(m->g, &m->loss, 1, NULL, m->params, m->n_params,
                               checkpoints, grads);
    if (s != MG_OK) {
        free(grads);
        return s;
    }
    m->grads = grads;
    return MG_OK;
}

static void fill(mg_dtype dt, void *p, int64_t n, uint64_t *rng, mgm_init init,
                 double a, double lo, double hi) {
    for (int64_t k = 0; k < n; k++) {
        double v;
        if (init == MGM_INIT_CONST) v = a;
        else v = lo + (hi - lo) * mgm_rng_uniform(rng);
        if (dt == MG_F64) ((double *)p)[k] = v;
        else if (dt == MG_BF16) ((uint16_t *)p)[k] = mg_bf16_from_f64(v);
        else if (dt == MG_F16) ((uint16_t *)p)[k] = mg_f16_from_f64(v);
        else ((float *)p)[k] = (float)v;
    }
}

mg_status mg_model_init_params(const mg_model *m, uint64_t seed,
                               void *const *param_data) {
    if (!m || !m->impl)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_model_init_params: m is NULL");
    if (!param_data)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_model_init_params: param_data is NULL");
    for (int i = 0; i < m->n_params; i++)
        if (!param_data[i])
            return mg_set_error(MG_ERR_INVALID_ARG,
                                "mg_model_init_params: param_data[%d] (%s) is "
                                "NULL",
                                i, mg_tensor_name(m->g, m->params[i]));
    for (int i = 0; i < m->n_params; i++) {
        uint64_t rng = mgm_rng_stream(seed, (uint64_t)i);
        double a = m->impl->init_a[i];
        fill(m->dtype, param_data[i], mg_tensor_numel(m->g, m->params[i]), &rng,
             m->impl->init[i], a, -a, a);
    }
    return MG_OK;
}

mg_status mg_model_init_data(const mg_model *m, uint64_t seed, void *input,
                             void *target) {
    if (!m || !m->impl)
        return mg_set_error(MG_ERR_INVALID_ARG,
                            "mg_model_init_data: m is NULL");
    /* streams far from the parameters' */
    uint64_t rin = mgm_rng_stream(seed, 0xF0000001ull);
    uint64_t rtg = mgm_rng_stream(seed, 0xF0000002ull);
    const uint64_t classes = (uint64_t)m->impl->n_classes;
    mg_dtype dt;
    if (input) {
        int64_t n = mg_tensor_numel(m->g, m->input);
        mg_tensor_dtype(m->g, m->input, &dt);
        if (dt == MG_I32) {
            for (int64_t k = 0; k < n; k++)
                ((int32_t *)input)[k] = (int32_t)(mgm_rng_next(&rin) % classes);
        } else {
            fill(dt, input, n, &rin, MGM_INIT_UNIFORM, 1.0, -1.0, 1.0);
        }
    }
    if (target) {
        int64_t n = mg_tensor_numel(m->g, m->target);
        mg_tensor_dtype(m->g, m->target, &dt);
        if (dt == MG_I32) {
            for (int64_t k = 0; k < n; k++)
                ((int32_t *)target)[k] =
                    (int32_t)(mgm_rng_next(&rtg) % classes);
        } else {
            fill(dt, target, n, &rtg, MGM_INIT_UNIFORM, 1.0, 0.0, 1.0);
        }
    }
    return MG_OK;
}
