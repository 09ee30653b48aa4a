"""memgrad.torch.Module on the ATen capture: a PyTorch 2 module whose
forward and backward run in memgrad, behaving as the module does in eager
PyTorch (train/eval, requires_grad, buffers written in forward, keyword
arguments, dict and ModelOutput outputs).

A call runs the capture's prologue in PyTorch, memgrad's forward phase,
and leaves memgrad's saved state to a torch.autograd.Function whose
backward runs memgrad's backward phase. Plans are cached per input
signature, mode, and which parameters require grad.
"""
import collections
import copy

import torch
from torch.export.graph_signature import InputKind, OutputKind
import torch.fx._pytree as fx_pytree
from torch.utils import _pytree as pytree

from .. import MemgradError, size_class
from .capture import Captured, Unsupported, _Leaf, autocast_state, export


class _Run(torch.autograd.Function):
    """One call: memgrad's forward phase now, its backward phase when
    autograd reaches it. Inputs: the capture, the run seed, the call's
    leaf values (parameters, buffers and input tensors, in placeholder
    order; only tensors). Outputs: the body's user outputs, then its
    mutation outputs (no gradient)."""

    @staticmethod
    def forward(ctx, cap, seed, *values):
        values = list(values)
        device = _device_of(values)
        env = cap.run_prologue(values)
        feeds = {}
        for i, t in cap.leaf_tensors.items():
            feeds[t] = values[i].detach().contiguous()
        for t, get in cap.feeds_from:
            feeds[t] = get(env).detach().to(device).contiguous()
        ex, plan = cap.executor_for(device), cap.plan_for(device)
        # a fused loss's logits (forward-only outputs) are written into
        # torch memory: they leave with the caller's last reference
        # (before backward, when only the loss is used) instead of holding
        # a pool block through the backward pass
        fwd = [torch.empty(t.shape, dtype=getattr(torch, t.dtype),
                           device=device)
               for t in getattr(cap, "forward_only", ())]
        run_feeds = dict(feeds)
        run_feeds.update(zip(getattr(cap, "forward_only", ()), fwd))
        if cap.differentiable:
            outs, saved = ex.forward(plan, run_feeds, seed)
        else:  # no gradient steps (every leaf frozen, say): no backward
            outs, saved = ex.run(plan, run_feeds, seed), None
        del run_feeds
        ctx.cap, ctx.feeds, ctx.saved, ctx.ex, ctx.plan = \
            cap, feeds, saved, ex, plan
        ctx.env_outputs = env
        # the leaves whose gradient autograd would add into their .grad
        # (parameters and leaf inputs): backward may write it there itself
        ctx.leaf_grads = {i: values[i] for i in cap.grad_leaves
                          if values[i].is_leaf and values[i].requires_grad}
        # parameters and inputs: a write into one after the call (an
        # optimizer step before backward) is refused as PyTorch refuses
        # it; buffers are the module's to update (running statistics)
        written = {target for kind, target, _ in cap.mutations}
        ctx.versions = [(t, feeds[t]._version)
                        for i, t in cap.leaf_tensors.items()
                        if cap.leaves[i].name not in written]
        ys = [outs[y] for y in cap.ys]
        extra = [outs[e] for e in cap.extra]
        ctx.mark_non_differentiable(*extra)
        ctx.n_values = len(values)
        # an output nothing differentiates gets None in backward, not
        # zeros: a forward-only output's gradient must be seen to be none
        ctx.set_materialize_grads(False)
        return tuple(ys + fwd + extra)

    @staticmethod
    def backward(ctx, *grad_outputs):
        cap = ctx.cap
        ny, nf = len(cap.ys), len(getattr(cap, "forward_only", ()))
        if any(g is not None for g in grad_outputs[ny:ny + nf]):
            raise RuntimeError(
                "memgrad.torch: a gradient reached the logits %s returns "
                "beside its loss; memgrad fused the final projection with "
                "the cross-entropy (linear_cross_entropy), so its plan "
                "has no gradient path through the logits. Differentiate "
                "the loss alone, or use the logits detached "
                "(.detach())." % cap.module_name)
        grad_outputs = grad_outputs[:ny]
        if not cap.differentiable:  # only ys that are leaves themselves
            out = [None] * ctx.n_values
            for i, gt in zip(cap.grad_leaves, cap.grads):
                if ctx.needs_input_grad[2 + i]:
                    out[i] = grad_outputs[cap.seeds.index(gt)]
            return (None, None) + tuple(out)
        if ctx.saved is None:
            raise RuntimeError(
                "memgrad.torch: backward through %s a second time; memgrad "
                "freed what the forward kept at the first backward (as "
                "PyTorch does without retain_graph=True). Call the module "
                "again for a second backward." % cap.module_name)
        for t, v in ctx.versions:
            if ctx.feeds[t]._version != v:
                raise RuntimeError(
                    "memgrad.torch: a tensor %s reads in backward (%s) was "
                    "modified in place after the forward call; the "
                    "gradients would be wrong" % (cap.module_name, t.name))
        feeds = dict(ctx.feeds)
        for s, y, gy in zip(cap.seeds, cap.ys, grad_outputs):
            dt = getattr(torch, y.dtype)
            feeds[s] = (gy.to(dt) if gy is not None else
                        torch.zeros(y.shape, dtype=dt)).detach().contiguous()
        # Gradients land in torch's memory, never copied. A leaf with no
        # .grad gets a fresh tensor that memgrad writes and AccumulateGrad
        # then takes as .grad as it is. A leaf with a .grad gets its
        # gradient in that .grad and None from here (see _into_grad):
        # written over it where it is all zeros, else added into it
        # (mg_exec_accumulate, the one float addition AccumulateGrad does,
        # through one pool slot the size of the largest such gradient)
        # instead of a second gradient buffer that AccumulateGrad would
        # add and drop.
        grads_t, in_place, acc = {}, set(), []
        into = _into_grad(ctx) if getattr(cap, "grads_in_place", True) \
            else {}
        for i, gt in zip(cap.grad_leaves, cap.grads):
            if not ctx.needs_input_grad[2 + i] or gt in cap.seeds:
                continue
            g = into.get(i)
            if g is not None:
                feeds[gt] = g
                in_place.add(i)
                if g.any():  # a read costs less than the addition saved
                    acc.append(gt)
                    slot = size_class(g.numel() * g.element_size())
                    ctx.ex.accumulation_slot = max(
                        slot, getattr(ctx.ex, "accumulation_slot", 0))
            else:
                v = feeds[cap.leaf_tensors[i]]
                feeds[gt] = grads_t[i] = torch.empty_like(v)
        if acc:
            ctx.ex.accumulate(acc)
        try:
            grads = ctx.ex.backward(ctx.plan, ctx.saved, feeds)
        finally:
            if acc:
                ctx.ex.accumulate([])
        ctx.saved.free()
        ctx.saved = None
        out = [None] * ctx.n_values
        for i, gt in zip(cap.grad_leaves, cap.grads):
            if not ctx.needs_input_grad[2 + i] or i in in_place:
                continue
            if gt in cap.seeds:  # y is the leaf itself
                k = cap.seeds.index(gt)
                out[i] = grad_outputs[k]
            else:
                out[i] = grads_t.get(i, grads.get(gt))
        # AccumulateGrad takes a gradient nobody else holds as .grad
        del grads, grads_t, feeds
        return (None, None) + tuple(out)


def _into_grad(ctx):
    """{leaf index: its .grad} for the leaves whose gradient backward may
    write into .grad itself, as AccumulateGrad would: a .backward() that
    runs the leaf's AccumulateGrad (not torch.autograd.grad, not a
    backward(inputs=...) leaving it out), no create_graph (grad mode on
    in backward), no hook on the leaf to see the gradient first, and a
    .grad memgrad can write (dense, contiguous, the leaf's dtype, device
    and shape, not itself part of a graph)."""
    if torch.is_grad_enabled():
        return {}
    into, seen, tied = {}, set(), set()
    for p in ctx.leaf_grads.values():
        (tied if id(p) in seen else seen).add(id(p))
    for i, p in ctx.leaf_grads.items():
        g = p.grad
        # a parameter at two leaves (tied weights, as export may lift
        # them) gets two gradients, which autograd sums
        if g is None or id(p) in tied or p._backward_hooks or \
                getattr(p, "_post_accumulate_grad_hooks", None):
            continue
        if not (g.layout == torch.strided and g.is_contiguous() and
                g.dtype == p.dtype and g.device == p.device and
                g.shape == p.shape and not g.requires_grad):
            continue
        try:
            node = torch.autograd.graph.get_gradient_edge(p).node
            runs = torch._C._will_engine_execute_node(node)
        except RuntimeError:  # torch.autograd.grad: .grad is not written
            return {}
        if runs:
            into[i] = g
    return into


def _device_of(values):
    devs = {v.device for v in values if torch.is_tensor(v)}
    if len(devs) > 1:
        raise RuntimeError("memgrad.torch: inputs and parameters must be on "
                           "one device, not %s" % sorted(map(str, devs)))
    return next(iter(devs)) if devs else torch.device("cpu")


def _hooks(module):
    """The first module with a hook memgrad would not run, or None."""
    for name, m in module.named_modules():
        for attr in ("_forward_hooks", "_forward_pre_hooks",
                     "_backward_hooks", "_backward_pre_hooks"):
            if getattr(m, attr, None):
                return name or type(module).__name__, attr.strip("_")
    return None


def capture_module(module, args, kwargs, policy="memory", budget_bytes=0,
                   compact=False, store16=False, offload=None):
    """A Captured of module(*args, **kwargs) in its current mode, and the
    kwargs it was captured with."""
    ep, kwargs = export(module, args, kwargs)
    flat_user = flatten_inputs(ep.call_spec.in_spec, args, kwargs)
    sig = ep.graph_signature
    leaves, k = [], 0
    for spec in sig.input_specs:
        name = spec.target or spec.arg.name
        if spec.kind == InputKind.PARAMETER:
            leaves.append(_Leaf("param", name,
                                lambda u, n=name: module.get_parameter(n)))
        elif spec.kind == InputKind.BUFFER:
            leaves.append(_Leaf("buffer", name,
                                lambda u, n=name: module.get_buffer(n)))
        elif spec.kind == InputKind.CONSTANT_TENSOR:
            c = ep.constants[spec.target]
            leaves.append(_Leaf("const", name, lambda u, c=c: c))
        elif spec.kind == InputKind.USER_INPUT:
            leaves.append(_Leaf("input", spec.arg.name,
                                lambda u, k=k: u[k]))
            k += 1
        else:
            raise Unsupported(type(module).__name__, [(
                "input kind %s" % spec.kind, 1, [name], "not supported")])
    out_kinds = []
    for spec in sig.output_specs:
        if spec.kind == OutputKind.USER_OUTPUT:
            out_kinds.append(("user", None))
        elif spec.kind == OutputKind.BUFFER_MUTATION:
            out_kinds.append(("buffer", spec.target))
        elif spec.kind == OutputKind.USER_INPUT_MUTATION:
            out_kinds.append(("input", spec.target))
        else:
            raise Unsupported(type(module).__name__, [(
                "output kind %s" % spec.kind, 1, [str(spec.target)],
                "not supported")])
    cap = Captured(type(module).__name__, ep.graph_module, leaves,
                   out_kinds, ep.call_spec.out_spec, flat_user, policy,
                   budget_bytes, compact, store16, offload=offload)
    cap.in_spec = ep.call_spec.in_spec
    cap.user_input_names = [s.arg.name for s in sig.input_specs
                            if s.kind == InputKind.USER_INPUT]
    return cap, kwargs


def offload_rates(policy, offload, host_bandwidth, compute_rate, what):
    """None, or (host_bandwidth, compute_rate) for offload=True under
    policy "budget" (both rates > 0); ValueError naming what is wrong."""
    if not offload:
        if host_bandwidth or compute_rate:
            raise ValueError("%s: host_bandwidth and compute_rate go with "
                             "offload=True" % what)
        return None
    if policy != "budget":
        raise ValueError("%s: offload=True goes with policy='budget', not "
                         "%r" % (what, policy))
    rates = []
    for name, v in (("host_bandwidth", host_bandwidth),
                    ("compute_rate", compute_rate)):
        v = float(v or 0)
        if not v > 0 or v == float("inf"):
            raise ValueError("%s: offload=True needs %s > 0 (%s), not %r"
                             % (what, name, "bytes/s" if name[0] == "h"
                                else "flops/s", v))
        rates.append(v)
    return tuple(rates)


def flatten_inputs(spec, args, kwargs):
    """The call's inputs flattened as export flattened the example's."""
    return fx_pytree.tree_flatten_spec((tuple(args), dict(kwargs)), spec)


def call(cap, values, seed):
    """Run cap on this call's leaf values; returns (user outputs in the
    module's structure, and applies buffer and input mutations)."""
    res = _Run.apply(cap, seed, *values)
    ny, nf = len(cap.ys), len(getattr(cap, "forward_only", ()))
    ys, fwd, extra = res[:ny], res[ny:ny + nf], res[ny + nf:]
    env = None
    if any(slot[0] == "torch" for slot in cap.out_plan) or any(
            slot[0] == "torch" for _, _, slot in cap.mutations):
        env = cap.run_prologue(values)
    outs = []
    for slot in cap.out_plan:
        outs.append(ys[slot[1]] if slot[0] == "y" else
                    fwd[slot[1]] if slot[0] == "fwd" else
                    extra[slot[1]] if slot[0] == "extra" else slot[1](env))
    return outs, extra, env


class Module(torch.nn.Module):
    """`module` run through memgrad's ATen capture; its parameters and
    buffers stay its own. policy: "none", "memory", "speed" or "budget"
    (with budget_bytes, mg_checkpoints.budget_bytes). offload=True, with
    policy "budget", host_bandwidth (bytes/s) and compute_rate (flops/s),
    lets the budget choose host offload of saved tensors beside
    recomputation (mg_checkpoints.offload, docs/offload.md): the plan
    copies the chosen tensors to the host tier after their producer and
    back before their first backward reader, and report() lists them, their
    bytes and the overlap predicted (CPU only for now). example_inputs
    (and example_kwargs) are captured at construction so that an error
    shows here; any later call with other shapes, another mode
    (train/eval) or other parameters requiring grad plans again.

    A parameter's gradient is computed into torch memory that becomes its
    .grad, or into its .grad itself where it has one (added into it, as
    autograd would). grads_in_place=False hands every gradient to
    autograd's AccumulateGrad instead (hooks on AccumulateGrad nodes,
    which memgrad cannot see, then see a gradient: DDP's do)."""

    MAX_PLANS = 8

    def __init__(self, module, example_inputs=(), policy="memory",
                 budget_bytes=None, compact=False, store16=False,
                 example_kwargs=None, grads_in_place=True, offload=False,
                 host_bandwidth=None, compute_rate=None, _captures=()):
        super().__init__()
        if policy == "budget" and not budget_bytes:
            raise ValueError("memgrad.torch.Module: policy='budget' needs "
                             "budget_bytes")
        if budget_bytes and policy != "budget":
            raise ValueError("memgrad.torch.Module: budget_bytes goes with "
                             "policy='budget', not %r" % policy)
        rates = offload_rates(policy, offload, host_bandwidth, compute_rate,
                              "memgrad.torch.Module")
        self.module = module
        self._opts = dict(policy=policy, budget_bytes=int(budget_bytes or 0),
                          compact=bool(compact), store16=bool(store16),
                          offload=rates)
        self._grads_in_place = bool(grads_in_place)
        self._plans = collections.OrderedDict(_captures)
        self._example = (tuple(example_inputs), dict(example_kwargs or {}))
        self._cap = self._plan_for(*self._example)

    def _key(self, args, kwargs):
        flat = pytree.tree_leaves((args, kwargs))
        sig = tuple((tuple(v.shape), v.dtype, v.requires_grad, v.device.type)
                    if torch.is_tensor(v) else ("const", repr(v))
                    for v in flat)
        modes = tuple(m.training for m in self.module.modules())
        grads = tuple(p.requires_grad for p in self.module.parameters())
        dts = tuple({p.dtype for p in self.module.parameters()})
        return (sig, tuple(sorted(kwargs)), modes, grads, dts,
                autocast_state())

    def _plan_for(self, args, kwargs):
        hook = _hooks(self.module)
        if hook is not None:
            raise NotImplementedError(
                "memgrad.torch: %s has a %s; memgrad runs the captured "
                "graph, not Python hooks, so it would not run. Remove the "
                "hook, or run that module outside memgrad.torch.Module"
                % hook)
        key = self._key(args, kwargs)
        cap = self._plans.get(key)
        if cap is None:
            cap, fixed = capture_module(self.module, args, kwargs,
                                        **self._opts)
            cap.extra_kwargs = {k: v for k, v in fixed.items()
                                if k not in kwargs}
            cap.grads_in_place = self._grads_in_place
            self._plans[key] = cap
            while len(self._plans) > self.MAX_PLANS:
                self._plans.popitem(last=False)
        else:
            self._plans.move_to_end(key)
        return cap

    # the plan of the last call (the example's until the first call)
    @property
    def plan(self):
        return self._cap.plan_for(self._device())

    @property
    def executor(self):
        return self._cap.executor_for(self._device())

    def _device(self):
        for p in self.module.parameters():
            return p.device
        return torch.device("cpu")

    @property
    def predicted_peak(self):
        """The pool peak a training step is predicted to reach, with the
        gradients in PyTorch's memory (as the call binds them). A step
        that adds a gradient into a .grad holding other values than zeros
        also uses the executor's accumulation slot (accumulation_slot
        bytes, in use only while such a gradient is computed). A fused
        loss's logits are in PyTorch's memory too (bound as the call binds
        them)."""
        cap = self._cap
        bound = [t for t in cap.grads if t not in cap.seeds] + \
            list(getattr(cap, "forward_only", ()))
        pk = self.plan.phase_peaks(bound=bound)
        return max(pk["forward"], pk["backward"])

    @property
    def accumulation_slot(self):
        """The pool block gradients are added into .grad through: the
        size class of the largest gradient so added by this module's
        executor (0 while none was: a .grad that is None or all zeros is
        written, not added into)."""
        return getattr(self.executor, "accumulation_slot", 0)

    def report(self):
        return self.plan.report()

    def forward(self, *args, **kwargs):
        cap = self._plan_for(args, kwargs)
        self._cap = cap
        kwargs = dict(kwargs, **cap.extra_kwargs)
        flat = flatten_inputs(cap.in_spec, args, kwargs)
        values = [lf.get(flat) for lf in cap.leaves]
        seed = 0
        if cap.n_random:
            seed = int(torch.randint(0, 2 ** 62, (1,)).item())
        outs, extra, env = call(cap, values, seed)
        with torch.no_grad():
            for kind, target, slot in cap.mutations:
                v = (extra[slot[1]] if slot[0] == "extra" else slot[1](env))
                if kind == "buffer":
                    self.module.get_buffer(target).copy_(v)
                else:
                    i = cap.user_input_names.index(target)
                    flat_inputs = [v for v in flat]
                    flat_inputs[i].copy_(v)
        return pytree.tree_unflatten(outs, cap.out_spec)

    def with_policy(self, policy, budget_bytes=None, offload=False,
                    host_bandwidth=None, compute_rate=None):
        """Another wrapper of the same module (its parameters shared)
        under another policy and budget (and offload, as the
        constructor takes it), planned from this wrapper's captures
        instead of a new torch.export: comparing policies on one model
        costs one export."""
        rates = offload_rates(policy, offload, host_bandwidth, compute_rate,
                              "memgrad.torch.Module.with_policy")
        caps = [(key, cap.with_options(policy, int(budget_bytes or 0),
                                       rates))
                for key, cap in self._plans.items()]
        args, kwargs = self._example
        return Module(self.module, args, example_kwargs=kwargs,
                      grads_in_place=self._grads_in_place,
                      **dict(self._wrapper_opts(), policy=policy,
                             budget_bytes=budget_bytes, offload=offload,
                             host_bandwidth=host_bandwidth,
                             compute_rate=compute_rate),
                      _captures=caps)

    def _wrapper_opts(self):
        """The constructor's options this wrapper was made with."""
        o = dict(self._opts)
        rates = o.pop("offload")
        if rates:
            o.update(offload=True, host_bandwidth=rates[0],
                     compute_rate=rates[1])
        return o

    def __deepcopy__(self, memo):
        # a copy of the wrapped module, captured anew (plans and
        # executors hold memgrad memory of their own and are not copied)
        args, kwargs = self._example
        return Module(copy.deepcopy(self.module, memo), args,
                      example_kwargs=kwargs,
                      grads_in_place=self._grads_in_place,
                      **self._wrapper_opts())

    def __getstate__(self):
        raise TypeError(
            "memgrad.torch.Module cannot be pickled (it holds memgrad plans "
            "and executors); save the wrapped module's state_dict() "
            "(wrapper.module.state_dict()) and wrap it again after loading")


__all__ = ["Module", "MemgradError"]
