#!/usr/bin/env python3
"""compact_torch.py - compaction alone (issue 29 item 2) on a torchvision
model through the memgrad.torch bridge: one training step under policy
none with and without mg_checkpoints.compact, the same weights, input and
output gradient. Prints the plan's predicted pool peak, the pool's
measured peak and the step time of each, and whether every parameter
gradient (and the input's) is the same bits.

    python3 bench/compact_torch.py --model resnet50 --batch 2 --image 224

Needs PyTorch and torchvision; finds libmemgrad as the package does
(MEMGRAD_LIBRARY, or beside an installed package).
"""
import argparse
import time

import torch
import torchvision

import memgrad.torch as mt


def step(model, x, gy, compact):
    """One forward and backward through memgrad: (predicted peak, measured
    peak, seconds, gradients)."""
    xi = x.clone().requires_grad_(True)
    # traced with the input the step runs on: a plan (and its executor) is
    # per input signature, requires_grad included
    m = mt.fx.Module(model, (xi,), policy="none", compact=compact)
    model.zero_grad(set_to_none=True)
    ex = m.executor
    ex.reset_peak()
    t0 = time.perf_counter()
    y = m(xi)
    y.backward(gy)
    sec = time.perf_counter() - t0
    measured = ex.pool_stats()["peak_bytes_in_use"]
    grads = [xi.grad.clone()] + [p.grad.clone() for p in model.parameters()]
    # the bridge runs the plan's two phases (forward, then backward from
    # the saved tensors), with the parameters' gradients written into
    # torch's memory (issue 28): the phases' peak with those bound, which
    # the pool's peak must equal
    cap = m._cap
    bound = [g for g in cap.grads[len(cap.inputs):]
             if g is not None and g != cap.seed]
    return cap.plan.phase_peaks(bound)["pair"], measured, sec, grads


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--image", type=int, default=224)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = getattr(torchvision.models, a.model)().train()
    x = torch.randn(a.batch, 3, a.image, a.image)
    with torch.no_grad():
        gy = torch.randn_like(model(x))
    rows = {}
    for compact in (False, True):
        # batch norm's running statistics move with each training step:
        # start both from the same state
        state = {k: v.clone() for k, v in model.state_dict().items()}
        rows[compact] = step(model, x, gy, compact)
        model.load_state_dict(state)
    (p0, m0, s0, g0), (p1, m1, s1, g1) = rows[False], rows[True]
    same = all(torch.equal(u, v) for u, v in zip(g0, g1))
    print("model=%s batch=%d image=%d threads=%d policy=none"
          % (a.model, a.batch, a.image, a.threads))
    print("| compact | predicted peak | measured peak | step s |")
    print("|---|---:|---:|---:|")
    for c, (p, m, s, _) in ((False, rows[False]), (True, rows[True])):
        print("| %s | %.1f MiB (%d) | %.1f MiB (%d) | %.2f |"
              % ("yes" if c else "no", p / 2**20, p, m / 2**20, m, s))
    print("compact / plain peak: predicted %.4f, measured %.4f (saves %.1f "
          "MiB)" % (p1 / p0, m1 / m0, (m0 - m1) / 2**20))
    print("gradients bit-equal (input and %d parameters): %s"
          % (len(g0) - 1, "yes" if same else "NO"))
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
