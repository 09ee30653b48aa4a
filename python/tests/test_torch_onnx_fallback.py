"""memgrad.torch's second way in (issue 27 item 1): a model torch.fx cannot
trace (its forward branches on a traced shape, or iterates) is captured
through torch.onnx.export and memgrad's ONNX importer instead, with one
memgrad warning in place of the tracer's internals; its gradients follow
PyTorch's, its parameters stay the module's own, a new input shape
captures it again, and a model that neither way takes gets one error
naming both."""
import copy
import warnings

import pytest

torch = pytest.importorskip(
    "torch", reason="test_torch_onnx_fallback needs torch (python3-torch)")
import memgrad  # noqa: E402
import memgrad.torch as mgt  # noqa: E402

try:
    memgrad._lib.onnx()
except ImportError as e:  # a build without protobuf-c
    pytest.skip("no libmemgrad_onnx: %s" % e, allow_module_level=True)


class Branchy(torch.nn.Module):
    """fx fails on `if x.shape[-1] % 2`: a traced size used as a bool."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 16)
        self.bn = torch.nn.BatchNorm1d(16)
        self.b = torch.nn.Linear(16, 4)
        self.c = torch.nn.Linear(4, 3)

    def forward(self, x):
        h = torch.tanh(self.bn(self.a(x)))
        if x.shape[-1] % 2 == 0:
            h = torch.relu(self.b(h)) * 2
        else:
            h = torch.sigmoid(self.b(h))
        for _ in range(x.shape[0] // 4):  # a loop over a traced size
            h = h + 0.5
        return self.c(h)


def model():
    torch.manual_seed(0)
    return Branchy()


def close(a, b):
    assert torch.allclose(a, b, rtol=1e-4, atol=1e-6), (a - b).abs().max()


def test_fx_cannot_trace_it():
    with pytest.raises(Exception):
        torch.fx.symbolic_trace(model())


@pytest.mark.parametrize("policy", ["none", "memory", "speed"])
def test_captured_through_onnx_and_gradients_match(policy):
    ref = model()
    with pytest.warns(UserWarning, match="torch.onnx.export"):
        mine = mgt.fx.Module(copy.deepcopy(ref), (torch.zeros(8, 8),),
                          policy=policy)
    assert mine._cap.captured_by == "torch.onnx.export"
    x = torch.randn(8, 8)
    ya, yb = ref(x), mine(x)
    close(yb, ya)
    ya.pow(2).sum().backward()
    yb.pow(2).sum().backward()
    names = [n for n, _ in ref.named_parameters()]
    for n, p, q in zip(names, ref.parameters(), mine.parameters()):
        assert q.grad is not None, n
        close(q.grad, p.grad)


def test_parameters_stay_the_modules_own():
    ref = model()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mine = mgt.fx.Module(copy.deepcopy(ref), (torch.zeros(8, 8),))
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (ref, mine)]
    x = torch.randn(8, 8)
    for _ in range(3):  # SGD writes the module's tensors; memgrad reads them
        for m, o in zip((ref, mine), opts):
            o.zero_grad()
            m(x).pow(2).mean().backward()
            o.step()
    for p, q in zip(ref.parameters(), mine.parameters()):
        close(q, p)


def test_a_new_shape_captures_again():
    ref = model()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mine = mgt.fx.Module(copy.deepcopy(ref), (torch.zeros(8, 8),))
        x = torch.randn(12, 8)  # three passes of the loop instead of two
        close(mine(x), ref(x))


def test_export_leaves_buffers_and_rng_alone():
    m = model()
    x = torch.randn(8, 8)
    before = [b.clone() for b in m.buffers()]
    state = torch.random.get_rng_state()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mgt.fx.Module(m, (x,))
    for a, b in zip(before, m.buffers()):
        assert torch.equal(a, b)
    assert torch.equal(state, torch.random.get_rng_state())


class Untraceable(torch.nn.Module):
    """Neither way: fx fails on the branch, and the export hits an op
    memgrad's importer does not map (torch.cumsum is ONNX CumSum)."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(4, 4)

    def forward(self, x):
        if x.shape[0] > 1:
            x = x * 2
        return torch.cumsum(self.a(x), 1)


def test_neither_way_names_both():
    with pytest.raises(mgt.UnsupportedModelError) as e:
        mgt.fx.Module(Untraceable(), (torch.zeros(3, 4),))
    msg = str(e.value)
    assert "torch.fx could not trace" in msg
    assert "torch.onnx.export" in msg and "CumSum" in msg, msg


def test_float64_is_refused_clearly():
    with pytest.raises(mgt.UnsupportedModelError) as e:
        mgt.fx.Module(model().double(), (torch.zeros(8, 8, dtype=torch.float64),))
    assert "float32" in str(e.value)


def test_check_reports_it_can_capture():
    assert mgt.fx.check(model(), (torch.zeros(8, 8),)).ok
