#!/usr/bin/env python3
"""scripts/gen-tables.py - the tables and figures that come from
bench/results, generated rather than typed (issue 32 item 3): the README's
headline figure beside PyTorch, docs/results.md's tables and
bench/results/README.md's; and docs/supported-ops.md's list from
src/frontends/op_map.def, the one table both frontends map through (issue
27 items 1 and 8).

Each generated part of a Markdown file sits between the lines
``<!-- generated: NAME (scripts/gen-tables.py) -->`` and
``<!-- end generated: NAME -->``; this script rewrites what is between
them from the results file (or table) NAME names. Links a part writes are
relative to the file it is written into. Every part must be in one of the
files, so a table moved out of one file and not into another fails too.

    python3 scripts/gen-tables.py          # rewrite the files
    python3 scripts/gen-tables.py --check  # fail if any is out of date

scripts/test.sh runs --check, so a results file committed without its
tables (or a table edited by hand) fails CI; so does a row added to
op_map.def without regenerating docs/supported-ops.md.
"""
import csv
import os
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
RES = ROOT / "bench" / "results"
MIB = 1 << 20


def mib(b):
    v = int(b) / MIB
    return f"{v:.0f}" if abs(v - round(v)) < 0.005 else f"{v:.2f}"


def depth_mlp(root=""):
    """docs/results.md: the depth sweep's table (bench/results/depth-mlp.csv)."""
    rows = list(csv.DictReader(open(RES / "depth-mlp.csv")))
    by = {(r["policy"], int(r["depth"])): r for r in rows}
    depths = [d for d in (8, 64, 256, 1024) if ("none", d) in by]
    out = [
        "| depth | policy none | policy memory | memory / none | "
        "recomputed (of one forward) | time memory / none |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for d in depths:
        n, m = by["none", d], by["memory", d]
        ratio = f"{int(m['peak_bytes']) / int(n['peak_bytes']):.3f}"
        tm = f"{float(m['time_ratio_vs_none']):.3f}"
        if d == depths[-1]:
            ratio, tm = f"**{ratio}**", f"**{tm}**"
        out.append(
            f"| {d} | {mib(n['peak_bytes'])} MiB | {mib(m['peak_bytes'])} MiB "
            f"| {ratio} | {float(m['recompute_flops_ratio']):.3f} | {tm} |")
    return "\n".join(out)


def rewrite(root=""):
    """docs/results.md: rewriting and planning 10^5 and 10^6 ops
    (rewrite.csv)."""
    rows = {(r["shape"], int(r["ops"])): r
            for r in csv.DictReader(open(RES / "rewrite.csv"))}

    def s(shape, n, col):
        return f"{float(rows[shape, n][col]) / 1000:.2f} s"

    return (
        "Differentiating, rewriting (policy memory) and planning a chain of "
        f"10^5 ops takes {s('chain', 100000, 'total_cpu_ms')} and of 10^6 "
        f"ops {s('chain', 1000000, 'total_cpu_ms')} of one core's CPU time "
        f"(residual blocks: {s('residual', 100000, 'total_cpu_ms')} and "
        f"{s('residual', 1000000, 'total_cpu_ms')}; wall time "
        f"{s('chain', 100000, 'total_ms')} and "
        f"{s('chain', 1000000, 'total_ms')} in the same run, "
        f"[rewrite.txt]({root}bench/results/rewrite.txt)).")


def rewrite_table(root=""):
    """bench/results/README.md: every row of rewrite.csv, and issue 32's
    targets (10^5 ops under 0.1 s, 10^6 under 1 s of one core)."""
    rows = list(csv.DictReader(open(RES / "rewrite.csv")))
    exp = {10000: "10^4", 100000: "10^5", 1000000: "10^6"}
    out = ["| shape | ops | tensors after rewrite | gradients CPU | plan CPU "
           "| gradients + plan CPU | gradients + plan wall |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        n = int(r["ops"])
        out.append(
            f"| {r['shape']} | {exp.get(n, n)} | {int(r['tensors']):,} "
            f"| {float(r['gradients_cpu_ms']):.1f} ms "
            f"| {float(r['plan_cpu_ms']):.1f} ms "
            f"| **{float(r['total_cpu_ms']):.1f} ms** "
            f"| {float(r['total_ms']):.1f} ms |".replace(",", " "))
    worst = {n: max(float(r["total_cpu_ms"]) for r in rows
                    if int(r["ops"]) == n) for n in (100000, 1000000)}
    met = {n: worst[n] < lim for n, lim in ((100000, 100.0),
                                            (1000000, 1000.0))}
    out.append("")
    out.append(
        f"Issue 32's targets, 10^5 ops in under 0.1 s and 10^6 in under 1 s "
        f"of one core: the slower shape takes {worst[100000]:.1f} ms at "
        f"10^5 ({'met' if met[100000] else 'not met'}) and "
        f"{worst[1000000]:.1f} ms at 10^6 "
        f"({'met' if met[1000000] else 'not met'}).")
    return "\n".join(out)


def _ratio_rows(path):
    """(model, depth, threads) -> {case: row} from a compare_torch.py CSV."""
    by = {}
    for r in csv.DictReader(open(path)):
        key = (r["model"], int(r["depth"]), int(r["threads"]))
        by.setdefault(key, {})[r["case"]] = r
    return by


def _pair(r):
    return (f"{float(r['time_ratio_vs_torch']):.3f}, "
            f"{float(r['rss_ratio_vs_torch']):.3f}")


def torch_cpu(root=""):
    """docs/results.md: memgrad beside PyTorch on the ResNet and MLP (torch-cpu.csv):
    each memgrad case's time and RSS over its PyTorch counterpart's."""
    by = _ratio_rows(RES / "torch-cpu.csv")
    out = ["| model, depth, threads | memgrad-none / torch-plain: time, RSS "
           "| memgrad-memory / torch-checkpoint: time, RSS |",
           "|---|---|---|"]
    first = {}
    for (model, depth, threads), cases in sorted(
            by.items(), key=lambda kv: (kv[0][0] != "resnet", kv[0][2],
                                        kv[0][1])):
        if "memgrad-none" not in cases or "memgrad-memory" not in cases:
            continue
        name = {"resnet": "ResNet", "mlp": "MLP"}.get(model, model)
        unit = "blocks" if model == "resnet" else ""
        label = f"{name} {depth}{' ' + unit if unit else ''}, {threads} " \
                f"thread{'s' if threads > 1 else ''}"
        if model not in first:
            r = cases["memgrad-none"]
            first[model] = True
            label += f" (batch {r['batch']}" + (
                ", 32x32)" if model == "resnet" else f", width {r['width']})")
        out.append(f"| {label} | {_pair(cases['memgrad-none'])} | "
                   f"{_pair(cases['memgrad-memory'])} |")
    return "\n".join(out)


def gpt_cpu(root=""):
    """docs/results.md: the GPT beside PyTorch (gpt-cpu.csv), per thread count."""
    by = _ratio_rows(RES / "gpt-cpu.csv")
    out = ["| threads | memgrad-none / torch-plain: time, RSS | "
           "memgrad-memory / torch-checkpoint: time, RSS | step time: "
           "torch-plain, memgrad-none |",
           "|---|---|---|---|"]
    for (_, _, threads), cases in sorted(by.items(), key=lambda kv: kv[0][2]):
        tp, mn = cases["torch-plain"], cases["memgrad-none"]
        out.append(
            f"| {threads} | {_pair(mn)} | {_pair(cases['memgrad-memory'])} "
            f"| {float(tp['time_ms_median']) / 1000:.2f} s, "
            f"{float(mn['time_ms_median']) / 1000:.2f} s |")
    return "\n".join(out)


def op_map_rows(root=""):
    """docs/supported-ops.md: each row of src/frontends/op_map.def (read by
    scripts/op_map.py), with what each frontend takes and the memgrad ops
    both lower to."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import op_map
    rows = op_map.rows()

    def code(names):
        return ", ".join("`%s`" % n for n in names) if names else "—"

    n_onnx = sum(1 for r in rows if r.onnx)
    n_torch = sum(len(r.torch) for r in rows)
    n_both = sum(1 for r in rows if r.onnx and r.torch)
    out = [f"{len(rows)} rows: {n_onnx} ONNX op types, {n_torch} PyTorch "
           f"names (not counting in-place forms), {n_both} rows with both.",
           "",
           "| row | ONNX op (`memgrad-onnx`, `memgrad.onnx_import`) | "
           "PyTorch (`memgrad.torch`) | memgrad ops |",
           "|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r.name} | {code([r.onnx] if r.onnx else [])} | "
                   f"{code(r.torch)} | {code(r.mg_ops)} |")
    return "\n".join(out)


HEADLINE = "gpu-2026-11-27-h100/run4/torch-cuda.csv"


def headline(root=""):
    """README: the one figure beside PyTorch, from HEADLINE: memgrad's
    memory policy against PyTorch's checkpoint_sequential on the ResNet of
    32 blocks, activation bytes and step time."""
    rows = [r for r in csv.DictReader(open(RES / HEADLINE))
            if r["model"] == "resnet" and int(r["depth"]) == 32]
    by = {r["case"]: r for r in rows}
    mm, tc = by["memgrad-memory"], by["torch-checkpoint"]
    if mm["vs"] != "torch-checkpoint":
        sys.exit(f"gen-tables.py: {HEADLINE}: memgrad-memory is compared "
                 f"with {mm['vs']}, not torch-checkpoint")
    act = int(mm["activation_peak_bytes"]) / int(tc["activation_peak_bytes"])
    tm = float(mm["time_ms_median"]) / float(tc["time_ms_median"])
    # the CSV's own ratios, so the sentence and the file cannot disagree
    if (f"{act:.3f}", f"{tm:.3f}") != (mm["act_ratio_vs_torch"],
                                       mm["time_ratio_vs_torch"]):
        sys.exit(f"gen-tables.py: {HEADLINE}: ratios do not follow from "
                 f"the rows")
    gpu = tc["gpu"]
    # the versions and TF32 from the run's own log beside the CSV
    log = (RES / HEADLINE).with_name("run.log").read_text()
    ver = re.search(r"^torch (\d+\.\d+)\S* cuda (\d+)\S*", log, re.M)
    tf32 = re.search(r"TF32 (on|off)", log)
    if not ver or not tf32:
        sys.exit(f"gen-tables.py: {HEADLINE}: run.log names no torch and "
                 "CUDA version or TF32 setting")
    bit = ("; its gradients equal its own plain backprop's bit for bit"
           if mm["grad_diff_vs_own_plain"] == "0" else "")
    return (
        f"On an {gpu}, training a ResNet of {mm['depth']} residual blocks "
        f"(batch {mm['batch']}, width {mm['width']}, 32x32 images) under "
        f"the memory policy, memgrad needed **{act:.3f}** of the activation "
        f"memory of PyTorch's `checkpoint_sequential` "
        f"({int(mm['activation_peak_bytes']) / MIB:.0f} MiB against "
        f"{int(tc['activation_peak_bytes']) / MIB:.0f} MiB) in "
        f"**{tm:.3f}** of its step time ({float(mm['time_ms_median']):.1f} "
        f"ms against {float(tc['time_ms_median']):.1f} ms){bit} "
        f"([{HEADLINE.split('/', 1)[1]}]({root}bench/results/{HEADLINE}): "
        f"PyTorch {ver.group(1)}, CUDA {ver.group(2)}, TF32 {tf32.group(1)}, "
        f"{tc['segments']} segments for "
        f"PyTorch, as round(sqrt(blocks))).")


PARTS = {"headline": headline, "depth-mlp": depth_mlp, "rewrite": rewrite,
         "rewrite-table": rewrite_table, "torch-cpu": torch_cpu,
         "gpt-cpu": gpt_cpu, "op-map": op_map_rows}
FILES = [ROOT / "README.md", ROOT / "docs" / "results.md",
         ROOT / "docs" / "supported-ops.md",
         ROOT / "bench" / "results" / "README.md"]


def regenerate(text, path, seen=None):
    """text with every generated part rewritten; links relative to path's
    folder. Names found are added to seen."""
    root = os.path.relpath(ROOT, path.parent).replace(os.sep, "/") + "/"
    root = "" if root == "./" else root

    def part(m):
        name = m.group(1)
        if name not in PARTS:
            sys.exit(f"gen-tables.py: no generator for '{name}'")
        if seen is not None:
            seen.add(name)
        return f"{m.group(0).split(chr(10))[0]}\n{PARTS[name](root)}\n" \
               f"<!-- end generated: {name} -->"

    return re.sub(
        r"<!-- generated: ([\w-]+) \(scripts/gen-tables.py\) -->\n"
        r".*?<!-- end generated: \1 -->", part, text, flags=re.S)


def main():
    check = "--check" in sys.argv[1:]
    stale, seen = [], set()
    for f in FILES:
        old = f.read_text()
        new = regenerate(old, f, seen)
        if new != old:
            stale.append(f.relative_to(ROOT))
            if not check:
                f.write_text(new)
    missing = sorted(set(PARTS) - seen)
    if missing:
        print("gen-tables.py: no file has the part(s) " + ", ".join(missing)
              + " (a <!-- generated: NAME (scripts/gen-tables.py) --> and "
              "<!-- end generated: NAME --> pair in one of "
              + ", ".join(str(f.relative_to(ROOT)) for f in FILES) + ")",
              file=sys.stderr)
        return 1
    if check and stale:
        print("gen-tables.py: out of date (run python3 scripts/gen-tables.py "
              "and commit): " + ", ".join(map(str, stale)), file=sys.stderr)
        return 1
    if not check:
        for f in stale:
            print(f"gen-tables.py: rewrote {f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
