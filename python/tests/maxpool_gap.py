"""Max-pool near-ties, for the float32 gradient checks (issue 25 item 10).

A max pool sends each window's gradient to its largest input. Where the two
largest inputs of a window differ by less than float32's rounding of the
values that fed them, which one wins depends on the order of the sums
behind them: oneDNN's blocked AVX-512 kernels, its AVX2 kernels, im2col and
PyTorch each may pick a different one, and then a whole gradient entry
moves to a neighbouring position. That is not a loss of precision in any
kernel: on the squeezenet1_1 of the finding, every convolution matched
im2col to 7e-7 on its own inputs, and one window of features.8 whose two
largest inputs were 2.1193693 and 2.1193690 (AVX-512) or 2.1193678 and
2.1193697 (AVX2) moved features.7.expand3x3's weight gradient by 6.5e-3 and
everything before it (bench/results/maxpool-ties.txt).

A float32 check against float64 is well posed only for inputs without such
windows, so the checks pick one: min_gap() measures the smallest relative
gap between a window's two largest inputs over every nn.MaxPool2d of a
float64 model, and untied_input() draws inputs until that gap is wide.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def _window_gaps(pool, x):
    """Relative gap (top1 - top2) / |top1| of every window of pool over x."""
    k = pool.kernel_size if isinstance(pool.kernel_size, tuple) else \
        (pool.kernel_size,) * 2
    s = pool.stride if isinstance(pool.stride, tuple) else (pool.stride,) * 2
    p = pool.padding if isinstance(pool.padding, tuple) else \
        (pool.padding,) * 2
    d = pool.dilation if isinstance(pool.dilation, tuple) else \
        (pool.dilation,) * 2
    n, c, h, w = x.shape
    y = F.max_pool2d(x, k, s, p, d, ceil_mode=pool.ceil_mode)
    oh, ow = y.shape[-2:]
    # pad with -inf: the start padding, and at the end whatever the last
    # (ceil_mode) window reaches past x
    need_h = (oh - 1) * s[0] + (k[0] - 1) * d[0] + 1
    need_w = (ow - 1) * s[1] + (k[1] - 1) * d[1] + 1
    xp = F.pad(x, (p[1], max(0, need_w - w - p[1]),
                   p[0], max(0, need_h - h - p[0])), value=-math.inf)
    cols = F.unfold(xp, k, dilation=d, stride=s)  # [n, c*kh*kw, oh*ow]
    cols = cols.reshape(n, c, k[0] * k[1], -1)[..., :oh * ow]
    top = cols.topk(2, dim=2).values
    gap = (top[:, :, 0] - top[:, :, 1]) / top[:, :, 0].abs().clamp_min(1e-30)
    # windows of a ReLU's zeros tie exactly in float32 as in float64, and
    # every implementation takes the first
    zeros = (top[:, :, 0] == 0) & (top[:, :, 1] == 0)
    return gap[torch.isfinite(gap) & ~zeros]


def min_gap(model, x):
    """The smallest relative gap between the two largest inputs of any
    window of any nn.MaxPool2d in model (float64) on input x; inf without
    max pools."""
    found = []

    def hook(mod, inputs, out):
        g = _window_gaps(mod, inputs[0].detach())
        if g.numel():
            found.append(float(g.min()))

    hooks = [m.register_forward_hook(hook) for m in model.modules()
             if isinstance(m, nn.MaxPool2d)]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in hooks:
            h.remove()
    return min(found, default=math.inf)


# Float32 rounding of the values a pool sees reached 7e-7 of them on
# squeezenet1_1; 1e-5 leaves a margin of 14.
TIE_GAP = 1e-5


def untied_input(model64, make, first=None, tries=40):
    """An input whose max-pool windows all have a gap of at least TIE_GAP
    in model64 (a float64 model): first if it has, else make(seed) for
    seed = 0, 1, ... (make returns a float32 tensor)."""
    if first is not None and min_gap(model64, first.double()) >= TIE_GAP:
        return first
    for seed in range(tries):
        x = make(seed)
        if min_gap(model64, x.double()) >= TIE_GAP:
            return x
    raise AssertionError("no input without max-pool near-ties in %d tries"
                         % tries)
