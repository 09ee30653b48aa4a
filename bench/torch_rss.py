"""bench/torch_rss.py - issue 28's done-when measurement through
memgrad.torch: peak RSS increase and step time of a training step on
resnet34, resnet50 and efficientnet_b0 at batch 16, 64x64, and vgg11_bn at
batch 2, 224x224 (float32, 10 classes), for plain PyTorch,
torch.utils.checkpoint.checkpoint_sequential (4 segments), and memgrad's
policies none, memory, and budget at checkpoint_sequential's memory.

One process per (model, method). A process builds the model and input
(and memgrad's plan), then resets its peak RSS (VmHWM, through
/proc/self/clear_refs) and runs the steps: optimizer.zero_grad() (torch
1.13: .grad zeroed in place, None before the first step), forward,
cross-entropy, backward, SGD step. peak: VmHWM less the RSS before the
first step, so parameters' .grad (allocated in the first step) count for
every method. step: median step time after the first. One thread
(OMP_NUM_THREADS=1, torch.set_num_threads(1)).

budget: memgrad given checkpoint_sequential's memory. budget_bytes (which
measures memgrad's pool) = checkpoint_sequential's peak increase less
what memgrad's process holds outside its pool, measured in the same run
by the policy-none case (its peak increase less its pool's reservation:
the gradients in torch's memory, the kernels' lazy state), so that the
budget run aims at checkpoint_sequential's RSS. (Until 2026-11-26 18:15
UTC the budget was checkpoint_sequential's peak less the parameters'
bytes, which aimed about 40 MB below it on resnet34.)

    MEMGRAD_LIBRARY=build-shared/libmemgrad.so PYTHONPATH=python \\
        OMP_NUM_THREADS=1 python3 bench/torch_rss.py [--steps 7] \\
        > bench/results/torch-rss.txt
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_zoo import as_sequential, peak_rss, reset_peak_rss, rss_now  # noqa

CASES = [("resnet34", 16, 64), ("resnet50", 16, 64),
         ("efficientnet_b0", 16, 64), ("vgg11_bn", 2, 224)]
METHODS = ["torch", "checkpoint_sequential", "none", "memory", "budget"]


def sequential(name, model):
    import torch.nn as nn
    if name.startswith("vgg"):
        return nn.Sequential(*model.features, model.avgpool, nn.Flatten(1),
                             *model.classifier)
    return as_sequential(name, model)


def one(name, method, steps, batch, size, budget):
    import torch
    import torch.nn.functional as F
    import torchvision
    from torch.utils.checkpoint import checkpoint_sequential
    import memgrad.torch as mgt
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(num_classes=10)
    for mod in model.modules():  # as bench/torch_zoo.py: no dropout
        if isinstance(mod, torch.nn.Dropout) or \
                type(mod).__name__ == "StochasticDepth":
            mod.p = 0.0
    x = torch.randn(batch, 3, size, size)
    labels = torch.arange(batch) % 10
    params = list(model.parameters())
    pbytes = sum(p.numel() * p.element_size() for p in params)
    rep = None
    if method == "torch":
        run = model
    elif method == "checkpoint_sequential":
        seq = sequential(name, model)
        for mod in seq.modules():
            if getattr(mod, "inplace", False):
                mod.inplace = False

        def run(t):
            return checkpoint_sequential(seq, 4, t.requires_grad_(True))
    else:
        kw = {"budget_bytes": budget} if method == "budget" else {}
        run = mgt.fx.Module(model, (x,), policy=method, **kw)
    opt = torch.optim.SGD(params, lr=0.01)
    base = rss_now()
    reset_peak_rss()
    times, cpus = [], []
    for _ in range(steps):
        t0, c0 = time.perf_counter(), time.process_time()
        opt.zero_grad()
        F.cross_entropy(run(x), labels).backward()
        opt.step()
        times.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    peak = peak_rss()
    r = {"model": name, "method": method,
         "peak": max(peak - base, 0), "param_bytes": pbytes,
         "step_ms": 1e3 * statistics.median(times[1:]),
         "cpu_ms": 1e3 * statistics.median(cpus[1:])}
    if method not in ("torch", "checkpoint_sequential"):
        # after the steps: the slot is what they used (none where every
        # .grad was None or zeros)
        rep = run.memory_report()
        st = run.executor.pool_stats()
        r.update(reserved=st["bytes_reserved"], report=rep)
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=7)
    ap.add_argument("--one", nargs=5,
                    metavar=("MODEL", "METHOD", "BATCH", "SIZE", "BUDGET"))
    ap.add_argument("--models", default=",".join(c[0] for c in CASES))
    a = ap.parse_args()
    if a.one:
        m, meth, b, s, bud = a.one
        print(json.dumps(one(m, meth, a.steps, int(b), int(s), int(bud))))
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
    print("peak: peak RSS increase over the steps (MB = 2^20 bytes). "
          "vs torch / vs cs: peak over plain PyTorch's / "
          "checkpoint_sequential's. step: median step ms after the first "
          "(wall clock); cpu: the median step's CPU time of the process "
          "(user + system, all threads), the figure to compare on a "
          "shared machine. "
          "reserved: memgrad's pool after the steps; arena, outputs, slot: "
          "Module.memory_report() after the steps (the plan's arena; pool "
          "blocks of the output, batch statistics and input gradients; the "
          "accumulation slot, which a .grad of None or zeros does not "
          "use). %d steps." % a.steps)
    print()
    print("| model | batch, size | method | peak MB | vs torch | vs cs | "
          "step ms | step vs cs | cpu ms | cpu vs cs | reserved MB | arena "
          "| outputs | slot |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    mib = 2.0 ** 20
    for name, batch, size in CASES:
        if name not in a.models.split(","):
            continue
        rows, budget, cs_peak, outside = {}, 0, None, None
        for method in METHODS:
            out = subprocess.run(
                [sys.executable, __file__, "--steps", str(a.steps), "--one",
                 name, method, str(batch), str(size), str(budget)],
                capture_output=True, text=True)
            if out.returncode != 0:
                rows[method] = {"fail": (out.stderr.strip().splitlines()
                                         or ["?"])[-1]}
                continue
            r = json.loads(out.stdout.strip().splitlines()[-1])
            rows[method] = r
            if method == "checkpoint_sequential":
                cs_peak = r["peak"]
            if method == "none":
                outside = max(r["peak"] - r["reserved"], 0)
            if cs_peak is not None and outside is not None:
                budget = max(cs_peak - outside, 1 << 20)
        t, cs = rows.get("torch", {}), rows.get("checkpoint_sequential", {})
        for method in METHODS:
            r = rows[method]
            label = method if method in ("torch", "checkpoint_sequential") \
                else "memgrad " + method + (
                    " (%.0f MB)" % (budget / mib) if method == "budget"
                    else "")
            if "fail" in r:
                print("| %s | %d, %d | %s | failed: %s |||||||||||" % (
                    name, batch, size, label, r["fail"][:90]))
                continue

            def ratio(a_, b_):
                return "%.2f" % (a_ / b_) if b_ else "-"
            rep = r.get("report")
            print("| %s | %d, %d | %s | %.1f | %s | %s | %.0f | %s | %.0f | "
                  "%s | %s | %s | %s | %s |" % (
                      name, batch, size, label, r["peak"] / mib,
                      ratio(r["peak"], t.get("peak", 0)),
                      ratio(r["peak"], cs.get("peak", 0)), r["step_ms"],
                      ratio(r["step_ms"], cs.get("step_ms", 0)),
                      r["cpu_ms"], ratio(r["cpu_ms"], cs.get("cpu_ms", 0)),
                      "%.1f" % (r["reserved"] / mib) if rep else "",
                      "%.1f" % (rep["pool_arena"] / mib) if rep else "",
                      "%.1f" % (rep["pool_outputs"] / mib) if rep else "",
                      "%.1f" % (rep["accumulation_slot"] / mib) if rep
                      else ""))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
