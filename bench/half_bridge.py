"""bench/half_bridge.py - bfloat16 through memgrad.torch on the CPU (issue
47, first part), run by bench/half.sh:

1. accuracy: an MLP (Linear, GELU, Linear, ReLU, LayerNorm, Linear) in
   bfloat16, the distance of memgrad's whole gradient from the float64
   one over PyTorch's own bfloat16 run's distance, per seed, at batch 32
   and 256 (python/tests/test_half.py asserts <= 1.5 on seeds 0-2 at 256);
2. step time and memory: a deeper MLP, float32 against bfloat16, PyTorch
   eager beside memgrad (policies none and memory), one thread; the median
   of the timed steps (ms) and, for memgrad, the pool peak predicted and
   measured in the same step.

usage: python bench/half_bridge.py [--steps N]
"""
import argparse
import statistics
import time

import torch
import memgrad.torch as mgt


def small_mlp():
    torch.manual_seed(1)
    return torch.nn.Sequential(
        torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 128),
        torch.nn.ReLU(), torch.nn.LayerNorm(128), torch.nn.Linear(128, 10))


def step(model, x, y):
    model.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    return loss.detach().double(), [p.grad.double() for p in
                                    model.parameters()]


def accuracy(batch, seed):
    torch.manual_seed(seed)
    x, y = torch.randn(batch, 64), torch.randint(0, 10, (batch,))
    _, g64 = step(small_mlp().double(), x.double(), y)
    _, ge = step(small_mlp().to(torch.bfloat16), x.bfloat16(), y)
    model = small_mlp().to(torch.bfloat16)
    m = mgt.Module(model, (x.bfloat16(),), policy="none")
    _, gm = step(m, x.bfloat16(), y)

    def dist(gs):
        return float(sum(((a - b) ** 2).sum() for a, b in zip(gs, g64)) ** .5)
    return dist(gm), dist(ge)


def deep_mlp(width, depth):
    torch.manual_seed(2)
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.GELU()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(width, 10))


def timing(dtype, engine, steps, width=256, depth=8, batch=128):
    model = deep_mlp(width, depth).to(dtype)
    torch.manual_seed(3)
    x = torch.randn(batch, width).to(dtype)
    y = torch.randint(0, 10, (batch,))
    run = model
    if engine != "eager":
        run = mgt.Module(model, (x,), policy=engine)
    times = []
    for i in range(steps + 1):
        t0 = time.perf_counter()
        model.zero_grad()
        torch.nn.functional.cross_entropy(run(x), y).backward()
        if i:  # the first step plans and warms up
            times.append((time.perf_counter() - t0) * 1e3)
    row = {"ms": statistics.median(times)}
    if engine != "eager":
        ex = run.executor
        ex.reset_peak()
        model.zero_grad()
        torch.nn.functional.cross_entropy(run(x), y).backward()
        row["predicted"] = run.predicted_peak
        row["measured"] = ex.pool_stats()["peak_bytes_in_use"]
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=10)
    args = ap.parse_args()
    torch.set_num_threads(1)
    print("accuracy: |grad - grad_f64| (whole gradient, 2-norm), memgrad "
          "and PyTorch eager, both bfloat16")
    print("batch,seed,memgrad,pytorch,ratio")
    for batch in (32, 256):
        for seed in range(8):
            dm, de = accuracy(batch, seed)
            print("%d,%d,%.4g,%.4g,%.3f" % (batch, seed, dm, de, dm / de))
    print()
    print("step: MLP 8 x (Linear 256, GELU) + Linear 10, batch 128, "
          "1 thread, median of %d steps" % args.steps)
    print("dtype,engine,step_ms,predicted_peak_bytes,measured_peak_bytes")
    for dtype in (torch.float32, torch.bfloat16):
        for engine in ("eager", "none", "memory"):
            r = timing(dtype, engine, args.steps)
            print("%s,%s,%.2f,%s,%s" % (str(dtype).replace("torch.", ""),
                                        engine, r["ms"],
                                        r.get("predicted", ""),
                                        r.get("measured", "")))


if __name__ == "__main__":
    main()
