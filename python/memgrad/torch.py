"""memgrad.torch: run a PyTorch nn.Module's forward and backward in memgrad.

`Module(module, example_inputs, policy="memory")` captures the module's
graph once with torch.fx, maps each node to memgrad builders, and appends
its gradient graph under the checkpoint policy. Calls go through a
torch.autograd.Function: the forward phase runs in memgrad and leaves an
mg_saved per call (so several calls may precede one backward), and the
backward phase takes torch's output gradient as the seed. The original
parameters stay torch Parameters of the wrapped module, bound zero-copy
through DLPack, so any torch.optim optimizer trains them. Shapes are fixed
by example_inputs; float32 only. A parameter must not be changed in place
between a call and its backward (memgrad reads it again when it
recomputes).
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


def _pair(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v)


class _Captured:
    """The memgrad graph and plan of one traced module."""

    def __init__(self, module, example_inputs, policy):
        gm = torch.fx.symbolic_trace(module)
        g = self.graph = Graph()
        env, self.inputs, self.params, self.param_tensors = {}, [], [], []
        seen = {}
        ex_iter = iter(example_inputs)

        def param(qualname, p):
            if id(p) not in seen:
                seen[id(p)] = g.param(qualname, "float32", tuple(p.shape))
                self.params.append(p)
                self.param_tensors.append(seen[id(p)])
            return seen[id(p)]

        modules = dict(gm.named_modules())
        for node in gm.graph.nodes:
            args = [env[a.name] if isinstance(a, torch.fx.Node) else a
                    for a in node.args]
            if node.op == "placeholder":
                ex = next(ex_iter)
                t = g.input(node.name, "float32", tuple(ex.shape))
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
                    # training-mode batch statistics; no running averages
                    t = g.batchnorm(args[0],
                                    param(node.target + ".weight", m.weight),
                                    param(node.target + ".bias", m.bias),
                                    m.eps)
                elif isinstance(m, torch.nn.MaxPool2d) and not m.ceil_mode:
                    t = g.max_pool2d(args[0], _pair(m.kernel_size),
                                     _pair(m.stride or m.kernel_size),
                                     _pair(m.padding))
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
        self.seed = g.input("grad_output", "float32", self.y.shape)
        xs = self.inputs + self.param_tensors
        self.grads = g.gradients([self.y], xs, policy=policy,
                                 grad_ys=[self.seed])
        self.plan = g.compile([self.y] + self.grads)
        self.executor = Executor(wrap=torch.from_dlpack)


class _Function(torch.autograd.Function):
    @staticmethod
    def forward(ctx, cap, *tensors):
        feeds = {t: a.detach().contiguous()
                 for t, a in zip(cap.inputs + cap.param_tensors, tensors)}
        outs, saved = cap.executor.forward(cap.plan, feeds)
        ctx.cap, ctx.feeds, ctx.mg_saved = cap, feeds, saved
        return outs[cap.y]

    @staticmethod
    def backward(ctx, grad_output):
        cap = ctx.cap
        feeds = dict(ctx.feeds)
        feeds[cap.seed] = grad_output.detach().contiguous()
        grads = cap.executor.backward(cap.plan, ctx.mg_saved, feeds)
        ctx.mg_saved.free()
        return (None,) + tuple(grads[gt] for gt in cap.grads)


class Module(torch.nn.Module):
    """`module` run through memgrad; its parameters stay its own."""

    def __init__(self, module, example_inputs, policy="memory"):
        super().__init__()
        self.module = module
        self._cap = _Captured(module, example_inputs, policy)

    @property
    def predicted_peak(self):
        return self._cap.plan.predicted_peak

    def report(self):
        return self._cap.plan.report()

    @property
    def executor(self):
        return self._cap.executor

    def forward(self, *inputs):
        return _Function.apply(self._cap, *inputs, *self._cap.params)
