#!/usr/bin/env python3
"""gpt_export.py - exports a nanoGPT-style language model with
torch.onnx.export (training mode, opset 17, no constant folding) at the
shape of mg-bench's GPT (bench/models.c build_gpt): token and position
embeddings, pre-norm blocks of causal self-attention (one qkv Linear split
three ways, heads of 32 dims by view/transpose, masked_fill, softmax) and a
GELU MLP of 4 d, ln_f and a head tied to the token embedding; the output is
the logits [batch * seq, vocab], as memgrad-onnx step wants them (its loss
is their mean cross-entropy). GELU: exact (nn.GELU's default, erf) or tanh
(GPT-2's, and mg_model_gpt's mg_gelu); OPSET (default 17): at 20 torch
exports GELU as one Gelu node, before that as the erf or tanh formula.
bench/onnx/gpt_vs_builder.sh times it beside the builder's GPT of the same
shape.

    python3 bench/onnx/gpt_export.py OUT.onnx LAYERS D SEQ BATCH VOCAB
                                     [exact|tanh] [OPSET]
"""
import math
import sys
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F


class GPT(nn.Module):
    def __init__(self, layers, d, seq, vocab, gelu="exact"):
        super().__init__()
        self.gelu = "none" if gelu == "exact" else gelu
        self.d, self.h = d, max(1, d // 32)
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(
            nn.ModuleDict(dict(
                ln1=nn.LayerNorm(d), qkv=nn.Linear(d, 3 * d), proj=nn.Linear(d, d),
                ln2=nn.LayerNorm(d), fc1=nn.Linear(d, 4 * d), fc2=nn.Linear(4 * d, d)))
            for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.register_buffer("causal", torch.triu(torch.ones(seq, seq, dtype=torch.bool), 1))

    def forward(self, x):
        b, t = x.shape
        h = self.wte(x) + self.wpe(torch.arange(t))
        dh = self.d // self.h
        for blk in self.blocks:
            q, k, v = blk["qkv"](blk["ln1"](h)).split(self.d, dim=-1)
            q = q.view(b, t, self.h, dh).transpose(1, 2)
            k = k.view(b, t, self.h, dh).transpose(1, 2)
            v = v.view(b, t, self.h, dh).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) / math.sqrt(dh)
            att = att.masked_fill(self.causal[:t, :t], float("-inf")).softmax(-1)
            o = (att @ v).transpose(1, 2).reshape(b, t, self.d)
            h = h + blk["proj"](o)
            f = F.gelu(blk["fc1"](blk["ln2"](h)), approximate=self.gelu)
            h = h + blk["fc2"](f)
        h = self.ln_f(h)
        return (h @ self.wte.weight.t()).reshape(b * t, -1)


def main():
    out = sys.argv[1]
    layers, d, seq, batch, vocab = (int(a) for a in sys.argv[2:7])
    gelu = sys.argv[7] if len(sys.argv) > 7 else "exact"
    opset = int(sys.argv[8]) if len(sys.argv) > 8 else 17
    if gelu not in ("exact", "tanh"):
        sys.exit("gpt_export.py: GELU is exact or tanh, not %r" % gelu)
    torch.manual_seed(0)
    warnings.filterwarnings("ignore")
    model = GPT(layers, d, seq, vocab, gelu).train()
    x = torch.randint(0, vocab, (batch, seq))
    torch.onnx.export(model, (x,), out, dynamo=False, opset_version=opset,
                      training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False, input_names=["x"], output_names=["y"])


if __name__ == "__main__":
    main()
