#!/usr/bin/env python3
"""bench/torch_cudnn_det.py - what determinism costs PyTorch's training
step on a GPU (issue 24): compare_torch.py's ResNet (the same modules),
plain backprop, timed with CUDA events with torch.backends.cudnn.
deterministic off (PyTorch's default, which lets cuDNN pick
non-deterministic weight-gradient algorithms) and on (deterministic
algorithms only, as memgrad's cuDNN path always runs, so that a
recomputed convolution gives the same bits). TF32 off on both, as in
compare_torch.py. The two settings alternate, one step each, after a
warm-up of each; the medians and their ratio come from the same run.

    python3 bench/torch_cudnn_det.py [--depth 32] [--batch 256]
        [--width 16] [--repeat 9]
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_torch as ct  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="resnet", choices=["resnet"])
    ap.add_argument("--depth", type=int, default=32)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--width", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=9)
    a = ap.parse_args()
    import torch
    import torch.nn.functional as F
    if not torch.cuda.is_available():
        sys.exit("torch_cudnn_det.py: PyTorch finds no CUDA device")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    layout, build = ct.MODELS[a.model][:2]
    arrays = ct.draw(layout(a.depth, a.batch, a.width), 0)
    layers, x, labels, params, _ = build(a.depth, a.batch, a.width, arrays)
    model = torch.nn.Sequential(*layers).cuda()
    x, labels = x.cuda(), labels.cuda().long()

    def step():
        for p in model.parameters():
            p.grad = None
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        F.cross_entropy(model(x), labels).backward()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)

    times = {False: [], True: []}
    for det in (False, True):
        torch.backends.cudnn.deterministic = det
        step()
    for _ in range(a.repeat):
        for det in (False, True):
            torch.backends.cudnn.deterministic = det
            times[det].append(step())
    off, on = (statistics.median(times[d]) for d in (False, True))
    print(f"# {a.model} depth {a.depth}, batch {a.batch}, width {a.width}, "
          f"f32, TF32 off, {torch.cuda.get_device_name()}, torch "
          f"{torch.__version__}; plain step, CUDA events, median of "
          f"{a.repeat} alternating")
    print(f"cudnn_deterministic=0 time_ms_median={off:.3f}")
    print(f"cudnn_deterministic=1 time_ms_median={on:.3f}")
    print(f"deterministic/default={on / off:.3f}")


if __name__ == "__main__":
    main()
