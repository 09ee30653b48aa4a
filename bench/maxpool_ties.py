"""Issue 25 item 10's finding, explained: squeezenet1_1's float32 gradients
on each CPU convolution path, on test_torch_zoo's first input (which has a
max-pool window whose two largest inputs are 6.8e-7 apart) and on an input
without such a window (python/tests/maxpool_gap.py).

    python3 bench/maxpool_ties.py > bench/results/maxpool-ties.txt

For each path: the smallest max-pool gap of the input (float64), and the
largest relative error of any parameter's gradient against PyTorch
float64 (max |mine - ref| / max |ref|, per parameter), memgrad's and
PyTorch float32's own."""
import json
import os
import platform
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.join(HERE, "..", "python", "tests")

WORKER = r"""
import copy, json, os, sys, torch
sys.path.insert(0, os.environ["MG_TESTS"])
import test_torch_zoo as z
from maxpool_gap import min_gap, untied_input
import memgrad.torch as mgt
base = z.build("squeezenet1_1")
x = torch.randn(2, 3, 64, 64)
if os.environ["MG_INPUT"] == "untied":
    x = untied_input(copy.deepcopy(base).double(), lambda s: torch.randn(
        2, 3, 64, 64, generator=torch.Generator().manual_seed(s)), first=x)
gap = min_gap(copy.deepcopy(base).double(), x.double())
res64 = z.two_steps(copy.deepcopy(base).double(), x.double(), torch.tensor([1, 7]))
res32 = z.two_steps(base, x, torch.tensor([1, 7]))
ref = res64["torch"][0]
mine = z.rel_errors(res32["memgrad"][0], ref)
own = z.rel_errors(res32["torch"][0], ref)
print(json.dumps([gap, max(mine), max(own), mine.index(max(mine))]))
"""

PATHS = [("default", {}), ("onednn-plain", {"MG_CONV": "onednn-plain"}),
         ("im2col", {"MG_CONV": "im2col"}),
         ("isa AVX2", {"DNNL_MAX_CPU_ISA": "AVX2"})]
if " avx512f " in open("/proc/cpuinfo").read():
    PATHS.append(("isa AVX512_CORE", {"DNNL_MAX_CPU_ISA": "AVX512_CORE"}))

cpu = [l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
       if l.startswith("model name")][0]
print("# %s; %s; %s, %d cores; avx512f %s" % (
    time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime()), " ".join(sys.argv), cpu,
    os.cpu_count(),
    " avx512f " in open("/proc/cpuinfo").read()))
print("%-8s %-16s %12s %12s %12s %s" % ("input", "path", "min_gap",
      "memgrad_f32", "torch_f32", "worst_param"))
for inp in ("first", "untied"):
    for name, env in PATHS:
        out = subprocess.run([sys.executable, "-c", WORKER],
                             capture_output=True, text=True, timeout=600,
                             env=dict(os.environ, MG_TESTS=TESTS,
                                      MG_INPUT=inp, **env))
        if out.returncode:
            print(inp, name, "failed:", out.stderr.strip().splitlines()[-1])
            continue
        gap, m, t, w = json.loads(out.stdout.strip().splitlines()[-1])
        print("%-8s %-16s %12.3g %12.3g %12.3g %d" % (inp, name, gap, m, t, w))
