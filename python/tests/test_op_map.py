"""The two frontends cannot drift apart (issue 27 item 1): memgrad.torch
and the ONNX importer map into memgrad's ops through one table,
src/frontends/op_map.def (scripts/op_map.py reads it).

- The bridge registers exactly the table's torch names: a handler added
  without its row, or a row without its handler, fails here.
- The importer converts exactly the table's ONNX op types (the C side is
  generated from the table; tests/test_onnx_hostile.c checks its dispatch).
- For every row with both forms, a one-layer model is captured both ways,
  by torch.fx through the bridge and by torch.onnx.export through
  memgrad.onnx_import: torch.onnx.export writes the row's ONNX op, each
  way lowers to the row's memgrad ops and no others, and the two compute
  the same output (and eager PyTorch's).
- docs/supported-ops.md is what scripts/gen-tables.py writes from the
  table."""
import importlib.util
import pathlib
import sys
import warnings

import pytest

torch = pytest.importorskip("torch", reason="test_op_map needs torch")
import memgrad  # noqa: E402
import memgrad.torch as mgt  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import op_map  # noqa: E402

ROWS = op_map.rows()
BY_NAME = {r.name: r for r in ROWS}
nn, F = torch.nn, torch.nn.functional


def _inplace_alias(name, table):
    """x.add_ and F.relu_: the bridge registers them from their
    out-of-place form's handler; the table lists only that form."""
    return name.endswith("_") and table.get(name[:-1]) is table[name]


def bridge_names():
    """Every name the bridge maps, as memgrad.torch.SUPPORTED writes it,
    but the in-place forms."""
    fns = {mgt._fn_name(f): h for f, h in mgt._FUNCTIONS.items()}
    names = {mgt._class_name(t) for t in mgt._MODULES}
    names |= {n for n in fns if not _inplace_alias(n, fns)}
    names |= set(mgt._FUNCTIONS_BY_NAME)
    names |= {n for n in mgt._METHODS
              if not _inplace_alias(n, mgt._METHODS)}
    return names


def table_names():
    out = {}
    for r in ROWS:
        for n in r.torch:
            full = op_map.torch_name(n)
            assert full not in out, "%s in rows %s and %s" % (n, out[full], r)
            out[full] = r
    return out


def test_rows_are_well_formed():
    assert len({r.name for r in ROWS}) == len(ROWS)
    for r in ROWS:
        assert r.onnx or r.torch, "%r maps nothing" % r
        if r.onnx:
            assert r.converter.startswith("mgi_onnx_op_"), r
    known = op_map.mg_op_names()
    assert "matmul" in known and "conv2d" in known
    for r in ROWS:
        assert set(r.mg_ops) <= known, "%r: %s are no memgrad ops" % (
            r, sorted(set(r.mg_ops) - known))


def test_bridge_registers_exactly_the_table():
    table, bridge = table_names(), bridge_names()
    missing = sorted("%s (%r)" % (n, table[n]) for n in set(table) - bridge)
    extra = sorted(bridge - set(table))
    assert not missing, "table rows without a memgrad.torch handler: %s" % (
        ", ".join(missing))
    assert not extra, ("memgrad.torch handlers without a row in "
                       "src/frontends/op_map.def: %s" % ", ".join(extra))


def test_supported_is_the_table():
    """memgrad.torch.SUPPORTED (what check() points users to) lists the
    table's names and their in-place forms, nothing else."""
    table = set(table_names())
    for kind, names in mgt.SUPPORTED.items():
        for n in names:
            assert n in table or n.rstrip("_") in table, (kind, n)


def test_importer_converts_exactly_the_table():
    try:
        types = memgrad.onnx_op_types()
    except ImportError as e:
        pytest.skip("no libmemgrad_onnx: %s" % e)
    assert types == [r.onnx for r in ROWS if r.onnx]


# ---------------------------------------------------------------- both ways
class Fn(nn.Module):
    """A one-op model from a function of its input (and a parameter w, a
    buffer m where given)."""

    def __init__(self, f, w=None, m=None):
        super().__init__()
        self.f = f
        if w is not None:
            self.w = nn.Parameter(w)
        if m is not None:
            self.register_buffer("m", m)

    def forward(self, x):
        return self.f(self, x)


def fn(f, **kw):
    return lambda: Fn(f, **kw)


# row -> (model factory, input shape, input domain: "any" or "pos").
# Every row with both an ONNX op and torch names has one; rows whose
# mapping computes nothing (Identity, Shape) say why they have none.
EXAMPLES = {
    "Add": (fn(lambda s, x: x + x), (2, 3), "any"),
    "Sub": (fn(lambda s, x: s.w - x, w=torch.randn(3)), (2, 3), "any"),
    "Mul": (fn(lambda s, x: x * x), (2, 3), "any"),
    "Div": (fn(lambda s, x: x / 3.0), (2, 3), "any"),
    "Pow": (fn(lambda s, x: x ** 1.5), (2, 3), "pos"),
    "Neg": (fn(lambda s, x: -x), (2, 3), "any"),
    "Relu": (nn.ReLU, (2, 3), "any"),
    "Sigmoid": (nn.Sigmoid, (2, 3), "any"),
    "Tanh": (nn.Tanh, (2, 3), "any"),
    "Exp": (fn(lambda s, x: torch.exp(x)), (2, 3), "any"),
    "Log": (fn(lambda s, x: torch.log(x)), (2, 3), "pos"),
    "Sqrt": (fn(lambda s, x: torch.sqrt(x)), (2, 3), "pos"),
    "Erf": (fn(lambda s, x: torch.erf(x)), (2, 3), "any"),
    "Gelu": (lambda: nn.GELU(approximate="tanh"), (2, 3), "any"),
    "LeakyRelu": (lambda: nn.LeakyReLU(0.1), (2, 3), "any"),
    "Clip": (nn.ReLU6, (2, 3), "any"),
    "Where": (fn(lambda s, x: x.masked_fill(s.m, 2.0),
                 m=torch.tensor([[True, False, True]])), (2, 3), "any"),
    "MatMul": (fn(lambda s, x: x @ s.w, w=torch.randn(4, 5)), (2, 3, 4),
               "any"),
    "Gemm": (lambda: nn.Linear(4, 3), (2, 4), "any"),
    "Conv": (lambda: nn.Conv2d(3, 4, 3, padding=1), (2, 3, 6, 6), "any"),
    "MaxPool": (lambda: nn.MaxPool2d(2), (2, 3, 6, 6), "any"),
    "AveragePool": (lambda: nn.AvgPool2d(2), (2, 3, 6, 6), "any"),
    "GlobalAveragePool": (lambda: nn.AdaptiveAvgPool2d(1), (2, 3, 6, 6),
                          "any"),
    "BatchNormalization": (lambda: nn.BatchNorm2d(3), (4, 3, 5, 5), "any"),
    "LayerNormalization": (lambda: nn.LayerNorm(4), (2, 3, 4), "any"),
    "Softmax": (lambda: nn.Softmax(-1), (2, 3, 4), "any"),
    "LogSoftmax": (lambda: nn.LogSoftmax(-1), (2, 3, 4), "any"),
    "ReduceMean": (fn(lambda s, x: x.mean(1)), (2, 3, 4), "any"),
    "ReduceSum": (fn(lambda s, x: x.sum(1)), (2, 3, 4), "any"),
    "Dropout": (lambda: nn.Dropout(0.5), (4, 8), "any"),
    "Reshape": (fn(lambda s, x: x.reshape(4, 6)), (2, 3, 4), "any"),
    "Flatten": (nn.Flatten, (2, 3, 4), "any"),
    "Squeeze": (fn(lambda s, x: x.squeeze(1)), (2, 1, 3), "any"),
    "Unsqueeze": (fn(lambda s, x: x.unsqueeze(1)), (2, 3), "any"),
    "Transpose": (fn(lambda s, x: x.transpose(0, 1)), (2, 3), "any"),
    "Expand": (fn(lambda s, x: x.expand(2, 4, 3)), (2, 1, 3), "any"),
    "Concat": (fn(lambda s, x: torch.cat([x, x], 1)), (2, 3), "any"),
    "Split": (fn(lambda s, x: x.split(2, 1)[1]), (2, 5), "any"),
    "Slice": (fn(lambda s, x: x[:, 1:3]), (2, 5), "any"),
    "HardSigmoid": (nn.Hardsigmoid, (2, 5), "any"),
    "HardSwish": (nn.Hardswish, (2, 5), "any"),
}
# rows whose example torch.onnx.export (torch 1.13, opset 17) writes as
# other ops: the importer's side is a one-node model of the row's op
ONE_NODE = {
    "Gelu": (20, {"approximate": "tanh"}),  # ONNX Gelu is opset 20
}
NO_EXAMPLE = {
    "Identity": "computes nothing: a model of it returns its input",
    "Shape": "computes nothing: sizes are constants when the plan is made",
}
# the ops every graph has that no row lowers to
LEAVES = {"input", "param"}


def test_every_row_with_both_forms_has_an_example():
    both = {r.name for r in ROWS if r.onnx and r.torch}
    assert both - set(EXAMPLES) - set(NO_EXAMPLE) == set(), (
        "give these rows an example in test_op_map.EXAMPLES")
    assert set(EXAMPLES) <= both


def forced_onnx(monkeypatch):
    """Make memgrad.torch take its second way in, torch.onnx.export into
    the importer, as it does where torch.fx cannot trace."""
    def no_fx(module):
        raise mgt.UnsupportedModelError(mgt.CheckReport(
            type(module).__name__, [], trace_error="forced by the test"))
    monkeypatch.setattr(mgt, "_trace", no_fx)


def graph_ops(g, n):
    """The op names of g's first n tensors."""
    return {memgrad._lib.tensor_op_name(g._g, i).decode()
            for i in range(n)} - LEAVES


def forward_ops(m):
    """The op names of a Module's forward graph: the tensors made before
    the gradient graph, which starts with its seed input."""
    return graph_ops(m._cap.graph, m._cap.seed.id)


def one_node_model(op_type, attrs, shape, opset):
    from onnx import TensorProto, helper
    node = helper.make_node(op_type, ["x"], ["y"], **attrs)
    g = helper.make_graph(
        [node], "one_node",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(
        g, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()


def close(a, b):
    assert a.shape == b.shape, (a.shape, b.shape)
    assert torch.allclose(a, b, rtol=1e-5, atol=1e-6), (a - b).abs().max()


def run_onnx(om, x):
    """The forward output of an imported model on input x."""
    plan = om.graph.compile([om.outputs[0]])
    feeds = {om.inputs[0]: x.numpy()}
    feeds.update(dict(om.constants()))
    out = memgrad.Executor().run(plan, feeds)[om.outputs[0]]
    return torch.tensor(out.copy() if hasattr(out, "copy") else out)


def check_ops(r, ops_fx, ops_onnx):
    """Both ways lower row r to its memgrad ops, no others, and share
    one."""
    allowed = set(r.mg_ops)
    assert ops_fx <= allowed, "memgrad.torch lowers %r to %s, not in %s" % (
        r, sorted(ops_fx - allowed), r.mg_ops)
    assert ops_onnx <= allowed, "the importer lowers %r to %s, not in %s" % (
        r, sorted(ops_onnx - allowed), r.mg_ops)
    assert ops_fx & ops_onnx, "%r: %s and %s share no op" % (
        r, sorted(ops_fx), sorted(ops_onnx))


def onnx_op_types(model, x):
    import onnx
    proto = onnx.load_from_string(mgt._onnx_export(model, (x,), True))
    return {n.op_type for n in proto.graph.node}


@pytest.mark.parametrize("row", sorted(EXAMPLES))
def test_row_lowers_the_same_both_ways(row, monkeypatch):
    try:
        memgrad._lib.onnx()
    except ImportError as e:
        pytest.skip("no libmemgrad_onnx: %s" % e)
    r = BY_NAME[row]
    make, shape, domain = EXAMPLES[row]
    torch.manual_seed(0)
    model = make()
    x = torch.randn(*shape)
    if domain == "pos":
        x = x.abs() + 0.5
    if row in ONE_NODE:
        # the importer's side alone: its ops, beside the bridge's
        opset, attrs = ONE_NODE[row]
        om = memgrad.onnx_import(one_node_model(r.onnx, attrs, shape, opset))
        ops_onnx = graph_ops(om.graph, len(om.graph.tensors()))
        by_fx = mgt.fx.Module(model, (x,), policy="none")
        ops_fx = forward_ops(by_fx)
        check_ops(r, ops_fx, ops_onnx)
        want = model(x)
        close(by_fx(x), want)
        close(run_onnx(om, x), want)
        return
    assert r.onnx in onnx_op_types(model, x), (
        "torch.onnx.export does not write %s for this row's example" % r.onnx)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        by_fx = mgt.fx.Module(model, (x,), policy="none")
        with monkeypatch.context() as mp:
            forced_onnx(mp)
            by_onnx = mgt.fx.Module(model, (x,), policy="none")
    assert by_fx._cap.captured_by == "torch.fx"
    assert by_onnx._cap.captured_by == "torch.onnx.export"
    check_ops(r, forward_ops(by_fx), forward_ops(by_onnx))
    if row == "Dropout":
        # the masks are seeded per call, differently on the two paths; the
        # same op either way is what the row says
        assert forward_ops(by_fx) == forward_ops(by_onnx) == {"dropout"}
        return
    # outputs, and the input's and parameters' gradients, both ways and
    # eagerly
    grads = []
    for m in (model, by_fx, by_onnx):
        xi = x.clone().requires_grad_()
        y = m(xi)
        (y * torch.linspace(-1, 1, y.numel()).reshape(y.shape)).sum() \
            .backward()
        grads.append((y.detach(), xi.grad,
                      [p.grad.clone() for p in m.parameters()]))
        m.zero_grad()
    (want, gx, gp), fx, ox = grads
    for y, g, ps in (fx, ox):
        close(y, want)
        close(g, gx)
        for a, b in zip(ps, gp):
            close(a, b)


# ------------------------------------------------------ one frontend only
class Sub(nn.Module):
    """A model calling a layer memgrad maps whole, as forward(x) of
    call(layer, x)."""

    def __init__(self, layer, call):
        super().__init__()
        self.layer, self.call = layer, call

    def forward(self, x):
        return self.call(self.layer, x)


def _swin():
    from torchvision.models import swin_transformer as sw
    return nn.Sequential(
        sw.ShiftedWindowAttention(8, [2, 2], [1, 1], 2), sw.PatchMerging(8))


# rows the bridge alone has (MG_TORCH_OP): model, input shape, domain,
# whether its output is random in training mode (and the other rows the
# model uses, in ALSO)
ALSO = {"SwinWindowAttention": ("LayerNormalization", "Gemm")}
TORCH_EXAMPLES = {
    "Rsqrt": (fn(lambda s, x: torch.rsqrt(x)), (2, 3), "pos", False),
    "SiLU": (nn.SiLU, (2, 3), "any", False),
    "StochasticDepth": (
        lambda: __import__("torchvision").ops.StochasticDepth(0.5, "row"),
        (4, 3), "any", True),
    "MultiheadAttention": (
        lambda: Sub(nn.MultiheadAttention(8, 2),
                    lambda a, x: a(x, x, x, need_weights=False)[0]),
        (5, 2, 8), "any", False),
    "TransformerEncoderLayer": (
        lambda: nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0),
        (5, 2, 8), "any", False),
    "TransformerDecoderLayer": (
        lambda: Sub(nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0),
                    lambda d, x: d(x, x)),
        (5, 2, 8), "any", False),
    "SwinWindowAttention": (_swin, (1, 4, 4, 8), "any", False),
}


def test_every_torch_row_has_an_example():
    assert {r.name for r in ROWS if not r.onnx} == set(TORCH_EXAMPLES)


@pytest.mark.parametrize("row", sorted(TORCH_EXAMPLES))
def test_torch_row_lowers_to_its_ops(row):
    """A row the bridge alone has: it lowers to the row's memgrad ops, and
    computes eager PyTorch's output and input gradient."""
    r = BY_NAME[row]
    make, shape, domain, random = TORCH_EXAMPLES[row]
    torch.manual_seed(0)
    model = make()
    x = torch.randn(*shape)
    if domain == "pos":
        x = x.abs() + 0.5
    m = mgt.fx.Module(model, (x,), policy="none")
    assert m._cap.captured_by == "torch.fx"
    ops, allowed = forward_ops(m), set(r.mg_ops)
    for other in ALSO.get(row, ()):
        allowed |= set(BY_NAME[other].mg_ops)
    assert ops and ops <= allowed, (
        "memgrad.torch lowers %r to %s, not in %s" % (
            r, sorted(ops - allowed), sorted(allowed)))
    if random:
        return
    out = []
    for mod in (model, m):
        xi = x.clone().requires_grad_()
        y = mod(xi)
        (y * torch.linspace(-1, 1, y.numel()).reshape(y.shape)).sum() \
            .backward()
        out.append((y.detach(), xi.grad))
    close(out[1][0], out[0][0])
    close(out[1][1], out[0][1])


def _model(nodes, inputs, inits=(), opset=17):
    """An ONNX model of nodes; inputs: (name, elem type, shape); inits:
    numpy arrays by name."""
    from onnx import TensorProto, helper, numpy_helper
    g = helper.make_graph(
        nodes, "rows",
        [helper.make_tensor_value_info(n, getattr(TensorProto, t), sh)
         for n, t, sh in inputs],
        [helper.make_tensor_value_info(nodes[-1].output[0],
                                       TensorProto.UNDEFINED, None)],
        [numpy_helper.from_array(a, n) for n, a in dict(inits).items()])
    return helper.make_model(
        g, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()


def _onnx_examples():
    import numpy as np
    from onnx import helper
    N = helper.make_node
    xy = [("x", "FLOAT", [2, 3]), ("y", "FLOAT", [2, 3])]
    x4 = [("x", "FLOAT", [1, 2, 3, 3])]
    ex = {
        "Equal": ([N("Equal", ["x", "y"], ["z"])], xy, {}),
        "Less": ([N("Less", ["x", "y"], ["z"])], xy, {}),
        "Greater": ([N("Greater", ["x", "y"], ["z"])], xy, {}),
        "And": ([N("Less", ["x", "y"], ["a"]), N("Greater", ["x", "y"], ["b"]),
                 N("And", ["a", "b"], ["z"])], xy, {}),
        "Or": ([N("Less", ["x", "y"], ["a"]), N("Greater", ["x", "y"], ["b"]),
                N("Or", ["a", "b"], ["z"])], xy, {}),
        "Not": ([N("Less", ["x", "y"], ["a"]), N("Not", ["a"], ["z"])], xy,
                {}),
        "Resize": ([N("Resize", ["x", "", "s"], ["z"], mode="nearest")], x4,
                   {"s": np.array([1, 1, 2, 2], np.float32)}),
        "Upsample": ([N("Upsample", ["x", "s"], ["z"], mode="nearest")], x4,
                     {"s": np.array([1, 1, 2, 2], np.float32)}),
        "Gather": ([N("Gather", ["w", "i"], ["z"])],
                   [("i", "INT64", [2, 4])],
                   {"w": np.ones((5, 3), np.float32)}),
        "Pad": ([N("Pad", ["x", "p"], ["z"])], x4,
                {"p": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)}),
        "Constant": ([N("Constant", [], ["c"], value=helper.make_tensor(
            "c", 1, [3], [1.0, 2.0, 3.0])), N("Add", ["x", "c"], ["z"])],
            xy[:1], {}),
        "ConstantOfShape": (
            [N("ConstantOfShape", ["s"], ["c"], value=helper.make_tensor(
                "v", 1, [1], [2.0])), N("Add", ["x", "c"], ["z"])], xy[:1],
            {"s": np.array([2, 3], np.int64)}),
        "Cast": ([N("Cast", ["x"], ["z"], to=6)], xy[:1], {}),
    }
    return ex


ONNX_NO_EXAMPLE = {
    "Min": "constants only (folded at import)",
    "Max": "constants only (folded at import)",
    "Floor": "constants only (folded at import)",
    "Ceil": "constants only (folded at import)",
    "Range": "constants only (folded at import)",
}


def test_every_onnx_row_has_an_example():
    pytest.importorskip("onnx")
    only = {r.name for r in ROWS if r.onnx and not r.torch}
    assert only == set(_onnx_examples()) | set(ONNX_NO_EXAMPLE)


@pytest.mark.parametrize("row", ["Min", "Max", "Floor", "Ceil"])
def test_constant_only_rows_refuse_tensors(row):
    """Rows that lower to no op: the importer folds them on constants and
    refuses them on tensors, naming the node."""
    pytest.importorskip("onnx")
    from onnx import helper
    assert BY_NAME[row].mg_ops == []
    ins = ["x", "x"] if row in ("Min", "Max") else ["x"]
    data = _model([helper.make_node(row, ins, ["z"], name="n")],
                  [("x", "FLOAT", [2, 3])])
    with pytest.raises(memgrad.MemgradError, match="'n'.*%s.*constants"
                       % row):
        memgrad.onnx_import(data)


@pytest.mark.parametrize("row", sorted(
    r.name for r in ROWS if r.onnx and not r.torch
    and r.name not in ONNX_NO_EXAMPLE))
def test_onnx_row_lowers_to_its_ops(row):
    """A row the importer alone has: a model of its node (after the nodes
    that make its inputs) lowers to the ops of those rows, its own
    among them unless it computes nothing itself."""
    pytest.importorskip("onnx")
    try:
        memgrad._lib.onnx()
    except ImportError as e:
        pytest.skip("no libmemgrad_onnx: %s" % e)
    nodes, inputs, inits = _onnx_examples()[row]
    om = memgrad.onnx_import(_model(nodes, inputs, inits))
    ops = graph_ops(om.graph, len(om.graph.tensors()))
    allowed = set()
    for n in nodes:
        allowed |= set(BY_NAME[n.op_type].mg_ops)
    assert ops <= allowed, "the importer lowers %s to %s, not in %s" % (
        row, sorted(ops - allowed), sorted(allowed))
    own = set(BY_NAME[row].mg_ops)
    assert not own or ops & own, (row, sorted(ops))


# ---------------------------------------------------------------- the docs
def test_supported_ops_page_is_up_to_date():
    spec = importlib.util.spec_from_file_location(
        "gen_tables", ROOT / "scripts" / "gen-tables.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    page = ROOT / "docs" / "supported-ops.md"
    text = page.read_text()
    assert gen.regenerate(text) == text, (
        "docs/supported-ops.md is out of date: run python3 "
        "scripts/gen-tables.py")
    for r in ROWS:
        for n in r.torch:
            assert "`%s`" % n in text, n
        if r.onnx:
            assert "`%s`" % r.onnx in text, r.onnx


def test_hardsigmoid_other_alpha_and_bad_attributes():
    """ONNX HardSigmoid with its own defaults (alpha 0.2, beta 0.5), which
    torch.onnx.export never writes, is clip(alpha x + beta, 0, 1); a
    non-finite alpha is refused with the node named."""
    try:
        memgrad._lib.onnx()
    except ImportError as e:
        pytest.skip("no libmemgrad_onnx: %s" % e)
    x = torch.linspace(-4, 4, 10).reshape(2, 5)
    for attrs, want in (({}, (0.2 * x + 0.5).clamp(0, 1)),
                        ({"alpha": 0.5, "beta": 0.25},
                         (0.5 * x + 0.25).clamp(0, 1))):
        om = memgrad.onnx_import(one_node_model("HardSigmoid", attrs,
                                                [2, 5], 17))
        close(run_onnx(om, x), want)
    with pytest.raises(memgrad.MemgradError, match="HardSigmoid.*alpha"):
        memgrad.onnx_import(one_node_model(
            "HardSigmoid", {"alpha": float("nan")}, [2, 5], 17))
