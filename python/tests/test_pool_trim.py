"""Executor.pool_trim (mg_exec_pool_trim) gives the pool's cached blocks
back: what a benchmark calls before measuring a fresh step's memory, and
what a user calls to hand memgrad's memory back between phases of work."""
import numpy as np

import memgrad as mg


def test_pool_trim_gives_the_cached_blocks_back():
    g = mg.Graph()
    x = g.param("x", "float32", (256, 256))
    y = g.sum(g.tanh(g.matmul(x, x)))
    (gx,) = g.gradients([y], [x])
    plan = g.compile([y, gx])
    ex = mg.Executor()
    x0 = np.random.default_rng(0).standard_normal((256, 256)).astype(
        np.float32)
    first = ex.run(plan, {"x": x0})
    want = np.array(first[gx])
    del first
    before = ex.pool_stats()
    assert before["bytes_reserved"] > before["bytes_in_use"]
    ex.pool_trim()
    after = ex.pool_stats()
    # only the blocks still in use (the outputs the run keeps) stay
    assert after["bytes_reserved"] == after["bytes_in_use"]
    again = ex.run(plan, {"x": x0})  # a new arena, the same values
    assert np.array_equal(np.asarray(again[gx]), want)
