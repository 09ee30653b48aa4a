"""bench/memory_tail.py - what the memory policy recomputes on the zoo
models of bench/torch_rss.py, planned through memgrad.torch by one or more
libmemgrad builds (issue 28, resnet50's step time): per (model, library)
one fresh process traces the model in training mode, compiles the memory
policy's plan and prints its summary: predicted peak (nothing bound, and
in the budget's measure), checkpoints, recomputed ops and flops as a
fraction of one forward pass. Plans only; no step runs, so the figures do
not depend on the machine's load.

    python3 bench/memory_tail.py \\
        --lib base=/path/old/libmemgrad.so:/path/old/python \\
        --lib new=build-shared/libmemgrad.so:python [--policy memory]
"""
import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_rss import CASES  # noqa: E402


def one(name, policy, batch, size):
    import warnings
    import torch
    import torchvision
    import memgrad.torch as mgt
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(num_classes=10)
    x = torch.randn(batch, 3, size, size)
    m = mgt.fx.Module(model, (x,), policy=policy)
    return m._cap.plan.summary()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", action="append", required=True,
                    help="NAME=LIBMEMGRAD.so:PYTHON_DIR")
    ap.add_argument("--models", default=",".join(c[0] for c in CASES))
    ap.add_argument("--policy", default="memory")
    ap.add_argument("--one", nargs=4)
    a = ap.parse_args()
    if a.one:
        m, p, b, s = a.one
        print(json.dumps(one(m, p, int(b), int(s))))
        return
    libs = []
    for spec in a.lib:
        name, rest = spec.split("=", 1)
        so, py = rest.split(":", 1)
        libs.append((name, os.path.abspath(so), os.path.abspath(py)))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    print("# %s, commit %s, %d-core AMD EPYC VM (AVX2, shared)" % (
        time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), commit,
        os.cpu_count()))
    print("# $ python3 " + " ".join(sys.argv))
    print("# libraries: " + "; ".join("%s = %s with %s" % l for l in libs))
    print("# load average before the runs: %.2f %.2f %.2f" % os.getloadavg())
    print()
    print("policy %s, training mode, float32, through memgrad.torch. peak: "
          "predicted pool peak with nothing bound (MiB); budget peak: in "
          "the budget's measure (gradients as caller memory); recomputed: "
          "flops recomputed / flops of one forward pass." % a.policy)
    print()
    print("| model | batch, size | library | peak MiB | budget peak MiB | "
          "checkpoints | recompute steps | recomputed |")
    print("|---|---|---|---|---|---|---|---|")
    cases = {c[0]: c for c in CASES}
    for model in a.models.split(","):
        _, batch, size = cases[model]
        for n, so, py in libs:
            env = dict(os.environ, MEMGRAD_LIBRARY=so, PYTHONPATH=py)
            out = subprocess.run(
                [sys.executable, __file__, "--lib", "x=y:z", "--one", model,
                 a.policy, str(batch), str(size)],
                capture_output=True, text=True, env=env)
            if out.returncode:
                raise SystemExit(out.stderr)
            s = json.loads(out.stdout.strip().splitlines()[-1])
            print("| %s | %d, %d | %s | %.3f | %.3f | %d | %d | %.3f |"
                  % (model, batch, size, n, s["predicted_peak"] / 2 ** 20,
                     s["budget_peak"] / 2 ** 20, s["n_checkpoints"],
                     s["n_recompute"],
                     s["recompute_flops"] / s["forward_flops"]))
            sys.stdout.flush()


if __name__ == "__main__":
    main()
