"""pytest suite of the memgrad Python package: graphs, gradients under
every policy checked against numpy, the forward/backward phases, DLPack in
and out (numpy, and torch when installed), and C errors as exceptions."""
import numpy as np
import pytest

import memgrad as mg

POLICIES = ["none", "memory", "speed"]


def mlp(policy, n=8, d=6, h=10, o=3, depth=3):
    g = mg.Graph()
    x = g.input("x", "float32", (n, d))
    t = g.input("t", "float32", (n, o))
    params, hh, fan = [], x, d
    for i in range(depth):
        out = o if i == depth - 1 else h
        w = g.param("w%d" % i, "float32", (fan, out))
        params.append(w)
        hh = g.matmul(hh, w)
        if i < depth - 1:
            hh = g.tanh(hh)
        fan = out
    loss = g.mse(hh, t)
    grads = g.gradients([loss], params, policy=policy)
    return g, x, t, params, loss, grads


def feeds(params, seed=0):
    r = np.random.default_rng(seed)
    f = {"x": r.standard_normal((8, 6)).astype(np.float32),
         "t": r.standard_normal((8, 3)).astype(np.float32)}
    for w in params:
        f[w.name] = (0.5 * r.standard_normal(w.shape)).astype(np.float32)
    return f


def numpy_grads(f, depth=3):
    acts, hh = [f["x"].astype(np.float64)], f["x"].astype(np.float64)
    ws = [f["w%d" % i].astype(np.float64) for i in range(depth)]
    for i, w in enumerate(ws):
        hh = hh @ w
        if i < depth - 1:
            hh = np.tanh(hh)
        acts.append(hh)
    diff = hh - f["t"]
    loss = np.mean(diff ** 2)
    gy = 2 * diff / diff.size
    grads = [None] * depth
    for i in reversed(range(depth)):
        grads[i] = acts[i].T @ gy
        gy = gy @ ws[i].T
        if i > 0:
            gy = gy * (1 - acts[i] ** 2)
    return loss, grads


@pytest.mark.parametrize("policy", POLICIES)
def test_gradients_match_numpy(policy):
    g, x, t, params, loss, grads = mlp(policy)
    plan = g.compile([loss] + grads)
    ex = mg.Executor()
    f = feeds(params)
    out = ex.run(plan, f)
    ref_loss, ref = numpy_grads(f)
    assert abs(float(out[loss]) - ref_loss) <= 1e-5 * abs(ref_loss)
    for gt, r in zip(grads, ref):
        np.testing.assert_allclose(out[gt], r, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("policy", POLICIES)
def test_forward_backward_phases(policy):
    g = mg.Graph()
    x = g.input("x", "float32", (8, 6))
    w1 = g.param("w1", "float32", (6, 10))
    w2 = g.param("w2", "float32", (10, 3))
    y = g.matmul(g.tanh(g.matmul(x, w1)), w2)
    gy = g.input("gy", "float32", (8, 3))
    grads = g.gradients([y], [w1, w2], policy=policy, grad_ys=[gy])
    plan = g.compile([y] + grads)
    r = np.random.default_rng(1)
    f = {x: r.standard_normal((8, 6)).astype(np.float32),
         w1: r.standard_normal((6, 10)).astype(np.float32),
         w2: r.standard_normal((10, 3)).astype(np.float32),
         gy: r.standard_normal((8, 3)).astype(np.float32)}
    f2 = dict(f)
    f2[x] = f[x] * 0.5
    ex = mg.Executor()
    one = {k: np.array(v) for k, v in ex.run(plan, f).items()}
    one2 = {k: np.array(v) for k, v in ex.run(plan, f2).items()}
    # two forward phases outstanding, backwards in reverse order
    ys1, s1 = ex.forward(plan, {k: v for k, v in f.items() if k is not gy})
    ys2, s2 = ex.forward(plan, {k: v for k, v in f2.items() if k is not gy})
    np.testing.assert_array_equal(ys1[y], one[y])
    np.testing.assert_array_equal(ys2[y], one2[y])
    g2 = ex.backward(plan, s2, f2)
    g1 = ex.backward(plan, s1, f)
    for gt in grads:
        np.testing.assert_array_equal(g1[gt], one[gt])
        np.testing.assert_array_equal(g2[gt], one2[gt])
    with pytest.raises(mg.MemgradError, match="already used"):
        ex.backward(plan, s1, f)
    s1.free()
    s2.free()
    pk = plan.phase_peaks()
    assert pk["pair"] == max(pk["forward"], pk["backward"]) and pk["saved"] > 0


@pytest.mark.parametrize("policy", POLICIES)
def test_reserved_is_the_plans_arena(policy):
    """Issue 28: a new Executor reserves exactly what the plan says, the
    first run included, and again after later runs."""
    g, x, t, params, loss, grads = mlp(policy, depth=6)
    plan = g.compile([loss] + grads)
    a = plan.arena()
    assert 0 < a["live_peak"] <= a["bytes"] <= 1.05 * a["live_peak"]
    assert a["reserved"] > a["bytes"]  # the outputs' own blocks
    ex = mg.Executor()
    for _ in range(3):
        out = ex.run(plan, feeds(params))
        assert ex.pool_stats()["bytes_reserved"] == a["reserved"]
        assert ex.pool_stats()["peak_bytes_in_use"] == plan.predicted_peak
        del out
    assert "arena:" in plan.report()


def test_report_peak_and_dot():
    g, x, t, params, loss, grads = mlp("memory", depth=6)
    plan = g.compile([loss] + grads)
    assert plan.predicted_peak > 0
    assert "checkpoint" in plan.report().lower()
    dot = plan.dot()
    assert dot.startswith("digraph") and "matmul" in dot


def test_attention_matches_numpy():
    """Graph.attention (the fused op) against softmax(q k^T s + mask) v in
    numpy, and its gradients against the composed ops'."""
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((2, 5, 4)) for _ in range(3))
    m = np.triu(np.full((5, 5), -np.inf), 1) + rng.standard_normal((5, 5))
    s = q @ k.transpose(0, 2, 1) * 0.5 + m
    w = np.exp(s - s.max(-1, keepdims=True))
    want = (w / w.sum(-1, keepdims=True)) @ v
    g = mg.Graph()
    tq, tk, tv = (g.input(n, "float64", (2, 5, 4)) for n in "qkv")
    tm = g.input("m", "float64", (5, 5))
    y = g.attention(tq, tk, tv, scale=0.5, mask=tm)
    loss = g.sum(g.mul(y, y))
    gq, = g.gradients([loss], [tq], policy="none")
    plan = g.compile([y, gq])
    out = mg.Executor().run(plan, {tq: q, tk: k, tv: v, tm: m})
    np.testing.assert_allclose(out[y], want, rtol=1e-12, atol=1e-12)
    # the composed ops' gradient of q
    g2 = mg.Graph()
    cq, ck, cv = (g2.input(n, "float64", (2, 5, 4)) for n in "qkv")
    cm = g2.input("m", "float64", (5, 5))
    sc = g2.add(g2.scale(g2.matmul(cq, ck, trans_b=True), 0.5), cm)
    y2 = g2.matmul(g2.softmax(sc, -1), cv)
    gq2, = g2.gradients([g2.sum(g2.mul(y2, y2))], [cq], policy="none")
    out2 = mg.Executor().run(g2.compile([gq2]),
                             {cq: q, ck: k, cv: v, cm: m})
    np.testing.assert_allclose(out[gq], out2[gq2], rtol=1e-10, atol=1e-12)
    with pytest.raises(mg.MemgradError, match="attention"):
        g.attention(tq, tk, tv, dropout_p=1.0)


def test_linear_cross_entropy_matches_numpy():
    """Graph.linear_cross_entropy (the fused, chunked op) against the mean
    cross-entropy of h w^T in numpy, and its gradients against the
    unfused cross_entropy(matmul(h, w^T)); a bad label and a bad shape are
    MemgradErrors naming the op."""
    rng = np.random.default_rng(46)
    n, d, v = 11, 4, 9
    h, w = rng.standard_normal((n, d)), rng.standard_normal((v, d))
    lab = rng.integers(0, v, n).astype(np.int64)
    z = h @ w.T
    zmax = z.max(1, keepdims=True)
    lse = (zmax + np.log(np.exp(z - zmax).sum(1, keepdims=True)))[:, 0]
    want = np.mean(lse - z[np.arange(n), lab])
    g = mg.Graph()
    th, tw = g.input("h", "float64", (n, d)), g.param("w", "float64", (v, d))
    tl = g.input("lab", "int64", (n,))
    loss = g.linear_cross_entropy(th, tw, tl, chunk_rows=4)
    gh, gw = g.gradients([loss], [th, tw], policy="none")
    ex = mg.Executor()
    out = ex.run(g.compile([loss, gh, gw]), {th: h, tw: w, tl: lab})
    np.testing.assert_allclose(out[loss], want, rtol=1e-13)
    g2 = mg.Graph()
    ch, cw = g2.input("h", "float64", (n, d)), g2.param("w", "float64", (v, d))
    cl = g2.input("lab", "int64", (n,))
    l2 = g2.cross_entropy(g2.matmul(ch, cw, trans_b=True), cl)
    gh2, gw2 = g2.gradients([l2], [ch, cw], policy="none")
    out2 = mg.Executor().run(g2.compile([gh2, gw2]), {ch: h, cw: w, cl: lab})
    np.testing.assert_allclose(out[gh], out2[gh2], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(out[gw], out2[gw2], rtol=1e-12, atol=1e-14)
    bad = lab.copy()
    bad[3] = -100
    with pytest.raises(mg.MemgradError, match="linear_cross_entropy"):
        ex.run(g.compile([loss]), {th: h, tw: w, tl: bad})
    with pytest.raises(mg.MemgradError, match=r"linear_cross_entropy.*w must"):
        g.linear_cross_entropy(th, g.param("w5", "float64", (v, d + 1)), tl)


def test_outputs_are_zero_copy_and_held():
    g = mg.Graph()
    x = g.input("x", "float32", (4,))
    y = g.scale(x, 2.0)
    plan = g.compile([y])
    ex = mg.Executor()
    a = ex.run(plan, {x: np.arange(4, dtype=np.float32)})[y]
    b = ex.run(plan, {x: np.ones(4, dtype=np.float32)})[y]
    # the first result's block is held by its array: the second run took
    # another one and left it alone
    np.testing.assert_array_equal(a, [0, 2, 4, 6])
    np.testing.assert_array_equal(b, [2, 2, 2, 2])
    assert a.__array_interface__["data"][0] != b.__array_interface__["data"][0]


def test_forward_outputs_are_zero_copy():
    g = mg.Graph()
    x = g.input("x", "float32", (4,))
    w = g.param("w", "float32", (4,))
    y = g.mul(x, w)
    gy = g.input("gy", "float32", (4,))
    gw, = g.gradients([y], [w], policy="none", grad_ys=[gy])
    plan = g.compile([y, gw])
    ex = mg.Executor()
    f = {x: np.arange(4, dtype=np.float32), w: np.full(4, 3, np.float32)}
    ys, s = ex.forward(plan, f)
    a = ys[y]
    assert ex.pool_stats()["exported_blocks"] == 1  # shared, not copied
    ex.backward(plan, s, {**f, gy: np.ones(4, np.float32)})
    s.free()  # the array still holds the block
    np.testing.assert_array_equal(a, [0, 3, 6, 9])
    held = ex.pool_stats()["exported_blocks"]  # y's, and the kept gradient's
    del ys, a
    assert ex.pool_stats()["exported_blocks"] == held - 1


def test_executor_num_threads():
    g, x, t, params, loss, grads = mlp("memory")
    plan = g.compile([loss] + grads)
    f = feeds(params)
    one = mg.Executor(num_threads=1).run(plan, f)
    two = mg.Executor(num_threads=2).run(plan, f)
    for k in [loss] + grads:
        np.testing.assert_array_equal(np.array(one[k]), np.array(two[k]))
    with pytest.raises(mg.MemgradError, match="num_threads"):
        mg.Executor(num_threads=-1)


def test_errors_carry_the_c_message():
    g = mg.Graph()
    a = g.input("a", "float32", (2, 3))
    b = g.input("b", "float32", (4, 5))
    with pytest.raises(mg.MemgradError, match="matmul"):
        g.matmul(a, b)
    y = g.relu(a)
    plan = g.compile([y])
    ex = mg.Executor()
    with pytest.raises(mg.MemgradError, match="not contiguous"):
        ex.run(plan, {a: np.zeros((3, 2), np.float32).T})
    with pytest.raises(mg.MemgradError, match="'a'.*f32"):
        ex.run(plan, {a: np.zeros((2, 3), np.float64)})
    with pytest.raises(mg.MemgradError, match="no memory bound"):
        ex.run(plan, {})
    with pytest.raises(mg.MemgradError, match="no gradient steps"):
        ex.forward(plan, {a: np.zeros((2, 3), np.float32)})


def test_torch_dlpack():
    torch = pytest.importorskip(
        "torch", reason="test_torch_dlpack needs torch (Debian python3-torch)")
    g = mg.Graph()
    x = g.input("x", "float32", (2, 3))
    y = g.sigmoid(x)
    plan = g.compile([y])
    ex = mg.Executor(wrap=torch.from_dlpack)
    xt = torch.randn(2, 3)
    out = ex.run(plan, {x: xt})[y]
    assert torch.allclose(out, torch.sigmoid(xt))


def test_import_maps_no_cuda():
    """`import memgrad` and a CPU run map no cuBLAS, cuDNN or CUDA runtime:
    the CUDA backend is a module loaded only for a CUDA executor (in a
    fresh interpreter, so that no other test's imports count)."""
    import subprocess
    import sys
    code = (
        "import memgrad as mg\n"
        "g = mg.Graph()\n"
        "x = g.input('x', 'float32', (2, 3))\n"
        "y = g.sum(g.tanh(x))\n"
        "import numpy\n"
        "mg.Executor().run(g.compile([y]), {'x': numpy.ones((2, 3), 'f4')})\n"
        "libs = ('libcublas', 'libcudnn', 'libcudart', 'libmemgrad-cuda')\n"
        "print([l.split()[-1] for l in open('/proc/self/maps')\n"
        "       if any(n in l for n in libs)])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == "[]", out


def test_graph_introspection_and_its_errors():
    """Graph.tensors and Graph.input_of (public C mg_graph_num_tensors,
    mg_tensor_op_name, mg_tensor_input): what they return, and a clear
    MemgradError for an input index the op does not have."""
    g = mg.Graph()
    x = g.input("x", "float32", (2, 3))
    y = g.tanh(x)
    assert [t.id for t in g.tensors("tanh")] == [y.id]
    assert [t.id for t in g.tensors()] == [x.id, y.id]
    assert g.tensors("no_such_op") == []
    assert g.input_of(y).id == x.id
    with pytest.raises(mg.MemgradError):
        g.input_of(y, 3)
    with pytest.raises(mg.MemgradError):
        g.input_of(x)  # a leaf has no inputs


def test_onnx_import_refuses_bad_bytes():
    """memgrad.onnx_import: a model file is untrusted input; bytes that do
    not parse are a MemgradError naming the importer, not a crash."""
    try:
        mg._lib.onnx()
    except ImportError as e:  # a build without protobuf-c
        pytest.skip("no libmemgrad_onnx: %s" % e)
    with pytest.raises(mg.MemgradError, match="onnx"):
        mg.onnx_import(b"not a model")
    with pytest.raises(mg.MemgradError, match="onnx"):
        mg.onnx_import(b"")


def test_aten_capture_ops_against_numpy():
    """The ops of the ATen-level capture (issue 45) through the Graph
    methods, against numpy: masked_fill with -inf (where) before a
    softmax, gather (take_along_axis), index_select (take), cumsum,
    clamp, a comparison as 1/0 floats, and the gradient of gather (a
    scatter-add of repeated indices) and clamp."""
    r = np.random.default_rng(45)
    g = mg.Graph()
    x = g.input("x", "float32", (3, 4))
    m = g.input("m", "float32", (3, 4))
    idx = g.input("idx", "int64", (3, 6))
    sel = g.input("sel", "int32", (5,))
    w = g.param("w", "float32", (3, 4))
    xw = g.mul(x, w)
    masked = g.where(m, g.fill("float32", (), -np.inf), xw)
    sm = g.softmax(masked, -1)
    gat = g.gather(xw, 1, idx)
    isel = g.index_select(xw, -1, sel)
    cs = g.cumsum(xw, 0)
    cl = g.clamp(xw, -0.5)
    lt = g.lt(x, w)
    y = g.add(g.sum(gat), g.sum(cl))
    (gw,) = g.gradients([y], [w])
    plan = g.compile([masked, sm, gat, isel, cs, cl, lt, gw])
    xv = r.standard_normal((3, 4)).astype(np.float32)
    wv = r.standard_normal((3, 4)).astype(np.float32)
    mv = (r.random((3, 4)) < 0.5).astype(np.float32)
    mv[:, 0] = 0  # no row masked whole
    iv = r.integers(0, 4, (3, 6)).astype(np.int64)
    sv = r.integers(0, 4, (5,)).astype(np.int32)
    out = mg.Executor().run(plan, {x: xv, m: mv, idx: iv, sel: sv, w: wv})
    out = {k: np.asarray(v) for k, v in out.items()}
    p = xv * wv
    ref = np.where(mv != 0, -np.inf, p).astype(np.float32)
    np.testing.assert_array_equal(out[masked], ref)
    e = np.exp(ref - ref.max(-1, keepdims=True))
    np.testing.assert_allclose(out[sm], e / e.sum(-1, keepdims=True),
                               rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(out[gat], np.take_along_axis(p, iv, 1))
    np.testing.assert_array_equal(out[isel], np.take(p, sv, axis=-1))
    np.testing.assert_allclose(out[cs], np.cumsum(p, 0), rtol=1e-6)
    np.testing.assert_array_equal(out[cl], np.maximum(p, np.float32(-0.5)))
    np.testing.assert_array_equal(out[lt], (xv < wv).astype(np.float32))
    count = np.zeros((3, 4), np.float32)
    np.add.at(count, (np.arange(3)[:, None], iv), 1)
    np.testing.assert_allclose(out[gw], xv * (count + (p >= -0.5)),
                               rtol=1e-6)
    with pytest.raises(mg.MemgradError, match="eq"):
        g.eq(x, idx)
