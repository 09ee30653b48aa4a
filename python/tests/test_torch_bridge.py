"""memgrad.torch.Module against plain PyTorch: gradients within 1e-4 under
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
    mine = mgt.Module(copy.deepcopy(ref), (torch.zeros(8, 6),), policy=policy)
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
    mine = mgt.Module(copy.deepcopy(ref), (torch.zeros(8, 6),))
    x = torch.randn(8, 6, requires_grad=True)
    xm = x.detach().clone().requires_grad_(True)
    ref(x).sum().backward()
    mine(xm).sum().backward()
    close(xm.grad, x.grad)


def test_sgd_steps_follow_torch():
    ref = net()
    mine = mgt.Module(copy.deepcopy(ref), (torch.zeros(8, 6),),
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
        mgt.Module(torch.nn.Sequential(torch.nn.Softplus()),
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
    mine = mgt.Module(copy.deepcopy(ref), (x,), policy=policy)
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
    mine = mgt.Module(copy.deepcopy(ref), (x,), policy="memory")
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
    mine = mgt.Module(copy.deepcopy(ref), (x,), policy=policy)
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
        mgt.Module(m, (torch.zeros(2, 3),))


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
    mine = mgt.Module(copy.deepcopy(ref), (x,), policy=policy)
    yr, ym = ref(x), mine(x)
    close(ym, yr)
    yr.square().sum().backward()
    ym.square().sum().backward()
    for p, q in zip(ref.parameters(), mine.parameters()):
        close(q.grad, p.grad)


@pytest.mark.parametrize("batch", [4, 16])
def test_train_example_follows_torch(batch):
    """examples/python/train.py: torchvision's resnet18 trained a few SGD
    steps in PyTorch and through the bridge under every policy; the loss
    curves must agree within 1e-4 per step (the script exits 1 if not).
    Batch 16 is where a batch mean rounded to float32 once put a ReLU input
    on the other side of its kink."""
    pytest.importorskip("torchvision", reason="needs python3-torchvision")
    import os
    import subprocess
    import sys
    script = os.path.join(os.path.dirname(__file__), "..", "..", "examples",
                          "python", "train.py")
    out = subprocess.run([sys.executable, script, "--batch", str(batch)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "loss curves agree within 1e-4" in out.stdout
