"""memgrad.torch: run a PyTorch nn.Module's forward and backward in memgrad.

`Module(module, example_inputs, policy="memory")` captures the module's
graph once with torch.fx, maps each node to memgrad builders, and appends
its gradient graph under the checkpoint policy. Calls go through a
torch.autograd.Function: the forward phase runs in memgrad and leaves an
mg_saved per call (so several calls may precede one backward), and the
backward phase takes torch's output gradient as the seed. The original
parameters stay torch Parameters of the wrapped module, bound zero-copy
through DLPack, so any torch.optim optimizer trains them. Shapes are fixed
by example_inputs; the dtype (float32 or float64) is the module's, as
after `.double()`. A parameter must not be changed in place
between a call and its backward (memgrad reads it again when it
recomputes).

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
running statistics, through a second plan captured on first use.
"""
import operator

import torch
import torch.fx
import torch.nn.functional as F

from . import Executor, Graph

_UNARY_MODULES = {torch.nn.ReLU: "relu", torch.nn.Tanh: "tanh",
                  torch.nn.Sigmoid: "sigmoid"}
_UNARY_FUNCTIONS = {torch.relu: "relu", F.relu: "relu", torch.tanh: "tanh",
                    torch.sigmoid: "sigmoid", torch.exp: "exp"}
_BINARY_FUNCTIONS = {operator.add: "add", torch.add: "add",
                     operator.iadd: "add",
                     operator.sub: "sub", torch.sub: "sub",
                     operator.mul: "mul", torch.mul: "mul"}
_METHODS = {"relu": "relu", "tanh": "tanh", "sigmoid": "sigmoid"}


_DTYPE_NAMES = {torch.float32: "float32", torch.float64: "float64"}


def _dtype_of(module, example_inputs):
    """memgrad's name for the dtype the module computes in: its parameters'
    (all alike) and its inputs' must agree."""
    dts = {p.dtype for p in module.parameters()}
    dts |= {x.dtype for x in example_inputs if torch.is_tensor(x)}
    if len(dts) != 1 or next(iter(dts)) not in _DTYPE_NAMES:
        raise TypeError("memgrad.torch: parameters and inputs must all be "
                        "float32 or all float64, not %s"
                        % sorted(str(d) for d in dts))
    return _DTYPE_NAMES[next(iter(dts))]


def _pair(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v)


class _Captured:
    """The memgrad graph and plan of one traced module."""

    def __init__(self, module, example_inputs, policy, training=True):
        gm = torch.fx.symbolic_trace(module)
        dt = self.dtype = _dtype_of(module, example_inputs)
        g = self.graph = Graph()
        env, self.inputs, self.params, self.param_tensors = {}, [], [], []
        # buffers read as inputs (eval-mode running statistics): (tensor,
        # the torch buffer); batch statistics computed for the running ones:
        # (module, mean tensor, var tensor, elements per channel)
        self.buffers, self.stats = [], []
        seen = {}
        ex_iter = iter(example_inputs)

        def param(qualname, p):
            if id(p) not in seen:
                seen[id(p)] = g.param(qualname, dt, tuple(p.shape))
                self.params.append(p)
                self.param_tensors.append(seen[id(p)])
            return seen[id(p)]

        modules = dict(gm.named_modules())
        for node in gm.graph.nodes:
            args = [env[a.name] if isinstance(a, torch.fx.Node) else a
                    for a in node.args]
            if node.op == "placeholder":
                ex = next(ex_iter)
                t = g.input(node.name, dt, tuple(ex.shape))
                self.inputs.append(t)
            elif node.op == "get_attr":
                obj = gm
                for part in node.target.split("."):
                    obj = getattr(obj, part)
                t = param(node.target, obj)
            elif node.op == "call_module":
                m = modules[node.target]
                if isinstance(m, torch.nn.Linear):
                    w = param(node.target + ".weight", m.weight)
                    t = g.matmul(args[0], w, trans_b=True)
                    if m.bias is not None:
                        t = g.add(t, param(node.target + ".bias", m.bias))
                elif isinstance(m, torch.nn.Conv2d) and m.padding_mode == "zeros":
                    t = g.conv2d(args[0], param(node.target + ".weight",
                                                m.weight),
                                 _pair(m.stride), _pair(m.padding),
                                 _pair(m.dilation), m.groups)
                    if m.bias is not None:
                        b = param(node.target + ".bias", m.bias)
                        t = g.add(t, g.reshape(b, (m.out_channels, 1, 1)))
                elif isinstance(m, torch.nn.BatchNorm2d) and m.affine:
                    t = self._batchnorm(node.target, m, args[0], param,
                                        training)
                elif (isinstance(m, torch.nn.MaxPool2d)
                      and _pair(m.dilation) == (1, 1)
                      and not m.return_indices):
                    t = g.max_pool2d(args[0], _pair(m.kernel_size),
                                     _pair(m.stride or m.kernel_size),
                                     _pair(m.padding), m.ceil_mode)
                elif (isinstance(m, torch.nn.AvgPool2d)
                      and m.divisor_override is None):
                    t = g.avg_pool2d(args[0], _pair(m.kernel_size),
                                     _pair(m.stride or m.kernel_size),
                                     _pair(m.padding), m.ceil_mode,
                                     m.count_include_pad)
                elif (isinstance(m, torch.nn.AdaptiveAvgPool2d)
                      and _pair(m.output_size) == (1, 1)):
                    n, c = args[0].shape[:2]
                    t = g.reshape(g.global_avg_pool2d(args[0]), (n, c, 1, 1))
                elif isinstance(m, torch.nn.Flatten) and m.end_dim == -1:
                    t = g.flatten(args[0], m.start_dim)
                elif type(m) in _UNARY_MODULES:
                    t = getattr(g, _UNARY_MODULES[type(m)])(args[0])
                else:
                    raise NotImplementedError(
                        "memgrad.torch: no mapping for module %s (%s)"
                        % (node.target, type(m).__name__))
            elif node.op == "call_function" and node.target in _UNARY_FUNCTIONS:
                t = getattr(g, _UNARY_FUNCTIONS[node.target])(args[0])
            elif node.op == "call_function" and node.target in _BINARY_FUNCTIONS:
                t = getattr(g, _BINARY_FUNCTIONS[node.target])(*args[:2])
            elif (node.op == "call_function" and node.target is torch.flatten
                  and len(args) == 2):
                t = g.flatten(args[0], args[1])
            elif node.op == "call_method" and node.target in _METHODS:
                t = getattr(g, _METHODS[node.target])(args[0])
            elif node.op == "output":
                self.y = args[0]
                continue
            else:
                raise NotImplementedError(
                    "memgrad.torch: no mapping for %s %s" % (node.op,
                                                            node.target))
            env[node.name] = t
        self.seed = g.input("grad_output", dt, self.y.shape)
        xs = self.inputs + self.param_tensors
        self.grads = g.gradients([self.y], xs, policy=policy,
                                 grad_ys=[self.seed])
        stat_ts = [t for _, mean, var, _ in self.stats for t in (mean, var)]
        self.plan = g.compile([self.y] + stat_ts + self.grads)
        # one executor per device the module has run on (a plan is the
        # same for every device); made on first use
        self.executors = {}

    def executor_for(self, device):
        """The executor for torch device `device` ("cpu" or "cuda")."""
        kind = torch.device(device).type
        if kind not in self.executors:
            if kind not in ("cpu", "cuda"):
                raise NotImplementedError(
                    "memgrad.torch: tensors on %s; memgrad runs on the CPU "
                    "and on CUDA" % kind)
            self.executors[kind] = Executor(wrap=torch.from_dlpack,
                                            device=kind)
        return self.executors[kind]

    @property
    def executor(self):
        return self.executor_for(self.params[0].device if self.params
                                 else "cpu")

    def _batchnorm(self, name, m, x, param, training):
        """BatchNorm2d m on x: batch statistics in training mode (and, if it
        tracks running ones, the batch mean and biased variance as extra
        outputs), else the affine map of its running statistics."""
        g = self.graph
        gamma = param(name + ".weight", m.weight)
        beta = param(name + ".bias", m.bias)
        c = m.num_features
        if training or not m.track_running_stats:
            t = g.batchnorm(x, gamma, beta, m.eps)
            if m.track_running_stats and training:
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
        for t, buf in self.buffers:
            f[t] = buf.detach().to(device).reshape(t.shape).contiguous()
        return f

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


class _Function(torch.autograd.Function):
    @staticmethod
    def forward(ctx, cap, *tensors):
        device = cap.device_of(tensors)
        feeds = cap.feeds(tensors, device)
        ex = cap.executor_for(device)
        outs, saved = ex.forward(cap.plan, feeds)
        cap.update_running_stats(outs)
        ctx.cap, ctx.feeds, ctx.mg_saved, ctx.ex = cap, feeds, saved, ex
        return outs[cap.y]

    @staticmethod
    def backward(ctx, grad_output):
        cap = ctx.cap
        feeds = dict(ctx.feeds)
        feeds[cap.seed] = grad_output.detach().contiguous()
        grads = ctx.ex.backward(cap.plan, ctx.mg_saved, feeds)
        ctx.mg_saved.free()
        return (None,) + tuple(grads[gt] for gt in cap.grads)


class Module(torch.nn.Module):
    """`module` run through memgrad; its parameters stay its own."""

    def __init__(self, module, example_inputs, policy="memory"):
        super().__init__()
        self.module = module
        self._example = tuple(example_inputs)
        self._policy = policy
        self._cap = _Captured(module, example_inputs, policy)
        self._cap_eval = None  # captured on the first call in eval mode

    @property
    def predicted_peak(self):
        return self._cap.plan.predicted_peak

    def report(self):
        return self._cap.plan.report()

    @property
    def executor(self):
        return self._cap.executor

    def forward(self, *inputs):
        cap = self._cap
        if not self.training:
            if self._cap_eval is None:
                self._cap_eval = _Captured(self.module, self._example,
                                           self._policy, training=False)
            cap = self._cap_eval
        return _Function.apply(cap, *inputs, *cap.params)
