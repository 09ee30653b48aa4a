"""Issue 45's zoo through the ATen capture, on current PyTorch: Hugging
Face and timm models at small configurations with random init (see
aten_models.py), two SGD steps each, through memgrad.torch.Module and
through torch.compile(backend="memgrad"), beside eager PyTorch.

Checks, per parameter, as max |mine - eager| over max |eager| (the
denominator at least 1e-3 of the model's largest gradient entry, so that
a gradient that is zero in exact arithmetic, holding rounding noise in
both, is judged against the model's scale):
  - float64, both steps, Module and torch.compile: within 1e-9 of eager
    float64. LLaMA-style models (LLaMA, Qwen2, Mixtral) compute their
    RMSNorms in float32 in eager PyTorch too, even in a float64 model
    (`hidden_states.to(torch.float32)`); both sides carry float32
    rounding there, summed in other orders, so they are judged within
    1e-5 instead.
  - float32, Module, step 1 (both from the same weights): within
    max(1e-4, 2x eager float32's own distance from eager float64). CI
    runs it on one model of each family (FLOAT32_IN_CI); the rest with
    MEMGRAD_SLOW_TESTS=1, skipped otherwise with that reason.
  - every policy (memory, speed, and budget halfway between memory's
    budget peak and none's) gives
    gradients bit-equal to policy none's, at both steps. The other
    policies are planned from the same capture (Module.with_policy), so
    a model is exported once per dtype, not once per policy.
Mixtral's routing (topk, one_hot, index_add on the chosen experts) is
data-dependent: Module refuses it with a message naming the ops, and
torch.compile runs it in eager PyTorch and the rest in memgrad.

The eager references are computed once per model (a module-scoped
fixture) and shared by the Module and torch.compile tests.
"""
import copy
import inspect
import os

import pytest

torch = pytest.importorskip("torch")
import memgrad.torch as mt  # noqa: E402

if not mt.HAS_EXPORT:
    pytest.skip("the ATen capture needs PyTorch 2 (torch.export); this is "
                "%s" % torch.__version__, allow_module_level=True)

import aten_models as am  # noqa: E402

_T = am._timm
# batch norms see batch x H x W values per channel; where a last stage
# normalises only a few values, float64's rounding grows by the 1/std
# they divide by, so efficientnet, regnet and levit keep 8 values there
# (a batch of 8 at 32 x 32, which costs eager float64's slow depthwise
# convolutions a quarter of 4 at 64 x 64; levit's BatchNorm1d at batch 2
# and 64 x 64 normalised 2 tokens and missed 1e-9 by 1.6x at step 2)
NAMED = [am.gpt2, am.llama, am.qwen2, am.bert, am.bart, am.vit, am.mixtral,
         _T("efficientnet_b0", 32, 8), _T("regnety_002", 32, 8),
         _T("levit_128s", 64, 8, img_size=64),
         _T("vit_tiny_patch16_224", 32, img_size=32),
         _T("convnext_atto"), _T("resnest14d"),
         _T("mixer_s32_224", 64, img_size=64)]
UNNAMED = [am.gpt_neox, am.phi]
# models whose routing memgrad's static graph cannot hold
REFUSED = {"mixtral": "data-dependent control flow"}
FLOAT32_INSIDE = {"llama", "qwen2", "mixtral"}
# the float32 check on the others is run with MEMGRAD_SLOW_TESTS=1 (each
# is one more export of the model: CI time); these cover each family
FLOAT32_IN_CI = {"gpt2", "llama", "bert", "vit", "convnext_atto",
                 "resnest14d", "mixer_s32_224", "phi"}
SLOW = os.environ.get("MEMGRAD_SLOW_TESTS") == "1"


def _first(out):
    if torch.is_tensor(out):
        return out
    if hasattr(out, "logits"):
        return out.logits
    return out[0]


def loss_of(out):
    y = _first(out)
    # a fixed projection, so that zero-initialised heads (mixer) still
    # pass gradients back
    w = torch.linspace(-1, 1, y.numel(), dtype=y.dtype).reshape(y.shape)
    return (y * w).sum() + y.square().mean()


def _kwargs(model):
    return {"use_cache": False} if "use_cache" in inspect.signature(
        model.forward).parameters else {}


def steps(model, run, args, n=2):
    """n SGD steps (lr 1e-3): each step's gradients."""
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    out = []
    for _ in range(n):
        opt.zero_grad()
        loss_of(run(*args)).backward()
        out.append([p.grad.clone() if p.grad is not None else None
                    for p in model.parameters()])
        opt.step()
    return out


def rel_errors(got, want):
    top = max(w.abs().max().item() for w in want if w is not None)
    errs = []
    for i, (g, w) in enumerate(zip(got, want)):
        assert (g is None) == (w is None), i
        if w is None:
            errs.append(0.0)
            continue
        err = (g.double() - w.double()).abs().max().item()
        errs.append(err / max(w.abs().max().item(), 1e-3 * top))
    return errs


def assert_close(what, got, want, rtol):
    for step, (g, w) in enumerate(zip(got, want)):
        errs = rel_errors(g, w)
        worst = max(range(len(errs)), key=errs.__getitem__)
        assert errs[worst] <= rtol, "%s step %d: parameter %d off by %.3g" \
            % (what, step + 1, worst, errs[worst])


class Case:
    """One model: its initial float32 weights, its example, and the eager
    references, each computed on first use."""

    def __init__(self, make):
        torch.manual_seed(0)
        self.name = make.__name__
        base, self.args32 = make()
        self.base = base.train()
        self.kw = _kwargs(base)
        self._eager = {}

    def model(self, dtype):
        return copy.deepcopy(self.base).to(dtype)

    def args(self, dtype):
        return tuple(a.to(dtype) if a.is_floating_point() else a
                     for a in self.args32)

    def eager(self, dtype, n=2):
        if dtype not in self._eager:
            ref = self.model(dtype)
            self._eager[dtype] = steps(
                ref, lambda *a: ref(*a, **self.kw), self.args(dtype), n)
        return self._eager[dtype]

    def rtol(self):
        return 1e-5 if self.name in FLOAT32_INSIDE else 1e-9


@pytest.fixture(scope="module", params=NAMED + UNNAMED,
                ids=lambda m: m.__name__)
def case(request):
    return Case(request.param)


def _wrap(case, model, args, policy="none"):
    if case.name in REFUSED:
        with pytest.raises(mt.Unsupported, match=REFUSED[case.name]):
            mt.Module(model, args, policy=policy)
        pytest.skip("%s: refused by Module (as expected); see the "
                    "torch.compile test" % case.name)
    return mt.Module(model, args, policy=policy)


def test_module_float64_and_every_policy(case):
    """Module in float64: two steps within 1e-9 of eager's; then the
    same two steps under memory, speed and budget, bit-equal to none's."""
    args = case.args(torch.float64)
    mine = case.model(torch.float64)
    start = copy.deepcopy(mine.state_dict())
    w = _wrap(case, mine, args)
    got = steps(mine, w, args)
    assert_close(case.name, got, case.eager(torch.float64), case.rtol())
    peaks = {"none": w.plan.summary()["budget_peak"]}
    for policy in ("memory", "speed", "budget"):
        mine.load_state_dict(start)
        # a budget between memory's peak (a schedule that fits) and
        # none's, so that the budget policy has to choose
        budget = (peaks["none"] + peaks["memory"]) // 2 \
            if policy == "budget" else None
        other = w.with_policy(policy, budget)
        peaks[policy] = other.plan.summary()["budget_peak"]
        again = steps(mine, other, args)
        for step in range(2):
            assert all(torch.equal(a, b) for a, b in
                       zip(again[step], got[step])), (policy, step + 1)


def test_module_float32(case):
    """Module in float32, step 1: within max(1e-4, 2x eager float32's own
    distance from eager float64); step 2 runs."""
    if case.name not in FLOAT32_IN_CI and not SLOW:
        pytest.skip("float32 check of %s: MEMGRAD_SLOW_TESTS=1 (CI runs "
                    "it on %s)" % (case.name, ", ".join(sorted(
                        FLOAT32_IN_CI))))
    args = case.args(torch.float32)
    mine = case.model(torch.float32)
    got = steps(mine, _wrap(case, mine, args), args)
    ref64 = case.eager(torch.float64)[0]
    own = rel_errors(case.eager(torch.float32, 1)[0], ref64)
    errs = rel_errors(got[0], ref64)
    bad = [(i, e, o) for i, (e, o) in enumerate(zip(errs, own))
           if e > max(1e-4, 2 * o)]
    assert not bad, "%s float32: %d parameters off, first %s" % (
        case.name, len(bad), bad[0])
    assert all(g is None or torch.isfinite(g).all() for g in got[1])


def test_compile_float64(case):
    """torch.compile(backend="memgrad") in float64: two steps within
    1e-9 of eager's; the report says each graph ran in memgrad (whole,
    or in pieces around what memgrad does not map)."""
    args = case.args(torch.float64)
    mine = case.model(torch.float64)
    torch._dynamo.reset()
    mt.backend.reset_report()
    compiled = torch.compile(mine, backend="memgrad")
    got = steps(mine, lambda *a: compiled(*a, **case.kw), args)
    rows = mt.compile_report()
    if case.name not in REFUSED:
        assert rows and all(r["ran"] == "memgrad" for r in rows), \
            [(r["ran"], r["reason"]) for r in rows]
    else:  # routing in eager, around (or between) pieces in memgrad
        assert any(r["ran"] in ("memgrad", "pieces") for r in rows) and \
            all(r["reason"] for r in rows if r["ran"] != "memgrad"), \
            [(r["ran"], r["reason"]) for r in rows]
    assert_close(case.name + " compiled", got, case.eager(torch.float64),
                 case.rtol())
