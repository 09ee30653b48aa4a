/*
 * helpers/model_step.c - the caller memory of a model's training step, the
 * step made ready to run, and the small models the pool and arena tests
 * share (helpers/model_step.h).
 */
#include "model_step.h"
#include "../helpers.h"

void th_step_data_init(th_step_data *d, const mg_model *m, uint64_t param_seed,
                       uint64_t data_seed, bool bind_grads) {
    const int n = m->n_params;
    d->n_params = n;
    d->binds = calloc((size_t)(2 * n + 2), sizeof *d->binds);
    d->bufs = calloc((size_t)(2 * n + 2), sizeof *d->bufs);
    d->outs = calloc((size_t)(n + 1), sizeof *d->outs);
    ck_assert(d->binds && d->bufs && d->outs);
    int k = 0;
    for (int i = 0; i < n; i++, k++) {
        d->bufs[k] = calloc(1, mg_tensor_nbytes(m->g, m->params[i]));
        ck_assert(d->bufs[k] != NULL);
        d->binds[k] = (mg_binding){m->params[i], d->bufs[k]};
    }
    ck_assert(mg_model_init_params(m, param_seed, d->bufs) == MG_OK);
    d->bufs[k] = calloc(1, mg_tensor_nbytes(m->g, m->input));
    d->binds[k] = (mg_binding){m->input, d->bufs[k]};
    d->bufs[k + 1] = calloc(1, mg_tensor_nbytes(m->g, m->target));
    d->binds[k + 1] = (mg_binding){m->target, d->bufs[k + 1]};
    ck_assert(d->bufs[k] && d->bufs[k + 1]);
    ck_assert(mg_model_init_data(m, data_seed, d->bufs[k], d->bufs[k + 1]) ==
              MG_OK);
    k += 2;
    d->outs[0] = m->loss;
    for (int i = 0; i < n; i++) {
        d->outs[1 + i] = m->grads[i];
        if (!bind_grads) continue;
        d->bufs[k] = calloc(1, mg_tensor_nbytes(m->g, m->grads[i]));
        ck_assert(d->bufs[k] != NULL);
        d->binds[k] = (mg_binding){m->grads[i], d->bufs[k]};
        k++;
    }
    d->n_binds = k;
    d->n_outs = n + 1;
}

void th_step_data_free(th_step_data *d) {
    for (int i = 0; i < d->n_binds; i++) free(d->bufs[i]);
    free(d->bufs);
    free(d->binds);
    free(d->outs);
}

void th_train_open(th_train *t, mg_model *m, const char *what,
                   const mg_checkpoints *ck, bool bind_grads) {
    ck_assert_msg(m != NULL, "%s: %s", what, mg_last_error());
    t->m = m;
    ck_assert_msg(mg_model_gradients(m, ck) == MG_OK, "%s: %s", what,
                  mg_last_error());
    th_step_data_init(&t->d, m, 5, 6, bind_grads);
    t->p = NULL;
    ck_assert_msg(mg_plan_compile(m->g, t->d.outs, t->d.n_outs, NULL, &t->p) ==
                      MG_OK,
                  "%s: %s", what, mg_last_error());
}

void th_train_close(th_train *t) {
    mg_plan_free(t->p);
    th_step_data_free(&t->d);
    mg_model_free(t->m);
}

mg_model *th_small_model(mg_model_kind k) {
    switch (k) {
    case MG_MODEL_MLP: return mg_model_mlp(3, 48, 8, 20, 5, 0.1, MG_F32, 3);
    case MG_MODEL_RESNET: return mg_model_resnet(3, 4, 2, 8, 10, MG_F32, 3);
    case MG_MODEL_UNET: return mg_model_unet(2, 4, 2, 16, MG_F32, 3);
    case MG_MODEL_TRANSFORMER:
        return mg_model_transformer(2, 16, 2, 8, 2, 11, 0.1, 1, MG_F32, 3);
    case MG_MODEL_GPT: return mg_model_gpt(2, 16, 2, 8, 2, 11, 0.1, MG_F32, 3);
    }
    return NULL;
}
