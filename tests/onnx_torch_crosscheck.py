#!/usr/bin/python3
"""onnx_torch_crosscheck.py - models exported by torch.onnx.export, trained
one step by memgrad-onnx, against PyTorch autograd (issue 12).

For each model (torchvision resnet18, resnet50 and mobilenet_v2 at 64x64, a GPT-style
decoder, a BERT-style encoder with a padding mask, once as a constant and
once computed from the tokens (Equal, Where, Cast on tensors), a U-Net;
random init,
batch 4) it exports the model in training mode (BatchNorm on batch
statistics), writes a batch and labels, runs

    memgrad-onnx step MODEL.onnx --batch 4 --policy P --input X --labels Y
                 --save-grads G

for every policy, and checks against loss.backward() in PyTorch:
- the loss, and the gradient of every float initializer that is a torch
  parameter, against PyTorch in float64: the relative error
  max|memgrad - torch64| / max|torch64| must be at most 1e-4, or, for a
  gradient float32 cannot resolve that well, at most 4 times PyTorch's own
  float32 error (a BatchNorm scale followed by a depthwise convolution and
  another BatchNorm has a gradient near 0 by scale invariance, ~1e-6 of the
  others: PyTorch float32 is 1e-1 off there itself). Both below 1e-7
  counts as zero, and a gradient's scale is at least 1e-3 of the model's
  largest (below that, gradients that are 0 in exact arithmetic, such as a
  BatchNorm shift followed by a convolution and another BatchNorm, are
  float32 noise on both sides);
- the gradients under memory and speed bit-equal to those under none.

ReLU and ReLU6 make the gradient a discontinuous function of the forward
values: an input within float32 rounding of a kink (a BatchNorm output of
true value a few 1e-7, say) may land on either side in any float32
implementation, PyTorch's included, and move a whole channel's gradient by
1%. Which side is luck, so a gradient that misses the bound above is
checked again against a float64 reference on memgrad's side of every kink:
memgrad-onnx --tensors saves the inputs of every Relu and Clip node, and
PyTorch float64 reruns with each ReLU's mask (and ReLU6's two) taken from
them. The gradient passes if it is within the same bound of that reference
(1e-4, or 4 times the error of PyTorch float32 run on the same side of
every kink) and every input on the other side of its kink from float64 is
within 10 times PyTorch float32's own error on that tensor: float32 noise,
not a wrong op. The output says how many inputs were so placed.

    python3 tests/onnx_torch_crosscheck.py --tool build/memgrad-onnx
        [--models resnet18,gpt,bert,bert_pad,unet,mobilenet_v2,resnet50,vgg11]
        [--keep DIR]

(MG_XC_IMG sets the image size, default 64.)

Needs torch, torchvision and onnx (Debian: python3-torch python3-torchvision
python3-onnx). Without them it prints "skipped: PyTorch not installed" and
exits 0, so it can stay registered with ctest everywhere.
"""
import argparse
import copy
import math
import os
import subprocess
import sys
import tempfile
import warnings

try:
    import numpy as np
    import onnx
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    import torchvision
except ImportError:
    print("skipped: PyTorch not installed (needs torch, torchvision, onnx)")
    sys.exit(0)

TOL = 1e-4
BATCH = 4
IMG = int(os.environ.get("MG_XC_IMG", "64"))
POLICIES = ["none", "memory", "speed"]
# The allowance (4x PyTorch float32's own error) would also let a real bug
# of that size through, so how many gradients pass only through it, and
# how far off the worst of them is, are capped (issue 32): per model, the
# most gradients and the largest relative error the committed runs
# (bench/results/onnx-torch-crosscheck.txt) needed, with some room: resnet50
# at batch 4 (159 of 161, worst 0.197), mobilenet_v2's ReLU6 kinks (18,
# 2.86e-2), vgg11 at 224x224 (11, 2.17e-3); any other model at most 2,
# within 1e-3.
ALLOWANCE_CAP = {"resnet50": (161, 0.25), "mobilenet_v2": (25, 0.05),
                 "vgg11": (15, 5e-3)}
ALLOWANCE_CAP_DEFAULT = (2, 1e-3)


class GPT(nn.Module):
    """Token and position embeddings, pre-norm blocks with causal
    self-attention (heads by view/transpose) and an exact-GELU MLP."""

    def __init__(self, vocab=100, seq=16, d=64, heads=4, layers=2, classes=10):
        super().__init__()
        self.d, self.h = d, heads
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList()
        for _ in range(layers):
            self.blocks.append(nn.ModuleDict(dict(
                ln1=nn.LayerNorm(d), qkv=nn.Linear(d, 3 * d), proj=nn.Linear(d, d),
                ln2=nn.LayerNorm(d), fc1=nn.Linear(d, 4 * d), fc2=nn.Linear(4 * d, d))))
        self.register_buffer("causal", torch.triu(torch.ones(seq, seq, dtype=torch.bool), 1))
        self.head = nn.Linear(d, classes)

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
            h = h + blk["fc2"](F.gelu(blk["fc1"](blk["ln2"](h))))
        return self.head(h.mean(1))


class BERT(nn.Module):
    """Post-norm encoder layers; the padding mask is a buffer added to the
    scores; the classifier reads the first token."""

    def __init__(self, vocab=100, seq=16, d=64, heads=4, layers=2, classes=10):
        super().__init__()
        self.d, self.h = d, heads
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.ln = nn.LayerNorm(d)
        self.layers = nn.ModuleList(
            nn.ModuleDict(dict(q=nn.Linear(d, d), k=nn.Linear(d, d), v=nn.Linear(d, d),
                               o=nn.Linear(d, d), ln1=nn.LayerNorm(d),
                               fc1=nn.Linear(d, 4 * d), fc2=nn.Linear(4 * d, d),
                               ln2=nn.LayerNorm(d)))
            for _ in range(layers))
        keep = torch.ones(BATCH, seq)
        keep[1, seq // 2:] = 0  # the second sequence is padded
        self.register_buffer("bias", ((1.0 - keep) * -10000.0)[:, None, None, :])
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        b, t = x.shape
        h = self.ln(self.tok(x) + self.pos(torch.arange(t)))
        dh = self.d // self.h
        for L in self.layers:
            def split(z):
                return z.view(b, t, self.h, dh).transpose(1, 2)
            att = split(L["q"](h)) @ split(L["k"](h)).transpose(-2, -1) / math.sqrt(dh)
            att = (att + self.bias).softmax(-1)
            o = (att @ split(L["v"](h))).transpose(1, 2).reshape(b, t, self.d)
            h = L["ln1"](h + L["o"](o))
            h = L["ln2"](h + L["fc2"](F.gelu(L["fc1"](h))))
        return self.head(h[:, 0])


class BERTPad(BERT):
    """The BERT-style encoder with its padding mask computed from the
    tokens, as Hugging Face models do: token 0 is padding, and
    masked_fill(x == 0, -inf) exports Equal, Where and Cast on tensors."""

    def forward(self, x):
        b, t = x.shape
        pad = (x == 0)[:, None, None, :]
        keep = (x != 0).float()[:, :, None]  # zeroes padded positions' output
        h = self.ln(self.tok(x) + self.pos(torch.arange(t)))
        dh = self.d // self.h
        for L in self.layers:
            def split(z):
                return z.view(b, t, self.h, dh).transpose(1, 2)
            att = split(L["q"](h)) @ split(L["k"](h)).transpose(-2, -1) / math.sqrt(dh)
            att = att.masked_fill(pad, float("-inf")).softmax(-1)
            o = (att @ split(L["v"](h))).transpose(1, 2).reshape(b, t, self.d)
            h = L["ln1"](h + L["o"](o))
            h = L["ln2"](h + L["fc2"](F.gelu(L["fc1"](h)))) * keep
        return self.head(h[:, 0])


def conv_bn_relu(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False),
                         nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class UNet(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.e1 = nn.Sequential(conv_bn_relu(3, 16), conv_bn_relu(16, 16))
        self.e2 = nn.Sequential(conv_bn_relu(16, 32), conv_bn_relu(32, 32))
        self.mid = nn.Sequential(conv_bn_relu(32, 64), conv_bn_relu(64, 64))
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.d2 = nn.Sequential(conv_bn_relu(96, 32), conv_bn_relu(32, 32))
        self.d1 = nn.Sequential(conv_bn_relu(48, 16), conv_bn_relu(16, 16))
        self.out = nn.Conv2d(16, classes, 1)

    def forward(self, x):
        e1 = self.e1(x)
        e2 = self.e2(F.max_pool2d(e1, 2))
        m = self.mid(F.max_pool2d(e2, 2))
        d2 = self.d2(torch.cat([e2, self.up(m)], 1))
        d1 = self.d1(torch.cat([e1, self.up(d2)], 1))
        return F.adaptive_avg_pool2d(self.out(d1), 1).flatten(1)


def build(name):
    torch.manual_seed(0)
    if name == "resnet18":
        return torchvision.models.resnet18(num_classes=10), "image"
    if name == "resnet50":
        return torchvision.models.resnet50(num_classes=10), "image"
    if name == "mobilenet_v2":
        m = torchvision.models.mobilenet_v2(num_classes=10)
        m.classifier[0].p = 0.0  # torch's dropout masks cannot be replayed
        return m, "image"
    if name == "vgg11":  # wants MG_XC_IMG=224: its 7x7 adaptive pool
        m = torchvision.models.vgg11(num_classes=10)
        for layer in m.classifier:
            if isinstance(layer, nn.Dropout):
                layer.p = 0.0  # as for mobilenet_v2
        return m, "image"
    if name == "gpt":
        return GPT(), "tokens"
    if name == "bert":
        return BERT(), "tokens"
    if name == "bert_pad":
        return BERTPad(), "tokens"
    if name == "unet":
        return UNet(), "image"
    raise ValueError(name)


def rel_err(a, b, floor=0.0):
    """max|a - b| / max|b|, with max|b| raised to floor: a gradient that is
    0 in exact arithmetic (a BatchNorm shift followed by a convolution and
    another BatchNorm) is float32 noise on both sides."""
    scale = max(float(np.max(np.abs(b))) if b.size else 0.0, floor)
    diff = float(np.max(np.abs(a - b))) if b.size else 0.0
    if scale < 1e-7 and float(np.max(np.abs(a), initial=0.0)) < 1e-7:
        return 0.0
    return diff / max(scale, 1e-30)


KINKED = (nn.ReLU, nn.Hardtanh)  # nn.ReLU6 is a Hardtanh


def kinked(model):
    """The model's ReLU and ReLU6 modules, made out of place so that their
    inputs can be read after the call."""
    mods = [m for m in model.modules() if isinstance(m, KINKED)]
    for m in mods:
        m.inplace = False
    return mods


def record_inputs(model, store):
    """Appends (module, its input) to store, call by call."""
    return [m.register_forward_pre_hook(
        lambda mod, inp: store.append((mod, inp[0].detach().double().numpy().copy())))
        for m in kinked(model)]


def sides(pre, mod):
    """memgrad's branch for each element of a float32 input: relu keeps
    x > 0; clip is lo + relu(x - lo) - relu(x - hi) (onnx_ops_elementwise.c),
    so it passes x where x - lo > 0 and not x - hi > 0, both in float32."""
    if isinstance(mod, nn.ReLU):
        return pre > 0, torch.zeros_like(pre, dtype=torch.bool)
    return (pre - mod.min_val) > 0, (pre - mod.max_val) > 0


def on_memgrad_side(model, pres):
    """Makes each kinked call of model follow memgrad's branch, taken from
    pres (memgrad's float32 inputs, call by call)."""
    calls = [0]

    def hook(mod, inp, out):
        x = inp[0]
        pre = torch.from_numpy(pres[calls[0]]).reshape(x.shape)
        calls[0] += 1
        above_lo, above_hi = sides(pre, mod)
        if isinstance(mod, nn.ReLU):
            return x * above_lo.to(x.dtype)
        lo = torch.full_like(x, mod.min_val)
        hi = torch.full_like(x, mod.max_val)
        return torch.where(above_lo, torch.where(above_hi, hi, x), lo)
    return [m.register_forward_hook(hook) for m in kinked(model)]


def other_side(mg, t64, t32, mod):
    """Elements of one kinked input on another side of a kink than in
    float64, and the largest |distance to that kink| over 10 times PyTorch
    float32's error on the tensor (<= 1: float32 noise)."""
    b = torch.from_numpy(t64)
    lo_m, hi_m = sides(torch.from_numpy(mg.astype(np.float32)), mod)
    lo_r, hi_r = sides(b, mod)  # float64's branch, by the same rule
    noise = 10 * max(float(np.max(np.abs(t32 - t64))), 1e-30)
    relu = isinstance(mod, nn.ReLU)
    n, worst = 0, 0.0
    for diff, at in ((lo_m != lo_r, 0 if relu else mod.min_val),
                     (hi_m != hi_r, None if relu else mod.max_val)):
        if bool(diff.any()):
            n += int(diff.sum())
            worst = max(worst, float((b[diff] - at).abs().max()) / noise)
    return n, worst


def check(name, tool, work):
    model, kind = build(name)
    model.train()
    kinked(model)
    gen = torch.Generator().manual_seed(1)
    if kind == "image":
        x = torch.randn(BATCH, 3, IMG, IMG, generator=gen)
        x.numpy().astype("<f4").tofile(os.path.join(work, name + ".x"))
    else:
        x = torch.randint(1 if name == "bert_pad" else 0, 100, (BATCH, 16),
                          generator=gen)
        if name == "bert_pad":
            x[1, 10:] = 0  # the second sequence is padded
        x.numpy().astype("<i4").tofile(os.path.join(work, name + ".x"))
    labels = torch.randint(0, 10, (BATCH,), generator=gen)
    labels.numpy().astype("<i4").tofile(os.path.join(work, name + ".y"))
    path = os.path.join(work, name + ".onnx")
    # Export from a copy: tracing a training-mode forward updates BatchNorm's
    # running statistics, which the torch step below must not see.
    state = {k: v.clone() for k, v in model.state_dict().items()}
    kw = dict(opset_version=17, training=torch.onnx.TrainingMode.TRAINING,
              do_constant_folding=False, input_names=["x"], output_names=["y"])
    try:  # torch >= 2.5 defaults to the dynamo exporter; ask for TorchScript's
        torch.onnx.export(model, (x,), path, dynamo=False, **kw)
    except TypeError:
        torch.onnx.export(model, (x,), path, **kw)
    model.load_state_dict(state)

    m64 = copy.deepcopy(model).double()
    m64b = copy.deepcopy(model).double()  # on memgrad's side of the kinks
    m32b = copy.deepcopy(model)  # PyTorch float32 there, for its own error
    pre32, pre64 = [], []
    hooks = record_inputs(model, pre32) + record_inputs(m64, pre64)
    loss = F.cross_entropy(model(x), labels)
    model.zero_grad()
    loss.backward()
    params = dict(model.named_parameters())
    x64 = x.double() if kind == "image" else x
    loss64 = F.cross_entropy(m64(x64), labels)
    m64.zero_grad()
    loss64.backward()
    params64 = dict(m64.named_parameters())
    for h in hooks:
        h.remove()

    graph = onnx.load(path).graph
    inits = [t for t in graph.initializer
             if t.data_type == onnx.TensorProto.FLOAT and int(np.prod(t.dims)) > 0]
    # the exporter emits one Relu or Clip node per kinked call, in call order
    kink_inputs = [n.input[0] for n in graph.node if n.op_type in ("Relu", "Clip")]
    match = len(kink_inputs) == len(pre64) > 0
    pres_file = os.path.join(work, name + ".kinks")
    failures = []
    grads = {}
    for p in POLICIES:
        g = os.path.join(work, f"{name}.{p}.grads")
        out = subprocess.run(
            [tool, "step", path, "--batch", str(BATCH), "--policy", p,
             "--input", os.path.join(work, name + ".x"),
             "--labels", os.path.join(work, name + ".y"), "--save-grads", g]
            + (["--tensors", ",".join(kink_inputs), "--save-tensors", pres_file]
               if match and p == "none" else []),
            capture_output=True, text=True)
        if out.returncode != 0:
            return [f"{name}/{p}: memgrad-onnx failed: {out.stderr.strip()}"]
        mg_loss = float(next(l for l in out.stdout.splitlines()
                             if l.startswith("loss ")).split()[1])
        e = abs(mg_loss - loss64.item()) / max(abs(loss64.item()), 1e-30)
        if e > TOL:
            failures.append(f"{name}/{p}: loss {mg_loss} vs torch {loss64.item()} (rel {e:.2e})")
        with open(g, "rb") as f:
            grads[p] = f.read()
    # PyTorch float64 on memgrad's side of every kink, and how far from
    # its kink each input on another side than float64's is
    params64b, params32b, n_other, noise = {}, {}, 0, 0.0
    if match:
        raw = np.fromfile(pres_file, dtype="<f4")
        pres, o = [], 0
        for (mod, t64), (_, t32) in zip(pre64, pre32):
            mg = raw[o:o + t64.size].reshape(t64.shape)
            o += t64.size
            pres.append(mg.copy())
            n, w = other_side(mg, t64, t32, mod)
            n_other, noise = n_other + n, max(noise, w)
        for mb, xb in ((m64b, x64), (m32b, x)):
            hooks = on_memgrad_side(mb, pres)
            lb = F.cross_entropy(mb(xb), labels)
            mb.zero_grad()
            lb.backward()
            for h in hooks:
                h.remove()
        params64b = dict(m64b.named_parameters())
        params32b = dict(m32b.named_parameters())
    data = np.frombuffer(grads["none"], dtype="<f4")
    off, checked, worst, loose, worst_b, worst_32b, by_side = 0, 0, 0.0, 0, 0.0, 0.0, 0
    loose_worst = 0.0  # the worst of those passing only through the allowance
    # 1e-3 of the model's largest gradient: below it, relative error is noise
    floor = 1e-3 * max(float(p.grad.abs().max()) for p in params64.values()
                       if p.grad is not None)
    for t in inits:
        n = int(np.prod(t.dims))
        mine = data[off:off + n].reshape(tuple(t.dims))
        off += n
        if t.name not in params or params[t.name].grad is None:
            continue  # a buffer (running statistics, a mask), not trained
        ref = params64[t.name].grad.detach().numpy()
        e = rel_err(mine, ref, floor)
        e32 = rel_err(params[t.name].grad.detach().double().numpy(), ref, floor)
        worst = max(worst, e)
        checked += 1
        eb, e32b = e, e32
        if params64b:
            refb = params64b[t.name].grad.detach().numpy()
            eb = rel_err(mine, refb, floor)
            e32b = rel_err(params32b[t.name].grad.detach().double().numpy(),
                           refb, floor)
            worst_b, worst_32b = max(worst_b, eb), max(worst_32b, e32b)
        if e > max(TOL, 4 * e32) and eb <= max(TOL, 4 * e32b) and noise <= 1:
            by_side += 1
        elif e > max(TOL, 4 * e32):
            failures.append(f"{name}: gradient of {t.name}: rel err {e:.2e} "
                            f"(torch float32: {e32:.2e}; on memgrad's side "
                            f"of the kinks {eb:.2e}, torch float32 there "
                            f"{e32b:.2e})")
        elif e > TOL:
            loose += 1
            loose_worst = max(loose_worst, e)
    if off != data.size:
        failures.append(f"{name}: --save-grads wrote {data.size} floats, "
                        f"the initializers hold {off}")
    if checked < len(params) // 2:
        failures.append(f"{name}: only {checked} of {len(params)} parameters "
                        f"found among the initializers")
    cap_n, cap_e = ALLOWANCE_CAP.get(name, ALLOWANCE_CAP_DEFAULT)
    if loose > cap_n or loose_worst > cap_e:
        failures.append(f"{name}: {loose} gradients pass only through the "
                        f"allowance of 4x torch float32's error, the worst "
                        f"{loose_worst:.2e} off; the cap is {cap_n} within "
                        f"{cap_e:.0e}")
    for p in POLICIES[1:]:
        if grads[p] != grads["none"]:
            failures.append(f"{name}: gradients under {p} differ from none")
    print(f"{name}: loss {loss64.item():.6f}, {checked} parameter gradients, "
          f"worst rel err {worst:.2e} ({loose} above 1e-4 where torch float32 "
          f"is as far off, worst of them {loose_worst:.2e}; cap {cap_n} "
          f"within {cap_e:.0e}), policies bit-equal: "
          f"{all(grads[p] == grads['none'] for p in POLICIES)}")
    if match:
        print(f"  {len(kink_inputs)} ReLU/Clip inputs, {n_other} elements on "
              f"another side of a kink than float64 (farthest at "
              f"{noise:.2f} of 10x torch float32's error); on memgrad's side "
              f"worst rel err {worst_b:.2e} (torch float32 there "
              f"{worst_32b:.2e}), {by_side} gradients pass only there")
    elif kind == "image":
        failures.append(f"{name}: {len(kink_inputs)} Relu/Clip nodes but "
                        f"{len(pre64)} ReLU calls in PyTorch")
    return failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--models",
                    default="resnet18,gpt,bert,bert_pad,unet,mobilenet_v2,"
                            "resnet50")
    ap.add_argument("--keep", default=None, help="directory to keep files in")
    args = ap.parse_args()
    torch.set_num_threads(2)
    warnings.filterwarnings("ignore")
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        work = args.keep or tmp
        os.makedirs(work, exist_ok=True)
        for name in args.models.split(","):
            failures += check(name, args.tool, work)
    for f in failures:
        print("FAIL:", f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
