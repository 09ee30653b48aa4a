#!/usr/bin/python3
"""compare_torch.py - memgrad beside PyTorch on the CPU, on the same work.

Runs with Debian's python3-torch (bench/setup.sh installs it). Invoke it as
/usr/bin/python3 (the shebang does): a `python3` earlier on PATH may be an
interpreter without torch.

    /usr/bin/python3 bench/compare_torch.py [--mg-bench build-bench/mg-bench]
        [--model mlp|resnet|transformer|gpt] [--depths 64,1024] [--batch B] [--width W]
        [--repeat 3] [--threads 1] [--csv bench/results/torch-cpu.csv]
        [--append]

bench/run.sh runs it as bench/results/README.md records: once per model,
the second run with --append, so that one CSV holds both (column `model`).

Models (depth, batch and width mean what they mean to mg-bench, with its
defaults; bench/models.c):

  mlp      mg_model_mlp: depth hidden layers of width units (in_features =
           width), then a 10-class linear layer; default batch 1024, width
           256. n = depth + 1 layers.
  resnet   mg_model_resnet: CIFAR-style pre-activation ResNet on 32x32x3
           images, a conv stem of width channels, depth residual blocks in
           min(depth, 3) stages, batchnorm (batch statistics), relu, global
           average pool, 10-class linear layer; default batch 64, width 16.
           n = depth blocks (the stem goes with the first, the head with
           the last). The PyTorch blocks run tests/torch_crosscheck.py's
           definition (its bn_relu and block body: functional conv2d and
           batch_norm); the f64 worker also runs its whole-model resnet on
           the same weights and the driver stops if the two differ by more
           than 1e-9 (they have agreed exactly).
  gpt      mg_model_gpt (issue 30): token and position embeddings, depth
           causal pre-norm blocks (attention over heads of 32 dims, a gelu
           MLP of 4 width), ln_f and a head tied to the token embedding;
           sequence 512, vocabulary 256; default batch 8, width 256.
           torch-checkpoint checkpoints each block (depth segments). The
           PyTorch layers are tests/torch_crosscheck.py's transformer_layer
           (torch 1.13 has no fused attention: softmax(Q K^T / sqrt(d)) V);
           memgrad's attention is its fused op.

For each depth it runs four cases, each in its own fresh process:

  torch-plain       plain backprop in PyTorch
  torch-checkpoint  torch.utils.checkpoint.checkpoint_sequential with
                    round(sqrt(n)) segments of the model's n layers or
                    blocks (1 segment, that is no checkpointing, for n < 3)
  memgrad-none      mg-bench step --policy none
  memgrad-memory    mg-bench step --policy memory

Same model, same weights, same input. This script draws the input, the
labels and the weights from numpy with a fixed seed and writes them to one
raw file in memgrad's parameter order (mg_model.params, creation order:
the MLP's x f32 [batch, width], labels int32 [batch], then fc0.w [in, out]
f32, fc0.b, fc1.w, ...; the ResNet's x [batch, 3, 32, 32], labels, stem.w,
block0.bn1.gamma, ...: see mlp_layout and resnet_layout), initialised as
mg_model_init_params would (same distributions, another generator). Both
sides read that file: `mg-bench step --load FILE --save-grads OUT` and the
PyTorch worker (nn.Linear stores the transpose of memgrad's [in, out]
weight, so it loads w.T and writes grad.T back; the ResNet's conv weights
are [out, in, kh, kw] on both sides). Gradients come back in the same
layout and are compared here.

What a step is, on both sides: forward and backward of the mean
cross-entropy, gradients of every weight and bias written to buffers that
exist before the step (memgrad binds them as caller memory; PyTorch's .grad
tensors are allocated and zeroed before timing, and zeroed again outside the
timed region before each step, because PyTorch accumulates into .grad). No
optimizer update. One untimed first step, then --repeat timed steps
(time.perf_counter / CLOCK_MONOTONIC); the median is reported.

Threads, for fairness: both sides use the same OpenBLAS (Debian's torch
links libblas.so.3, which is OpenBLAS here, as memgrad does). Each worker
process gets OPENBLAS_NUM_THREADS=OMP_NUM_THREADS=--threads, and the PyTorch
worker also calls torch.set_num_threads(same). The default is 1: on the
2-core machine the results were taken on, 2 threads made PyTorch's OpenMP
pool and OpenBLAS's pthread pool spin against each other (16 layers, with
OpenBLAS's Prescott kernels: 800 ms a step at 2 threads, 290 ms with
OMP_WAIT_POLICY=PASSIVE, 200 ms at 1 thread), which measures the thread
pools, not the work. memgrad's
elementwise kernels are single-threaded anyway.

Memory, measured two ways:

  rss_delta_bytes   whole-process peak RSS during one step minus RSS just
                    before it, on both sides. Each case runs in its own
                    process, whose weights, inputs and gradient buffers are
                    resident before the measured step and which has run a
                    tiny matmul forward/backward (OpenBLAS's and autograd's
                    one-time allocations). The peak is VmHWM after resetting
                    it through /proc/self/clear_refs (Linux >= 4.0).
                    memgrad: its first step, when the pool starts empty (the
                    pool keeps what it allocates, so RSS follows its bytes).
                    PyTorch frees every tensor to glibc, whose heap keeps
                    freed blocks as a fragmented high-water mark (a second
                    plain step at depth 64 grew RSS by 96 MiB for 66 MiB of
                    activations). So PyTorch's memory is measured in a
                    second process of its own, which first tells glibc
                    (mallopt) to map every block of 64 KiB or more on its own
                    and unmap it when freed: RSS then follows the bytes in
                    use. The timed process keeps glibc's defaults, because
                    that setting makes every allocation fault its pages in
                    again and would slow PyTorch's steps.
                    RSS counts pages: a user's view, not exact bytes.
  activation_peak_bytes
                    memgrad: the pool's measured peak in one step (every
                    activation, recomputed value and temporary). PyTorch: the
                    peak of bytes held by autograd's saved tensors, tracked
                    with torch.autograd.graph.saved_tensors_hooks: a tensor's
                    storage counts from when autograd saves it until the
                    graph releases it (parameters excluded; a storage saved
                    twice counts once), including tensors saved while
                    checkpoint_sequential recomputes a segment. This leaves
                    out PyTorch's transient outputs and gradients, so it is a
                    lower bound on PyTorch's activation memory, measured in a
                    separate untimed step of the memory process.

Gradient check: for every parameter tensor the normwise relative
difference ||g - g_ref|| / ||g_ref||, largest over all parameters:
max_rel_grad_diff against PyTorch plain backprop in f32 (what the issue
asks), and max_rel_grad_diff_f64 against PyTorch plain backprop in f64 (a
separate process), which says whose f32 rounding the difference is. An
elementwise max|g - g_ref| / max|g_ref| would be dominated by ReLU units
whose pre-activation is within rounding of zero and flips between two f32
computations; that is not a bug on either side. Even normwise, one such
flip moves a gradient by that unit's whole contribution, and the ResNet is
more exposed than the MLP: a batchnorm output whose pre-activation sits
within rounding of zero flips the relu after it, and a small batch makes
one unit's share of a batchnorm parameter's gradient large (ResNet depth 4,
batch 8: one unit of block1.bn2 at 3.6e-6 in f64 moves block1.bn2.beta by
8e-3 relative, while the parameters downstream of that unit, block1.conv2
onward, agree to 1e-5).
grad_diff_vs_own_plain
compares each side's checkpointed gradients with its own plain backprop
(0: bit for bit the same).

The results table goes to stdout and --csv (default
bench/results/torch-cpu.csv); progress to stderr.

On a GPU (--device cuda; issue 5)
---------------------------------
The same models, weights, input and four cases, on CUDA: PyTorch runs on
torch.cuda with TF32 off (torch.backends.cuda.matmul.allow_tf32 = False,
torch.backends.cudnn.allow_tf32 = False), memgrad runs `mg-bench step
--device cuda` (its cuBLAS handle has TF32 off too), so both compute in
IEEE float32. The f64 reference runs on the GPU as well.

  time              PyTorch: torch.cuda.Event pairs around each step,
                    synchronised on the end event. memgrad: mg-bench's
                    event_ms (cudaEvent pairs on the default stream around
                    mg_exec_run, which synchronises before it returns);
                    its wall-clock time_ms_median if events are missing.
  activation_peak_bytes
                    PyTorch: torch.cuda.max_memory_allocated() during one
                    step (after reset_peak_memory_stats) minus
                    torch.cuda.memory_allocated() just before it, when the
                    weights, inputs and zeroed .grad tensors are resident:
                    the bytes the step itself allocates. memgrad: its pool's
                    measured peak in one step, which likewise excludes the
                    caller's parameters, gradients and inputs.
  device_peak_bytes PyTorch: torch.cuda.max_memory_allocated() itself;
                    memgrad: pool peak + parameters + gradient buffers +
                    inputs (its caller memory, all cudaMalloc'ed by
                    mg-bench). Neither counts the CUDA context, cuBLAS
                    workspaces or the caching allocators' unused reserve.
  predicted_peak_bytes, measured_peak_bytes
                    memgrad's rows only (empty for PyTorch's): the plan's
                    predicted pool peak and the pool's measured peak in the
                    same step (mg-bench step's predicted_peak_bytes and
                    peak_bytes); scripts/check-figures.sh requires them
                    equal. Files made before 2026-11-29 lack both columns.

The GPU CSV (default bench/results/torch-cuda.csv) has the CPU one's
columns with threads and the RSS columns replaced by device, gpu,
act_ratio_vs_torch and device_peak_bytes. Without a CUDA device (torch
reports none) --device cuda exits 1 and says so; the CPU path does not
import torch.cuda at all.
"""

import argparse
import csv
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MLP_CLASSES = 10  # as in bench/models.c
RESNET_CLASSES = 10
RESNET_IMAGE = 32  # bench/models.c's RESNET_IMAGE


# --------------------------------------------------------------- the models
# Each model: its layout (what `mg-bench step --load` reads: input, target,
# then the parameters in memgrad's creation order, with how each is drawn)
# and how to build the PyTorch side from those arrays. A model's depth,
# batch and width mean what they mean to mg-bench (bench/models.h).

def mlp_layout(depth, batch, width):
    """[(name, shape, dtype, init)] in memgrad's file order: mg_model_mlp's
    input, target and parameters (memgrad_models.h), with in_features =
    width as bench/models.c builds it: depth hidden layers, then the
    classifier. init as mg_model_init_params and mg_model_init_data draw
    them (draw() uses another generator): x U(-1,1), labels in [0,10),
    weights U(+-sqrt(6/fan_in)), biases U(+-1/sqrt(fan_in)), fan_in = width."""
    out = [("x", (batch, width), "float32", ("uniform", 1.0)),
           ("labels", (batch,), "int32", ("labels", MLP_CLASSES))]
    wb, bb = math.sqrt(6.0 / width), 1.0 / math.sqrt(width)
    for layer in range(depth + 1):
        n_out = MLP_CLASSES if layer == depth else width
        out.append((f"fc{layer}.w", (width, n_out), "float32",
                    ("uniform", wb)))
        out.append((f"fc{layer}.b", (n_out,), "float32", ("uniform", bb)))
    return out


def draw(layout, seed):
    """The arrays of `layout`, drawn in order from one numpy generator:
    ("uniform", b) is U(-b, b), ("labels", k) integers in [0, k),
    ("const", v) all v."""
    import numpy as np
    rng = np.random.default_rng(seed)
    out = []
    for name, shape, dtype, (kind, v) in layout:
        if kind == "labels":
            a = rng.integers(0, v, shape)
        elif kind == "uniform":
            a = rng.uniform(-v, v, shape)
        else:
            a = np.full(shape, v)
        out.append((name, a.astype(dtype)))
    return out


def mlp_torch(depth, batch, width, arrays, dropout=0.0):
    """(list of layer modules, x, labels, [(param, memgrad layout fn)],
    reference): the modules run in sequence give the logits; reference is
    None or an independent definition of the loss, reference(params by
    name, x, labels), that the f64 worker checks the modules against.
    dropout > 0: an nn.Dropout after each relu, as mg_model_mlp's (its
    masks are PyTorch's own, so losses and gradients differ from
    memgrad's: for bench/pareto.py's memory and time only)."""
    import torch
    from torch import nn
    x = torch.from_numpy(arrays[0][1].copy())
    labels = torch.from_numpy(arrays[1][1].astype("int64"))
    layers, params = [], []
    for layer in range(depth + 1):
        w = arrays[2 + 2 * layer][1]
        b = arrays[3 + 2 * layer][1]
        lin = nn.Linear(w.shape[0], w.shape[1])
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(w.T.copy()))
            lin.bias.copy_(torch.from_numpy(b))
        params.append((lin.weight, lambda g: g.t()))
        params.append((lin.bias, lambda g: g))
        hidden = [lin, nn.ReLU()] + ([nn.Dropout(dropout)] if dropout else [])
        layers.append(nn.Sequential(*hidden) if layer < depth else lin)
    return layers, x, labels, params, None


def resnet_blocks(depth, width):
    """[(cin, cout, stride)] of mg_model_resnet's blocks (src/models/
    resnet.c; the same loop as tests/torch_crosscheck.py's resnet): min(depth,
    3) stages of width, 2 width, 4 width channels, stride 2 and a
    projection shortcut where the stage changes."""
    stages, cin, prev, out = min(depth, 3), width, 0, []
    for b in range(depth):
        stage = b * stages // depth
        cout = width << stage
        out.append((cin, cout, 2 if stage != prev else 1))
        cin, prev = cout, stage
    return out


def resnet_layout(depth, batch, width):
    """mg_model_resnet(depth, width, batch, RESNET_IMAGE, 10) as bench/
    models.c builds it: x [batch, 3, 32, 32], labels, then stem.w, for each
    block bn1.gamma, bn1.beta, [proj.w], conv1.w, bn2.gamma, bn2.beta,
    conv2.w, then bn_final.gamma, bn_final.beta, fc.w [in, out], fc.b.
    Conv weights [out, in, kh, kw] U(+-sqrt(6/fan_in)); batchnorm gamma 1,
    beta 0; fc weight and bias U(+-1/sqrt(in))."""
    im = RESNET_IMAGE
    out = [("x", (batch, 3, im, im), "float32", ("uniform", 1.0)),
           ("labels", (batch,), "int32", ("labels", RESNET_CLASSES))]

    def conv(name, cout, cin, k):
        out.append((name, (cout, cin, k, k), "float32",
                    ("uniform", math.sqrt(6.0 / (cin * k * k)))))

    def bn(prefix, c):
        out.append((prefix + ".gamma", (c,), "float32", ("const", 1.0)))
        out.append((prefix + ".beta", (c,), "float32", ("const", 0.0)))

    conv("stem.w", width, 3, 3)
    c = width
    for b, (cin, cout, stride) in enumerate(resnet_blocks(depth, width)):
        bn(f"block{b}.bn1", cin)
        if stride != 1 or cin != cout:
            conv(f"block{b}.proj.w", cout, cin, 1)
        conv(f"block{b}.conv1.w", cout, cin, 3)
        bn(f"block{b}.bn2", cout)
        conv(f"block{b}.conv2.w", cout, cout, 3)
        c = cout
    bn("bn_final", c)
    bound = 1.0 / math.sqrt(c)
    out.append(("fc.w", (c, RESNET_CLASSES), "float32", ("uniform", bound)))
    out.append(("fc.b", (RESNET_CLASSES,), "float32", ("uniform", bound)))
    return out


def crosscheck():
    """tests/torch_crosscheck.py, which rebuilds every memgrad model in
    PyTorch for the test suite: its bn_relu and resnet are reused here."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "torch_crosscheck", os.path.join(ROOT, "tests", "torch_crosscheck.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def resnet_torch(depth, batch, width, arrays):
    """The ResNet as a list of `depth` modules, one per residual block (the
    stem folded into the first, batchnorm, pool and classifier into the
    last), so that checkpoint_sequential segments the blocks. Each block
    computes tests/torch_crosscheck.py's loop body with its bn_relu
    (functional conv2d, training-mode batch_norm); the f64 worker checks
    the whole against torch_crosscheck.resnet. Parameters are owned by the
    blocks (so .double() converts them) and kept in memgrad's layout."""
    import torch
    from torch import nn
    import torch.nn.functional as F
    xc = crosscheck()
    x = torch.from_numpy(arrays[0][1].copy())
    labels = torch.from_numpy(arrays[1][1].astype("int64"))
    plist = {name: nn.Parameter(torch.from_numpy(a.copy()))
             for name, a in arrays[2:]}
    blocks = resnet_blocks(depth, width)

    class Block(nn.Module):
        def __init__(self, b):
            super().__init__()
            self.b = b
            mine = [n for n in plist
                    if n.startswith(f"block{b}.")
                    or (b == 0 and n.startswith("stem."))
                    or (b == depth - 1 and n.split(".")[0] in ("bn_final",
                                                               "fc"))]
            self.names = mine
            self.ps = nn.ParameterList([plist[n] for n in mine])

        def forward(self, h):
            p = dict(zip(self.names, self.ps))
            b = self.b
            cin, cout, stride = blocks[b]
            if b == 0:
                h = F.conv2d(h, p["stem.w"], padding=1)
            a = xc.bn_relu(F, h, p, f"block{b}.bn1")
            shortcut = h
            if stride != 1 or cin != cout:
                shortcut = F.conv2d(a, p[f"block{b}.proj.w"], stride=stride)
            o = F.conv2d(a, p[f"block{b}.conv1.w"], stride=stride, padding=1)
            o = xc.bn_relu(F, o, p, f"block{b}.bn2")
            o = F.conv2d(o, p[f"block{b}.conv2.w"], padding=1)
            h = o + shortcut
            if b == depth - 1:
                h = xc.bn_relu(F, h, p, "bn_final").mean(dim=(2, 3))
                h = h @ p["fc.w"] + p["fc.b"]
            return h

    layers = [Block(b) for b in range(depth)]
    params = [(plist[name], lambda g: g) for name, _ in arrays[2:]]


    def reference(p, x, y):  # torch_crosscheck's whole-model definition
        return xc.resnet(F, torch, [depth, width], p, x, y)
    return layers, x, labels, params, reference


TRANSFORMER_SEQ = 128  # bench/models.c's TRANSFORMER_SEQ and _VOCAB
TRANSFORMER_VOCAB = 256


def transformer_cfg(depth, batch, width):
    """tests/torch_crosscheck.py's transformer cfg for mg-bench's
    transformer: heads of 32 dims (one head below 32), causal."""
    heads = width // 32 if width >= 32 and width % 32 == 0 else 1
    return [depth, width, heads, TRANSFORMER_SEQ, batch, TRANSFORMER_VOCAB, 1]


def transformer_layout(depth, batch, width, seq=TRANSFORMER_SEQ, head=True):
    """mg_model_transformer (src/models/transformer.c) as bench/models.c
    builds it: tokens [batch, 128] and labels [batch * 128] in [0, 256),
    tok_emb, pos_emb U(+-1), then per layer ln1, attn.q/k/v/o, ln2,
    mlp.fc1, mlp.fc2 (linear weights [in, out] U(+-1/sqrt(in)) but fc2's
    U(+-1/sqrt(4 width)), biases U(+-1/sqrt(in)); layernorm gamma 1,
    beta 0), ln_f and head (mg_model_gpt: seq 512 and no head, which is
    tied to tok_emb)."""
    S, V, D = seq, TRANSFORMER_VOCAB, width
    out = [("tokens", (batch, S), "int32", ("labels", V)),
           ("labels", (batch * S,), "int32", ("labels", V)),
           ("tok_emb", (V, D), "float32", ("uniform", 1.0)),
           ("pos_emb", (S, D), "float32", ("uniform", 1.0))]

    def ln(prefix):
        out.append((prefix + ".gamma", (D,), "float32", ("const", 1.0)))
        out.append((prefix + ".beta", (D,), "float32", ("const", 0.0)))

    def lin(prefix, n_in, n_out, bound):
        out.append((prefix + ".w", (n_in, n_out), "float32",
                    ("uniform", bound)))
        out.append((prefix + ".b", (n_out,), "float32",
                    ("uniform", 1.0 / math.sqrt(n_in))))

    wb = 1.0 / math.sqrt(D)
    for layer in range(depth):
        p = f"layer{layer}"
        ln(p + ".ln1")
        for part in "qkv":
            lin(f"{p}.attn.{part}", D, D, wb)
        lin(p + ".attn.o", D, D, wb)
        ln(p + ".ln2")
        lin(p + ".mlp.fc1", D, 4 * D, wb)
        lin(p + ".mlp.fc2", 4 * D, D, 1.0 / math.sqrt(4.0 * D))
    ln("ln_f")
    if head:
        lin("head", D, V, wb)
    return out


GPT_SEQ = 512  # bench/models.c's GPT_SEQ


def gpt_cfg(depth, batch, width):
    """transformer_cfg at GPT's sequence length."""
    cfg = transformer_cfg(depth, batch, width)
    cfg[3] = GPT_SEQ
    return cfg


def gpt_layout(depth, batch, width):
    """mg_model_gpt as bench/models.c builds it: the transformer's layout
    at sequence 512, without a head."""
    return transformer_layout(depth, batch, width, GPT_SEQ, head=False)


def gpt_head(F, cfg, p, h):
    """ln_f and the tied head: logits = ln_f(h) tok_emb^T, no bias."""
    _, d, _, seq, batch, _, _ = cfg
    xc = crosscheck()
    return xc._ln(F, d, p, h, "ln_f").reshape(batch * seq, d) @ \
        p["tok_emb"].t()


# --attention, as the worker was given it
ATTENTION = ["sdpa"]


def transformer_torch(depth, batch, width, arrays, gpt=False):
    """The transformer as an embedding module and one module per layer
    (ln_f and the head folded into the last), so that checkpoint_sequential
    segments the layers. Attention is PyTorch's fused
    scaled_dot_product_attention (causal), as a PyTorch user writes it
    (torch < 2.0, which has none: softmax(Q K^T / sqrt(d)) V);
    the f64 worker checks the whole against torch_crosscheck.transformer's
    explicit softmax(Q K^T / sqrt(d)) V."""
    import torch
    from torch import nn
    import torch.nn.functional as F
    xc = crosscheck()
    cfg = (gpt_cfg if gpt else transformer_cfg)(depth, batch, width)
    head = (lambda F_, cfg_, p_, h_: gpt_head(F_, cfg_, p_, h_)) if gpt \
        else xc.transformer_head
    x = torch.from_numpy(arrays[0][1].astype("int64"))
    labels = torch.from_numpy(arrays[1][1].astype("int64"))
    plist = {name: nn.Parameter(torch.from_numpy(a.copy()))
             for name, a in arrays[2:]}

    def attend(q, k, v):
        if ATTENTION[0] == "sdpa" and \
                hasattr(F, "scaled_dot_product_attention"):  # torch >= 2.0
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return xc.attention(torch, q, k, v)

    class Part(nn.Module):
        def __init__(self, names):
            super().__init__()
            self.names = names
            self.ps = nn.ParameterList([plist[n] for n in names])

        def p(self):
            return dict(zip(self.names, self.ps))

    class Embed(Part):
        def forward(self, tokens):
            p = self.p()
            return F.embedding(tokens, p["tok_emb"]) + p["pos_emb"]

    class Layer(Part):
        def __init__(self, names, layer):
            super().__init__(names)
            self.layer = layer

        def forward(self, h):
            p = self.p()
            h = xc.transformer_layer(F, torch, cfg, p, h, self.layer, attend)
            if self.layer == depth - 1:
                h = head(F, cfg, p, h)
            return h

    names = [n for n, _ in arrays[2:]]
    layers = [Embed(["tok_emb", "pos_emb"])]
    for layer in range(depth):
        mine = [n for n in names if n.startswith(f"layer{layer}.")]
        if layer == depth - 1:
            mine += [n for n in names if n.split(".")[0] in ("ln_f", "head")]
            if gpt:  # the tied head reads the embedding again
                mine.append("tok_emb")
        layers.append(Layer(mine, layer))
    params = [(plist[name], lambda g: g) for name in names]

    def reference(p, x, y):
        if not gpt:
            return xc.transformer(F, torch, cfg, p, x, y)
        # torch_crosscheck's layers (explicit softmax(Q K^T / sqrt(d)) V)
        # with the tied head
        h = F.embedding(x.long(), p["tok_emb"]) + p["pos_emb"]
        for l in range(cfg[0]):
            h = xc.transformer_layer(F, torch, cfg, p, h, l)
        return F.cross_entropy(gpt_head(F, cfg, p, h), y.long())
    return layers, x, labels, params, reference


def gpt_torch(depth, batch, width, arrays):
    """The transformer's PyTorch modules at sequence 512 with the tied
    head; torch-checkpoint checkpoints each block (see SEGMENTS)."""
    return transformer_torch(depth, batch, width, arrays, gpt=True)


# name: (layout(depth, batch, width), torch builder, default batch, width)
MODELS = {"mlp": (mlp_layout, mlp_torch, 1024, 256),
          "resnet": (resnet_layout, resnet_torch, 64, 16),
          "transformer": (transformer_layout, transformer_torch, 16, 256),
          "gpt": (gpt_layout, gpt_torch, 8, 256)}
# torch-checkpoint's segments where not round(sqrt(n)): GPT checkpoints
# each block, as GPT training code does (one segment per layer).
SEGMENTS = {"gpt": lambda depth: depth}


# --------------------------------------------------------------- measuring

def proc_status_bytes(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def reset_rss_peak():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class SavedBytes:
    """Peak of storage bytes held by autograd's saved tensors."""

    def __init__(self, params):
        import torch
        self.torch = torch
        self.param_ptrs = {p.storage().data_ptr() for p in params}
        self.count = {}
        self.live = 0
        self.peak = 0

    def hooks(self):
        tracker = self

        class Held:
            __slots__ = ("t", "ptr")

            def __init__(self, t, ptr):
                self.t, self.ptr = t, ptr

            def __del__(self):
                if self.ptr is None:
                    return
                c = tracker.count[self.ptr]
                c[0] -= 1
                if c[0] == 0:
                    tracker.live -= c[1]
                    del tracker.count[self.ptr]

        def pack(t):
            st = t.storage()
            ptr = st.data_ptr()
            if ptr in tracker.param_ptrs or st.nbytes() == 0:
                return Held(t, None)
            c = tracker.count.setdefault(ptr, [0, st.nbytes()])
            if c[0] == 0:
                tracker.live += c[1]
                tracker.peak = max(tracker.peak, tracker.live)
            c[0] += 1
            return Held(t, ptr)

        def unpack(h):
            return h.t

        return self.torch.autograd.graph.saved_tensors_hooks(pack, unpack)


def blas_info():
    """The OpenBLAS core and threads this process uses, as mg-bench
    reports its own."""
    import ctypes
    try:
        ob = ctypes.CDLL("libopenblas.so.0")
        ob.openblas_get_corename.restype = ctypes.c_char_p
        return "OpenBLAS core %s, %d threads" % (
            ob.openblas_get_corename().decode(), ob.openblas_get_num_threads())
    except (OSError, AttributeError):
        return "BLAS: not OpenBLAS or not found"


def exact_rss_malloc():
    """Make glibc map every block of 64 KiB or more on its own and unmap it
    when freed, so that RSS follows the bytes in use instead of the heap's
    high-water mark. Must run before the big allocations: a block freed
    into the heap earlier would be reused from there."""
    import ctypes
    libc = ctypes.CDLL("libc.so.6")
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
    libc.mallopt(M_MMAP_THRESHOLD, 64 * 1024)
    libc.mallopt(M_TRIM_THRESHOLD, 128 * 1024)


def torch_worker(a):
    """One PyTorch case in this process; prints one JSON line."""
    import numpy as np
    import torch
    import torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint_sequential
    torch.set_num_threads(a.threads)
    cuda = a.device == "cuda"
    if cuda:
        if not torch.cuda.is_available():
            sys.exit("compare_torch.py: --device cuda: PyTorch finds no CUDA "
                     "device")
        # IEEE float32 on both sides: memgrad's cuBLAS runs without TF32.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    elif a.measure == "memory":
        exact_rss_malloc()
    layout, build = MODELS[a.model][:2]
    arrays = read_arrays(a.load, layout(a.depth, a.batch, a.width), np)
    extra = {"dropout": a.dropout} if a.dropout else {}
    layers, x, labels, params, reference = build(a.depth, a.batch, a.width,
                                                 arrays, **extra)
    model = torch.nn.Sequential(*layers)
    if cuda:
        # Module.to moves each Parameter's data in place: the objects in
        # params stay the model's.
        dev = torch.device("cuda")
        model.to(dev)
        x, labels = x.to(dev), labels.to(dev)
        for p, _ in params:
            assert p.device.type == "cuda", "a parameter stayed on the CPU"
    if a.worker == "f64":
        # The reference for the gradient check: plain backprop in double.
        model.double()
        if x.is_floating_point():
            x = x.double()
    segments = min(a.segments, len(layers)) if a.segments else \
        SEGMENTS[a.model](a.depth) if a.model in SEGMENTS else \
        max(1, round(math.sqrt(len(layers))))
    for p, _ in params:
        p.grad = torch.zeros_like(p)

    def step():
        if a.worker == "checkpoint":
            # Reentrant checkpointing (the only kind checkpoint_sequential
            # has in torch 1.13) needs an input that requires grad, or the
            # parameters get no gradient.
            if x.is_floating_point():
                xin = x.detach().requires_grad_(True)
                out = checkpoint_sequential(model, segments, xin)
            else:
                # token ids cannot require grad: the embedding runs
                # outside, its output (which does) enters the segments
                out = checkpoint_sequential(model[1:], segments, model[0](x))
        else:
            out = model(x)
        loss = F.cross_entropy(out, labels)
        loss.backward()
        return float(loss)

    def zero_grads():
        for p, _ in params:
            p.grad.zero_()

    # One-time allocations of OpenBLAS, oneDNN's convolutions and autograd
    # (on a GPU: the context, cuBLAS and cuDNN handles), off the measurement.
    wdev = "cuda" if cuda else "cpu"
    tiny = torch.nn.Linear(64, 64).to(wdev)
    tiny(torch.randn(64, 64, device=wdev)).sum().backward()
    tiny = torch.nn.Conv2d(3, 8, 3, padding=1, bias=False).to(wdev)
    F.batch_norm(tiny(torch.randn(2, 3, 8, 8, device=wdev)), None, None,
                 training=True).sum().backward()
    del tiny

    if cuda and a.measure == "memory":
        # The step's own bytes from the caching allocator's statistics:
        # peak during the step minus what was allocated before it.
        zero_grads()
        loss = step()  # cuDNN/cuBLAS workspaces of this shape, once
        zero_grads()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        step()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated()
        print(json.dumps({"loss": loss, "device_before_bytes": before,
                          "device_peak_bytes": peak,
                          "activation_peak_bytes": peak - before,
                          "gpu": torch.cuda.get_device_name()}))
        return

    if a.measure == "memory":
        # RSS around the first step, then the saved-tensor peak.
        zero_grads()
        rss_before = proc_status_bytes("VmRSS")
        have_hwm = reset_rss_peak()
        loss = step()
        rss_peak = proc_status_bytes("VmHWM") if have_hwm else 0
        zero_grads()
        saved = SavedBytes([p for p, _ in params])
        with saved.hooks():
            step()
        print(json.dumps({"loss": loss, "rss_before_bytes": rss_before,
                          "rss_peak_bytes": rss_peak,
                          "activation_peak_bytes": saved.peak}))
        return

    # Time (and gradients), with glibc's malloc as PyTorch users run it:
    # one untimed step, then the timed ones.
    zero_grads()
    loss = step()
    times = []
    for _ in range(a.repeat if a.worker != "f64" else 0):
        zero_grads()
        if cuda:
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()  # zero_grads done before the start
            start.record()
            step()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
            continue
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e3)

    with open(a.save_grads, "wb") as f:
        for p, layout in params:
            f.write(layout(p.grad).contiguous().cpu().numpy()
                    .astype(np.float64).tobytes())
    if a.worker == "f64":
        print(json.dumps({"loss": loss,
                          "fused_attention": a.attention == "sdpa" and
                          hasattr(F, "scaled_dot_product_attention"),
                          "reference_diff": check_reference(
                              torch, reference, arrays, params, x, labels,
                              loss),
                          "reference_worst": REFERENCE_WORST[0]}))
        return
    print(json.dumps({"loss": loss, "times": times, "blas": blas_info(),
                      "time_ms_median": statistics.median(times),
                      "segments": segments if a.worker == "checkpoint" else 0,
                      "layers": len(layers)}))


def check_reference(torch, reference, arrays, params, x, labels, loss):
    """With the f64 gradients of the modules in params[i][0].grad: run the
    model's independent definition (tests/torch_crosscheck.py's) on the
    same f64 weights and return the largest normwise relative difference
    of the loss and of the gradients (None without a reference). The
    modules that are timed and checkpointed must compute that model."""
    if reference is None:
        return None
    p = {name: q.detach().clone().requires_grad_(True)
         for (name, _), (q, _) in zip(arrays[2:], params)}
    ref_loss = reference(p, x, labels)
    ref_loss.backward()
    worst = abs(float(ref_loss) - loss) / abs(float(ref_loss))
    REFERENCE_WORST[0] = "the loss"
    # Each gradient's norm floored at 1e-6 of the largest, as in
    # max_rel_diff: an attention key bias's gradient is zero in exact
    # arithmetic, so both sides hold rounding noise there (on an H200, the
    # fused attention's noise was 1.51 of the written-out one's).
    pairs = [(name, q.grad, p[name].grad)
             for (name, _), (q, _) in zip(arrays[2:], params)]
    floor = 1e-6 * max([float(r.norm()) for _, _, r in pairs] or [0.0])
    for name, g, r in pairs:
        scale = max(float(r.norm()), floor)
        d = float((g - r).norm()) / scale if scale > 0 else float(g.norm())
        if d > worst:
            worst, REFERENCE_WORST[0] = d, name
    return worst


# what check_reference found furthest off (a parameter's name, or the loss)
REFERENCE_WORST = [""]


def read_arrays(path, layout, np):
    """The arrays of `layout`, read back to back from path."""
    out = []
    with open(path, "rb") as f:
        for name, shape, dtype, _ in layout:
            n = math.prod(shape) * np.dtype(dtype).itemsize
            buf = f.read(n)
            if len(buf) != n:
                sys.exit(f"compare_torch.py: {path} is too short for {name}")
            out.append((name, np.frombuffer(buf, dtype=dtype).reshape(shape)))
    return out


# --------------------------------------------------------------- driver

def run(cmd, env):
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.stderr.write(p.stderr)
        sys.exit(f"compare_torch.py: failed ({p.returncode}): "
                 f"{' '.join(cmd)}")
    return p.stdout


def max_rel_diff(np, a, b, shapes):
    """Largest over parameter tensors of ||a - b|| / ||b|| (2-norms), each
    ||b|| floored at 1e-6 of the largest: a gradient that is zero in exact
    arithmetic (an attention key bias's: softmax ignores a constant added to
    a row of scores) is rounding noise on both sides, not a relative
    error."""
    worst, off, parts = 0.0, 0, []
    for n in shapes:
        parts.append((a[off:off + n].astype(np.float64),
                      b[off:off + n].astype(np.float64)))
        off += n
    floor = 1e-6 * max([float(np.linalg.norm(y)) for _, y in parts] or [0])
    for x, y in parts:
        scale = max(float(np.linalg.norm(y)), floor)
        d = float(np.linalg.norm(x - y))
        worst = max(worst, d / scale if scale > 0 else d)
    return worst


def main():
    ap = argparse.ArgumentParser(
        description="memgrad beside PyTorch (CPU): same model, weights and "
                    "input; time, memory and gradients. See the module "
                    "docstring for how each number is measured.")
    default_bench = next(
        (p for p in (os.path.join(ROOT, d, "mg-bench")
                     for d in ("build-bench", "build"))
         if os.access(p, os.X_OK)),
        os.path.join(ROOT, "build-bench", "mg-bench"))
    ap.add_argument("--mg-bench", default=default_bench,
                    help="the mg-bench binary (default: build-bench/mg-bench, "
                         "else build/mg-bench)")
    ap.add_argument("--model", default="mlp",
                    help="model (known: " + ",".join(MODELS) + ")")
    ap.add_argument("--depths", default="64,1024")
    ap.add_argument("--batch", type=int,
                    help="default: the model's, as mg-bench's (mlp 1024, "
                         "resnet 64)")
    ap.add_argument("--width", type=int,
                    help="default: the model's, as mg-bench's (mlp 256 "
                         "units, resnet 16 base channels)")
    ap.add_argument("--repeat", type=int, default=3,
                    help="timed steps per case (default 3)")
    ap.add_argument("--threads", type=int, default=1,
                    help="OpenBLAS / OpenMP / torch threads on both sides "
                         "(default 1; see the module docstring)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="cpu (default) or cuda: PyTorch on torch.cuda and "
                         "mg-bench step --device cuda, TF32 off, CUDA-event "
                         "times, allocator peaks (see the module docstring)")
    ap.add_argument("--csv", help="default bench/results/torch-cpu.csv, "
                    "with --device cuda bench/results/torch-cuda.csv")
    ap.add_argument("--append", action="store_true",
                    help="add the rows to --csv (same columns) instead of "
                         "replacing it: one CSV for several models")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--attention", choices=["sdpa", "explicit"],
                    default="sdpa",
                    help="the PyTorch transformer's attention: sdpa, "
                         "F.scaled_dot_product_attention where torch has "
                         "it (torch >= 2.0), or explicit, "
                         "softmax(Q K^T / sqrt(d)) V written out")
    # Internal: one PyTorch case, run by the driver in a fresh process.
    ap.add_argument("--worker", choices=["plain", "checkpoint", "f64"],
                    help=argparse.SUPPRESS)
    ap.add_argument("--depth", type=int, help=argparse.SUPPRESS)
    # checkpoint_sequential's segment count (bench/pareto.py); 0: round(sqrt(n))
    ap.add_argument("--segments", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--measure", choices=["time", "memory"], default="time",
                    help=argparse.SUPPRESS)
    ap.add_argument("--load", help=argparse.SUPPRESS)
    ap.add_argument("--save-grads", help=argparse.SUPPRESS)
    # the MLP's dropout, for bench/pareto.py's workers only
    ap.add_argument("--dropout", type=float, default=0.0,
                    help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.dropout and (not a.worker or a.model != "mlp"):
        ap.error("--dropout is for bench/pareto.py's MLP workers: "
                 "dropout masks differ between memgrad and PyTorch")
    if a.model not in MODELS:
        ap.error(f"unknown model '{a.model}'; known: {','.join(MODELS)}")
    if a.batch is None:
        a.batch = MODELS[a.model][2]
    if a.width is None:
        a.width = MODELS[a.model][3]
    if a.worker:
        ATTENTION[0] = a.attention
        return torch_worker(a)
    if a.csv is None:
        a.csv = os.path.join(HERE, "results", f"torch-{a.device}.csv")
    cuda = a.device == "cuda"
    if cuda:
        # Say so before any work, and fail only because cuda was asked for.
        probe = subprocess.run(
            [sys.executable, "-c", "import sys, torch; "
             "sys.exit(0 if torch.cuda.is_available() else 3)"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if probe.returncode != 0:
            sys.exit("compare_torch.py: --device cuda: "
                     + ("PyTorch finds no CUDA device (no GPU, no driver, or "
                        "a torch built without CUDA)" if probe.returncode == 3
                        else "cannot import torch"))

    import numpy as np
    try:
        depths = [int(d) for d in a.depths.split(",")]
    except ValueError:
        ap.error(f"bad --depths '{a.depths}'")
    if any(d < 1 for d in depths) or a.batch < 1 or a.width < 1 \
            or a.repeat < 1 or a.threads < 1:
        ap.error("depths, batch, width, repeat and threads must be >= 1")
    if not os.access(a.mg_bench, os.X_OK):
        ap.error(f"no mg-bench at {a.mg_bench}; build it (cmake) or pass "
                 "--mg-bench")
    cols = ["model", "case", "depth", "batch", "width", "threads", "blas",
            "segments",
            "loss", "time_ms_median", "vs", "time_ratio_vs_torch",
            "activation_peak_bytes", "rss_delta_bytes", "rss_ratio_vs_torch",
            "param_bytes", "max_rel_grad_diff", "max_rel_grad_diff_f64",
            "grad_diff_vs_own_plain", "omp_wait_policy"]
    if cuda:
        cols = ["model", "case", "device", "gpu", "depth", "batch", "width",
                "segments", "loss", "time_ms_median", "vs",
                "time_ratio_vs_torch", "activation_peak_bytes",
                "act_ratio_vs_torch", "device_peak_bytes", "param_bytes",
                "max_rel_grad_diff", "max_rel_grad_diff_f64",
                "grad_diff_vs_own_plain", "predicted_peak_bytes",
                "measured_peak_bytes"]
    append = a.append and os.path.exists(a.csv) and os.path.getsize(a.csv)
    if append:
        with open(a.csv, newline="") as f:
            if next(csv.reader(f), None) != cols:
                ap.error(f"--append: {a.csv} has other columns")
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(a.threads),
               OMP_NUM_THREADS=str(a.threads))
    rows = []
    with tempfile.TemporaryDirectory(prefix="mg-compare-") as tmp:
        for depth in depths:
            layout = MODELS[a.model][0]
            arrays = draw(layout(depth, a.batch, a.width), a.seed)
            init = os.path.join(tmp, "init.bin")
            with open(init, "wb") as f:
                for _, arr in arrays:
                    f.write(arr.tobytes())
            shapes = [arr.size for _, arr in arrays[2:]]
            param_bytes = 4 * sum(shapes)
            common = ["--depth", str(depth), "--batch", str(a.batch),
                      "--width", str(a.width), "--repeat", str(a.repeat),
                      "--load", init, "--device", a.device]
            # the PyTorch workers' own option, not mg-bench's
            torch_only = ["--attention", a.attention]
            input_bytes = sum(arr.nbytes for _, arr in arrays[:2])
            results = {}
            for case in ["torch-plain", "torch-checkpoint", "memgrad-none",
                         "memgrad-memory"]:
                print(f"[compare] {a.model} depth {depth}: {case}",
                      file=sys.stderr, flush=True)
                grads = os.path.join(tmp, case + ".grads")
                if case.startswith("torch"):
                    worker = [sys.executable, os.path.abspath(__file__),
                              "--worker", case.split("-")[1], "--model",
                              a.model, "--threads", str(a.threads),
                              "--save-grads", grads] + common + torch_only
                    r = json.loads(run(worker, env).strip().splitlines()[-1])
                    mem = run(worker + ["--measure", "memory"], env)
                    r.update(json.loads(mem.strip().splitlines()[-1]))
                else:
                    out = run([a.mg_bench, "step", "--model", a.model,
                               "--policy", case.split("-")[1],
                               "--save-grads", grads] + common, env)
                    kv = dict(line.split("=", 1)
                              for line in out.strip().splitlines())
                    r = {"loss": float(kv["loss"]),
                         "time_ms_median": float(kv.get(
                             "event_ms_median", kv["time_ms_median"])),
                         "device_peak_bytes": int(kv["peak_bytes"])
                         + 2 * param_bytes + input_bytes,
                         "gpu": kv.get("gpu", ""),
                         "rss_before_bytes": int(kv["rss_before_bytes"]),
                         "rss_peak_bytes": int(kv["rss_peak_bytes"]),
                         "activation_peak_bytes": int(kv["peak_bytes"]),
                         # the plan's prediction beside the pool's measured
                         # peak, in every GPU row (issue 48 item 2)
                         "predicted_peak_bytes":
                             int(kv["predicted_peak_bytes"]),
                         "measured_peak_bytes": int(kv["peak_bytes"]),
                         "segments": int(kv["segments"]),
                         "blas": kv["blas"]}
                    # Not a column: says how much of the RSS delta is
                    # blocks the pool's size classes could not reuse.
                    print(f"[compare] {a.model} depth {depth}: {case}: pool "
                          f"peak {int(kv['peak_bytes']) / 2**20:.1f} MiB, "
                          "reserved "
                          f"{int(kv['pool_reserved_bytes']) / 2**20:.1f} MiB",
                          file=sys.stderr, flush=True)
                r["grads"] = np.fromfile(
                    grads, dtype=np.float64 if case.startswith("torch")
                    else np.float32)
                results[case] = r
            print(f"[compare] {a.model} depth {depth}: f64 reference",
                  file=sys.stderr, flush=True)
            f64 = os.path.join(tmp, "f64.grads")
            r64 = json.loads(run(
                [sys.executable, os.path.abspath(__file__), "--worker", "f64",
                 "--model", a.model, "--threads", str(a.threads),
                 "--save-grads", f64] + common + torch_only,
                env).strip().splitlines()[-1])
            if r64["reference_diff"] is not None:
                # The modules timed above against the test suite's own
                # definition of the model (tests/torch_crosscheck.py), f64.
                print(f"[compare] {a.model} depth {depth}: f64 modules vs "
                      "tests/torch_crosscheck.py: max rel diff "
                      f"{r64['reference_diff']:.2g}", file=sys.stderr,
                      flush=True)
                # 1e-9 where both sides run the same formulas; PyTorch's
                # fused attention (torch >= 2.0) scales q and k before
                # their product and orders its sums its own way, which
                # moves near-cancelling f64 gradients further, while a
                # different model would be off by far more than 1e-6.
                fused = a.model in ("transformer", "gpt") and \
                    r64.get("fused_attention", False)
                bound = 1e-6 if fused else 1e-9
                if r64["reference_diff"] > bound:
                    sys.exit("compare_torch.py: the PyTorch modules do not "
                             "compute tests/torch_crosscheck.py's "
                             f"{a.model}: max rel diff "
                             f"{r64['reference_diff']:.3g} > {bound:g}, in "
                             f"{r64.get('reference_worst', '?')} (attention "
                             f"{a.attention}; --attention explicit compares "
                             "the written-out one)")
            ref64 = np.fromfile(f64, dtype=np.float64)
            ref = results["torch-plain"]["grads"]
            for case, r in results.items():
                torch_ref = results["torch-checkpoint" if case ==
                                    "memgrad-memory" else "torch-plain"]
                own = results["memgrad-none" if case.startswith("memgrad")
                              else "torch-plain"]["grads"]
                if cuda:
                    rows.append({
                        "model": a.model, "case": case, "device": a.device,
                        "gpu": r.get("gpu", ""), "depth": depth,
                        "batch": a.batch, "width": a.width,
                        "segments": r["segments"],
                        "loss": f"{r['loss']:.6f}",
                        "time_ms_median": f"{r['time_ms_median']:.3f}",
                        "vs": "torch-checkpoint" if case == "memgrad-memory"
                              else "torch-plain",
                        "time_ratio_vs_torch":
                            f"{r['time_ms_median'] / torch_ref['time_ms_median']:.3f}",
                        "activation_peak_bytes": r["activation_peak_bytes"],
                        "act_ratio_vs_torch": "%.3f" % (
                            max(1, r["activation_peak_bytes"]) /
                            max(1, torch_ref["activation_peak_bytes"])),
                        "device_peak_bytes": r["device_peak_bytes"],
                        "param_bytes": param_bytes,
                        "max_rel_grad_diff":
                            f"{max_rel_diff(np, r['grads'], ref, shapes):.3g}",
                        "max_rel_grad_diff_f64":
                            f"{max_rel_diff(np, r['grads'], ref64, shapes):.3g}",
                        "grad_diff_vs_own_plain": f"{max_rel_diff(np, r['grads'], own, shapes):.3g}",
                        # memgrad's rows only: PyTorch has no prediction
                        "predicted_peak_bytes":
                            r.get("predicted_peak_bytes", ""),
                        "measured_peak_bytes":
                            r.get("measured_peak_bytes", ""),
                    })
                    continue
                rows.append({
                    "model": a.model, "case": case, "depth": depth,
                    "batch": a.batch, "width": a.width,
                    "threads": a.threads,
                    "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY",
                                                      "default").lower(),
                    "segments": r["segments"],
                    "blas": r["blas"],
                    "loss": f"{r['loss']:.6f}",
                    "time_ms_median": f"{r['time_ms_median']:.1f}",
                    "time_ratio_vs_torch":
                        f"{r['time_ms_median'] / torch_ref['time_ms_median']:.3f}",
                    "vs": "torch-checkpoint" if case == "memgrad-memory"
                          else "torch-plain",
                    "activation_peak_bytes": r["activation_peak_bytes"],
                    "rss_delta_bytes":
                        max(0, r["rss_peak_bytes"] - r["rss_before_bytes"]),
                    "rss_ratio_vs_torch": "%.3f" % (
                        max(1, r["rss_peak_bytes"] - r["rss_before_bytes"]) /
                        max(1, torch_ref["rss_peak_bytes"]
                            - torch_ref["rss_before_bytes"])),
                    "param_bytes": param_bytes,
                    "max_rel_grad_diff":
                        f"{max_rel_diff(np, r['grads'], ref, shapes):.3g}",
                    "max_rel_grad_diff_f64":
                        f"{max_rel_diff(np, r['grads'], ref64, shapes):.3g}",
                    "grad_diff_vs_own_plain": f"{max_rel_diff(np, r['grads'], own, shapes):.3g}",
                })
    os.makedirs(os.path.dirname(os.path.abspath(a.csv)), exist_ok=True)
    with open(a.csv, "a" if append else "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        if not append:
            w.writeheader()
        w.writerows(rows)
    mib = 1024.0 * 1024.0
    shape = (f"{RESNET_IMAGE}x{RESNET_IMAGE} images, "
             if a.model == "resnet" else "")
    if cuda:
        gpu = rows[0]["gpu"] if rows else ""
        print(f"# {a.model}, batch {a.batch}, width {a.width}, {shape}f32, "
              f"cuda ({gpu}), TF32 off, CUDA-event times; ratios: "
              "memgrad-none vs torch-plain, memgrad-memory vs "
              "torch-checkpoint; act = step's own device bytes")
        print(f"{'case':<17} {'depth':>5} {'time_ms':>9} {'t/torch':>8} "
              f"{'act_MiB':>9} {'act/torch':>9} {'dev_MiB':>9} "
              f"{'grad_diff':>10} {'vs_f64':>9} {'vs_own':>7}")
        for r in rows:
            print(f"{r['case']:<17} {r['depth']:>5} {r['time_ms_median']:>9} "
                  f"{r['time_ratio_vs_torch']:>8} "
                  f"{r['activation_peak_bytes'] / mib:>9.1f} "
                  f"{r['act_ratio_vs_torch']:>9} "
                  f"{r['device_peak_bytes'] / mib:>9.1f} "
                  f"{r['max_rel_grad_diff']:>10} "
                  f"{r['max_rel_grad_diff_f64']:>9} "
                  f"{r['grad_diff_vs_own_plain']:>7}")
        print(f"# csv: {a.csv}", file=sys.stderr)
        return
    print(f"# {a.model}, batch {a.batch}, width {a.width}, {shape}f32, "
          f"{a.threads} threads; ratios: memgrad-none vs torch-plain, "
          "memgrad-memory vs torch-checkpoint"
          + (f"; OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY'].lower()} on "
             "both sides" if os.environ.get("OMP_WAIT_POLICY") else ""))
    print(f"{'case':<17} {'depth':>5} {'time_ms':>9} {'t/torch':>8} "
          f"{'act_MiB':>9} {'rss_MiB':>9} {'rss/torch':>9} "
          f"{'grad_diff':>10} {'vs_f64':>9} {'vs_own':>7}")
    for r in rows:
        print(f"{r['case']:<17} {r['depth']:>5} {r['time_ms_median']:>9} "
              f"{r['time_ratio_vs_torch']:>8} "
              f"{r['activation_peak_bytes'] / mib:>9.1f} "
              f"{r['rss_delta_bytes'] / mib:>9.1f} "
              f"{r['rss_ratio_vs_torch']:>9} {r['max_rel_grad_diff']:>10} "
              f"{r['max_rel_grad_diff_f64']:>9} "
              f"{r['grad_diff_vs_own_plain']:>7}")
    print(f"# csv: {a.csv}", file=sys.stderr)


if __name__ == "__main__":
    main()
