/*
 * helpers/model_step.h - the caller memory of one training step of a model
 * from memgrad_models.h, which the pool, arena, accumulation and memory
 * tests all bind the same way: every parameter (initialised with one
 * seed), the input and the target (another seed), and optionally every
 * gradient bound to a zeroed buffer of the caller's; the outputs are the
 * loss and then every gradient. Include after memgrad_models.h; the code
 * is helpers/model_step.c, in the support library.
 */
#ifndef MG_TEST_HELPERS_MODEL_STEP_H
#define MG_TEST_HELPERS_MODEL_STEP_H

#include <stdbool.h>
#include <stdint.h>

#include "memgrad.h"
#include "memgrad_models.h"

typedef struct th_step_data {
    mg_binding *binds; /* parameters, input, target, [gradients] */
    int n_binds;
    void **bufs;     /* binds[i]'s memory */
    mg_tensor *outs; /* the loss, then every gradient */
    int n_outs;
    int n_params;
} th_step_data;

/* Fails the test (ck_assert) when memory or the model's initialisers fail. */
void th_step_data_init(th_step_data *d, const mg_model *m, uint64_t param_seed,
                       uint64_t data_seed, bool bind_grads);
void th_step_data_free(th_step_data *d);

/* Gradient i's bound buffer (bind_grads only). */
static inline void *th_step_grad(const th_step_data *d, int i) {
    return d->bufs[d->n_binds - d->n_params + i];
}

/* A model's training step ready to run: the model, differentiated under
 * ck (NULL: plain backprop), its step memory from seeds 5 and 6
 * (th_step_data_init) and the plan of the loss and every gradient. */
typedef struct th_train {
    mg_model *m;
    th_step_data d;
    mg_plan *p;
} th_train;

/* Takes m (NULL fails the test, naming what and the error). */
void th_train_open(th_train *t, mg_model *m, const char *what,
                   const mg_checkpoints *ck, bool bind_grads);
void th_train_close(th_train *t);

/* The small models the pool and arena tests run, one of each kind, f32,
 * seed 3: the MLP, ResNet, U-Net, transformer and GPT of
 * memgrad_models.h at sizes a test runs in well under a second. */
mg_model *th_small_model(mg_model_kind k);

#endif
