/*
 * memgrad_models.h - reference model builders on top of memgrad.h: an MLP,
 * a CIFAR-style pre-activation ResNet, a U-Net, a transformer encoder and
 * GPT (causal, with a tied head).
 *
 * A builder makes a fresh graph holding one training step's forward pass:
 * its input, target, output (logits or prediction), scalar loss, and the
 * parameters as mg_param leaves. Like every memgrad graph it holds no data:
 * the caller binds memory at run time. mg_model_init_params fills caller
 * buffers with the model's initial weights, a pure function of the seed
 * (same seed, same weights, on every machine), and mg_model_init_data fills
 * an input and target batch the same way.
 *
 *   mg_model *m = mg_model_resnet(3, 8, 4, 16, 10, MG_F32, 42);
 *   if (!m) fprintf(stderr, "%s\n", mg_last_error());
 *   mg_checkpoints c = {.policy = MG_CKPT_MEMORY};
 *   mg_model_gradients(m, &c);            // m->grads[i] = d loss / d params[i]
 *   void *w[m->n_params];                 // one buffer per parameter, of
 *   ...                                   // mg_tensor_nbytes(m->g, params[i])
 *   mg_model_init_params(m, m->seed, w);
 *   ... bind m->input, m->target, m->params[i] -> w[i], compile the loss and
 *   m->grads, run, update w, run again ...
 *   mg_model_free(m);
 *
 * Errors follow memgrad.h: a builder returns NULL and mg_last_error() names
 * the argument ("mg_model_resnet: depth = 0 must be >= 1") or the op that
 * failed; a function returning mg_status sets the message on failure.
 *
 * Parameter names are stable and dotted ("block2.conv1.w", "ln_f.gamma");
 * mg_tensor_name(m->g, m->params[i]) gives them. Weights of linear layers are
 * [in, out] (y = x w + b); conv weights are [out, in, kh, kw].
 */
#ifndef MEMGRAD_MODELS_H
#define MEMGRAD_MODELS_H

#include "memgrad.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mg_model_kind {
    MG_MODEL_MLP = 0,
    MG_MODEL_RESNET = 1,
    MG_MODEL_UNET = 2,
    MG_MODEL_TRANSFORMER = 3,
    MG_MODEL_GPT = 4
} mg_model_kind;

typedef struct mg_model_impl mg_model_impl; /* private bookkeeping */

typedef struct mg_model {
    mg_graph *g; /* owned: freed by mg_model_free */
    mg_model_kind kind;
    mg_dtype dtype;    /* of the input (but token ids), params and loss */
    uint64_t seed;     /* the builder's seed (dropout ops are seeded from it) */
    mg_tensor input;   /* float data, or i32 token ids for the transformer */
    mg_tensor target;  /* i32 labels, or a float target for the U-Net */
    mg_tensor output;  /* logits [N, classes] / prediction [N, 1, H, W] */
    mg_tensor loss;    /* scalar */
    mg_tensor *params; /* n_params mg_param leaves, in creation order */
    int n_params;
    /* The output of every layer or block in order (the MLP's hidden
     * activations, each residual block's sum, each U-Net level, each
     * transformer layer): natural MG_CKPT_COLLECTION candidates. */
    mg_tensor *blocks;
    int n_blocks;
    /* NULL until mg_model_gradients; then grads[i] is d loss / d params[i]. */
    mg_tensor *grads;
    mg_model_impl *impl;
} mg_model;

/* MLP classifier: x [batch, in_features] -> (matmul + bias -> relu
 * [-> dropout(p)])^depth -> matmul + bias -> logits [batch, classes] ->
 * cross-entropy against i32 labels [batch]. depth = hidden layers >= 1;
 * dropout p in [0, 1), 0 for none. */
MG_API
mg_model *mg_model_mlp(int depth, int width, int batch, int in_features,
                       int classes, double dropout, mg_dtype dtype,
                       uint64_t seed);

/* CIFAR-style pre-activation ResNet (He et al. 2016, "Identity Mappings"):
 * x [batch, 3, image, image] -> conv3x3 stem (width channels) -> depth
 * residual blocks -> batchnorm, relu, global average pool, linear ->
 * logits [batch, classes] -> cross-entropy against i32 labels [batch].
 * A block is y = conv3x3(relu(bn(conv3x3_s(relu(bn(x)))))) + shortcut;
 * the blocks form min(depth, 3) stages of width, 2 width, 4 width channels,
 * and the first block of stages 2 and 3 has stride 2 and a projection
 * shortcut (conv1x1_s of relu(bn(x))); the others have identity shortcuts.
 * Batchnorm is in training mode (batch statistics), eps 1e-5; convs have
 * no bias. depth >= 1 blocks, image >= 1. */
MG_API
mg_model *mg_model_resnet(int depth, int width, int batch, int image,
                          int classes, mg_dtype dtype, uint64_t seed);

/* U-Net (Ronneberger et al. 2015, with padded convs): x [batch, 3, image,
 * image]; level i < depth of the encoder is two conv3x3 + bias + relu with
 * channels << i, whose output is kept as a skip connection, then a 2x2 max
 * pool; a bottleneck of two convs at channels << depth; then for each level
 * from the deepest up: nearest 2x upsampling, conv3x3 + bias + relu down to
 * that level's channels, concatenation with the level's skip along the
 * channel axis, and two conv3x3 + bias + relu. A final conv1x1 + bias gives
 * the prediction [batch, 1, image, image]; the loss is its mse against a
 * float target of the same shape. The skips leave no single tensor whose
 * removal separates the encoder from the decoder. depth >= 1 levels;
 * image must be a multiple of 2^depth. */
MG_API
mg_model *mg_model_unet(int depth, int channels, int batch, int image,
                        mg_dtype dtype, uint64_t seed);

/* Transformer encoder language model (pre-layernorm, GPT-2 style): token
 * ids i32 [batch, seq] -> token embedding [vocab, d_model] plus a learned
 * position embedding [seq, d_model] -> dropout -> layers blocks of
 *   h = h + dropout(attention(layernorm(h)) w_o + b_o)
 *   h = h + dropout(gelu(layernorm(h) w_1 + b_1) w_2 + b_2)   (4 d_model)
 * -> layernorm -> linear to logits [batch * seq, vocab] -> cross-entropy
 * against i32 labels [batch * seq]. attention is multi-head scaled
 * dot-product attention (mg_attention) over heads heads of d_model / heads,
 * causal if `causal`. layers, heads >= 1; heads divides d_model; dropout p
 * in [0, 1); layernorm eps 1e-5. */
MG_API
mg_model *mg_model_transformer(int layers, int d_model, int heads, int seq,
                               int batch, int vocab, double dropout, int causal,
                               mg_dtype dtype, uint64_t seed);

/* GPT (GPT-2's layout): mg_model_transformer with causal attention and the
 * head tied to the token embedding: logits = ln_f(h) tok_emb^T [batch *
 * seq, vocab], no head parameters of its own. Same arguments and checks. */
MG_API
mg_model *mg_model_gpt(int layers, int d_model, int heads, int seq, int batch,
                       int vocab, double dropout, mg_dtype dtype,
                       uint64_t seed);
/* Append the gradients of m->loss with respect to every parameter
 * (mg_gradients with the given checkpoints, NULL for plain backprop) and
 * store them in m->grads. Call it at most once per model. */
MG_API
mg_status mg_model_gradients(mg_model *m, const mg_checkpoints *checkpoints);

/* Fill param_data[i] (caller memory of mg_tensor_nbytes(m->g,
 * m->params[i]) bytes, in m->dtype) with the initial value of m->params[i]:
 * a pure function of (seed, i, the parameter's shape), the same on every
 * machine. The MLP's linear weights and the ResNet's and U-Net's conv
 * weights are uniform in +-sqrt(6 / fan_in) (He); the ResNet classifier's
 * and the transformer's linear weights in +-1/sqrt(fan_in); biases in
 * +-1/sqrt(fan_in) (PyTorch's default); norm scales are 1 and shifts 0;
 * embeddings are uniform in +-1. */
MG_API
mg_status mg_model_init_params(const mg_model *m, uint64_t seed,
                               void *const *param_data);

/* Fill caller buffers for m->input and m->target (either may be NULL to
 * skip it) with a batch that is a pure function of seed: float inputs
 * uniform in [-1, 1), labels and token ids uniform over the classes /
 * vocabulary, a U-Net target uniform in [0, 1). */
MG_API
mg_status mg_model_init_data(const mg_model *m, uint64_t seed, void *input,
                             void *target);

/* "mlp", "resnet", "unet", "transformer", "gpt" ("?" otherwise). */
MG_API
const char *mg_model_kind_name(mg_model_kind kind);

/* Free the model and its graph. NULL is accepted. */
MG_API
void mg_model_free(mg_model *m);

#ifdef __cplusplus
}
#endif
#endif
