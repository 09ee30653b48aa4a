"""What the pool reserves through the Python API is what the plan says
(issue 28): the two-call path a framework bridge uses (Executor.forward,
then Executor.backward) lays its buffers out in the training plan's arena,
the saved tensors included, so after each step the pool reserves
Plan.arena()["reserved"] to the byte, from the first step on, and steps
after the first take nothing from the system."""
import numpy as np
import pytest

import memgrad


def _mlp(policy, depth=4, width=64, batch=16):
    g = memgrad.Graph()
    x = g.input("x", "float32", (batch, width))
    h, params = x, []
    for i in range(depth):
        w = g.param("w%d" % i, "float32", (width, width))
        params.append(w)
        h = g.tanh(g.matmul(h, w))
    y = g.sum(g.mul(h, h))
    gy = g.input("gy", "float32", y.shape)
    grads = g.gradients([y], params, policy=policy, grad_ys=[gy])
    plan = g.compile([y] + grads)
    rng = np.random.default_rng(3)
    feeds = {x: rng.standard_normal((batch, width)).astype(np.float32)}
    for w in params:
        feeds[w] = (rng.standard_normal((width, width)) /
                    np.sqrt(width)).astype(np.float32)
    return g, plan, feeds, y, gy, grads


@pytest.mark.parametrize("policy", ["none", "memory", "speed"])
def test_phased_reserved_equals_predicted(policy):
    g, plan, feeds, y, gy, grads = _mlp(policy)
    ex = memgrad.Executor()
    want = plan.arena()["reserved"]
    pair = plan.phase_peaks()["pair"]
    seed = {gy: np.ones(y.shape, np.float32)}
    ref = memgrad.Executor().run(plan, {**feeds, **seed})
    ref = {t: np.array(v) for t, v in ref.items()}
    allocs = None
    for step in range(4):
        outs, saved = ex.forward(plan, feeds)
        got = ex.backward(plan, saved, {**feeds, **seed})
        assert np.array_equal(np.asarray(outs[y]), ref[y])
        for t in grads:
            assert np.array_equal(np.asarray(got[t]), ref[t])
        saved.free()
        st = ex.pool_stats()
        # the outputs are still held here: they have their own blocks,
        # counted in the prediction, and pin nothing else
        assert st["bytes_reserved"] == want, (step, st, want)
        assert st["peak_bytes_in_use"] == pair
        if allocs is None:
            allocs = st["system_allocs"]
        assert st["system_allocs"] == allocs, step
        del outs, got


def test_phase_peaks_with_bound_outputs():
    """Plan.phase_peaks(bound), as arena(bound): outputs the caller gives
    memory for are not in the pool, so binding the gradient (64 KiB) lowers
    the backward phase's peak, and not the forward's; anything but a Tensor
    in bound is refused by name."""
    g = memgrad.Graph()
    x = g.input("x", "float32", (64, 32))
    w = g.param("w", "float32", (32, 512))
    y = g.sum(g.matmul(x, w))
    (gw,) = g.gradients([y], [w])
    plan = g.compile([y, gw])
    free, bound = plan.phase_peaks(), plan.phase_peaks([gw])
    assert bound["backward"] < free["backward"] - 32 * 512 * 4 // 2
    assert bound["pair"] == bound["backward"]
    assert bound["forward"] == free["forward"]
    with pytest.raises(TypeError, match="Plan.phase_peaks: bound holds"):
        plan.phase_peaks([gw.id])
    with pytest.raises(TypeError, match="Plan.arena: bound holds"):
        plan.arena(["gw"])
