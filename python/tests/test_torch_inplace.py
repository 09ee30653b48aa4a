"""memgrad.torch's in-place safety (issue 27 item 6), as in PyTorch: a
tensor memgrad's backward reads, written in place between a call and its
backward (the output, an input, a parameter), makes backward raise a
memgrad error instead of returning wrong gradients; in-place ops inside a
traced forward give eager PyTorch's values and gradients, or are refused
with the reason where they cannot."""
import copy

import pytest

torch = pytest.importorskip(
    "torch", reason="test_torch_inplace needs torch (Debian python3-torch)")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import memgrad.torch as mgt  # noqa: E402


def _x(*shape):
    torch.manual_seed(0)
    return torch.randn(*shape, dtype=torch.float64)


# ------------------------------------------ between forward and backward
def test_output_written_in_place_raises_where_backward_reads_it():
    """Sequential(Linear, Tanh), y.mul_(2): once gradients off by up to
    13.8 with no error. tanh's backward reads its output, so PyTorch
    raises too."""
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(4, 3), nn.Tanh()).double()
    mine = mgt.fx.Module(copy.deepcopy(ref), (_x(5, 4),))
    x = _x(5, 4)
    y = ref(x)
    y.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace"):
        y.sum().backward()
    y = mine(x)
    y.mul_(2)
    with pytest.raises(RuntimeError,
                       match=r"memgrad.torch: the output of Sequential was "
                       r"modified by an in-place operation"):
        y.sum().backward()
    assert all(p.grad is None for p in mine.parameters())
    # the module still trains afterwards
    mine(x).sum().backward()
    ref.zero_grad()
    ref(x).sum().backward()
    for p, q in zip(ref.parameters(), mine.parameters()):
        assert torch.allclose(q.grad, p.grad, rtol=1e-12, atol=1e-14)


def test_output_written_in_place_is_fine_where_backward_does_not_read_it():
    """A Linear's output is not read by its backward (PyTorch allows
    y.mul_(2) there too): the gradients are y.mul_'s."""
    torch.manual_seed(0)
    ref = nn.Linear(4, 3).double()
    mine = mgt.fx.Module(copy.deepcopy(ref), (_x(5, 4),))
    x = _x(5, 4)
    for m in (ref, mine):
        y = m(x)
        y.mul_(2)
        y.square().sum().backward()
    for p, q in zip(ref.parameters(), mine.parameters()):
        assert torch.allclose(q.grad, p.grad, rtol=1e-12, atol=1e-14)


def test_input_written_in_place_raises():
    """x.add_(1) between forward and backward once gave wrong gradients
    silently; PyTorch raises (Linear's backward reads x)."""
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(4, 3), nn.Tanh()).double()
    mine = mgt.fx.Module(copy.deepcopy(ref), (_x(5, 4),))
    for m, msg in ((ref, "modified by an inplace"),
                   (mine, r"memgrad.torch: input 0 \('input_1'\) of "
                          r"Sequential was modified by an in-place")):
        x = _x(5, 4)
        y = m(x)
        x.add_(1)
        with pytest.raises(RuntimeError, match=msg):
            y.sum().backward()


def test_parameter_written_before_backward_raises():
    """An optimizer step between a call and its backward."""
    torch.manual_seed(0)
    mine = mgt.fx.Module(nn.Sequential(nn.Linear(4, 3), nn.Tanh()).double(),
                      (_x(5, 4),))
    y = mine(_x(5, 4))
    torch.optim.SGD(mine.parameters(), lr=0.1, momentum=0.0)
    with torch.no_grad():
        mine.module[0].weight.add_(1)
    with pytest.raises(RuntimeError, match="parameter '0.weight'"):
        y.sum().backward()


def test_a_copy_may_be_written():
    """Writing into a clone of the output or the input is fine."""
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(4, 3), nn.Tanh()).double()
    mine = mgt.fx.Module(copy.deepcopy(ref), (_x(5, 4),))
    for m in (ref, mine):
        x = _x(5, 4)
        y = m(x)
        z = y.clone()
        z.mul_(2)
        x.clone().add_(1)
        (y * z).sum().backward()
    for p, q in zip(ref.parameters(), mine.parameters()):
        assert torch.allclose(q.grad, p.grad, rtol=1e-12, atol=1e-14)


# ------------------------------------------------- inside a traced forward
class _Alias(nn.Module):
    """h2 = h; h += b(x); return h2 * h: once 1.41 off eager."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x):
        h = self.a(x)
        h2 = h
        h += self.b(x)
        return h2 * h


class _ReluInplace(nn.Module):
    """r = F.relu(h, inplace=True); return h + r: once 1.02 off eager."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)

    def forward(self, x):
        h = self.a(x)
        r = F.relu(h, inplace=True)
        return h + r


class _Chain(nn.Module):
    """Several in-place ops on one tensor and its aliases, a ReLU module
    with inplace=True, a method ending in _ and a view taken after the
    writes."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        h = self.a(x)
        g = h
        h += 1
        h.mul_(2)
        h -= 0.5
        r = self.relu(h)
        v = h.view(-1)
        return (g * r).sum(dim=1) + v.reshape(-1, 4).sigmoid().sum(dim=1)


@pytest.mark.parametrize("cls", [_Alias, _ReluInplace, _Chain])
def test_inplace_in_forward_gives_eager_values(cls):
    torch.manual_seed(0)
    ref = cls().double()
    mine = mgt.fx.Module(copy.deepcopy(ref), (_x(3, 4),))
    xr = _x(3, 4).requires_grad_(True)
    xm = _x(3, 4).requires_grad_(True)
    yr, ym = ref(xr), mine(xm)
    assert torch.allclose(ym, yr, rtol=1e-13, atol=1e-13)
    yr.square().sum().backward()
    ym.square().sum().backward()
    assert torch.allclose(xm.grad, xr.grad, rtol=1e-12, atol=1e-13)
    for p, q in zip(ref.parameters(), mine.parameters()):
        assert torch.allclose(q.grad, p.grad, rtol=1e-12, atol=1e-13)


class _WritesItsInput(nn.Module):
    def forward(self, x):
        x += 1
        return x * 2


class _WritesAParameter(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(4))

    def forward(self, x):
        self.w.add_(x.sum())
        return x * self.w


class _WritesUnderAView(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)

    def forward(self, x):
        h = self.a(x)
        v = h[:, :2]
        h.add_(1)  # v changes too in eager
        return v.sum() + h.sum()


class _WritesIntoAView(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)

    def forward(self, x):
        h = self.a(x)
        top, _ = h.split(2, dim=1)
        top.mul_(2)  # h changes too in eager
        return h.sum()


@pytest.mark.parametrize("cls, why", [
    (_WritesItsInput, "in-place write into the forward input 'x'"),
    (_WritesAParameter, "in-place write into the parameter or buffer 'w'"),
    (_WritesUnderAView, "shares its memory with 'getitem'"),
    (_WritesIntoAView, "shares its memory with 'a'"),
])
def test_inplace_that_cannot_match_eager_is_refused(cls, why):
    x = _x(3, 4)
    keep = x.clone()
    m = cls().double()
    state = copy.deepcopy(m.state_dict())
    with pytest.raises(mgt.UnsupportedModelError, match=why):
        mgt.fx.Module(m, (x,))
    report = mgt.fx.check(m, (x,))
    assert not report.ok and why in str(report)
    assert torch.equal(x, keep)  # the example was not written
    for k, v in m.state_dict().items():  # nor the parameters
        assert torch.equal(v, state[k]), k
