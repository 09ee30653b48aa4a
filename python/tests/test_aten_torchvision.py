"""The torchvision zoo of issue 27 through the ATen capture
(memgrad.torch.Module: torch.export and the core ATen decompositions):
each model trains two SGD steps beside PyTorch with the checks of
test_torch_zoo (float64 within 1e-9 at both steps; float32 within
max(1e-4, 2x PyTorch float32's own distance from float64) where that is
well posed, see test_torch_zoo's docstring)."""
import copy

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")
import memgrad.torch as mt  # noqa: E402

if not mt.HAS_EXPORT:
    pytest.skip("the ATen capture needs PyTorch 2 (torch.export); this is "
                "%s" % torch.__version__, allow_module_level=True)

from maxpool_gap import untied_input  # noqa: E402
from test_torch_zoo import (F32_MODELS, SLOW, SLOW_ZOO, ZOO,  # noqa: E402
                            assert_f32, assert_f64, build, two_steps)


# CI runs these (a convolution net, concatenation, hardswish and
# squeeze-excite, channel shuffle, ceil-mode max pools, a ViT, ConvNeXt's
# layer norms and stochastic depth, Swin's shifted windows); the rest of
# the zoo, which test_torch_zoo runs through torch.fx, with
# MEMGRAD_SLOW_TESTS=1: each is one or two more exports (CI time)
IN_CI = {"resnet18", "densenet121", "mobilenet_v3_small",
         "shufflenet_v2_x0_5", "squeezenet1_1", "vit_tiny", "convnext_mini",
         "swin_mini"}


def _slow(n, why):
    return pytest.param(n, marks=pytest.mark.skipif(
        not SLOW, reason="%s: MEMGRAD_SLOW_TESTS=1" % why))


@pytest.mark.parametrize("name", sorted(IN_CI) + [
    _slow(n, "beyond CI's representative subset")
    for n in sorted(set(ZOO) - IN_CI)] + [
    _slow(n, "slow (full-size model)") for n in sorted(SLOW_ZOO)])
def test_zoo_model_trains_like_torch_through_aten(name):
    size = ZOO.get(name) or SLOW_ZOO[name]
    base = build(name)
    x = torch.randn(2, 3, size, size)
    if name in F32_MODELS:  # no max-pool window decided by rounding
        x = untied_input(copy.deepcopy(base).double(), lambda seed: torch.randn(
            2, 3, size, size, generator=torch.Generator().manual_seed(seed)),
            first=x)
    labels = torch.tensor([1, 7])
    res64 = two_steps(copy.deepcopy(base).double(), x.double(), labels,
                      wrap=mt.Module)
    assert_f64(res64, name)
    if name in F32_MODELS:
        res32 = two_steps(base, x, labels, wrap=mt.Module)
        assert_f32(res32, res64, name)
