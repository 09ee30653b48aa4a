"""Keeping compact (issue 29 item 2) from Python: Graph.gradients(...,
compact=True) and memgrad.torch.fx.Module(..., compact=True) keep a relu's
sign as a bit mask and a max pool's argmax as a byte per output where the
backward pass reads nothing more; the gradients are the same bits and the
bytes kept for the backward pass are fewer. (The peak of so small a net is
in its forward pass, where a tensor and its packs are briefly live
together: whether it is lower depends on the workspace the host's pooling
kernels borrow there, so these tests compare what is kept.)"""
import pytest

import memgrad as mg

torch = pytest.importorskip("torch")


def stem(compact):
    g = mg.Graph()
    x = g.input("x", "float32", (2, 3, 16, 16))
    w = g.param("w", "float32", (8, 3, 3, 3))
    h = g.relu(g.conv2d(x, w, padding=(1, 1)))
    h = g.max_pool2d(h, (3, 3), (2, 2), padding=(1, 1))
    loss = g.mean(g.mul(h, h))
    grads = g.gradients([loss], [w], compact=compact)
    return g, loss, grads


def test_graph_compact_is_lower_and_bit_equal():
    import numpy as np
    rng = np.random.default_rng(0)
    xv = rng.standard_normal((2, 3, 16, 16)).astype(np.float32)
    wv = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    out = {}
    for compact in (False, True):
        g, loss, grads = stem(compact)
        plan = g.compile([loss] + grads)
        res = mg.Executor().run(plan, {"x": xv, "w": wv})
        out[compact] = (plan.phase_peaks(),
                        [np.array(res[t]) for t in [loss] + grads])
    assert out[True][0]["saved"] < out[False][0]["saved"]
    assert out[True][0]["backward"] <= out[False][0]["backward"]
    for a, b in zip(out[False][1], out[True][1]):
        assert a.tobytes() == b.tobytes()


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = torch.nn.BatchNorm2d(8)
        self.pool = torch.nn.MaxPool2d(3, 2, 1)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        h = self.pool(torch.relu(self.bn(self.conv(x))))
        return self.fc(h.mean((2, 3)))


def test_module_compact_is_lower_and_bit_equal():
    import memgrad.torch as mt
    torch.manual_seed(0)
    net = Net().train()
    x = torch.randn(2, 3, 16, 16)
    gy = torch.randn(2, 4)
    res = {}
    for compact in (False, True):
        state = {k: v.clone() for k, v in net.state_dict().items()}
        m = mt.fx.Module(net, (x,), policy="none", compact=compact)
        net.zero_grad(set_to_none=True)
        m.executor.reset_peak()
        m(x).backward(gy)
        # the parameters' gradients land in torch's memory: with those
        # bound, the predicted peak of the two phases is the pool's
        cap = m._cap
        bound = [g for g in cap.grads[len(cap.inputs):]
                 if g is not None and g != cap.seed]
        assert (m.executor.pool_stats()["peak_bytes_in_use"] ==
                cap.plan.phase_peaks(bound)["pair"])
        res[compact] = (m._cap.plan.phase_peaks(),
                        [p.grad.clone() for p in net.parameters()])
        net.load_state_dict(state)
    assert res[True][0]["saved"] < res[False][0]["saved"]
    assert res[True][0]["backward"] <= res[False][0]["backward"]
    for a, b in zip(res[False][1], res[True][1]):
        assert torch.equal(a, b)
