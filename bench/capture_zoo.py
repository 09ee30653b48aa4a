"""The ATen capture on Hugging Face and timm models: for each, whether
memgrad.torch.Module captures it whole, how torch.compile(backend=
"memgrad") runs it (memgrad, pieces or eager), its gradients beside eager
PyTorch's, its pool peak predicted and measured, and one training step's
time beside eager PyTorch's (one thread, float32, medians of interleaved
steps in one process).

    OMP_NUM_THREADS=1 python bench/capture_zoo.py [--steps 5] [models...]

Writes a table on stdout; bench/results/capture-zoo.txt is its output,
with the command line, machine and commit in its header. The models are
python/tests/test_aten_capture.py's (small configs, random init)."""
import argparse
import copy
import os
import platform
import statistics
import subprocess
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python", "tests"))
import test_aten_capture as zoo  # noqa: E402
import memgrad.torch as mt  # noqa: E402


def _header(argv):
    try:
        commit = subprocess.check_output(
            ["git", "rev-parse", "--short", "HEAD"], cwd=HERE).decode().strip()
        dirty = subprocess.check_output(
            ["git", "status", "--short", "--untracked-files=no"],
            cwd=HERE).decode().strip()
    except (OSError, subprocess.CalledProcessError):
        commit, dirty = "unknown", ""
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    print("# date: %s" % time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    print("# command: OMP_NUM_THREADS=%s python %s"
          % (os.environ.get("OMP_NUM_THREADS", "(unset)"), " ".join(argv)))
    print("# commit: %s%s" % (commit, " (DIRTY TREE)" if dirty else ""))
    print("# machine: %s, %d CPUs, %s; torch %s, python %s"
          % (cpu, os.cpu_count(), platform.platform(), torch.__version__,
             platform.python_version()))


def _rel(got, want):
    top = max(w.abs().max().item() for w in want if w is not None)
    worst = 0.0
    for g, w in zip(got, want):
        if w is None or g is None:
            continue
        den = max(w.abs().max().item(), 1e-3 * top)
        worst = max(worst, (g - w).abs().max().item() / den)
    return worst


def _grads(model, run, args):
    model.zero_grad(set_to_none=True)
    zoo._loss(run(*args)).backward()
    return [p.grad for p in model.parameters()]


def _as(args, dtype):
    return tuple(a.to(dtype) if a.is_floating_point() else a for a in args)


def row(make, steps):
    name = make.__name__
    torch.manual_seed(0)
    base, args = make()
    base.train()
    kw = zoo._kwargs(base)
    out = {"model": name}
    # float64 gradients beside eager's
    b64, a64 = copy.deepcopy(base).double(), _as(args, torch.float64)
    m64 = copy.deepcopy(b64)
    try:
        w64 = mt.Module(m64, a64, policy="none")
    except mt.Unsupported as e:
        out["module"] = "refused: " + str(e).splitlines()[1].strip()[:60]
        return out
    out["module"] = "whole"
    want64 = _grads(b64, lambda *a: b64(*a, **kw), a64)
    out["f64_err"] = "%.1e" % _rel(_grads(m64, w64, a64), want64)
    # torch.compile(backend="memgrad"), float64
    torch._dynamo.reset()
    mt.backend.reset_report()
    c64 = copy.deepcopy(b64)
    comp = torch.compile(c64, backend="memgrad")
    got = _grads(c64, lambda *a: comp(*a, **kw), a64)
    rows = mt.compile_report()
    out["compile"] = "+".join(sorted({r["ran"] for r in rows})) or "-"
    out["compile_f64_err"] = "%.1e" % _rel(got, want64)
    if not out["module"] == "whole":
        return out
    # float32: the error beside PyTorch float32's own distance from float64
    b32, a32 = copy.deepcopy(base).float(), _as(args, torch.float32)
    eager32 = _grads(b32, lambda *a: b32(*a, **kw), a32)
    m32 = copy.deepcopy(b32)
    w_none = mt.Module(m32, a32, policy="none")
    out["f32_err"] = "%.1e" % _rel(_grads(m32, w_none, a32), want64)
    out["torch_f32_err"] = "%.1e" % _rel(eager32, want64)
    w_mem = mt.Module(copy.deepcopy(b32), a32, policy="memory")
    w_mem.executor.reset_peak()
    zoo._loss(w_mem(*a32)).backward()
    out["mem_peak_pred"] = w_mem.predicted_peak
    out["mem_peak_meas"] = w_mem.executor.pool_stats()["peak_bytes_in_use"]
    # step times, interleaved
    runs = {"eager": (b32, lambda *a: b32(*a, **kw)),
            "none": (m32, w_none),
            "memory": (w_mem.module, w_mem)}
    times = {k: [] for k in runs}
    for _ in range(steps + 1):
        for k, (model, run) in runs.items():
            t = time.perf_counter()
            _grads(model, run, a32)
            times[k].append(time.perf_counter() - t)
    med = {k: statistics.median(v[1:]) for k, v in times.items()}
    out["eager_ms"] = "%.1f" % (1e3 * med["eager"])
    out["none_x"] = "%.2f" % (med["none"] / med["eager"])
    out["memory_x"] = "%.2f" % (med["memory"] / med["eager"])
    return out


COLS = ["model", "module", "compile", "f64_err", "compile_f64_err",
        "f32_err", "torch_f32_err", "mem_peak_pred", "mem_peak_meas",
        "eager_ms", "none_x", "memory_x"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("models", nargs="*")
    opt = ap.parse_args()
    torch.set_num_threads(1)
    _header(sys.argv)
    print("# f64_err: Module's float64 gradients, largest error relative to "
          "each gradient's largest element (floor 1e-3 of the largest "
          "gradient), beside eager float64; compile_f64_err the same "
          "through torch.compile(backend='memgrad'); f32_err memgrad "
          "float32 and torch_f32_err eager float32, both beside eager "
          "float64; mem_peak_*: policy memory's pool peak, predicted and "
          "measured (bytes); eager_ms: eager float32 step (forward, loss, "
          "backward) median; none_x, memory_x: memgrad's step over "
          "eager's, medians of %d interleaved steps" % opt.steps)
    models = [m for m in zoo.MODELS + [zoo_mixtral]
              if not opt.models or m.__name__ in opt.models]
    print(" | ".join(COLS))
    for make in models:
        try:
            r = row(make, opt.steps)
        except Exception as e:  # noqa: BLE001 - a row says what failed
            r = {"model": make.__name__,
                 "module": "FAILED %s: %s" % (type(e).__name__,
                                              str(e).splitlines()[0][:80])}
        print(" | ".join(str(r.get(c, "-")) for c in COLS), flush=True)


def zoo_mixtral():
    T = zoo.pytest.importorskip("transformers")
    cfg = zoo._hf("Mixtral", num_hidden_layers=1, hidden_size=32,
                  intermediate_size=64, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=zoo.V,
                  num_local_experts=4, num_experts_per_tok=2,
                  max_position_embeddings=32)
    return T.MixtralForCausalLM(cfg), zoo._ids()


zoo_mixtral.__name__ = "mixtral"

if __name__ == "__main__":
    main()
