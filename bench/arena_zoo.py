"""bench/arena_zoo.py - issue 28's fragmentation figure on the zoo models
memgrad.torch runs: for each model (bench/torch_zoo.py's CHECKED list at
its sizes, then bench/torch_rss.py's four cases) and policy, the planned
arena of a training step as the bridge binds it (parameter gradients in
torch's memory: Plan.arena(bound=...)): its size, the most of its bytes
live at once (the lower bound any placement of these buffers has), and
their ratio, which the done-when holds to <= 1.05.

Planning only, no step is run and nothing is timed: the figures are
deterministic for a given commit and machine (oneDNN's workspace sizes,
part of the plan, depend on the CPU's ISA). One process per model.

--time adds a column: the CPU time (ms, this process) of the one
mg_plan_compile call that made the plan, which includes laying out its
arena; run it with OMP_NUM_THREADS=1, and compare two libraries
(MEMGRAD_LIBRARY) in the same minute. Not deterministic, so not part of
the committed table.

    MEMGRAD_LIBRARY=build/libmemgrad_shared_check.so PYTHONPATH=python \\
        python3 bench/arena_zoo.py > bench/results/arena-zoo.txt
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_zoo import CHECKED, build  # noqa: E402
from torch_rss import CASES  # noqa: E402

POLICIES = ["none", "memory"]


def one(name, batch, size, timed=False):
    import torch
    import torchvision
    import memgrad._lib as lib
    import memgrad.torch as mgt
    warnings.filterwarnings("ignore")
    spent = []
    compile_ = lib.plan_compile

    def timed_compile(*args):
        t = time.process_time()
        r = compile_(*args)
        spent.append(time.process_time() - t)
        return r
    if timed:  # the package calls it as _lib.plan_compile
        lib.plan_compile = timed_compile
    if batch:  # a torch_rss case
        torch.manual_seed(0)
        model = getattr(torchvision.models, name)(num_classes=10)
        x = torch.randn(batch, 3, size, size)
    else:
        model, x = build(name)
    rows = []
    for policy in POLICIES:
        del spent[:]
        m = mgt.fx.Module(model, (x,), policy=policy)
        cap = m._cap
        n_in = len(cap.inputs)
        a = cap.plan.arena(bound=cap.grads[n_in:])
        rows.append({"policy": policy, "input": list(x.shape),
                     "bytes": a["bytes"], "live_peak": a["live_peak"],
                     "compile_ms": 1e3 * sum(spent)})
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--one", nargs=3, metavar=("MODEL", "BATCH", "SIZE"))
    ap.add_argument("--models", default=None,
                    help="comma-separated subset of the zoo models")
    ap.add_argument("--time", action="store_true",
                    help="add mg_plan_compile's CPU ms per plan")
    a = ap.parse_args()
    if a.one:
        print(json.dumps(one(a.one[0], int(a.one[1]), int(a.one[2]),
                             a.time)))
        return
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    print("# %s, commit %s, %d-core %s VM (%s), planning only" % (
        time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), commit,
        os.cpu_count(), "AMD EPYC" if "AMD" in open(
            "/proc/cpuinfo").read() else platform.processor() or "CPU",
        platform.machine()))
    print("# $ python3 " + " ".join(sys.argv))
    print()
    print("arena: the plan's arena with the parameter gradients bound to "
          "torch's memory (Plan.arena(bound=...)); live peak: the most "
          "of its bytes live at once; ratio: arena / live peak (done-when: "
          "<= 1.05). MB = 2^20 bytes.%s" % (
              " compile ms: mg_plan_compile's CPU time for the plan, "
              "arena layout included." if a.time else ""))
    print()
    print("| model | input | policy | arena MB | live peak MB | ratio |%s"
          % (" compile ms |" if a.time else ""))
    print("|---|---|---|---|---|---|%s" % ("---|" if a.time else ""))
    cases = [(n, 0, 0) for n in CHECKED] + list(CASES)
    if a.models:
        keep = a.models.split(",")
        cases = [c for c in cases if c[0] in keep]
    worst, over, n = 0.0, [], 0
    mib = 2.0 ** 20
    for name, batch, size in cases:
        out = subprocess.run([sys.executable, __file__, "--one", name,
                              str(batch), str(size)] +
                             (["--time"] if a.time else []),
                             capture_output=True, text=True)
        if out.returncode != 0:
            why = (out.stderr.strip().splitlines() or ["?"])[-1][:100]
            print("| %s | | | failed: %s | | |" % (name, why))
            continue
        for r in json.loads(out.stdout.strip().splitlines()[-1]):
            ratio = r["bytes"] / r["live_peak"] if r["live_peak"] else 1.0
            n += 1
            worst = max(worst, ratio)
            if ratio > 1.05:
                over.append("%s %s" % (name, r["policy"]))
            print("| %s | %s | %s | %.2f | %.2f | %.4f |%s" % (
                name, "x".join(map(str, r["input"])), r["policy"],
                r["bytes"] / mib, r["live_peak"] / mib, ratio,
                " %.1f |" % r["compile_ms"] if a.time else ""))
        sys.stdout.flush()
    print()
    print("%d plans; largest ratio %.4f; over 1.05: %s" % (
        n, worst, ", ".join(over) if over else "none"))


if __name__ == "__main__":
    main()
