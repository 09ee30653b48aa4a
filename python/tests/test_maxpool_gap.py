"""maxpool_gap.py, which the float32 gradient checks use to refuse inputs
where rounding would decide a max pool's winner (issue 25 item 10)."""
import math

import pytest

torch = pytest.importorskip(
    "torch", reason="test_maxpool_gap needs torch (Debian python3-torch)")
import torch.nn as nn  # noqa: E402

from maxpool_gap import TIE_GAP, min_gap, untied_input  # noqa: E402


def test_gap_of_one_window():
    x = torch.tensor([[[[1.0, 2.0, 0.5], [2.0 - 1e-6, 0.0, 0.1],
                        [0.3, 0.2, 0.4]]]], dtype=torch.float64)
    assert min_gap(nn.MaxPool2d(3), x) == pytest.approx(0.5e-6, rel=1e-9)


def test_zero_windows_and_no_pools():
    x = torch.zeros(1, 2, 4, 4, dtype=torch.float64)
    assert min_gap(nn.MaxPool2d(2), x) == math.inf  # ReLU zeros tie alike
    assert min_gap(nn.Identity(), x) == math.inf
    x[0, 1, 0, 0] = -1.0  # its window still tops at two zeros: skipped
    x[0, 0, 2, 2], x[0, 0, 3, 3] = 4.0, 3.0
    assert min_gap(nn.MaxPool2d(2), x) == pytest.approx(0.25)


def test_ceil_mode_and_padding_windows():
    # 4x4, kernel 3, stride 2, ceil_mode: 2x2 windows, the last row and
    # column of windows reaching one past x (-inf, never the second)
    x = torch.arange(16, dtype=torch.float64).reshape(1, 1, 4, 4) + 1
    x[0, 0, 3, 3] = 15.5  # the last window holds 11, 12, 15, 15.5
    g = min_gap(nn.MaxPool2d(3, 2, ceil_mode=True), x)
    assert g == pytest.approx(0.5 / 15.5)
    # padding 1: a corner window sees 1, 2, 5, 6 and five -inf
    g = min_gap(nn.MaxPool2d(3, 2, padding=1), x)
    assert g == pytest.approx(min(1 / 6, 1 / 8, 0.5 / 15.5, 1 / 16))


def test_untied_input_redraws():
    pool = nn.Sequential(nn.MaxPool2d(2)).double()
    tied = torch.tensor([[[[1.0, 1.0 + 1e-7], [0.0, 0.0]]]])
    assert min_gap(pool, tied.double()) < TIE_GAP
    x = untied_input(pool, lambda s: torch.randn(
        1, 1, 2, 2, generator=torch.Generator().manual_seed(s)), first=tied)
    assert x is not tied and min_gap(pool, x.double()) >= TIE_GAP
    wide = torch.tensor([[[[1.0, 2.0], [0.0, 0.0]]]])
    assert untied_input(pool, lambda s: None, first=wide) is wide
