"""Where memgrad.torch's gradients live (issue 28): a parameter's gradient
lands in torch's memory, as PyTorch's AccumulateGrad would have it. With
no .grad (zero_grad(set_to_none=True)) memgrad computes it straight into a
torch tensor that becomes .grad, and the pool holds no gradient; with a
.grad of zeros (torch 1.13's zero_grad() zeroes in place) memgrad writes
the gradient into it, with no slot and no addition; into any other .grad
memgrad's one pool slot is added and given back at once, never pinned.
Either way two
backward calls accumulate to the float32 sum of each call's gradients,
bit for bit as PyTorch adds them, and after each step the pool reserves
what Plan.arena() predicts for that binding."""
import pytest

torch = pytest.importorskip("torch")
import memgrad.torch as mt  # noqa: E402


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(), torch.nn.Conv2d(8, 8, 3, padding=1),
        torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(8 * 8 * 8, 10))


def _batches():
    g = torch.Generator().manual_seed(1)
    return [torch.randn(4, 3, 8, 8, generator=g) for _ in range(2)]


def _grads(m):
    return [p.grad.clone() for p in m.parameters()]


@pytest.mark.parametrize("policy", ["none", "memory"])
def test_accumulates_as_pytorch(policy):
    model = _model()
    xa, xb = _batches()
    mg = mt.fx.Module(model, (xa,), policy=policy)
    state = {k: v.clone() for k, v in model.state_dict().items()}

    def one(x):
        model.load_state_dict(state)  # the same BatchNorm statistics
        mg.zero_grad(set_to_none=True)
        mg(x).square().sum().backward()
        return _grads(model)

    ga, gb = one(xa), one(xb)
    # from None: the first backward sets .grad, the second adds into it
    model.load_state_dict(state)
    mg.zero_grad(set_to_none=True)
    mg(xa).square().sum().backward()
    for p, g in zip(model.parameters(), ga):
        assert torch.equal(p.grad, g)
    mg(xb).square().sum().backward()
    for p, a, b in zip(model.parameters(), ga, gb):
        assert torch.equal(p.grad, a + b)  # PyTorch's float32 addition
    # from zeros (torch 1.13's default zero_grad): 0 + g, then + g'
    model.load_state_dict(state)
    mg.zero_grad(set_to_none=False)
    assert all(p.grad is not None and not p.grad.any()
               for p in model.parameters())
    mg(xa).square().sum().backward()
    for p, a in zip(model.parameters(), ga):
        assert torch.equal(p.grad, torch.zeros_like(a) + a)
    mg(xb).square().sum().backward()
    for p, a, b in zip(model.parameters(), ga, gb):
        assert torch.equal(p.grad, (torch.zeros_like(a) + a) + b)


@pytest.mark.parametrize("set_to_none,in_place", [(True, True),
                                                  (False, True),
                                                  (False, False)])
def test_pool_holds_no_gradient(set_to_none, in_place):
    model = _model()
    xa, _ = _batches()
    mg = mt.fx.Module(model, (xa,), policy="memory", grads_in_place=in_place)
    plan = mg._cap.plan
    ex = mg.executor
    n_in = len(mg._cap.inputs)
    params = list(model.parameters())
    # xa requires no grad, so the plan gives it none (as PyTorch)
    assert mg._cap.grads[:n_in] == [None] * n_in
    if set_to_none or in_place:
        # .grad is torch's: written by memgrad when it was None or zeros,
        # so the pool lends no accumulation slot
        want = plan.arena(bound=mg._cap.grads[n_in:])["reserved"]
        n_pool = 0
    else:
        # handed to AccumulateGrad from the pool, and given back
        want = plan.arena()["reserved"]
        n_pool = len(mg._cap.grads) - n_in
    if not set_to_none:  # as after a first step: every .grad exists
        for p in params:
            p.grad = torch.zeros_like(p)
    grads = [p.grad for p in params]
    allocs = None
    for step in range(3):
        mg.zero_grad(set_to_none=set_to_none)
        y = mg(xa)
        y.square().sum().backward()
        del y
        st = ex.pool_stats()
        # torch holds no block of the pool: those still shared are the
        # gradients the pool computed, which the executor keeps, as every
        # output of its last run, until its next run
        assert st["exported_blocks"] == n_pool, st
        assert st["bytes_reserved"] == want, (step, st, want)
        if allocs is None:
            allocs = st["system_allocs"]
        assert st["system_allocs"] == allocs, step
        assert all(p.grad is not None for p in params)
        if not set_to_none:  # the same .grad tensors, written in place
            assert all(p.grad is g for p, g in zip(params, grads))
        assert mg.memory_report()["accumulation_slot"] == 0


def test_slot_only_for_a_nonzero_grad():
    """Only a .grad that holds something is added into through the pool's
    slot: as large as the largest gradient so added, reserved beside the
    plan's arena, and what memory_report() says; the sum is PyTorch's."""
    model = _model()
    xa, xb = _batches()
    mg = mt.fx.Module(model, (xa,), policy="memory")
    params = list(model.parameters())
    n_in = len(mg._cap.inputs)
    want = mg._cap.plan.arena(bound=mg._cap.grads[n_in:])["reserved"]
    ex = mg.executor
    state = {k: v.clone() for k, v in model.state_dict().items()}
    mg(xa).square().sum().backward()  # from None
    ga = _grads(model)
    model.load_state_dict(state)
    mg.zero_grad(set_to_none=False)
    mg(xb).square().sum().backward()  # into zeros
    gb = _grads(model)
    assert ex.pool_stats()["bytes_reserved"] == want
    assert mg.memory_report()["accumulation_slot"] == 0
    # only the last layer's bias holds something: the slot is its size
    lin = model[-1]
    for p in params:
        p.grad.zero_()
    lin.bias.grad[0] = 1.0
    model.load_state_dict(state)
    mg(xa).square().sum().backward()
    slot = mt.size_class(lin.bias.numel() * 4)
    assert mg.memory_report()["accumulation_slot"] == slot
    assert ex.pool_stats()["bytes_reserved"] == want + slot
    for p, a in zip(params, ga):
        if p is lin.bias:
            one = torch.zeros_like(a)
            one[0] = 1.0
            assert torch.equal(p.grad, one + a)
        else:
            assert torch.equal(p.grad, a)
    # every .grad holds something now: the slot grows to the largest
    model.load_state_dict(state)
    mg(xb).square().sum().backward()
    slot = max(mt.size_class(p.numel() * 4) for p in params)
    assert mg.memory_report()["accumulation_slot"] == slot
    assert ex.pool_stats()["bytes_reserved"] == want + slot
    for p, a, b in zip(params, ga, gb):
        if p is lin.bias:
            assert torch.equal(p.grad, (one + a) + b)
        else:
            assert torch.equal(p.grad, a + b)


def test_hooked_parameter_goes_through_autograd():
    model = _model()
    xa, xb = _batches()
    mg = mt.fx.Module(model, (xa,), policy="none")
    w = model[0].weight
    seen = []
    w.register_hook(lambda g: seen.append(g.clone()))
    state = {k: v.clone() for k, v in model.state_dict().items()}
    mg(xa).square().sum().backward()
    first = w.grad.clone()
    model.load_state_dict(state)
    mg(xb).square().sum().backward()
    assert len(seen) == 2
    assert torch.equal(seen[0], first)
    assert torch.equal(w.grad, first + seen[1])


def test_memory_report_adds_up():
    model = _model()
    xa, _ = _batches()
    mg = mt.fx.Module(model, (xa,), policy="memory")
    r = mg.memory_report()
    n = sum(p.numel() * p.element_size() for p in model.parameters())
    assert r["grads_torch"] == r["params_torch"] == n
    assert r["pool_arena"] == mg._cap.plan.arena()["bytes"]
    assert r["pool_outputs"] > 0 and r["accumulation_slot"] == 0
    mg(xa).square().sum().backward()
    mg(xa).square().sum().backward()  # adds into a .grad: the slot
    r = mg.memory_report()
    assert r["accumulation_slot"] == max(
        mt.size_class(p.numel() * p.element_size())
        for p in model.parameters())


def test_input_gradient_only_when_required():
    """An input that does not require grad gets no gradient from the plan
    (PyTorch computes none either): the stem convolution's input gradient
    is not computed. One that does gets it, from a second plan, and the
    parameters' gradients are the same bits either way."""
    nn = torch.nn
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4),
                          nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3))
    x = torch.randn(2, 3, 6, 6)
    mg = mt.fx.Module(model, (x,), policy="none")
    cap = mg._cap
    assert cap.grads[0] is None
    mg(x).square().sum().backward()
    g_no = [p.grad.clone() for p in model.parameters()]
    assert x.grad is None
    mg.zero_grad(set_to_none=True)
    xr = x.clone().requires_grad_(True)
    mg(xr).square().sum().backward()
    cap2 = mg._plans[next(k for k in mg._plans if k[-1] == (True,))]
    assert cap2 is not cap and cap2.grads[0] is not None
    s_no, s_yes = cap.plan.summary(), cap2.plan.summary()
    # one more backward step: the input gradient of the convolution
    assert s_yes["n_backward"] == s_no["n_backward"] + 1
    assert s_yes["backward_flops"] > s_no["backward_flops"]
    for p, a in zip(model.parameters(), g_no):
        assert torch.equal(p.grad, a)
    # and it is x's gradient: torch's own, to rounding
    xt = x.clone().requires_grad_(True)
    model.zero_grad(set_to_none=True)
    model(xt).square().sum().backward()
    torch.testing.assert_close(xr.grad, xt.grad, rtol=1e-4, atol=1e-5)
