"""The ATen capture on current PyTorch (memgrad.torch.Module and
torch.compile(backend="memgrad")): the behaviours a PyTorch user expects
of a wrapped module, the compile backend around ops memgrad lacks, and a
model's own loss. The model zoo (Hugging Face, timm) is test_aten_zoo.py;
the torchvision zoo through this capture is test_aten_torchvision.py."""
import copy
import io
import warnings

import pytest

torch = pytest.importorskip("torch")
import memgrad.torch as mt  # noqa: E402

if not mt.HAS_EXPORT:
    pytest.skip("the ATen capture needs PyTorch 2 (torch.export); this is "
                "%s" % torch.__version__, allow_module_level=True)

nn = torch.nn

from aten_models import V, _hf, _ids, gpt2  # noqa: E402
from test_aten_zoo import assert_close  # noqa: E402


def test_compile_backend_runs_what_it_cannot_map_in_eager():
    """A graph break and an op memgrad lacks: the pieces memgrad maps run
    in memgrad, the rest in eager PyTorch, and the gradients are eager's."""
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)

        def forward(self, x):
            h = torch.tanh(self.a(x))
            h = torch.nn.functional.softplus(h) * h.argmax(-1, keepdim=True)
            return self.b(torch.tanh(h)).sum()
    torch.manual_seed(0)
    net = Net().double()
    ref = copy.deepcopy(net)
    x = torch.randn(4, 8, dtype=torch.float64)
    torch._dynamo.reset()
    mt.backend.reset_report()
    torch.compile(net, backend="memgrad")(x).backward()
    ref(x).backward()
    for p, q in zip(net.parameters(), ref.parameters()):
        assert torch.allclose(p.grad, q.grad, rtol=1e-12, atol=1e-14)
    rows = mt.compile_report()
    # one graph: the mapped runs of nodes in memgrad, the rest in eager
    assert [r["ran"] for r in rows] == ["pieces"], rows
    assert rows[0]["pieces"] >= 1 and "argmax" in rows[0]["reason"]


def test_mixture_of_experts_is_refused_clearly():
    """Mixtral as transformers builds it by default (its experts through
    torch._grouped_mm, float32 only): Module names the routing ops it
    cannot map. test_aten_zoo has the same model with its experts as a
    loop (float64), refused as data-dependent control flow."""
    T = pytest.importorskip("transformers")
    cfg = _hf("Mixtral", num_hidden_layers=1, hidden_size=32,
              intermediate_size=64, num_attention_heads=4,
              num_key_value_heads=2, vocab_size=V, num_local_experts=4,
              num_experts_per_tok=2, max_position_embeddings=32)
    model = T.MixtralForCausalLM(cfg)
    with pytest.raises(mt.Unsupported, match="topk|sort|histc"):
        mt.Module(model, _ids())


# ------------------------------------------------------------ behaviour
def _bn_net():
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(),
                         nn.Dropout(0.5), nn.Flatten(), nn.LazyLinear(5))


def test_eval_and_train_take_effect_at_the_next_call():
    torch.manual_seed(0)
    net = _bn_net()
    x = torch.randn(4, 3, 8, 8)
    net(x)  # materialise the lazy layer
    w = mt.Module(net, (x,))
    w(x)
    net.eval()  # the user's own model, not the wrapper
    assert torch.allclose(w(x), net(x), atol=1e-6)
    net.train()
    y1, y2 = w(x), w(x)
    assert not torch.equal(y1, y2)  # dropout on again


def test_batch_norm_running_stats_update_as_in_eager():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4))
    ref = copy.deepcopy(net)
    x = torch.randn(4, 3, 8, 8)
    w = mt.Module(net, (x,))
    for _ in range(2):
        w(x)
        ref(x)
    bn, rbn = net[1], ref[1]
    assert torch.allclose(bn.running_mean, rbn.running_mean, atol=1e-6)
    assert torch.allclose(bn.running_var, rbn.running_var, atol=1e-6)
    assert int(bn.num_batches_tracked) == int(rbn.num_batches_tracked) == 2


def test_frozen_parameters_get_no_gradient():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 4))
    for p in net[0].parameters():
        p.requires_grad_(False)
    x = torch.randn(8, 16)
    w = mt.Module(net, (x,))
    w(x).sum().backward()
    assert net[0].weight.grad is None and net[2].weight.grad is not None
    # the plan computes no gradient for the frozen layer at all
    cap = w._cap
    names = {cap.leaves[i].name for i in cap.grad_leaves}
    assert not any(n.startswith("0.") for n in names), names


def test_every_parameter_frozen_runs_forward_only():
    """No leaf needs a gradient: the plan has no gradient steps and the
    call runs memgrad's forward alone (before, mg_exec_forward refused
    such a plan); an input that requires grad still gets one."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3))
    net.requires_grad_(False)
    x = torch.randn(4, 6)
    w = mt.Module(net, (x,))
    assert not w._cap.differentiable
    assert torch.allclose(w(x), net(x), atol=1e-6)
    xr = x.clone().requires_grad_(True)
    w(xr).sum().backward()
    xe = x.clone().requires_grad_(True)
    net(xe).sum().backward()
    assert torch.allclose(xr.grad, xe.grad, atol=1e-6)


def test_hooks_are_refused():
    net = nn.Sequential(nn.Linear(4, 4))
    net[0].register_forward_hook(lambda m, i, o: o * 2)
    with pytest.raises(NotImplementedError, match="forward_hooks"):
        mt.Module(net, (torch.randn(2, 4),))


class _Counter(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("count", torch.zeros((), dtype=torch.int64))
        self.register_buffer("shift", torch.zeros((), dtype=torch.int64))

    def forward(self, x):
        self.count += 1
        return self.lin(x) + self.shift + self.count


def test_buffers_written_and_read_as_in_eager():
    torch.manual_seed(0)
    net = _Counter()
    ref = copy.deepcopy(net)
    x = torch.randn(2, 4)
    w = mt.Module(net, (x,))
    net.count.zero_()
    for _ in range(3):
        assert torch.allclose(w(x), ref(x), atol=1e-6)
    assert int(net.count) == int(ref.count) == 3
    net.shift.fill_(5)
    ref.shift.fill_(5)
    assert torch.allclose(w(x), ref(x), atol=1e-6)


class _Dicty(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x, scale=None, extra=False):
        y = self.lin(x)
        if scale is not None:
            y = y * scale
        return {"y": y, "z": y.sum(-1)} if not extra else {"y": y + 1}


def test_keyword_arguments_and_dict_outputs():
    torch.manual_seed(0)
    net = _Dicty()
    x, s = torch.randn(2, 4), torch.randn(2, 3)
    w = mt.Module(net, (x,), example_kwargs={"scale": s})
    out = w(x, scale=s)
    assert set(out) == {"y", "z"}
    ref = net(x, scale=s)
    assert torch.allclose(out["y"], ref["y"]) and \
        torch.allclose(out["z"], ref["z"])
    (out["y"].sum() + out["z"].sum()).backward()
    assert net.lin.weight.grad is not None
    assert set(w(x, extra=True)) == {"y"}


def test_inference_mode_deepcopy_save_and_second_backward():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    x = torch.randn(3, 4)
    w = mt.Module(net, (x,))
    with torch.inference_mode():
        assert torch.allclose(w(x), net(x), atol=1e-6)
    w2 = copy.deepcopy(w)
    assert w2.module is not net
    assert torch.allclose(w2(x), net(x), atol=1e-6)
    with pytest.raises(TypeError, match="state_dict"):
        torch.save(w, io.BytesIO())
    y = w(x).sum()
    y.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="second time"):
        y.backward()


def test_predicted_peak_is_the_pools_measured_peak():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(64, 256), nn.Tanh(), nn.Linear(256, 256),
                        nn.Tanh(), nn.Linear(256, 8))
    x = torch.randn(32, 64)
    w = mt.Module(net, (x,), policy="none")
    w.executor.reset_peak()
    w(x).sum().backward()
    assert w.executor.pool_stats()["peak_bytes_in_use"] == w.predicted_peak


def test_capture_is_quiet():
    """No progress lines on stdout or stderr, no warnings."""
    import contextlib
    out, err = io.StringIO(), io.StringIO()
    net = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    with warnings.catch_warnings(record=True) as caught, \
            contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        warnings.simplefilter("always")
        mt.Module(net, (torch.randn(2, 4),))(torch.randn(2, 4))
    assert out.getvalue() == "" and err.getvalue() == ""
    assert not [w for w in caught if "memgrad" in str(w.filename)]


@pytest.mark.parametrize("act", ["gelu", "gelu_tanh", "silu", "relu6",
                                 "hardswish", "hardsigmoid"])
def test_activation_float64_gradients(act):
    """A float64 activation's input gradient through memgrad: within
    1e-14 of PyTorch's, except hardsigmoid, whose gradient PyTorch
    computes with 1/6 rounded to float32 (ATen's hardsigmoid_backward
    writes the constant as 1.0f / 6.0f: 0.1666666716337204, 3e-8 off);
    memgrad's is checked against the exact 1/6 instead."""
    F = torch.nn.functional
    fn = {"gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
          "silu": F.silu, "relu6": F.relu6, "hardswish": F.hardswish,
          "hardsigmoid": F.hardsigmoid}[act]

    class Act(nn.Module):
        def forward(self, x):
            return fn(x)
    x = torch.linspace(-4.1, 4.1, 37, dtype=torch.float64).reshape(1, 37)
    xr = x.clone().requires_grad_(True)
    try:
        w = mt.Module(Act(), (xr,))
    except mt.Unsupported as e:
        if "this libmemgrad has no" in str(e):
            pytest.skip(str(e).splitlines()[-1].strip())
        raise
    y = w(xr)
    y.sum().backward()
    got = xr.grad
    xe = x.clone().requires_grad_(True)
    fn(xe).sum().backward()
    want = xe.grad
    if act == "hardsigmoid":
        inside = (x > -3) & (x < 3)
        want = torch.where(inside, torch.full_like(x, 1.0 / 6.0),
                           torch.zeros_like(x))
        # PyTorch's own is float32's 1/6 (so this test notices if that
        # changes)
        assert (xe.grad[inside] - 1.0 / 6.0).abs().max() > 1e-9
    assert torch.allclose(y, fn(x), rtol=1e-15, atol=1e-15)
    assert (got - want).abs().max().item() <= 1e-14, act


def test_loss_inside_the_model_with_ignored_labels():
    """A Hugging Face model given labels computes its own loss (log
    softmax, gather of the labels' entries, -100 ignored through where):
    the ops come from the ATen table, and the loss and gradients are
    eager's. Hugging Face upcasts the logits to float32 for the loss, so
    a float64 model's loss is float32 in eager and in memgrad alike."""
    torch.manual_seed(0)
    base, (ids,) = gpt2()
    base = base.double()
    labels = ids.clone()
    labels[0, :3] = -100
    ref = copy.deepcopy(base)
    w = mt.Module(base, (ids,), example_kwargs={"labels": labels},
                  policy="memory")
    out = w(ids, labels=labels)
    want = ref(ids, labels=labels, use_cache=False)
    assert out.loss.dtype == want.loss.dtype == torch.float32
    assert abs(out.loss.item() - want.loss.item()) <= 1e-6 * abs(
        want.loss.item())
    out.loss.backward()
    want.loss.backward()
    assert_close("gpt2 loss", [[p.grad for p in base.parameters()]],
                 [[p.grad for p in ref.parameters()]], 1e-5)
