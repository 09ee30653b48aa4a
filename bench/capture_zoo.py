"""The ATen capture on Hugging Face and timm models, each beside PyTorch's
own memory points. For each model of python/tests/test_aten_zoo.py (small
configs, random init, its loss):
  - whether memgrad.torch.Module captures it whole, and how
    torch.compile(backend="memgrad") runs it (memgrad, pieces or eager);
  - its float64 gradients beside eager's (Module and torch.compile), and
    float32 beside eager float32's own distance from float64;
  - policy memory's pool peak, predicted and measured;
  - one training step's time and peak RSS increase, float32, one thread,
    for: PyTorch eager (SDPA where the model has it), per-block
    torch.utils.checkpoint (non-reentrant), selective activation
    checkpointing (the same blocks; matmul, convolution and attention
    outputs saved, the rest recomputed), torch.compile (Inductor) at its
    default partitioner and at activation_memory_budget 0.5, and memgrad
    none and memory.

    OMP_NUM_THREADS=1 python bench/capture_zoo.py [--steps 5] [models...]

Writes a table on stdout; bench/results/capture-zoo.txt is its output,
with the command line, machine and commit in its header.

Blocks, for the two checkpoint runs: the model's largest module lists or
sequentials (by parameters) that hold at least 10% of its parameters and
do not nest in one another (GPT-2's h, BART's encoder and decoder layers,
timm's blocks or stages); each child is checkpointed.
Time: medians of interleaved steps in one process, after one step that
compiles. RSS: each model runs in a fresh process; there each run, in
turn, takes a first step, then malloc is trimmed and the peak RSS reset
(/proc/self/clear_refs), and the peak increase over two more steps is its
figure (the other runs' weights stay resident in both readings)."""
import argparse
import copy
import ctypes
import functools
import gc
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python", "tests"))
import test_aten_zoo as zoo  # noqa: E402
import memgrad.torch as mt  # noqa: E402

RUNS = ["eager", "per-block", "selective", "compile", "compile 0.5",
        "memgrad none", "memgrad memory"]


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
    print("# machine: %s, %d CPUs, %s; torch %s, python %s; load average "
          "at the start %.1f" % (cpu, os.cpu_count(), platform.platform(),
                                 torch.__version__, platform.python_version(),
                                 os.getloadavg()[0]))


def _makers():
    return {m.__name__: m for m in zoo.NAMED + zoo.UNNAMED}


def _worst(got, want):
    return max(zoo.rel_errors(got, want))


def _grads(model, run, args):
    model.zero_grad(set_to_none=True)
    zoo.loss_of(run(*args)).backward()
    return [p.grad for p in model.parameters()]


def _as(args, dtype):
    return tuple(a.to(dtype) if a.is_floating_point() else a for a in args)


# ------------------------------------------------ PyTorch's memory points
def _blocks(model):
    """The module lists and sequentials that hold the model's blocks."""
    total = sum(p.numel() for p in model.parameters())
    cands = []
    for name, m in model.named_modules():
        if isinstance(m, (torch.nn.ModuleList, torch.nn.Sequential)) \
                and len(m) >= 2 and m is not model:
            n = sum(p.numel() for p in m.parameters())
            if n >= 0.1 * total:
                cands.append((n, name, m))
    chosen = []
    for n, name, m in sorted(cands, key=lambda c: -c[0]):
        if not any(name.startswith(c + ".") or c.startswith(name + ".")
                   for _, c, _ in chosen):
            chosen.append((n, name, m))
    return [m for _, _, m in chosen]


def _sac_context():
    from torch.utils.checkpoint import (CheckpointPolicy,
                                        create_selective_checkpoint_contexts)
    aten = torch.ops.aten
    save = {aten.mm.default, aten.addmm.default, aten.bmm.default,
            aten.convolution.default,
            aten._scaled_dot_product_flash_attention_for_cpu.default,
            aten._scaled_dot_product_efficient_attention.default,
            aten._scaled_dot_product_flash_attention.default}

    def policy(ctx, op, *args, **kwargs):
        return (CheckpointPolicy.MUST_SAVE if op in save else
                CheckpointPolicy.PREFER_RECOMPUTE)
    # timm's in-place activations write into a convolution's saved output;
    # PyTorch refuses that unless told the mutation is allowed
    return functools.partial(create_selective_checkpoint_contexts, policy,
                             allow_cache_entry_mutation=True)


def _checkpoint_blocks(model, selective):
    """Each block's forward through torch.utils.checkpoint; the number of
    blocks wrapped."""
    from torch.utils.checkpoint import checkpoint
    ck = {"use_reentrant": False}
    if selective:
        ck["context_fn"] = _sac_context()
    n = 0
    for seq in _blocks(model):
        for child in seq:
            orig = child.forward

            def fwd(*a, _orig=orig, **k):
                return checkpoint(_orig, *a, **ck, **k)
            child.forward = fwd
            n += 1
    return n


def make_run(name, base, args, kw):
    """(step, the module whose .grad it fills, memgrad wrapper or None,
    blocks wrapped or None)."""
    m = copy.deepcopy(base)
    wrapper, blocks = None, None
    if name == "eager":
        def fwd(*a):
            return m(*a, **kw)
    elif name in ("per-block", "selective"):
        blocks = _checkpoint_blocks(m, name == "selective")

        def fwd(*a):
            return m(*a, **kw)
    elif name.startswith("compile"):
        c = torch.compile(m)
        budget = 0.5 if name.endswith("0.5") else 1.0

        def fwd(*a):
            # the partitioner reads the budget when it compiles (the
            # first call); later calls run what it made
            with torch._functorch.config.patch(
                    activation_memory_budget=budget):
                return c(*a, **kw)
    elif name.startswith("memgrad "):
        wrapper = mt.Module(m, args, policy=name.split()[1])
        fwd = wrapper
    else:
        raise ValueError("no run %r" % name)

    def step():
        m.zero_grad(set_to_none=True)
        zoo.loss_of(fwd(*args)).backward()
    return step, m, wrapper, blocks


# ------------------------------------------------------------ measurement
def _trim():
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def _hwm_bytes():
    with open("/proc/self/status") as f:
        return [int(line.split()[1]) * 1024 for line in f
                if line.startswith("VmHWM:")][0]


def accuracy(make):
    """The capture and gradient columns."""
    torch.manual_seed(0)
    base, args = make()
    base.train()
    kw = zoo._kwargs(base)
    out = {}
    b64, a64 = copy.deepcopy(base).double(), _as(args, torch.float64)
    m64 = copy.deepcopy(b64)
    try:
        w64 = mt.Module(m64, a64, policy="none")
        out["module"] = "whole"
    except mt.Unsupported as e:
        out["module"] = "refused: " + str(e).splitlines()[1].strip()[:60]
        w64 = None
    want64 = _grads(b64, lambda *a: b64(*a, **kw), a64)
    if w64 is not None:
        out["f64_err"] = "%.1e" % _worst(_grads(m64, w64, a64), want64)
    torch._dynamo.reset()
    mt.backend.reset_report()
    c64 = copy.deepcopy(b64)
    comp = torch.compile(c64, backend="memgrad")
    got = _grads(c64, lambda *a: comp(*a, **kw), a64)
    out["compile"] = "+".join(sorted({r["ran"] for r in
                                      mt.compile_report()})) or "-"
    out["compile_f64_err"] = "%.1e" % _worst(got, want64)
    if w64 is None:
        return out
    b32, a32 = copy.deepcopy(base).float(), _as(args, torch.float32)
    out["torch_f32_err"] = "%.1e" % _worst(
        _grads(b32, lambda *a: b32(*a, **kw), a32), want64)
    m32 = copy.deepcopy(b32)
    out["f32_err"] = "%.1e" % _worst(
        _grads(m32, mt.Module(m32, a32, policy="none"), a32), want64)
    return out


def speed_and_memory(make, steps):
    """The time, RSS and peak columns, for every run, in this process."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    base, args = make()
    base.train().float()
    args = _as(args, torch.float32)
    kw = zoo._kwargs(base)
    out = {}
    runs = {}
    for name in RUNS:
        torch._dynamo.reset() if name == "compile" else None
        try:
            runs[name] = make_run(name, base, args, kw)
        except mt.Unsupported:
            continue
    # memory: one run at a time, after its first step
    for name, (step, m, w, blocks) in runs.items():
        if blocks is not None:
            out["blocks"] = blocks
        if w is not None:
            w.executor.reset_peak()
        step()
        if w is not None and name == "memgrad memory":
            out["mem_peak_pred"] = w.predicted_peak
            out["mem_peak_meas"] = w.executor.pool_stats()[
                "peak_bytes_in_use"]
        m.zero_grad(set_to_none=True)
        if w is not None:
            w.executor.pool_trim()
        _trim()
        before = _rss_bytes()
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM (Linux)
        for _ in range(2):
            step()
        out["rss " + name] = max(0, _hwm_bytes() - before)
        m.zero_grad(set_to_none=True)
        if w is not None:
            w.executor.pool_trim()
        _trim()
    # time: interleaved
    times = {k: [] for k in runs}
    for _ in range(steps):
        for k, (step, _m, _w, _b) in runs.items():
            t = time.perf_counter()
            step()
            times[k].append(time.perf_counter() - t)
    for k, v in times.items():
        out["time " + k] = statistics.median(v)
    return out


def _child(name, steps):
    torch.set_num_threads(1)
    make = _makers()[name]
    out = {}
    try:
        out.update(accuracy(make))
    except Exception as e:  # noqa: BLE001 - a row says what failed
        out["module"] = "FAILED %s: %s" % (type(e).__name__,
                                           str(e).splitlines()[0][:60])
    try:
        out.update(speed_and_memory(make, steps))
    except Exception as e:  # noqa: BLE001
        out["speed"] = "FAILED %s: %s" % (type(e).__name__,
                                          str(e).splitlines()[0][:60])
    print(json.dumps(out))


def _row(name, r):
    cells = [name, r.get("module", "-"), r.get("compile", "-"),
             r.get("f64_err", "-"), r.get("compile_f64_err", "-"),
             r.get("f32_err", "-"), r.get("torch_f32_err", "-"),
             str(r.get("blocks", "-")),
             "%s (%s)" % (r.get("mem_peak_meas", "-"),
                          r.get("mem_peak_pred", "-"))]
    te, re_ = r.get("time eager"), r.get("rss eager")
    cells.append(r["speed"] if "speed" in r else
                 "-" if te is None else "%.1f" % (1e3 * te))
    cells.append("-" if re_ is None else "%.2f" % (re_ / 2 ** 20))
    for k in RUNS[1:]:
        t, m = r.get("time " + k), r.get("rss " + k)
        cells.append("-" if t is None or not te else "%.2f" % (t / te))
        cells.append("-" if m is None else "%.2f" % (m / 2 ** 20))
    return " | ".join(cells)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("models", nargs="*")
    opt = ap.parse_args()
    if opt.child:
        return _child(opt.child, opt.steps)
    names = [n for n in _makers() if not opt.models or n in opt.models]
    _header(sys.argv)
    print("# f64_err: Module's float64 gradients, the largest error "
          "relative to each gradient's largest element (floor 1e-3 of the "
          "largest gradient), beside eager float64, over the parameters; "
          "compile_f64_err the same through torch.compile(backend="
          "'memgrad'); f32_err memgrad float32 and torch_f32_err eager "
          "float32, both beside eager float64")
    print("# blocks: children checkpointed by per-block and selective; "
          "memory peak: policy memory's pool peak, measured (predicted), "
          "bytes; eager ms and MiB: eager float32's median step and peak "
          "RSS increase; the other columns: time over eager's (t) and "
          "peak RSS increase (MiB); these models are small, so RSS "
          "differences below a MiB are mostly the allocator's; medians of %d interleaved steps; RSS: peak increase "
          "over two steps after a first, one run at a time in a fresh "
          "process per model" % opt.steps)
    print(" | ".join(
        ["model", "module", "compile", "f64_err", "compile_f64_err",
         "f32_err", "torch_f32_err", "blocks", "memory peak",
         "eager ms", "eager MiB"] +
        ["%s %s" % (k, a) for k in RUNS[1:] for a in ("t", "MiB")]))
    for name in names:
        try:
            r = json.loads(subprocess.check_output(
                [sys.executable, __file__, "--child", name, "--steps",
                 str(opt.steps)], stderr=subprocess.DEVNULL).decode()
                .splitlines()[-1])
        except (subprocess.CalledProcessError, ValueError, IndexError) as e:
            r = {"module": "FAILED (process): %s" % type(e).__name__}
        print(_row(name, r), flush=True)


if __name__ == "__main__":
    main()
