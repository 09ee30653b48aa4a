"""The models of the ATen capture's tests (test_aten_zoo.py,
test_aten_capture.py): Hugging Face and timm models at small
configurations with random init, each a function returning (model,
example inputs). Dropout is 0 where the comparison needs the same values
(memgrad's masks are its own).

NAMED are the models issue 45 names; UNNAMED are families no issue or
test names otherwise, to show that the capture is general rather than a
list (their ops come from the same table, with nothing model-specific).
"""
import pytest

V = 128


def _hf(name, **cfg):
    T = pytest.importorskip("transformers")
    config = getattr(T, name + "Config")(**cfg)
    for k in ("resid_pdrop", "embd_pdrop", "attn_pdrop", "dropout",
              "attention_dropout", "activation_dropout", "hidden_dropout_prob",
              "attention_probs_dropout_prob", "hidden_dropout",
              "dropout_rate", "classifier_dropout"):
        if hasattr(config, k):
            setattr(config, k, 0.0)
    return config


def _ids():
    import torch
    return (torch.randint(0, V, (2, 12)),)


def _img(n=32, batch=2):
    import torch
    return (torch.randn(batch, 3, n, n),)


def _named(fn, name):
    fn.__name__ = name
    return fn


def _causal(cls, **cfg):
    def make():
        T = pytest.importorskip("transformers")
        return getattr(T, cls + "ForCausalLM")(_hf(cls, **cfg)), _ids()
    return make


def _llama_like(name, **extra):
    cfg = dict(num_hidden_layers=2, hidden_size=32, intermediate_size=64,
               num_attention_heads=4, num_key_value_heads=4, vocab_size=V,
               max_position_embeddings=32)
    cfg.update(extra)
    return _named(_causal(name, **cfg), name.lower())


def gpt2():
    T = pytest.importorskip("transformers")
    return T.GPT2LMHeadModel(_hf("GPT2", n_layer=2, n_embd=32, n_head=4,
                                 vocab_size=V, n_positions=32)), _ids()


llama = _llama_like("Llama")
# grouped-query attention: 4 query heads, 2 key/value heads
qwen2 = _llama_like("Qwen2", num_key_value_heads=2)
# a mixture of experts: Module refuses its data-dependent routing
# clearly; torch.compile runs the routing in eager and the rest in memgrad
mixtral = _llama_like("Mixtral", num_hidden_layers=1, num_key_value_heads=2,
                      num_local_experts=4, num_experts_per_tok=2,
                      # the experts as a loop of matmuls: the default,
                      # torch._grouped_mm, has no float64 kernel
                      experts_implementation="eager")


def bert():
    T = pytest.importorskip("transformers")
    return T.BertForMaskedLM(_hf(
        "Bert", num_hidden_layers=2, hidden_size=32, intermediate_size=64,
        num_attention_heads=4, vocab_size=V,
        max_position_embeddings=32)), _ids()


def bart():
    T = pytest.importorskip("transformers")
    return T.BartForConditionalGeneration(_hf(
        "Bart", encoder_layers=1, decoder_layers=1, d_model=32,
        encoder_ffn_dim=64, decoder_ffn_dim=64, encoder_attention_heads=4,
        decoder_attention_heads=4, vocab_size=V,
        max_position_embeddings=32)), _ids()


def vit():
    T = pytest.importorskip("transformers")
    return T.ViTForImageClassification(_hf(
        "ViT", num_hidden_layers=2, hidden_size=32, intermediate_size=64,
        num_attention_heads=4, image_size=32, patch_size=8)), _img()


def _timm(name, n=32, batch=2, **kw):
    def make():
        timm = pytest.importorskip("timm")
        return timm.create_model(name, num_classes=10, **kw), _img(n, batch)
    return _named(make, name)


# ------------------------------------------------------------ not named
# GPT-NeoX: partial rotary embeddings, parallel attention and MLP
gpt_neox = _named(_causal(
    "GPTNeoX", num_hidden_layers=2, hidden_size=32, intermediate_size=64,
    num_attention_heads=4, vocab_size=V, max_position_embeddings=32,
    rotary_pct=0.5), "gpt_neox")
# Phi: partial rotary, gelu_new, a dense head with a bias
phi = _named(_causal(
    "Phi", num_hidden_layers=2, hidden_size=32, intermediate_size=64,
    num_attention_heads=4, vocab_size=V, max_position_embeddings=32,
    partial_rotary_factor=0.5), "phi")
