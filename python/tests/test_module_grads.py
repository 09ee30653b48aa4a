"""Where memgrad.torch.Module's gradients go (the ATen capture's Module):
into torch memory that becomes .grad as it is, or into an existing .grad
itself, never through a second gradient buffer or a copy. Each test holds
the data pointers memgrad was given for the gradients against .grad's, and
the values against eager PyTorch's bit for bit (the same float32 addition
AccumulateGrad does)."""
import pytest

torch = pytest.importorskip("torch")
import memgrad  # noqa: E402
import memgrad.torch as mt  # noqa: E402


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(),
                               torch.nn.Linear(16, 4))


def _x(k):
    return torch.randn(5, 8, generator=torch.Generator().manual_seed(k))


@pytest.fixture
def fed(monkeypatch):
    """The data pointers of every array each backward was given."""
    seen = []
    real = memgrad.Executor.backward

    def spy(self, plan, saved, feeds):
        seen.append({a.data_ptr() for a in feeds.values()})
        return real(self, plan, saved, feeds)
    monkeypatch.setattr(memgrad.Executor, "backward", spy)
    return seen


def _step(mg, x):
    mg(x).square().sum().backward()


def _alone(model, x):
    """The gradients of one step from None, memgrad's own."""
    mg = mt.Module(model, (x,), policy="none")
    model.zero_grad(set_to_none=True)
    _step(mg, x)
    return [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("policy", ["none", "memory"])
def test_first_grad_is_the_buffer_memgrad_wrote(fed, policy):
    model = _model()
    mg = mt.Module(model, (_x(0),), policy=policy)
    _step(mg, _x(0))
    for p in model.parameters():
        assert p.grad.data_ptr() in fed[-1], "AccumulateGrad copied"


@pytest.mark.parametrize("policy", ["none", "memory"])
def test_second_grad_added_into_grad_in_place(fed, policy):
    model = _model()
    ga, gb = _alone(model, _x(0)), _alone(model, _x(1))
    mg = mt.Module(model, (_x(0),), policy=policy)
    model.zero_grad(set_to_none=True)
    _step(mg, _x(0))
    ptrs = [p.grad.data_ptr() for p in model.parameters()]
    _step(mg, _x(1))
    for p, ptr, a, b in zip(model.parameters(), ptrs, ga, gb):
        assert p.grad.data_ptr() == ptr  # the same .grad, written in place
        assert ptr in fed[-1]  # memgrad added into it itself
        assert torch.equal(p.grad, a + b)  # AccumulateGrad's addition
    assert mg.accumulation_slot > 0


def test_zeroed_grad_is_written_over():
    model = _model()
    ga = _alone(model, _x(0))
    mg = mt.Module(model, (_x(0),), policy="none")
    model.zero_grad(set_to_none=False)
    mg.executor.accumulation_slot = 0
    _step(mg, _x(0))
    for p, a in zip(model.parameters(), ga):
        assert torch.equal(p.grad, a)
    assert mg.accumulation_slot == 0  # nothing was added


def test_autograd_grad_leaves_grad_alone(fed):
    model = _model()
    mg = mt.Module(model, (_x(0),), policy="none")
    _step(mg, _x(0))
    before = [p.grad.clone() for p in model.parameters()]
    got = torch.autograd.grad(mg(_x(1)).square().sum(),
                              list(model.parameters()))
    for p, b, g, w in zip(model.parameters(), before, got,
                          _alone(_model(), _x(1))):
        assert torch.equal(p.grad, b)
        assert torch.equal(g, w)


def test_backward_inputs_leaves_the_others_alone():
    model = _model()
    mg = mt.Module(model, (_x(0),), policy="none")
    _step(mg, _x(0))
    w0, b0 = model[0].weight.grad.clone(), model[0].bias.grad.clone()
    mg(_x(1)).square().sum().backward(inputs=[model[2].weight])
    assert torch.equal(model[0].weight.grad, w0)
    assert torch.equal(model[0].bias.grad, b0)
    want = _alone(_model(), _x(0))[2] + _alone(_model(), _x(1))[2]
    assert torch.equal(model[2].weight.grad, want)


def test_hooks_and_grads_in_place_false_see_the_gradient(fed):
    model = _model()
    mg = mt.Module(model, (_x(0),), policy="none")
    _step(mg, _x(0))
    seen = []
    h = model[2].bias.register_hook(lambda g: seen.append(g.clone()))
    ptr = model[2].bias.grad.data_ptr()
    _step(mg, _x(1))
    assert len(seen) == 1 and ptr not in fed[-1]
    h.remove()
    off = mt.Module(model, (_x(0),), policy="none", grads_in_place=False)
    ptrs = {p.grad.data_ptr() for p in model.parameters()}
    _step(off, _x(1))
    assert not ptrs & fed[-1]


def test_create_graph_gets_a_differentiable_gradient():
    model = _model()
    mg = mt.Module(model, (_x(0),), policy="none")
    _step(mg, _x(0))
    g0 = model[0].weight.grad.clone()
    mg(_x(1)).square().sum().backward(create_graph=True)
    want = g0 + _alone(_model(), _x(1))[0]
    assert torch.allclose(model[0].weight.grad, want, rtol=1e-6, atol=1e-7)
    model.zero_grad(set_to_none=True)


def test_tied_weights_accumulate_both_uses():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(),
                                torch.nn.Linear(8, 8))
    model[2].weight = model[0].weight  # tied
    ref = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(),
                              torch.nn.Linear(8, 8))
    ref.load_state_dict(model.state_dict())
    ref[2].weight = ref[0].weight
    mg = mt.Module(model, (_x(0),), policy="none")
    for k in (0, 1):
        _step(mg, _x(k))
        ref(_x(k)).square().sum().backward()
        for p, q in zip(model.parameters(), ref.parameters()):
            assert torch.allclose(p.grad, q.grad, rtol=1e-5, atol=1e-6)


def test_compile_backend_accumulates_as_eager():
    """torch.compile(backend="memgrad") runs its pieces through the same
    call: two backward passes without zero_grad add up as in eager."""
    torch._dynamo.reset()
    model = _model()
    ref = _model()
    comp = torch.compile(model, backend="memgrad")
    for k in (0, 1):
        comp(_x(k)).square().sum().backward()
        ref(_x(k)).square().sum().backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        assert torch.allclose(p.grad, q.grad, rtol=1e-5, atol=1e-6)
