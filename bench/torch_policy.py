"""bench/torch_policy.py - the worked example of docs/python.md's "which
policy to pick": one model through memgrad.torch.fx.check() and then
memgrad.torch.fx.Module under each policy, with what report() predicts (the
plan's peak of memgrad's pool, and the recomputation's share of a forward
pass) beside what a training step measures (the pool's peak, read from
the executor, and the median step time of 3 after a first).

    MEMGRAD_LIBRARY=build/libmemgrad_shared_check.so PYTHONPATH=python \\
        OMP_NUM_THREADS=1 python3 bench/torch_policy.py \\
        [--model resnet18] [--batch 16] [--size 112]
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F
import torchvision

import memgrad.torch as mgt

MiB = 2.0 ** 20


def step_stats(mine, x, labels):
    ex = mine.executor
    times = []
    for i in range(4):
        mine.zero_grad(set_to_none=True)
        if i == 1:
            ex.reset_peak()
        t0 = time.perf_counter()
        F.cross_entropy(mine(x), labels).backward()
        times.append(time.perf_counter() - t0)
    return ex.pool_stats()["peak_bytes_in_use"], statistics.median(times[1:])


def report_lines(mine):
    keep = ("plan:", "recomputed:", "predicted peak:")
    return [ln for ln in mine.report().splitlines() if ln.startswith(keep)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--size", type=int, default=112)
    a = ap.parse_args()
    torch.set_num_threads(1)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    print("# %s, %s, 2-core AMD EPYC VM (shared with other builds), torch "
          "%s, OMP_NUM_THREADS=%s, load average %.2f %.2f %.2f" % (
              time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), commit,
              torch.__version__, os.environ.get("OMP_NUM_THREADS", "unset"),
              *os.getloadavg()))
    print("# " + " ".join(["python3"] + sys.argv))
    torch.manual_seed(0)
    model = getattr(torchvision.models, a.model)(num_classes=10)
    x = torch.randn(a.batch, 3, a.size, a.size)
    labels = torch.arange(a.batch) % 10
    print("\n$ memgrad.torch.fx.check(%s, (x,))   # x: %s" % (
        a.model, list(x.shape)))
    print(mgt.fx.check(model, (x,)))
    rows = []
    none_peak = None
    policies = [("none", None), ("memory", None), ("speed", None)]
    for policy, budget in policies + [("budget", 0.8), ("budget", 0.6)]:
        kw = {}
        label = policy
        if policy == "budget":
            kw["budget_bytes"] = int(budget * none_peak)
            label = "budget %.1fx none (%d bytes)" % (budget,
                                                      kw["budget_bytes"])
        try:
            mine = mgt.fx.Module(model, (x,), policy=policy, **kw)
        except Exception as e:  # noqa: BLE001 - reported as it is
            print("\n$ memgrad.torch.fx.Module(%s, (x,), policy=%r%s)" % (
                a.model, policy, ", budget_bytes=%d" % kw["budget_bytes"]
                if kw else ""))
            print("%s: %s" % (type(e).__name__, e))
            continue
        if policy == "none":
            none_peak = mine.predicted_peak
        print("\n$ memgrad.torch.fx.Module(%s, (x,), policy=%r%s).report()"
              % (a.model, policy, ", budget_bytes=%d" % kw["budget_bytes"]
                 if kw else ""))
        print("\n".join(report_lines(mine)))
        peak, t = step_stats(mine, x, labels)
        rows.append((label, mine.predicted_peak, peak, t))
    print("\n| policy | predicted peak MiB | measured pool peak MiB | "
          "step s | step / none |")
    print("|---|---|---|---|---|")
    for label, pred, peak, t in rows:
        print("| %s | %.1f | %.1f | %.3f | %.2f |" % (
            label, pred / MiB, peak / MiB, t, t / rows[0][3]))


if __name__ == "__main__":
    main()
