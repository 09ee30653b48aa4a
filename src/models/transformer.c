/*
 * transformer.c - mg_model_transformer and mg_model_gpt: a pre-layernorm
 * transformer language model (token and learned position embeddings,
 * multi-head attention through mg_attention, the fused op, a gelu MLP,
 * residuals, dropout) with a cross-entropy loss over every position. The
 * transformer has a head of its own; GPT is causal with the head tied to
 * the token embedding (logits = h tok_emb^T, no bias), as GPT-2.
 */
#include "models_internal.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>

#define LN_EPS 1e-5

static mg_tensor layernorm(mg_model *m, mg_tensor x, int d,
                           const char *prefix) {
    char name[96];
    int64_t s[1] = {d};
    snprintf(name, sizeof name, "%s.gamma", prefix);
    mg_tensor gamma = mgm_param(m, name, 1, s, MGM_INIT_CONST, 1.0);
    snprintf(name, sizeof name, "%s.beta", prefix);
    mg_tensor beta = mgm_param(m, name, 1, s, MGM_INIT_CONST, 0.0);
    return mg_layernorm(m->g, x, gamma, beta, 1, LN_EPS);
}

/* [B, S, D] -> [B, H, S, D/H] */
static mg_tensor split_heads(mg_graph *g, mg_tensor x, int64_t b, int64_t s,
                             int64_t h, int64_t dh) {
    static const int perm[4] = {0, 2, 1, 3};
    int64_t sh[4] = {b, s, h, dh};
    return mg_permute(g, mg_reshape(g, x, 4, sh), perm);
}

static mg_model *transformer_build(const char *who, mg_model_kind kind,
                                   int layers, int d_model, int heads, int seq,
                                   int batch, int vocab, double dropout,
                                   int causal, mg_dtype dtype, uint64_t seed) {
    const int tied = kind == MG_MODEL_GPT;
    if (!mgm_check(layers >= 1, who, "layers = %d must be >= 1", layers) ||
        !mgm_check(d_model >= 1, who, "d_model = %d must be >= 1", d_model) ||
        /* the MLP is 4 d_model wide, an int */
        !mgm_check(d_model <= INT_MAX / 4, who,
                   "d_model = %d is too large: 4 d_model must fit an int",
                   d_model) ||
        !mgm_check(heads >= 1, who, "heads = %d must be >= 1", heads) ||
        !mgm_check(d_model % heads == 0, who,
                   "heads = %d must divide d_model = %d", heads, d_model) ||
        !mgm_check(seq >= 1, who, "seq = %d must be >= 1", seq) ||
        !mgm_check(batch >= 1, who, "batch = %d must be >= 1", batch) ||
        !mgm_check(vocab >= 1, who, "vocab = %d must be >= 1", vocab) ||
        !mgm_check(dropout >= 0 && dropout < 1, who,
                   "dropout = %g must be in [0, 1)", dropout) ||
        !mgm_check(mgi_dtype_is_float(dtype), who,
                   "dtype = %s must be f32, f64, bf16 or f16", mg_dtype_name(dtype)))
        return NULL;
    mg_model *m = mgm_new(kind, dtype, seed);
    if (!m) return NULL;
    mg_graph *g = m->g;
    m->impl->n_classes = vocab;
    const int64_t B = batch, S = seq, D = d_model, H = heads, Dh = D / H;
    const double wb = 1.0 / sqrt((double)D), wb4 = 1.0 / sqrt(4.0 * D);
    uint64_t drop_seed = seed * 1000003u;
    int64_t ids[2] = {B, S}, ls[1] = {B * S};
    m->input = mg_input(g, "tokens", MG_I32, 2, ids);
    m->target = mg_input(g, "labels", MG_I32, 1, ls);
    int64_t es[2] = {vocab, D}, ps[2] = {S, D};
    mg_tensor tok = mgm_param(m, "tok_emb", 2, es, MGM_INIT_UNIFORM, 1.0);
    mg_tensor pos = mgm_param(m, "pos_emb", 2, ps, MGM_INIT_UNIFORM, 1.0);
    mg_tensor h = mg_add(g, mg_embedding(g, tok, m->input), pos);
    if (dropout > 0) h = mg_dropout(g, h, dropout, drop_seed++);
    int64_t bsd[3] = {B, S, D};
    static const int unperm[4] = {0, 2, 1, 3};
    for (int l = 0; l < layers; l++) {
        char p[64], q[96];
        snprintf(p, sizeof p, "layer%d", l);
        snprintf(q, sizeof q, "%s.ln1", p);
        mg_tensor a = layernorm(m, h, d_model, q);
        snprintf(q, sizeof q, "%s.attn.q", p);
        mg_tensor qh = split_heads(g, mgm_linear(m, a, d_model, d_model, q, wb),
                                   B, S, H, Dh);
        snprintf(q, sizeof q, "%s.attn.k", p);
        mg_tensor kh = split_heads(g, mgm_linear(m, a, d_model, d_model, q, wb),
                                   B, S, H, Dh);
        snprintf(q, sizeof q, "%s.attn.v", p);
        mg_tensor vh = split_heads(g, mgm_linear(m, a, d_model, d_model, q, wb),
                                   B, S, H, Dh);
        mg_tensor o = mg_attention(g, qh, kh, vh, causal, 0.0);
        o = mg_reshape(g, mg_permute(g, o, unperm), 3, bsd);
        snprintf(q, sizeof q, "%s.attn.o", p);
        o = mgm_linear(m, o, d_model, d_model, q, wb);
        if (dropout > 0) o = mg_dropout(g, o, dropout, drop_seed++);
        h = mg_add(g, h, o);
        snprintf(q, sizeof q, "%s.ln2", p);
        a = layernorm(m, h, d_model, q);
        snprintf(q, sizeof q, "%s.mlp.fc1", p);
        mg_tensor f = mg_gelu(g, mgm_linear(m, a, d_model, 4 * d_model, q, wb));
        snprintf(q, sizeof q, "%s.mlp.fc2", p);
        f = mgm_linear(m, f, 4 * d_model, d_model, q, wb4);
        if (dropout > 0) f = mg_dropout(g, f, dropout, drop_seed++);
        h = mgm_block(m, mg_add(g, h, f));
    }
    h = layernorm(m, h, d_model, "ln_f");
    int64_t flat[2] = {B * S, D};
    h = mg_reshape(g, h, 2, flat);
    m->output = tied ? mg_matmul(g, h, tok, 0, 1)
                     : mgm_linear(m, h, d_model, vocab, "head", wb);
    m->loss = mg_cross_entropy(g, m->output, m->target);
    return mgm_finish(m, who);
}

mg_model *mg_model_transformer(int layers, int d_model, int heads, int seq,
                               int batch, int vocab, double dropout, int causal,
                               mg_dtype dtype, uint64_t seed) {
    return transformer_build("mg_model_transformer", MG_MODEL_TRANSFORMER,
                             layers, d_model, heads, seq, batch, vocab, dropout,
                             causal, dtype, seed);
}

mg_model *mg_model_gpt(int layers, int d_model, int heads, int seq, int batch,
                       int vocab, double dropout, mg_dtype dtype,
                       uint64_t seed) {
    return transformer_build("mg_model_gpt", MG_MODEL_GPT, layers, d_model,
                             heads, seq, batch, vocab, dropout, 1, dtype, seed);
}
