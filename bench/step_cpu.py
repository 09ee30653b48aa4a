"""bench/step_cpu.py - A/B of memgrad.torch's training-step CPU time
between libmemgrad builds (issue 28's step time), for a shared machine:
per (model, policy, library) one fresh process runs `--steps` training
steps (optimizer.zero_grad(), forward, cross-entropy, backward, SGD step)
on one thread, and the median step's CPU time (user + system of the
process, time.process_time) after the first is reported. Rounds alternate
the libraries, so that the load of a shared machine falls on both alike;
the table gives each round's median and the ratio of the medians of the
rounds. Models and sizes as bench/torch_rss.py. A policy may also be
`torch` or `checkpoint_sequential` (4 segments, as torch_rss.py runs it),
which use no memgrad: run with every library, they give a reference
measured in the same minutes.

    OMP_NUM_THREADS=1 python3 bench/step_cpu.py \\
        --lib base=/path/old/libmemgrad.so:/path/old/python \\
        --lib new=build-shared/libmemgrad.so:python \\
        [--models resnet50,vgg11_bn] [--policies none,memory] [--rounds 2]
        [--stat median|min]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_rss import CASES, sequential  # noqa: E402


def one(name, policy, steps, batch, size):
    import warnings
    import torch
    import torch.nn.functional as F
    import torchvision
    import memgrad.torch as mgt
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(num_classes=10)
    for mod in model.modules():  # as torch_rss.py: no dropout
        if isinstance(mod, torch.nn.Dropout) or \
                type(mod).__name__ == "StochasticDepth":
            mod.p = 0.0
    x = torch.randn(batch, 3, size, size)
    labels = torch.arange(batch) % 10
    if policy == "torch":
        run = model
    elif policy == "checkpoint_sequential":  # as torch_rss.py runs it
        from torch.utils.checkpoint import checkpoint_sequential
        seq = sequential(name, model)
        for mod in seq.modules():
            if getattr(mod, "inplace", False):
                mod.inplace = False

        def run(t):
            return checkpoint_sequential(seq, 4, t.requires_grad_(True))
    else:
        run = mgt.fx.Module(model, (x,), policy=policy)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    cpus = []
    for _ in range(steps):
        c0 = time.process_time()
        opt.zero_grad()
        F.cross_entropy(run(x), labels).backward()
        opt.step()
        cpus.append(time.process_time() - c0)
    stat = min if os.environ.get("MG_STEP_STAT") == "min" else \
        statistics.median
    return 1e3 * stat(cpus[1:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", action="append", required=True,
                    help="NAME=LIBMEMGRAD.so:PYTHON_DIR")
    ap.add_argument("--models", default="resnet50,vgg11_bn")
    ap.add_argument("--policies", default="none,memory")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--one", nargs=4)
    ap.add_argument("--stat", choices=["median", "min"], default="median",
                    help="of a process's steps after the first: min is "
                    "the step the machine's other load disturbed least")
    a = ap.parse_args()
    os.environ["MG_STEP_STAT"] = a.stat
    if a.one:
        m, p, b, s = a.one
        print(json.dumps(one(m, p, a.steps, int(b), int(s))))
        return
    libs = []
    for spec in a.lib:
        name, rest = spec.split("=", 1)
        so, py = rest.split(":", 1)
        libs.append((name, os.path.abspath(so), os.path.abspath(py)))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    print("# %s, commit %s, %d-core AMD EPYC VM (AVX2, shared), "
          "OMP_NUM_THREADS=%s" % (
              time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), commit,
              os.cpu_count(), os.environ.get("OMP_NUM_THREADS", "unset")))
    print("# $ python3 " + " ".join(sys.argv))
    print("# libraries: " + "; ".join("%s = %s with %s" % l for l in libs))
    print("# load average before the runs: %.2f %.2f %.2f" % os.getloadavg())
    print()
    names = [l[0] for l in libs]
    print("cpu ms: per process, the %s step CPU time after the first; per "
          "library, the median of the rounds (each round's in brackets)."
          % a.stat)
    print()
    print("| model | policy | " + " | ".join(
        "%s cpu ms (rounds)" % n for n in names) +
        " | %s / %s |" % (names[-1], names[0]))
    print("|---|---|" + "---|" * (len(names) + 1))
    cases = {c[0]: c for c in CASES}
    for model in a.models.split(","):
        _, batch, size = cases[model]
        for policy in a.policies.split(","):
            got = {n: [] for n in names}
            for _ in range(a.rounds):
                for n, so, py in libs:
                    env = dict(os.environ, MEMGRAD_LIBRARY=so, PYTHONPATH=py)
                    out = subprocess.run(
                        [sys.executable, __file__, "--lib", "x=y:z",
                         "--steps", str(a.steps), "--one", model, policy,
                         str(batch), str(size)],
                        capture_output=True, text=True, env=env)
                    if out.returncode:
                        raise SystemExit(out.stderr)
                    got[n].append(float(out.stdout.strip().splitlines()[-1]))
            med = {n: statistics.median(v) for n, v in got.items()}
            print("| %s | %s | %s | %.2f |" % (
                model, policy, " | ".join(
                    "%.0f (%s)" % (med[n], ", ".join(
                        "%.0f" % v for v in got[n])) for n in names),
                med[names[-1]] / med[names[0]]))
            sys.stdout.flush()


if __name__ == "__main__":
    main()
