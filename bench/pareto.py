#!/usr/bin/python3
"""pareto.py - memory against time for one model, memgrad's budget policy
beside PyTorch's checkpoint_sequential, measured in one run (issue 17).

    /usr/bin/python3 bench/pareto.py [--model mlp] [--depth 1024]
        [--batch B] [--width W] [--repeat 5] [--threads 1]
        [--fractions 0.02,0.03,0.05,0.1,0.2,0.3,0.5,1.0]
        [--segments 2,4,8,16,32,64] [--mg-bench build/mg-bench]
        [--compact yes|no] [--dropout P]
        [--csv bench/results/pareto-<model>.csv]

Points, all on the same model, weights and input, one process each (or one
mg-bench budget process for the budget points), one after the other:

  memgrad-none, memgrad-memory   mg-bench step --policy none / memory
  memgrad-budget                 mg-bench budget at each fraction of
                                 policy none's peak (infeasible ones: none)
  memgrad-budget-matched         mg-bench budget at each PyTorch
                                 checkpoint point's activation peak
                                 (--match-torch 1, the default): memgrad's
                                 time for the memory PyTorch used
  memgrad-none-compact,          with --compact yes (the default), the
  memgrad-budget-compact         same with mg_checkpoints.compact (issue
                                 29): relu signs and max-pool argmaxes kept
                                 compact where no gradient rule reads the
                                 tensor whole; every budget plan compacts
  torch-plain                    plain backprop in PyTorch
  torch-checkpoint-K             checkpoint_sequential with K segments

recompute_flops_ratio is a second time axis where wall time is noise (a
loaded machine): the forward flops a step recomputes over one forward
pass. memgrad's come from its plan summary; checkpoint_sequential's are
counted in layers, floor(n/K)(K-1)/n of the model's n sequential layers
(the last segment is not recomputed), exact for layers of equal cost and
close for the ResNet's blocks (the stem and the head ride on the first and
last block).

Memory is the step's activation peak: memgrad's measured pool peak (every
activation, recomputed value, gradient temporary and workspace) and, for
PyTorch, the peak of the bytes autograd's saved tensors hold (a lower bound
on its activation memory: transients and gradients are left out; see
compare_torch.py). So the comparison is tilted towards PyTorch. Time is the
median step time (ms) of --repeat steps after a warm-up step.

The CSV has one row per point; the script also prints, for every PyTorch
checkpoint point, the memgrad point that dominates it (no more memory and
no more time), or says none does. bench/plot draws the CSV.
"""
import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import compare_torch as ct  # noqa: E402  (its workers, layouts and draw)

COLS = ["model", "depth", "batch", "width", "threads", "series", "label",
        "budget_fraction", "peak_bytes", "time_ms_median", "loss",
        "recompute_flops_ratio"]


def kv_lines(text):
    return dict(line.split("=", 1) for line in text.strip().splitlines()
                if "=" in line)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="mlp", choices=sorted(ct.MODELS))
    ap.add_argument("--depth", type=int, default=1024)
    ap.add_argument("--batch", type=int)
    ap.add_argument("--width", type=int)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--fractions", default="0.02,0.03,0.05,0.1,0.2,0.3,0.5,1.0")
    ap.add_argument("--segments", default="2,4,8,16,32,64")
    ap.add_argument("--mg-bench", default=os.path.join(HERE, "..", "build",
                                                       "mg-bench"))
    ap.add_argument("--csv")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--compact", choices=("yes", "no"), default="yes",
                    help="yes: also the -compact series")
    ap.add_argument("--dropout", type=float, default=0.0,
                    help="the MLP's dropout after each relu (mg-bench "
                         "--dropout; nn.Dropout in PyTorch); the masks "
                         "differ, so losses do too")
    ap.add_argument("--match-torch", type=int, default=1,
                    help="1: also run a budget at each PyTorch point's memory")
    a = ap.parse_args()
    a.batch = a.batch or ct.MODELS[a.model][2]
    a.width = a.width or ct.MODELS[a.model][3]
    a.csv = a.csv or os.path.join(HERE, "results", f"pareto-{a.model}.csv")
    if not os.access(a.mg_bench, os.X_OK):
        ap.error(f"no mg-bench at {a.mg_bench}")
    import numpy as np  # noqa: F401  (ct.draw needs it)
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(a.threads),
               OMP_NUM_THREADS=str(a.threads))
    base = {"model": a.model, "depth": a.depth, "batch": a.batch,
            "width": a.width, "threads": a.threads}
    a.base = base
    rows = []
    with tempfile.TemporaryDirectory(prefix="mg-pareto-") as tmp:
        init = os.path.join(tmp, "init.bin")
        with open(init, "wb") as f:
            for _, arr in ct.draw(ct.MODELS[a.model][0](a.depth, a.batch,
                                                        a.width), a.seed):
                f.write(arr.tobytes())
        common = ["--depth", str(a.depth), "--batch", str(a.batch),
                  "--width", str(a.width), "--repeat", str(a.repeat)]
        if a.dropout:
            if a.model != "mlp":
                ap.error("--dropout: the MLP only")
            common += ["--dropout", str(a.dropout)]
        steps = [("none", "no"), ("memory", "no")]
        if a.compact == "yes":
            steps.append(("none", "yes"))
        for policy, compact in steps:
            series = f"memgrad-{policy}" + ("-compact" if compact == "yes"
                                            else "")
            log(a, series)
            kv = kv_lines(ct.run([a.mg_bench, "step", "--model", a.model,
                                  "--policy", policy, "--load", init,
                                  "--compact", compact] + common, env))
            rows.append(dict(base, series=series, label=policy,
                             budget_fraction="",
                             peak_bytes=int(kv["peak_bytes"]),
                             time_ms_median=float(kv["time_ms_median"]),
                             loss=float(kv["loss"]),
                             recompute_flops_ratio=float(
                                 kv["recompute_flops_ratio"])))
        log(a, "memgrad-budget")
        rows += budget_points(a, common, env, tmp, a.fractions, True,
                              lambda f: f"budget {f}")
        if a.compact == "yes":
            log(a, "memgrad-budget-compact")
            rows += budget_points(a, common + ["--compact", "yes"], env, tmp,
                                  a.fractions, False,
                                  lambda f: f"budget {f} (of compact none)",
                                  series="memgrad-budget-compact")
        cases = [("plain", 0)] + [("checkpoint", int(k))
                                  for k in a.segments.split(",")]
        done = set()
        for worker, k in cases:
            log(a, f"torch {worker} {k}")
            cmd = [sys.executable, os.path.join(HERE, "compare_torch.py"),
                   "--worker", worker, "--model", a.model, "--threads",
                   str(a.threads), "--segments", str(k), "--load", init,
                   "--save-grads", os.path.join(tmp, "g.bin")] + common
            t = json.loads(ct.run(cmd, env).strip().splitlines()[-1])
            # checkpoint_sequential takes at most one segment per layer
            label = ("plain" if worker == "plain"
                     else f"{t['segments']} segments")
            if label in done:
                continue
            done.add(label)
            m = json.loads(ct.run(cmd + ["--measure", "memory"],
                                  env).strip().splitlines()[-1])
            n = t["layers"]  # the modules checkpoint_sequential splits
            seg = t["segments"]
            rec = (n // seg) * (seg - 1) / n if worker != "plain" else 0.0
            rows.append(dict(base, series="torch-" + worker, label=label,
                             budget_fraction="",
                             peak_bytes=m["activation_peak_bytes"],
                             time_ms_median=t["time_ms_median"],
                             loss=t["loss"], recompute_flops_ratio=rec))
        # The question a budget answers: with the memory a PyTorch point
        # used, how fast is memgrad? One budget per checkpoint_sequential
        # point, its activation peak as a fraction of memgrad-none's pool
        # peak (PyTorch's figure leaves out transients, so memgrad gets the
        # smaller budget).
        if a.match_torch:
            none_peak = next(r["peak_bytes"] for r in rows
                             if r["series"] == "memgrad-none")
            torch_pts = [r for r in rows if r["series"] == "torch-checkpoint"]
            fr = ",".join("%.6g" % (r["peak_bytes"] / none_peak)
                          for r in torch_pts)
            names = {"%.6g" % (r["peak_bytes"] / none_peak):
                     f"at torch's {r['label']}" for r in torch_pts}
            log(a, "memgrad-budget at PyTorch's memory")
            rows += budget_points(a, common, env, tmp, fr, False,
                                  lambda f: names.get(f, f"budget {f}"),
                                  series="memgrad-budget-matched")
    os.makedirs(os.path.dirname(os.path.abspath(a.csv)), exist_ok=True)
    with open(a.csv, "w", newline="") as f:
        w = csv.DictWriter(f, COLS, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    report(rows)


def budget_points(a, common, env, tmp, fractions, memory_point, label,
                  series="memgrad-budget"):
    """One mg-bench budget run over `fractions`: a row per feasible budget
    (an infeasible one is reported on stderr and left out)."""
    bcsv = os.path.join(tmp, "budget.csv")
    if os.path.exists(bcsv):
        os.remove(bcsv)
    p = subprocess.run([a.mg_bench, "budget", "--model", a.model,
                        "--memory-point", "1" if memory_point else "0",
                        "--fractions", fractions, "--csv", bcsv]
                       + common, env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True)
    sys.stderr.write(p.stderr)
    if p.returncode != 0 and not os.path.exists(bcsv):
        sys.exit(f"pareto.py: mg-bench budget failed ({p.returncode})")
    out = []
    with open(bcsv, newline="") as f:
        for r in csv.DictReader(f):
            if not r["peak_bytes"]:
                continue  # infeasible: no point to draw
            out.append(dict(a.base, series=series,
                            label=label(r["budget_fraction"]),
                            budget_fraction=r["budget_fraction"],
                            peak_bytes=int(r["peak_bytes"]),
                            time_ms_median=float(r["time_ms_median"]),
                            loss="", recompute_flops_ratio=float(
                                r["recompute_flops_ratio"])))
    return out


def log(a, what):
    print(f"[pareto] {a.model} depth {a.depth}: {what}", file=sys.stderr,
          flush=True)


def report(rows):
    """Each point, then for each checkpoint_sequential point the memgrad
    point that dominates it (no more memory and no more time)."""
    none = next(r for r in rows if r["series"] == "memgrad-none")
    print("%-22s %-30s %12s %10s %9s %9s %9s" % (
        "series", "point", "peak MiB", "ms", "mem/none", "t/none",
        "recompute"))
    for r in rows:
        print("%-22s %-30s %12.1f %10.1f %9.4f %9.3f %9.4f" % (
            r["series"], r["label"], r["peak_bytes"] / 2**20,
            r["time_ms_median"], r["peak_bytes"] / none["peak_bytes"],
            r["time_ms_median"] / none["time_ms_median"],
            r["recompute_flops_ratio"]))
    mine = [r for r in rows if r["series"].startswith("memgrad")]
    undominated = 0
    for r in rows:
        if r["series"] != "torch-checkpoint":
            continue
        better = [q for q in mine if q["peak_bytes"] <= r["peak_bytes"]
                  and q["time_ms_median"] <= r["time_ms_median"]]
        if better:
            q = min(better, key=lambda q: q["time_ms_median"])
            print(f"torch {r['label']}: dominated by {q['series']} "
                  f"{q['label']} ({q['peak_bytes'] / 2**20:.1f} <= "
                  f"{r['peak_bytes'] / 2**20:.1f} MiB, "
                  f"{q['time_ms_median']:.1f} <= {r['time_ms_median']:.1f} ms)")
        else:
            undominated += 1
            print(f"torch {r['label']}: NOT dominated by any memgrad point")
    print(f"{undominated} checkpoint_sequential point(s) not dominated")
    # The same with recomputed flops for time (load-independent)
    undominated = 0
    for r in rows:
        if r["series"] != "torch-checkpoint":
            continue
        better = [q for q in mine if q["peak_bytes"] <= r["peak_bytes"]
                  and q["recompute_flops_ratio"]
                  <= r["recompute_flops_ratio"] + 1e-9]
        if better:
            q = min(better, key=lambda q: (q["recompute_flops_ratio"],
                                           q["peak_bytes"]))
            print(f"torch {r['label']} (recompute "
                  f"{r['recompute_flops_ratio']:.4f}): dominated in flops by "
                  f"{q['series']} {q['label']} ({q['peak_bytes'] / 2**20:.1f}"
                  f" <= {r['peak_bytes'] / 2**20:.1f} MiB, recompute "
                  f"{q['recompute_flops_ratio']:.4f})")
        else:
            undominated += 1
            print(f"torch {r['label']}: NOT dominated in flops by any "
                  "memgrad point")
    print(f"{undominated} checkpoint_sequential point(s) not dominated in "
          "flops")


if __name__ == "__main__":
    main()
