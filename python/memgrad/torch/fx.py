"""memgrad.torch: run a PyTorch nn.Module's forward and backward in memgrad.

`Module(module, example_inputs, policy="memory")` captures the module's
graph with torch.fx, maps each node to memgrad builders, and appends
its gradient graph under the checkpoint policy (`policy="budget"` takes
`budget_bytes`). Calls go through a
torch.autograd.Function: the forward phase runs in memgrad and leaves an
mg_saved per call (so several calls may precede one backward), and the
backward phase takes torch's output gradient as the seed. The original
parameters stay torch Parameters of the wrapped module, bound zero-copy
through DLPack, so any torch.optim optimizer trains them. The dtype
(float32 or float64) is the module's, as after `.double()`. A parameter
must not be changed in place between a call and its backward (memgrad
reads it again when it recomputes).

Shapes: a plan is made for the example's input shapes. A call with other
shapes (another batch size, another image size) or in the other mode
(train/eval) traces and plans again and keeps that plan too: plans are
cached per (mode, input shapes and dtypes, parameter dtype), at most
`Module.MAX_PLANS` of them, the least recently used dropped first.
Planning again costs one trace, the graph build, mg_gradients and
mg_plan_compile: milliseconds for a small network, 0.06 s for resnet18
and 0.31 s for densenet121 on one CPU thread
(bench/results/replan-time.txt).

Inputs are checked on every call: their number must be the traced
forward's, each must be a torch tensor, and an input is never bound as a
parameter.

In-place safety, as in PyTorch: backward raises a RuntimeError naming
memgrad and the tensor, rather than return wrong gradients, when a tensor
memgrad's backward reads was written in place after the call: an input
or a parameter (torch's version counters, recorded at the call; memgrad
may read them again when it recomputes, so any write counts, as after an
optimizer step that precedes backward), or the output where the backward
phase reads it (tanh's output, say; libmemgrad fingerprints such an
output when it hands it to torch and checks it at backward). In-place ops
inside forward (`h += y`, `x.mul_(2)`, `F.relu(h, inplace=True)`,
`nn.ReLU(inplace=True)`) are computed out of place, and every later
reader of the written tensor and its aliases reads the new value, as in
eager PyTorch; a write into a forward input, a parameter or buffer, or a
tensor whose earlier view is read after the write is refused (check()
lists it with the reason).

The module runs where its parameters and inputs are: on the CPU, or after
`.cuda()` on memgrad's CUDA backend, with torch's CUDA tensors bound and
returned through DLPack (no copy through the host). One executor per
device is made on first use; without a CUDA device (or a libmemgrad built
without CUDA) a call on CUDA tensors raises memgrad's MemgradError naming
why. Inputs and parameters on different devices are a RuntimeError.

BatchNorm2d behaves as in PyTorch: in training mode it normalises with the
batch statistics and updates running_mean, running_var (unbiased) and
num_batches_tracked from them (the plan computes each batch mean and
variance as extra forward outputs); after .eval() it normalises with the
running statistics, through a second plan.

Dropout (nn.Dropout, F.dropout) and torchvision's stochastic depth draw
their masks from memgrad's counter-based RNG (mg_dropout), seeded per call
from torch's generator (so torch.manual_seed makes a run repeatable); a
recomputed segment replays the same masks, so every checkpoint policy
gives plain backprop's gradients bit for bit. In eval mode they are the
identity. The masks are memgrad's, not the ones PyTorch would draw.

`check(model, example_inputs)` lists every layer and function that has no
mapping, with counts and module paths, without raising; Module raises
UnsupportedModelError (a NotImplementedError) with the same list.

Supported (the mapping tables below, held by python/tests/test_op_map.py
to src/frontends/op_map.def, the table the ONNX importer is compiled
from; docs/supported-ops.md lists it and `SUPPORTED` these names):
  modules: Linear, Conv2d (zero padding, also padding='same'/'valid'),
    BatchNorm2d (affine), LayerNorm, MaxPool2d, AvgPool2d,
    AdaptiveAvgPool2d (any output size: average pooling where the output
    divides the input, else per-bin slices and means), Flatten, Identity,
    Dropout, ReLU, ReLU6, LeakyReLU, Tanh, Sigmoid, SiLU, GELU (exact and
    tanh), Hardswish, Hardsigmoid, Softmax, LogSoftmax,
    MultiheadAttention (mg_attention per head; no key_padding_mask, masks
    other than the causal one given as a constant), TransformerEncoder
    and TransformerEncoderLayer, TransformerDecoder and
    TransformerDecoderLayer (mapped as whole layers, also as the model
    itself); torchvision's Swin window attention (its wrapped
    shifted_window_attention, _get_relative_position_bias and
    _patch_merging_pad);
  functions: + - * / ** @ and unary -, torch.add/sub/mul/div/matmul/bmm/
    cat/concat/stack/flatten/reshape/transpose/permute/split/chunk/mean/
    sum/softmax/log_softmax/relu/tanh/sigmoid/exp/log/sqrt/rsqrt/erf/pow/
    unsqueeze/squeeze/masked_fill, F.linear/conv2d/relu/relu6/hardtanh/
    leaky_relu/gelu/silu/hardswish/hardsigmoid/softmax/log_softmax/
    layer_norm/dropout/max_pool2d/avg_pool2d/adaptive_avg_pool2d,
    torchvision.ops.stochastic_depth, getattr(x, "shape");
  tensor methods: the same names, and view, contiguous, size, dim, t,
    expand, expand_as, masked_fill, getitem (ints, slices with step 1,
    None, ...), and indexing of split/chunk results.
Several are compositions of memgrad ops (no C op of their own):
relu6(x) = relu(x) - relu(x - 6);
hardsigmoid(x) = relu6(x + 3) / 6; hardswish(x) = x * hardsigmoid(x);
exact gelu(x) = x/2 (1 + erf(x / sqrt 2)); stochastic depth = x times a
dropout of ones of shape [N, 1, ...]; masked_fill with a causal mask is
mg_causal_mask, with another constant mask and a finite value
x * (1 - m) + value * m. Values computed from constants only (a causal
mask buffer sliced to the sequence length, sizes) are computed once by
torch when the plan is made and bound as inputs.
"""
import collections
import dis
import io
import inspect
import math
import numbers
import operator
import warnings

import torch
import torch.fx
import torch.nn.functional as F
from torch.fx.node import map_aggregate, map_arg

from .. import Graph, MemgradError, Tensor, onnx_import, size_class
from ._devices import PerDevice
from ._pooling import adaptive_avg_pool2d

__all__ = ["Module", "check", "CheckReport", "UnsupportedModelError",
           "SUPPORTED"]


class UnsupportedModelError(NotImplementedError):
    """A model memgrad.torch cannot capture; `report` is the CheckReport
    listing every unsupported layer and function."""

    def __init__(self, report):
        super().__init__(str(report))
        self.report = report


class _Unsupported(Exception):
    """Raised by a mapping for a node it cannot map: the reason."""


# ---------------------------------------------------------------- tables
# module type -> handler(cx, m, path, *args, **kwargs)
_MODULES = {}
# function -> handler(cx, *args, **kwargs)
_FUNCTIONS = {}
# "module.qualname" of functions from optional packages (torchvision)
_FUNCTIONS_BY_NAME = {}
# Tensor method name -> handler(cx, self, *args, **kwargs)
_METHODS = {}


def _module(*types):
    def reg(h):
        for t in types:
            _MODULES[t] = h
        return h
    return reg


def _function(*fns, names=()):
    def reg(h):
        for f in fns:
            _FUNCTIONS[f] = h
        for n in names:
            _FUNCTIONS_BY_NAME[n] = h
        return h
    return reg


def _method(*names):
    def reg(h):
        for n in names:
            _METHODS[n] = h
        return h
    return reg


def _fn_name(f):
    """A readable name of a traced function: torch.cat, not <built-in
    method cat of type object at 0x...>."""
    name = getattr(f, "__name__", None)
    if name is not None:
        for mod, prefix in ((torch, "torch"), (F, "torch.nn.functional"),
                            (operator, "operator"),
                            (torch.Tensor, "torch.Tensor")):
            if getattr(mod, name, None) is f:
                return prefix + "." + name
        mod = getattr(f, "__module__", None)
        if mod:
            return mod + "." + getattr(f, "__qualname__", name)
        return name
    return repr(f)


def _class_name(cls):
    if getattr(torch.nn, cls.__name__, None) is cls:
        return "torch.nn." + cls.__name__
    return cls.__module__ + "." + cls.__qualname__


_DTYPE_NAMES = {torch.float32: "float32", torch.float64: "float64",
                torch.bfloat16: "bfloat16", torch.float16: "float16"}


def _dtype_of(module, example_inputs):
    """memgrad's name for the dtype the module computes in: its parameters'
    (all alike) and its inputs' must agree."""
    dts = {p.dtype for p in module.parameters()}
    dts |= {x.dtype for x in example_inputs if torch.is_tensor(x)}
    if len(dts) != 1 or next(iter(dts)) not in _DTYPE_NAMES:
        raise TypeError("memgrad.torch: parameters and inputs must all be "
                        "float32 or all float64 (or all bfloat16, or all "
                        "float16), not %s (convert the model "
                        "with .float() or .double() and the inputs alike)"
                        % sorted(str(d) for d in dts))
    return _DTYPE_NAMES[next(iter(dts))]


def _pair(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v)


def _is_mg(v):
    return isinstance(v, Tensor)


def _contains_mg(*vals):
    found = []
    map_aggregate(vals, lambda v: found.append(v) if _is_mg(v) else None)
    return bool(found)


class _Unknown:
    """The value of a node after an unmapped one that torch could not
    compute for the example (the check goes on past it)."""


_UNKNOWN = _Unknown()


def _contains_unknown(*vals):
    found = []
    map_aggregate(vals, lambda v: found.append(v) if v is _UNKNOWN else None)
    return bool(found)


def _axis(d, nd):
    d = int(d)
    if not -nd <= d < nd:
        raise _Unsupported("dimension %d out of range for %d dims" % (d, nd))
    return d % nd


# torch functions whose results must not be computed once and reused
_RANDOM = {torch.rand, torch.randn, torch.randint, torch.rand_like,
           torch.randn_like, torch.randint_like, torch.bernoulli,
           torch.normal, torch.multinomial, torch.randperm}


class _Tracer(torch.fx.Tracer):
    """symbolic tracing that stamps each node with the path of the module
    whose forward made it (node.meta["mg_path"]). Buffers read in traced
    code (a causal mask, say) become get_attr nodes, so that slicing one
    with a traced size works."""

    proxy_buffer_attributes = True

    def __init__(self):
        super().__init__()
        self._paths = []

    def call_module(self, m, forward, args, kwargs):
        self._paths.append(self.path_of_module(m))
        try:
            return super().call_module(m, forward, args, kwargs)
        finally:
            self._paths.pop()

    def create_node(self, *args, **kwargs):
        node = super().create_node(*args, **kwargs)
        node.meta["mg_path"] = self._paths[-1] if self._paths else ""
        return node


def _proxy_iter(self):
    """`a, b, c = proxy` (x.size(), x.shape, split's pieces): torch 1.13's
    Proxy.__iter__ looks for the UNPACK_SEQUENCE at f_lasti // 2, which
    Python 3.11's inline caches break (a wrong instruction, or an
    IndexError); this finds it by its offset. Installed while tracing."""
    frame = inspect.currentframe().f_back
    for inst in dis.get_instructions(frame.f_code):
        if inst.offset == frame.f_lasti:
            if inst.opname == "UNPACK_SEQUENCE":
                return (self[i] for i in range(inst.argval))
            break
    return self.tracer.iter(self)


# `h += y` on a Proxy: torch 1.13's Proxy has no __iadd__, so Python
# falls back to `h = h + y` and an alias of h (`h2 = h` before it) keeps
# the old value, where eager PyTorch's changes too. While tracing, these
# record operator.iadd and friends, which the capture functionalises.
_PROXY_INPLACE = {"__iadd__": operator.iadd, "__isub__": operator.isub,
                  "__imul__": operator.imul,
                  "__itruediv__": operator.itruediv}


def _proxy_inplace(op):
    def f(self, other):
        return self.tracer.create_proxy("call_function", op, (self, other),
                                        {})
    return f


def _trace_mapped_leaf(module):
    """A graph of one call of `module`, a layer memgrad maps as a whole
    (nn.TransformerEncoder, say, whose own forward does not trace): its
    positional inputs, the call, the output."""
    holder = torch.nn.Module()
    holder.add_module("m", module)
    graph = torch.fx.Graph()
    kinds = (inspect.Parameter.POSITIONAL_ONLY,
             inspect.Parameter.POSITIONAL_OR_KEYWORD)
    names = [p.name for p in
             inspect.signature(module.forward).parameters.values()
             if p.kind in kinds and p.default is inspect.Parameter.empty]
    args = tuple(graph.placeholder(n) for n in names)
    out = graph.call_module("m", args)
    graph.output(out)
    for n in graph.nodes:
        n.meta["mg_path"] = ""
    return torch.fx.GraphModule(holder, graph, type(module).__name__)


_SQUARE_MASK = torch.nn.Transformer.generate_square_subsequent_mask


def _square_mask(sz, *args, **kwargs):
    """nn.Transformer.generate_square_subsequent_mask(x.size(0)): with a
    traced size torch.full fails inside it; while tracing, a call with a
    traced argument is recorded as one node (computed from the size when
    the plan is made)."""
    if isinstance(sz, torch.fx.Proxy):
        return sz.tracer.create_proxy("call_function", _SQUARE_MASK,
                                      (sz,) + args, kwargs)
    return _SQUARE_MASK(sz, *args, **kwargs)


def _trace(module):
    if type(module) in _MODULES:
        return _trace_mapped_leaf(module)
    tracer = _Tracer()
    proxy_iter = torch.fx.proxy.Proxy.__iter__
    torch.fx.proxy.Proxy.__iter__ = _proxy_iter
    torch.nn.Transformer.generate_square_subsequent_mask = \
        staticmethod(_square_mask)
    had = {k: torch.fx.proxy.Proxy.__dict__[k] for k in _PROXY_INPLACE
           if k in torch.fx.proxy.Proxy.__dict__}
    for k, op in _PROXY_INPLACE.items():
        setattr(torch.fx.proxy.Proxy, k, _proxy_inplace(op))
    try:
        graph = tracer.trace(module)
    except Exception as e:  # noqa: BLE001 - any tracer failure
        msg = str(e).strip().splitlines()
        raise UnsupportedModelError(CheckReport(
            type(module).__name__, [], trace_error="%s: %s" % (
                type(e).__name__, msg[0] if msg else ""))) from None
    finally:
        torch.fx.proxy.Proxy.__iter__ = proxy_iter
        torch.nn.Transformer.generate_square_subsequent_mask = \
            staticmethod(_SQUARE_MASK)
        for k in _PROXY_INPLACE:
            if k in had:
                setattr(torch.fx.proxy.Proxy, k, had[k])
            else:
                delattr(torch.fx.proxy.Proxy, k)
    return torch.fx.GraphModule(tracer.root, graph, type(module).__name__)


class _Meta:
    """A tensor's shape, standing for its value in _real_values."""

    def __init__(self, t):
        self.shape = tuple(t.shape)


def _real_values(gm, example_inputs):
    """Every node's value when torch runs gm on the examples (tensors as
    _Meta shapes), leaving buffers and the RNG as they were."""
    vals = {}

    class Rec(torch.fx.Interpreter):
        def run_node(self, n):
            r = super().run_node(n)
            vals[n] = map_aggregate(
                r, lambda v: _Meta(v) if torch.is_tensor(v) else v)
            return r

    # buffers and parameters as they were afterwards (a forward may write
    # into its own, which memgrad refuses, but torch would do here)
    bufs = [(b, b.detach().clone())
            for b in list(gm.buffers()) + list(gm.parameters())]
    try:
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            # on copies: an in-place op in forward must not write into
            # the caller's example tensors
            Rec(gm).run(*[x.clone() if torch.is_tensor(x) else x
                          for x in example_inputs])
    except Exception:  # noqa: BLE001 - stand-ins are best effort
        pass
    finally:
        with torch.no_grad():
            for b, v in bufs:
                b.copy_(v)
    return vals


# functions with an `inplace` argument, and in-place functions
_INPLACE_ARG = {F.relu, F.relu6, F.hardtanh, F.leaky_relu, F.silu,
                F.hardswish, F.hardsigmoid, F.dropout, F.elu, F.selu,
                F.celu, F.rrelu, F.threshold, F.mish}
_INPLACE_FNS = {operator.iadd, operator.isub, operator.imul,
                operator.itruediv}
for _name in ("relu_", "hardtanh_", "leaky_relu_", "elu_", "celu_",
              "selu_", "rrelu_", "threshold_"):
    if hasattr(F, _name):
        _INPLACE_FNS.add(getattr(F, _name))
for _name in ("relu_", "sigmoid_", "tanh_", "exp_", "log_", "sqrt_",
              "rsqrt_", "neg_", "erf_", "selu_", "celu_", "rrelu_"):
    if hasattr(torch, _name):
        _INPLACE_FNS.add(getattr(torch, _name))


def _inplace_flag(fn, args, kwargs):
    if "inplace" in kwargs:
        return bool(kwargs["inplace"])
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return False
    return bool(bound.arguments.get("inplace", False))


def _inplace_target(node, modules):
    """The fx node an in-place op node writes into, or None."""
    first = node.args[0] if node.args else None
    if not isinstance(first, torch.fx.Node):
        return None
    if node.op == "call_function":
        if node.target in _INPLACE_FNS:
            return first
        if node.target in _INPLACE_ARG and \
                _inplace_flag(node.target, node.args, node.kwargs):
            return first
    elif node.op == "call_method":
        t = node.target
        if t.endswith("_") and not t.startswith("_"):
            return first
    elif node.op == "call_module":
        if getattr(modules.get(node.target), "inplace", False) is True:
            return first
    return None


# ops whose result may share memory with their first argument
_VIEW_METHODS = {"view", "view_as", "reshape", "reshape_as", "flatten",
                 "unflatten", "transpose", "permute", "t", "expand",
                 "expand_as", "unsqueeze", "squeeze", "contiguous", "split",
                 "chunk", "narrow", "select", "unbind", "detach",
                 "as_strided", "movedim", "swapaxes", "diagonal", "to",
                 "type_as", "float", "double"}
_VIEW_FUNCTIONS = {torch.reshape, torch.flatten, torch.transpose,
                   torch.permute, torch.unsqueeze, torch.squeeze,
                   torch.split, torch.chunk, torch.narrow, torch.select,
                   torch.unbind, torch.detach, torch.t, torch.movedim,
                   operator.getitem}


def _is_view_node(node, modules, training):
    if node.op == "call_method":
        return node.target in _VIEW_METHODS
    if node.op == "call_function":
        if node.target is getattr:  # x.T, not x.shape
            return len(node.args) > 1 and node.args[1] in ("T", "mT", "H")
        return node.target in _VIEW_FUNCTIONS
    if node.op == "call_module":
        m = modules.get(node.target)
        if isinstance(m, (torch.nn.Identity, torch.nn.Flatten,
                          torch.nn.Unflatten)):
            return True
        if isinstance(m, torch.nn.modules.dropout._DropoutNd):
            return not training or m.p == 0
    return False


class CheckReport:
    """What memgrad.torch.check found: `ok`, and `unsupported`, a list of
    (what, count, paths, reason) with what such as "torch.nn.Hardswish
    (module)" or "torch.cat (function)"."""

    def __init__(self, model_name, unsupported, trace_error=None,
                 fallback_error=None):
        self.model_name = model_name
        self.unsupported = unsupported
        self.trace_error = trace_error
        # why the capture through torch.onnx.export failed too
        self.fallback_error = fallback_error

    @property
    def ok(self):
        return not self.unsupported and self.trace_error is None

    def __bool__(self):
        return self.ok

    def __str__(self):
        if self.trace_error is not None:
            return ("memgrad.torch cannot capture %s: torch.fx could not "
                    "trace it (%s). memgrad.torch captures a model by "
                    "symbolic tracing, so its forward must not branch on "
                    "tensor values or iterate over tensors. What to do: "
                    "make that part of forward trace (torch.fx.wrap a "
                    "helper, or move data-dependent code out of forward), "
                    "or run only the traceable submodules through "
                    "memgrad.torch.Module.%s" % (
                        self.model_name, self.trace_error,
                        "" if self.fallback_error is None else
                        " Capturing it through torch.onnx.export and "
                        "memgrad's ONNX importer instead failed too: %s"
                        % self.fallback_error))
        if self.ok:
            return "memgrad.torch can capture %s" % self.model_name
        n = sum(e[1] for e in self.unsupported)
        lines = ["memgrad.torch cannot capture %s: %d kind%s of layer or "
                 "function with no memgrad mapping (%d node%s):"
                 % (self.model_name, len(self.unsupported),
                    "" if len(self.unsupported) == 1 else "s", n,
                    "" if n == 1 else "s")]
        for what, count, paths, reason in self.unsupported:
            shown = ", ".join(paths[:4])
            if len(paths) > 4:
                shown += ", ... (%d more)" % (len(paths) - 4)
            lines.append("  %s x%d%s at %s" % (
                what, count, ": " + reason if reason else "", shown))
        lines.append(
            "What to do: replace these with layers memgrad maps "
            "(memgrad.torch.SUPPORTED lists them), or run only the "
            "submodules without them through memgrad.torch.Module and keep "
            "the rest in plain PyTorch. memgrad.torch.check(model, "
            "example_inputs) gives this list without raising.")
        return "\n".join(lines)

    __repr__ = __str__


# PyTorch 2.9 and later default to the torch.export-based ONNX exporter;
# this path (PyTorch 1.13's way in) is held to the TorchScript one it was
# written for, which writes the op types the importer's table names
_LEGACY_EXPORTER = ({"dynamo": False} if "dynamo" in inspect.signature(
    torch.onnx.export).parameters else {})


def _onnx_export(module, example_inputs, training):
    """The module's ONNX bytes (torch.onnx.export, opset 17, parameters
    under their own names), its buffers and torch's RNG left as they were
    (the export runs forward once), torch's tracer warnings kept from the
    user, who gets memgrad's one warning instead."""
    bufs = [(b, b.detach().clone()) for b in module.buffers()]
    f = io.BytesIO()
    mode = (torch.onnx.TrainingMode.TRAINING if training
            else torch.onnx.TrainingMode.EVAL)
    try:
        with warnings.catch_warnings(), torch.random.fork_rng(devices=[]):
            warnings.simplefilter("ignore")
            torch.onnx.export(
                module, tuple(example_inputs), f, training=mode,
                do_constant_folding=False, opset_version=17,
                input_names=["input%d" % i
                             for i in range(len(example_inputs))],
                output_names=["output"], **_LEGACY_EXPORTER)
    except Exception as e:  # noqa: BLE001 - any exporter failure
        msg = str(e).strip().splitlines()
        raise RuntimeError("torch.onnx.export failed: %s" % (
            msg[0] if msg else type(e).__name__)) from None
    finally:
        with torch.no_grad():
            for b, v in bufs:
                b.copy_(v)
    return f.getvalue()


class _Captured(PerDevice):
    """The memgrad graph and plan of one traced module, for one input
    signature and one mode."""

    grads_in_place = True  # Module(grads_in_place=...)

    def __init__(self, module, example_inputs, policy, training=True,
                 budget_bytes=0, collect=False, gm=None, compact=False,
                 input_grads=None, store16=False):
        # trace in the plan's mode; each submodule's own flag is restored
        was = [(m, m.training) for m in module.modules()]
        module.train(training)
        self._compact = compact  # mg_checkpoints.compact, read by _plan
        self._store16 = store16  # mg_checkpoints.store16, the same
        # which inputs get a gradient (None: all); read by _plan
        self._input_grads = input_grads
        try:
            self._build(module, example_inputs, policy, training,
                        budget_bytes, collect, gm)
        finally:
            for m, flag in was:
                m.training = flag

    def _build(self, module, example_inputs, policy, training, budget_bytes,
               collect, gm):
        self.captured_by = "torch.fx"
        if gm is None:
            try:
                gm = _trace(module)
            except UnsupportedModelError as e:
                if e.report.trace_error is None:
                    raise
                self._build_from_onnx(module, example_inputs, policy,
                                      training, budget_bytes, collect,
                                      e.report)
                return
        self.training = training
        self.module_name = type(module).__name__
        dt = self.dtype = _dtype_of(module, example_inputs)
        g = self.graph = Graph()
        env = {}
        self.inputs, self.input_names = [], []
        self.params, self.param_tensors = [], []
        # constants read as inputs (eval-mode running statistics, masks):
        # (tensor, the torch tensor); batch statistics computed for the
        # running ones: (module, mean tensor, var tensor, elements per
        # channel)
        self.buffers, self.stats = [], []
        self.n_random = 0  # dropout ops
        self._seen = {}
        self._real = None
        self._gm, self._examples = gm, example_inputs
        bad = collections.OrderedDict()  # (what, reason) -> paths
        modules = dict(gm.named_modules())
        # in-place ops: node -> its order; written node -> alias group
        self._order = {n: i for i, n in enumerate(gm.graph.nodes)}
        self._alias_root, self._alias_group = {}, {}
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        if len(placeholders) != len(example_inputs):
            raise TypeError(
                "memgrad.torch: %s.forward takes %d input(s) (%s), but %d "
                "example input(s) were given; give one example tensor per "
                "input" % (type(module).__name__, len(placeholders),
                           ", ".join(n.name for n in placeholders),
                           len(example_inputs)))
        self.y = None
        for node in gm.graph.nodes:
            if node.op == "placeholder":
                ex = example_inputs[len(self.inputs)]
                t = g.input(node.name, dt, tuple(ex.shape))
                self.inputs.append(t)
                self.input_names.append(node.name)
                env[node] = t
                continue
            args = map_arg(node.args, lambda n: env[n])
            kwargs = map_arg(node.kwargs, lambda n: env[n])
            if node.op == "output":
                y = args[0]
                if _contains_unknown(y):
                    continue  # what made it is listed already
                if not _is_mg(y):
                    what = ("a %s of %d values" % (type(y).__name__, len(y))
                            if isinstance(y, (tuple, list, dict))
                            else "a %s" % type(y).__name__)
                    bad.setdefault(("output (%s)" % what,
                                    "memgrad.torch.Module needs a forward "
                                    "that returns one tensor; wrap the "
                                    "model so it returns one (the loss, "
                                    "say, or torch.cat of the outputs)"),
                                   []).append("the output")
                else:
                    self.y = y
                continue
            if _contains_unknown(args, kwargs):
                # after an unmapped node whose value torch could not give:
                # list this node only if it is a module with no mapping
                if node.op == "call_module" and \
                        not self._has_mapping(node, modules):
                    what, path = self._describe(node, modules)
                    bad.setdefault((what, ""), []).append(path)
                env[node] = self._stand_in(node)
                continue
            try:
                env[node] = self._map(node, args, kwargs, modules)
                self._functionalise(node, env, modules)
            except (_Unsupported, MemgradError, TypeError, ValueError,
                    IndexError, KeyError) as e:
                # TypeError and the like: arguments the mapping does not
                # take (a keyword it lacks, say)
                what, path = self._describe(node, modules)
                if isinstance(e, _Unsupported):
                    reason = str(e) if e.args[0] is not None else ""
                elif isinstance(e, MemgradError):
                    reason = "memgrad: " + str(e)
                else:
                    reason = "%s: %s" % (type(e).__name__, e)
                bad.setdefault((what, reason), []).append(path)
                env[node] = self._stand_in(node)
        if bad:
            rows = [(what, len(paths), paths, reason)
                    for (what, reason), paths in bad.items()]
            report = CheckReport(type(module).__name__, rows)
            if collect:
                self.report = report
                return
            raise UnsupportedModelError(report)
        self.report = CheckReport(type(module).__name__, [])
        if collect:
            return
        self._plan(module, policy, budget_bytes)

    def _plan(self, module, policy, budget_bytes):
        """The gradients of self.y and the plan, whichever way the graph
        was captured."""
        g, dt = self.graph, self.dtype
        self.seed = g.input("grad_output", dt, self.y.shape)
        # An input that does not require grad (a batch of images) gets no
        # gradient, as in PyTorch: its gradient was the stem convolution's
        # input gradient, computed and dropped every step (vgg11_bn: one
        # 224x224 backward-data convolution of 24 a step).
        need = list(self._input_grads or [True] * len(self.inputs))
        if not any(need) and not self.param_tensors:
            need = [True] * len(self.inputs)  # something to differentiate
        xs = [t for t, n in zip(self.inputs, need) if n] + self.param_tensors
        try:
            gs = iter(g.gradients([self.y], xs, policy=policy,
                                  grad_ys=[self.seed],
                                  budget_bytes=budget_bytes or 0,
                                  compact=self._compact,
                                  store16=self._store16))
            self.grads = [next(gs) if n else None for n in need] + list(gs)
        except MemgradError as e:
            raise MemgradError(e.status, "memgrad.torch: planning %s under "
                               "policy %r failed: %s" % (
                                   type(module).__name__, policy, e)) from None
        stat_ts = [t for _, mean, var, _ in self.stats for t in (mean, var)]
        self.plan_outputs = [self.y] + stat_ts + \
            [t for t in self.grads if t is not None]
        self.budget_bytes = budget_bytes or 0
        # one plan and one executor per device the module has run on (a
        # CUDA plan lends cuBLAS a workspace a CPU plan does not); the
        # plan for the parameters' device now, so that errors show here
        self.plans, self.executors = {}, {}
        self.plan_for(self._home_device())
        self._real = self._gm = self._examples = None

    def _build_from_onnx(self, module, example_inputs, policy, training,
                         budget_bytes, collect, report):
        """Where torch.fx cannot trace the module: capture it by
        torch.onnx.export (which runs forward on the examples, so Python
        control flow goes the way the examples take it) and memgrad's ONNX
        importer, which maps ONNX nodes to the same C ops. Parameters are
        matched to the module's by name; BatchNorm's running statistics are
        not updated on this path. If it fails too, the error names both."""
        self.captured_by = "torch.onnx.export"
        self.training = training
        self.module_name = type(module).__name__
        self.stats, self.buffers = [], []
        self.n_random = 0
        self._real = self._gm = self._examples = None
        try:
            self.dtype = _dtype_of(module, example_inputs)
            if self.dtype != "float32":
                raise _Unsupported(
                    "memgrad's ONNX importer computes in float32, and the "
                    "model is %s" % self.dtype)
            om = onnx_import(_onnx_export(module, example_inputs, training),
                             training=training)
            self._match_onnx(module, om, example_inputs)
        except (_Unsupported, MemgradError, ImportError, RuntimeError,
                TypeError, ValueError) as e:
            report.fallback_error = "%s: %s" % (type(e).__name__, e)
            raise UnsupportedModelError(report) from None
        self.report = CheckReport(self.module_name, [])
        if collect:
            return
        warnings.warn(
            "memgrad.torch: torch.fx could not trace %s (%s); captured it "
            "through torch.onnx.export instead, so Python control flow in "
            "its forward is fixed the way the example inputs took it (a "
            "new input shape captures it again), and BatchNorm running "
            "statistics are not updated" % (self.module_name,
                                            report.trace_error),
            stacklevel=4)
        self._plan(module, policy, budget_bytes)

    def _match_onnx(self, module, om, example_inputs):
        """Inputs, output, and the module's parameters by name, from an
        imported OnnxModel; every other initializer or constant it reads
        is bound as a buffer."""
        self.onnx_model = om
        self.graph = om.graph
        if len(om.inputs) != len(example_inputs):
            raise TypeError("the exported model takes %d input(s), and %d "
                            "example input(s) were given"
                            % (len(om.inputs), len(example_inputs)))
        if len(om.outputs) != 1:
            raise _Unsupported(
                "memgrad.torch.Module needs a forward that returns one "
                "tensor, and this one returns %d; wrap the model so it "
                "returns one (the loss, say)" % len(om.outputs))
        self.inputs = list(om.inputs)
        self.input_names = [t.name for t in om.inputs]
        self.y = om.outputs[0]
        named = dict(module.named_parameters())
        is_param = {t.id for t in om.params}
        self.params, self.param_tensors = [], []
        strays = []
        for t, arr in om.constants():
            p = named.get(t.name) if t.id in is_param else None
            if p is not None:
                self.params.append(p)
                self.param_tensors.append(t)
                continue
            if t.id in is_param and t.name not in dict(
                    module.named_buffers()):
                strays.append(t.name)
            self.buffers.append((t, torch.from_numpy(arr)))
        matched = {id(q) for q in self.params}
        missing = [n for n, p in named.items()
                   if p.requires_grad and id(p) not in matched]
        if strays and missing:
            raise _Unsupported(
                "the exported model's weights %s match none of the "
                "module's parameters (%s lack one): their gradients would "
                "be lost" % (strays[:4], missing[:4]))
        self.n_random = len(self.graph.tensors(op="dropout"))

    # ------------------------------------------------------------ mapping
    def _describe(self, node, modules):
        """(what, path) naming a node for the unsupported list."""
        if node.op == "call_module":
            return ("%s (module)" % _class_name(type(modules[node.target])),
                    node.target)
        where = node.meta.get("mg_path") or "forward"
        if node.op == "call_function":
            what = "%s (function)" % _fn_name(node.target)
        elif node.op == "call_method":
            what = "torch.Tensor.%s (method)" % node.target
        else:
            what = "%s %s" % (node.op, node.target)
        return what, "%s (%s)" % (where, node.name)

    def _has_mapping(self, node, modules):
        if node.op == "call_module":
            return type(modules[node.target]) in _MODULES
        if node.op == "call_function":
            return node.target in _FUNCTIONS or "%s.%s" % (
                getattr(node.target, "__module__", ""),
                getattr(node.target, "__name__", "")) in _FUNCTIONS_BY_NAME
        if node.op == "call_method":
            return node.target in _METHODS
        return True

    def _stand_in(self, node):
        """An input of the shape torch computes for an unmapped node, so
        the capture goes on and finds every unmapped node at once."""
        if self._real is None:
            self._real = _real_values(self._gm, self._examples)
        if node not in self._real:
            return _UNKNOWN
        v = self._real[node]
        return map_aggregate(v, lambda r: self.graph.input(
            "unmapped:" + node.name, self.dtype, r.shape)
            if isinstance(r, _Meta) else r)

    def _map(self, node, args, kwargs, modules):
        if node.op == "get_attr":
            obj = self._gm
            for part in node.target.split("."):
                obj = getattr(obj, part)
            if isinstance(obj, torch.nn.Parameter):
                return self.param(node.target, obj)
            return obj.detach() if torch.is_tensor(obj) else obj
        if node.op == "call_module":
            m = modules[node.target]
            h = _MODULES.get(type(m))
            if h is None:
                raise _Unsupported(None)
            return h(self, m, node.target, *args, **kwargs)
        if node.op == "call_function":
            if not _contains_mg(args, kwargs) and node.target not in _RANDOM:
                # sizes, a mask buffer sliced to the sequence length
                return self._fold(node.target, args, kwargs)
            h = _FUNCTIONS.get(node.target)
            if h is None:
                h = _FUNCTIONS_BY_NAME.get("%s.%s" % (
                    getattr(node.target, "__module__", ""),
                    getattr(node.target, "__name__", "")))
            if h is None:
                raise _Unsupported(None)
            return h(self, *args, **kwargs)
        if node.op == "call_method":
            if not _contains_mg(args, kwargs):
                return self._fold(lambda s, *a, **k: getattr(
                    s, node.target)(*a, **k), args, kwargs)
            h = _METHODS.get(node.target)
            if h is None or not _is_mg(args[0]):
                raise _Unsupported(None)
            return h(self, *args, **kwargs)
        raise _Unsupported("node kind %s" % node.op)

    def _functionalise(self, node, env, modules):
        """Eager PyTorch's values for an in-place op (h += y, x.mul_(2),
        F.relu(h, inplace=True), nn.ReLU(inplace=True)): memgrad computes
        it out of place, and every later reader of the tensor it wrote
        (and of the aliases made by earlier in-place ops on it) reads the
        new value. Refused, with the reason, where that is not eager's
        value: a write into a forward input or a parameter or buffer
        (memgrad never writes the caller's memory), or into a tensor with
        a view (view, reshape, slicing, split, ...) read after the
        write."""
        tgt = _inplace_target(node, modules)
        if tgt is None or not _is_mg(env[node]):
            return
        root = self._alias_root.get(tgt, tgt)
        group = self._alias_group.setdefault(root, [root])
        if tgt not in group:
            group.append(tgt)
        group.append(node)
        self._alias_root[node] = root
        # everything that shares memory with the group: views of it and
        # what it is a view of, transitively
        at = self._order[node]
        seen, todo = set(group), list(group)
        while todo:
            n = todo.pop()
            # views of n taken before this write (views taken after it
            # read the new value; later in-place ops on n join the group
            # when they are reached)
            near = [u for u in n.users if u.args and u.args[0] is n and
                    self._order[u] < at and
                    _is_view_node(u, modules, self.training)]
            if (_is_view_node(n, modules, self.training) or
                    _inplace_target(n, modules) is not None) and \
                    isinstance(n.args[0], torch.fx.Node):
                near.append(n.args[0])
            for m in near:
                if m not in seen:
                    seen.add(m)
                    todo.append(m)
        for a in seen:
            if a.op == "placeholder":
                raise _Unsupported(
                    "an in-place write into the forward input %r (memgrad "
                    "never writes into the caller's tensors; write "
                    "x = x + ... instead)" % a.name)
            if a.op == "get_attr":
                raise _Unsupported(
                    "an in-place write into the parameter or buffer %r "
                    "(write an out-of-place op instead)" % a.target)
        for a in seen:
            if a in group:
                continue
            if any(self._order[u] > at for u in a.users):
                raise _Unsupported(
                    "an in-place write into a tensor that shares its memory "
                    "with %r (a view taken before the write, or the tensor "
                    "it is a view of), which is read after it (memgrad "
                    "computes in-place ops out of place; write an "
                    "out-of-place op, or take the view after the write)"
                    % a.name)
        for m in group:
            env[m] = env[node]

    def _fold(self, f, args, kwargs):
        """A value of constants alone (sizes, a mask buffer sliced to the
        sequence length): computed by torch now."""
        try:
            with torch.no_grad():
                return f(*args, **kwargs)
        except Exception as e:  # noqa: BLE001
            raise _Unsupported("computing it from constants failed: %s: %s"
                               % (type(e).__name__, e)) from None

    # ------------------------------------------------------------ helpers
    def param(self, qualname, p):
        if id(p) not in self._seen:
            self._seen[id(p)] = self.graph.param(qualname, self.dtype,
                                                 tuple(p.shape))
            self.params.append(p)
            self.param_tensors.append(self._seen[id(p)])
        return self._seen[id(p)]

    def const(self, value, name="const"):
        """A torch tensor constant, bound as an input on every call."""
        if not value.is_floating_point():
            value = value.to(torch.float64)
        t = self.graph.input("%s.%d" % (name, len(self.buffers)),
                             self.dtype, tuple(value.shape))
        self.buffers.append((t, value))
        return t

    def tensor(self, v):
        """v as a memgrad tensor: itself, a torch constant, or a number."""
        if _is_mg(v):
            return v
        if torch.is_tensor(v):
            return self.const(v)
        if isinstance(v, numbers.Number) and not isinstance(v, bool):
            return self.graph.fill(self.dtype, (), float(v))
        raise _Unsupported("an operand of type %s" % type(v).__name__)

    def dropout(self, x, p):
        """Inverted dropout with memgrad's counter RNG (replayed in
        recomputation)."""
        p = float(p)
        if p == 0.0:
            return x
        if p >= 1.0:
            return self.graph.scale(x, 0.0)
        self.n_random += 1
        return self.graph.dropout(x, p, seed=self.n_random)

    # ------------------------------------------------------------ running
    def _home_device(self):
        return self.params[0].device if self.params else "cpu"

    @property
    def executor(self):
        return self.executor_for(self._home_device())

    @property
    def plan(self):
        """The plan for the parameters' device."""
        return self.plan_for(self._home_device())

    def batchnorm(self, name, m, x):
        """BatchNorm2d m on x: batch statistics in training mode (and, if it
        tracks running ones, the batch mean and biased variance as extra
        outputs), else the affine map of its running statistics."""
        g = self.graph
        gamma = self.param(name + ".weight", m.weight)
        beta = self.param(name + ".bias", m.bias)
        c = m.num_features
        if self.training or not m.track_running_stats:
            t = g.batchnorm(x, gamma, beta, m.eps)
            if m.track_running_stats and self.training:
                mean = g.mean(x, (0, 2, 3), keepdims=True)
                d = g.sub(x, mean)
                var = g.mean(g.mul(d, d), (0, 2, 3), keepdims=True)
                n, _, h, w = x.shape
                self.stats.append((m, mean, var, n * h * w))
            return t
        dt = self.dtype
        rm = g.input(name + ".running_mean", dt, (1, c, 1, 1))
        rv = g.input(name + ".running_var", dt, (1, c, 1, 1))
        self.buffers += [(rm, m.running_mean), (rv, m.running_var)]
        # (x - mean) / sqrt(var + eps) * gamma + beta, as PyTorch's eval
        eps = g.input(name + ".eps", dt, (1,))
        self.buffers.append((eps, torch.full((1,), m.eps,
                                             dtype=m.running_var.dtype)))
        scale = g.div(g.reshape(gamma, (1, c, 1, 1)),
                      g.sqrt(g.add(rv, eps)))
        return g.add(g.mul(g.sub(x, rm), scale),
                     g.reshape(beta, (1, c, 1, 1)))

    def device_of(self, tensors):
        """The one device of a call's inputs and parameters."""
        devs = {a.device for a in tensors if torch.is_tensor(a)}
        if len(devs) != 1:
            raise RuntimeError(
                "memgrad.torch: inputs and parameters must be on one "
                "device, not %s" % sorted(str(d) for d in devs))
        return next(iter(devs))

    def feeds(self, tensors, device):
        """The bindings of one call: inputs and parameters, then buffers
        (on the call's device)."""
        f = {t: a.detach().contiguous()
             for t, a in zip(self.inputs + self.param_tensors, tensors)}
        tdt = self.params[0].dtype if self.params else tensors[0].dtype
        for t, buf in self.buffers:
            bdt = tdt if buf.is_floating_point() else buf.dtype
            f[t] = buf.detach().to(device=device, dtype=bdt).reshape(
                t.shape).contiguous()
        return f

    def describe_feed(self, t):
        """How a user names the torch tensor bound to memgrad tensor t."""
        for i, x in enumerate(self.inputs):
            if x is t:
                return "input %d (%r)" % (i, self.input_names[i])
        for p, x in zip(self.params, self.param_tensors):
            if x is t:
                return "parameter %r" % t.name
        return "buffer %r" % t.name

    def update_running_stats(self, outs):
        """PyTorch's running-statistics update from this call's batch."""
        with torch.no_grad():
            for m, mean, var, n in self.stats:
                m.num_batches_tracked += 1
                mom = m.momentum
                if mom is None:  # cumulative moving average
                    mom = 1.0 / float(m.num_batches_tracked)
                bm = outs[mean].reshape(-1)
                bv = outs[var].reshape(-1) * (n / max(n - 1, 1))
                m.running_mean.mul_(1 - mom).add_(bm, alpha=mom)
                m.running_var.mul_(1 - mom).add_(bv, alpha=mom)


# ------------------------------------------------------------ module maps
def _linear(cx, x, w, b):
    g = cx.graph
    if len(x.shape) < 2:
        raise _Unsupported("a Linear input of %d dims" % len(x.shape))
    t = g.matmul(x, w, trans_b=True)
    return g.add(t, b) if b is not None else t


@_module(torch.nn.Linear)
def _m_linear(cx, m, path, x):
    return _linear(cx, x, cx.param(path + ".weight", m.weight),
                   cx.param(path + ".bias", m.bias)
                   if m.bias is not None else None)


@_function(F.linear)
def _f_linear(cx, input, weight, bias=None):
    return _linear(cx, input, cx.tensor(weight),
                   cx.tensor(bias) if bias is not None else None)


def _conv2d(cx, x, w, b, stride, padding, dilation, groups):
    g = cx.graph
    stride, dilation = _pair(stride), _pair(dilation)
    if isinstance(padding, str):
        if padding == "valid":
            padding = (0, 0)
        elif padding == "same":
            # PyTorch's 'same': total dilation*(k-1) per axis, the odd one
            # more at the end; an uneven split is an mg_pad first
            kh, kw = w.shape[2:]
            tot = (dilation[0] * (kh - 1), dilation[1] * (kw - 1))
            lo = (tot[0] // 2, tot[1] // 2)
            hi = (tot[0] - lo[0], tot[1] - lo[1])
            if lo != hi:
                x = g.pad(x, (0, 0, lo[0], lo[1]), (0, 0, hi[0], hi[1]))
                padding = (0, 0)
            else:
                padding = lo
        else:
            raise _Unsupported("padding=%r" % padding)
    t = g.conv2d(x, w, stride, _pair(padding), dilation, groups)
    if b is not None:
        t = g.add(t, g.reshape(b, (b.shape[0], 1, 1)))
    return t


@_module(torch.nn.Conv2d)
def _m_conv2d(cx, m, path, x):
    if m.padding_mode != "zeros":
        raise _Unsupported("padding_mode=%r (memgrad pads with zeros)"
                           % m.padding_mode)
    return _conv2d(cx, x, cx.param(path + ".weight", m.weight),
                   cx.param(path + ".bias", m.bias)
                   if m.bias is not None else None,
                   m.stride, m.padding, m.dilation, m.groups)


@_function(F.conv2d, torch.conv2d)
def _f_conv2d(cx, input, weight, bias=None, stride=1, padding=0, dilation=1,
              groups=1):
    return _conv2d(cx, input, cx.tensor(weight),
                   cx.tensor(bias) if bias is not None else None,
                   stride, padding, dilation, groups)


@_module(torch.nn.BatchNorm2d)
def _m_batchnorm(cx, m, path, x):
    if not m.affine:
        raise _Unsupported("affine=False")
    return cx.batchnorm(path, m, x)


def _layernorm(cx, x, shape, w, b, eps):
    shape = tuple(shape) if isinstance(shape, (tuple, list, torch.Size)) \
        else (int(shape),)
    if tuple(x.shape[-len(shape):]) != shape:
        raise _Unsupported("normalized_shape %s against input %s"
                           % (shape, x.shape))
    g = cx.graph
    w = cx.tensor(w) if w is not None else g.fill(cx.dtype, shape, 1.0)
    b = cx.tensor(b) if b is not None else g.fill(cx.dtype, shape, 0.0)
    return g.layernorm(x, w, b, len(shape), eps)


@_module(torch.nn.LayerNorm)
def _m_layernorm(cx, m, path, x):
    return _layernorm(
        cx, x, tuple(m.normalized_shape),
        cx.param(path + ".weight", m.weight) if m.elementwise_affine
        else None,
        cx.param(path + ".bias", m.bias) if m.elementwise_affine else None,
        m.eps)


@_function(F.layer_norm)
def _f_layernorm(cx, input, normalized_shape, weight=None, bias=None,
                 eps=1e-5):
    return _layernorm(cx, input, tuple(normalized_shape), weight, bias, eps)


# ------------------------------------------------------------ attention
def _causal_or_none(mask, lq, lk, what):
    """True for PyTorch's causal mask (bool True, or a float -inf, above the
    diagonal: nn.Transformer.generate_square_subsequent_mask), False for
    no mask; anything else is not mapped yet."""
    if mask is None:
        return False
    if _is_mg(mask):
        raise _Unsupported(
            "%s given as a forward input (memgrad needs a constant causal "
            "mask: build it inside forward, e.g. with "
            "nn.Transformer.generate_square_subsequent_mask)" % what)
    if not torch.is_tensor(mask) or tuple(mask.shape[-2:]) != (lq, lk):
        raise _Unsupported("%s of shape %s" % (
            what, tuple(getattr(mask, "shape", ()))))
    above = torch.ones(lq, lk, dtype=torch.bool,
                       device=mask.device).triu(1).expand(mask.shape)
    if mask.dtype == torch.bool:
        if torch.equal(mask, above):
            return True
        if not mask.any():
            return False
    else:
        m = mask.to(torch.float64)
        if bool((m[above] == -math.inf).all()) and \
                bool((m[~above] == 0).all()):
            return True
        if not bool(m.any()):
            return False
    raise _Unsupported("%s other than the causal one (memgrad maps causal "
                       "masks only)" % what)


def _mha(cx, m, path, query, key, value, key_padding_mask=None,
         need_weights=True, attn_mask=None, average_attn_weights=True,
         is_causal=False):
    """nn.MultiheadAttention: the in-projections, mg_attention per head
    (scaled by 1/sqrt(head_dim), causal where attn_mask is the causal
    mask), the out-projection; with dropout in training, the same as
    matmul, softmax, mg_dropout and matmul. Returns (output, the attention
    weights averaged over heads or None), as PyTorch does."""
    g = cx.graph
    if key_padding_mask is not None:
        raise _Unsupported("key_padding_mask")
    if m.bias_k is not None or m.add_zero_attn:
        raise _Unsupported("add_bias_kv or add_zero_attn")
    if not all(_is_mg(t) for t in (query, key, value)):
        raise _Unsupported("query, key and value must be tensors")
    bf = getattr(m, "batch_first", False)
    if len(query.shape) != 3:
        raise _Unsupported("unbatched (2-dim) inputs")
    if not bf:  # [L, N, E] -> [N, L, E]
        query, key, value = (g.transpose(t, 0, 1)
                             for t in (query, key, value))
    n, lq, e = query.shape
    lk = key.shape[1]
    h = m.num_heads
    hd = e // h
    causal = bool(is_causal) or _causal_or_none(attn_mask, lq, lk,
                                                "attn_mask")
    if m._qkv_same_embed_dim:
        w = cx.param(path + ".in_proj_weight", m.in_proj_weight)
        ws = [g.slice(w, 0, i * e, e) for i in range(3)]
    else:
        ws = [cx.param(path + "." + nm, getattr(m, nm))
              for nm in ("q_proj_weight", "k_proj_weight", "v_proj_weight")]
    if m.in_proj_bias is not None:
        b = cx.param(path + ".in_proj_bias", m.in_proj_bias)
        bs = [g.slice(b, 0, i * e, e) for i in range(3)]
    else:
        bs = [None] * 3

    def heads(x, w, b):  # [N, L, E] -> [N, H, L, hd]
        t = _linear(cx, x, w, b)
        t = g.reshape(t, (n, t.shape[1], h, hd))
        return g.permute(t, (0, 2, 1, 3))

    q, k, v = (heads(x, w, b) for x, w, b in zip((query, key, value), ws,
                                                   bs))
    p = m.dropout if cx.training else 0.0
    weights = None
    if p > 0 or need_weights:
        kt = g.transpose(k, 2, 3)
        s = g.scale(g.matmul(q, kt), 1.0 / math.sqrt(hd))
        if causal:
            s = g.causal_mask(s, -math.inf)
        a = g.softmax(s, 3)
        if p > 0:  # PyTorch returns the weights after dropout
            a = cx.dropout(a, p)
        if need_weights:
            weights = g.mean(a, (1,)) if average_attn_weights else a
        o = g.matmul(a, v) if p > 0 else None
    else:
        o = None
    if o is None:
        o = g.attention(q, k, v, causal=causal)
    o = g.reshape(g.permute(o, (0, 2, 1, 3)), (n, lq, e))
    o = _m_linear(cx, m.out_proj, path + ".out_proj", o)
    if not bf:
        o = g.transpose(o, 0, 1)
    return o, weights


_MODULES[torch.nn.MultiheadAttention] = _mha


def _activation(cx, act, path, x):
    """A Transformer layer's activation: a function (F.relu, F.gelu) or a
    module."""
    if isinstance(act, torch.nn.Module):
        h = _MODULES.get(type(act))
        if h is None:
            raise _Unsupported("activation %s" % _class_name(type(act)))
        return h(cx, act, path + ".activation", x)
    h = _FUNCTIONS.get(act)
    if h is None:
        raise _Unsupported("activation %s" % _fn_name(act))
    return h(cx, x)


def _drop(cx, m, x):
    return cx.dropout(x, m.p) if cx.training else x


def _ff_block(cx, m, path, x):
    x = _m_linear(cx, m.linear1, path + ".linear1", x)
    x = _drop(cx, m.dropout, _activation(cx, m.activation, path, x))
    return _m_linear(cx, m.linear2, path + ".linear2", x)


def _sa_block(cx, m, path, x, mask, attn, drop, mem=None):
    kv = x if mem is None else mem
    y, _ = _mha(cx, attn, path, x, kv, kv, attn_mask=mask,
                need_weights=False)
    return _drop(cx, drop, y)


def _ln(cx, m, path, x):
    return _m_layernorm(cx, m, path, x)


@_module(torch.nn.TransformerEncoderLayer)
def _m_encoder_layer(cx, m, path, src, src_mask=None,
                     src_key_padding_mask=None, is_causal=False):
    """nn.TransformerEncoderLayer's math (its eval fast path computes the
    same): self-attention and feed-forward blocks, each with a residual
    and a LayerNorm before (norm_first) or after."""
    if src_key_padding_mask is not None:
        raise _Unsupported("src_key_padding_mask")
    if is_causal and src_mask is None:
        n = src.shape[1] if getattr(m.self_attn, "batch_first", False) \
            else src.shape[0]
        src_mask = torch.ones(n, n, dtype=torch.bool).triu(1)
    g, x = cx.graph, src

    def sa(t):
        return _sa_block(cx, m, path + ".self_attn", t, src_mask,
                         m.self_attn, m.dropout1)

    def ff(t):
        return _drop(cx, m.dropout2, _ff_block(cx, m, path, t))

    if m.norm_first:
        x = g.add(x, sa(_ln(cx, m.norm1, path + ".norm1", x)))
        x = g.add(x, ff(_ln(cx, m.norm2, path + ".norm2", x)))
    else:
        x = _ln(cx, m.norm1, path + ".norm1", g.add(x, sa(x)))
        x = _ln(cx, m.norm2, path + ".norm2", g.add(x, ff(x)))
    return x


@_module(torch.nn.TransformerDecoderLayer)
def _m_decoder_layer(cx, m, path, tgt, memory, tgt_mask=None,
                     memory_mask=None, tgt_key_padding_mask=None,
                     memory_key_padding_mask=None, tgt_is_causal=False,
                     memory_is_causal=False):
    """nn.TransformerDecoderLayer: self-attention, cross-attention on
    memory and feed-forward blocks, residuals and LayerNorms."""
    if tgt_key_padding_mask is not None or \
            memory_key_padding_mask is not None:
        raise _Unsupported("key padding masks")
    if tgt_is_causal and tgt_mask is None:
        n = tgt.shape[1] if getattr(m.self_attn, "batch_first", False) \
            else tgt.shape[0]
        tgt_mask = torch.ones(n, n, dtype=torch.bool).triu(1)
    if memory_is_causal:
        raise _Unsupported("memory_is_causal")
    g, x = cx.graph, tgt

    def sa(t):
        return _sa_block(cx, m, path + ".self_attn", t, tgt_mask,
                         m.self_attn, m.dropout1)

    def ca(t):
        return _sa_block(cx, m, path + ".multihead_attn", t, memory_mask,
                         m.multihead_attn, m.dropout2, mem=memory)

    def ff(t):
        return _drop(cx, m.dropout3, _ff_block(cx, m, path, t))

    if m.norm_first:
        x = g.add(x, sa(_ln(cx, m.norm1, path + ".norm1", x)))
        x = g.add(x, ca(_ln(cx, m.norm2, path + ".norm2", x)))
        x = g.add(x, ff(_ln(cx, m.norm3, path + ".norm3", x)))
    else:
        x = _ln(cx, m.norm1, path + ".norm1", g.add(x, sa(x)))
        x = _ln(cx, m.norm2, path + ".norm2", g.add(x, ca(x)))
        x = _ln(cx, m.norm3, path + ".norm3", g.add(x, ff(x)))
    return x


def _stack(cx, m, path, kind, x, call):
    for i, layer in enumerate(m.layers):
        if type(layer) is not kind:
            raise _Unsupported("a layer of type %s in layers"
                               % _class_name(type(layer)))
        x = call(layer, "%s.layers.%d" % (path, i), x)
    if m.norm is not None:
        h = _MODULES.get(type(m.norm))
        if h is None:
            raise _Unsupported("norm %s" % _class_name(type(m.norm)))
        x = h(cx, m.norm, path + ".norm", x)
    return x


@_module(torch.nn.TransformerEncoder)
def _m_encoder(cx, m, path, src, mask=None, src_key_padding_mask=None,
               is_causal=None):
    return _stack(cx, m, path, torch.nn.TransformerEncoderLayer, src,
                  lambda layer, p, x: _m_encoder_layer(
                      cx, layer, p, x, mask, src_key_padding_mask,
                      bool(is_causal)))


@_module(torch.nn.TransformerDecoder)
def _m_decoder(cx, m, path, tgt, memory, tgt_mask=None, memory_mask=None,
               tgt_key_padding_mask=None, memory_key_padding_mask=None,
               tgt_is_causal=None, memory_is_causal=False):
    return _stack(cx, m, path, torch.nn.TransformerDecoderLayer, tgt,
                  lambda layer, p, x: _m_decoder_layer(
                      cx, layer, p, x, memory, tgt_mask, memory_mask,
                      tgt_key_padding_mask, memory_key_padding_mask,
                      bool(tgt_is_causal), memory_is_causal))


def _max_pool(cx, x, kernel, stride, padding, dilation, ceil_mode,
              return_indices):
    if _pair(dilation) != (1, 1) or return_indices:
        raise _Unsupported("dilation or return_indices")
    kernel = _pair(kernel)
    stride = _pair(stride) if stride not in (None, ()) else kernel
    return cx.graph.max_pool2d(x, kernel, stride, _pair(padding), ceil_mode)


@_module(torch.nn.MaxPool2d)
def _m_max_pool(cx, m, path, x):
    return _max_pool(cx, x, m.kernel_size, m.stride, m.padding, m.dilation,
                     m.ceil_mode, m.return_indices)


@_function(F.max_pool2d, torch.max_pool2d)
def _f_max_pool(cx, input, kernel_size, stride=None, padding=0, dilation=1,
                ceil_mode=False, return_indices=False):
    return _max_pool(cx, input, kernel_size, stride, padding, dilation,
                     ceil_mode, return_indices)


def _avg_pool(cx, x, kernel, stride, padding, ceil_mode, count_include_pad,
              divisor_override):
    if divisor_override is not None:
        raise _Unsupported("divisor_override")
    kernel = _pair(kernel)
    stride = _pair(stride) if stride not in (None, ()) else kernel
    return cx.graph.avg_pool2d(x, kernel, stride, _pair(padding), ceil_mode,
                               count_include_pad)


@_module(torch.nn.AvgPool2d)
def _m_avg_pool(cx, m, path, x):
    return _avg_pool(cx, x, m.kernel_size, m.stride, m.padding, m.ceil_mode,
                     m.count_include_pad, m.divisor_override)


@_function(F.avg_pool2d, torch._C._nn.avg_pool2d)
def _f_avg_pool(cx, input, kernel_size, stride=None, padding=0,
                ceil_mode=False, count_include_pad=True,
                divisor_override=None):
    return _avg_pool(cx, input, kernel_size, stride, padding, ceil_mode,
                     count_include_pad, divisor_override)


def _adaptive_avg_pool(cx, x, output_size):
    if len(x.shape) != 4:
        raise _Unsupported("input of %d dims (memgrad pools NCHW)"
                           % len(x.shape))
    oh, ow = _pair(output_size)
    oh = x.shape[2] if oh is None else int(oh)
    ow = x.shape[3] if ow is None else int(ow)
    return adaptive_avg_pool2d(cx.graph, x, oh, ow)


@_module(torch.nn.AdaptiveAvgPool2d)
def _m_adaptive_avg_pool(cx, m, path, x):
    return _adaptive_avg_pool(cx, x, m.output_size)


@_function(F.adaptive_avg_pool2d, torch._C._nn.adaptive_avg_pool2d)
def _f_adaptive_avg_pool(cx, input, output_size):
    return _adaptive_avg_pool(cx, input, output_size)


def _flatten_to(x, start, end):
    nd = len(x.shape)
    s, e = _axis(start, nd), _axis(end, nd)
    sh = x.shape
    return sh[:s] + (math.prod(sh[s:e + 1]),) + sh[e + 1:]


@_module(torch.nn.Flatten)
def _m_flatten(cx, m, path, x):
    return cx.graph.reshape(x, _flatten_to(x, m.start_dim, m.end_dim))


@_function(torch.flatten)
@_method("flatten")
def _f_flatten(cx, input, start_dim=0, end_dim=-1):
    return cx.graph.reshape(input, _flatten_to(input, start_dim, end_dim))


@_module(torch.nn.Identity)
def _m_identity(cx, m, path, x, *args, **kwargs):
    return x


@_module(torch.nn.Dropout)
def _m_dropout(cx, m, path, x):
    return cx.dropout(x, m.p) if m.training else x


@_function(F.dropout, torch.dropout)
def _f_dropout(cx, input, p=0.5, training=True, inplace=False):
    return cx.dropout(input, p) if training else input


@_function(names=("torchvision.ops.stochastic_depth.stochastic_depth",))
def _f_stochastic_depth(cx, input, p, mode, training=True):
    """torchvision's stochastic depth: x times a mask of shape [N, 1, ...]
    ('row') or [1, ...] ('batch') that is 0 with probability p and
    1/(1-p) elsewhere: mg_dropout of ones, then a broadcast mul."""
    if not training or p == 0.0:
        return input
    if mode not in ("row", "batch"):
        raise _Unsupported("mode=%r" % mode)
    nd = len(input.shape)
    shape = ((input.shape[0],) if mode == "row" else (1,)) + (1,) * (nd - 1)
    g = cx.graph
    return g.mul(input, cx.dropout(g.fill(cx.dtype, shape, 1.0), p))


# ------------------------------------------------------------ swin
# torchvision's Swin Transformer keeps its window attention in functions it
# wraps for torch.fx (leaves of the trace); these are their math.
_SWIN = "torchvision.models.swin_transformer."


@_function(names=(_SWIN + "_get_relative_position_bias",))
def _f_swin_position_bias(cx, table, index, window_size):
    """table[index] viewed [N, N, heads], permuted to [1, heads, N, N]:
    the gather as a constant one-hot matrix times the table (its gradient
    sums the gathered rows, as index's backward does)."""
    if _is_mg(index) or not torch.is_tensor(index):
        raise _Unsupported("an index computed from the inputs")
    g = cx.graph
    t = cx.tensor(table)
    n = int(window_size[0]) * int(window_size[1])
    idx = index.reshape(-1).to(torch.long)
    onehot = torch.zeros(idx.numel(), t.shape[0], dtype=torch.float64,
                         device=idx.device)
    onehot[torch.arange(idx.numel(), device=idx.device), idx] = 1.0
    b = g.matmul(cx.const(onehot, "position_onehot"), t)
    b = g.permute(g.reshape(b, (n, n, t.shape[1])), (2, 0, 1))
    return g.reshape(b, (1, t.shape[1], n, n))


def _every_other(g, x, axis, start):
    """x[..., start::2, ...] along axis (of even length)."""
    sh = x.shape
    y = g.reshape(x, sh[:axis] + (sh[axis] // 2, 2) + sh[axis + 1:])
    y = g.slice(y, axis + 1, start, 1)
    return g.reshape(y, sh[:axis] + (sh[axis] // 2,) + sh[axis + 1:])


@_function(names=(_SWIN + "_patch_merging_pad",))
def _f_swin_patch_merging_pad(cx, x):
    """Pad H and W to even, then cat of the four 2x2 phases on C."""
    g = cx.graph
    if len(x.shape) != 4:
        raise _Unsupported("an input of %d dims" % len(x.shape))
    _, h, w, _ = x.shape
    if h % 2 or w % 2:
        x = g.pad(x, (0, 0, 0, 0), (0, h % 2, w % 2, 0))
    parts = [_every_other(g, _every_other(g, x, 1, r), 2, c)
             for r, c in ((0, 0), (1, 0), (0, 1), (1, 1))]
    return g.concat(parts, 3)


def _roll(g, x, shift, axis):
    """torch.roll(x, shift, axis): two slices, concatenated."""
    n = x.shape[axis]
    shift %= n
    if shift == 0:
        return x
    return g.concat([g.slice(x, axis, n - shift, shift),
                     g.slice(x, axis, 0, n - shift)], axis)


@_function(names=(_SWIN + "shifted_window_attention",))
def _f_swin_window_attention(cx, input, qkv_weight, proj_weight,
                             relative_position_bias, window_size, num_heads,
                             shift_size, attention_dropout=0.0, dropout=0.0,
                             qkv_bias=None, proj_bias=None,
                             logit_scale=None, training=None):
    """torchvision's (shifted) window attention: pad to whole windows,
    roll, partition into windows, attention per head with the relative
    position bias (and, shifted, the mask between the rolled regions, a
    constant computed by torch as torchvision does), project, merge the
    windows, roll back, crop. Dropout follows the module's mode (torchvision
    calls F.dropout without `training`)."""
    if logit_scale is not None:
        raise _Unsupported("logit_scale (Swin V2's cosine attention)")
    g = cx.graph
    if len(input.shape) != 4:
        raise _Unsupported("an input of %d dims" % len(input.shape))
    b, h, w, c = input.shape
    ws = [int(window_size[0]), int(window_size[1])]
    pad_r = (ws[1] - w % ws[1]) % ws[1]
    pad_b = (ws[0] - h % ws[0]) % ws[0]
    x = input
    if pad_r or pad_b:
        x = g.pad(x, (0, 0, 0, 0), (0, pad_b, pad_r, 0))
    ph, pw = h + pad_b, w + pad_r
    shift = [int(shift_size[0]), int(shift_size[1])]
    if ws[0] >= ph:
        shift[0] = 0
    if ws[1] >= pw:
        shift[1] = 0
    x = _roll(g, _roll(g, x, -shift[0], 1), -shift[1], 2)
    nh, nw = ph // ws[0], pw // ws[1]
    n_win, n = nh * nw, ws[0] * ws[1]
    x = g.reshape(x, (b, nh, ws[0], nw, ws[1], c))
    x = g.reshape(g.permute(x, (0, 1, 3, 2, 4, 5)), (b * n_win, n, c))
    heads, hd = int(num_heads), c // int(num_heads)
    qkv = _linear(cx, x, cx.tensor(qkv_weight),
                  cx.tensor(qkv_bias) if qkv_bias is not None else None)
    qkv = g.permute(g.reshape(qkv, (b * n_win, n, 3, heads, hd)),
                    (2, 0, 3, 1, 4))
    q, k, v = (g.reshape(g.slice(qkv, 0, i, 1), (b * n_win, heads, n, hd))
               for i in range(3))
    attn = g.matmul(g.scale(q, hd ** -0.5), g.transpose(k, 2, 3))
    attn = g.add(attn, cx.tensor(relative_position_bias))
    if sum(shift) > 0:
        m = torch.zeros(ph, pw, dtype=torch.float64)
        hs = ((0, -ws[0]), (-ws[0], -shift[0]), (-shift[0], None))
        wss = ((0, -ws[1]), (-ws[1], -shift[1]), (-shift[1], None))
        count = 0
        for r in hs:
            for s in wss:
                m[r[0]:r[1], s[0]:s[1]] = count
                count += 1
        m = m.view(nh, ws[0], nw, ws[1]).permute(0, 2, 1, 3).reshape(
            n_win, n)
        m = m.unsqueeze(1) - m.unsqueeze(2)
        m = m.masked_fill(m != 0, -100.0).masked_fill(m == 0, 0.0)
        attn = g.reshape(attn, (b, n_win, heads, n, n))
        attn = g.add(attn, cx.const(m.reshape(1, n_win, 1, n, n),
                                    "window_mask"))
        attn = g.reshape(attn, (b * n_win, heads, n, n))
    attn = g.softmax(attn, 3)
    # torchvision >= 0.20 passes the module's training flag; older
    # versions leave it to the mode the plan was made in
    train = cx.training if training is None else bool(training)
    if train:
        attn = cx.dropout(attn, attention_dropout)
    x = g.reshape(g.transpose(g.matmul(attn, v), 1, 2), (b * n_win, n, c))
    x = _linear(cx, x, cx.tensor(proj_weight),
                cx.tensor(proj_bias) if proj_bias is not None else None)
    if train:
        x = cx.dropout(x, dropout)
    x = g.reshape(x, (b, nh, nw, ws[0], ws[1], c))
    x = g.reshape(g.permute(x, (0, 1, 3, 2, 4, 5)), (b, ph, pw, c))
    x = _roll(g, _roll(g, x, shift[0], 1), shift[1], 2)
    if pad_b:
        x = g.slice(x, 1, 0, h)
    if pad_r:
        x = g.slice(x, 2, 0, w)
    return x


# ------------------------------------------------------------ activations
def _relu6(g, x):
    # min(max(x, 0), 6) = relu(x) - relu(x - 6)
    return g.sub(g.relu(x), g.relu(g.add(x, g.fill(x.dtype, (), -6.0))))


def _hardsigmoid(g, x):
    # relu6(x + 3) / 6
    return g.scale(_relu6(g, g.add(x, g.fill(x.dtype, (), 3.0))), 1.0 / 6.0)


def _gelu(g, x, approximate="none"):
    if approximate == "tanh":
        return g.gelu(x)  # memgrad's gelu is the tanh approximation
    if approximate != "none":
        raise _Unsupported("approximate=%r" % approximate)
    # exact: x/2 (1 + erf(x / sqrt 2))
    e = g.erf(g.scale(x, 1.0 / math.sqrt(2.0)))
    return g.mul(g.scale(x, 0.5), g.add(e, g.fill(x.dtype, (), 1.0)))


_ACTIVATIONS = {
    "relu": lambda g, x: g.relu(x),
    "tanh": lambda g, x: g.tanh(x),
    "sigmoid": lambda g, x: g.sigmoid(x),
    "exp": lambda g, x: g.exp(x),
    "log": lambda g, x: g.log(x),
    "sqrt": lambda g, x: g.sqrt(x),
    "rsqrt": lambda g, x: g.pow(x, -0.5),
    "erf": lambda g, x: g.erf(x),
    "neg": lambda g, x: g.neg(x),
    "relu6": _relu6,
    "silu": lambda g, x: g.silu(x),  # one op: only x is kept
    "hardsigmoid": _hardsigmoid,
    "hardswish": lambda g, x: g.mul(x, _hardsigmoid(g, x)),
}
for _name, _mod in (("relu", torch.nn.ReLU), ("tanh", torch.nn.Tanh),
                    ("sigmoid", torch.nn.Sigmoid),
                    ("relu6", torch.nn.ReLU6), ("silu", torch.nn.SiLU),
                    ("hardsigmoid", torch.nn.Hardsigmoid),
                    ("hardswish", torch.nn.Hardswish)):
    _MODULES[_mod] = (lambda f: lambda cx, m, path, x: f(cx.graph, x))(
        _ACTIVATIONS[_name])
for _name, _f in _ACTIVATIONS.items():
    def _h(cx, x, *args, _f=_f, **kwargs):
        return _f(cx.graph, x)
    for _src in (torch, F):
        if hasattr(_src, _name):
            _FUNCTIONS[getattr(_src, _name)] = _h
    if hasattr(torch.Tensor, _name):  # x.relu(), not x.relu6()
        _METHODS[_name] = _h
_FUNCTIONS[operator.neg] = _FUNCTIONS[torch.neg]


@_function(F.hardtanh)
def _f_hardtanh(cx, input, min_val=-1.0, max_val=1.0, inplace=False):
    # min(max(x, lo), hi) = lo + relu(x - lo) - relu(x - hi)
    g = cx.graph
    if (min_val, max_val) == (0.0, 6.0):
        return _relu6(g, input)
    lo = g.fill(cx.dtype, (), float(min_val))
    hi = g.fill(cx.dtype, (), float(max_val))
    return g.add(lo, g.sub(g.relu(g.sub(input, lo)), g.relu(g.sub(input, hi))))


@_module(torch.nn.LeakyReLU)
def _m_leaky_relu(cx, m, path, x):
    return cx.graph.leaky_relu(x, m.negative_slope)


@_function(F.leaky_relu)
def _f_leaky_relu(cx, input, negative_slope=0.01, inplace=False):
    return cx.graph.leaky_relu(input, negative_slope)


@_module(torch.nn.GELU)
def _m_gelu(cx, m, path, x):
    return _gelu(cx.graph, x, getattr(m, "approximate", "none"))


@_function(F.gelu)
def _f_gelu(cx, input, approximate="none"):
    return _gelu(cx.graph, input, approximate)


def _softmax_dim(x, dim):
    if dim is None:
        raise _Unsupported("softmax without dim")
    return _axis(dim, len(x.shape))


@_module(torch.nn.Softmax)
def _m_softmax(cx, m, path, x):
    return cx.graph.softmax(x, _softmax_dim(x, m.dim))


@_module(torch.nn.LogSoftmax)
def _m_log_softmax(cx, m, path, x):
    return cx.graph.log_softmax(x, _softmax_dim(x, m.dim))


@_function(F.softmax, torch.softmax)
@_method("softmax")
def _f_softmax(cx, input, dim=None, _stacklevel=3, dtype=None):
    if dtype is not None:
        raise _Unsupported("dtype=")
    return cx.graph.softmax(input, _softmax_dim(input, dim))


@_function(F.log_softmax, torch.log_softmax)
@_method("log_softmax")
def _f_log_softmax(cx, input, dim=None, _stacklevel=3, dtype=None):
    if dtype is not None:
        raise _Unsupported("dtype=")
    return cx.graph.log_softmax(input, _softmax_dim(input, dim))


# ------------------------------------------------------------ arithmetic
def _num(v):
    return isinstance(v, numbers.Number) and not isinstance(v, bool)


@_function(operator.add, torch.add, operator.iadd)
@_method("add")
def _f_add(cx, input, other, alpha=1):
    if alpha != 1:
        other = _f_mul(cx, other, alpha)
    if _num(other) and other == 0 and _is_mg(input):
        return input
    if _num(input) and input == 0 and _is_mg(other):
        return other
    return cx.graph.add(cx.tensor(input), cx.tensor(other))


@_function(operator.sub, torch.sub, operator.isub)
@_method("sub")
def _f_sub(cx, input, other, alpha=1):
    if alpha != 1:
        other = _f_mul(cx, other, alpha)
    return cx.graph.sub(cx.tensor(input), cx.tensor(other))


@_function(operator.mul, torch.mul, operator.imul)
@_method("mul")
def _f_mul(cx, input, other):
    if _num(other) and _is_mg(input):
        return cx.graph.scale(input, float(other))
    if _num(input) and _is_mg(other):
        return cx.graph.scale(other, float(input))
    return cx.graph.mul(cx.tensor(input), cx.tensor(other))


@_function(operator.truediv, torch.div, operator.itruediv, torch.true_divide)
@_method("div")
def _f_div(cx, input, other, rounding_mode=None):
    if rounding_mode is not None:
        raise _Unsupported("rounding_mode=%r" % rounding_mode)
    return cx.graph.div(cx.tensor(input), cx.tensor(other))


@_function(operator.pow, torch.pow)
@_method("pow")
def _f_pow(cx, input, exponent):
    if not _num(exponent) or not _is_mg(input):
        raise _Unsupported("only tensor ** number")
    if exponent == 1:
        return input
    return cx.graph.pow(input, float(exponent))


def _matmul(cx, a, b):
    g = cx.graph
    a, b = cx.tensor(a), cx.tensor(b)
    if len(a.shape) < 2 or len(b.shape) < 2:
        raise _Unsupported("matmul of a vector (reshape it to a matrix)")
    if len(b.shape) > 2 and a.shape[:-2] != b.shape[:-2]:
        lead = tuple(torch.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
        if a.shape[:-2] != lead:
            a = g.broadcast_to(a, lead + a.shape[-2:])
        if b.shape[:-2] != lead:
            b = g.broadcast_to(b, lead + b.shape[-2:])
    return g.matmul(a, b)


for _f in (operator.matmul, torch.matmul, torch.bmm, torch.mm):
    _FUNCTIONS[_f] = _matmul
for _n in ("matmul", "bmm", "mm"):
    _METHODS[_n] = _matmul


@_function(torch.mean)
@_method("mean")
def _f_mean(cx, input, dim=None, keepdim=False, dtype=None):
    return _reduce(cx, "mean", input, dim, keepdim, dtype)


@_function(torch.sum)
@_method("sum")
def _f_sum(cx, input, dim=None, keepdim=False, dtype=None):
    return _reduce(cx, "sum", input, dim, keepdim, dtype)


def _reduce(cx, op, x, dim, keepdim, dtype):
    if dtype is not None:
        raise _Unsupported("dtype=")
    nd = len(x.shape)
    axes = () if dim is None else tuple(
        _axis(d, nd) for d in (dim if isinstance(dim, (tuple, list))
                               else (dim,)))
    return getattr(cx.graph, op)(x, axes, keepdims=keepdim)


@_function(torch.masked_fill)
@_method("masked_fill")
def _f_masked_fill(cx, input, mask, value):
    """masked_fill with a constant mask: mg_causal_mask where the mask is
    the causal one (column > row, over the last two axes), else, for a
    finite value, x * (1 - mask) + value * mask."""
    if _is_mg(mask) or not torch.is_tensor(mask):
        raise _Unsupported("a mask computed from the inputs (memgrad needs "
                           "a constant mask, such as a causal mask buffer)")
    if torch.is_tensor(value):
        value = value.item()
    g, shape = cx.graph, input.shape
    try:
        m = mask.to(torch.bool).expand(shape)
    except RuntimeError:
        raise _Unsupported("mask of shape %s for input %s"
                           % (tuple(mask.shape), shape)) from None
    if len(shape) >= 2:
        # on the mask's device: a .cuda() module's buffers are there
        causal = torch.ones(shape[-2:], dtype=torch.bool,
                            device=m.device).triu(1)
        if torch.equal(m, causal.expand(shape)):
            return g.causal_mask(input, float(value))
    if not math.isfinite(value):
        raise _Unsupported("a non-causal mask with value %r (memgrad fills "
                           "non-infinite values by arithmetic)" % value)
    keep = cx.const((~m).to(torch.float64), "keep_mask")
    fill = cx.const(m.to(torch.float64) * float(value), "fill_mask")
    return g.add(g.mul(input, keep), fill)


# ------------------------------------------------------------ shapes
def _shape_args(x, args):
    if len(args) == 1 and isinstance(args[0], (tuple, list, torch.Size)):
        args = tuple(args[0])
    shape = [int(s) for s in args]
    if shape.count(-1) > 1:
        raise _Unsupported("more than one -1 in a shape")
    if -1 in shape:
        rest = math.prod(s for s in shape if s != -1)
        shape[shape.index(-1)] = math.prod(x.shape) // max(rest, 1)
    return tuple(shape)


@_method("view", "reshape")
def _f_view(cx, input, *shape):
    return cx.graph.reshape(input, _shape_args(input, shape))


@_function(torch.reshape)
def _f_reshape(cx, input, shape):
    return cx.graph.reshape(input, _shape_args(input, (shape,)))


@_method("contiguous")
def _f_contiguous(cx, input, *args, **kwargs):
    return input


@_method("size")
def _f_size(cx, input, dim=None):
    return torch.Size(input.shape) if dim is None else \
        input.shape[_axis(dim, len(input.shape))]


@_method("dim")
def _f_dim(cx, input):
    return len(input.shape)


def _h_getattr(cx, obj, name, *default):
    if name == "shape":
        return torch.Size(obj.shape)
    if name == "ndim":
        return len(obj.shape)
    if name == "dtype":
        return {"float32": torch.float32,
                "float64": torch.float64}[obj.dtype]
    if name == "device":
        return torch.device("cpu")  # constants are moved to the call's
    if name == "T" and len(obj.shape) == 2:
        return cx.graph.transpose(obj, 0, 1)
    raise _Unsupported("attribute %r" % name)


_FUNCTIONS[getattr] = _h_getattr


@_function(torch.transpose)
@_method("transpose")
def _f_transpose(cx, input, dim0, dim1):
    nd = len(input.shape)
    d0, d1 = _axis(dim0, nd), _axis(dim1, nd)
    return input if d0 == d1 else cx.graph.transpose(input, d0, d1)


@_method("t")
def _f_t(cx, input):
    if len(input.shape) < 2:
        return input
    return cx.graph.transpose(input, 0, 1)


@_function(torch.permute)
@_method("permute")
def _f_permute(cx, input, *dims):
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = tuple(dims[0])
    nd = len(input.shape)
    return cx.graph.permute(input, [_axis(d, nd) for d in dims])


@_function(torch.unsqueeze)
@_method("unsqueeze")
def _f_unsqueeze(cx, input, dim):
    nd = len(input.shape)
    d = _axis(dim, nd + 1)
    return cx.graph.reshape(input, input.shape[:d] + (1,) + input.shape[d:])


@_function(torch.squeeze)
@_method("squeeze")
def _f_squeeze(cx, input, dim=None):
    sh = input.shape
    if dim is None:
        new = tuple(s for s in sh if s != 1)
    else:
        d = _axis(dim, len(sh))
        new = sh[:d] + sh[d + 1:] if sh[d] == 1 else sh
    return cx.graph.reshape(input, new) if new != sh else input


@_method("expand")
def _f_expand(cx, input, *sizes):
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list, torch.Size)):
        sizes = tuple(sizes[0])
    sh = (1,) * (len(sizes) - len(input.shape)) + input.shape
    new = tuple(o if int(s) == -1 else int(s) for s, o in zip(sizes, sh))
    return input if new == input.shape else cx.graph.broadcast_to(input, new)


@_method("expand_as")
def _f_expand_as(cx, input, other):
    return _f_expand(cx, input, other.shape)


@_function(torch.cat, torch.concat)
def _f_cat(cx, tensors, dim=0):
    ts = [cx.tensor(t) for t in tensors]
    return cx.graph.concat(ts, _axis(dim, len(ts[0].shape)))


@_function(torch.stack)
def _f_stack(cx, tensors, dim=0):
    ts = [cx.tensor(t) for t in tensors]
    d = _axis(dim, len(ts[0].shape) + 1)
    ts = [cx.graph.reshape(t, t.shape[:d] + (1,) + t.shape[d:]) for t in ts]
    return cx.graph.concat(ts, d)


def _pieces(cx, x, axis, sizes):
    out, start = [], 0
    for s in sizes:
        out.append(x if s == x.shape[axis] else
                   cx.graph.slice(x, axis, start, s))
        start += s
    return tuple(out)


@_function(torch.split)
@_method("split")
def _f_split(cx, tensor, split_size_or_sections, dim=0):
    axis = _axis(dim, len(tensor.shape))
    n = tensor.shape[axis]
    if isinstance(split_size_or_sections, int):
        s = split_size_or_sections
        sizes = [min(s, n - i) for i in range(0, n, s)]
    else:
        sizes = list(split_size_or_sections)
    return _pieces(cx, tensor, axis, sizes)


@_function(torch.chunk)
@_method("chunk")
def _f_chunk(cx, input, chunks, dim=0):
    axis = _axis(dim, len(input.shape))
    n = input.shape[axis]
    s = -(-n // chunks)
    return _pieces(cx, input, axis, [min(s, n - i) for i in range(0, n, s)])


@_function(operator.getitem)
def _f_getitem(cx, obj, idx):
    """Indexing: of a tuple or list (split's pieces, sizes), or of a tensor
    with ints, slices of step 1, None and ...: slices, then one reshape."""
    if not _is_mg(obj):
        return obj[idx]
    idx = idx if isinstance(idx, tuple) else (idx,)
    n_real = sum(1 for i in idx if i is not None and i is not Ellipsis)
    if sum(1 for i in idx if i is Ellipsis) > 1:
        raise _Unsupported("more than one ...")
    if Ellipsis in idx:
        k = idx.index(Ellipsis)
        idx = idx[:k] + (slice(None),) * (len(obj.shape) - n_real) + \
            idx[k + 1:]
    g, x, axis, out_shape = cx.graph, obj, 0, []
    for i in idx:
        if i is None:
            out_shape.append(1)
            continue
        if axis >= len(obj.shape):
            raise _Unsupported("too many indices")
        n = obj.shape[axis]
        if isinstance(i, slice):
            start, stop, step = i.indices(n)
            if step != 1:
                raise _Unsupported("a slice with step %d" % step)
            if stop <= start:
                raise _Unsupported("an empty slice")
            if stop - start != n:
                x = g.slice(x, axis, start, stop - start)
            out_shape.append(stop - start)
        elif isinstance(i, int):
            j = _axis(i, n)
            x = g.slice(x, axis, j, 1) if n != 1 else x
        else:
            raise _Unsupported("an index of type %s (memgrad takes ints, "
                               "slices, None and ...)" % type(i).__name__)
        axis += 1
    out_shape += list(obj.shape[axis:])
    out_shape = tuple(out_shape)
    return g.reshape(x, out_shape) if out_shape != x.shape else x


# in-place variants (x.add_(y), x.relu_(), F.relu_(x)): the out-of-place
# mapping, then _Captured._functionalise gives later readers the new value
for _name in list(_METHODS):
    if _name + "_" not in _METHODS and hasattr(torch.Tensor, _name + "_"):
        _METHODS[_name + "_"] = _METHODS[_name]
for _f in list(_INPLACE_FNS):
    _base = getattr(_f, "__name__", "").rstrip("_")
    for _src in (F, torch):
        if getattr(_src, _base + "_", None) is _f and \
                getattr(_src, _base, None) in _FUNCTIONS:
            _FUNCTIONS.setdefault(_f, _FUNCTIONS[getattr(_src, _base)])

# the names above: python/tests/test_op_map.py checks them against
# src/frontends/op_map.def, the table the ONNX importer is compiled from
SUPPORTED = {
    "modules": sorted(_class_name(t) for t in _MODULES),
    "functions": sorted({_fn_name(f) for f in _FUNCTIONS}
                        | set(_FUNCTIONS_BY_NAME)),
    "tensor methods": sorted(_METHODS),
}


# ------------------------------------------------------------ calling
class _Function(torch.autograd.Function):
    """One call: memgrad's forward phase now, its backward phase when
    torch's autograd reaches it. In-place safety as in PyTorch: the
    version counter of every tensor memgrad shares with torch (each input,
    parameter and bound buffer) is recorded here and compared in backward,
    which raises rather than read a tensor written in place since; a write
    into the output is caught by memgrad itself (mg_saved_export
    fingerprints an output that the backward phase reads)."""

    @staticmethod
    def forward(ctx, cap, seed, *tensors):
        device = cap.device_of(tensors)
        feeds = cap.feeds(tensors, device)
        ex, plan = cap.executor_for(device), cap.plan_for(device)
        outs, saved = ex.forward(plan, feeds, seed)
        cap.update_running_stats(outs)
        ctx.cap, ctx.feeds, ctx.mg_saved, ctx.ex = cap, feeds, saved, ex
        ctx.plan = plan
        # the feeds are detached aliases (same version counter) of the
        # caller's tensors, or copies nobody else can write
        ctx.versions = [(t, a._version) for t, a in feeds.items()]
        y = outs[cap.y]
        ctx.y_alias = y.detach()  # shares y's counter; no reference cycle
        ctx.y_version = y._version
        return y

    @staticmethod
    def backward(ctx, grad_output):
        cap = ctx.cap
        for t, v in ctx.versions:
            a = ctx.feeds[t]
            if a._version != v:
                raise RuntimeError(
                    "memgrad.torch: %s of %s was modified by an in-place "
                    "operation after the forward call (its version is %d, "
                    "it was %d); memgrad's backward reads it, so the "
                    "gradients would be wrong. Modify a copy (x = x + 1, or "
                    "x.clone()), or run backward before changing it (an "
                    "optimizer step goes after backward)."
                    % (cap.describe_feed(t), cap.module_name, a._version, v))
        feeds = dict(ctx.feeds)
        feeds[cap.seed] = grad_output.detach().contiguous()
        # Gradients land in torch's memory (issue 28). A parameter with no
        # .grad gets a fresh torch tensor bound as its gradient's output,
        # which memgrad writes and autograd's AccumulateGrad then takes as
        # .grad without a copy. A parameter with a .grad gets its gradient
        # in that .grad, and None from here: written over it where .grad
        # is all zeros (torch 1.13's zero_grad() zeroes in place; 0 + g is
        # g, up to the sign of a zero, as torch.equal sees it), else added
        # into it (mg_exec_accumulate: .grad += g, the float addition
        # AccumulateGrad does), for which the pool lends one slot, as large
        # as the largest gradient so added, for the value. Where that cannot
        # be done as AccumulateGrad would (a hook on the parameter, a
        # .grad of another dtype, device or layout, create_graph, or
        # Module(grads_in_place=False), which DDP's hooks on AccumulateGrad
        # need), the gradient comes from the pool, AccumulateGrad adds it
        # and drops it at once, and the block goes back to the pool.
        n_in = len(cap.inputs)
        in_place, acc = set(), []
        for i, (p, gt) in enumerate(zip(cap.params, cap.grads[n_in:])):
            # a gradient that is the seed itself (y = f(x) + b) is
            # grad_output, which AccumulateGrad takes as torch would
            if not ctx.needs_input_grad[2 + n_in + i] or gt == cap.seed:
                continue
            if p.grad is None:
                feeds[gt] = torch.empty(p.shape, dtype=p.dtype,
                                        device=p.device)
            elif cap.grads_in_place and _accumulable(p):
                feeds[gt] = p.grad
                in_place.add(n_in + i)
                # reading .grad once costs less than the addition it saves
                if p.grad.any():
                    acc.append(gt)
                    slot = size_class(p.numel() * p.element_size())
                    ctx.ex.accumulation_slot = max(
                        slot, getattr(ctx.ex, "accumulation_slot", 0))
        ctx.ex.accumulate(acc)
        try:
            grads = ctx.ex.backward(ctx.plan, ctx.mg_saved, feeds)
        except MemgradError as e:
            if ctx.y_alias._version == ctx.y_version:
                raise
            raise RuntimeError(
                "memgrad.torch: the output of %s was modified by an "
                "in-place operation after the forward call (its version is "
                "%d, it was %d), and memgrad's backward reads it, so the "
                "gradients would be wrong. Modify a copy instead (y = y * 2 "
                "rather than y.mul_(2), or y.clone()). memgrad said: %s"
                % (cap.module_name, ctx.y_alias._version, ctx.y_version,
                   e)) from None
        ctx.mg_saved.free()
        out = tuple(grads[gt] if gt is not None and
                    ctx.needs_input_grad[2 + i] and i not in in_place
                    else None for i, gt in enumerate(cap.grads))
        del grads, feeds  # AccumulateGrad takes a gradient nobody else holds
        return (None, None) + out


def _accumulable(p):
    """Whether memgrad may add p's gradient into p.grad itself, as
    AccumulateGrad would: no hook on p to see the gradient first, no
    create_graph (grad mode on in backward), and a .grad memgrad can
    write (dense, contiguous, p's dtype and device, not itself part of
    a graph)."""
    g = p.grad
    return (not torch.is_grad_enabled() and not p._backward_hooks and
            g.layout == torch.strided and g.is_contiguous() and
            g.dtype == p.dtype and g.device == p.device and
            not g.requires_grad and g.shape == p.shape)


def _check_inputs(inputs, what="input"):
    for i, x in enumerate(inputs):
        if not torch.is_tensor(x):
            hint = ""
            if type(x).__module__ == "numpy":
                hint = " (convert it with torch.from_numpy)"
            raise TypeError("memgrad.torch: %s %d is a %s.%s; memgrad.torch "
                            "takes torch tensors%s" % (
                                what, i, type(x).__module__,
                                type(x).__name__, hint))


def check(model, example_inputs):
    """Which layers and functions of `model` memgrad.torch cannot map,
    all at once: a CheckReport (true when there are none; str() lists
    each unmapped module type or function with its count and the module
    paths where it is). Runs no memgrad plan; where something is
    unmapped it runs the model once in torch (under no_grad, buffers and
    the RNG restored) for the shapes after it."""
    example_inputs = tuple(example_inputs)
    _check_inputs(example_inputs, "example input")
    try:
        cap = _Captured(model, example_inputs, "none",
                        training=model.training, collect=True)
    except UnsupportedModelError as e:
        return e.report
    return cap.report


class Module(torch.nn.Module):
    """`module` run through memgrad; its parameters stay its own.

    policy: "none", "memory", "speed" or "budget"; with "budget",
    budget_bytes is mg_checkpoints.budget_bytes in C, with the same
    meaning as there and in memgrad-plan and memgrad-onnx: the most pool
    bytes (size-class units) that a training step may use with its output
    and gradients counted as caller memory, i.e. activations, recomputed
    copies, intermediate gradients and kernel workspace; not the
    parameters, the inputs, the output or the gradients. `report()`
    prints the budget beside the plan's peak in that measure.

    Parameter gradients land in torch's memory, not memgrad's pool: a
    parameter without .grad gets one that memgrad computed into a torch
    tensor, one whose .grad is all zeros (torch 1.13's zero_grad()) has
    memgrad's gradient written into that .grad, and one with any other
    .grad has it added in place (.grad += g, PyTorch's AccumulateGrad
    addition, same bits), through one pool slot as large as the largest
    gradient so added. Such a
    gradient does not pass through AccumulateGrad, so hooks registered on
    AccumulateGrad nodes (DistributedDataParallel's) do not see it: pass
    grads_in_place=False to have every gradient handed to autograd from
    the pool as a tensor (then added by AccumulateGrad and given back).
    A parameter with a tensor hook (register_hook) is always handed to
    autograd. An input gets a gradient only where it requires grad at the
    call, as in PyTorch (a plan per input shapes, mode and requires_grad). `predicted_peak` counts the gradients as pool bytes (the
    plan's view with nothing bound); memory_report() says which bytes
    are whose.

    compact: keep relu signs as 1-bit masks and max-pool argmaxes as 1
    byte per output where the backward pass reads nothing more of the
    tensor (mg_checkpoints.compact); lossless, off by default.

    store16: keep the float32 activations the backward pass reads as
    bfloat16 (mg_checkpoints.store16). LOSSY: the gradients differ from
    exact ones (bench/results/store16.txt); off by default."""

    MAX_PLANS = 8

    def __init__(self, module, example_inputs, policy="memory",
                 budget_bytes=None, compact=False, grads_in_place=True,
                 store16=False):
        super().__init__()
        self._grads_in_place = bool(grads_in_place)
        if policy == "budget" and not budget_bytes:
            raise ValueError("memgrad.torch.Module: policy='budget' needs "
                             "budget_bytes, the most bytes a training step "
                             "may use")
        if budget_bytes and policy != "budget":
            raise ValueError("memgrad.torch.Module: budget_bytes goes with "
                             "policy='budget', not %r" % policy)
        self.module = module
        example_inputs = tuple(example_inputs)
        _check_inputs(example_inputs, "example input")
        self._example = example_inputs
        self._policy = policy
        self._budget = int(budget_bytes or 0)
        self._compact = bool(compact)
        self._store16 = bool(store16)
        self._plans = collections.OrderedDict()
        self._cap = self._plan_for(example_inputs, True)

    def _plan_for(self, inputs, training):
        params = list(self.module.parameters())
        # inputs' requires_grad too: only those get a gradient
        needs = tuple(bool(x.requires_grad) for x in inputs)
        key = (training, tuple((tuple(x.shape), x.dtype) for x in inputs),
               params[0].dtype if params else None, needs)
        cap = self._plans.get(key)
        if cap is None:
            cap = _Captured(self.module, inputs, self._policy,
                            training=training, budget_bytes=self._budget,
                            compact=self._compact, input_grads=needs,
                            store16=self._store16)
            cap.grads_in_place = self._grads_in_place
            self._plans[key] = cap
            while len(self._plans) > self.MAX_PLANS:
                self._plans.popitem(last=False)
        else:
            self._plans.move_to_end(key)
        return cap

    @property
    def predicted_peak(self):
        return self._cap.plan.predicted_peak

    def report(self):
        return self._cap.plan.report()

    def memory_report(self):
        """Which bytes are whose for a training step of the last plan
        (issue 28): {"pool_arena": the plan's arena in memgrad's pool,
        "pool_outputs": the pool blocks of the output, the batch
        statistics and the inputs' gradients, "accumulation_slot": the
        pool block gradients are added into .grad through (its size class
        of the largest gradient added into a .grad that was not all zeros
        by this module's executor so far; 0 when none was: a .grad that
        is None or zeros is written, not added into), "grads_torch": the
        parameters' gradients, in torch's
        memory (.grad), "params_torch": the parameters, torch's}; the
        pool reserves pool_arena + pool_outputs (+ accumulation_slot)."""
        cap = self._cap
        n_in = len(cap.inputs)
        a = cap.plan.arena(bound=cap.grads[n_in:])

        def nbytes(p):
            return p.numel() * p.element_size()
        slot = getattr(cap.executor, "accumulation_slot", 0)
        return {"pool_arena": a["bytes"],
                "pool_outputs": a["reserved"] - a["bytes"],
                "accumulation_slot": slot,
                "grads_torch": sum(nbytes(p) for p in cap.params),
                "params_torch": sum(nbytes(p) for p in cap.params)}

    @property
    def executor(self):
        return self._cap.executor

    def forward(self, *inputs, **kwargs):
        if kwargs:
            raise TypeError("memgrad.torch.Module takes its inputs by "
                            "position, not %s" % sorted(kwargs))
        n = len(self._cap.inputs)
        if len(inputs) != n:
            raise TypeError(
                "memgrad.torch.Module: %s.forward was traced with %d "
                "input(s) (%s); this call gives %d. Give the same inputs "
                "as the example (a new shape is fine)"
                % (type(self.module).__name__, n,
                   ", ".join(self._cap.input_names), len(inputs)))
        _check_inputs(inputs)
        cap = self._plan_for(inputs, self.training)
        seed = 0
        if cap.n_random:
            # from torch's generator, so torch.manual_seed repeats a run
            seed = int(torch.randint(0, 2 ** 62, (1,)).item())
        return _Function.apply(cap, seed, *inputs, *cap.params)
