#!/usr/bin/python3
"""pool_torch_reference.py - PyTorch's values for memgrad's pooling with
each side's padding, ceil_mode and count_include_pad (issue 12), written
as tests/ops/pool_torch.h, which tests/ops/pool.c (test_ops) checks
memgrad's forward values and gradients against in f32 and f64.

    /usr/bin/python3 tests/pool_torch_reference.py > tests/ops/pool_torch.h

(Debian's python3-torch; the header is committed, so the tests need no
Python.) Each case's x and gy come from integer formulas that
tests/ops/pool.c repeats (POOL_TORCH_X, POOL_TORCH_GY): x has no two equal
elements, so the max-pool gradient has no ties to break.

PyTorch pads both sides alike, so a case with different sides pads x
explicitly (-inf for max pooling, 0 for average pooling) and pools that
with no padding; count_include_pad=0 is then a window sum divided by a
window count of a mask of x (divisor_override=1 makes avg_pool2d a sum).
The output is cut to PyTorch's own size rule for two-sided padding
(pooling_output_shape_pad_lr: a ceil_mode window that starts at or past
x's end is dropped). Every case whose sides pad alike is also run through
F.max_pool2d / F.avg_pool2d with their own padding, ceil_mode and
count_include_pad, and must agree with the explicit form to 1e-12, which
checks the emulation where torch can do it natively.
"""
import sys
import textwrap

import torch
import torch.nn.functional as F

# n, c, h, w, kh, kw, sh, sw, pad_top, pad_left, pad_bottom, pad_right,
# ceil_mode, count_include_pad (avg only)
CASES = [
    # symmetric, ceil_mode adds a window that overhangs the end padding
    (1, 2, 6, 6, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1),
    (1, 2, 6, 6, 3, 3, 2, 2, 1, 1, 1, 1, 1, 0),
    # symmetric, ceil_mode's extra window would start past x: dropped
    (1, 1, 5, 5, 2, 2, 3, 3, 1, 1, 1, 1, 1, 1),
    # floor mode, count_include_pad=0 with symmetric pads
    (2, 1, 5, 4, 3, 3, 1, 2, 1, 1, 1, 1, 0, 0),
    # asymmetric pads, floor mode
    (2, 1, 5, 6, 3, 2, 2, 1, 0, 1, 1, 0, 0, 1),
    (2, 1, 5, 6, 3, 2, 2, 1, 0, 1, 1, 0, 0, 0),
    # asymmetric pads and ceil_mode
    (1, 2, 7, 6, 3, 3, 2, 2, 1, 0, 0, 1, 1, 1),
    (1, 2, 7, 6, 3, 3, 2, 2, 1, 0, 0, 1, 1, 0),
    # ONNX SAME_UPPER on an odd size: the extra pad at the end
    (1, 1, 5, 5, 2, 2, 2, 2, 0, 0, 1, 1, 0, 1),
    (1, 1, 5, 5, 2, 2, 2, 2, 0, 0, 1, 1, 0, 0),
    # ceil_mode window starting in the bottom padding: dropped (rows), kept
    # overhanging (columns)
    (1, 1, 4, 5, 2, 3, 2, 2, 0, 1, 1, 1, 1, 1),
    (1, 1, 4, 5, 2, 3, 2, 2, 0, 1, 1, 1, 1, 0),
]


def x_vals(n):  # tests/ops/pool.c: POOL_TORCH_X
    assert n < 1009  # distinct values
    return [((i * 7919) % 1009) / 64.0 - 8.0 for i in range(n)]


def gy_vals(n):  # tests/ops/pool.c: POOL_TORCH_GY
    return [((j * 31) % 17 + 1) / 8.0 for j in range(n)]


def out_len(size, k, s, p0, p1, ceil):
    """PyTorch's pooling_output_shape_pad_lr with dilation 1."""
    span = size + p0 + p1 - k
    o = (span + (s - 1 if ceil else 0)) // s + 1
    if ceil and (o - 1) * s >= size + p0:
        o -= 1
    return o


def explicit(x, c, is_max):
    n, ch, h, w, kh, kw, sh, sw, pt, pl, pb, pr, ceil, cip = c
    oh = out_len(h, kh, sh, pt, pb, ceil)
    ow = out_len(w, kw, sw, pl, pr, ceil)
    pads = (pl, pr, pt, pb)
    if is_max:
        xp = F.pad(x, pads, value=float("-inf"))
        y = F.max_pool2d(xp, (kh, kw), (sh, sw), 0, ceil_mode=bool(ceil))
    else:
        xp = F.pad(x, pads, value=0.0)
        s = F.avg_pool2d(xp, (kh, kw), (sh, sw), 0, ceil_mode=bool(ceil),
                         divisor_override=1)
        if cip:
            # the window clipped to the padded input, not the overhang
            ones = torch.ones_like(xp)
        else:
            ones = F.pad(torch.ones_like(x), pads, value=0.0)
        cnt = F.avg_pool2d(ones, (kh, kw), (sh, sw), 0, ceil_mode=bool(ceil),
                           divisor_override=1)
        y = s / cnt
    return y[:, :, :oh, :ow]


def native(x, c, is_max):
    n, ch, h, w, kh, kw, sh, sw, pt, pl, pb, pr, ceil, cip = c
    if is_max:
        return F.max_pool2d(x, (kh, kw), (sh, sw), (pt, pl),
                            ceil_mode=bool(ceil))
    return F.avg_pool2d(x, (kh, kw), (sh, sw), (pt, pl), ceil_mode=bool(ceil),
                        count_include_pad=bool(cip))


def run(fn, x0, c, is_max):
    x = x0.clone().requires_grad_(True)
    y = fn(x, c, is_max)
    gy = torch.tensor(gy_vals(y.numel()), dtype=torch.float64).reshape(y.shape)
    (y * gy).sum().backward()
    return y.detach(), x.grad


def c_array(vals):
    body = ", ".join("%.17g" % v for v in vals)
    return "{\n" + textwrap.fill(body, 78, initial_indent="    ",
                                 subsequent_indent="    ") + "}"


def main():
    torch.set_default_dtype(torch.float64)
    out = sys.stdout
    out.write("/*\n * pool_torch.h - PyTorch's pooling values for "
              "tests/ops/pool.c, written by\n * tests/pool_torch_reference.py "
              "(torch %s); do not edit.\n */\n" % torch.__version__)
    out.write("typedef struct pool_torch_case {\n"
              "    int64_t x[4];\n"
              "    int kh, kw, sh, sw, pt, pl, pb, pr, ceil_mode, cip;\n"
              "    int is_max;\n"
              "    int64_t oh, ow;\n"
              "    const double *y, *dx;\n"
              "} pool_torch_case;\n\n")
    rows = []
    for k, c in enumerate(CASES):
        n, ch, h, w = c[:4]
        x0 = torch.tensor(x_vals(n * ch * h * w)).reshape(n, ch, h, w)
        for is_max in (1, 0):
            if is_max and c[13] == 0:
                continue  # max pooling has no divisor
            y, dx = run(explicit, x0, c, is_max)
            if c[8] == c[10] and c[9] == c[11]:
                yn, dxn = run(native, x0, c, is_max)
                assert yn.shape == y.shape, (c, yn.shape, y.shape)
                assert torch.allclose(yn, y, rtol=0, atol=1e-12), c
                assert torch.allclose(dxn, dx, rtol=0, atol=1e-12), c
            tag = "%s%d" % ("max" if is_max else "avg", k)
            out.write("static const double pt_%s_y[] = %s;\n"
                      % (tag, c_array(y.flatten().tolist())))
            out.write("static const double pt_%s_dx[] = %s;\n"
                      % (tag, c_array(dx.flatten().tolist())))
            rows.append("    {{%d, %d, %d, %d}, %s, %d, %d, %d, pt_%s_y, pt_%s_dx},\n"
                        % (n, ch, h, w, ", ".join(str(v) for v in c[4:]),
                           is_max, y.shape[2], y.shape[3], tag, tag))
    out.write("\nstatic const pool_torch_case pool_torch_cases[] = {\n")
    out.write("".join(rows))
    out.write("};\n")


if __name__ == "__main__":
    main()
