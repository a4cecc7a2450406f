"""Updates made in their variable's own array (``GraphCompiler.in_place_updates``): only
when nothing but the program holds the array, never visible in a value someone kept,
and the same numbers as the reference backend (rtol 1e-5 over several f32 SGD steps:
the GEMM fold's rounding, compounded)."""

import weakref

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
    same = []
    for i in range(8):
        before = weakref.ref(llvm.variables["W1"])  # (a strong one would stop the update)
        x, y = batch(n, i)
        np.testing.assert_allclose(f(x, y), r(x, y), rtol=1e-5)
        for name in ref.variables:
            np.testing.assert_allclose(llvm.variables[name], ref.variables[name], rtol=1e-5,
                                       atol=1e-6)
        same.append(llvm.variables["W1"] is before())
    # after the first steps (the pools filling, the GIL probe's calls) W1 stays one array
    assert all(same[-4:]), same


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


# ---- sparse updates: a variable's scatter (var.scatter_add/sub) ---------------------------

def build_embedding(rows: int = 50) -> tfc.Graph:
    """An embedding lookup trained by SGD: its update is a scatter of the touched rows."""
    rng = np.random.default_rng(7)
    with tfc.Graph().as_default() as g:
        ids = tfc.placeholder(tfc.int32, [None], name="ids")
        emb = tfc.Variable(rng.normal(size=(rows, 4)).astype(np.float32), name="E")
        loss = tfc.reduce_sum(tfc.square(tfc.gather(emb, ids)))
        train = tfc.train.GradientDescentOptimizer(0.1).minimize(loss)
        tfc.entry("train", feeds={"ids": ids}, fetches={"loss": loss}, targets=[train])
    return g


def test_a_scatter_update_is_made_in_place():
    """The step copies nothing of the table: the scatter adds into the variable's own
    array (the same array step after step), with the reference's numbers; an array
    someone holds is left as it was."""
    g = build_embedding()
    llvm, ref = Program(g.as_module(), backend="llvm"), Program(g.as_module(),
                                                                  backend="reference")
    exe = llvm._executable("train")
    assert exe.meta.in_place == ((exe.update_names.index("E"), exe.var_names.index("E")),)
    rng = np.random.default_rng(1)
    same = []
    for i in range(8):
        before = weakref.ref(llvm.variables["E"])
        ids = rng.integers(0, 50, 12).astype(np.int32)  # repeated ids among them
        np.testing.assert_allclose(llvm.run("train", ids=ids)["loss"],
                                   ref.run("train", ids=ids)["loss"], rtol=1e-5)
        np.testing.assert_allclose(llvm.variables["E"], ref.variables["E"], rtol=1e-5)
        same.append(llvm.variables["E"] is before())
    assert all(same[-4:]), same
    held = llvm.variables["E"]
    want = held.copy()
    llvm.run("train", ids=np.array([0, 1, 1], np.int32))
    np.testing.assert_array_equal(held, want)


SCATTER_THEN_READ = """
var @E : f32[6,3]
var @F : f32[6,3]

graph @train(%i: i32[N], %u: f32[N,3]) -> () {
  var.scatter_add @E, %i, %u
  %e = var.read @E : f32[6,3]
  var.assign_add @F, %e
  return
}
"""

TWO_SCATTERS = """
var @E : f32[6,3]
var @F : f32[6,3]

graph @train(%i: i32[N], %u: f32[N,3], %j: i32[N]) -> () {
  var.scatter_add @E, %i, %u
  var.scatter_sub @F, %j, %u
  return
}
"""


def _start() -> dict[str, np.ndarray]:
    return {"E": np.arange(18, dtype=np.float32).reshape(6, 3),
            "F": np.ones((6, 3), np.float32)}


@pytest.mark.parametrize("backend", ["llvm", "reference"])
def test_a_later_read_of_the_old_value_keeps_the_scatter_copy(backend):
    """F's update reads E's start-of-step value after E's scatter in the schedule (writes
    go last, in order): E's scatter goes to a buffer of its own, and F gets the old E."""
    from tfc.ir.parser import parse_module
    p = Program(parse_module(SCATTER_THEN_READ), _start(), backend=backend)
    if backend == "llvm":
        exe = p._executable("train")
        assert exe.update_names.index("E") not in dict(exe.meta.in_place)
    for _ in range(2):
        old = p.variables["E"].copy()
        f = p.variables["F"].copy()
        p.run("train", i=np.array([0, 5, 5], np.int32), u=np.ones((3, 3), np.float32))
        want = old.copy()
        want[0] += 1
        want[5] += 2
        np.testing.assert_array_equal(p.variables["E"], want)
        np.testing.assert_array_equal(p.variables["F"], f + old)


@pytest.mark.parametrize("backend", ["llvm", "reference"])
def test_a_bad_index_changes_no_variable_updated_in_place(backend):
    """Every variable scatter's indices are checked before the first variable is
    written, so both scatters are in place, and a bad index in either fails the step
    with E and F as they were."""
    from tfc.errors import ExecutionError
    from tfc.ir.parser import parse_module
    p = Program(parse_module(TWO_SCATTERS), _start(), backend=backend)
    if backend == "llvm":
        exe = p._executable("train")
        assert sorted(exe.meta.in_place) == sorted(
            (exe.update_names.index(n), exe.var_names.index(n)) for n in ("E", "F"))
    u = np.ones((2, 3), np.float32)
    good = np.array([1, 2], np.int32)
    p.run("train", i=good, u=u, j=good)
    for i, j in (([0, 6], [1, 2]), ([1, 2], [3, -1]), ([0, 9], [9, 0])):
        before = {n: p.variables[n].copy() for n in ("E", "F")}
        with pytest.raises(ExecutionError, match="out of range"):
            p.run("train", i=np.array(i, np.int32), u=u, j=np.array(j, np.int32))
        for n in before:
            np.testing.assert_array_equal(p.variables[n], before[n])
    p.run("train", i=good, u=u, j=good)
    want = _start()
    want["E"][1:3] += 2
    want["F"][1:3] -= 2
    for n in want:
        np.testing.assert_array_equal(p.variables[n], want[n])


SAME_INDICES = TWO_SCATTERS.replace("var.scatter_sub @F, %j, %u", "var.scatter_sub @F, %i, %u")


@pytest.mark.parametrize("backend", ["llvm", "reference"])
def test_scatters_at_the_same_indices_are_all_in_place(backend):
    """Indices checked once for both scatters (same row count): both updates in place
    (a sparse AdaGrad's accumulator and table); a bad index still fails the step before
    either variable changes."""
    from tfc.errors import ExecutionError
    from tfc.ir.parser import parse_module
    p = Program(parse_module(SAME_INDICES), _start(), backend=backend)
    if backend == "llvm":
        exe = p._executable("train")
        assert sorted(exe.meta.in_place) == sorted(
            (exe.update_names.index(n), exe.var_names.index(n)) for n in ("E", "F"))
    u = np.ones((2, 3), np.float32)
    p.run("train", i=np.array([1, 1], np.int32), u=u, j=np.zeros(2, np.int32))
    before = {n: p.variables[n].copy() for n in ("E", "F")}
    with pytest.raises(ExecutionError, match="index 6 is out of range"):
        p.run("train", i=np.array([0, 6], np.int32), u=u, j=np.zeros(2, np.int32))
    for n in before:
        np.testing.assert_array_equal(p.variables[n], before[n])
    want = _start()
    want["E"][1] += 2
    want["F"][1] -= 2
    for n in want:
        np.testing.assert_array_equal(p.variables[n], want[n])


def test_sparse_adagrad_updates_table_and_accumulator_in_place():
    rng = np.random.default_rng(2)
    with tfc.Graph().as_default() as g:
        ids = tfc.placeholder(tfc.int32, [None], name="ids")
        emb = tfc.Variable(rng.normal(size=(30, 4)), name="E")
        loss = tfc.reduce_sum(tfc.square(tfc.gather(emb, ids)))
        train = tfc.train.AdagradOptimizer(0.1).minimize(loss)
        tfc.entry("train", feeds={"ids": ids}, fetches={"loss": loss}, targets=[train])
    llvm, ref = Program(g.as_module(), backend="llvm"), Program(g.as_module(),
                                                                  backend="reference")
    exe = llvm._executable("train")
    assert len(exe.meta.in_place) == 2 == len(exe.update_names)
    for _ in range(4):
        ids = rng.integers(0, 30, 9).astype(np.int32)
        llvm.run("train", ids=ids)
        ref.run("train", ids=ids)
    for name in ref.variables:
        np.testing.assert_allclose(llvm.variables[name], ref.variables[name], rtol=1e-12)


@pytest.mark.parametrize("optimizer", ["sgd", "momentum"])
def test_every_shard_of_a_partitioned_table_is_updated_in_place(optimizer):
    """A partitioned table's shards (and their slots) are scattered at per-shard indices
    the compiler cannot prove in range: all are checked before the first write, so every
    update is in place, with the reference's numbers."""
    rng = np.random.default_rng(4)
    with tfc.Graph().as_default() as g:
        ids = tfc.placeholder(tfc.int32, [None], name="ids")
        emb = tfc.Variable(rng.normal(size=(31, 4)), name="E",
                           partitioner=tfc.fixed_size_partitioner(3))
        loss = tfc.reduce_sum(tfc.square(tfc.gather(emb, ids)))
        opt = (tfc.train.GradientDescentOptimizer(0.1) if optimizer == "sgd"
               else tfc.train.MomentumOptimizer(0.1, 0.9))
        tfc.entry("train", feeds={"ids": ids}, fetches={"loss": loss},
                  targets=[opt.minimize(loss)])
    llvm, ref = Program(g.as_module(), backend="llvm"), Program(g.as_module(),
                                                                  backend="reference")
    exe = llvm._executable("train")
    assert len(exe.meta.in_place) == len(exe.update_names) == (3 if optimizer == "sgd" else 6)
    for _ in range(4):
        ids = rng.integers(0, 31, 10).astype(np.int32)
        np.testing.assert_allclose(llvm.run("train", ids=ids)["loss"],
                                   ref.run("train", ids=ids)["loss"], rtol=1e-12)
    for name in ref.stored_variables:
        np.testing.assert_allclose(llvm.stored_variables[name], ref.stored_variables[name],
                                   rtol=1e-12)


def test_an_update_array_last_in_its_pool_can_be_updated_in_place():
    """``_sole`` counts what holds a variable's array: the caller's store and list of
    variables, the update pool and the binding's slot. The array last in its pool (a new
    update array, the two steps after it joined) is sole too, and one more holder makes
    it not so."""
    from tfc.backends.llvm.runtime.executable import _sole
    a = np.zeros(4, np.float32)
    store, variables, pool, in_slots = {"w": a}, [a], [np.ones(4, np.float32), a], [None, a]
    del a
    # (each call outside the asserts: pytest's rewriting keeps what they evaluate)
    last = _sole(variables[0], in_slots[1], pool)
    other = store["w"]
    held = _sole(variables[0], in_slots[1], pool)
    del other
    pool.reverse()  # (not last)
    first = _sole(variables[0], in_slots[1], pool)
    assert last and not held and first
