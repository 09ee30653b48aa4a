"""A byte budget means the same from Python as in C (issue 27 item 5):
Graph.compile(budget_bytes=N) carries the budget into the plan's summary
and report, whose budget line compares it with budget_peak (the peak with
the outputs and gradients counted as caller memory), and
memgrad.torch.fx.Module(policy="budget", budget_bytes=N).report() shows that
line with a budget_peak within N, also at the smallest budget that fits,
which the planning error names."""
import copy
import re

import pytest

import memgrad as mg

BUDGET_LINE = re.compile(r"budget: [0-9.]+ MiB \((\d+) bytes\); budget peak "
                         r"[0-9.]+ MiB \((\d+) bytes\), (within|ABOVE) it")


def budget_line(report):
    """(budget, budget_peak, word) from a report's budget line."""
    m = BUDGET_LINE.search(report)
    assert m, report
    assert "not the parameters, the inputs, or the outputs and gradients" \
        in report, report
    return int(m.group(1)), int(m.group(2)), m.group(3)


def tanh_chain(policy, budget=0, depth=6, n=32, d=16):
    g = mg.Graph()
    h = g.input("x", "float32", (n, d))
    ws = []
    for i in range(depth):
        w = g.param("w%d" % i, "float32", (d, d))
        ws.append(w)
        h = g.tanh(g.matmul(h, w))
    loss = g.mse(h, g.input("t", "float32", (n, d)))
    grads = g.gradients([loss], ws, policy=policy, budget_bytes=budget)
    return g, loss, grads


def test_plan_carries_the_budget():
    g, loss, grads = tanh_chain("none")
    plain = g.compile([loss] + grads).summary()
    assert plain["budget_bytes"] == 0
    assert "budget:" not in g.compile([loss] + grads).report()
    budget = plain["budget_peak"] * 7 // 10
    g, loss, grads = tanh_chain("budget", budget)
    plan = g.compile([loss] + grads, budget_bytes=budget)
    s = plan.summary()
    assert s["budget_bytes"] == budget
    assert 0 < s["budget_peak"] <= budget
    # nothing is bound here: the prediction counts the gradients, the
    # budget's measure does not
    assert s["predicted_peak"] > s["budget_peak"]
    assert s["n_recompute"] > 0
    assert budget_line(plan.report()) == (budget, s["budget_peak"], "within")
    with pytest.raises(ValueError, match="budget_bytes"):
        g.compile([loss] + grads, budget_bytes=-1)


def test_smallest_budget_is_a_budget_peak():
    with pytest.raises(mg.MemgradError) as e:
        tanh_chain("budget", 1)
    msg = str(e.value)
    minimum = int(re.search(r"fits is (\d+) bytes", msg).group(1))
    none_needs = int(re.search(r"none needs (\d+)", msg).group(1))
    g, loss, grads = tanh_chain("none")
    assert g.compile([loss] + grads).summary()["budget_peak"] == none_needs
    g, loss, grads = tanh_chain("budget", minimum)
    plan = g.compile([loss] + grads, budget_bytes=minimum)
    assert plan.summary()["budget_peak"] == minimum
    assert budget_line(plan.report()) == (minimum, minimum, "within")


torch = pytest.importorskip("torch",
                            reason="the Module tests need torch")
import memgrad.torch as mgt  # noqa: E402


def _model():
    torch.manual_seed(0)
    nn = torch.nn
    # Tanh last: backward reads the output, which the budget counts as
    # the caller's
    return nn.Sequential(*[nn.Sequential(nn.Linear(64, 64), nn.Tanh())
                           for _ in range(8)]).double()


def test_module_report_shows_the_budget():
    ref = _model()
    x = torch.randn(256, 64, dtype=torch.float64)
    none = mgt.fx.Module(copy.deepcopy(ref), (x,), policy="none")
    assert "budget:" not in none.report()
    budget = none._cap.plan.summary()["budget_peak"] * 6 // 10
    mine = mgt.fx.Module(copy.deepcopy(ref), (x,), policy="budget",
                      budget_bytes=budget)
    got, peak, word = budget_line(mine.report())
    assert (got, word) == (budget, "within") and 0 < peak <= budget
    # the gradients are in the bridge's pool: the prediction counts them
    assert mine.predicted_peak > peak
    ref(x).sum().backward()
    mine(x).sum().backward()
    for p, q in zip(ref.parameters(), mine.parameters()):
        assert torch.allclose(q.grad, p.grad, rtol=1e-12, atol=1e-14)


def test_module_at_the_smallest_budget():
    ref = _model()
    x = torch.randn(256, 64, dtype=torch.float64)
    with pytest.raises(mgt.MemgradError) as e:
        mgt.fx.Module(copy.deepcopy(ref), (x,), policy="budget",
                   budget_bytes=1000)
    minimum = int(re.search(r"fits is (\d+) bytes", str(e.value)).group(1))
    mine = mgt.fx.Module(copy.deepcopy(ref), (x,), policy="budget",
                      budget_bytes=minimum)
    assert budget_line(mine.report()) == (minimum, minimum, "within")
