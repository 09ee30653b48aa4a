"""Host offload from Python (issue 51, docs/offload.md): a plan compiled
with offload= gives the same bits as without, its pool and host peaks
are the predicted ones, and a budget with offload=True chooses tensors
(Graph.offloads) whose plan fits the budget."""
import numpy as np

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
