"""memgrad.torch.fx.Module against plain PyTorch: gradients within 1e-4 under
every policy, a loss computed in torch, several calls before one backward,
and SGD steps through torch.optim that follow PyTorch's."""
import copy

import pytest

torch = pytest.importorskip(
    "torch", reason="test_torch_bridge needs torch (Debian python3-torch)")
import memgrad.torch as mgt  # noqa: E402

POLICIES = ["none", "memory", "speed"]


def net():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 16),
        torch.nn.ReLU(), torch.nn.Linear(16, 16), torch.nn.Sigmoid(),
        torch.nn.Linear(16, 3))


def close(a, b):
    assert torch.allclose(a, b, rtol=1e-4, atol=1e-6), (a - b).abs().max()


@pytest.mark.parametrize("policy", POLICIES)
def test_gradients_match_torch(policy):
    ref = net()
    mine = mgt.fx.Module(copy.deepcopy(ref), (torch.zeros(8, 6),), policy=policy)
    x1, x2 = torch.randn(8, 6), torch.randn(8, 6)
    target = torch.randn(8, 3)
    # two calls before one backward, loss computed in torch
    for m in (ref, mine):
        loss = F_mse(m(x1), target) + m(x2).pow(2).mean()
        loss.backward()
    for p, q in zip(ref.parameters(), mine.parameters()):
        close(q.grad, p.grad)


def F_mse(a, b):
    return torch.nn.functional.mse_loss(a, b)


def test_input_gradient():
    ref = net()
    mine = mgt.fx.Module(copy.deepcopy(ref), (torch.zeros(8, 6),))
    x = torch.randn(8, 6, requires_grad=True)
    xm = x.detach().clone().requires_grad_(True)
    ref(x).sum().backward()
    mine(xm).sum().backward()
    close(xm.grad, x.grad)


def test_sgd_steps_follow_torch():
    ref = net()
    mine = mgt.fx.Module(copy.deepcopy(ref), (torch.zeros(8, 6),),
                      policy="memory")
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (ref, mine)]
    x, target = torch.randn(8, 6), torch.randn(8, 3)
    for step in range(5):
        losses = []
        for m, opt in zip((ref, mine), opts):
            opt.zero_grad()
            loss = F_mse(m(x), target)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert abs(losses[0] - losses[1]) <= 1e-4 * abs(losses[0]), losses
    assert mine.predicted_peak > 0


def test_unmapped_module_is_an_error():
    with pytest.raises(NotImplementedError, match="Softplus"):
        mgt.fx.Module(torch.nn.Sequential(torch.nn.Softplus()),
                   (torch.zeros(2, 2),))


def small_cnn():
    """Conv, BatchNorm, ReLU, a padded max pool, a strided conv, global
    pooling and a Linear: every module mapping the bridge has for images."""
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1, bias=False),
        torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.MaxPool2d(3, stride=2, padding=1),
        torch.nn.Conv2d(8, 8, 3, stride=2, padding=1),
        torch.nn.AdaptiveAvgPool2d((1, 1)), torch.nn.Flatten(),
        torch.nn.Linear(8, 5))


@pytest.mark.parametrize("policy", POLICIES)
def test_small_cnn_matches_torch(policy):
    torch.manual_seed(1)
    ref = small_cnn()
    x = torch.randn(4, 3, 16, 16)
    labels = torch.randint(0, 5, (4,))
    mine = mgt.fx.Module(copy.deepcopy(ref), (x,), policy=policy)
    for m in (ref, mine):
        torch.nn.functional.cross_entropy(m(x), labels).backward()
    for p, q in zip(ref.parameters(), mine.parameters()):
        close(q.grad, p.grad)


def test_batchnorm_running_stats_and_eval():
    torch.manual_seed(1)
    ref = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1, bias=False),
        torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.Conv2d(8, 8, 3, stride=2, padding=1),
        torch.nn.BatchNorm2d(8, momentum=None),  # cumulative average
        torch.nn.AdaptiveAvgPool2d((1, 1)), torch.nn.Flatten(),
        torch.nn.Linear(8, 5))
    x = torch.randn(4, 3, 16, 16) * 3 + 1
    mine = mgt.fx.Module(copy.deepcopy(ref), (x,), policy="memory")
    for step in range(3):
        for m in (ref, mine):
            m(x * (step + 1)).sum().backward()
    for a, b in zip(ref.buffers(), mine.buffers()):
        close(b.float(), a.float())
    assert int(mine.module[1].num_batches_tracked) == 3
    # eval: the running statistics, with gradients too
    ref.eval()
    mine.eval()
    xr = x.clone().requires_grad_(True)
    xm = x.clone().requires_grad_(True)
    yr, ym = ref(xr), mine(xm)
    close(ym, yr)
    yr.sum().backward()
    ym.sum().backward()
    close(xm.grad, xr.grad)
    for p, q in zip(ref.parameters(), mine.parameters()):
        close(q.grad, p.grad)
    before = [b.clone() for b in mine.buffers()]
    with torch.no_grad():
        close(mine(x), ref(x))
    for a, b in zip(before, mine.buffers()):  # eval leaves them alone
        assert torch.equal(a, b)


@pytest.mark.parametrize("policy", POLICIES)
def test_float64_module_matches_torch_closely(policy):
    """After .double() the bridge computes in float64: the small CNN's
    gradients and a few SGD steps' losses then agree with PyTorch float64
    to 1e-10, where float32 rounding cannot flip a ReLU or max-pool
    decision."""
    torch.manual_seed(1)
    ref = small_cnn().double()
    x = torch.randn(4, 3, 16, 16, dtype=torch.float64)
    labels = torch.randint(0, 5, (4,))
    mine = mgt.fx.Module(copy.deepcopy(ref), (x,), policy=policy)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (ref, mine)]
    for step in range(3):
        losses = []
        for m, opt in zip((ref, mine), opts):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(m(x), labels)
            loss.backward()
            losses.append(loss.item())
            if step == 0 and m is mine:
                for p, q in zip(ref.parameters(), mine.parameters()):
                    assert q.grad.dtype == torch.float64
                    assert torch.allclose(q.grad, p.grad, rtol=1e-10,
                                          atol=1e-12)
            opt.step()
        assert abs(losses[0] - losses[1]) <= 1e-10 * abs(losses[0]), losses


def test_mixed_dtypes_are_an_error():
    m = torch.nn.Linear(3, 2).double()
    with pytest.raises(TypeError, match="all be float32 or all float64"):
        mgt.fx.Module(m, (torch.zeros(2, 3),))


@pytest.mark.parametrize("policy", POLICIES)
def test_ceil_mode_pooling_matches_torch(policy):
    """MaxPool2d and AvgPool2d with ceil_mode (a last window that overhangs
    the input) and count_include_pad=False, as torchvision's GoogLeNet and
    SqueezeNet use them."""
    torch.manual_seed(2)
    ref = torch.nn.Sequential(
        torch.nn.Conv2d(3, 6, 3, padding=1), torch.nn.ReLU(),
        torch.nn.MaxPool2d(3, stride=2, ceil_mode=True),
        torch.nn.Conv2d(6, 6, 3, padding=1),
        torch.nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True,
                           count_include_pad=False),
        torch.nn.Flatten(), torch.nn.Linear(6 * 4 * 4, 5))
    x = torch.randn(2, 3, 14, 14)
    mine = mgt.fx.Module(copy.deepcopy(ref), (x,), policy=policy)
    yr, ym = ref(x), mine(x)
    close(ym, yr)
    yr.square().sum().backward()
    ym.square().sum().backward()
    for p, q in zip(ref.parameters(), mine.parameters()):
        close(q.grad, p.grad)


def _relu_inputs_memgrad(module, x):
    """The input of every ReLU of module's forward, as memgrad computes it
    (through the bridge's captured graph, in creation order)."""
    m = mgt.fx.Module(copy.deepcopy(module), (x,), policy="none")
    cap = m._cap
    ts = [cap.graph.input_of(t) for t in cap.graph.tensors("relu")]
    outs = cap.executor_for("cpu").run(cap.graph.compile(ts), cap.feeds(
        tuple([x] + list(cap.params)), torch.device("cpu")))
    return [outs[t].detach().clone() for t in ts]


def _relu_inputs_torch(module, x):
    """The input of every ReLU call of module's forward in PyTorch, in call
    order (torchvision reuses one nn.ReLU within a block), taken before the
    call: torchvision's ReLUs work in place."""
    seen = []
    hooks = [r.register_forward_pre_hook(lambda mod, i: seen.append(
        i[0].detach().clone())) for r in module.modules()
        if isinstance(r, torch.nn.ReLU)]
    with torch.no_grad():
        module(x)
    for h in hooks:
        h.remove()
    return seen


def _kinks_explained(batch):
    """From train.py's initial weights and batch: every ReLU input where
    memgrad's float32 forward and PyTorch's float64 one take different
    sides of 0 lies within PyTorch float32's own error of that tensor
    (|x64| <= max |x_torch32 - x64|): float32 cannot tell its sign, and a
    loss curve that parts there says nothing about memgrad. Returns
    (explained, description)."""
    import torchvision
    torch.manual_seed(0)
    base = torchvision.models.resnet18(num_classes=10)
    images = torch.randn(batch, 3, 64, 64)
    mine = _relu_inputs_memgrad(base, images)
    t32 = _relu_inputs_torch(copy.deepcopy(base), images)
    t64 = _relu_inputs_torch(copy.deepcopy(base).double(), images.double())
    assert len(mine) == len(t32) == len(t64) > 0
    flips, worst = 0, 0.0
    for m, a, b in zip(mine, t32, t64):
        bad = (m > 0) != (b > 0)
        if bad.any():
            band = float((a.double() - b).abs().max())
            far = float(b[bad].abs().max())
            flips += int(bad.sum())
            worst = max(worst, far / band)
    return worst <= 1.0, ("%d ReLU inputs on the other side of 0 from "
                          "float64, the farthest at %.2g of PyTorch "
                          "float32's own error" % (flips, worst))


@pytest.mark.parametrize("batch", [4, 16])
def test_train_example_follows_torch(batch):
    """examples/python/train.py: torchvision's resnet18 trained a few SGD
    steps in PyTorch and through the bridge under every policy; the loss
    curves must agree within 1e-4 per step (the script exits 1 if not).
    Batch 16 is where a batch mean rounded to float32 once put a ReLU input
    on the other side of its kink.

    Where they part in float32, the test asks why. A ReLU input within
    rounding noise of 0 takes whichever side each float32 implementation's
    rounding gives it (on an AMD EPYC with AVX2, memgrad's oneDNN
    convolutions put one of resnet18's at batch 4 at +2.3e-6 where float64
    has -4.1e-6 and PyTorch float32 -5.6e-6, while both float32 errors
    there are 4e-5). So the float32 run passes only if every such input
    lies within PyTorch float32's own error of 0, and the float64 run
    must then give PyTorch's loss curve: memgrad's arithmetic is
    PyTorch's, and only float32's sign at a kink differs."""
    pytest.importorskip("torchvision", reason="needs python3-torchvision")
    import os
    import subprocess
    import sys
    script = os.path.join(os.path.dirname(__file__), "..", "..", "examples",
                          "python", "train.py")

    def train(*args):
        return subprocess.run([sys.executable, script, "--batch", str(batch)]
                              + list(args), capture_output=True, text=True,
                              timeout=600)
    out = train()
    if out.returncode == 0:
        assert "loss curves agree within 1e-4" in out.stdout
        return
    explained, why = _kinks_explained(batch)
    assert explained, out.stdout + out.stderr + why
    f64 = train("--dtype", "float64")
    assert f64.returncode == 0, f64.stdout + f64.stderr
    assert "loss curves agree within 1e-4" in f64.stdout
    print("float32 curves part at a kink (%s); float64 agrees" % why)


class _PlusConst(torch.nn.Module):
    def forward(self, x):
        return x + 1.0


class _PlusParam(torch.nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner
        self.w = torch.nn.Parameter(torch.linspace(-1, 1, 6).reshape(2, 3))

    def forward(self, x):
        return (torch.tanh(x) if self.inner else x) + self.w


@pytest.mark.parametrize("make", [_PlusConst, lambda: _PlusParam(False),
                                  lambda: _PlusParam(True)],
                         ids=["x+1", "x+w", "tanh(x)+w"])
def test_gradient_that_is_the_seed(make):
    """A gradient that is dL/dy itself (y = x + 1, y = x + w, y = tanh(x) +
    w) comes back as torch's, twice in a row (the second backward adds into
    .grad); the seed was once unbound in the forward phase, or overwritten
    by the parameter's gradient buffer."""
    ref, model = make(), make()
    mine = mgt.fx.Module(model, (torch.zeros(2, 3),), policy="none")
    gy = torch.tensor([[1.0, -2.0, 0.5], [3.0, 0.25, -1.0]])
    xr = torch.randn(2, 3, requires_grad=True)
    xm = xr.detach().clone().requires_grad_(True)
    for _ in range(2):
        ref(xr).backward(gy)
        mine(xm).backward(gy)
        # tanh's derivative may round differently; the seed cannot
        assert torch.allclose(xm.grad, xr.grad, rtol=1e-6, atol=0)
        for a, b in zip(mine.parameters(), ref.parameters()):
            assert torch.equal(a.grad, b.grad)
