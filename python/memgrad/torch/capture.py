"""The capture: a PyTorch 2 module (or a dynamo graph) into a memgrad graph,
through torch.export and the core ATen decompositions.

torch.export traces the module's Python once, on the example inputs, into
a graph of core ATen ops (aten.py maps each onto memgrad's builder). The
graph is split in two:

- the prologue: every node that reads no parameter and no float input
  (position ids, causal and padding masks, rotary tables, integer
  buffers). It runs in PyTorch on every call, so buffers and integer
  inputs are read anew each time, and its results are fed to memgrad as
  inputs. It costs little and nothing in it needs a gradient.
- the body: everything that reads a parameter or a float input. It is
  mapped to one memgrad graph, differentiated, checkpointed and planned.

Nothing is refused silently: a body node with no table entry makes
Unsupported, which names every such op and where it is (the compile
backend then runs the graph, or that piece of it, in eager PyTorch).
"""
import contextlib
import inspect
import logging
import operator
import warnings

import torch

from .. import Graph, Tensor, _lib
from . import aten, fuse_loss
from ._devices import PerDevice

_FLOAT = {torch.float32: "float32", torch.float64: "float64",
          torch.bfloat16: "bfloat16", torch.float16: "float16"}


class Unsupported(NotImplementedError):
    """The body holds nodes memgrad cannot map; rows: [(op, count, where,
    reason)]."""

    def __init__(self, what, rows):
        self.rows = rows
        lines = ["memgrad.torch cannot capture %s:" % what]
        for op, n, where, reason in rows:
            lines.append("  %s x%d at %s%s" % (op, n, ", ".join(where[:3]),
                                               (": " + reason) if reason
                                               else ""))
        super().__init__("\n".join(lines))


@contextlib.contextmanager
def quiet():
    """torch.export's progress lines off; warnings stay warnings."""
    names = ("torch._export", "torch.export", "torch._dynamo",
             "torch.fx.experimental.symbolic_shapes", "torch._subclasses",
             "torch._functorch", "torch._inductor")
    saved = [(logging.getLogger(n), logging.getLogger(n).level)
             for n in names]
    for lg, _ in saved:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in saved:
            lg.setLevel(level)


_AUTOCAST_DEVICES = ("cpu", "cuda")


def autocast_state():
    """torch.autocast's state where a capture is made: (device, dtype)
    of each device it is on for. A forward called under autocast exports
    to another graph (its casts written out), so plans are kept per
    state."""
    return tuple((d, torch.get_autocast_dtype(d))
                 for d in _AUTOCAST_DEVICES if torch.is_autocast_enabled(d))


@contextlib.contextmanager
def no_autocast():
    """Autocast off while PyTorch runs nodes of a captured graph (the
    prologue): the graph has autocast's casts written out already, and
    autocast would cast its nodes' operands a second time."""
    with contextlib.ExitStack() as stack:
        for d in _AUTOCAST_DEVICES:
            if torch.is_autocast_enabled(d):
                stack.enter_context(torch.autocast(d, enabled=False))
        yield


def decomposition_table():
    """Core ATen decompositions, less the ops memgrad maps whole
    (scaled_dot_product_attention onto its fused attention)."""
    tab = torch.export.default_decompositions()
    for op in (torch.ops.aten.scaled_dot_product_attention.default,):
        tab.pop(op, None)
    return tab


def export(module, args, kwargs):
    """torch.export of module(*args, **kwargs), decomposed to core ATen.
    A Hugging Face model that returns its key/value cache (which export
    cannot return) is captured with use_cache=False, as it trains. A
    model torch.export cannot trace raises Unsupported, which says why
    and where in the model's own code (the exporter's error is its
    __cause__)."""
    try:
        return _export(module, args, kwargs)
    except Unsupported:
        raise
    except Exception as e:  # noqa: BLE001 - said again in memgrad's terms
        raise Unsupported(type(module).__name__, [_export_failure(e)]) \
            from e


def _export_failure(e):
    """(what, 1, [where], why) for an exception from torch.export: where
    is the innermost frame of the traceback outside torch itself (the
    model's line that export could not trace)."""
    import traceback
    from torch.fx.experimental.symbolic_shapes import \
        GuardOnDataDependentSymNode
    where, cause, err = "forward", None, e
    while err is not None:
        frames = [f for f in traceback.extract_tb(err.__traceback__)
                  if "/torch/" not in f.filename.replace("\\", "/")]
        if frames:
            f = frames[-1]
            where = "%s:%d (%s)" % (f.filename.rsplit("/", 1)[-1], f.lineno,
                                    f.line or f.name)
        if isinstance(err, GuardOnDataDependentSymNode):
            cause = err
        err = err.__cause__ or err.__context__
    if cause is not None or "data-dependent" in str(e):
        return ("data-dependent control flow", 1, [where],
                "a branch or a shape decided by a tensor's values (a "
                "mixture of experts' routing, say) cannot be one static "
                "memgrad graph; torch.compile(model, backend=\"memgrad\") "
                "runs such parts in eager PyTorch and the rest in memgrad")
    first = (str(e).strip().splitlines() or [type(e).__name__])[0]
    return ("torch.export", 1, [where], "%s: %s" % (type(e).__name__,
                                                    first[:300]))


def _enter_autocast(*vals):
    """torch.amp.autocast_mode._enter_autocast as a `with torch.autocast`
    statement enters: the state is set and export's tracer told. (The
    function itself, as dynamo writes it into its graphs, only tells the
    tracer, which then records a float32 graph that the autocast region
    export makes of it contradicts.)"""
    mode = torch.autocast(*vals)
    mode.__enter__()
    return mode


def _exit_autocast(mode):
    mode.__exit__(None, None, None)


def _with_autocast_statements(module):
    """A dynamo graph whose autocast regions (_enter_autocast and
    _exit_autocast nodes) export can trace: a copy calling the functions
    above; module itself where it has none (or is no graph module)."""
    from torch.amp import autocast_mode as am
    swap = {am._enter_autocast: _enter_autocast,
            am._exit_autocast: _exit_autocast}
    if not isinstance(module, torch.fx.GraphModule) or not any(
            n.op == "call_function" and n.target in swap
            for n in module.graph.nodes):
        return module
    import copy
    graph = copy.deepcopy(module.graph)
    for n in graph.nodes:
        if n.op == "call_function" and n.target in swap:
            n.target = swap[n.target]
    return torch.fx.GraphModule(module, graph)


def _export(module, args, kwargs):
    module = _with_autocast_statements(module)
    with quiet(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", module="torch")
        try:
            ep = torch.export.export(module, tuple(args), dict(kwargs),
                                     strict=False)
        except Exception as e:  # noqa: BLE001
            accepts = "use_cache" in _params_of(module)
            if not accepts or "use_cache" in kwargs or \
                    "not a known type" not in str(e):
                raise
            kwargs = dict(kwargs, use_cache=False)
            ep = torch.export.export(module, tuple(args), kwargs,
                                     strict=False)
        return ep.run_decompositions(decomposition_table()), kwargs


def _params_of(module):
    try:
        return inspect.signature(module.forward).parameters
    except (TypeError, ValueError):
        return {}


class _Leaf:
    """Where a placeholder's value comes from on each call: get(inputs)
    with the call's flat inputs (a parameter or buffer of the module, a
    constant, or one of the inputs). kind: "param", "buffer", "const" or
    "input"."""

    def __init__(self, kind, name, get):
        self.kind, self.name, self.get = kind, name, get


class Captured(PerDevice):
    """One module's memgrad graph and plan for one input signature and
    mode. Built from an ExportedProgram's graph module (gm), where each
    placeholder's value comes from (leaves), the kind of each output, and
    the example's flat inputs."""

    def __init__(self, name, gm, leaves, out_kinds, out_spec, inputs,
                 policy="none", budget_bytes=0, compact=False,
                 store16=False, example=None, offload=None):
        self.module_name = name
        # example: the leaf values themselves (with_options), in place of
        # inputs to read them from
        self._example_values = example
        self.gm, self.leaves = gm, leaves
        self._inputs = inputs
        self.out_kinds, self.out_spec = out_kinds, out_spec
        self.policy, self.budget_bytes = policy, int(budget_bytes or 0)
        self._compact, self._store16 = compact, store16
        # None, or (host_bandwidth, compute_rate): policy "budget" may
        # offload saved tensors (mg_checkpoints.offload), and the plans
        # offload what it chose at these rates (plan_for)
        self.offload = offload
        self.offload_tensors = []
        self.n_random = 0
        self.plans, self.executors = {}, {}
        self._build()

    # ---------------------------------------------------------- building
    def _build(self):
        nodes = list(self.gm.graph.nodes)
        ph = [n for n in nodes if n.op == "placeholder"]
        ex = self.example = list(self._example_values) \
            if self._example_values is not None else \
            [lf.get(self._inputs) for lf in self.leaves]
        self._example_values = None
        self._inputs = None
        if len(ph) != len(ex):
            raise RuntimeError("memgrad.torch: %d placeholders and %d inputs"
                               % (len(ph), len(ex)))
        floats = [v for v in ex if torch.is_tensor(v) and
                  v.dtype in _FLOAT]
        if not floats:
            raise Unsupported(self.module_name, [(
                "inputs", 1, ["forward"],
                "no float parameter or input to compute in")])
        dts = {v.dtype for v in floats if v.is_floating_point()}
        self.torch_dtype = floats[0].dtype
        if len(dts) > 1:
            raise Unsupported(self.module_name, [(
                "dtypes", 1, ["forward"],
                "%s mixed; memgrad's graph computes in "
                "one float dtype (convert the model and inputs with "
                ".float() or .double())"
                % " and ".join(sorted(str(d) for d in dts)))])
        other = [v.dtype for v in ex if torch.is_tensor(v) and
                 v.is_floating_point() and v.dtype not in _FLOAT]
        if other:
            raise Unsupported(self.module_name, [(
                "dtype %s" % other[0], 1, ["forward"],
                "memgrad computes in float32 and float64 (16-bit dtypes "
                "are not supported yet)")])
        self.dtype = _FLOAT[self.torch_dtype]
        self._number_dtype = self.dtype
        # body: reads a float placeholder, transitively
        body = set()
        for n, v, lf in zip(ph, ex, self.leaves):
            # parameters and float inputs; buffers and constants are
            # read by the prologue, anew on every call
            if torch.is_tensor(v) and v.dtype in _FLOAT and \
                    lf.kind in ("param", "input"):
                body.add(n)
        for n in nodes:
            if n.op == "call_function" and any(
                    a in body for a in n.all_input_nodes):
                body.add(n)
        self._body = body
        out_node = nodes[-1]
        outs = list(out_node.args[0])
        # final projections with their cross-entropy: one fused op each,
        # which reads h and w only (fuse_loss.py)
        self.fused_losses = {m.loss: m for m in fuse_loss.find(nodes, body)}
        forward_only = {o for m in self.fused_losses.values()
                        for o in m.outputs}
        # which body nodes the outputs need
        need, todo = set(), [a for a in outs
                             if isinstance(a, torch.fx.Node) and a in body]
        while todo:
            n = todo.pop()
            if n in need:
                continue
            need.add(n)
            m = self.fused_losses.get(n)
            reads = [m.h, m.w] if m is not None else n.all_input_nodes
            todo.extend(a for a in reads if a in body)
        bad = {}
        for n in nodes:
            if n in need and n.op == "call_function" and \
                    not aten.supported(n):
                key = str(n.target)
                bad.setdefault(key, []).append(_where(n))
        if bad:
            raise Unsupported(self.module_name, [
                (k, len(v), v, "no memgrad mapping") for k, v in bad.items()])
        g = self.graph = Graph()
        self.feeds_from = []  # (memgrad tensor, fn(env) -> torch tensor)
        self._origin = {}  # id(torch value) -> prologue node
        env = {}
        self.prologue = []  # prologue nodes, in order
        self.leaf_tensors = {}  # placeholder index -> memgrad tensor
        for i, (n, v) in enumerate(zip(ph, ex)):
            env[n] = v
            if n in body:
                t = (g.param if self.leaves[i].kind == "param" else
                     g.input)(_clean(self.leaves[i].name), self.dtype,
                              tuple(v.shape))
                self.leaf_tensors[i] = t
                env[n] = t
            elif torch.is_tensor(v):
                self._origin[id(v)] = (v, lambda env, n=n: env[n])
        for n in nodes:
            if n.op != "call_function":
                continue
            if n not in body:
                self.prologue.append(n)
                args, kwargs = _lookup(n, env)
                with torch.no_grad(), no_autocast():
                    v = n.target(*args, **kwargs)
                env[n] = v
                if torch.is_tensor(v):
                    self._origin[id(v)] = (v, lambda env, n=n: env[n])
                elif isinstance(v, (tuple, list)):
                    for k, leaf in enumerate(v):
                        if torch.is_tensor(leaf):
                            self._origin[id(leaf)] = (
                                leaf, lambda env, n=n, k=k: env[n][k])
                continue
            if n not in need:
                continue
            if n in self.fused_losses:
                env[n] = self._fused_loss(self.fused_losses[n], env)
                continue
            args, kwargs = _lookup(n, env)
            # a number or a non-float tensor a handler makes a float of
            # takes the node's own float dtype: under torch.autocast a
            # float32 model computes some nodes in bfloat16
            self._number_dtype = _float_dtype_of(n, args, self.dtype)
            try:
                if n.target is operator.getitem:
                    env[n] = args[0][args[1]]
                else:
                    env[n] = aten.TABLE[n.target](self, n, *args, **kwargs)
            except aten.Unmapped as e:
                raise Unsupported(self.module_name, [
                    (str(n.target), 1, [_where(n)], str(e))]) from None
        # outputs
        self.ys, self.extra = [], []  # body outputs: differentiable, not
        # forward_only: the logits of a fused loss, made in the forward
        # pass, with no gradient path in the plan (module.py refuses a
        # gradient through them)
        self.forward_only = []
        # per output: ("y", k) ("fwd", k) ("extra", k) ("torch", fn)
        self.out_plan = []
        self.mutations = []  # (kind, target, slot)
        for v, (kind, target) in zip(outs, self.out_kinds):
            val = env[v] if isinstance(v, torch.fx.Node) else v
            if isinstance(val, aten._Transposed):
                val = self.t(val)
            if isinstance(val, Tensor):
                slot = ("y", len(self.ys)) if kind == "user" else \
                    ("extra", len(self.extra))
                if kind == "user" and v in forward_only:
                    slot = ("fwd", len(self.forward_only))
                    self.forward_only.append(val)
                elif kind == "user":
                    self.ys.append(val)
                else:
                    self.extra.append(val)
            else:
                slot = ("torch", self._torch_getter(v))
            if kind == "user":
                self.out_plan.append(slot)
            else:
                self.mutations.append((kind, target, slot))
        self._plan()

    def _fused_loss(self, m, env):
        """linear_cross_entropy for a fuse_loss.Match: h [N, D], w
        [V, D] and the prologue's labels, fed as integers; given the
        logits' matmul when the model returns them (made anyway), so that
        the forward reads them rather than making them again."""
        h, w = self.t(env[m.h]), self.t(env[m.w])
        labels = self.t(env[m.labels], float_dtype=False)
        logits = env.get(m.mm) if m.outputs else None
        if isinstance(logits, Tensor) and logits in \
                self.graph.tensors("matmul") and \
                self.graph.input_of(logits, 0) == h and \
                self.graph.input_of(logits, 1) == w:
            # the builder checks it is matmul(h, w, 0, 1) (transposes)
            try:
                return self.graph.linear_cross_entropy(
                    h, w, labels, ignore_index=m.ignore_index,
                    logits=logits)
            except _lib.MemgradError:  # transposed: not h w^T
                _lib.clear_error()
        return self.graph.linear_cross_entropy(
            h, w, labels, ignore_index=m.ignore_index)

    def _torch_getter(self, v):
        """A function of the prologue env giving output v (a prologue
        node's value, a placeholder's, or a constant)."""
        if isinstance(v, torch.fx.Node):
            return lambda env: env[v]
        return lambda env: v

    def _plan(self):
        g = self.graph
        # each y's own dtype: a float64 model's loss may be float32, as
        # Hugging Face's upcast (logits.float()) makes it in eager too
        self.seeds = [g.input("grad_output.%d" % i, y.dtype, y.shape)
                      for i, y in enumerate(self.ys)]
        # gradients: parameters that require grad, float inputs that do
        self.grad_leaves = [
            i for i, t in self.leaf_tensors.items()
            if self.example[i].requires_grad and self.ys]
        xs = [self.leaf_tensors[i] for i in self.grad_leaves]
        self.grads = []
        if xs:
            bw, rate = self.offload or (0.0, 0.0)
            self.grads = g.gradients(self.ys, xs, policy=self.policy,
                                     grad_ys=self.seeds,
                                     budget_bytes=self.budget_bytes,
                                     compact=self._compact,
                                     store16=self._store16,
                                     offload=self.offload is not None,
                                     host_bandwidth=bw, compute_rate=rate)
            if self.offload is not None:
                self.offload_tensors = g.offloads()
        self.plan_outputs = list(self.ys) + list(self.forward_only) + \
            list(self.extra) + \
            [t for t in self.grads if t not in self.seeds]
        # whether the plan has gradient steps (a y that is a leaf itself
        # takes its gradient straight from the seed)
        self.differentiable = any(t not in self.seeds for t in self.grads)
        if not self.plan_outputs:
            raise Unsupported(self.module_name, [(
                "outputs", 1, ["forward"],
                "nothing for memgrad to compute: every output comes from "
                "buffers, constants or integer inputs, which run in "
                "PyTorch")])
        self.plan_for("cpu")

    def with_options(self, policy, budget_bytes=0, offload=None):
        """This capture again under another policy and budget (and
        offload rates, or None): the same ATen graph mapped and planned
        anew, without a second torch.export (which takes seconds to a
        minute on a model)."""
        other = Captured(self.module_name, self.gm, self.leaves,
                         self.out_kinds, self.out_spec, None, policy,
                         budget_bytes, self._compact, self._store16,
                         example=self.example, offload=offload)
        for attr in ("in_spec", "user_input_names", "extra_kwargs"):
            if hasattr(self, attr):
                setattr(other, attr, getattr(self, attr))
        return other

    # ---------------------------------------------------------- for aten.py
    def t(self, v, float_dtype=True, like=None):
        """v as a memgrad tensor: itself, a lazy transpose built, a torch
        tensor fed as an input (refed on every call from the prologue
        node it came from, else a constant), or a number."""
        g = self.graph
        if isinstance(v, aten._Transposed):
            return g.permute(v.src, [1, 0])
        if isinstance(v, Tensor):
            return v
        if isinstance(v, bool):
            v = float(v)
        if isinstance(v, (int, float)):
            return g.fill(like.dtype if like is not None else
                          self._number_dtype,
                          (), float(v))
        if not torch.is_tensor(v):
            raise aten.Unmapped("an operand of type %s" % type(v).__name__)
        origin = self._origin.get(id(v))
        if origin is None:  # a constant: made by a handler, or folded
            self._origin[id(v)] = origin = (v, lambda env, c=v: c)
        return self._feed(v, origin[1], float_dtype, "prologue")

    def derived_value(self, v, fn, what):
        """fn(v) computed in PyTorch on every call (a mask from a
        prologue value): returns the example's value, remembered so that
        t() feeds it anew each call."""
        origin = self._origin.get(id(v))
        out = fn(v)
        if origin is not None:
            self._origin[id(out)] = (out, lambda env, get=origin[1]:
                                     fn(get(env)))
        return out

    def alias_input(self, param_tensor):
        """An input bound to the same data as leaf param_tensor, through
        which no gradient flows."""
        for i, t in self.leaf_tensors.items():
            if t == param_tensor:
                return self._feed(self.example[i], lambda env, i=i:
                                  env[("leaf", i)], True,
                                  "nograd." + _clean(self.leaves[i].name))
        raise aten.Unmapped("alias of a tensor that is not a leaf")

    def _feed(self, v, get, float_dtype, name):
        g = self.graph
        if v.dtype in _FLOAT:
            # its own float dtype (a float32 rotary table in a float64
            # model stays float32, as in eager)
            dt = _FLOAT[v.dtype]
            conv = lambda a, d=v.dtype: a.to(d)  # noqa: E731
        elif float_dtype or v.is_floating_point():
            dt = self._number_dtype
            conv = lambda a, d=getattr(torch, dt): a.to(d)  # noqa: E731
        elif v.dtype in (torch.int64, torch.int32):
            dt = "int64" if v.dtype == torch.int64 else "int32"
            conv = lambda a: a  # noqa: E731
        elif v.dtype == torch.bool:
            dt = "int32"
            conv = lambda a: a.to(torch.int32)  # noqa: E731
        else:
            raise aten.Unmapped("a %s operand" % v.dtype)
        t = g.input("%s.%d" % (name, len(self.feeds_from)), dt,
                    tuple(v.shape))
        self.feeds_from.append((t, lambda env: conv(get(env))))
        return t

    def dtype_name(self, dtype):
        return _FLOAT.get(dtype, str(dtype))

    def dropout(self, x, p):
        self.n_random += 1
        return self.graph.dropout(x, p, seed=self.n_random)

    def next_seed(self):
        self.n_random += 1
        return self.n_random

    # ---------------------------------------------------------- running
    @property
    def plan(self):
        """The plan for the device of the example's float leaves."""
        return self.plan_for(self._home_device())

    @property
    def executor(self):
        return self.executor_for(self._home_device())

    def _home_device(self):
        for i in self.leaf_tensors:
            return self.example[i].device
        return torch.device("cpu")

    def run_prologue(self, values):
        """The prologue on this call's leaf values: env for the feeds."""
        env = {}
        ph = [n for n in self.gm.graph.nodes if n.op == "placeholder"]
        for i, (n, v) in enumerate(zip(ph, values)):
            env[n] = v
            env[("leaf", i)] = v
        with torch.no_grad(), no_autocast():
            for n in self.prologue:
                args, kwargs = _lookup(n, env)
                env[n] = n.target(*args, **kwargs)
        return env


def _float_dtype_of(n, args, default):
    """The memgrad float dtype node n computes in: its output's (from
    torch.export's metadata), else its first float tensor operand's, else
    default (the model's)."""
    val = n.meta.get("val")
    if isinstance(val, (tuple, list)) and val:
        val = val[0]
    if torch.is_tensor(val) and val.dtype in _FLOAT:
        return _FLOAT[val.dtype]
    for a in args:
        if isinstance(a, aten._Transposed):
            a = a.src
        if isinstance(a, Tensor) and a.dtype in _FLOAT.values():
            return a.dtype
    return default


def _lookup(n, env):
    return (torch.fx.node.map_arg(n.args, lambda a: env[a]),
            torch.fx.node.map_arg(n.kwargs, lambda a: env[a]))


def _clean(name):
    return str(name).replace("/", ".")


def _where(n):
    st = n.meta.get("nn_module_stack")
    if st:
        path = list(st.values())[-1][0]
        return "%s (%s)" % (path or "forward", n.name)
    return n.name
