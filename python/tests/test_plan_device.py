"""A plan knows the device it was compiled for (mg_plan_options.device):
a CUDA plan lends cuBLAS room to split a long product's K, counted in its
predicted peak; any plan runs on any executor; a bad device is refused.
None of this needs a GPU: a CUDA plan runs on the CPU executor too, whose
kernels leave the extra workspace alone."""
import numpy as np
import pytest

import memgrad as mg


def linear(batch=256, fan_in=64, fan_out=32):
    """One layer whose weight gradient x^T dh has K = batch, the longest
    dimension: the product a CUDA plan lends cuBLAS a workspace."""
    g = mg.Graph()
    x = g.input("x", "float32", (batch, fan_in))
    w = g.param("w", "float32", (fan_in, fan_out))
    h = g.tanh(g.matmul(x, w))
    loss = g.sum(g.mul(h, h))
    gw, = g.gradients([loss], [w], policy="none")
    r = np.random.default_rng(3)
    feeds = {"x": r.standard_normal((batch, fan_in)).astype(np.float32),
             "w": (0.1 * r.standard_normal((fan_in, fan_out)))
             .astype(np.float32)}
    return g, loss, gw, feeds


def test_cuda_plan_lends_and_counts():
    g, loss, gw, feeds = linear()
    # unfused, as CUDA plans are, so that only the lent bytes differ
    cpu = g.compile([loss, gw], fusion=False)
    cuda = g.compile([loss, gw], device="cuda")
    assert cpu.device == "cpu" and cuda.device == "cuda"
    # the arena holds the lent bytes: 4 partial [64, 32] float32 outputs
    lent = 4 * 64 * 32 * 4
    assert cuda.arena()["bytes"] >= cpu.arena()["bytes"]
    assert cuda.arena()["bytes"] <= cpu.arena()["bytes"] + lent + 256
    assert cuda.predicted_peak >= cpu.predicted_peak
    results = []
    for plan in (cpu, cuda):
        ex = mg.Executor()
        out = ex.run(plan, feeds)
        assert ex.pool_stats()["peak_bytes_in_use"] == plan.predicted_peak
        results.append({t.name: np.array(a) for t, a in out.items()})
    for name in results[0]:
        np.testing.assert_array_equal(results[0][name], results[1][name])


def test_device_names():
    g, loss, gw, _ = linear(8, 4, 2)
    assert g.compile([loss, gw], device="cuda:0").device == "cuda"
    with pytest.raises(ValueError, match="memgrad.Plan: device must be"):
        g.compile([loss, gw], device="tpu")


def test_small_products_lend_nothing():
    # no product's K is its longest dimension: x w is [8, 32] over 4,
    # x^T dh [4, 32] over 8
    g, loss, gw, _ = linear(8, 4, 32)
    # unfused, as CUDA plans are
    a = g.compile([loss, gw], fusion=False).arena()
    b = g.compile([loss, gw], device="cuda").arena()
    assert a == b


def test_cuda_plan_phases_on_the_cpu():
    # the two phases (what memgrad.torch runs) of a CUDA plan: the phases
    # carry its lent bytes, and a CPU executor gives the CPU plan's bits
    g = mg.Graph()
    x = g.input("x", "float32", (256, 64))
    w = g.param("w", "float32", (64, 32))
    y = g.tanh(g.matmul(x, w))
    gy = g.input("gy", "float32", (256, 32))
    gw, = g.gradients([y], [w], policy="none", grad_ys=[gy])
    r = np.random.default_rng(5)
    f = {x: r.standard_normal((256, 64)).astype(np.float32),
         w: (0.1 * r.standard_normal((64, 32))).astype(np.float32)}
    seed = {gy: r.standard_normal((256, 32)).astype(np.float32)}
    got, peaks = [], []
    for dev in ("cpu", "cuda"):
        plan = g.compile([y, gw], device=dev, fusion=False)
        peaks.append(plan.phase_peaks())
        ex = mg.Executor()
        outs, saved = ex.forward(plan, f)
        grads = ex.backward(plan, saved, {**f, **seed})
        saved.free()
        got.append((np.array(outs[y]), np.array(grads[gw])))
    np.testing.assert_array_equal(got[0][0], got[1][0])
    np.testing.assert_array_equal(got[0][1], got[1][1])
    # x^T dh, [64, 32] over K = 256, is in the backward phase
    assert peaks[1]["backward"] >= peaks[0]["backward"]
    assert peaks[1]["forward"] == peaks[0]["forward"]


def test_module_plans_per_device():
    torch = pytest.importorskip("torch")
    import memgrad.torch as mt
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.Tanh(),
                                torch.nn.Linear(32, 4))
    x = torch.randn(256, 64)
    m = mt.fx.Module(model, (x,), policy="none")
    m(x).sum().backward()
    cap = m._cap
    assert cap.plan is cap.plan_for("cpu") and cap.plan.device == "cpu"
    cuda = cap.plan_for("cuda:0")
    assert cuda.device == "cuda" and cuda is cap.plan_for("cuda")
    assert cuda.predicted_peak >= cap.plan.predicted_peak
