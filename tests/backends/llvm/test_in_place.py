"""Updates made in their variable's own array (``GraphCompiler.in_place_updates``): only
when nothing but the program holds the array, never visible in a value someone kept,
and the same numbers as the reference backend (rtol 1e-5 over several f32 SGD steps:
the GEMM fold's rounding, compounded)."""

import numpy as np
import pytest

import tfc
from tfc.runtime import Program

BIG = 8192  # a batch whose step lets the GIL go: the Python path (small ones: pystep)


def build(hidden: bool = False) -> tfc.Graph:
    """Linear regression (or a two-layer ReLU net): SGD on W by its gradient's GEMM."""
    rng = np.random.default_rng(5)
    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(tfc.float32, [None, 3], name="x")
        y = tfc.placeholder(tfc.float32, [None, 2], name="y")
        ws = [tfc.Variable(rng.normal(size=(3, 4 if hidden else 2)).astype(np.float32),
                           name="W1")]
        if hidden:
            ws.append(tfc.Variable(rng.normal(size=(4, 2)).astype(np.float32), name="W2"))
        h = x @ ws[0]
        if hidden:
            h = tfc.nn.relu(h) @ ws[1]
        loss = tfc.reduce_mean(tfc.square(h - y))
        grads = tfc.gradients(loss, ws)
        steps = [w.assign_sub(0.05 * gw) for w, gw in zip(ws, grads)]
        tfc.entry("train", feeds={"x": x, "y": y}, fetches={"loss": loss}, targets=steps)
    return g


def batch(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 3)).astype(np.float32), rng.normal(size=(n, 2)).astype(np.float32)


@pytest.mark.parametrize("n", [4, BIG])
@pytest.mark.parametrize("hidden", [False, True])
def test_updates_in_place_match_the_reference(n, hidden):
    g = build(hidden)
    llvm, ref = Program(g.as_module(), backend="llvm"), Program(g.as_module(),
                                                                  backend="reference")
    assert llvm._executable("train").meta.in_place  # the pattern is there: not a vacuous test
    f, r = llvm.callable("train", ["x", "y"], "loss"), ref.callable("train", ["x", "y"], "loss")
    same = 0
    for i in range(6):
        before = id(llvm.variables["W1"])
        x, y = batch(n, i)
        np.testing.assert_allclose(f(x, y), r(x, y), rtol=1e-5)
        for name in ref.variables:
            np.testing.assert_allclose(llvm.variables[name], ref.variables[name], rtol=1e-5,
                                       atol=1e-6)
        same += id(llvm.variables["W1"]) == before
    assert same >= 4  # after the first steps fill the pools, W1 stays one array


@pytest.mark.parametrize("n", [4, BIG])
def test_a_variable_someone_holds_is_never_changed(n):
    p = Program(build().as_module(), backend="llvm")
    f = p.callable("train", ["x", "y"], "loss")
    f(*batch(n, 0))
    held = p.variables["W1"]
    view = p.variables["W1"][1:]
    want = held.copy()
    for i in range(4):
        f(*batch(n, i))
        assert p.variables["W1"] is not held
    np.testing.assert_array_equal(held, want)
    np.testing.assert_array_equal(view, want[1:])
    del held
    now = p.variables["W1"].copy()
    f(*batch(n, 9))  # the view still holds the old array: it stays unchanged
    np.testing.assert_array_equal(view, want[1:])
    assert not np.array_equal(p.variables["W1"], now)


def test_artifacts_keep_which_updates_may_happen_in_place(tmp_path):
    p = Program(build(hidden=True).as_module(), backend="llvm")
    f = p.callable("train", ["x", "y"], "loss")
    f(*batch(4, 0))
    p.save(tmp_path / "m.tfc")
    q = tfc.runtime.load(tmp_path / "m.tfc", backend="llvm")
    assert q._executable("train").meta.in_place == p._executable("train").meta.in_place
    fq = q.callable("train", ["x", "y"], "loss")
    for i in range(3):
        x, y = batch(4, i + 1)
        np.testing.assert_array_equal(fq(x, y), f(x, y))
    for name in p.variables:
        np.testing.assert_array_equal(q.variables[name], p.variables[name])
