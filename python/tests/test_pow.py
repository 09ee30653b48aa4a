"""mg_pow on the CPU: squares and cubes are multiplied out (x * x,
x * x * x, as PyTorch computes them), other exponents go to libm's pow.
Each is checked forward against numpy and backward against central finite
differences in float64, negative bases included for the integer powers;
float32 cubes are bit-equal to PyTorch's x.pow(3)."""
import numpy as np
import pytest

import memgrad as mg


def _run(dtype, p, x):
    g = mg.Graph()
    xt = g.param("x", dtype, x.shape)
    y = g.sum(g.pow(xt, p))
    yy = g.pow(xt, p)
    (gx,) = g.gradients([y], [xt])
    out = mg.Executor().run(g.compile([y, yy, gx]), {"x": x})
    return float(out[y]), np.asarray(out[yy]), np.asarray(out[gx])


@pytest.mark.parametrize("p", [2.0, 3.0, 2.5, -1.0])
def test_pow_forward_and_finite_differences(p):
    r = np.random.default_rng(int(10 * p) + 20)
    x = r.uniform(-2, 2, (3, 5))
    if p != int(p):
        x = np.abs(x) + 0.3  # a fractional power needs positive bases
    if p < 0:
        x = np.where(np.abs(x) < 0.3, 0.3, x)  # away from the pole
    _, y, gx = _run("float64", p, x)
    np.testing.assert_allclose(y, x ** p, rtol=1e-15, atol=0)
    h = 1e-6
    fd = np.empty_like(x)
    for i in np.ndindex(x.shape):
        a, b = x.copy(), x.copy()
        a[i] += h
        b[i] -= h
        fd[i] = (_run("float64", p, a)[0] - _run("float64", p, b)[0]) / (2 * h)
    np.testing.assert_allclose(gx, fd, rtol=1e-7, atol=1e-9)


def test_float32_cube_is_pytorchs():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(3).uniform(-3, 3, (64,)).astype(np.float32)
    _, y, gx = _run("float32", 3.0, x)
    t = torch.from_numpy(x).requires_grad_()
    t.pow(3).sum().backward()
    assert np.array_equal(y, t.detach().pow(3).numpy())
    np.testing.assert_allclose(gx, t.grad.numpy(), rtol=2e-7)
