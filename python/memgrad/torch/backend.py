"""torch.compile(model, backend="memgrad"): a dynamo backend.

Dynamo splits the model at graph breaks and hands each captured graph
here. Each graph is captured at the ATen level (capture.py) and runs
forward and backward in memgrad under the policy. A graph with ATen ops
memgrad does not map runs in pieces: torch.fx's capability partitioner
finds the runs of mapped nodes, each becomes a memgrad capture of its
own, and the nodes between them run in eager PyTorch (ATen ops under
autograd). Where nothing can be mapped, the graph runs as dynamo gave
it. No model is refused.
`report()` says, for every graph compiled so far, where it ran, why, and
how many bytes memgrad kept for its backward.

    torch.compile(model, backend="memgrad")            # policy "memory"
    torch.compile(model, backend=memgrad.torch.backend.make(policy="none"))
"""
import warnings

import torch
from torch.export.graph_signature import InputKind, OutputKind
from torch.utils import _pytree as pytree

from .capture import Captured, Unsupported, export
from .module import call, offload_rates

_REPORT = []


def report():
    """One dict per graph dynamo handed the backend, in order: {"graph":
    its number, "ran": "memgrad", "pieces" (then "pieces": how many) or
    "eager", "nodes": the ATen nodes memgrad runs,
    "reason": why it ran in eager (None when in memgrad),
    "saved_bytes": what memgrad's forward keeps for the backward (0 in
    eager), "policy", "offloaded": with offload, what the plan offloads
    (Plan.offload(): tensors, bytes, host tier and the overlap
    predicted), else None}."""
    return [dict(r) for r in _REPORT]


def reset_report():
    del _REPORT[:]


def make(policy="memory", budget_bytes=0, compact=False, offload=False,
         host_bandwidth=None, compute_rate=None):
    """A backend function with these options, for torch.compile's
    backend= argument. offload=True (policy "budget", with host_bandwidth
    in bytes/s and compute_rate in flops/s) lets the budget offload saved
    tensors to the host tier as well as recompute them, as
    memgrad.torch.Module takes it (docs/offload.md)."""
    rates = offload_rates(policy, offload, host_bandwidth, compute_rate,
                          "memgrad.torch.backend.make")

    def memgrad_backend(gm, example_inputs, **kwargs):
        return _compile(gm, example_inputs, policy, budget_bytes, compact,
                        rates)
    return memgrad_backend


def _compile(gm, example_inputs, policy, budget_bytes, compact,
             offload=None):
    row = {"graph": len(_REPORT), "ran": "eager", "nodes": 0,
           "reason": None, "saved_bytes": 0, "policy": policy,
           "offloaded": None}
    _REPORT.append(row)
    if not all(torch.is_tensor(x) for x in example_inputs):
        row["reason"] = "inputs other than tensors (symbolic sizes)"
        return gm.forward
    try:
        cap = _capture(gm, list(example_inputs), policy, budget_bytes,
                       compact, offload)
    except Unsupported as e:
        row["reason"] = str(e)
        try:
            return _pieces(gm, list(example_inputs), policy, budget_bytes,
                           compact, row, offload)
        except Exception as e2:  # noqa: BLE001 - eager is always correct
            row["reason"] += "\n(in pieces: %s: %s)" % (type(e2).__name__,
                                                         e2)
            return gm.forward
    except Exception as e:  # noqa: BLE001 - eager is always correct
        row["reason"] = "%s: %s" % (type(e).__name__, e)
        warnings.warn("memgrad: graph %d runs in eager PyTorch: %s"
                      % (row["graph"], row["reason"].splitlines()[0]),
                      stacklevel=2)
        return gm.forward
    row["ran"] = "memgrad"
    row["nodes"] = sum(1 for n in cap.gm.graph.nodes
                       if n.op == "call_function")
    try:
        row["saved_bytes"] = cap.plan_for("cpu").phase_peaks(
            bound=[t for t in cap.grads if t not in cap.seeds])["saved"]
    except Exception:  # noqa: BLE001 - a figure for the report only
        pass
    if offload is not None:
        row["offloaded"] = cap.plan_for("cpu").offload()

    def run(*args):
        values = [lf.get(args) for lf in cap.leaves]
        seed = int(torch.randint(0, 2 ** 62, (1,)).item()) \
            if cap.n_random else 0
        outs, extra, env = call(cap, values, seed)
        with torch.no_grad():
            for kind, target, slot in cap.mutations:
                v = extra[slot[1]] if slot[0] == "extra" else slot[1](env)
                args[cap.user_input_names.index(target)].copy_(v)
        return pytree.tree_unflatten(outs, cap.out_spec)
    return run


def _leaves(gm, ep, example_inputs):
    """Where each placeholder of ep's graph comes from on a call."""
    sig = ep.graph_signature
    names = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    leaves, k = [], 0
    for spec in sig.input_specs:
        name = spec.target or spec.arg.name
        if spec.kind == InputKind.USER_INPUT:
            x = example_inputs[k]
            # dynamo lifts the module's parameters and buffers to inputs
            # (L_self_modules_bn_buffers_running_mean_, say): buffers go
            # to the prologue, as in Module
            kind = "param" if isinstance(x, torch.nn.Parameter) else \
                "buffer" if "_buffers_" in names[k] else "input"
            leaves.append(_ArgLeaf(kind, spec.arg.name, k))
            k += 1
        elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER):
            leaves.append(_ConstLeaf(name, gm.get_parameter(name)
                                     if spec.kind == InputKind.PARAMETER
                                     else gm.get_buffer(name)))
        elif spec.kind == InputKind.CONSTANT_TENSOR:
            leaves.append(_ConstLeaf(name, ep.constants[spec.target]))
        else:
            raise Unsupported("a dynamo graph", [(
                "input kind %s" % spec.kind, 1, [name], "not supported")])
    return leaves


class _Piece(torch.nn.Module):
    """A run of mapped ATen nodes of a graph that also holds unmapped
    ones: its own memgrad capture, called where the nodes were."""

    def __init__(self, cap, single):
        super().__init__()
        self.cap, self.single = cap, single

    def forward(self, *args):
        cap = self.cap
        seed = int(torch.randint(0, 2 ** 62, (1,)).item()) \
            if cap.n_random else 0
        outs, _, _ = call(cap, list(args), seed)
        return outs[0] if self.single else tuple(outs)


def _pieces(gm, example_inputs, policy, budget_bytes, compact, row,
            offload=None):
    """The graph in pieces: the ATen nodes memgrad maps, in runs that
    torch.fx's capability partitioner finds, each run captured on its
    own; the nodes between them run in eager PyTorch (ATen ops under
    autograd). Raises where no piece can be made."""
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    from torch.fx.passes.operator_support import OperatorSupport
    from . import aten

    ep, _ = export(gm, example_inputs, {})
    leaves = _leaves(gm, ep, example_inputs)
    agm = ep.graph_module

    class Mapped(OperatorSupport):
        def is_node_supported(self, submodules, node):
            return node.op == "call_function" and aten.supported(node)
    part = CapabilityBasedPartitioner(agm, Mapped(),
                                      allows_single_node_partition=False)
    fused = part.fuse_partitions(part.propose_partitions())
    # each piece's example inputs, with autograd on so that requires_grad
    # says which of them need a gradient
    seen = {}

    class Record(torch.fx.Interpreter):
        def call_module(self, target, args, kwargs):
            seen.setdefault(target, args)
            return super().call_module(target, args, kwargs)
    values = [lf.get(example_inputs) for lf in leaves]
    with torch.enable_grad():
        Record(fused).run(*values)
    n_pieces, pieces = 0, []
    for name, args in seen.items():
        sub = getattr(fused, name)
        out = [n for n in sub.graph.nodes if n.op == "output"][0].args[0]
        single = not isinstance(out, (tuple, list))
        n_out = 1 if single else len(out)
        kinds = [("user", None)] * n_out
        pleaves = [_ArgLeaf("param" if isinstance(a, torch.nn.Parameter)
                            else "input", "%s.in%d" % (name, i), i)
                   for i, a in enumerate(args)]
        try:
            cap = Captured("piece %s" % name, _as_tuple_out(sub), pleaves,
                           kinds, None, list(args), policy, budget_bytes,
                           compact, offload=offload)
        except Exception:  # noqa: BLE001 - the piece stays in eager
            continue
        setattr(fused, name, _Piece(cap, single))
        n_pieces += 1
        pieces.append(sum(1 for n in sub.graph.nodes
                          if n.op == "call_function"))
    if not n_pieces:
        raise Unsupported("a dynamo graph", [("pieces", 0, ["graph"],
                                              "no piece memgrad can run")])
    row["ran"] = "pieces"
    row["nodes"] = sum(pieces)
    row["pieces"] = n_pieces
    sig = ep.graph_signature
    mutated = [(i, s.target) for i, s in enumerate(sig.output_specs)
               if s.kind == OutputKind.USER_INPUT_MUTATION]
    user = [i for i, s in enumerate(sig.output_specs)
            if s.kind == OutputKind.USER_OUTPUT]
    in_names = [s.arg.name for s in sig.input_specs
                if s.kind == InputKind.USER_INPUT]

    def run(*args):
        res = fused(*[lf.get(args) for lf in leaves])

        if not isinstance(res, (tuple, list)):
            res = (res,)
        with torch.no_grad():
            for i, target in mutated:
                args[in_names.index(target)].copy_(res[i])
        return pytree.tree_unflatten([res[i] for i in user],
                                     ep.call_spec.out_spec)
    return run


def _as_tuple_out(sub):
    """A copy of sub whose output node returns a tuple (of one element or
    more), as Captured reads outputs; sub itself stays as it is, to run
    in eager if the capture fails."""
    import copy
    graph = copy.deepcopy(sub.graph)
    out = [n for n in graph.nodes if n.op == "output"][0]
    if not isinstance(out.args[0], (tuple, list)):
        out.args = ((out.args[0],),)
    return torch.fx.GraphModule(sub, graph)


class _ArgLeaf:
    """Placeholder k of the dynamo graph: argument k of each call."""

    def __init__(self, kind, name, k):
        self.kind, self.name, self.k = kind, name, k

    def get(self, args):
        return args[self.k]


class _ConstLeaf:
    """A parameter, buffer or constant the graph module holds."""

    def __init__(self, name, c):
        self.kind, self.name, self.c = "const", name, c

    def get(self, args):
        return self.c


def _capture(gm, example_inputs, policy, budget_bytes, compact,
             offload=None):
    ep, _ = export(gm, example_inputs, {})
    sig = ep.graph_signature
    leaves = _leaves(gm, ep, example_inputs)
    out_kinds = []
    for spec in sig.output_specs:
        if spec.kind == OutputKind.USER_OUTPUT:
            out_kinds.append(("user", None))
        elif spec.kind == OutputKind.USER_INPUT_MUTATION:
            out_kinds.append(("input", spec.target))
        else:
            raise Unsupported("a dynamo graph", [(
                "output kind %s" % spec.kind, 1, [str(spec.target)],
                "not supported")])
    cap = Captured("a dynamo graph", ep.graph_module, leaves, out_kinds,
                   ep.call_spec.out_spec, example_inputs, policy,
                   budget_bytes, compact, offload=offload)
    cap.user_input_names = [s.arg.name for s in sig.input_specs
                            if s.kind == InputKind.USER_INPUT]
    return cap


try:
    from torch._dynamo import register_backend

    @register_backend(name="memgrad")
    def memgrad(gm, example_inputs, **kwargs):
        """torch.compile(model, backend="memgrad"): policy "memory"."""
        return _compile(gm, example_inputs, "memory", 0, False)
except ImportError:  # no dynamo
    pass
