"""bench/replan_time.py - what one extra planning costs memgrad.torch: a
Module is made for batch 2, then called once at batch 3, and the time that
second call spends making its plan (torch.fx trace, graph build,
mg_gradients under the memory policy, mg_plan_compile) is the call's time
less a call at batch 3 that reuses the plan. One thread; medians of 3.

    MEMGRAD_LIBRARY=... PYTHONPATH=python OMP_NUM_THREADS=1 \
        python3 bench/replan_time.py [--models resnet18,...]
"""
import argparse
import statistics
import time

import torch
import torchvision

import memgrad.torch as mgt


def replan_seconds(name):
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(num_classes=10)
    x2, x3 = torch.randn(2, 3, 64, 64), torch.randn(3, 3, 64, 64)
    extra = []
    for _ in range(3):
        m = mgt.fx.Module(model, (x2,), policy="memory")
        t0 = time.perf_counter()
        m(x3)  # plans batch 3, then runs
        t1 = time.perf_counter()
        m(x3)  # runs with that plan
        t2 = time.perf_counter()
        extra.append((t1 - t0) - (t2 - t1))
    return statistics.median(extra)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models",
                    default="resnet18,mobilenet_v3_small,densenet121")
    a = ap.parse_args()
    torch.set_num_threads(1)
    print("# one extra planning at a new batch size (64x64 images), s")
    for name in a.models.split(","):
        print("%-20s %.3f" % (name, replan_seconds(name)))


if __name__ == "__main__":
    main()
