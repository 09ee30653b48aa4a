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


@pytest.mark.parametrize("name", sorted(ZOO) + [
    pytest.param(n, marks=pytest.mark.skipif(
        not SLOW, reason="slow (full-size model): MEMGRAD_SLOW_TESTS=1"))
    for n in sorted(SLOW_ZOO)])
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
