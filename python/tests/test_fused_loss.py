"""The final projection and its cross-entropy, recognised in the ATen
capture and mapped onto memgrad's chunked linear_cross_entropy with
PyTorch's ignore_index (fuse_loss.py): Hugging Face's GPT-2 given labels
with -100 positions.

- float64 (the model's loss_function computing in the logits' dtype, as
  Hugging Face's does but without its float32 upcast): the loss, logits
  and gradients of two steps within 1e-9 relative of eager's, and every
  policy (memory, speed, budget) bit-equal to none;
- float32 with Hugging Face's own loss: fused too, within float32
  accuracy of eager, and the plan's peak far below the unfused capture's
  (the logits, their log-softmax and their gradient are not in it);
- the logits are returned and equal eager's (the fused op's forward
  reads them rather than making them again); a gradient through them is
  refused clearly (the fused plan has no path for it);
- a float64 model with Hugging Face's float32 upcast is left unfused,
  since eager then computes the loss in float32 (test_aten_capture.py
  checks that path against eager).
"""
import copy

import pytest

torch = pytest.importorskip("torch")
import memgrad.torch as mt  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from aten_models import _hf, gpt2  # noqa: E402


def loss_in_logits_dtype(logits, labels, vocab_size, ignore_index=-100,
                         **kwargs):
    """Hugging Face's ForCausalLMLoss less its logits.float(): labels
    shifted by a pad with ignore_index, mean over the kept positions."""
    labels = F.pad(labels, (0, 1), value=ignore_index)[..., 1:].contiguous()
    return F.cross_entropy(logits.view(-1, vocab_size), labels.view(-1),
                           ignore_index=ignore_index)


def _model(dtype, own_loss):
    torch.manual_seed(0)
    base, (ids,) = gpt2()
    base = base.to(dtype).train()
    if own_loss:
        base.loss_function = loss_in_logits_dtype
    labels = ids.clone()
    labels[0, :3] = -100
    labels[1, 7] = -100
    return base, ids, labels


def _steps(model, run, ids, labels, n=2):
    """n SGD steps; per step (loss, logits, gradients)."""
    out = []
    for _ in range(n):
        model.zero_grad(set_to_none=True)
        o = run(ids, labels=labels)
        o.loss.backward()
        out.append((o.loss.detach().clone(), o.logits.detach().clone(),
                    [p.grad.clone() for p in model.parameters()]))
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.1 * p.grad
    return out


def _rel(a, b):
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-300)).item()


def test_float64_fused_equals_eager_and_every_policy_bit_equal():
    base, ids, labels = _model(torch.float64, own_loss=True)
    ref = copy.deepcopy(base)
    start = copy.deepcopy(base.state_dict())
    w = mt.Module(base, (ids,), example_kwargs={"labels": labels},
                  policy="none")
    cap = w._cap
    assert len(cap.fused_losses) == 1 and len(cap.forward_only) == 1
    # the fused op reads the returned logits' matmul (no second GEMM)
    lce, = cap.graph.tensors("linear_cross_entropy")
    assert cap.graph.input_of(lce, 3) in cap.graph.tensors("matmul")
    got = _steps(base, w, ids, labels)
    want = _steps(ref, lambda i, labels: ref(i, labels=labels,
                                              use_cache=False), ids, labels)
    for (gl, gz, gg), (wl, wz, wg) in zip(got, want):
        assert _rel(gl, wl) <= 1e-12
        assert _rel(gz, wz) <= 1e-12
        for a, b in zip(gg, wg):
            assert _rel(a, b) <= 1e-9
    peaks = {"none": w.plan.summary()["budget_peak"]}
    for policy in ("memory", "speed", "budget"):
        base.load_state_dict(start)
        budget = (peaks["none"] + peaks["memory"]) // 2 \
            if policy == "budget" else None
        other = w.with_policy(policy, budget)
        peaks[policy] = other.plan.summary()["budget_peak"]
        again = _steps(base, other, ids, labels)
        for step, ((al, az, ag), (gl, gz, gg)) in enumerate(zip(again, got)):
            assert torch.equal(al, gl), (policy, step)
            assert torch.equal(az, gz), (policy, step)
            assert all(torch.equal(a, b) for a, b in zip(ag, gg)), \
                (policy, step)


def test_float32_hugging_face_loss_fused_and_peak_lower():
    base, ids, labels = _model(torch.float32, own_loss=False)
    ref = copy.deepcopy(base)
    w = mt.Module(base, (ids,), example_kwargs={"labels": labels},
                  policy="none")
    assert len(w._cap.fused_losses) == 1
    w.executor.reset_peak()
    got = _steps(base, w, ids, labels, n=1)[0]
    # the logits are in torch memory, and the prediction knows it
    assert w.executor.pool_stats()["peak_bytes_in_use"] == w.predicted_peak
    want = _steps(ref, lambda i, labels: ref(i, labels=labels,
                                              use_cache=False), ids,
                  labels, n=1)[0]
    assert _rel(got[0], want[0]) <= 1e-5
    assert _rel(got[1], want[1]) <= 1e-5
    for a, b in zip(got[2], want[2]):
        assert _rel(a, b) <= 1e-4


def test_fused_peak_below_the_unfused_capture():
    """Vocabulary 4096, 24 positions: the same model with its logits
    also read by the body (so not fused: mapped op by op) plans a higher
    peak, by at least the [N, V] logits' gradient."""
    T = pytest.importorskip("transformers")
    torch.manual_seed(0)
    base = T.GPT2LMHeadModel(_hf("GPT2", n_layer=1, n_embd=32, n_head=4,
                                 vocab_size=4096, n_positions=32)).train()
    ids = torch.randint(0, 4096, (2, 12))
    labels = ids.clone()
    labels[0, :3] = -100
    w = mt.Module(base, (ids,), example_kwargs={"labels": labels},
                  policy="none")
    assert len(w._cap.fused_losses) == 1
    fused_peak = w.plan.summary()["budget_peak"]

    class Unfused(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, ids, labels):
            o = self.m(ids, labels=labels, use_cache=False)
            return o.loss + 0 * o.logits.sum()
    u = mt.Module(Unfused(base), (ids, labels), policy="none")
    assert not u._cap.fused_losses
    logits_bytes = 24 * 4096 * 4
    assert fused_peak + logits_bytes <= u.plan.summary()["budget_peak"]


def test_gradient_through_the_logits_is_refused():
    base, ids, labels = _model(torch.float64, own_loss=True)
    w = mt.Module(base, (ids,), example_kwargs={"labels": labels},
                  policy="memory")
    o = w(ids, labels=labels)
    with pytest.raises(RuntimeError, match="gradient reached the logits"):
        (o.loss + o.logits.sum()).backward()
    # the logits read without a gradient are fine
    o = w(ids, labels=labels)
    acc = (o.logits.detach().argmax(-1) == ids).float().mean()
    o.loss.backward()
    assert 0 <= acc.item() <= 1


def test_float64_with_float32_upcast_is_not_fused():
    base, ids, labels = _model(torch.float64, own_loss=False)
    w = mt.Module(base, (ids,), example_kwargs={"labels": labels},
                  policy="none")
    assert not w._cap.fused_losses
