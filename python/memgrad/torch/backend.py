"""torch.compile(model, backend="memgrad"): a dynamo backend.

Dynamo splits the model at graph breaks and hands each captured graph
here. Each graph is captured at the ATen level (capture.py) and runs
forward and backward in memgrad under the policy; a graph memgrad cannot
map runs as dynamo gave it, in eager PyTorch, so no model is refused.
`report()` says, for every graph compiled so far, where it ran, why, and
how many bytes memgrad kept for its backward.

    torch.compile(model, backend="memgrad")            # policy "memory"
    torch.compile(model, backend=memgrad.torch.backend.make(policy="none"))
"""
import warnings

import torch
from torch.export.graph_signature import InputKind, OutputKind

from .capture import Captured, Unsupported, export
from .module import call

_REPORT = []


def report():
    """One dict per graph dynamo handed the backend, in order: {"graph":
    its number, "ran": "memgrad" or "eager", "nodes": its ATen nodes,
    "reason": why it ran in eager (None when in memgrad),
    "saved_bytes": what memgrad's forward keeps for the backward (0 in
    eager), "policy"}."""
    return [dict(r) for r in _REPORT]


def reset_report():
    del _REPORT[:]


def make(policy="memory", budget_bytes=0, compact=False):
    """A backend function with these options, for torch.compile's
    backend= argument."""
    def memgrad_backend(gm, example_inputs, **kwargs):
        return _compile(gm, example_inputs, policy, budget_bytes, compact)
    return memgrad_backend


def _compile(gm, example_inputs, policy, budget_bytes, compact):
    row = {"graph": len(_REPORT), "ran": "eager", "nodes": 0,
           "reason": None, "saved_bytes": 0, "policy": policy}
    _REPORT.append(row)
    if not all(torch.is_tensor(x) for x in example_inputs):
        row["reason"] = "inputs other than tensors (symbolic sizes)"
        return gm.forward
    try:
        cap = _capture(gm, list(example_inputs), policy, budget_bytes,
                       compact)
    except Unsupported as e:
        row["reason"] = str(e)
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

    def run(*args):
        values = [lf.get(args) for lf in cap.leaves]
        seed = int(torch.randint(0, 2 ** 62, (1,)).item()) \
            if cap.n_random else 0
        outs, extra, env = call(cap, values, seed)
        with torch.no_grad():
            for kind, target, slot in cap.mutations:
                v = extra[slot[1]] if slot[0] == "extra" else slot[1](env)
                args[cap.user_input_names.index(target)].copy_(v)
        return tuple(outs) if len(outs) != 1 or cap.out_tuple else outs[0]
    return run


class _ArgLeaf:
    """Placeholder k of the dynamo graph: argument k of each call."""

    def __init__(self, kind, name, k):
        self.kind, self.name, self.k = kind, name, k

    def get(self, args=None):
        return args[self.k]


class _ConstLeaf:
    """A parameter, buffer or constant the graph module holds."""

    def __init__(self, name, c):
        self.kind, self.name, self.c = "const", name, c

    def get(self, args=None):
        return self.c


def _capture(gm, example_inputs, policy, budget_bytes, compact):
    ep, _ = export(gm, example_inputs, {})
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
    _Holder.args = example_inputs
    cap = Captured("a dynamo graph", ep.graph_module,
                   [_Bound(lf) for lf in leaves], out_kinds,
                   ep.call_spec.out_spec, policy, budget_bytes, compact)
    cap.leaves = leaves
    cap.user_input_names = [s.arg.name for s in sig.input_specs
                            if s.kind == InputKind.USER_INPUT]
    # dynamo's graphs return a tuple (or a list) of their outputs
    cap.out_tuple = True
    return cap


class _Holder:
    args = None


class _Bound:
    """A leaf bound to the example inputs while the capture builds."""

    def __init__(self, leaf):
        self.kind, self.name, self.leaf = leaf.kind, leaf.name, leaf

    def get(self, args=None):
        return self.leaf.get(_Holder.args)


try:
    from torch._dynamo import register_backend

    @register_backend(name="memgrad")
    def memgrad(gm, example_inputs, **kwargs):
        """torch.compile(model, backend="memgrad"): policy "memory"."""
        return _compile(gm, example_inputs, "memory", 0, False)
except ImportError:  # no dynamo
    pass
