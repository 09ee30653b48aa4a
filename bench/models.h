/*
 * models.h - the model builders mg-bench can time: a table of named models,
 * each a function that builds the forward graph and its loss and lists the
 * inputs and parameters in a fixed order.
 *
 * The order of `params` is the layout of the weight files mg-bench reads and
 * of the gradient files it writes (bench/compare_torch.py relies on it), so
 * a builder documents it. Adding a model (resnet, unet, transformer once
 * their builders exist in a public header) means one function and one line
 * in bench_models[] in models.c.
 */
#ifndef MG_BENCH_MODELS_H
#define MG_BENCH_MODELS_H

#include <memgrad.h>

#define BENCH_MAX_INPUTS 4

/* What mg-bench asks a builder for. `depth` is the model's own notion of
 * depth (MLP: linear layers; ResNet: residual blocks), `width` its width
 * (MLP: hidden units; convolutional models: base channels). */
typedef struct bench_model_cfg {
    int depth, batch, width;
} bench_model_cfg;

typedef struct bench_model {
    mg_graph *g;
    mg_tensor loss; /* a scalar */
    /* Data inputs in file order. labels[i] > 0: an int32 tensor of class
     * labels in [0, labels[i]); 0: a float tensor filled uniform in [-1,1]. */
    int n_inputs;
    mg_tensor inputs[BENCH_MAX_INPUTS];
    int labels[BENCH_MAX_INPUTS];
    /* Parameters in file order, and for each the bound of its uniform
     * initialisation U(-bound, bound) (0: zeros). */
    int n_params;
    mg_tensor *params;
    double *init_bound;
    /* The bytes of one layer's output activation (batch x width x dtype
     * size for the MLP): the unit the memory curves are read in. */
    size_t activation_bytes_one_layer;
} bench_model;

typedef struct bench_model_spec {
    const char *name;
    const char *summary;        /* one line for --help */
    int default_batch, default_width;
    /* NULL: known, but no builder yet. Returns MG_OK or an error with
     * mg_last_error() set; on error the model is freed by the caller. */
    mg_status (*build)(bench_model *m, const bench_model_cfg *cfg);
} bench_model_spec;

extern const bench_model_spec bench_models[];
extern const int bench_n_models;

/* The spec named `name`, or NULL. */
const bench_model_spec *bench_model_find(const char *name);
/* Comma-separated names of every model in the table. */
const char *bench_model_names(void);
/* Frees the graph and the lists; m may be partly built. */
void bench_model_free(bench_model *m);

#endif
