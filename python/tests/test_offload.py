"""Host offload from Python (issue 51, docs/offload.md): a plan compiled
with offload= gives the same bits as without, its pool and host peaks
are the predicted ones, in one call and in two (Executor.forward, then
backward), and a budget with offload=True chooses tensors
(Graph.offloads) whose plan fits the budget. memgrad.torch.Module and
the torch.compile backend take offload=True with policy "budget": the
gradients are policy none's bits, the pool's peak the predicted one, and
the report lists what is offloaded."""
import numpy as np
import pytest

import memgrad as mg


def tanh_chain(policy="none", depth=6, n=32, d=16, **kw):
    g = mg.Graph()
    h = g.input("x", "float32", (n, d))
    ws, acts = [], []
    for i in range(depth):
        w = g.param("w%d" % i, "float32", (d, d))
        ws.append(w)
        h = g.tanh(g.matmul(h, w))
        acts.append(h)
    loss = g.mse(h, g.input("t", "float32", (n, d)))
    grads = g.gradients([loss], ws, policy=policy, **kw)
    return g, loss, grads, ws, acts


def feeds(ws, n=32, d=16):
    rng = np.random.default_rng(3)
    f = {"x": rng.standard_normal((n, d), dtype=np.float32),
         "t": rng.standard_normal((n, d), dtype=np.float32)}
    for w in ws:
        f[w] = (0.3 * rng.standard_normal((d, d))).astype(np.float32)
    return f


def run(plan, f):
    ex = mg.Executor()
    out = {k: np.array(v) for k, v in ex.run(plan, f).items()}
    return out, ex.pool_stats(), ex.host_stats()


def test_offload_bits_and_peaks():
    g, loss, grads, ws, acts = tanh_chain()
    f = feeds(ws)
    ref, ps0, _ = run(g.compile([loss] + grads), f)
    plan = g.compile([loss] + grads, offload=acts[:-1])
    out, ps, hs = run(plan, f)
    for t in [loss] + grads:
        assert out[t].tobytes() == ref[t].tobytes()
    info = plan.offload()
    assert info["n_offloaded"] == len(acts) - 1
    assert ps["peak_bytes_in_use"] == plan.predicted_peak
    assert ps["peak_bytes_in_use"] < ps0["peak_bytes_in_use"]
    assert hs["peak_bytes_in_use"] == info["host_peak"] > 0
    assert hs["bytes_reserved"] == info["host_bytes"]
    assert hs["copies_out"] == hs["copies_in"] == len(acts) - 1
    assert "offloaded: %d tensors" % (len(acts) - 1) in plan.report()


def test_offload_refuses_an_output():
    g, loss, grads, ws, acts = tanh_chain()
    try:
        g.compile([loss] + grads, offload=[loss])
    except mg.MemgradError as e:
        assert "cannot offload" in str(e)
    else:
        raise AssertionError("offloading the loss compiled")


def test_budget_chooses_offload():
    g, loss, grads, ws, acts = tanh_chain()
    none = g.compile([loss] + grads).summary()["budget_peak"]
    budget = none * 6 // 10
    rates = dict(host_bandwidth=1e9, compute_rate=1e8)
    g, loss, grads, ws, acts = tanh_chain("budget", budget_bytes=budget,
                                          offload=True, **rates)
    off = g.offloads()
    assert off
    plan = g.compile([loss] + grads, budget_bytes=budget, offload=off,
                     **rates)
    s = plan.summary()
    assert s["budget_peak"] <= budget
    assert s["n_recompute"] == 0


def test_two_calls_bits_and_peaks():
    g, loss, grads, ws, acts = tanh_chain()
    f = feeds(ws)
    plan = g.compile([loss] + grads, offload=acts[:-1])
    ref, _, _ = run(plan, f)
    ex = mg.Executor()
    outs, saved = ex.forward(plan, f)
    hs = ex.host_stats()
    info = plan.offload()
    assert hs["bytes_in_use"] == info["offloaded_bytes"] > 0
    got = ex.backward(plan, saved, f)
    saved.free()
    for t in grads:
        assert np.array(got[t]).tobytes() == ref[t].tobytes()
    assert np.array(outs[loss]).tobytes() == ref[loss].tobytes()
    assert ex.pool_stats()["peak_bytes_in_use"] == plan.predicted_peak
    assert plan.phase_peaks()["pair"] == plan.predicted_peak
    hs = ex.host_stats()
    assert hs["bytes_in_use"] == 0
    assert hs["peak_bytes_in_use"] == info["host_peak"]
    assert hs["copies_in"] == info["n_offloaded"]


torch = pytest.importorskip("torch")
import memgrad.torch as mt  # noqa: E402

RATES = dict(host_bandwidth=1e12, compute_rate=1e9)  # copies cheap


def _net():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64),
        torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
        torch.nn.Linear(64, 8))


def _grads(w, x):
    w.module.zero_grad(set_to_none=True)
    w(x).square().sum().backward()
    return [p.grad.clone() for p in w.module.parameters()]


@pytest.mark.skipif(not mt.HAS_EXPORT, reason="the ATen capture needs "
                    "PyTorch 2 (torch.export)")
def test_torch_module_offloads():
    net = _net()
    x = torch.randn(64, 32)
    none = mt.Module(net, (x,), policy="none")
    ref = _grads(none, x)
    budget = none.plan.summary()["budget_peak"] * 6 // 10
    w = mt.Module(net, (x,), policy="budget", budget_bytes=budget,
                  offload=True, **RATES)
    info = w.plan.offload()
    assert info["n_offloaded"] > 0, w.report()
    assert w.plan.summary()["budget_peak"] <= budget
    w.executor.reset_peak()
    got = _grads(w, x)
    for a, b in zip(ref, got):
        assert torch.equal(a, b)
    assert w.executor.pool_stats()["peak_bytes_in_use"] == w.predicted_peak
    hs = w.executor.host_stats()
    assert hs["peak_bytes_in_use"] == info["host_peak"]
    assert hs["bytes_in_use"] == 0
    rep = w.report()
    assert "offloaded: %d tensors" % info["n_offloaded"] in rep
    assert "copies beside" in rep and "s hidden" in rep
    # the same from with_policy, without a second export; and back
    w2 = none.with_policy("budget", budget, offload=True, **RATES)
    assert w2.plan.offload()["n_offloaded"] == info["n_offloaded"]
    for a, b in zip(ref, _grads(w2, x)):
        assert torch.equal(a, b)
    assert none.with_policy("memory").plan.offload()["n_offloaded"] == 0


@pytest.mark.skipif(not mt.HAS_EXPORT, reason="the ATen capture needs "
                    "PyTorch 2 (torch.export)")
def test_torch_offload_options_refused():
    net = _net()
    x = torch.randn(8, 32)
    with pytest.raises(ValueError, match="policy='budget'"):
        mt.Module(net, (x,), policy="memory", offload=True, **RATES)
    with pytest.raises(ValueError, match="host_bandwidth > 0"):
        mt.Module(net, (x,), policy="budget", budget_bytes=1 << 20,
                  offload=True, compute_rate=1e9)
    with pytest.raises(ValueError, match="go with offload=True"):
        mt.Module(net, (x,), policy="memory", host_bandwidth=1e9)
    with pytest.raises(ValueError, match="compute_rate > 0"):
        mt.backend.make(policy="budget", budget_bytes=1 << 20, offload=True,
                        host_bandwidth=1e9, compute_rate=-1)


@pytest.mark.skipif(not mt.HAS_EXPORT, reason="the ATen capture needs "
                    "PyTorch 2 (torch.export)")
def test_compile_backend_offloads():
    import torch._dynamo
    torch._dynamo.reset()
    net = _net()
    x = torch.randn(64, 32)
    none = mt.Module(net, (x,), policy="none")
    ref = _grads(none, x)
    budget = none.plan.summary()["budget_peak"] * 6 // 10
    mt.backend.reset_report()
    c = torch.compile(net, backend=mt.backend.make(
        policy="budget", budget_bytes=budget, offload=True, **RATES),
        dynamic=False)
    net.zero_grad(set_to_none=True)
    c(x).square().sum().backward()
    for a, p in zip(ref, net.parameters()):
        assert torch.equal(a, p.grad)
    rows = mt.backend.report()
    assert rows and rows[0]["ran"] == "memgrad", rows
    assert rows[0]["offloaded"]["n_offloaded"] > 0, rows
    torch._dynamo.reset()
