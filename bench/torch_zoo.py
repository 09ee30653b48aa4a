"""bench/torch_zoo.py - the memgrad.torch zoo table (issue 27): which
torchvision models and transformer blocks memgrad.torch captures (check(),
no planning), and for a few of them, trained in float32 beside plain
PyTorch and torch.utils.checkpoint.checkpoint_sequential, per memgrad
policy: gradient agreement with plain PyTorch float32 at the first step,
peak RSS of the training steps and step time.

Each (model, method) runs in a fresh process; the table gives the peak
RSS of its steps (VmHWM, reset through /proc/self/clear_refs just before
the first step) less the RSS at that point (the model and the input
already made). A step is
forward, cross-entropy, backward and an SGD update (lr 0.01); the step
time is the median of the steps after the first (which plans in memgrad,
and warms the caches in torch). One thread in torch and in memgrad
(OMP_NUM_THREADS=1). Dropout and stochastic depth are off (p = 0), so
that the gradients can be compared. checkpoint_sequential cuts the model, written as an
nn.Sequential of its own layers (in-place ReLUs made out of place, as
checkpointing needs), into 4 segments.

    MEMGRAD_LIBRARY=build/libmemgrad_shared_check.so PYTHONPATH=python \\
        OMP_NUM_THREADS=1 python3 bench/torch_zoo.py [--steps 6] \\
        [--batch 8] [--size 64] > bench/results/torch-zoo.txt
"""
import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import time
import warnings

# models whose step is timed: name -> input size
TIMED = ["resnet18", "mobilenet_v2", "efficientnet_b0", "vit_tiny"]
# every model whose capture is checked (the test zoo's, full size)
CHECKED = ["resnet18", "resnet34", "resnet50", "resnet101", "resnet152",
           "resnext50_32x4d", "wide_resnet50_2", "densenet121",
           "densenet161", "mobilenet_v2", "mobilenet_v3_small",
           "mobilenet_v3_large", "efficientnet_b0", "efficientnet_b1",
           "efficientnet_b2", "efficientnet_b3", "squeezenet1_1", "vgg11",
           "vgg11_bn", "shufflenet_v2_x1_0", "regnet_x_400mf",
           "regnet_y_400mf", "mnasnet0_5", "googlenet", "convnext_tiny",
           "vit_b_16", "swin_t", "nn.TransformerEncoder",
           "nn.TransformerDecoder"]
METHODS = ["torch", "checkpoint_sequential", "none", "memory", "speed"]


def build(name):
    import torch
    import torch.nn as nn
    import torchvision
    torch.manual_seed(0)
    if name == "nn.TransformerEncoder":
        return nn.TransformerEncoder(nn.TransformerEncoderLayer(
            64, 4, 128, batch_first=True), 2), torch.randn(4, 16, 64)
    if name == "nn.TransformerDecoder":
        class Dec(nn.Module):
            def __init__(self):
                super().__init__()
                self.dec = nn.TransformerDecoder(nn.TransformerDecoderLayer(
                    64, 4, 128, batch_first=True), 2)

            def forward(self, x):
                return self.dec(x, x)
        return Dec(), torch.randn(4, 16, 64)
    kw = {"num_classes": 10}
    size = 64
    if name == "googlenet":
        kw.update(aux_logits=False, init_weights=False)
    if name in ("vit_b_16", "convnext_tiny", "vit_tiny"):
        size = 32
    if name == "vit_b_16":
        kw.update(image_size=32)
    if name == "vit_tiny":
        model = torchvision.models.VisionTransformer(
            image_size=32, patch_size=4, num_layers=4, num_heads=4,
            hidden_dim=64, mlp_dim=128, **kw)
    else:
        model = getattr(torchvision.models, name)(**kw)
    return model, torch.randn(2, 3, size, size)


def as_sequential(name, model):
    """The model as an nn.Sequential of its own layers (same forward), for
    checkpoint_sequential; None where its forward is not a chain."""
    import torch.nn as nn
    if name.startswith("resnet"):
        m = model
        return nn.Sequential(m.conv1, m.bn1, m.relu, m.maxpool, m.layer1,
                             m.layer2, m.layer3, m.layer4, m.avgpool,
                             nn.Flatten(1), m.fc)
    if name.startswith(("mobilenet", "efficientnet")):
        return nn.Sequential(*model.features, nn.AdaptiveAvgPool2d(1),
                             nn.Flatten(1), *model.classifier)
    if name.startswith("densenet"):
        return nn.Sequential(*model.features, nn.ReLU(),
                             nn.AdaptiveAvgPool2d(1), nn.Flatten(1),
                             model.classifier)
    return None


def rss_now():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def reset_peak_rss():
    """Start the process's peak RSS (VmHWM) afresh: ru_maxrss cannot be
    reset, and on Linux a child process starts with its parent's."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def peak_rss():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def one(name, method, steps, batch, size):
    """Run one (model, method) in this process: a JSON line."""
    import torch
    import torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint_sequential
    import memgrad.torch as mgt
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    model, example = build(name)
    # dropout and stochastic depth off: the reference's masks, torch's
    # and memgrad's would all differ
    for mod in model.modules():
        if isinstance(mod, torch.nn.Dropout) or \
                type(mod).__name__ == "StochasticDepth":
            mod.p = 0.0
        if isinstance(mod, torch.nn.MultiheadAttention):
            mod.dropout = 0.0  # attention dropout is a float, not a module
    if example.dim() == 4:
        # the ViTs are built for 32x32 images
        s = 32 if name in ("vit_tiny", "vit_b_16") else size
        x = torch.randn(batch, 3, s, s)
    else:  # a Transformer stack: (batch, sequence, width) as its example
        x = torch.randn(batch, *example.shape[1:])
    labels = torch.arange(batch) % 10

    def logits(out):
        # a Transformer stack's output per position, averaged
        return out.mean(1) if out.dim() == 3 else out
    ref = copy.deepcopy(model)
    # plain PyTorch's first-step gradients, the reference
    F.cross_entropy(logits(ref(x)), labels).backward()
    want = [p.grad.clone() for p in ref.parameters()]
    del ref
    if method == "torch":
        run = model
    elif method == "checkpoint_sequential":
        seq = as_sequential(name, model)
        if seq is None:
            return {"model": name, "method": method, "na": True}
        # a segment's input is a leaf that requires grad: torch refuses an
        # in-place ReLU on it, so none is in place here
        for mod in seq.modules():
            if getattr(mod, "inplace", False):
                mod.inplace = False

        def run(t):
            # an input that requires grad, else torch's (reentrant)
            # checkpoint leaves the parameters inside without gradients
            return checkpoint_sequential(seq, 4, t.requires_grad_(True))
    else:
        run = mgt.fx.Module(model, (x,), policy=method)
    params = list(model.parameters())
    opt = torch.optim.SGD(params, lr=0.01)
    base = rss_now()
    reset_peak_rss()
    times, err = [], None
    for i in range(steps):
        t0 = time.perf_counter()
        opt.zero_grad()
        F.cross_entropy(logits(run(x)), labels).backward()
        if i == 0:
            # as python/tests/test_torch_zoo.py judges: a parameter whose
            # true gradient is zero (a BatchNorm bias that the next
            # BatchNorm cancels) holds rounding noise in both, so the
            # denominator is at least 1e-4 of the largest gradient entry
            floor = 1e-4 * max(float(w.abs().max()) for w in want)
            err = max(float((p.grad - w).abs().max()) /
                      max(float(w.abs().max()), floor)
                      for p, w in zip(params, want))
        opt.step()
        times.append(time.perf_counter() - t0)
    peak = peak_rss()
    return {"model": name, "method": method, "grad_err": err,
            "peak_mb": max(peak - base, 0) / 2 ** 20,
            "step_ms": 1e3 * statistics.median(times[1:])}


def loads(name):
    import memgrad.torch as mgt
    warnings.filterwarnings("ignore")
    model, x = build(name)
    r = mgt.fx.check(model, (x,))
    if r.ok:
        return "yes", ""
    first = str(r).splitlines()
    why = first[1].strip() if len(first) > 1 else first[0]
    return "no", why[:110]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--one", nargs=2, metavar=("MODEL", "METHOD"))
    ap.add_argument("--models", default=",".join(TIMED))
    a = ap.parse_args()
    if a.one:
        print(json.dumps(one(a.one[0], a.one[1], a.steps, a.batch, a.size)))
        return
    import torch
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    print("# %s, %s, %s, torch %s, OMP_NUM_THREADS=%s" % (
        time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), commit,
        "2-core AMD EPYC VM (shared with other builds)", torch.__version__,
        os.environ.get("OMP_NUM_THREADS", "unset")))
    print("# " + " ".join(["python3"] + sys.argv))
    print("# load average before the runs: %.2f %.2f %.2f"
          % os.getloadavg())
    print()
    print("## Loads: memgrad.torch.fx.check() on each model (torchvision "
          "classification models at 64x64, 32x32 for vit_b_16 and "
          "convnext_tiny; two-layer transformer stacks of width 64)")
    print()
    print("| model | loads | first unmapped |")
    print("|---|---|---|")
    for name in CHECKED:
        ok, why = loads(name)
        print("| %s | %s | %s |" % (name, ok, why.replace("|", "/")))
    print()
    print("## Training steps, float32, batch %d at %dx%d (vit_tiny: "
          "VisionTransformer 32x32, patch 4, 4 layers, width 64), %d steps"
          % (a.batch, a.size, a.size, a.steps))
    print()
    print("grad err: max over parameters of max|g - g_torch| / "
          "max(max|g_torch|, 1e-4 max over all parameters of max|g_torch|) "
          "at the first step, against plain PyTorch float32. peak: the "
          "steps' peak RSS above the RSS before the first step. step: "
          "median step time after the first.")
    print()
    print("| model | method | grad err | peak MB | step ms | step / torch |")
    print("|---|---|---|---|---|---|")
    for name in a.models.split(","):
        rows = []
        for method in METHODS:
            out = subprocess.run(
                [sys.executable, __file__, "--one", name, method,
                 "--steps", str(a.steps), "--batch", str(a.batch),
                 "--size", str(a.size)], capture_output=True, text=True)
            if out.returncode != 0:
                rows.append({"model": name, "method": method,
                             "fail": out.stderr.strip().splitlines()[-1]})
            else:
                rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        t0 = rows[0].get("step_ms")
        for r in rows:
            if r.get("na"):
                print("| %s | %s | n/a (forward is not a chain) | | | |"
                      % (name, r["method"]))
            elif r.get("fail"):
                print("| %s | %s | failed: %s | | | |" % (
                    name, r["method"], r["fail"][:80]))
            else:
                print("| %s | %s | %.1e | %.0f | %.0f | %.2f |" % (
                    name, r["method"] if r["method"] in (
                        "torch", "checkpoint_sequential")
                    else "memgrad " + r["method"], r["grad_err"],
                    r["peak_mb"], r["step_ms"], r["step_ms"] / t0))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
