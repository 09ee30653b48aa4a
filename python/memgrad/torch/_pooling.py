"""Adaptive average pooling as memgrad graph ops, shared by both captures
(the torch.fx tracer in fx.py and the ATen table in aten.py)."""


def adaptive_avg_pool2d(g, x, oh, ow):
    """PyTorch's adaptive average pooling of an NCHW tensor x to oh x ow:
    output bin i along H covers rows floor(i H / oh) to
    ceil((i + 1) H / oh). Where oh divides H (and ow W) that is one
    avg_pool2d with kernel = stride = H / oh; otherwise, as a composition:
    each bin's rows sliced and averaged, concatenated, then the same along
    W (the mean over a bin is the mean of its rows' means). Bins overlap or
    repeat rows where the output is larger than the input."""
    n, c, h, w = x.shape
    if (oh, ow) == (1, 1):
        return g.reshape(g.global_avg_pool2d(x), (n, c, 1, 1))
    if h % oh == 0 and w % ow == 0:
        k = (h // oh, w // ow)
        return g.avg_pool2d(x, k, k)
    for axis, size, out in ((2, h, oh), (3, w, ow)):
        if size == out:
            continue
        parts = []
        for i in range(out):
            s, e = (i * size) // out, -((-(i + 1) * size) // out)
            part = g.slice(x, axis, s, e - s)
            if e - s > 1:
                part = g.mean(part, (axis,), keepdims=True)
            parts.append(part)
        x = g.concat(parts, axis)
    return x
