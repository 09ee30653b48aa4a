/*
 * models.c - mg-bench's model table: each entry maps (depth, batch, width)
 * onto a builder of memgrad_models.h with the other sizes fixed here.
 *
 * Defaults: activations must dominate weights, as in openai's ResNet plots
 * (batch 1280), or checkpointing has nothing to save:
 *   mlp          a layer holds batch x width activations against width x
 *                width weights: batch 1024, width 256 is 1 MiB against
 *                256 KiB (4x). Depth 1024 under policy none holds about
 *                1 GiB of activations, and a step takes seconds on 2 cores.
 *   resnet       32x32 images, 10 classes: a first-stage block holds batch
 *                x width x 32 x 32 activations (4 MiB at batch 64, width
 *                16) against 2 x 16 x 16 x 3 x 3 weights (18 KiB).
 *   unet         64x64 images (so depth <= 6 levels): level 0 holds batch x
 *                channels x 64 x 64 (1 MiB at batch 4, 16 channels).
 *   transformer  sequence 128, vocabulary 256, heads of 32 dims, no
 *                dropout (unless --dropout): a layer holds batch x 128 x
 * d_model activations plus batch x heads x 128 x 128 attention weights (2.5 MiB
 *                at batch 8, d_model 128) against 12 d_model^2 weights
 *                (768 KiB).
 *   gpt          the transformer with a tied head at sequence 512 (issue
 *                30's size: 6 layers, d_model 256, 8 heads, batch 8), or
 *                --seq T (issue 46: an imported GPT's T, to compare).
 */
#include "models.h"

#include <string.h>

#define BENCH_SEED 42
#define BENCH_CLASSES 10

static mg_model *build_mlp(const bench_model_cfg *c, size_t *act) {
    *act = (size_t)c->batch * (size_t)c->width * sizeof(float);
    return mg_model_mlp(c->depth, c->width, c->batch, c->width, BENCH_CLASSES,
                        c->dropout, MG_F32, BENCH_SEED);
}

#define RESNET_IMAGE 32
static mg_model *build_resnet(const bench_model_cfg *c, size_t *act) {
    *act = (size_t)c->batch * (size_t)c->width * RESNET_IMAGE * RESNET_IMAGE *
           sizeof(float);
    return mg_model_resnet(c->depth, c->width, c->batch, RESNET_IMAGE,
                           BENCH_CLASSES, MG_F32, BENCH_SEED);
}

#define UNET_IMAGE 64
static mg_model *build_unet(const bench_model_cfg *c, size_t *act) {
    *act = (size_t)c->batch * (size_t)c->width * UNET_IMAGE * UNET_IMAGE *
           sizeof(float);
    return mg_model_unet(c->depth, c->width, c->batch, UNET_IMAGE, MG_F32,
                         BENCH_SEED);
}

#define TRANSFORMER_SEQ 128
#define TRANSFORMER_VOCAB 256
static mg_model *build_transformer(const bench_model_cfg *c, size_t *act) {
    int heads = c->width >= 32 && c->width % 32 == 0 ? c->width / 32 : 1;
    *act =
        (size_t)c->batch * TRANSFORMER_SEQ * (size_t)c->width * sizeof(float);
    return mg_model_transformer(c->depth, c->width, heads, TRANSFORMER_SEQ,
                                c->batch, TRANSFORMER_VOCAB, c->dropout, 1,
                                MG_F32, BENCH_SEED);
}

/* GPT at issue 30's comparison size by default: sequence 512, heads of 32
 * dims (8 at d_model 256), vocabulary 256, tied head. */
#define GPT_SEQ 512
static mg_model *build_gpt(const bench_model_cfg *c, size_t *act) {
    int heads = c->width >= 32 && c->width % 32 == 0 ? c->width / 32 : 1;
    const int seq = c->seq ? c->seq : GPT_SEQ;
    *act = (size_t)c->batch * (size_t)seq * (size_t)c->width * sizeof(float);
    return mg_model_gpt(c->depth, c->width, heads, seq, c->batch,
                        TRANSFORMER_VOCAB, c->dropout, MG_F32, BENCH_SEED);
}

const bench_model_spec bench_models[] = {
    {"mlp", "MLP classifier, depth hidden layers of width units, 10 classes",
     1024, 256, build_mlp, 1},
    {"resnet",
     "pre-activation ResNet, depth blocks, 32x32 images, base "
     "width channels",
     64, 16, build_resnet, 0},
    {"unet", "U-Net, depth levels (<= 6), 64x64 images, width channels", 4, 16,
     build_unet, 0},
    {"transformer",
     "causal transformer, depth layers, d_model width, seq "
     "128, vocab 256",
     8, 128, build_transformer, 1},
    {"gpt",
     "GPT: causal, tied head, depth layers, d_model width, seq 512, "
     "vocab 256",
     8, 256, build_gpt, 1},
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
