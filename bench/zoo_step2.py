"""bench/zoo_step2.py [MODEL SIZE]: why python/tests/test_torch_zoo.py
starts step 2 of memgrad and PyTorch from the same weights (float64, batch
2, SGD lr 0.1, resnet152 at 64x64 by default). Prints, with the test's
rel_errors metric:
  - PyTorch against itself when its weights after step 1 are perturbed by
    a relative 1e-12: how much step 2 amplifies a rounding difference;
  - memgrad against PyTorch at step 1, and at step 2 from each one's own
    weights (what the test did before) and from PyTorch's weights copied
    into memgrad's parameters (what it does now).
    MEMGRAD_LIBRARY=... PYTHONPATH=python:python/tests OMP_NUM_THREADS=1 \\
        python3 bench/zoo_step2.py resnet152 64
"""
import copy
import sys

import torch
import torch.nn.functional as F

import memgrad.torch as mgt
import test_torch_zoo as T

name = sys.argv[1] if len(sys.argv) > 1 else "resnet152"
size = int(sys.argv[2]) if len(sys.argv) > 2 else 64
torch.set_num_threads(1)
base = T.build(name).double()
x = torch.randn(2, 3, size, size).double()
labels = torch.tensor([1, 7])


def steps(model, after_step1=None):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    out = []
    for step in range(2):
        opt.zero_grad()
        F.cross_entropy(model(x), labels).backward()
        out.append([p.grad.detach().clone() for p in model.parameters()])
        opt.step()
        if step == 0 and after_step1:
            with torch.no_grad():
                after_step1(model)
    return out


def perturb(m):
    g = torch.Generator().manual_seed(1)
    for p in m.parameters():
        p.mul_(1 + 1e-12 * (torch.rand(p.shape, generator=g,
                                       dtype=p.dtype) - 0.5))


ref = steps(T._exact_reference(copy.deepcopy(base)))
pert = steps(T._exact_reference(copy.deepcopy(base)), perturb)
print("%s %dx%d float64: PyTorch step 2 with its step-1 weights perturbed "
      "by 1e-12: %.3g" % (name, size, size, max(T.rel_errors(pert[1],
                                                              ref[1]))))
own = steps(mgt.fx.Module(copy.deepcopy(base), (x,), policy="memory"))
print("memgrad vs PyTorch, step 1: %.3g" % max(T.rel_errors(own[0], ref[0])))
print("memgrad vs PyTorch, step 2 from its own weights: %.3g"
      % max(T.rel_errors(own[1], ref[1])))
torch_w = []
r = T._exact_reference(copy.deepcopy(base))
opt = torch.optim.SGD(r.parameters(), lr=0.1)
F.cross_entropy(r(x), labels).backward()
opt.step()
torch_w = [p.detach().clone() for p in r.parameters()]


def sync(m):
    for a, b in zip(m.parameters(), torch_w):
        a.copy_(b)


same = steps(mgt.fx.Module(copy.deepcopy(base), (x,), policy="memory"), sync)
print("memgrad vs PyTorch, step 2 from PyTorch's weights: %.3g"
      % max(T.rel_errors(same[1], ref[1])))
