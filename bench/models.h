/*
 * models.h - the models mg-bench can time: a table of named models, each a
 * function mapping mg-bench's (depth, batch, width) onto one of the
 * reference builders of memgrad_models.h, plus the unit its memory curve is
 * read in (one layer's activation bytes).
 *
 * The order of a model's inputs (input, target) and parameters
 * (mg_model.params, creation order) is the layout of the files `mg-bench
 * step --load` reads and `--save-grads` writes; bench/compare_torch.py
 * relies on it. Adding a model means one function and one line in
 * bench_models[] in models.c.
 */
#ifndef MG_BENCH_MODELS_H
#define MG_BENCH_MODELS_H

#include <memgrad.h>
#include <memgrad_models.h>

/* What mg-bench asks a builder for. `depth` is the model's own notion of
 * depth (MLP: hidden layers; ResNet: residual blocks; U-Net: levels;
 * transformer: layers), `width` its width (MLP: hidden units; ResNet and
 * U-Net: base channels; transformer: d_model). */
typedef struct bench_model_cfg {
    int depth, batch, width;
    double dropout;   /* the MLP's and transformers' dropout p (--dropout) */
    mg_device device; /* the plan's (mg_plan_options.device): --device */
    int no_fusion;    /* mg_plan_options.no_fusion: --fusion no */
    int seq;          /* the gpt's sequence length (--seq); 0: GPT_SEQ */
} bench_model_cfg;

typedef struct bench_model_spec {
    const char *name;
    const char *summary; /* for --help: the shape behind the numbers */
    int default_batch, default_width;
    /* Builds the model (NULL with mg_last_error() set on failure) and
     * stores the bytes of one layer's output activation. Never NULL. */
    mg_model *(*build)(const bench_model_cfg *cfg, size_t *act_one_layer);
    int has_dropout; /* build reads cfg->dropout */
} bench_model_spec;

extern const bench_model_spec bench_models[];
extern const int bench_n_models;

/* The spec named `name`, or NULL. */
const bench_model_spec *bench_model_find(const char *name);
/* Comma-separated names of every model in the table. */
const char *bench_model_names(void);

#endif
