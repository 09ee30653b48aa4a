"""The ATen table: one entry per core ATen op that memgrad maps, from the
graph torch.export gives after its core decompositions (capture.py) onto
memgrad's builder (memgrad.Graph).

Each handler is called as handler(cx, node, *args, **kwargs) with the
node's arguments already looked up: a value the body computes is a
memgrad Tensor (or a _Transposed, a 2-D transpose not yet built), a value
the prologue computes in PyTorch is a torch tensor (capture.py feeds it to
memgrad as an input on every call), and numbers, lists and None are
themselves. A handler returns a memgrad Tensor, or a tuple of them for an
op with several outputs, or raises Unmapped with the reason.

Adding an op is one entry here (and, where memgrad lacks the C op, the op
in the C library): nothing else in the capture names ops.
"""
import math
import operator

import torch

from ._pooling import adaptive_avg_pool2d

aten = torch.ops.aten


class Unmapped(Exception):
    """This node cannot be mapped; the message says why."""


class _Transposed:
    """A 2-D transpose (permute [1, 0]) of a memgrad tensor, kept lazy so
    that a matmul reading it reads its source with trans_a/trans_b
    instead of a copy; anything else reading it builds the permute."""

    def __init__(self, src):
        self.src = src


TABLE = {}


def _op(*overloads):
    def reg(h):
        for o in overloads:
            TABLE[o] = h
        return h
    return reg


def _ov(packet, *names):
    """The overloads of `packet` named (those this PyTorch has)."""
    return [getattr(packet, n) for n in names if hasattr(packet, n)]


def supported(node):
    """Whether the table has an entry for this call_function node."""
    return node.target in TABLE or node.target is operator.getitem


# ------------------------------------------------------------- helpers
def _axis(d, nd):
    d = int(d)
    if d < 0:
        d += nd
    if not 0 <= d < nd:
        raise Unmapped("dim %d out of range for %d dims" % (d, nd))
    return d


def _num(v):
    """A Python number from a number or a 0-dim constant tensor."""
    if torch.is_tensor(v):
        if v.numel() != 1:
            raise Unmapped("a constant tensor operand of shape %s"
                           % (tuple(v.shape),))
        return v.item()
    return v


def _is_num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _binary(cx, name, a, b):
    g = cx.graph
    # a number takes the dtype of the tensor it meets
    if _is_num(a) and not _is_num(b) and not (_is_num(a) and name == "mul"):
        a = cx.t(a, like=cx.t(b))
    if _is_num(b) and not _is_num(a) and name not in ("mul", "div"):
        b = cx.t(b, like=cx.t(a))
    if not _is_num(a) and not _is_num(b):
        a, b = _promote(cx, cx.t(a), cx.t(b))
    if _is_num(b) and name == "mul":
        return _scale(cx, cx.t(a), b)
    if _is_num(a) and name == "mul":
        return _scale(cx, cx.t(b), a)
    if _is_num(b) and name == "div":  # x / 6 as eager divides, not x * 1/6
        x = cx.t(a)
        return g.div(x, cx.t(b, like=x))
    return getattr(g, name)(cx.t(a), cx.t(b))


def _scale(cx, x, alpha):
    """x * alpha with eager's bits: PyTorch rounds a Python number to a
    float32 tensor's dtype before it multiplies, and memgrad's scale
    multiplies in double and rounds once, which is then the same."""
    alpha = float(alpha)
    # a 16-bit tensor's kernel multiplies in float32 too (PyTorch's
    # opmath type), so the number is a float32 one there as well
    if x.dtype in ("float32", "bfloat16", "float16"):
        alpha = float(torch.tensor(alpha, dtype=torch.float32))
    return cx.graph.scale(x, alpha)


_RANK = {"bfloat16": 1, "float16": 1, "float32": 2, "float64": 3}


def _wider(da, db):
    """PyTorch's promotion of two float dtypes: the wider one, and
    float32 for bfloat16 with float16."""
    if da == db:
        return da
    if _RANK[da] == _RANK[db]:
        return "float32"
    return da if _RANK[da] > _RANK[db] else db


def _promote(cx, a, b):
    """PyTorch's type promotion between two float tensors: the narrower
    one is cast to the wider (a float32 table in a float64 model; a
    bfloat16 result of an autocast region added to a float32 residual).
    A 0-dim tensor beside one with dimensions takes the other's dtype, as
    in PyTorch (its value is rounded to it, where PyTorch's CPU kernels
    read it in float32)."""
    if a.dtype == b.dtype or a.dtype not in _RANK or b.dtype not in _RANK:
        return a, b
    if len(a.shape) == 0 and len(b.shape) != 0:
        return cx.graph.cast(a, b.dtype), b
    if len(b.shape) == 0 and len(a.shape) != 0:
        return a, cx.graph.cast(b, a.dtype)
    d = _wider(a.dtype, b.dtype)
    g = cx.graph
    return (a if a.dtype == d else g.cast(a, d),
            b if b.dtype == d else g.cast(b, d))


def _mixed_norm(cx, x, *params):
    """A normalization whose parameters have another dtype than x (under
    torch.autocast a bfloat16 activation meets float32 weights; PyTorch's
    mixed-type kernel computes in float32 and rounds its output once to
    x's dtype): (x in the computing dtype, the params in it, a function
    casting the result back to x's dtype)."""
    dts = {p.dtype for p in params if p is not None}
    if not dts or dts == {x.dtype}:
        return x, params, lambda y: y
    d = x.dtype
    for p in dts:
        d = _wider(d, p)
    g, orig = cx.graph, x.dtype
    up = [p if p is None or p.dtype == d else g.cast(p, d) for p in params]
    return (g.cast(x, d) if x.dtype != d else x, up,
            lambda y: g.cast(y, orig) if y.dtype != orig else y)


# ------------------------------------------------------------- identity
@_op(*_ov(aten.alias, "default"), *_ov(aten.clone, "default"),
     *_ov(aten.contiguous, "default"), *_ov(aten.lift_fresh_copy, "default"))
def _identity(cx, node, x, *args, **kwargs):
    return x


@_op(*_ov(aten._to_copy, "default"))
def _to_copy(cx, node, x, dtype=None, **kwargs):
    t = cx.t(x)
    if dtype is None or cx.dtype_name(dtype) == t.dtype:
        return t
    if cx.dtype_name(dtype) not in ("float32", "float64", "bfloat16",
                                    "float16"):
        raise Unmapped("a cast of %s to %s inside the computation (memgrad "
                       "computes in float32, float64, bfloat16 and "
                       "float16)" % (t.dtype, dtype))
    # RMSNorm's float32 upcast, say: in a float64 model it rounds to
    # float32 and back, as in eager; torch.autocast's casts of weights
    # and activations to bfloat16 (export writes them as _to_copy), whose
    # gradient mg_cast casts back, so .grad keeps the parameter's dtype
    return cx.graph.cast(t, cx.dtype_name(dtype))


# ------------------------------------------------------------- element-wise
for _name in ("add", "sub", "mul", "div"):
    def _h(cx, node, a, b, alpha=1, _name=_name):
        if alpha != 1:
            b = cx.graph.scale(cx.t(b), float(alpha)) if not _is_num(b) \
                else b * alpha
        if _name == "sub" and _is_num(b):
            return _binary(cx, "add", a, -b)
        if _name == "add" and _is_num(a):
            a, b = b, a
        return _binary(cx, _name, a, b)
    _op(*_ov(getattr(aten, _name), "Tensor", "Scalar"))(_h)


@_op(*_ov(aten.rsub, "Scalar", "Tensor"))
def _rsub(cx, node, a, b, alpha=1):
    # b - alpha * a
    if alpha != 1:
        a = cx.graph.scale(cx.t(a), float(alpha))
    return cx.graph.sub(cx.t(b), cx.t(a))


@_op(*_ov(aten.div, "Tensor_mode"))
def _div_mode(cx, node, a, b, rounding_mode=None):
    if rounding_mode is not None:
        raise Unmapped("division with rounding_mode=%r" % rounding_mode)
    return _binary(cx, "div", a, b)


_UNARY = {
    "neg": lambda g, x: g.neg(x),
    "relu": lambda g, x: g.relu(x),
    "tanh": lambda g, x: g.tanh(x),
    "sigmoid": lambda g, x: g.sigmoid(x),
    "exp": lambda g, x: g.exp(x),
    "log": lambda g, x: g.log(x),
    "sqrt": lambda g, x: g.sqrt(x),
    "erf": lambda g, x: g.erf(x),
    "silu": lambda g, x: g.silu(x),
}
for _name, _f in _UNARY.items():
    def _h(cx, node, x, _f=_f):
        return _f(cx.graph, cx.t(x))
    _op(*_ov(getattr(aten, _name), "default"))(_h)


def _graph_unary(name, fallback=None):
    """An op the C library gained with the ATen capture (rsqrt, sin, ...);
    fallback(g, x) where an older library lacks it."""
    def h(cx, node, x):
        g = cx.graph
        try:
            op = getattr(g, name)
        except AttributeError:
            if fallback is None:
                raise Unmapped("this libmemgrad has no %s op" % name) \
                    from None
            return fallback(g, cx.t(x))
        return op(cx.t(x))
    return h


_op(*_ov(aten.rsqrt, "default"))(
    _graph_unary("rsqrt", lambda g, x: g.pow(x, -0.5)))
_op(*_ov(aten.reciprocal, "default"))(
    _graph_unary("reciprocal", lambda g, x: g.pow(x, -1.0)))
_op(*_ov(aten.sin, "default"))(_graph_unary("sin"))
_op(*_ov(aten.cos, "default"))(_graph_unary("cos"))
_op(*_ov(aten.abs, "default"))(_graph_unary("abs"))


@_op(*_ov(aten.pow, "Tensor_Scalar"))
def _pow(cx, node, x, p):
    return cx.graph.pow(cx.t(x), float(p))


@_op(*_ov(aten.gelu, "default"))
def _gelu(cx, node, x, approximate="none"):
    g, x = cx.graph, cx.t(x)
    if approximate == "tanh":
        return g.gelu(x)  # memgrad's gelu is the tanh approximation
    # exact: x/2 (1 + erf(x / sqrt 2))
    e = g.erf(g.scale(x, 1.0 / math.sqrt(2.0)))
    return g.mul(g.scale(x, 0.5), g.add(e, cx.t(1.0)))


@_op(*_ov(aten.leaky_relu, "default"))
def _leaky_relu(cx, node, x, slope=0.01):
    return cx.graph.leaky_relu(cx.t(x), float(slope))


@_op(*_ov(aten.clamp, "default"), *_ov(aten.clamp_min, "default"),
     *_ov(aten.clamp_max, "default"), *_ov(aten.hardtanh, "default"))
def _clamp(cx, node, x, lo=None, hi=None):
    if node.target is getattr(aten.clamp_max, "default", None):
        lo, hi = None, lo
    if node.target is getattr(aten.hardtanh, "default", None):
        lo = -1.0 if lo is None else lo
        hi = 1.0 if hi is None else hi
    g = cx.graph
    lo = -math.inf if lo is None else float(_num(lo))
    hi = math.inf if hi is None else float(_num(hi))
    if hasattr(g, "clamp"):
        return g.clamp(cx.t(x), lo, hi)
    raise Unmapped("this libmemgrad has no clamp op")


@_op(*_ov(aten.where, "self"))
def _where(cx, node, cond, a, b):
    g = cx.graph
    if not hasattr(g, "where"):
        raise Unmapped("this libmemgrad has no where op")
    a, b = _promote(cx, cx.t(a), cx.t(b))
    return g.where(cx.t(cond, float_dtype=False), a, b)


# ------------------------------------------------------------- matmul
def _mat(cx, v):
    """(tensor, transposed) for a matmul operand."""
    if isinstance(v, _Transposed):
        return v.src, True
    return cx.t(v), False


@_op(*_ov(aten.mm, "default"), *_ov(aten.bmm, "default"),
     *_ov(aten.matmul, "default"))
def _mm(cx, node, a, b):
    (a, ta), (b, tb) = _mat(cx, a), _mat(cx, b)
    return cx.graph.matmul(a, b, trans_a=ta, trans_b=tb)


@_op(*_ov(aten.addmm, "default"))
def _addmm(cx, node, bias, a, b, beta=1, alpha=1):
    g = cx.graph
    y = _mm(cx, node, a, b)
    if alpha != 1:
        y = g.scale(y, float(alpha))
    if beta == 0:
        return y
    bias = cx.t(bias)
    if beta != 1:
        bias = g.scale(bias, float(beta))
    return g.add(y, bias)


# ------------------------------------------------------------- shapes
def _shape_of(v):
    if isinstance(v, _Transposed):
        s = v.src.shape
        return (s[1], s[0])
    return tuple(v.shape)


def _reshape(cx, x, shape):
    x = cx.t(x)
    shape = [int(s) for s in shape]
    if -1 in shape:
        known = 1
        for s in shape:
            if s != -1:
                known *= s
        n = 1
        for s in x.shape:
            n *= s
        shape[shape.index(-1)] = n // known if known else 0
    if tuple(shape) == tuple(x.shape):
        return x
    return cx.graph.reshape(x, shape)


@_op(*_ov(aten.view, "default"), *_ov(aten._unsafe_view, "default"),
     *_ov(aten.reshape, "default"))
def _view(cx, node, x, shape):
    return _reshape(cx, x, shape)


@_op(*_ov(aten.unsqueeze, "default"))
def _unsqueeze(cx, node, x, dim):
    s = list(_shape_of(x))
    s.insert(_axis(dim, len(s) + 1), 1)
    return _reshape(cx, x, s)


@_op(*_ov(aten.squeeze, "default", "dim", "dims"))
def _squeeze(cx, node, x, dims=None):
    s = _shape_of(x)
    if dims is None:
        keep = [d for d in s if d != 1]
    else:
        if isinstance(dims, int):
            dims = [dims]
        drop = {_axis(d, len(s)) for d in dims}
        keep = [d for i, d in enumerate(s) if not (i in drop and d == 1)]
    return _reshape(cx, x, keep)


@_op(*_ov(aten.permute, "default"))
def _permute(cx, node, x, dims):
    nd = len(_shape_of(x))
    dims = [_axis(d, nd) for d in dims]
    if dims == list(range(nd)):
        return x
    if nd == 2 and dims == [1, 0] and not isinstance(x, _Transposed):
        return _Transposed(cx.t(x))
    return cx.graph.permute(cx.t(x), dims)


@_op(*_ov(aten.t, "default"))
def _t(cx, node, x):
    return _permute(cx, node, x, [1, 0])


@_op(*_ov(aten.transpose, "int"))
def _transpose(cx, node, x, d0, d1):
    nd = len(_shape_of(x))
    dims = list(range(nd))
    a, b = _axis(d0, nd), _axis(d1, nd)
    dims[a], dims[b] = dims[b], dims[a]
    return _permute(cx, node, x, dims)


@_op(*_ov(aten.expand, "default"))
def _expand(cx, node, x, shape):
    x = cx.t(x)
    s = list(x.shape)
    shape = list(shape)
    off = len(shape) - len(s)
    out = [s[i - off] if (d == -1 and i >= off) else int(d)
           for i, d in enumerate(shape)]
    if out == s:
        return x
    return cx.graph.broadcast_to(x, out)


@_op(*_ov(aten.slice, "Tensor"))
def _slice(cx, node, x, dim=0, start=None, end=None, step=1):
    x = cx.t(x)
    d = _axis(dim, len(x.shape))
    n = x.shape[d]
    start = 0 if start is None else int(start)
    end = n if end is None else int(end)
    if start < 0:
        start += n
    if end < 0:
        end += n
    start, end = max(0, min(start, n)), max(0, min(end, n))
    if step == 1 and start == 0 and end == n:
        return x
    length = max(0, end - start)
    if step == 1:
        return cx.graph.slice(x, d, start, length)
    # every step-th element: narrow to a multiple of step, split the axis
    # into (count, step) and keep the first of each step
    count = -(-length // step)
    y = cx.graph.slice(x, d, start, min(count * step, n - start)) \
        if count * step <= n - start else None
    if y is None:
        pad = [0] * len(x.shape)
        after = list(pad)
        after[d] = count * step - (n - start)
        y = cx.graph.pad(cx.graph.slice(x, d, start, n - start), pad, after)
    s = list(y.shape)
    y = cx.graph.reshape(y, s[:d] + [count, step] + s[d + 1:])
    y = cx.graph.slice(y, d + 1, 0, 1)
    return cx.graph.reshape(y, s[:d] + [count] + s[d + 1:])


@_op(*_ov(aten.select, "int"))
def _select(cx, node, x, dim, index):
    x = cx.t(x)
    d = _axis(dim, len(x.shape))
    i = int(index)
    if i < 0:
        i += x.shape[d]
    y = cx.graph.slice(x, d, i, 1)
    s = list(x.shape)
    del s[d]
    return cx.graph.reshape(y, s)


@_op(*_ov(aten.split_with_sizes, "default"), *_ov(aten.split, "Tensor"))
def _split(cx, node, x, sizes, dim=0):
    x = cx.t(x)
    d = _axis(dim, len(x.shape))
    n = x.shape[d]
    if isinstance(sizes, int):
        sizes = [min(sizes, n - s) for s in range(0, n, sizes)]
    out, at = [], 0
    for s in sizes:
        out.append(cx.graph.slice(x, d, at, int(s)))
        at += int(s)
    return tuple(out)


@_op(*_ov(aten.unbind, "int"))
def _unbind(cx, node, x, dim=0):
    x = cx.t(x)
    d = _axis(dim, len(x.shape))
    return tuple(_select(cx, node, x, d, i) for i in range(x.shape[d]))


@_op(*_ov(aten.cat, "default"))
def _cat(cx, node, xs, dim=0):
    xs = [cx.t(x) for x in xs]
    xs = [x for x in xs if not (len(x.shape) == 1 and x.shape[0] == 0)]
    return cx.graph.concat(xs, _axis(dim, len(xs[0].shape)))


@_op(*_ov(aten.constant_pad_nd, "default"))
def _pad(cx, node, x, pad, value=0.0):
    if value != 0:
        raise Unmapped("padding with %r (memgrad pads with zeros)" % value)
    x = cx.t(x)
    nd = len(x.shape)
    before, after = [0] * nd, [0] * nd
    for i in range(len(pad) // 2):
        d = nd - 1 - i
        before[d], after[d] = int(pad[2 * i]), int(pad[2 * i + 1])
    if min(before + after) < 0:
        raise Unmapped("negative padding (a crop)")
    return cx.graph.pad(x, before, after)


# ------------------------------------------------------------- reductions
def _dims(x, dim):
    nd = len(x.shape)
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return tuple(range(nd))
    if isinstance(dim, int):
        dim = [dim]
    return tuple(sorted({_axis(d, nd) for d in dim}))


@_op(*_ov(aten.sum, "dim_IntList", "default"))
def _sum(cx, node, x, dim=None, keepdim=False, dtype=None):
    x = _to_copy(cx, node, x, dtype=dtype)  # sum(dtype=) accumulates in it
    return cx.graph.sum(x, _dims(x, dim), keepdims=bool(keepdim))


@_op(*_ov(aten.mean, "dim", "default"))
def _mean(cx, node, x, dim=None, keepdim=False, dtype=None):
    x = _to_copy(cx, node, x, dtype=dtype)
    return cx.graph.mean(x, _dims(x, dim), keepdims=bool(keepdim))


@_op(*_ov(aten._softmax, "default"), *_ov(aten.softmax, "int"))
def _softmax(cx, node, x, dim, half_to_float=False):
    x = cx.t(x)
    return cx.graph.softmax(x, _axis(dim, len(x.shape)))


@_op(*_ov(aten._log_softmax, "default"), *_ov(aten.log_softmax, "int"))
def _log_softmax(cx, node, x, dim, half_to_float=False):
    x = cx.t(x)
    return cx.graph.log_softmax(x, _axis(dim, len(x.shape)))


# ------------------------------------------------------------- layers
@_op(*_ov(aten.convolution, "default"))
def _convolution(cx, node, x, w, b, stride, padding, dilation, transposed,
                 output_padding, groups):
    if transposed:
        raise Unmapped("a transposed convolution")
    g = cx.graph
    x, w = cx.t(x), cx.t(w)
    one_d = len(x.shape) == 3
    if one_d:  # [N, C, L] as [N, C, 1, L]
        x = g.reshape(x, (x.shape[0], x.shape[1], 1, x.shape[2]))
        w = g.reshape(w, (w.shape[0], w.shape[1], 1, w.shape[2]))
        stride, padding, dilation = ([1] + list(stride), [0] + list(padding),
                                     [1] + list(dilation))
    elif len(x.shape) != 4:
        raise Unmapped("a %d-D convolution" % (len(x.shape) - 2))
    y = g.conv2d(x, w, tuple(stride), tuple(padding), tuple(dilation),
                 int(groups))
    if b is not None:
        b = cx.t(b)
        y = g.add(y, g.reshape(b, (b.shape[0], 1, 1)))
    if one_d:
        y = g.reshape(y, (y.shape[0], y.shape[1], y.shape[3]))
    return y


@_op(*_ov(aten.native_layer_norm, "default"))
def _layer_norm(cx, node, x, shape, w, b, eps):
    g = cx.graph
    x = cx.t(x)
    shape = tuple(int(s) for s in shape)
    w = cx.t(w) if w is not None else \
        cx.t(torch.ones(shape, dtype=getattr(torch, x.dtype)))
    b = cx.t(b) if b is not None else \
        cx.t(torch.zeros(shape, dtype=getattr(torch, x.dtype)))
    x, (w, b), back = _mixed_norm(cx, x, w, b)
    # mean and rstd are outputs too; nothing we map reads them
    return (back(g.layernorm(x, w, b, len(shape), float(eps))), None, None)


def _bn_stats(cx, x):
    """Batch mean and biased variance per channel, keepdims, and the
    element count per channel."""
    g = cx.graph
    axes = tuple(i for i in range(len(x.shape)) if i != 1)
    mean = g.mean(x, axes, keepdims=True)
    d = g.sub(x, mean)
    var = g.mean(g.mul(d, d), axes, keepdims=True)
    n = 1
    for i in axes:
        n *= x.shape[i]
    return mean, var, n


def _bn_4d(cx, x):
    """x as [N, C, H, W] (BatchNorm1d's [N, C] and [N, C, L] too)."""
    s = x.shape
    if len(s) == 4:
        return x, None
    if len(s) in (2, 3):
        l = s[2] if len(s) == 3 else 1
        return cx.graph.reshape(x, (s[0], s[1], 1, l)), s
    raise Unmapped("batch norm of a %d-D tensor" % len(s))


@_op(*_ov(aten._native_batch_norm_legit_functional, "default"))
def _batch_norm_train(cx, node, x, w, b, rmean, rvar, training, momentum,
                      eps):
    g = cx.graph
    x = cx.t(x)
    c = x.shape[1]
    if not training:
        return _batch_norm_eval(cx, node, x, w, b, rmean, rvar, momentum,
                                eps) + (rmean, rvar)
    w = cx.t(w) if w is not None else \
        cx.t(torch.ones(c, dtype=getattr(torch, x.dtype)))
    b = cx.t(b) if b is not None else \
        cx.t(torch.zeros(c, dtype=getattr(torch, x.dtype)))
    x, (w, b), back = _mixed_norm(cx, x, w, b)
    x4, orig = _bn_4d(cx, x)
    y = g.batchnorm(x4, w, b, float(eps))
    if orig is not None:
        y = g.reshape(y, orig)
    y = back(y)
    new_rm, new_rv = rmean, rvar
    if rmean is not None:
        # PyTorch's update: running = (1 - m) running + m batch, with the
        # unbiased variance; computed in memgrad as extra outputs
        mean, var, n = _bn_stats(cx, x4)
        m = float(momentum)
        shape = (c,)
        mean, var = g.reshape(mean, shape), g.reshape(var, shape)
        new_rm = g.add(g.scale(cx.t(rmean), 1.0 - m), g.scale(mean, m))
        new_rv = g.add(g.scale(cx.t(rvar), 1.0 - m),
                       g.scale(var, m * n / max(n - 1, 1)))
    return (y, None, None, new_rm, new_rv)


@_op(*_ov(aten._native_batch_norm_legit_no_training, "default"))
def _batch_norm_eval(cx, node, x, w, b, rmean, rvar, momentum, eps):
    # (x - mean) / sqrt(var + eps) * w + b, PyTorch's eval; the statistics
    # are buffers, read on every call
    g = cx.graph
    x = cx.t(x)
    c = x.shape[1]
    bshape = (c,) + (1,) * (len(x.shape) - 2)
    x, (rm, rv, w, b), back = _mixed_norm(
        cx, x, cx.t(rmean), cx.t(rvar), None if w is None else cx.t(w),
        None if b is None else cx.t(b))
    y = g.div(g.sub(x, g.reshape(rm, bshape)),
              g.sqrt(g.add(g.reshape(rv, bshape),
                           cx.t(float(eps), like=rv))))
    if w is not None:
        y = g.mul(y, g.reshape(w, bshape))
    if b is not None:
        y = g.add(y, g.reshape(b, bshape))
    return (back(y), None, None)


@_op(*_ov(aten.native_group_norm, "default"))
def _group_norm(cx, node, x, w, b, n, c, hw, groups, eps):
    g = cx.graph
    x, (w, b), back = _mixed_norm(cx, cx.t(x),
                                  None if w is None else cx.t(w),
                                  None if b is None else cx.t(b))
    s = x.shape
    xg = g.reshape(x, (s[0], int(groups), (int(c) // int(groups)) * int(hw)))
    mean = g.mean(xg, (2,), keepdims=True)
    d = g.sub(xg, mean)
    var = g.mean(g.mul(d, d), (2,), keepdims=True)
    y = g.mul(d, g.pow(g.add(var, cx.t(float(eps), like=var)), -0.5))
    y = g.reshape(y, s)
    bshape = (int(c),) + (1,) * (len(s) - 2)
    if w is not None:
        y = g.mul(y, g.reshape(w, bshape))
    if b is not None:
        y = g.add(y, g.reshape(b, bshape))
    return (back(y), None, None)


@_op(*_ov(aten.native_dropout, "default"))
def _dropout(cx, node, x, p, train):
    if not train or p == 0:
        return (x, None)
    return (cx.dropout(cx.t(x), float(p)), None)


@_op(*_ov(aten.embedding, "default"))
def _embedding(cx, node, w, idx, padding_idx=-1, scale_grad=False,
               sparse=False):
    if scale_grad or sparse:
        raise Unmapped("embedding with scale_grad_by_freq or sparse")
    g = cx.graph
    raw = idx
    w, idx = cx.t(w), cx.t(idx, float_dtype=False)
    y = g.embedding(w, idx)
    if padding_idx is not None and padding_idx >= 0 and torch.is_tensor(raw):
        # PyTorch gives the padding row no gradient: the rows picked by
        # padding_idx are taken from an input bound to the same table
        # (no gradient flows there) and the others from w; x * 1 + z * 0
        # is x, bit for bit, for finite rows
        keep = cx.t(cx.derived_value(
            raw, lambda i: (i != padding_idx).unsqueeze(-1),
            "embedding padding mask"))
        pad = cx.t(cx.derived_value(
            raw, lambda i: (i == padding_idx).unsqueeze(-1),
            "embedding padding rows"))
        y = g.add(g.mul(y, keep), g.mul(g.embedding(cx.alias_input(w), idx),
                                        pad))
    return y


@_op(*_ov(aten.index, "Tensor"))
def _index(cx, node, x, indices):
    g = cx.graph
    x = cx.t(x)
    live = [(i, v) for i, v in enumerate(indices) if v is not None]
    if len(live) != 1:
        raise Unmapped("indexing with %d index tensors (memgrad maps one)"
                       % len(live))
    d, idx = live[0]
    idx = cx.t(idx, float_dtype=False)
    nd = len(x.shape)
    perm = [d] + [i for i in range(nd) if i != d]
    xt = g.permute(x, perm) if d else x
    rest = list(xt.shape[1:])
    flat = 1
    for s in rest:
        flat *= s
    table = g.reshape(xt, (xt.shape[0], flat))
    y = g.embedding(table, idx)  # [*idx, flat]
    ishape = list(idx.shape)
    y = g.reshape(y, ishape + rest)
    if d == 0:
        return y
    # PyTorch puts the indexed dims where dim d was (one index tensor)
    ni = len(ishape)
    order = list(range(ni, ni + d)) + list(range(ni)) + \
        list(range(ni + d, ni + nd - 1))
    return g.permute(y, order)


@_op(*_ov(aten.gather, "default"))
def _gather(cx, node, x, dim, index, sparse_grad=False):
    g = cx.graph
    if not hasattr(g, "gather"):
        raise Unmapped("this libmemgrad has no gather op")
    x = cx.t(x)
    return g.gather(x, _axis(dim, len(x.shape)),
                    cx.t(index, float_dtype=False))


@_op(*_ov(aten.index_select, "default"))
def _index_select(cx, node, x, dim, index):
    # Swin's relative position bias: a 1-D index buffer into a table
    g = cx.graph
    if not hasattr(g, "index_select"):
        raise Unmapped("this libmemgrad has no index_select op")
    x = cx.t(x)
    idx = cx.t(index, float_dtype=False)
    if len(idx.shape) != 1:
        raise Unmapped("index_select with an index of %d dims"
                       % len(idx.shape))
    return g.index_select(x, _axis(dim, len(x.shape)), idx)


@_op(*_ov(aten.scaled_dot_product_attention, "default"))
def _sdpa(cx, node, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False,
          scale=None, enable_gqa=False):
    g = cx.graph
    q, k, v = cx.t(q), cx.t(k), cx.t(v)
    if len(q.shape) != len(k.shape):
        raise Unmapped("attention with q of %d dims and k of %d"
                       % (len(q.shape), len(k.shape)))
    hq, hk = q.shape[-3] if len(q.shape) >= 3 else 1, \
        k.shape[-3] if len(k.shape) >= 3 else 1
    if hq != hk:
        if not enable_gqa or hq % hk:
            raise Unmapped("attention with %d query heads and %d key heads"
                           % (hq, hk))
        k, v = _repeat_heads(g, k, hq // hk), _repeat_heads(g, v, hq // hk)
    mask = None
    if attn_mask is not None:
        if torch.is_tensor(attn_mask):
            # a boolean mask (True: attend) becomes the additive one
            # PyTorch's math path uses
            mask = cx.t(cx.derived_value(
                attn_mask, lambda m: torch.zeros(
                    (), dtype=getattr(torch, q.dtype))
                .masked_fill(~m, -math.inf).expand(m.shape)
                if m.dtype == torch.bool else m, "attention mask"))
        else:
            mask = cx.t(attn_mask)
    causal = bool(is_causal)
    if causal and q.shape[-2] != k.shape[-2]:
        raise Unmapped("is_causal with Lq %d != Lk %d" % (q.shape[-2],
                                                          k.shape[-2]))
    return cx.graph.attention(q, k, v, causal=causal,
                              scale=0.0 if scale is None else float(scale),
                              mask=mask, dropout_p=float(dropout_p),
                              seed=cx.next_seed() if dropout_p else 0)


def _repeat_heads(g, x, n):
    s = list(x.shape)
    y = g.reshape(x, s[:-3] + [s[-3], 1] + s[-2:])
    y = g.broadcast_to(y, s[:-3] + [s[-3], n] + s[-2:])
    return g.reshape(y, s[:-3] + [s[-3] * n] + s[-2:])


@_op(*_ov(aten.avg_pool2d, "default"))
def _avg_pool(cx, node, x, kernel, stride=(), padding=(0, 0),
              ceil_mode=False, count_include_pad=True, divisor=None):
    if divisor is not None:
        raise Unmapped("avg_pool2d with divisor_override")
    k = _pair(kernel)
    s = _pair(stride) if stride else k
    return cx.graph.avg_pool2d(cx.t(x), k, s, _pair(padding), ceil_mode,
                               count_include_pad)


@_op(*_ov(aten.max_pool2d_with_indices, "default"))
def _max_pool(cx, node, x, kernel, stride=(), padding=(0, 0),
              dilation=(1, 1), ceil_mode=False):
    if tuple(_pair(dilation)) != (1, 1):
        raise Unmapped("max pooling with dilation")
    k = _pair(kernel)
    s = _pair(stride) if stride else k
    return (cx.graph.max_pool2d(cx.t(x), k, s, _pair(padding), ceil_mode),
            None)


@_op(*_ov(aten._adaptive_avg_pool2d, "default"))
def _adaptive_avg_pool(cx, node, x, out):
    x = cx.t(x)
    if len(x.shape) != 4:
        raise Unmapped("adaptive pooling of a %d-dim input (memgrad pools "
                       "NCHW)" % len(x.shape))
    return adaptive_avg_pool2d(cx.graph, x, *_pair(out))


def _pair(v):
    if isinstance(v, int):
        return (v, v)
    v = list(v)
    return (int(v[0]), int(v[-1])) if len(v) in (1, 2) else tuple(v)


@_op(*_ov(aten.as_strided, "default"))
def _as_strided(cx, node, x, size, stride, offset=0):
    # memgrad's tensors are contiguous: a view whose strides are the
    # contiguous ones of its size (size-1 dims' strides aside) over all
    # of x is a reshape; anything else is not mapped
    x = cx.t(x)
    size = [int(s) for s in size]
    want, acc = [], 1
    for s in reversed(size):
        want.append(acc)
        acc *= s
    want.reverse()
    n = 1
    for s in x.shape:
        n *= s
    if (offset or 0) != 0 or acc != n or any(
            s != 1 and int(st) != w for s, st, w in zip(size, stride, want)):
        raise Unmapped("as_strided with size %s and strides %s (not a "
                       "contiguous view)" % (size, list(stride)))
    return _reshape(cx, x, size)
