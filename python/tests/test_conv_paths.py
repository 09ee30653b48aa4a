"""Every CPU convolution path against float64 (issue 25 item 10): a small
squeezenet-like network (3x3 and 1x1 convolutions, strides, pooling) run
through memgrad.torch under each path the machine offers: the default
(oneDNN, blocked layouts), MG_CONV=onednn-plain, MG_CONV=im2col, and oneDNN
capped at each instruction set up to the machine's own
(DNNL_MAX_CPU_ISA). Each parameter's float32 gradient must lie within
max(1e-4, 10x PyTorch float32's own distance from float64). The network
has no batch norm, whose outputs sit at a ReLU's kink at initialisation,
so no float32 rounding decides a ReLU's side here; resnet18's one such
case is test_torch_bridge's. Nor does rounding decide a max pool's
winner: the input has no window whose two largest inputs are within 1e-5
of each other (maxpool_gap.py; such a window was the finding's cause). Where torchvision is installed, the finding's
own model runs too: squeezenet1_1 without dropout, batch 4 at 64x64."""
import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip(
    "torch", reason="test_conv_paths needs torch (Debian python3-torch)")

WORKER = r"""
import copy, json, os, torch
import memgrad.torch as mgt
torch.manual_seed(0)
if os.environ.get("MG_TEST_NET") == "squeezenet1_1":
    # the finding's own model: torchvision's squeezenet1_1 in training
    # mode without its dropout, batch 4 at 64x64
    import torchvision
    net = torchvision.models.squeezenet1_1()
    net.classifier[0] = torch.nn.Identity()
    x = torch.randn(4, 3, 64, 64)
    y = torch.randint(0, 1000, (4,))
else:
  net = torch.nn.Sequential(
    torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(),
    torch.nn.MaxPool2d(3, 2, 1),
    torch.nn.Conv2d(16, 8, 1), torch.nn.ReLU(),
    torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.ReLU(),
    torch.nn.Conv2d(16, 16, 3, stride=2, padding=1), torch.nn.ReLU(),
    torch.nn.Conv2d(16, 32, 1), torch.nn.ReLU(),
    torch.nn.AdaptiveAvgPool2d((1, 1)), torch.nn.Flatten(),
    torch.nn.Linear(32, 10))
  x = torch.randn(4, 3, 32, 32)
  y = torch.randint(0, 10, (4,))
# no max-pool window whose winner float32 rounding decides (maxpool_gap.py)
import sys
sys.path.insert(0, os.environ["MG_TEST_DIR"])
from maxpool_gap import min_gap, untied_input
x0 = x
x = untied_input(copy.deepcopy(net).double(), lambda s: torch.randn(
    tuple(x0.shape), generator=torch.Generator().manual_seed(s)), first=x0)
if os.environ.get("MG_TEST_GAP"):
    print("gap of the first input", min_gap(copy.deepcopy(net).double(), x0.double()),
          "redrawn", x is not x0, file=sys.stderr)
def grads(m, xx):
    m.zero_grad(set_to_none=True)
    torch.nn.functional.cross_entropy(m(xx), y).backward()
    return [p.grad.double() for p in m.parameters()]
g64 = grads(copy.deepcopy(net).double(), x.double())
g32 = grads(copy.deepcopy(net), x)
gmg = grads(mgt.fx.Module(copy.deepcopy(net), (x,), policy="none"), x)
rel = lambda a, b: float((a - b).norm() / b.norm())
print(json.dumps([[rel(m, r), rel(t, r)] for m, t, r in zip(gmg, g32, g64)]))
"""


def _isas():
    """oneDNN's ISA caps up to what this CPU has."""
    flags = open("/proc/cpuinfo").read()
    caps = ["SSE41"]
    if " avx " in flags:
        caps.append("AVX")
    if " avx2 " in flags:
        caps.append("AVX2")
    if " avx512f " in flags:
        caps.append("AVX512_CORE")
    return caps


PATHS = ([("default", {}), ("onednn-plain", {"MG_CONV": "onednn-plain"}),
          ("im2col", {"MG_CONV": "im2col"})]
         + [("isa " + isa, {"DNNL_MAX_CPU_ISA": isa}) for isa in _isas()])


def _has_torchvision():
    try:
        import torchvision  # noqa: F401
        return True
    except ImportError:
        return False


NETS = ["tiny"] + (["squeezenet1_1"] if _has_torchvision() else [])


@pytest.mark.parametrize("net", NETS)
@pytest.mark.parametrize("name,env", PATHS, ids=[p[0] for p in PATHS])
def test_conv_path_matches_float64(name, env, net):
    out = subprocess.run([sys.executable, "-c", WORKER], capture_output=True,
                         text=True, timeout=300,
                         env=dict(os.environ, MG_TEST_NET=net,
                                  MG_TEST_DIR=os.path.dirname(
                                      os.path.abspath(__file__)), **env))
    assert out.returncode == 0, out.stderr
    errs = json.loads(out.stdout.strip().splitlines()[-1])
    worst = max(m / max(1e-4, 10 * t) for m, t in errs)
    assert worst <= 1.0, "%s, %s: %s" % (net, name, errs)
