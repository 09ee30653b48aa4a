"""What the operating system sees through memgrad.torch stays what the plan
says (issue 28 item 5, for the Python bridge; tests/test_rss.c holds the C
API to the same rule): the growth of the process's peak resident set
during a new Module's first training step stays within what memgrad
predicts it reserves (Module.memory_report(): the plan's arena, the pool
blocks of its outputs and the accumulation slot) plus the parameters'
.grad that torch allocates in that step, plus RSS_OVERHEAD, a fixed
allowance for what is neither (torch's autograd bookkeeping, the loss and
its gradient, the kernels' scratch and thread stacks, malloc's own).

The peak is VmHWM after a reset through /proc/self/clear_refs (Linux 4.0
and later); where that cannot be done the test is skipped."""
import os

import pytest

torch = pytest.importorskip("torch")
import memgrad.torch as mt  # noqa: E402

RSS_OVERHEAD = 16 << 20


def _status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def _reset_peak():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return _status("VmHWM") > 0


def _net(width):
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, width, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(width, width, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(width, width, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Flatten(), torch.nn.Linear(width * 32 * 32, 10))


def _step(mg, x):
    mg.zero_grad(set_to_none=True)
    torch.nn.functional.cross_entropy(
        mg(x), torch.arange(x.shape[0]) % 10).backward()


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"),
                    reason="no /proc/self/clear_refs to reset VmHWM")
@pytest.mark.parametrize("policy", ["none", "memory"])
def test_first_step_rss_within_plan(policy):
    torch.set_num_threads(1)
    # load the kernels' lazy state (oneDNN's primitives, OpenBLAS's
    # buffers) with a small model of the same layers
    small = _net(4)
    _step(mt.fx.Module(small, (torch.randn(2, 3, 32, 32),), policy=policy),
          torch.randn(2, 3, 32, 32))
    model = _net(32)
    x = torch.randn(16, 3, 32, 32)
    mg = mt.fx.Module(model, (x,), policy=policy)
    r = mg.memory_report()
    predicted = (r["pool_arena"] + r["pool_outputs"] + r["grads_torch"])
    if not _reset_peak():
        pytest.skip("VmHWM cannot be reset here")
    before = _status("VmRSS")
    _step(mg, x)
    grown = _status("VmHWM") - before
    st = mg.executor.pool_stats()
    # what the pool reserved is the prediction, to the byte
    assert st["bytes_reserved"] == r["pool_arena"] + r["pool_outputs"]
    assert grown <= predicted + RSS_OVERHEAD, (
        "first step grew the peak RSS by %.1f MiB; memgrad predicts %.1f "
        "MiB (+ %.0f MiB allowed)" % (grown / 2 ** 20, predicted / 2 ** 20,
                                      RSS_OVERHEAD / 2 ** 20))
    print("policy %s: peak RSS +%.1f MiB, predicted %.1f MiB" % (
        policy, grown / 2 ** 20, predicted / 2 ** 20))
